//! A finished run in one row (a document the store keeps beside the run): what a list of runs
//! shows — a dashboard, a CI page — without rebuilding every run's report. Written at the end of
//! a run from its report; `Store::latest_documents` lists them across runs.

use serde::{Deserialize, Serialize};

use super::Report;
use crate::judge::verdicts::Status;

/// One run's summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: String,
    pub name: String,
    /// The matrix's fingerprint (the same matrix's runs form its history).
    pub fingerprint: Option<String>,
    pub launcher: String,
    pub verdict: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub load_seconds: f64,
    pub requests: u64,
    pub tests: u64,
    pub failures: u64,
    pub qps: f64,
    pub p99_ms: f64,
    /// `MEMBER: reason` of the root cause, when the run failed.
    pub root_cause: Option<String>,
    /// Failure signatures by status.
    pub signatures_new: u32,
    pub signatures_recurring: u32,
    pub signatures_known: u32,
    pub regressions: u32,
}

impl stress_common::store::Document for RunSummary {
    const KIND: &'static str = "run_summary";
}

impl RunSummary {
    pub fn of(report: &Report) -> Self {
        let total = report.scenarios.iter().find(|r| r.scenario == "TOTAL");
        let count = |status: Status| {
            report
                .signatures
                .iter()
                .filter(|s| s.status == status)
                .count() as u32
        };
        RunSummary {
            run_id: report.run_id.clone(),
            name: report.name.clone(),
            fingerprint: report.fingerprint.clone(),
            launcher: report.launcher.clone(),
            verdict: report.verdict.clone(),
            started_at_ms: report.started_at_ms,
            finished_at_ms: report.finished_at_ms,
            load_seconds: report.load_seconds,
            requests: total.map_or(0, |t| t.requests),
            tests: total.map_or(0, |t| t.tests),
            failures: total.map_or(0, |t| t.failures),
            qps: total.map_or(0.0, |t| t.qps),
            p99_ms: total.map_or(0.0, |t| t.p99_us as f64 / 1000.0),
            root_cause: report
                .analysis
                .root_cause
                .as_ref()
                .map(|r| format!("{}: {}", r.member_id, r.reason)),
            signatures_new: count(Status::New),
            signatures_recurring: count(Status::Recurring),
            signatures_known: count(Status::Known),
            regressions: report.regressions.len() as u32,
        }
    }
}

/// The runs of `source` not finished, newest first, as summaries without load figures: RUNNING
/// while their driver's lease holds, else ABANDONED (said, not recorded: the stores are opened
/// read-only; the next run or `driver cleanup` records it).
pub async fn unfinished(
    source: RunSource<'_>,
    now_ms: i64,
) -> Result<Vec<RunSummary>, stress_common::store::StoreError> {
    use stress_common::store::Store;
    let urls = source.store_urls();
    let single = urls.len() == 1;
    let mut out = Vec::new();
    for url in urls {
        let rows = match Store::open_read_only(&url, &Default::default()).await {
            Ok(store) => {
                let rows = store.unfinished_runs().await;
                store.close().await;
                rows
            }
            Err(e) => Err(e),
        };
        match rows {
            Ok(rows) => out.extend(rows.into_iter().map(|r| RunSummary {
                verdict: if r.lease_until_ms.is_some_and(|until| until >= now_ms) {
                    stress_common::store::RUNNING.into()
                } else {
                    stress_common::store::ABANDONED.into()
                },
                run_id: r.run_id,
                name: r.name,
                fingerprint: r.fingerprint,
                launcher: r.launcher,
                started_at_ms: r.started_at_ms,
                finished_at_ms: None,
                ..RunSummary::default()
            })),
            Err(e) if !single => tracing::warn!("skipped: {e}"),
            Err(e) => return Err(e),
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse((s.started_at_ms, s.run_id.clone())));
    Ok(out)
}

/// Which runs a list shows: by matrix name and by verdict (both exact; None: any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

impl RunFilter {
    pub fn matches(&self, run: &RunSummary) -> bool {
        self.name.as_ref().is_none_or(|n| *n == run.name)
            && self
                .verdict
                .as_ref()
                .is_none_or(|v| v.eq_ignore_ascii_case(&run.verdict))
    }
}

/// At most this many run directories are read (a runs directory is pruned long before).
const SCANNED_RUN_DIRS: usize = 1000;

/// Where `driver runs` lists from: one store (a cluster's Postgres holds every night), or the
/// SQLite stores of the run directories under a runs directory (a local run has its own).
pub enum RunSource<'a> {
    Store(&'a str),
    RunsDir(&'a std::path::Path),
}

impl RunSource<'_> {
    /// The stores to read: the one, or every run directory's (up to a bound: the newest stores
    /// by modification time are not the newest runs, since pinning a baseline writes an older
    /// run's store).
    fn store_urls(&self) -> Vec<String> {
        match self {
            RunSource::Store(url) => vec![url.to_string()],
            RunSource::RunsDir(dir) => super::baseline::run_dir_stores(dir, SCANNED_RUN_DIRS),
        }
    }
}

/// The newest `limit` finished runs' summaries, newest first. Every store is opened read-only;
/// a run directory whose store cannot be read (another schema, not a store) is skipped and
/// said in the log. A run whose end could not reach its store has no summary and is not
/// listed (`driver report --run` still rebuilds what it recorded).
pub async fn list(
    source: RunSource<'_>,
    limit: u32,
) -> Result<Vec<RunSummary>, stress_common::store::StoreError> {
    use stress_common::store::Store;
    let urls = source.store_urls();
    let single = urls.len() == 1;
    let mut out = Vec::new();
    for url in urls {
        let store = match Store::open_read_only(&url, &Default::default()).await {
            Ok(s) => s,
            Err(e) if !single => {
                tracing::warn!("skipped: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let rows = store.latest_documents::<RunSummary>(limit).await;
        store.close().await;
        match rows {
            Ok(rows) => out.extend(rows.into_iter().map(|(_, s)| s)),
            Err(e) if !single => tracing::warn!("skipped: {e}"),
            Err(e) => return Err(e),
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse((s.started_at_ms, s.run_id.clone())));
    out.truncate(limit as usize);
    Ok(out)
}
