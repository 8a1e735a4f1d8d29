//! The driver's verdict on every failure a worker recorded (pure). Workers record each failure
//! signature's first examples in full and count the rest; the driver judges every record: its
//! signature, its class with the evidence ([`super::classify`]), the known issue that excuses it
//! ([`super::known`]), and whether it fails the run. The poll loop feeds it records and counts
//! and acts on what fails; at the end its signatures, with their history across runs, are the
//! report's.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use stress_common::signature::{ErrorKind, FailureClass, SignatureCount};
use stress_common::status::FailureRecord;

use super::classify::{Context, Evidence, InjectedWindow, ServerEnd, classify};
use super::known::KnownIssues;

/// A failed test that fails the run: whose, and why (the FAILURE event's details).
#[derive(Debug, Clone, PartialEq)]
pub struct FailedTest {
    pub member: String,
    pub reason: String,
}

/// What a signature is to the run: the status the report leads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Never seen in an earlier run of this matrix.
    New,
    /// Seen before (see its history).
    Recurring,
    /// Matched a known issue.
    Known,
    /// During a fault the run injected.
    Injected,
    /// Of a scenario that may fail (upstream's PerfAnalyzer).
    AllowedToFail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Recurring => "recurring",
            Status::Known => "known",
            Status::Injected => "injected",
            Status::AllowedToFail => "allowed to fail",
        }
    }
}

/// In how many of the last runs of the same matrix a signature was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub seen_in: u32,
    pub of_last: u32,
}

/// One signature of the run, judged (report.json `signatures[]`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgedSignature {
    /// `sig1-…`: the same failure in any run of any matrix.
    pub signature: String,
    pub version: u32,
    pub scenario: String,
    pub model: String,
    pub error_kind: ErrorKind,
    /// The normalized `expected …, got …`.
    pub message: String,
    pub class: FailureClass,
    /// Why that class: the evidence of its first example.
    pub evidence: String,
    /// Every failure of it, on every worker (the counted ones beyond the recorded examples).
    pub count: u64,
    pub first_at_ms: i64,
    pub last_at_ms: i64,
    pub members: Vec<String>,
    pub servers: Vec<String>,
    /// The known issue that excuses it.
    pub known_issue: Option<String>,
    /// Why it fails the run (None: it does not).
    pub fails: Option<String>,
    pub status: Status,
    /// None: no history (the first run of this matrix with signatures of this version).
    pub history: Option<History>,
    /// Its first recorded example, with the worker that saw it (and its forensics).
    pub example_member: String,
    pub example: FailureRecord,
}

/// The driver's judgement of a run's failures so far.
#[derive(Debug, Clone)]
pub struct Verdicts {
    known: KnownIssues,
    today: jiff::civil::Date,
    context: Context,
    last_failure_id: i64,
    signatures: BTreeMap<String, JudgedSignature>,
    /// The workers' latest counts: (member, signature id) -> count.
    counts: BTreeMap<(String, String), SignatureCount>,
    /// Known issues already failed for their rate (each fails once).
    over_rate: BTreeSet<String>,
    /// The records judged injected (at most [`MAX_INJECTED_KEPT`]): judged again once the
    /// faults' recoveries are known.
    injected: Vec<(String, FailureRecord)>,
}

/// How many injected records [`Verdicts`] keeps to judge again at the end (the workers record
/// at most a few examples per signature and burst).
pub const MAX_INJECTED_KEPT: usize = 10_000;

impl Verdicts {
    /// `today`: the day (UTC) known issues' `until` is judged against.
    pub fn new(known: KnownIssues, today: jiff::civil::Date) -> Self {
        Verdicts {
            known,
            today,
            context: Context::default(),
            last_failure_id: 0,
            signatures: BTreeMap::new(),
            counts: BTreeMap::new(),
            over_rate: BTreeSet::new(),
            injected: Vec::new(),
        }
    }

