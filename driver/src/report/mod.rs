//! The final report, built only from the status store, so `driver report --run ID` rebuilds the
//! same report at any time: the L0 table over all workers and per client group, the per-model
//! table, QPS per worker
//! over time, Triton's server-side metrics, every failure, and for every failed member its exit,
//! log tail and the command to reproduce it.

pub mod baseline;
mod measures;
pub mod timeline;
pub mod trace;

use crate::capacity::phase::PhaseRecord;
use crate::launcher::MemberDiagnostics;
use crate::launcher::diagnostics::PodDiagnostics;
use crate::launcher::logs::LogExcerpt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use stress_common::report::{L0Table, ModelRowJson, ModelTable, RowJson};
use stress_common::status::{EventKind, FailureRecord, Role};
use stress_common::store::{ABANDONED, Member, Store, StoreError};
use stress_common::triton_metrics::{self, ModelMetrics};

/// How many failure records the report lists (the store has the rest).
const LISTED_FAILURES: usize = 50;
/// Points kept of each worker's QPS series in report.json.
const SERIES_POINTS: usize = 600;

#[derive(Debug, Serialize)]
pub struct WorkerQps {
    pub member_id: String,
    pub group: String,
    pub samples: usize,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    /// (seconds since the run started, QPS): at most [`SERIES_POINTS`], averaged by the store
    /// over equal spans of time when the series is longer.
    pub series: Vec<(f64, f64)>,
}

/// A server of the run, launched or external.
#[derive(Debug, Serialize)]
pub struct ServerRow {
    pub member_id: String,
    pub group: String,
    /// Where clients reached it: `grpc=H:P http=H:P metrics=H:P` (those known).
    pub address: String,
    /// An existing server named by the matrix's `endpoints`, not launched by the driver.
    pub external: bool,
    /// Whether its Triton /metrics were scraped (see `server_metrics`); when not, why.
    pub metrics: String,
}

#[derive(Debug, Serialize)]
pub struct FailedMember {
    pub member_id: String,
    pub role: String,
    pub group: String,
    pub failed_at_ms: i64,
    pub reason: String,
    pub diagnostics: MemberDiagnostics,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub run_id: String,
    pub name: String,
    pub launcher: String,
    pub verdict: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    /// Seconds during which workers reported (the QPS denominator).
    pub load_seconds: f64,
    pub scenarios: Vec<RowJson>,
    pub groups: BTreeMap<String, Vec<RowJson>>,
    /// One row per (model, scenario), all workers.
    pub models: Vec<ModelRowJson>,
    pub workers: Vec<WorkerQps>,
    /// Every server, launched and external, in member order.
    pub servers: Vec<ServerRow>,
    pub server_metrics: BTreeMap<String, Vec<ModelMetrics>>,
    pub failure_count: u64,
    pub failures: Vec<(String, FailureRecord)>,
    pub failed_members: Vec<FailedMember>,
    /// Each SLO rule's verdict: `rule`, `observed`, `ok`, the window (empty: no rules).
    pub slo: Vec<crate::judge::slo::Outcome>,
    /// The comparison with the baseline run (None: no baseline, e.g. a first run).
    pub baseline: Option<crate::judge::regression::Comparison>,
    /// Its findings: `metric`, `baseline`, `current`, `change`.
    pub regressions: Vec<crate::judge::regression::Finding>,
    /// Capacity mode's answers (absent for a soak run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityReport>,
    /// The run over time: latency percentiles per interval and the servers' metrics.
    pub timeline: crate::report::timeline::Timeline,
    /// Per model: the servers' successes against the workers' OK answers.
    pub reconciliation: Vec<crate::judge::reconcile::Reconciliation>,
    /// Per traced server: its Triton traces per model and protocol.
    pub traces: BTreeMap<String, crate::report::trace::TraceSummary>,
    /// The root cause and what it explains (`root_cause`, `independent_members`, and the
    /// failure records caused by it, during the driver's stop, and independent).
    pub analysis: crate::judge::rootcause::Analysis,
    /// Every failure signature of the run, judged: class and evidence, known issue, status
    /// and history (empty: none, or a run recorded before signatures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::judge::verdicts::JudgedSignature>,
    /// The run's known issues: what each matched, or that it may be fixed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_issues: Vec<crate::judge::verdicts::KnownOutcome>,
    /// Why the signatures have no history, or why it restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_history: Option<String>,
    /// Why this report lacks what the store holds (None: complete). Set when the status store
    /// could not be read at the end of the run: the driver writes what it knows itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(skip)]
    tables: (L0Table, BTreeMap<String, L0Table>),
    #[serde(skip)]
    model_table: ModelTable,
}

