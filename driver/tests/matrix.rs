//! The test matrix: committed matrices validate, malformed ones give exact diagnostics, groups
//! expand into the right members, and the committed JSON schema is the generated one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use driver::matrix::{
    self, Artifact, ClientMember, LoadMode, Matrix, MatrixError, Position, Protocol, TraceLevel,
};
use stress_common::scenario::Scenario;

const BAD_DIR: &str = "tests/fixtures/bad-matrices";

fn test_matrices_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-matrices")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        // Known issues files are lists of entries, not matrices (checked below).
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("known-issues"))
        })
        .collect();
    files.sort();
    files
}

fn load_committed(name: &str) -> Matrix {
    let path = test_matrices_dir().join(name);
    matrix::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> String {
    match matrix::parse(text, "inline.yaml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_committed_matrix_validates() {
    let files = yaml_files(&test_matrices_dir());
    let names: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for required in [
        "smoke.yaml",
        "smoke-http.yaml",
        "heterogeneous.yaml",
        "two-groups.yaml",
        "nightly-soak.yaml",
    ] {
        assert!(
            names.contains(required),
            "test-matrices/{required} is missing"
        );
    }
    let errors: Vec<String> = files
        .iter()
        .filter_map(|f| matrix::load(f).err().map(|e| e.to_string()))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// One malformed matrix per rule, with the exact diagnostics it must give.
const BAD: &[(&str, &str)] = &[
    (
        "bad-sweep.yaml",
        "15:13: sweep.parallel: must be at least 1 (the variants measured at once)\n\
         17:5: sweep.parameters.models.fixed_capacity.instance_group[0].cont: `instance_group[0].cont`: ModelInstanceGroup has no field `cont` (its fields: name, count, gpus, kind, profile, rate_limiter, passive, secondary_devices, host_policy)\n\
         18:56: sweep.parameters.models.fixed_capacity.instance_group[0].count[1]: `instance_group[0].count` takes an integer, found \"2\"\n\
         18:64: sweep.parameters.models.fixed_capacity.instance_group[0].count[3]: value 1 is listed twice\n\
         19:5: sweep.parameters.models.fixed_capacity.instance_group.count: `instance_group.count`: `instance_group` is a list: name an entry, `instance_group[0].count`\n\
         20:74: sweep.parameters.models.fixed_capacity.dynamic_batching.max_queue_delay_microseconds: an empty list of values\n\
         21:62: sweep.parameters.models.fixed_capacity.instance_group[0].kind[1]: `instance_group[0].kind` takes one of KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL, found \"KIND_TPU\"\n\
         22:19: sweep.parameters.server.args[0]: server.args takes a list of strings (the whole argument list), found \"--log-verbose=1\"\n\
         23:34: sweep.parameters.server.env.OMP_NUM_THREADS[0]: server.env.OMP_NUM_THREADS takes a string, found 1 (quote it: \"1\")\n\
         24:5: sweep.parameters.server.flags: unknown parameter `server.flags`: use server.args, server.tritonserver.binary, server.tritonserver.image, server.version, server.env.NAME, server.resources or models.NAME.FIELD\n\
         25:30: sweep.constraints.gpu_memory: \"8 gigs\" is not a size: write a number and a unit, e.g. 8GiB, 512MiB, 8Gi or 8GB",
    ),
    (
        "sweep-grid-too-large.yaml",
        "15:3: sweep.parameters: the grid has 9 variants (models.fixed_capacity.instance_group[0].count: 3 x models.fixed_capacity.dynamic_batching: 3), more than max_variants 8: fewer values, a larger max_variants, or `search: quick`",
    ),
    (
        "bad-faults.yaml",
        "13:27: faults[0].target: unknown target \"triton-2\": name a launched server group (triton), one of its members (`<group>-<index>`), a client group or member (an evict or drain), or `store` (a store-restart) or `api-server` (an api-outage)\n\
         14:13: faults[1].name: fault name \"kill\" is used twice (see faults[0].name at 13:7)\n\
         14:27: faults[1].target: \"staging\" names servers that already run (endpoints): the driver injects faults only into servers it launched\n\
         15:41: faults[2].at: the fault at 2m 10s comes after the run's end (run.duration 2m)\n\
         16:45: faults[3].at: the run ends (2m) before the fault's recovery can be judged (injected at 1m 40s, lasting 5s, recovery allowed 1m): inject it earlier or run longer\n\
         17:44: faults[4].every: give `at` (once) or `every` (repeatedly), not both\n\
         18:5: faults[5]: missing `at` (once, from the start of the load phase) or `every` (repeatedly)\n\
         19:5: faults[6]: missing `duration`: how long the pause lasts\n\
         20:61: faults[7].duration: a kill is an instant: it has no duration (its server's start-up is part of the recovery)\n\
         21:93: faults[8].network.loss: must be a fraction above 0 and at most 1 (0.05 = 5%), found 1.5\n\
         22:5: faults[9]: missing `network: {delay, jitter, loss}`: what the network does\n\
         23:59: faults[10].network: `network` is read only with kind: network, not kill\n\
         24:13: faults[11].name: fault name \"Bad_Name\" is not a DNS-1123 label\n\
         24:88: faults[11].expect.recover_within: must be longer than zero\n\
         25:34: faults[12].target: kind store-restart acts on the run's status store: its target is `store`\n\
         26:33: faults[13].target: `store` is not a server: only kind store-restart targets it\n\
         27:5: faults[14]: missing `duration`: how long the api-outage lasts\n\
         28:32: faults[15].target: kind api-outage acts on the driver's access to the Kubernetes API server: its target is `api-server`\n\
         29:32: faults[16].target: `api-server` is not a server: only kind api-outage targets it\n\
         30:34: faults[17].target: `clients-0` names workers: only kinds evict and drain target them (kind kill acts on servers)\n\
         32:5: faults[19]: missing `duration`: how long the drain lasts",
    ),
    (
        "overlapping-faults.yaml",
        "13:39: faults[1].at: kill at 40s overlaps freeze on triton-0 (injected at 20s, its recovery allowed until 45s): faults on one member must not overlap; space them further apart or lower expect.recover_within (see faults[0].name at 12:7)",
    ),
    (
        "unknown-field.yaml",
        "5:3: run.durration: unknown field `durration`, expected one of name, duration, poll_interval, warmup, server_ready_timeout, namespace, keep_failed, fail_fast, mode, repeat, cells, slo, seed, otlp_forward",
    ),
    (
        "wrong-type.yaml",
        "12:16: server_groups.triton.instances: expected a non-negative whole number (u32), found `one`",
    ),
    ("missing-field.yaml", "2:1: run: missing field `duration`"),
    (
        "unsupported-version.yaml",
        "1:10: version: unsupported matrix version 2 (this driver reads version 1)",
    ),
    (
        "undefined-template.yaml",
        "11:15: server_groups.triton.template: undefined server template \"cpu-pyhton\" (defined: cpu)",
    ),
    (
        "undefined-target.yaml",
        "21:13: client_groups.grpc-clients.target: undefined server group \"trtion\" (defined: triton)",
    ),
    (
        "duplicate-key.yaml",
        "22:3: client_groups.grpc-clients: duplicate key \"grpc-clients\" (first at 18:3)",
    ),
    (
        "group-name-clash.yaml",
        "22:3: client_groups.triton: \"triton\" names both a server group and a client group; group names must be unique (see server_groups.triton at 10:3)",
    ),
    (
        "invalid-name.yaml",
        "18:3: client_groups.gRPC_clients: client group name \"gRPC_clients\" is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)",
    ),
    (
        "zero-instances.yaml",
        "20:16: client_groups.grpc-clients.instances: must be at least 1, found 0",
    ),
    (
        "zero-heartbeat-limit.yaml",
        "6:30: run.fail_fast.heartbeat_timeout_polls: must be at least 1, found 0",
    ),
    (
        "zero-weight.yaml",
        "17:47: client_templates.grpc-mix.scenarios.Timeout: scenario weight must be at least 1, found 0 (leave the scenario out instead)",
    ),
    (
        "negative-weight.yaml",
        "17:47: client_templates.grpc-mix.scenarios.Timeout: expected a non-negative whole number (u32), found `-60`",
    ),
    (
        "unknown-scenario.yaml",
        "19:7: client_templates.grpc-mix.scenarios.SequenceInvalid: unknown scenario \"SequenceInvalid\" (known: Timeout, ImageClassification, CrashingClient, SequenceNoEnd, SequenceValidNoEnd, SequenceValidValid, SequenceNoStart, SequenceValid, PerfAnalyzer, Load, Infer)",
    ),
    (
        "zero-duration.yaml",
        "4:13: run.duration: must be longer than zero",
    ),
    (
        "negative-duration.yaml",
        "4:13: run.duration: invalid duration \"-60s\": expected number at 0 (write e.g. \"90s\", \"5m\", \"8h\" or \"1h 30m\")",
    ),
    (
        "poll-interval-too-long.yaml",
        "5:18: run.poll_interval: poll interval 2m is longer than the run duration 1m",
    ),
    (
        "binary-and-image.yaml",
        "7:19: server_templates.cpu.tritonserver: exactly one of `binary` or `image` must be set, found both",
    ),
    (
        "neither-binary-nor-image.yaml",
        "15:13: client_templates.grpc-mix.worker: exactly one of `binary` or `image` must be set, found neither",
    ),
    (
        "invalid-protocol.yaml",
        "16:15: client_templates.grpc-mix.protocol: unknown variant `tcp`, expected one of grpc, http",
    ),
    (
        "corr-id-block-too-small.yaml",
        "21:25: client_groups.grpc-clients.corr_id_block_size: block of 20 correlation ids is smaller than the 40 that 4 streams need (10 each; template \"grpc-mix\" has concurrency 4)",
    ),
    (
        "corr-id-block-zero.yaml",
        "21:25: client_groups.grpc-clients.corr_id_block_size: must be at least 1, found 0",
    ),
    (
        "too-many-args.yaml",
        "9:11: server_templates.cpu.args: 257 arguments is more than the 256 allowed\n\
         18:17: client_templates.grpc-mix.extra_args: 301 arguments is more than the 256 allowed\n\
         18:18: client_templates.grpc-mix.extra_args[0]: --run-id is set by the driver for every worker; use the matrix field that sets it instead of extra_args",
    ),
    (
        "empty-artifacts.yaml",
        "7:29: server_templates.cpu.tritonserver.binary: must not be empty\n\
         15:22: client_templates.grpc-mix.worker.image: must not be empty",
    ),
    (
        "syntax-error.yaml",
        "9:14: server_templates.cpu.model_repositories: illegal placement of ':' indicator",
    ),
    (
        "bad-volumes.yaml",
        "10:9: server_templates.gpu.volumes[0]: exactly one of host_path, persistent_volume_claim or config_map must be set, found 2\n\
         11:21: server_templates.gpu.volumes[0].mount_path: mount_path \"mnt/models\" must be an absolute path\n\
         14:9: server_templates.gpu.volumes[1]: exactly one of host_path, persistent_volume_claim or config_map must be set, found 0\n\
         14:15: server_templates.gpu.volumes[1].name: duplicate volume name \"models\" (also volumes[0])",
    ),
    (
        "bad-model-image.yaml",
        "9:61: server_templates.relative.model_image.path: path \"models\" must be an absolute path other than /\n\
         13:27: server_templates.clashes.model_image.image: must not be empty\n\
         13:38: server_templates.clashes.model_image.path: path \"/dev/shm\" is where the kube launcher mounts its own volume \"dshm\"; choose another\n\
         13:56: server_templates.clashes.model_image.source: source \"models\" must be an absolute path other than /\n\
         17:61: server_templates.not-served.model_image.path: path \"/qa/\" is also volumes[1]'s mount_path\n\
         17:61: server_templates.not-served.model_image.path: path \"/qa/\" is not among model_repositories (/models), so Triton would not serve the copied models (add it there)\n\
         19:17: server_templates.not-served.volumes[0].name: volume name \"dshm\" is the kube launcher's own (reserved: dshm, traces, tmp, model-image, model-configs)",
    ),
    (
        "model-unknown-key.yaml",
        "19:9: client_templates.infer.models[0].wieght: unknown field `wieght`, expected one of name, weight, version, shape, input_data, batch_size",
    ),
    (
        "bad-request-intervals.yaml",
        "15:32: client_templates.negative.load.request_intervals: tests/fixtures/bad-matrices/gaps-negative.txt: line 4: interval -200 is negative: gaps are microseconds >= 0\n\
         19:32: client_templates.missing.load.request_intervals: tests/fixtures/bad-matrices/no-such-gaps.txt: No such file or directory (os error 2)\n\
         23:32: client_templates.empty.load.request_intervals: tests/fixtures/bad-matrices/gaps-empty.txt: no interval: the file needs one gap in microseconds per line",
    ),
    (
        "bad-capacity.yaml",
        "19:27: client_templates.open-loop.scenarios.SequenceValid: capacity mode drives the Load and Infer scenarios only, not SequenceValid\n\
         20:5: client_templates.open-loop.load: capacity mode drives a closed-loop concurrency: remove the open-loop `load`\n\
         27:15: capacity.target_p99: must be longer than zero\n\
         28:18: capacity.decrease_rate: must be above 0 and below 1, found 1.5\n\
         29:14: capacity.tolerance: must be at least 0 and below 1, found -0.1\n\
         30:19: capacity.check_interval: check interval 1s is shorter than the poll interval 2s (workers report once per poll)\n\
         31:24: capacity.phases[1]: phase production is listed twice\n\
         32:20: capacity.min_concurrency: client group clients has 3 workers, each keeping at least one request in flight: min_concurrency must be at least 3",
    ),
    (
        "bad-autoscale.yaml",
        "27:15: capacity.hpa_margin: must be above 0 and at most 1, found 1.5\n\
         28:22: capacity.prometheus.url: a Prometheus URL is an http:// or https:// URL, found \"prometheus:9090\"",
    ),
    (
        "bad-autoscale-selector.yaml",
        "27:15: capacity.hpa_margin: must be above 0 and at most 1, found 0\n\
         28:58: capacity.prometheus.selector: give the label matchers without braces (e.g. job=\"triton\"), found \"{job=\\\"triton\\\"}\"",
    ),
    (
        "capacity-unknown-phase.yaml",
        "26:24: capacity.phases[1]: unknown variant `warp`, expected one of individual, production, exploration, spike",
    ),
    (
        "bad-spike.yaml",
        "28:24: capacity.spike.target_rps: must be a number of requests per second of at least 1 and at most 10000000, found 0\n\
         28:37: capacity.spike.duration: 2s is shorter than capacity.check_interval 5s: not one check window would fit in it\n\
         28:59: capacity.spike.recovery_timeout: 1s is shorter than capacity.check_interval 5s: not one check window would fit in it",
    ),
    (
        // Its SLO's free-form scenario is no problem: a foreign client names its own.
        "bad-client.yaml",
        "19:5: client_templates.python.scenarios: a client program runs its own scenarios: `scenarios` is for the worker's own (leave it out)\n\
         20:57: client_templates.python.client.interface: interface 2 is not spoken here: the worker speaks interface 1 (docs/clients.md)\n\
         20:67: client_templates.python.client.image: a client image runs the worker copied from the worker's image: give `worker: {image: ...}` (the kube launcher), or leave `image` out\n\
         20:82: client_templates.python.client.env.1BAD: \"1BAD\" is not an environment variable name (letters, digits and '_', not starting with a digit)",
    ),
    (
        // One server cannot write trace files and export OpenTelemetry spans; a foreign
        // client's requests are not the worker's to trace.
        "bad-traced-clients.yaml",
        "9:5: server_templates.cpu.trace: server template \"cpu\" writes Triton's trace files (trace.mode triton), and client template \"traced\" traces requests to its servers (trace_share), which makes them export OpenTelemetry spans: one server cannot do both (drop one, or use trace.mode opentelemetry) (see client_groups.clients.template at 26:5)\n\
         23:5: client_templates.python.trace_share: a client program sends its own requests, which the worker cannot trace: `trace_share` is for the worker's own scenarios",
    ),
    (
        // Infer's answer checks on templates that run no Infer; a tolerance below 0.
        "bad-answer-checks.yaml",
        "18:5: client_templates.load.tolerance: `tolerance` checks the answers of the Infer scenario, which this template does not run (give `models`, or list Infer in `scenarios`)\n\
         19:5: client_templates.load.consistency: `consistency` checks the answers of the Infer scenario, which this template does not run (give `models`, or list Infer in `scenarios`)\n\
         24:5: client_templates.python.consistency: `consistency` checks the answers of the Infer scenario, which this template does not run (give `models`, or list Infer in `scenarios`)\n\
         29:16: client_templates.infer.tolerance: a tolerance is a finite number >= 0, not -1",
    ),
    (
        "bad-trace-share.yaml",
        "17:18: client_templates.traced.trace_share: a share of requests is from 0 to 1, not 1.5",
    ),
    (
        "bad-cells.yaml",
        "5:10: run.cells: cells in turn are runs of their own: not with `repeat`, `compare` or a sweep",
    ),
    (
        "bad-otlp-forward.yaml",
        "5:17: run.otlp_forward: \"ftp://collector:4318/v1/traces\": an http(s) URL, not ftp:",
    ),
    (
        "bad-client-command.yaml",
        "17:24: client_templates.python.client.command: the array needs the program first",
    ),
    (
        "bad-slo.yaml",
        "6:32: run.slo[0].scenario: unknown scenario \"Lod\"; one of Timeout, ImageClassification, CrashingClient, SequenceNoEnd, SequenceValidNoEnd, SequenceValidValid, SequenceNoStart, SequenceValid, PerfAnalyzer, Load, Infer\n\
         6:42: run.slo[0].max: p99 is a latency: give a duration like 50ms, found \"50\" (time unit needed, for example 50sec or 50ms)\n\
         7:34: run.slo[1].max: must be a number >= 0, found -0.1\n\
         8:7: run.slo[2]: a rule needs `max` or `min` (or both)\n\
         9:29: run.slo[3].model: model \"resnet\" is not among the `models:` of client template(s) load\n\
         9:42: run.slo[3].min: min is above max (2 > 1)\n\
         28:31: client_groups.clients.slo[0].min: qps needs a number, found \"fast\"\n\
         29:27: regression.min_effect: must be a fraction of at least 0 and below 10 (0.1 = 10%), found -1",
    ),
    (
        "bad-report.yaml",
        "5:11: run.repeat: must be from 1 to 100 runs, found 0\n\
         25:12: report.webhook: a webhook is an http:// or https:// URL, found \"ftp://hooks.example.com/x\"\n\
         26:20: report.webhook_timeout: 0s is out of bounds: from 1s to 10m\n\
         27:36: regression.change_point_window: must be from 4 to 500 runs (a change needs runs on both sides), found 3",
    ),
    (
        "bad-trace.yaml",
        "9:54: server_templates.otel-no-url.trace.log_frequency: `log_frequency` is for mode triton (trace files)\n\
         9:87: server_templates.otel-no-url.trace.export_delay: 5m is out of bounds: from 10ms to 1m\n\
         13:59: server_templates.otel-bad-url.trace.url: an OTLP/HTTP endpoint is an http:// or https:// URL, found \"collector:4318\"\n\
         17:33: server_templates.file-with-url.trace.url: `url` is for mode opentelemetry (triton mode writes files in the run directory)\n\
         17:65: server_templates.file-with-url.trace.resource: `resource` is for mode opentelemetry\n\
         17:85: server_templates.file-with-url.trace.queue_size: `queue_size` is for mode opentelemetry",
    ),
    (
        "spike-missing.yaml",
        "26:24: capacity.phases[1]: phase spike needs `capacity.spike: {target_rps, duration}`",
    ),
    (
        "spike-no-rate.yaml",
        "27:3: capacity.spike: missing field `target_rps`",
    ),
    (
        "spike-unused.yaml",
        "27:3: capacity.spike: a spike is set, but `phases` has no spike",
    ),
    (
        "capacity-phases.yaml",
        "15:3: client_templates.load: the individual and exploration phases switch among the template's `models:`, and it has none\n\
         31:25: capacity.exploration[0].c: model c is not among client template infer's models\n\
         31:33: capacity.exploration[1]: a mix needs at least one model\n\
         31:42: capacity.exploration[2].b: model weight must be at least 1, found 0 (leave the model out instead)\n\
         31:52: capacity.exploration[3].a: 4000000000 (weight) is more than the 1000000 allowed\n\
         31:68: capacity.exploration[4].a@3: model a version 3 is not among client template infer's models (a mix names a version where the template's model names it)",
    ),
    (
        "capacity-missing.yaml",
        "5:9: run.mode: capacity mode needs a top-level `capacity:` block (at least target_p99)",
    ),
    (
        "bad-models.yaml",
        "18:34: client_templates.infer.models[0].weight: model weight must be at least 1, found 0 (leave the model out instead)\n\
         19:17: client_templates.infer.models[1].name: model name \"a/b\" contains '/', which the worker's flags reserve (\"@:,/=\")\n\
         19:36: client_templates.infer.models[1].batch_size: must be at least 1, found 0\n\
         20:35: client_templates.infer.models[2].shape.IN: dims must be whole numbers >= 0, found -1\n\
         20:49: client_templates.infer.models[2].shape.OUT: needs at least one dim\n\
         21:46: client_templates.infer.models[3].batch_size: batch size 4 differs from models[2]'s 2: versions of one model share its batch size\n\
         21:61: client_templates.infer.models[3].input_data: must be zero, random or a file, found an empty string\n\
         22:17: client_templates.infer.models[4].name: model add_sub is listed twice (first as models[0])\n\
         27:5: client_templates.load-only.models: models are driven by the Infer scenario, but `scenarios` does not list Infer (add it, or omit `scenarios` to run only Infer)",
    ),
    (
        "several-errors.yaml",
        "3:9: run.name: run name \"Bad Run\" is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)\n\
         19:15: client_groups.grpc-clients.template: undefined client template \"grpc\" (defined: grpc-mix)\n\
         20:16: client_groups.grpc-clients.instances: must be at least 1, found 0\n\
         21:13: client_groups.grpc-clients.target: undefined server group \"trtion\" (defined: triton)",
    ),
];

#[test]
fn every_bad_matrix_gives_its_exact_diagnostics() {
    let on_disk: BTreeSet<String> = yaml_files(Path::new(BAD_DIR))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = BAD.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        on_disk, expected,
        "every fixture in {BAD_DIR} needs an expected message here, and every expected message a fixture"
    );

    let mut failures = Vec::new();
    for (file, lines) in BAD {
        let path = format!("{BAD_DIR}/{file}");
        let want: String = lines
            .lines()
            .map(|l| format!("{path}:{l}"))
            .collect::<Vec<_>>()
            .join("\n");
        match matrix::load(Path::new(&path)) {
            Ok(_) => failures.push(format!("{path}: accepted")),
            Err(e) => {
                let got = e.to_string();
                if got != want {
                    failures.push(format!("{path}:\n  want: {want}\n  got:  {got}"));
                }
                assert_eq!(e.diagnostics().len(), lines.lines().count(), "{path}");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn diagnostics_carry_file_position_and_path() {
    let err = matrix::load(Path::new(&format!("{BAD_DIR}/several-errors.yaml"))).unwrap_err();
    let d = &err.diagnostics()[3];
    assert_eq!(d.file, format!("{BAD_DIR}/several-errors.yaml"));
    assert_eq!(
        d.position,
        Some(Position {
            line: 21,
            column: 13
        })
    );
    assert_eq!(d.path, "client_groups.grpc-clients.target");
    assert_eq!(
        d.message,
        "undefined server group \"trtion\" (defined: triton)"
    );
    let positions: Vec<_> = err.diagnostics().iter().map(|d| d.position).collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted, "diagnostics come in file order");
}

#[test]
fn unreadable_file_is_a_read_error() {
    let err = matrix::load(Path::new("tests/fixtures/no-such-matrix.yaml")).unwrap_err();
    assert!(matches!(err, MatrixError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("tests/fixtures/no-such-matrix.yaml: cannot read the matrix: "),
        "{err}"
    );
    assert!(err.diagnostics().is_empty());
}

const MINIMAL: &str = "\
version: 1
run:
  name: mini
  duration: 10s
server_templates:
  cpu:
    tritonserver: { binary: auto }
    model_repositories: [models]
server_groups:
  triton: { template: cpu, instances: 1 }
client_templates:
  all:
    worker: { binary: auto }
    protocol: grpc
client_groups:
  clients: { template: all, instances: 1, target: triton }
";

#[test]
fn omitted_fields_take_their_defaults() {
    let m = matrix::parse(MINIMAL, "inline.yaml").unwrap();
    assert_eq!(m.run.poll_interval, Duration::from_secs(1));
    assert_eq!(m.run.warmup, Duration::ZERO);
    assert_eq!(m.run.server_ready_timeout, Duration::from_secs(120));
    assert_eq!(m.run.namespace, None);
    assert!(m.run.keep_failed);
    assert_eq!(m.run.fail_fast.heartbeat_timeout_polls, 3);
    assert_eq!(m.run.fail_fast.zero_qps_polls, 3);
    let t = &m.client_templates["all"];
    assert_eq!(t.concurrency, 4);
    assert_eq!(t.load, None);
    assert_eq!(
        t.scenario_weights(),
        Scenario::ALL
            .into_iter()
            .filter(|s| s.in_default_mix())
            .map(|s| (s, s.default_weight()))
            .collect::<Vec<_>>(),
        "the default mix, as the worker runs it (Infer only with models)"
    );
    assert_eq!(
        m.client_groups["clients"].corr_id_block_size,
        matrix::DEFAULT_CORR_ID_BLOCK_SIZE
    );
    assert_eq!(m.source_path, None);
    assert_eq!(m.resolve_local_path("models"), PathBuf::from("models"));
    assert_eq!(m.server_templates["cpu"].model_image, None);

    let imaged = MINIMAL.replacen(
        "    model_repositories: [models]
",
        "    model_repositories: [/qa]
    model_image: { image: my/models:1, path: /qa }
",
        1,
    );
    let m = matrix::parse(&imaged, "inline.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m.server_templates["cpu"].model_image,
        Some(matrix::ModelImage {
            image: "my/models:1".into(),
            path: "/qa".into(),
            source: "/models".into(),
        })
    );
}

#[test]
fn committed_matrices_say_what_they_should() {
    let smoke = load_committed("smoke.yaml");
    assert_eq!(smoke.run.duration, Duration::from_secs(60));
    assert_eq!(smoke.run.poll_interval, Duration::from_secs(1));
    let servers = smoke.servers();
    assert_eq!(servers.len(), 1);
    assert_eq!(
        servers[0].template.tritonserver,
        Artifact::Binary("auto".into())
    );
    assert!(servers[0].template.tritonserver.is_auto_binary());
    assert_eq!(servers[0].template.model_repositories, ["../models"]);
    let models = smoke.resolve_local_path("../models");
    assert!(
        models.ends_with("test-matrices/../models"),
        "{}",
        models.display()
    );
    let clients = smoke.clients();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].template.protocol, Protocol::Grpc);
    assert_eq!(clients[0].template.concurrency, 4);
    // Every scenario of the default mix, SequenceNoStart raised so it gets tests in a 60 s run.
    let weights = clients[0].template.scenario_weights();
    assert_eq!(
        weights.len(),
        Scenario::ALL.iter().filter(|s| s.in_default_mix()).count()
    );
    assert!(weights.contains(&(Scenario::SequenceNoStart, 40)));
    assert_eq!(
        smoke.qualified_name(&clients[0].name),
        "smoke-grpc-clients-0"
    );

    let http = load_committed("smoke-http.yaml");
    assert_eq!(http.clients()[0].template.protocol, Protocol::Http);

    let hetero = load_committed("two-groups.yaml");
    assert_eq!(hetero.server_groups.len(), 2);
    let protocols: Vec<_> = hetero
        .client_groups
        .values()
        .map(|g| hetero.client_templates[&g.template].protocol)
        .collect();
    assert_eq!(protocols, [Protocol::Grpc, Protocol::Http]);
    let targets: BTreeSet<_> = hetero.client_groups.values().map(|g| &g.target).collect();
    assert_eq!(
        targets.len(),
        2,
        "each client group targets its own server group"
    );
    assert_eq!(
        hetero.client_templates["http-load"].load,
        Some(LoadMode::Rate(200.0))
    );
    let trace = hetero.server_templates["cpu-traced"]
        .trace
        .as_ref()
        .unwrap();
    assert_eq!(trace.level, TraceLevel::Timestamps);
    assert_eq!(
        trace.args(),
        [
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=1000",
            "--trace-config",
            "triton,log-frequency=100"
        ]
    );
    assert!(trace.writes_files());
    let otel: driver::matrix::TraceSettings = serde_saphyr::from_str(
        "{level: TIMESTAMPS, rate: 10, mode: opentelemetry, url: 'http://c:4318/v1/traces', \
         resource: {service.name: nightly}}",
    )
    .unwrap();
    assert!(!otel.writes_files(), "OpenTelemetry exports spans, no file");
    assert_eq!(
        otel.args()[4..],
        [
            "--trace-config",
            "mode=opentelemetry",
            "--trace-config",
            "opentelemetry,url=http://c:4318/v1/traces",
            "--trace-config",
            "opentelemetry,resource=service.name=nightly"
        ]
    );

    let soak = load_committed("nightly-soak.yaml");
    assert_eq!(soak.run.duration, Duration::from_secs(8 * 3600));
    assert_eq!(soak.run.namespace.as_deref(), Some("triton-stress"));
    assert!(
        soak.servers()
            .iter()
            .all(|s| s.template.tritonserver.image().is_some())
    );
    assert!(
        soak.clients()
            .iter()
            .all(|c| c.template.worker.image().is_some())
    );
    assert!(soak.servers().len() > 1 && soak.clients().len() > 1);
    // NVIDIA's images hold no models: every server gets the QA models image's copy and serves it.
    for s in soak.servers() {
        let m = s.template.model_image.as_ref().expect("a model image");
        assert_eq!(
            (m.image.as_str(), m.source.as_str()),
            ("triton-stress/models:dev", matrix::MODEL_IMAGE_SOURCE)
        );
        assert_eq!(s.template.model_repositories, std::slice::from_ref(&m.path));
    }
}

fn assert_blocks_disjoint(clients: &[ClientMember]) {
    let mut ranges: Vec<_> = clients.iter().map(|c| c.corr_ids.range()).collect();
    ranges.sort_by_key(|r| r.start);
    assert!(ranges.iter().all(|r| r.start >= 1 && !r.is_empty()));
    for pair in ranges.windows(2) {
        assert!(pair[0].end <= pair[1].start, "{ranges:?} overlap");
    }
}

#[test]
fn groups_expand_into_named_members_with_targets_and_disjoint_corr_id_blocks() {
    let m = load_committed("two-groups.yaml");
    let servers = m.servers();
    let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["triton-a-0", "triton-a-1", "triton-b-0"]);
    assert_eq!(
        servers
            .iter()
            .map(|s| (s.group.as_str(), s.index, s.template_name.as_str()))
            .collect::<Vec<_>>(),
        [
            ("triton-a", 0, "cpu"),
            ("triton-a", 1, "cpu"),
            ("triton-b", 0, "cpu-traced")
        ]
    );

    let clients = m.clients();
    let summary: Vec<_> = clients
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.target_group.as_str(),
                c.targets.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                c.corr_ids.base,
                c.corr_ids.size,
            )
        })
        .collect();
    let mib = 1 << 20;
    assert_eq!(
        summary,
        [
            (
                "grpc-clients-0",
                "triton-a",
                vec!["triton-a-0".to_string(), "triton-a-1".to_string()],
                1,
                mib
            ),
            (
                "grpc-clients-1",
                "triton-a",
                vec!["triton-a-0".to_string(), "triton-a-1".to_string()],
                1 + mib,
                mib
            ),
            (
                "http-clients-0",
                "triton-b",
                vec!["triton-b-0".to_string()],
                1 + 2 * mib,
                65536
            ),
        ]
    );
    assert_eq!(clients[1].corr_ids.range(), (1 + mib)..(1 + 2 * mib));
    assert_eq!(clients[0].template_name, "grpc-sequences");
    assert_blocks_disjoint(&clients);

    // One block size for all: client k starts at 1 + k * block_size.
    let soak = load_committed("nightly-soak.yaml");
    let clients = soak.clients();
    assert_eq!(clients.len(), 7);
    for (k, c) in clients.iter().enumerate() {
        assert_eq!(
            c.corr_ids.base,
            1 + k as u64 * matrix::DEFAULT_CORR_ID_BLOCK_SIZE
        );
        assert_eq!(c.targets, ["triton-0", "triton-1", "triton-2"]);
    }
    assert_blocks_disjoint(&clients);
}

