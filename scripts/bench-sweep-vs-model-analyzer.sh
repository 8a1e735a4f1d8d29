#!/usr/bin/env bash
# Which configuration serves most at a p99 target, two ways, on this machine (issue 32's
# benchmark): NVIDIA's triton-model-analyzer (PyPI 1.58, `model-analyzer profile`, local launch
# mode, CPU only: a tritonserver per model-config variant, perf_analyzer against each at the
# concurrencies of CONCURRENCY, a constraint p99 <= TARGET_MS, objective throughput) and the
# driver's sweep (test-matrices/sweep.yaml with only the instance-count parameter: a tritonserver
# per variant, a capacity search at p99 <= TARGET_MS by two gRPC workers, the best measured
# again). Both use the project's tritonserver 2.51 and the same model and search space: by
# default `fixed_capacity` (50 ms per request per instance) with 1, 2 and 4 instances; MODEL_DIR,
# PARAM and VALUES sweep another model's field. Prints each tool's
# capacity per variant, the best it picks and its wall time to the answer, and whether the
# driver met the design target: the same best (or one measured within 10% of it) in less wall
# time. The two tools run one after the other, never together.
#
# Usage: scripts/bench-sweep-vs-model-analyzer.sh
# Env: MODEL_DIR (models/fixed_capacity: a model directory, its name the model's), PARAM
# (instance_group[0].count, or max_batch_size), VALUES ("1 2 4"),
# CONCURRENCY (model analyzer's list, "1 2 4 8 16": the driver's search
# is bounded by the matrix's max_concurrency 16 too), TARGET_MS (125), ORDER ("ma driver"),
# DRIVER / WORKER (release binaries; built unless given), BENCH_KEEP=1 keeps the logs and
# results. Exit: 0 after printing results (targets met or not), 1 when something could not be
# measured. Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"
. scripts/bench-lib.sh

MODEL_DIR="${MODEL_DIR:-models/fixed_capacity}"
MODEL="$(basename "$MODEL_DIR")"
PARAM="${PARAM:-instance_group[0].count}"
VALUES="${VALUES:-1 2 4}"
CONCURRENCY="${CONCURRENCY:-1 2 4 8 16}"
TARGET_MS="${TARGET_MS:-125}"
ORDER="${ORDER:-ma driver}"
MA_VERSION=1.58.0
MA_VENV="$REPO_ROOT/.local/model-analyzer"

scripts/install-tritonserver.sh >/dev/null
if ! "$MA_VENV/bin/model-analyzer" --help >/dev/null 2>&1; then
    log "installing triton-model-analyzer==$MA_VERSION into $MA_VENV"
    python3 -m venv "$MA_VENV" || fail "python3 -m venv failed"
    "$MA_VENV/bin/pip" install -q --disable-pip-version-check "triton-model-analyzer==$MA_VERSION" \
        || fail "pip install triton-model-analyzer failed"
fi
if [ -z "${DRIVER:-}" ] || [ -z "${WORKER:-}" ]; then
    log "building the release driver and worker"
    cargo build -q --release -p driver -p worker || fail "cargo build failed"
    TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
    DRIVER="${DRIVER:-$TARGET/driver}"
    WORKER="${WORKER:-$TARGET/worker}"
fi

# The model repository both tools start from: the model as given.
mkdir -p "$TMP/models"
cp -rL "$MODEL_DIR" "$TMP/models/"
# Model analyzer's model_config_parameters for PARAM.
case "$PARAM" in
    "instance_group[0].count") MA_PARAMS="      instance_group:
        - kind: KIND_CPU
          count: [$(echo "$VALUES" | tr ' ' ',')]" ;;
    max_batch_size) MA_PARAMS="      max_batch_size: [$(echo "$VALUES" | tr ' ' ',')]" ;;
    *) fail "PARAM $PARAM: this script sweeps instance_group[0].count or max_batch_size" ;;
esac

list() { echo "$1" | tr ' ' ',' ; }

