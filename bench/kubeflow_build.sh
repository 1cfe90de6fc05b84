#!/usr/bin/env bash
# bench/kubeflow_build.sh: builds Kubeflow's training-operator (the peer of bench/operator_bench.sh)
# once from the Go module proxy into $GANTRY_CACHE/kubeflow-<ver>/ and prints the binary's path.
#   KUBEFLOW_VERSION (v1.8.1, the newest v1 module on the proxy), GANTRY_CACHE (~/.cache/gantry).
# The build runs under nice; its log is kubeflow-<ver>/build.log. Exit 1 when it does not build.
set -euo pipefail
case "${1:-}" in
-h | --help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) echo "kubeflow_build: unknown argument '$1' (it takes none; see --help)" >&2; exit 64 ;;
esac
ver=${KUBEFLOW_VERSION:-v1.8.1}
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
k=$cache/kubeflow-$ver
bin=$k/bin/training-operator
if [ -x "$bin" ] && [ -f "$k/.complete" ]; then echo "$bin"; exit 0; fi
mkdir -p "$k"
exec 9>"$k/.lock"
flock 9
if [ -x "$bin" ] && [ -f "$k/.complete" ]; then echo "$bin"; exit 0; fi
export GOMODCACHE=$k/mod GOCACHE=$k/gocache GOFLAGS="-modcacherw -buildvcs=false" GOTOOLCHAIN=local
{
    echo "== $(date -u +%FT%TZ) go mod download github.com/kubeflow/training-operator@$ver"
    src=$(cd "$k" && go mod download -json "github.com/kubeflow/training-operator@$ver" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$src" ]
    rm -rf "$k/src" && cp -r "$src" "$k/src" && chmod -R u+w "$k/src"
    cd "$k/src"
    echo "== $(date -u +%FT%TZ) go build ./cmd/training-operator.v1"
    nice -n 10 go build -p 1 -o "$bin" ./cmd/training-operator.v1
    mkdir -p "$k/crds" && cp manifests/base/crds/*.yaml "$k/crds/"
    echo "== $(date -u +%FT%TZ) built $bin"
} >>"$k/build.log" 2>&1 || { echo "kubeflow_build.sh: build failed, see $k/build.log" >&2; exit 1; }
touch "$k/.complete"
echo "$bin"
