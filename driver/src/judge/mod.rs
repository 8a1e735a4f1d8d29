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
