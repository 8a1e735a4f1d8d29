//! Load, perf_analyzer style, on the add/sub model: for one load window either N requests always
//! in flight (closed loop), or R requests per second sent at their intended times (open loop).
//! In open loop each latency counts from the request's intended send time, so a server (or a
//! client) that falls behind shows up as latency instead of hiding as fewer requests
//! (coordinated omission). Every response is validated. The window itself ([`drive`]) is shared
//! with the `Infer` scenario, which sends any model's requests the same way. With
//! `--trace-share` a sampled share of a window's requests carry a W3C trace context and leave a
//! client span ([`super::Tracing`]).

use super::{Answer, Answers, Counted, Failure, LoadMode, Outcome, TestEnv, Tracing};
use crate::client::{
    ClientError, InferRequest, InferResponse, Prepared, RequestedOutput, SentCall, TritonClient,
};
use crate::tensor::Tensor;
use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::FuturesUnordered;
use rand::Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stress_common::schedule::SendTimes;
use stress_common::trace::{ClientSpan, TraceContext};

/// How many distinct prepared requests a window cycles through.
const VARIANTS: usize = 16;

struct Variant {
    prepared: Prepared,
    sum: Bytes,
    difference: Bytes,
}

fn variants(env: &mut TestEnv<'_, '_>) -> Result<Vec<Variant>, ClientError> {
    let model = &env.settings.load_model;
    (0..VARIANTS)
        .map(|_| {
            let a: Vec<i32> = (0..16)
                .map(|_| env.rng.random_range(-(1 << 20)..1 << 20))
                .collect();
            let b: Vec<i32> = (0..16)
                .map(|_| env.rng.random_range(-(1 << 20)..1 << 20))
                .collect();
            let sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
            let diff: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x.wrapping_sub(*y)).collect();
            let mut request = InferRequest::new(
                model,
                vec![
                    Tensor::from_i32("INPUT0", vec![16], &a),
                    Tensor::from_i32("INPUT1", vec![16], &b),
                ],
            );
            request.outputs = ["OUTPUT0", "OUTPUT1"]
                .map(|n| RequestedOutput {
                    name: n.into(),
                    class_count: None,
                    datatype: None,
                })
                .to_vec();
            Ok(Variant {
                prepared: env.client.prepare(&request)?,
                sum: Tensor::from_i32("", vec![], &sum).data,
                difference: Tensor::from_i32("", vec![], &diff).data,
            })
        })
        .collect()
}

fn validate(
    model: &str,
    variant: &Variant,
    response: Result<InferResponse, ClientError>,
) -> Result<(), Failure> {
    let response = response.map_err(|e| Failure::client(model, "an add/sub response", &e))?;
    for (name, want) in [("OUTPUT0", &variant.sum), ("OUTPUT1", &variant.difference)] {
        let got = response
            .output(name)
            .map_err(|e| Failure::new(model, name, e.to_string()))?;
        if got.data != *want {
            let show = |b: &Bytes| {
                Tensor {
                    name: String::new(),
                    datatype: crate::tensor::DataType::Int32,
                    shape: vec![],
                    data: b.clone(),
                }
                .to_i32()
                .map(|v| format!("{v:?}"))
                .unwrap_or_else(|e| e.to_string())
            };
            return Err(Failure::new(
                model,
                format!("{name} = {}", show(want)),
                show(&got.data),
            ));
        }
    }
    Ok(())
}

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let model = env.settings.load_model.clone();
    let variants = match variants(env) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(Failure::client(&model, "a request", &e)),
    };
    let prepared: Arc<[Prepared]> = variants.iter().map(|v| v.prepared.clone()).collect();
    let check =
        move |i: usize, r: Result<InferResponse, ClientError>| validate(&model, &variants[i], r);
    match drive(env, prepared, Arc::new(check)).await {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}

