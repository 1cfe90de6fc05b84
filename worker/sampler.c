/*
 * sampler.c - the distributed sampler (see sampler.h).
 */
#include "worker/sampler.h"

#include <stdlib.h>

#include "common/hash.h"
#include "common/xalloc.h"

/* Uniform in [0, bound) without modulo bias (rejection). */
static uint64_t below(uint64_t *st, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound, r;

    do
        r = hash_splitmix64(st);
    while (r >= limit);
    return r % bound;
}

static void shuffle(struct sampler *s)
{
    uint64_t st = s->seed ^ (0x5851f42d4c957f2dull * (s->epoch + 1));

    for (uint64_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    if (!s->shuffle)
        return;
    for (uint64_t i = s->n; i > 1; i--) { /* Fisher-Yates */
        uint64_t j = below(&st, i), t = s->perm[i - 1];
        s->perm[i - 1] = s->perm[j];
        s->perm[j] = t;
    }
}

static void start_at(struct sampler *s, uint64_t consumed)
{
    uint64_t W = (uint64_t)s->world, left;

    s->start = consumed < s->n ? consumed : s->n;
    s->i = 0;
    left = s->n - s->start;
    s->per_rank = s->drop_last ? left / W : (left + W - 1) / W;
}

void sampler_init(struct sampler *s, uint64_t n, int rank, int world, uint64_t seed, bool shuf,
                  bool drop_last)
{
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->seed = seed;
    s->shuffle = shuf;
    s->drop_last = drop_last;
    s->perm = xmallocarray(n ? n : 1, sizeof(*s->perm));
    sampler_set_epoch(s, 0);
}

void sampler_cleanup(struct sampler *s)
{
    free(s->perm);
    s->perm = NULL;
}

void sampler_set_epoch(struct sampler *s, uint64_t epoch)
{
    s->epoch = epoch;
    shuffle(s);
    start_at(s, 0);
}

bool sampler_next(struct sampler *s, uint64_t *idx)
{
    uint64_t g;

    if (s->i >= s->per_rank)
        return false;
    g = s->start + (uint64_t)s->rank + s->i * (uint64_t)s->world;
    s->i++;
    *idx = s->perm[g % s->n]; /* past the end: padding, wrapping to the start */
    return true;
}

uint64_t sampler_remaining(const struct sampler *s)
{
    return s->per_rank - s->i;
}

struct sampler_pos sampler_position(const struct sampler *s)
{
    uint64_t c = s->start + s->i * (uint64_t)s->world;
    struct sampler_pos p = {.epoch = s->epoch, .consumed = c < s->n ? c : s->n};
    return p;
}

void sampler_restore(struct sampler *s, struct sampler_pos pos)
{
    if (pos.epoch != s->epoch) {
        s->epoch = pos.epoch;
        shuffle(s);
    }
    start_at(s, pos.consumed);
}
