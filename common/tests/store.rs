//! The status store tells the same story on both backends: each capability's story is an async
//! fn of the store's URL, run by a `sqlite_*` test on a temporary SQLite file and a `postgres_*`
//! test on a throwaway PostgreSQL cluster (or `TEST_DATABASE_URL`). Without Postgres binaries the
//! Postgres tests fail, unless `TRITON_STRESS_SKIP_POSTGRES=1` (then they say SKIPPED; refused
//! under `CI`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stress_common::contract::{MemberName, RunId};
use stress_common::histogram::LatencyHistogram;
use stress_common::now_ms;
use stress_common::qps::QpsSummary;
use stress_common::qps::{QpsSample, QpsSpan};
use stress_common::signature::{Signature, SignatureCount};
use stress_common::status::{
    DRIVER_MEMBER, EventKind, FailureRecord, Forensics, IntervalCounts, LoadTarget, ModelCounts,
    Outage, PreviousUse, Role, ScenarioCounts, StatusSink, Stopping, StreamCounts, UnansweredCalls,
    WireStep, WorkerSnapshot,
};
use stress_common::store::testing::{self, TestPostgres};
use stress_common::store::{
    Document, EventRow, Member, NewRun, RunRow, Store, StoreError, StoreOptions,
};
use stress_common::triton_metrics::{ModelMetrics, ServerGauges, ServerSample};

// ---- The backends: every story runs on both

/// A new SQLite store: its URL, and the temporary directory that holds it (removed on drop).
fn sqlite_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = Store::sqlite_url(&dir.path().join("status.sqlite"));
    (dir, url)
}

