#!/usr/bin/env bash
# hack/demo.sh: the README's main job (`make demo`). On a fresh machine: installs what is
# missing, builds and starts a local single-node Kubernetes (hack/cluster.sh, or uses $KUBECONFIG),
# builds Gantry and its images, installs the operator with Helm, applies a TrainingJob that trains
# a spam classifier on the SpamAssassin corpus with 3 workers, kills one worker mid-way, and shows
# the gang restart, the resume from the last checkpoint, and the final evaluation.
#
#   hack/demo.sh [--keep] [--no-kill] [--replicas N]
#
#   --keep       leave the cluster, the operator and the job running afterwards (kubectl works:
#                export KUBECONFIG=... is printed); default: tear everything down
#   --no-kill    do not kill a worker
#   --replicas   workers (default 3)
#
# The report and the newest checkpoint are copied to $DEMO_OUT (default ./artifacts/demo) before
# the teardown. Needs root for the local cluster (containerd, iptables); the first run builds
# Kubernetes from source (tens of minutes on 2 cores) and prints its progress; later runs take
# a few minutes.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E=$ROOT/e2e
# shellcheck source=e2e/lib.sh
. "$E2E/lib.sh"
# shellcheck source=e2e/jobs.sh
. "$E2E/jobs.sh"
# shellcheck source=e2e/scenarios/install.sh
. "$E2E/scenarios/install.sh"

KEEP=0 KILL=1
while [ $# -gt 0 ]; do
    case $1 in
        --keep) KEEP=1; shift ;;
        --no-kill) KILL=0; shift ;;
        --replicas) E2E_REPLICAS=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo: unknown argument '$1' (see --help)" >&2; exit 64 ;;
    esac
done

DEMO_OUT=${DEMO_OUT:-$ROOT/artifacts/demo}
ARTIFACTS=$DEMO_OUT
mkdir -p "$DEMO_OUT"
RELEASE=gantry RELEASE_NS=gantry-system NS=gantry-demo JOB=spam
CLUSTER_RUN=${GANTRY_RUN:-/tmp/gantry-cluster}
OWN_CLUSTER=0 INSTALLED=0 CRD_EXISTED=1 VOLDIR=''
T0=$SECONDS
STEP=0 STEPS=8

step() { STEP=$((STEP + 1)); printf '\n\033[1m[%d/%d] %s\033[0m  (%s, %ds so far)\n' "$STEP" "$STEPS" "$*" "$(stamp)" "$((SECONDS - T0))"; }
die() { printf '\ndemo: %s\n' "$*" >&2; cleanup; exit 1; }

cleanup() {
    [ "${CLEANED:-0}" = 0 ] || return 0
    CLEANED=1
    if [ $KEEP = 1 ]; then
        printf '\n--keep: everything stays. export KUBECONFIG=%s; kubectl -n %s get tj\n' "${KUBECONFIG:-}" "$NS"
        return 0
    fi
    printf '\nTearing down (--keep leaves it running)...\n'
    if [ -n "${KUBECTL:-}" ] && [ -n "${KUBECONFIG:-}" ]; then
        kc delete namespace "$NS" --wait=true --timeout=120s >/dev/null 2>&1 || true
        kc delete pv "$NS-data" "$NS-ckpt" >/dev/null 2>&1 || true
        [ $INSTALLED = 0 ] || "$HELM" uninstall "$RELEASE" -n "$RELEASE_NS" --wait --timeout 120s >/dev/null 2>&1 || true
        [ $INSTALLED = 0 ] || kc delete namespace "$RELEASE_NS" --wait=false >/dev/null 2>&1 || true
        [ $CRD_EXISTED = 1 ] || kc delete crd trainingjobs.gantry.dev >/dev/null 2>&1 || true
    fi
    [ -z "$VOLDIR" ] || rm -rf "$VOLDIR"
    if [ $OWN_CLUSTER = 1 ]; then
        "$ROOT/hack/cluster.sh" down >/dev/null 2>&1 || echo "warning: hack/cluster.sh down failed; run it by hand" >&2
        echo "The local cluster is down; nothing of the demo runs on this host any more."
    fi
}
trap 'die "interrupted"' INT TERM

