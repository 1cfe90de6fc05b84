# shellcheck shell=bash
# Scenario 12: a worker evicted (the Eviction API, as kubectl drain uses it) from a job with
# runPolicy.backoffLimit 0. The API server marks the pod DisruptionTarget (EvictionByEvictionAPI)
# before deleting it, so the operator restarts the gang as a disruption: status.restarts 1,
# status.disruptions 1, a Warning Restarting event that says "disrupted", and the job Succeeds.
# Without that rule a backoffLimit of 0 would fail the job (as scenario 2's kubectl delete pod,
# counted, would).

scenario_12() {
    local job=spam-evict f=$ARTIFACTS/spam-evict.yaml step victim out
    spam_job "$job" interval=20 backoff=0 >"$f"
    check "kubectl apply -f spam-evict.yaml (backoffLimit 0)" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    step=$(wait_kill_moment "$NS" "$job" 600) || { bad "tj/$job ended before a worker could be evicted"; return 0; }
    victim=$job-worker-1
    note "$(stamp) evicting $victim (the Eviction API; checkpoint at step ${step:-none})"
    out=$(printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"%s"}}' \
        "$victim" "$NS" | kc create --raw "/api/v1/namespaces/$NS/pods/$victim/eviction" -f - 2>&1)
    check "POST pods/$victim/eviction accepted" test $? = 0 || note "$out"
    check "the gang restarts as a disruption (restarts 1, disruptions 1)" wait_until 120 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.restarts}/{.status.disruptions}')\" = 1/1 ]"
    check "a Warning Restarting event says the worker was disrupted (EvictionByEvictionAPI)" bash -c \
        "'$KUBECTL' -n '$NS' get events --field-selector 'involvedObject.name=$job,reason=Restarting' \
        -o 'jsonpath={.items[*].message}' | grep -q 'disrupted (DisruptionTarget: EvictionByEvictionAPI)'"
    check "tj/$job reaches Succeeded despite backoffLimit 0" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "status.restarts 1, disruptions 1 at the end" \
        test "$(tj_get "$NS" "$job" '{.status.restarts}/{.status.disruptions}')" = 1/1
    # the operator counts it (its /metrics, through the API server's pod proxy)
    local pod m
    pod=$(kc -n "$RELEASE_NS" get pods -l app.kubernetes.io/instance="$RELEASE" \
        -o 'jsonpath={.items[0].metadata.name}')
    m=$(kc get --raw "/api/v1/namespaces/$RELEASE_NS/pods/$pod:8080/proxy/metrics" 2>&1)
    note "operator metrics: $(grep -E '^gantry_operator_gang_(restarts|disruptions|resizes)_total' <<<"$m" | tr '\n' ' ')"
    check "the operator's gantry_operator_gang_disruptions_total is at least 1" \
        bash -c '[ "${1:-0}" -ge 1 ]' _ "$(awk '$1 == "gantry_operator_gang_disruptions_total" {print $2}' <<<"$m")"
}
