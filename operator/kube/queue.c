/* queue.c - de-duplicating work queue with per-key backoff and delays (see queue.h). */
#include "operator/kube/queue.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/kube_err.h"
#include "operator/kube/strmap.h"

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char **fifo; /* ready keys, in order; each also in dirty */
    size_t head, n, cap;
    struct strmap dirty;      /* queued (ready) or re-added while processing */
    struct strmap processing; /* handed out, not done yet */
    struct strmap failures;   /* key -> (intptr_t) count */
    struct strmap delayed;    /* key -> (int64_t *) due time in ms, monotonic */
    long base_ms, max_ms;
    bool shutdown;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct queue *queue_new(long base_ms, long max_ms)
{
    struct queue *q = xcalloc(1, sizeof(*q));
    pthread_condattr_t ca;

    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    strmap_init(&q->dirty);
    strmap_init(&q->processing);
    strmap_init(&q->failures);
    strmap_init(&q->delayed);
    q->base_ms = base_ms > 0 ? base_ms : QUEUE_BASE_MS;
    q->max_ms = max_ms > 0 ? max_ms : QUEUE_MAX_MS;
    return q;
}

void queue_free(struct queue *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->fifo[(q->head + i) % q->cap]);
    free(q->fifo);
    strmap_cleanup(&q->dirty, NULL);
    strmap_cleanup(&q->processing, NULL);
    strmap_cleanup(&q->failures, NULL);
    strmap_cleanup(&q->delayed, free);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static void push(struct queue *q, const char *key)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        char **f = xcalloc(cap, sizeof(*f));
        for (size_t i = 0; i < q->n; i++)
            f[i] = q->fifo[(q->head + i) % q->cap];
        free(q->fifo);
        q->fifo = f;
        q->cap = cap;
        q->head = 0;
    }
    q->fifo[(q->head + q->n) % q->cap] = xstrdup(key);
    q->n++;
}

/* Caller holds mu. */
static void add_locked(struct queue *q, const char *key)
{
    if (q->shutdown || strmap_has(&q->dirty, key))
        return;
    strmap_put(&q->dirty, key, NULL);
    if (strmap_has(&q->processing, key))
        return; /* queued again by queue_done() */
    push(q, key);
    pthread_cond_signal(&q->cv);
}

void queue_add(struct queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    add_locked(q, key);
    pthread_mutex_unlock(&q->mu);
}

void queue_add_after(struct queue *q, const char *key, long delay_ms)
{
    int64_t due = now_ms() + (delay_ms > 0 ? delay_ms : 0), *cur;

    if (delay_ms <= 0) {
        queue_add(q, key);
        return;
    }
    pthread_mutex_lock(&q->mu);
    if (!q->shutdown) {
        cur = strmap_get(&q->delayed, key);
        if (!cur) {
            cur = xmalloc(sizeof(*cur));
            *cur = due;
            strmap_put(&q->delayed, key, cur);
        } else if (due < *cur) {
            *cur = due;
        }
        pthread_cond_broadcast(&q->cv); /* a sleeper may need to wake earlier */
    }
    pthread_mutex_unlock(&q->mu);
}

long queue_add_rate_limited(struct queue *q, const char *key)
{
    intptr_t f;
    long delay;

    pthread_mutex_lock(&q->mu);
    f = (intptr_t)strmap_get(&q->failures, key);
    delay = f >= 40 ? q->max_ms : q->base_ms << f;
    if (delay > q->max_ms || delay <= 0)
        delay = q->max_ms;
    strmap_put(&q->failures, key, (void *)(f + 1));
    pthread_mutex_unlock(&q->mu);
    queue_add_after(q, key, delay);
    return delay;
}

void queue_forget(struct queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    strmap_del(&q->failures, key);
    pthread_mutex_unlock(&q->mu);
}

int queue_failures(struct queue *q, const char *key)
{
    intptr_t f;
    pthread_mutex_lock(&q->mu);
    f = (intptr_t)strmap_get(&q->failures, key);
    pthread_mutex_unlock(&q->mu);
    return (int)f;
}

/* Moves due delayed keys to the fifo; returns the next due time or INT64_MAX. Holds mu. */
static int64_t promote(struct queue *q)
{
    int64_t now = now_ms(), next = INT64_MAX;

    for (;;) {
        struct strmap_iter it;
        struct strmap_entry *e;
        char *k = NULL;
        for (e = strmap_first(&q->delayed, &it); e; e = strmap_next(&q->delayed, &it)) {
            int64_t due = *(int64_t *)e->val;
            if (due <= now) {
                k = xstrdup(e->key);
                break;
            }
        }
        if (!k)
            break;
        free(strmap_del(&q->delayed, k));
        add_locked(q, k);
        free(k);
    }
    struct strmap_iter it;
    for (struct strmap_entry *e = strmap_first(&q->delayed, &it); e;
         e = strmap_next(&q->delayed, &it)) {
        int64_t due = *(int64_t *)e->val;
        if (due < next)
            next = due;
    }
    return next;
}

int queue_get(struct queue *q, char **key, long timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
    int rc = 0;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        int64_t next = promote(q), wake;
        struct timespec ts;
        if (q->shutdown) {
            rc = OP_ECANCELED;
            break;
        }
        if (q->n > 0) {
            *key = q->fifo[q->head];
            q->head = (q->head + 1) % q->cap;
            q->n--;
            strmap_del(&q->dirty, *key);
            strmap_put(&q->processing, *key, NULL);
            break;
        }
        if (now_ms() >= deadline) {
            rc = OP_ETIMEDOUT;
            break;
        }
        wake = next < deadline ? next : deadline;
        if (wake == INT64_MAX) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        ts.tv_sec = (time_t)(wake / 1000);
        ts.tv_nsec = (long)(wake % 1000) * 1000000L;
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void queue_done(struct queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    strmap_del(&q->processing, key);
    if (strmap_has(&q->dirty, key) && !q->shutdown) {
        /* Added while a worker had it: now it may go to the next worker. */
        push(q, key);
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

size_t queue_len(struct queue *q)
{
    size_t n;
    pthread_mutex_lock(&q->mu);
    promote(q);
    n = q->n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void queue_shutdown(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
