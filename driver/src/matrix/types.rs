//! The matrix types. They are the single source of truth for the YAML format: serde reads them
//! strictly (`deny_unknown_fields` everywhere) and schemars turns them, doc comments included,
//! into the JSON schema committed as `test-matrices/schema.json`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use stress_common::scenario::Scenario;
use stress_common::trace::TraceShare;

use super::checked;
use super::duration::HumanDuration;
pub use super::known::{IssueMatch, KnownIssue};
pub use super::slo::{SloBound, SloMetric, SloRule};

/// The only matrix format version this driver reads.
pub const MATRIX_VERSION: u32 = 1;

/// Default size of the correlation-id block handed to each client member.
pub const DEFAULT_CORR_ID_BLOCK_SIZE: u64 = 1 << 20;

/// A stress test matrix: which Triton servers to start, which stress clients to run against
/// them, and for how long.
///
/// Templates describe *what* a member runs; groups say *how many* members of a template to
/// start and, for clients, which server group they talk to. Members are named
/// `<group>-<index>` (index from 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Triton stress test matrix (version 1)")]
pub struct Matrix {
    /// Format version of this file. Must be `1`.
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,

    /// Settings of the whole run.
    pub run: RunSettings,

    /// Server templates by name (a DNS-1123 label). A server group instantiates one. May be
    /// omitted when every server group names existing servers (`endpoints`).
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "pattern": NAME_PATTERN }))]
    pub server_templates: IndexMap<String, ServerTemplate>,

    /// Server groups by name (a DNS-1123 label, distinct from every client group name).
    /// Members are named `<group>-<index>`.
    #[schemars(extend("propertyNames" = { "pattern": NAME_PATTERN }))]
    pub server_groups: IndexMap<String, ServerGroup>,

    /// Client (stress worker) templates by name (a DNS-1123 label). A client group
    /// instantiates one.
    #[schemars(extend("propertyNames" = { "pattern": NAME_PATTERN }))]
    pub client_templates: IndexMap<String, ClientTemplate>,

    /// Client groups by name (a DNS-1123 label, distinct from every server group name).
    /// Members are named `<group>-<index>`.
    #[schemars(extend("propertyNames" = { "pattern": NAME_PATTERN }))]
    pub client_groups: IndexMap<String, ClientGroup>,

    /// The capacity controller's settings; required with `run.mode: capacity`, refused
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacitySettings>,

    /// How the run is compared with its baseline (the last passing runs of the same matrix, a
    /// pinned one, or `--baseline RUN`); omitted: the defaults (10%, a window of 5, findings
    /// only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<RegressionSettings>,

    /// What happens with the report besides the files in the run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportSettings>,

    /// Failures known to happen (an upstream bug, a known limit of the setup): a failure they
    /// match is counted and shown under "Known issues" and neither fails fast nor fails the run,
    /// unless the entry's `until` date has passed or its rate is above `max_per_hour`. `driver
    /// run --known-issues FILE` adds the entries of a file (a list of the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_issues: Vec<KnownIssue>,

    /// Faults injected on purpose during the load phase (a server killed, restarted or paused):
    /// the failures they cause are classified `injected` and neither fail fast nor fail the
    /// run; the run fails when the clients do not recover within each fault's
    /// `expect.recover_within`, when answers are wrong after the recovery, or on any failure
    /// outside the faults' windows. The report shows each fault's timeline. `soak` mode only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<super::faults::Fault>,

    /// An A/B of two server templates under the same clients, in interleaved runs (A, B, A, B,
    /// …), each metric's change of B against A with its 95% interval and a rank test's p.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<super::compare::CompareSettings>,

    /// Which configuration of a server group serves most at the target (capacity mode): each
    /// combination of the parameters' values gets its own servers and a capacity search, and
    /// the report ranks them and names the best with its config.pbtxt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<super::sweep::Sweep>,

    /// The file this matrix was loaded from, set by [`super::load`]; relative local paths
    /// (model repositories, binaries) are resolved against its directory. Not part of the YAML.
    #[serde(skip)]
    #[schemars(skip)]
    pub source_path: Option<PathBuf>,

    /// The SLO rules read once where the matrix is checked, ready to judge: run level first,
    /// then each client group's. Not part of the YAML.
    #[serde(skip)]
    #[schemars(skip)]
    pub slo_rules: Vec<super::slo::Rule>,

    /// `known_issues` read once where the matrix is checked (regexes compiled, dates read);
    /// `driver run --known-issues FILE` adds a file's. Not part of the YAML.
    #[serde(skip)]
    #[schemars(skip)]
    pub known: Vec<super::known::Known>,
}

/// Settings of the whole run.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Name of the run: a DNS-1123 label, used in pod and process names
    /// (`<run>-<member>`).
    #[serde(deserialize_with = "checked::run_name")]
    #[schemars(with = "Name")]
    pub name: String,

    /// How long the clients run, from the moment they are started. At most 30 days.
    #[serde(with = "checked::positive_run_length")]
    #[schemars(with = "HumanDuration")]
    pub duration: Duration,

    /// How often the driver polls the status store: from 100ms to 1h, and at most `duration`.
    #[serde(with = "checked::poll_interval", default = "defaults::poll_interval")]
    #[schemars(with = "HumanDuration")]
    pub poll_interval: Duration,

    /// Pause after every server is ready and before the clients start. May be `0s`; at most
    /// a day.
    #[serde(with = "checked::wait", default)]
    #[schemars(with = "HumanDuration")]
    pub warmup: Duration,

    /// How long a server may take to become ready before the run fails (at most a day).
    #[serde(
        with = "checked::positive_wait",
        default = "defaults::server_ready_timeout"
    )]
    #[schemars(with = "HumanDuration")]
    pub server_ready_timeout: Duration,

    /// Kubernetes namespace (a DNS-1123 label) for the kube launcher; the local launcher
    /// ignores it. Omitted: the launcher's default namespace.
    #[serde(default, deserialize_with = "checked::namespace")]
    #[schemars(with = "Option<Name>")]
    pub namespace: Option<String>,

    /// Keep the pods (kube) or working directories and logs (local) of members that failed,
    /// for inspection. Healthy members are always cleaned up.
    #[serde(default = "defaults::yes")]
    pub keep_failed: bool,

    /// When the driver stops a run early.
    #[serde(default)]
    pub fail_fast: FailFast,

    /// `soak` (default): run the scenarios for `duration` and judge failures. `capacity`: each
    /// client group's load is driven toward `capacity.target_p99` by an AIMD controller, and
    /// the run ends when every group has converged (or at `duration`, which caps it).
    #[serde(default)]
    pub mode: RunMode,

    /// Run the load this many times, each a run of its own with fresh servers (`RUN-r1`, …),
    /// and report each metric's mean and 95% interval across them (Student's t): the spread
    /// between runs is where most of it arises (default 1, at most 100; `driver run --repeat`
    /// overrides it). Not with a sweep.
    #[serde(
        default = "defaults::repeat",
        deserialize_with = "checked::repeat",
        skip_serializing_if = "defaults::is_one"
    )]
    pub repeat: u32,

    /// `together` (default): every client group runs at once. `in_turn`: each cell of the
    /// client × server grid (a client template's groups against one server group) runs alone
    /// for `duration`, as a run of its own (`RUN-c1`, `RUN-c2`, …) with only its servers, one
    /// after another, so that on a small machine a cell measures its client and server, not
    /// the other cells' CPU; grid.txt and grid.json gather them. Not with `repeat`, `compare`
    /// or a sweep.
    #[serde(default, skip_serializing_if = "CellSchedule::is_together")]
    pub cells: CellSchedule,

    /// Service-level objectives over all client groups: a rule breached at the end fails the
    /// run (exit 1); one with `abort_on_fail` is also checked every poll and stops the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<SloRule>,

    /// Seeds what the run draws at random (the faults' jitter and which member of a group a
    /// fault hits). Omitted: derived from `name`, so the same matrix draws the same each night.
    pub seed: Option<u64>,

    /// Where to send the run's spans on to (an OTLP/HTTP endpoint of your collector: Tempo,
    /// Jaeger, an OpenTelemetry Collector), e.g. `http://otel-collector:4318/v1/traces`:
    /// the servers' spans as they arrive and the clients' spans of traced requests
    /// (`trace_share`) as the workers record them (every 5 s), sharing trace ids. An
    /// `https://` target's certificate is checked against the system's roots (`SSL_CERT_FILE`
    /// adds a private CA). What cannot be sent is dropped and counted.
    #[schemars(with = "Option<String>", extend("format" = "uri"))]
    pub otlp_forward: Option<HttpUrl>,
}

