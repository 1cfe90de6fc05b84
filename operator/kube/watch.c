/*
 * watch.c - list+watch with resourceVersion tracking, relist on 410 and dead-watch detection.
 * See watch.h for the contract.
 */
#include "operator/kube/watch.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/log.h"
#include "operator/kube/strmap.h"

static const char *const event_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};

const char *kube_event_name(enum kube_event t)
{
    return (unsigned)t <= KUBE_EVENT_ERROR ? event_names[t] : "UNKNOWN";
}

/* ---------------------------------------------------------------- framing */

void watch_framer_init(struct watch_framer *f, size_t max_line)
{
    buf_init(&f->line, max_line);
}

void watch_framer_cleanup(struct watch_framer *f)
{
    buf_cleanup(&f->line);
}

void watch_framer_reset(struct watch_framer *f)
{
    buf_reset(&f->line);
}

int watch_framer_feed(struct watch_framer *f, const char *data, size_t len, watch_line_fn fn,
                      void *ud)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        int rc;

        if (buf_append(&f->line, data, n)) {
            buf_reset(&f->line);
            return OP_ETOOBIG;
        }
        if (!nl)
            return 0;
        data += n + 1;
        len -= n + 1;
        if (buf_len(&f->line) > 0 && !(buf_len(&f->line) == 1 && buf_ptr(&f->line)[0] == '\r')) {
            rc = fn(ud, buf_ptr(&f->line), buf_len(&f->line));
            buf_reset(&f->line);
            if (rc)
                return rc;
        }
        buf_reset(&f->line);
    }
    return 0;
}

int watch_parse_event(const char *line, size_t len, enum kube_event *type, json_t **obj)
{
    json_t *doc = json_loadb(line, len, 0, NULL), *o;
    const char *t;
    int rc = OP_EPARSE;

    t = json_string_value(json_object_get(doc, "type"));
    o = json_object_get(doc, "object");
    if (!t || !json_is_object(o))
        goto out;
    for (int i = 0; i <= KUBE_EVENT_ERROR; i++) {
        if (strcmp(t, event_names[i]) == 0) {
            *type = (enum kube_event)i;
            *obj = json_incref(o);
            rc = 0;
            break;
        }
    }
out:
    json_decref(doc);
    return rc;
}

/* ---------------------------------------------------------------- list + watch */

struct watch {
    struct kube_client *kc;
    struct watch_opts o;
    char *path, *labels, *fields;
    watch_event_fn fn;
    void *ud;
    struct strmap known; /* key -> resourceVersion (char *) of every object delivered */
    struct watch_known ext; /* the caller's instead (ext.rv set), or unused */
    struct watch_framer fr;
    char rv[64];
    atomic_int stop;
    int cb_rc;          /* nonzero: the callback asked to stop */
    bool gone;          /* an ERROR event with 410 arrived */
    bool bad_stream;    /* a line that is not an event: reconnect */
    long got;           /* events on the current connection */
    pthread_mutex_t mu; /* guards stats */
    struct watch_stats st;
};

struct watch *watch_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                        const struct watch_opts *opts, watch_event_fn fn, void *ud)
{
    struct watch *w = xcalloc(1, sizeof(*w));

    w->kc = kube_client_new(cfg, copts);
    w->o = *opts;
    w->path = xstrdup(opts->path);
    w->labels = opts->label_selector ? xstrdup(opts->label_selector) : NULL;
    w->fields = opts->field_selector ? xstrdup(opts->field_selector) : NULL;
    w->o.path = w->path;
    w->o.label_selector = w->labels;
    w->o.field_selector = w->fields;
    if (w->o.dead_after_s <= 0)
        w->o.dead_after_s = 120;
    if (w->o.backoff_max_ms <= 0)
        w->o.backoff_max_ms = 30000;
    w->fn = fn;
    w->ud = ud;
    if (opts->known)
        w->ext = *opts->known;
    w->o.known = NULL;
    strmap_init(&w->known);
    watch_framer_init(&w->fr, WATCH_MAX_LINE);
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->stop, 0);
    return w;
}

