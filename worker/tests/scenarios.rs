//! Every scenario against a REAL tritonserver (models/ and models-faulty/ loaded together): it
//! passes against the right model and fails, with the expected/actual text a person needs,
//! against a misbehaving one. gRPC, HTTP with the binary tensor extension and HTTP JSON.
//! Plus what happens when the server is SIGKILLed: under CrashingClient and under a whole run.
//!
//! Needs scripts/install-tritonserver.sh to have been run (it installs .local/bin/tritonserver
//! and .local/bin/perf_analyzer).

mod support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stress_common::scenario::Scenario;
use stress_common::status::{
    EventKind, FailureRecord, SinkError, StatusSink, Stopping, WorkerSnapshot,
};
use stress_common::tritonserver::TritonServer;
use worker::client::grpc::GrpcClient;
use worker::client::http::HttpClient;
use worker::client::{
    ClientError, InferRequest, Protocol, RequestedOutput, SequenceFlags, TritonClient, connect,
};
use worker::config::WorkerConfig;
use worker::scenarios::image::ImageBatch;
use worker::scenarios::sequence::START_FLAG_ERROR;
use worker::scenarios::{
    ClientContext, Failure, LoadMode, Outcome, Settings, TestEnv, run_single, run_single_until,
};
use worker::stats::Stats;
use worker::tensor::Tensor;

const SEQUENCES: [Scenario; 5] = [
    Scenario::SequenceValid,
    Scenario::SequenceValidValid,
    Scenario::SequenceValidNoEnd,
    Scenario::SequenceNoEnd,
    Scenario::SequenceNoStart,
];

/// The good models, as the worker's defaults name them.
fn settings() -> Settings {
    Settings {
        sequence_models: vec![("sequence_nobatch".into(), 0), ("sequence_batch".into(), 4)],
        identity_model: "identity_delay".into(),
        load_model: "add_sub".into(),
        image_model: "image_classifier".into(),
        timeout_delay: Duration::from_millis(300),
        timeout_deadline: Duration::from_millis(100),
        // Longer than the default 1 s: a loaded machine may be slow to start the child.
        crash_after: Duration::from_millis(1500),
        worker_binary: PathBuf::from(env!("CARGO_BIN_EXE_worker")),
        load_mode: LoadMode::Concurrency(2),
        request_intervals: None,
        load_target: None,
        load_window: Duration::from_secs(1),
        image_batch: 2,
        perf_analyzer: Some(support::perf_analyzer()),
        request_timeout: Duration::from_secs(25),
        // Infer without --model: the load model.
        infer: worker::model::InferOptions {
            models: vec!["add_sub".parse().unwrap()],
            ..Default::default()
        },
        infer_plan: None,
        trace: None,
    }
}

fn with_sequence_model(model: &str, max_batch_size: i64) -> Settings {
    Settings {
        sequence_models: vec![(model.into(), max_batch_size)],
        ..settings()
    }
}

/// Correlation ids: a fresh one per test, so no test meets another's open sequence.
struct Ids(u64);