/// What a run is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    #[default]
    Soak,
    Capacity,
}

/// How the cells of a matrix share the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellSchedule {
    /// Every client group runs at once, for `duration`.
    #[default]
    Together,
    /// Each cell runs alone for `duration`, as a run of its own (`RUN-c1`, `RUN-c2`, …, in the
    /// matrix's order) with only its own servers, fresh; the run's grid.txt and grid.json
    /// gather the cells.
    InTurn,
}

impl CellSchedule {
    pub fn is_together(&self) -> bool {
        *self == Self::Together
    }
}

/// A capacity run's phases, run in the order listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityPhase {
    /// Each model of the group's `models:` alone, one after the other: per-model capacity.
    Individual,
    /// The client group's weighted model mix, as its template gives it.
    Production,
    /// Each mix of `capacity.exploration`, one after the other.
    Exploration,
    /// From the load an earlier phase converged on (production's, else the latest with an
    /// answer), an open-loop jump to `capacity.spike.target_rps` for `spike.duration`, then back:
    /// the error rate and p99 during the spike and the time to recover.
    Spike,
}

impl CapacityPhase {
    /// The phase as the matrix and the report name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityPhase::Individual => "individual",
            CapacityPhase::Production => "production",
            CapacityPhase::Exploration => "exploration",
            CapacityPhase::Spike => "spike",
        }
    }
}

/// The AIMD controller of capacity mode, per client group: every `check_interval` it merges the
/// group's latency histograms over the window since the last check (exact percentiles) and sets
/// the group's total closed-loop concurrency, split across its workers.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacitySettings {
    /// The p99 latency the load is driven toward (e.g. `50ms`).
    #[serde(with = "checked::positive_wait")]
    #[schemars(with = "HumanDuration")]
    pub target_p99: Duration,

    /// Phases to run, in order (default `[production]`). The workers switch models and load
    /// live between phases (they are not restarted); each phase's controller starts again at
    /// min_concurrency.
    #[serde(default = "defaults::capacity_phases")]
    pub phases: Vec<CapacityPhase>,

    /// The exploration phase's alternative mixes, each `{MODEL: WEIGHT, ...}` over models of the
    /// client groups' `models:` (`MODEL@VERSION` for a model listed with that `version`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "checked::model_weight"
    )]
    pub exploration: Vec<IndexMap<String, u32>>,

    /// The spike phase's jump (needed when `phases` has spike).
    pub spike: Option<SpikeSettings>,

    /// Lowest total concurrency of a group (default 1; at least the group's instances, since
    /// every worker keeps at least one request in flight). The controller starts here.
    #[serde(default, deserialize_with = "checked::group_concurrency")]
    pub min_concurrency: Option<u32>,

    /// Highest total concurrency of a group (default 64).
    #[serde(
        default = "defaults::max_concurrency",
        deserialize_with = "checked::group_concurrency"
    )]
    pub max_concurrency: u32,

    /// Additive increase per check while p99 is under the target (default 1); also the width
    /// at which a bisection stops.
    #[serde(
        default = "defaults::one",
        deserialize_with = "checked::group_concurrency"
    )]
    pub increase_step: u32,

    /// Start by doubling the concurrency until the first window over the target (or with
    /// failures), then bisect between the last concurrency that met the target and the first
    /// that did not, then AIMD around the knee (default true). false: AIMD from
    /// min_concurrency, `increase_step` at a time.
    #[serde(default = "defaults::yes", skip_serializing_if = "defaults::is_true")]
    pub slow_start: bool,

    /// Multiplicative decrease when p99 is over the target: concurrency × this, in (0, 1)
    /// (default 0.8).
    #[serde(
        default = "defaults::decrease_rate",
        deserialize_with = "checked::decrease_rate"
    )]
    pub decrease_rate: f64,

    /// How often the controller judges a window and acts (default `5s`; at least the poll
    /// interval).
    #[serde(with = "checked::check_interval", default = "defaults::check_interval")]
    #[schemars(with = "HumanDuration")]
    pub check_interval: Duration,

    /// Checks after a change whose windows are not judged (they hold the transition; default 1).
    #[serde(default = "defaults::one", deserialize_with = "checked::checks")]
    pub settle_periods: u32,

    /// Relative band around the target in which p99 counts as on target (default 0.05: ±5%).
    #[serde(
        default = "defaults::tolerance",
        deserialize_with = "checked::tolerance"
    )]
    pub tolerance: f64,

    /// Consecutive judged windows on target that end a phase as converged (default 3).
    #[serde(
        default = "defaults::three",
        deserialize_with = "checked::checks_from_one"
    )]
    pub stable_checks: u32,

    /// Back-offs (decreases) after which a phase ends as converged (default 3).
    #[serde(
        default = "defaults::three",
        deserialize_with = "checked::checks_from_one"
    )]
    pub max_decreases: u32,

    /// Safe rate = max QPS at the target × this (default 0.7).
    #[serde(
        default = "defaults::safety_factor",
        deserialize_with = "checked::share"
    )]
    pub safety_factor: f64,

    /// Recommended autoscaler thresholds = each server signal observed at the edge window (the highest concurrency within the target) ×
    /// this, in (0, 1] (default 0.8: scale out before the tier reaches its capacity).
    #[serde(default = "defaults::hpa_margin", deserialize_with = "checked::share")]
    pub hpa_margin: f64,

    /// Read the server signals from this Prometheus (PromQL over its HTTP API) instead of
    /// scraping each server's `/metrics` directly; the direct scrape goes on beside it and is
    /// used for any window Prometheus cannot answer.
    pub prometheus: Option<PrometheusSource>,
}

