//! The outages one worker sees, per target server: stretches without a good answer from it
//! ([`Outage`]), for the driver to match against the faults it injects (when did each client get
//! a good answer again after a kill, a restart or a pause).
//!
//! [`OutageTracker`] is pure: the streams tell it every test's end on a server ([`ok`] for a
//! passed one, [`failed`] for a failed one, with the time), the status loop [`take`]s what
//! ended into each snapshot, and the final snapshot [`finish`]es it. It reads no clock.
//!
//! A stretch between two passed tests on a server is an outage when
//! - tests failed on that server in between (a killed or restarting server refuses, resets or
//!   times out), or
//! - it lasted longer than the server's stall threshold (a paused server makes no error, only
//!   silence): `max(`[`STALL_FLOOR_MS`]`, `[`STALL_FACTOR`]` × the typical gap)`, where the
//!   typical gap is an exponentially weighted average of the gaps between passed tests there,
//!   each gap weighted by its length ([`GAP_MEMORY_MS`]): `Σ w·g² / Σ w·g`, the gap a random
//!   moment of the recent past sat in. Weighted so, the near-zero gaps between concurrent
//!   streams' answers do not hide a slow model's pace: 8 streams answered together every 3 s
//!   (gaps 0, 0, …, 3000) have a plain mean gap of 375 ms, below their own pace, and a typical
//!   gap of 3 s here. A healthy slow model thus makes no outage; a server silent for 4 times
//!   its pace (and at least a second) does.
//!
//! The stall rule waits until the gaps it learnt from cover [`STALL_FLOOR_MS`] (before that it
//! knows no pace); failed tests count from the start. Gaps that held failed tests are not
//! learnt from (they say nothing of a healthy server's pace), and a stall is learnt capped at the
//! threshold, so one long pause does not blind the rule to the next, while a server that became
//! slower for good is learnt within a few outages (from 10 ms to 3 s a test: 7, over 30 s).
//!
//! Memory is bounded: at most [`MAX_PENDING`] ended outages wait for a snapshot; beyond, the
//! oldest are dropped, counted and logged.
//!
//! [`ok`]: OutageTracker::ok
//! [`failed`]: OutageTracker::failed
//! [`take`]: OutageTracker::take
//! [`finish`]: OutageTracker::finish

use std::collections::{BTreeMap, VecDeque};
use stress_common::status::Outage;

/// The least stall threshold, ms: silence shorter than this is never an outage.
pub const STALL_FLOOR_MS: i64 = 1_000;

/// The stall threshold is this many typical gaps between passed tests on the server.
pub const STALL_FACTOR: f64 = 4.0;

/// How long the typical gap remembers, ms: a gap's weight falls by a factor e every this much
/// later time (a server's pace an hour ago says nothing of its pace now).
pub const GAP_MEMORY_MS: f64 = 60_000.0;

/// Ended outages kept until a snapshot takes them; beyond, the oldest are dropped.
pub const MAX_PENDING: usize = 256;

/// What failed on a server since its last passed test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failures {
    first_ms: i64,
    tests: u64,
    sequences: u64,
}

/// One target server as the tracker sees it.
#[derive(Debug, Clone)]
struct Server {
    /// The end of the last passed test there (the tracker's start before one).
    last_ok_ms: i64,
    /// Whether a test passed there yet.
    passed: bool,
    /// The learnt gaps' Σ w·g² and Σ w·g (ms², ms), decayed to `learnt_at_ms`.
    sum_sq: f64,
    sum: f64,
    /// When the sums were last decayed.
    learnt_at_ms: i64,
    /// The time the learnt gaps cover, undecayed: the stall rule applies from
    /// [`STALL_FLOOR_MS`].
    watched_ms: i64,
    /// Failed tests since the last passed one.
    failures: Option<Failures>,
}

impl Server {
    fn new(started_ms: i64) -> Self {
        Server {
            last_ok_ms: started_ms,
            passed: false,
            sum_sq: 0.0,
            sum: 0.0,
            learnt_at_ms: started_ms,
            watched_ms: 0,
            failures: None,
        }
    }

