#!/usr/bin/env bash
# gantry-operator when its watches get 410 Gone from a real kube-apiserver (CTest label `api`).
#
#   GANTRY_TEST_KUBECONFIG=... e2e/api/operator_gone_test.sh OPERATOR
#
# Restarting kube-apiserver is needed to force the 410 (Kubernetes 1.35 serves pod and custom
# resource lists and watches from its watch cache, which etcd compaction does not touch), so the
# test starts a private API tier of its own (hack/cluster.sh up --tier api with its own
# GANTRY_RUN: the shared one stays untouched) and:
#   1. runs a 2-worker TrainingJob to Running under the operator;
#   2. stops kube-apiserver; while it is down, deletes worker 1 straight from etcd (so no watch
#      event for the delete can ever be sent) and compacts etcd to the current revision;
#   3. starts kube-apiserver again with the same command line: its new watch cache begins after
#      the operator's last resourceVersion, so the operator's watch resumes get 410 "too old
#      resource version" and the informers relist;
# and checks: relists counted on /metrics for pods and trainingjobs (the 410 really happened),
# the missed delete noticed (worker 1 recreated, a new UID), and the job still completing.
# GANTRY_TEST_KUBECONFIG only gates the test (like the other API tests; 77 when unset): the API
# tier's binaries are built. Logs: $ARTIFACTS (or a temp dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
op=${1:?usage: operator_gone_test.sh PATH-TO-gantry-operator}
# shellcheck source=e2e/api/lib.sh
. "$here/lib.sh"
api_require_cluster
logs=${ARTIFACTS:-$(mktemp -d /tmp/gantry-gone-test.XXXXXX)}
mkdir -p "$logs"
run=$(mktemp -d /tmp/gantry-gone-run.XXXXXX)
export GANTRY_RUN=$run
op_pid='' ns=gone-$$
cleanup() {
    if [ -n "$op_pid" ]; then kill -TERM "$op_pid" 2>/dev/null || true; wait "$op_pid" 2>/dev/null || true; fi
    "$root/hack/cluster.sh" down >"$logs/cluster-down.log" 2>&1 || true
    rm -rf "$run"
    echo "operator log: $logs/operator-$ns.log"
}
trap cleanup EXIT

"$root/hack/cluster.sh" up --tier api >"$logs/cluster-up.log" 2>&1 || {
    echo "FAIL: could not start a private API tier (see $logs/cluster-up.log)"; exit 1; }
# shellcheck disable=SC1091
. "$run/cluster.env"
export KUBECONFIG
api_find_kubectl
set_pod() { # set_pod POD PHASE [EXIT]
    local state='{"running":{}}' ready=True
    case $2 in
        Succeeded | Failed) state="{\"terminated\":{\"exitCode\":${3:-0},\"reason\":\"Completed\"}}"; ready=False ;;
    esac
    k patch "pod/$1" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"$2\",
        \"conditions\":[{\"type\":\"Ready\",\"status\":\"$ready\"}],
        \"containerStatuses\":[{\"name\":\"worker\",\"image\":\"gantry-worker:0.1.0\",\"imageID\":\"\",
        \"ready\":$([ $ready = True ] && echo true || echo false),\"restartCount\":0,\"state\":$state}]}}" >/dev/null
}
etcd() { curl -s -m 10 -X POST "http://127.0.0.1:$ETCD_PORT/v3/$1" -d "$2"; }
b64() { printf %s "$1" | base64 -w0; }
metric() { curl -s -m 5 "http://127.0.0.1:$mport/metrics" | sed -n "s/^$1 //p"; }

"$kubectl" apply -f "$root/manifests/crds/gantry.dev_trainingjobs.yaml" >/dev/null
"$kubectl" wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
"$kubectl" create namespace "$ns" >/dev/null
"$op" --namespace "$ns" --leader-elect false --workers 2 --metrics-addr 127.0.0.1:0 \
    >>"$logs/operator-$ns.log" 2>&1 &
