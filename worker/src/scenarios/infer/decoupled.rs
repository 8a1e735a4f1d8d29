//! Infer on a decoupled model (`model_transaction_policy { decoupled: true }`): a request may
//! have any number of responses, so each goes over gRPC ModelStreamInfer and its responses are
//! read until the one Triton marks final (`triton_final_response`, asked for explicitly with
//! `triton_enable_empty_final_response`). A stream that ends, breaks or stays silent longer than
//! `--request-timeout` before its final response fails the test.
//!
//! Every data response passes [`model::check_response`]; validation data describes the LAST data
//! response of each stream (as perf_analyzer compares the response that completes a request),
//! the others get every check but the values. With `--consistency` a repeated input must give
//! the same stream: as many responses, each byte-identical to the first stream's.
//!
//! Measured per request: latency to the final response (the scenario's latency), and per model
//! the data responses, the time to the first one and the gaps between consecutive ones
//! ([`Stats::stream`](crate::stats::Stats::stream)).
//!
//! Load: closed loop keeps one stream per sender for the whole window, its requests one at a
//! time (nothing to demultiplex; each response must still carry its request's id); open loop
//! opens a stream per request, so requests overlap at their intended times.

use super::{InferPlan, PlannedModel};
use crate::client::{
    ClientError, DecoupledSession, InferResponse, Protocol, StreamEnd, StreamOutcome,
};
use crate::model::{self, CheckFailure, ModelDescription, PlannedRequest};
use crate::scenarios::{Answer, Answers, Counted, Failure, LoadMode, OpenLoop, TestEnv};
use futures::TryStreamExt;
use futures::stream::FuturesUnordered;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stress_common::schedule::SendTimes;
use stress_common::signature::ErrorKind;

/// What a decoupled model's streams are checked against, built with its requests.
#[derive(Debug)]
pub struct StreamChecks {
    /// The planned requests without validation data: for every data response but the last.
    unvalidated: Vec<PlannedRequest>,
    /// `--consistency`: the first stream's data responses to each request.
    first_streams: Option<Vec<Mutex<Option<Vec<InferResponse>>>>>,
}

impl StreamChecks {
    pub fn new(requests: &[PlannedRequest], consistency: bool) -> Self {
        Self {
            unvalidated: requests
                .iter()
                .map(|r| PlannedRequest {
                    expected: Default::default(),
                    ..r.clone()
                })
                .collect(),
            first_streams: consistency.then(|| requests.iter().map(|_| Mutex::new(None)).collect()),
        }
    }
}

/// Over HTTP, a selected model is decoupled: Infer cannot drive it (Triton's HTTP endpoint
/// answers once per request). Bad input, not a model quietly left out: the run would pass
/// without ever having driven a model it was asked to. `models`: their labels
/// (`NAME version V`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "model {}: decoupled (model_transaction_policy {{ decoupled: true }}), which Infer drives only over gRPC (ModelStreamInfer): use --protocol grpc, or leave it out of --model",
    models.join(", ")
)]
pub struct DecoupledNeedsGrpc {
    pub models: Vec<String>,
}

/// Whether Infer can drive every one of `models` over `protocol`.
pub fn check_drivable(
    protocol: Protocol,
    models: &[ModelDescription],
) -> Result<(), DecoupledNeedsGrpc> {
    let decoupled: Vec<String> = models
        .iter()
        .filter(|d| d.decoupled)
        .map(ModelDescription::label)
        .collect();
    if protocol == Protocol::Grpc || decoupled.is_empty() {
        return Ok(());
    }
    Err(DecoupledNeedsGrpc { models: decoupled })
}

/// What one request's stream measured, complete or not.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamTimes {
    /// From the send (open loop: the intended send) to the final response, when it came.
    pub to_final: Option<Duration>,
    /// Data responses (an empty final response is none).
    pub responses: u64,
    pub first_response: Option<Duration>,
    /// Between consecutive data responses.
    pub gaps: Vec<Duration>,
}

