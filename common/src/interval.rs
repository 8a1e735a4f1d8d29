//! A run's series intervals: how long each point of its latency and server series covers, and
//! the worker's side of the latency series: cumulative per-(scenario, model) counts turned into
//! counts per interval.
//!
//! The interval grows with the run (about [`SERIES_POINTS`] points whatever its length), so
//! the store keeps a bounded number of rows per worker and model: an 8-hour soak stores two
//! minutes per point, a 30-second smoke run one poll interval per point.

use crate::histogram::{HistogramError, LatencyHistogram};
use crate::status::{IntervalCounts, ModelCounts};
use std::collections::BTreeMap;
use std::time::Duration;

/// Points a series has over a run's duration, about.
pub const SERIES_POINTS: u32 = 240;
/// The interval of a run without a duration (it runs until stopped).
const OPEN_ENDED_INTERVAL: Duration = Duration::from_secs(10);

/// The interval of a run's series: about [`SERIES_POINTS`] points over `duration`, in whole
/// poll intervals (a point is written with a snapshot), never shorter than one.
pub fn series_interval(duration: Option<Duration>, poll: Duration) -> Duration {
    let poll = poll.max(Duration::from_millis(1));
    let wanted = duration.map_or(OPEN_ENDED_INTERVAL, |d| d / SERIES_POINTS);
    let polls = (wanted.as_secs_f64() / poll.as_secs_f64()).ceil().max(1.0);
    poll.mul_f64(polls)
}

#[derive(Debug, Clone)]
struct Cumulative {
    requests: u64,
    failures: u64,
    latency: LatencyHistogram,
}

/// Turns a worker's cumulative counts into interval counts: [`close`](Self::close) computes
/// the interval ending now from the last committed state (nothing changes), and
/// [`commit`](Self::commit) makes it the new state once the interval is recorded. An interval
/// that could not be written is not committed, so the next one covers the gap: no request is
/// lost from the series.
#[derive(Debug, Clone)]
pub struct IntervalTracker {
    interval_ms: i64,
    start_ms: i64,
    state: BTreeMap<(String, String), Cumulative>,
}

/// An interval closed by [`IntervalTracker::close`], to commit once recorded.
#[derive(Debug, Clone)]
pub struct Closing {
    pub intervals: Vec<IntervalCounts>,
    end_ms: i64,
    state: BTreeMap<(String, String), Cumulative>,
}

impl IntervalTracker {
    pub fn new(interval: Duration, start_ms: i64) -> Self {
        Self {
            interval_ms: (interval.as_millis() as i64).max(1),
            start_ms,
            state: BTreeMap::new(),
        }
    }

    /// Whether an interval has passed since the last commit.
    pub fn due(&self, now_ms: i64) -> bool {
        now_ms - self.start_ms >= self.interval_ms
    }

    /// The interval from the last commit to `now_ms`: for each (scenario, model) that sent or
    /// answered anything in it, the difference of its cumulative counts with the committed
    /// state. Counts lower than the committed state (they cannot be, within one worker) are
    /// taken whole.
    pub fn close(&self, models: &[ModelCounts], now_ms: i64) -> Result<Closing, HistogramError> {
        let mut intervals = Vec::new();
        let mut state = BTreeMap::new();
        for m in models {
            let latency = LatencyHistogram::decode(&m.latency_histogram)?;
            let key = (m.scenario.clone(), m.model.clone());
            let current = Cumulative {
                requests: m.requests,
                failures: m.failures,
                latency,
            };
            let (requests, failures, latency) = match self.state.get(&key) {
                Some(before)
                    if before.requests <= current.requests
                        && before.failures <= current.failures =>
                {
                    match current.latency.since(&before.latency) {
                        Ok(window) => (
                            current.requests - before.requests,
                            current.failures - before.failures,
                            window,
                        ),
                        Err(_) => (current.requests, current.failures, current.latency.clone()),
                    }
                }
                _ => (current.requests, current.failures, current.latency.clone()),
            };
            if requests > 0 || failures > 0 || latency.count() > 0 {
                intervals.push(IntervalCounts {
                    scenario: m.scenario.clone(),
                    model: m.model.clone(),
                    start_ms: self.start_ms,
                    end_ms: now_ms,
                    requests,
                    failures,
                    latency_histogram: latency.encode(),
                });
            }
            state.insert(key, current);
        }
        // A (scenario, model) missing from `models` keeps its committed state.
        for (key, before) in &self.state {
            state.entry(key.clone()).or_insert_with(|| before.clone());
        }
        Ok(Closing {
            intervals,
            end_ms: now_ms,
            state,
        })
    }

