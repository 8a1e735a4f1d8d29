//! What the server does wrong, and is blamed for: a leaking model, a dead backend stub, calls
//! held unanswered, a server that contradicts itself (unless a known issue), traffic no worker
//! sent; and a traced server's trace summary.

use crate::support::{
    Driver, RUN_LIMIT, SERVER, WORKER, alone, assert_junit, beside_another, driver_cli,
    edit_matrix, ensure_worker, faulty_sequence_matrix, models_matrix, read, read_json, run_args,
    run_matrix, run_matrix_for, smoke_matrix, start_loaded, with_faulty_models,
};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::Store;

/// A client the workers do not know sends to the server during the run: the servers/workers
/// reconciliation calls the gap a mismatch, of exactly that many requests (the check fails
/// when the server saw traffic nobody counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_no_worker_sent_are_a_reconciliation_mismatch() {
    const INTRUDER: u64 = 150;
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        for template in m.client_templates.values_mut() {
            template.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
        }
    });
    let run_id = "e2e-reconcile-intruder";
    let (mut driver, run_dir) = start_loaded(tmp.path(), &matrix, run_id, "12s").await;
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let members = store.members(&RunId::from(run_id)).await.unwrap();
    let server = members.iter().find(|m| m.member_id == SERVER).unwrap();
    let http = server
        .address
        .split_whitespace()
        .find_map(|a| a.strip_prefix("http="))
        .unwrap_or_else(|| panic!("no HTTP address: {server:?}"))
        .to_string();
    let body = serde_json::json!({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [16], "data": vec![1; 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [16], "data": vec![2; 16]},
    ]});
    for i in 0..INTRUDER {
        let r = stress_common::http::post_json(
            &format!("http://{http}/v2/models/add_sub/infer"),
            &body,
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert!(r.is_ok(), "request {i}: {}", r.body);
    }
    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let rows = report["reconciliation"].as_array().unwrap();
    let add_sub = rows
        .iter()
        .find(|r| r["model"] == "add_sub")
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(add_sub["verdict"], "mismatch", "{add_sub:#}");
    assert_eq!(add_sub["gap"], INTRUDER, "{add_sub:#}");
    assert!(
        read(&run_dir.join("report.txt")).contains(&format!(
            "{INTRUDER} server-side successes no worker counted"
        )),
        "{add_sub:#}"
    );
}

/// tritonserver 2.51's refusal, while it traces, of a request it accepts otherwise.
const TRACED_SERVER_DROPS_AN_INPUT: &str = r#"
- id: triton-2.51-traced-input-lost
  match: { model: add_sub, class: client, message: "input 'INPUT[01]' does not exist in request" }
  reason: tritonserver 2.51 corrupts its heap while tracing (docs/limitations.md)
  max_per_hour: 3600
"#;

