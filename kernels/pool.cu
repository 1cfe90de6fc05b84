// Sequence pooling on the GPU (masked mean, CLS): one thread per (b, c); sums run over t in
// order, as in kernels/pool_cpu.c.
#include "kernels/gpu_internal.h"
#include "kernels/pool.h"

static __global__ void meanpool_forward_kernel(float *out, const float *inp, const int *len, int T,
                                               int C)
{
    int b = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float s = 0.0f;
    for (int t = 0; t < len[b]; t++)
        s += inp[((size_t)b * T + t) * C + c];
    out[(size_t)b * C + c] = s * (1.0f / (float)len[b]);
}

static __global__ void meanpool_backward_kernel(float *dinp, const float *dout, const int *len,
                                                int T, int C)
{
    int bt = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    int b = bt / T, t = bt % T;
    if (c >= C || t >= len[b])
        return;
    dinp[(size_t)bt * C + c] += dout[(size_t)b * C + c] * (1.0f / (float)len[b]);
}

static __global__ void clspool_kernel(float *out, const float *inp, int T, int C, int backward)
{
    int b = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    if (backward)
        out[(size_t)b * T * C + c] += inp[(size_t)b * C + c]; /* dinp += dout */
    else
        out[(size_t)b * C + c] = inp[(size_t)b * T * C + c];
}

extern "C" void meanpool_forward(float *out, const float *inp, const int *len, int B, int T, int C,
                                 struct CUstream_st *stream)
{
    if (B == 0)
        return;
    meanpool_forward_kernel<<<dim3(B, CEIL_DIV(C, 256)), 256, 0, stream>>>(out, inp, len, T, C);
    GPU_LAUNCH_CHECK();
}

extern "C" void meanpool_backward(float *dinp, const float *dout, const int *len, int B, int T,
                                  int C, struct CUstream_st *stream)
{
    if (B == 0)
        return;
    meanpool_backward_kernel<<<dim3(B * T, CEIL_DIV(C, 256)), 256, 0, stream>>>(dinp, dout, len,
                                                                                  T, C);
    GPU_LAUNCH_CHECK();
}

extern "C" void clspool_forward(float *out, const float *inp, int B, int T, int C,
                                struct CUstream_st *stream)
{
    if (B == 0)
        return;
    clspool_kernel<<<dim3(B, CEIL_DIV(C, 256)), 256, 0, stream>>>(out, inp, T, C, 0);
    GPU_LAUNCH_CHECK();
}

extern "C" void clspool_backward(float *dinp, const float *dout, int B, int T, int C,
                                 struct CUstream_st *stream)
{
    if (B == 0)
        return;
    clspool_kernel<<<dim3(B, CEIL_DIV(C, 256)), 256, 0, stream>>>(dinp, dout, T, C, 1);
    GPU_LAUNCH_CHECK();
}
