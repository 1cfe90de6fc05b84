#!/usr/bin/env bash
# gantry-predict end to end: gantry-worker trains on a generated 3-class corpus with checkpoints;
# gantry-predict, given only the checkpoint, must reproduce the worker's own final evaluation
# (same confusion matrix, same accuracy, same loss to rounding), from a step or a job directory,
# from JSONL, TSV and plain text; skip a corrupt newest checkpoint; refuse a checkpoint without
# or with a bad model card, or with non-finite weights, naming the problem; and exit with the
# documented codes.
# Usage: predict_test.sh /path/to/gantry-worker /path/to/gantry-predict
set -euo pipefail
worker=$1 predict=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_testlib.sh"

# Three topics with shared and noisy words, so the model is good but not perfect.
awk -v seed=7 'BEGIN {
    srand(seed)
    split("goal match team score league coach player season stadium referee", w1)
    split("recipe oven flour sauce garlic simmer bake butter pepper dough", w2)
    split("server kernel compile network cache thread bug deploy module patch", w3)
    split("the a today new great very some about with and report week", c)
    split("sports cooking tech", lab)
    for (i = 0; i < 420; i++) {
        k = int(rand() * 3) + 1; t = ""
        for (j = 0; j < 6 + int(rand() * 10); j++) {
            r = rand(); kk = r < 0.45 ? k : (r < 0.6 ? int(rand() * 3) + 1 : 0)
            word = kk == 0 ? c[int(rand() * 12) + 1] : (kk == 1 ? w1[int(rand() * 10) + 1] : (kk == 2 ? w2[int(rand() * 10) + 1] : w3[int(rand() * 10) + 1]))
            t = t (j ? " " : "") word
        }
        if (i % 5 == 0) t = toupper(substr(t, 1, 1)) substr(t, 2) "!"
        printf "{\"text\": \"%s\", \"label\": \"%s\"}\n", t, lab[k] > (i < 300 ? "/dev/stdout" : "/dev/stderr")
    }
}' >"$tmp/train.jsonl" 2>"$tmp/eval.jsonl"
n_eval=$(wc -l <"$tmp/eval.jsonl")

cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$tmp/train.jsonl", "eval": "$tmp/eval.jsonl", "minFreq": 1},
  "maxSteps": 40, "batchSize": 16, "learningRate": "3e-3", "logInterval": 20, "threads": 1,
  "report": "$tmp/report.json"},
 "checkpoint": {"dir": "$tmp/ck/job", "intervalSteps": 20, "keep": 3}}
JSON
check "worker trains with checkpoints" 0 "$worker" --config "$tmp/cfg.json"
for f in config.json vocab.txt; do
    grep -q "  $f\$" "$tmp/ck/job/step-40/MANIFEST.sha256" || { echo "FAIL $f not in the manifest"; fail=1; }
done

# The worker's final evaluation, reproduced from the checkpoint alone.
compare() { # name, worker report, predict report, examples
    python3 - "$@" <<'PY' || fail=1
import json, sys
name, a, b, n = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
assert b["examples"] == n, (name, b["examples"], n)
assert b["confusion_matrix"] == a["confusion_matrix"], (name, a["confusion_matrix"], b["confusion_matrix"])
assert b["accuracy"] == a["accuracy"] and b["labels"] == a["labels"], name
assert abs(b["loss"] - a["loss"]) <= 1e-5 * max(1.0, a["loss"]), (name, a["loss"], b["loss"])
assert 0.5 < a["accuracy"] < 1.0, a["accuracy"]   # learned something, not trivially perfect
print(f"ok   {name}: accuracy {b['accuracy']:.4f}, loss {b['loss']:.5f} (worker {a['loss']:.5f})")
PY
}
check "predict from the job directory" 0 "$predict" --model "$tmp/ck/job" "$tmp/eval.jsonl" \
    --report "$tmp/p1.json" --batch 7
