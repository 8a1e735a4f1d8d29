//! Capacity mode against servers whose capacity the tests know (`fixed_capacity` and its wide
//! twin): the controller's search, the spike phase, capacity phases, and sweeps of instance
//! counts, server arguments and Triton releases.

use crate::support::{
    alone, committed_matrix, driver_cli, ensure_worker, read, read_json, repo_root, run_matrix_for,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::status::EventKind;
use stress_common::store::Store;

/// Serves only `models` (links to the project's, in a repository under `tmp`): a server with
/// every QA model takes seconds longer to start, per run.
fn serve_only(m: &mut driver::matrix::Matrix, tmp: &Path, models: &[&str]) {
    let repo = tmp.join("models");
    std::fs::create_dir_all(&repo).unwrap();
    for model in models {
        std::os::unix::fs::symlink(repo_root().join("models").join(model), repo.join(model))
            .unwrap();
    }
    for template in m.server_templates.values_mut() {
        template.model_repositories = vec![repo.display().to_string()];
    }
}

/// Instance counts 1 and 4 of test-matrices/sweep.yaml (each instance serves 20 requests/s),
/// each with server arguments that work and ones tritonserver refuses, two variants at a time
/// (`parallel: 2`; the model sleeps, so parallel servers on two cores do not confound its
/// capacity): capacities near 20 and 80 ranked 4 > 1 (two answers, so that both searches run
/// at once: a third took another round of ~50 s; ranking more is the sweep's unit tests'),
/// measured in windows that overlapped, the refused variants listed as failed with why (the
/// sweep goes on), the best config.pbtxt with count 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_ranks_instance_counts_by_capacity_and_names_the_best_config() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = fixed_capacity_sweep(
        tmp.path(),
        [
            (
                "models.fixed_capacity.instance_group[0].count",
                vec![json!(1), json!(4)],
            ),
            (
                "server.args",
                vec![json!(["--log-verbose=0"]), json!(["--no-such-flag"])],
            ),
        ],
    );
    let run_id = "e2e-sweep";
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "120s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let sweep = &report["sweep"];
    let variants = sweep["variants"].as_array().expect("variants");
    let count =
        |v: &Value| v["parameters"]["models.fixed_capacity.instance_group[0].count"].clone();
    let args = |v: &Value| v["parameters"]["server.args"][0].clone();
    let brief: Vec<String> = variants
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} {}",
                count(v),
                args(v),
                v["status"],
                v["max_qps"],
                v["why"]
            )
        })
        .collect();
    let order: Vec<(Value, Value)> = variants.iter().map(|v| (count(v), args(v))).collect();
    // A quarter of the best's capacity is told apart from it, whatever the intervals.
    let tied = sweep["tied_with_best"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!tied.contains(&variants[1]["index"]), "{sweep:#}");
    let good = json!("--log-verbose=0");
    assert_eq!(
        order[..2],
        [(json!(4), good.clone()), (json!(1), good.clone())],
        "{brief:#?}"
    );
    // Each answered variant's capacity search, from its first window's start to its last's end.
    let mut searches: Vec<(i64, i64)> = Vec::new();
    for (v, expected) in variants.iter().zip([80.0, 20.0]) {
        let qps = v["max_qps"].as_f64().unwrap_or_else(|| panic!("{v:#}"));
        assert_sleeping_capacity(qps, expected, sweep);
        assert_eq!(v["status"], "measured");
        if let Some(interval) = v["qps_interval"].as_array() {
            let (low, high) = (interval[0].as_f64().unwrap(), interval[1].as_f64().unwrap());
            assert!(low <= qps && qps <= high, "{v:#}");
        }
        assert!(v["p99_ms"].as_f64().unwrap() <= 125.0 * 1.05, "{v:#}");
        // Each variant is a capacity run of its own, in the sweep's store.
        let own = read_json(
            &run_dir
                .join("variants")
                .join(format!("v{}", v["index"]))
                .join("report.json"),
        );
        assert_eq!(own["run_id"], v["run_id"]);
        assert_eq!(own["verdict"], "PASS");
        let windows: Vec<&Value> = own["capacity"]["phases"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["checks"].as_array().into_iter().flatten())
            .map(|c| &c["window"])
            .collect();
        let start = windows.iter().filter_map(|w| w["start_ms"].as_i64()).min();
        let end = windows.iter().filter_map(|w| w["end_ms"].as_i64()).max();
        searches.push((start.unwrap(), end.unwrap()));
    }
    // Two at a time: some two variants' searches were measured at the same time (by 10 s at
    // least); one at a time, none would overlap.
    let overlap = |a: (i64, i64), b: (i64, i64)| a.1.min(b.1) - a.0.max(b.0);
    let most = (0..searches.len())
        .flat_map(|i| (i + 1..searches.len()).map(move |j| (i, j)))
        .map(|(i, j)| overlap(searches[i], searches[j]))
        .max()
        .unwrap();
    assert!(
        most >= 10_000,
        "searches {searches:?}: overlapped {most} ms at most"
    );
    for refused in &variants[2..] {
        assert_eq!(args(refused), json!("--no-such-flag"), "{brief:#?}");
        assert_eq!(refused["status"], "failed", "{brief:#?}");
        assert!(
            refused["why"]
                .as_str()
                .unwrap_or_default()
                .contains("triton-0"),
            "{brief:#?}"
        );
    }
    assert_eq!(sweep["grid_size"], 4);
    let best = &sweep["best"];
    assert_eq!(count(best), json!(4));
    let config = best["configs"]["fixed_capacity"].as_str().unwrap();
    assert!(config.contains("count: 4"), "{config}");
    let written = read(&run_dir.join("best/fixed_capacity/config.pbtxt"));
    assert_eq!(written, config);
    let diff = best["config_diffs"]["fixed_capacity"].as_str().unwrap();
    let changed: Vec<&str> = diff.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(changed, ["-   count: 2", "+   count: 4"], "{diff}");
    // The best repository serves: its config is the variant's, its model files the original's.
    let repo = PathBuf::from(best["model_repository"].as_str().unwrap());
    assert_eq!(read(&repo.join("fixed_capacity/config.pbtxt")), config);
    assert!(repo.join("fixed_capacity/1/model.py").exists());
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("== Sweep of server group triton"), "{text}");
    let html = read(&run_dir.join("report.html"));
    assert_eq!(
        html.matches("<rect class=\"bar").count(),
        2,
        "one bar per answer"
    );
    // `driver report` rebuilds it from the store.
    let rebuilt = driver_cli(&[
        "report",
        "--run",
        run_id,
        "--runs-dir",
        run_dir.parent().unwrap().to_str().unwrap(),
    ]);
    assert!(rebuilt.status.success(), "{rebuilt:?}");
    assert_eq!(String::from_utf8_lossy(&rebuilt.stdout), text);
}

