// Multi-head attention with a key padding mask on the GPU, unfused: permute q, k, v to
// (B, NH, T, hs), S = scale Q K^T and O = P V as strided-batched cuBLAS GEMMs over the B * NH
// heads, and a masked softmax kernel in between (one warp per row).
//
// Why unfused is the default: the CPU contract keeps the probabilities att (B,NH,T,T) for the
// backward, and this layout reproduces it exactly, so the GPU op can be checked entry by entry
// against the specification (llm.c's first CUDA attention), and its GEMMs run on bf16 tensor
// cores. Its cost is O(T^2) memory per layer (about 400 MB at B=8, T=1024, NH=12 in fp32) and two
// extra passes over S. The fused kernels at the end of this file (attention_*_fused) keep only a
// log-sum-exp per row; docs/gpu.md says why they are not the default yet.
//
// Padding: rows of P for queries i >= len[b] and columns for keys j >= len[b] are zero, so O's
// padding rows are zero (as on the CPU) and the backward gives zero gradients there.
#include "kernels/attention.h"
#include "kernels/colsum.cuh"
#include "kernels/gpu_internal.h"

#include "kernels/tensorcore.h"

#include <math.h>
#include <string.h>

template <typename T> static __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

static __device__ __forceinline__ float to_f32(float x)
{
    return x;
}
static __device__ __forceinline__ float to_f32(__nv_bfloat16 x)
{
    return __bfloat162float(x);
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
    /* our workspace, not the library's (cublasSetStream resets it): inside a CUDA graph capture
     * cuBLAS would otherwise allocate a workspace of its own for every graph */
    CUBLAS_CHECK(cublasSetWorkspace(h, gpu_rt()->workspace, GPU_WORKSPACE_BYTES));
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

/* ==== fused attention (FlashAttention-2's algorithm on CUDA cores, fp32) =======================
 *
 * Forward: a block holds FA_WARPS queries of one (b, h), one warp per query; it walks the keys
 * j < len[b] in tiles of 32 staged in shared memory (one key per lane), keeps the running max m,
 * sum l and output o (lane d owns dims d, d + 32, ...) in registers and rescales them per tile
 * (online softmax). Nothing of size T x T is written: only out and the row log-sum-exp
 * lse = m + log(l), which the backward uses to recompute P = exp(S - lse).
 *
 * Backward: D_i = dO_i . O_i per row (fa_rowdot_kernel); dK and dV by a kernel that gives each warp
 * one key and walks the query tiles; dQ by one that gives each warp one query and walks the key
 * tiles. Each output element is summed by one thread in a fixed order: no atomics, so the results
 * are bit-identical from run to run (the CPU's determinism contract).
 *
 * q is scaled by 1/sqrt(hs) as it is loaded, in all three kernels, so forward and backward see
 * the same S. Head sizes up to ATTENTION_FUSED_MAX_HS; shorter heads are padded with zeros to 32,
 * 64 or 128 in registers.
 * Padding queries (i >= len[b]) get zero output and lse 0, padding keys are never read. */
#define FA_WARPS 8

template <int HSP>
static __global__ void __launch_bounds__(FA_WARPS * 32)
    fa_forward_kernel(float *out, float *lse, const float *qkv, const int *len, int T, int NH,
                      int hs, float scale)
{
    __shared__ float ks[32][HSP + 1], vs[32][HSP + 1];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * FA_WARPS + warp, L = len[b];
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const bool valid = i < L; /* warp-uniform */

    float q[HSP], o[HSP / 32];
#pragma unroll
    for (int d = 0; d < HSP; d++)
        q[d] = valid && d < hs ? base[(size_t)i * ld + d] * scale : 0.0f;
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        o[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    /* L is the same for the whole block: every thread takes part in every tile's loads */
    for (int j0 = (int)blockIdx.x * FA_WARPS < L ? 0 : L; j0 < L; j0 += 32) {
        __syncthreads(); /* the previous tile is no longer read */
        for (int x = threadIdx.x; x < 32 * HSP; x += blockDim.x) {
            int r = x / HSP, d = x % HSP, j = j0 + r;
            bool ok = j < L && d < hs;
            ks[r][d] = ok ? base[(size_t)j * ld + C + d] : 0.0f;
            vs[r][d] = ok ? base[(size_t)j * ld + 2 * C + d] : 0.0f;
        }
        __syncthreads();
        if (!valid)
            continue;
        float s = 0.0f;
#pragma unroll
        for (int d = 0; d < HSP; d++)
            s += q[d] * ks[lane][d];
        if (j0 + lane >= L)
            s = -INFINITY;
        float mn = fmaxf(m, warp_max(s)); /* finite: lane 0's key j0 < L is real */
        float p = expf(s - mn), corr = expf(m - mn);
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int r = 0; r < HSP / 32; r++)
            o[r] *= corr;
        for (int jj = 0; jj < 32; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int r = 0; r < HSP / 32; r++)
                o[r] += pj * vs[jj][lane + 32 * r];
        }
        m = mn;
    }
    if (i >= T)
        return;
    float *orow = out + ((size_t)b * T + i) * C + (size_t)h * hs;
    float inv = valid ? 1.0f / l : 0.0f;
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        if (lane + 32 * r < hs)
            orow[lane + 32 * r] = o[r] * inv;
    if (lane == 0)
        lse[(size_t)bh * T + i] = valid ? m + logf(l) : 0.0f;
}

#define TC_LOG2E 1.4426950408889634f

/* D (B,NH,T): D_i = dO_i . O_i over the head's dims, 0 for padding rows; one warp per row. dO
 * and O are fp32 (attention_backward_fused) or bf16 (attention_backward_fused_bf16). With lse2
 * (the bf16 path), also lse2 = lse log2(e), 0 in padding rows: the form the tensor-core dK/dV
 * kernel stages with cp.async. */
template <typename O>
static __global__ void fa_rowdot_kernel(float *D, const O *dout, const O *out, const int *len,
                                        int B, int T, int NH, int hs, float *lse2,
                                        const float *lse)
{
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (size_t)B * NH * T)
        return;
    int i = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / T / NH);
    float s = 0.0f;
    if (i < len[b]) {
        size_t o = ((size_t)b * T + i) * NH * hs + (size_t)h * hs;
        for (int d = lane; d < hs; d += 32)
            s += to_f32(dout[o + d]) * to_f32(out[o + d]);
    }
    s = warp_sum(s);
    if (lane == 0) {
        D[row] = s;
        if (lse2)
            lse2[row] = i < len[b] ? lse[row] * TC_LOG2E : 0.0f;
    }
}

/* One warp per key j (block: FA_WARPS keys of one (b, h)); lanes over a tile of 32 queries:
 * P_ij = exp(S_ij - lse_i), dV_j += sum_i P_ij dO_i, dK_j += sum_i P_ij (dO_i . V_j - D_i) q_i. */
template <int HSP>
static __global__ void __launch_bounds__(FA_WARPS * 32)
    fa_dkdv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                   const float *D, const int *len, int T, int NH, int hs, float scale)
{
    __shared__ float qs[32][HSP + 1], dos[32][HSP + 1], kw[FA_WARPS][HSP], vw[FA_WARPS][HSP];
    __shared__ float lse_s[32], D_s[32];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j = blockIdx.x * FA_WARPS + warp, L = len[b];
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const float *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    const bool valid = j < L;

    for (int d = lane; d < HSP; d += 32) {
        kw[warp][d] = valid && d < hs ? base[(size_t)j * ld + C + d] : 0.0f;
        vw[warp][d] = valid && d < hs ? base[(size_t)j * ld + 2 * C + d] : 0.0f;
    }
    float dk[HSP / 32], dv[HSP / 32];
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        dk[r] = dv[r] = 0.0f;
    for (int i0 = (int)blockIdx.x * FA_WARPS < L ? 0 : L; i0 < L; i0 += 32) {
        __syncthreads();
        for (int x = threadIdx.x; x < 32 * HSP; x += blockDim.x) {
            int r = x / HSP, d = x % HSP, i = i0 + r;
            bool ok = i < L && d < hs;
            qs[r][d] = ok ? base[(size_t)i * ld + d] * scale : 0.0f;
            dos[r][d] = ok ? dbase[(size_t)i * C + d] : 0.0f;
        }
        if (threadIdx.x < 32) {
            int i = i0 + threadIdx.x;
            lse_s[threadIdx.x] = i < L ? lse[(size_t)bh * T + i] : 0.0f;
            D_s[threadIdx.x] = i < L ? D[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        if (!valid)
            continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HSP; d++) {
            s += qs[lane][d] * kw[warp][d];
            dp += dos[lane][d] * vw[warp][d];
        }
        float p = i0 + lane < L ? expf(s - lse_s[lane]) : 0.0f;
        float ds = p * (dp - D_s[lane]);
        for (int ii = 0; ii < 32; ii++) {
            float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
            for (int r = 0; r < HSP / 32; r++) {
                dv[r] += pi * dos[ii][lane + 32 * r];
                dk[r] += dsi * qs[ii][lane + 32 * r];
            }
        }
    }
    if (!valid)
        return;
    float *drow = dqkv + ((size_t)b * T + j) * ld + (size_t)h * hs;
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        if (lane + 32 * r < hs) {
            drow[C + lane + 32 * r] += dk[r];
            drow[2 * C + lane + 32 * r] += dv[r];
        }
}

/* One warp per query i; lanes over a tile of 32 keys: dQ_i += scale sum_j dS_ij K_j with
 * dS_ij = P_ij (dO_i . V_j - D_i). */
template <int HSP>
static __global__ void __launch_bounds__(FA_WARPS * 32)
    fa_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                 const float *D, const int *len, int T, int NH, int hs, float scale)
{
    __shared__ float ks[32][HSP + 1], vs[32][HSP + 1], qw[FA_WARPS][HSP], dow[FA_WARPS][HSP];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * FA_WARPS + warp, L = len[b];
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const float *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    const bool valid = i < L;

    for (int d = lane; d < HSP; d += 32) {
        qw[warp][d] = valid && d < hs ? base[(size_t)i * ld + d] * scale : 0.0f;
        dow[warp][d] = valid && d < hs ? dbase[(size_t)i * C + d] : 0.0f;
    }
    const float lse_i = valid ? lse[(size_t)bh * T + i] : 0.0f;
    const float D_i = valid ? D[(size_t)bh * T + i] : 0.0f;
    float dq[HSP / 32];
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        dq[r] = 0.0f;
    for (int j0 = (int)blockIdx.x * FA_WARPS < L ? 0 : L; j0 < L; j0 += 32) {
        __syncthreads();
        for (int x = threadIdx.x; x < 32 * HSP; x += blockDim.x) {
            int r = x / HSP, d = x % HSP, j = j0 + r;
            bool ok = j < L && d < hs;
            ks[r][d] = ok ? base[(size_t)j * ld + C + d] : 0.0f;
            vs[r][d] = ok ? base[(size_t)j * ld + 2 * C + d] : 0.0f;
        }
        __syncthreads();
        if (!valid)
            continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HSP; d++) {
            s += qw[warp][d] * ks[lane][d];
            dp += dow[warp][d] * vs[lane][d];
        }
        float p = j0 + lane < L ? expf(s - lse_i) : 0.0f;
        float ds = p * (dp - D_i);
        for (int jj = 0; jj < 32; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int r = 0; r < HSP / 32; r++)
                dq[r] += dsj * ks[jj][lane + 32 * r];
        }
    }
    if (!valid)
        return;
    float *drow = dqkv + ((size_t)b * T + i) * ld + (size_t)h * hs;
