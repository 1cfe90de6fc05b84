#!/usr/bin/env bash
# gantry-worker end to end on the tiny fixture: trains, writes the report, and exits with the
# documented codes for bad configs (78), bad usage (64) and bad data (65).
# With a third argument (gantry-run), also: 2 ranks with batch 3 train exactly like 1 rank with
# batch 6 (same examples per step, all-reduced mean gradient), so the final loss agrees; and 2
# ranks that found different newest steps of initFrom's job start from rank 0's.
# Usage: worker_cli_test.sh /path/to/gantry-worker /path/to/worker/testdata [/path/to/gantry-run]
set -euo pipefail
bin=$1 data=$2 run=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"
cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 40, "batchSize": 3, "learningRate": "3e-3", "logInterval": 20,
  "report": "$tmp/report.json"}}
JSON
check "trains and reports" 0 "$bin" --config "$tmp/cfg.json"
grep -q '"step":80,' "$tmp/out" || { echo "FAIL no JSON progress line for step 80"; fail=1; }
grep -q '^step 80/80 | epoch 40 | loss' "$tmp/err" || { echo "FAIL no human progress line"; fail=1; }
python3 - "$tmp/report.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert r["examples"] == 6 and r["labels"] == ["ham", "spam"], r
assert r["accuracy"] == 1.0, r["accuracy"]           # 6 examples, 40 epochs: memorised
assert r["train"]["steps"] == 80 and r["train"]["final_loss"] < 0.3, r["train"]
print("ok   report.json")
PY
check "metrics server and TensorBoard" 0 "$bin" --config "$tmp/cfg.json" --epochs 4 \
    --metrics-port 0 --tensorboard-dir "$tmp/tb"
ls "$tmp"/tb/events.out.tfevents.* >/dev/null 2>&1 || { echo "FAIL no TensorBoard event file"; fail=1; }
check "n-gram baseline" 0 "$bin" --config "$tmp/cfg.json" --model-type ngram --model-buckets 64
check "flag beats file: bad value" 78 "$bin" --config "$tmp/cfg.json" --batch-size 0
grep -q 'training.batchSize: 0 is out of range' "$tmp/err" || { echo "FAIL message"; fail=1; }
check "env beats file: bad value" 78 env GANTRY_MODEL_HEADS=5 "$bin" --config "$tmp/cfg.json"
check "bucket size out of range" 78 "$bin" --config "$tmp/cfg.json" --grad-bucket-mb 5000
grep -q 'training.gradBucketMB: 5000 is out of range; use 0..4096' "$tmp/err" ||
    { echo "FAIL bucket size message"; fail=1; }
check "unknown flag" 64 "$bin" --config "$tmp/cfg.json" --bogus 1
check "missing data file" 65 "$bin" --config "$tmp/cfg.json" --data-train "$tmp/none.jsonl"
# a report path that cannot be created fails the same way after a restart: permanent (73)
check "report in a missing directory" 73 "$bin" --config "$tmp/cfg.json" --report "$tmp/no/r.json"
check "help" 0 "$bin" --help
if [ -n "$run" ]; then
    common=(--config "$tmp/cfg.json" --epochs 6 --scale-learning-rate=false --threads 1)
    check "1 rank, batch 6" 0 "$bin" "${common[@]}" --batch-size 6 --report "$tmp/r1.json"
    check "2 ranks, batch 3" 0 "$run" --nproc 2 -- "$bin" "${common[@]}" --batch-size 3 \
        --report "$tmp/r2.json"
    python3 - "$tmp/r1.json" "$tmp/r2.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p))["train"] for p in sys.argv[1:])
