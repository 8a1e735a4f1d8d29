//! Any model, as the server describes it: its metadata and config (read over gRPC or HTTP), the
//! worker's flags that select models and their data (`--model`, `--shape`, `--input-data`,
//! `--batch-size`, with perf_analyzer's syntax and meaning), the requests built from both, and
//! the checks every response of the `Infer` scenario passes. Everything here is a pure function
//! of its inputs, tested without a server; `describe` is the one call that asks the server.

use crate::client::{ClientError, InferRequest, InferResponse, RequestedOutput, TritonClient};
use crate::metadata::{ConfigTensor, ModelConfig, ModelMetadata, SequenceBatching, TensorMetadata};
use crate::tensor::{self, DataType, Tensor, TensorError};
use bytes::Bytes;
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One input or output as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    /// Without the batch dimension; -1 is a dynamic dimension.
    pub dims: Vec<i64>,
    pub optional: bool,
}

/// A model the worker drives: metadata and config merged, as a client must send and will get.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDescription {
    pub name: String,
    /// The version asked for (`NAME@VERSION`); empty: the server's choice.
    pub version: String,
    pub max_batch_size: i64,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub decoupled: bool,
    /// A sequence model's batcher (its control and implicit-state inputs are not among
    /// `inputs`: Triton fills them).
    pub sequence_batching: Option<SequenceBatching>,
}

/// What the server describes of a model that the worker cannot drive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    /// `kind` is `input` or `output`.
    #[error("{kind} {tensor}: unknown datatype {datatype}")]
    UnknownDatatype {
        kind: &'static str,
        tensor: String,
        datatype: String,
    },
    #[error("{kind} {tensor}: the model batches but its shape {shape:?} has no batch dimension")]
    NoBatchDimension {
        kind: &'static str,
        tensor: String,
        shape: Vec<i64>,
    },
    #[error("{kind} {tensor} is a shape tensor, which the worker does not drive yet")]
    ShapeTensor { kind: &'static str, tensor: String },
}

/// Why a selected model cannot be driven as the flags ask: the server cannot describe it, or a
/// flag does not fit it. Bad input, found before any load.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("server {server}: model {model}: not loaded or not ready")]
    NotReady { server: String, model: String },
    /// The server did not answer a `query` about the model (readiness, metadata, config).
    #[error("server {server}: model {model}: {query}: {source}")]
    Unanswered {
        server: String,
        model: String,
        query: &'static str,
        source: ClientError,
    },
    #[error("server {server}: model {model}: {source}")]
    Undrivable {
        server: String,
        model: String,
        source: DescriptionError,
    },
    /// `flag` (`--shape M/IN`, `--input-data M=...`, `--batch-size M=N`) names a model that
    /// was not selected.
    #[error("{flag}: model {model} is not among the --model selection")]
    NotSelected { flag: String, model: String },
    /// `inputs`: the model's inputs, listed.
    #[error("--shape {input}: model {model} has no input {input} (inputs: {inputs})")]
    NoSuchInput {
        input: String,
        model: String,
        inputs: String,
    },
    #[error(
        "--shape {input}: model {model} input {input} has dims {dims:?} (without the batch dimension); {shape:?} does not fit them"
    )]
    ShapeDoesNotFit {
        model: String,
        input: String,
        dims: Vec<i64>,
        shape: Vec<i64>,
    },
    #[error(
        "model {model} input {input} has a dynamic dimension {dims:?}: give its shape with --shape {model}/{input}:D1,D2,... (in a matrix: `shape: {{{input}: [D1, D2, ...]}}` in the model's entry) or in the input data as {{\"content\": ..., \"shape\": ...}}"
    )]
    DynamicDimension {
        model: String,
        input: String,
        dims: Vec<i64>,
    },
    #[error("--batch-size must be at least 1")]
    ZeroBatchSize,
    #[error("--batch-size {batch}: model {model} does not batch (max_batch_size 0)")]
    NotBatching { batch: i64, model: String },
    #[error("--batch-size {batch} is above model {model}'s max_batch_size {max_batch_size}")]
    BatchTooLarge {
        batch: i64,
        model: String,
        max_batch_size: i64,
    },
    #[error(
        "model {model}: a request of batch {batch} with inputs {shapes:?} would be larger than the \
         {MAX_REQUEST_BYTES} bytes a request can carry (give smaller --shape or --batch-size)"
    )]
    RequestTooLarge {
        model: String,
        batch: i64,
        shapes: Vec<String>,
    },
    #[error(transparent)]
    InputData(#[from] InputDataError),
}

impl ModelDescription {
    /// Merges metadata (names, datatypes, client-facing shapes) and config (batching, optional
    /// inputs, scheduling). The config's `dims` are what a client sends; its `reshape` is what the
    /// model sees, so it is not used for requests.
    pub fn new(
        version: &str,
        metadata: &ModelMetadata,
        config: &ModelConfig,
    ) -> Result<Self, DescriptionError> {
        let batching = config.max_batch_size > 0;
        let spec = |t: &TensorMetadata, kind: &'static str, config_list: &[ConfigTensor]| {
            let datatype =
                DataType::parse(&t.datatype).ok_or_else(|| DescriptionError::UnknownDatatype {
                    kind,
                    tensor: t.name.clone(),
                    datatype: t.datatype.clone(),
                })?;
            let dims = if batching {
                match t.shape.split_first() {
                    Some((_, rest)) => rest.to_vec(),
                    None => {
                        return Err(DescriptionError::NoBatchDimension {
                            kind,
                            tensor: t.name.clone(),
                            shape: t.shape.clone(),
                        });
                    }
                }
            } else {
                t.shape.clone()
            };
            let c = config_list.iter().find(|c| c.name == t.name);
            if c.is_some_and(|c| c.is_shape_tensor) {
                return Err(DescriptionError::ShapeTensor {
                    kind,
                    tensor: t.name.clone(),
                });
            }
            Ok(TensorSpec {
                name: t.name.clone(),
                datatype,
                dims,
                optional: c.is_some_and(|c| c.optional),
            })
        };
        Ok(ModelDescription {
            name: metadata.name.clone(),
            version: version.into(),
            max_batch_size: config.max_batch_size,
            inputs: metadata
                .inputs
                .iter()
                .filter(|t| {
                    !config
                        .sequence_batching
                        .as_ref()
                        .is_some_and(|s| s.filled_by_triton(&t.name))
                })
                .map(|t| spec(t, "input", &config.inputs))
                .collect::<Result<_, _>>()?,
            outputs: metadata
                .outputs
                .iter()
                .map(|t| spec(t, "output", &config.outputs))
                .collect::<Result<_, _>>()?,
            decoupled: config.decoupled,
            sequence_batching: config.sequence_batching.clone(),
        })
    }

    /// `name` or `name version V`, as messages name the model.
    pub fn label(&self) -> String {
        if self.version.is_empty() {
            self.name.clone()
        } else {
            format!("{} version {}", self.name, self.version)
        }
    }

    fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|t| t.name == name)
    }

    fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|t| t.name == name)
    }

    fn names(list: &[TensorSpec]) -> String {
        list.iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Reads a model's metadata and config from one server; a missing or unready model says so.
pub async fn describe(
    client: &dyn TritonClient,
    selection: &ModelSelection,
) -> Result<ModelDescription, ModelError> {
    let server = || client.address().to_string();
    let unanswered = |query, source| ModelError::Unanswered {
        server: server(),
        model: selection.label(),
        query,
        source,
    };
    match client
        .model_version_ready(&selection.name, &selection.version)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            return Err(ModelError::NotReady {
                server: server(),
                model: selection.label(),
            });
        }
        Err(e) => return Err(unanswered("readiness", e)),
    }
    let metadata = client
        .model_metadata(&selection.name, &selection.version)
        .await
        .map_err(|e| unanswered("metadata", e))?;
    let config = client
        .model_config(&selection.name, &selection.version)
        .await
        .map_err(|e| unanswered("config", e))?;
    ModelDescription::new(&selection.version, &metadata, &config).map_err(|source| {
        ModelError::Undrivable {
            server: server(),
            model: selection.label(),
            source,
        }
    })
}

pub use stress_common::contract::{DataSource, InputDataArg, ModelSelection, ShapeOverride};

/// What the Infer scenario needs to know beside the models.
#[derive(Debug, Clone, PartialEq)]
pub struct InferOptions {
    pub models: Vec<ModelSelection>,
    pub shapes: Vec<ShapeOverride>,
    pub input_data: Vec<InputDataArg>,
    /// Batch size of every model without its own (`-b N`).
    pub batch_size: u32,
    /// Batch sizes of single models (`-b MODEL=N`).
    pub model_batch_sizes: Vec<(String, u32)>,
    pub string_length: usize,
    /// Largest allowed difference of a float output from its validation data.
    pub tolerance: f64,
    /// A repeated input must give byte-identical outputs.
    pub consistency: bool,
    pub seed: u64,
}

impl Default for InferOptions {
    fn default() -> Self {
        Self {
            models: Vec::new(),
            shapes: Vec::new(),
            input_data: Vec::new(),
            batch_size: 1,
            model_batch_sizes: Vec::new(),
            string_length: DEFAULT_STRING_LENGTH,
            tolerance: 0.0,
            consistency: false,
            seed: 0,
        }
    }
}

/// An output's data holds the elements its shape says, of `datatype`: `size` bytes each, or
/// as many well-formed BYTES elements.
fn check_size(out: &Tensor, datatype: DataType) -> Result<(), CheckFailure> {
    let (name, shape) = (&out.name, &out.shape);
    let Some(count) = element_count(shape) else {
        let expected = format!("a shape of at most {} elements", usize::MAX);
        return Err(CheckFailure::new(name, expected, format!("{shape:?}")));
    };
    let Some(size) = datatype.size() else {
        let elements = tensor::split_bytes(&out.data).map_err(|e| {
            let expected = format!("well-formed BYTES ({count} length-prefixed elements)");
            CheckFailure::new(name, expected, format!("malformed BYTES: {e}"))
        })?;
        if elements.len() != count {
            let expected = format!("{count} BYTES elements (shape {shape:?})");
            return Err(CheckFailure::new(
                name,
                expected,
                format!("{} elements", elements.len()),
            ));
        }
        return Ok(());
    };
    let needed = count.checked_mul(size);
    if needed != Some(out.data.len()) {
        let bytes = needed.map_or_else(|| format!("more than {}", usize::MAX), |n| n.to_string());
        let expected = format!("{bytes} bytes ({count} {datatype} elements of shape {shape:?})");
        return Err(CheckFailure::new(
            name,
            expected,
            format!("{} bytes", out.data.len()),
        ));
    }
    Ok(())
}

