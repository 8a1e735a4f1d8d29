//! The scenarios of Triton's `qa/L0_long_running_stress`, each one test per call, each checking
//! what the server answers. A scenario returns an [`Outcome`]; requests and latencies go into the
//! worker's [`Stats`] as they happen, so a long test shows up in QPS while it runs.

pub mod answers;
pub mod crashing;
pub mod image;
pub mod infer;
pub mod load;
mod pacer;
pub mod perf_analyzer;
pub use answers::{Answer, Answers, CANCEL_DRAIN, Counted};
pub use pacer::{Pacer, PacerCall, Tick};
pub mod sequence;
pub mod timeout;
mod window;
pub use window::{StreamSchedule, WindowSpan};

use crate::client::{ClientError, InferRequest, InferResponse, TritonClient};
use crate::stats::Stats;
use rand::rngs::StdRng;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use stress_common::scenario::Scenario;
use stress_common::schedule::{RequestIntervals, Schedule, SendTimes};
use stress_common::signature::ErrorKind;
use stress_common::status::{FailureRecord, Forensics, WireStep};
use tokio_util::sync::CancellationToken;

/// What one test found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Passed,
    Failed(Failure),
    /// A precondition blocked the test; it is not counted (upstream's `run()` returning None).
    Skipped(String),
}

/// A failed check: what was expected and what came back.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub model: String,
    pub correlation_id: Option<u64>,
    pub expected: String,
    pub actual: String,
    /// What kind of failure, where the worker knows it by type (None: judged from `actual`'s
    /// words).
    pub kind: Option<ErrorKind>,
}

impl Failure {
    pub fn new(model: &str, expected: impl Into<String>, actual: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            correlation_id: None,
            expected: expected.into(),
            actual: actual.into(),
            kind: None,
        }
    }

    /// The request got no answer but `error`: its kind is the error's.
    pub fn client(model: &str, expected: impl Into<String>, error: &ClientError) -> Self {
        Self {
            kind: Some(error.kind()),
            ..Self::new(model, expected, error.to_string())
        }
    }

    /// The server answered, and the answer failed its check.
    pub fn wrong_answer(
        model: &str,
        expected: impl Into<String>,
        actual: impl Into<String>,
    ) -> Self {
        Self {
            kind: Some(ErrorKind::WrongAnswer),
            ..Self::new(model, expected, actual)
        }
    }

    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = Some(kind);
        self
    }

    pub fn with_correlation_id(mut self, id: u64) -> Self {
        self.correlation_id = Some(id);
        self
    }

    pub fn into_record(self, scenario: Scenario, server: &str) -> FailureRecord {
        FailureRecord {
            at_ms: stress_common::now_ms(),
            scenario: scenario.name().into(),
            server: server.into(),
            model: self.model,
            correlation_id: self.correlation_id,
            expected: self.expected,
            actual: self.actual,
            error_kind: self.kind,
            forensics: None,
        }
    }
}

/// A test's requests on the wire, for its failure's forensics (bounded: the first
/// [`Forensics::MAX_STEPS`] are kept, the rest counted).
#[derive(Debug, Default)]
pub struct WireLog {
    steps: std::sync::Mutex<(Vec<WireStep>, u64)>,
}

impl WireLog {
    fn push(&self, step: WireStep) {
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        if steps.0.len() < Forensics::MAX_STEPS {
            steps.0.push(step);
        } else {
            steps.1 += 1;
        }
    }

