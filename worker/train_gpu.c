/*
 * train_gpu.c - train_run on a GPU (train_gpu.h). The loop is train.c's with the model on the
 * device (model_gpu.h); the data order and progress lines are train.c's own (train.h).
 */
#include "worker/train_gpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "kernels/gpu.h"
#include "worker/coll_nccl.h"
#include "worker/model_gpu.h"
#include "worker/obs.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- setup ---- */

int train_gpu_select(int local_rank, char *err, size_t errlen)
{
    if (model_gpu_device_count() < 1) {
        snprintf(err, errlen, "device: \"cuda\", but no CUDA device is visible to this process "
                              "(check nvidia-smi, the pod's nvidia.com/gpu limit and "
                              "CUDA_VISIBLE_DEVICES), or use device: cpu");
        return -1;
    }
    int dev = gpu_select_device(local_rank < 0 ? 0 : local_rank);
    if (dev < 0)
        snprintf(err, errlen, "device: could not select a GPU for LOCAL_RANK %d (see above)",
                 local_rank);
    return dev;
}

int train_gpu_check(const char *model_type, char *err, size_t errlen)
{
    if (strcmp(model_type, "transformer") && strcmp(model_type, "ngram")) {
        snprintf(err, errlen, "model.type: \"%s\" has no GPU implementation; use transformer or "
                              "ngram", model_type);
        return -1;
    }
    return 0;
}

/* ---- settings ---- */

void train_gpu_opts_default(struct train_gpu_opts *go)
{
    go->bf16 = 0; /* training.precision, .attention and .gradBucketMB: the caller's (cfg.c) */
    go->fused_attention = 0;
    go->autotune = 0;
    go->cuda_graphs = 0;
    go->bucket_bytes = (size_t)TRAIN_BUCKET_MB << 20;
    go->nccl = NULL;
}

/* model_gpu_new's flags for go's precision, attention and graphs. */
static unsigned model_flags(const struct train_gpu_opts *go)
{
    return (go->bf16 ? MODEL_GPU_BF16 : 0) | (go->fused_attention ? MODEL_GPU_FUSED_ATTENTION : 0) |
           (go->autotune ? MODEL_GPU_TUNE : 0) | (go->cuda_graphs ? MODEL_GPU_GRAPHS : 0);
}

/* The comm thread: reduces bucket after bucket as backward's ready hook (on the loop's thread)
 * queues them; the loop waits for all before the optimizer step. */
struct comm {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct train_opts *o;
    struct model_gpu *g;
    float *grads; /* device */
    struct train_plan plan;
    int queued, done; /* buckets of this step: handed over, reduced */
    int rc;           /* first error */
    bool quit;
};

static void *comm_main(void *arg)
{
    struct comm *c = arg;
    model_gpu_bind_thread(c->g);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->done == c->queued && !c->quit)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->done == c->queued)
            break; /* quit with nothing pending */
        int b = c->done, rc = c->rc;
        pthread_mutex_unlock(&c->mu);
        model_gpu_wait_unit(c->g, c->plan.end[b] - 1); /* the bucket's gradients are done */
        for (int i = c->plan.first[b]; i < c->plan.first[b + 1] && !rc; i++)
            rc = c->o->reduce(c->grads + c->plan.r[i].off, c->plan.r[i].n, c->o->reduce_ctx);
        pthread_mutex_lock(&c->mu);
        if (rc && !c->rc)
            c->rc = rc;
        c->done++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* model_gpu's ready hook: a bucket is handed over when its last unit is enqueued. */
