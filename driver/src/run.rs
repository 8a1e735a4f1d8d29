//! The driver loop: matrix → servers → workers → status store → poll → fail fast → report.
//!
//! Every poll interval it reads the store and the launcher and stops the run on the first of:
//! a FAILURE event, a member that ends before the run does, a worker heartbeat older than
//! `heartbeat_timeout_polls` intervals, or a worker reporting zero QPS for `zero_qps_polls`
//! consecutive samples. On failure everything stops at once and the logs stay; at the end of
//! the duration workers get SIGTERM, flush their final counts, and only then do servers stop.

use crate::launcher::{LaunchError, Launcher, MemberExit, ServerEndpoint, WorkerAssignment};
use crate::matrix::{self, ClientMember, Matrix, MatrixError, ServerMember};
use crate::report::Report;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stress_common::status::{EventKind, Role};
use stress_common::store::{Member, NewRun, Store, StoreError};
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
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail { .. } => "FAIL",
            Verdict::Aborted(_) => "ABORTED",
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Pass => 0,
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

/// How long a worker may take from launch to its first heartbeat.
const STARTUP_GRACE: Duration = Duration::from_secs(15);
/// Grace for stopping everything on the failure path (signal all, then kill).
const FAILURE_STOP_GRACE: Duration = Duration::from_secs(2);
/// Grace for workers to finish in-flight tests and flush on the success path.
const CLIENT_STOP_GRACE: Duration = Duration::from_secs(15);
const SERVER_STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the failure path may wait for the servers' /metrics in all: a hung server accepts
/// the connection and never answers, and must not hold up the fail-fast bound (5 s) by itself.
const FAILURE_SCRAPE_BUDGET: Duration = Duration::from_secs(1);
/// The same on the success path, where nothing is in a hurry.
const SCRAPE_BUDGET: Duration = Duration::from_secs(30);

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

/// Tracks the fail-fast rules over successive polls.
struct Watch {
    last_event_id: i64,
    /// Per client: when it was launched, its last QPS sample time, consecutive zero samples.
    clients: HashMap<String, (Instant, i64, u32)>,
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
    let store_url = store_url_for(run_dir, options.database_url.as_deref());
    let store = Store::connect(&store_url).await?;
    // The matrix as written, so `driver report` shows what was run even if the file changes.
    let matrix_text = std::fs::read_to_string(&options.matrix).unwrap_or_default();
    store
        .create_run(&NewRun {
            run_id: run_id.into(),
            name: matrix.run.name.clone(),
            matrix_yaml: matrix_text,
            launcher: launcher.name().into(),
            started_at_ms: stress_common::now_ms(),
        })
        .await?;
    let servers = matrix.servers();
    for s in &servers {
        store
            .upsert_member(&server_member(run_id, matrix, s))
            .await?;
    }
    for c in &matrix.clients() {
        store
            .upsert_member(&client_member(run_id, matrix, c))
            .await?;
    }

    let duration = options.duration.unwrap_or(matrix.run.duration);
    let poll = matrix.run.poll_interval;
    let mut progress = Progress {
        tty: options
            .progress
            .unwrap_or_else(|| std::io::stderr().is_terminal()),
        last_line: Instant::now() - Duration::from_secs(3600),
    };

    let verdict = drive(
        &store,
        launcher,
        matrix,
        run_id,
        &store_url,
        duration,
        poll,
        &mut progress,
        &cancel,
    )
    .await;
    progress.done();

