#include "operator/exec.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/xalloc.h"
#include "operator/kube/log.h"
#include "operator/kube/strmap.h"
#include "operator/progress.h"

const char *const exec_pod_fields[] = {
    "metadata.labels", "metadata.deletionTimestamp", "metadata.ownerReferences", "status.phase",
    "status.reason",
    "status.conditions", "status.containerStatuses", "status.podIP", NULL,
};

/* ---------------------------------------------------------------------------------------------
 * The pod record
 * ------------------------------------------------------------------------------------------- */

struct exec_pod {
    int32_t index, restart, replicas, exit_code;
    uint8_t phase;
    uint8_t flags; /* POD_READY, POD_TERMINATING, POD_TRUNCATED, POD_DISRUPTED, POD_STANDBY */
    char s[];      /* the EXEC_POD_NSTR strings, NUL-terminated, one after another, in order */
};

enum { POD_READY = 1, POD_TERMINATING = 2, POD_TRUNCATED = 4, POD_DISRUPTED = 8,
       POD_STANDBY = 16 };

void *exec_pod_make(void *ud, const json_t *pod)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *labels = json_object_get(meta, "labels");
    struct rec_pod *rp = xcalloc(1, sizeof(*rp));
    const char *str[EXEC_POD_NSTR];
    size_t len[EXEC_POD_NSTR], total = 0;
    struct exec_pod *p = NULL;

    (void)ud;
    if (rec_pod_from_json(pod, rp) != 0)
        goto out;
    str[EXEC_POD_UID] = rp->uid;
    str[EXEC_POD_RV] = json_string_value(json_object_get(meta, "resourceVersion"));
    str[EXEC_POD_JOB] = json_string_value(json_object_get(labels, RENDER_LABEL_JOB));
    str[EXEC_POD_IP] = rp->ip;
    str[EXEC_POD_REASON] = rp->reason;
    str[EXEC_POD_PROBLEM] = rp->problem;
    str[EXEC_POD_PROBLEM_MSG] = rp->problem_msg;
    str[EXEC_POD_MESSAGE] = rp->message;
    str[EXEC_POD_OWNER] = rp->owner;
    str[EXEC_POD_DISRUPTION] = rp->disruption;
    for (int i = 0; i < EXEC_POD_NSTR; i++) {
        if (!str[i])
            str[i] = "";
        len[i] = strnlen(str[i], 1024);
        total += len[i] + 1;
    }
    p = xmalloc(sizeof(*p) + total); /* ~100 bytes for a running pod */
    p->index = rp->index;
    p->restart = rp->restart;
    p->replicas = rp->replicas;
    p->exit_code = rp->exit_code;
    p->phase = (uint8_t)rp->phase;
    p->flags = (uint8_t)((rp->ready ? POD_READY : 0) | (rp->terminating ? POD_TERMINATING : 0) |
                         (rp->message_truncated ? POD_TRUNCATED : 0) |
                         (rp->disrupted ? POD_DISRUPTED : 0) | (rp->standby ? POD_STANDBY : 0));
    total = 0;
    for (int i = 0; i < EXEC_POD_NSTR; i++) {
        memcpy(p->s + total, str[i], len[i]);
        p->s[total + len[i]] = '\0';
        total += len[i] + 1;
    }
out:
    free(rp);
    return p;
}

void exec_pod_free(void *rec)
{
    free(rec);
}

const char *exec_pod_str(const struct exec_pod *p, enum exec_pod_str which)
{
    const char *s = p->s;

    if ((unsigned)which >= EXEC_POD_NSTR)
        return "";
    for (int i = 0; i < (int)which; i++) /* a few short strings: a scan beats an offset table */
        s += strlen(s) + 1;
    return s;
}

void exec_pod_view(const char *key, const struct exec_pod *p, struct rec_pod *out)
{
    const char *slash = strchr(key, '/');

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", slash ? slash + 1 : key);
    snprintf(out->uid, sizeof(out->uid), "%s", exec_pod_str(p, EXEC_POD_UID));
    snprintf(out->owner, sizeof(out->owner), "%s", exec_pod_str(p, EXEC_POD_OWNER));
    out->index = p->index;
    out->restart = p->restart;
    out->replicas = p->replicas;
    out->phase = (enum rec_pod_phase)p->phase;
    out->ready = p->flags & POD_READY;
    out->terminating = p->flags & POD_TERMINATING;
    out->exit_code = p->exit_code;
    snprintf(out->reason, sizeof(out->reason), "%s", exec_pod_str(p, EXEC_POD_REASON));
    snprintf(out->problem, sizeof(out->problem), "%s", exec_pod_str(p, EXEC_POD_PROBLEM));
    snprintf(out->problem_msg, sizeof(out->problem_msg), "%s",
             exec_pod_str(p, EXEC_POD_PROBLEM_MSG));
    snprintf(out->message, sizeof(out->message), "%s", exec_pod_str(p, EXEC_POD_MESSAGE));
    out->message_truncated = p->flags & POD_TRUNCATED;
    out->disrupted = p->flags & POD_DISRUPTED;
    out->standby = p->flags & POD_STANDBY;
    snprintf(out->disruption, sizeof(out->disruption), "%s",
             exec_pod_str(p, EXEC_POD_DISRUPTION));
    snprintf(out->ip, sizeof(out->ip), "%s", exec_pod_str(p, EXEC_POD_IP));
}

static const char *pod_rv(const void *rec)
{
    return exec_pod_str(rec, EXEC_POD_RV);
}

const struct informer_transform exec_pod_transform = {exec_pod_make, exec_pod_free, NULL, pod_rv};

static void view_cb(void *ud, const char *key, const void *rec)
{
    exec_pod_view(key, rec, ud);
}

bool exec_pod_get(struct exec_shared *sh, const char *key, struct rec_pod *out)
{
    return sh->pods && informer_peek(sh->pods, key, view_cb, out);
}

/* ---- children */

struct exec_child {
    bool has_config;
    char s[]; /* the EXEC_CHILD_NSTR strings, NUL-terminated, one after another, in order */
};

void *exec_child_make(void *ud, const json_t *obj)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *cfg = json_string_value(
        json_object_get(json_object_get(obj, "data"), RENDER_CONFIG_FILE));
    const char *str[EXEC_CHILD_NSTR];
    char dg[REC_DIGEST_LEN] = "";
    size_t len[EXEC_CHILD_NSTR], total = 0;
    struct exec_child *c;

    (void)ud;
    str[EXEC_CHILD_JOB] =
        json_string_value(json_object_get(json_object_get(meta, "labels"), RENDER_LABEL_JOB));
    if (cfg)
        rec_digest(cfg, dg);
    str[EXEC_CHILD_DIGEST] = dg;
    str[EXEC_CHILD_RV] = json_string_value(json_object_get(meta, "resourceVersion"));
    if (!json_string_value(json_object_get(meta, "name")))
        return NULL;
    for (int i = 0; i < EXEC_CHILD_NSTR; i++) {
        if (!str[i])
            str[i] = "";
        len[i] = strnlen(str[i], 1024);
        total += len[i] + 1;
    }
    c = xmalloc(sizeof(*c) + total);
    c->has_config = cfg != NULL;
    total = 0;
    for (int i = 0; i < EXEC_CHILD_NSTR; i++) {
        memcpy(c->s + total, str[i], len[i]);
        c->s[total + len[i]] = '\0';
        total += len[i] + 1;
    }
    return c;
}

