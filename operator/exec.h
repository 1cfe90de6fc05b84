/*
 * exec.h - the controller around the pure reconcile: expectations, syncing one TrainingJob, and
 * the executor that applies a rec_result through the Kubernetes client.
 *
 * exec_sync(key) reads the job and its children from the informer caches, runs rec_reconcile()
 * (or rec_invalid() for a spec that fails tj_parse()), and applies the result:
 *   1. the status, once, through PUT .../status with the job's resourceVersion; a 409 Conflict
 *      means our read was stale: the job is read fresh from the API and reconciled again (at most
 *      EXEC_CONFLICT_RETRIES times);
 *   2. the actions in order: deletes (pods with a UID precondition; 404 and a failed precondition
 *      count as done), Service/ConfigMap/Secret creates (409 AlreadyExists: adopted), the
 *      gang's Workload (409: adopted when the job controls it and its minCount is replicas,
 *      replaced when ours with another minCount; failed, as when the API server does not serve
 *      Workloads: no pod is created in this pass, and the Event says what to enable), the
 *      ConfigMap update (merge patch of data), pod creates batch by batch, the pods of a batch in
 *      parallel (EXEC_PARALLEL connections; slow start: a batch with an error stops the rest, as
 *      the Job controller does), the TrainingJob delete (TTL);
 *   3. Events (events.k8s.io/v1, de-duplicated by the recorder) for rec's transitions and for
 *      failed actions; a failure to record is only logged;
 *   4. a timer (queue_add_after) when rec asks for one.
 * Expectations (after the ReplicaSet/Job controllers): before issuing N pod creates and M
 * deletes the job's key expects them; the pod informer's add/delete handlers lower the counts;
 * rec creates nothing for a job whose expectations are not met, so a cache that lags behind our
 * own writes never makes duplicates. A failed call lowers its own expectation; expectations older
 * than EXEC_EXPECT_TTL_S are dropped (a lost watch event cannot wedge a job).
 *
 * Threads: struct exec_shared is shared by all workers (its parts are thread-safe); each worker
 * has its own struct exec_worker with its own kube_client (clients are not thread-safe).
 */
#ifndef GANTRY_EXEC_H
#define GANTRY_EXEC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "operator/kube/event.h"
#include "operator/kube/informer.h"
#include "operator/kube/kube.h"
#include "operator/kube/queue.h"
#include "operator/rec.h"

#define EXEC_EXPECT_TTL_S 300
#define EXEC_CONFLICT_RETRIES 3
#define EXEC_PARALLEL 4 /* pod creates in flight at once within a slow-start batch */
#define EXEC_COMPONENT "gantry-operator"

/* ---- expectations: thread-safe */
struct exec_expect;
struct exec_expect *exec_expect_new(void);
void exec_expect_free(struct exec_expect *e);
/* Adds to what the job key expects to observe. */
void exec_expect_raise(struct exec_expect *e, const char *key, int adds, int dels, time_t now);
/* One pod add/delete observed (or known never to come); counts do not go below 0. */
void exec_expect_lower(struct exec_expect *e, const char *key, int adds, int dels);
/* Pod deletes are tracked by UID (after the ReplicaSet controller), so deleting a pod twice
 * (a cache that has not yet seen the first delete's deletionTimestamp) expects one delete event,
 * not two. raise_del adds uid to what key waits for (no UID: counts as one delete);
 * observe_del is the pod's delete event, or a delete that found it gone (404) or failed; a uid
 * not tracked lowers the UID-less count instead. */
void exec_expect_raise_del(struct exec_expect *e, const char *key, const char *uid, time_t now);
void exec_expect_observe_del(struct exec_expect *e, const char *key, const char *uid);
/* True when nothing is pending for key, or what is pending is older than EXEC_EXPECT_TTL_S. */
bool exec_expect_met(struct exec_expect *e, const char *key, time_t now);
void exec_expect_forget(struct exec_expect *e, const char *key);

/* ---- which cached pods belong to which job ("ns/job" -> set of "ns/pod"), kept by the pod
 * informer's handlers so a sync reads its own pods, not every cached pod. Thread-safe. */