    // Record what the report needs before anything is cleaned up.
    let failed = match &verdict {
        Verdict::Pass => None,
        other => Some(other.clone()),
    };
    if failed.is_some() {
        scrape_server_metrics(
            &store,
            launcher,
            run_id,
            &servers_of(matrix),
            FAILURE_SCRAPE_BUDGET,
        )
        .await;
        launcher.stop_all(FAILURE_STOP_GRACE).await;
    }
    save_diagnostics(&store, launcher, run_id).await;
    store
        .finish_run(run_id, verdict.as_str(), stress_common::now_ms())
        .await?;
    let report = Report::from_store(&store, run_id).await?;
    write_report(run_dir, &report)?;
    let keep = if failed.is_some() && options.keep_failed.unwrap_or(matrix.run.keep_failed) {
        kept_for_inspection(&store, matrix, run_id).await
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

/// What a failed run keeps for inspection: every member with a FAILURE event, and for a
/// client the servers it talked to.
async fn kept_for_inspection(store: &Store, matrix: &Matrix, run_id: &str) -> BTreeSet<String> {
    let failed: BTreeSet<String> = store
        .events(run_id, 0)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind == EventKind::Failure && e.member_id != DRIVER_MEMBER)
        .map(|e| e.member_id)
        .collect();
    let mut keep = failed.clone();
    for c in matrix.clients() {
        if failed.contains(&c.name) {
            keep.extend(c.targets);
        }
    }
    keep
}

/// A server as the store knows it before launch (no address or command yet).
fn server_member(run_id: &str, matrix: &Matrix, s: &ServerMember) -> Member {
    Member {
        run_id: run_id.into(),
        member_id: s.name.clone(),
        role: Role::Server,
        group_name: s.group.clone(),
        index: s.index,
        address: String::new(),
        process_name: matrix.qualified_name(&s.name),
        corr_id_base: None,
        corr_id_block_size: None,
        command: String::new(),
    }
}

/// A client as the store knows it before launch, with its correlation-id block.
fn client_member(run_id: &str, matrix: &Matrix, c: &ClientMember) -> Member {
    Member {
        run_id: run_id.into(),
        member_id: c.name.clone(),
        role: Role::Client,
        group_name: c.group.clone(),
        index: c.index,
        address: String::new(),
        process_name: matrix.qualified_name(&c.name),
        corr_id_base: Some(c.corr_id_base),
        corr_id_block_size: Some(c.corr_id_block_size),
        command: String::new(),
    }
}

fn servers_of(matrix: &Matrix) -> Vec<String> {
    matrix.servers().into_iter().map(|s| s.name).collect()
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
    .map_err(io)
}

/// Scrapes Triton's /metrics of every server still up into the store, parsed per model, giving
/// up on the servers that have not answered within `budget` (all together).
async fn scrape_server_metrics(
    store: &Store,
    launcher: &mut dyn Launcher,
    run_id: &str,
    servers: &[String],
    budget: Duration,
) {
    let deadline = tokio::time::Instant::now() + budget;
    for s in servers {
        let text = tokio::time::timeout_at(deadline, launcher.server_metrics(s)).await;
        if let Ok(Some(text)) = text {
            // The metrics alone: the rest of a server's diagnostics is taken only when it
            // failed (save_diagnostics), and can take seconds (a pod's logs and events).
            let d = crate::launcher::MemberDiagnostics {
                launcher: launcher.name().into(),
                command: launcher.command_line(s),
                location: launcher.locate(s),
                server_metrics: Some(stress_common::triton_metrics::parse(&text)),
                ..Default::default()
            };
            if let Err(e) = store.save_diagnostics(run_id, s, &d.to_json()).await {
                tracing::warn!("server metrics of {s} not recorded: {e}");
            }
        }
    }
}

/// Saves launcher diagnostics of every member with a FAILURE event (keeping the server metrics
/// saved before).
async fn save_diagnostics(store: &Store, launcher: &mut dyn Launcher, run_id: &str) {
    use crate::launcher::MemberDiagnostics;
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
        if done.contains(&e.member_id) || e.member_id == DRIVER_MEMBER {
            continue;
        }
        done.push(e.member_id.clone());
        let mut d = launcher.diagnostics(&e.member_id).await;
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

/// A worker's failure is often its server's: before blaming the worker, probe the servers it
/// targets. The first that is not live takes the blame (the worker's view goes in the reason).
async fn attribute(
    launcher: &mut dyn Launcher,
    targets: &HashMap<String, Vec<String>>,
    member: &str,
    reason: String,
) -> (String, String) {
    for server in targets.get(member).into_iter().flatten() {
        if let Err(why) = launcher.server_live(server, PROBE_TIMEOUT).await {
            return (
                server.clone(),
                format!("{why}; {member} reported: {reason}"),
            );
        }
    }
    (member.to_string(), reason)
}

/// The member id under which the driver records run-level events (e.g. an interruption).
pub const DRIVER_MEMBER: &str = "driver";

#[allow(clippy::too_many_arguments)]
async fn drive(
    store: &Store,
    launcher: &mut dyn Launcher,
    matrix: &Matrix,
    run_id: &str,
    store_url: &str,
    duration: Duration,
    poll: Duration,
    progress: &mut Progress,
    cancel: &CancellationToken,
) -> Verdict {
    let fail = |member: &str, reason: String| Verdict::Fail {
        member: member.into(),
        reason,
    };
    let record = |member: String, kind: EventKind, details: String| async move {
        if let Err(e) = store.record_event(run_id, &member, kind, &details).await {
            tracing::warn!("event of {member} not recorded: {e}");
        }
    };
    let launch_failure = |e: LaunchError| match e {
        LaunchError::Member { member, reason } => (member, reason),
        LaunchError::Setup(reason) => (DRIVER_MEMBER.to_string(), reason),
    };

    // Servers.
    for s in matrix.servers() {
        record(s.name.clone(), EventKind::Starting, "launching".into()).await;
        if let Err(e) = launcher.start_server(&s).await {
            let (member, reason) = launch_failure(e);
            record(member.clone(), EventKind::Failure, reason.clone()).await;
            return fail(&member, reason);
        }
        let _ = store
            .upsert_member(&Member {
                command: launcher.command_line(&s.name).unwrap_or_default(),
                ..server_member(run_id, matrix, &s)
            })
            .await;
    }
    progress.show(&format!(
        "waiting for {} server(s) to be ready",
        matrix.servers().len()
    ));
    let ready = tokio::select! {
        r = launcher.wait_servers_ready(matrix.run.server_ready_timeout) => r,
        _ = cancel.cancelled() => return Verdict::Aborted("interrupted while servers started".into()),
    };
    let endpoints: BTreeMap<String, ServerEndpoint> = match ready {
        Ok(ready) => ready
            .into_iter()
            .map(|ep| (ep.member.clone(), ep))
            .collect(),
        Err(e) => {
            let (member, reason) = launch_failure(e);
            record(member.clone(), EventKind::Failure, reason.clone()).await;
            return fail(&member, reason);
        }
    };
    for s in matrix.servers() {
        let Some(ep) = endpoints.get(&s.name) else {
            continue;
        };
        let at = launcher.locate(&s.name).unwrap_or_default();
        let _ = store
            .upsert_member(&Member {
                address: format!("grpc={} http={} metrics={}", ep.grpc, ep.http, ep.metrics),
                command: launcher.command_line(&s.name).unwrap_or_default(),
                ..server_member(run_id, matrix, &s)
            })
            .await;
        record(
            s.name.clone(),
            EventKind::Running,
            format!(
                "ready ({at}; grpc {} http {} metrics {})",
                ep.grpc, ep.http, ep.metrics
            ),
        )
        .await;
    }
    tokio::select! {
        _ = tokio::time::sleep(matrix.run.warmup) => {}
        _ = cancel.cancelled() => return Verdict::Aborted("interrupted during warm-up".into()),
    }

    // Workers: every client talks to every server of its target group.
    let perf_analyzer = stress_common::tritonserver::find_tool(
        "perf_analyzer",
        "PERF_ANALYZER",
        matrix.source_path.as_deref().and_then(Path::parent),
    );
    let mut watch = Watch {
        last_event_id: 0,
        clients: HashMap::new(),
    };
    for c in matrix.clients() {
        let servers: Vec<String> = c
            .targets
            .iter()
            .filter_map(|t| endpoints.get(t))
            .map(|ep| ep.for_protocol(c.template.protocol).to_string())
            .collect();
        let assignment = WorkerAssignment {
            run_id: run_id.into(),
            member_id: c.name.clone(),
            servers,
            store_url: store_url.into(),
            poll_interval: poll,
            // Margin: the driver stops workers itself; this only ends orphans.
            duration: duration + Duration::from_secs(60),
            perf_analyzer: perf_analyzer.as_ref().map(|p| p.display().to_string()),
        };
        if let Err(e) = launcher.start_client(&c, &assignment).await {
            let (member, reason) = launch_failure(e);
            record(member.clone(), EventKind::Failure, reason.clone()).await;
            return fail(&member, reason);
        }
        record(
            c.name.clone(),
            EventKind::Starting,
            format!(
                "launched ({})",
                launcher.locate(&c.name).unwrap_or_default()
            ),
        )
        .await;
        let _ = store
            .upsert_member(&Member {
                address: assignment.servers.join(","),
                command: launcher.command_line(&c.name).unwrap_or_default(),
                ..client_member(run_id, matrix, &c)
            })
            .await;
        watch.clients.insert(c.name.clone(), (Instant::now(), 0, 0));
    }

    let targets: HashMap<String, Vec<String>> = matrix
        .clients()
        .into_iter()
        .map(|c| (c.name, c.targets))
        .collect();
    // A client-side failure, attributed to a dead or hung target server when there is one.
    macro_rules! fail_client {
        ($member:expr, $reason:expr, $already_recorded:expr) => {{
            let (member, reason) = attribute(launcher, &targets, &$member, $reason).await;
            if !$already_recorded || member != $member {
                record(member.clone(), EventKind::Failure, reason.clone()).await;
            }
            return fail(&member, reason);
        }};
    }

    // Poll.
    let started = Instant::now();
    let end = tokio::time::Instant::now() + duration;
    let ff = &matrix.run.fail_fast;
    let heartbeat_limit = poll * ff.heartbeat_timeout_polls;
    let mut ticker = tokio::time::interval(poll);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::time::sleep_until(end) => break,
            _ = cancel.cancelled() => {
                record(DRIVER_MEMBER.into(), EventKind::Failure, "driver interrupted (SIGTERM/SIGINT)".into()).await;
                return Verdict::Aborted("driver interrupted (SIGTERM/SIGINT)".into());
            }
        }
        // 1. A member that ended early.
        if let Some(exit) = launcher.exited().await.into_iter().next() {
            let reason = format!("{} before the end of the run", exit.describe());
            record(exit.member_id.clone(), EventKind::Failure, reason.clone()).await;
            return fail(&exit.member_id, reason);
        }
        // 2. A FAILURE event.
        match store.events(run_id, watch.last_event_id).await {
            Ok(events) => {
                for e in events {
                    watch.last_event_id = e.id;
                    if e.kind == EventKind::Failure {
                        fail_client!(e.member_id, e.details, true);
                    }
                }
            }
            Err(e) => tracing::warn!("polling events: {e}"),
        }
        // 3. Stale heartbeats.
        let now_ms = stress_common::now_ms();
        if let Ok(beats) = store.heartbeats(run_id).await {
            let beats: HashMap<String, i64> = beats.into_iter().collect();
            // The start-up grace counts from when a member actually runs: a pod may wait for
            // a node or an image first, and the launcher fails it itself when that takes too long.
            for (member, (launched, _, _)) in watch.clients.iter_mut() {
                if !beats.contains_key(member) && !launcher.is_running(member) {
                    *launched = Instant::now();
                }
            }
            for (member, (launched, _, _)) in &watch.clients {
                let stale = match beats.get(member) {
                    Some(at) => {
                        Duration::from_millis((now_ms - at).max(0) as u64) > heartbeat_limit
                    }
                    None => launched.elapsed() > STARTUP_GRACE.max(heartbeat_limit),
                };
                if stale {
                    let reason = match beats.get(member) {
                        Some(at) => format!(
                            "no heartbeat for {:.1} s (limit {} polls of {:?})",
                            (now_ms - at) as f64 / 1000.0,
                            ff.heartbeat_timeout_polls,
                            poll
                        ),
                        None => format!(
                            "no heartbeat within {:?} of launch",
                            STARTUP_GRACE.max(heartbeat_limit)
                        ),
                    };
                    fail_client!(member.clone(), reason, false);
                }
            }
        }
        // 4. Zero QPS for consecutive samples.
        let mut total_qps = 0.0;
        if let Ok(latest) = store.latest_qps(run_id).await {
            for q in latest {
                total_qps += q.qps;
                if let Some((_, last_at, zeros)) = watch.clients.get_mut(&q.member_id)
                    && q.at_ms != *last_at
                {
                    *last_at = q.at_ms;
                    *zeros = if q.qps == 0.0 { *zeros + 1 } else { 0 };
                    if *zeros >= ff.zero_qps_polls {
                        let reason = format!("QPS 0 for {} consecutive polls", zeros);
                        fail_client!(q.member_id.clone(), reason, false);
                    }
                }
            }
        }
        let (tests, failures) = store
            .scenario_counts(run_id)
            .await
            .map(|c| {
                c.iter()
                    .fold((0, 0), |(t, f), (_, s)| (t + s.tests, f + s.failures))
            })
            .unwrap_or((0, 0));
        progress.show(&format!(
            "[{:>5.0}s/{:.0}s] servers {} up, workers {} up, QPS {:.0}, tests {}, failures {}",
            started.elapsed().as_secs_f64(),
            duration.as_secs_f64(),
            endpoints.len(),
            watch.clients.len(),
            total_qps,
            tests,
            failures
        ));
    }

