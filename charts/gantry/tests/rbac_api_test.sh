#!/usr/bin/env bash
# The chart's RBAC is sufficient and every rule in it is needed (CTest label `api`).
#
#   GANTRY_TEST_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig \
#       charts/gantry/tests/rbac_api_test.sh PATH-TO-gantry-operator
#
# `helm install`s the chart (default values: ClusterRole, leader election), then runs
# gantry-operator on this host with a kubeconfig holding only the chart ServiceAccount's token
# (kubectl create token; not admin) through one scenario that makes it use every verb:
#   started  it takes the Lease                      leases get/create/update
#   synced   its five informers list and watch       {trainingjobs,pods,services,configmaps,secrets} list/watch
#   status   .status.phase written (before children) trainingjobs/status update
#   service, configmap, secret, pods                 create on each
#   event    an Event about the job                  events create
#   cm-heal  a hand-edited config ConfigMap is put back   configmaps patch
#   suspend  suspend deletes the pods                pods delete
#   series   suspending again bumps the Event's series.count   events patch
#   ttl      exit 65 -> Failed -> ttlSecondsAfterFinished 0 deletes the job   trainingjobs delete
# The test plays kubelet (pod phases through the status subresource). Then, in parallel, the same
# scenario for variants of the ClusterRole with one verb (list+watch as a pair) or the Lease
# Role removed: each must fail, at the step that needs what was removed. Not exercised here:
# trainingjobs get (only after a 409 Conflict) and trainingjobs/finalizers update (only with the
# OwnerReferencesPermissionEnforcement admission plugin, which the API tier does not enable).
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset. Operator logs: $ARTIFACTS (or a temp dir).
set -euo pipefail
op=${1:?usage: rbac_api_test.sh PATH-TO-gantry-operator}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chart=$root/charts/gantry
rel=$id relns=$id-rel
logs=${ARTIFACTS:-$(mktemp -d "${TMPDIR:-/tmp}/gantry-rbac-test.XXXXXX")}
work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-rbac-work.XXXXXX")
mkdir -p "$logs"
cleanup() {
    local p
    for p in "$work"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$helm" uninstall "$rel" -n "$relns" >/dev/null 2>&1 || true
    kc delete clusterrole,clusterrolebinding -l "gantry.dev/test=$id" >/dev/null 2>&1 || true
    kc delete namespace -l "gantry.dev/test=$id" --wait=false >/dev/null 2>&1 || true
    kc delete namespace "$relns" --wait=false >/dev/null 2>&1 || true
    rm -rf "$work"
    echo "operator logs: $logs/operator-$id-*.log"
}
trap cleanup EXIT

kc apply -f "$root/manifests/crds/" >/dev/null
kc wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
kc create namespace "$relns" >/dev/null
kc label namespace "$relns" "gantry.dev/test=$id" >/dev/null
# The CRD comes from manifests/crds/ above (the chart has a copy; Helm 4 would server-side
# apply it and conflict with kubectl's field manager whenever the two differ).
"$helm" install "$rel" "$chart" -n "$relns" --skip-crds >/dev/null
cr=$rel-gantry-operator sa=$rel-gantry-operator lease_role=$rel-gantry-operator-leader-election
server=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')

kubeconfig_for() { # SA FILE: a kubeconfig with only that ServiceAccount's token
    local token
    token=$(kc create token "$1" -n "$relns" --duration=1h)
    cat >"$2" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: u, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: $relns}}]
current-context: c
KC
}

