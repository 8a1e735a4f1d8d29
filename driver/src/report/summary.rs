//! A finished run in one row (a document the store keeps beside the run): what a list of runs
//! shows — a dashboard, a CI page — without rebuilding every run's report. Written at the end of
//! a run from its report; `Store::latest_documents` lists them across runs.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;
use stress_common::store::{Store, StoreError};

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
    /// What a matrix's history plots besides the totals (empty in summaries written before
    /// them). Per scenario, TOTAL left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<ScenarioPoint>,
    /// Per server: its memory's steady-state slope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_memory: Vec<ServerMemoryPoint>,
    /// Capacity mode: per group and phase, the whole mix's answer (spike rows left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<CapacityPoint>,
    /// The failure signatures the run judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<SignatureSeen>,
    /// The runs this one was compared with (its baseline window), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_window: Vec<String>,
    /// The faults it injected on purpose, each with its verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultPoint>,
    /// A sweep's answer: its best variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepPoint>,
    /// Every number a comparison reads off the run, with its interval within the run: the
    /// series that change points are found in (empty in summaries written before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub estimates: Vec<crate::judge::change::Estimate>,
    /// Each server's version as it said before the load (`triton-0: triton 2.51.0`): what may
    /// differ across a change point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// A run under way: when its workers last wrote what its figures (requests, tests,
    /// failures, QPS, p99) count so far. None for a finished run, and for one whose workers
    /// have written nothing yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_at_ms: Option<i64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultPoint {
    pub name: String,
    pub kind: String,
    pub target: String,
    /// Recovered in time (false also for one the run never reached).
    pub ok: bool,
    pub recovery_s: Option<f64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub server_group: String,
    /// The best variant's parameters, `PATH=VALUE` joined by `, ` (None: no variant met the
    /// target).
    pub best: Option<String>,
    /// Its capacity: the confirming run's when it was confirmed.
    pub best_qps: Option<f64>,
    pub measured: usize,
    pub grid_size: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioPoint {
    pub scenario: String,
    pub qps: f64,
    pub p99_ms: f64,
    pub tests: u64,
    pub failures: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerMemoryPoint {
    pub server: String,
    /// The Theil–Sen slope of its resident memory after warm-up (MiB per minute).
    pub slope_mib_per_min: f64,
    /// Whether the run found it still growing (a possible leak).
    pub growing: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityPoint {
    pub group: String,
    pub phase: String,
    /// None: nothing met the target.
    pub concurrency: Option<u32>,
    pub max_qps: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignatureSeen {
    pub signature: String,
    pub scenario: String,
    pub model: String,
    pub message: String,
    pub status: Status,
    pub count: u64,
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
            scenarios: scenario_points(report),
            server_memory: server_memory(report),
            capacity: capacity_points(report),
            signatures: signatures_seen(report),
            baseline_window: report
                .baseline
                .as_ref()
                .map(|b| b.window.clone())
                .unwrap_or_default(),
            faults: fault_points(report),
            sweep: report.sweep.as_ref().map(sweep_point),
            estimates: report.estimates.clone(),
            versions: report
                .servers
                .iter()
                .filter_map(|s| Some(format!("{}: {}", s.member_id, s.version.as_ref()?)))
                .collect(),
            live_at_ms: None,
        }
    }
}

/// Each scenario's figures, the TOTAL row left out.
fn scenario_points(report: &Report) -> Vec<ScenarioPoint> {
    report
        .scenarios
        .iter()
        .filter(|r| r.scenario != "TOTAL")
        .map(|r| ScenarioPoint {
            scenario: r.scenario.clone(),
            qps: r.qps,
            p99_ms: r.p99_us as f64 / 1000.0,
            tests: r.tests,
            failures: r.failures,
        })
        .collect()
}

/// Each server's memory slope, where it has one.
fn server_memory(report: &Report) -> Vec<ServerMemoryPoint> {
    report
        .timeline
        .servers
        .iter()
        .filter_map(|s| {
            Some(ServerMemoryPoint {
                server: s.member_id.clone(),
                slope_mib_per_min: s.memory_slope_bytes_per_s? * 60.0 / MIB,
                growing: s.memory_finding.is_some(),
            })
        })
        .collect()
}

/// Each capacity phase's answer for the model mix (not the fixed-rate phases').
fn capacity_points(report: &Report) -> Vec<CapacityPoint> {
    report
        .capacity
        .iter()
        .flat_map(|c| &c.results)
        .filter(|r| r.model == "mix" && r.target_rps.is_none())
        .map(|r| CapacityPoint {
            group: r.group.clone(),
            phase: r.phase.clone(),
            concurrency: r.concurrency,
            max_qps: r.max_qps,
            p99_ms: r.p99_ms,
        })
        .collect()
}

fn signatures_seen(report: &Report) -> Vec<SignatureSeen> {
    report
        .signatures
        .iter()
        .map(|s| SignatureSeen {
            signature: s.signature.clone(),
            scenario: s.scenario.clone(),
            model: s.model.clone(),
            message: s.message.clone(),
            status: s.status,
            count: s.count,
        })
        .collect()
}

fn fault_points(report: &Report) -> Vec<FaultPoint> {
    report
        .faults
        .iter()
        .map(|f| FaultPoint {
            name: f.name.clone(),
            kind: f.kind.as_str().into(),
            target: f.target.clone(),
            ok: f.ok,
            recovery_s: f.recovery_s,
        })
        .collect()
}

/// A sweep's answer: its best variant's parameters (`path=value`, joined) and QPS.
fn sweep_point(s: &crate::capacity::sweep::SweepAnswer) -> SweepPoint {
    SweepPoint {
        server_group: s.server_group.clone(),
        best: s.best.as_ref().map(|b| {
            b.parameters
                .iter()
                .map(|(path, value)| match value {
                    serde_json::Value::String(text) => format!("{path}={text}"),
                    other => format!("{path}={other}"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        }),
        best_qps: s
            .best
            .as_ref()
            .map(|b| b.confirmed_qps.unwrap_or(b.max_qps)),
        measured: s.measured,
        grid_size: s.grid_size,
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Which runs a list shows: by matrix name and by verdict (both exact; None: any).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFilter {
    pub name: Option<String>,
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
    RunsDir(&'a Path),
}

/// What one store holds for a list of runs: its newest finished runs' summaries, and its
/// unfinished runs (summaries without load figures) with their driver's lease.
#[derive(Debug, Clone, Default)]
struct StoreRuns {
    finished: Vec<RunSummary>,
    unfinished: Vec<(RunSummary, Option<i64>)>,
}

/// Reads one store, read-only. One that no run has written yet holds no run.
async fn read_store(url: &str, limit: u32) -> Result<StoreRuns, StoreError> {
    let store =
        match Store::open_read_only(url, &stress_common::store::StoreOptions::reading()).await {
            Ok(store) => store,
            Err(StoreError::Unwritten { .. }) => return Ok(StoreRuns::default()),
            Err(e) => return Err(e),
        };
    let read = async {
        let finished = store.latest_documents::<RunSummary>(limit).await?;
        let mut unfinished = Vec::new();
        for r in store.unfinished_runs().await? {
            let mut summary = RunSummary {
                run_id: r.run_id,
                name: r.name,
                fingerprint: r.fingerprint,
                launcher: r.launcher,
                started_at_ms: r.started_at_ms,
                finished_at_ms: None,
                ..RunSummary::default()
            };
            live_figures(&store, &mut summary).await?;
            unfinished.push((summary, r.lease_until_ms));
        }
        Ok(StoreRuns {
            finished: finished.into_iter().map(|(_, s)| s).collect(),
            unfinished,
        })
    };
    let runs = read.await;
    store.close().await;
    runs
}

/// How far back from a run's newest worker sample the samples still count toward its QPS now
/// (a worker writes one every second or so; one that stopped writing is not serving).
const LIVE_QPS_WINDOW_MS: i64 = 10_000;

/// A run under way, so far: the requests, tests and failures its workers have counted, the QPS
/// of those that wrote lately, and the p99 of every latency recorded (histograms merged, never
/// percentiles averaged). Reads the workers' latest rows only, not the series.
async fn live_figures(store: &Store, summary: &mut RunSummary) -> Result<(), StoreError> {
    let run_id = summary.run_id.as_str().into();
    let latest = store.latest_qps(&run_id).await?;
    let Some(newest) = latest.iter().map(|s| s.at_ms).max() else {
        return Ok(());
    };
    summary.live_at_ms = Some(newest);
    summary.requests = latest.iter().map(|s| s.total_requests).sum();
    summary.qps = latest
        .iter()
        .filter(|s| s.at_ms >= newest - LIVE_QPS_WINDOW_MS)
        .map(|s| s.qps)
        .sum();
    let mut latency = stress_common::histogram::LatencyHistogram::new();
    for (_, counts) in store.scenario_counts(&run_id).await? {
        summary.tests += counts.tests;
        summary.failures += counts.failures;
        // A histogram that does not decode leaves the p99 short of it, not the row unlisted.
        if let Ok(h) = stress_common::histogram::LatencyHistogram::decode(&counts.latency_histogram)
        {
            latency.merge(&h);
        }
    }
    summary.p99_ms = latency.percentile_us(99.0) as f64 / 1000.0;
    Ok(())
}

/// A store file's size and modification time, and its write-ahead log's: SQLite writes the
/// log first, so the pair changes with every committed write.
type Stamp = [Option<(u64, SystemTime)>; 2];

fn stamp(file: &Path) -> Stamp {
    let meta = |f: &Path| {
        let m = std::fs::metadata(f).ok()?;
        Some((m.len(), m.modified().ok()?))
    };
    let mut wal = file.as_os_str().to_owned();
    wal.push("-wal");
    // An empty log is none (a reader's open may create one).
    [
        meta(file),
        meta(Path::new(&wal)).filter(|(len, _)| *len > 0),
    ]
}

/// A runs directory's stores, each read again only when its files changed: `driver serve` lists
/// a directory of a thousand runs without opening a thousand stores for every page.
#[derive(Debug, Default)]
pub struct SummaryIndex {
    stores: tokio::sync::Mutex<HashMap<PathBuf, (Stamp, u32, StoreRuns)>>,
    reads: AtomicUsize,
}

impl SummaryIndex {
    /// How many times a store was opened (the rest came from the index).
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }
}

/// Every store of `source`, read (through `index` for a runs directory). A run directory whose
/// store cannot be read (another schema, not a store) is a row of its own saying why
/// ([`UNREADABLE`]); the one store of `RunSource::Store` must be read.
async fn gather(
    source: RunSource<'_>,
    limit: u32,
    index: Option<&SummaryIndex>,
) -> Result<Vec<StoreRuns>, StoreError> {
    let dir = match source {
        RunSource::Store(url) => return Ok(vec![read_store(url, limit).await?]),
        RunSource::RunsDir(dir) => dir,
    };
    let files = super::baseline::run_dir_store_files(dir, SCANNED_RUN_DIRS);
    let mut cached = match index {
        Some(i) => Some(i.stores.lock().await),
        None => None,
    };
    if let Some(c) = cached.as_mut() {
        c.retain(|file, _| files.contains(file));
    }
    let mut out = Vec::new();
    for file in files {
        let now = stamp(&file);
        if let Some((_, _, runs)) = cached
            .as_ref()
            .and_then(|c| c.get(&file))
            .filter(|(at, l, _)| *at == now && *l == limit)
        {
            out.push(runs.clone());
            continue;
        }
        if let Some(i) = index {
            i.reads.fetch_add(1, Ordering::Relaxed);
        }
        match read_store(&Store::sqlite_url(&file), limit).await {
            Ok(runs) => {
                if let Some(c) = cached.as_mut() {
                    c.insert(file, (now, limit, runs.clone()));
                }
                out.push(runs);
            }
            Err(e) => {
                tracing::warn!("listed as unreadable: {e}");
                let runs = StoreRuns {
                    finished: vec![unreadable(&file, &e)],
                    unfinished: Vec::new(),
                };
                // Unreadable until its file changes: not tried again for every page.
                if let Some(c) = cached.as_mut() {
                    c.insert(file, (now, limit, runs.clone()));
                }
                out.push(runs);
            }
        }
    }
    Ok(out)
}

/// The verdict of a run directory whose store cannot be read: listed with why, so that one bad
/// directory neither hides itself nor the others.
pub const UNREADABLE: &str = "UNREADABLE";

/// A run directory's row when its store cannot be read (another schema, not a store): its
/// directory's name, when the store was last written, and why (in `root_cause`).
fn unreadable(file: &Path, e: &StoreError) -> RunSummary {
    let dir = file.parent().unwrap_or(file);
    let at_ms = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    RunSummary {
        run_id: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        verdict: UNREADABLE.into(),
        started_at_ms: at_ms,
        finished_at_ms: Some(at_ms),
        root_cause: Some(e.to_string()),
        ..RunSummary::default()
    }
}

fn newest_first(runs: &mut [RunSummary]) {
    runs.sort_by_key(|s| std::cmp::Reverse((s.started_at_ms, s.run_id.clone())));
}

/// The newest `limit` finished runs' summaries, newest first. Every store is opened read-only.
/// A run whose end could not reach its store has no summary and is not listed (`driver report
/// --run` still rebuilds what it recorded).
pub async fn list(source: RunSource<'_>, limit: u32) -> Result<Vec<RunSummary>, StoreError> {
    let mut out: Vec<RunSummary> = gather(source, limit, None)
        .await?
        .into_iter()
        .flat_map(|s| s.finished)
        .collect();
    newest_first(&mut out);
    out.truncate(limit as usize);
    Ok(out)
}

/// The newest `limit` finished runs and every unfinished one, newest first. An unfinished run
/// has no load figures and is RUNNING while its driver's lease holds, else ABANDONED (said, not
/// recorded: the stores are opened read-only; the next run or `driver cleanup` records it).
pub async fn list_all(
    source: RunSource<'_>,
    limit: u32,
    now_ms: i64,
    index: Option<&SummaryIndex>,
) -> Result<Vec<RunSummary>, StoreError> {
    let stores = gather(source, limit, index).await?;
    let mut finished: Vec<RunSummary> = stores.iter().flat_map(|s| s.finished.clone()).collect();
    newest_first(&mut finished);
    finished.truncate(limit as usize);
    for s in stores {
        for (mut run, lease_until_ms) in s.unfinished {
            run.verdict = if lease_until_ms.is_some_and(|until| until >= now_ms) {
                stress_common::store::RUNNING.into()
            } else {
                stress_common::store::ABANDONED.into()
            };
            finished.push(run);
        }
    }
    newest_first(&mut finished);
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stress_common::store::NewRun;

    /// A run directory under `runs` with one run in its own store (finished: with a summary).
    async fn run_dir(runs: &Path, id: &str, started_at_ms: i64) -> Store {
        let dir = runs.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::connect(&Store::sqlite_url(&dir.join("store.sqlite")))
            .await
            .unwrap();
        store
            .create_run(&NewRun {
                run_id: id.into(),
                name: "nightly".into(),
                matrix_yaml: "version: 1".into(),
                launcher: "local".into(),
                started_at_ms,
                fingerprint: None,
            })
            .await
            .unwrap();
        store
    }

    async fn finish(store: &Store, id: &str, started_at_ms: i64) {
        let summary = RunSummary {
            run_id: id.into(),
            name: "nightly".into(),
            verdict: "PASS".into(),
            started_at_ms,
            finished_at_ms: Some(started_at_ms + 1000),
            ..Default::default()
        };
        store.save_document(&id.into(), "", &summary).await.unwrap();
        store
            .finish_run(&id.into(), "PASS", started_at_ms + 1000)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_run_under_way_lists_its_figures_so_far() {
        use stress_common::histogram::LatencyHistogram;
        use stress_common::status::{ScenarioCounts, WorkerSnapshot};
        let tmp = tempfile::tempdir().unwrap();
        let now = stress_common::now_ms();
        let store = run_dir(tmp.path(), "going", now - 60_000).await;
        store
            .renew_lease(&"going".into(), now + 30_000)
            .await
            .unwrap();
        let listed = || async {
            let runs = list_all(RunSource::RunsDir(tmp.path()), 10, now, None)
                .await
                .unwrap();
            assert_eq!(runs.len(), 1);
            runs.into_iter().next().unwrap()
        };
        let quiet = listed().await;
        assert_eq!(quiet.verdict, "RUNNING");
        assert_eq!(quiet.live_at_ms, None, "no worker wrote yet: no figures");
        // Two workers: one fast (1 ms latencies), one slow (100 ms), and a third that stopped
        // writing a minute ago, whose counts stay but whose QPS is not now's.
        let snapshot = |at_ms, qps, requests, latency_ms: u64, failures| {
            let mut h = LatencyHistogram::new();
            for _ in 0..requests {
                h.record(std::time::Duration::from_millis(latency_ms));
            }
            WorkerSnapshot {
                at_ms,
                qps,
                total_requests: requests,
                scenarios: vec![ScenarioCounts {
                    scenario: "infer".into(),
                    tests: requests,
                    failures,
                    requests,
                    latency_histogram: h.encode(),
                    ..Default::default()
                }],
                ..Default::default()
            }
        };
        for (member, snap) in [
            ("w-0", snapshot(now - 1_000, 90.0, 980, 1, 0)),
            ("w-1", snapshot(now - 2_000, 10.0, 10, 100, 3)),
            ("w-2", snapshot(now - 60_000, 50.0, 500, 1, 0)),
        ] {
            store
                .record_snapshot(&"going".into(), &member.into(), &snap)
                .await
                .unwrap();
        }
        let live = listed().await;
        assert_eq!(live.live_at_ms, Some(now - 1_000));
        assert_eq!((live.requests, live.tests, live.failures), (1490, 1490, 3));
        assert_eq!(live.qps, 100.0, "the stopped worker's QPS is not now's");
        // 10 of 1,490 latencies are 100 ms: the 99th percentile is among the fast ones. An
        // average of the workers' p99s would say ~34 ms.
        assert!(live.p99_ms < 2.0, "p99 {}", live.p99_ms);
        store.close().await;
    }

    #[tokio::test]
    async fn the_index_reads_a_store_again_only_when_it_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path();
        let now = stress_common::now_ms();
        let old = run_dir(runs, "old", now - 10_000).await;
        finish(&old, "old", now - 10_000).await;
        old.close().await;
        let going = run_dir(runs, "going", now - 5_000).await;
        let index = SummaryIndex::default();
        let listed = |index| async move {
            list_all(RunSource::RunsDir(runs), 10, now, Some(index))
                .await
                .unwrap()
                .into_iter()
                .map(|r| format!("{}:{}", r.run_id, r.verdict))
                .collect::<Vec<_>>()
        };
        assert_eq!(listed(&index).await, ["going:ABANDONED", "old:PASS"]);
        assert_eq!(index.reads(), 2);
        assert_eq!(listed(&index).await, ["going:ABANDONED", "old:PASS"]);
        assert_eq!(index.reads(), 2, "nothing changed: nothing opened");
        finish(&going, "going", now - 5_000).await;
        assert_eq!(listed(&index).await, ["going:PASS", "old:PASS"]);
        assert_eq!(index.reads(), 3, "only the store written since");
        going.close().await;
        std::fs::remove_dir_all(runs.join("old")).unwrap();
        assert_eq!(listed(&index).await, ["going:PASS"], "a pruned run is gone");
        assert_eq!(
            list(RunSource::RunsDir(runs), 10).await.unwrap().len(),
            1,
            "without an index the same"
        );

        // A directory whose store is not one: a row saying why, the rest still listed.
        std::fs::create_dir_all(runs.join("bad")).unwrap();
        std::fs::write(runs.join("bad/store.sqlite"), "not a database, just text").unwrap();
        let all = list_all(RunSource::RunsDir(runs), 10, now, Some(&index))
            .await
            .unwrap();
        let bad = all
            .iter()
            .find(|r| r.run_id == "bad")
            .expect("a row for it");
        assert_eq!(bad.verdict, UNREADABLE);
        assert!(
            bad.root_cause
                .as_deref()
                .is_some_and(|w| w.contains("store.sqlite")),
            "{bad:?}"
        );
        assert!(
            all.iter()
                .any(|r| r.run_id == "going" && r.verdict == "PASS")
        );
        let reads = index.reads();
        list_all(RunSource::RunsDir(runs), 10, now, Some(&index))
            .await
            .unwrap();
        assert_eq!(
            index.reads(),
            reads,
            "an unreadable store unchanged is not tried again"
        );
    }
}
