#!/usr/bin/env bash
# Stop everything up.sh started and remove what it created: processes (by pid file, plus the
# containerd shims/containers of our own containerd socket), mounts under the state dir, pod network
# namespaces, the bridge, the iptables chains/rules, kubelet cgroups, and the runtime state.
# The whole state dir (PKI, etcd data, containerd root, logs) and the admin kubeconfig are removed;
# kept are only the cache: built binaries and image archives (up.sh re-imports those).
# Safe on a crashed, half-started or absent cluster.
set -u
. "$(dirname "$0")/lib.sh"
need_root

T0=$(date +%s)

stop_pid() { # stop_pid NAME [timeout]
    local name=$1 t=${2:-10} f="$RUN/$1.pid" pid i
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if proc_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < t * 10; i++)); do proc_alive "$pid" || break; sleep 0.1; done
        if proc_alive "$pid"; then log "$name ($pid) did not stop: SIGKILL"; kill -KILL "$pid" 2>/dev/null; fi
        log "stopped $name ($pid)"
    fi
    rm -f "$f"
}

# 1. control loops first, so nothing restarts containers while we remove them
for c in kube-proxy kubelet kube-scheduler kube-controller-manager; do stop_pid "$c" 10; done

# 2. containers, then containerd. The containers are not stopped one by one through the CRI (slow and
#    pointless: the whole containerd root is removed below): containerd is stopped, then the shims tied
#    to our socket path are killed together with their children (pause and the pods' processes).
stop_pid containerd 10
shims=$(pgrep -f -- "-address $CONTAINERD_SOCK" 2>/dev/null | xargs)
if [ -n "$shims" ]; then
    n=0
    for pid in $shims; do
        for child in $(pgrep -P "$pid" 2>/dev/null); do kill -KILL "$child" 2>/dev/null && n=$((n+1)); done
    done
    kill -KILL $shims 2>/dev/null
    log "killed $(echo "$shims" | wc -w) containerd shims and $n container processes"
    for i in $(seq 50); do
        alive=0; for pid in $shims; do proc_alive "$pid" && alive=1; done
        [ $alive = 0 ] && break; sleep 0.1
    done
fi

# 3. apiserver, etcd
stop_pid kube-apiserver 15
stop_pid etcd 10
log "processes stopped ($(( $(date +%s) - T0 )) s)"

# 4. mounts under the state dir (container rootfs, pod volumes, netns bind mounts), deepest first
if [ -d "$STATE" ]; then
    for i in 1 2 3; do
        mps=$(awk -v s="$STATE/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r | uniq)
        [ -z "$mps" ] && break
        for m in $mps; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    done
    left=$(awk -v s="$STATE/" 'index($5, s) == 1' /proc/self/mountinfo | wc -l)
    [ "$left" -gt 0 ] && log "WARNING: $left mounts under $STATE remain"
fi

log "mounts removed ($(( $(date +%s) - T0 )) s)"

# 5. network: bridge (its veths die with the pod netns), iptables rules of ours, kube-proxy's, CNI portmap's
if ip link show "$K8S_BRIDGE" >/dev/null 2>&1; then
    ip link set "$K8S_BRIDGE" down 2>/dev/null
    ip link del "$K8S_BRIDGE" && log "removed bridge $K8S_BRIDGE"
fi
# veths whose master was our bridge are gone with it or with their netns; nothing else to do.
if command -v iptables >/dev/null; then
    for ch in TSK8S-ALLOW TSK8S-FORWARD; do
        while iptables -w -D FORWARD -j "$ch" 2>/dev/null; do :; done
        iptables -w -F "$ch" 2>/dev/null && iptables -w -X "$ch" 2>/dev/null
    done
    # kube-proxy's chains (KUBE-*) and the CNI portmap plugin's (CNI-HOSTPORT-*, CNI-DN-*)
    if [ -x "$K8S_BIN/kube-proxy" ] && iptables-save 2>/dev/null | grep -q 'KUBE-'; then
        "$K8S_BIN/kube-proxy" --cleanup --proxy-mode iptables >/dev/null 2>&1 || true
    fi
    for table in filter nat mangle; do
        # jumps from built-in chains into our chains, then the chains themselves
        iptables-save -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-HOSTPORT|CNI-DN-)' | \
            grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ' | while read -r rule; do
                eval "iptables -w -t $table -D ${rule#-A }" 2>/dev/null
            done
        chains=$(iptables-save -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\|CNI-HOSTPORT[^ ]*\|CNI-DN-[^ ]*\) .*/\1/p')
        for ch in $chains; do iptables -w -t "$table" -F "$ch" 2>/dev/null; done
        for ch in $chains; do iptables -w -t "$table" -X "$ch" 2>/dev/null; done
    done
    # conntrack entries of the pod/service ranges
    if command -v conntrack >/dev/null; then
        conntrack -D -s "$POD_CIDR" >/dev/null 2>&1; conntrack -D -d "$SERVICE_CIDR" >/dev/null 2>&1
    fi
fi

log "network removed ($(( $(date +%s) - T0 )) s)"

# 6. sysctls we changed
if [ -f "$STATE/sysctl.restore" ]; then
    while read -r k v; do echo "$v" > "/proc/sys/${k//.//}" 2>/dev/null; done < "$STATE/sysctl.restore"
fi

# 7. kubelet's cgroups (cgroupfs driver: /kubepods under every v1 hierarchy)
for h in /sys/fs/cgroup/*/; do
    [ -d "${h}kubepods" ] || continue
    find "${h}kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# 8. files: runtime state, pod logs dirs kubelet created, kubeconfig
[ -f "$STATE/created-var-log-pods" ] && rm -rf /var/log/pods
[ -f "$STATE/created-var-log-containers" ] && rm -rf /var/log/containers
if [ -d "$STATE" ]; then
    if awk -v s="$STATE/" 'index($5, s) == 1' /proc/self/mountinfo | grep -q .; then
        log "WARNING: mounts remain under $STATE; not removing it"
    else
        # the state tmpfs (see up.sh) goes with its umount; a plain dir is removed
        while mountpoint -q "$STATE"; do umount "$STATE" 2>/dev/null || umount -l "$STATE" || break; done
        rm -rf "$STATE"
    fi
fi
rm -f "$KUBECONFIG_ADMIN"
log "cluster down ($(( $(date +%s) - T0 )) s)"
