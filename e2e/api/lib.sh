# shellcheck shell=bash
# shellcheck disable=SC2034  # root and kubectl are read by the sourcing test
# e2e/api/lib.sh: what the API-tier tests (e2e/api/*_test.sh, CTest label `api`) share: the skip
# gate, kubectl, ok/bad counting and polling. Source it after `set -euo pipefail`; uses $ns (the
# test's namespace) for k, jp, is and npods.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fails=0 checks=0

# Exits 77 (CTest: skipped) unless GANTRY_TEST_KUBECONFIG names an API tier to test against.
api_require_cluster() {
    if [ -z "${GANTRY_TEST_KUBECONFIG:-}" ]; then
        echo "SKIP: GANTRY_TEST_KUBECONFIG is unset (start a cluster: hack/cluster.sh up --tier api)"
        exit 77
    fi
}

# kubectl: $GANTRY_KUBECTL, else the one hack/cluster.sh built, else PATH.
api_find_kubectl() {
    kubectl=${GANTRY_KUBECTL:-$("$root/hack/cluster.sh" bin kubectl 2>/dev/null | tail -1)}
    [ -x "${kubectl:-}" ] || kubectl=$(command -v kubectl) || {
        echo "FAIL: no kubectl: set GANTRY_KUBECTL or run hack/cluster.sh build --tier api"
        exit 69
    }
}

ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }
api_summary() { # the last line; the exit status of the test
    echo "$checks checks, $fails failed"
    [ "$fails" -eq 0 ]
}

# shellcheck disable=SC2154  # ns: set by the sourcing test
k() { "$kubectl" --request-timeout=30s -n "$ns" "$@"; }
kc() { "$kubectl" --request-timeout=30s "$@"; } # cluster-scoped, or -n of your own

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
jp() { k get "$1" -o jsonpath="$2" 2>/dev/null; }
is() { [ "$(jp "$1" "$2")" = "$3" ]; } # is OBJ JSONPATH VALUE
npods() { k get pods -l "gantry.dev/job-name=$1" --no-headers 2>/dev/null | wc -l; }
has_pods() { [ "$(npods "$1")" -eq "$2" ]; }
