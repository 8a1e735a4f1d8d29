//! Autoscaler thresholds (capacity mode): what the servers said while the controller searched.
//!
//! Every capacity check the driver scrapes each server's Triton `/metrics` ([`Collector::scrape`])
//! and, when `capacity.prometheus` is set, asks Prometheus for the same window with PromQL. The
//! window between two checks then has, per client group (over the servers it targets), the
//! **signals** ([`Signal`]): queue, compute and request time per request (counter deltas over the
//! delta of successful requests), pending requests per server, and Triton's CPU / GPU
//! utilization (gauges, where the build reports them: a CPU build has no `nv_gpu_utilization`).
//!
//! [`recommend`] is the decision, pure: a threshold is the signal at the phase's edge window
//! (its highest concurrency within the target: [`crate::capacity::controller::edge`]) ×
//! `hpa_margin`, and only for a phase that ended saturated (converged or oscillating): a tier
//! that never reached its limit has no limit to scale before. The **primary** signal is the
//! first to fire: replaying the controller's windows from the lowest concurrency up, the one that
//! reaches its threshold at the lowest concurrency (ties: the one that grew most from the lowest
//! load). A signal already at its threshold at the lowest load (compute time per request, which
//! does not grow with load) cannot tell load apart and is never primary. [`keda_scaled_object`]
//! renders the thresholds as a KEDA ScaledObject with `prometheus` triggers.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use stress_common::triton_metrics::{self, ModelMetrics};

use crate::capacity::controller::{Controller, Ending, MIN_SAMPLES};
use crate::matrix::{CapacitySettings, PrometheusSource};
use crate::plan::RunPlan;
use crate::plan::ServerEndpoint;

/// How long one check waits for all the servers' `/metrics` and Prometheus' answers.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The range of the PromQL queries in the KEDA snippet (KEDA polls every 30 s by default).
const KEDA_RANGE: &str = "1m";

/// A server signal an autoscaler can watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Time a request waited in Triton's queue, per successful request (µs).
    QueueUsPerRequest,
    /// Input + infer + output time, per successful request (µs).
    ComputeUsPerRequest,
    /// Time from a request's arrival to its response, per successful request (µs).
    RequestUsPerRequest,
    /// `nv_inference_pending_request_count` summed over models, per server (mean over the window).
    PendingRequests,
    /// `nv_gpu_utilization` (0..1), mean over GPUs and servers.
    GpuUtilization,
    /// `nv_cpu_utilization` (0..1), mean over servers.
    CpuUtilization,
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::QueueUsPerRequest,
        Signal::ComputeUsPerRequest,
        Signal::RequestUsPerRequest,
        Signal::PendingRequests,
        Signal::GpuUtilization,
        Signal::CpuUtilization,
    ];

    /// As report.json spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::QueueUsPerRequest => "queue_us_per_request",
            Signal::ComputeUsPerRequest => "compute_us_per_request",
            Signal::RequestUsPerRequest => "request_us_per_request",
            Signal::PendingRequests => "pending_requests",
            Signal::GpuUtilization => "gpu_utilization",
            Signal::CpuUtilization => "cpu_utilization",
        }
    }

    /// The PromQL of this signal over `range` (e.g. `5s`, `1m`) on the series `selector`
    /// matches (label matchers without braces; empty: every series).
    pub fn promql(self, selector: &str, range: &str) -> String {
        let sel = |name: &str| {
            if selector.is_empty() {
                name.to_string()
            } else {
                format!("{name}{{{selector}}}")
            }
        };
        let per_request = |numerator: String| {
            format!(
                "sum(increase({numerator}[{range}])) / sum(increase({}[{range}]))",
                sel("nv_inference_request_success")
            )
        };
        match self {
            Signal::QueueUsPerRequest => per_request(sel("nv_inference_queue_duration_us")),
            Signal::RequestUsPerRequest => per_request(sel("nv_inference_request_duration_us")),
            Signal::ComputeUsPerRequest => {
                // Three sums: increase() drops the metric name, so one regex over the three
                // names would give series with the same labels, which PromQL refuses.
                let sum = |name: &str| format!("sum(increase({}[{range}]))", sel(name));
                format!(
                    "({} + {} + {}) / {}",
                    sum("nv_inference_compute_input_duration_us"),
                    sum("nv_inference_compute_infer_duration_us"),
                    sum("nv_inference_compute_output_duration_us"),
                    sum("nv_inference_request_success")
                )
            }
            Signal::PendingRequests => format!(
                "avg(sum by (instance) (avg_over_time({}[{range}])))",
                sel("nv_inference_pending_request_count")
            ),
            Signal::GpuUtilization => {
                format!("avg(avg_over_time({}[{range}]))", sel("nv_gpu_utilization"))
            }
            Signal::CpuUtilization => {
                format!("avg(avg_over_time({}[{range}]))", sel("nv_cpu_utilization"))
            }
        }
    }

    /// The query a KEDA trigger runs and how the HPA compares it: pending requests are a sum
    /// over the tier that the HPA divides by the replicas (`AverageValue`, threshold per
    /// replica); the others are already tier-wide averages (`Value`).
    fn keda_trigger(self, selector: &str) -> (&'static str, String) {
        match self {
            Signal::PendingRequests => {
                let sel = if selector.is_empty() {
                    String::new()
                } else {
                    format!("{{{selector}}}")
                };
                (
                    "AverageValue",
                    format!(
                        "sum(avg_over_time(nv_inference_pending_request_count{sel}[{KEDA_RANGE}]))"
                    ),
                )
            }
            _ => ("Value", self.promql(selector, KEDA_RANGE)),
        }
    }
}

