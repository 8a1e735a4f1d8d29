//! Timeout: a request to the delayed identity model with a client deadline shorter than the
//! model's delay must end in DEADLINE_EXCEEDED (gRPC) or a client timeout (HTTP); afterwards the
//! server must be live and ready and must answer a request with no delay correctly.

use super::{Failure, Outcome, TestEnv};
use crate::client::{ClientError, InferRequest, RequestedOutput};
use crate::tensor::Tensor;
use rand::Rng;

pub fn identity_request(model: &str, values: &[i32], delay_ms: i64) -> InferRequest {
    let mut r = InferRequest::new(
        model,
        vec![Tensor::from_i32(
            "INPUT0",
            vec![values.len() as i64],
            values,
        )],
    );
    r.outputs = vec![RequestedOutput {
        name: "OUTPUT0".into(),
        class_count: None,
        datatype: None,
    }];
    r.int_parameters = vec![("delay_ms".into(), delay_ms)];
    r
}

/// Sends `values` with no delay and checks they come back unchanged.
pub async fn check_identity(
    env: &TestEnv<'_, '_>,
    model: &str,
    values: &[i32],
) -> Result<(), Failure> {
    let mut request = identity_request(model, values, 0);
    request.timeout = Some(env.settings.request_timeout);
    let response = env
        .infer(&request)
        .await
        .map_err(|e| Failure::client(model, "an answer after the disruption", &e))?;
    let got = response
        .output("OUTPUT0")
        .map_err(|e| e.to_string())
        .and_then(|t| t.to_i32().map_err(|e| e.to_string()))
        .map_err(|e| Failure::new(model, "OUTPUT0", e))?;
    if got != values {
        return Err(Failure::new(
            model,
            format!("OUTPUT0 = {values:?}"),
            format!("{got:?}"),
        ));
    }
    Ok(())
}

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let model = env.settings.identity_model.clone();
    let values: Vec<i32> = (0..16).map(|_| env.rng.random_range(0..1 << 20)).collect();
    let mut request = identity_request(
        &model,
        &values,
        env.settings.timeout_delay.as_millis() as i64,
    );
    request.timeout = Some(env.settings.timeout_deadline);
    let expected = format!(
        "a deadline exceeded after {:?} (model delay {:?})",
        env.settings.timeout_deadline, env.settings.timeout_delay
    );
    let sent = std::time::Instant::now();
    match env.infer(&request).await {
        Err(ClientError::DeadlineExceeded(_)) => {}
        Err(other) => return Outcome::Failed(Failure::client(&model, expected, &other)),
        // An answer seen only after the deadline: the server kept the delay, and this worker
        // was too busy to fire its own deadline first (a timeout polls the call before its
        // timer). As a client with that deadline would, it had given up: no server fault.
        Ok(_) if answered_after_the_deadline(sent.elapsed(), env.settings.timeout_deadline) => {}
        Ok(_) => {
            return Outcome::Failed(Failure::new(
                &model,
                expected,
                format!(
                    "a response {} ms after the request, before the deadline",
                    sent.elapsed().as_millis()
                ),
            ));
        }
    }
    if let Err(f) = env.check_server_healthy(&model).await {
        return Outcome::Failed(f);
    }
    match check_identity(env, &model, &values).await {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}

/// Whether an answer that took `elapsed` came after the request's `deadline` (so only a late
/// timer of the client let it through), rather than before it (the server skipped its delay).
fn answered_after_the_deadline(
    elapsed: std::time::Duration,
    deadline: std::time::Duration,
) -> bool {
    elapsed >= deadline
}

#[cfg(test)]
mod tests {
    use super::answered_after_the_deadline;
    use std::time::Duration;

    #[test]
    fn only_an_answer_before_the_deadline_is_the_server_s_fault() {
        let deadline = Duration::from_millis(100);
        assert!(!answered_after_the_deadline(
            Duration::from_millis(3),
            deadline
        ));
        assert!(!answered_after_the_deadline(
            Duration::from_millis(99),
            deadline
        ));
        assert!(answered_after_the_deadline(
            Duration::from_millis(100),
            deadline
        ));
        assert!(answered_after_the_deadline(
            Duration::from_millis(340),
            deadline
        ));
    }
}
