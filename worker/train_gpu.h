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
 *     the CPU (a GPU checkpoint resumes on the CPU and back) and evaluation after training can
 *     run on the host model (train_evaluate).
 *   - o->reduce, when set, is called ONCE per step with a DEVICE buffer of n_params + 2 floats
 *     (the gradients, then the step's loss sum and example count): the hook must sum device
 *     memory across ranks, i.e. reduce_ctx is an nccl struct coll (worker/coll_nccl.h). The
 *     compute stream is synchronised before the call (the collectives are synchronous).
 *   - the loss and grad norm are read from the device once per log interval (and at most every
 *     TRAIN_GPU_OBS_BATCH steps for o->obs, which gets each step of the interval with the
 *     interval's mean loss and the step's own time, samples and tokens).
 *   - model.type transformer only (train_gpu_check says so for others).
 * GANTRY_GPU_BF16=1 in the environment runs the GEMMs on bf16 operands (model_gpu.h); default fp32,
 * which follows the CPU loss curve within 2e-3 relative.
 *
 * Without CUDA (GANTRY_HAVE_CUDA undefined) these are stubs: train_gpu_check() says the binary was
 * built without CUDA and the worker exits 78 (STYLE.md §5: callers need no #ifdef).
 */
#ifndef GANTRY_TRAIN_GPU_H
#define GANTRY_TRAIN_GPU_H

#include <stdio.h>

#include "worker/train.h"

#define TRAIN_GPU_OBS_BATCH 64

#ifdef GANTRY_HAVE_CUDA
/* 0 when this binary can train model.type (training.model.type) on a GPU; else -1 with
 * "field: why, what to do" in err (the worker exits 78). */
int train_gpu_check(const char *model_type, char *err, size_t errlen);
/* Selects this process's GPU from local_rank (kernels/gpu.h gpu_select_device) before any other
 * CUDA call; returns the device index (for coll_nccl_new), or -1 with err set. */
int train_gpu_select(int local_rank, char *err, size_t errlen);
/* train_run on the selected GPU (see above). */
int train_gpu_run(struct model *m, const struct train_data *d, const struct train_opts *o,
                  struct train_result *res);
#else
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
static inline int train_gpu_run(struct model *m, const struct train_data *d,
                                const struct train_opts *o, struct train_result *res)
{
    (void)m, (void)d, (void)o, (void)res;
    return -1;
}
#endif

#endif /* GANTRY_TRAIN_GPU_H */