/// perf_analyzer's default length of random BYTES elements.
pub const DEFAULT_STRING_LENGTH: usize = 128;

impl InferOptions {
    /// The data source for a model: its own `MODEL=...`, else the general one, else random.
    pub fn source_for(&self, model: &str) -> DataSource {
        self.input_data
            .iter()
            .find(|d| d.model.as_deref() == Some(model))
            .or_else(|| self.input_data.iter().find(|d| d.model.is_none()))
            .map_or(DataSource::Random, |d| d.source.clone())
    }

    /// The batch size of a model's requests: its own `-b MODEL=N` (the last), else `-b N`.
    pub fn batch_size_for(&self, model: &str) -> u32 {
        self.model_batch_sizes
            .iter()
            .rev()
            .find(|(m, _)| m == model)
            .map_or(self.batch_size, |(_, b)| *b)
    }

    /// Flags that name a model or input the selection does not have (checked before any load).
    pub fn check_names(&self, models: &[ModelDescription]) -> Result<(), ModelError> {
        let not_selected = |flag: String, model: &str| ModelError::NotSelected {
            flag,
            model: model.into(),
        };
        for shape in &self.shapes {
            let targets: Vec<&ModelDescription> = match &shape.model {
                Some(m) => {
                    let found: Vec<_> = models.iter().filter(|d| &d.name == m).collect();
                    if found.is_empty() {
                        return Err(not_selected(format!("--shape {m}/{}", shape.input), m));
                    }
                    found
                }
                None => models.iter().collect(),
            };
            if !targets.iter().any(|d| d.input(&shape.input).is_some()) {
                let d = targets[0];
                return Err(ModelError::NoSuchInput {
                    input: shape.input.clone(),
                    model: d.name.clone(),
                    inputs: ModelDescription::names(&d.inputs),
                });
            }
        }
        for data in &self.input_data {
            if let Some(m) = &data.model
                && !models.iter().any(|d| &d.name == m)
            {
                return Err(not_selected(format!("--input-data {m}=..."), m));
            }
        }
        for (m, b) in &self.model_batch_sizes {
            if !models.iter().any(|d| &d.name == m) {
                return Err(not_selected(format!("--batch-size {m}={b}"), m));
            }
        }
        Ok(())
    }
}

/// One request of a model, ready to send, with what its response must hold.
#[derive(Debug, Clone)]
pub struct PlannedRequest {
    pub request: InferRequest,
    /// The batch dimension of this request (1 for a model that does not batch).
    pub batch: i64,
    /// Expected output values (from `validation_data`), by output name.
    pub expected: BTreeMap<String, ExpectedOutput>,
}

/// An output's expected values: its raw bytes (BYTES in the raw layout) and, when the data gave
/// one, its shape without the batch dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedOutput {
    pub data: Bytes,
    pub shape: Option<Vec<i64>>,
}

/// How many distinct random requests a model cycles through.
const RANDOM_VARIANTS: usize = 16;

/// The fully known shape (without the batch dimension) of an input: its dims with `-1`s taken
/// from `--shape`; an unfilled `-1` is an error naming model and input.
pub fn input_shape(
    model: &ModelDescription,
    input: &TensorSpec,
    shapes: &[ShapeOverride],
) -> Result<Vec<i64>, ModelError> {
    let chosen = shapes
        .iter()
        .find(|s| s.model.as_deref() == Some(&model.name) && s.input == input.name)
        .or_else(|| {
            shapes
                .iter()
                .find(|s| s.model.is_none() && s.input == input.name)
        });
    match chosen {
        Some(s) => {
            let fits = s.dims.len() == input.dims.len()
                && s.dims
                    .iter()
                    .zip(&input.dims)
                    .all(|(o, d)| *d < 0 || o == d);
            if !fits {
                // `s.input` is `input.name`: that is how it was chosen.
                return Err(ModelError::ShapeDoesNotFit {
                    model: model.name.clone(),
                    input: input.name.clone(),
                    dims: input.dims.clone(),
                    shape: s.dims.clone(),
                });
            }
            Ok(s.dims.clone())
        }
        None if input.dims.iter().any(|d| *d < 0) => Err(ModelError::DynamicDimension {
            model: model.name.clone(),
            input: input.name.clone(),
            dims: input.dims.clone(),
        }),
        None => Ok(input.dims.clone()),
    }
}

/// The elements a shape holds (a negative dimension holds none); None past what memory can
/// count (a shape from a faulty server or a hostile file or flag).
fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, d| {
        n.checked_mul(usize::try_from((*d).max(0)).ok()?)
    })
}

/// The batch a model's requests carry: `--batch-size` within `max_batch_size`.
pub fn batch_for(model: &ModelDescription, batch_size: u32) -> Result<i64, ModelError> {
    let b = i64::from(batch_size);
    if b < 1 {
        return Err(ModelError::ZeroBatchSize);
    }
    if model.max_batch_size == 0 && b > 1 {
        return Err(ModelError::NotBatching {
            batch: b,
            model: model.name.clone(),
        });
    }
    if model.max_batch_size > 0 && b > model.max_batch_size {
        return Err(ModelError::BatchTooLarge {
            batch: b,
            model: model.name.clone(),
            max_batch_size: model.max_batch_size,
        });
    }
    Ok(b)
}

fn requested_outputs(model: &ModelDescription) -> Vec<RequestedOutput> {
    model
        .outputs
        .iter()
        .map(|o| RequestedOutput {
            name: o.name.clone(),
            class_count: None,
            datatype: Some(o.datatype),
        })
        .collect()
}

fn full_shape(model: &ModelDescription, batch: i64, shape: &[i64]) -> Vec<i64> {
    if model.max_batch_size > 0 {
        std::iter::once(batch)
            .chain(shape.iter().copied())
            .collect()
    } else {
        shape.to_vec()
    }
}

/// Random or zero values for `count` elements of `datatype`.
fn generated(
    datatype: DataType,
    count: usize,
    zero: bool,
    string_length: usize,
    rng: &mut StdRng,
) -> Bytes {
    let mut out = Vec::new();
    match datatype.size() {
        None => {
            for _ in 0..count {
                let element: Vec<u8> = if zero {
                    vec![b'0'; string_length]
                } else {
                    (0..string_length)
                        .map(|_| rng.sample(rand::distr::Alphanumeric))
                        .collect()
                };
                tensor::push_bytes_element(&mut out, &element);
            }
        }
        Some(size) if zero => out.resize(count * size, 0),
        Some(size) => {
            for _ in 0..count {
                match datatype {
                    DataType::Bool => out.push(u8::from(rng.random_bool(0.5))),
                    // Floats in [0, 1): finite, so any model's arithmetic stays finite too.
                    DataType::Fp16 => out
                        .extend_from_slice(&tensor::f32_to_f16(rng.random::<f32>()).to_le_bytes()),
                    DataType::Bf16 => out
                        .extend_from_slice(&tensor::f32_to_bf16(rng.random::<f32>()).to_le_bytes()),
                    DataType::Fp32 => out.extend_from_slice(&rng.random::<f32>().to_le_bytes()),
                    DataType::Fp64 => out.extend_from_slice(&rng.random::<f64>().to_le_bytes()),
                    _ => {
                        let bytes: [u8; 8] = rng.random();
                        out.extend_from_slice(&bytes[..size]);
                    }
                }
            }
        }
    }
    out.into()
}

/// The requests a model cycles through: random (16 variants) or zero data for every required
/// input, or one request per entry of a perf_analyzer input-data file.
pub fn plan_requests(
    model: &ModelDescription,
    options: &InferOptions,
    data: Option<&InputDataFile>,
    rng: &mut StdRng,
) -> Result<Vec<PlannedRequest>, ModelError> {
    let batch = batch_for(model, options.batch_size_for(&model.name))?;
    let outputs = requested_outputs(model);
    let Some(file) = data else {
        return generated_requests(model, options, batch, &outputs, rng);
    };
    let entries = file.entries(model, &options.shapes)?;
    if entries.is_empty() {
        return Err(InputDataError::NoEntries {
            path: file.path.clone(),
        }
        .into());
    }
    // Request k takes entries k, k+1, ..., k+b-1 (wrapping) as its batch elements: n distinct
    // requests, every entry in every position.
    let n = entries.len();
    (0..n)
        .map(|k| {
            let members: Vec<&Entry> = (0..batch as usize).map(|i| &entries[(k + i) % n]).collect();
            let inputs = batched_inputs(model, file, &members, batch)?;
            let expected = batched_expected(file, &members)?;
            Ok(PlannedRequest {
                request: new_request(model, &outputs, inputs),
                batch,
                expected,
            })
        })
        .collect()
}

/// A request of the model for `inputs`, asking for every output.
fn new_request(
    model: &ModelDescription,
    outputs: &[RequestedOutput],
    inputs: Vec<Tensor>,
) -> InferRequest {
    let mut r = InferRequest::new(&model.name, inputs);
    r.version = model.version.clone();
    r.outputs = outputs.to_vec();
    r
}

/// Random (16 variants) or zero data for every required input: [`plan_requests`] without an
/// input-data file.
fn generated_requests(
    model: &ModelDescription,
    options: &InferOptions,
    batch: i64,
    outputs: &[RequestedOutput],
    rng: &mut StdRng,
) -> Result<Vec<PlannedRequest>, ModelError> {
    let zero = options.source_for(&model.name) == DataSource::Zero;
    let shapes: Vec<(&TensorSpec, Vec<i64>)> = model
        .inputs
        .iter()
        .filter(|i| !i.optional)
        .map(|i| Ok((i, input_shape(model, i, &options.shapes)?)))
        .collect::<Result<_, ModelError>>()?;
    let (counts, bytes) = request_elements(model, &shapes, batch, options.string_length)?;
    let variants = if zero { 1 } else { random_variants(bytes) };
    Ok((0..variants)
        .map(|_| {
            let inputs = shapes
                .iter()
                .zip(&counts)
                .map(|((spec, shape), &count)| Tensor {
                    name: spec.name.clone(),
                    datatype: spec.datatype,
                    shape: full_shape(model, batch, shape),
                    data: generated(spec.datatype, count, zero, options.string_length, rng),
                })
                .collect();
            PlannedRequest {
                request: new_request(model, outputs, inputs),
                batch,
                expected: BTreeMap::new(),
            }
        })
        .collect())
}

