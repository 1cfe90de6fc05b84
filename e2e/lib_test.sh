#!/usr/bin/env bash
# Unit test of e2e/lib.sh's log parsing (no cluster): ckpt_step_in_log must see only checkpoints a
# worker says it wrote, and wait_kill_moment must not give up on one being written. Regression: the startup config line ("intervalSteps":20) read as "a
# checkpoint at step 20" made scenario 2 delete a worker ~2 s after start, before any checkpoint
# existed, so the restarted gang rightly logged "no checkpoint ...; starting from step 0".
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=e2e/lib.sh
. "$ROOT/e2e/lib.sh"
fail=0
expect() { # WANT NAME (log on stdin)
    local got
    got=$(ckpt_step_in_log)
    if [ "$got" = "$1" ]; then echo "ok   $2"; else echo "FAIL $2: got '$got', want '$1'"; fail=1; fi
}

config='gantry-worker: config {"task":"text-classification","epochs":3,"maxSteps":0,"warmupSteps":20,"warmupRatio":0.06,"logInterval":10,"checkpoint":{"dir":"/checkpoints/spam-chaos","intervalSteps":20,"keep":3}}'
startup="$config
gantry-worker: 2 threads, OpenBLAS SkylakeX kernels
gantry-worker: no checkpoint in /checkpoints/spam-chaos; starting from step 0
{\"step\":10,\"epoch\":0,\"loss\":0.644588,\"lr\":0.0005}
step 10/303 | epoch 1 | loss 0.6446 | lr 5.0e-04 | 75.5 ms | 635 samples/s | 77.6k tok/s
{\"step\":20,\"epoch\":0,\"loss\":0.517266,\"lr\":0.001}
step 20/303 | epoch 1 | loss 0.5173 | lr 1.0e-03 | 77.8 ms | 617 samples/s | 74.6k tok/s"
expect "" "config, no-checkpoint and progress lines are not a checkpoint" <<<"$startup"
expect "" "a failed write or a skipped checkpoint is not one" <<<"$startup
gantry[rank 0@spam-chaos-worker-0] Could not write /checkpoints/spam-chaos/step-20.tmp/rank-0.safetensors: No space left on device. Is the checkpoint volume full?
gantry[rank 0@spam-chaos-worker-0] Skipping checkpoint /checkpoints/spam-chaos/step-40: truncated"
expect 20 "the writer's 'Saved checkpoint .../step-20'" <<<"$startup
gantry[rank 0@spam-chaos-worker-0] Saved checkpoint /checkpoints/spam-chaos/step-20 in 63 ms"
expect 40 "the highest of several, either form" <<<"$startup
gantry[rank 0@spam-chaos-worker-0] Saved checkpoint /checkpoints/spam-chaos/step-20 in 63 ms
gantry-worker: checkpoint step-20 written to /checkpoints/spam-chaos (1.29 s)
gantry-worker: checkpoint step-40 written to /checkpoints/spam-chaos (1.27 s)"

# wait_kill_moment without a cluster: no checkpoint in the job's status, rank 0's log from $LOG.
# Regression: at "step 20/40" (half way, and a checkpoint step) it gave up on the checkpoint
# being written; it must wait on, and fall back only past half way.
tj_get() { [ "$3" = '{.status.phase}' ] && echo Running; }
kc() { printf '%s\n' "$LOG"; }
exec 3>/dev/null
kill_moment() { # WANT_RC WANT_STEP NAME (LOG set)
    local got rc=0
    got=$(wait_kill_moment ns job 2) || rc=$?
    if [ "$rc" = "$1" ] && [ "$got" = "$2" ]; then echo "ok   $3"
    else echo "FAIL $3: rc $rc step '$got', want rc $1 step '$2'"; fail=1; fi
}
LOG="$startup
step 30/40 | epoch 1 | loss 0.5173"
kill_moment 0 "" "past half way without a checkpoint: kill now (the gang restart still runs)"
LOG=$(sed 's|/303|/40|' <<<"$startup")
kill_moment 1 "" "at half way (step 20/40) without a checkpoint yet: keep waiting"
LOG="$LOG
gantry[rank 0@spam-gpu-worker-0] Saved checkpoint /checkpoints/spam-gpu/step-20 in 63 ms"
kill_moment 0 20 "at half way with its checkpoint saved: kill, resuming from 20"
exit $fail
