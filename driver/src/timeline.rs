//! The run over time, for plots and trends: latency percentiles per interval (merged from every
//! worker's interval histograms, never averaged) and each server's Triton metrics per interval
//! (requests/s, queue vs compute time per request, batch size, pending, memory).
//!
//! Built by the report from the store's `latency_intervals` and `server_samples`; every point's
//! `t_s` is seconds since the run started, at the end of its interval.

use serde::{Deserialize, Serialize};

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
}
