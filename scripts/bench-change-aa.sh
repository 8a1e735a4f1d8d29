#!/usr/bin/env bash
# A/A: RUNS back-to-back runs of the smoke matrix (real tritonserver, one worker, every scenario,
# DURATION each) in one runs directory, each judged by the driver against the passing runs
# before it (a pair for the second and third, their history from the fourth). Prints each run's
# calls and the total: every REGRESSION, IMPROVED or provisional line is a false one (target:
# at most one across 20 runs). It also measures the run-to-run spread a pair is widened by
# (judge::change::RUN_TO_RUN per kind of metric): from every consecutive pair, each metric's
# log ratio against the two runs' within-run standard errors.
#
# Usage: scripts/bench-change-aa.sh
# Env: RUNS (20), DURATION (20s), DRIVER (target/release/driver; its worker beside it; both
# built unless given), BENCH_KEEP=1 keeps the run directories, AA_RUNS_DIR=DIR judges the runs
# aa-01… a kept earlier benchmark left there again (with this DRIVER) instead of running any.
# Exit: 0 after printing results, 1 when something could not be measured. Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

RUNS="${RUNS:-20}"
DURATION="${DURATION:-20s}"
source "$SCRIPT_DIR/bench-lib.sh"

positive_ints RUNS
scripts/install-tritonserver.sh >/dev/null
build_driver

runs_dir="${AA_RUNS_DIR:-$TMP/runs}"
[ -n "${AA_RUNS_DIR:-}" ] || log "$RUNS runs of test-matrices/smoke.yaml for $DURATION each, into $runs_dir"
for i in $(seq -w 1 "$RUNS"); do
    [ -z "${AA_RUNS_DIR:-}" ] || break
    set +e
    "$DRIVER" run test-matrices/smoke.yaml --duration "$DURATION" --runs-dir "$runs_dir" \
        --run-id "aa-$i" --no-progress >"$TMP/aa-$i.log" 2>&1
    rc=$?
    set -e
    report="$runs_dir/aa-$i/report.json"
    [ -f "$report" ] || fail "run aa-$i wrote no report (exit $rc, log $TMP/aa-$i.log)"
    log "run aa-$i: exit $rc"
done

# Each run's report rebuilt by this driver (its estimates), and each consecutive pair judged as
# a pair (`driver compare`), besides the comparison each run made at its end.
ids=$(seq -f "aa-%02g" 1 "$RUNS")
prev=""
for id in $ids; do
    "$DRIVER" report --run "$id" --runs-dir "$runs_dir" --format json >"$TMP/$id.json" ||
        fail "no report of $id"
    if [ -n "$prev" ]; then
        "$DRIVER" compare "$prev" "$id" --runs-dir "$runs_dir" --json >"$TMP/pair-$id.json" ||
            fail "$prev and $id could not be compared"
        # Judged again by this driver against the run's window (its last five runs before it,
        # as `regression.window` picks them in an A/A where every run passes).
        window=$(echo "$ids" | awk -v id="$id" '$0 == id { exit } { w[++n] = $0 } END {
            s = ""; for (i = (n > 5 ? n - 4 : 1); i <= n; i++) s = s (s ? "," : "") w[i]; print s }')
        "$DRIVER" compare "$window" "$id" --runs-dir "$runs_dir" --json >"$TMP/window-$id.json" ||
            fail "$id could not be compared with $window"
    fi
    prev="$id"
done

python3 - "$TMP" "$RUNS" <<'EOF'
import json, math, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
ids = [f"aa-{i:02d}" for i in range(1, n + 1)]
reports = [json.load(open(f"{tmp}/{i}.json")) for i in ids]
total = {"regression": 0, "improvement": 0, "provisional": 0}
print("run     verdict  baseline runs  calls (regression / improvement / provisional)  ~  not judged")
for r in reports:
    b = r.get("baseline") or {}
    calls = {k: 0 for k in total}
    for c in b.get("changes", []):
        if c["call"] in calls:
            calls[c["call"]] += 1
            print(f"    {c['call']}: {c['metric']} {c['change']*100:+.1f}% [{c['low']*100:+.1f}%, {c['high']*100:+.1f}%] q={c['q_value']:.3f}")
    for k in total:
        total[k] += calls[k]
    unchanged = sum(1 for c in b.get("changes", []) if c["call"] == "no_change")
    print(f"{r['run_id']:<8}{r['verdict']:<9}{len(b.get('window', [])):>13}  "
          f"{calls['regression']:>10} / {calls['improvement']} / {calls['provisional']}"
          f"{'':>24}{unchanged:>3}  {len(b.get('not_judged', []))}")