impl StreamTimes {
    /// `from`: when the request counts as sent.
    pub fn of(outcome: &StreamOutcome, from: Instant) -> Self {
        let data: Vec<_> = outcome.responses.iter().filter(|r| r.has_data()).collect();
        let since = |at: Instant| at.saturating_duration_since(from);
        Self {
            to_final: match (&outcome.end, outcome.responses.last()) {
                (StreamEnd::Final, Some(last)) => Some(since(last.at)),
                _ => None,
            },
            responses: data.len() as u64,
            first_response: data.first().map(|r| since(r.at)),
            gaps: data
                .windows(2)
                .map(|w| w[1].at.saturating_duration_since(w[0].at))
                .collect(),
        }
    }
}

/// Judges one request's stream: how it ended, and every data response's checks (the values
/// only on the last). `from` is when the request counts as sent.
pub fn judge(
    model: &ModelDescription,
    planned: &PlannedRequest,
    unvalidated: &PlannedRequest,
    outcome: &StreamOutcome,
    from: Instant,
    tolerance: f64,
) -> Result<(), Failure> {
    let version = outcome
        .responses
        .iter()
        .map(|r| r.response.model_version.as_str())
        .find(|v| !v.is_empty())
        .unwrap_or(if model.version.is_empty() {
            "?"
        } else {
            &model.version
        });
    let data: Vec<_> = outcome.responses.iter().filter(|r| r.has_data()).collect();
    let came = || {
        let n = outcome.responses.len();
        match outcome.responses.last() {
            Some(last) => format!(
                "{n} response{} in {:?}",
                if n == 1 { "" } else { "s" },
                last.at.saturating_duration_since(from)
            ),
            None => "no response".to_string(),
        }
    };
    let final_response = "its final response (triton_final_response)";
    match &outcome.end {
        StreamEnd::Final => {}
        StreamEnd::Closed => {
            return Err(Failure::new(
                &model.name,
                format!("version {version}: {final_response}"),
                format!("{}, then the server ended the stream", came()),
            )
            // Ending a decoupled stream before its final response breaks the protocol.
            .with_kind(ErrorKind::Protocol));
        }
        StreamEnd::Silent(silence) => {
            return Err(Failure::new(
                &model.name,
                format!(
                    "version {version}: {final_response}, each response within --request-timeout {silence:?}"
                ),
                format!("{}, then nothing for {silence:?}", came()),
            )
            .with_kind(ErrorKind::Timeout));
        }
        StreamEnd::Error(e) => {
            return Err(Failure::new(
                &model.name,
                format!("version {version}: responses until {final_response}"),
                format!("{}, then {e}", came()),
            )
            .with_kind(e.kind()));
        }
    }
    for (k, r) in data.iter().enumerate() {
        let last = k + 1 == data.len();
        let against = if last { planned } else { unvalidated };
        model::check_response(model, against, &r.response, tolerance)
            .map_err(|f| response_failure(model, version, k, data.len(), f))?;
    }
    Ok(())
}

fn response_failure(
    model: &ModelDescription,
    version: &str,
    k: usize,
    of: usize,
    f: CheckFailure,
) -> Failure {
    Failure::wrong_answer(
        &model.name,
        format!(
            "version {version} response {} of {of} output {}: {}",
            k + 1,
            f.output,
            f.expected
        ),
        f.actual,
    )
}

/// `--consistency`: the stream must repeat the first stream to the same request.
fn check_consistent(
    model: &ModelDescription,
    checks: &StreamChecks,
    i: usize,
    outcome: StreamOutcome,
) -> Result<(), Failure> {
    let Some(firsts) = &checks.first_streams else {
        return Ok(());
    };
    let data: Vec<InferResponse> = outcome
        .responses
        .into_iter()
        .filter(|r| r.has_data())
        .map(|r| r.response)
        .collect();
    let mut first = firsts[i].lock().expect("not poisoned");
    let Some(before) = &*first else {
        *first = Some(data);
        return Ok(());
    };
    let version = if model.version.is_empty() {
        "?"
    } else {
        &model.version
    };
    if before.len() != data.len() {
        return Err(Failure::new(
            &model.name,
            format!(
                "version {version}: {} responses, as the first stream for this input",
                before.len()
            ),
            format!("{} responses", data.len()),
        ));
    }
    for (k, (b, r)) in before.iter().zip(&data).enumerate() {
        model::check_consistent(b, r)
            .map_err(|f| response_failure(model, version, k, data.len(), f))?;
    }
    Ok(())
}

