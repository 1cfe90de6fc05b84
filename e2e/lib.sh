# shellcheck shell=bash
# shellcheck disable=SC2034  # E2E_SCENARIO_FAILED, INSTALLED, CRD_EXISTED: read by the sourcing script
# e2e/lib.sh: helpers shared by e2e/run.sh, its scenarios (e2e/scenarios/*.sh) and hack/demo.sh.
# Everything talks to the cluster through kubectl and helm, as a user would.
#
# Expects: ROOT (the repository), KUBECONFIG exported. Sets KUBECTL and HELM when unset.

GANTRY_CACHE=${GANTRY_CACHE:-$HOME/.cache/gantry}
E2E_START_TIMEOUT=${E2E_START_TIMEOUT:-180} # seconds a job may go without any worker pod

e2e_k8s_version() {
    sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' \
        "$ROOT/hack/k8s/go.mod" | head -1
}

# kubectl and helm: $KUBECTL/$HELM, else the ones hack/cluster.sh build cached, else PATH.
e2e_find_tools() {
    if [ -z "${KUBECTL:-}" ]; then
        KUBECTL=$GANTRY_CACHE/k8s-$(e2e_k8s_version)/bin/kubectl
        [ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl 2>/dev/null) || KUBECTL=
    fi
    if [ -z "${HELM:-}" ]; then
        HELM=$(ls -d "$GANTRY_CACHE"/helm-*/bin/helm 2>/dev/null | sort -V | tail -1)
        [ -x "${HELM:-}" ] || HELM=$(command -v helm 2>/dev/null) || HELM=
    fi
    [ -n "$KUBECTL" ] || { echo "error: kubectl not found; run 'hack/cluster.sh build' or put kubectl on PATH" >&2; return 1; }
    [ -n "$HELM" ] || { echo "error: helm not found; run 'hack/cluster.sh build' or put helm on PATH" >&2; return 1; }
    export KUBECTL HELM
}

kc() { "$KUBECTL" --request-timeout=30s "$@"; }

# ok/FAIL lines and the counts the suite ends with.
E2E_PASS=${E2E_PASS:-0}
E2E_FAIL=${E2E_FAIL:-0}
E2E_SCENARIO_FAILED=0
ok() { E2E_PASS=$((E2E_PASS + 1)); printf '  ok   %s\n' "$*"; }
bad() { E2E_FAIL=$((E2E_FAIL + 1)); E2E_SCENARIO_FAILED=1; printf '  FAIL %s\n' "$*"; }
# fd 3 is the terminal: progress lines reach it even from a command whose output check() hides.
exec 3>&1
check() { # DESCRIPTION COMMAND...: ok when the command succeeds; its output goes to commands.log
    local d=$1 log=${ARTIFACTS:+$ARTIFACTS/commands.log}
    shift
    if "$@" >>"${log:-/dev/null}" 2>&1; then ok "$d"; else bad "$d"; return 1; fi
}
note() { printf '       %s\n' "$*" >&3; }
stamp() { date -u +%H:%M:%S; }

# jsonpath of a TrainingJob (empty when absent).
tj_get() { # NS NAME JSONPATH
    kc -n "$1" get trainingjob "$2" -o "jsonpath=$3" 2>/dev/null || true
}

# Waits until the job's phase is one of PHASES (space-separated); prints `kubectl get tj` lines
# (as `kubectl get tj -w` would) whenever phase, ready or restarts change. Returns 1 on timeout
# or when the job reaches a terminal phase that is not wanted.
wait_tj_phase() { # NS NAME "PHASES" TIMEOUT_S
    local ns=$1 name=$2 want=" $3 " deadline=$((SECONDS + $4)) line last='' phase start=$SECONDS
    while :; do
        line=$(tj_get "$ns" "$name" '{.status.phase} {.status.replicas.ready}/{.spec.replicas} restarts={.status.restarts} ckpt={.status.lastCheckpoint.step}')
        phase=${line%% *}
        if [ "$line" != "$last" ]; then
            printf '       %s  tj/%s  %s\n' "$(stamp)" "$name" "${line:-<no status yet>}" >&3
            last=$line
        fi
        [[ -n $phase && $want == *" $phase "* ]] && return 0
        if [[ $phase == Succeeded || $phase == Failed ]]; then
            note "tj/$name ended $phase: $(tj_get "$ns" "$name" '{.status.conditions[?(@.type=="'"$phase"'")].message}')"
            return 1
        fi
        [ $SECONDS -lt $deadline ] || { note "timed out after ${4}s waiting for tj/$name to be$want"; return 1; }
        # A job that never gets a pod will not get one later: say so instead of waiting it out.
        if [[ -z $phase || $phase == Pending ]] && [ $SECONDS -ge $((start + E2E_START_TIMEOUT)) ] &&
            [ -z "$(job_pods "$ns" "$name")" ]; then
            note "tj/$name has no worker pod ${E2E_START_TIMEOUT}s after the wait began (phase '${phase}'); see the operator's log"
            return 1
        fi
        sleep 2
    done
}

