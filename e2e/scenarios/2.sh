# shellcheck shell=bash
# Scenario 2: kubectl delete of one worker pod mid-training (after the first checkpoint): the
# whole gang restarts once, the new workers log that they resumed from step S > 0, the job
# Succeeds and status.restarts is 1.

scenario_2() {
    local job=spam-chaos f=$ARTIFACTS/spam-chaos.yaml step victim logs s
    spam_job "$job" interval=20 >"$f"
    check "kubectl apply -f spam-chaos.yaml" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    # Kill once a checkpoint exists (so that there is something to resume from), or half way.
    step=$(wait_kill_moment "$NS" "$job" 600) || { bad "tj/$job ended before a worker could be deleted"; return 0; }
    if [ "${step:-0}" -gt 0 ] 2>/dev/null; then
        ok "a first checkpoint exists (step $step: status.lastCheckpoint or rank 0's log)"
    else
        bad "no checkpoint reported (status.lastCheckpoint or rank 0's log) by half-way; deleting a worker anyway"
    fi
    victim=$job-worker-1
    note "$(stamp) kubectl delete pod $victim (phase $(tj_get "$NS" "$job" '{.status.phase}'), checkpoint at step ${step:-none})"
    check "kubectl delete pod $victim" kc -n "$NS" delete pod "$victim" --wait=false
    check "the job restarts the gang (Restarting, or restarts=1)" \
        wait_until 120 bash -c "[ \"\$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.restarts}')\" = 1 ]"
    check "tj/$job reaches Succeeded after the restart" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "status.restarts is 1" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 1
    check "the pods now carry restart count 1 (label gantry.dev/restart-count)" \
        test "$(kc -n "$NS" get pods -l "gantry.dev/job-name=$job,gantry.dev/restart-count=1" -o name | wc -l)" = "$E2E_REPLICAS"
    logs=$(for ((i = 0; i < E2E_REPLICAS; i++)); do kc -n "$NS" logs "$job-worker-$i" -c worker 2>&1; done)
    printf '%s\n' "$logs" >"$ARTIFACTS/spam-chaos-logs.txt"
    # Any resume line with a step: "resumed from step 120", {"event":"resume","step":120}, ...
    s=$(grep -i 'resum' <<<"$logs" | grep -oiE 'step[^0-9]{0,3}[0-9]+' | grep -oE '[0-9]+' | sort -n | tail -1)
    note "workers' resume line: $(grep -im1 'resum' <<<"$logs" | cut -c1-160)"
    check "the workers logged that they resumed from step S=${s:-none} > 0" test "${s:-0}" -gt 0
    local acc
    acc=$(json_field "$(rank0_report "$NS" "$job")" 'r["accuracy"]')
    check "the restarted job still reports an accuracy (${acc:-none}) >= $E2E_MIN_ACCURACY" \
        python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= $E2E_MIN_ACCURACY else 1)"
}
