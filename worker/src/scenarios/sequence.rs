//! The sequence scenarios. A sequence's requests go over one session (a bidirectional gRPC stream,
//! as upstream) carrying sequence_id / sequence_start / sequence_end; the model returns the
//! running sum of INPUT since START, and every response is checked in order.
//!
//! Fixed relative to upstream: ValidValid and ValidNoEnd send BOTH of their sequences (upstream
//! reset its step list inside the loop, so only the second was ever sent).

use super::{Failure, Outcome, TestEnv};
use crate::client::{InferRequest, RequestedOutput, SequenceFlags};
use crate::tensor::Tensor;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use stress_common::scenario::Scenario;
use stress_common::signature::ErrorKind;

/// The text Triton answers a request without START on a sequence id it does not know.
pub const START_FLAG_ERROR: &str = "must specify the START flag";

/// max(1, int(N(16, 8))), as upstream.
pub fn sequence_length(rng: &mut impl Rng) -> usize {
    let n: f64 = Normal::new(16.0, 8.0)
        .expect("constant parameters")
        .sample(rng);
    (n as i64).max(1) as usize
}

/// Values in [0, 2^20), as upstream.
pub fn sequence_values(rng: &mut impl Rng, len: usize) -> Vec<i32> {
    (0..len).map(|_| rng.random_range(0..(1 << 20))).collect()
}

/// A sequence of upstream's length distribution and values.
pub fn random_sequence(rng: &mut impl Rng) -> Vec<i32> {
    let len = sequence_length(rng);
    sequence_values(rng, len)
}

fn request(
    model: &str,
    batched: bool,
    value: i32,
    flags: SequenceFlags,
    env: &TestEnv<'_, '_>,
) -> InferRequest {
    let shape = if batched { vec![1, 1] } else { vec![1] };
    let mut r = InferRequest::new(model, vec![Tensor::from_i32("INPUT", shape, &[value])]);
    r.outputs = vec![RequestedOutput {
        name: "OUTPUT".into(),
        class_count: None,
        datatype: None,
    }];
    r.sequence = Some(flags);
    r.timeout = Some(env.settings.request_timeout);
    r
}

/// Sends `values` as one sequence on the context's id: START on the first request, END on the
/// last when `end` is set. Checks every running sum.
async fn send_sequence(
    env: &TestEnv<'_, '_>,
    model: &str,
    batched: bool,
    values: &[i32],
    end: bool,
) -> Result<(), Failure> {
    let id = env.context.correlation_id;
    let fail = |expected: String, actual: String| {
        Failure::new(model, expected, actual).with_correlation_id(id)
    };
    let mut session = env
        .client
        .sequence_session()
        .await
        .map_err(|e| fail("a sequence stream".into(), e.to_string()).with_kind(e.kind()))?;
    let result = check_steps(env, &mut *session, model, batched, values, end, &fail).await;
    session.close().await;
    result
}

