//! The verdict on each fault the run injected (pure): when each client of the faulted server had
//! a good answer again, against the recovery the matrix allows, and what the fault cost (tests
//! failed, sequences cut). The driver logs what it did ([`FaultLog`]); the workers record
//! their outages ([`Outage`]: stretches without a good answer from one server).

use serde::{Deserialize, Serialize};
use stress_common::status::Outage;

use super::classify::InjectedWindow;
use crate::matrix::faults::FaultKind;

/// A fault as the driver injected it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectedFault {
    /// The fault's name (`#N` for the Nth of a repeated fault).
    pub name: String,
    pub kind: FaultKind,
    /// The server member it hit.
    pub member: String,
    /// The server's addresses (as the clients' failure records and outages name it).
    pub addresses: Vec<String>,
    /// The clients that talk to it.
    pub clients: Vec<String>,
    /// The other members whose pods it evicted (a drain: every pod of the run on the node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_hit: Vec<String>,
    /// Why a pod it would have evicted was kept (its disruption budget), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    pub planned_at_ms: i64,
    /// None: the launcher could not inject it (`error` says why).
    pub injected_at_ms: Option<i64>,
    /// When a lasting fault (pause, network) ended.
    pub ended_at_ms: Option<i64>,
    /// When a killed or restarted server answered READY again.
    pub ready_at_ms: Option<i64>,
    /// Packets a network fault's loss dropped, as the packet filter counted them.
    pub dropped_packets: Option<u64>,
    pub duration_ms: i64,
    pub recover_within_ms: i64,
    pub error: Option<String>,
    /// Why the cluster refused it on purpose (a PodDisruptionBudget refused an eviction):
    /// neither injected nor failed.
    pub blocked: Option<String>,
}

impl InjectedFault {
    /// When its recovery counts from: the injection for a kill or restart (the server's
    /// start-up is part of the recovery), the fault's end for a pause or network fault.
    pub fn recovery_from_ms(&self) -> Option<i64> {
        let injected = self.injected_at_ms?;
        Some(if self.kind.lasts() {
            self.ended_at_ms.unwrap_or(injected + self.duration_ms)
        } else {
            injected
        })
    }

    /// The end of the recovery it is allowed.
    pub fn deadline_ms(&self) -> Option<i64> {
        Some(self.recovery_from_ms()? + self.recover_within_ms)
    }

    /// When what it hit was back: as its probe saw it (a server READY, a worker running again)
    /// after what stopped or evicted it, else the fault's end (None: not yet).
    pub fn back_ms(&self) -> Option<i64> {
        back_ms(self.kind, self.ready_at_ms, self.ended_at_ms)
    }

    /// Whether `member`'s process was replaced by this fault (its pod evicted and applied
    /// again): an outage its old process left open never closes.
    fn replaced(&self, member: &str) -> bool {
        self.kind.targets_workers()
            && (self.member == member || self.also_hit.iter().any(|m| m == member))
    }

    /// The failures it owns while the run goes: up to the end of its allowed recovery.
    pub fn live_window(&self) -> Option<InjectedWindow> {
        self.window_to(self.deadline_ms()?)
    }

    /// The failures it owns from its injection to `to_ms` (None: it was not injected).
    fn window_to(&self, to_ms: i64) -> Option<InjectedWindow> {
        Some(InjectedWindow {
            name: self.name.clone(),
            addresses: self.addresses.clone(),
            from_ms: self.injected_at_ms?,
            to_ms,
            back_ms: self.back_ms().unwrap_or(i64::MAX),
        })
    }
}

/// What the driver did, in order (a store document: saved after every step, so a run that
/// dies keeps what it injected).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultLog {
    pub faults: Vec<InjectedFault>,
}

impl stress_common::store::Document for FaultLog {
    const KIND: &'static str = "faults";
}

/// One client of a faulted server: what it saw.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecovery {
    pub member: String,
    /// Its first failed test after the injection.
    pub first_error_ms: Option<i64>,
    /// Its first good answer from the server after the recovery point (None: none came).
    pub first_good_ms: Option<i64>,
    /// Tests it lost to the fault (failed between the injection and its recovery).
    pub lost_requests: u64,
    pub sequences_cut: u64,
    /// True when it saw no outage at all: its answers went on within its stall threshold.
    pub unaffected: bool,
}

