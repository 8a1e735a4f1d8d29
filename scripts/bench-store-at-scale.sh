#!/usr/bin/env bash
# The status store at scale, on a throwaway PostgreSQL (scripts/throwaway-postgres.sh, with
# durability switched back on unless DURABLE=0): WORKERS simulated workers each write a snapshot
# (heartbeat, latest QPS, cumulative counts with their HDR histogram, and a QPS point and latency
# interval per series interval) every second for DURATION seconds through the worker's own store
# calls, while a simulated driver polls every second as `driver run` does
# (common/examples/store_at_scale.rs says exactly what). Then the rows an 8-hour run of 100
# workers leaves in the store, and `driver report` timed on it (and, with LEGACY=1, on the same
# run with a QPS sample per second per worker, as the store kept them before).
# Design targets: the driver's poll and fail-fast read p99 <= 200 ms; the store of an 8-hour run
# of 100 workers < 1 GiB; `driver report` on it < 5 s and < 200 MB max RSS.
#
# Usage: scripts/bench-store-at-scale.sh
# Env: WORKERS (1000), DURATION seconds (600; e.g. 120 for a quick check), CONNECTIONS (64: the
# simulated workers share one pool of that many connections, where real workers hold 1-2 each;
# the throwaway server allows 200), SOAK_WORKERS (100), SOAK_HOURS (8), LEGACY (1), DURABLE (1:
# fsync, synchronous_commit and full_page_writes on, as a real server), BENCH_KEEP=1 keeps the
# cluster's directory, DRIVER and EXAMPLE (built with cargo --release unless either is given).
# Exit: 0 after printing results (target met or not), 1 when something could not be measured.
# Not run by CI.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

WORKERS="${WORKERS:-1000}"
DURATION="${DURATION:-600}"
CONNECTIONS="${CONNECTIONS:-64}"
SOAK_WORKERS="${SOAK_WORKERS:-100}"
SOAK_HOURS="${SOAK_HOURS:-8}"
LEGACY="${LEGACY:-1}"
DURABLE="${DURABLE:-1}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
DRIVER_GIVEN="${DRIVER:-}${EXAMPLE:-}"
DRIVER="${DRIVER:-$TARGET_DIR/release/driver}"
EXAMPLE="${EXAMPLE:-$TARGET_DIR/release/examples/store_at_scale}"

# log, fail, a scratch directory ($TMP) removed at exit: shared with the other benchmarks.
source "$SCRIPT_DIR/bench-lib.sh"
pg_dir=""
stop_pg() {
    if [ -n "$pg_dir" ]; then
        "$SCRIPT_DIR/throwaway-postgres.sh" stop "$pg_dir" >/dev/null 2>&1 || true
        if [ -n "${BENCH_KEEP:-}" ]; then log "cluster kept in $pg_dir"; else rm -rf "$pg_dir"; fi
    fi
    cleanup
}
trap stop_pg EXIT

for v in WORKERS DURATION CONNECTIONS SOAK_WORKERS SOAK_HOURS; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || fail "$v must be a non-negative integer, got '${!v}'"
done
[ -x /usr/bin/time ] || fail "/usr/bin/time not found (apt-get install time)"
# Built unless given: an existing binary may predate the working tree (cargo builds nothing when
# it is current).
if [ -z "${DRIVER_GIVEN:-}" ]; then
    log "building the driver and the example (release)"
    cargo build --release -p driver >&2 || fail "cargo build --release -p driver failed"
    cargo build --release -p stress-common --example store_at_scale >&2 ||
        fail "cargo build of the example failed"
fi
[ -x "$DRIVER" ] || fail "$DRIVER missing"
[ -x "$EXAMPLE" ] || fail "$EXAMPLE missing"

# Its own directory: as root the cluster runs as another user, who cannot enter $TMP.
pg_dir="$(mktemp -d /tmp/bench-store-pg.XXXXXX)"
url_line="$("$SCRIPT_DIR/throwaway-postgres.sh" start "$pg_dir")" || fail "no throwaway Postgres"
DATABASE_URL="${url_line#DATABASE_URL=}"
log "Postgres at $DATABASE_URL"
psql_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)/psql"
[ -x "$psql_bin" ] || psql_bin="$(command -v psql || true)"
[ -n "$psql_bin" ] || fail "psql not found"
if [ "$DURABLE" = 1 ]; then
    "$psql_bin" -q "$DATABASE_URL" -c "ALTER SYSTEM SET fsync = on" \
        -c "ALTER SYSTEM SET synchronous_commit = on" -c "ALTER SYSTEM SET full_page_writes = on" \
        -c "SELECT pg_reload_conf()" >/dev/null || fail "could not switch durability on"
    log "durability on: $("$psql_bin" -tA "$DATABASE_URL" -c "SELECT string_agg(name || '=' || setting, ' ') FROM pg_settings WHERE name IN ('fsync','synchronous_commit','full_page_writes')")"
