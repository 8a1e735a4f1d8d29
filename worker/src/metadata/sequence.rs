//! What the worker reads of a sequence model's batcher (`sequence_batching` in its config), over
//! gRPC or HTTP. Triton fills the control inputs (START, END, READY, CORRID) from a request's
//! sequence flags and the implicit-state inputs from the sequence's state, so a client never
//! sends them; the one thing a client must follow is CORRID's data type: a TYPE_STRING CORRID
//! takes string sequence ids. The strategy (direct, oldest) does not concern the client.

use serde_json::Value;

/// Which sequence signal a control input carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    Ready,
    End,
    CorrId,
}

impl ControlKind {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "CONTROL_SEQUENCE_START" => Self::Start,
            "CONTROL_SEQUENCE_READY" => Self::Ready,
            "CONTROL_SEQUENCE_END" => Self::End,
            "CONTROL_SEQUENCE_CORRID" => Self::CorrId,
            _ => return None,
        })
    }
}

/// How a control tensor encodes its signal: false/true values of a type, or (CORRID) the id's
/// data type as the config writes it (`TYPE_UINT64`, `TYPE_STRING`, ...).
#[derive(Debug, Clone, PartialEq)]
pub enum ControlValues {
    Int32(Vec<i32>),
    Fp32(Vec<f32>),
    Bool(Vec<bool>),
    DataType(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ControlInput {
    pub name: String,
    pub kind: ControlKind,
    pub values: ControlValues,
}

/// An implicit state: Triton feeds `input_name` to the model and keeps its `output_name`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImplicitState {
    pub input_name: String,
    pub output_name: String,
    pub data_type: String,
    pub dims: Vec<i64>,
}

/// CORRID data types Triton accepts (sequence_batch_scheduler.cc).
const CORRID_TYPES: [&str; 5] = [
    "TYPE_UINT64",
    "TYPE_INT64",
    "TYPE_UINT32",
    "TYPE_INT32",
    "TYPE_STRING",
];

/// A sequence batcher the worker cannot read or drive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceBatchingError {
    #[error("sequence_batching.control_input[{index}] has no name")]
    UnnamedControlInput { index: usize },
    #[error("sequence_batching control input {input}: unknown kind {kind}")]
    UnknownControlKind { input: String, kind: String },
    /// Triton would refuse the model's requests: bad input naming the model.
    #[error(
        "model {model}: CORRID control data_type {data_type} is not one of {types}",
        types = CORRID_TYPES.join(", ")
    )]
    UnsupportedCorrIdType { model: String, data_type: String },
}

/// The sequence batcher as a client needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SequenceBatching {
    pub controls: Vec<ControlInput>,
    pub states: Vec<ImplicitState>,
    /// `max_sequence_idle_microseconds` (None: not set, Triton's default of 1 s).
    pub max_sequence_idle_us: Option<u64>,
}

impl SequenceBatching {
    /// The HTTP endpoint's JSON form (`"sequence_batching": {...}`).
    pub fn from_json(v: &Value) -> Result<Self, SequenceBatchingError> {
        let mut controls = Vec::new();
        for (i, input) in v["control_input"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let name = input["name"]
                .as_str()
                .ok_or(SequenceBatchingError::UnnamedControlInput { index: i })?;
            for control in input["control"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let kind_text = control["kind"].as_str().unwrap_or("CONTROL_SEQUENCE_START");
                let kind = ControlKind::parse(kind_text).ok_or_else(|| {
                    SequenceBatchingError::UnknownControlKind {
                        input: name.into(),
                        kind: kind_text.into(),
                    }
                })?;
                let list = |key: &str| control[key].as_array().filter(|l| !l.is_empty());
                let values = if kind == ControlKind::CorrId {
                    ControlValues::DataType(
                        control["data_type"]
                            .as_str()
                            .unwrap_or("TYPE_INVALID")
                            .into(),
                    )
                } else if let Some(l) = list("fp32_false_true") {
                    ControlValues::Fp32(
                        l.iter()
                            .filter_map(|x| x.as_f64())
                            .map(|x| x as f32)
                            .collect(),
                    )
                } else if let Some(l) = list("bool_false_true") {
                    ControlValues::Bool(l.iter().filter_map(Value::as_bool).collect())
                } else {
                    ControlValues::Int32(
                        list("int32_false_true")
                            .map(|l| {
                                l.iter()
                                    .filter_map(|x| x.as_i64())
                                    .map(|x| x as i32)
                                    .collect()
                            })
                            .unwrap_or_default(),
                    )
                };
                controls.push(ControlInput {
                    name: name.into(),
                    kind,
                    values,
                });
            }
        }
        let states = v["state"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|s| ImplicitState {
                input_name: s["input_name"].as_str().unwrap_or_default().into(),
                output_name: s["output_name"].as_str().unwrap_or_default().into(),
                data_type: s["data_type"].as_str().unwrap_or("TYPE_INVALID").into(),
                dims: s["dims"]
                    .as_array()
                    .map(|d| d.iter().filter_map(super::json_i64).collect())
                    .unwrap_or_default(),
            })
            .collect();
        Ok(Self {
            controls,
            states,
            max_sequence_idle_us: super::json_i64(&v["max_sequence_idle_microseconds"])
                .and_then(|us| u64::try_from(us).ok())
                .filter(|us| *us > 0),
        })
    }

