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
#   conflict pods Running while the operator's TrainingJob watch is held back and the job's
#            metadata changed: its status PUT from the stale cache gets 409 Conflict, it
#            re-reads the job and writes status.phase Running   trainingjobs get
#   cm-heal  a hand-edited config ConfigMap is put back   configmaps patch
#   suspend  suspend deletes the pods                pods delete
#   series   suspending again bumps the Event's series.count   events patch
#   ttl      exit 65 -> Failed -> ttlSecondsAfterFinished 0 deletes the job   trainingjobs delete
#   workload a second job with schedulingPolicy.gang: Workload gets its Workload and pods
#                                                    workloads create
#   wl-adopt suspended and resumed: the Workload exists (409), is read and adopted, pods again
#                                                    workloads get
#   wl-replace suspended, replicas 2 -> 3, resumed: the Workload's minCount is wrong, so it is
#            deleted and made again, then 3 pods     workloads delete
#   kueue    a third job, labelled with a LocalQueue and a WorkloadPriorityClass, gets its Kueue
#            Workload, with the priority's value     kueue workloads list/watch/create,
#                                                    workloadpriorityclasses get
#   kq-pods  Kueue (a real one, v0.17) admits it: its pods carry the flavor's node label
#                                                    resourceflavors get
#   kq-suspend suspend deletes the Workload          kueue workloads delete
#   kq-finish resumed, admitted again, worker 0 exits 0: the Workload is marked Finished
#                                                    kueue workloads/status patch
#   kq-pc    a queued job without the priority label whose pods name a PriorityClass: its
#            Workload has that one's value           priorityclasses get
#   kq-default a queued job that names no priority: its Workload has the value of the
#            cluster's globalDefault PriorityClass   priorityclasses list
# The test plays kubelet (pod phases through the status subresource). Then, in parallel, the same
# scenario for variants of the ClusterRole with one verb (list+watch as a pair) or the Lease
# Role removed: each must fail, at the step that needs what was removed.
#
# trainingjobs get is used only after a 409: the chart's run and the variant without it reach
# the API server through holdproxy.py (plain HTTP on loopback), which holds back their
# TrainingJob watch during the `conflict` step; its request log must show the chart's run
# getting a 409 on the status PUT, then the GET, and no 403 at all.
# trainingjobs/finalizers update is checked by the OwnerReferencesPermissionEnforcement
# admission plugin (on in OpenShift and hardened clusters): children carry blockOwnerDeletion,
# so without it the first child create (the Service) is refused. When the cluster at
# GANTRY_TEST_KUBECONFIG does not run that plugin (its admission metrics say), the test starts
# a private API tier that does (hack/cluster.sh, GANTRY_API_ADMISSION_PLUGINS; ~20 s).
# The Workload steps need an API server that serves scheduling.k8s.io/v1alpha1 (the GenericWorkload
# feature gate), the Kueue steps a running Kueue (GANTRY_KUEUE=1); the private tier below gets
# both when the cluster given lacks any of the three.
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset. Operator logs: $ARTIFACTS (or a temp dir).
set -euo pipefail
op=${1:?usage: rbac_api_test.sh PATH-TO-gantry-operator}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chart=$root/charts/gantry
rel=$id relns=$id-rel
logs=${ARTIFACTS:-$(mktemp -d "${TMPDIR:-/tmp}/gantry-rbac-test.XXXXXX")}
work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-rbac-work.XXXXXX")
mkdir -p "$logs" "$work/hold"
private=
cleanup() {
    local p
    for p in "$work"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$private" ]; then # the whole private tier goes, with everything in it
        GANTRY_RUN=$private "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
        rm -rf "$work"
        echo "operator logs: $logs/operator-$id-*.log"
        return
    fi
    "$helm" uninstall "$rel" -n "$relns" >/dev/null 2>&1 || true
    kc delete clusterrole,clusterrolebinding -l "gantry.dev/test=$id" >/dev/null 2>&1 || true
    kc delete clusterqueues.kueue.x-k8s.io,resourceflavors.kueue.x-k8s.io,workloadpriorityclasses.kueue.x-k8s.io \
        -l "gantry.dev/test=$id" --wait=false >/dev/null 2>&1 || true
    kc delete priorityclasses.scheduling.k8s.io -l "gantry.dev/test=$id" >/dev/null 2>&1 || true
    kc delete namespace -l "gantry.dev/test=$id" --wait=false >/dev/null 2>&1 || true
    kc delete namespace "$relns" --wait=false >/dev/null 2>&1 || true
    rm -rf "$work"
    echo "operator logs: $logs/operator-$id-*.log"
}
trap cleanup EXIT

