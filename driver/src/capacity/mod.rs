//! Capacity mode: the AIMD controller ([`controller`]), its spike phase ([`spike`]), the servers'
//! signals and autoscaler thresholds ([`autoscale`]), the phases a group runs with their
//! records ([`phase`]) and sweeps over configurations ([`sweep`]; which variants start next:
//! [`sweep_schedule`]). All pure but the scrapes; `crate::run` feeds windows in and acts.

pub mod autoscale;
pub mod controller;
pub mod phase;
pub mod spike;
pub mod sweep;
pub mod sweep_schedule;