void exec_child_free(void *rec)
{
    free(rec);
}

const char *exec_child_str(const struct exec_child *c, enum exec_child_str which)
{
    const char *s = c->s;

    if ((unsigned)which >= EXEC_CHILD_NSTR)
        return "";
    for (int i = 0; i < (int)which; i++)
        s += strlen(s) + 1;
    return s;
}

bool exec_child_has_config(const struct exec_child *c)
{
    return c->has_config;
}

static const char *child_rv(const void *rec)
{
    return exec_child_str(rec, EXEC_CHILD_RV);
}

const struct informer_transform exec_child_transform = {exec_child_make, exec_child_free, NULL,
                                                        child_rv};

const double exec_sync_bounds[EXEC_SYNC_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,   0.25,   0.5,   1,    2.5,   10};

void exec_stats_observe(struct exec_stats *s, double seconds)
{
    int b = 0;

    while (b < EXEC_SYNC_BUCKETS && seconds > exec_sync_bounds[b])
        b++;
    atomic_fetch_add(&s->sync_bucket[b], 1);
    atomic_fetch_add(&s->sync_usec_sum, (long)(seconds * 1e6));
}
/* metadata.labels: the Kueue queue and priority labels (tj.h) */
const char *const exec_job_fields[] = {"metadata.generation", "metadata.deletionTimestamp",
                                       "metadata.labels", "spec", "status", NULL};
const char *const exec_configmap_fields[] = {"metadata.labels", "data", NULL};
const char *const exec_child_fields[] = {"metadata.labels", NULL};
const char *const exec_kueue_fields[] = {"metadata.labels", "metadata.ownerReferences",
                                         "metadata.deletionTimestamp", "metadata.generation",
                                         "spec.queueName", "spec.active", "status", NULL};

/* ---------------------------------------------------------------------------------------------
 * Expectations
 * ------------------------------------------------------------------------------------------- */

struct expectation {
    int adds, dels;     /* dels: deletes without a UID */
    struct strmap uids; /* UIDs of pods we asked to delete (value: non-NULL marker) */
    time_t at;          /* when last raised */
};

struct exec_expect {
    pthread_mutex_t mu;
    struct strmap m; /* key -> struct expectation * */
};

static struct expectation *expectation_get(struct exec_expect *e, const char *key)
{
    struct expectation *x = strmap_get(&e->m, key);

    if (!x) {
        x = xcalloc(1, sizeof(*x));
        strmap_init(&x->uids);
        strmap_put(&e->m, key, x);
    }
    return x;
}

static void expectation_free(void *v)
{
    struct expectation *x = v;

    if (!x)
        return;
    strmap_cleanup(&x->uids, NULL);
    free(x);
}

struct exec_expect *exec_expect_new(void)
{
    struct exec_expect *e = xcalloc(1, sizeof(*e));

    pthread_mutex_init(&e->mu, NULL);
    strmap_init(&e->m);
    return e;
}

void exec_expect_free(struct exec_expect *e)
{
    if (!e)
        return;
    strmap_cleanup(&e->m, expectation_free);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void exec_expect_raise(struct exec_expect *e, const char *key, int adds, int dels, time_t now)
{
    struct expectation *x;

    if (adds <= 0 && dels <= 0)
        return;
    pthread_mutex_lock(&e->mu);
    x = expectation_get(e, key);
    x->adds += adds > 0 ? adds : 0;
    x->dels += dels > 0 ? dels : 0;
    x->at = now;
    pthread_mutex_unlock(&e->mu);
}

void exec_expect_lower(struct exec_expect *e, const char *key, int adds, int dels)
{
    struct expectation *x;

    pthread_mutex_lock(&e->mu);
    x = strmap_get(&e->m, key);
    if (x) {
        x->adds = x->adds > adds ? x->adds - adds : 0;
        x->dels = x->dels > dels ? x->dels - dels : 0;
    }
    pthread_mutex_unlock(&e->mu);
}

void exec_expect_raise_del(struct exec_expect *e, const char *key, const char *uid, time_t now)
{
    struct expectation *x;

    if (!uid || !*uid) {
        exec_expect_raise(e, key, 0, 1, now);
        return;
    }
    pthread_mutex_lock(&e->mu);
    x = expectation_get(e, key);
    strmap_put(&x->uids, uid, x); /* a second delete of the same pod expects nothing more */
    x->at = now;
    pthread_mutex_unlock(&e->mu);
}

void exec_expect_observe_del(struct exec_expect *e, const char *key, const char *uid)
{
    struct expectation *x;

    pthread_mutex_lock(&e->mu);
    x = strmap_get(&e->m, key);
    if (x && uid && *uid && strmap_has(&x->uids, uid))
        strmap_del(&x->uids, uid);
    else if (x) /* not one we track by UID: counts against the UID-less deletes */
        x->dels = x->dels > 0 ? x->dels - 1 : 0;
    pthread_mutex_unlock(&e->mu);
}

bool exec_expect_met(struct exec_expect *e, const char *key, time_t now)
{
    struct expectation *x;
    bool met;

    pthread_mutex_lock(&e->mu);
    x = strmap_get(&e->m, key);
    met = !x || (x->adds == 0 && x->dels == 0 && strmap_len(&x->uids) == 0) ||
          now - x->at >= EXEC_EXPECT_TTL_S;
    pthread_mutex_unlock(&e->mu);
    return met;
}

void exec_expect_forget(struct exec_expect *e, const char *key)
{
    pthread_mutex_lock(&e->mu);
    expectation_free(strmap_del(&e->m, key));
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------------------------------------
 * Pod index
 * ------------------------------------------------------------------------------------------- */

/*
 * job key -> struct podset: the names of its pods (the pod's namespace is the job's), NUL-
 * terminated one after another in one allocation (~20 bytes a pod instead of a map entry).
 */
struct podset {
    size_t len; /* bytes used in names */
    char names[];
};

struct exec_index {
    pthread_mutex_t mu;
    struct strmap jobs; /* job key -> struct podset * */
};

struct exec_index *exec_index_new(void)
{
    struct exec_index *x = xcalloc(1, sizeof(*x));

    pthread_mutex_init(&x->mu, NULL);
    strmap_init(&x->jobs);
    return x;
}

void exec_index_free(struct exec_index *x)
{
    if (!x)
        return;
    strmap_cleanup(&x->jobs, free);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

/* The pod's name when pod is "<job's namespace>/<name>", else NULL. */
static const char *pod_name_in(const char *job, const char *pod)
{
    const char *slash = strchr(job, '/');
    size_t nsl = slash ? (size_t)(slash - job) + 1 : 0;

    return nsl && strncmp(job, pod, nsl) == 0 && pod[nsl] ? pod + nsl : NULL;
}

/* Offset of name in set, or -1. */
static long podset_find(const struct podset *set, const char *name)
{
    for (size_t off = 0; set && off < set->len; off += strlen(set->names + off) + 1)
        if (strcmp(set->names + off, name) == 0)
            return (long)off;
    return -1;
}

void exec_index_put(struct exec_index *x, const char *job, const char *pod)
{
    const char *name = pod_name_in(job, pod);
    struct podset *set;
    size_t n;

    if (!name)
        return; /* a pod is its job's namespace's */
    n = strlen(name) + 1;
    pthread_mutex_lock(&x->mu);
    set = strmap_get(&x->jobs, job);
    if (podset_find(set, name) < 0) {
        size_t len = set ? set->len : 0;
        set = xrealloc(set, sizeof(*set) + len + n);
        memcpy(set->names + len, name, n);
        set->len = len + n;
        strmap_put(&x->jobs, job, set);
    }
    pthread_mutex_unlock(&x->mu);
}

void exec_index_del(struct exec_index *x, const char *job, const char *pod)
{
    const char *name = pod_name_in(job, pod);
    struct podset *set;
    long off;

    if (!name)
        return;
    pthread_mutex_lock(&x->mu);
    set = strmap_get(&x->jobs, job);
    off = podset_find(set, name);
    if (off >= 0) {
        size_t n = strlen(name) + 1;
        memmove(set->names + off, set->names + off + n, set->len - (size_t)off - n);
        set->len -= n;
        if (set->len == 0)
            free(strmap_del(&x->jobs, job));
        else
            strmap_put(&x->jobs, job, xrealloc(set, sizeof(*set) + set->len));
    }
    pthread_mutex_unlock(&x->mu);
}

char **exec_index_get(struct exec_index *x, const char *job, size_t *n)
{
    const char *slash = strchr(job, '/');
    int nsl = slash ? (int)(slash - job) : 0;
    struct podset *set;
    char **keys;
    size_t i = 0, count = 0, off;

    pthread_mutex_lock(&x->mu);
    set = strmap_get(&x->jobs, job);
    for (off = 0; set && off < set->len; off += strlen(set->names + off) + 1)
        count++;
    keys = xcalloc(count + 1, sizeof(*keys));
    for (off = 0; set && off < set->len; off += strlen(set->names + off) + 1) {
        size_t klen = (size_t)nsl + 1 + strlen(set->names + off) + 1;
        keys[i] = xmalloc(klen);
        snprintf(keys[i++], klen, "%.*s/%s", nsl, job, set->names + off);
    }
    pthread_mutex_unlock(&x->mu);
    *n = i;
    return keys;
}

/* ---------------------------------------------------------------------------------------------
 * Informer handlers
 * ------------------------------------------------------------------------------------------- */

static const char *meta_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* "ns/<gantry.dev/job-name label>" of a child into out; false when it has no such label. */
static bool owner_key(const json_t *obj, char *out, size_t n)
{
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, RENDER_LABEL_JOB));
    const char *ns = meta_str(obj, "namespace");

    if (!job || !ns)
        return false;
    return snprintf(out, n, "%s/%s", ns, job) < (int)n;
}

void exec_on_job(void *ud, json_t *obj)
{
    struct exec_shared *sh = ud;
    char key[256];

    if (kube_object_key(obj, key, sizeof(key)) == 0)
        queue_add(sh->queue, key);
}

void exec_on_job_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    exec_on_job(ud, new_obj);
}

