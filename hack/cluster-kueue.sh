# shellcheck shell=bash
# hack/cluster-kueue.sh: Kueue for hack/cluster.sh, sourced by it (not run on its own).
#
# Kueue's manager (sigs.k8s.io/kueue/cmd/kueue, KUEUE_VERSION in cluster-full.sh) runs as a host
# process next to the control plane, with the admin kubeconfig, so that the operator can be tested
# against a real Kueue. On by default on the full tier, off on the API tier; GANTRY_KUEUE=1|0
# says otherwise. Everything it serves (health, metrics, webhook) binds to 127.0.0.1 on ports
# picked free; leader election is off.
#
# No Mutating/ValidatingWebhookConfiguration is registered: the API server never calls Kueue's
# webhooks, so Kueue objects are neither defaulted nor validated by them. The webhook server still
# runs, because Kueue's /readyz is "the webhook server has started", and it needs a serving cert.
#
# Kueue's own cert management is off (it would want a Service, a Secret and the webhook
# configurations), and then Kueue reads its metrics cert from the fixed path
# /etc/kueue/metrics/certs, which no option moves. Rather than write into the host's /etc, the
# process gets a mount namespace of its own in which an overlay on /etc adds that directory
# ($RUN/kueue/etc); the host's /etc is not changed and the mount goes away with the process.

KUEUE_MOD=sigs.k8s.io/kueue
KUEUE_DIR=$CACHE/kueue-$KUEUE_VERSION
KUEUE_BIN=$KUEUE_DIR/bin
KUEUE_CRDS=$KUEUE_DIR/crds
KUEUE_CRD_COUNT=11                 # config/components/crd/bases of v0.17.0
# Job kinds whose own controller makes their Workloads and obeys admission (the operator): Kueue
# counts objects owned by them as managed already (an owner-reference check in its webhooks).
KUEUE_EXTERNAL_FRAMEWORKS=TrainingJob.v1alpha1.gantry.dev

# --------------------------------------------------------------------------------------------------
# build: the manager binary and the CRDs, both under $KUEUE_DIR
# --------------------------------------------------------------------------------------------------