# Waits for a condition on anything (a shell command that succeeds).
wait_until() { # TIMEOUT_S COMMAND...
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 1
    done
}

job_pods() { # NS NAME: pod names of the job, one per line
    kc -n "$1" get pods -l "gantry.dev/job-name=$2" -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null || true
}

# The highest step of a checkpoint a worker log says was written (stdin), empty if none. Only the
# worker's completion lines count: "Saved checkpoint <root>/<job>/step-N in M ms" (after the rename
# and the directory fsync) and "checkpoint step-N written to ...". Not the startup config line:
# its "intervalSteps":20, "warmupSteps":20 look like a step to a loose pattern, and killing on them
# deletes a worker before any checkpoint exists (nothing to resume from).
ckpt_step_in_log() {
    grep -oE 'Saved checkpoint [^ ]*/step-[0-9]+ in |checkpoint step-[0-9]+ written' |
        grep -oE 'step-[0-9]+' | grep -oE '[0-9]+' | sort -n | tail -1
}

# The highest "step N/M" line of rank 0's log (its progress), empty if none; rank0_past: it is
# at least N (for wait_until).
rank0_step() { # NS NAME
    kc -n "$1" logs "$2-worker-0" -c worker 2>/dev/null | grep -oE '^step [0-9]+/' |
        grep -oE '[0-9]+' | tail -1
}
rank0_past() { local s; s=$(rank0_step "$1" "$2"); [ "${s:-0}" -ge "$3" ]; } # NS NAME N

