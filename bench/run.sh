#!/usr/bin/env bash
# bench/run.sh: Gantry's benchmark suite (`make bench`): each benchmark against its peer in the
# same run, CSV + PNG per benchmark, docs/benchmarks.md, a verdict line per benchmark.
#
#   bench/run.sh [--quick] [--build DIR] [--out DIR] [--doc FILE] [--only "NAMES"] [--skip "NAMES"]
#
# NAMES: allreduce allreduce_nodes cpu_train fasttext predict ckpt operator (default: all).
# Benchmarks and their peers:
#   allreduce  bench/allreduce.sh: shared memory, tcp ring (fp32, bf16 wire) vs Gloo vs PyTorch gloo vs raw TCP, 2 and 4 ranks,
#              4 KiB..64 MiB, 2 rounds, each a sweep plus an interleaved 64 MiB run (--quick:
#              2 ranks, 1..64 MiB); target 2x Gloo busbw at 64 MiB
#   allreduce_nodes  bench/allreduce_nodes.sh: 2 nodes x 2 ranks, each node a network namespace
#              with a 1 Gbit/s link (root; else loopback): hierarchical vs Gantry's ring vs
#              Gloo's ring, 1..64 MiB, 2 interleaved rounds (quick: 1..16 MiB, 1 round);
#              target 1.3x Gloo's algbw at the largest size
#   cpu_train  bench/cpu_train.sh: samples/s vs PyTorch, 2 threads, 3 rounds x 8 steps (quick: 2 x 5);
#              target >= 1.2x
#   fasttext   bench/fasttext.sh: time to accuracy (0.97, 0.98) and final accuracy on SpamAssassin,
#              gantry-worker n-gram (0.25..3 epochs) vs Debian fasttext (1..25 epochs), 3 rounds
#              (later ones stop at 0.98), plus the Transformer for 1 epoch once (quick: 1 round,
#              shorter ladders, no Transformer); ratio reported; target: n-gram final accuracy
#              >= fastText's
#   predict    bench/predict.sh: prediction throughput on SpamAssassin x 10 (12,090 e-mails),
#              gantry-predict (n-gram; the Transformer on the 1,209 once) vs `fasttext predict` with its input
#              tokenized, 1 thread each, 3 rounds (quick: x 5, 1 round, no Transformer); target:
#              the n-gram >= fastText's documents/s end to end
#   ckpt       bench/ckpt_bench.sh: blocked vs write vs dd, 192 MiB x 5 (quick: 48 MiB x 3);
#              blocked <= 10 % of the write
#   operator   bench/operator_bench.sh: N = 100 and 1000 jobs -> pods and RSS vs Kubeflow's
#              training-operator on a private API tier (quick: N = 100, 1 round); ratio reported;
#              on the same cluster first bench/kube_bench (list vs kubectl, watch, informer
#              memory), 1000 pods x 3 (quick: 500 x 1), results as kube.csv/png
# The GPU row says why it does not run here and quotes the last H200 run. Results: DIR (bench/results)
# gets <name>.csv (impl,metric,x,unit,round,value: every round), <name>.png, <name>.log and
# meta.json; FILE (docs/benchmarks.md) the report, by bench/plot.py (matplotlib, hack/pyenv.sh).
# Binaries come from DIR (default build/); ckpt_bench, bench_allreduce and bench_allreduce_gloo
# are compiled here against DIR's libraries when the build does not have them.
# Env: PYTHON (plots; default the hack/pyenv.sh venv), TORCH_PYTHON (the PyTorch peer; default
# the `hack/pyenv.sh torch` venv), GANTRY_REV (the version line when the source is no git checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
quick=0
build=$root/build
out=$root/bench/results
doc=$root/docs/benchmarks.md
only="allreduce allreduce_nodes cpu_train fasttext predict ckpt operator"
skip=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1; shift ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
    esac
