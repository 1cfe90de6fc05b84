# shellcheck shell=bash
# Shared by the full-tier smoke tests; hack/cluster-smoke.sh --tier full runs each *_test.sh with
# NS (a namespace that exists), KUBECTL, KUBECONFIG and BUSYBOX_IMAGE set.
set -euo pipefail
: "${NS:?run through hack/cluster-smoke.sh --tier full}" "${KUBECTL:?}" "${BUSYBOX_IMAGE:?}"
k() { "$KUBECTL" -n "$NS" "$@"; }

# Waits for a pod to reach a phase; on timeout shows why (describe + logs) and fails.
wait_phase() { # POD PHASE TIMEOUT_S
    if ! k wait --for=jsonpath='{.status.phase}'="$2" "pod/$1" --timeout="${3}s" >/dev/null 2>&1; then
        echo "pod $1 did not reach $2 in ${3}s:" >&2
        k describe pod "$1" | tail -25 >&2 || true
        k logs "$1" --all-containers >&2 2>&1 || true
        return 1
    fi
}
