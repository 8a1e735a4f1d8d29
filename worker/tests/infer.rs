//! The Infer scenario against a REAL tritonserver: the models in models/ that cover every
//! datatype (all_types), dynamic dims, reshape and an optional input (dynamic_reshape), BYTES and
//! the dynamic batcher (text_vector, all_types) pass over gRPC, HTTP binary and HTTP JSON; each
//! faulty twin in models-faulty/ is caught by its check, with the model, version, output,
//! expected and actual named; perf_analyzer, given the same -m/-b/--shape/--input-data flags,
//! agrees with the worker on good and on wrong validation data; bad flags and data files exit 2
//! before any load, naming the file and field or the model and input. A decoupled model streams
//! over gRPC (its stream counts reported), is left out over HTTP, and each of its faulty twins (no
//! final response, a wrong response mid-stream, an error mid-stream) is caught.
//!
//! Only the models these tests need are loaded (explicit model control), so the server starts
//! quickly. Needs scripts/install-tritonserver.sh (tritonserver and perf_analyzer in .local).

mod support;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;
use stress_common::scenario::Scenario;
use stress_common::tritonserver::TritonServer;
use worker::client::{Protocol, TritonClient, connect};
use worker::model::{InferOptions, ModelSelection};
use worker::scenarios::{Failure, LoadMode, Outcome, Settings, run_single};

const MODELS: [&str; 7] = [
    "all_types",
    "dynamic_reshape",
    "text_vector",
    "text_vector_wrong_shape",
    "text_vector_wrong_datatype",
    "text_vector_missing_output",
    "text_vector_nondeterministic",
];

async fn start(name: &str) -> TritonServer {
    start_with(name, &MODELS).await
}

async fn start_with(name: &str, models: &[&str]) -> TritonServer {
    support::start_server_with(name, |spec| {
        spec.extra_args.push("--model-control-mode=explicit".into());
        for m in models {
            spec.extra_args.push(format!("--load-model={m}"));
        }
    })
    .await
}

fn settings(options: InferOptions) -> Settings {
    Settings {
        sequence_models: vec![],
        identity_model: "identity_delay".into(),
        load_model: "add_sub".into(),
        image_model: "image_classifier".into(),
        timeout_delay: Duration::from_millis(300),
        timeout_deadline: Duration::from_millis(100),
        crash_after: Duration::from_secs(1),
        worker_binary: env!("CARGO_BIN_EXE_worker").into(),
        load_mode: LoadMode::Concurrency(2),
        request_intervals: None,
        load_target: None,
        load_window: Duration::from_millis(300),
        image_batch: 1,
        perf_analyzer: None,
        request_timeout: Duration::from_secs(25),
        infer: options,
        infer_plan: None,
        trace: None,
    }
}

fn options(model: &str, flags: &[&str]) -> InferOptions {
    let mut o = InferOptions {
        models: vec![model.parse::<ModelSelection>().unwrap()],
        seed: 7,
        ..Default::default()
    };
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let value = it.next().expect("a value per flag");
        match *flag {
            "--shape" => o.shapes.push(value.parse().unwrap()),
            "--input-data" => o.input_data.push(value.parse().unwrap()),
            "-b" => o.batch_size = value.parse().unwrap(),
            "--consistency" => o.consistency = *value == "on",
            other => panic!("no flag {other}"),
        }
    }
    o
}

async fn infer_once(client: &Arc<dyn TritonClient>, options: InferOptions) -> (Outcome, u64) {
    let (outcome, stats) = run_single(Scenario::Infer, client, &settings(options), 1, 7).await;
    let requests = stats.scenario_counts(&[Scenario::Infer])[0].requests;
    (outcome, requests)
}

async fn expect_failure(
    client: &Arc<dyn TritonClient>,
    label: &str,
    options: InferOptions,
) -> Failure {
    match infer_once(client, options).await.0 {
        Outcome::Failed(f) => f,
        other => panic!("{label}: expected a failure, got {other:?}"),
    }
}