void watch_free(struct watch *w)
{
    if (!w)
        return;
    kube_client_free(w->kc);
    strmap_cleanup(&w->known, free);
    watch_framer_cleanup(&w->fr);
    pthread_mutex_destroy(&w->mu);
    free(w->path);
    free(w->labels);
    free(w->fields);
    free(w);
}

void watch_stop(struct watch *w)
{
    atomic_store(&w->stop, 1);
    kube_client_cancel(w->kc);
}

static void set_rv(struct watch *w, const char *rv);

void watch_resume(struct watch *w, const char *rv)
{
    atomic_store(&w->stop, 0);
    w->cb_rc = 0;
    kube_client_reset_cancel(w->kc);
    if (rv)
        set_rv(w, rv);
}

void watch_get_stats(struct watch *w, struct watch_stats *out)
{
    pthread_mutex_lock(&w->mu);
    *out = w->st;
    pthread_mutex_unlock(&w->mu);
}

#define STAT_ADD(w, field, n)                                                                      \
    do {                                                                                           \
        pthread_mutex_lock(&(w)->mu);                                                              \
        (w)->st.field += (n);                                                                      \
        pthread_mutex_unlock(&(w)->mu);                                                            \
    } while (0)

static void set_rv(struct watch *w, const char *rv)
{
    if (!rv || !*rv)
        return;
    pthread_mutex_lock(&w->mu);
    snprintf(w->rv, sizeof(w->rv), "%s", rv);
    snprintf(w->st.rv, sizeof(w->st.rv), "%s", rv);
    pthread_mutex_unlock(&w->mu);
}

static int deliver(struct watch *w, enum kube_event t, json_t *obj)
{
    int rc = w->fn(w->ud, t, obj);
    if (rc)
        w->cb_rc = rc;
    return rc;
}

/* Records obj in the known set and delivers it. */
static int track(struct watch *w, enum kube_event t, json_t *obj)
{
    char key[512];
    const char *rv = kube_object_rv(obj);

    if (!w->ext.rv && kube_object_key(obj, key, sizeof(key)) == 0) {
        if (t == KUBE_EVENT_DELETED)
            free(strmap_del(&w->known, key));
        else
            free(strmap_put(&w->known, key, xstrdup(rv ? rv : "")));
    }
    return deliver(w, t, obj);
}

static json_t *tombstone(const char *key, const char *rv)
{
    const char *slash = strchr(key, '/');
    json_t *meta = json_object();

    if (slash) {
        json_object_set_new(meta, "namespace", json_stringn(key, (size_t)(slash - key)));
        json_object_set_new(meta, "name", json_string(slash + 1));
    } else {
        json_object_set_new(meta, "name", json_string(key));
    }
    json_object_set_new(meta, "resourceVersion", json_string(rv ? rv : ""));
    json_object_set_new(meta, "annotations",
                        json_pack("{s:s}", "gantry.dev/synthesized-delete", "true"));
    return json_pack("{s:o}", "metadata", meta);
}

struct relist_state {
    struct watch *w;
    struct strmap seen; /* keys in this list (values unused) */
};

/* One page of the list: ADDED for what is new, MODIFIED for another resourceVersion. */
static int relist_page(void *ud, json_t *items, bool restarted)
{
    struct relist_state *rs = ud;
    struct watch *w = rs->w;
    char key[512];
    json_t *it;
    size_t i;
    int rc = 0;

    if (restarted) { /* a new snapshot: what only the old one had must be seen again */
        strmap_cleanup(&rs->seen, NULL);
        strmap_init(&rs->seen);
    }
    json_array_foreach(items, i, it)
    {
        const char *orv = kube_object_rv(it), *old;
        char ext_rv[128];
        if (kube_object_key(it, key, sizeof(key)))
            continue;
        strmap_put(&rs->seen, key, NULL);
        if (w->ext.rv)
            old = w->ext.rv(w->ext.ud, key, ext_rv, sizeof(ext_rv)) ? ext_rv : NULL;
        else
            old = strmap_get(&w->known, key);
        if (!old)
            rc = track(w, KUBE_EVENT_ADDED, it);
        else if (!orv || strcmp(old, orv) != 0)
            rc = track(w, KUBE_EVENT_MODIFIED, it);
        if (rc)
            return rc;
    }
    return 0;
}

