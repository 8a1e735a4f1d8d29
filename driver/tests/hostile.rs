//! Hostile matrices: generated mutations of the smoke matrix (extreme numbers, durations that
//! overflow, huge counts, reserved flags, the node's root as a volume, strings where numbers go),
//! and of any value of any matrix the project ships, are either refused as bad input, naming the
//! file, line, column and field, or give a valid run plan; never a panic, and within seconds
//! (nothing is expanded before the bounds hold).
//! Then the same through the binary: `driver validate` and `driver run` exit 2 within 1 s and
//! launch nothing.

use proptest::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};
use stress_common::contract::RunId;

const BASE: &str = include_str!("../../test-matrices/smoke.yaml");

/// Values a hostile user (or a typo) puts where a number, a duration or a string goes.
fn hostile_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551615".to_string()),
        Just("10000000".to_string()),
        Just("1e-300".to_string()),
        Just("1e300".to_string()),
        Just(".nan".to_string()),
        Just(".inf".to_string()),
        Just("99999999999999h".to_string()),
        // Two of these overflow a Duration when added.
        Just("584000000000y".to_string()),
        Just("1ns".to_string()),
        Just("0s".to_string()),
        Just("\"\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("~".to_string()),
        (1u64..u64::MAX).prop_map(|n| n.to_string()),
        "[a-z0-9/._-]{0,80}",
    ]
}

/// Where a value goes: (text of the smoke matrix, its replacement with `{}` for the value).
const SLOTS: &[(&str, &str)] = &[
    ("duration: 60s", "duration: {}"),
    ("poll_interval: 1s", "poll_interval: {}"),
    ("warmup: 2s", "warmup: {}"),
    ("server_ready_timeout: 120s", "server_ready_timeout: {}"),
    (
        "    template: cpu\n    instances: 1",
        "    template: cpu\n    instances: {}",
    ),
    (
        "    template: grpc-all\n    instances: 1",
        "    template: grpc-all\n    instances: {}",
    ),
    ("concurrency: 4", "concurrency: {}"),
    ("SequenceValid: 295", "SequenceValid: {}"),
    ("Load: 200", "Load: {}"),
    ("concurrency: 4", "concurrency: 4\n    load: { rate: {} }"),
    (
        "concurrency: 4",
        "concurrency: 4\n    load: { concurrency: {} }",
    ),
    ("concurrency: 4", "concurrency: 4\n    extra_args: [{}]"),
    (
        "concurrency: 4",
        "concurrency: 4\n    extra_args: [--run-id, {}]",
    ),
    (
        "concurrency: 4",
        "concurrency: 4\n    extra_args: [\"--store-url={}\"]",
    ),
    (
        "server_ready_timeout: 120s",
        "server_ready_timeout: 120s\n  fail_fast: { zero_qps_polls: {} }",
    ),
    (
        "server_ready_timeout: 120s",
        "server_ready_timeout: 120s\n  fail_fast: { heartbeat_timeout_polls: {} }",
    ),
    (
        "    args: [\"--log-verbose=0\"]",
        "    args: [\"--log-verbose=0\"]\n    volumes:\n      - { name: v, mount_path: /m, host_path: {}, read_only: false }",
    ),
    (
        "    args: [\"--log-verbose=0\"]",
        "    args: [\"--log-verbose=0\"]\n    volumes:\n      - { name: {}, mount_path: /m, config_map: c }",
    ),
    (
        "    args: [\"--log-verbose=0\"]",
        "    args: [\"--log-verbose=0\"]\n    trace: { level: TIMESTAMPS, rate: {} }",
    ),
    ("  name: smoke", "  name: {}"),
    // A fault's times, each slot a `faults:` of its own (two are a duplicate key).
    (
        "version: 1",
        "version: 1\nfaults: [{ name: f, target: triton, at: {}, kind: kill, expect: { recover_within: 10s } }]",
    ),
    (
        "version: 1",
        "version: 1\nfaults: [{ name: f, target: triton, every: {}, kind: pause, duration: 1s, expect: { recover_within: 10s } }]",
    ),
    (
        "version: 1",
        "version: 1\nfaults: [{ name: f, target: triton, at: 5s, kind: pause, duration: {}, expect: { recover_within: {} } }]",
    ),
    (
        "version: 1",
        "version: 1\nfaults: [{ name: f, target: triton, every: 10s, jitter: {}, kind: restart, expect: { recover_within: 10s } }]",
    ),
    (
        "version: 1",
        "version: 1\nfaults: [{ name: f, target: triton, at: 5s, kind: network, duration: 1s, network: { delay: {}, jitter: {}, loss: 0.5 }, expect: { recover_within: 10s } }]",
    ),
];

