//! Per-scenario counters and latency histograms of one worker, shared by its streams. Each of
//! the worker's own scenarios has its own lock, so streams running different scenarios never
//! contend; a foreign client's scenarios (free-form names, read from its records) share one.

use crate::metrics::{Metrics, ServerLatencies};
use crate::outages::OutageTracker;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stress_common::histogram::LatencyHistogram;
use stress_common::scenario::Scenario;
use stress_common::signature::{Signature, SignatureCount};
use stress_common::status::{
    FailureRecord, ModelCounts, Outage, ScenarioCounts, StreamCounts, UnansweredCalls,
    WorkerSnapshot,
};
use stress_common::trace::ClientSpan;

#[derive(Default)]
struct Counts {
    tests: u64,
    failures: u64,
    requests: u64,
    skipped: u64,
    latency: LatencyHistogram,
    /// Open loop: how late each send left after its intended time.
    send_lateness: LatencyHistogram,
    /// The same latencies, per server, into the worker's Prometheus metrics (when it serves them).
    exported: ServerLatencies,
    /// The scenario's counts split by model (under the scenario's lock: one lock per request).
    models: HashMap<String, ModelStats>,
}

#[derive(Default)]
struct ModelStats {
    tests: u64,
    failures: u64,
    requests: u64,
    latency: LatencyHistogram,
    stream: Option<StreamStats>,
    uncounted_runs: u64,
}

#[derive(Default)]
struct StreamStats {
    streams: u64,
    responses: u64,
    first_response: LatencyHistogram,
    inter_response: LatencyHistogram,
}

impl Counts {
    /// The model's entry (allocating its name only the first time).
    fn model(&mut self, model: &str) -> &mut ModelStats {
        if !self.models.contains_key(model) {
            self.models.insert(model.to_string(), ModelStats::default());
        }
        self.models.get_mut(model).expect("inserted above")
    }
}

/// How many failure records a worker keeps in memory for its report (the store keeps its own).
const KEPT_FAILURES: usize = 100;

/// A failure whose signature was last seen more than this long before (ms) starts a new burst
/// of it, and goes out in full like the signature's first examples: each burst of a recurring
/// failure gets a dated example, so the driver can tell a burst inside an injected fault from
/// one outside it.
pub const BURST_GAP_MS: i64 = 10_000;

pub struct Stats {
    per_scenario: Vec<Mutex<Counts>>,
    /// A foreign client's scenarios, by the names its records give (see `crate::foreign`).
    foreign: Mutex<BTreeMap<String, Counts>>,
    total_requests: AtomicU64,
    failures: Mutex<Vec<FailureRecord>>,
    /// Every failure signature seen, with its count.
    signatures: Mutex<BTreeMap<Signature, SignatureCount>>,
    /// Per target server, the stretches without a good answer.
    outages: Mutex<OutageTracker>,
    /// Tests under way that count their requests only when they end.
    deferred: AtomicU32,
    /// Calls in flight per target server (empty: not watched, as in a single test).
    calls: Vec<ServerCalls>,
    metrics: Option<Arc<Metrics>>,
    /// The traced requests' spans since the previous snapshot (see [`Stats::traced`]).
    spans: Mutex<TracedSpans>,
    /// The foreign client program's hello, once it said it (every snapshot then carries it).
    client_program: Mutex<Option<stress_common::foreign::Hello>>,
    /// The last snapshot's time: each is later (its time is its identity in the store, which
    /// takes a retried write of one already committed for what it is).
    last_snapshot_ms: AtomicI64,
}

/// Client spans waiting for the next snapshot, and how many did not fit in it.
#[derive(Default)]
struct TracedSpans {
    spans: Vec<ClientSpan>,
    dropped: u64,
}

/// The most client spans one snapshot carries: a share traced far above the ~1% a span is
/// meant for must not turn each snapshot into a bulk write; the rest are counted in a log line.
pub const MAX_SPANS_PER_SNAPSHOT: usize = 10_000;

