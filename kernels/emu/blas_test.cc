// kernels/emu/blas.cc and the emulated CUB sort against naive references written here:
// cublasLtMatmul in every combination kernels/matmul.cu uses (row-major GEMMs mapped onto
// column-major ones as matmul.cu maps them: transposes, BIAS, GELU_AUX_BIAS with the aux output,
// beta 0 and 1, fp32 / bf16 operands, fp32 / bf16 outputs, padded leading dimensions whose padding
// is NaN so reading it shows), the heuristic's alignment model, cublasGemmStridedBatchedEx as
// kernels/attention.cu calls it (plus TF32 math), cub::DeviceRadixSort::SortPairs (temp-storage
// protocol, bit ranges, stability, signed and float keys), the error returns, and the abort on
// memory outside a device allocation (with a stand-in for the runtime's emu_is_device_range).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cub/device/device_radix_sort.cuh>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "common/test.h"
#include "kernels/bf16.h"

/* The runtime's range check, standing in for kernels/emu/runtime.cc: everything is "device"
 * memory unless a test restricts it to [dev_lo, dev_lo + dev_len). */
static const char *dev_lo;
static size_t dev_len;
extern "C" int emu_is_device_range(const void *p, size_t bytes)
{
    if (dev_len == 0)
        return 1;
    const char *c = (const char *)p;
    return c >= dev_lo && bytes <= dev_len && (size_t)(c - dev_lo) <= dev_len - bytes;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 1 && (uintptr_t)p % al)
        al >>= 1;
    return al;
}

