//! Judgements, pure: the fail-fast rules and who is blamed ([`failfast`]), SLO verdicts
//! ([`slo`]), the root cause and what it explains ([`rootcause`]), the servers' successes
//! against the workers' answers ([`reconcile`]), regressions against a baseline
//! ([`regression`]) and a server's memory over the load's steady state ([`memory`]).

pub mod failfast;
pub mod memory;
pub mod reconcile;
pub mod regression;
pub mod rootcause;
pub mod slo;
