//! A matrix's nightly history as one series per metric, and the change points in it
//! ([`crate::judge::change_point`]): which run each change starts with, its size, and what
//! differs between the runs on either side. Also the series as CSV for Apache Otava (`driver
//! history --format csv`).
//!
//! The history of a run is the finished runs of its matrix fingerprint that measured their load
//! in full: passing runs, and runs failed by a regression alone (a run that failed early
//! measured less, and one with faults has another fingerprint). Pure: the runs' summaries in,
//! their series and change points out.

use serde::{Deserialize, Serialize};

use super::summary::RunSummary;
use crate::judge::change_point::{self, Settings};

/// The change points found over a run's history, as the store and the report keep them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangePoints {
    /// The runs read, oldest first.
    pub runs: Vec<String>,
    /// The smallest change kept (`regression.min_effect`, as Otava's `-M`: a shift's size is
    /// the larger of its relative changes either way, so -9.5% is 10.5% back): a shift that is
    /// significant but smaller is no change point. 0 in documents saved before it was kept.
    #[serde(default)]
    pub min_effect: f64,
    /// Each metric's change points, oldest first.
    pub shifts: Vec<Shift>,
}

impl stress_common::store::Document for ChangePoints {
    const KIND: &'static str = "change_points";
}

impl ChangePoints {
    /// How the points were found, in words: the report's headings say it.
    pub fn method(&self) -> String {
        let mut words = "E-Divisive means, t-test p < 0.001".to_string();
        if self.min_effect > 0.0 {
            words += &format!(", changes of {:.0}% or more", self.min_effect * 100.0);
        }
        words
    }

    /// The shifts grouped by the run they start with, oldest first.
    pub fn by_run(&self) -> Vec<(&str, Vec<&Shift>)> {
        let mut out: Vec<(&str, Vec<&Shift>)> = Vec::new();
        for s in &self.shifts {
            match out.last_mut() {
                Some((run, shifts)) if *run == s.run_id => shifts.push(s),
                _ => out.push((&s.run_id, vec![s])),
            }
        }
        out
    }

    /// The report's lines: a heading line per run a change starts with (how many metrics
    /// went which way, what differs), then each metric's change.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.shifts.is_empty() {
            out.push(format!(
                "no change point in the last {} run(s) of this matrix",
                self.runs.len()
            ));
        }
        for (run, shifts) in self.by_run() {
            let worse = shifts.iter().filter(|s| s.worse).count();
            let differs: Vec<&str> = shifts[0].differs.iter().map(String::as_str).collect();
            out.push(format!(
                "from run {run} (after {}): {worse} metric(s) worse, {} better; {}",
                shifts[0].previous_run_id,
                shifts.len() - worse,
                if differs.is_empty() {
                    "no difference known between the two runs".to_string()
                } else {
                    format!("differs: {}", differs.join("; "))
                }
            ));
            for s in shifts {
                let way = if s.worse { "worse" } else { "better" };
                out.push(format!("  {} {way}", s.describe()));
            }
        }
        out
    }
}

/// A change point of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shift {
    pub metric: String,
    /// The first run after the change, and when it started.
    pub run_id: String,
    pub started_at_ms: i64,
    /// The last run before it.
    pub previous_run_id: String,
    /// The means of the segments on either side, their relative change and the t-test's p.
    pub mean_before: f64,
    pub mean_after: f64,
    pub change: f64,
    pub p_value: f64,
    /// For the worse (a higher latency, a lower QPS).
    pub worse: bool,
    /// What differs between the runs on either side (server versions, launcher), in words.
    pub differs: Vec<String>,
}

impl Shift {
    /// `p99_ms Load: +12.0% (10.2 → 11.4, p=0.0003)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {:+.1}% ({} → {}, p={:.2e})",
            self.metric,
            self.change * 100.0,
            short(self.mean_before),
            short(self.mean_after),
            self.p_value
        )
    }
}