/// The client × server matrix: every client implementation against every server build, the
/// Python clients' programs found beside the matrix whatever the working directory.
#[test]
fn the_heterogeneous_matrix_crosses_client_implementations_with_server_builds() {
    let m = load_committed("heterogeneous.yaml");
    let cells: BTreeSet<(String, String)> = m
        .client_groups
        .values()
        .map(|g| (g.template.clone(), g.target.clone()))
        .collect();
    assert_eq!(
        cells.len(),
        m.client_templates.len() * m.server_groups.len()
    );
    // Each cell alone: ten runs of their own.
    assert!(m.runs_cells_in_turn());
    assert_eq!(m.cells().len(), cells.len());
    let python: Vec<_> = m
        .clients()
        .into_iter()
        .filter_map(|c| c.template.client.map(|client| client.command))
        .collect();
    assert_eq!(
        python.len(),
        6,
        "Python 2.51 and 2.44, perf_analyzer, on each server"
    );
    let root = test_matrices_dir();
    for command in python {
        for word in command.argv().iter().filter(|w| !w.starts_with("--")) {
            let path = Path::new(word);
            assert!(path.is_absolute(), "{word}");
            assert!(
                path.starts_with(&root),
                "{word} is resolved beside the matrix"
            );
        }
    }
}

#[test]
fn a_matrix_survives_a_yaml_round_trip() {
    for name in ["heterogeneous.yaml", "two-groups.yaml", "nightly-soak.yaml"] {
        let mut m = load_committed(name);
        m.source_path = None;
        let text = serde_saphyr::to_string(&m).unwrap();
        let again = matrix::parse(&text, name).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again, m);
        // A cell run in turn is written out as its run's matrix and read back the same.
        for cell in m.cells() {
            let mut run = m.cell_run(&cell);
            run.source_path = None;
            let text = serde_saphyr::to_string(&run).unwrap();
            let again = matrix::parse(&text, name).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(again, run);
        }
    }
}

