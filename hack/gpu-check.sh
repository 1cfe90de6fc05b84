#!/usr/bin/env bash
# The GPU check: builds the CUDA kernels with nvcc, runs their GPU tests (ctest -L gpu), checks a
# GPU training run against the CPU model, runs the training loop on the GPU (gantry-worker --device
# cuda: its GPU test, then SpamAssassin), and benchmarks gantry against PyTorch on the same GPU.
# Made for a bare GPU machine with nvcc 13, PyTorch and the nvidia-nccl-cu13 Python package but
# no internet and none of the operator's libraries (it builds bench/gpu_check, the stand-alone
# CMake project, not the whole tree; the worker's binaries come prebuilt from --prepare).
#
#   hack/gpu-check.sh --prepare   HERE (with apt, CUDA wheels): the OpenBLAS .debs
#                                 (gpu-debs/); the CUDA build of gantry-worker, gantry-run,
#                                 gantry-predict, train_gpu_test and train_gpu_device_test with
#                                 their non-CUDA shared libraries (gpu-bin/); the SpamAssassin
#                                 split (gpu-data/): all in one archive, .carry/gpu.tar.xz
#   hack/gpu-check.sh [--quick]   ON THE GPU MACHINE: unpack the archive into .carry/, build,
#                                 test, check, train, benchmark (--quick: no benchmarks)
#   hack/gpu-check.sh --build-only   unpack and build as the GPU machine does, then stop
#                                 (--prepare runs it on a copy of what travels: no GPU needed)
# Device call (~5.5 min on an H200, 2026-12-04, before the variants, ncu and the sanitizers):
#   run(command="GANTRY_GPU_TIME=480 bash hack/gpu-check.sh",
#       carry=[".carry/gpu.tar.xz"], timeout_s=510)
# (one archive: the device call carries at most 64 MiB with the working tree, and the three
# folders are ~67 MiB, the CUDA kernels four times over in the binaries; xz makes them ~22 MiB)
#
# GANTRY_NCCL_PKG=<dir with include/ and lib/> overrides where NCCL is taken from;
# GANTRY_GPU_PREP_BUILD (--prepare) the CUDA build folder (default /tmp/gantry-gpu-prepare);
# GANTRY_GPU_BUILD the GPU machine's build folder (default /tmp/gantry-build-gpu);
# GANTRY_GPU_TIME the seconds the whole check may take (the benchmarks get what is left).
# Results go to $OUT (default ./out/gpu-check): env.txt, build.log, ctest.log, check.log,
# worker.log, bench.jsonl (one JSON line per run: gantry and PyTorch), bench.log, summary.txt. The
# device tool brings back at most 8 files, so nothing else is written there. Exit status: 0 when
# the build, every GPU test, the CPU check and the GPU training run passed (benchmark numbers are
# reported, not judged).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
debs="$here/.carry/gpu-debs"
pack="$here/.carry/gpu.tar.xz"
travel_max=$((64 << 20)) # what a device call carries, working tree included
out=${OUT:-$here/out/gpu-check}
quick=0
build_only=0