void exec_on_child(void *ud, json_t *obj)
{
    struct exec_shared *sh = ud;
    char key[256];

    if (owner_key(obj, key, sizeof(key)))
        queue_add(sh->queue, key);
}

void exec_on_child_update(void *ud, json_t *old_obj, json_t *new_obj)
{
    exec_on_child(ud, new_obj);
}

/* "ns/<job>" for the object "ns/name" (key) labelled with job into out; false when none. */
static bool job_key(const char *key, const char *job, char *out, size_t n)
{
    const char *slash = strchr(key, '/');

    return slash && *job && snprintf(out, n, "%.*s/%s", (int)(slash - key), key, job) < (int)n;
}

void exec_on_child_rec(void *ud, const char *key, const void *rec)
{
    struct exec_shared *sh = ud;
    char jkey[256];

    if (job_key(key, exec_child_str(rec, EXEC_CHILD_JOB), jkey, sizeof(jkey)))
        queue_add(sh->queue, jkey);
}

void exec_on_child_rec_update(void *ud, const char *key, const void *old_rec, const void *new_rec)
{
    exec_on_child_rec(ud, key, new_rec);
}

/* "ns/job" of the pod "ns/name" (pkey) into out; false when it has no job label. */
static bool pod_owner_key(const char *pkey, const struct exec_pod *p, char *out, size_t n)
{
    return job_key(pkey, exec_pod_str(p, EXEC_POD_JOB), out, n);
}

/* Keeps the pod index: put on add/update, del on delete. */
static void index_pod(struct exec_shared *sh, const char *job, const char *pkey, bool put)
{
    if (!sh->pod_index)
        return;
    if (put)
        exec_index_put(sh->pod_index, job, pkey);
    else
        exec_index_del(sh->pod_index, job, pkey);
}

void exec_on_pod_add(void *ud, const char *pkey, const void *rec)
{
    struct exec_shared *sh = ud;
    char key[256];

    if (!pod_owner_key(pkey, rec, key, sizeof(key)))
        return;
    index_pod(sh, key, pkey, true);
    exec_expect_lower(sh->expect, key, 1, 0);
    queue_add(sh->queue, key);
}

void exec_on_pod_update(void *ud, const char *pkey, const void *old_rec, const void *new_rec)
{
    struct exec_shared *sh = ud;
    char key[256], old_key[256];
    bool had = pod_owner_key(pkey, old_rec, old_key, sizeof(old_key));

    if (!pod_owner_key(pkey, new_rec, key, sizeof(key))) {
        if (had)
            index_pod(sh, old_key, pkey, false);
        return;
    }
    if (had && strcmp(old_key, key) != 0) /* a relabelled pod moves to its new job */
        index_pod(sh, old_key, pkey, false);
    index_pod(sh, key, pkey, true);
    queue_add(sh->queue, key);
}

void exec_on_pod_delete(void *ud, const char *pkey, const void *rec)
{
    struct exec_shared *sh = ud;
    char key[256];
    const char *uid;

    if (!pod_owner_key(pkey, rec, key, sizeof(key)))
        return;
    index_pod(sh, key, pkey, false);
    uid = exec_pod_str(rec, EXEC_POD_UID);
    exec_expect_observe_del(sh->expect, key, *uid ? uid : NULL);
    queue_add(sh->queue, key);
}

/* ---------------------------------------------------------------------------------------------
 * Applying a result
 * ------------------------------------------------------------------------------------------- */

static int job_path(const struct tj *tj, const char *sub, char *out, size_t n)
{
    return kube_path(out, n, TJ_API_VERSION, "trainingjobs", tj->ns, tj->name, sub);
}

static const char *resource_of(enum rec_kind k)
{
    switch (k) {
    case REC_POD: return "pods";
    case REC_SERVICE: return "services";
    case REC_CONFIGMAP: return "configmaps";
    case REC_SECRET: return "secrets";
    case REC_JOB: return "trainingjobs";
    case REC_WORKLOAD: return "workloads";
    case REC_KUEUE: return "workloads";
    }
    return "?";
}

static const char *api_of(enum rec_kind k)
{
    return k == REC_JOB        ? TJ_API_VERSION
           : k == REC_WORKLOAD ? RENDER_WORKLOAD_API
           : k == REC_KUEUE    ? RENDER_KUEUE_API
                               : "v1";
}

