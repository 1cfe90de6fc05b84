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
#include <mma.h> /* the emulator's emu::mma_m16n8k16_bf16, emu::ldmatrix_x4, emu::wgmma_* */
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

/* ---- wgmma: Hopper's warpgroup products (sm_90a), B read from shared memory ----
 *
 * wgmma.mma_async m64nNk16 multiplies for a warpgroup (4 consecutive warps, 128 threads, all of
 * which must call it): D (64 x N, fp32) = A (64 x 16) B (16 x N) (+ D). Warp w of the group
 * holds rows 16w..16w+15 of A and D, in mma.m16n8k16's layouts above: A in four registers as
 * there (a row's operand depends only on its own warp's registers), D as N/8 of the 16x8
 * accumulators, d[4j + e] = C's c[e] of columns 8j..8j+7. So a FlashAttention warp's scores
 * (s[j][e]), its packed P (tc_pack_a) and its O accumulators keep their layouts. B is not in
 * registers: a 64-bit descriptor names it in shared memory, which the tensor cores read
 * themselves (no ldmatrix). Without swizzling, B is made of "core matrices" of 8 rows of 16
 * contiguous bytes (128 contiguous bytes each), core matrix (i along N, j along K) at
 * start + i * sbo + j * lbo bytes:
 *   K-major (TRANS false; B stored [n][k], as K in S = Q K^T): row r of a core matrix is
 *     B[8j .. 8j+7][8i + r] (its 8 k values);
 *   MN-major (TRANS true; B stored [k][n], as V in O = P V): row r is B[8j + r][8i .. 8i+7].
 * That reading of the descriptor (PTX ISA, "Matrix Descriptor Format" and the canonical layouts
 * without swizzle) is what the emulator implements and what tensorcore_gpu_test checks on a GPU
 * with both layouts and an lbo different from sbo; the next k-step of 16 is start + 2 * lbo.
 * CUTLASS's GMMA descriptors document the same canonical layouts (units of 16 bytes, T elements
 * each): K-major ((8,m),(T,2k)):((1T,SBO),(1,LBO)), MN-major ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)),
 * that is, along N by sbo and along K by lbo in both.
 * B's shared memory, written by threads, is fenced to the tensor cores' (async) proxy by each
 * writer (tc_wg_proxy_fence) before the barrier after which the products read it.
 * Asynchronous: tc_wg_fence() before the first product of a batch (and after any other write to
 * its accumulators), the products, tc_wg_commit(), then tc_wg_wait<0>() before the accumulators
 * or the A registers are touched or the B tile is overwritten. The emulator applies a product
 * to its accumulators only at the wait, so reading them sooner sees stale values, as it may on a
 * GPU. Only where the compiler targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL: H100, H200); any other
 * device code traps. N = 64 here (the attention's tiles at head size 64). */
static __device__ __forceinline__ uint64_t tc_wg_desc(const void *smem, unsigned lbo,
                                                      unsigned sbo)
{
#if defined(__CUDA_ARCH__)
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
#elif !defined(__CUDACC__)
    const unsigned a = emu::smem_offset(smem);
#else
    const unsigned a = 0;
    (void)smem;
#endif
    /* bits 0-13 start, 16-29 lbo, 32-45 sbo (all >> 4); base offset 0; 62-63 swizzle: none */
    return (uint64_t)((a >> 4) & 0x3fffu) | (uint64_t)((lbo >> 4) & 0x3fffu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fffu) << 32;
}

/* The descriptor of the same layout bytes further on (a multiple of 16): its start field is
 * the address >> 4, so the offset adds there, as long as the address stays in the 14 bits'
 * 256 KB (all shared memory); one integer add, where tc_wg_desc again would convert, shift
 * and mask. The k-steps of a product and the m-tiles of a tile take their descriptors so. */
static __device__ __forceinline__ uint64_t tc_wg_desc_add(uint64_t desc, unsigned bytes)
{
    return desc + (bytes >> 4);
}

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_WG_NONE() __trap() /* no wgmma in this device code: see above */
#endif

static __device__ __forceinline__ void tc_wg_fence()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    TC_WG_NONE();
#endif
}
static __device__ __forceinline__ void tc_wg_commit()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    TC_WG_NONE();
#elif !defined(__CUDACC__)
    emu::wgmma_commit();
#endif
}
template <int N> static __device__ __forceinline__ void tc_wg_wait()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDA_ARCH__)
    TC_WG_NONE();
