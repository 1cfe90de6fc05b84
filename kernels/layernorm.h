/*
 * layernorm.h - layer normalisation over the last dimension, forward and backward.
 *
 * out = (inp - mean) * rstd * weight + bias, with rstd = 1/sqrt(var + LAYERNORM_EPS) and the
 * biased variance, as torch.nn.LayerNorm(C, eps=1e-5) computes it. Shapes: inp/out (N,C),
 * weight/bias (C), mean/rstd (N) saved by the forward for the backward. The backward accumulates
 * into dinp, dweight and dbias. Rows are independent, so both directions split rows over OpenMP
 * threads; dweight/dbias are summed per thread then added in a fixed order (deterministic for a
 * given thread count).
 */
#ifndef GANTRY_LAYERNORM_H
#define GANTRY_LAYERNORM_H

#ifdef __cplusplus
extern "C" {
#endif

#define LAYERNORM_EPS 1e-5f

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C);
void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_LAYERNORM_H */
