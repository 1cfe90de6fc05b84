#!/usr/bin/env bash
# The GPU worker's failure path end to end (label gpu; in CI on the CUDA emulator, emu): two
# ranks with device: cuda over NCCL checkpoint every 20 steps; rank 1 is killed (-9) once a
# checkpoint exists:
#   - rank 0 notices through NCCL (ncclCommGetAsyncError, then ncclCommAbort) and exits with a
#     retryable status (non-zero, not 64-78) well inside the peer timeout, without finishing;
#   - rerunning the job resumes from that checkpoint on both ranks and ends with parameters
#     bit-identical (fnv1a64 of the buffer) to an uninterrupted run, on both ranks;
#   - SIGTERM to both ranks: rank 0 saves the step it stopped at (checkpoint.saveOnStop, the
#     parameters and moments downloaded from the device) and exits 143; the rerun resumes
#     there and also ends bit-identical;
#   - SIGTERM to rank 1 only: its stop vote reaches rank 0, which saves the same step and exits
#     3; the rerun resumes there, bit-identical.
# Exits 77 (skipped) with fewer than two GPUs (GANTRY_EMU_DEVICES for the emulator) or a build
# without CUDA.
# Usage: train_gpu_resume_test.sh /path/to/gantry-worker /path/to/worker/testdata
set -euo pipefail
bin=$1 data=$2
ngpu=${GANTRY_EMU_DEVICES:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
if [ "${ngpu:-0}" -lt 2 ]; then
    echo "SKIP: ${ngpu:-0} GPU visible, need 2"; exit 77
fi
tmp=$(mktemp -d)
. "$(dirname "$0")/ranks_testlib.sh"

# 6 examples, batch 3 per rank: one step per epoch
cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 80, "batchSize": 3, "learningRate": "3e-3", "logInterval": 20, "threads": 1,
  "scaleLearningRate": false, "device": "cuda"},
 "checkpoint": {"path": "$tmp", "dir": "$tmp/unused", "intervalSteps": 20, "keep": 2}}
JSON
export OMP_WAIT_POLICY=passive GANTRY_PEER_TIMEOUT=20 GANTRY_RDZV_TIMEOUT=60

wait_ckpt() { # DIR: until a step-N directory exists (or 120 s)
    local t=$((SECONDS + 120))
    while ((SECONDS < t)); do
        compgen -G "$1/step-*" >/dev/null && return 0
        sleep 0.01
    done
    return 1
}

start_ranks "$tmp/ref" 2 ref
wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
if [ "$rc0$rc1" != 00 ]; then
    [ "$rc0" = 78 ] && grep -q 'built without CUDA' "$tmp/ref.0.err" && { echo "SKIP: built without CUDA"; exit 77; }
    echo "FAIL uninterrupted run: exits $rc0 $rc1"; tail -n 5 "$tmp"/ref.*.err; exit 1
fi
h_ref=$(hash_of "$tmp/ref.0.err")
[ -n "$h_ref" ] && [ "$h_ref" = "$(hash_of "$tmp/ref.1.err")" ] &&
    ok "uninterrupted: parameters identical on both ranks ($h_ref)" ||
    bad "uninterrupted: hashes differ or missing: $h_ref / $(hash_of "$tmp/ref.1.err")"

start_ranks "$tmp/job" 2 a
wait_ckpt "$tmp/job" || bad "no checkpoint appeared"
kill -9 "${rank_pid[1]}"
t0=$(ms)
wait_rc "${rank_pid[0]}"; rc0=$WRC
dt=$(($(ms) - t0))
wait "${rank_pid[1]}" 2>/dev/null || true
if [ "$rc0" != 0 ] && { [ "$rc0" -lt 64 ] || [ "$rc0" -gt 78 ]; } && ((dt < 15000)) &&
    grep -q 'NCCL reported' "$tmp/a.0.err"; then
    ok "rank 1 killed: rank 0 saw it through NCCL and exits $rc0 (retryable) after ${dt} ms"
else
    bad "rank 1 killed: rank 0 exit $rc0 after ${dt} ms"; tail -5 "$tmp/a.0.err"
fi
grep -q 'final parameters' "$tmp/a.0.err" && bad "the killed run finished training (kill came too late)"

start_ranks "$tmp/job" 2 b
wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
[ "$rc0$rc1" = 00 ] || { bad "rerun: exits $rc0 $rc1"; tail -n 5 "$tmp"/b.*.err; }
for r in 0 1; do
    s=$(grep -oE 'resumed from step [0-9]+' "$tmp/b.$r.err" | awk '{print $4}' || true)
    [ "${s:-0}" -gt 0 ] && ok "rerun rank $r: resumed from step $s" || bad "rerun rank $r: no resume line"
