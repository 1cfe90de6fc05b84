#!/usr/bin/env bash
# Multi-label classification end to end (task: multi-label-classification). Each text mixes the
# words of zero to three of five topics and its labels are the topics it has, so one class per
# text cannot describe it. gantry-worker must learn every topic's yes/no decision; the same data
# as JSONL lists, JSONL strings, TSV with another separator and CSV trains the same model bit for
# bit. gantry-predict, given only the checkpoint, reproduces the worker's evaluation, and the
# metrics recomputed here from its predicted label sets equal the report's (micro/macro-F1,
# exact match, Hamming loss). Its server answers with label sets. Settings the binary
# cross-entropy has no use for are refused naming the field.
# Usage: multilabel_test.sh /path/to/gantry-worker /path/to/gantry-predict
set -euo pipefail
worker=$1 predict=$2
tmp=$(mktemp -d)
trap '[ -z "${srv:-}" ] || kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"

python3 - "$tmp" <<'PY'
import csv, json, random, sys
d, rng = sys.argv[1], random.Random(11)
topics = {"sport": ["goal", "match", "team", "score", "league"],
          "food": ["recipe", "oven", "flour", "sauce", "garlic"],
          "tech": ["server", "kernel", "compile", "network", "cache"],
          "nature": ["river", "forest", "mountain", "valley", "lake"],
          "money": ["bank", "loan", "stock", "price", "budget"]}