/// The calls to one target server: how many were sent and how many ended, counted by
/// [`CallInFlight`] (two relaxed increments a call); the snapshot loop reads them.
struct ServerCalls {
    address: String,
    sent: AtomicU64,
    ended: AtomicU64,
    /// The snapshots' memory: calls ended at the previous snapshot, and the snapshot time
    /// since which that count has not moved while calls waited.
    quiet: Mutex<(u64, i64)>,
}

/// One call to a server, in flight until it drops (answered, failed, timed out or abandoned:
/// a call's future that is dropped ends it too, so the counts always pair).
pub struct CallInFlight<'a>(Option<&'a ServerCalls>);

impl Drop for CallInFlight<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.ended.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            per_scenario: Scenario::ALL.iter().map(|_| Mutex::default()).collect(),
            foreign: Mutex::default(),
            total_requests: AtomicU64::new(0),
            failures: Mutex::default(),
            signatures: Mutex::default(),
            outages: Mutex::new(OutageTracker::new(stress_common::now_ms())),
            deferred: AtomicU32::new(0),
            calls: Vec::new(),
            metrics: None,
            spans: Mutex::default(),
            client_program: Mutex::default(),
            last_snapshot_ms: AtomicI64::new(0),
        }
    }
}

fn index(s: Scenario) -> usize {
    Scenario::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every scenario is in ALL")
}

