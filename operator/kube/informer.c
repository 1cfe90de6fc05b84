/* informer.c - a watch-fed, projected object cache (see informer.h). */
#include "operator/kube/informer.h"

#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

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
    /* key -> json_t * (one reference), struct blob * (compact) or a typed record */
    struct strmap cache;
    /* compact: the current preset dictionary, an earlier object's text, that new ones are
     * deflated against (objects of one kind share most of their text: a TrainingJob of 1.2 KB
     * deflates to ~100 bytes). An object that deflates poorly against it (another shape: e.g.
     * the first job had no status yet) becomes the next dictionary. */
    struct zdict *dict;
    z_stream zs; /* the informer thread's deflater (compact only) */
    bool zs_ready;
};

/* A preset dictionary, counted by the blobs deflated against it and by being current. Counts
 * change on the informer thread only; readers use a blob's dictionary under the cache lock,
 * while the blob (and so its count) is in the cache. */
struct zdict {
    long refs;
    size_t len;
    char text[];
};

/* A compact object: its JSON text, raw (dict NULL) or deflated against dict. */
struct blob {
    struct zdict *dict;
    uint32_t len, zlen;
    unsigned char data[];
};

static struct zdict *zdict_new(const char *text, size_t len)
{
    struct zdict *d = xmalloc(sizeof(*d) + len + 1);

    d->refs = 1;
    d->len = len;
    memcpy(d->text, text, len + 1);
    return d;
}

static void zdict_put(struct zdict *d)
{
    if (d && --d->refs == 0)
        free(d);
}

/* text deflated against d: a new blob (dict unset), or NULL when it does not get smaller. */
static struct blob *deflate_with(struct informer *inf, const char *text, size_t len,
                                 const struct zdict *d)
{
    uLong bound;
    struct blob *b;

    if (!inf->zs_ready || len == 0 || len >= UINT32_MAX || deflateReset(&inf->zs) != Z_OK ||
        deflateSetDictionary(&inf->zs, (const Bytef *)d->text, (uInt)d->len) != Z_OK)
        return NULL;
    bound = deflateBound(&inf->zs, (uLong)len);
    b = xmalloc(sizeof(*b) + bound);
    inf->zs.next_in = (Bytef *)text;
    inf->zs.avail_in = (uInt)len;
    inf->zs.next_out = b->data;
    inf->zs.avail_out = (uInt)bound;
    if (deflate(&inf->zs, Z_FINISH) != Z_STREAM_END || inf->zs.total_out >= len) {
        free(b);
        return NULL;
    }
    b->len = (uint32_t)len;
    b->zlen = (uint32_t)inf->zs.total_out;
    return xrealloc(b, sizeof(*b) + b->zlen);
}

#define Z_WBITS (-12) /* raw deflate, 4 KiB window: the dictionary plus an object */
#define Z_MEMLEVEL 4

/* The blob of text; never NULL. Informer thread only. */
static struct blob *pack(struct informer *inf, const char *text)
{
    size_t len = strlen(text);
    struct blob *b;

    if (!inf->zs_ready) {
        memset(&inf->zs, 0, sizeof(inf->zs));
        inf->zs_ready = deflateInit2(&inf->zs, 6, Z_DEFLATED, Z_WBITS, Z_MEMLEVEL,
                                     Z_DEFAULT_STRATEGY) == Z_OK;
    }
    if (!inf->dict)
        inf->dict = zdict_new(text, len);
    b = deflate_with(inf, text, len, inf->dict);
    if ((!b || b->zlen > len / 5) && len >= 256) {
        /* unlike the dictionary: this object is the next one (the old one lives on in the
         * blobs deflated against it) */
        free(b);
        zdict_put(inf->dict);
        inf->dict = zdict_new(text, len);
        b = deflate_with(inf, text, len, inf->dict);
    }
    if (b) {
        b->dict = inf->dict;
        inf->dict->refs++;
        return b;
    }
    b = xmalloc(sizeof(*b) + len + 1); /* incompressible (or no zlib): the text itself */
    b->dict = NULL;
    b->len = (uint32_t)len;
    b->zlen = 0;
    memcpy(b->data, text, len + 1);
    return b;
}

static void blob_free(struct blob *b)
{
    if (b)
        zdict_put(b->dict);
    free(b);
}

