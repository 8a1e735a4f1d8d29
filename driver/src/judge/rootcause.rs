//! Root cause first: of a run's failures, which one came first and which ones it caused.
//!
//! When a server dies its clients fail too (connection errors, often recorded a moment before
//! the driver notices the server's exit), and when the driver stops a failed run the workers
//! still sending see "Server is stopping". Listing those as independent failures buries the
//! cause. [`analyze`] (pure) orders the failed members by time, picks the root cause (a server
//! that failed within [`SAME_INCIDENT`] of the first failure wins: its clients saw its death
//! first), and sorts every failure record into caused by it, during the driver's stop, or
//! independent. A run whose driver died (ABANDONED) leads with the driver: the members that
//! failed after it stopped renewing its lease were stopped by its death (a local launcher's
//! servers die with it; their clients then see "Server exiting"). The root cause carries the
//! failing signature of its member, when it has one, with the class and evidence the driver
//! judged ([`signature_of`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use stress_common::status::FailureRecord;

/// Failures this close to a server's failure (before or after) belong to its incident: a
/// client sees a dead server's connection errors before the driver's next poll sees its exit.
pub const SAME_INCIDENT_MS: i64 = 5_000;

/// How often a running driver renews the lease on its run, and the shortest time the lease
/// holds (`run::lease`).
pub const LEASE_RENEWAL_MS: i64 = 15_000;
pub const LEASE_TTL_MIN_MS: i64 = 120_000;

/// The earliest a driver whose lease ran out at `lease_until_ms` can have died: its last
/// renewal was at least the shortest lease before that, and it renewed every 15 s.
pub fn driver_died_by(lease_until_ms: i64) -> i64 {
    lease_until_ms - LEASE_TTL_MIN_MS - LEASE_RENEWAL_MS
}

/// The member that records a run's driver (`stress_common::status::DRIVER_MEMBER`).
const DRIVER: &str = stress_common::status::DRIVER_MEMBER;

/// A failed member as the analysis needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub member_id: String,
    /// `SERVER` or `CLIENT` (or `?`: a harness member such as `slo`).
    pub role: String,
    pub at_ms: i64,
    pub reason: String,
    /// A server's addresses (gRPC, HTTP); a client's target servers' addresses.
    pub addresses: BTreeSet<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub root_cause: Option<RootCause>,
    /// Failed members not explained by the root cause, by time.
    pub independent_members: Vec<String>,
    /// Failure records explained by the root cause (its clients' failures against it).
    pub caused_failures: u64,
    /// Failure records from after the driver began to stop the run.
    pub shutdown_failures: u64,
    /// The other failure records.
    pub independent_failures: u64,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootCause {
    pub member_id: String,
    pub role: String,
    pub at_ms: i64,
    pub reason: String,
    /// Failed members it explains: a server's clients that failed in its incident, or every
    /// member that failed after a driver's death.
    pub caused_members: Vec<String>,
    /// The failing signature of its member, with the class and evidence the driver judged.
    pub signature: Option<RootSignature>,
    /// Whose fault it is, with the evidence: its signature's, or else what ended the member
    /// ([`super::classify::member_failure`]). None: not judged (a verdict such as an SLO).
    pub class: Option<stress_common::signature::FailureClass>,
    pub evidence: Option<String>,
}

impl RootCause {
    /// Judges the root cause: its member's failing signature among `signatures`, and its class
    /// with the evidence (the signature's, else its member's own failure's).
    pub fn judge(&mut self, signatures: &[crate::judge::verdicts::JudgedSignature]) {
        self.signature = signature_of(self, signatures);
        let judged = match &self.signature {
            Some(s) => Some((s.class, s.evidence.clone())),
            None => super::classify::member_failure(&self.member_id, &self.role, &self.reason)
                .map(|e| (e.class, e.why)),
        };
        (self.class, self.evidence) = judged.unzip();
    }
}

/// The root cause's failure signature, as judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootSignature {
    pub signature: String,
    pub class: stress_common::signature::FailureClass,
    pub evidence: String,
    pub status: crate::judge::verdicts::Status,
}

