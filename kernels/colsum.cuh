/*
 * colsum.cuh - deterministic column sums, the bias gradients of the GEMMs (kernels/matmul.cu)
 * and of the GELU backward that gives one (kernels/gelu.cu): dbias (OC) += the sum over N rows
 * of a (N, OC) row-major matrix. Kernels only (CUDA C++, kernels/ internal): each .cu file
 * launches them itself (the emulator rewrites launches in .cu files only).
 *
 * The matrix comes through a functor in two steps: src.fetch<V>(i, raw) loads what elements
 * i .. i + V - 1 (i = row * OC + col) are computed from into raw (Src::NRAW * V floats), and
 * src.finish<V>(i, raw, v) puts those elements in v as fp32, so an element-wise kernel can compute
 * its output and sum it in the same pass. The kernel fetches 4 rows before it finishes any: the
 * loads go out together, and none waits behind a store of finish's (which the compiler must
 * assume may alias them). Every element is visited exactly once (it may store something on the
 * side), and the
 * sums run in a fixed order: chunks of CS_ROWS rows, within a chunk the rows y, y + 8, ... by
 * thread y, then the eight threads' sums, then the chunks in order. The same inputs give the
 * same bits whatever src does.
 */
#ifndef GANTRY_COLSUM_CUH
#define GANTRY_COLSUM_CUH

#include "kernels/gpu_internal.h"

#define CS_ROWS 256 /* rows per partial */

/* grid (ceil(OC / (32 V)), ceil(N / CS_ROWS)), block (32, 8): part[y, col] = the sum of the
 * chunk's rows. Thread x takes V adjacent columns (32 V * blockIdx.x + V x ...), loaded as one
 * vector (src.fetch<V>); each column is summed in the same order whatever V is, so V = 4 (OC % 4
 * == 0 and the rows vec4_ok: the launcher decides) gives the bits V = 1 gives, with a quarter of the
 * loads. */
template <typename Src, int V>
static __global__ void colsum_part_kernel(float *part, Src src, int N, int OC)
{
    __shared__ float sh[8][32 * V + 1];
    int col = (blockIdx.x * 32 + threadIdx.x) * V, r0 = blockIdx.y * CS_ROWS;
    float s[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        s[k] = 0.0f;
    /* 4 rows of this thread (r, r + 8, r + 16, r + 24) fetched, then finished and added in row
     * order: the order of one row at a time, so the same bits. One row at a time, each row's
     * loads waited behind the previous row's store (gelu_backward_bf16 ran at 58 % of copy
     * bandwidth on the H200; this is unmeasured). */
    constexpr int U = 4, R = Src::NRAW;
    const int end = N < r0 + CS_ROWS ? N : r0 + CS_ROWS;
    if (col < OC)
        for (int r = r0 + threadIdx.y; r < end; r += 8 * U) {
            float raw[U][R * V];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (r + 8 * u < end)
                    src.template fetch<V>((size_t)(r + 8 * u) * OC + col, raw[u]);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (r + 8 * u < end) {
                    float v[V];
                    src.template finish<V>((size_t)(r + 8 * u) * OC + col, raw[u], v);
#pragma unroll
                    for (int k = 0; k < V; k++)
                        s[k] += v[k];
                }
        }
#pragma unroll
    for (int k = 0; k < V; k++)
        sh[threadIdx.y][threadIdx.x * V + k] = s[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < OC)
#pragma unroll
        for (int k = 0; k < V; k++) {
            for (int y = 1; y < 8; y++)
                s[k] += sh[y][threadIdx.x * V + k];
            part[(size_t)blockIdx.y * OC + col + k] = s[k];
        }
}

/* dbias[col] += the nparts partial sums of column col, in order */
static __global__ void colsum_finish_kernel(float *dbias, const float *part, int nparts, int OC)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC)
        return;
    float s = 0.0f;
    for (int p = 0; p < nparts; p++)
        s += part[(size_t)p * OC + col];
    dbias[col] += s;
}

/* src for a plain matrix of fp32 or bf16 (uint16_t bits) */
template <typename T> struct colsum_load {
    static constexpr int NRAW = 1;
    const T *p;
    template <int V> __device__ void fetch(size_t i, float *raw) const { ld_vec<V>(raw, p + i); }
    template <int V> __device__ void finish(size_t, const float *raw, float *v) const
    {
#pragma unroll
        for (int k = 0; k < V; k++)
            v[k] = raw[k];
    }
};

#endif /* GANTRY_COLSUM_CUH */