    /// The steps so far and how many were left out; the log is empty after.
    pub fn take(&self) -> (Vec<WireStep>, u64) {
        std::mem::take(&mut *self.steps.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// When a request left: the clock for its latency and the wall time for its forensics.
pub struct Sent<'a> {
    at: Instant,
    wall_us: i64,
    /// In flight until the request is counted (see [`crate::stats::Stats::call`]).
    _call: crate::stats::CallInFlight<'a>,
}

fn wall_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// FNV-1a 64 of a request's inputs (names, datatypes, shapes and bytes), in hex: two steps
/// with the same digest sent the same tensors.
pub fn input_digest(request: &InferRequest) -> String {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    for t in &request.inputs {
        h.write(t.name.as_bytes());
        h.write(t.datatype.as_str().as_bytes());
        for d in &t.shape {
            h.write(&d.to_le_bytes());
        }
        h.write(&t.data);
    }
    format!("{:016x}", h.finish())
}

pub use stress_common::contract::LoadMode;

/// Models and knobs every scenario reads; fixed for the life of a worker.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sequence models with their max_batch_size (learned at start-up).
    pub sequence_models: Vec<(String, i64)>,
    pub identity_model: String,
    pub load_model: String,
    pub image_model: String,
    /// The delay the Timeout scenario asks of the identity model, and its shorter deadline.
    pub timeout_delay: Duration,
    pub timeout_deadline: Duration,
    /// How long the CrashingClient child sends before it is killed.
    pub crash_after: Duration,
    /// The worker binary, run in its hidden crashing-child mode.
    pub worker_binary: PathBuf,
    pub load_mode: LoadMode,
    /// `--request-intervals`: the file's gaps, read at start-up, and how far the worker's
    /// windows got through them (each window goes on where the last stopped, as
    /// perf_analyzer's schedule cycles through the list once per pass).
    pub request_intervals: Option<(RequestIntervals, Arc<AtomicU64>)>,
    /// `--adaptive-load`: the load the driver's capacity controller asks for, refreshed from the
    /// store every poll interval; read at the start of each load window.
    pub load_target: Option<Arc<LiveLoad>>,
    pub load_window: Duration,
    pub image_batch: usize,
    pub perf_analyzer: Option<PathBuf>,
    /// Deadline of each request of a sequence (upstream gives a whole sequence 25 s).
    pub request_timeout: Duration,
    /// The Infer scenario's models and data flags.
    pub infer: crate::model::InferOptions,
    /// The Infer scenario's requests, built at start-up from the servers' model descriptions.
    pub infer_plan: Option<Arc<infer::InferPlan>>,
    /// `--trace-share`: the load windows' traced requests (None: none is traced).
    pub trace: Option<Tracing>,
}

/// Which requests carry a W3C trace context, and the clock of their client spans. Only the
/// unary requests of a load window are traced ([`load::drive`]: the Load and Infer scenarios);
/// sequences, decoupled streams, the Timeout and CrashingClient scenarios' requests and
/// perf_analyzer's are not.
#[derive(Debug, Clone, Copy)]
pub struct Tracing {
    pub share: stress_common::trace::TraceShare,
    /// Read once at the worker's start, so all of its spans are on one clock.
    pub clock: stress_common::trace::WallClock,
}

impl Tracing {
    /// Tracing at `share`; None when it traces nothing.
    pub fn of(share: Option<stress_common::trace::TraceShare>) -> Option<Self> {
        share.filter(|s| s.get() > 0.0).map(|share| Self {
            share,
            clock: stress_common::trace::WallClock::now(),
        })
    }
}

/// Capacity mode's live load: the closed-loop concurrency, the model mix last applied to the
/// Infer plan (None: the `--model` weights), and during a spike an open-loop rate.
#[derive(Debug)]
pub struct LiveLoad {
    pub concurrency: AtomicU32,
    pub mix: std::sync::Mutex<Option<String>>,
    /// A spike's requests per second as `f64` bits; 0: no spike (closed loop).
    rate_bits: AtomicU64,
    /// During a spike and its recovery: see [`WindowLoad::overload`].
    pub count_unanswered: AtomicBool,
}

impl LiveLoad {
    pub fn new(concurrency: u32) -> Self {
        Self {
            concurrency: AtomicU32::new(concurrency),
            mix: std::sync::Mutex::new(None),
            rate_bits: AtomicU64::new(0),
            count_unanswered: AtomicBool::new(false),
        }
    }

    /// A spike's rate, or None (closed loop at [`Self::concurrency`]).
    pub fn rate(&self) -> Option<f64> {
        let r = f64::from_bits(self.rate_bits.load(Ordering::Relaxed));
        (r.is_finite() && r > 0.0).then_some(r)
    }

