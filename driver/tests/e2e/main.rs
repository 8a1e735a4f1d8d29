//! The driver end to end, against REAL tritonserver and worker processes (the local launcher):
//!
//! * the smoke matrix passes on a SQLite store and on a throwaway Postgres, every scenario runs
//!   without failures, and `driver report` rebuilds the same report from the store;
//! * a SIGKILLed tritonserver, or a SIGKILLed worker, fails the run (exit 1) within 5 s of the
//!   kill, and the report names the member, its exit, its log tail and how to reproduce it;
//! * a hung (SIGSTOPped) tritonserver fails the run within 5 s of the first failure.
//!
//! They need what `scripts/install-tritonserver.sh` installs into `<repo>/.local` (tritonserver
//! and perf_analyzer) and, for the Postgres test, PostgreSQL server binaries
//! (`TRITON_STRESS_SKIP_POSTGRES=1` skips that one; `TEST_DATABASE_URL` uses a running server).
//! The worker is built by the tests themselves (see [`support::ensure_worker`]).
//!
//! On 2 loaded cores: a test that measures runs alone ([`support::alone`]), two that only check
//! outcomes may run side by side ([`support::beside_another`]); generous timeouts for
//! everything that waits on a server.
//!
//! The tests are grouped by capability, a module each; what several of them use is in
//! [`support`]. They are one test binary, so that one lock orders all of their runs.

mod capacity;
mod change;
mod external;
mod fail_fast;
mod faults;
mod models;
mod server_bugs;
mod slo;
mod smoke;
mod support;
mod traces;

/// Capabilities whose tests all check outcomes only (verdicts, records, reports) and have
/// generous bounds: with the kube stage, CI runs them beside the cluster's tests
/// (scripts/test.sh skips `outcomes_only::` in the cargo stage).
mod outcomes_only {
    mod cells;
    mod foreign;
    mod store;
}
