#!/usr/bin/env bash
# gantry-operator + real gantry-worker processes on the API tier (CTest label `api`): progress in
# `kubectl get tj`, hang detection and the final progress of a short job, with e2e/api/kubelet.py
# running a real gantry-worker (2 ranks, TCP ring over loopback) for every pod the operator
# creates and reporting the pods' status as a kubelet would.
#
#   GANTRY_TEST_KUBECONFIG=... e2e/api/progress_real_test.sh OPERATOR WORKER [final|stall|all]
#
# final: a job shorter than the operator's progress interval (3600 s: the poller never reads)
#        Succeeds with status.progress (loss, samples/s) and status.lastCheckpoint taken from
#        rank 0's termination message (worker/obs.h), the checkpoint on disk.
# stall: a long job; the PROGRESS column advances; rank 1 SIGSTOPped (rank 0 still answers
#        /progress, its step stands: blocked in all-reduce) -> Stalled + Event + gang restart
#        within progressDeadlineSeconds (6) + a few 1 s intervals, with the workers' peer timeout
#        at 900 s (so the operator, not the worker's timeout, caught it); the new gang resumes
#        from the checkpoint and Stalled turns False; then rank 0 SIGSTOPped (its /progress
#        times out) -> Stalled and the second restart. In between, every metric the Grafana
#        dashboard (docs/grafana/gantry.json) queries must be in the running operator's and
#        rank 0's /metrics.
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset. Logs: $ARTIFACTS (or a temp dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
op=${1:?usage: progress_real_test.sh OPERATOR WORKER [final|stall|all]}
worker=${2:?usage: progress_real_test.sh OPERATOR WORKER [final|stall|all]}
group=${3:-all}
case $group in final | stall | all) ;; *) echo "unknown group '$group'"; exit 64 ;; esac
want() { [ "$group" = all ] || [ "$group" = "$1" ]; }
# shellcheck source=e2e/api/lib.sh
. "$here/lib.sh"
api_require_cluster
export KUBECONFIG=$GANTRY_TEST_KUBECONFIG
api_find_kubectl

ns=ctl-prog-$$-$RANDOM
tmp=$(mktemp -d /tmp/gantry-progress-real.XXXXXX)
logs=${ARTIFACTS:-$tmp/logs}
mkdir -p "$logs"
op_pid='' kl_pid=''
t_start=$SECONDS
ok() { checks=$((checks + 1)); echo "ok   [$((SECONDS - t_start))s] $*"; } # lib.sh's, timed
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL [$((SECONDS - t_start))s] $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_op() { # start_op NAME FLAGS...
    op_log=$logs/operator-$ns-$1.log
    shift
    # No leader election: not under test here, and a Lease renewal that times out on a loaded
    # machine would stop the operator in the middle of a check.
    "$op" --namespace "$ns" --workers 2 --log-level info --leader-elect false \
        --metrics-addr 127.0.0.1:0 "$@" >>"$op_log" 2>&1 &
    op_pid=$!
}
stop_op() {
    [ -n "$op_pid" ] || return 0
    kill -TERM "$op_pid" 2>/dev/null || true
    wait "$op_pid" 2>/dev/null || true
    op_pid=
}
start_kubelet() { # start_kubelet NAME METRICS_PORT
    python3 "$here/kubelet.py" --kubectl "$kubectl" --namespace "$ns" --worker "$worker" \
        --dir "$tmp/kubelet-$1" --metrics-port "$2" 2>>"$logs/kubelet-$ns-$1.log" &
    kl_pid=$!
}
stop_kubelet() { # SIGTERM: it SIGCONTs and kills its workers
    [ -n "$kl_pid" ] || return 0
    kill -TERM "$kl_pid" 2>/dev/null || true
    wait "$kl_pid" 2>/dev/null || true
    kl_pid=
}
cleanup() {
    stop_kubelet
    stop_op
    "$kubectl" --request-timeout=30s delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
    # the workers' logs next to the operator's; the rest (checkpoints, configs) goes
    for d in "$tmp"/kubelet-*/; do
        [ -d "$d" ] || continue
        mkdir -p "$logs/$(basename "$d")"
        for f in "$d"*/log; do
            [ -f "$f" ] && cp "$f" "$logs/$(basename "$d")/$(basename "$(dirname "$f")").log"
        done
    done
    rm -rf "$tmp"/kubelet-* "$tmp/ckpt" "$tmp/train.jsonl"
    [ -z "${ARTIFACTS:-}" ] || rm -rf "$tmp"
    echo "logs: $logs"
}
trap cleanup EXIT

