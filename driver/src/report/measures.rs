//! What two runs are compared on, read off a report with the run's own spread of each: QPS and
//! p50 / p90 / p99 per scenario and per model, the servers' queue and compute time per request
//! (each with its batch means over the load, see [`crate::judge::change::BatchSpread`]), and
//! capacity results and memory at the end (read once: judged over a history only).
//! `crate::judge::change` compares them.

use std::collections::BTreeMap;

use super::Report;
use crate::judge::change::{BatchSpread, MIN_BATCHES, NoSpread};
use crate::judge::regression::Measure;
use crate::report::timeline::LatencyPoint;

/// Requests a batch needs for its percentile `q` (0.99) to be a number rather than its few
/// slowest requests: five beyond it on average.
fn requests_for(q: f64) -> u64 {
    (5.0 / (1.0 - q)).ceil() as u64
}

/// The full batches of a series: the first (the ramp) and the last (cut short) are left out.
fn full(points: &[LatencyPoint]) -> &[LatencyPoint] {
    match points.len() {
        0..=2 => &[],
        n => &points[1..n - 1],
    }
}

/// The spread of a value whose batches are `batches`, or why there is none.
fn spread_of(batches: &[f64], value: f64) -> Result<BatchSpread, NoSpread> {
    BatchSpread::of_batches(batches, value).ok_or_else(|| {
        NoSpread::Once(format!(
            "not judged: {} full batches of the run (at least {MIN_BATCHES} are needed: a longer \
             run)",
            batches.len()
        ))
    })
}

