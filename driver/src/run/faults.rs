//! The faults of the run's plan, injected on time through the launcher (I/O only): the poll loop
//! wakes at each due step, the runner acts and logs; `judge::faults` judges the log at the end.

use crate::judge::classify::InjectedWindow;
use crate::judge::faults::{FaultLog, InjectedFault};
use crate::launcher::{LaunchError, Launcher, uninjectable};
use crate::matrix::faults::{FaultKind, Injection};
use crate::plan::{RunPlan, ServerEndpoint};
use std::collections::BTreeMap;
use std::time::Duration;
use stress_common::store::{Store, within as bounded};
use tokio::task::JoinHandle;

use super::STORE_CALL_LIMIT;

use super::fault_probes::{READY_PROBE, StoreProbe, ready_again};

pub(super) struct FaultRunner {
    plan: Vec<Injection>,
    /// What was done, one entry per planned injection (index-aligned with `plan`).
    log: FaultLog,
    /// The load phase's start.
    started: tokio::time::Instant,
    started_ms: i64,
    /// The next injection not yet made.
    next: usize,
    /// Lasting faults injected and not yet ended: (index, when they end).
    open: Vec<(usize, tokio::time::Instant)>,
    /// READY probes of killed and restarted servers: index -> when it was READY (None: not
    /// within its allowed recovery).
    ready: BTreeMap<usize, JoinHandle<Option<i64>>>,
    /// Each server's HTTP address (for its READY probe).
    http: BTreeMap<String, String>,
    /// Each server's addresses (as its clients' outages name it) and its clients: what a
    /// drain's other evicted servers add to its fault.
    servers: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// The run's store and its workers: the probe of a store-restart's and an evicted worker's
    /// recovery.
    store_probe: StoreProbe,
    /// Faults judged while the run goes, once past their allowed recovery (index -> when the
    /// clients recovered): their window closes there.
    judged: BTreeMap<usize, i64>,
    /// How long past a fault's allowed recovery its judgement waits for the workers' outages
    /// (each comes with a snapshot, one status interval late at most).
    grace_ms: i64,
    /// The workers' outages read so far, in the order recorded, and the last one's id: each
    /// read asks the store only for the ones after it.
    outages: Vec<(String, stress_common::status::Outage)>,
    outages_read_to: i64,
}

impl FaultRunner {
    /// None when the plan has no faults.
    pub(super) fn new(
        plan: &RunPlan,
        endpoints: &BTreeMap<String, ServerEndpoint>,
        store: &Store,
        started: tokio::time::Instant,
        started_ms: i64,
    ) -> Option<Self> {
        let grace_ms = 2 * stress_common::millis(plan.poll) + 1000;
        if plan.faults.is_empty() {
            return None;
        }
        let servers: BTreeMap<String, (Vec<String>, Vec<String>)> = endpoints
            .iter()
            .map(|(member, ep)| {
                let addresses = [&ep.grpc, &ep.http]
                    .into_iter()
                    .filter(|a| !a.is_empty())
                    .cloned()
                    .collect();
                (member.clone(), (addresses, plan.clients_of(member)))
            })
            .collect();
        let faults = plan
            .faults
            .iter()
            .map(|i| InjectedFault {
                name: i.name.clone(),
                kind: i.kind,
                member: i.member.clone(),
                addresses: servers
                    .get(&i.member)
                    .map(|(a, _)| a.clone())
                    .unwrap_or_default(),
                clients: plan.clients_of(&i.member),
                also_hit: Vec::new(),
                kept: Vec::new(),
                planned_at_ms: started_ms + stress_common::millis(i.at),
                injected_at_ms: None,
                ended_at_ms: None,
                dropped_packets: None,
                ready_at_ms: None,
                duration_ms: stress_common::millis(i.duration),
                recover_within_ms: stress_common::millis(i.recover_within),
                error: None,
                blocked: None,
            })
            .collect();
        Some(FaultRunner {
            plan: plan.faults.clone(),
            log: FaultLog { faults },
            started,
            started_ms,
            next: 0,
            open: Vec::new(),
            ready: BTreeMap::new(),
            http: endpoints
                .iter()
                .map(|(m, ep)| (m.clone(), ep.http.clone()))
                .collect(),
            servers,
            store_probe: StoreProbe {
                store: store.clone(),
                run_id: plan.run_id.clone(),
                workers: plan.clients.iter().map(|c| c.name.to_string()).collect(),
            },
            judged: BTreeMap::new(),
            grace_ms,
            outages: Vec::new(),
            outages_read_to: 0,
        })
    }

