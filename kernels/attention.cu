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

template <typename T> static __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* dst (B,NH,T,hs) <- rows of src (B,T,ld), head h in columns [h*hs, (h+1)*hs); padding rows
 * (t >= len[b]) become zeros without being read, as the CPU never reads them: a NaN or inf there
 * would otherwise reach real rows through the GEMMs (0 * NaN) */
template <typename T>
static __global__ void permute_kernel(T *dst, const float *src, const int *len, int B, int T_,
                                      int NH, int hs, int ld)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T_ * hs)
        return;
    int d = (int)(i % hs), t = (int)(i / hs % T_), h = (int)(i / ((size_t)hs * T_) % NH);
    size_t b = i / ((size_t)hs * T_ * NH);
    dst[i] = from_f32<T>(t < len[b] ? src[(b * T_ + t) * ld + (size_t)h * hs + d] : 0.0f);
}

template <typename T>
static void permute(T *dst, const float *src, const int *len, int B, int T_, int C, int NH, int ld,
                    cudaStream_t stream)
{
    size_t n = (size_t)B * T_ * C;
    permute_kernel<T><<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(dst, src, len, B, T_, NH,
                                                                      C / NH, ld);
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
 * C^T = op(B)^T op(A)^T. Operands of type ab (fp32: plain fp32 math, no TF32; bf16: tensor
 * cores), C fp32, fp32 accumulation. */
static void batched(bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
                    long long sa, const void *Bm, int ldb, long long sb, float beta, float *Cm,
                    int ldc, long long sc, int batch, cudaDataType_t ab, cudaStream_t stream)
{
    cublasHandle_t h = gpu_rt()->blas;
    CUBLAS_CHECK(cublasSetStream(h, stream));
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, Bm,
                                            ab, ldb, sb, A, ab, lda, sa, &beta, Cm, CUDA_R_32F, ldc,
                                            sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static size_t round256(size_t bytes)
{
    return CEIL_DIV(bytes, 256) * 256;
}

/* T = float: the fp32 specification's precision. T = __nv_bfloat16: the four batched GEMMs of
 * each direction take bf16 operands (q, k, v, dO, and the probabilities / dS rounded once),
 * accumulate in fp32 and write fp32; softmax and its backward stay fp32. */
template <typename T>
static void forward_impl(float *out, float *att, const float *qkv, const int *len, int B, int T_,
                         int C, int NH, cudaStream_t stream)
{
    const bool mixed = sizeof(T) == 2;
    const cudaDataType_t ab = mixed ? CUDA_R_16BF : CUDA_R_32F;
    const int hs = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T_ * C, rows = (size_t)BH * T_;
    const long long sq = (long long)T_ * hs, sp = (long long)T_ * T_;
    if (n == 0)
        return;
    /* q k v (T) | o (fp32) | P in bf16 (mixed only) */
    const size_t szT = round256(n * sizeof(T)), szF = round256(n * sizeof(float));
    char *base = (char *)gpu_scratch(3 * szT + szF + (mixed ? round256(rows * T_ * 2) : 0), stream);
    T *q = (T *)base, *k = (T *)(base + szT), *v = (T *)(base + 2 * szT);
    float *o = (float *)(base + 3 * szT);
    uint16_t *pb = (uint16_t *)(base + 3 * szT + szF);

    permute<T>(q, qkv, len, B, T_, C, NH, 3 * C, stream);
    permute<T>(k, qkv + C, len, B, T_, C, NH, 3 * C, stream);
    permute<T>(v, qkv + 2 * C, len, B, T_, C, NH, 3 * C, stream);
    /* S (T,T) = scale Q K^T */
    batched(false, true, T_, T_, hs, 1.0f / sqrtf((float)hs), q, hs, sq, k, hs, sq, 0.0f, att, T_,
            sp, BH, ab, stream);
    masked_softmax_kernel<<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(att, len, NH, T_, rows);
    GPU_LAUNCH_CHECK();
    const void *P = att;
    if (mixed) {
        cast_f32_to_bf16(pb, att, rows * T_, stream);
        P = pb;
    }
    /* O (T,hs) = P V */
    batched(false, false, T_, hs, T_, 1.0f, P, T_, sp, v, hs, sq, 0.0f, o, hs, sq, BH, ab, stream);
    unpermute_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(out, o, B, T_, NH, hs, C, 0);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(base, stream);
}

template <typename T>
static void backward_impl(float *dqkv, const float *dout, const float *qkv, const float *att,
                          const int *len, int B, int T_, int C, int NH, cudaStream_t stream)
{
    const bool mixed = sizeof(T) == 2;
    const cudaDataType_t ab = mixed ? CUDA_R_16BF : CUDA_R_32F;
    const int hs = C / NH, BH = B * NH;
    const size_t n = (size_t)B * T_ * C, rows = (size_t)BH * T_;
    const long long sq = (long long)T_ * hs, sp = (long long)T_ * T_;
    if (n == 0)
        return;
    /* q k v dO (T) | dq dk dv (fp32) | dP (fp32) | P, dS in bf16 (mixed only) */
    const size_t szT = round256(n * sizeof(T)), szF = round256(n * sizeof(float));
    const size_t szP = round256(rows * T_ * sizeof(float)), szPb = round256(rows * T_ * 2);
    char *base = (char *)gpu_scratch(4 * szT + 3 * szF + szP + (mixed ? 2 * szPb : 0), stream);
    T *q = (T *)base, *k = (T *)(base + szT), *v = (T *)(base + 2 * szT);
    T *dO = (T *)(base + 3 * szT);
    float *dq = (float *)(base + 4 * szT), *dk = (float *)(base + 4 * szT + szF);
    float *dv = (float *)(base + 4 * szT + 2 * szF), *dp = (float *)(base + 4 * szT + 3 * szF);
    uint16_t *pb = (uint16_t *)(base + 4 * szT + 3 * szF + szP);
    uint16_t *dsb = (uint16_t *)(base + 4 * szT + 3 * szF + szP + szPb);

    permute<T>(q, qkv, len, B, T_, C, NH, 3 * C, stream);
    permute<T>(k, qkv + C, len, B, T_, C, NH, 3 * C, stream);
    permute<T>(v, qkv + 2 * C, len, B, T_, C, NH, 3 * C, stream);
    permute<T>(dO, dout, len, B, T_, C, NH, C, stream);
    /* padding lives in att: its zero rows/columns mask every gradient below */
    const void *P = att, *dS = dp;
    if (mixed) {
        cast_f32_to_bf16(pb, att, rows * T_, stream);
        P = pb;
    }
    /* dP = dO V^T ; dV = P^T dO */
    batched(false, true, T_, T_, hs, 1.0f, dO, hs, sq, v, hs, sq, 0.0f, dp, T_, sp, BH, ab,
            stream);
    batched(true, false, T_, hs, T_, 1.0f, P, T_, sp, dO, hs, sq, 0.0f, dv, hs, sq, BH, ab,
            stream);
    softmax_backward_kernel<<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(
        dp, att, 1.0f / sqrtf((float)hs), T_, rows);
    GPU_LAUNCH_CHECK();
    if (mixed) {
        cast_f32_to_bf16(dsb, dp, rows * T_, stream);
        dS = dsb;
    }
    /* dQ = dS K ; dK = dS^T Q */
    batched(false, false, T_, hs, T_, 1.0f, dS, T_, sp, k, hs, sq, 0.0f, dq, hs, sq, BH, ab,
            stream);
    batched(true, false, T_, hs, T_, 1.0f, dS, T_, sp, q, hs, sq, 0.0f, dk, hs, sq, BH, ab,
            stream);
    unsigned grid = (unsigned)CEIL_DIV(n, 256);
    unpermute_kernel<<<grid, 256, 0, stream>>>(dqkv, dq, B, T_, NH, hs, 3 * C, 1);
    unpermute_kernel<<<grid, 256, 0, stream>>>(dqkv + C, dk, B, T_, NH, hs, 3 * C, 1);
    unpermute_kernel<<<grid, 256, 0, stream>>>(dqkv + 2 * C, dv, B, T_, NH, hs, 3 * C, 1);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(base, stream);
}

extern "C" void attention_forward(float *out, float *att, const float *qkv, const int *len, int B,
                                  int T, int C, int NH, struct CUstream_st *stream)
{
    forward_impl<float>(out, att, qkv, len, B, T, C, NH, stream);
}

extern "C" void attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *att, const int *len, int B, int T, int C, int NH,
                                   struct CUstream_st *stream)
{
    backward_impl<float>(dqkv, dout, qkv, att, len, B, T, C, NH, stream);
}

extern "C" void attention_forward_mixed(float *out, float *att, const float *qkv, const int *len,
                                        int B, int T, int C, int NH, struct CUstream_st *stream)
{
    forward_impl<__nv_bfloat16>(out, att, qkv, len, B, T, C, NH, stream);
}

extern "C" void attention_backward_mixed(float *dqkv, const float *dout, const float *qkv,
                                         const float *att, const int *len, int B, int T, int C,
                                         int NH, struct CUstream_st *stream)
{
    backward_impl<__nv_bfloat16>(dqkv, dout, qkv, att, len, B, T, C, NH, stream);
}
