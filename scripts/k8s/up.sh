#!/usr/bin/env bash
# Start a real single-node Kubernetes cluster from the cached binaries (see build.sh):
# PKI, etcd, kube-apiserver (RBAC + NodeRestriction), containerd (CRI), CNI bridge on a private subnet
# that exists only on this machine, controller-manager, scheduler, kubelet, kube-proxy.
# Waits until the node is Ready and writes the admin kubeconfig to $KUBECONFIG_ADMIN
# (default ${TRITON_STRESS_CACHE:-$HOME/.cache/triton-stress}/kubeconfig), printed on the last line.
#
# Safe to rerun: a healthy running cluster is reused; anything else (crashed or half-started) is first
# torn down with down.sh and started fresh.
set -eu
. "$(dirname "$0")/lib.sh"
need_root
k8s_binaries_present || die "no cached Kubernetes binaries in $K8S_BIN: run scripts/k8s/build.sh first"

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

COMPONENTS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"


cluster_healthy() {
    local c
    for c in $COMPONENTS; do pid_alive "$c" || return 1; done
    [ -f "$KUBECONFIG_ADMIN" ] || return 1
    kubectl_admin get --raw=/readyz >/dev/null 2>&1 || return 1
    kubectl_admin get node "$NODE_NAME" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

if cluster_healthy; then
    log "cluster already running and Ready (reused)"
    echo "$KUBECONFIG_ADMIN"
    exit 0
fi
if [ -d "$STATE" ] || ip link show "$K8S_BRIDGE" >/dev/null 2>&1; then
    log "found leftover or unhealthy cluster state: running down.sh first"
    "$K8S_SCRIPTS_DIR/down.sh"
fi

# Every failure from here on leaves a state that down.sh cleans; say so.
trap 'rc=$?; if [ $rc -ne 0 ]; then log "up.sh failed (rc=$rc); logs in $LOGS; clean up with scripts/k8s/down.sh"; fi' EXIT

for p in etcd containerd runc iptables conntrack openssl ip; do
    command -v "$p" >/dev/null || die "$p missing: run scripts/k8s/build.sh (installs the runtime packages)"
done
[ -x "$CNI_BIN_DIR/bridge" ] || die "CNI plugins missing in $CNI_BIN_DIR (containernetworking-plugins)"

# The state dir is a tmpfs by default: etcd's fsyncs and the containers' layers then cost no disk I/O
# (this machine's disk is shared with other builds), and down.sh removes it all by one umount.
mkdir -p "$STATE"
if [ "${TRITON_STRESS_K8S_TMPFS:-1}" = 1 ]; then
    mount -t tmpfs -o "size=${TRITON_STRESS_K8S_TMPFS_SIZE:-8g},mode=700" triton-stress-k8s "$STATE"
fi
mkdir -p "$RUN" "$LOGS" "$PKI" "$CNI_CONF_DIR" "$STATE/cni/ipam" "$KUBELET_ROOT" \
         "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$STATE/etcd" "$STATE/config" "$(dirname "$KUBECONFIG_ADMIN")"
chmod 700 "$STATE"
CFG="$STATE/config"

# ---------------------------------------------------------------- PKI
# ECDSA P-256 keys (fast). CA + apiserver serving cert + kubelet serving cert + client certs.
gen_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }
# sign NAME CN O(optional, may be empty) EXT(serverAuth|clientAuth) SAN(optional)
sign() {
    local name=$1 cn=$2 org=$3 eku=$4 san=${5:-}
    local subj="/CN=$cn"; [ -n "$org" ] && subj="/O=$org$subj"
    gen_key "$PKI/$name.key"
    openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$eku"
        [ -n "$san" ] && echo "subjectAltName=$san"
    } > "$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
if [ ! -f "$PKI/.complete" ]; then
    log "generating PKI in $PKI"
    gen_key "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=triton-stress-k8s-ca" -days 3650 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
        -out "$PKI/ca.crt" 2>/dev/null
    sign apiserver kube-apiserver "" serverAuth \
        "IP:$NODE_IP,IP:$SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
    sign admin kubernetes-admin system:masters clientAuth
    sign controller-manager system:kube-controller-manager "" clientAuth
    sign scheduler system:kube-scheduler "" clientAuth
    sign kube-proxy system:kube-proxy "" clientAuth
    sign kubelet-client "system:node:$NODE_NAME" system:nodes clientAuth
    sign kubelet "$NODE_NAME" "" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
    # service-account token signing keys
    gen_key "$PKI/sa.key"
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    touch "$PKI/.complete"
fi