/// A capacity measured on `fixed_capacity`, whose instances sleep: `expected` (their sleeps'
/// rate) within 15% above — nothing can serve faster than the sleeps — and 25% below. The
/// issue's 15% either way is a quiet machine's (test-matrices/sweep.yaml, docs/capacity.md);
/// here two variants share the 2 cores with each other and with the suite's other test, and
/// that contention only ever lowers what meets the p99 target (a CI run measured 68 of 80).
fn assert_sleeping_capacity(qps: f64, expected: f64, sweep: &Value) {
    assert!(
        qps <= 1.15 * expected && qps >= 0.75 * expected,
        "{qps} QPS, expected {expected} (+15%, -25%): {sweep:#}"
    );
}

/// test-matrices/sweep.yaml serving only `fixed_capacity`, sweeping `parameters` instead of its
/// own, written into `tmp`: one measurement per variant (`confirm_best` is the same run again)
/// and two variants side by side (`parallel: 2`; the model sleeps, so parallel servers on two
/// cores do not confound its capacity), which keeps a sweep test to a minute or two.
fn fixed_capacity_sweep<const N: usize>(
    tmp: &Path,
    parameters: [(&str, Vec<Value>); N],
) -> PathBuf {
    let mut m = committed_matrix("sweep.yaml");
    serve_only(&mut m, tmp, &["fixed_capacity"]);
    let sweep = m.sweep.as_mut().expect("sweep.yaml has a sweep");
    sweep.parameters = parameters
        .into_iter()
        .map(|(path, values)| (path.to_string(), values))
        .collect();
    sweep.confirm_best = false;
    sweep.parallel = 2;
    let matrix = tmp.join("sweep.yaml");
    std::fs::write(&matrix, serde_saphyr::to_string(&m).unwrap()).unwrap();
    matrix
}