done
mkdir -p "$out" "$(dirname "$doc")"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/gantry-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
meta=$work/meta.tsv # section <TAB> key <TAB> value, turned into meta.json at the end
: >"$meta"
m() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$meta"; }
want() { [[ " $only " == *" $1 "* ]] && [[ " $skip " != *" $1 "* ]]; }
log() { echo "== $(date -u +%T) $*"; }
sect_t=
sect() { # sect NAME: closes the previous section's timer, opens NAME's
    [ -z "$sect_t" ] || m durations "$sect_name" "$(($(date +%s) - sect_t)) s"
    sect_name=$1 sect_t=$(date +%s)
}
t_start=$(date +%s)
# the 1-minute load average every 5 s: the machine is shared, the report says how busy it was
( while kill -0 $$ 2>/dev/null; do cut -d" " -f1 /proc/loadavg; sleep 5; done >"$work/load" ) &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true; rm -rf "$work"' EXIT

# ---- binaries --------------------------------------------------------------------------------
find_bin() { find "$build" -maxdepth 3 -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }
[ -d "$build" ] || { echo "run.sh: no build in $build: run make build (or pass --build DIR)" >&2; exit 1; }
libs=("$build/worker/libgantry_dist.a" "$build/common/libgantry_common.a" -lcrypto -ljansson -lpthread -lm)
compile_c() { # compile_c NAME SRC: a benchmark the build does not have, against its libraries
    local b
    b=$(find_bin "$1")
    if [ -z "$b" ]; then
        b=$work/bin/$1
        mkdir -p "$work/bin"
        echo "run.sh: $1 not in $build; compiling $2 against its libraries" >&2
        cc -std=c11 -O2 -D_GNU_SOURCE -I"$root" -o "$b" "$root/$2" "${libs[@]}" >&2 || return 1
    fi
    echo "$b"
}
gloo_bin() {
    local b
    b=$(find_bin bench_allreduce_gloo)
    if [ -z "$b" ]; then
        b=$work/bin/bench_allreduce_gloo
        mkdir -p "$work/bin"
        echo "run.sh: bench_allreduce_gloo not in $build; compiling it (libgloo-dev)" >&2
        c++ -std=c++17 -O2 -o "$b" "$root/bench/allreduce_gloo.cc" -lgloo -pthread >&2 || return 1
    fi
    echo "$b"
}

# ---- machine and versions ----------------------------------------------------------------------
m machine cpu "$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) CPUs online"
m machine memory "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
m machine os "$(. /etc/os-release && echo "$PRETTY_NAME"), Linux $(uname -r)"
m machine disk "$(df -P /tmp | awk 'NR == 2 { print $1 " mounted on " $6 }') (checkpoint and dd target: /tmp)"
m machine "load average at start" "$(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared: other jobs may run)"
# GANTRY_REV names the source when it is not a git checkout (e.g. a `git archive` of a commit)
m versions gantry "${GANTRY_REV:-$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')}"
m versions compiler "$(cc --version | head -1)"
m versions gloo "$(dpkg-query -W -f='libgloo-dev ${Version}' libgloo-dev 2>/dev/null || echo 'not installed')"
m versions openblas "$(dpkg-query -W -f='${db:Status-Abbrev}${Package} ${Version}\n' 'libopenblas*' 2>/dev/null | awk '/^ii/ { print $2, $3; exit }')"
# hack/pyenv.sh's venvs (light: plots; torch: the PyTorch peer); one already complete is used
# directly, without waiting on pyenv.sh's build lock. PYTHON / TORCH_PYTHON override them.
cache=${GANTRY_CACHE:-$HOME/.cache/gantry}
venv=$cache/pyenv-$(sha256sum "$root/hack/requirements.txt" | cut -c1-12)
[ -n "${PYTHON:-}" ] || [ -f "$venv/.complete" ] || venv=$("$root/hack/pyenv.sh")
py=${PYTHON:-$venv/bin/python3}
tvenv=$cache/pyenv-$(cat "$root/hack/requirements.txt" "$root/hack/requirements-torch.txt" | sha256sum | cut -c1-12)
if { want cpu_train || want allreduce; } && [ -z "${TORCH_PYTHON:-}" ] && [ ! -f "$tvenv/.complete" ]; then
    tvenv=$("$root/hack/pyenv.sh" torch)
