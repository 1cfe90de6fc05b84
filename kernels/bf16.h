/*
 * bf16.h - bf16 mixed precision (training.precision: bf16, worker/model_gpu.cu).
 *
 * 1. The fp32 <-> bf16 conversion as __host__ __device__ inline helpers: one definition for the
 *    kernels and for CPU code and tests, so rounding is checked on the CPU (train_gpu_test.c's
 *    test_bf16_rounding, every build) and the same bits come out on the device
 *    (worker/model_gpu_gpu_test.cu compares them with the hardware's cvt.rn.bf16.f32).
 *    Round to nearest, ties to even; +-inf stay; finite values past bf16's largest round to inf;
 *    subnormals round like any other value (no flush to zero); every NaN becomes 0x7FFF, the
 *    canonical NaN that cvt.rn.bf16.f32 and __float2bfloat16_rn return.
 *
 * 2. Launchers of the mixed-precision variants (CUDA builds only; device pointers, asynchronous
 *    on the stream like every launcher in gpu.h). bf16 is used where it is safe: GEMM operands
 *    (weights' bf16 copy, the saved GEMM inputs: LayerNorm and GELU outputs, the attention
 *    output), with fp32 accumulation; LayerNorm statistics, the residual stream, GEMM outputs,
 *    softmax, loss, gradients and the optimizer stay fp32.
 *      matmul_forward_mixed:  out (fp32) = inp (bf16) @ weight (bf16)^T + bias (fp32, may be NULL)
 *      matmul_backward_mixed: dinp (fp32, may be NULL) += dout16 @ weight; dweight (fp32) +=
 *                             dout16^T @ inp; dbias (fp32, may be NULL) += column sums of the
 *                             fp32 dout (dout16 is dout rounded to bf16, the GEMMs' operand)
 *      layernorm_forward_bf16: layernorm_forward with the normalised output rounded to bf16
 *                              (mean, rstd fp32, as the fp32 backward needs them)
 *      gelu_forward_bf16:      gelu_forward of a bf16 input, the output rounded to bf16
 *    and fused variants that save whole passes over activations in the bf16 training step
 *    (worker/model_gpu.cu), each equal to a sequence of the launchers above:
 *      matmul_forward_mixed_residual: out = res + (inp @ weight^T + bias), the residual add in
 *                             the GEMM's epilogue (beta = 1 with C = res): no separate GEMM output
 *                             and residual kernel (out must not overlap res)
 *      matmul_backward_mixed_set: matmul_backward_mixed with dinp overwritten (=) instead of
 *                             accumulated: no clearing pass before it, and the GEMM does not read
 *                             dinp
 *      matmul_forward_bf16_gelu: pre = inp @ weight^T + bias and out = gelu(pre), both bf16
 *                             (bias bf16, may be NULL), GELU in the GEMM's epilogue
 *                             (cuBLASLt GELU_AUX_BIAS: out is the GELU of the fp32 sum, pre its
 *                             rounding, saved for the backward): no fp32 pre-activation and no
 *                             GELU pass (where cuBLASLt has no such algorithm: the GEMM, then
 *                             gelu_forward_bf16 of the rounded pre)
 *      matmul_backward_mixed_set_bf16: matmul_backward_mixed_set with dinp written in bf16 (the
 *                             fp32 sums rounded once), for an input gradient whose only reader
 *                             takes bf16 (the fused attention's dO, the GELU backward's dout)
 *      gelu_backward_bf16:     for (N, OC) dout and inp (the pre-activation), both bf16,
 *                             d = dout * gelu'(inp) in fp32: dinp16 = d rounded to bf16
 *                             (overwritten: the GEMM backward's operand) and dbias += d's column
 *                             sums (the bias gradient of the GEMM whose output the GELU took,
 *                             from the fp32 d in matmul_backward_mixed's order), in one pass: no
 *                             fp32 d is stored (was a clear, gelu_backward, a cast and a
 *                             column-sum pass)
 *      matmul_backward_mixed_dgelu_bf16: the backward of out = gelu(pre) @ weight^T + bias
 *                             (inp = gelu(pre), bf16) through the GELU in one GEMM, cuBLASLt's
 *                             DGELU epilogue: dweight, dbias as matmul_backward_mixed, dpre16 =
 *                             (dout16 @ weight) * gelu'(pre) rounded once to bf16 (overwritten)
 *                             and dpre_bias += its column sums (of the bf16 values: the fp32
 *                             products are gone). Returns 0; or -1, having written nothing, when
 *                             cuBLASLt has no such algorithm (C % 8, pre not 16-byte aligned, or
 *                             the library's choice): then matmul_backward_mixed_set_bf16 and
 *                             gelu_backward_bf16 compute the same (dpre16 rounded twice).
 *                             dpre16 must not overlap dout16 (the GEMMs read it while it is
 *                             written)
 *      layernorm_backward_bf16: layernorm_backward, and dinp16 = the accumulated dinp rounded to
 *                             bf16 (the next GEMM's operand) in the same pass instead of a cast
 *      layernorm_backward_bf16_sum: layernorm_backward_bf16, and dsum (C, may be NULL) += the
 *                             column sums of the accumulated dinp: the bias gradient of the GEMM
 *                             whose output gradient dinp is (the projections before a residual
 *                             add), from the same partials as dweight and dbias instead of a
 *                             column-sum pass over dinp (the GEMM backward then gets dbias NULL)
 *      layernorm_backward_bf16_d16: layernorm_backward_bf16_sum with dout in bf16 (dout16, as
 *                             matmul_backward_mixed_set_bf16 writes it: the bf16 step's LayerNorm
 *                             input gradient, as under PyTorch's autocast), read into fp32; the
 *                             rest (statistics, dinp, sums) fp32 as there
 *    GEMM dimensions (C, OC) must be multiples of 8 and the bf16 operands 16-byte aligned
 *    (cuBLASLt's bf16 alignment; cudaMalloc's 256-byte alignment plus offsets of whole rows
 *    of 8 elements keep both).
 */
