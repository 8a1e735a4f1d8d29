//! A run's steps around its `Driver` ([`super::run`]): the run opened in its store (the
//! baseline found first, abandoned runs closed, the run recorded with its lease and members),
//! the `Driver`'s run, its verdict set against the baseline, and the end: a failed run's
//! members stopped, the end's saves, the report written and sent, the launcher cleaned up.

use super::driver::Driver;
use super::finish::{
    self, finish_and_read, save_diagnostics, save_failure_logs, save_signatures,
    save_trace_summaries, scrape_server_metrics, verdict_line, write_report,
};
use super::lease::Lease;
use super::progress::Progress;
use super::{
    DriverError, END_SAVE_LIMIT, FAILURE_SCRAPE_BUDGET, FAILURE_STOP_GRACE, REGRESSION_MEMBER,
    RunOptions, RunOutcome, STORE_CALL_LIMIT, Verdict, is_harness, store_url_for,
};
use crate::judge::verdicts::Verdicts;
use crate::launcher::Launcher;
use crate::matrix::{self, Matrix, RegressionSettings};
use crate::plan::RunPlan;
use crate::report::Report;
use crate::report::baseline::{self, Baselines};
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use stress_common::status::EventKind;
use stress_common::store::{NewRun, Store, within as bounded};
use tokio_util::sync::CancellationToken;

/// A run recorded in its store, from its start to its end.
pub(super) struct OpenRun<'a> {
    /// Renewed until the run's end (dropped first).
    _lease: Lease,
    options: &'a RunOptions,
    plan: &'a RunPlan,
    run_dir: &'a Path,
    store_url: String,
    store: Store,
    /// The matrix as written, so `driver report` shows what was run even if the file changes.
    matrix_text: String,
    fingerprint: String,
    regression: RegressionSettings,
    baselines: Option<Baselines>,
    started_at_ms: i64,
}

