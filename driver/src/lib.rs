//! The stress driver: reads a test matrix, launches Triton servers and stress workers, polls
//! the status store, fails fast and reports.
//!
//! * [`matrix`]: the YAML test matrix (strict parsing with file:line:column errors, schema).
//! * [`launcher`]: the launcher interface and the local (process) launcher.
//! * [`plan`]: a run's members, assignments and rules, computed once from the matrix (pure).
//! * [`preflight`]: which models the client groups need that a server lacks (pure).
//! * [`failfast`]: the fail-fast rules as a pure state machine, and failure attribution.
//! * [`external`]: servers that already run (`endpoints`): health checks and probes.
//! * [`capacity`]: capacity mode's AIMD controller and windows; [`spike`]: its spike phase (pure).
//! * [`autoscale`]: capacity mode's server signals and autoscaler thresholds (pure, plus the scrapes).
//! * [`baseline`]: finding a run's baseline across stores and comparing with it.
//! * [`regression`]: the baseline run, the metrics compared and the findings (pure).
//! * [`slo`]: the matrix's service-level objectives, parsed and judged on merged counts (pure).
//! * [`reconcile`]: the servers' successes against the workers' OK answers, per model (pure).
//! * [`trace`]: Triton trace files summarised per model and protocol (pure).
//! * [`rootcause`]: the first failure and the failures it caused (pure).
//! * [`webhook`]: the run's summary POSTed to `report.webhook` at the end.
//! * [`sampler`]: every server's /metrics once per series interval into the store.
//! * [`run`]: orchestration: launch the plan, feed the poll's observations to the rules, act.
//! * [`report`]: the final report, rebuilt from the store; [`junit`]: the same as JUnit XML;
//!   [`html`]: the same as one self-contained HTML page with plots;
//!   [`timeline`]: its series over time (latency per interval, the servers' metrics).

pub mod autoscale;
pub mod baseline;
pub mod capacity;
pub mod external;
pub mod failfast;
pub mod html;
pub mod junit;
pub mod launcher;
pub mod matrix;
pub mod plan;
pub mod preflight;
pub mod reconcile;
pub mod regression;
pub mod report;
pub mod rootcause;
pub mod run;
pub mod sampler;
pub mod slo;
pub mod spike;
pub mod timeline;
pub mod trace;
pub mod webhook;