impl Stats {
    /// Stats that also observe every latency into `metrics`' histograms.
    pub fn with_metrics(metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            metrics,
            ..Self::default()
        }
    }

    /// Watches the calls to each of `servers` (the clients' addresses): the snapshots list
    /// the ones holding calls unanswered ([`WorkerSnapshot::unanswered`]).
    pub fn watching<'s>(mut self, servers: impl IntoIterator<Item = &'s str>) -> Self {
        let now = stress_common::now_ms();
        self.calls = servers
            .into_iter()
            .map(|address| ServerCalls {
                address: address.to_string(),
                sent: AtomicU64::new(0),
                ended: AtomicU64::new(0),
                quiet: Mutex::new((0, now)),
            })
            .collect();
        self
    }

    /// A call to `server` leaves now; it is in flight until the result drops. A server not
    /// watched is not counted.
    pub fn call(&self, server: &str) -> CallInFlight<'_> {
        let watched = self.calls.iter().find(|c| c.address == server);
        if let Some(c) = watched {
            c.sent.fetch_add(1, Ordering::Relaxed);
        }
        CallInFlight(watched)
    }

    /// The servers holding calls at `at_ms`, with since when none of their calls ended (see
    /// [`stress_common::status::UnansweredCalls`]): a server with calls waiting whose ended
    /// count did not move since the previous snapshot stays quiet since then.
    fn unanswered(&self, at_ms: i64) -> Vec<UnansweredCalls> {
        let mut out = Vec::new();
        for c in &self.calls {
            // Ended first: a call counts as sent before it ends, so the difference is never
            // negative.
            let ended = c.ended.load(Ordering::Relaxed);
            let calls = c.sent.load(Ordering::Relaxed).saturating_sub(ended);
            let mut quiet = c.quiet.lock().unwrap_or_else(|e| e.into_inner());
            if calls == 0 || ended != quiet.0 {
                *quiet = (ended, at_ms);
            }
            if calls > 0 {
                out.push(UnansweredCalls {
                    server: c.address.clone(),
                    calls,
                    quiet_since_ms: quiet.1,
                });
            }
        }
        out
    }

    fn counts<'k>(&self, s: impl Into<ScenarioKey<'k>>) -> CountsGuard<'_, 'k> {
        match s.into() {
            ScenarioKey::Own(s) => CountsGuard::Own(
                self.per_scenario[index(s)]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            ),
            ScenarioKey::Foreign(name) => {
                let mut map = self.foreign.lock().unwrap_or_else(|e| e.into_inner());
                if !map.contains_key(name) {
                    map.insert(name.to_string(), Counts::default());
                }
                CountsGuard::Foreign(map, name)
            }
        }
    }

    /// One request sent by a scenario to `server` for `model`, with its latency (None: no
    /// response to time).
    pub fn request<'k>(
        &self,
        s: impl Into<ScenarioKey<'k>>,
        model: &str,
        server: &str,
        latency: Option<Duration>,
    ) {
        let s = s.into();
        let mut c = self.counts(s);
        c.requests += 1;
        let m = c.model(model);
        m.requests += 1;
        if let Some(l) = latency {
            m.latency.record(l);
            c.latency.record(l);
            if let Some(metrics) = &self.metrics {
                c.exported.observe(metrics, s.name(), server, l);
            }
        }
        drop(c);
        self.total_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A traced request's span, for the next snapshot (its count and latency go through
    /// [`Stats::request`] as any request's). Beyond [`MAX_SPANS_PER_SNAPSHOT`] it is dropped
    /// and counted.
    pub fn traced(&self, span: ClientSpan) {
        let mut traced = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if traced.spans.len() < MAX_SPANS_PER_SNAPSHOT {
            traced.spans.push(span);
        } else {
            traced.dropped += 1;
        }
    }

    /// The foreign client program that runs under this worker, as its hello said.
    pub fn client_program(&self, hello: &stress_common::foreign::Hello) {
        *self
            .client_program
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(hello.clone());
    }

    /// The spans since the previous snapshot (taken: each goes into one snapshot).
    fn take_spans(&self) -> Vec<ClientSpan> {
        let taken = std::mem::take(&mut *self.spans.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.dropped > 0 {
            tracing::warn!(
                dropped = taken.dropped,
                kept = taken.spans.len(),
                "client spans over {MAX_SPANS_PER_SNAPSHOT} per snapshot dropped: the trace share is too high for the load"
            );
        }
        taken.spans
    }

    /// An open-loop send that left `late` after its intended time.
    pub fn send_lateness<'k>(&self, s: impl Into<ScenarioKey<'k>>, late: Duration) {
        self.counts(s).send_lateness.record(late);
    }

    /// Requests counted in bulk (an external process such as perf_analyzer sent them).
    pub fn requests<'k>(&self, s: impl Into<ScenarioKey<'k>>, model: &str, n: u64) {
        let mut c = self.counts(s);
        c.requests += n;
        c.model(model).requests += n;
        drop(c);
        self.total_requests.fetch_add(n, Ordering::Relaxed);
    }

    /// A child client's run (perf_analyzer) killed before it printed its count: its
    /// requests reached the server but are counted nowhere.
    pub fn uncounted_run<'k>(&self, s: impl Into<ScenarioKey<'k>>, model: &str) {
        self.counts(s).model(model).uncounted_runs += 1;
    }

    /// The response stream of one request to a decoupled model, read to its end: how many
    /// responses it carried, when the first came (from the send) and the gaps between them.
    pub fn stream<'k>(
        &self,
        s: impl Into<ScenarioKey<'k>>,
        model: &str,
        responses: u64,
        first_response: Option<Duration>,
        gaps: &[Duration],
    ) {
        let mut c = self.counts(s);
        let stream = c
            .model(model)
            .stream
            .get_or_insert_with(StreamStats::default);
        stream.streams += 1;
        stream.responses += responses;
        if let Some(first) = first_response {
            stream.first_response.record(first);
        }
        for gap in gaps {
            stream.inter_response.record(*gap);
        }
    }

    /// A passed test of `model` ("" when the test has no single model).
    pub fn test_passed<'k>(&self, s: impl Into<ScenarioKey<'k>>, model: &str) {
        let mut c = self.counts(s);
        c.tests += 1;
        if !model.is_empty() {
            c.model(model).tests += 1;
        }
    }

    /// Counts a failed test and its signature. Returns whether its record goes out in full:
    /// the first [`SignatureCount::EXAMPLES`] of each signature (the rest are counted in the
    /// snapshots' `signatures`), the first of each new burst of a signature (its previous one
    /// more than [`BURST_GAP_MS`] before), and every one of a signature beyond the
    /// [`SignatureCount::MAX_SIGNATURES`] counted (the store caps records per member).
    pub fn test_failed<'k>(&self, s: impl Into<ScenarioKey<'k>>, failure: &FailureRecord) -> bool {
        {
            let mut c = self.counts(s);
            c.tests += 1;
            c.failures += 1;
            if !failure.model.is_empty() {
                let m = c.model(&failure.model);
                m.tests += 1;
                m.failures += 1;
            }
        }
        {
            let mut kept = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() < KEPT_FAILURES {
                kept.push(failure.clone());
            }
        }
        let signature = failure.signature();
        let mut signatures = self.signatures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = signatures.get_mut(&signature) {
            let new_burst = failure.at_ms - c.last_at_ms > BURST_GAP_MS;
            c.count += 1;
            c.first_at_ms = c.first_at_ms.min(failure.at_ms);
            c.last_at_ms = c.last_at_ms.max(failure.at_ms);
            return c.count <= SignatureCount::EXAMPLES || new_burst;
        }
        if signatures.len() < SignatureCount::MAX_SIGNATURES {
            signatures.insert(
                signature.clone(),
                SignatureCount {
                    signature,
                    count: 1,
                    first_at_ms: failure.at_ms,
                    last_at_ms: failure.at_ms,
                },
            );
        }
        true
    }

    /// Every signature counted so far, by when it was first seen.
    pub fn signature_counts(&self) -> Vec<SignatureCount> {
        let mut out: Vec<SignatureCount> = self
            .signatures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.first_at_ms, &a.signature).cmp(&(b.first_at_ms, &b.signature)));
        out
    }

    fn outages(&self) -> std::sync::MutexGuard<'_, OutageTracker> {
        self.outages.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A test on `server` passed, ending at `at_ms`: ends the outage open there, if any (see
    /// [`OutageTracker::ok`]).
    pub fn server_answered(&self, server: &str, at_ms: i64) {
        self.outages().ok(server, at_ms);
    }

    /// A test on `server` failed at `at_ms`; `sequence`: of a sequence scenario (see
    /// [`OutageTracker::failed`]).
    pub fn server_failed(&self, server: &str, at_ms: i64, sequence: bool) {
        self.outages().failed(server, at_ms, sequence);
    }

    pub fn test_skipped<'k>(&self, s: impl Into<ScenarioKey<'k>>) {
        self.counts(s).skipped += 1;
    }

    pub fn total_requests(&self) -> u64 {
        self.total_requests.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> Vec<FailureRecord> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Each scenario's counts: the listed own ones, then the foreign client's, by name.
    pub fn scenario_counts(&self, scenarios: &[Scenario]) -> Vec<ScenarioCounts> {
        let mut out: Vec<ScenarioCounts> = scenarios
            .iter()
            .map(|&s| scenario_counts_of(s.name(), &self.counts(s)))
            .collect();
        let foreign = self.foreign.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(foreign.iter().map(|(name, c)| scenario_counts_of(name, c)));
        out
    }

    /// Per (scenario, model) counts, by scenario then model (the foreign client's last).
    pub fn model_counts(&self, scenarios: &[Scenario]) -> Vec<ModelCounts> {
        let mut out = Vec::new();
        for &s in scenarios {
            out.extend(model_counts_of(s.name(), &self.counts(s)));
        }
        let foreign = self.foreign.lock().unwrap_or_else(|e| e.into_inner());
        for (name, c) in foreign.iter() {
            out.extend(model_counts_of(name, c));
        }
        out
    }

    /// The worker's counts now, with the outages that ended since the previous snapshot
    /// (taken: each goes into one snapshot). Its `qps` is 0: the caller, which knows the
    /// previous snapshot's total and time, sets it from this one's `total_requests`.
    pub fn snapshot(&self, scenarios: &[Scenario]) -> WorkerSnapshot {
        let outages = self.outages().take();
        self.snapshot_with(scenarios, outages)
    }

    /// The worker's last snapshot: [`Stats::snapshot`] with every outage still open too
    /// (`first_ok_ms: None`), judged at `stopped_ms`, when the worker stopped starting tests
    /// (see [`OutageTracker::finish`]).
    pub fn last_snapshot(&self, scenarios: &[Scenario], stopped_ms: i64) -> WorkerSnapshot {
        let outages = self.outages().finish(stopped_ms);
        self.snapshot_with(scenarios, outages)
    }

    fn snapshot_with(&self, scenarios: &[Scenario], outages: Vec<Outage>) -> WorkerSnapshot {
        let now = stress_common::now_ms();
        let mut at_ms = now;
        // Later than the last one even within its millisecond (the final snapshot right after
        // a tick's).
        let _ = self
            .last_snapshot_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                at_ms = now.max(last + 1);
                Some(at_ms)
            });
        WorkerSnapshot {
            at_ms,
            total_requests: self.total_requests(),
            qps: 0.0,
            scenarios: self.scenario_counts(scenarios),
            models: self.model_counts(scenarios),
            intervals: Vec::new(),
            series_point: false,
            signatures: self.signature_counts(),
            outages,
            rss_bytes: own_rss_bytes(),
            deferred_clients: self.deferred.load(Ordering::Relaxed),
            unanswered: self.unanswered(at_ms),
            client_spans: self.take_spans(),
            client_program: self
                .client_program
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Marks a test under way that counts its requests only when it ends (a perf_analyzer
    /// run), until the guard drops: the snapshots say so, and the driver does not take the
    /// QPS 0 of a worker whose clients are all inside one for a stall.
    pub fn deferred_test(&self) -> DeferredTest<'_> {
        self.deferred.fetch_add(1, Ordering::Relaxed);
        DeferredTest(&self.deferred)
    }
}