fi

echo "== store at scale: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $("$psql_bin" -tA "$DATABASE_URL" -c 'SHOW server_version')"
echo "== $WORKERS workers x ${DURATION} s, then the store of $SOAK_WORKERS workers x $SOAK_HOURS h"
legacy_flag=()
[ "$LEGACY" = 1 ] && legacy_flag=(--legacy)
"$EXAMPLE" "$DATABASE_URL" --workers "$WORKERS" --duration-s "$DURATION" \
    --connections "$CONNECTIONS" --soak-workers "$SOAK_WORKERS" --soak-hours "$SOAK_HOURS" \
    "${legacy_flag[@]}" | tee "$TMP/example.out" || fail "the simulation failed"

p99_of() { sed -n "s/^live: $1.*p99=\([0-9.]*\) ms.*/\1/p" "$TMP/example.out"; }
poll_p99="$(p99_of 'driver poll')"
read_p99="$(p99_of 'fail-fast read')"
soak_mib="$(sed -n 's/^soak: store size of the run: \([0-9.]*\) MiB.*/\1/p' "$TMP/example.out")"

report() { # KIND RUN_ID: times `driver report` (text, then json) on the run
    local kind=$1 run=$2 fmt secs rss
    for fmt in text json; do
        /usr/bin/time -v "$DRIVER" report --run "$run" --database-url "$DATABASE_URL" \
            --format "$fmt" >"$TMP/report-$kind.$fmt" 2>"$TMP/time-$kind-$fmt" ||
            fail "driver report on the $kind run failed: $(tail -5 "$TMP/time-$kind-$fmt")"
        secs="$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$TMP/time-$kind-$fmt")"
        rss="$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$TMP/time-$kind-$fmt")"
        [ -n "$secs" ] && [ -n "$rss" ] || fail "no time or RSS for driver report ($kind, $fmt)"
        echo "report $kind ($fmt): ${secs} s (target < 5: $(awk -v v="$secs" 'BEGIN {print (v < 5) ? "met" : "MISSED"}'), ratio $(awk -v v="$secs" 'BEGIN {printf "%.2f", v / 5}')), max RSS ${rss} MB (target < 200: $(awk -v v="$rss" 'BEGIN {print (v < 200) ? "met" : "MISSED"}'), ratio $(awk -v v="$rss" 'BEGIN {printf "%.2f", v / 200}')), $(wc -c <"$TMP/report-$kind.$fmt") bytes"
    done
}
while read -r _ kind run; do
    report "$kind" "$run"
    if [ "$kind" = legacy ]; then
        # The copy is seconds old and the planner's statistics do not know it yet; a store that
        # has held a run for a while has them (autovacuum analyzes a table once its rows grow
        # 10%): timed both ways.
        psql "$DATABASE_URL" -qc "ANALYZE qps_samples" || fail "ANALYZE qps_samples failed"
        report legacy-analyzed "$run"
    fi
done < <(grep '^RUN ' "$TMP/example.out")

[ -n "$poll_p99" ] && [ -n "$read_p99" ] && [ -n "$soak_mib" ] || fail "the simulation printed no figures"
verdict() { awk -v v="$1" -v t="$2" 'BEGIN {printf "%s (ratio %.2f)", (v <= t) ? "met" : "MISSED", v / t}'; }
echo "== summary ($(nproc) cores)"
echo "driver poll p99: $poll_p99 ms against 200 ms: $(verdict "$poll_p99" 200)"
echo "fail-fast read p99: $read_p99 ms against 200 ms: $(verdict "$read_p99" 200)"
echo "store of $SOAK_WORKERS workers x $SOAK_HOURS h: $soak_mib MiB against 1024 MiB: $(verdict "$soak_mib" 1024)"