/// Regressions against the baseline run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegressionSettings {
    /// The smallest change worth a call (default 0.1: 10%): a metric has changed only when
    /// the 95% interval of its change excludes zero after the correction for the run's many
    /// metrics and the change is at least this large. `threshold` is its older name.
    #[serde(
        default = "defaults::regression_threshold",
        alias = "threshold",
        deserialize_with = "checked::min_effect"
    )]
    pub min_effect: f64,

    /// Findings fail the run (exit 1); default false: they are reported only.
    #[serde(default)]
    pub fail: bool,

    /// Rows (a scenario's, a model's, a server model's) with fewer requests than this in
    /// either run are not compared: their numbers are noise (default 100).
    #[serde(default = "defaults::min_requests")]
    pub min_requests: u64,

    /// How many of the last passing runs of the same matrix the run is compared with (default
    /// 5, from 1 to 50). With 3 or more, their own run-to-run spread decides; with fewer, the
    /// runs' within-run intervals widened by the run-to-run spread the project measured in A/A
    /// runs, and a change beyond the within-run intervals alone is provisional.
    #[serde(
        default = "defaults::regression_window",
        deserialize_with = "checked::regression_window"
    )]
    pub window: usize,

    /// How many of the last runs of the same matrix (passing, or failed by a regression alone)
    /// change points are looked for in, this run included (default 30, from 4 to 500).
    #[serde(
        default = "defaults::change_point_window",
        deserialize_with = "checked::change_point_window"
    )]
    pub change_point_window: usize,
}

impl Default for RegressionSettings {
    fn default() -> Self {
        RegressionSettings {
            min_effect: defaults::regression_threshold(),
            fail: false,
            min_requests: defaults::min_requests(),
            window: defaults::regression_window(),
            change_point_window: defaults::change_point_window(),
        }
    }
}

/// The report beyond the run directory.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportSettings {
    /// POST the run's summary (JSON: verdict, root cause, totals, SLO verdicts, regressions)
    /// to this http(s) URL at the end, so results reach a tracking page or a chat. Retried
    /// (3 attempts, 1 s then 2 s apart) within `webhook_timeout`; a failed delivery is logged
    /// and never changes the run's verdict.
    #[serde(default, deserialize_with = "checked::webhook")]
    pub webhook: Option<String>,

    /// The whole delivery's time limit, retries included (default `30s`).
    #[serde(
        with = "checked::webhook_timeout",
        default = "defaults::webhook_timeout"
    )]
    #[schemars(with = "HumanDuration")]
    pub webhook_timeout: Duration,
}

/// Capacity mode's spike: an open-loop jump from the converged load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpikeSettings {
    /// Requests per second the whole client group sends during the spike (split across its
    /// workers), open loop: arrivals do not wait for answers, as real traffic does not.
    #[serde(deserialize_with = "checked::spike_rate")]
    pub target_rps: f64,

    /// How long the spike lasts (at least `check_interval`, so at least one window measures it).
    #[serde(with = "checked::wait")]
    #[schemars(with = "HumanDuration")]
    pub duration: Duration,

    /// After the spike, how long the group may take to be back within the p99 target without
    /// errors before the phase ends as not recovered (default `60s`).
    #[serde(with = "checked::wait", default = "defaults::recovery_timeout")]
    #[schemars(with = "HumanDuration")]
    pub recovery_timeout: Duration,
}

/// A Prometheus that scrapes the servers under test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrometheusSource {
    /// Its base URL, e.g. `http://prometheus.monitoring:9090` (queries go to `/api/v1/query`).
    #[serde(deserialize_with = "checked::prometheus_url")]
    pub url: String,

    /// Label matchers choosing the servers' series, without braces, e.g.
    /// `job="triton",namespace="staging"` (default: every series).
    #[serde(default, deserialize_with = "checked::label_matchers")]
    pub selector: String,
}

/// When the driver stops a run early. A count of `0` disables that check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailFast {
    /// Fail when a worker's heartbeat is older than this many poll intervals (1 to 10000).
    #[serde(
        default = "defaults::three",
        deserialize_with = "checked::heartbeat_polls"
    )]
    #[schemars(range(min = 1, max = 10000))]
    pub heartbeat_timeout_polls: u32,

    /// Fail when a worker reports zero completed requests for this many consecutive polls, or
    /// a server holds a worker's calls with none of them ending for as long (that server is
    /// blamed); 0 turns the rule off. A poll while one of its clients is inside a perf_analyzer run (which
    /// counts its requests when it ends) neither counts nor clears. At most 10000.
    #[serde(default = "defaults::three", deserialize_with = "checked::polls")]
    #[schemars(range(max = 10000))]
    pub zero_qps_polls: u32,

    /// How long the status store may be unreachable before the run fails for it (from 10s to
    /// a day; default 60s). Meanwhile the load goes on, the workers queue their reports, and
    /// the heartbeat and zero-QPS rules pause; the end of the run waits this long for the
    /// store before it writes an incomplete report.
    #[serde(
        with = "checked::store_outage",
        default = "defaults::store_outage_limit",
        skip_serializing_if = "defaults::is_store_outage_limit"
    )]
    #[schemars(with = "HumanDuration")]
    pub store_outage_limit: Duration,
}

impl Default for FailFast {
    fn default() -> Self {
        FailFast {
            heartbeat_timeout_polls: 3,
            zero_qps_polls: 3,
            store_outage_limit: defaults::store_outage_limit(),
        }
    }
}