impl<'a> OpenRun<'a> {
    /// Connects to the run's store and records the run there, with its lease and members. An
    /// unknown `--baseline` is bad input, found before the run is recorded.
    pub(super) async fn open(
        options: &'a RunOptions,
        matrix: &Matrix,
        plan: &'a RunPlan,
        run_dir: &'a Path,
        launcher: &str,
    ) -> Result<OpenRun<'a>, DriverError> {
        let run_id = &plan.run_id;
        let store_url = store_url_for(run_dir, options.database_url.as_deref());
        let store = Store::connect(&store_url).await?;
        let matrix_text = std::fs::read_to_string(&options.matrix).unwrap_or_default();
        let fingerprint = matrix::fingerprint(matrix);
        let regression = matrix.regression.clone().unwrap_or_default();
        let baselines = find_baselines(
            &store,
            &store_url,
            options,
            plan,
            &fingerprint,
            regression.window,
        )
        .await?;
        close_abandoned_runs(&store).await;
        let started_at_ms = stress_common::now_ms();
        store
            .create_run(&NewRun {
                run_id: run_id.into(),
                name: plan.name.clone(),
                matrix_yaml: matrix_text.clone(),
                launcher: launcher.into(),
                started_at_ms,
                fingerprint: Some(fingerprint.clone()),
            })
            .await?;
        let lease = Lease::hold(
            store.clone(),
            run_id.clone(),
            Lease::ttl(plan.rules.store_outage_limit),
        )
        .await;
        for member in plan.members() {
            store.upsert_member(&member).await?;
        }
        Ok(OpenRun {
            _lease: lease,
            options,
            plan,
            run_dir,
            store_url,
            store,
            matrix_text,
            fingerprint,
            regression,
            baselines,
            started_at_ms,
        })
    }

    /// The `Driver`'s run, launch to end: its verdict, and its judgement of the workers'
    /// failure records.
    pub(super) async fn drive(
        &self,
        launcher: &mut dyn Launcher,
        matrix: &Matrix,
        cancel: &CancellationToken,
    ) -> Result<(Verdict, Verdicts), DriverError> {
        let mut progress = Progress {
            tty: self
                .options
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
        let known = crate::judge::known::KnownIssues::new(matrix.known.clone());
        let today = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let receiver =
            super::spans::start_receiver(self.plan, matrix, &*launcher, &self.store).await;
        let mut driver = Driver {
            store: &self.store,
            launcher,
            matrix,
            plan: self.plan,
            store_url: &self.store_url,
            perf_analyzer: perf_analyzer.as_deref(),
            progress: &mut progress,
            cancel,
            verdicts: Verdicts::new(known, today),
            spans: receiver.as_ref(),
        };
        let verdict = driver.drive().await;
        let verdicts = driver.verdicts;
        if let Some(receiver) = receiver {
            super::spans::finish_receiver(receiver, &self.store, &self.plan.run_id).await;
        }
        progress.done();
        Ok((verdict, verdicts))
    }

    /// Compares the run with its baseline and saves the comparison; a run that passed fails
    /// when `regression.fail` is set and it regressed.
    pub(super) async fn against_baseline(&self, verdict: Verdict) -> Verdict {
        let (store, run_id) = (&self.store, &self.plan.run_id);
        let (Some(b), Verdict::Pass | Verdict::Fail { .. }) = (&self.baselines, &verdict) else {
            return verdict;
        };
        let failed = verdict != Verdict::Pass;
        // A store that is down must not hold the run's end: it held it 60 s (sqlx's wait for a
        // connection) in the store-down e2e test.
        let compared = tokio::time::timeout(
            END_SAVE_LIMIT,
            baseline::compare(
                store,
                run_id,
                &self.matrix_text,
                b,
                &self.regression,
                failed,
            ),
        )
        .await;
        let c = match compared {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!("not compared with the baseline: {e}");
                return verdict;
            }
            Err(_) => {
                tracing::warn!(
                    "not compared with the baseline: the store did not answer within {END_SAVE_LIMIT:?}"
                );
                return verdict;
            }
        };
        if let Err(e) = bounded(STORE_CALL_LIMIT, store.save_document(run_id, "", &c)).await {
            tracing::warn!("comparison with {} not saved: {e}", c.basis());
        }
        let (Verdict::Pass, true, Some(first)) = (&verdict, c.fail, c.regressions.first()) else {
            return verdict;
        };
        let reason = format!(
            "{} regression(s) against {}, first: {}",
            c.regressions.len(),
            c.basis(),
            first.describe()
        );
        if let Err(e) = store
            .record_event(
                run_id,
                &REGRESSION_MEMBER.into(),
                EventKind::Failure,
                &reason,
            )
            .await
        {
            tracing::warn!("regression failure not recorded: {e}");
        }
        Verdict::Fail {
            member: REGRESSION_MEMBER.into(),
            reason,
        }
    }

    /// The run's end: a failed run's members stopped, what the report needs saved, the report
    /// written and sent, and what the launcher started cleaned up (a failed member kept for
    /// inspection if asked).
    pub(super) async fn end(
        self,
        launcher: &mut dyn Launcher,
        matrix: &Matrix,
        verdict: Verdict,
        mut verdicts: Verdicts,
    ) -> Result<RunOutcome, DriverError> {
        // Record what the report needs before anything is cleaned up.
        let failed = verdict != Verdict::Pass;
        if failed {
            tracing::info!("{}: stopping every member", verdict_line(&verdict));
            scrape_server_metrics(&self.store, launcher, self.plan, FAILURE_SCRAPE_BUDGET).await;
            launcher.stop_all(FAILURE_STOP_GRACE).await;
            tracing::info!("every member stopped");
        }
        self.save_for_report(launcher, &mut verdicts).await;
        let report = self.read_report(launcher.name(), &verdict).await;
        write_report(self.run_dir, &report)?;
        tracing::info!("report written");
        finish::save_summary(&self.store, &self.plan.run_id, &report).await;
        send_summary(matrix, &report, self.run_dir).await;
        let keep = if failed && self.options.keep_failed.unwrap_or(self.plan.keep_failed) {
            self.kept_for_inspection().await
        } else {
            BTreeSet::new()
        };
        launcher.cleanup(&keep).await;
        Ok(RunOutcome {
            run_id: (&self.plan.run_id).into(),
            run_dir: self.run_dir.into(),
            store_url: self.store_url,
            verdict,
            report,
        })
    }

    /// What the report adds from the launcher: each within its limit, and none when the store
    /// does not answer now (a store that is down must not hold the run's end; the report says
    /// what is missing).
    async fn save_for_report(&self, launcher: &mut dyn Launcher, verdicts: &mut Verdicts) {
        let (store, plan) = (&self.store, self.plan);
        if bounded(STORE_CALL_LIMIT, store.run(&plan.run_id))
            .await
            .is_err()
        {
            tracing::warn!(
                "the status store does not answer: failure signatures, diagnostics, log excerpts and trace summaries not saved"
            );
            return;
        }
        let limit = END_SAVE_LIMIT;
        // Every failure the workers recorded, judged (the verdict is made; this is the
        // report's), with its history over the earlier runs of this matrix.
        let signatures = save_signatures(
            store,
            &self.store_url,
            &self.options.runs_dir,
            &self.fingerprint,
            &plan.run_id,
            self.started_at_ms,
            verdicts,
        );
        if tokio::time::timeout(limit, signatures).await.is_err() {
            tracing::warn!(
                "failure signatures not saved: the store did not answer within {limit:?}"
            );
        }
        if tokio::time::timeout(limit, save_diagnostics(store, launcher, plan))
            .await
            .is_err()
        {
            tracing::warn!("diagnostics not saved: the store did not answer within {limit:?}");
        }
        if tokio::time::timeout(limit, save_failure_logs(store, launcher, plan))
            .await
            .is_err()
        {
            tracing::warn!("log excerpts not saved: the store did not answer within {limit:?}");
        }
        if tokio::time::timeout(limit, save_trace_summaries(store, self.run_dir, plan))
            .await
            .is_err()
        {
            tracing::warn!("trace summaries not saved: the store did not answer within {limit:?}");
        }
    }

    /// The run's report from the store (the verdict recorded first), or the driver's own word
    /// when the store does not answer; with its change points over the matrix's history.
    async fn read_report(&self, launcher: &str, verdict: &Verdict) -> Report {
        let (store, plan, run_id) = (&self.store, self.plan, &self.plan.run_id);
        let mut report =
            match finish_and_read(store, run_id, verdict, plan.rules.store_outage_limit).await {
                Ok(report) => report,
                Err(e) => {
                    eprintln!("warning: {e}");
                    Report::without_store(
                        run_id,
                        &plan.name,
                        launcher,
                        verdict.as_str(),
                        self.started_at_ms,
                        format!(
                            "{e}.\nThe verdict is the driver's own ({}); the counts, latencies, \
                             failure records and diagnostics the store holds are missing here: \
                             run `driver report --run {run_id}` once the store is back.",
                            verdict_line(verdict)
                        ),
                    )
                }
            };
        finish::save_change_points(
            store,
            &self.store_url,
            &self.options.runs_dir,
            &self.regression,
            &mut report,
        )
        .await;
        report
    }

    /// The members a failed run keeps for inspection: those the plan keeps of the ones that
    /// failed (the harness's own failures blame no member).
    async fn kept_for_inspection(&self) -> BTreeSet<String> {
        let failed_members: BTreeSet<String> =
            bounded(STORE_CALL_LIMIT, self.store.events(&self.plan.run_id, 0))
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.kind == EventKind::Failure && !is_harness(&e.member_id))
                .map(|e| e.member_id)
                .collect();
        self.plan.kept_for_inspection(&failed_members)
    }
}

