# shellcheck shell=bash
# Scenario 5: suspend a running job (pods deleted, phase Suspended, state kept), resume it (pods
# back, Running); then kubectl delete the job and every child (pods, Service, ConfigMap, Secret)
# is garbage-collected through its ownerReference.

children() { # JOB: "kind/name" of every child left
    kc -n "$NS" get pods,services,configmaps,secrets -l "gantry.dev/job-name=$1" -o name 2>/dev/null
}

scenario_5() {
    local job=spam-suspend f=$ARTIFACTS/spam-suspend.yaml
    spam_job "$job" epochs=50 >"$f" # long enough to be running throughout
    check "kubectl apply -f spam-suspend.yaml" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" Running 300 || return 0
    check "all $E2E_REPLICAS workers become ready" wait_until 180 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get tj $job -o jsonpath='{.status.replicas.ready}')\" = $E2E_REPLICAS ]"
    check "kubectl patch: spec.runPolicy.suspend=true" \
        kc -n "$NS" patch tj "$job" --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}'
    check "tj/$job reaches Suspended" wait_tj_phase "$NS" "$job" Suspended 120
    check "its pods are deleted" wait_until 120 bash -c "[ -z \"\$('$KUBECTL' -n '$NS' get pods -l gantry.dev/job-name=$job -o name)\" ]"
    check "the Suspended condition is True" \
        test "$(tj_get "$NS" "$job" '{.status.conditions[?(@.type=="Suspended")].status}')" = True
    check "kubectl patch: spec.runPolicy.suspend=false" \
        kc -n "$NS" patch tj "$job" --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}'
    check "tj/$job is Running again" wait_tj_phase "$NS" "$job" Running 180
    check "its $E2E_REPLICAS pods are back" wait_until 120 bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get pods -l gantry.dev/job-name=$job -o name | wc -l)\" = $E2E_REPLICAS ]"
    note "children before delete: $(children "$job" | tr '\n' ' ')"
    check "kubectl delete tj $job" kc -n "$NS" delete tj "$job" --wait=true --timeout=60s
    if wait_until 120 bash -c "[ -z \"\$($(declare -f kc children); NS='$NS' KUBECTL='$KUBECTL' children $job)\" ]"; then
        ok "every child (pods, Service, ConfigMap, Secret) is garbage-collected"
    else
        bad "children left 120s after the delete: $(children "$job" | tr '\n' ' ')"
    fi
}