/// What a Triton server member runs.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerTemplate {
    /// The `tritonserver` to run: a local binary (local launcher) or a container image
    /// (kube launcher).
    pub tritonserver: Artifact,

    /// Triton version, informational: shown in the report (e.g. `"2.51"`).
    pub version: Option<String>,

    /// Model repositories, passed as `--model-repository`. Local: paths relative to the
    /// matrix file's directory (or absolute). Kube: paths inside the pod (in the image, a
    /// `model_image` copy's `path` or a volume's `mount_path`).
    #[serde(deserialize_with = "checked::filled")]
    #[schemars(length(min = 1))]
    pub model_repositories: Vec<String>,

    /// Extra `tritonserver` arguments, appended after the ones the launcher sets.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "checked::server_args"
    )]
    pub args: Vec<String>,

    /// Resource requests and limits (kube launcher only).
    pub resources: Option<Resources>,

    /// Extra environment variables of the server process.
    #[serde(
        default,
        skip_serializing_if = "IndexMap::is_empty",
        deserialize_with = "checked::env"
    )]
    #[schemars(extend("propertyNames" = { "pattern": ENV_NAME_PATTERN }))]
    pub env: IndexMap<String, String>,

    /// Triton tracing, passed as `--trace-config`. Omitted: tracing off.
    pub trace: Option<TraceSettings>,

    /// A model repository copied from an image into the server pod (kube launcher only), so
    /// any `tritonserver` image (e.g. NVIDIA's NGC images, which hold no models) serves it:
    /// list its `path` under `model_repositories`.
    pub model_image: Option<ModelImage>,

    /// Volumes mounted into the server pod (kube launcher only), e.g. a model repository that
    /// is not baked into the image: list its mount path under `model_repositories`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<ServerVolume>,
    /// Node labels the pod must run on (kube launcher only), e.g. a GPU node pool.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub node_selector: IndexMap<String, String>,

    /// Taints the pod tolerates (kube launcher only), e.g. `nvidia.com/gpu` on GPU nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// A sweep variant's model configs on Kubernetes, each mounted over the server's own
    /// config.pbtxt (set by the sweep, never written in a matrix: not in the schema).
    #[serde(skip)]
    #[schemars(skip)]
    pub mounted_configs: Vec<MountedConfig>,
}

/// A model's config.pbtxt text that the kube launcher mounts (from the run's owner ConfigMap)
/// over `<repository>/<model>/config.pbtxt` in the Triton container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedConfig {
    pub model: String,
    /// The model repository (a path in the pod) that holds the model.
    pub repository: String,
    pub text: String,
}

/// A group of identical Triton servers: either servers the driver launches (`template` and
/// `instances`) or servers that already run (`endpoints`), which the driver health-checks at
/// start and watches during the run but never starts, stops or removes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerGroup {
    /// Name of the server template its members run. Not with `endpoints`.
    #[schemars(with = "Option<Name>")]
    pub template: Option<String>,

    /// Number of servers, at least 1. With `endpoints`: omitted, or their count. A run has
    /// at most 10000 members (servers and clients) in all.
    #[schemars(range(min = 1, max = 10000))]
    #[serde(default, deserialize_with = "checked::servers")]
    pub instances: Option<u32>,

    /// Existing servers, one member each (`<group>-<index>` in list order), instead of
    /// launching any: reachable from the driver and the workers (on Kubernetes, from the pods).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
}

impl ServerGroup {
    /// Whether the group names existing servers rather than servers to launch.
    pub fn is_external(&self) -> bool {
        !self.endpoints.is_empty()
    }

    /// How many members the group has: its endpoints, or its instances.
    pub fn member_count(&self) -> u32 {
        if self.is_external() {
            u32::try_from(self.endpoints.len()).unwrap_or(u32::MAX)
        } else {
            self.instances.unwrap_or(0)
        }
    }
}

/// An existing server: `HOST:PORT` (the port of the protocol of the client groups that target
/// the group, which must then all use one), or its ports by protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Endpoint {
    /// `HOST:PORT` of the clients' protocol.
    Address(String),
    /// The server's addresses by protocol.
    Ports(EndpointPorts),
}

/// An existing server's addresses by protocol, each `HOST:PORT`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPorts {
    /// Triton's gRPC endpoint (its `--grpc-port`); needed by gRPC client groups.
    pub grpc: Option<String>,
    /// Triton's HTTP endpoint (its `--http-port`); needed by HTTP client groups.
    pub http: Option<String>,
    /// Triton's metrics endpoint (its `--metrics-port`). Omitted: the server's metrics are
    /// not scraped (the report says so).
    pub metrics: Option<String>,
}

impl Endpoint {
    /// The addresses as written: for `HOST:PORT`, that address under the clients' `protocol`
    /// (None when no client group targets the group: then it is unknown).
    pub fn ports(&self, protocol: Option<Protocol>) -> EndpointPorts {
        match self {
            Endpoint::Ports(p) => p.clone(),
            Endpoint::Address(a) => EndpointPorts {
                grpc: (protocol == Some(Protocol::Grpc)).then(|| a.clone()),
                http: (protocol == Some(Protocol::Http)).then(|| a.clone()),
                metrics: None,
            },
        }
    }
}

// By hand rather than `untagged`: a mapping's mistakes (an unknown key) are then reported as
// such instead of "did not match any variant".
impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct EndpointVisitor;
        impl<'de> serde::de::Visitor<'de> for EndpointVisitor {
            type Value = Endpoint;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`HOST:PORT` or a mapping of `grpc`, `http` and `metrics` addresses")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Endpoint, E> {
                Ok(Endpoint::Address(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Endpoint, A::Error> {
                EndpointPorts::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Endpoint::Ports)
            }
        }
        de.deserialize_any(EndpointVisitor)
    }
}

impl JsonSchema for Endpoint {
    fn schema_name() -> Cow<'static, str> {
        "Endpoint".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let address = |description: &str| {
            serde_json::json!({
                "description": description,
                "type": "string",
                "pattern": ADDRESS_PATTERN
            })
        };
        json_schema!({
            "description": "An existing server: `HOST:PORT` (the port of the protocol of the client groups that target the group, which must then all use one), or its ports by protocol.",
            "oneOf": [
                address("`HOST:PORT` of the clients' protocol."),
                {
                    "type": "object",
                    "properties": {
                        "grpc": address("Triton's gRPC endpoint (its `--grpc-port`); needed by gRPC client groups."),
                        "http": address("Triton's HTTP endpoint (its `--http-port`); needed by HTTP client groups."),
                        "metrics": address("Triton's metrics endpoint (its `--metrics-port`). Omitted: the server's metrics are not scraped (the report says so).")
                    },
                    "anyOf": [{ "required": ["grpc"] }, { "required": ["http"] }],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// Schema pattern of `HOST:PORT` (a host name, an IPv4 address or a bracketed IPv6 address);
/// validation checks the port's range.
const ADDRESS_PATTERN: &str =
    r"^([A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$";

/// What a stress client (worker) member runs.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientTemplate {
    /// The stress worker to run: a local binary (local launcher) or a container image
    /// (kube launcher).
    pub worker: Artifact,

    /// Protocol the worker uses to talk to the servers.
    pub protocol: Protocol,

    /// Scenario weights by scenario name (relative; each at least 1). Omitted: every
    /// scenario at its default weight. Names are matched case-insensitively.
    #[serde(default, deserialize_with = "checked::scenario_weight")]
    #[schemars(with = "Option<ScenarioWeightsSchema>")]
    pub scenarios: Option<IndexMap<String, u32>>,

    /// Number of concurrent stress streams per worker, 1 to 100000.
    #[serde(
        default = "defaults::concurrency",
        deserialize_with = "checked::streams"
    )]
    #[schemars(range(min = 1, max = stress_common::limits::MAX_CONCURRENCY))]
    pub concurrency: u32,

    /// Shape of the `Load` scenario's traffic, per stream (`concurrency`). Omitted: the
    /// worker's default. A concurrency of 1 to 100000, or a rate of 0.001 to 10000000
    /// requests per second.
    pub load: Option<LoadMode>,

    /// Models of the server's repository to drive with the `Infer` scenario, each built from
    /// its own metadata and config. Without `scenarios`, only `Infer` runs; with `scenarios`,
    /// they must list `Infer`. Before any load the driver checks that every target server has
    /// each model READY.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelSpec>,

    /// Extra worker arguments, appended after the ones the launcher sets: at most 256, each
    /// at most 4096 bytes, and none of the flags the driver sets itself (`--servers`,
    /// `--run-id`, `--member-id`, `--duration`, `--model`, `--store-url`, ...: use the matrix
    /// field that sets them).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "checked::worker_args"
    )]
    pub extra_args: Vec<String>,

