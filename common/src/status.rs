//! What a worker reports while it runs, and the one interface it reports through.
//!
//! Modelled on gRPC's stress framework: an event log per member (STARTING, RUNNING, SUCCESS,
//! FAILURE), QPS samples, plus what the L0 report needs (per-scenario counts and latency
//! histograms) and a record for every failed check.

pub mod carry;

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventKind {
    Starting,
    Running,
    Success,
    Failure,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Starting => "STARTING",
            EventKind::Running => "RUNNING",
            EventKind::Success => "SUCCESS",
            EventKind::Failure => "FAILURE",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "STARTING" => EventKind::Starting,
            "RUNNING" => EventKind::Running,
            "SUCCESS" => EventKind::Success,
            "FAILURE" => EventKind::Failure,
            _ => return None,
        })
    }
}

/// A worker's last event (SUCCESS or FAILURE, after its final snapshot: its outbox delivers in
/// order, so when this is in the store so are its final counts) says so with this prefix:
/// the driver stopping a run waits for these rather than for the workers' processes or pods
/// to be seen ending.
pub const FINAL_EVENT_PREFIX: &str = "final: ";

/// The details of a worker's last event (see [`FINAL_EVENT_PREFIX`]).
pub fn final_event_details(details: &str) -> String {
    format!("{FINAL_EVENT_PREFIX}{details}")
}

/// Whether an event is a worker's last (see [`FINAL_EVENT_PREFIX`]).
pub fn is_final_event(kind: EventKind, details: &str) -> bool {
    matches!(kind, EventKind::Success | EventKind::Failure)
        && details.starts_with(FINAL_EVENT_PREFIX)
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts of one scenario on one worker, cumulative since the worker started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioCounts {
    pub scenario: String,
    /// Scenario runs that were counted (skipped runs are not).
    pub tests: u64,
    pub failures: u64,
    /// Inference requests sent by the counted runs.
    pub requests: u64,
    /// Runs skipped because a precondition blocked them (e.g. NoStart on an open sequence).
    pub skipped: u64,
    /// Latency of every request, [`crate::histogram::LatencyHistogram::encode`]d.
    pub latency_histogram: String,
    /// Open loop only: how late each send left after its intended time, encoded like
    /// `latency_histogram` (empty when the scenario sent no open-loop request). The latency
    /// counts from the intended time, so it includes this lateness: set side by side they
    /// tell client lag from server latency.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub send_lateness_histogram: String,
}

/// One model's share of one scenario on one worker, cumulative like [`ScenarioCounts`]: the
/// report's per-model table. Tests count only the tests that named their model.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelCounts {
    pub scenario: String,
    pub model: String,
    pub tests: u64,
    pub failures: u64,
    pub requests: u64,
    /// Latency of every answered request ([`crate::histogram::LatencyHistogram::encode`]d);
    /// for a decoupled model, until its final response.
    pub latency_histogram: String,
    /// Decoupled models only: what their response streams carried.
    pub stream: Option<StreamCounts>,
    /// Runs of a child client (perf_analyzer, at most
    /// [`crate::limits::PERF_ANALYZER_REQUESTS`] requests each) killed at the
    /// worker's stop before they printed their count: their requests are in no count here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uncounted_runs: u64,
}

fn is_zero<N: Default + PartialEq>(n: &N) -> bool {
    *n == N::default()
}

/// What the response streams of a decoupled model's requests carried (one stream per request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamCounts {
    /// Requests whose stream was read to its end (final response or failure).
    pub streams: u64,
    /// Responses with data received on those streams (an empty final-flag message is not one).
    pub responses: u64,
    /// Send → first response, encoded like `latency_histogram`.
    pub first_response_histogram: String,
    /// Gap between consecutive responses of one stream.
    pub inter_response_histogram: String,
}

