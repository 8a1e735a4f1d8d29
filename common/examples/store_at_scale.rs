//! The store at scale (scripts/bench-store-at-scale.sh runs it; not run by CI).
//!
//! ```sh
//! cargo run --release -p stress-common --example store_at_scale -- URL \
//!     [--workers 1000] [--duration-s 600] [--connections 64] \
//!     [--soak-workers 100] [--soak-hours 8] [--legacy]
//! ```
//!
//! Against the Postgres at URL, three phases:
//!
//! 1. **Live**: `--workers` simulated workers each write a snapshot every second for
//!    `--duration-s` through the worker's own calls (`StoreSink::snapshot`, i.e.
//!    `Store::record_snapshot`: heartbeat, latest QPS, cumulative scenario and model counts with
//!    their HDR histogram, and a QPS point and latency interval when the worker's
//!    `IntervalTracker` closes a series interval), sharing `--connections` connections, while a
//!    simulated driver polls every second as `driver/src/run/poll.rs`'s `observe` does (events after
//!    the last seen id, heartbeats and latest QPS, joined, on the driver's own default pool).
//!    Every 5 s one worker records an event, and the poller notes when it sees it. Prints the
//!    poll latency and that detection delay (p50/p99/max), the writes' latency and the
//!    snapshots written against those due, and the database's growth per table.
//! 2. **Soak image**: the rows a `--soak-workers` × `--soak-hours` run leaves in the store
//!    (what the store keeps of it: one QPS point and latency interval per series interval, the
//!    last snapshot's counts), written through the same calls; prints its size.
//! 3. **Legacy** (`--legacy`): the same run with a QPS sample every second per worker (what the
//!    store kept before the series was bounded), copied in SQL, to show `driver report` stays
//!    bounded on old runs too.
//!
//! The last lines are `RUN live|soak|legacy RUN_ID` for the script, which times `driver report`.

use hdrhistogram::Histogram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use stress_common::histogram::LatencyHistogram;
use stress_common::interval::{IntervalTracker, series_interval};
use stress_common::status::{
    EventKind, ModelCounts, Role, ScenarioCounts, StatusSink, WorkerSnapshot,
};
use stress_common::store::{Member, NewRun, Store, StoreOptions, StoreSink};
use tokio::sync::Mutex;

const POLL: Duration = Duration::from_secs(1);
const SCENARIO: &str = "Infer";
const MODEL: &str = "add_sub";

struct Args {
    url: String,
    workers: usize,
    duration: Duration,
    connections: u32,
    soak_workers: usize,
    soak_hours: u64,
    legacy: bool,
}

