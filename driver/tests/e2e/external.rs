//! Servers the driver does not launch (`endpoints`): checked, used, reported and left running;
//! one that does not answer is bad input; one that stops answering or is killed fails the run.

use crate::support::{
    FAIL_FAST_BOUND, SERVER, WORKER, alone, beside_another, ensure_worker, events_with_no_worker,
    exit_after, external_matrix, read, read_json, run_matrix, start_external_server, start_loaded,
};
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::status::EventKind;
use stress_common::store::Store;

/// Its gRPC and metrics addresses only: the driver checks, probes and reads the repository
/// index over gRPC, and scrapes the metrics.
fn grpc_and_metrics(
    server: &stress_common::tritonserver::TritonServer,
) -> driver::matrix::Endpoint {
    driver::matrix::Endpoint::Ports(driver::matrix::EndpointPorts {
        grpc: Some(server.grpc_address()),
        http: None,
        metrics: Some(server.metrics_address()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_server_is_checked_used_reported_and_left_running() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start_external_server(tmp.path()).await;
    let matrix = external_matrix(tmp.path(), grpc_and_metrics(&server));
    let run_id = "e2e-external-server";
    let (mut driver, status, run_dir) = run_matrix(tmp.path(), &matrix, run_id).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    driver.observe();
    assert!(
        driver.servers.is_empty(),
        "the driver launched a tritonserver"
    );

    // Never stopped: still running and live after the driver's exit.
    assert!(
        server.try_wait().is_none(),
        "the external server was stopped"
    );
    stress_common::tritonserver::probe_live(&server.http_address(), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("the external server after the run: {e}"));

    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    let infer = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scenario"] == "Infer")
        .unwrap();
    assert!(infer["tests"].as_u64().unwrap() > 0, "{infer:#}");
    let address = format!(
        "grpc={} metrics={}",
        server.grpc_address(),
        server.metrics_address()
    );
    let mut servers = report["servers"].clone();
    let version = servers[0].as_object_mut().and_then(|s| s.remove("version"));
    assert!(
        version
            .as_ref()
            .and_then(|v| v.as_str())
            .is_some_and(|v| v.starts_with("triton 2.")),
        "what the server said at GET /v2: {report:#}"
    );
    assert_eq!(
        servers,
        serde_json::json!([{
            "member_id": SERVER,
            "group": "triton",
            "address": address,
            "external": true,
            "metrics": "scraped",
        }]),
        "{report:#}"
    );
    assert!(report["server_metrics"][SERVER].is_array(), "{report:#}");
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("\n== Servers ==\n"), "{text}");
    let servers = &text[text.find("\n== Servers ==\n").unwrap()..];
    let row = servers
        .lines()
        .find(|l| l.starts_with(SERVER))
        .unwrap_or_else(|| panic!("no {SERVER} row:\n{text}"));
    assert!(
        row.contains(" external ") && row.contains(&address),
        "{row}"
    );

    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    let last = events.iter().rev().find(|e| e.member_id == SERVER).unwrap();
    assert_eq!(
        (last.kind, last.details.as_str()),
        (EventKind::Success, "left running (an external server)")
    );
    // The worker talked to it at its gRPC address.
    let members = store.members(&RunId::from(run_id)).await.unwrap();
    let worker = members.iter().find(|m| m.member_id == WORKER).unwrap();
    assert_eq!(worker.address, server.grpc_address());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_does_not_answer_is_bad_input_before_anything_starts() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // Nothing listens there.
    let address = format!(
        "127.0.0.1:{}",
        stress_common::tritonserver::free_port().unwrap()
    );
    let matrix = external_matrix(
        tmp.path(),
        driver::matrix::Endpoint::Address(address.clone()),
    );
    let run_id = "e2e-external-no-answer";
    let (mut driver, status, run_dir) = run_matrix(tmp.path(), &matrix, run_id).await;
    assert_eq!(status.code(), Some(2), "{}", driver.output());
    driver.observe();
    assert!(
        driver.servers.is_empty(),
        "the driver launched a tritonserver"
    );
    let stdout = driver.stdout();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("BAD INPUT: "))
        .unwrap_or_else(|| panic!("no BAD INPUT line\n{}", driver.output()));
    // FILE:LINE:COLUMN: FIELD: what, at which address.
    let rest = line
        .strip_prefix(&format!("BAD INPUT: {}:", matrix.display()))
        .unwrap_or_else(|| panic!("not located in the matrix: {line}"));
    let (position, rest) = rest.split_once(": ").unwrap();
    assert!(
        position.split(':').all(|n| n.parse::<u32>().is_ok()),
        "{line}"
    );
    assert!(
        rest.starts_with(&format!(
            "server_groups.triton.endpoints[0]: existing server {SERVER} does not answer: gRPC {address} ServerLive did not answer: "
        )) && rest.contains("refused"),
        "{line}"
    );
    events_with_no_worker(&run_dir, run_id).await;
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(
        report["failed_members"][0]["member_id"], SERVER,
        "{report:#}"
    );
    assert_eq!(
        report["servers"][0]["metrics"], "not scraped (the matrix gives no metrics address)",
        "{report:#}"
    );
}

/// A stand-in for a server that no client targets: answers every HTTP request 200 until the
/// returned task is aborted, after which its port refuses connections.
async fn fake_live_server() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut request = [0u8; 2048];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (address, task)
}

