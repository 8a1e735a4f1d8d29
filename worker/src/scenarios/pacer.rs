//! The open loop's clock: a thread that keeps intended send times to the microsecond, sends
//! each request there when the client can ([`super::OpenLoop::send_now`]) and hands the tick
//! to the runtime, whose own timer rounds to a millisecond.
//!
//! What an open loop costs per request is mostly wake-ups, so the pacer avoids them: it spins
//! only as long before a send as its own sleeps end late ([`WakeLateness`]), and a request it
//! sent does not wake the runtime. It polls the call once itself, so the call's answer wakes
//! the loop's task, which then takes every tick waiting; only a tick the runtime must act on
//! (a request the pacer could not send, an answer already there) or a full queue wakes it at
//! once.
//!
//! While sends come less than a millisecond apart and each answer comes before the next send,
//! the pacer also reads the answers itself, just before each send ([`AnswerReads`]): they wait
//! in the socket instead of waking the runtime one by one, each stamped with its kernel
//! receive time, and the loop takes them with its every-[`WAKE_AT`]-ticks wake. That is one
//! wake per send instead of two.

use crate::client::AnswerReader;
#[cfg(test)]
use crate::client::AnswersRead;
use futures::task::AtomicWaker;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// Paces an [`super::OpenLoop`]. At most [`PACER_QUEUE`] ticks wait to be taken: a runtime
/// that falls behind stops the pacer, and the sends it then makes are late (and counted so).
pub struct Pacer<P: Future> {
    queue: Arc<TickQueue<P>>,
}

/// One send of an open loop.
pub struct Tick<P: Future> {
    pub index: u64,
    pub intended: Instant,
    /// The call the pacer sent, and when it began to leave.
    pub sent: Option<(PacerCall<P>, Instant)>,
}

/// A call the pacer sent and polled once: still on the wire, or already answered. Either way
/// a future of its answer.
pub enum PacerCall<P: Future> {
    OnTheWire(P),
    Answered(Option<P::Output>),
}

impl<P> Future for PacerCall<P>
where
    P: Future + Unpin,
    P::Output: Unpin,
{
    type Output = P::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<P::Output> {
        match self.get_mut() {
            PacerCall::OnTheWire(call) => Pin::new(call).poll(cx),
            PacerCall::Answered(answer) => {
                Poll::Ready(answer.take().expect("polled after its answer"))
            }
        }
    }
}

/// Send times a pacer hands over ahead of the runtime taking them.
const PACER_QUEUE: usize = 64;

/// Ticks waiting before the pacer wakes the runtime although no answer did: a server that
/// answers nothing still has its calls taken (and their deadlines watched) within this many
/// sends.
const WAKE_AT: usize = 8;

/// How long the pacer sleeps at a time, so a stop is seen within it.
const PACER_SLICE: Duration = Duration::from_millis(20);

/// The ticks between the pacer's thread and the loop's task.
struct TickQueue<P: Future> {
    ticks: Mutex<Waiting<P>>,
    /// The pacer waits here while the queue is full.
    room: Condvar,
    signal: Arc<Signal>,
    stop: AtomicBool,
    /// The intended time of the first send the schedule did not make, where it stopped at its
    /// end (not at a stop from outside).
    stopped_at: Mutex<Option<Instant>>,
}

struct Waiting<P: Future> {
    ticks: VecDeque<Tick<P>>,
    /// The pacer is done: nothing more comes.
    closed: bool,
}

/// Wakes the loop's task; counts wakes by the calls the pacer polled (their answers).
#[derive(Default)]
struct Signal {
    task: AtomicWaker,
    answers: AtomicU64,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.answers.fetch_add(1, Ordering::AcqRel);
        self.task.wake();
    }
}