op_pid=$!
wait_for "operator serves /metrics" 20 grep -q '"server":"metrics"' "$logs/operator-$ns.log"
mport=$(sed -n 's/.*"server":"metrics".*"port":\([0-9]*\).*/\1/p' "$logs/operator-$ns.log" | tail -1)
k apply -f - >/dev/null <<EOF
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"gone"},"spec":{"replicas":2}}
EOF
wait_for "gone: 2 pods" 30 has_pods gone 2
set_pod gone-worker-0 Running
set_pod gone-worker-1 Running
wait_for "gone: Running 2/2" 20 is tj/gone '{.status.phase} {.status.ready}' "Running 2/2"
uid1=$(jp pod/gone-worker-1 '{.metadata.uid}')
relists_pods0=$(metric 'gantry_operator_watch_relists_total{resource="pods"}')
relists_tj0=$(metric 'gantry_operator_watch_relists_total{resource="trainingjobs"}')

# ---- kube-apiserver down; worker 1 deleted behind everyone's back; etcd compacted; back up
api_pid=$(cat "$run/pids/kube-apiserver")
mapfile -d '' api_cmd <"/proc/$api_pid/cmdline"
kill -KILL "$api_pid" # graceful termination would wait for the open watches
for ((i = 0; i < 150; i++)); do kill -0 "$api_pid" 2>/dev/null || break; sleep 0.2; done
! kill -0 "$api_pid" 2>/dev/null && ok "kube-apiserver stopped" || bad "kube-apiserver still running"
del=$(etcd kv/deleterange "{\"key\":\"$(b64 "/registry/pods/$ns/gone-worker-1")\"}")
[[ $del == *'"deleted":"1"'* ]] && ok "worker 1 deleted in etcd (no watch event possible)" || bad "etcd delete: $del"
rev=$(etcd kv/range "{\"key\":\"$(b64 /registry/)\",\"limit\":1}" | sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
out=$(etcd kv/compaction "{\"revision\":\"$rev\",\"physical\":true}")
[[ $out == *header* ]] && ok "etcd compacted to revision $rev" || bad "etcd compaction: $out"
"${api_cmd[@]}" >>"$run/logs/kube-apiserver.log" 2>&1 &
echo $! >"$run/pids/kube-apiserver"
wait_for "kube-apiserver back" 60 "$kubectl" --request-timeout=5s get --raw /readyz

# ---- the operator relists and notices what it missed
wait_for "pods watch got 410 and relisted" 60 bash -c \
    "[ \"\$(curl -s -m 5 http://127.0.0.1:$mport/metrics | sed -n 's/^gantry_operator_watch_relists_total{resource=\"pods\"} //p')\" -gt ${relists_pods0:-0} ]"
wait_for "trainingjobs watch got 410 and relisted" 60 bash -c \
    "[ \"\$(curl -s -m 5 http://127.0.0.1:$mport/metrics | sed -n 's/^gantry_operator_watch_relists_total{resource=\"trainingjobs\"} //p')\" -gt ${relists_tj0:-0} ]"
wait_for "gone: the delete it never saw is noticed: worker 1 recreated" 30 bash -c \
    "u=\$('$kubectl' -n $ns get pod gone-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null) && [ -n \"\$u\" ] && [ \"\$u\" != $uid1 ]"
# A worker deleted under a running gang restarts the whole gang (rec.h), so worker 0 may be new
# as well: wait for 2 pods, neither terminating, and run them both.
wait_for "gone: 2 live pods" 30 bash -c \
    "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=gone -o jsonpath='{range .items[?(@.metadata.deletionTimestamp)]}x{end}')\" = '' ] && [ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=gone --no-headers | wc -l)\" -eq 2 ]"
set_pod gone-worker-0 Running
set_pod gone-worker-1 Running
wait_for "gone: Running 2/2 again" 20 is tj/gone '{.status.phase} {.status.ready}' "Running 2/2"
set_pod gone-worker-0 Succeeded 0
wait_for "gone: the job completes (Succeeded)" 20 is tj/gone '{.status.phase}' Succeeded
echo "relists: pods $(metric 'gantry_operator_watch_relists_total{resource="pods"}'), trainingjobs $(metric 'gantry_operator_watch_relists_total{resource="trainingjobs"}'), watch restarts pods $(metric 'gantry_operator_watch_restarts_total{resource="pods"}')"
kill -TERM "$op_pid"
wait "$op_pid" 2>/dev/null || true
op_pid=
if grep -q -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$logs/operator-$ns.log"; then
    bad "sanitizer reports in $logs/operator-$ns.log"
else
    ok "no sanitizer reports in the operator log"
fi
api_summary
