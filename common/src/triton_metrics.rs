//! Triton's own Prometheus metrics (`:8002/metrics`), reduced to what a stress report needs per
//! model: requests that succeeded and failed, and where the time went (queue vs compute).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelMetrics {
    pub model: String,
    pub version: String,
    pub success: f64,
    pub failure: f64,
    pub inferences: f64,
    pub executions: f64,
    pub pending: f64,
    pub request_duration_us: f64,
    pub queue_duration_us: f64,
    pub compute_input_duration_us: f64,
    pub compute_infer_duration_us: f64,
    pub compute_output_duration_us: f64,
    /// `failure` split by Triton's `reason` label (BACKEND, REJECTED, CANCELED, OTHER).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_by_reason: BTreeMap<String, f64>,
}

impl ModelMetrics {
    fn per_request(&self, total_us: f64) -> f64 {
        let n = self.success + self.failure;
        if n > 0.0 { total_us / n } else { 0.0 }
    }

    pub fn avg_request_us(&self) -> f64 {
        self.per_request(self.request_duration_us)
    }

    pub fn avg_queue_us(&self) -> f64 {
        self.per_request(self.queue_duration_us)
    }

    pub fn avg_compute_us(&self) -> f64 {
        self.per_request(
            self.compute_input_duration_us
                + self.compute_infer_duration_us
                + self.compute_output_duration_us,
        )
    }
}

/// The samples of a Prometheus text exposition (`/metrics`), by the `prometheus-parse` crate: a
/// histogram's buckets come as one sample of [`prometheus_parse::Value::Histogram`]; a line that
/// is no sample is skipped, as Prometheus' own scrape skips what it does not know.
pub fn scrape(text: &str) -> Vec<prometheus_parse::Sample> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).map_or_else(|_| Vec::new(), |s| s.samples)
}

/// A counter's, a gauge's or an untyped sample's value (None for a histogram or summary).
pub fn number(value: &prometheus_parse::Value) -> Option<f64> {
    use prometheus_parse::Value;
    match value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

/// Per-model counters from a `/metrics` text (failures summed over their `reason` label).
pub fn parse(text: &str) -> Vec<ModelMetrics> {
    let mut models: BTreeMap<(String, String), ModelMetrics> = BTreeMap::new();
    for sample in scrape(text) {
        let Some(value) = number(&sample.value) else {
            continue;
        };
        let labels = &sample.labels;
        let (Some(model), Some(version)) = (labels.get("model"), labels.get("version")) else {
            continue;
        };
        let m = models
            .entry((model.to_string(), version.to_string()))
            .or_insert_with(|| ModelMetrics {
                model: model.to_string(),
                version: version.to_string(),
                ..Default::default()
            });
        if sample.metric == "nv_inference_request_failure" {
            let reason = labels.get("reason").unwrap_or("OTHER");
            *m.failure_by_reason.entry(reason.to_string()).or_default() += value;
        }
        let field = match sample.metric.as_str() {
            "nv_inference_request_success" => &mut m.success,
            "nv_inference_request_failure" => &mut m.failure,
            "nv_inference_count" => &mut m.inferences,
            "nv_inference_exec_count" => &mut m.executions,
            "nv_inference_pending_request_count" => &mut m.pending,
            "nv_inference_request_duration_us" => &mut m.request_duration_us,
            "nv_inference_queue_duration_us" => &mut m.queue_duration_us,
            "nv_inference_compute_input_duration_us" => &mut m.compute_input_duration_us,
            "nv_inference_compute_infer_duration_us" => &mut m.compute_infer_duration_us,
            "nv_inference_compute_output_duration_us" => &mut m.compute_output_duration_us,
            _ => continue,
        };
        *field += value;
    }
    models.into_values().collect()
}

/// Every sample of the metric `name` (all its series), e.g. `nv_cpu_utilization` (one, no
/// labels) or `nv_gpu_utilization` (one per GPU).
pub fn samples(text: &str, name: &str) -> Vec<f64> {
    scrape(text)
        .iter()
        .filter(|s| s.metric == name)
        .filter_map(|s| number(&s.value))
        .collect()
}

/// A server's own gauges at one scrape (absent: the server does not export it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerGauges {
    /// `nv_cpu_utilization` (0..1).
    pub cpu_utilization: Option<f64>,
    /// `nv_cpu_memory_used_bytes`: the host's used memory as Triton sees it (not the server's
    /// own: that is [`ServerSample::rss_bytes`]).
    pub cpu_memory_used_bytes: Option<f64>,
    /// `nv_gpu_memory_used_bytes`, summed over GPUs.
    pub gpu_memory_used_bytes: Option<f64>,
    /// `nv_gpu_utilization` (0..1), mean over GPUs.
    pub gpu_utilization: Option<f64>,
}

