//! Prometheus metrics of a worker (prometheus-client, typed labels), served by axum on `/metrics`.
//! Counters and QPS are updated from the worker's stats once per poll interval; request latency
//! is observed as it happens, into a histogram per scenario and server, which (unlike a
//! percentile) merges across workers:
//! `histogram_quantile(0.99, sum by (le) (rate(triton_stress_worker_request_latency_seconds_bucket[1m])))`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use stress_common::status::WorkerSnapshot;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScenarioLabels {
    pub scenario: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub scenario: String,
    /// The server address the request went to.
    pub server: String,
}

/// Upper bounds of the latency buckets, in seconds: 1-2-5 steps from 50 µs (an identity model
/// on loopback) to 30 s (the Timeout scenario, sequence deadlines); slower lands in +Inf.
pub const LATENCY_BUCKETS_S: [f64; 19] = [
    50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3,
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_S)
}

type LatencyFamily = Family<LatencyLabels, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    /// The server address the calls went to.
    pub server: String,
}

pub struct Metrics {
    registry: Registry,
    tests: Family<ScenarioLabels, Counter>,
    failures: Family<ScenarioLabels, Counter>,
    requests: Family<ScenarioLabels, Counter>,
    latency: LatencyFamily,
    qps: Gauge<f64, AtomicU64>,
    /// Calls in flight per server, and how long none of them ended (from the snapshots).
    unanswered: Family<ServerLabels, Gauge>,
    quiet: Family<ServerLabels, Gauge<f64, AtomicU64>>,
    /// Servers given a value so far: one not in a snapshot's list is back to 0.
    servers_seen: std::sync::Mutex<Vec<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("triton_stress_worker");
        let tests = Family::<ScenarioLabels, Counter>::default();
        let failures = Family::<ScenarioLabels, Counter>::default();
        let requests = Family::<ScenarioLabels, Counter>::default();
        let latency = LatencyFamily::new_with_constructor(latency_histogram);
        let qps = Gauge::<f64, AtomicU64>::default();
        registry.register("tests", "Scenario tests run", tests.clone());
        registry.register("failures", "Scenario tests that failed", failures.clone());
        registry.register("requests", "Inference requests sent", requests.clone());
        registry.register(
            "request_latency_seconds",
            "Latency of answered requests (the Load scenario's open loop: from the intended send time)",
            latency.clone(),
        );
        registry.register(
            "qps",
            "Requests per second over the last poll interval",
            qps.clone(),
        );
        let unanswered = Family::<ServerLabels, Gauge>::default();
        let quiet = Family::<ServerLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "unanswered_calls",
            "Calls sent to the server and not ended (answered, failed or timed out) at the last poll",
            unanswered.clone(),
        );
        registry.register(
            "unanswered_quiet_seconds",
            "How long none of the calls to the server ended while some waited (0: none waits)",
            quiet.clone(),
        );
        Self {
            registry,
            tests,
            failures,
            requests,
            latency,
            qps,
            unanswered,
            quiet,
            servers_seen: std::sync::Mutex::default(),
        }
    }
}

impl Metrics {
    /// Brings the counters up to a snapshot's cumulative values.
    pub fn update(&self, snapshot: &WorkerSnapshot) {
        for s in &snapshot.scenarios {
            let labels = ScenarioLabels {
                scenario: s.scenario.clone(),
            };
            for (family, value) in [
                (&self.tests, s.tests),
                (&self.failures, s.failures),
                (&self.requests, s.requests),
            ] {
                let c = family.get_or_create(&labels);
                c.inc_by(value.saturating_sub(c.get()));
            }
        }
        self.qps.set(snapshot.qps);
        let mut seen = self.servers_seen.lock().unwrap_or_else(|e| e.into_inner());
        for u in &snapshot.unanswered {
            if !seen.contains(&u.server) {
                seen.push(u.server.clone());
            }
        }
        for server in seen.iter() {
            let labels = ServerLabels {
                server: server.clone(),
            };
            let waiting = snapshot.unanswered.iter().find(|u| &u.server == server);
            self.unanswered
                .get_or_create(&labels)
                .set(waiting.map_or(0, |u| i64::try_from(u.calls).unwrap_or(i64::MAX)));
            self.quiet
                .get_or_create(&labels)
                .set(waiting.map_or(0.0, |u| u.quiet_ms(snapshot.at_ms) as f64 / 1000.0));
        }
    }

