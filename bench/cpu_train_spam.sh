#!/usr/bin/env bash
# The issue-6 measurement: gantry-worker trains the Transformer on the SpamAssassin split and
# reports test accuracy, macro-F1 and training time.
#
#   bench/cpu_train_spam.sh [--bin PATH] [--threads N] [--out DIR] [-- extra gantry-worker flags]
#
# Makes the split with hack/spam-data.sh (seeded 80/20, cached), then runs gantry-worker
# (default build/worker/gantry-worker) with the configuration below on N threads (default 2,
# the issue's "2 cores"), writes DIR/report.json (default ./artifacts/spam) and prints a summary.
# Flags after -- override the configuration (e.g. -- --model-type ngram --model-hidden 32).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../build/worker/gantry-worker
threads=2
out=artifacts/spam
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_train_spam.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -x "$bin" ] || { echo "cpu_train_spam.sh: $bin not built; run make build (or pass --bin)" >&2; exit 1; }
data=$("$here/../hack/spam-data.sh" | awk '/^\//{print; exit}')
[ -f "$data/train.jsonl" ] || data=${GANTRY_CACHE:-$HOME/.cache/gantry}/data/spam-0.2.3-seed42
mkdir -p "$out"
cat >"$out/config.json" <<JSON
{"training": {
  "task": "text-classification",
  "model": {"type": "transformer", "layers": 2, "hidden": 128, "heads": 4, "maxSeqLen": 256},
  "data": {"train": "$data/train.jsonl", "eval": "$data/eval.jsonl", "minFreq": 2},
  "epochs": 3, "batchSize": 32, "learningRate": "1e-3", "weightDecay": 0.01,
  "logInterval": 20, "seed": 42, "report": "$out/report.json"}}
JSON
"$bin" --config "$out/config.json" --threads "$threads" "${extra[@]}" >"$out/progress.jsonl" 2>"$out/log.txt" || {
    tail -20 "$out/log.txt" >&2
    exit 1
}
python3 - "$out/report.json" "$threads" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["train"]
print("SpamAssassin (%d eval e-mails), %s, %s threads" % (r["examples"], r["config"]["model"]["type"], sys.argv[2]))
print("  accuracy  %.4f   (target >= 0.985)  %s" % (r["accuracy"], "PASS" if r["accuracy"] >= 0.985 else "FAIL"))
print("  macro-F1  %.4f" % r["macro_f1"])
print("  training  %.1f s, %d steps, %.1f samples/s; setup (read, vocab, encode) %.1f s"
      % (t["seconds"], t["steps"], t["samples_per_s"], t["setup_seconds"]))
print("  confusion %s (rows true %s)" % (r["confusion_matrix"], r["labels"]))
PY