/// The second tritonserver release scripts/test.sh installs beside 2.51 (nvidia-pytriton 0.5.5
/// bundles 2.44.0), for the version sweep.
const SECOND_RELEASE: &str = ".local/pytriton-0.5.5/bin/tritonserver";

/// A version sweep: the same load on two real Triton releases, one after the other. Each
/// variant's servers really are the release its parameter names (each states its version, and
/// the report shows it beside the parameters), and both serve `fixed_capacity` at its capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_sweep_measures_each_release_and_names_it() {
    let second = repo_root().join(SECOND_RELEASE);
    if !second.exists() {
        let how = "PYTRITON_VERSION=0.5.5 TRITON_STRESS_LOCAL=.local/pytriton-0.5.5 \
                   scripts/install-tritonserver.sh (scripts/test.sh does)";
        if std::env::var_os("TRITON_STRESS_SKIP_SECOND_RELEASE").is_some() {
            eprintln!(
                "SKIPPED: no second tritonserver release at {} and \
                 TRITON_STRESS_SKIP_SECOND_RELEASE is set; install it with {how}",
                second.display()
            );
            return;
        }
        panic!(
            "no second tritonserver release at {}: install it with {how}, or set \
             TRITON_STRESS_SKIP_SECOND_RELEASE=1 to skip this test",
            second.display()
        );
    }
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = fixed_capacity_sweep(
        tmp.path(),
        [(
            "server.tritonserver.binary",
            vec![json!("auto"), json!(second.display().to_string())],
        )],
    );
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-version-sweep", "90s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let sweep = &report["sweep"];
    let variants = sweep["variants"].as_array().expect("variants");
    assert_eq!(variants.len(), 2, "{sweep:#}");
    let binary = |v: &Value| v["parameters"]["server.tritonserver.binary"].clone();
    let mut releases = BTreeMap::new();
    for v in variants {
        assert_eq!(v["status"], "measured", "{sweep:#}");
        // fixed_capacity's two instances serve 40 requests/s whichever Triton runs them.
        let qps = v["max_qps"].as_f64().unwrap_or_else(|| panic!("{v:#}"));
        assert_sleeping_capacity(qps, 40.0, sweep);
        releases.insert(
            binary(v).as_str().unwrap().to_string(),
            v["server_versions"].clone(),
        );
    }
    assert_eq!(releases["auto"], json!(["triton 2.51.0"]), "{sweep:#}");
    assert_eq!(
        releases[&second.display().to_string()],
        json!(["triton 2.44.0"]),
        "{sweep:#}"
    );
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains("server.tritonserver.binary=\"auto\" (triton 2.51.0)")
            && text.contains("(triton 2.44.0)"),
        "{text}"
    );
}

/// Capacity mode against a server whose capacity the test knows, then its spike phase
/// (test-matrices/capacity-spike.yaml: capacity.yaml with a spike and a 2 s request deadline).
/// `fixed_capacity` executes 2 requests at once for 50 ms each (40/s at most; N in flight wait
/// ceil(N/2) x 50 ms), and the target is p99 <= 125 ms. Production must find about 40/s at 2
/// to 4 in flight, have gone past it (5 in flight: ~150 ms) and come back; then the group jumps
/// to 120 requests/s open loop for 6 s: the server gets through about its capacity, the rest
/// time out (counted as unanswered, not failures: the run passes), p99 goes far over the
/// target, and once the backlog drains the group is back within it. The controller ends the run
/// on its own, with the two workers following its targets live (each started once). One run for
/// both: the spike starts from production's answer, so a run of production alone would measure
/// the same search again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_mode_finds_the_capacity_then_a_spike_overloads_the_server_and_it_recovers() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let mut m = committed_matrix("capacity-spike.yaml");
    serve_only(&mut m, tmp.path(), &["fixed_capacity"]);
    let spike = m.capacity.as_ref().and_then(|c| c.spike.as_ref()).unwrap();
    assert_eq!(
        spike.target_rps, 120.0,
        "the numbers below assume the committed spike"
    );
    let matrix = tmp.path().join("spike.yaml");
    std::fs::write(&matrix, serde_saphyr::to_string(&m).unwrap()).unwrap();
    let run_id = "e2e-capacity";
    let started = Instant::now();
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "170s").await;
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    assert!(
        took < Duration::from_secs(165),
        "the controller ended the run itself (took {took:?})"
    );
    let capacity = &report["capacity"];
    let text = read(&run_dir.join("report.txt"));
    assert_production_found_the_capacity(capacity, &text);
    assert_autoscaler_thresholds(capacity, &text);
    assert_spike_recovered(capacity, &text);
    // The workers changed concurrency and rate live: each started once, and the store has
    // their targets.
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    for worker in ["grpc-clients-0", "grpc-clients-1"] {
        let runs = events
            .iter()
            .filter(|e| e.member_id == worker && e.kind == EventKind::Running)
            .count();
        assert_eq!(runs, 1, "{worker} started once: {events:?}");
        assert!(
            store
                .load_target(&run_id.into(), &worker.into())
                .await
                .unwrap()
                .is_some(),
            "{worker} has a load target"
        );
    }
}