fn data_file(dir: &Path, name: &str, json: serde_json::Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// all_types: two entries of every datatype and their own values as validation data (the model
/// is an identity), BYTES_IN with 3 elements (its shape from --shape BYTES_IN:3). FP values
/// written as floats, as perf_analyzer wants.
fn all_types_data(validation_bump: f64, bytes_out: bool) -> serde_json::Value {
    use serde_json::json;
    let entry = |k: i64| {
        let f = k as f64 + 0.5;
        // [f, 1.5, -2.25, 0.125] as raw FP16 and BF16: perf_analyzer 2.51 takes half
        // precision only as b64 ("Can not use explicit tensor description for fp16 datatype").
        let fp16 = ["ADgAPoDAADA=", "AD4APoDAADA="][k as usize];
        let bf16 = ["AD/APxDAAD4=", "wD/APxDAAD4="][k as usize];
        json!({
            "BOOL_IN": [k % 2 == 0, true, false],
            "UINT8_IN": [k, 255, 0, 1], "UINT16_IN": [k, 65535, 0, 1],
            "UINT32_IN": [k, 4294967295u64, 0, 1], "UINT64_IN": [k, 18446744073709551615u64, 0, 1],
            "INT8_IN": [k, -128, 127, -1], "INT16_IN": [k, -32768, 32767, -1],
            "INT32_IN": [k, -2147483648i64, 2147483647, -1],
            "INT64_IN": [k, -9223372036854775808i64, 9223372036854775807i64, -1],
            "FP16_IN": {"b64": fp16},
            "BF16_IN": {"b64": bf16},
            "FP32_IN": {"content": [f, 1.25, -3.5, 1e-3], "shape": [2, 2]},
            "FP64_IN": [f, 1e300, -1e-300, 0.1],
            "BYTES_IN": [format!("entry {k}"), "", "ünïcödé"]
        })
    };
    let validation = |k: i64| {
        let mut v = entry(k);
        let object = v.as_object_mut().unwrap();
        let renamed: serde_json::Map<String, serde_json::Value> = object
            .iter()
            .map(|(name, value)| (name.replace("_IN", "_OUT"), value.clone()))
            .collect();
        let mut out = serde_json::Value::Object(renamed);
        // A variable-size output's validation data carries its shape. perf_analyzer 2.51 takes
        // none for BYTES_OUT [-1] ("needs to have its shape fully defined", with or without
        // --shape), so its runs leave that output unvalidated.
        if bytes_out {
            out["BYTES_OUT"] = json!({"content": out["BYTES_OUT"].clone(), "shape": [3]});
        } else {
            out.as_object_mut().unwrap().remove("BYTES_OUT");
        }
        out["FP64_OUT"][3] = json!(0.1 + validation_bump);
        out
    };
    json!({
        "data": [entry(0), entry(1)],
        "validation_data": [validation(0), validation(1)]
    })
}

/// Every good model passes over every protocol; each faulty twin fails on its check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_passes_on_good_models_and_catches_each_faulty_twin() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = start("infer-models").await;
    let dir = tempfile::tempdir().unwrap();
    let all_types = data_file(dir.path(), "all_types.json", all_types_data(0.0, true));
    let reshape = data_file(
        dir.path(),
        "dynamic_reshape.json",
        serde_json::json!({
            "data": [
                {"DYN": {"content": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], "shape": [2, 4]},
                 "RESHAPED": [1, 2, 3, 4, 5, 6], "BIAS": [0.5]},
                {"DYN": {"content": [1.0, 2.0, 3.0, 4.0], "shape": [1, 4]},
                 "RESHAPED": [[6, 5, 4], [3, 2, 1]]}
            ],
            "validation_data": [
                {"DYN_OUT": {"content": [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5], "shape": [2, 4]},
                 "RESHAPED_OUT": [1, 2, 3, 4, 5, 6]},
                {"DYN_OUT": {"content": [1.0, 2.0, 3.0, 4.0], "shape": [1, 4]},
                 "RESHAPED_OUT": [6, 5, 4, 3, 2, 1]}
            ]
        }),
    );
    let grpc = server.grpc_address();
    let http = server.http_address();
    for (label, protocol, address, binary) in [
        ("grpc", Protocol::Grpc, &grpc, true),
        ("http", Protocol::Http, &http, true),
        ("http-json", Protocol::Http, &http, false),
    ] {
        let client = connect(protocol, address, binary).await.unwrap();

        // gRPC and HTTP describe a model the same way (reshape and optional included).
        let selection: ModelSelection = "dynamic_reshape".parse().unwrap();
        let d = worker::model::describe(client.as_ref(), &selection)
            .await
            .unwrap();
        assert_eq!(d.inputs[0].dims, [-1, 4], "{label}");
        assert_eq!(
            d.inputs[1].dims,
            [2, 3],
            "{label}: the client sends dims, not reshape"
        );
        assert!(
            d.inputs[2].optional && !d.inputs[0].optional,
            "{label}: {d:?}"
        );

        let good: [(&str, Vec<&str>); 6] = [
            // Random data, the dynamic dim from --shape, batched through the dynamic batcher.
            (
                "all_types",
                vec!["--shape", "BYTES_IN:3", "-b", "4", "--consistency", "on"],
            ),
            (
                "all_types",
                vec![
                    "--input-data",
                    &all_types,
                    "--shape",
                    "BYTES_IN:3",
                    "-b",
                    "2",
                    "--consistency",
                    "on",
                ],
            ),
            (
                "all_types@1",
                vec!["--input-data", "zero", "--shape", "all_types/BYTES_IN:2"],
            ),
            ("dynamic_reshape", vec!["--input-data", &reshape]),
            ("dynamic_reshape", vec!["--shape", "DYN:3,4"]),
            ("text_vector", vec!["-b", "3", "--consistency", "on"]),
        ];
        for (model, flags) in good {
            let (outcome, requests) = infer_once(&client, options(model, &flags)).await;
            assert_eq!(outcome, Outcome::Passed, "{label}: {model} {flags:?}");
            assert!(requests > 0, "{label}: {model} sent nothing");
        }

        let at = format!("{label}: server log:\n{}", support::server_log(&server));
        let f = expect_failure(
            &client,
            label,
            options("text_vector_wrong_shape", &["-b", "2"]),
        )
        .await;
        assert_eq!(f.model, "text_vector_wrong_shape", "{at}");
        assert_eq!(
            f.expected, "version 1 output OUTPUT: shape [2, 4] (-1: any)",
            "{at}"
        );
        assert_eq!(f.actual, "[2, 5]", "{at}");

        let f = expect_failure(&client, label, options("text_vector_wrong_datatype", &[])).await;
        assert_eq!(
            (f.expected.as_str(), f.actual.as_str()),
            ("version 1 output OUTPUT: datatype FP32", "FP64"),
            "{at}"
        );

        let f = expect_failure(&client, label, options("text_vector_missing_output", &[])).await;
        assert_eq!(f.expected, "version 1 output TEXT: output TEXT", "{at}");
        assert!(
            f.actual.starts_with("no such output in the response"),
            "{f:?}"
        );

        // Nondeterministic output passes every per-response check; --consistency catches it.
        let (outcome, _) = infer_once(&client, options("text_vector_nondeterministic", &[])).await;
        assert_eq!(outcome, Outcome::Passed, "{label}: without --consistency");
        let f = expect_failure(
            &client,
            label,
            options("text_vector_nondeterministic", &["--consistency", "on"]),
        )
        .await;
        assert!(
            f.expected.starts_with(
                "version 1 output OUTPUT: the same output as the first response to this input"
            ),
            "{f:?}"
        );

        // Wrong validation data: the output, the expected and the actual values.
        let wrong = data_file(dir.path(), "wrong.json", all_types_data(1.0, true));
        let wrong_flags = ["--input-data", wrong.as_str(), "--shape", "BYTES_IN:3"];
        let f = expect_failure(&client, label, options("all_types", &wrong_flags)).await;
        // Either entry's request may fail first (two in flight): entry k has FP64 [k + 0.5, ...].
        let entry = if f.expected.contains("[0.5,") {
            "0.5"
        } else {
            "1.5"
        };
        assert_eq!(
            f.expected,
            format!("version 1 output FP64_OUT: [{entry}, 1e300, -1e-300, 1.1] (validation data)"),
            "{f:?}"
        );
        assert_eq!(f.actual, format!("[{entry}, 1e300, -1e-300, 0.1]"), "{f:?}");
        let (outcome, _) = infer_once(
            &client,
            InferOptions {
                tolerance: 1.5,
                ..options("all_types", &wrong_flags)
            },
        )
        .await;
        assert_eq!(outcome, Outcome::Passed, "{label}: within --tolerance");
    }
    support::stop_server(server).await;
}