impl<P: Future> TickQueue<P> {
    fn new() -> Self {
        TickQueue {
            ticks: Mutex::new(Waiting {
                ticks: VecDeque::new(),
                closed: false,
            }),
            room: Condvar::new(),
            signal: Arc::new(Signal::default()),
            stop: AtomicBool::new(false),
            stopped_at: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting<P>> {
        // A panic while holding it leaves plain data behind.
        self.ticks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a tick, waiting while the queue is full; wakes the task when `urgent`, when an
    /// answer came since `answers_before` (its task may have looked before this tick was
    /// there) or when [`WAKE_AT`] ticks wait. None if stopped, else whether it woke the task.
    fn push(&self, tick: Tick<P>, urgent: bool, answers_before: u64) -> Option<bool> {
        let mut waiting = self.lock();
        while waiting.ticks.len() >= PACER_QUEUE {
            if self.stop.load(Ordering::Relaxed) {
                // Its request may be on the wire: it is still handed over (past the bound),
                // so that it is counted.
                waiting.ticks.push_back(tick);
                return None;
            }
            self.signal.task.wake();
            waiting = self
                .room
                .wait_timeout(waiting, PACER_SLICE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        waiting.ticks.push_back(tick);
        let queued = waiting.ticks.len();
        drop(waiting);
        let wake = urgent
            || queued >= WAKE_AT
            || self.signal.answers.load(Ordering::Acquire) != answers_before;
        if wake {
            self.signal.task.wake();
        }
        Some(wake)
    }

    fn record_stop(&self, intended: Instant) {
        *self.stopped_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(intended);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.signal.task.wake();
    }

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Tick<P>>> {
        // Registered before looking, so a tick queued after the look wakes this task.
        self.signal.task.register(cx.waker());
        let mut waiting = self.lock();
        // The pacer waits for room only while the queue is full; a notify costs a syscall
        // (std's condvar always makes one), so only a full queue's pop makes it.
        let was_full = waiting.ticks.len() >= PACER_QUEUE;
        match waiting.ticks.pop_front() {
            Some(tick) => {
                drop(waiting);
                if was_full {
                    self.room.notify_one();
                }
                Poll::Ready(Some(tick))
            }
            None if waiting.closed => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

impl<P> Pacer<P>
where
    P: Future + Unpin + Send + 'static,
    P::Output: Send + 'static,
{
    /// Starts pacing `schedule`.
    pub fn start(schedule: super::OpenLoop<P>) -> Self {
        let queue = Arc::new(TickQueue::new());
        let super::OpenLoop {
            times,
            start,
            until,
            mut send_now,
            answers,
        } = schedule;
        // The calls it polls may start timers (their deadlines) on the runtime.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let pacing = queue.clone();
        let pace = move || {
            let _runtime = runtime.as_ref().map(|r| r.enter());
            precise_timer_slack();
            let waker = Waker::from(pacing.signal.clone());
            let mut cx = Context::from_waker(&waker);
            let mut wakes = WakeLateness::new();
            let mut reads = answers.map(AnswerReads::new);
            let mut previous = start;
            for (index, offset) in (0u64..).zip(times) {
                let Some(intended) = start.checked_add(offset) else {
                    break;
                };
                if until.is_some_and(|u| intended >= u) {
                    pacing.record_stop(intended);
                    break;
                }
                if let Some(reads) = reads.as_mut() {
                    reads.before_wait(intended.saturating_duration_since(Instant::now()));
                }
                let read_ahead = reads
                    .as_ref()
                    .map_or(Duration::ZERO, AnswerReads::read_ahead);
                let mut read_before = || {
                    if let Some(reads) = reads.as_mut() {
                        reads.before_send(Instant::now() >= intended);
                    }
                };
                if !sleep_until(
                    intended,
                    &pacing.stop,
                    &mut wakes,
                    read_ahead,
                    &mut read_before,
                ) {
                    break;
                }
                // Lateness counts to the start of the send, as at the runtime's pickup.
                let leaving = Instant::now();
                let answers_before = pacing.signal.answers.load(Ordering::Acquire);
                let sent = send_now
                    .as_mut()
                    .and_then(|send| send(index))
                    .map(|mut call| match Pin::new(&mut call).poll(&mut cx) {
                        Poll::Pending => PacerCall::OnTheWire(call),
                        Poll::Ready(answer) => PacerCall::Answered(Some(answer)),
                    });
                // The runtime sends what the pacer could not, and times an answer at once.
                let urgent = !matches!(sent, Some(PacerCall::OnTheWire(_)));
                let tick = Tick {
                    index,
                    intended,
                    sent: sent.map(|call| (call, leaving)),
                };
                let Some(woke) = pacing.push(tick, urgent, answers_before) else {
                    break;
                };
                if let Some(reads) = reads.as_mut() {
                    if woke {
                        reads.wake_held();
                    }
                    reads.after_send(intended.saturating_duration_since(previous));
                }
                previous = intended;
            }
            if let Some(mut reads) = reads {
                reads.finish();
            }
            pacing.close();
        };
        if let Err(e) = std::thread::Builder::new().name("pacer".into()).spawn(pace) {
            // No thread: the loop sees a closed queue and sends nothing.
            tracing::error!("cannot start the open loop's pacer thread: {e}");
            queue.close();
        }
        Self { queue }
    }
}

impl<P: Future> Pacer<P> {
    /// The next send (None: the schedule is over).
    pub async fn next(&mut self) -> Option<Tick<P>> {
        std::future::poll_fn(|cx| self.queue.poll_next(cx)).await
    }

    /// Where the schedule stopped at its end: the intended time of its first send not made
    /// (None: it ran out, or it was stopped from outside).
    pub fn stopped_at(&self) -> Option<Instant> {
        *self
            .queue
            .stopped_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the pacer; the ticks it still handed over (their requests may be on the wire).
    /// Returns within one [`PACER_SLICE`].
    pub async fn stop(mut self) -> Vec<Tick<P>> {
        self.queue.stop.store(true, Ordering::Relaxed);
        self.queue.room.notify_all();
        let mut rest = Vec::new();
        while let Some(tick) = self.next().await {
            rest.push(tick);
        }
        rest
    }
}

impl<P: Future> Drop for Pacer<P> {
    fn drop(&mut self) {
        // The thread sees the flag within one sleep slice and ends; nothing waits for it.
        self.queue.stop.store(true, Ordering::Relaxed);
        self.queue.room.notify_all();
    }
}

/// The answers of the pacer's calls, read on the pacer's own wakes, just before each send,
/// while sends come close together and each answer comes before the next send (an answer
/// then costs the runtime no wake of its own); else by the client's task as they come. TCP
/// stamps a read, not each answer, and the kernel merges segments that wait together, keeping
/// the later's time: two answers waiting in one socket would leave the first one late. The
/// client sends each call on a connection with nothing unanswered where it has one (gRPC:
/// `H2Connection::try_start_unary`, which makes more), so waiting answers are in different
/// sockets; a read that finds the next call would go where a call is still unanswered hands
/// the answers back to the client's task until it would not, and one whose answers were
/// merged all the same (uncertain) does so for a while ([`AnswerReads::COOL_DOWN_MIN`] sends,
/// longer while that keeps happening).
struct AnswerReads {
    reader: Box<dyn AnswerReader>,
    deferred: bool,
    /// A running mean of the gaps between sends.
    mean_gap: Duration,
    /// Sends before reads may be deferred again.
    cool_down: u32,
    /// The last cool-down's length, and the sends since it began.
    cool_down_len: u32,
    since_uncertain: u32,
    /// The wakers of calls the pacer's reads answered, woken with the loop's next wake.
    held: Vec<Waker>,
    /// How long a read takes (a running mean).
    read_time: Duration,
}

impl AnswerReads {
    /// Reads are deferred while sends come this close together on average...
    const DEFER_BELOW: Duration = Duration::from_millis(1);
    /// ...and no longer once they come this far apart (or a wait is this long).
    const READ_AS_THEY_COME_ABOVE: Duration = Duration::from_millis(2);
    /// After an uncertain read the client's task reads for this many sends, twice as many
    /// as the last time if that one began less than two of its lengths ago, up to the most.
    const COOL_DOWN_MIN: u32 = 16;
    const COOL_DOWN_MAX: u32 = 1024;

    fn new(reader: Box<dyn AnswerReader>) -> Self {
        Self {
            reader,
            deferred: false,
            mean_gap: Self::READ_AS_THEY_COME_ABOVE,
            cool_down: 0,
            cool_down_len: 0,
            since_uncertain: u32::MAX,
            held: Vec::new(),
            read_time: Duration::ZERO,
        }
    }

    /// Reads what arrived, and hands the answers back to the client's task while a call is
    /// unanswered, or for a while if their receive times were uncertain.
    fn read(&mut self) {
        let began = Instant::now();
        let read = self.reader.read_now(&mut self.held);
        if read.unanswered > 0 || read.uncertain > 0 {
            self.set(false);
        }
        if read.uncertain > 0 {
            self.cool_down_len = if self.since_uncertain / 2 < self.cool_down_len {
                (self.cool_down_len * 2).min(Self::COOL_DOWN_MAX)
            } else {
                Self::COOL_DOWN_MIN
            };
            self.cool_down = self.cool_down_len;
            self.since_uncertain = 0;
        }
        self.read_time = (self.read_time * 7 + began.elapsed()) / 8;
    }

    /// How much earlier the pacer wakes, to read before its send.
    fn read_ahead(&self) -> Duration {
        if self.deferred {
            self.read_time
        } else {
            Duration::ZERO
        }
    }

    /// As the pacer wakes for a send: reads what arrived, or defers reads again if sends
    /// come close together and the next call finds a connection with every call answered.
    /// Before the send, not after: a read just after it would race the server's WINDOW_UPDATE
    /// for that request, which, merged by the kernel into an answer's segment waiting in the
    /// socket, gives that answer its time. A send already `late` leaves first where it goes
    /// on a connection with nothing unanswered (no answer waits in its socket, so nothing to
    /// merge with): what arrived meanwhile waits for the next send's read, in other sockets.
    fn before_send(&mut self, late: bool) {
        if self.deferred {
            if !(late && self.reader.unanswered() == 0) {
                self.read();
            }
        } else if self.cool_down == 0
            && self.mean_gap < Self::DEFER_BELOW
            && self.reader.unanswered() == 0
        {
            self.set(true);
        }
    }

    fn set(&mut self, on: bool) {
        if on != self.deferred {
            self.deferred = self.reader.defer(on) && on;
        }
    }

    /// Before the pacer waits `wait` for its next send: a long wait is not spent holding
    /// answers.
    fn before_wait(&mut self, wait: Duration) {
        if self.deferred && wait > Self::READ_AS_THEY_COME_ABOVE {
            self.reader.read_now(&mut self.held);
            self.set(false);
            self.wake_held();
        }
    }

    /// Just after a send `gap` after the one before.
    fn after_send(&mut self, gap: Duration) {
        self.mean_gap = (self.mean_gap * 7 + gap) / 8;
        self.cool_down = self.cool_down.saturating_sub(1);
        self.since_uncertain = self.since_uncertain.saturating_add(1);
        if self.mean_gap > Self::READ_AS_THEY_COME_ABOVE {
            self.set(false);
        }
    }

    fn wake_held(&mut self) {
        for waker in self.held.drain(..) {
            waker.wake();
        }
    }

    /// The loop's end: what arrived is read, the rest comes to the client's task.
    fn finish(&mut self) {
        if self.deferred {
            self.reader.read_now(&mut self.held);
        }
        self.set(false);
        self.wake_held();
    }
}

impl Drop for AnswerReads {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Sleeps until `deadline` in slices, so a stop is seen within [`PACER_SLICE`], and spins
/// its last [`WakeLateness::spin`]: a sleeping thread wakes late (a few µs on a quiet machine
/// with the timer slack cut, tens on a busy one), a spinning one within a few. `on_waking`
/// runs once, when the sleeps are over, `ahead` before the spin begins (or as soon as they
/// are, if later). Each sleep's own lateness feeds `wakes`. False if stopped.
fn sleep_until(
    deadline: Instant,
    stop: &AtomicBool,
    wakes: &mut WakeLateness,
    ahead: Duration,
    on_waking: &mut dyn FnMut(),
) -> bool {
    let mut woken = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            if !woken {
                // Woken past the deadline: late already, but it runs all the same.
                on_waking();
            }
            return true;
        }
        let lead = wakes.spin() + if woken { Duration::ZERO } else { ahead };
        match (deadline - now).checked_sub(lead) {
            Some(rest) if !rest.is_zero() => {
                let rest = rest.min(PACER_SLICE);
                std::thread::sleep(rest);
                wakes.observe(now.elapsed().saturating_sub(rest));
            }
            _ if !woken => {
                woken = true;
                on_waking();
            }
            _ => std::hint::spin_loop(),
        }
    }
}

/// How late this thread's sleeps end, learnt as they happen (a running estimate of a high
/// quantile), so the pacer spins only about that long before a send rather than a fixed worst
/// case: the spin was most of the pacer's CPU per request.
#[derive(Debug, Clone, PartialEq)]
struct WakeLateness {
    /// The estimated [`WakeLateness::QUANTILE`] of the sleeps' lateness, in nanoseconds.
    estimate_ns: f64,
}

impl WakeLateness {
    /// The quantile the spin covers: one sleep in twenty may end past it (by a little: the
    /// margin covers most of that), the rest leave on time.
    const QUANTILE: f64 = 0.95;
    /// How far one sleep within the estimate moves it down (one beyond it moves it up by
    /// `QUANTILE / (1 - QUANTILE)` times as much): from the start to a few µs in ~0.5 s at
    /// 1000 sends per second.
    const STEP_NS: f64 = 100.0;
    /// Spun beyond the estimate.
    const MARGIN: Duration = Duration::from_micros(4);
    /// Spun at least (a thread never wakes early, but the clock reads cost a little).
    const MIN_SPIN: Duration = Duration::from_micros(5);
    /// Spun at most, however late the sleeps end on a busy machine: at most this much CPU
    /// per send (5% of a core at 1000 sends per second). Sleeps later than this make late
    /// sends, and the lateness shows it.
    const MAX_SPIN: Duration = Duration::from_micros(50);

    fn new() -> Self {
        Self {
            estimate_ns: Self::MAX_SPIN.as_nanos() as f64,
        }
    }

    fn observe(&mut self, late: Duration) {
        let late_ns = late.as_nanos() as f64;
        let step = if late_ns > self.estimate_ns {
            Self::STEP_NS * Self::QUANTILE / (1.0 - Self::QUANTILE)
        } else {
            -Self::STEP_NS
        };
        self.estimate_ns = (self.estimate_ns + step).clamp(0.0, Self::MAX_SPIN.as_nanos() as f64);
    }

    /// How long before a send to stop sleeping and spin.
    fn spin(&self) -> Duration {
        (Duration::from_nanos(self.estimate_ns as u64) + Self::MARGIN)
            .clamp(Self::MIN_SPIN, Self::MAX_SPIN)
    }
}

/// Asks the kernel to wake this thread within 1 µs of its sleeps' ends (the default slack of
/// 50 µs would be the pacer's error); best effort.
fn precise_timer_slack() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_timerslack(1000) {
        tracing::debug!("the pacer keeps the default timer slack: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// Lateness draws: `fast` of every 100 sleeps end `low` late, the others (first) `high`.
    fn feed(wakes: &mut WakeLateness, n: usize, fast: usize, low: u64, high: u64) {
        for i in 0..n {
            let late = if i % 100 >= 100 - fast { low } else { high };
            wakes.observe(Duration::from_micros(late));
        }
    }

    #[test]
    fn the_pacer_spins_about_as_long_as_its_sleeps_end_late() {
        // Quiet machine: sleeps end 3 µs late, one in a hundred 30 µs. The spin settles just
        // above the usual lateness (the estimate is the 95th percentile), far below the old
        // fixed 50 µs.
        let mut wakes = WakeLateness::new();
        feed(&mut wakes, 5_000, 99, 3, 30);
        let spin = wakes.spin();
        assert!(
            spin >= Duration::from_micros(5) && spin <= Duration::from_micros(12),
            "{spin:?}"
        );
        // Busier: one sleep in ten ends 40 µs late, so the spin covers that.
        feed(&mut wakes, 5_000, 90, 3, 40);
        let spin = wakes.spin();
        assert!(spin >= Duration::from_micros(35), "{spin:?}");
        // Back to quiet: the spin comes down again.
        feed(&mut wakes, 5_000, 100, 3, 3);
        assert!(
            wakes.spin() <= Duration::from_micros(10),
            "{:?}",
            wakes.spin()
        );
    }

    #[test]
    fn the_pacer_spin_is_bounded_however_late_the_sleeps_end() {
        let mut wakes = WakeLateness::new();
        feed(&mut wakes, 1_000, 0, 0, 5_000);
        assert_eq!(wakes.spin(), WakeLateness::MAX_SPIN);
        let mut wakes = WakeLateness::new();
        feed(&mut wakes, 1_000, 100, 0, 0);
        assert_eq!(wakes.spin(), WakeLateness::MIN_SPIN);
    }

    /// An answer reader that says whether reads are deferred, answers each read with the
    /// next scripted count of uncertain answers and calls left unanswered (none past the
    /// script), and hands over one waker per read.
    struct ScriptedReader {
        deferred: Arc<AtomicBool>,
        reads: VecDeque<AnswersRead>,
        unanswered: Arc<AtomicU64>,
        waker: Waker,
    }

    impl AnswerReader for ScriptedReader {
        fn defer(&mut self, on: bool) -> bool {
            self.deferred.store(on, Ordering::SeqCst);
            true
        }

        fn read_now(&mut self, wakers: &mut Vec<Waker>) -> AnswersRead {
            wakers.push(self.waker.clone());
            let read = self.reads.pop_front().unwrap_or_default();
            self.unanswered
                .store(read.unanswered as u64, Ordering::SeqCst);
            read
        }

        fn unanswered(&self) -> usize {
            self.unanswered.load(Ordering::SeqCst) as usize
        }
    }

    /// Reads whose answers are uncertain as `uncertain` says, every call answered.
    fn scripted(uncertain: &[u64]) -> (AnswerReads, Arc<AtomicBool>, Arc<Wakes>) {
        let reads: Vec<AnswersRead> = uncertain
            .iter()
            .map(|&uncertain| AnswersRead {
                uncertain,
                unanswered: 0,
            })
            .collect();
        let (reads, deferred, woken, _) = scripted_reads(&reads);
        (reads, deferred, woken)
    }

    fn scripted_reads(
        reads: &[AnswersRead],
    ) -> (AnswerReads, Arc<AtomicBool>, Arc<Wakes>, Arc<AtomicU64>) {
        let deferred = Arc::new(AtomicBool::new(false));
        let woken = Arc::new(Wakes::default());
        let unanswered = Arc::new(AtomicU64::new(0));
        let reader = ScriptedReader {
            deferred: deferred.clone(),
            reads: reads.iter().copied().collect(),
            unanswered: unanswered.clone(),
            waker: Waker::from(woken.clone()),
        };
        (
            AnswerReads::new(Box::new(reader)),
            deferred,
            woken,
            unanswered,
        )
    }

    const HALF_MS: Duration = Duration::from_micros(500);

    /// One send `gap` after the one before, as the pacer makes it.
    fn send(reads: &mut AnswerReads, gap: Duration) {
        reads.before_send(false);
        reads.after_send(gap);
    }

    #[test]
    fn a_late_answer_is_read_by_the_client_as_it_comes_until_every_call_is_answered() {
        let on_time = AnswersRead::default();
        let late = AnswersRead {
            uncertain: 0,
            unanswered: 1,
        };
        let (mut reads, deferred, _, unanswered) =
            scripted_reads(&[on_time, on_time, on_time, late]);
        let mut sends = 0;
        while !deferred.load(Ordering::SeqCst) {
            send(&mut reads, HALF_MS);
            sends += 1;
            assert!(sends < 100, "never deferred");
        }
        for _ in 0..3 {
            send(&mut reads, HALF_MS);
            assert!(deferred.load(Ordering::SeqCst));
        }
        // The fourth read finds a call unanswered: its answer, were it to wait in the socket,
        // could be merged with the next one's.
        send(&mut reads, HALF_MS);
        assert!(!deferred.load(Ordering::SeqCst));
        for _ in 0..5 {
            send(&mut reads, HALF_MS);
            assert!(
                !deferred.load(Ordering::SeqCst),
                "deferred with a call unanswered"
            );
        }
        // Answered (by the client's task): deferred again at the next send, no cool-down.
        unanswered.store(0, Ordering::SeqCst);
        send(&mut reads, HALF_MS);
        assert!(deferred.load(Ordering::SeqCst));
    }

    #[test]
    fn answers_wait_for_the_pacer_only_while_sends_come_close_together() {
        // 2,000 sends a second: deferred within a few sends.
        let (mut reads, deferred, _) = scripted(&[]);
        for _ in 0..10 {
            send(&mut reads, HALF_MS);
        }
        assert!(deferred.load(Ordering::SeqCst));
        // The rate falls to 200 a second: the client's task reads again.
        for _ in 0..20 {
            send(&mut reads, Duration::from_millis(5));
        }
        assert!(!deferred.load(Ordering::SeqCst));
        // 200 a second from the start: never deferred.
        let (mut reads, deferred, _) = scripted(&[]);
        for _ in 0..100 {
            send(&mut reads, Duration::from_millis(5));
            assert!(!deferred.load(Ordering::SeqCst));
        }
    }

    /// Sends at 2,000 a second until reads are deferred; then until a read undefers them:
    /// how many deferred reads that took, and how many sends the client's task then read.
    fn deferred_then_cooled_down(reads: &mut AnswerReads, deferred: &AtomicBool) -> (u32, u32) {
        let mut sends = 0;
        while !deferred.load(Ordering::SeqCst) {
            send(reads, HALF_MS);
            sends += 1;
            assert!(sends < 10_000, "never deferred");
        }
        let mut deferred_reads = 0;
        while deferred.load(Ordering::SeqCst) {
            send(reads, HALF_MS);
            deferred_reads += 1;
            assert!(deferred_reads < 10_000, "never undeferred");
        }
        let mut cooling = 1;
        loop {
            send(reads, HALF_MS);
            if deferred.load(Ordering::SeqCst) {
                return (deferred_reads, cooling);
            }
            cooling += 1;
        }
    }

    #[test]
    fn a_late_send_leaves_before_the_read_only_where_no_answer_waits_on_its_connection() {
        let (mut reads, deferred, _, unanswered) = scripted_reads(&[]);
        for _ in 0..10 {
            send(&mut reads, HALF_MS);
        }
        assert!(deferred.load(Ordering::SeqCst));
        let held = reads.held.len();
        // Late, and the next call finds a connection with nothing unanswered: no read first.
        reads.before_send(true);
        assert_eq!(reads.held.len(), held, "read before a late send");
        reads.after_send(HALF_MS);
        // On time: read first, as always.
        reads.before_send(false);
        assert_eq!(reads.held.len(), held + 1);
        reads.after_send(HALF_MS);
        // Late, but every connection has a call unanswered (its answer may wait in the
        // socket the call goes on): read first all the same.
        unanswered.store(1, Ordering::SeqCst);
        reads.before_send(true);
        assert_eq!(
            reads.held.len(),
            held + 2,
            "a late send skipped a needed read"
        );
    }

    #[test]
    fn an_uncertain_read_hands_the_answers_back_to_the_client_for_a_while() {
        // Reads 1-9 certain, the tenth had answers whose receive time is uncertain.
        let mut script = vec![0; 9];
        script.push(1);
        let (mut reads, deferred, _) = scripted(&script);
        assert_eq!(
            deferred_then_cooled_down(&mut reads, &deferred),
            (10, AnswerReads::COOL_DOWN_MIN),
            "undeferred by the read with uncertain answers, for the shortest cool-down"
        );
    }

    #[test]
    fn late_answers_that_keep_coming_keep_the_pacer_from_reading_longer_each_time() {
        // The first read after each cool-down is uncertain again: the cool-down doubles.
        let (mut reads, deferred, _) = scripted(&[1; 12]);
        let mut cool_downs = Vec::new();
        for _ in 0..8 {
            cool_downs.push(deferred_then_cooled_down(&mut reads, &deferred).1);
        }
        assert_eq!(cool_downs, [16, 32, 64, 128, 256, 512, 1024, 1024]);
        // After a long quiet spell, an isolated late answer costs the shortest one again.
        let mut script = vec![1, 1, 1];
        script.extend(vec![0; 5000]);
        script.push(1);
        let (mut reads, deferred, _) = scripted(&script);
        let cool_downs: Vec<u32> = (0..4)
            .map(|_| deferred_then_cooled_down(&mut reads, &deferred).1)
            .collect();
        assert_eq!(cool_downs, [16, 32, 64, 16]);
    }

    #[test]
    fn answers_the_pacer_read_are_handed_on_with_the_loops_wake_a_long_wait_or_the_end() {
        let (mut reads, deferred, woken) = scripted(&[]);
        for _ in 0..10 {
            send(&mut reads, HALF_MS);
        }
        assert!(deferred.load(Ordering::SeqCst));
        send(&mut reads, HALF_MS);
        let held = reads.held.len();
        assert!(held >= 1);
        assert_eq!(
            woken.count(),
            0,
            "an answer the pacer read woke the runtime by itself"
        );
        reads.wake_held();
        assert_eq!(woken.count(), held);
        // A long wait ahead: what arrived is read and handed on, and reads are undeferred.
        send(&mut reads, HALF_MS);
        reads.before_wait(Duration::from_millis(50));
        assert!(!deferred.load(Ordering::SeqCst));
        assert!(reads.held.is_empty());
        // The end: the same.
        for _ in 0..10 {
            send(&mut reads, HALF_MS);
        }
        let before = woken.count();
        drop(reads);
        assert!(!deferred.load(Ordering::SeqCst));
        assert!(woken.count() > before);
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A schedule of `sends` at once, then one an hour later (the pacer sleeps there).
    fn schedule<P: Future>(
        sends: usize,
        send_now: Option<super::super::SendNow<P>>,
    ) -> super::super::OpenLoop<P> {
        let times = std::iter::repeat_n(Duration::ZERO, sends)
            .chain(std::iter::once(Duration::from_secs(3600)));
        super::super::OpenLoop {
            times: Box::new(times),
            start: Instant::now(),
            until: None,
            send_now,
            answers: None,
        }
    }

    /// Polls the pacer's next tick with `waker`.
    fn poll_next<P: Future>(pacer: &Pacer<P>, waker: &Arc<Wakes>) -> Poll<Option<Tick<P>>> {
        pacer
            .queue
            .poll_next(&mut Context::from_waker(&Waker::from(waker.clone())))
    }

    /// Starts the pacer's schedule half a second from now and polls it once, so that the loop
    /// waits before the first tick: a poll that took a tick already queued would leave one
    /// less (seen on a machine busy at nice 19).
    fn start_with_a_waiting_loop<P>(schedule: super::super::OpenLoop<P>) -> (Pacer<P>, Arc<Wakes>)
    where
        P: Future + Unpin + Send + 'static,
        P::Output: Send + 'static,
    {
        let schedule = super::super::OpenLoop {
            start: Instant::now() + Duration::from_millis(500),
            ..schedule
        };
        let pacer = Pacer::start(schedule);
        let task = Arc::new(Wakes::default());
        assert!(
            poll_next(&pacer, &task).is_pending(),
            "a tick before the start"
        );
        (pacer, task)
    }

    /// Waits until the pacer's queue holds `n` ticks.
    fn wait_for_ticks<P: Future>(pacer: &Pacer<P>, n: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        while pacer.queue.lock().ticks.len() < n {
            assert!(Instant::now() < until, "the pacer did not queue {n} ticks");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The pacer's thread queues a tick, then wakes the loop: a test that saw the tick waits
    /// for the wake too (it failed once on a loaded machine, reading the count in between).
    fn wait_for_wakes(task: &Wakes, n: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        while task.count() < n {
            assert!(Instant::now() < until, "the loop was not woken {n} times");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_request_the_pacer_sent_wakes_the_loop_with_its_answer_not_before() {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let on_wire = answers.clone();
        let send_now: super::super::SendNow<tokio::sync::oneshot::Receiver<u64>> =
            Box::new(move |_| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                on_wire.lock().unwrap().push(tx);
                Some(rx)
            });
        let mut plan = schedule(3, Some(send_now));
        plan.times = Box::new(
            [10, 0, 0, 3_600_000]
                .into_iter()
                .scan(Duration::ZERO, |at, gap| {
                    *at += Duration::from_millis(gap);
                    Some(*at)
                }),
        );
        let (pacer, task) = start_with_a_waiting_loop(plan);
        wait_for_ticks(&pacer, 3);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(task.count(), 0, "three sent requests, no answer: no wake");
        // The second request's answer wakes the task, which takes every tick.
        let second = answers.lock().unwrap().remove(1);
        second.send(7).unwrap();
        assert_eq!(task.count(), 1);
        let mut ticks = Vec::new();
        while let Poll::Ready(Some(tick)) = poll_next(&pacer, &task) {
            ticks.push(tick);
        }
        assert_eq!(ticks.iter().map(|t| t.index).collect::<Vec<_>>(), [0, 1, 2]);
        let (call, _) = ticks.remove(1).sent.expect("sent by the pacer");
        let answer = Pin::new(&mut Box::pin(call))
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        assert!(matches!(answer, Poll::Ready(Ok(7))), "{answer:?}");
    }

    #[test]
    fn the_loop_is_woken_at_once_for_what_only_the_runtime_can_do() {
        // A request the pacer could not send: the runtime sends it, now.
        let (pacer, task) = start_with_a_waiting_loop(schedule::<std::future::Ready<u64>>(1, None));
        wait_for_ticks(&pacer, 1);
        wait_for_wakes(&task, 1);
        assert_eq!(task.count(), 1);
        // An answer already there when the pacer polled it: timed now, not later.
        let answered: super::super::SendNow<std::future::Ready<u64>> =
            Box::new(|i| Some(std::future::ready(i)));
        let (pacer, task) = start_with_a_waiting_loop(schedule(1, Some(answered)));
        wait_for_ticks(&pacer, 1);
        wait_for_wakes(&task, 1);
        assert_eq!(task.count(), 1);
    }

    #[test]
    fn unanswered_requests_still_reach_the_loop_every_few_sends() {
        let send_now: super::super::SendNow<std::future::Pending<u64>> =
            Box::new(|_| Some(std::future::pending()));
        let (pacer, task) = start_with_a_waiting_loop(schedule(WAKE_AT, Some(send_now)));
        wait_for_ticks(&pacer, WAKE_AT);
        wait_for_wakes(&task, 1);
    }

    #[test]
    fn a_full_queue_stops_the_pacer_until_the_loop_takes_ticks() {
        let send_now: super::super::SendNow<std::future::Pending<u64>> =
            Box::new(|_| Some(std::future::pending()));
        let pacer = Pacer::start(schedule(PACER_QUEUE + 10, Some(send_now)));
        wait_for_ticks(&pacer, PACER_QUEUE);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(pacer.queue.lock().ticks.len(), PACER_QUEUE);
        let task = Arc::new(Wakes::default());
        for _ in 0..10 {
            assert!(poll_next(&pacer, &task).is_ready());
        }
        wait_for_ticks(&pacer, PACER_QUEUE);
    }
}