assert a["steps"] == b["steps"] == 6 and b["world_size"] == 2, (a, b)
assert abs(a["final_loss"] - b["final_loss"]) < 1e-4, (a["final_loss"], b["final_loss"])
print("ok   data-parallel = big batch (final loss %.6f vs %.6f)" % (a["final_loss"], b["final_loss"]))
PY
    # all-reduce in 1 KiB buckets during backward = one all-reduce after it, bit for bit (2 ranks)
    fnv() { grep -o 'rank [01] final parameters fnv1a64 [0-9a-f]*' "$tmp/err" | sort -u; }
    check "2 ranks, buckets during backward" 0 "$run" --nproc 2 -- "$bin" "${common[@]}" \
        --batch-size 3 --grad-bucket-mb 0.001
    bucketed=$(fnv)
    check "2 ranks, reduce after backward" 0 "$run" --nproc 2 -- "$bin" "${common[@]}" \
        --batch-size 3 --grad-bucket-mb 0
    after=$(fnv)
    if [ "$(echo "$bucketed" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] &&
        [ "$(echo "$bucketed" | wc -l)" = 2 ] && [ "$bucketed" = "$after" ]; then
        echo "ok   bucketed all-reduce = after backward ($(echo "$after" | head -1 | awk '{print $NF}'))"
    else
        echo "FAIL bucketed all-reduce: [$bucketed] vs [$after]"; fail=1
    fi
    # evaluation during training, each rank on its share: eval lines after steps 2 and 4 (not
    # 6: the final evaluation), the report's history, the same parameters as without
    check "2 ranks, evalInterval 2" 0 "$run" --nproc 2 -- "$bin" "${common[@]}" \
        --batch-size 3 --grad-bucket-mb 0 --eval-interval 2 --report "$tmp/re.json"
    with_eval=$(fnv)
    [ "$with_eval" = "$after" ] || { echo "FAIL evaluations changed training: [$with_eval] vs [$after]"; fail=1; }
    python3 - "$tmp/out" "$tmp/err" "$tmp/re.json" <<'PY' || fail=1
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"eval_step"')]
assert [l["eval_step"] for l in lines] == [2, 4], lines
assert all(l["eval_examples"] == 6 and 0 <= l["eval_accuracy"] <= 1 for l in lines), lines
human = [l for l in open(sys.argv[2]) if l.startswith("eval step ")]
assert len(human) == 2 and "| 6 examples |" in human[0], human
assert sum(l.startswith("final eval step 6 |") for l in open(sys.argv[2])) == 1
r = json.load(open(sys.argv[3]))
assert [e["step"] for e in r["evals"]] == [2, 4, 6], r["evals"]
assert r["evals"][-1]["accuracy"] == r["accuracy"], (r["evals"], r["accuracy"])
print("ok   eval lines at steps 2, 4; history %s" % [round(e["accuracy"], 3) for e in r["evals"]])
PY
fi
# early stopping: accuracy on the 6 memorised examples stops improving; 3 evaluations later the
# run ends, with its report saying so and the progress total cut to the last step
# (checkpoints every 2 steps, keep 1: the newest, and the best evaluation's)
: >"$tmp/term" # the kubelet's termination message file: the final progress line goes there
check "early stopping" 0 env GANTRY_TERMINATION_LOG="$tmp/term" "$bin" --config "$tmp/cfg.json" --eval-interval 2 \
    --best-metric accuracy --early-stopping-patience 3 --report "$tmp/es.json" \
    --checkpoint-dir "$tmp/es/job" --checkpoint-interval-steps 2 --checkpoint-keep 1
python3 - "$tmp/es.json" "$tmp/err" "$tmp/es/job" "$tmp/term" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
t, e, b = r["train"], r["evals"], r["best_eval"]
assert t["early_stopped"] is True and t["steps"] < 80 and t["steps"] % 2 == 0, t
assert b["metric"] == "accuracy" and b["accuracy"] == max(x["accuracy"] for x in e), b
best = [x["step"] for x in e].index(b["step"])
assert len(e) - 1 - best == 3 and e[-1]["step"] == t["steps"], (best, [(x["step"], x["accuracy"]) for x in e])
log = open(sys.argv[2]).read()
assert "early stopping at step %d: accuracy has not improved by more than 0 in 3 evaluations" % t["steps"] in log, log[-600:]
import os
kept = sorted(d for d in os.listdir(sys.argv[3]) if d.startswith("step-"))
assert kept == sorted(["step-%d" % b["step"], "step-%d" % t["steps"]]), kept
assert b["checkpoint"] == "%s/step-%d" % (sys.argv[3], b["step"]), b
term = json.load(open(sys.argv[4]))  # what the operator reads: stopped early, total = the stop step
assert term["early_stopped"] is True and term["step"] == term["total_steps"] == t["steps"], term
assert term["eval_step"] == t["steps"] and abs(term["eval"]["accuracy"] - r["accuracy"]) < 1e-6, term
print("ok   early stopping at step %d of 80 (best accuracy %.3f at step %d); kept %s" % (t["steps"], b["accuracy"], b["step"], kept))
PY
# the same job started again (a gang restarted after the stop, before its pods exited): it
# resumes from the stop's checkpoint and ends there, with the same report, not later
check "early-stopped job started again" 0 "$bin" --config "$tmp/cfg.json" --eval-interval 2 \
    --best-metric accuracy --early-stopping-patience 3 --report "$tmp/es2.json" \
    --checkpoint-dir "$tmp/es/job" --checkpoint-interval-steps 2 --checkpoint-keep 1
grep -q 'ended an early-stopped run: no more training' "$tmp/err" || { echo "FAIL no early-stopped resume line"; fail=1; }
python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b['train']['early_stopped'] is True and b['train']['steps'] == a['train']['steps'], b['train']
assert b['evals'] == a['evals'] and b['best_eval'] == a['best_eval'] and b['accuracy'] == a['accuracy']
print('ok   started again: ends at step %d with the same evaluations' % b['train']['steps'])" \
    "$tmp/es.json" "$tmp/es2.json" || fail=1
check "earlyStoppingPatience without evalInterval" 78 "$bin" --config "$tmp/cfg.json" \
    --early-stopping-patience 3
grep -q 'training.earlyStoppingPatience: 3, but evalInterval is 0' "$tmp/err" ||
    { echo "FAIL earlyStoppingPatience message"; fail=1; }
# data.evalFraction instead of data.eval: a stratified share of the training file held out
check "evalFraction holds out part of data.train" 0 "$bin" --config "$tmp/cfg.json" --data-eval "" \
    --data-eval-fraction 0.34 --eval-interval 20 --epochs 20 --report "$tmp/ef.json"
grep -q 'data.evalFraction 0.34: 2 of the 6 training examples held out for evaluation' "$tmp/err" ||
    { echo "FAIL evalFraction log line"; fail=1; }
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['examples'] == 2 and r['train']['examples'] == 4 and [(e['step'], e['examples']) for e in r['evals']] == [(20, 2), (40, 2)], r" \
    "$tmp/ef.json" && echo "ok   evalFraction: 4 train, 2 eval, evaluations on the 2" || { echo "FAIL evalFraction report"; fail=1; }
check "evalInterval without data.eval" 78 "$bin" --config "$tmp/cfg.json" --data-eval "" \
    --eval-interval 10
grep -q 'training.evalInterval: 10, but data.eval is not set' "$tmp/err" ||
    { echo "FAIL evalInterval message"; fail=1; }
# classWeights, your own weights per label: the same weights as classWeight: balanced computed
# train bit for bit alike (so they reach the loss under the right labels); all 1 is no weights;
# a label not in data.train is refused, naming the labels there
fnv0() { grep -o 'rank 0 final parameters fnv1a64 [0-9a-f]*' "$tmp/err"; }
{ cat "$data/tiny.jsonl"; grep '"ham"' "$data/tiny.jsonl" | head -2; } >"$tmp/unbalanced.jsonl" # 5 ham, 3 spam
cw=(--config "$tmp/cfg.json" --data-train "$tmp/unbalanced.jsonl" --epochs 2 --eval-interval 0
    --data-eval "" --threads 1)
check "classWeight balanced" 0 "$bin" "${cw[@]}" --class-weight balanced --report "$tmp/cb.json"
balanced=$(fnv0)
given=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['train']['class_weight']))" "$tmp/cb.json")
check "classWeights = the balanced ones (env, JSON form)" 0 env GANTRY_CLASS_WEIGHTS="$given" "$bin" "${cw[@]}" \
    --report "$tmp/cg.json"
