//! Infer: any model the server has, driven from its own metadata and config (see
//! [`crate::model`]). At start-up every selected model is described by every server and its
//! requests are built once (random or zero data, or a perf_analyzer input-data file); one test
//! is one load window (as `Load`'s) on one model, picked by the `--model` weights, and every
//! response passes every check in [`model::check_response`] (and, with `--consistency`, must
//! repeat the first response to the same input byte for byte). A decoupled model's window is
//! driven over response streams by [`infer_decoupled`].

use super::{Failure, Outcome, TestEnv};
use super::{infer_decoupled, load};
use crate::client::{ClientError, InferResponse, Prepared, TritonClient};
use crate::model::{
    self, CheckFailure, DataSource, InferOptions, InputDataFile, ModelDescription, PlannedRequest,
};
use rand::SeedableRng;
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::rngs::StdRng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Every selected model with its requests, built once at start-up.
#[derive(Debug)]
pub struct InferPlan {
    pub models: Vec<PlannedModel>,
    picker: WeightedIndex<u32>,
    tolerance: f64,
}

#[derive(Debug)]
pub struct PlannedModel {
    pub description: ModelDescription,
    pub requests: Vec<PlannedRequest>,
    prepared: Vec<Prepared>,
    /// `--consistency`: the first response to each request, which every later one must repeat.
    first_responses: Option<Vec<Mutex<Option<InferResponse>>>>,
    /// A decoupled model's checks of whole response streams.
    decoupled: Option<infer_decoupled::StreamChecks>,
}

/// Describes every selected model on every server (they must agree), checks the flags against
/// the descriptions and builds the requests. Any problem is bad input, found before any load.
pub async fn prepare(
    clients: &[Arc<dyn TritonClient>],
    options: &InferOptions,
) -> Result<InferPlan, String> {
    let first = clients.first().ok_or("no server to describe the models")?;
    let mut descriptions = Vec::new();
    for selection in &options.models {
        let description = model::describe(first.as_ref(), selection).await?;
        for other in &clients[1..] {
            let d = model::describe(other.as_ref(), selection).await?;
            if d != description {
                return Err(format!(
                    "model {}: server {} describes it differently from server {}: {d:?} / {description:?}",
                    selection.label(),
                    other.address(),
                    first.address()
                ));
            }
        }
        if description.sequence_batching {
            return Err(format!(
                "model {}: sequence models (sequence_batching) are not driven by Infer yet",
                selection.label()
            ));
        }
        descriptions.push(description);
    }
    options.check_names(&descriptions)?;
    let weights = options.models.iter().map(|m| m.weight).collect();
    let (descriptions, weights) =
        infer_decoupled::drivable(first.protocol(), descriptions, weights)?;
    let mut files: BTreeMap<std::path::PathBuf, InputDataFile> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut models = Vec::new();
    for description in descriptions {
        let file = match options.source_for(&description.name) {
            DataSource::File(path) => {
                if !files.contains_key(&path) {
                    files.insert(path.clone(), InputDataFile::read(&path)?);
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
            .map_err(|e| format!("model {}: encoding a request: {e}", description.label()))?;
        let first_responses = options
            .consistency
            .then(|| requests.iter().map(|_| Mutex::new(None)).collect());
        let decoupled = description
            .decoupled
            .then(|| infer_decoupled::StreamChecks::new(&requests, options.consistency));
        models.push(PlannedModel {
            description,
            requests,
            prepared,
            first_responses,
            decoupled,
        });
    }
    let picker = WeightedIndex::new(weights).map_err(|e| format!("--model weights: {e}"))?;
    Ok(InferPlan {
        models,
        picker,
        tolerance: options.tolerance,
    })
}

impl PlannedModel {
    /// Every check on the response to request `i`, as a failure that names model, version,
    /// output, what was expected and what came.
    fn check(
        &self,
        i: usize,
        response: Result<InferResponse, ClientError>,
        tolerance: f64,
    ) -> Result<(), Failure> {
        let d = &self.description;
        let response = response.map_err(|e| {
            Failure::new(
                &d.name,
                format!("a response from {}", d.label()),
                e.to_string(),
            )
        })?;
        let planned = &self.requests[i];
        let version = if response.model_version.is_empty() {
            d.version.as_str()
        } else {
            response.model_version.as_str()
        };
        let fail = |f: CheckFailure| {
            let version = if version.is_empty() { "?" } else { version };
            Failure::new(
                &d.name,
                format!("version {version} output {}: {}", f.output, f.expected),
                f.actual,
            )
        };
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

pub async fn run(env: &mut TestEnv<'_>) -> Outcome {
    let Some(plan) = env.settings.infer_plan.clone() else {
        return Outcome::Failed(Failure::new(
            "",
            "the Infer plan built at start-up",
            "none (the scenario ran without its pre-flight)",
        ));
    };
    let planned = &plan.models[plan.picker.sample(env.rng)];
    env.model = planned.description.name.clone();
    if let Some(streams) = &planned.decoupled {
        return match infer_decoupled::drive(env, planned, streams, plan.tolerance).await {
            Ok(()) => Outcome::Passed,
            Err(f) => Outcome::Failed(f),
        };
    }
    let check =
        |i: usize, r: Result<InferResponse, ClientError>| planned.check(i, r, plan.tolerance);
    match load::drive(env, &planned.prepared, &check).await {
        Ok(()) => Outcome::Passed,
        Err(f) => Outcome::Failed(f),
    }
}
