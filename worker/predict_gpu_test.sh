#!/usr/bin/env bash
# gantry-predict --device cuda: a Transformer trained on the CPU classifies the same texts on the
# GPU (in CI, the CUDA emulator's gantry-predict-emu; on a GPU machine, a CUDA build's
# gantry-predict) as on the CPU: same labels, probabilities to 1e-4 in fp32; in bf16 to 3e-2
# with at most 2 % of labels different. The n-gram model too: same labels, probabilities to 1e-4;
# with --precision bf16 it is refused (exit 78: the n-gram model runs in fp32). A multi-label
# model's sigmoids and a regression's outputs too, to 1e-4.
# Usage: predict_gpu_test.sh /path/to/gantry-worker /path/to/gantry-predict-with-cuda
#        /path/to/worker/testdata
# Exits 77 (skipped) when the binary finds no GPU.
set -euo pipefail
worker=$1 predict=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cli_testlib.sh"

for i in $(seq 20); do cat "$data/tiny.jsonl"; done >"$tmp/docs.jsonl"
check "train (CPU)" 0 "$worker" --data-train "$data/tiny.jsonl" --data-eval "$data/tiny.jsonl" \
    --data-min-freq 1 --model-hidden 32 --model-heads 2 --model-layers 2 --model-max-seq-len 24 \
    --max-steps 20 --batch-size 3 --learning-rate 3e-3 --threads 1 --log-interval 100 \
    --checkpoint-dir "$tmp/ck/tf" --checkpoint-interval-steps 20
check "predict on the CPU" 0 "$predict" -m "$tmp/ck/tf" -k 2 -q --batch 7 "$tmp/docs.jsonl"
cp "$tmp/out" "$tmp/cpu.jsonl"
"$predict" -m "$tmp/ck/tf" -k 2 -q --device cuda "$tmp/docs.jsonl" >"$tmp/gpu.jsonl" 2>"$tmp/err" || {
    rc=$?
    if [ "$rc" = 78 ] && grep -q 'no CUDA device is visible' "$tmp/err"; then
        echo "SKIP: no GPU: $(tail -1 "$tmp/err")"; exit 77
    fi
    echo "FAIL predict --device cuda: exit $rc"; tail -5 "$tmp/err"; exit 1
}
echo "ok   predict on the GPU (fp32)"
check "predict on the GPU (bf16)" 0 "$predict" -m "$tmp/ck/tf" -k 2 -q --device cuda \
    --precision bf16 --batch 5 "$tmp/docs.jsonl"
cp "$tmp/out" "$tmp/bf16.jsonl"
python3 - "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" "$tmp/bf16.jsonl" <<'PY' || fail=1
import json, sys
cpu, gpu, bf = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
def diff(a, b):
    return max(abs({t["label"]: t["score"] for t in x["top"]}[k] - {t["label"]: t["score"] for t in y["top"]}[k])
               for x, y in zip(a, b) for k in ("ham", "spam"))
assert len(cpu) == len(gpu) == len(bf) == 120
assert [r["label"] for r in gpu] == [r["label"] for r in cpu], "fp32 labels differ"
d32, d16 = diff(cpu, gpu), diff(cpu, bf)
changed = sum(a["label"] != b["label"] for a, b in zip(cpu, bf))
assert d32 < 1e-4 and d16 < 3e-2 and changed <= 2, (d32, d16, changed)
print(f"ok   GPU = CPU: fp32 probabilities within {d32:.1e}, bf16 within {d16:.1e} ({changed} labels differ)")
PY
check "n-gram train" 0 "$worker" --data-train "$data/tiny.jsonl" --data-min-freq 1 --model-type ngram \
    --model-buckets 64 --max-steps 4 --threads 1 --checkpoint-dir "$tmp/ck/ng" --checkpoint-interval-steps 4
check "n-gram predicts on the CPU" 0 "$predict" -m "$tmp/ck/ng" -k 2 -q "$tmp/docs.jsonl"
cp "$tmp/out" "$tmp/ng-cpu.jsonl"
check "n-gram predicts on the GPU" 0 "$predict" -m "$tmp/ck/ng" -k 2 -q --device cuda --batch 7 \
    "$tmp/docs.jsonl"
python3 - "$tmp/ng-cpu.jsonl" "$tmp/out" <<'PY' || fail=1
import json, sys
cpu, gpu = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(cpu) == len(gpu) == 120
assert [r["label"] for r in gpu] == [r["label"] for r in cpu], "n-gram labels differ"
d = max(abs(a["score"] - b["score"]) for x, y in zip(cpu, gpu) for a, b in zip(x["top"], y["top"]))
assert d < 1e-4, d
print(f"ok   n-gram GPU = CPU: probabilities within {d:.1e}")
PY
check "n-gram with bf16 refused on the GPU" 78 "$predict" -m "$tmp/ck/ng" --device cuda \
    --precision bf16 "$tmp/docs.jsonl"
says "names training.precision" "bf16 is for model.type transformer"
# Multi-label (the tiny set's label strings as one-label lists) and regression (spam 1, ham 0):
# the GPU's sigmoids and outputs are the CPU's.
python3 - "$data/tiny.jsonl" "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(f"{sys.argv[2]}/num.jsonl", "w") as f:
    f.writelines(json.dumps({"text": r["text"], "label": float(r["label"] == "spam")}) + "\n"
                 for r in rows)
PY
check "multi-label train" 0 "$worker" --task multi-label-classification \
    --data-train "$data/tiny.jsonl" --data-min-freq 1 --model-hidden 32 --model-heads 2 \
    --model-layers 1 --max-steps 10 --threads 1 --checkpoint-dir "$tmp/ck/ml"
check "regression train" 0 "$worker" --task regression --data-train "$tmp/num.jsonl" \
    --data-min-freq 1 --model-hidden 32 --model-heads 2 --model-layers 1 --max-steps 10 \
    --threads 1 --checkpoint-dir "$tmp/ck/rg"
for m in ml rg; do
    check "$m predicts on the CPU" 0 "$predict" -m "$tmp/ck/$m" -k 2 -q "$tmp/docs.jsonl"
    cp "$tmp/out" "$tmp/$m-cpu.jsonl"
    check "$m predicts on the GPU" 0 "$predict" -m "$tmp/ck/$m" -k 2 -q --device cuda --batch 7 \
        "$tmp/docs.jsonl"
    cp "$tmp/out" "$tmp/$m-gpu.jsonl"
done
python3 - "$tmp" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
ml_c, ml_g, rg_c, rg_g = ([json.loads(l) for l in open(f"{d}/{n}.jsonl")]
                          for n in ("ml-cpu", "ml-gpu", "rg-cpu", "rg-gpu"))
assert len(ml_c) == len(ml_g) == len(rg_c) == len(rg_g) == 120
assert [r["labels"] for r in ml_g] == [r["labels"] for r in ml_c], "multi-label sets differ"
dm = max(abs(a["score"] - b["score"]) for x, y in zip(ml_c, ml_g) for a, b in zip(x["top"], y["top"]))
dr = max(abs(x["value"] - y["value"]) for x, y in zip(rg_c, rg_g))
assert dm < 1e-4 and dr < 1e-4, (dm, dr)
print(f"ok   multi-label GPU = CPU: sigmoids within {dm:.1e}; regression outputs within {dr:.1e}")
PY
exit $fail
