/*
 * train_plan.h - the gradient bucket plan shared by the CPU loop (train.c) and the GPU loop
 * (train_gpu.c): which ranges of the gradient buffer are all-reduced together, in which order,
 * while backward still runs.
 *
 * Backward finishes the parameter gradients in MODEL_UNITS(layers) units, in this order (model.h
 * and model_gpu.h fire a ready hook per unit): unit 0 the head (clsw, clsb, lnfw, lnfb, and the 2
 * loss statistics, final since the forward), units 1..L the layers from the last down to the
 * first (each layer's slice of the twelve stacked per-layer tensors), unit L+1 the embeddings
 * (wte, wpe; the n-gram model's emb). The plan cuts that sequence into buckets of whole units: a
 * bucket closes once it holds bucket_bytes (bucket_bytes 0: one bucket of everything), and a
 * bucket's ranges are merged where adjacent and sorted by offset, so a bucket is a few
 * contiguous all-reduces.
 *
 * Offsets are in floats into a buffer of n_params + 2: the gradients, then [loss sum, examples]
 * (the GPU keeps both in one device buffer; the CPU loop splits a range at n_params into its
 * gradients and its own 2-float statistics). Every float is in exactly one range. Every rank
 * builds the same plan from the same model config and bucket size, so all ranks issue the same
 * collectives in the same order (coll.h's contract).
 */
#ifndef GANTRY_TRAIN_PLAN_H
#define GANTRY_TRAIN_PLAN_H

#include <stddef.h>

#include "worker/model.h"

#define TRAIN_BUCKET_MB 4        /* default bucket size in MiB (config training.gradBucketMB) */
#define TRAIN_PLAN_UNIT_RANGES 13 /* most ranges one unit has (a layer: 12, the head: 4 + 1) */
#define TRAIN_PLAN_STATS 2        /* [loss sum, examples] after the gradients */

/* A range of the gradient buffer, in floats. */
struct train_range {
    size_t off, n;
};

/* Bucket b covers units [end[b-1], end[b]) (end[-1] = 0) and the merged, offset-sorted ranges
 * r[first[b] .. first[b+1]). */
struct train_plan {
    int nb;
    int n_stats; /* statistics floats after the gradients (TRAIN_PLAN_STATS, or the CPU's 3) */
    int *end, *first;
    struct train_range *r;
};

/* Builds the plan for m (borrowed; only its tensor table is read), with TRAIN_PLAN_STATS
 * statistics floats. train_plan_cleanup() frees. */
void train_plan_init(struct train_plan *p, const struct model *m, size_t bucket_bytes);
/* The same with n_stats statistics floats (the CPU loop's 3: a stop vote besides the two). */
void train_plan_init_stats(struct train_plan *p, const struct model *m, size_t bucket_bytes,
                           int n_stats);
void train_plan_cleanup(struct train_plan *p);

/* True when unit `unit` (backward's order) is the last of bucket `next`, the next bucket to hand
 * over: the ready hooks' test (train.c, train_gpu.c), buckets in order, each once. */
static inline int train_plan_closes(const struct train_plan *p, int next, int unit)
{
    return next < p->nb && unit + 1 == p->end[next];
}

/* Unit u's ranges (the order above) into out[0..TRAIN_PLAN_UNIT_RANGES); returns how many. */
int train_plan_unit_ranges(const struct model *m, int unit, struct train_range *out);

#endif /* GANTRY_TRAIN_PLAN_H */
