#!/usr/bin/env bash
# Two ranks on two GPUs of one node over NCCL (label gpu): gantry-run --nproc 2 starts
# gantry-worker --device cuda twice (LOCAL_RANK 0 and 1 select GPU 0 and 1, the gradients are
# all-reduced on the device); with batch 3 each they must train like one GPU with batch 6 (same
# examples per step, the mean gradient), so the final losses agree, and like the CPU.
# Then the all-reduce overlapped with backward (--grad-bucket-mb 0.001: every unit its own
# bucket, reduced by the comm thread while backward goes on) must end with the same weights, bit
# for bit, as reducing after backward (--grad-bucket-mb 0): sums of two ranks are exact in
# any order; and 2 ranks in bf16 (GANTRY_PRECISION=bf16) follow fp32 within 3e-2.
# Exits 77 (skipped) with fewer than two GPUs or a build without CUDA. On the CUDA emulator
# (gantry-worker-emu, GANTRY_EMU_DEVICES=2) it runs in every CI build without CUDA.
# Usage: train_gpu_nccl_test.sh /path/to/gantry-worker /path/to/worker/testdata /path/to/gantry-run
set -euo pipefail
bin=$1 data=$2 run=$3
# GANTRY_EMU_DEVICES: the emulated GPUs of gantry-worker-emu (kernels/emu/model.cmake)
ngpu=${GANTRY_EMU_DEVICES:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
if [ "${ngpu:-0}" -lt 2 ]; then
    echo "SKIP: ${ngpu:-0} GPU visible, need 2"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 32, "heads": 4, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 6, "learningRate": "3e-3", "logInterval": 1, "threads": 1,
  "scaleLearningRate": false}}
JSON
rc=0
"$bin" --config "$tmp/cfg.json" --device cpu --batch-size 6 --report "$tmp/c.json" \
    >/dev/null 2>"$tmp/ce" || rc=$?
"$bin" --config "$tmp/cfg.json" --device cuda --batch-size 6 --report "$tmp/r1.json" \
    >/dev/null 2>"$tmp/e1" || rc=$?
[ "$rc" = 78 ] && grep -q 'built without CUDA' "$tmp/e1" && { echo "SKIP: built without CUDA"; exit 77; }
"$run" --nproc 2 -- "$bin" --config "$tmp/cfg.json" --device cuda --batch-size 3 \
    --report "$tmp/r2.json" >/dev/null 2>"$tmp/e2" || rc=$?
if [ "$rc" != 0 ]; then
    echo "FAIL: exit $rc"; tail -n 20 "$tmp/ce" "$tmp/e1" "$tmp/e2"; exit 1
fi
# overlapped vs after backward, and bf16; a checkpoint at the end holds each run's weights
for v in after:0 each:0.001; do
    "$run" --nproc 2 -- "$bin" --config "$tmp/cfg.json" --grad-bucket-mb "${v#*:}" \
        --device cuda --batch-size 3 --checkpoint-dir "$tmp/ck-${v%%:*}" \
        --report "$tmp/r-${v%%:*}.json" >/dev/null 2>"$tmp/e-${v%%:*}" || rc=$?
done
GANTRY_PRECISION=bf16 "$run" --nproc 2 -- "$bin" --config "$tmp/cfg.json" --device cuda \
    --batch-size 3 --report "$tmp/r-bf16.json" >/dev/null 2>"$tmp/e-bf16" || rc=$?
if [ "$rc" != 0 ]; then
    echo "FAIL: exit $rc (overlap/bf16 runs)"; tail -n 20 "$tmp"/e-*; exit 1
fi
python3 - "$tmp" <<'PY'
import glob, json, struct, sys
t = sys.argv[1]
def weights(d):  # the tensors' bytes of the newest checkpoint (the header may carry run metadata)
    f = sorted(glob.glob(f"{t}/{d}/**/model.safetensors", recursive=True))[-1]
    b = open(f, "rb").read()
    return b[8 + struct.unpack("<Q", b[:8])[0]:]
a, e = weights("ck-after"), weights("ck-each")
assert len(a) > 0 and a == e, "overlapped all-reduce changed the weights"
r32, r16 = (json.load(open(f"{t}/r-{k}.json"))["train"] for k in ("after", "bf16"))
rel = abs(r16["final_loss"] - r32["final_loss"]) / max(1.0, abs(r32["final_loss"]))
assert rel < 3e-2, (r32["final_loss"], r16["final_loss"])
print("ok   2 ranks: overlapped all-reduce = after backward, bit for bit (%d bytes); bf16 final "
      "loss %.6f vs fp32 %.6f" % (len(a), r16["final_loss"], r32["final_loss"]))
PY
python3 - "$tmp/c.json" "$tmp/r1.json" "$tmp/r2.json" <<'PY'
import json, sys
c, a, b = (json.load(open(p))["train"] for p in sys.argv[1:])
assert a["steps"] == b["steps"] == 6 and b["world_size"] == 2, (a, b)
rel = lambda x, y: abs(x - y) / max(1.0, abs(y))
assert rel(b["final_loss"], a["final_loss"]) < 2e-3, (a["final_loss"], b["final_loss"])
assert rel(a["final_loss"], c["final_loss"]) < 2e-3, (a["final_loss"], c["final_loss"])
print("ok   2 GPUs over NCCL, batch 3 each = 1 GPU batch 6 = CPU (final loss %.6f, %.6f, %.6f)"
      % (b["final_loss"], a["final_loss"], c["final_loss"]))
PY
