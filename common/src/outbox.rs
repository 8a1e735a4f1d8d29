//! A worker's reports, written off the request path: [`Outbox`] is a [`StatusSink`] that queues
//! every event, failure record, snapshot and heartbeat and returns at once; one writer task
//! delivers them in order to the real sink, retrying each with backoff until it is written.
//!
//! So a store that is slow, paused or down never stops the load, and what was reported during
//! an outage is delivered when the store returns. The queue is bounded by what an outage can
//! cost in memory, not by its length:
//! - events (STARTING, RUNNING, SUCCESS, FAILURE) are few and always kept;
//! - snapshots carry cumulative counts, so a queued snapshot's counts are superseded by the
//!   next one's and dropped; its QPS point, latency intervals and outages stay. Past
//!   [`Limits::snapshots`] the oldest queued QPS point is dropped (its intervals, its outages
//!   and its place in the QPS series move to the next snapshot, so the latency series keeps
//!   every request and no outage is lost);
//! - failure records are kept up to [`Limits::failures`] (the first ones: they say what went
//!   wrong first); later ones are counted, and their failures are in the counts anyway;
//! - what was dropped is said in a RUNNING event once the store is back.
//!
//! [`Outbox::finish`] flushes within a deadline; what is still undelivered then is written to the
//! log, one JSON line each, so it is never silently discarded.

use crate::status::{
    EventKind, FailureRecord, LoadTarget, SinkError, StatusSink, Stopping, WorkerSnapshot,
};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How much an outage may queue, and how the writer retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Queued snapshots (QPS points) kept; an hour of 1 s polls.
    pub snapshots: usize,
    /// Queued failure records kept (each may hold up to 64 wire steps).
    pub failures: usize,
    /// One write's time limit: a store that does not answer is a failed attempt.
    pub attempt_timeout: Duration,
    /// The pause after the first failed attempt; it doubles up to `max_pause`.
    pub first_pause: Duration,
    pub max_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            snapshots: 3600,
            failures: 1000,
            attempt_timeout: Duration::from_secs(5),
            first_pause: Duration::from_millis(100),
            max_pause: Duration::from_secs(2),
        }
    }
}

/// One queued report.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Item {
    Event { kind: EventKind, details: String },
    Failure(Box<FailureRecord>),
    Snapshot(Box<WorkerSnapshot>),
    Heartbeat,
}

/// What the queue dropped to stay bounded, and what of that was already said.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Dropped {
    failures: u64,
    samples: u64,
}

#[derive(Default)]
struct Queue {
    /// (sequence number, item), oldest first; the writer works on the front.
    items: VecDeque<(u64, Item)>,
    next_seq: u64,
    dropped: Dropped,
    /// What the last "dropped" event reported.
    dropped_reported: Dropped,
    /// When the current run of failed writes began.
    failing_since: Option<Instant>,
    closed: bool,
}

impl Queue {
    fn push(&mut self, item: Item) {
        self.items.push_back((self.next_seq, item));
        self.next_seq += 1;
    }

    fn count(&self, f: impl Fn(&Item) -> bool) -> usize {
        self.items.iter().filter(|(_, i)| f(i)).count()
    }

    fn enqueue(&mut self, item: Item, limits: &Limits) {
        match item {
            Item::Heartbeat => {
                // A queued heartbeat or snapshot already says the worker is alive.
                if self.count(|i| matches!(i, Item::Heartbeat | Item::Snapshot(_))) > 0 {
                    return;
                }
            }
            Item::Failure(_) => {
                if self.count(|i| matches!(i, Item::Failure(_))) >= limits.failures {
                    self.dropped.failures += 1;
                    return;
                }
            }
            Item::Snapshot(_) => {
                // The front may be being written: leave it whole; later ones lose their
                // superseded cumulative counts.
                for (_, queued) in self.items.iter_mut().skip(1) {
                    if let Item::Snapshot(s) = queued {
                        s.scenarios.clear();
                        s.models.clear();
                    }
                }
                if self.count(|i| matches!(i, Item::Snapshot(_))) >= limits.snapshots.max(1) {
                    self.drop_oldest_sample();
                }
            }
            Item::Event { .. } => {}
        }
        self.push(item);
    }

