#!/usr/bin/env bash
# bench/allreduce.sh [BUILD_DIR]: Gantry's all-reduce against Gloo and the raw TCP peak, all on
# this machine, in one run. Gantry's ranks (gantry-run --nproc N) share a host and /dev/shm, so
# its default fp32 all-reduce goes through shared memory ("gantry"); "gantry tcp" is the same
# program with GANTRY_COLL_SHM=0, the TCP ring over loopback (what ranks on different hosts or
# pods use), and "gantry bf16" the ring with bf16 on the wire (never shared memory).
#   1. raw TCP: one loopback connection, the most one ring link can carry;
#   2. nccl-tests tables (size, time, algbw, busbw, #wrong, OK/FAILED) for gantry (shared memory),
#      gantry tcp, gantry bf16, Gloo (gloo::allreduce ring, what PyTorch's ProcessGroupGloo uses)
#      and, when TORCH_PYTHON names a Python with torch, PyTorch's torch.distributed "gloo"
#      backend itself (bench/allreduce_torch.py) at each world size, 4 KiB .. 256 MiB;
#   3. busbw at 64 MiB from ROUNDS interleaved runs of each (median), and the ratios to Gloo;
#      the verdict is gantry's default (shared memory, fp32) against the target (>= 2x Gloo); a
#      comment line under each row gives the spread: min-max of each and of the per-round ratio
#      gantry/gloo (on a shared machine they vary a lot).
# Env: WORLDS ("2 4"), ROUNDS (3), MIN (4096), MAX (268435456), GLOO_ALGO (ring), TORCH_PYTHON;
# BENCH_RUSAGE=1: every rank of gantry and Gloo also prints, per all-reduce of its timed loop, its
# CPU time (user, sys), runqueue wait and context switches to stderr.
# Quick look at the target only: MIN=67108864 MAX=67108864 bench/allreduce.sh BUILD_DIR
# Needs bench_allreduce, bench_allreduce_gloo (libgloo-dev) and gantry-run built in BUILD_DIR.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
B=${1:-build}
WORLDS=${WORLDS:-2 4}
ROUNDS=${ROUNDS:-3}
MIN=${MIN:-4096}
MAX=${MAX:-268435456}
ALGO=${GLOO_ALGO:-ring}
S64=67108864

bin() {
    local p
    p=$(find "$B" -maxdepth 3 -type f -name "$1" -perm -u+x | head -1)
    [ -n "$p" ] || { echo "allreduce.sh: $1 not found under $B (build it first)" >&2; exit 2; }
    echo "$p"
}
OURS=$(bin bench_allreduce)
GLOO=$(bin bench_allreduce_gloo)
RUN=$(bin gantry-run)

ours() { local n=$1; shift; "$RUN" --nproc "$n" -- "$OURS" "$@"; }
ours_tcp() { GANTRY_COLL_SHM=0 ours "$@"; }
gloo() { # n lo hi
    local n=$1 d r
    d=$(mktemp -d)
    for r in $(seq 1 $((n - 1))); do "$GLOO" "$r" "$n" "$d" "$ALGO" "$2" "$3" >/dev/null & done
    "$GLOO" 0 "$n" "$d" "$ALGO" "$2" "$3"
    wait
    rm -rf "$d"
}
busbw_at() { awk -v s="$1" '$1 == s { print $7 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s-%s", lo, hi }'; }

echo "# bench/allreduce on $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$OURS" --raw
for n in $WORLDS; do
    echo
    ours "$n" --min "$MIN" --max "$MAX"
    echo
    ours_tcp "$n" --min "$MIN" --max "$MAX"
    echo
    ours "$n" --min "$MIN" --max "$MAX" --bf16
    echo
    gloo "$n" "$MIN" "$MAX"
    if [ -n "${TORCH_PYTHON:-}" ]; then
        echo
        "$TORCH_PYTHON" "$(dirname "${BASH_SOURCE[0]}")/allreduce_torch.py" --nproc "$n" \
            --min "$MIN" --max "$MAX" || echo "# torch-gloo failed (see above)"
    fi
done

echo
echo "# busbw at 64 MiB, median of $ROUNDS interleaved rounds (GB/s)"
printf "# %5s %10s %10s %11s %10s %9s %9s %10s\n" ranks gantry gantry-tcp gantry-bf16 gloo \
    ratio ratio-tcp ratio-bf16
verdict=OK
for n in $WORLDS; do
    a=() t=() b=() g=() q=()
    for _ in $(seq "$ROUNDS"); do
        a+=("$(ours "$n" --min $S64 --max $S64 | busbw_at $S64)")
        t+=("$(ours_tcp "$n" --min $S64 --max $S64 | busbw_at $S64)")
        b+=("$(ours "$n" --min $S64 --max $S64 --bf16 | busbw_at $S64)")
        g+=("$(gloo "$n" $S64 $S64 | busbw_at $S64)")
        q+=("$(awk -v x="${a[-1]}" -v y="${g[-1]}" 'BEGIN { printf "%.2f", x / y }')")
    done
    ma=$(printf '%s\n' "${a[@]}" | median)
    mt=$(printf '%s\n' "${t[@]}" | median)
    mb=$(printf '%s\n' "${b[@]}" | median)
    mg=$(printf '%s\n' "${g[@]}" | median)
    ra=$(awk -v x="$ma" -v y="$mg" 'BEGIN { printf "%.2f", x / y }')
    rt=$(awk -v x="$mt" -v y="$mg" 'BEGIN { printf "%.2f", x / y }')
    rb=$(awk -v x="$mb" -v y="$mg" 'BEGIN { printf "%.2f", x / y }')
    printf "  %5s %10s %10s %11s %10s %8sx %8sx %9sx\n" "$n" "$ma" "$mt" "$mb" "$mg" "$ra" "$rt" "$rb"
    printf "#   spread over %s rounds: gantry %s, gantry-tcp %s, gantry-bf16 %s, gloo %s; per-round ratio %s\n" \
        "$ROUNDS" "$(printf '%s\n' "${a[@]}" | range)" "$(printf '%s\n' "${t[@]}" | range)" \
        "$(printf '%s\n' "${b[@]}" | range)" "$(printf '%s\n' "${g[@]}" | range)" \
        "$(printf '%s\n' "${q[@]}" | range)"
    awk -v r="$ra" 'BEGIN { exit !(r >= 2.0) }' || verdict="BELOW TARGET (fp32 < 2x gloo)"
done
echo "# target: gantry fp32 (default: shared memory on one host) busbw >= 2x gloo at 64 MiB: $verdict"
