/*
 * train_gpu.h - train_run (worker/train.h) on a GPU: config `device: cuda` (env GANTRY_DEVICE,
 * flag --device), one GPU per process.
 *
 * Same contract as train_run, same data order (seed, epoch, rank), same step (micro-batches into
 * one gradient buffer with loss scale 1/examples, sum over ranks / world size, clip by global
 * norm, AdamW), on worker/model_gpu.h's device state:
 *   - m (host) holds the parameters at entry (initial or resumed, with o->opt's moments and t);
 *     they are uploaded once. At every checkpoint, and at return, parameters and moments are
 *     copied back into m->params and *o->opt, so a checkpoint is the same fp32 host tensors as on
 *     the CPU (a GPU checkpoint resumes on the CPU and back); evaluation after training runs on
 *     the GPU from them (train_gpu_evaluate) or on the host model (train_evaluate).
 *   - o->reduce, when set, sums DEVICE memory across ranks (reduce_ctx is an nccl struct coll,
 *     worker/coll_nccl.h): the gradient buffer of n_params + 2 floats (the gradients, then the
 *     step's loss sum and example count), in one call after backward or bucket by bucket during
 *     it (below). The data is on the device when it is called (the collectives are synchronous).
 *   - the loss and grad norm are read from the device once per log interval (and at most every
 *     TRAIN_GPU_OBS_BATCH steps for o->obs, which gets each step of the interval with the
 *     interval's mean loss and the step's own time, samples and tokens).
 *   - model.type transformer or ngram (train_gpu_check refuses others).
 *   - precision (struct train_gpu_opts.bf16; config training.precision): fp32 follows the CPU
 *     loss curve within 2e-3 relative; bf16 is mixed precision with fp32 master weights,
 *     gradients, statistics and optimizer (model_gpu.h), within a looser tolerance (docs/gpu.md).
 *   - all-reduce overlapped with backward (o->reduce set and bucket_bytes > 0): the gradient
 *     buffer is cut into buckets of whole units (train_plan.h, the plan the CPU loop uses too:
 *     head, layers last to first, embeddings; a bucket closes once it holds bucket_bytes), and a
 *     comm thread calls o->reduce on each bucket's ranges (merged, in offset order) as soon as
 *     backward has produced it, while the compute stream goes on with the layers below; the
 *     optimizer step waits for every bucket. With go->nccl set (gantry-worker on GPUs) there is
 *     no comm thread: the buckets are enqueued on NCCL's stream behind backward's events,
 *     without a host wait, and waited for once before the step (train_gpu_opts.nccl).
 *     o->reduce is then called once per range from that thread (the same ranges in the same order
 *     on every rank), never concurrently. bucket_bytes 0: one call over n_params + 2 floats after
 *     backward. Sums are elementwise, so both give bit-identical results with 1 or 2 ranks.
 *
 * Without CUDA (GANTRY_HAVE_CUDA undefined) these are stubs: train_gpu_check() says the binary was
 * built without CUDA and the worker exits 78 (STYLE.md §5: callers need no #ifdef).
 */
#ifndef GANTRY_TRAIN_GPU_H
#define GANTRY_TRAIN_GPU_H

#include <stdbool.h>
#include <stdio.h>

#include "worker/train.h"
#include "worker/train_plan.h"

#define TRAIN_GPU_OBS_BATCH 64
#define TRAIN_GPU_VOTE_STEPS 4 /* with peers: steps between reads of the summed stop votes */

/* The GPU loop's own settings (not in struct train_opts: the CPU loop has no use for them). */
struct coll;
struct train_gpu_opts {
    int bf16;            /* 0: fp32; 1: bf16 mixed precision (training.precision: bf16) */
    int fused_attention; /* 1: attention_*_fused (training.attention: fused) */
    /* 1 (with bf16): kernels picked by timing them at start (MODEL_GPU_TUNE; training.autotune) */
    int autotune;
    int cuda_graphs;     /* 1: forward and backward replayed as CUDA graphs (training.cudaGraphs) */
    size_t bucket_bytes; /* all-reduce bucket size (training.gradBucketMB); 0: no overlap */
    /* The nccl collective (coll_nccl_new) that o->reduce sums over, or NULL. Set with overlap:
     * buckets are enqueued on its stream behind backward's events (coll_nccl_allreduce_async),
     * no comm thread, one coll_nccl_wait before the step; o->reduce is then not called during
     * backward. NULL: o->reduce is called from the comm thread. */
    struct coll *nccl;
};

struct train_gpu_infer; /* opaque: a device model for inference */

#ifdef GANTRY_HAVE_CUDA
/* Whether this binary has the GPU path (false: the stubs below, every call refuses). */
static inline bool train_gpu_built(void)
{
    return true;
}
/* Defaults: fp32 and TRAIN_BUCKET_MB (gantry-worker sets both from the config:
 * training.precision and training.gradBucketMB). */
