//! Retrying a write that must not be lost (the run's last records, a webhook's summary): a few attempts with
//! a doubling pause, all within a time budget, every failed attempt logged.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How hard to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (at least one is made).
    pub attempts: u32,
    /// The pause after the first failure; it doubles after each further one.
    pub first_pause: Duration,
    /// Everything (attempts and pauses) ends within this: an attempt still running at the end
    /// is abandoned, and no pause runs past it.
    pub budget: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("{what}: gave up after {attempts} attempt(s) in {elapsed:?}: {last}")]
pub struct RetryError {
    pub what: String,
    pub attempts: u32,
    pub elapsed: Duration,
    /// The last attempt's error (or that it ran out of time).
    pub last: String,
}

/// Runs `attempt` until it succeeds, `policy.attempts` are made or `policy.budget` is spent.
/// Each failure is logged as a warning, giving up as an error (also returned); `what` names the
/// write in both.
pub async fn retry<T, E, F, Fut>(
    what: &str,
    policy: RetryPolicy,
    mut attempt: F,
) -> Result<T, RetryError>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let deadline = started + policy.budget;
    let mut pause = policy.first_pause;
    let mut made = 0;
    let last = loop {
        made += 1;
        let error = match tokio::time::timeout_at(deadline, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", policy.budget),
        };
        let resume = Instant::now() + pause;
        if made >= policy.attempts.max(1) || resume >= deadline {
            break error;
        }
        tracing::warn!("{what}: attempt {made} failed: {error}; retrying in {pause:?}");
        tokio::time::sleep_until(resume).await;
        pause = pause.saturating_mul(2);
    };
    let e = RetryError {
        what: what.to_string(),
        attempts: made,
        elapsed: started.elapsed(),
        last,
    };
    tracing::error!("{e}");
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    const QUICK: RetryPolicy = RetryPolicy {
        attempts: 4,
        first_pause: Duration::from_millis(10),
        budget: Duration::from_secs(5),
    };

    /// A write that fails its first `failures` attempts, then succeeds; counts its attempts.
    async fn flaky(calls: &AtomicU32, failures: u32) -> Result<&'static str, String> {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= failures {
            Err(format!("store busy ({n})"))
        } else {
            Ok("written")
        }
    }

    /// What `run` logs at WARN and above, as text.
    fn logs_of(run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_write_that_fails_twice_is_made_on_the_third_attempt() {
        let calls = AtomicU32::new(0);
        let logs = logs_of(|| {
            let r = block_on(retry("SUCCESS event", QUICK, || flaky(&calls, 2)));
            assert_eq!(r.unwrap(), "written");
        });
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(
            logs.contains("SUCCESS event: attempt 1 failed: store busy (1); retrying in 10ms")
                && logs.contains("attempt 2 failed: store busy (2); retrying in 20ms"),
            "{logs}"
        );
        assert!(!logs.contains("ERROR"), "{logs}");
    }

    #[test]
    fn a_write_that_always_fails_is_logged_as_an_error_after_the_last_attempt() {
        let calls = AtomicU32::new(0);
        let logs = logs_of(|| {
            let e =
                block_on(retry("SUCCESS event", QUICK, || flaky(&calls, u32::MAX))).unwrap_err();
            assert_eq!((e.attempts, e.last.as_str()), (4, "store busy (4)"));
        });
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert!(
            logs.contains("ERROR")
                && logs.contains("SUCCESS event: gave up after 4 attempt(s)")
                && logs.contains("store busy (4)"),
            "{logs}"
        );
    }

    #[test]
    fn a_write_that_hangs_is_abandoned_when_the_budget_is_spent() {
        let policy = RetryPolicy {
            attempts: 100,
            first_pause: Duration::from_millis(10),
            budget: Duration::from_millis(300),
        };
        let calls = AtomicU32::new(0);
        let started = std::time::Instant::now();
        let e = block_on(retry("FAILURE event", policy, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<(), String>>().await
        }))
        .unwrap_err();
        let took = started.elapsed();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(e.last, "no answer within 300ms");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );

        // Failing fast, it stops when the next pause would end past the budget.
        let calls = AtomicU32::new(0);
        let started = std::time::Instant::now();
        let e = block_on(retry("FAILURE event", policy, || flaky(&calls, u32::MAX))).unwrap_err();
        // Pauses 10+20+40+80 = 150 ms; the next (160 ms) would end past 300 ms.
        assert_eq!(e.attempts, 5);
        assert!(started.elapsed() < Duration::from_millis(300));
    }
}
