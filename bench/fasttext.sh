#!/usr/bin/env bash
# bench/fasttext.sh: time to accuracy on the SpamAssassin split, Gantry vs fastText (Debian).
#
#   bench/fasttext.sh --bin GANTRY_WORKER --tool FASTTEXT_DATA [--rounds N] [--threads N]
#                     [--ft-epochs "1 2 ..."] [--ngram-epochs "1 2 ..."] [--tf-epochs "..."]
#                     [--thresholds "0.97 0.98"] [--full-ladders] [--csv FILE] [--keep DIR]
#
# Data: hack/spam-data.sh's seeded 80/20 split (the one `make data` and `make spam` use).
# fastText reads it as "__label__X tok tok ..." lines written by FASTTEXT_DATA (bench/
# fasttext_data.c) with gantry-worker's own reader and tokenizer (lowercase, accents stripped,
# punctuation split) and the same first 256 words per e-mail, so both learn from the same words;
# Gantry additionally splits them into WordPiece pieces of a vocab built from the training set.
# Models, both with the same size where they have the same knob:
#   fasttext            fasttext supervised -wordNgrams 2 -dim 64 -bucket 131072 -minCount 2
#                       -lr 1.0 -thread N (lr 1.0 and bigrams: the fastText tutorial's settings)
#   gantry-ngram        gantry-worker --model-type ngram --model-hidden 64 --model-buckets 131072
#                       --data-min-freq 2 --learning-rate 3e-2, batch 32, AdamW, cosine
#   gantry-transformer  the `make spam` model (2 layers, hidden 128, 4 heads, 256 tokens,
#                       lr 1e-3, batch 32), round 1 only (it costs ~1 min per epoch)
# Time to accuracy: each side trains from scratch for each epoch count of its ladder (the
# learning-rate schedule ends at the last epoch, as it would in a real run of that length); a
# threshold's time is the training time of the first rung whose eval accuracy reaches it.
# Training time, both from the same JSONL: fastText's is the writing of its input files by
# FASTTEXT_DATA (tokenizing; once per round, added to each rung) + `fasttext supervised`'s wall
# time (read, dictionary, training, model save); gantry-worker's is its setup (read, tokenize,
# vocab, encode) + training seconds from its report (its final evaluation excluded). CPU seconds
# (user + sys of the whole processes) are kept as well: the machine is shared and CPU time
# suffers less from other load than wall time (Gantry's include its final evaluation).
# Evaluation: accuracy and macro-F1 on eval.jsonl (fastText: `fasttext predict`, scored here).
# Ladders (ascending): fastText 1 2 3 5 10 25 epochs (25: the tutorial's; its CLI takes whole
# epochs), n-gram 0.25 0.5 1 3 (3: gantry-worker's default), Transformer 1 (first round only);
# thresholds 0.97 0.98. The first round runs every rung (the last rung is each side's final
# accuracy); later rounds stop a ladder at the first rung reaching the highest threshold
# (--full-ladders: every rung every round). Gantry is seeded: its accuracies repeat exactly.
# CSV (--csv): impl,metric,x,unit,round,value with metrics accuracy, macro_f1, train_s, cpu_s
# (x = epochs), tta_s, tta_cpu_s, tta_epochs (x = threshold; nan when the ladder never reached
# it) and prep_s (writing fastText's input, included in its times). Prints a table per round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin= tool= rounds=3 threads=2 csv= keep= full=0
ft_epochs="1 2 3 5 10 25"
ng_epochs="0.25 0.5 1 3"
tf_epochs="1"
thresholds="0.97 0.98"
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ft-epochs) ft_epochs=$2; shift 2 ;;
    --ngram-epochs) ng_epochs=$2; shift 2 ;;
    --tf-epochs) tf_epochs=$2; shift 2 ;;
    --thresholds) thresholds=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --full-ladders) full=1; shift ;;
    -h | --help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fasttext.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -x "$bin" ] || { echo "fasttext.sh: --bin: gantry-worker '$bin' not executable" >&2; exit 64; }
[ -x "$tool" ] || { echo "fasttext.sh: --tool: fasttext_data '$tool' not executable" >&2; exit 64; }
command -v fasttext >/dev/null || { echo "fasttext.sh: fasttext not installed: hack/install-deps.sh (Debian package fasttext)" >&2; exit 69; }

