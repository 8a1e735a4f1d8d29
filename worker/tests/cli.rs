//! The worker binary: bad input exits 2 with a clear message before any load is sent, and a full
//! run against a REAL tritonserver with every scenario exits 0 with every row tested.
//!
//! Needs scripts/install-tritonserver.sh to have been run (.local/bin/tritonserver and
//! .local/bin/perf_analyzer).

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;
use stress_common::scenario::Scenario;

/// Runs the worker binary to completion (with a generous safety limit).
async fn worker(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker"));
    command
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("LOG_FORMAT")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("worker {args:?} did not exit within 300 s"))
        .expect("running the worker binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The status file's records, parsed.
fn status_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Exit 2, the message on stderr, no report on stdout, and nothing in the status file that a run
/// writes once load has started (snapshots, failure records).
fn assert_bad_input(out: &Output, status_file: &Path, message: &str, what: &str) {
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: exit code\nstderr: {stderr}\nstdout: {stdout}"
    );
    assert!(
        stderr.contains(message),
        "{what}: stderr should contain {message:?}:\n{stderr}"
    );
    assert!(
        !stdout.contains("TOTAL"),
        "{what}: a report was printed:\n{stdout}"
    );
    for r in status_records(status_file) {
        assert!(
            r["type"] != "snapshot" && r["type"] != "failure",
            "{what}: load was started: {r}"
        );
    }
}

#[tokio::test]
async fn bad_arguments_exit_2_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status.jsonl");
    let status = status.to_str().unwrap();
    // Nothing listens here; a worker that got past validation would fail differently.
    let closed = support::ClosedPort::new();
    let server = closed.address();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--scenarios", "Bogus:1"],
            "unknown scenario \"Bogus\" (known: Timeout, ImageClassification",
        ),
        (
            &["--scenarios=SequenceValid:1,Timeout:0"],
            "scenario Timeout: weight 0 must be a whole number greater than 0",
        ),
        (
            &["--scenarios=Timeout:-1"],
            "scenario Timeout: weight -1 must be a whole number greater than 0",
        ),
        (
            &["--scenarios=Load:x"],
            "scenario Load: weight \"x\" is not a number",
        ),
        (
            &["--servers", "localhost"],
            "server address \"localhost\" is not HOST:PORT",
        ),
        (
            &["--servers", "127.0.0.1:99999"],
            "server address \"127.0.0.1:99999\": port \"99999\" is not a number",
        ),
        (
            &["--servers", "bad host:8001"],
            "server address \"bad host:8001\": host \"bad host\" is not valid",
        ),
        (
            &["--threads", "0"],
            "invalid value '0' for '--threads <THREADS>': 0 is not in 1..=65535",
        ),
        // Extreme values are bad input, not a panic or an overflow later.
        (
            &["--load-rate", "1e-300"],
            "load rate 1e-300 must be from 0.001 to 10000000 requests per second",
        ),
        (
            &["--load-rate", "NaN"],
            "load rate NaN must be from 0.001 to 10000000 requests per second",
        ),
        (
            &["--concurrency", "200000", "--corr-id-block-size", "4000000"],
            "--concurrency 200000 is more than the 100000 streams a worker takes",
        ),
        (
            &["--duration", "99999999999999h"],
            "'--duration <DURATION>': 11407711613years 18days 9h is out of bounds: from 0s to 30days",
        ),
        (
            &["--poll-interval", "1ns"],
            "'--poll-interval <POLL_INTERVAL>': 1ns is out of bounds: from 100ms to 1h",
        ),
        // A wait past a day would overflow a deadline (Instant + Duration) later.
        (
            &["--request-timeout", "584000000000y"],
            "584000000000years is out of bounds: from 0s to 1day",
        ),
        (
            &["--load-window", "2d"],
            "'--load-window <LOAD_WINDOW>': 2days is out of bounds: from 0s to 1day",
        ),
        // Not a PerfAnalyzer scenario quietly left out.
        (
            &["--perf-analyzer", "/nonexistent/perf_analyzer"],
            "--perf-analyzer /nonexistent/perf_analyzer: no such file",
        ),
    ];
    for (extra, message) in cases {
        let _ = std::fs::remove_file(status);
        let mut args = vec!["--servers", &server, "--status-file", status];
        args.extend_from_slice(extra);
        let out = worker(&args).await;
        assert_bad_input(&out, Path::new(status), message, &format!("{extra:?}"));
    }
    // No server at all.
    std::fs::remove_file(status).ok();
    let out = worker(&["--duration", "1s", "--status-file", status]).await;
    assert_bad_input(&out, Path::new(status), "no servers given", "no --servers");
}

