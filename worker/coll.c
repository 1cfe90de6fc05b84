/*
 * coll.c - the backend-independent part of the collectives: dispatch, sticky errors, the
 * gradient bucketer thread, bf16 conversion.
 */
#include "worker/coll.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "worker/coll_impl.h"
#include "worker/dist.h"

struct coll *coll_wrap(const struct coll_ops *ops, int rank, int world, void *impl)
{
    struct coll *c = xcalloc(1, sizeof(*c));

    c->ops = ops;
    c->rank = rank;
    c->world = world;
    c->impl = impl;
    return c;
}

const char *coll_backend(const struct coll *c)
{
    return c->ops->name;
}

int coll_rank(const struct coll *c)
{
    return c->rank;
}

int coll_world_size(const struct coll *c)
{
    return c->world;
}

/* A failed collective leaves peers mid-stream: nothing after it can be trusted. */
static int sticky(struct coll *c, int rc)
{
    if (rc && !c->err)
        c->err = rc;
    return rc;
}

int coll_allreduce(struct coll *c, float *buf, size_t n, enum coll_red op)
{
    if (c->err)
        return c->err;
    if (n == 0)
        return 0;
    return sticky(c, c->ops->allreduce(c, buf, n, op));
}

int coll_broadcast(struct coll *c, void *buf, size_t bytes, int root)
{
    if (c->err)
        return c->err;
    if (root < 0 || root >= c->world) {
        dist_log("coll_broadcast: root %d is outside 0..%d", root, c->world - 1);
        return DIST_EUSAGE;
    }
    if (bytes == 0 || c->world == 1)
        return 0;
    return sticky(c, c->ops->broadcast(c, buf, bytes, root));
}

int coll_allgather(struct coll *c, const void *send, void *recv, size_t bytes)
{
    if (c->err)
        return c->err;
    if (bytes == 0)
        return 0;
    /* The backend places send itself: for nccl these are device pointers. */
    return sticky(c, c->ops->allgather(c, send, recv, bytes));
}

int coll_barrier(struct coll *c)
{
    if (c->err)
        return c->err;
    if (c->world == 1)
        return 0;
    return sticky(c, c->ops->barrier(c));
}

void coll_free(struct coll *c)
{
    if (!c)
        return;
    c->ops->destroy(c);
    free(c);
}

/* ---- gradient buckets ---------------------------------------------------------------------- */

struct bucket {
    float *p;
    size_t n;
};

struct coll_grads {
    struct coll *c;
    enum coll_red op;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, or stop */
    pthread_cond_t done_cv; /* a bucket finished */
    struct bucket *q;
    size_t head, tail, cap; /* q[head..tail) pending; head == tail: empty */
    bool busy, stop;
    int err;
};

static void *grads_main(void *arg)
{
    struct coll_grads *g = arg;

    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (g->head == g->tail && !g->stop)
            pthread_cond_wait(&g->cv, &g->mu);
        if (g->head == g->tail)
            break;
        struct bucket b = g->q[g->head++];
        g->busy = true;
        int err = g->err;
        pthread_mutex_unlock(&g->mu);
        /* After a failure, drain the queue without touching the network. */
        int rc = err ? err : coll_allreduce(g->c, b.p, b.n, g->op);
        pthread_mutex_lock(&g->mu);
        if (rc && !g->err)
            g->err = rc;
        g->busy = false;
        pthread_cond_broadcast(&g->done_cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

struct coll_grads *coll_grads_new(struct coll *c, enum coll_red op)
{
    struct coll_grads *g = xcalloc(1, sizeof(*g));

    g->c = c;
    g->op = op;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    if (pthread_create(&g->thread, NULL, grads_main, g) != 0) {
        dist_log("Could not start the gradient all-reduce thread");
        abort();
    }
    return g;
}

int coll_grads_push(struct coll_grads *g, float *buf, size_t n)
{
    int err;

    pthread_mutex_lock(&g->mu);
    err = g->err;
    if (!err) {
        if (g->head == g->tail)
            g->head = g->tail = 0;
        if (g->tail == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 64;
            g->q = xrealloc(g->q, g->cap * sizeof(*g->q));
        }
        g->q[g->tail++] = (struct bucket){buf, n};
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return err;
}

int coll_grads_wait(struct coll_grads *g)
{
    int err;

    pthread_mutex_lock(&g->mu);
    while (g->head != g->tail || g->busy)
        pthread_cond_wait(&g->done_cv, &g->mu);
    err = g->err;
    pthread_mutex_unlock(&g->mu);
    return err;
}

void coll_grads_free(struct coll_grads *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    pthread_cond_destroy(&g->done_cv);
    free(g->q);
    free(g);
}

/* ---- bf16 ------------------------------------------------------------------------------- */

unsigned short coll_f32_to_bf16(float f)
{
    unsigned int u;

    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

float coll_bf16_to_f32(unsigned short h)
{
    unsigned int u = (unsigned int)h << 16;
    float f;

    memcpy(&f, &u, 4);
    return f;
}
