#!/usr/bin/env bash
# Training throughput under a CPU limit: gantry-worker's default thread count (training.threads 0:
# the CPUs its cgroup's quota allows) against what OpenMP alone would take (every CPU of the
# host, which a pod with a CPU limit is then throttled for), same job, same cgroup, same run.
#
#   sudo bench/cpu_quota.sh [--bin PATH] [--cpus Q] [--rounds R] [--steps S]
#
# Makes a cgroup (v1 cpu controller, or v2 with cpu delegated) with a quota of Q CPUs (default 1),
# runs gantry-worker (default build/worker/gantry-worker) there on the SpamAssassin split
# (hack/spam-data.sh) for S steps (default 60) R times (default 5) each way, alternating, and prints
# the median samples/s of each (the worker's own last progress line), each side's range and the
# ratio. Needs root and a host with more CPUs than Q. The cgroup is removed at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../build/worker/gantry-worker
cpus=1 rounds=5 steps=60
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_quota.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -x "$bin" ] || { echo "cpu_quota.sh: $bin not built (make build)" >&2; exit 66; }
host=$(nproc)
[ "$host" -gt "$cpus" ] || { echo "cpu_quota.sh: $host CPUs, a quota of $cpus changes nothing" >&2; exit 77; }
# shellcheck source=hack/cpu_quota_lib.sh
. "$here/../hack/cpu_quota_lib.sh"
quota_cgroup_make gantry-cpu-quota-bench || exit 77
quota_cgroup_set $((cpus * 100000))
data=$("$here/../hack/spam-data.sh" | tail -1)
run() { # OMP_NUM_THREADS ('' = gantry's default): samples/s of the last progress line
    quota_cgroup_exec env -u OMP_NUM_THREADS ${1:+OMP_NUM_THREADS=$1} "$bin" \
        --model-layers 1 --model-hidden 64 --model-heads 4 --model-max-seq-len 128 \
        --data-train "$data/train.jsonl" --epochs 1 --max-steps "$steps" --batch-size 16 \
        --seed 42 --log-interval "$steps" 2>&1 | sed -n 's/^step .* \([0-9]*\) samples\/s .*/\1/p' | tail -1
}
ours=() omp=()
for ((i = 0; i < rounds; i++)); do
    ours+=("$(run '')")
    omp+=("$(run "$host")")
done
python3 - "$host" "$cpus" "${ours[*]}" "${omp[*]}" <<'PY'
import statistics, sys
host, cpus = sys.argv[1], sys.argv[2]
ours, omp = ([float(x) for x in a.split()] for a in sys.argv[3:5])
mo, mp = statistics.median(ours), statistics.median(omp)
print(f"# bench/cpu_quota: a cgroup limited to {cpus} CPU(s) on a {host}-CPU host, "
      f"{len(ours)} alternating rounds")
print(f"gantry default threads: median {mo:.0f} samples/s (range {min(ours):.0f}-{max(ours):.0f})")
print(f"OMP_NUM_THREADS={host}:     median {mp:.0f} samples/s (range {min(omp):.0f}-{max(omp):.0f})")
print(f"ratio {mo / mp:.2f}x")
PY
