#!/usr/bin/env bash
# Text pairs end to end (data.textPairField): a task only the pair decides. Each example is two
# sentences and the label says whether they are on the same topic, so either sentence alone is
# worth a coin toss. gantry-worker trained on the pairs must learn it; the same data with the
# first sentence only must not (the second text reaches the model). JSONL with named fields and
# TSV text<TAB>pair<TAB>label train the same model bit for bit. gantry-predict, given only the
# checkpoint, reproduces the worker's evaluation from JSONL and TSV, classifies plain-text
# text<TAB>pair lines and serves pairs over HTTP; bad configurations and inputs are refused
# naming what to change.
# Usage: pairs_test.sh /path/to/gantry-worker /path/to/gantry-predict
set -euo pipefail
worker=$1 predict=$2
tmp=$(mktemp -d)
trap '[ -z "${srv:-}" ] || kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"

python3 - "$tmp" <<'PY'
import csv, json, random, sys
d, rng = sys.argv[1], random.Random(5)
topics = [["goal", "match", "team", "score", "league", "coach"],
          ["recipe", "oven", "flour", "sauce", "garlic", "bake"],
          ["server", "kernel", "compile", "network", "cache", "thread"],
          ["river", "forest", "mountain", "valley", "lake", "trail"]]
fill = "the a today new great very some about with and report week".split()
def sent(k):
    ws = [rng.choice(topics[k]) for _ in range(rng.randint(2, 3))]
    ws += [rng.choice(fill) for _ in range(rng.randint(2, 5))]
    rng.shuffle(ws)
    return " ".join(ws)
for name, n in (("train", 2000), ("eval", 400)):
    rows = []
    for _ in range(n):
        a = rng.randrange(4)
        same = rng.random() < 0.5
        b = a if same else rng.choice([k for k in range(4) if k != a])
        rows.append({"premise": sent(a), "hypothesis": sent(b),
                     "label": "same" if same else "different"})
    with open(f"{d}/{name}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(f"{d}/{name}.tsv", "w") as f:
        f.write("text\ttext_pair\tlabel\n")
        f.writelines(f"{r['premise']}\t{r['hypothesis']}\t{r['label']}\n" for r in rows)
    with open(f"{d}/{name}.txt", "w") as f:
        f.writelines(f"{r['premise']}\t{r['hypothesis']}\n" for r in rows)
    with open(f"{d}/{name}_int.jsonl", "w") as f:  # a ClassLabel column exported as integers
        f.writelines(json.dumps({**r, "label": ["different", "same"].index(r["label"])}) + "\n"
                     for r in rows)
    with open(f"{d}/{name}.csv", "w", newline="") as f:  # every field quoted, CRLF: csv's way
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["label", "premise", "hypothesis"])
        w.writerows([r["label"], r["premise"], r["hypothesis"]] for r in rows)
PY
n_eval=400

config() { # file, data object, report, checkpoint dir ("" = none)
    cat >"$1" <<JSON
{"training": {"model": {"hidden": 32, "heads": 2, "layers": 1, "maxSeqLen": 24, "pooling": "cls"},
  "data": $2, "epochs": 20, "batchSize": 32, "learningRate": "3e-3", "logInterval": 500,
  "threads": 1, "report": "$3"},
 "checkpoint": {"dir": "$4", "intervalSteps": 0}}
JSON
}
jsonl_data="{\"train\": \"$tmp/train.jsonl\", \"eval\": \"$tmp/eval.jsonl\", \"minFreq\": 1,
  \"textField\": \"premise\", \"textPairField\": \"hypothesis\"}"
config "$tmp/pairs.json" "$jsonl_data" "$tmp/r_pairs.json" "$tmp/ck/pairs"
check "worker trains on text pairs" 0 "$worker" --config "$tmp/pairs.json"
config "$tmp/first.json" "{\"train\": \"$tmp/train.jsonl\", \"eval\": \"$tmp/eval.jsonl\",
  \"minFreq\": 1, \"textField\": \"premise\"}" "$tmp/r_first.json" ""
check "worker trains on the first texts only" 0 "$worker" --config "$tmp/first.json"
config "$tmp/tsv.json" "{\"train\": \"$tmp/train.tsv\", \"eval\": \"$tmp/eval.tsv\", \"minFreq\": 1,
  \"textPairField\": \"hypothesis\"}" "$tmp/r_tsv.json" ""
check "worker trains on TSV text pairs" 0 "$worker" --config "$tmp/tsv.json"
config "$tmp/csv.json" "{\"train\": \"$tmp/train.csv\", \"eval\": \"$tmp/eval.csv\", \"minFreq\": 1,
  \"textField\": \"premise\", \"textPairField\": \"hypothesis\"}" "$tmp/r_csv.json" ""
