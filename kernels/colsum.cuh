/*
 * colsum.cuh - deterministic column sums, the bias gradients of the GEMMs (kernels/matmul.cu)
 * and of the GELU backward that gives one (kernels/gelu.cu): dbias (OC) += the sum over N rows
 * of a (N, OC) row-major matrix. Kernels only (CUDA C++, kernels/ internal): each .cu file
 * launches them itself (the emulator rewrites launches in .cu files only).
 *
 * The matrix comes through a functor src(i) returning element i = row * OC + col as fp32, so an
 * element-wise kernel can compute its output and sum it in the same pass. Every element is
 * visited exactly once (it may store something on the side), and the sums run in a fixed order:
 * chunks of CS_ROWS rows, within a chunk the rows y, y + 8, ... by thread y, then the eight
 * threads' sums, then the chunks in order. The same inputs give the same bits whatever src does.
 */
#ifndef GANTRY_COLSUM_CUH
#define GANTRY_COLSUM_CUH

#include "kernels/gpu_internal.h"

#define CS_ROWS 256 /* rows per partial */

/* grid (ceil(OC/32), ceil(N/CS_ROWS)), block (32, 8): part[y, col] = sum of the chunk's rows */
template <typename Src>
static __global__ void colsum_part_kernel(float *part, Src src, int N, int OC)
{
    __shared__ float sh[8][33];
    int col = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * CS_ROWS;
    float s = 0.0f;
    if (col < OC)
        for (int r = r0 + threadIdx.y; r < N && r < r0 + CS_ROWS; r += 8)
            s += src((size_t)r * OC + col);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
        for (int y = 1; y < 8; y++)
            s += sh[y][threadIdx.x];
        part[(size_t)blockIdx.y * OC + col] = s;
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

/* src for a plain matrix of fp32 or bf16 */
template <typename T> struct colsum_load {
    const T *p;
    __device__ float operator()(size_t i) const { return (float)p[i]; }
};

#endif /* GANTRY_COLSUM_CUH */
