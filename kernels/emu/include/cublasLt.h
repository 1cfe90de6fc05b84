/*
 * cublasLt.h (gantry CUDA emulator) - the part of cuBLASLt that kernels/matmul.cu uses, computed on
 * the CPU by kernels/emu/blas.cc, with the real header's names, types and enum values.
 *
 * cublasLtMatmul: D = epilogue(alpha op(A) op(B) + beta C), column-major layouts
 * (cublasLtMatrixLayoutCreate: type, rows, cols, ld; one matrix, CUBLASLT_ORDER_COL), compute type
 * CUBLAS_COMPUTE_32F (or _FAST_TF32) with scale type CUDA_R_32F (alpha, beta: host floats).
 * A and B of one type, fp32 or bf16; C and D of one type: fp32, or bf16 with bf16 A/B. With
 * beta == 0, C is not read. Epilogues, applied in fp32 before D is rounded to its type:
 *   DEFAULT; BIAS (+ bias[row], bias of D's type, length rows of D); RELU, RELU_BIAS;
 *   GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS: GELU is the tanh form
 *   0.5 x (1 + tanhf(0.7978845608 (x + 0.044715 x^3))); the AUX ones also store the GELU input
 *   (after the bias) to EPILOGUE_AUX_POINTER, of D's type, column-major with EPILOGUE_AUX_LD
 *   (>= rows of D, a multiple of 8 as cuBLASLt documents); DGELU: D = (alpha op(A) op(B) +
 *   beta C) * gelu'(aux), the derivative of that GELU at the aux matrix (an input here: the
 *   pre-activation GELU_AUX stored, D's type and the same layout rules).
 * Others (bias gradients, ReLU bit masks) return CUBLAS_STATUS_NOT_SUPPORTED.
 *
 * cublasLtMatmulAlgoGetHeuristic models what cuBLASLt can run: it returns up to
 * requestedAlgoCount algorithms (3 at most: the first sums k in one pass, the others split k
 * into 2 or 3 slices added in order, as split-K kernels do, so their results differ from the
 * first's by rounding; GANTRY_EMU_LT_SLOW_ALGO=i makes candidate i take 20 ms longer, for tests
 * of code that times them), or
 * CUBLAS_STATUS_NOT_SUPPORTED with *returnAlgoCount = 0 when there is none: bf16 matrices need
 * 16-byte aligned pointers (from the preference's MIN_ALIGNMENT_*_BYTES, default 256) and leading
 * dimensions (ld a multiple of 8), a GELU aux buffer an ld multiple of 8 and 16-byte alignment;
 * fp32 runs at any alignment. The algorithm remembers the alignment it was chosen for, and
 * cublasLtMatmul with that algorithm on less aligned pointers or leading dimensions returns
 * CUBLAS_STATUS_NOT_SUPPORTED (on the GPU: a misaligned-address fault or an error). A NULL algo
 * makes cublasLtMatmul choose one from the actual pointers. Inconsistent shapes (op(A) cols !=
 * op(B) rows, C or D not op(A) rows x op(B) cols, ld < rows), NULL matrices or a BIAS epilogue
 * without a bias pointer return CUBLAS_STATUS_INVALID_VALUE; types it cannot combine
 * CUBLAS_STATUS_NOT_SUPPORTED. Attribute setters check the value's size like the real ones.
 *
 * Descriptors, layouts and preferences are heap objects owned by the caller (Create / Destroy).
 * Synchronous; device-range checks as in cublas_v2.h.
 */
#ifndef GANTRY_EMU_CUBLASLT_H
#define GANTRY_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;

/* Semi-opaque, copyable (as in cuBLASLt). */
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 2 | 4,
    CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 2 | 128 | 4,
    CUBLASLT_EPILOGUE_DRELU = 8 | 128,
    CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 16 | 128,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 16 | 64 | 128,
    CUBLASLT_EPILOGUE_BGRADA = 256,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_POINTER_MODE_HOST = 0,
    CUBLASLT_POINTER_MODE_DEVICE = 1,
} cublasLtPointerMode_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,       /* int32_t, read-only after Create */
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,         /* int32_t (cudaDataType) */
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,       /* int32_t: HOST only here */
    CUBLASLT_MATMUL_DESC_TRANSA = 3,             /* int32_t (cublasOperation_t) */
    CUBLASLT_MATMUL_DESC_TRANSB = 4,             /* int32_t */
    CUBLASLT_MATMUL_DESC_TRANSC = 5,             /* int32_t: CUBLAS_OP_N only */
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,           /* uint32_t (cublasLtEpilogue_t) */
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,       /* const void * */
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10, /* int64_t */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,      /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,           /* int64_t */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13, /* int64_t */
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,            /* int32_t: -1 (default) = D's type */
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,         /* uint32_t */
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, /* uint64_t, default 0 */
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t, default 256 */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
    CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9, /* float */
    CUBLASLT_MATMUL_PREF_IMPL_MASK = 12,      /* uint64_t */
} cublasLtMatmulPreferenceAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t sizeInBytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_EMU_CUBLASLT_H */