says "classWeights logged" "class weights (classWeights): ham"
[ -n "$balanced" ] && [ "$(fnv0)" = "$balanced" ] && echo "ok   classWeights $given trains as balanced" ||
    { echo "FAIL classWeights $given: $(fnv0) vs balanced $balanced"; fail=1; }
swapped=$(python3 -c "import json,sys; w=json.loads(sys.argv[1]); print('ham=%r,spam=%r' % (w['spam'], w['ham']))" "$given")
check "classWeights swapped" 0 "$bin" "${cw[@]}" --class-weights "$swapped"
[ "$(fnv0)" != "$balanced" ] && echo "ok   swapped weights $swapped train differently" ||
    { echo "FAIL swapped weights train as balanced"; fail=1; }
check "no class weights" 0 "$bin" "${cw[@]}"
plain=$(fnv0)
check "classWeights all 1 (flag form)" 0 "$bin" "${cw[@]}" --class-weights ham=1,spam=1
[ "$(fnv0)" = "$plain" ] && echo "ok   weights of 1 train as none" || { echo "FAIL weights of 1 differ"; fail=1; }
check "classWeights spam=3" 0 "$bin" "${cw[@]}" --class-weights spam=3 --report "$tmp/c3.json"
[ "$(fnv0)" != "$plain" ] && python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['train']['class_weight'] == {'ham': 1.0, 'spam': 3.0}" "$tmp/c3.json" &&
    echo "ok   spam=3 changes training; report {ham: 1, spam: 3}" || { echo "FAIL spam=3"; fail=1; }
