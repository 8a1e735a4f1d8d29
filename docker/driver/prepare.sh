#!/usr/bin/env bash
# Stages the image's inputs (run by scripts/k8s/images.sh with the build context as $1): the driver's
# release binary built on the host (cargo; CARGO_TARGET_DIR is honoured; the host is bookworm like the
# base image) and the repo's test-matrices/ (symlinks resolved).
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
REPO_ROOT=${REPO_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

(cd "$REPO_ROOT" && cargo build --release -p driver -p worker)
cp "$target/release/driver" "$ctx/driver"
cp -rL "$REPO_ROOT/test-matrices" "$ctx/matrices"
