/*
 * coll_nccl.cu - the nccl collectives backend (see coll_nccl.h). Compiled only with CUDA.
 * Host code only: it enqueues NCCL calls and waits for them with async error checks.
 */
#include "worker/coll_nccl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "common/xalloc.h" /* a C header without C++ guards */
}
#include "worker/coll_impl.h"
#include "worker/store.h"

struct nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    bool own_stream;
    float *scratch; /* one float on the device, for the barrier */
    cudaEvent_t done; /* coll_nccl_wait: recorded on the stream once it is idle */
    int timeout_ms;
    bool aborted;
};

static int cuda_failed(const char *what, cudaError_t e)
{
    dist_log("%s failed: %s. HINT: check the GPU with nvidia-smi; the pod restarts from the last "
             "checkpoint",
             what, cudaGetErrorString(e));
    return DIST_EIO;
}

static int nccl_failed(const char *what, ncclResult_t r)
{
    dist_log("%s failed: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
    return r == ncclRemoteError || r == ncclSystemError ? DIST_EPEER : DIST_EIO;
}

static void sleep_poll(int64_t elapsed_ms)
{
    struct timespec fast = {0, 50 * 1000}, slow = {0, 500 * 1000};
    nanosleep(elapsed_ms < 5 ? &fast : &slow, NULL);
}

/* The communicator is non-blocking (blocking = 0), so its init and any call may return
 * ncclInProgress; NCCL then wants ncclCommGetAsyncError polled until it says otherwise before
 * the next call. Polls for at most timeout_ms: a peer that died or never came leaves the init in
 * progress forever. On failure or timeout the communicator is aborted. `r` is what the call
 * returned. */
static int wait_ready(struct nccl *n, ncclResult_t r, const char *what, int rank)
{
    int64_t start = dist_now_ms(), now;

    while (r == ncclInProgress) {
        ncclResult_t q = ncclCommGetAsyncError(n->comm, &r);
        if (q != ncclSuccess)
            r = q;
        if (r != ncclInProgress)
            break;
        now = dist_now_ms();
        if (now - start > n->timeout_ms) {
            ncclCommAbort(n->comm);
            n->aborted = true;
            dist_log("rank %d: %s did not finish within %.1f s: a peer died or never joined "
                     "(or hangs). Exiting so that the gang restarts (GANTRY_PEER_TIMEOUT raises "
                     "the limit)",
                     rank, what, n->timeout_ms / 1000.0);
            return DIST_ETIMEDOUT;
        }
        sleep_poll(now - start);
    }
    if (r == ncclSuccess)
        return 0;
    const char *why = ncclGetLastError(n->comm);
    dist_log("rank %d: %s failed: %s (%s). Exiting so that the gang restarts", rank, what,
             ncclGetErrorString(r), why && *why ? why : "no detail");
    ncclCommAbort(n->comm);
    n->aborted = true;
    return r == ncclRemoteError || r == ncclSystemError ? DIST_EPEER : DIST_EIO;
}

/* Waits for the stream, polling NCCL's async error: a dead peer shows up there, a hung one as a
 * timeout (NCCL does not expose progress, so the limit is the collective's whole duration).
 * Either way the communicator is aborted so nothing stays blocked on the GPU. Polls every 50 us
 * for the first 5 ms (small collectives), then every 500 us: a long all-reduce does not cost
 * 20000 wake-ups a second beside NCCL's own proxy thread. */
static int wait_stream(struct nccl *n, const char *what)
{
    int64_t start = dist_now_ms(), now;

    for (;;) {
        cudaError_t e = cudaStreamQuery(n->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_failed(what, e);
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(n->comm, &async);
        if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            /* the reason (which peer, which transport) before the abort frees the communicator */
            const char *why = ncclGetLastError(n->comm);
            dist_log("%s: NCCL reported %s (%s): a peer died or its network failed. Exiting so "
                     "that the gang restarts",
                     what, ncclGetErrorString(r != ncclSuccess ? r : async),
                     why && *why ? why : "no detail");
            ncclCommAbort(n->comm);
            n->aborted = true;
            return DIST_EPEER;
        }
        now = dist_now_ms();
        if (now - start > n->timeout_ms) {
            ncclCommAbort(n->comm);
            n->aborted = true;
            dist_log("%s did not finish within %.1f s: a peer is hung or dead. Exiting so that "
                     "the gang restarts (GANTRY_PEER_TIMEOUT raises the limit)",
                     what, n->timeout_ms / 1000.0);
            return DIST_ETIMEDOUT;
        }
        sleep_poll(now - start);
    }
}

/* After an enqueue: its ncclInProgress polled away, then the stream waited for. */
static int finish(struct coll *c, ncclResult_t r, const char *fn, const char *what)
{
    struct nccl *n = (struct nccl *)c->impl;
    int rc;

    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_failed(fn, r);
    if ((rc = wait_ready(n, r, fn, c->rank)))
        return rc;
    return wait_stream(n, what);
}

static int nccl_allreduce(struct coll *c, float *buf, size_t count, enum coll_red op)
{
    struct nccl *n = (struct nccl *)c->impl;
    if (n->aborted) /* the communicator is gone */
        return DIST_EPEER;
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat, op == COLL_AVG ? ncclAvg : ncclSum,
                                   n->comm, n->stream);
    return finish(c, r, "ncclAllReduce", "all-reduce");
}