#pragma unroll
    for (int r = 0; r < HSP / 32; r++)
        if (lane + 32 * r < hs)
            drow[lane + 32 * r] += dq[r] * scale;
}

static int fa_padded_head(int C, int NH, const char *who)
{
    int hs = C / NH;
    if (NH <= 0 || C % NH || hs > ATTENTION_FUSED_MAX_HS) {
        fprintf(stderr, "%s: head size %d (C=%d, NH=%d) is not supported by the fused kernel "
                        "(at most %d); use the unfused attention_forward\n",
                who, hs, C, NH, ATTENTION_FUSED_MAX_HS);
        abort();
    }
    return hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

extern "C" void attention_forward_fused(float *out, float *lse, const float *qkv, const int *len,
                                        int B, int T, int C, int NH, struct CUstream_st *stream)
{
    if ((size_t)B * T * C == 0)
        return;
    int hsp = fa_padded_head(C, NH, "attention_forward_fused"), hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    dim3 grid((unsigned)CEIL_DIV(T, FA_WARPS), (unsigned)(B * NH));
    if (hsp == 32)
        fa_forward_kernel<32><<<grid, FA_WARPS * 32, 0, stream>>>(out, lse, qkv, len, T, NH, hs,
                                                                  scale);
    else if (hsp == 64)
        fa_forward_kernel<64><<<grid, FA_WARPS * 32, 0, stream>>>(out, lse, qkv, len, T, NH, hs,
                                                                  scale);
    else
        fa_forward_kernel<128><<<grid, FA_WARPS * 32, 0, stream>>>(out, lse, qkv, len, T, NH, hs,
                                                                   scale);
    GPU_LAUNCH_CHECK();
}

template <int HSP>
static void fa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                        const float *D, const int *len, int B, int T, int NH, int hs,
                        cudaStream_t stream)
{
    float scale = 1.0f / sqrtf((float)hs);
    dim3 grid((unsigned)CEIL_DIV(T, FA_WARPS), (unsigned)(B * NH));
    fa_dkdv_kernel<HSP><<<grid, FA_WARPS * 32, 0, stream>>>(dqkv, dout, qkv, lse, D, len, T, NH,
                                                            hs, scale);
    GPU_LAUNCH_CHECK();
    fa_dq_kernel<HSP><<<grid, FA_WARPS * 32, 0, stream>>>(dqkv, dout, qkv, lse, D, len, T, NH, hs,
                                                          scale);
    GPU_LAUNCH_CHECK();
}

extern "C" void attention_backward_fused(float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, const int *len,
                                         int B, int T, int C, int NH, struct CUstream_st *stream)
{
    size_t rows = (size_t)B * NH * T;
    if ((size_t)B * T * C == 0)
        return;
    int hsp = fa_padded_head(C, NH, "attention_backward_fused"), hs = C / NH;
    float *D = (float *)gpu_scratch(rows * sizeof(float), stream);
    fa_rowdot_kernel<float><<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(D, dout, out, len, B,
                                                                             T, NH, hs, NULL, NULL);
    GPU_LAUNCH_CHECK();
    if (hsp == 32)
        fa_backward<32>(dqkv, dout, qkv, lse, D, len, B, T, NH, hs, stream);
    else if (hsp == 64)
        fa_backward<64>(dqkv, dout, qkv, lse, D, len, B, T, NH, hs, stream);
    else
        fa_backward<128>(dqkv, dout, qkv, lse, D, len, B, T, NH, hs, stream);
    gpu_scratch_free(D, stream);
}

/* ==== fused attention on tensor cores: bf16 in and out, fp32 accumulation and softmax ========
 *
 * The same algorithm with the five matrix products of each tile on tensor cores, FlashAttention-2's
 * way: mma.sync m16n8k16 with the scores, probabilities and accumulators in registers
 * (kernels/tensorcore.h gives the register layouts). A block has TC_WARPS warps of 16 rows each
 * (32 in the forward for head sizes up to 64: tc_dims::FMT): queries (forward, dQ) or keys
 * (dK/dV); the block's rows and each tile of TC_BC keys (or
 * queries) are staged in shared memory as bf16, and every operand that comes from there is read
 * with ldmatrix (.trans where the tile is stored [k][n]). A product's fp32 accumulators, rounded
 * to bf16, are directly the A operand of the next (P in P V, dS in dS K), so nothing of size
 * 16 x TC_BC goes through shared memory. Per warp and tile (s = 1/sqrt(hs), applied in fp32):
 *   forward   S = s Q K^T; online softmax over S's rows (the four lanes of a row reduce max and
 *             sum with shuffles, fp32); O = O * exp(m_old - m_new) + P V
 *   dK, dV    S^T = s K Q^T; P^T = exp(S^T - lse); dV += P^T dO; dP^T = V dO^T;
 *             dS^T = P^T (dP^T - D); dK += s dS^T Q
 *   dQ        S = s Q K^T; P; dP = dO V^T; dS = P (dP - D); dQ += s dS K
 * Its inputs and outputs are the bf16 training step's (worker/model_gpu.cu): qkv comes in bf16
 * as its GEMM wrote it (staged by 16-byte copies, no conversion), O goes out in bf16 (the
 * operand of the projection GEMM, and D = rowsum(dO o O) in the backward reads it back), dO
 * comes in bf16 from the projection's backward GEMM, and dqkv goes out in bf16 (the qkv GEMM's
 * operand), overwritten, padding rows zero, with the qkv bias gradient summed here: no clearing
 * pass, no cast, no fp32 dqkv. Every sum is fp32, every output element has one writer
 * (deterministic). The walked tiles are double-buffered: the next tile's cp.async copies are in
 * flight while this one's products run, one barrier a tile (tc_tile_begin). Shared memory: 5 or
 * 6 (forward) or 6 (backward) bf16 tiles of 64 rows, 30 KB (head size 32), 54 KB (64), 85 KB
 * forward and 102 KB backward (128), so two blocks fit on an SM as the registers allow. Rows
 * are padded by 16 bytes: ldmatrix's eight row addresses then fall on distinct banks. */
#define TC_WARPS 4
#define TC_BR (16 * TC_WARPS) /* rows of a block: queries (forward, dQ) or keys (dK/dV) */
#define TC_BC 64              /* a tile: keys (forward, dQ) or queries (dK/dV) */
#define TC_NB (TC_BC / 8)     /* 16x8 score accumulators per warp and tile */

template <int HSP> struct tc_dims {
    static constexpr int LDH = HSP + 8; /* bf16 (rows, HSP) tiles */
    static constexpr size_t TE = (size_t)TC_BR * LDH; /* elements of one (64, HSP) bf16 tile */
    static constexpr size_t H = TE * 2;               /* its bytes */
    /* forward: each warp takes FMT m-tiles of 16 queries, so every K/V fragment it loads from
     * shared memory feeds FMT products (16 rows a warp need twice the shared-memory bandwidth
     * per FLOP that the tensor cores can be fed at); 1 for head size 128 (registers) */
    static constexpr int FMT = HSP <= 64 ? 2 : 1;
    static constexpr int FBR = 16 * FMT * TC_WARPS; /* queries of a forward block */
    /* the walked tiles are double-buffered (tc_tile_begin): two of each */
    static constexpr size_t fwd = (FMT + 4) * H; /* Q (FBR rows), K, V, K', V' */
    /* backward: a warp's own rows' A fragments kept in registers for all tiles (tc_load_a_all);
     * at head size 128 they would spill */
    static constexpr bool HOIST = HSP <= 64;
    static constexpr int NA = HOIST ? HSP / 16 : 1;
    static constexpr size_t dkdv = 6 * H + 4 * TC_BC * 4; /* K V | Q dO, lse D | Q' dO', ... */
    static constexpr size_t dq = 6 * H;                   /* Q dO | K V | K' V' */
    static_assert(TC_BR == TC_BC, "one tile size for the block's rows and the walked tiles");
    static_assert(HSP % 16 == 0, "head dims padded to whole 16-wide k steps");
};


/* dst (nrows, HSP) bf16 <- rows r0.. of src (bf16, row stride ld): a head's q, k or v (ld = 3C)
 * or dO (ld = C); rows >= L and columns >= hs are zeros (padding is never read). Rows of whole
 * 16-byte chunks are copied with cp.async, 16 bytes at a time (padding chunks as zero fills): in
 * flight until the caller's tc_cp_commit and tc_cp_wait; others element by element, at once. */
