//! Regressions against earlier runs of the same matrix: which runs are the baseline
//! ([`choose_baselines`]: `--baseline RUN`, a pinned run, or the last passing runs whose matrix
//! has the same fingerprint — never a run of another matrix under the same name) and the
//! comparison the store and the report keep ([`Comparison`]). What two runs are compared on
//! ([`Measure`]s, which `crate::report` reads off a report with their within-run spread) and the
//! verdict on each are `crate::judge::change`'s. Pure: the driver finds the runs and reads their
//! reports.

use serde::{Deserialize, Serialize};

use super::change::MIN_HISTORY;
pub use super::change::{Call, Finding, Measure, NotJudged};

/// The member a failing regression (with `regression.fail`) is recorded against: a run failed
/// by it alone still measured its load in full.
pub const MEMBER: &str = "regression";

/// The run's comparison in the store (one, under the empty key).
impl stress_common::store::Document for Comparison {
    const KIND: &'static str = "comparison";
}

/// The comparison with the baseline, as the store and the report keep it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The newest baseline run (empty: none was comparable, see `note`).
    pub baseline_run: String,
    /// How the baseline was chosen: `--baseline`, `pinned` or `last passing runs`.
    pub chosen_by: String,
    /// The smallest change worth a call (`regression.min_effect`; stored as `threshold` before).
    #[serde(alias = "threshold")]
    pub min_effect: f64,
    /// Whether the baseline ran a different matrix text (a pinned or named run).
    pub matrix_changed: bool,
    /// Metrics compared (judged or not).
    pub compared: usize,
    /// The changes called regressions (the REGRESSION lines).
    pub regressions: Vec<Finding>,
    /// Every metric judged, regressions included, with its interval and call.
    #[serde(default)]
    pub changes: Vec<Finding>,
    /// Metrics both sides have that could not be judged, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<NotJudged>,
    /// Whether findings fail the run (`regression.fail`).
    pub fail: bool,
    /// Every baseline run, newest first (one for `--baseline` or a pin).
    #[serde(default)]
    pub window: Vec<String>,
    /// Why nothing was compared (another matrix under the same name, no earlier passing run).
    pub note: Option<String>,
    /// What changed in the servers' and workers' binaries or images since the newest baseline
    /// run (an upgrade is compared with the runs before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub version_changes: Vec<String>,
    /// The run failed: its comparisons are for information, they judge nothing.
    #[serde(default)]
    pub informational: bool,
}

impl Comparison {
    /// Nothing comparable: why.
    pub fn none(note: String, min_effect: f64) -> Self {
        Comparison {
            baseline_run: String::new(),
            chosen_by: String::new(),
            min_effect,
            matrix_changed: false,
            compared: 0,
            regressions: Vec::new(),
            changes: Vec::new(),
            not_judged: Vec::new(),
            fail: false,
            window: Vec::new(),
            note: Some(note),
            version_changes: Vec::new(),
            informational: false,
        }
    }

    /// What the run was compared with, in words: `the last 5 passing runs of this matrix
    /// (newest R; their run-to-run spread, changes of 10% or more)`, or `baseline run R
    /// (pinned; ...)`, or the note when nothing was comparable.
    pub fn basis(&self) -> String {
        if self.baseline_run.is_empty() {
            return self.note.clone().unwrap_or_else(|| "no baseline".into());
        }
        let effect = format!("changes of {:.0}% or more", self.min_effect * 100.0);
        let mut text = if self.window.len() >= MIN_HISTORY {
            format!(
                "the last {} passing runs of this matrix (newest {}; their run-to-run spread, \
                 {effect})",
                self.window.len(),
                self.baseline_run,
            )
        } else {
            format!(
                "baseline run {} ({}; within-run intervals widened by the A/A run-to-run \
                 spread, {effect})",
                self.baseline_run, self.chosen_by,
            )
        };
        if self.matrix_changed {
            text.push_str("; its matrix text differs");
        }
        if self.informational {
            text.push_str("; for information: the run failed");
        }
        text
    }