static int nccl_broadcast(struct coll *c, void *buf, size_t bytes, int root)
{
    struct nccl *n = (struct nccl *)c->impl;
    if (n->aborted)
        return DIST_EPEER;
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclChar, root, n->comm, n->stream);
    return finish(c, r, "ncclBroadcast", "broadcast");
}

static int nccl_allgather(struct coll *c, const void *send, void *recv, size_t bytes)
{
    struct nccl *n = (struct nccl *)c->impl;
    if (n->aborted)
        return DIST_EPEER;
    ncclResult_t r = ncclAllGather(send, recv, bytes, ncclChar, n->comm, n->stream);
    return finish(c, r, "ncclAllGather", "all-gather");
}

static int nccl_barrier(struct coll *c)
{
    struct nccl *n = (struct nccl *)c->impl;
    return nccl_allreduce(c, n->scratch, 1, COLL_SUM);
}

static void nccl_destroy(struct coll *c)
{
    struct nccl *n = (struct nccl *)c->impl;

    if (!n)
        return;
    /* Non-blocking: finalize (flushes, ncclInProgress until done), then destroy; a finalize
     * that fails or does not end within the timeout aborts instead. */
    if (n->comm && !n->aborted &&
        !wait_ready(n, ncclCommFinalize(n->comm), "ncclCommFinalize", c->rank))
        ncclCommDestroy(n->comm);
    if (n->scratch)
        cudaFree(n->scratch);
    if (n->done)
        cudaEventDestroy(n->done);
    if (n->own_stream && n->stream)
        cudaStreamDestroy(n->stream);
    free(n);
}

static const struct coll_ops nccl_ops = {"nccl", nccl_allreduce, nccl_broadcast, nccl_allgather,
                                         nccl_barrier, nccl_destroy};

/* Rank 0's unique id, through the store; the key is numbered per instance like the tcp ring's. */
static int exchange_id(struct store *st, ncclUniqueId *id, int timeout_ms)
{
    char key[96];
    int64_t inst;
    void *v = NULL;
    size_t vl;
    int rank = store_rank(st), rc;

    snprintf(key, sizeof(key), "nccl/instances/%d", rank);
    if ((rc = store_add(st, key, 1, &inst)))
        return rc;
    snprintf(key, sizeof(key), "nccl/%" PRId64 "/id", inst);
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            return nccl_failed("ncclGetUniqueId", r);
        return store_set(st, key, id, sizeof(*id));
    }
    if ((rc = store_wait(st, key, timeout_ms, &v, &vl)))
        return rc;
    if (vl != sizeof(*id))
        rc = DIST_EPROTO;
    else
        memcpy(id, v, sizeof(*id));
    free(v);
    return rc;
}