static void comm_ready(void *ctx, int unit)
{
    struct comm *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (train_plan_closes(&c->plan, c->queued, unit)) {
        c->queued++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Waits for every bucket of the step; 0 or the first reduce error. */
static int comm_wait(struct comm *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->done < c->plan.nb)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->rc;
    c->queued = c->done = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static struct comm *comm_new(const struct train_opts *o, struct model_gpu *g, const struct model *m,
                             size_t bucket_bytes)
{
    struct comm *c = xcalloc(1, sizeof(*c));
    c->o = o, c->g = g, c->grads = model_gpu_grads(g);
    train_plan_init_stats(&c->plan, m, bucket_bytes, MODEL_GPU_STATS);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->th, NULL, comm_main, c)) {
        fprintf(stderr, "gantry-worker: could not start the all-reduce thread; reducing after "
                        "backward instead\n");
        train_plan_cleanup(&c->plan);
        free(c);
        return NULL;
    }
    return c;
}

static void comm_free(struct comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    train_plan_cleanup(&c->plan);
    free(c);
}

/* With an nccl collective (train_gpu_opts.nccl; gantry-worker's reduce hook is then
 * train_coll.c's plain COLL_SUM over it) no comm thread: backward's ready hook makes
 * coll_nccl's stream wait on the device for the bucket's last unit and enqueues the bucket's
 * all-reduces behind it, on the loop's thread, without host synchronisation; enq_wait, before
 * the optimizer step, polls for a dead or hung peer (coll_nccl_wait) and orders the compute
 * stream behind the all-reduces. The same ranges, order and sums as the comm thread: the same
 * bits. */
struct enq {
    struct coll *c;
    struct model_gpu *g;
    float *grads; /* device */
    struct train_plan plan;
    int queued; /* buckets of this step enqueued */
    int rc;     /* first error */
};

static void enq_ready(void *ctx, int unit)
{
    struct enq *q = ctx;
    if (!train_plan_closes(&q->plan, q->queued, unit))
        return;
    int b = q->queued++;
    if (q->rc)
        return; /* the collective failed (and was aborted): enq_wait reports it */
    model_gpu_stream_wait_unit(q->g, unit, coll_nccl_stream(q->c));
    for (int i = q->plan.first[b]; i < q->plan.first[b + 1] && !q->rc; i++)
        q->rc = coll_nccl_allreduce_async(q->c, q->grads + q->plan.r[i].off, q->plan.r[i].n);
}

/* Waits for every bucket of the step; 0 or the first error. */
static int enq_wait(struct enq *q)
{
    int rc = q->rc;
    if (!rc && q->queued != q->plan.nb) { /* backward did not hand every bucket over */
        fprintf(stderr, "gantry-worker: internal error: %d of %d gradient buckets were "
                        "all-reduced\n",
                q->queued, q->plan.nb);
        rc = -1;
    }
    if (!rc)
        rc = coll_nccl_wait(q->c, model_gpu_stream(q->g));
    q->queued = 0;
    q->rc = 0;
    return rc;
}

static struct enq *enq_new(struct coll *c, struct model_gpu *g, const struct model *m,
                           size_t bucket_bytes)
{
    struct enq *q = xcalloc(1, sizeof(*q));
    q->c = c, q->g = g, q->grads = model_gpu_grads(g);
    train_plan_init_stats(&q->plan, m, bucket_bytes, MODEL_GPU_STATS);
    return q;
}

static void enq_free(struct enq *q)
{
    if (!q)
        return;
    train_plan_cleanup(&q->plan);
    free(q);
}

/* ---- evaluation on the device ---- */

struct gpu_eval {
    struct model_gpu *g;
    float *logits; /* (batch, classes) on the host */
};

static float gpu_eval_forward(void *ctx, const int *tok, const int *len, const int *lab, int B,
                              int T, const float **logits)
{
    struct gpu_eval *ge = ctx;
    model_gpu_batch(ge->g, tok, len, lab, B, T);
    model_gpu_loss(ge->g, 0.0f, NULL); /* the evaluation loss is the plain cross-entropy */
    model_gpu_forward(ge->g);
    model_gpu_read_logits(ge->g, ge->logits);
    *logits = ge->logits;
    return model_gpu_last_loss(ge->g);
}