/// Which scenario a count is of: one of the worker's own, or one a foreign client named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioKey<'a> {
    Own(Scenario),
    Foreign(&'a str),
}

impl ScenarioKey<'_> {
    fn name(&self) -> &str {
        match self {
            ScenarioKey::Own(s) => s.name(),
            ScenarioKey::Foreign(name) => name,
        }
    }
}

impl From<Scenario> for ScenarioKey<'_> {
    fn from(s: Scenario) -> Self {
        ScenarioKey::Own(s)
    }
}

/// A scenario's counts, locked: its own lock, or the foreign scenarios' shared one.
enum CountsGuard<'s, 'k> {
    Own(std::sync::MutexGuard<'s, Counts>),
    /// The map holds the name: [`Stats::counts`] inserted it.
    Foreign(std::sync::MutexGuard<'s, BTreeMap<String, Counts>>, &'k str),
}

impl std::ops::Deref for CountsGuard<'_, '_> {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        match self {
            CountsGuard::Own(c) => c,
            CountsGuard::Foreign(map, name) => &map[*name],
        }
    }
}

impl std::ops::DerefMut for CountsGuard<'_, '_> {
    fn deref_mut(&mut self) -> &mut Counts {
        match self {
            CountsGuard::Own(c) => c,
            CountsGuard::Foreign(map, name) => map.get_mut(*name).expect("inserted when locked"),
        }
    }
}