cp "$tmp/out" "$tmp/pred_job.jsonl"
says "uses the newest step" "step-40 (step 40)"
compare "same evaluation as the worker" "$tmp/report.json" "$tmp/p1.json" "$n_eval"
python3 - "$tmp/pred_job.jsonl" "$n_eval" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["line"] for r in rows] == list(range(1, int(sys.argv[2]) + 1)), "line numbers"
assert all(r["label"] in ("cooking", "sports", "tech") and 1 / 3 <= r["score"] <= 1 for r in rows)
print("ok   one prediction per line, in order")
PY
check "predict from the step directory" 0 "$predict" -m "$tmp/ck/job/step-40" -q "$tmp/eval.jsonl"
cmp -s "$tmp/out" "$tmp/pred_job.jsonl" || { echo "FAIL step dir and job dir differ"; fail=1; }
[ ! -s "$tmp/err" ] || { echo "FAIL --quiet wrote to stderr"; fail=1; }

# The same documents as TSV and as plain text (stdin): the same predictions.
python3 - "$tmp/eval.jsonl" "$tmp/eval.tsv" "$tmp/eval.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
open(sys.argv[2], "w").write("text\tlabel\n" + "".join(f"{r['text']}\t{r['label']}\n" for r in rows))
open(sys.argv[3], "w").write("".join(r["text"] + "\n" for r in rows))
PY
check "TSV input" 0 "$predict" -m "$tmp/ck/job" "$tmp/eval.tsv" --report "$tmp/p2.json"
compare "TSV: same evaluation" "$tmp/report.json" "$tmp/p2.json" "$n_eval"
check "text on stdin" 0 "$predict" -m "$tmp/ck/job" <"$tmp/eval.txt"
python3 - "$tmp/pred_job.jsonl" "$tmp/out" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert [(r["line"], r["label"], r["score"]) for r in a] == [(r["line"], r["label"], r["score"]) for r in b]
print("ok   plain text gives the same predictions")
PY

# CSV (a header naming the columns, quoted fields holding commas and newlines): the same
# predictions as JSONL of the same texts, each at its record's first line.
python3 - "$tmp/eval.jsonl" "$tmp/nl.jsonl" "$tmp/nl.csv" <<'PY'
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][:40]
for i, r in enumerate(rows):
    if i % 4 == 0:
        r["text"] = r["text"].replace(" ", "\n", 1) + ', "quoted", and more'
open(sys.argv[2], "w").writelines(json.dumps(r) + "\n" for r in rows)
with open(sys.argv[3], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["label", "text"])
    w.writerows([r["label"], r["text"]] for r in rows)
PY
check "predict JSONL with newlines in texts" 0 "$predict" -m "$tmp/ck/job" "$tmp/nl.jsonl" --report "$tmp/p_nl1.json"
cp "$tmp/out" "$tmp/pred_nl.jsonl"
check "predict CSV" 0 "$predict" -m "$tmp/ck/job" "$tmp/nl.csv" --report "$tmp/p_nl2.json"
python3 - "$tmp/pred_nl.jsonl" "$tmp/out" "$tmp/p_nl1.json" "$tmp/p_nl2.json" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
ra, rb = (json.load(open(p)) for p in sys.argv[3:5])
assert [(r["label"], r["score"]) for r in a] == [(r["label"], r["score"]) for r in b]
want, line = [], 2          # the header is line 1; every 4th record takes two lines
for i in range(len(a)):
    want.append(line)
    line += 2 if i % 4 == 0 else 1
assert [r["line"] for r in b] == want, [r["line"] for r in b][:8]
assert ra["confusion_matrix"] == rb["confusion_matrix"] and ra["examples"] == rb["examples"] == 40
print("ok   CSV: the same predictions and evaluation as JSONL, at each record's first line")
PY
printf 'id,body\n1,x\n' >"$tmp/nocol.csv"
check "predict CSV without the text column" 65 "$predict" -m "$tmp/ck/job" "$tmp/nocol.csv"
says "the column named" 'nocol.csv:1: the header has no column "text"'

# gzip-compressed data and shards: the worker trains on train-*.jsonl.gz (two compressed shards
# of the same lines) exactly as on the one plain file; gantry-predict reads .jsonl.gz; a gzip
# file cut short is an error, not a quietly shorter dataset; a pattern matching nothing is named.
head -n 150 "$tmp/train.jsonl" | gzip -c >"$tmp/train-1.jsonl.gz"
tail -n +151 "$tmp/train.jsonl" | gzip -c >"$tmp/train-2.jsonl.gz"
sed -e "s|$tmp/train.jsonl|$tmp/train-*.jsonl.gz|; s|$tmp/report.json|$tmp/report_gz.json|" \
    -e "s|$tmp/ck/job|$tmp/ck/gz|" "$tmp/cfg.json" >"$tmp/cfg_gz.json"
