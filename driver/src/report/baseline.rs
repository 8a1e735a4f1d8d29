//! Finding a run's baselines and comparing with them (the I/O around
//! [`crate::judge::regression`]): the candidates' fingerprints (a run recorded before them is
//! fingerprinted from its matrix text), the baseline runs' reports rebuilt from their stores, and
//! what changed in the servers' and workers' binaries or images.
//!
//! Runs live in the run's own store (Postgres: every run of the team; the embedded SQLite store:
//! only this run) and in the other run directories' stores under `--runs-dir`
//! (`<runs-dir>/*/store.sqlite`, the newest [`SCANNED_RUN_DIRS`]). Pins (`driver baseline set`)
//! are kept in the store that holds the pinned run.

use std::path::Path;
use stress_common::contract::RunId;
use stress_common::store::Store;

use crate::judge::regression::{self, Candidate, Choice, Comparison};
use crate::report::{Report, ReportError};

/// How many run directories (newest first) are searched for a baseline.
pub const SCANNED_RUN_DIRS: usize = 200;

/// A baseline run and the store it is in.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub run_id: RunId,
    pub store_url: String,
    pub matrix_yaml: String,
    /// In the run's own store (else in `store_url`'s).
    pub same_store: bool,
}

/// The runs a run is compared with, newest first, or why there are none.
#[derive(Debug, Clone)]
pub struct Baselines {
    pub runs: Vec<Baseline>,
    /// How they were chosen: `--baseline`, `pinned` or `last passing runs`.
    pub chosen_by: &'static str,
    /// Why there are none (another matrix under the same name, a first run).
    pub note: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error(
        "--baseline {0}: no such run in the store or under the runs directory {1} (its store.sqlite)"
    )]
    Unknown(String, String),
    #[error(transparent)]
    Store(#[from] stress_common::store::StoreError),
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// The SQLite store files of the `newest` run directories under `runs_dir` (by the store's
/// modification time, newest first).
pub fn run_dir_store_files(runs_dir: &Path, newest: usize) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<(std::time::SystemTime, std::path::PathBuf)> = std::fs::read_dir(runs_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let file = e.path().join("store.sqlite");
            let at = std::fs::metadata(&file).and_then(|m| m.modified()).ok()?;
            Some((at, file))
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    dirs.into_iter()
        .take(newest)
        .map(|(_, file)| file)
        .collect()
}

/// The URLs of [`run_dir_store_files`].
pub fn run_dir_stores(runs_dir: &Path, newest: usize) -> Vec<String> {
    run_dir_store_files(runs_dir, newest)
        .iter()
        .map(|file| Store::sqlite_url(file))
        .collect()
}

/// Every run the stores know: the candidate, its store's URL and its matrix text.
async fn candidates(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
) -> Vec<(Candidate, String, String)> {
    let mut urls = vec![store_url.to_string()];
    for url in run_dir_stores(runs_dir, SCANNED_RUN_DIRS) {
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    let mut out = Vec::new();
    for url in urls {
        let other;
        let s = if url == store_url {
            store
        } else {
            // Another run's store: read, never migrated or written.
            match Store::open_read_only(&url, &stress_common::store::StoreOptions::reading()).await
            {
                Ok(s) => {
                    other = s;
                    &other
                }
                Err(e) => {
                    tracing::debug!("baseline search: {url} skipped: {e}");
                    continue;
                }
            }
        };
        let pins = s.baselines().await.unwrap_or_default();
        for run in s.runs().await.unwrap_or_default() {
            let pinned_at_ms = pins
                .iter()
                .find(|(name, id, _)| *name == run.name && *id == run.run_id)
                .map(|(_, _, at)| *at);
            let fingerprint =
                crate::matrix::fingerprint::of_stored_run(run.fingerprint, &run.matrix_yaml);
            out.push((
                Candidate {
                    run_id: run.run_id,
                    name: run.name,
                    verdict: run.verdict,
                    started_at_ms: run.started_at_ms,
                    pinned_at_ms,
                    fingerprint,
                },
                url.clone(),
                run.matrix_yaml,
            ));
        }
    }
    out
}

/// The baselines of the run `current` named `name` with the matrix `fingerprint` (before it is
/// in the store). An explicit `--baseline` that names no run is an error (bad input).
#[allow(clippy::too_many_arguments)]
pub async fn find(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
    explicit: Option<&str>,
    name: &str,
    fingerprint: &str,
    current: &str,
    window: usize,
) -> Result<Baselines, BaselineError> {
    let found = candidates(store, store_url, runs_dir).await;
    let list: Vec<Candidate> = found.iter().map(|(c, _, _)| c.clone()).collect();
    let baseline = |c: &Candidate| {
        let (_, url, yaml) = found
            .iter()
            .find(|(f, _, _)| f.run_id == c.run_id)
            .expect("chosen from this list");
        Baseline {
            run_id: c.run_id.clone().into(),
            store_url: url.clone(),
            matrix_yaml: yaml.clone(),
            same_store: url == store_url,
        }
    };
    match regression::choose_baselines(&list, explicit, name, fingerprint, current, window) {
        Some(Choice::One(c, chosen_by)) => Ok(Baselines {
            runs: vec![baseline(c)],
            chosen_by,
            note: None,
        }),
        Some(Choice::Window(runs)) => Ok(Baselines {
            runs: runs.into_iter().map(baseline).collect(),
            chosen_by: "last passing runs",
            note: None,
        }),
        Some(Choice::Nothing(note)) => Ok(Baselines {
            runs: Vec::new(),
            chosen_by: "",
            note: Some(note),
        }),
        None => Err(BaselineError::Unknown(
            explicit.unwrap_or_default().into(),
            runs_dir.display().to_string(),
        )),
    }
}

/// `current` (already in `store`, its counts final) against `baselines`; `failed`: the run
/// failed, so the comparison is for information only.
pub async fn compare(
    store: &Store,
    current: &RunId,
    current_matrix: &str,
    baselines: &Baselines,
    settings: &crate::matrix::RegressionSettings,
    failed: bool,
) -> Result<Comparison, BaselineError> {
    let Some(newest) = baselines.runs.first() else {
        return Ok(Comparison::none(
            baselines
                .note
                .clone()
                .unwrap_or_else(|| "no baseline".into()),
            settings.min_effect,
        ));
    };
    let now = Report::from_store(store, current).await?;
    let mut window = Vec::new();
    for b in &baselines.runs {
        let before = if b.same_store {
            Report::from_store(store, &b.run_id).await?
        } else {
            let other =
                Store::open_read_only(&b.store_url, &stress_common::store::StoreOptions::reading())
                    .await?;
            Report::from_store(&other, &b.run_id).await?
        };
        window.push(before.measures(settings.min_requests));
    }
    let current = now.measures(settings.min_requests);
    let judged = crate::judge::change::compare(&window, &current, settings.min_effect);
    let regressions = judged
        .changes
        .iter()
        .filter(|c| c.call == regression::Call::Regression)
        .cloned()
        .collect();
    Ok(Comparison {
        baseline_run: newest.run_id.to_string(),
        chosen_by: baselines.chosen_by.into(),
        min_effect: settings.min_effect,
        matrix_changed: newest.matrix_yaml != current_matrix,
        compared: judged.changes.len() + judged.not_judged.len(),
        regressions,
        changes: judged.changes,
        not_judged: judged.not_judged,
        fail: settings.fail && !failed,
        window: baselines
            .runs
            .iter()
            .map(|b| b.run_id.to_string())
            .collect(),
        note: None,
        version_changes: version_changes(&newest.matrix_yaml, current_matrix),
        informational: failed,
    })
}

/// What changed in the templates' tritonserver and worker binaries or images (and server
/// versions) from `before` to `now`, in words; nothing when either does not parse.
pub fn version_changes(before: &str, now: &str) -> Vec<String> {
    let (Ok(before), Ok(now)) = (
        crate::matrix::parse(before, "baseline.yaml"),
        crate::matrix::parse(now, "matrix.yaml"),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, t) in &now.server_templates {
        let Some(b) = before.server_templates.get(name) else {
            continue;
        };
        if json(&b.tritonserver) != json(&t.tritonserver) || b.version != t.version {
            out.push(format!(
                "server template {name}: tritonserver {}{} -> {}{}",
                json(&b.tritonserver),
                b.version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default(),
                json(&t.tritonserver),
                t.version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default(),
            ));
        }
    }
    for (name, t) in &now.client_templates {
        let Some(b) = before.client_templates.get(name) else {
            continue;
        };
        if json(&b.worker) != json(&t.worker) {
            out.push(format!(
                "client template {name}: worker {} -> {}",
                json(&b.worker),
                json(&t.worker)
            ));
        }
    }
    out
}

/// A matrix value as compact JSON, for saying what changed.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The failure signatures of the finished runs of the matrix `fingerprint` that started before
/// `started_at_ms` (not `current`), newest first, at most `limit`, from every store a baseline
/// is searched in; runs recorded before signatures are left out.
pub async fn earlier_signatures(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
    fingerprint: &str,
    current: &str,
    started_at_ms: i64,
    limit: usize,
) -> Vec<crate::judge::verdicts::RunSignatures> {
    let mut runs: Vec<(Candidate, String, String)> = candidates(store, store_url, runs_dir)
        .await
        .into_iter()
        .filter(|(c, _, _)| {
            c.fingerprint.as_deref() == Some(fingerprint)
                && c.run_id != current
                && c.started_at_ms < started_at_ms
                && c.verdict.is_some()
        })
        .collect();
    runs.sort_by_key(|(c, _, _)| std::cmp::Reverse((c.started_at_ms, c.run_id.clone())));
    let mut out = Vec::new();
    for (c, url, _) in runs {
        if out.len() >= limit {
            break;
        }
        let run = stress_common::contract::RunId::new(c.run_id);
        let doc = if url == store_url {
            store.document(&run, "").await
        } else {
            match Store::open_read_only(&url, &stress_common::store::StoreOptions::reading()).await
            {
                Ok(other) => other.document(&run, "").await,
                Err(e) => Err(e),
            }
        };
        if let Ok(Some(signatures)) = doc {
            out.push(signatures);
        }
    }
    out
}
