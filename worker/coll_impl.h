/*
 * coll_impl.h - what a collectives backend implements (internal to coll*.c / coll_nccl.cu).
 * A backend fills a struct coll_ops; coll.c does argument checks, the "broken after an error"
 * rule and the bucketer on top of it.
 */
#ifndef GANTRY_COLL_IMPL_H
#define GANTRY_COLL_IMPL_H

#include "worker/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

struct coll_ops {
    const char *name;
    int (*allreduce)(struct coll *c, float *buf, size_t n, enum coll_red op);
    int (*broadcast)(struct coll *c, void *buf, size_t bytes, int root);
    int (*allgather)(struct coll *c, const void *send, void *recv, size_t bytes);
    int (*barrier)(struct coll *c);
    void (*destroy)(struct coll *c); /* frees impl */
};

struct coll {
    const struct coll_ops *ops;
    int rank, world;
    int err;    /* first error; sticky */
    void *impl; /* the backend's state */
};

/* Allocates a struct coll for a backend; impl is stolen. */
struct coll *coll_wrap(const struct coll_ops *ops, int rank, int world, void *impl);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_COLL_IMPL_H */
