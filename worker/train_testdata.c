/* The training-loop tests' toy data set (train_testdata.h). */
#include "worker/train_testdata.h"

#include <assert.h>

static uint64_t lcg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s;
}

struct train_data train_testdata_toy(const struct train_testdata_spec *spec, int32_t *ids,
                                     int32_t *len, int32_t *labels)
{
    const int n = spec->n, L = spec->max_len, V = spec->vocab;
    uint64_t s = spec->seed;

    assert(n > 0 && spec->min_len >= 2 && spec->min_len <= L && V > 4);
    for (int i = 0; i < n; i++) {
        len[i] = spec->min_len + (int)((lcg_next(&s) >> 33) % (uint64_t)(L - spec->min_len + 1));
        labels[i] = i % 2;
        for (int t = 0; t < L; t++) {
            lcg_next(&s);
            ids[i * L + t] = t < len[i] ? 4 + (int)((s >> 33) % (uint64_t)(V - 4)) : 0;
        }
        if (labels[i])
            ids[i * L + (int)(s >> 60) % len[i]] = 3; /* the last draw's top bits: a position */
    }
    return (struct train_data){ids, len, labels, (size_t)n, L, 0};
}