fn worker(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the worker runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// perf_analyzer with `flags` against `grpc`, 50 requests a window: whether it passed, and what
/// it printed.
fn perf_analyzer_with(grpc: &str, flags: &[&str]) -> (bool, String) {
    let pa = std::process::Command::new(support::perf_analyzer())
        .args(flags)
        .args(["-u", grpc, "-i", "grpc"])
        .args(["--measurement-mode", "count_windows"])
        .args(["--measurement-request-count", "50", "-s", "100"])
        .output()
        .expect("perf_analyzer runs");
    (
        pa.status.success(),
        format!("{}{}", text(&pa.stdout), text(&pa.stderr)),
    )
}

/// The worker with the same `flags` against `grpc`: its exit code and what it printed.
fn worker_with(
    grpc: &str,
    duration: &str,
    concurrency: &str,
    flags: &[&str],
) -> (Option<i32>, String) {
    let common = [
        "--servers",
        grpc,
        "--duration",
        duration,
        "--concurrency",
        concurrency,
    ];
    let w = worker(&[&common[..], flags].concat());
    (
        w.status.code(),
        format!("{}{}", text(&w.stdout), text(&w.stderr)),
    )
}

/// perf_analyzer and the worker, given the same -m/-b/--shape/--input-data flags, agree: both
/// pass on the right validation data and on random data, both fail on wrong validation data,
/// and both refuse a batch above max_batch_size. Then bad input: exit 2 before any load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_analyzer_and_the_worker_read_the_same_flags_alike_and_bad_input_exits_2() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = start("infer-cli").await;
    let grpc = server.grpc_address();
    let dir = tempfile::tempdir().unwrap();
    let good = data_file(dir.path(), "good.json", all_types_data(0.0, false));
    let wrong = data_file(dir.path(), "wrong.json", all_types_data(1.0, false));
    // (flags, passes): the validation data at batch 1 (perf_analyzer 2.51 cannot validate a
    // batch above 1: it compares the whole batch with one entry's data, "Output size doesn't
    // match expected size"), random data at batch 2, and a batch above max_batch_size 8.
    let cases: [(Vec<&str>, Option<bool>); 4] = [
        (vec!["--input-data", &good, "-b", "1"], Some(true)),
        (vec!["--input-data", &wrong, "-b", "1"], Some(false)),
        (vec!["--input-data", "random", "-b", "2"], Some(true)),
        (vec!["-b", "9"], None),
    ];
    for (extra, passes) in cases {
        let flags = [
            &["-m", "all_types", "--shape", "BYTES_IN:3"][..],
            &extra[..],
        ]
        .concat();
        let (pa_passed, pa_out) = perf_analyzer_with(&grpc, &flags);
        let (w_code, w_out) = worker_with(&grpc, "1s", "1", &flags);
        assert_eq!(
            pa_passed,
            passes == Some(true),
            "perf_analyzer {flags:?}:\n{pa_out}"
        );
        let want = match passes {
            Some(true) => 0,
            Some(false) => 1,
            None => 2,
        };
        assert_eq!(w_code, Some(want), "worker {flags:?}:\n{w_out}");
        match passes {
            Some(true) => assert!(w_out.contains("Infer "), "{w_out}"),
            Some(false) => {
                assert!(pa_out.contains("doesn't match expected output"), "{pa_out}");
                assert!(
                    w_out.contains(&format!(
                        "FAILED Infer on {grpc} model all_types: expected version 1 output FP64_OUT: "
                    )),
                    "{w_out}"
                );
            }
            None => assert!(
                w_out.contains("--batch-size 9 is above model all_types's max_batch_size 8"),
                "{w_out}"
            ),
        }
    }

    // Bad input: exit 2 before any load, naming the model and input or the file and field.
    let malformed = data_file(
        dir.path(),
        "malformed.json",
        serde_json::json!({"data": [{"INPUT": [1.0, 2.0, 3.0]}]}),
    );
    let unknown_output = data_file(
        dir.path(),
        "unknown-output.json",
        serde_json::json!({"data": [{"INPUT": [1.0, 2.0, 3.0, 4.0]}], "validation_data": [{"NOPE": [1.0]}]}),
    );
    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "{\"data\": [").unwrap();
    let not_json = not_json.to_str().unwrap();
    let status = dir.path().join("status.jsonl");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["-m", "no_such_model"],
            format!("server {grpc}: model no_such_model is not loaded or not ready"),
        ),
        (
            vec!["-m", "text_vector@7"],
            format!("server {grpc}: model text_vector@7: not loaded or not ready"),
        ),
        (
            vec!["-m", "all_types"],
            "model all_types input BYTES_IN has a dynamic dimension [-1]".into(),
        ),
        (
            vec!["-m", "text_vector", "-b", "5"],
            "--batch-size 5 is above model text_vector's max_batch_size 4".into(),
        ),
        (
            vec!["-m", "dynamic_reshape", "-b", "2", "--shape", "DYN:1,4"],
            "--batch-size 2: model dynamic_reshape does not batch".into(),
        ),
        (
            vec!["-m", "text_vector", "--shape", "NOPE:3"],
            "--shape NOPE: model text_vector has no input NOPE (inputs: INPUT)".into(),
        ),
        (
            vec!["-m", "text_vector", "--input-data", &malformed],
            format!("{malformed}: data[0].INPUT: 3 values, but shape [4] needs 4"),
        ),
        (
            vec!["-m", "text_vector", "--input-data", &unknown_output],
            format!(
                "{unknown_output}: validation_data[0].NOPE: model text_vector has no output NOPE (outputs: OUTPUT, TEXT)"
            ),
        ),
        (
            vec!["-m", "text_vector", "--input-data", not_json],
            format!("{not_json}: not JSON"),
        ),
        (
            vec!["-m", "text_vector", "--scenarios", "Load"],
            "--scenarios does not list Infer".into(),
        ),
    ];
    for (flags, want) in cases {
        let _ = std::fs::remove_file(&status);
        let args = [
            &[
                "--servers",
                &grpc,
                "--duration",
                "5s",
                "--status-file",
                status.to_str().unwrap(),
            ][..],
            &flags[..],
        ]
        .concat();
        let out = worker(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(
            stderr.contains(&want),
            "{flags:?}:\n  want: {want}\n  got:  {stderr}"
        );
        // No load: no report, and nothing in the status file that a run writes once load has
        // started (snapshots, failure records).
        assert!(
            !text(&out.stdout).contains("TOTAL"),
            "{flags:?}: a report was printed"
        );
        for line in std::fs::read_to_string(&status).unwrap_or_default().lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(
                r["type"] != "snapshot" && r["type"] != "failure",
                "{flags:?}: load was started: {r}"
            );
        }
    }
    support::stop_server(server).await;
}

