//! The QPS of a run, defined once: its requests divided by [`load_seconds`] of its QPS samples
//! (the L0 table divides by what it is given). The driver's report and metrics-client's run
//! view both give it this.

use crate::store::QpsSample;
use std::collections::BTreeMap;

/// The seconds of load that a run's QPS samples cover: from one sample interval before the
/// earliest sample to the latest one, across all workers.
///
/// Why this denominator: the requests a report counts are the ones the samples count, and a
/// worker's first sample already covers the interval before it (it is written one poll interval
/// after the worker started sending). The run's wall time would be wrong: it includes starting
/// and readying the servers and the warm-up, when no load is sent, and the stop afterwards.
///
/// The interval is the gap between the first two samples of the first worker (by member id) that
/// has two; 1 s when none has. Never less than one interval, so QPS stays finite.
pub fn load_seconds(samples: &[QpsSample]) -> f64 {
    QpsSpan::of(samples).load_seconds()
}

/// What [`load_seconds`] needs of a run's QPS samples, so a store can answer it without
/// handing over every sample ([`crate::store::Store::qps_span`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpsSpan {
    /// The earliest and latest sample of any worker.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// The gap between the first two samples of the first worker (by member id) that has two.
    pub interval_ms: Option<i64>,
}

impl QpsSpan {
    pub fn of(samples: &[QpsSample]) -> QpsSpan {
        let mut per_member: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for s in samples {
            per_member.entry(&s.member_id).or_default().push(s.at_ms);
        }
        QpsSpan {
            first_ms: samples.iter().map(|s| s.at_ms).min(),
            last_ms: samples.iter().map(|s| s.at_ms).max(),
            interval_ms: per_member.values_mut().find(|at| at.len() >= 2).map(|at| {
                at.sort_unstable();
                at[1] - at[0]
            }),
        }
    }

    /// See [`load_seconds`].
    pub fn load_seconds(&self) -> f64 {
        let interval_s = self.interval_ms.map_or(1.0, |ms| ms as f64 / 1000.0);
        let span_s = match (self.first_ms, self.last_ms) {
            (Some(first), Some(last)) => (last - first) as f64 / 1000.0,
            _ => 0.0,
        };
        (span_s + interval_s).max(interval_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(member: &str, at_ms: i64) -> QpsSample {
        QpsSample {
            member_id: member.into(),
            at_ms,
            qps: 0.0,
            total_requests: 0,
        }
    }

    #[test]
    fn the_load_spans_the_samples_plus_the_interval_the_first_one_covers() {
        // Two workers sampling every 2 s, the second started 1 s later; the final snapshots
        // come at the stop (10.5 s), off the 2 s grid.
        let samples = [
            sample("b", 3_000),
            sample("a", 2_000),
            sample("a", 4_000),
            sample("b", 5_000),
            sample("a", 10_500),
            sample("b", 10_500),
        ];
        // From 0 s (2 s before the first sample) to 10.5 s.
        assert_eq!(load_seconds(&samples), 10.5);
    }

    #[test]
    fn one_sample_or_none_count_one_second() {
        assert_eq!(load_seconds(&[]), 1.0);
        assert_eq!(load_seconds(&[sample("a", 5_000)]), 1.0);
        // A worker with one sample does not set the interval; one with two does.
        let samples = [sample("a", 5_000), sample("b", 6_000), sample("b", 6_500)];
        assert_eq!(load_seconds(&samples), 2.0);
    }
}