    /// The faults the run injected so far, each owning its server's failures up to the end of
    /// the recovery it is allowed (its actual recovery is known only later:
    /// [`Verdicts::refine_injected`]).
    pub fn injected(&mut self, windows: Vec<InjectedWindow>) {
        self.context.injected = windows;
    }

    /// At the end, with each fault's recovery known: a record judged injected whose test began
    /// after its fault's recovery is judged again, as any failure; returns those that fail the
    /// run.
    pub fn refine_injected(&mut self, windows: Vec<InjectedWindow>) -> Vec<FailedTest> {
        self.context.injected = windows;
        let mut failing = Vec::new();
        for (member, record) in std::mem::take(&mut self.injected) {
            let kind = record.signature().error_kind;
            if self.context.injected.iter().any(|w| w.owns(&record, kind)) {
                self.injected.push((member, record));
                continue;
            }
            // Counted once already, under the fault.
            if let Some(entry) = self.signatures.get_mut(&record.signature().id()) {
                entry.count = entry.count.saturating_sub(1);
            }
            if let Some(reason) = self.judge(&member, record) {
                failing.push(FailedTest { member, reason });
            }
        }
        failing
    }

    pub fn known(&self) -> &KnownIssues {
        &self.known
    }

    /// The id of the last failure record judged: the next read starts after it.
    pub fn last_failure_id(&self) -> i64 {
        self.last_failure_id
    }

    /// A server ended: failures that could not reach it are classified by it, those judged
    /// before the end was seen as well (a crashed server's clients often record their refused
    /// connections a poll before its exit or its failed probe is seen). A signature excused as
    /// a known issue or an injected fault stays as it was judged.
    pub fn server_ended(&mut self, end: ServerEnd) {
        self.context.server_ends.push(end);
        let outside = self.outside_note();
        for entry in self.signatures.values_mut() {
            if !matches!(entry.status, Status::New | Status::AllowedToFail) {
                continue;
            }
            let Evidence { class, why } = classify(&entry.example, entry.error_kind, &self.context);
            if class == entry.class && why == entry.evidence {
                continue;
            }
            if entry.fails.is_some() {
                let reason = failing_reason(&entry.example, &entry.signature, class, &why);
                entry.fails = Some(format!("{reason}{outside}"));
            }
            entry.class = class;
            entry.evidence = why;
        }
    }

