#!/usr/bin/env bash
# Regression end to end (task: regression): each text's label is a number, here half the count
# of the words of one topic it holds (0 to 2.5) among filler words, so the model must count.
# gantry-worker must fit it (Pearson >= 0.95 on held-out texts; a constant guess scores 0);
# the labels as JSON numbers, as strings, in TSV and in CSV train the same model bit for bit.
# gantry-predict, given only the checkpoint, reproduces the worker's evaluation, and the
# Pearson and Spearman correlations and MSE recomputed here from its outputs equal the report's. Its server
# answers with values. Settings a regression has no use for are refused naming the field.
# Usage: regression_test.sh /path/to/gantry-worker /path/to/gantry-predict
set -euo pipefail
worker=$1 predict=$2
tmp=$(mktemp -d)
trap '[ -z "${srv:-}" ] || kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"

python3 - "$tmp" <<'PY'
import csv, json, random, sys
d, rng = sys.argv[1], random.Random(3)
good = ["great", "superb", "lovely", "excellent", "wonderful", "brilliant"]
fill = "the a today new very some about with and report week film plot actor scene".split()
for name, n in (("train", 3000), ("eval", 400)):
    rows = []
    for _ in range(n):
        k = rng.randint(0, 5)
        ws = [rng.choice(good) for _ in range(k)] + [rng.choice(fill) for _ in range(rng.randint(3, 8))]
        rng.shuffle(ws)
        rows.append({"sentence": " ".join(ws), "score": k / 2})
    with open(f"{d}/{name}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(f"{d}/{name}_str.jsonl", "w") as f:
        f.writelines(json.dumps({**r, "score": str(r["score"])}) + "\n" for r in rows)
    with open(f"{d}/{name}.tsv", "w") as f:
        f.writelines(f"{r['sentence']}\t{r['score']}\n" for r in rows)
    with open(f"{d}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["score", "sentence"])
        w.writerows([r["score"], r["sentence"]] for r in rows)
PY

config() { # file, data object, report, checkpoint dir ("" = none)
    cat >"$1" <<JSON
{"training": {"task": "regression",
  "model": {"hidden": 32, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": $2, "epochs": 8, "batchSize": 32, "learningRate": "3e-3", "logInterval": 500,
  "threads": 1, "report": "$3"},
 "checkpoint": {"dir": "$4", "intervalSteps": 0}}
JSON
}
fields='"minFreq": 1, "textField": "sentence", "labelField": "score"'
config "$tmp/num.json" "{\"train\": \"$tmp/train.jsonl\", \"eval\": \"$tmp/eval.jsonl\", $fields}" \
    "$tmp/r_num.json" "$tmp/ck/num"
check "worker trains a regression (JSON numbers)" 0 "$worker" --config "$tmp/num.json"
says "the final evaluation's line" "| Pearson "
config "$tmp/str.json" "{\"train\": \"$tmp/train_str.jsonl\", \"eval\": \"$tmp/eval_str.jsonl\",
  $fields}" "$tmp/r_str.json" ""
check "worker trains on numbers as strings" 0 "$worker" --config "$tmp/str.json"
config "$tmp/tsv.json" "{\"train\": \"$tmp/train.tsv\", \"eval\": \"$tmp/eval.tsv\",
  \"minFreq\": 1}" "$tmp/r_tsv.json" "$tmp/ck/tsv"
check "worker trains on TSV" 0 "$worker" --config "$tmp/tsv.json"
config "$tmp/csv.json" "{\"train\": \"$tmp/train.csv\", \"eval\": \"$tmp/eval.csv\", $fields}" \
    "$tmp/r_csv.json" ""
check "worker trains on CSV" 0 "$worker" --config "$tmp/csv.json"
python3 - "$tmp" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
num, st, tsv, csv = (json.load(open(f"{d}/r_{n}.json")) for n in ("num", "str", "tsv", "csv"))
assert num["regression"] is True and num["examples"] == 400, num
assert num["pearson"] >= 0.95 and num["mse"] <= 0.1, (num["pearson"], num["mse"])
assert abs(num["mse"] - num["loss"]) < 1e-5 and "accuracy" not in num, num
for o in (st, tsv, csv):
    assert (o["loss"], o["pearson"], o["mae"]) == (num["loss"], num["pearson"], num["mae"]), \
        (o["loss"], num["loss"])
print(f"ok   regression: Pearson {num['pearson']:.4f}, MSE {num['mse']:.4f}, MAE "
      f"{num['mae']:.4f}; strings, TSV and CSV the same model (loss {num['loss']:.6f})")
PY
python3 - "$(ls -d "$tmp"/ck/num/step-*)/config.json" <<'PY' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))
assert c["task"] == "regression" and c["labels"] == [] and c["input"]["label"] == "score", c
print("ok   the model card says regression, with no labels")
PY

# gantry-predict with the checkpoint alone: the worker's evaluation; Pearson and MSE again here.
check "predict regression JSONL" 0 "$predict" -m "$tmp/ck/num" "$tmp/eval.jsonl" \
    --report "$tmp/p1.json"
cp "$tmp/out" "$tmp/pred.jsonl"
says "predict's summary" "| Pearson "
check "predict regression TSV" 0 "$predict" -m "$tmp/ck/tsv" "$tmp/eval.tsv" --report "$tmp/p2.json"
python3 - "$tmp" <<'PY' || fail=1
import json, math, sys
d = sys.argv[1]
w, p1, p2 = (json.load(open(f"{d}/{n}.json")) for n in ("r_num", "p1", "p2"))
for p in (p1, p2):
    assert p["examples"] == 400 and abs(p["pearson"] - w["pearson"]) < 1e-6, (p, w)
    assert abs(p["loss"] - w["loss"]) <= 1e-5 * max(1.0, w["loss"]), (p["loss"], w["loss"])