    /// The gRPC ModelConfig's form.
    pub fn from_proto(s: &triton_proto::ModelSequenceBatching) -> Self {
        use triton_proto::model_sequence_batching::control::Kind;
        let data_type = |t: i32| {
            triton_proto::DataType::try_from(t)
                .map(|d| d.as_str_name().to_string())
                .unwrap_or_else(|_| format!("data type {t}"))
        };
        let controls = s
            .control_input
            .iter()
            .flat_map(|input| {
                input.control.iter().map(|c| {
                    let kind = match Kind::try_from(c.kind).unwrap_or(Kind::ControlSequenceStart) {
                        Kind::ControlSequenceStart => ControlKind::Start,
                        Kind::ControlSequenceReady => ControlKind::Ready,
                        Kind::ControlSequenceEnd => ControlKind::End,
                        Kind::ControlSequenceCorrid => ControlKind::CorrId,
                    };
                    let values = if kind == ControlKind::CorrId {
                        ControlValues::DataType(data_type(c.data_type))
                    } else if !c.fp32_false_true.is_empty() {
                        ControlValues::Fp32(c.fp32_false_true.clone())
                    } else if !c.bool_false_true.is_empty() {
                        ControlValues::Bool(c.bool_false_true.clone())
                    } else {
                        ControlValues::Int32(c.int32_false_true.clone())
                    };
                    ControlInput {
                        name: input.name.clone(),
                        kind,
                        values,
                    }
                })
            })
            .collect();
        let states = s
            .state
            .iter()
            .map(|st| ImplicitState {
                input_name: st.input_name.clone(),
                output_name: st.output_name.clone(),
                data_type: data_type(st.data_type),
                dims: st.dims.clone(),
            })
            .collect();
        Self {
            controls,
            states,
            // 0 in the config is unset: Triton's default.
            max_sequence_idle_us: (s.max_sequence_idle_microseconds > 0)
                .then_some(s.max_sequence_idle_microseconds),
        }
    }

    /// CORRID's data type, when the model asks for the id as an input.
    pub fn corrid_type(&self) -> Option<&str> {
        self.controls
            .iter()
            .find_map(|c| match (&c.kind, &c.values) {
                (ControlKind::CorrId, ControlValues::DataType(t)) => Some(t.as_str()),
                _ => None,
            })
    }

    /// Whether sequence ids go as strings: a TYPE_STRING CORRID (Triton refuses a number for
    /// it). Without CORRID, or with an integer one, ids go as numbers.
    pub fn string_ids(&self) -> bool {
        self.corrid_type() == Some("TYPE_STRING")
    }

    /// An input that Triton fills (a control or an implicit state's input): never sent.
    pub fn filled_by_triton(&self, input: &str) -> bool {
        self.controls.iter().any(|c| c.name == input)
            || self.states.iter().any(|s| s.input_name == input)
    }