    /// The note a failing reason ends with while the run injects faults.
    fn outside_note(&self) -> &'static str {
        if self.context.injected.is_empty() {
            ""
        } else {
            " (outside every injected fault's window)"
        }
    }

    /// Judges new failure records (`(id, member, record)`, in id order); returns those that fail
    /// the run, in order.
    pub fn records(&mut self, records: Vec<(i64, String, FailureRecord)>) -> Vec<FailedTest> {
        let mut failing = Vec::new();
        for (id, member, record) in records {
            self.last_failure_id = self.last_failure_id.max(id);
            if let Some(reason) = self.judge(&member, record) {
                failing.push(FailedTest { member, reason });
            }
        }
        failing
    }

    /// Judges one record: folds it into its signature; Some(why) when it fails the run.
    fn judge(&mut self, member: &str, record: FailureRecord) -> Option<String> {
        let signature = record.signature();
        let id = signature.id();
        let kind = signature.error_kind;
        let Evidence { class, why } = classify(&record, kind, &self.context);
        if class == FailureClass::Injected && self.injected.len() < MAX_INJECTED_KEPT {
            self.injected.push((member.to_string(), record.clone()));
        }
        let outside = self.outside_note();
        let known = (class != FailureClass::Injected)
            .then(|| self.known.find(&record, kind, class))
            .flatten();
        let allowed = stress_common::scenario::Scenario::parse(&record.scenario)
            .is_some_and(|s| s.allowed_to_fail());
        let (status, fails) = match known {
            _ if class == FailureClass::Injected => (Status::Injected, None),
            Some(k) if k.expired(self.today) => (
                Status::Known,
                Some(format!(
                    "{record} [{id}: known issue {} expired on {}]",
                    k.issue.id,
                    k.issue.until.as_deref().unwrap_or_default()
                )),
            ),
            Some(_) => (Status::Known, None),
            None if allowed => (Status::AllowedToFail, None),
            // New or recurring: the history at the end tells which.
            None => (
                Status::New,
                Some(format!(
                    "{}{outside}",
                    failing_reason(&record, &id, class, &why)
                )),
            ),
        };
        let entry = self
            .signatures
            .entry(id.clone())
            .or_insert_with(|| JudgedSignature {
                signature: id,
                version: signature.version,
                scenario: signature.scenario.clone(),
                model: signature.model.clone(),
                error_kind: kind,
                message: signature.message.clone(),
                class,
                evidence: why.clone(),
                count: 0,
                first_at_ms: record.at_ms,
                last_at_ms: record.at_ms,
                members: Vec::new(),
                servers: Vec::new(),
                known_issue: known.map(|k| k.issue.id.clone()),
                fails: None,
                status,
                history: None,
                example_member: member.to_string(),
                example: record.clone(),
            });
        entry.count += 1;
        entry.first_at_ms = entry.first_at_ms.min(record.at_ms);
        entry.last_at_ms = entry.last_at_ms.max(record.at_ms);
        if !entry.members.iter().any(|m| m == member) {
            entry.members.push(member.to_string());
        }
        if !entry.servers.contains(&record.server) {
            entry.servers.push(record.server.clone());
        }
        // A later example that fails makes the signature fail (an earlier one was excused): it
        // becomes the signature's example, with its evidence, so the report's class, evidence
        // and example agree.
        if entry.fails.is_none() && fails.is_some() {
            entry.fails = fails.clone();
            entry.status = status;
            entry.class = class;
            entry.evidence = why;
            entry.example_member = member.to_string();
            entry.example = record;
            entry.known_issue = known.map(|k| k.issue.id.clone());
        }
        fails
    }

    /// The workers' latest counts per signature (each worker's replaces its last).
    pub fn counts(&mut self, counts: Vec<(String, SignatureCount)>) {
        for (member, c) in counts {
            self.counts.insert((member, c.signature.id()), c);
        }
        for entry in self.signatures.values_mut() {
            let counted: Vec<&SignatureCount> = self
                .counts
                .iter()
                .filter(|((_, id), _)| *id == entry.signature)
                .map(|(_, c)| c)
                .collect();
            if !counted.is_empty() {
                entry.count = entry.count.max(counted.iter().map(|c| c.count).sum());
                entry.first_at_ms = counted
                    .iter()
                    .map(|c| c.first_at_ms)
                    .fold(entry.first_at_ms, i64::min);
                entry.last_at_ms = counted
                    .iter()
                    .map(|c| c.last_at_ms)
                    .fold(entry.last_at_ms, i64::max);
            }
        }
    }

    /// A known issue whose matches are beyond what a load of `hours` allows (each fails once).
    /// While the run goes, `hours` is the whole planned load (a count beyond it cannot get
    /// better); at the end, the actual load.
    pub fn over_rate(&mut self, hours: f64) -> Option<FailedTest> {
        for known in self.known.entries() {
            if self.over_rate.contains(&known.issue.id) {
                continue;
            }
            let Some(allowed) = known.allowance(hours) else {
                continue;
            };
            let matched: Vec<&JudgedSignature> = self
                .signatures
                .values()
                .filter(|s| s.known_issue.as_deref() == Some(known.issue.id.as_str()))
                .collect();
            let total: u64 = matched.iter().map(|s| s.count).sum();
            if total > allowed {
                self.over_rate.insert(known.issue.id.clone());
                let rate = known.issue.max_per_hour.unwrap_or_default();
                return Some(FailedTest {
                    member: matched[0].example_member.clone(),
                    reason: format!(
                        "known issue {}: {total} matching failures, more than the {allowed} that \
                         max_per_hour {rate} allows over {hours:.2} h of load ({})",
                        known.issue.id, matched[0].signature
                    ),
                });
            }
        }
        None
    }

    /// Every signature of the run so far, by first occurrence.
    pub fn signatures(&self) -> Vec<JudgedSignature> {
        let mut out: Vec<JudgedSignature> = self.signatures.values().cloned().collect();
        out.sort_by(|a, b| (a.first_at_ms, &a.signature).cmp(&(b.first_at_ms, &b.signature)));
        out
    }
}

