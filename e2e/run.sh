#!/usr/bin/env bash
# e2e/run.sh: Gantry end to end on a real cluster, doing what a user does (helm install,
# kubectl apply -f, kubectl wait, kubectl logs, kubectl delete) and asserting on what they see.
#
#   e2e/run.sh [--keep] [--only "4 1 2"] [--no-build]
#
# Cluster: the one $KUBECONFIG points at (the local cluster tier, or kind: E2E_KIND_CLUSTER=name
# loads the images with `kind load`). With KUBECONFIG unset it builds and brings up the local
# full tier (hack/cluster.sh, root) and takes it down at the end, leaving the host clean.
#
# Scenarios (issue 10; each prints ok/FAIL lines):
#   1  helm install; a 3-worker SpamAssassin job on a shared checkpoint claim Succeeds; the eval
#      report shows >= 98 % accuracy (E2E_MIN_ACCURACY); checkpoints and report on the volume
#   2  a worker pod deleted mid-training: one gang restart, workers resume from step S > 0,
#      Succeeded, status.restarts == 1
#   3  the operator pod killed mid-run: the new one adopts the job, never two pods per rank,
#      Succeeded without a gang restart
#   4  invalid manifests refused by kubectl apply naming the field; a config the worker rejects
#      ends Failed at once (exit 64-78) with the worker's message visible
#   5  suspend and resume a running job; delete it and every child is garbage-collected
#   7  GPU pods on emulated GPUs: the node advertises nvidia.com/gpu (patched, removed at the
#      end), a 1-pod job with gpusPerReplica 2 gets the GPU limit and the memory-backed /dev/shm,
#      its gantry-worker starts 2 ranks (one per GPU, NCCL between them through /dev/shm), a pod
#      deleted mid-run resumes on the GPUs from its checkpoint, Succeeded; then 2 pods x 2 GPUs,
#      4 ranks in one communicator; the worker image is gantry-worker-emu (the CUDA emulator,
#      kernels/emu/), from a build without CUDA; last 2 CPU pods x nprocPerNode 2
#   8  evaluation during training and early stopping: Succeeded at step 40, the best checkpoint
#      kept beside the newest
#   9  gang scheduling (runPolicy.schedulingPolicy.gang: Workload): on a node with room for 2 of
#      3 workers, pod-by-pod scheduling binds 2; the gang binds none; shrunk to 2 while
#      suspended (the operator replaces the Workload) the gang binds both and Succeeds. On a
#      cluster that serves no Workloads: no pod, and an Event that says what to enable
#   10 Kueue: a ClusterQueue with room for one job of 2 workers; a low-priority job is admitted
#      (its pods on the flavor's node) and checkpoints, a high-priority one preempts it (pods
#      deleted, quota handed back) and Succeeds, then the low one is admitted again, resumes
#      from its checkpoint and Succeeds; a job in a missing LocalQueue gets no pod. Without
#      Kueue: no pod, and a Warning Event
#   11 elastic: a 2-worker job with elasticPolicy 1..3 is scaled to 3 (kubectl scale) mid-run;
#      the gang stops, rank 0 saves its step on SIGTERM, 3 workers resume there at world size 3,
#      restarts stay 0, and the job Succeeds
#   12 a worker evicted (the Eviction API, as kubectl drain) from a job with backoffLimit 0: the
#      gang restarts as a disruption (restarts 1, disruptions 1) and the job Succeeds
#   13 elasticPolicy.shrinkAfterSeconds: 3 workers on a node with room for 2 run as 2 (ScaledDown,
#      a standby pod waits), and grow back to 3 when the node gets room (ScaledUp), resuming at
#      world size 3; the job Succeeds with restarts 0
#   6  helm uninstall leaves no operator objects
# On any failure: operator and worker logs, events, describe output in $ARTIFACTS (default
# ./artifacts/e2e-<UTC time>). The last line is 'N passed, N failed'; exit 0 only with 0 failed.
#
# Environment: KUBECONFIG, ARTIFACTS, GANTRY_RUN (own cluster's state; /tmp/gantry-cluster-e2e),
# GANTRY_FULL_WAIT (seconds to wait for another full cluster on this host to go; 900),
# GANTRY_BUILD_DIR (binaries; default build/, built when missing), GANTRY_EMU_BUILD_DIR (a build
# without CUDA for scenario 7's gantry-worker-emu: GANTRY_BUILD_DIR when it is one, else
# build-emu/), E2E_REPLICAS (3),
# E2E_MIN_ACCURACY (0.98), E2E_TRAIN_TIMEOUT (900 s per job), E2E_START_TIMEOUT (180 s without a
# pod), E2E_KIND_CLUSTER, E2E_SKIP_IMAGES=1 (images already on the nodes), E2E_BUSYBOX_IMAGE.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/e2e
# shellcheck source=e2e/lib.sh
. "$E2E/lib.sh"
# shellcheck source=e2e/jobs.sh
. "$E2E/jobs.sh"

