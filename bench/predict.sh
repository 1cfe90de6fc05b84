#!/usr/bin/env bash
# bench/predict.sh: prediction throughput on the SpamAssassin split, gantry-predict vs fastText.
#
#   bench/predict.sh --worker GANTRY_WORKER --predict GANTRY_PREDICT --tool FASTTEXT_DATA
#                    [--rounds N] [--copies N] [--threads N] [--no-transformer] [--csv FILE]
#                    [--keep DIR]
#
# Models, trained once (bench/fasttext.sh's settings):
#   fasttext            fasttext supervised -epoch 5 -lr 1.0 -wordNgrams 2 -dim 64
#                       -bucket 131072 -minCount 2
#   gantry-ngram        gantry-worker --model-type ngram --model-hidden 64 --model-buckets 131072
#                       --data-min-freq 2 --learning-rate 3e-2, 3 epochs, checkpointed
#   gantry-transformer  the `make spam` model (2 layers, hidden 128, 4 heads, 256 tokens), 1 epoch;
#                       it classifies eval.jsonl once (1,209 e-mails), not the copies: ~100/s
# Input: eval.jsonl repeated --copies times (default 10: 12,090 e-mails). Each round times, in
# alternating order, from the same e-mails:
#   fasttext            FASTTEXT_DATA (gantry's reader and tokenizer, first 256 words: fastText
#                       has none for raw text) writing fastText's input + `fasttext predict`
#                       (model load included); both parts are also reported alone
#   gantry-*            gantry-predict --model CKPT (verifying, loading, reading JSONL,
#                       tokenizing, WordPiece, forward, writing JSON lines)
# with --threads threads for gantry-predict (default 1: `fasttext predict` uses one). Prints
# documents/s (median of rounds), CPU seconds and accuracy, and the ratio gantry-ngram / fastText
# end to end. CSV (--csv): impl,metric,x,unit,round,value with metrics docs_per_s, wall_s, cpu_s,
# accuracy (x = threads).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
worker= predict= tool= rounds=3 copies=10 threads=1 csv= keep= tf=1
while [ $# -gt 0 ]; do
    case "$1" in
    --worker) worker=$2; shift 2 ;;
    --predict) predict=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-transformer) tf=0; shift ;;
    --csv) csv=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "predict.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
for b in "$worker" "$predict" "$tool"; do
    [ -x "$b" ] || { echo "predict.sh: '$b' is not executable (--worker, --predict, --tool)" >&2; exit 64; }
done
command -v fasttext >/dev/null || { echo "predict.sh: fasttext not installed: hack/install-deps.sh (Debian package fasttext)" >&2; exit 69; }

data=$("$root/hack/spam-data.sh" | tail -1)
[ -f "$data/train.jsonl" ] && [ -f "$data/eval.jsonl" ] || { echo "predict.sh: no split in '$data'" >&2; exit 1; }
work=${keep:-$(mktemp -d /tmp/gantry-predict-bench.XXXXXX)}
mkdir -p "$work"
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
rows=$work/rows.csv
: >"$rows"
TIMEFORMAT='%3R %3U %3S'

for ((i = 0; i < copies; i++)); do cat "$data/eval.jsonl"; done >"$work/big.jsonl"
ndocs=$(wc -l <"$work/big.jsonl")
echo "# $ndocs e-mails (eval.jsonl x $copies); gantry-predict --threads $threads; $(dpkg-query -W -f='fasttext ${Version}' fasttext 2>/dev/null || echo 'fasttext ?')"

# ---- the models ------------------------------------------------------------------------------------
echo "# training the models once"
"$tool" --max-tokens 256 "$data/train.jsonl" "$work/train.txt" >/dev/null
fasttext supervised -input "$work/train.txt" -output "$work/ft" -thread 2 -epoch 5 -lr 1.0 \
    -wordNgrams 2 -dim 64 -bucket 131072 -minCount 2 -verbose 0 >"$work/ft.log" 2>&1
"$worker" --data-train "$data/train.jsonl" --data-eval "$data/eval.jsonl" --data-min-freq 2 \
    --model-type ngram --model-hidden 64 --model-buckets 131072 --learning-rate 3e-2 --epochs 3 \
    --batch-size 32 --seed 42 --threads 2 --log-interval 100000 --checkpoint-dir "$work/ck/ngram" \
    --checkpoint-interval-steps 100000 --report "$work/ngram.json" >/dev/null 2>"$work/ngram.log" ||
    { tail -5 "$work/ngram.log" >&2; exit 1; }
