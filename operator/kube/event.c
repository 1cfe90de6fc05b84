/* event.c - events.k8s.io/v1 recorder with series de-duplication (see event.h). */
#include "operator/kube/event.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/hash.h"
#include "common/xalloc.h"
#include "operator/kube/lease.h"
#include "operator/kube/strmap.h"

/* One recorded Event: up to EVENT_CACHE_MAX of them, so sized to its names. */
struct seen {
    int count;
    time_t first;
    char ref[]; /* the Event's namespace, NUL, its name, NUL */
};

static struct seen *seen_new(const char *ns, const char *name)
{
    size_t a = strlen(ns) + 1, b = strlen(name) + 1;
    struct seen *s = xmalloc(sizeof(*s) + a + b);

    s->count = 0;
    s->first = 0;
    memcpy(s->ref, ns, a);
    memcpy(s->ref + a, name, b);
    return s;
}

static const char *seen_name(const struct seen *s)
{
    return s->ref + strlen(s->ref) + 1;
}

struct event_recorder {
    struct kube_client *kc;
    char *controller, *instance;
    pthread_mutex_t mu;
    struct strmap cache; /* dedup key -> struct seen * */
    time_t (*clock)(void);
    time_t pruned; /* when expired records were last dropped */
};

static time_t wall_clock(void)
{
    return time(NULL);
}

void event_recorder_set_clock(struct event_recorder *r, time_t (*clock)(void))
{
    r->clock = clock ? clock : wall_clock;
    r->pruned = r->clock();
}

