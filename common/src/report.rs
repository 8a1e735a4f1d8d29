//! The L0 table: one row per scenario, summed over however many workers reported it, plus TOTAL;
//! and the model table: one row per (model, scenario), with a decoupled model's stream figures.
//! The worker prints them for itself; the driver prints them for a whole run (the L0 table also
//! per client group).

use crate::histogram::{HistogramError, LatencyHistogram};
use crate::scenario::Scenario;
use crate::status::{ModelCounts, ScenarioCounts};
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
    /// Open loop: each send's lateness after its intended time (empty: closed loop).
    pub send_lateness: LatencyHistogram,
}

/// An open loop's send lateness in report.json: how far behind its schedule the client sent.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SendLateness {
    pub sends: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// The p99 is above [`FELL_BEHIND_P99`]: the client could not hold its schedule, and
    /// latencies (counted from the intended times) include its lag.
    pub fell_behind: bool,
}

/// A p99 send lateness above this means the client fell behind its schedule: a millisecond
/// is more than a timer's error (the pacer keeps to tens of microseconds) and comparable
/// with the latencies measured.
pub const FELL_BEHIND_P99: std::time::Duration = std::time::Duration::from_millis(1);

impl SendLateness {
    /// The lateness of `h`'s sends; None when it has none (a closed loop).
    pub fn of(h: &LatencyHistogram) -> Option<Self> {
        (h.count() > 0).then(|| {
            let p99_us = h.percentile_us(99.0);
            SendLateness {
                sends: h.count(),
                p50_us: h.percentile_us(50.0),
                p99_us,
                max_us: h.max_us(),
                fell_behind: u128::from(p99_us) > FELL_BEHIND_P99.as_micros(),
            }
        })
    }

    /// One line for the text reports.
    pub fn line(&self, scenario: &str) -> String {
        let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
        let verdict = if self.fell_behind {
            format!(
                "  FELL BEHIND: p99 lateness above {} ms; the latencies include it",
                FELL_BEHIND_P99.as_millis()
            )
        } else {
            String::new()
        };
        format!(
            "{scenario}: {} sends, lateness p50 {} ms, p99 {} ms, max {} ms{verdict}",
            self.sends,
            ms(self.p50_us),
            ms(self.p99_us),
            ms(self.max_us)
        )
    }
}

/// A row as it appears in report.json.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
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
    /// Open loop only: how late the sends left (latency counts from the intended time).
    pub send_lateness: Option<SendLateness>,
}

/// `n` over `elapsed_s` seconds (0 over no time): the QPS column of both tables.
fn per_second(n: u64, elapsed_s: f64) -> f64 {
    if elapsed_s > 0.0 {
        n as f64 / elapsed_s
    } else {
        0.0
    }
}