/* train_eval_during's sum on the GPU: the reduce hook sums device memory, so the host floats go
 * through the gradient buffer (dead between an optimizer step and the next zero_grad), in
 * pieces of its size. */
struct dev_sum {
    const struct train_opts *o;
    struct model_gpu *g;
    size_t cap; /* floats in the gradient buffer */
};

static int dev_sum(float *buf, size_t n, void *ctx)
{
    struct dev_sum *ds = ctx;
    float *dev = model_gpu_grads(ds->g);
    int rc = 0;
    for (size_t off = 0; off < n && !rc; off += ds->cap) {
        size_t k = n - off < ds->cap ? n - off : ds->cap;
        model_gpu_grads_put(ds->g, buf + off, k); /* returns with the copy done */
        rc = ds->o->reduce(dev, k, ds->o->reduce_ctx);
        if (!rc)
            model_gpu_grads_get(ds->g, buf + off, k);
    }
    return rc;
}

/* An evaluation during training on the loop's own device model (its activations are free
 * between steps; the parameters are only read). */
static int eval_during_gpu(const struct train_opts *o, const struct model *m, struct model_gpu *g,
                           long step, int epoch, double *seconds)
{
    int eb = o->eval_batch > 0 && o->eval_batch < o->batch ? o->eval_batch : o->batch;
    struct gpu_eval ge = {g, xmallocarray((size_t)eb * m->cfg.classes, sizeof(float))};
    struct dev_sum ds = {o, g, m->n_params + MODEL_GPU_STATS};
    bool many = o->world_size > 1 && o->reduce;
    int rc = train_eval_during(o, m->cfg.classes, step, epoch, eb, gpu_eval_forward, &ge,
                               many ? dev_sum : NULL, &ds, seconds);
    free(ge.logits);
    return rc;
}

/* ---- the loop ---- */

struct pending { /* a finished step not yet given to obs (its loss is read later) */
    struct metrics_step ms;
    double red_s;
};

struct gloop {
    struct model_gpu *g;
    size_t *perm, *idx;
    int *tok, *len, *lab;
    long tokens; /* non-padding tokens since the last log line */
    double loss_sum; /* step losses read back since the last log line */
    struct pending pend[TRAIN_GPU_OBS_BATCH];
    int npend;
};

/* Reads the losses accumulated on the device since the last read; hands the pending steps to
 * obs with their mean. */
static void flush_stats(struct gloop *lp, const struct train_opts *o, float *norm)
{
    double sum = 0.0;
    model_gpu_read_stats(lp->g, &sum, norm);
    lp->loss_sum += sum;
    for (int i = 0; i < lp->npend; i++) {
        lp->pend[i].ms.loss = sum / lp->npend;
        if (o->obs)
            obs_step(o->obs, &lp->pend[i].ms, lp->pend[i].red_s);
    }
    lp->npend = 0;
}

/* Asked to stop (SIGTERM) at this step boundary? With peers, rank 0 decides when: it stops after
 * a step every rank finished and saves it, and the others go on until they find it gone (they
 * then exit with the signal's code, or their grace ends them). So rank 0 never loses a peer in
 * the step it would save, whichever rank got its signal first (pods are stopped one by one).
 * Another rank asked to stop votes instead (model_gpu_vote_stop, summed with the step's
 * gradients), and every TRAIN_GPU_VOTE_STEPS steps every rank reads the sum (a host sync, so not
 * every step as the CPU loop does): all stop after the same step, which rank 0 saves, even when
 * rank 0 got no signal (one pod deleted). */
static bool gpu_stop_now(const struct train_opts *o, int W)
{
    return o->stop && *o->stop && (W == 1 || o->rank == 0);
}

/* With peers, after `step`: did a rank vote to stop in the steps since the last read? */
static bool gpu_peer_voted(const struct train_opts *o, struct gloop *lp, int W, long step)
{
    return W > 1 && o->stop && step % TRAIN_GPU_VOTE_STEPS == 0 && model_gpu_read_votes(lp->g) > 0;
}

