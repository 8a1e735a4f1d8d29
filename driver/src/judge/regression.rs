//! Regressions against earlier runs of the same matrix: which runs are the baseline
//! ([`choose_baselines`]: `--baseline RUN`, a pinned run, or the last passing runs whose matrix
//! has the same fingerprint — never a run of another matrix under the same name), what two
//! runs are compared on ([`Measure`]s, which `crate::report` reads off a report: QPS and
//! p50 / p99 per scenario and per model, capacity results, the servers' queue and compute time
//! per request) and the verdict ([`compare_window`]): against a window of at least
//! [`MIN_WINDOW`] runs a change is a finding only beyond that window's own run-to-run spread
//! (its median ± 3 scaled MADs) and the threshold; against fewer, beyond the threshold of the
//! newest. Pure: the driver finds the runs and reads their reports.

use serde::{Deserialize, Serialize};

/// One number two runs are compared on.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// e.g. `p99_ms Load`, `qps Infer/add_sub`, `capacity_qps grpc-clients/production/mix`,
    /// `queue_us_per_request add_sub`.
    pub metric: String,
    pub value: f64,
    /// QPS and capacity: a drop is bad; latencies and server times: a rise is.
    pub higher_is_better: bool,
}

/// A change beyond the threshold in the bad direction (report.json `regressions[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub metric: String,
    pub baseline: f64,
    pub current: f64,
    /// (current − baseline) / baseline: +0.25 is 25% more.
    pub change: f64,
}

impl Finding {
    /// `p99_ms Load: 10.000 -> 13.000 (+30.0%)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {:.3} -> {:.3} ({:+.1}%)",
            self.metric,
            self.baseline,
            self.current,
            self.change * 100.0
        )
    }
}

/// The run's comparison in the store (one, under the empty key).
impl stress_common::store::Document for Comparison {
    const KIND: &'static str = "comparison";
}

