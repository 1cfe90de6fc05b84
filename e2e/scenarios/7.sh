# shellcheck shell=bash
# shellcheck disable=SC2034  # GPU_NODE: read by e2e/run.sh's teardown
# Scenario 7: the GPU path of a TrainingJob on a cluster without GPUs. The node advertises two
# emulated GPUs (an nvidia.com/gpu status patch, removed at the end); a one-pod job with
# gpusPerReplica: 2 runs gantry-worker-emu (the worker built on the CUDA emulator, kernels/emu/,
# GANTRY_EMU_DEVICES=2). What it checks is the operator's and the worker's part of "one process
# per GPU": the pod's nvidia.com/gpu limit and memory-backed /dev/shm, the pod's gantry-worker
# starting 2 ranks (LOCAL_RANK 0 and 1 on GPU 0 and 1, NCCL between them through /dev/shm), a pod
# deleted mid-run resuming on the GPUs from its checkpoint, and the job Succeeding with the same
# final parameters on both ranks and a useful accuracy. Then (local tier) 2 pods x 2 GPUs: 4
# ranks, RANK 0 and 2 per pod, one NCCL communicator across the pods (the emulated NCCL goes
# through /dev/shm, so both pods mount one host folder there; a real one would use the network).
# Last, the same on CPUs: nprocPerNode 2 with the shipped image (the all-reduce hierarchical:
# shared memory within each pod, rings between the pods).

E2E_GPU_MIN_ACCURACY=${E2E_GPU_MIN_ACCURACY:-0.90}

