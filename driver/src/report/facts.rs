//! What the store holds of a run, read in one async step: the report is then judged and
//! assembled from these facts without touching the store again (`judgement`, `Report`).

use super::timeline::{LatencySeries, LatencySeriesBuilder};
use super::{BATCHES, Batches, ReportError, SERIES_POINTS, ServerIdentity, history};
use crate::capacity::phase::PhaseRecord;
use crate::launcher::MemberDiagnostics;
use crate::launcher::logs::LogExcerpt;
use std::collections::BTreeMap;
use stress_common::contract::RunId;
use stress_common::qps::{QpsSpan, QpsSummary};
use stress_common::status::{FailureRecord, ModelCounts, Outage, Role, ScenarioCounts};
use stress_common::store::{Document, EventRow, Member, RunRow, Store, TracedTail};
use stress_common::triton_metrics::ServerSample;

/// Everything of a run that its report reads, as the store holds it.
#[derive(Debug)]
pub(crate) struct RunFacts {
    pub run: RunRow,
    pub members: Vec<Member>,
    pub scenario_counts: Vec<(String, ScenarioCounts)>,
    /// (member, at_ms, counts).
    pub model_counts: Vec<(String, i64, ModelCounts)>,
    pub qps_span: QpsSpan,
    /// (member, at_ms, resident bytes) of every QPS sample that carried it.
    pub worker_rss: Vec<(String, i64, u64)>,
    /// Each worker's QPS, at most [`SERIES_POINTS`] points.
    pub qps: Vec<QpsSummary>,
    pub diagnostics: BTreeMap<String, MemberDiagnostics>,
    pub identities: BTreeMap<String, ServerIdentity>,
    /// Each foreign client member's program, as its hello said.
    pub client_programs: BTreeMap<String, stress_common::foreign::Hello>,
    pub events: Vec<EventRow>,
    pub phases: Vec<PhaseRecord>,
    pub sweep: Option<crate::capacity::sweep::SweepAnswer>,
    pub baseline: Option<crate::judge::regression::Comparison>,
    pub change_points: Option<history::ChangePoints>,
    pub slo: Vec<crate::judge::slo::Outcome>,
    pub latency: LatencyFacts,
    pub server_samples: Vec<(String, ServerSample)>,
    pub fault_log: Option<crate::judge::faults::FaultLog>,
    /// The workers' outages (read only for a run that injected faults: nothing else reads them).
    pub outages: Vec<(String, Outage)>,
    pub traces: BTreeMap<String, crate::report::trace::TraceSummary>,
    /// The traced requests above each (scenario, model)'s traced p99, with their server spans
    /// (None: not read, the store failed there; the report stands without them).
    pub traced_tail: Option<TracedTail>,
    /// What the run's OTLP receiver did (None: it had none).
    pub span_receiver: Option<super::spans::ReceiverCounts>,
    pub failure_count: u64,
    /// Every failure record, as (member, record).
    pub failures: Vec<(String, FailureRecord)>,
    pub excerpts: Vec<LogExcerpt>,
    pub signatures: crate::judge::verdicts::RunSignatures,
    /// When the facts were read: a run without a verdict is judged lost against it.
    pub read_at_ms: i64,
}

/// The run's latency series, aggregated while streamed from the store.
#[derive(Debug, Default)]
pub(crate) struct LatencyFacts {
    pub interval_s: f64,
    pub series: Vec<LatencySeries>,
    pub batches: Batches,
}

