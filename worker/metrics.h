/*
 * metrics.h - training progress for people and machines: Prometheus /metrics, JSON /progress.
 *
 * The training loop records what happens (metrics_begin, metrics_step, metrics_allreduce,
 * metrics_checkpoint, metrics_eval, metrics_finish); rank 0 also calls metrics_serve(), which
 * starts an HTTP server (libmicrohttpd, its own thread) answering
 *
 *   GET /metrics   Prometheus text format 0.0.4 (names and meanings in docs/metrics.md)
 *   GET /progress  one JSON object: step, total_steps, percent, epoch, loss, lr, samples/s,
 *                  tokens/s, eta_seconds, last_checkpoint_step, state, ... (the operator reads it)
 *   GET /healthz   "ok" (for a liveness probe of the serving thread only, not of training)
 *
 * Rates (samples/s, tokens/s, steps/s) and the ETA are computed here over a sliding window (the
 * last METRICS_WINDOW steps, or about METRICS_WINDOW * METRICS_SAMPLE_S seconds when steps are
 * faster than that), so the log line, /metrics and /progress agree (use metrics_get() to print
 * them). Counts passed in are global (summed over all ranks), as rank 0 knows them.
 *
 * Thread notes: every function may be called from any thread; one mutex guards the state and
 * rendering formats a snapshot taken under it, so a slow scraper never blocks a training step.
 * Not done here: pushing to a gateway, per-rank series (each rank may serve its own, but the
 * operator only reads rank 0), authentication (serve on the pod network only).
 */
#ifndef GANTRY_METRICS_H
#define GANTRY_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

/* Points the throughput and ETA are averaged over, taken at least METRICS_SAMPLE_S apart. */
#define METRICS_WINDOW   20
#define METRICS_SAMPLE_S 0.5
/* Eval metrics kept (distinct names); later new names are dropped with a warning. */
#define METRICS_MAX_EVAL      16
#define METRICS_MAX_EVAL_NAME 48
/* Largest response body; the rendered text is a few KiB. */
#define METRICS_MAX_BODY (256 * 1024)
/* All-reduce histogram buckets: 0.5 ms to 10 s, listed in metrics.c (+Inf implied). */
#define METRICS_NUM_ALLREDUCE_BUCKETS 14

struct metrics;

/* One optimiser step, as the training loop saw it. */
struct metrics_step {
    int64_t step; /* steps completed, counting from 0 at the start of training (not of this run) */
    int epoch;    /* 0-based epoch the step belongs to */
    double loss;  /* training loss of this step (mean over the global batch) */
    double lr;    /* learning rate used by this step */
    int64_t samples; /* examples in this step, summed over ranks */
    int64_t tokens;  /* non-padding tokens in this step, summed over ranks */
    double now;      /* CLOCK_MONOTONIC seconds when the step ended; <= 0: read the clock */
    double flops;    /* model FLOPs of this step on this rank's device (model_step_flops); 0:
                      * not counted (the CPU loop) */
};

/* What /progress shows, for the log line and for tests. NAN where not known yet. */
struct metrics_snapshot {
    const char *state; /* "starting", "running", "evaluating" (during training), "succeeded",
                        * "failed" (static strings) */
    int64_t step, total_steps, start_step;
    int epoch, epochs, world_size;
    double loss, lr;
    double samples_per_s, tokens_per_s, steps_per_s;
    double flops_per_s; /* this rank's model FLOP/s over recent steps; NAN when not counted */
    double mfu;         /* flops_per_s / the peak (metrics_set_peak_flops); NAN when unknown */
    double eta_s;   /* seconds until total_steps at the current rate; NAN if unknown */
    double percent; /* 100 * step / total_steps; NAN if total_steps is 0 */
    int64_t samples_total, tokens_total; /* since metrics_begin (this run) */
    int64_t last_checkpoint_step;        /* -1 before the first checkpoint */
    double last_step_unix;               /* wall-clock time of the last step; NAN before it */
    double elapsed_s;                    /* since metrics_begin */
    int64_t eval_step;                   /* the last evaluation's step; -1 before one */
    bool early_stopped;                  /* metrics_stop_early was called */
    double eval_accuracy, eval_macro_f1; /* its "accuracy" and "macro_f1"; NAN when not given */
    double eval_micro_f1, eval_pearson;  /* multi-label's "micro_f1", regression's "pearson" */
};

/* A new, empty recorder in state "starting" (free with metrics_free()). */
struct metrics *metrics_new(void);
/* Stops the server if serving, then frees. NULL is a no-op. */
void metrics_free(struct metrics *m);

/*
 * Starts serving on addr:port (addr a numeric IPv4 address such as "0.0.0.0" or "127.0.0.1";
 * port 0 picks a free port, see metrics_port()). Returns 0, or -1 after printing why.
 * Call at most once per recorder.
 */
int metrics_serve(struct metrics *m, const char *addr, int port)
    __attribute__((warn_unused_result));
/* The port being served on, or 0 when not serving. */
int metrics_port(const struct metrics *m);

/*
 * Training starts (or resumes) at start_step of total_steps (0: unknown), with `epochs` epochs
 * and world_size processes; state becomes "running". `now` as in struct metrics_step.
 */
void metrics_begin(struct metrics *m, int64_t start_step, int64_t total_steps, int epochs,
                   int world_size, double now);
/* Records a completed step (see struct metrics_step). Steps must not go backwards. */
void metrics_step(struct metrics *m, const struct metrics_step *s);
/* Records one all-reduce (or one bucket's) duration in seconds, into the histogram. */
void metrics_allreduce(struct metrics *m, double seconds);
/* Records a checkpoint written at `step`, and how long writing it took (seconds). */
void metrics_checkpoint(struct metrics *m, int64_t step, double seconds);
/* Sets an evaluation result, e.g. ("accuracy", 0.91) or ("macro_f1", 0.88); name: [a-z0-9_]. */
void metrics_eval(struct metrics *m, const char *name, double value);
/* Early stopping: training ends at step instead of the total given to metrics_begin
 * (total_steps becomes step; /progress and the final line say "early_stopped": true). */
void metrics_stop_early(struct metrics *m, int64_t step);
/* While training runs: state "evaluating" (on) or "running" again (off). */
void metrics_evaluating(struct metrics *m, bool on);
/* The step the evaluation results are from (/progress eval_step, gantry_train_eval_step). */
void metrics_eval_step(struct metrics *m, int64_t step);
/* Training ended; state becomes "succeeded" or "failed". */
void metrics_finish(struct metrics *m, bool succeeded);
/* The device's peak FLOP/s (kernels/gpu.h gpu_peak_flops), the denominator of mfu; <= 0:
 * unknown (the default). */
void metrics_set_peak_flops(struct metrics *m, double peak);

/* Copies the current values (with rates and ETA computed) into *out. */
void metrics_get(struct metrics *m, struct metrics_snapshot *out);

/* Append the /metrics text or the /progress JSON to out. 0, or BUF_ETOOBIG. */
int metrics_render_prometheus(struct metrics *m, struct buf *out)
    __attribute__((warn_unused_result));
int metrics_render_progress(struct metrics *m, struct buf *out) __attribute__((warn_unused_result));

#endif /* GANTRY_METRICS_H */
