#!/usr/bin/env bash
# hack/gpu_verify_test.sh GPU_BENCH TENSORCORE_TEST MATMUL_TEST ATTENTION_TEST: the verify:
# lines of hack/gpu-verify.sh on logs made as hack/gpu-check.sh makes them on a GPU, here by the
# emulated builds of the same programs (they print the same lines). A GPU session has one
# device call: a regular expression there that no longer matches what a test prints would say
# "not shown" for a variant that passed, and the flag would stay unset for another session.
#   1. every variant the emulator runs is PASS; cuDNN's are "not shown" (no cuDNN here: its
#      attention "did not run");
#   2. each kind of bad evidence turns exactly its variant to "not shown": a FAILED check-cpu
#      line, a missing GPU test line, an autotune refusal, no compute-sanitizer line;
#   3. with cuDNN's lines as a GPU with cuDNN prints them, cuDNN's two are PASS.
# (The compute-sanitizer lines are written here: the emulator has no compute-sanitizer.)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=$1 tc=$2 mm=$3 att=$4
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# ctest.log as `ctest -V` writes it: each test's lines behind its number
i=0
for t in "$tc" "$mm" "$att"; do
    i=$((i + 1))
    "$t" >"$d/t.log" 2>&1 || { bad "$t failed: $(tail -3 "$d/t.log")"; exit 1; }
    sed "s/^/$i: /" "$d/t.log" >>"$d/ctest.log"
done
# check.log: gpu-check.sh's check_cpu runs, on a small shape (head size 64 where wgmma runs)
S=(--batch 4 --seq 24 --hidden 32 --layers 2 --heads 4 --vocab 200 --classes 3 --steps 3
    --warmup 1 --check-cpu --varlen)
W=(--batch 3 --seq 24 --hidden 128 --layers 1 --heads 2 --vocab 200 --classes 3 --steps 3
    --warmup 1 --check-cpu --varlen --bf16 --attention fused)
{
    "$bench" "${S[@]}" --bf16 --attention fused --dgelu-epilogue &&
        "$bench" "${S[@]}" --bf16 --attention fused --attention-ds &&
        "$bench" "${W[@]}" --attention-wgmma &&
        "$bench" "${W[@]}" --attention-wgmma --attention-ds &&
        "$bench" "${W[@]}" --attention-cudnn &&
        GANTRY_AUTOTUNE_GEMM_MIN_FLOP=0 "$bench" "${W[@]}" --tune
} >"$d/check.log" 2>&1 || { bad "gpu_bench --check-cpu: $(tail -3 "$d/check.log")"; exit 1; }
sanitizer() {
    echo "OK: compute-sanitizer --tool memcheck attention_gpu_test: ========= ERROR SUMMARY: 0 errors"
}
summarize() { # as gpu-check.sh fills summary.txt from check.log
    grep -E '^check-cpu' "$d/check.log"
    grep -E '^model_gpu: autotune' "$d/check.log"
}
{ sanitizer; summarize; } >"$d/summary.txt"
cp "$d/ctest.log" "$d/ctest.orig"
cp "$d/check.log" "$d/check.orig"
cp "$d/summary.txt" "$d/summary.orig"

variants=("q-hoist forward" "stored-dS^T backward" "wgmma forward" "wgmma backward"
    "wgmma stored-dS^T backward" "DGELU epilogue" "GEMM algorithms")
# verdicts WANT_PASS...: the verify lines, each named variant PASS and every other not shown
verdicts() {
    local label=$1 v line want what
    shift
    v=$(bash "$here/hack/gpu-verify.sh" "$d")
    local bad_lines=0
    while IFS= read -r line; do
        what=${line#verify: }
        what=${what%%: *}
        want="not shown"
        for w in "$@"; do [ "$w" = "$what" ] && want=PASS; done
        [[ $line == *": $want"* ]] || { bad_lines=1; echo "     $line (want $want)"; }
    done <<<"$v"
    [ "$(grep -c '^verify: ' <<<"$v")" = 9 ] || { bad_lines=1; echo "     $(grep -c . <<<"$v") lines"; }
    [ $bad_lines = 0 ] && ok "$label" || bad "$label"
}
restore() { cp "$d/ctest.orig" "$d/ctest.log"; cp "$d/check.orig" "$d/check.log"; cp "$d/summary.orig" "$d/summary.txt"; }
without() { local v=$1 w out=(); for w in "${variants[@]}"; do [ "$w" = "$v" ] || out+=("$w"); done; printf '%s\n' "${out[@]}"; }

verdicts "the emulator's logs: the 7 variants it runs PASS, cuDNN's not shown" "${variants[@]}"

grep -q 'fused attention (wgmma / wgmma, GELU pass)' "$d/check.log" || bad "no wgmma check-cpu line"
sed -i 's/^\(check-cpu .*(wgmma \/ wgmma, GELU pass).*\): OK$/\1: FAILED/' "$d/check.log"
# (that line is evidence for both directions: the model ran wgmma / wgmma)
verdicts "a FAILED wgmma check-cpu line: wgmma forward and backward not shown" \
    "q-hoist forward" "stored-dS^T backward" "wgmma stored-dS^T backward" "DGELU epilogue" \
    "GEMM algorithms"
restore

sed -i '/gemm tune \(timed\|cached\) /d' "$d/ctest.log"
mapfile -t w < <(without "GEMM algorithms")
verdicts "no 'gemm tune' line from matmul_gpu_test: GEMM algorithms not shown" "${w[@]}"
restore

sed -i 's/\(^model_gpu: autotune.*mma\.sync q-hoist [0-9.]* ms\)/\1 (REFUSED: differs from mma.sync'"'"'s results, 3 x tolerance)/' "$d/summary.txt"
grep -q 'q-hoist [0-9.]* ms (REFUSED' "$d/summary.txt" || bad "no q-hoist autotune timing to refuse"
mapfile -t w < <(without "q-hoist forward")
verdicts "an autotune refusal of the q-hoist forward: it alone not shown" "${w[@]}"
restore

summarize >"$d/summary.txt"
verdicts "no compute-sanitizer line: the attention's variants not shown" \
    "DGELU epilogue" "GEMM algorithms"
restore

# cuDNN as a GPU with cuDNN shows it: attention_gpu_test's "cudnn agrees" line, no "did not
# run" line, check-cpu naming cuDNN (not "fell back"), and compute-sanitizer's run with cuDNN
sed -i 's/^\([0-9]*: \)cudnn kinds run ours \+OK$/\1cudnn agrees             OK/' "$d/ctest.log"
grep -q '^[0-9]*: cudnn agrees  *OK$' "$d/ctest.log" || bad "no cudnn line to turn into 'cudnn agrees'"
sed -i "/cuDNN's attention .*did not run/d; s/cuDNN (fell back to mma\.sync)/cuDNN/g" "$d/check.log"
sanitizer | sed 's/attention_gpu_test:/attention_gpu_test with cuDNN:/' >>"$d/summary.txt"
verdicts "cuDNN's lines as with cuDNN: all 9 PASS" "${variants[@]}" "cuDNN forward" "cuDNN backward"

[ $fail = 0 ] && echo "gpu_verify_test: OK" || echo "gpu_verify_test: FAILED"
exit $fail
