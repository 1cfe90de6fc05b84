#!/usr/bin/env bash
# gantry-worker's default thread count (training.threads 0) under a CPU quota, as a pod's CPU
# limit sets one: in a cgroup limited to 1 CPU it trains with 1 thread, with 1.5 CPUs with 2
# (rounded up, capped by the CPUs it may run on), without a limit with every CPU. Needs root and a
# writable cgroup hierarchy (v1 cpu controller or v2 with cpu delegated); exits 77 otherwise.
# Usage: cpu_quota_test.sh /path/to/gantry-worker /path/to/worker/testdata
set -euo pipefail
bin=$1 data=$2
cpus=$(nproc)
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to make a cgroup"; exit 77; }
[ "$cpus" -ge 2 ] || { echo "SKIP: one CPU: a 1-CPU quota changes nothing"; exit 77; }
if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then
    g=/sys/fs/cgroup/cpu/gantry-quota-test.$$
    mkdir "$g"
    set_quota() { echo 100000 >"$g/cpu.cfs_period_us"; echo "$1" >"$g/cpu.cfs_quota_us"; }
    join=tasks
elif [ -f /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    g=/sys/fs/cgroup/gantry-quota-test.$$
    mkdir "$g"
    [ -f "$g/cpu.max" ] || { rmdir "$g"; echo "SKIP: the cpu controller is not delegated"; exit 77; }
    set_quota() { echo "$1 100000" >"$g/cpu.max"; }
    join=cgroup.procs
else
    echo "SKIP: no writable cgroup cpu controller"; exit 77
fi
trap 'rmdir "$g" 2>/dev/null || true' EXIT
threads() { # QUOTA: the worker's thread count in the cgroup with that quota (or none: "")
    if [ -n "$1" ]; then set_quota "$1"; fi
    OMP_NUM_THREADS='' bash -c "${1:+echo \$\$ >$g/$join;} unset OMP_NUM_THREADS; exec \"\$0\" \"\$@\"" \
        "$bin" --data-train "$data/tiny.jsonl" --data-min-freq 1 --model-hidden 16 \
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
