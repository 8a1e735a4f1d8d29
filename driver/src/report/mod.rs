//! The final report, built only from the status store, so `driver report --run ID` rebuilds the
//! same report at any time: the L0 table over all workers and per client group, the per-model
//! table, QPS per worker
//! over time, Triton's server-side metrics, every failure, and for every failed member its exit,
//! log tail and the command to reproduce it.

pub mod baseline;
pub mod diff;
mod facts;
pub mod failures;
pub mod grid;
pub mod history;
mod judgement;
mod measures;
pub mod spans;
pub mod summary;
pub mod timeline;
pub mod trace;

use crate::capacity::phase::PhaseRecord;
use crate::launcher::MemberDiagnostics;
use crate::launcher::logs::LogExcerpt;
use crate::report::facts::RunFacts;
use crate::report::judgement::Judgement;
use serde::Serialize;
use std::collections::BTreeMap;
use stress_common::contract::RunId;
use stress_common::report::{L0Table, ModelRowJson, ModelTable, RowJson};
use stress_common::status::{FailureRecord, Role};
use stress_common::store::{Member, Store, StoreError};
use stress_common::triton_metrics::ModelMetrics;

/// How many failure records the report lists (the store has the rest).
const LISTED_FAILURES: usize = 50;
/// Points kept of each worker's QPS series in report.json.
const SERIES_POINTS: usize = 600;

#[serde_with::skip_serializing_none]
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
    pub memory_growth_bytes: Option<f64>,
    /// Still growing over the load phase's steady state (judged like a server's).
    pub memory_finding: Option<String>,
}

/// A server of the run, launched or external.
#[serde_with::skip_serializing_none]
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
    /// Client implementations × server builds, when the matrix crosses them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<grid::Grid>,
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
    /// The traced requests above each (scenario, model)'s traced p99, client and server spans
    /// joined: where their time went, and the slowest as waterfalls (None: nothing traced, or
    /// the traces could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_tail: Option<spans::TraceJoin>,
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

/// The run's counts merged: the L0 tables (all workers, and per group) and the model table.
struct Tables {
    total: L0Table,
    groups: BTreeMap<String, L0Table>,
    models: ModelTable,
}

impl Tables {
    fn count(facts: &RunFacts) -> Result<Self, ReportError> {
        let corrupt = |e: stress_common::histogram::HistogramError| facts.corrupt(e.to_string());
        let mut total = L0Table::new();
        let mut groups: BTreeMap<String, L0Table> = BTreeMap::new();
        for (member_id, counts) in &facts.scenario_counts {
            total.add(counts).map_err(corrupt)?;
            let (group, _) = group_of(&facts.members, member_id);
            groups
                .entry(group.to_string())
                .or_default()
                .add(counts)
                .map_err(corrupt)?;
        }
        let mut models = ModelTable::new();
        for (_, _, counts) in &facts.model_counts {
            models.add(counts).map_err(corrupt)?;
        }
        Ok(Tables {
            total,
            groups,
            models,
        })
    }
}

/// Each worker's QPS over the run, with its memory and `memory_findings`' verdict on it.
fn worker_rows(facts: &RunFacts, memory_findings: &BTreeMap<String, String>) -> Vec<WorkerQps> {
    let mut rss_by_member = facts.worker_rss_by_member();
    facts
        .qps
        .iter()
        .map(|w| {
            let rss = rss_by_member.remove(&w.member_id).unwrap_or_default();
            WorkerQps {
                member_id: w.member_id.clone(),
                group: group_of(&facts.members, &w.member_id).0.to_string(),
                samples: w.samples as usize,
                min: w.min,
                avg: w.avg,
                max: w.max,
                series: w
                    .points
                    .iter()
                    .map(|&(at_ms, qps)| ((at_ms - facts.run.started_at_ms as f64) / 1000.0, qps))
                    .collect(),
                memory_growth_bytes: (rss.len() >= 2).then(|| rss[rss.len() - 1].1 - rss[0].1),
                memory_finding: memory_findings.get(&w.member_id).cloned(),
                rss,
            }
        })
        .collect()
}

/// Each server's series over time, with its memory as judged (`memory`, by member).
fn server_series(
    facts: &RunFacts,
    mut memory: BTreeMap<String, judgement::ServerMemory>,
) -> Vec<timeline::ServerSeries> {
    let mut series = timeline::server_series(
        facts.run.started_at_ms,
        &facts.server_ids(),
        &facts.server_samples,
    );
    for s in &mut series {
        let judged = memory.remove(&s.member_id).unwrap_or_default();
        s.memory_finding = judged.finding;
        s.memory_not_judged = judged.not_judged;
        s.memory_slope_bytes_per_s = judged.slope_bytes_per_s;
    }
    series
}

