#!/usr/bin/env bash
# Runs the CTest tests labelled `api` against a real kube-apiserver + etcd (+ controller manager):
# builds the pinned components if needed, starts a private API tier in its own state dir (so a
# developer's running cluster is left alone), runs the tests of each build tree with
# GANTRY_TEST_KUBECONFIG set, and always stops the tier again.
#
#   hack/test-api.sh [BUILD_DIR...]      (default: build; e.g. build build-asan)
#   CTEST_ARGS="-R kube"                 extra ctest arguments
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- build
export GANTRY_RUN=${GANTRY_TEST_RUN:-/tmp/gantry-test-api.$$}

hack/cluster.sh build --tier api
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
start=$(date +%s)
# The admission plugin hardened clusters (OpenShift) run: the RBAC test shows the chart's
# trainingjobs/finalizers rule is needed under it.
export GANTRY_API_ADMISSION_PLUGINS=${GANTRY_API_ADMISSION_PLUGINS-OwnerReferencesPermissionEnforcement}
hack/cluster.sh up --tier api
echo "test-api: API tier up in $(( $(date +%s) - start )) s"
GANTRY_TEST_KUBECONFIG=$(hack/cluster.sh kubeconfig)
export GANTRY_TEST_KUBECONFIG
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
for build in "$@"; do
    echo "== api tier tests ($build/)"
    # shellcheck disable=SC2086
    ctest --test-dir "$build" -L api --output-on-failure ${CTEST_ARGS:-} || rc=1
done
exit $rc
