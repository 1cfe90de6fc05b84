#!/usr/bin/env bash
# gantry-operator against a real kube-apiserver (CTest label `api`); the test plays kubelet by
# setting pod phases through the pods' status subresource.
#
#   GANTRY_TEST_KUBECONFIG=/tmp/gantry-cluster/admin.kubeconfig e2e/api/operator_test.sh OPERATOR [GROUP]
#
# GROUP: lifecycle (scenarios 1-6), ha (7-8), obs (9) or all (default); CTest runs the groups as
# separate tests so that each stays well under a minute.
# Scenarios, each a TrainingJob in one namespace of its own (deleted on exit), with the operator
# scoped to it: children and pod contract; Running 3/3; rank 0 Succeeded -> Succeeded and
# cleanPodPolicy; the job deleted and applied again while the old pods are still collected; a
# retryable failure -> whole gang replaced with restart count 1; failures past
# backoffLimit -> Failed and nothing recreated when pods are deleted by hand; exit 65 -> Failed
# at once; suspend/resume; ttlSecondsAfterFinished; activeDeadlineSeconds; SIGKILL of the
# operator in the middle of creating pods -> no duplicates after a restart; two replicas -> only
# the Lease holder acts, and a standby takes over when the leader stops; /healthz, /readyz and
# /metrics; status.progress read from rank 0's /progress (a fake server on loopback stands in for
# the pod, through --progress-url-template, since pod IPs do not exist on this tier) and shown by
# `kubectl get tj`; a hung rank 0 (SIGSTOP of that server) -> Stalled + gang restart, counting
# against backoffLimit; gang: Workload on an API server that serves no Workloads: no pod and
# an Event saying what to enable.
# Exits 77 when GANTRY_TEST_KUBECONFIG is unset. Operator logs: $ARTIFACTS (or a temp dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
op=${1:?usage: operator_test.sh PATH-TO-gantry-operator [lifecycle|ha|all]}
group=${2:-all}
case $group in lifecycle | ha | obs | all) ;; *) echo "unknown group '$group'"; exit 64 ;; esac
want() { [ "$group" = all ] || [ "$group" = "$1" ]; }
# shellcheck source=e2e/api/lib.sh
. "$here/lib.sh"
api_require_cluster
export KUBECONFIG=$GANTRY_TEST_KUBECONFIG
api_find_kubectl

ns=ctl-op-$$-$RANDOM
logs=${ARTIFACTS:-$(mktemp -d /tmp/gantry-op-test.XXXXXX)}
mkdir -p "$logs"
op_pid= op_log=
start_op() { # start_op NAME [FLAGS...]: a new operator process, logging to operator-NAME.log
    op_log=$logs/operator-$ns-$1.log
    shift
    "$op" --namespace "$ns" --workers 2 --log-level info --lease-duration 4 --renew-deadline 3 \
        --retry-period 1 "$@" >>"$op_log" 2>&1 &
    op_pid=$!
}
stop_op() { # stop_op SIGNAL [PID]
    local pid=${2:-$op_pid}
    [ -n "$pid" ] || return 0
    kill "-$1" "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ "$pid" != "$op_pid" ] || op_pid=
}
extra_pids=() fake_pid='' ticker_pid=''
stop_aux() { # the fake /progress server (maybe SIGSTOPped) and the step ticker of scenario 9
    if [ -n "$ticker_pid" ]; then kill "$ticker_pid" 2>/dev/null || true; fi
    if [ -n "$fake_pid" ]; then
        kill -CONT "$fake_pid" 2>/dev/null || true
        kill "$fake_pid" 2>/dev/null || true
    fi
    return 0
}
cleanup() {
    stop_aux
    stop_op TERM
    for p in "${extra_pids[@]}"; do stop_op TERM "$p"; done
    "$kubectl" --request-timeout=30s delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
    echo "operator logs: $logs/operator-$ns-*.log"
}
trap cleanup EXIT

pod_env() { jp "pod/$1" "{.spec.containers[?(@.name==\"worker\")].env[?(@.name==\"$2\")].value}"; }

