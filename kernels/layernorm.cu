// LayerNorm on the GPU: one warp per row (statistics by warp shuffles, two passes over the row as
// the CPU reference does), 16-byte loads and stores where the shapes allow. The backward writes
// dinp per row and sums dweight/dbias without atomics: each warp keeps per-column partials in
// shared memory, each block writes its sum to scratch, and the blocks' partials are added in a
// fixed order (deterministic): colsum.cuh's column sums over chunks of CS_ROWS partials, then
// the chunks in order.
#include "kernels/bf16.h"
#include "kernels/colsum.cuh"
#include "kernels/gpu_internal.h"
#include "kernels/layernorm.h"

#define LN_WARPS 4 /* warps per block in both directions */
#define LN_BLOCKS_MAX 512

/* Each lane walks its row in chunks of V columns (lane * V + 32 * V * k): V = 4 reads and writes
 * 16 bytes at a time (C % 4 == 0 and the tensors vec4_ok: the launchers decide), V = 1 one
 * element. A lane owns the same columns in every pass and every row, so no two lanes write one
 * column's partials; with V = 4 a warp moves 512 bytes a load instead of 128, a quarter of the
 * load and store instructions for the same bytes. */

/* One warp per row; the statistics (mean, rstd) stay fp32 whatever T is, for the fp32 backward. */
template <typename T, int V>
static __global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd,
                                                const float *inp, const float *weight,
                                                const float *bias, int N, int C)
{
    int lane = threadIdx.x % 32, row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float xv[V];
        ld_vec<V>(xv, x + c);
#pragma unroll
        for (int k = 0; k < V; k++)
            s += xv[k];
    }
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float xv[V];
        ld_vec<V>(xv, x + c);
#pragma unroll
        for (int k = 0; k < V; k++)
            v += (xv[k] - m) * (xv[k] - m);
    }
    float r = rsqrtf(warp_sum(v) / (float)C + LAYERNORM_EPS);
    T *o = out + (size_t)row * C;
    for (int c = lane * V; c < C; c += 32 * V) {
        float xv[V], w[V], b[V], y[V];
        ld_vec<V>(xv, x + c);
        ld_vec<V>(w, weight + c);
        ld_vec<V>(b, bias + c);
#pragma unroll
        for (int k = 0; k < V; k++)
            y[k] = (xv[k] - m) * r * w[k] + b[k];
        st_vec<V>(o + c, y);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
static void forward(T *out, float *mean, float *rstd, const float *inp, const float *weight,
                    const float *bias, int N, int C, cudaStream_t stream)
{
    if (N == 0)
        return;
    if (C % 4 == 0 && vec4_ok(inp, weight, bias, out))
        layernorm_forward_kernel<T, 4><<<CEIL_DIV(N, LN_WARPS), 32 * LN_WARPS, 0, stream>>>(
            out, mean, rstd, inp, weight, bias, N, C);
    else
        layernorm_forward_kernel<T, 1><<<CEIL_DIV(N, LN_WARPS), 32 * LN_WARPS, 0, stream>>>(
            out, mean, rstd, inp, weight, bias, N, C);
    GPU_LAUNCH_CHECK();
}

extern "C" void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int N, int C,
                                  struct CUstream_st *stream)
{
    forward<float>(out, mean, rstd, inp, weight, bias, N, C, stream);
}

extern "C" void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int N, int C,
                                       struct CUstream_st *stream)
{
    forward<uint16_t>(out, mean, rstd, inp, weight, bias, N, C, stream);
}

/* This warp's ns partial rows in the block's shared memory sh (LN_WARPS, ns, C): dweight's, then
 * dbias's and dsum's C apart; the lane's columns zeroed. */
template <int V> static __device__ float *ln_warp_parts(float *sh, int C, int ns)
{
    float *dw = sh + (size_t)(threadIdx.x / 32) * ns * C;
    const float z[V] = {};
    for (int c = threadIdx.x % 32 * V; c < C; c += 32 * V)
        for (int k = 0; k < ns; k++)
            st_vec<V>(dw + (size_t)k * C + c, z);
    return dw;
}

/* The block's partials: the warps' (LN_WARPS, ns, C) sums in shared memory added in warp order
 * into part's row blockIdx.x (ns * C floats). */
