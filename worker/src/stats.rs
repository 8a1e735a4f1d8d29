//! Per-scenario counters and latency histograms of one worker, shared by its streams. Each
//! scenario has its own lock, so streams running different scenarios never contend.

use crate::metrics::{Metrics, ServerLatencies};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stress_common::histogram::LatencyHistogram;
use stress_common::scenario::Scenario;
use stress_common::status::{FailureRecord, ScenarioCounts, WorkerSnapshot};

#[derive(Default)]
struct Counts {
    tests: u64,
    failures: u64,
    requests: u64,
    skipped: u64,
    latency: LatencyHistogram,
    /// The same latencies, per server, into the worker's Prometheus metrics (when it serves them).
    exported: ServerLatencies,
}

/// How many failure records a worker keeps in memory for its report (the store keeps its own).
const KEPT_FAILURES: usize = 100;

pub struct Stats {
    per_scenario: Vec<Mutex<Counts>>,
    total_requests: AtomicU64,
    failures: Mutex<Vec<FailureRecord>>,
    failures_seen: AtomicU64,
    metrics: Option<Arc<Metrics>>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            per_scenario: Scenario::ALL.iter().map(|_| Mutex::default()).collect(),
            total_requests: AtomicU64::new(0),
            failures: Mutex::default(),
            failures_seen: AtomicU64::new(0),
            metrics: None,
        }
    }
}

fn index(s: Scenario) -> usize {
    Scenario::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every scenario is in ALL")
}

impl Stats {
    /// Stats that also observe every latency into `metrics`' histograms.
    pub fn with_metrics(metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            metrics,
            ..Self::default()
        }
    }

    fn counts(&self, s: Scenario) -> std::sync::MutexGuard<'_, Counts> {
        self.per_scenario[index(s)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// One request sent by a scenario to `server`, with its latency (None: no response to time).
    pub fn request(&self, s: Scenario, server: &str, latency: Option<Duration>) {
        let mut c = self.counts(s);
        c.requests += 1;
        if let Some(l) = latency {
            c.latency.record(l);
            if let Some(m) = &self.metrics {
                c.exported.observe(m, s, server, l);
            }
        }
        drop(c);
        self.total_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests counted in bulk (an external process such as perf_analyzer sent them).
    pub fn requests(&self, s: Scenario, n: u64) {
        self.counts(s).requests += n;
        self.total_requests.fetch_add(n, Ordering::Relaxed);
    }

    pub fn test_passed(&self, s: Scenario) {
        self.counts(s).tests += 1;
    }

    /// Returns true for the first failure of the worker.
    pub fn test_failed(&self, s: Scenario, failure: &FailureRecord) -> bool {
        {
            let mut c = self.counts(s);
            c.tests += 1;
            c.failures += 1;
        }
        let mut kept = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < KEPT_FAILURES {
            kept.push(failure.clone());
        }
        self.failures_seen.fetch_add(1, Ordering::Relaxed) == 0
    }

    pub fn test_skipped(&self, s: Scenario) {
        self.counts(s).skipped += 1;
    }

    pub fn total_requests(&self) -> u64 {
        self.total_requests.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> Vec<FailureRecord> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn scenario_counts(&self, scenarios: &[Scenario]) -> Vec<ScenarioCounts> {
        scenarios
            .iter()
            .map(|&s| {
                let c = self.counts(s);
                ScenarioCounts {
                    scenario: s.name().into(),
                    tests: c.tests,
                    failures: c.failures,
                    requests: c.requests,
                    skipped: c.skipped,
                    latency_histogram: c.latency.encode(),
                }
            })
            .collect()
    }

    pub fn snapshot(&self, scenarios: &[Scenario], qps: f64) -> WorkerSnapshot {
        WorkerSnapshot {
            at_ms: stress_common::now_ms(),
            total_requests: self.total_requests(),
            qps,
            scenarios: self.scenario_counts(scenarios),
        }
    }
}
