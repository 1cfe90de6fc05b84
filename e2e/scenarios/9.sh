# shellcheck shell=bash
# shellcheck disable=SC2034  # SLOT_NODE: read by e2e/run.sh's teardown
# Scenario 9: gang scheduling through kube-scheduler's Workload API (Kubernetes 1.35 alpha; the
# local full tier turns on the GenericWorkload and GangScheduling feature gates). The node
# advertises 2 of an extended resource, gantry.dev/e2e-slot, and each worker requests 1, so the
# node has room for 2 workers whatever else runs there.
#   a. gang: None, 3 workers: the scheduler binds 2 and the third waits: a gang that cannot run
#      holds two thirds of the room (the control: what gang scheduling is for).
#   b. gang: Workload, 3 workers: the operator makes the Workload <job> (one pod group of
#      minCount 3, controlled by the job) and points each pod's spec.workloadRef at it; the
#      scheduler binds none of the 3.
#   c. suspended, replicas 3 -> 2, resumed: the operator replaces the Workload (its spec is
#      immutable) with minCount 2; both pods are bound and the job Succeeds.
# On a cluster that does not serve scheduling.k8s.io/v1alpha1 Workloads, (b) instead checks that
# the job gets no pod and a Warning Event naming the feature gates to enable.

bound_pods() { # NS JOB: how many of the job's pods have a node
    kc -n "$1" get pods -l "gantry.dev/job-name=$2" \
        -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true
}
unschedulable_pods() { # NS JOB: how many have PodScheduled=False (the scheduler tried)
    kc -n "$1" get pods -l "gantry.dev/job-name=$2" \
        -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].status}{"\n"}{end}' |
        grep -c False || true
}
pods_are() { # NS JOB BOUND UNSCHEDULABLE: exactly so many of each
    [ "$(bound_pods "$1" "$2")" = "$3" ] && [ "$(unschedulable_pods "$1" "$2")" = "$4" ]
}
no_pods() { [ -z "$(job_pods "$1" "$2")" ]; } # NS JOB
some_unschedulable() { [ "$(unschedulable_pods "$1" "$2")" -ge 1 ]; } # NS JOB
pod_refs_are() { # NS JOB WANT: the pods' spec.workloadRef name/podGroup, space-separated
    [ "$(kc -n "$1" get pods -l "gantry.dev/job-name=$2" \
        -o 'jsonpath={range .items[*]}{.spec.workloadRef.name}/{.spec.workloadRef.podGroup} {end}')" = "$3" ]
}
is_at() { [ "$(kc -n "$1" get "$2" -o "jsonpath=$3" 2>/dev/null)" = "$4" ]; } # NS OBJ PATH VALUE
workload_replaced() { # NS NAME OLD-UID MIN
    is_at "$1" "workloads.scheduling.k8s.io/$2" '{.spec.podGroups[0].policy.gang.minCount}' "$4" &&
        ! is_at "$1" "workloads.scheduling.k8s.io/$2" '{.metadata.uid}' "$3"
}
gang_event() { # NS JOB: a Warning Event of the job names the feature gate to enable
    kc -n "$1" get events --field-selector "involvedObject.name=$2,type=Warning" \
        -o 'jsonpath={.items[*].message}' | grep -q GenericWorkload
}