/// A signature's status once its history is known: known, injected and allowed-to-fail stay;
/// otherwise new when no earlier run of the matrix had it (or there is no history), recurring
/// when one did.
pub fn with_history(
    mut s: JudgedSignature,
    history: Option<History>,
    ever_seen: bool,
) -> JudgedSignature {
    s.history = history;
    if matches!(s.status, Status::New | Status::Recurring) {
        s.status = if ever_seen {
            Status::Recurring
        } else {
            Status::New
        };
    }
    s
}

/// A run's signatures as the store keeps them (the report's, and the next runs' history).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSignatures {
    /// The normalization version of its signatures.
    pub version: u32,
    /// Why there is no history, or why it restarts (None: there is one).
    pub history_note: Option<String>,
    pub signatures: Vec<JudgedSignature>,
    pub known_issues: Vec<KnownOutcome>,
}

/// The run's signatures in the store (one document, under the empty key).
impl stress_common::store::Document for RunSignatures {
    const KIND: &'static str = "signatures";
}

/// A known issue in a run: what it matched, or that it seems gone.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnownOutcome {
    pub id: String,
    pub reason: String,
    pub link: Option<String>,
    /// Failures it matched in this run.
    pub count: u64,
    /// `matched`, `not seen`, or `maybe fixed` (not seen here nor in the last runs of the
    /// matrix that had history).
    pub status: String,
}

/// The run's signatures with their history: `earlier` are the signatures of the earlier runs of
/// the same matrix, newest first (as many as were found); a signature's history counts the last
/// `window` of them of the same normalization version, and it is recurring when any earlier one
/// had it. A known issue not matched here nor in the last `window` runs is `maybe fixed`.
pub fn with_histories(
    signatures: Vec<JudgedSignature>,
    known: &KnownIssues,
    earlier: &[RunSignatures],
    window: usize,
) -> RunSignatures {
    let version = stress_common::signature::NORMALIZATION_VERSION;
    let comparable: Vec<&RunSignatures> = earlier.iter().filter(|r| r.version == version).collect();
    let history_note = if comparable.is_empty() {
        Some(match earlier.iter().map(|r| r.version).max() {
            Some(v) => format!(
                "history restarts here: the earlier runs of this matrix have signatures of \
                 version {v}, this run's are version {version}"
            ),
            None => "no history: the first run of this matrix with failure signatures".into(),
        })
    } else {
        None
    };
    let last = &comparable[..comparable.len().min(window)];
    let signatures: Vec<JudgedSignature> = signatures
        .into_iter()
        .map(|s| {
            let had = |r: &RunSignatures| r.signatures.iter().any(|o| o.signature == s.signature);
            let history = (!last.is_empty()).then(|| History {
                seen_in: last.iter().filter(|r| had(r)).count() as u32,
                of_last: last.len() as u32,
            });
            let ever = comparable.iter().any(|r| had(r));
            with_history(s, history, ever)
        })
        .collect();
    let known_issues = known
        .entries()
        .iter()
        .map(|k| {
            let id = &k.issue.id;
            let count: u64 = signatures
                .iter()
                .filter(|s| s.known_issue.as_deref() == Some(id.as_str()))
                .map(|s| s.count)
                .sum();
            let matched_before = last
                .iter()
                .any(|r| r.known_issues.iter().any(|o| o.id == *id && o.count > 0));
            let status = if count > 0 {
                "matched"
            } else if last.len() >= window && !matched_before {
                "maybe fixed"
            } else {
                "not seen"
            };
            KnownOutcome {
                id: id.clone(),
                reason: k.issue.reason.clone(),
                link: k.issue.link.clone(),
                count,
                status: status.into(),
            }
        })
        .collect();
    RunSignatures {
        version,
        history_note,
        signatures,
        known_issues,
    }
}

