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

/* ---- enqueue-only all-reduce (the GPU loop's overlap with backward, worker/train_gpu.c) ----
 * c must come from coll_nccl_new (DIST_EUSAGE otherwise). */
/* The stream the collectives run on (borrowed): make it wait for the data's producer
 * (cudaStreamWaitEvent) before coll_nccl_allreduce_async. */
struct CUstream_st *coll_nccl_stream(struct coll *c);
/* Enqueues an in-place sum over ranks of buf[0..n) (device) on coll_nccl_stream and returns
 * without waiting for it (ncclInProgress of the enqueue itself is polled away, under
 * timeout_ms). The same sum as coll_allreduce(COLL_SUM), so the same bits. Errors as the
 * collectives' (sticky: coll.h); one thread at a time, as every call on c. */
int coll_nccl_allreduce_async(struct coll *c, float *buf, size_t n);
/* Waits until everything enqueued is done, polling NCCL's async error as the collectives do: a
 * dead peer gives DIST_EPEER, a collective still unfinished timeout_ms after the call
 * DIST_ETIMEDOUT, both after ncclCommAbort. Then `then` (a stream, may be NULL) waits for
 * c's stream on the device too. */
int coll_nccl_wait(struct coll *c, struct CUstream_st *then);
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
static inline struct CUstream_st *coll_nccl_stream(struct coll *c)
{
    (void)c;
    return NULL;
}
static inline int coll_nccl_allreduce_async(struct coll *c, float *buf, size_t n)
{
    (void)c, (void)buf, (void)n;
    return DIST_EUNSUPPORTED;
}
static inline int coll_nccl_wait(struct coll *c, struct CUstream_st *then)
{
    (void)c, (void)then;
    return DIST_EUNSUPPORTED;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_COLL_NCCL_H */
