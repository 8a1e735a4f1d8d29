//! Runs made of runs (I/O only), each block a run of its own (beside the others under the runs
//! directory: fresh servers, its own store, report and comparison with the runs before it, and so
//! a point of its matrix's history), one after another; a block that fails does not stop the
//! rest, a cancelled run stops them.
//! - `run.repeat: N`: the load N times (`RUN-r1`, …), then each metric across them
//!   (`judge::repeats`) in the run's directory as repeats.txt and repeats.json.
//! - `compare: {a, b, repeats: k}`: the two server templates' sides interleaved (`RUN-a1`,
//!   `RUN-b1`, `RUN-a2`, …), then every metric of B against A (`judge::change::compare_groups`:
//!   the ratio, its 95% interval and a rank test's p) as compare.txt and compare.json.
//! - `run.cells: in_turn`: each cell of the client × server grid alone (`RUN-c1`, …: its
//!   client groups and its server group), then their grid as grid.txt and grid.json.

use std::path::Path;

use super::{DriverError, RunOutcome, RunsOf, Verdict};
use crate::judge::repeats::{self, Repeat, Repeats};
use crate::launcher::LaunchFor;
use crate::matrix::Matrix;
use crate::report::grid::Grid;

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

/// Which matrix file a block's run records.
#[derive(Clone, Copy, PartialEq)]
enum BlockFile {
    /// The run's own (a repeat or an A/B side: the same matrix, or one template swapped).
    Run,
    /// The block's matrix, written into its run directory (a cell in turn: its report and
    /// history are of the cell's matrix alone).
    Own,
}

/// Runs each block (its run id and matrix) of `runs` in turn.
async fn blocks(
    runs: &RunsOf<'_>,
    blocks: &[(String, Matrix)],
    file: BlockFile,
) -> Result<Vec<RunOutcome>, DriverError> {
    let cancel = &runs.cancel;
    let mut outcomes = Vec::new();
    for (k, (id, matrix)) in blocks.iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let dir = super::new_run_dir(runs.options, id)?;
        let options = match file {
            BlockFile::Run => runs.options.clone(),
            BlockFile::Own => own_matrix_file(runs.options, matrix, &dir)?,
        };
        tracing::info!(run_id = id, "run {} of {}", k + 1, blocks.len());
        let mut launcher = (runs.launcher_for)(LaunchFor {
            dir: &dir,
            run_id: id,
            matrix,
            matrix_file: &options.matrix,
        })
        .await
        .map_err(DriverError::Launch)?;
        let outcome = super::run(
            &options,
            launcher.as_mut(),
            matrix,
            &dir,
            id,
            cancel.clone(),
        )
        .await?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// `options` with `matrix` written to `<dir>/matrix.yaml` as its matrix file.
fn own_matrix_file(
    options: &super::RunOptions,
    matrix: &Matrix,
    dir: &Path,
) -> Result<super::RunOptions, DriverError> {
    let file = dir.join("matrix.yaml");
    let yaml = serde_saphyr::to_string(matrix)
        .map_err(|e| DriverError::Config(format!("the cell's matrix: {e}")))?;
    std::fs::write(&file, yaml).map_err(|error| DriverError::RunDir {
        path: dir.into(),
        error,
    })?;
    Ok(super::RunOptions {
        matrix: file,
        ..options.clone()
    })
}

/// Runs the load `matrix.run.repeat` times; `run_dir` (the repeat run's own directory) gets the
/// summary.
pub async fn repeat(runs: RunsOf<'_>) -> Result<RepeatOutcome, DriverError> {
    let (matrix, run_id) = (runs.matrix, runs.run_id);
    let planned: Vec<(String, Matrix)> = (1..=matrix.run.repeat)
        .map(|k| (format!("{run_id}-r{k}"), matrix.clone()))
        .collect();
    let outcomes = blocks(&runs, &planned, BlockFile::Run).await?;
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
    let outcomes = blocks(&runs, &sides, BlockFile::Run).await?;
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

/// Runs each cell of the matrix alone (`run.cells: in_turn`), then gathers their grid.
pub async fn cells_in_turn(runs: RunsOf<'_>) -> Result<RepeatOutcome, DriverError> {
    let (matrix, run_id) = (runs.matrix, runs.run_id);
    let cells = matrix.cells();
    let planned: Vec<(String, Matrix)> = cells
        .iter()
        .enumerate()
        .map(|(k, cell)| (format!("{run_id}-c{}", k + 1), matrix.cell_run(cell)))
        .collect();
    let outcomes = blocks(&runs, &planned, BlockFile::Own).await?;
    let grid = Grid {
        clients: matrix.client_templates.keys().cloned().collect(),
        servers: matrix.server_groups.keys().cloned().collect(),
        cells: outcomes
            .iter()
            .filter_map(|o| o.report.grid.as_ref())
            .flat_map(|g| g.cells.iter().cloned())
            .collect(),
    };
    let runs_line = outcomes
        .iter()
        .zip(&cells)
        .map(|(o, c)| {
            format!(
                "{}: {} on {} {}",
                o.run_id,
                c.client,
                c.server,
                o.verdict.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "== Cells in turn, {} s each: {runs_line} =={}",
        runs.options
            .duration
            .unwrap_or(matrix.run.duration)
            .as_secs(),
        crate::render::text::grid(&grid)
    );
    write(runs.run_dir, "grid", &text, &grid)?;
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
