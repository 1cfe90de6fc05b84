#!/usr/bin/env bash
# hack/cluster-smoke.sh: proves that the cluster hack/cluster.sh started is real Kubernetes.
#
# API tier: objects round-trip through kubectl; kube-controller-manager garbage-collects an object
# whose owner is deleted; a ServiceAccount token authenticates, and RBAC allows what its Role grants
# and answers 403 for the rest. Full tier adds the checks in e2e/smoke/ (pods, logs, DNS, volumes).
# Each check prints ok/FAIL; the last line is 'N passed, N failed'. Exit 0 only when all pass.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TIER=api
KEEP=0

usage() {
    cat <<'EOF'
Usage: hack/cluster-smoke.sh [--tier api|full] [--keep]
Runs smoke tests against the cluster that 'hack/cluster.sh up' started (or $KUBECONFIG if set
and GANTRY_SMOKE_KUBECONFIG=env). Creates and deletes a namespace gantry-smoke-<random>.
  --tier  api (default): API server, RBAC, garbage collection; full: also pods, DNS, volumes
  --keep  leave the namespace behind for debugging
EOF
}
while [ $# -gt 0 ]; do
    case $1 in
        --tier) TIER=${2:?--tier needs api or full}; shift 2 ;;
        --tier=*) TIER=${1#--tier=}; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "${GANTRY_SMOKE_KUBECONFIG:-}" = env ]; then
    : "${KUBECONFIG:?GANTRY_SMOKE_KUBECONFIG=env needs KUBECONFIG}"
else
    KUBECONFIG=$("$HACK/cluster.sh" kubeconfig) ||
        { echo "error: no cluster; run 'hack/cluster.sh up --tier $TIER' first" >&2; exit 1; }
fi
export KUBECONFIG
KUBECTL=${KUBECTL:-}
if [ -z "$KUBECTL" ]; then
    v=$(sed -n 's#^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\).*#\1#p' "$HACK/k8s/go.mod" | head -1)
    KUBECTL=${GANTRY_CACHE:-$HOME/.cache/gantry}/k8s-$v/bin/kubectl
    [ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl) ||
        { echo "error: kubectl not found; run 'hack/cluster.sh build --tier api'" >&2; exit 1; }
fi
k() { "$KUBECTL" "$@"; }

NS=gantry-smoke-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }

# Polls COMMAND until it succeeds or TIMEOUT seconds pass.
eventually() { # TIMEOUT COMMAND...
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.5
    done
}

NAMESPACES=("$NS")
cleanup() {
    [ $KEEP -eq 1 ] && { echo "kept namespaces ${NAMESPACES[*]}"; return; }
    k delete namespace "${NAMESPACES[@]}" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- objects round-trip --------------------------------------------------------------------------
test_roundtrip() {
    local got
    k create namespace "$NS" >/dev/null
    k -n "$NS" create configmap hello --from-literal=greeting=hallo >/dev/null
    got=$(k -n "$NS" get configmap hello -o jsonpath='{.data.greeting}')
    if [ "$got" = hallo ]; then ok "namespace + configmap round-trip"; else bad "configmap data: got '$got', want 'hallo'"; fi
}

# --- garbage collection: delete the owner, the dependent goes -------------------------------------
dependent_gone() { ! k -n "$NS" get configmap dependent >/dev/null 2>&1; }
test_gc() {
    local uid
    k -n "$NS" create configmap owner --from-literal=role=owner >/dev/null
    uid=$(k -n "$NS" get configmap owner -o jsonpath='{.metadata.uid}')
    k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: "$uid", controller: true, blockOwnerDeletion: true}
data: {role: dependent}
EOF
    k -n "$NS" get configmap dependent >/dev/null || { bad "dependent configmap was not created"; return; }
    k -n "$NS" delete configmap owner --wait=true >/dev/null
    if eventually 60 dependent_gone; then
        ok "garbage collector deleted the dependent of a deleted owner"
    else
        bad "dependent configmap still exists 60s after its owner was deleted (is kube-controller-manager running? hack/cluster.sh status)"
    fi
}