/// A traced server's trace files (written by the real tritonserver in this run) are summarised
/// into the report per model and protocol; `driver trace-summary` reads the same files. The
/// run's summary reaches the matrix's `report.webhook` (a local receiver).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_server_gets_a_trace_summary_in_the_report() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // The run's summary goes to a local receiver at the end (report.webhook).
    let summaries: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
    let kept = summaries.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            kept.lock().unwrap().push(body);
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.report = Some(serde_saphyr::from_str(&format!("{{webhook: '{webhook}'}}")).unwrap());
        // tritonserver 2.51 tracing every 5th request now and then refuses one of our
        // well-formed add_sub requests (its heap corruption while tracing: docs/limitations.md;
        // 1 of 2,729 in CI on 2026-12-06). This test is about the summary, not that bug.
        m.known_issues = serde_saphyr::from_str(TRACED_SERVER_DROPS_AN_INPUT).unwrap();
        for template in m.server_templates.values_mut() {
            template.trace = Some(serde_saphyr::from_str("{level: TIMESTAMPS, rate: 5}").unwrap());
        }
        for template in m.client_templates.values_mut() {
            template.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
        }
    });
    let run_id = "e2e-traced";
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let rows = report["traces"][SERVER]["rows"]
        .as_array()
        .unwrap_or_else(|| {
            panic!(
                "no trace summary of {SERVER}: {:#}\n{}",
                report["traces"],
                driver.output()
            )
        });
    let add_sub = rows
        .iter()
        .find(|r| r["model"] == "add_sub" && r["protocol"] == "grpc")
        .unwrap_or_else(|| panic!("{rows:#?}"));
    let traces = add_sub["traces"].as_u64().unwrap();
    assert!(traces > 10, "{add_sub:#}");
    assert!(
        add_sub["stages"]["compute_infer"]["avg_us"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(read(&run_dir.join("report.txt")).contains(&format!("== Traces of {SERVER}")));
    let file = run_dir.join("traces").join(format!("{SERVER}.json"));
    let out = driver_cli(&["trace-summary", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("add_sub (version 1) over grpc: {traces} traces")),
        "{text}"
    );
    let summaries = summaries.lock().unwrap();
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    assert_eq!(summaries[0]["run_id"], run_id);
    assert_eq!(summaries[0]["verdict"], "PASS");
    assert!(
        summaries[0]["requests"].as_u64().unwrap() > 0,
        "{summaries:?}"
    );
}

/// A model that leaks memory (the faulty twin identity_leaky: right answers, 1 MiB kept per
/// request) makes the server's memory grow over the run: a finding in the report, with the
/// server's RSS series showing the growth.
/// Memory is judged on the load's steady state: a model that takes 200 MiB once, on its first
/// request, is no finding (its healthy twin), one that keeps growing is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaking_model_is_a_memory_growth_finding_and_a_warming_one_is_not() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let server_memory = |run_dir: &Path| {
        let report = read_json(&run_dir.join("report.json"));
        let server = report["timeline"]["servers"][0].clone();
        assert_eq!(server["member_id"], SERVER, "{server:#}");
        assert!(server["memory_not_judged"].is_null(), "judged: {server:#}");
        server
    };

    let matrix = models_matrix(tmp.path(), "[{name: identity_warmup}]");
    let (driver, status, run_dir) = run_matrix(tmp.path(), &matrix, "e2e-warmup").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let server = server_memory(&run_dir);
    assert!(server["memory_finding"].is_null(), "{server:#}");
    assert!(
        server["memory_growth_bytes"].as_f64().unwrap() > 150.0 * 1024.0 * 1024.0,
        "the model did take its 200 MiB: {server:#}"
    );

    let matrix = with_faulty_models(models_matrix(tmp.path(), "[{name: identity_leaky}]"));
    let run_id = "e2e-leak";
    let (driver, status, run_dir) = run_matrix(tmp.path(), &matrix, run_id).await;
    assert_eq!(
        status.code(),
        Some(0),
        "answers are right: {}",
        driver.output()
    );
    let server = server_memory(&run_dir);
    let finding = server["memory_finding"]
        .as_str()
        .unwrap_or_else(|| panic!("no memory finding: {server:#}"));
    assert!(finding.starts_with("memory kept growing"), "{finding}");
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains(&format!("FINDING {SERVER}: memory kept growing")),
        "{text}"
    );
}

/// A model whose backend process dies mid-run (models-faulty/identity_crash exits on its 50th
/// request) while tritonserver stays up: the run fails, and the failure's signature is the
/// server's, naming the dead stub by its instance — from tritonserver's real answer, over gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_stub_is_the_server_s_failure_naming_its_instance() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = with_faulty_models(models_matrix(tmp.path(), "[{name: identity_crash}]"));
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-dead-stub", "15s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let signature = report["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["model"] == "identity_crash")
        .unwrap_or_else(|| panic!("no identity_crash signature: {}", driver.output()));
    assert_eq!(signature["class"], "server", "{signature:#}");
    let evidence = signature["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("Python backend stub process identity_crash_0_0 died"),
        "{evidence}"
    );
    assert_eq!(
        report["analysis"]["root_cause"]["signature"]["class"], "server",
        "{report:#}"
    );
}

