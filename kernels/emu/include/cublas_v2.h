/*
 * cublas_v2.h (gantry CUDA emulator) - the part of cuBLAS that Gantry uses (kernels/attention.cu,
 * kernels/gpu_runtime.cu), computed on the CPU by kernels/emu/blas.cc. Names, types, enum values
 * and column-major conventions are the real header's, so the .cu files compile unchanged.
 *
 * cublasGemmStridedBatchedEx: C_i = alpha op(A_i) op(B_i) + beta C_i for i < batchCount, X_i at
 * X + i * strideX (elements), column-major, op = N or T (C is T for real types). Compute type
 * CUBLAS_COMPUTE_32F (alpha, beta: const float *); (A, B, C) types (32F, 32F, 32F),
 * (16BF, 16BF, 32F) or (16BF, 16BF, 16BF); anything else is CUBLAS_STATUS_NOT_SUPPORTED (fp16 is
 * real cuBLAS's but not emulated). Products and sums in fp32 (blas.cc says in what order); fp32
 * operands are rounded to TF32 first under CUBLAS_TF32_TENSOR_OP_MATH or
 * CUBLAS_COMPUTE_32F_FAST_TF32, as the tensor cores would. With beta == 0, C is not read (NaN
 * there does not propagate), as in cuBLAS. Bad arguments (ld < rows, negative sizes, bad op)
 * return CUBLAS_STATUS_INVALID_VALUE; a NULL handle CUBLAS_STATUS_NOT_INITIALIZED.
 * Synchronous: the stream only has to be valid. Under the emulator's runtime
 * (kernels/emu/runtime.cc) every matrix the call touches must lie in one device allocation; a
 * GEMM that would read or write outside one aborts with a message, where the GPU would fault.
 *
 * Handles are heap objects owned by the caller (cublasCreate / cublasDestroy); calls on one
 * handle from several threads at once are not supported (nor are they in cuBLAS).
 */
#ifndef GANTRY_EMU_CUBLAS_V2_H
#define GANTRY_EMU_CUBLAS_V2_H

#include <stdint.h>

#include "cuda_runtime.h"
#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
    CUBLAS_POINTER_MODE_HOST = 0,
    CUBLAS_POINTER_MODE_DEVICE = 1,
} cublasPointerMode_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1, /* deprecated in cuBLAS 11: same as DEFAULT */
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DFALT = -1,
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_GEMM_ALGO0 = 0,
    CUBLAS_GEMM_ALGO23 = 23,
    CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
    CUBLAS_GEMM_DFALT_TENSOR_OP = 99,
    CUBLAS_GEMM_ALGO0_TENSOR_OP = 100,
    CUBLAS_GEMM_ALGO15_TENSOR_OP = 115,
} cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream);
/* The handle's workspace (device memory of that many bytes), until the next cublasSetStream,
 * which resets it to the library's own, as cuBLAS does. */
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode);
const char *cublasGetStatusName(cublasStatus_t status);
const char *cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_EMU_CUBLAS_V2_H */
