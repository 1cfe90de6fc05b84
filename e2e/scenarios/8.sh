# shellcheck shell=bash
# Scenario 8: evaluation during training and early stopping through the operator. A 3-worker job
# evaluates every 20 steps with earlyStoppingPatience 1 and a threshold no loss can beat (1.0):
# the evaluation at step 20 stays the best, the one at step 40 does not improve on it, so every
# rank stops after step 40. The job Succeeds with a condition naming the step,
# status.progress says earlyStopped with 40 steps of 40 and the last evaluation's accuracy
# (ACCURACY), the report says early_stopped with best_eval at step 20, and the checkpoint of
# step 20 (the best) is kept on the volume beside the newest (checkpoint.keep 1).

scenario_8() {
    local job=spam-early f=$ARTIFACTS/spam-early.yaml report msg prog vol
    spam_job "$job" evalInterval=20 patience=1 threshold=1 interval=20 keep=1 >"$f"
    check "kubectl apply -f spam-early.yaml (evalInterval 20, earlyStoppingPatience 1)" \
        kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT" || return 0
    msg=$(tj_get "$NS" "$job" '{.status.conditions[?(@.type=="Succeeded")].message}')
    note "Succeeded: $msg"
    check "the Succeeded condition says early stopping at step 40" grep -q 'early stopping at step 40)' <<<"$msg"
    prog=$(kc -n "$NS" get tj "$job" -o jsonpath='{.status.progress}')
    note "status.progress: $prog"
    check "status.progress: earlyStopped, 40/40, evalStep 40, an evalAccuracy" python3 -c "
import json, sys
p = json.loads(sys.argv[1])
sys.exit(0 if p.get('earlyStopped') is True and p['step'] == p['totalSteps'] == 40 and
         p.get('evalStep') == 40 and 0 < p.get('evalAccuracy', 0) <= 1 else 1)" "$prog"
    report=$(rank0_report "$NS" "$job")
    printf '%s\n' "$report" >"$ARTIFACTS/spam-early-report.json"
    check "the report: train.early_stopped, 40 steps, evaluations at 20 and 40, best_eval at step 20 with its checkpoint" python3 -c "
import json, sys
r = json.loads(sys.argv[1])
ok = (r['train']['early_stopped'] is True and r['train']['steps'] == 40 and
      [e['step'] for e in r['evals']] == [20, 40] and r['best_eval']['step'] == 20 and
      r['best_eval']['metric'] == 'loss' and r['best_eval']['checkpoint'].endswith('/step-20'))
sys.exit(0 if ok else 1)" "$report"
    check "every rank stopped after step 40 (its final parameters line)" bash -c "
        for i in \$(seq 0 $((E2E_REPLICAS - 1))); do
            '$KUBECTL' -n '$NS' logs '$job-worker-'\$i -c worker | grep -q 'final parameters fnv1a64 [0-9a-f]* (step 40)' || exit 1
        done"
    vol=$(volume_exec "$NS" spam-ckpt /checkpoints "cd /checkpoints/$job && ls -1d step-*")
    note "on the volume: $(tr '\n' ' ' <<<"$vol")"
    check "the volume keeps step-20 (the best) and step-40 (the newest), nothing else" \
        test "$(tr '\n' ' ' <<<"$vol")" = "step-20 step-40 "
}