/// A percentile in milliseconds for the text tables; "-" when no latency was measured (requests
/// counted without a latency, e.g. perf_analyzer's), never a misleading 0.00. A histogram records
/// at least 1 µs, so 0 means no samples.
fn latency_ms(us: u64) -> String {
    if us == 0 {
        "-".into()
    } else {
        format!("{:.2}", us as f64 / 1000.0)
    }
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
        let lateness = if counts.send_lateness_histogram.is_empty() {
            None
        } else {
            Some(LatencyHistogram::decode(&counts.send_lateness_histogram)?)
        };
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
        if let Some(l) = &lateness {
            row.send_lateness.merge(l);
        }
        Ok(())
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
            total.send_lateness.merge(&row.send_lateness);
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
                qps: per_second(r.requests, elapsed_s),
                p50_us: r.latency.percentile_us(50.0),
                p90_us: r.latency.percentile_us(90.0),
                p99_us: r.latency.percentile_us(99.0),
                max_us: r.latency.max_us(),
                description: if r.scenario == "TOTAL" {
                    String::new()
                } else {
                    description(&r.scenario).to_string()
                },
                send_lateness: SendLateness::of(&r.send_lateness),
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
                "{:<20} | {:>8} | {:>7} | {:>9} | {:>9.1} | {:>8} | {:>8} | {:>8} | {}",
                r.scenario,
                r.failures,
                r.tests,
                r.requests,
                r.qps,
                latency_ms(r.p50_us),
                latency_ms(r.p90_us),
                latency_ms(r.p99_us),
                r.description
            );
        }
        let open_loop: Vec<_> = rows
            .iter()
            .filter(|r| r.scenario != "TOTAL")
            .filter_map(|r| Some(r.send_lateness.as_ref()?.line(&r.scenario)))
            .collect();
        if !open_loop.is_empty() {
            let _ = writeln!(
                out,
                "\nOpen-loop send lateness (actual - intended send time; latencies above count from the intended time):"
            );
            for line in open_loop {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

/// One (model, scenario) row, summed over workers.
#[derive(Debug, Clone, Default)]
struct ModelRow {
    tests: u64,
    failures: u64,
    requests: u64,
    latency: LatencyHistogram,
    stream: Option<StreamRow>,
}

#[derive(Debug, Clone, Default)]
struct StreamRow {
    streams: u64,
    responses: u64,
    first_response: LatencyHistogram,
    inter_response: LatencyHistogram,
}

/// A model row as it appears in report.json (`models[]`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelRowJson {
    pub model: String,
    pub scenario: String,
    pub failures: u64,
    pub tests: u64,
    pub requests: u64,
    pub qps: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Decoupled models only.
    pub stream: Option<StreamRowJson>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamRowJson {
    pub streams: u64,
    pub responses: u64,
    pub responses_per_request: f64,
    pub first_response_p50_us: u64,
    pub first_response_p99_us: u64,
    pub inter_response_p50_us: u64,
    pub inter_response_p99_us: u64,
}

/// The per-model table: one row per (model, scenario) over however many workers reported it.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    rows: BTreeMap<(String, String), ModelRow>,
}

impl ModelTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one worker's cumulative counts of a model (histograms merge, never averaged).
    pub fn add(&mut self, counts: &ModelCounts) -> Result<(), HistogramError> {
        let latency = LatencyHistogram::decode(&counts.latency_histogram)?;
        let row = self
            .rows
            .entry((counts.model.clone(), counts.scenario.clone()))
            .or_default();
        row.tests += counts.tests;
        row.failures += counts.failures;
        row.requests += counts.requests;
        row.latency.merge(&latency);
        if let Some(stream) = &counts.stream {
            let first = LatencyHistogram::decode(&stream.first_response_histogram)?;
            let gaps = LatencyHistogram::decode(&stream.inter_response_histogram)?;
            let into = row.stream.get_or_insert_with(StreamRow::default);
            into.streams += stream.streams;
            into.responses += stream.responses;
            into.first_response.merge(&first);
            into.inter_response.merge(&gaps);
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn to_json(&self, elapsed_s: f64) -> Vec<ModelRowJson> {
        self.rows
            .iter()
            .map(|((model, scenario), r)| ModelRowJson {
                model: model.clone(),
                scenario: scenario.clone(),
                failures: r.failures,
                tests: r.tests,
                requests: r.requests,
                qps: per_second(r.requests, elapsed_s),
                p50_us: r.latency.percentile_us(50.0),
                p90_us: r.latency.percentile_us(90.0),
                p99_us: r.latency.percentile_us(99.0),
                max_us: r.latency.max_us(),
                stream: r.stream.as_ref().map(|s| StreamRowJson {
                    streams: s.streams,
                    responses: s.responses,
                    responses_per_request: if s.streams > 0 {
                        s.responses as f64 / s.streams as f64
                    } else {
                        0.0
                    },
                    first_response_p50_us: s.first_response.percentile_us(50.0),
                    first_response_p99_us: s.first_response.percentile_us(99.0),
                    inter_response_p50_us: s.inter_response.percentile_us(50.0),
                    inter_response_p99_us: s.inter_response.percentile_us(99.0),
                }),
            })
            .collect()
    }

    /// The table as text (latencies in milliseconds), then the decoupled models' stream table
    /// when there are any.
    pub fn render(&self, elapsed_s: f64) -> String {
        let rows = self.to_json(elapsed_s);
        let ms = |us: u64| us as f64 / 1000.0;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<28} | {:<20} | {:>8} | {:>7} | {:>9} | {:>9} | {:>8} | {:>8} | {:>8}",
            "Model",
            "Scenario",
            "Failures",
            "Tests",
            "Requests",
            "QPS",
            "p50 ms",
            "p90 ms",
            "p99 ms"
        );
        let _ = writeln!(out, "{}", "-".repeat(124));
        for r in &rows {
            let _ = writeln!(
                out,
                "{:<28} | {:<20} | {:>8} | {:>7} | {:>9} | {:>9.1} | {:>8} | {:>8} | {:>8}",
                r.model,
                r.scenario,
                r.failures,
                r.tests,
                r.requests,
                r.qps,
                latency_ms(r.p50_us),
                latency_ms(r.p90_us),
                latency_ms(r.p99_us)
            );
        }
        if rows.iter().any(|r| r.stream.is_some()) {
            let _ = writeln!(
                out,
                "\n{:<28} | {:<20} | {:>9} | {:>10} | {:>10} | {:>10} | {:>10} | {:>10}",
                "Decoupled model",
                "Scenario",
                "Streams",
                "Resp/req",
                "first p50",
                "first p99",
                "gap p50",
                "gap p99"
            );
            let _ = writeln!(out, "{}", "-".repeat(124));
            for r in &rows {
                let Some(s) = &r.stream else { continue };
                let _ = writeln!(
                    out,
                    "{:<28} | {:<20} | {:>9} | {:>10.2} | {:>7.2} ms | {:>7.2} ms | {:>7.2} ms | {:>7.2} ms",
                    r.model,
                    r.scenario,
                    s.streams,
                    s.responses_per_request,
                    ms(s.first_response_p50_us),
                    ms(s.first_response_p99_us),
                    ms(s.inter_response_p50_us),
                    ms(s.inter_response_p99_us)
                );
            }
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
            send_lateness_histogram: String::new(),
        }
    }

    #[test]
    fn send_lateness_merges_across_workers_and_says_when_the_client_fell_behind() {
        let lateness = |us: &[u64]| {
            let mut h = LatencyHistogram::new();
            for u in us {
                h.record(std::time::Duration::from_micros(*u));
            }
            h.encode()
        };
        let mut t = L0Table::new();
        let on_time = ScenarioCounts {
            send_lateness_histogram: lateness(&[20; 99]),
            ..counts("Load", 0, 1, 99)
        };
        t.add(&on_time).unwrap();
        t.add(&counts("SequenceValid", 0, 1, 10)).unwrap();
        let rows = t.to_json(1.0);
        let load = rows.iter().find(|r| r.scenario == "Load").unwrap();
        let l = load.send_lateness.as_ref().unwrap();
        assert_eq!((l.sends, l.p99_us, l.fell_behind), (99, 20, false));
        let seq = rows.iter().find(|r| r.scenario == "SequenceValid").unwrap();
        assert!(seq.send_lateness.is_none(), "a closed loop has no lateness");
        let text = t.render(1.0);
        assert!(
            text.contains("Load: 99 sends, lateness p50 0.020 ms"),
            "{text}"
        );
        assert!(!text.contains("FELL BEHIND"), "{text}");
        // A second worker 5 ms late on every send: the merged p99 is its, not an average.
        t.add(&ScenarioCounts {
            send_lateness_histogram: lateness(&[5000; 50]),
            ..counts("Load", 0, 1, 50)
        })
        .unwrap();
        let rows = t.to_json(1.0);
        let l = rows[0].send_lateness.clone().unwrap();
        assert_eq!(l.sends, 149);
        assert!(l.fell_behind && l.p99_us >= 4990, "{l:?}");
        assert!(t.render(1.0).contains("FELL BEHIND"));
        // Exactly at the limit is still on time.
        let edge =
            SendLateness::of(&LatencyHistogram::decode(&lateness(&[1000])).unwrap()).unwrap();
        assert!(!edge.fell_behind, "{edge:?}");
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
        let mut bulk = L0Table::new();
        bulk.add(&ScenarioCounts {
            scenario: "CrashingClient".into(),
            tests: 1,
            requests: 7,
            ..Default::default()
        })
        .unwrap();
        let bulk_text = bulk.render(10.0);
        let unmeasured = bulk_text
            .lines()
            .find(|l| l.starts_with("CrashingClient"))
            .unwrap();
        assert!(
            unmeasured.contains("|        - |        - |        - |"),
            "requests without latencies show no percentiles: {unmeasured}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("TOTAL") && l.contains("540"))
        );
    }

    fn histogram(ms: &[u64]) -> String {
        let mut h = LatencyHistogram::new();
        for m in ms {
            h.record(std::time::Duration::from_millis(*m));
        }
        h.encode()
    }

    #[test]
    fn model_rows_merge_workers_per_model_and_scenario() {
        use crate::status::StreamCounts;
        let mut t = ModelTable::new();
        let a = ModelCounts {
            scenario: "Infer".into(),
            model: "text_vector".into(),
            tests: 2,
            failures: 1,
            requests: 100,
            latency_histogram: histogram(&[1, 1, 1, 1, 50]),
            stream: None,
            uncounted_runs: 0,
        };
        t.add(&a).unwrap();
        t.add(&ModelCounts {
            latency_histogram: histogram(&[1, 1, 1, 1, 1]),
            ..a.clone()
        })
        .unwrap();
        t.add(&ModelCounts {
            scenario: "Load".into(),
            ..a.clone()
        })
        .unwrap();
        t.add(&ModelCounts {
            model: "repeat".into(),
            requests: 4,
            stream: Some(StreamCounts {
                streams: 4,
                responses: 10,
                first_response_histogram: histogram(&[2, 2, 2, 2]),
                inter_response_histogram: histogram(&[3, 3, 3, 3, 3, 3]),
            }),
            ..a.clone()
        })
        .unwrap();
        let rows = t.to_json(10.0);
        let names: Vec<_> = rows
            .iter()
            .map(|r| (r.model.as_str(), r.scenario.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("repeat", "Infer"),
                ("text_vector", "Infer"),
                ("text_vector", "Load")
            ]
        );
        let tv = &rows[1];
        assert_eq!((tv.tests, tv.failures, tv.requests), (4, 2, 200));
        assert_eq!(tv.qps, 20.0);
        // 10 latencies merged (not two p99s averaged): the 50 ms one is the max and past p90.
        assert_eq!(tv.max_us / 1000, 50);
        assert_eq!(tv.p50_us / 1000, 1);
        let stream = rows[0].stream.as_ref().expect("decoupled row");
        assert_eq!((stream.streams, stream.responses), (4, 10));
        assert_eq!(stream.responses_per_request, 2.5);
        assert_eq!(stream.first_response_p99_us / 1000, 2);
        assert_eq!(stream.inter_response_p50_us / 1000, 3);
        let text = t.render(10.0);
        assert!(text.contains("Decoupled model"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("repeat") && l.contains("2.50")),
            "{text}"
        );
        assert!(rows[1].stream.is_none());
    }
}
