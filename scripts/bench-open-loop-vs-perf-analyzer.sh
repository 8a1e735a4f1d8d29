#!/usr/bin/env bash
# Open-loop accuracy: the worker's Load scenario and perf_analyzer, each sending RATE requests
# per second on a schedule (constant gaps, or Poisson with ARRIVALS=poisson) to the same local
# tritonserver (scripts/start-tritonserver.sh, 127.0.0.1 only, free ports) and model (add_sub,
# over gRPC, or HTTP with PROTOCOL=http), one after the other. Prints, per round, the worker's send lateness (actual - intended
# send time, p50/p99/max), both clients' p50/p99 latency, and both clients' own CPU time
# (user + system, getrusage) per request the server counted (nv_inference_request_success).
# Targets (issues 17 and 33): worker p99 send lateness <= 100 us; worker p50 latency within
# 0.1 ms of perf_analyzer's p50 (the worker counts latency from the intended send time, so its
# p50 holds its lateness too); worker CPU per request <= 0.45x perf_analyzer's.
#
# Usage: scripts/bench-open-loop-vs-perf-analyzer.sh
# Env: RATE (2000), ARRIVALS (constant|poisson), PROTOCOL (grpc|http), DURATION seconds per client run (15),
# ROUNDS (1), WORKER (target/release/worker, built unless given), PERF_ANALYZER
# (.local/bin/perf_analyzer), LOAD_WINDOW (worker, 5s), BENCH_KEEP=1 keeps logs and reports,
# SERVER_CPUS and CLIENT_CPUS: taskset CPU lists for the server and the clients (default: none,
# the server shares the cores with the client; what was pinned is printed).
# Exit: 0 after printing results (target met or not), 1 when something could not be measured. Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

RATE="${RATE:-2000}"
ARRIVALS="${ARRIVALS:-constant}"
PROTOCOL="${PROTOCOL:-grpc}"
DURATION="${DURATION:-15}"
ROUNDS="${ROUNDS:-1}"
LOAD_WINDOW="${LOAD_WINDOW:-5s}"
WORKER_GIVEN="${WORKER:-}"
WORKER="${WORKER:-${CARGO_TARGET_DIR:-target}/release/worker}"
PERF_ANALYZER="${PERF_ANALYZER:-$REPO_ROOT/.local/bin/perf_analyzer}"
SERVER_CPUS="${SERVER_CPUS:-}"
CLIENT_CPUS="${CLIENT_CPUS:-}"
MODEL=add_sub

source "$SCRIPT_DIR/bench-lib.sh"

positive_ints RATE DURATION ROUNDS
[[ "$ARRIVALS" =~ ^(constant|poisson)$ ]] || fail "ARRIVALS must be constant or poisson, got '$ARRIVALS'"
[[ "$PROTOCOL" =~ ^(grpc|http)$ ]] || fail "PROTOCOL must be grpc or http, got '$PROTOCOL'"
command -v python3 >/dev/null || fail "python3 not found"
command -v curl >/dev/null || fail "curl not found"
[ -x "$PERF_ANALYZER" ] || fail "$PERF_ANALYZER not found: run scripts/install-tritonserver.sh"
build_worker

pin_cpus

log "starting tritonserver (grpc $GRPC_PORT, http $HTTP_PORT, metrics $METRICS_PORT)"
start_server "$MODEL"

if [ "$PROTOCOL" = grpc ]; then PORT=$GRPC_PORT; else PORT=$HTTP_PORT; fi
# Warm-up (not measured): connections, the model's first executions.
"$PERF_ANALYZER" -m "$MODEL" -u "127.0.0.1:$PORT" -i "$PROTOCOL" --concurrency-range 1 \
    --measurement-mode count_windows --measurement-request-count 500 -s 100 >"$TMP/warmup.log" 2>&1 ||
    fail "perf_analyzer warm-up failed: $(tail -3 "$TMP/warmup.log")"

# run_client NAME ROUND CMD...: runs CMD pinned and measured; "wall user sys rc requests"
# (requests: the server's count over the run) in $TMP/NAME.ROUND.cpu.
run_client() {
    local cpu="$TMP/$1.$2.cpu"; shift 2
    measured_served "$cpu" "$@"
    echo "$(cat "$cpu") $served" >"$cpu"
}

