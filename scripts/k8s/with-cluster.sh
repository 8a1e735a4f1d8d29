#!/usr/bin/env bash
# Test entry point for the Kubernetes tests (launcher, deploy/, smoke):
#   scripts/k8s/with-cluster.sh CMD [ARGS...]
# 1. Local cluster (default): builds Kubernetes if not cached (build.sh), brings the cluster up or reuses
#    a running one (up.sh), builds/imports the images named in TRITON_STRESS_K8S_IMAGES (space-separated
#    docker/<name> dirs, optional), exports KUBECONFIG (admin) and puts the matching kubectl first in PATH.
#    External cluster: with TRITON_STRESS_EXTERNAL_CLUSTER=1 and KUBECONFIG set, none of that happens and
#    the given cluster is used as is (it must already have the images the tests need).
# 2. Creates a fresh namespace with a unique name (label triton-stress/test=true), waits for its default
#    service account, exports it as TEST_NAMESPACE, runs CMD, then deletes the namespace (also on failure
#    or Ctrl-C; its pods are force-deleted so this takes seconds). Exit status = CMD's.
# Env: TEST_NAMESPACE_PREFIX (default ts-test), TRITON_STRESS_KEEP_NAMESPACE=1 (keep it for debugging).
set -eu
. "$(dirname "$0")/lib.sh"

[ $# -ge 1 ] || die "usage: with-cluster.sh CMD [ARGS...]"

if [ "${TRITON_STRESS_EXTERNAL_CLUSTER:-0}" = 1 ]; then
    [ -n "${KUBECONFIG:-}" ] || die "TRITON_STRESS_EXTERNAL_CLUSTER=1 needs KUBECONFIG set to that cluster's kubeconfig"
    if command -v kubectl >/dev/null; then KUBECTL=kubectl
    elif [ -x "$K8S_BIN/kubectl" ]; then KUBECTL="$K8S_BIN/kubectl"
    else die "no kubectl on PATH"; fi
    log "using external cluster from KUBECONFIG=$KUBECONFIG"
else
    need_root
    k8s_binaries_present || "$K8S_SCRIPTS_DIR/build.sh"
    "$K8S_SCRIPTS_DIR/up.sh" >/dev/null
    if [ -n "${TRITON_STRESS_K8S_IMAGES:-}" ]; then
        # shellcheck disable=SC2086
        "$K8S_SCRIPTS_DIR/images.sh" $TRITON_STRESS_K8S_IMAGES
    fi
    export KUBECONFIG="$KUBECONFIG_ADMIN"
    export PATH="$K8S_BIN:$PATH"
    KUBECTL="$K8S_BIN/kubectl"
fi

ns="${TEST_NAMESPACE_PREFIX:-ts-test}-$(date +%s)-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
"$KUBECTL" create namespace "$ns" >/dev/null || die "cannot create namespace $ns"
# Restricted Pod Security: enforced by clusters from 1.23; on this 1.20 cluster the label is
# documentation and the launcher checks its pods itself (driver/src/launcher/kube/restricted.rs).
"$KUBECTL" label namespace "$ns" triton-stress/test=true \
    pod-security.kubernetes.io/enforce=restricted >/dev/null || true

delete_ns() {
    if [ "${TRITON_STRESS_KEEP_NAMESPACE:-0}" = 1 ]; then
        log "keeping namespace $ns (TRITON_STRESS_KEEP_NAMESPACE=1)"; return
    fi
    # Mark the namespace terminating first (nothing new can be created in it), then force-delete its pods:
    # otherwise the namespace controller's exponential backoff while pods terminate makes this take
    # 20-90 s instead of a few seconds.
    "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null 2>&1
    "$KUBECTL" -n "$ns" delete pods --all --force --grace-period=0 --wait=false >/dev/null 2>&1
    if "$KUBECTL" wait --for=delete "namespace/$ns" --timeout=120s >/dev/null 2>&1 \
        || ! "$KUBECTL" get namespace "$ns" >/dev/null 2>&1; then
        log "deleted namespace $ns"
    else
        log "WARNING: namespace $ns not deleted in 120 s (still terminating)"
    fi
}
trap delete_ns EXIT
trap 'exit 130' INT TERM

deadline=$(( $(date +%s) + 60 ))
until "$KUBECTL" -n "$ns" get serviceaccount default >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "namespace $ns: default service account not created"
    sleep 0.3
done
export TEST_NAMESPACE="$ns"
log "TEST_NAMESPACE=$ns KUBECONFIG=$KUBECONFIG"
set +e
"$@"
rc=$?
set -e
exit $rc