const SEQUENCE_MODELS: [&str; 4] = [
    "sequence_state",
    "sequence_batch",
    "sequence_state_no_reset",
    "sequence_state_step_shape",
];

/// sequence_state's data in perf_analyzer's stream form: two sequences (3 and 2 steps) and,
/// per step, the running sum and the step number; `last_step` is stream 0's third STEP.
fn sequence_data(last_step: i32) -> serde_json::Value {
    use serde_json::json;
    json!({
        "data": [
            [{"DELTA": [1.0, 2.0]}, {"DELTA": [0.5, 0.5]}, {"DELTA": [-1.0, 1.0]}],
            [{"DELTA": [10.0, 20.0]}, {"DELTA": [1.0, 1.0]}]
        ],
        "validation_data": [
            [{"TOTAL": [1.0, 2.0], "STEP": [1]}, {"TOTAL": [1.5, 2.5], "STEP": [2]},
             {"TOTAL": [0.5, 3.5], "STEP": [last_step]}],
            [{"TOTAL": [10.0, 20.0], "STEP": [1]}, {"TOTAL": [11.0, 21.0], "STEP": [2]}]
        ]
    })
}

/// Sequence models: one Infer test is one START … END sequence (a stream of the input data,
/// or an L0-drawn number of random requests) over gRPC and HTTP, control and implicit-state
/// inputs left to Triton; every step's response is checked, and each faulty twin is caught
/// at its step. String sequence ids reach Triton as strings over both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_drives_sequence_models_and_catches_their_faulty_twins() {
    use worker::client::SequenceFlags;
    let _serial = support::SERVER_LOCK.lock().await;
    let server = start_with("infer-sequences", &SEQUENCE_MODELS).await;
    let dir = tempfile::tempdir().unwrap();
    let good = data_file(dir.path(), "sequence.json", sequence_data(3));
    let streams_only = data_file(
        dir.path(),
        "streams.json",
        serde_json::json!({"data": sequence_data(3)["data"].clone()}),
    );
    let grpc = server.grpc_address();
    let http = server.http_address();
    let mut descriptions = Vec::new();
    for (label, protocol, address) in [
        ("grpc", Protocol::Grpc, &grpc),
        ("http", Protocol::Http, &http),
    ] {
        let client = connect(protocol, address, true).await.unwrap();
        let at = || format!("{label}: server log:\n{}", support::server_log(&server));

        let selection: ModelSelection = "sequence_state".parse().unwrap();
        let d = worker::model::describe(client.as_ref(), &selection)
            .await
            .unwrap();
        let names: Vec<&str> = d.inputs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["DELTA"], "{label}: Triton fills controls and state");
        let batcher = d.sequence_batching.clone().expect("a sequence model");
        assert_eq!(batcher.controls.len(), 3, "{label}: {batcher:?}");
        assert_eq!(batcher.states[0].input_name, "ACC_IN", "{label}");
        descriptions.push(d);

        // Random data: one sequence of L0 length (max(1, N(16, 8)); 1 step is possible).
        let (outcome, requests) = infer_once(&client, options("sequence_state", &[])).await;
        assert_eq!(outcome, Outcome::Passed, "{}", at());
        assert!(requests >= 1, "{label}");
        // The data file: one stream per test, every step validated.
        for _ in 0..3 {
            let (outcome, requests) =
                infer_once(&client, options("sequence_state", &["--input-data", &good])).await;
            assert_eq!(outcome, Outcome::Passed, "{}", at());
            assert!(requests == 3 || requests == 2, "{label}: {requests} steps");
        }
        // UINT64 correlation ids, a batching sequence model (requests of shape [1, 1]).
        let (outcome, _) =
            infer_once(&client, options("sequence_batch", &["--consistency", "on"])).await;
        assert_eq!(outcome, Outcome::Passed, "{}", at());

        // START does not reset: the first sequence on a fresh instance may pass, a later one
        // drifts from its validation data (2 instances: up to 3 tests to hit a used one).
        let mut failure = None;
        for _ in 0..4 {
            if let (Outcome::Failed(f), _) = infer_once(
                &client,
                options("sequence_state_no_reset", &["--input-data", &good]),
            )
            .await
            {
                failure = Some(f);
                break;
            }
        }
        let f = failure.unwrap_or_else(|| panic!("no_reset passed: {}", at()));
        assert_eq!(f.model, "sequence_state_no_reset", "{f:?}");
        assert_eq!(f.correlation_id, Some(1), "{f:?}");
        // The drift shows at the sequence's first step: TOTAL = the stream's first DELTA plus
        // whatever the instance summed before.
        let (want, n) = if f.expected.contains("(step 1 of 3)") {
            ("[1.0, 2.0]", 3)
        } else {
            ("[10.0, 20.0]", 2)
        };
        assert_eq!(
            f.expected,
            format!("version 1 output TOTAL: {want} (validation data) (step 1 of {n})"),
            "{f:?}"
        );
        assert_ne!(f.actual, want, "{f:?}");

        // STEP comes back [2] from step 2 on: the shape check, no validation data needed.
        let f = expect_failure(
            &client,
            label,
            options(
                "sequence_state_step_shape",
                &["--input-data", &streams_only],
            ),
        )
        .await;
        let step_2_of =
            |n: usize| format!("version 1 output STEP: shape [1] (-1: any) (step 2 of {n})");
        assert!(
            f.expected == step_2_of(3) || f.expected == step_2_of(2),
            "{f:?}"
        );
        assert_eq!(f.actual, "[2]", "{f:?}");

        // Batch 2 on a sequence model is bad input, named before any load.
        let (outcome, _) = infer_once(&client, options("sequence_state", &["-b", "2"])).await;
        match outcome {
            Outcome::Failed(f) => assert!(
                f.actual.contains(
                    "--batch-size 2: model sequence_state is a sequence model, and Triton's sequence batcher takes requests of batch 1"
                ),
                "{f:?}"
            ),
            other => panic!("{label}: -b 2 gave {other:?}"),
        }

        // String ids: Triton tracks "77" and 77 as two sequences, so a string START followed
        // by a number without START is refused, and by the same string continues.
        let flags = |start: bool, end: bool, string_id: bool| SequenceFlags {
            id: 77,
            start,
            end,
            string_id,
        };
        let request = |f: SequenceFlags| {
            let mut r = worker::client::InferRequest::new(
                "sequence_state",
                vec![worker::tensor::Tensor {
                    name: "DELTA".into(),
                    datatype: worker::tensor::DataType::Fp32,
                    shape: vec![2],
                    data: [1f32, 2.0]
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<u8>>()
                        .into(),
                }],
            );
            r.sequence = Some(f);
            r
        };
        let mut session = client.sequence_session().await.unwrap();
        session
            .infer(&request(flags(true, false, true)))
            .await
            .unwrap();
        let e = session
            .infer(&request(flags(false, false, false)))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("must specify the START flag"),
            "{label}: {e}"
        );
        session.close().await;
        let mut session = client.sequence_session().await.unwrap();
        let r = session
            .infer(&request(flags(false, true, true)))
            .await
            .unwrap();
        assert_eq!(r.output("STEP").unwrap().to_i32().unwrap(), [2], "{label}");
        session.close().await;
    }
    assert_eq!(descriptions[0], descriptions[1], "gRPC and HTTP read alike");
    support::stop_server(server).await;
}