/// `phase`'s result row for `model` (`mix`: the whole group's).
fn result_row<'a>(capacity: &'a Value, phase: &str, model: &str) -> &'a Value {
    capacity["results"]
        .as_array()
        .expect("capacity results")
        .iter()
        .find(|r| r["phase"] == phase && r["model"] == model)
        .unwrap_or_else(|| panic!("no {phase}/{model} row: {capacity:#}"))
}

/// `phase`'s record (its checks, its autoscaler signals).
fn phase_record<'a>(capacity: &'a Value, phase: &str) -> &'a Value {
    capacity["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == phase)
        .unwrap_or_else(|| panic!("no {phase} phase: {capacity:#}"))
}

/// Production's search on `fixed_capacity`: about 40/s at 2 to 4 in flight within the target,
/// by slow start then bisection (or AIMD from a knee found on target), in few judged checks.
fn assert_production_found_the_capacity(capacity: &Value, text: &str) {
    let mix = result_row(capacity, "production", "mix");
    assert_eq!(mix["group"], "grpc-clients");
    let ending = mix["ending"].as_str().unwrap();
    assert!(
        ["converged", "oscillating"].contains(&ending),
        "ended {ending}: {capacity:#}"
    );
    let concurrency = mix["concurrency"].as_u64().unwrap();
    let max_qps = mix["max_qps"].as_f64().unwrap();
    let p99_ms = mix["p99_ms"].as_f64().unwrap();
    assert!(
        (2..=5).contains(&concurrency),
        "concurrency {concurrency}: {capacity:#}"
    );
    assert!(
        (30.0..=44.0).contains(&max_qps),
        "max QPS {max_qps}: {capacity:#}"
    );
    assert!(
        p99_ms <= 131.25,
        "p99 {p99_ms} ms over the target: {capacity:#}"
    );
    let safe = mix["safe_rate_qps"].as_f64().unwrap();
    assert!((safe - 0.7 * max_qps).abs() < 1e-6, "{mix:#}");
    assert_eq!(
        result_row(capacity, "production", "fixed_capacity")["max_qps"],
        mix["max_qps"],
        "the only model is the mix"
    );
    let checks = phase_record(capacity, "production")["checks"]
        .as_array()
        .unwrap();
    let trace: Vec<String> = checks
        .iter()
        .map(|c| {
            format!(
                "{}:{}:{}",
                c["concurrency"],
                c["judgement"].as_str().unwrap(),
                c["window"]["p99_us"].as_u64().unwrap() / 1000
            )
        })
        .collect();
    if ending == "oscillating" {
        assert!(
            checks
                .iter()
                .any(|c| c["judgement"] == "over" && c["concurrency"].as_u64().unwrap() >= 5),
            "it went past the capacity: {trace:?}"
        );
    }
    assert!(
        checks
            .iter()
            .any(|c| c["next_concurrency"].as_u64() > c["concurrency"].as_u64()),
        "it increased"
    );
    assert!(checks.len() <= 40, "{} checks", checks.len());
    // Slow start doubles from 2 (4: 100 ms, 8: ~200 ms), then bisects [4, 8]. On a loaded
    // machine 4 in flight may already be on target (a CI run: 129 ms), and a knee found on
    // target goes straight to AIMD: no bisection then.
    let steps: Vec<&str> = checks
        .iter()
        .map(|c| c["search_step"].as_str().unwrap())
        .collect();
    let knee_on_target = checks
        .iter()
        .any(|c| c["search_step"] == "slow_start" && c["judgement"] == "on_target");
    assert!(
        steps.first() == Some(&"slow_start") && (steps.contains(&"bisect") || knee_on_target),
        "{steps:?}: {trace:?}"
    );
    let judged = checks
        .iter()
        .filter(|c| !["settling", "too_few_samples"].contains(&c["judgement"].as_str().unwrap()))
        .count();
    assert!(judged <= 12, "{judged} judged checks: {trace:?}");
    assert!(text.contains("== Capacity =="), "{text}");
    assert!(
        text.contains("[slow_start] 2→")
            && text.contains(if knee_on_target {
                "[aimd] "
            } else {
                "[bisect] "
            }),
        "the trace names the search's parts where they begin: {text}"
    );
}

