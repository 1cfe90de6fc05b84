/*
 * obs.c - glue between the training loop and worker/metrics + worker/tbevent.
 */
#include "worker/obs.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "worker/tbevent.h"

struct obs {
    struct metrics *m;
    struct tbevent_writer *tb; /* NULL: not rank 0, no directory, or disabled after an error */
    int log_interval;
    bool lead;           /* rank 0 */
    char term_path[256]; /* the termination message file; "": none */
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
    const char *term;

    o->m = metrics_new();
    o->log_interval = c->log_interval > 0 ? c->log_interval : 1;
    o->lead = lead;
    term = c->termination_log ? c->termination_log : getenv("GANTRY_TERMINATION_LOG");
    if (!term || !*term)
        term = OBS_TERMINATION_LOG;
    if (strlen(term) < sizeof(o->term_path)) /* longer: no message (the log still has it all) */
        snprintf(o->term_path, sizeof(o->term_path), "%s", term);
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
        if (isfinite(snap.flops_per_s))
            tb_scalar(o, "train/model_flops_per_second", s->step, snap.flops_per_s);
        if (isfinite(snap.mfu))
            tb_scalar(o, "train/mfu", s->step, snap.mfu);
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
    metrics_eval_step(o->m, step);
    snprintf(tag, sizeof(tag), "eval/%s", name);
    tb_scalar(o, tag, step, value);
    if (o->tb && tbevent_flush(o->tb) != 0)
        tb_failed(o);
}

void obs_evaluating(struct obs *o, bool on)
{
    if (o)
        metrics_evaluating(o->m, on);
}

void obs_checkpoint(struct obs *o, int64_t step, double seconds)
{
    metrics_checkpoint(o->m, step, seconds);
}

struct metrics *obs_metrics(struct obs *o)
{
    return o->m;
}

static const char *num(char tmp[32], double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(tmp, 32, "%.9g", v);
    return tmp;
}

/* The final progress line (obs.h) into the termination message file, if that file exists. */
static void write_final(struct obs *o)
{
    struct metrics_snapshot s;
    char line[OBS_TERMINATION_MAX], t1[32], t2[32], t3[32], t4[32], ck[32], ev[224] = "";
    char more[96] = "";
    int n, fd;

    metrics_get(o->m, &s);
    if (s.last_checkpoint_step >= 0)
        snprintf(ck, sizeof(ck), "%lld", (long long)s.last_checkpoint_step);
    else
        snprintf(ck, sizeof(ck), "null");
    if (isfinite(s.eval_micro_f1)) /* the other tasks' metrics, only where they are */
        snprintf(more, sizeof(more), ",\"micro_f1\":%s", num(t1, s.eval_micro_f1));
    if (isfinite(s.eval_pearson))
        snprintf(more + strlen(more), sizeof(more) - strlen(more), ",\"pearson\":%s",
                 num(t1, s.eval_pearson));
    if (s.eval_step >= 0) /* the last evaluation (the final one, after training) */
        snprintf(ev, sizeof(ev), ",%s\"eval_step\":%lld,\"eval\":{\"accuracy\":%s,"
                 "\"macro_f1\":%s%s}", s.early_stopped ? "\"early_stopped\":true," : "",
                 (long long)s.eval_step, num(t1, s.eval_accuracy), num(t2, s.eval_macro_f1),
                 more);
    n = snprintf(line, sizeof(line),
                 "{\"state\":\"%s\",\"step\":%lld,\"total_steps\":%lld,\"percent\":%s,"
                 "\"epoch\":%d,\"epochs\":%d,\"world_size\":%d,\"loss\":%s,"
                 "\"samples_per_second\":%s,\"eta_seconds\":%s,\"last_checkpoint_step\":%s%s}\n",
                 s.state, (long long)s.step, (long long)s.total_steps, num(t1, s.percent), s.epoch,
                 s.epochs, s.world_size, num(t2, s.loss), num(t3, s.samples_per_s),
                 num(t4, s.eta_s), ck, ev);
    if (n < 0 || (size_t)n >= sizeof(line))
        return; /* cannot happen with these fields; never write a cut line */
    fd = open(o->term_path, O_WRONLY | O_TRUNC | O_CLOEXEC); /* no O_CREAT: see obs.h */
    if (fd < 0) {
        if (errno != ENOENT)
            fprintf(stderr, "obs: could not write the final progress to %s: %s\n", o->term_path,
                    strerror(errno));
        return;
    }
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "obs: could not write the final progress to %s: %s\n", o->term_path,
                strerror(errno));
    close(fd);
}

void obs_close(struct obs *o, bool succeeded)
{
    if (!o)
        return;
    metrics_finish(o->m, succeeded);
    if (o->lead && succeeded && o->term_path[0])
        write_final(o);
    if (o->tb && tbevent_close(o->tb) != 0)
        fprintf(stderr, "obs: the last TensorBoard events may be missing\n");
    metrics_free(o->m);
    free(o);
}