    /// The id of the last outage read (0: none yet): read on from there.
    pub(super) fn outages_read_to(&self) -> i64 {
        self.outages_read_to
    }

    /// Takes the outages recorded after [`Self::outages_read_to`], in the order recorded.
    pub(super) fn read_outages(&mut self, new: Vec<(i64, String, stress_common::status::Outage)>) {
        for (id, member, outage) in new {
            self.outages_read_to = self.outages_read_to.max(id);
            self.outages.push((member, outage));
        }
    }

    /// Every outage read so far.
    pub(super) fn outages(&self) -> &[(String, stress_common::status::Outage)] {
        &self.outages
    }

    /// When the runner next has something to do (None: nothing more).
    pub(super) fn next_due(&self) -> Option<tokio::time::Instant> {
        let inject = self.plan.get(self.next).map(|i| self.started + i.at);
        let end = self.open.iter().map(|(_, at)| *at).min();
        match (inject, end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether an injection due now may stop servers (a kill, restart, eviction or drain).
    pub(super) fn stops_servers_now(&self) -> bool {
        self.plan.get(self.next).is_some_and(|i| {
            self.started + i.at <= tokio::time::Instant::now()
                && i.kind.probed()
                && i.kind != FaultKind::StoreRestart
        })
    }

    /// Waits until [`FaultRunner::next_due`] (forever when nothing is due).
    pub(super) async fn due(runner: &Option<Self>) {
        match runner.as_ref().and_then(Self::next_due) {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Does what is due now: ends the lasting faults whose time is up, then injects. Returns
    /// what it did, for the log and the progress line.
    pub(super) async fn act(&mut self, launcher: &mut dyn Launcher) -> Vec<String> {
        let now = tokio::time::Instant::now();
        let mut done = Vec::new();
        let (due, open): (Vec<_>, Vec<_>) = self.open.drain(..).partition(|(_, at)| *at <= now);
        self.open = open;
        for (index, _) in due {
            let fault = &mut self.log.faults[index];
            let result = launcher.end_fault(&fault.member).await;
            fault.ended_at_ms = Some(stress_common::now_ms());
            done.push(match result {
                Ok(ended) => {
                    fault.dropped_packets = ended.dropped_packets;
                    format!(
                        "fault {}: {} of {} ended{}",
                        fault.name,
                        fault.kind.as_str(),
                        fault.member,
                        ended
                            .dropped_packets
                            .map(|n| format!(" ({n} packets dropped)"))
                            .unwrap_or_default()
                    )
                }
                Err(e) => {
                    fault.error = Some(e.to_string());
                    format!("fault {}: could not end: {e}", fault.name)
                }
            });
        }
        while let Some(injection) = self.plan.get(self.next).cloned() {
            if self.started + injection.at > now {
                break;
            }
            let index = self.next;
            self.next += 1;
            // Before the launcher acts: a client may fail the moment the signal lands.
            let at = stress_common::now_ms();
            let result = launcher.inject(&injection).await;
            let fault = &mut self.log.faults[index];
            match result {
                Ok(injected) => {
                    fault.injected_at_ms = Some(at);
                    let lasting = if injection.kind.lasts() {
                        injection.duration
                    } else {
                        Duration::ZERO
                    };
                    if injection.kind.lasts() {
                        self.open.push((index, now + lasting));
                    }
                    let line = format!(
                        "fault {}: {} of {} injected {:.1} s into the load{}",
                        fault.name,
                        fault.kind.as_str(),
                        fault.member,
                        (at - self.started_ms) as f64 / 1000.0,
                        hit_line(&injected)
                    );
                    self.hit(index, injected);
                    let deadline = tokio::time::Instant::now() + lasting + injection.recover_within;
                    if let Some(probe) = self.back_probe(index, at, deadline) {
                        self.ready.insert(index, probe);
                    }
                    done.push(line);
                }
                Err(LaunchError::Blocked { reason, .. }) => {
                    done.push(format!("fault {}: blocked: {reason}", fault.name));
                    fault.blocked = Some(reason);
                }
                Err(e) => {
                    fault.error = Some(e.to_string());
                    done.push(format!("fault {}: not injected: {e}", fault.name));
                }
            }
        }
        done
    }

    /// Adds what fault `index` took down besides its target to its log entry: the other
    /// servers' addresses and clients, and the members themselves.
    fn hit(&mut self, index: usize, injected: crate::launcher::Injected) {
        let fault = &mut self.log.faults[index];
        for member in &injected.also_hit {
            if let Some((addresses, clients)) = self.servers.get(member) {
                fault.addresses.extend(addresses.iter().cloned());
                fault.clients.extend(clients.iter().cloned());
            }
        }
        fault.clients.sort();
        fault.clients.dedup();
        fault.also_hit = injected.also_hit;
        fault.kept = injected.kept;
    }

    /// The probe of what fault `index` (injected at `since_ms`) took down coming back, until
    /// `deadline` (None: nothing to probe, it was not stopped): the store writing again, each
    /// worker running again, each server READY again; back when the last of them is.
    fn back_probe(
        &self,
        index: usize,
        since_ms: i64,
        deadline: tokio::time::Instant,
    ) -> Option<JoinHandle<Option<i64>>> {
        let fault = &self.log.faults[index];
        if !fault.kind.probed() {
            return None;
        }
        if fault.kind == FaultKind::StoreRestart {
            return Some(tokio::spawn(
                self.store_probe.clone().written_again(deadline),
            ));
        }
        let mut probes: Vec<futures::future::BoxFuture<'static, Option<i64>>> = Vec::new();
        for member in std::iter::once(&fault.member).chain(&fault.also_hit) {
            if self.store_probe.workers.contains(member) {
                let probe = self.store_probe.clone();
                probes.push(Box::pin(probe.running_again(
                    member.clone(),
                    since_ms,
                    deadline,
                )));
            } else if let Some(http) = self.http.get(member) {
                probes.push(Box::pin(ready_again(http.clone(), deadline)));
            }
        }
        if probes.is_empty() {
            return None;
        }
        Some(tokio::spawn(async move {
            let backs = futures::future::join_all(probes).await;
            backs
                .into_iter()
                .collect::<Option<Vec<i64>>>()?
                .into_iter()
                .max()
        }))
    }

    /// Collects the READY probes that have finished.
    pub(super) async fn collect_ready(&mut self) {
        let finished: Vec<usize> = self
            .ready
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(i, _)| *i)
            .collect();
        for index in finished {
            if let Some(handle) = self.ready.remove(&index) {
                self.log.faults[index].ready_at_ms = handle.await.ok().flatten();
            }
        }
    }

    /// At the load phase's end: lasting faults still open are ended (the run may have been
    /// shortened), READY probes still running get a last look, then are given up.
    pub(super) async fn finish(&mut self, launcher: &mut dyn Launcher) {
        for (index, _) in std::mem::take(&mut self.open) {
            let fault = &mut self.log.faults[index];
            match launcher.end_fault(&fault.member).await {
                Ok(ended) => fault.dropped_packets = ended.dropped_packets,
                Err(e) => fault.error = Some(e.to_string()),
            }
            fault.ended_at_ms = Some(stress_common::now_ms());
        }
        self.collect_ready().await;
        // A probe still running may be one poll from seeing its server READY: a run that fails
        // fast on the first answers after a restart ends within that poll. A last short wait,
        // so the timeline says when the server was back.
        let last_look = tokio::time::Instant::now() + READY_PROBE * 5;
        for (index, mut handle) in std::mem::take(&mut self.ready) {
            match tokio::time::timeout_at(last_look, &mut handle).await {
                Ok(ready) => self.log.faults[index].ready_at_ms = ready.ok().flatten(),
                Err(_) => handle.abort(),
            }
        }
    }

    /// The failures each injected fault owns while the run goes: from its injection until its
    /// clients recovered (not judged yet: without end, so a slow recovery fails as the fault's,
    /// not as failures of their own).
    pub(super) fn live_windows(&self) -> Vec<InjectedWindow> {
        self.log
            .faults
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let mut w = f.live_window()?;
                w.to_ms = self.judged.get(&i).copied().unwrap_or(i64::MAX);
                Some(w)
            })
            .collect()
    }

    /// Judges the faults past their allowed recovery (and the grace for the outages to come
    /// in) against the outages read so far: the first not recovered in time fails the run now
    /// (its server, and why); a recovered one's window closes at its recovery. The end judges
    /// every fault again with all the outages.
    pub(super) fn judge_due(&mut self, now_ms: i64) -> Option<(String, String)> {
        let outages = &self.outages;
        for (index, fault) in self.log.faults.iter().enumerate() {
            if self.judged.contains_key(&index)
                || fault
                    .deadline_ms()
                    .is_none_or(|d| now_ms < d + self.grace_ms)
            {
                continue;
            }
            let outcome = crate::judge::faults::judge(std::slice::from_ref(fault), outages)
                .pop()
                .expect("one fault, one outcome");
            match outcome.recovered_at_ms {
                Some(at) if outcome.ok => {
                    self.judged.insert(index, at);
                }
                _ => return Some((outcome.target.clone(), outcome.reason())),
            }
        }
        None
    }

    /// Whether a fault is past its injection and not judged yet (its outages are worth reading).
    pub(super) fn awaiting_judgement(&self, now_ms: i64) -> bool {
        self.log.faults.iter().enumerate().any(|(i, f)| {
            !self.judged.contains_key(&i)
                && f.deadline_ms().is_some_and(|d| now_ms >= d + self.grace_ms)
        })
    }

    /// Each client of a faulted server, with the end of the fault's allowed recovery.
    pub(super) fn excused_clients(&self) -> Vec<(String, i64)> {
        self.log
            .faults
            .iter()
            .filter_map(|f| Some((f, f.deadline_ms()?)))
            .flat_map(|(f, until)| f.clients.iter().map(move |c| (c.clone(), until)))
            .collect()
    }

    /// Each worker a fault evicted (its pod applied again), with the end of the fault's allowed
    /// recovery: its silence until then is the fault's.
    pub(super) fn replaced_workers(&self) -> Vec<(String, i64)> {
        self.log
            .faults
            .iter()
            .filter_map(|f| Some((f, f.deadline_ms()?)))
            .flat_map(|(f, until)| {
                std::iter::once(&f.member)
                    .chain(&f.also_hit)
                    .filter(|m| self.store_probe.workers.contains(m))
                    .map(move |m| (m.clone(), until))
            })
            .collect()
    }

    pub(super) fn log(&self) -> &FaultLog {
        &self.log
    }

    /// Saves the log (after every step: a run that dies keeps what it injected).
    pub(super) async fn save(&self, store: &Store, run_id: &stress_common::contract::RunId) {
        if let Err(e) = bounded(STORE_CALL_LIMIT, store.save_document(run_id, "", &self.log)).await
        {
            tracing::warn!("fault log not saved: {e}");
        }
    }
}

/// What an injection's log line adds: the other members it took down, and what it kept.
fn hit_line(injected: &crate::launcher::Injected) -> String {
    let mut line = String::new();
    if !injected.also_hit.is_empty() {
        line += &format!("; also evicted: {}", injected.also_hit.join(", "));
    }
    if !injected.kept.is_empty() {
        line += &format!("; kept: {}", injected.kept.join("; "));
    }
    line
}

/// Before anything starts: the launcher can start every member as its template says, every
/// fault fits the load phase (a `--duration` may shorten it) and the launcher can inject its
/// kind; else bad input naming each field that is the reason.
pub(super) fn check_launch(
    matrix: &crate::matrix::Matrix,
    plan: &RunPlan,
    launcher: &dyn Launcher,
) -> Result<(), super::DriverError> {
    let mut problems = crate::launcher::unlaunchable(matrix, plan, launcher);
    problems.extend(unfit(matrix, plan));
    problems.extend(uninjectable(matrix, |f| launcher.can_inject(f)));
    as_result(problems)
}

/// Every fault written with `at` fits the run's load phase (a `--duration` may shorten it); else
/// bad input naming the fault's field.
pub(super) fn check_fit(
    matrix: &crate::matrix::Matrix,
    plan: &RunPlan,
) -> Result<(), super::DriverError> {
    as_result(unfit(matrix, plan))
}

/// What [`check_fit`] refuses, one line each.
fn unfit(matrix: &crate::matrix::Matrix, plan: &RunPlan) -> Vec<String> {
    plan.unplanned_faults(matrix)
        .into_iter()
        .map(|index| {
            let f = &matrix.faults[index];
            format!(
                "{}: fault {} and its recovery ({}) do not fit the load phase of {}",
                matrix.locate_fault(index, "at"),
                f.name,
                crate::matrix::faults::human(f.at.unwrap_or_default() + f.window()),
                crate::matrix::faults::human(plan.duration)
            )
        })
        .collect()
}

fn as_result(problems: Vec<String>) -> Result<(), super::DriverError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(super::DriverError::Config(problems.join("\n")))
    }
}
