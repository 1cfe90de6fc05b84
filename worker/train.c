#include "worker/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/hash.h"
#include "common/xalloc.h"
#include "worker/obs.h"
#include "worker/train_plan.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void train_shuffle(size_t *perm, size_t n, uint64_t seed, int epoch)
{
    uint64_t s = seed ^ (0xD1B54A32D192ED03ULL * (uint64_t)(epoch + 1));
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(hash_splitmix64(&s) % i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

size_t train_shard(size_t *idx, const size_t *perm, size_t n, int rank, int world)
{
    size_t ns = (n + (size_t)world - 1) / (size_t)world;
    for (size_t i = 0; i < ns; i++)
        idx[i] = perm[(i * (size_t)world + (size_t)rank) % n];
    return ns;
}

long train_steps_per_epoch(size_t n, int batch, int accum, int world)
{
    size_t per = (size_t)batch * (size_t)accum, ns = (n + (size_t)world - 1) / (size_t)world;
    return (long)((ns + per - 1) / per);
}

int train_gather(const struct train_data *d, const size_t *idx, int B, int *tok, int *len,
                 int *lab, long *ntok)
{
    int T = 1;
    size_t lw = train_label_stride(d);
    for (int b = 0; b < B; b++)
        T = d->len[idx[b]] > T ? d->len[idx[b]] : T;
    for (int b = 0; b < B; b++) {
        const int32_t *row = d->ids + idx[b] * (size_t)d->max_len;
        memcpy(tok + (size_t)b * T, row, sizeof(int) * (size_t)T);
        len[b] = d->len[idx[b]];
        memcpy(lab + (size_t)b * lw, d->labels + idx[b] * lw, sizeof(int) * lw);
        *ntok += len[b];
    }
    return T;
}

void train_log_progress(const struct train_opts *o, const char *device, long step, long total,
                        int epoch, double loss, float lr, float norm, double dt, long samples,
                        long tokens, long steps, double flops, double peak)
{
    double ms = 1e3 * dt / (double)steps;
    int W = o->world_size > 0 ? o->world_size : 1;
    double sps = (double)samples * W / dt, tps = (double)tokens * W / dt;
    double fps = flops > 0 ? flops / dt : 0.0; /* this rank's (device's) FLOP/s */
    char perf[64] = "";
    if (fps > 0 && peak > 0)
        snprintf(perf, sizeof(perf), " | %.3g TFLOP/s | MFU %.1f%%", fps / 1e12, 100 * fps / peak);
    else if (fps > 0)
        snprintf(perf, sizeof(perf), " | %.3g TFLOP/s", fps / 1e12);
    if (o->json_out) {
        fprintf(o->json_out,
                "{\"step\":%ld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.4f,"
                "\"samples_per_s\":%.1f,\"tokens_per_s\":%.0f,\"ms_per_step\":%.1f",
                step, epoch, loss, (double)lr, (double)norm, sps, tps, ms);
        if (device)
            fprintf(o->json_out, ",\"device\":\"%s\"", device);
        if (fps > 0)
            fprintf(o->json_out, ",\"tflops\":%.4f", fps / 1e12);
        if (fps > 0 && peak > 0)
            fprintf(o->json_out, ",\"mfu\":%.5f", fps / peak);
        fputs("}\n", o->json_out);
        fflush(o->json_out);
    }
    if (o->human_out) {
        fprintf(o->human_out, "step %ld/%ld | epoch %d | loss %.4f | lr %.1e | %.1f ms | %.0f "
                              "samples/s | %.1fk tok/s%s%s%s%s\n",
                step, total, epoch + 1, loss, (double)lr, ms, sps, tps / 1e3, perf,
                device ? " (" : "", device ? device : "", device ? ")" : "");
        fflush(o->human_out);
    }
}

long train_schedule(const struct train_opts *o, long total, struct optim_config *oc)
{
    if (o->max_steps > 0 && o->max_steps < total)
        total = o->max_steps;
    oc->total_steps = total;
    oc->warmup_steps = o->warmup_steps >= 0 ? o->warmup_steps
                                            : (int)lround(o->warmup_ratio * (double)total);
    return total;
}

static float cpu_eval_forward(void *ctx, const int *tok, const int *len, const int *lab, int B,
                              int T, const float **logits);
static int host_sum(float *buf, size_t n, void *ctx);

/* Scratch and counters of one train_run. */
struct loop {
    size_t *perm, *idx;
    int *tok, *len, *lab;
    long tokens; /* non-padding tokens seen by this rank since the last log line */
    /* the bucketed all-reduce (o->reduce_push): */
    const struct train_opts *o;
    struct model *m;
    struct train_plan plan;
    bool bucketed;
    bool each_layer; /* a bucket ends between two layers: the backward must finish them in turn */
    /* [loss sum, examples, stop votes] of the step: pushed with the first bucket. A rank asked
     * to stop (SIGTERM) votes 1; every rank stops after the step whose sum says so, so all stop
     * after the same step, whenever each got its signal (pods are stopped one by one) */
    float ls[3];
    float votes; /* the last step's sum of stop votes (the local flag without peers) */
    int queued, rc; /* buckets pushed in this step; the first push error */
};

/* Pushes [off, off + n) of the n_params + 3 buffer (train_plan.h): the part below n_params from
 * the gradients, the rest from the statistics. */
static void push_range(struct loop *lp, size_t off, size_t n)
{
    const size_t np = lp->m->n_params;
    if (off < np && !lp->rc) {
        size_t k = n < np - off ? n : np - off;
        lp->rc = lp->o->reduce_push(lp->m->grads + off, k, lp->o->bucket_ctx);
        off += k, n -= k;
    }
    if (n && !lp->rc)
        lp->rc = lp->o->reduce_push(lp->ls + (off - np), n, lp->o->bucket_ctx);
}

/* model_arm_ready's hook: a bucket is pushed once its last unit is final. */
static void bucket_ready(void *ctx, int unit)
{
    struct loop *lp = ctx;
    const struct train_plan *p = &lp->plan;
    if (train_plan_closes(p, lp->queued, unit)) {
        for (int i = p->first[lp->queued]; i < p->first[lp->queued + 1]; i++)
            push_range(lp, p->r[i].off, p->r[i].n);
        lp->queued++;
    }
}

/*
 * One optimizer step over idx[0..in_step): micro-batches of up to o->batch into the gradient
 * buffer, then (multi-process) the sum over ranks: after the backward, or bucketed during the
 * last one. *loss gets the step's mean loss over every rank's examples; *red_s the seconds the
 * loop waited for the sums after backward. 0 or the reduce hooks' error.
 */
static int step_grads(struct model *m, const struct train_data *d, const struct train_opts *o,
                      struct loop *lp, const size_t *idx, size_t in_step, double *loss,
                      double *red_s)
{
    double sum = 0.0;
    float *ls = lp->ls; /* [loss sum, examples]: the global mean loss, for the log */
    int rc = 0;

    model_zero_grad(m);
    for (size_t mb = 0; mb < in_step; mb += o->batch) {
        int B = (int)(in_step - mb < (size_t)o->batch ? in_step - mb : (size_t)o->batch);
        int T = train_gather(d, idx + mb, B, lp->tok, lp->len, lp->lab, &lp->tokens);
        m->label_smoothing = o->label_smoothing, m->class_weight = o->class_weight;
        sum += (double)model_forward(m, lp->tok, lp->len, lp->lab, B, T) * B;
        ls[0] = (float)sum, ls[1] = (float)in_step;
        ls[2] = o->stop && *o->stop ? 1.0f : 0.0f; /* as of the push (the last backward) */
        if (lp->bucketed && mb + (size_t)o->batch >= in_step) { /* the last: buckets final */
            lp->queued = lp->rc = 0;
            model_arm_ready(m, bucket_ready, lp, lp->each_layer);
        }
        model_backward(m, 1.0f / (float)in_step);
    }
    *loss = sum / (double)in_step;
    *red_s = 0.0;
    lp->votes = ls[2];
    if (!lp->bucketed && !o->reduce)
        return 0;
    double t = now_s();
    if (lp->bucketed) { /* pushed bucket by bucket during the backward: wait for the sums */
        rc = o->reduce_wait(o->bucket_ctx); /* always: the buffers are borrowed until then */
        if (!rc)
            rc = lp->rc;
    } else if (!(rc = o->reduce(ls, 3, o->reduce_ctx))) { /* after backward: all at once */
        rc = o->reduce(m->grads, m->n_params, o->reduce_ctx);
    }
    if (rc)
        return rc;
    *loss = (double)ls[0] / (double)ls[1];
    lp->votes = ls[2];
    float inv = 1.0f / (float)o->world_size;
    for (size_t i = 0; i < m->n_params; i++)
        m->grads[i] *= inv;
    *red_s = now_s() - t; /* bucketed: only the wait, the part backward did not hide */
    return 0;
}

int train_stop_save(const struct train_opts *o, long step, long saved, int epoch,
                    const struct model *m, const struct adamw *opt)
{
    int rc;

    if (!o->on_stop || step <= saved)
        return TRAIN_STOPPED;
    rc = o->on_stop(o->checkpoint_ctx, step, epoch, m, opt);
    return rc ? rc : TRAIN_STOPPED;
}

int train_run(struct model *m, const struct train_data *d, const struct train_opts *o,
              struct train_result *res)
{
    const int per_step = o->batch * o->accum, W = o->world_size > 0 ? o->world_size : 1;
    struct train_opts ow = *o;
    long spe = train_steps_per_epoch(d->n, o->batch, o->accum, W);
    long total = (long)o->epochs * spe, step = o->start_step, logged = 0, samples = 0;
    long saved = step; /* the last step checkpointed, or where this run started */
    struct optim_config oc = o->optim;
    struct adamw own, *opt = o->opt ? o->opt : &own;
    struct loop lp = {0};
    double t0 = now_s(), tlog = t0, loss_sum = 0.0, all_tokens = 0;
    long all_samples = 0;
    int rc = 0;

    ow.world_size = W;
    total = train_schedule(o, total, &oc);
    if (!o->opt)
        adamw_init(&own, m->n_params);
    lp.perm = xmallocarray(d->n ? d->n : 1, sizeof(size_t));
    lp.idx = xmallocarray(d->n ? d->n : 1, sizeof(size_t));
    lp.tok = xmallocarray((size_t)o->batch * d->max_len, sizeof(int));
    lp.len = xmallocarray((size_t)o->batch, sizeof(int));
    lp.lab = xmallocarray((size_t)o->batch * train_label_stride(d), sizeof(int));
    m->label_words = d->label_words;
    lp.o = &ow, lp.m = m;
    if (o->reduce_push && o->reduce_wait && o->bucket_bytes > 0) {
        train_plan_init_stats(&lp.plan, m, o->bucket_bytes, 3);
        /* One bucket would leave only when backward ends: nothing to overlap, and handing it to
         * the bucketer's thread costs a wake-up a step (small models, many steps); the reduce
         * hook does the same sums on this thread. */
        lp.bucketed = lp.plan.nb > 1 || !o->reduce;
        /* units 1..L are the layers, the last computed first: a bucket whose last unit is a
         * layer other than unit L can leave before the layers below it are done */
        for (int b = 0; b < lp.plan.nb; b++)
            lp.each_layer |= lp.plan.end[b] >= 2 && lp.plan.end[b] <= m->cfg.layers;
        if (!lp.bucketed)
            train_plan_cleanup(&lp.plan);
    }
    /* with peers, a stop is agreed through the step's sums (struct loop's votes) */
    const bool peers = lp.bucketed || o->reduce != NULL;
    memset(res, 0, sizeof(*res));
    /* Resuming at start_step: the order of each epoch depends only on (seed, epoch), so the
     * epoch and position follow from the step. */
    for (int epoch = (int)(step / spe); epoch < o->epochs && step < total; epoch++) {
        train_shuffle(lp.perm, d->n, o->seed, epoch);
        size_t ns = train_shard(lp.idx, lp.perm, d->n, o->rank, W);
        size_t first = epoch == step / spe ? (size_t)(step % spe) * per_step : 0;
        for (size_t start = first; start < ns && step < total; start += per_step) {
            size_t in_step = ns - start < (size_t)per_step ? ns - start : (size_t)per_step;
            long tokens_before = lp.tokens;
            double loss, red_s;
            if (o->stop && *o->stop && !peers) { /* with peers: votes, after the step */
                rc = train_stop_save(o, step, saved, epoch, m, opt);
                goto out;
            }
            if ((rc = step_grads(m, d, &ow, &lp, lp.idx + start, in_step, &loss, &red_s)))
                goto out;
            float lr = optim_lr(&oc, step);
            if (o->before_update)
                o->before_update(o->checkpoint_ctx);
            float norm = adamw_clip_step(opt, m, &oc, lr); /* clip + AdamW in one pass */
            step++;
            samples += (long)in_step;
            loss_sum += loss;
            logged++;
            if (o->obs) {
                struct metrics_step ms = {.step = step, .epoch = epoch, .loss = loss, .lr = lr,
                                          .samples = (int64_t)in_step * W,
                                          .tokens = (int64_t)(lp.tokens - tokens_before) * W};
                obs_step(o->obs, &ms, red_s);
            }
            if (step % o->log_interval == 0 || step == total) {
                double t = now_s();
                res->last_loss = loss_sum / (double)logged;
                train_log_progress(&ow, NULL, step, total, epoch, res->last_loss, lr, norm,
                                   t - tlog, samples, lp.tokens, logged, 0.0, 0.0);
                all_samples += samples, all_tokens += (double)lp.tokens;
                samples = lp.tokens = logged = 0;
                loss_sum = 0.0;
                tlog = t;
            }
            /* before the checkpoint, whose state may record the result */
            if (train_eval_due(o, step, total)) {
                double es;
                int eb = o->eval_batch > 0 ? o->eval_batch : o->batch;
                bool can_sum = o->reduce || (o->reduce_push && o->reduce_wait);
                rc = train_eval_during(o, m->cfg.classes, step, epoch, eb, cpu_eval_forward, m,
                                       W > 1 && can_sum ? host_sum : NULL, &ow, &es);
                if (rc == TRAIN_EARLY_STOP) /* this step is the last: its checkpoint is final */
                    total = step, res->early_stopped = 1, rc = 0;
                if (rc)
                    goto out;
                tlog += es; /* the progress lines' rates are training's */
            }
            if (peers ? lp.votes > 0.0f : o->stop && *o->stop) { /* this step's state, saved
                                                                   * by on_stop, if at all */
                rc = train_stop_save(o, step, saved, epoch, m, opt);
                goto out;
            }
            if (o->checkpoint && o->checkpoint_interval > 0 &&
                (step % o->checkpoint_interval == 0 || step == total)) {
                if ((rc = o->checkpoint(o->checkpoint_ctx, step, epoch, m, opt)))
                    goto out;
                saved = step;
            }
        }
    }
out:
    res->steps = step;
    res->seconds = now_s() - t0;
    all_samples += samples, all_tokens += (double)lp.tokens;
    res->samples_per_s = (double)all_samples / res->seconds;
    res->tokens_per_s = all_tokens / res->seconds;
    if (!o->opt)
        adamw_cleanup(&own);
    free(lp.perm), free(lp.idx), free(lp.tok), free(lp.len), free(lp.lab);
    if (lp.bucketed)
        train_plan_cleanup(&lp.plan);
    return rc;
}

void train_evaluate_shard(const struct train_data *d, int batch, int rank, int world,
                          train_eval_fn fn, void *ctx, struct eval_counts *e)
{
    int *tok = xmallocarray((size_t)batch * d->max_len, sizeof(int));
    int *len = xmallocarray((size_t)batch, sizeof(int));
    int *lab = xmallocarray((size_t)batch * train_label_stride(d), sizeof(int));
    size_t *idx = xmallocarray((size_t)batch, sizeof(size_t));
    size_t W = world > 0 ? (size_t)world : 1, r = rank > 0 ? (size_t)rank : 0;
    size_t mine = d->n > r ? (d->n - r + W - 1) / W : 0; /* rank, rank + W, ... below n */
    long ntok = 0;

    for (size_t start = 0; start < mine; start += (size_t)batch) {
        int B = (int)(mine - start < (size_t)batch ? mine - start : (size_t)batch);
        for (int b = 0; b < B; b++)
            idx[b] = (start + (size_t)b) * W + r;
        int T = train_gather(d, idx, B, tok, len, lab, &ntok);
        const float *logits = NULL;
        float l = fn(ctx, tok, len, lab, B, T, &logits);
        if (d->label_words == MODEL_TARGETS_REAL) /* lab: the targets' bits */
            eval_add_regression(e, (const float *)(const void *)lab, logits, (size_t)B);
        else if (d->label_words)
            eval_add_logits_multi(e, lab, d->label_words, logits, (size_t)B);
        else
            eval_add_logits(e, lab, logits, (size_t)B); /* lab: the gathered labels (int32) */
        eval_add_loss(e, (double)l * B, (uint64_t)B);
    }
    free(tok), free(len), free(lab), free(idx);
}

void train_evaluate_fn(const struct train_data *d, int batch, train_eval_fn fn, void *ctx,
                       struct eval_counts *e)
{
    train_evaluate_shard(d, batch, 0, 1, fn, ctx, e);
}

int train_eval_due(const struct train_opts *o, long step, long total)
{
    return o->eval && o->on_eval && o->eval_interval > 0 && step % o->eval_interval == 0 &&
           step < total;
}

int train_eval_during(const struct train_opts *o, int classes, long step, int epoch, int batch,
                      train_eval_fn fn, void *fn_ctx, train_reduce_fn sum, void *sum_ctx,
                      double *seconds)
{
    struct eval_counts ec;
    double t0 = now_s();
    int rc = 0;

    if (eval_init_task(&ec, classes, o->eval->label_words))
        return -1;
    obs_evaluating(o->obs, true);
    if (sum && o->world_size > 1) /* a share each, then every rank's counts summed */
        train_evaluate_shard(o->eval, batch, o->rank, o->world_size, fn, fn_ctx, &ec);
    else /* nothing to sum with: all of it here */
        train_evaluate_fn(o->eval, batch, fn, fn_ctx, &ec);
    if (sum && o->world_size > 1) {
        size_t n = eval_counts_flat_len(&ec);
        double *v = eval_counts_flat(&ec);
        float *f = xmallocarray(n, sizeof(float));
        for (size_t i = 0; i < n; i++)
            f[i] = (float)v[i];
        rc = sum(f, n, sum_ctx);
        for (size_t i = 0; i < n && !rc; i++)
            v[i] = (double)f[i];
        free(f);
    }
    double dt = now_s() - t0;
    obs_evaluating(o->obs, false);
    if (!rc)
        rc = o->on_eval(o->eval_ctx, step, epoch, &ec, dt);
    if (seconds)
        *seconds = dt;
    eval_cleanup(&ec);
    return rc;
}

/* The CPU loop's sum for train_eval_during: the reduce hook, else one bucket pushed and waited
 * for (the bucketer holds nothing between steps). */
static int host_sum(float *buf, size_t n, void *ctx)
{
    const struct train_opts *o = ctx;
    int rc;
    if (o->reduce)
        return o->reduce(buf, n, o->reduce_ctx);
    rc = o->reduce_push(buf, n, o->bucket_ctx);
    int wrc = o->reduce_wait(o->bucket_ctx); /* always: buf is borrowed until then */
    return rc ? rc : wrc;
}

static float cpu_eval_forward(void *ctx, const int *tok, const int *len, const int *lab, int B,
                              int T, const float **logits)
{
    struct model *m = ctx;
    m->label_smoothing = 0.0f, m->class_weight = NULL; /* evaluation: the plain cross-entropy */
    float l = model_forward(m, tok, len, lab, B, T);
    *logits = m->logits;
    return l;
}

void train_evaluate(struct model *m, const struct train_data *d, int batch, struct eval_counts *e)
{
    m->label_words = d->label_words;
    train_evaluate_fn(d, batch, cpu_eval_forward, m, e);
}
