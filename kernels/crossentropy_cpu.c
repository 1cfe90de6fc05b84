#include "kernels/crossentropy.h"

#include <math.h>
#include <stddef.h>

void crossentropy_forward_cpu(float *losses, float *probs, const float *logits, const int *labels,
                              int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        float *p = probs + (size_t)b * K;
        float mx = z[0], sum = 0.0f;
        for (int k = 1; k < K; k++)
            mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - mx);
            sum += p[k];
        }
        for (int k = 0; k < K; k++)
            p[k] /= sum;
        losses[b] = logf(sum) + mx - z[labels[b]];
    }
}

void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *labels, float scale,
                               int B, int K)
{
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++) {
            float g = probs[(size_t)b * K + k] - (k == labels[b] ? 1.0f : 0.0f);
            dlogits[(size_t)b * K + k] += g * scale;
        }
    }
}
