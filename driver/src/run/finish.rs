//! The end of a run: its verdict recorded and its report read back, the report's files written,
//! and what the store keeps of the servers and failed members: /metrics, log excerpts around
//! each failure, trace summaries and diagnostics.

use super::{DriverError, STORE_CALL_LIMIT, Verdict, is_harness};
use crate::launcher::Launcher;
use crate::plan::RunPlan;
use crate::report::Report;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::retry::{RetryError, RetryPolicy, retry};
use stress_common::status::EventKind;
use stress_common::store::{Store, within as bounded};
use stress_common::tritonserver;

/// Why one attempt at recording the verdict and reading the report back failed.
#[derive(Debug, thiserror::Error)]
enum FinishAttemptError {
    /// The verdict was not recorded.
    #[error(transparent)]
    Finish(#[from] stress_common::store::StoreError),
    /// The report was not read back.
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

/// Records the verdict and reads the report back, retrying a store that is down or does not
/// answer for `deadline` (the store outage limit of the fail-fast rules); the error is the last
/// attempt's, with how many were made. Read once the verdict is recorded, the report's
/// judgement is the run's final one, and `Report::from_store` saves it: later reports
/// (`driver report`, `driver serve`, a baseline) read it rather than judge the run again.
pub(super) async fn finish_and_read(
    store: &Store,
    run_id: &RunId,
    verdict: &Verdict,
    deadline: Duration,
) -> Result<Report, RetryError> {
    let policy = RetryPolicy {
        attempts: u32::MAX,
        first_pause: Duration::from_millis(500),
        budget: deadline,
    };
    let finished_at_ms = stress_common::now_ms();
    retry("finishing the run in the status store", policy, || async {
        store
            .finish_run(run_id, verdict.as_str(), finished_at_ms)
            .await?;
        Ok::<_, FinishAttemptError>(Report::from_store(store, run_id).await?)
    })
    .await
}

/// Saves the run's summary (its row in `driver runs` and `driver serve`), within the store
/// call limit; a report the store could not complete has none.
pub(super) async fn save_summary(store: &Store, run_id: &RunId, report: &Report) {
    if report.incomplete.is_none()
        && let Err(e) = bounded(
            STORE_CALL_LIMIT,
            store.save_document(run_id, "", &crate::report::summary::RunSummary::of(report)),
        )
        .await
    {
        tracing::warn!("run summary not saved: {e}");
    }
}

/// Looks for change points over the matrix's history up to this run (its runs in `store_url`'s
/// store and the run directories under `runs_dir`), sets them on `report` and saves them with the
/// run. A run not measured in full, or a report the store could not complete, looks for none.
pub(super) async fn save_change_points(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
    settings: &crate::matrix::RegressionSettings,
    report: &mut Report,
) {
    use crate::report::history;
    use crate::report::summary::{self, RunSource, RunSummary};
    let this = RunSummary::of(report);
    let Some(fingerprint) = this.fingerprint.clone() else {
        return;
    };
    if report.incomplete.is_some() || !history::measured_in_full(&this) {
        return;
    }
    // Every finished run the stores list is read: another matrix's runs interleave with this
    // one's.
    const LISTED: u32 = 1_000;
    let mut runs = vec![this];
    for source in [RunSource::Store(store_url), RunSource::RunsDir(runs_dir)] {
        // A store that does not answer must not hold the report back.
        match bounded(super::END_SAVE_LIMIT, summary::list(source, LISTED)).await {
            Ok(listed) => runs.extend(listed),
            Err(e) => tracing::warn!("change points: runs not listed: {e}"),
        }
    }
    let window = settings.change_point_window;
    let found = history::change_points(
        &history::history(&runs, &fingerprint, window),
        settings.min_effect,
    );
    let run_id = RunId::new(report.run_id.clone());
    if let Err(e) = bounded(STORE_CALL_LIMIT, store.save_document(&run_id, "", &found)).await {
        tracing::warn!("change points not saved: {e}");
    }
    report.change_points = Some(found);
}

/// The verdict in a sentence: PASS, or FAIL and who failed why.
pub(super) fn verdict_line(verdict: &Verdict) -> String {
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
    std::fs::write(
        run_dir.join("junit.xml"),
        crate::render::junit::render(report),
    )
    .map_err(io)?;
    std::fs::write(
        run_dir.join("report.html"),
        crate::render::html::render(report),
    )
    .map_err(io)
}

/// Where an external server is, for people: its addresses.
pub(super) fn external_location(e: &crate::matrix::ExternalServer) -> String {
    format!(
        "external server (not launched by the driver): {}",
        e.address()
    )
}

/// Triton's /metrics text of a server: an external one at its metrics address (None when the
/// matrix gives none), a launched one through its launcher.
pub(super) async fn server_metrics_text(
    launcher: &mut dyn Launcher,
    plan: &RunPlan,
    server: &str,
) -> Option<String> {
    match plan.external(server) {
        Some(e) => match &e.ports.metrics {
            Some(address) => tritonserver::metrics_text(address).await,
            None => None,
        },
        None => launcher.server_metrics(server).await,
    }
}

/// Scrapes Triton's /metrics of every server still up into the store, parsed per model, giving
/// up on the servers that have not answered within `budget` (all together). An external server
/// is scraped at its metrics address, when the matrix gives one.
pub(super) async fn scrape_server_metrics(
    store: &Store,
    launcher: &mut dyn Launcher,
    plan: &RunPlan,
    budget: Duration,
) {
    let run_id = &plan.run_id;
    let deadline = tokio::time::Instant::now() + budget;
    for s in &plan.server_names() {
        let external = plan.external(s);
        let text = tokio::time::timeout_at(deadline, server_metrics_text(launcher, plan, s)).await;
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
                store.save_document(&stress_common::contract::RunId::new(run_id), s, &d),
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
pub(super) const FAILURE_LOG_EXCERPTS: usize = 5;
/// The window of a failure's log excerpt: from a little before (the server may have logged
/// the cause first) to a moment after.
pub(super) const FAILURE_LOG_BEFORE_MS: i64 = 3_000;
pub(super) const FAILURE_LOG_AFTER_MS: i64 = 1_000;

/// Saves the log lines of the server each of the first failures went to, around its time,
/// while the logs can still be read (before cleanup deletes pods).
pub(super) async fn save_failure_logs(store: &Store, launcher: &mut dyn Launcher, plan: &RunPlan) {
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
        let excerpt = crate::launcher::logs::LogExcerpt {
            member_id: server.member_id.clone(),
            from_ms: from,
            to_ms: to,
            lines: crate::launcher::logs::excerpt(
                launcher
                    .server_log_between(&server.member_id, from, to)
                    .await,
                f.correlation_id,
            ),
        };
        if let Err(e) = store
            .save_document(&plan.run_id, &excerpt.key(), &excerpt)
            .await
        {
            tracing::warn!("log excerpt of {} not recorded: {e}", server.member_id);
        }
    }
}

/// Earlier runs of the same matrix whose signatures are read for the history.
const SIGNATURE_HISTORY_RUNS: usize = 100;
/// The last runs a signature's history counts (`seen in k of the last n`).
pub(super) const SIGNATURE_WINDOW: usize = 7;

/// Judges what the workers recorded since the driver's last read (their final flush; after a
/// failure, what came after the verdict), and saves the run's signatures with their history over
/// the earlier runs of the matrix (`judge::verdicts::RunSignatures`), for the report and the
/// next runs.
pub(super) async fn save_signatures(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
    fingerprint: &str,
    run_id: &RunId,
    started_at_ms: i64,
    verdicts: &mut crate::judge::verdicts::Verdicts,
) {
    if let Ok(rest) = bounded(
        STORE_CALL_LIMIT,
        store.failures_after(run_id, verdicts.last_failure_id()),
    )
    .await
    {
        verdicts.records(rest);
    }
    if let Ok(counts) = bounded(STORE_CALL_LIMIT, store.signature_counts(run_id)).await {
        verdicts.counts(counts);
    }
    let earlier = crate::report::baseline::earlier_signatures(
        store,
        store_url,
        runs_dir,
        fingerprint,
        run_id,
        started_at_ms,
        SIGNATURE_HISTORY_RUNS,
    )
    .await;
    let judged = crate::judge::verdicts::with_histories(
        verdicts.signatures(),
        verdicts.known(),
        &earlier,
        SIGNATURE_WINDOW,
    );
    if let Err(e) = bounded(STORE_CALL_LIMIT, store.save_document(run_id, "", &judged)).await {
        tracing::warn!("failure signatures not saved: {e}");
    }
}

/// Summarises each traced server's trace files in the run directory (`traces/<server>.json`,
/// and `.0`, `.1`, ... with a log frequency; Triton writes the last at shutdown; a server
/// started again by an injected fault writes `<server>@2.json`, ...) into the store: each
/// process's files parsed on their own (trace ids start again in a new process), the traces of
/// all summarised together. The kube launcher's traces stay on the pod's volume: none here.
pub(super) async fn save_trace_summaries(store: &Store, run_dir: &Path, plan: &RunPlan) {
    let dir = run_dir.join("traces");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for server in &plan.servers {
        let processes = crate::launcher::local::trace_files_by_start(&names, &server.name);
        if processes.is_empty() {
            continue;
        }
        let (mut traces, mut parsed) = (Vec::new(), false);
        for files in processes {
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
            match crate::report::trace::parse(&texts) {
                Ok(of_process) => {
                    traces.extend(of_process);
                    parsed = true;
                }
                Err(e) => tracing::warn!("traces of {} not summarised: {e}", server.name),
            }
        }
        if !parsed {
            continue;
        }
        let summary = crate::report::trace::summarize(&traces);
        if let Err(e) = store
            .save_document(&plan.run_id, &server.name, &summary)
            .await
        {
            tracing::warn!("trace summary of {} not recorded: {e}", server.name);
        }
    }
}

/// Saves launcher diagnostics of every member with a FAILURE event (keeping the server metrics
/// saved before). An external server has no process or pod to diagnose: only where it is.
pub(super) async fn save_diagnostics(store: &Store, launcher: &mut dyn Launcher, plan: &RunPlan) {
    use crate::launcher::MemberDiagnostics;
    let run_id = &plan.run_id;
    let Ok(events) = store.events(run_id, 0).await else {
        return;
    };
    let mut saved_metrics: BTreeMap<String, _> = store
        .documents::<MemberDiagnostics>(&plan.run_id)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(member, d)| Some((member, d.server_metrics?)))
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
        if let Err(err) = store.save_document(&plan.run_id, &e.member_id, &d).await {
            tracing::warn!("diagnostics of {} not recorded: {err}", e.member_id);
        }
    }
}