    /// Sets (or with None clears) the spike's rate; a rate that is not a positive number clears.
    pub fn set_rate(&self, rate: Option<f64>) -> Option<f64> {
        let bits = rate
            .filter(|r| r.is_finite() && *r > 0.0)
            .map_or(0, f64::to_bits);
        let before = f64::from_bits(self.rate_bits.swap(bits, Ordering::Relaxed));
        (before > 0.0).then_some(before)
    }
}

/// The load of one load window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowLoad {
    pub mode: LoadMode,
    /// A capacity spike and its recovery: requests the overloaded server does not answer
    /// (errors, timeouts) are counted as sent and unanswered, and the load goes on, instead of
    /// failing the test and ending the window. Wrong answers still fail.
    pub overload: bool,
}

impl Settings {
    /// The send times of an open-loop `mode` (None: closed loop), from the next request of
    /// the request-intervals file on; `sent` afterwards moves that on (see
    /// [`Self::request_intervals`]).
    pub fn send_times(&self, mode: &LoadMode) -> Option<SendTimes> {
        let seed = rand::random();
        if let Some(schedule) = mode.rate_schedule() {
            return Some(schedule.times(seed));
        }
        match (mode, &self.request_intervals) {
            (LoadMode::Intervals(_), Some((list, cursor))) => Some(
                Schedule::Intervals(list.clone()).times_from(seed, cursor.load(Ordering::Relaxed)),
            ),
            _ => None,
        }
    }

    /// Counts `n` sends of a window on the request-intervals file's cursor.
    pub fn sent(&self, n: u64) {
        if let Some((_, cursor)) = &self.request_intervals {
            cursor.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The load of the next window: the driver's live target under `--adaptive-load`, else
    /// the worker's own `--concurrency` / `--load-rate`.
    pub fn window_load(&self) -> WindowLoad {
        let Some(live) = &self.load_target else {
            return WindowLoad {
                mode: self.load_mode.clone(),
                overload: false,
            };
        };
        let overload = live.count_unanswered.load(Ordering::Relaxed);
        match live.rate() {
            Some(rate) => WindowLoad {
                mode: LoadMode::Rate(rate),
                overload,
            },
            None => WindowLoad {
                mode: LoadMode::Concurrency(live.concurrency.load(Ordering::Relaxed).max(1)),
                overload,
            },
        }
    }
}

/// An open loop's schedule, and how a request may leave from the pacer's thread.
pub struct OpenLoop<P> {
    /// Send times, as offsets from `start`.
    pub times: Box<dyn Iterator<Item = Duration> + Send>,
    /// When the schedule starts: now, or in the past where it goes on from an earlier
    /// window's ([`StreamSchedule`]; the sends already due leave at once, late).
    pub start: Instant,
    /// No send at or after this; the schedule stops there.
    pub until: Option<Instant>,
    /// Sends request `i` at once, called on the [`Pacer`]'s thread at its intended time: such
    /// a send skips the runtime's wake-up, the larger part of an open loop's lateness and of
    /// its CPU. It returns the call on the wire (the pacer polls it once, so that its answer
    /// wakes the loop), or None when the request cannot leave at once (`send` then sends it
    /// from the runtime).
    pub send_now: Option<SendNow<P>>,
    /// Reads the answers of the calls `send_now` made on the pacer's own wakes, while sends
    /// come close together, so that an answer does not wake the runtime (see
    /// `pacer::AnswerReads`).
    pub answers: Option<Box<dyn crate::client::AnswerReader>>,
}

/// See [`OpenLoop::send_now`].
pub type SendNow<P> = Box<dyn FnMut(u64) -> Option<P> + Send>;

/// Open loop: request `i` leaves at its intended time, the loop's start plus the schedule's
/// `i`th offset, until the schedule ends, `until` comes, `changed()` says so (checked at each
/// send and every [`CHANGE_CHECK`]) or cancellation. Each request is sent by the pacer's
/// thread (`send_now`) where it can be, else by `send(i, intended, None)`; `send(i, intended,
/// Some(call))` takes a call already sent. Either way `send` returns the request's [`Answer`],
/// which goes into `in_flight` beside those an earlier window handed over, and the first
/// failure among them ends the loop. Each send's lateness (the time it left, or was handed to
/// the runtime, minus its intended time) goes to `late`, so client lag is measured, not hidden
/// in the latency. A request the pacer sent is always in `in_flight`, also when the loop stops.
/// The intended times come from a [`Pacer`] thread, which keeps them to the microsecond where
/// the runtime's timer keeps them to the millisecond. Beyond [`MAX_IN_FLIGHT`] requests in
/// flight the client itself is the bottleneck: it waits, and the lateness shows by how much.
///
/// Where the schedule stopped at `until` (and the worker was not told to stop), the loop
/// returns that point ([`Pacer::stopped_at`]), for the next window to go on from, and leaves
/// the requests still in flight in `in_flight` for it (see [`answers`]); otherwise it waits
/// for them ([`answers::drain`]) and returns None.
pub async fn open_loop<'a, P>(
    schedule: OpenLoop<P>,
    changed: impl Fn() -> bool,
    cancel: &CancellationToken,
    in_flight: &mut Answers<'a>,
    late: impl Fn(Duration),
    mut send: impl FnMut(u64, tokio::time::Instant, Option<PacerCall<P>>) -> Answer<'a>,
) -> Result<Option<Instant>, Failure>
where
    P: std::future::Future + Unpin + Send + 'static,
    P::Output: Send + 'static,
{
    use futures::StreamExt;
    let mut pacer = Pacer::start(schedule);
    let mut launch = |tick: Tick<P>| {
        late(match &tick.sent {
            Some((_, at)) => at.saturating_duration_since(tick.intended),
            None => tick.intended.elapsed(),
        });
        let intended = tokio::time::Instant::from_std(tick.intended);
        send(tick.index, intended, tick.sent.map(|(call, _)| call))
    };
    let mut check = tokio::time::interval(CHANGE_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Sends first: a send's lateness is the client's own; an answer waiting a moment
            // changes nothing (its latency was taken when it arrived, in its own future).
            biased;
            _ = cancel.cancelled() => break,
            tick = pacer.next(), if in_flight.len() < MAX_IN_FLIGHT => {
                let Some(tick) = tick else { break };
                let stop = changed();
                if tick.sent.is_some() || !stop {
                    in_flight.push(launch(tick));
                }
                if stop {
                    break;
                }
            }
            Some(done) = in_flight.next(), if !in_flight.is_empty() => done?,
            _ = check.tick() => if changed() { break },
        }
    }
    let stopped_at = pacer.stopped_at();
    // What the pacer sent before it saw the stop is on the wire: it is finished like the rest.
    for tick in pacer.stop().await {
        if tick.sent.is_some() {
            in_flight.push(launch(tick));
        }
    }
    if stopped_at.is_some() && !cancel.is_cancelled() {
        return Ok(stopped_at);
    }
    answers::drain(in_flight, cancel).await?;
    Ok(None)
}

