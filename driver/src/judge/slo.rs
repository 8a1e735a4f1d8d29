//! Service-level objectives: the matrix's `slo:` rules (run level and per client group), read
//! once into [`Rule`]s (`crate::matrix::slo`), judged — live every
//! poll for `abort_on_fail` rules after their `delay`, and for every rule at the end — on the
//! workers' cumulative counts ([`Row`]: per member, scenario and model, with exact latency
//! histograms merged across workers, never averaged percentiles). Pure: the run loop reads the
//! store and acts on the [`Outcome`]s.

use serde::{Deserialize, Serialize};
use stress_common::histogram::LatencyHistogram;

use crate::matrix::SloMetric;
use crate::matrix::slo::Rule;

impl Rule {
    /// The observed value over `rows` (None: nothing this rule measures was counted).
    /// `members` are the group's (None: every row counts); `seconds` is the window's length.
    pub fn observe(&self, rows: &[Row], members: Option<&[String]>, seconds: f64) -> Option<f64> {
        let mut latency = LatencyHistogram::new();
        let (mut tests, mut failures, mut requests) = (0u64, 0u64, 0u64);
        let mut any = false;
        for r in rows {
            if members.is_some_and(|m| !m.contains(&r.member))
                || self.scenario.as_ref().is_some_and(|s| *s != r.scenario)
                || self.model.as_deref() != r.model.as_deref()
            {
                continue;
            }
            any = true;
            latency.merge(&r.latency);
            tests += r.tests;
            failures += r.failures;
            requests += r.requests;
        }
        if !any {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        match self.metric {
            m if m.is_latency() && latency.count() == 0 => None,
            SloMetric::P50 => Some(ms(latency.percentile_us(50.0))),
            SloMetric::P90 => Some(ms(latency.percentile_us(90.0))),
            SloMetric::P99 => Some(ms(latency.percentile_us(99.0))),
            SloMetric::Max => Some(ms(latency.max_us())),
            SloMetric::ErrorRate => (tests > 0).then(|| failures as f64 / tests as f64),
            SloMetric::Qps => (seconds > 0.0).then(|| requests as f64 / seconds),
        }
    }

    /// Whether an observed value keeps the rule.
    pub fn holds(&self, observed: f64) -> bool {
        self.max.is_none_or(|hi| observed <= hi) && self.min.is_none_or(|lo| observed >= lo)
    }

    /// The rule judged over a window; `members` as in [`Self::observe`]. A rule with nothing
    /// to measure is not kept: it names a scenario or model the run never exercised.
    pub fn judge(&self, rows: &[Row], members: Option<&[String]>, window: (i64, i64)) -> Outcome {
        let seconds = (window.1 - window.0) as f64 / 1000.0;
        let observed = self.observe(rows, members, seconds);
        Outcome {
            rule: self.text.clone(),
            group: self.group.clone(),
            metric: self.metric.as_str().into(),
            observed,
            unit: self.unit().into(),
            ok: observed.is_some_and(|v| self.holds(v)),
            window_start_ms: window.0,
            window_end_ms: window.1,
        }
    }
}

/// One worker's cumulative counts of one scenario (and model, for the per-model rows).
#[derive(Debug, Clone)]
pub struct Row {
    pub member: String,
    pub scenario: String,
    /// None: the scenario's row (every model); Some: one model's share of it.
    pub model: Option<String>,
    pub tests: u64,
    pub failures: u64,
    pub requests: u64,
    pub latency: LatencyHistogram,
}

/// The run's SLO verdicts in the store, keyed by the rule's position (`000000`, ...).
impl stress_common::store::Document for Outcome {
    const KIND: &'static str = "slo_result";
}

/// A rule's verdict (report.json `slo[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub rule: String,
    pub group: Option<String>,
    pub metric: String,
    /// None: nothing the rule measures was counted.
    pub observed: Option<f64>,
    pub unit: String,
    pub ok: bool,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
}

impl Outcome {
    /// One line: `FAIL p99 of Load <= 50ms: observed 61.20 ms over 60.0 s`.
    pub fn line(&self) -> String {
        let observed = match self.observed {
            Some(v) => format!("observed {v:.4} {}", self.unit)
                .trim_end()
                .to_string(),
            None => "nothing measured".into(),
        };
        format!(
            "{} {}: {observed} over {:.1} s",
            if self.ok { "ok  " } else { "FAIL" },
            self.rule,
            (self.window_end_ms - self.window_start_ms) as f64 / 1000.0
        )
    }
}