fn args() -> Args {
    let mut a = Args {
        url: String::new(),
        workers: 1000,
        duration: Duration::from_secs(600),
        connections: 64,
        soak_workers: 100,
        soak_hours: 8,
        legacy: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| panic!("{arg} needs a value"))
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("{arg}: {e}"))
        };
        match arg.as_str() {
            "--workers" => a.workers = value() as usize,
            "--duration-s" => a.duration = Duration::from_secs(value()),
            "--connections" => a.connections = value() as u32,
            "--soak-workers" => a.soak_workers = value() as usize,
            "--soak-hours" => a.soak_hours = value(),
            "--legacy" => a.legacy = true,
            url if !url.starts_with("--") && a.url.is_empty() => a.url = url.to_string(),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(!a.url.is_empty(), "give the Postgres URL");
    a
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn summary(name: &str, h: &Histogram<u64>) -> String {
    format!(
        "{name}: n={} p50={:.1} ms p99={:.1} ms max={:.1} ms",
        h.len(),
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    )
}

/// The run and its members, as the driver records them.
async fn create_run(store: &Store, run_id: &str, name: &str, workers: usize, started_at_ms: i64) {
    store
        .create_run(&NewRun {
            run_id: run_id.into(),
            name: name.into(),
            matrix_yaml: format!("# store_at_scale: {workers} simulated workers\n"),
            launcher: "simulated".into(),
            fingerprint: None,
            started_at_ms,
        })
        .await
        .expect("create run");
    for i in 0..workers {
        store
            .upsert_member(&Member {
                run_id: run_id.into(),
                member_id: format!("clients-{i}"),
                role: Role::Client,
                group_name: "clients".into(),
                index: i as u32,
                address: String::new(),
                process_name: "stress-worker".into(),
                corr_id_base: None,
                corr_id_block_size: None,
                command: String::new(),
            })
            .await
            .expect("member");
    }
}

/// One simulated worker's state: cumulative counts, as `worker/src/stats.rs` keeps them.
struct Worker {
    requests: u64,
    latency: LatencyHistogram,
    tracker: IntervalTracker,
}

impl Worker {
    fn new(interval: Duration, start_ms: i64) -> Self {
        Self {
            requests: 0,
            latency: LatencyHistogram::new(),
            tracker: IntervalTracker::new(interval, start_ms),
        }
    }

    /// `requests` more answered requests (a spread of latencies), then the snapshot at `at_ms`,
    /// with the interval it closes when one is due (or `last`), as `worker/src/run.rs` does.
    fn snapshot(
        &mut self,
        seed: u64,
        requests: u64,
        qps: f64,
        at_ms: i64,
        last: bool,
    ) -> WorkerSnapshot {
        for k in 0..requests.min(50) {
            let us = 800 + (seed.wrapping_mul(2654435761).wrapping_add(k * 7919) % 20_000);
            self.latency.record(Duration::from_micros(us));
        }
        self.requests += requests;
        let histogram = self.latency.encode();
        let models = vec![ModelCounts {
            scenario: SCENARIO.into(),
            model: MODEL.into(),
            tests: self.requests,
            failures: 0,
            requests: self.requests,
            latency_histogram: histogram.clone(),
            stream: None,
            uncounted_runs: 0,
        }];
        let due = last || self.tracker.due(at_ms);
        let closing = due.then(|| self.tracker.close(&models, at_ms).expect("interval"));
        let snapshot = WorkerSnapshot {
            at_ms,
            total_requests: self.requests,
            qps: if last { 0.0 } else { qps },
            scenarios: vec![ScenarioCounts {
                scenario: SCENARIO.into(),
                tests: self.requests,
                failures: 0,
                requests: self.requests,
                skipped: 0,
                latency_histogram: histogram,
                send_lateness_histogram: String::new(),
            }],
            models,
            intervals: closing
                .as_ref()
                .map(|c| c.intervals.clone())
                .unwrap_or_default(),
            series_point: due,
            signatures: vec![],
            outages: vec![],
            // As a worker's: a column of every series point at scale.
            rss_bytes: Some(64 << 20),
            deferred_clients: 0,
            unanswered: vec![],
            client_spans: vec![],
            client_program: None,
        };
        if let Some(c) = closing {
            self.tracker.commit(c);
        }
        snapshot
    }
}

/// pg_total_relation_size of each table we look at, and pg_database_size.
async fn sizes(store_url: &str) -> Vec<(String, i64)> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(store_url)
        .await
        .expect("connect");
    let mut out: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname::text, pg_total_relation_size(c.oid) FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY relname",
    )
    .fetch_all(&mut conn)
    .await
    .expect("table sizes");
    let db: (i64,) = sqlx::query_as("SELECT pg_database_size(current_database())")
        .fetch_one(&mut conn)
        .await
        .expect("database size");
    out.push(("(database)".into(), db.0));
    conn.close().await.ok();
    out
}

