/*
 * obs.c - glue between the training loop and worker/metrics + worker/tbevent.
 */
#include "worker/obs.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "worker/tbevent.h"

struct obs {
    struct metrics *m;
    struct tbevent_writer *tb; /* NULL: not rank 0, no directory, or disabled after an error */
    int log_interval;
    /* Sums over the current log interval, for the TensorBoard means. */
    double loss_sum, allreduce_sum;
    int n;
};

/* After a failed write, TensorBoard output stops for this run; training goes on. */
static void tb_failed(struct obs *o)
{
    fprintf(stderr, "obs: TensorBoard event writing stopped after the error above; training "
                    "continues, /metrics still serves\n");
    tbevent_close(o->tb);
    o->tb = NULL;
}

static void tb_scalar(struct obs *o, const char *tag, int64_t step, double v)
{
    if (o->tb && tbevent_scalar(o->tb, tag, step, (float)v) != 0)
        tb_failed(o);
}

struct obs *obs_open(const struct obs_config *c)
{
    struct obs *o = xcalloc(1, sizeof(*o));
    bool lead = c->rank == 0;

    o->m = metrics_new();
    o->log_interval = c->log_interval > 0 ? c->log_interval : 1;
    metrics_begin(o->m, c->start_step, c->total_steps, c->epochs, c->world_size, 0);
    if (lead && c->metrics_port >= 0 &&
        metrics_serve(o->m, c->metrics_addr ? c->metrics_addr : "0.0.0.0", c->metrics_port) != 0)
        goto fail;
    if (lead && c->tb_dir && c->tb_dir[0]) {
        o->tb = tbevent_open(c->tb_dir);
        if (!o->tb)
            goto fail;
        /* Resumed after `start_step` steps: TensorBoard drops the old run's points from the
         * next step on, which this run is about to redo. */
        if (c->start_step > 0 &&
            (tbevent_session_start(o->tb, c->start_step + 1) != 0 || tbevent_flush(o->tb) != 0))
            goto fail;
    }
    return o;
fail:
    tbevent_close(o->tb);
    metrics_free(o->m);
    free(o);
    return NULL;
}

bool obs_step(struct obs *o, const struct metrics_step *s, double allreduce_seconds)
{
    struct metrics_snapshot snap;

    metrics_step(o->m, s);
    if (allreduce_seconds > 0)
        metrics_allreduce(o->m, allreduce_seconds);
    o->loss_sum += s->loss;
    o->allreduce_sum += allreduce_seconds;
    o->n++;
    if (s->step % o->log_interval != 0)
        return false;
    if (o->tb) {
        metrics_get(o->m, &snap);
        tb_scalar(o, "train/loss", s->step, o->loss_sum / o->n);
        tb_scalar(o, "train/lr", s->step, s->lr);
        tb_scalar(o, "train/samples_per_second", s->step, snap.samples_per_s);
        tb_scalar(o, "train/tokens_per_second", s->step, snap.tokens_per_s);
        tb_scalar(o, "train/allreduce_seconds", s->step, o->allreduce_sum / o->n);
        if (o->tb && tbevent_flush(o->tb) != 0)
            tb_failed(o);
    }
    o->loss_sum = o->allreduce_sum = 0;
    o->n = 0;
    return true;
}

void obs_eval(struct obs *o, int64_t step, const char *name, double value)
{
    char tag[METRICS_MAX_EVAL_NAME + 8];

    metrics_eval(o->m, name, value);
    snprintf(tag, sizeof(tag), "eval/%s", name);
    tb_scalar(o, tag, step, value);
    if (o->tb && tbevent_flush(o->tb) != 0)
        tb_failed(o);
}

void obs_checkpoint(struct obs *o, int64_t step, double seconds)
{
    metrics_checkpoint(o->m, step, seconds);
}

struct metrics *obs_metrics(struct obs *o)
{
    return o->m;
}

void obs_close(struct obs *o, bool succeeded)
{
    if (!o)
        return;
    metrics_finish(o->m, succeeded);
    if (o->tb && tbevent_close(o->tb) != 0)
        fprintf(stderr, "obs: the last TensorBoard events may be missing\n");
    metrics_free(o->m);
    free(o);
}
