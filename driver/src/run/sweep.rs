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
use super::{DriverError, RunOptions, RunOutcome, RunsOf, Verdict, finish, store_url_for};
use crate::capacity::sweep::{
    self as plan, BestVariant, SweepAnswer, Variant, VariantResult, VariantStatus,
};
use crate::capacity::sweep_schedule::{Schedule, Search};
use crate::launcher::ModelConfigs;
use crate::matrix::sweep::{Sweep, SweepSearch};
use crate::matrix::{self, Matrix, ServerTemplate, model_config};
use crate::report::Report;
use stress_common::contract::RunId;
use stress_common::store::{NewRun, Store};
use tokio_util::sync::CancellationToken;

pub use crate::launcher::{LaunchFor, LaunchFuture, LauncherFor};

/// Runs the sweep of `matrix` (which has one); the outcome's report is the sweep's.
pub async fn sweep(runs: RunsOf<'_>) -> Result<RunOutcome, DriverError> {
    let planned = SweepPlan::new(&runs).await?;
    let RunsOf {
        options,
        matrix,
        run_dir,
        run_id,
        cancel,
        launcher_for,
    } = runs;
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let store_url = store_url_for(run_dir, options.database_url.as_deref());
    let store = Store::connect(&store_url).await?;
    let sweep_run = RunId::new(run_id);
    let _lease =
        record_sweep_run(&store, options, matrix, &sweep_run, planned.launcher_name).await?;

    let variant_options = variant_options(options, sweep);
    let context = VariantContext {
        options: &variant_options,
        matrix,
        run_dir,
        run_id,
        store_url: &store_url,
        repositories: &planned.repositories,
        mounted: planned.mounted,
        swept: &planned.swept,
        launcher_for,
        of: planned.variants.len(),
    };
    let schedule = schedule(matrix, &planned.originals);
    let Measured {
        mut results,
        repositories_of,
    } = measure_all(&context, &schedule, &planned.configs, &cancel).await;

    plan::rank(&mut results);
    let mut best = best_variant(&results, &planned);
    if let Some(b) = &mut best {
        keep_best(b, &repositories_of, run_dir);
        if sweep.confirm_best && !cancel.is_cancelled() {
            let confirm = Confirm {
                options,
                context: &context,
                variants: &planned.variants,
                repositories_of: &repositories_of,
                cancel: &cancel,
            };
            confirm.best(b, &results[0]).await;
        }
    }
    let answer = sweep_answer(matrix, planned.variants.len(), results, best);
    store.save_document(&sweep_run, "", &answer).await?;
    let verdict = sweep_verdict(&answer, sweep, &cancel);
    let report = write_sweep_report(&store, &sweep_run, &verdict, matrix, run_dir).await?;
    Ok(RunOutcome {
        run_id: run_id.into(),
        run_dir: run_dir.into(),
        store_url,
        verdict,
        report,
    })
}

/// What a sweep measures, every config checked before anything starts.
struct SweepPlan {
    launcher_name: &'static str,
    /// Local variants get a repository of links; elsewhere their configs are mounted.
    mounted: bool,
    /// The swept group's model repositories, as its launcher names them.
    repositories: Vec<PathBuf>,
    swept: BTreeMap<String, SweptModel>,
    /// Each swept model's config.pbtxt as found.
    originals: BTreeMap<String, String>,
    variants: Vec<Variant>,
    /// Each variant's model configs (`configs[index - 1]`).
    configs: Vec<BTreeMap<String, String>>,
}

impl SweepPlan {
    /// Reads the swept models' configs and makes every variant's; a config that is missing or
    /// does not parse, or a variant's that cannot be made, is bad input naming the parameter.
    async fn new(runs: &RunsOf<'_>) -> Result<SweepPlan, DriverError> {
        let matrix = runs.matrix;
        let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
        let (launcher_name, read) = read_model_configs(runs).await?;
        let ModelConfigs { found, looked_in } = read;
        let repositories: Vec<PathBuf> = looked_in.iter().map(PathBuf::from).collect();
        let swept = checked_swept_models(matrix, found, &repositories)?;
        let originals: BTreeMap<String, String> = swept
            .iter()
            .map(|(m, s)| (m.clone(), s.original.clone()))
            .collect();
        let variants = plan::grid(sweep);
        let configs = variant_configs(matrix, &originals, &variants)?;
        Ok(SweepPlan {
            launcher_name,
            mounted: launcher_name != "local",
            repositories,
            swept,
            originals,
            variants,
            configs,
        })
    }
}

