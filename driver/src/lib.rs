//! The stress driver: reads a test matrix, launches Triton servers and stress workers, polls
//! the status store, fails fast and reports.
//!
//! * [`matrix`]: the YAML test matrix (strict parsing with file:line:column errors, schema).
//! * [`launcher`]: the launcher interface and the local (process) launcher.
//! * [`run`]: the poll loop and its fail-fast rules.
//! * [`report`]: the final report, rebuilt from the store.

pub mod launcher;
pub mod matrix;
pub mod report;
pub mod run;
