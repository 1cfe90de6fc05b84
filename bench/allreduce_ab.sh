#!/usr/bin/env bash
# bench/allreduce_ab.sh NAME=BUILD_DIR[,ENV=VALUE...] ...: an A/B of all-reduce variants at one size,
# interleaved round by round on the same loopback (a shared machine drifts between runs, so only
# rounds taken side by side compare). A variant named gloo* runs Gloo's ring (bench_allreduce_gloo
# of that build) instead of gantry's bench_allreduce; ENV=VALUE pairs are set for that variant's
# ranks only (e.g. a knob under test).
# Prints each variant's busbw per round, its median and range, and the per-round ratio to the
# first gloo variant (median and range), e.g. the old build against a new one:
#   git archive HEAD~1 | tar -x -C /tmp/old && cmake -S /tmp/old -B /tmp/old-b ... &&
#   bench/allreduce_ab.sh old=/tmp/old-b new=/tmp/b gloo=/tmp/b
# Env: WORLD (4) ranks, ROUNDS (5), SIZE (67108864) bytes,
#      PIN=1: every rank r, gantry's and Gloo's alike, runs on CPU r % nproc (taskset).
# Measured with it (2 shared CPUs, load 7-10, 4 ranks, 5-9 rounds): PIN=1 speeds Gloo up more
# (+74..113 %) than gantry (+17..45 %), so pinning lowers the ratio; see bench/allreduce.sh.
set -euo pipefail
if [ $# -eq 0 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
WORLD=${WORLD:-4}
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-67108864}
NCPU=$(nproc)

bin() { # build name
    local p
    p=$(find "$1" -maxdepth 3 -type f -name "$2" -perm -u+x | head -1)
    [ -n "$p" ] || { echo "allreduce_ab.sh: $2 not found under $1 (build it first)" >&2; exit 2; }
    echo "$p"
}
pin() { # rank cmd...: the command, on CPU rank % nproc when PIN=1
    local r=$1
    shift
    if [ "${PIN:-0}" = 1 ]; then taskset -c $((r % NCPU)) "$@"; else "$@"; fi
}
busbw() { awk -v s="$SIZE" '$1 == s { print $7 }'; }

run_variant() { # spec: one busbw
    local name=${1%%=*} rest=${1#*=} dir envs=() d r
    dir=${rest%%,*}
    [ "$rest" != "$dir" ] && IFS=, read -r -a envs <<<"${rest#*,}"
    if [[ $name == gloo* ]]; then
        local g
        g=$(bin "$dir" bench_allreduce_gloo)
        d=$(mktemp -d)
        for r in $(seq 1 $((WORLD - 1))); do
            env "${envs[@]}" bash -c "$(declare -f pin); NCPU=$NCPU PIN=${PIN:-0} pin $r \"\$@\"" _ \
                "$g" "$r" "$WORLD" "$d" ring "$SIZE" "$SIZE" >/dev/null &
        done
        env "${envs[@]}" bash -c "$(declare -f pin); NCPU=$NCPU PIN=${PIN:-0} pin 0 \"\$@\"" _ \
            "$g" 0 "$WORLD" "$d" ring "$SIZE" "$SIZE" | busbw
        wait
        rm -rf "$d"
    else
        local o run
        o=$(bin "$dir" bench_allreduce)
        run=$(bin "$dir" gantry-run)
        env "${envs[@]}" NCPU="$NCPU" PIN="${PIN:-0}" "$run" --nproc "$WORLD" -- bash -c \
            "$(declare -f pin); pin \$LOCAL_RANK \"\$@\"" _ "$o" --min "$SIZE" --max "$SIZE" | busbw
    fi
}

declare -A res
for _ in $(seq "$ROUNDS"); do
    for v in "$@"; do
        res[$v]+="$(run_variant "$v") "
    done
done
ref=""
for v in "$@"; do [[ ${v%%=*} == gloo* ]] && { ref=$v; break; }; done
echo "# bench/allreduce_ab: $WORLD ranks, $SIZE B, $ROUNDS interleaved rounds, PIN=${PIN:-0}," \
    "$NCPU CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); busbw GB/s"
for v in "$@"; do
    read -r -a x <<<"${res[$v]}"
    line=$(printf '%s\n' "${x[@]}" | sort -g | awk '{ v[NR] = $1 } END {
        printf "median %.3f range %.3f-%.3f", v[int((NR + 1) / 2)], v[1], v[NR] }')
    if [ -n "$ref" ] && [ "$v" != "$ref" ]; then
        read -r -a g <<<"${res[$ref]}"
        q=$(for i in "${!x[@]}"; do awk -v a="${x[$i]}" -v b="${g[$i]}" \
            'BEGIN { printf "%.2f\n", a / b }'; done | sort -g |
            awk '{ v[NR] = $1 } END { printf "ratio median %.2f range %.2f-%.2f", v[int((NR + 1) / 2)], v[1], v[NR] }')
        line="$line, $q"
    fi
    printf "%-12s %s  %s\n" "${v%%=*}" "${x[*]}" "$line"
done
