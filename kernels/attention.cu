// Multi-head attention with a key padding mask on the GPU, unfused: permute q, k, v to
// (B, NH, T, hs), S = scale Q K^T and O = P V as strided-batched cuBLAS GEMMs over the B * NH
// heads, and a masked softmax kernel in between (one warp per row).
//
// Why not a fused (flash) kernel yet: the CPU contract keeps the probabilities att (B,NH,T,T) for
// the backward, and this layout reproduces it exactly, so the GPU op can be checked entry by entry
// against the specification; it is llm.c's first CUDA attention. Its cost is O(T^2) memory per
// layer (about 400 MB at B=8, T=1024, NH=12 in fp32) and two extra passes over S. The next step,
// measured on the H200 by bench/gpu_bench, is cuDNN's fused SDPA (or a FlashAttention-2 style
// kernel) in bf16 that saves only the row log-sum-exp; docs/gpu.md tracks it.
//
// Padding: rows of P for queries i >= len[b] and columns for keys j >= len[b] are zero, so O's
// padding rows are zero (as on the CPU) and the backward gives zero gradients there.
#include "kernels/attention.h"
#include "kernels/gpu_internal.h"

#include <math.h>

/* dst (B,NH,T,hs) <- rows of src (B,T,ld), head h in columns [h*hs, (h+1)*hs) */
static __global__ void permute_kernel(float *dst, const float *src, int B, int T, int NH, int hs,
                                      int ld)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * hs)
        return;
    int d = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH);
    size_t b = i / ((size_t)hs * T * NH);
    dst[i] = src[(b * T + t) * ld + (size_t)h * hs + d];
}

static void permute_qkv(float *q, float *k, float *v, const float *qkv, int B, int T, int C,
                        int NH, cudaStream_t stream)
{
    size_t n = (size_t)B * T * C;
    unsigned grid = (unsigned)CEIL_DIV(n, 256);
    permute_kernel<<<grid, 256, 0, stream>>>(q, qkv, B, T, NH, C / NH, 3 * C);
    permute_kernel<<<grid, 256, 0, stream>>>(k, qkv + C, B, T, NH, C / NH, 3 * C);
    permute_kernel<<<grid, 256, 0, stream>>>(v, qkv + 2 * C, B, T, NH, C / NH, 3 * C);
    GPU_LAUNCH_CHECK();
}

/* (B,NH,T,hs) -> (B,T,C) rows: out = src, or out += src when accumulate */
static __global__ void unpermute_kernel(float *out, const float *src, int B, int T, int NH, int hs,
                                        int ld, int accumulate)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * hs)
        return;
    int d = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH);
    size_t b = i / ((size_t)hs * T * NH);
    float *o = out + (b * T + t) * ld + (size_t)h * hs + d;
    *o = accumulate ? *o + src[i] : src[i];
}

/* One warp per row (bh, i) of P (B*NH, T, T): softmax over j < L in place, zeros elsewhere. */
static __global__ void masked_softmax_kernel(float *att, const int *len, int NH, int T, size_t rows)
{
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int i = (int)(row % T), L = len[row / T / NH];
    float *p = att + row * T;
    if (i >= L) {
        for (int j = lane; j < T; j += 32)
            p[j] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int j = lane; j < L; j += 32)
        mx = fmaxf(mx, p[j]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j < L; j += 32) {
        float e = expf(p[j] - mx);
        p[j] = e;
        s += e;
    }
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += 32)
        p[j] = j < L ? p[j] * inv : 0.0f;
}

