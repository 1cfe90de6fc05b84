/*
 * render.h - the JSON of a TrainingJob's children: headless Service, config ConfigMap, rendezvous
 * Secret and worker Pods (DESIGN.md §3). Pure functions of a parsed struct tj; every object
 * carries a controller ownerReference to the job and the label gantry.dev/job-name.
 *
 * Names are deterministic, so a create that already happened is an AlreadyExists, never a
 * duplicate: Service <job>, ConfigMap <job>-config, Secret <job>-rdzv, Pods <job>-worker-<i>.
 *
 * The worker contract (env of every pod; PyTorch/torchrun conventions, so a torchrun image works):
 *   MASTER_ADDR     <job>-worker-0.<job>.<ns>.svc   (resolves before readiness: the Service
 *                                                     publishes not-ready addresses)
 *   MASTER_PORT     spec.port (29500)
 *   NNODES          replicas                 NODE_RANK   the pod's index i
 *   NPROC_PER_NODE  nprocPerNode, else gpusPerReplica, else 1
 *                                           WORLD_SIZE  replicas * NPROC_PER_NODE (processes)
 *   RANK            i * NPROC_PER_NODE: the global rank of the pod's first process
 *   GANTRY_JOB, GANTRY_NAMESPACE, GANTRY_RESTART_COUNT, GANTRY_CHECKPOINT_DIR (<path>/<job>),
 *   GANTRY_CONFIG (/etc/gantry/config.json), GANTRY_RDZV_TOKEN (from the Secret, key "token"),
 *   GANTRY_METRICS_PORT (9090: rank 0 serves /metrics and /progress there; containerPort
 *   "metrics", which the operator's progress poller reads).
 *
 * spec.template (a PodTemplateSpec) is the starting point of every pod: its labels, annotations,
 * nodeSelector, tolerations, volumes, sidecars are kept. The container named "worker" (added
 * when absent, first in the list) gets spec.image, the env above (replacing user entries with the
 * same names), the rendezvous port, the config and checkpoint mounts and, with GPUs, the
 * nvidia.com/gpu limit. The operator owns metadata.name/namespace/ownerReferences, hostname,
 * subdomain and restartPolicy (Never: restarts are whole-gang, done by the operator).
 */
#ifndef GANTRY_RENDER_H
#define GANTRY_RENDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "operator/tj.h"

#define RENDER_LABEL_JOB "gantry.dev/job-name"
#define RENDER_LABEL_INDEX "gantry.dev/replica-index"
#define RENDER_LABEL_RESTART "gantry.dev/restart-count"
#define RENDER_LABEL_REPLICAS "gantry.dev/replicas" /* the gang size the pod was made for */
/* a standby pod: holds a place for a worker an elastic job was shrunk without (rec.h) */
#define RENDER_LABEL_STANDBY "gantry.dev/standby"
/* A standby pod for worker index of tj (its full replicas): the worker's pod, labelled
 * RENDER_LABEL_STANDBY "true", whose gantry-worker only waits (GANTRY_STANDBY=1) for SIGTERM. */
json_t *render_standby_pod(const struct tj *tj, int index, int restarts);
#define RENDER_CONTAINER "worker"
#define RENDER_CONFIG_DIR "/etc/gantry"
#define RENDER_CONFIG_FILE "config.json"
#define RENDER_TOKEN_KEY "token"
/* Rank 0's /metrics and /progress (docs/metrics.md): declared on every worker container as
 * containerPort 9090 named "metrics", and passed as GANTRY_METRICS_PORT. */
#define RENDER_METRICS_PORT 9090
#define RENDER_METRICS_PORT_NAME "metrics"
/* gpusPerReplica > 0 or several processes per pod: an in-memory emptyDir at /dev/shm (NCCL's
 * transport; the CPU ranks' shared-memory all-reduce), this many GiB per process, unless the
 * template's worker container already mounts something there. */
