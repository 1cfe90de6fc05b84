/*
 * metrics.c - the recorder (state under one mutex), its two renderings, and the HTTP server.
 * Metric names and meanings are documented in docs/metrics.md; keep the two in step.
 */
#include "worker/metrics.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "common/httpd.h"
#include "common/xalloc.h"

/* Upper bounds (seconds) of the all-reduce histogram buckets, from a fast intra-node NCCL call to
 * a TCP ring over a slow network. */
static const double allreduce_bounds[METRICS_NUM_ALLREDUCE_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* One point of the throughput window: cumulative counts at time t. */
struct point {
    double t;
    int64_t step, samples, tokens;
    double flops; /* this rank's model FLOPs */
};

struct eval_value {
    char name[METRICS_MAX_EVAL_NAME];
    double value;
};

/* Everything a rendering needs, copied out under the lock. */
struct full {
    struct metrics_snapshot s;
    double flops_total, peak_flops; /* model FLOPs counted on this rank; the device's peak */
    int64_t steps_run, checkpoints;
    double checkpoint_s;
    uint64_t ar_bucket[METRICS_NUM_ALLREDUCE_BUCKETS]; /* not cumulative */
    uint64_t ar_count;
    double ar_sum;
    int n_eval;
    struct eval_value eval[METRICS_MAX_EVAL];
};

struct metrics {
    pthread_mutex_t mu;
    struct MHD_Daemon *daemon;
    int port;

    /* Guarded by mu. */
    struct full f;
    double begin_t;
    struct point win[METRICS_WINDOW + 1]; /* ring of sampled points, oldest at win_head */
    int win_head, win_len;
    struct point last; /* the latest step, valid when win_len > 0 */
};

static double mono_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double unix_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- recording ---- */

struct metrics *metrics_new(void)
{
    struct metrics *m = xcalloc(1, sizeof(*m));

    pthread_mutex_init(&m->mu, NULL);
    m->f.s.state = "starting";
    m->f.s.loss = m->f.s.lr = NAN;
    m->f.s.last_step_unix = NAN;
    m->f.s.last_checkpoint_step = -1;
    m->f.s.eval_step = -1;
    m->f.s.eval_accuracy = m->f.s.eval_macro_f1 = NAN;
    m->f.s.eval_micro_f1 = m->f.s.eval_pearson = NAN;
    m->f.checkpoint_s = NAN;
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/*
 * Records point p. It enters the ring only if the newest sampled point is at least
 * METRICS_SAMPLE_S older, so the ring spans the last METRICS_WINDOW steps when steps are slow
 * and about METRICS_WINDOW * METRICS_SAMPLE_S seconds when they are fast (thousands of tiny
 * steps a second would otherwise leave a window of milliseconds, and a jumpy ETA).
 */
static void win_push(struct metrics *m, struct point p)
{
    int cap = METRICS_WINDOW + 1;
    const struct point *newest = &m->win[(m->win_head + m->win_len - 1 + cap) % cap];

    m->last = p;
    if (m->win_len > 0 && p.t - newest->t < METRICS_SAMPLE_S)
        return;
    m->win[(m->win_head + m->win_len) % cap] = p;
    if (m->win_len < cap)
        m->win_len++;
    else
        m->win_head = (m->win_head + 1) % cap;
}

void metrics_begin(struct metrics *m, int64_t start_step, int64_t total_steps, int epochs,
                   int world_size, double now)
{
    if (now <= 0)
        now = mono_now();
    pthread_mutex_lock(&m->mu);
    m->f.s.state = "running";
    m->f.s.start_step = m->f.s.step = start_step;
    m->f.s.total_steps = total_steps;
    m->f.s.epochs = epochs;
    m->f.s.world_size = world_size;
    m->begin_t = now;
    m->win_head = m->win_len = 0;
    win_push(m, (struct point){now, start_step, m->f.s.samples_total, m->f.s.tokens_total,
                               m->f.flops_total});
    pthread_mutex_unlock(&m->mu);
}

void metrics_step(struct metrics *m, const struct metrics_step *s)
{
    double now = s->now > 0 ? s->now : mono_now();
    double wall = unix_now();

    pthread_mutex_lock(&m->mu);
    if (m->win_len == 0) { /* no metrics_begin(): training began with this step */
        m->f.s.state = "running";
        m->begin_t = now;
    }
    m->f.s.step = s->step;
    m->f.s.epoch = s->epoch;
    m->f.s.loss = s->loss;
    m->f.s.lr = s->lr;
    m->f.s.samples_total += s->samples;
    m->f.s.tokens_total += s->tokens;
    m->f.flops_total += s->flops > 0 ? s->flops : 0.0;
    m->f.s.last_step_unix = wall;
    m->f.s.elapsed_s = now - m->begin_t;
    m->f.steps_run++;
    win_push(m, (struct point){now, s->step, m->f.s.samples_total, m->f.s.tokens_total,
                               m->f.flops_total});
    pthread_mutex_unlock(&m->mu);
}

void metrics_allreduce(struct metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < METRICS_NUM_ALLREDUCE_BUCKETS; i++) {
        if (seconds <= allreduce_bounds[i]) {
            m->f.ar_bucket[i]++;
            break;
        }
    }
    m->f.ar_count++; /* a value above the last bound counts only in +Inf (= ar_count) */
    m->f.ar_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void metrics_checkpoint(struct metrics *m, int64_t step, double seconds)
{
    pthread_mutex_lock(&m->mu);
    m->f.s.last_checkpoint_step = step;
    m->f.checkpoints++;
    m->f.checkpoint_s = seconds;
    pthread_mutex_unlock(&m->mu);
}

static bool valid_eval_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n >= METRICS_MAX_EVAL_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '_'))
            return false;
    return true;
}

