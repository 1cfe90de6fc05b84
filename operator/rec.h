/*
 * rec.h - reconcile, as a pure function (DESIGN.md §3).
 *
 *   (TrainingJob, observed pods/service/configmap/secret, expectations, now)
 *       -> (actions, new status, events, requeue-after)
 *
 * No I/O, no clock, no randomness: everything comes in through struct rec_input, so every
 * decision is tested with JSON fixtures (operator/testdata/rec/). The executor applies the result:
 * the status first (through /status, with the job's resourceVersion, so a decision taken on a
 * stale read is refused with 409 and retried from a fresh one), then the actions in order.
 *
 * Semantics, in the order they are decided:
 *  - A job being deleted: nothing (the garbage collector removes the children).
 *  - A pod labelled with the job's name but controlled by another object (a deleted job of the
 *    same name whose pods the garbage collector has not removed yet) is not this job's: never
 *    counted, judged or deleted, as client-go's controllers check ControllerRef; while one
 *    exists no pod is created (the names would collide) and a timer is asked for in 2 s. A pod
 *    with no controller counts (it carries the job's labels and name).
 *  - Restart count R = max(status.restarts, the highest gantry.dev/restart-count label seen): a
 *    lost or reset status cannot reset the restart budget.
 *  - Terminal phases (Succeeded, Failed) are sticky: no pod is ever created again; pods are
 *    deleted per cleanPodPolicy (Running: those not finished; All; None), and once
 *    ttlSecondsAfterFinished has passed since completionTime, the TrainingJob itself is deleted.
 *  - suspend: every pod is deleted, phase Suspended, restarts and conditions kept, startTime
 *    cleared (activeDeadlineSeconds counts from the last start or resume, as for a Job).
 *  - activeDeadlineSeconds past since startTime: Failed (DeadlineExceeded).
 *  - Success policy: the job Succeeded when worker 0 (rank 0, which writes the final checkpoint
 *    and report) exits 0 (its pod Succeeded, or its worker container terminated with 0 while a
 *    sidecar keeps the pod Running), whatever the others do; still-running pods are then
 *    cleaned (a pod whose worker container exited counts as finished, sidecar or not).
 *  - A worker of the current gang failed (pod Failed, or its worker container terminated
 *    non-zero; not a pod being deleted, which dies of that: see the next point): exit code 64-78 (sysexits: bad usage/data/config) of any failed worker ->
 *    Failed at once (PermanentError, naming that worker, not a peer that died of losing it); else if R >= backoffLimit -> Failed (BackoffLimitExceeded); else the whole
 *    gang is deleted and status.restarts becomes R+1 (phase Restarting). Nothing is created in
 *    the same pass. The Failed condition and Event carry the tail of the worker's termination
 *    message (FallbackToLogsOnError: its log's tail).
 *  - A pod of the current gang that disappears, or gets a deletionTimestamp, while the observed
 *    phase is Running (so every replica was seen; the operator itself never deletes current pods
 *    without leaving Running in the same status write) was deleted by someone else: a gang
 *    failure as above (reason WorkerDeleted, against backoffLimit), never a lone replacement.
 *  - Pods of an older gang (restart label < R), with an index outside [0, replicas) or named
 *    other than <job>-worker-<index> (labels edited, a copied pod) are deleted (with a UID
 *    precondition); while any of them still exists, no pod is created, so a new gang
 *    never mixes with the old one and deterministic names never collide.
 *  - Service, ConfigMap and Secret are created when missing; the ConfigMap is updated when the
 *    rendered config differs. With spec.runPolicy.schedulingPolicy.gang: Workload, a pass that
 *    creates pods first creates the job's Workload (render_workload(); not observed: the
 *    executor adopts an existing one whose minCount is the job's replicas, replaces one that is
 *    not, and creates no pod while it has no Workload, so a pod never runs outside its gang). Missing pods are created in slow-start batches (batch b holds up to
 *    2^b pods: 1, 2, 4, ...; the executor stops at the first batch with an error), and only when
 *    expectations are met: a cache that has not yet seen our earlier creates/deletes creates
 *    nothing (the caller tracks expectations; see exec.h).
 *  - Phase: Running when every replica of the current gang is Running; Restarting after a gang
 *    restart until then; Pending otherwise. A pod that cannot start (unschedulable, e.g. its
 *    claim is missing; image pull errors; a missing ConfigMap/Secret key) shows as Running=False
 *    with the pod's reason and message, and a Warning Event when that reason first appears: a
 *    spec that passes the schema but cannot run is explained, never crash-looped.
 *  - Hang detection (spec.runPolicy.progressDeadlineSeconds, after failures are judged): when
 *    the whole current gang is Running and rank 0's step has not advanced for the deadline
 *    (progress_since in rec_input, kept by the poller for the current gang only), the job gets
 *    Stalled=True (ProgressDeadlineExceeded) and a Warning Event, and the gang is restarted as
 *    for a failure, counting against backoffLimit (past it: Failed, BackoffLimitExceeded).
 *    Before the deadline a timer is asked for at the deadline; Stalled flips to False once the
 *    new gang's step advances.
 *  - status.progress is the poller's latest reading, else the observed one (kept); once Succeeded
 *    it reads complete (step = totalSteps, 100%, state succeeded). status.lastCheckpoint is
 *    {step, path: <checkpoint.path>/<job>/step-<N>} from progress.lastCheckpointStep, else kept.
 *  - Kueue (the job labelled kueue.x-k8s.io/queue-name; Kueue's contract for a job kind whose
 *    controller integrates itself, as its jobframework does for built-in kinds): the job runs
 *    only while Kueue admits its Workload (render_kueue_workload()). No Workload of that name:
 *    it is created, and no pod is. Not admitted yet, evicted (preempted, deactivated, its queue
 *    stopped) or being deleted: no pod runs (any are deleted, as for suspend, restarts kept and
 *    not counted), phase Pending, Queued=True with Kueue's own reason and message, startTime
 *    cleared; an evicted Workload that still holds quota gets its admission cleared (status
 *    merge patch: admission null, QuotaReserved=False Pending, Admitted=False, Requeued) once
 *    the job's last pod is gone, which is what lets Kueue admit another Workload (a preemptor)
 *    or this one again; the job then resumes from its last checkpoint. Admitted: Queued=False
 *    and the job runs as without Kueue, its pods on the admitted flavors' nodes
 *    (rec_result.kueue_flavors). A terminal job marks its Workload Finished (reason Succeeded
 *    or Failed), which releases the quota; suspend deletes it (and releases it); the job's
 *    other Workloads (its spec changed while suspended, or the label went) are deleted. When
 *    the cluster serves no Kueue API, nothing runs and a Warning Event says so.
 * Conditions (Created, Running, Restarting, Succeeded, Failed, Suspended, Stalled, Queued) change
 * lastTransitionTime only on transitions; status_changed is false when the new status equals the
 * observed one, so status is written only when it changed.
 */
