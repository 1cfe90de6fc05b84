/*
 * obs.h - the training loop's one handle on observability: metrics server + TensorBoard files.
 *
 * A thin glue over worker/metrics.h and worker/tbevent.h so that the training loop needs five
 * calls (obs_open, obs_step, obs_eval, obs_checkpoint, obs_close). On rank 0 it serves /metrics
 * and /progress and writes TensorBoard scalars every log_interval steps; on other ranks it only
 * records (cheap, no thread, no files). Tags and metric names are listed in docs/metrics.md.
 *
 * Failure policy: observability must not stop training. A metrics port that cannot be bound is
 * an error at obs_open() (a configuration mistake the user should see at once); a TensorBoard
 * write that fails later is reported once on stderr and further event writes are skipped.
 * Thread notes: call obs_* from the training thread; the metrics server has its own thread.
 */
#ifndef GANTRY_OBS_H
#define GANTRY_OBS_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/metrics.h"

struct obs_config {
    int rank, world_size;
    const char *metrics_addr; /* e.g. "0.0.0.0"; NULL means "0.0.0.0" */
    int metrics_port;         /* 0: an ephemeral port (tests); < 0: do not serve */
    const char *tb_dir;       /* TensorBoard directory; NULL or "": no event files */
    int64_t start_step;       /* steps already done (resuming from a checkpoint), else 0 */
    int64_t total_steps;      /* 0 when unknown */
    int epochs;
    int log_interval; /* write TensorBoard scalars every this many steps (>= 1) */
    /* Rank 0's termination message file (the pod's terminationMessagePath): on success,
     * obs_close() writes the final progress there (see below). NULL: $GANTRY_TERMINATION_LOG,
     * else OBS_TERMINATION_LOG. */
    const char *termination_log;
};

#define OBS_TERMINATION_LOG "/dev/termination-log"
/* The final progress line stays below this, so that the operator's copy of the terminated
 * container's message (1 KiB, operator/rec.h) holds all of it. */
#define OBS_TERMINATION_MAX 768

struct obs;

/* A new handle (free with obs_close()), or NULL after printing why (port in use, bad dir). */
struct obs *obs_open(const struct obs_config *c);

/*
 * Records a finished step (see struct metrics_step) and the seconds spent in all-reduce during
 * it (0 if none). Returns true when this step was a log step (step % log_interval == 0), after
 * writing train/loss (mean over the interval), train/lr, train/samples_per_second,
 * train/tokens_per_second and train/allreduce_seconds (mean per step) and flushing the file.
 */
bool obs_step(struct obs *o, const struct metrics_step *s, double allreduce_seconds);

/* An evaluation result at `step`: /metrics gantry_train_eval{metric=name}, tag eval/<name>. */
void obs_eval(struct obs *o, int64_t step, const char *name, double value);
/* An evaluation during training begins (on) or ends: /progress state "evaluating", which the
 * operator's hang detection counts as progress while the step stands. NULL is a no-op. */
void obs_evaluating(struct obs *o, bool on);

/* A checkpoint was written at `step`, taking `seconds`. */
void obs_checkpoint(struct obs *o, int64_t step, double seconds);

/* The recorder, for metrics_get() (the log line) or direct use; borrowed. */
struct metrics *obs_metrics(struct obs *o);

/* Marks the end of training, flushes and closes the event file, stops the server, frees.
 * On rank 0, when `succeeded`, also writes the final progress as one JSON line (the /progress
 * fields the operator reads: state, step, total_steps, percent, epoch, loss, samples_per_second,
 * eta_seconds, last_checkpoint_step, and once evaluated eval_step with eval's accuracy and
 * macro_f1; under OBS_TERMINATION_MAX bytes) into the termination
 * message file, so a job that ends between two reads of /progress still gets status.progress
 * and status.lastCheckpoint (operator/progress.h). The file is only written when it exists:
 * the kubelet creates it in a container; elsewhere nothing is created. NULL is a no-op. */
void obs_close(struct obs *o, bool succeeded);

#endif /* GANTRY_OBS_H */
