//! What the e2e tests share: the lock that runs them one at a time, the limits they wait by,
//! the matrices they start from (committed, smoke, models, paced, external), the `driver`
//! process and running a matrix to its end, and the report checks of more than one capability.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use stress_common::contract::RunId;
use stress_common::scenario::Scenario;
use stress_common::store::Store;

/// Helpers shared with the driver's other integration tests (tests/support/mod.rs).
#[path = "../support/mod.rs"]
mod shared;
pub(crate) use shared::{Serve, assert_junit, ensure_worker, get, pid_in, repo_root};

/// Who runs beside whom: a test whose assertions hold times, rates or latencies runs alone
/// ([`alone`]); one that checks only what happened (verdicts, records, reports) may run beside
/// another such test ([`beside_another`]; `--test-threads 2` makes that two at most), since on
/// 2 cores its runs are slowed, not changed. A waiting `alone` goes first (tokio's lock is fair).
static RUNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// For a test that measures: no other run on the machine while it runs.
pub(crate) async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    RUNS.write().await
}

/// For a test that only checks outcomes: another such test may run beside it.
pub(crate) async fn beside_another() -> tokio::sync::RwLockReadGuard<'static, ()> {
    RUNS.read().await
}

/// How long a run may take from start to a verdict, server start-up included (a 15 s run takes
/// about 30 s on an idle machine).
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(600);
/// How long a worker may take to report RUNNING after the driver starts.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(300);
/// The bound: a failed member stops the run within 5 s.
pub(crate) const FAIL_FAST_BOUND: Duration = Duration::from_secs(5);

pub(crate) const SERVER: &str = "triton-0";
pub(crate) const WORKER: &str = "grpc-clients-0";

/// A committed matrix (test-matrices/NAME), loaded and changed for a loaded test machine:
///
/// * model repositories by absolute path (the copy is not next to `models/`);
/// * a generous server-ready timeout, and heartbeat and zero-QPS limits of 10 polls instead of 3,
///   so a worker starved of CPU for a few seconds on 2 loaded cores does not fail a run that
///   tests something else (a member that ends, the rule the fail-fast tests exercise, fails the
///   run at the next poll whatever these limits are).
pub(crate) fn committed_matrix(name: &str) -> driver::matrix::Matrix {
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

/// The smoke matrix as [`committed_matrix`] gives it, with explicit, equal weights so that every
/// scenario gets tests within a 15 s run (10 each, and 20 for SequenceNoStart, which the worker
/// skips while its stream has a sequence left open), written into `dir` as YAML.
pub(crate) fn smoke_matrix(dir: &Path) -> PathBuf {
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
    write_matrix(&path, m);
    path
}

/// Writes `m` to `path` as YAML, its servers loading only the models its clients use where
/// that is known ([`load_only_used_models`]).
fn write_matrix(path: &Path, mut m: driver::matrix::Matrix) {
    load_only_used_models(&mut m);
    std::fs::write(path, serde_saphyr::to_string(&m).unwrap()).unwrap();
}

/// The models a worker scenario sends to: its defaults (worker/src/config.rs); None for one
/// not listed here.
fn scenario_models(scenario: &str) -> Option<&'static [&'static str]> {
    Some(match scenario {
        "Load" | "PerfAnalyzer" => &["add_sub"],
        "Timeout" | "CrashingClient" => &["identity_delay"],
        "ImageClassification" => &["image_classifier"],
        s if s.starts_with("Sequence") => &["sequence_nobatch", "sequence_batch"],
        _ => return None,
    })
}

/// The models `m`'s clients send to; None where a client's are not known (a scenario not in
/// [`scenario_models`], or worker arguments that may name others).
fn used_models(m: &driver::matrix::Matrix) -> Option<BTreeSet<String>> {
    let mut used = BTreeSet::new();
    for t in m.client_templates.values() {
        if !t.extra_args.is_empty() {
            return None;
        }
        used.extend(t.models.iter().map(|model| model.name.clone()));
        if t.client.is_some() || (t.scenarios.is_none() && !t.models.is_empty()) {
            continue;
        }
        for (scenario, _) in t.scenario_weights() {
            if scenario.name() != "Infer" {
                used.extend(
                    scenario_models(scenario.name())?
                        .iter()
                        .map(|s| s.to_string()),
                );
            }
        }
    }
    Some(used)
}

/// Has each server load only the models its run's clients use (explicit model control) where
/// they are all in its repositories: a tritonserver with every model of models/ is ready in
/// ~6.5 s here, with the smoke scenarios' five in ~3 s (2026-12-05), and every e2e run starts
/// one or more. Idempotent: the arguments it added before are replaced — and so would be a
/// test's own `--model-control-mode=explicit` and `--load-model=` (none sets them: a test that
/// needs its own model list sets another model control mode, which this leaves alone).
fn load_only_used_models(m: &mut driver::matrix::Matrix) {
    let used = used_models(m);
    for t in m.server_templates.values_mut() {
        t.args
            .retain(|a| a != "--model-control-mode=explicit" && !a.starts_with("--load-model="));
        let Some(used) = used.as_ref().filter(|u| !u.is_empty()) else {
            continue;
        };
        let found = |model: &String| {
            t.model_repositories
                .iter()
                .any(|r| Path::new(r).join(model).join("config.pbtxt").is_file())
        };
        if t.args.iter().any(|a| a.starts_with("--model-control-mode")) || !used.iter().all(found) {
            continue;
        }
        t.args.push("--model-control-mode=explicit".into());
        t.args
            .extend(used.iter().map(|model| format!("--load-model={model}")));
    }
}

