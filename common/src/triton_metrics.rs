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

/// One sample line: `name{label="v",...} value`.
fn parse_line(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}')?),
        None => (head, ""),
    };
    let mut map = BTreeMap::new();
    for pair in labels.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=')?;
        map.insert(k.trim(), v.trim().trim_matches('"'));
    }
    Some((name, map, value))
}

/// Per-model counters from a `/metrics` text (failures summed over their `reason` label).
pub fn parse(text: &str) -> Vec<ModelMetrics> {
    let mut models: BTreeMap<(String, String), ModelMetrics> = BTreeMap::new();
    for (name, labels, value) in text.lines().filter_map(parse_line) {
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
        let field = match name {
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
    text.lines()
        .filter_map(parse_line)
        .filter(|(n, _, _)| *n == name)
        .map(|(_, _, v)| v)
        .collect()
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
    }
}