kueue_build() {
    go_install kueue "$KUEUE_VERSION" "$KUEUE_BIN" "$KUEUE_MOD/cmd/kueue" \
        "-X $KUEUE_MOD/pkg/version.GitVersion=$KUEUE_VERSION"
    if [ -f "$KUEUE_CRDS/.complete" ]; then
        log "kueue $KUEUE_VERSION: CRDs already in $KUEUE_CRDS"
        return
    fi
    # go install put the module in the module cache; ask go where (no guess at its layout).
    local dir tmp
    dir=$(cd / && GOFLAGS= go mod download -json "$KUEUE_MOD@$KUEUE_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
        die "go mod download $KUEUE_MOD@$KUEUE_VERSION failed; is the Go module proxy reachable?"
    [ -d "$dir/config/components/crd/bases" ] ||
        die "no config/components/crd/bases in $KUEUE_MOD@$KUEUE_VERSION ('$dir');" \
            "check KUEUE_VERSION in hack/cluster-full.sh"
    tmp=$KUEUE_CRDS.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp"
    install -m 644 "$dir"/config/components/crd/bases/*.yaml "$tmp/"
    local n
    n=$(find "$tmp" -name '*.yaml' | wc -l)
    # A different count means a new Kueue layout: look before trusting it.
    [ "$n" -eq "$KUEUE_CRD_COUNT" ] ||
        die "$KUEUE_MOD@$KUEUE_VERSION has $n CRDs, not $KUEUE_CRD_COUNT; check them," \
            "then update KUEUE_CRD_COUNT in hack/cluster-kueue.sh"
    touch "$tmp/.complete"
    rm -rf "$KUEUE_CRDS"
    mv "$tmp" "$KUEUE_CRDS"
    log "kueue $KUEUE_VERSION: $n CRDs copied to $KUEUE_CRDS"
}

# --------------------------------------------------------------------------------------------------
# up / down / status
# --------------------------------------------------------------------------------------------------

# Sets KUEUE=1|0 for this `up`: GANTRY_KUEUE if set, else 1 on the full tier only.
kueue_decide() {
    case ${GANTRY_KUEUE:-} in
        1) KUEUE=1 ;;
        0) KUEUE=0 ;;
        "") if [ "$TIER" = full ]; then KUEUE=1; else KUEUE=0; fi ;;
        *) die "GANTRY_KUEUE must be 1 (run Kueue) or 0 (do not), not '$GANTRY_KUEUE'" ;;
    esac
    [ "$KUEUE" = 1 ] || return 0
    need_bin "$KUEUE_BIN/kueue" "$TIER"
    [ -f "$KUEUE_CRDS/.complete" ] ||
        die "Kueue's CRDs are missing in $KUEUE_CRDS;" \
            "run 'hack/cluster.sh build --tier $TIER' (or set GANTRY_KUEUE=0)"
    command -v unshare >/dev/null ||
        die "unshare not found (util-linux); install it, or set GANTRY_KUEUE=0"
    # These paths go into mount options, where ',' and ':' separate fields.
    [[ $RUN != *[,:[:space:]]* ]] ||
        die "GANTRY_RUN '$RUN' has a comma, colon or space, which Kueue's /etc overlay" \
            "cannot take; pick another dir, or set GANTRY_KUEUE=0"
}

kueue_config() { # FILE CERTDIR
    cat >"$1" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
# Kueue's own namespace: with leader election and cert management off nothing of Kueue's lives
# there, so it is not created (checked: admission works without it).
namespace: kueue-system
leaderElection: {leaderElect: false}
health: {healthProbeBindAddress: "127.0.0.1:$KUEUE_HEALTH_PORT"}
metrics: {bindAddress: "127.0.0.1:$KUEUE_METRICS_PORT"}
webhook: {host: 127.0.0.1, port: $KUEUE_WEBHOOK_PORT, certDir: "$2"}
internalCertManagement: {enable: false}
manageJobsWithoutQueueName: false
integrations:
  # An empty list is not refused, but defaulted to [batch/job]; so batch/job it is, said plainly.
  # Only Jobs labelled kueue.x-k8s.io/queue-name are Kueue's (manageJobsWithoutQueueName: false),
  # and without the webhook nothing suspends a Job at creation.
  frameworks: [batch/job]
  externalFrameworks: [$KUEUE_EXTERNAL_FRAMEWORKS]
featureGates:
  # Its API server would listen on 0.0.0.0:8082 with a cert from the fixed path /visibility.
  VisibilityOnDemand: false
EOF
}

kueue_up() {
    local k=("$K8S_BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig") d=$RUN/kueue
    read -r KUEUE_HEALTH_PORT KUEUE_METRICS_PORT KUEUE_WEBHOOK_PORT < <(pick_ports 3) ||
        die "could not pick free ports"
    # The CRDs are too big for client-side apply (its annotation would pass 256 KiB).
    "${k[@]}" apply --server-side --field-manager gantry-cluster -f "$KUEUE_CRDS/" >/dev/null ||
        die "applying Kueue's CRDs from $KUEUE_CRDS failed"
    "${k[@]}" wait --for condition=Established --timeout 60s -f "$KUEUE_CRDS/" >/dev/null ||
        die "Kueue's CRDs did not become Established within 60s" \
            "(kube-apiserver log: $RUN/logs/kube-apiserver.log)"

    # One cert, signed by the cluster CA, for the webhook server and the metrics endpoint.
    pki_cert kueue "/CN=kueue" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
    mkdir -p "$d/certs" "$d/etc/kueue/metrics/certs" "$d/etc.work"
    local c
    for c in "$d/certs" "$d/etc/kueue/metrics/certs"; do
        install -m 644 "$RUN/pki/kueue.crt" "$c/tls.crt"
        install -m 600 "$RUN/pki/kueue.key" "$c/tls.key"
    done
    kueue_config "$d/config.yaml" "$d/certs"

    # Root gets a mount namespace; anyone else a user namespace too (root in there, itself outside).
    local ns=(unshare --mount --propagation private) exe=$KUEUE_BIN/kueue
    [ "$(id -u)" = 0 ] || ns=(unshare --user --map-root-user --mount --propagation private)
    local script='mount -t overlay gantry-kueue-etc \
    -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc ||
{ echo "error: cannot mount an overlay on /etc for /etc/kueue/metrics/certs" \
"(no overlayfs, or no user namespaces for non-root); set GANTRY_KUEUE=0" >&2; exit 1; }
shift 2
exec "$@"'
    log "kueue $KUEUE_VERSION: starting (log: $RUN/logs/kueue.log)"
    START_EXE=$exe
    start_proc kueue "${ns[@]}" sh -c "$script" sh "$d/etc" "$d/etc.work" \
        "$exe" --config "$d/config.yaml" --kubeconfig "$RUN/admin.kubeconfig"
    START_EXE=
    wait_for "kueue /readyz on 127.0.0.1:$KUEUE_HEALTH_PORT" 120 kueue \
        curl -sf "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
    cat >>"$RUN/cluster.env" <<EOF
KUEUE_HEALTH_PORT=$KUEUE_HEALTH_PORT
KUEUE_METRICS_PORT=$KUEUE_METRICS_PORT
KUEUE_WEBHOOK_PORT=$KUEUE_WEBHOOK_PORT
EOF
    log "kueue $KUEUE_VERSION on 127.0.0.1 (readyz :$KUEUE_HEALTH_PORT," \
        "metrics :$KUEUE_METRICS_PORT, webhook :$KUEUE_WEBHOOK_PORT; no webhooks registered)"
}

kueue_down() {
    if [ -f "$RUN/pids/kueue" ]; then
        log "stopping kueue"
        stop_proc kueue
    fi
    # The overlay's work dir holds a mode-000 dir, which rm cannot read as non-root.
    if [ -d "$RUN/kueue" ]; then
        chmod -R u+rwX "$RUN/kueue" 2>/dev/null || true
        rm -rf "$RUN/kueue"
    fi
}

# A line for `status` (cluster.env sourced); returns 1 when Kueue should run but is not ready.
kueue_status() {
    [ "${KUEUE:-0}" = 1 ] || { echo "  kueue off (GANTRY_KUEUE=1 turns it on)"; return 0; }
    if curl -sf "http://127.0.0.1:${KUEUE_HEALTH_PORT:-0}/readyz" >/dev/null 2>&1; then
        echo "  kueue $KUEUE_VERSION ready (readyz 127.0.0.1:$KUEUE_HEALTH_PORT;" \
            "log: $RUN/logs/kueue.log)"
    else
        echo "  kueue $KUEUE_VERSION NOT ready (log: $RUN/logs/kueue.log)"
        return 1
    fi
}