/// The run's baselines, None when there are none to find; an unknown `--baseline` is bad input.
async fn find_baselines(
    store: &Store,
    store_url: &str,
    options: &RunOptions,
    plan: &RunPlan,
    fingerprint: &str,
    window: usize,
) -> Result<Option<Baselines>, DriverError> {
    match baseline::find(
        store,
        store_url,
        &options.runs_dir,
        options.baseline.as_deref(),
        &plan.name,
        fingerprint,
        &plan.run_id,
        window,
    )
    .await
    {
        Ok(b) => Ok(Some(b)),
        Err(e @ baseline::BaselineError::Unknown(..)) => Err(DriverError::Config(e.to_string())),
        Err(e) => {
            tracing::warn!("no baseline: {e}");
            Ok(None)
        }
    }
}

/// Runs of this store whose driver vanished are over: said so before a run is added.
async fn close_abandoned_runs(store: &Store) {
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
}

/// The report's summary to the matrix's webhook, if it has one; a failed delivery is a warning
/// (the run's verdict stands).
async fn send_summary(matrix: &Matrix, report: &Report, run_dir: &Path) {
    let Some(settings) = &matrix.report else {
        return;
    };
    let Some(url) = &settings.webhook else {
        return;
    };
    let body = crate::render::webhook::summary(report, run_dir);
    match crate::render::webhook::deliver(url, &body, settings.webhook_timeout).await {
        Ok(status) => tracing::info!(
            "report summary delivered to {} (HTTP {status})",
            crate::render::webhook::shown(url)
        ),
        // retry() logged each attempt; the run's verdict stands.
        Err(e) => eprintln!("warning: report summary not delivered: {e}"),
    }
}
