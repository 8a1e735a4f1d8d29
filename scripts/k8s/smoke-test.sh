#!/usr/bin/env bash
# Smoke test proving the cluster is real. Runs in TEST_NAMESPACE with KUBECONFIG (as set by
# with-cluster.sh; when they are not set it re-runs itself through with-cluster.sh).
# Needs the image triton-stress/k8s-smoke:dev (scripts/k8s/images.sh docker/k8s-smoke).
# Prints PASS/FAIL per check and ends with "N passed, N failed"; exit status 1 on any failure.
set -u
. "$(dirname "$0")/lib.sh"

if [ -z "${TEST_NAMESPACE:-}" ] || [ -z "${KUBECONFIG:-}" ]; then
    exec "$K8S_SCRIPTS_DIR/with-cluster.sh" "$0" "$@"
fi
NS="$TEST_NAMESPACE"
IMAGE="${SMOKE_IMAGE:-triton-stress/k8s-smoke:dev}"
K() { kubectl -n "$NS" "$@"; }
command -v kubectl >/dev/null || die "kubectl not on PATH"

passed=0; failed=0
pass() { passed=$((passed+1)); echo "PASS: $1"; }
fail() { failed=$((failed+1)); echo "FAIL: $1${2:+ -- $2}"; }
T0=$(date +%s)

# ------------------------------------------------------------------ objects
K apply -f - >/dev/null <<YAML || fail "apply manifests"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: $IMAGE
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
        resources:
          requests: {cpu: 10m, memory: 32Mi}
          limits: {memory: 128Mi}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: ClusterIP
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: pod-reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: pod-reader, namespace: $NS}
---
apiVersion: v1
kind: Pod
metadata: {name: api-reader}
spec:
  serviceAccountName: pod-reader
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: [sleep, "3600"]
---
apiVersion: v1
kind: Pod
metadata: {name: oom}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: eater
    image: $IMAGE
    imagePullPolicy: Never
    command: [python3, /usr/local/bin/eat-memory.py, "512"]
    resources:
      limits: {memory: 64Mi}
YAML

# 1. Deployment of two pods from the locally built image
if K rollout status deployment/web --timeout=120s >/dev/null 2>&1; then
    pass "deployment web: 2/2 pods ready from local image $IMAGE"
else
    fail "deployment web ready" "$(K get pods -o wide 2>&1 | tail -5 | tr '\n' ';')"
fi
mapfile -t PODS < <(K get pods -l app=web --field-selector=status.phase=Running \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null)
A="${PODS[0]:-}"; B="${PODS[1]:-}"
B_IP=$(K get pod "$B" -o jsonpath='{.status.podIP}' 2>/dev/null)

# 2. ClusterIP Service with both endpoints
SVC_IP=$(K get service web -o jsonpath='{.spec.clusterIP}' 2>/dev/null)
for _ in $(seq 60); do
    n=$(K get endpoints web -o jsonpath='{.subsets[*].addresses[*].ip}' 2>/dev/null | wc -w)
    [ "$n" = 2 ] && break; sleep 0.5
done
if [ -n "$SVC_IP" ] && [ "$n" = 2 ]; then pass "service web: ClusterIP $SVC_IP with 2 endpoints"
else fail "service web endpoints" "clusterIP=$SVC_IP endpoints=$n"; fi

# 3. exec
got=$(K exec "$A" -- hostname 2>&1)
if [ -n "$A" ] && [ "$got" = "$A" ]; then pass "exec: hostname in $A"; else fail "exec" "pod=$A got=$got"; fi

# 4. pod -> pod (by pod IP over the bridge)
got=$(K exec "$A" -- curl -sS --max-time 5 "http://$B_IP:8080/" 2>&1)
if [ -n "$B" ] && [ "$got" = "$B" ]; then pass "pod -> pod: $A -> $B_IP:8080 answered $got"
else fail "pod -> pod" "$A -> $B ($B_IP) got: $got"; fi

# 5. pod -> Service (ClusterIP through kube-proxy's iptables rules; both backends must answer)
# kube-proxy programs a new endpoint on its next sync: a batch that reached one pod only is tried
# again (5 batches at most, 2 s apart) before the check fails.
for attempt in 1 2 3 4 5; do
    seen=$(K exec "$A" -- sh -c "for i in \$(seq 30); do curl -sS --max-time 3 http://$SVC_IP/; done" 2>&1 | sort | uniq -c)
    if echo "$seen" | grep -qw -- "$A" && echo "$seen" | grep -qw -- "$B"; then break; fi
    [ "$attempt" = 5 ] || sleep 2
done
if echo "$seen" | grep -qw -- "$A" && echo "$seen" | grep -qw -- "$B"; then
    pass "pod -> service: 30 requests to $SVC_IP:80 reached both pods ($(echo $seen))"
else fail "pod -> service" "$(echo $seen)"; fi

# 6. logs (the server logs every request)
lines=$(K logs "$B" 2>&1 | grep -c '"GET / HTTP')
if [ "$lines" -ge 1 ]; then pass "logs: $B logged $lines GET requests"; else fail "logs" "$(K logs "$B" 2>&1 | tail -3)"; fi

# 7. a pod reads the API with its service-account token (allowed: list pods; forbidden: list secrets)
K wait --for=condition=Ready pod/api-reader --timeout=90s >/dev/null 2>&1
api_call='SA=/var/run/secrets/kubernetes.io/serviceaccount; curl -sS --max-time 5 --cacert $SA/ca.crt -H "Authorization: Bearer $(cat $SA/token)" -o /tmp/out -w "%{http_code}" "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $SA/namespace)/'
code=$(K exec api-reader -- sh -c "${api_call}pods\"" 2>&1)
body=$(K exec api-reader -- cat /tmp/out 2>/dev/null)
if [ "$code" = 200 ] && echo "$body" | grep -q "\"name\": \"$A\""; then
    pass "service-account token: api-reader listed pods via https://kubernetes ($code)"
else fail "service-account token: list pods" "http=$code $(echo "$body" | head -c 200)"; fi
code=$(K exec api-reader -- sh -c "${api_call}secrets\"" 2>&1)
if [ "$code" = 403 ]; then pass "RBAC: the same token is forbidden to list secrets (403)"
else fail "RBAC forbids secrets" "http=$code"; fi

# 8. a container killed by its memory limit shows OOMKilled
reason=""
for _ in $(seq 120); do
    reason=$(K get pod oom -o jsonpath='{.status.containerStatuses[0].state.terminated.reason}' 2>/dev/null)
    [ -n "$reason" ] && break; sleep 0.5
done
if [ "$reason" = OOMKilled ]; then
    ec=$(K get pod oom -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
    pass "OOM: container over its 64Mi limit terminated with reason OOMKilled (exit $ec)"
else fail "OOMKilled" "reason='$reason' $(K get pod oom -o jsonpath='{.status.containerStatuses[0].state}' 2>&1)"; fi

echo "smoke test took $(( $(date +%s) - T0 )) s in namespace $NS"
if [ "$failed" -gt 0 ]; then
    echo "--- diagnostics"; K get all -o wide 2>&1 | head -30; K get events --sort-by=.lastTimestamp 2>&1 | tail -15
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