# OwnerReferencesPermissionEnforcement: its admission metrics exist once it has seen a create.
plugin='apiserver_admission_controller_admission_duration_seconds_count{name="OwnerReferencesPermissionEnforcement"'
has_plugin() { kc get --raw /metrics >"$work/metrics" && grep -qF "$plugin" "$work/metrics"; }
serves_workloads() {
    kc api-resources --api-group=scheduling.k8s.io -o name 2>/dev/null |
        grep -qx workloads.scheduling.k8s.io
}
# Kueue: its Workloads served and its manager admitting them (the cluster's Kueue runs when
# cluster.env says so; on another cluster, its ClusterQueues' Active condition would tell).
serves_kueue() {
    kc api-resources --api-group=kueue.x-k8s.io -o name 2>/dev/null |
        grep -qx workloads.kueue.x-k8s.io
}
if ! has_plugin || ! serves_workloads || ! serves_kueue; then
    echo "the cluster does not run OwnerReferencesPermissionEnforcement, serve Workloads or run Kueue: starting a private API tier with all three"
    private=$work/cluster
    if ! GANTRY_RUN=$private GANTRY_API_ADMISSION_PLUGINS=OwnerReferencesPermissionEnforcement \
        GANTRY_FEATURE_GATES=GenericWorkload=true GANTRY_KUEUE=1 "$root/hack/cluster.sh" up --tier api \
        >"$logs/private-tier-$id.log" 2>&1; then
        bad "private API tier with OwnerReferencesPermissionEnforcement did not start (log: $logs/private-tier-$id.log)"
        summary
        exit 1
    fi
    export KUBECONFIG=$private/admin.kubeconfig
fi
has_plugin &&
    ok "the API server runs OwnerReferencesPermissionEnforcement" ||
    bad "the API server runs OwnerReferencesPermissionEnforcement (no admission metrics for it)"
serves_workloads &&
    ok "the API server serves scheduling.k8s.io/v1alpha1 Workloads" ||
    bad "the API server serves scheduling.k8s.io/v1alpha1 Workloads"
serves_kueue &&
    ok "the API server serves Kueue's kueue.x-k8s.io Workloads" ||
    bad "the API server serves Kueue's kueue.x-k8s.io Workloads"
# One ClusterQueue with room for every run's job at once, a flavor with a node label, a priority.
kc apply -f - >/dev/null <<KQ
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: $id, labels: {gantry.dev/test: $id}}
spec: {nodeLabels: {gantry.dev/test-pool: $id}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: $id, labels: {gantry.dev/test: $id}}
spec:
  namespaceSelector: {matchLabels: {gantry.dev/test: $id}}
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors: [{name: $id, resources: [{name: cpu, nominalQuota: "100"}, {name: memory, nominalQuota: 1Ti}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: $id, labels: {gantry.dev/test: $id}}
value: 4242
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: $id, labels: {gantry.dev/test: $id}}
value: 77
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: $id-default, labels: {gantry.dev/test: $id}}
value: 55
globalDefault: true
KQ

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

kubeconfig_for() { # SA FILE [PROXY-URL]: a kubeconfig with only that ServiceAccount's token
    local token cluster="{server: \"$server\", certificate-authority-data: \"$ca\"}"
    token=$(kc create token "$1" -n "$relns" --duration=1h)
    [ -z "${3:-}" ] || cluster="{server: \"$3\"}"
    cat >"$2" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: $cluster}]