/// Every server of the run, and whether its metrics were scraped (`server_metrics`).
fn server_rows(
    facts: &RunFacts,
    server_metrics: &BTreeMap<String, Vec<ModelMetrics>>,
) -> Vec<ServerRow> {
    facts
        .members
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
                version: facts
                    .identities
                    .get(&m.member_id)
                    .map(ServerIdentity::label),
            }
        })
        .collect()
}

/// Every failed member by time, with the diagnostics it takes out of `diagnostics`.
fn failed_members(
    facts: &RunFacts,
    diagnostics: &mut BTreeMap<String, MemberDiagnostics>,
) -> Vec<FailedMember> {
    facts::first_failures(&facts.events)
        .into_iter()
        .map(|e| {
            let (group, role) = group_of(&facts.members, &e.member_id);
            FailedMember {
                member_id: e.member_id.clone(),
                role: role.map_or("?", Role::as_str).to_string(),
                group: group.to_string(),
                failed_at_ms: e.at_ms,
                reason: e.details.clone(),
                diagnostics: diagnostics.remove(&e.member_id).unwrap_or_default(),
            }
        })
        .collect()
}

/// A failure's forensics get the log lines of the server it went to, around it.
fn with_server_log(f: &mut FailureRecord, excerpts: &[LogExcerpt], members: &[Member]) {
    let Some(forensics) = &mut f.forensics else {
        return;
    };
    if let Some(e) = excerpts.iter().find(|e| {
        e.from_ms <= f.at_ms
            && f.at_ms <= e.to_ms
            && member_addresses(members, &e.member_id).contains(&f.server)
    }) {
        forensics.server_log = e
            .lines
            .iter()
            .map(|l| format!("{}: {l}", e.member_id))
            .collect();
    }
}

impl Report {
    /// The load phase as the report's header says it: none when no request was sent (its
    /// `load_seconds` is then only the floor that keeps QPS finite).
    pub fn load_phase(&self) -> String {
        match self.scenarios.last().map_or(0, |total| total.requests) {
            0 => "none (no request sent)".into(),
            _ => format!("{:.1} s", self.load_seconds),
        }
    }