/// How often an open loop asks whether its load changed between sends.
const CHANGE_CHECK: Duration = Duration::from_millis(100);

/// Open loop: more requests in flight than this and the client waits.
pub const MAX_IN_FLIGHT: usize = 4096;

/// Per correlation id state (upstream: one of the 10 clients of a stress thread). Each context is
/// bound to one server, so "the last sequence on this id" is well defined.
#[derive(Debug, Default)]
pub struct ClientContext {
    pub correlation_id: u64,
    pub server: usize,
    /// Sequence models on which this id's last sequence was left open.
    pub open_sequences: HashSet<String>,
    /// The last test on this id (a failure's forensics name it).
    pub last_test: Option<stress_common::status::PreviousUse>,
}

/// What a scenario gets for one test.
pub struct TestEnv<'a, 's> {
    pub scenario: Scenario,
    pub client: &'s Arc<dyn TritonClient>,
    pub settings: &'s Settings,
    pub stats: &'s Stats,
    pub rng: &'a mut StdRng,
    pub context: &'a mut ClientContext,
    pub cancel: &'s CancellationToken,
    pub images: &'s image::ImageBatch,
    /// The test's requests on the wire (for a failure's forensics).
    pub wire: WireLog,
    /// The model this test exercises, for the per-model counts: set by [`run`] for the
    /// scenarios with one model, by the scenario itself where it picks one.
    pub model: String,
    /// The stream's open-loop schedule, handed from test to test.
    pub schedule: StreamSchedule,
    /// The stream's requests in flight that a window handed over (see [`answers`]).
    pub answers: Answers<'s>,
}

