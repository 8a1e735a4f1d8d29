//! When a stream's load windows send. A stream's consecutive open-loop windows at one load are
//! one schedule: each goes on from where the last one's schedule stopped, at its end, and takes
//! over its requests in flight ([`super::answers`]), so that a server past its capacity is
//! offered the load asked for, window after window, with no pause for the last answers (which
//! would offer about its answer rate instead, with nothing in the report to say so: coordinated
//! omission at the windows' edges). Sends the next window's start finds already due (its test
//! began a moment after the schedule's stop) leave at once, their lateness counted and their
//! latencies counted from their intended times.
//!
//! A worker's streams each run their own schedule; at a constant rate, schedules started
//! together would send together, in bursts of as many requests as there are streams. Each
//! stream's fresh schedule is offset by its share of one gap, so that together they send at
//! even gaps, as one schedule at the sum of their rates would.

use super::{LoadMode, WindowLoad};
use std::time::{Duration, Instant};

/// When a load window's schedule starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpan {
    pub start: Instant,
    pub end: Instant,
}

/// One stream's open-loop schedule between its tests (see the module's comment).
#[derive(Debug, Default)]
pub struct StreamSchedule {
    /// This stream's offset into a constant-rate gap: its index over the worker's streams.
    phase: f64,
    /// Where the stream's previous test, an open-loop window that passed, stopped its
    /// schedule, and at which load.
    resume: Option<(LoadMode, Instant)>,
    /// The load of this test's open-loop window, until it says where it stopped.
    pending: Option<LoadMode>,
    /// The same as `resume`, set by this test's window.
    next: Option<(LoadMode, Instant)>,
}

impl StreamSchedule {
    /// The schedule of stream `index` of `streams`.
    pub fn for_stream(index: usize, streams: usize) -> Self {
        Self {
            phase: index as f64 / streams.max(1) as f64,
            ..Self::default()
        }
    }

    /// The span of a window of `length` at `mode` that begins `now`: from where the previous
    /// window's schedule stopped (a moment before now, or later where its next send was due
    /// after its end) if the stream's previous test was an open-loop window at the same load
    /// that passed ([`Self::continues`]), else from `now`. A closed loop always starts now: its senders
    /// wait for answers by design. Nor is a capacity spike's window (`overload`) continued:
    /// its open loop runs on until the driver changes the rate, not for its span.
    pub fn window(&mut self, load: &WindowLoad, length: Duration, now: Instant) -> WindowSpan {
        let mode = &load.mode;
        let continues = self.continues(load);
        let resumed = self
            .resume
            .take()
            .filter(|_| continues)
            .map(|(_, stopped)| stopped);
        let start = resumed.unwrap_or_else(|| now + self.offset(mode));
        self.pending = Self::open(load).then(|| mode.clone());
        self.next = None;
        WindowSpan {
            start,
            end: start + length,
        }
    }

    /// Whether a window at `load` would go on from the stream's previous one ([`Self::window`]).
    pub fn continues(&self, load: &WindowLoad) -> bool {
        Self::open(load)
            && self
                .resume
                .as_ref()
                .is_some_and(|(mode, _)| *mode == load.mode)
    }

    /// Whether a window at `load` is an open loop that may go on from, or into, another.
    fn open(load: &WindowLoad) -> bool {
        !load.mode.is_closed_loop() && !load.overload
    }

    /// Where this test's open-loop window stopped its schedule: the intended time of its first
    /// send not made (None: it did not stop at its end).
    pub fn stopped(&mut self, at: Option<Instant>) {
        self.next = self.pending.take().zip(at);
    }

    /// Where a fresh schedule at `mode` starts after now: the stream's share of a gap at a
    /// constant rate; none where the gaps are random or a file's (they do not line up).
    fn offset(&self, mode: &LoadMode) -> Duration {
        match mode {
            LoadMode::Rate(rate) => Duration::from_secs_f64(self.phase / rate),
            _ => Duration::ZERO,
        }
    }