static __device__ void ln_block_parts(float *part, const float *sh, int C, int ns)
{
    __syncthreads();
    for (int c = threadIdx.x; c < ns * C; c += blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < LN_WARPS; k++)
            sum += sh[(size_t)k * ns * C + c];
        part[(size_t)blockIdx.x * ns * C + c] = sum;
    }
}

/* part (gridDim.x, ns, C): this block's sums of dout * xhat and dout over its rows, and with
 * ns == 3 of the accumulated dinp (the bias gradient of the GEMM it is the output gradient of).
 * dinp16 (may be NULL): the accumulated dinp rounded to bf16. dout: fp32, or bf16 (TD uint16_t:
 * as the bf16 step's GEMM backward writes it; read into fp32, the rest the same). */
template <int V, typename TD>
static __global__ void layernorm_backward_kernel(float *dinp, uint16_t *dinp16, float *part,
                                                 const TD *dout,
                                                 const float *inp, const float *weight,
                                                 const float *mean, const float *rstd, int N,
                                                 int C, int ns)
{
    extern __shared__ float sh[]; /* (LN_WARPS, ns, C) */
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    float *dw = ln_warp_parts<V>(sh, C, ns), *db = dw + C, *ds = db + C; /* ds: ns == 3 */
    for (int row = blockIdx.x * LN_WARPS + w; row < N; row += gridDim.x * LN_WARPS) {
        const float *x = inp + (size_t)row * C;
        const TD *dy = dout + (size_t)row * C;
        float m = mean[row], r = rstd[row], mg = 0.0f, mgx = 0.0f;
        for (int c = lane * V; c < C; c += 32 * V) {
            float xv[V], d[V], wv[V];
            ld_vec<V>(xv, x + c);
            ld_vec<V>(d, dy + c);
            ld_vec<V>(wv, weight + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float g = d[k] * wv[k];
                mg += g;
                mgx += g * (xv[k] - m) * r;
            }
        }
        mg = warp_sum(mg) / (float)C;
        mgx = warp_sum(mgx) / (float)C;
        float *dx = dinp + (size_t)row * C;
        for (int c = lane * V; c < C; c += 32 * V) { /* lane owns these columns: no races */
            float xv[V], d[V], wv[V], dxv[V], sw[V], sb[V];
            ld_vec<V>(xv, x + c);
            ld_vec<V>(d, dy + c);
            ld_vec<V>(wv, weight + c);
            ld_vec<V>(dxv, dx + c);
            ld_vec<V>(sw, dw + c);
            ld_vec<V>(sb, db + c);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float xhat = (xv[k] - m) * r, g = d[k] * wv[k];
                sw[k] += d[k] * xhat;
                sb[k] += d[k];
                dxv[k] += r * (g - mg - xhat * mgx);
            }
            st_vec<V>(dw + c, sw);
            st_vec<V>(db + c, sb);
            st_vec<V>(dx + c, dxv);
            if (dinp16)
                st_vec<V>(dinp16 + (size_t)row * C + c, dxv);
            if (ns == 3) {
                float sd[V];
                ld_vec<V>(sd, ds + c);
#pragma unroll
                for (int k = 0; k < V; k++)
                    sd[k] += dxv[k];
                st_vec<V>(ds + c, sd);
            }
        }
    }
    ln_block_parts(part, sh, C, ns);
}

/* layernorm_backward_kernel with a lane's columns of the row in registers: IT chunks of V columns
 * (lane * V + 32 * V * i, i < IT; C <= 32 * V * IT), the same arithmetic in the same order, so the
 * same bits. Every load of a pass is issued before any of its results is used or anything is
 * stored (the loops are unrolled, and a load after a global store waits for it: the compiler must
 * assume they may alias): the first pass loads the row's x, dout and weight chunks together and
 * keeps x, dout and dout * weight for the second, which loads all of dinp's chunks, then updates
 * and stores them. At the GPT-2 width (C = 768, V = 4: IT = 6) the looping kernel above waits for
 * 6 dependent rounds of loads a pass (12 a row); this one for 2. The dweight/dbias partials stay
 * in shared memory as there (registers for them would cost a block an SM). Written after the
 * H200 run (layernorm backward at 42 % of copy bandwidth): unmeasured. */