    /// Drops the oldest queued snapshot but the front, moving its latency intervals, its
    /// outages and its client spans to the next queued snapshot (ahead of that one's own, so both keep their order).
    fn drop_oldest_sample(&mut self) {
        let snapshot_at = |items: &VecDeque<(u64, Item)>, from: usize| {
            (from..items.len()).find(|&i| matches!(items[i].1, Item::Snapshot(_)))
        };
        let Some(oldest) = snapshot_at(&self.items, 1) else {
            return;
        };
        let Some(next) = snapshot_at(&self.items, oldest + 1) else {
            return;
        };
        let Some((_, Item::Snapshot(dropped))) = self.items.remove(oldest) else {
            unreachable!("found a snapshot at {oldest}");
        };
        if let Item::Snapshot(s) = &mut self.items[next - 1].1 {
            let dropped = *dropped;
            let mut moved = dropped.intervals;
            moved.append(&mut s.intervals);
            s.intervals = moved;
            let mut moved = dropped.outages;
            moved.append(&mut s.outages);
            s.outages = moved;
            let mut moved = dropped.client_spans;
            moved.append(&mut s.client_spans);
            s.client_spans = moved;
            // The series keeps a point where the dropped one would have been.
            s.series_point |= dropped.series_point;
        }
        self.dropped.samples += 1;
    }

    /// Removes the delivered item (unless it was removed meanwhile).
    fn delivered(&mut self, seq: u64) {
        if self.items.front().is_some_and(|(s, _)| *s == seq) {
            self.items.pop_front();
        }
    }
}

struct Shared {
    inner: Arc<dyn StatusSink>,
    limits: Limits,
    queue: Mutex<Queue>,
    wake: Notify,
}

impl Shared {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The worker's sink: queues, delivers in order, never blocks the caller (see the module).
pub struct Outbox {
    shared: Arc<Shared>,
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What [`Outbox::finish`] could not deliver within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Undelivered {
    pub records: usize,
}

impl Outbox {
    /// Starts the writer task (needs a Tokio runtime).
    pub fn new(inner: Arc<dyn StatusSink>, limits: Limits) -> Self {
        let shared = Arc::new(Shared {
            inner,
            limits,
            queue: Mutex::default(),
            wake: Notify::new(),
        });
        let writer = tokio::spawn(write_loop(shared.clone()));
        Outbox {
            shared,
            writer: Mutex::new(Some(writer)),
        }
    }

    /// Reports queued and not yet written.
    pub fn backlog(&self) -> usize {
        self.shared.queue().items.len()
    }

    /// Stops taking reports, then waits until every queued one is delivered or `budget` is
    /// spent. What is left is logged, one JSON line per record (`undelivered: {...}`), and
    /// counted in the answer.
    pub async fn finish(&self, budget: Duration) -> Undelivered {
        self.shared.queue().closed = true;
        self.shared.wake.notify_one();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut writer) = writer else {
            return Undelivered::default();
        };
        if tokio::time::timeout(budget, &mut writer).await.is_ok() {
            return Undelivered::default();
        }
        writer.abort();
        let left: Vec<(u64, Item)> = self.shared.queue().items.drain(..).collect();
        for (_, item) in &left {
            let json =
                serde_json::to_string(item).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
            tracing::error!("undelivered: {json}");
        }
        if !left.is_empty() {
            tracing::error!(
                "{} report(s) not delivered to the store within {budget:?}; they are logged above",
                left.len()
            );
        }
        Undelivered {
            records: left.len(),
        }
    }

