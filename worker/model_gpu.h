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
 * The task is the host model's when model_gpu_new() runs: with m->label_words > 0 (multi-label)
 * batches carry (B, label_words) bit-set labels and the loss is the sigmoid binary cross-entropy;
 * with MODEL_TARGETS_REAL (regression) one float per example and the squared error.
 *
 * Statistics on the device: after the gradient buffer's n_params floats come MODEL_GPU_STATS
 * more, [sum of per-example losses, examples, stop votes], the first two filled by every
 * model_gpu_forward() with labels, the third by model_gpu_vote_stop(), all zeroed by
 * model_gpu_zero_grad(); an all-reduce over n_params + MODEL_GPU_STATS floats therefore sums the
 * step's loss and votes across ranks with the gradients. model_gpu_end_step() adds sum /
 * examples (the step's mean loss) to an accumulator that model_gpu_read_stats() reads and clears
 * once per log interval, and the votes to one model_gpu_read_votes() reads.
 *
 * bf16 (model_gpu_new(bf16 = 1), training.precision: bf16): mixed precision with fp32 master
 * weights. GEMM operands in bf16 (the weights' copy that the AdamW kernel refreshes, and the GEMM
 * inputs saved for the backward: LayerNorm, attention and GELU outputs, kept in bf16 only), fp32
 * accumulation; the residual stream, LayerNorm statistics, GEMM outputs, softmax, loss, every
 * gradient and AdamW stay fp32 (kernels/bf16.h, docs/gpu.md). Needs hidden and ffn % 8 == 0.
 * CUDA errors are fatal (kernels/cuda_common.h: message with a hint, exit 1, retryable).
 * Not thread-safe; one model_gpu per process (one process per GPU).
 */
#ifndef GANTRY_MODEL_GPU_H
#define GANTRY_MODEL_GPU_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" { /* model.h and optim.h have no C++ guards of their own */
#endif

#include "worker/model.h"
#include "worker/optim.h"

#define MODEL_GPU_STATS 3 /* statistics floats after the gradients: loss sum, examples, votes */

struct model_gpu; /* opaque */
struct CUstream_st;

/* CUDA devices visible to this process (0 when none or no driver). */
int model_gpu_device_count(void);

/* model_gpu_new() flags */
#define MODEL_GPU_BF16 1u /* bf16 mixed precision (above); without it fp32 */
/* attention_*_fused (kernels/gpu.h): no (B,NH,T,T) probabilities kept per layer, a log-sum-exp
 * per row instead (training.attention: fused); head size <= ATTENTION_FUSED_MAX_HS */
#define MODEL_GPU_FUSED_ATTENTION 2u
/* CUDA graphs (training.cudaGraphs): each forward and (unarmed) backward shape is captured once,
 * its second time, and replayed with one launch afterwards; the results are the eager ones bit
 * for bit. Up to 16 shapes (B, T, labels; the backward's loss_scale) are kept, the least recently
 * used evicted. Changing the loss settings (model_gpu_loss) drops them. */
#define MODEL_GPU_GRAPHS 4u
/* bf16 only: the MLP projection's input gradient times GELU'(pre-activation) in that GEMM's
 * cuBLASLt DGELU epilogue instead of a GELU backward pass (matmul_backward_mixed_dgelu_bf16;
 * where cuBLASLt has no such algorithm, the pass). Off by default until a GPU run has measured
 * it (gpu_bench --dgelu-epilogue beside the default, docs/gpu.md). */
#define MODEL_GPU_DGELU_EPILOGUE 8u
/* bf16 with the fused attention only: its backward stores dS^T and takes dQ from it in one
 * product a tile (attention_backward_fused_bf16_ds) instead of recomputing S and dP in a second
 * kernel; scratch of attention_backward_ds_bytes(max_batch, T, heads) (201 MB at B 8, T 1024,
 * 12 heads), refused past 4 GiB with a note on stderr (the default then). Off by default until a
 * GPU run has measured it (gpu_bench --attention-ds beside the default, docs/gpu.md). */
#define MODEL_GPU_ATTENTION_DS 16u
/* bf16 with the fused attention only: its forward and backward on Hopper's wgmma
 * (attention_forward_fused_bf16_wgmma, attention_backward_fused_bf16_wgmma: head size 33 to 64,
 * the sm_90a build on an H100/H200; elsewhere the mma.sync kernels, with a note on stderr).
 * Combines with MODEL_GPU_ATTENTION_DS. Off by default until a GPU run has measured it
 * (gpu_bench --attention-wgmma beside the default, docs/gpu.md). */
#define MODEL_GPU_ATTENTION_WGMMA 32u
/* bf16 with the fused attention only: cuDNN's fused attention forward and backward
 * (attention_cudnn.cpp; cuDNN opened at run time), where it is loaded and has a plan for the
 * shape; else, call by call, ours, with a note on stderr. Overrides MODEL_GPU_ATTENTION_DS and
 * _WGMMA. For gpu_bench --attention-cudnn's check against the CPU; training reaches cuDNN
 * through MODEL_GPU_TUNE. */
#define MODEL_GPU_ATTENTION_CUDNN 128u
/* bf16 only: kernels picked on this GPU at this shape (kernels/tune.cu), like cuDNN's benchmark
 * mode: with the fused attention its forward and backward (tune_attention: every variant above
 * that can run here), and the GELU backward's pass or DGELU epilogue (tune_dgelu); each run on
 * random inputs of (max_batch, max_seq_len), checked against the default kernels' results and
 * timed (only the forms hack/gpu-check.sh has run on a GPU, unless GANTRY_AUTOTUNE_UNVERIFIED=1:
 * kernels/tune.cu); the fastest that agrees is taken, the default unless another is 3 % faster.
 * A line on stderr says what was timed and taken (once per process and shape).
 * MODEL_GPU_ATTENTION_DS, _WGMMA, _CUDNN and MODEL_GPU_DGELU_EPILOGUE are then ignored.
 * training.autotune (true by default).
 * Kept per process, so ranks on different GPUs may pick differently; their results agree within
 * rounding, and the all-reduced gradients keep the replicas identical. */
#define MODEL_GPU_TUNE 64u

/* Device state for m's configuration (the Transformer, or MODEL_NGRAM: the bags of n-grams are
 * built on the host by model_gpu_batch, their mean, the head and the loss on the device; fp32,
 * no MODEL_GPU_BF16 or MODEL_GPU_FUSED_ATTENTION) with activations for up to
 * max_batch sequences of m->cfg.max_seq_len tokens. The parameters are uploaded from m->params,
 * the moments start at zero. m is borrowed (its tensor table) until model_gpu_free(). NULL with
 * err set when the configuration is not supported on the GPU. flags: MODEL_GPU_*, or 0. */
struct model_gpu *model_gpu_new(const struct model *m, int max_batch, unsigned flags, char *err,
                                size_t errlen);
/* NULL is a no-op. */
void model_gpu_free(struct model_gpu *g);
/* The kernels in use: the bf16 fused attention's (ATTN_FWD_*, ATTN_BWD_*, kernels/gpu.h; the
 * default ones without bf16 and the fused attention) and whether the GELU backward is in the GEMM's
 * DGELU epilogue (1) or its own pass (0). */
void model_gpu_kernels(const struct model_gpu *g, int *attn_fwd, int *attn_bwd, int *dgelu);

/* Host -> device: params (n_params floats); am, av (AdamW moments) or NULL for zeros. Waits. */
void model_gpu_upload(struct model_gpu *g, const float *params, const float *am, const float *av);
/* Device -> host: any of params, am, av may be NULL. Waits. */
void model_gpu_download(struct model_gpu *g, float *params, float *am, float *av);

/* Uploads one micro-batch (as model_forward's arguments; labels may be NULL) for the next
 * forward/backward. B <= max_batch, T <= max_seq_len. The host arrays may be reused at return. */
void model_gpu_batch(struct model_gpu *g, const int *tokens, const int *len, const int *labels,
                     int B, int T);
/* The loss of the next forwards and backwards: label smoothing and class weights (classes
 * floats, copied; NULL: none), as struct model's label_smoothing and class_weight. At
 * model_gpu_new: 0 and NULL, the plain cross-entropy. */
void model_gpu_loss(struct model_gpu *g, float smoothing, const float *class_weight);
/* Zeroes the gradients and the loss statistics. */
void model_gpu_zero_grad(struct model_gpu *g);
/* Forward of the last batch: per-example losses (with labels) added to the statistics. */
void model_gpu_forward(struct model_gpu *g);
/* Backward of the last forward (which had labels): grads += d(loss_scale * sum of losses). */
void model_gpu_backward(struct model_gpu *g, float loss_scale);
/* The gradient buffer (device): n_params floats, then the 2 statistics floats. */
float *model_gpu_grads(struct model_gpu *g);
/* Host <-> the gradient buffer's first n floats (n <= n_params + 2), returning with the copy
 * done: scratch for small sums between an optimizer step and the next zero_grad. */
void model_gpu_grads_put(struct model_gpu *g, const float *src, size_t n);
void model_gpu_grads_get(struct model_gpu *g, float *dst, size_t n);
/* grads[0..n_params) *= s (after a sum over ranks). */
void model_gpu_scale_grads(struct model_gpu *g, float s);
/* Clip by global norm (c->grad_clip) and one AdamW step at lr; t = the step number after
 * increment (1 first), as struct adamw's t. The norm before clipping stays on the device. */
void model_gpu_step(struct model_gpu *g, const struct optim_config *c, float lr, long t);
/* Adds this step's mean loss (statistics sum / examples) to the accumulator, and its stop
 * votes (the third statistic, summed over ranks with the gradients) to theirs. */
void model_gpu_end_step(struct model_gpu *g);
/* This rank votes to stop in the step under way: sets its third statistic (zeroed by
 * model_gpu_zero_grad) to 1, before the all-reduce that sums it. Enqueued, no wait. */
void model_gpu_vote_stop(struct model_gpu *g);
/* Waits for the stream; returns and clears the stop votes accumulated by model_gpu_end_step:
 * > 0 when a rank voted in one of those steps (every rank reads the same sum). */
float model_gpu_read_votes(struct model_gpu *g);
/* Waits for the stream; returns and clears the accumulated step losses' sum, and the last grad
 * norm computed by model_gpu_step (NULL to skip either). */
void model_gpu_read_stats(struct model_gpu *g, double *loss_sum, float *grad_norm);
/* Mean of the last forward's per-example losses (waits). */
float model_gpu_last_loss(struct model_gpu *g);
/* Device -> host: the last forward's logits, B x classes floats (waits). */
void model_gpu_read_logits(struct model_gpu *g, float *logits);
/* MODEL_GPU_GRAPHS: graphs captured, graph launches, and shapes evicted so far (NULL skips). */
void model_gpu_graph_stats(struct model_gpu *g, long *captures, long *launches, long *evictions);
/* Per-op timing: with on, every forward and backward runs eagerly (no graphs) with a CUDA event
 * behind each op (embedding, layernorm, qkv GEMM, attention, ... and their backward), a few
 * microseconds of device time each; off collects what is pending. model_gpu_profile_report()
 * prints the ops' device time per step (the totals divided by steps), largest first, with their
 * share and calls per step, as lines starting "profile:", then clears them; -1 when nothing
 * was timed (and always with model_gpu_mock.c, which has no device). */
int model_gpu_profile(struct model_gpu *g, int on);
int model_gpu_profile_report(struct model_gpu *g, FILE *f, int steps);
/* Waits until everything enqueued so far is done. */
void model_gpu_sync(struct model_gpu *g);
struct CUstream_st *model_gpu_stream(struct model_gpu *g);
/* "cuda", or "cpu-mock" for model_gpu_mock.c (whose results are train_run's bit for bit). */
const char *model_gpu_backend(void);

/* ---- gradients ready during backward: all-reduce overlapped with backward -------------------
 * model_gpu_backward() finishes the gradient buffer in MODEL_GPU_UNITS(layers) units, in this
 * order: unit 0 the head (clsw, clsb, lnfw, lnfb; and the 2 loss statistics, final since the
 * forward), units 1..L the layers from the last down to the first (each layer's slice of the
 * twelve stacked per-layer tensors), unit L+1 the embeddings (wte, wpe). train_plan.h's
 * train_plan_unit_ranges() lists a unit's ranges of the buffer; each float is in exactly one.
 *
 * Armed with model_gpu_arm_ready(), the NEXT model_gpu_backward() calls fn(ctx, u) for
 * u = 0, 1, ..., L+1 as soon as it has ENQUEUED the last kernel writing unit u (with a CUDA event
 * recorded behind it on the compute stream), then disarms. The hook runs on the calling thread
 * and must not block (train_gpu.c's enqueue-only NCCL hook enqueues from it; only an enqueue's
 * ncclInProgress is polled there); a comm thread then waits for the unit with model_gpu_wait_unit() (host),
 * or makes its stream wait with model_gpu_stream_wait_unit() (device, no host sync), before
 * reducing it. Until the gradients are consumed (model_gpu_step), nothing else writes a finished
 * unit. Arm before the LAST micro-batch of a step only (earlier ones still add to every unit).
 * The mock (model_gpu_mock.c) fires the same hooks, in the same order, after its CPU backward. */
#define MODEL_GPU_UNITS(layers) ((layers) + 2)
typedef void (*model_gpu_ready_fn)(void *ctx, int unit);
void model_gpu_arm_ready(struct model_gpu *g, model_gpu_ready_fn fn, void *ctx);
/* Any thread: returns when unit's gradients of the last armed backward are on the device. */
void model_gpu_wait_unit(struct model_gpu *g, int unit);
/* stream (e.g. a collective's) waits on the device for that unit; no host synchronisation. */
void model_gpu_stream_wait_unit(struct model_gpu *g, int unit, struct CUstream_st *stream);
/* Makes this model's GPU the calling thread's current device (for a comm thread). */
void model_gpu_bind_thread(struct model_gpu *g);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_MODEL_GPU_H */