template <int HSP, int NROWS = TC_BC>
static __device__ void tc_stage(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t ld, int r0,
                                int L, int hs)
{
    constexpr int LDH = tc_dims<HSP>::LDH, CH = HSP / 8, NT = TC_WARPS * 32;
    const unsigned tid = threadIdx.x;
    if (hs % 8 == 0 && ld % 8 == 0 && ld < (1u << 24) && (uintptr_t)src % 16 == 0) {
        if constexpr (NROWS * CH <= 4 * NT && HSP >= 64) {
            /* head size 64, up to 4 chunks a thread: every tc_ kernel runs TC_WARPS warps, so
             * with NROWS known the loop unrolls, a chunk's row and column are constants plus
             * the thread's own (unsigned shifts), and its address is one 64-bit base a call
             * plus a 32-bit offset (NROWS * ld < 2^31): a few instructions a chunk instead of a
             * loop's worth (ptxas, sm_90: dK/dV 223 registers, was 225). At head size 128 the
             * 8 chunks unrolled take the dK/dV kernel past 255 registers (spills), at 32 from
             * 127 to 138 (3 blocks an SM instead of 4): the loop below for those. */
            const __nv_bfloat16 *row0 = src + (size_t)r0 * ld;
            const unsigned lde = (unsigned)ld;
#pragma unroll
            for (int x0 = 0; x0 < NROWS * CH; x0 += NT) {
                const unsigned x = x0 + tid;
                if ((NROWS * CH) % NT != 0 && x >= (unsigned)(NROWS * CH))
                    break;
                const unsigned r = x / CH, d = x % CH * 8;
                const bool real = r0 + (int)r < L && (int)d < hs;
                /* a padding chunk reads nothing (zero fill) but names row r0's start, in range */
                tc_cp_async16(dst + r * LDH + d, row0 + (real ? r * lde + d : 0u), real);
            }
        } else {
#pragma unroll 1
            for (int x = threadIdx.x; x < NROWS * CH; x += NT) {
                const int r = x / CH, d = x % CH * 8, t = r0 + r;
                const bool real = t < L && d < hs;
                tc_cp_async16(dst + r * LDH + d, real ? src + (size_t)t * ld + d : src, real);
            }
        }
        return;
    }
    for (unsigned x = tid; x < (unsigned)(NROWS * HSP); x += NT) {
        const int r = (int)(x / HSP), d = (int)(x % HSP), t = r0 + r;
        dst[r * LDH + d] = t < L && d < hs ? src[(size_t)t * ld + d] : __float2bfloat16_rn(0.0f);
    }
}

/* The walk over tiles, double-buffered: the block's first tile (with its own rows) is staged
 * before the walk; at each tile, tc_tile_begin waits for its copies, and after the barrier (which
 * makes them visible and tells that every warp is done with the previous tile, so the other
 * buffer is free) issues the next tile's copies into the other buffer (stage_next, when there is
 * a next tile), which then land while this tile's products run. One barrier a tile. With WG the
 * tiles are read by wgmma, through the async proxy: each thread fences its landed copies (and
 * plain stores) to it before the barrier. */
template <bool WG = false, typename F>
static __device__ __forceinline__ void tc_tile_begin(bool more, F stage_next)
{
    tc_cp_wait<0>();
    if constexpr (WG)
        tc_wg_proxy_fence();
    __syncthreads();
    if (more) {
        stage_next();
        tc_cp_commit();
    }
}

/* acc (16 x 8*NB) += A (16 x K, rows of a row-major tile in shared memory) x tile^T, where tile
 * is stored [n][k] (rows n0.. of K, V, Q or dO): the scores S = Q K^T and their kin. With MT
 * m-tiles: A has 16 * MT rows and acc MT * NB accumulators (m-tile i at acc + i * NB); each B
 * fragment is loaded once for all of them. */
template <int K, int NB, int LD, int MT = 1>
static __device__ __forceinline__ void tc_rows_by_tile_t(float (*acc)[4], const __nv_bfloat16 *a,
                                                         const __nv_bfloat16 *tile)
{
#pragma unroll
    for (int k = 0; k < K; k += 16) {
        uint32_t fa[MT][4];
#pragma unroll
        for (int i = 0; i < MT; i++)
            tc_load_a<LD>(fa[i], a + i * 16 * LD, k);
#pragma unroll
        for (int n = 0; n < NB; n += 2) {
            uint32_t fb[4];
            tc_load_b_nk<LD>(fb, tile, n * 8, k);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                tc_mma(acc[i * NB + n], fa[i], fb);
                tc_mma(acc[i * NB + n + 1], fa[i], fb + 2);
            }
        }
    }
}

/* A warp's fixed rows (16 x K of a row-major tile in shared memory) as A fragments, one per
 * k-step of 16, for tc_frags_by_tile_t: loaded once for all the tiles a block walks (K_w and V_w
 * in dK/dV, Q_w and dO_w in dQ) instead of again for every tile. */
template <int K, int LD>
static __device__ __forceinline__ void tc_load_a_all(uint32_t (*fa)[4], const __nv_bfloat16 *a)
{
#pragma unroll
    for (int k = 0; k < K; k += 16)
        tc_load_a<LD>(fa[k / 16], a, k);
}

/* Rows r0.. of two tensors (a tile of K and V, or of Q and dO) staged as TC_BC-row tiles. */
template <int HSP>
static __device__ void tc_stage2(__nv_bfloat16 *t1, const __nv_bfloat16 *src1, size_t ld1,
                                 __nv_bfloat16 *t2, const __nv_bfloat16 *src2, size_t ld2, int r0,
                                 int L, int hs)
{
    tc_stage<HSP>(t1, src1, ld1, r0, L, hs);
    tc_stage<HSP>(t2, src2, ld2, r0, L, hs);
}

/* The K and V tiles at key j0 (rows of the head's k, v: base + C, base + 2C, row stride ld) into
 * buffer c of KVs (K at tile 2c, V at 2c + 1): the tiles the forward and dQ walk; with WG in
 * wgmma's core matrices (tc_stage_blk, defined below). */
template <int HSP, bool WG = false>
static __device__ __forceinline__ void tc_stage_kv(__nv_bfloat16 *KVs, int c,
                                                   const __nv_bfloat16 *base, int C, size_t ld,
                                                   int j0, int L, int hs);

/* dst (TC_BC rows, HSP) bf16 <- rows r0.. of src as tc_stage does, but laid out for wgmma
 * (kernels/tensorcore.h): 8 x 16-byte core matrices, 128 contiguous bytes each, core matrix
 * (row group rg, column chunk c) at (rg * HSP / 8 + c) * 128 bytes, its row r % 8 at + 16 (r % 8).
 * As a K-major B (K in S = Q K^T: n = row) its descriptor has lbo 128 (the next 8 columns) and
 * sbo HSP * 16 (the next 8 rows); as an MN-major B (V in O = P V: k = row) lbo HSP * 16 and sbo
 * 128. Chunk x of the tile is row (x / (8 CH)) * 8 + x % 8, columns (x / 8 % CH) * 8.., so it
 * lands at dst + 8 x: eight neighbouring threads write 128 contiguous bytes. */
template <int HSP>
static __device__ void tc_stage_blk(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t ld,
                                    int r0, int L, int hs)
{
    constexpr int CH = HSP / 8, NT = TC_WARPS * 32, NCH = TC_BC * CH;
    const unsigned tid = threadIdx.x;
    if (hs % 8 == 0 && ld % 8 == 0 && (uintptr_t)src % 16 == 0) {
        if constexpr (NCH <= 4 * NT) {
            if (ld < (1u << 24)) {
                /* as tc_stage's unrolled form (head size 64: 4 chunks a thread): a chunk's row
                 * and column from unsigned shifts, its address one base plus a 32-bit offset;
                 * the loop below took ~35 instructions a chunk (sm_90a SASS: signed
                 * divisions, 64-bit products, the element path's branch inside it) */
                const __nv_bfloat16 *row0 = src + (size_t)r0 * ld;
                const unsigned lde = (unsigned)ld;
#pragma unroll
                for (int x0 = 0; x0 < NCH; x0 += NT) {
                    const unsigned x = x0 + tid;
                    if (NCH % NT != 0 && x >= (unsigned)NCH)
                        break;
                    const unsigned r = x / (8 * CH) * 8 + x % 8, d = x / 8 % CH * 8;
                    const bool real = r0 + (int)r < L && (int)d < hs;
                    tc_cp_async16(dst + 8 * x, row0 + (real ? r * lde + d : 0u), real);
                }
                return;
            }
        }
#pragma unroll 1
        for (int x = tid; x < NCH; x += NT) {
            const int r = x / (8 * CH) * 8 + x % 8, d = x / 8 % CH * 8, t = r0 + r;
            const bool real = t < L && d < hs;
            tc_cp_async16(dst + 8 * x, real ? src + (size_t)t * ld + d : src, real);
        }
        return;
    }
#pragma unroll 1
    for (int x = tid; x < NCH; x += NT) {
        const int r = x / (8 * CH) * 8 + x % 8, d = x / 8 % CH * 8, t = r0 + r;
        for (int e = 0; e < 8; e++)
            dst[8 * x + e] = t < L && d + e < hs ? src[(size_t)t * ld + d + e]
                                                 : __float2bfloat16_rn(0.0f);
    }
}

template <int HSP, bool WG>
static __device__ __forceinline__ void tc_stage_kv(__nv_bfloat16 *KVs, int c,
                                                   const __nv_bfloat16 *base, int C, size_t ld,
                                                   int j0, int L, int hs)
{
    constexpr size_t TE = tc_dims<HSP>::TE;
    if constexpr (WG) {
        tc_stage_blk<HSP>(KVs + 2 * c * TE, base + C, ld, j0, L, hs);
        tc_stage_blk<HSP>(KVs + (2 * c + 1) * TE, base + 2 * C, ld, j0, L, hs);
    } else {
        tc_stage2<HSP>(KVs + 2 * c * TE, base + C, ld, KVs + (2 * c + 1) * TE, base + 2 * C, ld,
                       j0, L, hs);
    }
}

/* The backward's own rows (K, V in dK/dV; Q, dO in dQ): with HOIST, the warp's 16 rows of each
 * (w1, w2: staged, and visible after the first tile's barrier) loaded as A fragments once for
 * all the tiles the block walks. */
template <int HSP, bool HOIST>
static __device__ __forceinline__ void tc_hoist(uint32_t (*a1)[4], const __nv_bfloat16 *w1,
                                                uint32_t (*a2)[4], const __nv_bfloat16 *w2)
{
    if constexpr (HOIST) {
        tc_load_a_all<HSP, tc_dims<HSP>::LDH>(a1, w1);
        tc_load_a_all<HSP, tc_dims<HSP>::LDH>(a2, w2);
    } else {
        (void)a1, (void)w1, (void)a2, (void)w2;
    }
}

/* tc_rows_by_tile_t with A from tc_load_a_all's fragments (m-tile i's at fa + i * K / 16). */
template <int K, int NB, int LD, int MT = 1>
static __device__ __forceinline__ void tc_frags_by_tile_t(float (*acc)[4], const uint32_t (*fa)[4],
                                                          const __nv_bfloat16 *tile)
{
#pragma unroll
    for (int k = 0; k < K; k += 16)
#pragma unroll
        for (int n = 0; n < NB; n += 2) {
            uint32_t fb[4];
            tc_load_b_nk<LD>(fb, tile, n * 8, k);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                tc_mma(acc[i * NB + n], fa[i * (K / 16) + k / 16], fb);
                tc_mma(acc[i * NB + n + 1], fa[i * (K / 16) + k / 16], fb + 2);
            }
        }
}

/* tc_acc_by_tile's default for what it does with each packed operand: nothing */
struct tc_keep {
    __device__ __forceinline__ void operator()(int, const uint32_t *) const {}
};