# ------------------------------------------------------------------------------------------------
step "Dependencies (hack/install-deps.sh: Debian packages, npm for the data)"
"$ROOT/hack/install-deps.sh" || die "hack/install-deps.sh failed"
echo "ok"

step "Kubernetes"
if [ -n "${KUBECONFIG:-}" ]; then
    echo "Using the cluster in KUBECONFIG=$KUBECONFIG"
elif [ -f "$CLUSTER_RUN/cluster.env" ] && "$ROOT/hack/cluster.sh" status >/dev/null 2>&1; then
    KUBECONFIG=$("$ROOT/hack/cluster.sh" kubeconfig)
    echo "A local cluster already runs ($CLUSTER_RUN); using it and leaving it up"
else
    export GANTRY_FULL_WAIT=${GANTRY_FULL_WAIT:-600} # another full cluster on this host: wait for it
    [ "$(id -u)" = 0 ] || die "the local cluster needs root (containerd, iptables, mounts); run as root or set KUBECONFIG"
    echo "Building the pinned Kubernetes, etcd, CoreDNS, helm (cached in ${GANTRY_CACHE}; the first time takes tens of minutes):"
    # A cold build is quiet for minutes at a time: say every minute that it is still going.
    "$ROOT/hack/cluster.sh" build --tier full > >(sed -u 's/^>> /    /') 2>&1 &
    build_pid=$!
    while kill -0 "$build_pid" 2>/dev/null; do
        for ((i = 0; i < 60; i++)); do kill -0 "$build_pid" 2>/dev/null || break; sleep 1; done
        kill -0 "$build_pid" 2>/dev/null || break
        printf '    ... still building (%ds so far; go build log: %s)\n' "$((SECONDS - T0))" \
            "$(ls -t "$GANTRY_CACHE"/logs/build-*.log 2>/dev/null | head -1)"
    done
    wait "$build_pid" || die "hack/cluster.sh build failed"
    echo "Starting a single-node cluster on this host (containerd, kubelet, scheduler, kube-proxy, CoreDNS):"
    OWN_CLUSTER=1
    "$ROOT/hack/cluster.sh" up --tier full 2>&1 | sed 's/^>> /    /'
    [ "${PIPESTATUS[0]}" = 0 ] || die "hack/cluster.sh up --tier full failed"
    KUBECONFIG=$("$ROOT/hack/cluster.sh" kubeconfig)
fi
export KUBECONFIG
e2e_find_tools || die "kubectl/helm missing"
kc get nodes -o wide | sed 's/^/    /'
LOCAL_TIER=0
env_server=$(sed -n 's/^API_SERVER=//p' "$CLUSTER_RUN/cluster.env" 2>/dev/null)
[ "$(kc config view --minify -o 'jsonpath={.clusters[0].cluster.server}')" != "${env_server:-none}" ] || LOCAL_TIER=1

step "Gantry: build gantry-operator and gantry-worker, make their images"
B=${GANTRY_BUILD_DIR:-$ROOT/build}
if [ ! -f "$B/build.ninja" ]; then
    cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_CUDA=OFF >"$DEMO_OUT/cmake.log" 2>&1 ||
        die "cmake failed ($DEMO_OUT/cmake.log)"
fi
cmake --build "$B" --target gantry-operator gantry-worker gantry-run gantry-predict 2>&1 | grep -E '^\[[0-9]+/[0-9]+\] Linking|FAILED|error' | sed 's/^/    /'
[ "${PIPESTATUS[0]}" = 0 ] || die "the build failed (cmake --build $B)"
if [ $LOCAL_TIER = 1 ]; then
    GANTRY_RUN=$CLUSTER_RUN "$ROOT/hack/images.sh" --build-dir "$B" --import | sed 's/^/    /'
    [ "${PIPESTATUS[0]}" = 0 ] || die "hack/images.sh --import failed"
else
    echo "    (not the local cluster: make sure gantry-operator:0.1.0 and gantry-worker:0.1.0 are on its nodes; hack/images.sh makes the tars)"
fi

