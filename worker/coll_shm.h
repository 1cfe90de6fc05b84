/*
 * coll_shm.h - the shared-memory all-reduce of the tcp backend (internal to coll_tcp.c and the
 * tests), used when every rank can map one POSIX shared-memory object: ranks in one container,
 * as gantry-run / gantry-worker --nproc start them. Like NCCL's SHM transport: loopback TCP costs
 * two kernel copies per byte per ring hop, this path one user-space copy in and out.
 *
 * Setup (coll_shm_open, collective): the ranks that are to share an object form a group (the
 * whole world, or a node's ranks with one group per node). The group's first rank creates a
 * randomly named object (O_EXCL, 0600), reserves its memory (posix_fallocate: a small /dev/shm
 * fails here, not with SIGBUS later) and publishes name + a random token in the store; every
 * rank of the group maps it and checks the token; the first rank collects their verdicts,
 * unlinks the object (nothing stays in /dev/shm, even if a rank is later killed) and hands the
 * group's verdict to global rank 0, which publishes one decision for all. Any failure: every
 * rank falls back. The probe decides, not host names: pods on one node have separate /dev/shm.
 * With several groups, each reduced segment is all-reduced across the groups by a callback
 * (coll_shm_set_cross: the tcp backend's ring per local rank) before the group gathers it.
 *
 * All-reduce: the buffer goes in pieces through per-rank slots (two per rank, alternating, so a
 * rank fills the next piece while slower ranks still read the last one). Per piece, rank r copies
 * its data (but not segment r) into its slot and publishes; it sums segment r over every rank in
 * rank order 0..W-1 (bit-identical and deterministic everywhere), writes the sum to its slot and
 * its buffer and publishes; then copies every other rank's reduced segment. Waiting: a short
 * spin, then futex sleeps in slices, between which the ring sockets (idle during shm operations)
 * are checked: EOF/hangup from a neighbour is a dead peer. A rank that fails marks the mapping
 * aborted and wakes everyone, so all ranks fail together with the same error.
 *
 * Tuning knobs (env, for measurements; rank 0's piece size is the one used):
 * GANTRY_COLL_SHM_PIECE (bytes per piece, default 1 MiB; 4 and 16 MiB measured slower, out of
 * cache), GANTRY_COLL_SHM_SPIN (pause loops before sleeping: default 2000 when every rank can
 * have a CPU of its own, else 0).
 */
#ifndef GANTRY_COLL_SHM_H
#define GANTRY_COLL_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;
struct coll;
struct coll_shm;

/* The "gantry-coll-<pid>-" prefix of the objects in /dev/shm (tests look for leftovers). */
#define COLL_SHM_PREFIX "gantry-coll-"

/* The tcp ring, borrowed for failure detection and messages. */
struct coll_shm_ring {
    int prev_fd, next_fd;
    int prev_rank, next_rank; /* global ranks */
    const char *prev_addr, *next_addr;
};

/* Who shares a mapping: the ranks first..first+size-1, one group of count (all groups alike).
 * The whole world is one group (count 1); ranks per node, count nodes, is the other use. */
struct coll_shm_group {
    int rank, size; /* this rank within the group; ranks in it */
    int first;      /* the global rank of its rank 0 (the one that creates the object) */
    int id, count;  /* this group's number; how many groups */
};

/* Collective: every rank of the world calls it with its group; keys go under pfx (one per
 * instance and use). off: NULL when this rank may use shared memory, else why not (e.g.
 * "GANTRY_COLL_SHM=0"); a rank that may not votes no. Either every group uses shared memory or
 * none does: global rank 0 decides and, when not, says why followed by fallback (what happens
 * instead), unless it had switched it off itself or fallback is NULL.
 * *out: the mapping (free with coll_shm_free), or NULL when it is not to be used. Errors are
 * store failures only. */
int coll_shm_open(struct store *st, const char *pfx, const struct coll_shm_group *g,
                  const char *off, const char *fallback, int timeout_ms,
                  const struct coll_shm_ring *ring, struct coll_shm **out)
    __attribute__((warn_unused_result));

/* Several groups: the all-reduce of each reduced segment across the groups, in place in shared
 * memory, between the group's reduce and its gather (each rank of a group does its own segment,
 * at the same time as the others). Returns 0 or the error, with *culprit the global rank to
 * blame when known (the callee said what happened; the group's other ranks then fail with it). */
typedef int (*coll_shm_cross_fn)(void *arg, float *seg, size_t n, int *culprit);
/* Sets fn; the all-reduce's average then divides by every group's ranks together. */
void coll_shm_set_cross(struct coll_shm *s, coll_shm_cross_fn fn, void *arg);

/* In place, n >= 1 floats; avg divides the sum by the world size. DIST_EPEER / DIST_ETIMEDOUT
 * (message naming the rank) when a rank dies or stops making progress for timeout_ms. */
int coll_shm_allreduce(struct coll_shm *s, float *buf, size_t n, bool avg)
    __attribute__((warn_unused_result));
/* Unmaps. NULL is a no-op. */
void coll_shm_free(struct coll_shm *s);

#endif /* GANTRY_COLL_SHM_H */
