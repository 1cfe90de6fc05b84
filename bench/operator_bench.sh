#!/usr/bin/env bash
# bench/operator_bench.sh: time from applying N jobs to all their pods created, and the
# operator's memory: gantry-operator (TrainingJob) against Kubeflow's training-operator
# (PyTorchJob), one replica per job, on the same private API tier in the same run.
#
#   bench/operator_bench.sh --operator PATH [--kubeflow PATH|none] [--jobs "100 1000"]
#                           [--rounds R] [--rounds-large R] [--csv FILE]
#                           [--kube-bench PATH --kube-pods N --kube-rounds R --kube-csv FILE]
#
# Starts its own API tier (hack/cluster.sh up --tier api, GANTRY_RUN defaults to
# /tmp/gantry-bench-api so no other cluster is touched) and always stops it. Per implementation,
# N and round: a fresh namespace, the operator started on it (Gantry: --workers 4 with its
# default client rate and log level; Kubeflow: --controller-threads 4, controller-runtime's default client
# rate), its caches synced (log line) + 1 s, then N jobs created by 4 parallel kubectl clients. Measured: apply (the
# creates returning), total (first create to the N-th pod seen; the pod count is polled every
# 0.25 s, so +-0.25 s), peak RSS (VmHWM) and RSS at the end. Rounds alternate the two operators.
# Kubeflow's validating webhook is registered on no resource (no webhook Service exists on the
# API tier); Gantry's CRD validates in the API server. Kubeflow's cert rotator waits for its
# Secret to appear as files (a volume in a Deployment): this script writes them to
# /tmp/k8s-webhook-server/serving-certs, the path that training-operator v1.8 fixes. --rounds (3) is for N < 1000,
# --rounds-large (2) for N >= 1000.
# CSV rows: impl,metric,x,unit,round,value with x = N and metric total|apply|rss_peak|rss_end.
# Prints a table of medians (min-max) and per N the verdict line (ratio Kubeflow/Gantry time).
# With --kube-bench, first runs bench/kube_bench (the client library: create, list vs kubectl,
# watch, informer, bytes per cached pod) R times with N pods on the same cluster; its rows
# (impl gantry|kubectl, metric create|list|watch|informer_whole|informer_projected in
# objects/s, mem_whole|mem_projected in bytes per pod, x = N) go to the --kube-csv FILE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
op=
kf=
jobs_list="100 1000"
rounds=3
rounds_large=2
csv=
kb=
kube_pods=2000
kube_rounds=2
kube_csv=
while [ $# -gt 0 ]; do
    case "$1" in
    --operator) op=$2; shift 2 ;;
    --kubeflow) kf=$2; shift 2 ;;
    --jobs) jobs_list=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --rounds-large) rounds_large=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --kube-bench) kb=$2; shift 2 ;;
    --kube-pods) kube_pods=$2; shift 2 ;;
    --kube-rounds) kube_rounds=$2; shift 2 ;;
    --kube-csv) kube_csv=$2; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "operator_bench.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
[ -n "$op" ] && [ -x "$op" ] || { echo "operator_bench.sh: --operator PATH (gantry-operator) needed" >&2; exit 64; }
if [ -z "$kf" ]; then
    kf=$("$root/bench/kubeflow_build.sh") || kf=none
fi
[ "$kf" = none ] || [ -x "$kf" ] || { echo "operator_bench.sh: $kf is not executable" >&2; exit 64; }

export GANTRY_RUN=${GANTRY_RUN:-/tmp/gantry-bench-api}
k8s_version=$(sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' \
    "$root/hack/k8s/go.mod" | head -1)
kubectl=${GANTRY_KUBECTL:-${GANTRY_CACHE:-$HOME/.cache/gantry}/k8s-$k8s_version/bin/kubectl}
work=$(mktemp -d /tmp/gantry-operator-bench.XXXXXX)
rows=$work/rows.csv
: >"$rows"
op_pid=
kf_certs=/tmp/k8s-webhook-server/serving-certs # fixed in training-operator v1.8 (pkg/cert)
made_certs=0
cleanup() {
    [ "$made_certs" = 0 ] || rm -rf "$(dirname "$kf_certs")"
    [ -z "$op_pid" ] || { kill -TERM "$op_pid" 2>/dev/null; wait "$op_pid" 2>/dev/null; } || true
    "$root/hack/cluster.sh" down >"$work/down.log" 2>&1 || cat "$work/down.log" >&2
    rm -rf "$work"
}
trap cleanup EXIT
"$root/hack/cluster.sh" up --tier api >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; exit 1; }
export KUBECONFIG=$GANTRY_RUN/admin.kubeconfig
k() { "$kubectl" --request-timeout=60s "$@"; }

