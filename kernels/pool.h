/*
 * pool.h - sequence pooling for classification: masked mean and CLS (first token), forward and
 * backward.
 *
 * inp (B,T,C), len (B) real tokens per sequence (1 <= len[b] <= T), out (B,C) overwritten.
 * Mean pooling averages rows t < len[b] (padding does not count); CLS pooling takes row 0 (the
 * tokenizer puts [CLS] there). Backward passes accumulate into dinp.
 */
#ifndef GANTRY_POOL_H
#define GANTRY_POOL_H

#ifdef __cplusplus
extern "C" {
#endif

void meanpool_forward_cpu(float *out, const float *inp, const int *len, int B, int T, int C);
void meanpool_backward_cpu(float *dinp, const float *dout, const int *len, int B, int T, int C);
void clspool_forward_cpu(float *out, const float *inp, int B, int T, int C);
void clspool_backward_cpu(float *dinp, const float *dout, int B, int T, int C);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_POOL_H */