/* Asked to stop: the device's parameters and moments after `step` come down first when
 * on_stop will save them (train_stop_save). */
static int gpu_stop_save(const struct train_opts *o, struct gloop *lp, long step, long saved,
                         int epoch, struct model *m, struct adamw *opt)
{
    if (o->on_stop && step > saved) {
        if (o->before_update) /* a checkpoint still copying the last download */
            o->before_update(o->checkpoint_ctx);
        model_gpu_download(lp->g, m->params, opt->m, opt->v);
    }
    return train_stop_save(o, step, saved, epoch, m, opt);
}

int train_gpu_run(struct model *m, const struct train_data *d, const struct train_opts *o,
                  struct train_result *res)
{
    return train_gpu_run_opts(m, d, o, NULL, res);
}

int train_gpu_run_opts(struct model *m, const struct train_data *d, const struct train_opts *o,
                       const struct train_gpu_opts *go, struct train_result *res)
{
    const int per_step = o->batch * o->accum, W = o->world_size > 0 ? o->world_size : 1;
    long spe = train_steps_per_epoch(d->n, o->batch, o->accum, W);
    long total = (long)o->epochs * spe, step = o->start_step, logged = 0, samples = 0;
    long saved = step; /* the last step checkpointed, or where this run started */
    struct optim_config oc = o->optim;
    struct adamw own, *opt = o->opt ? o->opt : &own;
    struct gloop lp;
    double t0 = now_s(), tlog = t0, all_tokens = 0;
    double flops = 0.0, peak; /* model FLOPs since the last log line; the device's peak FLOP/s */
    long all_samples = 0;
    struct train_gpu_opts gdef;
    struct comm *comm = NULL;
    struct enq *enq = NULL;
    struct coll *nccl;
    char err[512];
    int rc = 0;

    if (!go) {
        train_gpu_opts_default(&gdef);
        go = &gdef;
    }
    nccl = o->reduce ? go->nccl : NULL;
    memset(&lp, 0, sizeof(lp));
    memset(res, 0, sizeof(*res));
    unsigned flags = model_flags(go);
    m->label_words = d->label_words; /* the task: the device model's loss */
    if (!(lp.g = model_gpu_new(m, o->batch, flags, err, sizeof(err)))) {
        /* the configuration, on this GPU: the same on every restart, so permanent (78) */
        fprintf(stderr, "gantry-worker: %s\n", err);
        return DIST_ECONFIG;
    }
    peak = gpu_peak_flops(go->bf16);
    if (o->obs)
        metrics_set_peak_flops(obs_metrics(o->obs), peak);
    if (o->reduce && go->bucket_bytes > 0 && nccl)
        enq = enq_new(nccl, lp.g, m, go->bucket_bytes);
    else if (o->reduce && go->bucket_bytes > 0)
        comm = comm_new(o, lp.g, m, go->bucket_bytes);
    total = train_schedule(o, total, &oc);
    if (!o->opt)
        adamw_init(&own, m->n_params);
    model_gpu_upload(lp.g, m->params, opt->m, opt->v);
    lp.perm = xmallocarray(d->n ? d->n : 1, sizeof(size_t));
    lp.idx = xmallocarray(d->n ? d->n : 1, sizeof(size_t));
    lp.tok = xmallocarray((size_t)o->batch * d->max_len, sizeof(int));
    lp.len = xmallocarray((size_t)o->batch, sizeof(int));
    lp.lab = xmallocarray((size_t)o->batch * train_label_stride(d), sizeof(int));
    for (int epoch = (int)(step / spe); epoch < o->epochs && step < total; epoch++) {
        train_shuffle(lp.perm, d->n, o->seed, epoch);
        size_t ns = train_shard(lp.idx, lp.perm, d->n, o->rank, W);
        size_t first = epoch == step / spe ? (size_t)(step % spe) * per_step : 0;
        for (size_t start = first; start < ns && step < total; start += per_step) {
            size_t in_step = ns - start < (size_t)per_step ? ns - start : (size_t)per_step;
            long tokens_before = lp.tokens;
            double red_s = 0.0, flops_before = flops;
            if (gpu_stop_now(o, W)) {
                rc = gpu_stop_save(o, &lp, step, saved, epoch, m, opt);
                goto out;
            }
            model_gpu_zero_grad(lp.g);
            if (W > 1 && o->stop && *o->stop) /* rank 0 stopped above: another rank's vote */
                model_gpu_vote_stop(lp.g);
            for (size_t mb = 0; mb < in_step; mb += o->batch) {
                const size_t *ix = lp.idx + start + mb;
                int B = (int)(in_step - mb < (size_t)o->batch ? in_step - mb : (size_t)o->batch);
                int T = train_gather(d, ix, B, lp.tok, lp.len, lp.lab, &lp.tokens);
                flops += model_step_flops(&m->cfg, B, T);
                model_gpu_batch(lp.g, lp.tok, lp.len, lp.lab, B, T);
                model_gpu_loss(lp.g, o->label_smoothing, o->class_weight);
                model_gpu_forward(lp.g);
                if (mb + (size_t)o->batch >= in_step) { /* the last: buckets final */
                    if (comm)
                        model_gpu_arm_ready(lp.g, comm_ready, comm);
                    else if (enq)
                        model_gpu_arm_ready(lp.g, enq_ready, enq);
                }
                model_gpu_backward(lp.g, 1.0f / (float)in_step);
            }
            if (o->reduce) { /* gradients + [loss sum, examples], summed over ranks */
                double t = now_s();
                if (comm) { /* reduced bucket by bucket during the backward */
                    rc = comm_wait(comm);
                } else if (enq) { /* enqueued bucket by bucket during the backward */
                    rc = enq_wait(enq);
                } else {
                    model_gpu_sync(lp.g);
                    rc = o->reduce(model_gpu_grads(lp.g), m->n_params + MODEL_GPU_STATS,
                                   o->reduce_ctx);
                }
                if (rc)
                    goto out;
                model_gpu_scale_grads(lp.g, 1.0f / (float)W);
                red_s = now_s() - t;
            }
            float lr = optim_lr(&oc, step);
            model_gpu_step(lp.g, &oc, lr, ++opt->t);
            model_gpu_end_step(lp.g);
            step++;
            samples += (long)in_step;
            logged++;
            lp.pend[lp.npend++] = (struct pending){
                .ms = {.step = step, .epoch = epoch, .lr = lr, .samples = (int64_t)in_step * W,
                       .tokens = (int64_t)(lp.tokens - tokens_before) * W, .now = now_s(),
                       .flops = flops - flops_before},
                .red_s = red_s};
            bool log_now = step % o->log_interval == 0 || step == total;
            float norm = 0.0f;
            if (log_now || lp.npend == TRAIN_GPU_OBS_BATCH)
                flush_stats(&lp, o, &norm);
            if (log_now) {
                double t = now_s();
                res->last_loss = lp.loss_sum / (double)logged;
                train_log_progress(o, "cuda", step, total, epoch, res->last_loss, lr, norm,
                                   t - tlog, samples, lp.tokens, logged, flops, peak);
                all_samples += samples, all_tokens += (double)lp.tokens;
                samples = lp.tokens = logged = 0;
                lp.loss_sum = flops = 0.0;
                tlog = t;
            }
            /* before the checkpoint, whose state may record the result */
            if (train_eval_due(o, step, total)) {
                double es;
                rc = eval_during_gpu(o, m, lp.g, step, epoch, &es);
                if (rc == TRAIN_EARLY_STOP) /* this step is the last: its checkpoint is final */
                    total = step, res->early_stopped = 1, rc = 0;
                if (rc)
                    goto out;
                tlog += es; /* the progress lines' rates are training's */
            }
            if (gpu_stop_now(o, W) || gpu_peer_voted(o, &lp, W, step)) {
                /* this step's state, saved by on_stop (rank 0), if at all */
                rc = gpu_stop_save(o, &lp, step, saved, epoch, m, opt);
                goto out;
            }
            if (o->checkpoint && o->checkpoint_interval > 0 &&
                (step % o->checkpoint_interval == 0 || step == total)) {
                if (o->before_update) /* a checkpoint still copying the last download */
                    o->before_update(o->checkpoint_ctx);
                model_gpu_download(lp.g, m->params, opt->m, opt->v);
                if ((rc = o->checkpoint(o->checkpoint_ctx, step, epoch, m, opt)))
                    goto out;
                saved = step;
            }
        }
    }
out:
    comm_free(comm);
    enq_free(enq);
    if (lp.npend)
        flush_stats(&lp, o, NULL);
    if (o->before_update)
        o->before_update(o->checkpoint_ctx);
    model_gpu_download(lp.g, m->params, opt->m, opt->v); /* for evaluation and the caller */
    res->steps = step;
    res->seconds = now_s() - t0;
    all_samples += samples, all_tokens += (double)lp.tokens;
    res->samples_per_s = (double)all_samples / res->seconds;
    res->tokens_per_s = all_tokens / res->seconds;
    if (!o->opt)
        adamw_cleanup(&own);
    if (go->cuda_graphs && o->human_out) {
        long cap, launches, ev;
        model_gpu_graph_stats(lp.g, &cap, &launches, &ev);
        fprintf(o->human_out, "cuda graphs: %ld captured, %ld launches, %ld shapes evicted\n",
                cap, launches, ev);
    }
    model_gpu_free(lp.g);
    free(lp.perm), free(lp.idx), free(lp.tok), free(lp.len), free(lp.lab);
    return rc;
}