users: [{name: u, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: $relns}}]
current-context: c
KC
}

# proxy NAME: holdproxy.py in front of the API server for that run (its log: $work/NAME.proxy);
# proxy_url NAME: its URL, or nothing for a run without one.
proxy() {
    [ -f "$work/ca.crt" ] || base64 -d <<<"$ca" >"$work/ca.crt"
    python3 "$root/charts/gantry/tests/holdproxy.py" --upstream "$server" --ca "$work/ca.crt" \
        --hold-dir "$work/hold" --log "$work/$1.proxy" --port-file "$work/$1.port" \
        2>"$logs/proxy-$id-$1.log" &
    echo $! >"$work/proxy-$1.pid"
}
proxy_url() {
    local i
    [ -f "$work/proxy-$1.pid" ] || return 0
    for ((i = 0; i < 100; i++)); do [ -f "$work/$1.port" ] && break; sleep 0.1; done
    echo "http://127.0.0.1:$(cat "$work/$1.port")"
}

# variants NAME=DROP...: per variant a ServiceAccount bound to the chart's ClusterRole less DROP,
# all created with one apply. DROP: "[GROUP/]RESOURCE:VERB[,VERB]" (verbs removed from the rules
# for RESOURCE, of GROUP only when given; the rest of the rules are the chart's as installed), or "lease" (the chart's
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
    group = None
    if "." in res.split("/")[0]:  # GROUP/RESOURCE: in that API group only (workloads are in two)
        group, res = res.split("/", 1)
    gone, found = set(verbs.split(",")), False
    rules = copy.deepcopy(base["rules"])
    for r in rules:
        if res in r["resources"] and (group is None or group in r["apiGroups"]):
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
        kubeconfig_for "$id-${a%%=*}" "$work/${a%%=*}.kubeconfig" "$(proxy_url "${a%%=*}")" &
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
    running() { # POD: as the kubelet reports a started container
        "${k[@]}" patch "pod/$1" --subresource=status --type=merge -p '{"status":{"phase":"Running",
            "containerStatuses":[{"name":"worker","image":"gantry-worker:0.1.0","imageID":"",
            "ready":true,"restartCount":0,"state":{"running":{}}}]}}' >/dev/null
    }

    "$kubectl" --request-timeout=20s create namespace "$ns" >/dev/null
    "$kubectl" --request-timeout=20s label namespace "$ns" "gantry.dev/test=$id" >/dev/null
    # The chart's own run takes the chart's (empty, Helm-created) Lease; variants have their own.
    local lease=$id-$name
    [ "$name" != chart ] || lease=gantry-operator
    "$op" --kubeconfig "$cfg" --namespace "$ns" --lease-namespace "$relns" --lease-name "$lease" \
        --workers 2 --sync-timeout 5 --lease-duration 15 --renew-deadline 10 --retry-period 2 \
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
    # The operator's TrainingJob watch is held back (through holdproxy.py; a no-op for runs
    # without one), the job's metadata changes, then its pods start: the operator's cached copy
    # is stale when it writes status.phase Running, so that PUT gets 409 and only a fresh GET
    # lets it through before the watch is released.
    touch "$work/hold/$ns"
    "${k[@]}" annotate tj "$job" gantry.dev/test-bump="$RANDOM" --overwrite >/dev/null
    running "$job-worker-0"
    running "$job-worker-1"
    t=0
    step conflict 10 bash -c "[ \"\$('$kubectl' -n $ns get tj $job -o jsonpath='{.status.phase}')\" = Running ]" || t=1
    rm -f "$work/hold/$ns"
    [ "$t" = 0 ] || return 0
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
    # The gang's Workload: made; adopted after a 409 (get); replaced when its minCount is not the
    # job's replicas (delete). No scheduler runs here: creating it and the pods is what counts.
    job=tjg-$name
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$job"},
 "spec":{"replicas":2,"runPolicy":{"schedulingPolicy":{"gang":"Workload"}}}}