fn mutate(mutations: &[(usize, String)]) -> String {
    let mut text = BASE.to_string();
    for (slot, value) in mutations {
        let (from, to) = SLOTS[*slot % SLOTS.len()];
        if text.contains(from) {
            text = text.replacen(from, &to.replace("{}", value), 1);
        }
    }
    text
}

/// A hostile matrix is refused with every diagnostic located, or plans a run of members within
/// the bounds; either within 1 s.
fn refused_with_its_field_or_planned(text: &str) -> Result<(), TestCaseError> {
    let started = Instant::now();
    match driver::matrix::parse(text, "hostile.yaml") {
        Err(e) => located(&e, text)?,
        Ok(m) => {
            let plan = driver::plan::RunPlan::new(&m, RunId::new("hostile"), None);
            prop_assert!(!plan.members().is_empty());
            prop_assert!(plan.members().len() <= driver::matrix::bounds::MAX_MEMBERS as usize);
        }
    }
    let took = started.elapsed();
    // (A bound that held nothing back would take minutes; 5 s leaves room for a busy machine.)
    prop_assert!(took < Duration::from_secs(5), "took {took:?}\n{text}");
    Ok(())
}

/// Every diagnostic of a refused file has its line and column and says something.
fn located(e: &driver::matrix::MatrixError, text: &str) -> Result<(), TestCaseError> {
    for d in e.diagnostics() {
        prop_assert!(d.position.is_some(), "no line and column: {e}\n{text}");
        prop_assert!(!d.message.is_empty(), "{e}");
    }
    prop_assert!(!e.diagnostics().is_empty(), "{e}");
    Ok(())
}

/// The matrices the project ships (test-matrices/), as (name, text); the known-issues file
/// among them is not a matrix.
fn shipped_matrices() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-matrices");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