    /// The typical gap between passed tests, ms (0 before one is learnt).
    fn typical_gap_ms(&self) -> f64 {
        if self.sum > 0.0 {
            self.sum_sq / self.sum
        } else {
            0.0
        }
    }

    /// None while the learnt gaps cover less than [`STALL_FLOOR_MS`].
    fn stall_threshold_ms(&self) -> Option<i64> {
        (self.watched_ms >= STALL_FLOOR_MS)
            .then(|| STALL_FLOOR_MS.max((STALL_FACTOR * self.typical_gap_ms()).round() as i64))
    }

    fn learn(&mut self, gap_ms: i64, at_ms: i64) {
        let elapsed = at_ms.saturating_sub(self.learnt_at_ms).max(0) as f64;
        let decay = (-elapsed / GAP_MEMORY_MS).exp();
        let gap = gap_ms.max(0) as f64;
        self.sum_sq = self.sum_sq * decay + gap * gap;
        self.sum = self.sum * decay + gap;
        self.learnt_at_ms = self.learnt_at_ms.max(at_ms);
        self.watched_ms = self.watched_ms.saturating_add(gap_ms.max(0));
    }

    /// The outage open on this server, ending at `first_ok_ms` (None: not ended).
    fn outage(&self, server: &str, failures: Option<Failures>, first_ok_ms: Option<i64>) -> Outage {
        Outage {
            server: server.to_string(),
            last_ok_ms: self.last_ok_ms,
            first_failure_ms: failures.map(|f| f.first_ms),
            first_ok_ms,
            failed_tests: failures.map_or(0, |f| f.tests),
            failed_sequences: failures.map_or(0, |f| f.sequences),
        }
    }
}

/// One worker's outages per target server (see the module). Times are ms since the Unix epoch,
/// as the caller read them; a time earlier than the server's last passed test (two streams
/// reporting in the other order) counts as that test's time.
#[derive(Debug, Clone)]
pub struct OutageTracker {
    started_ms: i64,
    servers: BTreeMap<String, Server>,
    /// Ended outages, oldest first, until a snapshot takes them.
    pending: VecDeque<Outage>,
    dropped: u64,
}

impl OutageTracker {
    /// A tracker for a worker whose tests start at `started_ms` (an outage before a server's
    /// first passed test dates from it).
    pub fn new(started_ms: i64) -> Self {
        OutageTracker {
            started_ms,
            servers: BTreeMap::new(),
            pending: VecDeque::new(),
            dropped: 0,
        }
    }

    fn server(&mut self, server: &str) -> &mut Server {
        if !self.servers.contains_key(server) {
            self.servers
                .insert(server.to_string(), Server::new(self.started_ms));
        }
        self.servers.get_mut(server).expect("inserted above")
    }

    /// A test on `server` passed, ending at `at_ms`: ends the outage open there, if tests
    /// failed since the last passed one or the gap outlasted the stall threshold.
    pub fn ok(&mut self, server: &str, at_ms: i64) {
        let s = self.server(server);
        let at_ms = at_ms.max(s.last_ok_ms);
        let gap = at_ms - s.last_ok_ms;
        let threshold = s.stall_threshold_ms();
        let stalled = threshold.is_some_and(|t| gap > t);
        let failures = s.failures.take();
        let outage =
            (failures.is_some() || stalled).then(|| s.outage(server, failures, Some(at_ms)));
        if !s.passed {
            s.learnt_at_ms = at_ms;
        } else if failures.is_none() {
            s.learn(threshold.map_or(gap, |t| gap.min(t)), at_ms);
        }
        s.passed = true;
        s.last_ok_ms = at_ms;
        if let Some(outage) = outage {
            self.push(outage);
        }
    }

    /// A test on `server` failed at `at_ms`; `sequence`: a test of a sequence scenario.
    pub fn failed(&mut self, server: &str, at_ms: i64, sequence: bool) {
        let s = self.server(server);
        let at_ms = at_ms.max(s.last_ok_ms);
        let f = s.failures.get_or_insert(Failures {
            first_ms: at_ms,
            tests: 0,
            sequences: 0,
        });
        f.first_ms = f.first_ms.min(at_ms);
        f.tests += 1;
        f.sequences += u64::from(sequence);
    }