/// Signal values of one window (absent: not reported, or no request succeeded in it).
pub type SignalValues = BTreeMap<Signal, f64>;

/// What one server's `/metrics` said at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub models: Vec<ModelMetrics>,
    /// Mean over the server's GPUs (None: no GPU metrics, e.g. a CPU build).
    pub gpu_utilization: Option<f64>,
    pub cpu_utilization: Option<f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Self {
        let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        Scrape {
            models: triton_metrics::parse(text),
            gpu_utilization: mean(triton_metrics::samples(text, "nv_gpu_utilization")),
            cpu_utilization: mean(triton_metrics::samples(text, "nv_cpu_utilization")),
        }
    }
}

/// One (server, model)'s counter deltas over a window, plus its mean pending count.
#[derive(Debug, Clone, Copy, Default)]
struct Deltas {
    success: f64,
    queue_us: f64,
    compute_us: f64,
    request_us: f64,
    pending: f64,
}

impl Deltas {
    /// None when a counter went back (the server restarted within the window).
    fn between(a: &ModelMetrics, b: &ModelMetrics) -> Option<Self> {
        let compute = |m: &ModelMetrics| {
            m.compute_input_duration_us + m.compute_infer_duration_us + m.compute_output_duration_us
        };
        let d = Deltas {
            success: b.success - a.success,
            queue_us: b.queue_duration_us - a.queue_duration_us,
            compute_us: compute(b) - compute(a),
            request_us: b.request_duration_us - a.request_duration_us,
            pending: (a.pending + b.pending) / 2.0,
        };
        (d.success >= 0.0 && d.queue_us >= 0.0 && d.compute_us >= 0.0 && d.request_us >= 0.0)
            .then_some(d)
    }

    fn add(&mut self, o: Deltas) {
        self.success += o.success;
        self.queue_us += o.queue_us;
        self.compute_us += o.compute_us;
        self.request_us += o.request_us;
        self.pending += o.pending;
    }
}

/// The model-level deltas of each server scraped at both ends of a window.
fn model_deltas<'a>(
    start: &'a BTreeMap<String, Scrape>,
    end: &'a BTreeMap<String, Scrape>,
) -> impl Iterator<Item = (&'a str, &'a str, Deltas)> {
    end.iter().flat_map(move |(server, e)| {
        let s = start.get(server);
        e.models.iter().filter_map(move |m| {
            let before = s?
                .models
                .iter()
                .find(|b| b.model == m.model && b.version == m.version)?;
            Some((
                server.as_str(),
                m.model.as_str(),
                Deltas::between(before, m)?,
            ))
        })
    })
}

fn per_request(total_us: f64, success: f64) -> Option<f64> {
    (success > 0.0).then(|| total_us / success)
}

/// The signals of a window from the scrapes of the same servers at its start and its end
/// (servers missing from either are left out).
pub fn window_signals(
    start: &BTreeMap<String, Scrape>,
    end: &BTreeMap<String, Scrape>,
) -> SignalValues {
    let mut total = Deltas::default();
    for (_, _, d) in model_deltas(start, end) {
        total.add(d);
    }
    let both: Vec<(&Scrape, &Scrape)> = end
        .iter()
        .filter_map(|(server, e)| Some((start.get(server)?, e)))
        .collect();
    let mut values = SignalValues::new();
    let mut put = |signal, value: Option<f64>| {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            values.insert(signal, v);
        }
    };
    put(
        Signal::QueueUsPerRequest,
        per_request(total.queue_us, total.success),
    );
    put(
        Signal::ComputeUsPerRequest,
        per_request(total.compute_us, total.success),
    );
    put(
        Signal::RequestUsPerRequest,
        per_request(total.request_us, total.success),
    );
    put(
        Signal::PendingRequests,
        (!both.is_empty()).then(|| total.pending / both.len() as f64),
    );
    let gauge = |f: fn(&Scrape) -> Option<f64>| {
        let v: Vec<f64> = both
            .iter()
            .filter_map(|(a, b)| Some((f(a)? + f(b)?) / 2.0))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    put(Signal::GpuUtilization, gauge(|s| s.gpu_utilization));
    put(Signal::CpuUtilization, gauge(|s| s.cpu_utilization));
    values
}

/// One server and model at the edge window (from the direct scrape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerModelSignals {
    pub server: String,
    pub model: String,
    pub requests: f64,
    pub queue_us_per_request: Option<f64>,
    pub compute_us_per_request: Option<f64>,
    pub request_us_per_request: Option<f64>,
    pub pending_requests: f64,
}

/// Per server and model, the signals of a window.
pub fn server_model_signals(
    start: &BTreeMap<String, Scrape>,
    end: &BTreeMap<String, Scrape>,
) -> Vec<ServerModelSignals> {
    model_deltas(start, end)
        .filter(|(_, _, d)| d.success > 0.0)
        .map(|(server, model, d)| ServerModelSignals {
            server: server.into(),
            model: model.into(),
            requests: d.success,
            queue_us_per_request: per_request(d.queue_us, d.success),
            compute_us_per_request: per_request(d.compute_us, d.success),
            request_us_per_request: per_request(d.request_us, d.success),
            pending_requests: d.pending,
        })
        .collect()
}

/// One of the controller's windows with the signals measured over it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub concurrency: u32,
    pub start_ms: i64,
    pub end_ms: i64,
    /// Answered requests the workers measured (windows with fewer than [`MIN_SAMPLES`] are
    /// not replayed).
    pub requests: u64,
    pub values: SignalValues,
}