established() { # established CRD: waits up to 60 s (kubectl wait fails while conditions is null)
    local i
    for ((i = 0; i < 120; i++)); do
        [ "$(k get "crd/$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" != True ] || return 0
        sleep 0.5
    done
    echo "operator_bench: CRD $1 not Established in 60 s" >&2
    return 1
}
k apply --server-side -f "$root/manifests/crds/gantry.dev_trainingjobs.yaml" >/dev/null
established trainingjobs.gantry.dev
impls=gantry
if [ "$kf" != none ]; then
    impls="gantry kubeflow"
    crd=$(dirname "$(dirname "$kf")")/crds/kubeflow.org_pytorchjobs.yaml
    k apply --server-side -f "$crd" >/dev/null
    established pytorchjobs.kubeflow.org
    # What the cert rotator needs: its Secret and the webhook configuration it patches (here
    # matching no resource, since nothing on the API tier can reach a webhook Service).
    k create namespace kubeflow >/dev/null
    k -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
    k apply -f - >/dev/null <<'EOF'
{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
 "metadata": {"name": "validator.training-operator.kubeflow.org"},
 "webhooks": [{"name": "validator.pytorchjob.training-operator.kubeflow.org",
   "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
   "clientConfig": {"service": {"name": "training-operator", "namespace": "kubeflow",
                                "path": "/validate-kubeflow-org-v1-pytorchjob"}},
   "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE"],
              "resources": ["nonexistent-bench"]}]}]}
EOF
fi