/// Autoscaler thresholds from the server's /metrics at each check: the tier saturated, so the
/// signals have thresholds (observed x 0.8), one is primary, and a KEDA snippet.
fn assert_autoscaler_thresholds(capacity: &Value, text: &str) {
    let autoscaler = &capacity["autoscaler"][0];
    assert_eq!(autoscaler["group"], "grpc-clients", "{capacity:#}");
    assert_eq!(autoscaler["source"], "direct");
    assert!(autoscaler["why_not"].is_null(), "{autoscaler:#}");
    let signals = autoscaler["signals"].as_array().unwrap();
    let signal = |name: &str| {
        signals
            .iter()
            .find(|s| s["signal"] == name)
            .unwrap_or_else(|| panic!("no {name}: {autoscaler:#}"))
    };
    let compute = signal("compute_us_per_request")["observed"]
        .as_f64()
        .unwrap();
    assert!(
        (49_000.0..62_000.0).contains(&compute),
        "fixed_capacity computes 50 ms per request: {autoscaler:#}"
    );
    let queue = signal("queue_us_per_request");
    let (observed, threshold) = (
        queue["observed"].as_f64().unwrap(),
        queue["threshold"].as_f64().unwrap(),
    );
    assert!((threshold - 0.8 * observed).abs() < 1e-6, "{queue:#}");
    assert_eq!(
        signal("compute_us_per_request")["load_sensitive"],
        false,
        "compute time does not grow with load: {autoscaler:#}"
    );
    signal("cpu_utilization");
    signal("pending_requests");
    let primary = autoscaler["primary"].as_str().expect("a primary signal");
    assert_ne!(primary, "compute_us_per_request");
    assert_eq!(signal(primary)["primary"], true);
    let keda = autoscaler["keda"].as_str().expect("a KEDA snippet");
    assert!(
        keda.contains("kind: ScaledObject") && keda.contains("- type: prometheus"),
        "{keda}"
    );
    assert_eq!(
        phase_record(capacity, "production")["autoscaler"]["primary"],
        primary,
        "the phase's record keeps it too"
    );
    assert!(text.contains("PRIMARY (first to fire)"), "{text}");
    assert!(text.contains("KEDA ScaledObject:"), "{text}");
}

