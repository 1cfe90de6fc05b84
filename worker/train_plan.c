/*
 * train_plan.c - gradient buckets in backward's unit order (train_plan.h).
 */
#include "worker/train_plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* Unit u's ranges, with n_stats statistics floats after the gradients. */
static int unit_ranges(const struct model *m, int unit, int n_stats, struct train_range *out)
{
    static const char *const head[] = {"clsw", "clsb", "lnfw", "lnfb"};
    static const char *const layer[] = {"fcprojw", "fcprojb", "fcw", "fcb", "ln2w", "ln2b",
                                        "attprojw", "attprojb", "qkvw", "qkvb", "ln1w", "ln1b"};
    static const char *const embed[] = {"wte", "wpe", "emb"};
    const int L = m->cfg.layers;
    const char *const *names = unit == 0 ? head : unit <= L ? layer : embed;
    int k = unit == 0 ? 4 : unit <= L ? 12 : 3, n = 0;

    for (int i = 0; i < k; i++) {
        const struct model_tensor *t = model_find_tensor(m, names[i]);
        if (!t) /* lnf*, wte, wpe in the n-gram model; emb in the transformer */
            continue;
        size_t per = unit >= 1 && unit <= L ? t->count / (size_t)L : t->count;
        size_t l = unit >= 1 && unit <= L ? (size_t)(L - unit) : 0;
        out[n++] = (struct train_range){t->offset + l * per, per};
    }
    if (unit == 0) /* the loss statistics after the gradients: final since the forward */
        out[n++] = (struct train_range){m->n_params, (size_t)n_stats};
    return n;
}

int train_plan_unit_ranges(const struct model *m, int unit, struct train_range *out)
{
    return unit_ranges(m, unit, TRAIN_PLAN_STATS, out);
}

static int by_off(const void *a, const void *b)
{
    const struct train_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Appends units [u0, u1)'s ranges to p->r[*nr..], sorted and merged where adjacent. */
static void add_bucket(struct train_plan *p, const struct model *m, int u0, int u1, int *nr)
{
    int first = *nr, n = first;
    for (int u = u0; u < u1; u++)
        n += unit_ranges(m, u, p->n_stats, p->r + n);
    qsort(p->r + first, (size_t)(n - first), sizeof(p->r[0]), by_off);
    int w = first;
    for (int i = first; i < n; i++) {
        if (w > first && p->r[w - 1].off + p->r[w - 1].n == p->r[i].off)
            p->r[w - 1].n += p->r[i].n;
        else
            p->r[w++] = p->r[i];
    }
    p->end[p->nb] = u1;
    p->first[++p->nb] = w;
    *nr = w;
}

void train_plan_init(struct train_plan *p, const struct model *m, size_t bucket_bytes)
{
    train_plan_init_stats(p, m, bucket_bytes, TRAIN_PLAN_STATS);
}

void train_plan_init_stats(struct train_plan *p, const struct model *m, size_t bucket_bytes,
                           int n_stats)
{
    const int U = MODEL_UNITS(m->cfg.layers);
    struct train_range r[TRAIN_PLAN_UNIT_RANGES];
    int nr = 0, u0 = 0;
    size_t bytes = 0;

    p->nb = 0;
    p->n_stats = n_stats;
    p->end = xcalloc((size_t)U, sizeof(int));
    p->first = xcalloc((size_t)U + 1, sizeof(int));
    p->r = xcalloc((size_t)U * TRAIN_PLAN_UNIT_RANGES, sizeof(p->r[0]));
    for (int u = 0; u < U; u++) {
        int k = unit_ranges(m, u, n_stats, r);
        for (int i = 0; i < k; i++)
            bytes += r[i].n * sizeof(float);
        if (u == U - 1 || (bucket_bytes > 0 && bytes >= bucket_bytes)) {
            add_bucket(p, m, u0, u + 1, &nr);
            u0 = u + 1, bytes = 0;
        }
    }
}

void train_plan_cleanup(struct train_plan *p)
{
    free(p->end), free(p->first), free(p->r);
    memset(p, 0, sizeof(*p));
}