/// A signal at the edge window and what it recommends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalThreshold {
    pub signal: Signal,
    /// At the edge window, from the chosen source.
    pub observed: f64,
    /// At the lowest concurrency replayed.
    pub baseline: Option<f64>,
    /// observed × hpa_margin; None when no threshold is recommended (the phase did not
    /// saturate, or the signal was zero at the edge window).
    pub threshold: Option<f64>,
    /// The lowest concurrency whose window reached the threshold.
    pub fires_at_concurrency: Option<u32>,
    /// Below its threshold at the lowest load: it grows with load, so it can trigger scaling.
    pub load_sensitive: bool,
    pub primary: bool,
}

/// [`recommend`]'s answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recommendation {
    pub signals: Vec<SignalThreshold>,
    pub primary: Option<Signal>,
    /// Why no threshold is recommended (None: they are).
    pub why_not: Option<String>,
}

/// Thresholds from the phase's windows. `edge` is the edge window's (start, end); `points`
/// are the controller's windows with signals (in any order).
pub fn recommend(
    points: &[Point],
    edge: Option<(i64, i64)>,
    ending: Option<Ending>,
    margin: f64,
) -> Recommendation {
    let Some((start, end)) = edge else {
        return Recommendation {
            why_not: Some("no window met the p99 target: there is no operating point".into()),
            ..Default::default()
        };
    };
    let Some(at_edge) = points
        .iter()
        .find(|p| p.start_ms == start && p.end_ms == end)
    else {
        return Recommendation {
            why_not: Some(
                "the edge window has no server signals (no /metrics scrape at its start and end)"
                    .into(),
            ),
            ..Default::default()
        };
    };
    let saturated = matches!(ending, Some(Ending::Converged | Ending::Oscillating));
    // The replay: from the lowest concurrency up, in time order at equal concurrency.
    let mut ramp: Vec<&Point> = points
        .iter()
        .filter(|p| p.requests >= MIN_SAMPLES)
        .collect();
    ramp.sort_by_key(|p| (p.concurrency, p.start_ms));
    let mut signals = Vec::new();
    for (&signal, &observed) in &at_edge.values {
        let baseline = ramp.iter().find_map(|p| p.values.get(&signal).copied());
        let threshold = (saturated && observed > 0.0).then_some(observed * margin);
        let load_sensitive = match (threshold, baseline) {
            (Some(t), Some(b)) => b < t,
            _ => false,
        };
        let fires_at_concurrency = threshold.filter(|_| load_sensitive).and_then(|t| {
            ramp.iter()
                .find(|p| p.values.get(&signal).is_some_and(|v| *v >= t))
                .map(|p| p.concurrency)
        });
        signals.push(SignalThreshold {
            signal,
            observed,
            baseline,
            threshold,
            fires_at_concurrency,
            load_sensitive,
            primary: false,
        });
    }
    // First to fire; at the same concurrency the one that grew most from the lowest load.
    let growth = |s: &SignalThreshold| match s.baseline {
        Some(b) if b > 0.0 => s.observed / b,
        _ => f64::INFINITY,
    };
    let primary = signals
        .iter()
        .filter(|s| s.load_sensitive)
        .filter_map(|s| Some((s.fires_at_concurrency?, s)))
        .min_by(|(ca, a), (cb, b)| {
            ca.cmp(cb)
                .then(growth(b).total_cmp(&growth(a)))
                .then(a.signal.cmp(&b.signal))
        })
        .map(|(_, s)| s.signal);
    for s in &mut signals {
        s.primary = Some(s.signal) == primary;
    }
    let why_not = if !saturated {
        let ended = ending.map_or("still running", Ending::as_str);
        Some(format!(
            "the phase ended {ended}, not saturated (converged or oscillating): the signals at its \
             edge window are no limit to scale before"
        ))
    } else if primary.is_none() {
        Some(
            "no signal grew with load (each was at its threshold already at the lowest load)"
                .into(),
        )
    } else {
        None
    };
    Recommendation {
        signals,
        primary,
        why_not,
    }
}

/// The thresholds as a KEDA ScaledObject scaling `target` (the Deployment serving the tier)
/// with one `prometheus` trigger per load-sensitive signal, the primary first. None when there
/// is no primary.
pub fn keda_scaled_object(
    r: &Recommendation,
    target: &str,
    server_address: &str,
    selector: &str,
) -> Option<String> {
    let primary = r.primary?;
    let mut triggers: Vec<&SignalThreshold> = r
        .signals
        .iter()
        .filter(|s| s.load_sensitive && s.threshold.is_some())
        .collect();
    triggers.sort_by_key(|s| (s.signal != primary, s.signal));
    let mut out = format!(
        "apiVersion: keda.sh/v1alpha1\n\
         kind: ScaledObject\n\
         metadata:\n  name: {target}-autoscaler\n\
         spec:\n  scaleTargetRef:\n    name: {target}\n\
         \x20 minReplicaCount: 1\n  maxReplicaCount: 10\n  triggers:\n"
    );
    for s in triggers {
        let (metric_type, query) = s.signal.keda_trigger(selector);
        let role = if s.signal == primary {
            "primary, first to fire"
        } else {
            "secondary"
        };
        out.push_str(&format!(
            "    # {} ({role}): observed {} at the edge window, threshold = observed x hpa_margin\n\
             \x20   - type: prometheus\n\
             \x20     metricType: {metric_type}\n\
             \x20     metadata:\n\
             \x20       serverAddress: {server_address}\n\
             \x20       query: {}\n\
             \x20       threshold: \"{}\"\n",
            s.signal.as_str(),
            number(s.observed),
            yaml_single_quoted(&query),
            number(s.threshold.unwrap_or_default()),
        ));
    }
    Some(out)
}