/// The most bytes of one request's generated inputs: gRPC's largest message (2 GiB).
const MAX_REQUEST_BYTES: usize = i32::MAX as usize;

/// The most bytes of a model's random variants together (held in memory for the whole run),
/// unless one request is larger.
const VARIANTS_BYTES: usize = 256 << 20;

/// How many random variants of a request of `bytes` a model cycles through: fewer for large
/// requests, since all of them are held in memory.
fn random_variants(bytes: usize) -> usize {
    RANDOM_VARIANTS.min(VARIANTS_BYTES / bytes.max(1)).max(1)
}

/// The elements of each input (`shapes`) of a request of `batch`, and its bytes (BYTES
/// elements of `string_length`); refused when the request would be larger than
/// [`MAX_REQUEST_BYTES`].
fn request_elements(
    model: &ModelDescription,
    shapes: &[(&TensorSpec, Vec<i64>)],
    batch: i64,
    string_length: usize,
) -> Result<(Vec<usize>, usize), ModelError> {
    // Each input's (elements, bytes); None past what memory can count.
    let sizes: Option<Vec<(usize, usize)>> = shapes
        .iter()
        .map(|(spec, shape)| {
            let count = element_count(shape)?.checked_mul(batch as usize)?;
            let size = spec.datatype.size().unwrap_or(4 + string_length);
            Some((count, count.checked_mul(size)?))
        })
        .collect();
    let bytes = sizes
        .as_deref()
        .and_then(|s| s.iter().try_fold(0usize, |sum, (_, b)| sum.checked_add(*b)));
    match (sizes, bytes) {
        (Some(sizes), Some(b)) if b <= MAX_REQUEST_BYTES => {
            Ok((sizes.into_iter().map(|(count, _)| count).collect(), b))
        }
        _ => Err(ModelError::RequestTooLarge {
            model: model.name.clone(),
            batch,
            shapes: shapes
                .iter()
                .map(|(s, shape)| format!("{} {shape:?}", s.name))
                .collect(),
        }),
    }
}

/// The inputs of one request from its batch's entries (`members`, the first giving the inputs
/// and shapes), in the model's order as random requests have them.
fn batched_inputs(
    model: &ModelDescription,
    file: &InputDataFile,
    members: &[&Entry],
    batch: i64,
) -> Result<Vec<Tensor>, ModelError> {
    let first = members[0];
    let mut inputs = Vec::new();
    for spec in &model.inputs {
        let name = &spec.name;
        let Some(value) = first.inputs.get(name) else {
            continue;
        };
        let mut data = Vec::new();
        for m in members {
            let Some(v) = m.inputs.get(name) else {
                return Err(InputDataError::BatchedInputMissing {
                    path: file.path.clone(),
                    index: m.index,
                    first: first.index,
                    input: name.clone(),
                }
                .into());
            };
            if v.shape != value.shape {
                return Err(InputDataError::BatchedShapesDiffer {
                    path: file.path.clone(),
                    input: name.clone(),
                    index: m.index,
                    shape: v.shape.clone(),
                    first: first.index,
                    first_shape: value.shape.clone(),
                }
                .into());
            }
            data.extend_from_slice(&v.data);
        }
        inputs.push(Tensor {
            name: name.clone(),
            datatype: spec.datatype,
            shape: full_shape(model, batch, &value.shape),
            data: data.into(),
        });
    }
    Ok(inputs)
}

/// The outputs expected of one request: its batch's entries' validation data, joined.
fn batched_expected(
    file: &InputDataFile,
    members: &[&Entry],
) -> Result<BTreeMap<String, ExpectedOutput>, ModelError> {
    let first = members[0];
    let mut expected = BTreeMap::new();
    let Some(validation) = &first.validation else {
        return Ok(expected);
    };
    for (name, value) in validation {
        let mut data = Vec::new();
        for m in members {
            let Some(v) = m.validation.as_ref().and_then(|v| v.get(name)) else {
                return Err(InputDataError::BatchedOutputMissing {
                    path: file.path.clone(),
                    index: m.index,
                    first: first.index,
                    output: name.clone(),
                }
                .into());
            };
            data.extend_from_slice(&v.data);
        }
        expected.insert(
            name.clone(),
            ExpectedOutput {
                data: data.into(),
                shape: value.explicit_shape.then(|| value.shape.clone()),
            },
        );
    }
    Ok(expected)
}

/// What is wrong with a perf_analyzer input-data file (`--input-data`); each names the file.
#[derive(Debug, thiserror::Error)]
pub enum InputDataError {
    #[error("--input-data {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not JSON: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: expected an object with \"data\"", path.display())]
    NotAnObject { path: PathBuf },
    #[error(
        "{}: unknown key {key:?} (perf_analyzer's format has \"data\" and \"validation_data\")",
        path.display()
    )]
    UnknownKey { path: PathBuf, key: String },
    #[error("{}: \"{key}\" is not a list", path.display())]
    NotAList { path: PathBuf, key: &'static str },
    #[error("{}: no \"data\"", path.display())]
    NoData { path: PathBuf },
    #[error(
        "{}: \"validation_data\" has {validation} entries but \"data\" has {data}; they pair by index",
        path.display()
    )]
    UnpairedValidation {
        path: PathBuf,
        validation: usize,
        data: usize,
    },
    #[error("{}: \"data\" has no entries", path.display())]
    NoEntries { path: PathBuf },
    /// Entries batched into one request must give the same inputs ...
    #[error(
        "{}: data[{index}] has no {input} but data[{first}] has it; entries batched together must give the same inputs",
        path.display()
    )]
    BatchedInputMissing {
        path: PathBuf,
        index: usize,
        first: usize,
        input: String,
    },
    /// ... of the same shapes ...
    #[error(
        "{}: data[{index}].{input} has shape {shape:?} but data[{first}].{input} {first_shape:?}; entries batched together must agree",
        path.display()
    )]
    BatchedShapesDiffer {
        path: PathBuf,
        input: String,
        index: usize,
        shape: Vec<i64>,
        first: usize,
        first_shape: Vec<i64>,
    },
    /// ... and validate the same outputs.
    #[error(
        "{}: validation_data[{index}] has no {output} but validation_data[{first}] has it",
        path.display()
    )]
    BatchedOutputMissing {
        path: PathBuf,
        index: usize,
        first: usize,
        output: String,
    },
    /// `data[index]` or `validation_data[index]` is not an object of tensor values.
    #[error("{}: {section}[{index}] is not an object", path.display())]
    EntryNotAnObject {
        path: PathBuf,
        section: Section,
        index: usize,
    },
    /// An entry names an input (in `data`) or output (in `validation_data`) the model lacks;
    /// `known`: the model's inputs or outputs, listed.
    #[error(
        "{field}: model {model} has no {kind} {name} ({kind}s: {known})",
        kind = field.kind(),
        name = field.name
    )]
    NoSuchTensor {
        field: Box<InputField>,
        model: String,
        known: String,
    },
    #[error(
        "{}: data[{index}] has no value for model {model}'s required input {input}",
        path.display()
    )]
    MissingInput {
        path: PathBuf,
        index: usize,
        model: String,
        input: String,
    },
    /// An input value without its own shape takes the model's, and that has an unfilled `-1`
    /// or a `--shape` that does not fit it.
    #[error("{field}: {source}")]
    InputShape {
        field: Box<InputField>,
        source: Box<ModelError>,
    },
    /// An output's validation value without its own shape, and the output's dims have a `-1`.
    #[error(
        "{field}: model {model} output {output} has a dynamic dimension {dims:?}: give its validation data as {{\"content\": [...], \"shape\": [...]}}",
        output = field.name
    )]
    DynamicOutput {
        field: Box<InputField>,
        model: String,
        dims: Vec<i64>,
    },
    /// A value that is neither a list, `{"content", "shape"}` nor `{"b64"}`.
    #[error(
        "{field}: expected a list, {{\"content\": [...], \"shape\": [...]}} or {{\"b64\": \"...\"}}"
    )]
    NotAValue { field: Box<InputField> },
    #[error("{field}.b64: not a string")]
    B64NotAString { field: Box<InputField> },
    #[error("{field}.b64: {source}")]
    NotBase64 {
        field: Box<InputField>,
        source: base64::DecodeError,
    },
    #[error("{field}.content: not a list")]
    ContentNotAList { field: Box<InputField> },
    /// `value`: the `"shape"` given.
    #[error("{field}.shape: {value} is not a list of whole numbers >= 0")]
    NotAShape {
        field: Box<InputField>,
        value: Value,
    },
    /// The value's shape (without the batch dimension) against the tensor's dims (`-1`: any).
    #[error(
        "{field}: shape {shape:?} does not fit model {model} {kind} {name} dims {dims:?} (without the batch dimension)",
        kind = field.kind(),
        name = field.name
    )]
    ShapeDoesNotFit {
        field: Box<InputField>,
        shape: Vec<i64>,
        model: String,
        dims: Vec<i64>,
    },
    /// A shape with more elements (or bytes) than memory can count.
    #[error("{field}: shape {shape:?} holds more than memory can")]
    ShapeTooLarge {
        field: Box<InputField>,
        shape: Vec<i64>,
    },
    /// Raw (`b64`) data of a fixed-size datatype: `len` bytes where the shape needs `needed`.
    #[error("{field}.b64: {len} bytes, but shape {shape:?} of {datatype} needs {needed}")]
    RawSize {
        field: Box<InputField>,
        len: usize,
        shape: Vec<i64>,
        datatype: DataType,
        needed: usize,
    },
    /// Raw (`b64`) data of a BYTES tensor that is not length-prefixed elements.
    #[error("{field}.b64: malformed BYTES: {source}")]
    MalformedBytes {
        field: Box<InputField>,
        source: TensorError,
    },
    /// Raw (`b64`) BYTES data with `count` elements where the shape needs `needed`.
    #[error("{field}.b64: {count} BYTES elements, but shape {shape:?} needs {needed}")]
    BytesCount {
        field: Box<InputField>,
        count: usize,
        shape: Vec<i64>,
        needed: usize,
    },
    /// A list (nested lists flattened) with `count` values where the shape needs `needed`.
    #[error("{field}: {count} values, but shape {shape:?} needs {needed}")]
    ValueCount {
        field: Box<InputField>,
        count: usize,
        shape: Vec<i64>,
        needed: usize,
    },
    /// `element`: the index in the flattened list.
    #[error("{field}[{element}]: {value} is not a string (the tensor is BYTES)")]
    NotAString {
        field: Box<InputField>,
        element: usize,
        value: Value,
    },
    /// perf_analyzer wants a floating-point tensor's values written as floats.
    #[error(
        "{field}[{element}]: {value} is not a float (write 1.0, not 1, as perf_analyzer requires)"
    )]
    NotAFloat {
        field: Box<InputField>,
        element: usize,
        value: Value,
    },
    /// Out of the datatype's range, or of another JSON type.
    #[error("{field}[{element}]: {value} is not a {datatype} value")]
    NotOfDatatype {
        field: Box<InputField>,
        element: usize,
        value: Value,
        datatype: DataType,
    },
}