/// The server-wide gauges of a `/metrics` text.
pub fn gauges(text: &str) -> ServerGauges {
    let sum = |name: &str| {
        let v = samples(text, name);
        (!v.is_empty()).then(|| v.iter().sum::<f64>())
    };
    let mean = |name: &str| {
        let v = samples(text, name);
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    ServerGauges {
        cpu_utilization: mean("nv_cpu_utilization"),
        cpu_memory_used_bytes: sum("nv_cpu_memory_used_bytes"),
        gpu_memory_used_bytes: sum("nv_gpu_memory_used_bytes"),
        gpu_utilization: mean("nv_gpu_utilization"),
    }
}

/// One server over one interval of a run: what its per-model counters did in the interval
/// ([`delta`]), its gauges at the end, and the resident memory of its processes where the
/// launcher can read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSample {
    pub at_ms: i64,
    pub interval_ms: i64,
    /// The server's resident memory, bytes: a local process and its children (python backend
    /// stubs), or a pod container's cgroup (anonymous and shared memory).
    pub rss_bytes: Option<f64>,
    /// The memory limit the server runs under (a pod container's cgroup), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<f64>,
    pub gauges: ServerGauges,
    pub models: Vec<ModelMetrics>,
    /// Set on the first sample of a new server process (its counters went back): how long,
    /// at most, its previous process served after its last scrape (to the first scrape that
    /// found it gone, or to this one). What it served then was never scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unscraped_ms: Option<i64>,
}

/// Whether `after` is a new server process's scrape, not a later one of `before`'s: every
/// model that had served requests by `before` shows fewer now (or is gone). Then every counter
/// of `after` counts from zero. A model reloaded alone restarts its own counters only, which
/// [`delta`] takes from zero by themselves: its server's other counters go on.
pub fn restarted(before: &[ModelMetrics], after: &[ModelMetrics]) -> bool {
    let requests = |m: &ModelMetrics| m.success + m.failure;
    let mut served = before.iter().filter(|b| requests(b) > 0.0).peekable();
    served.peek().is_some()
        && served.all(|b| {
            after
                .iter()
                .find(|a| a.model == b.model && a.version == b.version)
                .is_none_or(|a| requests(a) < requests(b))
        })
}