/* The blob's object, parsed: a new reference, or NULL. */
static json_t *unpack(const struct informer *inf, const struct blob *b)
{
    z_stream zs;
    char *text;
    json_t *o = NULL;

    (void)inf;
    if (!b->dict)
        return json_loadb((const char *)b->data, b->len, 0, NULL);
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, Z_WBITS) != Z_OK)
        return NULL;
    text = xmalloc((size_t)b->len + 1);
    zs.next_in = (Bytef *)b->data;
    zs.avail_in = b->zlen;
    zs.next_out = (Bytef *)text;
    zs.avail_out = b->len;
    if (inflateSetDictionary(&zs, (const Bytef *)b->dict->text, (uInt)b->dict->len) == Z_OK &&
        inflate(&zs, Z_FINISH) == Z_STREAM_END && zs.total_out == b->len)
        o = json_loadb(text, b->len, 0, NULL);
    inflateEnd(&zs);
    free(text);
    return o;
}

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
        return unpack(inf, v);
    return json_incref(v);
}

static void drop(const struct informer *inf, void *v)
{
    if (!v)
        return;
    if (inf->mode == MODE_JSON)
        json_decref(v);
    else if (inf->mode == MODE_COMPACT)
        blob_free(v);
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
                inf->rh.on_delete(inf->rh.ud, key, last);
            if (last != old)
                inf->tr.free(last);
        }
    } else if (old && inf->rh.on_update) {
        inf->rh.on_update(inf->rh.ud, key, old, rec);
    } else if (!old && inf->rh.on_add) {
        inf->rh.on_add(inf->rh.ud, key, rec);
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
        char *text = json_dumps(nobj, JSON_COMPACT);
        if (!text) { /* out of memory in jansson */
            json_decref(nobj);
            return 0;
        }
        val = pack(inf, text);
        free(text);
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

/* ---- the cache as the watch's known set (struct watch_known) */

static bool known_rv(void *ud, const char *key, char *out, size_t n)
{
    struct informer *inf = ud;
    const char *rv = NULL;
    json_t *o = NULL;
    void *v;

    pthread_mutex_lock(&inf->mu);
    v = strmap_get(&inf->cache, key);
    if (v && inf->mode == MODE_TYPED)
        rv = inf->tr.rv(v);
    else if (v && inf->mode == MODE_COMPACT)
        rv = kube_object_rv(o = unpack(inf, v)); /* relists only: rare */
    else if (v)
        rv = kube_object_rv(v);
    if (rv)
        snprintf(out, n, "%s", rv);
    pthread_mutex_unlock(&inf->mu);
    json_decref(o);
    return rv != NULL;
}

static void known_each(void *ud, void (*fn)(void *fud, const char *key), void *fud)
{
    struct informer *inf = ud;
    struct strmap_iter it;
    struct strmap_entry *e;

    pthread_mutex_lock(&inf->mu);
    for (e = strmap_first(&inf->cache, &it); e; e = strmap_next(&inf->cache, &it))
        fn(fud, e->key);
    pthread_mutex_unlock(&inf->mu);
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
    if (inf->mode != MODE_TYPED || inf->tr.rv) {
        struct watch_known k = {known_rv, known_each, inf}; /* watch_new() copies it */
        wo.known = &k;
        inf->w = watch_new(cfg, copts, &wo, on_event, inf);
    } else {
        inf->w = watch_new(cfg, copts, &wo, on_event, inf);
    }
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
static void call(struct informer *inf, const char *key, void *v, informer_obj_fn fn, void *ud)
{
    json_t *o;

    if (inf->mode != MODE_COMPACT) {
        fn(ud, key, v);
        return;
    }
    o = unpack(inf, v);
    if (o)
        fn(ud, key, o);
    json_decref(o);
}

bool informer_peek(struct informer *inf, const char *key, informer_obj_fn fn, void *ud)
{
    void *v;

    pthread_mutex_lock(&inf->mu);
    v = strmap_get(&inf->cache, key);
    if (v)
        call(inf, key, v, fn, ud);
    pthread_mutex_unlock(&inf->mu);
    return v != NULL;
}

void informer_each(struct informer *inf, informer_obj_fn fn, void *ud)
{
    struct strmap_iter it;
    struct strmap_entry *e;

    pthread_mutex_lock(&inf->mu);
    for (e = strmap_first(&inf->cache, &it); e; e = strmap_next(&inf->cache, &it))
        call(inf, e->key, e->val, fn, ud);
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
    if (inf->zs_ready)
        deflateEnd(&inf->zs);
    zdict_put(inf->dict);
    for (size_t i = 0; inf->fields && inf->fields[i]; i++)
        free(inf->fields[i]);
    free(inf->fields);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->synced_cv);
    free(inf);
}