/* acc (16 x HSP) += P (16 x TC_BC, fp32 accumulators, rounded to bf16 here) x tile (TC_BC x HSP,
 * stored [k][n]): O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K. With MT m-tiles, acc and p
 * hold MT of each (m-tile i at acc + i * HSP / 8, p + i * TC_NB), sharing every B fragment.
 * on_a(kc, a) sees m-tile 0's packed operand of columns 16 kc.. (the dK/dV kernel stores dS^T
 * from it), as it is made, so it needs no registers of its own. */
template <int HSP, int LD, int MT = 1, typename F = tc_keep>
static __device__ __forceinline__ void tc_acc_by_tile(float (*acc)[4], const float (*p)[4],
                                                      const __nv_bfloat16 *tile, F on_a = F())
{
#pragma unroll
    for (int kc = 0; kc < TC_NB / 2; kc++) {
        uint32_t fa[MT][4];
#pragma unroll
        for (int i = 0; i < MT; i++)
            tc_pack_a(fa[i], p[i * TC_NB + 2 * kc], p[i * TC_NB + 2 * kc + 1]);
        on_a(kc, fa[0]);
#pragma unroll
        for (int n = 0; n < HSP / 8; n += 2) {
            uint32_t fb[4];
            tc_load_b_kn<LD>(fb, tile, kc * 16, n * 8);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                tc_mma(acc[i * (HSP / 8) + n], fa[i], fb);
                tc_mma(acc[i * (HSP / 8) + n + 1], fa[i], fb + 2);
            }
        }
    }
}

/* The two products above on Hopper's wgmma (kernels/tensorcore.h), for head size 64, where the
 * tiles are staged in core matrices (tc_stage_blk) and the block's 4 warps are one warpgroup:
 * each m64 product is the 4 warps' 16-row m-tiles together. Same accumulator layouts as the
 * mma.sync forms, so the code around them is shared; each call fences, issues, commits and
 * waits, so its results may be read when it returns.
 *   tc_wg_ss_by_tile_t: acc (16 x TC_BC a warp and m-tile) = A x tile^T with both operands read
 *     by the tensor cores from shared memory (no ldmatrix, no A registers): A a block of 64 rows
 *     x HSP (m-tile i the rows 64 i .. of a + i TE, warp w's the 16 w .. of those), the tile
 *     stored [n][k]; both K-major: lbo 128, sbo HSP * 16, a k-step 2 core matrices on.
 *     Overwrites acc.
 *   tc_wg_acc_by_tile: acc (16 x HSP) += P (16 x TC_BC fp32, rounded to bf16 here, A in
 *     registers) x tile, the tile stored [k][n] (MN-major: lbo HSP * 16, sbo 128; a k-step is 2
 *     row groups on). The A registers are kept until the wait, as wgmma reads them late.
 * A held in registers across calls was seen to lose them to other values in ptxas 13.0.88's
 * code (the forward with Q hoisted in registers: its later tiles' S products read P); from shared
 * memory there is nothing to hold. */
template <int HSP>
static __device__ __forceinline__ void tc_wg_issue_ss(float (*acc)[4], const __nv_bfloat16 *a,
                                                      const __nv_bfloat16 *tile)
{
    static_assert(TC_BC == 64 && TC_BR == 64, "wgmma m64n64: 64-row blocks and tiles");
    /* both K-major: lbo 128, sbo HSP * 16; a k-step 2 core matrices (256 bytes) on */
    const uint64_t ad = tc_wg_desc(a, 128, HSP * 16), bd = tc_wg_desc(tile, 128, HSP * 16);
#pragma unroll
    for (int ks = 0; ks < HSP / 16; ks++)
        tc_wgmma_n64_ss<false>(&acc[0][0], tc_wg_desc_add(ad, ks * 256),
                               tc_wg_desc_add(bd, ks * 256), ks > 0);
}
template <int HSP>
static __device__ __forceinline__ void tc_wg_issue_acc(float (*acc)[4], const uint32_t (*pa)[4],
                                                       const __nv_bfloat16 *tile)
{
    static_assert(HSP == 64, "wgmma n64: head size 64");
    /* MN-major: lbo HSP * 16, sbo 128; a k-step 2 row groups (32 HSP bytes) on */
    const uint64_t bd = tc_wg_desc(tile, HSP * 16, 128);
#pragma unroll
    for (int kc = 0; kc < TC_NB / 2; kc++)
        tc_wgmma_n64<true>(&acc[0][0], pa[kc], tc_wg_desc_add(bd, kc * 32 * HSP), true);
}
/* P's operands (the fp32 accumulators of 16 x TC_BC, rounded to bf16) for tc_wg_issue_acc */
static __device__ __forceinline__ void tc_wg_pack(uint32_t (*pa)[4], const float (*p)[4])
{
#pragma unroll
    for (int kc = 0; kc < TC_NB / 2; kc++)
        tc_pack_a(pa[kc], p[2 * kc], p[2 * kc + 1]);
}

template <int HSP, int MT = 1>
static __device__ __forceinline__ void tc_wg_ss_by_tile_t(float (*acc)[4], const __nv_bfloat16 *a,
                                                          const __nv_bfloat16 *tile)
{
    tc_wg_fence();
#pragma unroll
    for (int i = 0; i < MT; i++)
        tc_wg_issue_ss<HSP>(acc + i * TC_NB, a + i * tc_dims<HSP>::TE, tile);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<MT * TC_NB>(acc);
}
template <int HSP, int MT = 1>
static __device__ __forceinline__ void tc_wg_acc_by_tile(float (*acc)[4], const float (*p)[4],
                                                         const __nv_bfloat16 *tile)
{
    uint32_t pa[MT][TC_NB / 2][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
        tc_wg_pack(pa[i], p + i * TC_NB);
    /* acc may have been written since the last wait (the forward rescales O): pinned before
     * the fence, as P's operands are */
    tc_wg_pin<MT * (HSP / 8)>(acc);
    tc_wg_pin<MT * (TC_NB / 2)>(pa[0]);
    tc_wg_fence();
#pragma unroll
    for (int i = 0; i < MT; i++)
        tc_wg_issue_acc<HSP>(acc + i * (HSP / 8), pa[i], tile);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<MT * (HSP / 8)>(acc);
    tc_wg_pin<MT * (TC_NB / 2)>(pa[0]);
}

/* Two independent products of each kind in one batch (one fence, one wait): the backward's
 * S and dP (both by tile^T), and its two accumulations (dV and dK in dK/dV), so a tile waits for
 * the tensor cores twice instead of four times. on_a (as in tc_acc_by_tile) sees the second
 * product's operands. */
template <int HSP>
static __device__ __forceinline__ void tc_wg_ss2_by_tile_t(float (*acc1)[4],
                                                           const __nv_bfloat16 *a1,
                                                           const __nv_bfloat16 *tile1,
                                                           float (*acc2)[4],
                                                           const __nv_bfloat16 *a2,
                                                           const __nv_bfloat16 *tile2)
{
    tc_wg_fence();
    tc_wg_issue_ss<HSP>(acc1, a1, tile1);
    tc_wg_issue_ss<HSP>(acc2, a2, tile2);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<TC_NB>(acc1);
    tc_wg_pin<TC_NB>(acc2);
}
template <int HSP, typename F = tc_keep>
static __device__ __forceinline__ void tc_wg_acc2_by_tile(float (*acc1)[4], const float (*p1)[4],
                                                          const __nv_bfloat16 *tile1,
                                                          float (*acc2)[4], const float (*p2)[4],
                                                          const __nv_bfloat16 *tile2,
                                                          F on_a = F())
{
    uint32_t a1[TC_NB / 2][4], a2[TC_NB / 2][4];
    tc_wg_pack(a1, p1);
    tc_wg_pack(a2, p2);
#pragma unroll
    for (int kc = 0; kc < TC_NB / 2; kc++)
        on_a(kc, a2[kc]);
    tc_wg_pin<HSP / 8>(acc1);
    tc_wg_pin<HSP / 8>(acc2);
    tc_wg_pin<TC_NB / 2>(a1);
    tc_wg_pin<TC_NB / 2>(a2);
    tc_wg_fence();
    tc_wg_issue_acc<HSP>(acc1, a1, tile1);
    tc_wg_issue_acc<HSP>(acc2, a2, tile2);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<HSP / 8>(acc1);
    tc_wg_pin<HSP / 8>(acc2);
    tc_wg_pin<TC_NB / 2>(a1);
    tc_wg_pin<TC_NB / 2>(a2);
}

/* Columns c0 + c >= L of a warp's 16 x TC_BC scores (keys of padding) set to -inf, before the
 * exponential. */
static __device__ __forceinline__ void tc_mask_cols(float (*s)[4], int c0, int L)
{
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < TC_NB; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (c0 + n * 8 + 2 * t + (e & 1) >= L)
                s[n][e] = -INFINITY;
}

/* Clears N 16x8 accumulators. */
template <int N> static __device__ __forceinline__ void tc_zero(float (*acc)[4])
{
#pragma unroll
    for (int n = 0; n < N; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* f(d, v) for each of this lane's elements v of row r (0: g, 1: g + 8) of a (16, HSP) accumulator
 * with column d < hs (the head's real dims) */
template <int HSP, typename F>
static __device__ __forceinline__ void tc_row_each(const float (*acc)[4], int r, int hs, F f)
{
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < HSP / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int d = n * 8 + 2 * t + e;
            if (d < hs)
                f(d, acc[n][2 * r + e]);
        }
}


/* f(d, v0, v1) for each of this lane's two adjacent elements (columns d, d + 1) of row r of a
 * (16, HSP) accumulator with d < hs, where hs is even: what a 4-byte store of a bf16 pair takes */
template <int HSP, typename F>
static __device__ __forceinline__ void tc_row_pairs(const float (*acc)[4], int r, int hs, F f)
{
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < HSP / 8; n++) {
        const int d = n * 8 + 2 * t;
        if (d < hs)
            f(d, acc[n][2 * r], acc[n][2 * r + 1]);
    }
}

/* A block's gradient rows for one head's columns (q, k or v), from the warps' accumulators: the
 * lane's rows warp * 16 + g (+ 8) hold acc times mul, or zeros for a padding row (!valid[r]),
 * stored rounded to bf16 at dst (the block's first row and the head's first column of dqkv16;
 * row stride ld) unless past the sequence's end (rows_left rows remain in it). With part (the
 * bias gradient asked for), the block's column sums of those fp32 values go to part[0..hs):
 * over each warp's 16 rows (two per lane, then across its lane groups by shuffles), then over
 * the warps in order through red (TC_WARPS x HSP floats of shared memory the tiles no longer
 * need): a fixed order, so deterministic. Every thread of the block calls it. */
template <int HSP>
static __device__ void tc_store_grad(__nv_bfloat16 *dst, size_t ld, int rows_left,
                                     const float (*acc)[4], const bool valid[2], float mul,
                                     int hs, float *part, float *red)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = warp * 16 + g + 8 * r;
        if (row < rows_left)
            tc_row_each<HSP>(acc, r, hs, [&](int d, float v) {
                dst[(size_t)row * ld + d] = __float2bfloat16_rn(valid[r] ? v * mul : 0.0f);
            });
    }
    if (!part) /* block-uniform */
        return;
    __syncthreads(); /* every warp is past its last tile: red may overwrite them */
#pragma unroll
    for (int n = 0; n < HSP / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float v = (valid[0] ? acc[n][e] * mul : 0.0f) + (valid[1] ? acc[n][2 + e] * mul : 0.0f);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (g == 0)
                red[warp * HSP + n * 8 + 2 * t + e] = v;
        }
    __syncthreads();
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float sum = red[d];
        for (int w = 1; w < TC_WARPS; w++)
            sum += red[w * HSP + d];
        part[d] = sum;
    }
    __syncthreads(); /* red read: the next call may write it */
}

