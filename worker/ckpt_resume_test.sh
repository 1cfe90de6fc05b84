#!/usr/bin/env bash
# gantry-worker checkpoints with real processes on loopback, on the tiny fixture:
#   kill9     2 ranks checkpoint every 100 steps; rank 1 is killed (-9) mid-run: rank 0 exits
#             non-zero within the peer timeout; rerunning the job resumes from a step S > 0 and
#             ends with parameters bit-identical (fnv1a64 of the buffer) to an uninterrupted run,
#             the same on both ranks; step-<N> dirs verify with sha256sum; report.json is there,
#             with every evaluation (every 500 steps) of both runs, the one before the kill too
#   world     the killed job's checkpoints resumed at world size 1 complete, the W=2 evaluation
#             kept in the report's history; 1 -> 2 ranks: the W=1 checkpoints (numbered higher)
#             are retired, and so marked in the history; a restart resumes the W=2 progress
#   batch     resumed with another batch size: steps count anew from the sampler's position
#             (epoch 50 of batch 3 is step 100, of batch 6 step 50), not from the old number
#   sigterm   SIGTERM mid-training: exit 143 (retryable) within 3 s; rank 0 first saves the step
#             it stopped at (checkpoint.saveOnStop), which the next run resumes from; none
#             after exit; with saveOnStop false the interval's is the newest; with the peer
#             stopped (rank 0 blocked in the all-reduce) out within the 2 s grace
# Usage: ckpt_resume_test.sh /path/to/gantry-worker /path/to/worker/testdata
#        [kill9|world|batch|sigterm]
set -euo pipefail
bin=$1 data=$2 only=${3:-all}
tmp=$(mktemp -d)
. "$(dirname "$0")/ranks_testlib.sh"

cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 3000, "batchSize": 3, "learningRate": "3e-3", "logInterval": 500, "threads": 1,
  "evalInterval": 500,
  "scaleLearningRate": false},
 "checkpoint": {"path": "$tmp", "dir": "$tmp/unused", "intervalSteps": 100, "keep": 3}}
JSON
export OMP_WAIT_POLICY=passive GANTRY_PEER_TIMEOUT=5 GANTRY_RDZV_TIMEOUT=30

