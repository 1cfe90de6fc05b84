/* lease.c - Lease-based leader election (see lease.h). */
#include "operator/kube/lease.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/log.h"

struct lease_elector {
    struct kube_client *kc;
    struct lease_opts o;
    char *ns, *name, *id;
    char path[KUBE_MAX_PATH];
    pthread_t th;
    bool started;
    atomic_int stop;
    atomic_bool leader;
    pthread_mutex_t mu; /* serialises lease_try() and lease_stop() use of kc */
    /* What we last observed, and when (on our monotonic clock). */
    char obs_holder[256], obs_renew[64];
    char obs_rv[64];
    double obs_at;
    double renewed_at; /* last successful renew while leader */
    long transitions;
};

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void kube_micro_time(char *out, size_t outlen)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
}

struct lease_elector *lease_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                                const struct lease_opts *opts)
{
    struct lease_elector *e = xcalloc(1, sizeof(*e));
    struct kube_client_opts co = {0};

    if (copts)
        co = *copts;
    /* An attempt (a GET and a PUT) that starts just before renew_deadline must end before
     * lease_duration, when a follower may take over: each call is bounded by renew_deadline/4,
     * so a leader steps down by renew_deadline x 1.5 at the latest (15 s with 15/10/2). */
    e->o = *opts;
    if (e->o.lease_duration_ms <= 0)
        e->o.lease_duration_ms = 15000;
    if (e->o.renew_deadline_ms <= 0)
        e->o.renew_deadline_ms = 10000;
    if (e->o.retry_period_ms <= 0)
        e->o.retry_period_ms = 2000;
    if (co.timeout_ms <= 0 || co.timeout_ms > e->o.renew_deadline_ms / 4)
        co.timeout_ms = e->o.renew_deadline_ms / 4;
    co.max_retries = -1; /* the election loop is the retry */
    e->kc = kube_client_new(cfg, &co);
    e->ns = xstrdup(opts->namespace);
    e->name = xstrdup(opts->name);
    e->id = xstrdup(opts->identity);
    e->o.namespace = e->ns;
    e->o.name = e->name;
    e->o.identity = e->id;
    if (kube_path(e->path, sizeof(e->path), "coordination.k8s.io/v1", "leases", e->ns, e->name,
                  NULL))
        e->path[0] = 0;
    pthread_mutex_init(&e->mu, NULL);
    return e;
}

static json_t *new_spec(struct lease_elector *e, const char *now, long transitions)
{
    return json_pack("{s:s, s:i, s:s, s:s, s:i}", "holderIdentity", e->id, "leaseDurationSeconds",
                     (int)((e->o.lease_duration_ms + 999) / 1000), "acquireTime", now, "renewTime",
                     now, "leaseTransitions", (int)transitions);
}

static int try_locked(struct lease_elector *e)
{
    json_t *lease = NULL, *spec, *out = NULL;
    char now[64], coll[KUBE_MAX_PATH];
    const char *holder, *renew, *rv;
    double t = mono();
    int rc;

    if (!e->path[0])
        return OP_EINVAL;
    kube_micro_time(now, sizeof(now));
    rc = kube_get(e->kc, e->path, &lease);
    if (rc == OP_ENOTFOUND) {
        json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion",
                                "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name",
                                e->name, "namespace", e->ns, "spec", new_spec(e, now, 0));
        if (kube_path(coll, sizeof(coll), "coordination.k8s.io/v1", "leases", e->ns, NULL, NULL))
            rc = OP_EINVAL;
        else
            rc = kube_create(e->kc, coll, obj, NULL);
        json_decref(obj);
        if (rc == OP_EEXIST)
            rc = OP_ENOTLEADER; /* someone else created it first */
        goto out;
    }
    if (rc)
        goto out;
    spec = json_object_get(lease, "spec");
    holder = json_string_value(json_object_get(spec, "holderIdentity"));
    renew = json_string_value(json_object_get(spec, "renewTime"));
    rv = kube_object_rv(lease);
    e->transitions = (long)json_integer_value(json_object_get(spec, "leaseTransitions"));
    if (strcmp(holder ? holder : "", e->obs_holder) != 0 ||
        strcmp(renew ? renew : "", e->obs_renew) != 0 || e->obs_at == 0) {
        snprintf(e->obs_holder, sizeof(e->obs_holder), "%s", holder ? holder : "");
        snprintf(e->obs_renew, sizeof(e->obs_renew), "%s", renew ? renew : "");
        e->obs_at = t;
    }
    snprintf(e->obs_rv, sizeof(e->obs_rv), "%s", rv ? rv : "");
    if (holder && *holder && strcmp(holder, e->id) != 0) {
        long dur = (long)json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
        if (dur <= 0)
            dur = (e->o.lease_duration_ms + 999) / 1000;
        if (t < e->obs_at + (double)dur) {
            rc = OP_ENOTLEADER; /* held, and renewed recently as far as we have seen */
            goto out;
        }
    }
    /* Ours to renew, free, or expired: write it guarded by the resourceVersion we read. */
    if (holder && strcmp(holder, e->id) == 0) {
        json_object_set_new(spec, "renewTime", json_string(now));
        json_object_set_new(spec, "leaseDurationSeconds",
                            json_integer((e->o.lease_duration_ms + 999) / 1000));
    } else {
        json_object_set_new(lease, "spec", new_spec(e, now, e->transitions + 1));
    }
    rc = kube_replace(e->kc, e->path, lease, &out);
    if (rc == OP_ECONFLICT)
        rc = OP_ENOTLEADER; /* another candidate wrote first */
