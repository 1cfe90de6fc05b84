#!/usr/bin/env bash
# The worker's encoding of texts and text pairs equals Hugging Face tokenizers' (BERT's WordPiece
# pipeline, truncation longest_first) on random cases: hack/hf_tokenizer_check.py in the cached
# venv of hack/pyenv.sh hf. Usage: hf_tokenizer_test.sh PATH/TO/encode_tool (registered with
# CTest). Exits 77 (skipped) when the venv cannot be built here (no package registry reachable).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
if ! venv=$("$repo/hack/pyenv.sh" hf); then
    echo "SKIP: could not build the Python venv (hack/pyenv.sh hf); needs PyPI once"
    exit 77
fi
exec "$venv/bin/python3" "$repo/hack/hf_tokenizer_check.py" "$1"