static double gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* its derivative, the DGELU epilogue's factor */
static double gelu_tanh_grad(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

/* A device buffer of fp32 or bf16 elements; host mirror `h` holds the exact values stored. */
struct dbuf {
    cudaDataType_t t;
    std::vector<float> h;
    std::vector<float> f32;
    std::vector<uint16_t> b16;
    void init(cudaDataType_t type, size_t n)
    {
        t = type;
        h.assign(n, NAN);
        if (t == CUDA_R_32F)
            f32.assign(n, NAN);
        else
            b16.assign(n, (uint16_t)0x7fc0); /* NaN */
    }
    void set(size_t i, float v)
    {
        if (t == CUDA_R_32F)
            f32[i] = h[i] = v;
        else
            h[i] = bf16_to_f32(b16[i] = bf16_from_f32(v));
    }
    float get(size_t i) const { return t == CUDA_R_32F ? f32[i] : bf16_to_f32(b16[i]); }
    void *p() { return t == CUDA_R_32F ? (void *)f32.data() : (void *)b16.data(); }
};

/* Row-major X (rows x cols, row stride ld) with random values; padding stays NaN. */
static void fill(dbuf &x, cudaDataType_t t, int rows, int cols, int ld, float lo, float hi)
{
    x.init(t, (size_t)(rows > 0 ? rows - 1 : 0) * ld + cols + 1);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            x.set((size_t)r * ld + c, urand(lo, hi));
}

/* A row-major GEMM: C (M,N) = epi(alpha op(A) op(B) + beta C + bias[col]), opX = X^T when tX. */
struct rm_case {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc;
    cudaDataType_t abt, ct;
    float alpha, beta;
    cublasLtEpilogue_t epi;
};

/* Expected value and error bound of element (i, j) from the host mirrors. */
static void reference(const rm_case &c, const dbuf &A, const dbuf &B, const dbuf &C0,
                      const dbuf *bias, int i, int j, double *pre, double *tol)
{
    double s = 0, mag = 0;
    for (int l = 0; l < c.K; l++) {
        double a = A.h[c.ta ? (size_t)l * c.lda + i : (size_t)i * c.lda + l];
        double b = B.h[c.tb ? (size_t)j * c.ldb + l : (size_t)l * c.ldb + j];
        s += a * b;
        mag += fabs(a * b);
    }
    double v = c.alpha * s, vmag = fabs(c.alpha) * mag;
    if (c.beta != 0) {
        v += c.beta * C0.h[(size_t)i * c.ldc + j];
        vmag += fabs(c.beta * C0.h[(size_t)i * c.ldc + j]);
    }
    if (bias) {
        v += bias->h[j];
        vmag += fabs(bias->h[j]);
    }
    *pre = v;
    /* fp32 sums of K/8 + 8 terms per lane and tree: (K/8 + 8) roundings of at most the total */
    *tol = (c.K / 8.0 + 8) * 1.2e-7 * vmag + 1e-7;
}

/* Runs c through cuBLASLt the way kernels/matmul.cu does (heuristic with the actual pointers'
 * alignment, then cublasLtMatmul with D as C) and checks D (and aux) against the reference.
 * Returns the heuristic's status. */
static cublasStatus_t check_lt(cublasLtHandle_t lt, const rm_case &c, const char *name)
{
    dbuf A, B, C, bias, aux;
    fill(A, c.abt, c.ta ? c.K : c.M, c.ta ? c.M : c.K, c.lda, -1, 1);
    fill(B, c.abt, c.tb ? c.N : c.K, c.tb ? c.K : c.N, c.ldb, -1, 1);
    fill(C, c.ct, c.M, c.N, c.ldc, -1, 1);
    if (c.beta == 0) /* C (= D) must not be read */
        for (int i = 0; i < c.M; i++)
            for (int j = 0; j < c.N; j++)
                C.set((size_t)i * c.ldc + j, NAN);
    const dbuf C0 = C;
    const bool has_bias = c.epi == CUBLASLT_EPILOGUE_BIAS || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool dgelu = c.epi == CUBLASLT_EPILOGUE_DGELU; /* aux is an input: the pre-activation */
    const bool has_aux = c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || dgelu;
    fill(bias, c.ct, 1, c.N, c.N, -1, 1);
    fill(aux, c.ct, c.M, c.N, c.ldc, -4, 4);
    for (int i = 0; i < c.M && !dgelu; i++) /* NaN in the part aux is written, padding NaN too */
        for (int j = 0; j < c.N; j++)
            aux.set((size_t)i * c.ldc + j, NAN);
    const dbuf aux0 = aux;

    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T */
    cublasOperation_t ta = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int m = c.N, n = c.M, k = c.K;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = -1;
    const void *bias_p = bias.p();
    void *aux_p = aux.p();
    int64_t ldaux = c.ldc;
    TEST_EQ_INT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), 0);
    TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), 0);
    TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi,
                                               sizeof(c.epi)), 0);
    if (has_bias)
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p,
                                                   sizeof(bias_p)), 0);
    if (has_aux) {
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &aux_p, sizeof(aux_p)), 0);
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &ldaux, sizeof(ldaux)), 0);
    }
    TEST_EQ_INT(cublasLtMatrixLayoutCreate(&la, c.abt, ta ? k : m, ta ? m : k, c.ldb), 0);
    TEST_EQ_INT(cublasLtMatrixLayoutCreate(&lb, c.abt, tb ? n : k, tb ? k : n, c.lda), 0);
    TEST_EQ_INT(cublasLtMatrixLayoutCreate(&ld, c.ct, m, n, c.ldc), 0);
    TEST_EQ_INT(cublasLtMatmulPreferenceCreate(&pref), 0);
    size_t ws = 1 << 20;
    TEST_EQ_INT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof(ws)), 0);
    const uint32_t al[4] = {align_of(B.p()), align_of(A.p()), align_of(C.p()), align_of(C.p())};
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        TEST_EQ_INT(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &al[i], sizeof(al[i])), 0);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &h, &found);
    if (st == CUBLAS_STATUS_SUCCESS) {
        TEST_EQ_INT(found, 1);
        TEST_EQ_INT(h.state, CUBLAS_STATUS_SUCCESS);
        std::vector<char> wsbuf(ws);
        TEST_EQ_INT(cublasLtMatmul(lt, op, &c.alpha, B.p(), la, A.p(), lb, &c.beta, C.p(), ld,
                                   C.p(), ld, &h.algo, wsbuf.data(), ws, 0),
                    CUBLAS_STATUS_SUCCESS);
        int bad = 0, bad_aux = 0, bad_gelu = 0;
        for (int i = 0; i < c.M; i++) {
            for (int j = 0; j < c.N; j++) {
                double pre, tol;
                reference(c, A, B, C0, has_bias ? &bias : NULL, i, j, &pre, &tol);
                size_t at = (size_t)i * c.ldc + j;
                double rnd = c.ct == CUDA_R_16BF ? fabs(pre) / 256 : 0; /* bf16 half ulp */
                if (dgelu) { /* D = product * gelu'(aux); aux left as it was */
                    double gp = gelu_tanh_grad(aux0.get(at)), got = C.get(at);
                    double want = pre * gp, r = c.ct == CUDA_R_16BF ? fabs(want) / 256 : 0;
                    bad += !(fabs(got - want) <= fabs(gp) * tol + r + 1e-6 * (1 + fabs(want)));
                    bad_aux += aux.get(at) != aux0.get(at);
                } else if (has_aux) {
                    bad_aux += !(fabs(aux.get(at) - pre) <= tol + rnd);
                    double want = gelu_tanh(pre), got = C.get(at);
                    bad += !(fabs(got - want) <= 1.2 * (tol + rnd) + 1e-6);
                    /* the epilogue's GELU of its own pre-activation: the tanh form exactly */
                    bad_gelu += !(fabs(got - gelu_tanh(aux.get(at))) <= 1e-6 + 1e-6 * fabs(got));
                } else {
                    bad += !(fabs(C.get(at) - pre) <= tol + rnd);
                }
            }
            for (int j = c.N; j < c.ldc && i + 1 < c.M; j++) /* padding of D untouched */
                bad += !isnan(C.get((size_t)i * c.ldc + j));
        }
        if (!TEST_CHECK(bad == 0 && bad_aux == 0 && bad_gelu == 0))
            fprintf(stderr, "       %s: %d bad outputs, %d bad aux, %d not tanh-GELU\n", name, bad,
                    bad_aux, bad_gelu);
    } else {
        TEST_EQ_INT(found, 0);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return st;
}

