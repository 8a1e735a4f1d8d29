//! The smoke matrix passes on a SQLite store and on a throwaway Postgres, every scenario runs
//! without failures, and `driver report` rebuilds the same report from the store.

use crate::support::{
    Driver, RUN_LIMIT, SERVER, WORKER, alone, assert_junit, assert_models_add_up,
    assert_reconciled, driver_cli, ensure_worker, read, read_json, run_args, smoke_matrix,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use stress_common::scenario::Scenario;
use stress_common::store::testing::TestPostgres;

fn total_row(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.starts_with("TOTAL "))
        .unwrap_or_else(|| panic!("no TOTAL row in:\n{report}"))
}

/// `driver report ARGS` (with `--json` too): exit 0, and the same report as the run wrote.
fn assert_report_rebuilds(args: &[&str], run_dir: &Path) {
    let written = read(&run_dir.join("report.txt"));
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_driver"))
            .arg("report")
            .args(args)
            .args(extra)
            .env_remove("DATABASE_URL")
            .env_remove("TRITON_STRESS_RUNS_DIR")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "driver report {args:?} {extra:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let rebuilt = run(&[]);
    assert_eq!(
        total_row(&rebuilt),
        total_row(&written),
        "driver report {args:?}: another TOTAL row"
    );
    assert_eq!(rebuilt, written, "driver report {args:?}: another report");
    let rebuilt_json: Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert_eq!(
        rebuilt_json,
        read_json(&run_dir.join("report.json")),
        "driver report {args:?} --json: another report.json"
    );
    assert_eq!(
        run(&["--junit"]),
        read(&run_dir.join("junit.xml")),
        "driver report {args:?} --junit: another junit.xml"
    );
}

