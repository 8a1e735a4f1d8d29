//! The worker binary as the driver starts it, recording into the run's SQLite store, against
//! a REAL tritonserver 2.51.
//!
//! Traced requests: the worker sends a share of its load with a W3C `traceparent` and records
//! their client spans; Triton (tracing at rate 0: only requests that carry a context) exports
//! its spans over OTLP/HTTP to a receiver the test runs. Every server `InferRequest` span must
//! be the child of a client span of the same trace, every client span must have one (over gRPC
//! most: see the test), and about the share of the requests must be traced. Over gRPC (open
//! loop: the pacer's path) and HTTP (closed loop).
//!
//! A replaced member: a second process under the same member name carries on from what the
//! first recorded.
//!
//! Needs scripts/install-tritonserver.sh to have been run (.local/bin/tritonserver).

mod support;

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stress_common::contract::STORE_URL_ENV;
use stress_common::histogram::LatencyHistogram;
use stress_common::store::{NewRun, Store};
use stress_common::trace::ClientSpan;

/// What the OTLP receiver got: each POSTed body, parsed, or why it could not be.
type Bodies = Arc<Mutex<Vec<Result<Value, String>>>>;

/// A minimal OTLP/HTTP trace receiver on 127.0.0.1: keeps every JSON body posted to
/// `/v1/traces`.
async fn otlp_receiver() -> (std::net::SocketAddr, Bodies) {
    use axum::{body::Bytes, extract::State, http::StatusCode};
    async fn collect(State(bodies): State<Bodies>, body: Bytes) -> StatusCode {
        let parsed = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "not JSON ({e}): {:?}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )
        });
        bodies.lock().unwrap().push(parsed);
        StatusCode::OK
    }
    let bodies = Bodies::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(collect))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(bodies.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, bodies)
}

/// One server span as the test reads it from Triton's OTLP/JSON (camelCase, hex ids, times
/// as decimal strings).
#[derive(Debug, Clone)]
struct ServerSpan {
    name: String,
    trace_id: String,
    parent_span_id: String,
    start_ns: i64,
    end_ns: i64,
}

/// Every span the receiver got so far.
fn server_spans(bodies: &Bodies) -> Vec<ServerSpan> {
    let ns = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).unwrap_or(-1);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    for body in bodies.lock().unwrap().iter() {
        let body = body.as_ref().unwrap_or_else(|e| panic!("an OTLP body {e}"));
        let resources = body["resourceSpans"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for scope in resources.iter().flat_map(|r| r["scopeSpans"].as_array()) {
            for span in scope.iter().flat_map(|s| s["spans"].as_array()).flatten() {
                out.push(ServerSpan {
                    name: text(&span["name"]),
                    trace_id: text(&span["traceId"]),
                    parent_span_id: text(&span["parentSpanId"]),
                    start_ns: ns(&span["startTimeUnixNano"]),
                    end_ns: ns(&span["endTimeUnixNano"]),
                });
            }
        }
    }
    out
}

/// What one traced worker run left: its client spans (from its store) and its Load requests
/// (from its report).
struct TracedRun {
    spans: Vec<ClientSpan>,
    requests: u64,
}

/// A fresh SQLite store in `dir` with the run `run_id` in it, as the driver creates one; and
/// its URL.
async fn store_with_run(dir: &std::path::Path, run_id: &str) -> (Store, String) {
    let url = Store::sqlite_url(&dir.join("status.sqlite"));
    let store = Store::connect(&url).await.unwrap();
    let run = NewRun {
        run_id: run_id.into(),
        name: "worker-store".into(),
        matrix_yaml: "groups: []\n".into(),
        launcher: "local".into(),
        started_at_ms: stress_common::now_ms(),
        fingerprint: None,
    };
    store.create_run(&run).await.unwrap();
    (store, url)
}

