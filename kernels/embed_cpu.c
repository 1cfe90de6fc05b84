#include "kernels/embed.h"

#include <stddef.h>

#ifdef _OPENMP
#include <omp.h>
#endif

void embed_forward_cpu(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                       int T, int C)
{
#pragma omp parallel for collapse(2) if ((size_t)B * T * C > 65536)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tokens[(size_t)b * T + t] * C;
            const float *p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
    }
}

void embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C)
{
    /* Threads take disjoint column ranges and walk every token in order: two tokens may share an
     * id, but never a column between threads, and each sum keeps the serial order. */
#pragma omp parallel if ((size_t)B * T * C > 65536)
    {
#ifdef _OPENMP
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
        int nt = 1, id = 0;
#endif
        int per = (C + nt - 1) / nt, c0 = id * per < C ? id * per : C;
        int c1 = c0 + per < C ? c0 + per : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                float *de = dwte + (size_t)tokens[(size_t)b * T + t] * C;
                float *dp = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) {
                    de[c] += d[c];
                    dp[c] += d[c];
                }
            }
        }
    }
}

void embbag_forward_cpu(float *out, const int *ids, const int *count, const float *table, int B,
                        int M, int D)
{
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * D;
        int n = count[b];
        for (int d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int i = 0; i < n; i++) {
            const float *row = table + (size_t)ids[(size_t)b * M + i] * D;
            for (int d = 0; d < D; d++)
                o[d] += row[d];
        }
        if (n > 0) {
            float inv = 1.0f / (float)n;
            for (int d = 0; d < D; d++)
                o[d] *= inv;
        }
    }
}

void embbag_backward_cpu(float *dtable, const float *dout, const int *ids, const int *count, int B,
                         int M, int D)
{
    for (int b = 0; b < B; b++) {
        int n = count[b];
        if (n == 0)
            continue;
        float inv = 1.0f / (float)n;
        const float *d = dout + (size_t)b * D;
        for (int i = 0; i < n; i++) {
            float *row = dtable + (size_t)ids[(size_t)b * M + i] * D;
            for (int k = 0; k < D; k++)
                row[k] += d[k] * inv;
        }
    }
}
