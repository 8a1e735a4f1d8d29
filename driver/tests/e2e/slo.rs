//! SLO rules on the real server: kept, breached, and `abort_on_fail`.

use crate::support::{
    assert_junit, beside_another, edit_matrix, ensure_worker, models_matrix, read, read_json,
    run_matrix_for,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stress_common::status::Stopping;
use stress_common::store::Store;

/// The models matrix (Infer on add_sub) with `run.slo` and the `grpc-clients` group's `slo`.
fn slo_matrix(dir: &Path, run_rules: &str, group_rules: &str) -> PathBuf {
    edit_matrix(models_matrix(dir, "[{name: add_sub}]"), |m| {
        m.run.slo = serde_saphyr::from_str(run_rules).unwrap();
        m.client_groups["grpc-clients"].slo = serde_saphyr::from_str(group_rules).unwrap();
    })
}

/// Generous SLO rules hold on the real server and the run passes with each one's observed
/// value in the report; the same run with one impossible rule (p99 under 1 µs) fails with exit 1
/// and names the rule, what was observed and the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slo_rules_pass_when_kept_and_fail_the_run_when_breached() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let generous = "[{metric: p99, scenario: Infer, max: 10s}, {metric: error_rate, max: 0.01}, {metric: qps, min: 5}]";
    let group = "[{metric: p50, model: add_sub, max: 5s}]";
    let matrix = slo_matrix(tmp.path(), generous, group);
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-slo-ok", "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let slo = report["slo"].as_array().unwrap();
    assert_eq!(slo.len(), 4, "{slo:#?}");
    for rule in slo {
        assert_eq!(rule["ok"], true, "{rule:#}");
        assert!(rule["observed"].as_f64().is_some(), "{rule:#}");
    }
    assert_eq!(
        slo[3]["rule"],
        "p50 of model add_sub (group grpc-clients) <= 5s"
    );
    let qps = slo[2]["observed"].as_f64().unwrap();
    assert!(qps > 5.0, "{qps}");
    assert!(read(&run_dir.join("report.txt")).contains("== SLO =="));

    let tmp = tempfile::tempdir().unwrap();
    let matrix = slo_matrix(
        tmp.path(),
        "[{metric: qps, min: 5}, {metric: p99, scenario: Infer, max: 1us}]",
        "[]",
    );
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-slo-bad", "8s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let breached = &report["slo"][1];
    assert_eq!(breached["ok"], false, "{breached:#}");
    assert_eq!(breached["rule"], "p99 of Infer <= 1us");
    assert!(
        breached["observed"].as_f64().unwrap() > 0.001,
        "{breached:#}"
    );
    assert!(breached["window_end_ms"].as_i64() > breached["window_start_ms"].as_i64());
    assert_eq!(report["slo"][0]["ok"], true);
    let junit = assert_junit(&read(&run_dir.join("junit.xml")));
    let names: Vec<(&str, &str)> = junit
        .iter()
        .map(|(s, c, _)| (s.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        names,
        [("members", "slo"), ("slo", "p99 of Infer <= 1us")],
        "{junit:?}"
    );
    assert!(
        junit[1].2.starts_with("FAIL p99 of Infer <= 1us: observed"),
        "{junit:?}"
    );
    let failed = &report["failed_members"][0];
    assert_eq!(failed["member_id"], "slo", "{report:#}");
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .starts_with("SLO breached: p99 of Infer <= 1us: observed"),
        "{failed:#}"
    );
}

/// An `abort_on_fail` rule is judged every poll after its delay and stops the run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_on_fail_slo_stops_the_run_early() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = slo_matrix(
        tmp.path(),
        "[]",
        "[{metric: max, max: 1us, abort_on_fail: true, delay: 2s}]",
    );
    let started = Instant::now();
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-slo-abort", "120s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stopped long before its 120 s: {:?}",
        started.elapsed()
    );
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["slo"][0]["ok"], false, "{report:#}");
    let window = report["slo"][0]["window_end_ms"].as_i64().unwrap()
        - report["slo"][0]["window_start_ms"].as_i64().unwrap();
    assert!(
        (2000..30_000).contains(&window),
        "judged after its delay: {window} ms"
    );
    assert_eq!(report["failed_members"][0]["member_id"], "slo");
    // The breach's stop is dated, and the workers were told the run failed (they drop their
    // tests in flight instead of draining them).
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    assert_eq!(
        store.stopping(&"e2e-slo-abort".into()).await.unwrap(),
        Some(Stopping::Failed {
            member: "slo".into()
        })
    );
}
