//! Runs made of runs (I/O only), each block a run of its own (beside the others under the runs
//! directory: fresh servers, its own store, report and comparison with the runs before it, and so
//! a point of its matrix's history), one after another; a block that fails does not stop the
//! rest, a cancelled run stops them.
//! - `run.repeat: N`: the load N times (`RUN-r1`, …), then each metric across them
//!   (`judge::repeats`) in the run's directory as repeats.txt and repeats.json.
//! - `compare: {a, b, repeats: k}`: the two server templates' sides interleaved (`RUN-a1`,
//!   `RUN-b1`, `RUN-a2`, …), then every metric of B against A (`judge::change::compare_groups`:
//!   the ratio, its 95% interval and a rank test's p) as compare.txt and compare.json.

use std::path::Path;

use super::{DriverError, RunOutcome, RunsOf, Verdict};
use crate::judge::repeats::{self, Repeat, Repeats};
use crate::launcher::LaunchFor;
use crate::matrix::Matrix;

/// What the runs gave: each one's outcome (in order), and what was found across them in words
/// (repeats.txt, compare.txt) and, for repeats, as data.
pub struct RepeatOutcome {
    pub outcomes: Vec<RunOutcome>,
    pub text: String,
    pub repeats: Option<Repeats>,
}

impl RepeatOutcome {
    /// The worst of the repeats' verdicts (the first failure's).
    pub fn verdict(&self) -> Verdict {
        self.outcomes
            .iter()
            .map(|o| o.verdict.clone())
            .find(|v| *v != Verdict::Pass)
            .unwrap_or(Verdict::Pass)
    }
}

/// Runs each block (its run id and matrix) of `runs` in turn.
async fn blocks(
    runs: &RunsOf<'_>,
    blocks: &[(String, Matrix)],
) -> Result<Vec<RunOutcome>, DriverError> {
    let (options, cancel) = (runs.options, &runs.cancel);
    let mut outcomes = Vec::new();
    for (k, (id, matrix)) in blocks.iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let dir = super::new_run_dir(options, id)?;
        tracing::info!(run_id = id, "run {} of {}", k + 1, blocks.len());
        let mut launcher = (runs.launcher_for)(LaunchFor {
            dir: &dir,
            run_id: id,
            matrix,
            matrix_file: &options.matrix,
        })
        .await
        .map_err(DriverError::Launch)?;
        let outcome =
            super::run(options, launcher.as_mut(), matrix, &dir, id, cancel.clone()).await?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Runs the load `matrix.run.repeat` times; `run_dir` (the repeat run's own directory) gets the
/// summary.
pub async fn repeat(runs: RunsOf<'_>) -> Result<RepeatOutcome, DriverError> {
    let (matrix, run_id) = (runs.matrix, runs.run_id);
    let planned: Vec<(String, Matrix)> = (1..=matrix.run.repeat)
        .map(|k| (format!("{run_id}-r{k}"), matrix.clone()))
        .collect();
    let outcomes = blocks(&runs, &planned).await?;
    let repeats = repeats::across(
        &outcomes
            .iter()
            .map(|o| Repeat {
                run_id: o.run_id.clone(),
                verdict: o.verdict.as_str().into(),
                estimates: o.report.estimates.clone(),
            })
            .collect::<Vec<_>>(),
    );
    let text = repeats.render(&matrix.run.name);
    write(runs.run_dir, "repeats", &text, &repeats)?;
    Ok(RepeatOutcome {
        outcomes,
        text,
        repeats: Some(repeats),
    })
}

/// Runs the comparison of `matrix.compare`: its sides interleaved, then B against A.
pub async fn compare(runs: RunsOf<'_>) -> Result<RepeatOutcome, DriverError> {
    let (matrix, run_id) = (runs.matrix, runs.run_id);
    let c = matrix.compare.as_ref().expect("a comparison");
    let (a, b) = (matrix.compare_side(&c.a), matrix.compare_side(&c.b));
    let sides: Vec<(String, Matrix)> = (1..=c.repeats)
        .flat_map(|k| {
            [
                (format!("{run_id}-a{k}"), a.clone()),
                (format!("{run_id}-b{k}"), b.clone()),
            ]
        })
        .collect();
    let outcomes = blocks(&runs, &sides).await?;
    let settings = matrix.regression.clone().unwrap_or_default();
    let side = |prefix: &str| -> Vec<_> {
        outcomes
            .iter()
            .filter(|o| o.run_id.starts_with(&format!("{run_id}-{prefix}")))
            .map(|o| o.report.measures(settings.min_requests))
            .collect()
    };
    let judged = crate::judge::change::compare_groups(&side("a"), &side("b"), settings.min_effect);
    let text = format!(
        "== A/B: server template {} (B) against {} (A), {} runs each, interleaved: {} ==\n{}",
        c.b,
        c.a,
        c.repeats,
        outcomes
            .iter()
            .map(|o| format!("{}: {}", o.run_id, o.verdict.as_str()))
            .collect::<Vec<_>>()
            .join(", "),
        crate::render::text::judged(&judged)
    );
    write(runs.run_dir, "compare", &text, &judged)?;
    Ok(RepeatOutcome {
        outcomes,
        text,
        repeats: None,
    })
}

/// `<run_dir>/<name>.txt` and `.json`.
fn write(
    run_dir: &Path,
    name: &str,
    text: &str,
    json: &impl serde::Serialize,
) -> Result<(), DriverError> {
    let io = |error| DriverError::RunDir {
        path: run_dir.into(),
        error,
    };
    std::fs::write(run_dir.join(format!("{name}.txt")), text).map_err(io)?;
    std::fs::write(
        run_dir.join(format!("{name}.json")),
        serde_json::to_string_pretty(json).expect("plain data serialises"),
    )
    .map_err(io)
}