/// Capacity mode in report.json: one result row per group, phase and model ("mix" for the whole
/// mix), and every phase's record with the controller's trace.
#[derive(Debug, Serialize)]
pub struct CapacityReport {
    pub results: Vec<CapacityResult>,
    /// Per group and phase: the servers' signals at the best window, the recommended
    /// thresholds and a KEDA snippet (see [`crate::capacity::autoscale`]).
    pub autoscaler: Vec<AutoscalerResult>,
    pub phases: Vec<PhaseRecord>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct AutoscalerResult {
    pub group: String,
    pub phase: String,
    #[serde(flatten)]
    pub autoscaler: crate::capacity::autoscale::Autoscaler,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct CapacityResult {
    pub group: String,
    pub phase: String,
    /// The model, or "mix" for the group's whole model mix.
    pub model: String,
    /// The group's total concurrency of the answer (None: nothing met the target).
    pub concurrency: Option<u32>,
    /// Judged windows at that concurrency pooled into max_qps and p99_ms.
    pub windows: u32,
    pub max_qps: f64,
    pub p99_ms: f64,
    pub safe_rate_qps: f64,
    pub target_p99_ms: f64,
    /// Why the phase ended (converged, oscillating, not_saturated, unreachable, out_of_time).
    pub ending: Option<crate::capacity::controller::Ending>,
    pub window_start_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    /// A spike row: its open-loop rate, unanswered over sent during it, and the time back to
    /// the target (max_qps and p99_ms are then what got through during the spike).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_rps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_recover_s: Option<f64>,
}

impl CapacityReport {
    fn new(phases: Vec<PhaseRecord>) -> Self {
        let mut results = Vec::new();
        for p in &phases {
            let r = &p.result;
            let row = |model: &str, max_qps: f64, p99_ms: f64| CapacityResult {
                group: p.group.clone(),
                phase: p.phase.clone(),
                model: model.into(),
                concurrency: r.concurrency,
                windows: r.windows,
                max_qps,
                p99_ms,
                safe_rate_qps: if r.max_qps > 0.0 {
                    max_qps * r.safe_rate_qps / r.max_qps
                } else {
                    0.0
                },
                target_p99_ms: p.target_p99_ms,
                ending: r.ending,
                window_start_ms: r.window_start_ms,
                window_end_ms: r.window_end_ms,
                target_rps: p.spike.as_ref().map(|s| s.result.target_rps),
                error_rate: p.spike.as_ref().map(|s| s.result.error_rate),
                time_to_recover_s: p.spike.as_ref().and_then(|s| s.result.time_to_recover_s),
            };
            results.push(row(&p.model, r.max_qps, r.p99_ms));
            // In a mix, each model's share at the mix's capacity.
            if p.model == "mix" {
                for m in &r.models {
                    results.push(row(&m.model, m.qps, m.p99_us as f64 / 1000.0));
                }
            }
        }
        let autoscaler = phases
            .iter()
            .filter_map(|p| {
                Some(AutoscalerResult {
                    group: p.group.clone(),
                    phase: p.phase.clone(),
                    autoscaler: p.autoscaler.clone()?,
                })
            })
            .collect();
        CapacityReport {
            results,
            autoscaler,
            phases,
        }
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "\n== Capacity ==");
        let _ = writeln!(
            out,
            "{:<20} {:<12} {:<24} {:>11} {:>9} {:>8} {:>9} {:>9}  ending",
            "Group", "Phase", "Model", "Concurrency", "Max QPS", "p99 ms", "target ms", "Safe QPS"
        );
        for r in &self.results {
            let ending = r
                .ending
                .map_or("running", crate::capacity::controller::Ending::as_str);
            let concurrency = r
                .concurrency
                .map_or_else(|| "-".to_string(), |c| c.to_string());
            // A spike has no safe rate of its own (its row is what got through during it).
            let safe = match r.target_rps {
                Some(_) => "-".to_string(),
                None => format!("{:.1}", r.safe_rate_qps),
            };
            let _ = writeln!(
                out,
                "{:<20} {:<12} {:<24} {:>11} {:>9.1} {:>8.2} {:>9.2} {:>9}  {}",
                r.group,
                r.phase,
                r.model,
                concurrency,
                r.max_qps,
                r.p99_ms,
                r.target_p99_ms,
                safe,
                ending
            );
        }
        for p in &self.phases {
            if let Some(spike) = &p.spike {
                render_spike(out, &p.group, spike);
                continue;
            }
            let _ = writeln!(
                out,
                "controller {}/{}{} ({} checks): concurrency → p99 ms per check",
                p.group,
                p.key,
                p.mix
                    .as_ref()
                    .map(|m| format!(" (mix {m})"))
                    .unwrap_or_default(),
                p.checks.len()
            );
            let steps: Vec<String> = p
                .checks
                .iter()
                .map(|c| format!("{}→{:.1}", c.concurrency, c.window.p99_us as f64 / 1000.0))
                .collect();
            for chunk in steps.chunks(12) {
                let _ = writeln!(out, "  {}", chunk.join("  "));
            }
            if let Some(a) = &p.autoscaler {
                out.push_str(&crate::capacity::autoscale::render(a));
            }
        }
    }
}

/// A spike phase: the jump, what got through, and the recovery; then its windows.
fn render_spike(out: &mut String, group: &str, s: &crate::capacity::phase::SpikeRecord) {
    let r = &s.result;
    let baseline = match (r.baseline_qps, r.baseline_p99_ms) {
        (Some(q), Some(p)) => format!("{q:.1} QPS, p99 {p:.2} ms"),
        _ => "not measured".into(),
    };
    let recovery = match (r.recovered, r.time_to_recover_s) {
        (Some(true), Some(t)) => format!("recovered within {t:.1} s"),
        (Some(false), _) => "did not recover".into(),
        _ => "still running".into(),
    };
    let _ = writeln!(
        out,
        "spike {group}: from concurrency {} ({baseline}) to {:.1} requests/s open loop: sent {}, answered {}, error rate {:.2}%, achieved {:.1} QPS, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {recovery}",
        r.from_concurrency,
        r.target_rps,
        r.sent,
        r.answered,
        r.error_rate * 100.0,
        r.achieved_qps,
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
    );
    let steps: Vec<String> = s
        .trace
        .iter()
        .map(|c| {
            let stage = match c.stage {
                crate::capacity::spike::SpikeStage::Baseline => "base",
                crate::capacity::spike::SpikeStage::Spiking => "spike",
                crate::capacity::spike::SpikeStage::Recovering => "after",
            };
            format!(
                "{stage} {:.0}/s p99 {:.1}",
                c.window.qps,
                c.window.p99_us as f64 / 1000.0
            )
        })
        .collect();
    for chunk in steps.chunks(6) {
        let _ = writeln!(out, "  {}", chunk.join("  "));
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no run {0} in the store")]
    NoRun(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run {run}: {message}")]
    Corrupt { run: String, message: String },
}

fn group_of<'a>(members: &'a [Member], id: &str) -> (&'a str, Option<Role>) {
    members
        .iter()
        .find(|m| m.member_id == id)
        .map_or(("?", None), |m| (m.group_name.as_str(), Some(m.role)))
}

/// Averages consecutive points down to at most `n`.
fn downsample(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if points.len() <= n {
        return points.to_vec();
    }
    let chunk = points.len().div_ceil(n);
    points
        .chunks(chunk)
        .map(|c| {
            let k = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / k,
                c.iter().map(|p| p.1).sum::<f64>() / k,
            )
        })
        .collect()
}

pub(crate) fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let pts: Vec<f64> = downsample(&values.iter().map(|v| (0.0, *v)).collect::<Vec<_>>(), width)
        .into_iter()
        .map(|p| p.1)
        .collect();
    let max = pts.iter().cloned().fold(0.0, f64::max);
    pts.iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// A member's addresses as the root-cause analysis compares them: a server's gRPC and HTTP
/// addresses (`grpc=H:P http=H:P metrics=H:P`), a client's target servers (`H:P,H:P`).
fn member_addresses(members: &[Member], id: &str) -> std::collections::BTreeSet<String> {
    let Some(m) = members.iter().find(|m| m.member_id == id) else {
        return Default::default();
    };
    match m.role {
        Role::Server => m
            .address
            .split_whitespace()
            .filter_map(|a| a.strip_prefix("grpc=").or_else(|| a.strip_prefix("http=")))
            .map(String::from)
            .collect(),
        Role::Client => m
            .address
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect(),
    }
}

/// Why the servers may have served requests no worker counted (None: no reason, so such
/// requests are a finding): an external server (others may send to it), a worker SIGKILLed
/// (its requests since its last report went unreported).
fn uncounted(
    members: &[Member],
    diagnostics: &BTreeMap<String, MemberDiagnostics>,
) -> Option<String> {
    let mut why = Vec::new();
    if members
        .iter()
        .any(|m| m.role == Role::Server && m.process_name.is_empty())
    {
        why.push("an external server of the run may serve other clients".to_string());
    }
    let killed: Vec<&str> = members
        .iter()
        .filter(|m| m.role == Role::Client)
        .filter(|m| {
            diagnostics
                .get(&m.member_id)
                .and_then(|d| d.exit.as_ref())
                .is_some_and(|e| e.signal == Some(9))
        })
        .map(|m| m.member_id.as_str())
        .collect();
    if !killed.is_empty() {
        why.push(format!(
            "{} was killed (SIGKILL) and could not report its requests since its last report",
            killed.join(", ")
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Why the servers' samples do not cover the workers' counts (None: they do): a server never
/// sampled, or samples that end before the workers' final counts (a run stopped by fail-fast
/// takes no final sample).
fn not_comparable(
    servers: &[(String, String)],
    samples: &[(String, stress_common::triton_metrics::ServerSample)],
    worker_counts: &[(String, i64, stress_common::status::ModelCounts)],
    workers_started_ms: Option<i64>,
) -> Option<String> {
    let unsampled: Vec<&str> = servers
        .iter()
        .map(|(id, _)| id.as_str())
        .filter(|id| !samples.iter().any(|(m, _)| m == id))
        .collect();
    if !unsampled.is_empty() {
        return Some(format!("no metrics sample of {}", unsampled.join(", ")));
    }
    // What a server's deltas cover starts at its baseline scrape (a delta sample covers from
    // the scrape before it): one taken after the workers started misses their first requests.
    if let Some(started) = workers_started_ms {
        let late: Vec<&str> = servers
            .iter()
            .filter(|(id, _)| {
                samples
                    .iter()
                    .filter(|(m, _)| m == id)
                    .map(|(_, s)| s.at_ms - s.interval_ms)
                    .min()
                    .is_some_and(|from| from > started)
            })
            .map(|(id, _)| id.as_str())
            .collect();
        if !late.is_empty() {
            return Some(format!(
                "the first metrics scrape of {} came after the workers started (its baseline \
                 scrape did not answer), so its counts miss their first requests",
                late.join(", ")
            ));
        }
    }
    let last_counts = worker_counts.iter().map(|(_, at, _)| *at).max()?;
    let last_sample = servers
        .iter()
        .filter_map(|(id, _)| {
            samples
                .iter()
                .filter(|(m, _)| m == id)
                .map(|(_, s)| s.at_ms)
                .max()
        })
        .min()?;
    (last_sample < last_counts).then(|| {
        "the servers' last sample precedes the workers' final counts (the run stopped early)"
            .to_string()
    })
}

impl Report {
    pub async fn from_store(store: &Store, run_id: &str) -> Result<Self, ReportError> {
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| ReportError::NoRun(run_id.into()))?;
        let members = store.members(run_id).await?;
        let corrupt = |message: String| ReportError::Corrupt {
            run: run_id.into(),
            message,
        };

        let mut total = L0Table::new();
        let mut groups: BTreeMap<String, L0Table> = BTreeMap::new();
        for (member_id, counts) in store.scenario_counts(run_id).await? {
            total.add(&counts).map_err(|e| corrupt(e.to_string()))?;
            let (group, _) = group_of(&members, &member_id);
            groups
                .entry(group.to_string())
                .or_default()
                .add(&counts)
                .map_err(|e| corrupt(e.to_string()))?;
        }

        let mut model_table = ModelTable::new();
        let model_counts = store.model_counts(run_id).await?;
        for (_, _, counts) in &model_counts {
            model_table
                .add(counts)
                .map_err(|e| corrupt(e.to_string()))?;
        }

        // Aggregated by the store: what is read is bounded by members × SERIES_POINTS, not by
        // the run's length.
        let span = store.qps_span(run_id).await?;
        let load_seconds = span.load_seconds();
        let workers = store
            .qps_summaries(run_id, &span, SERIES_POINTS)
            .await?
            .into_iter()
            .map(|w| WorkerQps {
                group: group_of(&members, &w.member_id).0.to_string(),
                samples: w.samples as usize,
                min: w.min,
                avg: w.avg,
                max: w.max,
                series: w
                    .points
                    .iter()
                    .map(|&(at_ms, qps)| ((at_ms - run.started_at_ms as f64) / 1000.0, qps))
                    .collect(),
                member_id: w.member_id,
            })
            .collect();

        let run_key = stress_common::contract::RunId::new(run_id);
        let mut diagnostics: BTreeMap<String, MemberDiagnostics> = store
            .documents::<MemberDiagnostics>(&run_key)
            .await?
            .into_iter()
            .collect();
        // Before the failed members take their diagnostics.
        let uncounted = uncounted(&members, &diagnostics);
        let server_metrics: BTreeMap<String, Vec<ModelMetrics>> = diagnostics
            .iter_mut()
            .filter_map(|(member, d)| Some((member.clone(), d.server_metrics.take()?)))
            .collect();
        let servers = members
            .iter()
            .filter(|m| m.role == Role::Server)
            .map(|m| {
                // The store records an external server without a process name: none ran.
                let external = m.process_name.is_empty();
                let metrics = if server_metrics.contains_key(&m.member_id) {
                    "scraped"
                } else if external && !m.address.contains("metrics=") {
                    "not scraped (the matrix gives no metrics address)"
                } else {
                    "not scraped (no answer)"
                };
                ServerRow {
                    member_id: m.member_id.clone(),
                    group: m.group_name.clone(),
                    address: m.address.clone(),
                    external,
                    metrics: metrics.into(),
                }
            })
            .collect();

        let events = store.events(run_id, 0).await?;
        // A worker's first event comes before it sends anything.
        let workers_started_ms = events
            .iter()
            .filter(|e| group_of(&members, &e.member_id).1 == Some(Role::Client))
            .map(|e| e.at_ms)
            .min();
        let stopping_at_ms = events
            .iter()
            .find(|e| e.stopping().is_some())
            .map(|e| e.at_ms);
        let mut failed_members: Vec<FailedMember> = Vec::new();
        for e in events {
            if e.kind != EventKind::Failure
                || failed_members.iter().any(|f| f.member_id == e.member_id)
            {
                continue;
            }
            let (group, role) = group_of(&members, &e.member_id);
            failed_members.push(FailedMember {
                role: role.map_or("?", Role::as_str).to_string(),
                group: group.to_string(),
                failed_at_ms: e.at_ms,
                reason: e.details.clone(),
                diagnostics: diagnostics.remove(&e.member_id).unwrap_or_default(),
                member_id: e.member_id,
            });
        }

        let phases: Vec<PhaseRecord> = store
            .documents::<PhaseRecord>(&run_key)
            .await?
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let capacity = (!phases.is_empty()).then(|| CapacityReport::new(phases));
        let baseline = store
            .document::<crate::judge::regression::Comparison>(&run_key, "")
            .await?;
        let slo = store
            .documents::<crate::judge::slo::Outcome>(&run_key)
            .await?
            .into_iter()
            .map(|(_, o)| o)
            .collect();

        // Streamed by end time into one open bucket per series: memory does not grow with the
        // run's length or its workers.
        let (interval_s, latency) = match store.latency_interval_width(run_id).await? {
            None => (0.0, Vec::new()),
            Some(width_ms) => {
                let mut series =
                    crate::report::timeline::LatencySeriesBuilder::new(run.started_at_ms, width_ms);
                let mut undecodable = None;
                store
                    .for_each_latency_interval(run_id, i64::MIN, i64::MAX, |_, i| {
                        if undecodable.is_none()
                            && let Err(e) = series.add(&i)
                        {
                            undecodable = Some(e);
                        }
                    })
                    .await?;
                if let Some(e) = undecodable {
                    return Err(corrupt(format!("latency intervals: {e}")));
                }
                series.finish()
            }
        };
        let server_ids: Vec<(String, String)> = members
            .iter()
            .filter(|m| m.role == Role::Server)
            .map(|m| (m.member_id.clone(), m.group_name.clone()))
            .collect();
        let server_samples = store.server_samples(run_id).await?;
        let timeline = crate::report::timeline::Timeline {
            interval_s,
            latency,
            servers: crate::report::timeline::server_series(
                run.started_at_ms,
                &server_ids,
                &server_samples,
                // The load phase: the workers' first sample closes their first interval.
                span.first_ms.zip(span.last_ms).map(|(first, last)| {
                    let since_start = |ms: i64| (ms - run.started_at_ms) as f64 / 1000.0;
                    (
                        since_start(first - span.interval_ms.unwrap_or(0)),
                        since_start(last),
                    )
                }),
            ),
        };
        let reconciliation = crate::judge::reconcile::reconcile(
            &model_counts
                .iter()
                .map(|(_, _, c)| c.clone())
                .collect::<Vec<_>>(),
            &server_samples,
            not_comparable(
                &server_ids,
                &server_samples,
                &model_counts,
                workers_started_ms,
            )
            .as_deref(),
            uncounted.as_deref(),
        )
        .map_err(|e| corrupt(format!("model counts: {e}")))?;

        let traces = store
            .documents::<crate::report::trace::TraceSummary>(&run_key)
            .await?
            .into_iter()
            .collect();

        let failure_count = store
            .failure_totals(run_id)
            .await?
            .into_iter()
            .map(|(_, n)| n)
            .sum();
        let mut failures = store.failures(run_id).await?;
        failed_members.sort_by_key(|f| f.failed_at_ms);
        failures.sort_by_key(|(_, f)| f.at_ms);
        // Each failure's forensics get the log lines of the server it went to, around it.
        let excerpts: Vec<LogExcerpt> = store
            .documents::<LogExcerpt>(&run_key)
            .await?
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        let mut judged = store
            .document::<crate::judge::verdicts::RunSignatures>(&run_key, "")
            .await?
            .unwrap_or_default();
        let with_server_log = |f: &mut FailureRecord| {
            let Some(forensics) = &mut f.forensics else {
                return;
            };
            if let Some(e) = excerpts.iter().find(|e| {
                e.from_ms <= f.at_ms
                    && f.at_ms <= e.to_ms
                    && member_addresses(&members, &e.member_id).contains(&f.server)
            }) {
                forensics.server_log = e
                    .lines
                    .iter()
                    .map(|l| format!("{}: {l}", e.member_id))
                    .collect();
            }
        };
        for (_, f) in &mut failures {
            with_server_log(f);
        }
        for s in &mut judged.signatures {
            with_server_log(&mut s.example);
        }
        // A run its driver abandoned: the driver died about when it stopped renewing its lease.
        let driver_died_at_ms = (run.verdict.as_deref() == Some(ABANDONED))
            .then_some(run.lease_until_ms)
            .flatten()
            .map(crate::judge::rootcause::driver_died_by);
        let mut analysis = crate::judge::rootcause::analyze(
            &failed_members
                .iter()
                .map(|f| crate::judge::rootcause::Failed {
                    member_id: f.member_id.clone(),
                    role: f.role.clone(),
                    at_ms: f.failed_at_ms,
                    reason: f.reason.clone(),
                    addresses: member_addresses(&members, &f.member_id),
                })
                .collect::<Vec<_>>(),
            &failures,
            stopping_at_ms,
            driver_died_at_ms,
        );
        if let Some(root) = &mut analysis.root_cause {
            root.signature = crate::judge::rootcause::signature_of(root, &judged.signatures);
        }
        failures.truncate(LISTED_FAILURES);

        Ok(Report {
            run_id: run.run_id,
            name: run.name,
            launcher: run.launcher,
            // A run without a verdict whose lease ran out lost its driver.
            verdict: run.verdict.unwrap_or_else(|| {
                let lost = run
                    .lease_until_ms
                    .is_some_and(|until| until < stress_common::now_ms());
                if lost { ABANDONED } else { "RUNNING" }.into()
            }),
            started_at_ms: run.started_at_ms,
            finished_at_ms: run.finished_at_ms,
            load_seconds,
            scenarios: total.to_json(load_seconds),
            groups: groups
                .iter()
                .map(|(g, t)| (g.clone(), t.to_json(load_seconds)))
                .collect(),
            models: model_table.to_json(load_seconds),
            workers,
            servers,
            server_metrics,
            failure_count,
            failures,
            failed_members,
            slo,
            regressions: baseline
                .as_ref()
                .map(|b| b.regressions.clone())
                .unwrap_or_default(),
            baseline,
            capacity,
            timeline,
            reconciliation,
            traces,
            analysis,
            signatures: judged.signatures,
            known_issues: judged.known_issues,
            signature_history: judged.history_note,
            incomplete: None,
            tables: (total, groups),
            model_table,
        })
    }

    /// The report of a run whose store could not be read at its end: what the driver knows
    /// itself (the run, its verdict and why), and `why` the rest is missing. `driver report`
    /// rebuilds the whole report once the store is back.
    pub fn without_store(
        run_id: &str,
        name: &str,
        launcher: &str,
        verdict: &str,
        started_at_ms: i64,
        why: String,
    ) -> Self {
        Report {
            run_id: run_id.into(),
            name: name.into(),
            launcher: launcher.into(),
            verdict: verdict.into(),
            started_at_ms,
            finished_at_ms: Some(stress_common::now_ms()),
            incomplete: Some(why),
            ..Report::default()
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let took = self
            .finished_at_ms
            .map(|f| format!("{:.1} s", (f - self.started_at_ms) as f64 / 1000.0))
            .unwrap_or_else(|| "still running".into());
        let _ = writeln!(
            out,
            "Run {} ({} launcher): {}\nMatrix run name: {}; took {}; load phase {:.1} s\n",
            self.run_id, self.launcher, self.verdict, self.name, took, self.load_seconds
        );
        if let Some(why) = &self.incomplete {
            let _ = writeln!(out, "== INCOMPLETE REPORT ==\n{why}\n");
        }
        if let Some(root) = &self.analysis.root_cause {
            let _ = writeln!(
                out,
                "== Root cause ==\n{} {} at {}: {}",
                root.role,
                root.member_id,
                format_time(root.at_ms),
                root.reason
            );
            if let Some(s) = &root.signature {
                let _ = writeln!(
                    out,
                    "signature {} ({}, {}): {}",
                    s.signature,
                    s.status.as_str(),
                    s.class,
                    s.evidence
                );
                if let Some(example) = self
                    .signatures
                    .iter()
                    .find(|j| j.signature == s.signature)
                    .map(|j| &j.example)
                    && let Some(forensics) = &example.forensics
                {
                    render_forensics(&mut out, example, forensics);
                }
            }
            if !root.caused_members.is_empty() {
                let _ = writeln!(
                    out,
                    "caused the failure of: {}",
                    root.caused_members.join(", ")
                );
            }
            if !self.analysis.independent_members.is_empty() {
                let _ = writeln!(
                    out,
                    "also failed (independently): {}",
                    self.analysis.independent_members.join(", ")
                );
            }
            let _ = writeln!(
                out,
                "failure records: {} caused by it, {} during the driver's stop, {} independent\n",
                self.analysis.caused_failures,
                self.analysis.shutdown_failures,
                self.analysis.independent_failures
            );
        }
        if !self.slo.is_empty() {
            let _ = writeln!(out, "== SLO ==");
            for o in &self.slo {
                let _ = writeln!(out, "{}", o.line());
            }
            out.push('\n');
        }
        match &self.baseline {
            Some(b) if b.baseline_run.is_empty() => {
                let _ = writeln!(out, "Regressions not compared: {}\n", b.basis());
            }
            Some(b) => {
                let _ = writeln!(out, "== Regressions vs {} ==", b.basis());
                for change in &b.version_changes {
                    let _ = writeln!(out, "changed since: {change}");
                }
                for f in &b.regressions {
                    let _ = writeln!(out, "REGRESSION {}", f.describe());
                }
                let _ = writeln!(
                    out,
                    "{} of {} metrics compared changed beyond the baseline{}\n",
                    b.regressions.len(),
                    b.compared,
                    if b.fail && !b.regressions.is_empty() {
                        " (regression.fail: the run fails)"
                    } else {
                        ""
                    }
                );
            }
            None if self.finished_at_ms.is_some() => {
                let _ = writeln!(
                    out,
                    "No baseline: no earlier passing or pinned run of this matrix ({}); regressions not compared\n",
                    self.name
                );
            }
            None => {}
        }
        if let Some(capacity) = &self.capacity {
            capacity.render(&mut out);
            out.push('\n');
        }
        let _ = writeln!(out, "== Scenarios, all workers ==");
        out.push_str(&self.tables.0.render(self.load_seconds));
        if self.tables.1.len() > 1 {
            for (group, table) in &self.tables.1 {
                let _ = writeln!(out, "\n== Scenarios, client group {group} ==");
                out.push_str(&table.render(self.load_seconds));
            }
        }
        if !self.model_table.is_empty() {
            let _ = writeln!(out, "\n== Models, all workers ==");
            out.push_str(&self.model_table.render(self.load_seconds));
        }
        self.timeline.render(&mut out);
        if !self.reconciliation.is_empty() {
            let _ = writeln!(
                out,
                "\n== Servers vs workers (successes on the servers, OK answers on the workers) =="
            );
            let _ = writeln!(
                out,
                "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8}  verdict",
                "Model", "server ok", "worker ok", "not ok", "unseen", "gap"
            );
            for r in &self.reconciliation {
                let _ = writeln!(
                    out,
                    "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8}  {:?}: {}",
                    r.model,
                    r.server_success,
                    r.client_ok,
                    r.client_not_ok,
                    r.client_unseen,
                    r.gap,
                    r.verdict,
                    r.explanation
                );
            }
        }
        if !self.workers.is_empty() {
            let _ = writeln!(out, "\n== QPS per worker over time ==");
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:>9} {:>9} {:>9}  over time",
                "Worker", "Group", "min", "avg", "max"
            );
            for w in &self.workers {
                let values: Vec<f64> = w.series.iter().map(|p| p.1).collect();
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:>9.1} {:>9.1} {:>9.1}  {}",
                    w.member_id,
                    w.group,
                    w.min,
                    w.avg,
                    w.max,
                    sparkline(&values, 40)
                );
            }
        }
        // Listed when some were not launched: where they were, and whether their metrics are
        // below (a launched server's whereabouts are in its events and failure block).
        if self.servers.iter().any(|s| s.external) {
            let _ = writeln!(out, "\n== Servers ==");
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:<9} {:<48} metrics",
                "Server", "Group", "Launched", "Address"
            );
            for s in &self.servers {
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:<9} {:<48} {}",
                    s.member_id,
                    s.group,
                    if s.external { "external" } else { "yes" },
                    s.address,
                    s.metrics
                );
            }
        }
        for (server, summary) in &self.traces {
            let _ = writeln!(out, "\n== Traces of {server} (Triton, TIMESTAMPS) ==");
            out.push_str(&summary.render());
        }
        for (server, models) in &self.server_metrics {
            let _ = writeln!(
                out,
                "\n== Server-side metrics of {server} (Triton /metrics) =="
            );
            out.push_str(&triton_metrics::render(models));
        }
        if !self.signatures.is_empty() {
            self.render_signatures(&mut out);
        } else if !self.failures.is_empty() {
            let _ = writeln!(
                out,
                "\n== Failures (first {} of {}) ==",
                self.failures.len(),
                self.failure_count
            );
            for (i, (member, f)) in self.failures.iter().enumerate() {
                let _ = writeln!(out, "{member}: {f}");
                // The first few with their requests on the wire (report.json has them all).
                if i < FORENSICS_SHOWN
                    && let Some(forensics) = &f.forensics
                {
                    render_forensics(&mut out, f, forensics);
                }
            }
        }
        for m in &self.failed_members {
            render_failed_member(&mut out, m);
        }
        out
    }
}