void train_gpu_opts_default(struct train_gpu_opts *go);

/* 0 when this binary can train model.type (training.model.type) on a GPU; else -1 with
 * "field: why, what to do" in err (the worker exits 78). */
int train_gpu_check(const char *model_type, char *err, size_t errlen);
/* Selects this process's GPU from local_rank (kernels/gpu.h gpu_select_device) before any other
 * CUDA call; returns the device index (for coll_nccl_new), or -1 with err set. */
int train_gpu_select(int local_rank, char *err, size_t errlen);
/* train_run on the selected GPU (see above), with train_gpu_opts_default()'s settings. Returns
 * train_run's codes, and DIST_ECONFIG (exit 78) when the device model cannot be built for this
 * configuration on this GPU (model_gpu_new: e.g. the batch does not fit in its memory). */
int train_gpu_run(struct model *m, const struct train_data *d, const struct train_opts *o,
                  struct train_result *res);
/* The same with explicit GPU settings (go NULL: the defaults). */
int train_gpu_run_opts(struct model *m, const struct train_data *d, const struct train_opts *o,
                       const struct train_gpu_opts *go, struct train_result *res);
/* train_evaluate on the selected GPU: m's parameters (the host copy) uploaded to a device model
 * for batches of `batch` with go's precision and attention (NULL: the defaults), forward only;
 * the same predictions and mean losses as the host model up to the GPU's rounding. 0, or
 * DIST_ECONFIG (< 0) with a message on stderr when the device model cannot be built. */
int train_gpu_evaluate(struct model *m, const struct train_data *d, int batch,
                       const struct train_gpu_opts *go, struct eval_counts *e);
/* Forward-only inference on the selected GPU (gantry-predict --device cuda): m's parameters
 * uploaded to a device model for batches of up to `batch` with go's precision and attention
 * (NULL: the defaults). NULL with err set when the device model cannot be built. */
struct train_gpu_infer *train_gpu_infer_new(const struct model *m, int batch,
                                            const struct train_gpu_opts *go, char *err,
                                            size_t errlen);
/* The logits (B x classes, host) of tokens (B,T) with len (B), as model_forward's. */
void train_gpu_infer_logits(struct train_gpu_infer *gi, const int *tok, const int *len, int B,
                            int T, float *logits);
void train_gpu_infer_free(struct train_gpu_infer *gi);
#else
static inline bool train_gpu_built(void)
{
    return false;
}
static inline int train_gpu_check(const char *model_type, char *err, size_t errlen)
{
    (void)model_type;
    snprintf(err, errlen, "device: \"cuda\", but this gantry-worker was built without CUDA; use "
                          "device: cpu, or an image built with GANTRY_CUDA=ON "
                          "(`hack/install-deps.sh --cuda`)");
    return -1;
}
static inline int train_gpu_select(int local_rank, char *err, size_t errlen)
{
    (void)local_rank;
    return train_gpu_check(NULL, err, errlen);
}
static inline void train_gpu_opts_default(struct train_gpu_opts *go)
{
    go->bf16 = 0;
    go->fused_attention = 0;
    go->autotune = 0;
    go->cuda_graphs = 0;
    go->bucket_bytes = (size_t)TRAIN_BUCKET_MB << 20;
}
static inline int train_gpu_run(struct model *m, const struct train_data *d,
                                const struct train_opts *o, struct train_result *res)
{
    (void)m, (void)d, (void)o, (void)res;
    return -1;
}
static inline int train_gpu_run_opts(struct model *m, const struct train_data *d,
                                     const struct train_opts *o, const struct train_gpu_opts *go,
                                     struct train_result *res)
{
    (void)m, (void)d, (void)o, (void)go, (void)res;
    return -1;
}
static inline int train_gpu_evaluate(struct model *m, const struct train_data *d, int batch,
                                     const struct train_gpu_opts *go, struct eval_counts *e)
{
    (void)m, (void)d, (void)batch, (void)go, (void)e;
    return -1;
}
static inline struct train_gpu_infer *train_gpu_infer_new(const struct model *m, int batch,
                                                          const struct train_gpu_opts *go,
                                                          char *err, size_t errlen)
{
    (void)m, (void)batch, (void)go;
    train_gpu_check(NULL, err, errlen);
    return NULL;
}
static inline void train_gpu_infer_logits(struct train_gpu_infer *gi, const int *tok,
                                          const int *len, int B, int T, float *logits)
{
    (void)gi, (void)tok, (void)len, (void)B, (void)T, (void)logits;
}
static inline void train_gpu_infer_free(struct train_gpu_infer *gi)
{
    (void)gi;
}
#endif

#endif /* GANTRY_TRAIN_GPU_H */
