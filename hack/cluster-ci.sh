#!/usr/bin/env bash
# hack/cluster-ci.sh: what CI runs for the real-Kubernetes tiers, in one command.
#
# Builds (or reuses) the components, then for each tier: up, smoke tests, down; then checks that
# the host is as it was (no process, bridge, netns, mount, iptables chain or cgroup of ours left).
# Logs of every component go to $ARTIFACTS/cluster-<tier>/ whatever happens. Prints
# 'N passed, N failed' last; exits non-zero if anything failed.
set -euo pipefail

HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TIERS=(api full)
ARTIFACTS=${ARTIFACTS:-/tmp/gantry-artifacts}
export GANTRY_RUN=${GANTRY_RUN:-/tmp/gantry-cluster-ci}
# One full cluster per host: wait for another one (a developer's e2e run) rather than fail.
export GANTRY_FULL_WAIT=${GANTRY_FULL_WAIT:-900}

usage() {
    cat <<'EOF'
Usage: hack/cluster-ci.sh [--tier api|full|all]
  build, then per tier: up, hack/cluster-smoke.sh, down, leftover check.
  --tier all (default) runs api then full; full needs root and is skipped (reported) without it.
Env: ARTIFACTS (component logs are copied there; default /tmp/gantry-artifacts), GANTRY_RUN
     (default /tmp/gantry-cluster-ci), GANTRY_CACHE (build cache; see hack/cluster.sh --help).
EOF
}
while [ $# -gt 0 ]; do
    case $1 in
        --tier) case ${2:-} in all) TIERS=(api full) ;; api|full) TIERS=("$2") ;; *) usage >&2; exit 2 ;; esac; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

PASS=0
FAIL=0
step() { echo "== $*"; }
ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }

# What of ours can be left on the host, one line each; compared before and after. The host-wide
# part (bridge, netns, iptables, cgroups) only while no other full cluster runs here (a developer's
# e2e run): its state would not be ours. Lines ending in '(host-wide check skipped)' say so.
OWNER_FILE=/run/gantry-full-cluster.owner   # see hack/cluster-full.sh
other_full_cluster() { [ -s "$OWNER_FILE" ] && [ "$(cat "$OWNER_FILE")" != "$GANTRY_RUN" ]; }
host_state() {
    pgrep -af -- "$GANTRY_RUN/" | cut -d' ' -f2- | sed 's/^/process /' || true
    awk -v p="$GANTRY_RUN/" 'index($2, p) == 1 {print "mount " $2}' /proc/self/mounts
    if other_full_cluster; then
        echo "another full cluster runs (host-wide check skipped)"
        return
    fi
    {
        ip -br link 2>/dev/null | awk '$1 ~ /^(gantry0|veth)/ {print "link " $1}'
        ip netns list 2>/dev/null | sed 's/^/netns /'
        awk '$2 == "/run/netns" {print "mount " $2}' /proc/self/mounts
        if [ -e "$OWNER_FILE" ]; then echo "file $OWNER_FILE"; fi
        { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -E '^:(GANTRY|KUBE|CNI)-' | cut -d' ' -f1 | sed 's/^/chain /'
        for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
            if [ -d "$d" ]; then echo "cgroup $d"; fi
        done
    } | sort -u
}

save_logs() { # TIER
    mkdir -p "$ARTIFACTS/cluster-$1"
    cp -r "$GANTRY_RUN/logs/." "$ARTIFACTS/cluster-$1/" 2>/dev/null || true
}

run_tier() { # TIER
    local tier=$1 before after start
    before=$(host_state)
    step "tier $tier: up"
    start=$SECONDS
    if "$HACK/cluster.sh" up --tier "$tier"; then
        ok "up --tier $tier ($((SECONDS - start))s)"
        step "tier $tier: smoke tests"
        if "$HACK/cluster-smoke.sh" --tier "$tier"; then ok "smoke --tier $tier"; else bad "smoke --tier $tier (logs: $ARTIFACTS/cluster-$tier)"; fi
    else
        bad "up --tier $tier (logs: $ARTIFACTS/cluster-$tier)"
    fi
    save_logs "$tier"
    step "tier $tier: down"
    if "$HACK/cluster.sh" down; then ok "down --tier $tier"; else bad "down --tier $tier"; fi
    after=$(host_state)
    if [[ $before$after == *"(host-wide check skipped)"* ]]; then
        # Compare what is ours alone: processes and mounts under GANTRY_RUN.
        before=$(grep -v 'host-wide check skipped' <<<"$before" || true)
        after=$(grep -v 'host-wide check skipped' <<<"$after" || true)
        echo "note: another full cluster ran meanwhile; checked only processes and mounts under $GANTRY_RUN"
    fi
    # Only what is new counts: what went away meanwhile was someone else's.
    local left
    left=$(comm -13 <(sort <<<"$before") <(sort <<<"$after") | grep -v '^$' || true)
    if [ -z "$left" ]; then
        ok "tier $tier left the host as it found it"
    else
        bad "tier $tier left things behind:"
        while IFS= read -r line; do echo "    $line"; done <<<"$left"
    fi
}

trap '"$HACK/cluster.sh" down >/dev/null 2>&1 || true' EXIT
for tier in "${TIERS[@]}"; do
    if [ "$tier" = full ] && [ "$(id -u)" != 0 ]; then
        echo "skip tier full: needs root (containerd, iptables, mounts)"
        continue
    fi
    step "build --tier $tier"
    start=$SECONDS
    if "$HACK/cluster.sh" build --tier "$tier"; then
        ok "build --tier $tier ($((SECONDS - start))s)"
        run_tier "$tier"
    else
        bad "build --tier $tier"
    fi
done
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
