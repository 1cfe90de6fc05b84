#!/usr/bin/env bash
# CPU training throughput: gantry's kernels vs PyTorch, same model, batch and threads, same run.
#
#   bench/cpu_train.sh [--bin PATH] [--threads N] [--rounds R] [--steps S] [-- extra model flags]
#
# Runs bench/cpu_train.c (built as cpu_train_bench; default build/worker/cpu_train_bench) and
# bench/cpu_train_torch.py (PyTorch from `hack/pyenv.sh torch`) alternately R times (default 3;
# which side goes first alternates too), each timing S optimizer steps (forward, backward, clip,
# AdamW) after warmup, and prints the median samples/s of each, the spread (each side's range and
# the per-round ratios), the ratio of the medians, and PASS when gantry is >= 1.2x PyTorch. Extra
# flags after -- go to both (e.g. -- --batch 16 --seq 128 --hidden 256 --varlen). Alternating
# rounds spreads the noise of a shared machine over both sides.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../build/worker/cpu_train_bench
threads=$(nproc)
rounds=3
steps=10
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_train.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -x "$bin" ] || { echo "cpu_train.sh: $bin not built; run make build (or pass --bin)" >&2; exit 1; }
py=${PYTHON:-$("$here/../hack/pyenv.sh" torch)/bin/python3}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
run_gantry() { "$bin" --threads "$threads" --steps "$steps" "${extra[@]}" >>"$out"; }
run_torch() { "$py" "$here/cpu_train_torch.py" --threads "$threads" --steps "$steps" "${extra[@]}" >>"$out"; }
for r in $(seq "$rounds"); do
    # Alternate which side goes first, so a load that drifts during a round hits both alike.
    if [ $((r % 2)) = 1 ]; then run_gantry; run_torch; else run_torch; run_gantry; fi
    echo "round $r/$rounds done" >&2
done
"$py" - "$out" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
g = [r for r in rows if r["impl"] == "gantry"]
t = [r for r in rows if r["impl"] == "pytorch"]
gm = statistics.median(r["samples_per_s"] for r in g)
tm = statistics.median(r["samples_per_s"] for r in t)
c = g[0]
print("# CPU training throughput: batch %d, seq %d, hidden %d, layers %d, heads %d, %d threads, "
      "%d params; OpenBLAS %s; torch %s"
      % (c["batch"], c["seq"], c["hidden"], c["layers"], c["heads"], c["threads"], c["params"],
         c["blas"], t[0]["torch"]))
print("%-10s %14s %14s %12s   %s" % ("impl", "samples/s", "tokens/s", "ms/step", "rounds (samples/s)"))
print("%-10s %14s %14s %12s" % ("", "(median)", "(median)", "(median)"))
for name, rs in (("gantry", g), ("pytorch", t)):
    print("%-10s %14.2f %14.0f %12.1f   %s" % (name,
          statistics.median(r["samples_per_s"] for r in rs),
          statistics.median(r["tokens_per_s"] for r in rs),
          statistics.median(r["ms_per_step"] for r in rs),
          " ".join("%.2f" % r["samples_per_s"] for r in rs)))
ratio = gm / tm
# Spread: each side's range, and the ratio of each round's pair (the same few seconds of load).
pairs = sorted(a["samples_per_s"] / b["samples_per_s"] for a, b in zip(g, t))
print("spread: gantry %.2f-%.2f, pytorch %.2f-%.2f samples/s; per-round ratio median %.2fx "
      "(%.2f-%.2f)" % (min(r["samples_per_s"] for r in g), max(r["samples_per_s"] for r in g),
                        min(r["samples_per_s"] for r in t), max(r["samples_per_s"] for r in t),
                        statistics.median(pairs), pairs[0], pairs[-1]))
print("ratio gantry/pytorch: %.2fx (target >= 1.20x): %s" % (ratio, "PASS" if ratio >= 1.2 else "FAIL"))
PY
