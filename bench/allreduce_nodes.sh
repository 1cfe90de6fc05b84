#!/usr/bin/env bash
# bench/allreduce_nodes.sh [BUILD_DIR]: the all-reduce of several ranks per node on several
# nodes (nprocPerNode > 1, replicas > 1 on CPUs), in one run:
#   gantry-nodes  Gantry's hierarchical all-reduce (shared memory in each node, one ring per
#                 local rank between the nodes: GANTRY_COLL_SHM=node);
#   gantry-ring   Gantry's ring of all ranks (GANTRY_COLL_SHM=0: what it did before, and what
#                 ranks do when a node's /dev/shm is unusable);
#   gloo          Gloo's ring of all ranks (gloo::allreduce, what PyTorch's gloo backend uses),
#                 when bench_allreduce_gloo is built.
# Nodes are gantry-run instances (--nnodes, --node-rank). With NET=netns (root, iproute2) each
# node is a network namespace of its own, joined to the others by a bridge in a hub namespace,
# and every node's link out is limited to RATE (tc tbf): a small cluster's network, where what
# crosses it decides. The namespaces use 10.254.77.0/24, exist only for the run and have no
# route anywhere else. NET=loopback (the default without root) runs every node on 127.0.0.1.
# Every node shares this host's CPUs and /dev/shm; GANTRY_COLL_SHM=node keeps each node's
# shared memory to itself, as separate machines or pods would.
# Prints nccl-tests rows per implementation and round (size, time, algbw, busbw, #wrong), then
# per size the median time of ROUNDS interleaved runs and the ratios gantry-ring / gantry-nodes
# and gloo / gantry-nodes (> 1: the hierarchical all-reduce is faster).
# Env: NODES (2), NPROC (2: ranks per node), MIN (1048576), MAX (67108864), ROUNDS (3),
# NET (netns as root, else loopback), RATE (1gbit), BF16=1 adds gantry-nodes-bf16.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
B=${1:-build}
NODES=${NODES:-2}
NPROC=${NPROC:-2}
MIN=${MIN:-1048576}
MAX=${MAX:-67108864}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-1gbit}
if [ -z "${NET:-}" ]; then
    NET=loopback
    [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v tc >/dev/null && NET=netns
fi
[ "$NODES" -ge 2 ] && [ "$NODES" -le 200 ] || { echo "allreduce_nodes.sh: NODES 2..200" >&2; exit 64; }

bin() {
    local p
    p=$(find "$B" -maxdepth 3 -type f -name "$1" -perm -u+x | head -1)
    [ -n "$p" ] || return 1
    echo "$p"
}
OURS=$(bin bench_allreduce) || { echo "allreduce_nodes.sh: bench_allreduce not under $B" >&2; exit 2; }
RUN=$(bin gantry-run) || { echo "allreduce_nodes.sh: gantry-run not under $B" >&2; exit 2; }
GLOO=$(bin bench_allreduce_gloo || true)
work=$(mktemp -d)
ns_pfx=gantry-bn$$

cleanup() {
    if [ "$NET" = netns ]; then
        for i in $(seq 0 $((NODES - 1))); do ip netns del "$ns_pfx-$i" 2>/dev/null || true; done
        ip netns del "$ns_pfx-hub" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

addr() { # node i's address
    if [ "$NET" = netns ]; then echo "10.254.77.$(($1 + 1))"; else echo 127.0.0.1; fi
}
in_node() { # in_node I CMD...: runs CMD in node I's network
    local i=$1
    shift
    if [ "$NET" = netns ]; then ip netns exec "$ns_pfx-$i" "$@"; else "$@"; fi
}

if [ "$NET" = netns ]; then
    ip netns add "$ns_pfx-hub"
    ip -n "$ns_pfx-hub" link add br0 type bridge
    ip -n "$ns_pfx-hub" link set br0 up
    for i in $(seq 0 $((NODES - 1))); do
        ns=$ns_pfx-$i
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add "gbn$$n$i" netns "$ns" type veth peer name "gbn$$h$i" netns "$ns_pfx-hub"
        ip -n "$ns" link set "gbn$$n$i" name eth0
        ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns_pfx-hub" link set "gbn$$h$i" master br0
        ip -n "$ns_pfx-hub" link set "gbn$$h$i" up
        # the node's link out: RATE, a 64 KiB bucket, 20 ms of queue at most
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst 64kb latency 20ms
    done
fi

echo "# bench/allreduce_nodes: $NODES nodes x $NPROC ranks on $(nproc) CPUs, network: $NET" \
    "$([ "$NET" = netns ] && echo "(each node's link $RATE)")," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"

ours() { # ours MODE [bench flags]: every node's gantry-run, node 0's output
    local mode=$1 port=$((20000 + RANDOM % 20000)) i
    shift
    local tok=bench-$RANDOM$RANDOM
    for i in $(seq 1 $((NODES - 1))); do
        in_node "$i" env GANTRY_COLL_SHM="$mode" GANTRY_RDZV_TOKEN="$tok" "$RUN" --nproc "$NPROC" \
            --nnodes "$NODES" --node-rank "$i" --master-addr "$(addr 0)" --master-port "$port" \
            -- "$OURS" --min "$MIN" --max "$MAX" "$@" >/dev/null &
    done
    in_node 0 env GANTRY_COLL_SHM="$mode" GANTRY_RDZV_TOKEN="$tok" "$RUN" --nproc "$NPROC" \
        --nnodes "$NODES" --node-rank 0 --master-addr "$(addr 0)" --master-port "$port" \
        -- "$OURS" --min "$MIN" --max "$MAX" "$@"
    wait
}
gloo() {
    local d w=$((NODES * NPROC)) r
    d=$(mktemp -d -p "$work")
    for r in $(seq 1 $((w - 1))); do
        in_node $((r / NPROC)) env GLOO_ADDR="$(addr $((r / NPROC)))" "$GLOO" "$r" "$w" "$d" ring \
            "$MIN" "$MAX" >/dev/null &
    done
    in_node 0 env GLOO_ADDR="$(addr 0)" "$GLOO" 0 "$w" "$d" ring "$MIN" "$MAX"
    wait
}

impls="gantry-nodes gantry-ring"
[ "${BF16:-0}" = 1 ] && impls="$impls gantry-nodes-bf16"
[ -n "$GLOO" ] && impls="$impls gloo"
for round in $(seq 1 "$ROUNDS"); do
    for impl in $impls; do
        case $impl in
        gantry-nodes) ours node ;;
        gantry-nodes-bf16) ours node --bf16 ;;
        gantry-ring) ours 0 ;;
        gloo) gloo ;;
        esac | tee "$work/$impl.$round" | sed "s/^\([ 0-9]\)/[$impl round $round] \1/"
    done
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "# median time (us) of $ROUNDS rounds per size; ratio = other / gantry-nodes (> 1: faster)"
printf "# %10s" size
for impl in $impls; do printf " %18s" "$impl"; done
printf " %12s" "ring/nodes"
[ -n "$GLOO" ] && printf " %12s" "gloo/nodes"
echo
for size in $(awk '/^ *[0-9]/ { print $1 }' "$work/gantry-nodes.1"); do
    printf "  %10s" "$size"
    declare -A med=()
    for impl in $impls; do
        med[$impl]=$(cat "$work/$impl".* | awk -v s="$size" '$1 == s { print $5 }' | median)
        printf " %18s" "${med[$impl]}"
    done
    awk -v a="${med[gantry-ring]}" -v b="${med[gantry-nodes]}" 'BEGIN { printf " %12.2f", a / b }'
    [ -n "$GLOO" ] &&
        awk -v a="${med[gloo]}" -v b="${med[gantry-nodes]}" 'BEGIN { printf " %12.2f", a / b }'
    echo
    unset med
done
wrong=$(cat "$work"/gantry-*.* | awk '/^ *[0-9]/ { w += $8 } END { print w + 0 }')
echo "# #wrong over every gantry row: $wrong $([ "$wrong" = 0 ] && echo OK || echo FAILED)"
[ "$wrong" = 0 ]
