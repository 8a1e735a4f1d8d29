//! `run.repeat: N`: every metric across the repeats of one run (each a run of its own with fresh
//! servers, where most of the variance between runs arises): the mean, its 95% interval from
//! Student's t with n − 1 degrees of freedom, and the coefficient of variation, as AIPerf's
//! `--num-profile-runs` reports them. Pure: the repeats' estimates in.

use serde::{Deserialize, Serialize};

use super::change::{Estimate, t_quantile};

/// One repeat: its run id, verdict and estimates.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    pub run_id: String,
    pub verdict: String,
    pub estimates: Vec<Estimate>,
}

/// A metric across the repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcrossRepeats {
    pub metric: String,
    pub n: usize,
    pub mean: f64,
    /// The mean's 95% interval (absolute).
    pub low: f64,
    pub high: f64,
    /// The repeats' standard deviation over their mean.
    pub cv: f64,
}

/// The repeats of a run and their metrics, as repeats.json holds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Repeats {
    /// `RUN-rK: VERDICT`, in order.
    pub runs: Vec<String>,
    pub metrics: Vec<AcrossRepeats>,
    /// Metrics some repeat lacks or measured on too few requests (a failed run): not
    /// summarised.
    pub partial: Vec<String>,
}

/// Each metric of every repeat, across them; a metric needs two repeats or more.
pub fn across(repeats: &[Repeat]) -> Repeats {
    let mut by_metric: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for r in repeats {
        for e in r
            .estimates
            .iter()
            .filter(|e| e.value.is_finite() && !e.too_few_requests)
        {
            by_metric.entry(&e.metric).or_default().push(e.value);
        }
    }
    let (complete, partial): (Vec<_>, Vec<_>) = by_metric
        .into_iter()
        .partition(|(_, values)| values.len() == repeats.len() && values.len() >= 2);
    Repeats {
        runs: repeats
            .iter()
            .map(|r| format!("{}: {}", r.run_id, r.verdict))
            .collect(),
        metrics: complete
            .into_iter()
            .map(|(metric, values)| summarise(metric, &values))
            .collect(),
        partial: partial.into_iter().map(|(m, _)| m.to_string()).collect(),
    }
}

fn summarise(metric: &str, values: &[f64]) -> AcrossRepeats {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let half = t_quantile(n - 1.0) * sd / n.sqrt();
    AcrossRepeats {
        metric: metric.into(),
        n: values.len(),
        mean,
        low: mean - half,
        high: mean + half,
        cv: if mean == 0.0 { 0.0 } else { sd / mean.abs() },
    }
}

impl Repeats {
    /// repeats.txt: the runs, then a row per metric.
    pub fn render(&self, name: &str) -> String {
        let mut out = format!(
            "== {} repeats of {name}, fresh servers each: {} ==\n",
            self.runs.len(),
            self.runs.join(", ")
        );
        out.push_str(&format!(
            "{:<44} {:>12} {:>27} {:>7}\n",
            "metric", "mean", "95% interval (t, n-1 df)", "CV"
        ));
        for m in &self.metrics {
            let half = if m.mean == 0.0 {
                0.0
            } else {
                (m.high - m.mean) / m.mean.abs() * 100.0
            };
            out.push_str(&format!(
                "{:<44} {:>12.3} {:>27} {:>6.1}%\n",
                m.metric,
                m.mean,
                format!("[{:.3}, {:.3}] ±{half:.1}%", m.low, m.high),
                m.cv * 100.0
            ));
        }
        if !self.partial.is_empty() {
            out.push_str(&format!(
                "not in every repeat, not summarised: {}\n",
                self.partial.join(", ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeat(id: &str, qps: f64, p99: Option<f64>) -> Repeat {
        let estimate = |metric: &str, value| Estimate::bare(metric, value, false);
        let mut estimates = vec![estimate("qps TOTAL", qps)];
        estimates.extend(p99.map(|p| estimate("p99_ms Load", p)));
        Repeat {
            run_id: id.into(),
            verdict: "PASS".into(),
            estimates,
        }
    }

    #[test]
    fn a_metric_in_every_repeat_gets_its_mean_and_t_interval() {
        let r = across(&[
            repeat("r1", 100.0, Some(5.0)),
            repeat("r2", 110.0, None),
            repeat("r3", 90.0, Some(5.5)),
        ]);
        assert_eq!(r.metrics.len(), 1);
        let qps = &r.metrics[0];
        assert_eq!((qps.metric.as_str(), qps.n), ("qps TOTAL", 3));
        assert!((qps.mean - 100.0).abs() < 1e-9);
        // sd 10, t(2, 0.975) = 4.303: ±24.84.
        assert!((qps.high - 124.84).abs() < 0.01, "{qps:?}");
        assert!((qps.low - 75.16).abs() < 0.01);
        assert!((qps.cv - 0.1).abs() < 1e-9);
        assert_eq!(r.partial, vec!["p99_ms Load"]);
        assert_eq!(r.runs, vec!["r1: PASS", "r2: PASS", "r3: PASS"]);
        let text = r.render("smoke");
        assert!(text.starts_with("== 3 repeats of smoke, fresh servers each: r1: PASS"));
        assert!(text.contains("qps TOTAL"), "{text}");
        assert!(text.contains("[75.159, 124.841] ±24.8%"), "{text}");
        assert!(text.contains("not in every repeat, not summarised: p99_ms Load"));
    }

    #[test]
    fn a_percentile_of_too_few_requests_in_one_repeat_is_not_summarised() {
        let mut second = repeat("r2", 110.0, Some(90.0));
        second.estimates[1].too_few_requests = true;
        let r = across(&[repeat("r1", 100.0, Some(5.0)), second]);
        assert_eq!(r.metrics.len(), 1);
        assert_eq!(r.metrics[0].metric, "qps TOTAL");
        assert_eq!(r.partial, vec!["p99_ms Load"]);
    }

    #[test]
    fn one_repeat_has_no_interval() {
        let r = across(&[repeat("r1", 100.0, Some(5.0))]);
        assert!(r.metrics.is_empty());
        assert_eq!(r.partial.len(), 2);
    }
}
