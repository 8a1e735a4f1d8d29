//! The stress driver: reads a test matrix, launches Triton servers and stress workers, polls
//! the status store, fails fast and reports.

pub mod matrix;