run_model_analyzer() {
    cat > "$TMP/ma.yaml" <<EOF
model_repository: $TMP/models
output_model_repository_path: $TMP/ma-output-models
override_output_model_repository: true
export_path: $TMP/ma-results
checkpoint_directory: $TMP/ma-checkpoints
triton_launch_mode: local
triton_server_path: $REPO_ROOT/.local/bin/tritonserver
perf_analyzer_path: $REPO_ROOT/.local/bin/perf_analyzer
triton_http_endpoint: 127.0.0.1:$HTTP_PORT
triton_grpc_endpoint: 127.0.0.1:$GRPC_PORT
triton_metrics_url: http://127.0.0.1:$METRICS_PORT/metrics
triton_server_flags:
  http-port: $HTTP_PORT
  grpc-port: $GRPC_PORT
  metrics-port: $METRICS_PORT
  http-address: 127.0.0.1
  grpc-address: 127.0.0.1
  metrics-address: 127.0.0.1
run_config_search_disable: true
concurrency: [$(list "$CONCURRENCY")]
objectives: [perf_throughput]
constraints:
  perf_latency_p99: { max: $TARGET_MS }
profile_models:
  $MODEL:
    cpu_only: true
    model_config_parameters:
$MA_PARAMS
EOF
    log "model-analyzer profile: $MODEL $PARAM [$VALUES] x concurrency [$CONCURRENCY], p99 <= $TARGET_MS ms"
    measured "$TMP/ma.time" "$MA_VENV/bin/model-analyzer" profile -f "$TMP/ma.yaml"
    read -r MA_WALL _ _ MA_RC < "$TMP/ma.time"
    [ "$MA_RC" = 0 ] || fail "model-analyzer exited $MA_RC: $(tail -n 30 "$TMP/ma.time.log")"
    MA_CSV="$(find "$TMP/ma-results" -name 'metrics-model-inference.csv' | head -n1)"
    [ -n "$MA_CSV" ] || fail "model-analyzer wrote no metrics-model-inference.csv ($(tail -n 20 "$TMP/ma.time.log"))"
}

run_driver() {
    python3 - "$TMP/sweep.yaml" "$TMP/models" "$MODEL" "$PARAM" "$VALUES" "$TARGET_MS" <<'EOF'
import re, sys
out, models, model, param, values, target = sys.argv[1:]
text = open("test-matrices/sweep.yaml").read()
text = text.replace("model_repositories: [../models]", f"model_repositories: [{models}]")
text = text.replace("models: [{ name: fixed_capacity }]", f"models: [{{ name: {model} }}]")
text = re.sub(r"  parameters:\n(    .*\n)+", "  parameters:\n    models.%s.%s: [%s]\n"
              % (model, param, ", ".join(values.split())), text)
text = text.replace("target_p99: 125ms", f"target_p99: {target}ms")
open(out, "w").write(text)
EOF
    log "driver sweep: $MODEL $PARAM [$VALUES], p99 <= $TARGET_MS ms"
    measured "$TMP/driver.time" "$DRIVER" run "$TMP/sweep.yaml" --runs-dir "$TMP/runs" \
        --run-id bench-sweep --no-progress
    read -r DRIVER_WALL _ _ DRIVER_RC < "$TMP/driver.time"
    [ "$DRIVER_RC" = 0 ] || fail "driver exited $DRIVER_RC: $(tail -n 30 "$TMP/driver.time.log")"
}

PATH="$(dirname "$WORKER"):$PATH"
for tool in $ORDER; do
    case "$tool" in
        ma) run_model_analyzer ;;
        driver) run_driver ;;
        *) fail "ORDER names $tool (ma or driver)" ;;
    esac
done

python3 - "$MA_CSV" "$TMP/runs/bench-sweep/report.json" "$TMP/ma-output-models" "$MA_WALL" "$DRIVER_WALL" "$TARGET_MS" "$MODEL" "$PARAM" <<'EOF'
import csv, glob, json, os, re, sys
ma_csv, report, ma_models, ma_wall, driver_wall, target, model, param = sys.argv[1:]
ma_wall, driver_wall, target = float(ma_wall), float(driver_wall), float(target)

