#!/usr/bin/env bash
# hack/gpu-verify.sh DIR: which of the kernel variants written since the last verified GPU run
# a hack/gpu-check.sh run showed clean (docs/gpu.md, "What has to be verified on a GPU", 5b),
# from that run's logs in DIR (ctest.log, check.log, summary.txt). One line a variant:
#   verify: WHAT: PASS (N lines of evidence): set FLAG in kernels/tune.cu
#   verify: WHAT: not shown (a line failed, was refused or is missing)
# PASS when every piece of its evidence is there and none says FAILED, MISMATCH, REFUSED or
# "did not run" or "fell back", and no autotune line refused it; each PASS is one flag to set in
# kernels/tune.cu. gpu-check.sh runs it at the end; hack/gpu_verify_test.sh checks it on the
# emulator's logs (its tests print the same lines as on a GPU). Always exits 0.
set -uo pipefail
case "${1:-}" in
-h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") echo "usage: hack/gpu-verify.sh DIR (see --help)" >&2; exit 64 ;;
esac
out=$1
summary=$out/summary.txt
say() { echo "$*"; }

verify() { # verify WHAT FLAG REFUSED FILE:REGEX... (REFUSED: its refusal on an autotune line)
    local what=$1 flag=$2 refused=$3 ok=1 n=0 spec hits
    shift 3
    for spec; do
        hits=$(grep -hE "${spec#*:}" "$out/${spec%%:*}" 2>/dev/null || true)
        if [ -z "$hits" ]; then ok=0; continue; fi
        n=$((n + $(wc -l <<<"$hits")))
        ! grep -qE 'FAILED|MISMATCH|REFUSED|did not run|fell back' <<<"$hits" || ok=0
    done
    grep -qE "^model_gpu: autotune.*$refused [0-9.]+ ms \(REFUSED" "$summary" && ok=0
    if [ "$ok" = 1 ]; then
        say "verify: $what: PASS ($n lines of evidence): set $flag in kernels/tune.cu"
    else
        say "verify: $what: not shown (a line failed, was refused or is missing)"
    fi
}
san='summary.txt:^OK: compute-sanitizer --tool memcheck attention_gpu_test:'
verify "q-hoist forward" "fwd_verified[ATTN_FWD_QHOIST]" 'mma\.sync q-hoist' \
    'ctest.log:fbf16 qhoist out' "$san"
verify "stored-dS^T backward" "bwd_verified[ATTN_BWD_DS]" 'mma\.sync dS\^T' \
    'ctest.log:attention_bwd_fbf16_ds|fbf16_ds .* vs default' \
    'check.log:^check-cpu .*mma\.sync / mma\.sync dS\^T' "$san"
verify "wgmma forward" "fwd_verified[ATTN_FWD_WGMMA]" 'forward [^;]*wgmma' \
    'ctest.log:^[0-9]+: wgmma ' 'ctest.log:attention_fwd_wgmma|wgmma (out|lse) vs default' \
    'check.log:^check-cpu .*\(wgmma / wgmma' "$san"
verify "wgmma backward" "bwd_verified[ATTN_BWD_WGMMA]" 'backward [^;]*[ ,]wgmma' \
    'ctest.log:^[0-9]+: wgmma ' 'ctest.log:bwd_wgmma (dqkv16|dbias|vs def)' \
    'check.log:^check-cpu .*/ wgmma, ' "$san"
verify "wgmma stored-dS^T backward" "bwd_verified[ATTN_BWD_WGMMA_DS]" 'wgmma dS\^T' \
    'ctest.log:^[0-9]+: wgmma ' 'ctest.log:bwd_wgmma_ds ' 'check.log:^check-cpu .*/ wgmma dS\^T' \
    "$san"
verify "DGELU epilogue" "dgelu_verified[1]" 'DGELU epilogue' 'ctest.log:dgelu_bf16 dpre' \
    'check.log:^check-cpu .*DGELU epilogue'
# cuDNN's: it ran (not ours in its place) and agreed in the GPU test, and trained like the CPU
cudnn_ev=('ctest.log:^[0-9]+: cudnn runs ' 'ctest.log:^[0-9]+: cudnn agrees '
    "check.log:^check-cpu .*cuDNN / cuDNN|cuDNN's attention .*did not run"
    'summary.txt:^OK: compute-sanitizer --tool memcheck attention_gpu_test with cuDNN:')
verify "cuDNN forward" "fwd_verified[ATTN_FWD_CUDNN]" 'forward [^;]*cuDNN' "${cudnn_ev[@]}"
verify "cuDNN backward" "bwd_verified[ATTN_BWD_CUDNN]" 'backward [^;]*cuDNN' "${cudnn_ev[@]}"
# the GEMMs' cuBLASLt candidates timed (matmul.cu): right results and the cache in the GPU test,
# training like the CPU with them, and timed at the GPT-2 shape in the -tuned rows
verify "GEMM algorithms" "gemm_verified" 'GEMM algorithms' 'ctest.log:gemm tune (timed|cached) ' \
    'ctest.log:tuned_(forward|backward)_bf16' \
    'check.log:^model_gpu: autotune, GEMM algorithms: [1-9]' 'check.log:^check-cpu .*, tuned\)' \
    'summary.txt:^model_gpu: autotune, GEMM algorithms: [1-9]'
