//! The run as a sequence of phases, each handing the next what it started: the external
//! servers checked, the servers launched and ready, their models checked, the warm-up, the
//! capacity targets, the servers' sampler and the clients; then the load (`poll`) and its end,
//! where the workers stop, the run is judged and the servers stop.

use super::Verdict;
use super::capacity::CapacityRun;
use super::driver::{Driver, Endpoints};
use super::faults::FaultRunner;
use super::finish::scrape_server_metrics;
use super::poll::Load;
use super::sampler::{SampledServer, ServerSampler};
use super::{CLIENT_STOP_GRACE, SCRAPE_BUDGET, SERVER_STOP_GRACE, SLO_MEMBER, STORE_CALL_LIMIT};
use crate::capacity::autoscale;
use crate::judge::failfast::{self, FailFast};
use crate::judge::slo;
use crate::judge::verdicts::FailedTest;
use crate::launcher::MemberExit;
use std::collections::BTreeSet;
use std::time::Instant;
use stress_common::status::{EventKind, Stopping};
use stress_common::store::{Member, within as bounded};

impl Driver<'_> {
    /// The run, phase by phase. A phase that ends the run early gives its verdict as the error.
    pub(super) async fn drive(&mut self) -> Verdict {
        let phases = async {
            // External servers first: a wrong address is bad input, found before anything starts.
            self.check_externals().await?;
            let endpoints = self.launch_servers().await?;
            self.record_identities(&endpoints).await;
            self.check_models(&endpoints).await?;
            self.warm_up().await?;
            let capacity = self.start_capacity(&endpoints).await;
            let sampler = self.start_sampler(&endpoints).await;
            let rules = self.start_clients(&endpoints).await?;
            let load = self.begin_load(endpoints, rules, capacity, sampler);
            let load = self.run_load(load).await?;
            Ok::<_, Verdict>(self.end_load(load).await)
        };
        match phases.await {
            Ok(verdict) | Err(verdict) => verdict,
        }
    }

    /// Launches the plan's servers and waits until every one is ready.
    async fn launch_servers(&mut self) -> Result<Endpoints, Verdict> {
        let plan = self.plan;
        for s in &plan.servers {
            self.record(&s.name, EventKind::Starting, "launching").await;
            let s = super::spans::pointed_at(s, self.spans);
            if let Err(e) = self.launcher.start_server(&s).await {
                return Err(self.launch_failed(e).await);
            }
            self.update_member(Member {
                command: self.launcher.command_line(&s.name).unwrap_or_default(),
                ..plan.server_record(&s)
            })
            .await;
        }
        self.progress.show(&format!(
            "waiting for {} server(s) to be ready",
            plan.servers.len()
        ));
        let ready = tokio::select! {
            r = self.launcher.wait_servers_ready(plan.server_ready_timeout) => r,
            _ = self.cancel.cancelled() => return Err(Verdict::Aborted("interrupted while servers started".into())),
        };
        let mut endpoints: Endpoints = match ready {
            Ok(ready) => ready
                .into_iter()
                .map(|ep| (ep.member.clone(), ep))
                .collect(),
            Err(e) => return Err(self.launch_failed(e).await),
        };
        self.record_ready(&endpoints).await;
        endpoints.extend(plan.external_endpoints());
        Ok(endpoints)
    }

    /// Each launched server that is ready: its addresses in its member record, and the event.
    async fn record_ready(&mut self, endpoints: &Endpoints) {
        let plan = self.plan;
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
    }

    async fn warm_up(&mut self) -> Result<(), Verdict> {
        tokio::select! {
            _ = tokio::time::sleep(self.plan.warmup) => Ok(()),
            _ = self.cancel.cancelled() => Err(Verdict::Aborted("interrupted during warm-up".into())),
        }
    }

    /// Capacity mode's run (None in other modes): the first phase's targets are in the store
    /// before any worker reads them.
    async fn start_capacity(&mut self, endpoints: &Endpoints) -> Option<CapacityRun> {
        let plan = self.plan;
        let mut capacity = CapacityRun::new(plan, stress_common::now_ms());
        if let (Some(cap), Some(settings)) = (&mut capacity, &plan.capacity) {
            cap.autoscale = autoscale::Collector::new(plan, settings, endpoints);
            cap.start(self.store, &plan.run_id).await;
        }
        capacity
    }

    /// The servers' series: the baseline scrape before any worker sends.
    async fn start_sampler(&mut self, endpoints: &Endpoints) -> ServerSampler {
        let plan = self.plan;
        let sampled = endpoints
            .values()
            .filter(|ep| !ep.metrics.is_empty())
            .map(|ep| SampledServer {
                member: ep.member.clone().into(),
                metrics: ep.metrics.clone(),
                memory: self.launcher.server_memory(&ep.member),
                launched: plan.external(&ep.member).is_none(),
            })
            .collect();
        ServerSampler::start(
            self.store.clone(),
            plan.run_id.clone(),
            sampled,
            stress_common::interval::series_interval(Some(plan.duration), plan.poll),
        )
        .await
    }

    /// Launches the workers, every client talking to every ready server of its target group:
    /// the fail-fast rules, which watch each client from its launch.
    async fn start_clients(&mut self, endpoints: &Endpoints) -> Result<FailFast, Verdict> {
        let plan = self.plan;
        let mut rules = FailFast::new(plan.rules);
        for c in &plan.clients {
            let assignment = plan.assignment(c, endpoints, self.store_url, self.perf_analyzer);
            if let Err(e) = self.launcher.start_client(c, &assignment).await {
                return Err(self.launch_failed(e).await);
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
        Ok(rules)
    }

    /// The load phase's clocks start now: its planned end, and the capacity phases' and the
    /// faults' schedules.
    fn begin_load(
        &self,
        endpoints: Endpoints,
        rules: FailFast,
        mut capacity: Option<CapacityRun>,
        sampler: ServerSampler,
    ) -> Load {
        let started = Instant::now();
        let started_ms = stress_common::now_ms();
        if let Some(cap) = &mut capacity {
            cap.started_ms = started_ms;
        }
        let load_started = tokio::time::Instant::now();
        let faults = FaultRunner::new(self.plan, &endpoints, self.store, load_started, started_ms);
        Load {
            end: load_started + self.plan.duration,
            endpoints,
            rules,
            capacity,
            sampler,
            faults,
            started,
            started_ms,
        }
    }

    /// The load's end, on time or once every capacity phase ended: the workers flush their
    /// final counts and the servers give their last sample, the run is judged, then the servers
    /// stop.
    async fn end_load(&mut self, mut load: Load) -> Verdict {
        if let Some(cap) = &mut load.capacity {
            cap.finish(self.store, &self.plan.run_id).await;
        }
        self.end_faults(&mut load.faults).await;
        self.progress.show("stopping workers");
        self.record_stopping(Stopping::LoadPhaseEnded).await;
        let exits: Vec<MemberExit> = self.launcher.stop_clients(CLIENT_STOP_GRACE).await;
        load.sampler.finish().await;
        scrape_server_metrics(self.store, self.launcher, self.plan, SCRAPE_BUDGET).await;
        let last_event_id = load.rules.last_event_id();
        let verdict = self
            .judge_end(
                &mut load.faults,
                last_event_id,
                load.started,
                load.started_ms,
                &exits,
            )
            .await;
        self.stop_servers(&load.endpoints, &verdict).await;
        verdict
    }

    /// The verdict of a run that reached its end: what the workers recorded since the last
    /// poll (their final flush included) and how they exited, then the faults' recoveries,
    /// then the SLO. The member it blames gets its failure event.
    async fn judge_end(
        &mut self,
        faults: &mut Option<FaultRunner>,
        last_event_id: i64,
        started: Instant,
        started_ms: i64,
        exits: &[MemberExit],
    ) -> Verdict {
        let run_id = &self.plan.run_id;
        let all_events = bounded(STORE_CALL_LIMIT, self.store.events(run_id, 0))
            .await
            .unwrap_or_default();
        let late: Vec<_> = all_events
            .iter()
            .filter(|e| e.id > last_event_id)
            .cloned()
            .collect();
        let finished_cleanly: BTreeSet<String> = all_events
            .into_iter()
            .filter(|e| e.kind == EventKind::Success)
            .map(|e| e.member_id)
            .collect();
        let late_failed = self.new_failures(STORE_CALL_LIMIT).await;
        let final_counts = bounded(STORE_CALL_LIMIT, self.store.signature_counts(run_id))
            .await
            .unwrap_or_default();
        self.verdicts.counts(final_counts);
        let load_hours = started.elapsed().as_secs_f64() / 3600.0;
        // Each fault's recovery, now that the workers' outages are all in: failures of tests
        // begun after it are judged again, as any failure.
        let (fault_failed, failed_fault) = match faults {
            Some(runner) => self.judge_faults(runner).await,
            None => (Vec::new(), None),
        };
        let late_failed: Vec<FailedTest> = late_failed
            .into_iter()
            .chain(fault_failed)
            .chain(self.verdicts.over_rate(load_hours))
            .collect();
        let slo = self.judge_slo(started_ms).await;
        if let Some(blame) = failfast::at_end(&late, &late_failed, exits, &finished_cleanly) {
            if blame.record {
                self.record(&blame.member, EventKind::Failure, &blame.reason)
                    .await;
            }
            return Verdict::Fail {
                member: blame.member,
                reason: blame.reason,
            };
        }
        if let Some((member, reason)) = failed_fault {
            self.record(&member, EventKind::Failure, &reason).await;
            return Verdict::Fail { member, reason };
        }
        if let Some(breach) = slo::first_breach(&slo) {
            self.record(SLO_MEMBER, EventKind::Failure, &breach).await;
            return Verdict::Fail {
                member: SLO_MEMBER.into(),
                reason: breach,
            };
        }
        Verdict::Pass
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

    /// The launched servers stop (an external one is left running); on a pass, each server's
    /// end is recorded as a success.
    async fn stop_servers(&mut self, endpoints: &Endpoints, verdict: &Verdict) {
        self.progress.show("stopping servers");
        self.launcher.stop_servers(SERVER_STOP_GRACE).await;
        if *verdict != Verdict::Pass {
            return;
        }
        for name in endpoints.keys() {
            let details = if self.plan.external(name).is_some() {
                "left running (an external server)"
            } else {
                "stopped after the run"
            };
            self.record(name, EventKind::Success, details).await;
        }
    }
}
