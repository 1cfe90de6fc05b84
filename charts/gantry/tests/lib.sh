# Shared by the chart's API-tier tests (sourced). Sets: root, kubectl, helm, id, the check helpers
# of e2e/api/lib.sh (ok, bad, kc, wait_for) and summary. Exits 77 when GANTRY_TEST_KUBECONFIG is
# unset, 69 when a tool is missing.
# shellcheck source=e2e/api/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../../e2e/api/lib.sh"
api_require_cluster
export KUBECONFIG=$GANTRY_TEST_KUBECONFIG
api_find_kubectl
helm=${GANTRY_HELM:-$("$root/hack/cluster.sh" bin helm 2>/dev/null | tail -1 || true)}
[ -x "${helm:-}" ] || helm=$(command -v helm) || {
    echo "FAIL: no helm: set GANTRY_HELM or run hack/cluster.sh build --tier api"; exit 69; }
# shellcheck disable=SC2034  # used by the sourcing test
id=pk$$r$RANDOM
summary() { api_summary; }