step "The data: SpamAssassin public corpus (6,046 e-mails), seeded 80/20 split"
out=$("$ROOT/hack/spam-data.sh") || die "hack/spam-data.sh failed"
sed '$d' <<<"$out" | sed 's/^/    /'
data=$(tail -1 <<<"$out")
[ -s "$data/train.jsonl" ] || die "hack/spam-data.sh made no data"
kc create namespace "$NS" >/dev/null 2>&1 || true
if [ $LOCAL_TIER = 1 ]; then
    VOLUME_ROOT=$(sed -n 's/^VOLUME_ROOT=//p' "$CLUSTER_RUN/cluster.env")
    E2E_BUSYBOX_IMAGE=$(sed -n 's/^BUSYBOX_IMAGE=//p' "$CLUSTER_RUN/cluster.env")
    VOLDIR=$VOLUME_ROOT/$NS
    mkdir -p "$VOLDIR/data" "$VOLDIR/ckpt"
    cp "$data/train.jsonl" "$data/eval.jsonl" "$VOLDIR/data/"
    chmod -R a+rX "$VOLDIR/data"
    chmod 0777 "$VOLDIR/ckpt"
    claims_yaml "$NS" "$VOLDIR" >"$DEMO_OUT/claims.yaml"
else
    claims_yaml "$NS" "" >"$DEMO_OUT/claims.yaml"
fi
kc apply -f "$DEMO_OUT/claims.yaml" | sed 's/^/    /'
[ $LOCAL_TIER = 1 ] || die "copying the data into a remote cluster's claim: see manifests/examples/spam-data.yaml (kubectl cp); not automated here"
echo "    claim spam-data holds train.jsonl and eval.jsonl; claim spam-ckpt is the shared checkpoint volume ($VOLDIR/ckpt on this host)"

step "Install Gantry with Helm"
echo "    helm install $RELEASE charts/gantry -n $RELEASE_NS --create-namespace --wait"
helm_install >/dev/null || die "helm install failed; see $DEMO_OUT/helm-install.txt"
kc -n "$RELEASE_NS" get deployment,pods -l app.kubernetes.io/instance="$RELEASE" | sed 's/^/    /'

step "Train: kubectl apply -f $DEMO_OUT/spam.yaml ($E2E_REPLICAS workers, checkpoints every 40 steps, evaluations every 100)"
spam_job "$JOB" evalInterval=100 >"$DEMO_OUT/spam.yaml"
kc -n "$NS" apply -f "$DEMO_OUT/spam.yaml" | sed 's/^/    /'
echo "    following: kubectl -n $NS get tj $JOB -w, and rank 0's progress (kubectl logs $JOB-worker-0)"
last_tj='' last_log='' killed=0 deadline=$((SECONDS + ${DEMO_TIMEOUT:-1800})) phase=''
while [ $SECONDS -lt $deadline ]; do
    tjline=$(tj_get "$NS" "$JOB" '{.status.phase}  ready {.status.replicas.ready}/{.spec.replicas}  restarts {.status.restarts}  checkpoint {.status.lastCheckpoint.step}')
    phase=${tjline%% *}
    [ "$tjline" = "$last_tj" ] || { printf '    %s  tj/%s  %s\n' "$(stamp)" "$JOB" "$tjline"; last_tj=$tjline; }
    logline=$(kc -n "$NS" logs "$JOB-worker-0" -c worker --tail=40 2>/dev/null | grep -E '^step [0-9]+|^eval step|resum' | tail -1)
    [ -z "$logline" ] || [ "$logline" = "$last_log" ] || { printf '    %s  worker-0: %s\n' "$(stamp)" "$logline"; last_log=$logline; }
    case $phase in Succeeded|Failed) break ;; esac
    # A worker dies once a checkpoint exists (or half way): the gang restarts and resumes.
    if [ $KILL = 1 ] && [ $killed = 0 ] && [ "$phase" = Running ] && ckpt=$(wait_kill_moment "$NS" "$JOB" 1); then
        printf '    %s  >>> chaos: kubectl delete pod %s-worker-1 (a worker dies mid-training; last checkpoint: step %s)\n' \
            "$(stamp)" "$JOB" "${ckpt:-none}"
        kc -n "$NS" delete pod "$JOB-worker-1" --wait=false >/dev/null
        killed=1
    fi
    sleep 2
done

