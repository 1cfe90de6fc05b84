/*
 * adamw.h - one AdamW update over a parameter buffer cut into tensors (worker/optim.h's
 * semantics: PyTorch's torch.optim.AdamW with decoupled weight decay), CPU side.
 *
 * For every element i of segment s, with g = grads[i] * *gscale (grads[i] when gscale is NULL):
 *   m <- b1 m + (1 - b1) g ; v <- b2 v + (1 - b2) g^2
 *   p <- p * (1 - lr * wd if s.decay else 1)
 *        - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * t is the step number after increment (1 for the first step). grads is only read: the clip
 * coefficient goes in through gscale, so clipping costs no extra pass over the gradients.
 * Each element is independent, so the result does not depend on the thread count.
 * The CUDA twin is adamw_update in kernels/gpu.h (same arguments plus params_bf16 and a stream;
 * there gscale is a device pointer).
 */
#ifndef GANTRY_ADAMW_H
#define GANTRY_ADAMW_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ADAMW_GPU_MAX_SEGMENTS 32

/* One tensor of the parameter buffer: [offset, offset + count) floats, decay as model_tensor. */
struct adamw_segment {
    size_t offset, count;
    int decay;
};

void adamw_update_cpu(float *params, const float *grads, float *m, float *v,
                      const struct adamw_segment *segs, int nseg, float lr, float beta1,
                      float beta2, float eps, float weight_decay, long t, const float *gscale);

/* Sum of squares of x[0..n) in double (the gradient norm's square), in a fixed order (chunk
 * partials summed in chunk order): the same bits on any thread count. */
double sumsq_cpu(const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_ADAMW_H */
