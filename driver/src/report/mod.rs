//! The final report, built only from the status store, so `driver report --run ID` rebuilds the
//! same report at any time: the L0 table over all workers and per client group, the per-model
//! table, QPS per worker
//! over time, Triton's server-side metrics, every failure, and for every failed member its exit,
//! log tail and the command to reproduce it.

pub mod baseline;
pub mod diff;
pub mod failures;
pub mod history;
mod measures;
pub mod summary;
pub mod timeline;
pub mod trace;

use crate::capacity::phase::PhaseRecord;
use crate::launcher::MemberDiagnostics;
use crate::launcher::logs::LogExcerpt;
use crate::report::timeline::LatencySeriesBuilder;
use serde::Serialize;
use std::collections::BTreeMap;
use stress_common::contract::RunId;
use stress_common::report::{L0Table, ModelRowJson, ModelTable, RowJson};
use stress_common::status::{EventKind, FailureRecord, Role};
use stress_common::store::{ABANDONED, Member, Store, StoreError};
use stress_common::triton_metrics::ModelMetrics;

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
    /// The worker's own resident memory: (seconds since the run started, bytes) at each
    /// point of its series that carried it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rss: Vec<(f64, f64)>,
    /// Its growth from first to last sample, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_growth_bytes: Option<f64>,
    /// Still growing over the load phase's steady state (judged like a server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_finding: Option<String>,
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
    /// What the server said it is (`GET /v2` or `ServerMetadata` before the load), e.g.
    /// `triton 2.51.0` (None: not asked, or no answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A server's name and version as it said before the load (a store document per server).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ServerIdentity {
    pub name: String,
    pub version: String,
}

impl stress_common::store::Document for ServerIdentity {
    const KIND: &'static str = "server_identity";
}

impl ServerIdentity {
    /// `triton 2.51.0`.
    pub fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
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
    /// The matrix's fingerprint (None: a run recorded before fingerprints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
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
    /// Its findings: `metric`, `baseline`, `current`, `change`, its interval and q-value.
    pub regressions: Vec<crate::judge::regression::Finding>,
    /// Every number a comparison reads off this run, with its 95% interval within the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub estimates: Vec<crate::judge::change::Estimate>,
    /// The change points over the matrix's history up to this run (None: not looked for, e.g.
    /// a run recorded before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_points: Option<history::ChangePoints>,
    /// Capacity mode's answers (absent for a soak run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityReport>,
    /// A sweep's answer: its variants ranked by capacity, the Pareto front and the best
    /// (absent unless the run is a sweep; each variant's own run has its capacity report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::capacity::sweep::SweepAnswer>,
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
    /// Every fault the run injected, judged: its timeline, recovery and cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<crate::judge::faults::FaultOutcome>,
    /// Why this report lacks what the store holds (None: complete). Set when the status store
    /// could not be read at the end of the run: the driver writes what it knows itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(skip)]
    pub(crate) tables: (L0Table, BTreeMap<String, L0Table>),
    #[serde(skip)]
    pub(crate) model_table: ModelTable,
    /// The run in batches, for the spread of what is compared (see `measures`).
    #[serde(skip)]
    pub(crate) batches: Batches,
}

/// The run's latency series in batches of equal time (about [`BATCHES`]), each batch's
/// percentiles from its merged histograms.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    pub width_s: f64,
    pub latency: Vec<crate::report::timeline::LatencySeries>,
}

/// A run's series are cut into about this many batches for its within-run spread (from this
/// to twice as many; 10 to 40 is the usual range for batch means, and more batches of a short
/// run would hold too few requests each).
pub const BATCHES: usize = 20;

/// The batches' width: whole intervals, [`BATCHES`] to twice as many over the longest series
/// (every interval a batch of its own in a shorter one; None: no interval data).
fn batch_width_ms(
    interval_s: f64,
    latency: &[crate::report::timeline::LatencySeries],
) -> Option<i64> {
    let interval_ms = (interval_s * 1000.0).round() as i64;
    let points = latency.iter().map(|s| s.points.len()).max()?;
    (interval_ms > 0).then(|| interval_ms * (points / BATCHES).max(1) as i64)
}

/// The run's latency series built by `series` (buckets of the interval, or of a batch of
/// them), streamed from the store.
async fn latency_series(
    store: &Store,
    run_id: &RunId,
    mut series: LatencySeriesBuilder,
) -> Result<(f64, Vec<crate::report::timeline::LatencySeries>), ReportError> {
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
        return Err(ReportError::Corrupt {
            run: run_id.into(),
            message: format!("latency intervals: {e}"),
        });
    }
    Ok(series.finish())
}