JOB
    wl_pods() { # N: the Workload's minCount and the pods are both N
        [ "$(jp "workloads.scheduling.k8s.io/$job" '{.spec.podGroups[0].policy.gang.minCount}')" = "$1" ] &&
            pods_are "$1"
    }
    step workload 10 wl_pods 2 || return 0
    suspend_ true
    until_ 10 pods_are 0 || { echo "FAIL suspend"; return 0; }
    suspend_ false
    step wl-adopt 10 pods_are 2 || return 0
    suspend_ true
    until_ 10 pods_are 0 || { echo "FAIL suspend"; return 0; }
    "${k[@]}" patch tj "$job" --type=merge -p '{"spec":{"replicas":3}}' >/dev/null
    suspend_ false
    step wl-replace 10 wl_pods 3 || return 0
    # Kueue: the job waits in a LocalQueue of the test's ClusterQueue; Kueue admits it.
    job=tjk-$name
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"LocalQueue","metadata":{"name":"lq"},
 "spec":{"clusterQueue":"$id"}}
JOB
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$job",
 "labels":{"kueue.x-k8s.io/queue-name":"lq","kueue.x-k8s.io/priority-class":"$id"}},
 "spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"worker",
 "resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}}
JOB
    kwl() { "${k[@]}" get workloads.kueue.x-k8s.io -l "gantry.dev/job-name=$job" -o jsonpath="$1" 2>/dev/null; }
    kq_pods() { # N pods, each on the flavor's node label
        pods_are "$1" && [ "$("${k[@]}" get pods -l "gantry.dev/job-name=$job" \
            -o jsonpath='{range .items[*]}{.spec.nodeSelector.gantry\.dev/test-pool}{" "}{end}')" = "$id $id " ]
    }
    step kueue 20 bash -c "[ \"\$('$kubectl' -n $ns get workloads.kueue.x-k8s.io -l gantry.dev/job-name=$job -o jsonpath='{.items[0].spec.priority}')\" = 4242 ]" || return 0
    step kq-pods 20 kq_pods 2 || return 0
    suspend_ true
    step kq-suspend 10 bash -c "[ -z \"\$('$kubectl' -n $ns get workloads.kueue.x-k8s.io -l gantry.dev/job-name=$job -o name)\" ]" || return 0
    suspend_ false
    until_ 20 kq_pods 2 || { echo "FAIL kq-resume"; return 0; }
    "${k[@]}" patch "pod/$job-worker-0" --subresource=status --type=merge -p '{"status":{"phase":"Succeeded",
        "containerStatuses":[{"name":"worker","image":"gantry-worker:0.1.0","imageID":"","ready":false,
        "restartCount":0,"state":{"terminated":{"exitCode":0,"reason":"Completed"}}}]}}' >/dev/null
    step kq-finish 20 bash -c "[ \"\$('$kubectl' -n $ns get workloads.kueue.x-k8s.io -l gantry.dev/job-name=$job -o jsonpath='{.items[0].status.conditions[?(@.type==\"Finished\")].status}')\" = True ]" || return 0
    job=tjp-$name
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$job",
 "labels":{"kueue.x-k8s.io/queue-name":"lq"}},
 "spec":{"replicas":1,"template":{"spec":{"priorityClassName":"$id"}}}}
JOB
    step kq-pc 20 bash -c "[ \"\$('$kubectl' -n $ns get workloads.kueue.x-k8s.io -l gantry.dev/job-name=$job -o jsonpath='{.items[0].spec.priority}')\" = 77 ]" || return 0
    job=tjd-$name
    "${k[@]}" apply -f - >/dev/null <<JOB
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$job",
 "labels":{"kueue.x-k8s.io/queue-name":"lq"}},"spec":{"replicas":1}}