/* The forward. With QH the warp's queries' A fragments are loaded from shared memory once, for
 * all key tiles, instead of again for every tile (8 of the 40 ldmatrix a tile at head size 64;
 * 243 registers there instead of 198, no spills, still 2 blocks an SM): same arithmetic, same
 * bits. Not the default until measured (attention_forward_fused_bf16_qhoist).
 * With WG (head size 64 only, QH false) both products of a tile are Hopper's wgmma
 * (kernels/tensorcore.h): the block's 4 warps are one warpgroup, and m-tile i of every warp
 * (rows 64 i + 16 w) is one m64 product, so S = Q K^T is 2 m-tiles x 4 k-steps of m64n64k16 with
 * Q and K read by the tensor cores from shared memory, staged in core matrices (tc_stage_blk),
 * and O += P V likewise with V read MN-major and P from registers; no ldmatrix. The softmax is
 * the same code on the same accumulator layout. Each batch of products is fenced, committed and
 * waited for before its results are read (no overlap of the softmax with the next products yet:
 * FlashAttention-3's ping-pong is the step after). The products sum in an order the hardware
 * does not specify, so the bits may differ from the mma.sync kernels' by fp32 roundings. */
template <int HSP, bool QH, bool WG = false>
static __global__ void __launch_bounds__(TC_WARPS * 32)
    tc_forward_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int *len,
                      int T, int NH, int hs, float scale)
{
    static_assert(!WG || (HSP == 64 && !QH), "the wgmma forward: head size 64, its own Q loads");
    typedef tc_dims<HSP> D;
    constexpr int MT = D::FMT, NO = HSP / 8; /* m-tiles a warp, O accumulators an m-tile */
    extern __shared__ float tc_smem[];
    char *sm = (char *)tc_smem;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm;
    __nv_bfloat16 *KVs = (__nv_bfloat16 *)(sm + MT * D::H); /* K, V of buffer c at 2c, 2c + 1 */

    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int q0 = blockIdx.x * D::FBR, L = len[b];
    const size_t ld = 3 * (size_t)C;
    const __nv_bfloat16 *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const __nv_bfloat16 *Qw = Qs + warp * 16 * MT * D::LDH;
    const float sl2 = scale * TC_LOG2E;
    /* O's rows stored as bf16 pairs (4 bytes) where every row start is 4-byte aligned */
    const bool pairs = hs % 2 == 0 && (uintptr_t)out % 4 == 0;

    /* per m-tile i: O in o + i * NO, its rows g, g + 8 in m[i][0..1], l[i][0..1] (l: this
     * lane's part of the row sum) */
    float o[MT * NO][4];
    float m[MT][2], l[MT][2];
    uint32_t qa[QH ? MT * (HSP / 16) : 1][4]; /* QH: the warp's queries as A operands */
    tc_zero<MT * NO>(o);
#pragma unroll
    for (int i = 0; i < MT; i++)
        m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;
    auto stage_kv = [&](int cb, int j0) { tc_stage_kv<HSP, WG>(KVs, cb, base, C, ld, j0, L, hs); };
    if (q0 < L) { /* block-uniform: the barriers below are reached by all or none */
        if constexpr (WG) /* m-tile i in core matrices at Qs + i TE, for the tensor cores */
#pragma unroll
            for (int i = 0; i < MT; i++)
                tc_stage_blk<HSP>(Qs + i * D::TE, base, ld, q0 + i * TC_BR, L, hs);
        else
            tc_stage<HSP, D::FBR>(Qs, base, ld, q0, L, hs);
        stage_kv(0, 0);
        tc_cp_commit();
    }
    for (int j0 = 0, c = 0; q0 < L && j0 < L; j0 += TC_BC, c ^= 1) {
        tc_tile_begin<WG>(j0 + TC_BC < L, [&] { stage_kv(c ^ 1, j0 + TC_BC); });
        const __nv_bfloat16 *Ks = KVs + 2 * c * D::TE, *Vs = Ks + D::TE;
        float s[MT * TC_NB][4]; /* unscaled scores Q K^T; m, the row max, likewise */
        if constexpr (WG) {
            tc_wg_ss_by_tile_t<HSP, MT>(s, Qs, Ks); /* Q read by the tensor cores */
        } else if constexpr (QH) {
            tc_zero<MT * TC_NB>(s);
            if (j0 == 0) /* Q landed with the first tile */
#pragma unroll
                for (int i = 0; i < MT; i++)
                    tc_load_a_all<HSP, D::LDH>(qa + i * (HSP / 16), Qw + i * 16 * D::LDH);
            tc_frags_by_tile_t<HSP, TC_NB, D::LDH, MT>(s, qa, Ks);
        } else {
            tc_zero<MT * TC_NB>(s);
            tc_rows_by_tile_t<HSP, TC_NB, D::LDH, MT>(s, Qw, Ks);
        }
#pragma unroll
        for (int i = 0; i < MT; i++) {
            float(*si)[4] = s + i * TC_NB;
            if (j0 + TC_BC > L) /* the last tile: keys of padding masked */
                tc_mask_cols(si, j0, L);
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < TC_NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    mx[e >> 1] = fmaxf(mx[e >> 1], si[n][e]);
            float corr[2], msl[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float mn = fmaxf(m[i][r], mx[r]); /* finite: key j0 < L is real */
                corr[r] = tc_exp2((m[i][r] - mn) * sl2); /* 0 on the first tile */
                m[i][r] = mn;
                msl[r] = mn * sl2;
            }
#pragma unroll
            for (int n = 0; n < TC_NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) { /* exp(scale (s - m)); masked keys: 2^-inf = 0 */
                    si[n][e] = tc_exp2(fmaf(si[n][e], sl2, -msl[e >> 1]));
                    sum[e >> 1] += si[n][e];
                }
#pragma unroll
            for (int r = 0; r < 2; r++)
                l[i][r] = l[i][r] * corr[r] + sum[r];
#pragma unroll
            for (int n = 0; n < NO; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[i * NO + n][e] *= corr[e >> 1];
        }
        if constexpr (WG)
            tc_wg_acc_by_tile<HSP, MT>(o, s, Vs);
        else
            tc_acc_by_tile<HSP, D::LDH, MT>(o, s, Vs);
    }
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float lr = l[i][r]; /* the row's sum over its four lanes */
            lr += __shfl_xor_sync(0xffffffffu, lr, 1);
            lr += __shfl_xor_sync(0xffffffffu, lr, 2);
            /* WG: m-tile i of every warp makes the 64 rows of product i */
            const int q = q0 + (WG ? i * TC_BR + warp * 16 : (warp * MT + i) * 16) + g + 8 * r;
            if (q >= T)
                continue;
            const bool valid = q < L;
            const float inv = 1.0f / lr; /* one division a row */
            __nv_bfloat16 *dst = out + ((size_t)b * T + q) * C + (size_t)h * hs;
            if (pairs)
                tc_row_pairs<HSP>(o + i * NO, r, hs, [&](int d, float v0, float v1) {
                    tc_store32(dst + d, valid ? tc_pack(v0 * inv, v1 * inv) : 0u);
                });
            else
                tc_row_each<HSP>(o + i * NO, r, hs, [&](int d, float v) {
                    dst[d] = __float2bfloat16_rn(valid ? v * inv : 0.0f);
                });
            if (t == 0)
                lse[(size_t)bh * T + q] = valid ? m[i][r] * scale + logf(lr) : 0.0f;
        }
}

/* dK and dV; with DS also dS^T, unscaled, rounded to bf16 as the dK product's operand, stored
 * at dsT ((B NH, TP, TP): [bh][key][query], TP = T rounded up to TC_BC) for tc_dq_ds_kernel.
 * Every query column of a walked tile is written (padding queries' are 0, below), rows of
 * padding keys too (never read: the dQ kernel stages rows >= L as zeros). */