static cublasLtHandle_t lt_handle;

/* The GEMMs of kernels/matmul.cu, fp32: forward inp @ W^T (+bias, +GELU), dinp += dout @ W,
 * dweight += dout^T @ inp; odd shapes, and padded leading dimensions. */
static void test_lt_fp32(void)
{
    const int shapes[][3] = {{5, 19, 16}, {37, 19, 5}, {64, 40, 24}, {1, 1, 1}};
    for (auto &s : shapes) {
        const int N = s[0], C = s[1], OC = s[2];
        const cublasLtEpilogue_t epis[3] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                            CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
        for (cublasLtEpilogue_t e : epis) {
            rm_case fwd = {false, true, N, OC, C, C, C, OC, CUDA_R_32F, CUDA_R_32F, 1, 0, e};
            cublasStatus_t st = check_lt(lt_handle, fwd, "forward");
            /* GELU aux needs ld % 8 (cuBLASLt's rule): otherwise "no algorithm" */
            TEST_EQ_INT(st, e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS && OC % 8
                                ? CUBLAS_STATUS_NOT_SUPPORTED
                                : CUBLAS_STATUS_SUCCESS);
        }
        rm_case dinp = {false, false, N, C, OC, OC, C, C, CUDA_R_32F, CUDA_R_32F, 1, 1,
                        CUBLASLT_EPILOGUE_DEFAULT};
        TEST_EQ_INT(check_lt(lt_handle, dinp, "dinp"), CUBLAS_STATUS_SUCCESS);
        rm_case dw = {true, false, OC, C, N, OC, C, C, CUDA_R_32F, CUDA_R_32F, 1, 1,
                      CUBLASLT_EPILOGUE_DEFAULT};
        TEST_EQ_INT(check_lt(lt_handle, dw, "dweight"), CUBLAS_STATUS_SUCCESS);
    }
    /* padded leading dimensions (NaN padding), both transposes, alpha and beta not 1 */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        int M = 13, N = 11, K = 21;
        rm_case c = {ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 5, N + 2, CUDA_R_32F,
                     CUDA_R_32F, 0.5f, -2.0f, CUBLASLT_EPILOGUE_BIAS};
        TEST_EQ_INT(check_lt(lt_handle, c, "padded"), CUBLAS_STATUS_SUCCESS);
    }
}

/* bf16 operands: matmul_*_bf16 (bf16 D and bias, dinp accumulated in bf16) and matmul_*_mixed
 * (fp32 D and bias); and the shapes cuBLASLt has no bf16 kernel for. */