/// What a passing smoke run must show in report.json: PASS, a row with tests for every
/// scenario of the matrix (all of them) and no failures except where a scenario is allowed to
/// fail (PerfAnalyzer, as upstream), a QPS series of the worker and Triton's own metrics.
fn assert_smoke_report(run_dir: &Path, run_id: &str) {
    assert!(run_dir.join("report.txt").is_file(), "no report.txt");
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["run_id"], run_id);
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    assert_eq!(report["launcher"], "local");
    let junit = read(&run_dir.join("junit.xml"));
    assert_eq!(assert_junit(&junit), [], "{junit}");
    assert!(
        junit.contains("<testsuite name=\"grpc-clients\""),
        "{junit}"
    );
    assert!(
        junit.contains("<testcase name=\"p99 of Load &lt;= 5s\""),
        "{junit}"
    );
    // The server's memory steps up while the load warms it up, then stays: judged, no finding.
    let server = &report["timeline"]["servers"][0];
    assert!(
        server["memory_finding"].is_null() && server["memory_not_judged"].is_null(),
        "{server:#}"
    );
    // The workers report their own memory at each series point; a healthy worker's is no
    // finding (warm-up included).
    for w in report["workers"].as_array().expect("workers") {
        assert!(
            w["rss"].as_array().is_some_and(|r| r.len() >= 2) && w["memory_finding"].is_null(),
            "{w:#}"
        );
    }
    // smoke.yaml's SLO rules, each kept, with what was observed.
    let slo = report["slo"].as_array().expect("SLO verdicts");
    let rules: Vec<&str> = slo.iter().map(|o| o["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, ["p99 of Load <= 5s", "qps of Load >= 1"], "{slo:#?}");
    for o in slo {
        assert_eq!(o["ok"], true, "{o:#}");
        assert!(o["observed"].as_f64().unwrap() > 0.0, "{o:#}");
    }
    let rows = report["scenarios"].as_array().expect("scenario rows");
    let mut names: Vec<&str> = rows
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
    want.push("TOTAL");
    want.sort();
    assert_eq!(names, want, "a row per scenario and TOTAL");
    for row in rows {
        let name = row["scenario"].as_str().unwrap();
        assert!(row["tests"].as_u64().unwrap() > 0, "no tests of {name}");
        let allowed_to_fail = Scenario::parse(name).is_some_and(Scenario::allowed_to_fail);
        if allowed_to_fail || name == "TOTAL" {
            continue;
        }
        assert_eq!(row["failures"], 0, "failures in {name}: {row:#}");
    }
    assert_models_add_up(&report);
    // perf_analyzer's requests, each with its latency from its profile export.
    let perf = rows
        .iter()
        .find(|r| r["scenario"] == "PerfAnalyzer")
        .unwrap();
    assert!(perf["p99_us"].as_u64().unwrap() > 0, "{perf:#}");
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["member_id"], WORKER);
    assert!(workers[0]["avg"].as_f64().unwrap() > 0.0, "{workers:?}");
    assert!(
        report["server_metrics"][SERVER].is_array(),
        "no Triton metrics of {SERVER}"
    );
    assert_eq!(report["failed_members"], Value::Array(vec![]), "{report:#}");
    assert_timeline(&report);
    assert_reconciled(&report);
    assert_send_lateness(&report);
}

/// The open-loop scenarios (Load and Infer, which share the load mode) measured every send's
/// lateness; the others none.
fn assert_send_lateness(report: &Value) {
    for row in report["scenarios"].as_array().unwrap() {
        let late = &row["send_lateness"];
        if !["Load", "Infer", "TOTAL"].contains(&row["scenario"].as_str().unwrap()) {
            assert!(late.is_null(), "only Load and Infer run open loop: {row:#}");
            continue;
        }
        let sends = late["sends"].as_u64().unwrap_or_else(|| panic!("{row:#}"));
        assert!(
            sends > 0 && sends <= row["requests"].as_u64().unwrap(),
            "{row:#}"
        );
        assert!(late["max_us"].as_u64().unwrap() >= late["p99_us"].as_u64().unwrap());
    }
}

/// The run over time: Load's latency per interval adds up exactly to its row (the slowest
/// request is in one interval), and the server's series has memory and per-model queue and
/// compute time.
fn assert_timeline(report: &Value) {
    let timeline = &report["timeline"];
    assert!(
        timeline["interval_s"].as_f64().unwrap() > 0.0,
        "{timeline:#}"
    );
    let load = timeline["latency"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario"] == "Load" && s["model"].is_null())
        .unwrap_or_else(|| panic!("no Load series: {timeline:#}"));
    let points = load["points"].as_array().unwrap();
    // Load is one scenario of ten: it runs in some intervals of the 15 s only.
    assert!(points.len() >= 3, "{load:#}");
    let row = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scenario"] == "Load")
        .unwrap();
    let max_ms = points
        .iter()
        .map(|p| p["max_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(
        max_ms,
        row["max_us"].as_u64().unwrap() as f64 / 1000.0,
        "the intervals' slowest request is the run's: {row:#} {load:#}"
    );
    for p in points {
        assert!(p["requests"].as_u64().unwrap() > 0 && p["p99_ms"].as_f64().unwrap() > 0.0);
    }
    let server = timeline["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["member_id"] == SERVER)
        .unwrap_or_else(|| panic!("no series of {SERVER}: {timeline:#}"));
    let samples = server["points"].as_array().unwrap();
    assert!(samples.len() >= 8, "{server:#}");
    for p in samples {
        assert!(
            p["rss_bytes"].as_f64().unwrap() > 10e6,
            "a tritonserver's RSS: {p:#}"
        );
    }
    let add_sub = server["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "add_sub")
        .unwrap_or_else(|| panic!("no add_sub series: {server:#}"));
    let p = &add_sub["points"][0];
    assert!(p["success_per_s"].as_f64().unwrap() > 0.0, "{add_sub:#}");
    assert!(p["compute_infer_us"].as_f64().unwrap() > 0.0, "{add_sub:#}");
}

/// Runs the smoke matrix for 15 s on the given store (`None`: SQLite in the run directory) and
/// checks its report; returns the temporary directory (the matrix and `runs/`) and the run's
/// directory in it.
async fn smoke_run(database_url: Option<&str>, run_id: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let matrix = smoke_matrix(tmp.path());
    let runs = tmp.path().join("runs");
    let mut args = run_args(&matrix, &runs, run_id, "15s");
    if let Some(url) = database_url {
        args.extend(["--database-url", url]);
    }
    let mut driver = Driver::spawn(&args, tmp.path(), "driver");
    let status = driver.wait(RUN_LIMIT, true).await;
    let run_dir = runs.join(run_id);
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    assert!(
        driver
            .stdout()
            .contains(&format!("Run {run_id} (local launcher): PASS")),
        "{}",
        driver.output()
    );
    assert_smoke_report(&run_dir, run_id);
    (tmp, run_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_matrix_passes_on_sqlite_and_the_report_rebuilds() {
    let _run = alone().await;
    ensure_worker();
    let run_id = "e2e-smoke-sqlite";
    let (tmp, run_dir) = smoke_run(None, run_id).await;
    assert!(run_dir.join("store.sqlite").is_file());
    let runs = tmp.path().join("runs");
    assert_report_rebuilds(
        &["--run", run_id, "--runs-dir", runs.to_str().unwrap()],
        &run_dir,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_matrix_passes_on_postgres_and_the_report_rebuilds() {
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let _run = alone().await;
    ensure_worker();
    // Unique, in case TEST_DATABASE_URL is a shared server.
    let run_id = format!(
        "e2e-smoke-pg-{}-{}",
        std::process::id(),
        stress_common::now_ms()
    );
    let (tmp, run_dir) = smoke_run(Some(pg.url()), &run_id).await;
    assert!(
        !run_dir.join("store.sqlite").exists(),
        "the run used a SQLite store despite --database-url"
    );
    // The run directory has no store: the report comes from Postgres alone.
    let elsewhere = tmp.path().join("not-the-runs-dir");
    assert_report_rebuilds(
        &[
            "--run",
            &run_id,
            "--database-url",
            pg.url(),
            "--runs-dir",
            elsewhere.to_str().unwrap(),
        ],
        &run_dir,
    );
    // The store lists it (read-only) with its verdict and load.
    let out = driver_cli(&["runs", "--database-url", pg.url(), "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("{run_id} not listed: {listed:#}"));
    assert_eq!(run["verdict"], "PASS", "{run:#}");
    assert!(run["requests"].as_u64().unwrap() > 0, "{run:#}");
}
