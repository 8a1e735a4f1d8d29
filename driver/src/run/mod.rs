//! Orchestration of one run: plan → servers → workers → poll → fail fast → report.
//!
//! [`run`] computes the [`RunPlan`], records it, and hands it to a `Driver`, which launches the
//! members and every poll interval feeds what it observed (member exits, the store's events,
//! heartbeats and QPS samples) to the [`FailFast`] rules; the first cause they return fails the
//! run, blamed by [`failfast::attribute`]. On failure everything stops at once and the logs
//! stay; at the end of the duration workers get SIGTERM, flush their final counts, and only
//! then do servers stop. The report is then built from the store alone.

mod capacity;
mod driver;
mod error;
mod fault_probes;
mod faults;
mod finish;
mod lease;
mod lifecycle;
pub mod otlp;
mod phases;
mod poll;
mod progress;
pub mod prune;
pub mod repeat;
pub mod sampler;
mod slo_check;
mod spans;
pub mod sweep;
mod sweep_variants;

pub use error::DriverError;
use lifecycle::OpenRun;

use crate::judge::failfast::{self};
use crate::launcher::Launcher;
use crate::matrix::{self, Matrix};
use crate::plan::RunPlan;
use crate::report::Report;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::{Store, within as bounded};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub matrix: PathBuf,
    /// Where run directories go (`<runs_dir>/<run id>/`).
    pub runs_dir: PathBuf,
    pub run_id: Option<String>,
    /// Postgres URL; default: a SQLite file in the run directory.
    pub database_url: Option<String>,
    pub duration: Option<Duration>,
    /// Show a live progress line (a terminal) instead of periodic log lines.
    pub progress: Option<bool>,
    /// Override the matrix's `keep_failed`.
    pub keep_failed: Option<bool>,
    /// Compare with this run instead of the pinned or last passing run of the same name.
    pub baseline: Option<String>,
    /// A known-issues file, whose entries join the matrix's `known_issues`.
    pub known_issues: Option<PathBuf>,
}

/// A run made of runs (repeats, an A/B comparison, a sweep): what it was started with, and how
/// each of its runs gets a launcher.
pub struct RunsOf<'a> {
    pub options: &'a RunOptions,
    pub matrix: &'a Matrix,
    /// The run of runs' own directory.
    pub run_dir: &'a Path,
    pub run_id: &'a str,
    pub cancel: CancellationToken,
    pub launcher_for: &'a crate::launcher::LauncherFor<'a>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// The first failure: which member and why.
    Fail {
        member: String,
        reason: String,
    },
    Aborted(String),
    /// The matrix asks for what the servers do not have (e.g. a model): bad input, found before
    /// any load (exit code 2).
    BadInput(String),
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail { .. } | Verdict::BadInput(_) => "FAIL",
            Verdict::Aborted(_) => "ABORTED",
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Pass => 0,
            Verdict::BadInput(_) => 2,
            _ => 1,
        }
    }
}

pub struct RunOutcome {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub store_url: String,
    pub verdict: Verdict,
    pub report: Report,
}

const FAILURE_STOP_GRACE: Duration = Duration::from_secs(2);
/// How often the poll loop reads new events between its ticks, and its limit for that read.
const EVENT_CHECK: Duration = Duration::from_millis(200);
const EVENT_CHECK_LIMIT: Duration = Duration::from_millis(500);

/// How often a stopping run reads whether its workers' final reports are in.
const FINAL_REPORT_CHECK: Duration = Duration::from_millis(50);
/// How long the launcher's own stop of the workers still goes on once their final reports are in.
const FINAL_REPORT_GRACE: Duration = Duration::from_millis(500);

