#!/usr/bin/env bash
# The chart on a cluster whose pods run (hack/cluster.sh up --tier full; CTest label `full`):
# the images built here without a registry (hack/images.sh --import), `helm install` with them,
# the operator pod becomes Ready as uid 65532 on a read-only root filesystem, talks to the API
# server in-cluster, takes the chart's Lease and creates a TrainingJob's pods (from the
# gantry-worker image) in the namespace it watches; `helm uninstall` leaves nothing of the release
# (the CRD stays, as documented).
#
#   GANTRY_TEST_FULL_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig \
#       charts/gantry/tests/cluster_test.sh BUILD-DIR
# BUILD-DIR holds operator/gantry-operator and worker/gantry-worker (an optimised build). Images
# are imported into the cluster of $GANTRY_RUN (hack/cluster.sh image-import).
# Exits 77 when GANTRY_TEST_FULL_KUBECONFIG is unset.
set -euo pipefail
build=${1:?usage: cluster_test.sh BUILD-DIR}
if [ -z "${GANTRY_TEST_FULL_KUBECONFIG:-}" ]; then
    echo "SKIP: GANTRY_TEST_FULL_KUBECONFIG is unset (start a cluster: hack/cluster.sh up --tier full)"
    exit 77
fi
export GANTRY_TEST_KUBECONFIG=$GANTRY_TEST_FULL_KUBECONFIG
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chart=$root/charts/gantry
rel=$id relns=$id-rel jobns=$id-jobs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gantry-cluster-test.XXXXXX")
cleanup() {
    "$helm" uninstall "$rel" -n "$relns" >/dev/null 2>&1 || true
    kc delete namespace "$relns" "$jobns" --wait=false >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

if out=$("$root/hack/images.sh" --build-dir "$build" --out "$tmp" --import 2>&1); then
    ok "images built and imported: $(grep -o 'docker.io/library/[^ ]*' <<<"$out" | tr '\n' ' ')"
else
    bad "hack/images.sh --import: $out"; summary; exit 1
fi
kc apply -f "$root/manifests/crds/" >/dev/null
kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
kc create namespace "$relns" >/dev/null
kc create namespace "$jobns" >/dev/null
kc label namespace "$relns" pod-security.kubernetes.io/enforce=restricted >/dev/null
# Watch one namespace: other tests' operators own the rest of the cluster.
if out=$("$helm" install "$rel" "$chart" -n "$relns" --skip-crds --set image.pullPolicy=Never \
         --set watchNamespace="$jobns" --wait --timeout 120s 2>&1); then
    ok "helm install --wait: the operator Deployment is available"
else
    bad "helm install --wait: $out"
    kc -n "$relns" describe pods >&2 || true
    kc -n "$relns" logs deploy/"$rel-gantry-operator" >&2 || true
fi
pod=$(kc -n "$relns" get pods -l "app.kubernetes.io/instance=$rel" -o jsonpath='{.items[0].metadata.name}' || true)
[ -n "$pod" ] || { bad "no operator pod"; summary; exit 1; }
got=$(kc -n "$relns" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount} {.spec.containers[0].image}' || true)
[ "$got" = "true 0 gantry-operator:0.1.0" ] && ok "operator pod Ready, no restarts, image gantry-operator:0.1.0" ||
    bad "operator pod: $got"
wait_for "operator log: caches synced (in-cluster config, RBAC as a Role in $jobns)" 30 bash -c \
    "'$kubectl' -n $relns logs $pod | grep -q '\"Caches synced\"'"
wait_for "the chart's Lease is held by the pod" 30 bash -c \
    "'$kubectl' -n $relns get lease gantry-operator -o jsonpath='{.spec.holderIdentity}' | grep -q '^$pod'"
kc -n "$jobns" apply -f - >/dev/null <<'JOB'
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"hello"},
 "spec":{"replicas":2,"runPolicy":{"backoffLimit":0}}}
JOB
wait_for "the in-cluster operator created the job's 2 pods" 30 bash -c \
    "[ \$('$kubectl' -n $jobns get pods -l gantry.dev/job-name=hello --no-headers | wc -l) -eq 2 ]"
wait_for "a worker pod started from the imported gantry-worker image" 60 bash -c \
    "'$kubectl' -n $jobns get pods -l gantry.dev/job-name=hello -o jsonpath='{.items[*].status.containerStatuses[*].imageID}' | grep -q sha256"

if out=$("$helm" uninstall "$rel" -n "$relns" --wait --timeout 120s 2>&1); then ok "helm uninstall"; else bad "helm uninstall: $out"; fi
sel=app.kubernetes.io/instance=$rel
wait_for "nothing of the release left after uninstall (pods, Lease, RBAC)" 60 bash -c \
    "[ -z \"\$('$kubectl' get all,sa,role,rolebinding,configmap,secret,lease -n $relns -l $sel -o name; \
     '$kubectl' get role,rolebinding -n $jobns -l $sel -o name; \
     '$kubectl' get clusterrole,clusterrolebinding -l $sel -o name)\" ] && \
     [ -z \"\$('$kubectl' -n $relns get pods,leases -o name)\" ]"
kc get crd trainingjobs.gantry.dev >/dev/null 2>&1 && ok "the CRD stays (documented)" || bad "the CRD is gone"
summary
