# shellcheck shell=bash
# Scenario 1: the SpamAssassin job (3 workers, shared checkpoint claim) trains to Succeeded; the
# eval report in rank 0's log shows >= E2E_MIN_ACCURACY; checkpoints (with valid SHA-256
# manifests) and the report are on the volume.

scenario_1() {
    local job=spam f=$ARTIFACTS/spam.yaml report acc ws vol step t
    spam_job "$job" >"$f"
    check "kubectl apply -f spam.yaml" kc -n "$NS" apply -f "$f" || return 0
    t=$SECONDS
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    check "one pod per rank ($E2E_REPLICAS), named $job-worker-<i>" \
        test "$(job_pods "$NS" "$job" | sort | tr '\n' ' ')" = "$(for ((i = 0; i < E2E_REPLICAS; i++)); do printf '%s-worker-%d ' "$job" "$i"; done)"
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    note "training took $((SECONDS - t))s from apply to Succeeded"
    check "status.restarts is 0" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 0
    check "kubectl get tj prints the phase column" bash -c "'$KUBECTL' -n '$NS' get tj '$job' | grep -q Succeeded"

    report=$(rank0_report "$NS" "$job")
    printf '%s\n' "$report" >"$ARTIFACTS/spam-report.json"
    check "kubectl logs $job-worker-0 ends with the eval report (JSON with accuracy)" test -n "$report"
    acc=$(json_field "$report" 'r["accuracy"]')
    ws=$(json_field "$report" 'r["train"]["world_size"]')
    note "eval: accuracy ${acc:-?}, macro-F1 $(json_field "$report" 'round(r["macro_f1"], 4)'), steps $(json_field "$report" 'r["train"]["steps"]'), $(json_field "$report" 'round(r["train"]["seconds"])')s training, world size ${ws:-?}"
    check "accuracy ${acc:-?} >= $E2E_MIN_ACCURACY" python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= $E2E_MIN_ACCURACY else 1)"
    check "the report says all $E2E_REPLICAS workers trained (train.world_size)" test "${ws:-}" = "$E2E_REPLICAS"

    step=$(tj_get "$NS" "$job" '{.status.lastCheckpoint.step}')
    check "status.lastCheckpoint.step (${step:-none}) > 0" test "${step:-0}" -gt 0 2>/dev/null
    vol=$(volume_exec "$NS" spam-ckpt /checkpoints \
        "cd /checkpoints/$job && ls -1d step-* && for d in step-*; do (cd \$d && sha256sum -c -s MANIFEST.sha256 && echo valid \$d); done; ls -1 *.json 2>/dev/null")
    printf '%s\n' "$vol" >"$ARTIFACTS/spam-volume.txt"
    note "on the volume: $(tr '\n' ' ' <<<"$vol")"
    check "checkpoints /checkpoints/$job/step-<N> are on the shared volume" grep -q '^step-[0-9]' <<<"$vol"
    check "every checkpoint's MANIFEST.sha256 verifies" grep -q '^valid step-' <<<"$vol"
    check "the eval report is on the volume (/checkpoints/$job/*.json)" grep -q '\.json$' <<<"$vol"
}
