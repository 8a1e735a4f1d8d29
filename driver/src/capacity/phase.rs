//! Capacity mode's phases: which controller runs a group goes through ([`phases_for`]) and the
//! record of each ([`PhaseRecord`]: the controller's or the spike's trace and answer, and the
//! autoscaler thresholds), as the store and the report keep it.

use serde::{Deserialize, Serialize};

use super::autoscale::Autoscaler;
use super::controller::{Check, Controller, PhaseResult};
use super::spike::{Spike, SpikeCheck, SpikeResult};
use crate::matrix::{CapacityPhase, CapacitySettings, ModelSpec};

/// One run of the controller for a group: a phase, or one model / one mix of a phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseSpec {
    /// Unique within the group: `production`, `individual/MODEL`, `exploration/N`.
    pub key: String,
    pub phase: CapacityPhase,
    /// The model alone, or "mix".
    pub model: String,
    /// The mix the workers switch to (`--model` syntax); None: their own `--model` weights.
    pub mix: Option<String>,
}

/// The phases a group with these models runs, in order: `individual` expands to one per model,
/// `exploration` to one per mix. Pure.
pub fn phases_for(settings: &CapacitySettings, models: &[ModelSpec]) -> Vec<PhaseSpec> {
    let mut out = Vec::new();
    for phase in &settings.phases {
        match phase {
            CapacityPhase::Production => out.push(PhaseSpec {
                key: "production".into(),
                phase: *phase,
                model: "mix".into(),
                mix: None,
            }),
            CapacityPhase::Individual => {
                for m in models {
                    let label = match m.version {
                        Some(v) => format!("{}@{v}", m.name),
                        None => m.name.clone(),
                    };
                    out.push(PhaseSpec {
                        key: format!("individual/{label}"),
                        phase: *phase,
                        model: label.clone(),
                        mix: Some(format!("{label}:1")),
                    });
                }
            }
            CapacityPhase::Spike => out.push(PhaseSpec {
                key: "spike".into(),
                phase: *phase,
                model: "mix".into(),
                mix: None,
            }),
            CapacityPhase::Exploration => {
                for (i, mix) in settings.exploration.iter().enumerate() {
                    let text = mix
                        .iter()
                        .map(|(model, weight)| format!("{model}:{weight}"))
                        .collect::<Vec<_>>()
                        .join(",");
                    out.push(PhaseSpec {
                        key: format!("exploration/{}", i + 1),
                        phase: *phase,
                        model: "mix".into(),
                        mix: Some(text),
                    });
                }
            }
        }
    }
    out
}

/// A phase's record in the store, keyed `GROUP/PHASE-KEY`.
impl stress_common::store::Document for PhaseRecord {
    const KIND: &'static str = "capacity_phase";
}

/// A group's phase as the store and the report keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub group: String,
    /// `production`, `individual` or `exploration`.
    pub phase: String,
    /// Unique within the group (see [`PhaseSpec::key`]).
    pub key: String,
    /// The model alone, or "mix".
    pub model: String,
    /// The mix the workers ran (None: their own `--model` weights).
    pub mix: Option<String>,
    pub target_p99_ms: f64,
    pub result: PhaseResult,
    pub checks: Vec<Check>,
    /// The servers' signals and autoscaler thresholds (see [`super::autoscale`]); absent in
    /// records saved before they existed, or when no server could be scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<Autoscaler>,
    /// The spike phase's answer and trace (its `checks` are empty: it has no controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spike: Option<SpikeRecord>,
}

/// A spike phase in its [`PhaseRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikeRecord {
    #[serde(flatten)]
    pub result: SpikeResult,
    pub trace: Vec<SpikeCheck>,
}

impl PhaseRecord {
    pub fn of(group: &str, spec: &PhaseSpec, controller: &Controller) -> Self {
        let mut record = Self::new(group, spec, controller.target_p99_ms(), controller.result());
        record.checks = controller.checks.clone();
        record
    }

    pub fn of_spike(group: &str, spec: &PhaseSpec, spike: &Spike) -> Self {
        let mut record = Self::new(group, spec, spike.target_p99_ms(), spike.phase_result());
        record.spike = Some(SpikeRecord {
            result: spike.result(),
            trace: spike.checks.clone(),
        });
        record
    }

    /// The QPS of each judged window at `concurrency` (those its answer pools): the whole
    /// window's for the phase's own model or "mix", else `model`'s share in it.
    pub fn window_qps(&self, model: &str, concurrency: u32) -> Vec<f64> {
        self.checks
            .iter()
            .filter(|c| c.concurrency == concurrency && c.judgement.is_judged())
            .filter_map(|c| {
                if model == self.model || model == "mix" {
                    return Some(c.window.qps);
                }
                c.window
                    .models
                    .iter()
                    .find(|m| m.model == model)
                    .map(|m| m.qps)
            })
            .collect()
    }

    fn new(group: &str, spec: &PhaseSpec, target_p99_ms: f64, result: PhaseResult) -> Self {
        PhaseRecord {
            group: group.into(),
            phase: spec.phase.as_str().into(),
            key: spec.key.clone(),
            model: spec.model.clone(),
            mix: spec.mix.clone(),
            target_p99_ms,
            result,
            checks: Vec::new(),
            autoscaler: None,
            spike: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_expand_per_model_and_per_mix_in_order() {
        let settings: CapacitySettings = serde_saphyr::from_str(
            "target_p99: 50ms\nphases: [individual, production, exploration]\nexploration: [{a: 1, b@2: 3}, {b: 1}]\n",
        )
        .unwrap();
        let models: Vec<ModelSpec> =
            serde_saphyr::from_str("[{name: a, weight: 2}, {name: b, version: 2}]").unwrap();
        let keys: Vec<(String, String, Option<String>)> = phases_for(&settings, &models)
            .into_iter()
            .map(|p| (p.key, p.model, p.mix))
            .collect();
        let own = |s: &str| Some(s.to_string());
        assert_eq!(
            keys,
            [
                ("individual/a".into(), "a".into(), own("a:1")),
                ("individual/b@2".into(), "b@2".into(), own("b@2:1")),
                ("production".into(), "mix".into(), None),
                ("exploration/1".into(), "mix".into(), own("a:1,b@2:3")),
                ("exploration/2".into(), "mix".into(), own("b:1")),
            ]
        );
    }

    #[test]
    fn records_saved_before_autoscaling_still_parse() {
        let old = serde_json::json!({
            "group": "g", "phase": "production", "key": "production", "model": "mix",
            "mix": null, "target_p99_ms": 50.0, "checks": [],
            "result": {"ending": null, "concurrency": null, "max_qps": 0.0, "p99_ms": 0.0,
                "safe_rate_qps": 0.0, "window_start_ms": null, "window_end_ms": null, "models": []}
        });
        let record: PhaseRecord = serde_json::from_value(old).unwrap();
        assert_eq!(record.autoscaler, None);
    }
}
