/*
 * model_gpu.h - the Transformer classifier of worker/model.h on one GPU (kernels/gpu.h), for the
 * training loop (worker/train_gpu.h) and bench/gpu_bench.
 *
 * Layout: parameters, gradients and the AdamW moments are single fp32 device buffers laid out by
 * the host model's tensor table (struct model: same offsets, same n_params), so a checkpoint is
 * the same host tensors whatever the device: model_gpu_download() copies parameters and moments
 * device -> host (to save, to evaluate on the CPU), model_gpu_upload() host -> device (at start
 * and to resume). Activations are sized for (max_batch, max_seq_len) at model_gpu_new(); each
 * micro-batch uses the front of them, laid out for its own (B, T).
 *
 * The call sequence is worker/model.c's (forward, backward with loss_scale, clipping by global
 * norm, AdamW with per-tensor weight decay): gpu_bench --check-cpu and train_gpu_test compare the
 * two step by step. Everything is enqueued on one stream (model_gpu_stream) without host
 * synchronisation, except model_gpu_batch() (it waits until the upload of the batch before the
 * previous one has left its pinned staging slot), model_gpu_sync() and the read functions.
 *
 * Statistics on the device: after the gradient buffer's n_params floats come two more,
 * [sum of per-example losses, examples], filled by every model_gpu_forward() with labels and
 * zeroed by model_gpu_zero_grad(); an all-reduce over n_params + 2 floats therefore sums the step's
 * loss across ranks with the gradients. model_gpu_end_step() adds sum / examples (the step's mean
 * loss) to an accumulator that model_gpu_read_stats() reads and clears once per log interval.
 *
 * bf16 (model_gpu_new(bf16 = 1)): GEMM operands and the attention's batched GEMMs in bf16 with
 * fp32 accumulation and fp32 master weights; activations stay fp32 (docs/gpu.md).
 * CUDA errors are fatal (kernels/cuda_common.h: message with a hint, exit 1, retryable).
 * Not thread-safe; one model_gpu per process (one process per GPU).
 */
#ifndef GANTRY_MODEL_GPU_H
#define GANTRY_MODEL_GPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* model.h and optim.h have no C++ guards of their own */
#endif

#include "worker/model.h"
#include "worker/optim.h"

struct model_gpu; /* opaque */
struct CUstream_st;

/* CUDA devices visible to this process (0 when none or no driver). */
int model_gpu_device_count(void);

/* Device state for m's configuration (MODEL_TRANSFORMER only) with activations for up to
 * max_batch sequences of m->cfg.max_seq_len tokens. The parameters are uploaded from m->params,
 * the moments start at zero. m is borrowed (its tensor table) until model_gpu_free(). NULL with
 * err set when the configuration is not supported on the GPU. */
struct model_gpu *model_gpu_new(const struct model *m, int max_batch, int bf16, char *err,
                                size_t errlen);
/* NULL is a no-op. */
void model_gpu_free(struct model_gpu *g);

/* Host -> device: params (n_params floats); am, av (AdamW moments) or NULL for zeros. Waits. */
void model_gpu_upload(struct model_gpu *g, const float *params, const float *am, const float *av);
/* Device -> host: any of params, am, av may be NULL. Waits. */
void model_gpu_download(struct model_gpu *g, float *params, float *am, float *av);

/* Uploads one micro-batch (as model_forward's arguments; labels may be NULL) for the next
 * forward/backward. B <= max_batch, T <= max_seq_len. The host arrays may be reused at return. */
void model_gpu_batch(struct model_gpu *g, const int *tokens, const int *len, const int *labels,
                     int B, int T);
/* Zeroes the gradients and the loss statistics. */
void model_gpu_zero_grad(struct model_gpu *g);
/* Forward of the last batch: per-example losses (with labels) added to the statistics. */
void model_gpu_forward(struct model_gpu *g);
/* Backward of the last forward (which had labels): grads += d(loss_scale * sum of losses). */
void model_gpu_backward(struct model_gpu *g, float loss_scale);
/* The gradient buffer (device): n_params floats, then the 2 statistics floats. */
float *model_gpu_grads(struct model_gpu *g);
/* grads[0..n_params) *= s (after a sum over ranks). */
void model_gpu_scale_grads(struct model_gpu *g, float s);
/* Clip by global norm (c->grad_clip) and one AdamW step at lr; t = the step number after
 * increment (1 first), as struct adamw's t. The norm before clipping stays on the device. */
void model_gpu_step(struct model_gpu *g, const struct optim_config *c, float lr, long t);
/* Adds this step's mean loss (statistics sum / examples) to the accumulator. */
void model_gpu_end_step(struct model_gpu *g);
/* Waits for the stream; returns and clears the accumulated step losses' sum, and the last grad
 * norm computed by model_gpu_step (NULL to skip either). */
void model_gpu_read_stats(struct model_gpu *g, double *loss_sum, float *grad_norm);
/* Mean of the last forward's per-example losses (waits). */
float model_gpu_last_loss(struct model_gpu *g);
/* Waits until everything enqueued so far is done. */
void model_gpu_sync(struct model_gpu *g);
struct CUstream_st *model_gpu_stream(struct model_gpu *g);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_MODEL_GPU_H */