/// One fault, judged (report.json `faults[]`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultOutcome {
    pub name: String,
    pub kind: FaultKind,
    /// The member it hit (a server or worker), or `store` or `api-server`.
    pub target: String,
    pub injected_at_ms: Option<i64>,
    pub ended_at_ms: Option<i64>,
    pub ready_at_ms: Option<i64>,
    /// The first failed test of any client after the injection.
    pub first_error_ms: Option<i64>,
    /// When the last of its clients had a good answer again (None: not recovered).
    pub recovered_at_ms: Option<i64>,
    /// From the recovery point (the injection, or a lasting fault's end) to the recovery.
    pub recovery_s: Option<f64>,
    pub recover_within_s: f64,
    /// Tests its clients lost to it (each failed test lost at least its request).
    pub lost_requests: u64,
    pub sequences_cut: u64,
    /// Packets a network fault's loss dropped (the packet filter's count).
    pub dropped_packets: Option<u64>,
    pub clients: Vec<ClientRecovery>,
    /// Recovered within `recover_within`.
    pub ok: bool,
    /// False for a fault the run stopped before (it failed earlier): neither ok nor failed.
    #[serde(default = "yes")]
    pub reached: bool,
    /// The verdict in words.
    pub verdict: String,
}

fn yes() -> bool {
    true
}

fn secs(ms: i64) -> String {
    crate::matrix::faults::human(std::time::Duration::from_millis(ms.max(0) as u64))
}

/// When what a fault of `kind` hit was back: its probe's time (`ready_at_ms`) when it stopped
/// or evicted something, else the fault's end.
fn back_ms(kind: FaultKind, ready_at_ms: Option<i64>, ended_at_ms: Option<i64>) -> Option<i64> {
    if kind.probed() {
        ready_at_ms
    } else {
        ended_at_ms
    }
}

impl FaultOutcome {
    /// When what it hit was back, as [`InjectedFault::back_ms`] says: its probe's time for a
    /// fault that stopped or evicted something, else the fault's end.
    pub fn back_ms(&self) -> Option<i64> {
        back_ms(self.kind, self.ready_at_ms, self.ended_at_ms)
    }

    /// Why it fails the run, in one line: `fault NAME (KIND of SERVER): VERDICT`.
    pub fn reason(&self) -> String {
        format!(
            "fault {} ({} of {}): {}",
            self.name,
            self.kind.as_str(),
            self.target,
            self.verdict
        )
    }
}

/// Judges every fault against the workers' outages (`(client member, outage)`).
pub fn judge(faults: &[InjectedFault], outages: &[(String, Outage)]) -> Vec<FaultOutcome> {
    faults.iter().map(|f| judge_one(f, outages)).collect()
}

fn judge_one(f: &InjectedFault, outages: &[(String, Outage)]) -> FaultOutcome {
    let mut outcome = unjudged(f);
    let (Some(injected), Some(from)) = (f.injected_at_ms, f.recovery_from_ms()) else {
        match (&f.error, &f.blocked) {
            (Some(why), _) => outcome.verdict = format!("not injected: {why}"),
            (None, Some(why)) => {
                outcome.reached = false;
                outcome.verdict = format!("blocked: {why}");
            }
            (None, None) => {
                outcome.reached = false;
                outcome.verdict = "not reached: the run stopped before it".into();
            }
        }
        return outcome;
    };
    // Before the server is back, a good answer can only be one already on its way at the
    // injection: the failures after it still belong to the fault.
    let back = f.ready_at_ms.unwrap_or(from).max(from);
    let points = RecoveryPoints {
        injected,
        from,
        back,
    };
    for client in &f.clients {
        let recovery = client_recovery(f, outages, client, &points);
        outcome.clients.push(recovery);
    }
    outcome.first_error_ms = outcome
        .clients
        .iter()
        .filter_map(|c| c.first_error_ms)
        .min();
    outcome.lost_requests = outcome.clients.iter().map(|c| c.lost_requests).sum();
    outcome.sequences_cut = outcome.clients.iter().map(|c| c.sequences_cut).sum();
    let server_back = if f.kind.probed() {
        f.ready_at_ms
    } else {
        Some(from)
    };
    // Not before what it hit was back: a client whose new process never saw the outage
    // recovered no earlier than that process ran.
    outcome.recovered_at_ms = match server_back {
        None => None,
        Some(back) => outcome
            .clients
            .iter()
            .map(|c| c.first_good_ms)
            .collect::<Option<Vec<i64>>>()
            .map(|t| t.into_iter().fold(back, i64::max)),
    };
    judge_recovery(f, &mut outcome, from, server_back);
    if !f.also_hit.is_empty() {
        outcome.verdict += &format!("; it also evicted {}", f.also_hit.join(", "));
    }
    if !f.kept.is_empty() {
        outcome.verdict += &format!("; kept: {}", f.kept.join("; "));
    }
    outcome
}

