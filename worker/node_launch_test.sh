#!/usr/bin/env bash
# gantry-worker as a pod of a job with several ranks per pod (NPROC_PER_NODE > 1, what the
# operator sets for gpusPerReplica > 0), with real processes on loopback:
#   train    two "pods" of a 4-rank job (RANK 0 and 2, NODE_RANK 0 and 1, NPROC_PER_NODE 2, no
#            LOCAL_RANK) each start their 2 ranks; all 4 train to the end with the same final
#            parameters, and match 4 ranks started one by one with the same environment
#   fail     a rank killed with SIGKILL: the node stops its sibling and exits 137, the killed
#            rank's status, not the sibling's 143 from being stopped
#   sigterm  SIGTERM to a node's process reaches its ranks: it exits 143 (retryable) within 5 s
#   env      a RANK that does not fit (RANK 3 + 2 ranks > WORLD_SIZE 4): exit 64 naming RANK
#   threads  threads 0: each rank takes CPUs / NPROC_PER_NODE threads; OMP_NUM_THREADS wins
#   run      the same job outside Kubernetes: gantry-run --nproc 2 --nnodes 2 --node-rank 0|1 on
#            two "hosts" ends with the same parameters; without the shared token: exit 64
#   nodes    the same with GANTRY_COLL_SHM=node (each node's shared memory its own, as on two
#            machines): rank 0 says the all-reduce is hierarchical, the report's
#            train.allreduce is "nodes", all 4 ranks end with the same parameters
# Usage: node_launch_test.sh /path/to/gantry-worker /path/to/worker/testdata /path/to/gantry-run
set -euo pipefail
bin=$1 data=$2 run=$3
tmp=$(mktemp -d)
# shellcheck source=worker/ranks_testlib.sh
. "$(dirname "$0")/ranks_testlib.sh"

cat >"$tmp/cfg.json" <<JSON
{"training": {"model": {"hidden": 16, "heads": 2, "layers": 1, "maxSeqLen": 24},
  "data": {"train": "$data/tiny.jsonl", "eval": "$data/tiny.jsonl", "minFreq": 1},
  "epochs": 4, "batchSize": 2, "learningRate": "3e-3", "logInterval": 1, "threads": 1,
  "scaleLearningRate": false}}
JSON
export OMP_WAIT_POLICY=passive GANTRY_PEER_TIMEOUT=10 GANTRY_RDZV_TIMEOUT=30
unset LOCAL_RANK

# start_node PORT RANK NODE TAG [ARGS...]: one pod's gantry-worker (no LOCAL_RANK) in the
# background; its pid in node_pid, output in $tmp/TAG.out/.err
start_node() {
    local port=$1 rank=$2 node=$3 tag=$4
    shift 4
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=4 RANK=$rank NODE_RANK=$node \
        NPROC_PER_NODE=2 GANTRY_RDZV_TOKEN=n0de "$bin" --config "$tmp/cfg.json" "$@" \
        >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
    node_pid=$!
    pids+=($!)
}

# start_training_pair TAG: nodes 0 and 1 (pids p0, p1) training for a long time, once rank 0
# has logged a step; stop_pair: waits for node 1 (after the caller hit it; its status in rc1,
# the time from the hit in t1 - t0), then stops node 0
start_training_pair() {
    local port
    port=$(free_port)
    start_node "$port" 0 0 "${1}0" --epochs 100000
    p0=$node_pid
    start_node "$port" 2 1 "${1}1" --epochs 100000
    p1=$node_pid
    for _ in $(seq 100); do grep -q '^step' "$tmp/${1}0.err" && break; sleep 0.2; done
    t0=$(ms)
}
stop_pair() {
    wait_rc "$p1"; rc1=$WRC
    t1=$(ms)
    kill -TERM "$p0" 2>/dev/null || true
    wait_rc "$p0"
}