impl Report {
    /// The failures grouped by signature: per signature its status (new, recurring, known, …),
    /// class, count, when, who, the evidence and one example with its steps on the wire; then
    /// the known issues.
    fn render_signatures(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n== Failure signatures ({} signatures, {} failures) ==",
            self.signatures.len(),
            self.signatures.iter().map(|s| s.count).sum::<u64>()
        );
        if let Some(note) = &self.signature_history {
            let _ = writeln!(out, "({note})");
        }
        for s in &self.signatures {
            let status = match &s.known_issue {
                Some(id) => format!("KNOWN {id}"),
                None => s.status.as_str().to_uppercase(),
            };
            let history = s.history.map_or_else(
                || "no history".to_string(),
                |h| format!("seen in {} of the last {} runs", h.seen_in, h.of_last),
            );
            let _ = writeln!(
                out,
                "{status} {} x{} {} {}{} [{}]{}\n  {}\n  first {}, last {}; members {}; servers {}; {history}\n  class {}: {}",
                s.signature,
                s.count,
                s.scenario,
                if s.model.is_empty() { "" } else { "model " },
                s.model,
                s.error_kind,
                if s.fails.is_some() {
                    " FAILS THE RUN"
                } else {
                    ""
                },
                s.message,
                format_time(s.first_at_ms),
                format_time(s.last_at_ms),
                s.members.join(", "),
                s.servers.join(", "),
                s.class,
                s.evidence,
            );
            let _ = writeln!(out, "  example ({}): {}", s.example_member, s.example);
            if let Some(forensics) = &s.example.forensics {
                render_forensics(out, &s.example, forensics);
            }
        }
        if !self.known_issues.is_empty() {
            let _ = writeln!(out, "\n== Known issues ==");
            for k in &self.known_issues {
                let _ = writeln!(
                    out,
                    "{} {}: {} failure(s) matched; {}{}",
                    k.status.to_uppercase(),
                    k.id,
                    k.count,
                    k.reason,
                    k.link
                        .as_deref()
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default()
                );
            }
        }
    }
}