#ifndef GANTRY_REC_H
#define GANTRY_REC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "operator/render.h"
#include "operator/tj.h"

#define REC_EXIT_PERMANENT_MIN 64 /* sysexits EX_USAGE */
#define REC_EXIT_PERMANENT_MAX 78 /* sysexits EX_CONFIG */
#define REC_EVENTS_MAX 4
#define REC_UID_MAX 64
#define REC_REASON_MAX 64
#define REC_PROBLEM_MSG_MAX 256
#define REC_TERM_MSG_MAX 1024 /* a terminated worker's message (its log's tail): kept up to 1 KiB */
#define REC_IP_MAX 48          /* an IPv4 or IPv6 address (INET6_ADDRSTRLEN) */
#define REC_KUEUE_PROBE_S 60   /* a queued job on a cluster without Kueue: look again then */

enum rec_pod_phase { REC_POD_PENDING = 0, REC_POD_RUNNING, REC_POD_SUCCEEDED, REC_POD_FAILED,
                     REC_POD_UNKNOWN };

/* What reconcile needs to know about one observed pod (the informer keeps only these fields). */
struct rec_pod {
    char name[RENDER_NAME_MAX];
    char uid[REC_UID_MAX];
    char owner[REC_UID_MAX]; /* the uid of its controller ownerReference; "" when none */
    int index;   /* gantry.dev/replica-index; -1 when missing or not a number */
    int restart; /* gantry.dev/restart-count; -1 when missing or not a number */
    /* gantry.dev/replicas: the gang size it was made for (an elastic job's replicas change);
     * -1 when missing, 0 never (pods of operators before it: taken as the job's replicas) */
    int replicas;
    bool standby; /* gantry.dev/standby "true": a place held for an elastic job's worker */
    enum rec_pod_phase phase;
    bool ready;       /* condition Ready is True */
    bool terminating; /* metadata.deletionTimestamp is set */
    /* condition DisruptionTarget=True: the pod is being stopped by the cluster, not by a fault
     * of its own (an eviction: kubectl drain, node pressure, a taint; preemption by the
     * scheduler); its reason (EvictionByEvictionAPI, PreemptionByScheduler, ...) */
    bool disrupted;
    char disruption[REC_REASON_MAX];
    int exit_code;    /* the worker container's exit code once terminated, else -1 */
    char reason[REC_REASON_MAX]; /* status.reason (Evicted, ...) or the terminated reason */
    /* Why a pod that should run does not: PodScheduled=False (Unschedulable: e.g. a missing
     * claim) or the worker container waiting on ErrImagePull, ImagePullBackOff,
     * InvalidImageName, CreateContainerConfigError, CreateContainerError. "" when none. */
    char problem[REC_REASON_MAX];
    char problem_msg[REC_PROBLEM_MSG_MAX];
    /* The worker container's terminated message: /dev/termination-log, or with
     * FallbackToLogsOnError the tail of its log; its last REC_TERM_MSG_MAX-1 bytes. "" when none. */
    char message[REC_TERM_MSG_MAX];
    bool message_truncated; /* the message was longer: message is its tail */
    char ip[REC_IP_MAX];    /* status.podIP, "" when none (progress.c polls rank 0 there) */
};

