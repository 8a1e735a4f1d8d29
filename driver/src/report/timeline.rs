//! The run over time, for plots and trends: latency percentiles per interval (merged from every
//! worker's interval histograms, never averaged) and each server's Triton metrics per interval
//! (requests/s, queue vs compute time per request, batch size, pending, memory).
//!
//! Built by the report from the store's `latency_intervals` and `server_samples`; every point's
//! `t_s` is seconds since the run started, at the end of its interval.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stress_common::histogram::{HistogramError, LatencyHistogram};
use stress_common::status::IntervalCounts;
use stress_common::triton_metrics::ServerSample;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Seconds each point covers (the workers' histogram interval; 0: no interval data).
    pub interval_s: f64,
    /// Per scenario (`model` None: all its models) and per (scenario, model).
    pub latency: Vec<LatencySeries>,
    /// Per server, in member order.
    pub servers: Vec<ServerSeries>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    pub scenario: String,
    /// None: every model of the scenario together.
    pub model: Option<String>,
    pub points: Vec<LatencyPoint>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    pub t_s: f64,
    /// Requests answered in the interval (the histogram's count).
    pub requests: u64,
    pub failures: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSeries {
    pub member_id: String,
    pub group: String,
    /// Server-wide gauges per scrape.
    pub points: Vec<ServerPoint>,
    /// Last minus first memory reading (bytes; None: fewer than two readings).
    pub memory_growth_bytes: Option<f64>,
    /// Memory still growing through the load's steady state, in words (None: steady, or not
    /// judged); see `crate::judge::memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_finding: Option<String>,
    /// Why the memory was not judged (too few steady-state samples, or none), when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_not_judged: Option<String>,
    /// The memory limit it ran under at its last reading (a pod container's cgroup; None:
    /// none or not known). A memory finding says when its growth would reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<f64>,
    /// The steady-state Theil–Sen slope of the resident memory (bytes/s; None: not judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_slope_bytes_per_s: Option<f64>,
    pub models: Vec<ServerModelSeries>,
}

/// What one scrape of a server says about the whole server. Memory is the server process's
/// resident set where the launcher can read it (`rss_bytes`), and Triton's own host-memory gauge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerPoint {
    pub t_s: f64,
    pub rss_bytes: Option<f64>,
    pub cpu_memory_used_bytes: Option<f64>,
    pub gpu_memory_used_bytes: Option<f64>,
    /// 0..1, Triton's `nv_cpu_utilization`.
    pub cpu_utilization: Option<f64>,
    pub gpu_utilization: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerModelSeries {
    pub model: String,
    pub version: String,
    pub points: Vec<ServerModelPoint>,
}

/// One model on one server over one interval (deltas of Triton's counters).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerModelPoint {
    pub t_s: f64,
    pub success_per_s: f64,
    pub failure_per_s: f64,
    /// Per request in the interval (µs): queue, and the three compute stages.
    pub queue_us: f64,
    pub compute_input_us: f64,
    pub compute_infer_us: f64,
    pub compute_output_us: f64,
    /// Inferences per execution: the dynamic batcher's effect (None: no execution).
    pub avg_batch: Option<f64>,
    /// Requests pending at the scrape (a gauge).
    pub pending: f64,
    /// Failures per second by Triton's reason (BACKEND, REJECTED, CANCELED, OTHER), those
    /// with any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_per_s_by_reason: BTreeMap<String, f64>,
}

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

type SeriesKey = (String, Option<String>);

/// The latency series of a run from its workers' interval counts, fed one at a time in end-time
/// order (the store's): intervals go in buckets of the run's interval length by their end time,
/// and each bucket's histograms are merged, per scenario (`model` None) and per (scenario,
/// model). A bucket's histograms are merged while it is open and become points when a later
/// bucket starts, so memory holds one bucket per series, not a long or wide run's intervals.
pub struct LatencySeriesBuilder {
    started_ms: i64,
    width_ms: i64,
    open_bucket: i64,
    open: BTreeMap<SeriesKey, (u64, LatencyHistogram)>,
    done: BTreeMap<SeriesKey, Vec<LatencyPoint>>,
    /// Also a series of every scenario together, named `total` (the L0 table's TOTAL row).
    total: Option<String>,
}

impl LatencySeriesBuilder {
    /// `width_ms`: the buckets' width, the intervals' typical length (positive).
    pub fn new(started_ms: i64, width_ms: i64) -> Self {
        Self {
            started_ms,
            width_ms: width_ms.max(1),
            open_bucket: 0,
            open: BTreeMap::new(),
            done: BTreeMap::new(),
            total: None,
        }
    }

