# shellcheck shell=bash
# e2e/jobs.sh: the manifests the suite and the demo apply, written to files first (they are kept
# in the artifacts folder, so a failure can be replayed with `kubectl apply -f`).
#
# The training config is sized for a 2-core CI machine: 3 workers share the node, a 1-layer
# Transformer (hidden 64, 128 tokens) trains 3 epochs on the SpamAssassin split (about 300 steps
# of 3 x 16 examples; 2 epochs gave 98.3 % in 28 s of training on the local tier).

E2E_REPLICAS=${E2E_REPLICAS:-3}
E2E_IMAGE=${E2E_IMAGE:-gantry-worker:0.1.0}

# A TrainingJob on the SpamAssassin data with checkpoints on the shared claim.
#   spam_job NAME [KEY=VALUE...]: epochs, maxSteps, interval, replicas, maxSeqLen, backoff,
#   evalInterval (evaluations during training), patience, threshold, bestMetric (early stopping:
#   training.earlyStoppingPatience, earlyStoppingThreshold, bestMetric), keep (checkpoint.keep), gpus (gpusPerReplica), nproc (nprocPerNode), cpuLimit (the worker's CPU limit), image, emuDevices (GANTRY_EMU_DEVICES in the worker: emulated GPUs),
#   shmHostPath (a host folder mounted at /dev/shm instead of the operator's memory volume: pods
#   on one node then share it, as the emulated NCCL needs across pods), gang
#   (runPolicy.schedulingPolicy.gang: None or Workload), slots (each worker requests that many
#   gantry.dev/e2e-slot, an extended resource scenario 9 gives the node, to fill it exactly),
#   queue and priority (the labels kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class),
#   elastic=MIN:MAX[:SHRINK] (spec.elasticPolicy; SHRINK its shrinkAfterSeconds)
spam_job() {
    local name=$1 epochs=3 maxsteps=0 interval=40 replicas=$E2E_REPLICAS seqlen=128 backoff=2 kv
    local gpus=0 nproc='' image=$E2E_IMAGE env='' shm='' cpu='' evals=0 keep=3 stop='' gang=None
    local slots='' labels='' elastic=''
    shift
    for kv in "$@"; do
        case $kv in
            epochs=*) epochs=${kv#*=} ;;
            maxSteps=*) maxsteps=${kv#*=} ;;
            interval=*) interval=${kv#*=} ;;
            replicas=*) replicas=${kv#*=} ;;
            maxSeqLen=*) seqlen=${kv#*=} ;;
            backoff=*) backoff=${kv#*=} ;;
            evalInterval=*) evals=${kv#*=} ;;
            patience=*) stop="$stop
    earlyStoppingPatience: ${kv#*=}" ;;
            threshold=*) stop="$stop
    earlyStoppingThreshold: ${kv#*=}" ;;
            bestMetric=*) stop="$stop
    bestMetric: ${kv#*=}" ;;
            initFrom=*) stop="$stop
    initFrom: ${kv#*=}" ;;
            keep=*) keep=${kv#*=} ;;
            gpus=*) gpus=${kv#*=} ;;
            nproc=*) nproc="nprocPerNode: ${kv#*=}" ;;
            cpuLimit=*) cpu=", cpu: \"${kv#*=}\"" ;;
            image=*) image=${kv#*=} ;;
            shmHostPath=*) shm=${kv#*=} ;;
            gang=*) gang=${kv#*=} ;;
            slots=*) slots=", gantry.dev/e2e-slot: \"${kv#*=}\"" ;;
            elastic=*) kv=${kv#*=}; elastic="elasticPolicy: {minReplicas: ${kv%%:*}, maxReplicas: "
                kv=${kv#*:}
                case $kv in
                    *:*) elastic="$elastic${kv%%:*}, shrinkAfterSeconds: ${kv#*:}}" ;;
                    *) elastic="$elastic$kv}" ;;
                esac ;;
            queue=*) labels="$labels, kueue.x-k8s.io/queue-name: ${kv#*=}" ;;
            priority=*) labels="$labels, kueue.x-k8s.io/priority-class: ${kv#*=}" ;;
            emuDevices=*) env="env: [{name: GANTRY_EMU_DEVICES, value: \"${kv#*=}\"}]" ;;
            *) echo "spam_job: unknown $kv" >&2; return 1 ;;
        esac
    done
    cat <<YAML