/// The comparison with the baseline, as the store and the report keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The newest baseline run (empty: none was comparable, see `note`).
    pub baseline_run: String,
    /// How the baseline was chosen: `--baseline`, `pinned` or `last passing runs`.
    pub chosen_by: String,
    pub threshold: f64,
    /// Whether the baseline ran a different matrix text (a pinned or named run).
    pub matrix_changed: bool,
    /// Metrics compared.
    pub compared: usize,
    pub regressions: Vec<Finding>,
    /// Whether findings fail the run (`regression.fail`).
    pub fail: bool,
    /// Every baseline run, newest first (one for `--baseline` or a pin).
    #[serde(default)]
    pub window: Vec<String>,
    /// Why nothing was compared (another matrix under the same name, no earlier passing run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    pub fn none(note: String, threshold: f64) -> Self {
        Comparison {
            baseline_run: String::new(),
            chosen_by: String::new(),
            threshold,
            matrix_changed: false,
            compared: 0,
            regressions: Vec::new(),
            fail: false,
            window: Vec::new(),
            note: Some(note),
            version_changes: Vec::new(),
            informational: false,
        }
    }

    /// What the run was compared with, in words: `baseline run R (pinned; threshold 10%)`, or
    /// `the last 5 passing runs of this matrix (newest R; beyond their median ± max(10%, 3
    /// MADs))`, or the note when nothing was comparable.
    pub fn basis(&self) -> String {
        if self.baseline_run.is_empty() {
            return self.note.clone().unwrap_or_else(|| "no baseline".into());
        }
        let mut text = if self.window.len() >= MIN_WINDOW {
            format!(
                "the last {} passing runs of this matrix (newest {}; a change beyond their \
                 median ± max({:.0}%, 3 MADs))",
                self.window.len(),
                self.baseline_run,
                self.threshold * 100.0
            )
        } else {
            format!(
                "baseline run {} ({}; threshold {:.0}%)",
                self.baseline_run,
                self.chosen_by,
                self.threshold * 100.0
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
}

/// Fewer runs than this in the window and a change is judged by the threshold alone.
pub const MIN_WINDOW: usize = 3;

/// MADs are scaled by this to estimate a normal spread's standard deviation.
const MAD_SCALE: f64 = 1.4826;

/// The findings of `current` against the baseline runs `window` (each run's measures, newest
/// first): per metric, with [`MIN_WINDOW`] or more runs that have it, a change from their median
/// in the bad direction beyond both `threshold` (0.1 = 10%) and 3 scaled MADs; with fewer, a
/// change from the newest beyond `threshold`. Returns the number compared and the findings.
pub fn compare_window(
    window: &[Vec<Measure>],
    current: &[Measure],
    threshold: f64,
) -> (usize, Vec<Finding>) {
    let mut compared = 0;
    let mut findings = Vec::new();
    for m in current {
        let values: Vec<f64> = window
            .iter()
            .filter_map(|run| run.iter().find(|b| b.metric == m.metric))
            .map(|b| b.value)
            .collect();
        let Some(&newest) = values.first() else {
            continue;
        };
        compared += 1;
        let (center, band) = if values.len() >= MIN_WINDOW {
            let center = median(values.clone());
            let mad = median(values.iter().map(|v| (v - center).abs()).collect());
            (
                center,
                (threshold * center.abs()).max(3.0 * MAD_SCALE * mad),
            )
        } else {
            (newest, threshold * newest.abs())
        };
        let change = m.value - center;
        let worse = if m.higher_is_better { -change } else { change };
        if worse > band {
            findings.push(Finding {
                metric: m.metric.clone(),
                baseline: center,
                current: m.value,
                change: change / center,
            });
        }
    }
    (compared, findings)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The findings of `current` against one `baseline` run: a change in the bad direction beyond
/// `threshold` (0.1 = 10%). Returns them with the number compared.
pub fn compare(baseline: &[Measure], current: &[Measure], threshold: f64) -> (usize, Vec<Finding>) {
    compare_window(std::slice::from_ref(&baseline.to_vec()), current, threshold)
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
             matrix (servers, clients, scenarios or models differ)"
        )
    } else {
        format!("no baseline: no earlier passing run of this matrix ({name})")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(metric: &str, value: f64, higher_is_better: bool) -> Measure {
        Measure {
            metric: metric.into(),
            value,
            higher_is_better,
        }
    }

    #[test]
    fn only_changes_beyond_the_threshold_in_the_bad_direction_are_findings() {
        let baseline = [
            m("qps Load", 1000.0, true),
            m("p99_ms Load", 10.0, false),
            m("p50_ms Load", 4.0, false),
            m("qps Infer/add_sub", 500.0, true),
            m("gone", 1.0, true),
        ];
        let current = [
            m("qps Load", 920.0, true),          // -8%: noise inside 10%
            m("p99_ms Load", 13.0, false),       // +30%: slower
            m("p50_ms Load", 3.0, false),        // -25%: faster, not a finding
            m("qps Infer/add_sub", 400.0, true), // -20%: fewer
            m("new", 1.0, true),
        ];
        let (compared, findings) = compare(&baseline, &current, 0.1);
        assert_eq!(compared, 4, "metrics both runs have");
        let names: Vec<(&str, f64)> = findings
            .iter()
            .map(|f| (f.metric.as_str(), (f.change * 100.0).round()))
            .collect();
        assert_eq!(names, [("p99_ms Load", 30.0), ("qps Infer/add_sub", -20.0)]);
        assert_eq!(findings[0].baseline, 10.0);
        assert_eq!(findings[0].current, 13.0);
        assert_eq!(
            findings[0].describe(),
            "p99_ms Load: 10.000 -> 13.000 (+30.0%)"
        );
        let (_, none) = compare(&baseline, &current, 0.5);
        assert!(none.is_empty(), "a wider threshold: {none:?}");
        let (_, exact) = compare(&baseline, &baseline, 0.0);
        assert!(exact.is_empty(), "no change is no finding");
    }

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

    #[test]
    fn a_window_flags_only_changes_beyond_its_own_spread() {
        // p99 over five nights: noisy, 10 ± 2.5 ms.
        let window: Vec<Vec<Measure>> = [10.0, 12.5, 8.0, 11.0, 9.5]
            .iter()
            .map(|v| vec![m("p99_ms Load", *v, false), m("qps Load", 1000.0, true)])
            .collect();
        // +25%: beyond 10% of the median (10), inside 3 MADs (3 x 1.4826 x 1.0 = 4.4 ms).
        let (compared, findings) = compare_window(&window, &[m("p99_ms Load", 12.5, false)], 0.1);
        assert_eq!((compared, findings.len()), (1, 0), "{findings:?}");
        // +60%: beyond both.
        let (_, findings) = compare_window(&window, &[m("p99_ms Load", 16.0, false)], 0.1);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].baseline, 10.0, "the window's median");
        // QPS never moved (MAD 0): the threshold still bounds it, -5% is no finding.
        let (_, findings) = compare_window(&window, &[m("qps Load", 950.0, true)], 0.1);
        assert!(findings.is_empty(), "{findings:?}");
        let (_, findings) = compare_window(&window, &[m("qps Load", 850.0, true)], 0.1);
        assert_eq!(findings.len(), 1);
        // Fewer runs than MIN_WINDOW: the threshold against the newest.
        let two = &window[1..3];
        let (_, findings) = compare_window(two, &[m("p99_ms Load", 13.0, false)], 0.1);
        assert!(
            findings.is_empty(),
            "{findings:?}: +4% of the newest (12.5)"
        );
        let (_, findings) = compare_window(two, &[m("p99_ms Load", 14.0, false)], 0.1);
        assert_eq!(findings[0].baseline, 12.5);
    }
}