/// Returns once every one of `clients` has its last event in the store, and with it its final
/// counts ([`failfast::final_reports`]). Never returns while one cannot send it (killed, or
/// the store is down): the caller races it with the launcher's stop.
async fn final_reports_in(store: &Store, run_id: &RunId, mut clients: BTreeSet<String>) {
    let mut after = 0;
    loop {
        if let Ok(events) = bounded(STORE_CALL_LIMIT, store.events(run_id, after)).await {
            after = events.last().map_or(after, |e| e.id);
            for member in failfast::final_reports(&events) {
                clients.remove(member);
            }
            if clients.is_empty() {
                return;
            }
        }
        tokio::time::sleep(FINAL_REPORT_CHECK).await;
    }
}

/// What woke the poll loop.
enum Wake {
    Tick,
    Exit,
    Events,
    Fault,
}

impl Wake {
    fn as_str(&self) -> &'static str {
        match self {
            Wake::Tick => "poll tick",
            Wake::Exit => "member exit",
            Wake::Events => "new events",
            Wake::Fault => "a fault's step",
        }
    }
}

/// How long the driver watches a silent worker's CPU before it says hung or cut off.
const ACTIVITY_LOOK: Duration = Duration::from_millis(500);
/// Grace for workers to finish in-flight tests and flush on the success path.
const CLIENT_STOP_GRACE: Duration = Duration::from_secs(15);
/// A store call of the running driver answers within this, or counts as failed: a paused or
/// unreachable store never hangs the poll loop (exits are still watched, the run ends on time).
const STORE_CALL_LIMIT: Duration = Duration::from_secs(3);
/// Each of the end's saves (diagnostics, log excerpts, trace summaries) ends within this.
const END_SAVE_LIMIT: Duration = Duration::from_secs(20);

const SERVER_STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the failure path may wait for the servers' /metrics in all: a hung server accepts
/// the connection and never answers, and must not hold up the fail-fast bound (5 s) by itself.
const FAILURE_SCRAPE_BUDGET: Duration = Duration::from_secs(1);
/// The same on the success path, where nothing is in a hurry.
const SCRAPE_BUDGET: Duration = Duration::from_secs(30);
/// How long a ready server may take to list its models.
const INDEX_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::launcher::uninjectable;
/// The member id under which the driver records run-level events (e.g. an interruption).
pub use stress_common::status::DRIVER_MEMBER;

/// Failures blamed on the harness itself (the driver, the status store): no launcher member to
/// diagnose or keep.
fn is_harness(member: &str) -> bool {
    [
        DRIVER_MEMBER,
        failfast::STORE_MEMBER,
        SLO_MEMBER,
        REGRESSION_MEMBER,
    ]
    .contains(&member)
}

/// The member a failing regression (with `regression.fail`) is recorded against.
pub const REGRESSION_MEMBER: &str = crate::judge::regression::MEMBER;

/// The member a breached SLO rule's failure is recorded against.
pub const SLO_MEMBER: &str = "slo";

pub fn new_run_id(name: &str) -> String {
    let now = crate::report::format_time(stress_common::now_ms());
    // 2026-11-21 06:15:12.345Z -> 20261121-061512
    let compact: String = now[..19]
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect();
    format!("{name}-{compact}-{:04x}", rand_u16())
}

fn rand_u16() -> u16 {
    // Enough to tell apart two runs started in the same second; not security relevant.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ std::process::id().rotate_left(16)) as u16
}

pub fn store_url_for(run_dir: &Path, database_url: Option<&str>) -> String {
    database_url
        .map(str::to_string)
        .unwrap_or_else(|| Store::sqlite_url(&run_dir.join("store.sqlite")))
}

/// Runs a matrix with the given launcher. Everything it records stays in the store.
pub async fn run(
    options: &RunOptions,
    launcher: &mut dyn Launcher,
    matrix: &Matrix,
    run_dir: &Path,
    run_id: &str,
    cancel: CancellationToken,
) -> Result<RunOutcome, DriverError> {
    let plan = RunPlan::new(matrix, RunId::new(run_id), options.duration);
    if let Err(refused) = faults::check_launch(matrix, &plan, launcher) {
        unmake_run_dir(run_dir);
        return Err(refused);
    }
    launcher.plan_faults(&plan.faults);
    let open = OpenRun::open(options, matrix, &plan, run_dir, launcher.name()).await?;
    let (verdict, verdicts) = open.drive(launcher, matrix, &cancel).await?;
    let verdict = open.against_baseline(verdict).await;
    open.end(launcher, matrix, verdict, verdicts).await
}

