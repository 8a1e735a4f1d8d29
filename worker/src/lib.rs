//! The stress worker: Triton's long-running stress scenarios over gRPC or HTTP.
//!
//! * [`client`]: one client trait over both protocols (tonic gRPC, reqwest HTTP).
//! * [`scenarios`]: the scenarios, each one test per call, each validating what comes back.
//! * [`run`]: pre-flight, the stress streams, status reports and the final L0 report.
//! * [`metadata`]: a model as its server describes it (metadata and config, either protocol).
//! * [`model`]: the requests built from a model's description and the checks on every response
//!   (the `Infer` scenario).
//! * [`config`]: the command line and its validation.
//! * [`outages`]: per target server, the stretches without a good answer (for the driver's
//!   injected faults).

pub mod client;
pub mod config;
pub mod foreign;
pub mod metadata;
pub mod metrics;
pub mod model;
pub mod outages;
pub mod run;
pub mod scenarios;
pub mod stats;
pub mod tensor;
