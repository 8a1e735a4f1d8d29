//! Regressions against a baseline run: which run is the baseline ([`choose_baseline`]), what
//! two runs are compared on ([`Measure`]s, which `crate::report` reads off a report: QPS and p50 / p99 per scenario and per model,
//! capacity results, the servers' queue and compute time per request) and the verdict
//! ([`compare`]: a change beyond the threshold in the bad direction is a finding; a change inside
//! it, or in the good direction, is not). Pure: the driver finds the runs and reads their reports.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

/// The comparison with a baseline run, as the store and the report keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub baseline_run: String,
    /// How the baseline was chosen: `--baseline`, `pinned` or `last passing run`.
    pub chosen_by: String,
    pub threshold: f64,
    /// Whether the baseline ran a different matrix text under the same name.
    pub matrix_changed: bool,
    /// Metrics both runs have.
    pub compared: usize,
    pub regressions: Vec<Finding>,
    /// Whether findings fail the run (`regression.fail`).
    pub fail: bool,
}

/// The findings of `current` against `baseline`: the metrics both have whose change in the bad
/// direction is beyond `threshold` (0.1 = 10%). Returns them with the number compared.
pub fn compare(baseline: &[Measure], current: &[Measure], threshold: f64) -> (usize, Vec<Finding>) {
    let before: BTreeMap<&str, &Measure> =
        baseline.iter().map(|m| (m.metric.as_str(), m)).collect();
    let mut compared = 0;
    let mut findings = Vec::new();
    for m in current {
        let Some(b) = before.get(m.metric.as_str()) else {
            continue;
        };
        compared += 1;
        let change = (m.value - b.value) / b.value;
        let worse = if m.higher_is_better { -change } else { change };
        if worse > threshold {
            findings.push(Finding {
                metric: m.metric.clone(),
                baseline: b.value,
                current: m.value,
                change,
            });
        }
    }
    (compared, findings)
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
}

/// The baseline of run `current` named `name`: the run named by `--baseline` (whatever its
/// verdict), else the latest pinned run of that name, else its latest passing run. Never the
/// run itself. The second value says how it was chosen.
pub fn choose_baseline<'a>(
    candidates: &'a [Candidate],
    explicit: Option<&str>,
    name: &str,
    current: &str,
) -> Option<(&'a Candidate, &'static str)> {
    if let Some(id) = explicit {
        return candidates
            .iter()
            .find(|c| c.run_id == id)
            .map(|c| (c, "--baseline"));
    }
    let same = || {
        candidates
            .iter()
            .filter(move |c| c.name == name && c.run_id != current)
    };
    if let Some(c) = same()
        .filter(|c| c.pinned_at_ms.is_some())
        .max_by_key(|c| (c.pinned_at_ms, c.started_at_ms))
    {
        return Some((c, "pinned"));
    }
    same()
        .filter(|c| c.verdict.as_deref() == Some("PASS"))
        .max_by_key(|c| (c.started_at_ms, c.run_id.clone()))
        .map(|c| (c, "last passing run"))
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
        }
    }

    #[test]
    fn the_baseline_is_explicit_else_pinned_else_the_last_passing_run() {
        let runs = [
            candidate("a", "nightly", "PASS", 1, None),
            candidate("b", "nightly", "PASS", 2, None),
            candidate("c", "nightly", "FAIL", 3, None),
            candidate("other", "smoke", "PASS", 4, None),
            candidate("now", "nightly", "PASS", 5, None),
        ];
        let pick = |runs: &[Candidate], explicit| {
            choose_baseline(runs, explicit, "nightly", "now")
                .map(|(c, how)| (c.run_id.clone(), how))
        };
        assert_eq!(pick(&runs, None), Some(("b".into(), "last passing run")));
        assert_eq!(pick(&runs, Some("c")), Some(("c".into(), "--baseline")));
        assert_eq!(pick(&runs, Some("zzz")), None, "an unknown run");
        let mut pinned = runs.to_vec();
        pinned[0].pinned_at_ms = Some(10);
        assert_eq!(pick(&pinned, None), Some(("a".into(), "pinned")));
        assert_eq!(
            choose_baseline(&runs[..1], None, "nightly", "a"),
            None,
            "a first run has none (never itself)"
        );
    }
}