scenario_9() {
    local node loose=gang-off gang=gang-on f served=0 uid1 uid2 key1 key2 got
    slots_up 2 || return 0
    node=$SLOT_NODE

    # a. pod by pod
    f=$ARTIFACTS/$loose.yaml
    spam_job "$loose" replicas=3 slots=1 gang=None maxSteps=30 >"$f"
    check "kubectl apply -f $loose.yaml (3 workers, gang: None)" kc -n "$NS" apply -f "$f" || return 0
    check "gang: None: the scheduler binds 2 workers and leaves the third unschedulable" \
        wait_until 120 pods_are "$NS" "$loose" 2 1
    note "pods: $(kc -n "$NS" get pods -l gantry.dev/job-name=$loose -o 'jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName} {end}')"
    check "kubectl delete tj $loose" kc -n "$NS" delete tj "$loose" --wait=true --timeout=60s
    check "its pods are gone" wait_until 120 no_pods "$NS" "$loose"

    # b. the gang
    kc api-resources --api-group=scheduling.k8s.io -o name 2>/dev/null | grep -qx 'workloads.scheduling.k8s.io' && served=1
    f=$ARTIFACTS/$gang.yaml
    spam_job "$gang" replicas=3 slots=1 gang=Workload maxSteps=30 >"$f"
    check "kubectl apply -f $gang.yaml (3 workers, gang: Workload)" kc -n "$NS" apply -f "$f" || return 0
    if [ $served = 0 ]; then
        note "this cluster serves no scheduling.k8s.io/v1alpha1 Workloads: checking the refusal"
        check "no Workload API: a Warning Event names the feature gates to enable" \
            wait_until 60 gang_event "$NS" "$gang"
        check "no Workload API: no pod is created" no_pods "$NS" "$gang"
        kc -n "$NS" delete tj "$gang" --wait=false >/dev/null 2>&1
        return 0
    fi
    check "the Workload $gang: one pod group 'workers' of minCount 3, controlled by the TrainingJob" \
        wait_until 60 is_at "$NS" "workloads.scheduling.k8s.io/$gang" \
        '{.spec.podGroups[*].name} {.spec.podGroups[0].policy.gang.minCount} {.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].controller}' \
        'workers 3 TrainingJob true'
    uid1=$(kc -n "$NS" get workloads.scheduling.k8s.io "$gang" -o 'jsonpath={.metadata.uid}')
    key1=$(kc -n "$NS" get pod "$gang-worker-0" -o 'jsonpath={.spec.workloadRef.podGroupReplicaKey}')
    check "3 pods, each with spec.workloadRef {name: $gang, podGroup: workers}" \
        wait_until 60 pod_refs_are "$NS" "$gang" "$gang/workers $gang/workers $gang/workers "
    # The scheduler takes the gang once all 3 exist; one fails to fit (PodScheduled=False), the
    # others wait at its Permit gate for a quorum that never comes, unbound.
    check "the scheduler tried the gang (a pod is PodScheduled=False)" \
        wait_until 120 some_unschedulable "$NS" "$gang"
    sleep 10
    got=$(bound_pods "$NS" "$gang")
    note "pods: $(kc -n "$NS" get pods -l gantry.dev/job-name=$gang -o 'jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}:{.status.phase} {end}')"
    check "gang: Workload: none of the 3 workers is bound (room for 2: all or nothing)" test "$got" = 0
    check "tj/$gang stays Pending" test "$(tj_get "$NS" "$gang" '{.status.phase}')" = Pending

    # c. shrunk to fit while suspended
    check "suspend $gang" kc -n "$NS" patch tj "$gang" --type=merge \
        -p '{"spec":{"runPolicy":{"suspend":true}}}' || return 0
    check "tj/$gang Suspended" wait_until 60 is_at "$NS" "tj/$gang" '{.status.phase}' Suspended
    check "its pods are gone" wait_until 60 no_pods "$NS" "$gang"
    check "replicas 3 -> 2 (allowed while suspended)" kc -n "$NS" patch tj "$gang" --type=merge \
        -p '{"spec":{"replicas":2}}' || return 0
    check "resume" kc -n "$NS" patch tj "$gang" --type=merge \
        -p '{"spec":{"runPolicy":{"suspend":false}}}' || return 0
    check "the Workload is replaced: minCount 2, a new object" \
        wait_until 120 workload_replaced "$NS" "$gang" "$uid1" 2
    uid2=$(kc -n "$NS" get workloads.scheduling.k8s.io "$gang" -o 'jsonpath={.metadata.uid}')
    note "Workload uid $uid1 -> $uid2"
    check "gang of 2: both workers bound" wait_until 180 pods_are "$NS" "$gang" 2 0
    # The local tier restarts a crashed kube-scheduler as a kubelet would (hack/cluster-full.sh
    # full_scheduler): 1.35.4's GangScheduling can crash on a gang pod deleted mid-cycle.
    if [ -n "${CLUSTER_RUN:-}" ] && grep -q 'exited with status' "$CLUSTER_RUN/logs/kube-scheduler.log" 2>/dev/null; then
        note "kube-scheduler was restarted $(grep -c 'exited with status' "$CLUSTER_RUN/logs/kube-scheduler.log") time(s) in this run ($(grep -c 'podGroupInfo).UnscheduledPods' "$CLUSTER_RUN/logs/kube-scheduler.log") in UnscheduledPods)"
    fi
    # A new replica key for the resumed gang: 1.35.4's kube-scheduler keeps a pod deleted while
    # it waited for its gang and crashes at the next pod of the same key (render.h).
    key2=$(kc -n "$NS" get pod "$gang-worker-0" -o 'jsonpath={.spec.workloadRef.podGroupReplicaKey}')
    note "podGroupReplicaKey $key1 -> $key2"
    check "the resumed gang is a new replica of the pod group (podGroupReplicaKey changed)" \
        bash -c '[ -n "$1" ] && [ -n "$2" ] && [ "$1" != "$2" ]' _ "$key1" "$key2"
    check "tj/$gang reaches Succeeded" wait_tj_phase "$NS" "$gang" Succeeded "$E2E_TRAIN_TIMEOUT"
    kc -n "$NS" delete tj "$gang" --wait=false >/dev/null 2>&1
    check "the node's gantry.dev/e2e-slot is removed again" node_res_unpatch "$node" gantry.dev/e2e-slot &&
        SLOT_NODE=''
}
