//! Orchestration of one run: plan → servers → workers → poll → fail fast → report.
//!
//! [`run`] computes the [`RunPlan`], records it, and hands it to a `Driver`, which launches the
//! members and every poll interval feeds what it observed (member exits, the store's events,
//! heartbeats and QPS samples) to the [`FailFast`] rules; the first cause they return fails the
//! run, blamed by [`failfast::attribute`]. On failure everything stops at once and the logs
//! stay; at the end of the duration workers get SIGTERM, flush their final counts, and only
//! then do servers stop. The report is then built from the store alone.

use crate::autoscale;
use crate::baseline;
use crate::capacity;
use crate::external;
use crate::failfast::{self, Cause, FailFast, Poll};
use crate::launcher::{LaunchError, Launcher, MemberExit, ServerEndpoint};
use crate::matrix::CapacityPhase;
use crate::matrix::{self, Matrix, MatrixError};
use crate::plan::RunPlan;
use crate::preflight;
use crate::report::Report;
use crate::slo;
use crate::spike;
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stress_common::contract::{MemberName, RunId};
use stress_common::histogram::LatencyHistogram;
use stress_common::retry::{RetryPolicy, retry};
use stress_common::status::{EventKind, LoadTarget, Stopping};
use stress_common::store::{Member, NewRun, Store, StoreError, within as bounded};
use stress_common::{http, tritonserver};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Bad matrix or options (exit code 2).
    #[error("{0}")]
    Matrix(#[from] MatrixError),
    #[error("{0}")]
    Config(String),
    #[error("status store: {0}")]
    Store(#[from] StoreError),
    #[error("report: {0}")]
    Report(#[from] crate::report::ReportError),
    #[error("run directory {path}: {error}")]
    RunDir {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl DriverError {
    pub fn exit_code(&self) -> u8 {
        match self {
            DriverError::Matrix(_) | DriverError::Config(_) => 2,
            _ => 1,
        }
    }
}

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
async fn final_reports_in(store: &Store, run_id: &str, mut clients: BTreeSet<String>) {
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
}

impl Wake {
    fn as_str(&self) -> &'static str {
        match self {
            Wake::Tick => "poll tick",
            Wake::Exit => "member exit",
            Wake::Events => "new events",
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

struct Progress {
    tty: bool,
    last_line: Instant,
}

impl Progress {
    fn show(&mut self, line: &str) {
        if self.tty {
            eprint!("\r\x1b[K{line}");
        } else if self.last_line.elapsed() >= Duration::from_secs(10) {
            tracing::info!("{line}");
            self.last_line = Instant::now();
        }
    }

    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// The progress line of a poll: elapsed against the duration, the servers up, then per client
/// group its workers' QPS now and their tests and failures so far.
fn progress_line(
    elapsed: Duration,
    duration: Duration,
    servers_up: usize,
    groups: &BTreeMap<String, Vec<stress_common::contract::MemberName>>,
    qps: &[(String, f64)],
    counts: &[(String, stress_common::status::ScenarioCounts)],
) -> String {
    let mut line = format!(
        "[{:>5.0}s/{:.0}s] servers up {servers_up}",
        elapsed.as_secs_f64(),
        duration.as_secs_f64()
    );
    for (group, members) in groups {
        let of_group = |m: &str| members.iter().any(|n| n.as_str() == m);
        let group_qps: f64 = qps
            .iter()
            .filter(|(m, _)| of_group(m))
            .map(|(_, q)| q)
            .sum();
        let (tests, failures) = counts
            .iter()
            .filter(|(m, _)| of_group(m))
            .fold((0, 0), |(t, f), (_, c)| (t + c.tests, f + c.failures));
        line.push_str(&format!(
            " | {group}: {} workers, QPS {group_qps:.0}, tests {tests}, failures {failures}",
            members.len()
        ));
    }
    line
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
    let store_url = store_url_for(run_dir, options.database_url.as_deref());
    let store = Store::connect(&store_url).await?;
    // The matrix as written, so `driver report` shows what was run even if the file changes.
    let matrix_text = std::fs::read_to_string(&options.matrix).unwrap_or_default();
    // Before anything runs: an unknown --baseline is bad input.
    let baseline = match baseline::find(
        &store,
        &store_url,
        &options.runs_dir,
        options.baseline.as_deref(),
        &plan.name,
        run_id,
    )
    .await
    {
        Ok(b) => b,
        Err(e @ baseline::BaselineError::Unknown(..)) => {
            return Err(DriverError::Config(e.to_string()));
        }
        Err(e) => {
            tracing::warn!("no baseline: {e}");
            None
        }
    };
    // Runs of this store whose driver vanished are over: say so before adding one.
    match bounded(
        STORE_CALL_LIMIT,
        store.abandon_expired(stress_common::now_ms()),
    )
    .await
    {
        Ok(abandoned) => {
            for r in abandoned {
                tracing::warn!(
                    "run {} lost its driver (lease ran out): ABANDONED; `driver cleanup --run {}` \
                     removes what it left",
                    r.run_id,
                    r.run_id
                );
            }
        }
        Err(e) => tracing::warn!("abandoned runs not looked for: {e}"),
    }
    let started_at_ms = stress_common::now_ms();
    store
        .create_run(&NewRun {
            run_id: run_id.into(),
            name: plan.name.clone(),
            matrix_yaml: matrix_text.clone(),
            launcher: launcher.name().into(),
            started_at_ms,
        })
        .await?;
    let _lease = Lease::hold(
        store.clone(),
        run_id.to_string(),
        Lease::ttl(plan.rules.store_outage_limit),
    )
    .await;
    for member in plan.members() {
        store.upsert_member(&member).await?;
    }
    let mut progress = Progress {
        tty: options
            .progress
            .unwrap_or_else(|| std::io::stderr().is_terminal()),
        last_line: Instant::now() - Duration::from_secs(3600),
    };
    let perf_analyzer = stress_common::tritonserver::find_tool(
        "perf_analyzer",
        "PERF_ANALYZER",
        matrix.source_path.as_deref().and_then(Path::parent),
    )
    .map(|p| p.display().to_string());
    let mut driver = Driver {
        store: &store,
        launcher,
        matrix,
        plan: &plan,
        store_url: &store_url,
        perf_analyzer: perf_analyzer.as_deref(),
        progress: &mut progress,
        cancel: &cancel,
    };
    let mut verdict = driver.drive().await;
    progress.done();
    if let (Some(b), Verdict::Pass | Verdict::Fail { .. }) = (&baseline, &verdict) {
        let settings = matrix.regression.clone().unwrap_or_default();
        match baseline::compare(&store, run_id, &matrix_text, b, &settings).await {
            Ok(c) => {
                let json = serde_json::to_value(&c).expect("plain data serialises");
                if let Err(e) = store.save_comparison(run_id, &json).await {
                    tracing::warn!("comparison with {} not saved: {e}", b.run_id);
                }
                if let (Verdict::Pass, true, Some(first)) =
                    (&verdict, c.fail, c.regressions.first())
                {
                    let reason = format!(
                        "{} regression(s) against baseline {}, first: {}",
                        c.regressions.len(),
                        c.baseline_run,
                        first.describe()
                    );
                    if let Err(e) = store
                        .record_event(run_id, REGRESSION_MEMBER, EventKind::Failure, &reason)
                        .await
                    {
                        tracing::warn!("regression failure not recorded: {e}");
                    }
                    verdict = Verdict::Fail {
                        member: REGRESSION_MEMBER.into(),
                        reason,
                    };
                }
            }
            Err(e) => tracing::warn!("not compared with baseline {}: {e}", b.run_id),
        }
    }

    // Record what the report needs before anything is cleaned up.
    let failed = verdict != Verdict::Pass;
    if failed {
        tracing::info!("{}: stopping every member", verdict_line(&verdict));
        scrape_server_metrics(&store, launcher, &plan, FAILURE_SCRAPE_BUDGET).await;
        launcher.stop_all(FAILURE_STOP_GRACE).await;
        tracing::info!("every member stopped");
    }
    // What the report adds from the launcher: each within its limit, and none when the store
    // does not answer now (a store that is down must not hold the run's end; the report says
    // what is missing).
    if bounded(STORE_CALL_LIMIT, store.run(run_id)).await.is_ok() {
        let limit = END_SAVE_LIMIT;
        if tokio::time::timeout(limit, save_diagnostics(&store, launcher, &plan))
            .await
            .is_err()
        {
            tracing::warn!("diagnostics not saved: the store did not answer within {limit:?}");
        }
        if tokio::time::timeout(limit, save_failure_logs(&store, launcher, &plan))
            .await
            .is_err()
        {
            tracing::warn!("log excerpts not saved: the store did not answer within {limit:?}");
        }
        if tokio::time::timeout(limit, save_trace_summaries(&store, run_dir, &plan))
            .await
            .is_err()
        {
            tracing::warn!("trace summaries not saved: the store did not answer within {limit:?}");
        }
    } else {
        tracing::warn!(
            "the status store does not answer: diagnostics, log excerpts and trace summaries not saved"
        );
    }
    let report = match finish_and_read(&store, run_id, &verdict, plan.rules.store_outage_limit)
        .await
    {
        Ok(report) => report,
        Err(e) => {
            eprintln!("warning: {e}");
            Report::without_store(
                run_id,
                &plan.name,
                launcher.name(),
                verdict.as_str(),
                started_at_ms,
                format!(
                    "{e}.\nThe verdict is the driver's own ({}); the counts, latencies, failure \
                     records and diagnostics the store holds are missing here: run `driver report \
                     --run {run_id}` once the store is back.",
                    verdict_line(&verdict)
                ),
            )
        }
    };
    write_report(run_dir, &report)?;
    tracing::info!("report written");
    if let Some(settings) = &matrix.report
        && let Some(url) = &settings.webhook
    {
        let body = crate::webhook::summary(&report, run_dir);
        match crate::webhook::deliver(url, &body, settings.webhook_timeout).await {
            Ok(status) => tracing::info!(
                "report summary delivered to {} (HTTP {status})",
                crate::webhook::shown(url)
            ),
            // retry() logged each attempt; the run's verdict stands.
            Err(e) => eprintln!("warning: report summary not delivered: {e}"),
        }
    }
    let keep = if failed && options.keep_failed.unwrap_or(plan.keep_failed) {
        let failed_members: BTreeSet<String> = bounded(STORE_CALL_LIMIT, store.events(run_id, 0))
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.kind == EventKind::Failure && !is_harness(&e.member_id))
            .map(|e| e.member_id)
            .collect();
        plan.kept_for_inspection(&failed_members)
    } else {
        BTreeSet::new()
    };
    launcher.cleanup(&keep).await;
    Ok(RunOutcome {
        run_id: run_id.into(),
        run_dir: run_dir.into(),
        store_url,
        verdict,
        report,
    })
}

/// The driver's lease on its run, renewed every [`Lease::RENEWAL`] until dropped. A driver that
/// vanishes (SIGKILL, a drained node) stops renewing, and [`Lease::ttl`] later its run counts as
/// ABANDONED ([`Store::abandon_expired`]: the next `driver run` or `driver cleanup` on the store).
struct Lease(tokio::task::JoinHandle<()>);

impl Lease {
    const RENEWAL: Duration = Duration::from_secs(15);

    /// Two minutes, and always a minute longer than a store outage the run survives, so a
    /// live driver's run is never taken for abandoned.
    fn ttl(store_outage_limit: Duration) -> Duration {
        Duration::from_secs(120).max(store_outage_limit + Duration::from_secs(60))
    }

    async fn hold(store: Store, run_id: String, ttl: Duration) -> Lease {
        let renew = move || {
            let (store, run_id) = (store.clone(), run_id.clone());
            async move {
                let until = stress_common::now_ms() + millis(ttl);
                if let Err(e) = bounded(STORE_CALL_LIMIT, store.renew_lease(&run_id, until)).await {
                    tracing::warn!("lease on run {run_id} not renewed: {e}");
                }
            }
        };
        renew().await;
        Lease(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Lease::RENEWAL).await;
                renew().await;
            }
        }))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records the verdict and reads the report back, retrying a store that is down or does not
/// answer for `deadline` (the store outage limit of the fail-fast rules).
async fn finish_and_read(
    store: &Store,
    run_id: &str,
    verdict: &Verdict,
    deadline: Duration,
) -> Result<Report, String> {
    let policy = RetryPolicy {
        attempts: u32::MAX,
        first_pause: Duration::from_millis(500),
        budget: deadline,
    };
    let finished_at_ms = stress_common::now_ms();
    retry("finishing the run in the status store", policy, || async {
        store
            .finish_run(run_id, verdict.as_str(), finished_at_ms)
            .await
            .map_err(|e| e.to_string())?;
        Report::from_store(store, run_id)
            .await
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
}

/// The verdict in a sentence: PASS, or FAIL and who failed why.
fn verdict_line(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Pass => "PASS".into(),
        Verdict::Fail { member, reason } => format!("FAIL: {member}: {reason}"),
        Verdict::Aborted(why) => format!("ABORTED: {why}"),
        Verdict::BadInput(why) => format!("FAIL (bad input): {why}"),
    }
}

pub fn write_report(run_dir: &Path, report: &Report) -> Result<(), DriverError> {
    let io = |error| DriverError::RunDir {
        path: run_dir.into(),
        error,
    };
    std::fs::write(run_dir.join("report.txt"), report.render()).map_err(io)?;
    std::fs::write(
        run_dir.join("report.json"),
        serde_json::to_string_pretty(report).expect("report serialises"),
    )
    .map_err(io)?;
    std::fs::write(run_dir.join("junit.xml"), crate::junit::render(report)).map_err(io)?;
    std::fs::write(run_dir.join("report.html"), crate::html::render(report)).map_err(io)
}

/// Where an external server is, for people: its addresses.
fn external_location(e: &crate::matrix::ExternalServer) -> String {
    format!(
        "external server (not launched by the driver): {}",
        e.address()
    )
}

/// Scrapes Triton's /metrics of every server still up into the store, parsed per model, giving
/// up on the servers that have not answered within `budget` (all together). An external server
/// is scraped at its metrics address, when the matrix gives one.
async fn scrape_server_metrics(
    store: &Store,
    launcher: &mut dyn Launcher,
    plan: &RunPlan,
    budget: Duration,
) {
    let run_id = &plan.run_id;
    let deadline = tokio::time::Instant::now() + budget;
    for s in &plan.server_names() {
        let external = plan.external(s);
        let text = match external {
            Some(e) => match &e.ports.metrics {
                Some(address) => {
                    tokio::time::timeout_at(deadline, tritonserver::metrics_text(address)).await
                }
                None => continue,
            },
            None => tokio::time::timeout_at(deadline, launcher.server_metrics(s)).await,
        };
        if let Ok(Some(text)) = text {
            // The metrics alone: the rest of a server's diagnostics is taken only when it
            // failed (save_diagnostics), and can take seconds (a pod's logs and events).
            let d = crate::launcher::MemberDiagnostics {
                launcher: launcher.name().into(),
                command: launcher.command_line(s),
                location: external
                    .map(external_location)
                    .or_else(|| launcher.locate(s)),
                server_metrics: Some(stress_common::triton_metrics::parse(&text)),
                ..Default::default()
            };
            if let Err(e) = bounded(
                STORE_CALL_LIMIT,
                store.save_diagnostics(run_id, s, &d.to_json()),
            )
            .await
            {
                tracing::warn!("server metrics of {s} not recorded: {e}");
            }
        }
    }
}

/// Failures whose server's log lines are saved for their forensics (the report shows the
/// first few in detail).
const FAILURE_LOG_EXCERPTS: usize = 5;
/// The window of a failure's log excerpt: from a little before (the server may have logged
/// the cause first) to a moment after.
const FAILURE_LOG_BEFORE_MS: i64 = 3_000;
const FAILURE_LOG_AFTER_MS: i64 = 1_000;

/// Saves the log lines of the server each of the first failures went to, around its time,
/// while the logs can still be read (before cleanup deletes pods).
async fn save_failure_logs(store: &Store, launcher: &mut dyn Launcher, plan: &RunPlan) {
    let Ok(failures) = store.failures(&plan.run_id).await else {
        return;
    };
    let Ok(members) = store.members(&plan.run_id).await else {
        return;
    };
    let mut failures: Vec<_> = failures.into_iter().map(|(_, f)| f).collect();
    failures.sort_by_key(|f| f.at_ms);
    for f in failures.iter().take(FAILURE_LOG_EXCERPTS) {
        let Some(server) = members.iter().find(|m| {
            m.role == stress_common::status::Role::Server
                && m.address
                    .split_whitespace()
                    .any(|a| a.split_once('=').is_some_and(|(_, addr)| addr == f.server))
        }) else {
            continue;
        };
        let (from, to) = (
            f.at_ms - FAILURE_LOG_BEFORE_MS,
            f.at_ms + FAILURE_LOG_AFTER_MS,
        );
        let lines = launcher
            .server_log_between(&server.member_id, from, to)
            .await;
        if let Err(e) = store
            .save_log_excerpt(&plan.run_id, &server.member_id, from, to, &lines)
            .await
        {
            tracing::warn!("log excerpt of {} not recorded: {e}", server.member_id);
        }
    }
}

/// Summarises each traced server's trace files in the run directory (`traces/<server>.json`,
/// and `.0`, `.1`, ... with a log frequency; Triton writes the last at shutdown) into the
/// store. The kube launcher's traces stay on the pod's volume: none here.
async fn save_trace_summaries(store: &Store, run_dir: &Path, plan: &RunPlan) {
    let dir = run_dir.join("traces");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for server in &plan.servers {
        let stem = format!("{}.json", server.name);
        let mut files: Vec<&String> = names
            .iter()
            .filter(|n| {
                *n == &stem
                    || n.strip_prefix(&stem)
                        .and_then(|rest| rest.strip_prefix('.'))
                        .is_some_and(|i| i.parse::<u32>().is_ok())
            })
            .collect();
        if files.is_empty() {
            continue;
        }
        files.sort();
        let texts: Vec<(String, String)> = files
            .iter()
            .filter_map(|n| {
                let path = dir.join(n);
                Some((
                    path.display().to_string(),
                    std::fs::read_to_string(&path).ok()?,
                ))
            })
            .collect();
        let details = match crate::trace::parse(&texts) {
            Ok(traces) => serde_json::to_value(crate::trace::summarize(&traces)),
            Err(e) => {
                tracing::warn!("traces of {} not summarised: {e}", server.name);
                continue;
            }
        }
        .expect("plain data serialises");
        if let Err(e) = store
            .save_trace_summary(&plan.run_id, &server.name, &details)
            .await
        {
            tracing::warn!("trace summary of {} not recorded: {e}", server.name);
        }
    }
}

/// Saves launcher diagnostics of every member with a FAILURE event (keeping the server metrics
/// saved before). An external server has no process or pod to diagnose: only where it is.
async fn save_diagnostics(store: &Store, launcher: &mut dyn Launcher, plan: &RunPlan) {
    use crate::launcher::MemberDiagnostics;
    let run_id = plan.run_id.as_str();
    let Ok(events) = store.events(run_id, 0).await else {
        return;
    };
    let mut saved_metrics: BTreeMap<String, _> = store
        .diagnostics(run_id)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(member, d)| Some((member, MemberDiagnostics::from_json(d).server_metrics?)))
        .collect();
    let mut done = Vec::new();
    for e in events.iter().filter(|e| e.kind == EventKind::Failure) {
        if done.contains(&e.member_id) || is_harness(&e.member_id) {
            continue;
        }
        done.push(e.member_id.clone());
        let mut d = match plan.external(&e.member_id) {
            Some(ext) => MemberDiagnostics {
                launcher: launcher.name().into(),
                location: Some(external_location(ext)),
                ..Default::default()
            },
            None => launcher.diagnostics(&e.member_id).await,
        };
        d.server_metrics = saved_metrics.remove(&e.member_id);
        if let Err(err) = store
            .save_diagnostics(run_id, &e.member_id, &d.to_json())
            .await
        {
            tracing::warn!("diagnostics of {} not recorded: {err}", e.member_id);
        }
    }
}

/// How long a suspected server gets to answer its liveness probe on the failure path.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

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
pub const REGRESSION_MEMBER: &str = "regression";

/// The member a breached SLO rule's failure is recorded against.
pub const SLO_MEMBER: &str = "slo";

/// One run in progress: launches the plan, feeds each poll's observations to the fail-fast
/// rules and acts on their verdict. The decisions are in [`failfast`]; this only does I/O.
struct Driver<'a> {
    store: &'a Store,
    launcher: &'a mut dyn Launcher,
    matrix: &'a Matrix,
    plan: &'a RunPlan,
    store_url: &'a str,
    perf_analyzer: Option<&'a str>,
    progress: &'a mut Progress,
    cancel: &'a CancellationToken,
}

impl Driver<'_> {
    async fn record(&self, member: &str, kind: EventKind, details: &str) {
        if let Err(e) = bounded(
            STORE_CALL_LIMIT,
            self.store
                .record_event(&self.plan.run_id, member, kind, details),
        )
        .await
        {
            tracing::warn!("event of {member} not recorded: {e}");
        }
    }

    async fn update_member(&self, member: Member) {
        if let Err(e) = bounded(STORE_CALL_LIMIT, self.store.upsert_member(&member)).await {
            tracing::warn!("member {} not updated: {e}", member.member_id);
        }
    }

    /// A launch that failed: recorded and final.
    async fn launch_failed(&self, e: LaunchError) -> Verdict {
        let (member, reason) = match e {
            LaunchError::Member { member, reason } => (member, reason),
            LaunchError::Setup(reason) => (DRIVER_MEMBER.to_string(), reason),
        };
        self.record(&member, EventKind::Failure, &reason).await;
        Verdict::Fail { member, reason }
    }

    /// Marks when the driver began to stop the run, before any worker is told: failures after
    /// it happened during the stop (see [`crate::rootcause`]), and a worker told to stop reads
    /// it to know whether its tests in flight may finish.
    async fn record_stopping(&self, stop: Stopping) {
        self.record(DRIVER_MEMBER, EventKind::Running, &stop.details())
            .await;
    }

    /// A failed run's first steps after the verdict: the workers stop (SIGTERM: they flush
    /// their final counts) and the servers still up give a last sample, so the report's
    /// reconciliation compares the same moment on both sides; the rest of the failure path
    /// (`stop_all`) then ends the servers. Bounded: a hung server's scrape waits no longer.
    async fn wind_down(&mut self, sampler: crate::sampler::ServerSampler) {
        let clients = self.plan.client_names();
        let stop = self.launcher.stop_clients(FAILURE_STOP_GRACE);
        tokio::pin!(stop);
        tokio::select! {
            _ = &mut stop => tracing::info!("workers stopped; the servers' last sample"),
            _ = final_reports_in(self.store, &self.plan.run_id, clients) => {
                // Their counts are in: their processes or pods get a moment to be seen
                // ending, not the seconds a kubelet takes for a node's worth of pods.
                let _ = tokio::time::timeout(FINAL_REPORT_GRACE, &mut stop).await;
                tracing::info!("every worker's final report is in; the servers' last sample");
            }
        }
        if tokio::time::timeout(FAILURE_SCRAPE_BUDGET, sampler.finish())
            .await
            .is_err()
        {
            tracing::info!("the servers' last sample not taken within {FAILURE_SCRAPE_BUDGET:?}");
        }
    }

    /// A rule fired: probe a failed client's servers, blame, record, fail.
    async fn fail(&mut self, cause: Cause) -> Verdict {
        let mut probes = Vec::new();
        if failfast::needs_probe(&cause, &self.plan.client_names()) {
            for server in self.plan.targets_of(cause.member()) {
                let r = match self.plan.external(server) {
                    Some(e) => external::probe_live(e, PROBE_TIMEOUT).await,
                    None => self.launcher.server_live(server, PROBE_TIMEOUT).await,
                };
                let dead = r.is_err();
                probes.push((server.clone(), r));
                if dead {
                    break;
                }
            }
        }
        let mut activity = None;
        if let Cause::StaleHeartbeat { member, .. } = &cause
            && let Some(before) = self.launcher.cpu_time(member)
        {
            tokio::time::sleep(ACTIVITY_LOOK).await;
            activity = self
                .launcher
                .cpu_time(member)
                .map(|after| failfast::Activity {
                    cpu: after.saturating_sub(before),
                    over: ACTIVITY_LOOK,
                });
        }
        let blame = failfast::with_activity(failfast::attribute(&cause, &probes), &cause, activity);
        if blame.record {
            self.record(&blame.member, EventKind::Failure, &blame.reason)
                .await;
        }
        self.record_stopping(Stopping::Failed {
            member: blame.member.clone(),
        })
        .await;
        Verdict::Fail {
            member: blame.member,
            reason: blame.reason,
        }
    }

    /// Before any load: every model a client group's `models:` names must be READY on each of
    /// its target servers, as their repository indexes say; else the run stops as bad input
    /// naming each model and server. A server that cannot give its index fails the run.
    async fn check_models(
        &mut self,
        endpoints: &BTreeMap<String, ServerEndpoint>,
    ) -> Option<Verdict> {
        let needs = preflight::needs(self.plan);
        let servers: BTreeSet<&MemberName> = needs.iter().flat_map(|n| &n.servers).collect();
        let mut indexes = BTreeMap::new();
        for server in servers {
            let Some(ep) = endpoints.get(server.as_str()) else {
                continue;
            };
            let url = format!("http://{}/v2/repository/index", ep.http);
            // `{}`: every model, loaded or not, so a model that failed to load is named with
            // its state and reason rather than as absent.
            let index = if ep.http.is_empty() {
                // An external server given by its gRPC address only.
                external::repository_index(&ep.grpc, INDEX_TIMEOUT).await
            } else {
                match http::post_json(&url, &serde_json::json!({}), INDEX_TIMEOUT).await {
                    Ok(r) if r.is_ok() => preflight::parse_index(&r.body),
                    Ok(r) => Err(format!(
                        "repository index: HTTP {}: {}",
                        r.status,
                        r.body.trim()
                    )),
                    Err(e) => Err(format!("repository index: {e}")),
                }
            };
            match index {
                Ok(index) => {
                    indexes.insert(server.clone(), index);
                }
                Err(reason) => {
                    self.record(server, EventKind::Failure, &reason).await;
                    return Some(Verdict::Fail {
                        member: server.to_string(),
                        reason,
                    });
                }
            }
        }
        let missing = preflight::missing_models(&needs, &indexes);
        if missing.is_empty() {
            return None;
        }
        let reason = missing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        self.record(DRIVER_MEMBER, EventKind::Failure, &reason)
            .await;
        Some(Verdict::BadInput(reason))
    }

    /// Before anything is launched: every external server answers at each of its addresses,
    /// else the run stops as bad input naming each that does not (file:line, field, address,
    /// what failed).
    async fn check_externals(&mut self) -> Option<Verdict> {
        let plan = self.plan;
        if plan.externals.is_empty() {
            return None;
        }
        for e in &plan.externals {
            let details = format!("checking {}", external_location(e));
            self.record(&e.name, EventKind::Starting, &details).await;
        }
        self.progress.show(&format!(
            "checking {} external server(s)",
            plan.externals.len()
        ));
        let checks = plan.externals.iter().map(external::check_at_start);
        let results = tokio::select! {
            r = futures::future::join_all(checks) => r,
            _ = self.cancel.cancelled() => return Some(Verdict::Aborted("interrupted while checking external servers".into())),
        };
        let mut failures = Vec::new();
        for (e, result) in plan.externals.iter().zip(results) {
            match result {
                Ok(()) => {
                    let details = format!("live and ready ({})", external_location(e));
                    self.record(&e.name, EventKind::Running, &details).await;
                }
                Err(f) => {
                    let port = e.by_protocol.then_some(f.port);
                    let at = self
                        .matrix
                        .locate_endpoint(&e.group, e.index, port)
                        .map(|at| format!("{at}: "))
                        .unwrap_or_default();
                    let reason = format!(
                        "{at}{}: existing server {} does not answer: {} ({} tries)",
                        f.field,
                        e.name,
                        f.why,
                        external::START_ATTEMPTS
                    );
                    self.record(&e.name, EventKind::Failure, &reason).await;
                    failures.push(reason);
                }
            }
        }
        (!failures.is_empty()).then(|| Verdict::BadInput(failures.join("; ")))
    }

    async fn drive(&mut self) -> Verdict {
        let plan = self.plan;
        // External servers first: a wrong address is bad input, found before anything starts.
        if let Some(verdict) = self.check_externals().await {
            return verdict;
        }
        // Servers.
        for s in &plan.servers {
            self.record(&s.name, EventKind::Starting, "launching").await;
            if let Err(e) = self.launcher.start_server(s).await {
                return self.launch_failed(e).await;
            }
            self.update_member(Member {
                command: self.launcher.command_line(&s.name).unwrap_or_default(),
                ..plan.server_record(s)
            })
            .await;
        }
        self.progress.show(&format!(
            "waiting for {} server(s) to be ready",
            plan.servers.len()
        ));
        let ready = tokio::select! {
            r = self.launcher.wait_servers_ready(plan.server_ready_timeout) => r,
            _ = self.cancel.cancelled() => return Verdict::Aborted("interrupted while servers started".into()),
        };
        let mut endpoints: BTreeMap<String, ServerEndpoint> = match ready {
            Ok(ready) => ready
                .into_iter()
                .map(|ep| (ep.member.clone(), ep))
                .collect(),
            Err(e) => return self.launch_failed(e).await,
        };
        for s in &plan.servers {
            let Some(ep) = endpoints.get(s.name.as_str()) else {
                continue;
            };
            let at = self.launcher.locate(&s.name).unwrap_or_default();
            self.update_member(Member {
                address: format!("grpc={} http={} metrics={}", ep.grpc, ep.http, ep.metrics),
                command: self.launcher.command_line(&s.name).unwrap_or_default(),
                ..plan.server_record(s)
            })
            .await;
            let details = format!(
                "ready ({at}; grpc {} http {} metrics {})",
                ep.grpc, ep.http, ep.metrics
            );
            self.record(&s.name, EventKind::Running, &details).await;
        }
        endpoints.extend(plan.external_endpoints());
        if let Some(verdict) = self.check_models(&endpoints).await {
            return verdict;
        }
        tokio::select! {
            _ = tokio::time::sleep(plan.warmup) => {}
            _ = self.cancel.cancelled() => return Verdict::Aborted("interrupted during warm-up".into()),
        }

        // Capacity mode: the first phase's targets are in the store before any worker reads them.
        let mut capacity = CapacityRun::new(plan, stress_common::now_ms());
        if let (Some(cap), Some(settings)) = (&mut capacity, &plan.capacity) {
            cap.autoscale = autoscale::Collector::new(plan, settings, &endpoints);
            cap.start(self.store, &plan.run_id).await;
        }

        // The servers' series: the baseline scrape before any worker sends.
        let sampled = endpoints
            .values()
            .filter(|ep| !ep.metrics.is_empty())
            .map(|ep| crate::sampler::SampledServer {
                member: ep.member.clone(),
                metrics: ep.metrics.clone(),
                pid: self.launcher.server_pid(&ep.member),
                launched: self.plan.external(&ep.member).is_none(),
            })
            .collect();
        let sampler = crate::sampler::ServerSampler::start(
            self.store.clone(),
            plan.run_id.to_string(),
            sampled,
            stress_common::interval::series_interval(Some(plan.duration), plan.poll),
        )
        .await;

        // Workers: every client talks to every ready server of its target group.
        let mut rules = FailFast::new(plan.rules);
        for c in &plan.clients {
            let assignment = plan.assignment(c, &endpoints, self.store_url, self.perf_analyzer);
            if let Err(e) = self.launcher.start_client(c, &assignment).await {
                return self.launch_failed(e).await;
            }
            let at = self.launcher.locate(&c.name).unwrap_or_default();
            self.record(&c.name, EventKind::Starting, &format!("launched ({at})"))
                .await;
            self.update_member(Member {
                address: assignment.servers.join(","),
                command: self.launcher.command_line(&c.name).unwrap_or_default(),
                ..plan.client_record(c)
            })
            .await;
            rules.client_launched(&assignment.member_id, stress_common::now_ms());
        }

        // Poll.
        let started = Instant::now();
        let started_ms = stress_common::now_ms();
        if let Some(cap) = &mut capacity {
            cap.started_ms = started_ms;
        }
        let end = tokio::time::Instant::now() + plan.duration;
        let mut ticker = tokio::time::interval(plan.poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Between ticks, new events are read often (a cheap indexed read), so a worker's own
        // FAILURE stops the run within a fraction of the poll interval.
        let mut event_check = tokio::time::interval(EVENT_CHECK.min(plan.poll));
        event_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // On Postgres an event wakes the loop at its commit (LISTEN/NOTIFY); the reads above
        // stay, for SQLite and for notices lost to a reconnect.
        let notices = match bounded(STORE_CALL_LIMIT, self.store.event_notices(&plan.run_id)).await
        {
            Ok(notices) => notices,
            Err(e) => {
                tracing::warn!("no event notices from the store ({e}): events are polled");
                None
            }
        };
        let event_recorded = async || match &notices {
            Some(notices) => notices.recorded().await,
            None => std::future::pending().await,
        };
        loop {
            let wake = tokio::select! {
                _ = ticker.tick() => Wake::Tick,
                // A member may have ended: judged now, not at the next tick.
                _ = self.launcher.member_may_have_ended() => Wake::Exit,
                _ = event_recorded() => Wake::Events,
                _ = event_check.tick() => Wake::Events,
                _ = tokio::time::sleep_until(end) => break,
                _ = self.cancel.cancelled() => {
                    let why = "driver interrupted (SIGTERM/SIGINT)";
                    self.record(DRIVER_MEMBER, EventKind::Failure, why).await;
                    // Nothing of the run is worth waiting for: the workers drop their tests
                    // in flight when the caller stops them.
                    self.record_stopping(Stopping::Failed {
                        member: DRIVER_MEMBER.into(),
                    })
                    .await;
                    return Verdict::Aborted(why.into());
                }
            };
            // Between ticks only what woke the loop is fed: the per-poll rules (zero QPS,
            // heartbeats, a store outage) count ticks.
            let poll = match wake {
                Wake::Tick => self.observe(&rules).await,
                Wake::Exit => {
                    let exits = self.launcher.exited().await;
                    if exits.is_empty() {
                        continue;
                    }
                    Poll {
                        now_ms: stress_common::now_ms(),
                        exits,
                        ..Poll::default()
                    }
                }
                Wake::Events => {
                    let events = bounded(
                        EVENT_CHECK_LIMIT,
                        self.store.events(&plan.run_id, rules.last_event_id()),
                    )
                    .await;
                    match events {
                        Ok(events) if !events.is_empty() => Poll {
                            now_ms: stress_common::now_ms(),
                            events: Some(Ok(events)),
                            ..Poll::default()
                        },
                        // Nothing new, or a store that does not answer (the tick's reads
                        // judge an outage).
                        _ => continue,
                    }
                }
            };
            // Each worker's QPS now, for the progress line (the rules take the poll).
            let qps: Vec<(String, f64)> = match &poll.latest_qps {
                Some(Ok(q)) => q.iter().map(|q| (q.member_id.clone(), q.qps)).collect(),
                _ => Vec::new(),
            };
            if let Some(cause) = rules.observe(poll) {
                // Timestamps for fail-fast's own latency: judged, attributed, workers stopped.
                tracing::info!("failure judged ({}): {}", wake.as_str(), cause.member());
                self.launcher.failure_judged();
                let verdict = self.fail(cause).await;
                tracing::info!("failure attributed; stopping the workers");
                self.wind_down(sampler).await;
                return verdict;
            }
            if !matches!(wake, Wake::Tick) {
                // The SLO, capacity and progress work is the tick's.
                continue;
            }
            if let Some(breach) = self.slo_live(started_ms, started.elapsed()).await {
                self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
                self.record_stopping(Stopping::Failed {
                    member: SLO_MEMBER.into(),
                })
                .await;
                self.wind_down(sampler).await;
                return Verdict::Fail {
                    member: SLO_MEMBER.into(),
                    reason: breach,
                };
            }
            if let Some(cap) = &mut capacity
                && cap.due()
            {
                cap.check(self.store, &plan.run_id).await;
                if cap.all_ended() {
                    self.progress
                        .show("capacity: every client group's phase ended");
                    break;
                }
            }
            let counts = bounded(STORE_CALL_LIMIT, self.store.scenario_counts(&plan.run_id))
                .await
                .unwrap_or_default();
            self.progress.show(&progress_line(
                started.elapsed(),
                plan.duration,
                endpoints.len(),
                &plan.client_groups(),
                &qps,
                &counts,
            ));
        }

        if let Some(cap) = &mut capacity {
            cap.finish(self.store, &plan.run_id).await;
        }
        // The end: workers flush their final counts, then servers stop.
        self.progress.show("stopping workers");
        self.record_stopping(Stopping::LoadPhaseEnded).await;
        let exits: Vec<MemberExit> = self.launcher.stop_clients(CLIENT_STOP_GRACE).await;
        sampler.finish().await;
        scrape_server_metrics(self.store, self.launcher, plan, SCRAPE_BUDGET).await;
        let all_events = bounded(STORE_CALL_LIMIT, self.store.events(&plan.run_id, 0))
            .await
            .unwrap_or_default();
        let late: Vec<_> = all_events
            .iter()
            .filter(|e| e.id > rules.last_event_id())
            .cloned()
            .collect();
        let finished_cleanly: BTreeSet<String> = all_events
            .into_iter()
            .filter(|e| e.kind == EventKind::Success)
            .map(|e| e.member_id)
            .collect();
        let mut verdict = Verdict::Pass;
        let slo = self.judge_slo(started_ms).await;
        if let Some(blame) = failfast::at_end(&late, &exits, &finished_cleanly) {
            if blame.record {
                self.record(&blame.member, EventKind::Failure, &blame.reason)
                    .await;
            }
            verdict = Verdict::Fail {
                member: blame.member,
                reason: blame.reason,
            };
        }
        if verdict == Verdict::Pass
            && let Some(breach) = slo::first_breach(&slo)
        {
            self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
            verdict = Verdict::Fail {
                member: SLO_MEMBER.into(),
                reason: breach,
            };
        }
        self.progress.show("stopping servers");
        self.launcher.stop_servers(SERVER_STOP_GRACE).await;
        if verdict == Verdict::Pass {
            for name in endpoints.keys() {
                let details = if plan.external(name).is_some() {
                    "left running (an external server)"
                } else {
                    "stopped after the run"
                };
                self.record(name, EventKind::Success, details).await;
            }
        }
        verdict
    }

    /// The `abort_on_fail` SLO rules past their delay, judged on the counts so far: the first
    /// breach (a rule with nothing measured yet is not judged live). On a breach every rule's
    /// verdict is saved as of now.
    async fn slo_live(&mut self, started_ms: i64, elapsed: Duration) -> Option<String> {
        let due: Vec<&slo::Rule> = self
            .plan
            .slo
            .iter()
            .filter(|r| r.abort_on_fail && elapsed >= r.delay)
            .collect();
        if due.is_empty() {
            return None;
        }
        let rows = match bounded(STORE_CALL_LIMIT, slo_rows(self.store, &self.plan.run_id)).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("SLO rules not checked this poll: {e}");
                return None;
            }
        };
        let groups = self.plan.client_groups();
        let window = (started_ms, stress_common::now_ms());
        let breach = due.iter().find_map(|r| {
            let o = r.judge(&rows, group_members(&groups, r).as_deref(), window);
            (o.observed.is_some() && !o.ok).then_some(o)
        })?;
        self.judge_slo(started_ms).await;
        slo::first_breach(&[breach])
    }

    /// Every SLO rule judged on the counts so far over the run since the workers started, and
    /// saved in the store (the report reads them there).
    async fn judge_slo(&mut self, started_ms: i64) -> Vec<slo::Outcome> {
        if self.plan.slo.is_empty() {
            return Vec::new();
        }
        // Counts that cannot be read are not a breach: the rules go unjudged (the report
        // says the store's data is missing).
        let rows = match bounded(END_SAVE_LIMIT, slo_rows(self.store, &self.plan.run_id)).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("SLO rules not judged: the counts cannot be read: {e}");
                return Vec::new();
            }
        };
        let groups = self.plan.client_groups();
        let window = (started_ms, stress_common::now_ms());
        let outcomes: Vec<slo::Outcome> = self
            .plan
            .slo
            .iter()
            .map(|r| r.judge(&rows, group_members(&groups, r).as_deref(), window))
            .collect();
        let json: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|o| serde_json::to_value(o).expect("plain data serialises"))
            .collect();
        if let Err(e) = bounded(
            STORE_CALL_LIMIT,
            self.store
                .save_slo_results(self.plan.run_id.as_str(), &json),
        )
        .await
        {
            tracing::warn!("SLO verdicts not saved: {e}");
        }
        outcomes
    }

    /// What one poll sees: exits first (when a member ended, nothing else is read: the rules
    /// fire on it at once), then the store.
    async fn observe(&mut self, rules: &FailFast) -> Poll {
        let exits = self.launcher.exited().await;
        if !exits.is_empty() {
            return Poll {
                now_ms: stress_common::now_ms(),
                exits,
                ..Poll::default()
            };
        }
        let run_id = &self.plan.run_id;
        let (events, heartbeats, latest_qps) = tokio::join!(
            bounded(
                STORE_CALL_LIMIT,
                self.store.events(run_id, rules.last_event_id())
            ),
            bounded(STORE_CALL_LIMIT, self.store.heartbeats(run_id)),
            bounded(STORE_CALL_LIMIT, self.store.latest_qps(run_id)),
        );
        let not_running = rules
            .clients()
            .into_iter()
            .filter(|m| !self.launcher.is_running(m))
            .collect();
        // External servers: the launcher cannot see them end, so each poll probes them, all
        // at once (a hung one costs PROBE_TIMEOUT, not one each).
        let probes = self
            .plan
            .externals
            .iter()
            .map(|e| external::probe_live(e, PROBE_TIMEOUT));
        let server_probes = self
            .plan
            .externals
            .iter()
            .map(|e| e.name.to_string())
            .zip(futures::future::join_all(probes).await)
            .collect();
        Poll {
            now_ms: stress_common::now_ms(),
            exits,
            events: Some(events),
            heartbeats: Some(heartbeats),
            latest_qps: Some(latest_qps),
            not_running,
            server_probes,
        }
    }
}