size_t event_recorder_cached(struct event_recorder *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = strmap_len(&r->cache);
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Drops the records whose window has passed (they would only make a new Event anyway), so the
 * cache holds about one window of distinct events instead of growing to EVENT_CACHE_MAX. */
static void prune(struct event_recorder *r, time_t now)
{
    struct strmap_iter it;
    size_t n = 0, cap = strmap_len(&r->cache);
    char (*old)[33] = cap ? xcalloc(cap, sizeof(*old)) : NULL;

    for (struct strmap_entry *e = strmap_first(&r->cache, &it); e; e = strmap_next(&r->cache, &it))
        if (now - ((struct seen *)e->val)->first >= EVENT_DEDUP_WINDOW_S && n < cap)
            snprintf(old[n++], sizeof(old[0]), "%s", e->key);
    for (size_t i = 0; i < n; i++)
        free(strmap_del(&r->cache, old[i]));
    free(old);
    r->pruned = now;
}

struct event_recorder *event_recorder_new(const struct kube_config *cfg,
                                          const struct kube_client_opts *copts,
                                          const char *controller, const char *instance)
{
    struct event_recorder *r = xcalloc(1, sizeof(*r));

    r->kc = kube_client_new(cfg, copts);
    r->controller = xstrdup(controller);
    r->instance = xstrdup(instance);
    pthread_mutex_init(&r->mu, NULL);
    strmap_init(&r->cache);
    event_recorder_set_clock(r, NULL);
    return r;
}

void event_recorder_free(struct event_recorder *r)
{
    if (!r)
        return;
    kube_client_free(r->kc);
    strmap_cleanup(&r->cache, free);
    pthread_mutex_destroy(&r->mu);
    free(r->controller);
    free(r->instance);
    free(r);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Creates the Event; on success *out is its new cache record (count and time unset). */
static int post(struct event_recorder *r, const json_t *reg, const char *type, const char *reason,
                const char *action, const char *note, struct seen **out)
{
    json_t *meta = json_object_get(reg, "metadata"), *ev;
    const char *ns = str(meta, "namespace"), *name = str(meta, "name");
    char now[64], path[KUBE_MAX_PATH], notebuf[EVENT_NOTE_MAX], ename[300];
    struct timespec ts;
    int rc;

    if (!*ns)
        ns = "default"; /* events about cluster-scoped objects live in default */
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Unique and valid: "<object>.<hex nanoseconds>", as client-go names them. */
    snprintf(ename, sizeof(ename), "%.*s.%llx", 200, name,
             (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
    snprintf(notebuf, sizeof(notebuf), "%s", note ? note : "");
    kube_micro_time(now, sizeof(now));
    ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:s, s:s, s:s, s:s, s:s,"
                   " s:{s:s, s:s, s:s, s:s, s:s}}",
                   "apiVersion", "events.k8s.io/v1", "kind", "Event", "metadata", "name", ename,
                   "namespace", ns, "eventTime", now, "reportingController", r->controller,
                   "reportingInstance", r->instance, "type", type, "reason", reason, "action",
                   action, "note", notebuf, "regarding", "apiVersion", str(reg, "apiVersion"),
                   "kind", str(reg, "kind"), "name", name, "namespace", str(meta, "namespace"),
                   "uid", str(meta, "uid"));
    if (!ev)
        return OP_EINVAL;
    rc = kube_path(path, sizeof(path), "events.k8s.io/v1", "events", ns, NULL, NULL);
    if (!rc)
        rc = kube_create(r->kc, path, ev, NULL);
    json_decref(ev);
    if (rc == 0)
        *out = seen_new(ns, ename);
    return rc;
}

static int bump(struct event_recorder *r, struct seen *s)
{
    char now[64], path[KUBE_MAX_PATH];
    json_t *patch;
    int rc;

    kube_micro_time(now, sizeof(now));
    patch = json_pack("{s:{s:i, s:s}}", "series", "count", s->count + 1, "lastObservedTime", now);
    rc = kube_path(path, sizeof(path), "events.k8s.io/v1", "events", s->ref, seen_name(s), NULL);
    if (!rc)
        rc = kube_patch(r->kc, path, KUBE_PATCH_MERGE, patch, NULL, NULL);
    json_decref(patch);
    return rc;
}

int event_record(struct event_recorder *r, const json_t *regarding, const char *type,
                 const char *reason, const char *action, const char *note, int *count_out)
{
    json_t *meta = json_object_get(regarding, "metadata");
    char text[2048], key[HASH_DIGEST_HEX]; /* the cache key: a digest of text */
    struct seen *s, *fresh = NULL;
    time_t now;
    int rc;

    if (!type || !reason || !action)
        return OP_EINVAL;
    snprintf(text, sizeof(text), "%s/%s/%s/%s\x1f%s\x1f%s\x1f%s\x1f%.1024s", str(regarding, "kind"),
             str(meta, "namespace"), str(meta, "name"), str(meta, "uid"), type, reason, action,
             note ? note : "");
    hash_text_digest(text, key);
    pthread_mutex_lock(&r->mu);
    now = r->clock();
    if (now - r->pruned >= EVENT_PRUNE_INTERVAL_S || strmap_len(&r->cache) >= EVENT_CACHE_MAX)
        prune(r, now);
    s = strmap_get(&r->cache, key);
    if (s && now - s->first < EVENT_DEDUP_WINDOW_S) {
        rc = bump(r, s);
        if (rc == 0) {
            s->count++;
            goto out;
        }
        if (rc != OP_ENOTFOUND) /* an expired Event (TTL 1 h) is recreated below */
            goto out;
    }
    if (!s && strmap_len(&r->cache) >= EVENT_CACHE_MAX) {
        /* Still full of live records. Bounded: forgetting only means the next duplicate makes
         * a new Event. */
        strmap_cleanup(&r->cache, free);
        strmap_init(&r->cache);
    }
    rc = post(r, regarding, type, reason, action, note, &fresh);
    if (s) /* the one whose Event expired: replaced either way */
        free(strmap_del(&r->cache, key));
    s = NULL;
    if (rc == 0) {
        s = fresh;
        s->count = 1;
        s->first = now;
        strmap_put(&r->cache, key, s);
    }
out:
    if (count_out)
        *count_out = s ? s->count : 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}
