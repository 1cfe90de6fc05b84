# shellcheck shell=bash
# Scenario 4: kubectl apply refuses invalid manifests with the field named (CRD schema and CEL);
# a job the worker rejects (missing data: exit 65, EX_DATAERR) ends Failed at once - no restart
# loop - with the worker's message visible to the user; with a podFailurePolicy rule that counts
# exit code 65 the same job retries once and ends BackoffLimitExceeded.

minimal_tj() { # NAME: a valid job the cases below break in one place each
    cat <<YAML
apiVersion: gantry.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  image: $E2E_IMAGE
  training:
    model: {hidden: 64, heads: 4}
    data: {train: /data/train.jsonl}
    learningRate: 1e-3
  runPolicy: {cleanPodPolicy: None}
YAML
}

refused() { # NAME FIELD SED-EXPR: kubectl apply fails, its message names FIELD, nothing created
    local name=$1 field=$2 expr=$3 f=$ARTIFACTS/invalid-$1.yaml out rc
    minimal_tj "$name" | sed "$expr" >"$f"
    out=$(kc -n "$NS" apply -f "$f" 2>&1)
    rc=$?
    printf '%s\n' "$out" >"$f.out"
    if [ $rc != 0 ] && grep -qF "$field" <<<"$out" && ! kc -n "$NS" get tj "$name" >/dev/null 2>&1; then
        ok "refused, naming $field: $(grep -o "$field.*" <<<"$out" | head -1 | cut -c1-110)"
    else
        bad "$name: kubectl apply exit $rc, want a refusal naming $field; got: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
    fi
}

scenario_4() {
    check "a valid minimal manifest passes server-side dry run" \
        bash -c "$(declare -f minimal_tj); E2E_IMAGE='$E2E_IMAGE' minimal_tj ok-min | '$KUBECTL' -n '$NS' apply --dry-run=server -f - >/dev/null"
    refused zero-replicas spec.replicas 's/replicas: 2/replicas: 0/'
    refused latest-image spec.image "s#image: .*#image: gantry-worker:latest#"
    refused hidden-heads spec.training.model.hidden 's/hidden: 64, heads: 4/hidden: 64, heads: 3/'
    refused negative-lr spec.training.learningRate 's/learningRate: 1e-3/learningRate: -1/'
    refused bad-clean-policy spec.runPolicy.cleanPodPolicy 's/cleanPodPolicy: None/cleanPodPolicy: Sometimes/'
    refused typo-field spec.training.epochz 's/learningRate: 1e-3/epochz: 3/'
    refused long-seq spec.training.model.maxSeqLen 's/hidden: 64, heads: 4/hidden: 64, heads: 4, maxSeqLen: 10000/'

    # The API cannot know whether a file exists in a volume: a job whose training data is missing
    # is valid for kubectl apply, and gantry-worker exits 65 (EX_DATAERR), a permanent error.
    local job=bad-config f=$ARTIFACTS/bad-config.yaml t msg logs ev
    spam_job "$job" >"$f"
    sed -i 's#train: /data/train.jsonl#train: /data/missing.jsonl#' "$f"
    check "kubectl apply -f bad-config.yaml (training data /data/missing.jsonl)" kc -n "$NS" apply -f "$f"
    t=$SECONDS
    if wait_tj_phase "$NS" "$job" Failed 180; then ok "tj/$job ends Failed ($((SECONDS - t))s after apply)"; else bad "tj/$job did not end Failed"; fi
    check "the Failed reason is PermanentError" \
        test "$(tj_get "$NS" "$job" '{.status.conditions[?(@.type=="Failed")].reason}')" = PermanentError
    check "no restart: status.restarts is 0" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 0
    sleep 10
    check "no pod is recreated after Failed (restarts still 0, no Pending/Running pod)" bash -c \
        "[ \"\$('$KUBECTL' -n '$NS' get tj $job -o jsonpath='{.status.restarts}')\" = 0 ] && ! '$KUBECTL' -n '$NS' get pods -l gantry.dev/job-name=$job -o jsonpath='{.items[*].status.phase}' | grep -qE 'Pending|Running'"
    msg=$(tj_get "$NS" "$job" '{.status.conditions[?(@.type=="Failed")].message}')
    note "status: $msg"
    check "the status names the exit code (65)" grep -q '65' <<<"$msg"
    logs=$(for p in $(job_pods "$NS" "$job"); do kc -n "$NS" logs "$p" -c worker 2>&1; done)
    note "worker log: $(grep -m1 missing.jsonl <<<"$logs" | cut -c1-160)"
    check "kubectl logs shows the worker's message naming /data/missing.jsonl" grep -q 'missing.jsonl' <<<"$logs"
    # Not `describe tj`: its spec names the file too. The job's status and the events only.
    ev=$(kc -n "$NS" get events -o 'jsonpath={range .items[*]}{.involvedObject.name}: {.message}{"\n"}{end}' 2>/dev/null | grep "^$job")
    printf '%s\n' "$ev" >"$ARTIFACTS/bad-config-events.txt"
    check "the worker's message (No such file: /data/missing.jsonl) is in the job's status or events" \
        grep -q 'missing.jsonl.*No such file' <<<"$msg
$ev"

    # spec.runPolicy.podFailurePolicy: a rule that counts exit code 65 (say, data still being
    # copied in) makes the same job retry instead: one counted restart, then backoffLimit 1 ends it.
    job=bad-config-retry f=$ARTIFACTS/bad-config-retry.yaml
    spam_job "$job" backoff=1 >"$f"
    sed -i -e 's#train: /data/train.jsonl#train: /data/missing.jsonl#' \
        -e 's#^    schedulingPolicy: {gang: None}#&\n    podFailurePolicy: {rules: [{action: Count, onExitCodes: {operator: In, values: [65]}}]}#' "$f"
    check "kubectl apply -f bad-config-retry.yaml (podFailurePolicy: Count exit code 65)" kc -n "$NS" apply -f "$f"
    t=$SECONDS
    if wait_tj_phase "$NS" "$job" Failed 240; then ok "tj/$job ends Failed ($((SECONDS - t))s after apply)"; else bad "tj/$job did not end Failed"; fi
    check "the Failed reason is BackoffLimitExceeded, not PermanentError" \
        test "$(tj_get "$NS" "$job" '{.status.conditions[?(@.type=="Failed")].reason}')" = BackoffLimitExceeded
    check "the rule gave one counted restart: status.restarts is 1" test "$(tj_get "$NS" "$job" '{.status.restarts}')" = 1
}
