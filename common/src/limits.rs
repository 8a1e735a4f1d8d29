//! Bounds the driver and the worker both enforce (a matrix field and the worker flag it
//! becomes): an extreme value is bad input, refused before anything runs, instead of an
//! overflow, a panic or exhausted memory later.

use std::time::Duration;

/// Requests in one run of the PerfAnalyzer scenario's perf_analyzer (`--request-count`):
/// a run killed at the stop sent at most this many uncounted requests.
pub const PERF_ANALYZER_REQUESTS: u64 = 1000;

/// A run's longest duration: 30 days (a soak is hours; a timer past this overflows nothing).
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Polls: a status write per worker per poll; faster floods the store.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(3600);
/// Any other wait (the driver's warm-up and start-up, a request's deadline, a drain): a day.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Streams, or closed-loop requests in flight, of one worker.
pub const MAX_CONCURRENCY: u32 = 100_000;
/// A worker's streams when nothing says how many (its flag's and a client template's default).
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// Open-loop requests per second of one worker.
pub const MIN_RATE: f64 = 0.001;
pub const MAX_RATE: f64 = 10_000_000.0;

/// A duration outside its bounds, all three shown in words (`1h 30m`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} is out of bounds: from {} to {}",
    humantime::format_duration(*.value),
    humantime::format_duration(*.min),
    humantime::format_duration(*.max)
)]
pub struct OutOfBounds {
    pub value: Duration,
    pub min: Duration,
    pub max: Duration,
}

/// `value` within `[min, max]`, or why not, both bounds named.
pub fn within(value: Duration, min: Duration, max: Duration) -> Result<(), OutOfBounds> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(OutOfBounds { value, min, max })
}

/// A flag's reading (clap's value parser) of a duration written the humantime way, within
/// `[min, max]`.
pub fn duration_within(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let value = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
        within(value, min, max)
            .map(|()| value)
            .map_err(|e| e.to_string())
    }
}