/// Counts one request's stream (the stream's counts even when it failed, the latency only when
/// it passed) and checks it.
fn finish(
    counted: &Counted<'_>,
    planned: &PlannedModel,
    checks: &StreamChecks,
    i: usize,
    from: Instant,
    outcome: Result<StreamOutcome, ClientError>,
    tolerance: f64,
) -> Result<(), Failure> {
    let d = &planned.description;
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            counted.request(None);
            return Err(Failure::new(
                &d.name,
                format!("a response stream from {}", d.label()),
                e.to_string(),
            ));
        }
    };
    let times = StreamTimes::of(&outcome, from);
    counted.stats.stream(
        counted.scenario,
        &d.name,
        times.responses,
        times.first_response,
        &times.gaps,
    );
    let judged = judge(
        d,
        &planned.requests[i],
        &checks.unvalidated[i],
        &outcome,
        from,
        tolerance,
    );
    let latency = judged.is_ok().then_some(times.to_final).flatten();
    counted.request(latency);
    judged?;
    check_consistent(d, checks, i, outcome)
}

/// One load window of a decoupled model's requests (`plan`'s model `pick`), cycled in order, at
/// the worker's load mode. The first failure ends the window.
pub async fn drive<'e>(
    env: &mut TestEnv<'_, 'e>,
    plan: &Arc<InferPlan>,
    pick: usize,
) -> Result<(), Failure> {
    let (load, span) = env.next_window().await?;
    let mut answers = std::mem::take(&mut env.answers);
    let streaming = Arc::new(Streaming {
        client: env.client,
        plan: plan.clone(),
        pick,
        counted: Arc::new(Counted {
            stats: env.stats,
            scenario: env.scenario,
            model: plan.models[pick].description.name.clone(),
            server: env.client.address(),
        }),
        silence: env.settings.request_timeout,
    });
    let window = Window {
        env,
        streaming,
        span,
    };
    let stopped_at = match load.mode {
        LoadMode::Concurrency(n) => window.closed_loop(n as usize).await.map(|()| None),
        // One stream per request, sent at its intended time; latencies count from that time.
        mode @ (LoadMode::Rate(_) | LoadMode::Poisson(_) | LoadMode::Intervals(_)) => {
            window.open_loop(&mode, &mut answers).await
        }
    }?;
    env.answers = answers;
    env.schedule.stopped(stopped_at);
    Ok(())
}

/// What the streams of one load window ([`drive`]) share, owned, so that an open loop's
/// answers may come after their window.
struct Streaming<'e> {
    client: &'e Arc<dyn crate::client::TritonClient>,
    plan: Arc<InferPlan>,
    pick: usize,
    counted: Arc<Counted<'e>>,
    /// How long a stream may stay silent before its final response.
    silence: Duration,
}

impl<'e> Streaming<'e> {
    fn planned(&self) -> &PlannedModel {
        &self.plan.models[self.pick]
    }

    fn checks(&self) -> &StreamChecks {
        self.planned()
            .decoupled
            .as_ref()
            .expect("a decoupled model's plan has its checks")
    }

    fn open_failure(&self, e: ClientError) -> Failure {
        let d = &self.planned().description;
        Failure::new(
            &d.name,
            format!("a ModelStreamInfer stream for {}", d.label()),
            e.to_string(),
        )
    }

    /// [`finish`] of request `idx`'s stream.
    fn finish(
        &self,
        idx: usize,
        from: Instant,
        outcome: Result<StreamOutcome, ClientError>,
    ) -> Result<(), Failure> {
        let tolerance = self.plan.tolerance;
        finish(
            &self.counted,
            self.planned(),
            self.checks(),
            idx,
            from,
            outcome,
            tolerance,
        )
    }