/// perf_analyzer, given the same -m/--input-data flags on sequence_state (streams as
/// sequences, per-step validation data), agrees with the worker: both pass on the right data
/// and both fail on a wrong STEP at stream 0's third step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_analyzer_and_the_worker_drive_a_sequence_model_alike() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = start_with("infer-sequence-cli", &SEQUENCE_MODELS[..1]).await;
    let grpc = server.grpc_address();
    let dir = tempfile::tempdir().unwrap();
    let good = data_file(dir.path(), "good.json", sequence_data(3));
    let wrong = data_file(dir.path(), "wrong.json", sequence_data(4));
    for (data, passes) in [(&good, true), (&wrong, false)] {
        let flags = ["-m", "sequence_state", "--input-data", data.as_str()];
        let (pa_passed, pa_out) = perf_analyzer_with(&grpc, &flags);
        let (w_code, w_out) = worker_with(&grpc, "2s", "2", &flags);
        assert_eq!(pa_passed, passes, "perf_analyzer {flags:?}:\n{pa_out}");
        assert_eq!(
            w_code,
            Some(if passes { 0 } else { 1 }),
            "worker {flags:?}:\n{w_out}"
        );
        if !passes {
            assert!(pa_out.contains("doesn't match expected output"), "{pa_out}");
            assert!(
                w_out.contains(&format!(
                    "FAILED Infer on {grpc} model sequence_state correlation id "
                )) && w_out.contains(
                    "expected version 1 output STEP: [4] (validation data) (step 3 of 3), got [3]"
                ),
                "{w_out}"
            );
        }
    }
    support::stop_server(server).await;
}

