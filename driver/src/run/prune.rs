//! `driver prune`: deletes the runs older than an age, with everything recorded for them, from a
//! store or from the run directories under a runs directory (a directory whose store has no run
//! left goes whole). A run still going, or pinned as a baseline, is never pruned.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stress_common::contract::RunId;
use stress_common::store::{RunRow, Store, StoreError};

/// A run pruned (or, with `dry_run`, that would be).
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    pub run_id: String,
    pub name: String,
    pub started_at_ms: i64,
    pub verdict: Option<String>,
    /// Its run directory, removed with it (None: a shared store, or the directory holds other
    /// runs still).
    pub removed_dir: Option<PathBuf>,
}

/// Which runs go (pure): started before `cutoff_ms`, over (finished, or their driver's lease ran
/// out before `now_ms`), and not pinned as a baseline.
pub fn prunable<'a>(
    runs: &'a [RunRow],
    pinned: &BTreeSet<String>,
    cutoff_ms: i64,
    now_ms: i64,
) -> Vec<&'a RunRow> {
    runs.iter()
        .filter(|r| r.started_at_ms < cutoff_ms)
        .filter(|r| r.finished_at_ms.is_some() || r.lease_until_ms.is_some_and(|l| l < now_ms))
        .filter(|r| !pinned.contains(&r.run_id))
        .collect()
}

/// Prunes the runs older than `older_than` from the store at `database_url`, or else from every
/// run directory's store under `runs_dir`.
pub async fn prune(
    database_url: Option<&str>,
    runs_dir: &Path,
    older_than: Duration,
    dry_run: bool,
) -> Result<Vec<Pruned>, StoreError> {
    let now = stress_common::now_ms();
    let cutoff = now - stress_common::millis(older_than);
    let stores: Vec<(String, Option<PathBuf>)> = match database_url {
        Some(url) => vec![(url.to_string(), None)],
        None => std::fs::read_dir(runs_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|dir| dir.join("store.sqlite").is_file())
            .map(|dir| (Store::sqlite_url(&dir.join("store.sqlite")), Some(dir)))
            .collect(),
    };
    let mut out = Vec::new();
    for (url, dir) in stores {
        let store = Store::connect(&url).await?;
        let runs = store.runs().await?;
        let pinned: BTreeSet<String> = store
            .baselines()
            .await?
            .into_iter()
            .map(|(_, run, _)| run)
            .collect();
        let going = prunable(&runs, &pinned, cutoff, now);
        let all_go = going.len() == runs.len() && !runs.is_empty();
        let mut pruned: Vec<Pruned> = going
            .iter()
            .map(|r| Pruned {
                run_id: r.run_id.clone(),
                name: r.name.clone(),
                started_at_ms: r.started_at_ms,
                verdict: r.verdict.clone(),
                removed_dir: None,
            })
            .collect();
        if !dry_run {
            for r in &going {
                store.delete_run(&RunId::new(r.run_id.clone())).await?;
            }
        }
        store.close().await;
        if let (true, Some(dir)) = (all_go, dir) {
            if !dry_run && let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(
                    "{}: its runs are pruned, the directory stays: {e}",
                    dir.display()
                );
                out.append(&mut pruned);
                continue;
            }
            for p in &mut pruned {
                p.removed_dir = Some(dir.clone());
            }
        }
        out.append(&mut pruned);
    }
    out.sort_by_key(|p| p.started_at_ms);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, started: i64, finished: Option<i64>, lease: Option<i64>) -> RunRow {
        RunRow {
            run_id: id.into(),
            name: "n".into(),
            matrix_yaml: String::new(),
            launcher: "local".into(),
            started_at_ms: started,
            finished_at_ms: finished,
            verdict: finished.map(|_| "PASS".into()),
            lease_until_ms: lease,
            fingerprint: None,
        }
    }

    #[test]
    fn only_old_runs_that_are_over_and_not_pinned_go() {
        let runs = [
            run("old-finished", 10, Some(20), None),
            run("old-pinned", 10, Some(20), None),
            run("old-abandoned", 10, None, Some(50)),
            run("old-running", 10, None, Some(1_000)),
            run("new-finished", 200, Some(300), None),
        ];
        let pinned = BTreeSet::from(["old-pinned".to_string()]);
        let going: Vec<&str> = prunable(&runs, &pinned, 100, 500)
            .iter()
            .map(|r| r.run_id.as_str())
            .collect();
        assert_eq!(going, ["old-finished", "old-abandoned"]);
    }
}