/// Capacity mode's I/O: every check interval reads the workers' counts, feeds each group's
/// window to its current phase's controller ([`capacity`] decides), writes the new per-worker
/// targets (concurrency and the phase's model mix) and saves the phase's record, so the report
/// (and a later `driver report`) has the trace. A group's phases run one after the other.
struct CapacityRun {
    groups: Vec<GroupControl>,
    interval: Duration,
    next_check: tokio::time::Instant,
    started_ms: i64,
    /// The servers' /metrics (and Prometheus) at every check: autoscaler thresholds.
    autoscale: autoscale::Collector,
}

struct GroupControl {
    group: String,
    members: Vec<String>,
    config: capacity::ControllerConfig,
    spike: Option<crate::matrix::SpikeSettings>,
    phases: Vec<capacity::PhaseSpec>,
    /// The phase running now (`phases.len()`: all done).
    current: usize,
    stage: Stage,
    meter: capacity::WindowMeter,
    /// The ended phases' answers (the spike jumps from one of them).
    answers: Vec<(CapacityPhase, Option<u32>)>,
}

/// What runs a phase: the AIMD controller, or the spike.
enum Stage {
    Aimd(capacity::Controller),
    Spike(Box<spike::Spike>),
}

impl Stage {
    fn load(&self) -> spike::GroupLoad {
        match self {
            Stage::Aimd(c) => spike::GroupLoad::closed(c.concurrency()),
            Stage::Spike(s) => s.load(),
        }
    }

