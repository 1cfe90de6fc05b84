# shellcheck shell=bash
# Scenario 11: an elastic job resized while it trains. A job of 2 workers with
# elasticPolicy {minReplicas: 1, maxReplicas: 3} and no interval checkpoint before its end
# (intervalSteps 1000) is scaled to 3 with `kubectl scale` once rank 0 is past step 40:
#   - the scale subresource reads 2 (status.currentReplicas) and the pods' selector before;
#   - the operator stops the gang (a Normal Resizing event, reason Resized), rank 0 saves the
#     step it stopped at on SIGTERM (checkpoint.saveOnStop), and 3 pods labelled
#     gantry.dev/replicas=3 start at the same restart count (status.restarts stays 0);
#   - the new rank 0 resumes from that step S >= the step seen before the scale (the only
#     checkpoint there is), at world size 3, and the job Succeeds with currentReplicas 3 while
#     it ran.

scenario_11() {
    local job=spam-elastic f=$ARTIFACTS/spam-elastic.yaml at='' scale logs s cur
    spam_job "$job" replicas=2 elastic=1:3 interval=1000 >"$f"
    check "kubectl apply -f spam-elastic.yaml (2 workers, elasticPolicy 1..3)" \
        kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    wait_until 300 rank0_past "$NS" "$job" 40 ||
        { bad "rank 0 did not reach step 40 at 2 workers"; return 0; }
    at=$(rank0_step "$NS" "$job")
    scale=$(kc get --raw "/apis/gantry.dev/v1alpha1/namespaces/$NS/trainingjobs/$job/scale")
    note "scale subresource before: $scale"
    check "the scale subresource: status.replicas 2, the selector gantry.dev/job-name=$job" \
        bash -c "[[ '$scale' == *'\"status\":{\"replicas\":2,\"selector\":\"gantry.dev/job-name=$job\"'* ]]"
    note "$(stamp) kubectl scale tj/$job --replicas=3 (rank 0 at step ${at:-?})"
    check "kubectl scale tj/$job --replicas=3" kc -n "$NS" scale tj "$job" --replicas=3 || return 0
    check "a Normal Resizing event" wait_until 60 bash -c \
        "'$KUBECTL' -n '$NS' get events --field-selector 'involvedObject.name=$job,reason=Resizing' -o name | grep -q ."
    check "3 pods labelled gantry.dev/replicas=3 at restart count 0 run" wait_until 180 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get pods -l 'gantry.dev/job-name=$job,gantry.dev/replicas=3,gantry.dev/restart-count=0' \
        -o 'jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}' | grep -c Running)\" = 3 ]"
    cur=$(tj_get "$NS" "$job" '{.status.currentReplicas}/{.status.restarts}')
    check "status.currentReplicas 3 and restarts 0 while the new gang runs (got $cur)" \
        bash -c "[[ '$cur' == 3/0 || \$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.phase}') == Succeeded ]]"
    check "tj/$job reaches Succeeded after the resize" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "status.restarts is still 0 (a resize is not a failure)" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 0
    logs=$(kc -n "$NS" logs "$job-worker-0" -c worker 2>&1)
    printf '%s\n' "$logs" >"$ARTIFACTS/spam-elastic-worker-0.txt"
    s=$(sed -n 's/.*rank 0 resumed from step \([0-9]*\) .*/\1/p' <<<"$logs" | head -1)
    note "new rank 0: $(grep -m1 'saved at world size' <<<"$logs" | cut -c1-160)"
    check "the new rank 0 resumed from step S=${s:-none} >= ${at:-?}, the step rank 0 saved when stopped (no interval checkpoint before)" \
        test "${s:-0}" -ge "${at:-1}"
    check "it continued at world size 3 (\"saved at world size 2, now 3\")" \
        grep -q 'saved at world size 2, now 3' <<<"$logs"
    check "its final report says world size 3" \
        test "$(json_field "$(rank0_report "$NS" "$job")" 'r["train"]["world_size"]')" = 3
}