/// A periodic sample of a worker's progress: a QPS point and its cumulative per-scenario counts.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSnapshot {
    pub at_ms: i64,
    /// Requests sent since the worker started.
    pub total_requests: u64,
    /// Requests per second over the last sample interval.
    pub qps: f64,
    pub scenarios: Vec<ScenarioCounts>,
    /// The same counts per (scenario, model).
    #[serde(default)]
    pub models: Vec<ModelCounts>,
    /// What each (scenario, model) did since the previous interval boundary, when this
    /// snapshot closes an interval (see [`crate::interval`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalCounts>,
    /// Whether this snapshot closes a series interval (see [`crate::interval`]; a worker's
    /// last snapshot always does): its QPS point then joins the run's series (`qps_samples`).
    /// Any other snapshot only replaces the member's latest QPS (what the driver polls), so the
    /// series keeps about [`crate::interval::SERIES_POINTS`] points per worker whatever the
    /// run's length.
    #[serde(default)]
    pub series_point: bool,
    /// Every failure signature seen so far with its count (cumulative, like the counts): the
    /// failures beyond each signature's first examples are only counted here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::signature::SignatureCount>,
    /// Outages this worker saw since its previous snapshot, one per target server: a stretch
    /// without a good answer from it that had failed tests or lasted past the stall threshold
    /// (see [`Outage`]). Never dropped by the outbox (like `intervals`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outages: Vec<Outage>,
    /// The worker's own resident memory, bytes (None: not known here): the report judges its
    /// slope like a server's.
    pub rss_bytes: Option<u64>,
    /// Clients inside a test that counts its requests only when it ends (a perf_analyzer run,
    /// which takes seconds): QPS 0 while one is, is not a stall. The test's own time limit
    /// bounds it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred_clients: u32,
    /// The target servers that hold calls of this worker unanswered at this snapshot (none
    /// listed: every call sent has ended). The driver fails the run on a server that held
    /// calls and ended none of them for its zero-QPS window, and blames that server: a process
    /// that answers its health checks but not inference (a hung backend, a deadlock) is the
    /// server's failure, not a worker that sent nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<UnansweredCalls>,
    /// The traced requests answered since the previous snapshot (see [`crate::trace`]).
    /// Never dropped by the outbox (like `outages`): a share of the requests, bounded by it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_spans: Vec<crate::trace::ClientSpan>,
    /// A foreign client's hello (docs/clients.md): which implementation and version ran.
    pub client_program: Option<crate::foreign::Hello>,
}

/// Calls one worker sent to one server that had not ended (answered, failed or timed out) at
/// a snapshot, and since when no call to that server ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnansweredCalls {
    /// The server address, as the worker's `--servers` gave it (a failure record's `server`).
    pub server: String,
    /// Calls sent and not ended.
    pub calls: u64,
    /// The worker's snapshot time since which no call to the server ended (nothing ended at
    /// this or any later snapshot; at most one snapshot interval early).
    pub quiet_since_ms: i64,
}

impl UnansweredCalls {
    /// How long no call ended on the server, at a snapshot taken at `at_ms`.
    pub fn quiet_ms(&self, at_ms: i64) -> i64 {
        at_ms.saturating_sub(self.quiet_since_ms).max(0)
    }
}

/// A stretch of time in which one worker had no good answer from one server: from its last
/// passed test there to its next (None: none came by the worker's end). A worker records one
/// when tests failed in between, or when the gap outlasts its stall threshold (a paused or
/// unreachable server that makes no error, only silence). The driver matches these against the
/// faults it injected: an outage that spans a fault's recovery point ends at the client's
/// first good answer after it (the fault's recovery, for that client).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// The server address, as in a failure record's `server`.
    pub server: String,
    /// The end of the last passed test on that server before the outage (the worker's start
    /// when none had passed yet).
    pub last_ok_ms: i64,
    /// The first failed test's failure time, if any failed.
    pub first_failure_ms: Option<i64>,
    /// The end of the first passed test after it; None: still out at the worker's end.
    pub first_ok_ms: Option<i64>,
    /// Tests that failed in between.
    pub failed_tests: u64,
    /// Of those, tests of sequence scenarios (a sequence cut short).
    pub failed_sequences: u64,
}

/// One (scenario, model) on one worker over one interval: the exact latency histogram of the
/// interval (not cumulative), so percentiles over any window and any set of workers merge
/// exactly.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalCounts {
    pub scenario: String,
    pub model: String,
    pub start_ms: i64,
    pub end_ms: i64,
    /// Requests sent in the interval (answered or not).
    pub requests: u64,
    pub failures: u64,
    /// Latency of the interval's answered requests ([`crate::histogram::LatencyHistogram::encode`]d).
    pub latency_histogram: String,
}