check "worker trains on CSV text pairs (columns by name)" 0 "$worker" --config "$tmp/csv.json"
config "$tmp/int.json" "{\"train\": \"$tmp/train_int.jsonl\", \"eval\": \"$tmp/eval_int.jsonl\",
  \"minFreq\": 1, \"textField\": \"premise\", \"textPairField\": \"hypothesis\",
  \"labelNames\": [\"different\", \"same\"]}" "$tmp/r_int.json" "$tmp/ck/int"
check "worker trains on integer labels with data.labelNames" 0 "$worker" --config "$tmp/int.json"
python3 - "$tmp" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
pairs, first, tsv, csv, ints = (json.load(open(f"{d}/r_{n}.json"))
                                for n in ("pairs", "first", "tsv", "csv", "int"))
assert pairs["examples"] == 400 and pairs["accuracy"] >= 0.95, pairs["accuracy"]
assert first["accuracy"] <= 0.70, first["accuracy"]  # one sentence alone: a coin toss
assert (tsv["accuracy"], tsv["loss"], tsv["confusion_matrix"]) == \
       (pairs["accuracy"], pairs["loss"], pairs["confusion_matrix"]), (tsv["loss"], pairs["loss"])
assert (csv["accuracy"], csv["loss"], csv["confusion_matrix"]) == \
       (pairs["accuracy"], pairs["loss"], pairs["confusion_matrix"]), (csv["loss"], pairs["loss"])
assert (ints["accuracy"], ints["loss"], ints["confusion_matrix"], ints["labels"]) == \
       (pairs["accuracy"], pairs["loss"], pairs["confusion_matrix"], pairs["labels"]), ints["labels"]
assert pairs["config"]["data"]["textPairField"] == "hypothesis"
print(f"ok   pairs: accuracy {pairs['accuracy']:.4f}; the first text alone {first['accuracy']:.4f};"
      f" TSV, CSV and integer labels the same model (loss {tsv['loss']:.6f})")
PY
step=$(basename "$(ls -d "$tmp"/ck/pairs/step-*)")
python3 - "$tmp/ck/pairs/$step/config.json" "$(ls -d "$tmp"/ck/int/step-*)/config.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["input"] == {"text": "premise", "textPair": "hypothesis", "label": "label",
                      "labelIndex": False}, a["input"]
assert b["input"]["labelIndex"] is True and b["labels"] == ["different", "same"], b
print("ok   the model cards name the pair's fields, and labelIndex with data.labelNames")
PY

# gantry-predict with the checkpoint alone: the worker's evaluation, from JSONL and TSV.
compare() { # name, worker report, predict report
    python3 - "$@" <<'PY' || fail=1
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert b["examples"] == 400 and b["confusion_matrix"] == a["confusion_matrix"], name
assert abs(b["loss"] - a["loss"]) <= 1e-5 * max(1.0, a["loss"]), (name, a["loss"], b["loss"])
print(f"ok   {name}: accuracy {b['accuracy']:.4f}, loss {b['loss']:.5f}")
PY
}
check "predict JSONL pairs" 0 "$predict" -m "$tmp/ck/pairs" "$tmp/eval.jsonl" --report "$tmp/p1.json"
cp "$tmp/out" "$tmp/pred.jsonl"
compare "predict JSONL pairs: the worker's evaluation" "$tmp/r_pairs.json" "$tmp/p1.json"
check "predict TSV pairs" 0 "$predict" -m "$tmp/ck/pairs" "$tmp/eval.tsv" --report "$tmp/p2.json"
compare "predict TSV pairs: the worker's evaluation" "$tmp/r_pairs.json" "$tmp/p2.json"
check "predict CSV pairs" 0 "$predict" -m "$tmp/ck/pairs" "$tmp/eval.csv" --report "$tmp/p3.json"
compare "predict CSV pairs: the worker's evaluation" "$tmp/r_pairs.json" "$tmp/p3.json"
# data.labelNames: the model names its classes; integer labels in the input index them
check "predict integer labels" 0 "$predict" -m "$tmp/ck/int" "$tmp/eval_int.jsonl" --report "$tmp/p4.json"
compare "predict integer labels: the worker's evaluation" "$tmp/r_pairs.json" "$tmp/p4.json"
grep -q '"label":"same"' "$tmp/out" && echo "ok   predictions name the classes (labelNames)" ||
    { echo "FAIL predictions: $(head -2 "$tmp/out")"; fail=1; }
{ head -n 2 "$tmp/eval_int.jsonl"; head -n 1 "$tmp/eval_int.jsonl" | sed 's/"label": [01]/"label": 7/'; } >"$tmp/seven.jsonl"
check "predict an integer label past labelNames" 0 "$predict" -m "$tmp/ck/int" "$tmp/seven.jsonl"
says "label 7 refused" 'seven.jsonl:3: label "7" is not one of the model'"'"'s'
check "predict plain text<TAB>pair on stdin" 0 "$predict" -m "$tmp/ck/pairs" <"$tmp/eval.txt"
cmp -s "$tmp/out" "$tmp/pred.jsonl" && echo "ok   plain text pairs: the same predictions" ||
    { echo "FAIL plain text pairs differ from JSONL's"; fail=1; }