# kubeconfig NAME USER-CERT-BASENAME -> file
kubeconfig() {
    local file=$1 cert=$2
    cat > "$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: triton-stress
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 < "$PKI/$cert.key")
contexts:
- name: triton-stress
  context:
    cluster: triton-stress
    user: $cert
current-context: triton-stress
KC
    chmod 600 "$file"
}
kubeconfig "$CFG/controller-manager.kubeconfig" controller-manager
kubeconfig "$CFG/scheduler.kubeconfig" scheduler
kubeconfig "$CFG/kube-proxy.kubeconfig" kube-proxy
kubeconfig "$CFG/kubelet.kubeconfig" kubelet-client

# ---------------------------------------------------------------- processes
# start NAME CMD...: own session, output to $LOGS/NAME.log, pid in $RUN/NAME.pid
start() {
    local name=$1; shift
    setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
    echo $! > "$RUN/$name.pid"
}
wait_for() { # wait_for WHAT TIMEOUT_S COMPONENT CMD...
    local what=$1 t=$2 comp=$3; shift 3
    local deadline=$(( $(date +%s) + t ))
    until "$@" >/dev/null 2>&1; do
        if [ -n "$comp" ] && ! pid_alive "$comp"; then
            tail -n 30 "$LOGS/$comp.log" >&2 || true
            die "$comp exited while waiting for $what (log: $LOGS/$comp.log)"
        fi
        [ "$(date +%s)" -lt "$deadline" ] || { tail -n 30 "$LOGS/$comp.log" >&2 || true; die "timed out waiting for $what"; }
        sleep 0.3
    done
    log "$what ($(elapsed) s)"
}

# ---------------------------------------------------------------- network
# The bridge carries the node IP; pods get POD_CIDR addresses on it. Pods get only on-link routes and
# a route to the Service range (no default route); forwarding from the bridge to anything but the
# bridge is dropped, so no cluster traffic can leave this machine.
log "creating bridge $K8S_BRIDGE ($NODE_IP/${POD_CIDR#*/})"
ip link add "$K8S_BRIDGE" type bridge
ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$K8S_BRIDGE"
ip link set "$K8S_BRIDGE" up
: > "$STATE/sysctl.restore"
set_sysctl() {
    local k=$1 v=$2 f="/proc/sys/${1//.//}"
    [ -w "$f" ] || { log "sysctl $k not available (skipped)"; return 0; }
    echo "$k $(cat "$f")" >> "$STATE/sysctl.restore"
    echo "$v" > "$f"
}
modprobe br_netfilter 2>/dev/null || true
set_sysctl net.ipv4.ip_forward 1
set_sysctl net.bridge.bridge-nf-call-iptables 1
iptables -w -N TSK8S-FORWARD
iptables -w -A TSK8S-FORWARD -i "$K8S_BRIDGE" ! -o "$K8S_BRIDGE" -j DROP
iptables -w -A TSK8S-FORWARD -o "$K8S_BRIDGE" ! -i "$K8S_BRIDGE" -j DROP
iptables -w -I FORWARD 1 -j TSK8S-FORWARD
# pod -> pod (same bridge, incl. hairpin through a Service) and pod -> node are what's allowed
iptables -w -N TSK8S-ALLOW
iptables -w -A TSK8S-ALLOW -i "$K8S_BRIDGE" -o "$K8S_BRIDGE" -j ACCEPT
iptables -w -I FORWARD 1 -j TSK8S-ALLOW

cat > "$CNI_CONF_DIR/10-triton-stress.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "triton-stress",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$K8S_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI

# ---------------------------------------------------------------- etcd
log "starting etcd (127.0.0.1:$ETCD_CLIENT_PORT)"
start etcd etcd --name triton-stress --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "triton-stress=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --listen-metrics-urls "" --quota-backend-bytes 2147483648 --snapshot-count 10000 --logger zap --log-level warn

# ---------------------------------------------------------------- containerd
cat > "$CFG/containerd.toml" <<TOML
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
oom_score = 0
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/triton-stress/pause:dev"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$STATE/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
TOML
log "starting containerd ($CONTAINERD_SOCK)"
start containerd containerd --config "$CFG/containerd.toml" --log-level warn
wait_for "containerd up" 30 containerd ctr --address "$CONTAINERD_SOCK" version
# Images built by images.sh are kept as OCI archives in the cache: import them (pause first) in the
# background while the control plane starts; kubelet waits for the pause image only.
"$K8S_SCRIPTS_DIR/images.sh" --import-only > "$LOGS/images.log" 2>&1 &
IMPORT_PID=$!

