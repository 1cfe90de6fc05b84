# shellcheck shell=bash
# Scenario 1: the SpamAssassin job (3 workers, shared checkpoint claim, evaluations every 100
# steps) trains to Succeeded; the eval report in rank 0's log shows >= E2E_MIN_ACCURACY and the
# evaluations during training (every rank's share summed: all 1,209 examples); checkpoints (with
# valid SHA-256 manifests) and the report are on the volume; a batch/v1 Job with gantry-predict,
# given only the checkpoint, reproduces the worker's final evaluation exactly, and a Deployment
# with gantry-predict --serve answers POSTs through its Service with the same predictions; a job
# with training.initFrom starts from the checkpoint (fine-tuning) near its accuracy.

scenario_1() {
    local job=spam f=$ARTIFACTS/spam.yaml report acc ws vol step t evals ea
    spam_job "$job" evalInterval=100 >"$f"
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
    evals=$(json_field "$report" '" ".join("%d:%d:%.4f" % (e["step"], e["examples"], e["accuracy"]) for e in r["evals"])')
    note "evaluations during training (step:examples:accuracy): ${evals:-none}"
    check "the report's evals: steps 100, 200, ..., then the final one, each on all 1209 examples" \
        python3 -c "import json,sys; r=json.loads(sys.argv[1]); e=r['evals']; s=[x['step'] for x in e]; sys.exit(0 if len(e) >= 3 and s[:-1] == list(range(100, 100 * len(e), 100)) and s[-1] == r['train']['steps'] and all(x['examples'] == 1209 for x in e) and e[-1]['accuracy'] == r['accuracy'] else 1)" "$report"
    ea=$(tj_get "$NS" "$job" '{.status.progress.evalAccuracy}')
    check "status.progress.evalAccuracy (${ea:-none}; kubectl get tj's ACCURACY) is the final evaluation's" \
        python3 -c "import sys; sys.exit(0 if abs(float('${ea:-nan}') - float('${acc:-0}')) < 1e-6 else 1)"
    check "rank 0's log has the line of the evaluation at step 100" \
        bash -c "'$KUBECTL' -n '$NS' logs '$job-worker-0' -c worker | grep -q '^eval step 100 | loss [0-9.]* | accuracy [0-9.]*% | macro-F1 [0-9.]* | 1209 examples'"

    step=$(tj_get "$NS" "$job" '{.status.lastCheckpoint.step}')
    check "status.lastCheckpoint.step (${step:-none}) > 0" test "${step:-0}" -gt 0 2>/dev/null
    vol=$(volume_exec "$NS" spam-ckpt /checkpoints \
        "cd /checkpoints/$job && ls -1d step-* && for d in step-*; do (cd \$d && sha256sum -c -s MANIFEST.sha256 && echo valid \$d); done; ls -1 *.json 2>/dev/null")
    printf '%s\n' "$vol" >"$ARTIFACTS/spam-volume.txt"
    note "on the volume: $(tr '\n' ' ' <<<"$vol")"
    check "checkpoints /checkpoints/$job/step-<N> are on the shared volume" grep -q '^step-[0-9]' <<<"$vol"
    check "every checkpoint's MANIFEST.sha256 verifies" grep -q '^valid step-' <<<"$vol"
    check "the eval report is on the volume (/checkpoints/$job/*.json)" grep -q '\.json$' <<<"$vol"

    # Batch prediction with the trained model: a Job runs gantry-predict on the checkpoint alone.
    local plog prep plines prc=0
    plog=$(predict_job "$NS" "$job" 2>&1) || prc=$?
    printf '%s\n' "$plog" >"$ARTIFACTS/spam-predict.log"
    check "a batch/v1 Job runs gantry-predict on the checkpoint (Complete)" test "$prc" = 0
    note "$(grep -m1 'documents in' <<<"$plog")"
    prep=$(volume_exec "$NS" spam-ckpt /checkpoints "cat /checkpoints/$job/predict-report.json; echo; wc -l < /checkpoints/$job/predictions.jsonl")
    plines=$(volume_exec "$NS" spam-ckpt /checkpoints "head -n 5 /checkpoints/$job/predictions.jsonl")
    printf '%s\n' "$prep" >"$ARTIFACTS/spam-predict-report.txt"
    check "it used the final checkpoint (step ${step:-?})" grep -q "(step ${step:-x})" <<<"$plog"
    check "1209 predictions, one per eval document, written to the volume" test "$(tail -n1 <<<"$prep" | tr -d ' ')" = 1209
    local srv src=0
    srv=$(serve_job "$NS" "$job" 5 2>&1) || src=$?
    printf '%s\n' "$srv" >"$ARTIFACTS/spam-serve.log"
    check "a Deployment runs gantry-predict --serve on the checkpoint (Available)" test "$src" = 0
    check "POST /v1/models/$job:predict through its Service answers as the batch Job predicted" \
        python3 -c "import json,sys; r=json.loads(sys.argv[1].strip().splitlines()[-1]); want=[json.loads(l) for l in sys.argv[2].splitlines()[:5]]; got=r['predictions']; sys.exit(0 if r['model'] == '$job' and [(p['label'], p['score']) for p in got] == [(w['label'], w['score']) for w in want] else 1)" "$srv" "$plines"
    check "its evaluation equals the worker's final one (confusion matrix, accuracy, loss)" \
        python3 -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2].rsplit(chr(10), 1)[0]); sys.exit(0 if b['confusion_matrix'] == a['confusion_matrix'] and b['accuracy'] == a['accuracy'] and abs(b['loss'] - a['loss']) < 1e-5 and b['examples'] == 1209 else 1)" "$report" "$prep"

    # Fine-tuning: a one-worker job starts from this job's checkpoints (initFrom, on the same
    # claim) and after 5 steps (warmup: tiny learning rates) evaluates near the trained model's
    # accuracy; from scratch 5 steps give about the majority class (69 % ham).
    local ft=spam-ft fr facc
    spam_job "$ft" replicas=1 maxSteps=5 evalInterval=5 "initFrom=/checkpoints/$job" >"$ARTIFACTS/$ft.yaml"
    check "kubectl apply -f $ft.yaml (training.initFrom: /checkpoints/$job)" kc -n "$NS" apply -f "$ARTIFACTS/$ft.yaml" || return 0
    check "tj/$ft reaches Succeeded" wait_tj_phase "$NS" "$ft" Succeeded "$E2E_TRAIN_TIMEOUT"
    fr=$(rank0_report "$NS" "$ft")
    printf '%s\n' "$fr" >"$ARTIFACTS/$ft-report.json"
    facc=$(json_field "$fr" 'r["accuracy"]')
    note "fine-tuned from step ${step:-?}: $(json_field "$fr" 'r["train"]["init_from"]'), accuracy ${facc:-?} after $(json_field "$fr" 'r["train"]["steps"]') steps"
    check "it started from $job's final checkpoint (step ${step:-?}) with its classifier" \
        python3 -c "import json,sys; i=json.loads(sys.argv[1])['train']['init_from']; sys.exit(0 if i['step'] == int('${step:-0}') and i['classifier'] == 'loaded' and i['dir'] == '/checkpoints/$job/step-${step:-x}' else 1)" "$fr"
    check "accuracy after 5 steps (${facc:-?}) is within 0.03 of the trained model's (${acc:-?})" \
        python3 -c "import sys; sys.exit(0 if float('${facc:-0}') >= float('${acc:-1}') - 0.03 else 1)"
}