    /// Resource requests and limits (kube launcher only).
    pub resources: Option<Resources>,

    /// Extra environment variables of the worker process.
    #[serde(
        default,
        skip_serializing_if = "IndexMap::is_empty",
        deserialize_with = "checked::env"
    )]
    #[schemars(extend("propertyNames" = { "pattern": ENV_NAME_PATTERN }))]
    pub env: IndexMap<String, String>,
    /// Node labels the pod must run on (kube launcher only), e.g. a GPU node pool.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub node_selector: IndexMap<String, String>,

    /// Taints the pod tolerates (kube launcher only), e.g. `nvidia.com/gpu` on GPU nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// A foreign client program to run instead of the worker's scenarios (docs/clients.md):
    /// the worker starts it, supervises it and reports what it reports. Its command is part of
    /// the matrix's fingerprint (a client implementation or version pinned by its path is
    /// another matrix). Not with `scenarios`.
    pub client: Option<ForeignClient>,

    /// The share of this group's unary inference requests sent with a W3C trace context
    /// (`traceparent`), from 0 to 1; omitted: none. Servers the run launches for the group
    /// export their spans of those requests to the driver (OpenTelemetry mode), and the report
    /// says where the slowest traced requests spent their time: client, transport, Triton's
    /// request handling, queue, compute. Triton traces every request that carries a context,
    /// so this is the servers' tracing load too: 0.01 is plenty for a tail (1% of 5,000
    /// requests/s over a minute: 3,000 traces, 30 above p99).
    #[serde(default, deserialize_with = "checked::trace_share")]
    #[schemars(with = "Option<f64>", range(min = 0.0, max = 1.0))]
    pub trace_share: Option<TraceShare>,

    /// `Infer`: how far a float output may be from the validation data of an `input_data`
    /// file (omitted: 0, exact), as perf_analyzer compares.
    #[serde(default, deserialize_with = "checked::answer_tolerance")]
    #[schemars(with = "Option<f64>", range(min = 0.0))]
    pub tolerance: Option<stress_common::contract::Tolerance>,

    /// `Infer`: a repeated input must give byte-identical outputs, the whole stream for a
    /// decoupled model and each step for a sequence model (for deterministic models; default
    /// false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub consistency: bool,
}

/// A client program that speaks the client interface (docs/clients.md).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForeignClient {
    /// The program and its arguments, as the worker process sees them (an absolute path, or a
    /// program on its PATH), e.g. `[python3, /opt/clients/tritonclient_stress.py]`.
    pub command: stress_common::contract::ClientCommand,

    /// Environment variables of the program (besides its assignment's).
    #[serde(
        default,
        skip_serializing_if = "IndexMap::is_empty",
        deserialize_with = "checked::env"
    )]
    #[schemars(extend("propertyNames" = { "pattern": ENV_NAME_PATTERN }))]
    pub env: IndexMap<String, String>,

    /// The client's own image (kube launcher): the member's pod runs it, with the worker
    /// copied in from the worker's image by an init container and started as the entrypoint
    /// (the image needs a glibc as new as the worker image's, Debian bookworm's). Without
    /// it the program runs inside the worker's image.
    pub image: Option<String>,

    /// The interface version the program speaks: 1.
    pub interface: u32,
}

/// One model a client drives with the `Infer` scenario (the worker's `--model`, `--shape`,
/// `--input-data` and `--batch-size`, as perf_analyzer means them).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model's name in the server's repository.
    #[serde(deserialize_with = "checked::model_name")]
    #[schemars(length(min = 1))]
    pub name: String,

    /// Share of this model in the client's `Infer` requests (relative; at least 1).
    #[serde(default = "defaults::one", deserialize_with = "checked::model_weight")]
    #[schemars(range(min = 1))]
    pub weight: u32,

    /// Model version. Omitted: the server's choice.
    pub version: Option<u64>,

    /// Dims for the dynamic (`-1`) dims of inputs, by input name, without the batch dim.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub shape: IndexMap<String, Vec<i64>>,

    /// `zero`, `random` (the worker's default), or a perf_analyzer JSON input-data file
    /// (relative to the matrix file's directory, or absolute).
    pub input_data: Option<String>,

    /// Batch size of this model's requests (at most its `max_batch_size`; default 1).
    #[schemars(range(min = 1))]
    #[serde(default, deserialize_with = "checked::batch_size")]
    pub batch_size: Option<u32>,
}

impl ModelSpec {
    /// `NAME` or `NAME@VERSION`, as diagnostics name a model.
    pub fn label(&self) -> String {
        match self.version {
            Some(v) => format!("{}@{v}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A group of identical stress clients, all talking to every server of one server group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientGroup {
    /// Name of the client template its members run.
    #[schemars(with = "Name")]
    pub template: String,

    /// Number of clients, at least 1. A run has at most 10000 members (servers and clients)
    /// in all.
    #[schemars(range(min = 1, max = 10000))]
    #[serde(deserialize_with = "checked::clients")]
    pub instances: u32,

    /// Name of the server group every client of this group talks to (to every server of it).
    #[schemars(with = "Name")]
    pub target: String,

    /// Size of the block of sequence correlation ids each client of this group gets. The
    /// driver hands out non-overlapping blocks `[base, base + size)` with bases starting at 1,
    /// in the order of the client groups in the file.
    #[serde(
        default = "defaults::corr_id_block_size",
        deserialize_with = "checked::corr_ids"
    )]
    #[schemars(range(min = 1))]
    pub corr_id_block_size: u64,

    /// Service-level objectives over this group's requests only (see `run.slo`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<SloRule>,
}

/// A program to run: exactly one of `binary` (local launcher) or `image` (kube launcher).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ArtifactRepr", into = "ArtifactRepr")]
pub enum Artifact {
    /// `auto`, or a path to an executable (relative to the matrix file's directory, or
    /// absolute). `auto`: for `tritonserver`, the one on `PATH` or in
    /// `/opt/tritonserver/bin`; for the worker, the one built alongside the driver.
    Binary(String),
    /// A container image reference, e.g. `nvcr.io/nvidia/tritonserver:24.10-py3`.
    Image(String),
}

impl Artifact {
    /// The binary path (or `auto`), if this is a binary.
    pub fn binary(&self) -> Option<&str> {
        match self {
            Artifact::Binary(b) => Some(b),
            Artifact::Image(_) => None,
        }
    }

