/*
 * sampler.h - the distributed sampler: which dataset indices this rank reads, epoch by epoch.
 *
 * Like torch's DistributedSampler: every epoch the n indices are permuted from (seed, epoch)
 * (the same permutation on every rank), and rank r takes positions r, r+W, r+2W, ... of it, so
 * shards are disjoint. Without drop_last the epoch is padded (wrapping to the start of the
 * permutation) until every rank has ceil(n/W) samples; with drop_last the tail is dropped and
 * every rank has floor(n/W).
 *
 * The position is global: (epoch, samples consumed by all ranks together). It is the same on
 * every rank, goes into state.json, and can be restored at a different world size: the remaining
 * part of the epoch is then sharded over the new ranks, so no sample is skipped or repeated.
 *
 * Deterministic: the permutation depends only on (n, seed, epoch). Not thread-safe.
 */
#ifndef GANTRY_SAMPLER_H
#define GANTRY_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sampler_pos {
    uint64_t epoch;
    uint64_t consumed; /* samples of this epoch consumed by all ranks together */
};

struct sampler {
    uint64_t n;
    int rank, world;
    uint64_t seed;
    bool shuffle, drop_last;
    uint64_t epoch;
    uint64_t start;    /* global position where this rank's walk began (0, or a restore) */
    uint64_t i;        /* samples this rank has taken since start */
    uint64_t per_rank; /* samples this rank takes from start to the end of the epoch */
    uint64_t *perm;    /* n indices, owned */
};

/* Storage owned by the caller. Starts at epoch 0, position 0. shuffle=false keeps index order
 * (evaluation). */
void sampler_init(struct sampler *s, uint64_t n, int rank, int world, uint64_t seed, bool shuffle,
                  bool drop_last);
void sampler_cleanup(struct sampler *s);

/* Starts epoch `epoch` from its beginning (reshuffles). */
void sampler_set_epoch(struct sampler *s, uint64_t epoch);

/* Next dataset index for this rank; false at the end of the epoch (then call set_epoch). */
bool sampler_next(struct sampler *s, uint64_t *idx);

/* Samples this rank has left in the epoch. */
uint64_t sampler_remaining(const struct sampler *s);

/* Where the job is; identical on every rank when all ranks took the same number of samples. */
struct sampler_pos sampler_position(const struct sampler *s);

/* Continues from a saved position (possibly saved at another world size). */
void sampler_restore(struct sampler *s, struct sampler_pos pos);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_SAMPLER_H */