fi
tpy=${TORCH_PYTHON:-$tvenv/bin/python3}
m versions python "$("$py" -c 'import sys, matplotlib; print("Python %s, matplotlib %s" % (sys.version.split()[0], matplotlib.__version__))')"
! want cpu_train || m versions torch "$("$tpy" -c 'import torch; print("torch %s (%s)" % (torch.__version__, torch.__file__.rsplit("/", 3)[0]))' | sed "s#$HOME#~#")"
m mode mode "$([ $quick = 1 ] && echo 'quick (--quick: fewer rounds and sizes)' || echo full)"
m notes all "In the commands below, BUILD is the build directory, DIR a temporary directory holding the benchmark binaries, OUT the results directory (bench/results)."
m skipped gpu "not run here (no GPU on this machine); it runs through hack/gpu-check.sh on a lent GPU (bench/gpu_bench.cu vs bench/gpu_torch.py). Last H200 run, 2026-12-04 (bench/results/gpu-h200-2026-12-04, docs/gpu.md): GPT-2-124M shape bf16 442k tokens/s, MFU 27.8 %, vs torch.compile reduce-overhead 470k (0.94x); example model 11.5M vs 4.43M tokens/s (2.6x)"
! want fasttext || m versions fasttext "$(dpkg-query -W -f='fasttext ${Version} (Debian)' fasttext 2>/dev/null || echo 'not installed')"

runlog() { # runlog NAME CMD...: run, keep the log, show it
    local name=$1 rc=0
    shift
    m commands "$name" "$(printf '%q ' "$@" | sed "s#$out#OUT#g; s#$work/ar#DIR#g; s#$work/bin#DIR#g; s#$root/##g; s#$build#BUILD#g; s#$HOME#~#g; s# \$##")"
    "$@" 2>&1 | tee "$out/$name.log" || rc=$?
    return $rc
}