# Waits for the moment to kill a worker: a checkpoint exists (status.lastCheckpoint, or rank 0
# logging one it wrote), so that there is something to resume from; failing that, rank 0 is past
# half way (its "step N/M" lines), so that the gang restart is still exercised. Past, not at: when
# half way is also a checkpoint step (maxSteps 40, intervalSteps 20), its "step 20/40" line comes
# before that checkpoint's "Saved checkpoint" line, and a poll between the two gave up on a
# checkpoint that was being written (CI, 2026-12-02). Prints the checkpoint
# step (empty when half way without one); returns 1 when the job ended first or on timeout.
wait_kill_moment() { # NS NAME TIMEOUT_S
    local ns=$1 job=$2 deadline=$((SECONDS + $3)) step log prog total phase
    while [ $SECONDS -lt $deadline ]; do
        step=$(tj_get "$ns" "$job" '{.status.lastCheckpoint.step}')
        [ "${step:-0}" -gt 0 ] 2>/dev/null && { echo "$step"; return 0; }
        log=$(kc -n "$ns" logs "$job-worker-0" -c worker 2>/dev/null)
        step=$(ckpt_step_in_log <<<"$log")
        [ "${step:-0}" -gt 0 ] 2>/dev/null && { echo "$step"; return 0; }
        prog=$(grep -oE '^step [0-9]+/[0-9]+' <<<"$log" | tail -1)
        total=${prog#*/} prog=${prog#step } prog=${prog%/*}
        if [ -n "$prog" ] && [ "$prog" -gt $((total / 2)) ]; then
            note "rank 0 is at step $prog/$total and no checkpoint was reported"
            return 0
        fi
        phase=$(tj_get "$ns" "$job" '{.status.phase}')
        [[ $phase == Succeeded || $phase == Failed ]] && return 1
        sleep 1
    done
    return 1
}

# The last JSON line of rank 0's log that holds "accuracy": the final eval report.
rank0_report() { # NS NAME
    kc -n "$1" logs "$2-worker-0" -c worker 2>/dev/null | grep '"accuracy"' | tail -1
}

json_field() { # JSON PYTHON-EXPR (on r)
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

# Saves what a person debugging a failure wants: operator logs (current and previous), every
# worker log, events, `kubectl describe` of jobs and pods, the jobs' YAML.
save_artifacts() { # DIR NAMESPACE...
    local dir=$1 ns p
    shift
    mkdir -p "$dir"
    for ns in "$@"; do
        kc get namespace "$ns" >/dev/null 2>&1 || continue
        mkdir -p "$dir/$ns"
        kc -n "$ns" get events --sort-by=.lastTimestamp -o wide >"$dir/$ns/events.txt" 2>&1 || true
        kc -n "$ns" get trainingjobs,pods,svc,cm,pvc -o wide >"$dir/$ns/get.txt" 2>&1 || true
        kc -n "$ns" get trainingjobs -o yaml >"$dir/$ns/trainingjobs.yaml" 2>&1 || true
        kc -n "$ns" describe trainingjobs >"$dir/$ns/describe-trainingjobs.txt" 2>&1 || true
        kc -n "$ns" describe pods >"$dir/$ns/describe-pods.txt" 2>&1 || true
        for p in $(kc -n "$ns" get pods -o name 2>/dev/null); do
            p=${p#pod/}
            kc -n "$ns" logs "$p" --all-containers >"$dir/$ns/$p.log" 2>&1 || true
            kc -n "$ns" logs "$p" --all-containers --previous >"$dir/$ns/$p.previous.log" 2>/dev/null ||
                rm -f "$dir/$ns/$p.previous.log"
        done
    done
    kc get events -A --sort-by=.lastTimestamp >"$dir/events-all.txt" 2>&1 || true
    kc get pv -o wide >"$dir/pv.txt" 2>&1 || true
}

# Emulated GPUs for a cluster without any (e2e scenario 7): the node advertises N nvidia.com/gpu
# the way an extended resource is advertised by hand (a JSON patch of its status: capacity and
# allocatable), so the scheduler places GPU pods there; with no device plugin for the resource
# the kubelet admits them without allocating a device. gpu_node_unpatch removes both again.
gpu_node_patch() { node_res_patch "$1" nvidia.com/gpu "$2"; } # NODE N
gpu_node_unpatch() { node_res_unpatch "$1" nvidia.com/gpu; }  # NODE
# Any extended resource the same way (scenario 9: gantry.dev/e2e-slot, to fill the node exactly).
node_res_patch() { # NODE RESOURCE N
    local r=${2//\//~1}
    kc patch node "$1" --subresource=status --type=json -p "[
        {\"op\":\"add\",\"path\":\"/status/capacity/$r\",\"value\":\"$3\"},
        {\"op\":\"add\",\"path\":\"/status/allocatable/$r\",\"value\":\"$3\"}]"
}
# Scenarios 9 and 13: the first node advertises N gantry.dev/e2e-slot, which each worker of
# theirs requests one of (slots=1), so that only N fit. Sets SLOT_NODE (the teardown removes the
# slots when the scenario could not); fails when a run left slots there.
slots_up() { # N
    local node have
    node=$(kc get nodes -o 'jsonpath={.items[0].metadata.name}')
    have=$(kc get node "$node" -o 'jsonpath={.status.capacity.gantry\.dev/e2e-slot}')
    [ -z "$have" ] || { bad "node $node already has gantry.dev/e2e-slot $have (a run left it?)"; return 1; }
    check "node $node advertises $1 gantry.dev/e2e-slot (room for $1 workers)" \
        node_res_patch "$node" gantry.dev/e2e-slot "$1" || return 1
    SLOT_NODE=$node
}
node_res_unpatch() { # NODE RESOURCE
    local r=${2//\//~1}
    kc patch node "$1" --subresource=status --type=json -p "[
        {\"op\":\"remove\",\"path\":\"/status/capacity/$r\"},
        {\"op\":\"remove\",\"path\":\"/status/allocatable/$r\"}]"
}