/// A row's measures (its key, requests and QPS): QPS, p50, p90, p99 with their batch spreads.
fn latency_measures(
    (key, requests, qps): (String, u64, f64),
    percentiles_us: [u64; 3],
    batches: &[LatencyPoint],
    width_s: f64,
    out: &mut Vec<Measure>,
) {
    let batch_qps: Vec<f64> = batches
        .iter()
        .map(|b| b.requests as f64 / width_s)
        .collect();
    let mut push = |metric: String, value: f64, higher_is_better, spread| {
        if value.is_finite() && value > 0.0 {
            out.push(Measure {
                metric,
                value,
                higher_is_better,
                spread,
            });
        }
    };
    push(format!("qps {key}"), qps, true, spread_of(&batch_qps, qps));
    let fewest = batches.iter().map(|b| b.requests).min().unwrap_or(0);
    for ((name, q), us) in [("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99)]
        .into_iter()
        .zip(percentiles_us)
    {
        let value = us as f64 / 1000.0;
        let of = |b: &LatencyPoint| match name {
            "p50_ms" => b.p50_ms,
            "p90_ms" => b.p90_ms,
            _ => b.p99_ms,
        };
        let need = requests_for(q);
        let spread = if !batches.is_empty() && fewest < need {
            Err(NoSpread::TooFewRequests(format!(
                "not judged: {requests} requests, as few as {fewest} in a batch ({need} needed \
                 for its {name})"
            )))
        } else {
            spread_of(&batches.iter().map(of).collect::<Vec<_>>(), value)
        };
        push(format!("{name} {key}"), value, false, spread);
    }
}

impl Report {
    /// What a run is compared on. Rows with fewer than `min_requests` requests are left out: their
    /// numbers are noise.
    pub fn measures(&self, min_requests: u64) -> Vec<Measure> {
        let mut out = Vec::new();
        let batches_of = |scenario: &str, model: Option<&str>| {
            self.batches
                .latency
                .iter()
                .find(|s| s.scenario == scenario && s.model.as_deref() == model)
                .map_or(&[][..], |s| full(&s.points))
        };
        let scenario_rows = self.scenarios.iter().map(|r| {
            let row = (r.scenario.clone(), r.requests, r.qps);
            (
                row,
                [r.p50_us, r.p90_us, r.p99_us],
                batches_of(&r.scenario, None),
            )
        });
        let model_rows = self.models.iter().map(|r| {
            let row = (format!("{}/{}", r.scenario, r.model), r.requests, r.qps);
            let batches = batches_of(&r.scenario, Some(&r.model));
            (row, [r.p50_us, r.p90_us, r.p99_us], batches)
        });
        for (row, percentiles, batches) in scenario_rows.chain(model_rows) {
            if row.1 >= min_requests {
                latency_measures(row, percentiles, batches, self.batches.width_s, &mut out);
            }
        }
        let once = |what: &str| {
            Err(NoSpread::Once(format!(
                "{what}: one number per run, no within-run spread"
            )))
        };
        if let Some(capacity) = &self.capacity {
            for r in capacity.results.iter().filter(|r| r.target_rps.is_none()) {
                out.push(Measure {
                    metric: format!("capacity_qps {}/{}/{}", r.group, r.phase, r.model),
                    value: r.max_qps,
                    higher_is_better: true,
                    spread: once("a capacity answer"),
                });
            }
        }
        // Each server's memory at the end of the run (a leak ends higher than last night).
        for server in &self.timeline.servers {
            if let Some(rss) = server.points.iter().rev().find_map(|p| p.rss_bytes) {
                out.push(Measure {
                    metric: format!("server_rss_mb {}", server.member_id),
                    value: rss / (1024.0 * 1024.0),
                    higher_is_better: false,
                    spread: once("memory at the end"),
                });
            }
        }
        self.server_time_measures(min_requests, &mut out);
        out.retain(|m| m.value.is_finite() && m.value > 0.0);
        out
    }

    /// The servers' time per request, per model over every server: queue and compute, with
    /// their spread over batches of the servers' metric intervals.
    fn server_time_measures(&self, min_requests: u64, out: &mut Vec<Measure>) {
        // Per model: totals, and per batch (success, queue µs, compute µs).
        let mut totals: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
        for metrics in self.server_metrics.values() {
            for m in metrics {
                let e = totals.entry(m.model.as_str()).or_default();
                e.0 += m.success + m.failure;
                e.1 += m.queue_duration_us;
                e.2 += m.compute_input_duration_us
                    + m.compute_infer_duration_us
                    + m.compute_output_duration_us;
            }
        }
        let mut batches: BTreeMap<&str, BTreeMap<i64, (f64, f64, f64)>> = BTreeMap::new();
        let width_s = self.batches.width_s;
        for server in &self.timeline.servers {
            for model in &server.models {
                for p in &model.points {
                    let Some(batch) = (width_s > 0.0).then(|| (p.t_s / width_s).floor() as i64)
                    else {
                        continue;
                    };
                    let b = batches
                        .entry(model.model.as_str())
                        .or_default()
                        .entry(batch)
                        .or_default();
                    let n = p.success_per_s;
                    b.0 += n;
                    b.1 += p.queue_us * n;
                    b.2 += (p.compute_input_us + p.compute_infer_us + p.compute_output_us) * n;
                }
            }
        }
        for (model, (n, queue, compute)) in totals {
            if n < min_requests as f64 {
                continue;
            }
            let per_batch: Vec<(f64, f64, f64)> = batches
                .get(model)
                .map(|b| b.values().copied().collect())
                .unwrap_or_default();
            let full = match per_batch.len() {
                0..=2 => &[][..],
                len => &per_batch[1..len - 1],
            };
            let ratio = |pick: fn(&(f64, f64, f64)) -> f64| -> Vec<f64> {
                full.iter()
                    .filter(|b| b.0 > 0.0)
                    .map(|b| pick(b) / b.0)
                    .collect()
            };
            for (metric, value, batch_values) in [
                ("queue_us_per_request", queue / n, ratio(|b| b.1)),
                ("compute_us_per_request", compute / n, ratio(|b| b.2)),
            ] {
                out.push(Measure {
                    metric: format!("{metric} {model}"),
                    value,
                    higher_is_better: false,
                    spread: spread_of(&batch_values, value),
                });
            }
        }
    }
}
