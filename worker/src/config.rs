//! The worker's command line (clap, each flag with an environment fallback so a pod can be
//! configured by env) and its validation into a [`WorkerConfig`]. Bad input is reported before
//! any request is sent (exit code 2).

use crate::client::Protocol;
use crate::scenarios::{LoadMode, Settings};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use stress_common::scenario::Scenario;

#[derive(Debug, Parser)]
#[command(
    name = "worker",
    version,
    about = "Stress worker for Triton Inference Server: runs a weighted mix of Triton's long-running stress scenarios and checks every response.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Hidden>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Hidden {
    /// The CrashingClient scenario's child: sends until killed.
    #[command(hide = true)]
    CrashingChild {
        #[arg(long)]
        server: String,
        #[arg(long, value_enum)]
        protocol: Protocol,
        #[arg(long)]
        model: String,
        #[arg(long)]
        delay_ms: i64,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Triton servers, HOST:PORT (the gRPC port for --protocol grpc, the HTTP port for http).
    #[arg(long, env = "WORKER_SERVERS", value_delimiter = ',')]
    pub servers: Vec<String>,
    #[arg(long, env = "WORKER_PROTOCOL", value_enum, default_value = "grpc")]
    pub protocol: Protocol,
    /// HTTP only: send tensors as JSON arrays instead of the binary tensor extension.
    #[arg(long, env = "WORKER_HTTP_JSON")]
    pub http_json: bool,
    /// Scenario mix as NAME:WEIGHT,... (default: every scenario at upstream's weights).
    #[arg(long, env = "WORKER_SCENARIOS", value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Concurrent stress streams.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 4)]
    pub concurrency: usize,
    /// How long to run (e.g. 60s, 8h); 0 runs until SIGTERM.
    #[arg(long, env = "WORKER_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Seed of the scenario choices and data (default: random, printed at start).
    #[arg(long, env = "WORKER_SEED")]
    pub seed: Option<u64>,
    /// First correlation id of this worker's block.
    #[arg(long, env = "WORKER_CORR_ID_BASE", default_value_t = 1)]
    pub corr_id_base: u64,
    /// Size of this worker's correlation-id block; streams split it evenly.
    #[arg(long, env = "WORKER_CORR_ID_BLOCK_SIZE", default_value_t = 1 << 20)]
    pub corr_id_block_size: u64,
    /// Load scenario: requests kept in flight (closed loop).
    #[arg(long, env = "WORKER_LOAD_CONCURRENCY", conflicts_with = "load_rate")]
    pub load_concurrency: Option<usize>,
    /// Load scenario: requests per second at fixed intended times (open loop).
    #[arg(long, env = "WORKER_LOAD_RATE")]
    pub load_rate: Option<f64>,
    /// Load scenario: length of one test's load window.
    #[arg(long, env = "WORKER_LOAD_WINDOW", default_value = "1s", value_parser = humantime::parse_duration)]
    pub load_window: Duration,
    #[arg(
        long,
        env = "WORKER_SEQUENCE_MODELS",
        value_delimiter = ',',
        default_value = "sequence_nobatch,sequence_batch"
    )]
    pub sequence_models: Vec<String>,
    #[arg(long, env = "WORKER_IDENTITY_MODEL", default_value = "identity_delay")]
    pub identity_model: String,
    #[arg(long, env = "WORKER_LOAD_MODEL", default_value = "add_sub")]
    pub load_model: String,
    #[arg(long, env = "WORKER_IMAGE_MODEL", default_value = "image_classifier")]
    pub image_model: String,
    /// Timeout scenario: the delay asked of the identity model ...
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub timeout_delay: Duration,
    /// ... and the client deadline, which must be shorter.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub timeout_deadline: Duration,
    /// CrashingClient: how long the child sends before it is killed.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub crash_after: Duration,
    #[arg(long, default_value_t = 8)]
    pub image_batch: usize,
    /// Deadline of every ordinary request.
    #[arg(long, default_value = "25s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// perf_analyzer binary for the PerfAnalyzer scenario (default: found on PATH).
    #[arg(long, env = "PERF_ANALYZER")]
    pub perf_analyzer: Option<PathBuf>,
    /// How often to report a QPS sample, counts and a heartbeat.
    #[arg(long, env = "WORKER_POLL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// Write the final report as JSON to this file.
    #[arg(long, env = "WORKER_REPORT_JSON")]
    pub report_json: Option<PathBuf>,
    /// Append status records (JSON lines) to this file when no store is given.
    #[arg(long, env = "WORKER_STATUS_FILE")]
    pub status_file: Option<PathBuf>,
    /// Status store (sqlite://FILE or postgres://...): set by the driver.
    #[arg(long, env = "TRITON_STRESS_STORE_URL", hide_env_values = true)]
    pub store_url: Option<String>,
    #[arg(long, env = "TRITON_STRESS_RUN_ID")]
    pub run_id: Option<String>,
    #[arg(long, env = "TRITON_STRESS_MEMBER_ID")]
    pub member_id: Option<String>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464; port 0 picks one).
    #[arg(long, env = "WORKER_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long in-flight tests may take to finish after SIGTERM before they are cancelled.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Runtime threads (default: one per server, at most the CPUs available to the process).
    /// A server's requests all go through its one connection, so more threads than servers
    /// mostly add cross-thread wake-ups (one server, one request in flight: 116 instead of
    /// 96 µs of CPU per request with two threads).
    #[arg(long, env = "WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

