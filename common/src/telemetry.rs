//! One logging set-up for every binary: `RUST_LOG`-style filter, human output in a terminal and
//! JSON lines when `LOG_FORMAT=json` (what the cluster manifests set).

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    // Logs go to stderr so stdout stays free for reports.
    let result = if json {
        registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()
    } else {
        // Colours only for a person at a terminal: logs captured to files stay plain.
        use std::io::IsTerminal;
        registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init()
    };
    let _ = result;
}