# ---------------------------------------------------------------- apiserver
wait_for "etcd healthy" 30 etcd sh -c "curl -fsS http://127.0.0.1:$ETCD_CLIENT_PORT/health | grep -q true"
log "starting kube-apiserver (https://$NODE_IP:$APISERVER_PORT)"
start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" --insecure-port 0 \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer "https://kubernetes.default.svc.cluster.local" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --allow-privileged=true --profiling=false --event-ttl 1h \
    --v 1
kubeconfig "$KUBECONFIG_ADMIN.tmp" admin
mv "$KUBECONFIG_ADMIN.tmp" "$KUBECONFIG_ADMIN"
wait_for "kube-apiserver ready" 90 kube-apiserver kubectl_admin get --raw=/readyz

# ---------------------------------------------------------------- controllers
log "starting kube-controller-manager, kube-scheduler"
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$CFG/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$CFG/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$CFG/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --port 0 --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false \
    --controllers '*,-cloud-node-lifecycle' --profiling=false --v 1
start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$CFG/scheduler.kubeconfig" \
    --authentication-kubeconfig "$CFG/scheduler.kubeconfig" \
    --authorization-kubeconfig "$CFG/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --port 0 --leader-elect=false --profiling=false --v 1

# ---------------------------------------------------------------- kubelet
cat > "$CFG/kubelet.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
cgroupDriver: cgroupfs
failSwapOn: false
resolvConf: ""
clusterDomain: cluster.local
volumePluginDir: $STATE/kubelet-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
rotateCertificates: false
serverTLSBootstrap: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusReportFrequency: 1m
nodeStatusUpdateFrequency: 4s
runtimeRequestTimeout: 10m
maxPods: 110
# Today's kubelet defaults (1.27+) for its API clients; 1.20's 5 requests/s queued a killed pod's
# status behind the other pods' updates for seconds (seen as "Throttling request took" at --v 3).
kubeAPIQPS: 50
kubeAPIBurst: 100
eventRecordQPS: 50
eventBurst: 100
KCFG
pause_imported() { [ -f "$STATE/images-imported/pause" ] || ! proc_alive "$IMPORT_PID"; }
wait_for "pause image imported" 60 "" pause_imported
[ -f "$STATE/images-imported/pause" ] || { cat "$LOGS/images.log" >&2; die "pause image import failed"; }
log "starting kubelet (node $NODE_NAME, $NODE_IP)"
# kubelet keeps container logs under /var/log/pods (not configurable in 1.20): note what existed.
[ -d /var/log/pods ] || touch "$STATE/created-var-log-pods"
[ -d /var/log/containers ] || touch "$STATE/created-var-log-containers"
start kubelet "$K8S_BIN/kubelet" \
    --config "$CFG/kubelet.yaml" --kubeconfig "$CFG/kubelet.kubeconfig" \
    --container-runtime remote --container-runtime-endpoint "unix://$CONTAINERD_SOCK" \
    --image-service-endpoint "unix://$CONTAINERD_SOCK" \
    --node-ip "$NODE_IP" --hostname-override "$NODE_NAME" \
    --root-dir "$KUBELET_ROOT" --cert-dir "$PKI/kubelet-certs" \
    --v 1

# ---------------------------------------------------------------- kube-proxy
log "starting kube-proxy (iptables mode)"
start kube-proxy "$K8S_BIN/kube-proxy" \
    --kubeconfig "$CFG/kube-proxy.kubeconfig" --proxy-mode iptables \
    --hostname-override "$NODE_NAME" --cluster-cidr "$POD_CIDR" \
    --bind-address "$NODE_IP" --nodeport-addresses "$NODE_IP/32" \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 \
    --conntrack-max-per-core 0 --oom-score-adj 0 --v 1

# ---------------------------------------------------------------- wait for Ready
node_ready() {
    kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}
wait_for "node $NODE_NAME Ready" 90 kubelet node_ready
wait_for "default service account" 60 kube-controller-manager kubectl_admin -n default get serviceaccount default
wait "$IMPORT_PID" || { cat "$LOGS/images.log" >&2; die "image import failed (log: $LOGS/images.log)"; }
log "images imported: $(grep -c 'imported into containerd' "$LOGS/images.log") ($(elapsed) s)"
for c in $COMPONENTS; do pid_alive "$c" || die "$c is not running (log: $LOGS/$c.log)"; done
touch "$STATE/up.complete"
log "cluster up in $(elapsed) s; admin kubeconfig:"
echo "$KUBECONFIG_ADMIN"
