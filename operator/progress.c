/*
 * progress.c - rank 0's /progress -> status.progress and the hang-detection clock (progress.h).
 */
#include "operator/progress.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/xalloc.h"
#include "operator/exec.h"
#include "operator/kube/kube_err.h"
#include "operator/kube/log.h"
#include "operator/kube/strmap.h"

#define BODY_MAX 65536 /* a /progress answer is one short line */
#define ROUND_ARENA_MAX (64u << 20) /* a round's strings: ~150 B a job, 400k jobs */

/* ---------------------------------------------------------------------------------------------
 * The poller
 * ------------------------------------------------------------------------------------------- */

struct entry {
    struct progress_clock clock;
    char *status; /* the status.progress to write as compact JSON (a third of the object's
                   * heap), or NULL */
    bool seen;    /* in this round */
};

struct progress {
    struct exec_shared *sh;
    long interval_ms, timeout_ms;
    int port;
    char *tmpl;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;          /* guarded by mu */
    struct strmap jobs; /* key -> struct entry *; guarded by mu */
    struct progress_stats stats;
};

static void entry_free(void *v)
{
    struct entry *e = v;

    if (e)
        free(e->status);
    free(e);
}

struct progress *progress_new(struct exec_shared *sh, const struct progress_opts *o)
{
    struct progress *p = xcalloc(1, sizeof(*p));

    p->sh = sh;
    p->interval_ms = o && o->interval_ms > 0 ? o->interval_ms : PROGRESS_DEFAULT_INTERVAL_MS;
    p->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms
                                           : (p->interval_ms < 5000 ? p->interval_ms : 5000);
    p->port = o && o->port > 0 ? o->port : RENDER_METRICS_PORT;
    p->tmpl = xstrdup(o && o->url_template ? o->url_template : PROGRESS_DEFAULT_URL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    strmap_init(&p->jobs);
    return p;
}

const struct progress_stats *progress_get_stats(const struct progress *p)
{
    return &p->stats;
}

/* A round plans every job's read up front but holds it compactly: one string arena ("key\0uid\0
 * url\0" per read) and 16 bytes a read; curl handles and answers exist only for the reads in
 * flight (at most PROGRESS_PARALLEL), and each answer is applied as soon as it is in. */
struct round {
    struct buf strs;
    struct plan_ref {
        size_t off;  /* of the read's key in strs */
        int restart; /* the gang whose rank 0 it reads */
    } *refs;
    size_t n, cap;
};

/* One read in flight: rank 0 of one job. */
struct target {
    const char *key, *uid, *url; /* in the round's arena */
    int restart;
    CURL *h;    /* the slot's handle, kept from read to read (less heap churn) */
    bool busy;  /* a read is in flight */
    struct buf body;
    json_t *w; /* the answer, or NULL */
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    struct buf *b = ud;

