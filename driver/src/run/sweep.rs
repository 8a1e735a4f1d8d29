//! A sweep's runs (I/O only): every variant of `capacity::sweep::grid` gets its own model
//! repository and servers and a capacity run (`run::run`) in the sweep's store, up to
//! `parallel` at once (`sweep_variants`); the best is measured again alone; then the answer (ranked by `capacity::sweep`) is saved as the sweep run's document and its
//! report written. A variant that fails is listed with why, and the sweep goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lease::Lease;
use super::sweep_variants::{
    Measured, SweptModel, VariantContext, measure_all, measured, run_variant,
};
use super::{DriverError, RunOptions, RunOutcome, Verdict, finish, store_url_for};
use crate::capacity::sweep::{self as plan, BestVariant, SweepAnswer, VariantStatus};
use crate::capacity::sweep_schedule::{Schedule, Search};
use crate::matrix::sweep::SweepSearch;
use crate::matrix::{self, Matrix, model_config};
use stress_common::contract::RunId;
use stress_common::store::{NewRun, Store};
use tokio_util::sync::CancellationToken;

pub use crate::launcher::{LaunchFor, LaunchFuture, LauncherFor};

/// Runs the sweep of `matrix` (which has one); the outcome's report is the sweep's.
pub async fn sweep(
    options: &RunOptions,
    matrix: &Matrix,
    run_dir: &Path,
    run_id: &str,
    cancel: CancellationToken,
    launcher_for: &LauncherFor<'_>,
) -> Result<RunOutcome, DriverError> {
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let group = &matrix.server_groups[&sweep.server_group];
    let template_name = group.template.as_deref().unwrap_or_default();
    let template = &matrix.server_templates[template_name];

    // The sweep's own launcher reads the originals where the servers will see them (local:
    // the files; kube: a pod like the servers'); then its run's objects go.
    let mut reader = launcher_for(LaunchFor {
        dir: run_dir,
        run_id,
        matrix,
        matrix_file: &options.matrix,
    })
    .await
    .map_err(DriverError::Launch)?;
    let launcher_name = reader.name();
    // Local variants get a repository of links; elsewhere their configs are mounted.
    let mounted = launcher_name != "local";
    let swept_models = plan::swept_models(sweep);
    let read = if swept_models.is_empty() {
        Ok(Default::default())
    } else {
        reader.read_model_configs(template, &swept_models).await
    };
    reader.cleanup(&BTreeSet::new()).await;
    drop(reader);
    let crate::launcher::ModelConfigs {
        mut found,
        looked_in,
    } = read.map_err(DriverError::ReadConfigs)?;
    let repositories: Vec<PathBuf> = looked_in.iter().map(PathBuf::from).collect();

    // Before anything starts: every swept model's config, and every variant's, or bad input
    // naming the parameter.
    let mut swept: BTreeMap<String, SweptModel> = BTreeMap::new();
    for model in swept_models {
        let first_param = sweep
            .parameters
            .keys()
            .find(|p| p.starts_with(&format!("models.{model}.")))
            .cloned()
            .unwrap_or_default();
        let Some((repository, original)) = found.remove(&model) else {
            return Err(DriverError::Config(format!(
                "{}: model {model:?} has no config.pbtxt in the model repositories of server \
                 template {template_name:?} (looked in {})",
                matrix.locate_sweep_parameter(&first_param),
                repositories
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if let Err(e) = model_config::parse(&original) {
            return Err(DriverError::Config(format!(
                "{}: {}: {e}",
                matrix.locate_sweep_parameter(&first_param),
                repositories[repository]
                    .join(&model)
                    .join("config.pbtxt")
                    .display()
            )));
        }
        swept.insert(
            model,
            SweptModel {
                repository,
                original,
            },
        );
    }
    let originals: BTreeMap<String, String> = swept
        .iter()
        .map(|(m, s)| (m.clone(), s.original.clone()))
        .collect();
    let variants = plan::grid(sweep);
    let mut configs = Vec::with_capacity(variants.len());
    for v in &variants {
        let c = plan::model_configs(&originals, v).map_err(|why| {
            DriverError::Config(format!(
                "{}: variant {} ({}): {why}",
                matrix.locate_sweep_parameter(&why.param()),
                v.index,
                v.label()
            ))
        })?;
        configs.push(c);
    }

    let store_url = store_url_for(run_dir, options.database_url.as_deref());
    let store = Store::connect(&store_url).await?;
    let sweep_run = RunId::new(run_id);
    let started_at_ms = stress_common::now_ms();
    store
        .create_run(&NewRun {
            run_id: run_id.into(),
            name: matrix.run.name.clone(),
            matrix_yaml: std::fs::read_to_string(&options.matrix).unwrap_or_default(),
            launcher: launcher_name.into(),
            started_at_ms,
            fingerprint: Some(matrix::fingerprint(matrix)),
        })
        .await?;
    let _lease = Lease::hold(
        store.clone(),
        sweep_run.clone(),
        Lease::ttl(matrix.run.fail_fast.store_outage_limit),
    )
    .await;

    // Parallel variants' progress goes to the log (their lines would overwrite each other).
    let variant_options = RunOptions {
        progress: if sweep.parallel > 1 {
            Some(false)
        } else {
            options.progress
        },
        ..options.clone()
    };
    let context = VariantContext {
        options: &variant_options,
        matrix,
        run_dir,
        run_id,
        store_url: &store_url,
        repositories: &repositories,
        mounted,
        swept: &swept,
        launcher_for,
        of: variants.len(),
    };
    let search = match sweep.search {
        SweepSearch::Grid => Search::Grid,
        SweepSearch::Quick => Search::Quick {
            start: plan::quick_start(sweep, template, &originals),
            spread: matrix.capacity.as_ref().map_or(0.05, |c| c.tolerance),
            budget: sweep.max_variants as usize,
        },
    };
    let schedule = Schedule {
        lens: sweep.parameters.values().map(Vec::len).collect(),
        search,
        parallel: sweep.parallel.max(1) as usize,
    };
    let Measured {
        mut results,
        repositories_of,
    } = measure_all(&context, &schedule, &configs, &cancel).await;

    plan::rank(&mut results);
    let pareto = plan::pareto(&results);
    let mut best = results
        .first()
        .filter(|v| v.status == VariantStatus::Measured && v.max_qps.is_some())
        .map(|v| {
            let variant_configs = &configs[v.index - 1];
            BestVariant {
                index: v.index,
                parameters: v.parameters.clone(),
                max_qps: v.max_qps.unwrap_or_default(),
                confirmed_qps: None,
                confirm_run_id: None,
                configs: variant_configs.clone(),
                config_diffs: variant_configs
                    .iter()
                    .map(|(m, text)| {
                        let before = model_config::normalized(&originals[m]).unwrap_or_default();
                        (m.clone(), crate::report::diff::unified(&before, text))
                    })
                    .collect(),
                model_repository: None,
            }
        });
    if let Some(b) = &mut best {
        // What to deploy: the best variant's repository, kept whole beside the report.
        if let Some(repos) = repositories_of.get(&b.index) {
            b.model_repository = repos.first().cloned();
        }
        for (model, text) in &b.configs {
            let dir = run_dir.join("best").join(model);
            if std::fs::create_dir_all(&dir).is_ok() {
                let _ = std::fs::write(dir.join("config.pbtxt"), text);
            }
        }
        if sweep.confirm_best && !cancel.is_cancelled() {
            let variant = variants[b.index - 1].clone();
            let dir = run_dir
                .join("variants")
                .join(format!("v{}-confirm", b.index));
            let repos = repositories_of.get(&b.index).cloned();
            let mounted_configs = context.mounted_configs(&b.configs);
            let confirm_id = format!("{run_id}-v{}-confirm", b.index);
            tracing::info!(variant = b.index, "sweep: measuring the best variant again");
            if let Ok(outcome) = run_variant(
                options,
                matrix,
                &variant,
                repos,
                mounted_configs,
                &dir,
                &confirm_id,
                &store_url,
                cancel.clone(),
                launcher_for,
            )
            .await
            {
                let mut again = results[0].clone();
                measured(&mut again, sweep, &outcome);
                b.confirmed_qps = again.max_qps;
            }
            b.confirm_run_id = Some(confirm_id);
        }
    }
    let measured_count = results
        .iter()
        .filter(|r| r.status != VariantStatus::Skipped)
        .count();
    let answer = SweepAnswer {
        server_group: sweep.server_group.clone(),
        search: sweep.search.as_str().into(),
        target_p99_ms: matrix
            .capacity
            .as_ref()
            .map_or(0.0, |c| c.target_p99.as_secs_f64() * 1000.0),
        grid_size: variants.len(),
        measured: measured_count,
        variants: results,
        pareto,
        best,
    };
    store.save_document(&sweep_run, "", &answer).await?;
    let verdict = if cancel.is_cancelled() {
        Verdict::Aborted("interrupted".into())
    } else if answer.best.is_some() {
        Verdict::Pass
    } else {
        let excluded = answer
            .variants
            .iter()
            .any(|v| v.status == VariantStatus::Excluded);
        Verdict::Fail {
            member: sweep.server_group.clone(),
            reason: format!(
                "no variant of the {} measured met the target p99 of {} ms{}",
                answer.grid_size,
                answer.target_p99_ms,
                if excluded { " and the constraints" } else { "" }
            ),
        }
    };
    let report = finish::finish_and_read(
        &store,
        &sweep_run,
        &verdict,
        matrix.run.fail_fast.store_outage_limit,
    )
    .await?;
    finish::write_report(run_dir, &report)?;
    // Its row in `driver runs` and `driver serve`'s list, as every run's.
    finish::save_summary(&store, &sweep_run, &report).await;
    Ok(RunOutcome {
        run_id: run_id.into(),
        run_dir: run_dir.into(),
        store_url,
        verdict,
        report,
    })
}
