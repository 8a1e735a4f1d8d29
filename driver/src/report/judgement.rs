//! The report's judgement of a run's facts: pure and synchronous (no store, no clock), so the
//! same facts always give the same judgement and a test needs no store. Judged once: the
//! judgement of an ended run is a store document ([`Judgement::KIND`]) that later reports read
//! rather than judge again (see `Report::from_store`).

use super::facts::{RunFacts, first_failures};
use super::{ReportError, group_of, member_addresses, not_comparable, uncounted};
use crate::judge::memory::{self, Memory};
use crate::judge::rootcause::{self, Analysis, Failed};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stress_common::status::Role;
use stress_common::store::{ABANDONED, RUNNING};
use stress_common::triton_metrics::ServerSample;

/// What the report judges of a run's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Judgement {
    /// The run's verdict; for a run without one, running, or abandoned once its lease ran out.
    pub verdict: String,
    /// Each worker's memory finding (a worker without one is left out).
    pub worker_memory: BTreeMap<String, String>,
    /// Each server's memory, judged, by member (every server of the run).
    pub server_memory: BTreeMap<String, ServerMemory>,
    pub reconciliation: Vec<crate::judge::reconcile::Reconciliation>,
    pub analysis: Analysis,
    pub faults: Vec<crate::judge::faults::FaultOutcome>,
}

impl stress_common::store::Document for Judgement {
    const KIND: &'static str = "judgement";
}

/// The verdict on one server's memory (its series' `memory_*` fields in report.json).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServerMemory {
    /// Still growing through the load's steady state, in words (None: steady, or not judged).
    pub finding: Option<String>,
    /// Why it was not judged (too few steady-state samples, or none), when it was not.
    pub not_judged: Option<String>,
    /// The steady-state Theil–Sen slope (bytes/s; None: not judged). Stored as its shortest
    /// decimal text, parsed back exactly: a report read from the store must show the digits
    /// the run's own report showed.
    #[serde(default, with = "exact_f64")]
    pub slope_bytes_per_s: Option<f64>,
}

/// An `Option<f64>` as text that parses back to the same bits (serde_json's own float parsing
/// may be one unit in the last place off).
mod exact_f64 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&v.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| text.parse().map_err(D::Error::custom))
            .transpose()
    }
}

/// Why a server without memory samples is not judged.
pub const NOT_SAMPLED: &str = "its memory was not sampled: an external server, or a pod the \
     driver could not exec in (pods/exec, `cat`; the driver's log says why)";

/// Judges a run's facts (an error: model counts that do not decode).
pub(crate) fn judge(facts: &RunFacts) -> Result<Judgement, ReportError> {
    let load = facts.load_phase();
    Ok(Judgement {
        reconciliation: reconciliation(facts)?,
        verdict: verdict(facts),
        worker_memory: worker_memory(facts, load),
        server_memory: server_memory(facts, load),
        analysis: root_cause(facts),
        faults: match &facts.fault_log {
            Some(log) => crate::judge::faults::judge(&log.faults, &facts.outages),
            None => Vec::new(),
        },
    })
}

fn verdict(facts: &RunFacts) -> String {
    let run = &facts.run;
    // A run without a verdict whose lease ran out lost its driver.
    run.verdict.clone().unwrap_or_else(|| {
        let lost = run
            .lease_until_ms
            .is_some_and(|until| until < facts.read_at_ms);
        if lost { ABANDONED } else { RUNNING }.into()
    })
}

/// Each worker whose memory still grows over the load phase's steady state.
fn worker_memory(facts: &RunFacts, load: Option<(f64, f64)>) -> BTreeMap<String, String> {
    facts
        .worker_rss_by_member()
        .into_iter()
        .filter_map(|(member, rss)| {
            let finding = memory::judge(&rss, load).finding()?;
            Some((member, finding))
        })
        .collect()
}

/// Each server's memory over the load phase's steady state (`load`); for a server an injected
/// fault started again, only the part after its last start (a new process warms up again).
fn server_memory(facts: &RunFacts, load: Option<(f64, f64)>) -> BTreeMap<String, ServerMemory> {
    let restarts = facts
        .fault_log
        .as_ref()
        .map(|log| crate::judge::faults::restarts(&log.faults))
        .unwrap_or_default();
    facts
        .server_ids()
        .into_iter()
        .map(|(member_id, _)| {
            let own: Vec<&ServerSample> = facts
                .server_samples
                .iter()
                .filter(|(m, _)| *m == member_id)
                .map(|(_, s)| s)
                .collect();
            let restarted_ms = restarts.get(&member_id).copied();
            let judged = memory_of(facts.run.started_at_ms, &own, load, restarted_ms);
            (member_id, judged)
        })
        .collect()
}