extern "C" int coll_nccl_new(struct store *st, int device, struct CUstream_st *stream,
                             const struct coll_opts *opts, struct coll **out)
{
    struct nccl *n = (struct nccl *)xcalloc(1, sizeof(*n));
    ncclUniqueId id;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    char what[64];
    cudaError_t e;
    ncclResult_t r;
    int rc = 0;

    n->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : 60000;
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        rc = cuda_failed("cudaSetDevice", e);
        goto out;
    }
    n->stream = (cudaStream_t)stream;
    if (!n->stream) {
        if ((e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess) {
            rc = cuda_failed("cudaStreamCreate", e);
            goto out;
        }
        n->own_stream = true;
    }
    if ((e = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming)) != cudaSuccess) {
        rc = cuda_failed("cudaEventCreate", e);
        goto out;
    }
    /* Zeroed on the stream the barrier's all-reduce runs on: cudaMemset would queue on the legacy
     * default stream, which a non-blocking stream does not wait for. */
    if ((e = cudaMalloc((void **)&n->scratch, sizeof(float))) != cudaSuccess ||
        (e = cudaMemsetAsync(n->scratch, 0, sizeof(float), n->stream)) != cudaSuccess) {
        rc = cuda_failed("cudaMalloc", e);
        goto out;
    }
    if ((rc = exchange_id(st, &id, n->timeout_ms)))
        goto out;
    /* Non-blocking, so that a peer that dies between the id exchange and the init (or never
     * calls it) costs timeout_ms, not a hang: ncclCommInitRank would wait for it forever. */
    config.blocking = 0;
    r = ncclCommInitRankConfig(&n->comm, store_world_size(st), id, store_rank(st), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        n->comm = NULL;
        rc = nccl_failed("ncclCommInitRankConfig", r);
        goto out;
    }
    snprintf(what, sizeof(what), "NCCL communicator init (%d ranks)", store_world_size(st));
    if ((rc = wait_ready(n, r, what, store_rank(st))))
        goto out;
    *out = coll_wrap(&nccl_ops, store_rank(st), store_world_size(st), n);
    n = NULL;
out:
    if (n) {
        struct coll tmp = {};
        tmp.impl = n;
        nccl_destroy(&tmp);
    }
    return rc;
}

/* ---- enqueue-only all-reduce (coll_nccl.h) ---- */

/* The nccl backend's state, or NULL when c is another backend's collective. */
static struct nccl *nccl_of(struct coll *c)
{
    return c && c->ops == &nccl_ops ? (struct nccl *)c->impl : NULL;
}

extern "C" struct CUstream_st *coll_nccl_stream(struct coll *c)
{
    struct nccl *n = nccl_of(c);
    return n ? (struct CUstream_st *)n->stream : NULL;
}

/* coll.c's rule: the first error sticks, nothing after it is trusted. */
static int stick(struct coll *c, int rc)
{
    if (rc && !c->err)
        c->err = rc;
    return rc;
}

extern "C" int coll_nccl_allreduce_async(struct coll *c, float *buf, size_t count)
{
    struct nccl *n = nccl_of(c);

    if (!n)
        return DIST_EUSAGE; /* not an nccl collective */
    if (c->err)
        return c->err;
    if (count == 0)
        return 0;
    if (n->aborted)
        return stick(c, DIST_EPEER);
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return stick(c, nccl_failed("ncclAllReduce", r));
    return stick(c, wait_ready(n, r, "ncclAllReduce (enqueue)", c->rank));
}

extern "C" int coll_nccl_wait(struct coll *c, struct CUstream_st *then)
{
    struct nccl *n = nccl_of(c);
    cudaError_t e;
    int rc;

    if (!n)
        return DIST_EUSAGE; /* not an nccl collective */
    if (c->err)
        return c->err;
    if (n->aborted)
        return stick(c, DIST_EPEER);
    if ((rc = wait_stream(n, "all-reduce (overlapped with backward)")))
        return stick(c, rc);
    /* The stream is idle now; the event keeps `then` ordered behind it on the device as well. */
    if (then && ((e = cudaEventRecord(n->done, n->stream)) != cudaSuccess ||
                 (e = cudaStreamWaitEvent((cudaStream_t)then, n->done, 0)) != cudaSuccess))
        return stick(c, cuda_failed("cudaStreamWaitEvent", e));
    return 0;
}