/// Failures shown in report.txt with their forensics.
const FORENSICS_SHOWN: usize = 5;

/// A failed test's requests on the wire and the previous use of its correlation id, indented
/// under its failure line.
fn render_forensics(
    out: &mut String,
    f: &FailureRecord,
    forensics: &stress_common::status::Forensics,
) {
    let clock = |us: i64| {
        let t = format_time(us.div_euclid(1000));
        // HH:MM:SS.mmm plus the µs.
        let time = t
            .split(' ')
            .nth(1)
            .unwrap_or(&t)
            .trim_end_matches('Z')
            .to_string();
        format!("{time}{:03}", us.rem_euclid(1000))
    };
    if let Some(p) = &forensics.previous_use {
        let _ = writeln!(
            out,
            "  previous use of its correlation id: {} on {} {}–{}, {}{}",
            p.scenario,
            if p.model.is_empty() { "?" } else { &p.model },
            clock(p.started_ms * 1000),
            clock(p.ended_ms * 1000),
            p.outcome,
            if p.left_open.is_empty() {
                String::new()
            } else {
                format!(", left a sequence open on {}", p.left_open.join(", "))
            }
        );
    } else if f.correlation_id.is_some() {
        let _ = writeln!(
            out,
            "  previous use of its correlation id: none by this worker"
        );
    }
    for (i, s) in forensics.steps.iter().enumerate() {
        let _ = writeln!(
            out,
            "  step {:>2} {:<9} sent {} answered {} ({:.3} ms) {} {}{} inputs {}: {}",
            i + 1,
            s.flags,
            clock(s.sent_us),
            clock(s.received_us),
            (s.received_us - s.sent_us) as f64 / 1000.0,
            s.server,
            s.model,
            s.correlation_id
                .map(|c| format!(" id {c}"))
                .unwrap_or_default(),
            s.input_digest,
            s.outcome
        );
    }
    if forensics.steps_left_out > 0 {
        let _ = writeln!(
            out,
            "  ... {} more steps not kept",
            forensics.steps_left_out
        );
    }
    if !forensics.server_log.is_empty() {
        let _ = writeln!(out, "  the server's log around it:");
    }
    for line in &forensics.server_log {
        let _ = writeln!(out, "  > {line}");
    }
}

