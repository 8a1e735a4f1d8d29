//! The driver ↔ worker contract, defined once: the worker's command line as one typed struct
//! ([`WorkerArgs`]: the driver builds it and renders it with [`WorkerArgs::to_args`], the worker
//! parses the same struct with clap), and the concepts both sides name: [`Protocol`],
//! [`LoadMode`], [`ScenarioMix`] (the `NAME:WEIGHT,...` syntax), correlation-id blocks
//! ([`CorrIdBlock`]), the identifiers of a run and its members, and the environment variables
//! that carry what must not show on a command line.

use crate::limits;
use crate::scenario::Scenario;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

/// Carries the store URL (with its password) to a worker: never in argv or a pod's args.
pub const STORE_URL_ENV: &str = "TRITON_STRESS_STORE_URL";
/// The run a worker reports to (also `--run-id`).
pub const RUN_ID_ENV: &str = "TRITON_STRESS_RUN_ID";
/// The member name a worker reports as (also `--member-id`).
pub const MEMBER_ID_ENV: &str = "TRITON_STRESS_MEMBER_ID";

/// An identifier (a run id, a member name) given as the empty string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} must not be empty")]
pub struct EmptyIdentifier(pub &'static str);

/// A worker flag's value that does not parse: the flag, the value given, and what is wrong
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value}: {problem}")]
pub struct FlagError {
    pub flag: &'static str,
    pub value: String,
    pub problem: String,
}

impl FlagError {
    fn new(flag: &'static str, value: &str, problem: impl Into<String>) -> Self {
        Self {
            flag,
            value: value.to_string(),
            problem: problem.into(),
        }
    }
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = EmptyIdentifier;
            fn from_str(s: &str) -> Result<Self, EmptyIdentifier> {
                if s.is_empty() {
                    Err(EmptyIdentifier(stringify!($name)))
                } else {
                    Ok(Self(s.to_string()))
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl From<&$name> for String {
            fn from(id: &$name) -> String {
                id.0.clone()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == &other.0
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> Self {
                id.clone()
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                Self(s.clone())
            }
        }
    };
}

identifier!(
    /// A run's id: `<matrix name>-<yyyymmdd>-<hhmmss>-<hex>`, or what `--run-id` gave.
    RunId
);
identifier!(
    /// A member of a run: `<group>-<index>` (`triton-0`, `grpc-clients-3`), or the driver.
    MemberName
);

/// The protocol a client speaks to Triton.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Triton's gRPC endpoint (default port 8001).
    Grpc,
    /// Triton's HTTP/REST endpoint (default port 8000).
    Http,
}

impl Protocol {
    /// The name as written in a matrix and on the command line (`grpc` / `http`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Traffic shape of the `Load` scenario, as perf_analyzer offers it. In a matrix: exactly one of
/// `{concurrency: N}`, `{rate: R}` (with `arrivals: poisson` for Poisson arrivals) or
/// `{request_intervals: FILE}`; on the worker's command line `--load-concurrency`,
/// `--load-rate` (with `--load-arrivals`) or `--request-intervals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "LoadRepr", into = "LoadRepr")]
pub enum LoadMode {
    /// Closed loop: this many requests in flight at all times, at least 1.
    Concurrency(u32),
    /// Open loop: this many requests per second at fixed intended times, whatever the latency.
    Rate(f64),
    /// Open loop: Poisson arrivals (exponential gaps) at this mean rate.
    Poisson(f64),
    /// Open loop: the gaps of a perf_analyzer request-intervals file (microseconds, one per
    /// line, cycled): see [`crate::schedule::RequestIntervals`].
    Intervals(PathBuf),
}

impl LoadMode {
    /// The worker's default when neither is given.
    pub const DEFAULT: LoadMode = LoadMode::Concurrency(2);

    /// Why the value cannot run, if it cannot (see [`limits`]). A request-intervals file is
    /// checked where it is read ([`crate::schedule::RequestIntervals::read`]).
    pub fn check(&self) -> Result<(), LoadModeError> {
        use limits::{MAX_CONCURRENCY, MAX_RATE, MIN_RATE};
        match *self {
            LoadMode::Concurrency(0) => Err(LoadModeError::ZeroConcurrency),
            LoadMode::Concurrency(c) if c > MAX_CONCURRENCY => {
                Err(LoadModeError::ConcurrencyTooHigh(c))
            }
            LoadMode::Rate(r) | LoadMode::Poisson(r) if !(MIN_RATE..=MAX_RATE).contains(&r) => {
                Err(LoadModeError::RateOutOfRange(r))
            }
            _ => Ok(()),
        }
    }

    /// Closed loop (a fixed concurrency) rather than a schedule.
    pub fn is_closed_loop(&self) -> bool {
        matches!(self, LoadMode::Concurrency(_))
    }

    /// The open-loop schedule of a rate; None for a closed loop and for request intervals
    /// (their schedule is the file's, read by whoever sends).
    pub fn rate_schedule(&self) -> Option<crate::schedule::Schedule> {
        use crate::schedule::{Arrivals, Schedule};
        match *self {
            LoadMode::Rate(rate) => Some(Schedule::Rate {
                rate,
                arrivals: Arrivals::Constant,
            }),
            LoadMode::Poisson(rate) => Some(Schedule::Rate {
                rate,
                arrivals: Arrivals::Poisson,
            }),
            LoadMode::Concurrency(_) | LoadMode::Intervals(_) => None,
        }
    }
}

/// A load mode beyond what a worker runs (see [`limits`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadModeError {
    #[error("load concurrency must be at least 1")]
    ZeroConcurrency,
    #[error(
        "load concurrency {0} is more than the {max} a worker takes",
        max = limits::MAX_CONCURRENCY
    )]
    ConcurrencyTooHigh(u32),
    #[error(
        "load rate {0:?} must be from {min} to {max} requests per second",
        min = limits::MIN_RATE,
        max = limits::MAX_RATE
    )]
    RateOutOfRange(f64),
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRepr {
    concurrency: Option<u32>,
    rate: Option<f64>,
    arrivals: Option<crate::schedule::Arrivals>,
    request_intervals: Option<PathBuf>,
}