# set_pod POD PHASE [EXIT]: what a kubelet would report.
set_pod() {
    local state='{"running":{}}' ready=True ip='"podIP":"10.244.0.10","podIPs":[{"ip":"10.244.0.10"}],'
    case $2 in
        Succeeded|Failed) state="{\"terminated\":{\"exitCode\":${3:-0},\"reason\":\"Completed\"}}"; ready=False ;;
    esac
    k patch "pod/$1" --subresource=status --type=merge -p "{\"status\":{$ip\"phase\":\"$2\",
        \"conditions\":[{\"type\":\"Ready\",\"status\":\"$ready\"}],
        \"containerStatuses\":[{\"name\":\"worker\",\"image\":\"gantry-worker:0.1.0\",\"imageID\":\"\",
        \"ready\":$([ $ready = True ] && echo true || echo false),\"restartCount\":0,\"state\":$state}]}}" >/dev/null
}
run_all() { # run_all JOB N: every worker Running and Ready
    for ((i = 0; i < $2; i++)); do set_pod "$1-worker-$i" Running; done
}
apply_job() { # apply_job NAME REPLICAS [runPolicy JSON]
    k apply -f - >/dev/null <<EOF2
{"apiVersion":"gantry.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"$1"},
 "spec":{"replicas":$2,"runPolicy":${3:-{\}}}}
EOF2
}

"$kubectl" apply -f "$root/manifests/crds/gantry.dev_trainingjobs.yaml" >/dev/null
"$kubectl" wait --for=condition=Established crd/trainingjobs.gantry.dev --timeout=60s >/dev/null
"$kubectl" create namespace "$ns" >/dev/null
# Only lifecycle uses operator a; ha and obs start their own. (Killing a process bash has just
# forked, before it execs the operator, makes that subshell run the EXIT trap: cleanup would
# delete the namespace under the test.)
if want lifecycle; then start_op a; fi

if want lifecycle; then
# ---- 1. children, pod contract, Running, rank 0 Succeeded, cleanPodPolicy Running
apply_job happy 3
wait_for "happy: 3 pods created" 30 has_pods happy 3
wait_for "happy: headless Service publishing not-ready addresses" 10 \
    is svc/happy '{.spec.clusterIP} {.spec.publishNotReadyAddresses}' "None true"
wait_for "happy: ConfigMap with config.json" 10 is cm/happy-config '{.metadata.labels.gantry\.dev/job-name}' happy
wait_for "happy: Secret with a token" 10 bash -c "[ -n \"\$('$kubectl' -n $ns get secret happy-rdzv -o jsonpath='{.data.token}')\" ]"
got="$(jp pod/happy-worker-1 '{.spec.hostname} {.spec.subdomain} {.spec.restartPolicy} {.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].controller}')"
[ "$got" = "happy-worker-1 happy Never TrainingJob true" ] && ok "pod DNS fields and owner: $got" || bad "pod fields: $got"
got="$(pod_env happy-worker-1 MASTER_ADDR) $(pod_env happy-worker-1 WORLD_SIZE) $(pod_env happy-worker-1 RANK) $(pod_env happy-worker-1 GANTRY_RESTART_COUNT)"
[ "$got" = "happy-worker-0.happy.$ns.svc 3 1 0" ] && ok "pod env: $got" || bad "pod env: $got"
got=$(jp pod/happy-worker-1 '{.spec.containers[0].env[?(@.name=="GANTRY_RDZV_TOKEN")].valueFrom.secretKeyRef.name}')
[ "$got" = happy-rdzv ] && ok "token from the Secret" || bad "token env: $got"
run_all happy 3
wait_for "happy: Running, Ready 3/3" 15 is tj/happy '{.status.phase} {.status.ready}' "Running 3/3"
set_pod happy-worker-0 Succeeded 0
wait_for "happy: rank 0 Succeeded -> job Succeeded" 15 is tj/happy '{.status.phase}' Succeeded
wait_for "happy: running workers cleaned, worker 0 kept (cleanPodPolicy Running)" 15 \
    bash -c "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=happy -o name | tr '\n' ' ')\" = 'pod/happy-worker-0 ' ]"

