/* event.c - events.k8s.io/v1 recorder with series de-duplication (see event.h). */
#include "operator/kube/event.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/lease.h"
#include "operator/kube/strmap.h"

struct seen {
    char name[300], ns[254];
    int count;
    time_t first;
};

struct event_recorder {
    struct kube_client *kc;
    char *controller, *instance;
    pthread_mutex_t mu;
    struct strmap cache; /* dedup key -> struct seen * */
};

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

/* Creates the Event; fills s->name/ns. */
static int post(struct event_recorder *r, const json_t *reg, const char *type, const char *reason,
                const char *action, const char *note, struct seen *s)
{
    json_t *meta = json_object_get(reg, "metadata"), *ev;
    const char *ns = str(meta, "namespace"), *name = str(meta, "name");
    char now[64], path[KUBE_MAX_PATH], notebuf[EVENT_NOTE_MAX];
    struct timespec ts;
    int rc;

    if (!*ns)
        ns = "default"; /* events about cluster-scoped objects live in default */
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Unique and valid: "<object>.<hex nanoseconds>", as client-go names them. */
    snprintf(s->name, sizeof(s->name), "%.*s.%llx", 200, name,
             (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
    snprintf(s->ns, sizeof(s->ns), "%s", ns);
    snprintf(notebuf, sizeof(notebuf), "%s", note ? note : "");
    kube_micro_time(now, sizeof(now));
    ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:s, s:s, s:s, s:s, s:s,"
                   " s:{s:s, s:s, s:s, s:s, s:s}}",
                   "apiVersion", "events.k8s.io/v1", "kind", "Event", "metadata", "name", s->name,
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
    return rc;
}

static int bump(struct event_recorder *r, struct seen *s)
{
    char now[64], path[KUBE_MAX_PATH];
    json_t *patch;
    int rc;

    kube_micro_time(now, sizeof(now));
    patch = json_pack("{s:{s:i, s:s}}", "series", "count", s->count + 1, "lastObservedTime", now);
    rc = kube_path(path, sizeof(path), "events.k8s.io/v1", "events", s->ns, s->name, NULL);
    if (!rc)
        rc = kube_patch(r->kc, path, KUBE_PATCH_MERGE, patch, NULL, NULL);
    json_decref(patch);
    return rc;
}

int event_record(struct event_recorder *r, const json_t *regarding, const char *type,
                 const char *reason, const char *action, const char *note, int *count_out)
{
    json_t *meta = json_object_get(regarding, "metadata");
    char key[2048];
    struct seen *s;
    time_t now = time(NULL);
    int rc;

    if (!type || !reason || !action)
        return OP_EINVAL;
    snprintf(key, sizeof(key), "%s/%s/%s/%s\x1f%s\x1f%s\x1f%s\x1f%.1024s", str(regarding, "kind"),
             str(meta, "namespace"), str(meta, "name"), str(meta, "uid"), type, reason, action,
             note ? note : "");
    pthread_mutex_lock(&r->mu);
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
    if (!s) {
        if (strmap_len(&r->cache) >= EVENT_CACHE_MAX) {
            /* Bounded: forgetting only means the next duplicate makes a new Event. */
            strmap_cleanup(&r->cache, free);
            strmap_init(&r->cache);
        }
        s = xcalloc(1, sizeof(*s));
        strmap_put(&r->cache, key, s);
    }
    rc = post(r, regarding, type, reason, action, note, s);
    s->count = rc == 0 ? 1 : 0;
    s->first = now;
    if (rc)
        free(strmap_del(&r->cache, key));
    s = rc ? NULL : s;
out:
    if (count_out)
        *count_out = s ? s->count : 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}