# lib.sh's wait_for counts tries; on a loaded machine kubectl alone takes longer than 0.2 s, so
# the deadlines here are wall-clock seconds.
wait_for() { # wait_for DESC SECONDS CMD...: retries CMD every 0.2 s for SECONDS of wall time
    local desc=$1 secs=$2 end=$((SECONDS + $2))
    shift 2
    while [ "$SECONDS" -lt "$end" ]; do
        if "$@" >/dev/null 2>&1; then ok "$desc"; return 0; fi
        sleep 0.2
    done
    bad "$desc (not within ${secs}s)"
    return 1
}
npods() { k get pods -l "gantry.dev/job-name=$1${2:+,gantry.dev/restart-count=$2}" --no-headers 2>/dev/null | wc -l; }
has_pods() { [ "$(npods "$1" "${3:-}")" -eq "$2" ]; }
pid_of() { # pid_of KUBELET POD: the running worker's pid (kubelet.py's pods/ file)
    local f=$tmp/kubelet-$1/pods/$2
    [ -s "$f" ] && awk '{print $2}' "$f"
}
progress_col() { # the step in kubectl get tj's PROGRESS column ("123/100000 (0%)"), or ""
    k get tj "$1" --no-headers 2>/dev/null | sed -n 's#.* \([0-9][0-9]*\)/[0-9][0-9]* ([0-9]*%).*#\1#p'
}
col_above() { local s; s=$(progress_col "$1"); [ -n "$s" ] && [ "$s" -gt "$2" ]; }
# apply_job NAME EPOCHS INTERVAL_STEPS RUNPOLICY: 2 ranks on worker/testdata/spam/train.jsonl
# (a small Transformer, one thread each), checkpoints under $tmp/ckpt; peer and rendezvous
# timeouts of 900 s, far beyond the progress deadlines used here.
apply_job() {
    k apply -f - >/dev/null <<EOF
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$1"},
 "spec":{"replicas":2,"image":"gantry-worker:test",
  "training":{"model":{"hidden":32,"heads":2,"layers":1,"maxSeqLen":32},
   "data":{"train":"$data","minFreq":1},"epochs":$2,"batchSize":4,"learningRate":0.001,
   "logInterval":20,"threads":1},
  "checkpoint":{"path":"$tmp/ckpt","intervalSteps":$3,"keep":2},
  "template":{"spec":{"containers":[{"name":"worker","env":[
   {"name":"GANTRY_PEER_TIMEOUT","value":"900"},{"name":"GANTRY_RDZV_TIMEOUT","value":"900"}]}]}},
  "runPolicy":$4}}
EOF
}
op_metrics_port() { sed -n 's/.*"server":"metrics".*"port":\([0-9]*\).*/\1/p' "$op_log" | tail -1; }
op_metric() { # op_metric NAME: the value of an unlabelled operator metric
    curl -s -m 5 "http://127.0.0.1:$(op_metrics_port)/metrics" | awk -v n="$1" '$1 == n {print $2}'
}

data=$tmp/train.jsonl
python3 - "$data" <<'PY'
import json, random, sys
random.seed(7)
ham = "meeting lunch report project schedule notes review team budget call".split()
spam = "free winner prize cash offer click urgent credit deal bonus".split()
with open(sys.argv[1], "w") as f:
    for i in range(64):
        words, label = (spam, "spam") if i % 2 else (ham, "ham")
        f.write(json.dumps({"text": " ".join(random.choice(words) for _ in range(20)),
                            "label": label}) + "\n")
PY
mkdir -p "$tmp/ckpt"
"$kubectl" apply -f "$root/manifests/crds/gantry.dev_trainingjobs.yaml" >/dev/null
"$kubectl" wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
"$kubectl" create namespace "$ns" >/dev/null