    fn check(&mut self, window: capacity::Window, now_ms: i64) -> spike::GroupLoad {
        match self {
            Stage::Aimd(c) => spike::GroupLoad::closed(c.check(window)),
            Stage::Spike(s) => s.check(window, now_ms),
        }
    }

    fn ended(&self) -> bool {
        match self {
            Stage::Aimd(c) => c.ended(),
            Stage::Spike(s) => s.ended(),
        }
    }

    fn out_of_time(&mut self) {
        match self {
            Stage::Aimd(c) => c.out_of_time(),
            Stage::Spike(s) => s.out_of_time(),
        }
    }
}

impl GroupControl {
    fn done(&self) -> bool {
        self.current >= self.phases.len()
    }

    /// The stage of phase `current`: a spike jumps from an earlier phase's answer; any other
    /// phase's controller starts at min_concurrency.
    fn stage_for(&self) -> Stage {
        let spec = self.phases.get(self.current);
        match (spec.map(|p| p.phase), &self.spike) {
            (Some(CapacityPhase::Spike), Some(s)) => {
                Stage::Spike(Box::new(spike::Spike::new(spike::SpikeConfig {
                    target_rps: s.target_rps,
                    duration_ms: millis(s.duration),
                    recovery_timeout_ms: millis(s.recovery_timeout),
                    target_p99_us: self.config.target_p99_us,
                    tolerance: self.config.tolerance,
                    from_concurrency: spike::jump_from(&self.answers, self.config.min),
                })))
            }
            _ => Stage::Aimd(capacity::Controller::new(self.config.clone())),
        }
    }

