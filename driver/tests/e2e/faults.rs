//! Faults injected on purpose (issue 30): a pause and a kill of the real tritonserver, a wrong
//! answer after the recovery, and a network fault.

use crate::support::{
    SERVER, alone, edit_matrix, ensure_worker, read, read_json, repo_root, run_matrix_for,
    run_unless_the_server_crashed, smoke_matrix,
};
use serde_json::json;

/// Faults injected on purpose into the real tritonserver (issue 30): a pause of its process,
/// then a SIGKILL after which the launcher starts it again on the same address. The run
/// passes: the clients ride through, each fault's recovery is measured from the workers'
/// outages and is within what the matrix allows, the failures it caused are `injected` (none
/// fails the run) and no wrong answer is counted. The same run allowing the kill's recovery
/// 1 ms fails, naming the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_are_recovered_from_and_a_slow_recovery_fails_the_run() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let with_faults = |kill_within: &str| {
        let faults = format!(
            "[{{name: freeze, target: triton, at: 3s, kind: pause, duration: 3s, \
               expect: {{recover_within: 4s}}}},
              {{name: crash, target: triton-0, at: 11s, kind: kill, \
               expect: {{recover_within: {kill_within}}}}}]"
        );
        let dir = tmp.path().join(kill_within);
        std::fs::create_dir_all(&dir).unwrap();
        edit_matrix(smoke_matrix(&dir), |m| {
            m.run.slo.clear();
            m.faults = serde_saphyr::from_str(&faults).unwrap();
            // tritonserver 2.51 corrupts its heap when it traces requests while its sequence
            // batcher ends sequences early (a START on an open sequence's correlation id):
            // "corrupted double-linked list", SIGABRT or SIGSEGV within a minute of the smoke
            // mix traced at rate 2 (docs/limitations.md). This test traces, so it runs no
            // sequence scenario.
            for template in m.client_templates.values_mut() {
                if let Some(scenarios) = template.scenarios.as_mut() {
                    scenarios.retain(|name, _| !name.starts_with("Sequence"));
                }
            }
            // Traces written every 50: the killed process leaves its files, and the one
            // started after it writes its own (its trace ids start again).
            for template in m.server_templates.values_mut() {
                template.trace = Some(
                    serde_saphyr::from_str("{level: TIMESTAMPS, rate: 2, log_frequency: 50}")
                        .unwrap(),
                );
            }
        })
    };

    let matrix = with_faults("25s");
    // Traced, tritonserver 2.51 still crashes now and then (SIGSEGV 41 s into this run,
    // 2026-12-06, by hand).
    let (driver, status, run_dir, report) =
        run_unless_the_server_crashed(tmp.path(), &matrix, "e2e-faults", "40s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let faults = report["faults"]
        .as_array()
        .expect("faults[] in report.json");
    assert_eq!(faults.len(), 2, "{report:#}");
    let (freeze, crash) = (&faults[0], &faults[1]);
    assert_eq!(
        (&freeze["name"], &freeze["kind"]),
        (&json!("freeze"), &json!("pause"))
    );
    assert_eq!(
        (&crash["name"], &crash["kind"]),
        (&json!("crash"), &json!("kill"))
    );
    for f in faults {
        assert_eq!(f["ok"], true, "{f:#}");
        assert_eq!(f["target"], "triton-0");
        assert!(f["injected_at_ms"].as_i64().is_some() && f["recovered_at_ms"].as_i64().is_some());
    }
    // The pause lasts what the matrix says: its end is not held back by a sample waiting on
    // the paused server's metrics (it once ended 1 s late behind such a scrape).
    let paused_ms =
        freeze["ended_at_ms"].as_i64().unwrap() - freeze["injected_at_ms"].as_i64().unwrap();
    assert!(
        (3000..3750).contains(&paused_ms),
        "paused {paused_ms} ms: {freeze:#}"
    );
    let recovery = crash["recovery_s"].as_f64().unwrap();
    assert!(recovery > 0.0 && recovery <= 25.0, "{crash:#}");
    // The server started again after the kill is a new process, whose memory is still read:
    // the last sample (at the end of the load) has it.
    let points = report["timeline"]["servers"][0]["points"]
        .as_array()
        .expect("the server's samples");
    assert!(
        points
            .last()
            .is_some_and(|p| p["rss_bytes"].as_f64().is_some_and(|b| b > 0.0)),
        "no memory read of the restarted server: {points:#?}"
    );
    assert!(
        crash["ready_at_ms"].as_i64() <= crash["recovered_at_ms"].as_i64(),
        "{crash:#}"
    );
    assert!(
        crash["lost_requests"].as_u64().unwrap() > 0,
        "a kill costs tests: {crash:#}"
    );
    for s in report["signatures"].as_array().into_iter().flatten() {
        assert!(s["fails"].is_null(), "{s:#}");
        assert_ne!(s["error_kind"], "wrong_answer", "{s:#}");
    }
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains("== Injected faults (2 faults, every one recovered in time) =="),
        "{text}"
    );
    let html = read(&run_dir.join("report.html"));
    assert!(html.contains("<h2 id=\"faults\">") && html.contains("class=\"band\""));
    let junit = read(&run_dir.join("junit.xml"));
    assert!(junit.contains("<testsuite name=\"faults\""), "{junit}");
    // The traces of both processes of triton-0, each read on its own, all in the summary.
    let traces_dir = run_dir.join("traces");
    let names: Vec<String> = std::fs::read_dir(&traces_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let processes = driver::launcher::local::trace_files_by_start(&names, SERVER);
    assert!(processes.len() >= 2, "a trace file per process: {names:?}");
    let traced: usize = processes
        .iter()
        .map(|files| {
            let texts: Vec<(String, String)> = files
                .iter()
                .map(|f| (f.clone(), read(&traces_dir.join(f))))
                .collect();
            driver::report::trace::parse(&texts).unwrap().len()
        })
        .sum();
    let summary = &report["traces"][SERVER];
    let summarized: u64 = summary["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["traces"].as_u64().unwrap())
        .sum::<u64>()
        + summary["without_model"].as_u64().unwrap_or(0);
    assert_eq!(summarized, traced as u64, "{summary:#}");

    let matrix = with_faults("1ms");
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-faults-slow", "40s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let crash = &report["faults"][1];
    assert_eq!(crash["ok"], false, "{crash:#}");
    // Judged as soon as the 1 ms had passed (and the workers' outages were in), not at the end.
    let output = driver.output();
    assert!(
        output
            .contains("FAILED: triton-0: fault crash (kill of triton-0): not recovered within 1ms"),
        "{output}"
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("FAIL crash kill of triton-0"), "{text}");
}

/// After an injected kill the server comes back READY but answers wrong (the faulty twin
/// `add_sub_wrong_after_restart` is right only in the first server process): the fault owns
/// the tests its outage cut, not the wrong answers of tests begun once the server was READY
/// again, so the run fails fast on them as the server's, before the fault's own deadline. The
/// healthy twin (add_sub) rides through the same kill in the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_answer_after_the_recovery_fails_the_run() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // A repository of the twin alone (the server starts in seconds).
    let repo = tmp.path().join("repo");
    let twin = repo.join("add_sub_wrong_after_restart");
    std::fs::create_dir_all(twin.join("1")).unwrap();
    let source = repo_root().join("models-faulty/add_sub_wrong_after_restart");
    for file in ["config.pbtxt", "1/model.py"] {
        std::fs::copy(source.join(file), twin.join(file)).unwrap();
    }
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        for template in m.server_templates.values_mut() {
            template.model_repositories = vec![repo.display().to_string()];
        }
        for template in m.client_templates.values_mut() {
            template.scenarios = Some(serde_saphyr::from_str("{Load: 1}").unwrap());
            template.extra_args = vec!["--load-model".into(), "add_sub_wrong_after_restart".into()];
        }
        m.faults = serde_saphyr::from_str(
            "[{name: crash, target: triton-0, at: 3s, kind: kill, \
               expect: {recover_within: 30s}}]",
        )
        .unwrap();
    });
    // The restarted tritonserver 2.51 once crashed on its own (SIGSEGV in pthread_mutex_lock,
    // CI 2026-12-04).
    let (driver, status, run_dir, report) =
        run_unless_the_server_crashed(tmp.path(), &matrix, "e2e-wrong-after-kill", "50s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let root = &report["analysis"]["root_cause"];
    let log = read(&run_dir.join("logs/triton-0.log"));
    assert_eq!(root["role"], "CLIENT", "{root:#}\n{log}");
    assert_eq!(root["signature"]["class"], "server", "{root:#}");
    let evidence = root["signature"]["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("the answer failed its check"),
        "{evidence}"
    );
    let crash = &report["faults"][0];
    let ready = crash["ready_at_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("READY again after the kill: {crash:#}\n{}", driver.output()));
    // Failed fast, long before the fault's own 30 s.
    let finished = report["finished_at_ms"].as_i64().expect("finished_at_ms");
    assert!(finished < ready + 20_000, "{report:#}");
    let wrong = report["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["error_kind"] == "wrong_answer")
        .expect("the wrong answers' signature");
    assert_eq!(wrong["class"], "server", "{wrong:#}");
    assert!(wrong["fails"].is_string(), "{wrong:#}");
    // Right in its first life: no wrong answer before the kill.
    let injected = crash["injected_at_ms"].as_i64().unwrap();
    assert!(wrong["first_at_ms"].as_i64() > Some(injected), "{wrong:#}");
}

/// A network fault (issue 30): the local launcher puts a TCP proxy between the server and its
/// clients, which for 4 s holds every chunk 1 s (plus up to 200 ms) each way, while iptables
/// drops 20% of the segments to and from the proxy. Requests in flight then take over 2 s (the
/// report's max latency says the fault was injected), the clients ride through, the fault's
/// recovery is measured from its end, the report counts the packets dropped and no rule stays
/// behind. Without iptables (not root) the loss is left out and the test says so; a loss
/// fault there is refused before anything starts (tests/cli.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_fault_slows_every_client_and_is_recovered_from() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let no_filter = driver::launcher::packet_filter::unavailable();
    if let Some(why) = &no_filter {
        eprintln!("SKIPPED (the loss part of this test): {why}");
    }
    let loss = if no_filter.is_none() {
        ", loss: 0.2"
    } else {
        ""
    };
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        m.faults = serde_saphyr::from_str(&format!(
            "[{{name: slow-net, target: triton-0, at: 4s, kind: network, duration: 4s, \
               network: {{delay: 1s, jitter: 200ms{loss}}}, expect: {{recover_within: 10s}}}}]"
        ))
        .unwrap();
    });
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-network-fault", "25s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let fault = &report["faults"][0];
    assert_eq!(
        (&fault["name"], &fault["kind"], &fault["ok"]),
        (&json!("slow-net"), &json!("network"), &json!(true)),
        "{fault:#}"
    );
    assert!(fault["recovered_at_ms"].as_i64().is_some(), "{fault:#}");
    let slowest = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["max_us"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        slowest >= 2_000_000,
        "a request in flight through the fault waited 1 s each way: max {slowest} us"
    );
    for s in report["signatures"].as_array().into_iter().flatten() {
        assert!(s["fails"].is_null(), "{s:#}");
        assert_ne!(s["error_kind"], "wrong_answer", "{s:#}");
    }
    let output = driver.output();
    assert!(
        output.contains("through a proxy for its network fault"),
        "{output}"
    );
    if no_filter.is_none() {
        let dropped = fault["dropped_packets"].as_u64().unwrap_or(0);
        assert!(dropped > 0, "20% of 4 s of segments: {fault:#}");
        let text = read(&run_dir.join("report.txt"));
        assert!(
            text.contains(&format!("; {dropped} packets dropped by its loss")),
            "{text}"
        );
        let rules = std::process::Command::new("iptables")
            .args(["-w", "-S", "INPUT"])
            .output()
            .unwrap();
        let rules = String::from_utf8_lossy(&rules.stdout);
        assert!(!rules.contains("e2e-network-fault"), "left behind: {rules}");
    }
}