/* Best effort: a failure is logged, never returned. action says what the operator did. */
static void post_event(struct exec_worker *w, const struct tj *tj, bool warning,
                       const char *reason, const char *action, const char *message)
{
    json_t *regarding;
    int rc;

    if (!w->sh->events)
        return;
    regarding = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "apiVersion", TJ_API_VERSION, "kind",
                          TJ_KIND, "metadata", "name", tj->name, "namespace", tj->ns, "uid",
                          tj->uid);
    rc = event_record(w->sh->events, regarding, warning ? "Warning" : "Normal", reason, action,
                      message, NULL);
    if (rc)
        log_warn("Failed to record Event", "{s:s, s:s, s:s}", "trainjob", tj->name, "reason",
                 reason, "error", op_strerror(rc));
    else
        atomic_fetch_add(&w->sh->stats.events, 1);
    json_decref(regarding);
}

static int write_status(struct exec_worker *w, const json_t *obj, const struct tj *tj,
                        const json_t *status)
{
    char path[KUBE_MAX_PATH];
    json_t *body;
    int rc;

    rc = job_path(tj, "status", path, sizeof(path));
    if (rc)
        return rc;
    /* The /status strategy keeps everything of the stored object but status, so identity plus
     * resourceVersion (the precondition) is all the body needs; the cache is projected anyway. */
    body = json_pack("{s:s, s:s, s:O, s:O}", "apiVersion", TJ_API_VERSION, "kind", TJ_KIND,
                     "metadata", json_object_get(obj, "metadata"), "status", status);
    rc = kube_replace(w->kc, path, body, NULL);
    json_decref(body);
    if (rc == 0)
        atomic_fetch_add(&w->sh->stats.status_writes, 1);
    return rc;
}

/* What came of one action; filled by apply_one(), read after a batch's threads are joined. */
struct outcome {
    int rc;
    bool already;                  /* 409 exists / 404 / UID precondition: no watch event coming */
    char message[400]; /* the API's message on failure, or ours (fits COND_MESSAGE_MAX with the
                        * verb, kind and name before it) */
};

/* The Workload <job> exists (a create got 409): it is ours to use when the job controls it and its
 * minCount is the job's replicas. Its spec is immutable, so one of ours with another minCount
 * (replicas changed while suspended; no pod of the job exists then) is deleted and made again.
 * 0 when the job's Workload is in place; else an OP_E* with out->message saying why. */
static int adopt_workload(struct kube_client *kc, const struct tj *tj, const char *path,
                          const struct rec_action *a, struct outcome *out)
{
    char item[KUBE_MAX_PATH];
    json_t *have = NULL;
    const json_t *refs, *ref;
    const char *uid = NULL;
    long long min;
    size_t i;
    int rc;

    rc = kube_path(item, sizeof(item), RENDER_WORKLOAD_API, "workloads", tj->ns, tj->name, NULL);
    if (rc == 0)
        rc = kube_get(kc, item, &have);
    if (rc)
        return rc;
    refs = json_object_get(json_object_get(have, "metadata"), "ownerReferences");
    json_array_foreach(refs, i, ref)
        if (json_is_true(json_object_get(ref, "controller")))
            uid = json_string_value(json_object_get(ref, "uid"));
    if (!uid || strcmp(uid, tj->uid) != 0) {
        snprintf(out->message, sizeof(out->message), "Workload %s exists and is not this job's "
                 "(its controller is %s); rename or delete it, or set "
                 "spec.runPolicy.schedulingPolicy.gang: None", tj->name, uid ? uid : "none");
        json_decref(have);
        return OP_EEXIST;
    }
    min = render_workload_min(have);
    if (min == tj->replicas) {
        out->already = true;
        json_decref(have);
        return 0;
    }
    {
        struct kube_delete_opts d = {
            .propagation_policy = "Background",
            .precondition_uid = json_string_value(
                json_object_get(json_object_get(have, "metadata"), "uid")),
            .grace_period_seconds = -1};
        rc = kube_delete(kc, item, &d, NULL);
    }
    json_decref(have);
    if (rc && rc != OP_ENOTFOUND)
        return rc;
    log_info("Replacing the gang's Workload", "{s:s, s:I, s:i}", "name", tj->name, "minCount",
             min, "replicas", tj->replicas);
    return kube_create(kc, path, a->obj, NULL);
}

/* Why a Workload create got 404, for the Event: the API server serves no Workloads of the version
 * Gantry speaks. Kubernetes 1.36 replaced v1alpha1 with v1alpha2 (a PodGroup object of its own,
 * spec.schedulingGroup on the pod): when discovery lists that, say so rather than ask for gates
 * the cluster may already have on. */
static void workload_unserved(struct kube_client *kc, char *msg, size_t n)
{
    json_t *group = NULL;
    const json_t *versions, *v;
    bool v1alpha2 = false;
    size_t i;

    if (kube_get(kc, "/apis/scheduling.k8s.io", &group) == 0) {
        versions = json_object_get(group, "versions");
        json_array_foreach(versions, i, v) {
            const char *gv = json_string_value(json_object_get(v, "groupVersion"));
            if (gv && strcmp(gv, "scheduling.k8s.io/v1alpha2") == 0)
                v1alpha2 = true;
        }
        json_decref(group);
    }
    if (v1alpha2)
        snprintf(msg, n, "the cluster serves scheduling.k8s.io/v1alpha2 (Kubernetes 1.36 and "
                 "later: PodGroup objects), not the %s Workloads this operator makes for "
                 "spec.runPolicy.schedulingPolicy.gang: Workload; no pod is created, set "
                 "gang: None to run the job pod by pod", RENDER_WORKLOAD_API);
    else
        snprintf(msg, n, "the cluster serves no %s Workloads, which "
                 "spec.runPolicy.schedulingPolicy.gang: Workload needs (Kubernetes 1.35: "
                 "feature gates GenericWorkload and GangScheduling, kube-apiserver "
                 "--runtime-config=%s=true); no pod is created until it does, or set gang: None",
                 RENDER_WORKLOAD_API, RENDER_WORKLOAD_API);
}

/* Neither the label nor the pods name a priority: the cluster's default PriorityClass (the
 * globalDefault one; of several, the lowest value), as Kueue's own integrations take it, or none
 * (priority 0). Listing PriorityClasses forbidden (RBAC without it, e.g. rbac.kueueClusterRead
 * false) is taken as no default, with a warning. 0, or the list's error. */