/// The swept group's server template, with its name.
fn swept_template(matrix: &Matrix) -> (&str, &ServerTemplate) {
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let group = &matrix.server_groups[&sweep.server_group];
    let template_name = group.template.as_deref().unwrap_or_default();
    (template_name, &matrix.server_templates[template_name])
}

/// The swept models' configs as the servers will see them, and the name of the launcher that
/// read them.
async fn read_model_configs(
    runs: &RunsOf<'_>,
) -> Result<(&'static str, ModelConfigs), DriverError> {
    let matrix = runs.matrix;
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let (_, template) = swept_template(matrix);
    // The sweep's own launcher reads the originals where the servers will see them (local:
    // the files; kube: a pod like the servers'); then its run's objects go.
    let mut reader = (runs.launcher_for)(LaunchFor {
        dir: runs.run_dir,
        run_id: runs.run_id,
        matrix,
        matrix_file: &runs.options.matrix,
    })
    .await
    .map_err(DriverError::Launch)?;
    let launcher_name = reader.name();
    let swept_models = plan::swept_models(sweep);
    let read = if swept_models.is_empty() {
        Ok(Default::default())
    } else {
        reader.read_model_configs(template, &swept_models).await
    };
    reader.cleanup(&BTreeSet::new()).await;
    drop(reader);
    Ok((launcher_name, read.map_err(DriverError::ReadConfigs)?))
}

/// Every swept model's config, found and parsed, or bad input naming the parameter.
fn checked_swept_models(
    matrix: &Matrix,
    mut found: BTreeMap<String, (usize, String)>,
    repositories: &[PathBuf],
) -> Result<BTreeMap<String, SweptModel>, DriverError> {
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let (template_name, _) = swept_template(matrix);
    let mut swept: BTreeMap<String, SweptModel> = BTreeMap::new();
    for model in plan::swept_models(sweep) {
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
    Ok(swept)
}

/// Each variant's model configs, in grid order, or bad input naming the parameter.
fn variant_configs(
    matrix: &Matrix,
    originals: &BTreeMap<String, String>,
    variants: &[Variant],
) -> Result<Vec<BTreeMap<String, String>>, DriverError> {
    let mut configs = Vec::with_capacity(variants.len());
    for v in variants {
        let c = plan::model_configs(originals, v).map_err(|why| {
            DriverError::Config(format!(
                "{}: variant {} ({}): {why}",
                matrix.locate_sweep_parameter(&why.param()),
                v.index,
                v.label()
            ))
        })?;
        configs.push(c);
    }
    Ok(configs)
}

/// Records the sweep's own run in its store and holds its lease (until the lease is dropped).
async fn record_sweep_run(
    store: &Store,
    options: &RunOptions,
    matrix: &Matrix,
    sweep_run: &RunId,
    launcher_name: &str,
) -> Result<Lease, DriverError> {
    store
        .create_run(&NewRun {
            run_id: sweep_run.into(),
            name: matrix.run.name.clone(),
            matrix_yaml: std::fs::read_to_string(&options.matrix).unwrap_or_default(),
            launcher: launcher_name.into(),
            started_at_ms: stress_common::now_ms(),
            fingerprint: Some(matrix::fingerprint(matrix)),
        })
        .await?;
    Ok(Lease::hold(
        store.clone(),
        sweep_run.clone(),
        Lease::ttl(matrix.run.fail_fast.store_outage_limit),
    )
    .await)
}

/// The options each variant's run gets.
fn variant_options(options: &RunOptions, sweep: &Sweep) -> RunOptions {
    // Parallel variants' progress goes to the log (their lines would overwrite each other).
    RunOptions {
        progress: if sweep.parallel > 1 {
            Some(false)
        } else {
            options.progress
        },
        ..options.clone()
    }
}

/// Which variants are measured in which order: the whole grid, or the quick search's waves.
fn schedule(matrix: &Matrix, originals: &BTreeMap<String, String>) -> Schedule {
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let (_, template) = swept_template(matrix);
    let search = match sweep.search {
        SweepSearch::Grid => Search::Grid,
        SweepSearch::Quick => Search::Quick {
            start: plan::quick_start(sweep, template, originals),
            spread: matrix.capacity.as_ref().map_or(0.05, |c| c.tolerance),
            budget: sweep.max_variants as usize,
        },
    };
    Schedule {
        lens: sweep.parameters.values().map(Vec::len).collect(),
        search,
        parallel: sweep.parallel.max(1) as usize,
    }
}

/// The first of the ranked `results`, if it was measured with an answer: the best variant,
/// its configs and their diffs from the originals.
fn best_variant(results: &[VariantResult], planned: &SweepPlan) -> Option<BestVariant> {
    results
        .first()
        .filter(|v| v.status == VariantStatus::Measured && v.max_qps.is_some())
        .map(|v| {
            let variant_configs = &planned.configs[v.index - 1];
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
                        let before =
                            model_config::normalized(&planned.originals[m]).unwrap_or_default();
                        (m.clone(), crate::report::diff::unified(&before, text))
                    })
                    .collect(),
                model_repository: None,
            }
        })
}