/// Why a new failure fails the run: the record, its signature, class and evidence.
fn failing_reason(record: &FailureRecord, id: &str, class: FailureClass, why: &str) -> String {
    format!("{record} [{id}, {class}: {why}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::fixtures::{self, step};

    const REJECTED: &str =
        "server error (InvalidArgument): sequence 1048577 must specify the START flag";

    fn reaper(at_ms: i64, forgot_start: bool) -> FailureRecord {
        let steps = if forgot_start {
            vec![step(at_ms, 0, "", REJECTED)]
        } else {
            vec![
                step(at_ms - 3000, 3000, "START", "ok"),
                step(at_ms, 0, "", REJECTED),
            ]
        };
        fixtures::sequence_failure(at_ms, REJECTED, steps, Some(3_000_000))
    }

    fn known(yaml: &str) -> KnownIssues {
        KnownIssues::new(crate::matrix::parse_known_issues(yaml, "k.yaml").unwrap())
    }

    fn day(s: &str) -> jiff::civil::Date {
        s.parse().unwrap()
    }

    const KNOWN: &str = r#"
- id: seq-reaper
  match: { model: sequence_nobatch, class: server, message: "must specify the START flag" }
  reason: upstream
  until: 2026-12-31
  max_per_hour: 60
"#;

    #[test]
    fn failures_of_an_injected_fault_do_not_fail_until_they_began_after_its_recovery() {
        let window = |to_ms| InjectedWindow {
            name: "kill-triton".into(),
            addresses: vec!["127.0.0.1:8001".into()],
            from_ms: 9_000,
            to_ms,
            back_ms: i64::MAX,
        };
        let mut v = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        // While the run goes, the fault owns its server's failures up to its allowed recovery.
        v.injected(vec![window(40_000)]);
        let begun_at = |at_ms: i64, started_ms: i64| {
            let mut r = reaper(at_ms, true);
            r.forensics.as_mut().unwrap().test_started_ms = Some(started_ms);
            r
        };
        let failing = v.records(vec![
            (1, "clients-0".into(), begun_at(10_000, 9_500)),
            (2, "clients-0".into(), begun_at(25_000, 24_000)),
        ]);
        assert!(failing.is_empty(), "{failing:?}");
        assert_eq!(v.signatures()[0].status, Status::Injected);
        // The clients recovered at 20 s: the test begun at 24 s is a failure of its own.
        let failing = v.refine_injected(vec![window(20_000)]);
        assert_eq!(failing.len(), 1, "{failing:?}");
        assert!(
            failing[0]
                .reason
                .ends_with("(outside every injected fault's window)"),
            "{}",
            failing[0].reason
        );
        let s = v.signatures();
        assert_eq!(s[0].count, 2, "counted once each");
        assert_eq!(s[0].status, Status::New);
        // Its example and evidence are the failing record's, not the excused one's.
        assert_eq!(s[0].example.at_ms, 25_000);
        assert!(
            !s[0].evidence.contains("injected fault"),
            "{}",
            s[0].evidence
        );
        // A failure before any fault is named without the window note.
        let mut plain = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        let failing = plain.records(vec![(1, "clients-0".into(), reaper(10_000, true))]);
        assert!(
            !failing[0].reason.contains("window"),
            "{}",
            failing[0].reason
        );
    }

    /// Seen on pods: tritonserver died of SIGSEGV; its clients' refused connections were
    /// judged a poll before its failed probe was seen, as the network's.
    #[test]
    fn a_refused_connection_judged_before_its_server_s_end_is_seen_becomes_the_server_s() {
        let refused = |at_ms| {
            let mut r = reaper(at_ms, true);
            r.actual = "transport error: tcp connect error: Connection refused".into();
            r.error_kind = Some(ErrorKind::Transport);
            r
        };
        let end = |member: &str, address: &str| ServerEnd {
            member: member.into(),
            addresses: vec![address.into()],
            at_ms: 10_200,
            reason: "failed its liveness probe: connection refused".into(),
        };
        let mut v = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        let failing = v.records(vec![(1, "clients-0".into(), refused(10_000))]);
        assert_eq!(failing.len(), 1);
        assert_eq!(v.signatures()[0].class, FailureClass::Infrastructure);
        // Another server's end changes nothing.
        v.server_ended(end("triton-1", "127.0.0.1:9001"));
        assert_eq!(v.signatures()[0].class, FailureClass::Infrastructure);
        v.server_ended(end("triton-0", "127.0.0.1:8001"));
        let s = &v.signatures()[0];
        assert_eq!(s.class, FailureClass::Server);
        assert!(s.evidence.contains("triton-0 ended"), "{}", s.evidence);
        let fails = s.fails.as_deref().unwrap();
        assert!(fails.contains(", server: its server triton-0"), "{fails}");
        // A server's end long after the failure says nothing of it.
        let mut late = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        late.records(vec![(1, "clients-0".into(), refused(1_000))]);
        late.server_ended(end("triton-0", "127.0.0.1:8001"));
        assert_eq!(late.signatures()[0].class, FailureClass::Infrastructure);
    }

    #[test]
    fn a_known_server_bug_is_excused_and_a_client_that_forgot_start_is_not() {
        let mut v = Verdicts::new(known(KNOWN), day("2026-11-27"));
        let failing = v.records(vec![
            (1, "clients-0".into(), reaper(10_000, false)),
            (2, "clients-1".into(), reaper(11_000, false)),
        ]);
        assert!(failing.is_empty(), "{failing:?}");
        let s = v.signatures();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].status, Status::Known);
        assert_eq!(s[0].known_issue.as_deref(), Some("seq-reaper"));
        assert_eq!(s[0].class, FailureClass::Server);
        assert_eq!(s[0].count, 2);
        assert_eq!(s[0].members, ["clients-0", "clients-1"]);
        assert_eq!(v.last_failure_id(), 2);

        let failing = v.records(vec![(3, "clients-0".into(), reaper(12_000, true))]);
        assert_eq!(failing.len(), 1, "the client's own mistake fails the run");
        assert!(
            failing[0]
                .reason
                .starts_with("SequenceValid on 127.0.0.1:8001 model sequence_nobatch"),
            "{}",
            failing[0].reason
        );
        assert!(
            failing[0].reason.contains("client:"),
            "{}",
            failing[0].reason
        );
        assert_eq!(
            v.signatures()[0].status,
            Status::New,
            "the signature now fails"
        );
    }

    #[test]
    fn without_the_known_issue_the_server_bug_fails_the_run_with_its_evidence() {
        let mut v = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        let failing = v.records(vec![(1, "clients-0".into(), reaper(10_000, false))]);
        assert_eq!(failing.len(), 1);
        assert!(
            failing[0]
                .reason
                .contains("server: the server contradicted itself"),
            "{}",
            failing[0].reason
        );
        let s = &v.signatures()[0];
        assert_eq!((s.class, s.status), (FailureClass::Server, Status::New));
        assert!(s.fails.is_some());
    }

    #[test]
    fn an_expired_entry_or_a_rate_beyond_the_allowance_fails_the_run() {
        let mut v = Verdicts::new(known(KNOWN), day("2027-01-01"));
        let failing = v.records(vec![(1, "clients-0".into(), reaper(10_000, false))]);
        assert_eq!(failing.len(), 1);
        assert!(
            failing[0]
                .reason
                .contains("known issue seq-reaper expired on 2026-12-31"),
            "{}",
            failing[0].reason
        );

        let mut v = Verdicts::new(known(KNOWN), day("2026-11-27"));
        assert!(
            v.records(vec![(1, "clients-0".into(), reaper(10_000, false))])
                .is_empty()
        );
        let count = |n: u64| SignatureCount {
            signature: reaper(0, false).signature(),
            count: n,
            first_at_ms: 10_000,
            last_at_ms: 20_000,
        };
        // 60 an hour: 5 in a quarter hour's allowance of 15.
        v.counts(vec![("clients-0".into(), count(5))]);
        assert_eq!(v.over_rate(0.25), None);
        v.counts(vec![("clients-0".into(), count(16))]);
        let over = v.over_rate(0.25).expect("16 is beyond 15");
        assert!(
            over.reason
                .starts_with("known issue seq-reaper: 16 matching failures, more than the 15"),
            "{}",
            over.reason
        );
        assert_eq!(
            v.signatures()[0].count,
            16,
            "the counted ones beyond the examples"
        );
        v.counts(vec![("clients-0".into(), count(30))]);
        assert_eq!(v.over_rate(0.25), None, "fails once");
    }

    #[test]
    fn history_makes_new_or_recurring_and_leaves_known_alone() {
        let mut v = Verdicts::new(KnownIssues::default(), day("2026-11-27"));
        v.records(vec![(1, "c".into(), reaper(10_000, false))]);
        let s = v.signatures().remove(0);
        let h = History {
            seen_in: 3,
            of_last: 7,
        };
        assert_eq!(
            with_history(s.clone(), Some(h), true).status,
            Status::Recurring
        );
        assert_eq!(with_history(s.clone(), Some(h), false).status, Status::New);
        let mut known = s;
        known.status = Status::Known;
        assert_eq!(with_history(known, Some(h), true).status, Status::Known);
    }

    #[test]
    fn histories_over_the_last_runs_of_the_matrix_and_known_issues_maybe_fixed() {
        let mut v = Verdicts::new(known(KNOWN), day("2026-11-27"));
        v.records(vec![(1, "c".into(), reaper(10_000, true))]);
        let forgot = v.signatures();
        let earlier_run = |with: bool, reaper_count: u64| RunSignatures {
            version: stress_common::signature::NORMALIZATION_VERSION,
            history_note: None,
            signatures: if with { forgot.clone() } else { vec![] },
            known_issues: vec![KnownOutcome {
                id: "seq-reaper".into(),
                reason: "upstream".into(),
                link: None,
                count: reaper_count,
                status: String::new(),
            }],
        };
        // Seen in 2 of the last 3 runs; the known issue matched nowhere in them.
        let earlier = [
            earlier_run(true, 0),
            earlier_run(false, 0),
            earlier_run(true, 0),
        ];
        let r = with_histories(forgot.clone(), v.known(), &earlier, 3);
        assert_eq!(r.history_note, None);
        assert_eq!(r.signatures[0].status, Status::Recurring);
        assert_eq!(
            r.signatures[0].history,
            Some(History {
                seen_in: 2,
                of_last: 3
            })
        );
        assert_eq!(r.known_issues[0].status, "maybe fixed");
        // With fewer runs than the window it is only "not seen"; one that matched is not gone.
        assert_eq!(
            with_histories(forgot.clone(), v.known(), &earlier[..2], 3).known_issues[0].status,
            "not seen"
        );
        let matched_before = [
            earlier_run(false, 4),
            earlier_run(false, 0),
            earlier_run(false, 0),
        ];
        let r = with_histories(forgot.clone(), v.known(), &matched_before, 3);
        assert_eq!(r.known_issues[0].status, "not seen");
        assert_eq!(r.signatures[0].status, Status::New, "never seen before");
        // No earlier run: no history, said so; another normalization: history restarts.
        let first = with_histories(forgot.clone(), v.known(), &[], 7);
        assert!(first.history_note.unwrap().starts_with("no history"));
        assert_eq!(first.signatures[0].history, None);
        assert_eq!(first.signatures[0].status, Status::New);
        let mut old = earlier_run(true, 0);
        old.version = 0;
        let restarted = with_histories(forgot, v.known(), &[old], 7);
        assert!(
            restarted
                .history_note
                .unwrap()
                .starts_with("history restarts here")
        );
        assert_eq!(restarted.signatures[0].status, Status::New);
    }
}