window_ms=$(( DURATION * 1000 / 3 ))
for round in $(seq 1 "$ROUNDS"); do
    log "round $round/$ROUNDS: worker, Load scenario, $RATE/s $ARRIVALS over $PROTOCOL, ${DURATION}s"
    run_client worker "$round" "$WORKER" --servers "127.0.0.1:$PORT" --protocol "$PROTOCOL" \
        --scenarios Load:1 --concurrency 1 --load-rate "$RATE" --load-arrivals "$ARRIVALS" \
        --load-window "$LOAD_WINDOW" --load-model "$MODEL" --duration "${DURATION}s" \
        --seed 1 --report-json "$TMP/worker.$round.json"
    log "round $round/$ROUNDS: perf_analyzer, $RATE/s $ARRIVALS, 3 x ${window_ms} ms"
    run_client perf_analyzer "$round" "$PERF_ANALYZER" -m "$MODEL" -u "127.0.0.1:$PORT" \
        -i "$PROTOCOL" --request-rate-range "$RATE:$RATE" --request-distribution "$ARRIVALS" \
        --measurement-mode time_windows -p "$window_ms" -s 100 --max-trials 3 \
        -f "$TMP/perf_analyzer.$round.csv"
done

python3 - "$TMP" "$ROUNDS" "$RATE" "$ARRIVALS" "$PROTOCOL" "$SERVER_CPUS" "$CLIENT_CPUS" <<'PY' || exit 1
import csv, json, os, sys

tmp, rounds, rate, arrivals = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
protocol = {"grpc": "gRPC", "http": "HTTP"}[sys.argv[5]]
server_cpus, client_cpus = sys.argv[6] or "any", sys.argv[7] or "any"
print()
print(f"model add_sub, {protocol}, open loop at {rate}/s ({arrivals}); {os.cpu_count()} cores, "
      f"server on CPUs {server_cpus}, clients on CPUs {client_cpus}")


def cpu_per_request(name, r):
    """The client's own CPU (user + system) in microseconds per request the server counted."""
    try:
        wall, user, sys_, rc, reqs = open(os.path.join(tmp, f"{name}.{r}.cpu")).read().split()
        reqs = int(reqs)
        return (float(user) + float(sys_)) / reqs * 1e6 if reqs > 0 else None
    except (OSError, ValueError):
        return None

measured = 0
for r in range(1, rounds + 1):
    try:
        report = json.load(open(os.path.join(tmp, f"worker.{r}.json")))
        row = next(x for x in report["rows"] if x["scenario"] == "Load")
        late = row["send_lateness"]
    except (OSError, ValueError, KeyError, StopIteration, TypeError) as e:
        print(f"round {r}: no worker result ({e.__class__.__name__}: {e})")
        continue
    try:
        pa = list(csv.DictReader(open(os.path.join(tmp, f"perf_analyzer.{r}.csv"))))[-1]
        pa_p50, pa_p99 = float(pa["p50 latency"]), float(pa["p99 latency"])
        pa_rate = float(pa["Inferences/Second"])
    except (OSError, KeyError, IndexError, ValueError) as e:
        print(f"round {r}: no perf_analyzer result ({e.__class__.__name__}: {e})")
        continue
    measured += 1
    w_rate = row["qps"]
    print(f"round {r}: worker        {w_rate:7.0f} req/s  latency p50 {row['p50_us'] / 1000:.3f} ms"
          f"  p99 {row['p99_us'] / 1000:.3f} ms  (from the intended send time; {row['failures']} failures)")
    print(f"round {r}: perf_analyzer {pa_rate:7.0f} req/s  latency p50 {pa_p50 / 1000:.3f} ms"
          f"  p99 {pa_p99 / 1000:.3f} ms")
    print(f"round {r}: worker send lateness over {late['sends']} sends: p50 {late['p50_us']} us,"
          f" p99 {late['p99_us']} us, max {late['max_us']} us")
    ok_late = late["p99_us"] <= 100
    diff = (row["p50_us"] - pa_p50) / 1000
    ok_p50 = abs(diff) <= 0.1
    print(f"round {r}: p99 send lateness {late['p99_us']} us (target <= 100 us: "
          f"{'PASS' if ok_late else 'MISS'}); p50 latency worker - perf_analyzer = {diff:+.3f} ms "
          f"(target within 0.1 ms: {'PASS' if ok_p50 else 'MISS'}); rate worker/perf_analyzer = "
          f"{w_rate / pa_rate:.3f}")
    w_cpu, pa_cpu = cpu_per_request("worker", r), cpu_per_request("perf_analyzer", r)
    if w_cpu is None or pa_cpu is None:
        print(f"round {r}: client CPU per request not measured (worker {w_cpu}, perf_analyzer {pa_cpu})")
    else:
        ratio = w_cpu / pa_cpu
        print(f"round {r}: client CPU per request: worker {w_cpu:.1f} us, perf_analyzer {pa_cpu:.1f} us,"
              f" ratio {ratio:.2f} (target <= 0.45: {'PASS' if ratio <= 0.45 else 'MISS'})")
if measured == 0:
    print("bench: CANNOT MEASURE: no round has results from both clients", file=sys.stderr)
    sys.exit(1)
PY