static int kueue_default_priority(struct kube_client *kc, json_t *spec, struct outcome *out)
{
    json_t *items = NULL;
    const json_t *pc, *best = NULL;
    size_t i;
    int rc = kube_list(kc, "/apis/scheduling.k8s.io/v1/priorityclasses", NULL, &items, NULL);

    if (rc == OP_EFORBIDDEN) {
        log_warn("Cannot list PriorityClasses for the cluster's default priority; the Workload "
                 "gets none", "{s:s}", "hint", "grant list on scheduling.k8s.io priorityclasses");
        return 0;
    }
    if (rc) {
        snprintf(out->message, sizeof(out->message), "listing PriorityClasses for the cluster's "
                 "default priority: %.200s", kube_last_status(kc)->message[0]
                 ? kube_last_status(kc)->message : op_strerror(rc));
        return rc;
    }
    json_array_foreach(items, i, pc) {
        const json_t *v = json_object_get(pc, "value");
        if (json_is_true(json_object_get(pc, "globalDefault")) && json_is_integer(v) &&
            json_is_string(json_object_get(json_object_get(pc, "metadata"), "name")) &&
            (!best || json_integer_value(v) < json_integer_value(json_object_get(best, "value"))))
            best = pc;
    }
    if (best) {
        json_object_set_new(spec, "priorityClassRef",
                            json_pack("{s:s, s:s, s:O}", "group", "scheduling.k8s.io", "kind",
                                      "PriorityClass", "name",
                                      json_object_get(json_object_get(best, "metadata"),
                                                      "name")));
        json_object_set(spec, "priority", json_object_get(best, "value"));
    }
    json_decref(items);
    return 0;
}

/* A Kueue Workload with a priorityClassRef gets the value of its WorkloadPriorityClass (or pod
 * PriorityClass) as spec.priority, what Kueue's queues and preemption order by (Kueue's own job
 * controllers fill it in the same way; no webhook defaults a Workload); one without, the
 * cluster's default (kueue_default_priority). 0, or an OP_E* with out->message. */
static int kueue_priority(struct kube_client *kc, json_t *wl, struct outcome *out)
{
    json_t *spec = json_object_get(wl, "spec"), *wpc = NULL;
    const json_t *ref = json_object_get(spec, "priorityClassRef");
    const char *name = json_string_value(json_object_get(ref, "name"));
    const char *kind = json_string_value(json_object_get(ref, "kind"));
    bool pod = kind && strcmp(kind, "PriorityClass") == 0;
    char path[KUBE_MAX_PATH];
    int rc;

    if (!name)
        return kueue_default_priority(kc, spec, out);
    rc = pod ? kube_path(path, sizeof(path), "scheduling.k8s.io/v1", "priorityclasses", NULL,
                         name, NULL)
             : kube_path(path, sizeof(path), RENDER_KUEUE_API, "workloadpriorityclasses", NULL,
                         name, NULL);
    if (rc == 0)
        rc = kube_get(kc, path, &wpc);
    if (rc == 0 && !json_is_integer(json_object_get(wpc, "value")))
        rc = OP_EPARSE;
    if (rc) {
        snprintf(out->message, sizeof(out->message), "%s %.80s (%s): %.200s; create it, or "
                 "change the %s", pod ? "PriorityClass" : "WorkloadPriorityClass", name,
                 pod ? "the pods' priorityClassName" : "label " TJ_LABEL_PRIORITY,
                 rc == OP_ENOTFOUND ? "not found" : rc == OP_EPARSE ? "it has no integer value"
                 : kube_last_status(kc)->message[0] ? kube_last_status(kc)->message
                 : op_strerror(rc), pod ? "template" : "label");
        json_decref(wpc);
        return rc;
    }
    json_object_set(spec, "priority", json_object_get(wpc, "value"));
    json_decref(wpc);
    return 0;
}

/* Puts the pods Kueue admitted on their ResourceFlavors' nodes: each flavor's nodeLabels join
 * the pod's nodeSelector and its tolerations the pod's, as Kueue does for the kinds it runs
 * itself. 0, or an OP_E* with msg saying why (a flavor unreadable, or a nodeSelector of the
 * template that contradicts a flavor's label: no such pod could ever be placed). */
static int kueue_place(struct kube_client *kc, const struct rec_result *r, char *msg, size_t n)
{
    json_t *sel = json_object(), *tols = json_array(), *seen = json_object(), *flavor;
    const char *res, *k;
    json_t *v, *x;
    int rc = 0;

    json_object_foreach(r->kueue_flavors, res, v) {
        char path[KUBE_MAX_PATH];
        const json_t *spec;
        size_t i;

        flavor = NULL;
        /* one flavor often serves several resources (cpu, memory): read and apply it once */
        if (!json_is_string(v) || json_object_get(seen, json_string_value(v)))
            continue;
        json_object_set_new(seen, json_string_value(v), json_true());
        rc = kube_path(path, sizeof(path), RENDER_KUEUE_API, "resourceflavors", NULL,
                       json_string_value(v), NULL);
        if (rc == 0)
            rc = kube_get(kc, path, &flavor);
        if (rc) {
            snprintf(msg, n, "could not read ResourceFlavor %.80s (admitted for %.80s): %.200s",
                     json_string_value(v), res, kube_last_status(kc)->message[0]
                     ? kube_last_status(kc)->message : op_strerror(rc));
            goto out;
        }
        spec = json_object_get(flavor, "spec");
        json_object_foreach(json_object_get(spec, "nodeLabels"), k, x)
            json_object_set(sel, k, x);
        json_array_foreach(json_object_get(spec, "tolerations"), i, x)
            json_array_append(tols, x);
        json_decref(flavor);
    }
    for (size_t i = 0; i < r->nactions; i++) {
        const struct rec_action *a = &r->actions[i];
        json_t *spec = json_object_get(a->obj, "spec"), *ns = NULL;

        if (a->kind != REC_POD || a->verb != REC_CREATE || !a->obj)
            continue;
        if (!json_is_object(spec)) {
            spec = json_object();
            json_object_set_new(a->obj, "spec", spec);
        }
        ns = json_object_get(spec, "nodeSelector");
        if (json_object_size(sel) && !json_is_object(ns)) {
            ns = json_object();
            json_object_set_new(spec, "nodeSelector", ns);
        }
        json_object_foreach(sel, k, x) {
            const char *have = json_string_value(json_object_get(ns, k));
            if (have && strcmp(have, json_string_value(x)) != 0) {
                snprintf(msg, n, "the pod template's nodeSelector %.60s=%.60s contradicts the "
                         "admitted ResourceFlavor's node label %.60s=%.60s", k, have, k,
                         json_string_value(x));
                rc = OP_EINVALID;
                goto out;
            }
            json_object_set(ns, k, x);
        }
        if (json_array_size(tols)) {
            json_t *t = json_object_get(spec, "tolerations");
            if (!json_is_array(t)) {
                t = json_array();
                json_object_set_new(spec, "tolerations", t);
            }
            json_array_extend(t, tols);
        }
    }
out:
    json_decref(sel);
    json_decref(tols);
    json_decref(seen);
    return rc;
}

