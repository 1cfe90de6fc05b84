#!/usr/bin/env bash
# The operator image as a pod would run it, against a real kube-apiserver (CTest label `api`),
# without a container runtime: hack/images.sh builds the image, its layer is unpacked, and
# gantry-operator runs from it the way the chart's Deployment runs it: as uid 65532, its root
# filesystem mounted read-only (a private mount namespace) with a tmpfs on /tmp, the environment
# the installed Deployment sets, and in-cluster config from a ServiceAccount directory holding the
# chart ServiceAccount's token (KUBERNETES_SERVICE_HOST/PORT pointing at the API server).
# Checks: the informers sync, the probes' /healthz and /readyz and /metrics answer (on free
# loopback ports instead of the pod's), it holds the chart's Lease, it creates a TrainingJob's pods in the
# namespace it watches, SIGTERM stops it with exit 0 and releases the Lease.
#
#   GANTRY_TEST_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig \
#       charts/gantry/tests/image_api_test.sh BUILD-DIR
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset or when not root (chroot, mount namespaces).
set -euo pipefail
build=${1:?usage: image_api_test.sh BUILD-DIR}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (chroot, unshare -m)"; exit 77; }
chart=$root/charts/gantry
rel=$id relns=$id-rel jobns=$id-jobs op_pid=
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gantry-image-test.XXXXXX")
logs=${ARTIFACTS:-$tmp}
log=$logs/operator-image-$id.log
cleanup() {
    [ -z "$op_pid" ] || kill "$op_pid" 2>/dev/null || true
    "$helm" uninstall "$rel" -n "$relns" >/dev/null 2>&1 || true
    kc delete namespace "$relns" "$jobns" --wait=false >/dev/null 2>&1 || true
    [ -n "${ARTIFACTS:-}" ] || cat "$log" 2>/dev/null | tail -5 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

"$root/hack/images.sh" --build-dir "$build" --out "$tmp/img" >/dev/null
rfs=$tmp/rootfs
mkdir -p "$rfs"
layer=$(python3 - "$tmp/img/gantry-operator-"*.tar <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":", 1)[1]).read()
man = json.loads(blob(json.loads(t.extractfile("index.json").read())["manifests"][0]["digest"]))
print(man["layers"][0]["digest"].split(":", 1)[1])
PY
)
tar -xf "$tmp"/img/gantry-operator-*.tar -C "$tmp" "blobs/sha256/$layer"
tar -xf "$tmp/blobs/sha256/$layer" -C "$rfs"

kc apply -f "$root/manifests/crds/" >/dev/null
kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
kc create namespace "$relns" >/dev/null
kc create namespace "$jobns" >/dev/null
"$helm" install "$rel" "$chart" -n "$relns" --skip-crds --set watchNamespace="$jobns" >/dev/null

# What the kubelet would mount: the ServiceAccount's token, the cluster CA, the namespace.
sadir=$rfs/var/run/secrets/kubernetes.io/serviceaccount
mkdir -p "$sadir"
kc create token "$rel-gantry-operator" -n "$relns" --duration=1h >"$sadir/token"
kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$sadir/ca.crt"
printf '%s' "$relns" >"$sadir/namespace"
chmod 0644 "$sadir"/*
server=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
hostport=${server#https://}
# The environment of the installed Deployment (fieldRef metadata.namespace -> the release's).
envs=(KUBERNETES_SERVICE_HOST="${hostport%:*}" KUBERNETES_SERVICE_PORT="${hostport##*:}")
# The pod's ports, on this host's network: free loopback ports instead of :8081 / :8080.
read -r hport mport < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
while IFS='=' read -r name value; do
    [ -n "$name" ] || continue
    [ -n "$value" ] || value=$relns
    case $name in
    GANTRY_HEALTH_ADDR) value=127.0.0.1:$hport ;;
    GANTRY_METRICS_ADDR) value=127.0.0.1:$mport ;;
    esac
    envs+=("$name=$value")
done < <(kc -n "$relns" get deploy "$rel-gantry-operator" \
         -o jsonpath='{range .spec.template.spec.containers[0].env[*]}{.name}={.value}{"\n"}{end}')
grep -q "GANTRY_NAMESPACE=$jobns" <<<"$(printf '%s\n' "${envs[@]}")" &&
    grep -q "GANTRY_HEALTH_ADDR=" <<<"$(printf '%s\n' "${envs[@]}")" &&
    grep -q "GANTRY_METRICS_ADDR=" <<<"$(printf '%s\n' "${envs[@]}")" &&
    ok "environment from the installed Deployment: ${#envs[@]} variables" || bad "env: ${envs[*]}"

env -i "${envs[@]}" unshare -m bash -c '
    mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" &&
    mount -t tmpfs -o size=16m,mode=1777 tmpfs "$1/tmp" &&
    exec chroot --userspec=65532:65532 "$1" /usr/bin/gantry-operator' _ "$rfs" >"$log" 2>&1 &
op_pid=$!
wait_for "operator from the image: in-cluster config, caches synced" 30 grep -q '"Caches synced"' "$log"
wait_for "/healthz answers 200 (the liveness probe)" 10 curl -sf "http://127.0.0.1:$hport/healthz"
wait_for "/readyz answers 200 (the readiness probe)" 20 curl -sf "http://127.0.0.1:$hport/readyz"
wait_for "/metrics: gantry_operator_leader 1" 20 bash -c \
    "curl -sf http://127.0.0.1:$mport/metrics | grep -qx 'gantry_operator_leader 1'"
wait_for "it holds the chart's Lease" 20 bash -c \
    "'$kubectl' -n $relns get lease gantry-operator -o jsonpath='{.spec.holderIdentity}' | grep -q ."
kc -n "$jobns" apply -f - >/dev/null <<'JOB'
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"hello"},"spec":{"replicas":2}}
JOB
wait_for "it creates the job's 2 pods" 30 bash -c \
    "[ \$('$kubectl' -n $jobns get pods -l gantry.dev/job-name=hello --no-headers | wc -l) -eq 2 ]"
kill -TERM "$op_pid"
rc=0
wait "$op_pid" || rc=$?
op_pid=
[ "$rc" = 0 ] && ok "SIGTERM: exit 0" || bad "SIGTERM: exit $rc"
got=$(kc -n "$relns" get lease gantry-operator -o jsonpath='{.spec.holderIdentity}')
[ -z "$got" ] && ok "the Lease is released on the way out" || bad "Lease still held by '$got'"
grep -q '"level":"error"' "$log" && bad "errors in the log: $(grep '"level":"error"' "$log" | head -3)" ||
    ok "no error in the operator's log"
summary