/// The first breached rule among `outcomes`, as the run's failure reason.
pub fn first_breach(outcomes: &[Outcome]) -> Option<String> {
    outcomes
        .iter()
        .find(|o| !o.ok)
        .map(|o| format!("SLO breached: {}", o.line().trim_start_matches("FAIL ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::SloRule;
    use crate::matrix::slo::BadRule;
    use std::time::Duration;

    fn rule(yaml: &str) -> Result<Rule, BadRule> {
        let r: SloRule = serde_saphyr::from_str(yaml).unwrap();
        Rule::parse(&r, None)
    }

    fn row(member: &str, scenario: &str, model: Option<&str>, latencies_ms: &[u64]) -> Row {
        let mut latency = LatencyHistogram::new();
        for l in latencies_ms {
            latency.record(Duration::from_millis(*l));
        }
        Row {
            member: member.into(),
            scenario: scenario.into(),
            model: model.map(String::from),
            tests: 10,
            failures: 1,
            requests: latencies_ms.len() as u64,
            latency,
        }
    }

    #[test]
    fn bounds_are_read_for_their_metric() {
        let r = rule("{metric: p99, scenario: Load, max: 50ms}").unwrap();
        assert_eq!((r.max, r.min), (Some(50.0), None));
        assert_eq!(r.text, "p99 of Load <= 50ms");
        let r = rule("{metric: error_rate, max: 0.001}").unwrap();
        assert_eq!(r.max, Some(0.001));
        let r = rule("{metric: qps, min: 100, max: '200'}").unwrap();
        assert_eq!((r.min, r.max), (Some(100.0), Some(200.0)));
        assert_eq!(r.text, "qps in [100, 200]");
        let bad = |yaml: &str| rule(yaml).unwrap_err();
        assert_eq!(
            bad("{metric: p99, max: 50}").field,
            "max",
            "a latency needs a unit"
        );
        assert_eq!(bad("{metric: qps, min: -1}").field, "min");
        assert_eq!(bad("{metric: qps, min: fast}").field, "min");
        assert_eq!(bad("{metric: error_rate, max: 2}").field, "max");
        assert_eq!(bad("{metric: p50}").field, "metric");
        assert_eq!(bad("{metric: qps, min: 5, max: 1}").field, "min");
    }

    #[test]
    fn percentiles_merge_across_workers_and_respect_the_selection() {
        // Worker 0 is fast, worker 1 slow: the merged p99 is worker 1's, the average of their
        // p99s would be half of it.
        let rows = [
            row("g-0", "Load", None, &[1; 99]),
            row("g-1", "Load", None, &[100; 10]),
            row("g-1", "Load", Some("m"), &[100; 10]),
            row("g-1", "Infer", None, &[500; 10]),
        ];
        let r = rule("{metric: p99, scenario: Load, max: 50ms}").unwrap();
        let p99 = r.observe(&rows, None, 10.0).unwrap();
        assert!((p99 - 100.0).abs() < 0.2, "{p99}");
        let o = r.judge(&rows, None, (0, 10_000));
        assert!(!o.ok);
        let line = o.line();
        assert!(
            line.starts_with("FAIL p99 of Load <= 50ms: observed 100.0"),
            "{line}"
        );
        assert!(line.ends_with(" ms over 10.0 s"), "{line}");
        let only_fast = ["g-0".to_string()];
        assert!(
            r.judge(&rows, Some(&only_fast), (0, 10_000)).ok,
            "a group's own members"
        );
        let all = rule("{metric: max, max: 1s}").unwrap();
        assert!((all.observe(&rows, None, 1.0).unwrap() - 500.0).abs() < 0.5);
        let model = rule("{metric: qps, model: m, min: 1}").unwrap();
        assert_eq!(
            model.observe(&rows, None, 5.0),
            Some(2.0),
            "10 requests in 5 s"
        );
        let errors = rule("{metric: error_rate, scenario: Infer, max: 0.05}").unwrap();
        assert_eq!(errors.observe(&rows, None, 1.0), Some(0.1));
        let none = rule("{metric: p99, scenario: Timeout, max: 1s}").unwrap();
        let o = none.judge(&rows, None, (0, 1000));
        assert_eq!(
            (o.observed, o.ok),
            (None, false),
            "nothing measured is not kept"
        );
        assert_eq!(
            first_breach(&[o]).unwrap(),
            "SLO breached: p99 of Timeout <= 1s: nothing measured over 1.0 s"
        );
    }

    #[test]
    fn a_value_inside_the_bounds_holds() {
        let r = rule("{metric: qps, min: 100, max: 200}").unwrap();
        assert!(r.holds(100.0) && r.holds(200.0) && !r.holds(99.9) && !r.holds(200.1));
    }
}