fill = "the a today new great very some about with and report week".split()
names = sorted(topics)
for name, n in (("train", 3000), ("eval", 400)):
    rows = []
    for _ in range(n):
        k = rng.choice([0, 1, 1, 2, 2, 3])
        labels = rng.sample(names, k)
        ws = [w for t in labels for w in rng.sample(topics[t], 2)]
        ws += [rng.choice(fill) for _ in range(rng.randint(2, 5))]
        rng.shuffle(ws)
        rows.append({"text": " ".join(ws), "topics": labels})
    with open(f"{d}/{name}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(f"{d}/{name}_str.jsonl", "w") as f:  # "a,b" strings instead of lists
        f.writelines(json.dumps({"text": r["text"], "topics": ",".join(r["topics"])}) + "\n"
                     for r in rows)
    with open(f"{d}/{name}.tsv", "w") as f:
        f.writelines(f"{r['text']}\t{'|'.join(r['topics'])}\n" for r in rows)
    with open(f"{d}/{name}_int.jsonl", "w") as f:  # ClassLabel ids, as GoEmotions' "labels"
        f.writelines(json.dumps({"text": r["text"], "topics": [names.index(t) for t in
                                                               r["topics"]]}) + "\n"
                     for r in rows)
    with open(f"{d}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["topics", "text"])
        w.writerows([",".join(r["topics"]), r["text"]] for r in rows)
PY

config() { # file, data object, report, checkpoint dir ("" = none)
    cat >"$1" <<JSON
{"training": {"task": "multi-label-classification",
  "model": {"hidden": 32, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": $2, "epochs": 12, "batchSize": 32, "learningRate": "3e-3", "logInterval": 500,
  "threads": 1, "report": "$3"},
 "checkpoint": {"dir": "$4", "intervalSteps": 0}}
JSON
}
config "$tmp/ml.json" "{\"train\": \"$tmp/train.jsonl\", \"eval\": \"$tmp/eval.jsonl\",
  \"minFreq\": 1, \"labelField\": \"topics\"}" "$tmp/r_ml.json" "$tmp/ck/ml"
check "worker trains a multi-label model (JSONL lists)" 0 "$worker" --config "$tmp/ml.json"
says "the final evaluation's line" "| micro-F1 "
config "$tmp/str.json" "{\"train\": \"$tmp/train_str.jsonl\", \"eval\": \"$tmp/eval_str.jsonl\",
  \"minFreq\": 1, \"labelField\": \"topics\"}" "$tmp/r_str.json" ""
check "worker trains on JSONL label strings" 0 "$worker" --config "$tmp/str.json"
config "$tmp/tsv.json" "{\"train\": \"$tmp/train.tsv\", \"eval\": \"$tmp/eval.tsv\",
  \"minFreq\": 1, \"labelSeparator\": \"|\"}" "$tmp/r_tsv.json" "$tmp/ck/tsv"
check "worker trains on TSV with labelSeparator |" 0 "$worker" --config "$tmp/tsv.json"
config "$tmp/csv.json" "{\"train\": \"$tmp/train.csv\", \"eval\": \"$tmp/eval.csv\",
  \"minFreq\": 1, \"labelField\": \"topics\"}" "$tmp/r_csv.json" ""
check "worker trains on CSV (a quoted list per field)" 0 "$worker" --config "$tmp/csv.json"
config "$tmp/int.json" "{\"train\": \"$tmp/train_int.jsonl\", \"eval\": \"$tmp/eval_int.jsonl\",
  \"minFreq\": 1, \"labelField\": \"topics\",
  \"labelNames\": [\"food\", \"money\", \"nature\", \"sport\", \"tech\"]}" "$tmp/r_int.json" ""
check "worker trains on lists of class ids with labelNames" 0 "$worker" --config "$tmp/int.json"
python3 - "$tmp" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
ml, st, tsv, csv, ints = (json.load(open(f"{d}/r_{n}.json"))
                          for n in ("ml", "str", "tsv", "csv", "int"))
rows = [json.loads(l) for l in open(f"{d}/eval.jsonl")]
assert ml["multi_label"] is True and ml["examples"] == 400, ml
assert ml["labels"] == ["food", "money", "nature", "sport", "tech"], ml["labels"]
assert "confusion_matrix" not in ml
for t in ml["labels"]:  # support: the eval examples that have the topic
    assert ml["per_class"][t]["support"] == sum(t in r["topics"] for r in rows), t
assert ml["micro_f1"] >= 0.95 and ml["macro_f1"] >= 0.95, (ml["micro_f1"], ml["macro_f1"])
assert ml["accuracy"] >= 0.85, ml["accuracy"]  # exact match of the whole set
for o in (st, tsv, csv, ints):
    assert (o["loss"], o["micro_f1"], o["per_class"]) == (ml["loss"], ml["micro_f1"],
                                                          ml["per_class"]), (o["loss"], ml["loss"])
print(f"ok   multi-label: micro-F1 {ml['micro_f1']:.4f}, macro-F1 {ml['macro_f1']:.4f}, exact "
      f"match {ml['accuracy']:.4f}, Hamming loss {ml['hamming_loss']:.4f}; JSONL strings, TSV, CSV "
      f"and class ids the same model (loss {ml['loss']:.6f})")
PY
card=$(ls -d "$tmp"/ck/ml/step-*)/config.json
python3 - "$card" "$(ls -d "$tmp"/ck/tsv/step-*)/config.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["task"] == "multi-label-classification" and a["input"]["label"] == "topics", a
assert b["input"]["labelSeparator"] == "|", b["input"]
print("ok   the model card says multi-label, with the label field and separator")
PY

# gantry-predict with the checkpoint alone: the worker's evaluation; the metrics again, here,
# from the predicted sets.
check "predict multi-label JSONL" 0 "$predict" -m "$tmp/ck/ml" "$tmp/eval.jsonl" \
    --label-field topics --report "$tmp/p1.json"
cp "$tmp/out" "$tmp/pred.jsonl"
says "predict's summary" "exact match"
check "predict multi-label TSV" 0 "$predict" -m "$tmp/ck/tsv" "$tmp/eval.tsv" --report "$tmp/p2.json"
python3 - "$tmp" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
w, p1, p2 = (json.load(open(f"{d}/{n}.json")) for n in ("r_ml", "p1", "p2"))
for p in (p1, p2):
    assert p["examples"] == 400 and p["per_class"] == w["per_class"], p["per_class"]
    assert abs(p["loss"] - w["loss"]) <= 1e-5 * max(1.0, w["loss"]), (p["loss"], w["loss"])
    assert p["micro_f1"] == w["micro_f1"] and p["accuracy"] == w["accuracy"]
rows = [json.loads(l) for l in open(f"{d}/eval.jsonl")]
pred = [json.loads(l) for l in open(f"{d}/pred.jsonl")]
assert len(pred) == 400 and all("label" not in p for p in pred)
tp = fp = fn = exact = 0
per = {c: [0, 0, 0] for c in w["labels"]}
for r, p in zip(rows, pred):
    assert p["scores"] == sorted(p["scores"], reverse=True) and all(s > 0.5 for s in p["scores"])
    assert len(p["labels"]) == len(p["scores"]) == len(set(p["labels"]))
    t, q = set(r["topics"]), set(p["labels"])
    exact += t == q
    for c in w["labels"]:
        per[c][0] += c in t and c in q
        per[c][1] += c in q and c not in t
        per[c][2] += c in t and c not in q
tp, fp, fn = (sum(v[i] for v in per.values()) for i in range(3))
f1 = lambda a, b, c: 2 * a / (2 * a + b + c) if a else 0.0
assert abs(f1(tp, fp, fn) - w["micro_f1"]) < 1e-9, (f1(tp, fp, fn), w["micro_f1"])
macro = sum(f1(*v) for v in per.values()) / len(per)
assert abs(macro - w["macro_f1"]) < 1e-9, (macro, w["macro_f1"])
assert abs(exact / 400 - w["accuracy"]) < 1e-12 and abs((fp + fn) / 2000 - w["hamming_loss"]) < 1e-12
assert any(p["labels"] == [] for p in pred), "no text without topics predicted as such"
print(f"ok   predict: the worker's evaluation from JSONL and TSV; recomputed from its label sets: "
      f"micro-F1 {f1(tp, fp, fn):.4f}, macro-F1 {macro:.4f}, exact {exact}/400")
PY
check "predict --top-k 5" 0 "$predict" -m "$tmp/ck/ml" -k 5 "$tmp/eval.jsonl" --label-field topics
python3 - "$tmp/out" <<'PY' || fail=1
import json, sys
p = json.loads(open(sys.argv[1]).readline())
assert len(p["top"]) == 5 and [t["label"] for t in p["top"]][:len(p["labels"])] == p["labels"], p
print("ok   --top-k lists every class's sigmoid, the predicted ones first")
PY

# Serving: label sets over HTTP, and the task in the model's description.
serve_start "$predict" "$tmp/ck/ml" topics
python3 - "$port" "$tmp/eval.jsonl" "$tmp/pred.jsonl" <<'PY' || fail=1
import json, sys, urllib.request
port, rows = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])][:6]
want = [json.loads(l) for l in open(sys.argv[3])][:6]
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/topics:predict",
                             data=json.dumps({"instances": [r["text"] for r in rows]}).encode())