scenario_7() {
    local job=spam-gpu f=$ARTIFACTS/spam-gpu.yaml pod=spam-gpu-worker-0 node have step logs s
    local image=${E2E_IMAGE/gantry-worker:/gantry-worker-emu:} w='{.spec.containers[?(@.name=="worker")]'
    node=$(kc get nodes -o 'jsonpath={.items[0].metadata.name}')
    have=$(kc get node "$node" -o 'jsonpath={.status.capacity.nvidia\.com/gpu}')
    if [ -n "$have" ]; then
        note "GPU parts skipped: node $node already has $have nvidia.com/gpu (real GPUs; this scenario emulates them)"
        scenario_7_cpu_nproc
        return 0
    fi
    check "node $node advertises 4 nvidia.com/gpu (status patch: emulated GPUs)" gpu_node_patch "$node" 4 || return 0
    GPU_NODE=$node
    spam_job "$job" replicas=1 gpus=2 emuDevices=2 "image=$image" maxSteps=40 interval=20 >"$f"
    check "kubectl apply -f spam-gpu.yaml (gpusPerReplica: 2, image $image)" kc -n "$NS" apply -f "$f" || return 0
    check "its worker pod is created" wait_until 60 kc -n "$NS" get pod "$pod" || return 0
    check "the worker container's limits hold nvidia.com/gpu: 2" \
        test "$(kc -n "$NS" get pod "$pod" -o "jsonpath=$w.resources.limits.nvidia\.com/gpu}")" = 2
    check "/dev/shm is a memory-backed emptyDir of 2Gi (NCCL's transport)" test \
        "$(kc -n "$NS" get pod "$pod" -o 'jsonpath={.spec.volumes[?(@.name=="gantry-shm")].emptyDir.medium} {.spec.volumes[?(@.name=="gantry-shm")].emptyDir.sizeLimit}')" \
        = "Memory 2Gi"
    check "... mounted at /dev/shm in the worker" \
        test "$(kc -n "$NS" get pod "$pod" -o "jsonpath=$w.volumeMounts[?(@.name==\"gantry-shm\")].mountPath}")" = /dev/shm
    check "the pod is one node of 2 ranks (NPROC_PER_NODE=2, WORLD_SIZE=2, RANK=0)" test \
        "$(kc -n "$NS" get pod "$pod" -o "jsonpath=$w.env[?(@.name==\"NPROC_PER_NODE\")].value} $w.env[?(@.name==\"WORLD_SIZE\")].value} $w.env[?(@.name==\"RANK\")].value}")" \
        = "2 2 0"
    check "tj/$job reaches Running" wait_tj_phase "$NS" "$job" "Running Succeeded" 300 || return 0
    step=$(wait_kill_moment "$NS" "$job" 600) || { bad "tj/$job ended before its pod could be deleted"; return 0; }
    check "a first checkpoint exists (step ${step:-none})" test "${step:-0}" -gt 0
    note "$(stamp) kubectl delete pod $pod (checkpoint at step ${step:-none})"
    check "kubectl delete pod $pod" kc -n "$NS" delete pod "$pod" --wait=false
    check "the job restarts the gang (restarts=1)" \
        wait_until 120 bash -c "[ \"\$('$KUBECTL' -n '$NS' get tj '$job' -o jsonpath='{.status.restarts}')\" = 1 ]"
    check "tj/$job reaches Succeeded after the restart" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    logs=$(kc -n "$NS" logs "$pod" -c worker 2>&1)
    printf '%s\n' "$logs" >"$ARTIFACTS/spam-gpu-logs.txt"
    check "the pod's gantry-worker started its 2 ranks ('node 0: starting ranks 0..1 of 2')" \
        grep -q 'node 0: starting ranks 0\.\.1 of 2' <<<"$logs"
    check "local rank 0 trained on GPU 0 and local rank 1 on GPU 1 (of 2)" bash -c \
        "grep -q 'local rank 0 on GPU 0 of 2' <<<\"\$1\" && grep -q 'local rank 1 on GPU 1 of 2' <<<\"\$1\"" _ "$logs"
    check "the steps ran on the device ('(cuda)' in rank 0's step lines)" grep -qE '^step [0-9]+/40 .*\(cuda\)' <<<"$logs"
    s=$(grep -i 'resumed from step' <<<"$logs" | grep -oE 'step [0-9]+' | grep -oE '[0-9]+' | sort -n | tail -1)
    check "the restarted ranks resumed from step S=${s:-none} > 0" test "${s:-0}" -gt 0
    s=$(grep -oE 'rank [01] final parameters fnv1a64 [0-9a-f]+ \(step 40\)' <<<"$logs" | awk '{print $6}' | sort | uniq -c)
    note "final parameters: $(tr -s ' \n' ' ' <<<"$s")"
    check "both ranks end at step 40 with the same parameters" test "$(awk '$1 == 2' <<<"$s" | wc -l)" = 1
    local acc
    acc=$(json_field "$(rank0_report "$NS" "$job")" 'r["accuracy"]')
    check "the eval report's accuracy (${acc:-none}) >= $E2E_GPU_MIN_ACCURACY after 40 steps" \
        python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= $E2E_GPU_MIN_ACCURACY else 1)"
    check "kubectl delete tj $job" kc -n "$NS" delete tj "$job" --wait=true --timeout=60s
    scenario_7_two_pods "$image"
    scenario_7_cpu_nproc
    check "the node's emulated GPUs are removed again" gpu_node_unpatch "$node" && GPU_NODE=''
}

# What a job of 2 pods x 2 ranks that ran to step 30 must show: each pod's gantry-worker started
# its ranks, all 4 ranks ended with the same parameters, the report counts 4. Then deletes it.
check_two_by_two() { # JOB ALLREDUCE (the report's train.allreduce)
    local job=$1 path=$2 logs='' s i world got
    for i in 0 1; do
        s=$(kc -n "$NS" logs "$job-worker-$i" -c worker 2>&1)
        printf '%s\n' "$s" >"$ARTIFACTS/$job-worker-$i.txt"
        check "pod $i's gantry-worker started ranks $((2 * i))..$((2 * i + 1)) of 4" \
            grep -q "node $i: starting ranks $((2 * i))\.\.$((2 * i + 1)) of 4" <<<"$s"
        logs+=$s$'\n'
    done
    s=$(grep -oE 'rank [0-3] final parameters fnv1a64 [0-9a-f]+ \(step 30\)' <<<"$logs" | awk '{print $6}' | sort | uniq -c)
    note "final parameters: $(tr -s ' \n' ' ' <<<"$s")"
    check "all 4 ranks end at step 30 with the same parameters" test "$(awk '$1 == 4' <<<"$s" | wc -l)" = 1
    world=$(json_field "$(rank0_report "$NS" "$job")" 'r["train"]["world_size"]')
    check "the report says world size 4 (got ${world:-none})" test "${world:-0}" = 4
    got=$(json_field "$(rank0_report "$NS" "$job")" 'r["train"]["allreduce"]')
    check "the report says the all-reduce ran as '$path' (got '${got:-none}')" test "$got" = "$path"
    check "kubectl delete tj $job" kc -n "$NS" delete tj "$job" --wait=true --timeout=60s
}