check "worker trains on gzip shards (a pattern)" 0 "$worker" --config "$tmp/cfg_gz.json"
python3 - "$tmp/report.json" "$tmp/report_gz.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert (a["loss"], a["confusion_matrix"], a["train"]["examples"]) == \
       (b["loss"], b["confusion_matrix"], b["train"]["examples"]), (a["loss"], b["loss"])
print(f"ok   gzip shards train the same model as the plain file (loss {b['loss']:.6f})")
PY
gzip -c "$tmp/eval.jsonl" >"$tmp/eval.jsonl.gz"
check "predict a .jsonl.gz" 0 "$predict" -m "$tmp/ck/job" "$tmp/eval.jsonl.gz"
cmp -s "$tmp/out" "$tmp/pred_job.jsonl" && echo "ok   .jsonl.gz: the same predictions" ||
    { echo "FAIL .jsonl.gz predictions differ"; fail=1; }
head -c 300 "$tmp/eval.jsonl.gz" >"$tmp/cut.jsonl.gz"
check "predict a truncated .jsonl.gz" 74 "$predict" -m "$tmp/ck/job" "$tmp/cut.jsonl.gz"
says "truncated gzip named" "cut.jsonl.gz: read error"
cp "$tmp/cut.jsonl.gz" "$tmp/train-3.jsonl.gz"
check "worker on a truncated gzip shard" 65 "$worker" --config "$tmp/cfg_gz.json"
says "the shard named" "train-3.jsonl.gz: read error"
rm "$tmp/train-3.jsonl.gz"
check "worker on a pattern that matches nothing" 65 "$worker" --config "$tmp/cfg_gz.json" \
    --data-train "$tmp/none-*.jsonl"
says "the pattern named" "none-*.jsonl: no file matches the pattern"

check "top-k" 0 "$predict" -m "$tmp/ck/job" -k 3 "$tmp/eval.jsonl"
python3 - "$tmp/out" <<'PY' || fail=1
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); s = [t["score"] for t in r["top"]]
    assert len(r["top"]) == 3 and s == sorted(s, reverse=True) and abs(sum(s) - 1) < 1e-4, r
    assert r["top"][0]["label"] == r["label"] and len({t["label"] for t in r["top"]}) == 3, r
print("ok   top-k: 3 distinct labels, by score, summing to 1")
PY

# Bad lines are skipped with file:line, the rest keep their line numbers; --strict stops.
{ head -n 3 "$tmp/eval.jsonl"; echo '{"text": 5}'; echo 'not json'; echo '';
  echo '{"text": "coach goal match", "label": "weather"}'; sed -n 4p "$tmp/eval.jsonl"; } >"$tmp/bad.jsonl"
check "malformed lines skipped" 0 "$predict" -m "$tmp/ck/job" "$tmp/bad.jsonl" --report "$tmp/p3.json"
says "line of a bad field" "bad.jsonl:4: non-string field \"text\""
says "line of bad JSON" "bad.jsonl:5: bad JSON at column"
says "unknown label" "bad.jsonl:7: label \"weather\" is not one of the model's"
[ "$(python3 -c 'import json,sys; print([json.loads(l)["line"] for l in open(sys.argv[1])])' "$tmp/out")" = "[1, 2, 3, 7, 8]" ] ||
    { echo "FAIL line numbers after skipped lines: $(cat "$tmp/out")"; fail=1; }
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["examples"] == 4 and r["unknown_labels"] == 1 and r["malformed_lines"] == 2, r' "$tmp/p3.json" ||
    { echo "FAIL report counts"; fail=1; }
check "strict mode" 65 "$predict" -m "$tmp/ck/job" --strict "$tmp/bad.jsonl"
# Unlabelled JSONL (no label, null, ""; other field names) is classified, not evaluated.
python3 - "$tmp/eval.jsonl" "$tmp/unl.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][:3]
with open(sys.argv[2], "w") as f:
    for r, lab in zip(rows, ({}, {"y": None}, {"y": ""})):
        f.write(json.dumps({"body": r["text"], **lab}) + "\n")