/// A failed member's block: heading and reason, how it ended, where it ran, its pod, how to
/// start it again, its containers and events, its log tails, and the kubectl commands to dig
/// further. No blank line inside: a block ends at the next one.
fn render_failed_member(out: &mut String, m: &FailedMember) {
    let _ = writeln!(
        out,
        "\n== FAILED {} {} (group {}) at {} ==\nreason: {}",
        m.role,
        m.member_id,
        m.group,
        format_time(m.failed_at_ms),
        m.reason
    );
    let d = &m.diagnostics;
    field(out, "exit", d.exit.as_ref().map(|e| &e.description));
    if let Some(p) = &d.pod {
        field(out, "namespace", Some(&p.namespace));
        field(out, "pod", Some(&p.name));
        field(out, "phase", p.phase.as_ref());
        field(out, "status_reason", p.status_reason.as_ref());
        field(out, "node", p.node.as_ref());
        field(out, "pod_ip", p.ip.as_ref());
        field(out, "restarts", Some(p.restarts));
    } else {
        field(out, "where", d.location.as_ref());
    }
    field(out, "log_file", d.log_file.as_ref());
    field(out, "reproduce", d.command.as_ref());
    let no_pod = PodDiagnostics::default();
    let pod = d.pod.as_ref().unwrap_or(&no_pod);
    list(out, "containers", "  - ", &pod.containers);
    list(out, "events", "  - ", &pod.events);
    list(out, "log tail", "  | ", &d.log_tail);
    list(
        out,
        "log tail of the previous container",
        "  | ",
        &pod.previous_log_tail,
    );
    list(out, "dig further", "  $ ", &pod.kubectl);
}

