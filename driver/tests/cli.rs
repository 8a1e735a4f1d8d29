//! The driver binary on bad input: `driver run` and `driver validate` exit 2 and print the
//! matrix diagnostic, `file:line:column: path: message`, exactly as it is, on stderr; nothing is
//! started and no run directory is created. No tritonserver needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use stress_common::contract::RunId;
use stress_common::store::{NewRun, Store};

const FIXTURES: &str = "tests/fixtures/cli";

/// Each malformed matrix with the one diagnostic it must give (after `<path>:`).
const BAD: &[(&str, &str)] = &[
    (
        "undefined-target-group.yaml",
        "22:13: client_groups.grpc-clients.target: undefined server group \"tritons\" (defined: triton)",
    ),
    (
        "unknown-scenario.yaml",
        "18:50: client_templates.grpc-all.scenarios.SequenceValidInvalid: unknown scenario \"SequenceValidInvalid\" (known: Timeout, ImageClassification, CrashingClient, SequenceNoEnd, SequenceValidNoEnd, SequenceValidValid, SequenceNoStart, SequenceValid, PerfAnalyzer, Load, Infer)",
    ),
    (
        "zero-instances.yaml",
        "13:16: server_groups.triton.instances: must be at least 1, found 0",
    ),
    (
        "sweep-parallel-zero.yaml",
        "14:13: sweep.parallel: must be at least 1 (the variants measured at once)",
    ),
];

/// The driver, run from the package directory (so the paths in messages are the relative ones
/// given), without the environment variables that stand in for its flags.
fn driver(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driver"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DATABASE_URL")
        .env_remove("TRITON_STRESS_RUNS_DIR")
        .env_remove("TRITON_STRESS_RUN_ID")
        .env_remove("TRITON_STRESS_LAUNCHER")
        .env("NO_COLOR", "1")
        .output()
        .expect("the driver binary runs")
}

/// `driver run MATRIX --runs-dir RUNS --no-progress`, with `more` arguments.
fn driver_run(matrix: &str, runs: &Path, more: &[&str]) -> Output {
    let runs = runs.to_str().unwrap();
    let mut args = vec!["run", matrix, "--runs-dir", runs, "--no-progress"];
    args.extend_from_slice(more);
    driver(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// `out` (of `what`) exited 2 with exactly the diagnostic `message` for `path` on stderr, and
/// nothing on stdout.
fn assert_diagnostic(what: &str, out: &Output, path: &str, message: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", describe(what, out));
    assert_eq!(text(&out.stderr), format!("{path}:{message}\n"), "{what}");
    assert_eq!(text(&out.stdout), "", "{what}");
}

/// `out` (of `what`) exited 2 saying `says` on stderr.
fn assert_refused(what: &str, out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", describe(what, out));
    assert!(text(&out.stderr).contains(says), "{}", describe(what, out));
}

fn runs_dir_is_empty(dir: &Path) -> bool {
    !dir.exists() || std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn validate_exits_2_with_the_exact_diagnostic() {
    for (file, message) in BAD {
        let path = format!("{FIXTURES}/{file}");
        let out = driver(&["validate", &path]);
        let what = format!("driver validate {path}");
        assert_diagnostic(&what, &out, &path, message);
    }
}

#[test]
fn run_exits_2_with_the_exact_diagnostic_and_starts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for (file, message) in BAD {
        let path = format!("{FIXTURES}/{file}");
        let out = driver_run(&path, &runs, &[]);
        let what = format!("driver run {path}");
        assert_diagnostic(&what, &out, &path, message);
        assert!(runs_dir_is_empty(&runs), "{what} created a run directory");
    }
}

#[test]
fn validate_reports_each_file_and_fails_if_any_is_bad() {
    let good = "../test-matrices/smoke.yaml";
    let (bad, message) = BAD[2];
    let bad = format!("{FIXTURES}/{bad}");
    let out = driver(&["validate", good, &bad]);
    assert_eq!(out.status.code(), Some(2), "{}", describe("validate", &out));
    assert_eq!(
        text(&out.stdout),
        format!("{good}: ok (1 servers, 1 clients)\n")
    );
    assert_eq!(text(&out.stderr), format!("{bad}:{message}\n"));

    let out = driver(&["validate", good]);
    assert_eq!(out.status.code(), Some(0), "{}", describe("validate", &out));
}

#[test]
fn a_missing_matrix_file_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing: PathBuf = tmp.path().join("no-such-matrix.yaml");
    let missing = missing.to_str().unwrap();
    let runs = tmp.path().join("runs");
    for args in [
        vec!["validate", missing],
        vec![
            "run",
            missing,
            "--runs-dir",
            runs.to_str().unwrap(),
            "--no-progress",
        ],
    ] {
        let out = driver(&args);
        let what = format!("driver {}", args.join(" "));
        assert_eq!(out.status.code(), Some(2), "{}", describe(&what, &out));
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!("{missing}: cannot read the matrix: "))
                && stderr.contains("(os error 2)"),
            "{what}: {stderr}"
        );
        assert!(runs_dir_is_empty(&runs), "{what} created a run directory");
    }
}