impl RunFacts {
    /// Reads the run's facts (in the order the report always read them, so a failing store
    /// fails at the same read).
    pub async fn read(store: &Store, run_id: &RunId) -> Result<Self, ReportError> {
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| ReportError::NoRun(run_id.into()))?;
        let members = store.members(run_id).await?;
        let scenario_counts = store.scenario_counts(run_id).await?;
        let model_counts = store.model_counts(run_id).await?;
        // Aggregated by the store: what is read is bounded by members × SERIES_POINTS, not by
        // the run's length.
        let qps_span = store.qps_span(run_id).await?;
        let worker_rss = store.worker_rss(run_id).await?;
        let qps = store
            .qps_summaries(run_id, &qps_span, SERIES_POINTS)
            .await?;
        let diagnostics = keyed(store, run_id).await?;
        let identities = keyed(store, run_id).await?;
        let client_programs = keyed(store, run_id).await?;
        let events = store.events(run_id, 0).await?;
        let phases = all(store, run_id).await?;
        let sweep = all(store, run_id).await?.into_iter().next();
        let baseline = store.document(run_id, "").await?;
        let change_points = store.document(run_id, "").await?;
        let slo = all(store, run_id).await?;
        let latency = read_latency(store, run_id, run.started_at_ms).await?;
        let server_samples = store.server_samples(run_id).await?;
        let fault_log = store.document(run_id, "").await?;
        let traces = keyed(store, run_id).await?;
        let failure_count = store
            .failure_totals(run_id)
            .await?
            .into_iter()
            .map(|(_, n)| n)
            .sum();
        let failures = store.failures(run_id).await?;
        let excerpts = all(store, run_id).await?;
        let signatures = store.document(run_id, "").await?.unwrap_or_default();
        let outages = match fault_log {
            Some(_) => store.outages(run_id).await?,
            None => Vec::new(),
        };
        let traced_tail = read_traced_tail(store, run_id).await;
        let span_receiver = store
            .document::<super::spans::ReceiverCounts>(run_id, "")
            .await
            .ok()
            .flatten();
        Ok(RunFacts {
            run,
            members,
            scenario_counts,
            model_counts,
            qps_span,
            worker_rss,
            qps,
            diagnostics,
            identities,
            client_programs,
            events,
            phases,
            sweep,
            baseline,
            change_points,
            slo,
            latency,
            server_samples,
            fault_log,
            outages,
            traces,
            traced_tail,
            span_receiver,
            failure_count,
            failures,
            excerpts,
            signatures,
            read_at_ms: stress_common::now_ms(),
        })
    }

    /// The error of facts that do not add up (a corrupt store).
    pub fn corrupt(&self, message: String) -> ReportError {
        ReportError::Corrupt {
            run: self.run.run_id.clone(),
            message,
        }
    }

    /// Seconds since the run started.
    pub fn since_start(&self, at_ms: i64) -> f64 {
        (at_ms - self.run.started_at_ms) as f64 / 1000.0
    }

    /// The load phase, in seconds since the start (None: no QPS sample): from when the first
    /// worker started sending (`QpsSpan::start_ms`) to the last sample. Memory is judged over
    /// its steady state.
    pub fn load_phase(&self) -> Option<(f64, f64)> {
        let span = &self.qps_span;
        span.start_ms()
            .zip(span.last_ms)
            .map(|(start, last)| (self.since_start(start), self.since_start(last)))
    }

    /// Each worker's resident memory: (seconds since the start, bytes), in time order.
    pub fn worker_rss_by_member(&self) -> BTreeMap<String, Vec<(f64, f64)>> {
        let mut by_member: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (member, at_ms, bytes) in &self.worker_rss {
            by_member
                .entry(member.clone())
                .or_default()
                .push((self.since_start(*at_ms), *bytes as f64));
        }
        by_member
    }

    /// Every server's (member, group), in member order.
    pub fn server_ids(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .filter(|m| m.role == Role::Server)
            .map(|m| (m.member_id.clone(), m.group_name.clone()))
            .collect()
    }

    /// When the first worker started: a worker's first event comes before it sends anything.
    pub fn workers_started_ms(&self) -> Option<i64> {
        self.events
            .iter()
            .filter(|e| super::group_of(&self.members, &e.member_id).1 == Some(Role::Client))
            .map(|e| e.at_ms)
            .min()
    }

    /// When the driver began to stop the run (None: it did not stop early).
    pub fn stopping_at_ms(&self) -> Option<i64> {
        self.events
            .iter()
            .find(|e| e.stopping().is_some())
            .map(|e| e.at_ms)
    }
}

/// Each member's first FAILURE event, by time (members failing at once in event order).
pub(crate) fn first_failures(events: &[EventRow]) -> Vec<&EventRow> {
    let mut first: Vec<&EventRow> = Vec::new();
    for e in events {
        if e.kind == stress_common::status::EventKind::Failure
            && !first.iter().any(|f| f.member_id == e.member_id)
        {
            first.push(e);
        }
    }
    first.sort_by_key(|e| e.at_ms);
    first
}

/// The run's traced tail; a store that fails here costs the report its tail's breakdown,
/// never the report.
async fn read_traced_tail(store: &Store, run_id: &RunId) -> Option<TracedTail> {
    match store.traced_tail(run_id, super::spans::TAIL_SHARE).await {
        Ok(tail) => Some(tail),
        Err(e) => {
            tracing::warn!("the traced requests of run {run_id} not read ({e}): no tail breakdown");
            None
        }
    }
}

/// Every document of kind `D` of the run, in the store's key order.
async fn all<D: Document>(store: &Store, run_id: &RunId) -> Result<Vec<D>, ReportError> {
    Ok(store
        .documents::<D>(run_id)
        .await?
        .into_iter()
        .map(|(_, d)| d)
        .collect())
}

/// Every document of kind `D` of the run, by key.
async fn keyed<D: Document, C: FromIterator<(String, D)>>(
    store: &Store,
    run_id: &RunId,
) -> Result<C, ReportError> {
    Ok(store.documents::<D>(run_id).await?.into_iter().collect())
}

/// The run's latency series per interval, and the same intervals in batches.
async fn read_latency(
    store: &Store,
    run_id: &RunId,
    started_at_ms: i64,
) -> Result<LatencyFacts, ReportError> {
    // Streamed by end time into one open bucket per series: memory does not grow with the
    // run's length or its workers.
    let (interval_s, series) = match store.latency_interval_width(run_id).await? {
        None => (0.0, Vec::new()),
        Some(width_ms) => {
            let builder = LatencySeriesBuilder::new(started_at_ms, width_ms);
            latency_series(store, run_id, builder).await?
        }
    };
    // The same intervals in about BATCHES batches: the within-run spread of what is
    // compared with other runs.
    let batches = match batch_width_ms(interval_s, &series) {
        None => Batches::default(),
        Some(width_ms) => {
            // With the L0 table TOTAL row's series: every scenario together.
            let builder = LatencySeriesBuilder::new(started_at_ms, width_ms).with_total("TOTAL");
            let (width_s, latency) = latency_series(store, run_id, builder).await?;
            Batches { width_s, latency }
        }
    };
    Ok(LatencyFacts {
        interval_s,
        series,
        batches,
    })
}

/// The batches' width: whole intervals, [`BATCHES`] to twice as many over the longest series
/// (every interval a batch of its own in a shorter one; None: no interval data).
fn batch_width_ms(interval_s: f64, latency: &[LatencySeries]) -> Option<i64> {
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
) -> Result<(f64, Vec<LatencySeries>), ReportError> {
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
