//! The load phase's poll loop: every interval (and at once on a member's exit or a new event)
//! it gathers what it observes into a `failfast::Poll`, feeds it to the rules and acts on their
//! verdict.

use super::capacity::CapacityRun;
use super::driver::{Driver, Endpoints, PROBE_TIMEOUT};
use super::faults::FaultRunner;
use super::progress::progress_line;
use super::sampler::ServerSampler;
use super::{
    DRIVER_MEMBER, EVENT_CHECK, EVENT_CHECK_LIMIT, SLO_MEMBER, STORE_CALL_LIMIT, Verdict, Wake,
};
use crate::judge::classify::ServerEnd;
use crate::judge::failfast::{Cause, FailFast, Poll};
use crate::judge::verdicts::FailedTest;
use crate::launcher::MemberExit;
use crate::launcher::external;
use std::time::Instant;
use stress_common::status::{DriverFailure, EventKind, Stopping};
use stress_common::store::{EventNotices, within as bounded};
use tokio::time::{Interval, MissedTickBehavior};

/// What the load phase runs on: what the phases before it started, and its clocks.
pub(super) struct Load {
    pub(super) endpoints: Endpoints,
    /// The fail-fast rules, watching every client from its launch.
    pub(super) rules: FailFast,
    /// Capacity mode's phases (None in other modes).
    pub(super) capacity: Option<CapacityRun>,
    pub(super) sampler: ServerSampler,
    /// The plan's faults, injected on time (None when it has none).
    pub(super) faults: Option<FaultRunner>,
    pub(super) started: Instant,
    pub(super) started_ms: i64,
    /// The planned end.
    pub(super) end: tokio::time::Instant,
}

/// The loop's wake-ups besides its end, the faults, a member's exit and the interrupt.
struct Wakes {
    ticker: Interval,
    /// Between ticks, new events are read often (a cheap indexed read), so a worker's own
    /// FAILURE stops the run within a fraction of the poll interval.
    event_check: Interval,
    /// On Postgres an event wakes the loop at its commit (LISTEN/NOTIFY); the reads above
    /// stay, for SQLite and for notices lost to a reconnect.
    notices: Option<EventNotices>,
}

/// What one wake-up of the loop leads to.
enum Step {
    /// On to the next wake-up.
    Continue,
    /// Every capacity phase ended: the load is over, as at its planned end.
    Over,
    /// The run failed: the workers stop and the servers give their last sample.
    Failed(Verdict),
}