case "${1:-}" in
--prepare)
    set -e
    # shellcheck source=hack/versions.env
    . "$here/hack/versions.env"
    "$here/hack/install-deps.sh" --cuda
    mkdir -p "$debs"
    (cd "$debs" && apt-get download libopenblas0-pthread libopenblas-pthread-dev libgfortran5 \
        libquadmath0)
    du -sh "$debs"/*.deb
    # The worker's binaries, built here with CUDA (the GPU machine lacks Jansson, libmicrohttpd,
    # ISA-L...), and the shared libraries they need other than glibc's, CUDA's and OpenBLAS's
    # (those come from the GPU machine and the .debs above).
    pb=${GANTRY_GPU_PREP_BUILD:-/tmp/gantry-gpu-prepare}
    cmake -S "$here" -B "$pb" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
    nice -n 10 cmake --build "$pb" -j "${JOBS:-2}" --target gantry-worker gantry-run train_gpu_test \
        train_gpu_device_test gantry-predict
    bin="$here/.carry/gpu-bin"
    rm -rf "$bin"; mkdir -p "$bin/lib"
    cp "$pb/worker/gantry-worker" "$pb/worker/gantry-run" "$pb/worker/train_gpu_test" \
        "$pb/worker/train_gpu_device_test" "$pb/worker/gantry-predict" "$bin/"
    cp "$here/worker/train_gpu_cli_test.sh" "$here/worker/train_gpu_nccl_test.sh" \
        "$here/worker/train_gpu_resume_test.sh" "$here/worker/ranks_testlib.sh" \
        "$here/worker/predict_gpu_test.sh" "$here/worker/cli_testlib.sh" "$bin/"
    # (libstdc++ and libgcc_s stay the GPU machine's own: newer ones run older programs, and
    # its cuBLAS may need them)
    ldd "$bin/gantry-worker" "$bin/gantry-run" "$bin/train_gpu_test" "$bin/train_gpu_device_test" "$bin/gantry-predict" | awk '$3 ~ /^\// {print $3}' |
        sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libnccl|libopenblas|libgfortran|libquadmath|libstdc\+\+|libgcc_s)\.so' |
        while read -r l; do cp -L "$l" "$bin/lib/"; done
    strip --strip-debug "$bin/gantry-worker" "$bin/gantry-run" "$bin/train_gpu_test" \
        "$bin/train_gpu_device_test" "$bin/gantry-predict"
    # the cuDNN frontend's headers (with cudnn.h and nvrtc.h) for the build there
    # (kernels/attention_cudnn.cpp); cuDNN itself is that machine's PyTorch's. The folder must
    # be named include: the frontend's headers include each other as "../include/...".
    mkdir -p "$bin/cudnn"
    cp -r "$(dirname "$("$here/hack/install-deps.sh" --print-cuda-root)")/cudnn-$CUDNN_VERSION-fe-$CUDNN_FRONTEND_VERSION/include" \
        "$bin/cudnn/include"
    du -sh "$bin" "$bin"/* "$bin/lib"
    data=$("$here/hack/spam-data.sh" | awk '/^\//{print; exit}')
    [ -f "$data/train.jsonl" ] || data=${GANTRY_CACHE:-$HOME/.cache/gantry}/data/spam-0.2.3-seed42
    mkdir -p "$here/.carry/gpu-data"
    cp "$data/train.jsonl" "$data/eval.jsonl" "$here/.carry/gpu-data/"
    du -sh "$here/.carry/gpu-data"
    # one archive travels (the folders are over the device call's limit); the folders go, so
    # that nothing carries them by mistake
    tar -C "$here/.carry" -cf - gpu-debs gpu-bin gpu-data | xz -T0 -9 >"$pack.tmp"
    mv "$pack.tmp" "$pack"
    rm -rf "$debs" "$bin" "$here/.carry/gpu-data"
    # The GPU machine's build, here: a copy of what travels (the files git tracks or would
    # track, and the archive) unpacked and built as there. A header the archive lacks or lays
    # out wrong, or a change the stand-alone bench/gpu_check project misses, fails here and
    # not in the device call. (~3 min on 2 cores.)
    dry=$(mktemp -d /tmp/gantry-gpu-dry.XXXXXX)
    (cd "$here" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -t "$dry" 2>/dev/null)
    mkdir -p "$dry/.carry" && cp "$pack" "$dry/.carry/"
    # (the CUDA wheels stand for the GPU machine's toolkit and Python packages)
    wheels=$("$here/hack/install-deps.sh" --print-cuda-root)
    if ! PATH="$wheels/nvidia/cu13/bin:$PATH" PYTHONPATH="$wheels${PYTHONPATH:+:$PYTHONPATH}" \
            GANTRY_GPU_BUILD="$dry/build" OUT="$dry/out" nice -n 10 \
            bash "$dry/hack/gpu-check.sh" --build-only; then
        echo "gpu-check: FAILED: the GPU machine's build of what travels ($dry/out/build.log):" >&2
        grep -E 'error|FAILED' "$dry/out/build.log" | head -10 >&2
        rm -f "$pack" # (so that no one carries it)
        exit 1
    fi
    rm -rf "$dry"
    # what travels: the files git tracks or would track, and the archive
    tree=$(cd "$here" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
    size=$(stat -c %s "$pack")
    echo "gpu-check: $pack: $((size >> 20)) MiB; with the working tree $(((size + tree) >> 20))" \
        "of the device call's $((travel_max >> 20)) MiB"
    if [ $((size + tree)) -gt "$travel_max" ]; then
        echo "gpu-check: FAILED: over the device call's limit; leave out what the check does not" \
            "need (the libraries in gpu-bin/lib, the data) or split the binaries' CUDA code" \
            "into one shared library" >&2
        exit 1
    fi
    echo "gpu-check: now, on the GPU machine: run(command=\"GANTRY_GPU_TIME=480 bash" \
        "hack/gpu-check.sh\", carry=[\".carry/gpu.tar.xz\"], timeout_s=510)"
    exit 0 ;;
--quick) quick=1 ;;
--build-only) build_only=1 ;;
"") ;;
-h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 64 ;;
esac

# --prepare's archive, carried: unpacked into .carry/ (anew each call: a warm machine may keep
# an older call's folders)
if [ -f "$pack" ]; then
    rm -rf "$debs" "$here/.carry/gpu-bin" "$here/.carry/gpu-data"
    if command -v xz >/dev/null; then
        tar -C "$here/.carry" -xJf "$pack"
    else
        python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$pack" "$here/.carry"
    fi || { echo "gpu-check: FAILED: could not unpack $pack (run --prepare again)"; exit 1; }
fi

# first existing path among the arguments (globs expanded by the caller), or nothing
first() {
    local f
    for f in "$@"; do
        [ -e "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
# GANTRY_GPU_TIME: the seconds this script may take in all (give the device call's limit less a
# margin); the benchmarks take only what is left of it
budget_end=$((SECONDS + ${GANTRY_GPU_TIME:-100000}))
left() { # left T: the seconds a run may take, at most T; fails when under 20 s are left
    local t=$1 l=$((budget_end - SECONDS - 10))
    [ "$l" -lt "$t" ] && t=$l
    [ "$t" -ge 20 ] && echo "$t"
}

# ---- environment ----
{
    date -u
    nvidia-smi 2>&1 | head -20
    command -v nvcc && nvcc --version | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
    cmake --version | head -1; ninja --version; gcc --version | head -1; nproc
} >"$out/env.txt" 2>&1

# ---- toolkit: nvcc, cuBLAS(Lt) and NCCL from wherever this machine keeps them ----
nvcc_bin=$(command -v nvcc || first /usr/local/cuda/bin/nvcc || true)
if [ -z "$nvcc_bin" ]; then
    say "FAILED: no nvcc on PATH or in /usr/local/cuda/bin"; exit 1
fi
cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc_bin")")")
shim=/tmp/gantry-gpu-shim # unversioned .so names for the linker, found by CMAKE_LIBRARY_PATH
rm -rf "$shim"; mkdir -p "$shim/lib"
pyroot=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
for l in cublasLt cublas; do
    if ! first "$cuda_root/lib64/lib$l.so" "$cuda_root/lib/lib$l.so" >/dev/null; then
        f=$(first "$cuda_root"/lib64/lib$l.so.* "$cuda_root"/targets/*/lib/lib$l.so.* \
              "$pyroot"/nvidia/*/lib/lib$l.so.* || true)
        [ -n "$f" ] && ln -sf "$f" "$shim/lib/lib$l.so"
    fi
done
extra_inc=""
if [ ! -f "$cuda_root/include/cublasLt.h" ]; then
    # only the cuBLAS headers, so the package's other CUDA headers cannot shadow nvcc's own
    h=$(first "$pyroot"/nvidia/*/include/cublasLt.h || true)
    if [ -n "$h" ]; then
        mkdir -p "$shim/include"
        ln -sf "$(dirname "$h")"/cublas*.h "$shim/include/"
        extra_inc="-I$shim/include"
    fi