# --- authentication by ServiceAccount token, authorization by RBAC -------------------------------
http_code() { # TOKEN PATH [METHOD]
    local server ca
    server=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
    ca=$(mktemp)
    k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$ca"
    curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" -X "${3:-GET}" \
        ${1:+-H "Authorization: Bearer $1"} "$server$2" || true
    rm -f "$ca"
}
code_is() { [ "$(http_code "$2" "$3")" = "$1" ]; } # WANT TOKEN PATH
test_rbac() {
    local token code
    k -n "$NS" create serviceaccount limited >/dev/null
    k -n "$NS" create role cm-reader --verb=get,list --resource=configmaps >/dev/null
    k -n "$NS" create rolebinding limited-cm-reader --role=cm-reader --serviceaccount="$NS:limited" >/dev/null
    token=$(k -n "$NS" create token limited --duration=10m)
    # The binding reaches the authorizer's cache through a watch: allow it a moment.
    if eventually 10 code_is 200 "$token" "/api/v1/namespaces/$NS/configmaps"; then
        ok "service account token: granted 'list configmaps' answers 200"
    else
        bad "service account token: 'list configmaps' answered $(http_code "$token" "/api/v1/namespaces/$NS/configmaps"), want 200"
    fi
    code=$(http_code "$token" "/api/v1/namespaces/$NS/secrets")
    if [ "$code" = 403 ]; then ok "RBAC: ungranted 'list secrets' answers 403"; else bad "RBAC: 'list secrets' answered $code, want 403"; fi
    code=$(http_code "$token" "/api/v1/namespaces/$NS/configmaps/hello" DELETE)
    if [ "$code" = 403 ]; then ok "RBAC: ungranted 'delete configmap' answers 403"; else bad "RBAC: 'delete configmap' answered $code, want 403"; fi
    code=$(http_code "not-a-token" "/api/v1/namespaces/$NS/configmaps")
    if [ "$code" = 401 ]; then ok "authentication: a bad token answers 401"; else bad "authentication: a bad token answered $code, want 401"; fi
}

# --- the namespace controller empties and removes a deleted namespace ----------------------------
ns_gone() { ! k get namespace "$1" >/dev/null 2>&1; }
test_namespace_delete() {
    local ns=$NS-del
    k create namespace "$ns" >/dev/null
    k -n "$ns" create configmap x --from-literal=a=b >/dev/null
    k delete namespace "$ns" --wait=false >/dev/null
    if eventually 60 ns_gone "$ns"; then ok "namespace controller finalised a deleted namespace"; else bad "namespace $ns still exists 60s after delete"; fi
}

echo "smoke ($TIER) against $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}'), namespace $NS"
test_roundtrip
test_gc
test_rbac
test_namespace_delete
# --- full tier: pods run (e2e/smoke/*_test.sh, one namespace each) ------------------------------
run_full() {
    local env t name ns start
    env=$(dirname "$KUBECONFIG")/cluster.env
    BUSYBOX_IMAGE=$(sed -n 's/^BUSYBOX_IMAGE=//p' "$env" 2>/dev/null)
    VOLUME_ROOT=$(sed -n 's/^VOLUME_ROOT=//p' "$env" 2>/dev/null)
    SERVICE_CIDR=$(sed -n 's/^SERVICE_CIDR=//p' "$env" 2>/dev/null)
    if [ -z "$BUSYBOX_IMAGE" ]; then
        bad "the cluster in $(dirname "$KUBECONFIG") is not a full one; start it with: hack/cluster.sh up --tier full"
        return
    fi
    export BUSYBOX_IMAGE VOLUME_ROOT SERVICE_CIDR KUBECTL KUBECONFIG
    for t in "$HACK"/../e2e/smoke/*_test.sh; do
        name=$(basename "$t" _test.sh)
        ns=$NS-${name//_/-}
        NAMESPACES+=("$ns")
        k create namespace "$ns" >/dev/null
        eventually 30 k -n "$ns" get serviceaccount default || true
        start=$SECONDS
        if NS=$ns bash "$t"; then ok "$name ($((SECONDS - start))s)"; else bad "$name ($((SECONDS - start))s; namespace $ns)"; fi
    done
}
[ "$TIER" != full ] || run_full
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
