#!/usr/bin/env bash
# Build the cluster's images locally and import them into our containerd (no registry):
#   triton-stress/base:dev   Debian bookworm minbase via debootstrap (docker/base/packages adds packages)
#   triton-stress/pause:dev  docker/pause: static C pause binary (containerd's sandbox image)
#   triton-stress/<name>:dev for every docker/<name> directory given (with a Dockerfile)
#
# A docker/<name> dir may hold an executable prepare.sh: it is run as `prepare.sh CONTEXT` (env REPO_ROOT)
# on a temporary copy of the dir and stages there whatever the image needs from outside it (binaries
# built on the host, models/, ...); the image is then built from that context, and its stamp hashes the
# staged context, so a changed input outside docker/<name> rebuilds it. prepare.sh runs on every call
# (it should be cheap when nothing changed, e.g. a no-op cargo build) and must copy files, not symlink.
#
# usage: images.sh [--import-only] [docker/<name> ...]
#   --import-only  build nothing but the pause image (if missing); import every cached archive into the
#                  running cluster's containerd (used by up.sh)
#
# Each image is kept as an OCI archive in ${TRITON_STRESS_CACHE}/images/<name>.oci.tar with a stamp that
# hashes its inputs (directory contents, recipe, parent image stamp): unchanged inputs are not rebuilt and
# an unchanged archive is not re-imported. In pods use `image: triton-stress/<name>:dev` with
# `imagePullPolicy: Never` (or IfNotPresent); containerd knows them as docker.io/triton-stress/<name>:dev.
set -eu
. "$(dirname "$0")/lib.sh"
need_root

IMG_CACHE="$TRITON_STRESS_CACHE/images"
mkdir -p "$IMG_CACHE"
PODMAN=(podman --runtime "$(command -v runc || echo runc)" --cgroup-manager cgroupfs --events-backend file)
CTR=(ctr --address "$CONTAINERD_SOCK" --namespace k8s.io)

BASE_SUITE=bookworm
BASE_MIRROR=http://deb.debian.org/debian
BASE_RECIPE_VERSION=1   # bump to force a rebuild of the base image

import_only=0
dirs=()
for a in "$@"; do
    case "$a" in
        --import-only) import_only=1 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) dirs+=("$a") ;;
    esac
done

