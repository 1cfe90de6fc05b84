#!/usr/bin/env bash
# A batch that does not fit in the GPU's memory is a configuration error, not a crash mid-setup or
# a gang restarted until backoffLimit (each restart would fail the same way): gantry-worker
# --device cuda exits 78 at once, and the message gives the memory the model needs, what is free
# and a batch that fits; that batch then trains. Run on the CUDA emulator with a small device
# (GANTRY_EMU_MEM_MB; GANTRY_EMU_MEM_OTHERS_MB: memory "another process" holds), so it is
# emu-only: a real GPU's memory is what it is.
# Usage: train_gpu_mem_test.sh /path/to/gantry-worker-emu /path/to/worker/testdata
set -euo pipefail
bin=$1 data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
cfg() { # cfg BATCH [PRECISION]: a tiny model at that batch size
    cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 32, "heads": 4, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 2, "batchSize": $1, "learningRate": "3e-3", "threads": 1,
  "device": "cuda", "precision": "${2:-bf16}", "report": "$tmp/report.json"}}
JSON
}
# run MEM_MB OTHERS_MB: gantry-worker on an emulated GPU of MEM_MB MiB; sets rc, err in $tmp/err
run() {
    rc=0
    GANTRY_EMU_MEM_MB=$1 GANTRY_EMU_MEM_OTHERS_MB=$2 "$bin" --config "$tmp/cfg.json" \
        >/dev/null 2>"$tmp/err" || rc=$?
}
fits() { sed -n 's/.*use a batch of \([0-9]*\) or fewer.*/\1/p' "$tmp/err" | tail -1; }

for prec in bf16 fp32; do
    cfg 20000 $prec
    run 512 0
    k=$(fits)
    if [ "$rc" = 78 ] && grep -q "out of GPU memory: a batch of 20000 x 24 tokens needs" "$tmp/err" &&
       grep -q "training.batchSize" "$tmp/err" && [ -n "$k" ] && [ "$k" -lt 20000 ]; then
        echo "ok   $prec: batch 20000 on a 512 MiB GPU refused (78), a batch of $k said to fit"
    else
        echo "FAIL $prec: batch 20000 on a 512 MiB GPU: exit $rc"; tail -3 "$tmp/err"; fail=1
        continue
    fi
    # the batch it names does fit: trains, evaluates and exits 0
    cfg "$k" $prec
    run 512 0
    if [ "$rc" = 0 ] && grep -q '"accuracy"' "$tmp/report.json"; then
        echo "ok   $prec: batch $k (the one it named) trains on the same GPU"
    else
        echo "FAIL $prec: batch $k (named as fitting): exit $rc"; tail -3 "$tmp/err"; fail=1
    fi
    # and one a tenth larger than what fits at all does not (the estimate is not loose)
    big=$((k * 100 / 90 * 11 / 10 + 1))
    cfg "$big" $prec
    run 512 0
    [ "$rc" = 78 ] && echo "ok   $prec: batch $big refused (78)" ||
        { echo "FAIL $prec: batch $big: exit $rc, want 78"; tail -3 "$tmp/err"; fail=1; }
    # memory another process holds counts: the same batch refused, a smaller one named
    cfg "$k" $prec
    run 512 256
    k2=$(fits)
    if [ "$rc" = 78 ] && [ -n "$k2" ] && [ "$k2" -lt "$k" ] &&
       grep -q "nvidia-smi shows who holds the rest" "$tmp/err"; then
        echo "ok   $prec: with 256 MiB held elsewhere, batch $k refused and $k2 named"
    else
        echo "FAIL $prec: with 256 MiB held elsewhere: exit $rc"; tail -3 "$tmp/err"; fail=1
    fi
done
exit $fail
