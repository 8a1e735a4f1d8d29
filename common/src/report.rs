//! The L0 table: one row per scenario, summed over however many workers reported it, plus TOTAL.
//! The worker prints it for itself; the driver prints it for a whole run and per client group.

use crate::histogram::{HistogramError, LatencyHistogram};
use crate::scenario::Scenario;
use crate::status::ScenarioCounts;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, Default)]
pub struct ScenarioRow {
    pub scenario: String,
    pub failures: u64,
    pub tests: u64,
    pub requests: u64,
    pub skipped: u64,
    pub latency: LatencyHistogram,
}

/// A row as it appears in report.json.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RowJson {
    pub scenario: String,
    pub failures: u64,
    pub tests: u64,
    pub requests: u64,
    pub skipped: u64,
    pub qps: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub description: String,
}

#[derive(Debug, Clone, Default)]
pub struct L0Table {
    rows: BTreeMap<String, ScenarioRow>,
}

fn description(scenario: &str) -> &'static str {
    Scenario::parse(scenario).map_or("", Scenario::description)
}

impl L0Table {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one worker's cumulative counts (histograms merge; percentiles are never averaged).
    pub fn add(&mut self, counts: &ScenarioCounts) -> Result<(), HistogramError> {
        let latency = LatencyHistogram::decode(&counts.latency_histogram)?;
        let row = self
            .rows
            .entry(counts.scenario.clone())
            .or_insert_with(|| ScenarioRow {
                scenario: counts.scenario.clone(),
                ..Default::default()
            });
        row.failures += counts.failures;
        row.tests += counts.tests;
        row.requests += counts.requests;
        row.skipped += counts.skipped;
        row.latency.merge(&latency);
        Ok(())
    }

    /// Makes sure every listed scenario has a row, so a scenario that never ran shows up as 0 tests.
    pub fn ensure_rows<'a>(&mut self, scenarios: impl IntoIterator<Item = &'a str>) {
        for s in scenarios {
            self.rows
                .entry(s.to_string())
                .or_insert_with(|| ScenarioRow {
                    scenario: s.to_string(),
                    ..Default::default()
                });
        }
    }

    pub fn rows(&self) -> impl Iterator<Item = &ScenarioRow> {
        self.rows.values()
    }

    pub fn total(&self) -> ScenarioRow {
        let mut total = ScenarioRow {
            scenario: "TOTAL".into(),
            ..Default::default()
        };
        for row in self.rows.values() {
            total.failures += row.failures;
            total.tests += row.tests;
            total.requests += row.requests;
            total.skipped += row.skipped;
            total.latency.merge(&row.latency);
        }
        total
    }

    /// Failures of scenarios that are not allowed to fail (upstream: everything but PerfAnalyzer).
    pub fn blocking_failures(&self) -> u64 {
        self.rows
            .values()
            .filter(|r| !Scenario::parse(&r.scenario).is_some_and(Scenario::allowed_to_fail))
            .map(|r| r.failures)
            .sum()
    }

    pub fn to_json(&self, elapsed_s: f64) -> Vec<RowJson> {
        let total = self.total();
        self.rows
            .values()
            .chain(std::iter::once(&total))
            .map(|r| RowJson {
                scenario: r.scenario.clone(),
                failures: r.failures,
                tests: r.tests,
                requests: r.requests,
                skipped: r.skipped,
                qps: if elapsed_s > 0.0 {
                    r.requests as f64 / elapsed_s
                } else {
                    0.0
                },
                p50_us: r.latency.percentile_us(50.0),
                p90_us: r.latency.percentile_us(90.0),
                p99_us: r.latency.percentile_us(99.0),
                max_us: r.latency.max_us(),
                description: if r.scenario == "TOTAL" {
                    String::new()
                } else {
                    description(&r.scenario).to_string()
                },
            })
            .collect()
    }

    /// The L0 table as text, with QPS over `elapsed_s` and latency percentiles in milliseconds.
    pub fn render(&self, elapsed_s: f64) -> String {
        let rows = self.to_json(elapsed_s);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<20} | {:>8} | {:>7} | {:>9} | {:>9} | {:>8} | {:>8} | {:>8} | Test Case Description",
            "Test Case", "Failures", "Tests", "Requests", "QPS", "p50 ms", "p90 ms", "p99 ms"
        );
        let _ = writeln!(out, "{}", "-".repeat(120));
        for r in &rows {
            if r.scenario == "TOTAL" {
                let _ = writeln!(out, "{}", "-".repeat(120));
            }
            let _ = writeln!(
                out,
                "{:<20} | {:>8} | {:>7} | {:>9} | {:>9.1} | {:>8.2} | {:>8.2} | {:>8.2} | {}",
                r.scenario,
                r.failures,
                r.tests,
                r.requests,
                r.qps,
                r.p50_us as f64 / 1000.0,
                r.p90_us as f64 / 1000.0,
                r.p99_us as f64 / 1000.0,
                r.description
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(s: &str, failures: u64, tests: u64, requests: u64) -> ScenarioCounts {
        let mut h = LatencyHistogram::new();
        h.record(std::time::Duration::from_millis(2));
        ScenarioCounts {
            scenario: s.into(),
            tests,
            failures,
            requests,
            skipped: 0,
            latency_histogram: h.encode(),
        }
    }

    #[test]
    fn rows_sum_across_workers_and_total_adds_up() {
        let mut t = L0Table::new();
        t.add(&counts("SequenceValid", 0, 10, 160)).unwrap();
        t.add(&counts("SequenceValid", 1, 5, 80)).unwrap();
        t.add(&counts("PerfAnalyzer", 2, 3, 300)).unwrap();
        let total = t.total();
        assert_eq!((total.failures, total.tests, total.requests), (3, 18, 540));
        assert_eq!(total.latency.count(), 3);
        assert_eq!(
            t.blocking_failures(),
            1,
            "PerfAnalyzer failures are allowed"
        );
        let text = t.render(10.0);
        assert!(text.contains("SequenceValid"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("TOTAL") && l.contains("540"))
        );
    }
}