static void test_lt_bf16(void)
{
    const int N = 7, C = 24, OC = 16;
    const cudaDataType_t outs[2] = {CUDA_R_16BF, CUDA_R_32F};
    for (cudaDataType_t dt : outs) {
        rm_case fwd = {false, true, N, OC, C, C, C, OC, CUDA_R_16BF, dt, 1, 0,
                       CUBLASLT_EPILOGUE_BIAS};
        TEST_EQ_INT(check_lt(lt_handle, fwd, "bf16 forward"), CUBLAS_STATUS_SUCCESS);
        fwd.epi = CUBLASLT_EPILOGUE_DEFAULT;
        TEST_EQ_INT(check_lt(lt_handle, fwd, "bf16 forward"), CUBLAS_STATUS_SUCCESS);
        rm_case dinp = {false, false, N, C, OC, OC, C, C, CUDA_R_16BF, dt, 1, 1,
                        CUBLASLT_EPILOGUE_DEFAULT};
        TEST_EQ_INT(check_lt(lt_handle, dinp, "bf16 dinp"), CUBLAS_STATUS_SUCCESS);
    }
    rm_case dw = {true, false, OC, C, N, OC, C, C, CUDA_R_16BF, CUDA_R_32F, 1, 1,
                  CUBLASLT_EPILOGUE_DEFAULT};
    TEST_EQ_INT(check_lt(lt_handle, dw, "bf16 dweight"), CUBLAS_STATUS_SUCCESS);
    /* the MLP's input gradient times the GELU's derivative at the saved pre-activation
     * (matmul_backward_mixed_dgelu_bf16): bf16 D and aux, fp32 too; aux ld % 8 as for GELU_AUX */
    for (cudaDataType_t dt : outs) {
        rm_case dg = {false, false, N, C, OC, OC, C, C, CUDA_R_16BF, dt, 1, 0,
                      CUBLASLT_EPILOGUE_DGELU};
        if (dt == CUDA_R_32F)
            dg.abt = CUDA_R_32F;
        TEST_EQ_INT(check_lt(lt_handle, dg, "dgelu"), CUBLAS_STATUS_SUCCESS);
    }
    rm_case dg_odd = {false, false, N, 12, OC, OC, 12, 12, CUDA_R_32F, CUDA_R_32F, 1, 0,
                      CUBLASLT_EPILOGUE_DGELU};
    TEST_EQ_INT(check_lt(lt_handle, dg_odd, "dgelu ld 12"), CUBLAS_STATUS_NOT_SUPPORTED);
    /* ld not a multiple of 8 (C = 20): no bf16 algorithm, where fp32 has one */
    rm_case odd = {false, true, N, OC, 20, 20, 20, OC, CUDA_R_16BF, CUDA_R_32F, 1, 0,
                   CUBLASLT_EPILOGUE_DEFAULT};
    TEST_EQ_INT(check_lt(lt_handle, odd, "bf16 odd"), CUBLAS_STATUS_NOT_SUPPORTED);
    odd.abt = CUDA_R_32F;
    TEST_EQ_INT(check_lt(lt_handle, odd, "fp32 odd"), CUBLAS_STATUS_SUCCESS);
}

/* Builds a forward-like problem for the error tests: D (m,n) = A^T (k,m)^T B (k,n). */
struct lt_fixture {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = -1;
    lt_fixture(cudaDataType_t ab, cudaDataType_t dt, int m, int n, int k, int lda, int ldb, int ldd)
    {
        cublasOperation_t t = CUBLAS_OP_T;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
        cublasLtMatrixLayoutCreate(&la, ab, k, m, lda);
        cublasLtMatrixLayoutCreate(&lb, ab, k, n, ldb);
        cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd);
        cublasLtMatmulPreferenceCreate(&pref);
    }
    cublasStatus_t heuristic(void)
    {
        found = -1;
        return cublasLtMatmulAlgoGetHeuristic(lt_handle, op, la, lb, ld, ld, pref, 1, &h, &found);
    }
    ~lt_fixture()
    {
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(op);
    }
};