/// Checks the response to `prepared[i]`. Owned by the requests it checks: their answers may
/// come after their window (see [`super::answers`]).
pub type Check<'a> =
    dyn Fn(usize, Result<InferResponse, ClientError>) -> Result<(), Failure> + Send + Sync + 'a;

/// One load window (`--load-window`) of `prepared` requests (all to `env.model`), cycled in
/// order, at the window's load ([`super::Settings::window_load`]); every response goes through
/// `check`, and the first failure ends the window. Its traced requests are the only ones a
/// worker traces (see [`super::Tracing`]).
pub async fn drive<'e>(
    env: &mut TestEnv<'_, 'e>,
    prepared: Arc<[Prepared]>,
    check: Arc<Check<'e>>,
) -> Result<(), Failure> {
    let (load, span) = env.next_window().await?;
    // Drawn from the stream's seeded RNG (only when tracing, so a run without it keeps its
    // seed's choices): each window and stream traces its own request numbers, and a run
    // repeated with its seed the same ones.
    let trace = env.settings.trace.map(|tracing| WindowTrace {
        tracing,
        key: env.rng.random(),
    });
    let mut answers = std::mem::take(&mut env.answers);
    let sending = Arc::new(Sending {
        client: env.client,
        prepared,
        check,
        counted: Arc::new(Counted {
            stats: env.stats,
            scenario: env.scenario,
            model: env.model.clone(),
            server: env.client.address(),
        }),
        timeout: Some(env.settings.request_timeout),
        overload: load.overload,
        trace,
    });
    let window = Window { env, sending, span };
    let stopped_at = match load.mode {
        LoadMode::Concurrency(n) => window.closed_loop(n as usize).await.map(|()| None),
        LoadMode::Rate(_) | LoadMode::Poisson(_) | LoadMode::Intervals(_) => {
            window.open_loop(&load.mode, &mut answers).await
        }
    }?;
    env.answers = answers;
    env.schedule.stopped(stopped_at);
    Ok(())
}

/// What the requests of one load window ([`drive`]) share, owned, so that an open loop's
/// answers may come after their window.
struct Sending<'e> {
    client: &'e Arc<dyn TritonClient>,
    prepared: Arc<[Prepared]>,
    check: Arc<Check<'e>>,
    counted: Arc<Counted<'e>>,
    /// Every request's deadline.
    timeout: Option<Duration>,
    /// [`super::WindowLoad::overload`]: unanswered requests are counted, not failures.
    overload: bool,
    trace: Option<WindowTrace>,
}

impl<'e> Sending<'e> {
    /// Request `i`'s place in the cycle of prepared requests.
    fn index(&self, i: u64) -> usize {
        (i % self.prepared.len() as u64) as usize
    }

    /// Whether request `i` of the window is traced, and how.
    fn traced(&self, i: u64) -> Option<WindowTrace> {
        self.trace.filter(|t| t.traces(i))
    }

    /// Counts the answer to `prepared[idx]` (its latency when it came) and checks it.
    fn finish(
        &self,
        idx: usize,
        r: Result<InferResponse, ClientError>,
        latency: Duration,
    ) -> Result<(), Failure> {
        self.counted.request(r.is_ok().then_some(latency));
        if self.overload && r.is_err() {
            // Counted as sent and unanswered (a spike's error rate).
            return Ok(());
        }
        (self.check)(idx, r)
    }

