//! A member that starts again mid-run (a worker pod evicted and replaced under the same member
//! name) carries on from what it had reported: the store keeps one row of cumulative counts
//! per member, which the new process would overwrite with its own smaller ones (lost), and to
//! which it must not add them twice. The new process reads what was reported once, at its
//! start ([`Reported`]), and every snapshot it writes is its own counts plus that.

use super::{ModelCounts, ScenarioCounts, WorkerSnapshot};
use crate::histogram::{HistogramError, LatencyHistogram};
use crate::signature::SignatureCount;

/// What a member's earlier processes reported: the cumulative parts of its latest snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reported {
    pub total_requests: u64,
    pub scenarios: Vec<ScenarioCounts>,
    pub models: Vec<ModelCounts>,
    pub signatures: Vec<SignatureCount>,
}

impl Reported {
    /// Nothing reported before: a member's first start.
    pub fn is_empty(&self) -> bool {
        *self == Reported::default()
    }

    /// Adds what was reported to `snapshot`, this process's own cumulative counts: counts sum,
    /// histograms merge, signature counts sum and keep the earliest first and latest last
    /// sighting. Rows only one side has are kept as they are. What is not cumulative (the QPS,
    /// intervals, outages, spans) is left alone.
    pub fn carry_into(&self, snapshot: &mut WorkerSnapshot) -> Result<(), HistogramError> {
        snapshot.total_requests += self.total_requests;
        fold_in(
            &mut snapshot.scenarios,
            &self.scenarios,
            |a, b| a.scenario == b.scenario,
            add_scenario,
        )?;
        fold_in(
            &mut snapshot.models,
            &self.models,
            |a, b| a.scenario == b.scenario && a.model == b.model,
            add_model,
        )?;
        fold_in(
            &mut snapshot.signatures,
            &self.signatures,
            |a, b| a.signature == b.signature,
            |own, before| {
                own.count += before.count;
                own.first_at_ms = own.first_at_ms.min(before.first_at_ms);
                own.last_at_ms = own.last_at_ms.max(before.last_at_ms);
                Ok(())
            },
        )
    }
}

/// Each row of `before` added to its twin in `own` (`same`), or appended when `own` has none.
fn fold_in<T: Clone>(
    own: &mut Vec<T>,
    before: &[T],
    same: impl Fn(&T, &T) -> bool,
    add: impl Fn(&mut T, &T) -> Result<(), HistogramError>,
) -> Result<(), HistogramError> {
    for b in before {
        match own.iter_mut().find(|o| same(o, b)) {
            Some(o) => add(o, b)?,
            None => own.push(b.clone()),
        }
    }
    Ok(())
}

fn add_scenario(own: &mut ScenarioCounts, before: &ScenarioCounts) -> Result<(), HistogramError> {
    own.tests += before.tests;
    own.failures += before.failures;
    own.requests += before.requests;
    own.skipped += before.skipped;
    own.latency_histogram = merged(&own.latency_histogram, &before.latency_histogram)?;
    own.send_lateness_histogram = merged(
        &own.send_lateness_histogram,
        &before.send_lateness_histogram,
    )?;
    Ok(())
}

fn add_model(own: &mut ModelCounts, before: &ModelCounts) -> Result<(), HistogramError> {
    own.tests += before.tests;
    own.failures += before.failures;
    own.requests += before.requests;
    own.uncounted_runs += before.uncounted_runs;
    own.latency_histogram = merged(&own.latency_histogram, &before.latency_histogram)?;
    own.stream = match (own.stream.take(), &before.stream) {
        (Some(mut s), Some(b)) => {
            s.streams += b.streams;
            s.responses += b.responses;
            s.first_response_histogram =
                merged(&s.first_response_histogram, &b.first_response_histogram)?;
            s.inter_response_histogram =
                merged(&s.inter_response_histogram, &b.inter_response_histogram)?;
            Some(s)
        }
        (s, b) => s.or_else(|| b.clone()),
    };
    Ok(())
}

