//! A sweep's variants measured (I/O only): each gets its own model repository, servers,
//! workers and launcher and is a capacity run (`run::run`) in the sweep's store; up to the
//! sweep's `parallel` run at once, started as `capacity::sweep_schedule` says (grid order, or
//! the quick search's current wave), their results recorded in the order they started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tracing::Instrument;

use super::{DriverError, RunOptions, RunOutcome, Verdict, finish};
use crate::capacity::sweep::{self as plan, Variant, VariantResult, VariantStatus};
use crate::capacity::sweep_schedule::{Next, Schedule};
use crate::launcher::{LaunchFor, LauncherFor};
use crate::matrix::{Matrix, MountedConfig};
use tokio_util::sync::CancellationToken;

/// Where a swept model's config is: its directory in one of the group's repositories.
pub(super) struct SweptModel {
    pub repository: usize,
    pub original: String,
}

/// What the variants measured: their results in the order they started, and each changed
/// repository by variant index.
pub(super) struct Measured {
    pub results: Vec<VariantResult>,
    pub repositories_of: BTreeMap<usize, Vec<String>>,
}

/// Measures the variants `schedule` chooses, up to its `parallel` at once, each with its
/// configs (`configs[index - 1]`). Once cancelled, the quick search starts nothing more; the
/// grid's remaining variants are listed as interrupted.
pub(super) async fn measure_all(
    context: &VariantContext<'_>,
    schedule: &Schedule,
    configs: &[BTreeMap<String, String>],
    cancel: &CancellationToken,
) -> Measured {
    let sweep = context.matrix.sweep.as_ref().expect("a sweep matrix");
    let grid = matches!(
        schedule.search,
        crate::capacity::sweep_schedule::Search::Grid
    );
    let mut measured: BTreeMap<plan::Point, Option<f64>> = BTreeMap::new();
    let mut in_flight: BTreeSet<plan::Point> = BTreeSet::new();
    let mut running = FuturesUnordered::new();
    let mut done: Vec<(usize, VariantResult)> = Vec::new();
    let mut repositories_of = BTreeMap::new();
    let mut started = 0;
    loop {
        let next = if !grid && cancel.is_cancelled() {
            if in_flight.is_empty() {
                Next::Done
            } else {
                Next::Wait
            }
        } else {
            schedule.next(&measured, &in_flight)
        };
        match next {
            Next::Start(points) => {
                for point in points {
                    let variant = plan::variant_at(sweep, &point);
                    let configs = &configs[variant.index - 1];
                    let order = started;
                    started += 1;
                    in_flight.insert(point.clone());
                    let span = tracing::info_span!("variant", n = variant.index);
                    running.push(
                        async move {
                            let (result, repos) = context.measure(&variant, configs, cancel).await;
                            (order, point, result, repos)
                        }
                        .instrument(span),
                    );
                }
            }
            Next::Wait => {
                let Some((order, point, result, repos)) = running.next().await else {
                    // Nothing runs that the schedule waits for: not reached.
                    break;
                };
                in_flight.remove(&point);
                if let Some(r) = repos {
                    repositories_of.insert(result.index, r);
                }
                // A variant excluded by a constraint is no way up for the quick search.
                let answer = result
                    .max_qps
                    .filter(|_| result.status == VariantStatus::Measured);
                measured.insert(point, answer);
                done.push((order, result));
            }
            Next::Done => break,
        }
    }
    done.sort_by_key(|(order, _)| *order);
    Measured {
        results: done.into_iter().map(|(_, r)| r).collect(),
        repositories_of,
    }
}

/// What every variant's run shares.
pub(super) struct VariantContext<'a> {
    pub options: &'a RunOptions,
    pub matrix: &'a Matrix,
    pub run_dir: &'a Path,
    pub run_id: &'a str,
    pub store_url: &'a str,
    pub repositories: &'a [PathBuf],
    /// Whether a variant's configs are mounted over the servers' own (kube) rather than put
    /// in a repository of links (local).
    pub mounted: bool,
    pub swept: &'a BTreeMap<String, SweptModel>,
    pub launcher_for: &'a LauncherFor<'a>,
    /// The grid's size, for the log.
    pub of: usize,
}

impl VariantContext<'_> {
    /// A variant's configs as the launcher mounts them (none locally: its repository has them).
    pub(super) fn mounted_configs(&self, configs: &BTreeMap<String, String>) -> Vec<MountedConfig> {
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
    pub(super) async fn measure(
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
            qps_interval: None,
            p99_ms: None,
            concurrency: None,
            ending: None,
            model_instances: instances,
            gpus: 0,
            server_memory_bytes: None,
            gpu_memory_bytes: None,
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
pub(super) enum VariantRunError {
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
pub(super) async fn run_variant(
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
pub(super) fn measured(
    result: &mut VariantResult,
    sweep: &crate::matrix::sweep::Sweep,
    outcome: &RunOutcome,
) {
    let report = &outcome.report;
    let answer = report.capacity.as_ref().and_then(|c| {
        c.results
            .iter()
            .filter(|r| r.target_rps.is_none())
            .find(|r| sweep.model.as_ref().is_none_or(|m| &r.model == m))
            .map(|a| (c, a))
    });
    match (&outcome.verdict, answer) {
        (Verdict::Pass, Some((capacity, a))) => {
            result.status = VariantStatus::Measured;
            result.max_qps = a.concurrency.map(|_| a.max_qps);
            result.qps_interval = a.concurrency.and_then(|c| {
                let record = capacity.phases.iter().find(|p| {
                    p.group == a.group
                        && p.phase == a.phase
                        && (p.model == a.model || p.model == "mix")
                })?;
                plan::capacity_interval(&record.window_qps(&a.model, c), a.max_qps)
            });
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
    result.gpu_memory_bytes = points
        .iter()
        .filter_map(|p| p.gpu_memory_used_bytes)
        .reduce(f64::max);
    let cpu: Vec<f64> = points.iter().filter_map(|p| p.cpu_utilization).collect();
    result.server_cpu_utilization =
        (!cpu.is_empty()).then(|| cpu.iter().sum::<f64>() / cpu.len() as f64);
    plan::judge_measured_constraints(
        result,
        sweep
            .constraints
            .as_ref()
            .and_then(|c| c.gpu_memory_bytes()),
    );
}
