// The cuBLAS / cuBLASLt subset of the CUDA emulator (kernels/emu/include/cublas_v2.h, cublasLt.h),
// computed on the CPU, and the device-range check that the emulated CUB sort shares.
//
// Precision: what a GPU GEMM with fp32 accumulation does, not better. Operands are converted to
// fp32 exactly (bf16 -> fp32 is exact; fp32 -> TF32 rounds to nearest, ties away, where TF32 math
// is asked for), products and sums are fp32, and each dot product is split over 8 partial sums
// (element l goes to sum l % 8, summed in order) that are then added as a fixed tree, like the
// k-slices of a GPU kernel. Deterministic, and no more accurate than the GPU: a test tolerance
// that passes here was not given slack by a double-precision reference. alpha * dot + beta * C,
// the bias and the activation are fp32 too; D (and the aux output) are rounded to their type last
// (bf16: round to nearest even, kernels/bf16.h).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cub/device/device_radix_sort.cuh>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <new>
#include <thread>
#include <vector>

#include "kernels/bf16.h"

/* Defined by the emulator's runtime (kernels/emu/runtime.cc) when it is linked in; without it
 * (this library's own test) memory is not checked. */
#pragma weak emu_is_device_range

extern "C" void emu_blas_require_device(const char *who, const void *p, size_t bytes)
{
    if (bytes == 0)
        return;
    if (p == NULL || (emu_is_device_range && !emu_is_device_range(p, bytes))) {
        fprintf(stderr,
                "gantry CUDA emulator: %s: %zu bytes at %p are not inside one device allocation "
                "(on a GPU: an illegal memory access)\n",
                who, bytes, p);
        abort();
    }
}

struct cublasContext {
    uint32_t magic;
    cudaStream_t stream;
    cublasMath_t math;
    void *workspace; /* cublasSetWorkspace's, until the next cublasSetStream (not used: the */
    size_t workspace_bytes; /* emulated GEMMs need none; kept to check the call) */
};

struct cublasLtContext {
    uint32_t magic;
};

struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute;
    int32_t scale, pointer_mode, ta, tb, tc, bias_type;
    uint32_t epi;
    const void *bias;
    void *aux;
    int64_t aux_ld, bias_stride, aux_stride;
};

struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct cublasLtMatmulPreferenceOpaque_t {
    uint32_t search, reduction_mask, align[4];
    uint64_t max_ws, impl_mask;
    float max_waves;
};

namespace {

const uint32_t BLAS_MAGIC = 0x62736c61u, LT_MAGIC = 0x4c746c61u;
const uint64_t ALGO_MAGIC = 0x67616e7472794c74ull; /* "gantryLt" */
const int EMU_LT_ALGOS = 3; /* candidates the heuristic offers: k in 1, 2 or 3 slices */

size_t elsize(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0;
}

inline float load(const void *p, cudaDataType_t t, size_t i)
{
    return t == CUDA_R_32F ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}

inline void store(void *p, cudaDataType_t t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = bf16_from_f32(v);
}

/* fp32 -> TF32 (10 mantissa bits), round to nearest, ties away from zero; inf/NaN unchanged. */
inline float to_tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* Bytes a column-major rows x cols matrix with leading dimension ld spans. */
size_t span(int64_t rows, int64_t cols, int64_t ld, size_t es)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * es;
}

/* Largest power of two <= 256 dividing the address (NULL: 256). */
uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 1 && (uintptr_t)p % al)
        al >>= 1;
    return al;
}

/* One operand as stored: column-major, of type t, leading dimension ld, transposed by op. */
struct operand {
    const void *p;
    cudaDataType_t t;
    int64_t ld;
    bool trans;
};

struct gemm_args {
    int64_t m, n, k;
    float alpha, beta;
    operand a, b;
    const void *c;
    cudaDataType_t ct;
    int64_t ldc;
    void *d;
    cudaDataType_t dt;
    int64_t ldd;
    bool bias_epi, relu, gelu, aux_epi, dgelu; /* aux_epi: GELU_AUX stores aux; dgelu reads it */
    const void *bias;
    cudaDataType_t bias_t;
    void *aux;
    int64_t ldaux;
    bool tf32;
    int ksplit; /* the algorithm's split of k: 1, or that many slices summed in order (split-K) */
};

/* out[x * k + l] = element (x, l) of the k-contiguous view: src[l + x ld] when the stored matrix
 * already runs along k (contig), else src[x + l ld]. */