/// One server's memory from its samples (`restarted_ms`: when an injected fault last started
/// it again); a finding says when its growth would reach its memory limit, where it has one.
fn memory_of(
    started_ms: i64,
    own: &[&ServerSample],
    load: Option<(f64, f64)>,
    restarted_ms: Option<i64>,
) -> ServerMemory {
    let rss: Vec<(f64, f64)> = own
        .iter()
        .filter_map(|s| Some((crate::report::timeline::t_s(started_ms, s), s.rss_bytes?)))
        .collect();
    let Some(&(last_s, last)) = rss.last() else {
        return ServerMemory {
            not_judged: Some(NOT_SAMPLED.into()),
            ..Default::default()
        };
    };
    let load = match restarted_ms {
        Some(at_ms) => {
            let started_again = (at_ms - started_ms) as f64 / 1000.0;
            let (from, to) = load.unwrap_or((started_again, last_s));
            Some((from.max(started_again), to))
        }
        None => load,
    };
    let judged = memory::judge(&rss, load);
    let limit = own.iter().rev().find_map(|s| s.memory_limit_bytes);
    let finding = judged
        .finding()
        .map(|finding| match (judged.trend(), limit) {
            (Some(trend), Some(limit)) => {
                format!("{finding}; {}", memory::limit_horizon(trend, last, limit))
            }
            _ => finding,
        });
    ServerMemory {
        finding,
        slope_bytes_per_s: judged.trend().map(|t| t.bytes_per_s),
        not_judged: match judged {
            Memory::NotJudged(why) => Some(why),
            Memory::Steady(_) | Memory::Growing(_) => None,
        },
    }
}

/// Per model: the servers' successes against the workers' OK answers.
fn reconciliation(
    facts: &RunFacts,
) -> Result<Vec<crate::judge::reconcile::Reconciliation>, ReportError> {
    let worker_counts: Vec<_> = facts
        .model_counts
        .iter()
        .map(|(_, _, c)| c.clone())
        .collect();
    let not_comparable = not_comparable(
        &facts.server_ids(),
        &facts.server_samples,
        &facts.model_counts,
        facts.workers_started_ms(),
    );
    crate::judge::reconcile::reconcile(
        &worker_counts,
        &facts.server_samples,
        not_comparable.as_deref(),
        uncounted(&facts.members, &facts.diagnostics).as_deref(),
    )
    .map_err(|e| facts.corrupt(format!("model counts: {e}")))
}