/// Loads a matrix and prepares a run directory; errors here are bad input (exit 2).
pub fn prepare(options: &RunOptions) -> Result<(Matrix, String, PathBuf), DriverError> {
    let mut matrix = matrix::load(&options.matrix)?;
    if let Some(file) = &options.known_issues {
        for known in matrix::load_known_issues(file)? {
            if matrix.known_issues.iter().any(|k| k.id == known.issue.id) {
                return Err(DriverError::Config(format!(
                    "{}: known issue id {:?} is also in the matrix's known_issues",
                    file.display(),
                    known.issue.id
                )));
            }
            matrix.known_issues.push(known.issue.clone());
            matrix.known.push(known);
        }
    }
    check_duration(&matrix, options.duration)?;
    let run_id = options
        .run_id
        .clone()
        .unwrap_or_else(|| new_run_id(&matrix.run.name));
    let run_dir = new_run_dir(options, &run_id)?;
    Ok((matrix, run_id, run_dir))
}

/// `<runs_dir>/<run_id>/` with its `logs/`, and the matrix file as written beside them.
fn new_run_dir(options: &RunOptions, run_id: &str) -> Result<PathBuf, DriverError> {
    let run_dir = options.runs_dir.join(run_id);
    std::fs::create_dir_all(run_dir.join("logs")).map_err(|error| DriverError::RunDir {
        path: run_dir.clone(),
        error,
    })?;
    let _ = std::fs::copy(&options.matrix, run_dir.join("matrix.yaml"));
    Ok(run_dir)
}

/// Takes back what [`new_run_dir`] made for a run refused before it started: its empty `logs/`,
/// then its copy of the matrix and the directory, if that leaves it empty (a directory that
/// already held a run keeps everything).
fn unmake_run_dir(run_dir: &Path) {
    if std::fs::remove_dir(run_dir.join("logs")).is_ok() {
        let _ = std::fs::remove_file(run_dir.join("matrix.yaml"));
        let _ = std::fs::remove_dir(run_dir);
    }
}

/// A `--duration` that overrides `matrix`'s (read within its bounds): no shorter than a poll.
fn check_duration(matrix: &Matrix, duration: Option<Duration>) -> Result<(), DriverError> {
    let Some(d) = duration else { return Ok(()) };
    if d < matrix.run.poll_interval {
        return Err(DriverError::Config(format!(
            "--duration {d:?} is shorter than the poll interval {:?}",
            matrix.run.poll_interval
        )));
    }
    Ok(())
}

/// The faults a run of the matrix at `matrix_path` would inject, planned as `driver run` plans
/// them, without starting or writing anything (`driver chaos-mesh`): the matrix loaded and
/// validated, `--duration` checked, the run's plan, and every fault written with `at` fitting its
/// load phase. Errors are bad input (exit 2), with the same diagnostics as a run's.
pub fn planned_faults(
    matrix_path: &Path,
    run_id: &str,
    duration: Option<Duration>,
) -> Result<Vec<crate::matrix::faults::Injection>, DriverError> {
    let matrix = matrix::load(matrix_path)?;
    if matrix.sweep.is_some() {
        return Err(DriverError::Config(format!(
            "{}: a sweep runs each variant as a run of its own: plan the faults of one variant's \
             matrix",
            matrix_path.display()
        )));
    }
    check_duration(&matrix, duration)?;
    let plan = RunPlan::new(&matrix, RunId::new(run_id), duration);
    faults::check_fit(&matrix, &plan)?;
    Ok(plan.faults)
}
