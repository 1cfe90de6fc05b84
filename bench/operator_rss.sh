#!/usr/bin/env bash
# bench/operator_rss.sh: gantry-operator's RSS with N tracked pods (issue 5: <= 2 KiB per tracked
# pod, <= 20 MiB at 10k pods), by bench/operator_rss.c on a real API tier.
#
#   bench/operator_rss.sh --build DIR [--pods "2000 10000"] [--csv FILE]
#
# DIR is a CMake build with the targets gantry-operator and operator_rss. Uses $KUBECONFIG when
# set (the CRD is applied to it), else starts its own API tier (hack/cluster.sh up --tier api,
# GANTRY_RUN defaults to /tmp/gantry-rss-api) and always stops it. Per N: a fresh namespace,
# N/4 TrainingJobs and N running pods as the operator renders them and a kubelet reports them;
# the operator's RSS on the empty namespace (baseline) and with the N pods once it has written
# every job's status. CSV rows: impl,metric,x,unit,round,value with metric rss|rss_peak|
# rss_baseline|bytes_per_pod|heap_bytes_per_pod and x = N.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="" sizes="2000 10000" csv=""
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --pods) sizes=$2; shift 2 ;;
        --csv) csv=$2; shift 2 ;;
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "operator_rss.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -n "$build" ] && [ -x "$build/operator/operator_rss" ] && [ -x "$build/operator/gantry-operator" ] || {
    echo "operator_rss.sh: --build DIR with operator/operator_rss and operator/gantry-operator built" >&2; exit 64; }
own=
if [ -z "${KUBECONFIG:-}" ]; then
    export GANTRY_RUN=${GANTRY_RUN:-/tmp/gantry-rss-api}
    "$root/hack/cluster.sh" up --tier api >&2
    own=1
    trap '"$root/hack/cluster.sh" down >&2 || true' EXIT
    KUBECONFIG=$("$root/hack/cluster.sh" kubeconfig | tail -1)
    export KUBECONFIG
fi
k8s_version=$(sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' "$root/hack/k8s/go.mod" | head -1)
kubectl=${GANTRY_KUBECTL:-${GANTRY_CACHE:-$HOME/.cache/gantry}/k8s-$k8s_version/bin/kubectl}
[ -x "$kubectl" ] || kubectl=kubectl
"$kubectl" apply -f "$root/manifests/crds/gantry.dev_trainingjobs.yaml" >/dev/null
"$kubectl" wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
[ -z "$csv" ] || [ -s "$csv" ] || echo "impl,metric,x,unit,round,value" >"$csv"
for n in $sizes; do
    out=$("$build/operator/operator_rss" --operator "$build/operator/gantry-operator" --pods "$n")
    echo "$out"
    [ -n "$csv" ] || continue
    val() { sed -n "s/^$1 //p" <<<"$out"; }
    {
        echo "gantry,rss,$n,KiB,1,$(val rss_kib)"
        echo "gantry,rss_peak,$n,KiB,1,$(val peak_rss_kib)"
        echo "gantry,rss_baseline,$n,KiB,1,$(val baseline_rss_kib)"
        echo "gantry,bytes_per_pod,$n,B,1,$(val bytes_per_pod)"
        echo "gantry,heap_bytes_per_pod,$n,B,1,$(val heap_bytes_per_pod)"
    } >>"$csv"
done
[ -z "$own" ] || echo "operator_rss.sh: stopping the API tier" >&2