static void test_lt_errors(void)
{
    const float one = 1, zero = 0;
    std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f), d(64 * 64, NAN);
    {
        lt_fixture f(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, 8, 8, 8);
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_SUCCESS);
        TEST_EQ_INT(f.found, 1);
        /* beta == 0: D's NaN (it is C too) is not read */
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d.data(), f.ld, d.data(), f.ld, &f.h.algo, NULL, 0, 0),
                    CUBLAS_STATUS_SUCCESS);
        TEST_NEAR(d[0], 8 * 0.125, 0);
        TEST_NEAR(d[63], 8 * 0.125, 0);
        /* NULL algo: chosen internally */
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &one,
                                   d.data(), f.ld, d.data(), f.ld, NULL, NULL, 0, 0),
                    CUBLAS_STATUS_SUCCESS);
        TEST_NEAR(d[5], 2.0, 0);
        /* an algorithm chosen for 256-byte alignment (the default) on a 4-byte aligned A */
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data() + 1, f.la, b.data(), f.lb,
                                   &zero, d.data(), f.ld, d.data(), f.ld, &f.h.algo, NULL, 0, 0),
                    CUBLAS_STATUS_NOT_SUPPORTED);
        uint32_t four = 4;
        TEST_EQ_INT(cublasLtMatmulPreferenceSetAttribute(
                        f.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, sizeof(four)),
                    0);
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_SUCCESS);
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data() + 1, f.la, b.data(), f.lb,
                                   &zero, d.data(), f.ld, d.data(), f.ld, &f.h.algo, NULL, 0, 0),
                    CUBLAS_STATUS_SUCCESS);
        /* a garbage algorithm; one for another epilogue */
        cublasLtMatmulAlgo_t junk;
        memset(&junk, 0, sizeof(junk));
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d.data(), f.ld, d.data(), f.ld, &junk, NULL, 0, 0),
                    CUBLAS_STATUS_INVALID_VALUE);
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        const void *bias = b.data();
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)), 0);
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)), 0);
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d.data(), f.ld, d.data(), f.ld, &f.h.algo, NULL, 0, 0),
                    CUBLAS_STATUS_INVALID_VALUE);
        /* BIAS without a bias pointer */
        bias = NULL;
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
        /* epilogues not emulated */
        e = CUBLASLT_EPILOGUE_DGELU_BGRAD;
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
        TEST_EQ_INT(f.found, 0);
        /* attribute values of the wrong size */
        int64_t wide = 1;
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide,
                                                   sizeof(wide)),
                    CUBLAS_STATUS_INVALID_VALUE);
        int32_t narrow = 1;
        TEST_EQ_INT(cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &narrow, sizeof(narrow)),
                    CUBLAS_STATUS_INVALID_VALUE);
        TEST_EQ_INT(cublasLtMatmulPreferenceSetAttribute(f.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &narrow, sizeof(narrow)),
                    CUBLAS_STATUS_INVALID_VALUE);
        /* NULL handle */
        TEST_EQ_INT(cublasLtMatmul(NULL, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d.data(), f.ld, d.data(), f.ld, NULL, NULL, 0, 0),
                    CUBLAS_STATUS_NOT_INITIALIZED);
    }
    {
        /* inner dimensions that do not agree: A is (k=8) x m, B (k=9) x n */
        lt_fixture f(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, 8, 9, 8);
        cublasLtMatrixLayoutDestroy(f.lb);
        cublasLtMatrixLayoutCreate(&f.lb, CUDA_R_32F, 9, 8, 9);
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d.data(), f.ld, d.data(), f.ld, NULL, NULL, 0, 0),
                    CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        lt_fixture f(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, 7, 8, 8); /* lda < rows of A */
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        lt_fixture f(CUDA_R_32F, CUDA_R_16BF, 8, 8, 8, 8, 8, 8); /* fp32 operands, bf16 out */
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        lt_fixture f(CUDA_R_16F, CUDA_R_32F, 8, 8, 8, 8, 8, 8); /* fp16: not emulated */
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    }
    {
        lt_fixture f(CUDA_R_16BF, CUDA_R_32F, 8, 8, 8, 8, 8, 8);
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_SUCCESS);
        uint32_t eight = 8; /* bf16 on an 8-byte aligned B: no kernel */
        cublasLtMatmulPreferenceSetAttribute(f.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &eight, sizeof(eight));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
        TEST_EQ_INT(f.found, 0);
    }
    {
        /* GELU aux: 16-byte aligned buffer with ld % 8 == 0, else no algorithm */
        lt_fixture f(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, 8, 8, 8);
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU_AUX;
        void *aux = d.data() + 1;
        int64_t ldaux = 8;
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof(aux));
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux,
                                       sizeof(ldaux));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
        aux = d.data();
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof(aux));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_SUCCESS);
        ldaux = 4; /* < rows */
        cublasLtMatmulDescSetAttribute(f.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux,
                                       sizeof(ldaux));
        TEST_EQ_INT(f.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
    }
}

/* kernels/attention.cu's batched(): row-major C_b (M,N) = alpha op(A_b) op(B_b) + beta C_b over
 * `batch` matrices at strides, mapped onto column-major cuBLAS as C^T = op(B)^T op(A)^T. */