/// A list of an input-data file: `data` (inputs' values) or `validation_data` (outputs').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Data,
    ValidationData,
}

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Section::Data => "data",
            Section::ValidationData => "validation_data",
        })
    }
}

/// One value of an input-data file: `PATH: data[INDEX].NAME` (an input's) or
/// `PATH: validation_data[INDEX].NAME` (an output's), as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputField {
    pub path: PathBuf,
    pub section: Section,
    pub index: usize,
    /// The input's or output's name.
    pub name: String,
}

impl InputField {
    /// "input" or "output".
    pub fn kind(&self) -> &'static str {
        match self.section {
            Section::Data => "input",
            Section::ValidationData => "output",
        }
    }
}

impl std::fmt::Display for InputField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}[{}].{}",
            self.path.display(),
            self.section,
            self.index,
            self.name
        )
    }
}

/// A perf_analyzer `--input-data` file, parsed as JSON and not yet matched to a model.
#[derive(Debug, Clone)]
pub struct InputDataFile {
    pub path: PathBuf,
    /// How many entries each stream has (`"data": [[...], [...]]`: one stream per inner list;
    /// a flat list is one stream). A sequence model's sequence is one stream.
    pub streams: Vec<usize>,
    data: Vec<Value>,
    validation: Option<Vec<Value>>,
}

/// One entry of the file, matched to a model: tensor values without the batch dimension.
#[derive(Debug, Clone)]
struct Entry {
    index: usize,
    inputs: BTreeMap<String, TensorValue>,
    validation: Option<BTreeMap<String, TensorValue>>,
}

#[derive(Debug, Clone)]
struct TensorValue {
    shape: Vec<i64>,
    /// The shape came with the value (`{"content", "shape"}`), not from the model.
    explicit_shape: bool,
    data: Vec<u8>,
}

impl InputDataFile {
    pub fn read(path: &Path) -> Result<Self, InputDataError> {
        let text = std::fs::read_to_string(path).map_err(|source| InputDataError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, InputDataError> {
        let v: Value = serde_json::from_str(text).map_err(|source| InputDataError::NotJson {
            path: path.into(),
            source,
        })?;
        let object = v
            .as_object()
            .ok_or_else(|| InputDataError::NotAnObject { path: path.into() })?;
        for key in object.keys() {
            if key != "data" && key != "validation_data" {
                return Err(InputDataError::UnknownKey {
                    path: path.into(),
                    key: key.clone(),
                });
            }
        }
        // Several streams ([[...], [...]]) are for sequences; other models take them in order.
        let flatten = |key: &'static str| -> Result<Option<Vec<Value>>, InputDataError> {
            let Some(list) = v.get(key) else {
                return Ok(None);
            };
            let list = list.as_array().ok_or_else(|| InputDataError::NotAList {
                path: path.into(),
                key,
            })?;
            if list.iter().all(Value::is_array) && !list.is_empty() {
                Ok(Some(
                    list.iter()
                        .flat_map(|s| s.as_array().expect("checked").iter().cloned())
                        .collect(),
                ))
            } else {
                Ok(Some(list.clone()))
            }
        };
        let data = flatten("data")?.ok_or_else(|| InputDataError::NoData { path: path.into() })?;
        let streams = match v["data"].as_array() {
            Some(list) if !list.is_empty() && list.iter().all(Value::is_array) => list
                .iter()
                .map(|s| s.as_array().expect("checked").len())
                .collect(),
            _ => vec![data.len()],
        };
        let validation = flatten("validation_data")?;
        if let Some(val) = &validation
            && val.len() != data.len()
        {
            return Err(InputDataError::UnpairedValidation {
                path: path.into(),
                validation: val.len(),
                data: data.len(),
            });
        }
        Ok(Self {
            path: path.into(),
            streams,
            data,
            validation,
        })
    }

    /// The entries as tensors of `model`, every name, shape and datatype checked against it.
    fn entries(
        &self,
        model: &ModelDescription,
        shapes: &[ShapeOverride],
    ) -> Result<Vec<Entry>, InputDataError> {
        let field = |section, index, name: &str| InputField {
            path: self.path.clone(),
            section,
            index,
            name: name.into(),
        };
        let not_an_object = |section, index| InputDataError::EntryNotAnObject {
            path: self.path.clone(),
            section,
            index,
        };
        let mut entries = Vec::new();
        for (index, entry) in self.data.iter().enumerate() {
            let object = entry
                .as_object()
                .ok_or_else(|| not_an_object(Section::Data, index))?;
            let mut inputs = BTreeMap::new();
            for (name, value) in object {
                let field = field(Section::Data, index, name);
                let Some(spec) = model.input(name) else {
                    return Err(InputDataError::NoSuchTensor {
                        field: Box::new(field),
                        model: model.name.clone(),
                        known: ModelDescription::names(&model.inputs),
                    });
                };
                inputs.insert(
                    name.clone(),
                    tensor_value(&field, model, spec, value, shapes)?,
                );
            }
            for spec in &model.inputs {
                if !spec.optional && !inputs.contains_key(&spec.name) {
                    return Err(InputDataError::MissingInput {
                        path: self.path.clone(),
                        index,
                        model: model.name.clone(),
                        input: spec.name.clone(),
                    });
                }
            }
            let validation = match &self.validation {
                None => None,
                Some(list) => {
                    let object = list[index]
                        .as_object()
                        .ok_or_else(|| not_an_object(Section::ValidationData, index))?;
                    let mut outputs = BTreeMap::new();
                    for (name, value) in object {
                        let field = field(Section::ValidationData, index, name);
                        let Some(spec) = model.output(name) else {
                            return Err(InputDataError::NoSuchTensor {
                                field: Box::new(field),
                                model: model.name.clone(),
                                known: ModelDescription::names(&model.outputs),
                            });
                        };
                        outputs
                            .insert(name.clone(), tensor_value(&field, model, spec, value, &[])?);
                    }
                    Some(outputs)
                }
            };
            entries.push(Entry {
                index,
                inputs,
                validation,
            });
        }
        Ok(entries)
    }
}

/// One value of the file: a flat list (the shape is the model's, `-1`s from `--shape`),
/// `{"content": [...], "shape": [...]}`, or `{"b64": "..."}` (raw bytes, shape as for a list).
/// `field` says where it is, and whether `spec` is an input (`data`) or an output
/// (`validation_data`).
fn tensor_value(
    field: &InputField,
    model: &ModelDescription,
    spec: &TensorSpec,
    value: &Value,
    shapes: &[ShapeOverride],
) -> Result<TensorValue, InputDataError> {
    let at = || Box::new(field.clone());
    let (content, shape, explicit_shape) = value_content(field, model, spec, value, shapes)?;
    let fits = shape.len() == spec.dims.len()
        && shape.iter().zip(&spec.dims).all(|(s, d)| *d < 0 || s == d);
    if !fits {
        return Err(InputDataError::ShapeDoesNotFit {
            field: at(),
            shape,
            model: model.name.clone(),
            dims: spec.dims.clone(),
        });
    }
    let data = match content {
        Content::Raw(raw) => raw_data(field, spec, raw, &shape)?,
        Content::List(list) => list_data(field, spec, list, &shape)?,
    };
    Ok(TensorValue {
        shape,
        explicit_shape,
        data,
    })
}

/// The shape of a value that gives none: an input's from the model and `--shape`, an output's
/// from the model (which must not leave it open).
fn model_shape(
    field: &InputField,
    model: &ModelDescription,
    spec: &TensorSpec,
    shapes: &[ShapeOverride],
) -> Result<Vec<i64>, InputDataError> {
    let at = || Box::new(field.clone());
    match field.section {
        Section::Data => {
            input_shape(model, spec, shapes).map_err(|source| InputDataError::InputShape {
                field: at(),
                source: Box::new(source),
            })
        }
        Section::ValidationData if spec.dims.iter().any(|d| *d < 0) => {
            Err(InputDataError::DynamicOutput {
                field: at(),
                model: model.name.clone(),
                dims: spec.dims.clone(),
            })
        }
        Section::ValidationData => Ok(spec.dims.clone()),
    }
}

/// A value's content, its shape, and whether the shape came with it.
fn value_content<'a>(
    field: &InputField,
    model: &ModelDescription,
    spec: &TensorSpec,
    value: &'a Value,
    shapes: &[ShapeOverride],
) -> Result<(Content<'a>, Vec<i64>, bool), InputDataError> {
    let at = || Box::new(field.clone());
    let model_shape = || model_shape(field, model, spec, shapes);
    Ok(match value {
        Value::Array(list) => (Content::List(list), model_shape()?, false),
        Value::Object(o) if o.contains_key("b64") => {
            let text = o["b64"]
                .as_str()
                .ok_or_else(|| InputDataError::B64NotAString { field: at() })?;
            let raw = base64::Engine::decode(&BASE64, text).map_err(|source| {
                InputDataError::NotBase64 {
                    field: at(),
                    source,
                }
            })?;
            let shape = match o.get("shape") {
                Some(s) => shape_of(field, s)?,
                None => model_shape()?,
            };
            (Content::Raw(raw), shape, o.contains_key("shape"))
        }
        Value::Object(o) if o.contains_key("content") => {
            let list = o["content"]
                .as_array()
                .ok_or_else(|| InputDataError::ContentNotAList { field: at() })?;
            let shape = match o.get("shape") {
                Some(s) => shape_of(field, s)?,
                None => model_shape()?,
            };
            (Content::List(list), shape, o.contains_key("shape"))
        }
        _ => return Err(InputDataError::NotAValue { field: at() }),
    })
}