    return buf_append(b, data, size * nmemb) == 0 ? size * nmemb : 0;
}

static void target_setup(struct progress *p, struct target *t)
{
    buf_init(&t->body, BODY_MAX);
    if (t->h)
        curl_easy_reset(t->h);
    else if (!(t->h = curl_easy_init())) {
        fprintf(stderr, "fatal: curl_easy_init failed (out of memory)\n");
        abort();
    }
    curl_easy_setopt(t->h, CURLOPT_URL, t->url);
    curl_easy_setopt(t->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t->h, CURLOPT_BUFFERSIZE, 1024L); /* the answer is one short line */
    curl_easy_setopt(t->h, CURLOPT_DNS_CACHE_TIMEOUT, 0L); /* one host per job: caching only costs */
    curl_easy_setopt(t->h, CURLOPT_TIMEOUT_MS, p->timeout_ms);
    curl_easy_setopt(t->h, CURLOPT_CONNECTTIMEOUT_MS, p->timeout_ms);
    curl_easy_setopt(t->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(t->h, CURLOPT_WRITEDATA, &t->body);
    curl_easy_setopt(t->h, CURLOPT_PRIVATE, t);
}

static void target_done(struct target *t, CURLcode rc)
{
    long code = 0;

    if (rc == CURLE_OK)
        curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &code);
    if (rc == CURLE_OK && code == 200 && buf_len(&t->body) > 0)
        t->w = json_loadb(buf_ptr(&t->body), buf_len(&t->body), 0, NULL);
    if (t->w && !json_is_object(t->w)) {
        json_decref(t->w);
        t->w = NULL;
    }
    if (!t->w)
        log_debug("Could not read progress", "{s:s, s:s, s:i}", "url", t->url, "error",
                  rc == CURLE_OK ? "bad answer" : curl_easy_strerror(rc), "status", (int)code);
}

static void apply(struct progress *p, struct target *t, time_t now);

/* Points t at read i of the round. */
static void target_bind(const struct round *r, size_t i, struct target *t)
{
    const char *key = buf_ptr(&r->strs) + r->refs[i].off;

    t->key = key;
    t->uid = key + strlen(key) + 1;
    t->url = t->uid + strlen(t->uid) + 1;
    t->restart = r->refs[i].restart;
    t->w = NULL;
}

/* Starts read i of the round in the free slot t. */
static void target_start(struct progress *p, CURLM *m, const struct round *r, size_t i,
                         struct target *t)
{
    target_bind(r, i, t);
    target_setup(p, t);
    curl_multi_add_handle(m, t->h);
    t->busy = true;
}

/* Applies t's answer (or its failure) and frees the slot (its handle stays for the next). */
static void target_finish(struct progress *p, CURLM *m, struct target *t)
{
    apply(p, t, time(NULL));
    json_decref(t->w);
    t->w = NULL;
    curl_multi_remove_handle(m, t->h);
    buf_cleanup(&t->body);
    t->busy = false;
}

/* Reads every planned target, up to PROGRESS_PARALLEL at once, each within the timeout, and
 * applies each answer as it comes in. */
static void fetch_all(struct progress *p, CURLM *m, const struct round *r)
{
    struct target slots[PROGRESS_PARALLEL];
    size_t next = 0, active = 0;
    bool broken = false;

    memset(slots, 0, sizeof(slots));
    while (!broken && (next < r->n || active > 0)) {
        CURLMsg *msg;
        int running, left;

        for (int k = 0; k < PROGRESS_PARALLEL && next < r->n; k++) {
            if (!slots[k].busy) {
                target_start(p, m, r, next++, &slots[k]);
                active++;
            }
        }
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            broken = true;
            break;
        }
        while ((msg = curl_multi_info_read(m, &left))) {
            struct target *t = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
            target_done(t, msg->data.result);
            target_finish(p, m, t);
            active--;
        }
        if (active > 0)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    /* A broken multi handle: what is in flight or not started yet failed. */
    for (int k = 0; k < PROGRESS_PARALLEL; k++) {
        if (slots[k].busy)
            target_finish(p, m, &slots[k]);
        if (slots[k].h)
            curl_easy_cleanup(slots[k].h);
    }
    while (next < r->n) {
        struct target t = {0};
        target_bind(r, next++, &t);
        apply(p, &t, time(NULL));
    }
}

/* Rank 0 of the current gang (restart) of the job with uid job_uid, running, with an IP: its
 * name, uid and IP. */
static bool find_rank0(struct progress *p, const char *key, const char *job_uid, int restart,
                       char *pod, char *uid, char *ip, size_t n)
{
    size_t npods = 0;
    char **keys = exec_index_get(p->sh->pod_index, key, &npods);
    bool found = false;

    for (size_t i = 0; i < npods; i++) {
        struct rec_pod rp;

        if (!found && exec_pod_get(p->sh, keys[i], &rp) && rp.index == 0 &&
            rp.restart == restart && rp.phase == REC_POD_RUNNING && rp.ip[0] && rp.uid[0] &&
            !rp.terminating && rec_pod_owned(&rp, job_uid)) {
            found = snprintf(pod, n, "%s", rp.name) < (int)n &&
                    snprintf(uid, n, "%s", rp.uid) < (int)n &&
                    snprintf(ip, n, "%s", rp.ip) < (int)n;
        }
        free(keys[i]);
    }
    free(keys);
    return found;
}

/* Plans a read for job when it is Running with a running rank 0 of its current gang. */
static void plan_job(struct progress *p, const json_t *job, struct round *r)
{
    const json_t *meta = json_object_get(job, "metadata"), *st = json_object_get(job, "status");
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *phase = json_string_value(json_object_get(st, "phase"));
    char pod[RENDER_NAME_MAX], ip[64], url[PROGRESS_URL_MAX], key[2 * RENDER_NAME_MAX + 2];
    char uid[64];
    int restart;
    size_t off, nk, nu, nl;
    char rec[sizeof(key) + sizeof(uid) + sizeof(url)];

    if (!ns || !name || !phase || strcmp(phase, "Running") != 0)
        return;
    restart = (int)json_integer_value(json_object_get(st, "restarts"));
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    const char *job_uid = json_string_value(json_object_get(meta, "uid"));
    if (!find_rank0(p, key, job_uid ? job_uid : "", restart, pod, uid, ip, sizeof(ip)))
        return;
    if (progress_url(p->tmpl, ns, name, pod, ip, p->port, url, sizeof(url)) != 0) {
        log_warn("Progress URL template does not expand", "{s:s}", "template", p->tmpl);
        return;
    }
    nk = strlen(key) + 1;
    nu = strlen(uid) + 1;
    nl = strlen(url) + 1;
    memcpy(rec, key, nk);
    memcpy(rec + nk, uid, nu);
    memcpy(rec + nk + nu, url, nl);
    off = buf_len(&r->strs);
    if (buf_append(&r->strs, rec, nk + nu + nl) != 0)
        return; /* over the arena's bound: this job waits for a later round */
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->refs = xrealloc(r->refs, r->cap * sizeof(*r->refs));
    }
    r->refs[r->n++] = (struct plan_ref){off, restart};
}