data=$("$root/hack/spam-data.sh" | tail -1)
[ -f "$data/train.jsonl" ] && [ -f "$data/eval.jsonl" ] || { echo "fasttext.sh: no split in '$data'" >&2; exit 1; }
work=${keep:-$(mktemp -d /tmp/gantry-fasttext.XXXXXX)}
mkdir -p "$work"
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
rows=$work/rows.csv
: >"$rows"
row() { echo "$1,$2,$3,$4,$5,$6" >>"$rows"; }
TIMEFORMAT='%3R %3U %3S'

# ---- the fastText-format files (tokenized by Gantry's tokenizer) --------------------------------
# prep ROUND: writes them, timed; fastText's times include it, as Gantry's include its own setup
prep() {
    local t
    t=$({ time { "$tool" --max-tokens 256 "$data/train.jsonl" "$work/train.txt" >"$work/train.count" &&
        "$tool" --max-tokens 256 "$data/eval.jsonl" "$work/eval.txt" >"$work/eval.count"; }; } 2>&1)
    read -r prep_wall prep_cpu < <(echo "$t" | awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }')
    row fasttext prep_s 0 s "$1" "$prep_wall"
}
prep 0
read -r ntrain ntok _ <"$work/train.count"
read -r neval _ _ <"$work/eval.count"
echo "# data: $data: $ntrain train / $neval eval e-mails, $ntok train words (first 256 per e-mail), fastText files written in $prep_wall s"
echo "# $(dpkg-query -W -f='fasttext ${Version}' fasttext 2>/dev/null || echo "fasttext version unknown"); gantry-worker $bin; $threads threads"

# score GOLD PRED: accuracy and macro-F1 over the labels seen in either file
score() {
    awk 'NR == FNR { g[FNR] = $1; next }
         { p = $1; t = g[FNR]; n++; seen[t] = seen[p] = 1
           if (p == t) { ok++; tp[t]++ } else { fp[p]++; fn[t]++ } }
         END { for (c in seen) { d = 2 * tp[c] + fp[c] + fn[c]; f += d ? 2 * tp[c] / d : 0; k++ }
               printf "%.6f %.6f\n", ok / n, f / k }' "$1" "$2"
}

# run_ft ROUND EPOCHS: one fastText training from scratch + its evaluation
run_ft() {
    local r=$1 e=$2 t acc f1
    t=$({ time fasttext supervised -input "$work/train.txt" -output "$work/ft" -thread "$threads" \
        -epoch "$e" -lr 1.0 -wordNgrams 2 -dim 64 -bucket 131072 -minCount 2 -verbose 0 \
        >"$work/ft.log" 2>&1; } 2>&1) || { cat "$work/ft.log" >&2; return 1; }
    fasttext predict "$work/ft.bin" "$work/eval.txt" >"$work/ft.pred"
    read -r acc f1 < <(score "$work/eval.txt" "$work/ft.pred")
    t=$(echo "$t" | awk -v w="$prep_wall" -v c="$prep_cpu" '{ printf "%.3f %.3f 0", $1 + w, $2 + $3 + c }')
    emit fasttext "$r" "$e" "$acc" "$f1" "${t%% *}" "$t"
}

# run_gantry IMPL ROUND EPOCHS FLAGS...: one gantry-worker training from scratch; a fractional
# EPOCHS (0.25) is that share of an epoch's steps (--max-steps, which also ends the schedule)
run_gantry() {
    local impl=$1 r=$2 e=$3 t v steps
    shift 3
    steps=$(awk -v e="$e" -v n="$ntrain" 'BEGIN { spe = int((n + 31) / 32); s = e * spe
        print (e == int(e)) ? 0 : (s == int(s) ? s : int(s) + 1) }')
    t=$({ time "$bin" --data-train "$data/train.jsonl" --data-eval "$data/eval.jsonl" \
        --data-min-freq 2 --epochs "$(awk -v e="$e" 'BEGIN { print (e == int(e)) ? e : int(e) + 1 }')" \
        --max-steps "$steps" --batch-size 32 --seed 42 --threads "$threads" \
        --log-interval 100000 --report "$work/report.json" "$@" >"$work/g.out" 2>"$work/g.log"; } 2>&1) \
        || { tail -20 "$work/g.log" >&2; return 1; }
    v=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1])); t = r["train"]
print("%.6f %.6f %.3f" % (r["accuracy"], r["macro_f1"], t["setup_seconds"] + t["seconds"]))' "$work/report.json")
    set -- $v
    emit "$impl" "$r" "$e" "$1" "$2" "$3" "$t"
}