ys = [json.loads(l)["score"] for l in open(f"{d}/eval.jsonl")]
zs = [json.loads(l)["value"] for l in open(f"{d}/pred.jsonl")]
assert len(zs) == 400
n, my, mz = len(ys), sum(ys) / len(ys), sum(zs) / len(zs)
cov = sum((y - my) * (z - mz) for y, z in zip(ys, zs))
r = cov / math.sqrt(sum((y - my) ** 2 for y in ys) * sum((z - mz) ** 2 for z in zs))
mse = sum((y - z) ** 2 for y, z in zip(ys, zs)) / n
assert abs(r - w["pearson"]) < 1e-5 and abs(mse - w["mse"]) < 1e-5, (r, w["pearson"], mse)
def ranks(v):  # 1-based, ties averaged
    order = sorted(range(len(v)), key=lambda i: v[i])
    out, i = [0.0] * len(v), 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out
ry, rz = ranks(ys), ranks(zs)
m = (n + 1) / 2
rho = sum((a - m) * (b - m) for a, b in zip(ry, rz)) / math.sqrt(
    sum((a - m) ** 2 for a in ry) * sum((b - m) ** 2 for b in rz))
assert abs(rho - w["spearman"]) < 1e-4 and abs(p1["spearman"] - w["spearman"]) < 1e-4, \
    (rho, w["spearman"], p1["spearman"])
print(f"ok   predict: the worker's evaluation from JSONL and TSV; recomputed from its values: "
      f"Pearson {r:.4f}, Spearman {rho:.4f}, MSE {mse:.4f}")
PY

serve_start "$predict" "$tmp/ck/num" sts
python3 - "$port" "$tmp/eval.jsonl" "$tmp/pred.jsonl" <<'PY' || fail=1
import json, sys, urllib.request
port, rows = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])][:5]
want = [json.loads(l) for l in open(sys.argv[3])][:5]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/sts:predict",
                             data=json.dumps({"instances": [r["sentence"] for r in rows]}).encode())
with urllib.request.urlopen(req, timeout=30) as r:
    got = json.load(r)
# the same outputs, to float rounding (other batches: other GEMM shapes, other summation orders)
assert all(abs(p["value"] - w["value"]) <= 1e-5 * max(1.0, abs(w["value"]))
           for p, w in zip(got["predictions"], want)) and len(got["predictions"]) == 5, (got, want)
with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/sts", timeout=30) as r:
    info = json.load(r)
assert info["task"] == "regression" and info["labels"] == [], info
print("ok   --serve: the file's values; /v1/models/sts says regression")
PY
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=

check "bestMetric pearson with evalFraction" 0 "$worker" --task regression \
    --data-train "$tmp/train.jsonl" --data-text-field sentence --data-label-field score \
    --data-min-freq 1 --data-eval-fraction 0.1 --eval-interval 20 --best-metric pearson \
    --max-steps 40 --threads 1 --model-hidden 32 --model-heads 2 --model-layers 1 \
    --report "$tmp/r_best.json"
python3 - "$tmp/r_best.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert r["best_eval"]["metric"] == "pearson" and len(r["evals"]) == 2, r["evals"]
assert all("pearson" in e for e in r["evals"]) and r["examples"] == 300, r["examples"]
print(f"ok   bestMetric pearson: best at step {r['best_eval']['step']}; 300 held out")
PY

# Text pairs (STS-B: how similar are two sentences): the same loss on [CLS] a [SEP] b [SEP].
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/pairs.jsonl", "w") as f:
    for l in open(f"{d}/train.jsonl"):
        r = json.loads(l)
        f.write(json.dumps({"s1": r["sentence"], "s2": "the film", "score": r["score"]}) + "\n")
PY
check "regression on text pairs" 0 "$worker" --task regression --data-train "$tmp/pairs.jsonl" \
    --data-text-field s1 --data-text-pair-field s2 --data-label-field score --data-min-freq 1 \
    --data-eval-fraction 0.1 --max-steps 60 --threads 1 --model-hidden 32 --model-heads 2 \
    --model-layers 1 --model-pooling cls --report "$tmp/r_pairs.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['regression'] and \
r['config']['data']['textPairField'] == 's2', r; print(f\"ok   text pairs: Pearson {r['pearson']:.4f} after 60 steps\")" \
    "$tmp/r_pairs.json" || fail=1

check "labelNames with regression" 78 "$worker" --task regression --data-train "$tmp/train.jsonl" \
    --data-label-names a,b
says "labelNames named" "training.data.labelNames: not with task: regression"
check "bestMetric accuracy with regression" 78 "$worker" --task regression \
    --data-train "$tmp/train.jsonl" --best-metric accuracy
says "bestMetric named" "training.bestMetric: accuracy is not a metric of task: regression"
check "labelSmoothing with regression" 78 "$worker" --task regression \
    --data-train "$tmp/train.jsonl" --label-smoothing 0.1
says "labelSmoothing named" "training.labelSmoothing: not with task: regression"
printf '{"sentence": "great film", "score": "high"}\n' >"$tmp/bad.jsonl"
check "a label that is not a number, strict" 65 "$worker" --task regression \
    --data-train "$tmp/bad.jsonl" --data-text-field sentence --data-label-field score \
    --data-strict true
says "the line named" 'bad.jsonl:1: label "high" is not a finite number (regression)'
exit $fail