out:
    if (rc == 0) {
        e->renewed_at = t;
        snprintf(e->obs_holder, sizeof(e->obs_holder), "%s", e->id);
        e->obs_at = t;
    }
    json_decref(out);
    json_decref(lease);
    return rc;
}

int lease_try(struct lease_elector *e)
{
    int rc;
    pthread_mutex_lock(&e->mu);
    rc = try_locked(e);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

bool lease_is_leader(struct lease_elector *e)
{
    return atomic_load(&e->leader);
}

static void nap(struct lease_elector *e, long ms)
{
    while (ms > 0 && !atomic_load(&e->stop)) {
        long s = ms < 50 ? ms : 50;
        struct timespec ts = {0, s * 1000000L};
        nanosleep(&ts, NULL);
        ms -= s;
    }
}

static void *run(void *arg)
{
    struct lease_elector *e = arg;

    while (!atomic_load(&e->stop)) {
        int rc = lease_try(e);
        bool was = atomic_load(&e->leader);
        if (rc == 0 && !was) {
            atomic_store(&e->leader, true);
            log_info("Acquired Lease", "{s:s, s:s, s:s}", "namespace", e->ns, "name", e->name,
                     "identity", e->id);
            if (e->o.on_started)
                e->o.on_started(e->o.ud);
        } else if (rc && was &&
                   (mono() - e->renewed_at >= e->o.renew_deadline_ms / 1000.0 ||
                    (rc == OP_ENOTLEADER && strcmp(e->obs_holder, e->id) != 0))) {
            /* Could not renew within the deadline: someone else may take over any moment. */
            atomic_store(&e->leader, false);
            log_error("Lost Lease", "{s:s, s:s, s:s}", "name", e->name, "identity", e->id, "error",
                      op_strerror(rc));
            if (e->o.on_stopped)
                e->o.on_stopped(e->o.ud);
        } else if (rc && rc != OP_ENOTLEADER) {
            log_warn("Lease update failed", "{s:s, s:s, s:s}", "name", e->name, "error",
                     op_strerror(rc), "message", kube_last_status(e->kc)->message);
        }
        /* Jitter only while waiting to acquire, as client-go does. */
        nap(e, atomic_load(&e->leader)
                   ? e->o.retry_period_ms
                   : e->o.retry_period_ms + random() % (e->o.retry_period_ms / 5 + 1));
    }
    return NULL;
}

int lease_start(struct lease_elector *e)
{
    if (e->started)
        return OP_EINVAL;
    if (pthread_create(&e->th, NULL, run, e))
        return OP_EIO;
    e->started = true;
    return 0;
}

static void release_locked(struct lease_elector *e)
{
    json_t *lease = NULL, *spec;
    char now[64];

    if (kube_get(e->kc, e->path, &lease))
        goto out;
    spec = json_object_get(lease, "spec");
    if (!json_is_object(spec) || !json_string_value(json_object_get(spec, "holderIdentity")) ||
        strcmp(json_string_value(json_object_get(spec, "holderIdentity")), e->id) != 0)
        goto out;
    kube_micro_time(now, sizeof(now));
    json_object_set_new(spec, "holderIdentity", json_string(""));
    json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
    json_object_set_new(spec, "renewTime", json_string(now));
    if (kube_replace(e->kc, e->path, lease, NULL) == 0)
        log_info("Released Lease", "{s:s, s:s}", "name", e->name, "identity", e->id);
out:
    json_decref(lease);
}

void lease_stop(struct lease_elector *e, bool release)
{
    atomic_store(&e->stop, 1);
    if (e->started) {
        pthread_join(e->th, NULL);
        e->started = false;
    }
    if (atomic_load(&e->leader)) {
        atomic_store(&e->leader, false);
        if (release) {
            pthread_mutex_lock(&e->mu);
            release_locked(e);
            pthread_mutex_unlock(&e->mu);
        }
        if (e->o.on_stopped)
            e->o.on_stopped(e->o.ud);
    }
}

void lease_free(struct lease_elector *e)
{
    if (!e)
        return;
    lease_stop(e, true);
    kube_client_free(e->kc);
    pthread_mutex_destroy(&e->mu);
    free(e->ns);
    free(e->name);
    free(e->id);
    free(e);
}
