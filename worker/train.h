/*
 * train.h - the training loop and evaluation over an encoded dataset.
 *
 * One optimizer step takes batch * accum examples (the last step of an epoch may take fewer):
 * accum micro-batches of up to `batch` examples each run forward + backward into the model's
 * gradient buffer with loss scale 1/(examples in the step), so the accumulated gradient is the
 * gradient of the step's mean loss whatever the split. Then (when a reduce hook is set) the
 * gradient buffer is summed across ranks and divided by the world size (the step loss is summed
 * too, so logs show the global mean), clipped by global norm,
 * and AdamW updates the parameters at the scheduled learning rate.
 * With the bucket hooks set (reduce_push, reduce_wait, bucket_bytes > 0), the sum overlaps
 * backward: during the step's last backward, each bucket of train_plan.h's plan is pushed as soon
 * as backward has finished its units (model_arm_ready), and the loop waits for all of them only
 * before clipping (a plan of a single bucket, a model smaller than bucket_bytes, uses the reduce
 * hook after backward instead when one is set: nothing could overlap). The sums are the same
 * elementwise sums as the reduce hook's, so with 2 ranks the result is bit-identical to
 * bucket_bytes 0 (3+ ranks: the ring cuts the buffer differently, so summation orders, and the
 * last bits, may differ).
 *
 * Each micro-batch is cut to the longest sequence in it (tokens are copied into a (B, T_b)
 * buffer with T_b = max len), so padding costs nothing beyond the batch's own longest text; the
 * result is the same as running at the full max_len (attention and pooling ignore padding).
 * Examples are shuffled per epoch by a PRNG seeded from (seed, epoch): the same seed gives the
 * same run, bit for bit, with the same thread count. With world_size W, rank r trains on
 * positions r, r + W, ... of that order (torch's DistributedSampler, padded by wrapping), and
 * progress rates are reported for the whole job (this rank's rate times W).
 *
 * Progress: every log_interval steps one JSON object per line on json_out
 *   {"step":120,"epoch":0,"loss":0.2101,"lr":0.0003,"grad_norm":1.2,"samples_per_s":..,
 *    "tokens_per_s":..,"ms_per_step":..}
 * and a line for people on human_out: "step 120/906 | epoch 1 | loss 0.2101 | lr 3.0e-04 |
 * 41.2 ms | 31k tok/s". Either stream may be NULL. Only rank 0 should pass them.
 */
#ifndef GANTRY_TRAIN_H
#define GANTRY_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "worker/eval.h"
#include "worker/model.h"
#include "worker/optim.h"

/* A dataset as the model sees it: borrowed arrays (as in struct dataset_encoded). */
struct train_data {
    const int32_t *ids;    /* (n, max_len) row-major, padded */
    const int32_t *len;    /* (n), 1..max_len */
    const int32_t *labels; /* (n), or multi-label: (n, label_words) bit sets */
    size_t n;
    int max_len;
    int label_words; /* 0: single-label; else multi-label (the model's label_words) */
};

/* int32 words of labels per example (1 single-label). */
static inline size_t train_label_stride(const struct train_data *d)
{
    return d->label_words > 0 ? (size_t)d->label_words : 1;
}

/* Sums n floats in place across all ranks (the caller divides); 0 or a negative error. */
typedef int (*train_reduce_fn)(float *buf, size_t n, void *ctx);

struct obs;

