//! The worker's command line (clap, each flag with an environment fallback so a pod can be
//! configured by env) and its validation into a [`WorkerConfig`]. Bad input is reported before
//! any request is sent (exit code 2).

use crate::client::Protocol;
use crate::model::{InferOptions, ModelSelection};
use crate::scenarios::Settings;
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;
use stress_common::contract::{
    CorrIdBlock, CorrIdError, LoadMode, LoadModeError, STORE_URL_ENV, ScenarioMix, WorkerArgs,
};
use stress_common::limits;
use stress_common::scenario::Scenario;
use stress_common::schedule::{IntervalsFileError, RequestIntervals};

/// A wait of the worker's flags (a request's deadline, a drain, a load window, a model's delay):
/// up to a day.
fn wait(text: &str) -> Result<Duration, String> {
    limits::duration_within(Duration::ZERO, limits::MAX_WAIT)(text)
}

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
    /// What the driver sets (servers, protocol, mix, streams, duration, ids, load): the contract
    /// shared with the driver, which builds the same struct.
    #[command(flatten)]
    pub contract: WorkerArgs,
    /// HTTP only: send tensors as JSON arrays instead of the binary tensor extension.
    #[arg(long, env = "WORKER_HTTP_JSON")]
    pub http_json: bool,
    /// Seed of the scenario choices and data (default: random, printed at start).
    #[arg(long, env = "WORKER_SEED")]
    pub seed: Option<u64>,
    /// Load scenario: length of one test's load window.
    #[arg(long, env = "WORKER_LOAD_WINDOW", default_value = "1s", value_parser = wait)]
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
    #[arg(long, default_value = "300ms", value_parser = wait)]
    pub timeout_delay: Duration,
    /// ... and the client deadline, which must be shorter.
    #[arg(long, default_value = "100ms", value_parser = wait)]
    pub timeout_deadline: Duration,
    /// CrashingClient: how long the child sends before it is killed.
    #[arg(long, default_value = "1s", value_parser = wait)]
    pub crash_after: Duration,
    #[arg(long, default_value_t = 8)]
    pub image_batch: usize,
    /// Deadline of every ordinary request.
    #[arg(long, default_value = "25s", value_parser = wait)]
    pub request_timeout: Duration,
    /// Write the final report as JSON to this file.
    #[arg(long, env = "WORKER_REPORT_JSON")]
    pub report_json: Option<PathBuf>,
    /// Append status records (JSON lines) to this file when no store is given.
    #[arg(long, env = "WORKER_STATUS_FILE")]
    pub status_file: Option<PathBuf>,
    /// Status store (sqlite://FILE or postgres://...): set by the driver.
    #[arg(long, env = STORE_URL_ENV, hide_env_values = true)]
    pub store_url: Option<String>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464; port 0 picks one).
    #[arg(long, env = "WORKER_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long in-flight tests may take to finish after SIGTERM before they are cancelled
    /// (none when the driver stops the run because it failed: they are dropped at once).
    #[arg(long, default_value = "5s", value_parser = wait)]
    pub drain_timeout: Duration,
    /// Runtime threads (default: one per server, at most the CPUs available to the process).
    /// A server's requests all go through its one connection, so more threads than servers
    /// mostly add cross-thread wake-ups (one server, one request in flight: 116 instead of
    /// 96 µs of CPU per request with two threads).
    #[arg(long, env = "WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// The Infer scenario's flags the driver does not set (the models, shapes, input data and batch
/// size are in the contract, [`WorkerArgs`]), in perf_analyzer's syntax.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Length of random BYTES elements.
    #[arg(long, default_value_t = crate::model::DEFAULT_STRING_LENGTH)]
    pub string_length: usize,
}

impl RunArgs {
    /// The runtime's thread count: `--threads`, or one per server within the CPUs available.
    pub fn runtime_threads(&self) -> usize {
        self.threads.map(usize::from).unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            self.contract.servers.len().clamp(1, cpus)
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
    pub corr_ids: CorrIdBlock,
    pub settings: Settings,
    pub poll_interval: Duration,
    pub drain_timeout: Duration,
    /// The run's driver judges the failures (`--driver-judges`).
    pub driver_judges: bool,
    /// The sequence models' `max_sequence_idle_microseconds`, read at start-up, for failures'
    /// forensics.
    pub sequence_idle_us: std::collections::BTreeMap<String, u64>,
    /// A foreign client program run instead of the mix (which is then empty).
    pub client: Option<ClientProgram>,
    /// The member this worker runs as (for a foreign client's assignment).
    pub member: Option<String>,
}

/// A foreign client program and the environment the matrix gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientProgram {
    pub command: stress_common::contract::ClientCommand,
    pub env: Vec<stress_common::contract::EnvVar>,
    /// The models the matrix names for it (`--model`; empty: the program's own choice).
    pub models: Vec<String>,
}