/// Two encoded histograms as one; empty stays empty (an empty string means "none recorded").
fn merged(own: &str, before: &str) -> Result<String, HistogramError> {
    match (own.is_empty(), before.is_empty()) {
        (_, true) => Ok(own.to_string()),
        (true, false) => Ok(before.to_string()),
        (false, false) => {
            let mut sum = LatencyHistogram::decode(own)?;
            sum.merge(&LatencyHistogram::decode(before)?);
            Ok(sum.encode())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::Signature;
    use crate::status::StreamCounts;
    use std::time::Duration;

    fn histogram(latencies_ms: &[u64]) -> String {
        let mut h = LatencyHistogram::new();
        for ms in latencies_ms {
            h.record(Duration::from_millis(*ms));
        }
        h.encode()
    }

    fn scenario(name: &str, tests: u64, latencies_ms: &[u64]) -> ScenarioCounts {
        ScenarioCounts {
            scenario: name.into(),
            tests,
            failures: 1,
            requests: tests * 2,
            skipped: 0,
            latency_histogram: histogram(latencies_ms),
            send_lateness_histogram: String::new(),
        }
    }

    fn model(scenario: &str, name: &str, tests: u64, stream: Option<u64>) -> ModelCounts {
        ModelCounts {
            scenario: scenario.into(),
            model: name.into(),
            tests,
            failures: 0,
            requests: tests,
            latency_histogram: histogram(&[5; 3]),
            stream: stream.map(|streams| StreamCounts {
                streams,
                responses: streams * 3,
                first_response_histogram: histogram(&[1]),
                inter_response_histogram: String::new(),
            }),
            uncounted_runs: 0,
        }
    }

    fn signature(text: &str, count: u64, first: i64, last: i64) -> SignatureCount {
        SignatureCount {
            signature: Signature::new("Load", "add_sub", "an answer", text),
            count,
            first_at_ms: first,
            last_at_ms: last,
        }
    }

    fn count(encoded: &str) -> u64 {
        LatencyHistogram::decode(encoded).unwrap().count()
    }

    #[test]
    fn a_replaced_member_s_snapshot_is_what_it_reported_before_plus_its_own() {
        let before = Reported {
            total_requests: 100,
            scenarios: vec![scenario("Load", 40, &[10; 4]), scenario("Timeout", 3, &[])],
            models: vec![
                model("Load", "add_sub", 40, None),
                model("Infer", "rep", 2, Some(2)),
            ],
            signatures: vec![signature("connection refused", 7, 1_000, 2_000)],
        };
        let mut snapshot = WorkerSnapshot {
            total_requests: 30,
            qps: 15.0,
            scenarios: vec![scenario("Load", 10, &[20; 2])],
            models: vec![
                model("Load", "add_sub", 10, None),
                model("Infer", "rep", 1, Some(1)),
            ],
            signatures: vec![signature("connection refused", 2, 5_000, 6_000)],
            ..Default::default()
        };
        before.carry_into(&mut snapshot).unwrap();

        assert_eq!(snapshot.total_requests, 130);
        assert_eq!(snapshot.qps, 15.0, "the rate is this process's own");
        let load = &snapshot.scenarios[0];
        assert_eq!((load.tests, load.failures, load.requests), (50, 2, 100));
        assert_eq!(count(&load.latency_histogram), 6, "histograms merge");
        assert_eq!(
            snapshot.scenarios[1],
            scenario("Timeout", 3, &[]),
            "a scenario only the earlier process ran is kept"
        );
        assert_eq!(snapshot.models[0].tests, 50);
        assert_eq!(count(&snapshot.models[0].latency_histogram), 6);
        let stream = snapshot.models[1].stream.as_ref().unwrap();
        assert_eq!((stream.streams, stream.responses), (3, 9));
        assert_eq!(count(&stream.first_response_histogram), 2);
        assert_eq!(
            stream.inter_response_histogram, "",
            "none recorded stays none"
        );
        assert_eq!(
            snapshot.signatures,
            [signature("connection refused", 9, 1_000, 6_000)]
        );
    }

    #[test]
    fn a_first_start_carries_nothing() {
        let mut snapshot = WorkerSnapshot {
            total_requests: 30,
            scenarios: vec![scenario("Load", 10, &[20; 2])],
            ..Default::default()
        };
        let own = snapshot.clone();
        let nothing = Reported::default();
        assert!(nothing.is_empty());
        nothing.carry_into(&mut snapshot).unwrap();
        assert_eq!(snapshot, own);
    }
}