# ---- 2. gang restart, then backoff exhausted, sticky Failed
apply_job flaky 2 '{"backoffLimit":1}'
wait_for "flaky: 2 pods" 30 has_pods flaky 2
run_all flaky 2
wait_for "flaky: Running" 15 is tj/flaky '{.status.phase}' Running
uid0=$(jp pod/flaky-worker-0 '{.metadata.uid}')
set_pod flaky-worker-1 Failed 1
wait_for "flaky: restarts 1 after a retryable failure" 15 is tj/flaky '{.status.restarts}' 1
wait_for "flaky: the whole gang replaced with restart-count 1" 20 bash -c \
    "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=flaky,gantry.dev/restart-count=1 --no-headers | wc -l)\" -eq 2 ]"
[ "$(jp pod/flaky-worker-0 '{.metadata.uid}')" != "$uid0" ] && ok "flaky: the healthy worker 0 was replaced too" || bad "worker 0 kept its uid"
[ "$(pod_env flaky-worker-0 GANTRY_RESTART_COUNT)" = 1 ] && ok "flaky: env GANTRY_RESTART_COUNT=1" || bad "restart count env"
run_all flaky 2
set_pod flaky-worker-0 Failed 2
wait_for "flaky: Failed (BackoffLimitExceeded) past backoffLimit" 15 \
    is tj/flaky '{.status.phase} {.status.conditions[?(@.type=="Failed")].reason}' "Failed BackoffLimitExceeded"
k delete pods -l gantry.dev/job-name=flaky --wait=false >/dev/null 2>&1 || true
sleep 3
[ "$(npods flaky)" -eq 0 ] && ok "flaky: nothing recreated after Failed, even with pods deleted by hand" || bad "flaky: pods recreated"
[ "$(jp tj/flaky '{.status.restarts}')" = 1 ] && ok "flaky: restarts stays 1" || bad "flaky restarts changed"

# ---- 2b. a worker pod deleted by hand while Running: a gang failure, not a lone replacement
apply_job gone 2
wait_for "gone: 2 pods" 30 has_pods gone 2
run_all gone 2
wait_for "gone: Running" 15 is tj/gone '{.status.phase}' Running
k delete pod gone-worker-1 --wait=false >/dev/null
wait_for "gone: a worker deleted while Running restarts the gang (restarts 1, WorkerDeleted)" 15 \
    is tj/gone '{.status.restarts} {.status.conditions[?(@.type=="Restarting")].reason}' "1 WorkerDeleted"
wait_for "gone: the whole gang recreated with restart-count 1" 20 bash -c \
    "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=gone,gantry.dev/restart-count=1 --no-headers | wc -l)\" -eq 2 ]"

# ---- 3. permanent exit code; the worker's termination message reaches the Failed condition
apply_job baddata 2
wait_for "baddata: 2 pods" 30 has_pods baddata 2
run_all baddata 2
[ "$(jp pod/baddata-worker-0 '{.spec.containers[0].terminationMessagePolicy}')" = FallbackToLogsOnError ] &&
    ok "baddata: terminationMessagePolicy FallbackToLogsOnError" || bad "terminationMessagePolicy"
k patch pod/baddata-worker-1 --subresource=status --type=merge -p '{"status":{"phase":"Failed",
    "containerStatuses":[{"name":"worker","image":"gantry-worker:0.1.0","imageID":"","ready":false,
    "restartCount":0,"state":{"terminated":{"exitCode":65,"reason":"Error",
    "message":"error: /data/train.jsonl line 3: not JSON\n"}}}]}}' >/dev/null
wait_for "baddata: exit 65 -> Failed (PermanentError) at once" 15 \
    is tj/baddata '{.status.phase} {.status.restarts} {.status.conditions[?(@.type=="Failed")].reason}' "Failed 0 PermanentError"
got=$(jp tj/baddata '{.status.conditions[?(@.type=="Failed")].message}')
case $got in *"Its last output: error: /data/train.jsonl line 3: not JSON") ok "baddata: the worker's message in the condition" ;;
    *) bad "baddata: condition message: $got" ;; esac