# ---- all-reduce ----------------------------------------------------------------------------------
allreduce_csv() { # allreduce_csv ROUND < allreduce.sh output: rows for every table it printed
    awk -v r="$1" '
    /^# raw TCP/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "GB/s") printf "raw-tcp,link,0,GB/s,%d,%s\n", r, $i }
    # gantry: its default (shared memory under gantry-run); gantry-tcp: GANTRY_COLL_SHM=0, the ring
    /^# gantry .*all-reduce: / { impl = ($0 ~ /tcp ring/ && $0 !~ /bf16/) ? "gantry-tcp" : "gantry"; for (i = 1; i <= NF; i++) if ($(i + 1) == "ranks") w = $i }
    /^# gloo .*all-reduce: / { impl = "gloo"; for (i = 1; i <= NF; i++) if ($(i + 1) == "ranks") w = $i }
    /^# torch-gloo .*all-reduce: / { impl = "torch-gloo"; for (i = 1; i <= NF; i++) if ($(i + 1) == "ranks") w = $i }
    /^# busbw at 64 MiB/ { impl = ""; final = 1 }
    impl != "" && NF == 8 && $1 ~ /^[0-9]+$/ {
        printf "%s,busbw_r%d,%s,GB/s,%d,%s\n", ($3 == "float" ? impl : impl "-bf16"), w, $1, r, $7
    }
    # its interleaved 64 MiB rounds (ROUNDS=1: one value each): more samples at the verdict size
    final && NF == 8 && $1 ~ /^[0-9]+$/ {
        printf "gantry,busbw_r%d,67108864,GB/s,%d,%s\n", $1, r, $2
        printf "gantry-tcp,busbw_r%d,67108864,GB/s,%d,%s\n", $1, r, $3
        printf "gantry-bf16,busbw_r%d,67108864,GB/s,%d,%s\n", $1, r, $4
        printf "gloo,busbw_r%d,67108864,GB/s,%d,%s\n", $1, r, $5
    }'
}
# allreduce.sh and allreduce_nodes.sh find their binaries as plain files under one directory
allreduce_bins() {
    local ab gb
    [ -x "$work/ar/bench_allreduce" ] && return 0
    ab=$(compile_c bench_allreduce bench/allreduce.c) && gb=$(gloo_bin) &&
        [ -n "$(find_bin gantry-run)" ] || return 1
    mkdir -p "$work/ar" && cp "$ab" "$gb" "$(find_bin gantry-run)" "$work/ar/"
}
if want allreduce; then
    sect allreduce
    log "all-reduce"
    if allreduce_bins; then
        if [ $quick = 1 ]; then ar_env=(WORLDS=2 MIN=1048576 MAX=67108864 ROUNDS=1); ar_rounds=2
        else ar_env=(WORLDS="2 4" MIN=4096 MAX=67108864 ROUNDS=1); ar_rounds=2; fi
        [ ! -x "$tpy" ] || ar_env+=(TORCH_PYTHON="$tpy") # PyTorch's gloo backend, a third peer
        echo "impl,metric,x,unit,round,value" >"$out/allreduce.csv"
        : >"$work/allreduce.log"
        for r in $(seq 0 $((ar_rounds - 1))); do
            log "all-reduce round $((r + 1))/$ar_rounds"
            runlog allreduce env "${ar_env[@]}" "$root/bench/allreduce.sh" "$work/ar" || echo "run.sh: allreduce.sh failed (round $r)" >&2
            allreduce_csv "$r" <"$out/allreduce.log" >>"$out/allreduce.csv"
            cat "$out/allreduce.log" >>"$work/allreduce.log"
        done
        cp "$work/allreduce.log" "$out/allreduce.log"
        if [ "$(wc -l <"$out/allreduce.csv")" -le 1 ]; then
            rm -f "$out/allreduce.csv"
            m skipped allreduce "bench/allreduce.sh produced no table (see bench/results/allreduce.log)"
        fi
        m notes allreduce "all-reduce: $ar_rounds rounds of bench/allreduce.sh (${ar_env[*]}), each a sweep of every implementation and one interleaved 64 MiB run of each (so n = 2 x rounds at 64 MiB); medians over all of them. Loopback on $(nproc) shared CPUs: every rank competes for the same cores, so this measures the implementations' CPU cost per byte more than a network."
    else
        m skipped allreduce "bench_allreduce, bench_allreduce_gloo (libgloo-dev) or gantry-run could not be built"
    fi
fi

# ---- all-reduce across nodes -------------------------------------------------------------------------
if want allreduce_nodes; then
    sect allreduce_nodes
    log "all-reduce across nodes"
    if allreduce_bins; then
        if [ $quick = 1 ]; then an_env=(MIN=1048576 MAX=16777216 ROUNDS=1)
        else an_env=(MIN=1048576 MAX=67108864 ROUNDS=2); fi
        if runlog allreduce_nodes env "${an_env[@]}" "$root/bench/allreduce_nodes.sh" "$work/ar"; then
            echo "impl,metric,x,unit,round,value" >"$out/allreduce_nodes.csv"
            # rows "[IMPL round R] size count type redop time algbw busbw #wrong"
            awk '/^\[/ { i = $1; sub(/^\[/, "", i); r = $3; sub(/\]$/, "", r)
                         printf "%s,algbw,%s,GB/s,%d,%s\n", i, $4, r - 1, $9 }' \
                "$out/allreduce_nodes.log" >>"$out/allreduce_nodes.csv"
            m notes allreduce_nodes "all-reduce across nodes: $(grep '^# bench/allreduce_nodes' "$out/allreduce_nodes.log" | sed 's/^# bench\/allreduce_nodes: //'). Every node's ranks share this host's CPUs, so the link is the constraint only where its rate is below what the CPUs can move."
        else
            m skipped allreduce_nodes "bench/allreduce_nodes.sh failed (see bench/results/allreduce_nodes.log)"
        fi
    else
        m skipped allreduce_nodes "bench_allreduce, bench_allreduce_gloo (libgloo-dev) or gantry-run could not be built"
    fi