# emit IMPL ROUND EPOCHS ACC F1 TRAIN_S "WALL USER SYS"
emit() {
    local cpu
    cpu=$(echo "$7" | awk '{ printf "%.3f", $2 + $3 }')
    row "$1" accuracy "$3" fraction "$2" "$4"
    row "$1" macro_f1 "$3" fraction "$2" "$5"
    row "$1" train_s "$3" s "$2" "$6"
    row "$1" cpu_s "$3" s "$2" "$cpu"
    printf '%-20s %5d %6g %9.4f %9.4f %9.2f %9.2f\n' "$1" "$2" "$3" "$4" "$5" "$6" "$cpu"
}

ngram=(--model-type ngram --model-hidden 64 --model-buckets 131072 --model-max-seq-len 256 --learning-rate 3e-2)
tf=(--model-type transformer --model-layers 2 --model-hidden 128 --model-heads 4 --model-max-seq-len 256 --learning-rate 1e-3 --weight-decay 0.01)
# reached IMPL ROUND: this round's accuracy of IMPL reached the highest threshold
top=$(echo "$thresholds" | tr ' ' '\n' | sort -g | tail -1)
reached() {
    awk -F, -v i="$1" -v r="$2" -v t="$top" '$1 == i && $2 == "accuracy" && $5 == r && $6 + 0 >= t + 0 { f = 1 }
        END { exit !f }' "$rows"
}
echo "# impl                round epochs  accuracy  macro-F1  train s     CPU s"
for r in $(seq 0 $((rounds - 1))); do
    # rounds alternate which side goes first; after the first round (every rung: the final
    # accuracy), a side's ladder stops once it reached the highest threshold (--full-ladders: never)
    if [ $((r % 2)) = 0 ]; then order="ft ng"; else order="ng ft"; fi
    for side in $order; do
        if [ $side = ft ]; then
            [ "$r" = 0 ] || prep "$r"
            for e in $ft_epochs; do
                run_ft "$r" "$e"
                [ "$r" = 0 ] || [ "$full" = 1 ] || ! reached fasttext "$r" || break
            done
        else
            for e in $ng_epochs; do
                run_gantry gantry-ngram "$r" "$e" "${ngram[@]}"
                [ "$r" = 0 ] || [ "$full" = 1 ] || ! reached gantry-ngram "$r" || break
            done
        fi
    done
    if [ "$r" = 0 ]; then
        for e in $tf_epochs; do run_gantry gantry-transformer "$r" "$e" "${tf[@]}"; done
    fi
done

# ---- time to accuracy: per round, the first rung reaching each threshold -------------------------
awk -F, -v th="$thresholds" '
    $2 == "accuracy" { acc[$1, $5, $3] = $6; if (!(($1, $5) in seen)) { seen[$1, $5] = 1; keys[++nk] = $1 SUBSEP $5 }
                       ep[$1, $5, ++ne[$1, $5]] = $3 }
    $2 == "train_s" { ts[$1, $5, $3] = $6 }
    $2 == "cpu_s" { cs[$1, $5, $3] = $6 }
    END {
        nt = split(th, T, " ")
        for (k = 1; k <= nk; k++) {
            split(keys[k], ir, SUBSEP)
            for (j = 1; j <= nt; j++) {
                t = "nan"; c = "nan"; e = "nan"
                for (i = 1; i <= ne[keys[k]]; i++) {
                    x = ep[keys[k], i]
                    if (acc[keys[k], x] + 0 >= T[j] + 0) { t = ts[keys[k], x]; c = cs[keys[k], x]; e = x; break }
                }
                printf "%s,tta_s,%s,s,%s,%s\n", ir[1], T[j], ir[2], t
                printf "%s,tta_cpu_s,%s,s,%s,%s\n", ir[1], T[j], ir[2], c
                printf "%s,tta_epochs,%s,epochs,%s,%s\n", ir[1], T[j], ir[2], e
            }
        }
    }' "$rows" >"$work/tta.csv"
cat "$work/tta.csv" >>"$rows"
echo "# time to accuracy (s; nan = not reached within the ladder), per round"
awk -F, '$2 == "tta_s" { w = $6 } $2 == "tta_cpu_s" { c = $6 }
    $2 == "tta_epochs" { printf "%-20s round %s  >= %-6s %s s (%s CPU s, %s epochs)\n", $1, $5, $3, w, c, $6 }' "$work/tta.csv"
if [ -n "$csv" ]; then
    { echo "impl,metric,x,unit,round,value"; cat "$rows"; } >"$csv"
fi
