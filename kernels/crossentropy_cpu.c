#include "kernels/crossentropy.h"

#include <math.h>
#include <stddef.h>

void crossentropy_forward_cpu(float *losses, float *probs, const float *logits, const int *labels,
                              float smoothing, const float *weights, int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        float *p = probs + (size_t)b * K;
        float mx = z[0], sum = 0.0f, zsum = 0.0f;
        for (int k = 1; k < K; k++)
            mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - mx);
            sum += p[k];
            zsum += z[k];
        }
        for (int k = 0; k < K; k++)
            p[k] /= sum;
        float lse = logf(sum) + mx;
        losses[b] = smoothing > 0.0f ? (1.0f - smoothing) * (lse - z[labels[b]]) +
                                           smoothing * (lse - zsum / (float)K)
                                     : lse - z[labels[b]];
        if (weights)
            losses[b] *= weights[labels[b]];
    }
}

void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *labels,
                               float smoothing, const float *weights, float scale, int B, int K)
{
    const float off = smoothing / (float)K, on = 1.0f - smoothing + off;
    for (int b = 0; b < B; b++) {
        float s = weights ? scale * weights[labels[b]] : scale;
        for (int k = 0; k < K; k++) {
            float g = probs[(size_t)b * K + k] - (k == labels[b] ? on : off);
            dlogits[(size_t)b * K + k] += g * s;
        }
    }
}

void bce_forward_cpu(float *losses, float *probs, const float *logits, const int *targets,
                     int words, int B, int K)
{
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        const int *y = targets + (size_t)b * words;
        double s = 0.0;
        for (int k = 0; k < K; k++) {
            float e = expf(-fabsf(z[k])); /* in (0, 1]: no overflow either way */
            probs[(size_t)b * K + k] = z[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
            s += (double)(fmaxf(z[k], 0.0f) - (bce_target(y, k) ? z[k] : 0.0f) + log1pf(e));
        }
        losses[b] = (float)(s / K);
    }
}

void bce_backward_cpu(float *dlogits, const float *probs, const int *targets, int words,
                      float scale, int B, int K)
{
    float s = scale / (float)K;
    for (int b = 0; b < B; b++) {
        const int *y = targets + (size_t)b * words;
        for (int k = 0; k < K; k++)
            dlogits[(size_t)b * K + k] += (probs[(size_t)b * K + k] - (float)bce_target(y, k)) * s;
    }
}

void mse_forward_cpu(float *losses, float *preds, const float *logits, const float *targets,
                     int B)
{
    for (int b = 0; b < B; b++) {
        float d = logits[b] - targets[b];
        losses[b] = d * d;
        preds[b] = logits[b];
    }
}

void mse_backward_cpu(float *dlogits, const float *logits, const float *targets, float scale,
                      int B)
{
    for (int b = 0; b < B; b++)
        dlogits[b] += 2.0f * (logits[b] - targets[b]) * scale;
}