# other field names on the command line; a line without its pair is skipped, naming the field
head -n 3 "$tmp/eval.jsonl" | sed -e 's/"premise"/"a"/; s/"hypothesis"/"b"/' >"$tmp/ab.jsonl"
echo '{"a": "goal match team"}' >>"$tmp/ab.jsonl"
check "predict --text-field --pair-field" 0 "$predict" -m "$tmp/ck/pairs" --text-field a \
    --pair-field b "$tmp/ab.jsonl"
says "a pair without its second text" 'ab.jsonl:4: missing field "b" (the pair'"'"'s second text)'
[ "$(wc -l <"$tmp/out")" = 3 ] || { echo "FAIL --pair-field: $(cat "$tmp/out")"; fail=1; }
printf 'goal match without a pair\n' >"$tmp/one.txt"
check "plain text without a tab, strict" 65 "$predict" -m "$tmp/ck/pairs" --strict "$tmp/one.txt"
says "no tab" "the model classifies text pairs: want text<TAB>pair"
config "$tmp/single.json" "{\"train\": \"$tmp/train.jsonl\", \"minFreq\": 1, \"textField\": \"premise\"}" \
    "" "$tmp/ck/single"
sed -i 's/"epochs": 20/"epochs": 1/' "$tmp/single.json"
check "worker trains a single-text model" 0 "$worker" --config "$tmp/single.json"
check "--pair-field for a single-text model" 64 "$predict" -m "$tmp/ck/single" --pair-field b \
    "$tmp/one.txt"
says "--pair-field refused" "classifies single texts, not text pairs"

# Serving pairs: ["text", "pair"] and objects with the model's field names; a lone text is a 400.
serve_start "$predict" "$tmp/ck/pairs" nli
python3 - "$port" "$tmp/eval.jsonl" "$tmp/pred.jsonl" <<'PY' || fail=1
import json, sys, urllib.error, urllib.request
port, rows = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])][:6]
want = [json.loads(l) for l in open(sys.argv[3])][:6]
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/nli:predict",
                                 data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
inst = [[r["premise"], r["hypothesis"]] for r in rows[:3]] + \
       [{"premise": r["premise"], "hypothesis": r["hypothesis"]} for r in rows[3:]]
st, got = post({"instances": inst})
assert st == 200, (st, got)
assert [(p["label"], p["score"]) for p in got["predictions"]] == \
       [(w["label"], w["score"]) for w in want], (got, want)
st, got = post({"instances": [rows[0]["premise"]]})
assert st == 400 and "instances[0]: the model classifies text pairs" in got["error"], (st, got)
st, got = post({"instances": [{"premise": "a"}]})
assert st == 400 and '"hypothesis"' in got["error"], (st, got)
with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/nli", timeout=30) as r:
    info = json.load(r)
assert info["inputs"] == {"text": "premise", "textPair": "hypothesis"}, info
print("ok   --serve: pairs as arrays and objects, the file's predictions; a lone text is a 400; "
      "/v1/models/nli names the two fields")
PY
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=

# Configurations that cannot work are refused before any data is read.
check "textPairField with clsSep false" 78 "$worker" --data-train "$tmp/train.jsonl" \
    --data-text-pair-field hypothesis --data-cls-sep false
says "clsSep named" "text pairs are encoded as [CLS] text [SEP] pair [SEP], so they need data.clsSep: true"
check "textPairField equal to textField" 78 "$worker" --data-train "$tmp/train.jsonl" \
    --data-text-pair-field text
says "fields named" "must name different JSONL fields"
check "textPairField with maxSeqLen 2" 78 "$worker" --data-train "$tmp/train.jsonl" \
    --data-text-pair-field b --model-max-seq-len 2
says "maxSeqLen named" "training.model.maxSeqLen: 2 leaves no room for a text pair's"
check "labelNames in another order than sorted" 0 "$worker" --data-train "$tmp/train.jsonl" \
    --data-text-field premise --data-label-names same,different --max-steps 2 --threads 1 \
    --data-eval-fraction 0.1 \
    --report "$tmp/r_order.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["labels"] == ["same", "different"], r["labels"]' \
    "$tmp/r_order.json" && echo "ok   the class ids follow data.labelNames, not the sorted names" ||
    { echo "FAIL labelNames order"; fail=1; }
sed 's/"label": 1/"label": 2/' "$tmp/train_int.jsonl" >"$tmp/two.jsonl"
check "an integer label past labelNames, strict" 65 "$worker" --data-train "$tmp/two.jsonl" \
    --data-text-field premise --data-label-names different,same --data-strict true --threads 1
says "not in labelNames" 'label "2" (not in data.labelNames, nor the index of one)'
check "JSONL without the pair's field" 65 "$worker" --data-train "$tmp/train.jsonl" \
    --data-text-field premise --data-text-pair-field b --data-strict true --threads 1
says "line and field named" 'train.jsonl:1: missing field "b" (the pair'"'"'s second text)'
exit $fail