    fn enqueue(&self, item: Item) -> Result<(), SinkError> {
        {
            let mut queue = self.shared.queue();
            if queue.closed {
                return Err(SinkError("the outbox is closed".into()));
            }
            queue.enqueue(item, &self.shared.limits);
        }
        self.shared.wake.notify_one();
        Ok(())
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            writer.abort();
        }
    }
}

#[async_trait::async_trait]
impl StatusSink for Outbox {
    async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
        self.enqueue(Item::Event {
            kind,
            details: details.into(),
        })
    }

    async fn heartbeat(&self) -> Result<(), SinkError> {
        self.enqueue(Item::Heartbeat)
    }

    async fn snapshot(&self, snapshot: &WorkerSnapshot) -> Result<(), SinkError> {
        self.enqueue(Item::Snapshot(Box::new(snapshot.clone())))
    }

    async fn failure(&self, failure: &FailureRecord) -> Result<(), SinkError> {
        self.enqueue(Item::Failure(Box::new(failure.clone())))
    }

    /// Read straight from the store, within the attempt timeout: a store that cannot answer
    /// leaves the current load (the caller's choice).
    async fn load_target(&self) -> Result<Option<LoadTarget>, SinkError> {
        let limit = self.shared.limits.attempt_timeout;
        match tokio::time::timeout(limit, self.shared.inner.load_target()).await {
            Ok(answer) => answer,
            Err(_) => Err(SinkError(format!("no answer within {limit:?}"))),
        }
    }

    /// Read straight from the store (the caller bounds the wait).
    async fn stopping(&self) -> Result<Option<Stopping>, SinkError> {
        self.shared.inner.stopping().await
    }

    /// Read straight from the store (the caller bounds the wait).
    async fn reported(&self) -> Result<crate::status::carry::Reported, SinkError> {
        self.shared.inner.reported().await
    }
}

async fn write(sink: &dyn StatusSink, item: &Item) -> Result<(), SinkError> {
    match item {
        Item::Event { kind, details } => sink.event(*kind, details).await,
        Item::Failure(f) => sink.failure(f).await,
        Item::Snapshot(s) => sink.snapshot(s).await,
        Item::Heartbeat => sink.heartbeat().await,
    }
}

/// A write that took this long is slow: reports queue up behind it, and the driver, which
/// reads the heartbeats they carry, sees them late.
const SLOW_WRITE: Duration = Duration::from_secs(1);

/// Whether a log line said at most once per [`STILL_FAILING_EVERY`] is due (`last`: when it
/// was last said), and if so, marks it said now.
fn log_due(last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|at| at.elapsed() < STILL_FAILING_EVERY) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// Logs a slow write, at most once per [`STILL_FAILING_EVERY`] (`noted`: when one last was).
fn note_slow_write(took: Duration, queued: usize, noted: &mut Option<Instant>) {
    if took < SLOW_WRITE || !log_due(noted) {
        return;
    }
    tracing::warn!(
        "a status store write took {:.1} s ({queued} report(s) queued behind it)",
        took.as_secs_f64()
    );
}

/// How often a store that stays unwritable is logged again.
const STILL_FAILING_EVERY: Duration = Duration::from_secs(10);