#ifndef GANTRY_BF16_H
#define GANTRY_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define BF16_HD static __host__ __device__ __forceinline__
#else
#define BF16_HD static inline
#endif

#define BF16_NAN 0x7fffu /* the canonical NaN */

/* The bits of an fp32 value, and back. */
BF16_HD uint32_t bf16_asuint(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

BF16_HD float bf16_asfloat(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* fp32 -> bf16 bits, round to nearest even (adding 0x7FFF plus the lowest kept bit carries
 * into the kept bits exactly when the dropped half is above the midpoint, or at it with an odd
 * kept part); NaN -> BF16_NAN. */
BF16_HD uint16_t bf16_from_f32(float f)
{
    uint32_t u = bf16_asuint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)BF16_NAN;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 bits -> fp32: exact. */
BF16_HD float bf16_to_f32(uint16_t h)
{
    return bf16_asfloat((uint32_t)h << 16);
}

/* f rounded to bf16 precision, as fp32 (what a value looks like after a bf16 round trip). */
BF16_HD float bf16_round(float f)
{
    return bf16_to_f32(bf16_from_f32(f));
}

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

void matmul_forward_mixed(float *out, const uint16_t *inp, const uint16_t *weight,
                          const float *bias, int N, int C, int OC, struct CUstream_st *stream);
void matmul_backward_mixed(float *dinp, float *dweight, float *dbias, const float *dout,
                           const uint16_t *dout16, const uint16_t *inp, const uint16_t *weight,
                           int N, int C, int OC, struct CUstream_st *stream);
void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int N, int C,
                            struct CUstream_st *stream);
void gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n,
                       struct CUstream_st *stream);
void matmul_forward_mixed_residual(float *out, const float *res, const uint16_t *inp,
                                   const uint16_t *weight, const float *bias, int N, int C, int OC,
                                   struct CUstream_st *stream);
void matmul_forward_bf16_gelu(uint16_t *out, uint16_t *pre, const uint16_t *inp,
                              const uint16_t *weight, const uint16_t *bias, int N, int C, int OC,
                              struct CUstream_st *stream);
void matmul_backward_mixed_set(float *dinp, float *dweight, float *dbias, const float *dout,
                               const uint16_t *dout16, const uint16_t *inp, const uint16_t *weight,
                               int N, int C, int OC, struct CUstream_st *stream);
void matmul_backward_mixed_set_bf16(uint16_t *dinp16, float *dweight, float *dbias,
                                    const float *dout, const uint16_t *dout16, const uint16_t *inp,
                                    const uint16_t *weight, int N, int C, int OC,
                                    struct CUstream_st *stream);
void gelu_backward_bf16(uint16_t *dinp16, float *dbias, const uint16_t *inp,
                        const uint16_t *dout, int N, int OC, struct CUstream_st *stream);
int matmul_backward_mixed_dgelu_bf16(uint16_t *dpre16, float *dpre_bias, float *dweight,
                                     float *dbias, const float *dout, const uint16_t *dout16,
                                     const uint16_t *inp, const uint16_t *pre,
                                     const uint16_t *weight, int N, int C, int OC,
                                     struct CUstream_st *stream);
void layernorm_backward_bf16(float *dinp, uint16_t *dinp16, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C,
                             struct CUstream_st *stream);
void layernorm_backward_bf16_sum(float *dinp, uint16_t *dinp16, float *dweight, float *dbias,
                                 float *dsum, const float *dout, const float *inp,
                                 const float *weight, const float *mean, const float *rstd, int N,
                                 int C, struct CUstream_st *stream);
void layernorm_backward_bf16_d16(float *dinp, uint16_t *dinp16, float *dweight, float *dbias,
                                 float *dsum, const uint16_t *dout16, const float *inp,
                                 const float *weight, const float *mean, const float *rstd, int N,
                                 int C, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_BF16_H */