/// A server address that is not HOST:PORT.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("server address {address:?} is not HOST:PORT")]
    NotHostPort { address: String },
    #[error("server address {address:?}: port {port:?} is not a number in 1..65535")]
    BadPort { address: String, port: String },
    #[error("server address {address:?}: port 0 is not allowed")]
    PortZero { address: String },
    #[error("server address {address:?}: host {host:?} is not valid")]
    BadHost { address: String, host: String },
}

/// Checks HOST:PORT (a hostname, IPv4 or [IPv6] and a port 1..=65535).
pub fn validate_address(address: &str) -> Result<(), AddressError> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| AddressError::NotHostPort {
            address: address.into(),
        })?;
    let port: u16 = port.parse().map_err(|_| AddressError::BadPort {
        address: address.into(),
        port: port.into(),
    })?;
    if port == 0 {
        return Err(AddressError::PortZero {
            address: address.into(),
        });
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
        return Err(AddressError::BadHost {
            address: address.into(),
            host: host.into(),
        });
    }
    Ok(())
}

/// Flags that cannot run together or at all: bad input, reported before any request (exit
/// code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no servers given: use --servers HOST:PORT[,HOST:PORT...]")]
    NoServers,
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error("--model names models for the Infer scenario, but --scenarios does not list Infer")]
    ModelsWithoutInfer,
    #[error("--concurrency must be at least 1")]
    ZeroConcurrency,
    #[error("--corr-id-base/--corr-id-block-size: {0}")]
    CorrIds(#[source] CorrIdError),
    #[error("--timeout-deadline {deadline:?} must be shorter than --timeout-delay {delay:?}")]
    TimeoutDeadline { deadline: Duration, delay: Duration },
    #[error(
        "--concurrency {0} is more than the {max} streams a worker takes",
        max = limits::MAX_CONCURRENCY
    )]
    TooManyStreams(u32),
    #[error("--sequence-models needs at least one model")]
    NoSequenceModels,
    #[error("--image-batch must be at least 1")]
    ZeroImageBatch,
    /// Load flags that do not go together, as the contract words it.
    #[error("{0}")]
    LoadConflict(&'static str),
    #[error(transparent)]
    Load(#[from] LoadModeError),
    #[error(
        "--adaptive-load changes a closed-loop concurrency: it cannot go with --load-rate or --request-intervals"
    )]
    AdaptiveOpenLoop,
    #[error("--request-intervals {0}")]
    RequestIntervals(#[source] IntervalsFileError),
    #[error("--perf-analyzer {0}: no such file")]
    NoPerfAnalyzer(PathBuf),
    #[error(
        "--scenarios lists PerfAnalyzer, and no perf_analyzer binary is on PATH: give --perf-analyzer, or leave PerfAnalyzer out"
    )]
    PerfAnalyzerNotFound,
    #[error("cannot find the worker binary itself: {0}")]
    WorkerBinary(#[source] std::io::Error),
}

/// The perf_analyzer binary the PerfAnalyzer scenario runs, when the mix has it (None when not:
/// a foreign client's pod has no perf_analyzer beside the worker): `--perf-analyzer`, which must
/// exist, or the one on PATH. Without one, a mix that lists PerfAnalyzer is refused, and the
/// default mix loses it (with a warning: the default is every scenario this machine can run).
fn perf_analyzer_for(
    mix: &mut Vec<(Scenario, u32)>,
    listed: bool,
    given: Option<&Path>,
) -> Result<Option<PathBuf>, ConfigError> {
    if !mix.iter().any(|(s, _)| *s == Scenario::PerfAnalyzer) {
        return Ok(None);
    }
    let found = match given {
        Some(path) if !path.is_file() => return Err(ConfigError::NoPerfAnalyzer(path.into())),
        Some(path) => Some(path.to_path_buf()),
        None => stress_common::paths::find_on_path("perf_analyzer"),
    };
    if found.is_none() {
        without_perf_analyzer(mix, listed)?;
    }
    Ok(found)
}

/// A mix with PerfAnalyzer and no perf_analyzer binary: refused if `listed` (given as
/// `--scenarios`), else (the default mix) without it.
fn without_perf_analyzer(mix: &mut Vec<(Scenario, u32)>, listed: bool) -> Result<(), ConfigError> {
    if listed {
        return Err(ConfigError::PerfAnalyzerNotFound);
    }
    tracing::warn!("PerfAnalyzer left out of the default mix: no perf_analyzer binary on PATH");
    mix.retain(|(s, _)| *s != Scenario::PerfAnalyzer);
    Ok(())
}