impl Ids {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

fn requests_of(stats: &Stats, scenario: Scenario) -> u64 {
    stats.scenario_counts(&[scenario])[0].requests
}

async fn expect_pass(
    label: &str,
    client: &Arc<dyn TritonClient>,
    settings: &Settings,
    scenario: Scenario,
    id: u64,
) {
    let (outcome, stats) = run_single(scenario, client, settings, id, id).await;
    assert_passed(label, settings, scenario, outcome, &stats);
}

/// What a passing test of `scenario` shows: its outcome, its requests and, in an open loop,
/// the lateness of every send.
fn assert_passed(
    label: &str,
    settings: &Settings,
    scenario: Scenario,
    outcome: Outcome,
    stats: &Stats,
) {
    assert_eq!(
        outcome,
        Outcome::Passed,
        "{label}: {scenario} (models {:?} / {} / {} / {}) should pass",
        settings.sequence_models,
        settings.identity_model,
        settings.load_model,
        settings.image_model
    );
    assert!(
        requests_of(stats, scenario) > 0,
        "{label}: {scenario} passed without sending a request"
    );
    if scenario == Scenario::Load && !settings.load_mode.is_closed_loop() {
        // Every open-loop send's lateness is measured, and a request-intervals schedule's
        // cursor moved on by as many sends (the next window goes on from there).
        let counts = &stats.scenario_counts(&[scenario])[0];
        let lateness =
            stress_common::histogram::LatencyHistogram::decode(&counts.send_lateness_histogram)
                .unwrap();
        assert_eq!(lateness.count(), counts.requests, "{label}: {scenario}");
        if let Some((_, cursor)) = &settings.request_intervals {
            assert_eq!(
                cursor.load(std::sync::atomic::Ordering::Relaxed),
                counts.requests,
                "{label}"
            );
        }
    } else {
        assert!(
            stats.scenario_counts(&[scenario])[0]
                .send_lateness_histogram
                .is_empty()
        );
    }
}

async fn expect_failure(
    label: &str,
    client: &Arc<dyn TritonClient>,
    settings: &Settings,
    scenario: Scenario,
    id: u64,
) -> Failure {
    match run_single(scenario, client, settings, id, id).await.0 {
        Outcome::Failed(f) => f,
        other => panic!("{label}: {scenario} should fail, got {other:?}"),
    }
}

/// A sequence checked against sequence_faulty fails at its first step: expected the running sum
/// S, actual S + 1.
fn assert_off_by_one(label: &str, scenario: Scenario, f: &Failure, id: u64) {
    assert_eq!(f.model, "sequence_faulty", "{label}: {scenario}: {f:?}");
    assert_eq!(f.correlation_id, Some(id), "{label}: {scenario}: {f:?}");
    let (sum, rest) = f
        .expected
        .strip_prefix("OUTPUT = [")
        .and_then(|r| r.split_once(']'))
        .unwrap_or_else(|| panic!("{label}: {scenario}: expected {:?}", f.expected));
    let sum: i32 = sum.parse().expect("a number");
    assert!(
        rest.starts_with(" at step 1 of "),
        "{label}: {scenario}: {f:?}"
    );
    assert_eq!(
        f.actual,
        format!("[{}]", sum.wrapping_add(1)),
        "{label}: {scenario}: the actual value shows the model's extra one"
    );
}

/// SequenceNoStart with a context whose id has an open sequence is skipped, and sends nothing.
async fn assert_no_start_skips_open_sequences(label: &str, client: &Arc<dyn TritonClient>) {
    let settings = with_sequence_model("sequence_nobatch", 0);
    let stats = Stats::default();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
    let mut context = ClientContext {
        correlation_id: 999_999,
        server: 0,
        open_sequences: HashSet::from(["sequence_nobatch".to_string()]),
        last_test: None,
    };
    let images = ImageBatch::new(&settings.image_model, settings.image_batch).expect("images");
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut env = TestEnv {
        scenario: Scenario::SequenceNoStart,
        client,
        settings: &settings,
        stats: &stats,
        rng: &mut rng,
        context: &mut context,
        cancel: &cancel,
        images: &images,
        model: String::new(),
        wire: Default::default(),
        schedule: Default::default(),
        answers: Default::default(),
    };
    match worker::scenarios::run(&mut env).await {
        Outcome::Skipped(reason) => assert!(
            reason.contains("correlation id 999999 has an open sequence on sequence_nobatch"),
            "{label}: {reason}"
        ),
        other => panic!("{label}: NoStart on an open sequence should be skipped, got {other:?}"),
    }
    assert_eq!(requests_of(&stats, Scenario::SequenceNoStart), 0, "{label}");
}

fn sequence_request(model: &str, id: u64, start: bool, end: bool) -> InferRequest {
    let mut r = InferRequest::new(model, vec![Tensor::from_i32("INPUT", vec![1], &[1])]);
    r.outputs = vec![RequestedOutput {
        name: "OUTPUT".into(),
        class_count: None,
        datatype: None,
    }];
    r.sequence = Some(SequenceFlags {
        id,
        start,
        end,
        string_id: false,
    });
    r.timeout = Some(Duration::from_secs(25));
    r
}

/// SequenceNoEnd leaves its sequence open; once it has been idle longer than the model's
/// max_sequence_idle_microseconds, Triton reclaims the slot and a request without START on the
/// same id is refused with the START-flag error.
async fn assert_no_end_is_reclaimed(label: &str, client: &Arc<dyn TritonClient>, id: u64) {
    let model = "sequence_nobatch";
    let settings = with_sequence_model(model, 0);
    expect_pass(label, client, &settings, Scenario::SequenceNoEnd, id).await;
    // Still open: a request without START continues the sequence.
    let r = client
        .infer(&sequence_request(model, id, false, false))
        .await;
    assert!(
        r.is_ok(),
        "{label}: the open sequence {id} should still take requests: {r:?}"
    );
    // models/sequence_nobatch/config.pbtxt: max_sequence_idle_microseconds (3 s); the margin
    // lets Triton's reaper run on a loaded machine.
    let idle = support::sequence_idle(model);
    tokio::time::sleep(idle + Duration::from_secs(3)).await;
    match client
        .infer(&sequence_request(model, id, false, false))
        .await
    {
        Err(e) => assert!(
            e.to_string().contains(START_FLAG_ERROR),
            "{label}: after {idle:?} idle, expected the START-flag error, got {e}"
        ),
        Ok(r) => panic!(
            "{label}: sequence {id} should have been reclaimed after {idle:?} idle, got {r:?}"
        ),
    }
    // The scenario agrees: with the slot gone, SequenceNoStart on the same id passes.
    expect_pass(label, client, &settings, Scenario::SequenceNoStart, id).await;
}

/// Every scenario once against the good models (passes) and once against a faulty one (fails
/// with the right expected/actual), over one client.
async fn walk_every_scenario(
    label: &str,
    client: Arc<dyn TritonClient>,
    server: &mut TritonServer,
    ids: &mut Ids,
) {
    let client = &client;
    let good = settings();

    // Sequences, on the unbatched (direct) and the batched (oldest) model.
    for (model, batch) in [("sequence_nobatch", 0), ("sequence_batch", 4)] {
        let s = with_sequence_model(model, batch);
        for scenario in SEQUENCES {
            expect_pass(label, client, &s, scenario, ids.next()).await;
        }
    }
    // ... against the model that adds one too many.
    let faulty = with_sequence_model("sequence_faulty", 0);
    for scenario in &SEQUENCES[..4] {
        let id = ids.next();
        let f = expect_failure(label, client, &faulty, *scenario, id).await;
        assert_off_by_one(label, *scenario, &f, id);
    }
    // sequence_faulty still has a sequence batcher, so it refuses a request without START.
    expect_pass(
        label,
        client,
        &faulty,
        Scenario::SequenceNoStart,
        ids.next(),
    )
    .await;
    // NoStart against a model without a sequence batcher: the request succeeds, which is wrong.
    let id = ids.next();
    let no_batcher = with_sequence_model("sequence_no_batcher", 0);
    let f = expect_failure(label, client, &no_batcher, Scenario::SequenceNoStart, id).await;
    assert_eq!(f.model, "sequence_no_batcher", "{label}: {f:?}");
    assert_eq!(f.correlation_id, Some(id), "{label}: {f:?}");
    assert_eq!(
        f.expected,
        format!("an error containing \"{START_FLAG_ERROR}\""),
        "{label}"
    );
    assert_eq!(f.actual, "a successful response Ok([1])", "{label}");
    assert_no_start_skips_open_sequences(label, client).await;

    // Timeout: the delayed identity times out; the wrong one answers at once.
    expect_pass(label, client, &good, Scenario::Timeout, ids.next()).await;
    // A deadline long enough that the wrong model's immediate answer always beats it, even on
    // a loaded machine or on the model's cold first request.
    let wrong = Settings {
        identity_model: "identity_wrong".into(),
        timeout_delay: Duration::from_secs(10),
        timeout_deadline: Duration::from_secs(5),
        ..settings()
    };
    let f = expect_failure(label, client, &wrong, Scenario::Timeout, ids.next()).await;
    assert_eq!(f.model, "identity_wrong", "{label}");
    assert_eq!(
        f.expected, "a deadline exceeded after 5s (model delay 10s)",
        "{label}"
    );
    assert!(
        f.actual.starts_with("a response ")
            && f.actual
                .ends_with(" ms after the request, before the deadline"),
        "{label}: {}",
        f.actual
    );

    // Load, closed and open loop: add_sub passes; add_sub_wrong's OUTPUT1 is a sum.
    // Request intervals: 5 ms, then 15 ms (a mean of 100/s), cycled.
    let gaps = stress_common::schedule::RequestIntervals::parse("5000\n15000\n").unwrap();
    for mode in [
        LoadMode::Concurrency(2),
        LoadMode::Rate(100.0),
        LoadMode::Poisson(100.0),
        LoadMode::Intervals("gaps".into()),
    ] {
        let s = Settings {
            load_mode: mode.clone(),
            request_intervals: matches!(mode, LoadMode::Intervals(_))
                .then(|| (gaps.clone(), Default::default())),
            ..settings()
        };
        expect_pass(label, client, &s, Scenario::Load, ids.next()).await;
        let wrong = Settings {
            load_model: "add_sub_wrong".into(),
            ..s
        };
        let f = expect_failure(label, client, &wrong, Scenario::Load, ids.next()).await;
        assert_eq!(f.model, "add_sub_wrong", "{label}: {mode:?}");
        let want = f
            .expected
            .strip_prefix("OUTPUT1 = ")
            .unwrap_or_else(|| panic!("{label}: {mode:?}: expected {:?}", f.expected));
        assert!(want.starts_with('['), "{label}: {mode:?}: {f:?}");
        assert!(f.actual.starts_with('['), "{label}: {mode:?}: {f:?}");
        assert_ne!(want, f.actual, "{label}: {mode:?}");
    }

    // ImageClassification: the wrong model's labels are reversed (red is called gray).
    expect_pass(
        label,
        client,
        &good,
        Scenario::ImageClassification,
        ids.next(),
    )
    .await;
    let wrong = Settings {
        image_model: "image_classifier_wrong".into(),
        ..settings()
    };
    let f = expect_failure(
        label,
        client,
        &wrong,
        Scenario::ImageClassification,
        ids.next(),
    )
    .await;
    assert_eq!(f.model, "image_classifier_wrong", "{label}");
    assert_eq!(
        f.expected, "label red for batch entry 0 (tomato.png)",
        "{label}"
    );
    assert!(f.actual.ends_with(":0:gray\""), "{label}: {f:?}");

    expect_crashing_client_to_pass(label, client, server, &good, ids).await;

    // PerfAnalyzer: runs against add_sub; a model that does not exist makes it fail.
    expect_pass(label, client, &good, Scenario::PerfAnalyzer, ids.next()).await;
    let missing = Settings {
        load_model: "no_such_model".into(),
        ..settings()
    };
    let f = expect_failure(label, client, &missing, Scenario::PerfAnalyzer, ids.next()).await;
    assert_eq!(f.expected, "perf_analyzer to exit 0", "{label}");
    assert!(f.actual.contains("no_such_model"), "{label}: {f:?}");
}

/// CrashingClient: the child is killed, the server keeps serving. Once in CI (2026-12-07, gRPC)
/// tritonserver 2.51 had died by the health check after the kill, its log not kept; 860
/// SIGKILLed children by hand did not do it again (docs/limitations.md). The scenario is right
/// to fail on a dead server, but this test is about the worker: a server that died of a signal
/// is started again (its log's tail printed) and the scenario runs once more. A failure with
/// the server still up fails the test at once.
async fn expect_crashing_client_to_pass(
    label: &str,
    client: &Arc<dyn TritonClient>,
    server: &mut TritonServer,
    settings: &Settings,
    ids: &mut Ids,
) {
    let scenario = Scenario::CrashingClient;
    let id = ids.next();
    let (mut outcome, mut stats) = run_single(scenario, client, settings, id, id).await;
    if outcome != Outcome::Passed && support::restarted_if_it_crashed(server).await {
        eprintln!("{label}: {scenario} failed on a server that crashed ({outcome:?}): once more");
        let id = ids.next();
        (outcome, stats) = run_single(scenario, client, settings, id, id).await;
    }
    assert_passed(label, settings, scenario, outcome, &stats);
}

/// A perf_analyzer run still going when the worker stops gets its finishing time, then is
/// killed: the test is skipped and the run is counted as uncounted (the reconciliation then
/// allows its requests), here with a "perf_analyzer" that never ends.
async fn assert_a_killed_perf_analyzer_run_is_counted_as_uncounted(
    label: &str,
    client: &Arc<dyn TritonClient>,
) {
    let dir = tempfile::tempdir().unwrap();
    let never_ends = dir.path().join("perf_analyzer");
    std::fs::write(&never_ends, "#!/bin/sh\nexec sleep 60\n").unwrap();
    std::fs::set_permissions(
        &never_ends,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let settings = Settings {
        perf_analyzer: Some(never_ends),
        ..settings()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stopper.cancel();
    });
    let (outcome, stats) =
        run_single_until(Scenario::PerfAnalyzer, client, &settings, 1, 7, &stop).await;
    match outcome {
        Outcome::Skipped(reason) => {
            assert!(reason.contains("perf_analyzer killed"), "{label}: {reason}")
        }
        other => panic!("{label}: a killed perf_analyzer run should be skipped, got {other:?}"),
    }
    let counts = stats.model_counts(&[Scenario::PerfAnalyzer]);
    assert_eq!(counts.len(), 1, "{label}: {counts:?}");
    assert_eq!(
        (
            counts[0].model.as_str(),
            counts[0].uncounted_runs,
            counts[0].requests
        ),
        (settings.load_model.as_str(), 1, 0),
        "{label}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_every_scenario_passes_on_good_models_and_fails_on_faulty_ones() {
    let _serial = support::SERVER_LOCK.lock().await;
    let mut server = support::start_server("scenarios-grpc").await;
    let client: Arc<dyn TritonClient> = Arc::new(
        GrpcClient::connect(&server.grpc_address())
            .await
            .expect("gRPC connect"),
    );
    let mut ids = Ids(1000);
    walk_every_scenario("grpc", client.clone(), &mut server, &mut ids).await;
    assert_no_end_is_reclaimed("grpc", &client, ids.next()).await;
    assert_a_killed_perf_analyzer_run_is_counted_as_uncounted("grpc", &client).await;
    support::stop_server(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_binary_and_json_every_scenario_passes_on_good_models_and_fails_on_faulty_ones() {
    let _serial = support::SERVER_LOCK.lock().await;
    let mut server = support::start_server("scenarios-http").await;
    let binary: Arc<dyn TritonClient> =
        Arc::new(HttpClient::new(&server.http_address()).expect("HTTP client"));
    let json: Arc<dyn TritonClient> = Arc::new(
        HttpClient::new(&server.http_address())
            .expect("HTTP client")
            .with_binary(false),
    );
    walk_every_scenario("http binary", binary.clone(), &mut server, &mut Ids(1000)).await;
    walk_every_scenario("http json", json.clone(), &mut server, &mut Ids(2000)).await;
    assert_sent_now_from_a_plain_thread_answers_as_infer("http binary", &binary).await;
    assert_sent_now_from_a_plain_thread_answers_as_infer("http json", &json).await;
    assert_no_end_is_reclaimed("http", &binary, 3000).await;
    support::stop_server(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_client_fails_when_the_server_is_killed() {
    let _serial = support::SERVER_LOCK.lock().await;
    let mut server = support::start_server("crashing-killed").await;
    let client: Arc<dyn TritonClient> = Arc::new(
        GrpcClient::connect(&server.grpc_address())
            .await
            .expect("gRPC connect"),
    );
    let settings = Settings {
        crash_after: Duration::from_secs(3),
        ..settings()
    };
    // SIGKILL the server while the child is sending.
    let ((outcome, _), ()) = tokio::join!(
        run_single(Scenario::CrashingClient, &client, &settings, 1, 1),
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            server.kill().await;
        }
    );
    let Outcome::Failed(f) = outcome else {
        panic!("CrashingClient should fail when the server dies, got {outcome:?}");
    };
    assert_eq!(f.model, "identity_delay");
    if f.expected == "server live" {
        // The usual case: the child was sending when the server died; the health check after
        // killing the child cannot reach the server.
        assert!(f.actual.starts_with("transport error: "), "{f:?}");
    } else {
        // A very slow machine: the child had not connected yet and could not.
        assert_eq!(f.expected, "the child to run until it is killed", "{f:?}");
        assert!(f.actual.contains("transport error: "), "{f:?}");
    }
    assert!(f.actual.contains("Connection refused"), "{f:?}");
}

/// Captures what a run reports, and answers what the test says about the driver's stop.
#[derive(Default)]
struct CapturingSink {
    events: Mutex<Vec<(EventKind, String)>>,
    failures: Mutex<Vec<FailureRecord>>,
    snapshots: Mutex<u64>,
    last_snapshot: Mutex<Option<WorkerSnapshot>>,
    stopping: Mutex<Option<Stopping>>,
}

#[async_trait::async_trait]
impl StatusSink for CapturingSink {
    async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
        self.events.lock().unwrap().push((kind, details.into()));
        Ok(())
    }
    async fn heartbeat(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn snapshot(&self, snapshot: &WorkerSnapshot) -> Result<(), SinkError> {
        *self.snapshots.lock().unwrap() += 1;
        *self.last_snapshot.lock().unwrap() = Some(snapshot.clone());
        Ok(())
    }
    async fn failure(&self, failure: &FailureRecord) -> Result<(), SinkError> {
        self.failures.lock().unwrap().push(failure.clone());
        Ok(())
    }
    async fn stopping(&self) -> Result<Option<Stopping>, SinkError> {
        Ok(self.stopping.lock().unwrap().clone())
    }
}

/// A whole run of PerfAnalyzer alone, whose "perf_analyzer" never ends (it touches `started`
/// first), with a drain timeout of ten minutes; the sink answers `stopping`.
async fn run_with_a_test_in_flight(
    stopping: Stopping,
) -> (
    tokio::task::JoinHandle<Result<worker::run::WorkerReport, worker::run::WorkerError>>,
    Arc<CapturingSink>,
    tokio_util::sync::CancellationToken,
    TritonServer,
    tempfile::TempDir,
) {
    let server = support::start_server("stop-in-flight").await;
    let dir = tempfile::tempdir().unwrap();
    let never_ends = dir.path().join("perf_analyzer");
    std::fs::write(
        &never_ends,
        format!(
            "#!/bin/sh\ntouch '{}'\nexec sleep 600\n",
            dir.path().join("started").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &never_ends,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = WorkerConfig {
        servers: vec![server.grpc_address()],
        protocol: Protocol::Grpc,
        http_binary: true,
        mix: vec![(Scenario::PerfAnalyzer, 1)],
        concurrency: 1,
        duration: None,
        seed: 7,
        corr_ids: stress_common::contract::CorrIdBlock {
            base: 1,
            size: 1 << 20,
        },
        settings: Settings {
            perf_analyzer: Some(never_ends),
            ..settings()
        },
        poll_interval: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(600),
        driver_judges: false,
        sequence_idle_us: Default::default(),
        client: None,
        member: None,
    };
    let sink = Arc::new(CapturingSink::default());
    *sink.stopping.lock().unwrap() = Some(stopping);
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker::run::run(config, sink.clone(), None, cancel.clone()));
    let started = dir.path().join("started");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "perf_analyzer never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (run, sink, cancel, server, dir)
}

/// Stops a run of [`run_with_a_test_in_flight`] and returns its final PerfAnalyzer counts:
/// (tests skipped, perf_analyzer runs uncounted).
async fn stop_with_a_test_in_flight(stopping: Stopping) -> (u64, u64) {
    let (run, sink, cancel, _server, _dir) = run_with_a_test_in_flight(stopping).await;
    cancel.cancel();
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the stop waited past the test's own finishing time")
        .expect("the run does not panic")
        .expect("the run ends cleanly");
    assert_eq!(report.blocking_failures, 0, "{}", report.render());
    let last = sink
        .last_snapshot
        .lock()
        .unwrap()
        .clone()
        .expect("a final snapshot");
    let name = Scenario::PerfAnalyzer.name();
    let skipped = last
        .scenarios
        .iter()
        .find(|c| c.scenario == name)
        .map_or(0, |c| c.skipped);
    let uncounted = last
        .models
        .iter()
        .find(|m| m.scenario == name)
        .unwrap_or_else(|| panic!("no PerfAnalyzer row: {:?}", last.models))
        .uncounted_runs;
    (skipped, uncounted)
}

/// A worker stopped because the run failed (the driver's stop, read from the store, says so)
/// does not wait for its tests in flight: a perf_analyzer that never ends is dropped at once,
/// not skipped after the scenario's own finishing time (the drain timeout is ten minutes), and
/// its run counts as uncounted. Stopped because the load phase ended, the same test gets its
/// finishing time: killed after it, it is skipped, and uncounted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_because_the_run_failed_abandons_its_tests_in_flight() {
    let _serial = support::SERVER_LOCK.lock().await;
    let failed = Stopping::Failed {
        member: "triton-0".into(),
    };
    assert_eq!(stop_with_a_test_in_flight(failed).await, (0, 1));
    assert_eq!(
        stop_with_a_test_in_flight(Stopping::LoadPhaseEnded).await,
        (1, 1)
    );
}

/// A whole run (`worker::run::run`) whose server is SIGKILLed in the middle: the run still ends
/// on time, the report has failures, all of them after the kill and naming the server, and a
/// FAILURE event names the server.
async fn server_killed_mid_run(protocol: Protocol) {
    let _serial = support::SERVER_LOCK.lock().await;
    let mut server = support::start_server(&format!("run-killed-{}", protocol.as_str())).await;
    let address = match protocol {
        Protocol::Grpc => server.grpc_address(),
        Protocol::Http => server.http_address(),
    };
    // Every scenario but the external perf_analyzer (allowed to fail; CPU the others need).
    let mix: Vec<(Scenario, u32)> = Scenario::ALL
        .into_iter()
        .filter(|s| *s != Scenario::PerfAnalyzer)
        .map(|s| (s, 1))
        .collect();
    let config = WorkerConfig {
        servers: vec![address.clone()],
        protocol,
        http_binary: true,
        mix,
        concurrency: 2,
        duration: Some(Duration::from_secs(10)),
        seed: 42,
        corr_ids: stress_common::contract::CorrIdBlock {
            base: 1,
            size: 1 << 20,
        },
        settings: Settings {
            sequence_models: vec![("sequence_nobatch".into(), 0), ("sequence_batch".into(), 0)],
            ..settings()
        },
        poll_interval: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(5),
        driver_judges: false,
        sequence_idle_us: Default::default(),
        client: None,
        member: None,
    };
    let sink = Arc::new(CapturingSink::default());
    let run = tokio::spawn(worker::run::run(
        config,
        sink.clone(),
        None,
        tokio_util::sync::CancellationToken::new(),
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let killed_at = stress_common::now_ms();
    server.kill().await;
    let report = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the run ends although its server is gone")
        .expect("the run does not panic")
        .expect("pre-flight passed before the kill");

    let total = report.rows.last().expect("a TOTAL row");
    assert_eq!(total.scenario, "TOTAL");
    assert!(report.blocking_failures > 0, "{}", report.render());
    assert_eq!(report.exit_code(), 1);
    assert!(
        total.tests > total.failures,
        "tests passed before the kill: {}",
        report.render()
    );
    assert!(!report.failures.is_empty());
    for f in &report.failures {
        assert_eq!(f.server, address, "{f}");
        assert!(
            f.at_ms >= killed_at,
            "a failure before the server was killed: {f}"
        );
    }
    let recorded = sink.failures.lock().unwrap().clone();
    assert!(!recorded.is_empty());
    let events = sink.events.lock().unwrap().clone();
    let kinds: Vec<EventKind> = events.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        &kinds[..2],
        &[EventKind::Starting, EventKind::Running],
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::Failure && d.contains(&address)),
        "no FAILURE event names the server {address}: {events:?}"
    );
    let (last_kind, last) = events.last().expect("events");
    assert_eq!(*last_kind, EventKind::Failure, "{events:?}");
    assert!(last.ends_with("failed tests"), "{last}");
    assert!(
        stress_common::status::is_final_event(*last_kind, last),
        "the last event is not marked final: {last}"
    );
    assert!(*sink.snapshots.lock().unwrap() > 0);
    eprintln!(
        "{}: {} failed tests recorded after the kill",
        protocol.as_str(),
        recorded.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_server_killed_mid_run_fails_the_run_and_names_the_server() {
    server_killed_mid_run(Protocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_killed_mid_run_fails_the_run_and_names_the_server() {
    server_killed_mid_run(Protocol::Http).await;
}

/// Nothing listens: both clients say so, with the cause ("Connection refused").
#[tokio::test]
async fn clients_name_the_cause_when_nothing_listens() {
    let closed = support::ClosedPort::new();
    let address = closed.address();
    let grpc = connect(Protocol::Grpc, &address, true).await;
    let e = grpc
        .err()
        .expect("gRPC connect to a closed port")
        .to_string();
    assert!(
        e.starts_with(&format!("transport error: {address}")) && e.contains("Connection refused"),
        "{e}"
    );
    let http = connect(Protocol::Http, &address, true)
        .await
        .expect("HTTP clients connect lazily");
    assert_eq!(http.protocol(), Protocol::Http);
    let e = http
        .server_ready()
        .await
        .expect_err("nothing listens")
        .to_string();
    assert!(
        e.starts_with("transport error: ") && e.contains("Connection refused"),
        "{e}"
    );
}

/// add_sub's request for `a` and `b`, both outputs asked for.
fn add_sub_request(model: &str, a: &[i32], b: &[i32]) -> InferRequest {
    let n = a.len() as i64;
    let mut request = InferRequest::new(
        model,
        vec![
            Tensor::from_i32("INPUT0", vec![n], a),
            Tensor::from_i32("INPUT1", vec![n], b),
        ],
    );
    request.outputs = ["OUTPUT0", "OUTPUT1"]
        .map(|name| RequestedOutput {
            name: name.into(),
            class_count: None,
            datatype: None,
        })
        .to_vec();
    request
}

/// An open loop's pacer sends with `send_now` from its own thread: what comes back is what
/// `infer` gets, right from add_sub and wrong from add_sub_wrong (its OUTPUT1 is a sum), and
/// Triton's error for a model it does not have.
async fn assert_sent_now_from_a_plain_thread_answers_as_infer(
    label: &str,
    client: &Arc<dyn TritonClient>,
) {
    let a: Vec<i32> = (0..16).map(|i| i * 3 - 20).collect();
    let b: Vec<i32> = (0..16).map(|i| 7 - i * i).collect();
    for model in ["add_sub", "add_sub_wrong", "no_such_model"] {
        let request = add_sub_request(model, &a, &b);
        let prepared = client.prepare(&request).unwrap();
        let sender = client.clone();
        // The first send finds no connection of the pacer's kind and has one made.
        let call = std::thread::spawn(move || {
            for _ in 0..500 {
                if let Some(call) = sender.send_now(&prepared, Some(Duration::from_secs(10))) {
                    return call;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            panic!("send_now never sent");
        })
        .join()
        .unwrap();
        let (sent, inferred) = (call.await, client.infer(&request).await);
        match model {
            "no_such_model" => {
                let Err(ClientError::Server { code, message }) = sent else {
                    panic!("{label}: {model}: {sent:?}");
                };
                assert!(message.contains("no_such_model"), "{label}: {message}");
                let Err(ClientError::Server { code: inferred, .. }) = inferred else {
                    panic!("{label}: {inferred:?}");
                };
                assert_eq!(code, inferred, "{label}");
            }
            _ => {
                let (sent, inferred) = (sent.unwrap(), inferred.unwrap());
                let outputs = |r: &worker::client::InferResponse| {
                    ["OUTPUT0", "OUTPUT1"].map(|o| r.output(o).unwrap().to_i32().unwrap())
                };
                assert_eq!(outputs(&sent), outputs(&inferred), "{label}: {model}");
                let [sum, difference] = outputs(&sent);
                let right_sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
                assert_eq!(sum, right_sum, "{label}: {model}");
                let right: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
                if model == "add_sub" {
                    assert_eq!(difference, right, "{label}");
                } else {
                    assert_ne!(difference, right, "{label}");
                }
            }
        }
    }
}

/// A server with add_sub only (quick to start), on the given ports (0: free ones).
async fn start_add_sub_server(name: &str, grpc_port: u16, http_port: u16) -> TritonServer {
    support::start_server_with(name, |spec| {
        spec.model_repositories = vec![support::repo_root().join("models")];
        spec.grpc_port = grpc_port;
        spec.http_port = http_port;
        spec.extra_args = vec![
            "--model-control-mode=explicit".into(),
            "--load-model=add_sub".into(),
        ];
    })
    .await
}

/// The gRPC client's one HTTP/2 connection: the pre-encoded ModelInfer path returns correct
/// tensors and Triton's own errors; a killed server is reported with its cause; and the same
/// client serves again, on a new connection, once a server is back on the address.
#[tokio::test]
async fn grpc_client_reports_server_errors_and_reconnects_after_a_restart() {
    let _serial = support::SERVER_LOCK.lock().await;
    let mut server = start_add_sub_server("reconnect-1", 0, 0).await;
    let address = server.grpc_address();
    let client = GrpcClient::connect(&address).await.expect("gRPC connect");
    // add_sub takes 16 values per input.
    let a: Vec<i32> = (0..16).map(|i| i * 65_537 - 300_000).collect();
    let b: Vec<i32> = (0..16).map(|i| 1_000 - i * i * 4_099).collect();
    let sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let difference: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    let good = client
        .prepare(&add_sub_request("add_sub", &a, &b))
        .expect("prepare");
    let check = |r: worker::client::InferResponse, label: &str| {
        let got_sum = r
            .output("OUTPUT0")
            .expect("OUTPUT0")
            .to_i32()
            .expect("INT32");
        let got_difference = r
            .output("OUTPUT1")
            .expect("OUTPUT1")
            .to_i32()
            .expect("INT32");
        assert_eq!(got_sum, sum, "{label}");
        assert_eq!(got_difference, difference, "{label}");
    };
    check(
        client.infer_prepared(&good, None).await.expect("infer"),
        "before the kill",
    );

    // Triton's error comes back through the same path, code and message intact.
    let unknown = client
        .prepare(&add_sub_request("no_such_model", &a, &b))
        .expect("prepare");
    match client.infer_prepared(&unknown, None).await {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, "NotFound", "{message}");
            assert!(message.contains("no_such_model"), "{message}");
        }
        other => panic!("an unknown model should be a server error, got {other:?}"),
    }

    let (grpc_port, http_port) = (server.spec.grpc_port, server.spec.http_port);
    server.kill().await;
    // The connection may still look open for a moment; within a few calls the client tries a
    // new one and says why it cannot have it.
    let mut last = None;
    for _ in 0..50 {
        match client.infer_prepared(&good, None).await {
            Ok(_) => panic!("a killed server answered"),
            Err(e) => {
                assert!(matches!(e, ClientError::Transport(_)), "{e:?}");
                let refused = e.to_string().contains("Connection refused");
                last = Some(e);
                if refused {
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = last.expect("at least one call").to_string();
    assert!(
        last.contains(&address) && last.contains("Connection refused"),
        "{last}"
    );

    let restarted = start_add_sub_server("reconnect-2", grpc_port, http_port).await;
    check(
        client
            .infer_prepared(&good, None)
            .await
            .expect("the same client after the restart"),
        "after the restart",
    );
    // tonic's calls share the new connection.
    assert!(client.server_live().await.expect("ServerLive"));
    support::stop_server(restarted).await;
}