# ---- 4. suspend / resume
apply_job pausy 2
wait_for "pausy: 2 pods" 30 has_pods pausy 2
run_all pausy 2
k patch tj pausy --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
wait_for "pausy: suspended, pods deleted" 15 bash -c \
    "[ \"\$('$kubectl' -n $ns get tj pausy -o jsonpath='{.status.phase}')\" = Suspended ] && [ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=pausy --no-headers | wc -l)\" -eq 0 ]"
k patch tj pausy --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
wait_for "pausy: resumed, 2 pods again" 20 has_pods pausy 2
wait_for "pausy: Suspended condition False (Resumed)" 10 \
    is tj/pausy '{.status.conditions[?(@.type=="Suspended")].reason}' Resumed

# ---- 5. TTL after finished, 6. active deadline
apply_job shortlived 1 '{"ttlSecondsAfterFinished":2}'
wait_for "shortlived: 1 pod" 30 has_pods shortlived 1
set_pod shortlived-worker-0 Succeeded 0
wait_for "shortlived: deleted by ttlSecondsAfterFinished" 20 bash -c "! '$kubectl' -n $ns get tj shortlived"
wait_for "shortlived: its pod garbage-collected through the owner reference" 30 has_pods shortlived 0
apply_job slow 1 '{"activeDeadlineSeconds":2}'
wait_for "slow: Failed (DeadlineExceeded)" 20 \
    is tj/slow '{.status.phase} {.status.conditions[?(@.type=="Failed")].reason}' "Failed DeadlineExceeded"

# ---- 6a. gang: Workload. This tier's API server runs without the GenericWorkload gate (as most
# clusters do): no pod is created (it would run outside its gang) and a Warning Event says what
# to enable; gang: None then starts the job. With the gate (GANTRY_FEATURE_GATES), the Workload
# and the pods' workloadRef instead.
apply_job ganged 2 '{"schedulingPolicy":{"gang":"Workload"}}'
if kc api-resources --api-group=scheduling.k8s.io -o name 2>/dev/null | grep -qx workloads.scheduling.k8s.io; then
    wait_for "ganged: the Workload, minCount 2, controlled by the job" 30 is workloads.scheduling.k8s.io/ganged \
        '{.spec.podGroups[0].name} {.spec.podGroups[0].policy.gang.minCount} {.metadata.ownerReferences[0].kind}' \
        "workers 2 TrainingJob"
    wait_for "ganged: 2 pods pointing at it" 30 bash -c \
        "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=ganged -o jsonpath='{.items[*].spec.workloadRef.name}')\" = 'ganged ganged' ]"
else
    wait_for "ganged: no Workload API -> a Warning Event naming the gates to enable" 30 bash -c \
        "'$kubectl' -n $ns get events --field-selector involvedObject.name=ganged,type=Warning -o jsonpath='{.items[*].message}' | grep -q 'GenericWorkload and GangScheduling'"
    [ "$(npods ganged)" -eq 0 ] && ok "ganged: no pod created without its Workload" || bad "ganged: $(npods ganged) pods"
    k patch tj ganged --type=merge -p '{"spec":{"runPolicy":{"schedulingPolicy":{"gang":"None"}}}}' >/dev/null
    wait_for "ganged: gang: None -> 2 pods, without a workloadRef" 30 has_pods ganged 2
    [ -z "$(k get pods -l gantry.dev/job-name=ganged -o jsonpath='{.items[*].spec.workloadRef}')" ] &&
        ok "ganged: pods carry no workloadRef" || bad "ganged: a workloadRef on a pod"
fi

# ---- 6b. job happy (1) deleted and applied again at once: the old one's pods, not yet collected (a
# finalizer holds worker 0 here), are not the new job's; its gang starts once they are gone.
# Last in the group: the garbage collector watches TrainingJobs ~30 s after the CRD appears.
old_uid=$(jp tj/happy '{.metadata.uid}')
k patch pod/happy-worker-0 --type=merge -p '{"metadata":{"finalizers":["gantry.dev/test-hold"]}}' >/dev/null
k delete tj happy --wait=false >/dev/null
wait_for "again: the old Succeeded worker 0 is being collected" 90 \
    bash -c "[ -n \"\$('$kubectl' -n $ns get pod happy-worker-0 -o jsonpath='{.metadata.deletionTimestamp}')\" ]"
