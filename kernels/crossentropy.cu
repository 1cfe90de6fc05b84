// Fused softmax cross-entropy on the GPU: one block per row does max, sum of exp, normalisation
// and the loss (log-sum-exp form, as kernels/crossentropy_cpu.c), reading the logits twice.
// Multi-label's sigmoid binary cross-entropy: one block per row, the loss a block sum.
// Regression's squared error: one thread per example.
#include "kernels/crossentropy.h"
#include "kernels/gpu_internal.h"

static __global__ void crossentropy_forward_kernel(float *losses, float *probs,
                                                   const float *logits, const int *labels,
                                                   float smoothing, const float *weights, int K)
{
    int b = blockIdx.x;
    const float *z = logits + (size_t)b * K;
    float *p = probs + (size_t)b * K;
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        mx = fmaxf(mx, z[k]);
    mx = block_max(mx);
    float s = 0.0f, zs = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        float e = expf(z[k] - mx);
        p[k] = e;
        s += e;
        zs += z[k];
    }
    s = block_sum(s);
    if (smoothing > 0.0f)
        zs = block_sum(zs);
    float inv = 1.0f / s;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        p[k] *= inv;
    if (threadIdx.x == 0) {
        float lse = logf(s) + mx;
        losses[b] = smoothing > 0.0f ? (1.0f - smoothing) * (lse - z[labels[b]]) +
                                           smoothing * (lse - zs / (float)K)
                                     : lse - z[labels[b]];
        if (weights)
            losses[b] *= weights[labels[b]];
    }
}

static __global__ void crossentropy_backward_kernel(float *dlogits, const float *probs,
                                                    const int *labels, float smoothing,
                                                    const float *weights, float scale, int K,
                                                    size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int b = (int)(i / K), k = (int)(i % K);
    float off = smoothing / (float)K, on = 1.0f - smoothing + off;
    float s = weights ? scale * weights[labels[b]] : scale;
    dlogits[i] += (probs[i] - (k == labels[b] ? on : off)) * s;
}

extern "C" void crossentropy_forward(float *losses, float *probs, const float *logits,
                                     const int *labels, float smoothing, const float *weights,
                                     int B, int K, struct CUstream_st *stream)
{
    if (B == 0)
        return;
    int threads = K >= 1024 ? 1024 : (K <= 32 ? 32 : CEIL_DIV(K, 32) * 32);
    crossentropy_forward_kernel<<<B, threads, 0, stream>>>(losses, probs, logits, labels,
                                                                smoothing, weights, K);
    GPU_LAUNCH_CHECK();
}

extern "C" void crossentropy_backward(float *dlogits, const float *probs, const int *labels,
                                      float smoothing, const float *weights, float scale, int B,
                                      int K, struct CUstream_st *stream)
{
    size_t total = (size_t)B * K;
    if (total == 0)
        return;
    crossentropy_backward_kernel<<<(unsigned)CEIL_DIV(total, 256), 256, 0, stream>>>(
        dlogits, probs, labels, smoothing, weights, scale, K, total);
    GPU_LAUNCH_CHECK();
}

static __global__ void bce_forward_kernel(float *losses, float *probs, const float *logits,
                                          const int *targets, int words, int K)
{
    int b = blockIdx.x;
    const float *z = logits + (size_t)b * K;
    const int *y = targets + (size_t)b * words;
    float s = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        float e = expf(-fabsf(z[k]));
        probs[(size_t)b * K + k] = z[k] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        s += fmaxf(z[k], 0.0f) - (bce_target(y, k) ? z[k] : 0.0f) + log1pf(e);
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        losses[b] = s / (float)K;
}

static __global__ void bce_backward_kernel(float *dlogits, const float *probs, const int *targets,
                                           int words, float scale, int K, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int b = (int)(i / K), k = (int)(i % K);
    float y = (float)bce_target(targets + (size_t)b * words, k);
    dlogits[i] += (probs[i] - y) * (scale / (float)K);
}

extern "C" void bce_forward(float *losses, float *probs, const float *logits, const int *targets,
                            int words, int B, int K, struct CUstream_st *stream)
{
    if (B == 0)
        return;
    int threads = K >= 1024 ? 1024 : (K <= 32 ? 32 : CEIL_DIV(K, 32) * 32);
    bce_forward_kernel<<<B, threads, 0, stream>>>(losses, probs, logits, targets, words, K);
    GPU_LAUNCH_CHECK();
}

extern "C" void bce_backward(float *dlogits, const float *probs, const int *targets, int words,
                             float scale, int B, int K, struct CUstream_st *stream)
{
    size_t total = (size_t)B * K;
    if (total == 0)
        return;
    bce_backward_kernel<<<(unsigned)CEIL_DIV(total, 256), 256, 0, stream>>>(
        dlogits, probs, targets, words, scale, K, total);
    GPU_LAUNCH_CHECK();
}

static __global__ void mse_forward_kernel(float *losses, float *preds, const float *logits,
                                          const float *targets, int B)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B)
        return;
    float d = logits[b] - targets[b];
    losses[b] = d * d;
    preds[b] = logits[b];
}

static __global__ void mse_backward_kernel(float *dlogits, const float *logits,
                                           const float *targets, float scale, int B)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B)
        dlogits[b] += 2.0f * (logits[b] - targets[b]) * scale;
}

extern "C" void mse_forward(float *losses, float *preds, const float *logits,
                            const float *targets, int B, struct CUstream_st *stream)
{
    if (B == 0)
        return;
    mse_forward_kernel<<<CEIL_DIV(B, 256), 256, 0, stream>>>(losses, preds, logits, targets, B);
    GPU_LAUNCH_CHECK();
}

extern "C" void mse_backward(float *dlogits, const float *logits, const float *targets,
                             float scale, int B, struct CUstream_st *stream)
{
    if (B == 0)
        return;
    mse_backward_kernel<<<CEIL_DIV(B, 256), 256, 0, stream>>>(dlogits, logits, targets, scale, B);
    GPU_LAUNCH_CHECK();
}