    /// The image reference, if this is an image.
    pub fn image(&self) -> Option<&str> {
        match self {
            Artifact::Image(i) => Some(i),
            Artifact::Binary(_) => None,
        }
    }

    /// Whether this is `binary: auto`.
    pub fn is_auto_binary(&self) -> bool {
        self.binary() == Some(ARTIFACT_AUTO)
    }
}

/// The `binary` value that asks the launcher to find the program itself.
pub const ARTIFACT_AUTO: &str = "auto";

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArtifactRepr {
    #[serde(default, deserialize_with = "checked::filled")]
    binary: Option<String>,
    #[serde(default, deserialize_with = "checked::filled")]
    image: Option<String>,
}

impl TryFrom<ArtifactRepr> for Artifact {
    type Error = String;

    fn try_from(r: ArtifactRepr) -> Result<Self, String> {
        match (r.binary, r.image) {
            (Some(b), None) => Ok(Artifact::Binary(b)),
            (None, Some(i)) => Ok(Artifact::Image(i)),
            (Some(_), Some(_)) => {
                Err("exactly one of `binary` or `image` must be set, found both".into())
            }
            (None, None) => {
                Err("exactly one of `binary` or `image` must be set, found neither".into())
            }
        }
    }
}

impl From<Artifact> for ArtifactRepr {
    fn from(a: Artifact) -> Self {
        match a {
            Artifact::Binary(b) => ArtifactRepr {
                binary: Some(b),
                image: None,
            },
            Artifact::Image(i) => ArtifactRepr {
                binary: None,
                image: Some(i),
            },
        }
    }
}

impl JsonSchema for Artifact {
    fn schema_name() -> Cow<'static, str> {
        "Artifact".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A program to run: exactly one of `binary` (local launcher) or `image` (kube launcher).",
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "binary": {
                            "description": "`auto`, or a path to an executable (relative to the matrix file's directory, or absolute). `auto`: for `tritonserver`, the one on `PATH` or in `/opt/tritonserver/bin`; for the worker, the one built alongside the driver.",
                            "type": "string",
                            "minLength": 1
                        }
                    },
                    "required": ["binary"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "image": {
                            "description": "A container image reference, e.g. `nvcr.io/nvidia/tritonserver:24.10-py3`.",
                            "type": "string",
                            "minLength": 1
                        }
                    },
                    "required": ["image"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

use stress_common::contract::ScenarioMix;
pub use stress_common::contract::{LoadMode, Protocol};

/// A model repository that travels in its own image (kube launcher only): before Triton starts,
/// an init container from `image` copies its `source` directory (`cp -R`, so the image needs
/// `cp`) into an emptyDir that the Triton container sees, read-only, at `path`.
/// `scripts/k8s/images.sh docker/models` builds the project's QA models as such an image
/// (`triton-stress/models:dev`, models at `/models`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelImage {
    /// The image holding the model repository, e.g. `triton-stress/models:dev`.
    #[serde(deserialize_with = "checked::filled")]
    #[schemars(length(min = 1))]
    pub image: String,
    /// Absolute path of the copy inside the Triton container; list it under
    /// `model_repositories` to serve it.
    #[serde(deserialize_with = "checked::model_path")]
    pub path: String,
    /// Absolute path of the model repository inside `image`.
    #[serde(
        default = "defaults::model_image_source",
        deserialize_with = "checked::model_source"
    )]
    pub source: String,
}

/// Where the project's models image (docker/models) keeps its model repository.
pub const MODEL_IMAGE_SOURCE: &str = "/models";

/// A volume of a server pod: exactly one source (`host_path`, `persistent_volume_claim` or
/// `config_map`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerVolume {
    /// Volume name, a DNS-1123 label, unique within the template.
    #[serde(deserialize_with = "checked::volume_name")]
    #[schemars(with = "Name")]
    pub name: String,
    /// Absolute path inside the Triton container.
    pub mount_path: String,
    /// Mounted read-only (default true).
    #[serde(default = "defaults::yes")]
    pub read_only: bool,
    /// A directory on the node: not its root, and not a system directory (`/etc`, `/proc`,
    /// `/var/lib/kubelet`, ...) unless read-only.
    pub host_path: Option<String>,
    /// The name of a PersistentVolumeClaim in the run's namespace.
    pub persistent_volume_claim: Option<String>,
    /// The name of a ConfigMap in the run's namespace (small models, configs).
    pub config_map: Option<String>,
}

/// A Kubernetes toleration (fields as in a pod spec).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key; omitted with `operator: Exists` matches every taint.
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[schemars(pattern(r"^(Equal|Exists)$"))]
    pub operator: Option<String>,
    /// Taint value (with `Equal`).
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; omitted: all.
    #[schemars(pattern(r"^(NoSchedule|PreferNoSchedule|NoExecute)$"))]
    pub effect: Option<String>,
    /// With `NoExecute`: how long the pod stays bound after the taint appears.
    pub toleration_seconds: Option<i64>,
}

/// Kubernetes resource requests (= limits) of a member (kube launcher only).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPU quantity, e.g. `"1"`, `"500m"`, `"2.5"`.
    #[serde(default, deserialize_with = "checked::cpu")]
    #[schemars(pattern(checked::CPU_QUANTITY))]
    pub cpu: Option<String>,

    /// Memory quantity, e.g. `2Gi`, `512Mi`, `1G`.
    #[serde(default, deserialize_with = "checked::memory")]
    #[schemars(pattern(checked::MEMORY_QUANTITY))]
    pub memory: Option<String>,

    /// Number of NVIDIA GPUs (`nvidia.com/gpu`).
    #[serde(default)]
    pub gpus: u32,
}