apply_job happy 3
wait_for "again: the new job is seen (Created)" 15 is tj/happy '{.status.conditions[?(@.type=="Created")].status}' True
sleep 3
got="$(jp tj/happy '{.status.phase} {.status.replicas.succeeded}') $(npods happy)"
[ "$got" = "Pending 0 1" ] && ok "again: the old job's worker 0 neither finishes the new job nor is replaced while it exists ($got)" ||
    bad "again: phase, succeeded, pods: $got (want Pending 0 1)"
k patch pod/happy-worker-0 --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null
wait_for "again: once it is gone, the new job's 3 pods" 30 bash -c \
    "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=happy -o jsonpath='{.items[*].metadata.ownerReferences[0].uid}' | wc -w)\" -eq 3 ] && ! '$kubectl' -n $ns get pods -l gantry.dev/job-name=happy -o jsonpath='{.items[*].metadata.ownerReferences[0].uid}' | grep -q '$old_uid'"

fi

if want ha; then
# ---- 7. SIGKILL while creating pods, restart: no duplicates, the job proceeds. The dead
# process still holds the Lease, so the new one waits for it to expire (4 s here) first.
# A throttled operator (2 requests/s per connection) makes sure the kill lands in the middle
# of the creates.
stop_op TERM
start_op slow --qps 2 --burst 1
wait_for "throttled operator leads" 10 grep -q '"msg":"Started leading"' "$op_log"
apply_job crashy 30
for ((i = 0; i < 200; i++)); do [ "$(npods crashy)" -gt 0 ] && break; sleep 0.05; done
stop_op KILL
n=$(npods crashy)
[ "$n" -gt 0 ] && [ "$n" -lt 30 ] && ok "crashy: SIGKILL with $n of 30 pods created" || bad "crashy: killed with $n pods"
start_op b
wait_for "crashy: 30 pods after the restart" 30 has_pods crashy 30
sleep 1
[ "$(npods crashy)" -eq 30 ] && ok "crashy: still exactly 30 (no duplicates)" || bad "crashy: $(npods crashy) pods"
run_all crashy 30
wait_for "crashy: Running 30/30" 30 is tj/crashy '{.status.ready}' 30/30
set_pod crashy-worker-0 Succeeded 0
wait_for "crashy: the job completes (Succeeded)" 20 is tj/crashy '{.status.phase}' Succeeded

# ---- 8. two replicas: only the leader acts; SIGTERM releases the Lease and the standby takes over
leader_pid=$op_pid leader_log=$op_log
start_op c
extra_pids+=("$op_pid")
standby_pid=$op_pid standby_log=$op_log
op_pid=$leader_pid
wait_for "standby c waits for leadership" 10 grep -q '"msg":"Waiting for leadership"' "$standby_log"
apply_job duo 2
wait_for "duo: created by the leader" 30 has_pods duo 2
sleep 1
grep -q '"name":"duo-worker-0"' "$leader_log" && ok "duo: the leader created the pods" || bad "duo: not in the leader's log"
! grep -q '"msg":"Started leading"' "$standby_log" && ok "standby c did not lead" || bad "standby c led"
! grep -q 'duo' "$standby_log" && ok "standby c did not touch duo" || bad "standby c acted on duo"
stop_op TERM "$leader_pid"
op_pid=$standby_pid
grep -q '"msg":"Stopped"' "$leader_log" && ok "graceful SIGTERM of the leader" || bad "no clean stop in the leader's log"
wait_for "standby c takes over at once (Lease released)" 10 grep -q '"msg":"Started leading"' "$standby_log"
apply_job duo2 1
wait_for "duo2: created by the new leader" 20 has_pods duo2 1

stop_op TERM
grep -q '"msg":"Stopped"' "$standby_log" && ok "graceful SIGTERM of the new leader" || bad "no clean stop in c's log"
fi