    /// Also builds a series of every scenario's intervals together, as scenario `name`.
    pub fn with_total(mut self, name: &str) -> Self {
        self.total = Some(name.into());
        self
    }

    /// Adds an interval ending no earlier than the previous one's bucket (one that does is
    /// merged into the open bucket rather than reopening a finished one).
    pub fn add(&mut self, i: &IntervalCounts) -> Result<(), HistogramError> {
        let latency = LatencyHistogram::decode(&i.latency_histogram)?;
        let bucket = bucket_of(i.end_ms - self.started_ms, self.width_ms);
        if bucket > self.open_bucket {
            self.close_bucket();
            self.open_bucket = bucket;
        }
        let total = self.total.clone().map(|name| (name, None));
        for key in [
            (i.scenario.clone(), None),
            (i.scenario.clone(), Some(i.model.clone())),
        ]
        .into_iter()
        .chain(total)
        {
            let (failures, h) = self.open.entry(key).or_default();
            *failures += i.failures;
            h.merge(&latency);
        }
        Ok(())
    }

    fn close_bucket(&mut self) {
        let ms = |us: u64| us as f64 / 1000.0;
        let t_s = (self.open_bucket * self.width_ms) as f64 / 1000.0;
        for (key, (failures, h)) in std::mem::take(&mut self.open) {
            // A bucket without an answered request (perf_analyzer's traffic, only counted;
            // every request failed) has no latency to plot.
            if h.count() == 0 {
                continue;
            }
            self.done.entry(key).or_default().push(LatencyPoint {
                t_s,
                requests: h.count(),
                failures,
                p50_ms: ms(h.percentile_us(50.0)),
                p90_ms: ms(h.percentile_us(90.0)),
                p99_ms: ms(h.percentile_us(99.0)),
                max_ms: ms(h.max_us()),
            });
        }
    }

    /// The interval in seconds and the series, per scenario then per (scenario, model).
    pub fn finish(mut self) -> (f64, Vec<LatencySeries>) {
        self.close_bucket();
        let series = self
            .done
            .into_iter()
            .map(|((scenario, model), points)| LatencySeries {
                scenario,
                model,
                points,
            })
            .collect();
        (self.width_ms as f64 / 1000.0, series)
    }
}

/// The bucket of an interval ending `since_start_ms` after the run's start: the nearest
/// multiple of the width (workers start at different times, so their intervals end a little
/// apart), at least 1.
fn bucket_of(since_start_ms: i64, width_ms: i64) -> i64 {
    ((since_start_ms + width_ms / 2) / width_ms).max(1)
}

/// Each server's series from its samples (`members`: every server's id and group, in member
/// order; a server without samples has an empty series). A model's point is left out for an
/// interval in which it had no request. Data only: the memory is judged with the run
/// (`report::judgement`), which fills in `memory_finding`, `memory_not_judged` and
/// `memory_slope_bytes_per_s`.
pub fn server_series(
    started_ms: i64,
    members: &[(String, String)],
    samples: &[(String, ServerSample)],
) -> Vec<ServerSeries> {
    members
        .iter()
        .map(|(member_id, group)| {
            let own: Vec<&ServerSample> = samples
                .iter()
                .filter(|(m, _)| m == member_id)
                .map(|(_, s)| s)
                .collect();
            let points = server_points(started_ms, &own);
            let rss: Vec<f64> = points.iter().filter_map(|p| p.rss_bytes).collect();
            ServerSeries {
                member_id: member_id.clone(),
                group: group.clone(),
                memory_growth_bytes: (rss.len() >= 2).then(|| rss[rss.len() - 1] - rss[0]),
                memory_limit_bytes: own.iter().rev().find_map(|s| s.memory_limit_bytes),
                points,
                models: model_series(started_ms, &own),
                ..Default::default()
            }
        })
        .collect()
}

/// Seconds since the run started of a sample.
pub(crate) fn t_s(started_ms: i64, s: &ServerSample) -> f64 {
    (s.at_ms - started_ms) as f64 / 1000.0
}

