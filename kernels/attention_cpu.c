#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* One (b, h) pair. q, k, v point at the head's first column for t = 0; rows are 3C apart. */
static void head_forward(float *o, float *att, const float *q, const float *k, const float *v,
                         float *kt, int L, int T, int C, int hs)
{
    const size_t ld = (size_t)3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    /* kt (hs, L): keys transposed so the score loop runs over contiguous j. */
    for (int j = 0; j < L; j++)
        for (int d = 0; d < hs; d++)
            kt[(size_t)d * L + j] = k[j * ld + d];
    for (int i = 0; i < L; i++) {
        float *p = att + (size_t)i * T, *oi = o + (size_t)i * C;
        const float *qi = q + i * ld;
        for (int j = 0; j < L; j++)
            p[j] = 0.0f;
        for (int d = 0; d < hs; d++) {
            float qd = qi[d] * scale;
            const float *kd = kt + (size_t)d * L;
            for (int j = 0; j < L; j++)
                p[j] += qd * kd[j];
        }
        float mx = p[0], sum = 0.0f;
        for (int j = 1; j < L; j++)
            mx = p[j] > mx ? p[j] : mx;
        for (int j = 0; j < L; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < L; j++)
            p[j] *= inv;
        for (int j = L; j < T; j++)
            p[j] = 0.0f;
        for (int d = 0; d < hs; d++)
            oi[d] = 0.0f;
        for (int j = 0; j < L; j++) {
            const float *vj = v + j * ld;
            float pj = p[j];
            for (int d = 0; d < hs; d++)
                oi[d] += pj * vj[d];
        }
    }
    for (int i = L; i < T; i++) {
        memset(att + (size_t)i * T, 0, sizeof(float) * (size_t)T);
        memset(o + (size_t)i * C, 0, sizeof(float) * (size_t)hs);
    }
}

void attention_forward_cpu(float *out, float *att, const float *qkv, const int *len, int B, int T,
                           int C, int NH)
{
    const int hs = C / NH;
    assert(C % NH == 0);

#pragma omp parallel
    {
        float *kt = xmallocarray((size_t)hs * T, sizeof(float));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float *base = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
                head_forward(out + (size_t)b * T * C + (size_t)h * hs,
                             att + ((size_t)b * NH + h) * T * T, base, base + C, base + 2 * C, kt,
                             len[b], T, C, hs);
            }
        }
        free(kt);
    }
}

/* One (b, h) pair: dv += P^T dO; dS = P * (dO V^T - rowsum(P * dO V^T)); dq += s dS K;
 * dk += s dS^T Q. dq, dk, dv point into dqkv like q, k, v into qkv. */
static void head_backward(float *dq, float *dk, float *dv, const float *dout, const float *att,
                          const float *q, const float *k, const float *v, float *vt, float *dp,
                          int L, int T, int C, int hs)
{
    const size_t ld = (size_t)3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    for (int j = 0; j < L; j++)
        for (int d = 0; d < hs; d++)
            vt[(size_t)d * L + j] = v[j * ld + d];
    for (int i = 0; i < L; i++) {
        const float *p = att + (size_t)i * T, *doi = dout + (size_t)i * C;
        const float *qi = q + i * ld;
        float *dqi = dq + i * ld;
        for (int j = 0; j < L; j++)
            dp[j] = 0.0f;
        for (int d = 0; d < hs; d++) {
            float g = doi[d];
            const float *vd = vt + (size_t)d * L;
            for (int j = 0; j < L; j++)
                dp[j] += g * vd[j];
        }
        float dot = 0.0f;
        for (int j = 0; j < L; j++)
            dot += p[j] * dp[j];
        for (int j = 0; j < L; j++) {
            float pj = p[j], ds = pj * (dp[j] - dot) * scale;
            const float *kj = k + j * ld;
            float *dkj = dk + j * ld, *dvj = dv + j * ld;
            for (int d = 0; d < hs; d++) {
                dvj[d] += pj * doi[d];
                dqi[d] += ds * kj[d];
                dkj[d] += ds * qi[d];
            }
        }
    }
}

void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const int *len, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    assert(C % NH == 0);

#pragma omp parallel
    {
        float *vt = xmallocarray((size_t)hs * T, sizeof(float));
        float *dp = xmallocarray((size_t)T, sizeof(float));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t off = (size_t)b * T * 3 * C + (size_t)h * hs;
                head_backward(dqkv + off, dqkv + off + C, dqkv + off + 2 * C,
                              dout + (size_t)b * T * C + (size_t)h * hs,
                              att + ((size_t)b * NH + h) * T * T, qkv + off, qkv + off + C,
                              qkv + off + 2 * C, vt, dp, len[b], T, C, hs);
            }
        }
        free(vt);
        free(dp);
    }
}