/// At most three decimals, no trailing zeros.
pub(crate) fn number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn yaml_single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// What capacity mode saves with a phase: the signals and, for a saturated tier, the
/// thresholds and a KEDA snippet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Autoscaler {
    /// Where the signals came from: `prometheus` or `direct` (each server's `/metrics`).
    pub source: String,
    pub hpa_margin: f64,
    pub signals: Vec<SignalThreshold>,
    /// The edge window's signals from the direct scrape (beside Prometheus' when that is the
    /// source).
    pub direct: SignalValues,
    /// Per server and model at the edge window (direct scrape).
    pub servers: Vec<ServerModelSignals>,
    pub primary: Option<Signal>,
    pub why_not: Option<String>,
    pub keda: Option<String>,
    pub warnings: Vec<String>,
}

/// One answer of Prometheus' instant query.
#[derive(Debug, Clone, PartialEq)]
pub enum PromAnswer {
    Value(f64),
    /// An empty vector: no series matched.
    NoSeries,
    /// NaN or infinite (e.g. 0/0: no request in the window).
    NotANumber,
}

/// An answer of Prometheus' query API that says no number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromAnswerError {
    #[error("not JSON ({0})")]
    NotJson(String),
    /// Prometheus refused the query: its error type and message.
    #[error("{kind}: {message}")]
    Refused { kind: String, message: String },
    #[error("no result")]
    NoResult,
    #[error("unexpected result type {0:?}")]
    ResultType(Option<String>),
    #[error("no sample value")]
    NoSampleValue,
}

/// Reads `/api/v1/query`'s JSON: the first sample of a vector or a scalar.
pub fn parse_prom_answer(body: &str) -> Result<PromAnswer, PromAnswerError> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| PromAnswerError::NotJson(e.to_string()))?;
    if v["status"] != "success" {
        return Err(PromAnswerError::Refused {
            kind: v["errorType"].as_str().unwrap_or("error").to_string(),
            message: v["error"].as_str().unwrap_or("no message").to_string(),
        });
    }
    let data = &v["data"];
    let sample = match data["resultType"].as_str() {
        Some("vector") => match data["result"].as_array() {
            Some(r) if r.is_empty() => return Ok(PromAnswer::NoSeries),
            Some(r) => &r[0]["value"],
            None => return Err(PromAnswerError::NoResult),
        },
        Some("scalar") => &data["result"],
        other => return Err(PromAnswerError::ResultType(other.map(String::from))),
    };
    let value: f64 = sample[1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or(PromAnswerError::NoSampleValue)?;
    Ok(if value.is_finite() {
        PromAnswer::Value(value)
    } else {
        PromAnswer::NotANumber
    })
}

/// Why Prometheus gave no number for a query.
#[derive(Debug, thiserror::Error)]
pub enum PromQueryError {
    /// The request got no answer (refused, timed out, ...).
    #[error(transparent)]
    Http(#[from] stress_common::http::HttpError),
    /// An answer that says no number: its HTTP status and why (a bad query is answered with
    /// 400 and a JSON error).
    #[error("HTTP {status}: {source}")]
    Answer {
        status: u16,
        #[source]
        source: PromAnswerError,
    },
}

/// An instant query at `time_ms`.
pub async fn prom_query(
    url: &str,
    query: &str,
    time_ms: i64,
    timeout: Duration,
) -> Result<PromAnswer, PromQueryError> {
    let url = format!(
        "{}/api/v1/query?query={}&time={:.3}",
        url.trim_end_matches('/'),
        stress_common::http::percent_encode(query),
        time_ms as f64 / 1000.0
    );
    let r = stress_common::http::get(&url, timeout).await?;
    // Prometheus answers a bad query with 400 and a JSON error: parse it for the message.
    parse_prom_answer(&r.body).map_err(|source| PromQueryError::Answer {
        status: r.status,
        source,
    })
}

/// Every signal of the window ending at `end_ms` from Prometheus: Err when it did not answer,
/// Ok(None) when the selector matched no series.
pub async fn prom_signals(
    source: &PrometheusSource,
    start_ms: i64,
    end_ms: i64,
) -> Result<Option<SignalValues>, PromQueryError> {
    let range = format!("{}ms", (end_ms - start_ms).max(1));
    let selector = source.selector.trim();
    let matched = if selector.is_empty() {
        "count(nv_inference_request_success)".to_string()
    } else {
        format!("count(nv_inference_request_success{{{selector}}})")
    };
    let queries = std::iter::once(matched)
        .chain(Signal::ALL.iter().map(|s| s.promql(selector, &range)))
        .map(|q| async move { prom_query(&source.url, &q, end_ms, SCRAPE_TIMEOUT).await });
    let mut answers = futures::future::join_all(queries).await.into_iter();
    if answers.next().expect("the series count's answer")? == PromAnswer::NoSeries {
        return Ok(None);
    }
    let mut values = SignalValues::new();
    for (signal, answer) in Signal::ALL.iter().zip(answers) {
        if let PromAnswer::Value(v) = answer? {
            values.insert(*signal, v);
        }
    }
    Ok(Some(values))
}

/// The servers a client group drives.
#[derive(Debug, Clone, Default)]
struct Tier {
    servers: BTreeSet<String>,
    server_groups: BTreeSet<String>,
}

/// Capacity mode's scrapes: one of every server at each check, and Prometheus' answers for the
/// windows between checks.
#[derive(Debug, Default)]
pub struct Collector {
    /// server → metrics address (servers without one are not scraped).
    metrics: BTreeMap<String, String>,
    tiers: BTreeMap<String, Tier>,
    prometheus: Option<PrometheusSource>,
    margin: f64,
    /// check time → server → scrape.
    scrapes: BTreeMap<i64, BTreeMap<String, Scrape>>,
    /// window end → Prometheus' signals (None: matched no series; Err: did not answer).
    prom: BTreeMap<i64, Result<Option<SignalValues>, PromQueryError>>,
}

impl Collector {
    pub fn new(
        plan: &RunPlan,
        settings: &CapacitySettings,
        endpoints: &BTreeMap<String, ServerEndpoint>,
    ) -> Self {
        let mut tiers: BTreeMap<String, Tier> = BTreeMap::new();
        for c in &plan.clients {
            let tier = tiers.entry(c.group.clone()).or_default();
            for t in &c.targets {
                tier.servers.insert(t.to_string());
                let group = plan
                    .servers
                    .iter()
                    .find(|s| s.name == *t)
                    .map(|s| s.group.clone())
                    .or_else(|| plan.external(t.as_str()).map(|e| e.group.clone()));
                tier.server_groups.extend(group);
            }
        }
        let metrics = endpoints
            .iter()
            .filter(|(_, ep)| !ep.metrics.is_empty())
            .map(|(name, ep)| (name.clone(), ep.metrics.clone()))
            .collect();
        let tiers = tiers
            .into_iter()
            .map(|(g, t)| (g, (t.servers, t.server_groups)))
            .collect();
        Self::with(
            metrics,
            tiers,
            settings.prometheus.clone(),
            settings.hpa_margin,
        )
    }