fi

# ---- CPU training ----------------------------------------------------------------------------------
if want cpu_train; then
    sect cpu_train
    log "CPU training vs PyTorch"
    if b=$(find_bin cpu_train_bench) && [ -n "$b" ]; then
        if [ $quick = 1 ]; then ct=(--rounds 2 --steps 5); else ct=(--rounds 3 --steps 8); fi
        if runlog cpu_train env PYTHON="$tpy" "$root/bench/cpu_train.sh" --bin "$b" --threads 2 "${ct[@]}"; then
            echo "impl,metric,x,unit,round,value" >"$out/cpu_train.csv"
            # the table's last columns are the rounds' samples/s
            awk '$1 == "gantry" || $1 == "pytorch" { for (i = 5; i <= NF; i++) printf "%s,samples_per_s,0,samples/s,%d,%s\n", $1, i - 5, $i }' \
                "$out/cpu_train.log" >>"$out/cpu_train.csv"
            m notes cpu_train "CPU training: $(grep '^# CPU training' "$out/cpu_train.log" | sed 's/^# CPU training throughput: //'); ${ct[*]}; rounds alternate Gantry and PyTorch."
        else
            rm -f "$out/cpu_train.csv"
            m skipped cpu_train "bench/cpu_train.sh failed (see bench/results/cpu_train.log)"
        fi
    else
        m skipped cpu_train "cpu_train_bench is not built in $build"
    fi
fi

# fasttext_data (fastText's input, tokenized by Gantry) into $ftd: from the build, else compiled
fasttext_tool() {
    [ -z "${ftd:-}" ] || return 0
    ftd=$(find_bin fasttext_data)
    if [ -z "$ftd" ] && [ -f "$build/worker/libgantry_data.a" ]; then
        ftd=$work/bin/fasttext_data
        mkdir -p "$work/bin"
        echo "run.sh: fasttext_data not in $build; compiling bench/fasttext_data.c against its libraries" >&2
        cc -std=c11 -O2 -D_GNU_SOURCE -I"$root" -o "$ftd" "$root/bench/fasttext_data.c" \
            "$build/worker/libgantry_data.a" "$build/common/libgantry_common.a" -ljansson -lm >&2 || ftd=
    fi
}

# ---- time to accuracy vs fastText ---------------------------------------------------------------
if want fasttext; then
    sect fasttext
    log "time to accuracy on SpamAssassin vs fastText"
    fasttext_tool
    command -v fasttext >/dev/null || "$root/hack/install-deps.sh" >&2 || true
    if ! command -v fasttext >/dev/null; then
        m skipped fasttext "fasttext is not installed (hack/install-deps.sh installs Debian's fasttext as root)"
    elif b=$(find_bin gantry-worker) && [ -n "$b" ] && [ -n "$ftd" ]; then
        if [ $quick = 1 ]; then ftx=(--rounds 1 --ft-epochs "1 3 5 10" --ngram-epochs "0.25 0.5 1" --tf-epochs "")
        else ftx=(--rounds 3); fi
        runlog fasttext "$root/bench/fasttext.sh" --bin "$b" --tool "$ftd" --threads 2 "${ftx[@]}" --csv "$out/fasttext.csv" \
            || { rm -f "$out/fasttext.csv"; m skipped fasttext "bench/fasttext.sh failed (see bench/results/fasttext.log)"; }
        m notes fasttext "time to accuracy: $(sed -n 's/^# data: [^:]*: //p' "$out/fasttext.log" | head -1). Each rung of a ladder is a training from scratch for that many epochs (schedule complete); a threshold's time is the training time of the first rung reaching it, fastText's the wall time of writing its tokenized input plus \`fasttext supervised\` (read, dictionary, train, save), Gantry's its setup (read, tokenize, vocab, encode) + training seconds from its report (final evaluation excluded). Both sides read the same tokens (gantry-worker's tokenizer, first 256 words; bench/fasttext_data.c); fastText with its tutorial settings (lr 1.0, bigrams), dim 64 and 131072 buckets as Gantry's n-gram (lr 3e-2, batch 32, AdamW). 2 threads each; rounds alternate which side starts; after the first round a ladder stops at the first rung reaching the highest threshold, so the last rungs (final accuracy) mostly have n=1 (Gantry is seeded: its accuracies repeat exactly; fastText's threads race, so its vary). CPU seconds are shown too: the 2 cores are shared with other jobs."
    else
        m skipped fasttext "gantry-worker or fasttext_data is not built in $build"
    fi