# Model analyzer: per variant (its config directory), the most throughput at p99 within the
# target, from its own measurements; its pick is the variant with the most.
# The swept field's value in one of model analyzer's variant configs.
field = {"instance_group[0].count": "count", "max_batch_size": "max_batch_size"}[param]
def instances(config_dir):
    text = open(os.path.join(ma_models, config_dir, "config.pbtxt")).read()
    m = re.search(field + r":\s*(\d+)", text)
    return int(m.group(1)) if m else None
rows = list(csv.DictReader(open(ma_csv)))
if not rows:
    sys.exit("bench: CANNOT MEASURE: model analyzer measured nothing")
def col(row, *names):
    for n in names:
        for k in row:
            if k.strip().lower().startswith(n):
                return row[k]
    raise KeyError(f"none of {names} in {list(row)}")
ma = {}
for r in rows:
    variant = col(r, "model config path")
    qps = float(col(r, "throughput"))
    p99 = float(col(r, "p99 latency"))
    conc = int(float(col(r, "concurrency")))
    best = ma.setdefault(variant, {"count": instances(variant), "qps": None, "curve": []})
    best["curve"].append((conc, qps, p99))
    if p99 <= target and (best["qps"] is None or qps > best["qps"]):
        best["qps"], best["concurrency"] = qps, conc
ma_best = max((v for v in ma.values() if v["qps"] is not None), key=lambda v: v["qps"], default=None)

sweep = json.load(open(report))["sweep"]
ours = {}
for v in sweep["variants"]:
    count = v["parameters"][f"models.{model}.{param}"]
    ours[count] = v
best = sweep.get("best")
our_count = best and best["parameters"][f"models.{model}.{param}"]

print(f"\n{model}, p99 <= {target:g} ms, on this machine; {param} =")
print(f"{'value':>9}  {'model analyzer QPS (conc)':>26}  {'driver QPS (conc)':>18}")
for count in sorted(set(ours) | {v["count"] for v in ma.values()}):
    m = next((v for v in ma.values() if v["count"] == count), None)
    o = ours.get(count)
    ma_s = f"{m['qps']:.1f} ({m['concurrency']})" if m and m["qps"] is not None else "-"
    o_s = f"{o['max_qps']:.1f} ({o['concurrency']})" if o and o.get("max_qps") is not None else "-"
    print(f"{count:>9}  {ma_s:>26}  {o_s:>18}")
print("\nmodel analyzer's curves (concurrency: QPS, p99 ms):")
for variant, v in sorted(ma.items(), key=lambda kv: kv[1]["count"] or 0):
    print(f"  {param} {v['count']}: " + ", ".join(f"{c}: {q:.1f}, {p:.0f}" for c, q, p in sorted(v["curve"])))
ma_pick = ma_best and ma_best["count"]
print(f"\nbest: model analyzer {param} {ma_pick} ({ma_best['qps']:.1f} QPS)" if ma_best else "\nbest: model analyzer none")
if best:
    confirmed = best.get("confirmed_qps")
    print(f"      driver {param} {our_count} ({best['max_qps']:.1f} QPS" + (f", measured again {confirmed:.1f})" if confirmed else ")"))
else:
    print("      driver none")
print(f"wall time to the answer: model analyzer {ma_wall:.0f} s, driver {driver_wall:.0f} s (ratio {driver_wall / ma_wall:.2f})")
# Our pick, as model analyzer measured it, within 10% of model analyzer's best.
ours_by_ma = next((v["qps"] for v in ma.values() if v["count"] == our_count), None)
same = bool(best and ma_best and (our_count == ma_pick or
            (ours_by_ma or 0) >= 0.9 * ma_best["qps"]))
print(f"target: the same best (or one within 10%): {'met' if same else 'NOT MET'}; "
      f"less wall time: {'met' if driver_wall < ma_wall else 'NOT MET'}")
EOF
