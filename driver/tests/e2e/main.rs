//! The driver end to end, against REAL tritonserver and worker processes (the local launcher):
//!
//! * the smoke matrix passes on a SQLite store and on a throwaway Postgres, every scenario runs
//!   without failures, and `driver report` rebuilds the same report from the store;
//! * a SIGKILLed tritonserver, or a SIGKILLed worker, fails the run (exit 1) within 5 s of the
//!   kill, and the report names the member, its exit, its log tail and how to reproduce it;
//! * a hung (SIGSTOPped) tritonserver fails the run within 5 s of the first failure.
//!
//! They need what `scripts/install-tritonserver.sh` installs into `<repo>/.local` (tritonserver
//! and perf_analyzer) and, for the Postgres test, PostgreSQL server binaries
//! (`TRITON_STRESS_SKIP_POSTGRES=1` skips that one; `TEST_DATABASE_URL` uses a running server).
//! The worker is built by the tests themselves (see [`ensure_worker`]).
//!
//! On 2 loaded cores: one run at a time ([`RUN_LOCK`]), generous timeouts for everything that
//! waits on a server; the only timing assertion is the 5 s fail-fast bound.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::scenario::Scenario;
use stress_common::status::{EventKind, Stopping};
use stress_common::store::testing::TestPostgres;
use stress_common::store::{EventRow, Store};

mod support;
use support::{assert_junit, ensure_worker, pid_in, repo_root};

/// Runs start one at a time: two tritonservers loading five python models each on 2 shared
/// cores only make each other slow.
static RUN_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a run may take from start to a verdict, server start-up included (a 15 s run takes
/// about 30 s on an idle machine).
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// How long a worker may take to report RUNNING after the driver starts.
const START_LIMIT: Duration = Duration::from_secs(300);
/// The issue's bound: a failed member stops the run within 5 s.
const FAIL_FAST_BOUND: Duration = Duration::from_secs(5);

const SERVER: &str = "triton-0";
const WORKER: &str = "grpc-clients-0";

/// A committed matrix (test-matrices/NAME), loaded and changed for a loaded test machine:
///
/// * model repositories by absolute path (the copy is not next to `models/`);
/// * a generous server-ready timeout, and heartbeat and zero-QPS limits of 10 polls instead of 3,
///   so a worker starved of CPU for a few seconds on 2 loaded cores does not fail a run that
///   tests something else (a member that ends, the rule the fail-fast tests exercise, fails the
///   run at the next poll whatever these limits are).
fn committed_matrix(name: &str) -> driver::matrix::Matrix {
    let committed = repo_root().join("test-matrices");
    let mut m = driver::matrix::load(&committed.join(name)).unwrap_or_else(|e| panic!("{e}"));
    m.source_path = None;
    m.run.server_ready_timeout = Duration::from_secs(300);
    m.run.fail_fast.heartbeat_timeout_polls = 10;
    m.run.fail_fast.zero_qps_polls = 10;
    for template in m.server_templates.values_mut() {
        for repo in &mut template.model_repositories {
            let path = committed.join(&*repo);
            let path = path
                .canonicalize()
                .unwrap_or_else(|e| panic!("model repository {}: {e}", path.display()));
            *repo = path.to_str().expect("a UTF-8 path").to_string();
        }
    }
    m
}

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

/// The smoke matrix as [`committed_matrix`] gives it, with explicit, equal weights so that every
/// scenario gets tests within a 15 s run (10 each, and 20 for SequenceNoStart, which the worker
/// skips while its stream has a sequence left open), written into `dir` as YAML.
fn smoke_matrix(dir: &Path) -> PathBuf {
    let mut m = committed_matrix("smoke.yaml");
    let weights: indexmap::IndexMap<String, u32> = Scenario::ALL
        .iter()
        .map(|s| {
            let weight = if *s == Scenario::SequenceNoStart {
                20
            } else {
                10
            };
            (s.name().to_string(), weight)
        })
        .collect();
    for template in m.client_templates.values_mut() {
        template.scenarios = Some(weights.clone());
        // Load in open loop with Poisson arrivals: its sends' lateness is in the report.
        template.load = Some(driver::matrix::LoadMode::Poisson(100.0));
    }
    let path = dir.join("smoke.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&m).unwrap()).unwrap();
    path
}

/// A `driver` process. Its stdout and stderr go to files (a pipe nobody reads could block it).
/// Dropped while it runs (a failed assertion), it gets SIGTERM, which stops its members, then
/// SIGKILL. Then what our tritonservers left behind goes (see [`Driver::clean_up_servers`]).
struct Driver {
    child: Child,
    what: String,
    stdout: PathBuf,
    stderr: PathBuf,
    status: Option<ExitStatus>,
    /// The run's tritonservers seen so far (children of the driver), each with the shared
    /// memory regions of its python backend stubs.
    servers: BTreeMap<u32, BTreeSet<String>>,
}

/// A process as /proc shows it.
#[derive(Debug)]
struct Proc {
    pid: u32,
    ppid: u32,
    args: Vec<String>,
}

impl Proc {
    /// For a python backend stub: the pid of the tritonserver that started it (its 6th
    /// argument) and its shared memory region (3rd).
    fn stub_of(&self) -> Option<(u32, &str)> {
        if !self.args.first()?.ends_with("triton_python_backend_stub") {
            return None;
        }
        Some((self.args.get(5)?.parse().ok()?, self.args.get(2)?))
    }
}

fn processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid ...; comm may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let args = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some(Proc { pid, ppid, args })
        })
        .collect()
}

