# shellcheck shell=bash
# Scenario 3: the operator pod is killed (force-deleted: SIGKILL, no Lease release) while a job
# runs. The Deployment's new operator takes the Lease, adopts the job's pods (same UIDs, no gang
# restart), never creates a second pod for a rank, and the job Succeeds.

# Polls the job's pods every second until $1 exists; writes the largest number of pods seen at
# once and any rank seen twice at once to $2.
watch_pods() { # STOPFILE OUTFILE JOB
    local max=0 n dup=
    while [ ! -e "$1" ]; do
        local names
        names=$(kc -n "$NS" get pods -l "gantry.dev/job-name=$3" -o 'jsonpath={range .items[*]}{.metadata.labels.gantry\.dev/replica-index}{"\n"}{end}' 2>/dev/null) || { sleep 1; continue; }
        n=$(grep -c . <<<"$names")
        [ "$n" -le "$max" ] || max=$n
        [ -z "$(sort <<<"$names" | uniq -d)" ] || dup="$dup $(sort <<<"$names" | uniq -d | tr '\n' ' ')"
        printf '%s %s\n' "$max" "$dup" >"$2"
        sleep 1
    done
}

scenario_3() {
    local job=spam-adopt f=$ARTIFACTS/spam-adopt.yaml old new uids_before uids_after stop out
    spam_job "$job" >"$f"
    check "kubectl apply -f spam-adopt.yaml" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    wait_until 120 bash -c "[ \"\$('$KUBECTL' -n '$NS' get pods -l gantry.dev/job-name=$job -o name | wc -l)\" = $E2E_REPLICAS ]"
    uids_before=$(kc -n "$NS" get pods -l "gantry.dev/job-name=$job" -o 'jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort)
    stop=$(mktemp -u) out=$(mktemp)
    watch_pods "$stop" "$out" "$job" &
    local watcher=$!
    old=$(operator_pods | head -1)
    note "$(stamp) kubectl delete pod $old --grace-period=0 --force (job $(tj_get "$NS" "$job" '{.status.phase}'))"
    check "force-delete the operator pod $old" kc -n "$RELEASE_NS" delete pod "$old" --grace-period=0 --force
    if wait_until 120 bash -c "'$KUBECTL' -n '$RELEASE_NS' get pods -l app.kubernetes.io/instance=$RELEASE -o name | grep -v 'pod/$old\$' | grep -q ."; then
        new=$(operator_pods | grep -vx "$old" | head -1)
        ok "the Deployment starts a new operator pod ($new)"
    else
        bad "no new operator pod within 120s"
    fi
    check "the new operator pod is Ready" \
        kc -n "$RELEASE_NS" wait --for=condition=Ready "pod/${new:-none}" --timeout=120s
    check "tj/$job reaches Succeeded under the new operator" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    touch "$stop"
    wait "$watcher" 2>/dev/null
    check "no gang restart: status.restarts is 0" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 0
    uids_after=$(kc -n "$NS" get pods -l "gantry.dev/job-name=$job" -o 'jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort)
    check "the new operator adopted the same $E2E_REPLICAS pods (UIDs unchanged)" test "$uids_before" = "$uids_after"
    read -r max dups <"$out" || true
    note "pods of the job seen at once: at most ${max:-?}; ranks seen twice: ${dups:-none}"
    check "never more than $E2E_REPLICAS pods, never two for one rank" \
        test "${max:-99}" -le "$E2E_REPLICAS" -a -z "${dups:-}"
    check "the new operator's log shows it acting on $NS/$job" \
        bash -c "'$KUBECTL' -n '$RELEASE_NS' logs '${new:-none}' 2>&1 | grep -q '$job'"
    rm -f "$stop" "$out"
    kc -n "$RELEASE_NS" logs "${new:-none}" >"$ARTIFACTS/operator-after-kill.log" 2>&1 || true
}