# temporary dirs (debootstrap target, build contexts) are removed on exit; debootstrap mounts proc/sys
# inside its target, so unmount anything left there first
TMP_DIRS=()
umount_under() {
    local m
    for m in $(awk -v s="$1/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m"
    done
}
cleanup_tmp() {
    local d
    for d in "${TMP_DIRS[@]}"; do [ -d "$d" ] && { umount_under "$d"; rm -rf "$d"; }; done
    return 0
}
trap cleanup_tmp EXIT

hash_dir() { # content hash of a directory: relative names + contents, sorted
    ( cd "$1" && find . -type f ! -name '*~' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum ) | sha256sum | cut -d' ' -f1
}
stamp_of() { cat "$IMG_CACHE/$1.stamp" 2>/dev/null || true; }
have_archive() { [ -f "$IMG_CACHE/$1.oci.tar" ] && [ -n "$(stamp_of "$1")" ]; }

save_archive() { # save_archive NAME STAMP
    local name=$1 stamp=$2
    rm -f "$IMG_CACHE/$name.oci.tar.tmp"
    "${PODMAN[@]}" save -q --format oci-archive -o "$IMG_CACHE/$name.oci.tar.tmp" "localhost/triton-stress/$name:dev" >/dev/null
    mv "$IMG_CACHE/$name.oci.tar.tmp" "$IMG_CACHE/$name.oci.tar"
    echo "$stamp" > "$IMG_CACHE/$name.stamp"
}

# ---------------------------------------------------------------- base (debootstrap)
base_stamp() {
    { echo "recipe=$BASE_RECIPE_VERSION suite=$BASE_SUITE mirror=$BASE_MIRROR variant=minbase";
      cat "$REPO_ROOT/docker/base/packages" 2>/dev/null; } | sha256sum | cut -d' ' -f1
}
BASE_DONE=0
build_base() {
    [ "$BASE_DONE" = 1 ] && return 0
    BASE_DONE=1
    local stamp; stamp=$(base_stamp)
    if [ "$(stamp_of base)" = "$stamp" ] && [ -f "$IMG_CACHE/base.oci.tar" ]; then
        "${PODMAN[@]}" image exists localhost/triton-stress/base:dev || "${PODMAN[@]}" load -i "$IMG_CACHE/base.oci.tar" >/dev/null
        log "base: up to date"
        return 0
    fi
    local t0; t0=$(date +%s)
    local root; root=$(mktemp -d /var/tmp/triton-stress-base.XXXXXX)
    TMP_DIRS+=("$root")
    local include; include=$(grep -v '^#' "$REPO_ROOT/docker/base/packages" 2>/dev/null | xargs | tr ' ' ',')
    log "base: debootstrap --variant=minbase $BASE_SUITE (about a minute)"
    debootstrap --variant=minbase ${include:+--include="$include"} "$BASE_SUITE" "$root" "$BASE_MIRROR" \
        > "$IMG_CACHE/base.debootstrap.log" 2>&1 || { tail -20 "$IMG_CACHE/base.debootstrap.log" >&2; die "debootstrap failed"; }
    umount_under "$root"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/tmp/*
    tar -C "$root" --numeric-owner -cf - . | "${PODMAN[@]}" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - localhost/triton-stress/base:dev >/dev/null
    umount_under "$root"; rm -rf "$root"
    save_archive base "$stamp"
    log "base: built in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------- pause (static C binary)
pause_stamp() { echo "pause $(hash_dir "$REPO_ROOT/docker/pause")" | sha256sum | cut -d' ' -f1; }
build_pause() {
    local stamp; stamp=$(pause_stamp)
    if [ "$(stamp_of pause)" = "$stamp" ] && [ -f "$IMG_CACHE/pause.oci.tar" ]; then
        log "pause: up to date"; return 0
    fi
    command -v gcc >/dev/null || apt_ensure gcc libc6-dev
    local ctx; ctx=$(mktemp -d /var/tmp/triton-stress-pause.XXXXXX)
    TMP_DIRS+=("$ctx")
    gcc -Os -static -Wall -o "$ctx/pause" "$REPO_ROOT/docker/pause/pause.c" || die "pause: compile failed"
    strip "$ctx/pause" 2>/dev/null || true
    cp "$REPO_ROOT/docker/pause/Dockerfile" "$ctx/"
    "${PODMAN[@]}" build --pull=never -q -t localhost/triton-stress/pause:dev "$ctx" >/dev/null || die "pause: podman build failed"
    rm -rf "$ctx"
    save_archive pause "$stamp"
    log "pause: built"
}

# ---------------------------------------------------------------- docker/<name>/Dockerfile
dir_stamp() { # inputs: directory contents + stamps of local parent images
    local dir=$1 parents p
    parents=$(sed -n 's#^[[:space:]]*FROM[[:space:]]\+\(localhost/\)\?triton-stress/\([a-z0-9._-]*\):dev.*#\2#Ip' "$dir/Dockerfile")
    { echo "dir $(hash_dir "$dir")"; for p in $parents; do echo "parent $p $(stamp_of "$p")"; done; } | sha256sum | cut -d' ' -f1
}
build_dir() {
    local dir=${1%/} name stamp t0
    [ -d "$dir" ] || dir="$REPO_ROOT/$dir"   # docker/<name> relative to the repo root
    [ -f "$dir/Dockerfile" ] || die "$dir has no Dockerfile"
    name=$(basename "$dir")
    case "$name" in base|pause) die "$name is built by its own recipe; do not pass it" ;; esac
    # parent images first
    if grep -qiE '^[[:space:]]*FROM[[:space:]]+(localhost/)?triton-stress/base:dev' "$dir/Dockerfile"; then build_base; fi
    local ctx=$dir
    t0=$(date +%s)
    if [ -x "$dir/prepare.sh" ]; then   # stage outside inputs into a temporary context
        ctx=$(mktemp -d "/var/tmp/triton-stress-$name.XXXXXX")
        TMP_DIRS+=("$ctx")
        cp -a "$dir/." "$ctx/"
        log "$name: $dir/prepare.sh (log: $IMG_CACHE/$name.prepare.log)"
        REPO_ROOT="$REPO_ROOT" "$dir/prepare.sh" "$ctx" > "$IMG_CACHE/$name.prepare.log" 2>&1 \
            || { tail -30 "$IMG_CACHE/$name.prepare.log" >&2; die "$name: prepare.sh failed"; }
    fi
    stamp=$(dir_stamp "$ctx")
    if [ "$(stamp_of "$name")" = "$stamp" ] && [ -f "$IMG_CACHE/$name.oci.tar" ]; then
        [ "$ctx" = "$dir" ] || rm -rf "$ctx"
        log "$name: up to date"; return 0
    fi
    log "$name: podman build $dir"
    "${PODMAN[@]}" build --pull=never -t "localhost/triton-stress/$name:dev" "$ctx" > "$IMG_CACHE/$name.build.log" 2>&1 \
        || { tail -30 "$IMG_CACHE/$name.build.log" >&2; die "$name: podman build failed (log: $IMG_CACHE/$name.build.log)"; }
    [ "$ctx" = "$dir" ] || rm -rf "$ctx"
    save_archive "$name" "$stamp"
    log "$name: built in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------- import into containerd
containerd_up() {
    [ -S "$CONTAINERD_SOCK" ] && "${CTR[@]}" version >/dev/null 2>&1
}
import_one() {
    local name=$1 stamp marker="$STATE/images-imported/$1"
    stamp=$(stamp_of "$name")
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
        local present; present=$("${CTR[@]}" images ls -q 2>/dev/null)
        grep -qx "docker.io/triton-stress/$name:dev" <<<"$present" && return 0
    fi
    local out ref
    out=$("${CTR[@]}" images import --snapshotter overlayfs "$IMG_CACHE/$name.oci.tar" 2>&1) \
        || die "$name: ctr import failed: $out"
    # podman names it localhost/triton-stress/<name>:dev; Kubernetes resolves triton-stress/<name>:dev
    # to docker.io/triton-stress/<name>:dev: give it that name too.
    ref=$("${CTR[@]}" images ls -q | grep -E "(^|/)triton-stress/$name:dev$" | grep -v '^docker.io/' | sed -n 1p)
    [ -n "$ref" ] || die "$name: imported image not found in containerd (ctr said: $out)"
    "${CTR[@]}" images tag --force "$ref" "docker.io/triton-stress/$name:dev" >/dev/null
    mkdir -p "$STATE/images-imported"; echo "$stamp" > "$marker"
    log "$name: imported into containerd as triton-stress/$name:dev"
}

build_pause
if [ "$import_only" = 0 ]; then
    build_base
    for d in "${dirs[@]}"; do build_dir "$d"; done
fi

if containerd_up; then
    import_one pause
    for f in "$IMG_CACHE"/*.oci.tar; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .oci.tar); [ "$n" = pause ] && continue
        have_archive "$n" && import_one "$n"
    done
elif [ "$import_only" = 1 ]; then
    die "containerd of the cluster is not running ($CONTAINERD_SOCK)"
else
    log "cluster not running: images cached in $IMG_CACHE; up.sh imports them"
fi