/// The root cause and what it explains, classed by the run's signatures.
fn root_cause(facts: &RunFacts) -> Analysis {
    let failed: Vec<Failed> = first_failures(&facts.events)
        .into_iter()
        .map(|e| Failed {
            member_id: e.member_id.clone(),
            role: group_of(&facts.members, &e.member_id)
                .1
                .map_or(
                    if e.member_id == stress_common::status::DRIVER_MEMBER {
                        "DRIVER"
                    } else {
                        "?"
                    },
                    Role::as_str,
                )
                .to_string(),
            at_ms: e.at_ms,
            reason: e.details.clone(),
            addresses: member_addresses(&facts.members, &e.member_id),
        })
        .collect();
    // A run its driver abandoned: the driver died about when it stopped renewing its lease.
    let driver_died_at_ms = (facts.run.verdict.as_deref() == Some(ABANDONED))
        .then_some(facts.run.lease_until_ms)
        .flatten()
        .map(rootcause::driver_died_by);
    let mut analysis = rootcause::analyze(
        &failed,
        &facts.failures,
        facts.stopping_at_ms(),
        driver_died_at_ms,
    );
    if let Some(root) = &mut analysis.root_cause {
        root.judge(&facts.signatures.signatures);
    }
    analysis
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::facts::LatencyFacts;
    use stress_common::status::{EventKind, FailureRecord};
    use stress_common::store::{EventRow, Member, RunRow};

    fn member(id: &str, role: Role, address: &str) -> Member {
        Member {
            run_id: "r1".into(),
            member_id: id.into(),
            role,
            group_name: id.split('-').next().unwrap().into(),
            index: 0,
            address: address.into(),
            process_name: id.into(),
            corr_id_base: None,
            corr_id_block_size: None,
            command: String::new(),
        }
    }

    fn failure_event(id: i64, member_id: &str, at_ms: i64) -> EventRow {
        EventRow {
            id,
            member_id: member_id.into(),
            at_ms,
            kind: EventKind::Failure,
            details: format!("{member_id} failed"),
        }
    }

    /// A run of one server and its client, both failed, the client's requests failing against
    /// the server just before it: facts built in memory, no store.
    fn facts() -> RunFacts {
        RunFacts {
            run: RunRow {
                run_id: "r1".into(),
                name: "judged".into(),
                matrix_yaml: String::new(),
                launcher: "local".into(),
                started_at_ms: 0,
                finished_at_ms: Some(10_000),
                verdict: Some("FAILED".into()),
                lease_until_ms: None,
                fingerprint: None,
            },
            members: vec![
                member(
                    "triton-0",
                    Role::Server,
                    "grpc=10.0.0.1:8001 http=10.0.0.1:8000",
                ),
                member("clients-0", Role::Client, "10.0.0.1:8001"),
            ],
            scenario_counts: Vec::new(),
            model_counts: Vec::new(),
            qps_span: Default::default(),
            worker_rss: Vec::new(),
            qps: Vec::new(),
            diagnostics: BTreeMap::new(),
            identities: BTreeMap::new(),
            client_programs: BTreeMap::new(),
            // The client's failure is recorded first, but the server failed first.
            events: vec![
                failure_event(1, "clients-0", 1_500),
                failure_event(2, "triton-0", 1_000),
            ],
            phases: Vec::new(),
            sweep: None,
            baseline: None,
            change_points: None,
            slo: Vec::new(),
            latency: LatencyFacts::default(),
            server_samples: Vec::new(),
            fault_log: None,
            outages: Vec::new(),
            traces: BTreeMap::new(),
            traced_tail: None,
            span_receiver: None,
            failure_count: 2,
            failures: [(1_400, "10.0.0.1:8001"), (1_450, "10.0.0.9:8001")]
                .map(|(at_ms, server)| {
                    let record = FailureRecord {
                        at_ms,
                        server: server.into(),
                        ..Default::default()
                    };
                    ("clients-0".to_string(), record)
                })
                .into(),
            excerpts: Vec::new(),
            signatures: Default::default(),
            read_at_ms: 20_000,
        }
    }

    #[test]
    fn a_failed_server_is_the_root_cause_of_its_clients_failures() {
        let judgement = judge(&facts()).unwrap();
        let root = judgement.analysis.root_cause.expect("a root cause");
        assert_eq!(
            (root.member_id.as_str(), root.role.as_str(), root.at_ms),
            ("triton-0", "SERVER", 1_000)
        );
        assert_eq!(root.caused_members, ["clients-0"]);
        assert!(judgement.analysis.independent_members.is_empty());
        assert_eq!(judgement.analysis.caused_failures, 1);
        assert_eq!(judgement.analysis.independent_failures, 1);
        assert_eq!(judgement.verdict, "FAILED");
        assert!(judgement.faults.is_empty() && judgement.worker_memory.is_empty());
        assert_eq!(
            judgement.server_memory["triton-0"].not_judged.as_deref(),
            Some(NOT_SAMPLED),
            "every server is judged, an unsampled one as such"
        );
    }

    #[test]
    fn a_run_without_a_verdict_is_abandoned_once_its_lease_ran_out() {
        let mut facts = facts();
        facts.run.verdict = None;
        facts.run.lease_until_ms = Some(facts.read_at_ms + 1);
        assert_eq!(judge(&facts).unwrap().verdict, RUNNING);
        facts.run.lease_until_ms = Some(facts.read_at_ms - 1);
        assert_eq!(judge(&facts).unwrap().verdict, ABANDONED);
    }

    #[test]
    fn an_abandoned_runs_dead_driver_leads() {
        let mut facts = facts();
        facts.run.verdict = Some(ABANDONED.into());
        facts.run.lease_until_ms = Some(1_000_000);
        let driver = stress_common::status::DRIVER_MEMBER;
        facts.events.push(failure_event(3, driver, 1_000_000));
        let root = judge(&facts).unwrap().analysis.root_cause.unwrap();
        assert_eq!(
            (root.member_id.as_str(), root.role.as_str()),
            (driver, "DRIVER")
        );
        assert!(root.at_ms < 1_000_000, "died before its lease ran out");
    }

    /// A server killed and started again by an injected fault is a new process: its memory is
    /// judged after its last start (leaving out the new process's warm-up), not across the
    /// fault. Here the first process is flat at 400 MiB; the one started at 150 s leaks 1 MiB/s.
    /// Across the fault the drop hides the leak; judged after the start it is found.
    #[test]
    fn memory_of_a_restarted_server_is_judged_after_its_last_start() {
        const MIB: f64 = 1024.0 * 1024.0;
        let samples: Vec<ServerSample> = (0..=60)
            .map(|i| {
                let t_s = f64::from(i) * 5.0;
                let rss = if t_s <= 150.0 {
                    400.0 * MIB
                } else {
                    (100.0 + (t_s - 150.0)) * MIB
                };
                ServerSample {
                    at_ms: i64::from(i) * 5000,
                    interval_ms: 5000,
                    rss_bytes: Some(rss),
                    ..Default::default()
                }
            })
            .collect();
        let own: Vec<&ServerSample> = samples.iter().collect();
        let load = Some((0.0, 300.0));
        let across = memory_of(0, &own, load, None);
        assert_eq!(across.finding, None, "{across:?}");
        let after = memory_of(0, &own, load, Some(152_000));
        assert!(
            after
                .finding
                .as_deref()
                .is_some_and(|f| f.contains("kept growing")),
            "{after:?}"
        );
        let slope = after.slope_bytes_per_s.unwrap();
        assert!((slope / MIB - 1.0).abs() < 0.01, "{slope}");
        // Under a 1 GiB limit (a pod's cgroup), 250 MiB at the end and 1 MiB/s: the finding
        // says when it gets there.
        let limited: Vec<ServerSample> = samples
            .iter()
            .map(|s| ServerSample {
                memory_limit_bytes: Some(1024.0 * MIB),
                ..s.clone()
            })
            .collect();
        let limited: Vec<&ServerSample> = limited.iter().collect();
        let under_limit = memory_of(0, &limited, load, Some(152_000));
        let finding = under_limit.finding.as_deref().unwrap();
        assert!(
            finding.contains("kept growing")
                && finding.ends_with(
                    "at this rate it reaches its memory limit (1.0 GiB, now at 24%) in about \
                     13 min, where the kernel kills it (OOM)"
                ),
            "{finding}"
        );
        // No samples after the start: not judged, rather than judged on the old process.
        let s = memory_of(0, &own[..20], None, Some(95_000));
        assert!(s.not_judged.is_some() && s.finding.is_none(), "{s:?}");
        // Too few samples: not judged, and why; none at all: not sampled.
        let s = memory_of(0, &own[..3], None, None);
        assert!(
            s.not_judged
                .as_deref()
                .is_some_and(|why| why.contains("fewer than 6")),
            "{s:?}"
        );
        assert_eq!(
            memory_of(0, &[], load, None).not_judged.as_deref(),
            Some(NOT_SAMPLED)
        );
    }

    /// The judgement is a store document: its JSON reads back to the same judgement, a
    /// slope's every bit included (serde_json's own float parsing need not give them back).
    #[test]
    fn a_judgement_reads_back_from_its_json_exactly() {
        let mut judgement = judge(&facts()).unwrap();
        judgement
            .worker_memory
            .insert("clients-0".into(), "kept growing".into());
        let slopes = [
            0.1 + 0.2,
            1_048_576.123_456_789_1,
            1e-300,
            12_345.678_901_234_567,
        ];
        for (i, slope) in slopes.into_iter().enumerate() {
            judgement.server_memory.insert(
                format!("triton-{}", i + 1),
                ServerMemory {
                    finding: Some("kept growing".into()),
                    not_judged: None,
                    slope_bytes_per_s: Some(slope),
                },
            );
        }
        let text = serde_json::to_string(&judgement).unwrap();
        let back: Judgement = serde_json::from_str(&text).unwrap();
        assert_eq!(back, judgement, "{text}");
        for (i, slope) in slopes.into_iter().enumerate() {
            let read = back.server_memory[&format!("triton-{}", i + 1)].slope_bytes_per_s;
            assert_eq!(read.map(f64::to_bits), Some(slope.to_bits()));
        }
        // What the store keeps: the same, through a JSON value (as the store decodes it).
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let stored = <Judgement as stress_common::store::Document>::from_stored(value).unwrap();
        assert_eq!(stored, judgement);
    }
}