impl<'a, 's> TestEnv<'a, 's> {
    /// The load of the window starting now, and when its schedule runs ([`StreamSchedule`]).
    /// A window that does not go on from the previous one first waits for the answers that
    /// one handed over; their first failure is this window's.
    pub async fn next_window(&mut self) -> Result<(WindowLoad, WindowSpan), Failure> {
        let load = self.settings.window_load();
        if !self.schedule.continues(&load) {
            answers::drain(&mut self.answers, self.cancel).await?;
        }
        let span = self
            .schedule
            .window(&load, self.settings.load_window, Instant::now());
        Ok((load, span))
    }

    /// An open-loop window at `mode` (see [`open_loop`]): `schedule` paces the send times of
    /// `mode`, each send's lateness is counted under the test's scenario, and the sends on the
    /// request-intervals file's cursor. `model` names a failure to find the send times.
    pub async fn open_window<P>(
        &self,
        model: &str,
        mode: &LoadMode,
        schedule: impl FnOnce(SendTimes) -> OpenLoop<P>,
        changed: impl Fn() -> bool,
        in_flight: &mut Answers<'s>,
        mut send: impl FnMut(u64, tokio::time::Instant, Option<PacerCall<P>>) -> Answer<'s>,
    ) -> Result<Option<Instant>, Failure>
    where
        P: std::future::Future + Unpin + Send + 'static,
        P::Output: Send + 'static,
    {
        let times = self
            .settings
            .send_times(mode)
            .ok_or_else(|| Failure::new(model, "the open loop's schedule", "none"))?;
        let mut sent = 0;
        let counted = |i, intended, call| {
            sent += 1;
            send(i, intended, call)
        };
        let late = |late| self.stats.send_lateness(self.scenario, late);
        let schedule = schedule(times);
        let result = open_loop(schedule, changed, self.cancel, in_flight, late, counted).await;
        self.settings.sent(sent);
        result
    }

    /// Sends one request, counting it and its latency.
    pub async fn infer(&self, request: &InferRequest) -> Result<InferResponse, ClientError> {
        let sent = self.sending();
        let result = self.client.infer(request).await;
        self.answered(request, sent, &result);
        result
    }

    /// Marks a request leaving now (see [`Self::answered`]).
    pub fn sending(&self) -> Sent<'s> {
        Sent {
            at: Instant::now(),
            wall_us: wall_us(),
            _call: self.stats.call(self.client.address()),
        }
    }

    /// A call to the test's server leaves now, in flight until the result drops (for the
    /// requests counted by [`Stats::request`] rather than through [`Self::sending`]).
    pub fn call(&self) -> crate::stats::CallInFlight<'s> {
        self.stats.call(self.client.address())
    }

    /// Counts a request sent at `sent` (its latency when it was answered) and logs it on the
    /// test's wire log.
    pub fn answered<T>(&self, request: &InferRequest, sent: Sent, result: &Result<T, ClientError>) {
        let outcome = match result {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        self.log_request(request, sent, result.is_ok(), outcome);
    }

    /// Counts a request sent at `sent` (with its latency when `timed`: answered as the test
    /// expects) and logs it with its `outcome` on the test's wire log.
    pub fn log_request(&self, request: &InferRequest, sent: Sent, timed: bool, outcome: String) {
        self.stats.request(
            self.scenario,
            &request.model,
            self.client.address(),
            timed.then(|| sent.at.elapsed()),
        );
        let flags = request.sequence.as_ref().map(|f| match (f.start, f.end) {
            (true, true) => "START|END",
            (true, false) => "START",
            (false, true) => "END",
            (false, false) => "",
        });
        self.wire.push(WireStep {
            sent_us: sent.wall_us,
            received_us: wall_us(),
            server: self.client.address().to_string(),
            model: request.model.clone(),
            correlation_id: request.sequence.as_ref().map(|f| f.id),
            flags: flags.unwrap_or_default().to_string(),
            input_digest: input_digest(request),
            outcome,
        });
    }

    /// Server liveness and readiness and the model's readiness after a disruptive test.
    pub async fn check_server_healthy(&self, model: &str) -> Result<(), Failure> {
        // The error's own text ("transport error: tcp connect error: ..."), not its Debug form.
        let show = |r: Result<bool, ClientError>, not: &str| match r {
            Ok(_) => not.to_string(),
            Err(e) => e.to_string(),
        };
        let live = self.client.server_live().await;
        if live != Ok(true) {
            return Err(Failure::new(
                model,
                "server live",
                show(live, "the server says it is not live"),
            ));
        }
        let ready = self.client.server_ready().await;
        if ready != Ok(true) {
            return Err(Failure::new(
                model,
                "server ready",
                show(ready, "the server says it is not ready"),
            ));
        }
        let model_ready = self.client.model_ready(model).await;
        if model_ready != Ok(true) {
            return Err(Failure::new(
                model,
                format!("model {model} ready"),
                show(model_ready, "the server says the model is not ready"),
            ));
        }
        Ok(())
    }
}

