//! The fail-fast rules as a pure state machine. The driver's poll loop feeds it what it observed
//! (member exits, FAILURE events, heartbeats, QPS samples, store errors, the time) and acts on
//! the first [`Cause`] it returns; whether a client's failure is really its server's is decided
//! by [`attribute`] from the liveness probes the loop ran. Nothing here does I/O, so every rule is
//! unit-tested on its own.
//!
//! Rules, checked in this order every poll:
//! 1. a member (server or client) ended before the end of the run; an external server (one the
//!    driver did not launch, so it cannot see it end) failed its liveness probe at
//!    `server_probe_failures` consecutive polls;
//! 2. a member recorded a FAILURE event;
//! 3. a client sent no new heartbeat for longer than the limit, by the driver's clock from
//!    when it read the last new one (or none arrived within the start-up grace, counted from
//!    when its process or pod actually runs);
//! 4. a server held a client's calls and ended none of them for the zero-QPS window (the
//!    server is blamed: it took the calls, so the worker did send), then a client reported QPS 0
//!    for `zero_qps_polls` consecutive samples (0 turns both off);
//! 5. the status store could not be read for longer than the outage limit. While it cannot be
//!    read, rules 3 and 4 pause and afterwards count again from when it came back: a worker is
//!    never blamed for the store's outage.

use crate::launcher::{CpuUse, MemberExit};
use crate::plan::ServerEndpoint;
use crate::plan::fail_fast::Rules;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use stress_common::contract::MemberName;
use stress_common::qps::QpsSample;
use stress_common::status::EventKind;
use stress_common::store::{EventRow, WithinError};
use stress_common::tritonserver::ProbeError;

/// Why the run fails: the first rule that fired.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    /// A member ended before the run did (rule 1).
    Exited(MemberExit),
    /// An external server failed this many liveness probes in a row (rule 1); `error` is the
    /// last probe's.
    ServerUnreachable {
        member: String,
        failures: u32,
        error: ProbeError,
    },
    /// A member recorded a FAILURE event itself (rule 2).
    Reported { member: String, details: String },
    /// A failed test the driver judged to fail the run (rule 2: not excused by a known issue,
    /// an injected fault or its scenario), or a known issue beyond its rate.
    FailedTest { member: String, reason: String },
    /// No new heartbeat for longer than the limit (rule 3); `last_ms`: when the driver saw
    /// the last new one, by its own clock (None: none since launch).
    StaleHeartbeat {
        member: String,
        last_ms: Option<i64>,
        now_ms: i64,
        limit: Duration,
    },
    /// A server held calls of `member` and ended none of them for `quiet` (rule 4); `server`
    /// is its address as the worker knows it.
    Unanswered {
        member: String,
        server: String,
        calls: u64,
        quiet: Duration,
    },
    /// QPS 0 for this many consecutive samples (rule 4), with no server holding calls long.
    ZeroQps { member: String, polls: u32 },
    /// The store could not be read since `since_ms` (rule 5).
    StoreUnavailable {
        since_ms: i64,
        now_ms: i64,
        error: String,
    },
}

/// Who the store outage is blamed on in events and the report.
pub const STORE_MEMBER: &str = "store";

impl Cause {
    /// The member the rule fired for.
    pub fn member(&self) -> &str {
        match self {
            Cause::Exited(e) => &e.member_id,
            Cause::Reported { member, .. }
            | Cause::FailedTest { member, .. }
            | Cause::ServerUnreachable { member, .. }
            | Cause::StaleHeartbeat { member, .. }
            | Cause::Unanswered { member, .. }
            | Cause::ZeroQps { member, .. } => member,
            Cause::StoreUnavailable { .. } => STORE_MEMBER,
        }
    }

    /// The reason, as the report and the FAILURE event say it.
    pub fn reason(&self) -> String {
        match self {
            Cause::Exited(e) => format!("{} before the end of the run", e.describe()),
            Cause::Reported { details, .. } => details.clone(),
            Cause::FailedTest { reason, .. } => reason.clone(),
            Cause::ServerUnreachable {
                failures, error, ..
            } => format!("external server failed {failures} liveness probes in a row: {error}"),
            Cause::StaleHeartbeat {
                last_ms: Some(at),
                now_ms,
                limit,
                ..
            } => format!(
                "no heartbeat for {:.1} s (limit {:?})",
                (now_ms - at) as f64 / 1000.0,
                limit
            ),
            Cause::StaleHeartbeat {
                last_ms: None,
                limit,
                ..
            } => format!("no heartbeat within {limit:?} of launch"),
            Cause::Unanswered {
                server,
                calls,
                quiet,
                ..
            } => format!(
                "{calls} {} to {server} unanswered: none of its calls ended for {:.1} s",
                if *calls == 1 { "call" } else { "calls" },
                quiet.as_secs_f64()
            ),
            Cause::ZeroQps { polls, .. } => format!("QPS 0 for {polls} consecutive polls"),
            Cause::StoreUnavailable {
                since_ms,
                now_ms,
                error,
            } => format!(
                "status store unreadable for {:.1} s: {error}",
                (now_ms - since_ms) as f64 / 1000.0
            ),
        }
    }

    /// Whether the member already recorded this failure (so the driver does not record it
    /// again, unless the blame moves to a server).
    pub fn recorded_by_member(&self) -> bool {
        matches!(self, Cause::Reported { .. })
    }
}

/// The failure as the run records it: who is blamed, why, and whether the driver must record
/// a FAILURE event for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blame {
    pub member: String,
    pub reason: String,
    pub record: bool,
}

/// A client's failure is often its server's: the first of its target servers whose liveness
/// probe failed takes the blame, with the client's view in the reason. `probes` are the results
/// for the failed member's targets, in order (empty for a server or when none was probed).
/// Calls left unanswered are the server's that held them (`holder`: the member at the
/// address the cause names, when the driver knows it), whatever its liveness probe says: the
/// worker did send, and a server that answers its probes but not inference is hung inside.
pub fn attribute(
    cause: &Cause,
    probes: &[(MemberName, Result<(), ProbeError>)],
    holder: Option<&MemberName>,
) -> Blame {
    let member = cause.member().to_string();
    let reason = cause.reason();
    if let Some((server, Err(why))) = probes.iter().find(|(_, r)| r.is_err()) {
        return Blame {
            member: server.to_string(),
            reason: format!("{why}; {member} reported: {reason}"),
            record: true,
        };
    }
    if let (Cause::Unanswered { .. }, Some(server)) = (cause, holder) {
        let live = if probes.iter().any(|(s, r)| s == server && r.is_ok()) {
            " while its liveness probe answered: its inference hangs (a stuck backend or a deadlock), not the process"
        } else {
            ""
        };
        return Blame {
            member: server.to_string(),
            reason: format!("{member} reported: {reason}{live}"),
            record: true,
        };
    }
    Blame {
        member,
        reason,
        record: !cause.recorded_by_member(),
    }
}