# variants NAME=DROP...: per variant a ServiceAccount bound to the chart's ClusterRole less DROP,
# all created with one apply. DROP: "RESOURCE:VERB[,VERB]" (verbs removed from the rule for
# RESOURCE; the rest of the rules are the chart's as installed), or "lease" (the chart's
# ClusterRole but no binding to the Lease Role). Then a kubeconfig per variant.
variants() {
    kc get clusterrole "$cr" -o json | python3 -c '
import copy, json, sys
base, relns, cr, lease_role, test_id = json.load(sys.stdin), *sys.argv[1:5]
items = []
def meta(name, ns=None):
    m = {"name": name, "labels": {"gantry.dev/test": test_id}}
    if ns:
        m["namespace"] = ns
    return m
def binding(kind, name, role_kind, role, ns=None):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta(name, ns),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": relns}]}
for arg in sys.argv[5:]:
    name, drop = arg.split("=", 1)
    sa = test_id + "-" + name
    items.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(sa, relns)})
    if drop == "lease":
        items.append(binding("ClusterRoleBinding", sa, "ClusterRole", cr))
        continue
    res, verbs = drop.split(":")
    gone, found = set(verbs.split(",")), False
    rules = copy.deepcopy(base["rules"])
    for r in rules:
        if res in r["resources"]:
            assert gone <= set(r["verbs"]), (res, r["verbs"], gone)
            r["verbs"] = [v for v in r["verbs"] if v not in gone]
            found = True
    assert found, res
    items.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": meta(sa), "rules": [r for r in rules if r["verbs"]]})
    items.append(binding("ClusterRoleBinding", sa, "ClusterRole", sa))
    items.append(binding("RoleBinding", sa, "Role", lease_role, relns))
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
' "$relns" "$cr" "$lease_role" "$id" "$@" | kc create -f - >/dev/null
    local a pids=()
    for a in "$@"; do
        kubeconfig_for "$id-${a%%=*}" "$work/${a%%=*}.kubeconfig" &
        pids+=($!)
    done
    for a in "${pids[@]}"; do wait "$a"; done
}

# scenario NAME KUBECONFIG: prints the steps passed, then "FAIL <step>" or "DONE".
scenario() {
    local name=$1 cfg=$2 ns=$id-$1 job=tj-$1 log=$logs/operator-$id-$1.log t
    local k=("$kubectl" --request-timeout=20s -n "$ns")
    until_() { # SECONDS CMD...: retries CMD every 0.5 s
        local s=$1 i
        shift
        for ((i = 0; i < s * 2; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
        return 1
    }
    step() { # STEP SECONDS CMD...
        local s=$1
        shift
        if until_ "$@"; then echo "$s"; else echo "FAIL $s"; return 1; fi
    }
    jp() { "${k[@]}" get "$1" -o jsonpath="$2" 2>/dev/null; }
    npods() { "${k[@]}" get pods -l "gantry.dev/job-name=$job" --no-headers 2>/dev/null | wc -l; }
    pods_are() { [ "$(npods)" -eq "$1" ]; }
    grep_log() { grep -q "$1" "$log"; }
    suspend_() { "${k[@]}" patch tj "$job" --type=merge -p "{\"spec\":{\"runPolicy\":{\"suspend\":$1}}}" >/dev/null; }
    series2() { jp events.events.k8s.io '{range .items[?(@.reason=="Suspended")]}{.regarding.name} {.series.count}{"\n"}{end}' | grep -qx "$job 2"; }
    heal() { [ "$(jp "cm/$job-config" '{.data}')" = "$1" ]; }

    "$kubectl" --request-timeout=20s create namespace "$ns" >/dev/null
    "$kubectl" --request-timeout=20s label namespace "$ns" "gantry.dev/test=$id" >/dev/null
    # The chart's own run takes the chart's (empty, Helm-created) Lease; variants have their own.
    local lease=$id-$name
    [ "$name" != chart ] || lease=gantry-operator
    "$op" --kubeconfig "$cfg" --namespace "$ns" --lease-namespace "$relns" --lease-name "$lease" \
        --workers 2 --sync-timeout 5 --lease-duration 4 --renew-deadline 3 --retry-period 1 \
        >"$log" 2>&1 &
    echo $! >"$work/$name.pid"
    step started 10 grep_log '"Started leading"' || return 0
    step synced 10 grep_log '"Caches synced"' || return 0
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$job"},
 "spec":{"replicas":2,"runPolicy":{"backoffLimit":0,"ttlSecondsAfterFinished":0}}}
JOB
    # The operator writes the job's status (phase, observedGeneration) before its children.
    step status 10 bash -c "[ -n \"\$('$kubectl' -n $ns get tj $job -o jsonpath='{.status.phase}')\" ]" || return 0
    step service 10 "${k[@]}" get svc "$job" || return 0
    step configmap 10 "${k[@]}" get cm "$job-config" || return 0
    step secret 10 "${k[@]}" get secret "$job-rdzv" || return 0
    step pods 10 pods_are 2 || return 0
    step event 10 bash -c "'$kubectl' -n $ns get events.events.k8s.io -o jsonpath='{.items[*].regarding.name}' | grep -qw $job" || return 0
    t=$(jp "cm/$job-config" '{.data}')
    "${k[@]}" patch cm "$job-config" --type=merge -p '{"data":{"config.json":"{\"edited\":true}"}}' >/dev/null
    step cm-heal 10 heal "$t" || return 0
    suspend_ true
    step suspend 10 pods_are 0 || return 0
    suspend_ false
    until_ 10 pods_are 2 || { echo "FAIL resume"; return 0; }
    suspend_ true
    step series 10 series2 || return 0
    suspend_ false
    until_ 10 pods_are 2 || { echo "FAIL resume"; return 0; }
    "${k[@]}" patch "pod/$job-worker-0" --subresource=status --type=merge -p '{"status":{"phase":"Failed",
        "containerStatuses":[{"name":"worker","image":"gantry-worker:0.1.0","imageID":"","ready":false,
        "restartCount":0,"state":{"terminated":{"exitCode":65,"reason":"Error"}}}]}}' >/dev/null
    step ttl 10 bash -c "! '$kubectl' -n $ns get tj $job >/dev/null 2>&1" || return 0
    echo DONE
}