/// Triton tracing settings, passed to `tritonserver` as `--trace-config level=...`,
/// `--trace-config rate=...` and so on.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceSettings {
    /// What to trace.
    pub level: TraceLevel,

    /// Trace one request in every `rate`, at least 1; in mode opentelemetry 0 traces only
    /// the requests that carry a W3C trace context (a client template's `trace_share`).
    #[serde(
        default = "defaults::trace_rate",
        deserialize_with = "checked::trace_rate"
    )]
    pub rate: u32,

    /// Stop after this many traces. Omitted: no limit.
    #[schemars(range(min = 1))]
    #[serde(default, deserialize_with = "checked::traces")]
    pub count: Option<u32>,

    /// Write the trace file every this many traces (`FILE.0`, `FILE.1`, …). Omitted:
    /// 100. Triton's own default (0) keeps every trace in memory until the server exits: a
    /// soak's server grows by its traces, and one killed at the end (a stop past its grace)
    /// loses them all. Triton mode only.
    #[schemars(range(min = 1))]
    #[serde(default, deserialize_with = "checked::traces")]
    pub log_frequency: Option<u32>,

    /// Where traces go: `triton` (JSON files in the run directory, summarised in the report)
    /// or `opentelemetry` (exported over OTLP/HTTP to `url`).
    #[serde(default)]
    pub mode: TraceMode,

    /// OpenTelemetry mode: the collector's OTLP/HTTP endpoint, e.g.
    /// `http://otel-collector:4318/v1/traces`. Omitted: the run's own receiver, which joins
    /// the spans with the clients' (`trace_share`) in the report and sends them on to
    /// `run.otlp_forward`.
    #[serde(default, deserialize_with = "checked::otlp_endpoint")]
    pub url: Option<String>,

    /// OpenTelemetry mode: how many spans Triton's batch span processor holds before it
    /// drops (`bsp_max_queue_size`; Triton's default 2,048). Omitted for a server the run
    /// traces (`trace_share`): sized to the traced rate.
    #[schemars(range(min = 1))]
    pub queue_size: Option<u32>,

    /// OpenTelemetry mode: how often Triton exports its queued spans (`bsp_schedule_delay`;
    /// Triton's default 5s).
    #[serde(default, with = "checked::export_delay")]
    #[schemars(with = "Option<HumanDuration>")]
    pub export_delay: Option<Duration>,

    /// OpenTelemetry mode: resource attributes of the exported spans, e.g.
    /// `{service.name: triton-nightly}`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub resource: IndexMap<String, String>,
}

/// Triton's trace mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TraceMode {
    /// Triton's own JSON trace files.
    #[default]
    Triton,
    /// OpenTelemetry spans over OTLP/HTTP.
    Opentelemetry,
}

/// Traces per trace file when `log_frequency` is omitted (see [`TraceSettings::log_frequency`]).
pub const DEFAULT_TRACE_LOG_FREQUENCY: u32 = 100;

impl TraceSettings {
    /// The `tritonserver` arguments for these settings; the launcher adds the trace file
    /// (`--trace-config triton,file=...`) itself.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--trace-config".to_string(),
            format!("level={}", self.level.as_str()),
            "--trace-config".to_string(),
            format!("rate={}", self.rate),
        ];
        if let Some(count) = self.count {
            args.extend(["--trace-config".to_string(), format!("count={count}")]);
        }
        if self.mode == TraceMode::Triton {
            let freq = self.log_frequency.unwrap_or(DEFAULT_TRACE_LOG_FREQUENCY);
            args.extend([
                "--trace-config".to_string(),
                format!("triton,log-frequency={freq}"),
            ]);
        }
        if self.mode == TraceMode::Opentelemetry {
            args.extend([
                "--trace-config".to_string(),
                "mode=opentelemetry".to_string(),
            ]);
            if let Some(url) = &self.url {
                args.extend([
                    "--trace-config".to_string(),
                    format!("opentelemetry,url={url}"),
                ]);
            }
            if let Some(n) = self.queue_size {
                args.extend([
                    "--trace-config".to_string(),
                    format!("opentelemetry,bsp_max_queue_size={n}"),
                ]);
            }
            if let Some(d) = self.export_delay {
                args.extend([
                    "--trace-config".to_string(),
                    format!("opentelemetry,bsp_schedule_delay={}", d.as_millis()),
                ]);
            }
            for (k, v) in &self.resource {
                args.extend([
                    "--trace-config".to_string(),
                    format!("opentelemetry,resource={k}={v}"),
                ]);
            }
        }
        args
    }

    /// Whether the server writes trace files (triton mode) that the launcher places.
    pub fn writes_files(&self) -> bool {
        self.mode == TraceMode::Triton
    }
}

/// Triton trace level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TraceLevel {
    /// Tracing disabled.
    #[serde(rename = "OFF")]
    Off,
    /// Timestamps of each request's stages.
    #[serde(rename = "TIMESTAMPS")]
    Timestamps,
    /// Timestamps and the input and output tensors.
    #[serde(rename = "TENSORS")]
    Tensors,
}

impl TraceLevel {
    /// The level as Triton spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceLevel::Off => "OFF",
            TraceLevel::Timestamps => "TIMESTAMPS",
            TraceLevel::Tensors => "TENSORS",
        }
    }
}

impl Matrix {
    /// Resolves a local path from the matrix (a model repository, a binary) against the
    /// directory of the matrix file; absolute paths, and every path of a matrix that was not
    /// loaded from a file, are returned as they are.
    pub fn resolve_local_path(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        match self.source_path.as_deref().and_then(Path::parent) {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        }
    }

    /// A comparison's server group: the one named, else the matrix's only one.
    pub fn compare_group(&self) -> Option<&str> {
        let c = self.compare.as_ref()?;
        c.server_group
            .as_deref()
            .or_else(|| self.server_groups.keys().next().map(String::as_str))
    }

    /// One side of the comparison: this matrix with the compared group's template replaced by
    /// `template`, and no comparison.
    pub fn compare_side(&self, template: &str) -> Matrix {
        let mut side = self.clone();
        side.compare = None;
        if let Some(g) = self
            .compare_group()
            .and_then(|g| side.server_groups.get_mut(g))
        {
            g.template = Some(template.to_string());
        }
        side
    }

    /// The name launchers give a member's pod or process: `<run name>-<member name>`.
    /// Validation guarantees it is a DNS-1123 label for every member.
    pub fn qualified_name(&self, member: &str) -> String {
        format!("{}-{}", self.run.name, member)
    }
}

impl ClientTemplate {
    /// The scenarios this template runs with their weights: those listed under `scenarios`,
    /// in file order, or the default mix (`ScenarioMix::defaults`) when `scenarios` is omitted.
    /// Names that [`Scenario::parse`] does not know are skipped (validation rejects them).
    pub fn scenario_weights(&self) -> Vec<(Scenario, u32)> {
        match &self.scenarios {
            None => ScenarioMix::defaults().0,
            Some(map) => map
                .iter()
                .filter_map(|(name, w)| Scenario::parse(name).map(|s| (s, *w)))
                .collect(),
        }
    }

