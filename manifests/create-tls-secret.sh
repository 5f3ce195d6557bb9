#!/usr/bin/env bash
# Creates (or replaces) the Secret kube-system/tierflow-controller-tls that
# tierflow-controller serves agents with: a private CA (ca.crt, which the
# agents trust) and a serving certificate signed by it (tls.crt, tls.key)
# for the names of the tierflow-controller Service. The CA key is not kept:
# to rotate, run the script again and restart the controller and agents
#   kubectl -n kube-system rollout restart deploy/tierflow-controller ds/tierflow-agent
#
# Usage: manifests/create-tls-secret.sh [--days N]   (needs openssl, kubectl)
# KUBECTL overrides the kubectl command (e.g. "kubectl --context kind-kind").
set -euo pipefail

days=3650
while (($#)); do
  case $1 in
    --days) days=${2:?--days needs a number}; shift 2 ;;
    *) echo "usage: $0 [--days N]" >&2; exit 2 ;;
  esac
done
[[ $days =~ ^[1-9][0-9]*$ ]] || { echo "$0: --days must be a positive number" >&2; exit 2; }
kubectl=${KUBECTL:-kubectl}
ns=kube-system
svc=tierflow-controller
secret=tierflow-controller-tls
for tool in openssl "${kubectl%% *}"; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
  -keyout ca.key -out ca.crt -days "$days" -subj "/CN=tierflow-controller-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
  -keyout tls.key -out tls.csr -subj "/CN=$svc.$ns.svc" 2>/dev/null
cat >ext.cnf <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:$svc,DNS:$svc.$ns,DNS:$svc.$ns.svc,DNS:$svc.$ns.svc.cluster.local
EXT
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
  -days "$days" -extfile ext.cnf -out tls.crt 2>/dev/null
openssl verify -CAfile ca.crt tls.crt >/dev/null

$kubectl -n "$ns" create secret generic "$secret" --type=kubernetes.io/tls \
  --from-file=ca.crt --from-file=tls.crt --from-file=tls.key --dry-run=client -o yaml |
  $kubectl apply -f - >/dev/null
echo "secret $ns/$secret created for $svc.$ns.svc (valid $days days)"