step "Result"
kc -n "$NS" get tj "$JOB" | sed 's/^/    /'
echo "    status: $(tj_get "$NS" "$JOB" '{.status.conditions[?(@.type=="'"${phase:-Succeeded}"'")].message}')"
echo "    gang restarts: $(tj_get "$NS" "$JOB" '{.status.restarts}')"
logs=$(kc -n "$NS" logs "$JOB-worker-0" -c worker 2>&1)
printf '%s\n' "$logs" >"$DEMO_OUT/worker-0.log"
resume=$(grep -i 'resum' <<<"$logs" | head -1)
echo "    resumed: ${resume:-no resume line in the log of rank 0}"
report=$(grep '"accuracy"' <<<"$logs" | tail -1)
acc=''
if [ -n "$report" ]; then
    printf '%s\n' "$report" >"$DEMO_OUT/report.json"
    echo "    evaluation on the 1,209 held-out e-mails (from kubectl logs $JOB-worker-0):"
    sed -n '/^eval |/,/^spam /p' <<<"$logs" | sed 's/^/      /'
    hist=$(json_field "$report" '", ".join("step %d %.2f %%" % (e["step"], 100 * e["accuracy"]) for e in r.get("evals", []))')
    [ -z "$hist" ] || echo "    accuracy during training (every rank evaluates its share; checkpoints keep the history over restarts): $hist"
    acc=$(json_field "$report" 'round(100 * r["accuracy"], 2)')
    f1=$(json_field "$report" 'round(r["macro_f1"], 4)')
    echo "    accuracy $acc %, macro-F1 $f1; report: $DEMO_OUT/report.json"
else
    echo "    no evaluation report in rank 0's log (the job did not finish training)"
fi
if [ -n "$VOLDIR" ] && [ -d "$VOLDIR/ckpt/$JOB" ]; then
    echo "    checkpoints on the shared volume (claim spam-ckpt = $VOLDIR/ckpt on this host):"
    ls -1 "$VOLDIR/ckpt/$JOB" | sed "s#^#      /checkpoints/$JOB/#"
    newest=$(ls -1d "$VOLDIR/ckpt/$JOB"/step-* 2>/dev/null | sort -t- -k2 -n | tail -1)
    [ -z "$newest" ] || { cp -r "$newest" "$DEMO_OUT/"; echo "    newest checkpoint copied to $DEMO_OUT/$(basename "$newest")"; }
    if [ -n "$newest" ]; then # the checkpoint is a complete model: classify two new e-mails with it
        step "Use the model: gantry-predict --model $DEMO_OUT/$(basename "$newest") (the checkpoint alone: weights, config.json, vocab.txt)"
        printf '%s\n' 'Subject: Re: [SAtalk] spamassassin rules not matching after the upgrade to 2.50 - any ideas?' \
            'Subject: URGENT!!! You have WON $1,000,000 - click here to claim your FREE prize now' |
            "$B/worker/gantry-predict" --model "$DEMO_OUT/$(basename "$newest")" --top-k 2 2>&1 | sed 's/^/    /'
    fi
else
    echo "    no checkpoints on the volume"
fi
restarts=$(tj_get "$NS" "$JOB" '{.status.restarts}')
resume_step=$(grep -oiE 'step[^0-9]{0,3}[0-9]+' <<<"$resume" | grep -oE '[0-9]+' | head -1)
printf '\n\033[1mSummary: tj/%s %s | %s worker(s) killed | gang restarts %s | resumed from step %s | accuracy %s %%\033[0m  (%ss)\n' \
    "$JOB" "${phase:-?}" "$killed" "${restarts:-?}" "${resume_step:-none}" "${acc:-?}" "$((SECONDS - T0))"
rc=0
[ "$phase" = Succeeded ] || { echo "demo: the job did not succeed" >&2; rc=1; }
if [ "$killed" = 1 ] && [ "${restarts:-0}" = 0 ]; then
    echo "demo: a worker was killed but the gang did not restart: the run above is not the fault-tolerant run it should be" >&2
    rc=1
fi
if [ "$killed" = 1 ] && [ -z "$resume_step" ]; then
    echo "demo: no worker resumed from a checkpoint after the kill" >&2
    rc=1
fi
cleanup
exit $rc
