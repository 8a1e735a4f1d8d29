//! Code generated from `proto/` (Triton's `inference` package).
#![allow(clippy::all, missing_docs)]
tonic::include_proto!("inference");
