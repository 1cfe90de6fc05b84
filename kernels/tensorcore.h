/*
 * tensorcore.h - the warp-level tensor-core instructions of the fused bf16 attention
 * (kernels/attention.cu): mma.sync m16n8k16 (bf16 operands, fp32 accumulators) and ldmatrix
 * (8x8 tiles of 16-bit elements from shared memory into the operands' registers).
 *
 * Unlike nvcuda::wmma these have a documented register layout (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16 with floating point type" and "ldmatrix"), so a kernel can keep its scores and
 * accumulators in registers and reuse an accumulator as the next product's operand, which is
 * what FlashAttention-2 does. In a lane, g = lane / 4 and t = lane % 4; a 32-bit register of two
 * bf16 holds the lower-indexed element in its low half:
 *   A (16x16, row-major):  a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
 *                          a[2] = A[g][2t+8..2t+9]  a[3] = A[g+8][2t+8..2t+9]
 *   B (16x8):              b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
 *   C, D (16x8, fp32):     c[0], c[1] = C[g][2t], C[g][2t+1]; c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
 * So the accumulators of two adjacent 16x8 products (columns n0..n0+15) are, packed to bf16, the
 * A operand of the next product over k = n0..n0+15 (tc_pack_a).
 *
 * On a GPU (sm_80 and later) the functions are inline PTX; on the CUDA emulator
 * (kernels/emu/include/mma.h) the same instructions with the same layouts, computed on the CPU.
 */
#ifndef GANTRY_TENSORCORE_H
#define GANTRY_TENSORCORE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#if !defined(__CUDACC__)
#include <mma.h> /* the emulator's emu::mma_m16n8k16_bf16, emu::ldmatrix_x4 */
#endif

/* d (16x8) += a (16x16) b (16x8); every lane of the warp must call it (mma.sync.aligned). */
static __device__ __forceinline__ void tc_mma(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif !defined(__CUDACC__)
    emu::mma_m16n8k16_bf16(d, a, b, d);
#else
    (void)d, (void)a, (void)b;
#endif
}

/* ldmatrix .x4: lane 8i + r passes the address of row r of 8x8 matrix i (16 bytes, 16-byte
 * aligned, shared memory); r[i] receives matrix i's [g][2t..2t+1], or with TRANS its
 * [2t..2t+1][g]. Warp-wide. */
template <bool TRANS>
static __device__ __forceinline__ void tc_ldmatrix_x4(uint32_t r[4], const void *row)
{
#if defined(__CUDA_ARCH__)
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
#elif !defined(__CUDACC__)
    emu::ldmatrix_x4(r, row, TRANS);
#else
    (void)r, (void)row;
#endif
}

/* 2^x, the special function unit's approximation (relative error about 2^-22, flushes subnormal
 * results to zero): one instruction, where expf without fast math is a range reduction, the
 * same instruction and fix-ups. exp(s) as tc_exp2(s * log2(e)) with the factor folded into an FMA
 * is how FlashAttention keeps the softmax off the critical path. The emulator: exp2f. */
static __device__ __forceinline__ float tc_exp2(float x)
{
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

/* cp.async: 16 bytes from global to shared memory (both 16-byte aligned) without passing through
 * registers, in flight while the thread goes on (Ampere and later). With fill false nothing is
 * read (src only has to be a valid address) and 16 zero bytes are written: a padding chunk takes
 * the same path as a real one. The copies a thread issued since its last tc_cp_commit form a
 * group; tc_cp_wait<N> returns once all but its N newest groups have landed, and a
 * __syncthreads after it makes them visible to the block. The emulator writes shared memory only
 * at the wait (kernels/emu/include/emu_device.h), so a read before it sees stale bytes there. */
static __device__ __forceinline__ void tc_cp_async16(void *dst, const void *src, bool fill)
{
#if defined(__CUDA_ARCH__)
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(a), "l"(src), "r"(fill ? 16 : 0)
                 : "memory");
#elif !defined(__CUDACC__)
    emu::cp_async(dst, src, 16, fill ? 16 : 0);
#else
    (void)dst, (void)src, (void)fill;
#endif
}
static __device__ __forceinline__ void tc_cp_commit()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif !defined(__CUDACC__)
    emu::cp_async_commit();
