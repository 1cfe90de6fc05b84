/*
 * coll.h - collectives behind one interface: all-reduce (sum, average), broadcast, all-gather,
 * barrier; and a gradient bucketer that reduces buckets on a background thread while backward
 * is still running.
 *
 * Backends:
 *   tcp  (coll_tcp_new, here): a ring over plain sockets, for CPUs and tests. All-reduce is ring
 *        reduce-scatter + all-gather, chunked and pipelined (the next chunk is on the wire while
 *        this one is being added), fp32 with optional bf16 compression on the wire. Buffers are
 *        host memory. When every rank can map one POSIX shared-memory object (ranks in one
 *        container: gantry-run / gantry-worker --nproc; pods on one node have separate /dev/shm
 *        and do not), the fp32 all-reduce goes through shared memory instead (coll_shm.h: one
 *        copy in and out per byte instead of two kernel copies per ring hop; the sum is in rank
 *        order, bit-identical on every rank); a probe at coll_tcp_new decides, on every rank
 *        alike, and falls back to the ring on any failure (rank 0 says why). Several ranks per
 *        node on several nodes (NPROC_PER_NODE, or coll_opts.local_size): when each node's
 *        ranks map an object of their own, the all-reduce is hierarchical: reduced within each
 *        node through shared memory, each local rank's share all-reduced across the nodes on a
 *        ring of its own (the node's rings side by side), gathered within the node. Switch
 *        shared memory off with coll_opts.shm = -1 or GANTRY_COLL_SHM=0. It reserves 2 x
 *        ranks x 1 MiB of /dev/shm per struct coll (ranks sharing the object; it is unlinked
 *        at once: nothing is left there). Broadcast, all-gather and barrier always use the
 *        ring of all ranks, and its sockets detect a dead rank during shared-memory
 *        all-reduces too.
 *   nccl (coll_nccl_new, coll_nccl.h): NCCL on GPUs; buffers are device memory.
 *
 * Contract for every collective: all ranks call the same collectives in the same order with the
 * same sizes (and root). Calls are synchronous: the result is in the buffer when they return.
 * Not thread-safe: one thread at a time per struct coll (the bucketer owns it while buckets are
 * pending).
 *
 * Failure: a peer that dies (connection reset, EOF) or makes no progress for opts.timeout_ms
 * (default 60 s: a hung or SIGSTOPped process) fails the call with DIST_EPEER / DIST_ETIMEDOUT and
 * a message naming the peer's rank and address. The struct coll is broken from then on: every
 * later call returns the same error. The worker should exit(dist_exit_code(rc)) - a retryable
 * code - so the operator restarts the gang. Because ring neighbours also lose their connection to
 * the exiting rank, every rank fails within about one timeout. Through shared memory, the first
 * rank to see a failure marks the mapping aborted and wakes the others: all fail together (a
 * kill -9: within ~0.1 s) with the same error.
 * The timeout counts time without progress inside a collective, so a rank that arrives more than
 * timeout_ms late (rank 0 alone evaluating, say) looks dead to the others: keep such phases
 * shorter than the timeout, or raise it (GANTRY_PEER_TIMEOUT).
 */
#ifndef GANTRY_COLL_H
#define GANTRY_COLL_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct store;
struct coll; /* opaque */

enum coll_red {
    COLL_SUM,
    COLL_AVG /* sum / world size */
};

struct coll_opts {
    int timeout_ms;      /* no progress from a peer for this long is a failure (default 60000) */
    size_t chunk_bytes;  /* bytes per ring step (multiple of 4); large all-reduces go round the
                          * ring in slices of world * chunk. Default: about 128 KiB (a whole
                          * number of TCP segments) when both ring neighbours are on this host
                          * (cache-sized), else 1 MiB */
    bool bf16_wire;      /* all-reduce: send bf16 instead of fp32 (half the bytes; every rank
                          * ends with identical values, rounded to bf16 precision) */
    int sock_buf_bytes;  /* SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning */
    int shm;             /* all-reduce through shared memory when ranks can map it: 0 auto
                          * (unless GANTRY_COLL_SHM=0), -1 off, 2 within nodes only (as
                          * GANTRY_COLL_SHM=node: tests, benchmarks); the whole world's never
                          * with bf16_wire (within nodes, the rings between them carry bf16) */
    int local_size;      /* ranks per node, node = rank / local_size (contiguous ranks); 0:
                          * NPROC_PER_NODE from the environment, else 1 */
    int hello_timeout_ms; /* setting up the ring, a connection to this rank's port must prove
                           * it is rank-1 within this long (default 10000), so a stray one that
                           * says nothing does not hold the ring up until timeout_ms */
};

