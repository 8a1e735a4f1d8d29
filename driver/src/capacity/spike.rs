//! Capacity mode's spike phase as a pure state machine: from the closed-loop load an earlier
//! phase converged on ([`jump_from`]), one baseline window, then an open-loop jump to
//! `target_rps` for `duration`, then back to the baseline load until a window is again within the
//! p99 target without unanswered requests (recovered) or `recovery_timeout` passes. The run
//! loop feeds it the same windows as the AIMD controller ([`crate::capacity::controller::WindowMeter`]) and
//! writes the [`GroupLoad`] it returns.
//!
//! Its answers: what the group got answered during the spike and the exact p99 of the spike's
//! merged histograms; the error rate (unanswered over sent: errors and timeouts of an
//! overloaded server, which the workers count instead of failing on during a spike and its
//! recovery) from the jump until recovery, since the spike's requests finish or time out after
//! it; and the time to recover, measured to the end of the first good window (so to within one
//! check interval).

use serde::{Deserialize, Serialize};
use stress_common::histogram::LatencyHistogram;

use crate::capacity::controller::{Ending, MIN_SAMPLES, PhaseResult, Window};
use crate::matrix::CapacityPhase;

/// What the group is asked to send: closed loop at `concurrency`, or open loop at `rate`
/// requests per second in all (a spike); during a spike and its recovery the workers count
/// unanswered requests instead of failing on them (`count_unanswered`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupLoad {
    pub concurrency: u32,
    pub rate: Option<f64>,
    pub count_unanswered: bool,
}

impl GroupLoad {
    pub fn closed(concurrency: u32) -> Self {
        GroupLoad {
            concurrency,
            rate: None,
            count_unanswered: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpikeConfig {
    pub target_rps: f64,
    pub duration_ms: i64,
    pub recovery_timeout_ms: i64,
    pub target_p99_us: u64,
    pub tolerance: f64,
    /// The closed-loop load the spike jumps from and returns to.
    pub from_concurrency: u32,
}

/// Where a spike phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpikeStage {
    /// At the load it jumps from: the first window holds the previous phase's end, the next
    /// one is the baseline.
    Baseline,
    /// Open loop at target_rps.
    Spiking,
    /// Back at the load it jumped from, waiting for a good window.
    Recovering,
}

/// One window of the spike's trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikeCheck {
    pub stage: SpikeStage,
    pub window: Window,
}

/// The spike's answer (report.json `capacity.phases[].spike`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikeResult {
    pub target_rps: f64,
    /// The group's closed-loop concurrency before and after the spike.
    pub from_concurrency: u32,
    pub baseline_qps: Option<f64>,
    pub baseline_p99_ms: Option<f64>,
    /// When the driver asked for the jump, and for the return.
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    /// From the jump to the end of the first good window after it (the spike's requests
    /// finish, or time out, after it): requests finished, answered, and failed tests.
    pub sent: u64,
    pub answered: u64,
    pub failures: u64,
    /// Answered requests per second over the spike's own windows.
    pub achieved_qps: f64,
    /// Unanswered over sent, from the jump to recovery (0 when nothing was sent).
    pub error_rate: f64,
    /// p50, p99 and max of the requests answered during the spike's own windows.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// None while the spike or its recovery still runs.
    pub recovered: Option<bool>,
    /// From the return to the end of the first window back within the target (an upper bound,
    /// to within one check interval).
    pub time_to_recover_s: Option<f64>,
}

/// A spike phase of one group.
#[derive(Debug, Clone)]
pub struct Spike {
    config: SpikeConfig,
    stage: SpikeStage,
    baseline: Option<Window>,
    /// The time the current stage was asked for.
    since_ms: Option<i64>,
    spike_end_ms: Option<i64>,
    during: LatencyHistogram,
    spike_answered: u64,
    sent: u64,
    answered: u64,
    failures: u64,
    spike_ms: i64,
    recovered_at_ms: Option<i64>,
    pub checks: Vec<SpikeCheck>,
    pub ending: Option<Ending>,
}