fn growth(before: &[(String, i64)], after: &[(String, i64)]) -> Vec<(String, i64)> {
    after
        .iter()
        .map(|(t, a)| {
            let b = before.iter().find(|(n, _)| n == t).map_or(0, |(_, b)| *b);
            (t.clone(), a - b)
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn count(url: &str, sql: &'static str, run_id: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let n: (i64,) = sqlx::query_as(sql)
        .bind(run_id)
        .fetch_one(&mut conn)
        .await
        .expect(sql);
    conn.close().await.ok();
    n.0
}

/// What the simulated workers share: the snapshots written, their write latencies, and the
/// probe events recorded (id, when) that the poller has not seen yet.
#[derive(Clone)]
struct Shared {
    written: Arc<AtomicU64>,
    write_latency: Arc<Mutex<Histogram<u64>>>,
    probes: Arc<Mutex<Vec<(i64, Instant)>>>,
}

/// When the simulated workers write: every [`POLL`] for `duration` from `start`, `workers` of
/// them spread over the first second, closing a series interval every `interval`.
#[derive(Clone, Copy)]
struct Schedule {
    duration: Duration,
    workers: u64,
    interval: Duration,
    start: Instant,
}

/// What the simulated driver's polls measured.
struct PollStats {
    polls: Histogram<u64>,
    events_read: Histogram<u64>,
    detection: Histogram<u64>,
    errors: u64,
}

async fn live(a: &Args, pg_url: &str) -> String {
    let writers = Store::connect_with(
        &a.url,
        &StoreOptions {
            max_connections: a.connections,
            ..StoreOptions::default()
        },
    )
    .await
    .expect("connect the workers' store");
    let t0 = stress_common::now_ms();
    let run_id = stress_common::contract::RunId::new(format!("live-{t0}"));
    create_run(&writers, &run_id, "store-at-scale-live", a.workers, t0).await;
    let before = sizes(pg_url).await;
    let interval = series_interval(Some(a.duration), POLL);
    println!(
        "live: {} workers x {} s, a snapshot each per {:?}, series interval {:?}, {} connections",
        a.workers,
        a.duration.as_secs(),
        POLL,
        interval,
        a.connections
    );

    let shared = Shared {
        written: Arc::new(AtomicU64::new(0)),
        write_latency: Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap())),
        probes: Arc::default(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let schedule = Schedule {
        duration: a.duration,
        workers: a.workers as u64,
        interval,
        start: Instant::now(),
    };
    let tasks: Vec<_> = (0..a.workers)
        .map(|i| {
            let sink = writers.sink(&run_id, format!("clients-{i}"));
            tokio::spawn(simulated_worker(i, sink, schedule, shared.clone()))
        })
        .collect();
    let poller = spawn_poller(
        a.url.clone(),
        run_id.clone(),
        shared.probes.clone(),
        stop.clone(),
    );
    for t in tasks {
        t.await.expect("worker task");
    }
    let elapsed = schedule.start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let stats = tokio::task::spawn_blocking(move || poller.join())
        .await
        .expect("join")
        .expect("poller");
    writers
        .finish_run(&run_id, "PASS", stress_common::now_ms())
        .await
        .expect("finish");
    let after = sizes(pg_url).await;

    print_written(a, shared.written.load(Ordering::Relaxed), elapsed);
    print_latencies(&*shared.write_latency.lock().await, &stats);
    print_rows(pg_url, &run_id, a.workers).await;
    for (table, bytes) in growth(&before, &after) {
        println!("live: growth {table}: {:.2} MiB", mib(bytes));
    }
    writers.close().await;
    run_id.to_string()
}

/// Simulated worker `i`: a snapshot every [`POLL`] until the run's end, and every 5 s (spread
/// over the workers) a probe event the driver must see, as a FAILURE event reaches fail-fast.
async fn simulated_worker(i: usize, sink: StoreSink, schedule: Schedule, shared: Shared) {
    let Schedule {
        duration,
        workers,
        interval,
        start,
    } = schedule;
    // Workers start spread over the first second, as real ones would.
    let phase = Duration::from_millis(i as u64 * 1000 / workers);
    tokio::time::sleep(phase).await;
    sink.event(EventKind::Running, "simulated worker")
        .await
        .expect("event");
    let mut w = Worker::new(interval, stress_common::now_ms());
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + POLL, POLL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tick = 0u64;
    let mut local = Histogram::<u64>::new(3).unwrap();
    loop {
        ticker.tick().await;
        tick += 1;
        let last = start.elapsed() + POLL / 2 > duration + phase;
        let rate = 200 + (i as u64 % 50);
        let snapshot = w.snapshot(
            i as u64 * 1_000_003 + tick,
            rate,
            rate as f64,
            stress_common::now_ms(),
            last,
        );
        let t = Instant::now();
        sink.snapshot(&snapshot).await.expect("snapshot");
        local.record(t.elapsed().as_micros() as u64).ok();
        shared.written.fetch_add(1, Ordering::Relaxed);
        // Every 5 s one worker reports something the driver must see (the way a
        // FAILURE event reaches fail-fast), spread over the workers.
        if tick.is_multiple_of(5) && (tick / 5) % workers == i as u64 {
            let id = sink
                .store
                .record_event(
                    &sink.run_id,
                    &sink.member_id,
                    EventKind::Running,
                    "probe event",
                )
                .await
                .expect("probe event");
            shared.probes.lock().await.push((id, Instant::now()));
        }
        if last {
            break;
        }
    }
    shared.write_latency.lock().await.add(&local).unwrap();
}

/// The driver's poll loop: a process of its own in a real run, so here a thread with its own
/// runtime and the driver's own store (opened as `driver run` opens it), which the workers'
/// tasks do not delay. It polls until `stop`.
fn spawn_poller(
    url: String,
    run_id: stress_common::contract::RunId,
    probes: Arc<Mutex<Vec<(i64, Instant)>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<PollStats> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the poller's runtime");
    std::thread::spawn(move || rt.block_on(poll_loop(url, run_id, probes, stop)))
}

/// Polls as `driver/src/run/poll.rs`'s `observe` does, every [`POLL`] until `stop`, noting
/// when it sees each probe event.
async fn poll_loop(
    url: String,
    run_id: stress_common::contract::RunId,
    probes: Arc<Mutex<Vec<(i64, Instant)>>>,
    stop: Arc<AtomicBool>,
) -> PollStats {
    let driver = Store::connect(&url)
        .await
        .expect("connect the driver's store");
    let limit = Duration::from_secs(3);
    let mut polls = Histogram::<u64>::new(3).unwrap();
    let mut events_read = Histogram::<u64>::new(3).unwrap();
    let mut detection = Histogram::<u64>::new(3).unwrap();
    let mut last_id = 0;
    let mut errors = 0u64;
    let mut ticker = tokio::time::interval(POLL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let t = Instant::now();
        let timed_events = async {
            let r = stress_common::store::within(limit, driver.events(&run_id, last_id)).await;
            (r, t.elapsed())
        };
        let ((events, events_took), heartbeats, latest) = tokio::join!(
            timed_events,
            stress_common::store::within(limit, driver.heartbeats(&run_id)),
            stress_common::store::within(limit, driver.latest_qps(&run_id)),
        );
        let seen = Instant::now();
        polls.record(t.elapsed().as_micros() as u64).ok();
        events_read.record(events_took.as_micros() as u64).ok();
        match (events, heartbeats, latest) {
            (Ok(events), Ok(_), Ok(_)) => {
                if let Some(e) = events.last() {
                    last_id = e.id;
                }
                let mut p = probes.lock().await;
                p.retain(|(id, at)| {
                    if events.iter().any(|e| e.id == *id) {
                        detection
                            .record(seen.duration_since(*at).as_micros() as u64)
                            .ok();
                        false
                    } else {
                        true
                    }
                });
            }
            _ => errors += 1,
        }
    }
    driver.close().await;
    PollStats {
        polls,
        events_read,
        detection,
        errors,
    }
}

/// The snapshots written against those due (one a second per worker), and their rate.
fn print_written(a: &Args, n: u64, elapsed: Duration) {
    let due = a.workers as u64 * a.duration.as_secs();
    println!(
        "live: snapshots written {n} of {due} due ({:.1}%), {:.0}/s over {:.1} s",
        100.0 * n as f64 / due as f64,
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
}

/// The live phase's latencies: the workers' writes, the driver's polls, and how long an
/// event took to reach the driver.
fn print_latencies(write_latency: &Histogram<u64>, stats: &PollStats) {
    println!("{}", summary("live: snapshot write", write_latency));
    println!(
        "{}  (target p99 <= 200 ms)",
        summary(
            "live: driver poll (events+heartbeats+latest QPS)",
            &stats.polls
        )
    );
    println!(
        "{}  (target p99 <= 200 ms)",
        summary(
            "live: fail-fast read (events after the last id)",
            &stats.events_read
        )
    );
    println!(
        "{}  (includes waiting for the next {:?} poll; target p99 <= {} ms)",
        summary("live: event commit -> seen by the driver", &stats.detection),
        POLL,
        POLL.as_millis() + 200
    );
    println!("live: poll errors {}", stats.errors);
}

/// The rows the live phase left in the series tables.
async fn print_rows(pg_url: &str, run_id: &str, workers: usize) {
    println!(
        "live: rows: qps_samples {}, latency_intervals {} ({:.1} QPS points per worker)",
        count(
            pg_url,
            "SELECT COUNT(*) FROM qps_samples WHERE run_id = $1",
            run_id
        )
        .await,
        count(
            pg_url,
            "SELECT COUNT(*) FROM latency_intervals WHERE run_id = $1",
            run_id
        )
        .await,
        count(
            pg_url,
            "SELECT COUNT(*) FROM qps_samples WHERE run_id = $1",
            run_id
        )
        .await as f64
            / workers as f64
    );
}

/// What the store keeps of a `soak_workers` × `soak_hours` run, written through the same calls.
async fn soak(a: &Args, pg_url: &str) -> String {
    let store = Store::connect_with(
        &a.url,
        &StoreOptions {
            max_connections: a.connections.min(16),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("connect");
    let duration = Duration::from_secs(a.soak_hours * 3600);
    let interval = series_interval(Some(duration), POLL);
    let t0 = stress_common::now_ms() - duration.as_millis() as i64;
    let run_id = stress_common::contract::RunId::new(format!("soak-{t0}"));
    let before = sizes(pg_url).await;
    create_run(&store, &run_id, "store-at-scale-soak", a.soak_workers, t0).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..a.soak_workers {
        let sink = store.sink(&run_id, format!("clients-{i}"));
        tasks.push(tokio::spawn(async move {
            sink.event(EventKind::Running, "simulated worker")
                .await
                .expect("event");
            let mut w = Worker::new(interval, t0);
            let polls = duration.as_secs();
            // Only the snapshots the store keeps a trace of: each series point (its QPS point
            // and interval) and the last; the others only replace counts that the next
            // series point replaces again.
            let step = interval.as_secs().max(1);
            let mut s = step;
            while s <= polls {
                let rate = 200 + i as u64 % 50;
                let snapshot = w.snapshot(
                    i as u64 + s,
                    rate * step,
                    rate as f64,
                    t0 + s as i64 * 1000,
                    s == polls,
                );
                sink.snapshot(&snapshot).await.expect("snapshot");
                s += step;
            }
            sink.event(EventKind::Success, "done").await.expect("event");
        }));
    }
    for t in tasks {
        t.await.expect("soak worker");
    }
    store
        .finish_run(&run_id, "PASS", stress_common::now_ms())
        .await
        .expect("finish");
    let after = sizes(pg_url).await;
    println!(
        "soak: {} workers x {} h (series interval {:?}) written in {:.1} s: qps_samples {} rows, latency_intervals {} rows",
        a.soak_workers,
        a.soak_hours,
        interval,
        started.elapsed().as_secs_f64(),
        count(
            pg_url,
            "SELECT COUNT(*) FROM qps_samples WHERE run_id = $1",
            &run_id
        )
        .await,
        count(
            pg_url,
            "SELECT COUNT(*) FROM latency_intervals WHERE run_id = $1",
            &run_id
        )
        .await,
    );
    let mut total = 0;
    for (table, bytes) in growth(&before, &after) {
        println!("soak: growth {table}: {:.2} MiB", mib(bytes));
        if table == "(database)" {
            total = bytes;
        }
    }
    println!(
        "soak: store size of the run: {:.1} MiB (target < 1024 MiB)",
        mib(total)
    );
    store.close().await;
    run_id.to_string()
}

/// The soak run again with a QPS sample per worker per second, as the store kept them before
/// the series was bounded (copied in SQL: only the samples differ).
async fn legacy(a: &Args, pg_url: &str, soak_run: &str) -> String {
    use sqlx::Connection;
    let run_id = format!("legacy-{soak_run}");
    let before = sizes(pg_url).await;
    let mut conn = sqlx::PgConnection::connect(pg_url).await.expect("connect");
    let started = Instant::now();
    for sql in [
        "INSERT INTO runs (run_id, name, matrix_yaml, launcher, started_at_ms, finished_at_ms, verdict)
         SELECT $2, 'store-at-scale-legacy', matrix_yaml, launcher, started_at_ms, finished_at_ms, verdict
         FROM runs WHERE run_id = $1",
        "INSERT INTO members (run_id, member_id, role, group_name, member_index, address, process_name, command)
         SELECT $2, member_id, role, group_name, member_index, address, process_name, command
         FROM members WHERE run_id = $1",
        "INSERT INTO events (run_id, member_id, at_ms, kind, details)
         SELECT $2, member_id, at_ms, kind, details FROM events WHERE run_id = $1 ORDER BY id",
        "INSERT INTO scenario_counts (run_id, member_id, scenario, tests, failures, requests, skipped, latency_histogram, updated_at_ms)
         SELECT $2, member_id, scenario, tests, failures, requests, skipped, latency_histogram, updated_at_ms
         FROM scenario_counts WHERE run_id = $1",
        "INSERT INTO model_counts (run_id, member_id, scenario, model, tests, failures, requests, latency_histogram, stream, updated_at_ms)
         SELECT $2, member_id, scenario, model, tests, failures, requests, latency_histogram, stream, updated_at_ms
         FROM model_counts WHERE run_id = $1",
        "INSERT INTO latency_intervals (run_id, member_id, scenario, model, start_ms, end_ms, requests, failures, latency_histogram)
         SELECT $2, member_id, scenario, model, start_ms, end_ms, requests, failures, latency_histogram
         FROM latency_intervals WHERE run_id = $1",
        // A sample per second per worker, with the rate and total the soak run's workers had.
        "INSERT INTO qps_samples (run_id, member_id, at_ms, qps, total_requests)
         SELECT $2, m.member_id, r.started_at_ms + s * 1000, 200 + m.member_index % 50,
                (200 + m.member_index % 50) * s
         FROM members m JOIN runs r ON r.run_id = m.run_id,
              generate_series(1, (r.finished_at_ms - r.started_at_ms) / 1000) s
         WHERE m.run_id = $1 AND r.started_at_ms + s * 1000 <= r.finished_at_ms",
    ] {
        sqlx::query(sql)
            .bind(soak_run)
            .bind(&run_id)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
    }
    conn.close().await.ok();
    let after = sizes(pg_url).await;
    let db = growth(&before, &after)
        .into_iter()
        .find(|(t, _)| t == "(database)")
        .map_or(0, |(_, b)| b);
    println!(
        "legacy: the soak run with a QPS sample per second: qps_samples {} rows, store size {:.1} MiB (copied in {:.1} s)",
        count(
            pg_url,
            "SELECT COUNT(*) FROM qps_samples WHERE run_id = $1",
            &run_id
        )
        .await,
        mib(db),
        started.elapsed().as_secs_f64()
    );
    let _ = a;
    run_id
}

#[tokio::main]
async fn main() {
    let a = args();
    // sqlx's Any driver wants `postgres://`; its Postgres driver takes the same URL.
    let pg_url = a.url.clone();
    let live_run = if a.workers > 0 {
        Some(live(&a, &pg_url).await)
    } else {
        None
    };
    let soak_run = soak(&a, &pg_url).await;
    let legacy_run = if a.legacy {
        Some(legacy(&a, &pg_url, &soak_run).await)
    } else {
        None
    };
    if let Some(r) = live_run {
        println!("RUN live {r}");
    }
    println!("RUN soak {soak_run}");
    if let Some(r) = legacy_run {
        println!("RUN legacy {r}");
    }
}