static int check_batched(cublasHandle_t h, bool ta, bool tb, cudaDataType_t abt, float alpha,
                         float beta, bool tf32)
{
    const int M = 9, N = 6, K = 17, batch = 3;
    const int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    const long long sa = (long long)(ta ? K : M) * lda + 4, sb = (long long)(tb ? N : K) * ldb + 2,
                    sc = (long long)M * N + 3;
    dbuf A, B, C;
    A.init(abt, (size_t)sa * batch);
    B.init(abt, (size_t)sb * batch);
    C.init(CUDA_R_32F, (size_t)sc * batch);
    for (int b = 0; b < batch; b++) {
        for (long long i = 0; i < (long long)(ta ? K : M) * lda; i++)
            A.set((size_t)(b * sa + i), urand(-1, 1));
        for (long long i = 0; i < (long long)(tb ? N : K) * ldb; i++)
            B.set((size_t)(b * sb + i), urand(-1, 1));
        for (long long i = 0; i < (long long)M * N; i++)
            C.set((size_t)(b * sc + i), beta != 0 ? urand(-1, 1) : NAN);
    }
    const dbuf C0 = C;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B.p(),
        abt, ldb, sb, A.p(), abt, lda, sa, &beta, C.p(), CUDA_R_32F, ldc, sc, batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    TEST_EQ_INT(st, CUBLAS_STATUS_SUCCESS);
    if (st != CUBLAS_STATUS_SUCCESS)
        return -1;
    int bad = 0;
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int l = 0; l < K; l++) {
                    double x = A.h[(size_t)(b * sa) + (ta ? (size_t)l * lda + i : (size_t)i * lda + l)];
                    double y = B.h[(size_t)(b * sb) + (tb ? (size_t)j * ldb + l : (size_t)l * ldb + j)];
                    if (tf32) { /* round to nearest, ties away, 10 mantissa bits */
                        if (x != 0)
                            x = ldexp(round(ldexp(x, 10 - ilogb(x))), ilogb(x) - 10);
                        if (y != 0)
                            y = ldexp(round(ldexp(y, 10 - ilogb(y))), ilogb(y) - 10);
                    }
                    s += x * y;
                    mag += fabs(x * y);
                }
                size_t at = (size_t)(b * sc) + (size_t)i * ldc + j;
                double want = alpha * s + (beta != 0 ? beta * C0.h[at] : 0.0);
                double tol = (K / 8.0 + 8) * 1.2e-7 * (fabs(alpha) * mag + fabs(beta)) + 1e-7;
                bad += !(fabs(C.get(at) - want) <= tol);
            }
        }
        for (int g = M * N; g < sc && b + 1 < batch; g++) /* the gaps between C's untouched */
            bad += !isnan(C.get((size_t)(b * sc + g)));
    }
    return bad;
}

