//! A foreign client supervised by the worker (interface 1, docs/clients.md): the project's
//! Python client on NVIDIA's tritonclient against a REAL tritonserver, its records counted like
//! the worker's own and checked against docs/clients.schema.json; a wrong answer it finds is a
//! failure in its words; a program that breaks the interface or exits non-zero fails the worker
//! with the line or its stderr; a worker killed outright takes its program with it.
//!
//! Needs scripts/install-tritonserver.sh (tritonserver, and tritonclient in .local/venv).

mod support;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;
use stress_common::tritonserver::TritonServer;

fn python() -> PathBuf {
    let p = support::repo_root().join(".local/venv/bin/python");
    assert!(
        p.is_file(),
        "{}: run scripts/install-tritonserver.sh",
        p.display()
    );
    p
}

/// The project's Python client, with `args` after its script.
fn python_client(args: &[&str]) -> Vec<String> {
    let script = support::repo_root().join("clients/python/tritonclient_stress.py");
    let mut argv = vec![python().display().to_string(), script.display().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// The project's perf_analyzer client, on the perf_analyzer the install script puts in .local.
fn perf_analyzer_client() -> Vec<String> {
    let script = support::repo_root().join("clients/perf_analyzer/perf_analyzer_client.py");
    let binary = support::perf_analyzer();
    [python(), script, "--perf-analyzer".into(), binary]
        .iter()
        .map(|p| p.display().to_string())
        .collect()
}

async fn worker(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker"));
    command
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("worker {args:?} did not exit within 120 s"))
        .expect("running the worker binary")
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The worker with `client` (a program and its arguments) for 4 s against `server`.
async fn run_client(
    server: &str,
    protocol: &str,
    client: &[String],
    model: &str,
) -> (Output, Value) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let command = serde_json::to_string(client).unwrap();
    let mut args = vec![
        "--servers",
        server,
        "--protocol",
        protocol,
        "--duration",
        "4s",
        "--concurrency",
        "2",
        "--client-command",
        &command,
        "--report-json",
    ];
    let report_arg = report.display().to_string();
    args.push(&report_arg);
    if !model.is_empty() {
        args.extend(["--model", model]);
    }
    let out = worker(&args).await;
    let json = std::fs::read_to_string(&report)
        .map(|t| serde_json::from_str(&t).expect("report.json is JSON"))
        .unwrap_or(Value::Null);
    (out, json)
}

fn row<'r>(report: &'r Value, scenario: &str) -> &'r Value {
    report["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["scenario"] == scenario))
        .unwrap_or_else(|| panic!("no {scenario} row: {report:#}"))
}

#[tokio::test]
async fn the_python_tritonclient_client_is_counted_like_the_worker_s_own_and_finds_wrong_answers() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server_with("foreign", |spec| {
        spec.extra_args.push("--model-control-mode=explicit".into());
        let models = [
            "add_sub",
            "add_sub_wrong",
            "sequence_nobatch",
            "sequence_faulty",
        ];
        for m in models.iter().chain(&["identity_delay"]) {
            spec.extra_args.push(format!("--load-model={m}"));
        }
    })
    .await;

    for api in ["sync", "asyncio"] {
        python_client_healthy_and_faulty(&server, api).await;
    }
    perf_analyzer_is_a_client_too(&server.grpc_address()).await;
    records_follow_the_schema(&server.grpc_address()).await;
    support::stop_server(server).await;
}