/// The failing signature of `root`'s member: the earliest one that fails the run and was seen
/// by it (a client's), or whose requests went to it (a server's).
pub fn signature_of(
    root: &RootCause,
    signatures: &[crate::judge::verdicts::JudgedSignature],
) -> Option<RootSignature> {
    signatures
        .iter()
        .filter(|s| s.fails.is_some())
        .filter(|s| s.members.contains(&root.member_id) || s.example_member == root.member_id)
        .min_by_key(|s| s.first_at_ms)
        .map(|s| RootSignature {
            signature: s.signature.clone(),
            class: s.class,
            evidence: s.evidence.clone(),
            status: s.status,
        })
}

const SERVER: &str = "SERVER";

/// `failed`: every failed member; `failures`: the listed failure records (member, record);
/// `stopping_at_ms`: when the driver began to stop the run (None: it did not stop early);
/// `driver_died_at_ms`: a run its driver abandoned, the earliest it died ([`driver_died_by`]).
pub fn analyze(
    failed: &[Failed],
    failures: &[(String, FailureRecord)],
    stopping_at_ms: Option<i64>,
    driver_died_at_ms: Option<i64>,
) -> Analysis {
    if let Some(died) = driver_died_at_ms
        && let Some(driver) = failed.iter().find(|f| f.member_id == DRIVER)
    {
        return abandoned(driver, died, failed, failures);
    }
    let mut by_time: Vec<&Failed> = failed.iter().collect();
    by_time.sort_by_key(|f| (f.at_ms, f.role != SERVER));
    let Some(first) = by_time.first() else {
        return Analysis {
            independent_failures: failures.len() as u64,
            ..Default::default()
        };
    };
    let root = by_time
        .iter()
        .find(|f| f.role == SERVER && f.at_ms - first.at_ms <= SAME_INCIDENT_MS)
        .copied()
        .unwrap_or(first);
    let in_incident = |at_ms: i64| at_ms >= root.at_ms - SAME_INCIDENT_MS;
    let talks_to_root = |addresses: &BTreeSet<String>| {
        root.role == SERVER && !addresses.is_disjoint(&root.addresses)
    };
    let caused_members: Vec<String> = by_time
        .iter()
        .filter(|f| f.member_id != root.member_id)
        .filter(|f| f.role != SERVER && talks_to_root(&f.addresses) && in_incident(f.at_ms))
        .map(|f| f.member_id.clone())
        .collect();
    let independent_members = by_time
        .iter()
        .filter(|f| f.member_id != root.member_id && !caused_members.contains(&f.member_id))
        .map(|f| f.member_id.clone())
        .collect();
    let mut analysis = Analysis {
        independent_members,
        ..Default::default()
    };
    for (_, record) in failures {
        let against_root = root.role == SERVER
            && root.addresses.contains(&record.server)
            && in_incident(record.at_ms);
        if against_root {
            analysis.caused_failures += 1;
        } else if stopping_at_ms.is_some_and(|stop| record.at_ms >= stop) {
            analysis.shutdown_failures += 1;
        } else {
            analysis.independent_failures += 1;
        }
    }
    analysis.root_cause = Some(RootCause {
        member_id: root.member_id.clone(),
        role: root.role.clone(),
        at_ms: root.at_ms,
        reason: root.reason.clone(),
        caused_members,
        signature: None,
        class: None,
        evidence: None,
    });
    analysis
}