done
h0=$(hash_of "$tmp/b.0.err") h1=$(hash_of "$tmp/b.1.err")
[ "$h0" = "$h_ref" ] && [ "$h1" = "$h_ref" ] &&
    ok "resumed run ends bit-identical to the uninterrupted one on both ranks ($h0)" ||
    bad "resumed hashes $h0 $h1, uninterrupted $h_ref"

# SIGTERM to both ranks (a pod deleted): rank 0 saves the step it stopped at, downloaded from the
# device (no interval checkpoint in this run), and the rerun from there ends bit-identical too.
# A real GPU trains the 80 steps in well under the time a signal takes to arrive after step 20:
# there the run is 2000 steps, against an uninterrupted run of as many (the schedule depends on
# the total).
E=80 h_term=$h_ref
if [ -z "${GANTRY_EMU_DEVICES:-}" ]; then
    E=2000
    GANTRY_EPOCHS=$E start_ranks "$tmp/ref2" 2 ref2
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    h_term=$(hash_of "$tmp/ref2.0.err")
    [ "$rc0$rc1" = 00 ] && [ -n "$h_term" ] || bad "uninterrupted run of $E steps: exits $rc0 $rc1"
fi
export GANTRY_EPOCHS=$E
start_past_20() { # DIR TAG: two ranks without interval checkpoints, until rank 0 logs step 20
    GANTRY_CHECKPOINT_INTERVAL_STEPS=100000 start_ranks "$1" 2 "$2"
    local t=$((SECONDS + 120))
    until grep -q "step 20/$E" "$tmp/$2.0.err" 2>/dev/null || ((SECONDS > t)); do sleep 0.01; done
}
rerun_identical() { # WHAT DIR TAG: the rerun resumes from step $at, both ranks end at $h_term
    start_ranks "$2" 2 "$3"
    wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
    h0=$(hash_of "$tmp/$3.0.err") h1=$(hash_of "$tmp/$3.1.err")
    grep -q "rank 0 resumed from step ${at:-none} " "$tmp/$3.0.err" && [ "$rc0$rc1" = 00 ] &&
        [ "$h0" = "$h_term" ] && [ "$h1" = "$h_term" ] &&
        ok "after $1: resumed from step $at, bit-identical to the uninterrupted run of $E steps ($h0)" ||
        bad "after $1: exits $rc0 $rc1, $(grep -m1 resumed "$tmp/$3.0.err"), hashes $h0 $h1 vs $h_term"
}
start_past_20 "$tmp/term" t
kill -TERM "${rank_pid[0]}" "${rank_pid[1]}"
wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
at=$(sed -n 's/.*rank 0: SIGTERM at step \([0-9]*\); its checkpoint is saved.*/\1/p' "$tmp/t.0.err")
if [ "$rc0$rc1" = 143143 ] && [ -n "$at" ] && [ -d "$tmp/term/step-$at" ]; then
    ok "SIGTERM: both ranks exit 143, rank 0 saved step-$at first"
else
    bad "SIGTERM: exits $rc0 $rc1, saved step '${at}'"; tail -n 4 "$tmp/t.0.err"
fi
rerun_identical SIGTERM "$tmp/term" u

# SIGTERM to rank 1 only (one pod deleted, or the pods' signals far apart): rank 1 votes to stop
# with its next step's gradients; every rank reads the votes every few steps, so rank 0 stops
# after the same step as rank 1, saves it and exits 3 (retryable), rank 1 exits 143; the rerun
# resumes there and ends bit-identical.
start_past_20 "$tmp/term1" v
kill -TERM "${rank_pid[1]}"
wait_rc "${rank_pid[0]}"; rc0=$WRC; wait_rc "${rank_pid[1]}"; rc1=$WRC
at=$(sed -n 's/.*rank 0: a peer was asked to stop (its pod is going) at step \([0-9]*\); its checkpoint is saved.*/\1/p' "$tmp/v.0.err")
if [ "$rc0" = 3 ] && [ "$rc1" = 143 ] && [ -n "$at" ] && [ -d "$tmp/term1/step-$at" ]; then
    ok "SIGTERM to rank 1 only: rank 1 exits 143, rank 0 stops after the same step, saves step-$at, exits 3"
else
    bad "SIGTERM to rank 1 only: exits $rc0 $rc1, saved step '${at}'"; tail -n 4 "$tmp"/v.*.err
fi
rerun_identical "SIGTERM to rank 1" "$tmp/term1" w
exit $fail
