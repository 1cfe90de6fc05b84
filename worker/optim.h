/*
 * optim.h - AdamW with decoupled weight decay, the learning-rate schedule, gradient clipping.
 *
 * Semantics are PyTorch's (torch.optim.AdamW, clip_grad_norm_), checked by worker/model_test.c
 * against hack/torch_ref.py:
 *   p <- p * (1 - lr * wd)          (only tensors with model_tensor.decay: matrices, embeddings)
 *   m <- b1 m + (1 - b1) g ; v <- b2 v + (1 - b2) g^2
 *   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * Schedule for optimizer step s (0-based): linear warmup lr * (s + 1) / warmup for s < warmup,
 * then cosine (or linear) decay from lr to lr * min_lr_ratio at s = total_steps.
 * The moment buffers are one contiguous allocation each, laid out like the model's parameters,
 * so a checkpoint can save them as two tensors.
 */
#ifndef GANTRY_OPTIM_H
#define GANTRY_OPTIM_H

#include <stddef.h>

#include "worker/model.h"

enum optim_decay { OPTIM_COSINE = 0, OPTIM_LINEAR = 1, OPTIM_CONSTANT = 2 };

struct optim_config {
    float lr;            /* peak learning rate (already scaled by world size, if wanted) */
    float beta1, beta2, eps;
    float weight_decay;  /* decoupled, applied to tensors with decay = true */
    float grad_clip;     /* max global L2 norm; 0 = no clipping */
    int warmup_steps;
    long total_steps;    /* optimizer steps in the run, for the decay */
    float min_lr_ratio;  /* final lr = lr * min_lr_ratio */
    enum optim_decay decay;
};

struct adamw {
    float *m, *v; /* first and second moments, n floats each */
    size_t n;
    long t; /* steps taken */
};

/* The defaults: lr 3e-4, betas (0.9, 0.999), eps 1e-8, wd 0.01, clip 1.0, warmup 0, cosine. */
void optim_config_default(struct optim_config *c);

void adamw_init(struct adamw *o, size_t n);
void adamw_cleanup(struct adamw *o);

/* Learning rate for optimizer step `step` (0-based). */
float optim_lr(const struct optim_config *c, long step);

/* L2 norm of grads (n floats, summed in double). */
float optim_grad_norm(const float *grads, size_t n);

/* Scales grads so their global norm is at most max_norm (PyTorch: coef = max / (norm + 1e-6),
 * applied when < 1). Returns the norm before clipping. max_norm <= 0: no clipping. */
float optim_clip_grad_norm(float *grads, size_t n, float max_norm);

/* One AdamW update of m's parameters from m's gradients, at learning rate lr
 * (kernels/adamw.h's adamw_update_cpu over m's tensors). */
void adamw_step(struct adamw *o, struct model *m, const struct optim_config *c, float lr);

/* optim_clip_grad_norm(m->grads, .., c->grad_clip) then adamw_step, bit for bit, in one pass
 * fewer over the gradients: the clip coefficient scales each gradient as AdamW reads it, and
 * m->grads is left UNSCALED. Returns the norm before clipping. */
float adamw_clip_step(struct adamw *o, struct model *m, const struct optim_config *c, float lr);

#endif /* GANTRY_OPTIM_H */