#[test]
fn anchors_aliases_and_merges_work_and_are_located_where_used() {
    let text = "\
version: 1
run: { name: merge, duration: 1m }
server_templates:
  base: &base
    tritonserver: { binary: auto }
    model_repositories: [models]
  verbose:
    <<: *base
    args: [--log-verbose=1]
server_groups:
  triton: { template: verbose, instances: 2 }
client_templates:
  all: &all
    worker: { binary: auto }
    protocol: grpc
    concurrency: 0
  again:
    <<: *all
    protocol: http
client_groups:
  clients: { template: again, instances: 1, target: triton }
";
    let err = matrix::parse(text, "inline.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "inline.yaml:16:18: client_templates.all.concurrency: must be at least 1, found 0\n\
         inline.yaml:18:9: client_templates.again.concurrency: must be at least 1, found 0"
    );
    let m = matrix::parse(
        &text.replace("concurrency: 0", "concurrency: 2"),
        "inline.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.server_templates["verbose"].model_repositories, ["models"]);
    assert_eq!(m.client_templates["again"].protocol, Protocol::Http);
    assert_eq!(m.client_templates["again"].concurrency, 2);
}

#[test]
fn every_duplicate_key_is_reported() {
    let text = MINIMAL.replace("  duration: 10s\n", "  duration: 10s\n  duration: 20s\n")
        + "  clients: { template: all, instances: 2, target: triton }\n";
    assert_eq!(
        parse_err(&text),
        "inline.yaml:5:3: run.duration: duplicate key \"duration\" (first at 4:3)\n\
         inline.yaml:18:3: client_groups.clients: duplicate key \"clients\" (first at 17:3)"
    );
}

#[test]
fn more_rules() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    scenarios: { Timeout: 1, timeout: 2 }\n",
            "inline.yaml:15:30: client_templates.all.scenarios.timeout: scenario Timeout is listed twice (as \"Timeout\" and \"timeout\")",
        ),
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    scenarios: {}\n",
            "inline.yaml:15:16: client_templates.all.scenarios: at least one scenario is required (omit `scenarios` to run all of them at their default weights)",
        ),
        (
            "    model_repositories: [models]\n",
            "    model_repositories: []\n    env: { GOOD_NAME: x, bad-name: y }\n    resources: { cpu: lots, memory: 2GB }\n",
            "inline.yaml:8:25: server_templates.cpu.model_repositories: at least one model repository is required\n\
             inline.yaml:9:26: server_templates.cpu.env.bad-name: \"bad-name\" is not an environment variable name (letters, digits and '_', not starting with a digit)\n\
             inline.yaml:10:23: server_templates.cpu.resources.cpu: invalid CPU quantity \"lots\" (write e.g. \"1\", \"2.5\" or \"500m\")\n\
             inline.yaml:10:37: server_templates.cpu.resources.memory: invalid memory quantity \"2GB\" (write e.g. \"512Mi\", \"2Gi\" or \"1G\")",
        ),
        (
            "  duration: 10s\n",
            "  duration: 10s\n  namespace: Stress\n  poll_interval: 0s\n",
            "inline.yaml:5:14: run.namespace: namespace \"Stress\" is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)\n\
             inline.yaml:6:18: run.poll_interval: 0s is out of bounds: from 100ms to 1h",
        ),
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    load: { rate: 0 }\n",
            "inline.yaml:15:19: client_templates.all.load.rate: load rate 0.0 must be from 0.001 to 10000000 requests per second",
        ),
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    load: { rate: 5, concurrency: 2 }\n",
            "inline.yaml:15:11: client_templates.all.load: exactly one of `concurrency`, `rate` or `request_intervals` must be set, found concurrency and rate",
        ),
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    load: { concurrency: 2, arrivals: poisson }\n",
            "inline.yaml:15:11: client_templates.all.load: `arrivals` goes with `rate` only",
        ),
        (
            "    protocol: grpc\n",
            "    protocol: grpc\n    load: { rate: 5, arrivals: bursty }\n",
            "inline.yaml:15:32: client_templates.all.load.arrivals: unknown variant `bursty`, expected one of constant, poisson",
        ),
        (
            "  clients: { template: all, instances: 1, target: triton }\n",
            "  a-very-long-client-group-name-that-is-still-a-dns-label-ok: { template: all, instances: 12, target: triton }\n",
            "inline.yaml:16:3: client_groups.a-very-long-client-group-name-that-is-still-a-dns-label-ok: member name \"mini-a-very-long-client-group-name-that-is-still-a-dns-label-ok-11\" is 66 characters long, more than the 63 of a DNS-1123 label (shorten run.name or the group name)",
        ),
        (
            "server_groups:\n  triton: { template: cpu, instances: 1 }\n",
            "server_groups: {}\n",
            "inline.yaml:9:1: server_groups: at least one server group is required\n\
             inline.yaml:15:51: client_groups.clients.target: undefined server group \"triton\" (none defined)",
        ),
        (
            "version: 1\n",
            "version: 1\nextra: true\n",
            "inline.yaml:2:1: extra: unknown field `extra`, expected one of version, run, server_templates, server_groups, client_templates, client_groups, capacity, regression, report, known_issues, faults, compare, sweep",
        ),
        (
            "  duration: 10s\n",
            "  duration: 10\n",
            "inline.yaml:4:13: run.duration: invalid duration \"10\": time unit needed, for example 10sec or 10ms (write e.g. \"90s\", \"5m\", \"8h\" or \"1h 30m\")",
        ),
    ];
    let mut failures = Vec::new();
    for (from, to, want) in cases {
        assert!(MINIMAL.contains(from), "{from}");
        let got = parse_err(&MINIMAL.replacen(from, to, 1));
        if got != *want {
            failures.push(format!("want: {want}\ngot:  {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A value inside a list or a map is read by its rule like any other: refused at its item,
/// every one reported at once.
#[test]
fn values_in_lists_and_maps_are_refused_at_their_item_all_at_once() {
    let long = "x".repeat(4097);
    let text = MINIMAL
        .replacen(
            "  duration: 10s\n",
            "  duration: 10s\n  server_ready_timeout: 0s\n",
            1,
        )
        .replacen(
            "    model_repositories: [models]\n",
            &format!("    model_repositories: [models, ' ']\n    args: [--log-verbose=0, {long}]\n"),
            1,
        )
        .replacen(
            "    protocol: grpc\n",
            "    protocol: grpc\n    scenarios: { Timeout: 1, Load: 1000001 }\n    extra_args: [-v, --member-id=x]\n",
            1,
        );
    assert_eq!(
        parse_err(&text),
        "inline.yaml:5:25: run.server_ready_timeout: must be longer than zero\n\
         inline.yaml:9:34: server_templates.cpu.model_repositories[1]: must not be empty\n\
         inline.yaml:10:29: server_templates.cpu.args[1]: an argument of 4097 bytes is longer than the 4096 allowed\n\
         inline.yaml:17:36: client_templates.all.scenarios.Load: 1000001 (weight) is more than the 1000000 allowed\n\
         inline.yaml:18:22: client_templates.all.extra_args[1]: --member-id is set by the driver for every worker; use the matrix field that sets it instead of extra_args"
    );
}

#[test]
fn empty_and_non_mapping_documents_are_rejected() {
    assert_eq!(
        parse_err(""),
        "inline.yaml:1:1: the file is empty; a matrix starts with `version: 1`"
    );
    assert_eq!(
        parse_err("version: 1\n"),
        "inline.yaml:1:1: missing field `run`"
    );
    assert_eq!(
        parse_err("- version: 1\n"),
        "inline.yaml:1:1: expected mapping start"
    );
}

#[test]
fn dns_labels() {
    assert!(matrix::is_dns_label("grpc-clients-0"));
    assert!(!matrix::is_dns_label("grpc_clients"));
    assert!(!matrix::is_dns_label(
        &"a".repeat(matrix::MAX_LABEL_LEN + 1)
    ));
}

/// The committed schema, and the matrix reference page made from it, are the generated ones.
/// `UPDATE_SCHEMA=1 cargo test -p driver schema` rewrites both.
#[test]
fn committed_schema_is_up_to_date() {
    let path = test_matrices_dir().join("schema.json");
    let generated = matrix::json_schema_text();
    let reference = test_matrices_dir().join("../docs/matrix-reference.md");
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
        std::fs::write(&reference, matrix::reference_markdown()).unwrap();
        return;
    }
    assert!(
        std::fs::read_to_string(&reference).unwrap_or_default() == matrix::reference_markdown(),
        "{} is not the reference generated from the matrix types; regenerate it with\n\n    UPDATE_SCHEMA=1 cargo test -p driver schema\n",
        reference.display()
    );
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is not the schema generated from the matrix types; regenerate it with\n\n    UPDATE_SCHEMA=1 cargo test -p driver schema\n",
        path.display()
    );
    let parsed: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(parsed, matrix::json_schema());
}

#[test]
fn models_parse_with_defaults_and_input_files_resolve_against_the_matrix() {
    let text = MINIMAL.replacen(
        "    protocol: grpc\n",
        "    protocol: grpc\n    models:\n      - name: add_sub\n      - { name: dyn, weight: 3, version: 2, shape: { IN: [4, 0] }, input_data: data/dyn.json, batch_size: 2 }\n      - { name: other, input_data: zero }\n      - { name: abs, input_data: /abs/d.json }\n",
        1,
    );
    let m = matrix::parse(&text, "inline.yaml").unwrap_or_else(|e| panic!("{e}"));
    let models = &m.client_templates["all"].models;
    assert_eq!(models.len(), 4);
    assert_eq!(
        (models[0].weight, models[0].version, models[0].batch_size),
        (1, None, None)
    );
    assert!(models[0].shape.is_empty() && models[0].input_data.is_none());
    assert_eq!(models[1].label(), "dyn@2");
    assert_eq!((models[1].weight, models[1].batch_size), (3, Some(2)));
    assert_eq!(models[1].shape["IN"], [4, 0]);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, &text).unwrap();
    let loaded = matrix::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let data: Vec<Option<String>> = loaded.client_templates["all"]
        .models
        .iter()
        .map(|m| m.input_data.clone())
        .collect();
    let want_file = dir.path().join("data/dyn.json").display().to_string();
    assert_eq!(
        data,
        [
            None,
            Some(want_file),
            Some("zero".into()),
            Some("/abs/d.json".into())
        ]
    );
}

#[test]
fn open_loop_schedules_parse_and_a_request_intervals_file_resolves_against_the_matrix() {
    let with_load = |load: &str| {
        MINIMAL.replacen(
            "    protocol: grpc\n",
            &format!("    protocol: grpc\n    load: {load}\n"),
            1,
        )
    };
    let m = matrix::parse(
        &with_load("{ rate: 250, arrivals: poisson }"),
        "inline.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m.client_templates["all"].load,
        Some(LoadMode::Poisson(250.0))
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gaps")).unwrap();
    std::fs::write(dir.path().join("gaps/burst.txt"), "0\n0\n3000\n").unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, with_load("{ request_intervals: gaps/burst.txt }")).unwrap();
    let loaded = matrix::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let want = dir.path().join("gaps/burst.txt");
    assert_eq!(
        loaded.client_templates["all"].load,
        Some(LoadMode::Intervals(want.clone()))
    );
    // The worker is told the absolute path (it runs in another directory).
    let plan = driver::plan::RunPlan::new(&loaded, stress_common::contract::RunId::new("r"), None);
    let assignment = plan.assignment(&plan.clients[0], &Default::default(), "sqlite://x", None);
    let args = driver::plan::worker_args(&plan.clients[0], &assignment);
    let at = args
        .iter()
        .position(|a| a == "--request-intervals")
        .expect("flag");
    assert_eq!(args[at + 1], want.display().to_string());
}

/// The nightly CronJob applies the shipped known issues: the file is in the matrix ConfigMap it
/// mounts, its arguments name it, and it loads.
#[test]
fn the_nightly_cronjob_applies_the_shipped_known_issues() {
    let base = test_matrices_dir().join("../deploy/base");
    let cronjob: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(base.join("cronjob.yaml")).unwrap())
            .unwrap();
    let args: Vec<String> = serde_json::from_value(
        cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    let at = args
        .iter()
        .position(|a| a == "--known-issues")
        .expect("the CronJob passes --known-issues");
    assert_eq!(args[at + 1], "/matrix/known-issues.yaml");
    let kustomization: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(base.join("kustomization.yaml")).unwrap())
            .unwrap();
    let files = &kustomization["configMapGenerator"][0]["files"];
    assert!(
        files
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "known-issues.yaml"),
        "{files}"
    );
    let issues = matrix::load_known_issues(&base.join("known-issues.yaml")).unwrap();
    assert!(
        issues
            .iter()
            .any(|k| k.issue.id == "triton-2.51-sequence-reaper")
    );
}