/// The spike (120/s against 40/s of capacity, from production's concurrency): requests timed
/// out, the server answered about its capacity, a queue built up, and the group recovered.
fn assert_spike_recovered(capacity: &Value, text: &str) {
    let production = result_row(capacity, "production", "mix");
    let spike_row = result_row(capacity, "spike", "mix");
    assert_eq!(
        spike_row["concurrency"], production["concurrency"],
        "the spike jumps from production's answer: {capacity:#}"
    );
    assert_eq!(spike_row["target_rps"], 120.0);
    assert_eq!(spike_row["ending"], "recovered", "{capacity:#}");
    let spike = &phase_record(capacity, "spike")["spike"];
    let number = |k: &str| {
        spike[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k}: {spike:#}"))
    };
    assert!(
        number("sent") > number("answered"),
        "requests timed out during the spike: {spike:#}"
    );
    assert!(number("error_rate") > 0.05, "{spike:#}");
    let achieved = number("achieved_qps");
    assert!(
        (20.0..=50.0).contains(&achieved),
        "the server answers about its capacity (40/s), not the 120/s offered: {spike:#}"
    );
    assert!(number("p99_ms") > 500.0, "a queue built up: {spike:#}");
    assert!(
        number("baseline_p99_ms") <= 125.0 * 1.5,
        "the baseline is the converged load: {spike:#}"
    );
    let recover = number("time_to_recover_s");
    assert!((0.0..=60.0).contains(&recover), "{spike:#}");
    assert_eq!(spike["recovered"], true);
    let stages: Vec<&str> = spike["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["stage"].as_str().unwrap())
        .collect();
    assert!(
        stages.contains(&"spiking") && stages.last() == Some(&"recovering"),
        "{stages:?}"
    );
    assert!(
        text.contains("spike grpc-clients: from concurrency"),
        "{text}"
    );
    assert!(text.contains("recovered within"), "{text}");
}

/// Capacity phases switch the same workers among models live: `individual` measures each model
/// alone (`fixed_capacity`: 2 slots, 40/s; `fixed_capacity_wide`: 4 slots, 80/s, both 50 ms a
/// request; target p99 125 ms), then `exploration` runs a listed mix. Each phase starts again from min_concurrency
/// and has its own record and result row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_phases_measure_each_model_alone_then_a_mix() {
    let _run = alone().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let mut m = committed_matrix("capacity.yaml");
    serve_only(
        &mut m,
        tmp.path(),
        &["fixed_capacity", "fixed_capacity_wide"],
    );
    for template in m.client_templates.values_mut() {
        template.models =
            serde_saphyr::from_str("[{name: fixed_capacity}, {name: fixed_capacity_wide}]")
                .unwrap();
    }
    let cap = m.capacity.as_mut().unwrap();
    cap.phases = serde_saphyr::from_str("[individual, exploration]").unwrap();
    cap.exploration =
        serde_saphyr::from_str("[{fixed_capacity: 1, fixed_capacity_wide: 1}]").unwrap();
    cap.max_decreases = 2;
    let matrix = tmp.path().join("phases.yaml");
    std::fs::write(&matrix, serde_saphyr::to_string(&m).unwrap()).unwrap();
    let run_id = "e2e-capacity-phases";
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "300s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let capacity = &report["capacity"];
    let row = |phase: &str, model: &str| result_row(capacity, phase, model);
    let narrow = row("individual", "fixed_capacity");
    let wide = row("individual", "fixed_capacity_wide");
    for r in [narrow, wide] {
        let ending = r["ending"].as_str().unwrap();
        assert!(["converged", "oscillating"].contains(&ending), "{r:#}");
        assert!(r["p99_ms"].as_f64().unwrap() <= 131.25, "{r:#}");
    }
    let (narrow_qps, wide_qps) = (
        narrow["max_qps"].as_f64().unwrap(),
        wide["max_qps"].as_f64().unwrap(),
    );
    assert!((30.0..=44.0).contains(&narrow_qps), "{narrow:#}");
    assert!((60.0..=88.0).contains(&wide_qps), "{wide:#}");
    assert!(
        wide["concurrency"].as_u64() > narrow["concurrency"].as_u64(),
        "the wider model takes more in flight: {narrow:#} / {wide:#}\n{}",
        search_steps(capacity)
    );
    let explored = row("exploration", "mix");
    assert!(explored["ending"].is_string(), "{explored:#}");
    let keys: Vec<&str> = capacity["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "exploration/1",
            "individual/fixed_capacity",
            "individual/fixed_capacity_wide"
        ]
    );
    // Each individual phase ran only its own model (the workers switched live): past its first
    // two windows, which may still hold the last requests of the phase before (a worker applies
    // a new mix at its next poll and load window, and reports a poll later).
    for p in capacity["phases"].as_array().unwrap() {
        if p["phase"] != "individual" {
            continue;
        }
        let own = p["model"].as_str().unwrap();
        for check in p["checks"].as_array().unwrap().iter().skip(2) {
            if check["judgement"] == "settling" {
                continue;
            }
            for m in check["window"]["models"].as_array().unwrap() {
                assert_eq!(m["model"], own, "a judged window of {own}: {check:#}");
            }
        }
    }
}

/// Each phase's search, one line a window, for a failure's message.
fn search_steps(capacity: &serde_json::Value) -> String {
    let mut lines = Vec::new();
    for p in capacity["phases"].as_array().into_iter().flatten() {
        lines.push(format!("{}:", p["key"]));
        for c in p["checks"].as_array().into_iter().flatten() {
            let w = &c["window"];
            lines.push(format!(
                "  {} -> {} {} p99 {} us, {} requests, {} failures",
                c["concurrency"],
                c["next_concurrency"],
                c["judgement"],
                w["p99_us"],
                w["requests"],
                w["failures"]
            ));
        }
    }
    lines.join("\n")
}