/// What to deploy: the best variant's repository, kept whole beside the report, and its
/// configs under `best/`.
fn keep_best(
    best: &mut BestVariant,
    repositories_of: &BTreeMap<usize, Vec<String>>,
    run_dir: &Path,
) {
    if let Some(repos) = repositories_of.get(&best.index) {
        best.model_repository = repos.first().cloned();
    }
    for (model, text) in &best.configs {
        let dir = run_dir.join("best").join(model);
        if std::fs::create_dir_all(&dir).is_ok() {
            let _ = std::fs::write(dir.join("config.pbtxt"), text);
        }
    }
}

/// What measuring the best variant again alone needs.
struct Confirm<'a> {
    options: &'a RunOptions,
    context: &'a VariantContext<'a>,
    variants: &'a [Variant],
    repositories_of: &'a BTreeMap<usize, Vec<String>>,
    cancel: &'a CancellationToken,
}

impl Confirm<'_> {
    /// Measures `best` (ranked first as `first`) again alone: its confirmed capacity, if that
    /// run answered, and the run's id either way.
    async fn best(&self, best: &mut BestVariant, first: &VariantResult) {
        let context = self.context;
        let (matrix, run_dir, run_id) = (context.matrix, context.run_dir, context.run_id);
        let variant = self.variants[best.index - 1].clone();
        let dir = run_dir
            .join("variants")
            .join(format!("v{}-confirm", best.index));
        let repos = self.repositories_of.get(&best.index).cloned();
        let mounted_configs = context.mounted_configs(&best.configs);
        let confirm_id = format!("{run_id}-v{}-confirm", best.index);
        tracing::info!(
            variant = best.index,
            "sweep: measuring the best variant again"
        );
        if let Ok(outcome) = run_variant(
            self.options,
            matrix,
            &variant,
            repos,
            mounted_configs,
            &dir,
            &confirm_id,
            context.store_url,
            self.cancel.clone(),
            context.launcher_for,
        )
        .await
        {
            let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
            let mut again = first.clone();
            measured(&mut again, sweep, &outcome);
            best.confirmed_qps = again.max_qps;
        }
        best.confirm_run_id = Some(confirm_id);
    }
}

/// The sweep's answer from its ranked `results` (ties and the Pareto front are theirs; the
/// best's confirmation changes neither).
fn sweep_answer(
    matrix: &Matrix,
    grid_size: usize,
    results: Vec<VariantResult>,
    best: Option<BestVariant>,
) -> SweepAnswer {
    let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
    let pareto = plan::pareto(&results);
    let tied_with_best = plan::ties(&results);
    let measured_count = results
        .iter()
        .filter(|r| r.status != VariantStatus::Skipped)
        .count();
    SweepAnswer {
        server_group: sweep.server_group.clone(),
        search: sweep.search.as_str().into(),
        target_p99_ms: matrix
            .capacity
            .as_ref()
            .map_or(0.0, |c| c.target_p99.as_secs_f64() * 1000.0),
        grid_size,
        measured: measured_count,
        variants: results,
        tied_with_best,
        pareto,
        best,
    }
}

/// Records the sweep's verdict, reads its report back and writes it.
async fn write_sweep_report(
    store: &Store,
    sweep_run: &RunId,
    verdict: &Verdict,
    matrix: &Matrix,
    run_dir: &Path,
) -> Result<Report, DriverError> {
    let report = finish::finish_and_read(
        store,
        sweep_run,
        verdict,
        matrix.run.fail_fast.store_outage_limit,
    )
    .await?;
    finish::write_report(run_dir, &report)?;
    // Its row in `driver runs` and `driver serve`'s list, as every run's.
    finish::save_summary(store, sweep_run, &report).await;
    Ok(report)
}

/// PASS with a best variant; ABORTED when interrupted; else FAIL, as no variant met the target.
fn sweep_verdict(answer: &SweepAnswer, sweep: &Sweep, cancel: &CancellationToken) -> Verdict {
    if cancel.is_cancelled() {
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
    }
}