KEEP=0 BUILD=1 ONLY="4 1 8 2 12 3 7 9 13 10 11 5 6"
while [ $# -gt 0 ]; do
    case $1 in
        --keep) KEEP=1; shift ;;
        --only) ONLY=${2:?--only needs scenario numbers}; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

ARTIFACTS=${ARTIFACTS:-$ROOT/artifacts/e2e-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$ARTIFACTS"
E2E_MIN_ACCURACY=${E2E_MIN_ACCURACY:-0.98}
E2E_TRAIN_TIMEOUT=${E2E_TRAIN_TIMEOUT:-900}
RELEASE=gantry RELEASE_NS=gantry-system
NS=gantry-e2e-$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
CLUSTER_RUN=${GANTRY_RUN:-/tmp/gantry-cluster}
OWN_CLUSTER=0 LOCAL_TIER=0 VOLDIR='' IMG_DIR='' CRD_EXISTED=1 INSTALLED=0 EMU_BUILD='' GPU_NODE='' SLOT_NODE='' KUEUE_OBJS=''
T0=$SECONDS
declare -A TIMES

say() { printf '\n== %s  %s\n' "$(stamp)" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; bad "set-up: $*"; finish 1; }

# ----------------------------------------------------------------------------------------------
# set-up: cluster, binaries, images, data
# ----------------------------------------------------------------------------------------------

cluster_up() {
    if [ -n "${KUBECONFIG:-}" ]; then
        export KUBECONFIG
        return
    fi
    say "KUBECONFIG is unset: bringing up the local full cluster tier (hack/cluster.sh)"
    # Its own state folder, so a developer's cluster in the default one is not touched; one full
    # cluster per host, so wait for another one (CI's smoke run, a developer's) to go.
    export GANTRY_RUN=${GANTRY_RUN:-/tmp/gantry-cluster-e2e}
    export GANTRY_FULL_WAIT=${GANTRY_FULL_WAIT:-900}
    CLUSTER_RUN=$GANTRY_RUN
    [ "$(id -u)" = 0 ] || die "the local full tier needs root; or point KUBECONFIG at a cluster"
    "$ROOT/hack/cluster.sh" build --tier full || die "hack/cluster.sh build failed"
    if "$ROOT/hack/cluster.sh" status >/dev/null 2>&1; then
        die "a local cluster already runs in $CLUSTER_RUN; use it (export KUBECONFIG=$CLUSTER_RUN/admin.kubeconfig) or take it down first"
    fi
    OWN_CLUSTER=1
    "$ROOT/hack/cluster.sh" up --tier full || die "hack/cluster.sh up --tier full failed"
    KUBECONFIG=$("$ROOT/hack/cluster.sh" kubeconfig)
    export KUBECONFIG
}

# Is $KUBECONFIG the local tier of this host (then images go in with ctr, volumes are hostPath)?
detect_local_tier() {
    local server env_server
    # A kubeconfig that hack/cluster.sh wrote lives in the cluster's state folder (GANTRY_RUN).
    if [ -z "${GANTRY_RUN:-}" ] && [ -f "$(dirname "$KUBECONFIG")/cluster.env" ]; then
        CLUSTER_RUN=$(dirname "$KUBECONFIG")
    fi
    [ -f "$CLUSTER_RUN/cluster.env" ] || return 0
    env_server=$(sed -n 's/^API_SERVER=//p' "$CLUSTER_RUN/cluster.env")
    server=$(kc config view --minify -o 'jsonpath={.clusters[0].cluster.server}' 2>/dev/null)
    if [ -n "$server" ] && [ "$server" = "$env_server" ]; then
        LOCAL_TIER=1
        VOLUME_ROOT=$(sed -n 's/^VOLUME_ROOT=//p' "$CLUSTER_RUN/cluster.env")
        E2E_BUSYBOX_IMAGE=${E2E_BUSYBOX_IMAGE:-$(sed -n 's/^BUSYBOX_IMAGE=//p' "$CLUSTER_RUN/cluster.env")}
    fi
}

build_binaries() {
    local b=${GANTRY_BUILD_DIR:-$ROOT/build}
    GANTRY_BUILD_DIR=$b
    export GANTRY_BUILD_DIR
    if [ $BUILD = 1 ]; then
        if [ ! -f "$b/build.ninja" ]; then
            cmake -S "$ROOT" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_CUDA=OFF \
                >"$ARTIFACTS/cmake-configure.log" 2>&1 || die "cmake configure failed ($ARTIFACTS/cmake-configure.log)"
        fi
        cmake --build "$b" --target gantry-operator gantry-worker gantry-run gantry-predict >"$ARTIFACTS/build.log" 2>&1 ||
            { tail -20 "$ARTIFACTS/build.log"; die "building gantry-operator, gantry-worker, gantry-run, gantry-predict failed"; }
    fi
    [[ " $ONLY " == *" 7 "* ]] || return 0
    # Scenario 7's worker: gantry-worker-emu exists only in builds without CUDA (model.cmake).
    if grep -q 'gantry-worker-emu' "$b/build.ninja" 2>/dev/null; then
        EMU_BUILD=${GANTRY_EMU_BUILD_DIR:-$b}
    else
        EMU_BUILD=${GANTRY_EMU_BUILD_DIR:-$ROOT/build-emu}
    fi
    if [ $BUILD = 1 ]; then
        if [ ! -f "$EMU_BUILD/build.ninja" ]; then
            cmake -S "$ROOT" -B "$EMU_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_CUDA=OFF \
                >"$ARTIFACTS/cmake-configure-emu.log" 2>&1 || die "cmake configure of $EMU_BUILD failed ($ARTIFACTS/cmake-configure-emu.log)"
        fi
        cmake --build "$EMU_BUILD" --target gantry-worker-emu gantry-run >"$ARTIFACTS/build-emu.log" 2>&1 ||
            { tail -20 "$ARTIFACTS/build-emu.log"; die "building gantry-worker-emu in $EMU_BUILD failed"; }
    fi
}

load_images() {
    local tars
    if [ "${E2E_SKIP_IMAGES:-0}" = 1 ]; then note "E2E_SKIP_IMAGES=1: images assumed on the nodes"; return; fi
    # hack/images.sh prints "<reference> <digest> -> <tar>" per image.
    # Into a folder of this run's own: the shared cache's tars may be another build's.
    IMG_DIR=$(mktemp -d /tmp/gantry-e2e-images.XXXXXX)
    tars=$("$ROOT/hack/images.sh" --build-dir "$GANTRY_BUILD_DIR" ${EMU_BUILD:+--emu-build-dir "$EMU_BUILD"} \
        --out "$IMG_DIR" | awk '{print $NF}') ||
        die "hack/images.sh failed"
    [ -n "$tars" ] || die "hack/images.sh made no image"
    if [ $LOCAL_TIER = 1 ]; then
        # shellcheck disable=SC2086
        GANTRY_RUN=$CLUSTER_RUN "$ROOT/hack/cluster.sh" image-import $tars >/dev/null || die "ctr import failed"
    elif [ -n "${E2E_KIND_CLUSTER:-}" ]; then
        local t
        for t in $tars; do kind load image-archive "$t" --name "$E2E_KIND_CLUSTER" || die "kind load $t failed"; done
    else
        die "do not know how to load images into this cluster: set E2E_KIND_CLUSTER or E2E_SKIP_IMAGES=1"
    fi
    # shellcheck disable=SC2086
    note "images: $(basename -a $tars | tr '\n' ' ')"
}

# The namespace, the two claims, and the SpamAssassin split on the data claim.
setup_storage() {
    local data
    data=$("$ROOT/hack/spam-data.sh" | tail -1) # counts, then the folder of the split
    [ -s "$data/train.jsonl" ] || die "hack/spam-data.sh did not make $data/train.jsonl"
    kc create namespace "$NS" >/dev/null || die "cannot create namespace $NS"
    kc label namespace "$NS" app.kubernetes.io/part-of=gantry-e2e >/dev/null
    if [ $LOCAL_TIER = 1 ]; then
        VOLDIR=$VOLUME_ROOT/$NS
        mkdir -p "$VOLDIR/data" "$VOLDIR/ckpt"
        cp "$data/train.jsonl" "$data/eval.jsonl" "$VOLDIR/data/"
        chmod 0777 "$VOLDIR/ckpt"
        chmod -R a+rX "$VOLDIR/data"
        claims_yaml "$NS" "$VOLDIR" >"$ARTIFACTS/claims.yaml"
        kc apply -f "$ARTIFACTS/claims.yaml" >/dev/null || die "cannot create the claims"
    else
        claims_yaml "$NS" "" >"$ARTIFACTS/claims.yaml"
        kc apply -f "$ARTIFACTS/claims.yaml" >/dev/null || die "cannot create the claims"
        # A user's way in: a pod with tar mounts the claim, kubectl cp copies the split.
        kc -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: loader}
spec:
  restartPolicy: Never
  containers:
    - {name: c, image: ${E2E_BUSYBOX_IMAGE:-busybox:1.36.1}, command: [sleep, "600"], volumeMounts: [{name: d, mountPath: /data}]}
  volumes: [{name: d, persistentVolumeClaim: {claimName: spam-data}}]
YAML
        kc -n "$NS" wait --for=condition=Ready pod/loader --timeout=180s >/dev/null || die "loader pod not Ready"
        kc -n "$NS" cp "$data/train.jsonl" loader:/data/train.jsonl && kc -n "$NS" cp "$data/eval.jsonl" loader:/data/eval.jsonl ||
            die "kubectl cp of the data failed"
        kc -n "$NS" delete pod loader --wait=true >/dev/null
    fi
    E2E_BUSYBOX_IMAGE=${E2E_BUSYBOX_IMAGE:-busybox:1.36.1}
    export E2E_BUSYBOX_IMAGE
    note "namespace $NS; claims spam-data (the split: $(wc -l <"$data/train.jsonl") train, $(wc -l <"$data/eval.jsonl") eval) and spam-ckpt"
}