    /// The changes of one call.
    pub fn called(&self, call: Call) -> impl Iterator<Item = &Finding> {
        self.changes.iter().filter(move |c| c.call == call)
    }

    /// `2 regressions, 1 improvement, 1 provisional, 40 ~ no significant change, 3 not judged`
    /// (the parts with any), or `~ no significant change in N metrics`.
    pub fn tally(&self) -> String {
        let count = |call| self.called(call).count();
        let unchanged = count(Call::NoChange);
        let mut parts = Vec::new();
        for (n, one, many) in [
            (count(Call::Regression), "regression", "regressions"),
            (count(Call::Improvement), "improvement", "improvements"),
            (
                count(Call::Provisional),
                "provisional change",
                "provisional changes",
            ),
        ] {
            if n > 0 {
                parts.push(format!("{n} {}", if n == 1 { one } else { many }));
            }
        }
        if parts.is_empty() {
            parts.push(format!("~ no significant change in {unchanged} metrics"));
        } else if unchanged > 0 {
            parts.push(format!("{unchanged} ~ no significant change"));
        }
        if !self.not_judged.is_empty() {
            parts.push(format!("{} not judged", self.not_judged.len()));
        }
        parts.join(", ")
    }
}

/// A run that could be the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub run_id: String,
    pub name: String,
    pub verdict: Option<String>,
    pub started_at_ms: i64,
    /// When `driver baseline set` pinned it (None: not pinned).
    pub pinned_at_ms: Option<i64>,
    /// Its matrix's fingerprint (None: its matrix text could not be read).
    pub fingerprint: Option<String>,
}

/// What the current run is compared with.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice<'a> {
    /// `--baseline RUN` (any matrix) or the name's pinned run (of this matrix): that one run.
    One(&'a Candidate, &'static str),
    /// The last passing runs of this matrix (same fingerprint, any name), newest first.
    Window(Vec<&'a Candidate>),
    /// Nothing to compare with, and why.
    Nothing(String),
}

