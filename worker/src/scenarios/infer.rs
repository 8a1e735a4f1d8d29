//! Infer: any model the server has, driven from its own metadata and config (see
//! [`crate::model`]). At start-up every selected model is described by every server and its
//! requests are built once (random or zero data, or a perf_analyzer input-data file); one test
//! is one load window (as `Load`'s) on one model, picked by the `--model` weights, and every
//! response passes every check in [`model::check_response`] (and, with `--consistency`, must
//! repeat the first response to the same input byte for byte). On a sequence model one test is
//! one sequence instead ([`sequence`]); a decoupled model's window is driven over response
//! streams by [`decoupled`].

pub mod decoupled;
pub mod sequence;

use super::load;
use super::{Failure, Outcome, TestEnv};
use crate::client::{ClientError, InferResponse, Prepared, TritonClient};
use crate::metadata::SequenceBatchingError;
use crate::model::{
    self, CheckFailure, DataSource, InferOptions, InputDataFile, ModelDescription, ModelError,
    ModelSelection, PlannedRequest,
};
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::distr::weighted::{self, WeightedIndex};
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Every selected model with its requests, built once at start-up.
#[derive(Debug)]
pub struct InferPlan {
    pub models: Vec<PlannedModel>,
    /// Picks each test's model; capacity mode swaps it live for a phase's own mix.
    picker: std::sync::RwLock<WeightedIndex<u32>>,
    /// The `--model` weights, aligned with `models`.
    weights: Vec<u32>,
    tolerance: f64,
}

#[derive(Debug)]
pub struct PlannedModel {
    pub description: ModelDescription,
    pub requests: Vec<PlannedRequest>,
    prepared: Vec<Prepared>,
    /// `--consistency`: the first response to each request, which every later one must repeat.
    first_responses: Option<Vec<Mutex<Option<InferResponse>>>>,
    /// A sequence model's sequences (None: not a sequence model).
    sequence: Option<sequence::SequenceSource>,
    /// `--consistency` on a sequence model: the first response to each step of each sequence.
    first_sequence_responses: Option<sequence::FirstResponses>,
    /// A decoupled model's checks of whole response streams.
    decoupled: Option<decoupled::StreamChecks>,
}

