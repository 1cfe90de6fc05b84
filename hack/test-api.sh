#!/usr/bin/env bash
# Runs the CTest tests labelled `api` against a real kube-apiserver + etcd (+ controller manager):
# builds the pinned components if needed, starts a private API tier in its own state dir (so a
# developer's running cluster is left alone), runs the tests with GANTRY_TEST_KUBECONFIG set, and
# always stops the tier again.
#
#   hack/test-api.sh [BUILD_DIR] [extra ctest args...]     (BUILD_DIR defaults to build)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
export GANTRY_RUN=${GANTRY_TEST_RUN:-/tmp/gantry-test-api.$$}

hack/cluster.sh build --tier api
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
start=$(date +%s)
hack/cluster.sh up --tier api
echo "test-api: API tier up in $(( $(date +%s) - start )) s"
GANTRY_TEST_KUBECONFIG=$(hack/cluster.sh kubeconfig)
export GANTRY_TEST_KUBECONFIG
ctest --test-dir "$build" -L api --output-on-failure "$@"