/// Where a text's plain scalar values are: after a key's `: ` in block or flow style, to the
/// line's end, a `,`, `}`, `]` or a comment.
fn scalar_values(text: &str) -> Vec<std::ops::Range<usize>> {
    let value = regex::Regex::new(r#"(?m):[ \t]+([^\s\[\]{},#&*!|>'"][^,\]}#\n]*)"#).unwrap();
    value
        .captures_iter(text)
        .map(|c| c.get(1).unwrap().range())
        .collect()
}

/// What kind of value a scalar is, by its text: a duration, a whole number, a number, or text.
fn shape(value: &str) -> u8 {
    let duration = regex::Regex::new(r"^[0-9]+[a-zµ]+$").unwrap();
    let value = value.trim();
    if duration.is_match(value) {
        0
    } else if value.parse::<i64>().is_ok() {
        1
    } else if value.parse::<f64>().is_ok() {
        2
    } else {
        3
    }
}

/// `text` with the `n`-th (modulo) scalar value of each mutation replaced by its value, or,
/// when the mutation says `all`, every value of the same shape (every duration at once: sums of
/// them overflow).
fn mutate_scalars(text: &str, mutations: &[(usize, bool, String)]) -> String {
    let spans = scalar_values(text);
    let mut chosen: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    for (n, all, value) in mutations {
        let picked = &spans[n % spans.len()];
        let like = shape(&text[picked.clone()]);
        for span in &spans {
            if span == picked || (*all && shape(&text[span.clone()]) == like) {
                chosen.push((span.clone(), value.as_str()));
            }
        }
    }
    chosen.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
    chosen.dedup_by_key(|(span, _)| span.start);
    let mut text = text.to_string();
    for (span, value) in chosen {
        text.replace_range(span, value);
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_generated_matrix_is_refused_with_its_field_or_gives_a_valid_plan(
        mutations in proptest::collection::vec((0..SLOTS.len(), hostile_value()), 1..4)
    ) {
        refused_with_its_field_or_planned(&mutate(&mutations))?;
    }

    /// Any value of any matrix (or known-issues file) the project ships, not only the slots
    /// above.
    #[test]
    fn any_value_of_a_shipped_matrix_made_hostile_is_refused_with_its_field_or_planned(
        file in 0..shipped_matrices().len(),
        mutations in proptest::collection::vec((0..10_000usize, any::<bool>(), hostile_value()), 1..4)
    ) {
        let (name, text) = &shipped_matrices()[file];
        let text = mutate_scalars(text, &mutations);
        if name.ends_with("known-issues.yaml") {
            if let Err(e) = driver::matrix::parse_known_issues(&text, "hostile.yaml") {
                located(&e, &text)?;
            }
        } else {
            refused_with_its_field_or_planned(&text)?;
        }
    }
}

/// One hostile matrix of each kind the bounds exist for, through the binary: `driver validate`
/// and `driver run` exit 2 within 1 s naming the field, and the run launches nothing.
#[test]
fn each_kind_of_hostile_matrix_exits_2_within_1_s_and_launches_nothing() {
    let cases: &[(usize, &str, &str)] = &[
        (0, "99999999999999h", "run.duration: "),
        (1, "1ns", "run.poll_interval: "),
        (4, "4294967295", "server_groups.triton.instances: "),
        (5, "10000000", "client_groups.grpc-clients.instances: "),
        (6, "4294967295", "client_templates.grpc-all.concurrency: "),
        (9, "1e-300", "client_templates.grpc-all.load.rate: "),
        (
            12,
            "evil",
            "client_templates.grpc-all.extra_args[0]: --run-id is set by the driver",
        ),
        (
            13,
            "sqlite:///tmp/x",
            "client_templates.grpc-all.extra_args[0]: --store-url is set by the driver",
        ),
        (16, "/", "server_templates.cpu.volumes[0].host_path: "),
        (17, "dshm", "server_templates.cpu.volumes[0].name: "),
        (15, "4294967295", "run.fail_fast.heartbeat_timeout_polls: "),
        (22, "584000000000y", "faults[0].duration: "),
        (21, "0s", "faults[0].every: must be longer than zero"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (slot, value, expected) in cases {
        let text = mutate(&[(*slot, value.to_string())]);
        let file = dir.path().join(format!("hostile-{slot}.yaml"));
        std::fs::write(&file, &text).unwrap();
        let runs = dir.path().join("runs");
        for args in [
            vec!["validate", file.to_str().unwrap()],
            vec![
                "run",
                file.to_str().unwrap(),
                "--runs-dir",
                runs.to_str().unwrap(),
                "--no-progress",
            ],
        ] {
            let started = Instant::now();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_driver"))
                .args(&args)
                .env_remove("DATABASE_URL")
                .output()
                .unwrap();
            let took = started.elapsed();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {value}: {stderr}");
            assert!(
                took < Duration::from_secs(1),
                "{args:?} {value}: took {took:?}"
            );
            let line = format!("{}:", file.display());
            assert!(
                stderr.contains(&line) && stderr.contains(expected),
                "{args:?} {value}: want {line}LINE:COL: {expected}...\n{stderr}"
            );
        }
        assert!(
            !Path::new(&runs).exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
            "a run directory was made for a refused matrix"
        );
    }
}

/// `driver run`'s durations out of their bounds are bad input too: `--duration` past 30 days
/// (or zero), `--pending-timeout` past a day (a pod's deadline would overflow the clock).
#[test]
fn duration_flags_out_of_bounds_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("smoke.yaml");
    std::fs::write(&file, BASE.replace("../models", "/nonexistent-models")).unwrap();
    for (flag, value, bounds) in [
        (
            "--duration",
            "9999999h",
            "is out of bounds: from 0s to 30days",
        ),
        ("--duration", "0s", "must be longer than zero"),
        (
            "--pending-timeout",
            "584000000000y",
            "is out of bounds: from 0s to 1day",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_driver"))
            .args(["run", file.to_str().unwrap(), flag, value, "--runs-dir"])
            .arg(dir.path().join("runs"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} ")) && stderr.contains(bounds),
            "{flag} {value}: {stderr}"
        );
    }
}

/// A local run refuses, before anything starts, what this machine does not have as the matrix
/// names it: a tritonserver that is no executable file, a model repository that is no
/// directory, a worker binary that is a directory, a client program not on PATH; every one at
/// once, each naming its file, line, column and field (exit 2, no run directory). The same
/// templates with what they name in place start (the twin: nothing refused).
#[test]
fn a_local_run_refuses_binaries_and_repositories_this_machine_lacks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("tritonserver"), "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::create_dir(d.join("worker")).unwrap();
    let matrix = |server: &str, repo: &str, worker: &str, program: &str| {
        format!(
            "version: 1\nrun: {{ name: lacks, duration: 1s, server_ready_timeout: 1s }}\n\
             server_templates:\n  cpu:\n    tritonserver: {{ binary: {server} }}\n    \
             model_repositories: [models, {repo}]\n\
             server_groups:\n  s: {{ template: cpu, instances: 2 }}\n\
             client_templates:\n  rust:\n    worker: {{ binary: {worker} }}\n    protocol: grpc\n  \
             foreign:\n    worker: {{ binary: auto }}\n    protocol: grpc\n    \
             models: [{{ name: add_sub }}]\n    client: {{ command: [{program}, x.py], interface: 1 }}\n\
             client_groups:\n  a: {{ template: rust, instances: 1, target: s }}\n  \
             b: {{ template: foreign, instances: 1, target: s }}\n"
        )
    };
    let run = |text: String| {
        let file = d.join("lacks.yaml");
        std::fs::write(&file, text).unwrap();
        let runs = d.join("runs");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_driver"))
            .args(["run", file.to_str().unwrap(), "--no-progress", "--runs-dir"])
            .arg(&runs)
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        (out, runs)
    };
    std::fs::create_dir(d.join("models")).unwrap();
    let (out, runs) = run(matrix(
        "tritonserver",
        "missing",
        "worker",
        "no-such-python",
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let file = d.join("lacks.yaml").display().to_string();
    for expected in [
        "5:29: server_templates.cpu.tritonserver.binary: ",
        "6:34: server_templates.cpu.model_repositories[1]: model repository ",
        "11:23: client_templates.rust.worker.binary: ",
        "17:25: client_templates.foreign.client.command[0]: no program \"no-such-python\" on PATH",
    ] {
        assert!(
            stderr.contains(&format!("{file}:{expected}")),
            "{expected}\n{stderr}"
        );
    }
    assert!(
        stderr.contains("tritonserver is not executable"),
        "{stderr}"
    );
    assert!(stderr.contains("worker is not a file"), "{stderr}");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "a run directory was made for a refused matrix"
    );

    // The twin: each in place, the run starts (and fails on its own: this tritonserver exits).
    std::fs::set_permissions(
        d.join("tritonserver"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir(d.join("missing")).unwrap();
    let worker = std::path::PathBuf::from(env!("CARGO_BIN_EXE_driver")).with_file_name("worker");
    let (out, _) = run(matrix(
        "tritonserver",
        "missing",
        worker.to_str().unwrap(),
        "sh",
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("lacks.yaml:"), "{stderr}");
}
