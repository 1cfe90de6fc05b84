/* informer.c - a watch-fed, projected object cache (see informer.h). */
#include "operator/kube/informer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/log.h"
#include "operator/kube/strmap.h"

enum mode { MODE_JSON, MODE_COMPACT, MODE_TYPED };

struct informer {
    struct watch *w;
    struct informer_handlers h;
    struct informer_rec_handlers rh;
    struct informer_transform tr;
    enum mode mode;
    char **fields; /* NULL-terminated, or NULL */
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t synced_cv;
    bool synced;
    /* key -> json_t * (one reference), char * (compact JSON text) or a typed record */
    struct strmap cache;
};

static const char *const identity[] = {"metadata.name", "metadata.namespace", "metadata.uid",
                                       "metadata.resourceVersion", NULL};

static void copy_path(json_t *dst, const json_t *src, const char *path)
{
    char seg[256];
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    json_t *v, *sub;

    if (n == 0 || n >= sizeof(seg) || !json_is_object(src))
        return;
    memcpy(seg, path, n);
    seg[n] = 0;
    v = json_object_get(src, seg);
    if (!v)
        return;
    if (!dot) {
        /* Shared with the source: objects in the cache are read-only. */
        json_object_set(dst, seg, v);
        return;
    }
    if (!json_is_object(v))
        return;
    sub = json_object_get(dst, seg);
    if (!sub) {
        sub = json_object();
        json_object_set_new(dst, seg, sub);
    }
    copy_path(sub, v, dot + 1);
}

json_t *kube_project(const json_t *obj, const char *const *fields)
{
    json_t *out = json_object();

    for (int i = 0; identity[i]; i++)
        copy_path(out, obj, identity[i]);
    for (int i = 0; fields && fields[i]; i++)
        copy_path(out, obj, fields[i]);
    return out;
}

static void on_listed(void *ud)
{
    struct informer *inf = ud;

    pthread_mutex_lock(&inf->mu);
    inf->synced = true;
    pthread_cond_broadcast(&inf->synced_cv);
    pthread_mutex_unlock(&inf->mu);
}

/* A cached value as JSON: a new reference (JSON) or a parsed copy (compact). */
static json_t *as_json(const struct informer *inf, void *v)
{
    if (!v)
        return NULL;
    if (inf->mode == MODE_COMPACT)
        return json_loads(v, 0, NULL);
    return json_incref(v);
}

static void drop(const struct informer *inf, void *v)
{
    if (!v)
        return;
    if (inf->mode == MODE_JSON)
        json_decref(v);
    else if (inf->mode == MODE_COMPACT)
        free(v);
    else
        inf->tr.free(v);
}

static void typed_event(struct informer *inf, enum kube_event t, const char *key, json_t *obj)
{
    void *rec = NULL, *old;

    if (t != KUBE_EVENT_DELETED)
        rec = inf->tr.make(inf->tr.ud, obj);
    pthread_mutex_lock(&inf->mu);
    old = rec ? strmap_put(&inf->cache, key, rec) : strmap_del(&inf->cache, key);
    pthread_mutex_unlock(&inf->mu);
    /* Only this thread changes the cache, so rec stays valid through the calls below. */
    if (t == KUBE_EVENT_DELETED || !rec) {
        if (inf->rh.on_delete) {
            void *last = old ? old : (t == KUBE_EVENT_DELETED ? inf->tr.make(inf->tr.ud, obj) : NULL);
            if (last)
                inf->rh.on_delete(inf->rh.ud, last);
            if (last != old)
                inf->tr.free(last);
        }
    } else if (old && inf->rh.on_update) {
        inf->rh.on_update(inf->rh.ud, old, rec);
    } else if (!old && inf->rh.on_add) {
        inf->rh.on_add(inf->rh.ud, rec);
    }
    if (old)
        inf->tr.free(old);
}

static int on_event(void *ud, enum kube_event t, json_t *obj)
{
    struct informer *inf = ud;
    char key[512];
    json_t *nobj, *old;
    void *val, *prev;

    if (t == KUBE_EVENT_BOOKMARK || t == KUBE_EVENT_ERROR)
        return 0;
    if (kube_object_key(obj, key, sizeof(key)))
        return 0;
    if (inf->mode == MODE_TYPED) {
        typed_event(inf, t, key, obj);
        return 0;
    }
    if (t == KUBE_EVENT_DELETED) {
        pthread_mutex_lock(&inf->mu);
        prev = strmap_del(&inf->cache, key);
        pthread_mutex_unlock(&inf->mu);
        old = as_json(inf, prev);
        drop(inf, prev);
        if (inf->h.on_delete)
            inf->h.on_delete(inf->h.ud, old ? old : obj);
        json_decref(old);
        return 0;
    }
    nobj = inf->fields ? kube_project(obj, (const char *const *)inf->fields) : json_incref(obj);
    if (inf->mode == MODE_COMPACT) {
        val = json_dumps(nobj, JSON_COMPACT);
        if (!val) { /* out of memory in jansson: keep the tree rather than nothing */
            json_decref(nobj);
            return 0;
        }
    } else {
        val = json_incref(nobj); /* one for the cache, one for the handler call below */
    }
    pthread_mutex_lock(&inf->mu);
    prev = strmap_put(&inf->cache, key, val);
    pthread_mutex_unlock(&inf->mu);
    old = as_json(inf, prev);
    drop(inf, prev);
    if (old && inf->h.on_update)
        inf->h.on_update(inf->h.ud, old, nobj);
    else if (!old && inf->h.on_add)
        inf->h.on_add(inf->h.ud, nobj);
    json_decref(old);
    json_decref(nobj);
    return 0;
}