/// What each model's counters did from `before` to `after` (the same server, two scrapes);
/// `pending` is a gauge and is `after`'s. A counter lower than before (the server restarted)
/// counts from zero. A model new in `after` counts whole.
pub fn delta(before: &[ModelMetrics], after: &[ModelMetrics]) -> Vec<ModelMetrics> {
    let d = |a: f64, b: f64| if a >= b { a - b } else { a };
    after
        .iter()
        .map(|a| {
            let Some(b) = before
                .iter()
                .find(|b| b.model == a.model && b.version == a.version)
            else {
                return a.clone();
            };
            ModelMetrics {
                model: a.model.clone(),
                version: a.version.clone(),
                success: d(a.success, b.success),
                failure: d(a.failure, b.failure),
                inferences: d(a.inferences, b.inferences),
                executions: d(a.executions, b.executions),
                pending: a.pending,
                request_duration_us: d(a.request_duration_us, b.request_duration_us),
                queue_duration_us: d(a.queue_duration_us, b.queue_duration_us),
                compute_input_duration_us: d(
                    a.compute_input_duration_us,
                    b.compute_input_duration_us,
                ),
                compute_infer_duration_us: d(
                    a.compute_infer_duration_us,
                    b.compute_infer_duration_us,
                ),
                compute_output_duration_us: d(
                    a.compute_output_duration_us,
                    b.compute_output_duration_us,
                ),
                failure_by_reason: a
                    .failure_by_reason
                    .iter()
                    .map(|(r, v)| {
                        let was = b.failure_by_reason.get(r).copied().unwrap_or(0.0);
                        (r.clone(), d(*v, was))
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A table of what each model did over an interval of `seconds` (counter deltas, see
/// [`delta`]): successes and failures per second, queue and compute input / infer / output time
/// per request (µs), inferences per execution (the dynamic batcher's effect) and pending
/// requests. The live view of metrics-client and of a run's latest server samples.
pub fn render_interval(models: &[ModelMetrics], seconds: f64) -> String {
    let mut out = format!(
        "{:<24} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7}\n",
        "Model",
        "ok/s",
        "fail/s",
        "queue µs",
        "input µs",
        "infer µs",
        "output µs",
        "batch",
        "pending"
    );
    for m in models {
        let n = m.success + m.failure;
        let per = |us: f64| if n > 0.0 { us / n } else { 0.0 };
        let rate = |v: f64| if seconds > 0.0 { v / seconds } else { 0.0 };
        let batch = if m.executions > 0.0 {
            format!("{:.2}", m.inferences / m.executions)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "{:<24} {:>9.1} {:>8.1} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>6} {:>7.0}\n",
            m.model,
            rate(m.success),
            rate(m.failure),
            per(m.queue_duration_us),
            per(m.compute_input_duration_us),
            per(m.compute_infer_duration_us),
            per(m.compute_output_duration_us),
            batch,
            m.pending
        ));
    }
    out
}

/// A table: model | success | failure | avg request / queue / compute (µs).
pub fn render(models: &[ModelMetrics]) -> String {
    let mut out = format!(
        "{:<24} | {:>10} | {:>8} | {:>12} | {:>10} | {:>12}\n",
        "Model", "Success", "Failure", "Request µs", "Queue µs", "Compute µs"
    );
    for m in models {
        out.push_str(&format!(
            "{:<24} | {:>10} | {:>8} | {:>12.0} | {:>10.0} | {:>12.0}\n",
            m.model,
            m.success,
            m.failure,
            m.avg_request_us(),
            m.avg_queue_us(),
            m.avg_compute_us()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_gone_back_is_a_new_process_one_alone_a_reloaded_model() {
        let m = |model: &str, success: f64| ModelMetrics {
            model: model.into(),
            version: "1".into(),
            success,
            ..Default::default()
        };
        let before = [m("a", 100.0), m("b", 5.0), m("idle", 0.0)];
        assert!(!restarted(&before, &[m("a", 150.0), m("b", 5.0)]));
        assert!(restarted(
            &before,
            &[m("a", 20.0), m("b", 1.0), m("idle", 0.0)]
        ));
        // A model not loaded yet in the new process went back too.
        assert!(restarted(&before, &[m("a", 3.0)]));
        // b reloaded alone: a goes on.
        assert!(!restarted(&before, &[m("a", 120.0), m("b", 1.0)]));
        // A model loaded since is no restart, nor is a scrape before any request.
        assert!(!restarted(
            &before,
            &[m("a", 100.0), m("b", 5.0), m("c", 1.0)]
        ));
        assert!(!restarted(&[m("a", 0.0)], &[m("a", 0.0)]));
    }

    #[test]
    fn parses_triton_counters_per_model() {
        let text = r#"
# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="add_sub",version="1"} 100
nv_inference_request_failure{model="add_sub",reason="REJECTED",version="1"} 2
nv_inference_request_failure{model="add_sub",reason="BACKEND",version="1"} 1
nv_inference_queue_duration_us{model="add_sub",version="1"} 5150
nv_inference_compute_infer_duration_us{model="add_sub",version="1"} 10300
nv_cpu_utilization 0.5
"#;
        let m = parse(text);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].success, m[0].failure), (100.0, 3.0));
        assert!((m[0].avg_queue_us() - 50.0).abs() < 1e-9);
        assert!((m[0].avg_compute_us() - 100.0).abs() < 1e-9);
        assert!(render(&m).contains("add_sub"));
        assert_eq!(samples(text, "nv_cpu_utilization"), [0.5]);
        assert!(samples(text, "nv_gpu_utilization").is_empty());
        assert_eq!(m[0].failure_by_reason["REJECTED"], 2.0);
        assert_eq!(m[0].failure_by_reason["BACKEND"], 1.0);
        let g = gauges(text);
        assert_eq!(g.cpu_utilization, Some(0.5));
        assert_eq!(
            g.gpu_memory_used_bytes, None,
            "a CPU server has no GPU gauges"
        );
    }

    /// What tritonserver 2.51 (CPU, python backend) answered on /metrics after five inferences
    /// of add_sub, saved as it came.
    const TRITON_2_51: &str = include_str!("testdata/tritonserver-2.51-metrics.txt");

    #[test]
    fn a_real_tritonserver_s_metrics_read_per_model_and_server_wide() {
        let m = parse(TRITON_2_51);
        assert_eq!(m.len(), 1, "{m:?}");
        let add_sub = &m[0];
        assert_eq!(
            (add_sub.model.as_str(), add_sub.version.as_str()),
            ("add_sub", "1")
        );
        assert_eq!((add_sub.success, add_sub.failure), (5.0, 0.0));
        assert_eq!(
            (add_sub.inferences, add_sub.executions, add_sub.pending),
            (5.0, 5.0, 0.0)
        );
        assert_eq!(add_sub.request_duration_us, 804200.0);
        assert_eq!(add_sub.queue_duration_us, 14764.0);
        assert_eq!(add_sub.failure_by_reason.len(), 4, "{add_sub:?}");
        let g = gauges(TRITON_2_51);
        assert_eq!(g.cpu_utilization, Some(1.0));
        assert_eq!(g.cpu_memory_used_bytes, Some(2063200256.0));
        assert_eq!(g.gpu_utilization, None);
    }

    #[test]
    fn a_delta_is_what_the_counters_did_between_two_scrapes() {
        let at = |success: f64, queue: f64, pending: f64| ModelMetrics {
            model: "m".into(),
            version: "1".into(),
            success,
            queue_duration_us: queue,
            pending,
            failure_by_reason: [("BACKEND".to_string(), success / 10.0)].into(),
            ..Default::default()
        };
        let d = delta(&[at(100.0, 1000.0, 5.0)], &[at(150.0, 1600.0, 2.0)]);
        assert_eq!(d[0].success, 50.0);
        assert_eq!(d[0].queue_duration_us, 600.0);
        assert_eq!(d[0].pending, 2.0, "a gauge is the latest reading");
        assert_eq!(d[0].failure_by_reason["BACKEND"], 5.0);
        let restarted = delta(&[at(100.0, 1000.0, 0.0)], &[at(30.0, 300.0, 0.0)]);
        assert_eq!(
            restarted[0].success, 30.0,
            "a restarted server counts from zero"
        );
        let new_model = delta(&[], &[at(7.0, 70.0, 0.0)]);
        assert_eq!(new_model[0].success, 7.0);
        let table = render_interval(&d, 2.0);
        let row = table.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[..4], ["m", "25.0", "0.0", "12"], "{table}");
    }
}
