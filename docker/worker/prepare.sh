#!/usr/bin/env bash
# Stages the image's inputs (run by scripts/k8s/images.sh with the build context as $1):
#   worker            the release binary, built on the host (cargo; CARGO_TARGET_DIR is honoured).
#                     The host is bookworm like the base image, so its glibc matches.
#   perf_analyzer     the native perf_analyzer 2.51 of the tritonclient wheel that
#                     scripts/install-tritonserver.sh installs (a no-op when installed)
#   libcudart.so.12   the copy vendored by nvidia-pytriton (perf_analyzer links it; no GPU is used)
#   perf_analyzer_client.py  the perf_analyzer client group's program (clients/perf_analyzer)
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
LOCAL="${TRITON_STRESS_LOCAL:-$REPO_ROOT/.local}"
# TRITON_STRESS_IMAGE_TARGET_DIR: a target directory for the images' build alone (scripts/test.sh).
target="${TRITON_STRESS_IMAGE_TARGET_DIR:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}}"

# TRITON_STRESS_IMAGE_PROFILE: the binaries' cargo profile (default release; CI builds its test
# images from the dev profile, see .ci/run).
profile="${TRITON_STRESS_IMAGE_PROFILE:-release}"
case "$profile" in dev) profile_dir=debug ;; *) profile_dir=$profile ;; esac
(cd "$REPO_ROOT" && CARGO_TARGET_DIR="$target" cargo build --profile "$profile" -p driver -p worker)
cp "$target/$profile_dir/worker" "$ctx/worker"

"$REPO_ROOT/scripts/install-tritonserver.sh"
sites=("$LOCAL"/venv/lib/python3*/site-packages); site=${sites[0]}
pa=""
for cand in "$LOCAL/venv/bin/perf_analyzer" "$site/tritonclient/bin/perf_analyzer"; do
    if [ -f "$cand" ] && head -c 4 "$cand" | grep -q $'\x7fELF'; then pa=$cand; break; fi
done
[ -n "$pa" ] || { echo "prepare: native perf_analyzer not found in $LOCAL" >&2; exit 1; }
cp "$pa" "$ctx/perf_analyzer"
cudart=("$site"/nvidia_pytriton.libs/libcudart*.so.12*)
cp "${cudart[0]}" "$ctx/libcudart.so.12"
cp "$REPO_ROOT/clients/perf_analyzer/perf_analyzer_client.py" "$ctx/"
