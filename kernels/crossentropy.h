/*
 * crossentropy.h - softmax cross-entropy over K classes, forward and backward.
 *
 * logits (B,K), labels (B) in [0,K). The forward writes probs (B,K) (softmax, kept for the
 * backward) and losses (B) = -sum_k q[k] log probs[b, k] against the target distribution
 * q = (1 - smoothing) onehot(labels[b]) + smoothing / K (label smoothing, PyTorch's
 * cross_entropy(label_smoothing=)); with smoothing 0, -log probs[b, labels[b]]. With weights (K
 * floats, NULL: none) each example's loss is multiplied by weights[labels[b]] (class weights as
 * Keras' class_weight: a mean over the batch then counts examples, not weights). Computed from
 * the log-sum-exp so a large logit cannot overflow. The backward accumulates
 * dlogits += weights[labels[b]] (probs - q) * scale: scale is d(total loss)/d(loss_b), e.g.
 * 1/(B * accumulation steps) for a mean over the batch. On the GPU, weights is device memory.
 */
#ifndef GANTRY_CROSSENTROPY_H
#define GANTRY_CROSSENTROPY_H

#ifdef __cplusplus
extern "C" {
#endif

void crossentropy_forward_cpu(float *losses, float *probs, const float *logits, const int *labels,
                              float smoothing, const float *weights, int B, int K);
void crossentropy_backward_cpu(float *dlogits, const float *probs, const int *labels,
                               float smoothing, const float *weights, float scale, int B, int K);

/*
 * Sigmoid binary cross-entropy over K independent classes (multi-label classification; PyTorch's
 * BCEWithLogitsLoss, mean reduction): targets (B, words) are bit sets, bit k % 32 of word k / 32
 * of row b set when class k applies to example b (words >= ceil(K / 32)). The forward writes
 * probs (B,K) = sigmoid(logits) and losses (B) = mean over k of
 *   max(z, 0) - z y + log(1 + exp(-|z|))
 * (finite for any z). The backward accumulates dlogits += (probs - y) * scale / K.
 */
void bce_forward_cpu(float *losses, float *probs, const float *logits, const int *targets,
                     int words, int B, int K);
void bce_backward_cpu(float *dlogits, const float *probs, const int *targets, int words,
                      float scale, int B, int K);
/* Whether class k is set in a row of bit-set targets (host and device code). */
#if defined(__CUDACC__)
#define BCE_HD static __host__ __device__ __forceinline__
#else
#define BCE_HD static inline
#endif
BCE_HD int bce_target(const int *row, int k)
{
    return (int)(((unsigned)row[k >> 5] >> (k & 31)) & 1u);
}

/*
 * Squared error of one output per example (regression; PyTorch's MSELoss, mean reduction):
 * targets (B) floats. The forward writes losses (B) = (z - y)^2 and, for symmetry with the
 * classifiers, preds (B) = z; the backward accumulates dlogits += 2 (z - y) * scale.
 */
void mse_forward_cpu(float *losses, float *preds, const float *logits, const float *targets,
                     int B);
void mse_backward_cpu(float *dlogits, const float *logits, const float *targets, float scale,
                      int B);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_CROSSENTROPY_H */