/// Runs one test of `env.scenario`.
pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let settings = env.settings;
    env.model = match env.scenario {
        Scenario::Timeout | Scenario::CrashingClient => settings.identity_model.clone(),
        Scenario::ImageClassification => settings.image_model.clone(),
        Scenario::Load | Scenario::PerfAnalyzer => settings.load_model.clone(),
        // Picked per test by the scenario.
        _ => String::new(),
    };
    match env.scenario {
        Scenario::SequenceValid
        | Scenario::SequenceValidValid
        | Scenario::SequenceValidNoEnd
        | Scenario::SequenceNoEnd
        | Scenario::SequenceNoStart => sequence::run(env).await,
        Scenario::Timeout => timeout::run(env).await,
        Scenario::CrashingClient => crashing::run(env).await,
        Scenario::ImageClassification => image::run(env).await,
        Scenario::Load => load::run(env).await,
        Scenario::PerfAnalyzer => perf_analyzer::run(env).await,
        Scenario::Infer => infer::run(env).await,
    }
}

/// Which models a set of scenarios needs loaded on every server.
pub fn required_models(scenarios: &[Scenario], settings: &Settings) -> Vec<String> {
    let mut models = Vec::new();
    for s in scenarios {
        match s {
            Scenario::SequenceValid
            | Scenario::SequenceValidValid
            | Scenario::SequenceValidNoEnd
            | Scenario::SequenceNoEnd
            | Scenario::SequenceNoStart => {
                models.extend(settings.sequence_models.iter().map(|(m, _)| m.clone()))
            }
            Scenario::Timeout | Scenario::CrashingClient => {
                models.push(settings.identity_model.clone())
            }
            Scenario::ImageClassification => models.push(settings.image_model.clone()),
            Scenario::Load | Scenario::PerfAnalyzer => models.push(settings.load_model.clone()),
            Scenario::Infer => models.extend(settings.infer.models.iter().map(|m| m.name.clone())),
        }
    }
    models.sort();
    models.dedup();
    models
}

/// Runs one test of `scenario` outside a stress stream: what the tests and a debugging session
/// use to exercise a single scenario against a server. Returns the outcome and the stats it left.
pub async fn run_single(
    scenario: Scenario,
    client: &Arc<dyn TritonClient>,
    settings: &Settings,
    correlation_id: u64,
    seed: u64,
) -> (Outcome, Stats) {
    let never = CancellationToken::new();
    run_single_until(scenario, client, settings, correlation_id, seed, &never).await
}

