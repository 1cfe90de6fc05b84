#!/usr/bin/env bash
# gantry-worker's default thread count (training.threads 0) under a CPU quota, as a pod's CPU
# limit sets one: in a cgroup limited to 1 CPU it trains with 1 thread, with 1.5 CPUs with 2
# (rounded up, capped by the CPUs it may run on), without a limit with every CPU. Needs root and a
# writable cgroup hierarchy (v1 cpu controller or v2 with cpu delegated); exits 77 otherwise.
# Usage: cpu_quota_test.sh /path/to/gantry-worker /path/to/worker/testdata
set -euo pipefail
bin=$1 data=$2
cpus=$(nproc)
[ "$cpus" -ge 2 ] || { echo "SKIP: one CPU: a 1-CPU quota changes nothing"; exit 77; }
# shellcheck source=hack/cpu_quota_lib.sh
. "$(dirname "$0")/../hack/cpu_quota_lib.sh"
quota_cgroup_make gantry-quota-test || { echo "SKIP: no cgroup with a CPU quota here (above)"; exit 77; }
threads() { # QUOTA (none: ""): the worker's thread count in the cgroup with that quota
    local run=(env -u OMP_NUM_THREADS)
    if [ -n "$1" ]; then quota_cgroup_set "$1"; run=(quota_cgroup_exec "${run[@]}"); fi
    "${run[@]}" "$bin" --data-train "$data/tiny.jsonl" --data-min-freq 1 --model-hidden 16 \
        --model-heads 2 --model-layers 1 --epochs 1 --batch-size 2 --threads 0 2>&1 |
        sed -n 's/^gantry-worker: \([0-9]*\) threads,.*/\1/p'
}
fail=0
one=$(threads 100000) half=$(threads 150000) free=$(threads '')
if [ "$one" = 1 ] && [ "$half" = 2 ] && [ "$free" = "$cpus" ]; then
    echo "ok   threads 0: 1 CPU quota -> $one thread, 1.5 CPUs -> $half, no quota -> $free ($cpus CPUs)"
else
    echo "FAIL threads 0: quota 1 -> '$one' (want 1), 1.5 -> '$half' (want 2), none -> '$free' (want $cpus)"
    fail=1
fi
exit $fail