/// A `b64` value's bytes, checked to hold the elements of `shape`.
fn raw_data(
    field: &InputField,
    spec: &TensorSpec,
    raw: Vec<u8>,
    shape: &[i64],
) -> Result<Vec<u8>, InputDataError> {
    let at = || Box::new(field.clone());
    let too_large = || InputDataError::ShapeTooLarge {
        field: at(),
        shape: shape.to_vec(),
    };
    let count = element_count(shape).ok_or_else(too_large)?;
    if let Some(size) = spec.datatype.size() {
        let needed = count.checked_mul(size).ok_or_else(too_large)?;
        if raw.len() != needed {
            return Err(InputDataError::RawSize {
                field: at(),
                len: raw.len(),
                shape: shape.to_vec(),
                datatype: spec.datatype,
                needed,
            });
        }
    }
    if spec.datatype == DataType::Bytes {
        let n = tensor::split_bytes(&raw)
            .map_err(|source| InputDataError::MalformedBytes {
                field: at(),
                source,
            })?
            .len();
        if n != count {
            return Err(InputDataError::BytesCount {
                field: at(),
                count: n,
                shape: shape.to_vec(),
                needed: count,
            });
        }
    }
    Ok(raw)
}

/// A list value's elements encoded as the tensor's datatype, checked to be those of `shape`.
fn list_data(
    field: &InputField,
    spec: &TensorSpec,
    list: &[Value],
    shape: &[i64],
) -> Result<Vec<u8>, InputDataError> {
    let at = || Box::new(field.clone());
    let count = element_count(shape).ok_or_else(|| InputDataError::ShapeTooLarge {
        field: at(),
        shape: shape.to_vec(),
    })?;
    // perf_analyzer accepts nested lists for content; flatten them.
    let mut flat = Vec::new();
    flatten_json(list, &mut flat);
    if flat.len() != count {
        return Err(InputDataError::ValueCount {
            field: at(),
            count: flat.len(),
            shape: shape.to_vec(),
            needed: count,
        });
    }
    let mut out = Vec::new();
    for (i, v) in flat.iter().enumerate() {
        if spec.datatype == DataType::Bytes {
            let s = v.as_str().ok_or_else(|| InputDataError::NotAString {
                field: at(),
                element: i,
                value: (*v).clone(),
            })?;
            tensor::push_bytes_element(&mut out, s.as_bytes());
        } else {
            // perf_analyzer wants floats written as floats for FP types (1.0, not 1).
            if spec.datatype.is_float() && !v.is_f64() {
                return Err(InputDataError::NotAFloat {
                    field: at(),
                    element: i,
                    value: (*v).clone(),
                });
            }
            tensor::encode_json_scalar(spec.datatype, v, &mut out).ok_or_else(|| {
                InputDataError::NotOfDatatype {
                    field: at(),
                    element: i,
                    value: (*v).clone(),
                    datatype: spec.datatype,
                }
            })?;
        }
    }
    Ok(out)
}

enum Content<'a> {
    List(&'a Vec<Value>),
    Raw(Vec<u8>),
}

fn flatten_json<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
    for v in list {
        match v {
            Value::Array(inner) => flatten_json(inner, out),
            other => out.push(other),
        }
    }
}

/// A `"shape"` given with a value: whole numbers >= 0.
fn shape_of(field: &InputField, v: &Value) -> Result<Vec<i64>, InputDataError> {
    v.as_array()
        .and_then(|a| {
            a.iter()
                .map(|d| d.as_i64().filter(|d| *d >= 0))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| InputDataError::NotAShape {
            field: Box::new(field.clone()),
            value: v.clone(),
        })
}

/// Standard base64, padded or not, as perf_analyzer's `b64` values are written.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A check that failed: which output, what was expected and what came.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckFailure {
    pub output: String,
    pub expected: String,
    pub actual: String,
}

impl CheckFailure {
    fn new(output: &str, expected: impl Into<String>, actual: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            expected: expected.into(),
            actual: actual.into(),
        }
    }
}

/// Every check on one response: each requested output present and declared, datatype and shape
/// as the model declares (the batch dimension = the request's batch, `-1` free), raw size =
/// elements × datatype size, BYTES well-formed with as many elements as the shape says, and the
/// validation data (floats within `tolerance`).
pub fn check_response(
    model: &ModelDescription,
    planned: &PlannedRequest,
    response: &InferResponse,
    tolerance: f64,
) -> Result<(), CheckFailure> {
    let mut seen = BTreeSet::new();
    for out in &response.outputs {
        let Some(spec) = model.output(&out.name) else {
            return Err(CheckFailure::new(
                &out.name,
                format!(
                    "only declared outputs ({})",
                    ModelDescription::names(&model.outputs)
                ),
                format!(
                    "undeclared output {} {} {:?}",
                    out.name, out.datatype, out.shape
                ),
            ));
        };
        if !seen.insert(out.name.as_str()) {
            return Err(CheckFailure::new(&out.name, "the output once", "it twice"));
        }
        if out.datatype != spec.datatype {
            return Err(CheckFailure::new(
                &out.name,
                format!("datatype {}", spec.datatype),
                format!("{}", out.datatype),
            ));
        }
        let want_shape = full_shape(model, planned.batch, &spec.dims);
        let shape_ok = out.shape.len() == want_shape.len()
            && out
                .shape
                .iter()
                .zip(&want_shape)
                .all(|(got, want)| *got >= 0 && (*want < 0 || got == want));
        if !shape_ok {
            return Err(CheckFailure::new(
                &out.name,
                format!("shape {want_shape:?} (-1: any)"),
                format!("{:?}", out.shape),
            ));
        }
        check_size(out, spec.datatype)?;
        if let Some(expected) = planned.expected.get(&out.name) {
            compare_values(spec, planned.batch, model, expected, out, tolerance)?;
        }
    }
    for requested in &planned.request.outputs {
        if !seen.contains(requested.name.as_str()) {
            let got: Vec<&str> = response.outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(CheckFailure::new(
                &requested.name,
                format!("output {}", requested.name),
                format!("no such output in the response (outputs: {got:?})"),
            ));
        }
    }
    Ok(())
}

fn compare_values(
    spec: &TensorSpec,
    batch: i64,
    model: &ModelDescription,
    expected: &ExpectedOutput,
    out: &Tensor,
    tolerance: f64,
) -> Result<(), CheckFailure> {
    if let Some(shape) = &expected.shape {
        let want = full_shape(model, batch, shape);
        if out.shape != want {
            return Err(CheckFailure::new(
                &out.name,
                format!("shape {want:?} (validation data)"),
                format!("{:?}", out.shape),
            ));
        }
    }
    let show = |data: &[u8]| preview(spec.datatype, data);
    let mismatch = || {
        CheckFailure::new(
            &out.name,
            format!("{} (validation data)", show(&expected.data)),
            show(&out.data),
        )
    };
    match spec.datatype.size() {
        Some(size) if spec.datatype.is_float() && tolerance > 0.0 => {
            if expected.data.len() != out.data.len() {
                return Err(mismatch());
            }
            let close = expected
                .data
                .chunks_exact(size)
                .zip(out.data.chunks_exact(size))
                .all(|(e, g)| {
                    match (
                        tensor::decode_scalar(spec.datatype, e).as_f64(),
                        tensor::decode_scalar(spec.datatype, g).as_f64(),
                    ) {
                        (Some(e), Some(g)) => {
                            (e - g).abs() <= tolerance || (e.is_nan() && g.is_nan())
                        }
                        _ => false,
                    }
                });
            if !close {
                return Err(mismatch());
            }
        }
        _ => {
            if expected.data != out.data {
                return Err(mismatch());
            }
        }
    }
    Ok(())
}

/// The first elements of a tensor's raw data, readable (`[1, 2, 3, ... (16 elements)]`).
pub fn preview(datatype: DataType, data: &[u8]) -> String {
    const SHOWN: usize = 8;
    let (items, total): (Vec<String>, usize) = match datatype.size() {
        Some(size) => (
            data.chunks_exact(size)
                .take(SHOWN)
                .map(|c| tensor::decode_scalar(datatype, c).to_string())
                .collect(),
            data.len() / size,
        ),
        None => match tensor::split_bytes(data) {
            Ok(elements) => (
                elements
                    .iter()
                    .take(SHOWN)
                    .map(|e| format!("{:?}", String::from_utf8_lossy(e)))
                    .collect(),
                elements.len(),
            ),
            Err(e) => return format!("malformed BYTES ({e})"),
        },
    };
    if total > SHOWN {
        format!("[{}, ... ({total} elements)]", items.join(", "))
    } else {
        format!("[{}]", items.join(", "))
    }
}