/// The Python client on tritonclient's `api` (its blocking client, or its asyncio one): healthy
/// over gRPC against add_sub, sequences and a late model, every answer right; then, over
/// HTTP, faulty twins (a model whose OUTPUT1 is wrong, one whose sums are one too many), every
/// test of them a wrong answer in the client's words.
async fn python_client_healthy_and_faulty(server: &TritonServer, api: &str) {
    let mix = python_client(&[
        "--scenarios",
        "Load:4,SequenceValid:2,Timeout:1",
        "--api",
        api,
    ]);
    let (out, report) = run_client(&server.grpc_address(), "grpc", &mix, "add_sub").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for scenario in ["SequenceValid", "Timeout"] {
        let r = row(&report, scenario);
        assert!(r["tests"].as_u64().unwrap() > 0, "{report:#}");
        assert_eq!(r["failures"], 0, "{report:#}");
    }
    let load = row(&report, "Load");
    assert!(load["tests"].as_u64().unwrap() > 10, "{report:#}");
    assert_eq!(load["requests"], load["tests"], "{report:#}");
    assert_eq!(load["failures"], 0, "{report:#}");
    assert!(load["p50_us"].as_u64().unwrap() > 0, "{report:#}");
    let name = match api {
        "sync" => "tritonclient-python-grpc".to_string(),
        _ => format!("tritonclient-python-grpc-{api}"),
    };
    assert_eq!(report["client"]["client"], name, "{report:#}");
    assert_eq!(report["client"]["version"], "2.51.0");

    // Faulty twins, over HTTP: a model whose OUTPUT1 is wrong, one whose sums are one too many.
    let args = [
        "--scenarios",
        "Load,SequenceValid",
        "--sequence-model",
        "sequence_faulty",
        "--api",
        api,
    ];
    let faulty = python_client(&args);
    let (out, report) = run_client(&server.http_address(), "http", &faulty, "add_sub_wrong").await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for scenario in ["Load", "SequenceValid"] {
        let r = row(&report, scenario);
        assert_eq!(r["failures"], r["tests"], "{report:#}");
    }
    let failures = report["failures"].as_array().expect("failure records");
    let of = |scenario: &str| failures.iter().find(|f| f["scenario"] == scenario);
    let sequence = of("SequenceValid").unwrap_or_else(|| panic!("{failures:#?}"));
    assert!(
        sequence["correlation_id"].as_u64().is_some(),
        "{sequence:#}"
    );
    let expected = sequence["expected"].as_str().unwrap();
    assert!(expected.ends_with("at step 1"), "{sequence:#}");
    let failure = of("Load").unwrap_or_else(|| panic!("{failures:#?}"));
    assert_eq!(failure["error_kind"], "wrong_answer", "{failure:#}");
    assert_eq!(failure["model"], "add_sub_wrong");
    let said = |field: &str| failure[field].as_str().unwrap_or_default().to_string();
    assert!(said("expected").starts_with("OUTPUT1 = ["), "{failure:#}");
    assert!(said("actual").starts_with("OUTPUT1 = ["), "{failure:#}");
    assert!(report["failure"].is_null(), "{report:#}");
}

/// perf_analyzer as a client group of its own: every request it exported is a test, its answer
/// checked; against add_sub_wrong each one is a wrong answer.
async fn perf_analyzer_is_a_client_too(server: &str) {
    let perf = perf_analyzer_client();
    let (out, report) = run_client(server, "grpc", &perf, "add_sub").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let runs = row(&report, "perf_analyzer");
    assert!(
        runs["tests"].as_u64().unwrap() >= 500,
        "a run is 500 requests: {report:#}"
    );
    assert_eq!(runs["requests"], runs["tests"], "{report:#}");
    assert_eq!(runs["failures"], 0, "{report:#}");
    assert_eq!(report["client"]["client"], "perf_analyzer");

    let (out, report) = run_client(server, "grpc", &perf, "add_sub_wrong").await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let runs = row(&report, "perf_analyzer");
    assert_eq!(runs["failures"], runs["tests"], "{report:#}");
    let failure = &report["failures"][0];
    assert_eq!(failure["error_kind"], "wrong_answer", "{failure:#}");
    assert!(
        failure["expected"]
            .as_str()
            .unwrap()
            .starts_with("OUTPUT1 = ["),
        "{failure:#}"
    );
}