/* One action through kc. rc 0 also for outcomes that mean "already so", which set `already`. */
static void apply_one(struct kube_client *kc, const struct tj *tj, const char *key,
                      const struct rec_action *a, struct outcome *out)
{
    char path[KUBE_MAX_PATH];
    int rc;

    memset(out, 0, sizeof(*out));
    if (a->verb == REC_CREATE) {
        rc = kube_path(path, sizeof(path), api_of(a->kind), resource_of(a->kind), tj->ns, NULL,
                       NULL);
        if (rc == 0 && a->kind == REC_KUEUE && (rc = kueue_priority(kc, a->obj, out)) != 0) {
            out->rc = rc;
            return;
        }
        if (rc == 0)
            rc = kube_create(kc, path, a->obj, NULL);
        /* no such resource here (not: no such namespace, 'namespaces "x" not found') */
        if (rc == OP_ENOTFOUND && a->kind == REC_WORKLOAD &&
            !strstr(kube_last_status(kc)->message, "namespaces \"")) {
            workload_unserved(kc, out->message, sizeof(out->message));
            out->rc = rc;
            return;
        }
        if (rc == OP_EEXIST && a->kind == REC_WORKLOAD) {
            rc = adopt_workload(kc, tj, path, a, out);
            if (out->message[0]) {
                out->rc = rc;
                return;
            }
        } else if (rc == OP_EEXIST) { /* deterministic names: an earlier create of ours got there */
            out->already = true;
            rc = 0;
        } else if (rc == 0) {
            log_info("Created child", "{s:s, s:s, s:s}", "trainjob", key, "kind",
                     rec_kind_str(a->kind), "name", a->name);
        }
    } else {
        rc = kube_path(path, sizeof(path), api_of(a->kind), resource_of(a->kind), tj->ns, a->name,
                       a->kind == REC_KUEUE && a->verb == REC_UPDATE ? "status" : NULL);
        if (rc == 0 && a->kind == REC_KUEUE && a->verb == REC_UPDATE) {
            /* conditions and admission, with the resourceVersion read: a 409 is retried */
            rc = kube_patch(kc, path, KUBE_PATCH_MERGE, a->obj, NULL, NULL);
            if (rc == 0)
                log_info("Updated Kueue Workload status", "{s:s, s:s}", "trainjob", key, "name",
                         a->name);
            /* Kueue wrote it since our read (it does at admission): the watch brings that
             * version and wakes the job, which decides again; not an error, no Event */
            if (rc == OP_ECONFLICT || rc == OP_ENOTFOUND) {
                log_info("Kueue Workload changed since read; deciding again on its next version",
                         "{s:s, s:s, s:s}", "trainjob", key, "name", a->name, "error",
                         op_strerror(rc));
                out->already = true;
                rc = 0;
            }
        } else if (rc == 0 && a->verb == REC_UPDATE) {
            json_t *patch = json_pack("{s:O}", "data", json_object_get(a->obj, "data"));
            rc = kube_patch(kc, path, KUBE_PATCH_MERGE, patch, NULL, NULL);
            json_decref(patch);
            if (rc == 0)
                log_info("Updated child", "{s:s, s:s, s:s}", "trainjob", key, "kind",
                         rec_kind_str(a->kind), "name", a->name);
        } else if (rc == 0) {
            struct kube_delete_opts d = {.propagation_policy = "Background",
                                         .precondition_uid = a->uid[0] ? a->uid : NULL,
                                         .grace_period_seconds = -1};
            rc = kube_delete(kc, path, &d, NULL);
            if (rc == OP_ENOTFOUND || (rc == OP_ECONFLICT && a->uid[0])) {
                out->already = true; /* gone, or the name is a newer pod's: not ours to delete */
                rc = 0;
            } else if (rc == 0) {
                log_info("Deleted child", "{s:s, s:s, s:s}", "trainjob", key, "kind",
                         rec_kind_str(a->kind), "name", a->name);
            }
        }
    }
    out->rc = rc;
    if (rc)
        snprintf(out->message, sizeof(out->message), "%.255s",
                 kube_last_status(kc)->message[0] ? kube_last_status(kc)->message
                                                  : op_strerror(rc));
}

/* Expectations, counters, a log line and an Event for one applied action. */
static void account(struct exec_worker *w, const struct tj *tj, const char *key,
                    const struct rec_action *a, const struct outcome *o)
{
    struct exec_shared *sh = w->sh;
    char msg[COND_MESSAGE_MAX];

    if (a->kind == REC_POD && a->verb == REC_CREATE) {
        if (o->rc || o->already)
            exec_expect_lower(sh->expect, key, 1, 0);
        else
            atomic_fetch_add(&sh->stats.pods_created, 1);
    } else if (a->kind == REC_POD && a->verb == REC_DELETE) {
        if (o->rc || o->already) /* 404, a newer pod, or an error: no watch event coming */
            exec_expect_observe_del(sh->expect, key, a->uid);
        else
            atomic_fetch_add(&sh->stats.pods_deleted, 1);
    }
    if (!o->rc)
        return;
    log_warn("Failed to apply action", "{s:s, s:s, s:s, s:s, s:s, s:s}", "trainjob", key, "verb",
             rec_verb_str(a->verb), "kind", rec_kind_str(a->kind), "name", a->name, "error",
             op_strerror(o->rc), "message", o->message);
    snprintf(msg, sizeof(msg), "Could not %s %s %s: %s", rec_verb_str(a->verb),
             rec_kind_str(a->kind), a->name, o->message);
    post_event(w, tj, true, a->verb == REC_CREATE ? "FailedCreate" : "FailedSync",
               a->verb == REC_CREATE ? "Create" : a->verb == REC_UPDATE ? "Update" : "Delete", msg);
}

/* A slow-start batch of pod creates, EXEC_PARALLEL at a time, each thread on its own client. */
struct batch {
    struct kube_client *kc;
    const struct tj *tj;
    const char *key;
    const struct rec_action *acts;
    struct outcome *outs;
    int n;
    atomic_int *next;
};

static void *batch_thread(void *arg)
{
    struct batch *b = arg;

    for (int i; (i = atomic_fetch_add(b->next, 1)) < b->n;)
        apply_one(b->kc, b->tj, b->key, &b->acts[i], &b->outs[i]);
    return NULL;
}

static void run_batch(struct exec_worker *w, const struct tj *tj, const char *key,
                      const struct rec_action *acts, int n, struct outcome *outs)
{
    struct batch b[EXEC_PARALLEL];
    pthread_t th[EXEC_PARALLEL];
    atomic_int next = 0;
    int nt = n < EXEC_PARALLEL ? n : EXEC_PARALLEL;
    bool started[EXEC_PARALLEL] = {false};

    for (int t = 0; t < nt; t++) {
        if (t > 0 && !w->pool[t - 1]) {
            if (!w->cfg) { /* no config to open more connections: one at a time */
                nt = t;
                break;
            }
            w->pool[t - 1] = kube_client_new(w->cfg, w->copts);
        }
        b[t] = (struct batch){t ? w->pool[t - 1] : w->kc, tj, key, acts, outs, n, &next};
    }
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&th[t], NULL, batch_thread, &b[t]) == 0;
    batch_thread(&b[0]); /* this thread works too; it also picks up what a failed start left */
    for (int t = 1; t < nt; t++)
        if (started[t])
            pthread_join(th[t], NULL);
}

void exec_worker_cleanup(struct exec_worker *w)
{
    for (int i = 0; i < EXEC_PARALLEL - 1; i++) {
        kube_client_free(w->pool[i]);
        w->pool[i] = NULL;
    }
}