    /// The outages that ended since the last call, oldest first.
    pub fn take(&mut self) -> Vec<Outage> {
        self.pending.drain(..).collect()
    }

    /// At the worker's end (its last call): the outages that ended since the last
    /// [`take`](Self::take), then each server's that is still open (`first_ok_ms: None`): tests
    /// failed since its last passed one, or it was silent past its stall threshold when the
    /// worker stopped starting tests (`stopped_ms`).
    pub fn finish(&mut self, stopped_ms: i64) -> Vec<Outage> {
        let mut open = Vec::new();
        for (name, s) in &mut self.servers {
            let failures = s.failures.take();
            let silent = s
                .stall_threshold_ms()
                .is_some_and(|t| stopped_ms.saturating_sub(s.last_ok_ms) > t);
            if failures.is_some() || silent {
                open.push(s.outage(name, failures, None));
            }
        }
        for outage in open {
            self.push(outage);
        }
        if self.dropped > 0 {
            tracing::warn!(
                dropped = self.dropped,
                "{} outage(s) were dropped over the run: more than {MAX_PENDING} ended between \
                 two snapshots",
                self.dropped
            );
        }
        self.take()
    }

    /// Outages dropped so far to stay within [`MAX_PENDING`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// `server`'s stall threshold now, ms (None: not learnt yet, or an unknown server).
    pub fn stall_threshold_ms(&self, server: &str) -> Option<i64> {
        self.servers.get(server)?.stall_threshold_ms()
    }