/// The scenarios to run: `--scenarios` as given; without it, only Infer when models are given,
/// else every scenario of the default mix. Models given to a mix without Infer are refused.
pub fn default_mix(
    scenarios: Option<ScenarioMix>,
    models_given: bool,
) -> Result<Vec<(Scenario, u32)>, ConfigError> {
    match scenarios {
        Some(mix) => {
            if models_given && !mix.0.iter().any(|(s, _)| *s == Scenario::Infer) {
                return Err(ConfigError::ModelsWithoutInfer);
            }
            Ok(mix.0)
        }
        None if models_given => Ok(vec![(Scenario::Infer, Scenario::Infer.default_weight())]),
        None => Ok(ScenarioMix::defaults().0),
    }
}

impl RunArgs {
    pub fn into_config(self) -> Result<WorkerConfig, ConfigError> {
        let mut mix = self.checked_mix()?;
        let perf_analyzer = perf_analyzer_for(
            &mut mix,
            self.contract.scenarios.is_some(),
            self.contract.perf_analyzer.as_deref(),
        )?;
        self.check_bounds()?;
        let load = LoadSettings::of(&self.contract)?;
        let worker_binary = std::env::current_exe().map_err(ConfigError::WorkerBinary)?;
        let seed = self.seed.unwrap_or_else(rand::random);
        let infer = self.infer_options(seed);
        let c = self.contract;
        let client = c.client_command.map(|command| ClientProgram {
            command,
            env: c.client_env,
            models: c.models.iter().map(|m| m.name.clone()).collect(),
        });
        Ok(WorkerConfig {
            client,
            member: c.member_id.map(|m| m.to_string()),
            servers: c.servers,
            protocol: c.protocol,
            http_binary: !self.http_json,
            mix,
            concurrency: c.concurrency as usize,
            duration: (!c.duration.is_zero()).then_some(c.duration),
            seed,
            corr_ids: c.corr_ids,
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
                load_mode: load.mode,
                request_intervals: load.request_intervals,
                load_target: load.target,
                load_window: self.load_window,
                image_batch: self.image_batch,
                perf_analyzer,
                request_timeout: self.request_timeout,
                infer,
                infer_plan: None,
                trace: crate::scenarios::Tracing::of(c.trace_share),
            },
            poll_interval: c.poll_interval,
            drain_timeout: self.drain_timeout,
            driver_judges: c.driver_judges,
            sequence_idle_us: Default::default(),
        })
    }

    /// The servers' addresses and the Infer flags checked; the scenario mix they give.
    fn checked_mix(&self) -> Result<Vec<(Scenario, u32)>, ConfigError> {
        let c = &self.contract;
        if c.servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        for s in &c.servers {
            validate_address(s)?;
        }
        // A foreign client runs its own scenarios.
        let mix = match c.client_command {
            Some(_) => Vec::new(),
            None => default_mix(c.scenarios.clone(), !c.models.is_empty())?,
        };
        Ok(mix)
    }

    /// The counts checked against their limits (durations are read within theirs).
    fn check_bounds(&self) -> Result<(), ConfigError> {
        let c = &self.contract;
        if c.concurrency == 0 {
            return Err(ConfigError::ZeroConcurrency);
        }
        c.corr_ids
            .check(c.concurrency.into())
            .map_err(ConfigError::CorrIds)?;
        if self.timeout_deadline >= self.timeout_delay {
            return Err(ConfigError::TimeoutDeadline {
                deadline: self.timeout_deadline,
                delay: self.timeout_delay,
            });
        }
        if c.concurrency > limits::MAX_CONCURRENCY {
            return Err(ConfigError::TooManyStreams(c.concurrency));
        }
        if self.sequence_models.is_empty() {
            return Err(ConfigError::NoSequenceModels);
        }
        if self.image_batch == 0 {
            return Err(ConfigError::ZeroImageBatch);
        }
        Ok(())
    }

    /// The Infer scenario's options.
    fn infer_options(&self, seed: u64) -> InferOptions {
        let c = &self.contract;
        let m = &self.models;
        InferOptions {
            // Infer listed without --model drives the load model (add_sub by default).
            models: if c.models.is_empty() {
                vec![ModelSelection {
                    name: self.load_model.clone(),
                    version: String::new(),
                    weight: 1,
                }]
            } else {
                c.models.clone()
            },
            shapes: c.shapes.clone(),
            input_data: c.input_data.clone(),
            batch_size: c
                .batch_sizes
                .iter()
                .rev()
                .find(|b| b.model.is_none())
                .map_or(1, |b| b.size),
            model_batch_sizes: c
                .batch_sizes
                .iter()
                .filter_map(|b| Some((b.model.clone()?, b.size)))
                .collect(),
            string_length: m.string_length,
            tolerance: c.tolerance.get(),
            consistency: c.consistency,
            seed,
        }
    }
}