    /// A CORRID data type Triton would refuse, as bad input naming the model.
    pub fn check(&self, model: &str) -> Result<(), SequenceBatchingError> {
        match self.corrid_type() {
            Some(t) if !CORRID_TYPES.contains(&t) => {
                Err(SequenceBatchingError::UnsupportedCorrIdType {
                    model: model.into(),
                    data_type: t.into(),
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The HTTP JSON of a batcher with every false/true encoding, a string CORRID and a state,
    /// as Triton 2.51 writes it (empty lists for the encodings a control does not use).
    pub(crate) fn json_config() -> Value {
        let control = |kind: &str, i: Value, f: Value, b: Value, t: &str| {
            json!({"kind": kind, "int32_false_true": i, "fp32_false_true": f,
                   "bool_false_true": b, "data_type": t})
        };
        json!({
            "direct": {"max_queue_delay_microseconds": 0},
            "max_sequence_idle_microseconds": "3000000",
            "control_input": [
                {"name": "START", "control": [control("CONTROL_SEQUENCE_START", json!([]), json!([0, 1]), json!([]), "TYPE_INVALID")]},
                {"name": "END", "control": [control("CONTROL_SEQUENCE_END", json!([]), json!([]), json!([false, true]), "TYPE_INVALID")]},
                {"name": "READY", "control": [control("CONTROL_SEQUENCE_READY", json!([0, 1]), json!([]), json!([]), "TYPE_INVALID")]},
                {"name": "CORRID", "control": [control("CONTROL_SEQUENCE_CORRID", json!([]), json!([]), json!([]), "TYPE_STRING")]}
            ],
            "state": [{"input_name": "ACC_IN", "output_name": "ACC_OUT", "data_type": "TYPE_INT32",
                       "dims": ["1"], "initial_state": [{"zero_data": true, "dims": ["1"]}]}]
        })
    }

    #[test]
    fn json_and_proto_read_alike() {
        let from_json = SequenceBatching::from_json(&json_config()).unwrap();
        assert_eq!(from_json.controls.len(), 4);
        assert_eq!(from_json.controls[0].kind, ControlKind::Start);
        assert_eq!(
            from_json.controls[0].values,
            ControlValues::Fp32(vec![0.0, 1.0])
        );
        assert_eq!(
            from_json.controls[1].values,
            ControlValues::Bool(vec![false, true])
        );
        assert_eq!(
            from_json.controls[2].values,
            ControlValues::Int32(vec![0, 1])
        );
        assert_eq!(from_json.corrid_type(), Some("TYPE_STRING"));
        assert!(from_json.string_ids());
        assert_eq!(from_json.states[0].dims, [1]);
        assert!(from_json.filled_by_triton("START") && from_json.filled_by_triton("ACC_IN"));
        assert!(!from_json.filled_by_triton("ACC_OUT") && !from_json.filled_by_triton("DELTA"));

        use triton_proto::model_sequence_batching::{
            Control, ControlInput as P, State, control::Kind,
        };
        let control = |kind: Kind| Control {
            kind: kind as i32,
            ..Default::default()
        };
        let p = triton_proto::ModelSequenceBatching {
            control_input: vec![
                P {
                    name: "START".into(),
                    control: vec![Control {
                        fp32_false_true: vec![0.0, 1.0],
                        ..control(Kind::ControlSequenceStart)
                    }],
                },
                P {
                    name: "END".into(),
                    control: vec![Control {
                        bool_false_true: vec![false, true],
                        ..control(Kind::ControlSequenceEnd)
                    }],
                },
                P {
                    name: "READY".into(),
                    control: vec![Control {
                        int32_false_true: vec![0, 1],
                        ..control(Kind::ControlSequenceReady)
                    }],
                },
                P {
                    name: "CORRID".into(),
                    control: vec![Control {
                        data_type: triton_proto::DataType::TypeString as i32,
                        ..control(Kind::ControlSequenceCorrid)
                    }],
                },
            ],
            state: vec![State {
                input_name: "ACC_IN".into(),
                output_name: "ACC_OUT".into(),
                data_type: triton_proto::DataType::TypeInt32 as i32,
                dims: vec![1],
                ..Default::default()
            }],
            max_sequence_idle_microseconds: 3_000_000,
            ..Default::default()
        };
        assert_eq!(SequenceBatching::from_proto(&p), from_json);
        assert_eq!(from_json.max_sequence_idle_us, Some(3_000_000));
        let unset = triton_proto::ModelSequenceBatching::default();
        assert_eq!(
            SequenceBatching::from_proto(&unset).max_sequence_idle_us,
            None
        );
    }

    #[test]
    fn corrid_types_decide_string_ids() {
        let with = |t: &str| SequenceBatching {
            controls: vec![ControlInput {
                name: "CORRID".into(),
                kind: ControlKind::CorrId,
                values: ControlValues::DataType(t.into()),
            }],
            states: vec![],
            max_sequence_idle_us: None,
        };
        for t in ["TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32"] {
            assert!(!with(t).string_ids(), "{t}");
            assert_eq!(with(t).check("m"), Ok(()));
        }
        assert!(with("TYPE_STRING").string_ids());
        assert!(
            !SequenceBatching::default().string_ids(),
            "no CORRID: numbers"
        );
        let e = with("TYPE_FP32").check("m").unwrap_err().to_string();
        assert!(
            e.contains("model m: CORRID control data_type TYPE_FP32"),
            "{e}"
        );
    }
}