struct exec_index;
struct exec_index *exec_index_new(void);
void exec_index_free(struct exec_index *x);
void exec_index_put(struct exec_index *x, const char *job, const char *pod);
void exec_index_del(struct exec_index *x, const char *job, const char *pod);
/* The pod keys of job: a new NULL-terminated array of new strings (free each, then the array);
 * *n gets the count. */
char **exec_index_get(struct exec_index *x, const char *job, size_t *n);

/* ---- counters, for logs and /metrics (ops.h) */
#define EXEC_SYNC_BUCKETS 12
/* Upper bounds (seconds) of the reconcile latency histogram; the last bucket is +Inf. */
extern const double exec_sync_bounds[EXEC_SYNC_BUCKETS];
struct exec_stats {
    atomic_long syncs, sync_errors, status_writes, conflicts;
    atomic_long pods_created, pods_deleted, gang_restarts, gang_disruptions, gang_resizes, events;
    atomic_long sync_bucket[EXEC_SYNC_BUCKETS + 1]; /* not cumulative; [N] is +Inf */
    atomic_long sync_usec_sum;
};
/* Records one exec_sync() that took seconds. */
void exec_stats_observe(struct exec_stats *s, double seconds);

/* What every worker shares. The informers are owned by the caller (main.c). */
struct progress;

struct exec_shared {
    struct informer *jobs;       /* TrainingJobs, projected (exec_job_fields) */
    struct informer *pods;       /* pods labelled gantry.dev/job-name, typed (exec_pod_transform) */
    struct informer *services;   /* labelled gantry.dev/job-name, identity only */
    struct informer *configmaps; /* labelled, with data */
    struct informer *secrets;    /* labelled, identity only: tokens are never cached */
    /* Kueue Workloads labelled gantry.dev/job-name (exec_kueue_fields), once the API server
     * serves kueue.x-k8s.io/v1beta2 and the operator may list them (kueue_served; the informer
     * is set before the flag); NULL before. exec_kueue_start() sets them. */
    struct informer *workloads;
    atomic_bool kueue_served;
    atomic_llong kueue_next_probe; /* time(): when a queued job may look for Kueue again */
    const char *watch_ns;          /* the operator's --namespace ("": all); borrowed */
    long sync_timeout_s;           /* how long an informer may take to list (--sync-timeout) */
    struct queue *queue;
    struct exec_expect *expect;
    struct exec_index *pod_index;  /* NULL: scan every cached pod (tests) */
    struct event_recorder *events; /* NULL: no Events (tests) */
    struct progress *progress;     /* rank 0's progress (progress.h); NULL: none (tests) */
    struct exec_stats stats;
};

/* Kueue: when the API server serves kueue.x-k8s.io/v1beta2 Workloads and lets the operator list
 * them, starts the watch on those labelled with a job's name (a change wakes the job,
 * exec_on_child) and sets sh->kueue_served. Without them, queued jobs wait with an Event saying
 * why (rec.h), and a sync of such a job calls this again at most every EXEC_KUEUE_PROBE_S (rec
 * asks for a timer of that): Kueue installed after the operator is found without a restart.
 * true when served. Thread-safe: one caller probes at a time, the others return false. */
#define EXEC_KUEUE_PROBE_S REC_KUEUE_PROBE_S
bool exec_kueue_start(struct exec_shared *sh, const struct kube_config *cfg,
                      const struct kube_client_opts *copts);

/*
 * The pod informer's typed record (informer_transform, like client-go's SetTransform): what
 * struct rec_pod holds plus the resourceVersion, job label and IP, packed into one allocation of
 * ~100 bytes for a running pod (strings NUL-terminated one after another) instead of the pod's
 * JSON (~10 KB as a tree). Namespace and name are the informer's key ("ns/name"), not repeated.
 * Immutable once made.
 */