    /// Makes a closed interval the new state (call once it is recorded).
    pub fn commit(&mut self, closing: Closing) {
        self.start_ms = closing.end_ms;
        self.state = closing.state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The points of a worker's series (latency intervals and QPS points: the snapshots that
    /// close an interval, and the last) over a whole run that snapshots every poll.
    fn series_points(duration: Duration, poll: Duration) -> u32 {
        let mut tracker = IntervalTracker::new(series_interval(Some(duration), poll), 0);
        let polls = (duration.as_millis() / poll.as_millis()) as i64;
        let mut points = 0;
        for i in 1..=polls {
            let at_ms = i * poll.as_millis() as i64;
            if i == polls || tracker.due(at_ms) {
                tracker.commit(tracker.close(&[], at_ms).unwrap());
                points += 1;
            }
        }
        points
    }

    #[test]
    fn a_series_keeps_a_bounded_number_of_points_whatever_the_length() {
        let hour = Duration::from_secs(3600);
        for (duration, poll, at_least) in [
            (8 * hour, Duration::from_secs(1), SERIES_POINTS),
            (8 * hour, Duration::from_secs(7), 220),
            (24 * hour, Duration::from_millis(500), SERIES_POINTS),
            (Duration::from_secs(600), Duration::from_secs(1), 200),
            // Shorter than SERIES_POINTS polls: every snapshot is a point.
            (Duration::from_secs(60), Duration::from_secs(1), 60),
        ] {
            let points = series_points(duration, poll);
            assert!(
                (at_least..=SERIES_POINTS + 1).contains(&points),
                "{duration:?} every {poll:?}: {points} points"
            );
        }
    }

    fn counts(requests: u64, failures: u64, latencies_ms: &[u64]) -> ModelCounts {
        let mut h = LatencyHistogram::new();
        for ms in latencies_ms {
            h.record(Duration::from_millis(*ms));
        }
        ModelCounts {
            scenario: "Infer".into(),
            model: "m".into(),
            requests,
            failures,
            latency_histogram: h.encode(),
            ..Default::default()
        }
    }

    #[test]
    fn the_interval_grows_with_the_run_in_whole_polls() {
        let poll = Duration::from_secs(1);
        assert_eq!(
            series_interval(Some(Duration::from_secs(30)), poll),
            poll,
            "a short run: one poll per point"
        );
        assert_eq!(
            series_interval(Some(Duration::from_secs(8 * 3600)), poll),
            Duration::from_secs(120)
        );
        assert_eq!(
            series_interval(Some(Duration::from_secs(600)), Duration::from_millis(2000)),
            Duration::from_secs(4),
            "600 s / 240 = 2.5 s, rounded up to whole 2 s polls"
        );
        assert_eq!(series_interval(None, poll), Duration::from_secs(10));
    }

    #[test]
    fn an_interval_holds_only_what_happened_in_it() {
        let mut t = IntervalTracker::new(Duration::from_secs(1), 1000);
        assert!(!t.due(1500));
        assert!(t.due(2000));
        let first = t.close(&[counts(2, 0, &[5, 7])], 2000).unwrap();
        assert_eq!(first.intervals.len(), 1);
        assert_eq!(
            (first.intervals[0].start_ms, first.intervals[0].end_ms),
            (1000, 2000)
        );
        t.commit(first);
        let second = t.close(&[counts(5, 1, &[5, 7, 100, 100])], 3000).unwrap();
        let i = &second.intervals[0];
        assert_eq!(
            (i.start_ms, i.end_ms, i.requests, i.failures),
            (2000, 3000, 3, 1)
        );
        let h = LatencyHistogram::decode(&i.latency_histogram).unwrap();
        assert_eq!(h.count(), 2, "only the interval's two answers");
        assert!(h.percentile_us(50.0) >= 99_000, "{h:?}");
    }

    #[test]
    fn an_uncommitted_interval_is_covered_by_the_next() {
        let mut t = IntervalTracker::new(Duration::from_secs(1), 0);
        let lost = t.close(&[counts(3, 0, &[1, 1, 1])], 1000).unwrap();
        drop(lost); // the store was down: not committed
        let next = t.close(&[counts(4, 0, &[1, 1, 1, 1])], 2000).unwrap();
        assert_eq!(
            (next.intervals[0].start_ms, next.intervals[0].requests),
            (0, 4)
        );
        t.commit(next);
        let idle = t.close(&[counts(4, 0, &[1, 1, 1, 1])], 3000).unwrap();
        assert!(idle.intervals.is_empty(), "nothing happened: no row");
    }
}