impl TryFrom<LoadRepr> for LoadMode {
    type Error = String;

    fn try_from(r: LoadRepr) -> Result<Self, String> {
        use crate::schedule::Arrivals;
        let given: Vec<&str> = [
            r.concurrency.map(|_| "concurrency"),
            r.rate.map(|_| "rate"),
            r.request_intervals.as_ref().map(|_| "request_intervals"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mode = match (r.concurrency, r.rate, r.request_intervals) {
            (Some(c), None, None) => LoadMode::Concurrency(c),
            (None, Some(r), None) => LoadMode::Rate(r),
            (None, None, Some(path)) => LoadMode::Intervals(path),
            _ if given.is_empty() => {
                return Err(
                    "exactly one of `concurrency`, `rate` or `request_intervals` must be set, found none"
                        .into(),
                );
            }
            _ => {
                return Err(format!(
                    "exactly one of `concurrency`, `rate` or `request_intervals` must be set, found {}",
                    given.join(" and ")
                ));
            }
        };
        match (mode, r.arrivals) {
            (LoadMode::Rate(rate), Some(Arrivals::Poisson)) => Ok(LoadMode::Poisson(rate)),
            (mode, None) | (mode @ LoadMode::Rate(_), Some(Arrivals::Constant)) => Ok(mode),
            (_, Some(_)) => Err("`arrivals` goes with `rate` only".into()),
        }
    }
}

impl From<LoadMode> for LoadRepr {
    fn from(l: LoadMode) -> Self {
        let mut repr = LoadRepr {
            concurrency: None,
            rate: None,
            arrivals: None,
            request_intervals: None,
        };
        match l {
            LoadMode::Concurrency(c) => repr.concurrency = Some(c),
            LoadMode::Rate(r) => repr.rate = Some(r),
            LoadMode::Poisson(r) => {
                repr.rate = Some(r);
                repr.arrivals = Some(crate::schedule::Arrivals::Poisson);
            }
            LoadMode::Intervals(p) => repr.request_intervals = Some(p),
        }
        repr
    }
}

impl JsonSchema for LoadMode {
    fn schema_name() -> Cow<'static, str> {
        "Load".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Traffic shape of the `Load` and `Infer` scenarios: exactly one of `concurrency` (closed loop), `rate` (open loop; `arrivals: poisson` for exponential gaps) or `request_intervals` (open loop on a perf_analyzer request-intervals file).",
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "concurrency": {
                            "description": "Closed loop: requests kept in flight, at least 1.",
                            "type": "integer",
                            "minimum": 1,
                            "maximum": limits::MAX_CONCURRENCY
                        }
                    },
                    "required": ["concurrency"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "rate": {
                            "description": "Open loop: requests per second at their intended times.",
                            "type": "number",
                            "minimum": limits::MIN_RATE,
                            "maximum": limits::MAX_RATE
                        },
                        "arrivals": {
                            "description": "constant (default): every gap 1/rate; poisson: exponential gaps of that mean.",
                            "enum": ["constant", "poisson"]
                        }
                    },
                    "required": ["rate"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "request_intervals": {
                            "description": "Open loop on perf_analyzer's --request-intervals format: one gap in microseconds per line, cycled. A relative path is relative to the matrix file.",
                            "type": "string",
                            "minLength": 1
                        }
                    },
                    "required": ["request_intervals"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// Correlation ids a worker needs per stress stream: upstream's 2 common + 8 rare client
/// contexts, each with its own sequence id.
pub const CORR_IDS_PER_STREAM: u64 = 10;

/// A worker's correlation ids `[base, base + size)`; no two clients of a run share one, so their
/// sequences never collide on a server (perf_analyzer's copies do: server#3103).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct CorrIdBlock {
    /// First correlation id of this worker's block (0 means "no sequence" to Triton).
    #[arg(
        id = "corr_id_base",
        long = "corr-id-base",
        env = "WORKER_CORR_ID_BASE",
        default_value_t = 1
    )]
    pub base: u64,
    /// Size of this worker's correlation-id block; streams split it evenly.
    #[arg(
        id = "corr_id_block_size",
        long = "corr-id-block-size",
        env = "WORKER_CORR_ID_BLOCK_SIZE",
        default_value_t = 1 << 20
    )]
    pub size: u64,
}

impl CorrIdBlock {
    /// How many ids `streams` stress streams need.
    pub fn needed(streams: u64) -> Option<u64> {
        streams.checked_mul(CORR_IDS_PER_STREAM)
    }

    /// Why `streams` streams cannot run in this block, if they cannot.
    pub fn check(&self, streams: u64) -> Result<(), CorrIdError> {
        if self.base == 0 {
            return Err(CorrIdError::ZeroBase);
        }
        if self.base.checked_add(self.size).is_none() {
            return Err(CorrIdError::Overflow {
                base: self.base,
                size: self.size,
            });
        }
        match Self::needed(streams) {
            Some(n) if self.size >= n => Ok(()),
            _ => Err(CorrIdError::TooSmall {
                size: self.size,
                streams,
            }),
        }
    }

    /// Stream `index` of `streams`: an even share of the block, in order.
    pub fn stream(&self, index: u64, streams: u64) -> CorrIdBlock {
        let per_stream = self.size / streams.max(1);
        CorrIdBlock {
            base: self.base + index * per_stream,
            size: per_stream,
        }
    }

    pub fn range(&self) -> std::ops::Range<u64> {
        self.base..self.base + self.size
    }
}

/// Why a correlation-id block cannot serve a worker's streams.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorrIdError {
    #[error("correlation ids start at 1 (Triton treats id 0 as no sequence)")]
    ZeroBase,
    #[error("correlation-id block {base} + {size} overflows 64 bits")]
    Overflow { base: u64, size: u64 },
    #[error(
        "block of {size} correlation ids is smaller than the {needed} that {streams} streams need ({CORR_IDS_PER_STREAM} each)",
        needed = streams.saturating_mul(CORR_IDS_PER_STREAM)
    )]
    TooSmall { size: u64, streams: u64 },
}