    /// `metrics`: server → metrics address; `tiers`: client group → (the servers it drives,
    /// their server groups).
    pub fn with(
        metrics: BTreeMap<String, String>,
        tiers: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>,
        prometheus: Option<PrometheusSource>,
        margin: f64,
    ) -> Self {
        Collector {
            metrics,
            tiers: tiers
                .into_iter()
                .map(|(g, (servers, server_groups))| {
                    (
                        g,
                        Tier {
                            servers,
                            server_groups,
                        },
                    )
                })
                .collect(),
            prometheus,
            margin,
            ..Default::default()
        }
    }

    /// Scrapes every server (all at once, within [`SCRAPE_TIMEOUT`]) for the check at `now_ms`,
    /// and asks Prometheus for the window since the last check. Failures only leave gaps.
    pub async fn scrape(&mut self, now_ms: i64) {
        let texts = self.metrics.iter().map(|(name, address)| async move {
            let text = tokio::time::timeout(
                SCRAPE_TIMEOUT,
                stress_common::tritonserver::metrics_text(address),
            )
            .await
            .ok()
            .flatten();
            (name.clone(), text)
        });
        let scrapes: BTreeMap<String, Scrape> = futures::future::join_all(texts)
            .await
            .into_iter()
            .filter_map(|(name, text)| Some((name, Scrape::parse(&text?))))
            .collect();
        let previous = self.scrapes.keys().next_back().copied();
        self.scrapes.insert(now_ms, scrapes);
        if let (Some(source), Some(start)) = (&self.prometheus, previous) {
            let answer = prom_signals(source, start, now_ms).await;
            if let Err(e) = &answer {
                tracing::warn!(
                    "Prometheus at {} did not answer ({e}); the direct scrape goes on",
                    source.url
                );
            }
            self.prom.insert(now_ms, answer);
        }
    }

    /// The signals and recommendation of `group`'s phase so far (None: nothing was scraped).
    pub fn autoscaler(&self, group: &str, controller: &Controller) -> Option<Autoscaler> {
        if self.scrapes.is_empty() {
            return None;
        }
        let tier = self.tiers.get(group).cloned().unwrap_or_default();
        let found = self.tier_points(&tier, controller);
        let edge = controller.edge_span();
        let r = recommend(&found.points, edge, controller.ending, self.margin);
        let (warnings, source) = self.prom_notes(&found, edge);
        let (direct, servers) = edge
            .and_then(|b| found.direct.get(&b))
            .map(|(d, s, e)| (d.clone(), server_model_signals(s, e)))
            .unwrap_or_default();
        let target = tier
            .server_groups
            .iter()
            .next()
            .cloned()
            .unwrap_or_else(|| group.to_string());
        let (address, selector) = match &self.prometheus {
            Some(p) => (p.url.clone(), p.selector.clone()),
            None => (
                "http://prometheus.monitoring:9090".to_string(),
                format!("job=\"{target}\""),
            ),
        };
        Some(Autoscaler {
            source: source.into(),
            hpa_margin: self.margin,
            keda: keda_scaled_object(&r, &target, &address, &selector),
            signals: r.signals,
            direct,
            servers,
            primary: r.primary,
            why_not: r.why_not,
            warnings,
        })
    }

    /// `tier`'s servers' scrapes of the check at `at` (None: no check then).
    fn of_tier(&self, tier: &Tier, at: i64) -> Option<BTreeMap<String, Scrape>> {
        let s = self.scrapes.get(&at)?;
        Some(
            s.iter()
                .filter(|(name, _)| tier.servers.contains(*name))
                .map(|(n, s)| (n.clone(), s.clone()))
                .collect(),
        )
    }