fn short(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

/// Whether a run's figures belong in its matrix's history (see the module's doc).
pub fn measured_in_full(run: &RunSummary) -> bool {
    let by_regression = format!("{}:", crate::judge::regression::MEMBER);
    run.finished_at_ms.is_some()
        && (run.verdict == "PASS"
            || (run.verdict == "FAIL"
                && run
                    .root_cause
                    .as_deref()
                    .is_some_and(|c| c.starts_with(&by_regression))))
}

/// The history of `fingerprint` among `runs` (any order): its last `window` runs measured in
/// full, oldest first.
pub fn history<'a>(
    runs: &'a [RunSummary],
    fingerprint: &str,
    window: usize,
) -> Vec<&'a RunSummary> {
    let mut of: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.fingerprint.as_deref() == Some(fingerprint) && measured_in_full(r))
        .collect();
    of.sort_by_key(|r| (r.started_at_ms, r.run_id.clone()));
    of.dedup_by(|a, b| a.run_id == b.run_id);
    let skip = of.len().saturating_sub(window);
    of.split_off(skip)
}

/// The history of the matrix named `name` among `runs`: that of its newest run's fingerprint
/// (the last `window` runs measured in full, oldest first), or why there is none.
pub fn of_matrix<'a>(
    runs: &'a [RunSummary],
    name: &str,
    window: usize,
) -> Result<Vec<&'a RunSummary>, String> {
    let newest = runs
        .iter()
        .filter(|r| r.name == name && r.fingerprint.is_some())
        .max_by_key(|r| (r.started_at_ms, r.run_id.clone()))
        .ok_or_else(|| format!("no finished run of a matrix named {name:?}"))?;
    let fingerprint = newest.fingerprint.as_deref().expect("filtered");
    let of = history(runs, fingerprint, window);
    if of.is_empty() {
        return Err(format!(
            "no run of {name:?} ({fingerprint}) passed or failed by a regression alone"
        ));
    }
    Ok(of)
}

/// One metric over the runs: (the run's position, its value), oldest first; a run without the
/// metric has no point.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub metric: String,
    pub higher_is_better: bool,
    pub points: Vec<(usize, f64)>,
}

/// Every metric of `runs` (oldest first) as a series, by name.
pub fn series(runs: &[&RunSummary]) -> Vec<Series> {
    let mut by_metric: std::collections::BTreeMap<&str, Series> = Default::default();
    for (i, run) in runs.iter().enumerate() {
        for e in run
            .estimates
            .iter()
            .filter(|e| e.value.is_finite() && !e.too_few_requests)
        {
            by_metric
                .entry(&e.metric)
                .or_insert_with(|| Series {
                    metric: e.metric.clone(),
                    higher_is_better: e.higher_is_better,
                    points: Vec::new(),
                })
                .points
                .push((i, e.value));
        }
    }
    by_metric.into_values().collect()
}

/// The change points of every metric over `runs` (oldest first) of at least `min_effect` in
/// size, as the regression calls are: where a metric has no spread within the segments (a
/// sleep-bound model's percentiles fall in one histogram bucket run after run), the t-test
/// calls any difference significant, and an A/A history showed a 0.1% "change" of a p50.
pub fn change_points(runs: &[&RunSummary], min_effect: f64) -> ChangePoints {
    let settings = &Settings {
        min_magnitude: min_effect,
        ..Settings::default()
    };
    let mut shifts = Vec::new();
    for s in series(runs) {
        let values: Vec<f64> = s.points.iter().map(|p| p.1).collect();
        for cp in change_point::change_points(&values, settings) {
            let (before, after) = (runs[s.points[cp.index - 1].0], runs[s.points[cp.index].0]);
            let change = cp.change();
            shifts.push(Shift {
                metric: s.metric.clone(),
                run_id: after.run_id.clone(),
                started_at_ms: after.started_at_ms,
                previous_run_id: before.run_id.clone(),
                mean_before: cp.mean_before,
                mean_after: cp.mean_after,
                change,
                p_value: cp.p_value,
                worse: (change < 0.0) == s.higher_is_better,
                differs: differences(before, after),
            });
        }
    }
    shifts.sort_by(|a, b| (a.started_at_ms, &a.metric).cmp(&(b.started_at_ms, &b.metric)));
    ChangePoints {
        runs: runs.iter().map(|r| r.run_id.clone()).collect(),
        min_effect,
        shifts,
    }
}