/// Hands out consecutive, non-overlapping correlation-id blocks, the first at 1.
#[derive(Debug, Clone)]
pub struct CorrIdAllocator {
    next: Option<u64>,
}

impl Default for CorrIdAllocator {
    fn default() -> Self {
        Self { next: Some(1) }
    }
}

impl CorrIdAllocator {
    /// The next block of `size` ids, or None once the blocks no longer fit in 64 bits.
    pub fn take(&mut self, size: u64) -> Option<CorrIdBlock> {
        let base = self.next?;
        self.next = base.checked_add(size);
        self.next.map(|_| CorrIdBlock { base, size })
    }
}

/// A weighted scenario mix: `NAME[:WEIGHT],...` on a command line (a missing weight is the
/// scenario's default), a mapping in a matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioMix(pub Vec<(Scenario, u32)>);

impl ScenarioMix {
    /// The default mix: every scenario of the default mix at its default weight (what a worker
    /// runs, and a matrix template means, when no mix is given).
    pub fn defaults() -> Self {
        ScenarioMix(
            Scenario::ALL
                .into_iter()
                .filter(|s| s.in_default_mix())
                .map(|s| (s, s.default_weight()))
                .collect(),
        )
    }

    /// Checks one weight as written (`3`; not `0`, `-1`, `1.5` or `x`).
    pub fn parse_weight(scenario: &str, weight: &str) -> Result<u32, ScenarioMixError> {
        let v: f64 = weight
            .parse()
            .map_err(|_| ScenarioMixError::WeightNotANumber {
                scenario: scenario.into(),
                weight: weight.into(),
            })?;
        if v <= 0.0 || v.is_nan() || v.fract() != 0.0 || v > u32::MAX as f64 {
            return Err(ScenarioMixError::WeightNotPositiveWhole {
                scenario: scenario.into(),
                weight: weight.into(),
            });
        }
        Ok(v as u32)
    }

    /// Looks a name up case-insensitively; the error lists the known names.
    pub fn scenario(name: &str) -> Result<Scenario, ScenarioMixError> {
        Scenario::parse(name).ok_or_else(|| ScenarioMixError::UnknownScenario(name.into()))
    }
}

/// What is wrong with a scenario mix (`NAME[:WEIGHT],...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioMixError {
    #[error(
        "unknown scenario {0:?} (known: {known})",
        known = Scenario::ALL.map(|s| s.name()).join(", ")
    )]
    UnknownScenario(String),
    #[error("scenario {scenario}: weight {weight:?} is not a number")]
    WeightNotANumber { scenario: String, weight: String },
    #[error("scenario {scenario}: weight {weight} must be a whole number greater than 0")]
    WeightNotPositiveWhole { scenario: String, weight: String },
    #[error("scenario {0} is listed twice")]
    Duplicate(String),
    #[error("the scenario mix is empty")]
    Empty,
}

impl std::str::FromStr for ScenarioMix {
    type Err = ScenarioMixError;

    fn from_str(s: &str) -> Result<Self, ScenarioMixError> {
        let mut mix: Vec<(Scenario, u32)> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, weight) = match item.split_once(':') {
                Some((n, w)) => (n.trim(), Some(w.trim())),
                None => (item, None),
            };
            let scenario = Self::scenario(name)?;
            let weight = match weight {
                None => scenario.default_weight(),
                Some(w) => Self::parse_weight(name, w)?,
            };
            if mix.iter().any(|(s, _)| *s == scenario) {
                return Err(ScenarioMixError::Duplicate(name.into()));
            }
            mix.push((scenario, weight));
        }
        if mix.is_empty() {
            return Err(ScenarioMixError::Empty);
        }
        Ok(ScenarioMix(mix))
    }
}

impl std::fmt::Display for ScenarioMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (s, w)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}:{w}")?;
        }
        Ok(())
    }
}

/// `--model NAME[@VERSION][:WEIGHT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSelection {
    pub name: String,
    /// Empty: the server's choice.
    pub version: String,
    /// Share of this model in the Infer scenario's mix across models.
    pub weight: u32,
}

impl ModelSelection {
    pub fn label(&self) -> String {
        if self.version.is_empty() {
            self.name.clone()
        } else {
            format!("{}@{}", self.name, self.version)
        }
    }
}

impl std::str::FromStr for ModelSelection {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let error = |problem: String| FlagError::new("--model", s, problem);
        let (model, weight) = match s.rsplit_once(':') {
            Some((m, w)) => {
                let weight: u32 = w.trim().parse().map_err(|_| {
                    error(format!("weight {w:?} is not a whole number greater than 0"))
                })?;
                if weight == 0 {
                    return Err(error("weight must be greater than 0".into()));
                }
                (m, weight)
            }
            None => (s, 1),
        };
        let (name, version) = match model.split_once('@') {
            Some((n, v)) => {
                if v.is_empty() || !v.chars().all(|c| c.is_ascii_digit()) {
                    return Err(error(format!("version {v:?} is not a number")));
                }
                (n, v)
            }
            None => (model, ""),
        };
        if name.is_empty() {
            return Err(error("no model name".into()));
        }
        Ok(ModelSelection {
            name: name.into(),
            version: version.into(),
            weight,
        })
    }
}

/// `--shape [MODEL/]INPUT:D1,D2,...` (perf_analyzer's syntax; the model prefix is this worker's
/// addition for several models).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeOverride {
    pub model: Option<String>,
    pub input: String,
    pub dims: Vec<i64>,
}