    /// Whether its workers run the `Infer` scenario (a client program runs none of theirs).
    pub fn runs_infer(&self) -> bool {
        match &self.scenarios {
            _ if self.client.is_some() => false,
            None => !self.models.is_empty() || Scenario::Infer.in_default_mix(),
            Some(_) => self
                .scenario_weights()
                .iter()
                .any(|(s, _)| *s == Scenario::Infer),
        }
    }
}

/// Schema pattern of a DNS-1123 label (what [`super::validate::is_dns_label`] accepts).
const NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

/// Schema pattern of an environment variable name.
const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// A DNS-1123 label, for the schema.
#[allow(dead_code)]
pub(crate) struct Name;

impl JsonSchema for Name {
    fn schema_name() -> Cow<'static, str> {
        "Name".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A DNS-1123 label: lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit.",
            "type": "string",
            "pattern": NAME_PATTERN
        })
    }
}

/// An environment variable name, for the schema.
#[allow(dead_code)]
pub(crate) struct EnvName;

impl JsonSchema for EnvName {
    fn schema_name() -> Cow<'static, str> {
        "EnvName".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An environment variable name: letters, digits and '_', not starting with a digit.",
            "type": "string",
            "pattern": ENV_NAME_PATTERN
        })
    }
}

/// The `scenarios` mapping, for the schema: one property per known scenario, with its
/// description and default weight.
#[allow(dead_code)]
pub(crate) struct ScenarioWeightsSchema;

impl JsonSchema for ScenarioWeightsSchema {
    fn schema_name() -> Cow<'static, str> {
        "ScenarioWeights".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let weight = |description: String, default: Option<u32>| {
            let mut v = serde_json::json!({
                "description": description,
                "type": "integer",
                "minimum": 1,
                "maximum": u32::MAX,
            });
            if let Some(d) = default {
                v["default"] = d.into();
            }
            v
        };
        let properties: serde_json::Map<String, serde_json::Value> = Scenario::ALL
            .into_iter()
            .map(|s| {
                (
                    s.name().to_string(),
                    weight(s.description().to_string(), Some(s.default_weight())),
                )
            })
            .collect();
        json_schema!({
            "description": "Scenario weights by scenario name (relative, each at least 1). Names are matched case-insensitively; listing a scenario twice in different case is an error.",
            "type": "object",
            "properties": properties,
            "additionalProperties": weight("A scenario name in another case.".to_string(), None),
            "minProperties": 1
        })
    }
}

mod defaults {
    use std::time::Duration;

    pub fn poll_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub fn server_ready_timeout() -> Duration {
        Duration::from_secs(120)
    }
    pub fn yes() -> bool {
        true
    }
    pub fn is_true(b: &bool) -> bool {
        *b
    }
    pub fn three() -> u32 {
        3
    }
    pub fn concurrency() -> u32 {
        stress_common::limits::DEFAULT_CONCURRENCY
    }
    pub fn one() -> u32 {
        1
    }
    pub fn model_image_source() -> String {
        super::MODEL_IMAGE_SOURCE.to_string()
    }
    pub fn trace_rate() -> u32 {
        1000
    }
    pub fn corr_id_block_size() -> u64 {
        super::DEFAULT_CORR_ID_BLOCK_SIZE
    }
    pub fn capacity_phases() -> Vec<super::CapacityPhase> {
        vec![super::CapacityPhase::Production]
    }
    pub fn max_concurrency() -> u32 {
        64
    }
    pub fn decrease_rate() -> f64 {
        0.8
    }
    pub fn check_interval() -> Duration {
        Duration::from_secs(5)
    }
    pub fn store_outage_limit() -> Duration {
        Duration::from_secs(60)
    }
    pub fn is_store_outage_limit(d: &Duration) -> bool {
        *d == store_outage_limit()
    }
    pub fn webhook_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub fn recovery_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn regression_threshold() -> f64 {
        0.1
    }
    pub fn min_requests() -> u64 {
        100
    }
    pub fn regression_window() -> usize {
        5
    }
    pub fn change_point_window() -> usize {
        30
    }
    pub fn repeat() -> u32 {
        1
    }
    pub fn is_one(n: &u32) -> bool {
        *n == 1
    }
    pub fn tolerance() -> f64 {
        0.05
    }
    pub fn safety_factor() -> f64 {
        0.7
    }
    pub fn hpa_margin() -> f64 {
        0.8
    }
}

// The Kubernetes launcher's own volumes in a server pod: reserved names that a template's
// `volumes` may not take (validation) and that the launcher mounts (launcher::kube::spec).
/// The volumes the launcher gives every server pod itself, by name and mount path in the Triton
/// container (`dshm` and `tmp` always, `traces` with `trace`): a template's volumes cannot take
/// them.
pub const LAUNCHER_VOLUMES: [(&str, &str); 3] = [SHM_VOLUME, TRACES_VOLUME, TMP_VOLUME];
/// Every container's root filesystem is read-only; what it writes goes here.
pub const TMP_VOLUME: (&str, &str) = ("tmp", "/tmp");
pub const SHM_VOLUME: (&str, &str) = ("dshm", "/dev/shm");
pub const TRACES_VOLUME: (&str, &str) = ("traces", "/traces");
/// The emptyDir a `model_image` is copied into, and the init container that copies it.
pub const MODEL_IMAGE_VOLUME: &str = "model-image";
/// The owner ConfigMap's model configs, mounted file by file (a sweep variant's configs).
pub const MODEL_CONFIGS_VOLUME: &str = "model-configs";

/// An `http://` or `https://` URL, parsed once where the matrix is read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct HttpUrl(reqwest::Url);

/// What an [`HttpUrl`] must be: a URL, http or https.
struct HttpUrlRule;

impl checked::Rule for HttpUrlRule {
    type Written = String;
    type Value = HttpUrl;
    fn read(&self, text: String) -> Result<HttpUrl, (String, HttpUrl)> {
        let refused = |problem| {
            let stand_in = reqwest::Url::parse("http://invalid/").expect("a URL");
            (problem, HttpUrl(stand_in))
        };
        let url =
            reqwest::Url::parse(&text).map_err(|e| refused(format!("{text:?} is no URL: {e}")))?;
        match url.scheme() {
            "http" | "https" => Ok(HttpUrl(url)),
            other => Err(refused(format!("{text:?}: an http(s) URL, not {other}:"))),
        }
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <HttpUrl as checked::Field<HttpUrl>>::read(d, &HttpUrlRule)
    }
}

impl From<HttpUrl> for String {
    fn from(u: HttpUrl) -> String {
        u.0.into()
    }
}

impl HttpUrl {
    pub fn url(&self) -> &reqwest::Url {
        &self.0
    }
}
