//! Judgements, pure: the fail-fast rules and who is blamed ([`failfast`]), every failure's
//! signature, class with evidence and known issue ([`verdicts`], [`classify`], [`known`]), SLO verdicts
//! ([`slo`]), the root cause and what it explains ([`rootcause`]), the servers' successes
//! against the workers' answers ([`reconcile`]), regressions against a baseline
//! ([`regression`]), a server's memory over the load's steady state ([`memory`]) and the
//! recovery from each injected fault ([`faults`]).

pub mod change;
pub mod change_point;
pub mod classify;
pub mod failfast;
pub mod faults;
pub mod known;
pub mod memory;
pub mod reconcile;
pub mod regression;
pub mod repeats;
pub mod rootcause;
pub mod slo;
pub mod verdicts;

/// What the judges' unit tests share: a sequence test whose step the server rejected.
#[cfg(test)]
pub(crate) mod fixtures {
    use stress_common::status::{FailureRecord, Forensics, WireStep};

    /// A step on correlation id 1048577 of `sequence_nobatch` at 127.0.0.1:8001, sent at
    /// `sent_ms` and answered `took_ms` later with `outcome`.
    pub fn step(sent_ms: i64, took_ms: i64, flags: &str, outcome: &str) -> WireStep {
        WireStep {
            sent_us: sent_ms * 1000,
            received_us: (sent_ms + took_ms) * 1000,
            server: "127.0.0.1:8001".into(),
            model: "sequence_nobatch".into(),
            correlation_id: Some(1_048_577),
            flags: flags.into(),
            input_digest: String::new(),
            outcome: outcome.into(),
        }
    }

    /// A `SequenceValid` test on that sequence whose step 2 failed at `at_ms` with `actual`,
    /// with its `steps` and the model's max_sequence_idle (`idle_us`) in its forensics.
    pub fn sequence_failure(
        at_ms: i64,
        actual: &str,
        steps: Vec<WireStep>,
        idle_us: Option<u64>,
    ) -> FailureRecord {
        FailureRecord {
            at_ms,
            scenario: "SequenceValid".into(),
            server: "127.0.0.1:8001".into(),
            model: "sequence_nobatch".into(),
            correlation_id: Some(1_048_577),
            expected: "step 2 of 12 answered".into(),
            actual: actual.into(),
            error_kind: None,
            forensics: Some(Forensics {
                steps,
                sequence_idle_us: idle_us,
                ..Default::default()
            }),
        }
    }
}