with urllib.request.urlopen(req, timeout=30) as r:
    got = json.load(r)
assert [p["labels"] for p in got["predictions"]] == [w["labels"] for w in want], (got, want)
assert all(abs(a - b) <= 1e-5 for p, w in zip(got["predictions"], want)
           for a, b in zip(p["scores"], w["scores"])), (got, want)  # other batches: rounding
with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/topics", timeout=30) as r:
    info = json.load(r)
assert info["task"] == "multi-label-classification", info
print("ok   --serve: the file's label sets; /v1/models/topics says multi-label")
PY
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=

# Evaluations during training pick the best by micro-F1; evalFraction holds out a share (texts
# without labels too).
check "bestMetric micro_f1 with evalFraction" 0 "$worker" --task multi-label-classification \
    --data-train "$tmp/train.jsonl" --data-label-field topics --data-min-freq 1 \
    --data-eval-fraction 0.1 --eval-interval 20 --best-metric micro_f1 --max-steps 40 \
    --threads 1 --model-hidden 32 --model-heads 2 --model-layers 1 --report "$tmp/r_best.json"
python3 - "$tmp/r_best.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert r["best_eval"]["metric"] == "micro_f1" and len(r["evals"]) == 2, r["evals"]
assert all("micro_f1" in e for e in r["evals"]), r["evals"]
held = r["examples"]  # a tenth of each label group's examples, rounded: about 300
assert 280 <= held <= 320 and held + r["train"]["examples"] == 3000, (held, r["train"])
print(f"ok   bestMetric micro_f1: best at step {r['best_eval']['step']}; {held} held out")
PY