fi
# NCCL: the nvidia-nccl-cu13 wheel, presented where cmake/cuda.cmake looks for the pinned one.
# shellcheck source=hack/versions.env
. "$here/hack/versions.env"
export GANTRY_CACHE=/tmp/gantry-gpu-cache
wheel_nccl="$GANTRY_CACHE/cuda-$CUDA_NVCC_VERSION-nccl-$NCCL_VERSION/nvidia/nccl"
ncclpkg=${GANTRY_NCCL_PKG:-$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)}
if [ -n "$ncclpkg" ]; then
    rm -rf "$wheel_nccl"; mkdir -p "$wheel_nccl/lib"
    ln -s "$ncclpkg/include" "$wheel_nccl/include"
    ln -s "$(first "$ncclpkg"/lib/libnccl.so*)" "$wheel_nccl/lib/libnccl.so"
fi
# OpenBLAS (the CPU reference's GEMMs): carried Debian packages, else the system's.
blas_root=/tmp/gantry-gpu-debs
if first "$debs"/*.deb >/dev/null; then
    rm -rf "$blas_root"; mkdir -p "$blas_root"
    for f in "$debs"/*.deb; do
        if command -v dpkg >/dev/null; then
            dpkg -x "$f" "$blas_root"
        else # a .deb is an ar archive holding data.tar.*
            rm -rf /tmp/gantry-deb && mkdir -p /tmp/gantry-deb
            (cd /tmp/gantry-deb && ar x "$f") && tar -xf /tmp/gantry-deb/data.tar.* -C "$blas_root"
        fi
    done
    export LD_LIBRARY_PATH="$blas_root/usr/lib/x86_64-linux-gnu/openblas-pthread:$blas_root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
export LD_LIBRARY_PATH="$shim/lib:${ncclpkg:+$ncclpkg/lib:}${LD_LIBRARY_PATH:-}"
# cuDNN (opened at run time by kernels/attention_cudnn.cpp) and the NVRTC its fused attention
# compiles with: PyTorch's packages, else the system's
cudnn_so=$(first "$pyroot"/nvidia/cudnn/lib/libcudnn.so.9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9 \
    "$cuda_root"/lib64/libcudnn.so.9 || true)
nvrtc_so=$(first "$cuda_root"/lib64/libnvrtc.so.13 "$cuda_root"/targets/*/lib/libnvrtc.so.13 \
    "$pyroot"/nvidia/*/lib/libnvrtc.so.13 || true)
# (the cuDNN frontend opens a CUDA runtime of its own by name: the toolkit's, by path)
cudart_so=$(first "$cuda_root"/lib64/libcudart.so.13 "$cuda_root"/targets/*/lib/libcudart.so.13 \
    "$pyroot"/nvidia/*/lib/libcudart.so.13 || true)
[ -n "$cudart_so" ] && export CUDNN_FRONTEND_CUDART_LIB_NAME="$cudart_so"
if [ -n "$cudnn_so" ]; then
    export GANTRY_CUDNN_LIB="$cudnn_so"
    export LD_LIBRARY_PATH="$(dirname "$cudnn_so")${nvrtc_so:+:$(dirname "$nvrtc_so")}:$LD_LIBRARY_PATH"
fi
echo "cuDNN: ${cudnn_so:-none found}; NVRTC: ${nvrtc_so:-none found}; cudart for the cuDNN frontend: ${cudart_so:-none found}" >>"$out/env.txt"
cudnn_inc=""
[ -d "$here/.carry/gpu-bin/cudnn/include" ] && cudnn_inc="$here/.carry/gpu-bin/cudnn/include"

# ---- build ----
build=${GANTRY_GPU_BUILD:-/tmp/gantry-build-gpu}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
keep=(-k 0); [ ${#gen[@]} -eq 0 ] && keep=(-k) # keep going: one broken file must not hide the rest
if ! cmake -S "$here/bench/gpu_check" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DGANTRY_CUDA_ROOT="$cuda_root" -DGANTRY_OPENBLAS_ROOT="$blas_root" \
        -DCMAKE_LIBRARY_PATH="$shim/lib" -DCMAKE_CUDA_ARCHITECTURES=90 \
        ${cudnn_inc:+-DGANTRY_CUDNN_INCLUDE="$cudnn_inc"} \
        ${extra_inc:+-DCMAKE_CUDA_FLAGS="$extra_inc"} >"$out/build.log" 2>&1; then
    say "FAILED: configure (build.log)"; tail -30 "$out/build.log"; exit 1
fi
if cmake --build "$build" -j "$(nproc)" -- "${keep[@]}" >>"$out/build.log" 2>&1; then
    say "OK: build ($(grep -c 'Building CUDA' "$out/build.log") CUDA objects, sm_90a/sm_90 + PTX)"
else
    status=1
    say "FAILED: build (build.log); running what did build"
    grep -E 'error|FAILED' "$out/build.log" | head -20 >>"$summary"
fi
[ "$build_only" = 1 ] && exit $status
# ---- GPU tests ----
if (cd "$build" && timeout 300 ctest -L gpu --output-on-failure -V) >"$out/ctest.log" 2>&1; then
    say "OK: ctest -L gpu: $(grep -E 'tests passed' "$out/ctest.log" | tail -1)," \
        "$(grep -c '\*\*\*Skipped' "$out/ctest.log") skipped (77: no device)"
else
    status=1
    say "FAILED: ctest -L gpu (ctest.log): $(grep -E 'tests passed|\(Failed\)|Not Run' "$out/ctest.log" | tr '\n' ' ')"
fi
grep -E '^\S.*(OK|FAILED)$' "$out/ctest.log" | grep -v '^  ' >>"$summary" || true

[ -x "$build/gpu_bench" ] || { say "FAILED: gpu_bench did not build"; exit 1; }

# ---- a GPU training run against the CPU model (same weights, same batch) ----
check_cpu() {
    local rc=0
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu || rc=$?
    [ "$rc" = 77 ] && return 77 # no device
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen || rc=1
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --attention fused \
        --varlen || rc=1
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --graphs || rc=1
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --attention fused --dgelu-epilogue || rc=1
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --attention fused --attention-ds || rc=1
    # (head size 64: where the wgmma attention runs)
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --attention fused --attention-wgmma --heads 2 || rc=1
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --attention fused --attention-wgmma --attention-ds --heads 2 || rc=1
    # cuDNN's attention (where this machine has cuDNN; else ours, and a note that says so)
    timeout 240 "$build/gpu_bench" --preset example --steps 10 --check-cpu --bf16 --varlen \
        --attention fused --attention-cudnn --heads 2 || rc=1
    # the kernels training.attention: auto picks here (every variant checked and timed first;
    # every GEMM's cuBLASLt candidates too, which the default 1 GFLOP floor leaves out here)
    GANTRY_AUTOTUNE_GEMM_MIN_FLOP=0 timeout 240 "$build/gpu_bench" --preset example --steps 10 \
        --check-cpu --bf16 --varlen --attention fused --tune --heads 2 || rc=1
    return $rc
}
# (each run first compares the first step's gradients tensor by tensor, then every step's loss)
check_cpu >"$out/check.log" 2>&1
case $? in
0) say "OK: GPU gradients and losses follow the CPU's (check.log)" ;;
77) say "SKIPPED: no CUDA device (check.log)"; exit $status ;;
*) status=1; say "FAILED: GPU vs CPU gradients or losses (check.log)" ;;
esac
grep -E '^check (grads|-cpu)' "$out/check.log" >>"$summary" || true
grep -E '^check-cpu' "$out/check.log" >>"$summary" || true
grep -E '^model_gpu: autotune' "$out/check.log" >>"$summary" || true

# ---- the training loop on the GPU: carried gantry-worker (--device cuda) and its GPU test ----
wlog="$out/worker.log"
# the carried binaries, or (make gpu-check on a machine with every dependency) make build's
cbin="$here/.carry/gpu-bin"
w_worker=$cbin/gantry-worker w_run=$cbin/gantry-run w_test=$cbin/train_gpu_test w_sh=$cbin
w_predict=$cbin/gantry-predict
w_dev=$cbin/train_gpu_device_test
if [ ! -x "$w_worker" ] && [ -x "$here/build/worker/train_gpu_test" ]; then
    w_worker=$here/build/worker/gantry-worker w_run=$here/build/worker/gantry-run
    w_test=$here/build/worker/train_gpu_test w_sh=$here/worker
    w_predict=$here/build/worker/gantry-predict
    w_dev=$here/build/worker/train_gpu_device_test
fi
train_gpu() {
    local rc=0 libdirs="$cbin/lib" l d
    # the carried binaries' CUDA libraries by soname: wherever this machine keeps them
    for l in libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
        d=$(first "$cuda_root"/lib64/$l "$cuda_root"/targets/*/lib/$l "$pyroot"/nvidia/*/lib/$l || true)
        [ -n "$d" ] && libdirs="$libdirs:$(dirname "$d")"
    done
    [ -n "$ncclpkg" ] && libdirs="$libdirs:$ncclpkg/lib"
    export LD_LIBRARY_PATH="$libdirs:$LD_LIBRARY_PATH"
    echo "== ldd gantry-worker (missing libraries, if any)"
    ldd "$w_worker" | grep -i 'not found' || echo "none"
    echo "== train_gpu_test (GPU loop vs CPU loop; checkpoints across devices; overlapped"
    echo "   all-reduce = after backward; bf16 follows fp32)"
    timeout 90 "$w_test" || rc=1
    echo "== train_gpu_device_test (bf16 conversion and mixed kernels vs CPU; overlap over NCCL)"
    if [ -x "$w_dev" ]; then timeout 90 "$w_dev" || rc=1; else echo "FAIL: no $w_dev"; rc=1; fi
    echo "== train_gpu_cli_test.sh (gantry-worker --device cuda on the tiny fixture)"
    timeout 90 bash "$w_sh/train_gpu_cli_test.sh" "$w_worker" "$here/worker/testdata" || rc=1
    echo "== train_gpu_nccl_test.sh (2 GPUs over NCCL = 1 GPU = CPU; skipped below 2 GPUs)"
    local r=0
    timeout 120 bash "$w_sh/train_gpu_nccl_test.sh" "$w_worker" "$here/worker/testdata" "$w_run" ||
        r=$?
    [ "$r" = 0 ] || [ "$r" = 77 ] || rc=1
    echo "== train_gpu_resume_test.sh (2 GPUs, one killed: retryable exit, bit-identical resume; skipped below 2 GPUs)"
    r=0
    timeout 120 bash "$w_sh/train_gpu_resume_test.sh" "$w_worker" "$here/worker/testdata" || r=$?
    [ "$r" = 0 ] || [ "$r" = 77 ] || rc=1
    echo "== predict_gpu_test.sh (gantry-predict --device cuda = the CPU's predictions, fp32 and bf16)"
    r=0
    timeout 120 bash "$w_sh/predict_gpu_test.sh" "$w_worker" "$w_predict" "$here/worker/testdata" || r=$?
    [ "$r" = 0 ] || rc=1
    echo "== SpamAssassin, device cuda (bench/cpu_train_spam.sh's configuration)"
    local sd=/tmp/gantry-gpu-spam sdata=$here/.carry/gpu-data
    [ -f "$sdata/train.jsonl" ] || sdata=$HOME/.cache/gantry/data/spam-0.2.3-seed42 # hack/spam-data.sh's
    rm -rf "$sd"; mkdir -p "$sd"
    cat >"$sd/config.json" <<JSON
{"training": {
  "task": "text-classification",
  "model": {"type": "transformer", "layers": 2, "hidden": 128, "heads": 4, "maxSeqLen": 256},
  "data": {"train": "$sdata/train.jsonl", "eval": "$sdata/eval.jsonl", "minFreq": 2},
  "epochs": 3, "batchSize": 32, "learningRate": "1e-3", "weightDecay": 0.01,
  "logInterval": 20, "evalInterval": 100, "seed": 42, "device": "cuda",
  "report": "$sd/report.json"},
 "checkpoint": {"dir": "$sd/ck/spam", "intervalSteps": 100000}}
JSON
    if timeout 150 "$w_worker" --config "$sd/config.json" >"$sd/progress.jsonl" 2>"$sd/log.txt"; then
        python3 - "$sd/report.json" "$sd/progress.jsonl" <<'PY' | tee "$sd/line"
import json, sys
r = json.load(open(sys.argv[1])); t = r["train"]
steps = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"')]
last = steps[-1] if steps else {}
print(f"spam device cuda: accuracy {r['accuracy']:.4f} macro_f1 {r.get('macro_f1', float('nan')):.4f} "
      f"steps {t['steps']} train {t['seconds']:.1f} s tokens/s {t['tokens_per_s']:.0f} "
      f"samples/s {t['samples_per_s']:.0f} final_loss {t['final_loss']:.4f} "
      f"last interval {last.get('tflops', float('nan')):.3g} TFLOP/s MFU {100 * last.get('mfu', float('nan')):.2f}% "
      f"evals {' '.join('%d:%.4f' % (e['step'], e['accuracy']) for e in r.get('evals', []))}")
PY
    else
        rc=1; echo "spam device cuda: FAILED"
    fi
    tail -n 25 "$sd/log.txt"
    # The GPU run's final checkpoint, classified on the CPU by gantry-predict: the model card,
    # vocab and fp32 weights a GPU wrote give the GPU's own final evaluation on the CPU.
    if [ -f "$sd/report.json" ] && [ -x "$w_predict" ] &&
        "$w_predict" --model "$sd/ck/spam" "$sdata/eval.jsonl" --report "$sd/predict.json" \
            -o "$sd/predictions.jsonl" 2>"$sd/predict.txt"; then
        python3 - "$sd/report.json" "$sd/predict.json" <<'PY' | tee -a "$sd/line" || rc=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
same = b["confusion_matrix"] == a["confusion_matrix"]
print(f"spam GPU checkpoint on the CPU (gantry-predict): accuracy {b['accuracy']:.4f} (the GPU's "
      f"{a['accuracy']:.4f}), loss {b['loss']:.5f} ({a['loss']:.5f}), confusion "
      f"{'identical' if same else 'differs: %s vs %s' % (b['confusion_matrix'], a['confusion_matrix'])}")
sys.exit(0 if abs(b["accuracy"] - a["accuracy"]) <= 0.005 else 1)
PY
    else
        rc=1; echo "spam GPU checkpoint on the CPU (gantry-predict): FAILED"; tail -n 5 "$sd/predict.txt"
    fi
    # the same run in the GPU's other modes (no checkpoints): what bf16, the attentions and CUDA
    # graphs give on real, variable-length data (attention auto: unfused in fp32, fused in bf16)
    local v
    for v in "--attention fused" "--cuda-graphs" "--precision bf16" \
        "--precision bf16 --attention unfused" "--precision bf16 --cuda-graphs"; do
        # shellcheck disable=SC2086 # $v: the flags
        if timeout 90 "$w_worker" --config "$sd/config.json" $v --checkpoint-dir "" \
                --report "$sd/rv.json" >/dev/null 2>"$sd/lv"; then
            python3 - "$sd/rv.json" "$v" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = r["train"]
print(f"spam device cuda {sys.argv[2]}: accuracy {r['accuracy']:.4f} train {t['seconds']:.2f} s "
      f"tokens/s {t['tokens_per_s']:.0f} final_loss {t['final_loss']:.4f}")
PY
        else
            rc=1; echo "spam device cuda $v: FAILED"; tail -n 10 "$sd/lv"
        fi
    done
    # two ranks over NCCL, one GPU each, when this machine has two
    local ngpu
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [ "${ngpu:-0}" -ge 2 ]; then
        echo "== 2 ranks, NCCL, 1 epoch"
        if timeout 150 "$w_run" --nproc 2 -- "$w_worker" --config "$sd/config.json" \
                --epochs 1 --report "$sd/report2.json" >"$sd/p2" 2>"$sd/l2"; then
            python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("spam 2 ranks NCCL: accuracy %.4f world %d tokens/s %.0f" % (r["accuracy"], r["train"]["world_size"], r["train"]["tokens_per_s"]))' "$sd/report2.json" | tee -a "$sd/line"
        else
            rc=1; echo "spam 2 ranks NCCL: FAILED"; tail -n 30 "$sd/l2"
        fi
    else
        echo "spam 2 ranks NCCL: SKIPPED ($ngpu GPU visible)" | tee -a "$sd/line"
    fi
    return $rc
}
if [ -x "$w_worker" ]; then
    if (train_gpu) >"$wlog" 2>&1; then
        say "OK: training loop on the GPU (worker.log)"
    else
        status=1; say "FAILED: training loop on the GPU (worker.log)"
    fi
    grep -E '^(spam |rms|ok |FAIL|SKIP|[0-9]+ test cases|overlap|bf16 |train_gpu_device_test:)' \
        "$wlog" >>"$summary" || true
else
    status=1; say "FAILED: no .carry/gpu-bin/gantry-worker (run --prepare here and carry .carry/gpu-bin) nor build/worker/train_gpu_test"
fi

[ "$quick" = 1 ] && { say "quick: benchmarks skipped"; exit $status; }

# ---- benchmarks: gantry, then PyTorch (eager and torch.compile) on the same GPU ----
: >"$out/bench.jsonl"
# The MFU denominator: this device's dense bf16 peak as gantry knows it (kernels/gpu.h
# gpu_peak_flops: the datasheet figure for the GPU's name, or GANTRY_PEAK_TFLOPS as given),
# exported so that bench/gpu_torch.py divides by the same number.
peak=$("$build/gpu_bench" --peak 2>/dev/null || true)
if [[ "$peak" =~ ^[0-9]+(\.[0-9]+)?\  ]]; then
    export GANTRY_PEAK_TFLOPS=${peak%% *}
    say "peak: $GANTRY_PEAK_TFLOPS TFLOP/s dense bf16 on ${peak#* } (the MFU denominator)"
else
    say "peak: not known for this GPU (${peak:-gpu_bench --peak failed}): no MFU; set GANTRY_PEAK_TFLOPS=<TFLOP/s>"
fi
# out-of-bounds accesses and shared-memory races in the attention kernels, which pass their
# tests whether or not a stray read lands in memory that happens to be mapped. memcheck runs
# before the benchmarks (the verify: lines at the end need it for every attention variant),
# racecheck with what is left at the end.
san_bin=$(command -v compute-sanitizer || first "$cuda_root/bin/compute-sanitizer" \
    /usr/local/cuda/bin/compute-sanitizer || true)
# Our kernels without cuDNN (GANTRY_CUDNN=0), then, with "cudnn", only the test's cuDNN part
# (`attention_gpu_test cudnn`), each within its own limit.
sanitize() { # sanitize TOOL LIMIT [cudnn]
    local tool=$1 t rc what="attention_gpu_test" cudnn=0 arg=()
    [ "${3:-}" = cudnn ] && what="attention_gpu_test with cuDNN" cudnn=1 arg=(cudnn)
    [ -n "$san_bin" ] && [ -x "$build/attention_gpu_test" ] || return 0
    t=$(left "$2") || return 0
    if GANTRY_CUDNN=$cudnn timeout "$t" "$san_bin" --tool "$tool" --error-exitcode 99 \
            "$build/attention_gpu_test" "${arg[@]}" >/tmp/gantry-san.log 2>&1; then
        say "OK: compute-sanitizer --tool $tool $what: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/gantry-san.log | tail -1 | sed 's/^=* *//')"
    else
        rc=$?
        if [ "$rc" = 124 ]; then
            say "compute-sanitizer --tool $tool $what: out of time ($t s)"
        else # (racecheck's hazards are reported, not judged: cp.async may be one it reads wrong)
            [ "$tool" = memcheck ] && status=1
            say "FAILED: compute-sanitizer --tool $tool $what (rc $rc, bench.log)"
        fi
    fi
    { echo "== compute-sanitizer --tool $tool"; tail -n 60 /tmp/gantry-san.log; } \
        >>"$out/bench.log"
}
sanitize memcheck 75
sanitize memcheck 45 cudnn
# Most wanted first, so that a call cut short loses the least: the issue's comparison (the GPT-2
# shape in bf16, gantry's variants and then PyTorch's), the shipped example model, 32 sequences a
# step, where gantry's time goes, then fp32. Each run gets at most what is left of
# GANTRY_GPU_TIME, so this table is written before the device call ends; bench.log keeps everything.
gb() {
    local t
    t=$(left 120) || { echo "gpu_bench $*: skipped, out of time" >>"$out/bench.log"; return 0; }
    timeout "$t" "$build/gpu_bench" "$@" >>"$out/bench.log" 2>&1
}
tp() { # tp LIMIT ARGS: bench/gpu_torch.py
    local t
    t=$(left "$1") || { echo "gpu_torch $*: skipped, out of time" >>"$out/bench.log"; return 0; }
    shift
    PYTHONUNBUFFERED=1 timeout "$t" python3 "$here/bench/gpu_torch.py" "$@" >>"$out/bench.log" 2>&1
}
for v in "" "--attention fused" "--graphs" "--attention fused --graphs" \
    "--attention fused --graphs --tune" "--attention fused --graphs --tune --dgelu-epilogue" \
    "--attention fused --graphs --attention-cudnn" \
    "--attention fused --graphs --dgelu-epilogue" "--attention fused --graphs --attention-ds" \
    "--attention fused --graphs --attention-ds --dgelu-epilogue" \
    "--attention fused --graphs --attention-wgmma" \
    "--attention fused --graphs --attention-ds --dgelu-epilogue --attention-wgmma"; do
    gb --preset gpt2 --bf16 $v