PY
check "unlabelled JSONL" 0 "$predict" -m "$tmp/ck/job" --text-field body --label-field y "$tmp/unl.jsonl" --report "$tmp/p4.json"
says "unlabelled: nothing to evaluate" "no labels to evaluate against"
[ "$(cut -c1-10 "$tmp/out" | tr '\n' ' ')" = '{"line":1, {"line":2, {"line":3, ' ] && [ ! -e "$tmp/p4.json" ] ||
    { echo "FAIL unlabelled lines: $(cut -c1-40 "$tmp/out")"; fail=1; }
# A 9 MiB line (over the 8 MiB limit) is refused and skipped; memory stays bounded; NUL bytes in
# plain text are refused; the lines after keep their numbers.
python3 -c 'import sys; sys.stdout.write("x" * (9 << 20) + "\nsecond line\nbad\0nul\nfourth\n")' >"$tmp/long.txt"
check "overlong line" 0 "$predict" -m "$tmp/ck/job" "$tmp/long.txt"
says "overlong line named" "long.txt:1: line longer than 8388608 bytes"
says "NUL named" "long.txt:3: NUL byte"
[ "$(cut -c1-10 "$tmp/out" | tr '\n' ' ')" = '{"line":2, {"line":4, ' ] || { echo "FAIL after the long line: $(cut -c1-40 "$tmp/out")"; fail=1; }
check "several files name each" 0 "$predict" -m "$tmp/ck/job" "$tmp/eval.jsonl" "$tmp/eval.tsv"
grep -q '^{"file":".*eval.tsv","line":2,' "$tmp/out" || { echo "FAIL no file field"; fail=1; }

# A corrupt newest checkpoint is skipped from the job directory and refused by name.
cp -r "$tmp/ck/job" "$tmp/ck/bad"
printf '\xff' | dd of="$tmp/ck/bad/step-40/model.safetensors" bs=1 seek=200 conv=notrunc status=none
check "corrupt newest skipped" 0 "$predict" -m "$tmp/ck/bad" -q "$tmp/eval.jsonl"
check "corrupt newest skipped (stderr)" 0 "$predict" -m "$tmp/ck/bad" "$tmp/eval.jsonl"
says "falls back to step 20" "step-20 (step 20)"
cp -r "$tmp/ck/job/step-40" "$tmp/my-model"   # a step directory copied under another name
printf '\xff' | dd of="$tmp/my-model/optimizer.safetensors" bs=1 seek=200 conv=notrunc status=none
check "a copied step directory (optimizer state not needed)" 0 "$predict" -m "$tmp/my-model" "$tmp/eval.jsonl"
says "its step from state.json" "my-model (step 40)"
cmp -s "$tmp/out" "$tmp/pred_job.jsonl" || { echo "FAIL copied model predicts differently"; fail=1; }
check "corrupt step directory refused" 65 "$predict" -m "$tmp/ck/bad/step-40" "$tmp/eval.jsonl"
says "names the file" "model.safetensors"

# Model cards: missing (an older checkpoint) or wrong, with the manifest made to match.
rehash() { (cd "$1" && sha256sum state.json model.safetensors optimizer.safetensors \
    $(ls | grep -E '^(config.json|vocab.txt)$') >MANIFEST.sha256); }
