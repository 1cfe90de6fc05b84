/*
 * attention.h - multi-head self-attention (bidirectional, with a padding mask), forward and
 * backward.
 *
 * Input qkv (B,T,3C) is the output of the QKV projection, packed [q | k | v] along the last
 * dimension, each C = NH * hs wide with head h in columns [h*hs, (h+1)*hs). len (B) is the number
 * of real tokens of each sequence (1 <= len[b] <= T); positions >= len[b] are padding. A query
 * attends to the keys j < len[b] with softmax(q.k / sqrt(hs)), as
 * torch.nn.functional.scaled_dot_product_attention with a key padding mask does.
 *
 * Padding queries: their output rows are set to zero instead of being computed. Nothing reads them
 * (keys/values and pooling skip padding), so logits, loss and gradients are the same as when they
 * are computed, and the O(T^2) work is spent only on real tokens.
 *
 * out (B,T,C) is overwritten; att (B,NH,T,T) receives the attention probabilities (zero outside
 * the valid L x L block) and is kept for the backward. The backward accumulates into dqkv.
 * Work is split over (b, h) pairs with OpenMP; each pair writes a disjoint slice, so the results
 * do not depend on the thread count.
 */
#ifndef GANTRY_ATTENTION_H
#define GANTRY_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

void attention_forward_cpu(float *out, float *att, const float *qkv, const int *len, int B, int T,
                           int C, int NH);
void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const int *len, int B, int T, int C, int NH);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_ATTENTION_H */