/* Connects the tcp ring: each rank listens on the interface that reaches the store, publishes
 * its address in the store, connects to rank+1 and accepts rank-1; connections are authenticated
 * with the job token (HMAC over a per-instance nonce). Every rank must call it (in the same order
 * as other coll_*_new calls). opts may be NULL. *out is new: coll_free(). */
int coll_tcp_new(struct store *st, const struct coll_opts *opts, struct coll **out)
    __attribute__((warn_unused_result));

/* True when c is a tcp coll whose all-reduce runs through shared memory (same on every rank). */
bool coll_tcp_uses_shm(const struct coll *c);
/* How many groups of ranks share memory in c's all-reduce: 0 none (the ring), 1 the whole world,
 * more: one per node (hierarchical). Same on every rank. */
int coll_tcp_shm_groups(const struct coll *c);

/* "tcp" or "nccl". */
const char *coll_backend(const struct coll *c);
/* How the all-reduce runs, for logs and reports: "ring" (the TCP ring), "shm" (shared memory,
 * one host), "nodes" (hierarchical: shared memory within nodes, rings between them), "nccl",
 * "none" (one rank). */
const char *coll_allreduce_path(const struct coll *c);
int coll_rank(const struct coll *c);
int coll_world_size(const struct coll *c);

/* In place: buf[i] = op over ranks of buf[i], n floats. */
int coll_allreduce(struct coll *c, float *buf, size_t n, enum coll_red op)
    __attribute__((warn_unused_result));
/* Copies root's bytes into every other rank's buf. */
int coll_broadcast(struct coll *c, void *buf, size_t bytes, int root)
    __attribute__((warn_unused_result));
/* recv (world * bytes) gets every rank's send (bytes), in rank order. send may alias
 * recv + rank * bytes. */
int coll_allgather(struct coll *c, const void *send, void *recv, size_t bytes)
    __attribute__((warn_unused_result));
/* Returns when every rank has entered the barrier. */
int coll_barrier(struct coll *c) __attribute__((warn_unused_result));
/* NULL is a no-op. */
void coll_free(struct coll *c);

/* ---- gradient buckets ---------------------------------------------------------------------
 * Backward calls coll_grads_push() for each bucket as soon as its gradients are final; a
 * background thread all-reduces the buckets in push order while backward goes on. Before the
 * optimiser step, coll_grads_wait() returns when every pushed bucket is reduced. Every rank must
 * push the same buckets (sizes) in the same order. The bucket memory is borrowed until
 * coll_grads_wait() returns; the struct coll must not be used by anyone else in between.
 *
 *     struct coll_grads *g = coll_grads_new(coll, COLL_AVG);
 *     for each step:
 *         backward(..., on_bucket_ready = coll_grads_push(g, bucket_ptr, bucket_len));
 *         if ((rc = coll_grads_wait(g))) exit(dist_exit_code(rc));
 *         adamw_step(...);
 *     coll_grads_free(g);
 */
struct coll_grads;

/* c is borrowed and must outlive the bucketer. */
struct coll_grads *coll_grads_new(struct coll *c, enum coll_red op);
/* Queues buf[0..n) for reduction and returns at once. After an error, returns it. */
int coll_grads_push(struct coll_grads *g, float *buf, size_t n)
    __attribute__((warn_unused_result));
/* Waits for every queued bucket; returns the first error, if any. */
int coll_grads_wait(struct coll_grads *g) __attribute__((warn_unused_result));
/* Waits for pending buckets, stops the thread. NULL is a no-op. */
void coll_grads_free(struct coll_grads *g);

/* ---- bf16 helpers (also used by the checkpoint code and tests) ---------------------------- */

/* Round to nearest even; NaN stays NaN. */
unsigned short coll_f32_to_bf16(float f);
float coll_bf16_to_f32(unsigned short h);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_COLL_H */