if want obs; then
# ---- 9. /healthz /readyz /metrics; status.progress; hang detection (Stalled + gang restart)
stop_op TERM
pdir=$(mktemp -d /tmp/gantry-progress.XXXXXX)
python3 "$here/fake_progress.py" "$pdir" "$pdir/port" &
fake_pid=$!
for ((i = 0; i < 100; i++)); do [ -s "$pdir/port" ] && break; sleep 0.1; done
fport=$(cat "$pdir/port")
start_op obs --health-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --progress-interval 1 \
    --progress-url-template "http://127.0.0.1:$fport/{ns}/{pod}/progress"
wait_for "obs: health and metrics servers listening" 10 grep -q '"server":"metrics"' "$op_log"
hport=$(sed -n 's/.*"server":"health".*"port":\([0-9]*\).*/\1/p' "$op_log" | tail -1)
mport=$(sed -n 's/.*"server":"metrics".*"port":\([0-9]*\).*/\1/p' "$op_log" | tail -1)
code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$1$2"; }
[ "$(code "$hport" /healthz)" = 200 ] && ok "obs: /healthz 200" || bad "obs: /healthz"
wait_for "obs: /readyz 200 once leading with synced caches" 15 bash -c "[ \"\$(curl -s -o /dev/null -m 5 -w '%{http_code}' http://127.0.0.1:$hport/readyz)\" = 200 ]"
apply_job prog 2 '{"backoffLimit":1,"progressDeadlineSeconds":6}'
wait_for "prog: 2 pods" 30 has_pods prog 2
got="$(pod_env prog-worker-0 GANTRY_METRICS_PORT) $(jp pod/prog-worker-0 '{.spec.containers[?(@.name=="worker")].ports[?(@.name=="metrics")].containerPort}')"
[ "$got" = "9090 9090" ] && ok "prog: GANTRY_METRICS_PORT and containerPort metrics 9090" || bad "prog: metrics port: $got"
run_all prog 2
echo 5 >"$pdir/prog-worker-0.step"
touch "$pdir/run"
(s=5; while [ -e "$pdir/run" ]; do s=$((s + 1)); echo "$s" >"$pdir/s.tmp"; mv "$pdir/s.tmp" "$pdir/prog-worker-0.step"; sleep 1; done) &
ticker_pid=$!
wait_for "prog: status.progress read from rank 0" 15 bash -c "[ -n \"\$('$kubectl' -n $ns get tj prog -o jsonpath='{.status.progress.step}')\" ]"
s1=$(jp tj/prog '{.status.progress.step}')
wait_for "prog: status.progress.step advances (from $s1)" 15 bash -c "[ \"\$('$kubectl' -n $ns get tj prog -o jsonpath='{.status.progress.step}')\" -gt $s1 ]"
table=$(k get tj prog)
hdr=${table%%$'\n'*} row=${table#*$'\n'}
if [[ $hdr == *PROGRESS*ETA* ]] && [[ $row =~ [0-9]+/1000\ \([0-9]+%\) ]] && [[ $row =~ [0-9]+m[0-9]+s ]]; then
    ok "prog: kubectl get tj shows Progress and ETA: $row"
else
    bad "prog: kubectl get tj: $hdr / $row"
fi
[ -n "$(jp tj/prog '{.status.progress.loss}')" ] && [ -n "$(jp tj/prog '{.status.progress.samplesPerSecond}')" ] \
    && ok "prog: loss and samples/s in status.progress" || bad "prog: progress fields: $(jp tj/prog '{.status.progress}')"
last_ckpt() { # status.lastCheckpoint is rank 0's last_checkpoint_step (>= 10 here) and its path
    local s p
    s=$("$kubectl" -n "$ns" get tj prog -o jsonpath='{.status.lastCheckpoint.step}')
    p=$("$kubectl" -n "$ns" get tj prog -o jsonpath='{.status.lastCheckpoint.path}')
    [ -n "$s" ] && [ "$s" -ge 10 ] && [ "$p" = "/checkpoints/prog/step-$s" ]
}
wait_for "prog: status.lastCheckpoint {step, path} from rank 0's /progress" 15 last_ckpt
kill -STOP "$fake_pid" # rank 0 hangs: reads time out, the step stands
t0=$(date +%s)
wait_for "prog: Stalled and the gang restarted (restart 1) after 6 s without progress" 30 \
    is tj/prog '{.status.conditions[?(@.type=="Stalled")].status} {.status.conditions[?(@.type=="Stalled")].reason} {.status.restarts}' \
    "True ProgressDeadlineExceeded 1"
dt=$(($(date +%s) - t0))
[ "$dt" -ge 3 ] && [ "$dt" -le 20 ] && ok "prog: stall noticed ${dt}s after the hang (deadline 6 s)" || bad "prog: stall after ${dt}s"
wait_for "prog: a Warning Event Stalled" 10 bash -c "'$kubectl' -n $ns get events --field-selector reason=Stalled -o name | grep -q ."
kill -CONT "$fake_pid"
wait_for "prog: the new gang (restart-count 1) created" 20 bash -c \
    "[ \"\$('$kubectl' -n $ns get pods -l gantry.dev/job-name=prog,gantry.dev/restart-count=1 --no-headers | wc -l)\" -eq 2 ]"
run_all prog 2
wait_for "prog: Stalled=False (Progressing) once the new gang advances" 20 \
    is tj/prog '{.status.conditions[?(@.type=="Stalled")].status}' False
rm -f "$pdir/run" # training stops advancing again: the second stall uses up backoffLimit 1
wait_for "prog: second stall -> Failed (BackoffLimitExceeded)" 30 \
    is tj/prog '{.status.phase} {.status.conditions[?(@.type=="Failed")].reason}' "Failed BackoffLimitExceeded"
metrics=$(curl -s -m 5 "http://127.0.0.1:$mport/metrics")
for m in 'gantry_operator_gang_restarts_total 1' 'gantry_operator_trainingjobs{phase="Failed"} 1' \
         'gantry_operator_leader 1' 'gantry_operator_ready 1'; do
    grep -qxF "$m" <<<"$metrics" && ok "metrics: $m" || bad "metrics: no line '$m'"
done
grep -qE '^gantry_operator_reconcile_duration_seconds_count [1-9]' <<<"$metrics" && ok "metrics: reconcile histogram counts" || bad "metrics: reconcile count"
grep -qE '^gantry_operator_progress_reads_total [1-9]' <<<"$metrics" && ok "metrics: progress reads counted" || bad "metrics: progress reads"
pyenv=${GANTRY_CACHE:-$HOME/.cache/gantry}/pyenv-$(sha256sum "$root/hack/requirements.txt" | cut -c1-12)
if [ -f "$pyenv/.complete" ]; then
    if "$pyenv/bin/python3" -c '
import sys
from prometheus_client.parser import text_string_to_metric_families as parse
fam = {f.name: f for f in parse(sys.stdin.read())}
h = fam["gantry_operator_reconcile_duration_seconds"]
assert h.type == "histogram", h.type
b = [s.value for s in h.samples if s.name.endswith("_bucket")]
assert b == sorted(b) and b[-1] >= 1, b
assert fam["gantry_operator_workqueue_depth"].type == "gauge"
assert {s.labels["resource"] for s in fam["gantry_operator_watch_relists"].samples} >= {"pods", "trainingjobs"}
' <<<"$metrics"; then ok "metrics: parsed by prometheus_client"; else bad "metrics: prometheus_client parse"; fi
else
    echo "note: no hack/pyenv.sh venv; prometheus_client parse skipped"
fi
kill "$fake_pid" 2>/dev/null || true
wait "$fake_pid" 2>/dev/null || true
fake_pid=
rm -rf "$pdir"
fi

# Under the ASan/UBSan build a report goes to the log: it fails the test (SIGKILLed processes
# cannot report, the others exit through SIGTERM and the leak check).
stop_op TERM
for p in "${extra_pids[@]}"; do stop_op TERM "$p"; done
extra_pids=()
if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$logs"/operator-"$ns"-*.log; then
    bad "sanitizer reports in the operator logs above"
else
    ok "no sanitizer reports in the operator logs"
fi
api_summary