template <int V, int IT, typename TD>
static __global__ void __launch_bounds__(32 * LN_WARPS, IT <= 6 ? 4 : 1)
    layernorm_backward_reg_kernel(float *dinp, uint16_t *dinp16, float *part,
                                                     const TD *dout, const float *inp,
                                                     const float *weight, const float *mean,
                                                     const float *rstd, int N, int C, int ns)
{
    extern __shared__ float sh[]; /* (LN_WARPS, ns, C) */
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    float *dw = ln_warp_parts<V>(sh, C, ns), *db = dw + C, *ds = db + C; /* ds: ns == 3 */
    for (int row = blockIdx.x * LN_WARPS + w; row < N; row += gridDim.x * LN_WARPS) {
        const float *x = inp + (size_t)row * C;
        const TD *dy = dout + (size_t)row * C;
        float *dx = dinp + (size_t)row * C;
        /* (zeros past C: never used) */
        float xv[IT][V] = {}, d[IT][V] = {}, g[IT][V] = {}, dxv[IT][V] = {};
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int c = (lane + 32 * i) * V;
            if (c < C) {
                ld_vec<V>(xv[i], x + c);
                ld_vec<V>(d[i], dy + c);
                ld_vec<V>(g[i], weight + c);
            }
        }
        const float m = mean[row], r = rstd[row];
        float mg = 0.0f, mgx = 0.0f;
#pragma unroll
        for (int i = 0; i < IT; i++)
            if ((lane + 32 * i) * V < C)
#pragma unroll
                for (int k = 0; k < V; k++) {
                    g[i][k] = d[i][k] * g[i][k];
                    mg += g[i][k];
                    mgx += g[i][k] * (xv[i][k] - m) * r;
                }
        mg = warp_sum(mg) / (float)C;
        mgx = warp_sum(mgx) / (float)C;
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int c = (lane + 32 * i) * V;
            if (c < C)
                ld_vec<V>(dxv[i], dx + c);
        }
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int c = (lane + 32 * i) * V;
            if (c < C) {
                float sw[V], sb[V];
                ld_vec<V>(sw, dw + c);
                ld_vec<V>(sb, db + c);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float xhat = (xv[i][k] - m) * r;
                    sw[k] += d[i][k] * xhat;
                    sb[k] += d[i][k];
                    dxv[i][k] += r * (g[i][k] - mg - xhat * mgx);
                }
                st_vec<V>(dw + c, sw);
                st_vec<V>(db + c, sb);
                st_vec<V>(dx + c, dxv[i]);
                if (dinp16)
                    st_vec<V>(dinp16 + (size_t)row * C + c, dxv[i]);
                if (ns == 3) {
                    float sd[V];
                    ld_vec<V>(sd, ds + c);
#pragma unroll
                    for (int k = 0; k < V; k++)
                        sd[k] += dxv[i][k];
                    st_vec<V>(ds + c, sd);
                }
            }
        }
    }
    ln_block_parts(part, sh, C, ns);
}

/* The backward kernel for V-wide chunks: the register-resident one when the row fits in 8
 * chunks a lane (C <= 1024 with V = 4, <= 256 with V = 1), else the looping one. */
template <typename TD>
using ln_bwd_kernel_t = void(float *, uint16_t *, float *, const TD *, const float *,
                             const float *, const float *, const float *, int, int, int);
template <int V, typename TD> static ln_bwd_kernel_t<TD> *ln_bwd_kernel(int C)
{
    switch (CEIL_DIV(C, 32 * V)) {
    case 1: return layernorm_backward_reg_kernel<V, 1, TD>;
    case 2: return layernorm_backward_reg_kernel<V, 2, TD>;
    case 3: return layernorm_backward_reg_kernel<V, 3, TD>;
    case 4: return layernorm_backward_reg_kernel<V, 4, TD>;
    case 5: return layernorm_backward_reg_kernel<V, 5, TD>;
    case 6: return layernorm_backward_reg_kernel<V, 6, TD>;
    case 7: return layernorm_backward_reg_kernel<V, 7, TD>;
    case 8: return layernorm_backward_reg_kernel<V, 8, TD>;
    default: return layernorm_backward_kernel<V, TD>;
    }
}

