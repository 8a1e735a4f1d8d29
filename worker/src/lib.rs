//! The stress worker: Triton's long-running stress scenarios over gRPC or HTTP.
//!
//! * [`client`]: one client trait over both protocols (tonic gRPC, reqwest HTTP).
//! * [`scenarios`]: the scenarios, each one test per call, each validating what comes back.
//! * [`run`]: pre-flight, the stress streams, status reports and the final L0 report.
//! * [`model`]: any model as its server describes it, the requests built from that and the
//!   checks on every response (the `Infer` scenario).
//! * [`config`]: the command line and its validation.

pub mod client;
pub mod config;
pub mod metrics;
pub mod model;
pub mod proto;
pub mod run;
pub mod scenarios;
pub mod stats;
pub mod tensor;