/// The target server at `address` (as a worker named it: its gRPC or HTTP address), or the
/// only target when none matches (an address the worker reached through a proxy).
pub fn server_at<'t>(
    address: &str,
    targets: &'t [MemberName],
    endpoints: &BTreeMap<String, ServerEndpoint>,
) -> Option<&'t MemberName> {
    targets
        .iter()
        .find(|t| {
            endpoints
                .get(t.as_str())
                .is_some_and(|ep| ep.grpc == address || ep.http == address)
        })
        .or(match targets {
            [only] => Some(only),
            _ => None,
        })
}

/// Calls held unanswered, as the holder's own /metrics count them: its requests pending per
/// model, added to the blame when there are any (evidence from the server's side that the
/// calls reached it). None pending says nothing either way (a server whose every instance is
/// stuck on one call counts none pending and is no less hung), so it adds nothing.
pub fn with_pending(
    mut blame: Blame,
    cause: &Cause,
    metrics: Option<&[stress_common::triton_metrics::ModelMetrics]>,
) -> Blame {
    let (Cause::Unanswered { .. }, Some(models)) = (cause, metrics) else {
        return blame;
    };
    let mut pending: Vec<(&str, f64)> = models
        .iter()
        .filter(|m| m.pending > 0.0)
        .map(|m| (m.model.as_str(), m.pending))
        .collect();
    if pending.is_empty() {
        return blame;
    }
    pending.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let total: f64 = pending.iter().map(|(_, n)| n).sum();
    let shown: Vec<String> = pending
        .iter()
        .take(3)
        .map(|(model, n)| format!("{model} {n}"))
        .collect();
    let more = if pending.len() > 3 { ", …" } else { "" };
    blame.reason.push_str(&format!(
        "; its own metrics count {total} requests pending ({}{more})",
        shown.join(", ")
    ));
    blame
}

/// What a client's process did while its heartbeats were missing: the CPU time it used over
/// a short look (`over`). The driver reads the store itself, so a busy process whose
/// heartbeats do not arrive is cut off from the store, and an idle or stopped one is hung.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    pub cpu: Duration,
    pub over: Duration,
    /// How long its CPU limit held it back over the look (None: no limit, or not known).
    pub throttled: Option<Duration>,
    /// Stopped (SIGSTOP or a tracer) at the end of the look.
    pub stopped: bool,
}

impl Activity {
    /// What the process did between two readings `over` apart.
    pub fn between(before: CpuUse, after: CpuUse, over: Duration) -> Self {
        Self {
            cpu: after.used.saturating_sub(before.used),
            over,
            throttled: after
                .throttled
                .zip(before.throttled)
                .map(|(a, b)| a.saturating_sub(b)),
            stopped: after.stopped,
        }
    }
}

/// CPU below this over the look is idle. A stopped or deadlocked process uses none; a worker
/// under light load (a request every 30 ms on one connection, as in the kube sweep test) used
/// 3-10 ms per half second, which /proc/PID/stat's 10 ms ticks read as 0 in CI (2026-12-06);
/// the readings are in ns now.
const BUSY_CPU: Duration = Duration::from_millis(1);

/// Throttled for at least this share (1/N) of the look: starved by its CPU limit.
const STARVED_SHARE: u32 = 4;