    fn push(&mut self, outage: Outage) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
            // 1, 2, 4, 8, …: a flapping server does not flood the log.
            if self.dropped.is_power_of_two() {
                tracing::warn!(
                    dropped = self.dropped,
                    "more than {MAX_PENDING} outages ended between two snapshots: the oldest \
                     are dropped ({} so far)",
                    self.dropped
                );
            }
        }
        self.pending.push_back(outage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;
    const A: &str = "10.0.0.1:8001";
    const B: &str = "10.0.0.2:8001";

    /// Passes on `server` every `every_ms` from `from_ms` (exclusive) to `to_ms` (inclusive),
    /// `together` at a time (streams answered at the same moment).
    fn passes(t: &mut OutageTracker, server: &str, from_ms: i64, to_ms: i64, every_ms: i64) {
        passes_together(t, server, from_ms, to_ms, every_ms, 1);
    }

    fn passes_together(
        t: &mut OutageTracker,
        server: &str,
        from_ms: i64,
        to_ms: i64,
        every_ms: i64,
        together: usize,
    ) {
        let mut at = from_ms + every_ms;
        while at <= to_ms {
            for _ in 0..together {
                t.ok(server, at);
            }
            at += every_ms;
        }
    }

    #[test]
    fn a_healthy_server_has_no_outage() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 60_000, 10);
        assert!(t.take().is_empty());
        // Fast: the floor holds. A 900 ms hiccup is no outage.
        assert_eq!(t.stall_threshold_ms(A), Some(STALL_FLOOR_MS));
        t.ok(A, T0 + 60_900);
        assert!(t.finish(T0 + 61_500).is_empty());
    }

    #[test]
    fn failed_tests_make_an_outage_until_the_next_pass() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 5_000, 10);
        t.failed(A, T0 + 5_003, true);
        t.failed(A, T0 + 5_004, false);
        t.failed(A, T0 + 7_000, true);
        assert!(t.take().is_empty(), "open until a test passes");
        t.ok(A, T0 + 9_000);
        t.ok(A, T0 + 9_010);
        assert_eq!(
            t.take(),
            [Outage {
                server: A.into(),
                last_ok_ms: T0 + 5_000,
                first_failure_ms: Some(T0 + 5_003),
                first_ok_ms: Some(T0 + 9_000),
                failed_tests: 3,
                failed_sequences: 2,
            }]
        );
        assert!(t.take().is_empty(), "taken once");
        // One failed test between two quick passes is an outage too (the driver judges).
        t.failed(A, T0 + 9_011, false);
        t.ok(A, T0 + 9_012);
        let blip = t.take();
        assert_eq!(blip.len(), 1);
        assert_eq!(
            (blip[0].last_ok_ms, blip[0].first_ok_ms),
            (T0 + 9_010, Some(T0 + 9_012))
        );
    }

    #[test]
    fn failures_before_any_pass_date_from_the_start() {
        let mut t = OutageTracker::new(T0);
        t.failed(A, T0 + 50, false);
        t.ok(A, T0 + 400);
        assert_eq!(
            t.take(),
            [Outage {
                server: A.into(),
                last_ok_ms: T0,
                first_failure_ms: Some(T0 + 50),
                first_ok_ms: Some(T0 + 400),
                failed_tests: 1,
                failed_sequences: 0,
            }]
        );
    }

    #[test]
    fn a_paused_server_is_seen_by_its_silence() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 10_000, 50);
        // SIGSTOP for 5 s: nothing fails, nothing answers.
        t.ok(A, T0 + 15_020);
        assert_eq!(
            t.take(),
            [Outage {
                server: A.into(),
                last_ok_ms: T0 + 10_000,
                first_failure_ms: None,
                first_ok_ms: Some(T0 + 15_020),
                failed_tests: 0,
                failed_sequences: 0,
            }]
        );
        // The pause taught little: the next one, soon after, is seen too.
        passes(&mut t, A, T0 + 15_020, T0 + 20_000, 50);
        assert!(t.take().is_empty());
        assert_eq!(t.stall_threshold_ms(A), Some(STALL_FLOOR_MS));
        t.ok(A, T0 + 23_000);
        assert_eq!(t.take().len(), 1);
    }

    #[test]
    fn a_healthy_slow_model_makes_no_outage_and_a_pause_still_shows() {
        // One stream, 3 s per test.
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 600_000, 3_000);
        assert!(t.take().is_empty());
        assert_eq!(t.stall_threshold_ms(A), Some(12_000));
        // Eight streams answered together every 3 s (a batched model): the gaps 0, …, 0, 3000
        // average 375 ms, yet the pace is 3 s.
        passes_together(&mut t, B, T0, T0 + 600_000, 3_000, 8);
        assert!(t.take().is_empty());
        assert_eq!(t.stall_threshold_ms(B), Some(12_000));
        // Paused 30 s: past 4 × 3 s.
        t.ok(A, T0 + 630_000);
        let out = t.take();
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].last_ok_ms, out[0].first_ok_ms),
            (T0 + 600_000, Some(T0 + 630_000))
        );
    }

    #[test]
    fn a_mix_with_a_long_test_now_and_then_makes_no_outage() {
        // One stream: 10 ms tests, and every 20th a 6 s one (a perf_analyzer run).
        let mut t = OutageTracker::new(T0);
        let mut at = T0;
        for i in 1..=2_000 {
            at += if i % 20 == 0 { 6_000 } else { 10 };
            t.ok(A, at);
        }
        assert!(t.take().is_empty(), "{:?}", t.stall_threshold_ms(A));
    }

    #[test]
    fn a_server_that_turns_slow_for_good_is_learnt() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 10_000, 10);
        // From now on 3 s per test (the driver took the concurrency down to 1).
        passes(&mut t, A, T0 + 10_000, T0 + 600_000, 3_000);
        // A few outages while it learns the new pace (7, the last ending 31 s in), then none.
        let out = t.take();
        let last = out.last().and_then(|o| o.first_ok_ms).unwrap_or(T0);
        assert!(
            out.len() <= 10 && last - T0 <= 60_000,
            "{} outages, the last ending {} ms in",
            out.len(),
            last - T0
        );
        assert_eq!(t.stall_threshold_ms(A), Some(12_000));
    }

    #[test]
    fn silence_counts_only_once_the_pace_is_learnt() {
        let mut t = OutageTracker::new(T0);
        // The first answer, 3 s in (a model's first inference): no pace known, no outage.
        t.ok(A, T0 + 3_000);
        // Nor for the first gaps until they cover a second.
        t.ok(A, T0 + 5_500);
        assert!(t.take().is_empty());
        assert_eq!(t.stall_threshold_ms(A), Some(10_000));
        assert_eq!(t.stall_threshold_ms(B), None, "an unknown server");
        t.ok(B, T0 + 100);
        t.ok(B, T0 + 600);
        assert_eq!(t.stall_threshold_ms(B), None, "500 ms learnt");
    }

    #[test]
    fn servers_are_tracked_apart() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 5_000, 10);
        passes(&mut t, B, T0, T0 + 5_000, 10);
        t.failed(A, T0 + 5_001, false);
        t.ok(B, T0 + 5_010);
        assert!(t.take().is_empty(), "B answering ends nothing on A");
        t.ok(A, T0 + 5_020);
        let out = t.take();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].server, A);
    }

    #[test]
    fn the_end_flushes_what_is_still_open() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 10_000, 10);
        passes(&mut t, B, T0, T0 + 10_000, 10);
        // A ended a 2 s pause that a snapshot has not taken yet; B is killed and failing.
        t.ok(A, T0 + 12_000);
        t.failed(B, T0 + 12_500, true);
        // A then goes silent 3 s before the stop.
        let end = t.finish(T0 + 15_001);
        assert_eq!(
            end,
            [
                Outage {
                    server: A.into(),
                    last_ok_ms: T0 + 10_000,
                    first_failure_ms: None,
                    first_ok_ms: Some(T0 + 12_000),
                    failed_tests: 0,
                    failed_sequences: 0,
                },
                Outage {
                    server: A.into(),
                    last_ok_ms: T0 + 12_000,
                    first_failure_ms: None,
                    first_ok_ms: None,
                    failed_tests: 0,
                    failed_sequences: 0,
                },
                Outage {
                    server: B.into(),
                    last_ok_ms: T0 + 10_000,
                    first_failure_ms: Some(T0 + 12_500),
                    first_ok_ms: None,
                    failed_tests: 1,
                    failed_sequences: 1,
                },
            ]
        );
    }

    #[test]
    fn the_end_flushes_no_silence_within_the_threshold() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 10_000, 10);
        // Silent only 0.8 s when the worker stopped; a test in flight passed in the drain.
        assert!(t.finish(T0 + 10_800).is_empty());
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 10_000, 10);
        t.ok(A, T0 + 14_000);
        let end = t.finish(T0 + 13_000);
        assert_eq!(end.len(), 1, "the stall ended in the drain: {end:?}");
        assert_eq!(end[0].first_ok_ms, Some(T0 + 14_000));
    }

    #[test]
    fn times_reported_out_of_order_stay_in_order() {
        let mut t = OutageTracker::new(T0);
        passes(&mut t, A, T0, T0 + 5_000, 10);
        // A stream reports a pass that ended before the last one, then a failure that did.
        t.ok(A, T0 + 4_990);
        t.failed(A, T0 + 4_995, false);
        t.ok(A, T0 + 5_010);
        let out = t.take();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].last_ok_ms, T0 + 5_000);
        assert_eq!(out[0].first_failure_ms, Some(T0 + 5_000));
        assert_eq!(out[0].first_ok_ms, Some(T0 + 5_010));
    }

    #[test]
    fn pending_outages_are_bounded_oldest_dropped_first() {
        let mut t = OutageTracker::new(T0);
        let extra = 44;
        for i in 0..(MAX_PENDING as i64 + extra) {
            t.failed(A, T0 + 2 * i, false);
            t.ok(A, T0 + 2 * i + 1);
        }
        assert_eq!(t.dropped(), extra as u64);
        let out = t.take();
        assert_eq!(out.len(), MAX_PENDING);
        assert_eq!(out[0].first_failure_ms, Some(T0 + 2 * extra));
        assert_eq!(
            out.last().unwrap().first_ok_ms,
            Some(T0 + 2 * (MAX_PENDING as i64 + extra) - 1)
        );
        // Taking makes room again.
        t.failed(A, T0 + 10_000, false);
        t.ok(A, T0 + 10_001);
        assert_eq!(t.take().len(), 1);
        assert_eq!(t.dropped(), extra as u64);
    }
}