/// `f`'s outcome before it is judged: what the driver logged, nothing measured yet.
fn unjudged(f: &InjectedFault) -> FaultOutcome {
    FaultOutcome {
        name: f.name.clone(),
        kind: f.kind,
        target: f.member.clone(),
        injected_at_ms: f.injected_at_ms,
        ended_at_ms: f.ended_at_ms,
        ready_at_ms: f.ready_at_ms,
        first_error_ms: None,
        recovered_at_ms: None,
        recovery_s: None,
        recover_within_s: f.recover_within_ms as f64 / 1000.0,
        lost_requests: 0,
        sequences_cut: 0,
        dropped_packets: f.dropped_packets,
        clients: Vec::new(),
        ok: false,
        reached: true,
        verdict: String::new(),
    }
}

/// The instants (ms) an injected fault's clients are judged from.
struct RecoveryPoints {
    /// The injection.
    injected: i64,
    /// Where the recovery counts from ([`InjectedFault::recovery_from_ms`]).
    from: i64,
    /// When the server was back (READY again), not before `from`.
    back: i64,
}

/// How `client` of the faulted server came through `f`, from its outages of that server.
fn client_recovery(
    f: &InjectedFault,
    outages: &[(String, Outage)],
    client: &str,
    points: &RecoveryPoints,
) -> ClientRecovery {
    let RecoveryPoints {
        injected,
        from,
        back,
    } = *points;
    let mine: Vec<&Outage> = outages
        .iter()
        .filter(|(m, o)| m == client && f.addresses.contains(&o.server))
        .map(|(_, o)| o)
        .collect();
    // The outages the fault caused: open at the recovery point, or begun by a failure
    // after the injection (a response already on its way may arrive after a kill).
    let caused: Vec<&&Outage> = mine
        .iter()
        .filter(|o| o.first_ok_ms.is_none_or(|t| t >= from))
        // One its process left open when the fault replaced it: its new process reports its own.
        .filter(|o| !(o.first_ok_ms.is_none() && f.replaced(client) && o.last_ok_ms < from))
        .filter(|o| {
            o.last_ok_ms <= from
                || (o.last_ok_ms <= back && o.first_failure_ms.is_some_and(|t| t >= injected))
        })
        .collect();
    let unaffected = caused.is_empty();
    // The end of its last outage the fault caused, and not before the server is back: a
    // server stopping gracefully (`restart`) still answers some tests between failures,
    // and a good answer from the old process is not a recovery.
    let first_good_ms = if unaffected {
        Some(from)
    } else if caused.iter().any(|o| o.first_ok_ms.is_none()) {
        None
    } else {
        caused
            .iter()
            .filter_map(|o| o.first_ok_ms)
            .max()
            .map(|t| t.max(back))
    };
    let until = first_good_ms.unwrap_or(i64::MAX);
    let lost: Vec<&&Outage> = mine
        .iter()
        .filter(|o| o.last_ok_ms <= until && o.first_ok_ms.is_none_or(|t| t >= injected))
        .collect();
    ClientRecovery {
        member: client.to_string(),
        first_error_ms: lost
            .iter()
            .filter_map(|o| o.first_failure_ms)
            .filter(|t| *t >= injected)
            .min(),
        first_good_ms,
        lost_requests: lost.iter().map(|o| o.failed_tests).sum(),
        sequences_cut: lost.iter().map(|o| o.failed_sequences).sum(),
        unaffected,
    }
}