apiVersion: gantry.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $name
  labels: {app.kubernetes.io/part-of: gantry-e2e$labels}
spec:
  replicas: $replicas
  ${elastic}
  gpusPerReplica: $gpus
  ${nproc}
  image: $image
  imagePullPolicy: IfNotPresent
  training:
    task: text-classification
    model: {type: transformer, layers: 1, hidden: 64, heads: 4, maxSeqLen: $seqlen}
    data: {train: /data/train.jsonl, eval: /data/eval.jsonl}
    epochs: $epochs
    maxSteps: $maxsteps
    evalInterval: $evals$stop
    batchSize: 16
    learningRate: 1e-3
    scaleLearningRate: false
    warmupSteps: 20
    seed: 42
  checkpoint: {claimName: spam-ckpt, path: /checkpoints, intervalSteps: $interval, keep: $keep}
  runPolicy:
    backoffLimit: $backoff
    activeDeadlineSeconds: 3600
    cleanPodPolicy: None
    schedulingPolicy: {gang: $gang}
  template:
    spec:
      securityContext: {fsGroup: 65532}
      containers:
        - name: worker
          ${env:+$env}
          resources:
            requests: {cpu: 100m, memory: 256Mi${slots}}
            limits: {memory: 2Gi${cpu}${slots}}
          volumeMounts: [{name: data, mountPath: /data, readOnly: true}${shm:+, {name: shm, mountPath: /dev/shm\}}]
      volumes:
        - name: data
          persistentVolumeClaim: {claimName: spam-data, readOnly: true}${shm:+
        - name: shm
          hostPath: {path: $shm, type: Directory\}}
YAML
}

# The two claims: spam-data (the split, read-only for workers) and spam-ckpt (checkpoints, shared
# by all workers). On the local cluster tier they bind to hostPath PersistentVolumes under the
# cluster's volume root (single node); elsewhere to the default StorageClass.
#   claims_yaml NS HOSTDIR(empty: dynamic provisioning)
claims_yaml() {
    local ns=$1 dir=${2:-} c mode
    for c in data ckpt; do
        mode=ReadWriteMany
        if [ -n "$dir" ]; then
            cat <<YAML
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $ns-$c
  labels: {app.kubernetes.io/part-of: gantry-e2e}
spec:
  capacity: {storage: 2Gi}
  accessModes: [$mode]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $dir/$c, type: Directory}
---
YAML
        else
            mode=ReadWriteOnce # kind's local-path provisioner: one node, RWO is enough
        fi
        cat <<YAML
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: spam-$c
  namespace: $ns
  labels: {app.kubernetes.io/part-of: gantry-e2e}
spec:
  accessModes: [$mode]
$([ -n "$dir" ] && printf '  storageClassName: ""\n  volumeName: %s\n' "$ns-$c")
  resources: {requests: {storage: 1Gi}}
---
YAML
    done
}

# Batch prediction as users run it (manifests/examples/spam-predict.yaml): a batch/v1 Job with
# the worker image runs gantry-predict on JOB's checkpoints (spam-ckpt) and data/eval.jsonl,
# writing predictions and the evaluation report to /checkpoints/JOB/. Waits for it; prints the
# pod's log (the summary and the report) and returns non-zero when it did not complete.
#   predict_job NS JOB
predict_job() {
    local ns=$1 job=$2 name=$2-predict rc=0
    kc -n "$ns" delete job "$name" --ignore-not-found --wait=true >/dev/null 2>&1 || true
    kc -n "$ns" apply -f - >/dev/null <<YAML || return 1
apiVersion: batch/v1
kind: Job
metadata: {name: $name, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  backoffLimit: 0
  template:
    metadata: {labels: {app.kubernetes.io/part-of: gantry-e2e}}
    spec:
      restartPolicy: Never
      securityContext: {runAsNonRoot: true, fsGroup: 65532}
      containers:
        - name: predict
          image: $E2E_IMAGE
          imagePullPolicy: IfNotPresent
          command: [/usr/bin/gantry-predict]
          args: [--model, /checkpoints/$job, --output, /checkpoints/$job/predictions.jsonl,
                 --report, /checkpoints/$job/predict-report.json, /data/eval.jsonl]
          resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true}
          volumeMounts: [{name: data, mountPath: /data, readOnly: true}, {name: ckpt, mountPath: /checkpoints}]
      volumes:
        - {name: data, persistentVolumeClaim: {claimName: spam-data, readOnly: true}}
        - {name: ckpt, persistentVolumeClaim: {claimName: spam-ckpt}}
YAML
    kc -n "$ns" wait --for=condition=complete "job/$name" --timeout=180s >/dev/null 2>&1 || rc=1
    kc -n "$ns" logs "job/$name" 2>&1
    kc -n "$ns" delete job "$name" --wait=false >/dev/null 2>&1 || true
    return $rc
}