    // The end: workers flush their final counts, then servers stop.
    progress.show("stopping workers");
    let exits: Vec<MemberExit> = launcher.stop_clients(CLIENT_STOP_GRACE).await;
    scrape_server_metrics(store, launcher, run_id, &servers_of(matrix), SCRAPE_BUDGET).await;
    let mut verdict = Verdict::Pass;
    if let Ok(events) = store.events(run_id, watch.last_event_id).await
        && let Some(e) = events.into_iter().find(|e| e.kind == EventKind::Failure)
    {
        verdict = fail(&e.member_id, e.details);
    }
    // A worker records SUCCESS itself, after its final flush. When the launcher lost its exit
    // status (a kubelet that deleted the pod reports the container as ContainerStatusUnknown),
    // that record is the evidence of a clean end; a known non-zero exit still fails the run.
    let finished_cleanly: BTreeSet<String> = store
        .events(run_id, 0)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind == EventKind::Success)
        .map(|e| e.member_id)
        .collect();
    if verdict == Verdict::Pass
        && let Some(e) = exits.iter().find(|e| {
            let clean =
                e.success() || (e.status_unknown() && finished_cleanly.contains(&e.member_id));
            !clean
        })
    {
        let reason = format!("{} at the end of the run", e.describe());
        record(e.member_id.clone(), EventKind::Failure, reason.clone()).await;
        verdict = fail(&e.member_id, reason);
    }
    progress.show("stopping servers");
    launcher.stop_servers(SERVER_STOP_GRACE).await;
    if verdict == Verdict::Pass {
        for name in endpoints.keys() {
            record(
                name.clone(),
                EventKind::Success,
                "stopped after the run".into(),
            )
            .await;
        }
    }
    verdict
}

/// Loads a matrix and prepares a run directory; errors here are bad input (exit 2).
pub fn prepare(options: &RunOptions) -> Result<(Matrix, String, PathBuf), DriverError> {
    let matrix = matrix::load(&options.matrix)?;
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
