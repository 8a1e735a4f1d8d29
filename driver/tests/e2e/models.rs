//! Client groups drive the models a matrix names: Infer against them passes, a model the server
//! lacks is bad input before any worker starts, a client inside perf_analyzer runs is no
//! zero-QPS stall, and a failed sequence carries its steps on the wire.

use crate::support::{
    SERVER, WORKER, alone, assert_models_add_up, beside_another, edit_matrix, ensure_worker,
    events_with_no_worker, faulty_sequence_matrix, models_matrix, paced_repository, read,
    read_json, run_matrix, run_matrix_for, smoke_matrix,
};
use stress_common::contract::RunId;
use stress_common::status::EventKind;
use stress_common::store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_server_lacks_stops_the_run_with_exit_2_before_any_worker_starts() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = models_matrix(
        tmp.path(),
        "[{name: add_sub}, {name: no_such_model}, {name: add_sub, version: 9}]",
    );
    let run_id = "e2e-missing-model";
    let (driver, status, run_dir) = run_matrix(tmp.path(), &matrix, run_id).await;
    assert_eq!(status.code(), Some(2), "{}", driver.output());
    let stdout = driver.stdout();
    assert!(
        stdout.contains(
            "BAD INPUT: client group grpc-clients needs model no_such_model, but server triton-0 does not have it in its repository; \
             client group grpc-clients needs model add_sub@9, but server triton-0 does not have that version in its repository"
        ),
        "{}",
        driver.output()
    );
    assert!(!stdout.contains("needs model add_sub,"), "{stdout}");
    let events = events_with_no_worker(&run_dir, run_id).await;
    assert!(
        events
            .iter()
            .any(|e| e.member_id == SERVER && e.kind == EventKind::Running),
        "the server was ready first: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matrix_with_models_runs_infer_against_them_and_passes() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = models_matrix(
        tmp.path(),
        "[{name: add_sub, weight: 2}, {name: text_vector, batch_size: 2}]",
    );
    let run_id = "e2e-models-infer";
    let (driver, status, run_dir) = run_matrix(tmp.path(), &matrix, run_id).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    for row in report["scenarios"].as_array().expect("scenario rows") {
        let name = row["scenario"].as_str().unwrap();
        let tests = row["tests"].as_u64().unwrap();
        match name {
            "Infer" => {
                assert!(tests > 0, "no Infer tests: {row:#}");
                assert_eq!(row["failures"], 0, "{row:#}");
            }
            "TOTAL" => {}
            _ => assert_eq!(tests, 0, "Infer only, but {name} ran: {row:#}"),
        }
    }
    let models = assert_models_add_up(&report);
    for model in ["add_sub", "text_vector"] {
        let row = models
            .iter()
            .find(|m| m["model"] == model && m["scenario"] == "Infer")
            .unwrap_or_else(|| panic!("no Infer row of {model}: {models:#?}"));
        assert!(row["requests"].as_u64().unwrap() > 0, "{row:#}");
        assert!(row["p99_us"].as_u64().unwrap() > 0, "{row:#}");
    }
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("== Models, all workers =="), "{text}");
}

/// A worker whose one client runs perf_analyzer over HTTP and nothing else, against a model
/// that answers after 4 ms: each run of 1,000 requests takes over 4 s and counts them when it
/// ends, so the worker samples QPS 0 between the ends. With the zero-QPS rule at 2 polls, that
/// is no stall (the worker says a test counting at its end is under way), and the run passes
/// with the requests counted. (It failed as "QPS 0 for 2 consecutive polls" before.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_inside_perf_analyzer_runs_is_not_a_zero_qps_stall() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let repo = paced_repository(tmp.path(), 4);
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        m.run.fail_fast.zero_qps_polls = 2;
        for template in m.server_templates.values_mut() {
            template.model_repositories = vec![repo.display().to_string()];
        }
        for template in m.client_templates.values_mut() {
            template
                .env
                .insert("WORKER_LOAD_MODEL".into(), "paced".into());
            template.protocol = stress_common::contract::Protocol::Http;
            template.scenarios = Some([("PerfAnalyzer".to_string(), 1)].into_iter().collect());
            template.concurrency = 1;
        }
    });
    let run_id = "e2e-perf-analyzer-only";
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "12s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let samples = store.qps_samples(&RunId::from(run_id)).await.unwrap();
    let zeros = samples.iter().filter(|s| s.qps == 0.0).count();
    // The case the rule must ride through: zeros between the runs' ends, and requests counted.
    // (Not a sample with QPS above 0: the driver samples a worker's latest QPS once a second,
    // and on a loaded machine may miss the one second a run's 1000 requests were counted in.)
    assert!(
        zeros >= 2 && samples.last().is_some_and(|s| s.total_requests >= 1000),
        "{samples:?}\n{}",
        driver.output()
    );
}

/// A failed sequence carries its forensics: each step on the wire (times, server, correlation
/// id, flags, input digest, what came back), the previous use of its correlation id and the
/// server's log lines around it, in report.json and report.txt. The faulty twin sequence_faulty answers running sum + 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sequence_carries_its_steps_on_the_wire() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // Verbose: the server logs every request, so the failure has lines around it.
    let matrix = faulty_sequence_matrix(tmp.path(), "sequence_faulty", &["--log-verbose=1"]);
    let run_id = "e2e-forensics";
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "30s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let (member, failure) = (
        report["failures"][0][0].clone(),
        report["failures"][0][1].clone(),
    );
    assert_eq!(member, WORKER, "{report:#}");
    assert_eq!(failure["model"], "sequence_faulty", "{failure:#}");
    let steps = failure["forensics"]["steps"].as_array().expect("forensics");
    // The first step's answer came back (wrong): the step is on the wire, with START (and
    // END too, for a sequence of one).
    let first = &steps[0];
    assert!(
        first["flags"].as_str().unwrap().starts_with("START"),
        "{failure:#}"
    );
    assert_eq!(first["outcome"], "ok", "{failure:#}");
    assert_eq!(
        first["correlation_id"], failure["correlation_id"],
        "{failure:#}"
    );
    assert_eq!(first["model"], "sequence_faulty");
    assert_eq!(first["input_digest"].as_str().unwrap().len(), 16);
    let sent = first["sent_us"].as_i64().unwrap();
    let received = first["received_us"].as_i64().unwrap();
    assert!(sent > 0 && received >= sent, "{first:#}");
    assert!(
        (received / 1000 - failure["at_ms"].as_i64().unwrap()).abs() < 5_000,
        "the step is the failure's: {failure:#}"
    );
    // The server's log lines around it, from the server it went to.
    let log = failure["forensics"]["server_log"]
        .as_array()
        .expect("server log");
    assert!(!log.is_empty(), "{failure:#}");
    for line in log {
        assert!(
            line.as_str().unwrap().starts_with(&format!("{SERVER}: ")),
            "{line}"
        );
    }
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("  step  1 START"), "{text}");
    assert!(text.contains("the server's log around it:"), "{text}");
    assert!(
        text.contains("previous use of its correlation id:"),
        "{text}"
    );
}