# The chart's own ServiceAccount must pass every step; each variant with one permission less must
# fail at the step that needs it. All run at once, each in its own namespace with its own Lease.
declare -A expect=(
    [lease]=started
    [tj-listwatch]=synced [pods-listwatch]=synced [svc-listwatch]=synced
    [cm-listwatch]=synced [secrets-listwatch]=synced
    [svc-create]=service [cm-create]=configmap [secrets-create]=secret [pods-create]=pods
    [status-update]=status [events-create]=event [cm-patch]=cm-heal [pods-delete]=suspend
    [events-patch]=series [tj-delete]=ttl
)
declare -A drop=(
    [lease]=lease
    [tj-listwatch]=trainingjobs:list,watch [pods-listwatch]=pods:list,watch
    [svc-listwatch]=services:list,watch [cm-listwatch]=configmaps:list,watch
    [secrets-listwatch]=secrets:list,watch
    [svc-create]=services:create [cm-create]=configmaps:create [secrets-create]=secrets:create
    [pods-create]=pods:create [status-update]=trainingjobs/status:update
    [events-create]=events:create [cm-patch]=configmaps:patch [pods-delete]=pods:delete
    [events-patch]=events:patch [tj-delete]=trainingjobs:delete
)
kubeconfig_for "$sa" "$work/chart.kubeconfig"
specs=()
for v in "${!drop[@]}"; do specs+=("$v=${drop[$v]}"); done
variants "${specs[@]}"
pids=()
for v in chart "${!drop[@]}"; do
    scenario "$v" "$work/$v.kubeconfig" >"$work/$v.res" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
if [ "$(tail -1 "$work/chart.res")" = DONE ]; then
    ok "chart ServiceAccount (not admin): all $(grep -cv DONE "$work/chart.res") steps pass: $(grep -v DONE "$work/chart.res" | tr '\n' ' ')"
else
    bad "chart ServiceAccount: $(tr '\n' ' ' <"$work/chart.res") (log: $logs/operator-$id-chart.log)"
fi
for v in $(printf '%s\n' "${!drop[@]}" | sort); do
    got=$(grep '^FAIL ' "$work/$v.res" | head -1 | cut -d' ' -f2)
    if [ "$got" = "${expect[$v]}" ]; then
        ok "without ${drop[$v]}: fails at '${expect[$v]}'"
    else
        bad "without ${drop[$v]}: want a failure at '${expect[$v]}', got: $(tr '\n' ' ' <"$work/$v.res") (log: $logs/operator-$id-$v.log)"
    fi
done
# Stop them all (SIGTERM: graceful shutdown) before reading the logs for sanitizer reports.
for p in "$work"/*.pid; do kill "$(cat "$p")" 2>/dev/null || true; done
for p in "$work"/*.pid; do
    for ((i = 0; i < 100; i++)); do kill -0 "$(cat "$p")" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$(cat "$p")" 2>/dev/null && bad "operator $(basename "$p" .pid) still runs 20 s after SIGTERM"
done
san=$(grep -l "Sanitizer\|runtime error:" "$logs"/operator-"$id"-*.log 2>/dev/null || true)
[ -z "$san" ] && ok "no sanitizer report in any operator log" || bad "sanitizer reports in: $san"
summary