/// `key: value`, when there is a value.
fn field(out: &mut String, key: &str, value: Option<impl std::fmt::Display>) {
    if let Some(v) = value {
        let _ = writeln!(out, "{key}: {v}");
    }
}

/// `title:` and one line per item, unless there are none.
fn list(out: &mut String, title: &str, bullet: &str, items: &[impl std::fmt::Display]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    for item in items {
        let _ = writeln!(out, "{bullet}{item}");
    }
}

/// UTC wall-clock time of a store timestamp, e.g. 2026-11-21 06:15:12.345Z.
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_first_scraped_after_the_workers_started_is_not_compared() {
        use stress_common::status::ModelCounts;
        use stress_common::triton_metrics::ServerSample;
        let servers = [("s-0".to_string(), "s".to_string())];
        let sample = |at_ms: i64, interval_ms: i64| {
            (
                "s-0".to_string(),
                ServerSample {
                    at_ms,
                    interval_ms,
                    ..ServerSample::default()
                },
            )
        };
        let counts = [("c-0".to_string(), 9_000, ModelCounts::default())];
        // The baseline (interval 0) before the workers' first event at 1500: compared.
        let on_time = [sample(1_000, 0), sample(5_000, 4_000), sample(9_500, 4_500)];
        assert_eq!(
            not_comparable(&servers, &on_time, &counts, Some(1_500)),
            None
        );
        // Its baseline row lost, the first delta still covers from 1000: compared.
        assert_eq!(
            not_comparable(&servers, &on_time[1..], &counts, Some(1_500)),
            None
        );
        // The baseline scrape failed and the first one that answered came at 2000.
        let late = [sample(2_000, 0), sample(5_000, 3_000), sample(9_500, 4_500)];
        let why = not_comparable(&servers, &late, &counts, Some(1_500)).unwrap();
        assert!(why.contains("first metrics scrape of s-0"), "{why}");
        // No worker event to compare with: only the other rules apply.
        assert_eq!(not_comparable(&servers, &late, &counts, None), None);
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(format_time(1_795_241_712_345), "2026-11-21 06:15:12.345Z");
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        assert_eq!(sparkline(&[], 40), "");
        assert_eq!(sparkline(&[0.0; 5], 40), "▁▁▁▁▁");
        let ramp: Vec<f64> = (0..8).map(f64::from).collect();
        assert_eq!(sparkline(&ramp, 40), "▁▂▃▄▅▆▇█");
        // Bar heights round to the nearest eighth: 1 of 2 is 3.5 eighths, the fifth bar.
        assert_eq!(sparkline(&[0.0, 1.0, 2.0], 40), "▁▅█");
        assert_eq!(sparkline(&[1.0, 1.0, 1.0, 100.0, 1.0, 1.0], 40), "▁▁▁█▁▁");
        // The scale runs from zero, not from the smallest value: 50 of 100 is half height.
        assert_eq!(sparkline(&[50.0, 100.0, 0.0], 40), "▅█▁");
    }

    #[test]
    fn sparklines_average_more_points_than_the_width() {
        // 16 values in 8 bars: pairs averaged (0.5, 2.5, .. 14.5), then scaled.
        let ramp: Vec<f64> = (0..16).map(f64::from).collect();
        assert_eq!(sparkline(&ramp, 8), "▁▂▃▄▅▆▇█");
        // A one-point spike is averaged with its neighbour, and still the top of the line.
        let mut spiky = vec![0.0; 40];
        spiky[10] = 80.0;
        assert_eq!(sparkline(&spiky, 20), "▁▁▁▁▁█▁▁▁▁▁▁▁▁▁▁▁▁▁▁");
        // 41 points in at most 40 bars: chunks of 2, 21 bars.
        assert_eq!(sparkline(&[3.0; 41], 40), "█".repeat(21));
    }

    #[test]
    fn downsampling_averages_consecutive_points() {
        let points = [(0.0, 0.0), (1.0, 2.0), (2.0, 4.0), (3.0, 6.0), (4.0, 8.0)];
        assert_eq!(downsample(&points, 5), points);
        assert_eq!(downsample(&points, 9), points);
        // Chunks of 3: the last one holds what is left.
        assert_eq!(downsample(&points, 2), [(1.0, 2.0), (3.5, 7.0)]);
        assert_eq!(downsample(&points, 1), [(2.0, 4.0)]);
        assert_eq!(downsample(&[(0.0, 1.0); 1000], 100), [(0.0, 1.0); 100]);
    }

    /// Typed diagnostics go through the store as JSON and come back as the report's blocks: a
    /// failed local server with its Triton metrics, a failed pod with containers and events.
    #[tokio::test]
    async fn renders_typed_diagnostics_of_failed_members() {
        use crate::launcher::diagnostics::{ContainerStatus, MemberEnd, PodEvent};
        use stress_common::store::NewRun;

        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&Store::sqlite_url(&dir.path().join("store.sqlite")))
            .await
            .unwrap();
        let run_id = "r1";
        store
            .create_run(&NewRun {
                run_id: run_id.into(),
                name: "diagnostics".into(),
                matrix_yaml: String::new(),
                launcher: "local".into(),
                started_at_ms: 1_000,
                fingerprint: None,
            })
            .await
            .unwrap();
        for (member, role, group) in [
            ("triton-0", Role::Server, "triton"),
            ("clients-0", Role::Client, "clients"),
        ] {
            store
                .upsert_member(&Member {
                    run_id: run_id.into(),
                    member_id: member.into(),
                    role,
                    group_name: group.into(),
                    index: 0,
                    address: String::new(),
                    process_name: member.into(),
                    corr_id_base: None,
                    corr_id_block_size: None,
                    command: String::new(),
                })
                .await
                .unwrap();
            store
                .record_event(run_id, member, EventKind::Failure, "it broke")
                .await
                .unwrap();
        }
        let server = MemberDiagnostics {
            launcher: "local".into(),
            exit: Some(MemberEnd {
                signal: Some(9),
                description: "killed by signal 9 (SIGKILL)".into(),
                ..Default::default()
            }),
            command: Some("tritonserver --model-repository=/models".into()),
            location: Some("pid 4242".into()),
            log_file: Some("/runs/r1/logs/triton-0.log".into()),
            log_tail: vec!["I0101 Started GRPCInferenceService".into()],
            pod: None,
            server_metrics: Some(vec![ModelMetrics {
                model: "add_sub".into(),
                version: "1".into(),
                success: 100.0,
                failure: 3.0,
                ..Default::default()
            }]),
        };
        let client = MemberDiagnostics {
            launcher: "kube".into(),
            exit: Some(MemberEnd {
                code: Some(2),
                reason: Some("container worker terminated: Error, exit code 2".into()),
                description: "container worker terminated: Error, exit code 2".into(),
                ..Default::default()
            }),
            command: Some("worker --servers 10.0.0.7:8001".into()),
            log_tail: vec!["error: unexpected argument '--no-such-flag'".into()],
            pod: Some(PodDiagnostics {
                namespace: "ns".into(),
                name: "r1-clients-0".into(),
                phase: Some("Failed".into()),
                node: Some("node-1".into()),
                restarts: 1,
                containers: vec![ContainerStatus {
                    name: "worker".into(),
                    state: "terminated (Error, exit code 2)".into(),
                    ..Default::default()
                }],
                events: vec![PodEvent {
                    type_: "Warning".into(),
                    reason: "BackOff".into(),
                    message: "Back-off restarting failed container".into(),
                    count: 3,
                    ..Default::default()
                }],
                previous_log_tail: vec!["the first attempt".into()],
                kubectl: vec!["kubectl -n ns describe pod r1-clients-0".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        for (member, d) in [("triton-0", &server), ("clients-0", &client)] {
            store
                .save_document(&stress_common::contract::RunId::new(run_id), member, d)
                .await
                .unwrap();
        }

        let report = Report::from_store(&store, run_id).await.unwrap();
        assert_eq!(report.server_metrics["triton-0"][0].failure, 3.0);
        let text = report.render();
        assert!(
            text.contains("== Server-side metrics of triton-0 (Triton /metrics) ==\nModel")
                && text.contains("\nadd_sub "),
            "{text}"
        );
        let block = |heading: &str| {
            text.split("\n\n")
                .find(|b| b.starts_with(heading))
                .unwrap_or_else(|| panic!("no `{heading}` block in:\n{text}"))
                .lines()
                .skip(1)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            block("== FAILED SERVER triton-0 (group triton)"),
            [
                "reason: it broke",
                "exit: killed by signal 9 (SIGKILL)",
                "where: pid 4242",
                "log_file: /runs/r1/logs/triton-0.log",
                "reproduce: tritonserver --model-repository=/models",
                "log tail:",
                "  | I0101 Started GRPCInferenceService",
            ]
        );
        assert_eq!(
            block("== FAILED CLIENT clients-0 (group clients)"),
            [
                "reason: it broke",
                "exit: container worker terminated: Error, exit code 2",
                "namespace: ns",
                "pod: r1-clients-0",
                "phase: Failed",
                "node: node-1",
                "restarts: 1",
                "reproduce: worker --servers 10.0.0.7:8001",
                "containers:",
                "  - worker: terminated (Error, exit code 2), ready=false, restarts=0",
                "events:",
                "  - Warning BackOff: Back-off restarting failed container (x3)",
                "log tail:",
                "  | error: unexpected argument '--no-such-flag'",
                "log tail of the previous container:",
                "  | the first attempt",
                "dig further:",
                "  $ kubectl -n ns describe pod r1-clients-0",
            ]
        );
        // report.json carries the typed diagnostics.
        let json = serde_json::to_value(&report).unwrap();
        let failed = &json["failed_members"];
        assert_eq!(failed[0]["diagnostics"]["exit"]["signal"], 9, "{json:#}");
        assert_eq!(
            failed[1]["diagnostics"]["pod"]["events"][0]["reason"],
            "BackOff"
        );
    }
}