/// What the driver's capacity controller asks of one worker: its closed-loop concurrency and,
/// in a phase with its own model mix, the mix as `--model` writes it (`NAME[@VERSION]:WEIGHT,...`;
/// None: the worker's own `--model` weights). During a spike, `rate`: the worker sends open
/// loop at this many requests per second instead (concurrency is what it returns to).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadTarget {
    pub concurrency: u32,
    pub mix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// During a spike and its recovery: requests the overloaded server does not answer
    /// (errors, timeouts) are counted as sent and unanswered, not failed; wrong answers still
    /// fail.
    #[serde(default)]
    pub count_unanswered: bool,
}

/// The member id of the driver's own events.
pub const DRIVER_MEMBER: &str = "driver";

/// Why the driver failed a run itself. Its FAILURE event (member [`DRIVER_MEMBER`]) records
/// [`DriverFailure::details`], whose opening words the judge reads back ([`DriverFailure::of`]):
/// the kind is written and read in this one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverFailure {
    /// Its lease ran out without a verdict: it died (written by whoever found the run
    /// abandoned, see `Store::abandon_expired`).
    Died,
    /// Its pre-flight check refused to start the load: the matrix asks for what its servers do
    /// not serve.
    Refused,
    /// It was interrupted (SIGTERM/SIGINT).
    Interrupted,
    /// Its launcher could not set the run up; also any text that opens with no kind's words
    /// (written before kinds were).
    SetUp,
}

impl DriverFailure {
    const ALL: [Self; 4] = [Self::Died, Self::Refused, Self::Interrupted, Self::SetUp];

    /// The opening words of the kind's details (Died's are those the store always wrote).
    fn opening(self) -> &'static str {
        match self {
            Self::Died => "ABANDONED: ",
            Self::Refused => "pre-flight refused the load: ",
            Self::Interrupted => "interrupted: ",
            Self::SetUp => "could not set the run up: ",
        }
    }

    /// The event's details: the kind's opening words, then `words`.
    pub fn details(self, words: &str) -> String {
        format!("{}{words}", self.opening())
    }

    /// The kind that `details` records.
    pub fn of(details: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|kind| details.starts_with(kind.opening()))
            .unwrap_or(Self::SetUp)
    }
}

/// Why the driver stops a run. Recorded before it stops the workers, as its RUNNING event
/// (member [`DRIVER_MEMBER`]) with [`Stopping::details`]: the report dates the stop from it, and
/// a worker told to stop reads it to choose whether its tests in flight may finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopping {
    /// The load phase is over: tests in flight finish, within the worker's drain timeout, so
    /// that they are counted.
    LoadPhaseEnded,
    /// A member failed: the verdict is made and nothing more is worth waiting for; tests in
    /// flight are abandoned (a perf_analyzer run among them counts as uncounted).
    Failed { member: String },
}

impl Stopping {
    /// What every stop's details start with.
    pub const PREFIX: &'static str = "stopping the run: ";
    const LOAD_PHASE_ENDED: &'static str = "the load phase ended";
    const FAILED: &'static str = " failed";

    pub fn details(&self) -> String {
        match self {
            Self::LoadPhaseEnded => format!("{}{}", Self::PREFIX, Self::LOAD_PHASE_ENDED),
            Self::Failed { member } => format!("{}{member}{}", Self::PREFIX, Self::FAILED),
        }
    }

    /// The stop that `details` records; None for any other text.
    pub fn parse(details: &str) -> Option<Self> {
        let why = details.strip_prefix(Self::PREFIX)?;
        if why == Self::LOAD_PHASE_ENDED {
            return Some(Self::LoadPhaseEnded);
        }
        let member = why.strip_suffix(Self::FAILED)?;
        (!member.is_empty()).then(|| Self::Failed {
            member: member.to_string(),
        })
    }

    /// Whether tests in flight get the drain timeout to finish.
    pub fn drains(&self) -> bool {
        matches!(self, Self::LoadPhaseEnded)
    }
}

