// tensorcore_gpu_test: kernels/tensorcore.h's register layouts against the PTX ISA's, with exact
// integer arithmetic. The fused bf16 attention relies on them (scores kept in registers and
// reused as the next product's operand), and the CUDA emulator implements the same layouts, so
// this test is what ties the two together: on a GPU it checks that the hardware agrees with the
// layouts written here, on the emulator that the emulator does.
//   1. tc_mma with operands built lane by lane from the documented fragment tables (not from the
//      helpers), D = A B + C for a 16x16 A and a 16x8 B of small integers;
//   2. the ldmatrix helpers: A from a row-major tile (tc_load_a), B from a tile stored [n][k]
//      (tc_load_b_nk) and from one stored [k][n] (tc_load_b_kn, ldmatrix .trans), and A from a
//      tile stored [k][m] (tc_load_a_km, .trans: a stored dS^T read as dS), 16x16 products;
//   3. tc_pack_a: S = A B in fp32 accumulators, then S (as bf16) times B2 without shared memory;
//   4. tc_cp_async16: the tiles of 2 and 3 staged by cp.async (a 16-byte chunk a lane and tile,
//      one group, waited for), and a fourth, poisoned with NaN first, by zero fills: A times it
//      must be 0;
//   5. wgmma (tc_wgmma_n64, on sm_90a devices: H100, H200): one warpgroup's 64x64 products with
//      A from registers in the documented layout and B from shared memory through descriptors
//      without swizzle: K-major B with lbo 128 and sbo 512 (S = A B over one k-step; U over two,
//      the one at start + 2 lbo first, then the other accumulating onto it; and X, the same
//      product with A from shared memory too, K-major with lbo 1024 and sbo 128; and Y, with A
//      MN-major, lbo 128 and sbo 512), then MN-major
//      V with lbo 1024 and sbo 128
//      (O = bf16(S) V over four k-steps, S's accumulators packed by tc_pack_a as the attention
//      packs P). The accumulators start as NaN, so a product that read them where it should
//      not, or an output read before the wait, shows; lbo and sbo differ, so swapping their
//      meaning gives wrong integers.
// Values are integers in [-3, 3] so every sum is exact in fp32 and every S in bf16: any element
// in the wrong register gives a wrong integer. Exits 77 without a device.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/gpu_testutil.h"
#include "kernels/tensorcore.h"

#define LD 24 /* shared-memory row stride of the 16x16 tiles (48 bytes: 16-byte multiple) */

