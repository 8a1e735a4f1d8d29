//! The matrix's SLO rules read once into [`Rule`]s, ready to judge ([`Rule::parse`], whose
//! errors name the field; validation reports them). `crate::judge::slo` judges them.

use std::borrow::Cow;
use std::time::Duration;

use super::duration::HumanDuration;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// One service-level objective, e.g. `{metric: p99, scenario: Load, max: 50ms}`,
/// `{metric: error_rate, max: 0.001}`, `{metric: qps, min: 100}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloRule {
    pub metric: SloMetric,

    /// Only this scenario's requests (default: all scenarios').
    pub scenario: Option<String>,

    /// Only this model's requests (one of the client templates' `models:`).
    pub model: Option<String>,

    /// Upper bound: a duration for p50 / p90 / p99 / max (`50ms`), a fraction for error_rate
    /// (`0.001`), requests per second for qps.
    pub max: Option<SloBound>,

    /// Lower bound, as `max`.
    pub min: Option<SloBound>,

    /// Check the rule every poll too, and stop the run at once when it is breached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_fail: bool,

    /// Grace after the workers start before the rule is judged live (default 0).
    #[serde(
        with = "super::checked::run_length",
        default,
        skip_serializing_if = "Duration::is_zero"
    )]
    #[schemars(with = "HumanDuration")]
    pub delay: Duration,
}

/// What an SLO rule measures, over the run (or, live, since the workers started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Latency percentiles and maximum of answered requests (exact, merged histograms).
    P50,
    P90,
    P99,
    Max,
    /// Failed tests over tests.
    ErrorRate,
    /// Requests per second.
    Qps,
}

impl SloMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            SloMetric::P50 => "p50",
            SloMetric::P90 => "p90",
            SloMetric::P99 => "p99",
            SloMetric::Max => "max",
            SloMetric::ErrorRate => "error_rate",
            SloMetric::Qps => "qps",
        }
    }

    /// A latency (bounds are durations, observed values milliseconds).
    pub fn is_latency(self) -> bool {
        matches!(
            self,
            SloMetric::P50 | SloMetric::P90 | SloMetric::P99 | SloMetric::Max
        )
    }
}

/// An SLO bound as written: a number or a duration; [`crate::judge::slo`] reads it for its metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SloBound(pub String);

impl<'de> Deserialize<'de> for SloBound {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(f64),
            Text(String),
        }
        Ok(SloBound(match Written::deserialize(d)? {
            Written::Number(n) => n.to_string(),
            Written::Text(t) => t,
        }))
    }
}

impl JsonSchema for SloBound {
    fn schema_name() -> Cow<'static, str> {
        "SloBound".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration for latency metrics (`50ms`), a number for error_rate (a fraction) and qps.",
            "type": ["number", "string"]
        })
    }
}

/// A rule ready to judge: bounds in the metric's unit (milliseconds for latencies, a fraction
/// for error_rate, requests per second for qps).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// As the report shows it, e.g. `p99 of Load (group grpc) <= 50ms`.
    pub text: String,
    /// A client group's rule judges only its members; None: all clients.
    pub group: Option<String>,
    pub metric: SloMetric,
    pub scenario: Option<String>,
    pub model: Option<String>,
    pub max: Option<f64>,
    pub min: Option<f64>,
    pub abort_on_fail: bool,
    pub delay: Duration,
}

/// Why a rule as written cannot be judged: the field and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRule {
    pub field: &'static str,
    pub message: String,
}

impl Rule {
    pub fn parse(rule: &SloRule, group: Option<&str>) -> Result<Rule, BadRule> {
        let bound = |field: &'static str, b: &Option<SloBound>| -> Result<Option<f64>, BadRule> {
            let Some(SloBound(text)) = b else {
                return Ok(None);
            };
            let bad = |message: String| BadRule { field, message };
            let value = if rule.metric.is_latency() {
                let d = humantime::parse_duration(text.trim()).map_err(|e| {
                    bad(format!(
                        "{} is a latency: give a duration like 50ms, found {text:?} ({e})",
                        rule.metric.as_str()
                    ))
                })?;
                d.as_secs_f64() * 1000.0
            } else {
                let n: f64 = text.trim().parse().map_err(|_| {
                    bad(format!(
                        "{} needs a number, found {text:?}",
                        rule.metric.as_str()
                    ))
                })?;
                if !n.is_finite() || n < 0.0 {
                    return Err(bad(format!("must be a number >= 0, found {text}")));
                }
                if rule.metric == SloMetric::ErrorRate && n > 1.0 {
                    return Err(bad(format!(
                        "error_rate is a fraction of tests (0.001 = 0.1%), found {text}"
                    )));
                }
                n
            };
            Ok(Some(value))
        };
        let max = bound("max", &rule.max)?;
        let min = bound("min", &rule.min)?;
        if max.is_none() && min.is_none() {
            return Err(BadRule {
                field: "metric",
                message: "a rule needs `max` or `min` (or both)".into(),
            });
        }
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            return Err(BadRule {
                field: "min",
                message: format!("min is above max ({lo} > {hi})"),
            });
        }
        let mut text = rule.metric.as_str().to_string();
        let mut of = Vec::new();
        if let Some(s) = &rule.scenario {
            of.push(s.clone());
        }
        if let Some(m) = &rule.model {
            of.push(format!("model {m}"));
        }
        if !of.is_empty() {
            text.push_str(&format!(" of {}", of.join(" ")));
        }
        if let Some(g) = group {
            text.push_str(&format!(" (group {g})"));
        }
        let written = |b: &Option<SloBound>| b.as_ref().map(|SloBound(t)| t.trim().to_string());
        match (written(&rule.min), written(&rule.max)) {
            (Some(lo), Some(hi)) => text.push_str(&format!(" in [{lo}, {hi}]")),
            (Some(lo), None) => text.push_str(&format!(" >= {lo}")),
            (None, Some(hi)) => text.push_str(&format!(" <= {hi}")),
            (None, None) => {}
        }
        Ok(Rule {
            text,
            group: group.map(String::from),
            metric: rule.metric,
            scenario: rule.scenario.clone(),
            model: rule.model.clone(),
            max,
            min,
            abort_on_fail: rule.abort_on_fail,
            delay: rule.delay,
        })
    }

    /// The unit the observed value is in.
    pub fn unit(&self) -> &'static str {
        match self.metric {
            m if m.is_latency() => "ms",
            SloMetric::Qps => "requests/s",
            _ => "",
        }
    }
}