template <int HSP, bool DS, bool WG = false>
static __global__ void __launch_bounds__(TC_WARPS * 32)
    tc_dkdv_kernel(__nv_bfloat16 *dqkv16, float *part, const __nv_bfloat16 *dout,
                   const __nv_bfloat16 *qkv, const float *lse2, const float *Dr, const int *len,
                   int T, int NH, int hs, float scale, __nv_bfloat16 *dsT, int TP, int rows16)
{
    static_assert(!WG || HSP == 64, "the wgmma backward: head size 64");
    typedef tc_dims<HSP> D;
    extern __shared__ float tc_smem[];
    char *sm = (char *)tc_smem;
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)sm, *Vs = (__nv_bfloat16 *)(sm + D::H);
    /* the walked tiles of buffer c: Q, dO at QOs + 2c, 2c + 1 tiles; lse, D at LDs + 2c TC_BC */
    __nv_bfloat16 *QOs = (__nv_bfloat16 *)(sm + 2 * D::H);
    float *LDs = (float *)(sm + 6 * D::H);

    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.x * TC_BR, L = len[b];
    const bool live = k0 < L; /* block-uniform; a block of padding keys writes zero gradients */
    const size_t ld = 3 * (size_t)C;
    const __nv_bfloat16 *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const __nv_bfloat16 *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    const float sl2 = scale * TC_LOG2E;

    float dk[HSP / 8][4], dv[HSP / 8][4];
    const __nv_bfloat16 *Kw = Ks + warp * 16 * D::LDH, *Vw = Vs + warp * 16 * D::LDH;
    uint32_t ka[D::NA][4], va[D::NA][4]; /* D::HOIST: the warp's keys' k, v as A operands */
    tc_zero<HSP / 8>(dk);
    tc_zero<HSP / 8>(dv);
    auto stage = [&](int i0, int c) { /* the query tile at i0 into buffer c */
        if constexpr (WG) { /* in wgmma's core matrices */
            tc_stage_blk<HSP>(QOs + 2 * c * D::TE, base, ld, i0, L, hs);
            tc_stage_blk<HSP>(QOs + (2 * c + 1) * D::TE, dbase, C, i0, L, hs);
        } else {
            tc_stage2<HSP>(QOs + 2 * c * D::TE, base, ld, QOs + (2 * c + 1) * D::TE, dbase, C,
                           i0, L, hs);
        }
        /* head size 128: the loop below (the cp.async form took the kernel's 255 registers to
         * spills there) */
        if (HSP <= 64 && rows16) { /* lse2, D by cp.async too, 4 rows a chunk, in the group */
            if (threadIdx.x < 2 * TC_BC / 4) {
                const int k = threadIdx.x % (TC_BC / 4), which = threadIdx.x / (TC_BC / 4);
                const int r = i0 + 4 * k; /* rows L..T-1 hold zeros; a chunk at T or past: 0 */
                const float *row = (which ? Dr : lse2) + (size_t)bh * T;
                tc_cp_async16(LDs + (2 * c + which) * TC_BC + 4 * k, row + (r < T ? r : 0),
                              r < T);
            }
        } else {
            for (int r = threadIdx.x; r < TC_BC; r += blockDim.x) {
                LDs[2 * c * TC_BC + r] = i0 + r < L ? lse2[(size_t)bh * T + i0 + r] : 0.0f;
                LDs[(2 * c + 1) * TC_BC + r] = i0 + r < L ? Dr[(size_t)bh * T + i0 + r] : 0.0f;
            }
        }
    };
    if (live) {
        if constexpr (WG) { /* in core matrices, for the tensor cores */
            tc_stage_blk<HSP>(Ks, base + C, ld, k0, L, hs);
            tc_stage_blk<HSP>(Vs, base + 2 * C, ld, k0, L, hs);
        } else {
            tc_stage2<HSP>(Ks, base + C, ld, Vs, base + 2 * C, ld, k0, L, hs);
        }
        stage(0, 0);
        tc_cp_commit();
    }
    for (int i0 = 0, c = 0; live && i0 < L; i0 += TC_BC, c ^= 1) {
        tc_tile_begin<WG>(i0 + TC_BC < L, [&] { stage(i0 + TC_BC, c ^ 1); });
        if (!WG && i0 == 0)
            tc_hoist<HSP, D::HOIST && !WG>(ka, Kw, va, Vw);
        const __nv_bfloat16 *Qs = QOs + 2 * c * D::TE, *dOs = Qs + D::TE;
        const float *lse_s = LDs + 2 * c * TC_BC, *D_s = lse_s + TC_BC;
        /* S^T (the warp's 16 keys x TC_BC queries) = scale K_w Q^T, P^T = exp(S^T - lse) (lse_s
         * holds lse log2(e)). Padding queries need no mask: their q and dO rows are staged as
         * zeros and their lse, D as 0, so P^T = 1 there and both dV += P^T dO and dS^T =
         * P^T (dP^T - D) = 0 get nothing from them. */
        float p[TC_NB][4], dp[TC_NB][4];
        if constexpr (WG) { /* S^T = K_w Q^T and dP^T = V_w dO^T in one batch */
            tc_wg_ss2_by_tile_t<HSP>(p, Ks, Qs, dp, Vs, dOs);
        } else {
            tc_zero<TC_NB>(p);
            tc_zero<TC_NB>(dp);
            if constexpr (D::HOIST)
                tc_frags_by_tile_t<HSP, TC_NB, D::LDH>(p, ka, Qs);
            else
                tc_rows_by_tile_t<HSP, TC_NB, D::LDH>(p, Kw, Qs);
        }
#pragma unroll
        for (int n = 0; n < TC_NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                p[n][e] = tc_exp2(fmaf(p[n][e], sl2, -lse_s[n * 8 + 2 * t + (e & 1)]));
        if constexpr (!WG) { /* dV += P^T dO; dP^T = V_w dO^T (WG: dV below, dP^T above) */
            tc_acc_by_tile<HSP, D::LDH>(dv, p, dOs);
            if constexpr (D::HOIST)
                tc_frags_by_tile_t<HSP, TC_NB, D::LDH>(dp, va, dOs);
            else
                tc_rows_by_tile_t<HSP, TC_NB, D::LDH>(dp, Vw, dOs);
        }
#pragma unroll
        for (int n = 0; n < TC_NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) /* dS^T; padding queries: P^T = 0 */
                dp[n][e] = p[n][e] * (dp[n][e] - D_s[n * 8 + 2 * t + (e & 1)]);
        if constexpr (DS) { /* dK += dS^T Q, and the operand stored as it is packed */
            __nv_bfloat16 *row =
                dsT + ((size_t)bh * TP + k0 + warp * 16 + g) * TP + i0 + 2 * t;
            auto store = [&](int kc, const uint32_t *a) {
                __nv_bfloat16 *x = row + 16 * kc; /* a: rows g, g + 8; columns 2t, 2t + 8 */
                tc_store32(x, a[0]);
                tc_store32(x + 8 * (size_t)TP, a[1]);
                tc_store32(x + 8, a[2]);
                tc_store32(x + 8 * (size_t)TP + 8, a[3]);
            };
            if constexpr (WG) /* dV += P^T dO and dK += dS^T Q in one batch */
                tc_wg_acc2_by_tile<HSP>(dv, p, dOs, dk, dp, Qs, store);
            else
                tc_acc_by_tile<HSP, D::LDH>(dk, dp, Qs, store);
        } else if constexpr (WG) {
            tc_wg_acc2_by_tile<HSP>(dv, p, dOs, dk, dp, Qs);
        } else {
            tc_acc_by_tile<HSP, D::LDH>(dk, dp, Qs); /* dK += dS^T Q (times scale below) */
        }
    }
    const bool valid[2] = {k0 + warp * 16 + g < L, k0 + warp * 16 + g + 8 < L};
    __nv_bfloat16 *dst = dqkv16 + ((size_t)b * T + k0) * ld + (size_t)h * hs;
    float *pp = part ? part + ((size_t)b * gridDim.x + blockIdx.x) * ld + (size_t)h * hs : NULL;
    tc_store_grad<HSP>(dst + C, ld, T - k0, dk, valid, scale, hs, pp ? pp + C : NULL,
                       (float *)sm);
    tc_store_grad<HSP>(dst + 2 * C, ld, T - k0, dv, valid, 1.0f, hs, pp ? pp + 2 * C : NULL,
                       (float *)sm);
}

template <int HSP, bool WG = false>
static __global__ void __launch_bounds__(TC_WARPS * 32)
    tc_dq_kernel(__nv_bfloat16 *dqkv16, float *part, const __nv_bfloat16 *dout,
                 const __nv_bfloat16 *qkv,
                 const float *lse, const float *Dr, const int *len, int T, int NH, int hs,
                 float scale)
{
    static_assert(!WG || HSP == 64, "the wgmma backward: head size 64");
    typedef tc_dims<HSP> D;
    extern __shared__ float tc_smem[];
    char *sm = (char *)tc_smem;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm, *dOs = (__nv_bfloat16 *)(sm + D::H);
    __nv_bfloat16 *KVs = (__nv_bfloat16 *)(sm + 2 * D::H); /* K, V of buffer c at 2c, 2c + 1 */

    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int q0 = blockIdx.x * TC_BR, L = len[b];
    const bool live = q0 < L; /* block-uniform; a block of padding queries writes zeros */
    const size_t ld = 3 * (size_t)C;
    const __nv_bfloat16 *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
    const __nv_bfloat16 *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    const float sl2 = scale * TC_LOG2E;
    float lse_r[2], D_r[2]; /* rows g, g + 8; lse times log2(e) */
    bool valid[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = q0 + warp * 16 + g + 8 * r;
        valid[r] = i < L;
        lse_r[r] = valid[r] ? lse[(size_t)bh * T + i] * TC_LOG2E : 0.0f;
        D_r[r] = valid[r] ? Dr[(size_t)bh * T + i] : 0.0f;
    }

    float dq[HSP / 8][4];
    const __nv_bfloat16 *Qw = Qs + warp * 16 * D::LDH, *dOw = dOs + warp * 16 * D::LDH;
    uint32_t qa[D::NA][4], oa[D::NA][4]; /* D::HOIST: the warp's queries' q, dO as A operands */
    tc_zero<HSP / 8>(dq);
    auto stage_kv = [&](int cb, int j0) { tc_stage_kv<HSP, WG>(KVs, cb, base, C, ld, j0, L, hs); };
    if (live) {
        if constexpr (WG) { /* in core matrices, for the tensor cores */
            tc_stage_blk<HSP>(Qs, base, ld, q0, L, hs);
            tc_stage_blk<HSP>(dOs, dbase, C, q0, L, hs);
        } else {
            tc_stage2<HSP>(Qs, base, ld, dOs, dbase, C, q0, L, hs);
        }
        stage_kv(0, 0);
        tc_cp_commit();
    }
    for (int j0 = 0, c = 0; live && j0 < L; j0 += TC_BC, c ^= 1) {
        tc_tile_begin<WG>(j0 + TC_BC < L, [&] { stage_kv(c ^ 1, j0 + TC_BC); });
        if (!WG && j0 == 0)
            tc_hoist<HSP, D::HOIST && !WG>(qa, Qw, oa, dOw);
        const __nv_bfloat16 *Ks = KVs + 2 * c * D::TE, *Vs = Ks + D::TE;
        float p[TC_NB][4], dp[TC_NB][4];
        if constexpr (WG) { /* S = scale Q_w K^T, dP = dO_w V^T, one batch */
            tc_wg_ss2_by_tile_t<HSP>(p, Qs, Ks, dp, dOs, Vs);
        } else if constexpr (D::HOIST) {
            tc_zero<TC_NB>(p);
            tc_zero<TC_NB>(dp);
            tc_frags_by_tile_t<HSP, TC_NB, D::LDH>(p, qa, Ks);
            tc_frags_by_tile_t<HSP, TC_NB, D::LDH>(dp, oa, Vs);
        } else {
            tc_zero<TC_NB>(p);
            tc_zero<TC_NB>(dp);
            tc_rows_by_tile_t<HSP, TC_NB, D::LDH>(p, Qw, Ks);
            tc_rows_by_tile_t<HSP, TC_NB, D::LDH>(dp, dOw, Vs);
        }
        if (j0 + TC_BC > L) /* the last tile: keys of padding get S = -inf, P = 0 (their k and
                               * v rows are zeros, but exp(0 - lse) overflows to inf when a row's
                               * scores are all far below 0, and inf * 0 is NaN) */
            tc_mask_cols(p, j0, L);
#pragma unroll
        for (int n = 0; n < TC_NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) { /* P, then dS; a padding row's are never stored */
                const float pe = tc_exp2(fmaf(p[n][e], sl2, -lse_r[e >> 1]));
                dp[n][e] = pe * (dp[n][e] - D_r[e >> 1]);
            }
        if constexpr (WG) /* dQ += dS K (times scale below) */
            tc_wg_acc_by_tile<HSP>(dq, dp, Ks);
        else
            tc_acc_by_tile<HSP, D::LDH>(dq, dp, Ks);
    }
    const size_t at = ((size_t)b * gridDim.x + blockIdx.x) * ld + (size_t)h * hs;
    tc_store_grad<HSP>(dqkv16 + ((size_t)b * T + q0) * ld + (size_t)h * hs, ld, T - q0, dq, valid,
                       scale, hs, part ? part + at : NULL, (float *)sm);
}