#[test]
fn a_duration_shorter_than_the_poll_interval_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = driver_run(
        "../test-matrices/smoke.yaml",
        &runs,
        &["--duration", "500ms"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
    assert_eq!(
        text(&out.stderr),
        "--duration 500ms is shorter than the poll interval 1s\n"
    );
    assert!(runs_dir_is_empty(&runs), "a run directory was created");
}

/// `driver chaos-mesh` prints the planned faults of a matrix as one Chaos Mesh Workflow (YAML)
/// and says it was rendered only; a broken matrix is bad input with `driver validate`'s
/// diagnostic, as is a `--duration` the faults do not fit or a run id too long for the name.
#[test]
fn chaos_mesh_prints_the_faults_as_a_workflow_and_refuses_bad_input() {
    let soak = "../test-matrices/soak-with-faults.yaml";
    let args = |matrix: &'static str, run_id: &'static str| {
        vec![
            "chaos-mesh",
            matrix,
            "--run-id",
            run_id,
            "--namespace",
            "stress",
        ]
    };
    let out = driver(&args(soak, "nightly-1"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        describe("chaos-mesh", &out)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("never run against a\n# Chaos Mesh controller"),
        "{stdout}"
    );
    let workflow: serde_json::Value = serde_saphyr::from_str(&stdout).expect("YAML");
    assert_eq!(workflow["kind"], "Workflow", "{stdout}");
    assert_eq!(workflow["apiVersion"], "chaos-mesh.org/v1alpha1");
    assert_eq!(
        workflow["metadata"]["name"],
        "triton-stress-nightly-1-faults"
    );
    assert_eq!(workflow["metadata"]["namespace"], "stress");
    // The matrix's kill, network delay and loss (at once), pause and restart of its one
    // server, in that order.
    let serial = workflow["spec"]["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "member-triton-0")
        .expect("the server's branch");
    assert_eq!(
        serial["children"],
        serde_json::json!([
            "wait-triton-0-1",
            "kill-triton-0-1",
            "wait-triton-0-2",
            "network-triton-0-2",
            "wait-triton-0-3",
            "pause-triton-0-3",
            "wait-triton-0-4",
            "restart-triton-0-4"
        ])
    );

    for (file, message) in BAD {
        let path = format!("{FIXTURES}/{file}");
        let mut a = args("", "nightly-1");
        a[1] = &path;
        let out = driver(&a);
        let what = format!("driver chaos-mesh {path}");
        assert_diagnostic(&what, &out, &path, message);
    }

    let mut short = args(soak, "nightly-1");
    short.extend(["--duration", "120s"]);
    let out = driver(&short);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        describe("--duration", &out)
    );
    assert_eq!(
        text(&out.stderr),
        "../test-matrices/soak-with-faults.yaml:66:49: faults[3].at: fault restart-triton and \
         its recovery (2m 27s) do not fit the load phase of 2m\n"
    );

    let out = driver(&args(soak, "a-run-id-far-too-long-to-make-a-workflow-name"));
    assert_refused("a long run id", &out, "at most 42");
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn report_of_an_unknown_run_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = driver(&[
        "report",
        "--run",
        "no-such-run",
        "--runs-dir",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe("report", &out));
    let want = format!(
        "error: no store at {} (give --database-url for Postgres)\n",
        tmp.path().join("no-such-run/store.sqlite").display()
    );
    assert_eq!(text(&out.stderr), want);
}

/// Trace files a real tritonserver 2.51 wrote (TIMESTAMPS, log-frequency 50: two files): 60
/// gRPC and 40 HTTP requests to add_sub from perf_analyzer.
#[test]
fn trace_summary_reads_real_triton_trace_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    let files: Vec<String> = ["tr.json.0", "tr.json.1"]
        .iter()
        .map(|f| dir.join(f).display().to_string())
        .collect();
    let out = driver(&["trace-summary", &files[0], &files[1], "--json"]);
    assert!(out.status.success(), "{}", describe("trace-summary", &out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    let traces = |protocol: &str| {
        rows.iter()
            .find(|r| r["model"] == "add_sub" && r["protocol"] == protocol)
            .unwrap_or_else(|| panic!("no {protocol} row: {summary:#}"))["traces"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((traces("grpc"), traces("http")), (60, 40), "{summary:#}");
    for r in rows {
        for stage in ["request", "queue", "compute_infer", "send"] {
            assert!(
                r["stages"][stage]["avg_us"].as_f64().unwrap() > 0.0,
                "{r:#}"
            );
        }
    }
    // Not a trace file: exit 2, naming it.
    let bad = dir.join("../../../Cargo.toml").display().to_string();
    let out = driver(&["trace-summary", &bad]);
    assert_refused("trace-summary", &out, "not a Triton trace file");
}

/// Each malformed known-issues file with the one diagnostic it must give (after `<path>:`).
const BAD_KNOWN_ISSUES: &[(&str, &str)] = &[
    (
        "known-issues-bad-regex.yaml",
        "2:21: [0].match.message: not a regular expression: unclosed group",
    ),
    (
        "known-issues-unknown-key.yaml",
        "2:26: [0].match.severity: unknown field `severity`, expected one of scenario, model, class, error_kind, message",
    ),
    (
        "known-issues-bad-date.yaml",
        "4:10: [0].until: a date is YYYY-MM-DD, found \"31.12.2026\"",
    ),
    (
        "known-issues-no-match.yaml",
        "1:3: [0]: missing field `match`",
    ),
];

#[test]
fn a_bad_known_issues_file_exits_2_naming_file_line_and_field_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    for (file, message) in BAD_KNOWN_ISSUES {
        let path = format!("{FIXTURES}/{file}");
        let out = driver_run(
            "../test-matrices/smoke.yaml",
            &runs,
            &["--known-issues", &path],
        );
        let what = format!("driver run --known-issues {path}");
        assert_diagnostic(&what, &out, &path, message);
        assert!(runs_dir_is_empty(&runs), "{what} created a run directory");
    }
    // The shipped file is good.
    let issues = driver::matrix::load_known_issues(Path::new("../test-matrices/known-issues.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(issues[0].issue.id, "triton-2.51-sequence-reaper");
    assert_eq!(
        issues[0].issue.matches.class,
        Some(stress_common::signature::FailureClass::Server)
    );
}

/// A fault this launcher cannot inject (packet loss where no iptables runs), or one that a
/// shorter `--duration` leaves no room for, is bad input found before anything starts, named by
/// file, line and field.
#[test]
fn a_fault_that_cannot_be_injected_exits_2_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let committed = std::fs::read_to_string("../test-matrices/smoke.yaml").unwrap();
    let lines = committed.lines().count() + 2;
    let matrix = tmp.path().join("network.yaml");
    std::fs::write(
        &matrix,
        committed
            + "faults:\n  - { name: lossy, target: triton-0, at: 10s, kind: network, duration: 5s, \
               network: { loss: 0.05 }, expect: { recover_within: 10s } }\n  - { name: evict-one, \
               target: triton-0, at: 1s, kind: evict, expect: { recover_within: 5s } }\n",
    )
    .unwrap();
    // A PATH without iptables: this machine as one without a packet filter.
    let no_tools = tmp.path().join("empty-path");
    std::fs::create_dir(&no_tools).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_driver"))
        .args([
            "run",
            matrix.to_str().unwrap(),
            "--runs-dir",
            runs.to_str().unwrap(),
            "--no-progress",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DATABASE_URL")
        .env_remove("TRITON_STRESS_LAUNCHER")
        .env("PATH", &no_tools)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "network.yaml:{lines}:93: faults[0].network.loss: fault lossy (network) cannot be injected: dropping packets takes iptables"
        )),
        "{stderr}"
    );
    // A cluster fault on the local launcher: no pod to evict.
    assert!(
        stderr.contains(&format!(
            "network.yaml:{}:56: faults[1].kind: fault evict-one (evict) cannot be injected: \
             evict is a Kubernetes fault (a pod evicted or deleted, or the API cut off)",
            lines + 1
        )),
        "{stderr}"
    );

    let soak = "../test-matrices/soak-with-faults.yaml";
    let out = driver_run(soak, &runs, &["--duration", "120s"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
    let stderr = text(&out.stderr);
    // (Run by another user than root, the loss is refused too, on a line of its own.)
    assert!(
        stderr.contains(
            "error: ../test-matrices/soak-with-faults.yaml:66:49: faults[3].at: fault \
             restart-triton and its recovery (2m 27s) do not fit the load phase of 2m\n"
        ),
        "{stderr}"
    );

    // The kube launcher injects kill and restart only: a pause is refused before the driver
    // talks to any cluster (nothing is applied, so nothing is left behind).
    let out = driver_run(
        soak,
        &runs,
        &[
            "--launcher",
            "kube",
            "--database-url",
            "postgres://nobody@127.0.0.1:9/none",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "soak-with-faults.yaml:62:60: faults[1].kind: fault slow-network (network) cannot be \
             injected: the kube launcher injects kill, restart and evict"
        ) && stderr.contains(
            "soak-with-faults.yaml:64:59: faults[2].kind: fault freeze-triton (pause) cannot be \
             injected"
        ) && !stderr.contains("faults[0]")
            && !stderr.contains("faults[3]")
            && !stderr.contains("Kubernetes client"),
        "{stderr}"
    );
}

/// A sweep of a model the group's repositories lack, or of an entry its config does not have,
/// is bad input found before any server starts, named by file, line and parameter.
#[test]
fn a_sweep_of_what_the_model_repository_lacks_exits_2_naming_the_parameter() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let models = std::fs::canonicalize("../models").unwrap();
    let committed = std::fs::read_to_string("../test-matrices/sweep.yaml")
        .unwrap()
        .replace("[../models]", &format!("[{}]", models.display()));
    let sweep_at = committed.lines().position(|l| l == "sweep:").unwrap() + 1;
    let cases = [
        (
            "    models.no_such_model.max_batch_size: [0, 8]\n",
            "models.no_such_model.max_batch_size: model \"no_such_model\" has no config.pbtxt in \
             the model repositories of server template \"cpu\"",
        ),
        (
            "    models.fixed_capacity.instance_group[1].count: [1]\n",
            "models.fixed_capacity.instance_group[1].count: variant 1 \
             (models.fixed_capacity.instance_group[1].count=1): \
             `instance_group[1].count`: the config's `instance_group` has 1 entry (index 1 is \
             past the end)",
        ),
    ];
    for (parameter, expected) in cases {
        let written = format!(
            "{}sweep:\n  server_group: triton\n  parameters:\n{parameter}",
            committed
                .lines()
                .take(sweep_at - 1)
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"
        );
        let matrix = tmp.path().join("sweep.yaml");
        std::fs::write(&matrix, written).unwrap();
        let line = sweep_at + 3;
        let out = driver_run(matrix.to_str().unwrap(), &runs, &[]);
        assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("sweep.yaml:{line}:")) && stderr.contains(expected),
            "{stderr}"
        );
        // Nothing ran: no variant's directory, no store.
        let run_dir = std::fs::read_dir(&runs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert!(!run_dir.join("variants").exists(), "{}", run_dir.display());
        assert!(
            !run_dir.join("store.sqlite").exists(),
            "{}",
            run_dir.display()
        );
        std::fs::remove_dir_all(&runs).unwrap();
    }

    // On Kubernetes, before anything starts: a swept binary is refused naming the parameter
    // (servers are images there), and the store must be one that pods reach.
    let binary = std::fs::read_to_string("../test-matrices/sweep.yaml")
        .unwrap()
        .replace(
            "    server.args:",
            "    server.tritonserver.binary: [auto]\n    server.args:",
        )
        .replace(
            "../models",
            &format!("{}/../models", env!("CARGO_MANIFEST_DIR")),
        );
    let binary_matrix = tmp.path().join("binary-sweep.yaml");
    std::fs::write(&binary_matrix, &binary).unwrap();
    let binary_line = binary
        .lines()
        .position(|l| l.contains("server.tritonserver.binary"))
        .unwrap()
        + 1;
    for (matrix, expected) in [
        (
            binary_matrix.to_str().unwrap().to_string(),
            format!("binary-sweep.yaml:{binary_line}:"),
        ),
        (
            "../test-matrices/sweep.yaml".to_string(),
            "--launcher kube needs a Postgres store".to_string(),
        ),
    ] {
        let out = driver_run(&matrix, &runs, &["--launcher", "kube"]);
        assert_eq!(out.status.code(), Some(2), "{}", describe("run", &out));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&expected),
            "{expected}: {}",
            describe("run", &out)
        );
        if matrix.contains("binary") {
            assert!(
                stderr.contains("server.tritonserver.binary: the kube launcher runs images"),
                "{stderr}"
            );
        }
    }
}

/// Records run `id` of the matrix named nightly in `store`, started at `started_at_ms`, and
/// passed `passed_after_ms` later (None: not finished).
async fn nightly_run(
    store: &Store,
    id: &str,
    started_at_ms: i64,
    fingerprint: Option<&str>,
    passed_after_ms: Option<i64>,
) -> RunId {
    store
        .create_run(&NewRun {
            run_id: id.into(),
            name: "nightly".into(),
            matrix_yaml: "version: 1".into(),
            launcher: "local".into(),
            started_at_ms,
            fingerprint: fingerprint.map(str::to_string),
        })
        .await
        .unwrap();
    let run_id = RunId::new(id);
    if let Some(after) = passed_after_ms {
        let finished = started_at_ms + after;
        store.finish_run(&run_id, "PASS", finished).await.unwrap();
    }
    run_id
}

/// `driver prune` deletes the old runs that are over, with their run directories, and keeps
/// the recent, the pinned and the still-running ones; `--dry-run` deletes nothing.
#[test]
fn prune_deletes_old_runs_that_are_over_and_keeps_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let day = 86_400_000;
    let now = stress_common::now_ms();
    // (run id, started days ago, finished, pinned, lease held)
    let made = [
        ("old-finished", 40, true, false, false),
        ("old-pinned", 40, true, true, false),
        ("old-running", 40, false, false, true),
        ("recent", 2, true, false, false),
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for (id, ago, finished, pinned, lease) in made {
            let dir = runs.join(id);
            std::fs::create_dir_all(&dir).unwrap();
            let store = Store::connect(&Store::sqlite_url(&dir.join("store.sqlite")))
                .await
                .unwrap();
            let passed_after = finished.then_some(1000);
            let run_id = nightly_run(&store, id, now - ago * day, None, passed_after).await;
            if pinned {
                store.pin_baseline("nightly", &run_id).await.unwrap();
            }
            if lease {
                store.renew_lease(&run_id, now + day).await.unwrap();
            }
            store.close().await;
        }
    });
    let prune = |extra: &[&str]| {
        let mut args = vec![
            "prune",
            "--older-than",
            "30d",
            "--runs-dir",
            runs.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        driver(&args)
    };
    let out = prune(&["--dry-run"]);
    assert!(out.status.success(), "{}", describe("prune", &out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("would prune old-finished (nightly"),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 run(s) would prune\n"), "{stdout}");
    assert!(
        runs.join("old-finished").exists(),
        "a dry run deletes nothing"
    );

    let out = prune(&[]);
    assert!(out.status.success(), "{}", describe("prune", &out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("pruned old-finished (nightly"), "{stdout}");
    assert!(stdout.ends_with("1 run(s) pruned\n"), "{stdout}");
    assert!(!runs.join("old-finished").exists());
    for kept in ["old-pinned", "old-running", "recent"] {
        assert!(runs.join(kept).join("store.sqlite").exists(), "{kept}");
    }
    assert!(text(&prune(&[]).stdout).ends_with("0 run(s) pruned\n"));
}

/// Apache Otava, installed by scripts/install-otava.sh.
fn otava() -> PathBuf {
    let otava = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/otava-venv/bin/otava");
    assert!(
        otava.exists(),
        "no Apache Otava at {}: run scripts/install-otava.sh",
        otava.display()
    );
    otava
}

/// A nightly history of 20 runs in one store, the p99 of Load 10% higher from night 11 on
/// (QPS unchanged, a little noise on both): `driver history` names night 11 with the change's
/// size, and Apache Otava 0.8, at its default settings on the CSV `--format csv` writes, finds
/// the same change point and no other. A window under 4 runs is bad input.
#[test]
fn history_finds_a_planted_change_where_apache_otava_finds_it() {
    use driver::judge::change::Estimate;
    use driver::report::summary::RunSummary;
    let tmp = tempfile::tempdir().unwrap();
    let store_file = tmp.path().join("store.sqlite");
    let url = Store::sqlite_url(&store_file);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        for night in 1..=20i64 {
            let id = format!("nightly-{night:02}");
            let started = 1_780_000_000_000 + night * 86_400_000;
            let fingerprint = Some("mfp1-0123456789abcdef");
            let run_id = nightly_run(&store, &id, started, fingerprint, Some(60_000)).await;
            // ±1.5%: a deterministic wobble, not a trend.
            let wobble = [1.0, 1.012, 0.988, 1.006, 0.994, 1.015, 0.985][night as usize % 7];
            let p99 = if night < 11 { 20.0 } else { 22.0 } * wobble;
            let estimate = Estimate::bare;
            let summary = RunSummary {
                run_id: id,
                name: "nightly".into(),
                fingerprint: Some("mfp1-0123456789abcdef".into()),
                launcher: "local".into(),
                verdict: "PASS".into(),
                started_at_ms: started,
                finished_at_ms: Some(started + 60_000),
                estimates: vec![
                    estimate("p99_ms Load", p99, false),
                    estimate("qps Load", 400.0 / wobble, true),
                ],
                versions: vec!["triton-0: triton 2.51.0".into()],
                ..RunSummary::default()
            };
            store.save_document(&run_id, "", &summary).await.unwrap();
        }
        store.close().await;
    });
    let history = |format: &str, window: &str| {
        driver(&[
            "history",
            "--matrix",
            "nightly",
            "--database-url",
            &url,
            "--format",
            format,
            "--window",
            window,
            // Otava's defaults (`-M 0`): every significant change.
            "--min-effect",
            "0",
        ])
    };
    let out = history("json", "30");
    assert!(out.status.success(), "{}", describe("history", &out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shifts = json["change_points"]["shifts"].as_array().unwrap();
    assert_eq!(shifts.len(), 1, "{json:#}");
    assert_eq!(shifts[0]["metric"], "p99_ms Load");
    assert_eq!(shifts[0]["run_id"], "nightly-11");
    let change = shifts[0]["change"].as_f64().unwrap();
    assert!((change - 0.10).abs() < 0.03, "{change}");

    let out = history("csv", "30");
    assert!(out.status.success(), "{}", describe("history csv", &out));
    let csv = tmp.path().join("history.csv");
    std::fs::write(&csv, &out.stdout).unwrap();
    let config = tmp.path().join("otava.yaml");
    std::fs::write(
        &config,
        format!(
            "tests:\n  nightly:\n    type: csv\n    file: {}\n    time_column: time\n    \
             attributes: [run]\n    metrics: [\"p99_ms Load\", \"qps Load\"]\n",
            csv.display()
        ),
    )
    .unwrap();
    let out = Command::new(otava())
        .args(["analyze", "nightly", "--output", "json"])
        .env("OTAVA_CONFIG", &config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe("otava", &out));
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = found["nightly"].as_array().unwrap();
    assert_eq!(points.len(), 1, "Otava: {found:#}");
    assert_eq!(points[0]["attributes"]["run"], "nightly-11", "{found:#}");
    let changes = points[0]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{found:#}");
    assert_eq!(changes[0]["metric"], "p99_ms Load");

    let out = history("text", "3");
    assert_refused("history --window 3", &out, "from 4 to 500 runs");
    let out = driver(&["history", "--matrix", "nope", "--database-url", &url]);
    assert_refused(
        "history",
        &out,
        "no finished run of a matrix named \"nope\"",
    );
}