impls="fasttext gantry-ngram"
if [ "$tf" = 1 ]; then
    "$worker" --data-train "$data/train.jsonl" --data-eval "$data/eval.jsonl" --data-min-freq 2 \
        --model-layers 2 --model-hidden 128 --model-heads 4 --model-max-seq-len 256 \
        --learning-rate 1e-3 --epochs 1 --batch-size 32 --seed 42 --threads 2 \
        --log-interval 100000 --checkpoint-dir "$work/ck/transformer" --checkpoint-interval-steps 100000 \
        --report "$work/transformer.json" >/dev/null 2>"$work/transformer.log" ||
        { tail -5 "$work/transformer.log" >&2; exit 1; }
    impls="$impls gantry-transformer"
fi

# accuracy of a predictions file against big.jsonl's labels
acc_ft() { # fastText's __label__X lines
    python3 - "$work/big.jsonl" "$1" <<'PY'
import json, sys
gold = [json.loads(l)["label"] for l in open(sys.argv[1])]
pred = [l.split()[0].replace("__label__", "") for l in open(sys.argv[2])]
print("%.6f" % (sum(g == p for g, p in zip(gold, pred)) / len(gold)) if len(pred) == len(gold) else "nan")
PY
}
acc_g() { # gantry-predict's JSON lines, against INPUT's labels
    python3 - "$2" "$1" <<'PY'
import json, sys
gold = [json.loads(l)["label"] for l in open(sys.argv[1])]
pred = [json.loads(l)["label"] for l in open(sys.argv[2])]
print("%.6f" % (sum(g == p for g, p in zip(gold, pred)) / len(gold)) if len(pred) == len(gold) else "nan")
PY
}
row() { echo "$1,$2,$threads,$3,$4,$5" >>"$rows"; }
# record IMPL ROUND "WALL USER SYS" ACCURACY [DOCS]
record() {
    local w c n=${5:-$ndocs}
    read -r w c < <(echo "$3" | awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }')
    row "$1" wall_s s "$2" "$w"
    row "$1" cpu_s s "$2" "$c"
    row "$1" docs_per_s "docs/s" "$2" "$(awk -v n="$n" -v w="$w" 'BEGIN { printf "%.1f", n / w }')"
    [ -z "${4:-}" ] || row "$1" accuracy fraction "$2" "$4"
}

run_one() { # IMPL ROUND
    local t t2
    case $1 in
    fasttext)
        t=$({ time "$tool" --max-tokens 256 "$work/big.jsonl" "$work/big.txt" >/dev/null; } 2>&1)
        t2=$({ time fasttext predict "$work/ft.bin" "$work/big.txt" >"$work/ft.pred"; } 2>&1)
        record fasttext-tokenize "$2" "$t"
        record fasttext-predict "$2" "$t2" "$(acc_ft "$work/ft.pred")"
        record fasttext "$2" "$(paste -d' ' <(echo "$t") <(echo "$t2") | awk '{ print $1 + $4, $2 + $5, $3 + $6 }')"
        ;;
    gantry-*)
        local in=$work/big.jsonl
        [ "$1" = gantry-ngram ] || in=$data/eval.jsonl
        t=$({ time "$predict" --model "$work/ck/${1#gantry-}" --threads "$threads" -q \
            -o "$work/$1.pred" "$in"; } 2>&1)
        record "$1" "$2" "$t" "$(acc_g "$work/$1.pred" "$in")" "$(wc -l <"$in")"
        ;;
    esac
}

for ((r = 1; r <= rounds; r++)); do
    order=$impls
    ((r % 2 == 0)) && order=$(echo "$impls" | tr ' ' '\n' | tac | tr '\n' ' ')
    for i in $order; do run_one "$i" "$r"; done
done

python3 - "$rows" "$ndocs" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
def med(impl, metric):
    v = [float(r[5]) for r in rows if r[0] == impl and r[1] == metric]
    return statistics.median(v) if v else float("nan")
print(f"{'impl':<20} {'docs/s':>10} {'wall s':>8} {'cpu s':>8} {'accuracy':>9}")
for impl in ["fasttext-tokenize", "fasttext-predict", "fasttext", "gantry-ngram", "gantry-transformer"]:
    if not any(r[0] == impl for r in rows):
        continue
    print(f"{impl:<20} {med(impl, 'docs_per_s'):>10.0f} {med(impl, 'wall_s'):>8.3f} "
          f"{med(impl, 'cpu_s'):>8.3f} {med(impl, 'accuracy'):>9.4f}")
ratio = med("gantry-ngram", "docs_per_s") / med("fasttext", "docs_per_s")
print(f"ratio gantry-ngram / fasttext (end to end, documents per second): {ratio:.2f}")
PY
if [ -n "$csv" ]; then
    { echo "impl,metric,x,unit,round,value"; cat "$rows"; } >"$csv"
fi