/// An external server that nobody's traffic touches is watched all the same: once it stops
/// answering, the driver's own liveness probes fail the run within 5 s, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_server_no_client_uses_is_watched_by_probes() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let server = start_external_server(tmp.path()).await;
    let (spare, spare_task) = fake_live_server().await;
    let matrix = external_matrix(tmp.path(), grpc_and_metrics(&server));
    let mut m = driver::matrix::load(&matrix).unwrap_or_else(|e| panic!("{e}"));
    m.source_path = None;
    m.server_groups.insert(
        "spare".into(),
        driver::matrix::ServerGroup {
            template: None,
            instances: None,
            endpoints: vec![driver::matrix::Endpoint::Ports(
                driver::matrix::EndpointPorts {
                    http: Some(spare.clone()),
                    ..Default::default()
                },
            )],
        },
    );
    std::fs::write(&matrix, serde_saphyr::to_string(&m).unwrap()).unwrap();
    let (mut driver, _) = start_loaded(tmp.path(), &matrix, "e2e-external-watched", "120s").await;
    let (status, took) = exit_after(&mut driver, async { spare_task.abort() }).await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    assert!(took <= FAIL_FAST_BOUND, "{took:?}\n{}", driver.output());
    eprintln!("external spare-0 stopped: the driver exited 1 after {took:?}");
    let verdict = format!(
        "FAILED: spare-0: external server failed 3 liveness probes in a row: {spare}/v2/health/live did not answer: "
    );
    assert!(
        driver.stdout().lines().any(|l| l.starts_with(&verdict)),
        "no `{verdict}...` line\n{}",
        driver.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_external_server_fails_the_run_within_5_s() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start_external_server(tmp.path()).await;
    let matrix = external_matrix(tmp.path(), grpc_and_metrics(&server));
    let (mut driver, run_dir) =
        start_loaded(tmp.path(), &matrix, "e2e-external-killed", "120s").await;
    let (status, took) = exit_after(&mut driver, server.kill()).await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    assert!(
        took <= FAIL_FAST_BOUND,
        "the driver exited {took:?} after the external server was killed\n{}",
        driver.output()
    );
    eprintln!("external {SERVER} SIGKILLed: the driver exited 1 after {took:?}");
    assert!(
        driver
            .stdout()
            .lines()
            .any(|l| l.starts_with(&format!("FAILED: {SERVER}: "))),
        "the verdict does not name {SERVER}\n{}",
        driver.output()
    );
    // The worker records its own failure first; the blame goes to the server that does not
    // answer (the verdict above), which the report lists with what is known of it.
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let failed = report["failed_members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member_id"] == SERVER)
        .unwrap_or_else(|| panic!("{SERVER} is not among the failed members: {report:#}"));
    assert_eq!(failed["role"], "SERVER");
    assert_eq!(
        failed["diagnostics"]["location"],
        format!(
            "external server (not launched by the driver): grpc={} metrics={}",
            server.grpc_address(),
            server.metrics_address()
        )
    );
    assert!(failed["diagnostics"]["log_file"].is_null(), "{failed:#}");
}