/// The Load scenario's settings from the load flags, checked.
struct LoadSettings {
    mode: LoadMode,
    target: Option<std::sync::Arc<crate::scenarios::LiveLoad>>,
    request_intervals: Option<(
        RequestIntervals,
        std::sync::Arc<std::sync::atomic::AtomicU64>,
    )>,
}

impl LoadSettings {
    fn of(c: &WorkerArgs) -> Result<Self, ConfigError> {
        if let Some(conflict) = c.load_conflict() {
            return Err(ConfigError::LoadConflict(conflict));
        }
        let mode = c.load().unwrap_or(LoadMode::DEFAULT);
        mode.check()?;
        let target = match (c.adaptive_load, &mode) {
            (false, _) => None,
            (true, LoadMode::Concurrency(n)) => {
                Some(std::sync::Arc::new(crate::scenarios::LiveLoad::new(*n)))
            }
            (true, _) => return Err(ConfigError::AdaptiveOpenLoop),
        };
        let request_intervals = match &mode {
            LoadMode::Intervals(path) => Some((
                RequestIntervals::read(path).map_err(ConfigError::RequestIntervals)?,
                Default::default(),
            )),
            _ => None,
        };
        Ok(LoadSettings {
            mode,
            target,
            request_intervals,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_analyzer_is_left_out_of_the_default_mix_only_and_a_given_path_must_exist() {
        let listed = vec![(Scenario::Load, 2), (Scenario::PerfAnalyzer, 1)];
        let mut mix = listed.clone();
        assert!(matches!(
            without_perf_analyzer(&mut mix, true),
            Err(ConfigError::PerfAnalyzerNotFound)
        ));
        without_perf_analyzer(&mut mix, false).unwrap();
        assert_eq!(mix, [(Scenario::Load, 2)]);
        let missing = Path::new("/nonexistent/perf_analyzer");
        let mut mix = listed.clone();
        let err = perf_analyzer_for(&mut mix, false, Some(missing)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--perf-analyzer /nonexistent/perf_analyzer: no such file"
        );
        let here = std::env::current_exe().unwrap();
        let found = perf_analyzer_for(&mut mix, true, Some(&here)).unwrap();
        assert_eq!((found.as_deref(), &mix), (Some(here.as_path()), &listed));
        // A mix without PerfAnalyzer (a foreign client's: none) needs no binary.
        let mut none = Vec::new();
        assert_eq!(
            perf_analyzer_for(&mut none, false, Some(missing)).unwrap(),
            None
        );
    }

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
    fn infer_runs_only_with_models_or_when_listed() {
        let default = default_mix(None, false).unwrap();
        assert!(!default.iter().any(|(s, _)| *s == Scenario::Infer));
        assert_eq!(default.len(), Scenario::ALL.len() - 1, "the rest unchanged");
        assert_eq!(
            default_mix(None, true).unwrap(),
            [(Scenario::Infer, Scenario::Infer.default_weight())]
        );
        let listed: ScenarioMix = "Load:2,Infer:3".parse().unwrap();
        assert_eq!(
            default_mix(Some(listed.clone()), false).unwrap(),
            listed.0,
            "listed without models: drives the load model"
        );
        assert_eq!(default_mix(Some(listed.clone()), true).unwrap(), listed.0);
        let err = default_mix(Some("Load".parse().unwrap()), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not list Infer"), "{err}");
        // --model alone, parsed: only Infer, and the models reach the settings.
        let cli =
            Cli::try_parse_from(["worker", "--servers", "h:1", "-m", "a@2:3", "-m", "b"]).unwrap();
        let config = cli.run.into_config().unwrap();
        assert_eq!(config.mix, [(Scenario::Infer, 100)]);
        let names: Vec<String> = config
            .settings
            .infer
            .models
            .iter()
            .map(|m| m.label())
            .collect();
        assert_eq!(names, ["a@2", "b"]);
        // Infer listed without --model: the load model.
        let cli =
            Cli::try_parse_from(["worker", "--servers", "h:1", "--scenarios", "Infer"]).unwrap();
        let config = cli.run.into_config().unwrap();
        assert_eq!(config.settings.infer.models[0].name, "add_sub");
    }

    /// The driver's command line, as [`WorkerArgs::to_args`] renders it, parses into the same
    /// contract through the worker's own flags (and its extra flags still parse beside it).
    #[test]
    fn parses_what_the_driver_builds() {
        let mut contract = WorkerArgs {
            servers: vec!["10.0.0.1:8001".into()],
            protocol: Protocol::Http,
            scenarios: Some("SequenceValid:2,Load:5,Infer:1".parse().unwrap()),
            concurrency: 3,
            duration: Duration::from_secs(3600 + 7),
            corr_ids: CorrIdBlock {
                base: 1 + (1 << 20),
                size: 1 << 20,
            },
            load_concurrency: None,
            load_rate: None,
            load_arrivals: None,
            request_intervals: None,
            adaptive_load: false,
            driver_judges: false,
            poll_interval: Duration::from_millis(500),
            run_id: Some("r-1".into()),
            member_id: Some("clients-1".into()),
            // A file that exists: a given perf_analyzer must.
            perf_analyzer: Some(std::env::current_exe().unwrap()),
            models: vec!["add_sub:2".parse().unwrap(), "m@1".parse().unwrap()],
            shapes: vec!["m/IN:4".parse().unwrap()],
            input_data: vec!["m=zero".parse().unwrap()],
            batch_sizes: vec!["3".parse().unwrap(), "m=2".parse().unwrap()],
            client_command: None,
            client_env: Vec::new(),
            trace_share: Some("0.25".parse().unwrap()),
            tolerance: "0.5".parse().unwrap(),
            consistency: true,
        };
        contract.set_load(Some(LoadMode::Rate(0.5)));
        let mut argv = vec!["worker".to_string()];
        argv.extend(contract.to_args());
        argv.extend(["--seed".into(), "7".into()]);
        let cli = Cli::try_parse_from(argv).unwrap();
        assert_eq!(cli.run.contract, contract);
        assert_eq!(cli.run.seed, Some(7));
        let config = cli.run.into_config().unwrap();
        assert_eq!(config.settings.infer.models, contract.models);
        assert_eq!(config.settings.infer.shapes, contract.shapes);
        assert_eq!(config.settings.infer.input_data, contract.input_data);
        assert_eq!(config.settings.infer.batch_size_for("add_sub"), 3);
        assert_eq!(config.settings.infer.batch_size_for("m"), 2);
        assert_eq!(config.settings.infer.tolerance, 0.5);
        assert!(config.settings.infer.consistency);
        assert_eq!(config.settings.load_mode, LoadMode::Rate(0.5));
        assert_eq!(config.corr_ids, contract.corr_ids);
        let trace = config.settings.trace.expect("a trace share");
        assert_eq!(trace.share.get(), 0.25);
    }

    #[test]
    fn adaptive_load_follows_the_live_target_and_a_spike_switches_to_open_loop() {
        use crate::scenarios::WindowLoad;
        let argv = [
            "worker",
            "--servers",
            "127.0.0.1:8001",
            "--load-concurrency",
            "3",
        ];
        let fixed = Cli::try_parse_from(argv)
            .unwrap()
            .run
            .into_config()
            .unwrap();
        let own = WindowLoad {
            mode: LoadMode::Concurrency(3),
            overload: false,
        };
        assert_eq!(fixed.settings.window_load(), own, "no --adaptive-load");
        let mut adaptive = argv.to_vec();
        adaptive.push("--adaptive-load");
        let config = Cli::try_parse_from(adaptive)
            .unwrap()
            .run
            .into_config()
            .unwrap();
        let live = config.settings.load_target.clone().unwrap();
        assert_eq!(config.settings.window_load(), own, "starts at its own");
        live.concurrency
            .store(5, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(config.settings.window_load().mode, LoadMode::Concurrency(5));
        assert_eq!(live.set_rate(Some(250.0)), None);
        live.count_unanswered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            config.settings.window_load(),
            WindowLoad {
                mode: LoadMode::Rate(250.0),
                overload: true
            },
            "a spike: open loop, unanswered requests counted"
        );
        assert_eq!(live.set_rate(Some(f64::NAN)), Some(250.0));
        assert_eq!(live.rate(), None, "a rate that is not a number clears it");
        live.set_rate(Some(-1.0));
        assert_eq!(
            config.settings.window_load(),
            WindowLoad {
                mode: LoadMode::Concurrency(5),
                overload: true
            },
            "a spike's recovery: closed loop, unanswered requests still counted"
        );
    }
}