impl Driver {
    fn spawn(args: &[&str], dir: &Path, name: &str) -> Driver {
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_driver"))
            .args(args)
            // `binary: auto` finds <repo>/.local/bin/tritonserver (and perf_analyzer) from the
            // matrix's directory or the working directory; the matrix is in a temporary one.
            .current_dir(repo_root())
            .env_remove("DATABASE_URL")
            .env_remove("TRITON_STRESS_RUNS_DIR")
            .env_remove("TRITON_STRESS_RUN_ID")
            .env_remove("TRITON_STRESS_LAUNCHER")
            // Members inherit the driver's environment; without NO_COLOR the tests see whether
            // the launcher keeps terminal colours out of the member logs by itself.
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the driver binary starts");
        Driver {
            child,
            what: format!("driver {}", args.join(" ")),
            stdout,
            stderr,
            status: None,
            servers: BTreeMap::new(),
        }
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("waiting on the driver");
        }
        self.status
    }

    /// Notes the driver's tritonserver children and their stubs' shared memory regions.
    fn observe(&mut self) {
        if self.try_exit().is_some() {
            return;
        }
        let procs = processes();
        let me = self.child.id();
        for p in &procs {
            if p.ppid == me && p.args.first().is_some_and(|a| a.contains("tritonserver")) {
                self.servers.entry(p.pid).or_default();
            }
        }
        for p in &procs {
            if let Some((server, region)) = p.stub_of()
                && p.ppid == server
                && let Some(regions) = self.servers.get_mut(&server)
            {
                regions.insert(region.to_string());
            }
        }
    }

    /// Waits for the driver to exit; fails the test after `limit`. With `observe`, notes its
    /// servers every half second meanwhile; without, nothing delays noticing the exit.
    async fn wait(&mut self, limit: Duration, observe: bool) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let mut next_look = Instant::now();
        loop {
            if let Some(status) = self.try_exit() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} still runs after {limit:?}\n{}",
                self.what,
                self.output()
            );
            if observe && Instant::now() >= next_look {
                self.observe();
                next_look = Instant::now() + Duration::from_millis(500);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Both streams, for assertion messages.
    fn output(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        format!(
            "--- {} stdout ---\n{}\n--- stderr ---\n{stderr}",
            self.what,
            self.stdout()
        )
    }

    /// A tritonserver that dies by SIGKILL (ours in the fail-fast tests, or the driver's after
    /// its stop grace) leaves the shared memory regions of its python backend stubs in
    /// /dev/shm (11-12 per server here), and, before the launcher killed the server's process
    /// group (4d4cc29), left the stubs running too. Kills any such stub and removes those
    /// regions, ours only: a stub's 6th argument is its server's pid; a live server's stubs and
    /// regions are left alone.
    fn clean_up_servers(&mut self) {
        let procs = processes();
        for p in &procs {
            if let Some((server, region)) = p.stub_of()
                && p.ppid != server
                && let Some(regions) = self.servers.get_mut(&server)
            {
                eprintln!(
                    "killing python backend stub {} of tritonserver {server}",
                    p.pid
                );
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p.pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                regions.insert(region.to_string());
            }
        }
        for (server, regions) in &self.servers {
            let alive = procs.iter().any(|p| {
                p.pid == *server && p.args.first().is_some_and(|a| a.contains("tritonserver"))
            });
            if alive {
                continue;
            }
            let removed = regions
                .iter()
                .filter(|r| std::fs::remove_file(Path::new("/dev/shm").join(r)).is_ok())
                .count();
            if removed > 0 {
                eprintln!("removed {removed} shared memory regions of tritonserver {server}");
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.try_exit().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.try_exit().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        self.clean_up_servers();
    }
}

/// The pid of `member` from the driver's event of `kind` about it.
fn member_pid(events: &[EventRow], member: &str, kind: EventKind) -> Option<u32> {
    events
        .iter()
        .filter(|e| e.member_id == member && e.kind == kind)
        .find_map(|e| pid_in(&e.details))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn total_row(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.starts_with("TOTAL "))
        .unwrap_or_else(|| panic!("no TOTAL row in:\n{report}"))
}

/// `driver ARGS` to its end, without the environment's store settings.
fn driver_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_driver"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TRITON_STRESS_RUNS_DIR")
        .output()
        .unwrap()
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

/// Every server-side success is explained: each model's successes on the server equal the
/// workers' OK answers, or the gap is within the requests whose outcome they could not see.
/// The Load model's match exactly, but for the perf_analyzer runs (of the same model) killed at
/// the workers' stop: at most their fixed request count each, and nothing else unseen.
fn assert_reconciled(report: &Value) {
    let rows = report["reconciliation"].as_array().expect("reconciliation");
    let exact_but_killed_runs = |r: &Value| {
        let runs = r["uncounted_runs"].as_u64().unwrap_or(0);
        let gap = r["gap"].as_i64().unwrap_or(i64::MAX);
        r["verdict"] == "explained"
            && runs > 0
            && r["client_not_ok"] == 0
            && r["client_unseen"] == 0
            && (0..=(runs * stress_common::limits::PERF_ANALYZER_REQUESTS) as i64).contains(&gap)
    };
    assert!(
        rows.iter().any(|r| r["model"] == "add_sub"
            && (r["verdict"] == "reconciled" || exact_but_killed_runs(r))),
        "the Load model's successes match exactly: {rows:#?}\nscenarios: {:#}",
        report["scenarios"]
    );
    for r in rows {
        assert!(
            r["verdict"] == "reconciled" || r["verdict"] == "explained",
            "{r:#}"
        );
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

/// The per-model table splits each scenario's row exactly: per scenario, its models' requests
/// add up to the scenario's, and its models' tests to the scenario's (every scenario names the
/// model of each test). Returns the model rows.
fn assert_models_add_up(report: &Value) -> Vec<Value> {
    let models = report["models"].as_array().expect("model rows").clone();
    for row in report["scenarios"].as_array().expect("scenario rows") {
        let name = row["scenario"].as_str().unwrap();
        if name == "TOTAL" {
            continue;
        }
        let of_scenario: Vec<&Value> = models.iter().filter(|m| m["scenario"] == name).collect();
        let sum = |key: &str| -> u64 { of_scenario.iter().map(|m| m[key].as_u64().unwrap()).sum() };
        for key in ["requests", "tests", "failures"] {
            assert_eq!(
                sum(key),
                row[key].as_u64().unwrap(),
                "{name}: the models' {key} do not add up to the scenario's: {row:#} / {of_scenario:#?}"
            );
        }
    }
    models
}

/// `driver run MATRIX` into `runs` under `run_id` for `duration`, without the progress line.
fn run_args<'a>(
    matrix: &'a Path,
    runs: &'a Path,
    run_id: &'a str,
    duration: &'a str,
) -> Vec<&'a str> {
    vec![
        "run",
        matrix.to_str().unwrap(),
        "--runs-dir",
        runs.to_str().unwrap(),
        "--run-id",
        run_id,
        "--duration",
        duration,
        "--no-progress",
    ]
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
    let _one_run = RUN_LOCK.lock().await;
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
    let _one_run = RUN_LOCK.lock().await;
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

/// Which process the fail-fast test kills.
#[derive(Debug, Clone, Copy)]
enum Victim {
    Server,
    Worker,
}

/// A 120 s smoke run whose worker runs and reports load.
struct LongRun {
    // Field order = drop order: the driver (and its members) go before the directory.
    driver: Driver,
    store: Store,
    run_id: String,
    run_dir: PathBuf,
    server_pid: u32,
    worker_pid: u32,
    _tmp: tempfile::TempDir,
}

/// Starts a 120 s smoke run on SQLite and waits for the worker's RUNNING event and its first
/// QPS sample: load is flowing and the driver is in its poll loop.
async fn start_long_run(run_id: &str) -> LongRun {
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = smoke_matrix(tmp.path());
    let runs = tmp.path().join("runs");
    let run_dir = runs.join(run_id);
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, run_id, "120s"),
        tmp.path(),
        "driver",
    );
    let store_file = run_dir.join("store.sqlite");
    let deadline = Instant::now() + START_LIMIT;
    let mut store = None;
    loop {
        assert!(
            driver.try_exit().is_none(),
            "the driver ended before the worker ran\n{}",
            driver.output()
        );
        assert!(
            Instant::now() < deadline,
            "the worker did not run within {START_LIMIT:?}\n{}",
            driver.output()
        );
        if store.is_none() && store_file.is_file() {
            store = Store::connect(&Store::sqlite_url(&store_file)).await.ok();
        }
        if let Some(st) = &store
            && let Ok(events) = st.events(&RunId::from(run_id), 0).await
        {
            let server = member_pid(&events, SERVER, EventKind::Running);
            let worker = member_pid(&events, WORKER, EventKind::Starting);
            let running = events
                .iter()
                .any(|e| e.member_id == WORKER && e.kind == EventKind::Running);
            let load = st
                .latest_qps(&RunId::from(run_id))
                .await
                .is_ok_and(|q| q.iter().any(|s| s.member_id == WORKER));
            if let (Some(server_pid), Some(worker_pid), true, true) =
                (server, worker, running, load)
            {
                driver.observe();
                assert!(
                    driver.servers.contains_key(&server_pid),
                    "the RUNNING event names pid {server_pid}, but the driver's tritonserver \
                     children are {:?}",
                    driver.servers.keys()
                );
                return LongRun {
                    driver,
                    store: store.unwrap(),
                    run_id: run_id.into(),
                    run_dir,
                    server_pid,
                    worker_pid,
                    _tmp: tmp,
                };
            }
        }
        driver.observe();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
        .unwrap_or_else(|e| panic!("{signal} to pid {pid}: {e}"));
}

/// Starts a long run, SIGKILLs the server or the worker, and checks that the driver exits 1
/// within 5 s of the kill with a report that names the killed member.
async fn fail_fast_on_kill(victim: Victim) {
    let _one_run = RUN_LOCK.lock().await;
    let run_id = format!("e2e-kill-{victim:?}").to_lowercase();
    let mut run = start_long_run(&run_id).await;
    let (server_pid, worker_pid, run_dir) = (run.server_pid, run.worker_pid, run.run_dir.clone());
    let driver = &mut run.driver;

    let (member, pid, role) = match victim {
        Victim::Server => (SERVER, server_pid, "SERVER"),
        Victim::Worker => (WORKER, worker_pid, "CLIENT"),
    };
    let killed_at = Instant::now();
    signal(pid, nix::sys::signal::Signal::SIGKILL);
    let status = driver.wait(RUN_LIMIT, false).await;
    let took = killed_at.elapsed();

    assert_eq!(status.code(), Some(1), "{}", driver.output());
    assert!(
        took <= FAIL_FAST_BOUND,
        "the driver exited {took:?} after {member} was killed (bound {FAIL_FAST_BOUND:?})\n{}",
        driver.output()
    );
    eprintln!("{member} SIGKILLed: the driver exited 1 after {took:?}");
    // The verdict: the killed member, and why.
    let verdict =
        format!("FAILED: {member}: killed by signal 9 (SIGKILL) before the end of the run");
    assert!(
        driver.stdout().lines().any(|l| l == verdict),
        "no `{verdict}` line\n{}",
        driver.output()
    );

    // report.txt: the member's block with its reason, exit, reproduce command and log tail.
    let report = read(&run_dir.join("report.txt"));
    assert!(
        report.starts_with(&format!("Run {run_id} (local launcher): FAIL\n")),
        "{report}"
    );
    let heading = format!("== FAILED {role} {member} (group ");
    let block = report
        .split("\n\n")
        .find(|b| b.starts_with(&heading))
        .unwrap_or_else(|| panic!("report.txt has no `{heading}` block:\n{report}"));
    let field = |key: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` line in:\n{block}"))
    };
    assert_eq!(
        field("reason: "),
        "killed by signal 9 (SIGKILL) before the end of the run"
    );
    assert_eq!(field("exit: "), "killed by signal 9 (SIGKILL)");
    assert_eq!(
        field("log_file: "),
        run_dir
            .join(format!("logs/{member}.log"))
            .display()
            .to_string()
    );
    let reproduce = field("reproduce: ");
    let program = match victim {
        Victim::Server => "tritonserver",
        Victim::Worker => "/worker",
    };
    assert!(reproduce.contains(program), "reproduce: {reproduce}");
    let tail: Vec<&str> = block
        .split_once("\nlog tail:\n")
        .unwrap_or_else(|| panic!("no log tail in:\n{block}"))
        .1
        .lines()
        .filter_map(|l| l.strip_prefix("  | "))
        .collect();
    assert!(
        tail.iter().any(|l| !l.trim().is_empty()),
        "empty log tail:\n{block}"
    );
    assert!(
        !block.contains('\u{1b}'),
        "terminal escape codes in the report:\n{block}"
    );

    // report.json says the same.
    let json = read_json(&run_dir.join("report.json"));
    assert_eq!(json["verdict"], "FAIL");
    let failed = json["failed_members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member_id"] == member)
        .unwrap_or_else(|| panic!("{member} not among the failed members: {json:#}"));
    assert_eq!(failed["diagnostics"]["exit"]["signal"], 9, "{failed:#}");
    assert_eq!(failed["role"], role);
    if let Victim::Worker = victim {
        // Nothing else failed: the server was stopped by the driver, not by a failure.
        assert_eq!(
            json["failed_members"].as_array().unwrap().len(),
            1,
            "{json:#}"
        );
    }
    // Root cause first: the killed member leads; a killed server's client failures (its
    // connection errors) are grouped under it, none counted as independent.
    let analysis = &json["analysis"];
    assert_eq!(analysis["root_cause"]["member_id"], member, "{analysis:#}");
    // Whose fault: a killed server is the server's; a killed worker is ours (the harness).
    let class = match victim {
        Victim::Server => "server",
        Victim::Worker => "harness",
    };
    assert_eq!(analysis["root_cause"]["class"], class, "{analysis:#}");
    assert!(
        report.contains(&format!("== Root cause ==\n{role} {member} at ")),
        "{report}"
    );
    // Counts: the workers stopped and flushed before the servers' last sample, so a killed
    // worker's run compares both sides, and what the server served beyond the workers' counts
    // is the killed worker's unreported last requests (named), never an unexplained mismatch.
    // A killed server's counters die with it: nothing to compare, and the report says so.
    let rows = json["reconciliation"].as_array().expect("reconciliation");
    assert!(!rows.is_empty(), "{json:#}");
    for r in rows {
        match victim {
            Victim::Worker => {
                assert_ne!(r["verdict"], "mismatch", "{r:#}");
                assert_ne!(r["verdict"], "not_sampled", "{r:#}");
                if r["gap"].as_i64().unwrap() > 0 && r["verdict"] == "explained" {
                    let why = r["explanation"].as_str().unwrap();
                    assert!(
                        why.contains(&format!("{WORKER} was killed (SIGKILL)"))
                            || why.contains("did not see answered"),
                        "{r:#}"
                    );
                }
            }
            Victim::Server => assert_eq!(r["verdict"], "not_sampled", "{r:#}"),
        }
    }
    if let Victim::Server = victim {
        assert_eq!(analysis["independent_failures"], 0, "{analysis:#}");
        assert_eq!(
            analysis["independent_members"],
            Value::Array(vec![]),
            "{analysis:#}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_the_run_within_5_s() {
    fail_fast_on_kill(Victim::Server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_the_run_within_5_s() {
    fail_fast_on_kill(Victim::Worker).await;
}

/// A worker that hangs (SIGSTOP: its process runs, sends nothing, reports nothing) fails the
/// run on its stale heartbeat (3 polls here), and the driver, which reads the store itself and
/// sees the process use no CPU, says it is hung rather than cut off from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_named_hung_not_cut_off_from_the_store() {
    let _one_run = RUN_LOCK.lock().await;
    let mut run = start_long_run("e2e-hung-worker").await;
    // driver serve lists the run under way as RUNNING (its lease holds) and rebuilds its report
    // so far from the store the driver is writing, read-only.
    let served = support::Serve::start(run.run_dir.parent().unwrap(), None);
    let listed: Value = serde_json::from_str(
        &support::get(&format!("{}/api/runs", served.base))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(
        (&listed[0]["run_id"], &listed[0]["verdict"]),
        (&json!("e2e-hung-worker"), &json!("RUNNING")),
        "{listed:#}"
    );
    let so_far = support::get(&format!("{}/runs/e2e-hung-worker", served.base)).await;
    assert_eq!(so_far.status, 200, "{}", so_far.body);
    // Under way: the page reloads itself and says what the run has done so far.
    assert!(
        so_far
            .body
            .contains("<meta http-equiv=\"refresh\" content=\"5\">")
    );
    assert!(
        so_far.body.contains("<p class=\"live\">Running for "),
        "{}",
        so_far.body
    );
    assert!(
        so_far.body.contains("<table class=\"live\">"),
        "{}",
        so_far.body
    );
    signal(run.worker_pid, nix::sys::signal::Signal::SIGSTOP);
    let status = run.driver.wait(RUN_LIMIT, false).await;
    assert_eq!(status.code(), Some(1), "{}", run.driver.output());
    let listed: Value = serde_json::from_str(
        &support::get(&format!("{}/api/runs", served.base))
            .await
            .body,
    )
    .unwrap();
    assert_eq!(listed[0]["verdict"], "FAIL", "{listed:#}");
    let ended = support::get(&format!("{}/runs/e2e-hung-worker", served.base)).await;
    assert!(
        !ended.body.contains("http-equiv=\"refresh\""),
        "an ended run's page stays"
    );
    drop(served);
    let report = read_json(&run.run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let root = &report["analysis"]["root_cause"];
    assert_eq!(root["member_id"], WORKER, "{root:#}");
    let reason = root["reason"].as_str().unwrap();
    assert!(reason.starts_with("no heartbeat for "), "{root:#}");
    assert!(reason.contains("the worker is hung"), "{root:#}");
    assert!(!reason.contains("do not reach the store"), "{root:#}");
    assert_eq!(root["class"], "harness", "{root:#}");
    assert!(
        root["evidence"].as_str().unwrap().contains("hung"),
        "{root:#}"
    );
}

/// A server that hangs (SIGSTOP: its ports still accept connections, nothing answers) fails the
/// run; from the first FAILURE event to the driver's exit takes at most 5 s too, although the
/// driver's last scrape of the hung server's /metrics cannot get an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_fails_the_run_within_5_s_of_the_failure() {
    let _one_run = RUN_LOCK.lock().await;
    let mut run = start_long_run("e2e-hung-server").await;
    signal(run.server_pid, nix::sys::signal::Signal::SIGSTOP);
    let status = run.driver.wait(RUN_LIMIT, false).await;
    let exited_ms = stress_common::now_ms();
    assert_eq!(status.code(), Some(1), "{}", run.driver.output());
    let first = run
        .store
        .first_failure(&RunId::from(&run.run_id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no FAILURE event\n{}", run.driver.output()));
    let took = Duration::from_millis((exited_ms - first.at_ms).max(0) as u64);
    eprintln!(
        "{SERVER} hung; {} failed ({}); the driver exited 1 {took:?} later",
        first.member_id, first.details
    );
    assert!(
        took <= FAIL_FAST_BOUND,
        "the driver exited {took:?} after the first failure ({}: {}), bound {FAIL_FAST_BOUND:?}\n{}",
        first.member_id,
        first.details,
        run.driver.output()
    );
    let report = read_json(&run.run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    assert_eq!(
        report["failed_members"][0]["member_id"], first.member_id,
        "{report:#}"
    );
    // The worker notices first (no progress), but the blame goes to the server that does not
    // answer its liveness probe.
    assert_eq!(first.member_id, SERVER, "{report:#}");
    assert!(
        first.details.contains("/v2/health/live did not answer"),
        "{}",
        first.details
    );
}

/// The smoke matrix with its client driving `models` (and no `scenarios`: Infer only).
fn models_matrix(dir: &Path, models: &str) -> PathBuf {
    edit_matrix(smoke_matrix(dir), |m| {
        // smoke.yaml's SLO rules are about Load, which these clients do not run.
        m.run.slo.clear();
        for template in m.client_templates.values_mut() {
            template.scenarios = None;
            template.models = serde_saphyr::from_str(models).unwrap();
        }
    })
}

/// Rewrites the matrix at `path` through `edit`; returns the path.
fn edit_matrix(path: PathBuf, edit: impl FnOnce(&mut driver::matrix::Matrix)) -> PathBuf {
    let mut m = driver::matrix::load(&path).unwrap_or_else(|e| panic!("{e}"));
    m.source_path = None;
    edit(&mut m);
    std::fs::write(&path, serde_saphyr::to_string(&m).unwrap()).unwrap();
    path
}

/// Runs `matrix` for 15 s and waits for the driver's exit.
async fn run_matrix(tmp: &Path, matrix: &Path, run_id: &str) -> (Driver, ExitStatus, PathBuf) {
    run_matrix_for(tmp, matrix, run_id, "15s").await
}

/// Runs `matrix` for at most `duration` and waits for the driver's exit; returns the driver,
/// its status and the run's directory.
async fn run_matrix_for(
    tmp: &Path,
    matrix: &Path,
    run_id: &str,
    duration: &str,
) -> (Driver, ExitStatus, PathBuf) {
    let runs = tmp.join("runs");
    let mut driver = Driver::spawn(&run_args(matrix, &runs, run_id, duration), tmp, "driver");
    let status = driver.wait(RUN_LIMIT, true).await;
    (driver, status, runs.join(run_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_server_lacks_stops_the_run_with_exit_2_before_any_worker_starts() {
    let _one_run = RUN_LOCK.lock().await;
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
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    assert!(
        !events.iter().any(|e| e.member_id == WORKER),
        "no worker started: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.member_id == SERVER && e.kind == EventKind::Running),
        "the server was ready first: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matrix_with_models_runs_infer_against_them_and_passes() {
    let _one_run = RUN_LOCK.lock().await;
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

/// A foreign client group (docs/clients.md) beside the Rust worker's: the project's Python
/// client on tritonclient. Against add_sub its tests are counted like the worker's own, in its
/// group's rows, and the run passes; against add_sub_wrong the wrong answers it finds are
/// failure records of its member in its words, and the run fails on the server's bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_tritonclient_group_is_counted_like_the_worker_s_own_and_its_failures_fail_the_run()
 {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models");
    std::fs::create_dir_all(&repo).unwrap();
    for (dir, model) in [("models", "add_sub"), ("models-faulty", "add_sub_wrong")] {
        std::os::unix::fs::symlink(repo_root().join(dir).join(model), repo.join(model)).unwrap();
    }
    let foreign_matrix = |model: &str, beside_rust: bool| {
        let dir = tmp.path().join(model);
        std::fs::create_dir_all(&dir).unwrap();
        edit_matrix(smoke_matrix(&dir), |m| {
            m.run.slo.clear();
            for template in m.server_templates.values_mut() {
                template.model_repositories = vec![repo.display().to_string()];
            }
            let mut rust = m.client_templates["grpc-all"].clone();
            rust.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
            let mut python = rust.clone();
            python.scenarios = None;
            python.load = None;
            python.concurrency = 1;
            python.models = serde_saphyr::from_str(&format!("[{{name: {model}}}]")).unwrap();
            python.client = Some(
                serde_saphyr::from_str(&format!(
                    "{{command: [{}, {}], interface: 1}}",
                    repo_root().join(".local/venv/bin/python").display(),
                    repo_root()
                        .join("clients/python/tritonclient_stress.py")
                        .display()
                ))
                .unwrap(),
            );
            m.client_templates.insert("python".into(), python);
            let mut group = m.client_groups["grpc-clients"].clone();
            group.template = "python".into();
            m.client_groups.insert("python-clients".into(), group);
            if beside_rust {
                m.client_templates.insert("grpc-all".into(), rust);
            } else {
                m.client_groups.shift_remove("grpc-clients");
                m.client_templates.shift_remove("grpc-all");
            }
        })
    };

    let matrix = foreign_matrix("add_sub", true);
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-foreign", "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let load = |group: &str| -> Value {
        let rows = report["groups"][group]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let row = rows.into_iter().find(|r| r["scenario"] == "Load");
        row.unwrap_or_else(|| panic!("no Load row of {group}: {:#}", report["groups"]))
    };
    for group in ["grpc-clients", "python-clients"] {
        let row = load(group);
        assert!(row["requests"].as_u64().unwrap() > 0, "{group}: {row:#}");
        assert_eq!(row["failures"], 0, "{group}: {row:#}");
    }
    // The Python client's tests are its requests, one each.
    let python = load("python-clients");
    assert_eq!(python["tests"], python["requests"], "{python:#}");

    let matrix = foreign_matrix("add_sub_wrong", false);
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-foreign-wrong", "8s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL", "{report:#}");
    let failures = report["failures"].as_array().expect("failure records");
    let (member, record) = (&failures[0][0], &failures[0][1]);
    assert_eq!(member, "python-clients-0", "{failures:#?}");
    assert_eq!(record["error_kind"], "wrong_answer", "{record:#}");
    assert!(
        record["actual"]
            .as_str()
            .unwrap()
            .starts_with("OUTPUT1 = ["),
        "{record:#}"
    );
    let root = read(&run_dir.join("report.txt"));
    assert!(root.contains("SERVER BUG on triton-0"), "{root}");
    assert!(root.contains("seen by CLIENT python-clients-0"), "{root}");
}

/// A worker whose one client runs perf_analyzer over HTTP and nothing else, against a model
/// that answers after 4 ms: each run of 1,000 requests takes over 4 s and counts them when it
/// ends, so the worker samples QPS 0 between the ends. With the zero-QPS rule at 2 polls, that
/// is no stall (the worker says a test counting at its end is under way), and the run passes
/// with the requests counted. (It failed as "QPS 0 for 2 consecutive polls" before.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_inside_perf_analyzer_runs_is_not_a_zero_qps_stall() {
    let _one_run = RUN_LOCK.lock().await;
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

/// test-matrices/sweep.yaml's instance counts (each instance serves 20 requests/s), each with
/// server arguments that work and ones tritonserver refuses, two variants at a time
/// (`parallel: 2`; the model sleeps, so parallel servers on two cores do not confound its
/// capacity): capacities near 20, 40 and 80 ranked 4 > 2 > 1, measured in windows that
/// overlapped, the refused variants listed as failed with why (the sweep goes on), the best
/// config.pbtxt with count 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_ranks_instance_counts_by_capacity_and_names_the_best_config() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = fixed_capacity_sweep(
        tmp.path(),
        [
            (
                "models.fixed_capacity.instance_group[0].count",
                vec![json!(1), json!(2), json!(4)],
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
    assert!(!tied.contains(&variants[2]["index"]), "{sweep:#}");
    let good = json!("--log-verbose=0");
    assert_eq!(
        order[..3],
        [
            (json!(4), good.clone()),
            (json!(2), good.clone()),
            (json!(1), good.clone())
        ],
        "{brief:#?}"
    );
    // Each answered variant's capacity search, from its first window's start to its last's end.
    let mut searches: Vec<(i64, i64)> = Vec::new();
    for (v, expected) in variants.iter().zip([80.0, 40.0, 20.0]) {
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
    for refused in &variants[3..] {
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
    assert_eq!(sweep["grid_size"], 6);
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
        3,
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
    let _one_run = RUN_LOCK.lock().await;
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

/// Capacity mode against a server whose capacity the test knows: `fixed_capacity` executes 2
/// requests at once for 50 ms each (40/s at most; N in flight wait ceil(N/2) x 50 ms), and the
/// target is p99 <= 125 ms. The controller must find about 40/s at 2 to 4 in flight, have gone
/// past it (5 in flight: ~150 ms) and come back, and end the run on its own, with the two
/// workers following its targets live (each started once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_mode_finds_the_capacity_of_a_server_the_test_controls() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = tmp.path().join("capacity.yaml");
    let mut m = committed_matrix("capacity.yaml");
    serve_only(&mut m, tmp.path(), &["fixed_capacity"]);
    std::fs::write(&matrix, serde_saphyr::to_string(&m).unwrap()).unwrap();
    let run_id = "e2e-capacity";
    let started = Instant::now();
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, run_id, "170s").await;
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    let capacity = &report["capacity"];
    let mix = capacity["results"]
        .as_array()
        .expect("capacity results")
        .iter()
        .find(|r| r["model"] == "mix")
        .unwrap_or_else(|| panic!("no mix row: {capacity:#}"))
        .clone();
    assert_eq!(mix["group"], "grpc-clients");
    assert_eq!(mix["phase"], "production");
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
    let model_row = capacity["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == "fixed_capacity")
        .unwrap_or_else(|| panic!("no fixed_capacity row: {capacity:#}"));
    assert_eq!(
        model_row["max_qps"], mix["max_qps"],
        "the only model is the mix"
    );
    let checks = capacity["phases"][0]["checks"].as_array().unwrap();
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
    assert!(
        took < Duration::from_secs(165),
        "the controller ended the run itself (took {took:?})"
    );
    let text = read(&run_dir.join("report.txt"));
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
    // Autoscaler thresholds from the server's /metrics at each check: the tier saturated, so
    // the signals have thresholds (observed x 0.8), one is primary, and a KEDA snippet.
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
        capacity["phases"][0]["autoscaler"]["primary"], primary,
        "the phase's record keeps it too"
    );
    assert!(text.contains("PRIMARY (first to fire)"), "{text}");
    assert!(text.contains("KEDA ScaledObject:"), "{text}");
    // The workers changed concurrency live: each started once, and the store has their targets.
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

/// The spike phase on `fixed_capacity` (40 requests/s at most; test-matrices/capacity-spike.yaml):
/// after production converges, the group jumps to 120 requests/s open loop for 6 s with a 2 s
/// request deadline. The server gets
/// through about its capacity, the rest time out (counted as unanswered, not failures: the run
/// passes), p99 goes far over the target, and once the backlog drains the group is back within
/// it: recovered, with the time it took.
#[tokio::test]
async fn capacity_spike_overloads_the_server_and_measures_its_recovery() {
    let _one_run = RUN_LOCK.lock().await;
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
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-spike", "170s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    let capacity = &report["capacity"];
    let row = |phase: &str| {
        capacity["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["phase"] == phase && r["model"] == "mix")
            .unwrap_or_else(|| panic!("no {phase} row: {capacity:#}"))
            .clone()
    };
    let production = row("production");
    let spike_row = row("spike");
    assert_eq!(
        spike_row["concurrency"], production["concurrency"],
        "the spike jumps from production's answer: {capacity:#}"
    );
    assert_eq!(spike_row["target_rps"], 120.0);
    assert_eq!(spike_row["ending"], "recovered", "{capacity:#}");
    let phase = capacity["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "spike")
        .unwrap();
    let spike = &phase["spike"];
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
    let text = read(&run_dir.join("report.txt"));
    assert!(
        text.contains("spike grpc-clients: from concurrency"),
        "{text}"
    );
    assert!(text.contains("recovered within"), "{text}");
}

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
    let _one_run = RUN_LOCK.lock().await;
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
    let _one_run = RUN_LOCK.lock().await;
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

/// A model repository in `dir` with one model, `paced`: `fixed_capacity`'s python model on 4
/// instances, answering after `delay_ms`.
fn paced_repository(dir: &Path, delay_ms: u32) -> PathBuf {
    let repo = dir.join("paced-repo");
    let model = repo.join("paced");
    std::fs::create_dir_all(model.join("1")).unwrap();
    let source = repo_root().join("models/fixed_capacity");
    std::fs::copy(source.join("1/model.py"), model.join("1/model.py")).unwrap();
    let config = std::fs::read_to_string(source.join("config.pbtxt"))
        .unwrap()
        .replace("name: \"fixed_capacity\"", "name: \"paced\"")
        .replace(
            "string_value: \"50\"",
            &format!("string_value: \"{delay_ms}\""),
        )
        .replace("count: 2", "count: 4");
    assert!(config.contains("\"paced\"") && config.contains(&format!("\"{delay_ms}\"")));
    std::fs::write(model.join("config.pbtxt"), config).unwrap();
    repo
}

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
    let _one_run = RUN_LOCK.lock().await;
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let (fast_dir, slow_dir) = (tmp.path().join("fast"), tmp.path().join("slow"));
    for d in [&fast_dir, &slow_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (fast, slow) = (
        paced_repository(&fast_dir, 2),
        paced_repository(&slow_dir, 30),
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
    assert!(p50["low"].as_f64().unwrap() > 1.0, "2 ms -> 30 ms: {p50:#}");
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    // The same repository path for every run: only the server's speed changes.
    let (matrix, repo) = paced_matrix(tmp.path(), |m| {
        // `threshold`: min_effect's older name.
        m.regression = Some(
            serde_saphyr::from_str("{threshold: 0.25, fail: true, min_requests: 20}").unwrap(),
        );
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

    // 100 ms: at concurrency 4 the slow run answers at most 40/s, so its QPS is down by more
    // than half unless a loaded machine holds the fast run (CPU-bound, not delay-bound) below
    // 80/s. With 20 ms (200/s) a loaded CI machine once made it less than half.
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

/// A tritonserver the test starts itself on free loopback ports (the repository's models), for
/// matrices that name it by `endpoints`: the driver must use it and leave it running.
async fn start_external_server(dir: &Path) -> stress_common::tritonserver::TritonServer {
    use stress_common::tritonserver::{ServerSpec, TritonServer, find_binary};
    let root = repo_root();
    let binary = find_binary(Some(&root)).unwrap_or_else(|e| panic!("{e}"));
    let models = root.join("models").canonicalize().unwrap();
    let mut spec = ServerSpec::new(binary, vec![models], dir.join("external-triton.log"));
    spec.extra_args = vec!["--log-verbose=0".into()];
    let mut server = TritonServer::start(spec).await.unwrap();
    server
        .wait_ready(START_LIMIT)
        .await
        .unwrap_or_else(|e| panic!("the test's own tritonserver: {e}"));
    server
}

/// The models matrix (Infer on add_sub) with its server group `triton` replaced by `endpoints`.
fn external_matrix(dir: &Path, endpoint: driver::matrix::Endpoint) -> PathBuf {
    edit_matrix(models_matrix(dir, "[{name: add_sub}]"), |m| {
        m.server_groups["triton"] = driver::matrix::ServerGroup {
            template: None,
            instances: None,
            endpoints: vec![endpoint],
        };
    })
}

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
    let _one_run = RUN_LOCK.lock().await;
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
    let _one_run = RUN_LOCK.lock().await;
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
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    assert!(
        !events.iter().any(|e| e.member_id == WORKER),
        "no worker started: {events:?}"
    );
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

/// Waits until the worker runs and reported QPS above 0: load flows, the driver polls.
async fn wait_for_load(driver: &mut Driver, run_dir: &Path, run_id: &str) {
    let store_file = run_dir.join("store.sqlite");
    let deadline = Instant::now() + START_LIMIT;
    loop {
        assert!(
            driver.try_exit().is_none(),
            "the driver ended before the worker ran\n{}",
            driver.output()
        );
        assert!(Instant::now() < deadline, "{}", driver.output());
        if store_file.is_file()
            && let Ok(store) = Store::connect(&Store::sqlite_url(&store_file)).await
            && store
                .latest_qps(&RunId::from(run_id))
                .await
                .is_ok_and(|q| q.iter().any(|s| s.member_id == WORKER && s.qps > 0.0))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    let _one_run = RUN_LOCK.lock().await;
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
    let run_id = "e2e-external-watched";
    let runs = tmp.path().join("runs");
    let run_dir = runs.join(run_id);
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, run_id, "120s"),
        tmp.path(),
        "driver",
    );
    wait_for_load(&mut driver, &run_dir, run_id).await;
    let stopped_at = Instant::now();
    spare_task.abort();
    let status = driver.wait(RUN_LIMIT, false).await;
    let took = stopped_at.elapsed();
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start_external_server(tmp.path()).await;
    let matrix = external_matrix(tmp.path(), grpc_and_metrics(&server));
    let run_id = "e2e-external-killed";
    let runs = tmp.path().join("runs");
    let run_dir = runs.join(run_id);
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, run_id, "120s"),
        tmp.path(),
        "driver",
    );
    wait_for_load(&mut driver, &run_dir, run_id).await;
    let killed_at = Instant::now();
    server.kill().await;
    let status = driver.wait(RUN_LIMIT, false).await;
    let took = killed_at.elapsed();
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

/// Capacity phases switch the same workers among models live: `individual` measures each model
/// alone (`fixed_capacity`: 2 slots, 40/s; `fixed_capacity_wide`: 4 slots, 80/s, both 50 ms a
/// request; target p99 125 ms), then `exploration` runs a listed mix. Each phase starts again from min_concurrency
/// and has its own record and result row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_phases_measure_each_model_alone_then_a_mix() {
    let _one_run = RUN_LOCK.lock().await;
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
    let results = capacity["results"].as_array().expect("capacity results");
    let row = |phase: &str, model: &str| {
        results
            .iter()
            .find(|r| r["phase"] == phase && r["model"] == model)
            .unwrap_or_else(|| panic!("no {phase}/{model} row: {capacity:#}"))
            .clone()
    };
    let narrow = row("individual", "fixed_capacity");
    let wide = row("individual", "fixed_capacity_wide");
    for r in [&narrow, &wide] {
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
        "the wider model takes more in flight: {narrow:#} / {wide:#}"
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

/// A client the workers do not know sends to the server during the run: the servers/workers
/// reconciliation calls the gap a mismatch, of exactly that many requests (the check fails
/// when the server saw traffic nobody counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_no_worker_sent_are_a_reconciliation_mismatch() {
    const INTRUDER: u64 = 150;
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        for template in m.client_templates.values_mut() {
            template.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
        }
    });
    let run_id = "e2e-reconcile-intruder";
    let runs = tmp.path().join("runs");
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, run_id, "12s"),
        tmp.path(),
        "driver",
    );
    let run_dir = runs.join(run_id);
    wait_for_load(&mut driver, &run_dir, run_id).await;
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

/// A traced server's trace files (written by the real tritonserver in this run) are summarised
/// into the report per model and protocol; `driver trace-summary` reads the same files. The
/// run's summary reaches the matrix's `report.webhook` (a local receiver).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_server_gets_a_trace_summary_in_the_report() {
    let _one_run = RUN_LOCK.lock().await;
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

/// No orphans: a driver killed with SIGKILL (no chance to stop anything) takes its local
/// tritonserver and worker with it (their parent-death signal), and a driver that gets a second
/// SIGTERM while stopping exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_driver_leaves_no_server_or_worker_behind() {
    let _one_run = RUN_LOCK.lock().await;
    let mut run = start_long_run("e2e-driver-killed").await;
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid);
    signal(run.driver.child.id(), nix::sys::signal::Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(15);
    while (alive(run.server_pid) || alive(run.worker_pid)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive(run.server_pid),
        "tritonserver {} outlived its driver",
        run.server_pid
    );
    assert!(
        !alive(run.worker_pid),
        "worker {} outlived its driver",
        run.worker_pid
    );
    run.driver.try_exit();

    // Its run held a lease the driver no longer renews. Once the lease has run out (moved into
    // the past here instead of waiting its 2 minutes), `driver cleanup` ends the run as
    // ABANDONED, once, and the report says so.
    let row = run
        .store
        .run(&RunId::from(&run.run_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.verdict, None);
    let until = row
        .lease_until_ms
        .expect("the driver holds a lease on its run");
    assert!(until > stress_common::now_ms(), "{row:?}");
    run.store
        .renew_lease(&RunId::from(&run.run_id), stress_common::now_ms() - 1)
        .await
        .unwrap();
    let runs_dir = run.run_dir.parent().unwrap().to_str().unwrap().to_string();
    let cleanup = driver_cli(&["cleanup", "--runs-dir", &runs_dir]);
    let said = String::from_utf8_lossy(&cleanup.stdout);
    assert!(cleanup.status.success(), "{cleanup:?}");
    assert!(
        said.contains(&format!("run {}: ABANDONED", run.run_id)),
        "{said}"
    );
    let again = driver_cli(&["cleanup", "--runs-dir", &runs_dir]);
    assert!(!String::from_utf8_lossy(&again.stdout).contains("ABANDONED"));
    // Naming the local run needs no Kubernetes (a kubeconfig that does not exist would fail).
    let by_id = Command::new(env!("CARGO_BIN_EXE_driver"))
        .args(["cleanup", "--run", &run.run_id, "--runs-dir", &runs_dir])
        .env_remove("DATABASE_URL")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&by_id.stdout);
    assert!(by_id.status.success(), "{by_id:?}");
    assert!(
        said.contains(&format!("run {}: local launcher", run.run_id))
            && said.contains("no Kubernetes objects to delete"),
        "{said}"
    );
    let report = driver_cli(&["report", "--run", &run.run_id, "--runs-dir", &runs_dir]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains(&format!("Run {} (local launcher): ABANDONED", run.run_id)),
        "{text}"
    );
    assert!(text.contains("the driver's lease ran out"), "{text}");
    assert!(
        text.contains("class harness: the run's driver died"),
        "{text}"
    );

    // Twice SIGTERM: the first stops the run cleanly, the second ends the driver at once. A
    // stopped (SIGSTOP) worker holds the driver's stop for its grace, so the second signal
    // comes while the driver is stopping however fast the rest stops (it once finished in
    // 0.27 s, before the second signal came).
    let run = start_long_run("e2e-driver-second-signal").await;
    let driver_pid = run.driver.child.id();
    signal(run.worker_pid, nix::sys::signal::Signal::SIGSTOP);
    signal(driver_pid, nix::sys::signal::Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    signal(driver_pid, nix::sys::signal::Signal::SIGTERM);
    let mut driver = run.driver;
    let status = driver.wait(Duration::from_secs(10), false).await;
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "the driver took {:?} after the second SIGTERM",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    // The worker's SIGTERM (the driver's, or its parent-death signal) waits for SIGCONT.
    signal(run.worker_pid, nix::sys::signal::Signal::SIGCONT);
    assert!(
        driver.output().contains("a second signal: exiting now"),
        "{}",
        driver.output()
    );
    // The first signal's stop is dated and says the run failed: its workers were told to drop
    // their tests in flight, not to drain them.
    assert_eq!(
        run.store.stopping(&RunId::from(&run.run_id)).await.unwrap(),
        Some(Stopping::Failed {
            member: "driver".into()
        })
    );
}

/// Whether a process is a zombie (exited, not yet reaped by its parent).
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// A failed sequence carries its forensics: each step on the wire (times, server, correlation
/// id, flags, input digest, what came back), the previous use of its correlation id and the
/// server's log lines around it, in report.json and report.txt. The faulty twin sequence_faulty answers running sum + 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sequence_carries_its_steps_on_the_wire() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let faulty = repo_root().join("models-faulty").display().to_string();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
            // Verbose: the server logs every request, so the failure has lines around it.
            template.args = vec!["--log-verbose=1".into()];
        }
        for template in m.client_templates.values_mut() {
            template.scenarios = Some([("SequenceValid".to_string(), 1)].into_iter().collect());
            template.extra_args = vec!["--sequence-models".into(), "sequence_faulty".into()];
        }
    });
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

/// A model that leaks memory (the faulty twin identity_leaky: right answers, 1 MiB kept per
/// request) makes the server's memory grow over the run: a finding in the report, with the
/// server's RSS series showing the growth.
/// Memory is judged on the load's steady state: a model that takes 200 MiB once, on its first
/// request, is no finding (its healthy twin), one that keeps growing is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaking_model_is_a_memory_growth_finding_and_a_warming_one_is_not() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let faulty = repo_root().join("models-faulty").display().to_string();
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

    let matrix = edit_matrix(models_matrix(tmp.path(), "[{name: identity_leaky}]"), |m| {
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
        }
    });
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let faulty = repo_root().join("models-faulty").display().to_string();
    let matrix = edit_matrix(models_matrix(tmp.path(), "[{name: identity_crash}]"), |m| {
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
        }
    });
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let faulty = repo_root().join("models-faulty").display().to_string();

    let healthy = models_matrix(
        tmp.path(),
        "[{name: identity_delay, shape: {INPUT0: [16]}}]",
    );
    let (driver, status, _) = run_matrix(tmp.path(), &healthy, "e2e-slow-answers").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());

    let matrix = edit_matrix(models_matrix(tmp.path(), "[{name: identity_hangs}]"), |m| {
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
        }
    });
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
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let faulty = repo_root().join("models-faulty").display().to_string();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
        }
        for template in m.client_templates.values_mut() {
            template.scenarios = Some(serde_saphyr::from_str("{SequenceValid: 1}").unwrap());
            template.load = None;
            template.extra_args = vec!["--sequence-models".into(), "sequence_forgets_start".into()];
        }
    });

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

// ---- Chaos: the store ----------------------------------------------------------------------

/// What a chaos test does to the store mid-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreFault {
    /// Every Postgres process SIGSTOPped, then SIGCONTed: a hung store (connections stay
    /// open, nothing answers).
    Paused,
    /// Every Postgres process SIGKILLed, then the server started again on its port.
    KilledAndRestarted,
}

/// How long the store is out: longer than the heartbeat limit (10 polls here), well under the
/// store outage limit (60 s).
const STORE_OUTAGE: Duration = Duration::from_secs(15);

/// The run's processes still alive (workers and servers carry the run id in their arguments).
fn run_processes(run_id: &str) -> Vec<String> {
    processes()
        .into_iter()
        .filter(|p| !zombie(p.pid) && p.args.iter().any(|a| a.contains(run_id)))
        .map(|p| format!("{} {}", p.pid, p.args.join(" ")))
        .collect()
}

/// A 60 s smoke run on Postgres whose store goes out for 15 s while load flows: the load goes
/// on (the worker's queued QPS samples from inside the outage arrive afterwards, with load),
/// the run passes, the servers' successes reconcile with the workers' answers (no record was
/// lost), and nothing of the run is left running.
async fn a_store_outage_mid_run(fault: StoreFault) {
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let TestPostgres::Throwaway(mut pg) = pg else {
        use std::io::Write;
        writeln!(
            std::io::stderr(),
            "SKIPPED: the store chaos test needs a Postgres of its own (TEST_DATABASE_URL is shared)"
        )
        .ok();
        return;
    };
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = smoke_matrix(tmp.path());
    let runs = tmp.path().join("runs");
    let run_id = format!("e2e-chaos-store-{fault:?}-{}", std::process::id());
    let url = pg.url().to_string();
    let mut args = run_args(&matrix, &runs, &run_id, "60s");
    args.extend(["--database-url", &url]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver");

    let deadline = Instant::now() + START_LIMIT;
    loop {
        assert!(driver.try_exit().is_none(), "{}", driver.output());
        assert!(Instant::now() < deadline, "{}", driver.output());
        driver.observe();
        if let Ok(store) = Store::connect(&url).await
            && store
                .latest_qps(&RunId::from(&run_id))
                .await
                .is_ok_and(|q| q.iter().any(|s| s.member_id == WORKER && s.qps > 0.0))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let outage_from = stress_common::now_ms();
    match fault {
        StoreFault::Paused => pg.pause(),
        StoreFault::KilledAndRestarted => pg.kill(),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let outage_ends = Instant::now() + STORE_OUTAGE;
    while Instant::now() < outage_ends {
        assert!(
            driver.try_exit().is_none(),
            "the driver ended during the store outage\n{}",
            driver.output()
        );
        driver.observe();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let outage_to = stress_common::now_ms();
    match fault {
        StoreFault::Paused => pg.resume(),
        StoreFault::KilledAndRestarted => pg.restart(),
    }
    .unwrap_or_else(|e| panic!("{e}"));

    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let run_dir = runs.join(&run_id);
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "PASS", "{report:#}");
    assert!(report.get("incomplete").is_none(), "{report:#}");
    assert_reconciled(&report);

    let store = Store::connect(&url).await.unwrap();
    let during: Vec<_> = store
        .qps_samples(&RunId::from(&run_id))
        .await
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.member_id == WORKER && s.at_ms > outage_from + 2000 && s.at_ms < outage_to - 2000
        })
        .collect();
    // The worker kept sending: its samples from inside the outage arrived after it, and its
    // request count grew through it. Not every second completes a request: a second in which
    // every stream is inside a long test (a perf_analyzer run counts its requests at its end)
    // samples 0 (seen once in CI), so three in four seconds with answers suffice.
    let answered = during.iter().filter(|s| s.qps > 0.0).count();
    let grew = during.last().map(|s| s.total_requests) > during.first().map(|s| s.total_requests);
    assert!(
        during.len() >= 5 && answered * 4 >= during.len() * 3 && grew,
        "the worker's samples from inside the outage, delivered after it: {during:?}\n{}",
        driver.output()
    );
    let intervals = store
        .latency_intervals(&RunId::from(&run_id), outage_from, outage_to)
        .await
        .unwrap();
    assert!(
        intervals.iter().any(|(_, i)| i.requests > 0),
        "the latency series covers the outage: {intervals:?}"
    );
    assert_eq!(run_processes(&run_id), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_store_neither_stops_the_load_nor_loses_a_record() {
    a_store_outage_mid_run(StoreFault::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_killed_and_restarted_mid_run_loses_no_record() {
    a_store_outage_mid_run(StoreFault::KilledAndRestarted).await;
}

/// The store dies 10 s into a 30 s run and stays down: the load goes on to the end, the
/// workers log what they could not deliver, and the driver, after retrying the store for its
/// 60 s, still writes a report: the verdict and why, marked incomplete, naming what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_at_the_end_still_gets_an_incomplete_report() {
    let Some(pg) = TestPostgres::from_env().unwrap_or_else(|e| panic!("{e}")) else {
        return;
    };
    let TestPostgres::Throwaway(mut pg) = pg else {
        use std::io::Write;
        writeln!(
            std::io::stderr(),
            "SKIPPED: the store chaos test needs a Postgres of its own (TEST_DATABASE_URL is shared)"
        )
        .ok();
        return;
    };
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = smoke_matrix(tmp.path());
    let runs = tmp.path().join("runs");
    let run_id = format!("e2e-chaos-store-gone-{}", std::process::id());
    let url = pg.url().to_string();
    let mut args = run_args(&matrix, &runs, &run_id, "30s");
    args.extend(["--database-url", &url]);
    let mut driver = Driver::spawn(&args, tmp.path(), "driver");
    let deadline = Instant::now() + START_LIMIT;
    loop {
        assert!(driver.try_exit().is_none(), "{}", driver.output());
        assert!(Instant::now() < deadline, "{}", driver.output());
        driver.observe();
        if let Ok(store) = Store::connect(&url).await
            && store
                .latest_qps(&RunId::from(&run_id))
                .await
                .is_ok_and(|q| q.iter().any(|s| s.member_id == WORKER && s.qps > 0.0))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pg.kill().unwrap_or_else(|e| panic!("{e}"));
    let status = driver.wait(RUN_LIMIT, true).await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let run_dir = runs.join(&run_id);
    let text = read(&run_dir.join("report.txt"));
    assert!(text.contains("== INCOMPLETE REPORT =="), "{text}");
    assert!(
        text.contains("The verdict is the driver's own (PASS)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("driver report --run {run_id}")),
        "{text}"
    );
    let report = read_json(&run_dir.join("report.json"));
    assert!(
        report["incomplete"]
            .as_str()
            .is_some_and(|why| why.contains("finishing the run in the status store")),
        "{report:#}"
    );
    let worker_log = read(&run_dir.join("logs").join(format!("{WORKER}.log")));
    assert!(
        worker_log.contains("undelivered: {\"record\":\"event\",\"kind\":\"SUCCESS\""),
        "the worker logs its final event, which it could not deliver:\n{worker_log}"
    );
    assert_eq!(run_processes(&run_id), Vec::<String>::new());
}

/// A TCP relay to `upstream` that can turn into a network black hole: from then on every byte
/// either way, and every new connection's, vanishes (nothing is refused or reset), as when a
/// route or a firewall drops a worker's packets to its server.
struct BlackHoleRelay {
    address: String,
    holed: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHoleRelay {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let holed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = holed.clone();
        // Copies `from` to `to` until the hole opens; then reads and drops everything.
        async fn pipe(
            mut from: tokio::net::tcp::OwnedReadHalf,
            mut to: tokio::net::tcp::OwnedWriteHalf,
            holed: Arc<std::sync::atomic::AtomicBool>,
        ) {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !holed.load(Ordering::Relaxed) && to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, flag.clone()));
                tokio::spawn(pipe(server_read, client_write, flag.clone()));
            }
        });
        Self {
            address,
            holed,
            task,
        }
    }

    fn open_the_hole(&self) {
        self.holed.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for BlackHoleRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A network black hole between the worker and its server (the server itself stays live): the
/// worker's requests get no answer, each fails at its deadline (2 s here), and the run fails
/// naming the worker, not the server, whose liveness probe (on its own address) still
/// answers. Exit 1 within a few seconds of the deadline; the report's root cause is the
/// worker's timeout; every request the server answered before the hole is one the worker
/// counted (reconciled or explained, never a mismatch); nothing is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_black_hole_between_worker_and_server_fails_the_run_naming_the_worker() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let server = start_external_server(tmp.path()).await;
    let relay = BlackHoleRelay::start(server.grpc_address()).await;
    let matrix = edit_matrix(
        external_matrix(
            tmp.path(),
            driver::matrix::Endpoint::Ports(driver::matrix::EndpointPorts {
                grpc: Some(relay.address.clone()),
                http: Some(server.http_address()),
                metrics: Some(server.metrics_address()),
            }),
        ),
        |m| {
            for t in m.client_templates.values_mut() {
                t.extra_args = vec!["--request-timeout".into(), "2s".into()];
            }
        },
    );
    let run_id = "e2e-black-hole";
    let runs = tmp.path().join("runs");
    let run_dir = runs.join(run_id);
    let mut driver = Driver::spawn(
        &run_args(&matrix, &runs, run_id, "120s"),
        tmp.path(),
        "driver",
    );
    wait_for_load(&mut driver, &run_dir, run_id).await;
    let holed_at = Instant::now();
    relay.open_the_hole();
    let status = driver.wait(RUN_LIMIT, false).await;
    let took = holed_at.elapsed();
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    // The request deadline (2 s), then fail-fast.
    assert!(
        took <= Duration::from_secs(2) + FAIL_FAST_BOUND,
        "the driver exited {took:?} after the black hole opened\n{}",
        driver.output()
    );
    eprintln!("black hole: the driver exited 1 after {took:?}");
    assert!(
        driver
            .stdout()
            .lines()
            .any(|l| l.starts_with(&format!("FAILED: {WORKER}: "))),
        "the verdict does not name {WORKER}\n{}",
        driver.output()
    );
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL");
    let root = &report["analysis"]["root_cause"];
    eprintln!("black hole: root cause {root}");
    assert_eq!(root["member_id"], WORKER, "{root:#}");
    let reason = root["reason"].as_str().unwrap().to_lowercase();
    assert!(
        reason.contains("deadline") || reason.contains("timed out") || reason.contains("timeout"),
        "the root cause is the worker's timeout: {root:#}"
    );
    assert!(
        !report["failed_members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["member_id"] == SERVER),
        "the live server is not blamed: {report:#}"
    );
    for r in report["reconciliation"].as_array().unwrap() {
        assert_ne!(r["verdict"], "mismatch", "{r:#}");
    }
    driver.observe();
    assert!(
        driver.servers.is_empty(),
        "the driver launched a tritonserver"
    );
    let left: Vec<Proc> = processes()
        .into_iter()
        .filter(|p| p.args.iter().any(|a| a == run_id))
        .collect();
    assert!(left.is_empty(), "left running after the driver: {left:?}");
    drop(relay);
}

/// Faults injected on purpose into the real tritonserver (issue 30): a pause of its process,
/// then a SIGKILL after which the launcher starts it again on the same address. The run
/// passes: the clients ride through, each fault's recovery is measured from the workers'
/// outages and is within what the matrix allows, the failures it caused are `injected` (none
/// fails the run) and no wrong answer is counted. The same run allowing the kill's recovery
/// 1 ms fails, naming the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_are_recovered_from_and_a_slow_recovery_fails_the_run() {
    let _one_run = RUN_LOCK.lock().await;
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
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-faults", "40s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
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
    let _one_run = RUN_LOCK.lock().await;
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
    // CI 2026-12-04; docs/limitations.md), which the driver rightly blames on the server: that
    // run says nothing of the wrong answers, so it is run once more.
    let mut attempt = 0;
    let (driver, status, run_dir, report) = loop {
        attempt += 1;
        let id = format!("e2e-wrong-after-kill-{attempt}");
        let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, &id, "50s").await;
        let report = read_json(&run_dir.join("report.json"));
        let root = &report["analysis"]["root_cause"];
        let crashed = root["role"] == "SERVER"
            && root["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("killed by signal"));
        if !crashed || attempt == 2 {
            break (driver, status, run_dir, report);
        }
        eprintln!("the restarted server crashed on its own ({root}): running once more");
    };
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
    let _one_run = RUN_LOCK.lock().await;
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
