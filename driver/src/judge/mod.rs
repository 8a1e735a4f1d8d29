//! Judgements, pure: the fail-fast rules and who is blamed ([`failfast`]), SLO verdicts
//! ([`slo`]), the root cause and what it explains ([`rootcause`]), the servers' successes
//! against the workers' answers ([`reconcile`]) and regressions against a baseline
//! ([`regression`]).

pub mod failfast;
pub mod reconcile;
pub mod regression;
pub mod rootcause;
pub mod slo;
