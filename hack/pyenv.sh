#!/usr/bin/env bash
# Prints the path of a Python virtual environment, creating it first if needed.
#   hack/pyenv.sh          the light venv of hack/requirements.txt (tests, plots)
#   hack/pyenv.sh torch    that plus PyTorch (hack/requirements-torch.txt: references, benchmarks)
#   hack/pyenv.sh hf       that plus Hugging Face tokenizers (hack/requirements-hf.txt)
# The venvs live outside the repo, keyed by the requirements files' hash, so a second run is
# instant and a changed pin makes a new one: $GANTRY_CACHE/pyenv-<sha256[:12]> (GANTRY_CACHE
# defaults to ~/.cache/gantry).  Use:  py=$(hack/pyenv.sh)/bin/python3
# Python is only used by hack/ scripts, tests and benchmarks, never by Gantry's binaries.
set -euo pipefail
case "${1:-}" in
-h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"" | torch | hf) ;;
*) echo "pyenv.sh: unknown venv '$1' (known: torch, hf; none for the light one)" >&2; exit 64 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
if [ -n "${1:-}" ]; then
    req="$here/requirements-$1.txt"
    key=$(cat "$here/requirements.txt" "$req" | sha256sum | cut -c1-12)
else
    req="$here/requirements.txt"
    key=$(sha256sum "$req" | cut -c1-12)
fi
venv="$cache/pyenv-$key"
mkdir -p "$cache"
# One builder at a time: parallel tests that all need the venv wait for the first to finish it.
exec 9>"$cache/pyenv-build.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    echo "pyenv: creating $venv from ${req#"$here/../"} (once; torch takes minutes)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python3" -m pip install -q --upgrade pip >&2
    "$venv/bin/python3" -m pip install -q -r "$req" >&2
    touch "$venv/.complete"
fi
echo "$venv"