fi

# ---- prediction throughput vs fastText --------------------------------------------------------------
if want predict; then
    sect predict
    log "prediction throughput vs fastText"
    fasttext_tool
    command -v fasttext >/dev/null || "$root/hack/install-deps.sh" >&2 || true
    if ! command -v fasttext >/dev/null; then
        m skipped predict "fasttext is not installed (hack/install-deps.sh installs Debian's fasttext as root)"
    elif b=$(find_bin gantry-worker) && [ -n "$b" ] && p=$(find_bin gantry-predict) && [ -n "$p" ] && [ -n "${ftd:-}" ]; then
        if [ $quick = 1 ]; then px=(--rounds 1 --copies 5 --no-transformer); else px=(--rounds 3 --copies 10); fi
        runlog predict "$root/bench/predict.sh" --worker "$b" --predict "$p" --tool "$ftd" --threads 1 "${px[@]}" --csv "$out/predict.csv" \
            || { rm -f "$out/predict.csv"; m skipped predict "bench/predict.sh failed (see bench/results/predict.log)"; }
        m notes predict "prediction: $(sed -n 's/^# //p' "$out/predict.log" | head -1). fastText's time is bench/fasttext_data writing its input (Gantry's reader and tokenizer, first 256 words: fastText has no tokenizer for raw text) plus \`fasttext predict\` (one thread, model load included); gantry-predict's covers verifying and loading the checkpoint, reading JSONL, tokenizing, WordPiece, the forward pass and writing JSON lines, with --threads 1. Models: fastText 5 epochs (lr 1.0, bigrams, dim 64, 131072 buckets), the Gantry n-gram 3 epochs with the same sizes, the Transformer (2 layers, 128 wide, 256 tokens) 1 epoch; rounds alternate the order."
    else
        m skipped predict "gantry-worker, gantry-predict or fasttext_data is not built in $build"
    fi
fi

# ---- checkpoint ------------------------------------------------------------------------------------
if want ckpt; then
    sect ckpt
    log "checkpoint"
    if b=$(compile_c ckpt_bench bench/ckpt_bench.c); then
        if [ $quick = 1 ]; then ck=(--params 4194304 --rounds 3); else ck=(--params 16777216 --rounds 5); fi
        runlog ckpt "$root/bench/ckpt_bench.sh" --bin "$b" --dir /tmp "${ck[@]}" --csv "$out/ckpt.csv" \
            || { rm -f "$out/ckpt.csv"; m skipped ckpt "bench/ckpt_bench.sh failed (see bench/results/ckpt.log)"; }
    else
        m skipped ckpt "ckpt_bench could not be built"
    fi
fi

