#!/usr/bin/env bash
# Interop test: a checkpoint written by Gantry loads with the Python `safetensors` package (via the
# cached venv of hack/pyenv.sh), and a file written by that package loads in Gantry.
# Usage: ckpt_safetensors_test.sh PATH/TO/ckpt_tool      (registered with CTest)
# Exits 77 (skipped) when the venv cannot be built here (no package registry reachable).
set -euo pipefail
tool=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
# The torch venv: safetensors' numpy side has no bfloat16, and the checkpoints hold bf16 tensors.
# pyenv.sh serialises venv creation with other tests run in parallel.
if ! venv=$("$repo/hack/pyenv.sh" torch); then
    echo "SKIP: could not build the Python venv (hack/pyenv.sh torch); needs PyPI once"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$("$tool" write "$tmp" job)
"$venv/bin/python3" "$here/testdata/check_safetensors.py" "$dir" "$tmp/py.safetensors"
"$tool" check "$tmp/py.safetensors"
echo "ok: safetensors interop both ways"
