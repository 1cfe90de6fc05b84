#include "kernels/layernorm.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "kernels/cpu.h"

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

CPU_CLONES static void forward_row(float *o, float *mean, float *rstd, const float *x,
                                   const float *weight, const float *bias, int C)
{
    float m = 0.0f, v = 0.0f;
    /* omp simd: lets the compiler reorder these sums into vector lanes */
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= (float)C;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * weight[c] + bias[c];
    *mean = m;
    *rstd = s;
}

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C)
{
#pragma omp parallel for if ((size_t)N * C > 32768)
    for (int i = 0; i < N; i++)
        forward_row(out + (size_t)i * C, mean + i, rstd + i, inp + (size_t)i * C, weight, bias, C);
}

/* One row: dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight. */
CPU_CLONES static void backward_row(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *weight, float m, float s, int C)
{
    float mg = 0.0f, mgx = 0.0f;
#pragma omp simd reduction(+ : mg, mgx)
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * s;
        float g = dy[c] * weight[c];
        mg += g;
        mgx += g * xhat;
    }
    mg /= (float)C;
    mgx /= (float)C;
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * s;
        float g = dy[c] * weight[c];
        dw[c] += dy[c] * xhat;
        db[c] += dy[c];
        dx[c] += s * (g - mg - xhat * mgx);
    }
}

void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C)
{
    int nt = (size_t)N * C > 32768 ? omp_get_max_threads() : 1;
    /* Per-thread partial sums for dweight and dbias: (nt, 2, C). */
    float *part = xcalloc((size_t)nt * 2 * C, sizeof(float));

#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num();
        float *dw = part + (size_t)tid * 2 * C, *db = dw + C;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++)
            backward_row(dinp + (size_t)i * C, dw, db, dout + (size_t)i * C, inp + (size_t)i * C,
                         weight, mean[i], rstd[i], C);
    }
    for (int t = 0; t < nt; t++) {
        for (int c = 0; c < C; c++) {
            dweight[c] += part[(size_t)t * 2 * C + c];
            dbias[c] += part[(size_t)t * 2 * C + C + c];
        }
    }
    free(part);
}