/* dweight, dbias (and dsum, with ns == 3) += the chunks' sums, in order */
static __global__ void layernorm_sum_parts_kernel(float *dweight, float *dbias, float *dsum,
                                                  const float *part, int nparts, int C, int ns)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float sw = 0.0f, sb = 0.0f, sd = 0.0f;
    for (int p = 0; p < nparts; p++) {
        sw += part[(size_t)p * ns * C + c];
        sb += part[(size_t)p * ns * C + C + c];
        if (ns == 3)
            sd += part[(size_t)p * ns * C + 2 * C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
    if (ns == 3)
        dsum[c] += sd;
}

template <typename TD>
static void backward(float *dinp, uint16_t *dinp16, float *dweight, float *dbias, float *dsum,
                     const TD *dout, const float *inp, const float *weight, const float *mean,
                     const float *rstd, int N, int C, cudaStream_t stream)
{
    if (N == 0)
        return;
    const int ns = dsum ? 3 : 2;
    int blocks = CEIL_DIV(N, LN_WARPS * 4); /* at least 4 rows per warp */
    blocks = blocks < LN_BLOCKS_MAX ? blocks : LN_BLOCKS_MAX;
    size_t smem = (size_t)LN_WARPS * ns * C * sizeof(float);
    const bool vec = C % 4 == 0 && vec4_ok(dinp, dout, inp, weight, dinp16);
    ln_bwd_kernel_t<TD> *k = vec ? ln_bwd_kernel<4, TD>(C) : ln_bwd_kernel<1, TD>(C);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    float *part = (float *)gpu_scratch((size_t)blocks * ns * C * sizeof(float), stream);
    k<<<blocks, 32 * LN_WARPS, smem, stream>>>(dinp, dinp16, part, dout, inp, weight, mean, rstd,
                                               N, C, ns);
    GPU_LAUNCH_CHECK();
    /* part is a (blocks, ns C) matrix whose column sums are dweight | dbias (| dsum). Summed by
     * columns alone (C threads, each walking up to 512 partials: 3 blocks on a GPU of 132 SMs)
     * those sums were estimated at 15-30 us of this op's 65 us at the GPT-2 shape on an H200
     * (128+ dependent L2 round trips); colsum_part_kernel spreads them over (ns C / 32) x
     * ceil(blocks / CS_ROWS) blocks of 256 threads, and the finish adds the <= 2 chunks. */
    typedef colsum_load<float> Src;
    void (*cs)(float *, Src, int, int) = colsum_part_kernel<Src, 1>;
    int chunks = CEIL_DIV(blocks, CS_ROWS);
    float *part2 = (float *)gpu_scratch((size_t)chunks * ns * C * sizeof(float), stream);
    cs<<<dim3(CEIL_DIV(ns * C, 32), chunks), dim3(32, 8), 0, stream>>>(part2, Src{part}, blocks,
                                                                      ns * C);
    GPU_LAUNCH_CHECK();
    layernorm_sum_parts_kernel<<<CEIL_DIV(C, 256), 256, 0, stream>>>(dweight, dbias, dsum, part2,
                                                                     chunks, C, ns);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part2, stream);
    gpu_scratch_free(part, stream);
}

extern "C" void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, const float *mean,
                                   const float *rstd, int N, int C, struct CUstream_st *stream)
{
    backward(dinp, NULL, dweight, dbias, NULL, dout, inp, weight, mean, rstd, N, C, stream);
}

extern "C" void layernorm_backward_bf16(float *dinp, uint16_t *dinp16, float *dweight,
                                        float *dbias, const float *dout, const float *inp,
                                        const float *weight, const float *mean, const float *rstd,
                                        int N, int C, struct CUstream_st *stream)
{
    backward(dinp, dinp16, dweight, dbias, NULL, dout, inp, weight, mean, rstd, N, C, stream);
}

extern "C" void layernorm_backward_bf16_sum(float *dinp, uint16_t *dinp16, float *dweight,
                                            float *dbias, float *dsum, const float *dout,
                                            const float *inp, const float *weight,
                                            const float *mean, const float *rstd, int N, int C,
                                            struct CUstream_st *stream)
{
    backward(dinp, dinp16, dweight, dbias, dsum, dout, inp, weight, mean, rstd, N, C, stream);
}

extern "C" void layernorm_backward_bf16_d16(float *dinp, uint16_t *dinp16, float *dweight,
                                            float *dbias, float *dsum, const uint16_t *dout16,
                                            const float *inp, const float *weight,
                                            const float *mean, const float *rstd, int N, int C,
                                            struct CUstream_st *stream)
{
    backward(dinp, dinp16, dweight, dbias, dsum, dout16, inp, weight, mean, rstd, N, C, stream);
}