/* 1: the fragment tables of "Matrix Fragments for mma.m16n8k16 with floating point type" */
static __global__ void mma_table_kernel(float *d, const uint16_t *a, const uint16_t *b,
                                        const float *c)
{
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t ra[4], rb[2];
    float acc[4];
    for (int i = 0; i < 4; i++) { /* a_i pairs: rows g, g+8, g, g+8; columns 2t, 2t, 2t+8, 2t+8 */
        int row = g + (i % 2) * 8, col = 2 * t + (i / 2) * 8;
        ra[i] = (uint32_t)a[row * 16 + col] | (uint32_t)a[row * 16 + col + 1] << 16;
    }
    for (int i = 0; i < 2; i++) { /* b_i pairs: k = 2t, 2t+1 (+8 for b1), column n = g */
        int k = 2 * t + i * 8;
        rb[i] = (uint32_t)b[k * 8 + g] | (uint32_t)b[(k + 1) * 8 + g] << 16;
    }
    for (int i = 0; i < 4; i++) /* c_i: rows g (c0, c1), g+8 (c2, c3); columns 2t, 2t+1 */
        acc[i] = c[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
    tc_mma(acc, ra, rb);
    for (int i = 0; i < 4; i++)
        d[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = acc[i];
}

/* Stores a 16x16 result held as two 16x8 accumulators (columns 0-7, 8-15) row-major. */
static __device__ void store16(float *d, const float (*acc)[4])
{
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 4; i++)
            d[(g + (i / 2) * 8) * 16 + n * 8 + 2 * t + i % 2] = acc[n][i];
}

/* 2, 3 and 4: a (16x16, row-major), bnk (B stored [n][k]), bkn (B2 stored [k][n]); outputs
 * d_nk = A B, d_kn = A B2, d_pack = bf16(A B) B2, d_zero = A Z (Z zero-filled), d_km = M B2
 * where M (m, k) is the tile bnk read as stored [k][m] */
static __global__ void ldmatrix_kernel(float *d_nk, float *d_kn, float *d_pack, float *d_zero,
                                       float *d_km, const uint16_t *a, const uint16_t *bnk,
                                       const uint16_t *bkn)
{
    extern __shared__ float tc_test_smem[];
    uint16_t *As = (uint16_t *)tc_test_smem, *Bnk = As + 16 * LD, *Bkn = Bnk + 16 * LD;
    uint16_t *Zs = Bkn + 16 * LD;
    const int r = threadIdx.x / 2, c8 = threadIdx.x % 2 * 8; /* the lane's chunk of each tile */
    for (int e = 0; e < 8; e++)
        Zs[r * LD + c8 + e] = 0x7fc0; /* NaN, unless the zero fill lands */
    __syncwarp();
    tc_cp_async16(As + r * LD + c8, a + r * 16 + c8, true);
    tc_cp_async16(Bnk + r * LD + c8, bnk + r * 16 + c8, true);
    tc_cp_async16(Bkn + r * LD + c8, bkn + r * 16 + c8, true);
    tc_cp_async16(Zs + r * LD + c8, a, false);
    tc_cp_commit();
    tc_cp_wait<0>();
    __syncwarp();
    const __nv_bfloat16 *A = (const __nv_bfloat16 *)As, *BN = (const __nv_bfloat16 *)Bnk;
    const __nv_bfloat16 *BK = (const __nv_bfloat16 *)Bkn;
    uint32_t fa[4], fb[4];
    float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}}, u[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    float p[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    tc_load_a<LD>(fa, A, 0);
    tc_load_b_nk<LD>(fb, BN, 0, 0);
    tc_mma(s[0], fa, fb);
    tc_mma(s[1], fa, fb + 2);
    store16(d_nk, s);
    tc_load_b_kn<LD>(fb, BK, 0, 0);
    tc_mma(u[0], fa, fb);
    tc_mma(u[1], fa, fb + 2);
    store16(d_kn, u);
    uint32_t fs[4];
    tc_pack_a(fs, s[0], s[1]);
    tc_mma(p[0], fs, fb);
    tc_mma(p[1], fs, fb + 2);
    store16(d_pack, p);
    float z[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    tc_load_b_nk<LD>(fb, (const __nv_bfloat16 *)Zs, 0, 0);
    tc_mma(z[0], fa, fb);
    tc_mma(z[1], fa, fb + 2);
    store16(d_zero, z);
    float w[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    tc_load_a_km<LD>(fa, BN, 0, 0);
    tc_load_b_kn<LD>(fb, BK, 0, 0);
    tc_mma(w[0], fa, fb);
    tc_mma(w[1], fa, fb + 2);
    store16(d_km, w);
}

/* 5: wgmma. a2 (64 x 32) row-major, b3 (32 x 64) and v (64 x 64) stored [k][n]; outputs
 * S = A2[:, :16] B3[:16, :], U = A2 B3, O = bf16(S) V, each 64 x 64 row-major. */
#define WG_KB 0    /* b3 K-major: core matrix (i along n, j along k) at i * 512 + j * 128 */
#define WG_VB 4096 /* v MN-major: core matrix (i along n, j along k) at i * 128 + j * 1024 */
#define WG_AB 12288 /* a2 K-major, for A from shared memory: (i along m, j along k) at i * 128 +
                     * j * 1024 (lbo and sbo the other way round from b3's) */
#define WG_AT 16384 /* a2 MN-major (stored [k][m], as dS^T): (i along m, j along k) at i * 512 +
                     * j * 128 */
#define WG_SMEM (4096 + 8192 + 4096 + 4096)
static __device__ void wg_store(float *dst, const float d[32])
{
    const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++)
            dst[(16 * w + g + (e / 2) * 8) * 64 + 8 * j + 2 * t + e % 2] = d[4 * j + e];
}
static __global__ void wgmma_kernel(float *d_s, float *d_u, float *d_o, float *d_w, float *d_y,
                                    const uint16_t *a2, const uint16_t *b3, const uint16_t *v)
{
    extern __shared__ float tc_test_smem[];
    unsigned char *sm = (unsigned char *)tc_test_smem;
    for (int x = threadIdx.x; x < 32 * 64; x += blockDim.x) {
        const int k = x / 64, n = x % 64;
        memcpy(sm + WG_KB + (n / 8) * 512 + (k / 8) * 128 + (n % 8) * 16 + (k % 8) * 2,
               &b3[k * 64 + n], 2);
    }
    for (int x = threadIdx.x; x < 64 * 64; x += blockDim.x) {
        const int k = x / 64, n = x % 64;
        memcpy(sm + WG_VB + (n / 8) * 128 + (k / 8) * 1024 + (k % 8) * 16 + (n % 8) * 2,
               &v[k * 64 + n], 2);
    }
    for (int x = threadIdx.x; x < 64 * 32; x += blockDim.x) {
        const int m = x / 32, k = x % 32;
        memcpy(sm + WG_AB + (m / 8) * 128 + (k / 8) * 1024 + (m % 8) * 16 + (k % 8) * 2,
               &a2[m * 32 + k], 2);
        memcpy(sm + WG_AT + (m / 8) * 512 + (k / 8) * 128 + (k % 8) * 16 + (m % 8) * 2,
               &a2[m * 32 + k], 2);
    }
    tc_wg_proxy_fence();
    __syncthreads();
    const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    uint32_t fa[2][4]; /* A2's k-steps 0 and 1, the warp's rows 16w.. (mma.m16n8k16's A table) */
    for (int ks = 0; ks < 2; ks++)
        for (int i = 0; i < 4; i++) {
            const int row = 16 * w + g + (i % 2) * 8, col = 16 * ks + 2 * t + (i / 2) * 8;
            fa[ks][i] = (uint32_t)a2[row * 32 + col] | (uint32_t)a2[row * 32 + col + 1] << 16;
        }
    float s[32], u[32], o[32], x[32], y[32];
    for (int i = 0; i < 32; i++) /* NaN: the first products ignore it */
        s[i] = u[i] = o[i] = x[i] = y[i] = __int_as_float(0x7fc00000);
    float(*s4)[4] = (float(*)[4])s, (*u4)[4] = (float(*)[4])u, (*o4)[4] = (float(*)[4])o;
    float(*x4)[4] = (float(*)[4])x, (*y4)[4] = (float(*)[4])y;
    tc_wg_pin<8>(s4), tc_wg_pin<8>(u4), tc_wg_pin<8>(o4), tc_wg_pin<8>(x4), tc_wg_pin<8>(y4);
    tc_wg_fence();
    tc_wgmma_n64<false>(s, fa[0], tc_wg_desc(sm + WG_KB, 128, 512), false);
    /* U's second k-step first: as a copy of S's product, ptxas merged the two and waited */
    tc_wgmma_n64<false>(u, fa[1], tc_wg_desc(sm + WG_KB + 2 * 128, 128, 512), false);
    tc_wgmma_n64<false>(u, fa[0], tc_wg_desc(sm + WG_KB, 128, 512), true);
    for (int ks = 0; ks < 2; ks++) /* X = A2 B3 again, A2 read from shared memory: a k-step on
                                    * is 2 lbo on for both */
        tc_wgmma_n64_ss<false>(x, tc_wg_desc(sm + WG_AB + ks * 2 * 1024, 1024, 128),
                               tc_wg_desc(sm + WG_KB + ks * 2 * 128, 128, 512), ks > 0);
    for (int ks = 0; ks < 2; ks++) /* Y = A2 B3 again, A2 MN-major: a k-step 2 lbo on */
        tc_wgmma_n64_ss<false, true>(y, tc_wg_desc(sm + WG_AT + ks * 2 * 128, 128, 512),
                                     tc_wg_desc(sm + WG_KB + ks * 2 * 128, 128, 512), ks > 0);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<8>(s4), tc_wg_pin<8>(u4), tc_wg_pin<8>(x4), tc_wg_pin<8>(y4), tc_wg_pin<2>(fa);
    uint32_t pa[4][4]; /* kept until the wait: the products read them asynchronously */
    for (int kc = 0; kc < 4; kc++)
        tc_pack_a(pa[kc], s + 8 * kc, s + 8 * kc + 4); /* S's columns 16 kc .. 16 kc + 15 */
    tc_wg_pin<4>(pa);
    tc_wg_fence();
    for (int kc = 0; kc < 4; kc++)
        tc_wgmma_n64<true>(o, pa[kc], tc_wg_desc(sm + WG_VB + kc * 2 * 1024, 1024, 128), kc > 0);
    tc_wg_commit();
    tc_wg_wait<0>();
    tc_wg_pin<8>(o4), tc_wg_pin<4>(pa);
    wg_store(d_s, s);
    wg_store(d_u, u);
    wg_store(d_w, x);
    wg_store(d_y, y);
    wg_store(d_o, o);
}

/* 1 where this test's device code for the GPU has wgmma (sm_90a code: built for 90 on an
 * H100/H200; the emulator) */
static __global__ void wg_probe_kernel(int *has)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
    *has = 1;
#else
    *has = 0;
#endif
}

static uint16_t *rand_int_bf16(int n, uint64_t *s, float *f)
{
    uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t));
    for (int i = 0; i < n; i++) {
        f[i] = (float)((int)gt_rand(s, 0.0f, 7.0f) - 3); /* -3..3 */
        h[i] = bf16_from_f32(f[i]);
    }
    return h;
}