    /// Sends a traced request with a fresh trace context and records its client span, from
    /// `intended` (when it was meant to leave) to its answer or error. The caller counts it
    /// as any request.
    async fn infer_traced(
        &self,
        trace: WindowTrace,
        idx: usize,
        intended: Instant,
    ) -> Result<InferResponse, ClientError> {
        let context = TraceContext::random(&mut rand::rng());
        let sent = Instant::now();
        let r = self
            .client
            .infer_traced(&self.prepared[idx], self.timeout, &context.traceparent())
            .await;
        let answered = Instant::now();
        let clock = trace.tracing.clock;
        let counted = &self.counted;
        counted.stats.traced(ClientSpan {
            trace_id: context.trace_hex(),
            span_id: context.span_hex(),
            scenario: counted.scenario.name().to_string(),
            model: counted.model.clone(),
            server: counted.server.to_string(),
            intended_ns: clock.unix_ns(intended),
            // Just before its write where the client knows: a client stopped between the call
            // and its write (short of CPU) has that wait as its own, not the wire's.
            sent_ns: clock.unix_ns(r.as_ref().ok().and_then(|a| a.sent_at).unwrap_or(sent)),
            answered_ns: clock.unix_ns(answered),
            received_ns: r
                .as_ref()
                .ok()
                .and_then(|a| a.received_at)
                .map(|at| clock.unix_ns(at)),
            ok: r.is_ok(),
        });
        r
    }

    /// Request `i` on its way, intended at `intended`: the pacer's `call`, or sent now.
    fn send(
        self: Arc<Self>,
        i: u64,
        intended: tokio::time::Instant,
        call: Option<super::PacerCall<SentCall>>,
    ) -> Answer<'e> {
        let idx = self.index(i);
        let in_flight = self.counted.call();
        Answer::new(self.counted.clone(), async move {
            let r = match (call, self.traced(i)) {
                (Some(call), _) => call.await,
                // Never sent by the pacer (see `send_now`): sent here, with its context.
                (None, Some(trace)) => self.infer_traced(trace, idx, intended.into_std()).await,
                (None, None) => {
                    let prepared = &self.prepared[idx];
                    self.client.infer_prepared(prepared, self.timeout).await
                }
            };
            drop(in_flight);
            // From the intended send time to the answer's arrival (its kernel receive time
            // where the client has it, else now).
            let latency = match &r {
                Ok(answer) => answer.latency_since(intended.into_std()),
                Err(_) => intended.elapsed(),
            };
            self.finish(idx, r, latency)
        })
    }
}

/// One load window ([`drive`]).
struct Window<'w, 'e> {
    env: &'w TestEnv<'w, 'e>,
    sending: Arc<Sending<'e>>,
    /// When the window's schedule starts and ends: no request is sent after its end.
    span: super::WindowSpan,
}

/// Which requests of one window are traced: request `i` when the share samples `(key, i)`.
#[derive(Debug, Clone, Copy)]
struct WindowTrace {
    tracing: Tracing,
    key: u64,
}

impl WindowTrace {
    fn traces(&self, i: u64) -> bool {
        self.tracing.share.samples(self.key, i)
    }
}