/// [`run_single`] with the worker's stop in the caller's hands: `stop` cancelled is the
/// worker told to stop while the test runs.
pub async fn run_single_until(
    scenario: Scenario,
    client: &Arc<dyn TritonClient>,
    settings: &Settings,
    correlation_id: u64,
    seed: u64,
    stop: &CancellationToken,
) -> (Outcome, Stats) {
    use rand::SeedableRng;
    let stats = Stats::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut context = ClientContext {
        correlation_id,
        server: 0,
        open_sequences: HashSet::new(),
        last_test: None,
    };
    let images = match image::ImageBatch::new(&settings.image_model, settings.image_batch) {
        Ok(i) => i,
        Err(e) => {
            return (
                Outcome::Failed(Failure::new(
                    &settings.image_model,
                    "committed images",
                    e.to_string(),
                )),
                stats,
            );
        }
    };
    let mut settings = std::borrow::Cow::Borrowed(settings);
    if scenario == Scenario::Infer && settings.infer_plan.is_none() {
        match infer::prepare(std::slice::from_ref(client), &settings.infer).await {
            Ok(plan) => settings.to_mut().infer_plan = Some(Arc::new(plan)),
            Err(e) => {
                return (
                    Outcome::Failed(Failure::new("", "an Infer plan", e.to_string())),
                    stats,
                );
            }
        }
    }
    let settings = settings.as_ref();
    let mut env = TestEnv {
        scenario,
        client,
        settings,
        stats: &stats,
        rng: &mut rng,
        context: &mut context,
        cancel: stop,
        images: &images,
        model: String::new(),
        wire: WireLog::default(),
        schedule: StreamSchedule::default(),
        answers: Answers::default(),
    };
    let outcome = run(&mut env).await;
    let outcome = answers::settle(&mut env.answers, stop, outcome).await;
    drop(env);
    (outcome, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The send offsets of `gaps` (microseconds).
    fn offsets(gaps: &'static [u64]) -> Box<dyn Iterator<Item = Duration> + Send> {
        Box::new(gaps.iter().scan(Duration::ZERO, |at, gap| {
            let now = *at;
            *at += Duration::from_micros(*gap);
            Some(now)
        }))
    }

    /// Where a test's requests are counted.
    fn counted(stats: &Stats) -> Counted<'_> {
        Counted {
            stats,
            scenario: Scenario::Load,
            model: "m".into(),
            server: "s",
        }
    }

    /// Runs an open loop over `gaps` (microseconds), recording what was sent and finished;
    /// the pacer sends the requests `pacer_sends` picks.
    async fn run_loop(
        gaps: &'static [u64],
        pacer_sends: Option<fn(u64) -> bool>,
        changed: impl Fn() -> bool,
        cancel: &CancellationToken,
    ) -> LoopRun {
        let sent = Mutex::new(Vec::new());
        let finished = Mutex::new(Vec::new());
        let late = Mutex::new(0usize);
        let on_wire = Arc::new(Mutex::new(Vec::new()));
        let send_now = pacer_sends.map(|picks| -> SendNow<std::future::Ready<u64>> {
            let on_wire = on_wire.clone();
            Box::new(move |i| {
                let send = picks(i);
                if send {
                    on_wire.lock().unwrap().push(i);
                }
                send.then(|| std::future::ready(i))
            })
        });
        let schedule = OpenLoop {
            times: offsets(gaps),
            start: Instant::now(),
            until: None,
            send_now,
            answers: None,
        };
        let stats = Stats::default();
        let counted = Arc::new(counted(&stats));
        let finished = &finished;
        let result = open_loop(
            schedule,
            changed,
            cancel,
            &mut Answers::default(),
            |_| *late.lock().unwrap() += 1,
            |i, intended, by_pacer: Option<PacerCall<std::future::Ready<u64>>>| {
                assert_eq!(
                    by_pacer.is_some(),
                    pacer_sends.is_some_and(|picks| picks(i))
                );
                sent.lock().unwrap().push(i);
                Answer::new(counted.clone(), async move {
                    if let Some(call) = by_pacer {
                        assert_eq!(call.await, i, "the pacer's call is request {i}'s");
                    }
                    assert!(tokio::time::Instant::now() >= intended, "sent early");
                    finished.lock().unwrap().push(i);
                    if i == 99 {
                        Err(Failure::new("m", "no 99", "99"))
                    } else {
                        Ok(())
                    }
                })
            },
        )
        .await;
        let mut finished = finished.lock().unwrap().clone();
        finished.sort();
        let sent_by_pacer = on_wire.lock().unwrap().clone();
        (
            sent.into_inner().unwrap(),
            finished,
            late.into_inner().unwrap(),
            result,
            sent_by_pacer,
        )
    }

    /// What [`run_loop`] saw: sent (in order), finished (sorted), lateness tallies, the
    /// result, and what the pacer sent.
    type LoopRun = (
        Vec<u64>,
        Vec<u64>,
        usize,
        Result<Option<Instant>, Failure>,
        Vec<u64>,
    );

    #[tokio::test]
    async fn open_loop_sends_every_scheduled_request_in_order_and_times_each() {
        let cancel = CancellationToken::new();
        for pacer_sends in [None, Some((|i| i % 2 == 0) as fn(u64) -> bool)] {
            let (sent, finished, late, result, _) =
                run_loop(&[0, 0, 2000, 500, 0], pacer_sends, || false, &cancel).await;
            result.unwrap();
            assert_eq!(sent, [0, 1, 2, 3, 4]);
            assert_eq!(finished, [0, 1, 2, 3, 4]);
            assert_eq!(late, 5, "every send's lateness is recorded");
        }
    }

    #[tokio::test]
    async fn what_the_pacer_sent_is_finished_also_when_the_loop_stops_on_a_change() {
        let cancel = CancellationToken::new();
        let checks = std::sync::atomic::AtomicUsize::new(0);
        // The change comes at the third send; the pacer has sent more by then (no gaps).
        let changed = || checks.fetch_add(1, Ordering::Relaxed) >= 2;
        let (sent, finished, _, result, on_wire) =
            run_loop(&[0; 300], Some(|_| true), changed, &cancel).await;
        result.unwrap();
        assert!(sent.len() >= 3 && sent.len() < 300, "{sent:?}");
        assert_eq!(on_wire, sent, "every request on the wire is taken");
        assert_eq!(finished, on_wire, "every request on the wire is finished");
    }

    /// Every request goes into a black hole. Cancelled after 5 sends, mid-schedule, or after
    /// a schedule of 5 sends ended (the window waiting for its last answers), the loop ends
    /// within [`CANCEL_DRAIN`] and tallies what it sent as abandoned.
    #[tokio::test]
    async fn a_cancelled_open_loop_abandons_what_gets_no_answer_instead_of_waiting() {
        for ends in [false, true] {
            let until = ends.then(|| Instant::now() + Duration::from_millis(5));
            let cancel = CancellationToken::new();
            let sent = std::sync::atomic::AtomicUsize::new(0);
            let stop = cancel.clone();
            let schedule = OpenLoop::<std::future::Pending<()>> {
                times: Box::new(std::iter::successors(Some(Duration::ZERO), |t| {
                    Some(*t + Duration::from_millis(1))
                })),
                start: Instant::now(),
                until,
                send_now: None,
                answers: None,
            };
            let cancel_later = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                stop.cancel();
            };
            let stats = Stats::default();
            let counted = Arc::new(counted(&stats));
            let run = async {
                let mut in_flight = Answers::default();
                let stopped = open_loop(
                    schedule,
                    || false,
                    &cancel,
                    &mut in_flight,
                    |_| {},
                    |_, _, _| {
                        if sent.fetch_add(1, Ordering::Relaxed) == 4 && until.is_none() {
                            stop.cancel();
                        }
                        Answer::new(counted.clone(), std::future::pending())
                    },
                )
                .await;
                // A window that stopped at its end hands its answers over; the stream waits.
                answers::drain(&mut in_flight, &cancel).await.and(stopped)
            };
            let (result, ()) =
                tokio::time::timeout(CANCEL_DRAIN * 5, async { tokio::join!(run, cancel_later) })
                    .await
                    .unwrap_or_else(|_| panic!("{until:?}: waited for requests that never end"));
            assert!(result.is_ok());
            let sent = sent.load(Ordering::Relaxed);
            assert!(sent >= 5, "{sent}");
            assert_eq!(
                stats.total_requests(),
                sent as u64,
                "{until:?}: counted unanswered"
            );
        }
    }

    #[tokio::test]
    async fn open_loop_stops_on_a_change_a_cancel_and_a_failure() {
        let cancel = CancellationToken::new();
        let (sent, _, _, result, _) = run_loop(&[1000; 50], None, || true, &cancel).await;
        assert!(sent.is_empty() && result.is_ok(), "{sent:?}");
        cancel.cancel();
        let (sent, _, _, result, _) = run_loop(&[1000; 50], None, || false, &cancel).await;
        assert!(sent.is_empty() && result.is_ok(), "{sent:?}");
        let fresh = CancellationToken::new();
        // 1 ms apart: the failure of request 99 (at 0.1 s) is seen long before the 200th is
        // due, even on a loaded machine (10 µs apart, a busy CI sent all 200 behind schedule).
        let (sent, _, _, result, _) = run_loop(&[1000; 200], None, || false, &fresh).await;
        assert!(result.is_err(), "request 99's failure ends the loop");
        assert!(sent.len() < 200, "{}", sent.len());
    }
}
