#!/usr/bin/env bash
# Creates the Secret triton-stress-store in namespace NS with a random Postgres password, once:
# an existing Secret is left as it is (the database was initialised with its password).
#
#   deploy/make-store-secret.sh NS      # then: kubectl apply -k deploy/base -n NS
#
# Keys: postgres-password (the store's superuser password) and url (the driver's DATABASE_URL,
# through the Service's DNS name). The password never appears on a command line: kubectl reads
# the Secret from stdin.
set -euo pipefail
ns=${1:?usage: make-store-secret.sh NAMESPACE}
kubectl=${KUBECTL:-kubectl}
if "$kubectl" -n "$ns" get secret triton-stress-store >/dev/null 2>&1; then
    echo "make-store-secret: triton-stress-store already exists in $ns; left as it is" >&2
    exit 0
fi
# 32 hex characters: URL-safe, since the password is also inside the url.
password=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
b64() { printf '%s' "$1" | base64 -w0; }
"$kubectl" -n "$ns" create -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: triton-stress-store
  labels: { app.kubernetes.io/part-of: triton-stress }
type: Opaque
data:
  postgres-password: $(b64 "$password")
  url: $(b64 "postgres://triton:$password@triton-stress-postgres:5432/triton_stress")
YAML
echo "make-store-secret: created triton-stress-store in $ns" >&2