fn scenario_counts_of(name: &str, c: &Counts) -> ScenarioCounts {
    ScenarioCounts {
        scenario: name.into(),
        tests: c.tests,
        failures: c.failures,
        requests: c.requests,
        skipped: c.skipped,
        latency_histogram: c.latency.encode(),
        send_lateness_histogram: if c.send_lateness.count() > 0 {
            c.send_lateness.encode()
        } else {
            String::new()
        },
    }
}

fn model_counts_of(name: &str, c: &Counts) -> Vec<ModelCounts> {
    let mut models: Vec<_> = c.models.iter().collect();
    models.sort_by_key(|(model, _)| model.as_str());
    models
        .into_iter()
        .map(|(model, m)| ModelCounts {
            scenario: name.into(),
            model: model.clone(),
            tests: m.tests,
            failures: m.failures,
            requests: m.requests,
            latency_histogram: m.latency.encode(),
            stream: m.stream.as_ref().map(|st| StreamCounts {
                streams: st.streams,
                responses: st.responses,
                first_response_histogram: st.first_response.encode(),
                inter_response_histogram: st.inter_response.encode(),
            }),
            uncounted_runs: m.uncounted_runs,
        })
        .collect()
}

/// A test under way that counts its requests when it ends; see [`Stats::deferred_test`].
pub struct DeferredTest<'a>(&'a AtomicU32);

