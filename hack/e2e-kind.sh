#!/usr/bin/env bash
# hack/e2e-kind.sh: the e2e suite (e2e/run.sh) on kind, for anyone with Docker and a network.
# It cannot run on Gantry's CI machine (no Docker, no registry); there the suite runs on the
# local cluster tier (make e2e).
#
#   hack/e2e-kind.sh [--keep] [--name gantry-e2e] [-- e2e/run.sh arguments]
#
# Creates (or reuses) a one-node kind cluster, builds gantry-operator and gantry-worker (build/),
# makes their images (hack/images.sh), loads them with `kind load image-archive`, and runs the
# suite against it with E2E_KIND_CLUSTER set. The SpamAssassin split reaches the data claim with
# kubectl cp through a busybox pod (pulled from Docker Hub), claims use kind's default
# StorageClass (local-path). Deletes the cluster at the end unless --keep.
#
# Needs: docker, kind (go install sigs.k8s.io/kind@$KIND_VERSION), and what `make build` needs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIND_VERSION=${KIND_VERSION:-v0.33.0}
NAME=gantry-e2e KEEP=0
while [ $# -gt 0 ]; do
    case $1 in
        --keep) KEEP=1; shift ;;
        --name) NAME=${2:?}; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done

command -v docker >/dev/null || { echo "e2e-kind: docker not found" >&2; exit 69; }
if ! command -v kind >/dev/null; then
    echo "e2e-kind: kind not found; installing sigs.k8s.io/kind@$KIND_VERSION with go install"
    GOBIN=${GOBIN:-$HOME/go/bin} go install "sigs.k8s.io/kind@$KIND_VERSION"
    PATH=${GOBIN:-$HOME/go/bin}:$PATH
fi

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
    kind create cluster --name "$NAME" --wait 120s
    created=1
fi
kubeconfig=$(mktemp)
cleanup() {
    rm -f "$kubeconfig"
    if [ $KEEP = 0 ] && [ $created = 1 ]; then kind delete cluster --name "$NAME"; fi
}
trap cleanup EXIT
kind get kubeconfig --name "$NAME" >"$kubeconfig"

# Without hack/cluster.sh, kubectl and helm come from PATH.
command -v kubectl >/dev/null || { echo "e2e-kind: kubectl not on PATH" >&2; exit 69; }
command -v helm >/dev/null || { echo "e2e-kind: helm not on PATH" >&2; exit 69; }

KUBECONFIG=$kubeconfig E2E_KIND_CLUSTER=$NAME E2E_BUSYBOX_IMAGE=${E2E_BUSYBOX_IMAGE:-busybox:1.36.1} \
    KUBECTL=$(command -v kubectl) HELM=$(command -v helm) "$ROOT/e2e/run.sh" "$@"
