#!/usr/bin/env bash
# bench/ncu_summary.py on bench/testdata/ncu_raw.csv: a hand-written file in the layout of
# `ncu --page raw --csv` (a ==PROF== line, the header, the units row, two kernels; the numbers
# are made up). Checks the kernel names, the unit conversion, the stall ranking, '?' for a
# missing metric, and the inputs it must refuse or report rather than crash on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=$here/ncu_summary.py fx=$here/testdata/ncu_raw.csv
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # expect FILE TEXT: FILE holds the line TEXT
    if grep -qxF -- "$2" "$1"; then echo "ok   $2"; else echo "FAIL missing: $2"; fail=1; fi
}
python3 "$py" "$fx" >"$tmp/out"
cat "$tmp/out"
expect "$tmp/out" "ncu: tc_forward_kernel<64, false>  grid (16, 96, 1) x (128, 1, 1)  142.3 us  regs 198"
expect "$tmp/out" "ncu:   SM 61.2%  memory 30.4%  DRAM 5.1%  L2 hit 97.5%  tensor pipe 48.0%  occupancy 24.8% of 25.0%  shared bank conflicts 1234"
expect "$tmp/out" "ncu:   4.91 cycles between a warp's instructions; stalls: long_scoreboard 1.52, barrier 0.91, mio_throttle 0.77, math_pipe_throttle 0.40"
expect "$tmp/out" "ncu:   ? cycles between a warp's instructions; stalls: long_scoreboard 9.80, mio_throttle 0.30, short_scoreboard 0.20, sleeping 0.10"
[ "$(wc -l <"$tmp/out")" = 6 ] || { echo "FAIL: 6 lines expected"; fail=1; }
# without the units row (durations then read as ncu's default, ns)
grep -v '"usecond"' "$fx" >"$tmp/nounits.csv"
python3 "$py" "$tmp/nounits.csv" >"$tmp/out2"
expect "$tmp/out2" "ncu: tc_forward_kernel<64, false>  grid (16, 96, 1) x (128, 1, 1)  0.1 us  regs 198"
[ "$(wc -l <"$tmp/out2")" = 6 ] || { echo "FAIL: 6 lines expected without units"; fail=1; }
# what ncu prints when it profiled nothing, a truncated row, an empty file: a line, exit 0
printf '==PROF== Disconnected\n' >"$tmp/none.csv"
python3 "$py" "$tmp/none.csv" >"$tmp/out3"
expect "$tmp/out3" "ncu: no CSV header in the raw page (its output is in bench.log)"
head -3 "$fx" >"$tmp/short.csv"; echo '"9","1"' >>"$tmp/short.csv"
python3 "$py" "$tmp/short.csv" >"$tmp/out4"
expect "$tmp/out4" "ncu: no kernel row in the raw page"
: >"$tmp/empty.csv"
python3 "$py" "$tmp/empty.csv" >"$tmp/out5"
expect "$tmp/out5" "ncu: no CSV header in the raw page (its output is in bench.log)"
# usage errors
rc=0; python3 "$py" >/dev/null || rc=$?
[ "$rc" = 64 ] && echo "ok   no argument: exit 64" || { echo "FAIL no argument: exit $rc"; fail=1; }
rc=0; python3 "$py" "$tmp/missing.csv" 2>/dev/null || rc=$?
[ "$rc" = 66 ] && echo "ok   missing file: exit 66" || { echo "FAIL missing file: exit $rc"; fail=1; }
exit $fail