    /// One point per check whose window was scraped at both ends: Prometheus' signals where it
    /// answered with some, else the direct scrape's.
    fn tier_points(&self, tier: &Tier, controller: &Controller) -> TierPoints<'_> {
        let mut found = TierPoints::default();
        for check in &controller.checks {
            let w = &check.window;
            let (Some(start), Some(end)) =
                (self.of_tier(tier, w.start_ms), self.of_tier(tier, w.end_ms))
            else {
                continue;
            };
            let direct = window_signals(&start, &end);
            let values = match self.prom.get(&w.end_ms) {
                Some(Ok(Some(v))) => v.clone(),
                Some(Ok(None)) => {
                    found.no_series += 1;
                    direct.clone()
                }
                Some(Err(e)) => {
                    found.unanswered += 1;
                    found.first_error.get_or_insert(e);
                    direct.clone()
                }
                None => direct.clone(),
            };
            found
                .direct
                .insert((w.start_ms, w.end_ms), (direct, start, end));
            found.points.push(Point {
                concurrency: check.concurrency,
                start_ms: w.start_ms,
                end_ms: w.end_ms,
                requests: w.requests,
                values,
            });
        }
        found
    }

    /// The warnings about windows Prometheus gave no numbers for, and where the edge window's
    /// signals came from (`prometheus` only when it answered for that window).
    fn prom_notes(
        &self,
        found: &TierPoints,
        edge: Option<(i64, i64)>,
    ) -> (Vec<String>, &'static str) {
        let mut warnings = Vec::new();
        let mut source = "direct";
        if let Some(p) = &self.prometheus {
            let (no_series, unanswered) = (found.no_series, found.unanswered);
            if no_series > 0 {
                warnings.push(format!(
                    "Prometheus at {}: selector {:?} matched no series of \
                     nv_inference_request_success ({no_series} window(s)): the direct scrape's \
                     numbers are used; check the selector's labels",
                    p.url, p.selector
                ));
            }
            if unanswered > 0 {
                warnings.push(format!(
                    "Prometheus at {} did not answer for {unanswered} window(s) (first: {}): the \
                     direct scrape's numbers are used for those",
                    p.url,
                    found
                        .first_error
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ));
            }
            if edge.is_some_and(|b| {
                matches!(self.prom.get(&b.1), Some(Ok(Some(_)))) && found.direct.contains_key(&b)
            }) {
                source = "prometheus";
            }
        }
        (warnings, source)
    }
}

/// A window's direct-scrape signals, and the scrapes at its start and end.
type DirectWindow = (
    SignalValues,
    BTreeMap<String, Scrape>,
    BTreeMap<String, Scrape>,
);

