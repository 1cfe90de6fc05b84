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
//      must be 0.
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
    return gt_summary("tensorcore_gpu_test");
}