/// One failed check, with everything needed to understand it without the logs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    pub at_ms: i64,
    pub scenario: String,
    /// The server address the failing request went to.
    pub server: String,
    pub model: String,
    pub correlation_id: Option<u64>,
    pub expected: String,
    pub actual: String,
    /// The kind of what the client saw, as the worker typed it (a timeout, the server's error
    /// status, a broken connection, an answer that failed its check). None: not typed (a record
    /// from before kinds were, or a failure the worker describes only in words); its
    /// signature then judges the kind from `actual`'s words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::signature::ErrorKind>,
    /// What happened on the wire before the failure (absent: the scenario sends no request
    /// through the recorded paths, or a record from before forensics existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forensics: Option<Forensics>,
}

/// A failed test's forensics: enough to tell a client bug from a server bug after the fact.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Forensics {
    /// Each request of the test, in order (at most [`Forensics::MAX_STEPS`]).
    pub steps: Vec<WireStep>,
    /// Steps left out beyond the cap.
    #[serde(default)]
    pub steps_left_out: u64,
    /// The test before this one that used the same correlation id on this worker.
    pub previous_use: Option<PreviousUse>,
    /// The server's log lines around the failure (filled in by the driver's report from the
    /// excerpts it saved; the worker cannot see them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_log: Vec<String>,
    /// The model's `max_sequence_idle_microseconds`, for a sequence model whose config the
    /// worker read (how long the server keeps an idle sequence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_idle_us: Option<u64>,
    /// When the failed test began, ms since the Unix epoch: a failure belongs to an injected
    /// fault when its test began before the fault's recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_started_ms: Option<i64>,
}

impl Forensics {
    /// Steps kept per failed test (a sequence is ~16 requests, rarely over 40).
    pub const MAX_STEPS: usize = 64;
}

/// One request on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WireStep {
    /// When it was sent and its answer (or error) received, µs since the Unix epoch.
    pub sent_us: i64,
    pub received_us: i64,
    pub server: String,
    pub model: String,
    pub correlation_id: Option<u64>,
    /// Sequence flags: `START`, `END`, `START|END`, or empty.
    pub flags: String,
    /// FNV-1a 64 of the inputs' names, datatypes, shapes and bytes, in hex.
    pub input_digest: String,
    /// `ok`, or the error as the client saw it.
    pub outcome: String,
}

/// The previous test on a correlation id: what it was, when it ran, how it ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreviousUse {
    pub scenario: String,
    pub model: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// `passed`, `failed`, or `skipped`.
    pub outcome: String,
    /// Sequence models on which it left the id's sequence open (no END sent).
    pub left_open: Vec<String>,
}

impl FailureRecord {
    /// What makes this failure the same as others ([`crate::signature`]).
    pub fn signature(&self) -> crate::signature::Signature {
        crate::signature::Signature::of_kind(
            &self.scenario,
            &self.model,
            &self.expected,
            &self.actual,
            self.error_kind,
        )
    }
}

impl fmt::Display for FailureRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} model {}",
            self.scenario, self.server, self.model
        )?;
        if let Some(id) = self.correlation_id {
            write!(f, " correlation id {id}")?;
        }
        write!(f, ": expected {}, got {}", self.expected, self.actual)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("status sink: {0}")]
pub struct SinkError(pub String);

/// Where a worker reports. The store implements it for runs under the driver; a standalone worker
/// uses [`NoopSink`] or [`JsonLinesSink`].
#[async_trait::async_trait]
pub trait StatusSink: Send + Sync {
    async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError>;
    async fn heartbeat(&self) -> Result<(), SinkError>;
    async fn snapshot(&self, snapshot: &WorkerSnapshot) -> Result<(), SinkError>;
    async fn failure(&self, failure: &FailureRecord) -> Result<(), SinkError>;
    /// What the sink's connections are doing, for a write that gave no answer in time (None:
    /// nothing to say).
    fn connections(&self) -> Option<String> {
        None
    }
    /// The load concurrency the driver's capacity controller asks of this worker (None: none
    /// set). Only a sink backed by the run's store knows one.
    async fn load_target(&self) -> Result<Option<LoadTarget>, SinkError> {
        Ok(None)
    }
    /// How the driver is stopping this run, once it has said so (None: it has not, or this
    /// sink is not the run's store).
    async fn stopping(&self) -> Result<Option<Stopping>, SinkError> {
        Ok(None)
    }
    /// What this member reported before this process started (a member replaced mid-run:
    /// see [`crate::status::carry`]); empty for a first start, or when this sink is not the run's store.
    async fn reported(&self) -> Result<crate::status::carry::Reported, SinkError> {
        Ok(Default::default())
    }
}

