//! Change across runs, on a server whose speed the tests set (the `paced` model): `--repeat`,
//! an A/B comparison of two server templates, and a regression against the last passing run.

use crate::support::{
    self, Driver, RUN_LIMIT, START_LIMIT, alone, assert_junit, beside_another, driver_cli,
    edit_matrix, ensure_worker, models_matrix, paced_repository, read, read_json, run_args,
    run_matrix_for,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A matrix of Infer on the model `paced` (2 ms a request) from a repository under `tmp/m`,
/// polled every 500 ms (16 intervals in 8 s: enough batches for each run's own interval), then
/// `edit`; returns it and the repository.
fn paced_matrix(tmp: &Path, edit: impl FnOnce(&mut driver::matrix::Matrix)) -> (PathBuf, PathBuf) {
    let dir = tmp.join("m");
    std::fs::create_dir_all(&dir).unwrap();
    let repo = paced_repository(&dir, 2);
    let matrix = edit_matrix(models_matrix(&dir, "[{name: paced}]"), |m| {
        for t in m.server_templates.values_mut() {
            t.model_repositories = vec![repo.to_str().unwrap().to_string()];
        }
        m.run.poll_interval = Duration::from_millis(500);
        edit(m);
    });
    (matrix, repo)
}

/// `--repeat 2`: the load twice, each a run of its own with fresh servers (RUN-r1, RUN-r2, the
/// second compared with the first), and repeats.txt/json with each metric's mean and 95% t
/// interval across them; `--repeat 0` is bad input before anything starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_run_the_load_again_on_fresh_servers_and_give_each_metric_its_interval() {
    // Outcomes only (both runs pass, the interval holds the runs' mean): another run beside
    // it slows its runs, it does not change what is checked.
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let (matrix, _) = paced_matrix(tmp.path(), |_| {});
    let runs = tmp.path().join("runs");
    let mut args = run_args(&matrix, &runs, "e2e-rep", "5s");
    args.extend(["--repeat", "2"]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver-repeat");
    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let first = read_json(&runs.join("e2e-rep-r1/report.json"));
    let second = read_json(&runs.join("e2e-rep-r2/report.json"));
    assert_eq!(first["verdict"], "PASS");
    assert_eq!(
        second["baseline"]["baseline_run"], "e2e-rep-r1",
        "{:#}",
        second["baseline"]
    );
    let repeats = read_json(&runs.join("e2e-rep/repeats.json"));
    assert_eq!(
        repeats["runs"],
        serde_json::json!(["e2e-rep-r1: PASS", "e2e-rep-r2: PASS"])
    );
    let qps = repeats["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "qps Infer")
        .unwrap_or_else(|| panic!("{repeats:#}"));
    let (low, mean, high) = (
        qps["low"].as_f64().unwrap(),
        qps["mean"].as_f64().unwrap(),
        qps["high"].as_f64().unwrap(),
    );
    let each = [&first, &second].map(|r| {
        r["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["scenario"] == "Infer")
            .unwrap()["qps"]
            .as_f64()
            .unwrap()
    });
    assert!(
        (mean - (each[0] + each[1]) / 2.0).abs() < 1e-6 * mean && low < mean && mean < high,
        "{qps:#} from {each:?}"
    );
    let text = read(&runs.join("e2e-rep/repeats.txt"));
    assert!(
        text.starts_with("== 2 repeats of smoke, fresh servers each: "),
        "{text}"
    );
    assert!(driver.output().contains("qps Infer"), "{}", driver.output());

    let mut args = run_args(&matrix, &runs, "e2e-rep-zero", "5s");
    args.extend(["--repeat", "0"]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver-repeat-0");
    let status = driver.wait(START_LIMIT, true).await;
    assert_eq!(status.code(), Some(2), "{}", driver.output());
    assert!(
        driver.output().contains("from 1 to 100 runs"),
        "{}",
        driver.output()
    );
    assert!(!runs.join("e2e-rep-zero").exists());
}

/// `compare:` of two server templates, the second's model 15 times slower: the sides run
/// interleaved (a1, b1, a2, b2), each a run of its own, and compare.json calls the slower
/// latency a regression with an interval that excludes no change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ab_comparison_interleaves_the_templates_and_names_the_slower_one() {
    // 10 ms against 150 ms: a run beside it that slows the fast side's answers even tenfold
    // leaves the slower side's p50 more than twice as slow, and each side's p50 is mostly its
    // model's wait, steady from run to run (with 2 ms, a run beside one of the fast side's two
    // runs could double its p50, and Welch's t on two runs a side then called no change).
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let (fast_dir, slow_dir) = (tmp.path().join("fast"), tmp.path().join("slow"));
    for d in [&fast_dir, &slow_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (fast, slow) = (
        paced_repository(&fast_dir, 10),
        paced_repository(&slow_dir, 150),
    );
    let matrix = edit_matrix(models_matrix(tmp.path(), "[{name: paced}]"), |m| {
        let mut template = m.server_templates.values().next().unwrap().clone();
        m.server_templates.clear();
        for (name, repo) in [("fast", &fast), ("slow", &slow)] {
            template.model_repositories = vec![repo.to_str().unwrap().to_string()];
            m.server_templates.insert(name.into(), template.clone());
        }
        for g in m.server_groups.values_mut() {
            g.template = Some("fast".into());
        }
        m.run.poll_interval = Duration::from_millis(500);
        m.regression = Some(serde_saphyr::from_str("{min_requests: 20}").unwrap());
        m.compare = Some(serde_saphyr::from_str("{a: fast, b: slow, repeats: 2}").unwrap());
        // A closed loop, so that each side's latency is its model's: the smoke matrix's open
        // loop (Poisson, 100/s a stream) is past the slow side's capacity, whose p50 is then
        // its queue's, seconds that differ from run to run (CI: 2.1 s, a call of no change).
        for t in m.client_templates.values_mut() {
            t.load = Some(driver::matrix::LoadMode::Concurrency(2));
        }
    });
    let runs = tmp.path().join("runs");
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, "e2e-ab", "4s"),
        tmp.path(),
        "driver-ab",
    );
    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let started = |id: &str| {
        read_json(&runs.join(id).join("report.json"))["started_at_ms"]
            .as_i64()
            .unwrap()
    };
    let order: Vec<i64> = ["e2e-ab-a1", "e2e-ab-b1", "e2e-ab-a2", "e2e-ab-b2"]
        .map(started)
        .to_vec();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "interleaved: {order:?}"
    );
    let judged = read_json(&runs.join("e2e-ab/compare.json"));
    let p50 = judged["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "p50_ms Infer/paced")
        .unwrap_or_else(|| panic!("{judged:#}"));
    assert_eq!(p50["call"], "regression", "{p50:#}");
    assert!(
        p50["low"].as_f64().unwrap() > 1.0,
        "10 ms -> 150 ms: {p50:#}"
    );
    let text = read(&runs.join("e2e-ab/compare.txt"));
    assert!(
        text.starts_with("== A/B: server template slow (B) against fast (A), 2 runs each, interleaved: e2e-ab-a1: PASS, e2e-ab-b1: PASS"),
        "{text}"
    );
    assert!(text.contains("REGRESSION p50_ms Infer/paced"), "{text}");
}

/// Runs of the same matrix in one runs directory: the first has no baseline and says so; the
/// second, against the same server slowed from 2 ms to 100 ms per request, is compared with the
/// first (its last passing run) and, with `regression.fail`, fails naming the slower latency and
/// the lower QPS. A run of another matrix under the same name (more workers, against that slow
/// server) is compared with nothing and says why. An unknown `--baseline` is bad input before
/// anything runs, and `driver baseline set` pins a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowed_server_is_flagged_against_the_last_passing_run() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // The same repository path for every run: only the server's speed changes.
    let (matrix, repo) = paced_matrix(tmp.path(), |m| {
        // `threshold`: min_effect's older name.
        m.regression = Some(
            serde_saphyr::from_str("{threshold: 0.25, fail: true, min_requests: 20}").unwrap(),
        );
        // A closed loop, so that a slower server answers fewer requests (an open loop offers
        // the slow server the same rate, and its slowness shows as latency alone).
        for t in m.client_templates.values_mut() {
            t.load = Some(driver::matrix::LoadMode::Concurrency(2));
        }
    });
    let dir = tmp.path().join("m");
    let runs = tmp.path().join("runs");
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-reg-fast", "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains(
            "Regressions not compared: no baseline: no earlier passing run of this matrix (smoke)"
        ),
        "a first run: {text}"
    );

    // 100 ms: 4 streams of 2 in flight, the slow run answers at most 40/s, so its QPS is down
    // by more than half unless a loaded machine holds the fast run (CPU-bound, not
    // delay-bound) below 80/s. With 20 ms (200/s) a loaded CI machine once made it less than half.
    assert_eq!(paced_repository(&dir, 100), repo);
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-reg-slow", "8s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let baseline = &report["baseline"];
    assert_eq!(baseline["baseline_run"], "e2e-reg-fast", "{report:#}");
    assert_eq!(baseline["chosen_by"], "last passing runs");
    assert_eq!(baseline["window"], serde_json::json!(["e2e-reg-fast"]));
    assert_eq!(baseline["matrix_changed"], false, "the same matrix file");
    let change = |metric: &str| {
        report["regressions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["metric"] == metric)
            .unwrap_or_else(|| panic!("no {metric} finding: {:#}", report["baseline"]))["change"]
            .as_f64()
            .unwrap()
    };
    assert!(change("p50_ms Infer") > 2.0, "2 ms -> 100 ms");
    assert!(change("p50_ms Infer/paced") > 2.0);
    assert!(
        change("qps Infer") < -0.5,
        "fewer answers at the same concurrency: {:#}",
        report["regressions"]
    );
    assert_eq!(
        report["failed_members"][0]["member_id"], "regression",
        "{report:#}"
    );
    // Its history holds both runs (failed by a regression alone, it measured its load in
    // full): two runs, too few for a change point.
    assert_eq!(
        report["change_points"]["runs"],
        serde_json::json!(["e2e-reg-fast", "e2e-reg-slow"]),
        "{:#}",
        report["change_points"]
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains(
            "== Change vs baseline run e2e-reg-fast (last passing runs; within-run intervals \
             widened by the A/A run-to-run spread, changes of 25% or more) =="
        ),
        "{text}"
    );
    assert!(
        text.contains("REGRESSION p50_ms Infer: slower by "),
        "{text}"
    );
    let slow = report["regressions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["metric"] == "p50_ms Infer")
        .unwrap();
    assert!(
        slow["low"].as_f64().unwrap() > 0.25 && slow["q_value"].as_f64().unwrap() < 0.05,
        "its interval excludes no change: {slow:#}"
    );
    let junit = assert_junit(&read(&run_dir.join("junit.xml")));
    assert!(
        junit
            .iter()
            .any(|(suite, case, _)| suite == "regressions" && case == "p50_ms Infer"),
        "{junit:?}"
    );

    // Another matrix under the same name: twice the workers. Against the slow server it would
    // be a regression of the fast run's; it is compared with nothing and passes.
    let bigger = edit_matrix(matrix.clone(), |m| {
        for g in m.client_groups.values_mut() {
            g.instances = 2;
        }
    });
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &bigger, "e2e-reg-other-matrix", "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["regressions"], serde_json::json!([]), "{report:#}");
    assert!(
        report["baseline"]["note"]
            .as_str()
            .is_some_and(|n| n.starts_with(
                "no comparable baseline: the 2 earlier run(s) named smoke ran another matrix"
            )),
        "{report:#}"
    );

    // An unknown explicit baseline: exit 2, nothing launched.
    let mut args = run_args(&matrix, &runs, "e2e-reg-unknown", "8s");
    args.extend(["--baseline", "no-such-run"]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver-unknown");
    let status = driver.wait(START_LIMIT, true).await;
    assert_eq!(status.code(), Some(2), "{}", driver.output());
    assert!(
        driver
            .output()
            .contains("--baseline no-such-run: no such run"),
        "{}",
        driver.output()
    );

    // Pinning: the slow run becomes the baseline of runs named smoke.
    let runs_arg = runs.to_str().unwrap();
    let out = driver_cli(&["baseline", "set", "e2e-reg-slow", "--runs-dir", runs_arg]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("run e2e-reg-slow is the baseline of runs named smoke")
    );
    let out = driver_cli(&["baseline", "set", "no-such-run", "--runs-dir", runs_arg]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // The history at a glance: the three finished runs, newest first, the slow one failed by
    // its regressions (the refused run started nothing and has no summary).
    let out = driver_cli(&["runs", "--runs-dir", runs_arg, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["e2e-reg-other-matrix", "e2e-reg-slow", "e2e-reg-fast"],
        "{listed:#}"
    );
    assert_eq!(listed[1]["verdict"], "FAIL");
    assert!(
        listed[1]["regressions"].as_u64().unwrap() >= 3,
        "{listed:#}"
    );
    assert_eq!(
        listed[1]["root_cause"]
            .as_str()
            .map(|r| r.starts_with("regression: ")),
        Some(true),
        "{listed:#}"
    );
    assert_eq!(listed[2]["verdict"], "PASS");
    assert_eq!(listed[2]["regressions"], 0);
    assert_ne!(
        listed[0]["fingerprint"], listed[2]["fingerprint"],
        "another matrix"
    );
    assert_eq!(listed[1]["fingerprint"], listed[2]["fingerprint"]);
    let out = driver_cli(&["runs", "--runs-dir", runs_arg, "--limit", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text.lines().count(), 2, "a header and one run: {text}");
    assert!(
        text.contains("e2e-reg-other-matrix") && text.contains("PASS"),
        "{text}"
    );

    // driver serve's diff: the slow run against the fast one before it (same matrix), and the
    // other matrix's run against the slow one (the matrix text differs).
    let served = support::Serve::start(&runs, None);
    let diff: Value = serde_json::from_str(
        &support::get(&format!("{}/api/runs/e2e-reg-slow/diff", served.base))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(diff["previous"]["run_id"], "e2e-reg-fast", "{diff:#}");
    assert_eq!(
        (&diff["previous"]["verdict"], &diff["run"]["verdict"]),
        (&json!("PASS"), &json!("FAIL"))
    );
    assert_eq!(diff["matrix"], json!([]), "the same matrix text: {diff:#}");
    let total = diff["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario"] == "TOTAL")
        .unwrap_or_else(|| panic!("{diff:#}"));
    let (before, now) = (
        total["qps"][0].as_f64().unwrap(),
        total["qps"][1].as_f64().unwrap(),
    );
    assert!(now < before * 0.75, "the slow run's QPS is down: {total:#}");
    let server = &diff["servers"][0];
    assert!(
        server["version"][0]
            .as_str()
            .is_some_and(|v| v.starts_with("triton 2."))
            && server["version"][0] == server["version"][1],
        "the same tritonserver said its version both nights: {diff:#}"
    );
    let other: Value = serde_json::from_str(
        &support::get(&format!(
            "{}/api/runs/e2e-reg-other-matrix/diff",
            served.base
        ))
        .await
        .body,
    )
    .unwrap();
    assert_eq!(other["previous"]["run_id"], "e2e-reg-slow", "{other:#}");
    let changed = other["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["op"] != "same")
        .count();
    assert!(changed > 0, "another matrix text: {other:#}");
    let page = support::get(&format!("{}/runs/e2e-reg-slow/diff", served.base)).await;
    assert!(
        page.body.contains("<span class=\"PASS\">PASS</span>")
            && page.body.contains("id=\"matrix-same\""),
        "{}",
        page.body
    );
    let first = support::get(&format!("{}/api/runs/e2e-reg-fast/diff", served.base)).await;
    assert_eq!(
        first.status, 404,
        "nothing before the first run: {}",
        first.body
    );
}