/// The analysis of a run whose driver died about `died_at_ms`: the driver leads; what failed
/// after its death is its doing, what failed before is independent.
fn abandoned(
    driver: &Failed,
    died_at_ms: i64,
    failed: &[Failed],
    failures: &[(String, FailureRecord)],
) -> Analysis {
    let mut by_time: Vec<&Failed> = failed.iter().filter(|f| f.member_id != DRIVER).collect();
    by_time.sort_by_key(|f| f.at_ms);
    let (caused, independent): (Vec<&Failed>, Vec<&Failed>) =
        by_time.into_iter().partition(|f| f.at_ms >= died_at_ms);
    let caused_failures = failures
        .iter()
        .filter(|(_, r)| r.at_ms >= died_at_ms)
        .count() as u64;
    Analysis {
        root_cause: Some(RootCause {
            member_id: driver.member_id.clone(),
            role: driver.role.clone(),
            at_ms: died_at_ms,
            reason: format!(
                "{} (it stopped renewing its lease at about this time)",
                driver.reason
            ),
            caused_members: caused.iter().map(|f| f.member_id.clone()).collect(),
            signature: None,
            class: None,
            evidence: None,
        }),
        independent_members: independent.iter().map(|f| f.member_id.clone()).collect(),
        caused_failures,
        shutdown_failures: 0,
        independent_failures: failures.len() as u64 - caused_failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, role: &str, at_ms: i64, addresses: &[&str]) -> Failed {
        Failed {
            member_id: id.into(),
            role: role.into(),
            at_ms,
            reason: format!("{id} failed"),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn record(member: &str, at_ms: i64, server: &str) -> (String, FailureRecord) {
        (
            member.into(),
            FailureRecord {
                at_ms,
                server: server.into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_killed_server_leads_and_its_clients_failures_are_grouped_under_it() {
        // The client saw the dead server 800 ms before the driver's poll saw it exit.
        let failed = [
            member("clients-0", "CLIENT", 10_000, &["s0:1"]),
            member("triton-0", "SERVER", 10_800, &["s0:1", "s0:2"]),
            member("clients-1", "CLIENT", 11_000, &["s1:1"]),
        ];
        let failures = [
            record("clients-0", 9_990, "s0:1"),
            record("clients-0", 10_500, "s0:1"),
            // After the driver began to stop: the other server is shutting down.
            record("clients-1", 12_000, "s1:1"),
            // Long before: independent of the kill.
            record("clients-1", 1_000, "s1:1"),
        ];
        let a = analyze(&failed, &failures, Some(11_500), None);
        let root = a.root_cause.unwrap();
        assert_eq!(root.member_id, "triton-0");
        assert_eq!(root.caused_members, ["clients-0"]);
        assert_eq!(a.independent_members, ["clients-1"]);
        assert_eq!(
            (
                a.caused_failures,
                a.shutdown_failures,
                a.independent_failures
            ),
            (2, 1, 1)
        );
    }

    #[test]
    fn without_a_server_in_the_incident_the_first_failure_leads() {
        let failed = [
            member("clients-1", "CLIENT", 20_000, &["s0:1"]),
            member("clients-0", "CLIENT", 10_000, &["s0:1"]),
            // Failed long after: its own incident.
            member("triton-0", "SERVER", 30_000, &["s0:1"]),
        ];
        let a = analyze(&failed, &[record("clients-0", 9_000, "s0:1")], None, None);
        let root = a.root_cause.unwrap();
        assert_eq!(root.member_id, "clients-0");
        assert!(root.caused_members.is_empty(), "a client causes no member");
        assert_eq!(a.independent_members, ["clients-1", "triton-0"]);
        assert_eq!(a.independent_failures, 1);
    }

    #[test]
    fn no_failed_member_no_root_cause() {
        let a = analyze(&[], &[record("c", 1, "s")], None, None);
        assert_eq!(a.root_cause, None);
        assert_eq!(a.independent_failures, 1);
    }

    #[test]
    fn a_dead_driver_leads_its_abandoned_run_and_what_failed_after_is_its_doing() {
        let lease_until = 1_000_000;
        let died = driver_died_by(lease_until);
        assert_eq!(died, 1_000_000 - 135_000);
        // The driver's FAILURE is recorded when the run is found abandoned, long after the
        // clients whose servers died with it ("Server exiting").
        let failed = [
            member("clients-0", "CLIENT", died + 2_000, &["s0:1"]),
            member("early", "CLIENT", died - 60_000, &["s1:1"]),
            member("driver", "DRIVER", lease_until + 500_000, &[]),
        ];
        let failures = [
            record("clients-0", died + 2_000, "s0:1"),
            record("early", died - 60_000, "s1:1"),
        ];
        let a = analyze(&failed, &failures, None, Some(died));
        let root = a.root_cause.unwrap();
        assert_eq!(
            (root.member_id.as_str(), root.role.as_str()),
            ("driver", "DRIVER")
        );
        assert_eq!(root.at_ms, died);
        assert_eq!(root.caused_members, ["clients-0"]);
        assert_eq!(a.independent_members, ["early"]);
        assert_eq!((a.caused_failures, a.independent_failures), (1, 1));
        // Not abandoned: the earliest failure leads as before.
        let a = analyze(&failed, &failures, None, None);
        assert_eq!(a.root_cause.unwrap().member_id, "early");
    }
}
