//! Infer on a sequence model: one test is one sequence, START … END on the test's correlation
//! id (from the worker's block, as the L0 sequence scenarios use it), sent over one
//! `SequenceSession` (one gRPC ModelStreamInfer stream, consecutive requests over HTTP). The
//! steps are the model's planned requests: with a perf_analyzer input-data file, one stream of
//! it (step i = the stream's i-th entry, the length = the stream's); otherwise consecutive
//! random (or zero) requests, as many as the L0 scenarios draw for a sequence. Control and
//! implicit-state inputs are Triton's to fill, so the requests never carry them. Every response
//! passes [`model::check_response`] (and, with `--consistency`, must repeat the first response
//! to the same step of the same steps).

use super::PlannedModel;
use crate::client::{ClientError, InferResponse, SequenceFlags};
use crate::model;
use crate::scenarios::sequence::sequence_length;
use crate::scenarios::{Failure, Outcome, TestEnv};
use rand::Rng;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

/// Where a model's sequences come from.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceSource {
    /// Streams of an input-data file: ranges of the planned requests, one per stream.
    Streams(Vec<Range<usize>>),
    /// `n` planned requests, cycled from a random start for a drawn length.
    Cycle(usize),
}

/// A stream of an input-data file without entries: a sequence needs at least one step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"data\"[{stream}] is an empty stream; a sequence needs at least one step")]
pub struct EmptyStream {
    pub stream: usize,
}

/// One sequence: which planned request each step sends, and a key that identifies the steps
/// (the same key and step index always send the same request after the same history).
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub key: usize,
    pub steps: Vec<usize>,
}

impl SequenceSource {
    /// The streams of a file (their lengths, in order), or random requests.
    pub fn new(streams: Option<&[usize]>, requests: usize) -> Result<Self, EmptyStream> {
        match streams {
            None => Ok(Self::Cycle(requests)),
            Some(lengths) => {
                let mut start = 0;
                let mut ranges = Vec::new();
                for (s, &len) in lengths.iter().enumerate() {
                    if len == 0 {
                        return Err(EmptyStream { stream: s });
                    }
                    ranges.push(start..start + len);
                    start += len;
                }
                Ok(Self::Streams(ranges))
            }
        }
    }

    /// Draws one sequence: a random stream, or a random start and an L0-drawn length.
    pub fn pick(&self, rng: &mut impl Rng) -> Pick {
        match self {
            Self::Streams(ranges) => {
                let key = rng.random_range(0..ranges.len());
                Pick {
                    key,
                    steps: ranges[key].clone().collect(),
                }
            }
            Self::Cycle(n) => {
                let key = rng.random_range(0..*n);
                let len = sequence_length(rng);
                Pick {
                    key,
                    steps: (0..len).map(|i| (key + i) % n).collect(),
                }
            }
        }
    }
}

/// `--consistency` for sequences: the first response to (key, step, last step?).
pub type FirstResponses = Mutex<HashMap<(usize, usize, bool), InferResponse>>;

pub async fn run(env: &mut TestEnv<'_, '_>, planned: &PlannedModel, tolerance: f64) -> Outcome {
    let source = planned
        .sequence
        .as_ref()
        .expect("run only for sequence models");
    let pick = source.pick(env.rng);
    let d = &planned.description;
    let id = env.context.correlation_id;
    let string_id = d.sequence_batching.as_ref().is_some_and(|s| s.string_ids());
    let mut session = match env.client.sequence_session().await {
        Ok(s) => s,
        Err(e) => {
            return Outcome::Failed(
                Failure::client(&d.name, "a sequence stream", &e).with_correlation_id(id),
            );
        }
    };
    let n = pick.steps.len();
    let mut result = Ok(());
    for (i, &k) in pick.steps.iter().enumerate() {
        let mut request = planned.requests[k].request.clone();
        let end = i + 1 == n;
        request.sequence = Some(SequenceFlags {
            id,
            start: i == 0,
            end,
            string_id,
        });
        request.timeout = Some(env.settings.request_timeout);
        let sent = env.sending();
        let response = session.infer(&request).await;
        env.answered(&request, sent, &response);
        result = check_step(planned, k, (pick.key, i, end), response, tolerance).map_err(|f| {
            Failure {
                expected: format!("{} (step {} of {n})", f.expected, i + 1),
                ..f
            }
            .with_correlation_id(id)
        });
        if result.is_err() {
            break;
        }
    }
    session.close().await;
    match result {
        Ok(()) => {
            // This id's last sequence on the model ended (SequenceNoStart reads this).
            env.context.open_sequences.remove(&d.name);
            Outcome::Passed
        }
        Err(f) => {
            env.context.open_sequences.insert(d.name.clone());
            Outcome::Failed(f)
        }
    }
}

fn check_step(
    planned: &PlannedModel,
    k: usize,
    step: (usize, usize, bool),
    response: Result<InferResponse, ClientError>,
    tolerance: f64,
) -> Result<(), Failure> {
    let d = &planned.description;
    let response = response.map_err(|e| planned.no_response(e))?;
    let fail = |f: model::CheckFailure| planned.failure(&response, f);
    model::check_response(d, &planned.requests[k], &response, tolerance).map_err(fail)?;
    if let Some(firsts) = &planned.first_sequence_responses {
        let mut firsts = firsts.lock().expect("not poisoned");
        match firsts.get(&step) {
            None => {
                firsts.insert(step, response.clone());
            }
            Some(before) => model::check_consistent(before, &response).map_err(fail)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn streams_are_sequences_in_order() {
        let source = SequenceSource::new(Some(&[3, 1, 2]), 6).unwrap();
        assert_eq!(source, SequenceSource::Streams(vec![0..3, 3..4, 4..6]));
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let p = source.pick(&mut rng);
            let want: Vec<usize> = match p.key {
                0 => vec![0, 1, 2],
                1 => vec![3],
                _ => vec![4, 5],
            };
            assert_eq!(p.steps, want);
            seen.insert(p.key);
        }
        assert_eq!(seen.len(), 3, "every stream is drawn");
        let e = SequenceSource::new(Some(&[2, 0]), 2).unwrap_err();
        assert_eq!(e, EmptyStream { stream: 1 });
        assert!(
            e.to_string().contains("\"data\"[1] is an empty stream"),
            "{e}"
        );
    }

    #[test]
    fn random_sequences_cycle_the_requests_for_an_l0_length() {
        let source = SequenceSource::new(None, 4).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let mut lengths = Vec::new();
        for _ in 0..200 {
            let p = source.pick(&mut rng);
            assert!(!p.steps.is_empty());
            for (i, s) in p.steps.iter().enumerate() {
                assert_eq!(*s, (p.key + i) % 4);
            }
            lengths.push(p.steps.len());
        }
        // max(1, N(16, 8)), as the L0 sequence scenarios draw it.
        let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
        assert!((13.0..19.0).contains(&mean), "{mean}");
        let mut again = StdRng::seed_from_u64(3);
        let mut rng = StdRng::seed_from_u64(3);
        assert_eq!(source.pick(&mut rng), source.pick(&mut again), "seeded");
    }
}
