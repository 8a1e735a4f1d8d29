//! Triton's request traces (`--trace-config level=TIMESTAMPS`, triton mode: a JSON list per
//! file, with `log-frequency` one file per N traces), summarised per model and protocol the way
//! Triton's own `trace_summary.py` does: where a request's time went on the server — receive,
//! queue, compute input / infer / output, send — as averages and percentiles.
//!
//! A trace's entries come as separate objects sharing its `id` (the model's name and version in
//! one, each timestamp in its own), in any order and possibly across files; they are merged by
//! id first. Pure: reading the files is the caller's.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use stress_common::histogram::LatencyHistogram;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: not a Triton trace file (a JSON list of trace entries): {message}")]
    NotATrace { file: String, message: String },
}

/// One entry as Triton writes it: `{"id", "model_name", "model_version"}` or
/// `{"id", "timestamps": [{"name", "ns"}]}` (others, such as tensors, are ignored).
#[derive(Debug, Deserialize)]
struct Entry {
    id: u64,
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    model_version: Option<serde_json::Value>,
    #[serde(default)]
    timestamps: Vec<Timestamp>,
}

#[derive(Debug, Deserialize)]
struct Timestamp {
    name: String,
    ns: u64,
}

/// One request's trace: its model and the first time of each named timestamp.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    pub model: String,
    pub version: String,
    pub timestamps: BTreeMap<String, u64>,
}

/// The traces of several files (one server's: ids are unique within a server), merged by id.
pub fn parse(files: &[(String, String)]) -> Result<Vec<Trace>, TraceError> {
    let mut traces: BTreeMap<u64, Trace> = BTreeMap::new();
    for (file, text) in files {
        let entries: Vec<Entry> =
            serde_json::from_str(text).map_err(|e| TraceError::NotATrace {
                file: file.clone(),
                message: e.to_string(),
            })?;
        for e in entries {
            let t = traces.entry(e.id).or_default();
            if let Some(m) = e.model_name {
                t.model = m;
            }
            if let Some(v) = e.model_version {
                t.version = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
            }
            for ts in e.timestamps {
                t.timestamps.entry(ts.name).or_insert(ts.ns);
            }
        }
    }
    Ok(traces.into_values().collect())
}

/// A stage's time over a row's traces (µs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTime {
    pub count: u64,
    pub avg_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
}

/// One model over one protocol.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceRow {
    pub model: String,
    pub version: String,
    /// `grpc`, `http`, or `in-process` (no frontend timestamps: the C API, an ensemble step).
    pub protocol: String,
    pub traces: u64,
    /// Stage name → its time: request, receive, queue, compute_input, compute_infer,
    /// compute_output, send (a stage without both timestamps in a trace is not counted).
    pub stages: BTreeMap<String, StageTime>,
}

/// A traced server's summary in the store, by member name.
impl stress_common::store::Document for TraceSummary {
    const KIND: &'static str = "trace_summary";
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceSummary {
    pub rows: Vec<TraceRow>,
    /// Traces without a model name (cut off at a file's end, or a frontend-only trace).
    pub without_model: u64,
}

/// The stages and the timestamps that bound them, as Triton's trace_summary.py reads them.
pub(crate) const STAGES: [(&str, &[(&str, &str)]); 7] = [
    ("request", &[("REQUEST_START", "REQUEST_END")]),
    (
        "receive",
        &[
            ("HTTP_RECV_START", "HTTP_RECV_END"),
            ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"),
        ],
    ),
    ("queue", &[("QUEUE_START", "COMPUTE_START")]),
    ("compute_input", &[("COMPUTE_START", "COMPUTE_INPUT_END")]),
    (
        "compute_infer",
        &[("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START")],
    ),
    ("compute_output", &[("COMPUTE_OUTPUT_START", "COMPUTE_END")]),
    (
        "send",
        &[
            ("HTTP_SEND_START", "HTTP_SEND_END"),
            ("GRPC_SEND_START", "GRPC_SEND_END"),
        ],
    ),
];

fn protocol(t: &Trace) -> &'static str {
    if t.timestamps.keys().any(|k| k.starts_with("GRPC_")) {
        "grpc"
    } else if t.timestamps.keys().any(|k| k.starts_with("HTTP_")) {
        "http"
    } else {
        "in-process"
    }
}

