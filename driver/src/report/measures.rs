//! What two runs are compared on, read off a report: QPS and p50 / p99 per scenario and per
//! model, capacity results, the servers' queue and compute time per request and memory at the
//! end. `crate::judge::regression` compares them.

use std::collections::BTreeMap;

use super::Report;
use crate::judge::regression::Measure;

impl Report {
    /// What a run is compared on. Rows with fewer than `min_requests` requests are left out: their
    /// numbers are noise.
    pub fn measures(&self, min_requests: u64) -> Vec<Measure> {
        let mut out = Vec::new();
        let mut push = |metric: String, value: f64, higher_is_better: bool| {
            if value.is_finite() && value > 0.0 {
                out.push(Measure {
                    metric,
                    value,
                    higher_is_better,
                });
            }
        };
        let ms = |us: u64| us as f64 / 1000.0;
        for r in &self.scenarios {
            if r.requests >= min_requests {
                push(format!("qps {}", r.scenario), r.qps, true);
                push(format!("p50_ms {}", r.scenario), ms(r.p50_us), false);
                push(format!("p99_ms {}", r.scenario), ms(r.p99_us), false);
            }
        }
        for r in &self.models {
            if r.requests >= min_requests {
                let key = format!("{}/{}", r.scenario, r.model);
                push(format!("qps {key}"), r.qps, true);
                push(format!("p50_ms {key}"), ms(r.p50_us), false);
                push(format!("p99_ms {key}"), ms(r.p99_us), false);
            }
        }
        if let Some(capacity) = &self.capacity {
            for r in &capacity.results {
                if r.target_rps.is_none() {
                    let key = format!("{}/{}/{}", r.group, r.phase, r.model);
                    push(format!("capacity_qps {key}"), r.max_qps, true);
                }
            }
        }
        // The servers' time per request, per model over every server: queue and compute.
        let mut per_model: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
        for metrics in self.server_metrics.values() {
            for m in metrics {
                let e = per_model.entry(m.model.as_str()).or_default();
                e.0 += m.success + m.failure;
                e.1 += m.queue_duration_us;
                e.2 += m.compute_input_duration_us
                    + m.compute_infer_duration_us
                    + m.compute_output_duration_us;
            }
        }
        // Each server's memory at the end of the run (a leak ends higher than last night).
        for server in &self.timeline.servers {
            if let Some(rss) = server.points.iter().rev().find_map(|p| p.rss_bytes) {
                push(
                    format!("server_rss_mb {}", server.member_id),
                    rss / (1024.0 * 1024.0),
                    false,
                );
            }
        }
        for (model, (n, queue, compute)) in per_model {
            if n >= min_requests as f64 {
                push(format!("queue_us_per_request {model}"), queue / n, false);
                push(
                    format!("compute_us_per_request {model}"),
                    compute / n,
                    false,
                );
            }
        }
        out
    }
}