int exec_apply(struct exec_worker *w, const json_t *obj, const struct tj *tj,
               const struct rec_result *r)
{
    struct exec_shared *sh = w->sh;
    char key[2 * TJ_NAME_MAX + 2];
    int adds = 0, first = 0, failed_batch = -1, rc;
    bool no_workload = false, no_place = false;
    struct outcome *outs;

    snprintf(key, sizeof(key), "%s/%s", tj->ns, tj->name);
    if (r->status_changed) {
        rc = write_status(w, obj, tj, r->status);
        if (rc)
            return rc; /* nothing else is done on a stale read */
    }
    for (size_t i = 0; i < r->nactions; i++) {
        if (r->actions[i].kind != REC_POD)
            continue;
        adds += r->actions[i].verb == REC_CREATE;
        if (r->actions[i].verb == REC_DELETE) /* by UID: deleting twice expects one event */
            exec_expect_raise_del(sh->expect, key, r->actions[i].uid, time(NULL));
    }
    exec_expect_raise(sh->expect, key, adds, 0, time(NULL));
    if (adds && r->kueue_flavors) {
        char msg[COND_MESSAGE_MAX - 64];
        if ((rc = kueue_place(w->kc, r, msg, sizeof(msg))) != 0) {
            char ev[COND_MESSAGE_MAX];
            snprintf(ev, sizeof(ev), "No pod created: %s", msg);
            log_warn("Could not place the admitted pods", "{s:s, s:s}", "trainjob", key,
                     "error", msg);
            post_event(w, tj, true, "FailedCreate", "Create", ev);
            no_place = true;
            first = rc;
        }
    }
    outs = xcalloc(r->nactions + 1, sizeof(*outs));
    for (size_t i = 0, j; i < r->nactions; i = j) {
        const struct rec_action *a = &r->actions[i];
        bool create = a->kind == REC_POD && a->verb == REC_CREATE;

        /* [i, j): one pod-create batch, or one other action */
        for (j = i + 1; create && j < r->nactions && r->actions[j].kind == REC_POD &&
                        r->actions[j].verb == REC_CREATE && r->actions[j].batch == a->batch;)
            j++;
        /* slow start: a batch failed, the rest waits; and no pod of a gang scheduled as one
         * (gang: Workload) is created without its Workload */
        if (create && (failed_batch >= 0 || no_workload || no_place)) {
            exec_expect_lower(sh->expect, key, (int)(j - i), 0);
            continue;
        }
        if (create)
            run_batch(w, tj, key, a, (int)(j - i), &outs[i]);
        else
            apply_one(w->kc, tj, key, a, &outs[i]);
        for (size_t k = i; k < j; k++) {
            account(w, tj, key, &r->actions[k], &outs[k]);
            if (outs[k].rc && !first)
                first = outs[k].rc;
            if (outs[k].rc && create)
                failed_batch = a->batch;
            if (outs[k].rc && r->actions[k].kind == REC_WORKLOAD)
                no_workload = true;
        }
    }
    free(outs);
    if (r->status && json_integer_value(json_object_get(r->status, "disruptions")) >
                         tj->status.disruptions) /* of these restarts, one was a disruption's */
        atomic_fetch_add(&sh->stats.gang_disruptions, 1);
    for (int i = 0; i < r->nevents; i++) {
        if (strcmp(r->events[i].reason, "Restarting") == 0)
            atomic_fetch_add(&sh->stats.gang_restarts, 1);
        if (strcmp(r->events[i].reason, "Resizing") == 0)
            atomic_fetch_add(&sh->stats.gang_resizes, 1);
        log_info("TrainingJob transition", "{s:s, s:s, s:s}", "trainjob", key, "reason",
                 r->events[i].reason, "message", r->events[i].message);
        post_event(w, tj, r->events[i].warning, r->events[i].reason, "Reconcile",
                   r->events[i].message);
    }
    return first;
}

/* ---------------------------------------------------------------------------------------------
 * Syncing one key
 * ------------------------------------------------------------------------------------------- */