impl std::str::FromStr for ShapeOverride {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let error = |problem: String| FlagError::new("--shape", s, problem);
        let expected = || error("expected [MODEL/]INPUT:D1,D2,...".into());
        let (target, dims) = s.rsplit_once(':').ok_or_else(expected)?;
        let (model, input) = match target.split_once('/') {
            Some((m, i)) => (Some(m.to_string()), i),
            None => (None, target),
        };
        if input.is_empty() || model.as_deref() == Some("") {
            return Err(expected());
        }
        let dims = dims
            .split(',')
            .map(|d| match d.trim().parse::<i64>() {
                Ok(v) if v >= 0 => Ok(v),
                _ => Err(error(format!("dimension {d:?} is not a whole number >= 0"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShapeOverride {
            model,
            input: input.into(),
            dims,
        })
    }
}

/// Where an input's values come from (`--input-data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    Random,
    Zero,
    /// perf_analyzer's JSON format.
    File(PathBuf),
}

/// `--batch-size N` (every model) or `--batch-size MODEL=N` (one model), perf_analyzer's `-b`
/// with an optional model prefix like `--input-data`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSizeArg {
    pub model: Option<String>,
    pub size: u32,
}

impl std::str::FromStr for BatchSizeArg {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let (model, n) = match s.split_once('=') {
            Some((m, n)) if !m.is_empty() => (Some(m.to_string()), n),
            _ => (None, s),
        };
        let size = n
            .parse::<u32>()
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| FlagError::new("--batch-size", s, "expected a whole number >= 1"))?;
        Ok(BatchSizeArg { model, size })
    }
}

impl std::fmt::Display for BatchSizeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.model {
            write!(f, "{m}=")?;
        }
        write!(f, "{}", self.size)
    }
}

/// `--input-data zero|random|FILE|MODEL=FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputDataArg {
    pub model: Option<String>,
    pub source: DataSource,
}

impl std::str::FromStr for InputDataArg {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let (model, what) = match s.split_once('=') {
            Some((m, f)) if !m.is_empty() => (Some(m.to_string()), f),
            _ => (None, s),
        };
        let source = match what {
            "random" => DataSource::Random,
            "zero" => DataSource::Zero,
            "" => return Err(FlagError::new("--input-data", s, "no file")),
            f => DataSource::File(f.into()),
        };
        Ok(InputDataArg { model, source })
    }
}

impl std::fmt::Display for ModelSelection {
    /// `NAME[@VERSION]:WEIGHT`, which parses back to the same selection.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.label(), self.weight)
    }
}

impl std::fmt::Display for ShapeOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.model {
            write!(f, "{m}/")?;
        }
        let dims: Vec<String> = self.dims.iter().map(i64::to_string).collect();
        write!(f, "{}:{}", self.input, dims.join(","))
    }
}

impl std::fmt::Display for InputDataArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.model {
            write!(f, "{m}=")?;
        }
        match &self.source {
            DataSource::Random => f.write_str("random"),
            DataSource::Zero => f.write_str("zero"),
            DataSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What the driver tells a worker on its command line: built by the driver
/// ([`WorkerArgs::to_args`]), parsed by the worker (clap, flattened into its own flags), each with
/// an environment fallback so a pod can also be configured by env. The store URL is not here: it
/// travels in [`STORE_URL_ENV`].
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct WorkerArgs {
    /// Triton servers, HOST:PORT (the gRPC port for --protocol grpc, the HTTP port for http).
    #[arg(long, env = "WORKER_SERVERS", value_delimiter = ',')]
    pub servers: Vec<String>,
    #[arg(long, env = "WORKER_PROTOCOL", value_enum, default_value = "grpc")]
    pub protocol: Protocol,
    /// Scenario mix as NAME[:WEIGHT],... (default: every scenario at upstream's weights).
    #[arg(long, env = "WORKER_SCENARIOS")]
    pub scenarios: Option<ScenarioMix>,
    /// Concurrent stress streams.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = crate::limits::DEFAULT_CONCURRENCY)]
    pub concurrency: u32,
    /// How long to run (e.g. 60s, 8h); 0 runs until SIGTERM.
    #[arg(long, env = "WORKER_DURATION", default_value = "60s",
          value_parser = limits::duration_within(Duration::ZERO, limits::MAX_DURATION))]
    pub duration: Duration,
    #[command(flatten)]
    pub corr_ids: CorrIdBlock,
    /// Load scenario: requests kept in flight (closed loop).
    #[arg(long, env = "WORKER_LOAD_CONCURRENCY", conflicts_with = "load_rate")]
    pub load_concurrency: Option<u32>,
    /// Load scenario: requests per second at fixed intended times (open loop).
    #[arg(long, env = "WORKER_LOAD_RATE")]
    pub load_rate: Option<f64>,
    /// With --load-rate: constant gaps, or Poisson arrivals (exponential gaps of that mean).
    #[arg(long, env = "WORKER_LOAD_ARRIVALS", value_enum)]
    pub load_arrivals: Option<crate::schedule::Arrivals>,
    /// Load scenario, open loop on perf_analyzer's --request-intervals file: one gap in
    /// microseconds per line, cycled.
    #[arg(
        long,
        env = "WORKER_REQUEST_INTERVALS",
        conflicts_with_all = ["load_rate", "load_concurrency"]
    )]
    pub request_intervals: Option<PathBuf>,
    /// Capacity mode: every poll interval, read this worker's load concurrency from the store
    /// (the driver's controller sets it) and apply it from the next load window, without a
    /// restart. Needs a closed-loop load mode.
    #[arg(long, env = "WORKER_ADAPTIVE_LOAD")]
    pub adaptive_load: bool,
    /// The run's driver judges the failures: record each (the first examples of each signature
    /// in full, then counts) and keep going until stopped; the worker's own FAILURE event and
    /// exit code then say only whether it could run, not whether tests failed.
    #[arg(long, env = "WORKER_DRIVER_JUDGES")]
    pub driver_judges: bool,
    /// How often to report a QPS sample, counts and a heartbeat.
    #[arg(long, env = "WORKER_POLL_INTERVAL", default_value = "1s",
          value_parser = limits::duration_within(limits::MIN_POLL_INTERVAL, limits::MAX_POLL_INTERVAL))]
    pub poll_interval: Duration,
    #[arg(long, env = RUN_ID_ENV)]
    pub run_id: Option<RunId>,
    #[arg(long, env = MEMBER_ID_ENV)]
    pub member_id: Option<MemberName>,
    /// perf_analyzer binary for the PerfAnalyzer scenario (default: found on PATH); must exist
    /// when the mix runs PerfAnalyzer.
    #[arg(long, env = "PERF_ANALYZER")]
    pub perf_analyzer: Option<PathBuf>,
    /// A model to drive with the Infer scenario: NAME[@VERSION][:WEIGHT] (repeatable; weights
    /// split the Infer tests across models). With --model and no --scenarios only Infer runs.
    /// Infer listed in --scenarios without --model drives --load-model.
    #[arg(
        long = "model",
        short = 'm',
        env = "WORKER_MODELS",
        value_delimiter = ','
    )]
    pub models: Vec<ModelSelection>,
    /// Fills dynamic (-1) dims of an input: [MODEL/]INPUT:D1,D2,... (repeatable; the shape
    /// excludes the batch dimension, as in perf_analyzer).
    #[arg(long = "shape")]
    pub shapes: Vec<ShapeOverride>,
    /// Input data: zero, random (default), or a perf_analyzer JSON file (data, validation_data);
    /// MODEL=zero|random|FILE for one model (repeatable).
    #[arg(long = "input-data")]
    pub input_data: Vec<InputDataArg>,
    /// Batch size of the Infer requests (at most the model's max_batch_size): N for every
    /// model, MODEL=N for one (repeatable; the last applies). Default 1.
    #[arg(long = "batch-size", short = 'b')]
    pub batch_sizes: Vec<BatchSizeArg>,
    /// A foreign client program to run instead of the worker's scenarios, as a JSON array:
    /// `["python3", "client.py", "--grpc"]`. The worker supervises it and reports what it
    /// reports (interface 1, docs/clients.md).
    #[arg(long, env = "WORKER_CLIENT_COMMAND", conflicts_with = "scenarios")]
    pub client_command: Option<ClientCommand>,
    /// An environment variable for the client program: NAME=VALUE (repeatable).
    #[arg(long = "client-env", requires = "client_command")]
    pub client_env: Vec<EnvVar>,
    /// The share of unary inference requests sent with a W3C trace context (`traceparent`),
    /// each recorded as a client span (0 to 1; 0: none). Triton traces every request that
    /// carries a context, so this is the server's tracing load too.
    #[arg(long, env = "WORKER_TRACE_SHARE")]
    pub trace_share: Option<crate::trace::TraceShare>,
    /// Infer: the largest difference allowed between a float output and its validation data
    /// (0: exact).
    #[arg(long, env = "WORKER_TOLERANCE", default_value_t)]
    pub tolerance: Tolerance,
    /// Infer: a repeated input must give byte-identical outputs (for deterministic models).
    #[arg(long, env = "WORKER_CONSISTENCY")]
    pub consistency: bool,
}