print(f"A/A over {n} runs: {total['regression']} regression, {total['improvement']} improvement, "
      f"{total['provisional']} provisional line(s) (target: at most one call in all)")
def calls_of(kind, line):
    """Each call in the `kind` files (KIND-ID.json of every run but the first), printed by line."""
    calls = {"regression": 0, "improvement": 0, "provisional": 0}
    for i in ids[1:]:
        for c in json.load(open(f"{tmp}/{kind}-{i}.json"))["changes"]:
            if c["call"] in calls:
                calls[c["call"]] += 1
                print(line(i, c))
    return calls
again = calls_of("window", lambda i, c: f"    {i} against its window, judged again: {c['call']}: "
                 f"{c['metric']} {c['change']*100:+.1f}% q={c['q_value']:.3f}")
print(f"the same runs against their windows, judged again by this driver: {again['regression']} "
      f"regression, {again['improvement']} improvement, {again['provisional']} provisional")
pairs = calls_of("pair", lambda i, c: f"    pair {i}: {c['call']}: {c['metric']} {c['change']*100:+.1f}% "
                 f"[{c['low']*100:+.1f}%, {c['high']*100:+.1f}%] q={c['q_value']:.3f}")
print(f"every consecutive pair judged as a pair ({n - 1} pairs): {pairs['regression']} regression, "
      f"{pairs['improvement']} improvement, {pairs['provisional']} provisional")

# The run-to-run spread: consecutive pairs, per metric with a within-run spread in both.
z2, small = [], []
for a, b in zip(reports, reports[1:]):
    ea = {e["metric"]: e for e in a.get("estimates", []) if e.get("spread")}
    for e in b.get("estimates", []):
        if not e.get("spread") or e["metric"] not in ea:
            continue
        d = math.log(e["value"] / ea[e["metric"]]["value"])
        w = e["spread"]["rel_se"] ** 2 + ea[e["metric"]]["spread"]["rel_se"] ** 2
        z2.append((d * d, w, e["metric"]))
if not z2:
    sys.exit("bench: CANNOT MEASURE: no metric with a within-run spread in two runs")
# Per kind of metric: the ratio of the squared log change to the pair's within-run variance.
kinds = {}
for d, w, metric in z2:
    kinds.setdefault(metric.split(" ")[0], []).append((d, w))
for kind, xs in sorted(kinds.items()):
    r = sorted(d / w for d, w in xs if w > 0)
    q = lambda f: r[min(len(r) - 1, int(f * len(r)))]
    print(f"  {kind:<24} {len(r):>4} pairs: d^2/within median {q(0.5):7.2f}  p90 {q(0.9):8.2f}  "
          f"p99 {q(0.99):8.2f}  max {r[-1]:8.2f}; |log ratio| p90 {math.sqrt(sorted(d for d, _ in xs)[int(0.9 * len(xs))]):.3f}")
# Median of a chi-square with one degree of freedom: 0.455.
ratios = sorted(d / w for d, w, _ in z2 if w > 0)
inflation = statistics.median(ratios) / 0.455
tight = sorted(d for d, w, _ in z2 if w < 0.01 ** 2)
floor = math.sqrt(statistics.median(tight) / 0.455 / 2) if tight else float("nan")
print(f"run-to-run spread from {len(z2)} metric pairs: variance inflation (median d^2 / within "
      f"variance / 0.455) = {inflation:.2f}; p90 of the ratio = {ratios[int(0.9 * len(ratios))]:.1f}, "
      f"p99 = {ratios[int(0.99 * len(ratios))]:.1f}")
print(f"floor (metrics with a within-run se under 1%: {len(tight)}): one run's sd = "
      f"{floor * 100:.2f}% (median d^2 / 0.455 / 2)")
worst = sorted(z2, key=lambda t: -t[0] / max(t[1], 1e-12))[:5]
for d, w, metric in worst:
    print(f"  widest: {metric}: |log ratio| {math.sqrt(d):.3f}, within-run se {math.sqrt(w):.4f}")
EOF
