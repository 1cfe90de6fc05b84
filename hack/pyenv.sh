#!/usr/bin/env bash
# Prints the path of a Python virtual environment holding hack/requirements.txt, creating it first
# if needed. The venv lives outside the repo, keyed by the requirements file's hash, so a second
# run is instant and a changed pin makes a new one:
#   $GANTRY_CACHE/pyenv-<sha256[:12]>   (GANTRY_CACHE defaults to ~/.cache/gantry)
# Use:  py=$(hack/pyenv.sh)/bin/python3
# Python is only used by hack/ scripts and benchmarks (references, readers of our files), never
# by Gantry's binaries.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

here=$(cd "$(dirname "$0")" && pwd)
req="$here/requirements.txt"
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
key=$(sha256sum "$req" | cut -c1-12)
venv="$cache/pyenv-$key"
mkdir -p "$cache"
# One builder at a time: parallel tests that all need the venv wait for the first to finish it.
exec 9>"$cache/pyenv-build.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    echo "pyenv: creating $venv from hack/requirements.txt (once; large wheels such as torch take minutes)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python3" -m pip install -q --upgrade pip >&2
    "$venv/bin/python3" -m pip install -q -r "$req" >&2
    touch "$venv/.complete"
fi
echo "$venv"