/// `--tolerance` (a matrix's `tolerance`): how far a float output may be from its validation
/// data, a finite number >= 0.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Tolerance(f64);

impl Tolerance {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Tolerance {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v >= 0.0 && v.is_finite() {
            Ok(Self(v))
        } else {
            Err(format!("a tolerance is a finite number >= 0, not {v}"))
        }
    }
}

impl From<Tolerance> for f64 {
    fn from(t: Tolerance) -> f64 {
        t.0
    }
}

impl std::str::FromStr for Tolerance {
    type Err = FlagError;
    fn from_str(s: &str) -> Result<Self, FlagError> {
        let error = |problem: String| FlagError::new("--tolerance", s, problem);
        let v: f64 = s.parse().map_err(|e| error(format!("{e}")))?;
        Self::try_from(v).map_err(error)
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A foreign client's command line: a program and its arguments (`--client-command`, JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCommand(Vec<String>);

impl ClientCommand {
    /// The program and its arguments; never empty.
    pub fn argv(&self) -> &[String] {
        &self.0
    }

    /// The command with each of its words (the program too) rewritten by `f`.
    pub fn map_args(&self, f: impl Fn(&str) -> String) -> ClientCommand {
        ClientCommand(self.0.iter().map(|a| f(a)).collect())
    }
}

impl std::str::FromStr for ClientCommand {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let error = |problem: String| FlagError::new("--client-command", s, problem);
        let argv: Vec<String> = serde_json::from_str(s)
            .map_err(|e| error(format!("expected a JSON array of strings ({e})")))?;
        match argv.first() {
            Some(program) if !program.trim().is_empty() => Ok(ClientCommand(argv)),
            _ => Err(error("the array needs the program first".into())),
        }
    }
}

impl TryFrom<Vec<String>> for ClientCommand {
    type Error = FlagError;

    fn try_from(argv: Vec<String>) -> Result<Self, FlagError> {
        serde_json::to_string(&argv)
            .expect("strings are JSON")
            .parse()
    }
}

/// In a matrix: the array itself, refused when it has no program first.
impl serde::Serialize for ClientCommand {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for ClientCommand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(d)?;
        ClientCommand::try_from(argv).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

impl JsonSchema for ClientCommand {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClientCommand".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "The program, then its arguments.",
            "type": "array",
            "items": { "type": "string" },
            "minItems": 1
        })
    }
}

impl std::fmt::Display for ClientCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(&self.0).expect("strings are JSON"))
    }
}

/// `--client-env NAME=VALUE`: a name of letters, digits and `_`, not starting with a digit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

impl std::str::FromStr for EnvVar {
    type Err = FlagError;

    fn from_str(s: &str) -> Result<Self, FlagError> {
        let (name, value) = s
            .split_once('=')
            .ok_or_else(|| FlagError::new("--client-env", s, "expected NAME=VALUE"))?;
        let good = name
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if name.is_empty() || !good {
            return Err(FlagError::new(
                "--client-env",
                s,
                format!("{name:?} is not a variable name (letters, digits, _)"),
            ));
        }
        Ok(EnvVar {
            name: name.into(),
            value: value.into(),
        })
    }
}