struct gone {
    const struct strmap *seen;
    char **keys;
    size_t n, cap;
};

static void gone_cb(void *ud, const char *key)
{
    struct gone *g = ud;

    if (strmap_has(g->seen, key))
        return;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 16;
        g->keys = xrealloc(g->keys, g->cap * sizeof(*g->keys));
    }
    g->keys[g->n++] = xstrdup(key);
}

/*
 * Lists page by page (each page delivered and released before the next is read, so memory is
 * bounded by one page) and diffs against the known set (everything is ADDED the first time).
 */
static int relist(struct watch *w)
{
    struct kube_list_opts lo = {
        .label_selector = w->labels, .field_selector = w->fields, .limit = w->o.page_limit};
    struct relist_state rs = {.w = w};
    struct strmap_entry *e;
    struct strmap_iter iter;
    char *rv = NULL, **gone = NULL;
    size_t ngone = 0;
    int rc;

    strmap_init(&rs.seen);
    rc = kube_list_pages(w->kc, w->path, &lo, relist_page, &rs, &rv);
    if (rc)
        goto out;
    /* What we delivered before but the list no longer has was deleted while we were away. */
    if (w->ext.rv) {
        struct gone g = {.seen = &rs.seen};
        w->ext.each(w->ext.ud, gone_cb, &g);
        gone = g.keys;
        ngone = g.n;
    } else {
        for (e = strmap_first(&w->known, &iter); e; e = strmap_next(&w->known, &iter))
            ngone += !strmap_has(&rs.seen, e->key);
        if (ngone) {
            gone = xcalloc(ngone, sizeof(*gone));
            ngone = 0;
            for (e = strmap_first(&w->known, &iter); e; e = strmap_next(&w->known, &iter))
                if (!strmap_has(&rs.seen, e->key))
                    gone[ngone++] = xstrdup(e->key);
        }
    }
    for (size_t i = 0; i < ngone && rc == 0; i++) {
        char *grv = w->ext.rv ? NULL : strmap_del(&w->known, gone[i]);
        json_t *t = tombstone(gone[i], grv);

        STAT_ADD(w, synthesized_deletes, 1);
        rc = deliver(w, KUBE_EVENT_DELETED, t);
        json_decref(t);
        free(grv);
    }
    if (rc)
        goto out;
    set_rv(w, rv);
out:
    for (size_t i = 0; i < ngone; i++)
        free(gone[i]);
    free(gone);
    strmap_cleanup(&rs.seen, NULL);
    free(rv);
    return rc;
}

static int on_line(void *ud, const char *line, size_t len)
{
    struct watch *w = ud;
    enum kube_event t;
    json_t *obj = NULL;
    int rc = 0;

    if (watch_parse_event(line, len, &t, &obj)) {
        log_warn("Dropped a watch stream with a malformed event", "{s:s, s:s%}", "path", w->path,
                 "line", line, len > 200 ? (size_t)200 : len);
        w->bad_stream = true;
        return OP_EPARSE;
    }
    w->got++;
    STAT_ADD(w, events, 1);
    switch (t) {
    case KUBE_EVENT_ERROR: {
        struct kube_status st;
        char *text = json_dumps(obj, JSON_COMPACT);
        int e = kube_status_parse(text, text ? strlen(text) : 0, 0, &st);
        free(text);
        if (e == OP_EGONE) {
            /* 410 Gone: our resourceVersion fell out of the watch cache, so relist. */
            w->gone = true;
        } else {
            STAT_ADD(w, errors, 1);
            log_warn("Watch returned an error event", "{s:s, s:i, s:s}", "path", w->path, "code",
                     (int)st.code, "message", st.message);
        }
        rc = OP_EAPI; /* end this connection either way */
        break;
    }
    case KUBE_EVENT_BOOKMARK:
        STAT_ADD(w, bookmarks, 1);
        set_rv(w, kube_object_rv(obj));
        rc = deliver(w, t, obj);
        break;
    default:
        set_rv(w, kube_object_rv(obj));
        rc = track(w, t, obj);
        break;
    }
    json_decref(obj);
    return rc;
}