/// Why the Infer scenario cannot drive the selected models: bad input, found before any load.
#[derive(Debug, thiserror::Error)]
pub enum InferPlanError {
    #[error("no server to describe the models")]
    NoServer,
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(
        "model {model}: server {server} describes it differently from server {reference}: {theirs:?} / {ours:?}"
    )]
    ServersDisagree {
        model: String,
        server: String,
        reference: String,
        theirs: Box<ModelDescription>,
        ours: Box<ModelDescription>,
    },
    #[error("model {0}: a decoupled sequence model is not driven by Infer yet")]
    DecoupledSequence(String),
    #[error(transparent)]
    SequenceBatching(#[from] SequenceBatchingError),
    #[error(
        "--batch-size {batch}: model {model} is a sequence model, and Triton's sequence batcher takes requests of batch 1"
    )]
    SequenceBatchSize { batch: u32, model: String },
    /// Only decoupled models were selected, and this protocol has no streams for them.
    #[error(transparent)]
    DecoupledNeedsGrpc(#[from] decoupled::DecoupledNeedsGrpc),
    #[error("model {model}: encoding a request: {source}")]
    Encoding { model: String, source: ClientError },
    #[error("{}: {source}", file.display())]
    EmptyStream {
        file: std::path::PathBuf,
        source: sequence::EmptyStream,
    },
    #[error("--model weights: {0}")]
    Weights(#[source] weighted::Error),
}

/// Describes every selected model on every server (they must agree), checks the flags against
/// the descriptions and builds the requests. Any problem is bad input, found before any load.
pub async fn prepare(
    clients: &[Arc<dyn TritonClient>],
    options: &InferOptions,
) -> Result<InferPlan, InferPlanError> {
    let first = clients.first().ok_or(InferPlanError::NoServer)?;
    let mut descriptions = Vec::new();
    for selection in &options.models {
        let description = model::describe(first.as_ref(), selection).await?;
        for other in &clients[1..] {
            let d = model::describe(other.as_ref(), selection).await?;
            if d != description {
                return Err(InferPlanError::ServersDisagree {
                    model: selection.label(),
                    server: other.address().into(),
                    reference: first.address().into(),
                    theirs: Box::new(d),
                    ours: Box::new(description),
                });
            }
        }
        if description.decoupled && description.sequence_batching.is_some() {
            return Err(InferPlanError::DecoupledSequence(selection.label()));
        }
        if let Some(batcher) = &description.sequence_batching {
            batcher.check(&selection.label())?;
            let batch = options.batch_size_for(&selection.name);
            if batch != 1 {
                return Err(InferPlanError::SequenceBatchSize {
                    batch,
                    model: selection.label(),
                });
            }
        }
        descriptions.push(description);
    }
    options.check_names(&descriptions)?;
    decoupled::check_drivable(first.protocol(), &descriptions)?;
    let weights = options.models.iter().map(|m| m.weight).collect();
    let mut files: BTreeMap<std::path::PathBuf, InputDataFile> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut models = Vec::new();
    for description in descriptions {
        let file = match options.source_for(&description.name) {
            DataSource::File(path) => {
                if !files.contains_key(&path) {
                    let file = InputDataFile::read(&path).map_err(ModelError::from)?;
                    files.insert(path.clone(), file);
                }
                Some(&files[&path])
            }
            _ => None,
        };
        let requests = model::plan_requests(&description, options, file, &mut rng)?;
        let prepared = requests
            .iter()
            .map(|r| first.prepare(&r.request))
            .collect::<Result<Vec<_>, ClientError>>()
            .map_err(|source| InferPlanError::Encoding {
                model: description.label(),
                source,
            })?;
        let first_responses = options
            .consistency
            .then(|| requests.iter().map(|_| Mutex::new(None)).collect());
        let sequence = match description.sequence_batching {
            Some(_) => Some(
                sequence::SequenceSource::new(file.map(|f| f.streams.as_slice()), requests.len())
                    .map_err(|source| InferPlanError::EmptyStream {
                    file: file.map(|f| f.path.clone()).unwrap_or_default(),
                    source,
                })?,
            ),
            None => None,
        };
        let first_sequence_responses =
            (options.consistency && sequence.is_some()).then(|| Mutex::new(Default::default()));
        let decoupled = description
            .decoupled
            .then(|| decoupled::StreamChecks::new(&requests, options.consistency));
        models.push(PlannedModel {
            description,
            requests,
            prepared,
            first_responses,
            sequence,
            first_sequence_responses,
            decoupled,
        });
    }
    let picker = WeightedIndex::new(&weights).map_err(InferPlanError::Weights)?;
    Ok(InferPlan {
        models,
        picker: std::sync::RwLock::new(picker),
        weights,
        tolerance: options.tolerance,
    })
}

/// A model mix (capacity mode's, per phase) that cannot apply to the planned models.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelMixError {
    /// A selection that does not parse (`--model` syntax), as its parser says.
    #[error(transparent)]
    Selection(#[from] stress_common::contract::FlagError),
    #[error("mix {mix}: model {model} is not planned")]
    NotPlanned { mix: String, model: String },
    #[error("mix {0}: no weight left")]
    NoWeight(String),
    #[error("mix: {0}")]
    Weights(#[source] weighted::Error),
}

/// The weight of each model under `mix` (`--model` syntax, `NAME[@VERSION]:WEIGHT,...`): a
/// model the mix does not name gets 0; None: `default`. A mix naming a model not in `models`, or
/// leaving no weight, is an error.
pub fn mix_weights(
    models: &[&ModelDescription],
    default: &[u32],
    mix: Option<&str>,
) -> Result<Vec<u32>, ModelMixError> {
    let Some(mix) = mix else {
        return Ok(default.to_vec());
    };
    let selections = mix
        .split(',')
        .map(str::parse::<ModelSelection>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(ModelMixError::Selection)?;
    for s in &selections {
        if !models.iter().any(|d| selects(s, d)) {
            return Err(ModelMixError::NotPlanned {
                mix: mix.into(),
                model: s.label(),
            });
        }
    }
    let weights: Vec<u32> = models
        .iter()
        .map(|d| {
            selections
                .iter()
                .filter(|s| selects(s, d))
                .map(|s| s.weight)
                .sum()
        })
        .collect();
    if weights.iter().all(|w| *w == 0) {
        return Err(ModelMixError::NoWeight(mix.into()));
    }
    Ok(weights)
}

/// Whether a `--model` selection names a described model (any version when it names none).
fn selects(s: &ModelSelection, d: &ModelDescription) -> bool {
    s.name == d.name && (s.version.is_empty() || s.version == d.version)
}

impl InferPlan {
    /// The weight of each planned model under `mix` (see [`mix_weights`]).
    pub fn weights_for(&self, mix: Option<&str>) -> Result<Vec<u32>, ModelMixError> {
        let described: Vec<&ModelDescription> =
            self.models.iter().map(|m| &m.description).collect();
        mix_weights(&described, &self.weights, mix)
    }

    /// Capacity mode: picks the models by `mix` from the next test on.
    pub fn set_mix(&self, mix: Option<&str>) -> Result<(), ModelMixError> {
        let picker = WeightedIndex::new(self.weights_for(mix)?).map_err(ModelMixError::Weights)?;
        *self.picker.write().unwrap_or_else(|e| e.into_inner()) = picker;
        Ok(())
    }
}

impl PlannedModel {
    /// A request that got no response (transport, deadline or server error) as a failure.
    pub(crate) fn no_response(&self, e: ClientError) -> Failure {
        let d = &self.description;
        Failure::client(&d.name, format!("a response from {}", d.label()), &e)
    }

    /// A failed check as a failure naming model, version, output, expected and actual.
    fn failure(&self, response: &InferResponse, f: CheckFailure) -> Failure {
        let d = &self.description;
        let version = match (response.model_version.as_str(), d.version.as_str()) {
            ("", "") => "?",
            ("", asked) => asked,
            (answered, _) => answered,
        };
        Failure::wrong_answer(
            &d.name,
            format!("version {version} output {}: {}", f.output, f.expected),
            f.actual,
        )
    }

    /// Every check on the response to request `i`, as a failure that names model, version,
    /// output, what was expected and what came.
    fn check(
        &self,
        i: usize,
        response: Result<InferResponse, ClientError>,
        tolerance: f64,
    ) -> Result<(), Failure> {
        let d = &self.description;
        let response = response.map_err(|e| self.no_response(e))?;
        let planned = &self.requests[i];
        let fail = |f: CheckFailure| self.failure(&response, f);
        model::check_response(d, planned, &response, tolerance).map_err(fail)?;
        if let Some(firsts) = &self.first_responses {
            let mut first = firsts[i].lock().expect("not poisoned");
            match &*first {
                None => *first = Some(response),
                Some(before) => model::check_consistent(before, &response).map_err(fail)?,
            }
        }
        Ok(())
    }
}

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let Some(plan) = env.settings.infer_plan.clone() else {
        return Outcome::Failed(Failure::new(
            "",
            "the Infer plan built at start-up",
            "none (the scenario ran without its pre-flight)",
        ));
    };
    let pick = plan
        .picker
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .sample(env.rng);
    let planned = &plan.models[pick];
    env.model = planned.description.name.clone();
    if planned.sequence.is_some() {
        // Not a window: the answers a window handed over are waited for first.
        if let Err(failure) = super::answers::drain(&mut env.answers, env.cancel).await {
            return Outcome::Failed(failure);
        }
        return sequence::run(env, planned, plan.tolerance).await;
    }
    let driven = if planned.decoupled.is_some() {
        decoupled::drive(env, &plan, pick).await
    } else {
        let prepared = planned.prepared.iter().cloned().collect();
        let check = move |i: usize, r: Result<InferResponse, ClientError>| {
            plan.models[pick].check(i, r, plan.tolerance)
        };
        load::drive(env, prepared, Arc::new(check)).await
    };
    match driven {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(name: &str, version: &str) -> ModelDescription {
        ModelDescription {
            name: name.into(),
            version: version.into(),
            max_batch_size: 0,
            inputs: vec![],
            outputs: vec![],
            decoupled: false,
            sequence_batching: None,
        }
    }

    #[test]
    fn a_phase_mix_reweights_the_planned_models() {
        let (a, b, b2) = (
            described("a", "1"),
            described("b", "1"),
            described("b", "2"),
        );
        let models = [&a, &b, &b2];
        let default = [1, 3, 3];
        assert_eq!(mix_weights(&models, &default, None).unwrap(), default);
        assert_eq!(
            mix_weights(&models, &default, Some("a:1")).unwrap(),
            [1, 0, 0]
        );
        assert_eq!(
            mix_weights(&models, &default, Some("b:2")).unwrap(),
            [0, 2, 2],
            "no version: every version"
        );
        assert_eq!(
            mix_weights(&models, &default, Some("b@2:5,a:1")).unwrap(),
            [1, 0, 5]
        );
        let e = mix_weights(&models, &default, Some("c:1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("model c is not planned"), "{e}");
        assert!(mix_weights(&models, &default, Some("a:x")).is_err());
    }
}