static void random_token(char *out, size_t n)
{
    unsigned char raw[24];
    size_t got = 0;

    while (got < sizeof(raw)) {
        ssize_t k = getrandom(raw + got, sizeof(raw) - got, 0);
        if (k > 0)
            got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < n; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

struct gather {
    const struct tj *tj;
    struct rec_pod *pods;
    size_t n, cap;
};

static void gather_cb(void *ud, const char *key, const void *rec)
{
    struct gather *g = ud;
    size_t nsl = strlen(g->tj->ns);

    if (strcmp(exec_pod_str(rec, EXEC_POD_JOB), g->tj->name) != 0 ||
        strncmp(key, g->tj->ns, nsl) != 0 || key[nsl] != '/')
        return;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->pods = xrealloc(g->pods, g->cap * sizeof(*g->pods));
    }
    exec_pod_view(key, rec, &g->pods[g->n++]);
}

/* The cached pods of the job: a new array in *pods (free()), count returned. */
static size_t gather_pods(struct exec_shared *sh, const struct tj *tj, struct rec_pod **pods)
{
    struct gather g = {.tj = tj};
    size_t i, n = 0;

    if (sh->pod_index) {
        char job[2 * TJ_NAME_MAX + 2], **keys;
        size_t nk;

        snprintf(job, sizeof(job), "%s/%s", tj->ns, tj->name);
        keys = exec_index_get(sh->pod_index, job, &nk);
        *pods = xcalloc(nk + 1, sizeof(**pods));
        for (i = 0; i < nk; i++) {
            if (exec_pod_get(sh, keys[i], &(*pods)[n]))
                n++;
            free(keys[i]);
        }
        free(keys);
        return n;
    }
    informer_each(sh->pods, gather_cb, &g); /* no index (tests): scan every cached pod */
    *pods = g.pods ? g.pods : xcalloc(1, sizeof(**pods));
    return g.n;
}

bool exec_kueue_start(struct exec_shared *sh, const struct kube_config *cfg,
                      const struct kube_client_opts *copts)
{
    struct informer_handlers h = {exec_on_child, exec_on_child_update, exec_on_child, sh};
    const char *ns = sh->watch_ns && sh->watch_ns[0] ? sh->watch_ns : NULL;
    char path[KUBE_MAX_PATH], list[KUBE_MAX_PATH + 16];
    long long next = atomic_load(&sh->kueue_next_probe), now = (long long)time(NULL);
    struct informer_opts io = {0};
    struct informer *inf;
    struct kube_client *kc;
    json_t *got = NULL;
    int rc;

    if (atomic_load(&sh->kueue_served))
        return true;
    /* one prober at a time, once per EXEC_KUEUE_PROBE_S */
    if (now < next || !atomic_compare_exchange_strong(&sh->kueue_next_probe, &next,
                                                      now + EXEC_KUEUE_PROBE_S))
        return false;
    kc = kube_client_new(cfg, copts);
    rc = kube_get(kc, "/apis/" RENDER_KUEUE_API, &got);
    json_decref(got);
    got = NULL;
    if (rc) {
        log_info("Kueue not served: jobs labelled " TJ_LABEL_QUEUE " wait; looking again in a "
                 "minute when one is synced", "{s:s, s:s}", "api", RENDER_KUEUE_API, "error",
                 op_strerror(rc));
        kube_client_free(kc);
        return false;
    }
    rc = kube_path(path, sizeof(path), RENDER_KUEUE_API, "workloads", ns, NULL, NULL);
    snprintf(list, sizeof(list), "%s?limit=1", path);
    if (rc == 0)
        rc = kube_get(kc, list, &got);
    json_decref(got);
    kube_client_free(kc);
    if (rc) {
        log_warn("Kueue is served but its Workloads cannot be listed: jobs labelled "
                 TJ_LABEL_QUEUE " wait", "{s:s, s:s}", "error", op_strerror(rc), "hint",
                 "grant list, watch, create, delete on workloads and patch on "
                 "workloads/status (kueue.x-k8s.io), as the chart's role does");
        return false;
    }
    io.compact = false;
    io.watch.path = path; /* copied by informer_new() */
    io.watch.label_selector = RENDER_LABEL_JOB;
    io.fields = exec_kueue_fields;
    inf = informer_new(cfg, copts, &io, &h);
    if (informer_start(inf) != 0 ||
        informer_wait_synced(inf, (sh->sync_timeout_s > 0 ? sh->sync_timeout_s : 60) * 1000)) {
        log_warn("Kueue Workload informer did not sync: jobs labelled " TJ_LABEL_QUEUE " wait",
                 "{s:i}", "timeout_s", (int)sh->sync_timeout_s);
        informer_stop(inf);
        informer_free(inf);
        return false;
    }
    sh->workloads = inf;
    atomic_store(&sh->kueue_served, true); /* after the informer: readers check the flag */
    log_info("Kueue served: watching its Workloads", "{s:s, s:i}", "api", RENDER_KUEUE_API,
             "workloads", (int)informer_len(inf));
    return true;
}

/* The job's Kueue Workloads: copies of the cached ones labelled with its name, in its
 * namespace (deep copies: the cache's objects are shared). */
struct gather_wl {
    const struct tj *tj;
    json_t *out;
};

static void gather_wl_cb(void *ud, const char *key, const void *obj)
{
    struct gather_wl *g = ud;
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    const char *job = json_string_value(json_object_get(labels, RENDER_LABEL_JOB));
    size_t nsl = strlen(g->tj->ns);

    if (job && strcmp(job, g->tj->name) == 0 && strncmp(key, g->tj->ns, nsl) == 0 &&
        key[nsl] == '/')
        json_array_append_new(g->out, json_deep_copy(obj));
}

static json_t *gather_workloads(struct exec_shared *sh, const struct tj *tj)
{
    struct gather_wl g = {tj, json_array()};

    if (atomic_load(&sh->kueue_served))
        informer_each(sh->workloads, gather_wl_cb, &g);
    return g.out;
}

static bool cached(struct informer *inf, const char *ns, const char *name)
{
    char key[2 * RENDER_NAME_MAX + 2];

    snprintf(key, sizeof(key), "%s/%s", ns, name);
    return informer_has(inf, key);
}

/* The cached ConfigMap's config.json digest ("" when it has none). */
static void digest_cb(void *ud, const char *key, const void *rec)
{
    if (exec_child_has_config(rec))
        snprintf(ud, REC_DIGEST_LEN, "%s", exec_child_str(rec, EXEC_CHILD_DIGEST));
}

static int sync_once(struct exec_worker *w, const char *key, const json_t *obj)
{
    struct exec_shared *sh = w->sh;
    char err[TJ_ERR_MAX], name[RENDER_NAME_MAX], cmkey[2 * RENDER_NAME_MAX + 2], token[64];
    char digest[REC_DIGEST_LEN] = "";
    struct rec_input in = {0};
    struct rec_result r;
    struct rec_pod *pods = NULL;
    json_t *prog = NULL, *wls = NULL;
    struct tj tj;
    int rc;

    rc = tj_parse(obj, &tj, err, sizeof(err));
    if (rc == OP_EPARSE || !tj.name[0] || !tj.ns[0]) {
        log_error("Ignored malformed TrainingJob", "{s:s, s:s}", "trainjob", key, "error", err);
        tj_cleanup(&tj);
        return 0;
    }
    if (rc == OP_EINVALID) {
        log_warn("Refused TrainingJob spec", "{s:s, s:s}", "trainjob", key, "error", err);
        rec_invalid(&tj, err, time(NULL), &r);
        rc = exec_apply(w, obj, &tj, &r);
        goto out;
    }
    in.job = &tj;
    in.npods = gather_pods(sh, &tj, &pods);
    in.pods = pods;
    in.have_service = cached(sh->services, tj.ns, tj.name);
    render_configmap_name(&tj, name, sizeof(name));
    snprintf(cmkey, sizeof(cmkey), "%s/%s", tj.ns, name);
    in.have_configmap = informer_peek(sh->configmaps, cmkey, digest_cb, digest);
    in.configmap_digest = digest[0] ? digest : NULL;
    render_secret_name(&tj, name, sizeof(name));
    in.have_secret = cached(sh->secrets, tj.ns, name);
    in.now = time(NULL);
    in.expectations_met = exec_expect_met(sh->expect, key, in.now);
    if (!in.have_secret)
        random_token(token, sizeof(token));
    in.token = in.have_secret ? NULL : token;
    progress_lookup(sh->progress, key, &in, &prog);
    if (tj.queue[0] && !atomic_load(&sh->kueue_served) && w->cfg)
        exec_kueue_start(sh, w->cfg, w->copts); /* installed since the last look? */
    in.kueue_served = atomic_load(&sh->kueue_served);
    in.workloads = wls = gather_workloads(sh, &tj);
    rc = rec_reconcile(&in, &r);
    if (rc == 0)
        rc = exec_apply(w, obj, &tj, &r);
    if (rc == 0 && r.requeue_after_s >= 0)
        queue_add_after(sh->queue, key, r.requeue_after_s * 1000);
    /* A lost watch event must not wedge the job: look again when the expectations expire. */
    if (rc == 0 && !in.expectations_met)
        queue_add_after(sh->queue, key, (EXEC_EXPECT_TTL_S + 1) * 1000L);
out:
    rec_result_cleanup(&r);
    json_decref(prog);
    json_decref(wls);
    free(pods);
    tj_cleanup(&tj);
    return rc;
}

int exec_sync(struct exec_worker *w, const char *key)
{
    struct exec_shared *sh = w->sh;
    json_t *obj = informer_get(sh->jobs, key);
    char path[KUBE_MAX_PATH], ns[TJ_NS_MAX + 1] = "";
    const char *slash = strchr(key, '/');
    struct timespec t0, t1;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    atomic_fetch_add(&sh->stats.syncs, 1);
    if (!obj) { /* deleted: its children go with it (owner references) */
        exec_expect_forget(sh->expect, key);
        return 0;
    }
    for (int attempt = 0;; attempt++) {
        rc = sync_once(w, key, obj);
        if (rc != OP_ECONFLICT || attempt >= EXEC_CONFLICT_RETRIES || !slash)
            break;
        /* Our copy was stale: read the job fresh from the API and decide again. */
        atomic_fetch_add(&sh->stats.conflicts, 1);
        json_decref(obj);
        obj = NULL;
        snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
        rc = kube_path(path, sizeof(path), TJ_API_VERSION, "trainingjobs", ns, slash + 1, NULL);
        if (rc == 0)
            rc = kube_get(w->kc, path, &obj);
        if (rc == OP_ENOTFOUND) {
            rc = 0;
            break;
        }
        if (rc)
            break;
    }
    json_decref(obj);
    if (rc)
        atomic_fetch_add(&sh->stats.sync_errors, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    exec_stats_observe(&sh->stats, (double)(t1.tv_sec - t0.tv_sec) +
                                       (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return rc;
}