done
tp 300 --preset gpt2 --variants eager-bf16,compile-bf16,compile-graphs-bf16
for v in "--bf16" "--bf16 --attention fused" "--bf16 --graphs" "--bf16 --attention fused --graphs" \
    ""; do
    gb --preset example $v
done
tp 240 --preset example --variants eager-fp32,eager-bf16,compile-bf16,compile-graphs-bf16
# 32 sequences a step at the GPT-2 shape (llm.c's H100 runs take more than 8), both sides
gb --preset gpt2 --bf16 --attention fused --graphs --batch 32
gb --preset gpt2 --bf16 --attention fused --graphs --batch 32 --attention-ds --dgelu-epilogue
gb --preset gpt2 --bf16 --attention fused --graphs --batch 32 --attention-ds --dgelu-epilogue \
    --attention-wgmma
gb --preset gpt2 --bf16 --attention fused --graphs --batch 32 --tune --dgelu-epilogue
gb --preset gpt2 --bf16 --attention fused --graphs --batch 32 --attention-cudnn
tp 150 --preset gpt2 --batch 32 --variants compile-bf16
# the non-GEMM kernels one at a time at the GPT-2 shape: GB/s beside a device-to-device copy, and
# the attention's TFLOP/s fused and unfused (the table also into summary.txt)
if t=$(left 120); then
    timeout "$t" "$build/gpu_kernels" 2>&1 | tee -a "$out/bench.log" | grep -E '^kernel:' >>"$summary"