#elif !defined(__CUDACC__)
    emu::wgmma_wait(N);
#endif
}

/* Registers a wgmma reads or writes (accumulators, A operands) pinned in program order: the
 * fence, commit and wait are asm statements that do not name them, so the compiler may otherwise
 * sink a write to them (the forward's rescale of O, P's packing) past tc_wg_fence() or hoist a
 * read of a result above tc_wg_wait() (as CUTLASS's warpgroup_fence_operand prevents). ptxas
 * 13.0.88 did sink the rescale: it then injected a second fence between the products itself
 * ("C7519 warpgroup.arrive is injected"). Call on what a batch writes or reads, before its
 * tc_wg_fence() and after its tc_wg_wait(). */
static __device__ __forceinline__ void tc_wg_pin1(float &x)
{
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+f"(x)::"memory");
#else
    (void)x;
#endif
}
static __device__ __forceinline__ void tc_wg_pin1(uint32_t &x)
{
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+r"(x)::"memory");
#else
    (void)x;
#endif
}
/* N rows of 4: accumulators (float) or A operands (uint32_t) */
template <int N, typename R> static __device__ __forceinline__ void tc_wg_pin(R (*a)[4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            tc_wg_pin1(a[i][e]);
}

/* Shared memory this thread wrote (plain stores, or cp.async copies it has waited for: the
 * generic proxy) made visible to wgmma's reads of B (the async proxy): after the writes, before
 * the barrier that orders them with the products. */
static __device__ __forceinline__ void tc_wg_proxy_fence()
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* The 32 accumulators of an m64n64 product as asm operands %0..%31 ("+f"), and their list */
#define TC_WG_D32(d)                                                                            \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),         \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),           \
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),           \
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TC_WG_D32_ASM                                                                           \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

/* d (the warp's 16 x 64 of the group's 64 x 64) = a (its 16 x 16 of A) x B (16 x 64, bdesc) + d,
 * or without acc, + 0 (d's old values unread). TRANS: B MN-major (above). */
template <bool TRANS>
static __device__ __forceinline__ void tc_wgmma_n64(float d[32], const uint32_t a[4],
                                                    uint64_t bdesc, bool acc)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 TC_WG_D32_ASM ", {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
                 : TC_WG_D32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(TRANS ? 1 : 0),
                   "r"(acc ? 1 : 0)
                 : "memory"); /* it reads shared memory: no store may move across it */
#elif defined(__CUDA_ARCH__)
    (void)d, (void)a, (void)bdesc, (void)acc;
    TC_WG_NONE();
#elif !defined(__CUDACC__)
    emu::wgmma_m64n64k16_bf16(d, a, bdesc, acc, TRANS);
#else
    (void)d, (void)a, (void)bdesc, (void)acc;
#endif
}

/* The same product with A (64 x 16) read from shared memory too, through adesc, core matrix
 * (i along M, j along K) at start + i * sbo + j * lbo: K-major (TRANS_A false; A stored [m][k],
 * as Q, K or V rows), its row r A[8i + r][8j .. 8j+7]; or MN-major (TRANS_A true; A stored
 * [k][m], as dS^T for dQ = dS K), its row r A[8i .. 8i+7][8j + r]. Warp w's D rows are A's rows
 * 16w .. 16w+15. No A registers: the operand the kernels would otherwise load by ldmatrix every
 * tile (FlashAttention-3 reads Q so). TRANS_B: B MN-major, as above. */
template <bool TRANS_B, bool TRANS_A = false>
static __device__ __forceinline__ void tc_wgmma_n64_ss(float d[32], uint64_t adesc, uint64_t bdesc,
                                                       bool acc)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 TC_WG_D32_ASM ", %32, %33, p, 1, 1, %34, %35;\n}\n"
                 : TC_WG_D32(d)
                 : "l"(adesc), "l"(bdesc), "n"(TRANS_A ? 1 : 0), "n"(TRANS_B ? 1 : 0),
                   "r"(acc ? 1 : 0)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)d, (void)adesc, (void)bdesc, (void)acc;
    TC_WG_NONE();
#elif !defined(__CUDACC__)
    emu::wgmma_m64n64k16_bf16_ss(d, adesc, bdesc, acc, TRANS_B, TRANS_A);
#else
    (void)d, (void)adesc, (void)bdesc, (void)acc;
#endif
}

#endif /* GANTRY_TENSORCORE_H */