pub fn summarize(traces: &[Trace]) -> TraceSummary {
    type Key = (String, String, &'static str);
    #[derive(Default)]
    struct Acc {
        traces: u64,
        stages: BTreeMap<&'static str, (f64, LatencyHistogram)>,
    }
    let mut rows: BTreeMap<Key, Acc> = BTreeMap::new();
    let mut without_model = 0;
    for t in traces {
        if t.model.is_empty() {
            without_model += 1;
            continue;
        }
        let acc = rows
            .entry((t.model.clone(), t.version.clone(), protocol(t)))
            .or_default();
        acc.traces += 1;
        for (stage, bounds) in STAGES {
            let span = bounds.iter().find_map(|(start, end)| {
                let (s, e) = (t.timestamps.get(*start)?, t.timestamps.get(*end)?);
                Some(e.saturating_sub(*s))
            });
            if let Some(ns) = span {
                let (sum, h) = acc.stages.entry(stage).or_default();
                *sum += ns as f64;
                h.record(Duration::from_nanos(ns));
            }
        }
    }
    TraceSummary {
        rows: rows
            .into_iter()
            .map(|((model, version, protocol), acc)| TraceRow {
                model,
                version,
                protocol: protocol.into(),
                traces: acc.traces,
                stages: acc
                    .stages
                    .into_iter()
                    .map(|(stage, (sum_ns, h))| {
                        let count = h.count();
                        (
                            stage.to_string(),
                            StageTime {
                                count,
                                avg_us: sum_ns / 1000.0 / count.max(1) as f64,
                                p50_us: h.percentile_us(50.0),
                                p90_us: h.percentile_us(90.0),
                                p99_us: h.percentile_us(99.0),
                            },
                        )
                    })
                    .collect(),
            })
            .collect(),
        without_model,
    }
}

/// The trace files a server wrote as `path`: the file itself, or, when it wrote one per
/// `log_frequency` traces, its numbered files `path.0`, `path.1`, … in order (None of either:
/// `path` alone, for the reader to report missing).
pub fn files_of(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    if path.exists() {
        return vec![path.to_path_buf()];
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return vec![path.to_path_buf()];
    };
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    let mut numbered: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let file = e.file_name().into_string().ok()?;
            let n = file.strip_prefix(name)?.strip_prefix('.')?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    numbered.sort();
    if numbered.is_empty() {
        vec![path.to_path_buf()]
    } else {
        numbered.into_iter().map(|(_, p)| p).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_s_numbered_trace_files_stand_for_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("triton-0.json");
        for n in [10, 2, 0, 1] {
            std::fs::write(dir.path().join(format!("triton-0.json.{n}")), "[]").unwrap();
        }
        std::fs::write(dir.path().join("triton-0.json.x"), "").unwrap();
        std::fs::write(dir.path().join("triton-1.json.3"), "[]").unwrap();
        let names: Vec<String> = files_of(&base)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "triton-0.json.0",
                "triton-0.json.1",
                "triton-0.json.2",
                "triton-0.json.10"
            ]
        );
        std::fs::write(&base, "[]").unwrap();
        assert_eq!(files_of(&base), vec![base]);
        let missing = dir.path().join("triton-9.json");
        assert_eq!(files_of(&missing), vec![missing]);
    }

    /// Entries in Triton's shape, split across two files and out of order.
    fn files() -> Vec<(String, String)> {
        let ts = |id: u64, name: &str, ns: u64| {
            format!(r#"{{"id": {id}, "timestamps": [{{"name": "{name}", "ns": {ns}}}]}}"#)
        };
        let grpc = [
            ts(1, "GRPC_WAITREAD_START", 1_000),
            ts(1, "GRPC_WAITREAD_END", 3_000),
            r#"{"id": 1, "model_name": "m", "model_version": 1}"#.to_string(),
            ts(1, "REQUEST_START", 4_000),
            ts(1, "QUEUE_START", 5_000),
            ts(1, "COMPUTE_START", 15_000),
            ts(1, "COMPUTE_INPUT_END", 17_000),
            ts(1, "COMPUTE_OUTPUT_START", 117_000),
        ];
        let rest = [
            ts(1, "COMPUTE_END", 120_000),
            ts(1, "REQUEST_END", 121_000),
            ts(1, "GRPC_SEND_START", 122_000),
            ts(1, "GRPC_SEND_END", 126_000),
            r#"{"id": 2, "model_name": "m", "model_version": 1}"#.to_string(),
            ts(2, "HTTP_RECV_START", 0),
            ts(2, "HTTP_RECV_END", 1_000),
            ts(2, "QUEUE_START", 2_000),
            ts(2, "COMPUTE_START", 2_500),
            ts(3, "REQUEST_START", 9),
        ];
        vec![
            ("t.json.0".into(), format!("[{}]", grpc.join(","))),
            ("t.json.1".into(), format!("[{}]", rest.join(","))),
        ]
    }

    #[test]
    fn stages_are_summed_per_model_and_protocol_across_files() {
        let summary = summarize(&parse(&files()).unwrap());
        assert_eq!(summary.without_model, 1, "trace 3 has no model entry");
        assert_eq!(summary.rows.len(), 2);
        let grpc = summary.rows.iter().find(|r| r.protocol == "grpc").unwrap();
        assert_eq!((grpc.model.as_str(), grpc.version.as_str()), ("m", "1"));
        let us = |stage: &str| grpc.stages[stage].avg_us;
        assert_eq!(us("receive"), 2.0);
        assert_eq!(us("queue"), 10.0);
        assert_eq!(us("compute_input"), 2.0);
        assert_eq!(us("compute_infer"), 100.0);
        assert_eq!(us("compute_output"), 3.0);
        assert_eq!(us("request"), 117.0);
        assert_eq!(us("send"), 4.0);
        let http = summary.rows.iter().find(|r| r.protocol == "http").unwrap();
        assert_eq!(http.stages["queue"].avg_us, 0.5);
        assert!(
            !http.stages.contains_key("compute_infer"),
            "a stage without both ends is not counted"
        );
        let text = summary.render();
        assert!(text.contains("m (version 1) over grpc: 1 traces"), "{text}");
        assert!(text.contains("compute_infer"), "{text}");
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_named() {
        let e = parse(&[("bad.json".into(), "[{\"id\": 1".into())]).unwrap_err();
        assert!(
            e.to_string().starts_with("bad.json: not a Triton trace"),
            "{e}"
        );
    }
}