#endif
}
template <int N> static __device__ __forceinline__ void tc_cp_wait()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
    emu::cp_async_wait(N);
#endif
}

/* A 32-bit store to global memory (4-byte aligned): two bf16 of a packed operand. */
static __device__ __forceinline__ void tc_store32(void *dst, uint32_t v)
{
#if defined(__CUDA_ARCH__)
    *(uint32_t *)dst = v;
#else
    memcpy(dst, &v, 4);
#endif
}

/* Two fp32 values rounded to bf16 (to nearest even) in one register, lo in the low half. */
static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
    uint16_t ul, uh;
    memcpy(&ul, &l, 2);
    memcpy(&uh, &h, 2);
    return (uint32_t)ul | (uint32_t)uh << 16;
}

/* The A operand (16x16 over k = 16 columns) from the fp32 accumulators c0 (columns 0-7) and c1
 * (columns 8-15) of two 16x8 products, rounded to bf16 (the layouts above line up). */
static __device__ __forceinline__ void tc_pack_a(uint32_t a[4], const float c0[4],
                                                 const float c1[4])
{
    a[0] = tc_pack(c0[0], c0[1]);
    a[1] = tc_pack(c0[2], c0[3]);
    a[2] = tc_pack(c1[0], c1[1]);
    a[3] = tc_pack(c1[2], c1[3]);
}

/* Fragments from a row-major bf16 tile in shared memory with a row stride of LD elements
 * (LD * 2 a multiple of 16 bytes):
 *   tc_load_a:    A = tile rows 0-15, columns k0..k0+15
 *   tc_load_b_nk: B (k0..k0+15, n0..n0+15) = tile^T, the tile stored [n][k] (K used as K^T):
 *                 b[0..1] the 16x8 operand of columns n0..n0+7, b[2..3] of n0+8..n0+15
 *   tc_load_b_kn: B (k0..k0+15, n0..n0+15) = the tile stored [k][n] (V in P V), likewise
 *   tc_load_a_km: A = rows m0..m0+15, columns k0..k0+15 of the tile's transpose: the tile
 *                 stored [k][m] (a stored dS^T read as dS) */
template <int LD>
static __device__ __forceinline__ void tc_load_a(uint32_t a[4], const __nv_bfloat16 *tile, int k0)
{
    const int l = threadIdx.x % 32;
    tc_ldmatrix_x4<false>(a, tile + (l % 16) * LD + k0 + (l / 16) * 8);
}
template <int LD>
static __device__ __forceinline__ void tc_load_b_nk(uint32_t b[4], const __nv_bfloat16 *tile,
                                                    int n0, int k0)
{
    const int l = threadIdx.x % 32;
    tc_ldmatrix_x4<false>(b, tile + (n0 + l % 8 + (l / 16) * 8) * LD + k0 + (l / 8 % 2) * 8);
}
template <int LD>
static __device__ __forceinline__ void tc_load_b_kn(uint32_t b[4], const __nv_bfloat16 *tile,
                                                    int k0, int n0)
{
    const int l = threadIdx.x % 32;
    tc_ldmatrix_x4<true>(b, tile + (k0 + l % 16) * LD + n0 + (l / 16) * 8);
}
template <int LD>
static __device__ __forceinline__ void tc_load_a_km(uint32_t a[4], const __nv_bfloat16 *tile,
                                                    int m0, int k0)
{
    /* matrix i of the operand (a[i]) is rows m0 + (i % 2) * 8 and columns k0 + (i / 2) * 8: the
     * stored 8x8 block at [k0 + (i / 2) * 8][m0 + (i % 2) * 8], read transposed */
    const int l = threadIdx.x % 32;
    tc_ldmatrix_x4<true>(a, tile + (k0 + (l / 16) * 8 + l % 8) * LD + m0 + (l / 8 % 2) * 8);
}

#endif /* GANTRY_TENSORCORE_H */