impl Spike {
    pub fn new(config: SpikeConfig) -> Self {
        Spike {
            config,
            stage: SpikeStage::Baseline,
            baseline: None,
            since_ms: None,
            spike_end_ms: None,
            during: LatencyHistogram::new(),
            spike_answered: 0,
            sent: 0,
            answered: 0,
            failures: 0,
            spike_ms: 0,
            recovered_at_ms: None,
            checks: Vec::new(),
            ending: None,
        }
    }

    pub fn ended(&self) -> bool {
        self.ending.is_some()
    }

    pub fn target_p99_ms(&self) -> f64 {
        self.config.target_p99_us as f64 / 1000.0
    }

    /// The load for the current stage. The spike's backlog outlives it: its recovery still
    /// counts unanswered requests (they are what it waits out) instead of failing the run.
    pub fn load(&self) -> GroupLoad {
        let from = self.config.from_concurrency;
        match self.stage {
            _ if self.ended() => GroupLoad::closed(from),
            SpikeStage::Baseline => GroupLoad::closed(from),
            SpikeStage::Spiking => GroupLoad {
                concurrency: from,
                rate: Some(self.config.target_rps),
                count_unanswered: true,
            },
            SpikeStage::Recovering => GroupLoad {
                count_unanswered: true,
                ..GroupLoad::closed(from)
            },
        }
    }

    /// When the stage changes without waiting for a window: the end of the spike.
    pub fn next_change_ms(&self) -> Option<i64> {
        match (self.stage, self.since_ms) {
            (SpikeStage::Spiking, Some(since)) => Some(since + self.config.duration_ms),
            _ => None,
        }
    }

    /// A window within the target: enough answers, none missing, p99 within the band.
    fn good(&self, w: &Window) -> bool {
        let limit = self.config.target_p99_us as f64 * (1.0 + self.config.tolerance);
        w.requests >= MIN_SAMPLES && w.sent <= w.requests && (w.p99_us as f64) <= limit
    }

    /// Feeds the window that ended at `now_ms`; returns the load from now on.
    pub fn check(&mut self, window: Window, now_ms: i64) -> GroupLoad {
        if self.ended() {
            return self.load();
        }
        let stage = self.stage;
        match stage {
            SpikeStage::Baseline => {
                // The phase's first window holds the previous phase's end; the next with
                // enough samples (or the third, whatever it holds) is the baseline.
                let waited = self.checks.len();
                if waited >= 1 && (window.requests >= MIN_SAMPLES || waited >= 2) {
                    self.baseline = Some(window.clone());
                    self.stage = SpikeStage::Spiking;
                    self.since_ms = Some(now_ms);
                }
            }
            SpikeStage::Spiking => {
                self.during.merge(&window.latency);
                self.spike_answered += window.requests;
                self.spike_ms += window.end_ms - window.start_ms;
                self.count(&window);
                if self.next_change_ms().is_some_and(|end| now_ms >= end) {
                    self.stage = SpikeStage::Recovering;
                    self.since_ms = Some(now_ms);
                    self.spike_end_ms = Some(now_ms);
                }
            }
            SpikeStage::Recovering => {
                // The spike's requests finish (or time out) after it: its error rate counts
                // them until the first good window.
                self.count(&window);
                let since = self.since_ms.unwrap_or(now_ms);
                if self.good(&window) {
                    self.recovered_at_ms = Some(window.end_ms);
                    self.ending = Some(Ending::Recovered);
                } else if now_ms - since >= self.config.recovery_timeout_ms {
                    self.ending = Some(Ending::NotRecovered);
                }
            }
        }
        self.checks.push(SpikeCheck { stage, window });
        self.load()
    }

    fn count(&mut self, w: &Window) {
        self.sent += w.sent;
        self.answered += w.requests;
        self.failures += w.failures;
    }

    /// The run ended first.
    pub fn out_of_time(&mut self) {
        if self.ending.is_none() {
            self.ending = Some(Ending::OutOfTime);
        }
    }

