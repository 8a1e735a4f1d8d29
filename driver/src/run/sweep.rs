//! A sweep's runs (I/O only): every variant of `capacity::sweep::grid` gets its own model
//! repository and servers and a capacity run (`run::run`) in the sweep's store, one at a time;
//! then the answer (ranked by `capacity::sweep`) is saved as the sweep run's document and its
//! report written. A variant that fails is listed with why, and the sweep goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lease::Lease;
use super::{DriverError, RunOptions, RunOutcome, Verdict, finish, store_url_for};
use crate::capacity::sweep::{
    self as plan, BestVariant, SweepAnswer, Variant, VariantResult, VariantStatus,
};
use crate::matrix::sweep::SweepSearch;
use crate::matrix::{self, Matrix, MountedConfig, model_config};
use stress_common::contract::RunId;
use stress_common::store::{NewRun, Store};
use tokio_util::sync::CancellationToken;

pub use crate::launcher::{LaunchFor, LaunchFuture, LauncherFor};

/// Where a swept model's config is: its directory in one of the group's repositories.
struct SweptModel {
    repository: usize,
    original: String,
}

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

    let context = VariantContext {
        options,
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
    let mut results = Vec::with_capacity(variants.len());
    let mut repositories_of: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    match sweep.search {
        SweepSearch::Grid => {
            for (variant, configs) in variants.iter().zip(&configs) {
                let (result, repos) = context.measure(variant, configs, &cancel).await;
                if let Some(r) = repos {
                    repositories_of.insert(variant.index, r);
                }
                results.push(result);
            }
        }
        SweepSearch::Quick => {
            let lens: Vec<usize> = sweep.parameters.values().map(Vec::len).collect();
            let template = &matrix.server_templates[template_name];
            let start = plan::quick_start(sweep, template, &originals);
            let spread = matrix.capacity.as_ref().map_or(0.05, |c| c.tolerance);
            let budget = sweep.max_variants as usize;
            let mut measured: BTreeMap<plan::Point, Option<f64>> = BTreeMap::new();
            while let plan::QuickStep::Measure(point) =
                plan::quick_step(&lens, &start, &measured, spread, budget)
            {
                if cancel.is_cancelled() {
                    break;
                }
                let variant = plan::variant_at(sweep, &point);
                let configs = &configs[variant.index - 1];
                let (result, repos) = context.measure(&variant, configs, &cancel).await;
                if let Some(r) = repos {
                    repositories_of.insert(variant.index, r);
                }
                measured.insert(point, result.max_qps);
                results.push(result);
            }
        }
    }

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
        Verdict::Fail {
            member: sweep.server_group.clone(),
            reason: format!(
                "no variant of the {} measured met the target p99 of {} ms",
                answer.grid_size, answer.target_p99_ms
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

/// What every variant's run shares.
struct VariantContext<'a> {
    options: &'a RunOptions,
    matrix: &'a Matrix,
    run_dir: &'a Path,
    run_id: &'a str,
    store_url: &'a str,
    repositories: &'a [PathBuf],
    /// Whether a variant's configs are mounted over the servers' own (kube) rather than put
    /// in a repository of links (local).
    mounted: bool,
    swept: &'a BTreeMap<String, SweptModel>,
    launcher_for: &'a LauncherFor<'a>,
    /// The grid's size, for the log.
    of: usize,
}

impl VariantContext<'_> {
    /// A variant's configs as the launcher mounts them (none locally: its repository has them).
    fn mounted_configs(&self, configs: &BTreeMap<String, String>) -> Vec<MountedConfig> {
        if !self.mounted {
            return Vec::new();
        }
        configs
            .iter()
            .filter_map(|(model, text)| {
                let s = self.swept.get(model)?;
                Some(MountedConfig {
                    model: model.clone(),
                    repository: self.repositories[s.repository].display().to_string(),
                    text: text.clone(),
                })
            })
            .collect()
    }

    /// Measures one variant (or says why not: a constraint, an interruption, a failure) and
    /// returns its result and its model repositories (None: it changes no model config).
    async fn measure(
        &self,
        variant: &Variant,
        configs: &BTreeMap<String, String>,
        cancel: &CancellationToken,
    ) -> (VariantResult, Option<Vec<String>>) {
        let sweep = self.matrix.sweep.as_ref().expect("a sweep matrix");
        let instances = (!configs.is_empty()).then(|| {
            configs
                .values()
                .filter_map(|c| plan::model_instances(c))
                .sum()
        });
        let mut result = VariantResult {
            index: variant.index,
            parameters: variant.parameters.clone(),
            status: VariantStatus::Skipped,
            run_id: None,
            max_qps: None,
            p99_ms: None,
            concurrency: None,
            ending: None,
            model_instances: instances,
            gpus: 0,
            server_memory_bytes: None,
            server_cpu_utilization: None,
            server_versions: Vec::new(),
            why: None,
        };
        if cancel.is_cancelled() {
            result.why = Some("the sweep was interrupted before it".into());
            return (result, None);
        }
        let limit = sweep
            .constraints
            .as_ref()
            .and_then(|c| c.model_instances_max);
        if let (Some(max), Some(n)) = (limit, instances)
            && n > max
        {
            result.why = Some(format!(
                "{n} model instances, over constraints.model_instances_max {max}"
            ));
            return (result, None);
        }
        let dir = self
            .run_dir
            .join("variants")
            .join(format!("v{}", variant.index));
        let repos = if self.swept.is_empty() || self.mounted {
            None
        } else {
            match crate::launcher::local::variant_repositories(
                &dir,
                self.repositories,
                &self
                    .swept
                    .iter()
                    .map(|(model, s)| (model.clone(), s.repository))
                    .collect(),
                configs,
            ) {
                Ok(r) => Some(r),
                Err(e) => {
                    result.status = VariantStatus::Failed;
                    result.why = Some(format!("its model repository: {e}"));
                    return (result, None);
                }
            }
        };
        let variant_id = format!("{}-v{}", self.run_id, variant.index);
        tracing::info!(variant = variant.index, of = self.of, parameters = %variant.label(), "sweep: measuring a variant");
        match run_variant(
            self.options,
            self.matrix,
            variant,
            repos.clone(),
            self.mounted_configs(configs),
            &dir,
            &variant_id,
            self.store_url,
            cancel.clone(),
            self.launcher_for,
        )
        .await
        {
            Ok(outcome) => measured(&mut result, sweep, &outcome),
            Err(e) => {
                result.status = VariantStatus::Failed;
                result.why = Some(e.to_string());
            }
        }
        result.run_id = Some(variant_id);
        (result, repos)
    }
}

/// Why a variant's capacity run has no report.
#[derive(Debug, thiserror::Error)]
enum VariantRunError {
    /// Its matrix could not be made.
    #[error(transparent)]
    Matrix(#[from] plan::VariantError),
    /// Its run directory (`dir`'s `logs`) could not be made.
    #[error("{}: {source}", .dir.display())]
    RunDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Its matrix does not serialise to YAML.
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::ser::Error),
    /// Its matrix file could not be written.
    #[error("{}: {source}", .file.display())]
    MatrixFile {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Its launcher could not be made (a kube run's objects not applied).
    #[error("launcher: {0}")]
    Launch(#[source] crate::launcher::LaunchError),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] DriverError),
}

/// One variant's capacity run, in the sweep's store; the error says why it has no report.
#[allow(clippy::too_many_arguments)]
async fn run_variant(
    options: &RunOptions,
    matrix: &Matrix,
    variant: &Variant,
    repositories: Option<Vec<String>>,
    mounted_configs: Vec<MountedConfig>,
    dir: &Path,
    run_id: &str,
    store_url: &str,
    cancel: CancellationToken,
    launcher_for: &LauncherFor<'_>,
) -> Result<RunOutcome, VariantRunError> {
    let mut variant_matrix = plan::variant_matrix(matrix, variant, repositories)?;
    if !mounted_configs.is_empty() {
        let sweep = matrix.sweep.as_ref().expect("a sweep matrix");
        // The swept group's template (the variant's own copy when others share it).
        if let Some(t) = variant_matrix.server_groups[&sweep.server_group]
            .template
            .clone()
            .and_then(|name| variant_matrix.server_templates.get_mut(&name))
        {
            t.mounted_configs = mounted_configs;
        }
    }
    std::fs::create_dir_all(dir.join("logs")).map_err(|source| VariantRunError::RunDir {
        dir: dir.into(),
        source,
    })?;
    let matrix_file = dir.join("matrix.yaml");
    let yaml = serde_saphyr::to_string(&variant_matrix)?;
    std::fs::write(&matrix_file, yaml).map_err(|source| VariantRunError::MatrixFile {
        file: matrix_file.clone(),
        source,
    })?;
    let variant_options = RunOptions {
        matrix: matrix_file.clone(),
        run_id: Some(run_id.into()),
        database_url: Some(store_url.into()),
        ..options.clone()
    };
    let mut launcher = launcher_for(LaunchFor {
        dir,
        run_id,
        matrix: &variant_matrix,
        matrix_file: &matrix_file,
    })
    .await
    .map_err(VariantRunError::Launch)?;
    super::run(
        &variant_options,
        launcher.as_mut(),
        &variant_matrix,
        dir,
        run_id,
        cancel,
    )
    .await
    .map_err(VariantRunError::Run)
}

/// What a variant's run measured: the capacity of the sweep's model (or the first answer), and
/// its servers' peak memory and mean CPU use.
fn measured(result: &mut VariantResult, sweep: &crate::matrix::sweep::Sweep, outcome: &RunOutcome) {
    let report = &outcome.report;
    let answer = report.capacity.as_ref().and_then(|c| {
        c.results
            .iter()
            .filter(|r| r.target_rps.is_none())
            .find(|r| sweep.model.as_ref().is_none_or(|m| &r.model == m))
    });
    match (&outcome.verdict, answer) {
        (Verdict::Pass, Some(a)) => {
            result.status = VariantStatus::Measured;
            result.max_qps = a.concurrency.map(|_| a.max_qps);
            result.p99_ms = a.concurrency.map(|_| a.p99_ms);
            result.concurrency = a.concurrency;
            result.ending = a.ending.map(|e| e.as_str().to_string());
        }
        (Verdict::Pass, None) => {
            result.status = VariantStatus::Failed;
            result.why = Some(match &sweep.model {
                Some(m) => format!("its capacity run has no answer for model {m:?}"),
                None => "its capacity run has no answer".into(),
            });
        }
        (verdict, _) => {
            result.status = VariantStatus::Failed;
            result.why = Some(finish::verdict_line(verdict));
        }
    }
    result.server_versions = report
        .servers
        .iter()
        .filter(|s| s.group == sweep.server_group)
        .filter_map(|s| s.version.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let servers = report
        .timeline
        .servers
        .iter()
        .filter(|s| s.group == sweep.server_group);
    let points: Vec<_> = servers.flat_map(|s| s.points.iter()).collect();
    result.server_memory_bytes = points
        .iter()
        .filter_map(|p| p.rss_bytes.or(p.cpu_memory_used_bytes))
        .reduce(f64::max);
    let cpu: Vec<f64> = points.iter().filter_map(|p| p.cpu_utilization).collect();
    result.server_cpu_utilization =
        (!cpu.is_empty()).then(|| cpu.iter().sum::<f64>() / cpu.len() as f64);
}