/// The Postgres database of the running test: a throwaway cluster of its own, or
/// `TEST_DATABASE_URL`. No Postgres fails the test; `None` only on a requested skip, which says
/// SKIPPED on stderr (and is refused under `CI`).
fn postgres() -> Option<TestPostgres> {
    TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// The pair of tests of one story (an `async fn(url: &str)`): `$sqlite` runs it on a new SQLite
/// file, `$postgres` on [`postgres`]'s database.
macro_rules! on_both_backends {
    ($story:ident, $sqlite:ident, $postgres:ident) => {
        #[tokio::test]
        async fn $sqlite() {
            let (_dir, url) = sqlite_store();
            $story(&url).await;
        }

        #[tokio::test]
        async fn $postgres() {
            let Some(pg) = postgres() else { return };
            $story(pg.url()).await;
        }
    };
}

/// The URL of another database on the same Postgres server.
fn sqlx_url_with_db(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let base = &base[..base.rfind('/').unwrap()];
    if query.is_empty() {
        format!("{base}/{db}")
    } else {
        format!("{base}/{db}?{query}")
    }
}

async fn create_database(admin_url: &str, db: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

// ---- Fixtures

/// The newest schema version (a new migration bumps it here, on purpose).
const LATEST_SCHEMA: i64 = 23;

/// Ids unique across processes and test runs, so a shared `TEST_DATABASE_URL` works too.
fn unique(prefix: &str) -> RunId {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    RunId::new(format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        now_ms(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

fn histogram(latencies_ms: &[u64]) -> String {
    let mut h = LatencyHistogram::new();
    for ms in latencies_ms {
        h.record(Duration::from_millis(*ms));
    }
    h.encode()
}

fn member(run_id: &str, member_id: &str, role: Role, group: &str, index: u32) -> Member {
    Member {
        run_id: run_id.to_string(),
        member_id: member_id.to_string(),
        role,
        group_name: group.to_string(),
        index,
        address: format!("127.0.0.1:{}", 8000 + index),
        process_name: format!("{member_id}-proc"),
        corr_id_base: None,
        corr_id_block_size: None,
        command: format!("stress-worker --member {member_id} --quoted 'a b'"),
    }
}

/// A worker's snapshot taken now, a series point, with the counts of one scenario.
fn snapshot_now(total_requests: u64, qps: f64, counts: ScenarioCounts) -> WorkerSnapshot {
    WorkerSnapshot {
        at_ms: now_ms(),
        total_requests,
        qps,
        scenarios: vec![counts],
        series_point: true,
        ..WorkerSnapshot::default()
    }
}

/// The counts of `tests` runs of a scenario `s`.
fn scenario_s(tests: u64) -> ScenarioCounts {
    ScenarioCounts {
        scenario: "s".into(),
        tests,
        ..ScenarioCounts::default()
    }
}

/// A worker's snapshot that carries outages, and nothing else.
fn outages_at(at_ms: i64, outages: Vec<Outage>) -> WorkerSnapshot {
    WorkerSnapshot {
        at_ms,
        outages,
        ..WorkerSnapshot::default()
    }
}

/// A run of an empty matrix, launched locally.
fn new_run(run_id: &RunId, name: &str, started_at_ms: i64) -> NewRun {
    NewRun {
        run_id: run_id.to_string(),
        name: name.into(),
        matrix_yaml: "groups: []\n".into(),
        launcher: "local".into(),
        started_at_ms,
        fingerprint: None,
    }
}

/// Everything a run holds, read back through the API.
#[derive(Debug, PartialEq)]
struct Everything {
    run: Option<RunRow>,
    members: Vec<Member>,
    events: Vec<EventRow>,
    first_failure: Option<EventRow>,
    heartbeats: Vec<(String, i64)>,
    qps: Vec<QpsSample>,
    counts: Vec<(String, ScenarioCounts)>,
    model_counts: Vec<(String, i64, ModelCounts)>,
    failures: Vec<(String, FailureRecord)>,
    failure_totals: Vec<(String, u64)>,
    notes: Vec<(String, Note)>,
}

/// A kind of document of this test's own (the driver owns the real kinds): replaced per key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Note {
    text: String,
    n: u32,
}

impl Document for Note {
    const KIND: &'static str = "test_note";
}

fn note(text: &str, n: u32) -> Note {
    Note {
        text: text.into(),
        n,
    }
}

/// Another kind, read leniently: a stored value of another shape reads as a default.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Verdict {
    rule: String,
    ok: bool,
}

impl Document for Verdict {
    const KIND: &'static str = "test_verdict";
    fn from_stored(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        Ok(serde_json::from_value(value).unwrap_or_default())
    }
}

async fn everything(store: &Store, run_id: &RunId) -> Everything {
    Everything {
        run: store.run(run_id).await.unwrap(),
        members: store.members(run_id).await.unwrap(),
        events: store.events(run_id, 0).await.unwrap(),
        first_failure: store.first_failure(run_id).await.unwrap(),
        heartbeats: store.heartbeats(run_id).await.unwrap(),
        qps: store.qps_samples(run_id).await.unwrap(),
        counts: store.scenario_counts(run_id).await.unwrap(),
        model_counts: store.model_counts(run_id).await.unwrap(),
        failures: store.failures(run_id).await.unwrap(),
        failure_totals: store.failure_totals(run_id).await.unwrap(),
        notes: store.documents(&RunId::new(run_id)).await.unwrap(),
    }
}

// ---- The whole story: runs, members, events, stops, heartbeats, snapshots, series, load
// targets, baselines, documents, failures, finishing, leases, and all of it after a reconnect

/// The whole story. `fresh`: the database holds nothing but what this story writes.
async fn story(url: &str, fresh: bool) {
    let store = Store::connect(url).await.expect("connect");
    assert_eq!(store.schema_version().await.unwrap(), LATEST_SCHEMA);
    // A second connect is a no-op.
    let again = Store::connect(url).await.expect("second connect");
    assert_eq!(again.schema_version().await.unwrap(), LATEST_SCHEMA);
    again.close().await;

    // ---- runs
    let t0 = now_ms();
    let old_run = unique("old-run");
    let run_id = unique("run");
    let yesterday = new_run(&old_run, "yesterday", t0 - 86_400_000);
    store.create_run(&yesterday).await.unwrap();
    let nightly = NewRun {
        matrix_yaml: "groups:\n  - name: seq\n    servers: 1\n    clients: 2\n".into(),
        fingerprint: Some("mfp1-0123456789abcdef".into()),
        ..new_run(&run_id, "nightly L0 'soak'", t0)
    };
    // A restarted driver with the same run id continues the run: what is recorded stays.
    let restarted = NewRun {
        name: "a restarted driver".into(),
        started_at_ms: t0 + 1,
        ..nightly.clone()
    };
    for run in [&nightly, &restarted] {
        store.create_run(run).await.unwrap();
    }
    let row = store.run(&run_id).await.unwrap().expect("the run");
    assert_eq!(row.name, nightly.name);
    assert_eq!(row.matrix_yaml, nightly.matrix_yaml);
    assert_eq!(row.fingerprint, nightly.fingerprint);
    assert_eq!((row.finished_at_ms, row.verdict), (None, None));
    assert_eq!(store.run(&"no-such-run".into()).await.unwrap(), None);

    // ---- members
    let server = member(&run_id, "server-0", Role::Server, "seq", 0);
    let mut client0 = member(&run_id, "client-0", Role::Client, "seq", 0);
    client0.corr_id_base = Some(u64::MAX - 999);
    client0.corr_id_block_size = Some(1000);
    let mut client1 = member(&run_id, "client-1", Role::Client, "seq", 1);
    client1.corr_id_base = Some(1_000_000);
    client1.corr_id_block_size = Some(1000);
    for m in [&client1, &server, &client0] {
        store.upsert_member(m).await.unwrap();
    }
    client0.address = "10.0.0.7:8001".into();
    store.upsert_member(&client0).await.unwrap(); // replaces
    let members = store.members(&run_id).await.unwrap();
    let ids: Vec<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, ["client-0", "server-0", "client-1"]); // by group, index, id
    assert_eq!(members[0], client0);
    assert_eq!(members[1], server);
    assert_eq!(members[2], client1);
    assert!(store.members(&old_run).await.unwrap().is_empty());

    // ---- events, polled the way the driver does
    let s0 = store.sink(run_id.clone(), "server-0");
    let c0 = store.sink(run_id.clone(), "client-0");
    let c1 = store.sink(run_id.clone(), "client-1");
    s0.event(
        EventKind::Starting,
        "tritonserver --model-repository=/models",
    )
    .await
    .unwrap();
    s0.event(EventKind::Running, "ready").await.unwrap();
    let seen = store.events(&run_id, 0).await.unwrap();
    assert_eq!(
        seen.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [EventKind::Starting, EventKind::Running]
    );
    assert!(
        seen.iter()
            .all(|e| e.member_id == "server-0" && e.at_ms >= t0)
    );
    let mut last = seen.last().unwrap().id;
    assert!(store.events(&run_id, last).await.unwrap().is_empty());

    let id = store
        .record_event(&run_id, &"client-0".into(), EventKind::Starting, "")
        .await
        .unwrap();
    assert!(id > last);
    c0.event(EventKind::Running, "3 scenarios").await.unwrap();
    c1.event(EventKind::Starting, "").await.unwrap();
    let new = store.events(&run_id, last).await.unwrap();
    assert_eq!(new.len(), 3);
    assert_eq!(new[0].id, id);
    assert!(new.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(
        (
            new[1].member_id.as_str(),
            new[1].kind,
            new[1].details.as_str()
        ),
        ("client-0", EventKind::Running, "3 scenarios")
    );
    last = new.last().unwrap().id;
    assert!(store.events(&run_id, last).await.unwrap().is_empty());
    assert_eq!(store.first_failure(&run_id).await.unwrap(), None);

    c1.event(EventKind::Failure, "sequence 1000007: expected 3, got 4")
        .await
        .unwrap();
    c0.event(EventKind::Failure, "a later failure")
        .await
        .unwrap();
    let failure = store
        .first_failure(&run_id)
        .await
        .unwrap()
        .expect("a failure");
    assert_eq!(failure.member_id, "client-1");
    assert_eq!(failure.details, "sequence 1000007: expected 3, got 4");
    assert_eq!(store.events(&run_id, last).await.unwrap()[0], failure);
    assert_eq!(store.events(&run_id, 0).await.unwrap().len(), 7);
    assert!(store.events(&old_run, 0).await.unwrap().is_empty());
    assert_eq!(store.first_failure(&old_run).await.unwrap(), None);

    // ---- the driver's stop, as a worker reads it (through its sink)
    let driver_says = async |run: &RunId, kind: EventKind, details: &str| {
        store
            .record_event(run, &DRIVER_MEMBER.into(), kind, details)
            .await
            .unwrap();
    };
    assert_eq!(c0.stopping().await.unwrap(), None);
    let failed = Stopping::Failed {
        member: "client-1".into(),
    };
    // The same words from a worker, or as another kind, are no stop.
    c1.event(EventKind::Running, &failed.details())
        .await
        .unwrap();
    driver_says(&run_id, EventKind::Failure, &failed.details()).await;
    assert_eq!(c0.stopping().await.unwrap(), None);
    driver_says(&run_id, EventKind::Running, "interrupted").await;
    assert_eq!(store.stopping(&run_id).await.unwrap(), None);
    driver_says(&run_id, EventKind::Running, &failed.details()).await;
    // The first stop is the one: the run failed before its load phase ended.
    let ended = Stopping::LoadPhaseEnded.details();
    driver_says(&run_id, EventKind::Running, &ended).await;
    assert_eq!(c0.stopping().await.unwrap(), Some(failed.clone()));
    // An event says what the store's query says.
    let said: Vec<Stopping> = store
        .events(&run_id, 0)
        .await
        .unwrap()
        .iter()
        .filter_map(|e| e.stopping())
        .collect();
    assert_eq!(said, [failed, Stopping::LoadPhaseEnded]);
    assert_eq!(store.stopping(&old_run).await.unwrap(), None);
    driver_says(&old_run, EventKind::Running, &ended).await;
    assert_eq!(
        store.stopping(&old_run).await.unwrap(),
        Some(Stopping::LoadPhaseEnded)
    );

    // ---- heartbeats (one row per member)
    for at_ms in [t0 + 1, t0 + 5] {
        store
            .heartbeat(&run_id, &"server-0".into(), at_ms)
            .await
            .unwrap();
    }
    assert_eq!(
        store.heartbeats(&run_id).await.unwrap(),
        [("server-0".to_string(), t0 + 5)]
    );
    s0.heartbeat().await.unwrap(); // the sink stamps now
    let beats = store.heartbeats(&run_id).await.unwrap();
    assert!(beats[0].1 >= t0, "{beats:?}");

    // ---- snapshots twice: counts are replaced, QPS samples accumulate
    let counts_a1 = ScenarioCounts {
        scenario: "sequence_no_end".into(),
        tests: 10,
        failures: 1,
        requests: 100,
        skipped: 2,
        latency_histogram: histogram(&[1, 2, 3]),
        send_lateness_histogram: String::new(),
    };
    let counts_b1 = ScenarioCounts {
        scenario: "infer_simple".into(),
        tests: 5,
        failures: 0,
        requests: 5,
        skipped: 0,
        latency_histogram: histogram(&[7]),
        send_lateness_histogram: histogram(&[40, 60]),
    };
    let model_a1 = ModelCounts {
        scenario: "Infer".into(),
        model: "text_vector".into(),
        tests: 3,
        failures: 1,
        requests: 30,
        latency_histogram: histogram(&[4, 5]),
        stream: None,
        uncounted_runs: 0,
    };
    let model_b1 = ModelCounts {
        scenario: "Infer".into(),
        model: "decoupled_repeat".into(),
        tests: 2,
        failures: 0,
        requests: 2,
        latency_histogram: histogram(&[9]),
        stream: Some(StreamCounts {
            streams: 2,
            responses: 7,
            first_response_histogram: histogram(&[1, 2]),
            inter_response_histogram: histogram(&[3, 3, 3, 3, 3]),
        }),
        // A perf_analyzer run killed at the stop (the column round-trips).
        uncounted_runs: 3,
    };
    store
        .record_snapshot(
            &run_id,
            &"client-0".into(),
            &WorkerSnapshot {
                at_ms: t0 + 1000,
                total_requests: 105,
                qps: 105.0,
                scenarios: vec![counts_a1.clone(), counts_b1.clone()],
                models: vec![model_a1.clone(), model_b1.clone()],
                series_point: true,
                rss_bytes: Some(123 << 20),
                ..WorkerSnapshot::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.worker_rss(&run_id).await.unwrap(),
        [("client-0".to_string(), t0 + 1000, 123 << 20)],
        "a series point keeps the worker's memory"
    );
    let counts_a2 = ScenarioCounts {
        tests: 20,
        failures: 2,
        requests: 200,
        // beyond i64: must round-trip bit for bit
        skipped: u64::MAX,
        latency_histogram: histogram(&[1, 2, 3, 4, 500]),
        ..counts_a1.clone()
    };
    let model_a2 = ModelCounts {
        tests: u64::MAX,
        latency_histogram: histogram(&[4, 5, 6]),
        ..model_a1.clone()
    };
    let interval = IntervalCounts {
        scenario: "a".into(),
        model: "m".into(),
        start_ms: t0 + 1000,
        end_ms: t0 + 2000,
        requests: 95,
        failures: u64::MAX,
        latency_histogram: histogram(&[1, 2, 3, 500]),
    };
    // Failures per signature: counted by the worker, replaced by each snapshot.
    let signature = |n: u64| stress_common::signature::SignatureCount {
        signature: stress_common::signature::Signature::new(
            "a",
            "m",
            "OUTPUT0 [3]",
            "server error (Internal): a stub died",
        ),
        count: n,
        first_at_ms: t0 + 100,
        last_at_ms: t0 + 100 * n as i64,
    };
    c0.snapshot(&WorkerSnapshot {
        at_ms: t0 + 1900,
        signatures: vec![signature(6)],
        ..Default::default()
    })
    .await
    .unwrap();
    let at_2000 = WorkerSnapshot {
        at_ms: t0 + 2000,
        total_requests: 210,
        qps: 105.5,
        scenarios: vec![counts_a2.clone()],
        models: vec![model_a2.clone()],
        intervals: vec![interval.clone()],
        series_point: true,
        signatures: vec![signature(9)],
        ..WorkerSnapshot::default()
    };
    c0.snapshot(&at_2000).await.unwrap();
    // Written again (a retry whose first commit landed but whose answer was lost): its
    // interval and series point are stored once (read back below).
    store
        .record_snapshot(&run_id, &"client-0".into(), &at_2000)
        .await
        .unwrap();
    let the_latest_signatures = async || {
        assert_eq!(
            store.signature_counts(&run_id).await.unwrap(),
            [("client-0".to_string(), signature(9))]
        );
    };
    the_latest_signatures().await;
    // A snapshot older than the stored one (a write a paused store commits late) takes
    // nothing back: the counts, the latest sample and the heartbeat read below are t0 + 2000's.
    c0.snapshot(&WorkerSnapshot {
        at_ms: t0 + 1200,
        total_requests: 100,
        qps: 1.0,
        scenarios: vec![counts_a1.clone()],
        models: vec![model_a1.clone()],
        signatures: vec![signature(7)],
        ..Default::default()
    })
    .await
    .unwrap();
    the_latest_signatures().await;
    let held = UnansweredCalls {
        server: "127.0.0.1:8001".into(),
        calls: 3,
        quiet_since_ms: t0 + 500,
    };
    c1.snapshot(&WorkerSnapshot {
        at_ms: t0 + 1500,
        total_requests: 0,
        qps: f64::NAN, // stored as 0
        series_point: true,
        // Inside a perf_analyzer run: its QPS 0 is not a stall (the latest sample says so).
        deferred_clients: 2,
        // And a server holds one of its calls: the driver's poll reads it back.
        unanswered: vec![held.clone()],
        ..WorkerSnapshot::default()
    })
    .await
    .unwrap();
    // The series: a worker's interval is read back by its end time; a server's sample whole.
    assert_eq!(
        store
            .latency_intervals(&run_id, t0 + 1500, t0 + 2500)
            .await
            .unwrap(),
        [("client-0".to_string(), interval.clone())]
    );
    assert!(
        store
            .latency_intervals(&run_id, t0 + 2001, i64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    let sample = ServerSample {
        at_ms: t0 + 2000,
        interval_ms: 1000,
        rss_bytes: Some(123.0e6),
        memory_limit_bytes: Some(2.0 * 1024.0 * 1024.0 * 1024.0),
        unscraped_ms: Some(1500),
        gauges: ServerGauges {
            cpu_utilization: Some(0.5),
            ..Default::default()
        },
        models: vec![ModelMetrics {
            model: "a".into(),
            version: "1".into(),
            success: 10.0,
            failure_by_reason: [("BACKEND".to_string(), 1.0)].into(),
            ..Default::default()
        }],
    };
    store
        .record_server_sample(&run_id, &"server-0".into(), &sample)
        .await
        .unwrap();
    assert_eq!(
        store.server_samples(&run_id).await.unwrap(),
        [("server-0".to_string(), sample)]
    );
    // Capacity mode: a worker's load target is replaced; a phase's record round-trips.
    let target_of = async |member: &str| store.load_target(&run_id, &member.into()).await.unwrap();
    let set_target = async |member: &str, target: &LoadTarget| {
        store
            .set_load_target(&run_id, &member.into(), target)
            .await
            .unwrap();
    };
    assert_eq!(target_of("client-0").await, None);
    let target = |concurrency, mix: Option<&str>| LoadTarget {
        concurrency,
        mix: mix.map(String::from),
        rate: None,
        count_unanswered: false,
    };
    set_target("client-0", &target(4, Some("a:1,b@2:3"))).await;
    set_target("client-0", &target(7, None)).await;
    set_target("client-1", &target(1, Some("a:1"))).await;
    assert_eq!(target_of("client-0").await, Some(target(7, None)));
    assert_eq!(
        c0.load_target().await.unwrap(),
        Some(target(7, None)),
        "through the sink"
    );
    assert_eq!(target_of("client-1").await, Some(target(1, Some("a:1"))));
    // A spike's open-loop rate round-trips, and clearing it returns to closed loop.
    let spike = LoadTarget {
        rate: Some(37.5),
        count_unanswered: true,
        ..target(7, None)
    };
    set_target("client-0", &spike).await;
    assert_eq!(c0.load_target().await.unwrap(), Some(spike));
    set_target("client-0", &target(7, None)).await;
    assert_eq!(c0.load_target().await.unwrap(), Some(target(7, None)));
    // Baselines: a pin per name, replaced; a run's comparison, replaced.
    assert!(store.baselines().await.unwrap().is_empty());
    for (name, run) in [
        ("nightly", "run-a"),
        ("nightly", run_id.as_str()),
        ("smoke", "run-b"),
    ] {
        store.pin_baseline(name, &run.into()).await.unwrap();
    }
    let pins: Vec<(String, String)> = store
        .baselines()
        .await
        .unwrap()
        .into_iter()
        .map(|(name, run, _)| (name, run))
        .collect();
    assert_eq!(
        pins,
        [
            ("nightly".to_string(), run_id.to_string()),
            ("smoke".to_string(), "run-b".to_string())
        ]
    );
    // Documents: per kind and key, replaced; a set replaced as a whole; kinds never mix.
    let run = RunId::new(run_id.clone());
    assert_eq!(store.document::<Note>(&run, "").await.unwrap(), None);
    for saved in [note("first", 1), note("second", 2)] {
        store.save_document(&run, "", &saved).await.unwrap();
    }
    assert_eq!(
        store.document::<Note>(&run, "").await.unwrap(),
        Some(note("second", 2))
    );
    let verdict = |rule: &str, ok: bool| Verdict {
        rule: rule.into(),
        ok,
    };
    assert!(store.documents::<Verdict>(&run).await.unwrap().is_empty());
    let keyed = |v: &[Verdict]| -> Vec<(String, Verdict)> {
        v.iter()
            .enumerate()
            .map(|(i, v)| (format!("{i:06}"), v.clone()))
            .collect()
    };
    let three = [verdict("a", false), verdict("b", true), verdict("c", true)];
    store.replace_documents(&run, &keyed(&three)).await.unwrap();
    let two = [verdict("a", true), verdict("b", true)];
    store.replace_documents(&run, &keyed(&two)).await.unwrap();
    assert_eq!(store.documents::<Verdict>(&run).await.unwrap(), keyed(&two));
    assert_eq!(
        store.documents::<Note>(&run).await.unwrap(),
        [(String::new(), note("second", 2))],
        "replacing the verdicts left the notes alone"
    );
    // By key: the member order of a report.
    store
        .save_document(&run, "server-1", &note("b", 3))
        .await
        .unwrap();
    let other_run = RunId::new(old_run.clone());
    let note_keys = async |run: &RunId| -> Vec<String> {
        let notes = store.documents::<Note>(run).await.unwrap();
        notes.into_iter().map(|(key, _)| key).collect()
    };
    assert!(note_keys(&other_run).await.is_empty());
    // Across runs, newest first (a list of runs reads their summaries this way). Only this
    // story writes this kind; the filter keeps a shared TEST_DATABASE_URL's other runs out.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Listed(u32);
    impl Document for Listed {
        const KIND: &'static str = "test_listed";
    }
    store.save_document(&run, "", &Listed(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .save_document(&other_run, "", &Listed(2))
        .await
        .unwrap();
    let ours: Vec<(String, Listed)> = store
        .latest_documents::<Listed>(1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|(r, _)| *r == run_id || *r == old_run)
        .collect();
    assert_eq!(
        ours,
        [
            (old_run.to_string(), Listed(2)),
            (run_id.to_string(), Listed(1))
        ]
    );
    assert_eq!(store.latest_documents::<Listed>(1).await.unwrap().len(), 1);
    assert_eq!(note_keys(&run).await, ["", "server-1"]);
    // Replaced per (member, scenario, model); the decoupled model's stream counts round-trip.
    assert_eq!(
        store
            .model_counts(&run_id)
            .await
            .unwrap()
            .into_iter()
            .map(|(member, _, counts)| (member, counts))
            .collect::<Vec<_>>(),
        [
            ("client-0".to_string(), model_b1.clone()),
            ("client-0".to_string(), model_a2.clone()),
        ]
    );
    assert_eq!(
        store.scenario_counts(&run_id).await.unwrap(),
        [
            ("client-0".to_string(), counts_b1.clone()),
            ("client-0".to_string(), counts_a2.clone()),
        ]
    );
    let decoded = LatencyHistogram::decode(&counts_a2.latency_histogram).unwrap();
    assert_eq!(decoded.count(), 5);
    // The series keeps neither the deferred clients nor the held calls.
    let point = |member: &str, at_ms, qps, total_requests| QpsSample {
        member_id: member.into(),
        at_ms,
        qps,
        total_requests,
        deferred_clients: 0,
        unanswered: vec![],
    };
    assert_eq!(
        store.qps_samples(&run_id).await.unwrap(),
        [
            point("client-0", t0 + 1000, 105.0, 105),
            point("client-1", t0 + 1500, 0.0, 0),
            point("client-0", t0 + 2000, 105.5, 210),
        ]
    );
    // The driver's poll reads only the latest sample of each member.
    let latest = store.latest_qps(&run_id).await.unwrap();
    assert_eq!(
        latest
            .iter()
            .map(|q| (
                q.member_id.as_str(),
                q.at_ms,
                q.total_requests,
                q.deferred_clients
            ))
            .collect::<Vec<_>>(),
        [
            ("client-0", t0 + 2000, 210, 0),
            ("client-1", t0 + 1500, 0, 2)
        ]
    );
    assert!(latest[0].unanswered.is_empty(), "{latest:?}");
    assert_eq!(latest[1].unanswered, [held]);
    // A snapshot refreshes the heartbeat.
    let beats = store.heartbeats(&run_id).await.unwrap();
    assert!(
        beats.contains(&("client-0".to_string(), t0 + 2000)),
        "{beats:?}"
    );
    assert!(
        beats.contains(&("client-1".to_string(), t0 + 1500)),
        "{beats:?}"
    );
    assert!(store.qps_samples(&old_run).await.unwrap().is_empty());

    // ---- failures, with a cap per member
    let f1 = FailureRecord {
        at_ms: t0 + 1100,
        scenario: "sequence_no_end".into(),
        server: "127.0.0.1:8001".into(),
        model: "simple_sequence".into(),
        correlation_id: Some(u64::MAX),
        expected: "OUTPUT0 = [3]".into(),
        actual: "OUTPUT0 = [4]".into(),
        // The typed kind round-trips (and wins over the words).
        error_kind: Some(stress_common::signature::ErrorKind::WrongAnswer),
        // Forensics round-trip: the steps on the wire and the id's previous use.
        forensics: Some(Forensics {
            steps: vec![WireStep {
                sent_us: (t0 + 1000) * 1000,
                received_us: (t0 + 1000) * 1000 + 250,
                server: "127.0.0.1:8001".into(),
                model: "simple_sequence".into(),
                correlation_id: Some(u64::MAX),
                flags: "START".into(),
                input_digest: "00ff00ff00ff00ff".into(),
                outcome: "ok".into(),
            }],
            steps_left_out: 3,
            previous_use: Some(PreviousUse {
                scenario: "SequenceNoEnd".into(),
                model: "simple_sequence".into(),
                started_ms: t0,
                ended_ms: t0 + 500,
                outcome: "passed".into(),
                left_open: vec!["simple_sequence".into()],
            }),
            server_log: Vec::new(),
            sequence_idle_us: Some(3_000_000),
            test_started_ms: Some(t0 + 1000),
        }),
    };
    let f2 = FailureRecord {
        at_ms: t0 + 1200,
        scenario: "infer_simple".into(),
        correlation_id: None,
        expected: "200 OK".into(),
        actual: "UNAVAILABLE: \"connection refused\"".into(),
        error_kind: Some(stress_common::signature::ErrorKind::Unavailable),
        forensics: None,
        ..f1.clone()
    };
    assert!(
        store
            .record_failure(&run_id, &"client-1".into(), &f1)
            .await
            .unwrap()
    );
    c0.failure(&f2).await.unwrap();
    let capped = Store::connect_with(
        url,
        &StoreOptions {
            failure_cap: 3,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let mut kept = vec![];
    for i in 0..5 {
        let f = FailureRecord {
            at_ms: t0 + 1300 + i,
            actual: format!("failure {i}"),
            error_kind: None,
            ..f2.clone()
        };
        kept.push(
            capped
                .record_failure(&run_id, &"runaway".into(), &f)
                .await
                .unwrap(),
        );
    }
    assert_eq!(kept, [true, true, true, false, false]);
    capped.close().await;
    let failures = store.failures(&run_id).await.unwrap();
    assert_eq!(failures.len(), 5);
    // A poller reads what it has not seen: after an id, in order.
    let with_ids = store.failures_after(&run_id, 0).await.unwrap();
    let after = store.failures_after(&run_id, with_ids[1].0).await.unwrap();
    assert_eq!(after, with_ids[2..]);
    // A page: at most `limit` after an id, the next page after its last.
    let page = store.failures_page(&run_id, 0, 2).await.unwrap();
    assert_eq!(page, with_ids[..2]);
    let next = store.failures_page(&run_id, page[1].0, 2).await.unwrap();
    assert_eq!(next, with_ids[2..4]);
    assert!(with_ids.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(failures[0], ("client-1".to_string(), f1.clone()));
    assert_eq!(failures[1], ("client-0".to_string(), f2.clone()));
    assert_eq!(failures[4].1.actual, "failure 2");
    assert_eq!(
        store.failure_totals(&run_id).await.unwrap(),
        [
            ("client-0".to_string(), 1),
            ("client-1".to_string(), 1),
            ("runaway".to_string(), 5),
        ]
    );
    assert!(store.failures(&old_run).await.unwrap().is_empty());

    // ---- finish
    store.finish_run(&run_id, "FAIL", t0 + 3000).await.unwrap();
    let row = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.verdict.as_deref(), Some("FAIL"));
    assert_eq!(row.finished_at_ms, Some(t0 + 3000));
    let missing = store
        .finish_run(&"no-such-run".into(), "PASS", t0)
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");
    assert!(missing.to_string().contains("finish_run"), "{missing}");

    let runs = store.runs().await.unwrap();
    let position = |id: &str| runs.iter().position(|r| r.run_id == id).unwrap();
    assert!(position(&run_id) < position(&old_run), "newest first");
    assert_eq!(
        store.latest_run_id().await.unwrap().as_deref(),
        Some(runs[0].run_id.as_str())
    );
    if fresh {
        assert_eq!(runs.len(), 2);
        assert_eq!(
            store.latest_run_id().await.unwrap(),
            Some(run_id.to_string())
        );
    }

    // ---- leases: a run whose driver stopped renewing becomes ABANDONED, once
    let leased = unique("leased");
    store
        .create_run(&NewRun {
            run_id: leased.to_string(),
            started_at_ms: now_ms(),
            ..nightly.clone()
        })
        .await
        .unwrap();
    let now = now_ms();
    store.renew_lease(&leased, now + 60_000).await.unwrap();
    let ids = |runs: Vec<stress_common::store::RunRow>| -> Vec<String> {
        runs.into_iter()
            .map(|r| r.run_id)
            .filter(|id| *id == leased || *id == run_id)
            .collect()
    };
    assert!(ids(store.abandon_expired(now).await.unwrap()).is_empty());
    assert_eq!(
        ids(store.unfinished_runs().await.unwrap()),
        std::slice::from_ref(&leased),
        "running, not finished"
    );
    store.renew_lease(&leased, now - 1).await.unwrap();
    assert_eq!(
        ids(store.abandon_expired(now).await.unwrap()),
        std::slice::from_ref(&leased)
    );
    assert!(
        ids(store.unfinished_runs().await.unwrap()).is_empty(),
        "an abandoned run is finished"
    );
    let abandoned = store.run(&leased).await.unwrap().unwrap();
    assert_eq!(
        (abandoned.verdict.as_deref(), abandoned.finished_at_ms),
        (Some(stress_common::store::ABANDONED), Some(now - 1))
    );
    let said = store.events(&leased, 0).await.unwrap();
    assert!(
        said.iter().any(|e| e.member_id == "driver"
            && e.kind == EventKind::Failure
            && e.details.starts_with("ABANDONED: ")),
        "{said:?}"
    );
    // Once: a late renewal changes nothing, and it is not abandoned again.
    store.renew_lease(&leased, now + 60_000).await.unwrap();
    assert!(ids(store.abandon_expired(now + 120_000).await.unwrap()).is_empty());
    assert_eq!(
        store.run(&leased).await.unwrap().unwrap().lease_until_ms,
        Some(now - 1)
    );

    // ---- reconnect and read everything back
    let before = everything(&store, &run_id).await;
    let before_old = everything(&store, &old_run).await;
    store.close().await;
    let store = Store::connect(url).await.expect("reconnect");
    assert_eq!(store.schema_version().await.unwrap(), LATEST_SCHEMA);
    let after = everything(&store, &run_id).await;
    assert_eq!(after, before);
    assert_eq!(everything(&store, &old_run).await, before_old);
    assert_eq!(after.run, Some(row));
    assert_eq!(after.members.len(), 3);
    // 7, and 5 of the stop's checks.
    assert_eq!(after.events.len(), 12);
    assert_eq!(after.qps.len(), 3);
    assert_eq!(after.counts.len(), 2);
    assert_eq!(after.model_counts.len(), 2);
    assert_eq!(after.failures.len(), 5);
    assert_eq!(after.notes.len(), 2);
    store.close().await;
}

#[tokio::test]
async fn sqlite_story() {
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: connect creates it and the file.
    let url = Store::sqlite_url(&dir.path().join("run dir").join("status.sqlite"));
    story(&url, true).await;
}

#[tokio::test]
async fn postgres_story() {
    let Some(pg) = postgres() else { return };
    // On a fresh cluster the writers also race the first migration.
    concurrent_writers(pg.url(), 4, 30).await;
    story(pg.url(), false).await;
    if pg.is_fresh() {
        // The story checks that its runs are the only ones: on a database of its own.
        let fresh_db = "stress_story";
        let admin = sqlx_url_with_db(pg.url(), "postgres");
        create_database(&admin, fresh_db).await;
        story(&sqlx_url_with_db(pg.url(), fresh_db), true).await;
    }
}

/// The skip policy end to end, on `postgres_story` run again as a child process: with
/// `TRITON_STRESS_SKIP_POSTGRES=1` it passes and says SKIPPED on stderr, where the harness does
/// not capture it; under `CI=true` the same request fails the test.
#[test]
fn a_postgres_skip_is_visible_and_refused_in_ci() {
    let run = |ci: Option<&str>| {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "postgres_story"])
            .env(testing::SKIP_POSTGRES, "1")
            .env_remove(testing::TEST_DATABASE_URL)
            .env_remove(testing::CI)
            .env("RUST_BACKTRACE", "0");
        if let Some(ci) = ci {
            command.env(testing::CI, ci);
        }
        let out = command.output().unwrap();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let skipped_line = "SKIPPED: postgres_story: TRITON_STRESS_SKIP_POSTGRES=1";

    let (passed, stdout, stderr) = run(None);
    assert!(passed, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stderr.lines().any(|line| line == skipped_line),
        "no {skipped_line:?} on stderr:\n{stderr}"
    );

    let (passed, stdout, stderr) = run(Some("true"));
    assert!(!passed, "a skip passed under CI:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "postgres_story: TRITON_STRESS_SKIP_POSTGRES=1 is refused under CI=true: CI must \
             run the Postgres tests"
        ),
        "{stdout}"
    );
    assert!(!stderr.contains("SKIPPED"), "{stderr}");
}

// ---- The QPS series: bounded, and summarized by the database

/// The QPS series stays bounded whatever the run's length: two workers snapshot every poll
/// (250 ms) over a 2-minute run, as a worker does (a snapshot is a series point when its
/// interval tracker says one is due, and the last always is). Only ~[`SERIES_POINTS`] points
/// per worker join `qps_samples`; the latest QPS (what the driver polls) follows every
/// snapshot; the final total requests are exact; and what the report reads in aggregate
/// (`qps_span`, `qps_summaries`) agrees with what the whole series says.
async fn bounded_qps_series(url: &str) {
    use stress_common::interval::{IntervalTracker, SERIES_POINTS, series_interval};
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("bounded-qps");
    let t0 = 1_800_000_000_000_i64;
    let duration = Duration::from_secs(120);
    let poll = Duration::from_millis(250);
    let polls = (duration.as_millis() / poll.as_millis()) as i64;
    for (w, rate) in [("client-0", 7_u64), ("client-1", 3)] {
        let mut tracker = IntervalTracker::new(series_interval(Some(duration), poll), t0);
        let mut total = 0;
        for i in 1..=polls {
            let at_ms = t0 + i * poll.as_millis() as i64;
            let last = i == polls;
            total += rate * (i as u64 % 5);
            let due = last || tracker.due(at_ms);
            if due {
                tracker.commit(tracker.close(&[], at_ms).unwrap());
            }
            // Through the worker's sink.
            store
                .sink(run_id.clone(), w)
                .snapshot(&WorkerSnapshot {
                    at_ms,
                    total_requests: total,
                    qps: if last {
                        0.0
                    } else {
                        (rate * (i as u64 % 5) * 4) as f64
                    },
                    series_point: due,
                    // client-1's first latency interval: when the load began.
                    intervals: (i == 1 && w == "client-1")
                        .then(|| IntervalCounts {
                            start_ms: t0 - 40,
                            end_ms: at_ms,
                            ..IntervalCounts::default()
                        })
                        .into_iter()
                        .collect(),
                    ..WorkerSnapshot::default()
                })
                .await
                .unwrap();
            // The driver's poll sees every snapshot.
            let latest = store.latest_qps(&run_id).await.unwrap();
            let mine = latest.iter().find(|q| q.member_id == w).unwrap();
            assert_eq!((mine.at_ms, mine.total_requests), (at_ms, total));
        }
    }
    let samples = store.qps_samples(&run_id).await.unwrap();
    let span = store.qps_span(&run_id).await.unwrap();
    let summaries = store.qps_summaries(&run_id, &span, 10_000).await.unwrap();
    for w in &summaries {
        let n = w.samples;
        assert!(
            n <= u64::from(SERIES_POINTS) + 1,
            "{}: {n} QPS points of {polls} snapshots",
            w.member_id
        );
        assert!(
            n >= u64::from(SERIES_POINTS) / 2,
            "{}: {n} points",
            w.member_id
        );
        assert_eq!(w.points.len() as u64, n);
    }
    assert_eq!(summaries.len(), 2);
    assert_eq!(
        summaries.iter().map(|w| w.samples as usize).sum::<usize>(),
        samples.len()
    );
    // The last point of each worker carries its exact total; nothing the report needs is lost.
    for (w, rate) in [("client-0", 7_u64), ("client-1", 3)] {
        let expected: u64 = (1..=polls as u64).map(|i| rate * (i % 5)).sum();
        let last = samples.iter().rfind(|s| s.member_id == w).unwrap();
        assert_eq!(last.total_requests, expected, "{w}");
        assert_eq!(last.at_ms, t0 + duration.as_millis() as i64);
    }
    // The load the series covers is the run's: from the first interval's start to the last
    // snapshot.
    let sending_since_ms = Some(t0 - 40);
    let of_samples = QpsSpan::of(&samples);
    assert_eq!(
        span,
        QpsSpan {
            sending_since_ms,
            ..of_samples
        }
    );
    assert_eq!(span.load_seconds(), duration.as_secs_f64() + 0.04);
    assert_eq!(of_samples.load_seconds(), duration.as_secs_f64());
    // A run without samples.
    let empty = store.qps_span(&"no-such-run".into()).await.unwrap();
    assert_eq!(empty, stress_common::qps::QpsSpan::default());
    store.close().await;
}

on_both_backends!(
    bounded_qps_series,
    sqlite_bounded_qps_series,
    postgres_bounded_qps_series
);

/// The definition of [`Store::qps_summaries`] over the whole series, in Rust: what the SQL must
/// give (the statistics computed from the live samples directly, not through `QpsStats`; a
/// member's last sample is its latest snapshot here, as every snapshot is a series point).
fn summaries_of(samples: &[QpsSample], points: usize) -> Vec<QpsSummary> {
    let mut members: std::collections::BTreeMap<&str, Vec<&QpsSample>> = Default::default();
    for s in samples {
        members.entry(&s.member_id).or_default().push(s);
    }
    let first = samples.iter().map(|s| s.at_ms).min().unwrap_or_default();
    let last = samples.iter().map(|s| s.at_ms).max().unwrap_or_default();
    members
        .into_iter()
        .map(|(member_id, series)| {
            let n = series.len();
            let mut buckets: Vec<(i64, Vec<&QpsSample>)> = Vec::new();
            for s in &series {
                let bucket = (s.at_ms - first) * points as i64 / (last - first + 1);
                match buckets.last_mut() {
                    Some((b, members)) if *b == bucket => members.push(s),
                    _ => buckets.push((bucket, vec![s])),
                }
            }
            let mean = |v: &[&QpsSample], f: fn(&QpsSample) -> f64| {
                v.iter().map(|s| f(s)).sum::<f64>() / v.len() as f64
            };
            let live: Vec<f64> = series[..if n > 1 && series[n - 1].qps == 0.0 {
                n - 1
            } else {
                n
            }]
                .iter()
                .map(|s| s.qps)
                .collect();
            QpsSummary {
                member_id: member_id.to_string(),
                samples: n as u64,
                min: live.iter().copied().fold(f64::INFINITY, f64::min),
                avg: live.iter().sum::<f64>() / live.len() as f64,
                max: live.iter().copied().fold(0.0, f64::max),
                points: buckets
                    .iter()
                    .map(|(_, v)| (mean(v, |s| s.at_ms as f64), mean(v, |s| s.qps)))
                    .collect(),
            }
        })
        .collect()
}

/// The report's QPS summaries, computed by the database, equal their definition over the whole
/// series: the samples averaged over `points` equal spans of the run's time, and the statistics
/// leaving out only a final 0 after other samples.
async fn qps_summaries(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("qps-summaries");
    let t0 = 1_800_000_000_000_i64;
    // client-0: 37 samples at uneven gaps, a 0 amid them, the final snapshot's 0.
    // client-1: 4 samples, the last two at the same time (the later written is the last).
    // client-2: a single sample of 0.
    let mut writes: Vec<(&str, i64, f64)> = (0..37_i64)
        .map(|i| {
            let qps = match i {
                36 => 0.0,
                11 => 0.0,
                _ => ((i * 37) % 23 + 1) as f64 * 2.5,
            };
            ("client-0", t0 + i * 1000 + (i * i) % 700, qps)
        })
        .collect();
    writes.extend([
        ("client-1", t0 + 500, 9.0),
        ("client-1", t0 + 1500, 3.0),
        ("client-1", t0 + 2500, 5.0),
        ("client-1", t0 + 2500, 0.0),
        ("client-2", t0 + 900, 0.0),
    ]);
    for (member, at_ms, qps) in &writes {
        store
            .sink(run_id.clone(), *member)
            .snapshot(&WorkerSnapshot {
                at_ms: *at_ms,
                qps: *qps,
                series_point: true,
                ..WorkerSnapshot::default()
            })
            .await
            .unwrap();
    }
    let samples = store.qps_samples(&run_id).await.unwrap();
    assert_eq!(samples.len(), writes.len());
    let span = store.qps_span(&run_id).await.unwrap();
    let summaries = |points| store.qps_summaries(&run_id, &span, points);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    for points in [1, 4, 10, 36, 37, 600] {
        let got = summaries(points).await.unwrap();
        let want = summaries_of(&samples, points);
        assert_eq!(got.len(), 3, "points {points}");
        for (g, w) in got.iter().zip(&want) {
            let at = format!("{} at points {points}: {g:?} vs {w:?}", w.member_id);
            assert_eq!((&g.member_id, g.samples), (&w.member_id, w.samples), "{at}");
            assert!(
                close(g.min, w.min) && close(g.avg, w.avg) && close(g.max, w.max),
                "{at}"
            );
            assert_eq!(g.points.len(), w.points.len(), "{at}");
            for (gp, wp) in g.points.iter().zip(&w.points) {
                assert!(close(gp.0, wp.0) && close(gp.1, wp.1), "{at}");
            }
        }
    }
    // The cases the definition is about, spelled out: at 600 spans of 60 ms, client-0's
    // samples (> 700 ms apart) each have their own; at 4, client-0 has one per span.
    let at_600 = summaries(600).await.unwrap();
    assert_eq!((at_600[0].min, at_600[0].points.len()), (0.0, 37));
    assert_eq!(
        at_600[1].points.len(),
        3,
        "the last two at the same time share a span"
    );
    assert_eq!(
        (at_600[1].min, at_600[1].avg, at_600[1].max),
        (3.0, 17.0 / 3.0, 9.0)
    );
    assert_eq!((at_600[2].samples, at_600[2].avg), (1, 0.0));
    assert_eq!(summaries(4).await.unwrap()[0].points.len(), 4);
    let none = store.qps_span(&"no-such-run".into()).await.unwrap();
    let nothing = store
        .qps_summaries(&"no-such-run".into(), &none, 10)
        .await
        .unwrap();
    assert!(nothing.is_empty());
    store.close().await;
}

on_both_backends!(qps_summaries, sqlite_qps_summaries, postgres_qps_summaries);

// ---- Latency intervals

/// The report reads latency intervals streamed, by end time, with their bucket width (the
/// median length, zero-length ones left out) computed by the database.
async fn streamed_latency_intervals(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("streamed-intervals");
    let t0 = 1_800_000_000_000_i64;
    // (member, start, end): lengths 0, 400, 1000, 1000, 1000, 3000, 3000: the median of the
    // positive ones is 1000 (their mean is 1567, their middle by position another).
    let spans = [
        ("client-1", 5_000, 8_000),
        ("client-0", 1_000, 2_000),
        ("client-0", 2_000, 3_000),
        ("client-1", 2_000, 5_000),
        ("client-0", 3_000, 4_000),
        ("client-0", 4_000, 4_400),
        ("client-1", 8_000, 8_000),
    ];
    for (i, (member, start, end)) in spans.into_iter().enumerate() {
        store
            .sink(run_id.clone(), member)
            .snapshot(&WorkerSnapshot {
                // Snapshots of one member have times of their own (the same one is a retry).
                at_ms: t0 + end + i as i64,
                intervals: vec![IntervalCounts {
                    scenario: "s".into(),
                    model: format!("m{i}"),
                    start_ms: t0 + start,
                    end_ms: t0 + end,
                    requests: i as u64,
                    failures: 1,
                    latency_histogram: histogram(&[i as u64 + 1]),
                }],
                ..WorkerSnapshot::default()
            })
            .await
            .unwrap();
    }
    assert_eq!(
        store.latency_interval_width(&run_id).await.unwrap(),
        Some(1_000)
    );
    let mut streamed = Vec::new();
    store
        .for_each_latency_interval(&run_id, i64::MIN, i64::MAX, |member, i| {
            streamed.push((member, i))
        })
        .await
        .unwrap();
    // Every interval, whole, by end time (ties keep their insertion order).
    let mut expected: Vec<(&str, i64, i64, String)> = spans
        .iter()
        .enumerate()
        .map(|(i, (member, start, end))| (*member, t0 + start, t0 + end, format!("m{i}")))
        .collect();
    expected.sort_by_key(|(_, _, end, _)| *end);
    let got: Vec<(&str, i64, i64, String)> = streamed
        .iter()
        .map(|(member, i)| (member.as_str(), i.start_ms, i.end_ms, i.model.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(
        streamed
            .iter()
            .all(|(_, i)| i.failures == 1 && i.scenario == "s")
    );
    // A window reads only the intervals ending in it.
    let window = store
        .latency_intervals(&run_id, t0 + 3_000, t0 + 5_000)
        .await
        .unwrap();
    let ends: Vec<i64> = window.iter().map(|(_, i)| i.end_ms - t0).collect();
    assert_eq!(ends, [3_000, 4_000, 4_400, 5_000]);
    assert!(streamed.is_sorted_by_key(|(_, i)| i.end_ms));
    assert_eq!(
        store
            .latency_interval_width(&"no-such-run".into())
            .await
            .unwrap(),
        None
    );
    store.close().await;
}

on_both_backends!(
    streamed_latency_intervals,
    sqlite_streamed_latency_intervals,
    postgres_streamed_latency_intervals
);

// ---- Concurrent writers: tasks, and processes (on Postgres, `postgres_story` runs the tasks)

/// `writers` tasks, each with its own `Store::connect` (connecting all at once, so on a new
/// database they also race the migrations), write snapshots, events, heartbeats and failures.
async fn concurrent_writers(url: &str, writers: usize, snapshots: u64) {
    let run_id = unique("concurrent");
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let url = url.to_string();
            let run_id = run_id.clone();
            tokio::spawn(async move {
                let store = Store::connect(&url).await?;
                let member: MemberName = format!("client-{w}").into();
                store
                    .record_event(&run_id, &member, EventKind::Starting, "")
                    .await?;
                for i in 1..=snapshots {
                    let counts = ScenarioCounts {
                        scenario: "infer_simple".into(),
                        tests: i,
                        failures: i / 10,
                        requests: i * 10,
                        ..ScenarioCounts::default()
                    };
                    let snapshot = snapshot_now(i * 10, 10.0, counts);
                    store.record_snapshot(&run_id, &member, &snapshot).await?;
                    if i % 10 == 0 {
                        let failure = FailureRecord {
                            at_ms: now_ms(),
                            actual: format!("{i}"),
                            error_kind: None,
                            ..FailureRecord::default()
                        };
                        store.record_failure(&run_id, &member, &failure).await?;
                        store
                            .record_event(&run_id, &member, EventKind::Running, "")
                            .await?;
                    }
                }
                store.close().await;
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    let mut errors = vec![];
    for task in tasks {
        if let Err(e) = task.await.unwrap() {
            errors.push(e.to_string());
        }
    }
    assert!(errors.is_empty(), "writers failed: {errors:#?}");

    let store = Store::connect(url).await.unwrap();
    let writers_u64 = writers as u64;
    assert_eq!(
        store.qps_samples(&run_id).await.unwrap().len() as u64,
        writers_u64 * snapshots
    );
    let counts = store.scenario_counts(&run_id).await.unwrap();
    assert_eq!(counts.len(), writers);
    assert!(counts.iter().all(|(_, c)| c.tests == snapshots));
    let events = store.events(&run_id, 0).await.unwrap();
    assert_eq!(events.len() as u64, writers_u64 * (1 + snapshots / 10));
    assert!(events.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(
        store.failures(&run_id).await.unwrap().len() as u64,
        writers_u64 * (snapshots / 10)
    );
    assert_eq!(store.heartbeats(&run_id).await.unwrap().len(), writers);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_writers() {
    let (_dir, url) = sqlite_store();
    concurrent_writers(&url, 4, 50).await;
    // The file is in WAL mode (persistent), so readers never block the writer.
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    conn.close().await.unwrap();
}

/// Several processes (this test binary run again, as `child_writer`) write to one SQLite file at
/// the same time, for `CHILD_WRITE_FOR` each: a lock error fails a writer, and every write each
/// one reports is in the store, in order.
#[test]
fn sqlite_concurrent_processes() {
    const PROCESSES: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let url = Store::sqlite_url(&dir.path().join("status.sqlite"));
    let ready = dir.path().join("ready");
    std::fs::create_dir(&ready).unwrap();
    let run_id = unique("processes");
    let exe = std::env::current_exe().unwrap();
    let members: Vec<String> = (0..PROCESSES).map(|p| format!("process-{p}")).collect();
    let children: Vec<_> = members
        .iter()
        .map(|member| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_writer", "--ignored", "--nocapture"])
                .env(CHILD_URL, &url)
                .env(CHILD_RUN, run_id.as_str())
                .env(CHILD_MEMBER, member)
                .env(CHILD_READY_DIR, &ready)
                .env(CHILD_WRITERS, PROCESSES.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // All of them, before any assertion: none keeps writing into a removed directory.
    let outputs: Vec<_> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let mut written = vec![];
    for (member, out) in members.iter().zip(outputs) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "writer {member} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let count: u64 = stdout
            .lines()
            .find_map(|line| line.strip_prefix("child writer wrote "))
            .unwrap_or_else(|| panic!("writer {member} did not run:\n{stdout}"))
            .parse()
            .unwrap();
        written.push(count);
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (samples, events, counts, heartbeats) = rt.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        let all = (
            store.qps_samples(&run_id).await.unwrap(),
            store.events(&run_id, 0).await.unwrap(),
            store.scenario_counts(&run_id).await.unwrap(),
            store.heartbeats(&run_id).await.unwrap(),
        );
        store.close().await;
        all
    });
    let mut id_ranges = vec![];
    for (member, &count) in members.iter().zip(&written) {
        // Every snapshot, in the order written (samples come by time, then insertion).
        let mine: Vec<&QpsSample> = samples.iter().filter(|s| &s.member_id == member).collect();
        assert_eq!(
            mine.iter().map(|s| s.total_requests).collect::<Vec<_>>(),
            (1..=count).collect::<Vec<_>>(),
            "{member}'s snapshots"
        );
        let last_at_ms = mine.last().unwrap().at_ms;
        assert!(
            heartbeats.contains(&(member.clone(), last_at_ms)),
            "{member}: {heartbeats:?}"
        );
        let tests = counts
            .iter()
            .find(|(m, _)| m == member)
            .map(|(_, c)| c.tests);
        assert_eq!(tests, Some(count), "{member}'s last counts");
        // Every event, in the order written.
        let (ids, details): (Vec<i64>, Vec<&str>) = events
            .iter()
            .filter(|e| &e.member_id == member)
            .map(|e| (e.id, e.details.as_str()))
            .unzip();
        let want: Vec<String> = (1..=count).map(|i| format!("write {i}")).collect();
        assert_eq!(details, want, "{member}'s events");
        id_ranges.push((member, ids[0], ids[ids.len() - 1]));
    }
    assert_eq!(heartbeats.len(), PROCESSES);
    assert_eq!(samples.len() as u64, written.iter().sum::<u64>());
    assert_eq!(events.len() as u64, written.iter().sum::<u64>());
    // The writes interleaved: every two writers have events between each other's first and
    // last (writers that took turns would have disjoint id ranges).
    for (i, a) in id_ranges.iter().enumerate() {
        for b in &id_ranges[i + 1..] {
            assert!(
                a.1 < b.2 && b.1 < a.2,
                "{} and {} did not write at the same time (first and last event ids): \
                 {id_ranges:?}",
                a.0,
                b.0
            );
        }
    }
}

/// How long each `child_writer` writes (at least `CHILD_MIN_WRITES` writes).
const CHILD_WRITE_FOR: Duration = Duration::from_millis(1500);
const CHILD_MIN_WRITES: u64 = 20;
const CHILD_WRITE_EVERY: Duration = Duration::from_millis(10);
const CHILD_URL: &str = "STORE_TEST_CHILD_URL";
const CHILD_RUN: &str = "STORE_TEST_CHILD_RUN";
const CHILD_MEMBER: &str = "STORE_TEST_CHILD_MEMBER";
/// Each writer puts a file named after it here once started and connects when all
/// `CHILD_WRITERS` files are there; then puts `NAME.connected` and writes when every writer's is.
const CHILD_READY_DIR: &str = "STORE_TEST_CHILD_READY_DIR";
const CHILD_WRITERS: &str = "STORE_TEST_CHILD_WRITERS";

/// The writer process of `sqlite_concurrent_processes`, which runs it (ignored otherwise: it
/// needs its parent's variables). Prints how many writes it made.
#[tokio::test]
#[ignore = "the writer process of sqlite_concurrent_processes, which runs it"]
async fn child_writer() {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: child_writer runs as sqlite_concurrent_processes's child")
        })
    };
    let (url, run_id, member_id) = (var(CHILD_URL), var(CHILD_RUN), var(CHILD_MEMBER));
    let ready = std::path::PathBuf::from(var(CHILD_READY_DIR));
    let writers: usize = var(CHILD_WRITERS).parse().unwrap();

    // Start together, so that the connections (and the migrations of the new file) and then
    // the writes contend for the file.
    std::fs::write(ready.join(&member_id), "").unwrap();
    let waiting_since = std::time::Instant::now();
    while std::fs::read_dir(&ready).unwrap().count() < writers {
        assert!(
            waiting_since.elapsed() < Duration::from_secs(60),
            "{member_id}: the other writers did not get ready"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let store = Store::connect(&url).await.unwrap();
    // And write together: a writer whose connection waited out the others' migrations (and,
    // on a loaded machine, their first writes) would otherwise write after them, not with them.
    std::fs::write(ready.join(format!("{member_id}.connected")), "").unwrap();
    let waiting_since = std::time::Instant::now();
    while std::fs::read_dir(&ready).unwrap().count() < 2 * writers {
        assert!(
            waiting_since.elapsed() < Duration::from_secs(60),
            "{member_id}: the other writers did not connect"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (run_id, member_id) = (RunId::new(run_id), MemberName::new(member_id));

    let started = std::time::Instant::now();
    let mut written = 0;
    while started.elapsed() < CHILD_WRITE_FOR || written < CHILD_MIN_WRITES {
        // Paced like a worker (which writes once a second), faster: writers in a tight loop
        // hand SQLite's lock to each other and starve a third one whose busy handler sleeps
        // (a CI run saw one write nothing until the other two had ended).
        if written > 0 {
            tokio::time::sleep(CHILD_WRITE_EVERY).await;
        }
        written += 1;
        let snapshot = snapshot_now(written, 1.0, scenario_s(written));
        store
            .record_snapshot(&run_id, &member_id, &snapshot)
            .await
            .unwrap();
        store
            .record_event(
                &run_id,
                &member_id,
                EventKind::Running,
                &format!("write {written}"),
            )
            .await
            .unwrap();
    }
    store.close().await;
    println!("child writer wrote {written}");
}

// ---- Event notices

/// Event notices: on Postgres a run's event insert wakes its listener at the commit, another
/// run's does not, and nothing else wakes it; SQLite has none (the driver polls).
async fn event_notices(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let ours = unique("notices");
    let theirs = unique("other-notices");
    for run_id in [&ours, &theirs] {
        let run = new_run(run_id, "notices", now_ms());
        store.create_run(&run).await.unwrap();
    }
    let notices = store.event_notices(&ours).await.unwrap();
    if url.starts_with("sqlite:") {
        assert!(notices.is_none(), "SQLite cannot notify");
        return;
    }
    let notices = notices.expect("Postgres listens");
    let quiet = Duration::from_millis(500);
    let heard = |limit| tokio::time::timeout(limit, notices.recorded());
    assert!(heard(quiet).await.is_err(), "a notice before any event");
    store
        .record_event(&theirs, &"client-0".into(), EventKind::Failure, "not ours")
        .await
        .unwrap();
    assert!(heard(quiet).await.is_err(), "woken by another run's event");
    // From another connection (as a worker writes): the notice comes at the commit.
    let worker = Store::connect(url).await.expect("connect");
    for details in ["first", "second"] {
        worker
            .record_event(&ours, &"client-1".into(), EventKind::Failure, details)
            .await
            .unwrap();
    }
    heard(Duration::from_secs(10))
        .await
        .expect("no notice of the run's event");
    let events = store.events(&ours, 0).await.unwrap();
    assert_eq!(events.len(), 2, "both events are readable when woken");
    // Two events wake at most twice (notices that wait for a look coalesce into one).
    let _ = heard(quiet).await;
    assert!(heard(quiet).await.is_err(), "more wakes than events");
    drop(notices);
    worker.close().await;
    store.close().await;
}

on_both_backends!(event_notices, sqlite_event_notices, postgres_event_notices);

// ---- Outages

/// Outages round-trip: appended by the snapshots that carry them (in the same transaction as
/// the rest), read back per run in the order they were recorded, with their open ends (no
/// failure, no good answer yet) as None and u64 counts bit for bit.
async fn outages_round_trip(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    assert_eq!(store.schema_version().await.unwrap(), LATEST_SCHEMA);
    let run_id = unique("outages");
    let other_run = unique("outages-other");
    let t0 = 1_800_000_000_000_i64;
    let killed = Outage {
        server: "127.0.0.1:8001".into(),
        last_ok_ms: t0 + 1_000,
        first_failure_ms: Some(t0 + 1_020),
        first_ok_ms: Some(t0 + 9_500),
        failed_tests: 42,
        failed_sequences: 7,
    };
    // A pause: silence past the stall threshold, no failure.
    let paused = Outage {
        server: "127.0.0.1:8002".into(),
        last_ok_ms: t0 + 20_000,
        first_ok_ms: Some(t0 + 35_000),
        ..Outage::default()
    };
    // Still out at the worker's end.
    let open = Outage {
        server: "127.0.0.1:8001".into(),
        last_ok_ms: t0 + 50_000,
        first_failure_ms: Some(t0 + 50_001),
        first_ok_ms: None,
        failed_tests: u64::MAX,
        failed_sequences: i64::MAX as u64 + 1,
    };
    let c0 = store.sink(run_id.clone(), "client-0");
    let c1 = store.sink(run_id.clone(), "client-1");
    // Recorded out of time order: read back in the order recorded.
    c1.snapshot(&outages_at(t0 + 36_000, vec![paused.clone()]))
        .await
        .unwrap();
    c0.snapshot(&WorkerSnapshot {
        at_ms: t0 + 10_000,
        intervals: vec![IntervalCounts {
            scenario: "SequenceValid".into(),
            model: "simple_sequence".into(),
            start_ms: t0,
            end_ms: t0 + 10_000,
            requests: 5,
            failures: 42,
            latency_histogram: histogram(&[1, 2]),
        }],
        series_point: true,
        outages: vec![killed.clone(), paused.clone()],
        ..WorkerSnapshot::default()
    })
    .await
    .unwrap();
    // A snapshot without outages adds none.
    c0.snapshot(&WorkerSnapshot {
        at_ms: t0 + 20_000,
        ..WorkerSnapshot::default()
    })
    .await
    .unwrap();
    c0.snapshot(&WorkerSnapshot {
        at_ms: t0 + 60_000,
        series_point: true,
        outages: vec![open.clone()],
        ..WorkerSnapshot::default()
    })
    .await
    .unwrap();
    store
        .sink(other_run.clone(), "client-0")
        .snapshot(&outages_at(t0, vec![killed.clone()]))
        .await
        .unwrap();
    let member = |m: &str| m.to_string();
    assert_eq!(
        store.outages(&run_id).await.unwrap(),
        [
            (member("client-1"), paused.clone()),
            (member("client-0"), killed.clone()),
            (member("client-0"), paused),
            (member("client-0"), open),
        ]
    );
    // Read on from an id: only what came after it, with the ids to read on from.
    let all = store.outages_after(&run_id, 0).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "{all:?}");
    let after_second = store.outages_after(&run_id, all[1].0).await.unwrap();
    assert_eq!(after_second, all[2..].to_vec());
    assert!(
        store
            .outages_after(&run_id, all[3].0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.outages(&other_run).await.unwrap(),
        [(member("client-0"), killed)]
    );
    // The snapshot's intervals went in with its outages.
    assert_eq!(
        store
            .latency_intervals(&run_id, i64::MIN, i64::MAX)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .outages(&"no-such-run".into())
            .await
            .unwrap()
            .is_empty()
    );
    store.close().await;
}

#[tokio::test]
async fn sqlite_outages_round_trip() {
    let (_dir, url) = sqlite_store();
    // A store of the schema before outages gets their table by the next connect.
    let old = Store::connect_at_version(&url, LATEST_SCHEMA - 1)
        .await
        .unwrap();
    assert_eq!(old.schema_version().await.unwrap(), LATEST_SCHEMA - 1);
    old.close().await;
    outages_round_trip(&url).await;
}

#[tokio::test]
async fn postgres_outages_round_trip() {
    let Some(pg) = postgres() else { return };
    outages_round_trip(pg.url()).await;
}

// ---- Documents (the story saves and reads them): other shapes, and the migration to one table

/// A stored document of another shape than its kind's type: corrupt for a strict kind (the
/// error names the kind and key), read as the kind allows for a lenient one.
async fn documents_of_another_shape(url: &str) {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct OddNote {
        exit_code: i32,
    }
    impl Document for OddNote {
        const KIND: &'static str = "test_note";
    }
    #[derive(serde::Serialize, serde::Deserialize)]
    struct OddVerdict {
        free_form: bool,
    }
    impl Document for OddVerdict {
        const KIND: &'static str = "test_verdict";
    }
    let store = Store::connect(url).await.expect("connect");
    let run = RunId::new(unique("odd-documents"));
    store
        .save_document(&run, "server-0", &OddNote { exit_code: 137 })
        .await
        .unwrap();
    let e = store.documents::<Note>(&run).await.unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt { .. }) && e.to_string().contains("test_note \"server-0\""),
        "{e}"
    );
    store
        .save_document(&run, "", &OddVerdict { free_form: true })
        .await
        .unwrap();
    assert_eq!(
        store.document::<Verdict>(&run, "").await.unwrap(),
        Some(Verdict::default())
    );
    store.close().await;
}

on_both_backends!(
    documents_of_another_shape,
    sqlite_documents_of_another_shape,
    postgres_documents_of_another_shape
);

/// A store that an older build wrote (schema 13, a table per kind of document) keeps every
/// document through the migration to one documents table: same JSON, keys in the old order.
async fn documents_survive_their_migration(url: &str) {
    let old = Store::connect_at_version(url, 13)
        .await
        .expect("connect at 13");
    assert_eq!(old.schema_version().await.unwrap(), 13);
    let run_id = unique("legacy-documents");
    old.close().await;
    // What a build of schema 13 wrote, through its own tables.
    let pool = sqlx::AnyPool::connect(url).await.expect("raw connect");
    let t0 = 1_800_000_000_000_i64;
    for (sql, binds) in [
        (
            "INSERT INTO diagnostics (run_id, member_id, details, updated_at_ms) VALUES ($1, $2, $3, $4)",
            vec!["triton-0", r#"{"launcher":"local","log_tail":["a"]}"#],
        ),
        (
            "INSERT INTO trace_summaries (run_id, member_id, details, updated_at_ms) VALUES ($1, $2, $3, $4)",
            vec!["triton-0", r#"{"rows":[]}"#],
        ),
        (
            "INSERT INTO capacity_phases (run_id, group_name, phase, details, updated_at_ms) VALUES ($1, $2, $3, $4, $5)",
            vec!["grpc", "individual/a", r#"{"key":"individual/a"}"#],
        ),
        (
            "INSERT INTO comparisons (run_id, details, updated_at_ms) VALUES ($1, $2, $3)",
            vec![r#"{"compared":3}"#],
        ),
    ] {
        let mut q = sqlx::query(sql).bind(run_id.to_string());
        for b in binds {
            q = q.bind(b.to_string());
        }
        q.bind(t0).execute(&pool).await.expect(sql);
    }
    for (position, rule) in [(10_i64, "k"), (2, "b"), (0, "a")] {
        sqlx::query(
            "INSERT INTO slo_results (run_id, position, details, updated_at_ms) VALUES ($1, $2, $3, $4)",
        )
        .bind(run_id.to_string())
        .bind(position)
        .bind(format!(r#"{{"rule":"{rule}"}}"#))
        .bind(t0)
        .execute(&pool)
        .await
        .unwrap();
    }
    for (from, lines) in [(t0 + 2000, r#"["late"]"#), (t0 + 1000, r#"["early", "x"]"#)] {
        sqlx::query(
            "INSERT INTO log_excerpts (run_id, member_id, from_ms, to_ms, lines) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run_id.to_string())
        .bind("triton-0")
        .bind(from)
        .bind(from + 500)
        .bind(lines)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    let store = Store::connect(url).await.expect("migrate to the latest");
    assert_eq!(store.schema_version().await.unwrap(), LATEST_SCHEMA);
    let run = RunId::new(run_id);
    macro_rules! kind {
        ($name:ident, $kind:literal) => {
            #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
            #[serde(transparent)]
            struct $name(serde_json::Value);
            impl Document for $name {
                const KIND: &'static str = $kind;
            }
        };
    }
    kind!(Diagnostics, "diagnostics");
    kind!(Trace, "trace_summary");
    kind!(Phase, "capacity_phase");
    kind!(Comparison, "comparison");
    kind!(Slo, "slo_result");
    kind!(Excerpt, "log_excerpt");
    let json = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    assert_eq!(
        store.documents::<Diagnostics>(&run).await.unwrap(),
        [(
            "triton-0".to_string(),
            Diagnostics(json(r#"{"launcher":"local","log_tail":["a"]}"#))
        )]
    );
    assert_eq!(
        store.documents::<Trace>(&run).await.unwrap(),
        [("triton-0".to_string(), Trace(json(r#"{"rows":[]}"#)))]
    );
    assert_eq!(
        store.documents::<Phase>(&run).await.unwrap(),
        [(
            "grpc/individual/a".to_string(),
            Phase(json(r#"{"key":"individual/a"}"#))
        )]
    );
    assert_eq!(
        store.document::<Comparison>(&run, "").await.unwrap(),
        Some(Comparison(json(r#"{"compared":3}"#)))
    );
    let rules: Vec<(String, serde_json::Value)> = store
        .documents::<Slo>(&run)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, Slo(v))| (k, v["rule"].clone()))
        .collect();
    assert_eq!(
        rules,
        [
            ("000000".to_string(), json(r#""a""#)),
            ("000002".to_string(), json(r#""b""#)),
            ("000010".to_string(), json(r#""k""#)),
        ],
        "in the matrix's order, 10 after 2"
    );
    let excerpts: Vec<serde_json::Value> = store
        .documents::<Excerpt>(&run)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, Excerpt(v))| v)
        .collect();
    assert_eq!(
        excerpts,
        [
            serde_json::json!({"member_id": "triton-0", "from_ms": t0 + 1000, "to_ms": t0 + 1500, "lines": ["early", "x"]}),
            serde_json::json!({"member_id": "triton-0", "from_ms": t0 + 2000, "to_ms": t0 + 2500, "lines": ["late"]}),
        ],
        "by time, each as the driver's LogExcerpt"
    );
    store.close().await;
}

on_both_backends!(
    documents_survive_their_migration,
    sqlite_documents_survive_their_migration,
    postgres_documents_survive_their_migration
);

// ---- Read-only opens

/// Why a read-only open of `url` is refused.
async fn read_only_refusal(url: &str) -> StoreError {
    Store::open_read_only(url, &StoreOptions::default())
        .await
        .unwrap_err()
}

/// A store opened read-only reads what is there and refuses every write, changes no schema,
/// and refuses a store older than this build's schema (nothing would read right).
async fn read_only_open(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("read-only");
    let t0 = now_ms();
    store.create_run(&new_run(&run_id, "ro", t0)).await.unwrap();
    let run = RunId::new(run_id.clone());
    store
        .save_document(&run, "", &note("kept", 1))
        .await
        .unwrap();
    let outage = Outage {
        server: "127.0.0.1:8001".into(),
        last_ok_ms: t0,
        ..Outage::default()
    };
    store
        .sink(run.clone(), "client-0")
        .snapshot(&outages_at(t0, vec![outage.clone()]))
        .await
        .unwrap();
    // A lease that has run out: a writer would mark the run ABANDONED.
    store.renew_lease(&run_id, t0 + 1000).await.unwrap();
    store.close().await;

    let ro = Store::open_read_only(url, &StoreOptions::default())
        .await
        .expect("open read-only");
    assert_eq!(ro.run(&run_id).await.unwrap().unwrap().name, "ro");
    assert_eq!(
        ro.outages(&run).await.unwrap(),
        [("client-0".to_string(), outage)]
    );
    assert_eq!(
        ro.document::<Note>(&run, "").await.unwrap(),
        Some(note("kept", 1))
    );
    let e = ro
        .save_document(&run, "", &note("changed", 2))
        .await
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("read"), "{e}");
    ro.finish_run(&run_id, "PASS", t0 + 1).await.unwrap_err();
    ro.abandon_expired(t0 + 10 * 86_400_000).await.unwrap_err();
    assert_eq!(ro.run(&run_id).await.unwrap().unwrap().verdict, None);
    assert_eq!(
        ro.document::<Note>(&run, "").await.unwrap(),
        Some(note("kept", 1))
    );
    ro.close().await;
}

#[tokio::test]
async fn sqlite_read_only_open() {
    let (dir, url) = sqlite_store();
    let e = read_only_refusal(&url).await;
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(
        !dir.path().join("status.sqlite").exists(),
        "a read-only open creates nothing"
    );
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap();
    let e = read_only_refusal(&Store::sqlite_url(&empty)).await;
    assert!(matches!(e, StoreError::Unwritten { .. }), "{e}");
    read_only_open(&url).await;
    // An older store is refused, not migrated.
    let old_url = Store::sqlite_url(&dir.path().join("old.sqlite"));
    Store::connect_at_version(&old_url, 12)
        .await
        .unwrap()
        .close()
        .await;
    let e = read_only_refusal(&old_url).await;
    assert!(
        e.to_string()
            .contains("schema version 12 and this build reads"),
        "{e}"
    );
    let again = Store::connect_at_version(&old_url, 12).await.unwrap();
    assert_eq!(again.schema_version().await.unwrap(), 12, "left as it was");
    again.close().await;
}

#[tokio::test]
async fn postgres_read_only_open() {
    let Some(pg) = postgres() else { return };
    if let TestPostgres::Throwaway(_) = &pg {
        // A database nothing has written: no store schema, said as such (not as an error of
        // the database), so a list reads it as no runs.
        let e = read_only_refusal(pg.url()).await;
        assert!(matches!(e, StoreError::Unwritten { .. }), "{e}");
    }
    read_only_open(pg.url()).await;
}

// ---- Deleting a run

/// `delete_run` removes a run and every row recorded for it, and nothing of another run; every
/// table of the schema that holds rows by `run_id` is one it clears.
async fn deleting_a_run(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let (gone, kept) = (unique("pruned"), unique("kept"));
    for run_id in [&gone, &kept] {
        let run = new_run(run_id, "prune", now_ms());
        store.create_run(&run).await.unwrap();
        store
            .upsert_member(&member(run_id.as_str(), "w-0", Role::Client, "w", 0))
            .await
            .unwrap();
        let w: MemberName = "w-0".into();
        store
            .record_event(run_id, &w, EventKind::Running, "up")
            .await
            .unwrap();
        store
            .record_snapshot(run_id, &w, &snapshot_now(1, 1.0, scenario_s(1)))
            .await
            .unwrap();
        store
            .save_document(run_id, "k", &note("n", 1))
            .await
            .unwrap();
        store.finish_run(run_id, "PASS", now_ms()).await.unwrap();
    }
    store.pin_baseline("prune", &gone).await.unwrap();

    let rows = store.delete_run(&gone).await.unwrap();
    assert!(rows >= 7, "{rows} rows deleted");
    assert!(store.run(&gone).await.unwrap().is_none());
    assert!(store.members(&gone).await.unwrap().is_empty());
    assert!(store.events(&gone, 0).await.unwrap().is_empty());
    assert!(store.qps_samples(&gone).await.unwrap().is_empty());
    assert!(store.documents::<Note>(&gone).await.unwrap().is_empty());
    assert!(
        store.baselines().await.unwrap().is_empty(),
        "its pin went with it"
    );
    // The other run is whole.
    assert!(store.run(&kept).await.unwrap().is_some());
    assert_eq!(store.members(&kept).await.unwrap().len(), 1);
    assert_eq!(store.events(&kept, 0).await.unwrap().len(), 1);
    assert_eq!(store.qps_samples(&kept).await.unwrap().len(), 1);
    assert_eq!(store.documents::<Note>(&kept).await.unwrap().len(), 1);
    // Deleting it again deletes nothing.
    assert_eq!(store.delete_run(&gone).await.unwrap(), 0);

    // Every table with a run_id column, as the database itself lists them.
    let pool = sqlx::AnyPool::connect(url).await.expect("raw connect");
    let sql = if url.starts_with("sqlite:") {
        "SELECT m.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
         WHERE m.type = 'table' AND p.name = 'run_id'"
    } else {
        "SELECT CAST(table_name AS TEXT) FROM information_schema.columns
         WHERE column_name = 'run_id' AND table_schema = current_schema()"
    };
    let mut tables: Vec<String> = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
    tables.sort();
    let mut cleared: Vec<String> = stress_common::store::RUN_TABLES
        .iter()
        .map(|t| t.to_string())
        .collect();
    cleared.sort();
    assert_eq!(
        tables, cleared,
        "RUN_TABLES must list every table with a run_id"
    );
    pool.close().await;
    store.close().await;
}

on_both_backends!(
    deleting_a_run,
    sqlite_deleting_a_run,
    postgres_deleting_a_run
);

/// What a member reported (`Store::reported`, read by a replaced worker at its start): its own
/// rows only (its latest total, its scenario and model counts, its signature counts), nothing of
/// another member, and nothing for a member that wrote no snapshot.
async fn what_a_member_reported(url: &str) {
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("reported");
    store
        .create_run(&new_run(&run_id, "reported", now_ms()))
        .await
        .unwrap();
    let snapshot = |total: u64, tests: u64, failure: &str| {
        let mut s = snapshot_now(total, 1.0, scenario_s(tests));
        s.models = vec![ModelCounts {
            scenario: "s".into(),
            model: "m".into(),
            tests,
            requests: total,
            ..ModelCounts::default()
        }];
        s.signatures = vec![SignatureCount {
            signature: Signature::new("s", "m", "an answer", failure),
            count: tests,
            first_at_ms: 1,
            last_at_ms: 2,
        }];
        s
    };
    for (member, s) in [
        ("w-0", snapshot(10, 3, "refused")),
        ("w-1", snapshot(20, 5, "reset")),
    ] {
        store
            .record_snapshot(&run_id, &member.into(), &s)
            .await
            .unwrap();
    }
    let w0 = store.reported(&run_id, &"w-0".into()).await.unwrap();
    let mine = snapshot(10, 3, "refused");
    assert_eq!(w0.total_requests, 10);
    assert_eq!(w0.scenarios, mine.scenarios);
    assert_eq!(w0.models, mine.models);
    assert_eq!(w0.signatures, mine.signatures);
    assert!(
        store
            .reported(&run_id, &"w-2".into())
            .await
            .unwrap()
            .is_empty()
    );
}

on_both_backends!(
    what_a_member_reported,
    sqlite_what_a_member_reported,
    postgres_what_a_member_reported
);

// ---- Errors

#[tokio::test]
async fn errors_name_the_operation_and_mask_the_password() {
    let err = Store::connect("mysql://root:hunter2@localhost/db")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("mysql://root:***@localhost/db"), "{text}");

    // Nothing listens on port 1.
    let err = Store::connect_with(
        "postgres://stress:hunter2@127.0.0.1:1/stress",
        &StoreOptions {
            acquire_timeout: Duration::from_secs(1),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("postgres://stress:***@127.0.0.1:1/stress: connect"),
        "{text}"
    );
    // Why, not only that the pool timed out.
    assert!(text.contains("refused"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let err = Store::connect(&format!(
        "sqlite://{}?mode=ro",
        dir.path().join("missing.sqlite").display()
    ))
    .await
    .unwrap_err();
    assert!(err.to_string().contains(": connect: "), "{err}");
}

// ---- Traced requests

/// Client spans come with snapshots, server spans from the receiver; the tail read returns
/// each (scenario, model)'s slowest share (at least one) and only those traces' server spans.
async fn traced_tail(url: &str) {
    use stress_common::trace::{ClientSpan, ServerSpan, SpanEvent};
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("traced-tail");
    let client = |i: i64, model: &str| ClientSpan {
        trace_id: format!("{i:032x}"),
        span_id: format!("{i:016x}"),
        scenario: "Load".into(),
        model: model.into(),
        server: "127.0.0.1:8001".into(),
        intended_ns: 1_000 * i,
        sent_ns: 1_000 * i + 1,
        // Latency i ms: request 10 of "a" is its slowest.
        answered_ns: 1_000 * i + 1_000_000 * i,
        // The kernel's receive time where the client has one (even requests here).
        received_ns: (i % 2 == 0).then_some(1_000 * i + 1_000_000 * i - 7),
        ok: i != 3,
    };
    let sink = store.sink(run_id.clone(), "client-0");
    for chunk in [1..=5, 6..=10] {
        let spans: Vec<ClientSpan> = chunk.clone().map(|i| client(i, "a")).collect();
        sink.snapshot(&WorkerSnapshot {
            client_spans: spans,
            ..WorkerSnapshot::default()
        })
        .await
        .unwrap();
    }
    sink.snapshot(&WorkerSnapshot {
        client_spans: vec![client(11, "b")],
        ..WorkerSnapshot::default()
    })
    .await
    .unwrap();
    let server = |i: i64, name: &str| ServerSpan {
        server: "r2-51-0".into(),
        trace_id: format!("{i:032x}"),
        span_id: format!("{:016x}", i + 100),
        parent_span_id: format!("{i:016x}"),
        name: name.into(),
        start_ns: 5,
        end_ns: 6,
        events: vec![SpanEvent {
            name: "QUEUE_START".into(),
            at_ns: 5,
        }],
    };
    let spans: Vec<ServerSpan> = (1..=11).map(|i| server(i, "InferRequest")).collect();
    store.record_server_spans(&run_id, &spans).await.unwrap();
    assert_eq!(store.server_span_count(&run_id).await.unwrap(), 11);

    let tail = store.traced_tail(&run_id, 0.2).await.unwrap();
    let counts: Vec<(String, i64)> = tail
        .traced
        .iter()
        .map(|c| (c.model.clone(), c.traced))
        .collect();
    assert_eq!(counts, [("a".to_string(), 10), ("b".to_string(), 1)]);
    let slowest: Vec<(&str, i64)> = tail
        .client
        .iter()
        .map(|s| (s.model.as_str(), s.answered_ns - s.intended_ns))
        .collect();
    assert_eq!(
        slowest,
        [("a", 10_000_000), ("a", 9_000_000), ("b", 11_000_000)]
    );
    assert_eq!(tail.client[0], client(10, "a"));
    // The fastest to each server (all 11 here, fastest first) bound its clock offset.
    let fastest: Vec<&str> = tail.fastest.iter().map(|s| s.trace_id.as_str()).collect();
    let all: Vec<String> = (1..=11).map(|i| format!("{i:032x}")).collect();
    assert_eq!(fastest, all);
    // Their server spans and the tail's, each once.
    let mut traces: Vec<&str> = tail.server.iter().map(|s| s.trace_id.as_str()).collect();
    traces.sort();
    assert_eq!(traces, all);
    let ninth = tail.server.iter().find(|s| s.trace_id == all[8]).unwrap();
    assert_eq!(ninth.events, spans[8].events);
    store.close().await;
}

on_both_backends!(traced_tail, sqlite_traced_tail, postgres_traced_tail);

/// A foreign client's hello rides its worker's snapshots and is kept per member (the last
/// said), so the report can say which client ran; snapshots without one leave it.
async fn client_program(url: &str) {
    use stress_common::foreign::Hello;
    let store = Store::connect(url).await.expect("connect");
    let run_id = unique("client-program");
    let hello = |version: &str| Hello {
        interface: 1,
        client: "tritonclient-python-grpc".into(),
        version: version.into(),
    };
    let sink = store.sink(run_id.clone(), "python-0");
    for program in [Some(hello("2.44.0")), None] {
        sink.snapshot(&WorkerSnapshot {
            client_program: program,
            ..WorkerSnapshot::default()
        })
        .await
        .unwrap();
    }
    store
        .sink(run_id.clone(), "rust-0")
        .snapshot(&WorkerSnapshot::default())
        .await
        .unwrap();
    let saved: Vec<(String, Hello)> = store.documents(&run_id).await.unwrap();
    assert_eq!(saved, [("python-0".to_string(), hello("2.44.0"))]);
    store.close().await;
}

on_both_backends!(
    client_program,
    sqlite_client_program,
    postgres_client_program
);

/// A forwarder reads the client spans recorded after the last it sent, by id, its run's only.
async fn client_spans_after(url: &str) {
    use stress_common::trace::ClientSpan;
    let store = Store::connect(url).await.expect("connect");
    let (run_id, other) = (unique("spans-after"), unique("spans-after-other"));
    let client = |i: i64| ClientSpan {
        trace_id: format!("{i:032x}"),
        span_id: format!("{i:016x}"),
        scenario: "Infer".into(),
        model: "add_sub".into(),
        server: "127.0.0.1:8001".into(),
        intended_ns: i,
        sent_ns: i + 1,
        answered_ns: i + 2,
        received_ns: None,
        ok: i != 2,
    };
    let snapshot = |spans: Vec<ClientSpan>| WorkerSnapshot {
        client_spans: spans,
        ..WorkerSnapshot::default()
    };
    let sink = store.sink(run_id.clone(), "client-0");
    let other_sink = store.sink(other.clone(), "client-0");
    sink.snapshot(&snapshot(vec![client(1), client(2)]))
        .await
        .unwrap();
    other_sink
        .snapshot(&snapshot(vec![client(9)]))
        .await
        .unwrap();
    let first = store.client_spans_after(&run_id, 0, 100).await.unwrap();
    let spans: Vec<&ClientSpan> = first.iter().map(|(_, s)| s).collect();
    assert_eq!(spans, [&client(1), &client(2)]);
    assert!(first[0].0 < first[1].0);
    let last = first[1].0;
    assert_eq!(
        store.client_spans_after(&run_id, last, 100).await.unwrap(),
        []
    );
    // A limit reads the first of them.
    let one = store.client_spans_after(&run_id, 0, 1).await.unwrap();
    assert_eq!(one, first[..1]);
    sink.snapshot(&snapshot(vec![client(3)])).await.unwrap();
    let next = store.client_spans_after(&run_id, last, 100).await.unwrap();
    assert_eq!(next.len(), 1);
    assert!(next[0].0 > last);
    assert_eq!(next[0].1, client(3));
    store.close().await;
}

on_both_backends!(
    client_spans_after,
    sqlite_client_spans_after,
    postgres_client_spans_after
);

// ---- Writes given up on

/// A write the worker gives up on while Postgres keeps it waiting (here on a lock another
/// session holds) does not keep its connection: the server ends the wait at the store's
/// `server_wait_limit`, so the pool is whole again and later writes go through, even while the
/// lock is still held. Without the limit the given-up writes' connections stay waiting with
/// the lock, each holding one of the pool's places, and nothing more is written.
#[tokio::test]
async fn postgres_a_write_given_up_on_does_not_keep_its_connection() {
    let Some(pg) = postgres() else { return };
    let options = StoreOptions {
        acquire_timeout: Duration::from_secs(5),
        server_wait_limit: Some(Duration::from_secs(1)),
        ..StoreOptions::default()
    };
    let store = Store::connect_with(pg.url(), &options)
        .await
        .expect("connect");
    let run_id = unique("given-up");
    store
        .create_run(&new_run(&run_id, "given-up", now_ms()))
        .await
        .unwrap();
    use sqlx::{Connection, Executor};
    let mut holder = sqlx::PgConnection::connect(pg.url()).await.unwrap();
    let lock = "BEGIN; LOCK TABLE events IN EXCLUSIVE MODE";
    holder.execute(lock).await.unwrap();
    let member: MemberName = "client-0".into();
    for attempt in 0..options.max_connections {
        let write = store.record_event(&run_id, &member, EventKind::Running, "held");
        let given_up = tokio::time::timeout(Duration::from_millis(300), write).await;
        assert!(
            given_up.is_err(),
            "attempt {attempt} was not kept waiting: {given_up:?}"
        );
    }
    // The events table is still locked; heartbeats are another table.
    let beat = stress_common::store::within(
        Duration::from_secs(10),
        store.heartbeat(&run_id, &member, now_ms()),
    )
    .await;
    assert!(beat.is_ok(), "{beat:?} ({})", store.connections());
    holder.execute("ROLLBACK").await.unwrap();
    store.close().await;
}