    pub fn result(&self) -> SpikeResult {
        let c = &self.config;
        let ms = |us: u64| us as f64 / 1000.0;
        let measured = self.during.count() > 0;
        SpikeResult {
            target_rps: c.target_rps,
            from_concurrency: c.from_concurrency,
            baseline_qps: self.baseline.as_ref().map(|w| w.qps),
            baseline_p99_ms: self.baseline.as_ref().map(|w| ms(w.p99_us)),
            start_ms: self.spike_end_ms.map(|end| end - c.duration_ms).or(
                // Still spiking: since the jump.
                (self.stage == SpikeStage::Spiking)
                    .then_some(self.since_ms)
                    .flatten(),
            ),
            end_ms: self.spike_end_ms,
            sent: self.sent,
            answered: self.answered,
            failures: self.failures,
            achieved_qps: if self.spike_ms > 0 {
                self.spike_answered as f64 * 1000.0 / self.spike_ms as f64
            } else {
                0.0
            },
            error_rate: if self.sent > 0 {
                self.sent.saturating_sub(self.answered) as f64 / self.sent as f64
            } else {
                0.0
            },
            p50_ms: if measured {
                ms(self.during.percentile_us(50.0))
            } else {
                0.0
            },
            p99_ms: if measured {
                ms(self.during.percentile_us(99.0))
            } else {
                0.0
            },
            max_ms: if measured {
                ms(self.during.max_us())
            } else {
                0.0
            },
            recovered: match self.ending {
                Some(Ending::Recovered) => Some(true),
                Some(_) => Some(false),
                None => None,
            },
            time_to_recover_s: self
                .recovered_at_ms
                .zip(self.spike_end_ms)
                .map(|(at, end)| (at - end).max(0) as f64 / 1000.0),
        }
    }

    /// The phase's row in the capacity results: the load it jumped from, what got through
    /// during the spike and its p99 (a spike has no safe rate of its own).
    pub fn phase_result(&self) -> PhaseResult {
        let r = self.result();
        PhaseResult {
            ending: self.ending,
            concurrency: Some(self.config.from_concurrency),
            windows: self
                .checks
                .iter()
                .filter(|c| c.stage == SpikeStage::Spiking)
                .count() as u32,
            max_qps: r.achieved_qps,
            p99_ms: r.p99_ms,
            safe_rate_qps: 0.0,
            window_start_ms: r.start_ms,
            window_end_ms: r.end_ms,
            models: Vec::new(),
        }
    }
}