/// Capacity mode in report.json: one result row per group, phase and model ("mix" for the whole
/// mix), and every phase's record with the controller's trace.
#[derive(Debug, Serialize)]
pub struct CapacityReport {
    pub results: Vec<CapacityResult>,
    /// Per group and phase: the servers' signals at the edge window, the recommended
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
    pub async fn from_store(store: &Store, run_id: &RunId) -> Result<Self, ReportError> {
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
        // The load phase, in seconds since the start: the workers' first sample closes their
        // first interval. Memory is judged over its steady state.
        let load = span.first_ms.zip(span.last_ms).map(|(first, last)| {
            let since_start = |ms: i64| (ms - run.started_at_ms) as f64 / 1000.0;
            (
                since_start(first - span.interval_ms.unwrap_or(0)),
                since_start(last),
            )
        });
        let mut worker_rss: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (member, at_ms, bytes) in store.worker_rss(run_id).await? {
            worker_rss
                .entry(member)
                .or_default()
                .push(((at_ms - run.started_at_ms) as f64 / 1000.0, bytes as f64));
        }
        let workers = store
            .qps_summaries(run_id, &span, SERIES_POINTS)
            .await?
            .into_iter()
            .map(|w| {
                let rss = worker_rss.remove(&w.member_id).unwrap_or_default();
                let memory_growth_bytes = (rss.len() >= 2).then(|| rss[rss.len() - 1].1 - rss[0].1);
                let memory_finding = (!rss.is_empty())
                    .then(|| crate::judge::memory::judge(&rss, load))
                    .and_then(|m| m.finding());
                (w, rss, memory_growth_bytes, memory_finding)
            })
            .map(|(w, rss, memory_growth_bytes, memory_finding)| WorkerQps {
                rss,
                memory_growth_bytes,
                memory_finding,
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

        let run_key = run_id.clone();
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
        let identities: BTreeMap<String, ServerIdentity> = store
            .documents::<ServerIdentity>(&run_key)
            .await?
            .into_iter()
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
                    version: identities.get(&m.member_id).map(ServerIdentity::label),
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
        let sweep = store
            .documents::<crate::capacity::sweep::SweepAnswer>(&run_key)
            .await?
            .into_iter()
            .next()
            .map(|(_, a)| a);
        let baseline = store
            .document::<crate::judge::regression::Comparison>(&run_key, "")
            .await?;
        let change_points = store
            .document::<history::ChangePoints>(&run_key, "")
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
                let series = LatencySeriesBuilder::new(run.started_at_ms, width_ms);
                latency_series(store, run_id, series).await?
            }
        };
        // The same intervals in about BATCHES batches: the within-run spread of what is
        // compared with other runs.
        let batches = match batch_width_ms(interval_s, &latency) {
            None => Batches::default(),
            Some(width_ms) => {
                // With the L0 table TOTAL row's series: every scenario together.
                let series =
                    LatencySeriesBuilder::new(run.started_at_ms, width_ms).with_total("TOTAL");
                let (width_s, latency) = latency_series(store, run_id, series).await?;
                Batches { width_s, latency }
            }
        };
        let server_ids: Vec<(String, String)> = members
            .iter()
            .filter(|m| m.role == Role::Server)
            .map(|m| (m.member_id.clone(), m.group_name.clone()))
            .collect();
        let server_samples = store.server_samples(run_id).await?;
        let fault_log = store
            .document::<crate::judge::faults::FaultLog>(&run_key, "")
            .await?;
        let timeline = crate::report::timeline::Timeline {
            interval_s,
            latency,
            servers: crate::report::timeline::server_series(
                run.started_at_ms,
                &server_ids,
                &server_samples,
                load,
                &fault_log
                    .as_ref()
                    .map(|log| crate::judge::faults::restarts(&log.faults))
                    .unwrap_or_default(),
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
            root.judge(&judged.signatures);
        }
        failures.truncate(LISTED_FAILURES);
        let faults = match &fault_log {
            Some(log) => crate::judge::faults::judge(&log.faults, &store.outages(&run_key).await?),
            None => Vec::new(),
        };

        let mut report = Report {
            run_id: run.run_id,
            name: run.name,
            fingerprint: run.fingerprint,
            launcher: run.launcher,
            // A run without a verdict whose lease ran out lost its driver.
            verdict: run.verdict.unwrap_or_else(|| {
                let lost = run
                    .lease_until_ms
                    .is_some_and(|until| until < stress_common::now_ms());
                if lost {
                    ABANDONED
                } else {
                    stress_common::store::RUNNING
                }
                .into()
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
            change_points,
            capacity,
            sweep,
            timeline,
            reconciliation,
            traces,
            analysis,
            signatures: judged.signatures,
            known_issues: judged.known_issues,
            signature_history: judged.history_note,
            faults,
            incomplete: None,
            tables: (total, groups),
            model_table,
            batches,
            estimates: Vec::new(),
        };
        report.estimates = report.measures(1).iter().map(Into::into).collect();
        Ok(report)
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
                .record_event(
                    &run_id.into(),
                    &member.into(),
                    EventKind::Failure,
                    "it broke",
                )
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
            pod: Some(crate::launcher::diagnostics::PodDiagnostics {
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

        let report = Report::from_store(&store, &RunId::from(run_id))
            .await
            .unwrap();
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
