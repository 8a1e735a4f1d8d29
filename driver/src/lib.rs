//! The stress driver: reads a test matrix, launches Triton servers and stress workers, polls
//! the status store, fails fast and reports.
//!
//! The modules are the run's stages, bottom up; each imports only from the ones above it in this
//! list (`tests/layers.rs` checks it, ARCHITECTURE.md explains it):
//!
//! * [`matrix`]: the YAML test matrix (strict parsing with file:line:column errors, schema, the
//!   SLO rules as written).
//! * [`plan`]: a run's members, assignments and rules, computed once from the matrix (pure);
//!   `plan::preflight`: which models the client groups need that a server lacks.
//! * [`launcher`]: the launcher interface, the local (process) and Kubernetes launchers, and
//!   servers that already run (`launcher::external`).
//! * [`judge`]: fail-fast rules and blame, SLO verdicts, root cause, reconciliation, regressions
//!   (pure).
//! * [`capacity`]: capacity mode's controller (slow start, bisection, AIMD), spike phase and
//!   autoscaler thresholds.
//! * [`report`]: the final report rebuilt from the store, its series over time, traces and
//!   baselines.
//! * [`render`]: the report as HTML, JUnit XML and the webhook's summary; the dashboard's list.
//! * [`run`]: orchestration: launch the plan, feed the poll's observations to the rules, act.
//! * [`serve`]: `driver serve`, the runs of a store in a browser and as JSON (read-only).

pub mod matrix;

pub mod plan;

pub mod launcher;

pub mod judge;

pub mod capacity;

pub mod report;

pub mod render;

pub mod run;

pub mod serve;