/// The closed-loop concurrency a spike jumps from: the production phase's answer, else the
/// latest phase's with an answer, else `min` (no earlier phase found one).
pub fn jump_from(earlier: &[(CapacityPhase, Option<u32>)], min: u32) -> u32 {
    earlier
        .iter()
        .rev()
        .find(|(p, c)| *p == CapacityPhase::Production && c.is_some())
        .or_else(|| earlier.iter().rev().find(|(_, c)| c.is_some()))
        .and_then(|(_, c)| *c)
        .unwrap_or(min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config() -> SpikeConfig {
        SpikeConfig {
            target_rps: 400.0,
            duration_ms: 10_000,
            recovery_timeout_ms: 30_000,
            target_p99_us: 100_000,
            tolerance: 0.05,
            from_concurrency: 4,
        }
    }

    /// A window from `start` to `end` seconds: `sent` requests of which `answered` took
    /// `latency_ms` each.
    fn window(start: i64, end: i64, sent: u64, answered: u64, latency_ms: u64) -> Window {
        let mut latency = LatencyHistogram::new();
        for _ in 0..answered {
            latency.record(Duration::from_millis(latency_ms));
        }
        Window {
            start_ms: start * 1000,
            end_ms: end * 1000,
            requests: answered,
            sent,
            failures: 0,
            qps: answered as f64 / (end - start) as f64,
            p50_us: latency.percentile_us(50.0),
            p99_us: latency.percentile_us(99.0),
            models: vec![],
            latency,
        }
    }

    #[test]
    fn jumps_after_a_baseline_measures_the_spike_and_the_recovery() {
        let mut s = Spike::new(config());
        let closed = GroupLoad::closed(4);
        assert_eq!(s.load(), closed);
        assert_eq!(s.check(window(0, 3, 90, 90, 80), 3000), closed, "settling");
        let open = GroupLoad {
            concurrency: 4,
            rate: Some(400.0),
            count_unanswered: true,
        };
        let recovering = GroupLoad {
            count_unanswered: true,
            ..closed
        };
        assert_eq!(
            s.check(window(3, 6, 120, 120, 90), 6000),
            open,
            "baseline taken"
        );
        assert_eq!(s.next_change_ms(), Some(16_000));
        // 3 s at 400/s offered: 1200 sent, 1100 answered slowly, 100 timed out.
        assert_eq!(s.check(window(6, 9, 1200, 1100, 900), 9000), open);
        assert_eq!(s.check(window(9, 12, 1200, 1200, 1500), 12_000), open);
        assert_eq!(
            s.check(window(12, 16, 1600, 1600, 2000), 16_000),
            recovering,
            "the spike ended; its backlog is still counted"
        );
        assert_eq!(s.next_change_ms(), None);
        // Draining the queue: still slow; then back under the target.
        assert_eq!(s.check(window(16, 19, 100, 100, 700), 19_000), recovering);
        assert!(!s.ended());
        s.check(window(19, 22, 120, 120, 95), 22_000);
        assert_eq!(s.ending, Some(Ending::Recovered));
        let r = s.result();
        assert_eq!(
            (r.sent, r.answered),
            (4000 + 100 + 120, 3900 + 100 + 120),
            "the spike's windows and the recovery's"
        );
        assert!(
            (r.error_rate - 100.0 / 4220.0).abs() < 1e-9,
            "{}",
            r.error_rate
        );
        assert!((r.achieved_qps - 3900.0 / 10.0).abs() < 1e-9);
        assert!(
            (r.p99_ms - 2000.0).abs() < 2.0,
            "exact merged p99: {}",
            r.p99_ms
        );
        assert_eq!(r.baseline_p99_ms.map(f64::round), Some(90.0));
        assert_eq!((r.start_ms, r.end_ms), (Some(6000), Some(16_000)));
        assert_eq!(
            r.time_to_recover_s,
            Some(6.0),
            "to the end of the good window"
        );
        assert_eq!(r.recovered, Some(true));
        assert_eq!(
            s.check(window(22, 25, 1, 1, 1), 25_000),
            closed,
            "nothing after the end"
        );
        assert_eq!(s.checks.len(), 7);
        let p = s.phase_result();
        assert_eq!((p.concurrency, p.safe_rate_qps), (Some(4), 0.0));
    }

    #[test]
    fn a_window_with_unanswered_requests_or_over_the_target_is_not_recovered() {
        let mut s = Spike::new(SpikeConfig {
            duration_ms: 3000,
            recovery_timeout_ms: 6000,
            ..config()
        });
        s.check(window(0, 3, 90, 90, 80), 3000);
        s.check(window(3, 6, 90, 90, 80), 6000);
        s.check(window(6, 9, 1200, 1200, 500), 9000);
        assert!(s.load().rate.is_none(), "spike over");
        s.check(window(9, 12, 100, 99, 80), 12_000);
        assert!(!s.ended(), "one request unanswered");
        s.check(window(12, 15, 100, 100, 106), 15_000);
        assert_eq!(s.ending, Some(Ending::NotRecovered), "106 ms > 100 ms + 5%");
        let r = s.result();
        assert_eq!((r.recovered, r.time_to_recover_s), (Some(false), None));
    }

    #[test]
    fn a_thin_baseline_is_waited_for_once_then_taken() {
        let mut s = Spike::new(config());
        s.check(window(0, 3, 5, 5, 80), 3000);
        s.check(window(3, 6, 5, 5, 80), 6000);
        assert!(s.load().rate.is_none(), "too few samples: one more window");
        s.check(window(6, 9, 5, 5, 80), 9000);
        assert_eq!(s.load().rate, Some(400.0));
        let mut cut = Spike::new(config());
        cut.out_of_time();
        assert_eq!(cut.result().recovered, Some(false));
        assert_eq!(
            cut.result().error_rate,
            0.0,
            "nothing sent: no division by zero"
        );
    }

    #[test]
    fn jumps_from_production_else_the_latest_answer() {
        use CapacityPhase::*;
        assert_eq!(jump_from(&[], 2), 2);
        assert_eq!(
            jump_from(&[(Individual, Some(3)), (Exploration, None)], 2),
            3
        );
        assert_eq!(
            jump_from(&[(Production, Some(5)), (Exploration, Some(9))], 2),
            5
        );
        assert_eq!(
            jump_from(&[(Production, None), (Individual, Some(7))], 2),
            7
        );
    }
}