pub struct NoopSink;

#[async_trait::async_trait]
impl StatusSink for NoopSink {
    async fn event(&self, _: EventKind, _: &str) -> Result<(), SinkError> {
        Ok(())
    }
    async fn heartbeat(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn snapshot(&self, _: &WorkerSnapshot) -> Result<(), SinkError> {
        Ok(())
    }
    async fn failure(&self, _: &FailureRecord) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Appends one JSON object per line to a file: a standalone run's record, readable with `jq`.
pub struct JsonLinesSink {
    file: tokio::sync::Mutex<tokio::fs::File>,
}

impl JsonLinesSink {
    pub async fn create(path: &std::path::Path) -> Result<Self, SinkError> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(|e| SinkError(format!("{}: {e}", path.display())))?;
        Ok(Self {
            file: tokio::sync::Mutex::new(file),
        })
    }

    async fn write(&self, value: serde_json::Value) -> Result<(), SinkError> {
        use tokio::io::AsyncWriteExt;
        let mut line = value.to_string();
        line.push('\n');
        let mut file = self.file.lock().await;
        file.write_all(line.as_bytes())
            .await
            .map_err(|e| SinkError(e.to_string()))?;
        file.flush().await.map_err(|e| SinkError(e.to_string()))
    }
}

#[async_trait::async_trait]
impl StatusSink for JsonLinesSink {
    async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
        self.write(serde_json::json!({"type": "event", "at_ms": crate::now_ms(), "kind": kind, "details": details}))
            .await
    }
    async fn heartbeat(&self) -> Result<(), SinkError> {
        self.write(serde_json::json!({"type": "heartbeat", "at_ms": crate::now_ms()}))
            .await
    }
    async fn snapshot(&self, snapshot: &WorkerSnapshot) -> Result<(), SinkError> {
        self.write(serde_json::json!({"type": "snapshot", "snapshot": snapshot}))
            .await
    }
    async fn failure(&self, failure: &FailureRecord) -> Result<(), SinkError> {
        self.write(serde_json::json!({"type": "failure", "failure": failure}))
            .await
    }
}

/// A member of a run: a Triton server or a stress worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Role {
    Server,
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "SERVER",
            Role::Client => "CLIENT",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "SERVER" => Some(Role::Server),
            "CLIENT" => Some(Role::Client),
            _ => None,
        }
    }
}

