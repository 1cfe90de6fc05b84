/*
 * coll_nccl.h - the nccl collectives backend (GPUs). Buffers passed to coll_* are device memory.
 *
 * Rank 0 creates the NCCL unique id and hands it to the others through the store; every rank
 * then joins the communicator on `device`. The communicator is non-blocking (config.blocking = 0):
 * a peer that dies or never calls init after the id exchange makes coll_nccl_new fail within
 * opts.timeout_ms (DIST_ETIMEDOUT, or DIST_EPEER when NCCL reports it) after ncclCommAbort,
 * instead of ncclCommInitRank's wait forever. Each collective is enqueued on `stream` (its
 * ncclInProgress polled away) and waited for with a poll loop that checks
 * ncclCommGetAsyncError(): a peer that dies or hangs makes the call fail within opts.timeout_ms
 * (default 60 s) after ncclCommAbort(), with DIST_EPEER or DIST_ETIMEDOUT, and the worker exits
 * with a retryable code. opts.bf16_wire, chunk_bytes and
 * sock_buf_bytes are ignored (NCCL picks its own protocol).
 *
 * Without CUDA (GANTRY_HAVE_NCCL undefined) coll_nccl_new() is a stub that says how to get it
 * and returns DIST_EUNSUPPORTED, so callers need no #ifdef (STYLE.md §5).
 */
#ifndef GANTRY_COLL_NCCL_H
#define GANTRY_COLL_NCCL_H

#include "worker/coll.h"
#include "worker/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#ifdef GANTRY_HAVE_NCCL
/* stream may be NULL (the backend creates its own). *out is new: coll_free(). */
int coll_nccl_new(struct store *st, int device, struct CUstream_st *stream,
                  const struct coll_opts *opts, struct coll **out);
#else
static inline int coll_nccl_new(struct store *st, int device, struct CUstream_st *stream,
                                const struct coll_opts *opts, struct coll **out)
{
    (void)st, (void)device, (void)stream, (void)opts, (void)out;
    dist_log("This gantry-worker was built without CUDA/NCCL: use the tcp backend "
             "(gpusPerReplica: 0), or rebuild with GANTRY_CUDA=ON after "
             "`hack/install-deps.sh --cuda`");
    return DIST_EUNSUPPORTED;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_COLL_NCCL_H */