# 2 pods x 2 emulated GPUs: one job of 4 ranks, every rank ending with the same parameters.
scenario_7_two_pods() { # IMAGE
    local job=spam-gpu4 f=$ARTIFACTS/spam-gpu4.yaml
    if [ "$LOCAL_TIER" != 1 ]; then
        note "2 pods x 2 GPUs skipped: needs the local tier (a host folder shared as /dev/shm)"
        return 0
    fi
    mkdir -p "$VOLDIR/shm" && chmod 1777 "$VOLDIR/shm"
    spam_job "$job" replicas=2 gpus=2 emuDevices=2 "image=$1" maxSteps=30 interval=100 \
        "shmHostPath=$VOLDIR/shm" >"$f"
    check "kubectl apply -f spam-gpu4.yaml (2 pods x gpusPerReplica 2)" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "the template's own /dev/shm is kept (no gantry-shm volume added)" test -z \
        "$(kc -n "$NS" get pod "$job-worker-0" -o 'jsonpath={.spec.volumes[?(@.name=="gantry-shm")].name}')"
    check_two_by_two "$job" nccl
}

# nprocPerNode on CPU pods: 2 pods x 2 ranks of the shipped (CPU) image, the ranks of a pod on a
# memory-backed /dev/shm (their shared-memory all-reduce), each with half of the CPUs; then one
# rank under a CPU limit of 1, which its default thread count follows.
scenario_7_cpu_nproc() {
    local job=spam-nproc f=$ARTIFACTS/spam-nproc.yaml
    spam_job "$job" replicas=2 nproc=2 maxSteps=30 interval=100 >"$f"
    check "kubectl apply -f spam-nproc.yaml (CPU, 2 pods x nprocPerNode 2)" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "its pods get a 2Gi memory-backed /dev/shm and no GPU limit" test \
        "$(kc -n "$NS" get pod "$job-worker-1" -o 'jsonpath={.spec.volumes[?(@.name=="gantry-shm")].emptyDir.sizeLimit} {.spec.containers[?(@.name=="worker")].resources.limits.nvidia\.com/gpu}')" \
        = "2Gi "
    check_two_by_two "$job" nodes
    # one rank under a CPU limit of 1 on a node with more: training.threads 0 follows the limit
    job=spam-quota f=$ARTIFACTS/spam-quota.yaml
    if [ "$(kc get node "$(kc get nodes -o 'jsonpath={.items[0].metadata.name}')" -o 'jsonpath={.status.capacity.cpu}')" -lt 2 ]; then
        note "CPU limit part skipped: the node has one CPU"
        return 0
    fi
    spam_job "$job" replicas=1 maxSteps=5 interval=100 cpuLimit=1 >"$f"
    check "kubectl apply -f spam-quota.yaml (1 rank, limits.cpu 1)" kc -n "$NS" apply -f "$f" || return 0
    check "tj/$job reaches Succeeded" wait_tj_phase "$NS" "$job" Succeeded "$E2E_TRAIN_TIMEOUT"
    check "its worker trains with 1 thread, as its CPU limit allows ('gantry-worker: 1 threads')" \
        grep -q '^gantry-worker: 1 threads,' <<<"$(kc -n "$NS" logs "$job-worker-0" -c worker 2>&1)"
    check "kubectl delete tj $job" kc -n "$NS" delete tj "$job" --wait=true --timeout=60s
}