static int on_data(void *ud, const char *data, size_t len)
{
    struct watch *w = ud;
    int rc = watch_framer_feed(&w->fr, data, len, on_line, w);

    if (rc == OP_ETOOBIG) {
        log_warn("Dropped a watch stream with an event over WATCH_MAX_LINE", "{s:s}", "path",
                 w->path);
        w->bad_stream = true;
    }
    return rc;
}

static long jitter(long ms)
{
    return ms / 2 + (long)(random() % (ms / 2 + 1));
}

static int sleep_unless_stopped(struct watch *w, long ms)
{
    while (ms > 0 && !atomic_load(&w->stop)) {
        long step = ms < 50 ? ms : 50;
        struct timespec ts = {0, step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
    return atomic_load(&w->stop) ? OP_ECANCELED : 0;
}

static void watch_url(struct watch *w, char *q, size_t n, long timeout_s)
{
    char *l = w->labels ? curl_easy_escape(NULL, w->labels, 0) : NULL;
    char *f = w->fields ? curl_easy_escape(NULL, w->fields, 0) : NULL;

    snprintf(q, n,
             "%s%swatch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%ld"
             "%s%s%s%s",
             w->path, strchr(w->path, '?') ? "&" : "?", w->rv, timeout_s,
             l ? "&labelSelector=" : "", l ? l : "", f ? "&fieldSelector=" : "", f ? f : "");
    curl_free(l);
    curl_free(f);
}

int watch_run(struct watch *w)
{
    bool need_list = w->rv[0] == 0;
    long backoff = 0;
    char q[4096];
    int rc = 0;

    while (!atomic_load(&w->stop) && !w->cb_rc) {
        long code = 0, timeout_s;
        if (need_list) {
            rc = relist(w);
            if (w->cb_rc)
                break;
            if (rc) {
                if (rc == OP_ECANCELED)
                    break;
                STAT_ADD(w, errors, 1);
                backoff = backoff ? backoff * 2 : 500;
                if (backoff > w->o.backoff_max_ms)
                    backoff = w->o.backoff_max_ms;
                log_warn("List failed; retrying", "{s:s, s:s, s:s, s:i}", "path", w->path, "error",
                         op_strerror(rc), "message", kube_last_status(w->kc)->message, "backoffMs",
                         (int)backoff);
                if (sleep_unless_stopped(w, jitter(backoff)))
                    break;
                continue;
            }
            need_list = false;
            /* The watch runs on the stream connection; the list's would idle until a relist. */
            kube_client_close_idle(w->kc);
            if (w->o.on_listed)
                w->o.on_listed(w->ud);
            pthread_mutex_lock(&w->mu);
            w->st.lists++;
            pthread_mutex_unlock(&w->mu);
        }
        timeout_s = w->o.timeout_s > 0 ? w->o.timeout_s : 300 + random() % 300;
        watch_url(w, q, sizeof(q), timeout_s);
        w->gone = w->bad_stream = false;
        w->got = 0;
        watch_framer_reset(&w->fr);
        rc = kube_stream(w->kc, q, on_data, w, w->o.dead_after_s, timeout_s + 30, &code);
        if (atomic_load(&w->stop) || w->cb_rc)
            break;
        if (w->gone || code == 410) {
            STAT_ADD(w, relists, 1);
            log_info("Relisting after 410 Gone", "{s:s, s:s}", "path", w->path, "rv", w->rv);
            need_list = true;
            continue;
        }
        STAT_ADD(w, reconnects, 1);
        if (w->got > 0 && !w->bad_stream)
            backoff = 0; /* a healthy connection that ended (timeoutSeconds): resume at once */
        if (rc == 0 && w->got > 0)
            continue;
        if (rc && rc != OP_EAPI)
            log_warn("Watch failed; reconnecting", "{s:s, s:s, s:s}", "path", w->path, "error",
                     op_strerror(rc), "message", kube_last_status(w->kc)->message);
        if (rc)
            STAT_ADD(w, errors, 1);
        backoff = backoff ? backoff * 2 : 200;
        if (backoff > w->o.backoff_max_ms)
            backoff = w->o.backoff_max_ms;
        if (sleep_unless_stopped(w, jitter(backoff)))
            break;
    }
    return w->cb_rc ? w->cb_rc : OP_ECANCELED;
}
