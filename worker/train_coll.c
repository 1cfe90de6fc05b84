/*
 * train_coll.c - train_opts' reduce hooks on coll.h (train_coll.h).
 */
#include "worker/train_coll.h"

#include <string.h>

/* Sums over ranks; train_run divides by the world size. */
static int reduce_sum(float *buf, size_t n, void *ctx)
{
    return coll_allreduce(ctx, buf, n, COLL_SUM);
}

static int push_bucket(float *buf, size_t n, void *ctx)
{
    return coll_grads_push(ctx, buf, n);
}

static int wait_buckets(void *ctx)
{
    return coll_grads_wait(ctx);
}

void train_coll_init(struct train_coll *tc, struct coll *c, size_t bucket_bytes,
                     struct train_opts *o)
{
    memset(tc, 0, sizeof(*tc));
    tc->c = c;
    o->reduce = reduce_sum;
    o->reduce_ctx = c;
    o->bucket_bytes = bucket_bytes;
    if (bucket_bytes == 0)
        return;
    /* COLL_SUM, not COLL_AVG: the same sums as reduce_sum, so the same bits */
    tc->g = coll_grads_new(c, COLL_SUM);
    o->reduce_push = push_bucket;
    o->reduce_wait = wait_buckets;
    o->bucket_ctx = tc->g;
}

void train_coll_cleanup(struct train_coll *tc)
{
    coll_grads_free(tc->g);
    tc->g = NULL;
}