/// The Python client's own lines, read without the worker, each valid under the schema that
/// docs/clients.md publishes.
async fn records_follow_the_schema(server: &str) {
    let dir = tempfile::tempdir().unwrap();
    let assignment = dir.path().join("assignment.json");
    std::fs::write(
        &assignment,
        serde_json::json!({
            "interface": 1, "member": "py-0", "servers": [server], "protocol": "grpc",
            "models": ["add_sub", "add_sub_wrong"], "duration_s": 1.0, "seed": 1,
            "concurrency": 1, "rate": null, "correlation_ids": null
        })
        .to_string(),
    )
    .unwrap();
    let client = python_client(&[]);
    let out = tokio::process::Command::new(&client[0])
        .args(&client[1..])
        .env(stress_common::foreign::ASSIGNMENT_ENV, &assignment)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let schema_path = support::repo_root().join("docs/clients.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let kinds: std::collections::BTreeSet<String> = stdout
        .lines()
        .map(|line| {
            let record: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let errors: Vec<String> = validator
                .iter_errors(&record)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{line}: {errors:?}");
            record["type"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["fail", "hello", "pass"].map(String::from).into(),
        "{stdout}"
    );
    // The schema is not a rubber stamp: a record without its scenario is refused.
    assert!(!validator.is_valid(&serde_json::json!({"type": "pass", "latencies_us": [1]})));
}

#[tokio::test]
async fn a_client_that_breaks_the_interface_or_exits_non_zero_fails_the_worker_in_its_own_words() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server_with("foreign-broken", |spec| {
        spec.extra_args.push("--model-control-mode=explicit".into());
        spec.extra_args.push("--load-model=add_sub".into());
    })
    .await;
    let address = server.grpc_address();
    let hello = r#"{"type":"hello","interface":1,"client":"sh","version":"1"}"#;
    let pass = r#"{"type":"pass","scenario":"Mine","latencies_us":[1500]}"#;
    let sh = |script: String| vec!["sh".to_string(), "-c".to_string(), script];
    for (client, said) in [
        (
            sh(format!(
                "echo '{hello}'; echo '{pass}'; echo 'progress: 50%'; sleep 30"
            )),
            "broke the interface: line 3 is not a record of interface 1",
        ),
        (
            sh(format!("echo '{pass}'")),
            "line 1 is not a record of interface 1 (the first record must be a hello)",
        ),
        (
            sh(format!("echo '{hello}'; echo 'no model file' >&2; exit 4")),
            "client program exited: exit status: 4; its stderr ended:\nno model file",
        ),
        (vec!["/nonexistent/client".to_string()], "did not start"),
    ] {
        let (out, report) = run_client(&address, "grpc", &client, "").await;
        assert_eq!(out.status.code(), Some(1), "{client:?}: {}", text(&out));
        let why = report["failure"].as_str().unwrap_or_default();
        assert!(why.contains(said), "{client:?}: {why:?}\n{}", text(&out));
    }
    // What came before the bad line is kept: one Mine test of 1.5 ms.
    let script = format!("echo '{hello}'; echo '{pass}'; echo 'progress: 50%'");
    let (_, report) = run_client(&address, "grpc", &sh(script), "").await;
    let mine = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scenario"] == "Mine");
    let mine = mine.unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(
        (mine["tests"].as_u64(), mine["requests"].as_u64()),
        (Some(1), Some(1)),
        "{report:#}"
    );
    a_killed_worker_takes_its_client_program_with_it(&address, hello).await;
    support::stop_server(server).await;
}

/// A worker killed with SIGKILL runs no drop: its client program must still not outlive it
/// (it would go on loading the servers after the run).
async fn a_killed_worker_takes_its_client_program_with_it(address: &str, hello: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("client.pid");
    let script = format!(
        "echo $$ > {}; echo '{hello}'; exec sleep 600",
        pid_file.display()
    );
    let command = serde_json::to_string(&["sh", "-c", &script]).unwrap();
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker"))
        .args([
            "--servers",
            address,
            "--protocol",
            "grpc",
            "--duration",
            "60s",
        ])
        .args(["--client-command", &command])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the worker starts");
    let pid = wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    })
    .await
    .expect("the client program started and wrote its pid");
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
    let gone = wait_for(Duration::from_secs(5), || (!alive(pid)).then_some(())).await;
    assert!(
        gone.is_some(),
        "client program {pid} outlived its killed worker"
    );
}

/// Whether `pid` is a live process (not gone, not a zombie waiting for its reaper).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
            Some(state != "Z")
        })
        .unwrap_or(false)
}

/// `probe`'s first answer within `limit`, polled every 50 ms.
async fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