struct train_opts {
    int epochs;
    long max_steps; /* 0: epochs decide */
    int batch;      /* micro-batch, <= the model's max_batch */
    int accum;      /* micro-batches per optimizer step */
    float label_smoothing; /* of the training loss (struct model's); evaluations use none */
    const float *class_weight; /* the training loss's class weights (classes floats); NULL: none;
                                * evaluations use none */
    struct optim_config optim; /* lr already scaled; total_steps/warmup filled by train_run when 0 */
    int warmup_steps;          /* -1: warmup_ratio * total steps */
    double warmup_ratio;
    uint64_t seed;
    int log_interval;
    FILE *json_out, *human_out;
    int rank, world_size;   /* this process's shard of each epoch; 0 and 1 for a single process */
    train_reduce_fn reduce; /* NULL: single process */
    void *reduce_ctx;
    /* Bucketed all-reduce (all three set, else reduce after backward): reduce_push queues a sum
     * over ranks of buf[0..n) and returns at once (buf is borrowed until reduce_wait returns);
     * reduce_wait returns when every queued sum is done, with 0 or the first error. Every rank
     * pushes the same ranges in the same order (the plan depends on the model and bucket_bytes
     * only). The loss statistics are pushed from a 2-float buffer of the loop's own. */
    int (*reduce_push)(float *buf, size_t n, void *ctx);
    int (*reduce_wait)(void *ctx);
    void *bucket_ctx;
    size_t bucket_bytes; /* bucket size (training.gradBucketMB); 0: reduce after backward */
    struct obs *obs; /* optional: every step goes to obs_step() (/metrics, TensorBoard) */
    /* Checkpoints and resume. start_step > 0 resumes after that many optimizer steps: the
     * model's parameters and *opt (moments and step count) must hold the saved state; the
     * data order continues where it stopped (it depends only on seed and epoch), so a resumed
     * run ends bit-identical to an uninterrupted one. */
    long start_step;
    struct adamw *opt; /* borrowed optimizer state; NULL: train_run keeps its own */
    int checkpoint_interval; /* call checkpoint() every this many steps and at the end; 0: never */
    int (*checkpoint)(void *ctx, long step, int epoch, const struct model *m,
                      const struct adamw *opt); /* 0, or an error that stops training */
    void *checkpoint_ctx;
    /* Called with checkpoint_ctx before every optimizer update (which modifies the parameters
     * and moments): a checkpoint that borrowed them (ckpt_snapshot_borrow) is fenced here, so
     * its copy overlaps the next forward and backward. NULL: nothing. */
    void (*before_update)(void *ctx);
    /* Evaluation during training (training.evalInterval): after every eval_interval-th step
     * but the last (the caller's final evaluation covers that one), every rank runs the forward
     * over its share of *eval (examples rank, rank + W, ...: each once) in batches of up to
     * eval_batch (<= the model's max_batch; the GPU loop caps it at batch), the counts are
     * summed over ranks by the reduce hook (as floats: exact while a count stays below 2^24),
     * and on_eval gets the job's counts, on every rank, with the seconds the evaluation took
     * (left out of the progress lines' rates). The parameters and optimizer state are only read:
     * a run with evaluations ends bit-identical to one without. on_eval returning
     * TRAIN_EARLY_STOP ends training after this step as if it were the last (its checkpoint is
     * the final one; train_result.early_stopped); any other non-zero result stops training
     * with it. It comes before that step's checkpoint (whose state may record it).
     * eval NULL or eval_interval 0: none. */
    const struct train_data *eval;
    int eval_batch, eval_interval;
    int (*on_eval)(void *ctx, long step, int epoch, const struct eval_counts *e, double seconds);
    void *eval_ctx;
    /* When set and *stop becomes non-zero (a signal handler), train_run returns TRAIN_STOPPED
     * at the next step boundary. If that boundary follows a step trained in this run and not
     * yet checkpointed, on_stop (when set) is called first with the state after that step,
     * with checkpoint_ctx: a checkpoint hook that returns once the checkpoint is on disk (the
     * caller decides whether to save: rank 0, its deadline). Every rank stops after a step
     * all ranks finished (the all-reduce needs them), so the state saved is consistent. */
    const volatile sig_atomic_t *stop;
    int (*on_stop)(void *ctx, long step, int epoch, const struct model *m,
                   const struct adamw *opt);
};

#define TRAIN_STOPPED 1 /* train_run's result when *o->stop was raised */
#define TRAIN_EARLY_STOP 2 /* on_eval's answer: this step is the last (early stopping) */

struct train_result {
    long steps;
    double seconds;        /* wall time of the loop */
    double last_loss;      /* mean loss of the last log interval */
    double samples_per_s;  /* over the whole run, this process */
    double tokens_per_s;   /* non-padding tokens */
    int early_stopped;     /* on_eval ended training early (at steps) */
};