impl std::fmt::Display for EnvVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.name, self.value)
    }
}

/// The worker flags the driver sets for every worker: [`WorkerArgs`]' own (long and short),
/// and where its records go. A template's `extra_args` may not repeat them.
pub fn reserved_worker_flags() -> Vec<String> {
    use clap::Args;
    let command = WorkerArgs::augment_args(clap::Command::new("worker"));
    let mut flags: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|long| format!("--{long}"))
        .collect();
    flags.extend(
        command
            .get_arguments()
            .filter_map(|a| a.get_short())
            .map(|short| format!("-{short}")),
    );
    flags.extend(["--store-url", "--status-file"].map(String::from));
    flags
}

impl WorkerArgs {
    /// The load mode the flags ask for (None: the worker's default).
    pub fn load(&self) -> Option<LoadMode> {
        use crate::schedule::Arrivals;
        if let Some(path) = &self.request_intervals {
            return Some(LoadMode::Intervals(path.clone()));
        }
        match (self.load_concurrency, self.load_rate, self.load_arrivals) {
            (_, Some(r), Some(Arrivals::Poisson)) => Some(LoadMode::Poisson(r)),
            (_, Some(r), _) => Some(LoadMode::Rate(r)),
            (Some(n), None, _) => Some(LoadMode::Concurrency(n)),
            (None, None, _) => None,
        }
    }