const DECOUPLED_MODELS: [&str; 5] = [
    "decoupled_repeat",
    "decoupled_repeat_no_final",
    "decoupled_repeat_wrong_shape",
    "decoupled_repeat_error",
    "text_vector",
];

/// A decoupled model: over gRPC every request's stream is read to its final response, its
/// responses checked and counted (closed and open loop, validation data on the last response,
/// --consistency); each faulty twin fails naming the model, what was expected and what came;
/// over HTTP the model is bad input (exit 2), even beside another model; and
/// perf_analyzer --streaming takes the same -m/--shape flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoupled_models_stream_over_grpc_and_each_faulty_stream_is_caught() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server_with("infer-decoupled", |spec| {
        spec.extra_args.push("--model-control-mode=explicit".into());
        for m in DECOUPLED_MODELS {
            spec.extra_args.push(format!("--load-model={m}"));
        }
    })
    .await;
    let grpc = server.grpc_address();
    let http = server.http_address();
    let client = connect(Protocol::Grpc, &grpc, true).await.unwrap();
    let silence = Duration::from_secs(2);
    let run = |options: InferOptions, load_mode: LoadMode| {
        let client = client.clone();
        async move {
            let settings = Settings {
                request_timeout: silence,
                load_mode,
                ..settings(options)
            };
            run_single(Scenario::Infer, &client, &settings, 1, 7).await
        }
    };
    let dir = tempfile::tempdir().unwrap();
    // Response k of a stream is OUT = [IN[k]], IDX = [k]: the last of [3, 1, 4] is (4, 2).
    let data = |out: i32| {
        serde_json::json!({
            "data": [{"IN": {"content": [3, 1, 4], "shape": [3]}}],
            "validation_data": [{"OUT": [out], "IDX": [2]}]
        })
    };
    let good = data_file(dir.path(), "decoupled.json", data(4));
    let wrong = data_file(dir.path(), "decoupled-wrong.json", data(3));

    let at = || format!("server log:\n{}", support::server_log(&server));
    for (flags, load_mode, responses_per_stream) in [
        (vec!["--shape", "IN:4"], LoadMode::Concurrency(2), 4),
        (vec!["--shape", "IN:4"], LoadMode::Rate(40.0), 4),
        (
            vec!["--input-data", good.as_str()],
            LoadMode::Concurrency(2),
            3,
        ),
        (
            vec!["--shape", "IN:2", "--consistency", "on"],
            LoadMode::Concurrency(1),
            2,
        ),
    ] {
        let (outcome, stats) = run(options("decoupled_repeat", &flags), load_mode.clone()).await;
        assert_eq!(
            outcome,
            Outcome::Passed,
            "{flags:?} {load_mode:?}: {}",
            at()
        );
        let counts = stats.model_counts(&[Scenario::Infer]);
        assert_eq!(counts.len(), 1, "{counts:?}");
        let stream = counts[0].stream.clone().expect("stream counts");
        assert!(stream.streams > 0, "{flags:?}: {stream:?}");
        assert_eq!(stream.streams, counts[0].requests, "{flags:?}");
        assert_eq!(
            stream.responses,
            responses_per_stream * stream.streams,
            "{flags:?}"
        );
        let first =
            stress_common::histogram::LatencyHistogram::decode(&stream.first_response_histogram)
                .unwrap();
        let gaps =
            stress_common::histogram::LatencyHistogram::decode(&stream.inter_response_histogram)
                .unwrap();
        assert_eq!(first.count(), stream.streams, "{flags:?}");
        assert_eq!(
            gaps.count(),
            (responses_per_stream - 1) * stream.streams,
            "{flags:?}"
        );
    }

    // Validation data describes the last data response of each stream.
    let (outcome, _) = run(
        options("decoupled_repeat", &["--input-data", &wrong]),
        LoadMode::Concurrency(1),
    )
    .await;
    let Outcome::Failed(f) = outcome else {
        panic!("wrong validation data passed: {outcome:?}")
    };
    assert_eq!(
        (f.model.as_str(), f.expected.as_str(), f.actual.as_str()),
        (
            "decoupled_repeat",
            "version 1 response 3 of 3 output OUT: [3] (validation data)",
            "[4]"
        )
    );

    // Each faulty twin: the model, what was expected and what came.
    let fail = |model: &'static str| {
        let run = &run;
        async move {
            match run(
                options(model, &["--shape", "IN:4"]),
                LoadMode::Concurrency(1),
            )
            .await
            .0
            {
                Outcome::Failed(f) => f,
                other => panic!("{model}: expected a failure, got {other:?}"),
            }
        }
    };
    let f = fail("decoupled_repeat_no_final").await;
    assert_eq!(f.model, "decoupled_repeat_no_final");
    assert_eq!(
        f.expected,
        "version 1: its final response (triton_final_response), each response within --request-timeout 2s"
    );
    assert!(
        f.actual.starts_with("4 responses in ") && f.actual.ends_with(", then nothing for 2s"),
        "{f:?}"
    );
    let f = fail("decoupled_repeat_wrong_shape").await;
    assert_eq!(
        (f.model.as_str(), f.expected.as_str(), f.actual.as_str()),
        (
            "decoupled_repeat_wrong_shape",
            "version 1 response 2 of 4 output OUT: shape [1] (-1: any)",
            "[2]"
        )
    );
    let f = fail("decoupled_repeat_error").await;
    assert_eq!(f.model, "decoupled_repeat_error");
    assert_eq!(
        f.expected,
        "version 1: responses until its final response (triton_final_response)"
    );
    assert!(
        f.actual.starts_with("1 response in ")
            && f.actual
                .ends_with(", then server error (stream): decoupled_repeat: injected error"),
        "{f:?}"
    );

    // The worker's own report: the stream columns of the decoupled model's row.
    let report = dir.path().join("report.json");
    let w = worker(&[
        "--servers",
        &grpc,
        "--duration",
        "2s",
        "--concurrency",
        "1",
        "-m",
        "decoupled_repeat",
        "--shape",
        "IN:3",
        "--report-json",
        report.to_str().unwrap(),
    ]);
    let out = format!("{}{}", text(&w.stdout), text(&w.stderr));
    assert_eq!(w.status.code(), Some(0), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let row = &json["models"][0];
    assert_eq!(row["model"], "decoupled_repeat", "{json}");
    assert_eq!(row["stream"]["responses_per_request"], 3.0, "{json}");
    assert!(
        row["stream"]["first_response_p50_us"].as_u64().unwrap() > 0,
        "{json}"
    );
    assert!(
        row["stream"]["inter_response_p50_us"].as_u64().unwrap() > 0,
        "{json}"
    );

    // Over HTTP: bad input, beside a model it could drive too (a run must not pass without
    // driving a model it was given).
    let w = worker(&[
        "--servers",
        &http,
        "--protocol",
        "http",
        "--duration",
        "1s",
        "-m",
        "decoupled_repeat",
        "-m",
        "text_vector",
        "--shape",
        "decoupled_repeat/IN:3",
    ]);
    let stderr = text(&w.stderr);
    assert_eq!(w.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "model decoupled_repeat: decoupled (model_transaction_policy { decoupled: true }), which Infer drives only over gRPC"
        ),
        "{stderr}"
    );

    // perf_analyzer takes the same -m/--shape (and needs --streaming for a decoupled model).
    let (pa_passed, pa_out) = perf_analyzer_with(
        &grpc,
        &["-m", "decoupled_repeat", "--shape", "IN:3", "--streaming"],
    );
    assert!(pa_passed, "perf_analyzer:\n{pa_out}");
    support::stop_server(server).await;
}