#define RENDER_SHM_GIB_PER_GPU 1
#define RENDER_NAME_MAX 80 /* <= 63 after validation; room for the suffixes */
/* spec.runPolicy.schedulingPolicy.gang: Workload (tj.h): the Workload <job>
 * (scheduling.k8s.io/v1alpha1) holds one pod group, "workers", of minCount = replicas, and each
 * pod's spec.workloadRef names it. kube-scheduler's GangScheduling plugin then binds the gang's
 * pods all together or none of them. */
#define RENDER_WORKLOAD_API "scheduling.k8s.io/v1alpha1"
#define RENDER_WORKLOAD_GROUP "workers"

/* Child names; out has at least RENDER_NAME_MAX bytes. */
void render_pod_name(const struct tj *tj, int index, char *out, size_t n);
void render_configmap_name(const struct tj *tj, char *out, size_t n);
void render_secret_name(const struct tj *tj, char *out, size_t n);
/* name == render_pod_name(tj, index), without formatting it (reconcile asks it of every pod
 * for every replica). */
bool render_is_pod_name(const struct tj *tj, int index, const char *name);

/* The contents of config.json: a new string (caller frees), stable for equal jobs (sorted keys),
 * so the ConfigMap is updated only when the training config really changed. */
char *render_config_json(const struct tj *tj);
/* checkpoint.stopSaveSeconds in that config: the pod's terminationGracePeriodSeconds (30 unless
 * spec.template sets it) minus 5, half of one of 10 s or less, at least 1. */
int render_stop_save_seconds(const struct tj *tj);

/* New references; the caller json_decref()s. */
json_t *render_service(const struct tj *tj);
json_t *render_configmap(const struct tj *tj);
json_t *render_secret(const struct tj *tj, const char *token);
json_t *render_pod(const struct tj *tj, int index, int restarts);
/* gang: Workload: each incarnation of the gang (a restart count, a start or resume) is its own
 * replica of the pod group: spec.workloadRef.podGroupReplicaKey "g<restarts>-<start time, Unix
 * seconds>" on every pod of pod (a DNS label). kube-scheduler keeps a gang's state per key, and
 * 1.35.4's keeps a pod deleted while it waited for its gang (at Permit), which then crashes the
 * scheduler at the next pod of the same key (podGroupInfo.UnscheduledPods, a nil pod): after a
 * suspend or a gang restart the new pods must not share the old ones' key. */
void render_pod_gang_key(json_t *pod, int restarts, long long start);

/* The Workload <job> (named like the Service): its spec is immutable, so a job whose replicas
 * changed (only while suspended) needs a new one; render_workload_min() reads minCount back. */
json_t *render_workload(const struct tj *tj);
/* The gang's minCount in a Workload object (borrowed); -1 when it has none. */
long long render_workload_min(const json_t *workload);

/* Kueue (a job labelled kueue.x-k8s.io/queue-name, tj.h): the job's Workload
 * (kueue.x-k8s.io/v1beta2), what Kueue admits or queues: spec.queueName, one pod set "workers"
 * of count = replicas whose template carries the worker pod's resources (requests filled in from
 * limits) and node selection, and with the priority-class label a WorkloadPriorityClass
 * reference, else with a template's priorityClassName a PriorityClass one (the executor fills
 * in spec.priority from it). Named
 * trainingjob-<job>-<8 hex digits of its spec>: a job whose queue, priority or pods changed
 * (while suspended) gets a Workload of another name, and the old one is deleted. Labelled with
 * the job's name and kueue.x-k8s.io/job-uid, controlled by the job. */
#define RENDER_KUEUE_GROUP "kueue.x-k8s.io"
#define RENDER_KUEUE_API "kueue.x-k8s.io/v1beta2"
#define RENDER_KUEUE_PODSET "workers"
#define RENDER_LABEL_KUEUE_JOB_UID "kueue.x-k8s.io/job-uid"
json_t *render_kueue_workload(const struct tj *tj);
/* Its name; out has at least RENDER_NAME_MAX bytes (12 + 54 + 9 fit). */
void render_kueue_name(const struct tj *tj, char *out, size_t n);

#endif /* GANTRY_RENDER_H */