    /// The targets of the current phase for `load` (concurrency and a spike's rate split
    /// across the workers).
    async fn write_targets(&self, store: &Store, run_id: &RunId, load: spike::GroupLoad) {
        let mix = self.phases.get(self.current).and_then(|p| p.mix.clone());
        let shares = capacity::split(load.concurrency, self.members.len());
        let rate = load.rate.map(|r| r / self.members.len().max(1) as f64);
        for (member, share) in self.members.iter().zip(shares) {
            let target = LoadTarget {
                concurrency: share,
                mix: mix.clone(),
                rate,
                count_unanswered: load.count_unanswered,
            };
            if let Err(e) = bounded(
                STORE_CALL_LIMIT,
                store.set_load_target(run_id.as_str(), member, &target),
            )
            .await
            {
                tracing::warn!("load target of {member} not written: {e}");
            }
        }
    }

    fn record(&self, autoscale: &autoscale::Collector) -> Option<capacity::PhaseRecord> {
        let spec = self.phases.get(self.current)?;
        Some(match &self.stage {
            Stage::Aimd(c) => {
                let mut record = capacity::PhaseRecord::of(&self.group, spec, c);
                record.autoscaler = autoscale.autoscaler(&self.group, c);
                record
            }
            Stage::Spike(s) => capacity::PhaseRecord::of_spike(&self.group, spec, s),
        })
    }

