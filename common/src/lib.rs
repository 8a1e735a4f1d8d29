//! Code shared by the driver and the worker.
//!
//! * [`contract`]: the driver ↔ worker contract (the worker's arguments, protocol, load mode,
//!   scenario mix, correlation-id blocks, run and member ids).
//! * [`status`]: the records a worker reports (events, heartbeats, snapshots, failures) and the
//!   [`status::StatusSink`] trait they go through.
//! * [`store`]: the status store (sqlx; SQLite file by default, Postgres in a cluster) that implements
//!   the sink for workers and the read side for the driver.
//! * [`histogram`]: mergeable HDR latency histograms with a compact text encoding.
//! * [`limits`]: the bounds both the driver and the worker enforce on what a matrix or a flag asks.
//! * [`interval`]: the length of a run's series intervals and a worker's interval histograms.
//! * [`paths`]: finding executables on PATH; [`http`]: the HTTP client (GET with a time limit).
//! * [`qps`]: the QPS of a run (its one denominator, [`qps::load_seconds`]).
//! * [`signature`]: failure signatures (what makes two failures the same) and error kinds.
//! * [`report`]: the L0 table (Test Case | Failures | Tests | Requests | Description).
//! * [`outbox`]: a worker's reports queued off the request path and delivered in order, so
//!   a store outage neither stops the load nor loses what was reported.
//! * [`schedule`]: an open loop's send times (constant, Poisson, request-intervals files).
//! * [`retry`]: a write retried with backoff within a time budget (a worker's final event).
//! * [`trace`]: W3C trace context on sampled requests, and the client and server spans of each.
//! * [`telemetry`] and [`shutdown`]: logging set-up and the one cancellation token of a process.

pub mod contract;
pub mod foreign;
pub mod histogram;
pub mod http;
pub mod interval;
pub mod limits;
pub mod outbox;
pub mod paths;
pub mod qps;
pub mod report;
pub mod retry;
pub mod scenario;
pub mod schedule;
pub mod shutdown;
pub mod signature;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod trace;
pub mod triton_metrics;
pub mod tritonserver;

/// A duration in the store's unit (milliseconds), saturating: a matrix's durations are bounded
/// far below it (`limits::MAX_DURATION`), so only a bug reaches `i64::MAX`.
pub fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch: the one time unit of the store and the reports.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `message: cause: cause...` from an error's chain of sources, skipping a cause whose words
/// the text has already (hyper's connect error repeats its own cause's) and wrappers that only
/// say "transport error" (tonic's). One line for a log or a failure record.
pub fn with_causes(
    mut message: String,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    while let Some(e) = source {
        let text = e.to_string();
        if text != "transport error" && !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = e.source();
    }
    message
}

#[cfg(test)]
mod tests {
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn causes_are_said_once_and_bare_wrappers_not_at_all() {
        let chain = Layer(
            "transport error",
            Some(Box::new(Layer(
                "tcp connect error: Connection refused (os error 111)",
                Some(Box::new(Layer("Connection refused (os error 111)", None))),
            ))),
        );
        assert_eq!(
            super::with_causes("127.0.0.1:8001".into(), Some(&chain)),
            "127.0.0.1:8001: tcp connect error: Connection refused (os error 111)"
        );
    }
}