# ----------------------------------------------------------------------------------------------
# the end
# ----------------------------------------------------------------------------------------------

teardown() {
    [ -z "$IMG_DIR" ] || rm -rf "$IMG_DIR"
    if [ $KEEP = 1 ]; then
        note "--keep: namespace $NS, release $RELEASE and the cluster are left running"
        return
    fi
    kc delete namespace "$NS" --wait=true --timeout=120s >/dev/null 2>&1 || true
    [ -z "$GPU_NODE" ] || gpu_node_unpatch "$GPU_NODE" >/dev/null 2>&1 || true
    [ -z "$SLOT_NODE" ] || node_res_unpatch "$SLOT_NODE" gantry.dev/e2e-slot >/dev/null 2>&1 || true
    [ -z "$KUEUE_OBJS" ] || kc delete -f "$KUEUE_OBJS" --wait=false >/dev/null 2>&1 || true
    kc delete pv "$NS-data" "$NS-ckpt" --wait=false >/dev/null 2>&1 || true
    if [ $INSTALLED = 1 ]; then
        "$HELM" uninstall "$RELEASE" -n "$RELEASE_NS" --wait --timeout 120s >/dev/null 2>&1 || true
    fi
    kc delete namespace "$RELEASE_NS" --wait=false >/dev/null 2>&1 || true
    [ $CRD_EXISTED = 1 ] || kc delete crd trainingjobs.gantry.dev --wait=false >/dev/null 2>&1 || true
    [ -z "$VOLDIR" ] || rm -rf "$VOLDIR"
    if [ $OWN_CLUSTER = 1 ]; then
        say "taking down the local cluster this run started"
        "$ROOT/hack/cluster.sh" down >/dev/null 2>&1 || echo "warning: hack/cluster.sh down failed" >&2
    fi
}