    /// The latency histogram of one scenario and server (a handle onto the registered one).
    pub fn latency(&self, scenario: &str, server: &str) -> Histogram {
        self.latency.get_or_create_owned(&LatencyLabels {
            scenario: scenario.to_string(),
            server: server.to_string(),
        })
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One scenario's latency histograms, by server, as handles: what the worker's stats keep, so a
/// request costs a comparison of server addresses (a few per worker), not a labelled lookup.
#[derive(Default)]
pub struct ServerLatencies(Vec<(String, Histogram)>);

impl ServerLatencies {
    pub fn observe(&mut self, metrics: &Metrics, scenario: &str, server: &str, latency: Duration) {
        let index = match self.0.iter().position(|(s, _)| s == server) {
            Some(i) => i,
            None => {
                self.0
                    .push((server.to_string(), metrics.latency(scenario, server)));
                self.0.len() - 1
            }
        };
        self.0[index].1.observe(latency.as_secs_f64());
    }
}

/// Serves `/metrics` on `addr` until `cancel` fires; returns the bound address.
pub async fn serve(
    metrics: Arc<Metrics>,
    addr: std::net::SocketAddr,
    cancel: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_held_by_a_server_are_gauges_back_to_0_once_they_end() {
        use stress_common::status::UnansweredCalls;
        let metrics = Metrics::default();
        let line = |name: &str, value: &str| {
            format!(r#"triton_stress_worker_{name}{{server="a:1"}} {value}"#)
        };
        metrics.update(&WorkerSnapshot {
            at_ms: 10_000,
            unanswered: vec![UnansweredCalls {
                server: "a:1".into(),
                calls: 16,
                quiet_since_ms: 7_500,
            }],
            ..Default::default()
        });
        let text = metrics.encode();
        for l in [
            line("unanswered_calls", "16"),
            line("unanswered_quiet_seconds", "2.5"),
        ] {
            assert!(
                text.lines().any(|t| t == l),
                "no {l}:
{text}"
            );
        }
        metrics.update(&WorkerSnapshot {
            at_ms: 11_000,
            ..Default::default()
        });
        let text = metrics.encode();
        for l in [
            line("unanswered_calls", "0"),
            line("unanswered_quiet_seconds", "0.0"),
        ] {
            assert!(
                text.lines().any(|t| t == l),
                "no {l}:
{text}"
            );
        }
    }

    #[test]
    fn latencies_are_observed_per_scenario_and_server() {
        let metrics = Metrics::default();
        let mut load = ServerLatencies::default();
        for (server, ms) in [("a:1", 1), ("b:1", 40), ("a:1", 3)] {
            load.observe(&metrics, "Load", server, Duration::from_millis(ms));
        }
        let text = metrics.encode();
        for (labels, count) in [
            (r#"scenario="Load",server="a:1""#, 2),
            (r#"scenario="Load",server="b:1""#, 1),
        ] {
            let line =
                format!("triton_stress_worker_request_latency_seconds_count{{{labels}}} {count}");
            assert!(text.lines().any(|l| l == line), "no {line}:\n{text}");
        }
        // 1 and 3 ms fall in the 1 ms and 5 ms buckets.
        for (le, n) in [
            ("0.0005", 0),
            ("0.001", 1),
            ("0.002", 1),
            ("0.005", 2),
            ("+Inf", 2),
        ] {
            let line = format!(
                r#"triton_stress_worker_request_latency_seconds_bucket{{le="{le}",scenario="Load",server="a:1"}} {n}"#
            );
            assert!(text.lines().any(|l| l == line), "no {line}:\n{text}");
        }
    }
}