impl<'e> Window<'_, 'e> {
    /// Closed loop: `n` senders, each with one request in flight at a time.
    async fn closed_loop(&self, n: usize) -> Result<(), Failure> {
        // FuturesUnordered polls only the senders whose response arrived; the first failure
        // ends the window.
        let senders: FuturesUnordered<_> = (0..n).map(|k| self.sender(k, n)).collect();
        senders.try_collect().await
    }

    /// Closed-loop sender `k` of `n`: requests k, k+n, ... one at a time until the window ends
    /// (so each request number of the window is one sender's, and traced at most once).
    async fn sender(&self, k: usize, n: usize) -> Result<(), Failure> {
        let (env, s) = (self.env, &self.sending);
        let mut i = k as u64;
        while Instant::now() < self.span.end && !env.cancel.is_cancelled() {
            let idx = s.index(i);
            let traced = s.traced(i);
            i += n as u64;
            let started = Instant::now();
            let call = s.counted.call();
            let r = match traced {
                // Intended when its sender was free to send it: now.
                Some(trace) => s.infer_traced(trace, idx, started).await,
                None => s.client.infer_prepared(&s.prepared[idx], s.timeout).await,
            };
            drop(call);
            let latency = r
                .as_ref()
                .map_or(Duration::ZERO, |a| a.latency_since(started));
            s.finish(idx, r, latency)?;
        }
        Ok(())
    }

    /// Open loop: each request sent at its intended time, its latency counted from then;
    /// `answers` holds the requests in flight, the previous window's with this one's.
    async fn open_loop(
        &self,
        mode: &LoadMode,
        answers: &mut Answers<'e>,
    ) -> Result<Option<Instant>, Failure> {
        let env = self.env;
        let (until, changed) = self.open_loop_end(mode);
        let schedule = |times: SendTimes| super::OpenLoop {
            times: Box::new(times),
            start: self.span.start,
            until,
            send_now: Some(self.send_now()),
            answers: env.client.answer_reader(),
        };
        let send = |i, intended, call| self.sending.clone().send(i, intended, call);
        env.open_window(&env.model, mode, schedule, changed, answers, send)
            .await
    }

    /// Sends request `i` from the pacer's thread, at its intended time; not a traced one:
    /// the pacer's calls carry no trace context, so `send` sends it from the runtime.
    fn send_now(&self) -> super::SendNow<SentCall> {
        let client = self.sending.client.clone();
        let prepared = self.sending.prepared.clone();
        let timeout = self.sending.timeout;
        let trace = self.sending.trace;
        Box::new(move |i| {
            if trace.is_some_and(|t| t.traces(i)) {
                return None;
            }
            client.send_now(&prepared[(i % prepared.len() as u64) as usize], timeout)
        })
    }

    /// When the open loop ends (`until`), and whether it must end early (`changed`).
    /// A spike's schedule runs on until the driver changes the rate, not window by window: a
    /// window waits for its last answers, and those pauses would cut the offered rate by as much
    /// as the overloaded server's latency.
    fn open_loop_end(&self, mode: &LoadMode) -> (Option<Instant>, impl Fn() -> bool + '_) {
        let spike = self
            .env
            .settings
            .load_target
            .as_deref()
            .filter(|_| self.sending.overload);
        let (until, changed) = match spike {
            Some(live) => (None, Some((live, mode.rate_schedule()))),
            None => (Some(self.span.end), None),
        };
        let changed = move || {
            changed
                .as_ref()
                .is_some_and(|(live, ours)| live.rate() != ours.as_ref().map(|s| s.mean_rate()))
        };
        (until, changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Protocol, SequenceSession, TritonClient};
    use crate::metadata::{ModelConfig, ModelMetadata};
    use crate::stats::Stats;
    use rand::SeedableRng;
    use std::sync::{Arc, Mutex};
    use stress_common::scenario::Scenario;

    /// A server that answers every request after 1 ms (or `slow`), recording by which way each request
    /// number (the prepared request's bytes) came: the pacer's `send_now`, the runtime's
    /// `infer_prepared`, or `infer_traced` with its traceparent.
    #[derive(Default)]
    struct Recorder {
        pacer: Mutex<Vec<u64>>,
        runtime: Mutex<Vec<u64>>,
        traced: Mutex<Vec<(u64, String)>>,
        slow: Option<Duration>,
        /// When the pacer sent each of its requests.
        pacer_at: Mutex<Vec<Instant>>,
    }

    fn number(prepared: &Prepared) -> u64 {
        match prepared {
            Prepared::Grpc(b) => u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            Prepared::Http { .. } => panic!("the recorder's requests are numbers"),
        }
    }

    impl Recorder {
        async fn answer(&self) -> Result<InferResponse, ClientError> {
            let after = self.slow.unwrap_or(Duration::from_millis(1));
            tokio::time::sleep(after).await;
            Ok(InferResponse::default())
        }
    }

    fn unused<T>() -> Result<T, ClientError> {
        Err(ClientError::Protocol("not used by a load window".into()))
    }

    #[async_trait::async_trait]
    impl TritonClient for Recorder {
        fn address(&self) -> &str {
            "127.0.0.1:8001"
        }
        fn protocol(&self) -> Protocol {
            Protocol::Grpc
        }
        async fn server_live(&self) -> Result<bool, ClientError> {
            unused()
        }
        async fn server_ready(&self) -> Result<bool, ClientError> {
            unused()
        }
        async fn model_ready(&self, _: &str) -> Result<bool, ClientError> {
            unused()
        }
        async fn server_metadata(&self) -> Result<(String, String), ClientError> {
            unused()
        }
        async fn max_batch_size(&self, _: &str) -> Result<i64, ClientError> {
            unused()
        }
        async fn model_version_ready(&self, _: &str, _: &str) -> Result<bool, ClientError> {
            unused()
        }
        async fn model_metadata(&self, _: &str, _: &str) -> Result<ModelMetadata, ClientError> {
            unused()
        }
        async fn model_config(&self, _: &str, _: &str) -> Result<ModelConfig, ClientError> {
            unused()
        }
        fn prepare(&self, _: &InferRequest) -> Result<Prepared, ClientError> {
            unused()
        }
        async fn infer_prepared(
            &self,
            prepared: &Prepared,
            _: Option<Duration>,
        ) -> Result<InferResponse, ClientError> {
            self.runtime.lock().unwrap().push(number(prepared));
            self.answer().await
        }
        async fn infer_traced(
            &self,
            prepared: &Prepared,
            _: Option<Duration>,
            traceparent: &str,
        ) -> Result<InferResponse, ClientError> {
            let traced = (number(prepared), traceparent.to_string());
            self.traced.lock().unwrap().push(traced);
            self.answer().await
        }
        fn send_now(&self, prepared: &Prepared, _: Option<Duration>) -> Option<SentCall> {
            self.pacer.lock().unwrap().push(number(prepared));
            self.pacer_at.lock().unwrap().push(Instant::now());
            let after = self.slow.unwrap_or(Duration::from_millis(1));
            Some(Box::pin(async move {
                tokio::time::sleep(after).await;
                Ok(InferResponse::default())
            }))
        }
        async fn sequence_session(&self) -> Result<Box<dyn SequenceSession>, ClientError> {
            unused()
        }
    }

    /// Request numbers 0..2^16, each its own prepared request.
    fn numbered() -> Vec<Prepared> {
        (0..1u64 << 16)
            .map(|i| Prepared::Grpc(Bytes::copy_from_slice(&i.to_le_bytes())))
            .collect()
    }

    /// A window of 200 ms at `load_mode`, half its requests traced.
    fn settings(load_mode: LoadMode) -> super::super::Settings {
        super::super::Settings {
            sequence_models: Vec::new(),
            identity_model: "identity_delay".into(),
            load_model: "add_sub".into(),
            image_model: "image_classifier".into(),
            timeout_delay: Duration::from_millis(300),
            timeout_deadline: Duration::from_millis(100),
            crash_after: Duration::from_secs(1),
            worker_binary: std::path::PathBuf::new(),
            load_mode,
            request_intervals: None,
            load_target: None,
            load_window: Duration::from_millis(200),
            image_batch: 1,
            perf_analyzer: None,
            request_timeout: Duration::from_secs(25),
            infer: Default::default(),
            infer_plan: None,
            trace: super::super::Tracing::of(Some("0.5".parse().unwrap())),
        }
    }

    /// What one window against the recorder left: the recorder and the window's stats.
    async fn one_window(settings: &super::super::Settings) -> (Arc<Recorder>, Stats) {
        windows(settings, 1, Recorder::default()).await
    }

    /// What `n` windows in a row on one stream against `recorder` left.
    async fn windows(
        settings: &super::super::Settings,
        n: usize,
        recorder: Recorder,
    ) -> (Arc<Recorder>, Stats) {
        let recorder = Arc::new(recorder);
        let client: Arc<dyn TritonClient> = recorder.clone();
        let stats = Stats::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut context = super::super::ClientContext::default();
        let cancel = tokio_util::sync::CancellationToken::new();
        let images = super::super::image::ImageBatch::new("image_classifier", 1).unwrap();
        let mut env = TestEnv {
            scenario: Scenario::Load,
            client: &client,
            settings,
            stats: &stats,
            rng: &mut rng,
            context: &mut context,
            cancel: &cancel,
            images: &images,
            wire: Default::default(),
            model: "add_sub".into(),
            schedule: Default::default(),
            answers: Default::default(),
        };
        let check = |_: usize, r: Result<InferResponse, ClientError>| {
            r.map(drop).map_err(|e| Failure::client("add_sub", "", &e))
        };
        let check: Arc<Check<'_>> = Arc::new(check);
        let prepared: Arc<[Prepared]> = numbered().into();
        for _ in 0..n {
            drive(&mut env, prepared.clone(), check.clone())
                .await
                .expect("passes");
            env.schedule.test_ended(true);
        }
        // As the stream does before a test that is not such a window.
        super::super::answers::drain(&mut env.answers, &cancel)
            .await
            .expect("passes");
        drop(env);
        (recorder, stats)
    }

    /// Lateness of every send `windows` made, and how many there were.
    fn lateness(stats: &Stats) -> stress_common::histogram::LatencyHistogram {
        let counts = &stats.scenario_counts(&[Scenario::Load])[0];
        stress_common::histogram::LatencyHistogram::decode(&counts.send_lateness_histogram).unwrap()
    }

    fn slow(after: Duration) -> Recorder {
        Recorder {
            slow: Some(after),
            ..Default::default()
        }
    }

    /// Against a server slower than the window's rate there is always a request in flight. A
    /// window stops sending at its end and hands its requests in flight to the next, which
    /// goes on with the schedule at once: the server is offered the rate asked for across the
    /// windows, no pause for the last answers and no late burst after it. (Waiting for them
    /// at the end, as windows did before, sends the next window's first requests 150 ms late.)
    #[tokio::test]
    async fn consecutive_windows_past_capacity_send_at_the_asked_rate_without_a_pause() {
        let settings = super::super::Settings {
            trace: None,
            ..settings(LoadMode::Rate(200.0))
        };
        let started = Instant::now();
        let (recorder, stats) = windows(&settings, 2, slow(Duration::from_millis(150))).await;
        let took = started.elapsed();
        let sent = recorder.pacer.lock().unwrap().len();
        // Two windows of 200 ms at 200 a second: 80 sends.
        assert!((79..=80).contains(&sent), "{sent} sent");
        let lateness = lateness(&stats);
        assert_eq!(lateness.count(), sent as u64);
        assert!(
            lateness.max_us() < 75_000,
            "max lateness {} us",
            lateness.max_us()
        );
        assert_eq!(stats.total_requests(), sent as u64, "every answer counted");
        assert!(
            took >= Duration::from_millis(500),
            "the last answers: {took:?}"
        );
        // Sent over 400 ms, not 550 (a pause for the last answers, then a fresh schedule).
        let at = recorder.pacer_at.lock().unwrap().clone();
        let sending = at[at.len() - 1] - at[0];
        assert!(
            sending < Duration::from_millis(470),
            "sent over {sending:?}"
        );
    }

    /// A window stops at its end, and the next goes on from where its schedule stopped, on
    /// time, also where the gaps are a file's: sends come in pairs 10 ms apart every 500 ms,
    /// each answered in 250 ms, in windows of 505 ms. The first window sends at 0, 10 and 500
    /// ms and stops at its end with the send of 500 ms in flight; the second goes on at 510
    /// ms (not 750, after that answer) and sends at 510, 1,000 and 1,010 ms.
    #[tokio::test]
    async fn a_window_stops_at_its_end_and_the_next_goes_on_from_there_on_time() {
        let gaps = stress_common::schedule::RequestIntervals::parse("10000\n490000\n").unwrap();
        let cursor = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let settings = super::super::Settings {
            trace: None,
            load_window: Duration::from_millis(505),
            request_intervals: Some((gaps, cursor.clone())),
            ..settings(LoadMode::Intervals("gaps".into()))
        };
        let (recorder, stats) = windows(&settings, 2, slow(Duration::from_millis(250))).await;
        let sent = recorder.pacer.lock().unwrap().len();
        assert_eq!(sent, 6, "at 0, 10, 500, 510, 1,000 and 1,010 ms");
        assert_eq!(cursor.load(std::sync::atomic::Ordering::Relaxed), 6);
        let lateness = lateness(&stats);
        assert!(
            lateness.max_us() < 120_000,
            "max lateness {} us",
            lateness.max_us()
        );
    }

    /// The pacer sends no traced request (its calls cannot carry a context): each one goes
    /// through `infer_traced` from the runtime, the others still leave from the pacer.
    #[tokio::test]
    async fn the_pacer_leaves_a_traced_request_to_the_runtime() {
        let settings = settings(LoadMode::Rate(1000.0));
        let (recorder, stats) = one_window(&settings).await;
        let pacer = recorder.pacer.lock().unwrap().clone();
        let runtime = recorder.runtime.lock().unwrap().clone();
        let traced: Vec<u64> = recorder
            .traced
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.0)
            .collect();
        let mut all: Vec<u64> = [&pacer[..], &runtime[..], &traced[..]].concat();
        all.sort();
        assert_eq!(
            all,
            (0..all.len() as u64).collect::<Vec<_>>(),
            "each sent once"
        );
        assert!(all.len() > 50, "{}", all.len());
        assert!(pacer.iter().all(|i| !traced.contains(i)));
        // Binomial(~200, 0.5): far from none and from all.
        let share = traced.len() as f64 / all.len() as f64;
        assert!((0.25..0.75).contains(&share), "{share}");
        assert_eq!(stats.total_requests(), all.len() as u64, "counted as any");
        // Without tracing the pacer sends them all (the recorder always takes a send).
        let untraced = super::super::Settings {
            trace: None,
            ..settings
        };
        let (recorder, _) = one_window(&untraced).await;
        assert!(recorder.traced.lock().unwrap().is_empty());
        assert!(recorder.runtime.lock().unwrap().is_empty());
        assert!(!recorder.pacer.lock().unwrap().is_empty());
    }

    /// Each traced request leaves one span, with the context it carried, from its intended
    /// time to its answer: closed loop and open loop.
    #[tokio::test]
    async fn a_traced_request_has_one_span_from_its_intended_time_to_its_answer() {
        for load in [LoadMode::Concurrency(2), LoadMode::Rate(1000.0)] {
            let (recorder, stats) = one_window(&settings(load.clone())).await;
            let traced = recorder.traced.lock().unwrap().clone();
            let spans = stats.snapshot(&[Scenario::Load]).client_spans;
            assert!(!traced.is_empty(), "{load:?}");
            assert_eq!(spans.len(), traced.len(), "{load:?}: one span each");
            // The context each traced request carried, by its span id.
            let sent: std::collections::HashMap<String, String> = traced
                .iter()
                .map(|(_, traceparent)| {
                    let context = TraceContext::from_traceparent(traceparent).expect("W3C");
                    (context.span_hex(), context.trace_hex())
                })
                .collect();
            for span in &spans {
                assert_eq!(sent.get(&span.span_id), Some(&span.trace_id), "{span:?}");
                assert!(span.intended_ns <= span.sent_ns, "{span:?}");
                // The recorder answers after 1 ms.
                assert!(span.answered_ns - span.sent_ns >= 1_000_000, "{span:?}");
                assert!(span.ok);
                assert_eq!(
                    (span.scenario.as_str(), span.model.as_str(), &*span.server),
                    ("Load", "add_sub", "127.0.0.1:8001")
                );
            }
            let ids: std::collections::HashSet<_> = spans.iter().map(|s| &s.span_id).collect();
            assert_eq!(ids.len(), spans.len(), "a fresh context each");
            assert!(stats.snapshot(&[]).client_spans.is_empty(), "taken once");
        }
    }
}