enum exec_pod_str {
    EXEC_POD_UID, EXEC_POD_RV, EXEC_POD_JOB, EXEC_POD_IP, EXEC_POD_REASON, EXEC_POD_PROBLEM,
    EXEC_POD_PROBLEM_MSG, EXEC_POD_MESSAGE, EXEC_POD_OWNER, EXEC_POD_DISRUPTION, EXEC_POD_NSTR
};
struct exec_pod;
/* A new record from a Pod object (borrowed), or NULL when it has no name. ud unused. */
void *exec_pod_make(void *ud, const json_t *pod);
void exec_pod_free(void *rec);
/* One of the record's strings ("" when absent); borrowed from rec. */
const char *exec_pod_str(const struct exec_pod *p, enum exec_pod_str which);
/* The record of the pod "ns/name" (key) as rec reads it. */
void exec_pod_view(const char *key, const struct exec_pod *p, struct rec_pod *out);
/* The transform to install on the pod informer (make = exec_pod_make, free = exec_pod_free). */
extern const struct informer_transform exec_pod_transform;
/* The cached pod "ns/name" (sh->pods, typed) into out; false when not cached. Thread-safe. */
bool exec_pod_get(struct exec_shared *sh, const char *key, struct rec_pod *out);

/*
 * The children's informers (Services, ConfigMaps, Secrets) keep typed records too: the
 * resourceVersion, the job label and, for a ConfigMap, rec_digest() of data["config.json"] (not
 * the text); namespace and name are the key.
 */
enum exec_child_str { EXEC_CHILD_JOB, EXEC_CHILD_DIGEST, EXEC_CHILD_RV, EXEC_CHILD_NSTR };
struct exec_child;
void *exec_child_make(void *ud, const json_t *obj); /* NULL when it has no name */
void exec_child_free(void *rec);
/* "" when absent (EXEC_CHILD_DIGEST: no config.json, see exec_child_has_config()). */
const char *exec_child_str(const struct exec_child *c, enum exec_child_str which);
bool exec_child_has_config(const struct exec_child *c);
extern const struct informer_transform exec_child_transform;

/* The fields the pod informer keeps (NULL-terminated), everything rec_pod_from_json() reads. */
extern const char *const exec_pod_fields[];
extern const char *const exec_job_fields[];
extern const char *const exec_configmap_fields[];
extern const char *const exec_child_fields[];
/* What the Kueue Workload informer keeps: labels, owners, deletion, generation, queue, status. */
extern const char *const exec_kueue_fields[];

struct exec_worker {
    struct exec_shared *sh;
    struct kube_client *kc; /* owned by the worker's creator */
    /* To open the extra connections of parallel creates (NULL: creates run one at a time).
     * Borrowed; each pool client has its own copts rate limit. */
    const struct kube_config *cfg;
    const struct kube_client_opts *copts;
    struct kube_client *pool[EXEC_PARALLEL - 1]; /* opened on first use; exec_worker_cleanup() */
};

/* Closes the worker's extra connections (not kc); the next parallel batch opens them again.
 * gantry-operator calls it whenever the queue drains: an idle TLS connection holds ~100 KiB. */
void exec_worker_cleanup(struct exec_worker *w);

/*
 * Reconciles the TrainingJob "ns/name" once. 0 when done (the caller forgets the key's backoff),
 * else an OP_E* (the caller requeues with backoff). A job no longer in the cache is forgotten.
 */
int exec_sync(struct exec_worker *w, const char *key) __attribute__((warn_unused_result));

/* Applies r to the job (obj: its object with metadata.resourceVersion, borrowed). Returns 0,
 * OP_ECONFLICT when the status write found a newer job, or the first other error. */
int exec_apply(struct exec_worker *w, const json_t *obj, const struct tj *tj,
               const struct rec_result *r) __attribute__((warn_unused_result));

/* Informer handlers for main.c to install: TrainingJobs enqueue their key; children enqueue
 * their job's key (label gantry.dev/job-name); pod handlers also lower expectations.
 * ud is the struct exec_shared. */
void exec_on_job(void *ud, json_t *obj);
void exec_on_job_update(void *ud, json_t *old_obj, json_t *new_obj);
void exec_on_child(void *ud, json_t *obj);
void exec_on_child_update(void *ud, json_t *old_obj, json_t *new_obj);
/* The same for the children's typed informers (struct exec_child records). */
void exec_on_child_rec(void *ud, const char *key, const void *rec);
void exec_on_child_rec_update(void *ud, const char *key, const void *old_rec, const void *new_rec);
/* Pod handlers take records (struct exec_pod, informer_rec_handlers). */
void exec_on_pod_add(void *ud, const char *key, const void *rec);
void exec_on_pod_update(void *ud, const char *key, const void *old_rec, const void *new_rec);
void exec_on_pod_delete(void *ud, const char *key, const void *rec);

#endif /* GANTRY_EXEC_H */