/// A `driver` process. Its stdout and stderr go to files (a pipe nobody reads could block it).
/// Dropped while it runs (a failed assertion), it gets SIGTERM, which stops its members, then
/// SIGKILL. Then what our tritonservers left behind goes (see [`Driver::clean_up_servers`]).
pub(crate) struct Driver {
    pub(crate) child: Child,
    what: String,
    stdout: PathBuf,
    stderr: PathBuf,
    status: Option<ExitStatus>,
    /// The run's tritonservers seen so far (children of the driver), each with the shared
    /// memory regions of its python backend stubs.
    pub(crate) servers: BTreeMap<u32, BTreeSet<String>>,
}

/// A process as /proc shows it.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    ppid: u32,
    pub(crate) args: Vec<String>,
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

pub(crate) fn processes() -> Vec<Proc> {
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
    pub(crate) fn spawn(args: &[&str], dir: &Path, name: &str) -> Driver {
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

    pub(crate) fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("waiting on the driver");
        }
        self.status
    }

    /// Notes the driver's tritonserver children and their stubs' shared memory regions.
    pub(crate) fn observe(&mut self) {
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
    pub(crate) async fn wait(&mut self, limit: Duration, observe: bool) -> ExitStatus {
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

    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Both streams, for assertion messages.
    pub(crate) fn output(&self) -> String {
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

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The run's events, none of them the worker's: it was never started.
pub(crate) async fn events_with_no_worker(
    run_dir: &Path,
    run_id: &str,
) -> Vec<stress_common::store::EventRow> {
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let events = store.events(&RunId::from(run_id), 0).await.unwrap();
    assert!(
        !events.iter().any(|e| e.member_id == WORKER),
        "no worker started: {events:?}"
    );
    events
}

pub(crate) fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `driver ARGS` to its end, without the environment's store settings.
pub(crate) fn driver_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_driver"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TRITON_STRESS_RUNS_DIR")
        .output()
        .unwrap()
}

/// Every server-side success is explained: each model's successes on the server equal the
/// workers' OK answers, or the gap is within the requests whose outcome they could not see.
/// The Load model's match exactly, but for the perf_analyzer runs (of the same model) killed at
/// the workers' stop: at most their fixed request count each, and nothing else unseen.
pub(crate) fn assert_reconciled(report: &Value) {
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

/// The per-model table splits each scenario's row exactly: per scenario, its models' requests
/// add up to the scenario's, and its models' tests to the scenario's (every scenario names the
/// model of each test). Returns the model rows.
pub(crate) fn assert_models_add_up(report: &Value) -> Vec<Value> {
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
pub(crate) fn run_args<'a>(
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

/// The smoke matrix with its client driving `models` (and no `scenarios`: Infer only).
pub(crate) fn models_matrix(dir: &Path, models: &str) -> PathBuf {
    edit_matrix(smoke_matrix(dir), |m| {
        // smoke.yaml's SLO rules are about Load, which these clients do not run.
        m.run.slo.clear();
        for template in m.client_templates.values_mut() {
            template.scenarios = None;
            template.models = serde_saphyr::from_str(models).unwrap();
        }
    })
}

/// The matrix at `path` with models-faulty/ (the faulty twins) in its servers' repositories.
pub(crate) fn with_faulty_models(path: PathBuf) -> PathBuf {
    let faulty = repo_root().join("models-faulty").display().to_string();
    edit_matrix(path, |m| {
        for template in m.server_templates.values_mut() {
            template.model_repositories.push(faulty.clone());
        }
    })
}

/// The smoke matrix running only SequenceValid, against the faulty twin `model`
/// (models-faulty/), with no SLO rules; `server_args` replace the servers' arguments.
pub(crate) fn faulty_sequence_matrix(dir: &Path, model: &str, server_args: &[&str]) -> PathBuf {
    with_faulty_models(edit_matrix(smoke_matrix(dir), |m| {
        m.run.slo.clear();
        for template in m.server_templates.values_mut() {
            template.args = server_args.iter().map(|a| a.to_string()).collect();
        }
        for template in m.client_templates.values_mut() {
            template.scenarios = Some([("SequenceValid".to_string(), 1)].into_iter().collect());
            template.load = None;
            template.extra_args = vec!["--sequence-models".into(), model.into()];
        }
    }))
}

/// Rewrites the matrix at `path` through `edit`; returns the path.
pub(crate) fn edit_matrix(
    path: PathBuf,
    edit: impl FnOnce(&mut driver::matrix::Matrix),
) -> PathBuf {
    let mut m = driver::matrix::load(&path).unwrap_or_else(|e| panic!("{e}"));
    m.source_path = None;
    edit(&mut m);
    write_matrix(&path, m);
    path
}

/// Runs `matrix` for 15 s and waits for the driver's exit.
pub(crate) async fn run_matrix(
    tmp: &Path,
    matrix: &Path,
    run_id: &str,
) -> (Driver, ExitStatus, PathBuf) {
    run_matrix_for(tmp, matrix, run_id, "15s").await
}

/// [`run_matrix_for`] with its report, run once more when tritonserver crashed on its own
/// (SIGSEGV or SIGABRT, which no test sends: 2.51's crashes under tracing and after a restart,
/// docs/limitations.md). The driver rightly blames the server then, but such a run says
/// nothing of what the test checks. Runs are named `RUN_ID-1`, `RUN_ID-2`.
pub(crate) async fn run_unless_the_server_crashed(
    tmp: &Path,
    matrix: &Path,
    run_id: &str,
    duration: &str,
) -> (Driver, ExitStatus, PathBuf, Value) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let id = format!("{run_id}-{attempt}");
        let (driver, status, run_dir) = run_matrix_for(tmp, matrix, &id, duration).await;
        let report = read_json(&run_dir.join("report.json"));
        let root = &report["analysis"]["root_cause"];
        let crashed = root["role"] == "SERVER"
            && root["reason"].as_str().is_some_and(|r| {
                r.starts_with("killed by signal 11") || r.starts_with("killed by signal 6")
            });
        if !crashed || attempt == 2 {
            return (driver, status, run_dir, report);
        }
        eprintln!("the server crashed on its own ({root}): running once more");
    }
}

/// Runs `matrix` for at most `duration` and waits for the driver's exit; returns the driver,
/// its status and the run's directory.
pub(crate) async fn run_matrix_for(
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

/// A model repository in `dir` with one model, `paced`: `fixed_capacity`'s python model on 4
/// instances, answering after `delay_ms`.
pub(crate) fn paced_repository(dir: &Path, delay_ms: u32) -> PathBuf {
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

/// A tritonserver the test starts itself on free loopback ports (the repository's models), for
/// matrices that name it by `endpoints`: the driver must use it and leave it running.
pub(crate) async fn start_external_server(dir: &Path) -> stress_common::tritonserver::TritonServer {
    use stress_common::tritonserver::{ServerSpec, TritonServer, find_binary};
    let root = repo_root();
    let binary = find_binary(Some(&root)).unwrap_or_else(|e| panic!("{e}"));
    let models = root.join("models").canonicalize().unwrap();
    let mut spec = ServerSpec::new(binary, vec![models], dir.join("external-triton.log"));
    spec.extra_args = vec!["--log-verbose=0".into()];
    TritonServer::start_ready(spec, START_LIMIT)
        .await
        .unwrap_or_else(|e| panic!("the test's own tritonserver: {e}"))
}

/// The models matrix (Infer on add_sub) with its server group `triton` replaced by `endpoints`.
pub(crate) fn external_matrix(dir: &Path, endpoint: driver::matrix::Endpoint) -> PathBuf {
    edit_matrix(models_matrix(dir, "[{name: add_sub}]"), |m| {
        m.server_groups["triton"] = driver::matrix::ServerGroup {
            template: None,
            instances: None,
            endpoints: vec![endpoint],
        };
    })
}

/// Starts a run of `matrix` lasting `duration` in `tmp` and waits until its load flows
/// ([`wait_for_load`]): the driver and the run's directory.
pub(crate) async fn start_loaded(
    tmp: &Path,
    matrix: &Path,
    run_id: &str,
    duration: &str,
) -> (Driver, PathBuf) {
    let runs = tmp.join("runs");
    let mut driver = Driver::spawn(&run_args(matrix, &runs, run_id, duration), tmp, "driver");
    let run_dir = runs.join(run_id);
    let store_url = Store::sqlite_url(&run_dir.join("store.sqlite"));
    wait_for_load(&mut driver, &store_url, run_id).await;
    (driver, run_dir)
}

/// Does `fault` to a running run and waits for the driver's exit: its status and how long after
/// the fault it came.
pub(crate) async fn exit_after(
    driver: &mut Driver,
    fault: impl std::future::Future<Output = ()>,
) -> (ExitStatus, Duration) {
    let at = Instant::now();
    fault.await;
    let status = driver.wait(RUN_LIMIT, false).await;
    (status, at.elapsed())
}

/// Waits until the worker reported QPS above 0 to the store at `store_url`: load flows, the
/// driver polls. The store is only read (the driver creates and migrates it).
pub(crate) async fn wait_for_load(driver: &mut Driver, store_url: &str, run_id: &str) {
    let deadline = Instant::now() + START_LIMIT;
    let options = stress_common::store::StoreOptions::default();
    loop {
        assert!(
            driver.try_exit().is_none(),
            "the driver ended before the worker ran\n{}",
            driver.output()
        );
        assert!(Instant::now() < deadline, "{}", driver.output());
        driver.observe();
        if let Ok(store) = Store::open_read_only(store_url, &options).await
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

/// Whether a process is a zombie (exited, not yet reaped by its parent).
pub(crate) fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}