/// The baseline of run `current` named `name` whose matrix has `fingerprint`: the run named by
/// `--baseline` (whatever its verdict or matrix), else the latest pinned run of that name if it
/// ran this matrix, else the last `window` passing runs of this matrix. Never the run itself;
/// never a run of another matrix unless named explicitly.
pub fn choose_baselines<'a>(
    candidates: &'a [Candidate],
    explicit: Option<&str>,
    name: &str,
    fingerprint: &str,
    current: &str,
    window: usize,
) -> Option<Choice<'a>> {
    if let Some(id) = explicit {
        return candidates
            .iter()
            .find(|c| c.run_id == id)
            .map(|c| Choice::One(c, "--baseline"));
    }
    let others = || candidates.iter().filter(move |c| c.run_id != current);
    let same_matrix = |c: &&Candidate| c.fingerprint.as_deref() == Some(fingerprint);
    if let Some(pinned) = others()
        .filter(|c| c.name == name && c.pinned_at_ms.is_some())
        .max_by_key(|c| (c.pinned_at_ms, c.started_at_ms))
    {
        return Some(if same_matrix(&pinned) {
            Choice::One(pinned, "pinned")
        } else {
            Choice::Nothing(format!(
                "no comparable baseline: the pinned run {} of {name} ran another matrix (pin a \
                 run of this one with `driver baseline set`)",
                pinned.run_id
            ))
        });
    }
    let mut passing: Vec<&Candidate> = others()
        .filter(same_matrix)
        .filter(|c| c.verdict.as_deref() == Some("PASS"))
        .collect();
    passing.sort_by_key(|c| std::cmp::Reverse((c.started_at_ms, c.run_id.clone())));
    passing.truncate(window.max(1));
    if !passing.is_empty() {
        return Some(Choice::Window(passing));
    }
    let other_matrix = others()
        .filter(|c| c.name == name && !same_matrix(c))
        .count();
    Some(Choice::Nothing(if other_matrix > 0 {
        format!(
            "no comparable baseline: the {other_matrix} earlier run(s) named {name} ran another \
             matrix (servers, clients, scenarios, models, load or planned faults differ)"
        )
    } else {
        format!("no baseline: no earlier passing run of this matrix ({name})")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, name: &str, verdict: &str, at: i64, pinned: Option<i64>) -> Candidate {
        Candidate {
            run_id: id.into(),
            name: name.into(),
            verdict: Some(verdict.into()),
            started_at_ms: at,
            pinned_at_ms: pinned,
            fingerprint: Some(if name == "other-matrix" { "B" } else { "A" }.into()),
        }
    }

    fn ids(choice: Option<Choice>) -> (Vec<String>, &'static str) {
        match choice {
            Some(Choice::One(c, how)) => (vec![c.run_id.clone()], how),
            Some(Choice::Window(w)) => (w.iter().map(|c| c.run_id.clone()).collect(), "window"),
            Some(Choice::Nothing(_)) => (vec![], "nothing"),
            None => (vec![], "unknown"),
        }
    }

    #[test]
    fn the_baseline_is_explicit_else_pinned_else_the_last_passing_runs_of_this_matrix() {
        let runs = [
            candidate("a", "nightly", "PASS", 1, None),
            candidate("b", "nightly", "PASS", 2, None),
            candidate("c", "nightly", "FAIL", 3, None),
            candidate("renamed", "smoke", "PASS", 4, None),
            candidate("now", "nightly", "PASS", 5, None),
        ];
        let pick = |runs: &[Candidate], explicit| {
            ids(choose_baselines(runs, explicit, "nightly", "A", "now", 5))
        };
        assert_eq!(
            pick(&runs, None),
            (vec!["renamed".into(), "b".into(), "a".into()], "window"),
            "passing runs of the same matrix, newest first, whatever their name"
        );
        assert_eq!(
            ids(choose_baselines(&runs, None, "nightly", "A", "now", 2)).0,
            ["renamed", "b"]
        );
        assert_eq!(pick(&runs, Some("c")), (vec!["c".into()], "--baseline"));
        assert_eq!(
            pick(&runs, Some("zzz")),
            (vec![], "unknown"),
            "an unknown run"
        );
        let mut pinned = runs.to_vec();
        pinned[0].pinned_at_ms = Some(10);
        assert_eq!(pick(&pinned, None), (vec!["a".into()], "pinned"));
        assert_eq!(
            ids(choose_baselines(&runs[..1], None, "nightly", "A", "a", 5)).1,
            "nothing",
            "a first run has none (never itself)"
        );
    }

    #[test]
    fn runs_of_another_matrix_under_the_same_name_are_never_a_baseline() {
        let mut runs = vec![
            candidate("small-1", "smoke", "PASS", 1, None),
            candidate("small-2", "smoke", "PASS", 2, None),
        ];
        for r in &mut runs {
            r.fingerprint = Some("one server, one worker".into());
        }
        let choice = choose_baselines(&runs, None, "smoke", "two servers, eight workers", "big", 5);
        let Some(Choice::Nothing(why)) = choice else {
            panic!("{choice:?}")
        };
        assert!(
            why.starts_with(
                "no comparable baseline: the 2 earlier run(s) named smoke ran another matrix"
            ),
            "{why}"
        );
        // A pin of another matrix is not used either; one of this matrix is.
        runs[1].pinned_at_ms = Some(5);
        let choice = choose_baselines(&runs, None, "smoke", "two servers, eight workers", "big", 5);
        assert!(matches!(choice, Some(Choice::Nothing(ref w)) if w.contains("pinned run small-2")));
        let choice = choose_baselines(&runs, None, "smoke", "one server, one worker", "big", 5);
        assert!(matches!(choice, Some(Choice::One(c, "pinned")) if c.run_id == "small-2"));
    }
}
