//! Prometheus metrics of a worker (prometheus-client, typed labels), served by axum on `/metrics`.
//! Updated from the worker's stats once per poll interval.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use stress_common::status::WorkerSnapshot;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScenarioLabels {
    pub scenario: String,
}

pub struct Metrics {
    registry: Registry,
    tests: Family<ScenarioLabels, Counter>,
    failures: Family<ScenarioLabels, Counter>,
    requests: Family<ScenarioLabels, Counter>,
    p99_us: Family<ScenarioLabels, Gauge>,
    qps: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("triton_stress_worker");
        let tests = Family::<ScenarioLabels, Counter>::default();
        let failures = Family::<ScenarioLabels, Counter>::default();
        let requests = Family::<ScenarioLabels, Counter>::default();
        let p99_us = Family::<ScenarioLabels, Gauge>::default();
        let qps = Gauge::<f64, AtomicU64>::default();
        registry.register("tests", "Scenario tests run", tests.clone());
        registry.register("failures", "Scenario tests that failed", failures.clone());
        registry.register("requests", "Inference requests sent", requests.clone());
        registry.register(
            "latency_p99_microseconds",
            "99th percentile request latency since start",
            p99_us.clone(),
        );
        registry.register(
            "qps",
            "Requests per second over the last poll interval",
            qps.clone(),
        );
        Self {
            registry,
            tests,
            failures,
            requests,
            p99_us,
            qps,
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
            if let Ok(h) = stress_common::histogram::LatencyHistogram::decode(&s.latency_histogram)
            {
                self.p99_us
                    .get_or_create(&labels)
                    .set(h.percentile_us(99.0) as i64);
            }
        }
        self.qps.set(snapshot.qps);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
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