impl Drop for DeferredTest<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// This process's resident memory (`VmRSS` of /proc/self/status), bytes; None where there is
/// no /proc.
pub fn own_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(at_ms: i64) -> FailureRecord {
        FailureRecord {
            at_ms,
            scenario: "SequenceValid".into(),
            server: "127.0.0.1:8001".into(),
            model: "simple_sequence".into(),
            expected: "OUTPUT0 [3]".into(),
            actual: "UNAVAILABLE: connection refused".into(),
            ..Default::default()
        }
    }

    #[test]
    fn each_snapshot_is_later_than_the_last_even_within_a_millisecond() {
        let stats = Stats::default();
        let mut times: Vec<i64> = (0..50).map(|_| stats.snapshot(&[]).at_ms).collect();
        times.push(stats.last_snapshot(&[], 0).at_ms);
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[test]
    fn a_snapshot_carries_the_worker_s_own_memory() {
        let rss = Stats::default()
            .snapshot(&[])
            .rss_bytes
            .expect("/proc/self/status on Linux");
        // A test binary with its runtime holds at least a MiB, and not terabytes.
        assert!((1 << 20..1 << 40).contains(&rss), "{rss}");
    }

    #[test]
    fn snapshots_name_the_servers_holding_calls_and_since_when_none_of_theirs_ended() {
        let (a, b) = ("10.0.0.1:8001", "10.0.0.2:8001");
        let stats = Stats::default().watching([a, b]);
        let t0 = stress_common::now_ms();
        let waiting = |at_ms: i64| -> Vec<(String, u64, i64)> {
            stats
                .unanswered(at_ms)
                .into_iter()
                .map(|u| (u.server.clone(), u.calls, u.quiet_ms(at_ms)))
                .collect()
        };
        assert!(waiting(t0).is_empty(), "nothing sent");
        // A call that ends between two snapshots never shows.
        drop(stats.call(a));
        assert!(waiting(t0 + 1_000).is_empty());
        // One call waits on each; a's keep ending, b's never.
        let on_a = stats.call(a);
        let on_b = stats.call(b);
        let also_on_b = stats.call(b);
        assert_eq!(
            waiting(t0 + 2_000),
            [(a.to_string(), 1, 1_000), (b.to_string(), 2, 1_000)],
            "quiet since the previous snapshot, when nothing waited"
        );
        drop(on_a);
        let on_a = stats.call(a);
        assert_eq!(
            waiting(t0 + 3_000),
            [(a.to_string(), 1, 0), (b.to_string(), 2, 2_000)]
        );
        assert_eq!(
            waiting(t0 + 5_000),
            [(a.to_string(), 1, 2_000), (b.to_string(), 2, 4_000)]
        );
        // One of b's calls ends (answered or failed alike): b is no longer quiet.
        drop(also_on_b);
        assert_eq!(waiting(t0 + 6_000)[1], (b.to_string(), 1, 0));
        drop((on_a, on_b));
        assert!(waiting(t0 + 7_000).is_empty());
        // A server not watched (a single test's Stats) is not counted.
        let unwatched = Stats::default();
        let _call = unwatched.call(a);
        assert!(unwatched.snapshot(&[]).unanswered.is_empty());
        // The snapshot carries them.
        let _waits = stats.call(b);
        assert_eq!(stats.snapshot(&[]).unanswered.len(), 1);
    }

    #[test]
    fn snapshots_take_the_client_spans_once_up_to_their_cap() {
        let span = |n: usize| ClientSpan {
            trace_id: format!("{n:032x}"),
            span_id: format!("{n:016x}"),
            scenario: "Load".into(),
            model: "add_sub".into(),
            server: "127.0.0.1:8001".into(),
            intended_ns: 1,
            sent_ns: 2,
            answered_ns: 3,
            received_ns: None,
            ok: true,
        };
        let stats = Stats::default();
        stats.traced(span(1));
        stats.traced(span(2));
        assert_eq!(stats.snapshot(&[]).client_spans, [span(1), span(2)]);
        assert!(stats.snapshot(&[]).client_spans.is_empty(), "taken once");
        for n in 0..MAX_SPANS_PER_SNAPSHOT + 5 {
            stats.traced(span(n));
        }
        let capped = stats.snapshot(&[]).client_spans;
        assert_eq!(capped.len(), MAX_SPANS_PER_SNAPSHOT);
        assert_eq!(capped.last(), Some(&span(MAX_SPANS_PER_SNAPSHOT - 1)));
        // The last snapshot carries those since the one before.
        stats.traced(span(3));
        assert_eq!(stats.last_snapshot(&[], 0).client_spans, [span(3)]);
    }

    #[test]
    fn snapshots_count_the_tests_under_way_that_count_their_requests_at_their_end() {
        let stats = Stats::default();
        let deferred = |s: &Stats| s.snapshot(&[]).deferred_clients;
        assert_eq!(deferred(&stats), 0);
        let first = stats.deferred_test();
        let second = stats.deferred_test();
        assert_eq!(deferred(&stats), 2);
        drop(first);
        assert_eq!(deferred(&stats), 1);
        drop(second);
        assert_eq!(deferred(&stats), 0);
    }

    #[test]
    fn the_first_examples_of_a_signature_and_each_new_burst_go_out_in_full() {
        let stats = Stats::default();
        let s = Scenario::SequenceValid;
        let t0 = 1_800_000_000_000;
        let examples = SignatureCount::EXAMPLES as i64;
        // A burst: its first examples go out, the rest only count.
        let burst: Vec<bool> = (0..examples + 3)
            .map(|i| stats.test_failed(s, &failure(t0 + i * 1_000)))
            .collect();
        assert_eq!(burst.iter().filter(|full| **full).count() as i64, examples);
        assert!(burst[..examples as usize].iter().all(|full| *full));
        let last = t0 + (examples + 2) * 1_000;
        // Exactly the gap later: still the same burst.
        assert!(!stats.test_failed(s, &failure(last + BURST_GAP_MS)));
        // After a quiet gap longer than that: a new burst, its first one in full, then counted.
        let second = last + 2 * BURST_GAP_MS + 1;
        assert!(stats.test_failed(s, &failure(second)));
        assert!(!stats.test_failed(s, &failure(second + 500)));
        let counts = stats.signature_counts();
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[0].count as i64, examples + 6);
        assert_eq!(
            (counts[0].first_at_ms, counts[0].last_at_ms),
            (t0, second + 500)
        );
        // A record reported out of order (earlier than the last) starts no burst.
        assert!(!stats.test_failed(s, &failure(t0)));
    }

    #[test]
    fn snapshots_take_the_ended_outages_once_and_the_last_flushes_the_open_ones() {
        let stats = Stats::default();
        let t0 = 1_800_000_000_000;
        let (a, b) = ("10.0.0.1:8001", "10.0.0.2:8001");
        for i in 1..=200 {
            stats.server_answered(a, t0 + i * 10);
            stats.server_answered(b, t0 + i * 10);
        }
        stats.server_failed(a, t0 + 2_005, true);
        stats.server_answered(a, t0 + 3_000);
        stats.server_failed(b, t0 + 2_500, false);
        let mix = [Scenario::SequenceValid];
        let first = stats.snapshot(&mix);
        assert_eq!(first.outages.len(), 1);
        assert_eq!(
            (
                first.outages[0].server.as_str(),
                first.outages[0].failed_sequences
            ),
            (a, 1)
        );
        assert!(stats.snapshot(&mix).outages.is_empty(), "taken once");
        let last = stats.last_snapshot(&mix, t0 + 3_100);
        assert_eq!(last.outages.len(), 1);
        assert_eq!(last.outages[0].server, b);
        assert_eq!(last.outages[0].first_ok_ms, None);
        assert_eq!(last.outages[0].first_failure_ms, Some(t0 + 2_500));
    }
}