    /// Called by the stream after each test: the next window goes on from this test's only
    /// when this test was an open-loop window that `passed`. After a failure, the stream's
    /// pause before its next test is not the schedule's.
    pub fn test_ended(&mut self, passed: bool) {
        self.pending = None;
        self.resume = self.next.take().filter(|_| passed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn load(mode: &LoadMode) -> WindowLoad {
        WindowLoad {
            mode: mode.clone(),
            overload: false,
        }
    }

    fn at(t0: Instant, seconds: f64) -> Instant {
        t0 + Duration::from_secs_f64(seconds)
    }

    /// A window at `mode` beginning `begins` seconds after `t0`, whose schedule stopped at
    /// `stops` seconds after `t0`, and that passed.
    fn window(s: &mut StreamSchedule, mode: &LoadMode, t0: Instant, begins: f64, stops: f64) {
        s.window(&load(mode), SECOND, at(t0, begins));
        s.stopped(Some(at(t0, stops)));
        s.test_ended(true);
    }

    #[test]
    fn consecutive_open_loop_windows_at_one_load_are_one_schedule() {
        let t0 = Instant::now();
        for mode in [LoadMode::Rate(100.0), LoadMode::Poisson(50.0)] {
            let mut s = StreamSchedule::default();
            let first = s.window(&load(&mode), SECOND, t0);
            assert_eq!((first.start, first.end), (t0, at(t0, 1.0)), "{mode:?}");
            // It stopped at 1.0 s, its first send not made; the next window begins at 1.01 s
            // (its test's start) and goes on from 1.0 s: its first send leaves at once.
            s.stopped(Some(at(t0, 1.0)));
            s.test_ended(true);
            let second = s.window(&load(&mode), SECOND, at(t0, 1.01));
            assert_eq!((second.start, second.end), (at(t0, 1.0), at(t0, 2.0)));
            s.stopped(Some(at(t0, 2.0)));
            s.test_ended(true);
            let third = s.window(&load(&mode), SECOND, at(t0, 2.01));
            assert_eq!(third.start, at(t0, 2.0), "{mode:?}");
        }
    }

    /// What happens on a stream between two windows.
    type Between<'a> = dyn Fn(&mut StreamSchedule) + 'a;

    #[test]
    fn a_window_starts_now_after_anything_but_a_passed_window_at_the_same_open_load() {
        let t0 = Instant::now();
        let now = at(t0, 5.0);
        let rate = LoadMode::Rate(100.0);
        let cases: [(&str, &Between<'_>); 6] = [
            ("a failed window", &|s| {
                s.window(&load(&rate), SECOND, t0);
                s.stopped(Some(at(t0, 1.0)));
                s.test_ended(false);
            }),
            ("a window that did not stop at its end", &|s| {
                s.window(&load(&rate), SECOND, t0);
                s.stopped(None);
                s.test_ended(true);
            }),
            ("another test between", &|s| {
                window(s, &rate, t0, 0.0, 1.0);
                s.test_ended(true);
            }),
            ("another rate", &|s| {
                window(s, &rate, t0, 0.0, 1.0);
                window(s, &LoadMode::Rate(50.0), t0, 2.0, 3.0);
            }),
            ("a closed loop between", &|s| {
                window(s, &rate, t0, 0.0, 1.0);
                window(s, &LoadMode::Concurrency(4), t0, 2.0, 3.0);
            }),
            ("the same load again (the control)", &|s| {
                window(s, &rate, t0, 0.0, 1.0);
            }),
        ];
        for (case, between) in cases {
            let mut s = StreamSchedule::default();
            between(&mut s);
            let next = s.window(&load(&rate), SECOND, now);
            let continued = case.starts_with("the same load");
            assert_eq!(next.start == at(t0, 1.0), continued, "{case}");
            assert_eq!(next.start == now, !continued, "{case}");
        }
        // A closed loop never goes on from an earlier window.
        let mut s = StreamSchedule::default();
        let closed = LoadMode::Concurrency(2);
        window(&mut s, &closed, t0, 0.0, 1.0);
        assert_eq!(s.window(&load(&closed), SECOND, now).start, now);
        // Nor does a spike's.
        let spike = WindowLoad {
            mode: rate.clone(),
            overload: true,
        };
        s.window(&spike, SECOND, t0);
        s.stopped(Some(at(t0, 1.0)));
        s.test_ended(true);
        assert_eq!(s.window(&spike, SECOND, now).start, now);
    }

    /// Streams that start together at a constant rate send at even gaps between them, not
    /// together; at random gaps they start at once.
    #[test]
    fn streams_at_a_constant_rate_start_a_share_of_a_gap_apart() {
        let now = Instant::now();
        let starts = |mode: LoadMode| -> Vec<Duration> {
            (0..4)
                .map(|i| StreamSchedule::for_stream(i, 4).window(&load(&mode), SECOND, now))
                .map(|span| span.start - now)
                .collect()
        };
        let ms = Duration::from_millis;
        assert_eq!(
            starts(LoadMode::Rate(10.0)),
            [ms(0), ms(25), ms(50), ms(75)]
        );
        assert_eq!(starts(LoadMode::Poisson(10.0)), [ms(0); 4]);
        assert_eq!(starts(LoadMode::Concurrency(3)), [ms(0); 4]);
    }

    /// A window whose schedule stopped after its last answers came (the next send was due at
    /// its end, a gap later) is followed where it stopped, not at once: the gap between the
    /// windows' sends stays the schedule's (starting now would offer more than asked).
    #[test]
    fn a_window_that_ended_early_is_followed_where_its_schedule_stopped() {
        let t0 = Instant::now();
        let mut s = StreamSchedule::default();
        let rate = LoadMode::Rate(10.0);
        window(&mut s, &rate, t0, 0.0, 1.0);
        let next = s.window(&load(&rate), SECOND, at(t0, 0.95));
        assert_eq!(next.start, at(t0, 1.0));
    }
}