/// Judges `outcome`'s recovery, its clients judged: how long it took against what `f` allows,
/// and the verdict in words. `server_back`: when the server was back (None: it was not READY
/// again).
fn judge_recovery(
    f: &InjectedFault,
    outcome: &mut FaultOutcome,
    from: i64,
    server_back: Option<i64>,
) {
    let allowed = secs(f.recover_within_ms);
    outcome.verdict = match outcome.recovered_at_ms {
        Some(at) => {
            let took = (at - from).max(0);
            let took_s = took as f64 / 1000.0;
            outcome.recovery_s = Some(took_s);
            outcome.ok = took <= f.recover_within_ms;
            let counted = if f.kind.lasts() {
                "after the fault ended"
            } else {
                "after the injection"
            };
            if outcome.ok {
                format!("recovered {took_s:.1} s {counted} (allowed {allowed})")
            } else {
                format!("recovered {took_s:.1} s {counted}: more than the {allowed} allowed")
            }
        }
        None => {
            let waiting: Vec<&str> = outcome
                .clients
                .iter()
                .filter(|c| c.first_good_ms.is_none())
                .map(|c| c.member.as_str())
                .collect();
            if server_back.is_none() {
                // A server answers READY; a worker or the store has no address: it runs.
                let state = if f.addresses.is_empty() {
                    "running"
                } else {
                    "READY"
                };
                format!(
                    "not recovered within {allowed}: {} was not {state} again",
                    f.member
                )
            } else {
                format!(
                    "not recovered within {allowed}: no good answer again for {}",
                    waiting.join(", ")
                )
            }
        }
    };
}

/// The failures each fault owns, once judged: from its injection to its clients' recovery
/// (not recovered: to the run's end, the fault failing the run itself).
pub fn final_windows(
    faults: &[InjectedFault],
    outcomes: &[FaultOutcome],
    run_end_ms: i64,
) -> Vec<InjectedWindow> {
    faults
        .iter()
        .zip(outcomes)
        .filter_map(|(f, o)| f.window_to(o.recovered_at_ms.unwrap_or(run_end_ms)))
        .collect()
}

/// The first fault that fails the run, with why.
pub fn first_failed(outcomes: &[FaultOutcome]) -> Option<&FaultOutcome> {
    outcomes.iter().find(|o| o.reached && !o.ok)
}