/// A stale heartbeat's blame with what the process was doing (None: unknown here):
/// the same member, told apart as stopped, starved by its CPU limit, hung, or cut off from
/// the store.
pub fn with_activity(mut blame: Blame, cause: &Cause, activity: Option<Activity>) -> Blame {
    let (Cause::StaleHeartbeat { .. }, Some(a)) = (cause, activity) else {
        return blame;
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let look = a.over.as_secs_f64();
    let what = if a.stopped {
        "; its process is stopped (state T: a SIGSTOP or a debugger): the worker is hung".into()
    } else if let Some(held) = a.throttled.filter(|&t| t >= a.over / STARVED_SHARE) {
        format!(
            "; its CPU limit held it back for {:.0} ms of {look:.1} s (it used {:.1} ms of CPU): the worker is starved by its limit (its template's resources.cpu), not hung",
            ms(held),
            ms(a.cpu)
        )
    } else if a.cpu >= BUSY_CPU {
        format!(
            "; its process runs and works ({:.1} ms of CPU in {look:.1} s): its reports do not reach the store, which the driver reads (writes between the worker and the store that fail or lag: its log says which; not a hung worker)",
            ms(a.cpu)
        )
    } else {
        format!(
            "; its process runs but is idle ({:.2} ms of CPU in {look:.1} s): the worker is hung (deadlocked, or waiting on something that does not answer)",
            ms(a.cpu)
        )
    };
    blame.reason.push_str(&what);
    blame
}

/// The members whose last event is among `events` (see
/// [`stress_common::status::FINAL_EVENT_PREFIX`]): their final counts are in the store.
pub fn final_reports(events: &[EventRow]) -> impl Iterator<Item = &str> {
    events
        .iter()
        .filter(|e| stress_common::status::is_final_event(e.kind, &e.details))
        .map(|e| e.member_id.as_str())
}

/// Whether [`attribute`] should probe the member's target servers: only a client's own failure
/// can be its server's.
pub fn needs_probe(cause: &Cause, clients: &BTreeSet<String>) -> bool {
    !matches!(cause, Cause::StoreUnavailable { .. }) && clients.contains(cause.member())
}

/// One poll's observations. A read that failed carries the store's error.
#[derive(Debug, Default)]
pub struct Poll {
    pub now_ms: i64,
    /// Members that ended since the last poll.
    pub exits: Vec<MemberExit>,
    /// Events after the last one seen.
    pub events: Option<Result<Vec<EventRow>, WithinError>>,
    pub heartbeats: Option<Result<Vec<(String, i64)>, WithinError>>,
    pub latest_qps: Option<Result<Vec<QpsSample>, WithinError>>,
    /// Clients whose process or pod does not run yet (waiting for a node or an image).
    pub not_running: BTreeSet<String>,
    /// This poll's liveness probes of the external servers (empty when none was probed).
    pub server_probes: Vec<(String, Result<(), ProbeError>)>,
    /// Failed tests judged to fail the run since the last poll (see `judge::verdicts`).
    pub failed_tests: Vec<crate::judge::verdicts::FailedTest>,
}

#[derive(Debug, Clone)]
struct ClientWatch {
    /// When its start-up grace began: launch, or later while it was not running yet.
    grace_from_ms: i64,
    last_qps_at_ms: i64,
    zeros: u32,
    /// No zero-QPS count up to here: an injected fault's window on a server it talks to.
    excused_until_ms: i64,
    /// No heartbeat due before here: an injected fault replaces this worker itself.
    absent_until_ms: i64,
    /// Its latest heartbeat (the worker's clock) and when this driver first read it (its
    /// own clock). Freshness counts from the second: a worker's clock set apart from the
    /// driver's (another node) neither makes it stale nor hides a hung one.
    heartbeat: Option<(i64, i64)>,
}

/// The rules' memory across polls.
#[derive(Debug, Clone)]
pub struct FailFast {
    rules: Rules,
    clients: BTreeMap<String, ClientWatch>,
    last_event_id: i64,
    store_down_since_ms: Option<i64>,
    /// Heartbeats count only from here once the store came back from an outage.
    store_back_at_ms: Option<i64>,
    /// Consecutive failed liveness probes per external server.
    probe_failures: BTreeMap<String, u32>,
}

impl FailFast {
    pub fn new(rules: Rules) -> Self {
        FailFast {
            rules,
            clients: BTreeMap::new(),
            last_event_id: 0,
            store_down_since_ms: None,
            store_back_at_ms: None,
            probe_failures: BTreeMap::new(),
        }
    }

    /// A client was launched: its rules start now.
    pub fn client_launched(&mut self, member: &MemberName, now_ms: i64) {
        self.clients.insert(
            member.to_string(),
            ClientWatch {
                grace_from_ms: now_ms,
                last_qps_at_ms: 0,
                zeros: 0,
                excused_until_ms: 0,
                absent_until_ms: 0,
                heartbeat: None,
            },
        );
    }

    /// An injected fault replaces the worker `member` itself (its pod evicted and applied
    /// again): until `until_ms` at most (the end of the fault's allowed recovery) neither its
    /// silence nor its zero QPS counts (the fault's own verdict judges whether it came back).
    pub fn excuse_absence(&mut self, member: &str, until_ms: i64) {
        self.excuse_zero_qps(member, until_ms);
        if let Some(w) = self.clients.get_mut(member) {
            w.absent_until_ms = w.absent_until_ms.max(until_ms);
        }
    }

    /// An injected fault stops `member`'s answers until `until_ms` at most (the end of the
    /// fault's allowed recovery): its QPS samples up to then are not counted as zeros (the
    /// fault's own verdict judges the recovery).
    pub fn excuse_zero_qps(&mut self, member: &str, until_ms: i64) {
        if let Some(w) = self.clients.get_mut(member) {
            w.excused_until_ms = w.excused_until_ms.max(until_ms);
            w.zeros = 0;
        }
    }

    pub fn clients(&self) -> BTreeSet<String> {
        self.clients.keys().cloned().collect()
    }

    /// The id of the last event seen (the next poll reads after it).
    pub fn last_event_id(&self) -> i64 {
        self.last_event_id
    }

    /// Feeds one poll; returns the first rule that fired, if any.
    pub fn observe(&mut self, poll: Poll) -> Option<Cause> {
        let now = poll.now_ms;
        // 1. A member that ended early.
        if let Some(exit) = poll.exits.into_iter().next() {
            return Some(Cause::Exited(exit));
        }
        // 1. An external server that stopped answering (a success resets its count).
        if let Some(cause) = self.probed(poll.server_probes) {
            return Some(cause);
        }
        let mut store_error: Option<WithinError> = None;
        // 2. A FAILURE event.
        if let Some(events) = read(poll.events, &mut store_error)
            && let Some(cause) = self.first_failure(events)
        {
            return Some(cause);
        }
        // 2. A failed test the driver's judgement says fails the run.
        if let Some(t) = poll.failed_tests.into_iter().next() {
            return Some(Cause::FailedTest {
                member: t.member,
                reason: t.reason,
            });
        }
        for member in &poll.not_running {
            if let Some(w) = self.clients.get_mut(member) {
                w.grace_from_ms = now;
            }
        }
        let heartbeats = read(poll.heartbeats, &mut store_error);
        let latest_qps = read(poll.latest_qps, &mut store_error);
        // 5. The store: while it cannot be read the rules that need it pause.
        if let Some(error) = store_error {
            let since = *self.store_down_since_ms.get_or_insert(now);
            if now - since > stress_common::millis(self.rules.store_outage_limit) {
                return Some(Cause::StoreUnavailable {
                    since_ms: since,
                    now_ms: now,
                    error: error.to_string(),
                });
            }
            return None;
        }
        if self.store_down_since_ms.take().is_some() {
            self.store_back_at_ms = Some(now);
        }
        // 3. Stale heartbeats.
        if let Some(beats) = heartbeats
            && let Some(cause) = self.stale_heartbeat(beats, now)
        {
            return Some(cause);
        }
        // 4. Zero QPS for consecutive samples (each sample counted once).
        latest_qps.and_then(|latest| self.zero_qps(latest))
    }

    /// Rule 1's liveness probes: the first external server that failed its probe the rules'
    /// number of times in a row.
    fn probed(&mut self, probes: Vec<(String, Result<(), ProbeError>)>) -> Option<Cause> {
        for (member, probe) in probes {
            let failures = self.probe_failures.entry(member.clone()).or_default();
            match probe {
                Ok(()) => *failures = 0,
                Err(error) => {
                    *failures += 1;
                    if *failures >= self.rules.server_probe_failures.max(1) {
                        return Some(Cause::ServerUnreachable {
                            member,
                            failures: *failures,
                            error,
                        });
                    }
                }
            }
        }
        None
    }

    /// Rule 2: the first FAILURE among new `events` (all of those before it are seen).
    fn first_failure(&mut self, events: Vec<EventRow>) -> Option<Cause> {
        for e in events {
            self.last_event_id = self.last_event_id.max(e.id);
            if e.kind == EventKind::Failure {
                return Some(Cause::Reported {
                    member: e.member_id,
                    details: e.details,
                });
            }
        }
        None
    }

    /// Rule 3: the first client whose heartbeat (or first one, within the start-up grace) is
    /// overdue at `now`. Time the store was down does not count.
    fn stale_heartbeat(&mut self, beats: Vec<(String, i64)>, now: i64) -> Option<Cause> {
        let beats: BTreeMap<String, i64> = beats.into_iter().collect();
        let counted_from = self.store_back_at_ms.unwrap_or(i64::MIN);
        for (member, w) in &mut self.clients {
            let fired = match beats.get(member) {
                Some(&at) => {
                    let seen = match w.heartbeat {
                        Some((before, seen)) if before == at => seen,
                        _ => now,
                    };
                    w.heartbeat = Some((at, seen));
                    let last = seen.max(counted_from).max(w.absent_until_ms);
                    (now - last > stress_common::millis(self.rules.heartbeat_limit))
                        .then_some(Some(seen))
                }
                None => {
                    let from = w.grace_from_ms.max(counted_from).max(w.absent_until_ms);
                    (now - from > stress_common::millis(self.rules.startup_grace)).then_some(None)
                }
            };
            if let Some(last_ms) = fired {
                return Some(Cause::StaleHeartbeat {
                    member: member.clone(),
                    last_ms,
                    now_ms: now,
                    limit: if last_ms.is_some() {
                        self.rules.heartbeat_limit
                    } else {
                        self.rules.startup_grace
                    },
                });
            }
        }
        None
    }

    /// Rule 4 on the latest QPS samples (each counted once): calls left unanswered too long,
    /// or zero QPS for the rules' number of samples in a row.
    fn zero_qps(&mut self, latest: Vec<QpsSample>) -> Option<Cause> {
        for q in latest {
            let Some(w) = self.clients.get_mut(&q.member_id) else {
                continue;
            };
            if q.at_ms == w.last_qps_at_ms {
                continue;
            }
            w.last_qps_at_ms = q.at_ms;
            if let Some(cause) = unanswered(&self.rules, &q, w.excused_until_ms) {
                return Some(cause);
            }
            w.zeros = if q.qps != 0.0 || q.at_ms <= w.excused_until_ms {
                0
            } else if q.deferred_clients > 0 {
                // A client inside a test that counts its requests when it ends (seconds,
                // bounded by the test's own limit): QPS 0 says nothing either way.
                w.zeros
            } else {
                w.zeros + 1
            };
            if self.rules.zero_qps_polls > 0 && w.zeros >= self.rules.zero_qps_polls {
                return Some(Cause::ZeroQps {
                    member: q.member_id,
                    polls: w.zeros,
                });
            }
        }
        None
    }
}

/// A store read of this poll: its rows, or None when it was not made or failed (the first
/// failure is kept in `error`: the rules that need the store pause).
fn read<T>(read: Option<Result<T, WithinError>>, error: &mut Option<WithinError>) -> Option<T> {
    match read {
        Some(Ok(rows)) => Some(rows),
        Some(Err(e)) => {
            error.get_or_insert(e);
            None
        }
        None => None,
    }
}

/// Rule 4's first half on one new sample: the server that held the member's calls longest
/// with none of them ending, if that is the window or more. Quiet time inside an injected
/// fault's window (up to `excused_until_ms`) does not count.
fn unanswered(rules: &Rules, sample: &QpsSample, excused_until_ms: i64) -> Option<Cause> {
    if rules.unanswered_limit.is_zero() {
        return None;
    }
    sample
        .unanswered
        .iter()
        .map(|u| {
            let from = u.quiet_since_ms.max(excused_until_ms);
            (u, sample.at_ms.saturating_sub(from))
        })
        .filter(|&(_, quiet_ms)| quiet_ms >= stress_common::millis(rules.unanswered_limit))
        .max_by_key(|&(u, quiet_ms)| (quiet_ms, u.calls))
        .map(|(u, quiet_ms)| Cause::Unanswered {
            member: sample.member_id.clone(),
            server: u.server.clone(),
            calls: u.calls,
            quiet: Duration::from_millis(u64::try_from(quiet_ms).unwrap_or(0)),
        })
}

/// The verdict at the end of a run, after the clients were stopped: the first FAILURE event
/// recorded since the last poll, else the first failed test judged to fail the run since then,
/// else the first client that did not end cleanly. A client ends cleanly with exit 0, or, when
/// the launcher lost its exit status (a kubelet that deleted the pod reports
/// ContainerStatusUnknown), when it recorded SUCCESS itself after its final flush.
pub fn at_end(
    late_events: &[EventRow],
    late_failed_tests: &[crate::judge::verdicts::FailedTest],
    exits: &[MemberExit],
    finished_cleanly: &BTreeSet<String>,
) -> Option<Blame> {
    if let Some(e) = late_events.iter().find(|e| e.kind == EventKind::Failure) {
        return Some(Blame {
            member: e.member_id.clone(),
            reason: e.details.clone(),
            record: false,
        });
    }
    if let Some(t) = late_failed_tests.first() {
        return Some(Blame {
            member: t.member.clone(),
            reason: t.reason.clone(),
            record: true,
        });
    }
    exits
        .iter()
        .find(|e| !(e.success() || (e.status_unknown() && finished_cleanly.contains(&e.member_id))))
        .map(|e| Blame {
            member: e.member_id.clone(),
            reason: format!("{} at the end of the run", e.describe()),
            record: true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fail_fast::SERVER_PROBE_FAILURES;
    use stress_common::status::UnansweredCalls;

    const POLL: Duration = Duration::from_secs(1);
    const T0: i64 = 1_000_000;

    fn rules() -> Rules {
        Rules::new(POLL, 3, 3)
    }

    fn machine(clients: &[&str]) -> FailFast {
        let mut ff = FailFast::new(rules());
        for c in clients {
            ff.client_launched(&MemberName::new(*c), T0);
        }
        ff
    }

    /// A healthy poll at `now`: every client beat at `now` and reports `qps` sampled at `now`.
    fn healthy(now: i64, clients: &[&str], qps: f64) -> Poll {
        Poll {
            now_ms: now,
            events: Some(Ok(vec![])),
            heartbeats: Some(Ok(clients.iter().map(|c| (c.to_string(), now)).collect())),
            latest_qps: Some(Ok(clients
                .iter()
                .map(|c| QpsSample {
                    member_id: c.to_string(),
                    at_ms: now,
                    qps,
                    total_requests: 1,
                    deferred_clients: 0,
                    unanswered: vec![],
                })
                .collect())),
            ..Poll::default()
        }
    }

    fn event(id: i64, member: &str, kind: EventKind, details: &str) -> EventRow {
        EventRow {
            id,
            member_id: member.into(),
            at_ms: T0,
            kind,
            details: details.into(),
        }
    }

    fn exit(member: &str, code: Option<i32>, signal: Option<i32>) -> MemberExit {
        MemberExit {
            member_id: member.into(),
            code,
            signal,
            reason: None,
        }
    }

    #[test]
    fn only_a_workers_last_event_says_its_final_counts_are_in() {
        use stress_common::status::final_event_details;
        let events = [
            event(1, "c-0", EventKind::Running, "running"),
            // A first failure is not the end: the worker drains and reports again.
            event(2, "c-0", EventKind::Failure, "Load on s: wrong answer"),
            event(
                3,
                "c-1",
                EventKind::Success,
                &final_event_details("9 requests"),
            ),
            event(
                4,
                "c-0",
                EventKind::Failure,
                &final_event_details("1 failed tests"),
            ),
            // The prefix on another kind, or inside the text, is not a final event.
            event(5, "c-2", EventKind::Running, &final_event_details("x")),
            event(6, "c-3", EventKind::Failure, "server said: final: no"),
        ];
        let finals: Vec<&str> = final_reports(&events).collect();
        assert_eq!(finals, ["c-1", "c-0"]);
    }

    #[test]
    fn a_healthy_run_never_fires() {
        let mut ff = machine(&["c-0", "c-1"]);
        for s in 0..100 {
            assert_eq!(
                ff.observe(healthy(T0 + s * 1000, &["c-0", "c-1"], 50.0)),
                None
            );
        }
    }

    #[test]
    fn an_early_exit_fires_first() {
        let mut ff = machine(&["c-0"]);
        let mut poll = healthy(T0, &["c-0"], 10.0);
        poll.exits = vec![exit("triton-0", None, Some(9))];
        poll.events = Some(Ok(vec![event(1, "c-0", EventKind::Failure, "x")]));
        let cause = ff.observe(poll).unwrap();
        assert_eq!(cause.member(), "triton-0");
        assert_eq!(
            cause.reason(),
            "killed by signal 9 (SIGKILL) before the end of the run"
        );
    }

    #[test]
    fn an_external_server_fails_after_consecutive_failed_probes_only() {
        let mut ff = machine(&["c-0"]);
        let probed = |s: i64, results: Vec<Result<(), ProbeError>>| {
            let mut poll = healthy(T0 + s * 1000, &["c-0"], 10.0);
            poll.server_probes = results
                .into_iter()
                .enumerate()
                .map(|(i, r)| (format!("ext-{i}"), r))
                .collect();
            poll
        };
        let down = || {
            Err(ProbeError::Unreachable {
                endpoint: "127.0.0.1:9/v2/health/live".into(),
                cause: "Connection refused".into(),
            })
        };
        // Two failures, a success, two failures: never three in a row.
        assert_eq!(ff.observe(probed(1, vec![Ok(()), down()])), None);
        assert_eq!(ff.observe(probed(2, vec![Ok(()), down()])), None);
        assert_eq!(ff.observe(probed(3, vec![Ok(()), Ok(())])), None);
        assert_eq!(ff.observe(probed(4, vec![down(), down()])), None);
        assert_eq!(ff.observe(probed(5, vec![Ok(()), down()])), None);
        // A poll that probed nothing (a member ended first) neither counts nor resets.
        assert_eq!(ff.observe(healthy(T0 + 5500, &["c-0"], 10.0)), None);
        let cause = ff.observe(probed(6, vec![Ok(()), down()])).unwrap();
        assert_eq!(cause.member(), "ext-1");
        assert_eq!(
            cause.reason(),
            "external server failed 3 liveness probes in a row: 127.0.0.1:9/v2/health/live did not answer: Connection refused"
        );
        // The server is blamed itself: not a client's failure to attribute, and the driver
        // records it.
        assert!(!needs_probe(&cause, &ff.clients()));
        assert!(attribute(&cause, &[], None).record);
        assert_eq!(rules().server_probe_failures, SERVER_PROBE_FAILURES);
    }

    #[test]
    fn a_failure_event_fires_and_later_polls_read_after_it() {
        let mut ff = machine(&["c-0"]);
        let mut poll = healthy(T0, &["c-0"], 10.0);
        poll.events = Some(Ok(vec![
            event(4, "c-0", EventKind::Running, "up"),
            event(5, "c-0", EventKind::Failure, "SequenceValid: wrong sum"),
        ]));
        let cause = ff.observe(poll).unwrap();
        assert_eq!(
            cause,
            Cause::Reported {
                member: "c-0".into(),
                details: "SequenceValid: wrong sum".into()
            }
        );
        assert!(cause.recorded_by_member());
        assert_eq!(ff.last_event_id(), 5);
    }

    #[test]
    fn a_stale_heartbeat_fires_after_the_limit_only() {
        let mut ff = machine(&["c-0", "c-1"]);
        // c-1 beats every second; c-0 stops beating at T0 + 2 s.
        for s in 0..=5 {
            let now = T0 + s * 1000;
            let mut poll = healthy(now, &["c-1"], 10.0);
            if let Some(Ok(b)) = poll.heartbeats.as_mut() {
                b.push(("c-0".into(), now.min(T0 + 2000)));
            }
            assert_eq!(ff.observe(poll), None, "at {s} s");
        }
        // 3.001 s after its last beat: over the 3 s limit.
        let now = T0 + 5001;
        let mut poll = healthy(now, &["c-1"], 10.0);
        if let Some(Ok(b)) = poll.heartbeats.as_mut() {
            b.push(("c-0".into(), T0 + 2000));
        }
        let cause = ff.observe(poll).unwrap();
        assert_eq!(cause.member(), "c-0");
        assert_eq!(cause.reason(), "no heartbeat for 3.0 s (limit 3s)");
    }

    /// A worker an injected fault replaces (evicted at T0 + 2 s, its pod applied again) is
    /// silent through the fault's allowed recovery without blame, and stale after it as any.
    #[test]
    fn a_replaced_worker_is_not_stale_within_its_fault_s_window_only() {
        let mut ff = machine(&["c-0", "c-1"]);
        ff.excuse_absence("c-0", T0 + 10_000);
        let poll = |now: i64| {
            let mut poll = healthy(now, &["c-1"], 10.0);
            if let Some(Ok(b)) = poll.heartbeats.as_mut() {
                b.push(("c-0".into(), now.min(T0 + 2000)));
            }
            if let Some(Ok(q)) = poll.latest_qps.as_mut() {
                q.push(QpsSample {
                    member_id: "c-0".into(),
                    at_ms: now.min(T0 + 2000),
                    qps: 0.0,
                    total_requests: 1,
                    deferred_clients: 0,
                    unanswered: vec![],
                });
            }
            poll
        };
        for s in 0..=13 {
            assert_eq!(ff.observe(poll(T0 + s * 1000)), None, "at {s} s");
        }
        let cause = ff
            .observe(poll(T0 + 13_001))
            .expect("stale past the window");
        assert_eq!(cause.member(), "c-0");
    }

    /// Heartbeats carry the worker's clock, which on another node may be set apart from the
    /// driver's: freshness counts from when the driver read each new one, so a worker 10 s
    /// behind that keeps beating is never stale, and one 60 s ahead that stops is stale after
    /// the limit all the same.
    #[test]
    fn a_worker_clock_set_apart_from_the_drivers_changes_nothing() {
        let mut ff = machine(&["behind", "ahead"]);
        let poll = |now: i64, ahead_stopped_at: i64| {
            let mut poll = healthy(now, &["behind", "ahead"], 10.0);
            poll.heartbeats = Some(Ok(vec![
                ("ahead".into(), now.min(ahead_stopped_at) + 60_000),
                ("behind".into(), now - 10_000),
            ]));
            poll
        };
        for s in 0..=8 {
            assert_eq!(ff.observe(poll(T0 + s * 1000, T0 + 5000)), None, "at {s} s");
        }
        // 3 s after the driver read "ahead"'s last beat (at T0 + 5 s), and 0.001 more.
        let cause = ff.observe(poll(T0 + 8001, T0 + 5000));
        let cause = cause.unwrap_or_else(|| panic!("a stopped worker ahead of the driver"));
        assert_eq!(cause.member(), "ahead");
        assert_eq!(cause.reason(), "no heartbeat for 3.0 s (limit 3s)");
    }

    #[test]
    fn no_first_heartbeat_within_the_grace_fires_counted_from_running() {
        let mut ff = machine(&["c-0"]);
        let quiet = |now: i64| Poll {
            now_ms: now,
            events: Some(Ok(vec![])),
            heartbeats: Some(Ok(vec![])),
            latest_qps: Some(Ok(vec![])),
            ..Poll::default()
        };
        // Its pod waits for a node for 20 s: the grace (15 s) counts from when it runs.
        for s in 0..=20 {
            let mut poll = quiet(T0 + s * 1000);
            poll.not_running = BTreeSet::from(["c-0".to_string()]);
            assert_eq!(ff.observe(poll), None);
        }
        assert_eq!(ff.observe(quiet(T0 + 35_000)), None, "15 s after running");
        let cause = ff.observe(quiet(T0 + 35_001)).unwrap();
        assert_eq!(cause.reason(), "no heartbeat within 15s of launch");
    }

    #[test]
    fn zero_qps_fires_on_consecutive_new_samples_only() {
        let mut ff = machine(&["c-0"]);
        assert_eq!(ff.observe(healthy(T0 + 1000, &["c-0"], 0.0)), None);
        assert_eq!(ff.observe(healthy(T0 + 2000, &["c-0"], 0.0)), None);
        // The same sample read again is not a new zero.
        let mut again = healthy(T0 + 2500, &["c-0"], 0.0);
        if let Some(Ok(q)) = again.latest_qps.as_mut() {
            q[0].at_ms = T0 + 2000;
        }
        assert_eq!(ff.observe(again), None);
        // A non-zero sample resets the count.
        assert_eq!(ff.observe(healthy(T0 + 3000, &["c-0"], 5.0)), None);
        assert_eq!(ff.observe(healthy(T0 + 4000, &["c-0"], 0.0)), None);
        assert_eq!(ff.observe(healthy(T0 + 5000, &["c-0"], 0.0)), None);
        let cause = ff.observe(healthy(T0 + 6000, &["c-0"], 0.0)).unwrap();
        assert_eq!(cause, zero_qps_of_c0());
    }

    /// The zero-QPS rule firing for c-0 on its third zero poll in a row.
    fn zero_qps_of_c0() -> Cause {
        Cause::ZeroQps {
            member: "c-0".into(),
            polls: 3,
        }
    }

    /// A poll whose sample of c-0 says QPS `qps` with `waiting` servers holding its calls:
    /// (address, calls, quiet since).
    fn holding(now: i64, qps: f64, waiting: &[(&str, u64, i64)]) -> Poll {
        let mut poll = healthy(now, &["c-0"], qps);
        if let Some(Ok(q)) = poll.latest_qps.as_mut() {
            q[0].unanswered = waiting
                .iter()
                .map(|&(server, calls, since)| UnansweredCalls {
                    server: server.into(),
                    calls,
                    quiet_since_ms: since,
                })
                .collect();
        }
        poll
    }

    #[test]
    fn a_server_holding_calls_with_none_ended_for_the_window_fires_before_zero_qps() {
        let (a, b) = ("10.0.0.1:8001", "10.0.0.2:8001");
        // The window is 3 polls less half a poll: 2.5 s.
        assert_eq!(rules().unanswered_limit, Duration::from_millis(2_500));
        let mut ff = machine(&["c-0"]);
        // Calls wait on both; a's keep ending (quiet since each sample), b's do not, while
        // the QPS a answers keeps the zero-QPS rule silent.
        for s in 1..=3 {
            let now = T0 + s * 1000;
            assert_eq!(
                ff.observe(holding(now, 40.0, &[(a, 4, now), (b, 4, T0 + 1000)])),
                None,
                "at {s} s"
            );
        }
        let cause = ff
            .observe(holding(
                T0 + 4000,
                40.0,
                &[(a, 4, T0 + 4000), (b, 4, T0 + 1000)],
            ))
            .unwrap();
        assert_eq!(
            cause,
            Cause::Unanswered {
                member: "c-0".into(),
                server: b.into(),
                calls: 4,
                quiet: Duration::from_secs(3),
            }
        );
        assert_eq!(
            cause.reason(),
            "4 calls to 10.0.0.2:8001 unanswered: none of its calls ended for 3.0 s"
        );
        assert!(needs_probe(&cause, &ff.clients()));

        // One server, hung: the third zero-QPS sample is the holder's, not the worker's.
        let mut ff = machine(&["c-0"]);
        let quiet_since = T0;
        for s in 1..=2 {
            let poll = holding(T0 + s * 1000, 0.0, &[(a, 16, quiet_since)]);
            assert_eq!(ff.observe(poll), None);
        }
        // The worker's snapshot a little early: still inside the half poll's slack.
        let cause = ff
            .observe(holding(T0 + 2_990, 0.0, &[(a, 16, quiet_since)]))
            .unwrap();
        assert!(
            matches!(cause, Cause::Unanswered { calls: 16, .. }),
            "{cause:?}"
        );
    }

    #[test]
    fn calls_that_waited_less_than_the_window_leave_zero_qps_to_the_worker() {
        // QPS 0 for 3 polls, and one call left just now (a worker that stalled, then sent):
        // the worker's, not the server's.
        let a = "10.0.0.1:8001";
        let mut ff = machine(&["c-0"]);
        assert_eq!(ff.observe(holding(T0 + 1000, 0.0, &[])), None);
        assert_eq!(ff.observe(holding(T0 + 2000, 0.0, &[])), None);
        let cause = ff
            .observe(holding(T0 + 3000, 0.0, &[(a, 1, T0 + 2000)]))
            .unwrap();
        assert_eq!(cause, zero_qps_of_c0());
    }

    #[test]
    fn an_injected_fault_excuses_held_calls_until_its_window_ends() {
        let a = "10.0.0.1:8001";
        let mut ff = machine(&["c-0"]);
        // A paused server holds calls for its 10 s window; then they count from its end.
        ff.excuse_zero_qps("c-0", T0 + 10_000);
        for s in 1..=12 {
            let poll = holding(T0 + s * 1000, 0.0, &[(a, 8, T0)]);
            assert_eq!(ff.observe(poll), None, "at {s} s");
        }
        let cause = ff
            .observe(holding(T0 + 12_600, 0.0, &[(a, 8, T0)]))
            .unwrap();
        assert!(
            matches!(cause, Cause::Unanswered { quiet, .. } if quiet == Duration::from_millis(2_600)),
            "{cause:?}"
        );
        // 0 zero-QPS polls turns this half of the rule off too.
        let mut ff = FailFast::new(Rules::new(POLL, 3, 0));
        ff.client_launched(&MemberName::new("c-0"), T0);
        assert_eq!(Rules::new(POLL, 3, 0).unanswered_limit, Duration::ZERO);
        for s in 1..50 {
            assert_eq!(ff.observe(holding(T0 + s * 1000, 0.0, &[(a, 8, T0)])), None);
        }
    }

    #[test]
    fn held_calls_are_blamed_on_the_server_at_their_address() {
        let endpoints: BTreeMap<String, ServerEndpoint> = ["triton-0", "triton-1"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let ep = ServerEndpoint {
                    member: name.to_string(),
                    grpc: format!("127.0.0.1:80{i}1"),
                    http: format!("127.0.0.1:80{i}0"),
                    metrics: format!("127.0.0.1:80{i}2"),
                };
                (name.to_string(), ep)
            })
            .collect();
        let targets = [MemberName::new("triton-0"), MemberName::new("triton-1")];
        assert_eq!(
            server_at("127.0.0.1:8011", &targets, &endpoints),
            Some(&targets[1])
        );
        assert_eq!(
            server_at("127.0.0.1:8000", &targets, &endpoints),
            Some(&targets[0])
        );
        // An address of no target: the only target, else none.
        assert_eq!(server_at("10.9.9.9:1", &targets, &endpoints), None);
        assert_eq!(
            server_at("10.9.9.9:1", &targets[..1], &endpoints),
            Some(&targets[0])
        );

        let cause = Cause::Unanswered {
            member: "c-0".into(),
            server: "127.0.0.1:8011".into(),
            calls: 16,
            quiet: Duration::from_millis(9_500),
        };
        let holder = &targets[1];
        let live = [(holder.clone(), Ok(()))];
        let blame = attribute(&cause, &live, Some(holder));
        assert_eq!(blame.member, "triton-1");
        assert!(blame.record);
        assert_eq!(
            blame.reason,
            "c-0 reported: 16 calls to 127.0.0.1:8011 unanswered: none of its calls ended for 9.5 s while its liveness probe answered: its inference hangs (a stuck backend or a deadlock), not the process"
        );
        // A holder whose probe fails is blamed for that, first.
        let dead = [(
            holder.clone(),
            Err(ProbeError::TimedOut {
                endpoint: "127.0.0.1:8010/v2/health/live".into(),
                timeout: Duration::from_secs(1),
            }),
        )];
        let blame = attribute(&cause, &dead, Some(holder));
        assert_eq!(blame.member, "triton-1");
        assert!(
            blame.reason.contains("did not answer within"),
            "{}",
            blame.reason
        );
        // No holder known: the worker's member carries the finding.
        assert_eq!(attribute(&cause, &[], None).member, "c-0");
    }

    #[test]
    fn the_holder_s_own_pending_requests_are_evidence_when_it_counts_any() {
        use stress_common::triton_metrics::ModelMetrics;
        let cause = Cause::Unanswered {
            member: "c-0".into(),
            server: "127.0.0.1:8001".into(),
            calls: 40,
            quiet: Duration::from_secs(10),
        };
        let blame = || Blame {
            member: "triton-0".into(),
            reason: "held".into(),
            record: true,
        };
        let model = |name: &str, pending: f64| ModelMetrics {
            model: name.into(),
            pending,
            ..Default::default()
        };
        let models = [
            model("idle", 0.0),
            model("b", 2.0),
            model("hung", 37.0),
            model("a", 2.0),
            model("c", 1.0),
        ];
        assert_eq!(
            with_pending(blame(), &cause, Some(&models)).reason,
            "held; its own metrics count 42 requests pending (hung 37, a 2, b 2, …)"
        );
        // None pending, no metrics, or another cause: nothing added.
        assert_eq!(with_pending(blame(), &cause, Some(&models[..1])), blame());
        assert_eq!(with_pending(blame(), &cause, None), blame());
        let zero = zero_qps_of_c0();
        assert_eq!(with_pending(blame(), &zero, Some(&models)), blame());
    }

    #[test]
    fn zero_qps_inside_a_test_that_counts_at_its_end_is_not_a_stall() {
        let mut ff = machine(&["c-0"]);
        let inside = |now, deferred| {
            let mut poll = healthy(now, &["c-0"], 0.0);
            if let Some(Ok(q)) = poll.latest_qps.as_mut() {
                q[0].deferred_clients = deferred;
            }
            poll
        };
        assert_eq!(ff.observe(healthy(T0 + 1000, &["c-0"], 0.0)), None);
        assert_eq!(ff.observe(healthy(T0 + 2000, &["c-0"], 0.0)), None);
        // A perf_analyzer run of several seconds: its zeros neither count nor clear the two.
        for s in 3..=9 {
            assert_eq!(ff.observe(inside(T0 + s * 1000, 1)), None, "at {s} s");
        }
        // Out of it, still nothing counted: the third zero in a row fires.
        let cause = ff.observe(healthy(T0 + 10_000, &["c-0"], 0.0)).unwrap();
        assert_eq!(cause, zero_qps_of_c0());
    }

    #[test]
    fn an_injected_fault_excuses_zero_qps_until_its_window_ends() {
        let mut ff = machine(&["c-0"]);
        ff.excuse_zero_qps("c-0", T0 + 10_000);
        for s in 1..=10 {
            assert_eq!(ff.observe(healthy(T0 + s * 1000, &["c-0"], 0.0)), None);
        }
        // Past the window the rule counts again, from zero.
        assert_eq!(ff.observe(healthy(T0 + 11_000, &["c-0"], 0.0)), None);
        assert_eq!(ff.observe(healthy(T0 + 12_000, &["c-0"], 0.0)), None);
        assert!(ff.observe(healthy(T0 + 13_000, &["c-0"], 0.0)).is_some());
    }

    #[test]
    fn zero_qps_polls_0_turns_the_rule_off() {
        let mut ff = FailFast::new(Rules::new(POLL, 3, 0));
        ff.client_launched(&MemberName::new("c-0"), T0);
        for s in 1..50 {
            assert_eq!(ff.observe(healthy(T0 + s * 1000, &["c-0"], 0.0)), None);
        }
    }

    #[test]
    fn a_store_outage_pauses_the_rules_then_fails_past_its_limit() {
        let mut ff = machine(&["c-0"]);
        assert_eq!(ff.observe(healthy(T0, &["c-0"], 10.0)), None);
        let unanswered = || WithinError::NoAnswer(Duration::from_secs(5));
        let down = |now: i64| Poll {
            now_ms: now,
            events: Some(Err(unanswered())),
            heartbeats: Some(Err(unanswered())),
            latest_qps: Some(Err(unanswered())),
            ..Poll::default()
        };
        // 30 s down: no heartbeat blame.
        for s in 1..=30 {
            assert_eq!(ff.observe(down(T0 + s * 1000)), None);
        }
        // Back: the worker's last beat is from before the outage; it is not blamed, its
        // heartbeat limit counts from the store's return.
        let mut back = healthy(T0 + 31_000, &[], 10.0);
        back.heartbeats = Some(Ok(vec![("c-0".into(), T0)]));
        assert_eq!(ff.observe(back), None);
        let mut later = healthy(T0 + 34_001, &[], 10.0);
        later.heartbeats = Some(Ok(vec![("c-0".into(), T0)]));
        assert_eq!(ff.observe(later).unwrap().member(), "c-0");

        // A long outage fails the run, blamed on the store.
        let mut ff = machine(&["c-0"]);
        for s in 0..=60 {
            assert_eq!(ff.observe(down(T0 + s * 1000)), None, "at {s} s");
        }
        let cause = ff.observe(down(T0 + 60_001)).unwrap();
        assert_eq!(cause.member(), STORE_MEMBER);
        assert_eq!(
            cause.reason(),
            "status store unreadable for 60.0 s: the status store did not answer within 5s"
        );
        assert!(!needs_probe(&cause, &ff.clients()));
    }

    #[test]
    fn a_clients_failure_is_blamed_on_its_first_dead_server() {
        let cause = Cause::Reported {
            member: "c-0".into(),
            details: "Load: connection refused".into(),
        };
        assert!(needs_probe(&cause, &BTreeSet::from(["c-0".to_string()])));
        let live = [
            (MemberName::new("triton-0"), Ok(())),
            (MemberName::new("triton-1"), Ok(())),
        ];
        assert_eq!(
            attribute(&cause, &live, None),
            Blame {
                member: "c-0".into(),
                reason: "Load: connection refused".into(),
                record: false
            }
        );
        let one_dead = [
            (MemberName::new("triton-0"), Ok(())),
            (
                MemberName::new("triton-1"),
                Err(ProbeError::Unreachable {
                    endpoint: "h:1/v2/health/live".into(),
                    cause: "connection refused".into(),
                }),
            ),
            (
                MemberName::new("triton-2"),
                Err(ProbeError::TimedOut {
                    endpoint: "h:2/v2/health/live".into(),
                    timeout: Duration::from_secs(1),
                }),
            ),
        ];
        assert_eq!(
            attribute(&cause, &one_dead, None),
            Blame {
                member: "triton-1".into(),
                reason: "h:1/v2/health/live did not answer: connection refused; c-0 reported: Load: connection refused".into(),
                record: true
            }
        );
        // A rule the driver saw (not the worker's own event) is recorded by the driver.
        let stale = zero_qps_of_c0();
        assert!(attribute(&stale, &live, None).record);
        // A server's own failure is not probed.
        let server = Cause::Exited(exit("triton-0", Some(1), None));
        assert!(!needs_probe(&server, &BTreeSet::from(["c-0".to_string()])));
    }

    #[test]
    fn a_stale_heartbeat_is_told_apart_as_hung_or_cut_off_from_the_store() {
        let stale = Cause::StaleHeartbeat {
            member: "c-0".into(),
            last_ms: Some(1_000),
            now_ms: 31_000,
            limit: Duration::from_secs(10),
        };
        let look = Duration::from_millis(500);
        let activity = |cpu_us: u64, throttled_ms: Option<u64>, stopped: bool| Activity {
            cpu: Duration::from_micros(cpu_us),
            over: look,
            throttled: throttled_ms.map(Duration::from_millis),
            stopped,
        };
        let reason = |a: Activity| with_activity(attribute(&stale, &[], None), &stale, Some(a));
        let busy = reason(activity(40_000, Some(20), false));
        assert_eq!(busy.member, "c-0");
        let busy = busy.reason;
        assert!(busy.starts_with("no heartbeat for 30.0 s"), "{busy}");
        assert!(busy.contains("do not reach the store"), "{busy}");
        let idle = reason(activity(300, None, false)).reason;
        assert!(
            idle.contains("is idle (0.30 ms") && idle.contains("the worker is hung"),
            "{idle}"
        );
        // A light load's few milliseconds are work, not idleness.
        let light = reason(activity(3_000, None, false)).reason;
        assert!(light.contains("runs and works"), "{light}");
        // Stopped outright: hung, whatever it used before the stop.
        let stopped = reason(activity(3_000, None, true)).reason;
        assert!(
            stopped.contains("is stopped (state T") && stopped.contains("hung"),
            "{stopped}"
        );
        // A pod held back by its CPU limit for much of the look is starved, not hung (it used
        // little) nor cut off (its reports wait for CPU, not for the store).
        let reading = |used_ms: u64, throttled_ms: u64| CpuUse {
            used: Duration::from_millis(used_ms),
            throttled: Some(Duration::from_millis(throttled_ms)),
            stopped: false,
        };
        let between = Activity::between(reading(1_000, 5_000), reading(1_010, 5_400), look);
        let starved = reason(between).reason;
        assert!(
            starved.contains("held it back for 400 ms of 0.5 s")
                && starved.contains("starved by its limit"),
            "{starved}"
        );
        // Unknown activity, or another cause: the blame as it was.
        assert_eq!(
            with_activity(attribute(&stale, &[], None), &stale, None),
            attribute(&stale, &[], None)
        );
        let other = zero_qps_of_c0();
        assert_eq!(
            with_activity(
                attribute(&other, &[], None),
                &other,
                Some(activity(0, None, false))
            ),
            attribute(&other, &[], None)
        );
    }

    #[test]
    fn the_end_of_a_run() {
        let clean = BTreeSet::from(["c-1".to_string()]);
        assert_eq!(
            at_end(&[], &[], &[exit("c-0", Some(0), None)], &clean),
            None
        );
        // Exit status lost, but the worker recorded SUCCESS after its final flush.
        assert_eq!(at_end(&[], &[], &[exit("c-1", None, None)], &clean), None);
        let lost = at_end(&[], &[], &[exit("c-0", None, None)], &clean).unwrap();
        assert_eq!(
            (lost.member.as_str(), lost.reason.as_str(), lost.record),
            ("c-0", "ended (status unknown) at the end of the run", true)
        );
        let bad = at_end(&[], &[], &[exit("c-1", Some(1), None)], &clean).unwrap();
        assert_eq!(bad.reason, "exited with code 1 at the end of the run");
        // A late FAILURE event wins over exits.
        let late = [event(9, "c-0", EventKind::Failure, "final flush: mismatch")];
        let b = at_end(&late, &[], &[exit("c-1", Some(1), None)], &clean).unwrap();
        assert_eq!(
            (b.member.as_str(), b.record),
            ("c-0", false),
            "the worker recorded it itself"
        );
        // A failed test judged after the last poll: the driver records it.
        let judged = [crate::judge::verdicts::FailedTest {
            member: "c-1".into(),
            reason: "Load on h:1 model add_sub: expected 3, got 4".into(),
        }];
        let t = at_end(&[], &judged, &[exit("c-1", Some(0), None)], &clean).unwrap();
        assert_eq!(
            (t.member.as_str(), t.reason.as_str(), t.record),
            ("c-1", judged[0].reason.as_str(), true)
        );
    }

    #[test]
    fn a_failed_test_judged_to_fail_fails_the_run_as_the_driver_s_finding() {
        let mut ff = FailFast::new(rules());
        ff.client_launched(&MemberName::new("c-0"), 0);
        let cause = ff
            .observe(Poll {
                now_ms: 100,
                failed_tests: vec![crate::judge::verdicts::FailedTest {
                    member: "c-0".into(),
                    reason: "SequenceValid on h:1: expected START honoured".into(),
                }],
                ..Poll::default()
            })
            .expect("fails");
        assert_eq!(cause.member(), "c-0");
        assert!(!cause.recorded_by_member(), "the driver records it");
        assert_eq!(
            cause.reason(),
            "SequenceValid on h:1: expected START honoured"
        );
    }
}