fi
# where a step's time goes: an event behind every op (eager), both attentions at the GPT-2 shape
# (into bench.log: the device tool brings back 8 files at most; the table also into summary.txt)
for attn in fused unfused "fused --attention-ds --dgelu-epilogue --attention-wgmma" \
    "fused --attention-ds --dgelu-epilogue --attention-wgmma --batch 32"; do
    t=$(left 120) || break
    timeout "$t" "$build/gpu_bench" --preset gpt2 --bf16 --attention $attn --steps 5 --profile \
        2>&1 | grep -v '^{' | tee -a "$out/bench.log" | grep -E '^profile:' >>"$summary"
done
# why the hand-written kernels run as they do: Nsight Compute's hardware counters for each of them
# at the GPT-2 shape, one launch each (gpu_kernels --iters 1 --warmup 0): the attention's
# tensor-core kernels, its D pass, the LayerNorm backward and the column sums (the GELU and
# LayerNorm backwards' bias gradients). The details page goes to bench.log; summary.txt gets a
# few lines a kernel: time, SM and memory throughput against their peaks, occupancy, the cycles
# between a warp's instructions and the four stall reasons that take most of them.
ncu_bin=$(command -v ncu || first "$cuda_root/bin/ncu" /usr/local/cuda/bin/ncu \
    /opt/nvidia/nsight-compute/*/ncu || true)
if [ -z "$ncu_bin" ]; then
    say "ncu: not on this machine, no hardware counters"
elif t=$(left 90); then
    rep=/tmp/gantry-ncu/kernels
    rm -rf /tmp/gantry-ncu; mkdir -p /tmp/gantry-ncu
    if timeout "$t" "$ncu_bin" --clock-control none -f -o "$rep" \
            --kernel-name regex:'tc_|fa_rowdot|layernorm_backward|colsum_part' --launch-count 32 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section ComputeWorkloadAnalysis \
            --section MemoryWorkloadAnalysis \
            "$build/gpu_kernels" --iters 1 --warmup 0 >/tmp/gantry-ncu/run.log 2>&1; then
        { echo "== ncu details"; "$ncu_bin" -i "$rep.ncu-rep" --page details; } \
            >>"$out/bench.log" 2>&1
        "$ncu_bin" -i "$rep.ncu-rep" --page raw --csv >/tmp/gantry-ncu/raw.csv 2>&1
        python3 "$here/bench/ncu_summary.py" /tmp/gantry-ncu/raw.csv | tee -a "$out/bench.log" \
            >>"$summary"
    else
        say "ncu: FAILED or out of time ($t s); its output in bench.log"
    fi
    { echo "== ncu run"; tail -n 40 /tmp/gantry-ncu/run.log; } >>"$out/bench.log"
fi
sanitize racecheck 90
gb --preset gpt2
tp 120 --preset gpt2 --variants eager-fp32
grep -h '^{' "$out/bench.log" >"$out/bench.jsonl"
# what the tuned runs timed and took (kernels/tune.cu), one line a shape
grep -h '^model_gpu: autotune' "$out/bench.log" | sort -u >>"$summary" || true
python3 - "$out/bench.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'preset':8} {'impl':38} {'prec':5} {'B':>3} {'ms/step':>9} {'tok/s':>10} {'TFLOP/s':>8} {'MFU':>6}")
for r in rows:
    if "error" in r:
        print(f"{r.get('preset','?'):8} {r['impl']:38} error: {r['error'][:60]}")
        continue
    prec = r.get("precision", r["impl"].split("-")[-1])
    impl = r["impl"] + ("-fused-attn" if r.get("attention") == "fused" else "")
    impl += "-graphs" if r.get("graphs") else ""
    impl += "-ds" if r.get("attention_ds") else ""
    impl += "-dgelu" if r.get("dgelu_epilogue") else ""
    impl += "-tuned" if r.get("tune") else ""
    impl += "-wg" if r.get("attention_wgmma") else ""
    # (a cuDNN row that ran ours in cuDNN's place says so: it timed ours)
    impl += ("-cudnn-fell-back" if r.get("cudnn_fell_back") else "-cudnn") \
        if r.get("attention_cudnn") else ""
    mfu = "   n/a" if r.get("mfu") is None else f"{100 * r['mfu']:5.1f}%"
    print(f"{r['preset']:8} {impl:38} {prec:5} {r['batch']:3} {r['ms_per_step']:9.2f} "
          f"{r['tokens_per_s']:10.0f} {r['tflops']:8.1f} {mfu}")
    r["label"] = impl
# the issue's target, per shape: gantry's best bf16 row against PyTorch's best, and 45 % MFU at
# the GPT-2 shape
for preset, batch in sorted({(r["preset"], r["batch"]) for r in rows if "label" in r}):
    same = [r for r in rows if "label" in r and r["preset"] == preset and r["batch"] == batch
            and r.get("precision", "bf16") == "bf16" and not r["impl"].endswith("fp32")]
    g = [r for r in same if r["impl"] == "gantry"]
    t = [r for r in same if r["impl"].startswith("pytorch")]
    if not g or not t:
        continue
    bg = min(g, key=lambda r: r["ms_per_step"])
    bt = min(t, key=lambda r: r["ms_per_step"])
    ratio = bt["ms_per_step"] / bg["ms_per_step"]
    mfu = (", MFU n/a (peak unknown)" if bg.get("mfu") is None else
           f", MFU {100 * bg['mfu']:.1f}% (target 45%)") if preset == "gpt2" else ""
    print(f"best {preset} B={batch}: gantry {bg['label']} {bg['ms_per_step']:.2f} ms, "
          f"{bt['label']} {bt['ms_per_step']:.2f} ms: gantry {ratio:.3f}x PyTorch's best "
          f"({'at or ahead' if ratio >= 1 else 'behind'}){mfu}")
PY
# Which of the variants written since the last verified run this run showed clean: the
# verify: lines (hack/gpu-verify.sh, which reads the logs above)
v=$(bash "$here/hack/gpu-verify.sh" "$out")
printf '%s\n' "$v" | tee -a "$summary"
exit $status
