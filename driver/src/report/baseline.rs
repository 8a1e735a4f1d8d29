//! Finding a run's baseline and comparing with it (the I/O around [`crate::judge::regression`]).
//!
//! Runs live in the run's own store (Postgres: every run of the team; the embedded SQLite store:
//! only this run) and in the other run directories' stores under `--runs-dir`
//! (`<runs-dir>/*/store.sqlite`, the newest [`SCANNED_RUN_DIRS`]). Pins (`driver baseline set`)
//! are kept in the store that holds the pinned run.

use std::path::Path;
use stress_common::store::Store;

use crate::judge::regression::{self, Candidate, Comparison};
use crate::report::{Report, ReportError};

/// How many run directories (newest first) are searched for a baseline.
pub const SCANNED_RUN_DIRS: usize = 200;

/// A baseline run and the store it is in.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub run_id: String,
    pub store_url: String,
    pub matrix_yaml: String,
    /// In the run's own store (else in `store_url`'s).
    pub same_store: bool,
    /// How it was chosen (see [`regression::choose_baseline`]).
    pub chosen_by: &'static str,
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

/// The URLs of the SQLite stores of the `newest` run directories under `runs_dir` (by the
/// store's modification time, newest first).
pub fn run_dir_stores(runs_dir: &Path, newest: usize) -> Vec<String> {
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
        .map(|(_, file)| Store::sqlite_url(&file))
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
            match Store::connect(&url).await {
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
            out.push((
                Candidate {
                    run_id: run.run_id,
                    name: run.name,
                    verdict: run.verdict,
                    started_at_ms: run.started_at_ms,
                    pinned_at_ms,
                },
                url.clone(),
                run.matrix_yaml,
            ));
        }
    }
    out
}

/// The baseline of the run `current` named `name` (before it is in the store). An explicit
/// `--baseline` that names no run is an error (bad input); no baseline otherwise is None.
pub async fn find(
    store: &Store,
    store_url: &str,
    runs_dir: &Path,
    explicit: Option<&str>,
    name: &str,
    current: &str,
) -> Result<Option<Baseline>, BaselineError> {
    let found = candidates(store, store_url, runs_dir).await;
    let list: Vec<Candidate> = found.iter().map(|(c, _, _)| c.clone()).collect();
    match regression::choose_baseline(&list, explicit, name, current) {
        Some((c, chosen_by)) => {
            let (_, url, yaml) = found
                .iter()
                .find(|(f, _, _)| f.run_id == c.run_id)
                .expect("chosen from this list");
            Ok(Some(Baseline {
                run_id: c.run_id.clone(),
                store_url: url.clone(),
                matrix_yaml: yaml.clone(),
                same_store: url == store_url,
                chosen_by,
            }))
        }
        None => match explicit {
            Some(id) => Err(BaselineError::Unknown(
                id.into(),
                runs_dir.display().to_string(),
            )),
            None => Ok(None),
        },
    }
}

/// `current` (already in `store`, its counts final) against `baseline`.
pub async fn compare(
    store: &Store,
    current: &str,
    current_matrix: &str,
    baseline: &Baseline,
    settings: &crate::matrix::RegressionSettings,
) -> Result<Comparison, BaselineError> {
    let now = Report::from_store(store, current).await?;
    let before = if baseline.same_store {
        Report::from_store(store, &baseline.run_id).await?
    } else {
        let other = Store::connect(&baseline.store_url).await?;
        Report::from_store(&other, &baseline.run_id).await?
    };
    let (compared, regressions) = regression::compare(
        &before.measures(settings.min_requests),
        &now.measures(settings.min_requests),
        settings.threshold,
    );
    Ok(Comparison {
        baseline_run: baseline.run_id.clone(),
        chosen_by: baseline.chosen_by.into(),
        threshold: settings.threshold,
        matrix_changed: baseline.matrix_yaml != current_matrix,
        compared,
        regressions,
        fail: settings.fail,
    })
}