check "classWeights names an unknown label" 78 "$bin" "${cw[@]}" --class-weights spma=3
says "unknown label message" 'training.classWeights: label "spma" is not in data.train; its labels: ham, spam'
check "classWeights with classWeight balanced" 78 "$bin" "${cw[@]}" --class-weights spam=3 --class-weight balanced
says "both message" "training.classWeights: set, and classWeight is balanced too"
# initFrom: a job starts from another's checkpoint (fine-tuning): its model settings, vocab and
# weights; the same labels keep its classifier (the initial parameters are the checkpoint's, bit
# for bit), other labels get a new one; the job's own checkpoint, once it has one, wins
check "initFrom: the source job" 0 "$bin" "${cw[@]}" --data-train "$data/tiny.jsonl" \
    --data-eval "$data/tiny.jsonl" --checkpoint-dir "$tmp/src/job" --report "$tmp/src.json"
src=$(grep -o 'rank 0 final parameters fnv1a64 [0-9a-f]*' "$tmp/err" | awk '{print $NF}')
check "initFrom a job directory" 0 "$bin" "${cw[@]}" --data-train "$data/tiny.jsonl" \
    --model-hidden 32 --init-from "$tmp/src/job" --checkpoint-dir "$tmp/ft/job" --report "$tmp/ft.json"
says "model settings from the checkpoint" "initFrom $tmp/src/job/step-4 (step 4): a transformer model, 1 layers, hidden 16"
says "classifier kept" "initialized from $tmp/src/job/step-4: every tensor, the classifier too"
[ -n "$src" ] && grep -q "initial parameters fnv1a64 $src" "$tmp/err" &&
    echo "ok   initial parameters = the source's final ones ($src)" || { echo "FAIL initial parameters differ from $src"; fail=1; }
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); i=r['train']['init_from']; assert i['step']==4 and i['classifier']=='loaded' and r['config']['model']['hidden']==16 and r['train']['vocab']==json.load(open(sys.argv[2]))['train']['vocab'], r['train']" \
    "$tmp/ft.json" "$tmp/src.json" && echo "ok   report: init_from, the source's model and vocab" || { echo "FAIL init_from report"; fail=1; }
check "initFrom ignored once the job has its own checkpoint" 0 "$bin" "${cw[@]}" --data-train "$data/tiny.jsonl" \
    --init-from "$tmp/src/job" --checkpoint-dir "$tmp/ft/job" --epochs 3
says "own checkpoint wins" "training.initFrom ignored: the job resumed from its own checkpoint"
sed 's/"ham"/"good"/; s/"spam"/"bad"/' "$data/tiny.jsonl" >"$tmp/relabelled.jsonl"
check "initFrom with other labels" 0 "$bin" "${cw[@]}" --data-train "$tmp/relabelled.jsonl" \
    --init-from "$tmp/src/job/step-4"
says "new classifier" "every tensor but the classifier, new for this data's labels (bad, good; the checkpoint's: ham, spam)"
grep -q "initial parameters fnv1a64 $src" "$tmp/err" && { echo "FAIL a new classifier, yet the source's parameters"; fail=1; }
check "initFrom a missing directory" 66 "$bin" "${cw[@]}" --init-from "$tmp/none"
says "missing named" "training.initFrom: $tmp/none: no such directory"
check "initFrom with data.vocab" 78 "$bin" "${cw[@]}" --init-from "$tmp/src/job" --data-vocab "$tmp/v.txt"
says "vocab conflict named" "training.data.vocab: set, and initFrom brings its model's own vocab"
# a checkpoint edited by hand (its manifest regenerated): a negative AdamW step count is refused
mkdir -p "$tmp/tamper" && cp -r "$tmp/src/job" "$tmp/tamper/job"
(cd "$tmp/tamper/job/step-4" && python3 -c "import json; s=json.load(open('state.json')); s['extra']['adamw_t']=-3; json.dump(s, open('state.json', 'w'))" &&
    sha256sum $(awk '{print $2}' MANIFEST.sha256) >MANIFEST.sha256.new && mv MANIFEST.sha256.new MANIFEST.sha256)
