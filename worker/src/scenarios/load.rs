//! Load, perf_analyzer style, on the add/sub model: for one load window either N requests always
//! in flight (closed loop), or R requests per second sent at their intended times (open loop).
//! In open loop each latency counts from the request's intended send time, so a server (or a
//! client) that falls behind shows up as latency instead of hiding as fewer requests
//! (coordinated omission). Every response is validated. The window itself ([`drive`]) is shared
//! with the `Infer` scenario, which sends any model's requests the same way.

use super::{Failure, LoadMode, Outcome, TestEnv};
use crate::client::{
    ClientError, InferRequest, InferResponse, Prepared, RequestedOutput, SentCall,
};
use crate::tensor::Tensor;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rand::Rng;
use std::time::{Duration, Instant};

/// How many distinct prepared requests a window cycles through.
const VARIANTS: usize = 16;

struct Variant {
    prepared: Prepared,
    sum: Bytes,
    difference: Bytes,
}

fn variants(env: &mut TestEnv<'_>) -> Result<Vec<Variant>, ClientError> {
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

pub async fn run(env: &mut TestEnv<'_>) -> Outcome {
    let model = env.settings.load_model.clone();
    let variants = match variants(env) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(Failure::client(&model, "a request", &e)),
    };
    let prepared: Vec<Prepared> = variants.iter().map(|v| v.prepared.clone()).collect();
    let check = |i: usize, r: Result<InferResponse, ClientError>| validate(&model, &variants[i], r);
    match drive(env, &prepared, &check).await {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}

/// Checks the response to `prepared[i]`.
pub type Check<'a> =
    dyn Fn(usize, Result<InferResponse, ClientError>) -> Result<(), Failure> + Sync + 'a;

/// One load window (`--load-window`) of `prepared` requests (all to `env.model`), cycled in
/// order, at the window's load ([`super::Settings::window_load`]); every response goes through
/// `check`, and the first failure ends the window.
pub async fn drive(
    env: &TestEnv<'_>,
    prepared: &[Prepared],
    check: &Check<'_>,
) -> Result<(), Failure> {
    let load = env.settings.window_load();
    let window = Window {
        env,
        prepared,
        check,
        end: Instant::now() + env.settings.load_window,
        timeout: Some(env.settings.request_timeout),
        overload: load.overload,
    };
    match load.mode {
        LoadMode::Concurrency(n) => window.closed_loop(n as usize).await,
        LoadMode::Rate(_) | LoadMode::Poisson(_) | LoadMode::Intervals(_) => {
            window.open_loop(&load.mode).await
        }
    }
}

/// What the senders of one load window ([`drive`]) share.
struct Window<'w, 'e> {
    env: &'w TestEnv<'e>,
    prepared: &'w [Prepared],
    check: &'w Check<'w>,
    /// When the window ends: no request is sent after it.
    end: Instant,
    /// Every request's deadline.
    timeout: Option<Duration>,
    /// [`super::WindowLoad::overload`]: unanswered requests are counted, not failures.
    overload: bool,
}

impl Window<'_, '_> {
    /// Closed loop: `n` senders, each with one request in flight at a time.
    async fn closed_loop(&self, n: usize) -> Result<(), Failure> {
        // FuturesUnordered polls only the senders whose response arrived.
        let mut senders: FuturesUnordered<_> = (0..n).map(|k| self.sender(k, n)).collect();
        while let Some(r) = senders.next().await {
            r?;
        }
        Ok(())
    }

    /// Closed-loop sender `k` of `n`: requests k, k+n, ... one at a time until the window ends.
    async fn sender(&self, k: usize, n: usize) -> Result<(), Failure> {
        let (env, prepared) = (self.env, self.prepared);
        let mut i = k;
        while Instant::now() < self.end && !env.cancel.is_cancelled() {
            let idx = i % prepared.len();
            i += n;
            let started = Instant::now();
            let call = env.call();
            let r = env
                .client
                .infer_prepared(&prepared[idx], self.timeout)
                .await;
            drop(call);
            env.stats.request(
                env.scenario,
                &env.model,
                env.client.address(),
                r.as_ref().ok().map(|answer| answer.latency_since(started)),
            );
            if self.overload && r.is_err() {
                // Counted as sent and unanswered (a spike's error rate).
                continue;
            }
            (self.check)(idx, r)?;
        }
        Ok(())
    }

    /// Open loop: each request sent at its intended time, its latency counted from then.
    async fn open_loop(&self, mode: &LoadMode) -> Result<(), Failure> {
        let (env, prepared, timeout) = (self.env, self.prepared, self.timeout);
        let times = env
            .settings
            .send_times(mode)
            .ok_or_else(|| Failure::new(&env.model, "the open loop's schedule", "none"))?;
        let sent = std::sync::atomic::AtomicU64::new(0);
        let send =
            |i: u64, intended: tokio::time::Instant, call: Option<super::PacerCall<SentCall>>| {
                let idx = (i % prepared.len() as u64) as usize;
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let in_flight = env.call();
                async move {
                    let r = match call {
                        Some(call) => call.await,
                        None => env.client.infer_prepared(&prepared[idx], timeout).await,
                    };
                    drop(in_flight);
                    // From the intended send time to the answer's arrival (its kernel
                    // receive time where the client has it, else now).
                    let latency = match &r {
                        Ok(answer) => answer.latency_since(intended.into_std()),
                        Err(_) => intended.elapsed(),
                    };
                    (latency, idx, r)
                }
            };
        let finish = |(latency, idx, r): (Duration, usize, Result<_, _>)| {
            env.stats.request(
                env.scenario,
                &env.model,
                env.client.address(),
                Result::is_ok(&r).then_some(latency),
            );
            if self.overload && r.is_err() {
                // Counted as sent and unanswered: the spike's error rate.
                return Ok(());
            }
            (self.check)(idx, r)
        };
        let (until, changed) = self.open_loop_end(mode);
        let tally = |t| match t {
            super::Tally::Lateness(late) => env.stats.send_lateness(env.scenario, late),
            // Sent, never answered: counted without a latency (the spike's error rate
            // and the reconciliation see it).
            super::Tally::Abandoned => {
                env.stats
                    .request(env.scenario, &env.model, env.client.address(), None)
            }
        };
        let schedule = super::OpenLoop {
            times: Box::new(times),
            until,
            send_now: Some(self.send_now()),
            answers: env.client.answer_reader(),
        };
        let result = super::open_loop(schedule, changed, env.cancel, tally, send, finish).await;
        env.settings
            .sent(sent.load(std::sync::atomic::Ordering::Relaxed));
        result
    }

    /// Sends request `i` from the pacer's thread, at its intended time.
    fn send_now(&self) -> super::SendNow<SentCall> {
        let client = self.env.client.clone();
        let prepared = self.prepared.to_vec();
        let timeout = self.timeout;
        Box::new(move |i| client.send_now(&prepared[(i % prepared.len() as u64) as usize], timeout))
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
            .filter(|_| self.overload);
        let (until, changed) = match spike {
            Some(live) => (None, Some((live, mode.rate_schedule()))),
            None => (Some(self.end), None),
        };
        let changed = move || {
            changed
                .as_ref()
                .is_some_and(|(live, ours)| live.rate() != ours.as_ref().map(|s| s.mean_rate()))
        };
        (until, changed)
    }
}