JOB
    step kq-default 20 bash -c "[ \"\$('$kubectl' -n $ns get workloads.kueue.x-k8s.io -l gantry.dev/job-name=$job -o jsonpath='{.items[0].spec.priority}')\" = 55 ]" || return 0
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
    [events-patch]=series [tj-delete]=ttl [tj-get]=conflict [finalizers]=service
    [wl-create]=workload [wl-get]=wl-adopt [wl-delete]=wl-replace
    [kq-listwatch]=kueue [kq-create]=kueue [wpc-get]=kueue [rf-get]=kq-pods
    [kq-delete]=kq-suspend [kq-status]=kq-finish [pc-get]=kq-pc [pc-list]=kq-default
)
declare -A drop=(
    [lease]=lease
    [tj-listwatch]=trainingjobs:list,watch [pods-listwatch]=pods:list,watch
    [svc-listwatch]=services:list,watch [cm-listwatch]=configmaps:list,watch
    [secrets-listwatch]=secrets:list,watch
    [svc-create]=services:create [cm-create]=configmaps:create [secrets-create]=secrets:create
    [pods-create]=pods:create [status-update]=trainingjobs/status:update
    [events-create]=events:create [cm-patch]=configmaps:patch [pods-delete]=pods:delete
    [events-patch]=events:patch [tj-delete]=trainingjobs:delete [tj-get]=trainingjobs:get
    [finalizers]=trainingjobs/finalizers:update
    [wl-create]=scheduling.k8s.io/workloads:create [wl-get]=scheduling.k8s.io/workloads:get
    [wl-delete]=scheduling.k8s.io/workloads:delete
    [kq-listwatch]=kueue.x-k8s.io/workloads:list,watch [kq-create]=kueue.x-k8s.io/workloads:create
    [wpc-get]=workloadpriorityclasses:get [rf-get]=resourceflavors:get
    [kq-delete]=kueue.x-k8s.io/workloads:delete [kq-status]=workloads/status:patch
    [pc-get]=priorityclasses:get [pc-list]=priorityclasses:list
)
# Runs through holdproxy.py: the chart's (must recover from the 409) and the one without get.
proxy chart
proxy tj-get
kubeconfig_for "$sa" "$work/chart.kubeconfig" "$(proxy_url chart)"
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
# The proxy's request log of the chart's run: the conflict step did go through a 409 and a GET,
# and nothing the operator asked for was ever refused.
cns=$id-chart
grep -q "^$cns HELD WATCH " "$work/chart.proxy" &&
    ok "chart run: its TrainingJob watch was held during the conflict step" ||
    bad "chart run: its TrainingJob watch was never held (proxy log: $logs/proxy-$id-chart.requests)"
if awk -v p="$cns PUT /apis/gantry.dev/v1alpha1/namespaces/$cns/trainingjobs/tj-chart/status 409" \
    -v g="$cns GET /apis/gantry.dev/v1alpha1/namespaces/$cns/trainingjobs/tj-chart 200" \
    '$0 == p { c = 1 } c && $0 == g { f = 1 } END { exit !f }' "$work/chart.proxy"; then
    ok "chart run: status PUT got 409 Conflict, then GET trainingjobs 200 ($(grep -c "/status 409$" "$work/chart.proxy") conflicts)"
else
    bad "chart run: no 409 on the status PUT followed by a GET (proxy log: $logs/proxy-$id-chart.requests)"
fi
n403=$(grep -c " 403$" "$work/chart.proxy" || true)
[ "$n403" = 0 ] && ok "chart run: no request refused (403) in $(wc -l <"$work/chart.proxy") requests" ||
    bad "chart run: $n403 requests refused with 403: $(grep " 403$" "$work/chart.proxy" | sort -u | head -3 | tr '\n' ';')"
grep -q "^$id-tj-get GET .*/trainingjobs/tj-tj-get 403" "$work/tj-get.proxy" &&
    ok "without trainingjobs:get: the re-read after the 409 is refused (403)" ||
    bad "without trainingjobs:get: no refused GET of the job in the proxy log"
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
cp "$work/chart.proxy" "$logs/proxy-$id-chart.requests"
cp "$work/tj-get.proxy" "$logs/proxy-$id-tj-get.requests"
san=$(grep -l "Sanitizer\|runtime error:" "$logs"/operator-"$id"-*.log 2>/dev/null || true)
[ -z "$san" ] && ok "no sanitizer report in any operator log" || bad "sanitizer reports in: $san"
summary