impl RunArgs {
    /// The runtime's thread count: `--threads`, or one per server within the CPUs available.
    pub fn runtime_threads(&self) -> usize {
        self.threads.map(usize::from).unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            self.servers.len().clamp(1, cpus)
        })
    }
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub servers: Vec<String>,
    pub protocol: Protocol,
    pub http_binary: bool,
    pub mix: Vec<(Scenario, u32)>,
    pub concurrency: usize,
    pub duration: Option<Duration>,
    pub seed: u64,
    pub corr_id_base: u64,
    pub corr_id_block_size: u64,
    pub settings: Settings,
    pub poll_interval: Duration,
    pub drain_timeout: Duration,
}

/// Client contexts per stream, as upstream (2 common + 8 rare).
pub const CONTEXTS_PER_STREAM: u64 = 10;

/// Checks HOST:PORT (a hostname, IPv4 or [IPv6] and a port 1..=65535).
pub fn validate_address(address: &str) -> Result<(), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("server address {address:?} is not HOST:PORT"))?;
    let port: u16 = port.parse().map_err(|_| {
        format!("server address {address:?}: port {port:?} is not a number in 1..65535")
    })?;
    if port == 0 {
        return Err(format!("server address {address:?}: port 0 is not allowed"));
    }
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    };
    if !host_ok {
        return Err(format!(
            "server address {address:?}: host {host:?} is not valid"
        ));
    }
    Ok(())
}

/// Parses NAME:WEIGHT,... against the scenario catalogue.
pub fn parse_mix(items: &[String]) -> Result<Vec<(Scenario, u32)>, String> {
    if items.is_empty() {
        return Ok(Scenario::ALL
            .iter()
            .map(|&s| (s, s.default_weight()))
            .collect());
    }
    let mut mix: Vec<(Scenario, u32)> = Vec::new();
    for item in items {
        let (name, weight) = match item.split_once(':') {
            Some((n, w)) => (n.trim(), Some(w.trim())),
            None => (item.trim(), None),
        };
        let scenario = Scenario::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
            format!("unknown scenario {name:?} (known: {})", known.join(", "))
        })?;
        let weight = match weight {
            None => scenario.default_weight(),
            Some(w) => {
                let v: f64 = w
                    .parse()
                    .map_err(|_| format!("scenario {name}: weight {w:?} is not a number"))?;
                if v <= 0.0 || v.is_nan() || v.fract() != 0.0 || v > u32::MAX as f64 {
                    return Err(format!(
                        "scenario {name}: weight {w} must be a whole number greater than 0"
                    ));
                }
                v as u32
            }
        };
        if mix.iter().any(|(s, _)| *s == scenario) {
            return Err(format!("scenario {name} is listed twice"));
        }
        mix.push((scenario, weight));
    }
    Ok(mix)
}