struct informer *informer_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                              const struct informer_opts *opts, const struct informer_handlers *h)
{
    struct informer *inf = xcalloc(1, sizeof(*inf));
    struct watch_opts wo = opts->watch;
    size_t n = 0;

    if (h)
        inf->h = *h;
    inf->mode = opts->compact ? MODE_COMPACT : MODE_JSON;
    if (opts->transform) {
        inf->mode = MODE_TYPED;
        inf->tr = *opts->transform;
        if (opts->rec_handlers)
            inf->rh = *opts->rec_handlers;
    } else if (opts->fields) {
        while (opts->fields[n])
            n++;
        inf->fields = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
            inf->fields[i] = xstrdup(opts->fields[i]);
    }
    wo.on_listed = on_listed;
    inf->w = watch_new(cfg, copts, &wo, on_event, inf);
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->synced_cv, NULL);
    strmap_init(&inf->cache);
    return inf;
}

static void *run(void *arg)
{
    struct informer *inf = arg;
    (void)watch_run(inf->w);
    return NULL;
}

int informer_start(struct informer *inf)
{
    if (inf->started)
        return OP_EINVAL;
    if (pthread_create(&inf->th, NULL, run, inf))
        return OP_EIO;
    inf->started = true;
    return 0;
}

bool informer_synced(struct informer *inf)
{
    bool s;
    pthread_mutex_lock(&inf->mu);
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

int informer_wait_synced(struct informer *inf, long timeout_ms)
{
    struct timespec dl;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&inf->mu);
    while (!inf->synced && rc == 0)
        rc = pthread_cond_timedwait(&inf->synced_cv, &inf->mu, &dl);
    rc = inf->synced ? 0 : OP_ETIMEDOUT;
    pthread_mutex_unlock(&inf->mu);
    return rc;
}

json_t *informer_get(struct informer *inf, const char *key)
{
    json_t *o = NULL;

    if (inf->mode == MODE_TYPED)
        return NULL;
    pthread_mutex_lock(&inf->mu);
    o = as_json(inf, strmap_get(&inf->cache, key));
    pthread_mutex_unlock(&inf->mu);
    return o;
}

json_t *informer_list(struct informer *inf)
{
    json_t *arr = json_array();
    struct strmap_iter it;
    struct strmap_entry *e;

    if (inf->mode == MODE_TYPED)
        return arr;
    pthread_mutex_lock(&inf->mu);
    for (e = strmap_first(&inf->cache, &it); e; e = strmap_next(&inf->cache, &it)) {
        json_t *o = as_json(inf, e->val);
        if (o)
            json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&inf->mu);
    return arr;
}

bool informer_has(struct informer *inf, const char *key)
{
    bool has;
    pthread_mutex_lock(&inf->mu);
    has = strmap_has(&inf->cache, key);
    pthread_mutex_unlock(&inf->mu);
    return has;
}

/* Calls fn with one cached value (locked by the caller). */
static void call(struct informer *inf, void *v, informer_obj_fn fn, void *ud)
{
    json_t *o;

    if (inf->mode != MODE_COMPACT) {
        fn(ud, v);
        return;
    }
    o = json_loads(v, 0, NULL);
    if (o)
        fn(ud, o);
    json_decref(o);
}

bool informer_peek(struct informer *inf, const char *key, informer_obj_fn fn, void *ud)
{
    void *v;

    pthread_mutex_lock(&inf->mu);
    v = strmap_get(&inf->cache, key);
    if (v)
        call(inf, v, fn, ud);
    pthread_mutex_unlock(&inf->mu);
    return v != NULL;
}

void informer_each(struct informer *inf, informer_obj_fn fn, void *ud)
{
    struct strmap_iter it;
    struct strmap_entry *e;

    pthread_mutex_lock(&inf->mu);
    for (e = strmap_first(&inf->cache, &it); e; e = strmap_next(&inf->cache, &it))
        call(inf, e->val, fn, ud);
    pthread_mutex_unlock(&inf->mu);
}

size_t informer_len(struct informer *inf)
{
    size_t n;
    pthread_mutex_lock(&inf->mu);
    n = strmap_len(&inf->cache);
    pthread_mutex_unlock(&inf->mu);
    return n;
}

void informer_get_stats(struct informer *inf, struct watch_stats *out)
{
    watch_get_stats(inf->w, out);
}

void informer_stop(struct informer *inf)
{
    if (!inf->started)
        return;
    watch_stop(inf->w);
    pthread_join(inf->th, NULL);
    inf->started = false;
}

void informer_free(struct informer *inf)
{
    struct strmap_iter it;

    if (!inf)
        return;
    informer_stop(inf);
    watch_free(inf->w);
    for (struct strmap_entry *e = strmap_first(&inf->cache, &it); e;
         e = strmap_next(&inf->cache, &it))
        drop(inf, e->val);
    strmap_cleanup(&inf->cache, NULL);
    for (size_t i = 0; inf->fields && inf->fields[i]; i++)
        free(inf->fields[i]);
    free(inf->fields);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->synced_cv);
    free(inf);
}