    /// Why the load flags do not go together, if they do not (clap's `requires` does not see
    /// a flattened group's flag).
    pub fn load_conflict(&self) -> Option<&'static str> {
        (self.load_arrivals.is_some() && self.load_rate.is_none())
            .then_some("--load-arrivals shapes a --load-rate: give the rate too")
    }

    pub fn set_load(&mut self, load: Option<LoadMode>) {
        use crate::schedule::Arrivals;
        (
            self.load_concurrency,
            self.load_rate,
            self.load_arrivals,
            self.request_intervals,
        ) = match load {
            Some(LoadMode::Concurrency(n)) => (Some(n), None, None, None),
            Some(LoadMode::Rate(r)) => (None, Some(r), None, None),
            Some(LoadMode::Poisson(r)) => (None, Some(r), Some(Arrivals::Poisson), None),
            Some(LoadMode::Intervals(p)) => (None, None, None, Some(p)),
            None => (None, None, None, None),
        };
    }

    /// The command line that parses back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--servers".to_string(),
            self.servers.join(","),
            "--protocol".into(),
            self.protocol.as_str().into(),
            "--concurrency".into(),
            self.concurrency.to_string(),
            "--duration".into(),
            humantime::format_duration(self.duration).to_string(),
            "--corr-id-base".into(),
            self.corr_ids.base.to_string(),
            "--corr-id-block-size".into(),
            self.corr_ids.size.to_string(),
            "--poll-interval".into(),
            humantime::format_duration(self.poll_interval).to_string(),
        ];
        if let Some(mix) = &self.scenarios {
            args.extend(["--scenarios".into(), mix.to_string()]);
        }
        if let Some(n) = self.load_concurrency {
            args.extend(["--load-concurrency".into(), n.to_string()]);
        }
        if let Some(r) = self.load_rate {
            // `{}` of an f64 is the shortest text that parses back to the same value.
            args.extend(["--load-rate".into(), r.to_string()]);
        }
        if let Some(a) = self.load_arrivals {
            let name = clap::ValueEnum::to_possible_value(&a).expect("no variant is skipped");
            args.extend(["--load-arrivals".into(), name.get_name().to_string()]);
        }
        if let Some(p) = &self.request_intervals {
            args.extend(["--request-intervals".into(), p.display().to_string()]);
        }
        if self.adaptive_load {
            args.push("--adaptive-load".into());
        }
        if self.driver_judges {
            args.push("--driver-judges".into());
        }
        if let Some(id) = &self.run_id {
            args.extend(["--run-id".into(), id.to_string()]);
        }
        if let Some(id) = &self.member_id {
            args.extend(["--member-id".into(), id.to_string()]);
        }
        if let Some(p) = &self.perf_analyzer {
            args.extend(["--perf-analyzer".into(), p.display().to_string()]);
        }
        for m in &self.models {
            args.extend(["--model".into(), m.to_string()]);
        }
        for s in &self.shapes {
            args.extend(["--shape".into(), s.to_string()]);
        }
        for d in &self.input_data {
            args.extend(["--input-data".into(), d.to_string()]);
        }
        for b in &self.batch_sizes {
            args.extend(["--batch-size".into(), b.to_string()]);
        }
        if let Some(c) = &self.client_command {
            args.extend(["--client-command".into(), c.to_string()]);
        }
        for e in &self.client_env {
            args.extend(["--client-env".into(), e.to_string()]);
        }
        if let Some(share) = self.trace_share {
            args.extend(["--trace-share".into(), share.to_string()]);
        }
        if self.tolerance != Tolerance::default() {
            args.extend(["--tolerance".into(), self.tolerance.to_string()]);
        }
        if self.consistency {
            args.push("--consistency".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_flag_value_that_does_not_parse_names_the_flag_the_value_and_what_is_wrong() {
        let problem = |e: FlagError| (e.flag, e.value, e.problem);
        assert_eq!(
            problem("add_sub:0".parse::<ModelSelection>().unwrap_err()),
            (
                "--model",
                "add_sub:0".into(),
                "weight must be greater than 0".into()
            )
        );
        assert_eq!(
            problem("m@x".parse::<ModelSelection>().unwrap_err()),
            (
                "--model",
                "m@x".into(),
                "version \"x\" is not a number".into()
            )
        );
        assert_eq!(
            problem("m/IN:2,-1".parse::<ShapeOverride>().unwrap_err()).2,
            "dimension \"-1\" is not a whole number >= 0"
        );
        assert_eq!(
            "0".parse::<BatchSizeArg>().unwrap_err().to_string(),
            "--batch-size 0: expected a whole number >= 1"
        );
        assert_eq!(
            "m=".parse::<InputDataArg>().unwrap_err().to_string(),
            "--input-data m=: no file"
        );
        for bad in ["-0.1", "NaN", "inf"] {
            assert_eq!(
                problem(bad.parse::<Tolerance>().unwrap_err()).0,
                "--tolerance",
                "{bad}"
            );
        }
        assert!(serde_json::from_str::<Tolerance>("-1").is_err());
        assert_eq!("1e-3".parse::<Tolerance>().unwrap().get(), 0.001);
        assert_eq!(
            "".parse::<RunId>().unwrap_err().to_string(),
            "RunId must not be empty"
        );
    }

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: WorkerArgs,
    }

    fn parse(args: &[String]) -> Result<WorkerArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("worker".to_string()).chain(args.iter().cloned()))
            .map(|c| c.args)
    }

    fn sample() -> WorkerArgs {
        WorkerArgs {
            servers: vec!["127.0.0.1:8001".into(), "[::1]:9001".into()],
            protocol: Protocol::Http,
            scenarios: Some("SequenceValid:295,timeout:3,Load".parse().unwrap()),
            concurrency: 7,
            duration: Duration::from_millis(90_500),
            corr_ids: CorrIdBlock {
                base: 1 + 3 * 4096,
                size: 4096,
            },
            load_concurrency: None,
            load_rate: Some(1234.5678),
            load_arrivals: None,
            request_intervals: None,
            adaptive_load: true,
            driver_judges: true,
            poll_interval: Duration::from_millis(250),
            run_id: Some("smoke-20261123-101500-ab12".into()),
            member_id: Some("grpc-clients-3".into()),
            perf_analyzer: Some("/opt/pa dir/perf_analyzer".into()),
            models: vec!["resnet@3:5".parse().unwrap(), "bert".parse().unwrap()],
            shapes: vec!["resnet/IN:3,224".parse().unwrap(), "IN2:0".parse().unwrap()],
            input_data: vec![
                "bert=/data dir/b.json".parse().unwrap(),
                "resnet=zero".parse().unwrap(),
                "random".parse().unwrap(),
            ],
            batch_sizes: vec!["8".parse().unwrap(), "bert=2".parse().unwrap()],
            client_command: None,
            client_env: Vec::new(),
            trace_share: Some("0.015".parse().unwrap()),
            tolerance: "0.001".parse().unwrap(),
            consistency: true,
        }
    }

    #[test]
    fn worker_args_round_trip() {
        let a = sample();
        assert_eq!(parse(&a.to_args()).unwrap(), a);
        let mut b = sample();
        b.set_load(Some(LoadMode::Concurrency(3)));
        b.scenarios = None;
        b.run_id = None;
        b.perf_analyzer = None;
        b.duration = Duration::ZERO;
        b.models = vec!["m".parse().unwrap()];
        b.shapes.clear();
        b.input_data = vec!["/abs/file.json".parse().unwrap()];
        b.batch_sizes.clear();
        b.adaptive_load = false;
        b.driver_judges = false;
        b.trace_share = None;
        b.tolerance = Tolerance::default();
        b.consistency = false;
        assert_eq!(parse(&b.to_args()).unwrap(), b);
        assert_eq!(b.load(), Some(LoadMode::Concurrency(3)));
        for mode in [
            LoadMode::Poisson(12.5),
            LoadMode::Rate(3.0),
            LoadMode::Intervals("/abs/gaps.txt".into()),
        ] {
            b.set_load(Some(mode.clone()));
            let back = parse(&b.to_args()).unwrap();
            assert_eq!(back, b);
            assert_eq!(back.load(), Some(mode));
        }
        // Request intervals exclude a rate; arrivals need one.
        let mut both = b.to_args();
        both.extend(["--load-rate".into(), "5".into()]);
        assert!(parse(&both).is_err());
        b.set_load(Some(LoadMode::Concurrency(3)));
        let mut arrivals = b.to_args();
        arrivals.extend(["--load-arrivals".into(), "poisson".into()]);
        assert!(parse(&arrivals).unwrap().load_conflict().is_some());
        assert!(b.load_conflict().is_none());
        // A foreign client instead of the scenarios, with its environment.
        let mut c = b.clone();
        c.client_command = Some(
            vec![
                "python3".into(),
                "client.py".into(),
                "a b".into(),
                "\"q\"".into(),
            ]
            .try_into()
            .unwrap(),
        );
        c.client_env = vec!["MODE=grpc".parse().unwrap(), "X_1=a=b".parse().unwrap()];
        assert_eq!(parse(&c.to_args()).unwrap(), c);
    }

    #[test]
    fn a_client_command_is_a_json_array_with_a_program_and_env_names_are_names() {
        for bad in ["python3 client.py", "[]", "[\"\"]", "[1]", "{}"] {
            assert!(bad.parse::<ClientCommand>().is_err(), "{bad}");
        }
        let c: ClientCommand = r#"["./client", "--fast"]"#.parse().unwrap();
        assert_eq!(c.argv(), ["./client", "--fast"]);
        for bad in ["NOVALUE", "=x", "1A=x", "A-B=x"] {
            assert!(bad.parse::<EnvVar>().is_err(), "{bad}");
        }
        let e: EnvVar = "A_1=x=y".parse().unwrap();
        assert_eq!((e.name.as_str(), e.value.as_str()), ("A_1", "x=y"));
    }

    #[test]
    fn worker_args_defaults() {
        let a = parse(&["--servers".into(), "h:1".into()]).unwrap();
        assert_eq!(a.protocol, Protocol::Grpc);
        assert_eq!(a.concurrency, 4);
        assert_eq!(a.duration, Duration::from_secs(60));
        assert_eq!(
            a.corr_ids,
            CorrIdBlock {
                base: 1,
                size: 1 << 20
            }
        );
        assert_eq!(a.load(), None);
        assert!(a.scenarios.is_none());
        assert!(a.models.is_empty() && a.shapes.is_empty() && a.input_data.is_empty());
        assert!(a.batch_sizes.is_empty());
        let short = parse(&["-m".into(), "a@2:3,b".into(), "-b".into(), "4".into()]).unwrap();
        assert_eq!(short.models.len(), 2);
        assert_eq!(short.models[0].to_string(), "a@2:3");
        assert_eq!(
            short.batch_sizes,
            [BatchSizeArg {
                model: None,
                size: 4
            }]
        );
        for bad in ["0", "a=0", "x", "a=", "m=-1"] {
            let e = parse(&["-b".into(), bad.into()]).unwrap_err().to_string();
            assert!(e.contains("expected a whole number >= 1"), "{bad}: {e}");
        }
        let both = parse(&[
            "--load-rate".into(),
            "5".into(),
            "--load-concurrency".into(),
            "2".into(),
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn mixes_parse_and_print() {
        let m: ScenarioMix = "SequenceValid:3, timeout".parse().unwrap();
        assert_eq!(
            m.0,
            vec![(Scenario::SequenceValid, 3), (Scenario::Timeout, 60)]
        );
        assert_eq!(m.to_string(), "SequenceValid:3,Timeout:60");
        assert_eq!(m.to_string().parse::<ScenarioMix>().unwrap(), m);
        let err = "Bogus:1".parse::<ScenarioMix>().unwrap_err().to_string();
        assert!(err.contains("unknown scenario \"Bogus\""), "{err}");
        for bad in ["Timeout:0", "Timeout:-1", "Timeout:x", "Timeout:1.5"] {
            let err = bad.parse::<ScenarioMix>().unwrap_err().to_string();
            assert!(err.contains("Timeout"), "{bad}: {err}");
        }
        assert!("Timeout,timeout:2".parse::<ScenarioMix>().is_err());
        assert!("".parse::<ScenarioMix>().is_err());
        let defaults = ScenarioMix::defaults().0;
        assert!(defaults.iter().all(|(s, _)| s.in_default_mix()));
        assert!(!defaults.iter().any(|(s, _)| *s == Scenario::Infer));
        assert_eq!(defaults.len(), Scenario::ALL.len() - 1);
    }

    #[test]
    fn corr_id_blocks_never_overlap_and_split_by_stream() {
        let mut alloc = CorrIdAllocator::default();
        let a = alloc.take(100).unwrap();
        let b = alloc.take(50).unwrap();
        assert_eq!((a.base, a.size, b.base), (1, 100, 101));
        assert!(a.range().end <= b.range().start);
        assert_eq!(
            a.stream(3, 4),
            CorrIdBlock {
                base: 1 + 3 * 25,
                size: 25
            }
        );
        assert!(a.check(10).is_ok());
        assert!(
            a.check(11)
                .unwrap_err()
                .to_string()
                .contains("smaller than the 110")
        );
        assert!(CorrIdBlock { base: 0, size: 10 }.check(1).is_err());
        assert!(
            CorrIdBlock {
                base: u64::MAX,
                size: 10
            }
            .check(1)
            .is_err()
        );
        let mut full = CorrIdAllocator::default();
        assert!(full.take(u64::MAX - 1).is_some());
        assert!(full.take(1).is_none(), "a block past 2^64 is refused");
        assert!(full.take(1).is_none());
    }

    #[test]
    fn load_modes() {
        for (yaml, want) in [
            (r#"{"concurrency": 3}"#, Some(LoadMode::Concurrency(3))),
            (r#"{"rate": 2.5}"#, Some(LoadMode::Rate(2.5))),
            (r#"{"rate": 2.5, "concurrency": 1}"#, None),
            ("{}", None),
            (
                r#"{"rate": 2.5, "arrivals": "poisson"}"#,
                Some(LoadMode::Poisson(2.5)),
            ),
            (
                r#"{"rate": 2.5, "arrivals": "constant"}"#,
                Some(LoadMode::Rate(2.5)),
            ),
            (r#"{"concurrency": 2, "arrivals": "poisson"}"#, None),
            (r#"{"rate": 2.5, "arrivals": "bursty"}"#, None),
            (
                r#"{"request_intervals": "gaps.txt"}"#,
                Some(LoadMode::Intervals("gaps.txt".into())),
            ),
            (r#"{"request_intervals": "gaps.txt", "rate": 1}"#, None),
        ] {
            let got: Result<LoadMode, _> = serde_json::from_str(yaml);
            assert_eq!(got.ok(), want, "{yaml}");
        }
        assert!(LoadMode::Concurrency(0).check().is_err());
        assert!(LoadMode::Rate(f64::INFINITY).check().is_err());
        assert!(LoadMode::Rate(0.0).check().is_err());
        assert!(LoadMode::Rate(1e-3).check().is_ok());
        assert!(LoadMode::Rate(1e-300).check().is_err());
        let reserved = reserved_worker_flags();
        for flag in [
            "--run-id",
            "--member-id",
            "--servers",
            "--duration",
            "-m",
            "--store-url",
        ] {
            assert!(reserved.iter().any(|r| r == flag), "{flag}: {reserved:?}");
        }
        // Every flag the driver renders is reserved.
        let rendered = sample().to_args();
        for flag in rendered.iter().filter(|a| a.starts_with('-')) {
            let name = flag.split('=').next().unwrap();
            assert!(reserved.iter().any(|r| r == name), "{name}");
        }
        assert!(LoadMode::Rate(f64::NAN).check().is_err());
        assert!(LoadMode::Rate(1e300).check().is_err());
        assert!(LoadMode::Concurrency(u32::MAX).check().is_err());
        assert!(
            LoadMode::Concurrency(limits::MAX_CONCURRENCY)
                .check()
                .is_ok()
        );
    }

    #[test]
    fn identifiers_are_transparent() {
        let id = RunId::new("r-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"r-1\"");
        assert_eq!(&*id, "r-1");
        assert!("".parse::<MemberName>().is_err());
    }
}
