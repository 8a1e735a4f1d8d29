//! A model as the server describes it: its metadata (`GET /v2/models/NAME`, ModelMetadata) and
//! the part of its config the worker reads (`GET /v2/models/NAME/config`, ModelConfig), from
//! either protocol; [`sequence`]: a sequence batcher's controls and implicit state. The clients
//! read these; `crate::model` builds requests and checks answers from them.

use serde::Deserialize;
use serde_json::Value;

pub mod sequence;

pub use sequence::{SequenceBatching, SequenceBatchingError};

/// A tensor as the model metadata lists it (shape with a leading -1 when the model batches).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// The model metadata (ModelMetadata, `GET /v2/models/NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelMetadata {
    pub name: String,
    #[serde(default)]
    pub versions: Vec<String>,
    #[serde(default)]
    pub platform: String,
    #[serde(default)]
    pub inputs: Vec<TensorMetadata>,
    #[serde(default)]
    pub outputs: Vec<TensorMetadata>,
}

/// An input or output of the model config.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigTensor {
    pub name: String,
    /// As the config writes it (`TYPE_FP32`).
    pub data_type: String,
    /// What a client sends and gets, without the batch dimension.
    pub dims: Vec<i64>,
    /// The shape the model itself sees; the client never does.
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
    pub is_shape_tensor: bool,
}

/// A model config (its HTTP JSON form) the worker cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelConfigError {
    /// `key` is `input` or `output`.
    #[error("{key}[{index}] has no name")]
    UnnamedTensor { key: &'static str, index: usize },
    #[error(transparent)]
    SequenceBatching(#[from] SequenceBatchingError),
}

/// What the worker reads of a model config (ModelConfig, `GET /v2/models/NAME/config`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub name: String,
    pub max_batch_size: i64,
    pub inputs: Vec<ConfigTensor>,
    pub outputs: Vec<ConfigTensor>,
    pub decoupled: bool,
    /// The sequence batcher, for a sequence model.
    pub sequence_batching: Option<SequenceBatching>,
}

impl ModelConfig {
    /// The HTTP endpoint's JSON form of the config.
    pub fn from_json(v: &Value) -> Result<Self, ModelConfigError> {
        let tensors = |key: &'static str| -> Result<Vec<ConfigTensor>, ModelConfigError> {
            let Some(list) = v[key].as_array() else {
                return Ok(Vec::new());
            };
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    let name = t["name"]
                        .as_str()
                        .ok_or(ModelConfigError::UnnamedTensor { key, index: i })?;
                    let dims = t["dims"]
                        .as_array()
                        .map(|d| d.iter().filter_map(json_i64).collect())
                        .unwrap_or_default();
                    Ok(ConfigTensor {
                        name: name.into(),
                        data_type: t["data_type"].as_str().unwrap_or("TYPE_INVALID").into(),
                        dims,
                        reshape: t["reshape"]["shape"]
                            .as_array()
                            .map(|d| d.iter().filter_map(json_i64).collect()),
                        optional: t["optional"].as_bool().unwrap_or(false),
                        is_shape_tensor: t["is_shape_tensor"].as_bool().unwrap_or(false),
                    })
                })
                .collect()
        };
        Ok(ModelConfig {
            name: v["name"].as_str().unwrap_or_default().into(),
            max_batch_size: json_i64(&v["max_batch_size"]).unwrap_or(0),
            inputs: tensors("input")?,
            outputs: tensors("output")?,
            decoupled: v["model_transaction_policy"]["decoupled"]
                .as_bool()
                .unwrap_or(false),
            sequence_batching: match v.get("sequence_batching") {
                Some(s) if !s.is_null() => Some(SequenceBatching::from_json(s)?),
                _ => None,
            },
        })
    }
}

/// Triton's JSON writes int64 fields as numbers, protobuf's JSON mapping as strings.
fn json_i64(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str()?.parse().ok())
}
