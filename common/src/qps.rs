//! The QPS of a run, defined once: its requests divided by [`load_seconds`] of its QPS samples
//! (the L0 table divides by what it is given). The driver's report and metrics-client's run
//! view both give it this.

use std::collections::BTreeMap;

/// One QPS sample of one member.
#[derive(Debug, Clone, PartialEq)]
pub struct QpsSample {
    pub member_id: String,
    pub at_ms: i64,
    pub qps: f64,
    pub total_requests: u64,
    /// The member's clients inside a test that counts its requests only when it ends (see
    /// [`crate::status::WorkerSnapshot::deferred_clients`]); the latest sample only, 0 in the
    /// series.
    pub deferred_clients: u32,
    /// The servers holding the member's calls unanswered at the sample (see
    /// [`crate::status::WorkerSnapshot::unanswered`]); the latest sample only, empty in the
    /// series.
    pub unanswered: Vec<crate::status::UnansweredCalls>,
}

/// The seconds of load that a run's QPS samples cover: from when the first worker started
/// sending to the latest sample of any.
///
/// Why this denominator: the requests a report counts are the ones the samples count, and a
/// worker's first sample already covers the time before it. The run's wall time would be
/// wrong: it includes starting and readying the servers and the warm-up, when no load is sent,
/// and the stop afterwards.
///
/// When the load started is [`QpsSpan::sending_since_ms`] where the store knows it; from the
/// samples alone, one sample interval before the earliest sample (the interval: the gap between
/// the first two samples of the first worker, by member id, that has two; 1 s when none has).
/// Never less than one interval, so QPS stays finite.
pub fn load_seconds(samples: &[QpsSample]) -> f64 {
    QpsSpan::of(samples).load_seconds()
}

/// One member's QPS series as a report shows it, summarised by the store
/// ([`crate::store::Store::qps_summaries`]) so that a report reads at most `points` rows per
/// member however long the run was.
#[derive(Debug, Clone, PartialEq)]
pub struct QpsSummary {
    pub member_id: String,
    /// Samples in the series.
    pub samples: u64,
    /// Of the live samples ([`QpsStats::live`]).
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    /// (at_ms, QPS), in time order: the mean time and mean QPS of the member's samples in each
    /// of `points` equal spans of the run's time (from its first sample of any member to its
    /// last), so the points of different workers line up; a span without samples has none.
    pub points: Vec<(f64, f64)>,
}

/// Statistics of QPS samples that add up: a store sums them per span of the series, the
/// summary over its spans.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QpsStats {
    pub samples: u64,
    pub sum: f64,
    pub max: f64,
    /// The least QPS above 0 (None: every sample is 0).
    pub min_positive: Option<f64>,
    /// Samples of 0 QPS.
    pub zeros: u64,
}

impl QpsStats {
    pub fn add(&mut self, other: &QpsStats) {
        self.samples += other.samples;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        self.min_positive = match (self.min_positive, other.min_positive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.zeros += other.zeros;
    }

    /// (min, avg, max) of the live samples: every one but a final 0 after others, since a
    /// worker's last snapshot reports 0 QPS by design (it has stopped sending).
    pub fn live(&self, last_is_zero: bool) -> (f64, f64, f64) {
        let final_zero = self.samples > 1 && last_is_zero;
        let (samples, zeros) = if final_zero {
            (self.samples - 1, self.zeros.saturating_sub(1))
        } else {
            (self.samples, self.zeros)
        };
        if samples == 0 {
            return (0.0, 0.0, 0.0);
        }
        let min = if zeros > 0 {
            0.0
        } else {
            self.min_positive.unwrap_or(0.0)
        };
        (min, self.sum / samples as f64, self.max.max(0.0))
    }
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
    /// When the first worker started sending: the start of its first latency interval. None
    /// where the samples alone are known, or for a run recorded before latency intervals. Only
    /// this is exact when every worker stopped within two samples (its last sample comes at
    /// its stop, so the gap of its two is not an interval).
    pub sending_since_ms: Option<i64>,
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
            sending_since_ms: None,
        }
    }

    /// When the load started (see [`load_seconds`]); None without samples.
    pub fn start_ms(&self) -> Option<i64> {
        let first = self.first_ms?;
        Some(
            self.sending_since_ms
                .unwrap_or(first - self.interval_ms.unwrap_or(1000)),
        )
    }

    /// See [`load_seconds`].
    pub fn load_seconds(&self) -> f64 {
        let interval_s = self.interval_ms.map_or(1.0, |ms| ms as f64 / 1000.0);
        match (self.start_ms(), self.last_ms) {
            (Some(start), Some(last)) if last > start => (last - start) as f64 / 1000.0,
            _ => interval_s,
        }
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
            deferred_clients: 0,
            unanswered: vec![],
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

    fn stats_of(qps: &[f64]) -> QpsStats {
        let mut total = QpsStats::default();
        for &q in qps {
            total.add(&QpsStats {
                samples: 1,
                sum: q,
                max: q,
                min_positive: (q > 0.0).then_some(q),
                zeros: u64::from(q == 0.0),
            });
        }
        total
    }

    #[test]
    fn live_statistics_leave_out_only_a_final_zero_after_others() {
        // The final snapshot's 0 is left out.
        let s = stats_of(&[4.0, 2.0, 6.0, 0.0]);
        assert_eq!(s.live(true), (2.0, 4.0, 6.0));
        // A 0 that is not the last counts, and so does a last sample that is not 0.
        let s = stats_of(&[4.0, 0.0, 8.0]);
        assert_eq!(s.live(false), (0.0, 4.0, 8.0));
        // Two zeros at the end: only the last one is the final snapshot.
        let s = stats_of(&[3.0, 0.0, 0.0]);
        assert_eq!(s.live(true), (0.0, 1.5, 3.0));
        // A lone 0 is a sample like any other.
        assert_eq!(stats_of(&[0.0]).live(true), (0.0, 0.0, 0.0));
        assert_eq!(stats_of(&[5.0]).live(false), (5.0, 5.0, 5.0));
        assert_eq!(QpsStats::default().live(true), (0.0, 0.0, 0.0));
        // Adding groups equals adding their samples.
        let mut halves = stats_of(&[1.0, 0.0]);
        halves.add(&stats_of(&[7.0, 3.0]));
        assert_eq!(halves, stats_of(&[1.0, 0.0, 7.0, 3.0]));
    }

    #[test]
    fn one_sample_or_none_count_one_second() {
        assert_eq!(load_seconds(&[]), 1.0);
        assert_eq!(load_seconds(&[sample("a", 5_000)]), 1.0);
        // A worker with one sample does not set the interval; one with two does.
        let samples = [sample("a", 5_000), sample("b", 6_000), sample("b", 6_500)];
        assert_eq!(load_seconds(&samples), 2.0);
    }

    #[test]
    fn a_known_start_of_sending_wins_over_the_interval_of_the_samples() {
        // One worker that stopped 50 ms after its first 1 s sample: the gap of its two samples
        // is not its interval.
        let samples = [sample("a", 11_000), sample("a", 11_050)];
        let estimated = QpsSpan::of(&samples);
        assert_eq!(estimated.load_seconds(), 0.1);
        let known = QpsSpan {
            sending_since_ms: Some(10_000),
            ..estimated
        };
        assert_eq!(known.start_ms(), Some(10_000));
        assert_eq!(known.load_seconds(), 1.05);
    }
}