/* Shared memory of tc_dq_ds_kernel: two buffers of a dS^T tile (TC_BC keys x TC_BR queries) and
 * a K tile (TC_BC x HSP) */
#define TC_LDS (TC_BR + 8)
template <int HSP> static constexpr size_t tc_dq_ds_smem()
{
    return 2 * ((size_t)TC_BC * TC_LDS * 2 + tc_dims<HSP>::H);
}

/* dQ from the dS^T that tc_dkdv_kernel<HSP, true> stored: one product per tile (dQ += dS K)
 * instead of tc_dq_kernel's three (S = Q K^T and dP = dO V^T again, then dS K) and its
 * exponentials. A block takes TC_BR queries (16 a warp) and walks the key tiles, double-buffered
 * like the others: the dS^T tile (rows: keys, so dS is read with ldmatrix .trans) and the K
 * tile. Rows of keys >= L are staged as zeros (dS^T holds anything there, K zeros), padding
 * queries' rows are stored as zeros, and the bias partial is tc_dq_kernel's: the same outputs,
 * summed in a fixed order. */
template <int HSP, bool WG = false>
static __global__ void __launch_bounds__(TC_WARPS * 32)
    tc_dq_ds_kernel(__nv_bfloat16 *dqkv16, float *part, const __nv_bfloat16 *dsT, int TP,
                    const __nv_bfloat16 *qkv, const int *len, int T, int NH, int hs, float scale)
{
    static_assert(!WG || HSP == 64, "the wgmma backward: head size 64");
    typedef tc_dims<HSP> D;
    constexpr size_t SE = (size_t)TC_BC * TC_LDS; /* elements of a dS^T tile */
    extern __shared__ float tc_smem[];
    __nv_bfloat16 *buf = (__nv_bfloat16 *)tc_smem; /* buffer c: dS^T at c (SE + TE), K after */

    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * hs;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int q0 = blockIdx.x * TC_BR, L = len[b];
    const bool live = q0 < L; /* block-uniform; a block of padding queries writes zeros */
    const size_t ld = 3 * (size_t)C;
    const __nv_bfloat16 *kbase = qkv + (size_t)b * T * ld + (size_t)h * hs + C;
    const __nv_bfloat16 *sbase = dsT + (size_t)bh * TP * TP + q0;
    const bool valid[2] = {q0 + warp * 16 + g < L, q0 + warp * 16 + g + 8 < L};
    auto stage = [&](int j0, int c) { /* the key tile at j0 into buffer c */
        __nv_bfloat16 *St = buf + c * (SE + D::TE);
        if constexpr (WG) { /* both in core matrices (key groups along K), for the tensor cores */
            tc_stage_blk<TC_BR>(St, sbase, (size_t)TP, j0, L, TC_BR);
            tc_stage_blk<HSP>(St + SE, kbase, ld, j0, L, hs);
        } else {
            tc_stage<TC_BR>(St, sbase, (size_t)TP, j0, L, TC_BR);
            tc_stage<HSP>(St + SE, kbase, ld, j0, L, hs);
        }
    };

    float dq[HSP / 8][4];
    tc_zero<HSP / 8>(dq);
    if (live) {
        stage(0, 0);
        tc_cp_commit();
    }
    for (int j0 = 0, c = 0; live && j0 < L; j0 += TC_BC, c ^= 1) {
        tc_tile_begin<WG>(j0 + TC_BC < L, [&] { stage(j0 + TC_BC, c ^ 1); });
        const __nv_bfloat16 *St = buf + c * (SE + D::TE), *Ks = St + SE;
        if constexpr (WG) { /* dQ += dS K, dS^T and K both MN-major: lbo 1024, sbo 128 */
            tc_wg_pin<HSP / 8>(dq);
            tc_wg_fence();
            const uint64_t ad = tc_wg_desc(St, TC_BR * 16, 128);
            const uint64_t bd = tc_wg_desc(Ks, HSP * 16, 128);
#pragma unroll
            for (int kc = 0; kc < TC_BC / 16; kc++) /* a k-step: 2 key groups on */
                tc_wgmma_n64_ss<true, true>(&dq[0][0], tc_wg_desc_add(ad, kc * 32 * TC_BR),
                                            tc_wg_desc_add(bd, kc * 32 * HSP), true);
            tc_wg_commit();
            tc_wg_wait<0>();
            tc_wg_pin<HSP / 8>(dq);
        } else {
#pragma unroll
            for (int kc = 0; kc < TC_BC / 16; kc++) {
                uint32_t fa[4];
                tc_load_a_km<TC_LDS>(fa, St, warp * 16, kc * 16);
#pragma unroll
                for (int n = 0; n < HSP / 8; n += 2) {
                    uint32_t fb[4];
                    tc_load_b_kn<D::LDH>(fb, Ks, kc * 16, n * 8);
                    tc_mma(dq[n], fa, fb);
                    tc_mma(dq[n + 1], fa, fb + 2);
                }
            }
        }
    }
    const size_t at = ((size_t)b * gridDim.x + blockIdx.x) * ld + (size_t)h * hs;
    tc_store_grad<HSP>(dqkv16 + ((size_t)b * T + q0) * ld + (size_t)h * hs, ld, T - q0, dq, valid,
                       scale, hs, part ? part + at : NULL, (float *)tc_smem);
}

/* Raises kernel's dynamic shared memory limit past the default 48 KB to smem, once. */
template <typename K> static void tc_allow_smem(K *kernel, size_t smem, int *raised)
{
    if (!*raised) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        *raised = 1;
    }
}

template <int HSP, bool QH, bool WG = false>
static void tc_forward(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int *len,
                       int B, int T, int NH, int hs, cudaStream_t stream)
{
    static int raised;
    const size_t smem = tc_dims<HSP>::fwd;
    dim3 grid((unsigned)CEIL_DIV(T, tc_dims<HSP>::FBR), (unsigned)(B * NH));
    tc_allow_smem(tc_forward_kernel<HSP, QH, WG>, smem, &raised);
    tc_forward_kernel<HSP, QH, WG><<<grid, TC_WARPS * 32, smem, stream>>>(
        out, lse, qkv, len, T, NH, hs, 1.0f / sqrtf((float)hs));
    GPU_LAUNCH_CHECK();
}

/* 1 where this build's device code for the current GPU has wgmma (sm_90a code on an H100/H200;
 * the emulator), else 0: what attention_forward_fused_bf16_wgmma asks before using it. */
static __global__ void tc_wg_probe_kernel(int *has)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
    *has = 1;
#else
    *has = 0;
#endif
}

extern "C" int attention_fused_wgmma_available(void)
{
    static int known = -1; /* per process: one GPU model a process */
    if (known < 0) {
        int *d = NULL, h = 0;
        CUDA_CHECK(cudaMalloc((void **)&d, sizeof(int)));
        CUDA_CHECK(cudaMemset(d, 0, sizeof(int)));
        tc_wg_probe_kernel<<<1, 1>>>(d);
        GPU_LAUNCH_CHECK();
        CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d));
        known = h;
    }
    return known;
}

/* dsT: NULL, dQ by tc_dq_kernel; else (B NH, TP, TP) bf16 of scratch for dS^T, dQ by
 * tc_dq_ds_kernel */
template <int HSP, bool WG = false>
static void tc_backward(__nv_bfloat16 *dqkv16, float *part, const __nv_bfloat16 *dout,
                        const __nv_bfloat16 *qkv, const float *lse, const float *Dr,
                        const float *lse2, const int *len, int B, int T, int NH, int hs,
                        __nv_bfloat16 *dsT, int TP, cudaStream_t stream)
{
    static int raised_kv, raised_kvs, raised_q, raised_qs;
    const float scale = 1.0f / sqrtf((float)hs);
    const dim3 grid((unsigned)CEIL_DIV(T, TC_BR), (unsigned)(B * NH));
    const size_t skv = tc_dims<HSP>::dkdv, sq = tc_dims<HSP>::dq, sqs = tc_dq_ds_smem<HSP>();
    /* a head's rows of lse2 and D start 16-byte aligned (the caller's rows4 keeps lse2 so): the
     * dK/dV kernel stages them by cp.async */
    const int rows16 = T % 4 == 0 && (uintptr_t)lse2 % 16 == 0 && (uintptr_t)Dr % 16 == 0;
    if (dsT) {
        tc_allow_smem(tc_dkdv_kernel<HSP, true, WG>, skv, &raised_kvs);
        tc_dkdv_kernel<HSP, true, WG><<<grid, TC_WARPS * 32, skv, stream>>>(
            dqkv16, part, dout, qkv, lse2, Dr, len, T, NH, hs, scale, dsT, TP, rows16);
        GPU_LAUNCH_CHECK();
        tc_allow_smem(tc_dq_ds_kernel<HSP, WG>, sqs, &raised_qs);
        tc_dq_ds_kernel<HSP, WG><<<grid, TC_WARPS * 32, sqs, stream>>>(dqkv16, part, dsT, TP,
                                                                       qkv, len, T, NH, hs, scale);
        GPU_LAUNCH_CHECK();
        return;
    }
    tc_allow_smem(tc_dkdv_kernel<HSP, false, WG>, skv, &raised_kv);
    tc_dkdv_kernel<HSP, false, WG><<<grid, TC_WARPS * 32, skv, stream>>>(
        dqkv16, part, dout, qkv, lse2, Dr, len, T, NH, hs, scale, NULL, 0, rows16);
    GPU_LAUNCH_CHECK();
    tc_allow_smem(tc_dq_kernel<HSP, WG>, sq, &raised_q);
    tc_dq_kernel<HSP, WG><<<grid, TC_WARPS * 32, sq, stream>>>(dqkv16, part, dout, qkv, lse, Dr,
                                                               len, T, NH, hs, scale);
    GPU_LAUNCH_CHECK();
}