if want final; then
# ---- final: the job ends before the poller's first read; rank 0's last word fills status
start_op final --progress-interval 3600
start_kubelet final "$(free_port)"
# 64 examples / (4 x 2 ranks) = 8 steps an epoch, 3 epochs: 24 steps, a checkpoint every 10
apply_job short 3 10 '{"backoffLimit":0}'
wait_for "short: 2 pods created and run by the kubelet" 30 has_pods short 2
wait_for "short: Succeeded" 60 is tj/short '{.status.phase}' Succeeded
got=$(jp tj/short '{.status.progress.step} {.status.progress.totalSteps} {.status.progress.state} {.status.lastCheckpoint.step} {.status.lastCheckpoint.path}')
[ "$got" = "24 24 succeeded 24 $tmp/ckpt/short/step-24" ] \
    && ok "short: status.progress and lastCheckpoint from rank 0's termination message: $got" \
    || bad "short: progress/lastCheckpoint: '$got' ($(jp tj/short '{.status.progress}'))"
loss=$(jp tj/short '{.status.progress.loss}') sps=$(jp tj/short '{.status.progress.samplesPerSecond}')
python3 -c "import sys; l, s = float(sys.argv[1]), float(sys.argv[2]); assert 0 < l < 5 and s > 0" \
    "$loss" "$sps" 2>/dev/null && ok "short: loss $loss, samples/s $sps (only the worker knows them)" \
    || bad "short: loss '$loss' samples/s '$sps'"
[ -d "$tmp/ckpt/short/step-24" ] && ok "short: the checkpoint status names is on disk" \
    || bad "short: no $tmp/ckpt/short/step-24 ($(ls "$tmp/ckpt/short" 2>&1 | tr '\n' ' '))"
msg=$(jp pod/short-worker-0 '{.status.containerStatuses[0].state.terminated.message}')
[ "${#msg}" -gt 0 ] && [ "${#msg}" -lt 768 ] && ok "short: rank 0's termination message: ${#msg} bytes" \
    || bad "short: termination message '$msg'"
reads=$(op_metric gantry_operator_progress_reads_total)
[ "$reads" = 0 ] && ok "short: the poller never read /progress (reads $reads): no race to win" \
    || bad "short: progress reads '$reads'"
stop_kubelet
stop_op
fi

if want stall; then
# ---- stall: real ranks, PROGRESS advances, SIGSTOP rank 1 then rank 0 -> Stalled + restart
mport=$(free_port)
start_op stall --progress-interval 1 --progress-url-template "http://{ip}:$mport/progress"
start_kubelet stall "$mport"
deadline=6
apply_job real 100000 200 "{\"backoffLimit\":2,\"progressDeadlineSeconds\":$deadline}"
wait_for "real: 2 pods created" 30 has_pods real 2
wait_for "real: Running 2/2 (the kubelet started both ranks)" 30 is tj/real '{.status.phase} {.status.ready}' "Running 2/2"
wait_for "real: status.progress read from the real rank 0" 30 bash -c "[ -n \"\$(\"$kubectl\" -n $ns get tj real -o jsonpath='{.status.progress.step}')\" ]"
s1=$(progress_col real)
wait_for "real: kubectl get tj PROGRESS advances (from ${s1:-none})" 20 col_above real "${s1:-0}"
echo "     $(k get tj real | tr '\n' '|')"
ckpt_on_disk() {
    local s
    s=$(jp tj/real '{.status.lastCheckpoint.step}')
    [ -n "$s" ] && [ "$s" -ge 200 ] && [ -d "$tmp/ckpt/real/step-$s" ]
}
wait_for "real: status.lastCheckpoint (>= 200) is a checkpoint on disk" 30 ckpt_on_disk
ck1=$(jp tj/real '{.status.lastCheckpoint.step}')

# 1. Rank 1 hangs (a stuck peer): rank 0 blocks in all-reduce, still answers, step stands.
step0() { # "STEP from START_STEP" from rank 0's /progress, or none
    local s
    for _ in 1 2; do
        s=$(curl -s -m 3 "http://127.0.0.1:$mport/progress" 2>/dev/null | python3 -c \
            'import json,sys; j = json.load(sys.stdin); print(j["step"], "from", j["start_step"])' \
            2>/dev/null) && { echo "$s"; return; }
    done
    echo none
}
stalled_after() { # seconds from $1 (Unix time) to the Stalled condition's lastTransitionTime
    local ts
    ts=$(jp tj/real '{.status.conditions[?(@.type=="Stalled")].lastTransitionTime}')
    echo $(($(date -d "$ts" +%s) - $1))
}
r1=$(pid_of stall real-worker-1)
kill -STOP "$r1"
t0=$(date +%s)
sleep 1
a=$(step0)
sleep 1
b=$(step0)
if [[ $b != *" from 0" ]]; then # the next gang's rank 0 (resumed from a checkpoint) answered
    echo "note: reads of /progress too slow here to compare before the restart ('$a', '$b')"
