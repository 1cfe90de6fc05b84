#!/usr/bin/env bash
# Interop: a checkpoint is a model PyTorch can run. gantry-worker trains small Transformers (mean
# and [CLS] pooling); Python loads their model.safetensors with the `safetensors` package (named
# tensors: the state dict of hack/torch_ref.py's network), their config.json and vocab.txt, and
# runs the PyTorch reference on the same texts; its probabilities must equal gantry-predict's for
# every class (to 2e-5) and give the same labels.
# Usage: predict_torch_test.sh /path/to/gantry-worker /path/to/gantry-predict
# Exits 77 (skipped) when the venv with PyTorch cannot be built here (hack/pyenv.sh torch).
set -euo pipefail
worker=$1 predict=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
if ! venv=$("$repo/hack/pyenv.sh" torch); then
    echo "SKIP: could not build the Python venv with PyTorch (hack/pyenv.sh torch); needs PyPI once"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$here/cli_testlib.sh"

# Lowercase words only, shorter than maxSeqLen: the tokenizer is then a split on spaces, which
# the Python side does itself (WordPiece on a built vocab maps a word to itself or [UNK]).
awk -v seed=11 'BEGIN {
    srand(seed)
    split("red green blue cyan pink gold", w1); split("cat dog cow hen pig fox", w2)
    split("one two six ten four nine", w3); split("sports cooking tech", lab)
    for (i = 0; i < 260; i++) {
        k = int(rand() * 3) + 1; t = ""
        for (j = 0; j < 3 + int(rand() * 12); j++) {
            r = rand(); kk = r < 0.5 ? k : int(rand() * 3) + 1
            t = t (j ? " " : "") (kk == 1 ? w1[int(rand() * 6) + 1] : (kk == 2 ? w2[int(rand() * 6) + 1] : w3[int(rand() * 6) + 1]))
        }
        if (i % 17 == 0) t = t " zebra"        # a word the vocab will not have: [UNK]
        printf "{\"text\": \"%s\", \"label\": \"%s\"}\n", t, lab[k] > (i < 200 ? "/dev/stdout" : "/dev/stderr")
    }
}' >"$tmp/train.jsonl" 2>"$tmp/eval.jsonl"
grep -v zebra "$tmp/train.jsonl" >"$tmp/t" && mv "$tmp/t" "$tmp/train.jsonl"

for pool in mean cls; do
    check "train ($pool pooling)" 0 "$worker" --data-train "$tmp/train.jsonl" --data-eval "$tmp/eval.jsonl" \
        --data-min-freq 1 --model-hidden 16 --model-heads 2 --model-layers 2 --model-max-seq-len 24 \
        --model-pooling "$pool" --max-steps 30 --batch-size 8 --learning-rate 3e-3 --threads 1 \
        --log-interval 100 --checkpoint-dir "$tmp/ck/$pool" --checkpoint-interval-steps 30
    check "gantry-predict ($pool)" 0 "$predict" -m "$tmp/ck/$pool" -k 3 -q "$tmp/eval.jsonl"
    cp "$tmp/out" "$tmp/pred-$pool.jsonl"
    PYTHONPATH="$repo/hack" "$venv/bin/python3" - "$tmp/ck/$pool/step-30" "$tmp/eval.jsonl" \
        "$tmp/pred-$pool.jsonl" <<'PY' || fail=1
import json, sys
import torch
from safetensors.torch import load_file
import torch_ref

d, texts = sys.argv[1], [json.loads(l)["text"] for l in open(sys.argv[2])]
gantry = [json.loads(l) for l in open(sys.argv[3])]
card = json.load(open(f"{d}/config.json"))
vocab = {w: i for i, w in enumerate(open(f"{d}/{card['tokenizer']['vocab']}").read().splitlines())}
m = card["model"]
cfg = dict(V=m["vocabSize"], K=len(card["labels"]), maxT=m["maxSeqLen"], C=m["hidden"],
           L=m["layers"], NH=m["heads"], F=m["ffn"], pool=m["pooling"])
p = load_file(f"{d}/model.safetensors")
want = {n: tuple(s) for n, s, _ in torch_ref.tensor_table(cfg)}
assert {n: tuple(t.shape) for n, t in p.items()} == want, "tensor names or shapes differ from torch_ref"
rows = [[vocab["[CLS]"]] + [vocab.get(w, vocab["[UNK]"]) for w in t.split()] + [vocab["[SEP]"]]
        for t in texts]
T = max(map(len, rows))
assert T <= cfg["maxT"]
tokens = torch.tensor([r + [vocab["[PAD]"]] * (T - len(r)) for r in rows])
lens = torch.tensor([len(r) for r in rows])
with torch.no_grad():
    probs = torch.softmax(torch_ref.forward(p, cfg, tokens, lens)[0].double(), -1)
worst, same = 0.0, 0
for i, g in enumerate(gantry):
    ours = {t["label"]: t["score"] for t in g["top"]}
    ref = {card["labels"][k]: probs[i, k].item() for k in range(cfg["K"])}
    worst = max(worst, max(abs(ours[k] - ref[k]) for k in ref))
    same += g["label"] == max(ref, key=ref.get)
assert len(gantry) == len(texts) and worst < 2e-5 and same == len(texts), (worst, same, len(texts))
print(f"ok   PyTorch on the checkpoint ({cfg['pool']} pooling): {len(texts)} texts, same labels, "
      f"largest probability difference {worst:.2e}")
PY
done
exit $fail