/* A 128-bit digest of s (two FNV-1a 64 passes with different bases) as 32 hex digits: detects
 * a changed config.json without keeping the text. Not cryptographic. */
#define REC_DIGEST_LEN 33
void rec_digest(const char *s, char out[REC_DIGEST_LEN]);

/* Reads a Pod object (borrowed). 0, or OP_EPARSE when metadata.name is missing or empty. */
int rec_pod_from_json(const json_t *pod, struct rec_pod *out);

/* Whether pod belongs to the job with uid job_uid: controlled by it, or by nothing ("" matches
 * any, as a job without a uid does). Reconcile and the progress poller use the same rule. */
bool rec_pod_owned(const struct rec_pod *pod, const char *job_uid);

struct rec_input {
    const struct tj *job;
    const struct rec_pod *pods; /* the pods labelled gantry.dev/job-name=<job> */
    size_t npods;
    bool have_service, have_configmap, have_secret;
    const char *configmap_data; /* observed data["config.json"], or NULL */
    /* Or only its rec_digest() (what the operator's cache keeps), used when configmap_data is
     * NULL; NULL too: the ConfigMap has no config.json. */
    const char *configmap_digest;
    bool expectations_met;      /* every create/delete we issued has been observed */
    time_t now;
    const char *token; /* a fresh random token, used only if the Secret must be created */
    /* Training progress (progress.h), read from rank 0's /progress by the poller:
     *   progress          what status.progress becomes (borrowed); NULL keeps the observed one
     *   progress_restart  the gang (restart count) of the rank-0 pod the clock below belongs
     *                     to; -1 when there is no clock (no running rank 0 seen)
     *   progress_since    when that gang's step last advanced, or when its rank 0 was first seen
     *                     running; 0 unknown
     *   progress_advanced the step advanced at least once in that gang */
    const json_t *progress;
    int progress_restart;
    time_t progress_since;
    bool progress_advanced;
    /* Kueue: whether the API server serves kueue.x-k8s.io/v1beta2 Workloads (the operator
     * watches them then; without, a queued job asks for a timer of REC_KUEUE_PROBE_S, at which
     * the executor looks for Kueue again), and the job's Workloads (labelled gantry.dev/job-name=<job>: a JSON
     * array, borrowed; NULL: none) with metadata, spec and status. */
    bool kueue_served;
    const json_t *workloads;
};

enum rec_verb { REC_CREATE = 0, REC_UPDATE, REC_DELETE };
/* REC_WORKLOAD: the gang's scheduling.k8s.io Workload; REC_KUEUE: the job's Kueue Workload
 * (kueue.x-k8s.io), whose update is a merge patch of its status (obj, with
 * metadata.resourceVersion as the precondition). */
enum rec_kind { REC_POD = 0, REC_SERVICE, REC_CONFIGMAP, REC_SECRET, REC_JOB, REC_WORKLOAD,
                REC_KUEUE };

#define REC_OBJ_NAME_MAX 254 /* any object's name: a DNS subdomain (253), a Kueue Workload's */

struct rec_action {
    enum rec_verb verb;
    enum rec_kind kind;
    char name[REC_OBJ_NAME_MAX];
    char uid[REC_UID_MAX]; /* deletes of pods: precondition, so a replacement is never hit */
    int batch;             /* pod creates: slow-start batch 0, 1, 2, ... */
    json_t *obj;           /* create/update: the object (owned by the result) */
};

struct rec_event {
    bool warning;
    char reason[REC_REASON_MAX];
    char message[COND_MESSAGE_MAX];
};

struct rec_result {
    struct rec_action *actions;
    size_t nactions;
    json_t *status;      /* the new .status (owned by the result) */
    bool status_changed; /* differs from the observed status: write it */
    long long requeue_after_s; /* -1: no timer needed (events will wake us) */
    struct rec_event events[REC_EVENTS_MAX];
    int nevents;
    /* Kueue admitted the job: the ResourceFlavors of its pod set ({resource: flavor}, owned),
     * whose nodeLabels and tolerations the executor adds to the pods it creates; else NULL. */
    json_t *kueue_flavors;
};

/* The restart count R of the current gang: the higher of status.restarts and the pods' highest
 * gantry.dev/restart-count label (a lost or reset status cannot reset the restart budget). */
int rec_restarts(const struct rec_input *in);

/* Computes the result for a valid job. 0 always today; the result must be cleaned up. */
int rec_reconcile(const struct rec_input *in, struct rec_result *out)
    __attribute__((warn_unused_result));

/* For a job whose spec failed tj_parse(): no actions; status keeps its phase (Pending when
 * none) and gets Created=False, reason InvalidSpec, with the validation message, so the user sees
 * why in `kubectl describe` instead of a crash loop. Fixing the spec clears it. */
void rec_invalid(const struct tj *job, const char *why, time_t now, struct rec_result *out);

void rec_result_cleanup(struct rec_result *r);

const char *rec_verb_str(enum rec_verb v);
const char *rec_kind_str(enum rec_kind k);

#endif /* GANTRY_REC_H */