elif [ "$a" != none ] && [ "$a" = "$b" ]; then
    ok "real: rank 1 stopped: rank 0 still answers /progress, step stands at $a"
else
    bad "real: rank 0's /progress with rank 1 stopped: '$a' then '$b'"
fi
wait_for "real: Stalled (ProgressDeadlineExceeded) and the gang restarted (restarts 1)" 40 \
    is tj/real '{.status.conditions[?(@.type=="Stalled")].status} {.status.conditions[?(@.type=="Stalled")].reason} {.status.restarts}' \
    "True ProgressDeadlineExceeded 1"
dt=$(stalled_after "$t0")
[ "$dt" -le $((deadline + 12)) ] && ok "real: stall of rank 1 caught ${dt}s after SIGSTOP (deadline ${deadline}s; peer timeout 900 s)" \
    || bad "real: stall caught after ${dt}s"
wait_for "real: a Warning Event Stalled" 10 bash -c "'$kubectl' -n $ns get events --field-selector reason=Stalled,type=Warning -o name | grep -q ."
if grep -qiE 'timed out|timeout' "$tmp/kubelet-stall/real-worker-0-"*/log; then
    bad "real: a worker timed out on its own: $(grep -hiE 'timed out|timeout' "$tmp/kubelet-stall/real-worker-0-"*/log | head -2)"
else
    ok "real: no worker timed out (the operator restarted the gang first)"
fi
wait_for "real: the old gang's processes are gone (pod deletes)" 20 bash -c "! kill -0 $r1 2>/dev/null"
wait_for "real: the new gang (restart-count 1) runs" 30 is tj/real '{.status.phase} {.status.ready} {.status.restarts}' "Running 2/2 1"
wait_for "real: the new rank 0 resumed from a checkpoint (>= $ck1)" 30 bash -c "s=\$(curl -s -m 2 http://127.0.0.1:$mport/progress | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"start_step\"])'); [ \"\$s\" -ge $ck1 ]"
wait_for "real: Stalled=False once the new gang advances" 30 \
    is tj/real '{.status.conditions[?(@.type=="Stalled")].status}' False
python3 "$root/docs/grafana/check_dashboard.py" "$root/docs/grafana/gantry.json" "$root/docs/metrics.md" \
    --scrape "http://127.0.0.1:$(op_metrics_port)/metrics" --scrape "http://127.0.0.1:$mport/metrics" \
    --source "$root/worker/metrics.c" --late gantry_train_eval >"$logs/dashboard-$ns.txt" 2>&1 \
    && ok "real: every metric the Grafana dashboard queries is in the running operator's and rank 0's /metrics" \
    || bad "real: dashboard check: $(grep FAIL "$logs/dashboard-$ns.txt" | head -3)"

# 2. Rank 0 hangs: /progress reads time out, no step read -> Stalled again, restart 2.
r0=$(pid_of stall real-worker-0)
kill -STOP "$r0"
t0=$(date +%s)
curl -s -m 2 -o /dev/null "http://127.0.0.1:$mport/progress" && bad "real: a stopped rank 0 answered /progress" \
    || ok "real: rank 0 stopped: /progress times out"
wait_for "real: Stalled and the second gang restart (restarts 2)" 40 \
    is tj/real '{.status.conditions[?(@.type=="Stalled")].status} {.status.restarts}' "True 2"
dt=$(stalled_after "$t0")
[ "$dt" -le $((deadline + 12)) ] && ok "real: stall of rank 0 caught ${dt}s after SIGSTOP (deadline ${deadline}s)" \
    || bad "real: second stall caught after ${dt}s"
wait_for "real: gantry_operator_gang_restarts_total 2" 10 bash -c "[ \"\$(curl -s -m 5 http://127.0.0.1:$(op_metrics_port)/metrics | awk '\$1 == \"gantry_operator_gang_restarts_total\" {print \$2}')\" = 2 ]"
stop_kubelet
stop_op
fi

if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$logs"/operator-"$ns"-*.log \
    "$tmp"/kubelet-*/*/log 2>/dev/null; then
    bad "sanitizer reports in the logs above"
else
    ok "no sanitizer reports in the operator and worker logs"
fi
api_summary
