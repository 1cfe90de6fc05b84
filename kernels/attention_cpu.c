#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "common/xalloc.h"
#include "kernels/cpu.h"

/*
 * Each (b, h) pair is five small GEMMs on the valid L x L block (OpenBLAS, single-threaded, one
 * pair per OpenMP thread at a time) plus a softmax. q, k, v point at the head's first column for
 * t = 0 inside qkv, rows 3C apart; o, dout rows are C apart; att rows are T apart.
 */

/* p[0..L) <- softmax(p[0..L)), p[L..T) <- 0 */
CPU_CLONES static void softmax_row(float *p, int L, int T)
{
    float mx = p[0], sum = 0.0f;
    /* omp simd: lets the compiler reorder these reductions into vector lanes */
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < L; j++)
        mx = p[j] > mx ? p[j] : mx;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < L; j++) {
        p[j] = cpu_expf(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < L; j++)
        p[j] *= inv;
    for (int j = L; j < T; j++)
        p[j] = 0.0f;
}

/* ds <- p * (dp - sum(p * dp)) * scale, in place over dp */
CPU_CLONES static void softmax_row_backward(float *ds, const float *p, int L, float scale)
{
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < L; j++)
        dot += p[j] * ds[j];
    for (int j = 0; j < L; j++)
        ds[j] = p[j] * (ds[j] - dot) * scale;
}

static void head_forward(float *o, float *att, const float *q, const float *k, const float *v,
                         int L, int T, int C, int hs)
{
    const int ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    /* S = scale Q K^T (L,L), rows T apart in att */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hs, scale, q, ld, k, ld, 0.0f,
                att, T);
    for (int i = 0; i < L; i++)
        softmax_row(att + (size_t)i * T, L, T);
    /* O = P V (L,hs) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hs, L, 1.0f, att, T, v, ld, 0.0f,
                o, C);
    for (int i = L; i < T; i++) { /* padding queries: zeros (nothing reads them) */
        memset(att + (size_t)i * T, 0, sizeof(float) * (size_t)T);
        memset(o + (size_t)i * C, 0, sizeof(float) * (size_t)hs);
    }
}

void attention_forward_cpu(float *out, float *att, const float *qkv, const int *len, int B, int T,
                           int C, int NH)
{
    const int hs = C / NH;
    assert(C % NH == 0);
    cpu_blas_single();
#pragma omp parallel for collapse(2) schedule(dynamic) if ((size_t)B * NH * T * T * hs > 65536)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
            head_forward(out + (size_t)b * T * C + (size_t)h * hs,
                         att + ((size_t)b * NH + h) * T * T, base, base + C, base + 2 * C, len[b],
                         T, C, hs);
        }
    }
}

/* dv += P^T dO; dS = P * (dO V^T - rowsum(P * dO V^T)) * s; dq += dS K; dk += dS^T Q.
 * ds is scratch of L*L floats. */
static void head_backward(float *dq, float *dk, float *dv, const float *dout, const float *att,
                          const float *q, const float *k, const float *v, float *ds, int L, int T,
                          int C, int hs)
{
    const int ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hs, 1.0f, dout, C, v, ld, 0.0f,
                ds, L);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hs, L, 1.0f, att, T, dout, C, 1.0f,
                dv, ld);
    for (int i = 0; i < L; i++)
        softmax_row_backward(ds + (size_t)i * L, att + (size_t)i * T, L, scale);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hs, L, 1.0f, ds, L, k, ld, 1.0f, dq,
                ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, hs, L, 1.0f, ds, L, q, ld, 1.0f, dk,
                ld);
}

void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const int *len, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    assert(C % NH == 0);
    cpu_blas_single();
#pragma omp parallel if ((size_t)B * NH * T * T * hs > 65536)
    {
        float *ds = xmallocarray((size_t)T * T, sizeof(float));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t off = (size_t)b * T * 3 * C + (size_t)h * hs;
                head_backward(dqkv + off, dqkv + off + C, dqkv + off + 2 * C,
                              dout + (size_t)b * T * C + (size_t)h * hs,
                              att + ((size_t)b * NH + h) * T * T, qkv + off, qkv + off + C,
                              qkv + off + 2 * C, ds, len[b], T, C, hs);
            }
        }
        free(ds);
    }
}