# initFrom: a multi-label checkpoint's classifier carries over to a multi-label job with the
# same labels, not to a single-label one (a softmax over the same classes).
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/train.jsonl")]
with open(f"{d}/single.jsonl", "w") as f:
    f.writelines(json.dumps({"text": r["text"], "label": r["topics"][0]}) + "\n"
                 for r in rows if len(r["topics"]) == 1)
PY
check "initFrom a multi-label model, multi-label" 0 "$worker" --task multi-label-classification \
    --data-train "$tmp/train.jsonl" --data-label-field topics --init-from "$tmp/ck/ml" \
    --max-steps 2 --threads 1
says "the classifier carries over" "every tensor, the classifier too (the same labels)"
check "initFrom a multi-label model, single-label" 0 "$worker" --data-train "$tmp/single.jsonl" \
    --init-from "$tmp/ck/ml" --max-steps 2 --threads 1 --checkpoint-dir "$tmp/ck/single"
says "a new classifier" "new for this task (text-classification; the checkpoint's: multi-label-classification)"

# --threshold: a higher bar for every label, in the output and in the report alike.
check "predict --threshold 0.999" 0 "$predict" -m "$tmp/ck/ml" --threshold 0.999 \
    --label-field topics --report "$tmp/p3.json" "$tmp/eval.jsonl"
python3 - "$tmp/out" "$tmp/p3.json" "$tmp/p1.json" "$tmp/eval.jsonl" <<'PY' || fail=1
import json, sys
pred = [json.loads(l) for l in open(sys.argv[1])]
hi, lo = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
rows = [json.loads(l) for l in open(sys.argv[4])]
assert hi["threshold"] == 0.999 and lo["threshold"] == 0.5, (hi["threshold"], lo["threshold"])
assert all(s >= 0.999 for p in pred for s in p["scores"])  # (printed to 6 digits)
tp = sum(len(set(p["labels"]) & set(r["topics"])) for p, r in zip(pred, rows))
fp = sum(len(set(p["labels"]) - set(r["topics"])) for p, r in zip(pred, rows))
assert abs(hi["micro_precision"] - (tp / (tp + fp) if tp + fp else 0)) < 1e-12, hi
assert sum(len(p["labels"]) for p in pred) <= sum(c["predicted"] for c in lo["per_class"].values())
print(f"ok   --threshold 0.999: {tp + fp} labels predicted (0.5: "
      f"{sum(c['predicted'] for c in lo['per_class'].values())}), micro-precision "
      f"{hi['micro_precision']:.4f} as counted from the output")
PY
check "--threshold out of range" 64 "$predict" -m "$tmp/ck/ml" --threshold 1 "$tmp/eval.jsonl"
says "--threshold named" "--threshold 1: must be a number between 0 and 1"
check "--threshold for a single-label model" 64 "$predict" -m "$tmp/ck/single" --threshold 0.7 \
    "$tmp/single.jsonl"
says "not multi-label" "is not multi-label (its task: text-classification); leave --threshold out"

# What the binary cross-entropy has no use for is refused before any data is read.
check "labelSmoothing with multi-label" 78 "$worker" --task multi-label-classification \
    --data-train "$tmp/train.jsonl" --label-smoothing 0.1
says "labelSmoothing named" "training.labelSmoothing: not with task: multi-label-classification"
check "classWeight balanced with multi-label" 78 "$worker" --task multi-label-classification \
    --data-train "$tmp/train.jsonl" --class-weight balanced
says "classWeight named" "training.classWeight: not with task: multi-label-classification"
check "a two-character labelSeparator" 78 "$worker" --task multi-label-classification \
    --data-train "$tmp/train.tsv" --data-label-separator '||'
says "labelSeparator named" 'training.data.labelSeparator: "||" must be one character'
printf '{"text": "goal match", "topics": {"sport": 1}}\n' >"$tmp/bad.jsonl"
check "a label that is not a list, strict" 65 "$worker" --task multi-label-classification \
    --data-train "$tmp/bad.jsonl" --data-label-field topics --data-strict true
says "the line and field named" 'bad.jsonl:1: non-list field "topics"; want a list of labels'
exit $fail
