# shellcheck shell=bash
# shellcheck disable=SC2034  # KUEUE_OBJS: read by e2e/run.sh's teardown
# Scenario 10: queueing and preemption by Kueue (kueue.x-k8s.io; the local full tier runs Kueue
# v0.17 next to the control plane, hack/cluster-kueue.sh). A ClusterQueue with room for one job
# of 2 workers (cpu 200m: each worker requests 100m), a ResourceFlavor whose node label is the
# node's hostname, a LocalQueue in the test namespace, WorkloadPriorityClasses low and high.
#   a. low (2 workers, priority low): the operator makes its Workload in the LocalQueue, Kueue
#      admits it, the pods carry the flavor's node label, the Workload reports PodsReady and the
#      job runs to a checkpoint.
#   b. high (2 workers, priority high): Kueue preempts low; the operator deletes low's pods
#      (Queued=True, Evicted; restarts still 0), hands the quota back (low's Workload loses its
#      admission), and high runs to Succeeded; its Workload is then Finished.
#   c. low is admitted again once high's quota is released, resumes from its checkpoint and
#      Succeeds.
#   d. a job in a LocalQueue that does not exist: Queued=True with Kueue's reason, and no pod.
#   e. partial admission: an elastic job of 3 workers (elasticPolicy.minReplicas 1) gets a
#      Workload with minCount 1; Kueue admits 2 (the quota's room), and it runs and Succeeds
#      with 2 workers.
# On a cluster without Kueue it checks the refusal instead: no pod, a Warning Event.

kueue_yaml() { # NS NODE
    cat <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gantry-e2e, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  nodeLabels: {kubernetes.io/hostname: $2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gantry-e2e, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors:
        - name: gantry-e2e
          resources:
            - {name: cpu, nominalQuota: 200m}
            - {name: memory, nominalQuota: 8Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: $1, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec: {clusterQueue: gantry-e2e}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: gantry-e2e-low, labels: {app.kubernetes.io/part-of: gantry-e2e}}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: gantry-e2e-high, labels: {app.kubernetes.io/part-of: gantry-e2e}}
value: 1000
YAML
}

kq_wl() { # NS JOB: the name of the job's Kueue Workload (empty: none yet)
    kc -n "$1" get workloads.kueue.x-k8s.io -l "gantry.dev/job-name=$2" \
        -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null
}
kq_wl_at() { # NS JOB JSONPATH VALUE: the job's Workload has that value there
    local w
    w=$(kq_wl "$1" "$2")
    [ -n "$w" ] && [ "$(kc -n "$1" get workloads.kueue.x-k8s.io "$w" -o "jsonpath=$3")" = "$4" ]
}
queued_is() { # NS JOB STATUS REASON: the TrainingJob's Queued condition
    [ "$(tj_get "$1" "$2" '{.status.conditions[?(@.type=="Queued")].status}/{.status.conditions[?(@.type=="Queued")].reason}')" = "$3/$4" ]
}
kq_event() { # NS JOB TYPE REASON: the job has such an Event
    kc -n "$1" get events --field-selector "involvedObject.name=$2,type=$3,reason=$4" \
        -o 'jsonpath={.items[*].reason}' | grep -q .
}
no_pods() { [ -z "$(job_pods "$1" "$2")" ]; } # NS JOB
running_pods_are() { # NS JOB N: exactly N pods of the job, all Running
    [ "$(kc -n "$1" get pods -l "gantry.dev/job-name=$2" \
        -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' | grep -c Running)" = "$3" ] &&
        [ "$(job_pods "$1" "$2" | grep -c .)" = "$3" ]
}
admitted_running() { queued_is "$1" "$2" False Admitted && running_pods_are "$1" "$2" "$3"; }
cq_active() { # NAME
    [ "$(kc get clusterqueues.kueue.x-k8s.io "$1" \
        -o 'jsonpath={.status.conditions[?(@.type=="Active")].status}')" = True ]
}