mk() { rm -rf "$tmp/ck/$1"; mkdir -p "$tmp/ck/$1"; cp -r "$tmp/ck/job/step-40" "$tmp/ck/$1/"; echo "$tmp/ck/$1/step-40"; }
d=$(mk old); rm "$d/config.json"; rehash "$d"
check "checkpoint without a card" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "says what is missing" "has no config.json"
d=$(mk vs); sed -i 's/"vocabSize": [0-9]*/"vocabSize": 7/' "$d/config.json"; rehash "$d"
check "card disagrees with vocab.txt" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "names vocabSize" "says model.vocabSize 7"
d=$(mk hid); sed -i 's/"hidden": 16/"hidden": 24/' "$d/config.json"; rehash "$d"
check "card disagrees with the weights" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "counts the parameters" "describes 7507 parameters, model.safetensors holds 4515"
d=$(mk huge); sed -i 's/"hidden": 16/"hidden": 8192/; s/"layers": 1,/"layers": 64,/; s/"ffn": 64/"ffn": 32768/' "$d/config.json"; rehash "$d"
check "a card sized to exhaust memory is refused, not allocated" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "says why" "model.safetensors holds 4515"
# A checkpoint from before named tensors (one flat "params") still loads, to the same predictions.
d=$(mk flat)
python3 - "$d/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = {k: v for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"}
assert list(hdr)[0] == "wte" and len(hdr) == 18, list(hdr)   # named, in model.c's order
data = b[8 + n:]
assert sorted(v["data_offsets"] for v in hdr.values())[-1][1] == len(data)
h = json.dumps({"params": {"dtype": "F32", "shape": [len(data) // 4], "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
rehash "$d"
check "an old checkpoint (flat params)" 0 "$predict" -m "$d" -q "$tmp/eval.jsonl"
cmp -s "$tmp/out" "$tmp/pred_job.jsonl" || { echo "FAIL flat params predict differently"; fail=1; }
# A diverged run's weights (one infinity in clsb), manifest and all in order: refused by name,
# not predicted as "score": nan, which no JSON reader takes.
d=$(mk inf)
python3 - "$d/model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
lo = json.loads(b[8:8 + n])["clsb"]["data_offsets"][0]
b[8 + n + lo:8 + n + lo + 4] = struct.pack("<f", float("inf"))
open(sys.argv[1], "wb").write(bytes(b))
PY
rehash "$d"
check "weights with an infinity" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "names the tensor" 'tensor "clsb" holds inf at element 0: the run that wrote it diverged'
d=$(mk typ); sed -i 's/"transformer"/"lstm"/' "$d/config.json"; rehash "$d"
check "card with a bad field" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "names model.type" "model.type: must be"
d=$(mk tam); sed -i 's/"hidden": 16/"hidden": 24/' "$d/config.json"
check "card changed after writing" 65 "$predict" -m "$d" "$tmp/eval.jsonl"
says "hash mismatch" "config.json"

# --serve: the same predictions over HTTP (KServe's V1 protocol), refusals with 4xx, SIGTERM.
check "--serve takes no files" 64 "$predict" -m "$tmp/ck/job" --serve 0 "$tmp/eval.jsonl"
check "--serve with a bad --bind" 64 "$predict" -m "$tmp/ck/job" --serve 0 --bind localhost
GANTRY_PREDICT_TEST_HOLD="$tmp/hold" "$predict" -m "$tmp/ck/job" --serve 0 --bind 127.0.0.1 --batch 5 2>"$tmp/serve.err" &
spid=$!
for _ in $(seq 100); do grep -q 'serving job on' "$tmp/serve.err" && break; sleep 0.1; done
port=$(sed -n 's/.*serving job on 127.0.0.1:\([0-9]*\):.*/\1/p' "$tmp/serve.err")
if [ -z "$port" ]; then
    echo "FAIL the server did not start: $(cat "$tmp/serve.err")"; fail=1
else
    python3 - "$port" "$tmp/eval.jsonl" "$tmp/pred_job.jsonl" "$tmp/hold" "$spid" <<'PY' || fail=1
import json, os, signal, sys, threading, time, urllib.request, urllib.error
port, texts = sys.argv[1], [json.loads(l)["text"] for l in open(sys.argv[2])][:40]
want = [json.loads(l) for l in open(sys.argv[3])][:40]
base = f"http://127.0.0.1:{port}"
def call(path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
st, b = call("/v1/models/job:predict", {"instances": texts[:20] + [{"text": t} for t in texts[20:]]})
got = json.loads(b)["predictions"] if st == 200 else []
assert st == 200 and json.loads(b)["model"] == "job", (st, b[:200])
assert [(g["label"], g["score"]) for g in got] == [(w["label"], w["score"]) for w in want], "server != file mode"
st, b = call("/predict", {"instances": texts[:3], "top_k": 3})
assert st == 200 and all(len(p["top"]) == 3 for p in json.loads(b)["predictions"]), b
st, b = call("/v1/models/job")
info = json.loads(b) if st == 200 else {}
assert info.get("ready") is True and info["labels"] == ["cooking", "sports", "tech"], b
assert info["inputs"] == {"text": "text"}, b
for body, raw, code, text in [
        (None, b"{not json", 400, "JSON object"), ({"instances": []}, None, 400, "instances"),
        ({"instances": [5]}, None, 400, "instances[0]"), ({"instances": ["a", {"txt": "b"}]}, None, 400, "instances[1]"),
        ({"instances": ["a"], "top_k": 0}, None, 400, "top_k"),
        (None, b'{"instances": ["' + b"x" * (17 << 20) + b'"]}', 413, "16777216 bytes"),
        (None, b'{"instances": [' + b"{}," * 170000 + b'"a"]}', 413, "JSON values")]:
    st, b = call("/v1/models/job:predict", body, raw)
    assert st == code and text in json.loads(b)["error"], (code, text, st, b[:200])
def allow(path, data=None):
    try:
        urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=30)
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Allow")
assert allow("/v1/models/job:predict") == (405, "POST")  # GET where only POST is taken
assert allow("/healthz", b"{}") == (405, "GET, HEAD")    # and the other way round
st, b = call("/v1/models/other:predict", {"instances": ["a"]})
assert st == 404, st
st, b = call("/metrics")
m = dict(l.rsplit(" ", 1) for l in b.splitlines() if not l.startswith("#"))
assert m['gantry_predict_requests_total{outcome="ok"}'] == "2" and m["gantry_predict_documents_total"] == "43", m
assert int(m['gantry_predict_requests_total{outcome="error"}']) == 10, m
print("ok   --serve: same predictions as file mode; 400/404/405/413 with the reason; /v1/models/job, /metrics")

# While a classification holds the model (the test hook: until the hold file goes), /healthz,
# the model's page and /metrics answer, and a second request waits for its turn.
def in_flight():
    st, b = call("/metrics")
    return int(dict(l.rsplit(" ", 1) for l in b.splitlines() if not l.startswith("#"))["gantry_predict_requests_in_flight"])
def wait_for(n):
    for _ in range(3000):
        if in_flight() == n:
            return
        time.sleep(0.01)
    raise AssertionError(f"in_flight never reached {n}")
open(sys.argv[4], "w").close()
res = {}
def post(k, docs):
    res[k] = call("/v1/models/job:predict", {"instances": docs})
t1 = threading.Thread(target=post, args=(1, texts[:10])); t1.start()
wait_for(1)
assert call("/healthz") == (200, "ok\n") and call("/v1/models/job")[0] == 200
t2 = threading.Thread(target=post, args=(2, texts[10:40])); t2.start()
wait_for(2)
assert t1.is_alive() and t2.is_alive()
os.unlink(sys.argv[4])
t1.join(60); t2.join(60)
for k, sl in ((1, slice(0, 10)), (2, slice(10, 40))):
    st, b = res[k]
    assert st == 200 and [(g["label"], g["score"]) for g in json.loads(b)["predictions"]] == \
        [(w["label"], w["score"]) for w in want[sl]], (k, st, b[:200])
wait_for(0)
print("ok   --serve: /healthz and /metrics answer while a request is classified; requests queue")

# At most 8 predictions wait for the model; the 9th is told to come back (503) at once, so the
# connections never all wait and /healthz is still answered.
open(sys.argv[4], "w").close()
ts = [threading.Thread(target=post, args=(10 + i, texts[:2])) for i in range(8)]
for t in ts:
    t.start()
wait_for(8)
st, b = call("/v1/models/job:predict", {"instances": texts[:2]})
assert st == 503 and "busy" in json.loads(b)["error"], (st, b)
assert call("/healthz") == (200, "ok\n")
os.unlink(sys.argv[4])
for t in ts:
    t.join(60)
assert all(res[10 + i][0] == 200 for i in range(8)), [res[10 + i][0] for i in range(8)]
wait_for(0)
print("ok   --serve: a 9th waiting prediction gets 503 at once; /healthz answers")

# SIGTERM while a request's body is still arriving: no new connections, and that request is
# still read and answered (drain).
import socket
body = json.dumps({"instances": texts[:5]}).encode()
sk = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
sk.sendall(b"POST /v1/models/job:predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
wait_for(1)
os.kill(int(sys.argv[5]), signal.SIGTERM)
for _ in range(1000):
    try:
        call("/healthz")
        time.sleep(0.01)
    except ConnectionResetError:  # queued in the backlog as the listening socket closed
        time.sleep(0.01)          # (not served either): poll until refused
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionResetError):  # the same, reset while the request
            time.sleep(0.01)                            # was still being sent (urllib wraps it)
            continue
        assert isinstance(e.reason, ConnectionRefusedError), e
        break
else:
    raise AssertionError("still accepting connections after SIGTERM")
sk.sendall(body[10:])
reply = b""
while chunk := sk.recv(65536):
    reply += chunk
head, _, rb = reply.partition(b"\r\n\r\n")
assert head.startswith(b"HTTP/1.1 200"), reply[:200]
assert [g["label"] for g in json.loads(rb)["predictions"]] == [w["label"] for w in want[:5]], rb[:200]
print("ok   --serve: SIGTERM stops listening and still answers the request it was receiving")
PY
fi
# The script above sent SIGTERM; a second one could land during exit, so only if it did not.
for _ in $(seq 600); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
kill -TERM "$spid" 2>/dev/null || true
src=0; wait "$spid" || src=$?
[ "$src" = 0 ] && grep -q 'Terminated: stopped after 13 requests (11 refused), 104 documents' "$tmp/serve.err" &&
    echo "ok   --serve stops on SIGTERM with exit 0" || { echo "FAIL --serve on SIGTERM: exit $src: $(tail -2 "$tmp/serve.err")"; fail=1; }

# The n-gram model goes through the same card.
check "n-gram trains" 0 "$worker" --config "$tmp/cfg.json" --model-type ngram --model-buckets 256 \
    --checkpoint-dir "$tmp/ck/ngram" --report "$tmp/rn.json"
check "n-gram predicts" 0 "$predict" -m "$tmp/ck/ngram" "$tmp/eval.jsonl" --report "$tmp/pn.json"
compare "n-gram: same evaluation" "$tmp/rn.json" "$tmp/pn.json" "$n_eval"
# Label smoothing and class weights change training, not the evaluation's loss: the worker
# reports the plain cross-entropy, as gantry-predict (which knows of neither) computes it.
check "n-gram trains with label smoothing and class weights" 0 "$worker" --config "$tmp/cfg.json" \
    --model-type ngram --model-buckets 256 --label-smoothing 0.3 --class-weight balanced \
    --checkpoint-dir "$tmp/ck/smooth" --report "$tmp/rs.json"
says "class weights logged" "class weights (balanced):"
python3 - "$tmp/train.jsonl" "$tmp/rs.json" <<'PY' || fail=1
import collections, json, sys
n = collections.Counter(json.loads(l)["label"] for l in open(sys.argv[1]))
got = json.load(open(sys.argv[2]))["train"]["class_weight"]
want = {k: sum(n.values()) / (len(n) * c) for k, c in n.items()}
assert got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-5 for k in want), (got, want)
print("ok   report's class weights: n / (K n_k) of data.train:", {k: round(v, 4) for k, v in got.items()})
PY
check "smoothed model predicts" 0 "$predict" -m "$tmp/ck/smooth" "$tmp/eval.jsonl" --report "$tmp/ps.json"
compare "smoothing and weights: same evaluation" "$tmp/rs.json" "$tmp/ps.json" "$n_eval"
python3 -c 'import json,sys; a,b=(json.load(open(p))["train"]["final_loss"] for p in sys.argv[1:]); assert abs(a-b) > 1e-3, (a, b)' "$tmp/rn.json" "$tmp/rs.json" &&
    echo "ok   smoothing and weights changed the training loss" || { echo "FAIL smoothing and weights did not reach training"; fail=1; }

check "no --model" 64 "$predict" "$tmp/eval.jsonl"
check "bad --top-k" 64 "$predict" -m "$tmp/ck/job" -k 0 "$tmp/eval.jsonl"
check "bad --format" 64 "$predict" -m "$tmp/ck/job" --format xml "$tmp/eval.jsonl"
check "no such model" 66 "$predict" -m "$tmp/nope" "$tmp/eval.jsonl"
check "empty job directory" 66 "$predict" -m "$tmp" "$tmp/eval.jsonl"
check "no such input" 66 "$predict" -m "$tmp/ck/job" "$tmp/none.jsonl"
check "unwritable output" 73 "$predict" -m "$tmp/ck/job" -o "$tmp/no/dir/p.jsonl" "$tmp/eval.jsonl"
check "help" 0 "$predict" --help
grep -q 'Usage: gantry-predict --model DIR' "$tmp/out" || { echo "FAIL help text"; fail=1; }
exit $fail