async fn check_steps(
    env: &TestEnv<'_, '_>,
    session: &mut dyn crate::client::SequenceSession,
    model: &str,
    batched: bool,
    values: &[i32],
    end: bool,
    fail: &(dyn Fn(String, String) -> Failure + Sync),
) -> Result<(), Failure> {
    let id = env.context.correlation_id;
    let mut sum: i32 = 0;
    for (i, &v) in values.iter().enumerate() {
        let flags = SequenceFlags {
            id,
            start: i == 0,
            end: end && i + 1 == values.len(),
            string_id: false,
        };
        sum = sum.wrapping_add(v);
        let step = request(model, batched, v, flags, env);
        let sent = env.sending();
        let result = session.infer(&step).await;
        env.answered(&step, sent, &result);
        let response = result.map_err(|e| {
            fail(
                format!("a response to step {} of {}", i + 1, values.len()),
                e.to_string(),
            )
            .with_kind(e.kind())
        })?;
        let got = response
            .output("OUTPUT")
            .map_err(|e| e.to_string())
            .and_then(|t| t.to_i32().map_err(|e| e.to_string()))
            .map_err(|e| fail(format!("OUTPUT = {sum}"), e))?;
        if got.as_slice() != [sum] {
            return Err(fail(
                format!("OUTPUT = [{sum}] at step {} of {}", i + 1, values.len()),
                format!("{got:?}"),
            )
            .with_kind(ErrorKind::WrongAnswer));
        }
    }
    Ok(())
}

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let (model, batch) = {
        let models = &env.settings.sequence_models;
        models[env.rng.random_range(0..models.len())].clone()
    };
    let batched = batch > 0;
    env.model = model.clone();
    let result = match env.scenario {
        Scenario::SequenceValid => {
            let values = random_sequence(env.rng);
            send_sequence(env, &model, batched, &values, true).await
        }
        Scenario::SequenceValidValid => {
            let first = random_sequence(env.rng);
            let second = random_sequence(env.rng);
            match send_sequence(env, &model, batched, &first, true).await {
                Ok(()) => send_sequence(env, &model, batched, &second, true).await,
                err => err,
            }
        }
        Scenario::SequenceValidNoEnd => {
            let first = random_sequence(env.rng);
            let second = random_sequence(env.rng);
            let r = match send_sequence(env, &model, batched, &first, true).await {
                Ok(()) => send_sequence(env, &model, batched, &second, false).await,
                err => err,
            };
            env.context.open_sequences.insert(model.clone());
            r
        }
        Scenario::SequenceNoEnd => {
            let values = random_sequence(env.rng);
            let r = send_sequence(env, &model, batched, &values, false).await;
            env.context.open_sequences.insert(model.clone());
            r
        }
        Scenario::SequenceNoStart => {
            if env.context.open_sequences.contains(&model) {
                return Outcome::Skipped(format!(
                    "correlation id {} has an open sequence on {model}",
                    env.context.correlation_id
                ));
            }
            no_start(env, &model, batched).await
        }
        other => unreachable!("{other} is not a sequence scenario"),
    };
    match result {
        Ok(()) => {
            if matches!(
                env.scenario,
                Scenario::SequenceValid | Scenario::SequenceValidValid
            ) {
                env.context.open_sequences.remove(&model);
            }
            Outcome::Passed
        }
        Err(f) => Outcome::Failed(f),
    }
}

/// A request without START on an id whose last sequence was closed must be refused.
async fn no_start(env: &TestEnv<'_, '_>, model: &str, batched: bool) -> Result<(), Failure> {
    let id = env.context.correlation_id;
    // Any value: the request is refused before the model sees it.
    let value = 1;
    let flags = SequenceFlags {
        id,
        start: false,
        end: true,
        string_id: false,
    };
    let mut session = env
        .client
        .sequence_session()
        .await
        .map_err(|e| Failure::client(model, "a sequence stream", &e).with_correlation_id(id))?;
    let step = request(model, batched, value, flags, env);
    let sent = env.sending();
    let result = session.infer(&step).await;
    session.close().await;
    // The error is this scenario's answer: timed like one, logged with the error.
    let outcome = match &result {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    env.log_request(&step, sent, true, outcome);
    match result {
        Err(e) if e.to_string().contains(START_FLAG_ERROR) => Ok(()),
        Err(e) => Err(Failure::client(
            model,
            format!("an error containing \"{START_FLAG_ERROR}\""),
            &e,
        )
        .with_correlation_id(id)),
        Ok(r) => Err(Failure::new(
            model,
            format!("an error containing \"{START_FLAG_ERROR}\""),
            format!(
                "a successful response {:?}",
                r.output("OUTPUT")
                    .map_err(|e| e.to_string())
                    .and_then(|t| t.to_i32().map_err(|e| e.to_string()))
            ),
        )
        .with_correlation_id(id)),
    }
}