/// Sinks for tests of what writes through a [`StatusSink`].
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Keeps the events it is given, but fails the first `failures` event writes of the kind it
    /// watches (every kind when `kind` is None): a store that is briefly unavailable. Holds
    /// the load target set [`FlakySink::with_load_target`].
    pub struct FlakySink {
        kind: Option<EventKind>,
        failures: u32,
        attempts: AtomicU32,
        events: Mutex<Vec<(EventKind, String)>>,
        load_target: Option<LoadTarget>,
    }

    impl FlakySink {
        pub fn new(kind: Option<EventKind>, failures: u32) -> Self {
            Self {
                kind,
                failures,
                attempts: AtomicU32::new(0),
                events: Mutex::default(),
                load_target: None,
            }
        }

        /// The sink with the load target a driver's controller set.
        pub fn with_load_target(self, target: LoadTarget) -> Self {
            Self {
                load_target: Some(target),
                ..self
            }
        }

        /// Writes tried of the watched kind, failed or not.
        pub fn attempts(&self) -> u32 {
            self.attempts.load(Ordering::SeqCst)
        }

        /// The events written, in order.
        pub fn events(&self) -> Vec<(EventKind, String)> {
            self.events.lock().expect("sink lock").clone()
        }
    }

    #[async_trait::async_trait]
    impl StatusSink for FlakySink {
        async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
            if self.kind.is_none_or(|k| k == kind)
                && self.attempts.fetch_add(1, Ordering::SeqCst) < self.failures
            {
                return Err(SinkError("the store is unavailable".into()));
            }
            self.events
                .lock()
                .expect("sink lock")
                .push((kind, details.into()));
            Ok(())
        }
        async fn heartbeat(&self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn snapshot(&self, _: &WorkerSnapshot) -> Result<(), SinkError> {
            Ok(())
        }
        async fn failure(&self, _: &FailureRecord) -> Result<(), SinkError> {
            Ok(())
        }
        async fn load_target(&self) -> Result<Option<LoadTarget>, SinkError> {
            Ok(self.load_target.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_kind_wins_over_the_words_of_the_answer() {
        // A text model's wrong answer that happens to say "deadline exceeded".
        let record = FailureRecord {
            scenario: "Infer".into(),
            model: "text_vector".into(),
            expected: "OUTPUT0 [\"ok\"]".into(),
            actual: "OUTPUT0 [\"deadline exceeded\"]".into(),
            error_kind: Some(crate::signature::ErrorKind::WrongAnswer),
            ..Default::default()
        };
        assert_eq!(
            record.signature().error_kind,
            crate::signature::ErrorKind::WrongAnswer
        );
        // Untyped (a record from before kinds were typed): judged from the words.
        let untyped = FailureRecord {
            error_kind: None,
            ..record.clone()
        };
        assert_eq!(
            untyped.signature().error_kind,
            crate::signature::ErrorKind::Timeout
        );
        assert_ne!(record.signature().id(), untyped.signature().id());
        // The record's JSON carries the kind by its stable name, and old JSON without it reads.
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["error_kind"], "wrong_answer");
        let back: FailureRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
        let mut old = serde_json::to_value(&untyped).unwrap();
        assert!(old.get("error_kind").is_none());
        old.as_object_mut().unwrap().remove("error_kind");
        let back: FailureRecord = serde_json::from_value(old).unwrap();
        assert_eq!(back.error_kind, None);
    }

    #[test]
    fn a_drivers_failure_kind_round_trips_through_its_details() {
        use DriverFailure::*;
        for kind in [Died, Refused, Interrupted, SetUp] {
            // Words that open like another kind's do not change the kind.
            for words in [
                "",
                "x",
                "interrupted: ABANDONED: pre-flight refused the load: ",
            ] {
                assert_eq!(DriverFailure::of(&kind.details(words)), kind, "{words:?}");
            }
        }
        // What the store has written for an abandoned run since leases existed.
        let abandoned = "ABANDONED: the driver's lease ran out without a verdict";
        assert_eq!(DriverFailure::of(abandoned), Died);
        // A text from before kinds: the launcher's.
        assert_eq!(
            DriverFailure::of("driver interrupted (SIGTERM/SIGINT)"),
            SetUp
        );
    }

    #[test]
    fn a_stop_round_trips_through_its_details() {
        for stop in [
            Stopping::LoadPhaseEnded,
            Stopping::Failed {
                member: "triton-0".into(),
            },
            // A member id that itself reads like a stop still round-trips.
            Stopping::Failed {
                member: "the load phase ended failed".into(),
            },
        ] {
            assert_eq!(Stopping::parse(&stop.details()), Some(stop.clone()));
            assert!(stop.details().starts_with(Stopping::PREFIX));
        }
        // The texts the report has read since the event existed.
        assert_eq!(
            Stopping::LoadPhaseEnded.details(),
            "stopping the run: the load phase ended"
        );
        assert_eq!(
            Stopping::parse("stopping the run: grpc-clients-1 failed"),
            Some(Stopping::Failed {
                member: "grpc-clients-1".into()
            })
        );
    }

    #[test]
    fn other_texts_are_no_stop_and_only_the_end_drains() {
        for other in [
            "",
            "launched",
            "stopping the run: ",
            "stopping the run:  failed",
            "stopping the run: something else",
            "the load phase ended",
        ] {
            assert_eq!(Stopping::parse(other), None, "{other:?}");
        }
        assert!(Stopping::LoadPhaseEnded.drains());
        assert!(
            !Stopping::Failed {
                member: "triton-0".into()
            }
            .drains()
        );
    }
}