void metrics_eval(struct metrics *m, const char *name, double value)
{
    int i;

    if (!valid_eval_name(name)) {
        fprintf(stderr,
                "metrics: eval metric name \"%s\" dropped: use 1-%d characters of "
                "[a-z0-9_]\n",
                name, METRICS_MAX_EVAL_NAME - 1);
        return;
    }
    pthread_mutex_lock(&m->mu);
    for (i = 0; i < m->f.n_eval; i++)
        if (strcmp(m->f.eval[i].name, name) == 0)
            break;
    if (i == m->f.n_eval && i < METRICS_MAX_EVAL) {
        snprintf(m->f.eval[i].name, sizeof(m->f.eval[i].name), "%s", name);
        m->f.n_eval++;
    }
    if (i < m->f.n_eval)
        m->f.eval[i].value = value;
    if (strcmp(name, "accuracy") == 0)
        m->f.s.eval_accuracy = value;
    else if (strcmp(name, "macro_f1") == 0)
        m->f.s.eval_macro_f1 = value;
    else if (strcmp(name, "micro_f1") == 0)
        m->f.s.eval_micro_f1 = value;
    else if (strcmp(name, "pearson") == 0)
        m->f.s.eval_pearson = value;
    pthread_mutex_unlock(&m->mu);
    if (i == METRICS_MAX_EVAL)
        fprintf(stderr, "metrics: eval metric \"%s\" dropped: already %d names\n", name,
                METRICS_MAX_EVAL);
}

void metrics_evaluating(struct metrics *m, bool on)
{
    pthread_mutex_lock(&m->mu);
    if (on && strcmp(m->f.s.state, "running") == 0)
        m->f.s.state = "evaluating";
    else if (!on && strcmp(m->f.s.state, "evaluating") == 0)
        m->f.s.state = "running";
    pthread_mutex_unlock(&m->mu);
}

void metrics_stop_early(struct metrics *m, int64_t step)
{
    pthread_mutex_lock(&m->mu);
    m->f.s.total_steps = step;
    m->f.s.early_stopped = true;
    pthread_mutex_unlock(&m->mu);
}

