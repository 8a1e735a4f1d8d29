#!/usr/bin/env bash
# Worker memory over a long soak (issue 33): one local tritonserver and two workers, one over gRPC
# and one over HTTP, each running every scenario (upstream's weights, plus Infer over the QA
# models: every datatype, dynamic shapes, a stateful sequence, BYTES, images; with DECOUPLED=1
# also over gRPC a decoupled stream) at CONCURRENCY for DURATION. The workers report their own resident memory in
# every snapshot; the report judges its slope over the load's steady state like a server's (the
# first third of the load, at most five minutes, left out as warm-up). Prints, per worker, the
# resident memory at the start of the steady state, at its end, the least-squares slope, the
# range, and the report's verdict (a memory finding or none) against the target: flat after
# warm-up, no finding.
#
# Usage: scripts/bench-worker-memory.sh
# Env: DURATION (30m), CONCURRENCY (16), DECOUPLED (0), DRIVER (target/release/driver; its worker is
# target/release/worker; both built unless given), BENCH_KEEP=1 keeps the run directory.
# Exit: 0 after printing results (target met or not), 1 when something could not be measured.
# Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

DURATION="${DURATION:-30m}"
CONCURRENCY="${CONCURRENCY:-16}"
DRIVER_GIVEN="${DRIVER:-}"
DRIVER="${DRIVER:-${CARGO_TARGET_DIR:-target}/release/driver}"

source "$SCRIPT_DIR/bench-lib.sh"

positive_ints CONCURRENCY
command -v python3 >/dev/null || fail "python3 not found"
if [ -z "$DRIVER_GIVEN" ]; then
    log "building the driver and the worker (release)"
    cargo build --release -p driver -p worker >&2 || fail "cargo build --release failed"
fi

# Every scenario at upstream's weights, and Infer over models that exercise every part of the
# client: datatypes (all_types), dynamic dims (dynamic_reshape), implicit-state sequences
# (sequence_state), BYTES outputs (text_vector), large FP32 tensors (image_classifier).
scenarios='{ SequenceValid: 295, SequenceValidValid: 68, SequenceValidNoEnd: 68, SequenceNoEnd: 62,
      SequenceNoStart: 40, Timeout: 60, CrashingClient: 60, ImageClassification: 80, Load: 200,
      PerfAnalyzer: 100, Infer: 200 }'
models='{ name: add_sub }, { name: all_types, shape: { BYTES_IN: [3] } }, { name: dynamic_reshape, shape: { DYN: [3, 4] } },
      { name: sequence_state }, { name: text_vector }, { name: image_classifier }'
# tritonserver 2.51 under this mix with a decoupled model: a stream's response with an empty id,
# then the server's SIGSEGV within minutes (2 runs of 2, 2026-11-29; docs/limitations.md). Off
# by default so that the server lasts the soak; DECOUPLED=1 adds it.
decoupled=""
[ "${DECOUPLED:-0}" = 1 ] && decoupled=', { name: decoupled_repeat, shape: { IN: [4] } }'
cat >"$TMP/matrix.yaml" <<YAML
version: 1
run:
  name: worker-memory
  duration: $DURATION
  poll_interval: 5s
  warmup: 5s
  server_ready_timeout: 180s
server_templates:
  cpu:
    tritonserver: { binary: auto }
    model_repositories: [$REPO_ROOT/models]
    args: ["--log-verbose=0"]
server_groups:
  triton:
    template: cpu
    instances: 1
client_templates:
  grpc-all:
    worker: { binary: auto }
    protocol: grpc
    concurrency: $CONCURRENCY
    scenarios: $scenarios
    models: [$models$decoupled]
  http-all:
    worker: { binary: auto }
    protocol: http
    concurrency: $CONCURRENCY
    scenarios: $scenarios
    models: [$models]
# With DECOUPLED=1: the stray response (above) is excused here (counted, listed in the report)
# so that it does not end the memory measurement; the server's crash that follows still does.
known_issues:
  - id: stray-empty-id-on-decoupled-stream
    match:
      model: decoupled_repeat
      error_kind: protocol
      message: 'a response with id "" .*on a stream waiting for request'
    reason: >-
      tritonserver 2.51 under every scenario at concurrency 16 (none in 156,000 streams of
      decoupled_repeat alone), followed by the server's SIGSEGV; not yet attributed upstream.
      Excused in the memory soak.
    max_per_hour: 60
client_groups:
  grpc:
    template: grpc-all
    instances: 1
    target: triton
  http:
    template: http-all
    instances: 1
    target: triton
YAML

runs="$TMP/runs"
log "soak: every scenario at concurrency $CONCURRENCY over gRPC and HTTP for $DURATION"
rc=0
# 32 sequence streams on sequence_nobatch's 4 slots meet tritonserver 2.51's sequence reaper
# race within minutes: the project's known issues excuse it (counted in the report).
"$DRIVER" run "$TMP/matrix.yaml" --runs-dir "$runs" --no-progress \
    --known-issues "$REPO_ROOT/test-matrices/known-issues.yaml" \
    >"$TMP/driver.out" 2>"$TMP/driver.err" || rc=$?
report="$(ls "$runs"/*/report.json 2>/dev/null | head -1 || true)"
if [ -z "$report" ]; then
    tail -20 "$TMP/driver.err" >&2
    fail "the driver wrote no report (exit $rc)"
fi
verdict="$(grep -h -m1 -E '^Run ' "$runs"/*/report.txt 2>/dev/null || true)"
known="$(sed -n '/^== Known issues/,/^$/p' "$runs"/*/report.txt 2>/dev/null || true)"

echo
echo "worker memory, local launcher: every scenario at concurrency $CONCURRENCY for $DURATION ($(nproc) cores, nothing pinned)"
echo "driver exit $rc; ${verdict:-no verdict line}"
[ -z "$known" ] || echo "$known"
python3 - "$report" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
MIB = 1024 * 1024
workers = report.get("workers") or []
if not workers:
    print("no worker series in the report: CANNOT MEASURE")
    sys.exit(1)
# The load phase as the report's memory judge takes it: the workers' samples; its first third,
# at most five minutes, is the warm-up.
for w in workers:
    rss = w.get("rss") or []
    if len(rss) < 6:
        print(f"{w['member_id']}: {len(rss)} memory samples: CANNOT MEASURE")
        continue
    start, end = rss[0][0], rss[-1][0]
    steady_from = start + min((end - start) / 3, 300)
    steady = [(t, b) for t, b in rss if t >= steady_from]
    n = len(steady)
    mt = sum(t for t, _ in steady) / n
    mb = sum(b for _, b in steady) / n
    var = sum((t - mt) ** 2 for t, _ in steady)
    slope = sum((t - mt) * (b - mb) for t, b in steady) / var if var else 0.0
    lo, hi = min(b for _, b in steady), max(b for _, b in steady)
    finding = w.get("memory_finding")
    print(
        f"{w['member_id']} ({w['group']}): RSS {rss[0][1] / MIB:.1f} MiB at {start:.0f} s, "
        f"{steady[0][1] / MIB:.1f} MiB at the steady state's start ({steady[0][0]:.0f} s), "
        f"{steady[-1][1] / MIB:.1f} MiB at the end ({end:.0f} s); steady state {n} samples, "
        f"range {lo / MIB:.1f}-{hi / MIB:.1f} MiB, slope {slope * 60 / MIB:+.3f} MiB/min; "
        f"QPS avg {w['avg']:.0f}"
    )
    print(f"  report's verdict: {finding or 'steady (no memory finding)'} "
          f"(target: flat after warm-up: {'MISS' if finding else 'PASS'})")
PY