# train: 2 nodes x 2 ranks; then the same job as 4 separately started ranks
port=$(free_port)
start_node "$port" 0 0 n0
p0=$node_pid
start_node "$port" 2 1 n1
p1=$node_pid
wait_rc "$p0"; rc0=$WRC
wait_rc "$p1"; rc1=$WRC
start_ranks "$tmp/unused" 4 one
for r in 0 1 2 3; do wait_rc "${rank_pid[r]}"; [ "$WRC" = 0 ] || bad "separately started rank $r exited $WRC"; done
ref=$(hash_of "$tmp/one.0.err")
hashes=$(cat "$tmp/n0.err" "$tmp/n1.err" | grep -oE 'rank [0-9] final parameters fnv1a64 [0-9a-f]+' | sort)
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] &&
    grep -q 'node 0: starting ranks 0..1 of 4' "$tmp/n0.err" &&
    grep -q 'node 1: starting ranks 2..3 of 4' "$tmp/n1.err" &&
    [ "$(awk '{print $2}' <<<"$hashes" | tr '\n' ' ')" = "0 1 2 3 " ] &&
    [ "$(awk '{print $6}' <<<"$hashes" | sort -u)" = "$ref" ] && [ -n "$ref" ]; then
    ok "train: 2 nodes x 2 ranks trained as ranks 0-3, final parameters $ref on all 4 = 4 ranks started one by one"
else
    bad "train: nodes exited $rc0/$rc1; hashes [$(tr '\n' ' ' <<<"$hashes")], separately started ranks: $ref"
    tail -n 8 "$tmp/n0.err" "$tmp/n1.err"
fi

# fail: rank 3 (node 1's second child) killed with SIGKILL mid-training: node 1 stops rank 2
# and exits 137, the killed rank's status (not rank 2's 143 from being stopped)
start_training_pair f
victim=$(pgrep -P "$p1" | sort -n | tail -1)
kill -KILL "$victim"
stop_pair
if [ "$rc1" = 137 ] && grep -q 'rank 3 (pid [0-9]*) exited with status 137; stopping the other 1' "$tmp/f1.err" &&
    [ -z "$(pgrep -P "$p1")" ]; then
    ok "fail: rank 3 killed (-9): node 1 stopped rank 2 and exited 137 in $((t1 - t0)) ms"
else
    bad "fail: node 1 exited $rc1 (want 137)"
    tail -n 8 "$tmp/f1.err"
fi

# sigterm: a node's process forwards SIGTERM to its ranks and exits 143
start_training_pair s
kill -TERM "$p1"
stop_pair
if [ "$rc1" = 143 ] && [ $((t1 - t0)) -lt 5000 ] && grep -q 'forwarding it to 2 rank' "$tmp/s1.err"; then
    ok "sigterm: node 1 forwarded SIGTERM to its 2 ranks and exited 143 in $((t1 - t0)) ms"
else
    bad "sigterm: node 1 exited $rc1 after $((t1 - t0)) ms (want 143 within 5 s)"
    tail -n 8 "$tmp/s1.err"
fi

# env: RANK 3 with 2 ranks per node does not fit a world of 4
rc=0
MASTER_ADDR=127.0.0.1 MASTER_PORT=1 WORLD_SIZE=4 RANK=3 NODE_RANK=1 NPROC_PER_NODE=2 \
    GANTRY_RDZV_TOKEN=n0de "$bin" --config "$tmp/cfg.json" >/dev/null 2>"$tmp/env.err" || rc=$?
if [ "$rc" = 64 ] && grep -q 'ranks 3..4 do not fit WORLD_SIZE=4' "$tmp/env.err"; then
    ok "env: RANK 3 x 2 ranks in a world of 4: exit 64, '$(grep -o 'ranks 3..4 do not fit[^;]*' "$tmp/env.err")'"
else
    bad "env: exit $rc (want 64)"
    cat "$tmp/env.err"
fi

# threads: with threads 0 each of a node's ranks takes its share of the CPUs; OMP_NUM_THREADS wins
share=$(($(nproc) / 2))
[ "$share" -ge 1 ] || share=1
port=$(free_port)
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 NODE_RANK=0 NPROC_PER_NODE=2 \
    GANTRY_RDZV_TOKEN=n0de "$bin" --config "$tmp/cfg.json" --threads 0 --max-steps 1 \
    >/dev/null 2>"$tmp/t1.err" || true
port=$(free_port)
OMP_NUM_THREADS=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 NODE_RANK=0 \
    NPROC_PER_NODE=2 GANTRY_RDZV_TOKEN=n0de "$bin" --config "$tmp/cfg.json" --threads 0 \
    --max-steps 1 >/dev/null 2>"$tmp/t2.err" || true