/// Each member's last start by an injected fault (`kill` or `restart`): when (ms) it was
/// injected. Its memory is judged from there on: a new process warms up again.
pub fn restarts(log: &[InjectedFault]) -> std::collections::BTreeMap<String, i64> {
    let mut last = std::collections::BTreeMap::new();
    for f in log {
        if let (FaultKind::Kill | FaultKind::Restart | FaultKind::Evict, Some(at)) =
            (f.kind, f.injected_at_ms)
        {
            let t = last.entry(f.member.clone()).or_insert(at);
            *t = (*t).max(at);
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "127.0.0.1:8001";

    fn kill(injected_at_ms: i64, ready_at_ms: Option<i64>, within_ms: i64) -> InjectedFault {
        InjectedFault {
            name: "kill-triton".into(),
            kind: FaultKind::Kill,
            member: "triton-0".into(),
            addresses: vec![SERVER.into(), "127.0.0.1:8000".into()],
            clients: vec!["c-0".into(), "c-1".into()],
            also_hit: Vec::new(),
            kept: Vec::new(),
            planned_at_ms: injected_at_ms,
            injected_at_ms: Some(injected_at_ms),
            ended_at_ms: None,
            ready_at_ms,
            dropped_packets: None,
            duration_ms: 0,
            recover_within_ms: within_ms,
            error: None,
            blocked: None,
        }
    }

    fn outage(
        member: &str,
        last_ok: i64,
        first_failure: Option<i64>,
        first_ok: Option<i64>,
        failed: u64,
    ) -> (String, Outage) {
        (
            member.into(),
            Outage {
                server: SERVER.into(),
                last_ok_ms: last_ok,
                first_failure_ms: first_failure,
                first_ok_ms: first_ok,
                failed_tests: failed,
                failed_sequences: failed / 2,
            },
        )
    }

    #[test]
    fn a_kill_recovers_when_the_last_client_has_a_good_answer_again() {
        let outages = [
            outage("c-0", 19_990, Some(20_010), Some(27_000), 12),
            // A response already on its way arrived after the kill; then the failures.
            outage("c-1", 20_005, Some(20_020), Some(28_500), 8),
            // Before the fault, and on another server: not the fault's.
            outage("c-0", 5_000, Some(5_100), Some(5_200), 1),
        ];
        let mut other = outage("c-1", 19_000, Some(21_000), Some(40_000), 3);
        other.1.server = "127.0.0.1:9001".into();
        let mut all = outages.to_vec();
        all.push(other);
        let o = &judge(&[kill(20_000, Some(26_500), 30_000)], &all)[0];
        assert!(o.ok, "{o:?}");
        assert_eq!(o.recovered_at_ms, Some(28_500));
        assert_eq!(o.recovery_s, Some(8.5));
        assert_eq!(o.first_error_ms, Some(20_010));
        assert_eq!(o.lost_requests, 20);
        assert_eq!(o.sequences_cut, 10);
        assert_eq!(
            o.verdict,
            "recovered 8.5 s after the injection (allowed 30s)"
        );
        // The same fault allowed 1 ms fails, naming how long it took.
        let o = &judge(&[kill(20_000, Some(26_500), 1)], &all)[0];
        assert!(!o.ok);
        assert_eq!(
            o.verdict,
            "recovered 8.5 s after the injection: more than the 1ms allowed"
        );
    }

    /// A server stopping gracefully answers some tests between its failures: the client's
    /// recovery is the end of the last outage the fault caused (begun before the server was
    /// READY again), not the first good answer of the old process.
    #[test]
    fn a_restart_recovers_after_the_new_server_answers_not_when_the_old_one_still_did() {
        let mut restart = kill(20_000, Some(34_000), 35_000);
        restart.kind = FaultKind::Restart;
        restart.clients = vec!["c-0".into()];
        let outages = [
            // Refused at once, then one good answer from a model not yet unloaded ...
            outage("c-0", 19_990, Some(20_005), Some(20_020), 2),
            // ... then "Server is stopping" until the new server answers.
            outage("c-0", 20_020, Some(20_400), Some(34_300), 9),
            // After the recovery: not the fault's.
            outage("c-0", 40_000, Some(40_100), Some(40_200), 1),
        ];
        let o = &judge(&[restart.clone()], &outages)[0];
        assert!(o.ok, "{o:?}");
        assert_eq!(o.recovered_at_ms, Some(34_300));
        assert_eq!(o.lost_requests, 11);
        // A client whose outages all ended while the old server still answered recovers when
        // the new one is READY, not before.
        let o = &judge(&[restart], &outages[..1])[0];
        assert_eq!(o.recovered_at_ms, Some(34_000), "{o:?}");
    }

    #[test]
    fn a_client_still_out_at_the_end_or_a_server_never_ready_is_not_recovered() {
        let outages = [
            outage("c-0", 19_990, Some(20_010), Some(27_000), 2),
            outage("c-1", 19_990, Some(20_010), None, 40),
        ];
        let o = &judge(&[kill(20_000, Some(26_000), 60_000)], &outages)[0];
        assert!(!o.ok);
        assert_eq!(o.recovered_at_ms, None);
        assert!(o.verdict.ends_with("for c-1"), "{}", o.verdict);
        let o = &judge(&[kill(20_000, None, 60_000)], &outages[..1])[0];
        assert!(!o.ok);
        assert_eq!(
            o.verdict,
            "not recovered within 1m: triton-0 was not READY again"
        );
    }

    #[test]
    fn a_pause_counts_from_its_end_and_a_client_that_saw_nothing_recovered_then() {
        let mut pause = kill(20_000, None, 20_000);
        pause.kind = FaultKind::Pause;
        pause.duration_ms = 5_000;
        pause.ended_at_ms = Some(25_010);
        let outages = [outage("c-0", 19_995, None, Some(25_030), 0)];
        let o = &judge(std::slice::from_ref(&pause), &outages)[0];
        assert!(o.ok, "{o:?}");
        assert_eq!(o.recovered_at_ms, Some(25_030));
        assert_eq!(o.recovery_s, Some(0.02));
        assert_eq!(o.lost_requests, 0);
        assert!(o.clients[1].unaffected);
        assert_eq!(o.clients[1].first_good_ms, Some(25_010));
        assert_eq!(o.first_error_ms, None);
        let w = final_windows(
            std::slice::from_ref(&pause),
            std::slice::from_ref(o),
            99_000,
        );
        assert_eq!((w[0].from_ms, w[0].to_ms), (20_000, 25_030));
    }

    #[test]
    fn a_fault_that_could_not_be_injected_fails_saying_why() {
        let mut f = kill(20_000, None, 1000);
        f.injected_at_ms = None;
        f.error = Some("not a started server".into());
        let o = &judge(&[f], &[])[0];
        assert!(!o.ok);
        assert_eq!(o.verdict, "not injected: not a started server");
        assert_eq!(first_failed(std::slice::from_ref(o)), Some(o));
        // One the run stopped before (it failed earlier) is neither.
        let mut later = kill(90_000, None, 1000);
        later.injected_at_ms = None;
        let o = &judge(&[later], &[])[0];
        assert!(!o.reached && !o.ok);
        assert_eq!(o.verdict, "not reached: the run stopped before it");
        assert_eq!(first_failed(std::slice::from_ref(o)), None);
    }

    #[test]
    fn an_eviction_a_disruption_budget_refused_is_blocked_not_failed() {
        let mut f = kill(20_000, None, 1000);
        f.kind = FaultKind::Evict;
        f.injected_at_ms = None;
        f.blocked = Some("PodDisruptionBudget refused the eviction".into());
        let o = &judge(&[f], &[])[0];
        assert!(!o.reached && !o.ok);
        assert_eq!(
            o.verdict,
            "blocked: PodDisruptionBudget refused the eviction"
        );
        assert_eq!(first_failed(std::slice::from_ref(o)), None);
    }

    #[test]
    fn a_drain_recovers_from_its_end_once_every_pod_it_evicted_is_back() {
        // triton-0's node drained 20-40 s; it also evicted c-0, whose old process left its
        // outage open; c-1 ran elsewhere and had a good answer again at 51 s. Everything the
        // drain evicted was back (READY, running) at 48 s.
        let mut f = kill(20_000, Some(48_000), 30_000);
        (f.kind, f.duration_ms, f.ended_at_ms) = (FaultKind::Drain, 20_000, Some(40_000));
        f.also_hit = vec!["c-0".into()];
        let outages = [
            outage("c-0", 19_990, Some(20_100), None, 4),
            outage("c-1", 19_990, Some(20_200), Some(51_000), 30),
        ];
        let o = &judge(std::slice::from_ref(&f), &outages)[0];
        assert!(o.ok, "{o:#?}");
        assert_eq!(o.recovered_at_ms, Some(51_000));
        assert_eq!(o.recovery_s, Some(11.0), "counted from the uncordon");
        assert_eq!(o.lost_requests, 34);
        assert_eq!(
            o.verdict,
            "recovered 11.0 s after the fault ended (allowed 30s); it also evicted c-0"
        );
        // Its new process saw no outage: back when the drain's pods were (48 s), not at 40 s.
        let alone = &judge(std::slice::from_ref(&f), &outages[..1])[0];
        assert_eq!(alone.recovered_at_ms, Some(48_000), "{alone:#?}");
        // Not replaced (a kill of the server): c-0's open outage is still open.
        let mut kill = f.clone();
        (kill.kind, kill.also_hit) = (FaultKind::Kill, Vec::new());
        let o = &judge(&[kill], &outages)[0];
        assert!(!o.ok && o.recovered_at_ms.is_none(), "{o:#?}");
    }
}
