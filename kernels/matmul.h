/*
 * matmul.h - the fully connected layer (GEMM through BLAS) and bias add, forward and backward.
 *
 * Weights are stored as PyTorch's nn.Linear stores them, (OC, C) row-major, so
 * out (N,OC) = inp (N,C) @ weight^T + bias (OC). The GEMMs go to cblas_sgemm (OpenBLAS here,
 * single-threaded, cuBLASLt in the CUDA twin); the CPU functions split them over OpenMP threads
 * themselves (rows of the output; the weight gradient in fixed blocks of 2048 rows of N summed
 * in block order), so results do not depend on the thread count. Called from inside an OpenMP
 * parallel region (worker/model.c's per-sequence loops) they run on the calling thread alone
 * (nested regions are inactive). Backward passes accumulate: dinp += dout @ weight,
 * dweight += dout^T @ inp, dbias += column sums of dout; any of dinp, dbias may be NULL to skip it.
 */
#ifndef GANTRY_MATMUL_H
#define GANTRY_MATMUL_H

#ifdef __cplusplus
extern "C" {
#endif

/* out = inp @ weight^T (+ bias when bias is not NULL). out is overwritten. */
void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC);
/* out = gelu(inp @ weight^T + bias) (gelu.h's tanh GELU) and pre = inp @ weight^T + bias, kept for
 * the backward: matmul_forward_cpu then gelu_forward_cpu, bit for bit, with the GELU applied to
 * each block of rows while it is in cache. The CUDA twin (kernels/gpu.h) uses cuBLASLt's
 * GELU_AUX_BIAS epilogue and needs OC % 8 == 0; bias may be NULL here. */
void matmul_forward_gelu_cpu(float *out, float *pre, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC);
/* out = res + inp @ weight^T + bias (bias may be NULL): the projection and the residual
 * connection in one pass (res (N,OC), and bias, fill each block of out's rows, then the GEMM adds
 * into it). res and out must not overlap. The backward is matmul_backward_cpu with dout = d(out)
 * (and d(out) flows to res unchanged). Rounding: (res + bias) + product, where matmul_forward_cpu
 * + residual_forward_cpu give res + (bias + product). */
void matmul_forward_residual_cpu(float *out, const float *res, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC);
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC);

/* The backward with dinp OVERWRITTEN (no clearing pass, no read of old values):
 *   dinp = (dout @ weight) * gelu'(pre)   when pre (N,C) is not NULL: the layer whose input was
 *                                         inp = gelu(pre), through the GELU in one pass;
 *   dinp = dout @ weight                  when pre is NULL.
 * dweight and dbias (may be NULL) accumulate as in matmul_backward_cpu. Equal, bit for bit, to
 * clearing dinp and calling matmul_backward_cpu (then gelu_backward_cpu into a cleared buffer). */
void matmul_backward_gelu_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *pre, const float *weight, int N,
                              int C, int OC);

/* out (N,OC) += bias (OC) on every row; dbias += column sums of dout. */
void bias_forward_cpu(float *out, const float *bias, int N, int OC);
void bias_backward_cpu(float *dbias, const float *dout, int N, int OC);

/* out = a + b, elementwise over n (the residual connection; its backward is a copy). */
void residual_forward_cpu(float *out, const float *a, const float *b, long n);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_MATMUL_H */
