/*
 * library_types.h (gantry CUDA emulator) - the data type enum shared by cuBLAS and cuBLASLt, with
 * the values of CUDA's own header (a value logged by a GPU build means the same type here).
 * Only what kernels/emu/blas.cc understands is listed; the emulated GEMMs take fp32 and bf16
 * (see kernels/emu/include/cublas_v2.h).
 */
#ifndef GANTRY_EMU_LIBRARY_TYPES_H
#define GANTRY_EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_C_32F = 4,
    CUDA_C_64F = 5,
    CUDA_C_16F = 6,
    CUDA_R_8U = 8,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14,
    CUDA_C_16BF = 15,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

#endif /* GANTRY_EMU_LIBRARY_TYPES_H */