/// A tier's points over a phase's checks, and how often Prometheus gave none.
#[derive(Default)]
struct TierPoints<'a> {
    points: Vec<Point>,
    /// (window start, window end) → its direct scrape.
    direct: BTreeMap<(i64, i64), DirectWindow>,
    /// Windows Prometheus did not answer for, and its first error.
    unanswered: usize,
    first_error: Option<&'a PromQueryError>,
    /// Windows whose selector matched no series.
    no_series: usize,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn metrics(
        model: &str,
        success: f64,
        queue: f64,
        compute: f64,
        request: f64,
        pending: f64,
    ) -> String {
        format!(
            "nv_inference_request_success{{model=\"{model}\",version=\"1\"}} {success}\n\
             nv_inference_queue_duration_us{{model=\"{model}\",version=\"1\"}} {queue}\n\
             nv_inference_compute_input_duration_us{{model=\"{model}\",version=\"1\"}} 0\n\
             nv_inference_compute_infer_duration_us{{model=\"{model}\",version=\"1\"}} {compute}\n\
             nv_inference_compute_output_duration_us{{model=\"{model}\",version=\"1\"}} 0\n\
             nv_inference_request_duration_us{{model=\"{model}\",version=\"1\"}} {request}\n\
             nv_inference_pending_request_count{{model=\"{model}\",version=\"1\"}} {pending}\n"
        )
    }

    fn servers(list: &[(&str, String)]) -> BTreeMap<String, Scrape> {
        list.iter()
            .map(|(n, t)| (n.to_string(), Scrape::parse(t)))
            .collect()
    }

    #[test]
    fn window_signals_are_counter_deltas_over_successes_and_gauge_means() {
        let start = servers(&[
            (
                "a",
                metrics("m", 100.0, 1000.0, 2000.0, 3500.0, 1.0) + "nv_cpu_utilization 0.2\n",
            ),
            ("b", metrics("m", 50.0, 0.0, 1000.0, 1000.0, 0.0)),
            ("restarted", metrics("m", 900.0, 9e6, 9e6, 9e6, 0.0)),
        ]);
        let end = servers(&[
            (
                "a",
                metrics("m", 200.0, 11_000.0, 4000.0, 15_500.0, 3.0) + "nv_cpu_utilization 0.4\n",
            ),
            ("b", metrics("m", 150.0, 10_000.0, 3000.0, 14_000.0, 2.0)),
            ("restarted", metrics("m", 10.0, 1.0, 1.0, 1.0, 0.0)),
            ("new", metrics("m", 10.0, 1.0, 1.0, 1.0, 0.0)),
        ]);
        let v = window_signals(&start, &end);
        // a: 100 requests, 10 000 µs queued, 2000 computing, 12 000 in all; b: 100, 10 000,
        // 2000, 13 000. "restarted" went back and "new" has no start: left out.
        assert_eq!(v[&Signal::QueueUsPerRequest], 100.0);
        assert_eq!(v[&Signal::ComputeUsPerRequest], 20.0);
        assert_eq!(v[&Signal::RequestUsPerRequest], 125.0);
        // Per server (a: (1+3)/2, b: (0+2)/2, restarted: 0, over 3 servers seen at both ends).
        assert!((v[&Signal::PendingRequests] - 1.0).abs() < 1e-9, "{v:?}");
        assert!((v[&Signal::CpuUtilization] - 0.3).abs() < 1e-9);
        assert!(!v.contains_key(&Signal::GpuUtilization), "a CPU build");
        let per = server_model_signals(&start, &end);
        let a = per.iter().find(|s| s.server == "a").unwrap();
        assert_eq!(
            (a.requests, a.queue_us_per_request, a.request_us_per_request),
            (100.0, Some(100.0), Some(120.0))
        );
        assert_eq!(per.len(), 2, "{per:?}");

        let idle = window_signals(&start, &start);
        assert!(
            !idle.contains_key(&Signal::QueueUsPerRequest),
            "no request succeeded: no per-request signal"
        );
    }

    /// A tier whose queue time grows from concurrency 3 on, request time with it, compute flat.
    pub(crate) fn ramp() -> Vec<Point> {
        let point = |concurrency: u32, i: i64, queue: f64, pending: f64| Point {
            concurrency,
            start_ms: i * 1000,
            end_ms: (i + 1) * 1000,
            requests: 100,
            values: SignalValues::from([
                (Signal::QueueUsPerRequest, queue),
                (Signal::ComputeUsPerRequest, 20_000.0),
                (Signal::RequestUsPerRequest, 20_000.0 + queue),
                (Signal::PendingRequests, pending),
                (Signal::CpuUtilization, 0.0),
            ]),
        };
        vec![
            point(2, 1, 100.0, 0.0),
            point(3, 2, 6_000.0, 0.4),
            point(4, 3, 10_000.0, 1.0),
            point(5, 4, 20_000.0, 1.5),
            point(4, 5, 10_000.0, 1.0),
        ]
    }

    #[test]
    fn thresholds_are_the_edge_window_times_the_margin_and_the_first_to_fire_is_primary() {
        let r = recommend(&ramp(), Some((3000, 4000)), Some(Ending::Converged), 0.8);
        assert_eq!(r.why_not, None);
        let get = |s: Signal| r.signals.iter().find(|t| t.signal == s).unwrap();
        let queue = get(Signal::QueueUsPerRequest);
        assert_eq!(
            (queue.observed, queue.baseline, queue.threshold),
            (10_000.0, Some(100.0), Some(8_000.0))
        );
        assert_eq!(queue.fires_at_concurrency, Some(4), "6000 < 8000 at 3");
        // Request time: threshold 24 000, reached at 3 (26 000): before the queue's.
        let request = get(Signal::RequestUsPerRequest);
        assert_eq!(request.threshold, Some(24_000.0));
        assert_eq!(request.fires_at_concurrency, Some(3));
        // Pending: 0.8 at 3? 0.4 < 0.8: at 4.
        assert_eq!(get(Signal::PendingRequests).fires_at_concurrency, Some(4));
        let compute = get(Signal::ComputeUsPerRequest);
        assert!(
            !compute.load_sensitive && compute.fires_at_concurrency.is_none() && !compute.primary,
            "flat with load: {compute:?}"
        );
        let cpu = get(Signal::CpuUtilization);
        assert_eq!(cpu.threshold, None, "zero at the edge window: no threshold");
        assert_eq!(r.primary, Some(Signal::RequestUsPerRequest));
        assert!(request.primary && !queue.primary);
        assert_eq!(r.signals.iter().filter(|s| s.primary).count(), 1, "{r:#?}");
    }

    #[test]
    fn at_the_same_concurrency_the_signal_that_grew_most_is_primary() {
        let mut points = ramp();
        for p in &mut points {
            p.values.remove(&Signal::RequestUsPerRequest);
        }
        // Queue (100 → 10 000) and pending (0 → 1) both fire at 4: pending grew from 0.
        let r = recommend(&points, Some((3000, 4000)), Some(Ending::Oscillating), 0.8);
        assert_eq!(r.primary, Some(Signal::PendingRequests));
        points[0].values.insert(Signal::PendingRequests, 0.5);
        let r = recommend(&points, Some((3000, 4000)), Some(Ending::Oscillating), 0.8);
        assert_eq!(r.primary, Some(Signal::QueueUsPerRequest), "x100 beats x2");
    }

    #[test]
    fn a_tier_that_did_not_saturate_gets_no_thresholds() {
        for ending in [
            Some(Ending::NotSaturated),
            Some(Ending::OutOfTime),
            Some(Ending::Unreachable),
            None,
        ] {
            let r = recommend(&ramp(), Some((3000, 4000)), ending, 0.8);
            assert!(
                r.why_not.as_deref().unwrap().contains("not saturated"),
                "{r:?}"
            );
            assert!(
                r.signals
                    .iter()
                    .all(|s| s.threshold.is_none() && !s.primary)
            );
            assert_eq!(r.signals.len(), 5, "the signals are still shown");
            assert!(keda_scaled_object(&r, "t", "http://p:9090", "").is_none());
        }
        let r = recommend(&ramp(), None, Some(Ending::Unreachable), 0.8);
        assert!(r.why_not.unwrap().contains("no window met"));
        let r = recommend(&ramp(), Some((7000, 8000)), Some(Ending::Converged), 0.8);
        assert!(r.why_not.unwrap().contains("no server signals"));
        // Too few samples at low load are not replayed: the baseline is the next window.
        let mut thin = ramp();
        thin[0].requests = MIN_SAMPLES - 1;
        let r = recommend(&thin, Some((3000, 4000)), Some(Ending::Converged), 0.8);
        let queue = r
            .signals
            .iter()
            .find(|s| s.signal == Signal::QueueUsPerRequest);
        assert_eq!(queue.unwrap().baseline, Some(6_000.0));
        // Nothing grows with load.
        let flat: Vec<Point> = ramp()
            .into_iter()
            .map(|mut p| {
                p.values.retain(|s, _| *s == Signal::ComputeUsPerRequest);
                p
            })
            .collect();
        let r = recommend(&flat, Some((3000, 4000)), Some(Ending::Converged), 0.8);
        assert_eq!(r.primary, None);
        assert!(r.why_not.unwrap().contains("no signal grew"));
    }

    #[test]
    fn the_keda_snippet_is_a_scaled_object_with_prometheus_triggers_primary_first() {
        let r = recommend(&ramp(), Some((3000, 4000)), Some(Ending::Converged), 0.8);
        let yaml = keda_scaled_object(&r, "triton", "http://prom:9090", r#"job="triton""#)
            .expect("a primary");
        let v: serde_json::Value =
            serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(v["apiVersion"], "keda.sh/v1alpha1");
        assert_eq!(v["kind"], "ScaledObject");
        assert_eq!(v["spec"]["scaleTargetRef"]["name"], "triton");
        let triggers = v["spec"]["triggers"].as_array().unwrap();
        // Request (primary), then queue and pending; not compute (flat) nor CPU (zero).
        assert_eq!(triggers.len(), 3, "{yaml}");
        let first = &triggers[0];
        assert_eq!(first["type"], "prometheus");
        assert_eq!(first["metricType"], "Value");
        assert_eq!(first["metadata"]["serverAddress"], "http://prom:9090");
        assert_eq!(
            first["metadata"]["threshold"], "24000",
            "a string, as KEDA reads it"
        );
        assert_eq!(
            first["metadata"]["query"],
            Signal::RequestUsPerRequest.promql(r#"job="triton""#, "1m")
        );
        let pending = &triggers[2];
        assert_eq!(pending["metricType"], "AverageValue", "a sum over replicas");
        assert_eq!(pending["metadata"]["threshold"], "0.8");
        assert_eq!(
            pending["metadata"]["query"],
            r#"sum(avg_over_time(nv_inference_pending_request_count{job="triton"}[1m]))"#
        );
    }

    #[test]
    fn promql_of_each_signal() {
        let s = r#"job="t""#;
        assert_eq!(
            Signal::QueueUsPerRequest.promql(s, "5s"),
            r#"sum(increase(nv_inference_queue_duration_us{job="t"}[5s])) / sum(increase(nv_inference_request_success{job="t"}[5s]))"#
        );
        assert_eq!(
            Signal::ComputeUsPerRequest.promql(s, "5s"),
            r#"(sum(increase(nv_inference_compute_input_duration_us{job="t"}[5s])) + sum(increase(nv_inference_compute_infer_duration_us{job="t"}[5s])) + sum(increase(nv_inference_compute_output_duration_us{job="t"}[5s]))) / sum(increase(nv_inference_request_success{job="t"}[5s]))"#
        );
        assert_eq!(
            Signal::PendingRequests.promql("", "5s"),
            "avg(sum by (instance) (avg_over_time(nv_inference_pending_request_count[5s])))"
        );
        assert_eq!(
            Signal::CpuUtilization.promql(s, "1m"),
            r#"avg(avg_over_time(nv_cpu_utilization{job="t"}[1m]))"#
        );
    }

    #[test]
    fn prometheus_answers() {
        let vector = |result: &str| {
            format!(r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#)
        };
        assert_eq!(
            parse_prom_answer(&vector(r#"[{"metric":{},"value":[1.5,"42.5"]}]"#)),
            Ok(PromAnswer::Value(42.5))
        );
        assert_eq!(parse_prom_answer(&vector("[]")), Ok(PromAnswer::NoSeries));
        assert_eq!(
            parse_prom_answer(&vector(r#"[{"metric":{},"value":[1.5,"NaN"]}]"#)),
            Ok(PromAnswer::NotANumber)
        );
        let err = parse_prom_answer(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
        );
        assert_eq!(
            err,
            Err(PromAnswerError::Refused {
                kind: "bad_data".into(),
                message: "parse error at char 3".into()
            })
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "bad_data: parse error at char 3"
        );
        assert!(matches!(
            parse_prom_answer("<html>"),
            Err(PromAnswerError::NotJson(_))
        ));
    }

    #[tokio::test]
    async fn a_query_prometheus_refuses_or_nobody_answers_says_which() {
        use axum::http::StatusCode;
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::get(|| async {
                (
                    StatusCode::BAD_REQUEST,
                    r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let timeout = Duration::from_secs(5);
        let err = prom_query(&format!("http://{address}/"), "up{", 0, timeout)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                PromQueryError::Answer {
                    status: 400,
                    source: PromAnswerError::Refused { kind, .. },
                } if kind == "bad_data"
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "HTTP 400: bad_data: parse error at char 3");
        let source = PrometheusSource {
            url: format!("http://{address}"),
            selector: String::new(),
        };
        assert!(matches!(
            prom_signals(&source, 0, 1000).await,
            Err(PromQueryError::Answer { status: 400, .. })
        ));

        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = prom_query(&format!("http://127.0.0.1:{port}"), "up", 0, timeout)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                PromQueryError::Http(stress_common::http::HttpError::Failed { .. })
            ),
            "{err:?}"
        );
    }
}