/// `--consistency`: the outputs of a repeated request must be byte-identical to its first.
pub fn check_consistent(first: &InferResponse, again: &InferResponse) -> Result<(), CheckFailure> {
    for out in &again.outputs {
        let Some(before) = first.outputs.iter().find(|o| o.name == out.name) else {
            continue;
        };
        if before.data != out.data || before.shape != out.shape {
            return Err(CheckFailure::new(
                &out.name,
                format!(
                    "the same output as the first response to this input: {} {:?}",
                    preview(before.datatype, &before.data),
                    before.shape
                ),
                format!("{} {:?}", preview(out.datatype, &out.data), out.shape),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use serde_json::json;

    fn spec(name: &str, datatype: DataType, dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            dims: dims.to_vec(),
            optional: false,
        }
    }

    /// A batching model: X FP32 [2], S BYTES [-1], OPT INT32 [1] optional → Y FP32 [2], T BYTES [-1].
    fn model() -> ModelDescription {
        ModelDescription {
            name: "m".into(),
            version: String::new(),
            max_batch_size: 4,
            inputs: vec![
                spec("X", DataType::Fp32, &[2]),
                spec("S", DataType::Bytes, &[-1]),
                TensorSpec {
                    optional: true,
                    ..spec("OPT", DataType::Int32, &[1])
                },
            ],
            outputs: vec![
                spec("Y", DataType::Fp32, &[2]),
                spec("T", DataType::Bytes, &[-1]),
            ],
            decoupled: false,
            sequence_batching: None,
        }
    }

    fn options() -> InferOptions {
        InferOptions {
            models: vec!["m".parse().unwrap()],
            shapes: vec!["S:3".parse().unwrap()],
            ..Default::default()
        }
    }

    fn rng() -> StdRng {
        StdRng::seed_from_u64(1)
    }

    fn f32s(values: &[f32]) -> Bytes {
        values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>()
            .into()
    }

    fn strings(values: &[&str]) -> Bytes {
        let mut out = Vec::new();
        for v in values {
            tensor::push_bytes_element(&mut out, v.as_bytes());
        }
        out.into()
    }

    fn tensor(name: &str, datatype: DataType, shape: &[i64], data: Bytes) -> Tensor {
        Tensor {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// What the model should answer to a batch-2 request: Y [2,2] FP32 and T [2,3] BYTES.
    fn good_response() -> InferResponse {
        InferResponse {
            model_version: "1".into(),
            received_at: None,
            sent_at: None,
            outputs: vec![
                tensor("Y", DataType::Fp32, &[2, 2], f32s(&[1.0, 2.0, 3.0, 4.0])),
                tensor(
                    "T",
                    DataType::Bytes,
                    &[2, 3],
                    strings(&["a", "b", "c", "d", "e", "f"]),
                ),
            ],
        }
    }

    fn planned(batch: i64) -> PlannedRequest {
        let mut o = options();
        o.batch_size = batch as u32;
        plan_requests(&model(), &o, None, &mut rng())
            .unwrap()
            .remove(0)
    }

    #[test]
    fn flags_parse_as_perf_analyzer_writes_them() {
        let m: ModelSelection = "resnet@3:5".parse().unwrap();
        assert_eq!(
            (m.name.as_str(), m.version.as_str(), m.weight),
            ("resnet", "3", 5)
        );
        let m: ModelSelection = "bert".parse().unwrap();
        assert_eq!((m.version.as_str(), m.weight), ("", 1));
        for bad in ["", "a:0", "a:x", "a@", "a@v1", "@1"] {
            assert!(bad.parse::<ModelSelection>().is_err(), "{bad}");
        }
        let s: ShapeOverride = "m/IN:3,224".parse().unwrap();
        assert_eq!(
            (s.model.as_deref(), s.input.as_str(), s.dims),
            (Some("m"), "IN", vec![3, 224])
        );
        let s: ShapeOverride = "IN:7".parse().unwrap();
        assert_eq!((s.model, s.dims), (None, vec![7]));
        for bad in ["IN", "IN:-1", "IN:a", ":3", "/IN:3"] {
            assert!(bad.parse::<ShapeOverride>().is_err(), "{bad}");
        }
        let d: InputDataArg = "m=data.json".parse().unwrap();
        assert_eq!(d.model.as_deref(), Some("m"));
        assert_eq!(d.source, DataSource::File("data.json".into()));
        assert_eq!(
            "zero".parse::<InputDataArg>().unwrap().source,
            DataSource::Zero
        );
        assert_eq!(
            "m=random".parse::<InputDataArg>().unwrap().source,
            DataSource::Random
        );
    }

    #[test]
    fn half_precision_conversions() {
        for v in [
            0.0f32,
            1.0,
            -2.5,
            0.333_251_95,
            65504.0,
            6.1035156e-05,
            5.9604645e-08,
        ] {
            assert_eq!(tensor::f16_to_f32(tensor::f32_to_f16(v)), v, "{v}");
        }
        assert_eq!(tensor::f32_to_f16(1.0), 0x3c00);
        assert_eq!(tensor::f32_to_f16(1e6), 0x7c00, "overflow is infinity");
        assert_eq!(tensor::f32_to_bf16(1.0), 0x3f80);
        assert_eq!(tensor::bf16_to_f32(0x4049), 3.140625);
        assert_eq!(tensor::f32_to_bf16(3.140_7), 0x4049);
    }

    #[test]
    fn base64_decodes_with_and_without_padding() {
        let decode = |text: &str| base64::Engine::decode(&BASE64, text);
        assert_eq!(decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode("AQIDBA==").unwrap(), [1, 2, 3, 4]);
        assert!(decode("a$b").is_err());
    }

    #[test]
    fn description_merges_metadata_and_config() {
        let metadata: ModelMetadata = serde_json::from_value(json!({
            "name": "m", "versions": ["1"], "platform": "python",
            "inputs": [{"name": "X", "datatype": "FP32", "shape": [-1, 2]},
                       {"name": "S", "datatype": "BYTES", "shape": [-1, -1]},
                       {"name": "OPT", "datatype": "INT32", "shape": [-1, 1]}],
            "outputs": [{"name": "Y", "datatype": "FP32", "shape": [-1, 2]},
                        {"name": "T", "datatype": "BYTES", "shape": [-1, -1]}]
        }))
        .unwrap();
        let config = ModelConfig::from_json(&json!({
            "name": "m", "max_batch_size": 4,
            "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]},
                      {"name": "S", "data_type": "TYPE_STRING", "dims": [-1]},
                      {"name": "OPT", "data_type": "TYPE_INT32", "dims": ["1"], "optional": true,
                       "reshape": {"shape": []}}],
            "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2]},
                       {"name": "T", "data_type": "TYPE_STRING", "dims": [-1]}],
            "dynamic_batching": {}
        }))
        .unwrap();
        assert_eq!(config.inputs[2].reshape, Some(vec![]));
        assert_eq!(config.inputs[2].dims, vec![1]);
        assert!(config.sequence_batching.is_none() && !config.decoupled);
        assert_eq!(
            ModelDescription::new("", &metadata, &config).unwrap(),
            model()
        );
    }

    #[test]
    fn random_and_zero_requests_follow_the_model() {
        let requests = plan_requests(&model(), &options(), None, &mut rng()).unwrap();
        assert_eq!(requests.len(), RANDOM_VARIANTS);
        let r = &requests[0].request;
        // The optional input is left out; outputs are all requested.
        let names: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["X", "S"]);
        assert_eq!(r.outputs.len(), 2);
        assert_eq!(r.inputs[0].shape, [1, 2]);
        assert_eq!(r.inputs[0].data.len(), 8);
        assert_eq!(r.inputs[1].shape, [1, 3]);
        let elements = tensor::split_bytes(&r.inputs[1].data).unwrap();
        assert_eq!(elements.len(), 3);
        assert!(elements.iter().all(|e| e.len() == DEFAULT_STRING_LENGTH));
        assert_ne!(requests[0].request.inputs, requests[1].request.inputs);
        let again = plan_requests(&model(), &options(), None, &mut rng()).unwrap();
        assert_eq!(
            again[0].request.inputs, requests[0].request.inputs,
            "seeded"
        );

        let mut o = options();
        o.input_data = vec!["zero".parse().unwrap()];
        o.batch_size = 4;
        o.string_length = 2;
        let zero = plan_requests(&model(), &o, None, &mut rng()).unwrap();
        assert_eq!(zero.len(), 1);
        assert_eq!(zero[0].request.inputs[0].shape, [4, 2]);
        assert_eq!(zero[0].request.inputs[0].data, Bytes::from(vec![0u8; 32]));
        assert_eq!(
            tensor::split_bytes(&zero[0].request.inputs[1].data)
                .unwrap()
                .len(),
            12
        );
    }

    #[test]
    fn batch_size_and_dynamic_dims_are_checked() {
        let mut o = options();
        o.batch_size = 5;
        let e = plan_requests(&model(), &o, None, &mut rng())
            .unwrap_err()
            .to_string();
        assert!(e.contains("above model m's max_batch_size 4"), "{e}");
        let unbatched = ModelDescription {
            max_batch_size: 0,
            ..model()
        };
        o.batch_size = 2;
        let e = plan_requests(&unbatched, &o, None, &mut rng())
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not batch"), "{e}");
        // A model's own batch size wins over the general one (the last one given).
        o.model_batch_sizes = vec![("m".into(), 3), ("m".into(), 1), ("other".into(), 4)];
        let r = plan_requests(&unbatched, &o, None, &mut rng()).unwrap();
        assert_eq!(r[0].request.inputs[0].shape, [2], "no batch dimension");
        o.model_batch_sizes.clear();
        o.batch_size = 1;
        let r = plan_requests(&unbatched, &o, None, &mut rng()).unwrap();
        assert_eq!(r[0].request.inputs[0].shape, [2], "no batch dimension");
        o.shapes.clear();
        let e = plan_requests(&model(), &o, None, &mut rng())
            .unwrap_err()
            .to_string();
        assert!(e.contains("model m input S has a dynamic dimension"), "{e}");
        o.shapes = vec!["other/S:3".parse().unwrap(), "m/S:5".parse().unwrap()];
        let r = plan_requests(&model(), &o, None, &mut rng()).unwrap();
        assert_eq!(
            r[0].request.inputs[1].shape,
            [1, 5],
            "the model's own override"
        );
        o.shapes = vec!["X:3".parse().unwrap(), "S:1".parse().unwrap()];
        let e = plan_requests(&model(), &o, None, &mut rng())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--shape X") && e.contains("does not fit"), "{e}");
    }

    #[test]
    fn flags_naming_unknown_models_or_inputs_are_refused() {
        let mut o = options();
        o.shapes = vec!["NOPE:3".parse().unwrap()];
        let e = o.check_names(&[model()]).unwrap_err().to_string();
        assert!(
            e.contains("model m has no input NOPE (inputs: X, S, OPT)"),
            "{e}"
        );
        o.shapes = vec!["other/S:3".parse().unwrap()];
        let e = o.check_names(&[model()]).unwrap_err().to_string();
        assert!(e.contains("model other is not among"), "{e}");
        o.shapes = vec![];
        o.input_data = vec!["other=zero".parse().unwrap()];
        assert!(o.check_names(&[model()]).is_err());
        o.input_data = vec![];
        o.model_batch_sizes = vec![("m".into(), 2)];
        assert!(o.check_names(&[model()]).is_ok());
        o.model_batch_sizes = vec![("other".into(), 2)];
        let e = o.check_names(&[model()]).unwrap_err().to_string();
        assert!(
            e.contains("--batch-size other=2: model other is not among"),
            "{e}"
        );
    }

    fn file(text: &str) -> Result<Vec<PlannedRequest>, ModelError> {
        let mut o = options();
        o.batch_size = 2;
        let f = InputDataFile::parse(Path::new("in.json"), text)?;
        plan_requests(&model(), &o, Some(&f), &mut rng())
    }

    #[test]
    fn input_data_files_in_perf_analyzer_format() {
        let r = file(
            r#"{"data": [
                {"X": [1.0, 2.0], "S": ["a", "b", "c"]},
                {"X": {"content": [3.0, 4.0], "shape": [2]}, "S": {"content": ["d", "e"], "shape": [2]}}
               ],
               "validation_data": [
                {"Y": [1.0, 2.0], "T": {"content": ["a", "b", "c"], "shape": [3]}},
                {"Y": {"b64": "AABAQAAAgEA="}}
               ]}"#,
        );
        // Entry 0 and entry 1 batch together in request 0, and they disagree on S's shape.
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("data[1].S has shape [2] but data[0].S [3]"),
            "{e}"
        );

        let r = file(
            r#"{"data": [
                {"X": [1.0, 2.0], "S": ["a", "b", "c"]},
                {"X": {"content": [[3.0, 4.0]], "shape": [2]}, "S": {"b64": "AQAAAGQBAAAAZQEAAABm", "shape": [3]}}
               ],
               "validation_data": [{"Y": [1.0, 2.0]}, {"Y": {"b64": "AABAQAAAgEA="}}]}"#,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        let x = &r[0].request.inputs[0];
        assert_eq!(
            (x.name.as_str(), x.shape.as_slice()),
            ("X", [2, 2].as_slice())
        );
        assert_eq!(x.data, f32s(&[1.0, 2.0, 3.0, 4.0]));
        let s = &r[0].request.inputs[1];
        assert_eq!(s.data, strings(&["a", "b", "c", "d", "e", "f"]));
        assert_eq!(r[0].expected["Y"].data, f32s(&[1.0, 2.0, 3.0, 4.0]));
        // Request 1 starts at entry 1 and wraps to entry 0.
        assert_eq!(r[1].request.inputs[0].data, f32s(&[3.0, 4.0, 1.0, 2.0]));
    }

    #[test]
    fn bad_input_data_names_file_and_field() {
        let cases = [
            ("not json", "in.json: not JSON"),
            (r#"{"dat": []}"#, "unknown key \"dat\""),
            (
                r#"{"data": [{"X": [1.0, 2.0]}]}"#,
                "data[0] has no value for model m's required input S",
            ),
            (
                r#"{"data": [{"X": [1.0], "S": ["a","b","c"]}]}"#,
                "in.json: data[0].X: 1 values, but shape [2] needs 2",
            ),
            (
                r#"{"data": [{"X": [1, 2], "S": ["a","b","c"]}]}"#,
                "data[0].X[0]: 1 is not a float",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": [1, 2, 3]}]}"#,
                "data[0].S[0]: 1 is not a string",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a","b","c"], "Z": [1]}]}"#,
                "data[0].Z: model m has no input Z (inputs: X, S, OPT)",
            ),
            (
                r#"{"data": [{"X": {"content": [1.0, 2.0], "shape": [1, 2]}, "S": ["a","b","c"]}]}"#,
                "data[0].X: shape [1, 2] does not fit model m input X dims [2]",
            ),
            (
                r#"{"data": [{"X": {"b64": "AAAA"}, "S": ["a","b","c"]}]}"#,
                "data[0].X.b64: 3 bytes, but shape [2] of FP32 needs 8",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a","b","c"]}], "validation_data": [{"W": [1.0]}]}"#,
                "validation_data[0].W: model m has no output W (outputs: Y, T)",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a","b","c"]}], "validation_data": [{"T": ["x"]}]}"#,
                "validation_data[0].T: model m output T has a dynamic dimension",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a","b","c"]}], "validation_data": []}"#,
                "\"validation_data\" has 0 entries but \"data\" has 1",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": {"b64": "AQAAAGQBAAAA"}}]}"#,
                "data[0].S.b64: malformed BYTES",
            ),
        ];
        for (text, want) in cases {
            let e = file(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}\n  gave: {e}\n  want: {want}");
        }
    }

    /// Every way an entry can fail to fit the model: the kind of error, and its message (which
    /// names the file and the field).
    #[test]
    fn input_data_entry_errors_are_typed() {
        type Case = (
            String,
            &'static str,
            fn(&InputDataError) -> bool,
            &'static str,
        );
        use InputDataError::*;
        const OK: &str = r#""X": [1.0, 2.0], "S": ["a","b","c"]"#;
        let cases: Vec<Case> = vec![
            (
                r#"{"data": [1]}"#.into(), "S:3",
                |e| matches!(e, EntryNotAnObject { section: Section::Data, index: 0, .. }),
                "in.json: data[0] is not an object",
            ),
            (
                format!(r#"{{"data": [{{{OK}}}], "validation_data": [1]}}"#), "S:3",
                |e| matches!(e, EntryNotAnObject { section: Section::ValidationData, index: 0, .. }),
                "in.json: validation_data[0] is not an object",
            ),
            (
                format!(r#"{{"data": [{{{OK}, "Z": [1]}}]}}"#), "S:3",
                |e| matches!(e, NoSuchTensor { field, known, .. } if field.name == "Z" && known == "X, S, OPT"),
                "in.json: data[0].Z: model m has no input Z (inputs: X, S, OPT)",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0]}]}"#.into(), "S:3",
                |e| matches!(e, MissingInput { index: 0, input, .. } if input == "S"),
                "in.json: data[0] has no value for model m's required input S",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a"]}]}"#.into(), "",
                |e| matches!(e, InputShape { field, source } if field.name == "S" && matches!(**source, ModelError::DynamicDimension { .. })),
                "in.json: data[0].S: model m input S has a dynamic dimension [-1]: give its shape with --shape m/S:D1,D2,... (in a matrix: `shape: {S: [D1, D2, ...]}` in the model's entry) or in the input data as {\"content\": ..., \"shape\": ...}",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": ["a"]}]}"#.into(), "S:3,4",
                |e| matches!(e, InputShape { source, .. } if matches!(**source, ModelError::ShapeDoesNotFit { .. })),
                "in.json: data[0].S: --shape S: model m input S has dims [-1] (without the batch dimension); [3, 4] does not fit them",
            ),
            (
                format!(r#"{{"data": [{{{OK}}}], "validation_data": [{{"T": ["x"]}}]}}"#), "S:3",
                |e| matches!(e, DynamicOutput { field, dims, .. } if field.section == Section::ValidationData && field.name == "T" && dims == &[-1]),
                "in.json: validation_data[0].T: model m output T has a dynamic dimension [-1]: give its validation data as {\"content\": [...], \"shape\": [...]}",
            ),
            (
                format!(r#"{{"data": [{{{OK}}}], "validation_data": [{{"W": ["x"]}}]}}"#), "S:3",
                |e| matches!(e, NoSuchTensor { field, .. } if field.kind() == "output" && field.name == "W"),
                "in.json: validation_data[0].W: model m has no output W (outputs: Y, T)",
            ),
            (
                format!(r#"{{"data": [{{{OK}}}], "validation_data": [{{"Y": {{"content": [1.0], "shape": [1]}}}}]}}"#), "S:3",
                |e| matches!(e, ShapeDoesNotFit { field, shape, dims, .. } if field.kind() == "output" && shape == &[1] && dims == &[2]),
                "in.json: validation_data[0].Y: shape [1] does not fit model m output Y dims [2] (without the batch dimension)",
            ),
            (
                r#"{"data": [{"X": {"b64": 1}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, B64NotAString { .. }),
                "in.json: data[0].X.b64: not a string",
            ),
            (
                r#"{"data": [{"X": {"b64": "A*AA"}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotBase64 { source: base64::DecodeError::InvalidByte(1, b'*'), .. }),
                "in.json: data[0].X.b64: Invalid symbol 42, offset 1.",
            ),
            (
                r#"{"data": [{"X": {"content": 1}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, ContentNotAList { .. }),
                "in.json: data[0].X.content: not a list",
            ),
            (
                r#"{"data": [{"X": 1, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotAValue { field } if field.name == "X"),
                "in.json: data[0].X: expected a list, {\"content\": [...], \"shape\": [...]} or {\"b64\": \"...\"}",
            ),
            (
                r#"{"data": [{"X": {"content": [1.0, 2.0], "shape": [-1]}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotAShape { value, .. } if value == &json!([-1])),
                "in.json: data[0].X.shape: [-1] is not a list of whole numbers >= 0",
            ),
            (
                r#"{"data": [{"X": {"content": [1.0, 2.0], "shape": "x"}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotAShape { value, .. } if value == &json!("x")),
                "in.json: data[0].X.shape: \"x\" is not a list of whole numbers >= 0",
            ),
            (
                r#"{"data": [{"X": {"b64": "AAAA", "shape": [-2]}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotAShape { value, .. } if value == &json!([-2])),
                "in.json: data[0].X.shape: [-2] is not a list of whole numbers >= 0",
            ),
            (
                r#"{"data": [{"X": {"content": [1.0, 2.0], "shape": [1, 2]}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, ShapeDoesNotFit { field, shape, .. } if field.kind() == "input" && shape == &[1, 2]),
                "in.json: data[0].X: shape [1, 2] does not fit model m input X dims [2] (without the batch dimension)",
            ),
            (
                r#"{"data": [{"X": {"b64": "AAAA"}, "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, RawSize { len: 3, needed: 8, datatype: DataType::Fp32, .. }),
                "in.json: data[0].X.b64: 3 bytes, but shape [2] of FP32 needs 8",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": {"b64": "AQAAAGQBAAAA"}}]}"#.into(), "S:3",
                |e| matches!(e, MalformedBytes { source: TensorError::TruncatedElement { element: 1, .. }, .. }),
                "in.json: data[0].S.b64: malformed BYTES: element 1: length 1 but only 0 bytes left",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": {"b64": "AQAAAGQBAA"}}]}"#.into(), "S:3",
                |e| matches!(e, MalformedBytes { source: TensorError::TruncatedLength { element: 1, left: 2 }, .. }),
                "in.json: data[0].S.b64: malformed BYTES: element 1: 2 bytes left, too few for a 4-byte length",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": {"b64": "AQAAAGQBAAAAZQ=="}}]}"#.into(), "S:3",
                |e| matches!(e, BytesCount { count: 2, needed: 3, .. }),
                "in.json: data[0].S.b64: 2 BYTES elements, but shape [3] needs 3",
            ),
            (
                r#"{"data": [{"X": [1.0], "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, ValueCount { count: 1, needed: 2, .. }),
                "in.json: data[0].X: 1 values, but shape [2] needs 2",
            ),
            (
                r#"{"data": [{"X": [1.0, 2.0], "S": [1, 2, 3]}]}"#.into(), "S:3",
                |e| matches!(e, NotAString { element: 0, value, .. } if value == &json!(1)),
                "in.json: data[0].S[0]: 1 is not a string (the tensor is BYTES)",
            ),
            (
                r#"{"data": [{"X": [1, 2.0], "S": ["a","b","c"]}]}"#.into(), "S:3",
                |e| matches!(e, NotAFloat { field, element: 0, .. } if field.name == "X"),
                "in.json: data[0].X[0]: 1 is not a float (write 1.0, not 1, as perf_analyzer requires)",
            ),
            (
                format!(r#"{{"data": [{{{OK}, "OPT": [1.5]}}]}}"#), "S:3",
                |e| matches!(e, NotOfDatatype { datatype: DataType::Int32, value, .. } if value == &json!(1.5)),
                "in.json: data[0].OPT[0]: 1.5 is not a INT32 value",
            ),
            (
                format!(r#"{{"data": [{{{OK}, "OPT": ["a"]}}]}}"#), "S:3",
                |e| matches!(e, NotOfDatatype { value, .. } if value == &json!("a")),
                "in.json: data[0].OPT[0]: \"a\" is not a INT32 value",
            ),
        ];
        for (text, shape, kind, want) in cases {
            let shapes: Vec<ShapeOverride> = if shape.is_empty() {
                vec![]
            } else {
                vec![shape.parse().unwrap()]
            };
            let f = InputDataFile::parse(Path::new("in.json"), &text).unwrap();
            let e = f.entries(&model(), &shapes).unwrap_err();
            assert!(kind(&e), "{text}\n  gave: {e:?}");
            assert_eq!(e.to_string(), want, "{text}");
        }
        // Through plan_requests, the entry's error is the model error's.
        let e = file(r#"{"data": [{"X": [1.0, 2.0], "S": ["a"]}]}"#).unwrap_err();
        assert!(
            matches!(
                &e,
                ModelError::InputData(ValueCount {
                    count: 1,
                    needed: 3,
                    ..
                })
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_good_response_passes_every_check() {
        assert_eq!(
            check_response(&model(), &planned(2), &good_response(), 0.0),
            Ok(())
        );
    }

    /// Each check, broken one at a time on an otherwise good response.
    #[test]
    fn each_check_catches_its_fault() {
        let p = planned(2);
        let check = |edit: &dyn Fn(&mut InferResponse)| {
            let mut r = good_response();
            edit(&mut r);
            check_response(&model(), &p, &r, 0.0).unwrap_err()
        };
        let f = check(&|r| {
            r.outputs.remove(1);
        });
        assert_eq!(f.output, "T");
        assert!(f.actual.starts_with("no such output"), "{f:?}");
        let f = check(&|r| {
            r.outputs.push(tensor(
                "EXTRA",
                DataType::Int32,
                &[2, 1],
                Bytes::from(vec![0; 8]),
            ))
        });
        assert_eq!(f.output, "EXTRA");
        assert!(
            f.actual.contains("undeclared output EXTRA INT32 [2, 1]"),
            "{f:?}"
        );
        let f = check(&|r| r.outputs[0].datatype = DataType::Fp64);
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            ("datatype FP32", "FP64")
        );
        let f = check(&|r| r.outputs[0].shape = vec![1, 4]);
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            ("shape [2, 2] (-1: any)", "[1, 4]")
        );
        let f = check(&|r| r.outputs[0].shape = vec![2, 2, 1]);
        assert_eq!(f.actual, "[2, 2, 1]");
        let f = check(&|r| r.outputs[0].data = f32s(&[1.0, 2.0, 3.0]));
        assert!(
            f.expected.starts_with("16 bytes") && f.actual == "12 bytes",
            "{f:?}"
        );
        let f = check(&|r| r.outputs[1].data = r.outputs[1].data.slice(..12));
        assert!(f.actual.starts_with("malformed BYTES: element 2"), "{f:?}");
        let f = check(&|r| r.outputs[1].data = strings(&["a", "b"]));
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            ("6 BYTES elements (shape [2, 3])", "2 elements")
        );
        let f = check(&|r| r.outputs.push(r.outputs[0].clone()));
        assert_eq!(f.actual, "it twice");
    }

    /// A shape past what memory can count, from a faulty server or a hostile flag, is a wrong
    /// answer or bad input: never an overflow.
    #[test]
    fn shapes_past_memory_are_wrong_answers_or_bad_input() {
        let mut m = model();
        m.outputs[0].dims = vec![-1];
        m.outputs[1].dims = vec![-1, -1];
        let p = planned(2);
        let check = |output: usize, shape: Vec<i64>| {
            let mut r = good_response();
            r.outputs[output].shape = shape;
            check_response(&m, &p, &r, 0.0).unwrap_err()
        };
        let f = check(1, vec![2, i64::MAX, 2]);
        assert!(
            f.expected.starts_with("a shape of at most")
                && f.actual == format!("[2, {}, 2]", i64::MAX),
            "{f:?}"
        );
        let f = check(0, vec![2, 1 << 62]);
        assert!(
            f.expected
                .starts_with(&format!("more than {} bytes", usize::MAX))
                && f.actual == "16 bytes",
            "{f:?}"
        );

        let mut o = options();
        for shape in ["S:4611686018427387904", "S:1000000000"] {
            o.shapes = vec![shape.parse().unwrap()];
            let e = plan_requests(&model(), &o, None, &mut rng()).unwrap_err();
            assert!(
                matches!(e, ModelError::RequestTooLarge { .. }),
                "{shape}: {e}"
            );
        }
        // A large request has fewer random variants (all are held in memory).
        let mib = 1 << 20;
        assert_eq!(random_variants(1), RANDOM_VARIANTS);
        assert_eq!(random_variants(16 * mib), RANDOM_VARIANTS);
        assert_eq!(random_variants(32 * mib), 8);
        assert_eq!(random_variants(MAX_REQUEST_BYTES), 1);
    }

    #[test]
    fn validation_data_is_compared_exactly_or_within_the_tolerance() {
        let mut p = planned(2);
        p.expected.insert(
            "Y".into(),
            ExpectedOutput {
                data: f32s(&[1.0, 2.0, 3.0, 4.001]),
                shape: None,
            },
        );
        let f = check_response(&model(), &p, &good_response(), 0.0).unwrap_err();
        assert_eq!(f.output, "Y");
        assert!(
            f.expected.contains("4.001") && f.actual.contains("[1.0, 2.0, 3.0, 4.0]"),
            "{f:?}"
        );
        assert_eq!(check_response(&model(), &p, &good_response(), 0.01), Ok(()));
        p.expected.insert(
            "T".into(),
            ExpectedOutput {
                data: strings(&["a", "b", "c", "d", "e", "g"]),
                shape: Some(vec![3]),
            },
        );
        let f = check_response(&model(), &p, &good_response(), 0.01).unwrap_err();
        assert_eq!(f.output, "T");
        assert!(f.actual.contains("\"f\""), "{f:?}");
    }

    #[test]
    fn consistency_compares_bytes() {
        let a = good_response();
        assert_eq!(check_consistent(&a, &a.clone()), Ok(()));
        let mut b = a.clone();
        b.outputs[0].data = f32s(&[1.0, 2.0, 3.0, 4.5]);
        let f = check_consistent(&a, &b).unwrap_err();
        assert_eq!(f.output, "Y");
        assert!(f.actual.contains("4.5"), "{f:?}");
    }

    #[test]
    fn every_datatype_round_trips_through_json_values() {
        let values = [
            (DataType::Bool, json!(true)),
            (DataType::Uint8, json!(255)),
            (DataType::Uint16, json!(65535)),
            (DataType::Uint32, json!(4294967295u64)),
            (DataType::Uint64, json!(u64::MAX)),
            (DataType::Int8, json!(-128)),
            (DataType::Int16, json!(-32768)),
            (DataType::Int32, json!(i32::MIN)),
            (DataType::Int64, json!(i64::MIN)),
            (DataType::Fp16, json!(1.5)),
            (DataType::Bf16, json!(-2.0)),
            (DataType::Fp32, json!(0.25)),
            (DataType::Fp64, json!(1e300)),
        ];
        for (datatype, v) in values {
            let mut out = Vec::new();
            tensor::encode_json_scalar(datatype, &v, &mut out).unwrap();
            assert_eq!(out.len(), datatype.size().unwrap(), "{datatype}");
            assert_eq!(
                tensor::decode_scalar(datatype, &out).to_json(),
                v,
                "{datatype}"
            );
        }
        let mut out = Vec::new();
        assert!(tensor::encode_json_scalar(DataType::Uint8, &json!(256), &mut out).is_none());
        assert!(tensor::encode_json_scalar(DataType::Int32, &json!(1.5), &mut out).is_none());
        assert!(tensor::encode_json_scalar(DataType::Bool, &json!(1), &mut out).is_none());
        assert_eq!(DataType::ALL.len(), 14);
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.as_str()), Some(d));
        }
        assert_eq!(DataType::parse_config("TYPE_STRING"), Some(DataType::Bytes));
    }

    #[test]
    fn streams_of_an_input_data_file_and_inputs_triton_fills() {
        use crate::metadata::sequence::tests::json_config;
        let path = std::path::Path::new("in.json");
        let f = InputDataFile::parse(
            path,
            r#"{"data": [[{"X": [1]}, {"X": [2]}], [{"X": [3]}]]}"#,
        );
        assert_eq!(f.unwrap().streams, [2, 1]);
        let f = InputDataFile::parse(path, r#"{"data": [{"X": [1]}, {"X": [2]}]}"#);
        assert_eq!(f.unwrap().streams, [2], "a flat list is one stream");

        // A control or state input the metadata lists is not one the client sends.
        let metadata: ModelMetadata = serde_json::from_value(json!({
            "name": "m",
            "inputs": [{"name": "DELTA", "datatype": "FP32", "shape": [2]},
                       {"name": "START", "datatype": "FP32", "shape": [1]},
                       {"name": "ACC_IN", "datatype": "INT32", "shape": [1]}],
            "outputs": [{"name": "TOTAL", "datatype": "FP32", "shape": [2]}]
        }))
        .unwrap();
        let config = ModelConfig::from_json(&json!({
            "name": "m", "max_batch_size": 0,
            "input": [{"name": "DELTA", "data_type": "TYPE_FP32", "dims": [2]}],
            "output": [{"name": "TOTAL", "data_type": "TYPE_FP32", "dims": [2]}],
            "sequence_batching": json_config()
        }))
        .unwrap();
        let d = ModelDescription::new("", &metadata, &config).unwrap();
        let names: Vec<&str> = d.inputs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["DELTA"]);
        assert!(d.sequence_batching.is_some_and(|s| s.string_ids()));
    }
}
