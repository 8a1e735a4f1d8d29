#!/usr/bin/env bash
# Creates the Secret triton-stress-store in namespace NS with random Postgres passwords, once:
# an existing Secret is left as it is (the database was initialised with its password), except
# that one made before `driver serve`'s read-only role gets that role's keys added.
#
#   deploy/make-store-secret.sh NS      # then: kubectl apply -k deploy/base -n NS
#
# Keys: postgres-password (the store's superuser password), url (the driver's DATABASE_URL,
# through the Service's DNS name), reader-password and reader-url (the read-only role
# triton_reader of `driver serve`, made when the database is created). The passwords never
# appear on a command line: kubectl reads the Secret from stdin.
set -euo pipefail
ns=${1:?usage: make-store-secret.sh NAMESPACE}
kubectl=${KUBECTL:-kubectl}
# 32 hex characters: URL-safe, since the password is also inside the url.
new_password() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
b64() { printf '%s' "$1" | base64 -w0; }
reader=$(new_password)
secret() { # postgres-password and url, base64
    cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: triton-stress-store
  labels: { app.kubernetes.io/part-of: triton-stress }
type: Opaque
data:
  postgres-password: $1
  url: $2
  reader-password: $(b64 "$reader")
  reader-url: $(b64 "postgres://triton_reader:$reader@triton-stress-postgres:5432/triton_stress")
YAML
}
field() { "$kubectl" -n "$ns" get secret triton-stress-store -o "jsonpath={.data.$1}"; }
if "$kubectl" -n "$ns" get secret triton-stress-store >/dev/null 2>&1; then
    if [ -n "$(field reader-url)" ]; then
        echo "make-store-secret: triton-stress-store already exists in $ns; left as it is" >&2
    else
        # Replaced whole from its own values (base64, never on a command line) plus the new keys.
        secret "$(field postgres-password)" "$(field url)" \
            | "$kubectl" -n "$ns" replace -f - >/dev/null
        echo "make-store-secret: added the reader keys to triton-stress-store in $ns; the role" \
            "is made when the store's database is created (restart its pod while it holds no run)" >&2
    fi
    exit 0
fi
password=$(new_password)
secret "$(b64 "$password")" "$(b64 "postgres://triton:$password@triton-stress-postgres:5432/triton_stress")" \
    | "$kubectl" -n "$ns" create -f - >/dev/null
echo "make-store-secret: created triton-stress-store in $ns" >&2