struct train_gpu_infer {
    struct model_gpu *g;
};

struct train_gpu_infer *train_gpu_infer_new(const struct model *m, int batch,
                                            const struct train_gpu_opts *go, char *err,
                                            size_t errlen)
{
    struct train_gpu_opts gdef;
    struct model_gpu *g;
    if (!go) {
        train_gpu_opts_default(&gdef);
        go = &gdef;
    }
    unsigned flags = model_flags(go);
    if (!(g = model_gpu_new(m, batch, flags, err, errlen)))
        return NULL;
    struct train_gpu_infer *gi = xmalloc(sizeof(*gi));
    gi->g = g;
    return gi;
}

void train_gpu_infer_logits(struct train_gpu_infer *gi, const int *tok, const int *len, int B,
                            int T, float *logits)
{
    model_gpu_batch(gi->g, tok, len, NULL, B, T);
    model_gpu_forward(gi->g);
    model_gpu_read_logits(gi->g, logits);
}

void train_gpu_infer_free(struct train_gpu_infer *gi)
{
    if (gi) {
        model_gpu_free(gi->g);
        free(gi);
    }
}

int train_gpu_evaluate(struct model *m, const struct train_data *d, int batch,
                       const struct train_gpu_opts *go, struct eval_counts *e)
{
    struct train_gpu_opts gdef;
    struct gpu_eval ge;
    char err[512];
    if (!go) {
        train_gpu_opts_default(&gdef);
        go = &gdef;
    }
    unsigned flags = model_flags(go);
    m->label_words = d->label_words;
    if (!(ge.g = model_gpu_new(m, batch, flags, err, sizeof(err)))) {
        fprintf(stderr, "gantry-worker: evaluation on the GPU: %s\n", err);
        return DIST_ECONFIG;
    }
    ge.logits = xmallocarray((size_t)batch * m->cfg.classes, sizeof(float));
    train_evaluate_fn(d, batch, gpu_eval_forward, &ge, e);
    free(ge.logits);
    model_gpu_free(ge.g);
    return 0;
}