# wait_ckpt DIR MIN: until a step-N with N >= MIN exists (or 60 s)
wait_ckpt() {
    local t=$((SECONDS + 60)) d n
    while ((SECONDS < t)); do
        for d in "$1"/step-*; do
            n=${d##*step-}
            [[ $n =~ ^[0-9]+$ ]] && ((n >= $2)) && return 0
        done
        sleep 0.01
    done
    return 1
}

run_kill9() {
    local rc0 rc1 t0 dt h_ref h0 h1 s rc
    # the reference: uninterrupted
    start_ranks "$tmp/ref" 2 ref
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    [ "$rc0$rc1" = 00 ] || { bad "uninterrupted run: exits $rc0 $rc1"; tail -n 3 "$tmp"/ref.*.err; return; }
    h_ref=$(hash_of "$tmp/ref.0.err")
    [ -n "$h_ref" ] && [ "$h_ref" = "$(hash_of "$tmp/ref.1.err")" ] &&
        ok "uninterrupted: parameters identical on both ranks ($h_ref)" ||
        bad "uninterrupted: rank hashes differ or missing: $h_ref / $(hash_of "$tmp/ref.1.err")"
    # interrupted: kill -9 rank 1 once step-600 exists (after the evaluation at step 500)
    start_ranks "$tmp/job" 2 a
    wait_ckpt "$tmp/job" 600 || bad "no checkpoint step >= 600 appeared"
    kill -9 "${rank_pid[1]}"
    t0=$(ms)
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    dt=$(($(ms) - t0))
    wait "${rank_pid[1]}" 2>/dev/null || true
    if [ "$rc0" != 0 ] && { [ "$rc0" -lt 64 ] || [ "$rc0" -gt 78 ]; } && ((dt < 5000)); then
        ok "rank 1 killed: rank 0 exits $rc0 (retryable) after ${dt} ms (peer timeout 5 s)"
    else
        bad "rank 1 killed: rank 0 exit $rc0 after ${dt} ms"; tail -3 "$tmp/a.0.err"
    fi
    grep -q 'final parameters' "$tmp/a.0.err" && bad "the killed run finished training (kill came too late)"
    cp -a "$tmp/job" "$tmp/job-w1" # for run_world
    # rerun: resumes and ends bit-identical
    start_ranks "$tmp/job" 2 b
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    [ "$rc0$rc1" = 00 ] || { bad "rerun: exits $rc0 $rc1"; tail -n 3 "$tmp"/b.*.err; }
    for r in 0 1; do
        s=$(grep -oE 'resumed from step [0-9]+' "$tmp/b.$r.err" | awk '{print $4}')
        [ "${s:-0}" -gt 0 ] && ok "rerun rank $r: resumed from step $s" ||
            bad "rerun rank $r: no resume line"
    done
    h0=$(hash_of "$tmp/b.0.err") h1=$(hash_of "$tmp/b.1.err")
    [ "$h0" = "$h_ref" ] && [ "$h1" = "$h_ref" ] &&
        ok "resumed run ends bit-identical to the uninterrupted one on both ranks ($h0)" ||
        bad "resumed hashes $h0 $h1, uninterrupted $h_ref"
    cmp -s "$tmp/ref/step-3000/model.safetensors" "$tmp/job/step-3000/model.safetensors" &&
        ok "final checkpoints' model.safetensors are identical" ||
        bad "final model.safetensors differ (or are missing)"
    rc=0
    (cd "$tmp/job" && for d in step-*; do (cd "$d" && sha256sum -c --quiet MANIFEST.sha256) || exit 1; done) || rc=1
    # the newest 3 (checkpoint.keep) and the best evaluation's during training (by loss: the one
    # the last checkpoint knew; the final evaluation comes after it), when not among them
    kept=$(cd "$tmp/job" && ls -1d step-* | sort -t- -k2 -n | tr '\n' ' ')
    want=$(python3 -c "
import json, sys
e = json.load(open(sys.argv[1]))['evals'][:-1]
b = min(e, key=lambda x: x['loss'])['step']
print(' '.join('step-%d' % s for s in sorted({2800, 2900, 3000, b})) + ' ')" "$tmp/job/report.json")
    [ $rc = 0 ] && [ "$kept" = "$want" ] && ok "checkpoints kept: $kept(the newest 3 and the best evaluation's), manifests verify" ||
        bad "checkpoints: kept $kept, want $want; manifests rc $rc"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['train']['world_size']==2 and r['accuracy']>=0.99, r" \
        "$tmp/job/report.json" && ok "report.json on the volume" || bad "report.json"
    python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['evals']; assert [x['step'] for x in e]==list(range(500,3001,500)) and all(x['examples']==6 for x in e), e" \
        "$tmp/job/report.json" && ok "report.json's evals: steps 500..3000, the one before the kill kept" ||
        bad "report.json evals: $(python3 -c "import json,sys; print([x['step'] for x in json.load(open(sys.argv[1])).get('evals',[])])" "$tmp/job/report.json")"
}

run_world() {
    local rc0 s
    [ -d "$tmp/job-w1" ] || { bad "world: run kill9 first"; return; }
    start_ranks "$tmp/job-w1" 1 w
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    s=$(grep -oE 'resumed from step [0-9]+' "$tmp/w.0.err" | awk '{print $4}')
    if [ "$rc0" = 0 ] && [ "${s:-0}" -gt 0 ] && [ -d "$tmp/job-w1/step-6000" ]; then
        ok "2 -> 1 ranks: resumed from step $s, completed ($(grep -oE 'continuing at this world.s step [0-9]+' "$tmp/w.0.err"))"
    else
        bad "2 -> 1 ranks: exit $rc0, resumed from ${s:-none}"; tail -5 "$tmp/w.0.err"
    fi
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['train']['world_size']==1 and r['train']['steps']==6000, r['train']" \
        "$tmp/job-w1/report.json" && ok "2 -> 1 ranks: report (6000 steps at world size 1)" || bad "world 1 report"
    # the evaluations at world size 2 stay in the history: the one at 500 (before the kill),
    # then this run's every 500 of its own steps; the best's checkpoint is the one written then
    python3 - "$tmp/job-w1/report.json" "$tmp/w.0.err" <<'PY' && ok "2 -> 1 ranks: the history keeps the W=2 evaluation" || bad "2 -> 1 ranks: evals"
import json, os, re, sys
r = json.load(open(sys.argv[1]))
s = int(re.search(r"continuing at this world's step (\d+)", open(sys.argv[2]).read()).group(1))
e = [(x["step"], x["world_size"], x.get("checkpoint_retired", False)) for x in r["evals"]]
want = [(500, 2, False)] + [(k, 1, False) for k in range(500, 6001, 500) if k > s]
assert e == want, (e, want)
b = r["best_eval"]
assert "checkpoint" not in b or json.load(open(os.path.join(b["checkpoint"], "state.json")))["world_size"] == b["world_size"], b
print("     evals", e, "best", b["step"], b["world_size"], b.get("checkpoint"))
PY
}

# wait_log FILE ERE: until a line matches (or 60 s)
wait_log() {
    local t=$((SECONDS + 60))
    while ((SECONDS < t)); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    return 1
}

# 1 -> 2 ranks: steps count differently (W=1 takes 2 per epoch here, W=2 one), so the W=1
# checkpoints are numbered above the resumed run's; once its first is written they are retired,
# and a later restart resumes from the W=2 run's own progress.
run_scaleup() {
    local s
    start_ranks "$tmp/up" 1 x
    wait_ckpt "$tmp/up" 1000 || bad "scale-up: no W=1 checkpoint >= 1000"
    kill -9 "${rank_pid[0]}"; wait "${rank_pid[0]}" 2>/dev/null || true
    start_ranks "$tmp/up" 2 y
    wait_log "$tmp/y.0.err" 'checkpoint step-(8|9|1[0-4])00 written' ||
        bad "scale-up: the W=2 run wrote no step-800..1400"
    kill -9 "${rank_pid[0]}" "${rank_pid[1]}"
    wait "${rank_pid[0]}" 2>/dev/null || true; wait "${rank_pid[1]}" 2>/dev/null || true
    grep -q 'saved at world size 1, now 2' "$tmp/y.0.err" && grep -q '^gantry-worker: retired ' "$tmp/y.0.err" &&
        ok "1 -> 2 ranks: resumed the W=1 checkpoint, retired its higher-numbered ones" ||
        bad "1 -> 2 ranks: no remap or no retire line"
    start_ranks "$tmp/up" 2 z
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    s=$(grep -oE 'resumed from step [0-9]+' "$tmp/z.0.err" | awk '{print $4}')
    if [ "$rc0$rc1" = 00 ] && [ "${s:-0}" -ge 800 ] && ! grep -q 'saved at world size' "$tmp/z.0.err"; then
        ok "restart after 1 -> 2: resumed from the W=2 run's step $s, completed"
    else
        bad "restart after 1 -> 2: exits $rc0 $rc1, resumed from ${s:-none}"; grep -E 'resum|saved at' "$tmp"/z.0.err
    fi
    # the W=1 evaluations stay in the history; those numbered after the W=2 run's start lost
    # their checkpoints (retired), so none of them is the best's checkpoint
    python3 - "$tmp/up/report.json" "$tmp/y.0.err" <<'PY' && ok "1 -> 2 ranks: the history keeps the W=1 evaluations, retired ones marked" || bad "1 -> 2 ranks: evals"
import json, os, re, sys
r = json.load(open(sys.argv[1]))
start = int(re.search(r"continuing at this world's step (\d+)", open(sys.argv[2]).read()).group(1))
e = [(x["step"], x["world_size"], x.get("checkpoint_retired", False)) for x in r["evals"]]
w1 = [x for x in e if x[1] == 1]
assert w1 and [x[0] for x in w1] == list(range(500, 500 * len(w1) + 1, 500)), e
assert all(x[2] == (x[0] > start) for x in w1) and any(x[2] for x in w1), (e, start)
assert [x for x in e if x[1] == 2] == [(k, 2, False) for k in range(500, 3001, 500) if k > start], (e, start)
b = r["best_eval"]
assert "checkpoint" not in b or json.load(open(os.path.join(b["checkpoint"], "state.json")))["world_size"] == b["world_size"], b
print("     W=2 from step", start, "evals", e, "best", b["step"], b["world_size"], b.get("checkpoint"))
PY
}

run_batch() {
    local rc0
    # 1 rank, batch 3 of the 6 examples: 2 steps an epoch; 50 epochs end at step 100
    GANTRY_EPOCHS=50 start_ranks "$tmp/batch" 1 ba
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    [ "$rc0" = 0 ] && [ -d "$tmp/batch/step-100" ] || { bad "batch: first run exit $rc0"; return; }
    # batch 6: one step an epoch, 80 epochs: epoch 50 is this run's step 50, 30 steps to go
    GANTRY_BATCH_SIZE=6 GANTRY_EPOCHS=80 start_ranks "$tmp/batch" 1 bb
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    if [ "$rc0" = 0 ] && grep -q 'is step 50: continuing there' "$tmp/bb.0.err" &&
        grep -qE 'final parameters.*step 80\b' "$tmp/bb.0.err" && [ -d "$tmp/batch/step-80" ]; then
        ok "batch 3 -> 6: resumed at step 50 (epoch 50), trained to step 80"
    else
        bad "batch 3 -> 6: exit $rc0"; grep -E 'resum|continu|final' "$tmp/bb.0.err"
    fi
}

# wait_line FILE TEXT: until FILE has TEXT (or 60 s)
wait_line() {
    local t=$((SECONDS + 60))
    while ((SECONDS < t)); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    return 1
}

# newest DIR: the highest N of DIR/step-N
newest() { { ls "$1" 2>/dev/null || true; } | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -n 1; }

run_sigterm() {
    local rc0 rc1 t0 dt before after at n
    export GANTRY_EPOCHS=1000000 # runs until signalled
    # no interval checkpoint: the one there after the signal is the stop's
    GANTRY_CHECKPOINT_INTERVAL_STEPS=1000000000 start_ranks "$tmp/term" 2 t
    wait_line "$tmp/t.0.out" '"step":1000,' || bad "sigterm: no progress line for step 1000"
    t0=$(ms)
    kill -TERM "${rank_pid[0]}" "${rank_pid[1]}"
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    dt=$(($(ms) - t0))
    if [ "$rc0" = 143 ] && [ "$rc1" = 143 ] && ((dt < 3000)); then
        ok "SIGTERM: both ranks exit 143 after ${dt} ms"
    else
        bad "SIGTERM: exits $rc0 $rc1 after ${dt} ms"; tail -n 3 "$tmp"/t.*.err
    fi
    grep -q 'final parameters' "$tmp/t.0.err" && bad "SIGTERM: training ran to the end (came too late)"
    # checkpoint.saveOnStop (the default): rank 0 saved the step it stopped at, before exiting
    at=$(sed -n 's/.*rank 0: SIGTERM at step \([0-9]*\); its checkpoint is saved.*/\1/p' "$tmp/t.0.err")
    n=$(newest "$tmp/term")
    if [ -n "$at" ] && [ "$at" = "$n" ] && ((at >= 1000)); then
        ok "SIGTERM: rank 0 saved step-$at, where it stopped (no interval checkpoint in this run)"
    else
        bad "SIGTERM: stopped at step '${at}', newest checkpoint step-$n"; tail -n 4 "$tmp/t.0.err"
    fi
    before=$(ls "$tmp/term" | grep -c '^step-' || true)
    sleep 0.3
    after=$(ls "$tmp/term" | grep -c '^step-' || true)
    [ "$before" = "$after" ] || bad "checkpoints still appearing after exit"
    (cd "$tmp/term" && for d in step-*; do (cd "$d" && sha256sum -c --quiet MANIFEST.sha256) || exit 1; done) &&
        ok "SIGTERM: the $after checkpoints left all verify" || bad "SIGTERM left a corrupt step-<N>"
    # the next run resumes there, and loses no step
    if [ -n "$at" ]; then
        GANTRY_EPOCHS=$((at + 5)) start_ranks "$tmp/term" 2 tr # tiny at W=2: a step an epoch
        wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
        grep -q "rank 0 resumed from step $at " "$tmp/tr.0.err" && [ "$rc0$rc1" = 00 ] &&
            ok "SIGTERM: the next run resumed from step $at" ||
            bad "SIGTERM: the next run: exits $rc0 $rc1, $(grep -m1 resumed "$tmp/tr.0.err")"
    fi
    # only rank 1's pod is stopped (pods get SIGTERM one by one, or one is deleted): the ranks
    # agree on the step through the step's sums, so rank 0 stops after the same step and saves it
    start_ranks "$tmp/term4" 2 x
    wait_line "$tmp/x.0.out" '"step":1000,' || bad "sigterm rank 1: no progress line for step 1000"
    kill -TERM "${rank_pid[1]}"
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    at=$(sed -n 's/.*rank 0: a peer was asked to stop (its pod is going) at step \([0-9]*\); its checkpoint is saved.*/\1/p' "$tmp/x.0.err")
    n=$(newest "$tmp/term4")
    [ "$rc0" = 3 ] && [ "$rc1" = 143 ] && [ -n "$at" ] && [ "$at" = "$n" ] &&
        ok "SIGTERM to rank 1 only: rank 1 exits 143, rank 0 stops after the same step, saves step-$at, exits 3" ||
        { bad "SIGTERM to rank 1 only: exits $rc0 $rc1, rank 0 at '${at}', newest step-$n"; tail -n 3 "$tmp"/x.*.err; }
    # checkpoint.saveOnStop false: the last interval checkpoint is the newest
    GANTRY_CHECKPOINT_SAVE_ON_STOP=false start_ranks "$tmp/term3" 2 w
    wait_ckpt "$tmp/term3" 200 || bad "sigterm saveOnStop false: no checkpoint appeared"
    sleep 0.15
    kill -TERM "${rank_pid[0]}" "${rank_pid[1]}"
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    n=$(newest "$tmp/term3")
    [ "$rc0$rc1" = 143143 ] && ((n % 100 == 0)) && grep -q 'exiting without a new checkpoint' "$tmp/w.0.err" &&
        ok "SIGTERM with saveOnStop false: exit 143, newest checkpoint the interval's step-$n" ||
        bad "SIGTERM with saveOnStop false: exits $rc0 $rc1, newest step-$n"
    # rank 0 blocked in the all-reduce (rank 1 stopped): still out within the 2 s grace
    start_ranks "$tmp/term2" 2 v
    wait_ckpt "$tmp/term2" 100 || bad "sigterm blocked: no checkpoint appeared"
    kill -STOP "${rank_pid[1]}"
    sleep 0.2
    t0=$(ms)
    kill -TERM "${rank_pid[0]}"
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    dt=$(($(ms) - t0))
    kill -9 "${rank_pid[1]}"; kill -CONT "${rank_pid[1]}" 2>/dev/null || true
    wait "${rank_pid[1]}" 2>/dev/null || true
    [ "$rc0" = 143 ] && ((dt < 4000)) && ok "SIGTERM while blocked on a stopped peer: exit 143 after ${dt} ms" ||
        bad "SIGTERM while blocked on a stopped peer: exit $rc0 after ${dt} ms"
    # a single rank (no peers to block on) too
    start_ranks "$tmp/term1" 1 u
    wait_ckpt "$tmp/term1" 100 || bad "sigterm 1 rank: no checkpoint appeared"
    t0=$(ms)
    kill -TERM "${rank_pid[0]}"
    wait_rc "${rank_pid[0]}"; rc0=$WRC
    dt=$(($(ms) - t0))
    [ "$rc0" = 143 ] && ((dt < 3000)) && ok "SIGTERM, 1 rank: exit 143 after ${dt} ms" ||
        bad "SIGTERM, 1 rank: exit $rc0 after ${dt} ms"
}

case $only in
kill9) run_kill9 ;;
world) run_kill9 && run_world && run_scaleup ;;
batch) run_batch ;;
sigterm) run_sigterm ;;
all) run_kill9; run_world; run_scaleup; run_batch; run_sigterm ;;
esac
exit $fail