/// What differs between two runs of one fingerprint, in words: the servers' versions and the
/// launcher (the fingerprint holds the rest of the system under test and its load).
pub fn differences(before: &RunSummary, after: &RunSummary) -> Vec<String> {
    let mut out = Vec::new();
    if before.versions != after.versions {
        out.push(format!(
            "servers: {} → {}",
            listed(&before.versions),
            listed(&after.versions)
        ));
    }
    if before.launcher != after.launcher {
        out.push(format!(
            "launcher: {} → {}",
            before.launcher, after.launcher
        ));
    }
    out
}

fn listed(versions: &[String]) -> String {
    if versions.is_empty() {
        "unknown".into()
    } else {
        versions.join(", ")
    }
}

/// `driver history`'s text: a line per run (oldest first: id, start, verdict, servers), then the
/// change points.
pub fn text(name: &str, runs: &[&RunSummary], found: &ChangePoints) -> String {
    let mut out = format!(
        "History of {name}: {} run(s) that measured their load in full, oldest first\n",
        runs.len()
    );
    for r in runs {
        let start = jiff::Timestamp::from_millisecond(r.started_at_ms)
            .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_default();
        out.push_str(&format!(
            "  {}  {start}  {}  {}\n",
            r.run_id,
            r.verdict,
            listed(&r.versions)
        ));
    }
    out.push_str(&format!("Change points ({}):\n", found.method()));
    for line in found.lines() {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// The series as CSV for Apache Otava: `time` (RFC 3339), `run`, `versions`, then one column per
/// metric that every run has (Otava reads no empty cells), oldest first.
pub fn otava_csv(runs: &[&RunSummary]) -> String {
    let complete: Vec<Series> = series(runs)
        .into_iter()
        .filter(|s| s.points.len() == runs.len())
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec!["time".to_string(), "run".into(), "versions".into()];
    header.extend(complete.iter().map(|s| s.metric.clone()));
    w.write_record(&header).expect("writes to memory");
    for (i, run) in runs.iter().enumerate() {
        let time = jiff::Timestamp::from_millisecond(run.started_at_ms)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let mut row = vec![time, run.run_id.clone(), run.versions.join("; ")];
        row.extend(complete.iter().map(|s| s.points[i].1.to_string()));
        w.write_record(&row).expect("writes to memory");
    }
    String::from_utf8(w.into_inner().expect("flushes to memory")).expect("CSV of UTF-8 fields")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::change::Estimate;

    fn run(i: i64, p99: f64, qps: f64, version: &str) -> RunSummary {
        let estimate = Estimate::bare;
        RunSummary {
            run_id: format!("nightly-{i:02}"),
            name: "nightly".into(),
            fingerprint: Some("mfp1-x".into()),
            launcher: "local".into(),
            verdict: "PASS".into(),
            started_at_ms: 1_780_000_000_000 + i * 86_400_000,
            finished_at_ms: Some(1_780_000_000_000 + i * 86_400_000 + 60_000),
            estimates: vec![
                estimate("p99_ms Load", p99, false),
                estimate("qps Load", qps, true),
            ],
            versions: vec![format!("triton-0: triton {version}")],
            ..RunSummary::default()
        }
    }

    /// 20 nights: the p99 a tenth higher from night 11 on, when the server was upgraded; the
    /// QPS alike throughout.
    fn nights() -> Vec<RunSummary> {
        (0..20)
            .map(|i| {
                let wobble = [1.0, 1.01, 0.99, 1.005, 0.995][i as usize % 5];
                let (p99, version) = if i < 10 {
                    (10.0, "2.44.0")
                } else {
                    (11.0, "2.51.0")
                };
                run(i, p99 * wobble, 500.0 * wobble, version)
            })
            .collect()
    }

    #[test]
    fn a_slower_upgrade_is_named_at_its_first_run_with_its_size_and_the_versions() {
        let runs = nights();
        let history = history(&runs, "mfp1-x", 30);
        let found = change_points(&history, 0.05);
        assert_eq!(found.runs.len(), 20);
        assert_eq!(found.shifts.len(), 1, "{:?}", found.shifts);
        let shift = &found.shifts[0];
        assert_eq!(shift.metric, "p99_ms Load");
        assert_eq!(
            (shift.run_id.as_str(), shift.previous_run_id.as_str()),
            ("nightly-10", "nightly-09")
        );
        assert!((shift.change - 0.10).abs() < 0.01, "{shift:?}");
        assert!(shift.worse);
        assert_eq!(
            shift.differs,
            ["servers: triton-0: triton 2.44.0 → triton-0: triton 2.51.0"]
        );
        assert!(
            shift
                .describe()
                .starts_with("p99_ms Load: +10.0% (10.000 → 11.000")
        );
    }

    /// One night's p99 of too few requests (a single slow one made it 30 times higher) is no
    /// point of the series: without it the step at night 10 is all there is; with it, read as a
    /// value, the series would hold a spike that is noise.
    #[test]
    fn a_percentile_of_too_few_requests_is_no_point_of_a_series() {
        let mut runs = nights();
        runs[15].estimates[0].value = 330.0;
        runs[15].estimates[0].too_few_requests = true;
        let history = history(&runs, "mfp1-x", 30);
        let p99 = series(&history)
            .into_iter()
            .find(|s| s.metric == "p99_ms Load")
            .unwrap();
        assert_eq!(p99.points.len(), 19);
        assert!(p99.points.iter().all(|p| p.0 != 15 && p.1 < 12.0));
        let found = change_points(&history, 0.05);
        assert_eq!(found.shifts.len(), 1, "{:?}", found.shifts);
        assert_eq!(found.shifts[0].run_id, "nightly-10");
        assert!((found.shifts[0].mean_after - 11.0).abs() < 0.1);
    }

    /// A sleep-bound model's p50 falls in one histogram bucket run after run: no spread, so
    /// the t-test calls a 0.1% step "significant" (p = 0). Smaller than `min_effect`, it is
    /// no change point; a step of 15% still is.
    #[test]
    fn a_step_smaller_than_min_effect_is_no_change_point_even_without_spread() {
        let flat = |step: f64| -> Vec<RunSummary> {
            (0..6)
                .map(|i| run(i, if i < 4 { 164.0 } else { 164.0 * step }, 500.0, "2.51.0"))
                .collect()
        };
        let runs = flat(1.001);
        let read = history(&runs, "mfp1-x", 30);
        assert_eq!(change_points(&read, 0.0).shifts.len(), 1);
        let found = change_points(&read, 0.1);
        assert!(found.shifts.is_empty(), "{:?}", found.shifts);
        assert_eq!(
            found.method(),
            "E-Divisive means, t-test p < 0.001, changes of 10% or more"
        );
        let runs = flat(1.15);
        let found = change_points(&history(&runs, "mfp1-x", 30), 0.1);
        assert_eq!(found.shifts.len(), 1, "{:?}", found.shifts);
        assert_eq!(found.shifts[0].run_id, "nightly-04");
    }

    #[test]
    fn the_history_is_the_fingerprints_runs_measured_in_full_the_last_window_of_them() {
        let mut runs = nights();
        runs[3].verdict = "FAIL".into();
        runs[3].root_cause = Some("triton-0: exited".into());
        runs[4].verdict = "FAIL".into();
        runs[4].root_cause = Some("regression: 2 regression(s)".into());
        runs[5].fingerprint = Some("mfp2-faults".into());
        runs[6].finished_at_ms = None;
        runs.reverse();
        // 17 runs count (night 3 failed, 5 had faults, 6 never finished); the last 14 of them
        // start with night 4, failed by a regression alone.
        let ids: Vec<&str> = history(&runs, "mfp1-x", 14)
            .iter()
            .map(|r| r.run_id.as_str())
            .collect();
        assert_eq!(ids.len(), 14);
        assert_eq!(ids[0], "nightly-04");
        assert!(!ids.contains(&"nightly-05") && !ids.contains(&"nightly-06"));
        assert_eq!(ids[13], "nightly-19");
    }

    #[test]
    fn the_otava_csv_has_a_column_per_metric_every_run_has() {
        let mut runs = nights();
        runs.truncate(3);
        runs[1]
            .estimates
            .push(Estimate::bare("qps Crashing, \"odd\"", 1.0, true));
        let refs: Vec<&RunSummary> = runs.iter().collect();
        let csv = otava_csv(&refs);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "time,run,versions,p99_ms Load,qps Load");
        assert_eq!(lines.len(), 4);
        assert!(
            lines[1].starts_with("2026-05-28T20:26:40Z,nightly-00,triton-0: triton 2.44.0,10,500"),
            "{}",
            lines[1]
        );
    }
}
