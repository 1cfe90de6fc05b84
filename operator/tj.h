/*
 * tj.h - a TrainingJob (gantry.dev/v1alpha1) parsed from its JSON object into a C struct.
 *
 * tj_parse() applies the CRD's defaults (manifests/crds/gantry.dev_trainingjobs.yaml) to anything
 * missing and validates the result with the same rules, so a job that got past an older CRD, or
 * was written with validation off, still cannot make the operator render a broken pod: the
 * caller surfaces the message as a condition instead of crash-looping. Error messages name the
 * field: "spec.replicas: must be >= 1 (got 0)". All errors found are reported, joined by "; ".
 * It also reads the parts of status the reconciler needs (phase, restarts, times, conditions).
 * Pure and reentrant; a struct tj is owned by its caller (tj_cleanup() releases it).
 */
#ifndef GANTRY_TJ_H
#define GANTRY_TJ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "operator/cond.h"

#define TJ_GROUP "gantry.dev"
#define TJ_API_VERSION "gantry.dev/v1alpha1"
#define TJ_KIND "TrainingJob"

#define TJ_NAME_MAX 63       /* DNS label: the Service name and the pods' subdomain */
#define TJ_NS_MAX 63
#define TJ_UID_MAX 64
#define TJ_IMAGE_MAX 512
#define TJ_PATH_MAX 1024
#define TJ_CLAIM_MAX 253
#define TJ_REPLICAS_MAX 1000 /* also bounds the name: see tj_name_max() */
#define TJ_GPUS_MAX 16
#define TJ_NPROC_MAX 64
#define TJ_ERR_MAX 1024      /* a useful size for the err buffer of tj_parse() */

/* Defaults, the same as the CRD's. */
#define TJ_DEFAULT_IMAGE "gantry-worker:0.1.0"
#define TJ_DEFAULT_PORT 29500
#define TJ_DEFAULT_BACKOFF_LIMIT 3
#define TJ_DEFAULT_CKPT_PATH "/checkpoints"

enum tj_phase {
    TJ_PHASE_NONE = 0, /* no status yet */
    TJ_PHASE_PENDING,
    TJ_PHASE_RUNNING,
    TJ_PHASE_RESTARTING,
    TJ_PHASE_SUCCEEDED,
    TJ_PHASE_FAILED,
    TJ_PHASE_SUSPENDED,
};

enum tj_clean { TJ_CLEAN_RUNNING = 0, TJ_CLEAN_ALL, TJ_CLEAN_NONE };

/* spec.runPolicy.schedulingPolicy.gang: how the pods of a gang are scheduled.
 *   None      one by one, by whatever scheduler the template names (the default).
 *   Workload  all or nothing, by kube-scheduler's GangScheduling plugin: a Workload
 *             (scheduling.k8s.io/v1alpha1, Kubernetes 1.35 with the GenericWorkload and
 *             GangScheduling feature gates) named after the job, with one pod group of minCount
 *             = replicas, and every pod's spec.workloadRef naming it. */
enum tj_gang { TJ_GANG_NONE = 0, TJ_GANG_WORKLOAD };

/* Kueue (kueue.x-k8s.io): a job labelled kueue.x-k8s.io/queue-name waits in that LocalQueue
 * until Kueue admits it (rec.h); kueue.x-k8s.io/priority-class names a WorkloadPriorityClass. */
#define TJ_LABEL_QUEUE "kueue.x-k8s.io/queue-name"
#define TJ_LABEL_PRIORITY "kueue.x-k8s.io/priority-class"
#define TJ_QUEUE_MAX 253 /* a LocalQueue's or a WorkloadPriorityClass's name: a DNS subdomain */

/* spec.runPolicy.podFailurePolicy (batch/v1 Job's): rules matched in order against each failed
 * or disrupted worker of the gang; the first that matches gives the pod's action. A pod no rule
 * matches gets the built-in one: FailJob for exit codes 64-78, Ignore for a disruption
 * (DisruptionTarget), else Count. The gang's failure takes the strongest action of its pods
 * (FailJob, then Ignore, then Count): peers that fail of losing a rank do not decide (rec.c). */