impl Driver<'_> {
    /// The load phase, until its planned end or every capacity phase's: then the load, for its
    /// end. A failure first stops the workers and takes the servers' last sample; an interrupt
    /// stops at once.
    pub(super) async fn run_load(&mut self, mut load: Load) -> Result<Load, Verdict> {
        let mut wakes = self.wakes().await;
        loop {
            // Biased, the interrupt and the end first: a tick while the store does not answer
            // takes seconds (each read waits for its limit), so once the end is due an overdue
            // tick is always ready too; a fair pick let a 30 s run go on past its end, tick
            // after tick, until the store outage rule failed it at 60 s (seen in CI).
            let wake = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(self.interrupted().await),
                _ = tokio::time::sleep_until(load.end) => return Ok(load),
                // An injection on time matters more than a tick (which an outage delays).
                _ = FaultRunner::due(&load.faults) => Wake::Fault,
                // The tick before the wake-ups between ticks, so none of them can starve it.
                _ = wakes.ticker.tick() => Wake::Tick,
                // A member may have ended: judged now, not at the next tick.
                _ = self.launcher.member_may_have_ended() => Wake::Exit,
                _ = event_recorded(wakes.notices.as_ref()) => Wake::Events,
                _ = wakes.event_check.tick() => Wake::Events,
            };
            match self.step(&wake, &mut load).await {
                Step::Continue => {}
                Step::Over => return Ok(load),
                Step::Failed(verdict) => {
                    self.wind_down(load.sampler).await;
                    return Err(verdict);
                }
            }
        }
    }

    async fn wakes(&self) -> Wakes {
        let plan = self.plan;
        let mut ticker = tokio::time::interval(plan.poll);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut event_check = tokio::time::interval(EVENT_CHECK.min(plan.poll));
        event_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let notices = match bounded(STORE_CALL_LIMIT, self.store.event_notices(&plan.run_id)).await
        {
            Ok(notices) => notices,
            Err(e) => {
                tracing::warn!("no event notices from the store ({e}): events are polled");
                None
            }
        };
        Wakes {
            ticker,
            event_check,
            notices,
        }
    }

    /// The driver interrupted (SIGTERM/SIGINT): nothing of the run is worth waiting for (the
    /// workers drop their tests in flight when the caller stops them).
    async fn interrupted(&mut self) -> Verdict {
        let why = "driver interrupted (SIGTERM/SIGINT)";
        let details = DriverFailure::Interrupted.details("SIGTERM/SIGINT");
        self.record(DRIVER_MEMBER, EventKind::Failure, &details)
            .await;
        self.record_stopping(Stopping::Failed {
            member: DRIVER_MEMBER.into(),
        })
        .await;
        Verdict::Aborted(why.into())
    }

    /// One wake-up: observe what woke the loop, feed it to the rules, act on their verdict.
    async fn step(&mut self, wake: &Wake, load: &mut Load) -> Step {
        let Some(poll) = self.observe_wake(wake, load).await else {
            return Step::Continue;
        };
        self.note_server_ends(&poll.exits, &load.endpoints, poll.now_ms);
        // Each worker's QPS now, for the progress line (the rules take the poll).
        let qps: Vec<(String, f64)> = match &poll.latest_qps {
            Some(Ok(q)) => q.iter().map(|q| (q.member_id.clone(), q.qps)).collect(),
            _ => Vec::new(),
        };
        if let Some(cause) = load.rules.observe(poll) {
            return Step::Failed(self.fail_on_rule(cause, wake, load).await);
        }
        if !matches!(wake, Wake::Tick) {
            // The SLO, capacity and progress work is the tick's.
            return Step::Continue;
        }
        self.tick_checks(load, &qps).await
    }

    /// What the wake-up brings for the rules; None when nothing new. Between ticks only what
    /// woke the loop is fed: the per-poll rules (zero QPS, heartbeats, a store outage) count
    /// ticks.
    async fn observe_wake(&mut self, wake: &Wake, load: &mut Load) -> Option<Poll> {
        match wake {
            Wake::Fault => {
                if let Some(runner) = &mut load.faults {
                    self.fault_step(runner, &mut load.rules, &load.sampler)
                        .await;
                }
                None
            }
            Wake::Tick => Some(self.observe_tick(load).await),
            Wake::Exit => {
                let exits = self.launcher.exited().await;
                (!exits.is_empty()).then(|| Poll {
                    now_ms: stress_common::now_ms(),
                    exits,
                    ..Poll::default()
                })
            }
            Wake::Events => self.observe_events(&load.rules).await,
        }
    }

    /// A tick's poll, after the faults' news.
    async fn observe_tick(&mut self, load: &mut Load) -> Poll {
        if let Some(runner) = &mut load.faults {
            runner.collect_ready().await;
            // A server READY again: its wrong answers are its own from then on.
            self.verdicts.injected(runner.live_windows());
            // A server started again after a kill or restart is a new process.
            for member in load.sampler.members() {
                load.sampler
                    .track_memory(member, self.launcher.server_memory(member));
            }
        }
        self.observe(&load.rules).await
    }

    /// The events and failed tests new since the last read; None when there are none.
    async fn observe_events(&mut self, rules: &FailFast) -> Option<Poll> {
        let events = bounded(
            EVENT_CHECK_LIMIT,
            self.store.events(&self.plan.run_id, rules.last_event_id()),
        )
        .await;
        let failed_tests = self.new_failures(EVENT_CHECK_LIMIT).await;
        match events {
            Ok(events) if !events.is_empty() || !failed_tests.is_empty() => Some(Poll {
                now_ms: stress_common::now_ms(),
                events: Some(Ok(events)),
                failed_tests,
                ..Poll::default()
            }),
            _ if !failed_tests.is_empty() => Some(Poll {
                now_ms: stress_common::now_ms(),
                failed_tests,
                ..Poll::default()
            }),
            // Nothing new, or a store that does not answer (the tick's reads judge an outage).
            _ => None,
        }
    }

    /// A rule fired: the faults end, then the failure is attributed and recorded.
    async fn fail_on_rule(&mut self, cause: Cause, wake: &Wake, load: &mut Load) -> Verdict {
        // Timestamps for fail-fast's own latency: judged, attributed, workers stopped.
        tracing::info!("failure judged ({}): {}", wake.as_str(), cause.member());
        self.launcher.failure_judged();
        self.end_faults(&mut load.faults).await;
        let verdict = self.fail(cause, &load.endpoints).await;
        tracing::info!("failure attributed; stopping the workers");
        verdict
    }

    /// The tick's own work once the rules passed: a fault overdue and the SLO may fail the
    /// run, the capacity phases may end it, else the progress line.
    async fn tick_checks(&mut self, load: &mut Load, qps: &[(String, f64)]) -> Step {
        if let Some(verdict) = self.fail_overdue_fault(&mut load.faults).await {
            return Step::Failed(verdict);
        }
        if let Some(verdict) = self.fail_slo_breach(load).await {
            return Step::Failed(verdict);
        }
        if let Some(cap) = &mut load.capacity
            && cap.due()
        {
            cap.check(self.store, &self.plan.run_id).await;
            if cap.all_ended() {
                self.progress
                    .show("capacity: every client group's phase ended");
                return Step::Over;
            }
        }
        let counts = bounded(
            STORE_CALL_LIMIT,
            self.store.scenario_counts(&self.plan.run_id),
        )
        .await
        .unwrap_or_default();
        self.progress.show(&progress_line(
            load.started.elapsed(),
            self.plan.duration,
            load.endpoints.len(),
            &self.plan.client_groups(),
            qps,
            &counts,
        ));
        Step::Continue
    }

    /// A fault whose clients did not recover in time fails the run, its server to blame.
    async fn fail_overdue_fault(&mut self, faults: &mut Option<FaultRunner>) -> Option<Verdict> {
        let (member, reason) = self.fault_overdue(faults.as_mut()?).await?;
        self.record(&member, EventKind::Failure, &reason).await;
        self.record_stopping(Stopping::Failed {
            member: member.clone(),
        })
        .await;
        self.end_faults(faults).await;
        Some(Verdict::Fail { member, reason })
    }

    /// An SLO breached while the load runs fails the run (a rule with `abort_on_fail`).
    async fn fail_slo_breach(&mut self, load: &Load) -> Option<Verdict> {
        let breach = self
            .slo_live(load.started_ms, load.started.elapsed())
            .await?;
        self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
        self.record_stopping(Stopping::Failed {
            member: SLO_MEMBER.into(),
        })
        .await;
        Some(Verdict::Fail {
            member: SLO_MEMBER.into(),
            reason: breach,
        })
    }

    /// What one poll sees: exits first (when a member ended, nothing else is read: the rules
    /// fire on it at once), then the store.
    pub(super) async fn observe(&mut self, rules: &FailFast) -> Poll {
        let exits = self.launcher.exited().await;
        if !exits.is_empty() {
            return Poll {
                now_ms: stress_common::now_ms(),
                exits,
                ..Poll::default()
            };
        }
        let run_id = &self.plan.run_id;
        let (events, heartbeats, latest_qps, failures, counts) = tokio::join!(
            bounded(
                STORE_CALL_LIMIT,
                self.store.events(run_id, rules.last_event_id())
            ),
            bounded(STORE_CALL_LIMIT, self.store.heartbeats(run_id)),
            bounded(STORE_CALL_LIMIT, self.store.latest_qps(run_id)),
            bounded(
                STORE_CALL_LIMIT,
                self.store
                    .failures_after(run_id, self.verdicts.last_failure_id())
            ),
            bounded(STORE_CALL_LIMIT, self.store.signature_counts(run_id)),
        );
        // An unreadable store is judged by the rules (events, heartbeats); what was read of the
        // failures is judged now, the rest at the next read.
        let mut failed_tests = self.verdicts.records(failures.unwrap_or_default());
        self.verdicts.counts(counts.unwrap_or_default());
        let planned_hours = self.plan.duration.as_secs_f64() / 3600.0;
        failed_tests.extend(self.verdicts.over_rate(planned_hours));
        let not_running = rules
            .clients()
            .into_iter()
            .filter(|m| !self.launcher.is_running(m))
            .collect();
        // External servers: the launcher cannot see them end, so each poll probes them, all
        // at once (a hung one costs PROBE_TIMEOUT, not one each).
        let probes = self
            .plan
            .externals
            .iter()
            .map(|e| external::probe_live(e, PROBE_TIMEOUT));
        let server_probes = self
            .plan
            .externals
            .iter()
            .map(|e| e.name.to_string())
            .zip(futures::future::join_all(probes).await)
            .collect();
        Poll {
            now_ms: stress_common::now_ms(),
            exits,
            events: Some(events),
            heartbeats: Some(heartbeats),
            latest_qps: Some(latest_qps),
            not_running,
            server_probes,
            failed_tests,
        }
    }

    /// The faults' end (what is still injected is ended) and their log saved.
    pub(super) async fn end_faults(&mut self, faults: &mut Option<FaultRunner>) {
        if let Some(runner) = faults {
            runner.finish(self.launcher).await;
            runner.save(self.store, &self.plan.run_id).await;
        }
    }

    /// Does a fault's due step, then tells the judges what it changed: the failures the
    /// injected faults own, the clients whose zero QPS they excuse, and the workers they
    /// replace. The servers are sampled first when the step stops some: what a process served
    /// after its last scrape is lost with it.
    async fn fault_step(
        &mut self,
        runner: &mut FaultRunner,
        rules: &mut FailFast,
        sampler: &ServerSampler,
    ) {
        if runner.stops_servers_now() {
            sampler.sample().await;
        }
        for line in runner.act(self.launcher).await {
            tracing::info!("{line}");
            self.progress.show(&line);
        }
        self.verdicts.injected(runner.live_windows());
        for (client, until) in runner.excused_clients() {
            rules.excuse_zero_qps(&client, until);
        }
        for (worker, until) in runner.replaced_workers() {
            rules.excuse_absence(&worker, until);
        }
        runner.save(self.store, &self.plan.run_id).await;
    }

    /// A fault past its allowed recovery whose clients have not all recovered in time: its
    /// server, and why (the run fails now). A recovered one closes its window.
    async fn fault_overdue(&mut self, runner: &mut FaultRunner) -> Option<(String, String)> {
        let now = stress_common::now_ms();
        if !runner.awaiting_judgement(now) {
            return None;
        }
        let new = bounded(
            STORE_CALL_LIMIT,
            self.store
                .outages_after(&self.plan.run_id, runner.outages_read_to()),
        )
        .await
        .ok()?;
        runner.read_outages(new);
        let overdue = runner.judge_due(now);
        self.verdicts.injected(runner.live_windows());
        overdue
    }

    /// The failure records not judged yet, judged: those that fail the run.
    pub(super) async fn new_failures(&mut self, limit: std::time::Duration) -> Vec<FailedTest> {
        let read = bounded(
            limit,
            self.store
                .failures_after(&self.plan.run_id, self.verdicts.last_failure_id()),
        )
        .await;
        self.verdicts.records(read.unwrap_or_default())
    }

    /// Servers that ended: the failures that could not reach them are classified by it.
    fn note_server_ends(&mut self, exits: &[MemberExit], endpoints: &Endpoints, now_ms: i64) {
        for e in exits {
            if let Some(ep) = endpoints.get(&e.member_id) {
                self.verdicts.server_ended(ServerEnd {
                    member: e.member_id.clone(),
                    addresses: ep.addresses(),
                    at_ms: now_ms,
                    reason: e.describe(),
                });
            }
        }
    }
}

/// Waits for the store's notice of a new event (forever without notices).
async fn event_recorded(notices: Option<&EventNotices>) {
    match notices {
        Some(notices) => notices.recorded().await,
        None => std::future::pending().await,
    }
}