/// A server's gauges per scrape.
fn server_points(started_ms: i64, own: &[&ServerSample]) -> Vec<ServerPoint> {
    own.iter()
        .map(|s| ServerPoint {
            t_s: t_s(started_ms, s),
            rss_bytes: s.rss_bytes,
            cpu_memory_used_bytes: s.gauges.cpu_memory_used_bytes,
            gpu_memory_used_bytes: s.gauges.gpu_memory_used_bytes,
            cpu_utilization: s.gauges.cpu_utilization,
            gpu_utilization: s.gauges.gpu_utilization,
        })
        .collect()
}

/// A server's models per interval, by (model, version); an interval without a request of a
/// model has no point of it.
fn model_series(started_ms: i64, own: &[&ServerSample]) -> Vec<ServerModelSeries> {
    let mut models: BTreeMap<(String, String), Vec<ServerModelPoint>> = BTreeMap::new();
    for s in own {
        let seconds = s.interval_ms as f64 / 1000.0;
        for m in &s.models {
            let n = m.success + m.failure;
            if n <= 0.0 || seconds <= 0.0 {
                continue;
            }
            models
                .entry((m.model.clone(), m.version.clone()))
                .or_default()
                .push(ServerModelPoint {
                    t_s: t_s(started_ms, s),
                    success_per_s: m.success / seconds,
                    failure_per_s: m.failure / seconds,
                    queue_us: m.queue_duration_us / n,
                    compute_input_us: m.compute_input_duration_us / n,
                    compute_infer_us: m.compute_infer_duration_us / n,
                    compute_output_us: m.compute_output_duration_us / n,
                    avg_batch: (m.executions > 0.0).then(|| m.inferences / m.executions),
                    pending: m.pending,
                    failure_per_s_by_reason: m
                        .failure_by_reason
                        .iter()
                        .filter(|(_, n)| **n > 0.0)
                        .map(|(reason, n)| (reason.clone(), n / seconds))
                        .collect(),
                });
        }
    }
    models
        .into_iter()
        .map(|((model, version), points)| ServerModelSeries {
            model,
            version,
            points,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use stress_common::triton_metrics::{ModelMetrics, ServerGauges};

    /// The series of intervals in any order, as the report builds it from the store (which gives
    /// the median width and the end-time order). Returns the interval in seconds too.
    fn latency_series(
        started_ms: i64,
        intervals: &[(String, IntervalCounts)],
    ) -> Result<(f64, Vec<LatencySeries>), HistogramError> {
        let Some(width_ms) =
            typical_length_ms(intervals.iter().map(|(_, i)| i.end_ms - i.start_ms))
        else {
            return Ok((0.0, Vec::new()));
        };
        let mut by_end: Vec<&IntervalCounts> = intervals.iter().map(|(_, i)| i).collect();
        by_end.sort_by_key(|i| i.end_ms);
        let mut builder = LatencySeriesBuilder::new(started_ms, width_ms);
        for i in by_end {
            builder.add(i)?;
        }
        Ok(builder.finish())
    }

    /// The median of the interval lengths (workers' intervals are all about one length; the last
    /// one of each is shorter).
    fn typical_length_ms(lengths: impl Iterator<Item = i64>) -> Option<i64> {
        let mut v: Vec<i64> = lengths.filter(|l| *l > 0).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    }

    fn interval(
        member: &str,
        model: &str,
        end_ms: i64,
        latencies_ms: &[u64],
    ) -> (String, IntervalCounts) {
        let mut h = LatencyHistogram::new();
        for ms in latencies_ms {
            h.record(Duration::from_millis(*ms));
        }
        (
            member.into(),
            IntervalCounts {
                scenario: "Infer".into(),
                model: model.into(),
                start_ms: end_ms - 1000,
                end_ms,
                requests: latencies_ms.len() as u64,
                failures: 0,
                latency_histogram: h.encode(),
            },
        )
    }

    #[test]
    fn workers_intervals_merge_per_bucket_into_exact_percentiles() {
        let start = 10_000;
        let rows = [
            interval("w0", "a", start + 1000, &[1; 99]),
            // Another worker's interval ends a little later: the same bucket.
            interval("w1", "a", start + 1040, &[200]),
            interval("w0", "b", start + 2000, &[5, 5]),
            // Counted but never answered: no latency point.
            interval("w0", "c", start + 3000, &[]),
        ];
        let (width, series) = latency_series(start, &rows).unwrap();
        assert_eq!(width, 1.0);
        let all = series.iter().find(|s| s.model.is_none()).unwrap();
        assert_eq!(all.points.len(), 2);
        let first = &all.points[0];
        assert_eq!((first.t_s, first.requests), (1.0, 100));
        assert!(first.p50_ms < 1.1, "{first:?}");
        assert!(
            first.max_ms >= 199.0,
            "the slow worker's request is in the merge: {first:?}"
        );
        let a = series
            .iter()
            .find(|s| s.model.as_deref() == Some("a"))
            .unwrap();
        assert_eq!(a.points.len(), 1);
        let b = series
            .iter()
            .find(|s| s.model.as_deref() == Some("b"))
            .unwrap();
        assert_eq!((b.points[0].t_s, b.points[0].requests), (2.0, 2));
        assert!(series.iter().all(|s| s.model.as_deref() != Some("c")));
        assert_eq!(all.points.len(), 2, "{all:?}");
        assert_eq!(latency_series(start, &[]).unwrap(), (0.0, Vec::new()));
    }

    #[test]
    fn streamed_intervals_hold_one_bucket_and_a_late_one_joins_the_open_bucket() {
        let start = 10_000;
        let mut builder = LatencySeriesBuilder::new(start, 1000);
        for k in 1..=500_i64 {
            builder
                .add(&interval("w0", "a", start + k * 1000, &[k as u64]).1)
                .unwrap();
            // Only the open bucket's histograms are held (scenario, and scenario × model).
            assert_eq!(builder.open.len(), 2);
        }
        // Ends in bucket 499, after bucket 500 opened: merged into 500, no second point at 499.
        builder
            .add(&interval("w1", "a", start + 499_000, &[7]).1)
            .unwrap();
        let (width, series) = builder.finish();
        assert_eq!(width, 1.0);
        let all = series.iter().find(|s| s.model.is_none()).unwrap();
        assert_eq!(all.points.len(), 500);
        assert!(all.points.is_sorted_by(|a, b| a.t_s < b.t_s));
        let last = all.points.last().unwrap();
        assert_eq!((last.t_s, last.requests), (500.0, 2));
        assert!(all.points[..499].iter().all(|p| p.requests == 1));
        // Percentiles of each bucket are its own: bucket k recorded k ms.
        assert!(
            (all.points[99].p50_ms - 100.0).abs() < 0.1,
            "{:?}",
            all.points[99]
        );
    }

    #[test]
    fn server_samples_become_rates_and_times_per_request() {
        let sample = |at_ms: i64, success: f64, rss: f64| ServerSample {
            at_ms,
            interval_ms: 2000,
            rss_bytes: Some(rss),
            memory_limit_bytes: None,
            gauges: ServerGauges::default(),
            unscraped_ms: None,
            models: vec![ModelMetrics {
                model: "m".into(),
                version: "1".into(),
                success,
                inferences: success * 2.0,
                executions: success,
                queue_duration_us: success * 10.0,
                compute_infer_duration_us: success * 100.0,
                failure: 4.0,
                failure_by_reason: [("REJECTED".to_string(), 4.0), ("OTHER".to_string(), 0.0)]
                    .into(),
                ..Default::default()
            }],
        };
        let samples = [
            ("s-0".to_string(), sample(2000, 200.0, 100e6)),
            ("s-0".to_string(), sample(4000, 0.0, 110e6)),
            ("s-0".to_string(), sample(6000, 400.0, 150e6)),
        ];
        let members = [
            ("s-0".to_string(), "s".to_string()),
            ("s-1".to_string(), "s".to_string()),
        ];
        let series = server_series(0, &members, &samples);
        assert_eq!(series.len(), 2);
        let s = &series[0];
        assert_eq!(s.points.len(), 3);
        assert_eq!(s.memory_growth_bytes, Some(50e6));
        let m = &s.models[0].points;
        assert_eq!(m.len(), 3, "an interval with only failures has a point");
        assert_eq!((m[0].t_s, m[0].success_per_s), (2.0, 100.0));
        assert_eq!(m[0].failure_per_s, 2.0);
        assert_eq!(
            m[0].failure_per_s_by_reason,
            [("REJECTED".to_string(), 2.0)].into(),
            "reasons without failures are left out"
        );
        // Per request: over successes and failures (204).
        assert!((m[0].queue_us - 2000.0 / 204.0).abs() < 1e-9, "{:?}", m[0]);
        assert_eq!(m[0].avg_batch, Some(2.0));
        assert!(series[1].points.is_empty() && series[1].memory_growth_bytes.is_none());
        assert!(
            s.memory_finding.is_none() && s.memory_not_judged.is_none(),
            "the series is data; its memory is judged with the run: {s:?}"
        );
    }
}
