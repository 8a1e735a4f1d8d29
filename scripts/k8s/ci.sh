#!/usr/bin/env bash
# CI entry point for the Kubernetes tests: build (once; ~15 min on a fresh 2-core machine, then cached),
# cluster up, images, smoke test, and down -- down always runs on exit, whatever failed.
# Extra test commands to run against the cluster (each via with-cluster.sh, so each gets its own
# namespace) can be given as arguments, e.g.:
#   scripts/k8s/ci.sh "cargo test -p driver --test kube -- --ignored --skip bench_"
# Env: TRITON_STRESS_K8S_IMAGES (extra docker/<name> dirs to build/import),
#      TRITON_STRESS_K8S_KEPT_LOGS (where the cluster's logs are copied when something failed).
set -eu
. "$(dirname "$0")/lib.sh"
need_root

T0=$(date +%s)
stage_t=$T0
stage() { local now; now=$(date +%s); log "== $1 (stage $(( now - stage_t )) s, total $(( now - T0 )) s)"; stage_t=$now; }

# down.sh removes the cluster's logs with its state; after a failure they are what tells why.
KEPT_LOGS=${TRITON_STRESS_K8S_KEPT_LOGS:-/tmp/triton-stress-k8s-logs}

cleanup() {
    rc=$?
    if [ "$rc" != 0 ] && [ -d "$LOGS" ]; then
        rm -rf "$KEPT_LOGS" && cp -r "$LOGS" "$KEPT_LOGS" && log "the cluster's logs are kept in $KEPT_LOGS"
    fi
    "$K8S_SCRIPTS_DIR/down.sh" || log "WARNING: down.sh failed"
    log "== k8s ci done in $(( $(date +%s) - T0 )) s (rc=$rc)"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$K8S_SCRIPTS_DIR/build.sh"
stage "build (or cache check)"
"$K8S_SCRIPTS_DIR/up.sh" >/dev/null
stage "cluster up"
# shellcheck disable=SC2086
"$K8S_SCRIPTS_DIR/images.sh" docker/k8s-smoke ${TRITON_STRESS_K8S_IMAGES:-}
stage "images"
rc=0
"$K8S_SCRIPTS_DIR/with-cluster.sh" "$K8S_SCRIPTS_DIR/smoke-test.sh" || rc=1
stage "smoke test"
for cmd in "$@"; do
    log "== running: $cmd"
    "$K8S_SCRIPTS_DIR/with-cluster.sh" bash -c "cd '$REPO_ROOT' && $cmd" || rc=1
    stage "$cmd"
done
exit $rc
