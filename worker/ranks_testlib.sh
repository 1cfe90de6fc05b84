# ranks_testlib.sh - shell helpers for tests that run gantry-worker ranks as real processes on
# loopback (ckpt_resume_test.sh, train_gpu_resume_test.sh). Source it after setting `bin` (the
# gantry-worker) and `tmp` (a fresh directory holding cfg.json); it sets an EXIT trap that kills
# the ranks still running and removes $tmp.
pids=()
fail=0
ranks_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap ranks_cleanup EXIT
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
ms() { date +%s%3N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_ranks JOBDIR WORLD TAG: starts WORLD ranks of $bin --config $tmp/cfg.json in the
# background, checkpointing under JOBDIR (pids in rank_pid[]; LOCAL_RANK = rank: one host);
# output in $tmp/TAG.<rank>.out and .err
start_ranks() {
    local dir=$1 world=$2 tag=$3 port r
    port=$(free_port)
    rank_pid=()
    for ((r = 0; r < world; r++)); do
        GANTRY_CHECKPOINT_DIR=$dir MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$world \
            RANK=$r LOCAL_RANK=$r GANTRY_RDZV_TOKEN=t0k "$bin" --config "$tmp/cfg.json" \
            >"$tmp/$tag.$r.out" 2>"$tmp/$tag.$r.err" &
        rank_pid[r]=$!
        pids+=($!)
    done
}
wait_rc() { WRC=0; wait "$1" || WRC=$?; } # sets WRC (not in a subshell: wait needs our child)
hash_of() { grep -oE 'final parameters fnv1a64 [0-9a-f]+' "$1" | awk '{print $4}'; }