    /// Saves the current phase's record; returns its answer (the concurrency it found).
    async fn save(
        &self,
        store: &Store,
        run_id: &RunId,
        autoscale: &autoscale::Collector,
    ) -> Option<u32> {
        let record = self.record(autoscale)?;
        let json = serde_json::to_value(&record).expect("plain data serialises");
        if let Err(e) = bounded(
            STORE_CALL_LIMIT,
            store.save_capacity_phase(run_id.as_str(), &self.group, &record.key, &json),
        )
        .await
        {
            tracing::warn!(
                "capacity phase {}/{} not saved: {e}",
                self.group,
                record.key
            );
        }
        record.result.concurrency
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl CapacityRun {
    /// None for a soak run.
    fn new(plan: &RunPlan, started_ms: i64) -> Option<Self> {
        let settings = plan.capacity.as_ref()?;
        let groups = plan.client_groups();
        Some(CapacityRun {
            groups: plan
                .capacity_configs()
                .into_iter()
                .map(|(group, config)| {
                    let models = plan
                        .clients
                        .iter()
                        .find(|c| c.group == group)
                        .map(|c| c.template.models.clone())
                        .unwrap_or_default();
                    let mut g = GroupControl {
                        members: groups[&group].iter().map(|m| m.to_string()).collect(),
                        phases: capacity::phases_for(settings, &models),
                        current: 0,
                        stage: Stage::Aimd(capacity::Controller::new(config.clone())),
                        config,
                        spike: settings.spike.clone(),
                        meter: capacity::WindowMeter::default(),
                        answers: Vec::new(),
                        group,
                    };
                    g.stage = g.stage_for();
                    g
                })
                .collect(),
            interval: settings.check_interval,
            next_check: tokio::time::Instant::now() + settings.check_interval,
            started_ms,
            autoscale: autoscale::Collector::default(),
        })
    }

    /// Before the workers start: the first phase's targets (its mix, min_concurrency).
    async fn start(&self, store: &Store, run_id: &RunId) {
        for g in &self.groups {
            g.write_targets(store, run_id, g.stage.load()).await;
        }
    }

    fn due(&self) -> bool {
        tokio::time::Instant::now() >= self.next_check
    }

    fn all_ended(&self) -> bool {
        self.groups.iter().all(GroupControl::done)
    }

    async fn check(&mut self, store: &Store, run_id: &RunId) {
        self.next_check = tokio::time::Instant::now() + self.interval;
        let counts = match bounded(STORE_CALL_LIMIT, store.model_counts(run_id.as_str())).await {
            Ok(c) => c,
            Err(e) => {
                // The next check reads again: the windows are measured from the counts.
                tracing::warn!("capacity check skipped: {e}");
                return;
            }
        };
        let now_ms = stress_common::now_ms();
        self.autoscale.scrape(now_ms).await;
        for g in &mut self.groups {
            if g.done() {
                continue;
            }
            let window = g.meter.window(&counts, &g.members, self.started_ms, now_ms);
            let before = g.stage.load();
            let next = g.stage.check(window, now_ms);
            tracing::info!(
                group = g.group,
                phase = g.phases[g.current].key,
                concurrency = before.concurrency,
                next = next.concurrency,
                rate = next.rate,
                "capacity check"
            );
            let answer = g.save(store, run_id, &self.autoscale).await;
            if g.stage.ended() {
                g.answers.push((g.phases[g.current].phase, answer));
                g.current += 1;
                g.stage = g.stage_for();
                if !g.done() {
                    g.write_targets(store, run_id, g.stage.load()).await;
                }
            } else if next != before {
                g.write_targets(store, run_id, next).await;
            }
            // A spike ends at its time, not at the next regular check.
            if let Stage::Spike(s) = &g.stage
                && let Some(at_ms) = s.next_change_ms()
            {
                let wait = Duration::from_millis(u64::try_from(at_ms - now_ms).unwrap_or(0));
                self.next_check = self.next_check.min(tokio::time::Instant::now() + wait);
            }
        }
    }

    /// The run's end: the phase still going is out of time (phases not started have no record).
    async fn finish(&mut self, store: &Store, run_id: &RunId) {
        for g in &mut self.groups {
            if !g.done() {
                g.stage.out_of_time();
                g.save(store, run_id, &self.autoscale).await;
            }
        }
    }
}

/// A group rule's members (None: a run-level rule, every client).
fn group_members(
    groups: &BTreeMap<String, Vec<MemberName>>,
    rule: &slo::Rule,
) -> Option<Vec<String>> {
    let g = rule.group.as_ref()?;
    Some(
        groups
            .get(g)
            .map(|m| m.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
    )
}

/// The workers' cumulative counts as the SLO rules read them: per scenario, and per model.
async fn slo_rows(store: &Store, run_id: &RunId) -> Result<Vec<slo::Row>, StoreError> {
    let decode = |text: &str| LatencyHistogram::decode(text).unwrap_or_default();
    let mut rows: Vec<slo::Row> = store
        .scenario_counts(run_id.as_str())
        .await?
        .into_iter()
        .map(|(member, c)| slo::Row {
            latency: decode(&c.latency_histogram),
            member,
            scenario: c.scenario,
            model: None,
            tests: c.tests,
            failures: c.failures,
            requests: c.requests,
        })
        .collect();
    rows.extend(
        store
            .model_counts(run_id.as_str())
            .await?
            .into_iter()
            .map(|(member, _, c)| slo::Row {
                latency: decode(&c.latency_histogram),
                member,
                scenario: c.scenario,
                model: Some(c.model),
                tests: c.tests,
                failures: c.failures,
                requests: c.requests,
            }),
    );
    Ok(rows)
}

/// Loads a matrix and prepares a run directory; errors here are bad input (exit 2).
pub fn prepare(options: &RunOptions) -> Result<(Matrix, String, PathBuf), DriverError> {
    let matrix = matrix::load(&options.matrix)?;
    if let Some(d) = options.duration {
        stress_common::contract::limits::within(
            d,
            Duration::ZERO,
            stress_common::contract::limits::MAX_DURATION,
        )
        .map_err(|e| DriverError::Config(format!("--duration {e}")))?;
    }
    if let Some(d) = options.duration
        && d < matrix.run.poll_interval
    {
        return Err(DriverError::Config(format!(
            "--duration {d:?} is shorter than the poll interval {:?}",
            matrix.run.poll_interval
        )));
    }
    let run_id = options
        .run_id
        .clone()
        .unwrap_or_else(|| new_run_id(&matrix.run.name));
    let run_dir = options.runs_dir.join(&run_id);
    std::fs::create_dir_all(run_dir.join("logs")).map_err(|error| DriverError::RunDir {
        path: run_dir.clone(),
        error,
    })?;
    let _ = std::fs::copy(&options.matrix, run_dir.join("matrix.yaml"));
    Ok((matrix, run_id, run_dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stress_common::contract::MemberName;
    use stress_common::status::ScenarioCounts;

    #[test]
    fn the_progress_line_shows_each_group_s_qps_and_failures() {
        let name = |n: &str| MemberName::new(n);
        let groups: BTreeMap<String, Vec<MemberName>> = [
            ("grpc".to_string(), vec![name("grpc-0"), name("grpc-1")]),
            ("http".to_string(), vec![name("http-0")]),
        ]
        .into();
        let counts = |tests, failures| ScenarioCounts {
            tests,
            failures,
            ..Default::default()
        };
        let line = progress_line(
            Duration::from_secs(12),
            Duration::from_secs(60),
            2,
            &groups,
            &[
                ("grpc-0".into(), 100.0),
                ("grpc-1".into(), 50.4),
                ("http-0".into(), 7.0),
            ],
            &[
                ("grpc-0".into(), counts(5, 1)),
                ("grpc-1".into(), counts(3, 0)),
                ("http-0".into(), counts(2, 2)),
            ],
        );
        assert_eq!(
            line,
            "[   12s/60s] servers up 2 | grpc: 2 workers, QPS 150, tests 8, failures 1 \
             | http: 1 workers, QPS 7, tests 2, failures 2"
        );
    }
}
