//! The requests of a stream's open loop still waiting for their answers. A window's schedule
//! stops at its end; its answers need not: past the server's capacity they come later than
//! the next window's first sends are due, and a window that waited for them would hold those
//! sends back, so the server would see a pause and then a burst instead of the load asked for.
//! So each request in flight owns what its answer needs (its check, where it is counted), and
//! a window that stops at its end hands its requests in flight to the stream; the next window
//! on the same schedule takes them in with its own, and anything else waits for them first
//! ([`drain`]).

use super::Failure;
use crate::stats::{CallInFlight, Stats};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stress_common::scenario::Scenario;
use sync_wrapper::SyncWrapper;
use tokio_util::sync::CancellationToken;

/// Where a request is counted: its scenario, model and server.
pub struct Counted<'a> {
    pub stats: &'a Stats,
    pub scenario: Scenario,
    pub model: String,
    pub server: &'a str,
}

impl<'a> Counted<'a> {
    /// A call to the server leaves now, in flight until the result drops.
    pub fn call(&self) -> CallInFlight<'a> {
        self.stats.call(self.server)
    }

    /// Counts a request: answered in `latency`, or sent and never answered (None).
    pub fn request(&self, latency: Option<Duration>) {
        self.stats
            .request(self.scenario, &self.model, self.server, latency);
    }
}

/// A request in flight: its future counts and checks the answer when it comes.
pub struct Answer<'a> {
    /// Polled only through `&mut`: a wrapper that is `Sync`, since a test's environment,
    /// which holds its stream's answers, is shared across awaits.
    future: SyncWrapper<futures::future::BoxFuture<'a, Result<(), Failure>>>,
    counted: Arc<Counted<'a>>,
}

impl<'a> Answer<'a> {
    /// `future` counts and checks the answer; `counted` counts it unanswered, when abandoned.
    pub fn new(
        counted: Arc<Counted<'a>>,
        future: impl Future<Output = Result<(), Failure>> + Send + 'a,
    ) -> Self {
        Self {
            future: SyncWrapper::new(Box::pin(future)),
            counted,
        }
    }
}

impl Future for Answer<'_> {
    type Output = Result<(), Failure>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.get_mut().as_mut().poll(cx)
    }
}

/// A stream's requests in flight.
pub type Answers<'a> = FuturesUnordered<Answer<'a>>;

/// How long a cancelled open loop waits for its requests in flight.
pub const CANCEL_DRAIN: Duration = Duration::from_secs(1);

/// Waits for every answer in `answers`; the first failure ends the wait (the rest are dropped,
/// uncounted, as a failed window's). Once the worker is told to stop (before or during this
/// wait, which lasts as long as the server's latency), those not in within [`CANCEL_DRAIN`]
/// are counted as sent and unanswered (a black hole, a hung server), so the worker stops and
/// flushes its records in time instead of waiting for their deadlines.
pub async fn drain(answers: &mut Answers<'_>, cancel: &CancellationToken) -> Result<(), Failure> {
    let mut drain_until = None;
    loop {
        if drain_until.is_none() && cancel.is_cancelled() {
            drain_until = Some(tokio::time::Instant::now() + CANCEL_DRAIN);
        }
        let done = match drain_until {
            None => tokio::select! {
                done = answers.next() => done,
                _ = cancel.cancelled() => continue,
            },
            Some(at) => match tokio::time::timeout_at(at, answers.next()).await {
                Ok(done) => done,
                Err(_) => {
                    for answer in std::mem::take(answers).iter() {
                        answer.counted.request(None);
                    }
                    return Ok(());
                }
            },
        };
        match done {
            None => return Ok(()),
            Some(result) => result?,
        }
    }
}

/// A test's outcome once the answers its window handed over are in: their first failure is
/// the test's. Those of a test that did not pass are dropped, as a failed window's are.
pub async fn settle(
    answers: &mut Answers<'_>,
    cancel: &CancellationToken,
    outcome: super::Outcome,
) -> super::Outcome {
    if outcome != super::Outcome::Passed {
        answers.clear();
        return outcome;
    }
    match drain(answers, cancel).await {
        Ok(()) => outcome,
        Err(failure) => super::Outcome::Failed(failure),
    }
}
