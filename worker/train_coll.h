/*
 * train_coll.h - the training loop's all-reduce hooks (train.h) on the collectives (coll.h):
 * the glue that keeps train.c free of any collective backend.
 *
 * train_coll_init() sets o->reduce to a synchronous sum over c and, when bucket_bytes > 0, the
 * bucket hooks (reduce_push, reduce_wait) to a coll_grads bucketer started here, whose thread
 * sums each pushed bucket while backward goes on. During a step the bucketer owns c (coll.h):
 * nothing else may call a collective on c between the first push and the wait. The GPU loop
 * (train_gpu.h) reduces device memory from its own comm thread and takes only o->reduce, so
 * gantry-worker passes bucket_bytes 0 for it.
 */
#ifndef GANTRY_TRAIN_COLL_H
#define GANTRY_TRAIN_COLL_H

#include <stddef.h>

#include "worker/coll.h"
#include "worker/train.h"

struct train_coll {
    struct coll *c;         /* borrowed */
    struct coll_grads *g;   /* owned; NULL without buckets */
};

/* c (borrowed) must outlive tc; tc must outlive the training run that uses o. */
void train_coll_init(struct train_coll *tc, struct coll *c, size_t bucket_bytes,
                     struct train_opts *o);
/* Stops the bucketer (waiting for pushed buckets first). Safe on a zeroed tc. */
void train_coll_cleanup(struct train_coll *tc);

#endif /* GANTRY_TRAIN_COLL_H */