int main(void)
{
    gt_require_device("tensorcore_gpu_test");
    uint64_t seed = 7;
    float af[256], bf[128], cf[128], ref[256];
    uint16_t *a = rand_int_bf16(256, &seed, af), *b = rand_int_bf16(128, &seed, bf);
    for (int i = 0; i < 128; i++)
        cf[i] = (float)((int)gt_rand(&seed, 0.0f, 41.0f) - 20);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float x = cf[i * 8 + j];
            for (int k = 0; k < 16; k++)
                x += af[i * 16 + k] * bf[k * 8 + j];
            ref[i * 8 + j] = x;
        }
    uint16_t *d_a = (uint16_t *)gt_up(a, 256, 2), *d_b = (uint16_t *)gt_up(b, 128, 2);
    float *d_c = GT_UPF(cf, 128), *d_d;
    CUDA_CHECK(cudaMalloc(&d_d, 256 * sizeof(float)));
    mma_table_kernel<<<1, 32>>>(d_d, d_a, d_b, d_c);
    CUDA_CHECK(cudaGetLastError());
    gt_compare("mma m16n8k16 tables", d_d, ref, 128, 0, 0);

    /* B (k, n) stored [n][k] in bnk; B2 (k, n) stored [k][n] in bkn */
    float bnkf[256], bknf[256], ref_nk[256], ref_kn[256], ref_pack[256], ref_km[256];
    uint16_t *bnk = rand_int_bf16(256, &seed, bnkf), *bkn = rand_int_bf16(256, &seed, bknf);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float x = 0, y = 0, z = 0;
            for (int k = 0; k < 16; k++) {
                x += af[i * 16 + k] * bnkf[j * 16 + k];
                y += af[i * 16 + k] * bknf[k * 16 + j];
                z += bnkf[k * 16 + i] * bknf[k * 16 + j];
            }
            ref_nk[i * 16 + j] = x, ref_kn[i * 16 + j] = y, ref_km[i * 16 + j] = z;
        }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float x = 0;
            for (int k = 0; k < 16; k++)
                x += ref_nk[i * 16 + k] * bknf[k * 16 + j]; /* |S| <= 144: exact in bf16 */
            ref_pack[i * 16 + j] = x;
        }
    uint16_t *d_bnk = (uint16_t *)gt_up(bnk, 256, 2), *d_bkn = (uint16_t *)gt_up(bkn, 256, 2);
    float *d_nk, *d_kn, *d_pack, *d_zero, *d_km, zero[256] = {0};
    CUDA_CHECK(cudaMalloc(&d_km, 256 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_zero, 256 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_nk, 256 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_kn, 256 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_pack, 256 * sizeof(float)));
    ldmatrix_kernel<<<1, 32, 4 * 16 * LD * sizeof(uint16_t)>>>(d_nk, d_kn, d_pack, d_zero, d_km,
                                                                d_a, d_bnk, d_bkn);
    CUDA_CHECK(cudaGetLastError());
    gt_compare("ldmatrix A, B [n][k]", d_nk, ref_nk, 256, 0, 0);
    gt_compare("ldmatrix A, B [k][n]", d_kn, ref_kn, 256, 0, 0);
    gt_compare("tc_pack_a(S) B", d_pack, ref_pack, 256, 0, 0);
    gt_compare("cp.async zero fill", d_zero, zero, 256, 0, 0);
    gt_compare("ldmatrix A [k][m], B [k][n]", d_km, ref_km, 256, 0, 0);
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_d), cudaFree(d_bnk), cudaFree(d_bkn);
    cudaFree(d_nk), cudaFree(d_kn), cudaFree(d_pack), cudaFree(d_zero);
    cudaFree(d_km);
    free(a), free(b), free(bnk), free(bkn);

    /* 5: wgmma, where the device code has it (elsewhere it would trap) */
    int *d_has, has = 0;
    CUDA_CHECK(cudaMalloc(&d_has, sizeof(int)));
    CUDA_CHECK(cudaMemset(d_has, 0, sizeof(int)));
    wg_probe_kernel<<<1, 1>>>(d_has);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(&has, d_has, sizeof(int), cudaMemcpyDeviceToHost));
    cudaFree(d_has);
    if (!has) {
        printf("wgmma: SKIPPED (this GPU runs device code without wgmma: not an H100/H200 with "
               "the sm_90a build)\n");
        return gt_summary("tensorcore_gpu_test");
    }
    {
        static float a2f[64 * 32], b3f[32 * 64], vf[64 * 64];
        static float ref_s[64 * 64], ref_u[64 * 64], ref_o[64 * 64];
        uint16_t *a2 = rand_int_bf16(64 * 32, &seed, a2f), *b3 = rand_int_bf16(32 * 64, &seed, b3f);
        uint16_t *v = rand_int_bf16(64 * 64, &seed, vf);
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 64; j++) {
                float x = 0, y = 0;
                for (int k = 0; k < 32; k++) {
                    y += a2f[i * 32 + k] * b3f[k * 64 + j];
                    if (k == 15)
                        x = y; /* |S| <= 144: exact in bf16 */
                }
                ref_s[i * 64 + j] = x, ref_u[i * 64 + j] = y;
            }
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 64; j++) {
                float x = 0;
                for (int k = 0; k < 64; k++)
                    x += ref_s[i * 64 + k] * vf[k * 64 + j];
                ref_o[i * 64 + j] = x;
            }
        uint16_t *d_a2 = (uint16_t *)gt_up(a2, 64 * 32, 2), *d_b3 = (uint16_t *)gt_up(b3, 32 * 64, 2);
        uint16_t *d_v = (uint16_t *)gt_up(v, 64 * 64, 2);
        float *d_s, *d_u, *d_o, *d_w, *d_y;
        CUDA_CHECK(cudaMalloc(&d_w, 64 * 64 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&d_y, 64 * 64 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&d_s, 64 * 64 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&d_u, 64 * 64 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&d_o, 64 * 64 * sizeof(float)));
        wgmma_kernel<<<1, 128, WG_SMEM>>>(d_s, d_u, d_o, d_w, d_y, d_a2, d_b3, d_v);
        CUDA_CHECK(cudaGetLastError());
        gt_compare("wgmma K-major B, 1 k-step", d_s, ref_s, 64 * 64, 0, 0);
        gt_compare("wgmma K-major B, 2 k-steps", d_u, ref_u, 64 * 64, 0, 0);
        gt_compare("wgmma A and B from shared memory", d_w, ref_u, 64 * 64, 0, 0);
        gt_compare("wgmma MN-major A from shared memory", d_y, ref_u, 64 * 64, 0, 0);
        gt_compare("wgmma tc_pack_a(S), MN-major V", d_o, ref_o, 64 * 64, 0, 0);
        cudaFree(d_a2), cudaFree(d_b3), cudaFree(d_v), cudaFree(d_s), cudaFree(d_u), cudaFree(d_o);
        cudaFree(d_w), cudaFree(d_y);
        free(a2), free(b3), free(v);
    }
    return gt_summary("tensorcore_gpu_test");
}