template <bool QH, bool WG = false>
static void forward_fused_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int *len,
                               int B, int T, int C, int NH, cudaStream_t stream)
{
    if ((size_t)B * T * C == 0)
        return;
    int hsp = fa_padded_head(C, NH, "attention_forward_fused_bf16"), hs = C / NH;
    __nv_bfloat16 *o = (__nv_bfloat16 *)out;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)qkv;
    if (WG && hsp == 64 && attention_fused_wgmma_available())
        tc_forward<64, false, true>(o, lse, q, len, B, T, NH, hs, stream);
    else if (hsp == 32)
        tc_forward<32, QH>(o, lse, q, len, B, T, NH, hs, stream);
    else if (hsp == 64)
        tc_forward<64, QH>(o, lse, q, len, B, T, NH, hs, stream);
    else
        tc_forward<128, QH>(o, lse, q, len, B, T, NH, hs, stream);
}

extern "C" void attention_forward_fused_bf16(uint16_t *out, float *lse, const uint16_t *qkv,
                                             const int *len, int B, int T, int C, int NH,
                                             struct CUstream_st *stream)
{
    forward_fused_bf16<false>(out, lse, qkv, len, B, T, C, NH, stream);
}

extern "C" void attention_forward_fused_bf16_qhoist(uint16_t *out, float *lse,
                                                    const uint16_t *qkv, const int *len, int B,
                                                    int T, int C, int NH,
                                                    struct CUstream_st *stream)
{
    forward_fused_bf16<true>(out, lse, qkv, len, B, T, C, NH, stream);
}

extern "C" void attention_forward_fused_bf16_wgmma(uint16_t *out, float *lse,
                                                   const uint16_t *qkv, const int *len, int B,
                                                   int T, int C, int NH,
                                                   struct CUstream_st *stream)
{
    forward_fused_bf16<true, true>(out, lse, qkv, len, B, T, C, NH, stream);
}

extern "C" size_t attention_backward_ds_bytes(int B, int T, int NH)
{
    const size_t TP = (size_t)CEIL_DIV(T, TC_BC) * TC_BC;
    return (size_t)B * NH * TP * TP * 2;
}

static void backward_fused_bf16(uint16_t *dqkv16, float *dbias, const uint16_t *dout,
                                const uint16_t *qkv, const uint16_t *out, const float *lse,
                                const int *len, int B, int T, int C, int NH, bool stored_ds,
                                bool wg, cudaStream_t stream)
{
    size_t rows = (size_t)B * NH * T;
    if ((size_t)B * T * C == 0)
        return;
    int hsp = fa_padded_head(C, NH, "attention_backward_fused_bf16"), hs = C / NH;
    int nparts = B * CEIL_DIV(T, TC_BR); /* a partial column sum per block of rows */
    __nv_bfloat16 *d16 = (__nv_bfloat16 *)dqkv16;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)qkv;
    /* D, then lse log2(e) 16-byte aligned after it (tc_dkdv_kernel stages both by cp.async) */
    const size_t rows4 = (rows + 3) / 4 * 4;
    float *Dr = (float *)gpu_scratch(2 * rows4 * sizeof(float), stream), *lse2 = Dr + rows4;
    float *part = dbias ? (float *)gpu_scratch((size_t)nparts * 3 * C * sizeof(float), stream)
                        : NULL;
    const __nv_bfloat16 *dO = (const __nv_bfloat16 *)dout;
    fa_rowdot_kernel<__nv_bfloat16><<<(unsigned)CEIL_DIV(rows, 8), 256, 0, stream>>>(
        Dr, dO, (const __nv_bfloat16 *)out, len, B, T, NH, hs, lse2, lse);
    GPU_LAUNCH_CHECK();
    const int TP = CEIL_DIV(T, TC_BC) * TC_BC;
    __nv_bfloat16 *dsT =
        stored_ds ? (__nv_bfloat16 *)gpu_scratch(attention_backward_ds_bytes(B, T, NH), stream)
                  : NULL;
    if (wg && hsp == 64 && attention_fused_wgmma_available())
        tc_backward<64, true>(d16, part, dO, q, lse, Dr, lse2, len, B, T, NH, hs, dsT, TP,
                              stream);
    else if (hsp == 32)
        tc_backward<32>(d16, part, dO, q, lse, Dr, lse2, len, B, T, NH, hs, dsT, TP, stream);
    else if (hsp == 64)
        tc_backward<64>(d16, part, dO, q, lse, Dr, lse2, len, B, T, NH, hs, dsT, TP, stream);
    else
        tc_backward<128>(d16, part, dO, q, lse, Dr, lse2, len, B, T, NH, hs, dsT, TP, stream);
    if (dsT)
        gpu_scratch_free(dsT, stream);
    if (dbias) {
        colsum_finish_kernel<<<CEIL_DIV(3 * C, 256), 256, 0, stream>>>(dbias, part, nparts, 3 * C);
        GPU_LAUNCH_CHECK();
        gpu_scratch_free(part, stream);
    }
    gpu_scratch_free(Dr, stream);
}

extern "C" void attention_backward_fused_bf16(uint16_t *dqkv16, float *dbias,
                                              const uint16_t *dout, const uint16_t *qkv,
                                              const uint16_t *out, const float *lse,
                                              const int *len, int B, int T, int C, int NH,
                                              struct CUstream_st *stream)
{
    backward_fused_bf16(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH, false, false,
                        stream);
}

extern "C" void attention_backward_fused_bf16_ds(uint16_t *dqkv16, float *dbias,
                                                 const uint16_t *dout, const uint16_t *qkv,
                                                 const uint16_t *out, const float *lse,
                                                 const int *len, int B, int T, int C, int NH,
                                                 struct CUstream_st *stream)
{
    backward_fused_bf16(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH, true, false,
                        stream);
}

extern "C" void attention_backward_fused_bf16_wgmma(uint16_t *dqkv16, float *dbias,
                                                    const uint16_t *dout, const uint16_t *qkv,
                                                    const uint16_t *out, const float *lse,
                                                    const int *len, int B, int T, int C, int NH,
                                                    int stored_ds, struct CUstream_st *stream)
{
    backward_fused_bf16(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH, stored_ds != 0,
                        true, stream);
}

/* ---- cuDNN's attention (attention_cudnn.cpp): what ours writes in padding rows ---- */

/* Row r = b T + t of out (C wide) and lse[b, h, t] for every head: zeros where t >= len[b] */
static __global__ void cudnn_fixup_fwd_kernel(uint16_t *out, float *lse, const int *len, int T,
                                              int C, int NH)
{
    const int r = blockIdx.x, b = r / T, t = r % T;
    if (t < len[b])
        return;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[(size_t)r * C + c] = 0;
    for (int h = threadIdx.x; h < NH; h += blockDim.x)
        lse[((size_t)b * NH + h) * T + t] = 0.0f;
}

static __global__ void cudnn_zero_rows_kernel(uint16_t *p, const int *len, int T, int width)
{
    const int r = blockIdx.x;
    if (r % T < len[r / T])
        return;
    for (int c = threadIdx.x; c < width; c += blockDim.x)
        p[(size_t)r * width + c] = 0;
}

/* colsum.cuh's source over dqkv16 (B T rows, OC = 3C wide): each element as is, except in padding
 * rows (t >= len[b]), which are stored as zeros and summed as zeros */
struct cudnn_dqkv_src {
    static constexpr int NRAW = 1;
    uint16_t *dqkv16;
    const int *len;
    int T, OC;
    __device__ bool pad(size_t i) const
    {
        const size_t row = i / (size_t)OC;
        return (int)(row % (size_t)T) >= len[row / (size_t)T];
    }
    template <int V> __device__ void fetch(size_t i, float *raw) const
    {
        if (pad(i)) {
#pragma unroll
            for (int k = 0; k < V; k++)
                raw[k] = 0.0f;
        } else {
            ld_vec<V>(raw, dqkv16 + i);
        }
    }
    template <int V> __device__ void finish(size_t i, const float *raw, float *v) const
    {
#pragma unroll
        for (int k = 0; k < V; k++)
            v[k] = raw[k];
        if (pad(i))
            st_vec<V>(dqkv16 + i, v);
    }
};

extern "C" void attention_cudnn_fixup_fwd(uint16_t *out, float *lse, const int *len, int B, int T,
                                          int C, int NH, struct CUstream_st *stream)
{
    if (B <= 0 || T <= 0)
        return;
    cudnn_fixup_fwd_kernel<<<(unsigned)(B * T), 128, 0, stream>>>(out, lse, len, T, C, NH);
    GPU_LAUNCH_CHECK();
}

extern "C" void attention_cudnn_fixup_bwd(uint16_t *dqkv16, float *dbias, const int *len, int B,
                                          int T, int C, struct CUstream_st *stream)
{
    const int N = B * T, OC = 3 * C;
    if (N <= 0)
        return;
    if (!dbias) {
        cudnn_zero_rows_kernel<<<(unsigned)N, 128, 0, stream>>>(dqkv16, len, T, OC);
        GPU_LAUNCH_CHECK();
        return;
    }
    const int nparts = CEIL_DIV(N, CS_ROWS);
    float *part = (float *)gpu_scratch((size_t)nparts * OC * sizeof(float), stream);
    const int V = OC % 4 == 0 && vec4_ok(dqkv16) ? 4 : 1;
    typedef void kernel_t(float *, cudnn_dqkv_src, int, int);
    kernel_t *k =
        V == 4 ? colsum_part_kernel<cudnn_dqkv_src, 4> : colsum_part_kernel<cudnn_dqkv_src, 1>;
    k<<<dim3(CEIL_DIV(OC, 32 * V), nparts), dim3(32, 8), 0, stream>>>(
        part, cudnn_dqkv_src{dqkv16, len, T, OC}, N, OC);
    GPU_LAUNCH_CHECK();
    colsum_finish_kernel<<<CEIL_DIV(OC, 256), 256, 0, stream>>>(dbias, part, nparts, OC);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part, stream);
}