scenario_10() {
    local node low=kq-low high=kq-high lost=kq-nowhere part=kq-elastic f step s logs wl
    node=$(kc get nodes -o 'jsonpath={.items[0].metadata.name}')
    if ! kc api-resources --api-group=kueue.x-k8s.io -o name 2>/dev/null |
        grep -qx 'workloads.kueue.x-k8s.io'; then
        note "this cluster serves no kueue.x-k8s.io Workloads: checking the refusal"
        f=$ARTIFACTS/$lost.yaml
        spam_job "$lost" replicas=2 queue=team maxSteps=20 >"$f"
        check "kubectl apply -f $lost.yaml (queue-name team)" kc -n "$NS" apply -f "$f" || return 0
        check "no Kueue: Queued=True (KueueNotServed) and a Warning Event" \
            wait_until 60 kq_event "$NS" "$lost" Warning KueueNotServed
        check "no Kueue: no pod is created" no_pods "$NS" "$lost"
        kc -n "$NS" delete tj "$lost" --wait=false >/dev/null 2>&1
        return 0
    fi
    f=$ARTIFACTS/kueue.yaml
    kueue_yaml "$NS" "$node" >"$f"
    check "kubectl apply -f kueue.yaml (ResourceFlavor, ClusterQueue of cpu 200m, LocalQueue team, priorities low 100 and high 1000)" \
        kc apply -f "$f" || return 0
    KUEUE_OBJS=$f
    check "ClusterQueue gantry-e2e is Active" wait_until 60 cq_active gantry-e2e
    check "manifests/examples/kueue/ passes the API server's validation (kubectl apply --dry-run=server)" \
        kc -n "$NS" apply --dry-run=server -f "$ROOT/manifests/examples/kueue/"

    # a. admitted
    f=$ARTIFACTS/$low.yaml
    spam_job "$low" replicas=2 queue=team priority=gantry-e2e-low interval=20 >"$f"
    check "kubectl apply -f $low.yaml (2 workers, LocalQueue team, priority low)" \
        kc -n "$NS" apply -f "$f" || return 0
    check "its Workload: queue team, pod set workers of 2, priority 100, controlled by the job" \
        wait_until 60 kq_wl_at "$NS" "$low" \
        '{.spec.queueName} {.spec.podSets[0].name} {.spec.podSets[0].count} {.spec.priority} {.metadata.ownerReferences[0].kind}' \
        'team workers 2 100 TrainingJob'
    check "Kueue admits it in ClusterQueue gantry-e2e" wait_until 60 kq_wl_at "$NS" "$low" \
        '{.status.admission.clusterQueue}' gantry-e2e
    check "tj/$low: Queued=False (Admitted), 2 pods Running" \
        wait_until 120 admitted_running "$NS" "$low" 2
    check "its Workload reports PodsReady=True (Started), which Kueue's waitForPodsReady reads" \
        wait_until 60 kq_wl_at "$NS" "$low" \
        '{.status.conditions[?(@.type=="PodsReady")].status}/{.status.conditions[?(@.type=="PodsReady")].reason}' \
        True/Started
    check "its pods carry the flavor's node label (nodeSelector kubernetes.io/hostname=$node)" \
        test "$(kc -n "$NS" get pod "$low-worker-0" -o 'jsonpath={.spec.nodeSelector.kubernetes\.io/hostname}')" = "$node"
    step=$(wait_kill_moment "$NS" "$low" "$E2E_TRAIN_TIMEOUT")
    check "tj/$low wrote a checkpoint (step ${step:-none})" test "${step:-0}" -gt 0

    # b. preempted by a higher priority
    f=$ARTIFACTS/$high.yaml
    spam_job "$high" replicas=2 queue=team priority=gantry-e2e-high maxSteps=30 >"$f"
    note "$(stamp) kubectl apply -f $high.yaml (tj/$low at checkpoint step $step)"
    check "kubectl apply -f $high.yaml (2 workers, priority high)" kc -n "$NS" apply -f "$f" ||
        return 0
    check "tj/$low is evicted: Queued=True (Evicted), a Warning Event" \
        wait_until 120 kq_event "$NS" "$low" Warning Evicted
    note "tj/$low: $(tj_get "$NS" "$low" '{.status.conditions[?(@.type=="Queued")].message}')"
    check "tj/$low's pods are deleted" wait_until 120 no_pods "$NS" "$low"
    check "tj/$low's Workload gives its quota back (no admission, QuotaReserved=False)" \
        wait_until 60 kq_wl_at "$NS" "$low" \
        '{.status.conditions[?(@.type=="QuotaReserved")].status}' False
    check "tj/$high is admitted and reaches Succeeded" \
        wait_tj_phase "$NS" "$high" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "tj/$high's Workload is Finished (Succeeded)" wait_until 60 kq_wl_at "$NS" "$high" \
        '{.status.conditions[?(@.type=="Finished")].reason}' Succeeded

    # c. low again, from its checkpoint
    check "tj/$low reaches Succeeded after it is admitted again" \
        wait_tj_phase "$NS" "$low" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "tj/$low's restarts are still 0 (an eviction is not a failure)" \
        test "$(tj_get "$NS" "$low" '{.status.restarts}')" = 0
    logs=$(for i in 0 1; do kc -n "$NS" logs "$low-worker-$i" -c worker 2>&1; done)
    printf '%s\n' "$logs" >"$ARTIFACTS/kq-low-logs.txt"
    s=$(grep -i 'resum' <<<"$logs" | grep -oiE 'step[^0-9]{0,3}[0-9]+' | grep -oE '[0-9]+' | sort -n | tail -1)
    note "resume line: $(grep -im1 'resum' <<<"$logs" | cut -c1-160)"
    check "tj/$low's workers resumed from step S=${s:-none} > 0" test "${s:-0}" -gt 0
    wl=$(kq_wl "$NS" "$low")
    check "tj/$low's Workload is Finished" wait_until 60 kq_wl_at "$NS" "$low" \
        '{.status.conditions[?(@.type=="Finished")].status}' True

    # d. a queue that does not exist
    f=$ARTIFACTS/$lost.yaml
    spam_job "$lost" replicas=2 queue=nowhere maxSteps=20 >"$f"
    check "kubectl apply -f $lost.yaml (LocalQueue nowhere: none)" kc -n "$NS" apply -f "$f" ||
        return 0
    check "tj/$lost: Queued=True (WaitingForAdmission)" \
        wait_until 60 queued_is "$NS" "$lost" True WaitingForAdmission
    sleep 5
    note "tj/$lost: $(tj_get "$NS" "$lost" '{.status.conditions[?(@.type=="Queued")].message}')"
    check "tj/$lost has no pod" no_pods "$NS" "$lost"

    # e. partial admission: an elastic job asks for 3 workers (cpu 300m), the queue has 200m
    f=$ARTIFACTS/$part.yaml
    spam_job "$part" replicas=3 elastic=1:3 queue=team maxSteps=30 >"$f"
    check "kubectl apply -f $part.yaml (3 workers, elasticPolicy 1..3; the queue has room for 2)" \
        kc -n "$NS" apply -f "$f" || return 0
    check "its Workload asks for 3 with minCount 1, and Kueue admits 2 (partial admission)" \
        wait_until 90 kq_wl_at "$NS" "$part" \
        '{.spec.podSets[0].count}/{.spec.podSets[0].minCount}/{.status.admission.podSetAssignments[0].count}' 3/1/2
    check "tj/$part runs 2 workers (gantry.dev/replicas=2)" \
        wait_until 120 admitted_running "$NS" "$part" 2
    check "tj/$part's Queued condition says 2 of 3 workers" bash -c '[[ $1 == *"with 2 of 3 workers"* ]]' _ \
        "$(tj_get "$NS" "$part" '{.status.conditions[?(@.type=="Queued")].message}')"
    check "tj/$part reaches Succeeded with 2 workers" wait_tj_phase "$NS" "$part" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "its report says world size 2" \
        test "$(json_field "$(rank0_report "$NS" "$part")" 'r["train"]["world_size"]')" = 2
    kc -n "$NS" delete tj "$low" "$high" "$lost" "$part" --wait=false >/dev/null 2>&1
    check "kubectl delete -f kueue.yaml" kc delete -f "$KUEUE_OBJS" --wait=false && KUEUE_OBJS=''
    note "Workload of tj/$low was $wl"
}
