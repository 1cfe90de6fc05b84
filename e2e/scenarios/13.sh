# shellcheck shell=bash
# Scenario 13: an elastic job sized by the operator (elasticPolicy.shrinkAfterSeconds), as
# torchrun --nnodes 2:3 sizes itself from the nodes that join. The node advertises 2 of an
# extended resource, gantry.dev/e2e-slot (a status patch, removed at the end), and each worker
# requests 1; the job asks for 3 workers, minReplicas 1, shrinkAfterSeconds 15.
#   a. worker 2 stays unschedulable: after 15 s a Normal ScaledDown event, status.elasticWorkers
#      2, the job runs with 2 workers (labelled gantry.dev/replicas=2), and a standby pod
#      (gantry.dev/standby) waits for room for worker 2;
#   b. the node gets a third slot: the standby pod is scheduled, a Normal ScaledUp event, and 3
#      workers resume from the step the 2 stopped at ("saved at world size 2, now 3"); the job
#      Succeeds with restarts 0.

# pods_labelled NS SELECTOR PHASE N: exactly N pods with that selector are in that phase
pods_labelled() {
    [ "$(kc -n "$1" get pods -l "$2" -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' |
        grep -c "^$3\$")" = "$4" ]
}

shrunk_to_2() { # NS JOB
    pods_labelled "$1" "gantry.dev/job-name=$2,gantry.dev/replicas=2" Running 2 &&
        pods_labelled "$1" "gantry.dev/job-name=$2,gantry.dev/standby=true" Pending 1
}
grown_to_3() { # NS JOB: or already done
    pods_labelled "$1" "gantry.dev/job-name=$2,gantry.dev/replicas=3,gantry.dev/restart-count=0" Running 3 ||
        [ "$(tj_get "$1" "$2" '{.status.phase}')" = Succeeded ]
}

scenario_13() {
    local node job=spam-auto f=$ARTIFACTS/spam-auto.yaml logs s
    slots_up 2 || return 0
    node=$SLOT_NODE

    spam_job "$job" replicas=3 slots=1 elastic=1:3:15 interval=1000 >"$f"
    check "kubectl apply -f spam-auto.yaml (3 workers, elasticPolicy 1..3, shrinkAfterSeconds 15)" \
        kc -n "$NS" apply -f "$f" || return 0
    check "a Normal ScaledDown event (worker 2 unschedulable for 15 s)" wait_until 180 bash -c \
        "'$KUBECTL' -n '$NS' get events --field-selector 'involvedObject.name=$job,reason=ScaledDown' -o name | grep -q ."
    note "ScaledDown: $(kc -n "$NS" get events --field-selector "involvedObject.name=$job,reason=ScaledDown" -o 'jsonpath={.items[0].message}' | cut -c1-200)"
    check "status.elasticWorkers 2" wait_until 60 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.elasticWorkers}')\" = 2 ]"
    check "2 workers (gantry.dev/replicas=2) run, and a standby pod for worker 2 waits" \
        wait_until 180 shrunk_to_2 "$NS" "$job"
    check "tj/$job is Running with 2/2 ready" wait_until 120 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.phase} {.status.ready}')\" = 'Running 2/2' ]"
    wait_until 300 rank0_past "$NS" "$job" 30 || bad "rank 0 did not reach step 30 with 2 workers"
    note "$(stamp) the node gets a third gantry.dev/e2e-slot"
    check "node $node advertises 3 gantry.dev/e2e-slot" node_res_patch "$node" gantry.dev/e2e-slot 3
    check "a Normal ScaledUp event (the standby pod was scheduled)" wait_until 180 bash -c \
        "'$KUBECTL' -n '$NS' get events --field-selector 'involvedObject.name=$job,reason=ScaledUp' -o name | grep -q ."
    check "3 workers (gantry.dev/replicas=3, restart count 0) run" wait_until 180 grown_to_3 "$NS" "$job"
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "status.restarts 0 and no elasticWorkers at the end" \
        test "$(tj_get "$NS" "$job" '{.status.restarts}/{.status.elasticWorkers}')" = 0/
    logs=$(kc -n "$NS" logs "$job-worker-0" -c worker 2>&1)
    printf '%s\n' "$logs" >"$ARTIFACTS/spam-auto-worker-0.txt"
    s=$(sed -n 's/.*rank 0 resumed from step \([0-9]*\) .*/\1/p' <<<"$logs" | head -1)
    check "the 3 workers resumed from step S=${s:-none} >= 30, saved when the 2 stopped" test "${s:-0}" -ge 30
    check "at world size 3 (\"saved at world size 2, now 3\")" grep -q 'saved at world size 2, now 3' <<<"$logs"
    kc -n "$NS" delete tj "$job" --wait=false >/dev/null 2>&1
    check "the node's gantry.dev/e2e-slot is removed again" node_res_unpatch "$node" gantry.dev/e2e-slot &&
        SLOT_NODE=''
}
