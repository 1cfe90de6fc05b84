#!/usr/bin/env bash
# bench/ckpt_bench.sh: checkpoint cost, three ways, on the same disk in one run.
#
#   bench/ckpt_bench.sh [--bin PATH] [--dir DIR] [--params N] [--rounds R] [--csv FILE] [--check]
#
# Per round (interleaved, so a busy disk hurts all of them alike; details in ckpt_bench.c):
#   blocked      training's pauses per checkpoint with the two-phase background writer
#                (hand-off + wait at the fence before the optimizer step);
#   blocked_cpu  the CPU time of those pauses;
#   fwd_bwd      the forward/backward run during the copy, against fwd_bwd_base without it;
#   async_write  that checkpoint's whole write (to fsync, rename and pruning done);
#   copy_fresh   the one-phase pause: copying the state into fresh memory on the training thread;
#   prefault     the one-time cost at job start (the writer's two buffers faulted in);
#   sync_write   ckpt_write of the same state on the training thread (the write time);
#   dd           `dd conv=fsync` of the same number of bytes: the disk's sequential bandwidth.
# Prints a table of medians (min-max) and the verdict: blocked <= 10 % of the write time.
# --csv FILE gets rows impl,metric,x,unit,round,value (x = bytes per checkpoint). --check
# (the ctest smoke test) also verifies the checkpoints written. DIR defaults to $TMPDIR or /tmp;
# N (params, 12 N bytes per checkpoint: weights + AdamW m, v) to 16777216; R to 5.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=
dir=${TMPDIR:-/tmp}
params=16777216
rounds=5
csv=
check=0
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --params) params=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --check) check=1; shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ckpt_bench.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -n "$bin" ] || bin=$(find "$here/../build" -maxdepth 3 -type f -name ckpt_bench -perm -u+x 2>/dev/null | head -1)
[ -n "$bin" ] && [ -x "$bin" ] || { echo "ckpt_bench.sh: ckpt_bench not built (pass --bin)" >&2; exit 2; }

wd=$(mktemp -d "$dir/gantry-ckpt-bench.XXXXXX")
trap 'rm -rf "$wd"' EXIT
bytes=$((params * 12))
mib=$(((bytes + 1048575) / 1048576))
rows=$wd/rows.csv
: >"$rows"
echo "# checkpoint: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB per checkpoint ($params params, fp32 w + m + v)," \
    "$rounds rounds, on $(df -P "$wd" | awk 'NR == 2 { print $1 " (" $6 ")" }')"
for r in $(seq 0 $((rounds - 1))); do
    "$bin" --dir "$wd" --params "$params" --rounds 1 --keep 1 \
        | awk -F, -v r="$r" -v b="$bytes" 'NR > 2 { printf "gantry,%s,%s,s,%d,%s\n", $2, b, r, $3 }' >>"$rows"
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$wd/dd.bin" bs=1M count="$mib" conv=fsync status=none
    t1=$(date +%s.%N)
    rm -f "$wd/dd.bin"
    awk -v r="$r" -v b="$bytes" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "dd,dd,%s,s,%d,%.6f\n", b, r, t1 - t0 }' >>"$rows"
done
if [ "$check" = 1 ]; then
    n=$(wc -l <"$rows")
    [ "$n" -eq $((rounds * 9)) ] || { echo "FAIL: $n rows, want $((rounds * 9))" >&2; exit 1; }
    for d in "$wd"/bench-async/step-* "$wd"/bench-sync/step-*; do
        (cd "$d" && sha256sum --quiet -c MANIFEST.sha256) || { echo "FAIL: $d does not verify" >&2; exit 1; }
    done
    [ "$(ls -d "$wd"/bench-async/step-* | wc -l)" -eq 1 ] || { echo "FAIL: keep 1 not honoured" >&2; exit 1; }
fi
[ -z "$csv" ] || { echo "impl,metric,x,unit,round,value" >"$csv"; cat "$rows" >>"$csv"; }
awk -F, -v bytes="$bytes" '
function median(m,   n, i, j, t, a) {
    n = 0; for (i in v) if (i ~ "^" m SUBSEP) a[++n] = v[i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    lo[m] = a[1]; hi[m] = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ v[$2, $5] = $6 }
END {
    nm = split("blocked blocked_cpu fwd_bwd_base fwd_bwd async_write copy_fresh prefault sync_write dd", ms, " ")
    printf "%-12s %12s %18s %12s\n", "metric", "median (s)", "min-max (s)", "MB/s"
    for (k = 1; k <= nm; k++) {
        m = ms[k]; med[m] = median(m)
        printf "%-12s %12.4f %8.4f-%-9.4f %12.0f\n", m, med[m], lo[m], hi[m], bytes / med[m] / 1e6
    }
    r = med["blocked"] / med["sync_write"]
    printf "forward/backward during the copy: %+.4f s (median %.4f vs %.4f without a checkpoint)\n",
        med["fwd_bwd"] - med["fwd_bwd_base"], med["fwd_bwd"], med["fwd_bwd_base"]
    printf "one-phase pause (copy into fresh memory) would be %.1f%% of the write\n",
        100 * med["copy_fresh"] / med["sync_write"]
    printf "write efficiency: checkpoint %.0f MB/s = %.0f%% of dd on this disk\n",
        bytes / med["sync_write"] / 1e6, 100 * med["dd"] / med["sync_write"]
    printf "VERDICT checkpoint: blocked/write = %.1f%% (target <= 10%%): %s\n",
        100 * r, r <= 0.10 ? "PASS" : "FAIL"
}' "$rows"
