/*
 * embed.h - token + position embedding lookup, forward and backward.
 *
 * out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Shapes: tokens (B,T) ids in [0,V), wte (V,C),
 * wpe (maxT,C) with T <= maxT, out (B,T,C). The backward accumulates (dwte += ..., dwpe += ...)
 * and walks the tokens in order (two tokens may share an id); threads split the columns, so the
 * sums do not depend on the thread count.
 * Ids are not checked here: the data pipeline maps unknown words to [UNK] before the model runs.
 * The CUDA launchers will take the same arguments plus a stream.
 */
#ifndef GANTRY_EMBED_H
#define GANTRY_EMBED_H

#ifdef __cplusplus
extern "C" {
#endif

void embed_forward_cpu(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                       int T, int C);
void embed_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C);

/*
 * Mean of rows of a table (PyTorch's EmbeddingBag(mode="mean")): out[b,:] = mean over
 * i < count[b] of table[ids[b,i],:]. ids (B,M), count (B) with 0 <= count[b] <= M (a bag of
 * 0 ids gives a zero row), table (R,D), out (B,D). The backward accumulates into dtable.
 */
void embbag_forward_cpu(float *out, const int *ids, const int *count, const float *table, int B,
                        int M, int D);
void embbag_backward_cpu(float *dtable, const float *dout, const int *ids, const int *count, int B,
                         int M, int D);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_EMBED_H */
