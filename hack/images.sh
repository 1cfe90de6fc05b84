#!/usr/bin/env bash
# hack/images.sh: Gantry's container images, built here without Docker or a registry.
#
#   hack/images.sh [--build-dir DIR] [--cuda-build-dir DIR] [--emu-build-dir DIR] [--out DIR]
#                  [--import]
#
# Makes one OCI image layout tar per image from the binaries already built in DIR (default:
# build/): a root filesystem with the binary, its shared libraries (ldd) and a non-root user
# (images/rootfs.sh, the same script the Dockerfiles in images/ run), packed by the cluster's
# image builder (hack/cluster-image.py: one reproducible layer). Tags are the chart's appVersion,
# never latest, so the Helm chart's default image and the samples' gantry-worker:0.1.0 find them:
#
#   gantry-operator:<v>      /usr/bin/gantry-operator, user 65532
#   gantry-worker:<v>        /usr/bin/gantry-worker, gantry-run and gantry-predict (CPU), user 65532
#   gantry-worker-cuda:<v>   the same from a GANTRY_CUDA=ON build (--cuda-build-dir), with the
#                            CUDA runtime, cuBLAS and NCCL it links; the driver (libcuda) is left
#                            to the NVIDIA container runtime
#   gantry-worker-emu:<v>    test only (e2e scenario 7): gantry-worker-emu from a build without
#                            CUDA (--emu-build-dir) as /usr/bin/gantry-worker: the GPU path on
#                            GANTRY_EMU_DEVICES emulated GPUs (kernels/emu/), no GPU needed
#
# --out DIR   where the tars go (default: $GANTRY_CACHE/images)
# --import    then import them into the running full cluster (hack/cluster.sh image-import,
#             i.e. ctr -n k8s.io images import)
# Prints one line per image: "<reference> <manifest digest> -> <tar>".
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${GANTRY_CACHE:-$HOME/.cache/gantry}

die() { printf 'images: %s\n' "$*" >&2; exit "${2:-1}"; }

build=$ROOT/build cuda_build= emu_build= out=$CACHE/images import=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --cuda-build-dir) cuda_build=$2; shift 2 ;;
    --emu-build-dir) emu_build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --import) import=1; shift ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (try --help)" 64 ;;
    esac
done

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$ROOT/charts/gantry/Chart.yaml")
[ -n "$version" ] || die "no appVersion in charts/gantry/Chart.yaml"
op=$build/operator/gantry-operator
for b in "$op" "$build/worker/gantry-worker" "$build/worker/gantry-run" "$build/worker/gantry-predict"; do
    [ -x "$b" ] || die "$b not built: cmake --build $build --target gantry-operator gantry-worker gantry-run gantry-predict" 66
done
# The image tag claims a version: the binary must agree with the chart.
opv=$("$op" --version | awk '{print $2}')
[ "$opv" = "$version" ] || die "gantry-operator --version says $opv, charts/gantry/Chart.yaml appVersion $version; make them equal"

if ldd "$build/worker/gantry-worker" | grep -q 'libnccl\|libcudart\|libcublas'; then
    echo "images: warning: $build is a CUDA build; gantry-worker:$version will carry its CUDA libraries (use a GANTRY_CUDA=OFF build for the CPU image, --cuda-build-dir for the CUDA one)" >&2
fi
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/gantry-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
tars=()

image() { # NAME ENTRYPOINT ROOTFS-ARGS... -- IMAGE-ARGS...
    local name=$1 entry=$2 r=() i=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do r+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    i=("$@")
    "$ROOT/images/rootfs.sh" --out "$work/$name" "${r[@]}"
    python3 "$HACK/cluster-image.py" --rootfs "$work/$name" --name "$name:$version" \
        --out "$out/$name-$version.tar" --entrypoint "$entry" --user 65532:65532 --workdir /home/nonroot \
        "${i[@]}"
    tars+=("$out/$name-$version.tar")
}

image gantry-operator /usr/bin/gantry-operator "$op"
image gantry-worker /usr/bin/gantry-worker "$build/worker/gantry-worker" "$build/worker/gantry-run" \
    "$build/worker/gantry-predict" \
    -- --env OMP_WAIT_POLICY=passive
if [ -n "$cuda_build" ]; then
    cw=$cuda_build/worker/gantry-worker
    [ -x "$cw" ] || die "$cw not built (configure $cuda_build with -DGANTRY_CUDA=ON)" 66
    ldd "$cw" | grep -q 'libcudart\|libnccl' || die "$cw does not link CUDA; configure with -DGANTRY_CUDA=ON"
    # libcuda.so.1 and libnvidia-*: the driver's, mounted by the NVIDIA container runtime.
    image gantry-worker-cuda /usr/bin/gantry-worker --exclude '(^|/)lib(cuda|nvidia-[a-z-]*)\.so' \
        "$cw" "$cuda_build/worker/gantry-run" "$cuda_build/worker/gantry-predict" \
        -- --env OMP_WAIT_POLICY=passive --env NVIDIA_VISIBLE_DEVICES=all \
        --env NVIDIA_DRIVER_CAPABILITIES=compute,utility
fi
if [ -n "$emu_build" ]; then
    ew=$emu_build/worker/gantry-worker-emu
    [ -x "$ew" ] || die "$ew not built: cmake --build $emu_build --target gantry-worker-emu (a build with GANTRY_CUDA=OFF)" 66
    # Under the shipped name, so the image's entrypoint and the operator's pods are the same.
    mkdir -p "$work/emu-bin"
    cp "$ew" "$work/emu-bin/gantry-worker"
    image gantry-worker-emu /usr/bin/gantry-worker "$work/emu-bin/gantry-worker" \
        "$emu_build/worker/gantry-run" -- --env OMP_WAIT_POLICY=passive
fi
if [ "$import" = 1 ]; then
    "$HACK/cluster.sh" image-import "${tars[@]}"
fi
