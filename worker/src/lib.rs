//! The stress worker: Triton's long-running stress scenarios over gRPC or HTTP.
//!
//! * [`client`]: one client trait over both protocols (tonic gRPC, reqwest HTTP).
//! * [`scenarios`]: the scenarios, each one test per call, each validating what comes back.
//! * [`run`]: pre-flight, the stress streams, status reports and the final L0 report.
//! * [`config`]: the command line and its validation.

pub mod client;
pub mod config;
pub mod metrics;
pub mod proto;
pub mod run;
pub mod scenarios;
pub mod stats;
pub mod tensor;