# Online prediction as users run it (manifests/examples/spam-serve.yaml): a Deployment with
# gantry-predict --serve on JOB's checkpoints behind a Service; once it is Available, a busybox
# pod POSTs the first N e-mails of data/eval.jsonl to http://JOB-serve/v1/models/JOB:predict
# (cluster DNS, the Service, kube-proxy) and prints the response. Returns non-zero when the
# Deployment did not become Available.
#   serve_job NS JOB N
serve_job() {
    local ns=$1 job=$2 n=$3 name=$2-serve rc=0
    kc -n "$ns" apply -f - >/dev/null <<YAML || return 1
apiVersion: apps/v1
kind: Deployment
metadata: {name: $name, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: $name}}
  template:
    metadata: {labels: {app.kubernetes.io/name: $name, app.kubernetes.io/part-of: gantry-e2e}}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - name: predict
          image: $E2E_IMAGE
          imagePullPolicy: IfNotPresent
          command: [/usr/bin/gantry-predict]
          args: [--model, /checkpoints/$job, --serve, "8080", --name, $job, --threads, "1"]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /v1/models/$job, port: http}, periodSeconds: 2}
          resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true}
          volumeMounts: [{name: ckpt, mountPath: /checkpoints, readOnly: true}]
      volumes: [{name: ckpt, persistentVolumeClaim: {claimName: spam-ckpt, readOnly: true}}]
---
apiVersion: v1
kind: Service
metadata: {name: $name, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  selector: {app.kubernetes.io/name: $name}
  ports: [{name: http, port: 80, targetPort: http}]
YAML
    kc -n "$ns" rollout status "deployment/$name" --timeout=180s >/dev/null 2>&1 || rc=1
    if [ $rc = 0 ]; then
        volume_exec "$ns" spam-data /data \
            "{ printf '{\"instances\": ['; head -n $n /data/eval.jsonl | tr '\\n' ',' | sed 's/,\$//'; printf ']}'; } >/tmp/body && wget -q -O- --header 'Content-Type: application/json' --post-file /tmp/body http://$name/v1/models/$job:predict"
    else
        kc -n "$ns" describe deployment "$name" | tail -10
        kc -n "$ns" logs "deployment/$name" 2>&1 | tail -5
    fi
    kc -n "$ns" delete deployment,service "$name" --wait=false >/dev/null 2>&1 || true
    return $rc
}

# A one-shot busybox pod that mounts a claim read-only and runs a shell command; prints its log.
volume_exec() { # NS CLAIM MOUNT COMMAND
    local ns=$1 claim=$2 mnt=$3 cmd=$4 pod=inspect-$RANDOM
    kc -n "$ns" apply -f - >/dev/null <<YAML || return 1
apiVersion: v1
kind: Pod
metadata: {name: $pod, labels: {app.kubernetes.io/part-of: gantry-e2e}}
spec:
  restartPolicy: Never
  containers:
    - name: sh
      image: $E2E_BUSYBOX_IMAGE
      imagePullPolicy: IfNotPresent
      command: [sh, -c, $(printf '%s' "$cmd" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')]
      volumeMounts: [{name: v, mountPath: $mnt, readOnly: true}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: $claim, readOnly: true}}]
YAML
    local i phase=''
    for ((i = 0; i < 120; i++)); do
        phase=$(kc -n "$ns" get pod "$pod" -o 'jsonpath={.status.phase}' 2>/dev/null)
        case $phase in Succeeded|Failed) break ;; esac
        sleep 1
    done
    case $phase in Succeeded|Failed) ;; *) kc -n "$ns" describe pod "$pod" | tail -15 >&2 ;; esac
    kc -n "$ns" logs "$pod" 2>&1
    kc -n "$ns" delete pod "$pod" --wait=false >/dev/null 2>&1 || true
}