static void test_gemm_batched(void)
{
    cublasHandle_t h = NULL;
    TEST_EQ_INT(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(cublasSetStream(h, (cudaStream_t)NULL), CUBLAS_STATUS_SUCCESS);
    const cudaDataType_t types[2] = {CUDA_R_32F, CUDA_R_16BF};
    for (cudaDataType_t t : types)
        for (int tr = 0; tr < 4; tr++) {
            TEST_EQ_INT(check_batched(h, tr & 1, tr & 2, t, 0.37f, 0.0f, false), 0);
            TEST_EQ_INT(check_batched(h, tr & 1, tr & 2, t, 1.0f, 1.0f, false), 0);
        }
    /* TF32 math rounds fp32 operands (and only then): the TF32 reference matches, and the plain
     * fp32 answer would not */
    TEST_EQ_INT(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(check_batched(h, false, true, CUDA_R_32F, 1.0f, 0.0f, true), 0);
    TEST_CHECK(check_batched(h, false, true, CUDA_R_32F, 1.0f, 0.0f, false) > 0);
    TEST_EQ_INT(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);

    /* errors */
    float x[64] = {0}, one = 1;
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x,
                                           CUDA_R_32F, 3, 16, x, CUDA_R_32F, 4, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 5, &one, x,
                                           CUDA_R_32F, 4, 16, x, CUDA_R_32F, 5, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_INVALID_VALUE); /* op(A) = A^T: lda < k */
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, x,
                                           CUDA_R_32F, 4, 16, x, CUDA_R_32F, 4, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_INVALID_VALUE);
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x,
                                           CUDA_R_16F, 4, 16, x, CUDA_R_16F, 4, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_NOT_SUPPORTED);
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x,
                                           CUDA_R_32F, 4, 16, x, CUDA_R_32F, 4, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_16F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_NOT_SUPPORTED);
    TEST_EQ_INT(cublasGemmStridedBatchedEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x,
                                           CUDA_R_32F, 4, 16, x, CUDA_R_32F, 4, 16, &one, x,
                                           CUDA_R_32F, 4, 16, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_NOT_INITIALIZED);
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, NULL,
                                           CUDA_R_32F, 4, 16, NULL, CUDA_R_32F, 4, 16, &one, NULL,
                                           CUDA_R_32F, 4, 16, 0, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS); /* batch 0: nothing touched */
    TEST_EQ_INT(cublasSetMathMode(h, (cublasMath_t)7), CUBLAS_STATUS_INVALID_VALUE);
    TEST_EQ_INT(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

/* ---- cub::DeviceRadixSort::SortPairs ---- */

template <typename K>
static int check_sort(const std::vector<K> &keys, int begin_bit, int end_bit)
{
    static_assert(sizeof(K) == 4, "32-bit keys");
    const int n = (int)keys.size();
    std::vector<int> vals(n);
    for (int i = 0; i < n; i++)
        vals[i] = i;
    const std::vector<K> keys_copy = keys;
    std::vector<K> kout(n);
    std::vector<int> vout(n, -1);
    size_t bytes = 0;
    TEST_EQ_INT(cub::DeviceRadixSort::SortPairs(NULL, bytes, keys.data(), kout.data(), vals.data(),
                                                vout.data(), n, begin_bit, end_bit),
                cudaSuccess);
    TEST_CHECK(bytes > 0);
    TEST_CHECK(n == 0 || vout[0] == -1); /* the query touches nothing */
    std::vector<char> tmp(bytes);
    size_t short_bytes = bytes - 1;
    TEST_EQ_INT(cub::DeviceRadixSort::SortPairs(tmp.data(), short_bytes, keys.data(), kout.data(),
                                                vals.data(), vout.data(), n, begin_bit, end_bit),
                cudaErrorInvalidValue);
    TEST_EQ_INT(cub::DeviceRadixSort::SortPairs(tmp.data(), bytes, keys.data(), kout.data(),
                                                vals.data(), vout.data(), n, begin_bit, end_bit),
                cudaSuccess);
    /* expected: stable sort by the bits in range of CUB's radix form (sign bit flipped; floats:
     * negatives inverted) */
    auto bits = [&](K k) {
        uint32_t u;
        memcpy(&u, &k, sizeof(u));
        if (std::is_floating_point<K>::value)
            u = (u >> 31) ? ~u : u | 0x80000000u;
        else if (std::is_signed<K>::value)
            u ^= 0x80000000u;
        int w = end_bit - begin_bit;
        return w == 0 ? 0 : (u >> begin_bit) & (w >= 64 ? ~0ull : ((1ull << w) - 1));
    };
    std::vector<int> want(vals);
    std::stable_sort(want.begin(), want.end(),
                     [&](int x, int y) { return bits(keys[x]) < bits(keys[y]); });
    int bad = keys != keys_copy;
    for (int i = 0; i < n; i++)
        bad += vout[i] != want[i] || memcmp(&kout[i], &keys[want[i]], sizeof(K)) != 0;
    if (begin_bit == 0 && end_bit == 32) /* the whole key: ascending values */
        bad += !std::is_sorted(kout.begin(), kout.end());
    return bad;
}

static void test_sort(void)
{
    std::vector<int> small(1000), wide(777), neg(500);
    for (auto &k : small)
        k = (int)urand(0, 50); /* many equal keys: stability shows */
    for (auto &k : wide) /* bits above end_bit set: must be ignored */
        k = (int)urand(0, 100) | ((int)urand(0, 1000) << 12);
    for (auto &k : neg)
        k = (int)urand(-1e6f, 1e6f);
    TEST_EQ_INT(check_sort(small, 0, 6), 0); /* embed.cu: key_bits(R) */
    TEST_EQ_INT(check_sort(small, 0, 32), 0);
    TEST_EQ_INT(check_sort(wide, 0, 7), 0);
    TEST_EQ_INT(check_sort(wide, 3, 12), 0); /* low bits ignored too */
    TEST_EQ_INT(check_sort(neg, 0, 32), 0);  /* negatives first */
    TEST_EQ_INT(check_sort(neg, 5, 5), 0);   /* no bits: input order */
    std::vector<float> fl(300);
    for (auto &k : fl)
        k = urand(-10, 10);
    fl[7] = -0.0f, fl[8] = 0.0f;
    TEST_EQ_INT(check_sort(fl, 0, 32), 0);
    std::vector<unsigned> u(1);
    u[0] = 5;
    TEST_EQ_INT(check_sort(u, 0, 32), 0);
    TEST_EQ_INT(check_sort(std::vector<int>(), 0, 32), 0);
    /* sorted floats really are ascending, -0 before +0 */
    {
        std::vector<float> out(fl.size());
        std::vector<int> v(fl.size()), vo(fl.size());
        size_t bytes = 0;
        cub::DeviceRadixSort::SortPairs(NULL, bytes, fl.data(), out.data(), v.data(), vo.data(),
                                        (int)fl.size());
        std::vector<char> tmp(bytes);
        cub::DeviceRadixSort::SortPairs(tmp.data(), bytes, fl.data(), out.data(), v.data(),
                                        vo.data(), (int)fl.size());
        TEST_CHECK(std::is_sorted(out.begin(), out.end()));
    }
    /* bad bit ranges */
    size_t bytes = 0;
    int k = 0, v = 0;
    TEST_EQ_INT(cub::DeviceRadixSort::SortPairs(NULL, bytes, &k, &k, &v, &v, 1, 0, 33),
                cudaErrorInvalidValue);
    TEST_EQ_INT(cub::DeviceRadixSort::SortPairs(NULL, bytes, &k, &k, &v, &v, 1, 9, 8),
                cudaErrorInvalidValue);
}

/* Memory outside the "device" allocation aborts, as a GPU would fault. */
static void test_device_range(void)
{
    std::vector<float> dev(3 * 64, 1.0f), host(64, 1.0f);
    cublasHandle_t h = NULL;
    cublasCreate(&h);
    const float one = 1, zero = 0;
    for (int outside = 0; outside < 2; outside++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            dev_lo = (const char *)dev.data();
            dev_len = dev.size() * sizeof(float);
            const float *b = outside ? host.data() : dev.data() + 64;
            cublasStatus_t st = cublasGemmStridedBatchedEx(
                h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, dev.data(), CUDA_R_32F, 8, 0, b,
                CUDA_R_32F, 8, 0, &zero, dev.data() + 128, CUDA_R_32F, 8, 0, 1,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            _exit(st == CUBLAS_STATUS_SUCCESS ? 0 : 2);
        }
        int status = 0;
        TEST_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        if (outside)
            TEST_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
        else
            TEST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    cublasDestroy(h);
}

/* Several candidates (as a caller that times them asks): the first and k split into 2 and 3
 * slices; each gives the product within fp32 rounding of a double reference, the split ones
 * summed in another order (not the first's bits everywhere); an index past them is refused. */
static void test_lt_candidates(void)
{
    const int M = 8, N = 8, K = 37; /* k not a multiple of the slices */
    const float one = 1, zero = 0;
    std::vector<float> a(K * M), b(K * N), d[3];
    uint64_t s = 7;
    auto next = [&s]() { /* uniform in [-0.5, 0.5) */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)(s >> 40) / (1 << 24) - 0.5f;
    };
    for (auto &x : a)
        x = next();
    for (auto &x : b)
        x = next();
    lt_fixture f(CUDA_R_32F, CUDA_R_32F, M, N, K, K, K, M);
    cublasLtMatmulHeuristicResult_t h[8];
    int found = -1;
    TEST_EQ_INT(cublasLtMatmulAlgoGetHeuristic(lt_handle, f.op, f.la, f.lb, f.ld, f.ld, f.pref, 8,
                                               h, &found),
                CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(found, 3);
    TEST_EQ_INT(cublasLtMatmulAlgoGetHeuristic(lt_handle, f.op, f.la, f.lb, f.ld, f.ld, f.pref, 2,
                                               h, &found),
                CUBLAS_STATUS_SUCCESS);
    TEST_EQ_INT(found, 2);
    TEST_EQ_INT(cublasLtMatmulAlgoGetHeuristic(lt_handle, f.op, f.la, f.lb, f.ld, f.ld, f.pref, 8,
                                               h, &found),
                CUBLAS_STATUS_SUCCESS);
    int bad = 0, differ = 0;
    for (int c = 0; c < 3; c++) {
        TEST_EQ_INT(h[c].state, CUBLAS_STATUS_SUCCESS);
        d[c].assign(M * N, NAN);
        TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                                   d[c].data(), f.ld, d[c].data(), f.ld, &h[c].algo, NULL, 0, 0),
                    CUBLAS_STATUS_SUCCESS);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ref = 0, mag = 0;
                for (int l = 0; l < K; l++) {
                    double p = (double)a[i * K + l] * b[j * K + l];
                    ref += p, mag += fabs(p);
                }
                bad += !(fabs(d[c][i + j * M] - ref) <= 1e-6 * mag + 1e-7);
                differ += c > 0 && d[c][i + j * M] != d[0][i + j * M];
            }
    }
    TEST_CHECK(bad == 0);
    TEST_CHECK(differ > 0);
    cublasLtMatmulAlgo_t past = h[2].algo;
    past.data[3]++;
    TEST_EQ_INT(cublasLtMatmul(lt_handle, f.op, &one, a.data(), f.la, b.data(), f.lb, &zero,
                               d[0].data(), f.ld, d[0].data(), f.ld, &past, NULL, 0, 0),
                CUBLAS_STATUS_INVALID_VALUE);
}

int main(void)
{
    TEST_EQ_INT(cublasLtCreate(&lt_handle), CUBLAS_STATUS_SUCCESS);
    TEST_RUN(test_lt_fp32);
    TEST_RUN(test_lt_bf16);
    TEST_RUN(test_lt_errors);
    TEST_RUN(test_lt_candidates);
    TEST_RUN(test_gemm_batched);
    TEST_RUN(test_sort);
    TEST_RUN(test_device_range);
    TEST_EQ_INT(cublasLtDestroy(lt_handle), CUBLAS_STATUS_SUCCESS);
    return test_summary();
}
