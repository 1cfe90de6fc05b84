/* AdamW on the CPU against the obvious scalar loop (bit for bit), segments with and without
 * decay, the gradient scale, thread-count independence, and the sum of squares. */
#include "kernels/adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/test.h"

enum { N = 200003 }; /* > the 65536 parallel threshold, not a multiple of any chunk */

static const struct adamw_segment segs[3] = {{0, 5, 0}, {5, 150000, 1}, {150005, N - 150005, 0}};

static void fill(float *p, float *g, float *m, float *v)
{
    unsigned s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
        g[i] = ((float)((s * 7u) >> 8) / 16777216.0f - 0.5f) * 1e-2f;
        m[i] = g[i] * 0.3f;
        v[i] = g[i] * g[i] * 0.5f;
    }
}

/* The specification, one element at a time (the formula of kernels/adamw.h). */
static void reference(float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                      float eps, float wd, long t, float gs)
{
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float step = lr / bc1, sbc2 = sqrtf(bc2);
    for (int s = 0; s < 3; s++) {
        float shrink = segs[s].decay ? 1.0f - lr * wd : 1.0f;
        for (size_t i = segs[s].offset; i < segs[s].offset + segs[s].count; i++) {
            float gi = g[i] * gs;
            m[i] = b1 * m[i] + (1.0f - b1) * gi;
            v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
            p[i] = p[i] * shrink - step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
        }
    }
}

static int count_diff(const float *a, const float *b)
{
    int d = 0;
    for (int i = 0; i < N; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void run_case(float gs, const float *gsp, int threads)
{
    float *p = malloc(sizeof(float) * N * 8), *g = p + N, *m = g + N, *v = m + N;
    float *p2 = v + N, *m2 = p2 + N, *v2 = m2 + N, *g0 = v2 + N;
    fill(p, g, m, v);
    memcpy(p2, p, sizeof(float) * N), memcpy(m2, m, sizeof(float) * N);
    memcpy(v2, v, sizeof(float) * N), memcpy(g0, g, sizeof(float) * N);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    for (long t = 1; t <= 3; t++) {
        adamw_update_cpu(p, g, m, v, segs, 3, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t, gsp);
        reference(p2, g, m2, v2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t, gs);
    }
    TEST_EQ_INT(count_diff(p, p2), 0);
    TEST_EQ_INT(count_diff(m, m2), 0);
    TEST_EQ_INT(count_diff(v, v2), 0);
    TEST_EQ_INT(count_diff(g, g0), 0); /* gradients are only read */
    /* every parameter moved */
    float *p0 = malloc(sizeof(float) * N * 4);
    fill(p0, p0 + N, p0 + 2 * N, p0 + 3 * N);
    int moved = 0;
    for (int i = 0; i < N; i++)
        moved += p[i] != p0[i];
    TEST_EQ_INT(moved, N);
    free(p0);
    free(p);
}

static void test_matches_reference(void)
{
    run_case(1.0f, NULL, 2);
    run_case(1.0f, NULL, 1);
}

static void test_gradient_scale(void)
{
    const float gs = 0.37f;
    run_case(gs, &gs, 2);
}

static void test_sumsq(void)
{
    float *x = malloc(sizeof(float) * N);
    double want = 0.0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)((i % 1000) - 500) * 1e-3f;
        want += (double)x[i] * x[i];
    }
    TEST_NEAR(sumsq_cpu(x, N), want, 1e-9 * want);
#ifdef _OPENMP
    omp_set_num_threads(1);
    double one = sumsq_cpu(x, N);
    omp_set_num_threads(2);
    TEST_CHECK(one == sumsq_cpu(x, N)); /* chunk partials in chunk order: thread-independent */
#endif
    TEST_NEAR(sumsq_cpu(x, 3), 0.25 + 0.499 * 0.499 + 0.498 * 0.498, 1e-7); /* float inputs */
    TEST_NEAR(sumsq_cpu(x, 0), 0.0, 0.0);
    free(x);
}

int main(void)
{
    TEST_RUN(test_matches_reference);
    TEST_RUN(test_gradient_scale);
    TEST_RUN(test_sumsq);
    return test_summary();
}
