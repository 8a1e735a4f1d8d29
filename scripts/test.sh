#!/usr/bin/env bash
# The test command: installs what the tests need (a real CPU tritonserver and perf_analyzer in
# .local/; Debian's prometheus for the autoscaler tests; Debian's chromium for the HTML report's
# browser test; PostgreSQL tests start their own
# throwaway cluster from the server binaries of the Debian package postgresql-15, installed here
# when missing), then checks formatting, lints and
# runs every test of the workspace against the real servers.
# TRITON_STRESS_K8S=1 also runs the Kubernetes tests on a single-node cluster built from
# Debian's sources (scripts/k8s/ci.sh; ~15 min the first time on a fresh machine): the cluster
# smoke test, then the kube launcher's tests on pods of the project's images.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "test.sh: installing PostgreSQL server binaries (postgresql-15)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi
scripts/install-tritonserver.sh
# A second Triton release beside 2.51 (tritonserver 2.44.0) for the version sweep's test.
PYTRITON_VERSION=0.5.5 TRITON_STRESS_LOCAL="$PWD/.local/pytriton-0.5.5" scripts/install-tritonserver.sh
scripts/install-prometheus.sh
scripts/install-chromium.sh
scripts/install-junit-schema.sh
scripts/install-otava.sh

# With the Kubernetes stage, its two long builds -- Kubernetes from source (~15 min of both cores
# on a fresh machine, then cached) and the images with their release binaries (~5 min fresh) --
# start now at the lowest priority and take the cycles the checks and tests below leave idle;
# the kube stage waits for them (and redoes a failed one in the foreground, where its error
# shows).
background=()
if [ "${TRITON_STRESS_K8S:-0}" = 1 ]; then
    # A target directory of their own: cargo locks one per build, and the debug builds below
    # must not wait for the release build.
    export TRITON_STRESS_IMAGE_TARGET_DIR="${TRITON_STRESS_IMAGE_TARGET_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/images}"
    # Each in a session of its own (setsid), so that an early exit stops its compilers too. With
    # the kernel's autogroups a new session is a scheduling group of its own, as heavy as the
    # tests' whole session whatever its nice: measured, two such builds took 2/3 of both cores
    # from the tests. The session's group is set to nice 19 too, so the builds take idle cycles.
    # (A command, not a function: `$!` must be the session's leader for the trap below.)
    low_priority=(setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 "$@"' low_priority)
    K8S_BUILD_NICE=19 "${low_priority[@]}" scripts/k8s/build.sh >/tmp/triton-stress-k8s-build.log 2>&1 &
    background+=($!)
    # The images are built from those binaries right after (podman alone: the kube stage then
    # finds them up to date and only imports them into the cluster).
    export K8S_IMAGES="docker/tritonserver docker/tritonserver-2.44 docker/worker docker/python-client-2.51 docker/python-client-2.44 docker/driver docker/postgres docker/models"
    CARGO_TARGET_DIR="$TRITON_STRESS_IMAGE_TARGET_DIR" "${low_priority[@]}" \
        bash -c 'cargo build --release -p driver -p worker && scripts/k8s/images.sh docker/k8s-smoke $K8S_IMAGES' \
        >/tmp/triton-stress-image-build.log 2>&1 &
    background+=($!)
    trap 'for job in "${background[@]}"; do kill -- "-$job" 2>/dev/null || true; done' EXIT
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The driver's end-to-end tests start the worker binary built beside the driver.
cargo build -p worker -p driver
# Tests that start real servers share 2 cores; two at a time keeps them within their timeouts.
# With the kube stage, the tests that check outcomes only -- the worker crate's integration tests
# (~6 min, real tritonservers) and the e2e binary's `outcomes_only` module (~3 min) -- run beside
# it at the lowest priority: the cluster's tests leave about half of both cores idle. The worker's
# unit tests, some of which wait on threads, run here first.
beside_kube() {
    local status=0
    cargo test -p worker --test '*' --no-fail-fast -- --test-threads 2 || status=$?
    cargo test -p driver --test e2e -- --test-threads 2 outcomes_only:: || status=$?
    return "$status"
}
if [ "${TRITON_STRESS_K8S:-0}" = 1 ]; then
    cargo_status=0
    cargo test --workspace --exclude worker --no-fail-fast -- --test-threads 2 --skip outcomes_only:: || cargo_status=$?
    cargo test -p worker --lib --bins -- --test-threads 2 || cargo_status=$?
    if [ "$cargo_status" != 0 ]; then
        # No kube stage after a failure: the tests meant for beside it still run, and say what
        # they say.
        beside_kube || true
        exit "$cargo_status"
    fi
    cargo test -p worker --test '*' --no-run
    beside_log=/tmp/triton-stress-beside-kube-tests.log
    "${low_priority[@]}" bash -c "$(declare -f beside_kube); beside_kube" >"$beside_log" 2>&1 &
    beside_tests=$!
    background+=($beside_tests)
else
    cargo test --workspace --no-fail-fast -- --test-threads 2
fi

if [ "${TRITON_STRESS_K8S:-0}" = 1 ]; then
    # The kube launcher's and deploy/'s tests (driver/tests/kube.rs) on the cluster, with the
    # project's images; one at a time (2 cores, each run has a Triton pod).
    for job in "${background[@]}"; do
        [ "$job" = "$beside_tests" ] && continue
        wait "$job" || echo "test.sh: a background build failed (/tmp/triton-stress-*-build.log); the kube stage builds it again" >&2
    done
    kube_status=0
    TRITON_STRESS_K8S_IMAGES="$K8S_IMAGES" \
        scripts/k8s/ci.sh "cargo test -p driver --test kube -- --ignored --skip bench_ --test-threads 1" || kube_status=$?
    beside_status=0
    wait "$beside_tests" || beside_status=$?
    echo "== the tests run beside the kube stage =="
    cat "$beside_log"
    [ "$kube_status" = 0 ] && [ "$beside_status" = 0 ]
fi
