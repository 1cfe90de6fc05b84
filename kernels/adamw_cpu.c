#include "kernels/adamw.h"

#include <math.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "kernels/cpu.h"

/* Built with -fno-math-errno (kernels/CMakeLists.txt) so sqrtf is one vector instruction and the
 * loop vectorises; IEEE sqrt is correctly rounded either way, so the results do not change. */
CPU_CLONES static void update_chunk(float *restrict p, const float *restrict g, float *restrict m,
                                    float *restrict v, long n, float b1, float b2, float eps,
                                    float shrink, float step, float sbc2, float gs)
{
#pragma omp simd
    for (long j = 0; j < n; j++) {
        float gj = g[j] * gs;
        float mm = b1 * m[j] + (1.0f - b1) * gj;
        float vv = b2 * v[j] + (1.0f - b2) * gj * gj;
        p[j] = p[j] * shrink - step * mm / (sqrtf(vv) / sbc2 + eps);
        m[j] = mm;
        v[j] = vv;
    }
}

#define CHUNK 8192 /* floats per work item: 4 streams of 32 KiB */

void adamw_update_cpu(float *params, const float *grads, float *m, float *v,
                      const struct adamw_segment *segs, int nseg, float lr, float beta1,
                      float beta2, float eps, float weight_decay, long t, const float *gscale)
{
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, sbc2 = sqrtf(bc2), gs = gscale ? *gscale : 1.0f;
    size_t total = 0;

    for (int s = 0; s < nseg; s++)
        total += segs[s].count;
    (void)total; /* read only by the OpenMP if() below: unused in a build without OpenMP */
    /* One parallel region for every tensor (small ones would not pay for their own). */
#pragma omp parallel if (total > 65536)
    for (int s = 0; s < nseg; s++) {
        size_t off = segs[s].offset;
        long n = (long)segs[s].count;
        float shrink = segs[s].decay ? 1.0f - lr * weight_decay : 1.0f;
/* dynamic: on a shared machine a thread that loses its core leaves its chunks to the other */
#pragma omp for schedule(dynamic, 1) nowait
        for (long c = 0; c < n; c += CHUNK)
            update_chunk(params + off + c, grads + off + c, m + off + c, v + off + c,
                         n - c < CHUNK ? n - c : CHUNK, beta1, beta2, eps, shrink, step, sbc2,
                         gs);
    }
}

CPU_CLONES static double sumsq_chunk(const float *x, long n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (long i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double sumsq_cpu(const float *x, size_t n)
{
    /* One partial per chunk, any thread (dynamic), summed in chunk order: the same bits whatever
     * the thread count or the scheduling. */
    long nc = (long)((n + CHUNK - 1) / CHUNK);
    double *part = xmallocarray(nc > 0 ? (size_t)nc : 1, sizeof(double)), s = 0.0;
#pragma omp parallel for schedule(dynamic, 8) if (n > 65536)
    for (long k = 0; k < nc; k++) {
        long c = k * CHUNK;
        part[k] = sumsq_chunk(x + c, (long)n - c < CHUNK ? (long)n - c : CHUNK);
    }
    for (long k = 0; k < nc; k++)
        s += part[k];
    free(part);
    return s;
}