/// Runs the worker binary as `member` of `run_id` with `args`, recording into the store at
/// `url` (given by the environment, as the driver gives it); returns its report.json.
async fn worker_run(url: &str, run_id: &str, member: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(args)
        .args(["--run-id", run_id, "--member-id", member, "--report-json"])
        .arg(&report)
        .env(STORE_URL_ENV, url)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the worker ends")
        .expect("the worker runs");
    let said = || {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(out.status.code(), Some(0), "{}", said());
    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
}

/// The Load row of a worker's report.
fn load_row(report: &Value) -> &Value {
    report["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["scenario"] == "Load"))
        .unwrap_or_else(|| panic!("no Load row: {report:#}"))
}

/// Runs the worker binary on `address` for 3 s of Load at `share`, recording into a fresh
/// SQLite store.
async fn traced_run(protocol: &str, address: &str, load: [&str; 2], share: f64) -> TracedRun {
    let dir = tempfile::tempdir().unwrap();
    let run_id = format!("traces-{protocol}");
    let (store, url) = store_with_run(dir.path(), &run_id).await;
    let share = share.to_string();
    let mut args = vec![
        "--servers",
        address,
        "--protocol",
        protocol,
        "--scenarios",
        "Load",
        "--concurrency",
        "1",
        "--duration",
        "3s",
        "--poll-interval",
        "500ms",
        "--trace-share",
        &share,
    ];
    args.extend(load);
    let report = worker_run(&url, &run_id, "clients-0", &args).await;
    let requests = load_row(&report)["requests"].as_u64().expect("a count");
    let spans = store.traced_tail(&run_id.into(), 1.0).await.unwrap().client;
    TracedRun { spans, requests }
}

/// The `InferRequest` spans received once every client span's trace has one, or once none
/// came for 2 s (Triton exports every 200 ms), at most 20 s after the run.
async fn server_requests(bodies: &Bodies, client: &[ClientSpan]) -> Vec<ServerSpan> {
    let wanted: HashSet<&str> = client.iter().map(|s| s.trace_id.as_str()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut last = (0, tokio::time::Instant::now());
    loop {
        let requests: Vec<ServerSpan> = server_spans(bodies)
            .into_iter()
            .filter(|s| s.name == "InferRequest")
            .collect();
        let now = tokio::time::Instant::now();
        if requests.len() != last.0 {
            last = (requests.len(), now);
        }
        let seen: HashSet<&str> = requests.iter().map(|s| s.trace_id.as_str()).collect();
        let quiet = now - last.1 > Duration::from_secs(2);
        if wanted.is_subset(&seen) || quiet || now > deadline {
            return requests;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The run's traced share is about `share` of its requests (six standard deviations of a
/// binomial draw), and each span says what the worker saw.
fn check_client_spans(run: &TracedRun, protocol: &str, share: f64, address: &str) {
    let n = run.requests as f64;
    let traced = run.spans.len() as f64;
    let sd = (n * share * (1.0 - share)).sqrt();
    assert!(run.requests > 100, "{} requests", run.requests);
    assert!(
        (traced - n * share).abs() <= 6.0 * sd + 1.0,
        "{traced} traced of {n} requests at share {share}"
    );
    for s in &run.spans {
        assert_eq!(
            (s.scenario.as_str(), s.model.as_str(), s.server.as_str()),
            ("Load", "add_sub", address)
        );
        assert!(s.ok, "{s:?}");
        assert!(
            s.intended_ns <= s.sent_ns && s.sent_ns < s.answered_ns,
            "{s:?}"
        );
        // Traced requests go the load's own way, which has the kernel's receive time of each
        // answer (converted to the client's clock: 1 ms of slack).
        if let Some(received) = s.received_ns {
            assert!(
                s.sent_ns < received && received <= s.answered_ns + 1_000_000,
                "{s:?}"
            );
        }
    }
    // Every one (an HTTP one finding no idle connection gets one made for it).
    let stamped = run.spans.iter().filter(|s| s.received_ns.is_some()).count();
    assert_eq!(
        stamped,
        run.spans.len(),
        "{protocol}: traced requests without a receive time"
    );
}

/// Every server `InferRequest` span is the child of a client span of its trace, one per
/// trace, within the client's send and answer (one host, one clock: 100 ms of slack for a
/// descheduled thread, far below a clock conversion's error); and at least `least` of the
/// client spans have theirs.
fn check_joined(client: &[ClientSpan], server: &[ServerSpan], least: f64) {
    let parents: HashMap<(&str, &str), &ClientSpan> = client
        .iter()
        .map(|c| ((c.trace_id.as_str(), c.span_id.as_str()), c))
        .collect();
    const SLACK_NS: i64 = 100_000_000;
    for s in server {
        let parent = (s.trace_id.as_str(), s.parent_span_id.as_str());
        let c = parents
            .get(&parent)
            .unwrap_or_else(|| panic!("a server span without its client span: {s:?}"));
        assert!(
            s.start_ns >= c.sent_ns - SLACK_NS && s.end_ns <= c.answered_ns + SLACK_NS,
            "{s:?} outside {c:?}"
        );
    }
    let traces: HashSet<&str> = server.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(
        traces.len(),
        server.len(),
        "one InferRequest span per trace"
    );
    assert!(
        server.len() as f64 >= least * client.len() as f64,
        "{} of {} traced requests have their server span",
        server.len(),
        client.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traced_requests_reach_triton_as_the_parents_of_its_spans() {
    let _serial = support::SERVER_LOCK.lock().await;
    let (receiver, bodies) = otlp_receiver().await;
    let server = support::start_server_with("traces", |spec| {
        spec.model_repositories.truncate(1);
        spec.extra_args.push("--model-control-mode=explicit".into());
        spec.extra_args.push("--load-model=add_sub".into());
        for config in [
            "mode=opentelemetry".to_string(),
            "level=TIMESTAMPS".into(),
            // Rate 0: Triton traces only the requests that carry a context.
            "rate=0".into(),
            format!("opentelemetry,url=http://{receiver}/v1/traces"),
            "opentelemetry,bsp_schedule_delay=200".into(),
        ] {
            spec.extra_args.extend(["--trace-config".into(), config]);
        }
    })
    .await;
    // Over gRPC, Triton 2.51 misses some contexts: its carrier (`GrpcServerCarrier::Get`)
    // reads gRPC's metadata value as a C string, so whatever follows the value in gRPC's
    // buffer makes it an invalid `traceparent` unless it is a NUL (the bug opentelemetry-cpp
    // fixed in its gRPC example, PR 3304); 7-11% of traced requests went untraced here. HTTP
    // reads the header whole: every one is traced.
    let runs = [
        (
            "grpc",
            server.grpc_address(),
            ["--load-rate", "300"],
            0.5,
            0.75,
        ),
        (
            "http",
            server.http_address(),
            ["--load-concurrency", "1"],
            0.2,
            1.0,
        ),
    ];
    for (protocol, address, load, share, least) in runs {
        let run = traced_run(protocol, &address, load, share).await;
        check_client_spans(&run, protocol, share, &address);
        let server_side = server_requests(&bodies, &run.spans).await;
        check_joined(&run.spans, &server_side, least);
        eprintln!(
            "{protocol}: {} of {} requests traced, {} of them seen by the server",
            run.spans.len(),
            run.requests,
            server_side.len()
        );
        bodies.lock().unwrap().clear();
    }
    support::stop_server(server).await;
}

/// The member's Load counts in the store: (tests, requests, answered requests in its latency
/// histogram) of its scenario row, its model row's requests, and its latest total.
async fn stored_load(store: &Store, run_id: &str, member: &str) -> [u64; 5] {
    let run_id = run_id.into();
    let reported = store
        .reported(&run_id, &member.parse().unwrap())
        .await
        .unwrap();
    let scenario = reported
        .scenarios
        .iter()
        .find(|s| s.scenario == "Load")
        .expect("a Load row");
    let latency = LatencyHistogram::decode(&scenario.latency_histogram).unwrap();
    let model: u64 = reported
        .models
        .iter()
        .filter(|m| m.scenario == "Load")
        .map(|m| m.requests)
        .sum();
    [
        scenario.tests,
        scenario.requests,
        latency.count(),
        model,
        reported.total_requests,
    ]
}

/// A member replaced mid-run (its worker pod evicted and made again under the same member name,
/// issue 52) carries on from what it recorded: the store's counts after the second process are
/// the first's plus the second's own (its report), never the second's alone (what a process
/// that starts over writes) nor more. Two 2 s runs of Load as one member into one store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_member_carries_on_from_what_it_recorded() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server_with("replaced", |spec| {
        spec.model_repositories.truncate(1);
        spec.extra_args.push("--model-control-mode=explicit".into());
        spec.extra_args.push("--load-model=add_sub".into());
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let run_id = "replaced-member";
    let (store, url) = store_with_run(dir.path(), run_id).await;
    let address = server.grpc_address();
    let args = [
        "--servers",
        &address,
        "--scenarios",
        "Load",
        "--load-concurrency",
        "1",
        "--duration",
        "2s",
        "--poll-interval",
        "500ms",
    ];
    let own = |report: &Value| {
        let row = load_row(report);
        [
            row["tests"].as_u64().unwrap(),
            row["requests"].as_u64().unwrap(),
        ]
    };

    let first = own(&worker_run(&url, run_id, "clients-0", &args).await);
    let after_first = stored_load(&store, run_id, "clients-0").await;
    assert_eq!(
        after_first[..2],
        first,
        "the first process's counts are stored"
    );
    assert!(first[1] > 0, "the first process sent requests: {first:?}");

    let second = own(&worker_run(&url, run_id, "clients-0", &args).await);
    let after_second = stored_load(&store, run_id, "clients-0").await;
    assert!(
        second[1] > 0,
        "the second process sent requests: {second:?}"
    );
    assert_eq!(
        after_second[..2],
        [after_first[0] + second[0], after_first[1] + second[1]],
        "tests and requests carry on: first {after_first:?}, second's own {second:?}"
    );
    // Written over, the histogram would hold the second's answers alone (at most its requests).
    assert!(
        after_second[2] > after_first[2].max(second[1]),
        "the latency histograms merge: first {after_first:?}, then {after_second:?}"
    );
    assert_eq!(after_second[3], after_first[3] + second[1], "the model row");
    assert_eq!(after_second[4], after_first[4] + second[1], "the total");
    support::stop_server(server).await;
}