FINISHED=0
finish() {
    local rc=${1:-0}
    [ $FINISHED = 0 ] || exit "$rc"
    FINISHED=1
    if [ "$rc" != 0 ] && [ -n "${KUBECONFIG:-}" ] && [ -n "${KUBECTL:-}" ]; then
        save_artifacts "$ARTIFACTS/at-exit" "$NS" "$RELEASE_NS" 2>/dev/null
    fi
    teardown
    local s
    printf '\ntimings:'
    for s in setup install s1 s2 s3 s4 s5 s6 s7 s8 s9 s10 s11 s12 s13; do [ -z "${TIMES[$s]:-}" ] || printf ' %s=%ss' "$s" "${TIMES[$s]}"; done
    printf ' total=%ss\n' "$((SECONDS - T0))"
    if [ "$E2E_FAIL" -gt 0 ] || [ "$rc" != 0 ]; then
        echo "artifacts: $ARTIFACTS"
    else
        rm -rf "$ARTIFACTS"
    fi
    echo "$E2E_PASS passed, $E2E_FAIL failed"
    [ "$E2E_FAIL" -eq 0 ] && [ "$rc" = 0 ]
    exit $?
}
trap 'E2E_FAIL=$((E2E_FAIL + 1)); finish 130' INT TERM

# Runs one scenario file; on a failure saves the artifacts of its moment.
run_scenario() { # N NAME
    local n=$1 name=$2 t=$SECONDS
    say "scenario $n: $name"
    E2E_SCENARIO_FAILED=0
    # shellcheck disable=SC1090
    . "$E2E/scenarios/$n.sh"
    "scenario_$n"
    TIMES[s$n]=$((SECONDS - t))
    if [ $E2E_SCENARIO_FAILED = 1 ]; then
        save_artifacts "$ARTIFACTS/scenario-$n" "$NS" "$RELEASE_NS"
        note "artifacts of scenario $n: $ARTIFACTS/scenario-$n"
    fi
    note "scenario $n took $((SECONDS - t))s"
}

# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

say "set-up"
t=$SECONDS
e2e_find_tools || exit 1
cluster_up
e2e_find_tools || exit 1
kc get --raw /readyz >/dev/null 2>&1 || die "the cluster at KUBECONFIG=$KUBECONFIG is not ready"
detect_local_tier
note "cluster: $(kc config view --minify -o 'jsonpath={.clusters[0].cluster.server}') ($([ $LOCAL_TIER = 1 ] && echo "local tier, $CLUSTER_RUN" || echo other)); kubectl $("$KUBECTL" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), helm $("$HELM" version --short)"
build_binaries
load_images
setup_storage
TIMES[setup]=$((SECONDS - t))

# helm install is the first thing every scenario needs; scenario 1 counts its checks.
. "$E2E/scenarios/install.sh"
t=$SECONDS
say "install: helm install $RELEASE charts/gantry -n $RELEASE_NS"
helm_install
TIMES[install]=$((SECONDS - t))

for n in $ONLY; do
    case $n in
        1) run_scenario 1 "the SpamAssassin job trains to Succeeded" ;;
        2) run_scenario 2 "a worker pod deleted mid-training" ;;
        3) run_scenario 3 "the operator pod killed mid-run" ;;
        4) run_scenario 4 "invalid manifests and a config the worker rejects" ;;
        5) run_scenario 5 "suspend, resume, delete" ;;
        6) run_scenario 6 "helm uninstall" ;;
        7) run_scenario 7 "several ranks per pod: gpusPerReplica 2 on emulated GPUs, nprocPerNode 2 on CPUs" ;;
        8) run_scenario 8 "evaluation during training and early stopping" ;;
        9) run_scenario 9 "gang scheduling: all of a gang's pods or none (kube-scheduler's Workload API)" ;;
        10) run_scenario 10 "Kueue: queued, admitted, preempted by a higher priority, resumed" ;;
        11) run_scenario 11 "an elastic job scaled from 2 to 3 workers while it trains" ;;
        13) run_scenario 13 "elastic by the operator: shrunk while a worker is unschedulable, grown back when room appears" ;;
        12) run_scenario 12 "a worker evicted (drain): a disruption, not counted against backoffLimit" ;;
        *) echo "unknown scenario $n" >&2 ;;
    esac
done
finish 0