# ---- operator ---------------------------------------------------------------------------------------
if want operator; then
    sect operator
    log "operator vs Kubeflow training-operator (builds Kubeflow once: minutes)"
    if b=$(find_bin gantry-operator) && [ -n "$b" ]; then
        kf=$("$root/bench/kubeflow_build.sh") || {
            kf=none
            m notes operator "Kubeflow training-operator did not build (log: \$GANTRY_CACHE/kubeflow-*/build.log): Gantry's numbers alone, no ratio."
        }
        if [ $quick = 1 ]; then op=(--jobs 100 --rounds 1); else op=(--jobs "100 1000" --rounds 3 --rounds-large 2); fi
        kbargs=()
        if kbb=$(find_bin kube_bench) && [ -n "$kbb" ]; then
            if [ $quick = 1 ]; then kbargs=(--kube-pods 500 --kube-rounds 1); else kbargs=(--kube-pods 1000 --kube-rounds 3); fi
            kbargs=(--kube-bench "$kbb" "${kbargs[@]}" --kube-csv "$out/kube.csv")
            m notes kube "Kubernetes client (bench/kube_bench, engineer kube's): the kubectl peer's list time includes starting the kubectl process (as a user pays it); kube_bench reports the best of 3 lists per round, the table the median of the rounds' bests."
        else
            m skipped kube "kube_bench is not built in $build"
        fi
        if runlog operator "$root/bench/operator_bench.sh" --operator "$b" --kubeflow "$kf" "${op[@]}" "${kbargs[@]}" --csv "$out/operator.csv"; then
            m versions kubernetes "API tier (etcd + kube-apiserver + kube-controller-manager) $(sed -n 's#^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes \(v[0-9.]*\).*#\2#p' "$root/hack/k8s/go.mod" | head -1)"
            [ "$kf" = none ] || m versions kubeflow "training-operator $(basename "$(dirname "$(dirname "$kf")")" | sed 's/^kubeflow-//') built from the Go module proxy"
            m notes operator "operator: each job has one replica (one pod); Gantry also creates a Service, a ConfigMap and a Secret per job, Kubeflow a Service. Both with 4 workers and their own default client rate limits (Gantry 50 QPS per worker, controller-runtime 20 QPS shared), a configuration difference that weighs most at N = 1000. Kubeflow's validating webhook is off (no webhook Service on the API tier)."
        else
            rm -f "$out/operator.csv" "$out/kube.csv"
            m skipped operator "bench/operator_bench.sh failed (see bench/results/operator.log)"
            m skipped kube "bench/operator_bench.sh failed (see bench/results/operator.log)"
        fi
    else
        m skipped operator "gantry-operator is not built in $build"
    fi
fi

# ---- report -------------------------------------------------------------------------------------------
sect report
for name in allreduce allreduce_nodes cpu_train fasttext predict ckpt operator kube; do
    want "${name/kube/operator}" && continue
    rm -f "$out/$name.csv" "$out/$name.png" "$out/$name.log" # no stale results from another run
    m skipped "$name" "not selected in this run (--only/--skip)"
done
m machine "load average at end" "$(cut -d' ' -f1-3 /proc/loadavg)"
kill "$sampler" 2>/dev/null || true
load=$(sort -g "$work/load" | awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %d", v[int((NR + 1) / 2)], v[NR], NR }')
if [ -n "$load" ]; then
    read -r load_med load_max load_n <<<"$load"
    m machine "load average during the run" "median $load_med, max $load_max (1-minute average sampled every 5 s, n=$load_n; $(nproc) CPUs)"
    if awk -v l="$load_max" -v c="$(nproc)" 'BEGIN { exit !(l > c) }'; then
        m notes all "The machine was noisy: it is shared, and other engineers' builds and tests ran during this run (1-minute load average median $load_med, max $load_max on $(nproc) CPUs). Wall times suffer most; the spreads show it, and CPU seconds (time to accuracy, checkpoint pause) are less affected."
    fi
fi
m date date "$(date -u +'%Y-%m-%d %H:%M UTC')"
m wall wall_s "$(($(date +%s) - t_start))"
"$py" - "$meta" "$out/meta.json" <<'PY'
import json, sys
meta = {}
for line in open(sys.argv[1]):
    sec, key, val = line.rstrip("\n").split("\t", 2)
    if sec in ("mode", "date", "wall"):
        meta[key] = val
    elif sec == "notes":
        meta.setdefault("notes", []).append(val)
    else:
        meta.setdefault(sec, {})[key] = val
json.dump(meta, open(sys.argv[2], "w"), indent=1)
PY
log "report"
"$py" "$here/plot.py" "$out" "$doc"
echo "== results in $out, report in $doc ($(($(date +%s) - t_start)) s)"