manifest() { # manifest IMPL N FILE PART PARTS: jobs i = PART, PART+PARTS, ... as one List
    awk -v impl="$1" -v n="$2" -v part="$4" -v parts="$5" 'BEGIN {
        printf "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":["
        sep = ""
        for (i = part; i < n; i += parts) {
            if (impl == "gantry")
                printf "%s{\"apiVersion\":\"gantry.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j%d\"},\"spec\":{\"replicas\":1,\"training\":{\"data\":{\"train\":\"/data/train.jsonl\"}}}}", sep, i
            else
                printf "%s{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"PyTorchJob\",\"metadata\":{\"name\":\"j%d\"},\"spec\":{\"pytorchReplicaSpecs\":{\"Master\":{\"replicas\":1,\"restartPolicy\":\"OnFailure\",\"template\":{\"spec\":{\"containers\":[{\"name\":\"pytorch\",\"image\":\"gantry-worker:0.1.0\"}]}}}}}}", sep, i
            sep = ","
        }
        print "]}"
    }' >"$3"
}
npods() { # pods in namespace $1: one list call of a single item plus the server's remaining count
    k get --raw "/api/v1/namespaces/$1/pods?limit=1" |
        jq '(.items | length) + (.metadata.remainingItemCount // 0)'
}
rss_kb() { awk -v f="$2" '$1 == f ":" { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
start_op() { # start_op IMPL NS LOG
    if [ "$1" = gantry ]; then
        "$op" --namespace "$2" --workers 4 --leader-elect false >"$3" 2>&1 &
    else
        local port
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        if [ ! -f "$kf_certs/tls.crt" ]; then
            [ -d "$(dirname "$kf_certs")" ] || made_certs=1
            mount_certs &
        fi
        MY_POD_NAMESPACE=kubeflow "$kf" --namespace "$2" --enable-scheme pytorchjob \
            --controller-threads 4 --metrics-bind-address 0 --health-probe-bind-address 0 \
            --webhook-server-port "$port" >"$3" 2>&1 &
    fi
    op_pid=$!
}
ready() { # ready IMPL LOG: the operator logged that its caches are synced / workers started
    if [ "$1" = gantry ]; then grep -qs 'Caches synced' "$2"; else grep -qs 'Starting workers.*pytorchjob' "$2"; fi
}
mount_certs() { # the kubelet's part in a Deployment: the rotator's Secret as files in the cert dir
    local i f
    for ((i = 0; i < 300; i++)); do
        if [ -n "$(k -n kubeflow get secret training-operator-webhook-cert -o jsonpath='{.data.tls\.key}' 2>/dev/null)" ]; then
            mkdir -p "$kf_certs"
            for f in ca.crt tls.key tls.crt; do # tls.crt last: its presence is what the rotator waits for
                k -n kubeflow get secret training-operator-webhook-cert -o jsonpath="{.data.${f/./\\.}}" |
                    base64 -d >"$kf_certs/.$f" && mv "$kf_certs/.$f" "$kf_certs/$f"
            done
            return 0
        fi
        sleep 0.2
    done
    echo "operator_bench: the webhook cert Secret was not filled in 60 s" >&2
}
one() { # one IMPL N ROUND
    local impl=$1 n=$2 r=$3 ns="bench-$1-$2-$3" t0 t1 t2 peak=0 cur i got=0 deadline
    k create namespace "$ns" >/dev/null
    for i in 0 1 2 3; do manifest "$impl" "$n" "$work/m$i.json" "$i" 4; done
    start_op "$impl" "$ns" "$work/$ns.log"
    for ((i = 0; i < 600; i++)); do
        ready "$impl" "$work/$ns.log" && break
        kill -0 "$op_pid" 2>/dev/null || { echo "operator_bench: $impl exited at start:" >&2; tail -n 20 "$work/$ns.log" >&2; exit 1; }
        sleep 0.1
    done
    ready "$impl" "$work/$ns.log" || { echo "operator_bench: $impl not ready in 60 s" >&2; tail -n 20 "$work/$ns.log" >&2; exit 1; }
    sleep 1
    t0=$(date +%s.%N)
    creates=()
    for i in 0 1 2 3; do
        k -n "$ns" create -f "$work/m$i.json" >/dev/null &
        creates+=($!)
    done
    # the creates run in the background; count pods meanwhile
    deadline=$(($(date +%s) + 600))
    t1=
    while :; do
        if [ -z "$t1" ]; then
            running=0
            for i in "${creates[@]}"; do ! kill -0 "$i" 2>/dev/null || running=1; done
            [ "$running" = 1 ] || t1=$(date +%s.%N)
        fi
        got=$(npods "$ns" 2>/dev/null || echo 0)
        kill -0 "$op_pid" 2>/dev/null || { echo "operator_bench: $impl exited:" >&2; tail -n 20 "$work/$ns.log" >&2; exit 1; }
        cur=$(rss_kb "$op_pid" VmRSS); [ "${cur:-0}" -le "$peak" ] || peak=$cur
        [ "$got" -lt "$n" ] || break
        [ "$(date +%s)" -lt "$deadline" ] || { echo "operator_bench: $impl: $got/$n pods after 600 s" >&2; break; }
        sleep 0.25
    done
    t2=$(date +%s.%N)
    for i in "${creates[@]}"; do wait "$i" || echo "operator_bench: a kubectl create failed" >&2; done
    [ -n "$t1" ] || t1=$t2
    cur=$(rss_kb "$op_pid" VmRSS)
    peak=$(rss_kb "$op_pid" VmHWM)
    kill -TERM "$op_pid" 2>/dev/null || true
    wait "$op_pid" 2>/dev/null || true
    op_pid=
    if [ "$got" -ge "$n" ]; then
        awk -v i="$impl" -v n="$n" -v r="$r" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v p="$peak" -v c="$cur" 'BEGIN {
            printf "%s,total,%d,s,%d,%.3f\n%s,apply,%d,s,%d,%.3f\n", i, n, r, t2 - t0, i, n, r, t1 - t0
            printf "%s,rss_peak,%d,MiB,%d,%.1f\n%s,rss_end,%d,MiB,%d,%.1f\n", i, n, r, p / 1024, i, n, r, c / 1024
        }' | tee -a "$rows" | sed 's/^/# /'
    fi
    k delete namespace "$ns" --wait=false >/dev/null
}