#define TJ_FP_RULES_MAX 20
#define TJ_FP_CODES_MAX 255
enum tj_fp_action { TJ_FP_COUNT = 0, TJ_FP_IGNORE, TJ_FP_FAIL_JOB };
struct tj_fp_rule {
    enum tj_fp_action action;
    bool on_disruption; /* onPodConditions [{type: DisruptionTarget}]; else onExitCodes */
    bool not_in;        /* onExitCodes.operator NotIn (else In) */
    int ncodes;
    unsigned char codes[TJ_FP_CODES_MAX]; /* onExitCodes.values, 0-255 */
};

struct tj_status {
    enum tj_phase phase;
    int restarts;
    int disruptions; /* restarts after a disruption (not counted against backoffLimit) */
    int ignored;     /* restarts a podFailurePolicy Ignore rule excused (not counted either) */
    /* elasticPolicy.shrinkAfterSeconds: the size the job was shrunk to (0: replicas), and when
     * workers of its gang were first seen unschedulable (0: none are) */
    int elastic_workers;
    time_t unschedulable_since;
    long long observed_generation;
    time_t start_time;      /* 0: unset */
    time_t completion_time; /* 0: unset */
    struct cond_list conds;
};

struct tj {
    char ns[TJ_NS_MAX + 1];
    char name[TJ_NAME_MAX + 1];
    char uid[TJ_UID_MAX + 1];
    long long generation;
    bool deleting; /* metadata.deletionTimestamp is set */

    int replicas;
    /* spec.elasticPolicy: replicas may change while the job runs, within [min, max] (kubectl
     * scale, an autoscaler through the scale subresource); 0, 0 when not elastic */
    int elastic_min, elastic_max;
    /* elasticPolicy.shrinkAfterSeconds: workers of the gang unschedulable this long, the job
     * runs with those that fit (>= elastic_min) and grows back when room appears; 0: off */
    long long elastic_shrink_s;
    int gpus; /* gpusPerReplica */
    int nproc; /* nprocPerNode; 0: unset (tj_nproc decides) */
    int port;
    char image[TJ_IMAGE_MAX + 1];
    char pull_policy[16];

    /* spec.training, with every default filled in: rendered as-is into config.json. */
    json_t *training; /* new reference, never NULL after a successful parse */
    json_t *tmpl;     /* spec.template (new reference) or NULL */

    char ckpt_claim[TJ_CLAIM_MAX + 1]; /* "" : emptyDir */
    char ckpt_path[TJ_PATH_MAX + 1];
    int ckpt_interval, ckpt_keep;
    bool ckpt_save_on_stop; /* checkpoint.saveOnStop (default true) */

    int backoff_limit;
    struct tj_fp_rule fp_rules[TJ_FP_RULES_MAX]; /* runPolicy.podFailurePolicy.rules */
    int fp_nrules;
    long long active_deadline_s; /* -1: none */
    long long ttl_s;             /* -1: none */
    long long progress_deadline_s; /* 0: no hang detection (rec.h: Stalled) */
    bool suspend;
    enum tj_clean clean;
    enum tj_gang gang;
    char queue[TJ_QUEUE_MAX + 1];    /* label kueue.x-k8s.io/queue-name; "": not queued */
    char priority[TJ_QUEUE_MAX + 1]; /* label kueue.x-k8s.io/priority-class; "": none */

    struct tj_status status;
    json_t *status_raw; /* the observed .status (new reference) or NULL: compared, not trusted */
};

/* Parses obj (borrowed) into tj, applying defaults and validating. Returns 0, or OP_EINVALID
 * with the reasons in err (may be NULL) when the spec cannot run; OP_EPARSE when obj is not a
 * TrainingJob object at all. On error tj still holds what could be read (metadata, status), so
 * the caller can report the problem on the job; tj_cleanup() is needed either way. */
int tj_parse(const json_t *obj, struct tj *tj, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void tj_cleanup(struct tj *tj);

/* The longest metadata.name allowed with `replicas` workers: <name>-worker-<replicas-1> must
 * be a 63-character DNS label, so 55 minus the digits of replicas-1. */
int tj_name_max(int replicas);

/* Processes per pod: nprocPerNode when set, else gpusPerReplica, or 1 on CPUs. */
int tj_nproc(const struct tj *tj);

const char *tj_phase_str(enum tj_phase p); /* "" for TJ_PHASE_NONE */
enum tj_phase tj_phase_parse(const char *s); /* TJ_PHASE_NONE for NULL or unknown */
bool tj_phase_terminal(enum tj_phase p);
const char *tj_clean_str(enum tj_clean c);
const char *tj_gang_str(enum tj_gang g);

#endif /* GANTRY_TJ_H */
