#!/usr/bin/env bash
# Stages the image's inputs (run by scripts/k8s/images.sh with the build context as $1): the driver's
# release binary built on the host (cargo; CARGO_TARGET_DIR is honoured; the host is bookworm like the
# base image) and the repo's test-matrices/ (symlinks resolved).
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
# TRITON_STRESS_IMAGE_TARGET_DIR: a target directory for the images' build alone (scripts/test.sh).
target="${TRITON_STRESS_IMAGE_TARGET_DIR:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}}"

# TRITON_STRESS_IMAGE_PROFILE: the binaries' cargo profile (default release; CI builds its test
# images from the dev profile, see .ci/run).
profile="${TRITON_STRESS_IMAGE_PROFILE:-release}"
case "$profile" in dev) profile_dir=debug ;; *) profile_dir=$profile ;; esac
(cd "$REPO_ROOT" && CARGO_TARGET_DIR="$target" cargo build --profile "$profile" -p driver -p worker)
cp "$target/$profile_dir/driver" "$ctx/driver"
cp -rL "$REPO_ROOT/test-matrices" "$ctx/matrices"
