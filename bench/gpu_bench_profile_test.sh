#!/usr/bin/env bash
# gpu_bench --profile on a small model (2 layers): the per-op table has a row for every op of
# the forward and the backward, each op's launches per step match the model (one attention a
# layer, 2L + 1 LayerNorms), the shares add up to 100 % and the rows to the total line.
# Usage: gpu_bench_profile_test.sh GPU_BENCH [extra gpu_bench flags]; exit 77 without a device.
set -u
bench=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" --batch 4 --seq 24 --hidden 32 --layers 2 --heads 4 --vocab 200 --classes 3 \
    --steps 2 --warmup 1 --varlen --profile "$@" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "FAIL: gpu_bench exited $rc"; exit 1; }
fail=0
row() { grep -E "^profile: $1 +[0-9]" "$out" | head -1; }
# the MLP projection's backward and the GELU's: two rows, or one with --dgelu-epilogue
mlp_bwd=("MLP proj GEMM bwd" "GELU bwd")
case " $* " in *" --dgelu-epilogue "*) mlp_bwd=("MLP proj GEMM bwd \+ dGELU") ;; esac
for op in "embedding" "layernorm" "qkv GEMM" "attention" "attention proj GEMM" \
    "MLP GEMM \+ GELU" "MLP proj GEMM" "pool \+ head \+ loss" "head \+ pool bwd" \
    "layernorm bwd" "${mlp_bwd[@]}" "MLP GEMM bwd" "attention proj GEMM bwd" \
    "attention bwd" "qkv GEMM bwd" "embedding bwd"; do
    [ -n "$(row "$op")" ] || { echo "FAIL: no profile row for '$op'"; fail=1; }
done
launches() { row "$1" | awk '{print $NF}'; }
[ "$(launches attention)" = "2.0" ] || { echo "FAIL: attention $(launches attention)/step, want 2.0"; fail=1; }
[ "$(launches layernorm)" = "5.0" ] || { echo "FAIL: layernorm $(launches layernorm)/step, want 5.0"; fail=1; }
[ "$(launches 'layernorm bwd')" = "5.0" ] || { echo "FAIL: layernorm bwd, want 5.0"; fail=1; }
[ "$(launches embedding)" = "1.0" ] || { echo "FAIL: embedding, want 1.0"; fail=1; }
awk '/^profile: total/ {total = $(NF - 1)}
     /^profile: / && $NF ~ /^[0-9.]+$/ && $0 !~ /total/ {ms += $(NF - 2); share += $(NF - 1)}
     END {
         gsub("%", "", total)
         if (share < 99.0 || share > 101.0) { printf "FAIL: shares add up to %.1f %%\n", share; exit 1 }
         printf "rows %.3f ms, shares %.1f %%\n", ms, share
     }' "$out" || fail=1
[ $fail = 0 ] && echo "gpu_bench_profile_test: OK" || echo "gpu_bench_profile_test: FAILED"
exit $fail