void metrics_eval_step(struct metrics *m, int64_t step)
{
    pthread_mutex_lock(&m->mu);
    m->f.s.eval_step = step;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_peak_flops(struct metrics *m, double peak)
{
    pthread_mutex_lock(&m->mu);
    m->f.peak_flops = peak > 0 ? peak : 0.0;
    pthread_mutex_unlock(&m->mu);
}

void metrics_finish(struct metrics *m, bool succeeded)
{
    pthread_mutex_lock(&m->mu);
    m->f.s.state = succeeded ? "succeeded" : "failed";
    pthread_mutex_unlock(&m->mu);
}

/* Rates over the window and the ETA; called with mu held. */
static void derive(struct metrics *m, struct metrics_snapshot *s)
{
    const struct point *a = &m->win[m->win_head], *b = &m->last;
    double dt = b->t - a->t;

    s->samples_per_s = s->tokens_per_s = s->steps_per_s = s->flops_per_s = s->mfu = NAN;
    s->eta_s = s->percent = NAN;
    if (m->win_len > 0 && dt > 0) {
        s->samples_per_s = (double)(b->samples - a->samples) / dt;
        s->tokens_per_s = (double)(b->tokens - a->tokens) / dt;
        s->steps_per_s = (double)(b->step - a->step) / dt;
        if (m->f.flops_total > 0) {
            s->flops_per_s = (b->flops - a->flops) / dt;
            if (m->f.peak_flops > 0)
                s->mfu = s->flops_per_s / m->f.peak_flops;
        }
    }
    if (s->total_steps > 0) {
        s->percent = 100.0 * (double)s->step / (double)s->total_steps;
        if (s->step >= s->total_steps)
            s->eta_s = 0;
        else if (s->steps_per_s > 0)
            s->eta_s = (double)(s->total_steps - s->step) / s->steps_per_s;
    }
}

static void take_full(struct metrics *m, struct full *out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->f;
    derive(m, &out->s);
    pthread_mutex_unlock(&m->mu);
}

void metrics_get(struct metrics *m, struct metrics_snapshot *out)
{
    struct full f;

    take_full(m, &f);
    *out = f.s;
}

/* ---- rendering ---- */

/* An output cursor whose first error sticks, so a renderer can write without checking each call. */
struct out {
    struct buf *b;
    int rc;
};

__attribute__((format(printf, 2, 3))) static void emit(struct out *o, const char *fmt, ...)
{
    va_list ap;
    char line[512];
    int n;

    if (o->rc)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        o->rc = BUF_ETOOBIG; /* our lines are short; a longer one is a bug, not a reason to grow */
    else
        o->rc = buf_append(o->b, line, (size_t)n);
}

/* Prometheus spells the special values NaN, +Inf, -Inf; %.15g keeps lr = 0.0003 readable. */
static const char *prom_num(char tmp[32], double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "+Inf" : "-Inf";
    snprintf(tmp, 32, "%.15g", v);
    return tmp;
}

/* JSON has no NaN or infinity: unknown values are null. */
static const char *json_num(char tmp[32], double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(tmp, 32, "%.15g", v);
    return tmp;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    emit(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric_f(struct out *o, const char *name, const char *type, const char *help, double v)
{
    char tmp[32];

    family(o, name, type, help);
    emit(o, "%s %s\n", name, prom_num(tmp, v));
}

static void metric_i(struct out *o, const char *name, const char *type, const char *help, int64_t v)
{
    family(o, name, type, help);
    emit(o, "%s %lld\n", name, (long long)v);
}

static void render_state(struct out *o, const char *state)
{
    static const char *const states[] = {"starting", "running", "evaluating", "succeeded",
                                         "failed"};

    family(o, "gantry_train_state", "gauge",
           "Current state of training: 1 for it, 0 for the others.");
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
        emit(o, "gantry_train_state{state=\"%s\"} %d\n", states[i], strcmp(state, states[i]) == 0);
}

static void render_allreduce(struct out *o, const struct full *f)
{
    const char *name = "gantry_train_allreduce_duration_seconds";
    uint64_t cum = 0;
    char tmp[32];

    family(o, name, "histogram", "Time spent in gradient all-reduce calls.");
    for (int i = 0; i < METRICS_NUM_ALLREDUCE_BUCKETS; i++) {
        cum += f->ar_bucket[i];
        emit(o, "%s_bucket{le=\"%g\"} %llu\n", name, allreduce_bounds[i], (unsigned long long)cum);
    }
    emit(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)f->ar_count);
    emit(o, "%s_sum %s\n", name, prom_num(tmp, f->ar_sum));
    emit(o, "%s_count %llu\n", name, (unsigned long long)f->ar_count);
}

int metrics_render_prometheus(struct metrics *m, struct buf *b)
{
    struct out o = {b, 0};
    struct full f;
    const struct metrics_snapshot *s = &f.s;
    char tmp[32];

    take_full(m, &f);
    render_state(&o, s->state);
    metric_i(&o, "gantry_train_step", "gauge", "Optimizer steps completed.", s->step);
    metric_i(&o, "gantry_train_total_steps", "gauge", "Steps the job will run (0: unknown).",
             s->total_steps);
    metric_f(&o, "gantry_train_progress_ratio", "gauge",
             "Fraction of the steps done (step / total_steps).", s->percent / 100.0);
    metric_i(&o, "gantry_train_epoch", "gauge", "Current epoch, counting from 0.", s->epoch);
    metric_i(&o, "gantry_train_epochs", "gauge", "Epochs the job will run.", s->epochs);
    metric_i(&o, "gantry_train_world_size", "gauge", "Training processes in the job.",
             s->world_size);
    metric_f(&o, "gantry_train_loss", "gauge", "Training loss of the last step.", s->loss);
    metric_f(&o, "gantry_train_learning_rate", "gauge", "Learning rate of the last step.", s->lr);
    metric_f(&o, "gantry_train_samples_per_second", "gauge",
             "Examples per second over all ranks, averaged over recent steps.", s->samples_per_s);
    metric_f(&o, "gantry_train_tokens_per_second", "gauge",
             "Non-padding tokens per second over all ranks, averaged over recent steps.",
             s->tokens_per_s);
    metric_f(&o, "gantry_train_steps_per_second", "gauge",
             "Optimizer steps per second, averaged over recent steps.", s->steps_per_s);
    if (f.flops_total > 0) { /* counted on a GPU (the CPU loop does not count) */
        metric_f(&o, "gantry_train_model_flops_per_second", "gauge",
                 "Model FLOPs per second on rank 0's device (forward + backward as computed), "
                 "averaged over recent steps.",
                 s->flops_per_s);
        metric_f(&o, "gantry_train_mfu_ratio", "gauge",
                 "Model FLOPs utilization: model FLOPs per second over the device's peak (NaN: "
                 "peak unknown, set GANTRY_PEAK_TFLOPS).",
                 s->mfu);
    }
    metric_f(&o, "gantry_train_eta_seconds", "gauge",
             "Estimated seconds until the last step at the recent rate.", s->eta_s);
    metric_i(&o, "gantry_train_samples_total", "counter",
             "Examples processed over all ranks since this process started training.",
             s->samples_total);
    metric_i(&o, "gantry_train_tokens_total", "counter",
             "Non-padding tokens processed over all ranks since this process started training.",
             s->tokens_total);
    metric_i(&o, "gantry_train_steps_total", "counter",
             "Optimizer steps run by this process (a resumed run starts again at 0).", f.steps_run);
    metric_f(&o, "gantry_train_last_step_timestamp_seconds", "gauge",
             "Unix time at which the last step finished.", s->last_step_unix);
    metric_i(&o, "gantry_train_last_checkpoint_step", "gauge",
             "Step of the last checkpoint written (-1: none yet).", s->last_checkpoint_step);
    metric_i(&o, "gantry_train_checkpoints_total", "counter",
             "Checkpoints written by this process.", f.checkpoints);
    metric_f(&o, "gantry_train_checkpoint_duration_seconds", "gauge",
             "How long writing the last checkpoint took.", f.checkpoint_s);
    render_allreduce(&o, &f);
    if (f.s.eval_step >= 0) {
        family(&o, "gantry_train_eval_step", "gauge", "The step of the last evaluation.");
        emit(&o, "gantry_train_eval_step %lld\n", (long long)f.s.eval_step);
    }
    if (f.n_eval > 0)
        family(&o, "gantry_train_eval", "gauge", "Last evaluation result, by metric.");
    for (int i = 0; i < f.n_eval; i++)
        emit(&o, "gantry_train_eval{metric=\"%s\"} %s\n", f.eval[i].name,
             prom_num(tmp, f.eval[i].value));
    return o.rc;
}

int metrics_render_progress(struct metrics *m, struct buf *b)
{
    struct out o = {b, 0};
    struct full f;
    const struct metrics_snapshot *s = &f.s;
    char t1[32], t2[32], t3[32], t4[32];
    double since = NAN;

    take_full(m, &f);
    if (isfinite(s->last_step_unix))
        since = unix_now() - s->last_step_unix;
    emit(&o, "{\"state\":\"%s\",\"step\":%lld,\"total_steps\":%lld,\"percent\":%s,", s->state,
         (long long)s->step, (long long)s->total_steps, json_num(t1, s->percent));
    emit(&o, "\"epoch\":%d,\"epochs\":%d,\"world_size\":%d,\"loss\":%s,\"lr\":%s,", s->epoch,
         s->epochs, s->world_size, json_num(t1, s->loss), json_num(t2, s->lr));
    emit(&o,
         "\"samples_per_second\":%s,\"tokens_per_second\":%s,\"steps_per_second\":%s,"
         "\"eta_seconds\":%s,",
         json_num(t1, s->samples_per_s), json_num(t2, s->tokens_per_s),
         json_num(t3, s->steps_per_s), json_num(t4, s->eta_s));
    emit(&o, "\"model_flops_per_second\":%s,\"mfu\":%s,", json_num(t1, s->flops_per_s),
         json_num(t2, s->mfu));
    if (s->last_checkpoint_step >= 0)
        emit(&o, "\"last_checkpoint_step\":%lld,", (long long)s->last_checkpoint_step);
    else
        emit(&o, "\"last_checkpoint_step\":null,");
    emit(&o, "\"start_step\":%lld,\"samples_total\":%lld,\"tokens_total\":%lld,",
         (long long)s->start_step, (long long)s->samples_total, (long long)s->tokens_total);
    emit(&o, "\"elapsed_seconds\":%s,\"last_step_unix\":%s,\"seconds_since_last_step\":%s,",
         json_num(t1, s->elapsed_s), json_num(t2, s->last_step_unix), json_num(t3, since));
    if (s->early_stopped)
        emit(&o, "\"early_stopped\":true,");
    if (s->eval_step >= 0)
        emit(&o, "\"eval_step\":%lld,", (long long)s->eval_step);
    else
        emit(&o, "\"eval_step\":null,");
    emit(&o, "\"eval\":{");
    for (int i = 0; i < f.n_eval; i++)
        emit(&o, "%s\"%s\":%s", i ? "," : "", f.eval[i].name, json_num(t1, f.eval[i].value));
    emit(&o, "}}\n");
    return o.rc;
}

/* ---- HTTP ---- */

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    struct metrics *m = cls;
    const char *text = "text/plain; charset=utf-8";
    struct buf body;
    unsigned status = MHD_HTTP_OK;
    const char *type = text;
    int rc = 0;
    enum MHD_Result r;

    buf_init(&body, METRICS_MAX_BODY);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        rc = buf_puts(&body, "only GET and HEAD\n");
    } else if (strcmp(url, "/metrics") == 0) {
        type = "text/plain; version=0.0.4; charset=utf-8";
        rc = metrics_render_prometheus(m, &body);
    } else if (strcmp(url, "/progress") == 0) {
        type = "application/json";
        rc = metrics_render_progress(m, &body);
    } else if (strcmp(url, "/healthz") == 0) {
        rc = buf_puts(&body, "ok\n");
    } else {
        status = MHD_HTTP_NOT_FOUND;
        rc = buf_puts(&body, "not found; try /metrics, /progress or /healthz\n");
    }
    if (rc) {
        buf_reset(&body);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = text;
        rc = buf_puts(&body, "response too large\n"); /* short: fits any limit */
    }
    r = httpd_reply(conn, status, type, &body);
    buf_cleanup(&body);
    return r;
}

int metrics_serve(struct metrics *m, const char *addr, int port)
{
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (port < 0 || port > 65535 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr,
                "metrics: cannot serve on %s:%d: give a numeric IPv4 address such as "
                "0.0.0.0 and a port in 0-65535\n",
                addr, port);
        return -1;
    }
    m->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port,
                                 NULL, NULL, handle, m, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!m->daemon) {
        fprintf(stderr,
                "metrics: could not listen on %s:%d (see the message above; is the port "
                "in use?). Pick another port with --metrics-port\n",
                addr, port);
        return -1;
    }
    info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : port;
    return 0;
}

int metrics_port(const struct metrics *m)
{
    return m->daemon ? m->port : 0;
}