impl RunArgs {
    pub fn into_config(self) -> Result<WorkerConfig, String> {
        if self.servers.is_empty() {
            return Err("no servers given: use --servers HOST:PORT[,HOST:PORT...]".into());
        }
        for s in &self.servers {
            validate_address(s)?;
        }
        let mix = parse_mix(&self.scenarios)?;
        if self.concurrency == 0 {
            return Err("--concurrency must be at least 1".into());
        }
        let needed = self.concurrency as u64 * CONTEXTS_PER_STREAM;
        if self.corr_id_block_size < needed {
            return Err(format!(
                "--corr-id-block-size {} is smaller than {needed} ({} streams x {CONTEXTS_PER_STREAM} correlation ids)",
                self.corr_id_block_size, self.concurrency
            ));
        }
        if self.corr_id_base == 0 {
            return Err(
                "--corr-id-base must be at least 1 (Triton treats id 0 as no sequence)".into(),
            );
        }
        if self
            .corr_id_base
            .checked_add(self.corr_id_block_size)
            .is_none()
        {
            return Err("--corr-id-base + --corr-id-block-size overflows u64".into());
        }
        if self.timeout_deadline >= self.timeout_delay {
            return Err(format!(
                "--timeout-deadline {:?} must be shorter than --timeout-delay {:?}",
                self.timeout_deadline, self.timeout_delay
            ));
        }
        if self.poll_interval.is_zero() {
            return Err("--poll-interval must be greater than 0".into());
        }
        if self.sequence_models.is_empty() {
            return Err("--sequence-models needs at least one model".into());
        }
        if self.image_batch == 0 {
            return Err("--image-batch must be at least 1".into());
        }
        let load_mode = match (self.load_concurrency, self.load_rate) {
            (_, Some(r)) if !(r > 0.0 && r.is_finite()) => {
                return Err(format!("--load-rate {r} must be greater than 0"));
            }
            (_, Some(r)) => LoadMode::Rate(r),
            (Some(0), _) => return Err("--load-concurrency must be at least 1".into()),
            (Some(n), _) => LoadMode::Concurrency(n),
            (None, None) => LoadMode::Concurrency(2),
        };
        let worker_binary = std::env::current_exe()
            .map_err(|e| format!("cannot find the worker binary itself: {e}"))?;
        Ok(WorkerConfig {
            servers: self.servers,
            protocol: self.protocol,
            http_binary: !self.http_json,
            mix,
            concurrency: self.concurrency,
            duration: (!self.duration.is_zero()).then_some(self.duration),
            seed: self.seed.unwrap_or_else(rand::random),
            corr_id_base: self.corr_id_base,
            corr_id_block_size: self.corr_id_block_size,
            settings: Settings {
                // max_batch_size is learned from the servers at start-up.
                sequence_models: self.sequence_models.into_iter().map(|m| (m, 0)).collect(),
                identity_model: self.identity_model,
                load_model: self.load_model,
                image_model: self.image_model,
                timeout_delay: self.timeout_delay,
                timeout_deadline: self.timeout_deadline,
                crash_after: self.crash_after,
                worker_binary,
                load_mode,
                load_window: self.load_window,
                image_batch: self.image_batch,
                perf_analyzer: self.perf_analyzer,
                request_timeout: self.request_timeout,
            },
            poll_interval: self.poll_interval,
            drain_timeout: self.drain_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for ok in ["127.0.0.1:8001", "triton-0:8001", "[::1]:8001", "a.b.c:1"] {
            assert!(validate_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "127.0.0.1:0",
            "host:99999",
            ":8001",
            "ho st:1",
            "h:x",
        ] {
            assert!(validate_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mixes() {
        assert_eq!(Scenario::ALL.len(), parse_mix(&[]).unwrap().len());
        let m = parse_mix(&["SequenceValid:3".into(), "timeout".into()]).unwrap();
        assert_eq!(
            m,
            vec![(Scenario::SequenceValid, 3), (Scenario::Timeout, 60)]
        );
        let err = parse_mix(&["Bogus:1".into()]).unwrap_err();
        assert!(err.contains("unknown scenario \"Bogus\""), "{err}");
        for bad in ["Timeout:0", "Timeout:-1", "Timeout:x", "Timeout:1.5"] {
            let err = parse_mix(&[bad.into()]).unwrap_err();
            assert!(err.contains("Timeout"), "{err}");
        }
        assert!(parse_mix(&["Timeout".into(), "timeout:2".into()]).is_err());
    }
}