    /// The report of a run as the store holds it, with its stored judgement. A run without
    /// one (still running, or recorded before judgements were stored) is judged now; once the
    /// run has ended (it has its verdict), that judgement is saved, where the store is
    /// writable, so the run is judged once and later reports read it. A stored judgement of
    /// another verdict than the run's (a run judged abandoned whose driver came back and
    /// finished it) is stale: judged again, and replaced.
    pub async fn from_store(store: &Store, run_id: &RunId) -> Result<Self, ReportError> {
        let facts = RunFacts::read(store, run_id).await?;
        // A judgement that cannot be read (written by a release whose judgement had another
        // shape) is judged again, never a lost report.
        let stored = match store.document::<Judgement>(run_id, "").await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!("the stored judgement of run {run_id} not read ({e}): judged again");
                None
            }
        }
        .filter(|j| facts.run.verdict.as_deref() == Some(j.verdict.as_str()));
        let save = stored.is_none() && facts.run.verdict.is_some() && !store.is_read_only();
        let (report, judgement) = Self::from_facts(facts, stored)?;
        if save && let Err(e) = store.save_document(run_id, "", &judgement).await {
            // The report stands: a later report judges the run again.
            tracing::warn!("the judgement of run {run_id} not saved: {e}");
        }
        Ok(report)
    }

    /// The report of a run's facts: counted, judged (`stored`: the run's judgement, when it
    /// has one; else judged now) and assembled, without the store; with its judgement.
    pub(crate) fn from_facts(
        facts: RunFacts,
        stored: Option<Judgement>,
    ) -> Result<(Self, Judgement), ReportError> {
        // Counted before judged: of a store corrupt twice, the counts' error is the one told.
        let tables = Tables::count(&facts)?;
        let judgement = match stored {
            Some(judgement) => judgement,
            None => judgement::judge(&facts)?,
        };
        let mut report = Self::assemble(facts, tables, judgement.clone());
        report.estimates = report.measures(1).iter().map(Into::into).collect();
        Ok((report, judgement))
    }

    fn assemble(mut facts: RunFacts, tables: Tables, judgement: Judgement) -> Self {
        let load_seconds = facts.qps_span.load_seconds();
        let workers = worker_rows(&facts, &judgement.worker_memory);
        let server_series = server_series(&facts, judgement.server_memory);
        let mut diagnostics = std::mem::take(&mut facts.diagnostics);
        // Before the failed members take their diagnostics.
        let server_metrics: BTreeMap<String, Vec<ModelMetrics>> = diagnostics
            .iter_mut()
            .filter_map(|(member, d)| Some((member.clone(), d.server_metrics.take()?)))
            .collect();
        let servers = server_rows(&facts, &server_metrics);
        let failed_members = failed_members(&facts, &mut diagnostics);
        facts.failures.sort_by_key(|(_, f)| f.at_ms);
        facts.failures.truncate(LISTED_FAILURES);
        for (_, f) in &mut facts.failures {
            with_server_log(f, &facts.excerpts, &facts.members);
        }
        let mut judged = facts.signatures;
        for s in &mut judged.signatures {
            with_server_log(&mut s.example, &facts.excerpts, &facts.members);
        }
        let Tables {
            total,
            groups,
            models,
        } = tables;
        let run = facts.run;
        // A stored matrix that no longer parses (an older version) has no grid.
        let grid = crate::matrix::parse(&run.matrix_yaml, "matrix.yaml")
            .ok()
            .and_then(|m| {
                let cells = grid::CellFacts {
                    groups: &groups,
                    signatures: &judged.signatures,
                    programs: &facts.client_programs,
                    load_seconds,
                };
                grid::grid(&m, &cells)
            });
        Report {
            run_id: run.run_id,
            name: run.name,
            fingerprint: run.fingerprint,
            launcher: run.launcher,
            verdict: judgement.verdict,
            started_at_ms: run.started_at_ms,
            finished_at_ms: run.finished_at_ms,
            load_seconds,
            scenarios: total.to_json(load_seconds),
            groups: groups
                .iter()
                .map(|(g, t)| (g.clone(), t.to_json(load_seconds)))
                .collect(),
            grid,
            models: models.to_json(load_seconds),
            workers,
            servers,
            server_metrics,
            failure_count: facts.failure_count,
            failures: facts.failures,
            failed_members,
            slo: facts.slo,
            regressions: facts
                .baseline
                .as_ref()
                .map(|b| b.regressions.clone())
                .unwrap_or_default(),
            baseline: facts.baseline,
            change_points: facts.change_points,
            capacity: (!facts.phases.is_empty()).then(|| CapacityReport::new(facts.phases)),
            sweep: facts.sweep,
            timeline: crate::report::timeline::Timeline {
                interval_s: facts.latency.interval_s,
                latency: facts.latency.series,
                servers: server_series,
            },
            reconciliation: judgement.reconciliation,
            traces: facts.traces,
            traced_tail: facts
                .traced_tail
                .as_ref()
                .and_then(|t| spans::join(t, spans::TAIL_SHARE))
                .map(|join| spans::TraceJoin {
                    receiver: facts.span_receiver,
                    ..join
                }),
            analysis: judgement.analysis,
            signatures: judged.signatures,
            known_issues: judged.known_issues,
            signature_history: judged.history_note,
            faults: judgement.faults,
            incomplete: None,
            tables: (total, groups),
            model_table: models,
            batches: facts.latency.batches,
            estimates: Vec::new(),
        }
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
    use stress_common::status::EventKind;

    #[test]
    fn a_run_that_sent_no_request_has_no_load_phase() {
        let total = |requests| stress_common::report::RowJson {
            scenario: "TOTAL".into(),
            requests,
            ..Default::default()
        };
        let mut report = Report {
            load_seconds: 1.0,
            scenarios: vec![total(0)],
            ..Report::default()
        };
        assert_eq!(report.load_phase(), "none (no request sent)");
        report.scenarios = vec![total(38)];
        assert_eq!(report.load_phase(), "1.0 s");
        report.scenarios.clear();
        assert_eq!(report.load_phase(), "none (no request sent)");
    }

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

    /// A run is judged once: a report of a run without a stored judgement judges it, and saves
    /// it once the run has ended where the store is writable; a report of a run with one reads
    /// it (here one the facts would not give), and says what the judged one said, byte for
    /// byte.
    #[tokio::test]
    async fn a_stored_judgement_is_read_rather_than_judged_again() {
        use stress_common::store::{NewRun, RUNNING, StoreOptions};
        use stress_common::triton_metrics::ServerSample;

        let dir = tempfile::tempdir().unwrap();
        let url = Store::sqlite_url(&dir.path().join("store.sqlite"));
        let store = Store::connect(&url).await.unwrap();
        let run = RunId::from("r1");
        store
            .create_run(&NewRun {
                run_id: run.to_string(),
                name: "judged once".into(),
                matrix_yaml: String::new(),
                launcher: "local".into(),
                started_at_ms: 0,
                fingerprint: None,
            })
            .await
            .unwrap();
        store
            .upsert_member(&Member {
                run_id: run.to_string(),
                member_id: "triton-0".into(),
                role: Role::Server,
                group_name: "triton".into(),
                index: 0,
                address: String::new(),
                process_name: "tritonserver".into(),
                corr_id_base: None,
                corr_id_block_size: None,
                command: String::new(),
            })
            .await
            .unwrap();
        // A memory that keeps growing, at a slope of many digits.
        for i in 0..30_i32 {
            let t = f64::from(i);
            let sample = ServerSample {
                at_ms: i64::from(i) * 1000,
                interval_ms: 1000,
                rss_bytes: Some((1e8 + 12_345.678_9 * t.powf(1.5) + 3e6 * t.sin()).round()),
                ..Default::default()
            };
            store
                .record_server_sample(&run, &"triton-0".into(), &sample)
                .await
                .unwrap();
        }
        let stored = || async { store.document::<Judgement>(&run, "").await.unwrap() };

        // Still running: judged, not saved (its verdict is not made).
        let report = Report::from_store(&store, &run).await.unwrap();
        assert_eq!(report.verdict, RUNNING);
        assert_eq!(stored().await, None);
        store.finish_run(&run, "PASSED", 30_000).await.unwrap();
        // Ended, read from a read-only store: judged, not saved.
        let reader = Store::open_read_only(&url, &StoreOptions::reading())
            .await
            .unwrap();
        assert_eq!(
            Report::from_store(&reader, &run).await.unwrap().verdict,
            "PASSED"
        );
        assert_eq!(stored().await, None);
        // Ended, writable: judged and saved.
        let judged = Report::from_store(&store, &run).await.unwrap();
        let saved = stored().await.expect("the judgement is saved");
        assert_eq!(saved.verdict, "PASSED");
        let slope = judged.timeline.servers[0].memory_slope_bytes_per_s;
        assert!(slope.is_some_and(|s| s > 0.0), "{:?}", judged.timeline);
        assert_eq!(saved.server_memory["triton-0"].slope_bytes_per_s, slope);
        // Read back, the report is the judged one, byte for byte.
        let read = Report::from_store(&store, &run).await.unwrap();
        let json = |r: &Report| serde_json::to_string_pretty(r).unwrap();
        assert_eq!(json(&read), json(&judged));

        // A stored judgement is what the reports say, whatever the facts would give now.
        let mut other = saved.clone();
        other.analysis.independent_failures = 7;
        let memory = other.server_memory.get_mut("triton-0").unwrap();
        memory.finding = Some("stored finding".into());
        memory.slope_bytes_per_s = Some(1.5);
        store.save_document(&run, "", &other).await.unwrap();
        for s in [&store, &reader] {
            let report = Report::from_store(s, &run).await.unwrap();
            assert_eq!(report.analysis.independent_failures, 7);
            let server = &report.timeline.servers[0];
            assert_eq!(server.memory_finding.as_deref(), Some("stored finding"));
            assert_eq!(server.memory_slope_bytes_per_s, Some(1.5));
        }
        assert_eq!(
            stored().await,
            Some(other),
            "a stored judgement is not replaced"
        );

        // One judged when the run's verdict was another (abandoned, then finished by its
        // driver) is stale: judged again, and replaced.
        let mut stale = saved.clone();
        stale.verdict = stress_common::store::ABANDONED.into();
        stale.analysis.independent_failures = 7;
        store.save_document(&run, "", &stale).await.unwrap();
        let report = Report::from_store(&store, &run).await.unwrap();
        assert_eq!(report.verdict, "PASSED");
        assert_eq!(json(&report), json(&judged));
        assert_eq!(stored().await, Some(saved.clone()));

        // One of a shape this release cannot read: judged again, and replaced.
        #[derive(serde::Serialize, serde::Deserialize)]
        struct OlderShape {
            verdict: u32,
        }
        impl stress_common::store::Document for OlderShape {
            const KIND: &'static str = Judgement::KIND;
        }
        store
            .save_document(&run, "", &OlderShape { verdict: 1 })
            .await
            .unwrap();
        let report = Report::from_store(&store, &run).await.unwrap();
        assert_eq!(json(&report), json(&judged));
        assert_eq!(stored().await, Some(saved));
    }
}
