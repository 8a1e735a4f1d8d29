# shellcheck shell=bash disable=SC2034
# Shared settings for scripts/k8s/*.sh. Sourced, not executed.
# Everything lives outside the repository:
#   ${TRITON_STRESS_CACHE}/kubernetes/<deb-version>/bin   built binaries (build.sh)
#   ${TRITON_STRESS_CACHE}/images/                        image build stamps (images.sh)
#   ${TRITON_STRESS_CACHE}/kubeconfig                     admin kubeconfig (up.sh)
#   ${TRITON_STRESS_K8S_STATE}                            PKI, etcd data, logs, pids, kubelet dirs

set -o pipefail

K8S_SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$K8S_SCRIPTS_DIR/../.." && pwd)"

TRITON_STRESS_CACHE="${TRITON_STRESS_CACHE:-$HOME/.cache/triton-stress}"
# Debian bookworm source package version of `kubernetes` (upstream v1.20.2).
K8S_DEB_VERSION_DEFAULT="1.20.5+really1.20.2-1.1+deb12u1"
K8S_UPSTREAM_VERSION="v1.20.2"
K8S_CACHE_ROOT="$TRITON_STRESS_CACHE/kubernetes"
K8S_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"

# Which cached build to use: explicit K8S_DEB_VERSION, else the pinned default when it is built,
# else whatever build.sh last recorded in kubernetes/current (a fallback when the archive moved on).
k8s_resolve_version() {
    if [ -n "${K8S_DEB_VERSION:-}" ]; then
        echo "$K8S_DEB_VERSION"
    elif [ -f "$K8S_CACHE_ROOT/$K8S_DEB_VERSION_DEFAULT/bin/.complete" ]; then
        echo "$K8S_DEB_VERSION_DEFAULT"
    elif [ -f "$K8S_CACHE_ROOT/current" ]; then
        cat "$K8S_CACHE_ROOT/current"
    else
        echo "$K8S_DEB_VERSION_DEFAULT"
    fi
}
K8S_VERSION_RESOLVED="$(k8s_resolve_version)"
K8S_BIN="$K8S_CACHE_ROOT/$K8S_VERSION_RESOLVED/bin"

TRITON_STRESS_K8S_STATE="${TRITON_STRESS_K8S_STATE:-/var/lib/triton-stress-k8s}"
STATE="$TRITON_STRESS_K8S_STATE"
PKI="$STATE/pki"
RUN="$STATE/run"          # pid files
LOGS="$STATE/logs"
KUBECONFIG_ADMIN="${TRITON_STRESS_KUBECONFIG:-$TRITON_STRESS_CACHE/kubeconfig}"

# Network: a bridge that exists only on this machine. Pods get addresses from POD_CIDR,
# Services from SERVICE_CIDR (virtual, iptables only). Nothing is routed off the machine.
K8S_BRIDGE="${K8S_BRIDGE:-tsk8s0}"
POD_CIDR="${K8S_POD_CIDR:-10.244.0.0/24}"
NODE_IP="${K8S_NODE_IP:-10.244.0.1}"
SERVICE_CIDR="${K8S_SERVICE_CIDR:-10.96.0.0/24}"
SERVICE_IP="${K8S_SERVICE_IP:-10.96.0.1}"   # first address of SERVICE_CIDR: the `kubernetes` Service
NODE_NAME="${K8S_NODE_NAME:-triton-stress-node}"
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23791   # on 127.0.0.1 only
ETCD_PEER_PORT=23801

# containerd of our own (not the system one): own socket, root and state dirs.
CONTAINERD_ROOT="$STATE/containerd/root"
CONTAINERD_STATE="$STATE/containerd/state"   # /run-like: shims, sockets
CONTAINERD_SOCK="$STATE/containerd/containerd.sock"
CNI_CONF_DIR="$STATE/cni/net.d"
CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}"
KUBELET_ROOT="$STATE/kubelet"

log()  { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { log "ERROR: $*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (containerd, mounts, iptables)"; }

k8s_binaries_present() {
    [ -f "$K8S_BIN/.complete" ] || return 1
    local b; for b in $K8S_BINARIES; do [ -x "$K8S_BIN/$b" ] || return 1; done
}

# A pid is alive when it exists and is not a zombie (this machine's init reaps only every ~2 s).
proc_alive() {
    local st
    st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
pid_alive() { local f="$RUN/$1.pid"; [ -f "$f" ] && proc_alive "$(cat "$f")"; }

kubectl_admin() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# Install Debian packages that are missing (no-op when all are installed).
apt_ensure() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
}

# Runtime packages of the node and the image builds.
K8S_RUNTIME_PACKAGES="etcd-server containerd runc containernetworking-plugins podman buildah iptables conntrack debootstrap openssl iproute2 procps util-linux curl ca-certificates"