    /// Request `i`'s stream, opened now, its latency counted from `intended`.
    fn send(self: Arc<Self>, i: u64, intended: tokio::time::Instant) -> Answer<'e> {
        let idx = (i % self.planned().requests.len() as u64) as usize;
        let call = self.counted.call();
        Answer::new(self.counted.clone(), async move {
            let mut session = match self.client.decoupled_session().await {
                Ok(session) => session,
                Err(e) => return Err(self.open_failure(e)),
            };
            let request = &self.planned().requests[idx].request;
            let outcome = session.infer(request, self.silence).await;
            drop(call);
            session.close().await;
            self.finish(idx, intended.into_std(), outcome)
        })
    }
}

/// One load window ([`drive`]).
struct Window<'w, 'e> {
    env: &'w TestEnv<'w, 'e>,
    streaming: Arc<Streaming<'e>>,
    /// When the window's schedule starts and ends: no request is sent after its end.
    span: crate::scenarios::WindowSpan,
}

impl<'e> Window<'_, 'e> {
    /// Closed loop: `n` senders, each with its own stream.
    async fn closed_loop(&self, n: usize) -> Result<(), Failure> {
        // FuturesUnordered polls only the senders whose response arrived; the first failure
        // ends the window.
        let senders: FuturesUnordered<_> = (0..n).map(|k| self.sender(k, n)).collect();
        senders.try_collect().await
    }

    /// Closed-loop sender `k` of `n`: requests k, k+n, ... one at a time over one stream,
    /// opened with the first, until the window ends or a request fails.
    async fn sender(&self, k: usize, n: usize) -> Result<(), Failure> {
        let (env, s) = (self.env, &self.streaming);
        let requests = &s.planned().requests;
        let mut session: Option<Box<dyn DecoupledSession>> = None;
        let mut i = k;
        let mut result = Ok(());
        while result.is_ok() && Instant::now() < self.span.end && !env.cancel.is_cancelled() {
            let idx = i % requests.len();
            i += n;
            let call = s.counted.call();
            if session.is_none() {
                match s.client.decoupled_session().await {
                    Ok(opened) => session = Some(opened),
                    Err(e) => {
                        result = Err(s.open_failure(e));
                        break;
                    }
                }
            }
            let session = session.as_mut().expect("opened above");
            let outcome = session.infer(&requests[idx].request, s.silence).await;
            drop(call);
            let from = outcome.as_ref().map_or_else(|_| Instant::now(), |o| o.sent);
            result = s.finish(idx, from, outcome);
        }
        if let Some(s) = session {
            s.close().await;
        }
        result
    }

    /// Open loop: one stream per request, sent at its intended time; `answers` holds the
    /// requests in flight, the previous window's with this one's.
    async fn open_loop(
        &self,
        mode: &LoadMode,
        answers: &mut Answers<'e>,
    ) -> Result<Option<Instant>, Failure> {
        // A stream opens from the runtime: nothing leaves from the pacer's thread.
        let schedule = |times: SendTimes| OpenLoop::<std::future::Pending<()>> {
            times: Box::new(times),
            start: self.span.start,
            until: Some(self.span.end),
            send_now: None,
            answers: None,
        };
        let send = |i, intended, _| self.streaming.clone().send(i, intended);
        let model = &self.streaming.planned().description.name;
        let env = self.env;
        env.open_window(model, mode, schedule, || false, answers, send)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{InferRequest, RequestedOutput, StreamResponse};
    use crate::model::ExpectedOutput;
    use crate::tensor::{DataType, Tensor};

    fn model() -> ModelDescription {
        let spec = |name: &str, datatype| model::TensorSpec {
            name: name.into(),
            datatype,
            dims: vec![1],
            optional: false,
        };
        ModelDescription {
            name: "rep".into(),
            version: "1".into(),
            max_batch_size: 0,
            inputs: vec![model::TensorSpec {
                dims: vec![-1],
                ..spec("IN", DataType::Int32)
            }],
            outputs: vec![spec("OUT", DataType::Int32)],
            decoupled: true,
            sequence_batching: None,
        }
    }

    fn planned(last: Option<i32>) -> PlannedRequest {
        let mut request = InferRequest::new("rep", vec![Tensor::from_i32("IN", vec![2], &[4, 5])]);
        request.outputs = vec![RequestedOutput {
            name: "OUT".into(),
            class_count: None,
            datatype: None,
        }];
        PlannedRequest {
            request,
            batch: 1,
            expected: last
                .map(|v| {
                    [(
                        "OUT".to_string(),
                        ExpectedOutput {
                            data: Tensor::from_i32("", vec![], &[v]).data,
                            shape: None,
                        },
                    )]
                    .into()
                })
                .unwrap_or_default(),
        }
    }

    fn response(
        t0: Instant,
        ms: u64,
        out: Option<(Vec<i64>, &[i32])>,
        is_final: bool,
    ) -> StreamResponse {
        StreamResponse {
            at: t0 + Duration::from_millis(ms),
            response: InferResponse {
                model_version: "1".into(),
                received_at: None,
                sent_at: None,
                outputs: out
                    .map(|(shape, v)| vec![Tensor::from_i32("OUT", shape, v)])
                    .unwrap_or_default(),
            },
            is_final,
        }
    }

    fn outcome(t0: Instant, responses: Vec<StreamResponse>, end: StreamEnd) -> StreamOutcome {
        StreamOutcome {
            sent: t0,
            responses,
            end,
        }
    }

    fn judge_with(o: &StreamOutcome, last: Option<i32>) -> Result<(), Failure> {
        judge(&model(), &planned(last), &planned(None), o, o.sent, 0.0)
    }

    #[test]
    fn a_complete_stream_gives_its_counts_first_response_and_gaps() {
        let t0 = Instant::now();
        let o = outcome(
            t0,
            vec![
                response(t0, 10, Some((vec![1], &[4])), false),
                response(t0, 25, Some((vec![1], &[5])), false),
                response(t0, 26, None, true),
            ],
            StreamEnd::Final,
        );
        judge_with(&o, Some(5)).unwrap();
        assert_eq!(
            StreamTimes::of(&o, t0),
            StreamTimes {
                to_final: Some(Duration::from_millis(26)),
                responses: 2,
                first_response: Some(Duration::from_millis(10)),
                gaps: vec![Duration::from_millis(15)],
            }
        );
        // The last data response may carry the final flag itself; no response at all is valid.
        let o = outcome(
            t0,
            vec![response(t0, 7, Some((vec![1], &[5])), true)],
            StreamEnd::Final,
        );
        judge_with(&o, Some(5)).unwrap();
        assert_eq!(StreamTimes::of(&o, t0).responses, 1);
        let o = outcome(t0, vec![response(t0, 3, None, true)], StreamEnd::Final);
        judge_with(&o, None).unwrap();
        let times = StreamTimes::of(&o, t0);
        assert_eq!(
            (times.responses, times.first_response, times.to_final),
            (0, None, Some(Duration::from_millis(3)))
        );
        // A broken stream still has counts, but no latency to its final response.
        let o = outcome(
            t0,
            vec![response(t0, 4, Some((vec![1], &[4])), false)],
            StreamEnd::Closed,
        );
        let times = StreamTimes::of(&o, t0);
        assert_eq!(
            (times.responses, times.first_response, times.to_final),
            (1, Some(Duration::from_millis(4)), None)
        );
    }

    #[test]
    fn validation_data_describes_the_last_data_response() {
        let t0 = Instant::now();
        let o = outcome(
            t0,
            vec![
                response(t0, 1, Some((vec![1], &[4])), false),
                response(t0, 2, Some((vec![1], &[5])), false),
                response(t0, 3, None, true),
            ],
            StreamEnd::Final,
        );
        let f = judge_with(&o, Some(4)).unwrap_err();
        assert_eq!(
            f.expected,
            "version 1 response 2 of 2 output OUT: [4] (validation data)"
        );
        assert_eq!(f.actual, "[5]");
    }

    #[test]
    fn a_wrong_response_mid_stream_is_named_by_its_place() {
        let t0 = Instant::now();
        let o = outcome(
            t0,
            vec![
                response(t0, 1, Some((vec![1], &[4])), false),
                response(t0, 2, Some((vec![2], &[5, 5])), false),
                response(t0, 3, Some((vec![1], &[6])), false),
                response(t0, 4, None, true),
            ],
            StreamEnd::Final,
        );
        let f = judge_with(&o, None).unwrap_err();
        assert_eq!(f.model, "rep");
        assert_eq!(
            f.expected,
            "version 1 response 2 of 3 output OUT: shape [1] (-1: any)"
        );
        assert_eq!(f.actual, "[2]");
    }

    #[test]
    fn a_stream_without_its_final_response_fails_saying_what_came() {
        let t0 = Instant::now();
        let two = || {
            vec![
                response(t0, 10, Some((vec![1], &[4])), false),
                response(t0, 20, Some((vec![1], &[5])), false),
            ]
        };
        let f = judge_with(
            &outcome(t0, two(), StreamEnd::Silent(Duration::from_secs(2))),
            None,
        )
        .unwrap_err();
        assert_eq!(
            f.expected,
            "version 1: its final response (triton_final_response), each response within --request-timeout 2s"
        );
        assert_eq!(f.actual, "2 responses in 20ms, then nothing for 2s");
        let f = judge_with(&outcome(t0, two(), StreamEnd::Closed), None).unwrap_err();
        assert_eq!(
            f.actual,
            "2 responses in 20ms, then the server ended the stream"
        );
        let error = ClientError::Server {
            code: "stream".into(),
            message: "boom".into(),
        };
        let f = judge_with(&outcome(t0, vec![], StreamEnd::Error(error)), None).unwrap_err();
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            (
                "version 1: responses until its final response (triton_final_response)",
                "no response, then server error (stream): boom"
            )
        );
    }

    #[test]
    fn consistency_compares_whole_streams() {
        let t0 = Instant::now();
        let checks = StreamChecks::new(&[planned(None)], true);
        let stream = |values: &[i32]| {
            let mut r: Vec<_> = values
                .iter()
                .map(|v| response(t0, 1, Some((vec![1], std::slice::from_ref(v))), false))
                .collect();
            r.push(response(t0, 2, None, true));
            outcome(t0, r, StreamEnd::Final)
        };
        check_consistent(&model(), &checks, 0, stream(&[4, 5])).unwrap();
        check_consistent(&model(), &checks, 0, stream(&[4, 5])).unwrap();
        let f = check_consistent(&model(), &checks, 0, stream(&[4])).unwrap_err();
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            (
                "version 1: 2 responses, as the first stream for this input",
                "1 responses"
            )
        );
        let f = check_consistent(&model(), &checks, 0, stream(&[4, 6])).unwrap_err();
        assert!(
            f.expected
                .starts_with("version 1 response 2 of 2 output OUT: the same output"),
            "{f:?}"
        );
    }

    #[test]
    fn over_http_any_decoupled_model_is_bad_input_naming_each() {
        let plain = ModelDescription {
            name: "plain".into(),
            decoupled: false,
            ..model()
        };
        let both = [model(), plain.clone()];
        assert_eq!(check_drivable(Protocol::Grpc, &both), Ok(()));
        assert_eq!(check_drivable(Protocol::Http, &[plain]), Ok(()));
        // Beside a model it can drive, too: the run would otherwise pass without it.
        let err = check_drivable(Protocol::Http, &both).unwrap_err();
        assert_eq!(err.models, ["rep version 1"]);
        let text = err.to_string();
        assert!(text.starts_with("model rep version 1: decoupled"), "{text}");
        assert!(text.contains("use --protocol grpc"), "{text}");
        let other = ModelDescription {
            name: "other".into(),
            ..model()
        };
        let err = check_drivable(Protocol::Http, &[model(), other]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("model rep version 1, other version 1: decoupled"),
            "{err}"
        );
    }
}