/* Optimizer steps an epoch takes on each rank: ceil(ceil(n / world) / (batch * accum)). */
long train_steps_per_epoch(size_t n, int batch, int accum, int world);

/* The loops' answer to *o->stop at a step boundary: on_stop with the state after `step` when
 * it is newer than `saved` (the last step checkpointed, or where the run started); then
 * TRAIN_STOPPED, or on_stop's error. */
int train_stop_save(const struct train_opts *o, long step, long saved, int epoch,
                    const struct model *m, const struct adamw *opt);

/* Trains m on d. 0, TRAIN_STOPPED, or the reduce or checkpoint hook's error. */
int train_run(struct model *m, const struct train_data *d, const struct train_opts *o,
              struct train_result *res);

/* The loop's parts that train_gpu.c shares (one data order for every device):
 * train_shuffle: Fisher-Yates with a generator seeded from (seed, epoch), so every rank draws the
 * same order; train_shard: this rank's shard of it as torch's DistributedSampler cuts it
 * (positions rank, rank + W, ..., wrapping so every rank gets ceil(n / W) examples and takes the
 * same number of steps), returns the count; train_gather: copies examples idx[0..B) into (B, T)
 * buffers with T = their longest length (lab: (B, train_label_stride) words), adds their
 * tokens to *ntok, returns T;
 * train_log_progress: the JSON and human progress lines (device: NULL, or a name both show;
 * flops > 0: this rank's model FLOPs over the interval, shown as TFLOP/s, and with peak > 0, the
 * device's peak FLOP/s, as MFU).
 * before_update (train_opts) is called before the parameters or moments are overwritten: the
 * optimizer step on the CPU, the device-to-host download on the GPU. */
void train_shuffle(size_t *perm, size_t n, uint64_t seed, int epoch);
/* The run's optimizer steps (total capped by max_steps), with oc's total and warmup steps set. */
long train_schedule(const struct train_opts *o, long total, struct optim_config *oc);
size_t train_shard(size_t *idx, const size_t *perm, size_t n, int rank, int world);
int train_gather(const struct train_data *d, const size_t *idx, int B, int *tok, int *len,
                 int *lab, long *ntok);
void train_log_progress(const struct train_opts *o, const char *device, long step, long total,
                        int epoch, double loss, float lr, float norm, double dt, long samples,
                        long tokens, long steps, double flops, double peak);

/* Runs the model over d in batches (no gradients) and adds predictions and losses to e. */
void train_evaluate(struct model *m, const struct train_data *d, int batch, struct eval_counts *e);
/* The same loop over any forward: fn runs one batch (train_gather's layout, labels given) and
 * returns its mean loss, with *logits pointing at its (B, classes) logits until the next call.
 * train_gpu_evaluate's device forward uses it. */
typedef float (*train_eval_fn)(void *ctx, const int *tok, const int *len, const int *lab, int B,
                               int T, const float **logits);
void train_evaluate_fn(const struct train_data *d, int batch, train_eval_fn fn, void *ctx,
                       struct eval_counts *e);
/* train_evaluate_fn over examples rank, rank + world, ... of d only. */
void train_evaluate_shard(const struct train_data *d, int batch, int rank, int world,
                          train_eval_fn fn, void *ctx, struct eval_counts *e);
/* One evaluation during training (train_opts.eval ...): this rank's share through fn, the counts
 * summed over ranks by sum (host floats; NULL or one rank: all of the eval set here, no sum),
 * then o->on_eval. Returns 0, a
 * sum error, or on_eval's result; *seconds (may be NULL) gets the time it took. The GPU loop's
 * entry; the CPU loop calls it with the model's forward and the reduce hook. */
int train_eval_during(const struct train_opts *o, int classes, long step, int epoch, int batch,
                      train_eval_fn fn, void *fn_ctx, train_reduce_fn sum, void *sum_ctx,
                      double *seconds);
/* Whether step (just taken, of total) is one for train_eval_during. */
int train_eval_due(const struct train_opts *o, long step, long total);

#endif /* GANTRY_TRAIN_H */