void pack(std::vector<float> &out, const operand &o, int64_t X, int64_t k, bool contig, bool tf32)
{
    out.resize((size_t)X * (size_t)k);
    for (int64_t x = 0; x < X; x++) {
        float *dst = out.data() + (size_t)x * (size_t)k;
        for (int64_t l = 0; l < k; l++) {
            size_t i = contig ? (size_t)(l + x * o.ld) : (size_t)(x + l * o.ld);
            float v = load(o.p, o.t, i);
            dst[l] = tf32 ? to_tf32(v) : v;
        }
    }
}

/* fp32 dot product in 8 partial sums (lane l % 8), then a fixed tree. Reads only run_gemm's own
 * packed copies (the caller's memory is read, with the sanitizers' checks, by pack()), so the hot
 * loop goes uninstrumented: the ASan build's GEMMs would otherwise run ~30x slower. */
__attribute__((no_sanitize("address", "undefined"))) inline float dot(const float *a, const float *b, int64_t k)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t l = 0;
    for (; l + 8 <= k; l += 8)
        for (int q = 0; q < 8; q++)
            s[q] += a[l + q] * b[l + q];
    for (int q = 0; l < k; l++, q++)
        s[q] += a[l] * b[l];
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

inline float gelu_tanh(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* d gelu_tanh(x) / dx (the DGELU epilogue's factor) */
inline float gelu_tanh_grad(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* D = epilogue(alpha op(A) op(B) + beta C); A and B are read only when alpha != 0 and k > 0,
 * C only when beta != 0. Scratch vectors are reused across calls (batches). */
void run_gemm(const gemm_args &g, std::vector<float> &pa, std::vector<float> &pb)
{
    const bool products = g.alpha != 0.0f && g.k > 0;
    if (products) {
        pack(pa, g.a, g.m, g.k, g.a.trans, g.tf32);  /* pa[i][l] = op(A)(i, l) */
        pack(pb, g.b, g.n, g.k, !g.b.trans, g.tf32); /* pb[j][l] = op(B)(l, j) */
    }
    const int64_t IB = 16; /* rows of pa kept hot while all of pb streams past */
    for (int64_t i0 = 0; i0 < g.m; i0 += IB) {
        const int64_t i1 = g.m - i0 < IB ? g.m : i0 + IB;
        for (int64_t j = 0; j < g.n; j++) {
            const float *bj = products ? pb.data() + (size_t)j * (size_t)g.k : NULL;
            for (int64_t i = i0; i < i1; i++) {
                float acc = 0.0f;
                if (products) { /* slices of k as a split-K kernel sums them: one after another */
                    const float *ai = pa.data() + (size_t)i * (size_t)g.k;
                    const int64_t ks = g.ksplit > 1 ? g.ksplit : 1;
                    for (int64_t s = 0; s < ks; s++) {
                        const int64_t lo = g.k * s / ks, hi = g.k * (s + 1) / ks;
                        acc += dot(ai + lo, bj + lo, hi - lo);
                    }
                }
                float v = g.alpha * acc;
                if (g.beta != 0.0f)
                    v += g.beta * load(g.c, g.ct, (size_t)(i + j * g.ldc));
                if (g.bias_epi)
                    v += load(g.bias, g.bias_t, (size_t)i);
                if (g.aux_epi)
                    store(g.aux, g.dt, (size_t)(i + j * g.ldaux), v);
                if (g.dgelu)
                    v *= gelu_tanh_grad(load(g.aux, g.dt, (size_t)(i + j * g.ldaux)));
                else if (g.gelu)
                    v = gelu_tanh(v);
                else if (g.relu)
                    v = v > 0.0f ? v : 0.0f;
                store(g.d, g.dt, (size_t)(i + j * g.ldd), v);
            }
        }
    }
}

bool valid_op(int op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; /* C = T for reals */
}

/* (A/B type, C/D type) pairs the emulated fp32-compute GEMMs take. */
bool types_ok(cudaDataType_t ab, cudaDataType_t cd)
{
    return (ab == CUDA_R_32F && cd == CUDA_R_32F) ||
           (ab == CUDA_R_16BF && (cd == CUDA_R_32F || cd == CUDA_R_16BF));
}

int64_t max1(int64_t a)
{
    return a > 1 ? a : 1;
}

} // namespace

/* ---- cuBLAS ---- */

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (handle == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasContext *h = new (std::nothrow) cublasContext;
    if (h == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = BLAS_MAGIC;
    h->stream = NULL;
    h->workspace = NULL, h->workspace_bytes = 0;
    h->math = CUBLAS_DEFAULT_MATH;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    handle->workspace = NULL, handle->workspace_bytes = 0; /* back to the library's own */
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((bytes && workspace == NULL) || (uintptr_t)workspace % 256)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (bytes && emu_is_device_range && !emu_is_device_range(workspace, bytes)) {
        fprintf(stderr, "gantry CUDA emulator: cublasSetWorkspace(%p, %zu): not inside one device "
                        "allocation\n", workspace, bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->workspace = workspace, handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (stream == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return cublasGetStatusName(status);
    }
}

extern "C" cublasStatus_t
cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const void *alpha,
                           const void *A, cudaDataType Atype, int lda, long long int strideA,
                           const void *B, cudaDataType Btype, int ldb, long long int strideB,
                           const void *beta, void *C, cudaDataType Ctype, int ldc,
                           long long int strideC, int batchCount, cublasComputeType_t computeType,
                           cublasGemmAlgo_t algo)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batchCount < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < max1(ta ? k : m) || ldb < max1(tb ? n : k) || ldc < max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC &&
        computeType != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (Atype != Btype || !types_ok(Atype, Ctype))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (alpha == NULL || beta == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batchCount == 0)
        return CUBLAS_STATUS_SUCCESS;

    const int math = (int)handle->math & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    gemm_args g;
    memset(&g, 0, sizeof(g));
    g.m = m, g.n = n, g.k = k;
    g.alpha = *(const float *)alpha;
    g.beta = *(const float *)beta;
    g.tf32 = Atype == CUDA_R_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC &&
             (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 || math == CUBLAS_TF32_TENSOR_OP_MATH);
    g.ct = g.dt = Ctype;
    g.ldc = g.ldd = ldc;
    const size_t es = elsize(Atype), cs = elsize(Ctype);
    const bool products = g.alpha != 0.0f && k > 0;
    std::vector<gemm_args> batch;
    for (int i = 0; i < batchCount; i++) {
        g.a = operand{(const char *)A + (ptrdiff_t)(i * strideA) * (ptrdiff_t)es, Atype, lda, ta};
        g.b = operand{(const char *)B + (ptrdiff_t)(i * strideB) * (ptrdiff_t)es, Btype, ldb, tb};
        g.d = (char *)C + (ptrdiff_t)(i * strideC) * (ptrdiff_t)cs;
        g.c = g.d;
        if (products) {
            emu_blas_require_device("cublasGemmStridedBatchedEx A", g.a.p,
                                    span(ta ? k : m, ta ? m : k, lda, es));
            emu_blas_require_device("cublasGemmStridedBatchedEx B", g.b.p,
                                    span(tb ? n : k, tb ? k : n, ldb, es));
        }
        emu_blas_require_device("cublasGemmStridedBatchedEx C", g.d, span(m, n, ldc, cs));
        batch.push_back(g);
    }
    /* checked at the call, computed in stream order (later in the emulator's deferred mode) */
    emu_on_stream(handle->stream, [batch]() {
        std::vector<float> pa, pb;
        for (const gemm_args &x : batch)
            run_gemm(x, pa, pb);
    });
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ---- */

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (handle == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtContext *h = new (std::nothrow) cublasLtContext;
    if (h == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = LT_MAGIC;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (handle == NULL || handle->magic != LT_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                                   cublasComputeType_t computeType,
                                                   cudaDataType_t scaleType)
{
    if (desc == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDescOpaque_t *d = new (std::nothrow) cublasLtMatmulDescOpaque_t;
    if (d == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    memset(d, 0, sizeof(*d));
    d->compute = computeType;
    d->scale = scaleType;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->ta = d->tb = d->tc = CUBLAS_OP_N;
    d->bias_type = -1; /* D's type */
    d->epi = CUBLASLT_EPILOGUE_DEFAULT;
    *desc = d;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                         cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t sizeInBytes)
{
    if (desc == NULL || buf == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *dst = NULL;
    size_t want = 0;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: dst = &desc->compute, want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: dst = &desc->scale, want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: dst = &desc->pointer_mode, want = 4; break;
    case CUBLASLT_MATMUL_DESC_TRANSA: dst = &desc->ta, want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: dst = &desc->tb, want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSC: dst = &desc->tc, want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: dst = &desc->epi, want = sizeof(uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: dst = &desc->bias, want = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: dst = &desc->bias_stride, want = 8; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: dst = &desc->aux, want = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: dst = &desc->aux_ld, want = sizeof(int64_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: dst = &desc->aux_stride, want = 8; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: dst = &desc->bias_type, want = 4; break;
    }
    if (dst == NULL || sizeInBytes != want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                                     cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld)
{
    if (layout == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t *l = new (std::nothrow) cublasLtMatrixLayoutOpaque_t;
    if (l == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *layout = l;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (pref == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreferenceOpaque_t *p = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t;
    if (p == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < 4; i++)
        p->align[i] = 256; /* cuBLASLt's default assumption */
    p->reduction_mask = 0x7;
    p->impl_mask = ~0ull;
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                     size_t sizeInBytes)
{
    if (pref == NULL || buf == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *dst = NULL;
    size_t want = 0;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: dst = &pref->search, want = 4; break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: dst = &pref->max_ws, want = 8; break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: dst = &pref->reduction_mask, want = 4; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: dst = &pref->align[0], want = 4; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: dst = &pref->align[1], want = 4; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: dst = &pref->align[2], want = 4; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: dst = &pref->align[3], want = 4; break;
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: dst = &pref->max_waves, want = 4; break;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: dst = &pref->impl_mask, want = 8; break;
    }
    if (dst == NULL || sizeInBytes != want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

namespace {

/* A validated cublasLtMatmul problem. */
struct lt_problem {
    int64_t m, n, k;
    cudaDataType_t ab, cd, bias_t;
    bool ta, tb, bias, relu, gelu, aux, dgelu, tf32;
    int64_t ld[4]; /* A B C D */
};

cublasStatus_t lt_validate(const cublasLtMatmulDescOpaque_t *op, const cublasLtMatrixLayoutOpaque_t *A,
                           const cublasLtMatrixLayoutOpaque_t *B, const cublasLtMatrixLayoutOpaque_t *C,
                           const cublasLtMatrixLayoutOpaque_t *D, lt_problem *pr)
{
    if (op == NULL || A == NULL || B == NULL || C == NULL || D == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!valid_op(op->ta) || !valid_op(op->tb) || !valid_op(op->tc))
        return CUBLAS_STATUS_INVALID_VALUE;
    pr->ta = op->ta != CUBLAS_OP_N;
    pr->tb = op->tb != CUBLAS_OP_N;
    const uint64_t m = D->rows, n = D->cols;
    const uint64_t am = pr->ta ? A->cols : A->rows, ak = pr->ta ? A->rows : A->cols;
    const uint64_t bk = pr->tb ? B->cols : B->rows, bn = pr->tb ? B->rows : B->cols;
    if (am != m || bn != n || ak != bk || C->rows != m || C->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    const cublasLtMatrixLayoutOpaque_t *L[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        if (L[i]->ld < 1 || (uint64_t)L[i]->ld < L[i]->rows)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (L[i]->rows > INT32_MAX || L[i]->cols > INT32_MAX)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        pr->ld[i] = L[i]->ld;
    }
    pr->m = (int64_t)m, pr->n = (int64_t)n, pr->k = (int64_t)ak;

    const uint32_t epi = op->epi;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_BIAS &&
        epi != CUBLASLT_EPILOGUE_RELU && epi != CUBLASLT_EPILOGUE_RELU_BIAS &&
        epi != CUBLASLT_EPILOGUE_GELU && epi != CUBLASLT_EPILOGUE_GELU_BIAS &&
        epi != CUBLASLT_EPILOGUE_GELU_AUX && epi != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
        epi != CUBLASLT_EPILOGUE_DGELU)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    pr->bias = epi != CUBLASLT_EPILOGUE_DEFAULT && (epi & CUBLASLT_EPILOGUE_BIAS);
    pr->relu = epi != CUBLASLT_EPILOGUE_DEFAULT && (epi & CUBLASLT_EPILOGUE_RELU);
    pr->dgelu = epi == CUBLASLT_EPILOGUE_DGELU;
    pr->gelu = (epi & CUBLASLT_EPILOGUE_GELU) != 0;
    pr->aux = (epi & 128) != 0; /* GELU_AUX*: written; DGELU: read */
    if (pr->bias && op->bias == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (pr->aux && (op->aux == NULL || op->aux_ld < (int64_t)max1((int64_t)m)))
        return CUBLAS_STATUS_INVALID_VALUE;

    if (op->compute != CUBLAS_COMPUTE_32F && op->compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
        op->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (op->scale != CUDA_R_32F || op->tc != CUBLAS_OP_N ||
        (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
         op->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (A->type != B->type || C->type != D->type || !types_ok(A->type, D->type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    pr->ab = A->type;
    pr->cd = D->type;
    pr->bias_t = op->bias_type == -1 ? D->type : (cudaDataType_t)op->bias_type;
    if (pr->bias && pr->bias_t != D->type && pr->bias_t != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (pr->aux && op->aux_ld % 8 != 0) /* "must be divisible by 8" */
        return CUBLAS_STATUS_NOT_SUPPORTED;
    pr->tf32 = pr->ab == CUDA_R_32F && op->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_STATUS_SUCCESS;
}

/* Alignment (bytes) the emulated kernel needs for a matrix of type t and leading dimension ld
 * whose pointer is assumed `al`-aligned: 16 (vector loads) when both allow it; fp32 otherwise
 * falls back to a 4-byte kernel, bf16 has none (0). */
uint32_t need_align(cudaDataType_t t, uint32_t al, int64_t ld)
{
    const size_t es = elsize(t);
    if (al >= 16 && (ld * (int64_t)es) % 16 == 0)
        return 16;
    if (t == CUDA_R_32F && al >= 4)
        return 4;
    return 0;
}

/* The algorithm for a validated problem whose A B C D pointers are al[]-aligned. */
cublasStatus_t lt_choose(const lt_problem &pr, const cublasLtMatmulDescOpaque_t *op,
                         const uint32_t al[4], cublasLtMatmulAlgo_t *algo)
{
    const cudaDataType_t t[4] = {pr.ab, pr.ab, pr.cd, pr.cd};
    uint64_t need = 0;
    for (int i = 0; i < 4; i++) {
        uint32_t n = need_align(t[i], al[i], pr.ld[i]);
        if (n == 0)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        need |= (uint64_t)n << (8 * i);
    }
    if (pr.bias && (uintptr_t)op->bias % elsize(pr.bias_t) != 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (pr.aux) {
        if (align_of(op->aux) < 16)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        need |= (uint64_t)16 << 32;
    }
    memset(algo, 0, sizeof(*algo));
    algo->data[0] = ALGO_MAGIC;
    algo->data[1] = (uint64_t)pr.ab | (uint64_t)pr.cd << 8 | (uint64_t)op->epi << 32;
    algo->data[2] = need;
    return CUBLAS_STATUS_SUCCESS;
}

/* Whether the pointers and leading dimensions meet what algo was chosen for. */
bool lt_algo_fits(const lt_problem &pr, const cublasLtMatmulDescOpaque_t *op,
                  const void *const ptr[4], const cublasLtMatmulAlgo_t *algo)
{
    const cudaDataType_t t[4] = {pr.ab, pr.ab, pr.cd, pr.cd};
    for (int i = 0; i < 4; i++) {
        uint32_t n = (uint32_t)(algo->data[2] >> (8 * i)) & 0xffu;
        if (n == 0 || align_of(ptr[i]) < n || (pr.ld[i] * (int64_t)elsize(t[i])) % n != 0)
            return false;
    }
    if (pr.aux && align_of(op->aux) < ((algo->data[2] >> 32) & 0xffu))
        return false;
    return true;
}

} // namespace

extern "C" cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc,
                               cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                               cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                               cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                               cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                               int *returnAlgoCount)
{
    if (handle == NULL || handle->magic != LT_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (preference == NULL || requestedAlgoCount < 1 || heuristicResultsArray == NULL ||
        returnAlgoCount == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    lt_problem pr;
    cublasStatus_t st = lt_validate(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &pr);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    uint32_t al[4];
    for (int i = 0; i < 4; i++)
        al[i] = align_of((const void *)(uintptr_t)(preference->align[i] ? preference->align[i] : 1));
    cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[0];
    memset(r, 0, sizeof(*r));
    st = lt_choose(pr, operationDesc, al, &r->algo);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    r->workspaceSize = 0;
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
    /* the same kernel splitting k into 2, 3, ... slices: what cuBLASLt's later candidates often
     * are, the same products summed in another order */
    int n = requestedAlgoCount < EMU_LT_ALGOS ? requestedAlgoCount : EMU_LT_ALGOS;
    for (int i = 1; i < n; i++) {
        heuristicResultsArray[i] = *r;
        heuristicResultsArray[i].algo.data[3] = (uint64_t)i;
    }
    *returnAlgoCount = n;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle,
                                         cublasLtMatmulDesc_t computeDesc, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                         cublasLtMatrixLayout_t Bdesc, const void *beta,
                                         const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                         cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace,
                                         size_t workspaceSizeInBytes, cudaStream_t stream)
{
    if (lightHandle == NULL || lightHandle->magic != LT_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lt_problem pr;
    cublasStatus_t st = lt_validate(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &pr);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (alpha == NULL || beta == NULL)
        return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const bool products = al != 0.0f && pr.k > 0;
    if (D == NULL || (pr.m > 0 && pr.n > 0 && ((products && (A == NULL || B == NULL)) ||
                                              (be != 0.0f && C == NULL))))
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *ptr[4] = {A, B, C, D};
    cublasLtMatmulAlgo_t chosen;
    if (algo == NULL) { /* implicit heuristic on the actual pointers */
        uint32_t a4[4];
        for (int i = 0; i < 4; i++)
            a4[i] = align_of(ptr[i]);
        st = lt_choose(pr, computeDesc, a4, &chosen);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
        algo = &chosen;
    } else {
        if (algo->data[0] != ALGO_MAGIC ||
            algo->data[1] != ((uint64_t)pr.ab | (uint64_t)pr.cd << 8 |
                              (uint64_t)computeDesc->epi << 32) ||
            algo->data[3] >= EMU_LT_ALGOS)
            return CUBLAS_STATUS_INVALID_VALUE; /* not an algorithm for this operation */
        if (!lt_algo_fits(pr, computeDesc, ptr, algo))
            return CUBLAS_STATUS_NOT_SUPPORTED; /* chosen for stricter alignment */
    }
    (void)workspace, (void)workspaceSizeInBytes; /* the algorithms need none */
    if (pr.m == 0 || pr.n == 0)
        return CUBLAS_STATUS_SUCCESS;

    const size_t es = elsize(pr.ab), ds = elsize(pr.cd);
    if (products) {
        emu_blas_require_device("cublasLtMatmul A", A,
                                span(Adesc->rows, Adesc->cols, pr.ld[0], es));
        emu_blas_require_device("cublasLtMatmul B", B,
                                span(Bdesc->rows, Bdesc->cols, pr.ld[1], es));
    }
    if (be != 0.0f)
        emu_blas_require_device("cublasLtMatmul C", C, span(pr.m, pr.n, pr.ld[2], ds));
    emu_blas_require_device("cublasLtMatmul D", D, span(pr.m, pr.n, pr.ld[3], ds));
    if (pr.bias)
        emu_blas_require_device("cublasLtMatmul bias", computeDesc->bias,
                                (size_t)pr.m * elsize(pr.bias_t));
    if (pr.aux)
        emu_blas_require_device("cublasLtMatmul aux", computeDesc->aux,
                                span(pr.m, pr.n, computeDesc->aux_ld, ds));

    gemm_args g;
    memset(&g, 0, sizeof(g));
    g.m = pr.m, g.n = pr.n, g.k = pr.k;
    g.alpha = al, g.beta = be;
    g.a = operand{A, pr.ab, pr.ld[0], pr.ta};
    g.b = operand{B, pr.ab, pr.ld[1], pr.tb};
    g.c = C, g.ct = pr.cd, g.ldc = pr.ld[2];
    g.d = D, g.dt = pr.cd, g.ldd = pr.ld[3];
    g.bias_epi = pr.bias, g.relu = pr.relu, g.gelu = pr.gelu;
    g.aux_epi = pr.aux && !pr.dgelu, g.dgelu = pr.dgelu;
    g.bias = computeDesc->bias, g.bias_t = pr.bias_t;
    g.aux = computeDesc->aux, g.ldaux = computeDesc->aux_ld;
    g.tf32 = pr.tf32;
    g.ksplit = (int)algo->data[3] + 1;
    /* GANTRY_EMU_LT_SLOW_ALGO=i: candidate i takes 20 ms longer, for tests of a tune's timing */
    const char *slow = getenv("GANTRY_EMU_LT_SLOW_ALGO");
    const bool stall = slow && *slow && (uint64_t)atoi(slow) == algo->data[3];
    emu_on_stream(stream, [g, stall]() {
        std::vector<float> pa, pb;
        run_gemm(g, pa, pb);
        if (stall)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
    return CUBLAS_STATUS_SUCCESS;
}