#[tokio::test]
async fn an_unreachable_server_exits_2_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in ["grpc", "http"] {
        let status = dir.path().join(format!("status-{protocol}.jsonl"));
        let closed = support::ClosedPort::new();
        let server = closed.address();
        let out = worker(&[
            "--servers",
            &server,
            "--protocol",
            protocol,
            "--status-file",
            status.to_str().unwrap(),
        ])
        .await;
        let what = match protocol {
            "grpc" => "cannot connect over grpc",
            _ => "readiness check failed",
        };
        assert_bad_input(&out, &status, &format!("server {server}: {what}"), protocol);
        assert!(
            text(&out.stderr).contains("Connection refused"),
            "{protocol}"
        );
        // The status file says why, as a FAILURE event of the pre-flight.
        let records = status_records(&status);
        assert!(
            records.iter().any(|r| r["kind"] == "FAILURE"
                && r["details"].as_str().is_some_and(|d| d
                    .starts_with("final: pre-flight: server ")
                    && d.contains(&server))),
            "{protocol}: {records:?}"
        );
    }
}

/// A listener that accepts connections and never answers (a hung server, a black hole behind
/// a proxy): the worker's pre-flight ends with its duration, or at once on SIGTERM, exit 2.
#[tokio::test]
async fn a_server_that_never_answers_holds_the_worker_no_longer_than_its_duration_or_a_sigterm() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    for protocol in ["grpc", "http"] {
        let status = dir.path().join(format!("status-{protocol}.jsonl"));
        let started = std::time::Instant::now();
        let out = worker(&[
            "--servers",
            &server,
            "--protocol",
            protocol,
            "--duration",
            "6s",
            "--status-file",
            status.to_str().unwrap(),
        ])
        .await;
        assert_bad_input(
            &out,
            &status,
            "did not answer the pre-flight checks within 6s",
            protocol,
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{protocol}");

        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker"))
            .args(["--servers", &server, "--protocol", protocol])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let signalled = std::time::Instant::now();
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .unwrap_or_else(|_| panic!("{protocol}: the worker ignored SIGTERM in its pre-flight"))
            .unwrap();
        assert_eq!(status.code(), Some(2), "{protocol}");
        assert!(signalled.elapsed() < Duration::from_secs(15), "{protocol}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_model_not_loaded_exits_2_and_a_full_run_passes_every_scenario() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server("cli").await;
    let dir = tempfile::tempdir().unwrap();

    // A model the server does not have: refused in pre-flight, for both protocols.
    for (protocol, address) in [
        ("grpc", server.grpc_address()),
        ("http", server.http_address()),
    ] {
        let status = dir.path().join(format!("status-nope-{protocol}.jsonl"));
        let out = worker(&[
            "--servers",
            &address,
            "--protocol",
            protocol,
            "--scenarios",
            "Load",
            "--load-model",
            "nope",
            "--status-file",
            status.to_str().unwrap(),
        ])
        .await;
        assert_bad_input(
            &out,
            &status,
            &format!("server {address}: model nope is not loaded or not ready"),
            protocol,
        );
    }

    // Every scenario at the same weight, so every row gets tests in 15 s.
    let report = dir.path().join("report.json");
    let mix: Vec<String> = Scenario::ALL.iter().map(|s| format!("{s}:1")).collect();
    let mix = mix.join(",");
    let perf_analyzer = support::perf_analyzer();
    let grpc = server.grpc_address();
    let out = worker(&[
        "--servers",
        &grpc,
        "--scenarios",
        &mix,
        "--duration",
        "15s",
        "--seed",
        "1",
        "--perf-analyzer",
        perf_analyzer.to_str().unwrap(),
        "--report-json",
        report.to_str().unwrap(),
    ])
    .await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "full run\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        support::server_log(&server)
    );
    let table_total = stdout
        .lines()
        .find(|l| l.starts_with("TOTAL "))
        .unwrap_or_else(|| panic!("no TOTAL row in the table:\n{stdout}"));
    assert!(table_total.contains('|'), "{table_total}");
    for s in Scenario::ALL {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{s} "))),
            "no {s} row:\n{stdout}"
        );
    }

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report.json written"))
            .expect("report.json is JSON");
    assert_eq!(json["seed"], 1);
    assert_eq!(json["protocol"], "grpc");
    assert_eq!(json["blocking_failures"], 0, "{stdout}");
    assert_eq!(
        json["failures"].as_array().map(Vec::len),
        Some(0),
        "{stdout}"
    );
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), Scenario::ALL.len() + 1, "{stdout}");
    for row in rows {
        let name = row["scenario"].as_str().unwrap();
        assert_eq!(row["failures"], 0, "{name} failed:\n{stdout}");
        assert!(
            row["tests"].as_u64().unwrap() > 0,
            "{name} has no tests:\n{stdout}"
        );
        assert!(
            row["requests"].as_u64().unwrap() > 0,
            "{name} sent no requests:\n{stdout}"
        );
    }
    assert_eq!(rows.last().unwrap()["scenario"], "TOTAL");
    eprintln!("{stdout}");
    support::stop_server(server).await;
}
