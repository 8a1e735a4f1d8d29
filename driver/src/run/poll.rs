//! The poll loop: every interval (and at once on a member's exit or a new event) it gathers
//! what it observes into a `failfast::Poll`, feeds it to the rules and acts on their verdict.

use super::capacity::CapacityRun;
use super::driver::{Driver, PROBE_TIMEOUT};
use super::faults::FaultRunner;
use super::finish::scrape_server_metrics;
use super::progress::progress_line;
use super::{
    CLIENT_STOP_GRACE, DRIVER_MEMBER, EVENT_CHECK, EVENT_CHECK_LIMIT, SCRAPE_BUDGET,
    SERVER_STOP_GRACE, SLO_MEMBER, STORE_CALL_LIMIT, Verdict, Wake,
};
use crate::capacity::autoscale;
use crate::judge::classify::ServerEnd;
use crate::judge::failfast::{self, FailFast, Poll};
use crate::judge::slo;
use crate::judge::verdicts::FailedTest;
use crate::launcher::MemberExit;
use crate::launcher::external;
use crate::plan::ServerEndpoint;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use stress_common::status::{EventKind, Stopping};
use stress_common::store::{Member, within as bounded};

impl Driver<'_> {
    pub(super) async fn drive(&mut self) -> Verdict {
        let plan = self.plan;
        // External servers first: a wrong address is bad input, found before anything starts.
        if let Some(verdict) = self.check_externals().await {
            return verdict;
        }
        // Servers.
        for s in &plan.servers {
            self.record(&s.name, EventKind::Starting, "launching").await;
            if let Err(e) = self.launcher.start_server(s).await {
                return self.launch_failed(e).await;
            }
            self.update_member(Member {
                command: self.launcher.command_line(&s.name).unwrap_or_default(),
                ..plan.server_record(s)
            })
            .await;
        }
        self.progress.show(&format!(
            "waiting for {} server(s) to be ready",
            plan.servers.len()
        ));
        let ready = tokio::select! {
            r = self.launcher.wait_servers_ready(plan.server_ready_timeout) => r,
            _ = self.cancel.cancelled() => return Verdict::Aborted("interrupted while servers started".into()),
        };
        let mut endpoints: BTreeMap<String, ServerEndpoint> = match ready {
            Ok(ready) => ready
                .into_iter()
                .map(|ep| (ep.member.clone(), ep))
                .collect(),
            Err(e) => return self.launch_failed(e).await,
        };
        for s in &plan.servers {
            let Some(ep) = endpoints.get(s.name.as_str()) else {
                continue;
            };
            let at = self.launcher.locate(&s.name).unwrap_or_default();
            self.update_member(Member {
                address: format!("grpc={} http={} metrics={}", ep.grpc, ep.http, ep.metrics),
                command: self.launcher.command_line(&s.name).unwrap_or_default(),
                ..plan.server_record(s)
            })
            .await;
            let details = format!(
                "ready ({at}; grpc {} http {} metrics {})",
                ep.grpc, ep.http, ep.metrics
            );
            self.record(&s.name, EventKind::Running, &details).await;
        }
        endpoints.extend(plan.external_endpoints());
        self.record_identities(&endpoints).await;
        if let Some(verdict) = self.check_models(&endpoints).await {
            return verdict;
        }
        tokio::select! {
            _ = tokio::time::sleep(plan.warmup) => {}
            _ = self.cancel.cancelled() => return Verdict::Aborted("interrupted during warm-up".into()),
        }

        // Capacity mode: the first phase's targets are in the store before any worker reads them.
        let mut capacity = CapacityRun::new(plan, stress_common::now_ms());
        if let (Some(cap), Some(settings)) = (&mut capacity, &plan.capacity) {
            cap.autoscale = autoscale::Collector::new(plan, settings, &endpoints);
            cap.start(self.store, &plan.run_id).await;
        }

        // The servers' series: the baseline scrape before any worker sends.
        let sampled = endpoints
            .values()
            .filter(|ep| !ep.metrics.is_empty())
            .map(|ep| crate::run::sampler::SampledServer {
                member: ep.member.clone().into(),
                metrics: ep.metrics.clone(),
                memory: self.launcher.server_memory(&ep.member),
                launched: self.plan.external(&ep.member).is_none(),
            })
            .collect();
        let sampler = crate::run::sampler::ServerSampler::start(
            self.store.clone(),
            plan.run_id.clone(),
            sampled,
            stress_common::interval::series_interval(Some(plan.duration), plan.poll),
        )
        .await;

        // Workers: every client talks to every ready server of its target group.
        let mut rules = FailFast::new(plan.rules);
        for c in &plan.clients {
            let assignment = plan.assignment(c, &endpoints, self.store_url, self.perf_analyzer);
            if let Err(e) = self.launcher.start_client(c, &assignment).await {
                return self.launch_failed(e).await;
            }
            let at = self.launcher.locate(&c.name).unwrap_or_default();
            self.record(&c.name, EventKind::Starting, &format!("launched ({at})"))
                .await;
            self.update_member(Member {
                address: assignment.servers.join(","),
                command: self.launcher.command_line(&c.name).unwrap_or_default(),
                ..plan.client_record(c)
            })
            .await;
            rules.client_launched(&assignment.member_id, stress_common::now_ms());
        }

        // Poll.
        let started = Instant::now();
        let started_ms = stress_common::now_ms();
        if let Some(cap) = &mut capacity {
            cap.started_ms = started_ms;
        }
        let load_started = tokio::time::Instant::now();
        let end = load_started + plan.duration;
        let mut faults = FaultRunner::new(plan, &endpoints, load_started, started_ms);
        let mut ticker = tokio::time::interval(plan.poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Between ticks, new events are read often (a cheap indexed read), so a worker's own
        // FAILURE stops the run within a fraction of the poll interval.
        let mut event_check = tokio::time::interval(EVENT_CHECK.min(plan.poll));
        event_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // On Postgres an event wakes the loop at its commit (LISTEN/NOTIFY); the reads above
        // stay, for SQLite and for notices lost to a reconnect.
        let notices = match bounded(STORE_CALL_LIMIT, self.store.event_notices(&plan.run_id)).await
        {
            Ok(notices) => notices,
            Err(e) => {
                tracing::warn!("no event notices from the store ({e}): events are polled");
                None
            }
        };
        let event_recorded = async || match &notices {
            Some(notices) => notices.recorded().await,
            None => std::future::pending().await,
        };
        loop {
            // Biased, the interrupt and the end first: a tick while the store does not answer
            // takes seconds (each read waits for its limit), so once the end is due an overdue
            // tick is always ready too; a fair pick let a 30 s run go on past its end, tick
            // after tick, until the store outage rule failed it at 60 s (seen in CI).
            let wake = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    let why = "driver interrupted (SIGTERM/SIGINT)";
                    self.record(DRIVER_MEMBER, EventKind::Failure, why).await;
                    // Nothing of the run is worth waiting for: the workers drop their tests
                    // in flight when the caller stops them.
                    self.record_stopping(Stopping::Failed {
                        member: DRIVER_MEMBER.into(),
                    })
                    .await;
                    return Verdict::Aborted(why.into());
                }
                _ = tokio::time::sleep_until(end) => break,
                // An injection on time matters more than a tick (which an outage delays).
                _ = FaultRunner::due(&faults) => Wake::Fault,
                // The tick before the wake-ups between ticks, so none of them can starve it.
                _ = ticker.tick() => Wake::Tick,
                // A member may have ended: judged now, not at the next tick.
                _ = self.launcher.member_may_have_ended() => Wake::Exit,
                _ = event_recorded() => Wake::Events,
                _ = event_check.tick() => Wake::Events,
            };
            // Between ticks only what woke the loop is fed: the per-poll rules (zero QPS,
            // heartbeats, a store outage) count ticks.
            let poll = match wake {
                Wake::Fault => {
                    if let Some(runner) = &mut faults {
                        self.fault_step(runner, &mut rules).await;
                    }
                    continue;
                }
                Wake::Tick => {
                    if let Some(runner) = &mut faults {
                        runner.collect_ready().await;
                        // A server READY again: its wrong answers are its own from then on.
                        self.verdicts.injected(runner.live_windows());
                        // A server started again after a kill or restart is a new process.
                        for member in sampler.members() {
                            sampler
                                .track_memory(member, self.launcher.server_memory(member))
                                .await;
                        }
                    }
                    self.observe(&rules).await
                }
                Wake::Exit => {
                    let exits = self.launcher.exited().await;
                    if exits.is_empty() {
                        continue;
                    }
                    Poll {
                        now_ms: stress_common::now_ms(),
                        exits,
                        ..Poll::default()
                    }
                }
                Wake::Events => {
                    let events = bounded(
                        EVENT_CHECK_LIMIT,
                        self.store.events(&plan.run_id, rules.last_event_id()),
                    )
                    .await;
                    let failed_tests = self.new_failures(EVENT_CHECK_LIMIT).await;
                    match events {
                        Ok(events) if !events.is_empty() || !failed_tests.is_empty() => Poll {
                            now_ms: stress_common::now_ms(),
                            events: Some(Ok(events)),
                            failed_tests,
                            ..Poll::default()
                        },
                        _ if !failed_tests.is_empty() => Poll {
                            now_ms: stress_common::now_ms(),
                            failed_tests,
                            ..Poll::default()
                        },
                        // Nothing new, or a store that does not answer (the tick's reads
                        // judge an outage).
                        _ => continue,
                    }
                }
            };
            self.note_server_ends(&poll.exits, &endpoints, poll.now_ms);
            // Each worker's QPS now, for the progress line (the rules take the poll).
            let qps: Vec<(String, f64)> = match &poll.latest_qps {
                Some(Ok(q)) => q.iter().map(|q| (q.member_id.clone(), q.qps)).collect(),
                _ => Vec::new(),
            };
            if let Some(cause) = rules.observe(poll) {
                // Timestamps for fail-fast's own latency: judged, attributed, workers stopped.
                tracing::info!("failure judged ({}): {}", wake.as_str(), cause.member());
                self.launcher.failure_judged();
                if let Some(runner) = &mut faults {
                    runner.finish(self.launcher).await;
                    runner.save(self.store, &plan.run_id).await;
                }
                let verdict = self.fail(cause, &endpoints).await;
                tracing::info!("failure attributed; stopping the workers");
                self.wind_down(sampler).await;
                return verdict;
            }
            if !matches!(wake, Wake::Tick) {
                // The SLO, capacity and progress work is the tick's.
                continue;
            }
            if let Some(runner) = &mut faults
                && let Some((member, reason)) = self.fault_overdue(runner).await
            {
                self.record(&member, EventKind::Failure, &reason).await;
                self.record_stopping(Stopping::Failed {
                    member: member.clone(),
                })
                .await;
                runner.finish(self.launcher).await;
                runner.save(self.store, &plan.run_id).await;
                self.wind_down(sampler).await;
                return Verdict::Fail { member, reason };
            }
            if let Some(breach) = self.slo_live(started_ms, started.elapsed()).await {
                self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
                self.record_stopping(Stopping::Failed {
                    member: SLO_MEMBER.into(),
                })
                .await;
                self.wind_down(sampler).await;
                return Verdict::Fail {
                    member: SLO_MEMBER.into(),
                    reason: breach,
                };
            }
            if let Some(cap) = &mut capacity
                && cap.due()
            {
                cap.check(self.store, &plan.run_id).await;
                if cap.all_ended() {
                    self.progress
                        .show("capacity: every client group's phase ended");
                    break;
                }
            }
            let counts = bounded(STORE_CALL_LIMIT, self.store.scenario_counts(&plan.run_id))
                .await
                .unwrap_or_default();
            self.progress.show(&progress_line(
                started.elapsed(),
                plan.duration,
                endpoints.len(),
                &plan.client_groups(),
                &qps,
                &counts,
            ));
        }

        if let Some(cap) = &mut capacity {
            cap.finish(self.store, &plan.run_id).await;
        }
        if let Some(runner) = &mut faults {
            runner.finish(self.launcher).await;
            runner.save(self.store, &plan.run_id).await;
        }
        // The end: workers flush their final counts, then servers stop.
        self.progress.show("stopping workers");
        self.record_stopping(Stopping::LoadPhaseEnded).await;
        let exits: Vec<MemberExit> = self.launcher.stop_clients(CLIENT_STOP_GRACE).await;
        sampler.finish().await;
        scrape_server_metrics(self.store, self.launcher, plan, SCRAPE_BUDGET).await;
        let all_events = bounded(STORE_CALL_LIMIT, self.store.events(&plan.run_id, 0))
            .await
            .unwrap_or_default();
        let late: Vec<_> = all_events
            .iter()
            .filter(|e| e.id > rules.last_event_id())
            .cloned()
            .collect();
        let finished_cleanly: BTreeSet<String> = all_events
            .into_iter()
            .filter(|e| e.kind == EventKind::Success)
            .map(|e| e.member_id)
            .collect();
        // What the workers recorded since the last poll, their final flush included.
        let late_failed = self.new_failures(STORE_CALL_LIMIT).await;
        let final_counts = bounded(STORE_CALL_LIMIT, self.store.signature_counts(&plan.run_id))
            .await
            .unwrap_or_default();
        self.verdicts.counts(final_counts);
        let load_hours = started.elapsed().as_secs_f64() / 3600.0;
        // Each fault's recovery, now that the workers' outages are all in: failures of tests
        // begun after it are judged again, as any failure.
        let fault_failed = match &mut faults {
            Some(runner) => self.judge_faults(runner).await,
            None => (Vec::new(), None),
        };
        let late_failed: Vec<FailedTest> = late_failed
            .into_iter()
            .chain(fault_failed.0)
            .chain(self.verdicts.over_rate(load_hours))
            .collect();
        let mut verdict = Verdict::Pass;
        let slo = self.judge_slo(started_ms).await;
        if let Some(blame) = failfast::at_end(&late, &late_failed, &exits, &finished_cleanly) {
            if blame.record {
                self.record(&blame.member, EventKind::Failure, &blame.reason)
                    .await;
            }
            verdict = Verdict::Fail {
                member: blame.member,
                reason: blame.reason,
            };
        }
        if verdict == Verdict::Pass
            && let Some((member, reason)) = fault_failed.1
        {
            self.record(&member, EventKind::Failure, &reason).await;
            verdict = Verdict::Fail { member, reason };
        }
        if verdict == Verdict::Pass
            && let Some(breach) = slo::first_breach(&slo)
        {
            self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
            verdict = Verdict::Fail {
                member: SLO_MEMBER.into(),
                reason: breach,
            };
        }
        self.progress.show("stopping servers");
        self.launcher.stop_servers(SERVER_STOP_GRACE).await;
        if verdict == Verdict::Pass {
            for name in endpoints.keys() {
                let details = if plan.external(name).is_some() {
                    "left running (an external server)"
                } else {
                    "stopped after the run"
                };
                self.record(name, EventKind::Success, details).await;
            }
        }
        verdict
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

    /// Does a fault's due step, then tells the judges what it changed: the failures the
    /// injected faults own, and the clients whose zero QPS they excuse.
    async fn fault_step(&mut self, runner: &mut FaultRunner, rules: &mut FailFast) {
        for line in runner.act(self.launcher).await {
            tracing::info!("{line}");
            self.progress.show(&line);
        }
        self.verdicts.injected(runner.live_windows());
        for (client, until) in runner.excused_clients() {
            rules.excuse_zero_qps(&client, until);
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

    /// The faults judged against the workers' outages: the failed tests that their recovery
    /// leaves outside them, and the first fault that fails the run (its server, and why).
    async fn judge_faults(
        &mut self,
        runner: &mut FaultRunner,
    ) -> (Vec<FailedTest>, Option<(String, String)>) {
        match bounded(
            STORE_CALL_LIMIT,
            self.store
                .outages_after(&self.plan.run_id, runner.outages_read_to()),
        )
        .await
        {
            Ok(new) => runner.read_outages(new),
            Err(e) => tracing::warn!("the workers' last outages not read: {e}"),
        }
        let log = &runner.log().faults;
        let outcomes = crate::judge::faults::judge(log, runner.outages());
        let windows = crate::judge::faults::final_windows(log, &outcomes, stress_common::now_ms());
        let failed = self.verdicts.refine_injected(windows);
        let fault =
            crate::judge::faults::first_failed(&outcomes).map(|o| (o.target.clone(), o.reason()));
        (failed, fault)
    }

    /// The failure records not judged yet, judged: those that fail the run.
    async fn new_failures(&mut self, limit: std::time::Duration) -> Vec<FailedTest> {
        let read = bounded(
            limit,
            self.store
                .failures_after(&self.plan.run_id, self.verdicts.last_failure_id()),
        )
        .await;
        self.verdicts.records(read.unwrap_or_default())
    }

    /// Servers that ended: the failures that could not reach them are classified by it.
    fn note_server_ends(
        &mut self,
        exits: &[MemberExit],
        endpoints: &BTreeMap<String, ServerEndpoint>,
        now_ms: i64,
    ) {
        for e in exits {
            if let Some(ep) = endpoints.get(&e.member_id) {
                self.verdicts.server_ended(ServerEnd {
                    member: e.member_id.clone(),
                    addresses: [&ep.grpc, &ep.http]
                        .into_iter()
                        .filter(|a| !a.is_empty())
                        .cloned()
                        .collect(),
                    at_ms: now_ms,
                    reason: e.describe(),
                });
            }
        }
    }
}