/// Delivers the queue front to back; a failed write is retried (same item, so the order
/// holds) after a pause that doubles; ends once closed and empty.
async fn write_loop(shared: Arc<Shared>) {
    let limits = shared.limits;
    let mut pause = limits.first_pause;
    let mut warned = None;
    let mut noted = None;
    loop {
        let notified = shared.wake.notified();
        let front = {
            let queue = shared.queue();
            match queue.items.front() {
                Some((seq, item)) => Some((*seq, item.clone())),
                None if queue.closed => return,
                None => None,
            }
        };
        let Some((seq, item)) = front else {
            notified.await;
            continue;
        };
        let began = Instant::now();
        let error = match tokio::time::timeout(limits.attempt_timeout, write(&*shared.inner, &item))
            .await
        {
            Ok(Ok(())) => {
                let behind = shared.queue().items.len().saturating_sub(1);
                note_slow_write(began.elapsed(), behind, &mut noted);
                None
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "no answer within {:?}{}",
                limits.attempt_timeout,
                shared
                    .inner
                    .connections()
                    .map(|c| format!(" (store connections: {c})"))
                    .unwrap_or_default()
            )),
        };
        match error {
            None => {
                pause = limits.first_pause;
                let mut queue = shared.queue();
                queue.delivered(seq);
                if let Some(since) = queue.failing_since.take() {
                    tracing::info!(
                        "status store writable again after {:.1} s; delivering {} queued report(s)",
                        since.elapsed().as_secs_f64(),
                        queue.items.len()
                    );
                }
                if queue.dropped != queue.dropped_reported && !queue.closed {
                    let Dropped { failures, samples } = queue.dropped;
                    queue.dropped_reported = queue.dropped;
                    queue.push(Item::Event {
                        kind: EventKind::Running,
                        details: format!(
                            "while the status store was unavailable, {failures} failure record(s) \
                             beyond the first {} queued were not kept (their failures are in the \
                             counts) and {samples} QPS sample(s) were dropped",
                            limits.failures
                        ),
                    });
                }
            }
            Some(error) => {
                {
                    let mut queue = shared.queue();
                    match queue.failing_since {
                        None => {
                            queue.failing_since = Some(Instant::now());
                            warned = Some(Instant::now());
                            tracing::warn!(
                                "status store not writable ({error}); reports are queued and retried"
                            );
                        }
                        // Now and then, so a long outage's log says how it goes on.
                        Some(since) if log_due(&mut warned) => {
                            tracing::warn!(
                                "status store still not writable after {:.1} s ({} report(s) queued): {error}",
                                since.elapsed().as_secs_f64(),
                                queue.items.len()
                            );
                        }
                        Some(_) => tracing::debug!("status store still not writable: {error}"),
                    }
                }
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2).min(limits.max_pause);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{IntervalCounts, Outage, ScenarioCounts};
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn a_slow_write_is_noted_at_most_once_in_a_while() {
        let mut noted = None;
        note_slow_write(Duration::from_millis(900), 3, &mut noted);
        assert!(noted.is_none(), "under a second is not slow");
        note_slow_write(Duration::from_secs(2), 3, &mut noted);
        let first = noted.expect("a 2 s write is slow");
        note_slow_write(Duration::from_secs(3), 4, &mut noted);
        assert_eq!(
            noted,
            Some(first),
            "noted again within {STILL_FAILING_EVERY:?}"
        );
    }

    /// A store that can be taken down and brought back; keeps what was written, in order.
    #[derive(Default)]
    struct SwitchableStore {
        down: AtomicBool,
        /// Writes hang instead of failing (a paused store).
        hang: AtomicBool,
        written: Mutex<Vec<Item>>,
    }

    impl SwitchableStore {
        fn written(&self) -> Vec<Item> {
            self.written.lock().unwrap().clone()
        }
        async fn take(&self, item: Item) -> Result<(), SinkError> {
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if self.down.load(Ordering::SeqCst) {
                return Err(SinkError("connection refused".into()));
            }
            self.written.lock().unwrap().push(item);
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl StatusSink for Arc<SwitchableStore> {
        async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
            self.take(Item::Event {
                kind,
                details: details.into(),
            })
            .await
        }
        async fn heartbeat(&self) -> Result<(), SinkError> {
            self.take(Item::Heartbeat).await
        }
        async fn snapshot(&self, s: &WorkerSnapshot) -> Result<(), SinkError> {
            self.take(Item::Snapshot(Box::new(s.clone()))).await
        }
        async fn failure(&self, f: &FailureRecord) -> Result<(), SinkError> {
            self.take(Item::Failure(Box::new(f.clone()))).await
        }
    }

    fn fast() -> Limits {
        Limits {
            attempt_timeout: Duration::from_millis(200),
            first_pause: Duration::from_millis(5),
            max_pause: Duration::from_millis(20),
            ..Limits::default()
        }
    }

    fn snapshot(at_ms: i64, requests: u64, interval: bool) -> WorkerSnapshot {
        WorkerSnapshot {
            at_ms,
            total_requests: requests,
            qps: requests as f64,
            scenarios: vec![ScenarioCounts {
                scenario: "Infer".into(),
                requests,
                ..Default::default()
            }],
            intervals: if interval {
                vec![IntervalCounts {
                    scenario: "Infer".into(),
                    model: "m".into(),
                    start_ms: at_ms - 1,
                    end_ms: at_ms,
                    requests: 1,
                    ..Default::default()
                }]
            } else {
                vec![]
            },
            // As a worker does: the snapshots that close an interval are the series' points.
            series_point: interval,
            ..Default::default()
        }
    }

    fn describe(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Item::Event { kind, details } => format!("{kind} {details}"),
                Item::Failure(f) => format!("failure {}", f.actual),
                Item::Snapshot(s) => format!(
                    "snapshot {} counts:{} intervals:{}{}{}",
                    s.at_ms,
                    s.scenarios.len(),
                    s.intervals.len(),
                    if s.outages.is_empty() {
                        String::new()
                    } else {
                        format!(" outages:{}", s.outages.len())
                    },
                    if s.series_point { " point" } else { "" }
                ),
                Item::Heartbeat => "heartbeat".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn reports_never_wait_for_a_hung_store_and_arrive_in_order_when_it_returns() {
        let store = Arc::new(SwitchableStore::default());
        store.hang.store(true, Ordering::SeqCst);
        let outbox = Outbox::new(Arc::new(store.clone()), fast());
        let started = Instant::now();
        outbox.event(EventKind::Running, "go").await.unwrap();
        outbox.snapshot(&snapshot(1, 10, false)).await.unwrap();
        outbox
            .failure(&FailureRecord {
                actual: "wrong".into(),
                error_kind: None,
                ..Default::default()
            })
            .await
            .unwrap();
        outbox.snapshot(&snapshot(2, 20, true)).await.unwrap();
        outbox.event(EventKind::Success, "done").await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "enqueueing waited"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(store.written().is_empty());
        store.hang.store(false, Ordering::SeqCst);
        assert_eq!(outbox.finish(Duration::from_secs(5)).await.records, 0);
        assert_eq!(
            describe(&store.written()),
            [
                "RUNNING go",
                // Superseded by snapshot 2's cumulative counts; its QPS point stays.
                "snapshot 1 counts:0 intervals:0",
                "failure wrong",
                "snapshot 2 counts:1 intervals:1 point",
                "SUCCESS done",
            ]
        );
    }

    #[tokio::test]
    async fn an_outage_keeps_every_interval_and_the_first_failures_and_says_what_it_dropped() {
        let store = Arc::new(SwitchableStore::default());
        store.down.store(true, Ordering::SeqCst);
        let limits = Limits {
            snapshots: 3,
            failures: 2,
            ..fast()
        };
        let outbox = Outbox::new(Arc::new(store.clone()), limits);
        for at in 1..=6 {
            // Snapshots 2 and 4 close latency intervals.
            outbox
                .snapshot(&snapshot(at, at as u64 * 10, at % 2 == 0))
                .await
                .unwrap();
        }
        for n in 1..=5 {
            outbox
                .failure(&FailureRecord {
                    actual: format!("f{n}"),
                    error_kind: None,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        outbox.heartbeat().await.unwrap();
        assert_eq!(outbox.backlog(), 3 + 2);
        store.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
        outbox.event(EventKind::Success, "done").await.unwrap();
        assert_eq!(outbox.finish(Duration::from_secs(5)).await.records, 0);
        let written = store.written();
        let intervals: usize = written
            .iter()
            .map(|i| match i {
                Item::Snapshot(s) => s.intervals.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(intervals, 3, "every latency interval is delivered");
        assert_eq!(
            describe(&written),
            [
                "snapshot 1 counts:1 intervals:0",
                // Snapshots 2 and 4 were dropped: their intervals and their place in the
                // QPS series moved to snapshot 5.
                "snapshot 5 counts:0 intervals:2 point",
                "snapshot 6 counts:1 intervals:1 point",
                "failure f1",
                "failure f2",
                "RUNNING while the status store was unavailable, 3 failure record(s) beyond the \
                 first 2 queued were not kept (their failures are in the counts) and 3 QPS \
                 sample(s) were dropped",
                "SUCCESS done",
            ]
        );
    }

    #[tokio::test]
    async fn outages_and_client_spans_are_never_dropped_and_keep_their_order() {
        let store = Arc::new(SwitchableStore::default());
        store.down.store(true, Ordering::SeqCst);
        let limits = Limits {
            snapshots: 3,
            ..fast()
        };
        let outbox = Outbox::new(Arc::new(store.clone()), limits);
        let outage = |n: i64| Outage {
            server: format!("server-{n}"),
            last_ok_ms: n * 100,
            first_ok_ms: Some(n * 100 + 50),
            failed_tests: n as u64,
            ..Default::default()
        };
        for at in 1..=7 {
            // Snapshots 2, 3, 4 and 6 carry outages (3 carries two); only 4 closes an interval.
            let mut s = snapshot(at, at as u64 * 10, at == 4);
            s.outages = match at {
                2 | 4 | 6 => vec![outage(at * 10)],
                3 => vec![outage(31), outage(32)],
                _ => vec![],
            };
            // Each outage's twin: a client span named after it.
            s.client_spans = s
                .outages
                .iter()
                .map(|o| crate::trace::ClientSpan {
                    trace_id: o.server.clone(),
                    span_id: String::new(),
                    scenario: String::new(),
                    model: String::new(),
                    server: String::new(),
                    intended_ns: 0,
                    sent_ns: 0,
                    answered_ns: 0,
                    received_ns: None,
                    ok: true,
                })
                .collect();
            outbox.snapshot(&s).await.unwrap();
        }
        assert_eq!(outbox.backlog(), 3);
        store.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(outbox.finish(Duration::from_secs(5)).await.records, 0);
        let written = store.written();
        let delivered: Vec<String> = written
            .iter()
            .flat_map(|i| match i {
                Item::Snapshot(s) => s.outages.iter().map(|o| o.server.clone()).collect(),
                _ => vec![],
            })
            .collect();
        assert_eq!(
            delivered,
            [
                "server-20",
                "server-31",
                "server-32",
                "server-40",
                "server-60"
            ],
            "every outage is delivered, in the order the worker saw them"
        );
        let spans: Vec<String> = written
            .iter()
            .flat_map(|i| match i {
                Item::Snapshot(s) => s.client_spans.iter().map(|c| c.trace_id.clone()).collect(),
                _ => vec![],
            })
            .collect();
        assert_eq!(spans, delivered, "so is every client span");
        assert_eq!(
            describe(&written)[..3],
            [
                "snapshot 1 counts:1 intervals:0",
                // Snapshots 2 to 5 were dropped: their outages (and 4's interval and series
                // point) moved to snapshot 6, ahead of its own.
                "snapshot 6 counts:0 intervals:1 outages:5 point",
                "snapshot 7 counts:1 intervals:0",
            ]
        );
    }

    #[tokio::test]
    async fn what_cannot_be_delivered_by_the_deadline_is_counted_not_waited_for() {
        let store = Arc::new(SwitchableStore::default());
        store.down.store(true, Ordering::SeqCst);
        let outbox = Outbox::new(Arc::new(store.clone()), fast());
        outbox.snapshot(&snapshot(1, 10, true)).await.unwrap();
        outbox
            .event(EventKind::Failure, "1 failed tests")
            .await
            .unwrap();
        let started = Instant::now();
        let left = outbox.finish(Duration::from_millis(300)).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(left.records, 2);
        assert!(outbox.event(EventKind::Running, "late").await.is_err());
    }
}
