// LayerNorm on the GPU: one warp per row (statistics by warp shuffles, two passes over the row as
// the CPU reference does). The backward writes dinp per row and sums dweight/dbias without
// atomics: each warp keeps per-column partials in shared memory, each block writes its sum to
// scratch, and a second kernel adds the blocks' partials in block order (deterministic).
#include "kernels/bf16.h"
#include "kernels/gpu_internal.h"
#include "kernels/layernorm.h"

#define LN_WARPS 4 /* warps per block in both directions */
#define LN_BLOCKS_MAX 512

/* The output element: fp32 as is, or rounded to bf16 (kernels/bf16.h). */
static __device__ __forceinline__ void ln_store(float *o, float v)
{
    *o = v;
}
static __device__ __forceinline__ void ln_store(uint16_t *o, float v)
{
    *o = bf16_from_f32(v);
}

/* One warp per row; the statistics (mean, rstd) stay fp32 whatever T is, for the fp32 backward. */
template <typename T>
static __global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd,
                                                const float *inp, const float *weight,
                                                const float *bias, int N, int C)
{
    int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    float r = rsqrtf(warp_sum(v) / (float)C + LAYERNORM_EPS);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        ln_store(o + c, (x[c] - m) * r * weight[c] + bias[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

extern "C" void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int N, int C,
                                  struct CUstream_st *stream)
{
    if (N == 0)
        return;
    layernorm_forward_kernel<float><<<CEIL_DIV(N, LN_WARPS), 32 * LN_WARPS, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C);
    GPU_LAUNCH_CHECK();
}

extern "C" void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int N, int C,
                                       struct CUstream_st *stream)
{
    if (N == 0)
        return;
    layernorm_forward_kernel<uint16_t><<<CEIL_DIV(N, LN_WARPS), 32 * LN_WARPS, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C);
    GPU_LAUNCH_CHECK();
}

/* part (gridDim.x, 2, C): this block's sums of dout * xhat and dout over its rows. dinp16 (may
 * be NULL): the accumulated dinp rounded to bf16. */
static __global__ void layernorm_backward_kernel(float *dinp, uint16_t *dinp16, float *part,
                                                 const float *dout,
                                                 const float *inp, const float *weight,
                                                 const float *mean, const float *rstd, int N,
                                                 int C)
{
    extern __shared__ float sh[]; /* (LN_WARPS, 2, C) */
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    float *dw = sh + (size_t)w * 2 * C, *db = dw + C;
    for (int c = lane; c < C; c += 32)
        dw[c] = db[c] = 0.0f;
    for (int row = blockIdx.x * LN_WARPS + w; row < N; row += gridDim.x * LN_WARPS) {
        const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
        float m = mean[row], r = rstd[row], mg = 0.0f, mgx = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float g = dy[c] * weight[c];
            mg += g;
            mgx += g * (x[c] - m) * r;
        }
        mg = warp_sum(mg) / (float)C;
        mgx = warp_sum(mgx) / (float)C;
        float *dx = dinp + (size_t)row * C;
        for (int c = lane; c < C; c += 32) { /* lane owns columns lane + 32k: no races */
            float xhat = (x[c] - m) * r, g = dy[c] * weight[c];
            dw[c] += dy[c] * xhat;
            db[c] += dy[c];
            dx[c] += r * (g - mg - xhat * mgx);
            if (dinp16)
                dinp16[(size_t)row * C + c] = bf16_from_f32(dx[c]);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < LN_WARPS; k++) {
            sw += sh[(size_t)k * 2 * C + c];
            sb += sh[(size_t)k * 2 * C + C + c];
        }
        part[(size_t)blockIdx.x * 2 * C + c] = sw;
        part[(size_t)blockIdx.x * 2 * C + C + c] = sb;
    }
}

static __global__ void layernorm_sum_parts_kernel(float *dweight, float *dbias, const float *part,
                                                  int nparts, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float sw = 0.0f, sb = 0.0f;
    for (int p = 0; p < nparts; p++) {
        sw += part[(size_t)p * 2 * C + c];
        sb += part[(size_t)p * 2 * C + C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
}

static void backward(float *dinp, uint16_t *dinp16, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight, const float *mean,
                     const float *rstd, int N, int C, cudaStream_t stream)
{
    if (N == 0)
        return;
    int blocks = CEIL_DIV(N, LN_WARPS * 4); /* at least 4 rows per warp */
    blocks = blocks < LN_BLOCKS_MAX ? blocks : LN_BLOCKS_MAX;
    size_t smem = (size_t)LN_WARPS * 2 * C * sizeof(float);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    float *part = (float *)gpu_scratch((size_t)blocks * 2 * C * sizeof(float), stream);
    layernorm_backward_kernel<<<blocks, 32 * LN_WARPS, smem, stream>>>(
        dinp, dinp16, part, dout, inp, weight, mean, rstd, N, C);
    GPU_LAUNCH_CHECK();
    layernorm_sum_parts_kernel<<<CEIL_DIV(C, 256), 256, 0, stream>>>(dweight, dbias, part, blocks,
                                                                     C);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part, stream);
}

extern "C" void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, const float *mean,
                                   const float *rstd, int N, int C, struct CUstream_st *stream)
{
    backward(dinp, NULL, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}

extern "C" void layernorm_backward_bf16(float *dinp, uint16_t *dinp16, float *dweight,
                                        float *dbias, const float *dout, const float *inp,
                                        const float *weight, const float *mean, const float *rstd,
                                        int N, int C, struct CUstream_st *stream)
{
    backward(dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream);
}