/* dS = P * (dP - sum_j P dP) * scale, in place over dP (rows of zero P give zero). */
static __global__ void softmax_backward_kernel(float *dp, const float *att, float scale, int T,
                                               size_t rows)
{
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const float *p = att + row * T;
    float *d = dp + row * T;
    float dot = 0.0f;
    for (int j = lane; j < T; j += 32)
        dot += p[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = p[j] * (d[j] - dot) * scale;
}

/* Row-major batched GEMM over `batch` heads: C (M,N) = alpha op(A) op(B) + beta C, where
 * transX means the row-major operand is used transposed. Mapped onto column-major cuBLAS as
 * C^T = op(B)^T op(A)^T. */
static void batched(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                    long long sa, const float *Bm, int ldb, long long sb, float beta, float *Cm,
                    int ldc, long long sc, int batch, cudaStream_t stream)
{
    cublasHandle_t h = gpu_rt()->blas;
    CUBLAS_CHECK(cublasSetStream(h, stream));
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, Bm,
                                           ldb, sb, A, lda, sa, &beta, Cm, ldc, sc, batch));
}

extern "C" void attention_forward(float *out, float *att, const float *qkv, const int *len, int B,
                                  int T, int C, int NH, struct CUstream_st *stream)
{
    const int hs = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C, rows = (size_t)BH * T;
    const long long sq = (long long)T * hs, sp = (long long)T * T;
    if (n == 0)
        return;
    float *q = (float *)gpu_scratch(4 * n * sizeof(float), stream), *k = q + n, *v = k + n,
          *o = v + n;
    permute_qkv(q, k, v, qkv, B, T, C, NH, stream);
    /* S (T,T) = scale Q K^T */
    batched(false, true, T, T, hs, 1.0f / sqrtf((float)hs), q, hs, sq, k, hs, sq, 0.0f, att, T,
            sp, BH, stream);
    masked_softmax_kernel<<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(att, len, NH, T, rows);
    GPU_LAUNCH_CHECK();
    /* O (T,hs) = P V */
    batched(false, false, T, hs, T, 1.0f, att, T, sp, v, hs, sq, 0.0f, o, hs, sq, BH, stream);
    unpermute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(out, o, B, T, NH, hs, C, 0);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(q, stream);
}

extern "C" void attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *att, const int *len, int B, int T, int C, int NH,
                                   struct CUstream_st *stream)
{
    const int hs = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T * C, rows = (size_t)BH * T;
    const long long sq = (long long)T * hs, sp = (long long)T * T;
    if (n == 0)
        return;
    /* q k v dO dq dk dv: 7 (B,NH,T,hs) buffers, then dP (B*NH,T,T) */
    float *q = (float *)gpu_scratch((7 * n + rows * T) * sizeof(float), stream), *k = q + n,
          *v = k + n, *dO = v + n, *dq = dO + n, *dk = dq + n, *dv = dk + n, *dp = dv + n;
    permute_qkv(q, k, v, qkv, B, T, C, NH, stream);
    permute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(dO, dout, B, T, NH, hs, C);
    GPU_LAUNCH_CHECK();
    (void)len; /* padding lives in att: its zero rows/columns mask every gradient below */
    /* dP = dO V^T ; dV = P^T dO */
    batched(false, true, T, T, hs, 1.0f, dO, hs, sq, v, hs, sq, 0.0f, dp, T, sp, BH, stream);
    batched(true, false, T, hs, T, 1.0f, att, T, sp, dO, hs, sq, 0.0f, dv, hs, sq, BH, stream);
    softmax_backward_kernel<<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(
        dp, att, 1.0f / sqrtf((float)hs), T, rows);
    GPU_LAUNCH_CHECK();
    /* dQ = dS K ; dK = dS^T Q */
    batched(false, false, T, hs, T, 1.0f, dp, T, sp, k, hs, sq, 0.0f, dq, hs, sq, BH, stream);
    batched(true, false, T, hs, T, 1.0f, dp, T, sp, q, hs, sq, 0.0f, dk, hs, sq, BH, stream);
    unpermute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(dqkv, dq, B, T, NH, hs, 3 * C,
                                                                     1);
    unpermute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(dqkv + C, dk, B, T, NH, hs,
                                                                     3 * C, 1);
    unpermute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(dqkv + 2 * C, dv, B, T, NH,
                                                                     hs, 3 * C, 1);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(q, stream);
}