if [ -n "$kb" ]; then
    : >"$work/kube.csv"
    for r in $(seq 0 $((kube_rounds - 1))); do
        echo "# kube_bench round $((r + 1))/$kube_rounds"
        "$kb" --pods "$kube_pods" >"$work/kb.txt" 2>&1 || echo "operator_bench: kube_bench failed (round $r)" >&2
        cat "$work/kb.txt"
        # rows are "%-34s" labels then numbers: objects, seconds, objects/s (memory: bytes)
        awk -v r="$r" -v n="$kube_pods" '{
            label = substr($0, 1, 34); sub(/ +$/, "", label); split(substr($0, 35), f, " ")
            m = label ~ /^create/ ? "gantry,create" : label ~ /^list/ ? "gantry,list" \
              : label ~ /^peer: kubectl/ ? "kubectl,list" : label ~ /^watch/ ? "gantry,watch" \
              : label ~ /^informer sync \(whole/ ? "gantry,informer_whole" \
              : label ~ /^informer sync \(proj/ ? "gantry,informer_projected" : ""
            if (m != "" && f[3] ~ /^[0-9.]+$/) printf "%s,%d,objects/s,%d,%s\n", m, n, r, f[3]
            if (label == "whole objects") printf "gantry,mem_whole,%d,B/pod,%d,%s\n", n, r, f[1]
            if (label == "projected fields") printf "gantry,mem_projected,%d,B/pod,%d,%s\n", n, r, f[1]
        }' "$work/kb.txt" >>"$work/kube.csv"
    done
    [ -z "$kube_csv" ] || { echo "impl,metric,x,unit,round,value" >"$kube_csv"; cat "$work/kube.csv" >>"$kube_csv"; }
fi

echo "# operator: N jobs -> N pods, API tier $k8s_version ($GANTRY_RUN), $(nproc) CPUs;" \
    "peers: $(basename "$op") vs $([ "$kf" = none ] && echo "nothing (Kubeflow not built)" || echo "Kubeflow training-operator ($kf)")"
for n in $jobs_list; do
    rr=$rounds
    [ "$n" -lt 1000 ] || rr=$rounds_large
    for r in $(seq 0 $((rr - 1))); do
        for impl in $impls; do one "$impl" "$n" "$r"; done
    done
done
[ -z "$csv" ] || { echo "impl,metric,x,unit,round,value" >"$csv"; cat "$rows" >>"$csv"; }
awk -F, '
function stats(key,   n, i, j, t, a) {
    n = 0; for (i = 0; (key, i) in v; i++) a[++n] = v[key, i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ v[$1 SUBSEP $2 SUBSEP $3, $5] = $6; seen[$1] = 1; ns[$3] = 1 }
END {
    printf "%-9s %6s %20s %20s %18s\n", "impl", "N", "total s (min-max)", "apply s (min-max)", "peak RSS MiB"
    for (n in ns) for (i in seen) {
        k = i SUBSEP "total" SUBSEP n
        if (!((k, 0) in v)) continue
        m = stats(k); a = lo; b = hi; med[i, n] = m
        ap = stats(i SUBSEP "apply" SUBSEP n); c = lo; d = hi
        rs = stats(i SUBSEP "rss_peak" SUBSEP n)
        printf "%-9s %6d %7.2f (%5.2f-%5.2f) %7.2f (%5.2f-%5.2f) %18.1f\n", i, n, m, a, b, ap, c, d, rs
    }
    for (n in ns) {
        if ((("kubeflow", n) in med) && (("gantry", n) in med))
            printf "VERDICT operator N=%d: Kubeflow/Gantry time-to-all-pods = %.2fx (report only; >1 means Gantry is faster)\n", n, med["kubeflow", n] / med["gantry", n]
        else if (("gantry", n) in med)
            printf "VERDICT operator N=%d: Gantry alone %.2f s (no Kubeflow run: no ratio)\n", n, med["gantry", n]
    }
}' "$rows"
