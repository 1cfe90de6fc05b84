# Shared by the chart's API-tier tests (sourced). Sets: root, kubectl, helm, checks helpers.
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset, 69 when a tool is missing.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
if [ -z "${GANTRY_TEST_KUBECONFIG:-}" ]; then
    echo "SKIP: GANTRY_TEST_KUBECONFIG is unset (start a cluster: hack/cluster.sh up --tier api)"
    exit 77
fi
export KUBECONFIG=$GANTRY_TEST_KUBECONFIG
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
k8s_version=$(sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' \
    "$root/hack/k8s/go.mod" | head -1)
helm_version=$(sed -n 's/^HELM_VERSION=\([^ ]*\).*/\1/p' "$root/hack/cluster-full.sh" | head -1)
kubectl=${GANTRY_KUBECTL:-$cache/k8s-$k8s_version/bin/kubectl}
[ -x "$kubectl" ] || kubectl=$(command -v kubectl) || {
    echo "FAIL: no kubectl: set GANTRY_KUBECTL or run hack/cluster.sh build --tier api"; exit 69; }
helm=${GANTRY_HELM:-$cache/helm-$helm_version/bin/helm}
[ -x "$helm" ] || helm=$(command -v helm) || {
    echo "FAIL: no helm: set GANTRY_HELM or run hack/cluster.sh build --tier full"; exit 69; }
id=pk$$r$RANDOM
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }
kc() { "$kubectl" --request-timeout=30s "$@"; }
# wait_for DESC SECONDS CMD...: retries CMD every 0.2 s; ok/bad with DESC.
wait_for() {
    local desc=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs * 5; i++)); do
        if "$@" >/dev/null 2>&1; then ok "$desc"; return 0; fi
        sleep 0.2
    done
    bad "$desc (not within ${secs}s)"
    return 1
}
summary() {
    echo "$((checks - fails))/$checks checks passed"
    [ "$fails" = 0 ]
}