if grep -q "gantry-worker: $share threads," "$tmp/t1.err" && grep -q "gantry-worker: 3 threads," "$tmp/t2.err"; then
    ok "threads: 2 ranks on $(nproc) CPUs take $share thread(s) each; OMP_NUM_THREADS=3 gives 3"
else
    bad "threads: want $share and 3: $(grep -h ' threads,' "$tmp/t1.err" "$tmp/t2.err" | tr '\n' ' ')"
fi

# run: gantry-run as the two nodes' launcher (torchrun's --nnodes/--node-rank)
port=$(free_port)
for n in 0 1; do
    GANTRY_RDZV_TOKEN=r4n "$run" --nproc 2 --nnodes 2 --node-rank $n --master-addr 127.0.0.1 \
        --master-port "$port" -- "$bin" --config "$tmp/cfg.json" >"$tmp/r$n.out" 2>"$tmp/r$n.err" &
    pids+=($!)
    rp[n]=$!
done
wait_rc "${rp[0]}"; rc0=$WRC
wait_rc "${rp[1]}"; rc1=$WRC
hashes=$(cat "$tmp/r0.err" "$tmp/r1.err" | grep -oE 'rank [0-9] final parameters fnv1a64 [0-9a-f]+' | sort)
rc=0
GANTRY_RDZV_TOKEN='' "$run" --nproc 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 \
    --master-port "$port" -- "$bin" >/dev/null 2>"$tmp/notoken.err" || rc=$?
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$(awk '{print $2}' <<<"$hashes" | tr '\n' ' ')" = "0 1 2 3 " ] &&
    [ "$(awk '{print $6}' <<<"$hashes" | sort -u)" = "$ref" ] && [ "$rc" = 64 ] &&
    grep -q 'needs GANTRY_RDZV_TOKEN' "$tmp/notoken.err"; then
    ok "run: gantry-run --nnodes 2 --node-rank 0|1: ranks 0-3 end with $ref; no token: exit 64"
else
    bad "run: gantry-run nodes exited $rc0/$rc1, hashes [$(tr '\n' ' ' <<<"$hashes")], no token: $rc"
    tail -n 8 "$tmp/r0.err" "$tmp/r1.err" "$tmp/notoken.err"
fi
# nodes: the hierarchical all-reduce (one host's nodes kept apart by GANTRY_COLL_SHM=node)
port=$(free_port)
for n in 0 1; do
    GANTRY_COLL_SHM=node GANTRY_RDZV_TOKEN=h13r "$run" --nproc 2 --nnodes 2 --node-rank $n \
        --master-addr 127.0.0.1 --master-port "$port" -- "$bin" --config "$tmp/cfg.json" \
        --report "$tmp/h.json" >"$tmp/h$n.out" 2>"$tmp/h$n.err" & # rank 0 writes it
    pids+=($!)
    rp[n]=$!
done
wait_rc "${rp[0]}"; rc0=$WRC
wait_rc "${rp[1]}"; rc1=$WRC
hashes=$(cat "$tmp/h0.err" "$tmp/h1.err" | grep -oE 'rank [0-9] final parameters fnv1a64 [0-9a-f]+' | sort) || true
path=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["allreduce"])' \
    "$tmp/h.json" 2>/dev/null || true)
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$(awk '{print $2}' <<<"$hashes" | tr '\n' ' ')" = "0 1 2 3 " ] &&
    [ "$(awk '{print $6}' <<<"$hashes" | sort -u | wc -l)" = 1 ] && [ "$path" = nodes ] &&
    grep -q 'all-reduce of 4 ranks: shared memory within each of 2 nodes of 2, 2 rings between the nodes' "$tmp/h0.err"; then
    ok "nodes: hierarchical all-reduce (report: $path), ranks 0-3 end with $(awk '{print $6}' <<<"$hashes" | sort -u)"
else
    bad "nodes: exited $rc0/$rc1, hashes [$(tr '\n' ' ' <<<"$hashes")], train.allreduce '$path'"
    tail -n 8 "$tmp/h0.err" "$tmp/h1.err"
fi
exit $fail