/* Feeds one read into the job's clock and status.progress; queues the job when it changed. */
static void apply(struct progress *p, struct target *t, time_t now)
{
    const json_t *step = json_object_get(t->w, "step");
    json_t *ps = NULL;
    char *text = NULL;
    struct entry *e;
    bool changed = false;

    atomic_fetch_add(&p->stats.reads, 1);
    if (!t->w)
        atomic_fetch_add(&p->stats.read_errors, 1);
    pthread_mutex_lock(&p->mu);
    e = strmap_get(&p->jobs, t->key);
    if (!e) {
        e = xcalloc(1, sizeof(*e));
        strmap_put(&p->jobs, t->key, e);
    }
    e->seen = true;
    const char *state = json_string_value(json_object_get(t->w, "state"));
    progress_clock_observe(&e->clock, t->uid, t->restart,
                           json_is_integer(step) ? json_integer_value(step) : -1,
                           state && strcmp(state, "evaluating") == 0, now);
    if (t->w)
        ps = progress_status(t->w, e->clock.since);
    if (ps && (text = json_dumps(ps, JSON_COMPACT)) && (!e->status || strcmp(text, e->status))) {
        free(e->status);
        e->status = text;
        text = NULL;
        changed = true;
    }
    pthread_mutex_unlock(&p->mu);
    free(text);
    json_decref(ps);
    if (changed) {
        atomic_fetch_add(&p->stats.status_changes, 1);
        queue_add(p->sh->queue, t->key);
    }
}

struct plan {
    struct progress *p;
    struct round *r;
};

static void plan_cb(void *ud, const char *key, const void *job)
{
    struct plan *pl = ud;

    plan_job(pl->p, job, pl->r);
}

static void *run(void *arg)
{
    struct progress *p = arg;
    CURLM *m = NULL;

    for (;;) {
        struct timespec until;
        struct strmap_iter it;
        struct strmap_entry *se;
        struct plan pl;
        struct round r;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += p->interval_ms / 1000;
        until.tv_nsec += (p->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&p->mu);
        while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT)
            ;
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        for (se = strmap_first(&p->jobs, &it); se; se = strmap_next(&p->jobs, &it))
            ((struct entry *)se->val)->seen = false;
        pthread_mutex_unlock(&p->mu);

        atomic_fetch_add(&p->stats.polls, 1);
        /* one job at a time: the cache keeps jobs as compact text (informer.h) */
        memset(&r, 0, sizeof(r));
        buf_init(&r.strs, ROUND_ARENA_MAX);
        pl.p = p;
        pl.r = &r;
        informer_each(p->sh->jobs, plan_cb, &pl);
        if (!m) /* a multi handle per round: its caches hold ~200 bytes per host read */
            m = curl_multi_init();
        fetch_all(p, m, &r);
        curl_multi_cleanup(m);
        m = NULL;
        buf_cleanup(&r.strs);
        free(r.refs);

        /* Jobs not Running or without a running rank 0 lose their clock. */
        pthread_mutex_lock(&p->mu);
        for (;;) {
            const char *gone = NULL;
            for (se = strmap_first(&p->jobs, &it); se && !gone; se = strmap_next(&p->jobs, &it))
                if (!((struct entry *)se->val)->seen)
                    gone = se->key;
            if (!gone)
                break;
            entry_free(strmap_del(&p->jobs, gone));
        }
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int progress_start(struct progress *p)
{
    if (pthread_create(&p->th, NULL, run, p) != 0)
        return OP_EIO;
    p->started = true;
    return 0;
}

void progress_stop(struct progress *p)
{
    if (!p || !p->started)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    p->started = false;
}

void progress_free(struct progress *p)
{
    if (!p)
        return;
    progress_stop(p);
    strmap_cleanup(&p->jobs, entry_free);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->tmpl);
    free(p);
}

void progress_lookup(struct progress *p, const char *key, struct rec_input *in, json_t **hold)
{
    struct entry *e;

    *hold = NULL;
    in->progress = NULL;
    in->progress_restart = -1;
    in->progress_since = 0;
    in->progress_advanced = false;
    if (p) {
        pthread_mutex_lock(&p->mu);
        e = strmap_get(&p->jobs, key);
        if (e && e->clock.uid[0] && e->clock.step >= 0) { /* rank 0 answered at least once */
            *hold = e->status ? json_loads(e->status, 0, NULL) : NULL;
            in->progress = *hold;
            in->progress_restart = e->clock.restart;
            in->progress_since = e->clock.since;
            in->progress_advanced = e->clock.advanced;
        }
        pthread_mutex_unlock(&p->mu);
    }
    /* Rank 0's own last word beats the poller's last reading, and fills in for a job that
     * ended before any read (a short job, a long --progress-interval). */
    json_t *fin = progress_final(in);
    if (fin) {
        json_decref(*hold);
        *hold = fin;
        in->progress = fin;
    }
}
