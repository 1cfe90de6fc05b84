#include "kernels/pool.h"

#include <stddef.h>

void meanpool_forward_cpu(float *out, const float *inp, const int *len, int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        for (int c = 0; c < C; c++)
            o[c] = 0.0f;
        for (int t = 0; t < len[b]; t++) {
            const float *x = inp + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                o[c] += x[c];
        }
        float inv = 1.0f / (float)len[b];
        for (int c = 0; c < C; c++)
            o[c] *= inv;
    }
}

void meanpool_backward_cpu(float *dinp, const float *dout, const int *len, int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        const float *d = dout + (size_t)b * C;
        float inv = 1.0f / (float)len[b];
        for (int t = 0; t < len[b]; t++) {
            float *dx = dinp + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                dx[c] += d[c] * inv;
        }
    }
}

void clspool_forward_cpu(float *out, const float *inp, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            out[(size_t)b * C + c] = inp[(size_t)b * T * C + c];
}

void clspool_backward_cpu(float *dinp, const float *dout, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            dinp[(size_t)b * T * C + c] += dout[(size_t)b * C + c];
}