check "resume: adamw_t below 0" 78 "$bin" "${cw[@]}" --data-train "$data/tiny.jsonl" \
    --checkpoint-dir "$tmp/tamper/job"
says "adamw_t named" "its state.json extra.adamw_t (AdamW's step count) is missing or not a count from 0"
# initFrom a job directory that is still being written: each rank resolves it on its own before
# the ranks meet. Rank 1 (a mount namespace of its own: a pod that looked earlier) resolves it
# while step-8 is not there yet (an empty directory), then step-8 appears and rank 0 takes it:
# rank 1 must take rank 0's step too, so both start from the same weights and end alike.
if [ -n "$run" ] && unshare -m true 2>/dev/null && command -v nsenter >/dev/null; then
    cp -r "$tmp/src/job" "$tmp/src/old" # step-4 only
    check "initFrom: the source goes on to step 8" 0 "$bin" "${cw[@]}" --data-train "$data/tiny.jsonl" \
        --data-eval "$data/tiny.jsonl" --checkpoint-dir "$tmp/src/job" --epochs 4
    cp -r "$tmp/src/job/step-8" "$tmp/step8"
    mkdir "$tmp/src/old/step-8"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    two=(--config "$tmp/cfg.json" --data-train "$data/tiny.jsonl" --epochs 2 --eval-interval 0
         --init-from "$tmp/src/job" --checkpoint-dir "$tmp/ft2/job" --threads 1)
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 GANTRY_RDZV_TOKEN=t0k
    RANK=1 unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
        "$tmp/src/old" "$tmp/src/job" "$bin" "${two[@]}" >/dev/null 2>"$tmp/i1.err" & p1=$!
    sleep 2 # rank 1 has resolved initFrom and waits for rank 0
    nsenter -t "$p1" -m mount --bind "$tmp/step8" "$tmp/src/job/step-8"
    RANK=0 "$bin" "${two[@]}" >/dev/null 2>"$tmp/i0.err" & p0=$!
    r0=0 r1=0; wait $p0 || r0=$?; wait $p1 || r1=$?
    unset MASTER_ADDR MASTER_PORT WORLD_SIZE GANTRY_RDZV_TOKEN
    h0=$(grep -o 'final parameters fnv1a64 [0-9a-f]*' "$tmp/i0.err" | awk '{print $NF}' || true)
    h1=$(grep -o 'final parameters fnv1a64 [0-9a-f]*' "$tmp/i1.err" | awk '{print $NF}' || true)
    if [ "$r0$r1" = 00 ] && grep -q "initFrom: rank 0 took $tmp/src/job/step-8, this rank had found $tmp/src/job/step-4" "$tmp/i1.err" &&
        [ -n "$h0" ] && [ "$h0" = "$h1" ]; then
        echo "ok   initFrom found at step 4 by rank 1, step 8 by rank 0: both start from step 8 ($h0)"
    else
        echo "FAIL initFrom across ranks: exits $r0 $r1, hashes $h0 / $h1"; tail -n 3 "$tmp"/i?.err; fail=1
    fi
fi

# GANTRY_STANDBY=1 (the operator's standby pod): trains nothing, needs no config, holds on until
# SIGTERM, then exits 0
GANTRY_STANDBY=1 RANK=2 "$bin" >/dev/null 2>"$tmp/sb.err" & sb=$!
sleep 0.5
if kill -0 "$sb" 2>/dev/null; then
    kill -TERM "$sb"
    rc=0; wait "$sb" || rc=$?
    if [ "$rc" = 0 ] && grep -q "standby (GANTRY_STANDBY=1): holding this pod's place for worker 2" "$tmp/sb.err" &&
        grep -q "standby ends (SIGTERM)" "$tmp/sb.err"; then
        echo "ok   GANTRY_STANDBY=1: waits without a config, exits 0 on SIGTERM"
    else
        echo "FAIL GANTRY_STANDBY=1: exit $rc"; cat "$tmp/sb.err"; fail=1
    fi
else
    echo "FAIL GANTRY_STANDBY=1 exited before SIGTERM"; cat "$tmp/sb.err"; fail=1
fi
exit $fail