/// A server whose inference hangs while its process runs and answers its health checks
/// (models-faulty/identity_hangs never returns from its 41st request): the worker's calls go
/// unanswered, and the run fails on the server, "its inference hangs", with its log tail,
/// not on the worker as a harness fault ("QPS 0": it did send). Its healthy twin, a model that
/// holds each call for 200 ms (identity_delay), passes under the same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_holds_calls_unanswered_is_blamed_and_a_slow_one_is_not() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();

    let healthy = models_matrix(
        tmp.path(),
        "[{name: identity_delay, shape: {INPUT0: [16]}}]",
    );
    let (driver, status, _) = run_matrix(tmp.path(), &healthy, "e2e-slow-answers").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());

    let matrix = with_faulty_models(models_matrix(tmp.path(), "[{name: identity_hangs}]"));
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-hung-inference", "60s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let json = read_json(&run_dir.join("report.json"));
    let analysis = &json["analysis"];
    assert_eq!(analysis["root_cause"]["member_id"], SERVER, "{analysis:#}");
    assert_eq!(analysis["root_cause"]["class"], "server", "{analysis:#}");
    let failed = json["failed_members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member_id"] == SERVER)
        .unwrap_or_else(|| panic!("{SERVER} not among the failed members: {json:#}"));
    assert!(
        failed["diagnostics"]["log_tail"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "the hung server's log tail: {failed:#}"
    );
    assert!(
        !json["failed_members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["member_id"] == WORKER),
        "the worker did its job: {json:#}"
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains(&format!("{WORKER} reported: "))
            && text.contains("unanswered: none of its calls ended for")
            && text.contains("while its liveness probe answered: its inference hangs"),
        "{text}"
    );
    // The server's own count says the calls reached it: they wait in its queue.
    assert!(
        text.contains("; its own metrics count ")
            && text.contains(" requests pending (identity_hangs "),
        "{text}"
    );
}

/// A server that contradicts itself (models-faulty/sequence_forgets_start answers a sequence's
/// START, then rejects its next step for having no START, as tritonserver 2.51's reaper race
/// does): the driver judges the failure `server`, with the test's steps as evidence. Without a
/// known issue the run fails and its root cause is that signature; with a known issue that
/// matches it, the run passes, counts it and skips its JUnit case, and its history says it was
/// seen in the run before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_bug_fails_the_run_with_its_evidence_unless_it_is_a_known_issue() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = faulty_sequence_matrix(tmp.path(), "sequence_forgets_start", &["--log-verbose=0"]);

    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-server-bug", "10s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let root = &report["analysis"]["root_cause"];
    assert_eq!(root["member_id"], WORKER, "{report:#}");
    assert_eq!(root["signature"]["class"], "server", "{root:#}");
    let evidence = root["signature"]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("the server contradicted itself: step 1 (START)")
            && evidence.contains("the model's max_sequence_idle (3000 ms)"),
        "{evidence}"
    );
    let signature = &report["signatures"][0];
    assert_eq!(signature["status"], "new", "{signature:#}");
    assert_eq!(signature["class"], "server");
    assert_eq!(signature["model"], "sequence_forgets_start");
    assert!(signature["fails"].is_string());
    assert_eq!(
        report["signature_history"]
            .as_str()
            .map(|n| n.starts_with("no history")),
        Some(true)
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("== Failure signatures ("), "{text}");
    assert!(text.contains("FAILS THE RUN"), "{text}");
    assert!(
        !text.contains("== Failures (first"),
        "grouped, not listed one by one: {text}"
    );

    let known = tmp.path().join("known.yaml");
    std::fs::write(
        &known,
        "- id: forgets-start\n  match: { model: sequence_forgets_start, class: server, message: \"must specify the START flag\" }\n  reason: the twin model forgets START on purpose\n",
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let mut args = run_args(&matrix, &runs, "e2e-server-bug-known", "10s");
    args.extend(["--known-issues", known.to_str().unwrap()]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver-known");
    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let run_dir = runs.join("e2e-server-bug-known");
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS");
    let signature = &report["signatures"][0];
    assert_eq!(signature["status"], "known", "{signature:#}");
    assert_eq!(signature["known_issue"], "forgets-start");
    assert!(signature["count"].as_u64().unwrap() >= 1);
    assert_eq!(
        signature["history"],
        serde_json::json!({"seen_in": 1, "of_last": 1}),
        "the run before had it"
    );
    assert_eq!(report["known_issues"][0]["status"], "matched");
    let junit = read(&run_dir.join("junit.xml"));
    assert_eq!(assert_junit(&junit), [], "{junit}");
    assert!(
        junit.contains("<skipped message=\"known issue forgets-start: the twin model forgets START on purpose\""),
        "{junit}"
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("KNOWN forgets-start"), "{text}");
    assert!(text.contains("MATCHED forgets-start"), "{text}");
}
