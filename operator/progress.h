/*
 * progress.h - the progress poller: reads rank 0's /progress (docs/metrics.md) for every Running
 * TrainingJob on an interval, and keeps per job what reconcile needs for status.progress and
 * hang detection (rec.h: progressDeadlineSeconds -> Stalled + gang restart).
 *
 * Every interval, for each cached job with status.phase Running, the poller looks for rank 0 of
 * the current gang (labels replica-index "0" and restart-count == status.restarts, phase Running,
 * a podIP) and GETs its URL (all jobs of a round concurrently, PROGRESS_PARALLEL at a time) (template, default PROGRESS_DEFAULT_URL; the placeholders {ip},
 * {port}, {ns}, {job}, {pod} are replaced; tests point it at a fake server on loopback with
 * --progress-url-template, since pod IPs are not reachable on the API tier). The per-job clock
 * (struct progress_clock) starts when a rank 0 is first seen running, and moves whenever the
 * reported step grows; a failed or timed-out request (a SIGSTOPped worker) does not move it. A
 * new pod (another UID) or gang restarts the clock. Hang detection only starts once rank 0 has
 * answered once in its gang (a worker that serves no /progress, e.g. an older image or a
 * network policy in the way, is never declared stalled); from then on timeouts count as no
 * progress. When the status.progress it would write
 * changes, the job's key is queued, so status is written at most once per interval per job.
 * Jobs that are not Running (or have no running rank 0) have no clock and keep the observed
 * status.progress.
 *
 * Threads: one poller thread; progress_lookup() is called by the workers (mutex inside).
 */
#ifndef GANTRY_PROGRESS_H
#define GANTRY_PROGRESS_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "operator/rec.h"

#define PROGRESS_DEFAULT_URL "http://{ip}:{port}/progress"
#define PROGRESS_DEFAULT_INTERVAL_MS 15000L
#define PROGRESS_URL_MAX 1024
#define PROGRESS_PARALLEL 32 /* reads in flight at once (a round never waits job after job) */

struct exec_shared;

/* ---- pure parts (tested in progress_test.c) */

/* The clock of one job's current rank 0. */
struct progress_clock {
    char uid[REC_UID_MAX]; /* "" : no clock */
    int restart;           /* the gang the clock belongs to */
    long long step;        /* last step read; -1 none yet */
    time_t since;          /* when the step last advanced, or the clock started */
    bool advanced;         /* the step advanced at least once in this gang */
};

/* One observation of rank 0 (uid, restart) at now; step -1 when the read failed. busy: rank 0
 * says it is evaluating (state "evaluating"), which counts as progress while the step stands
 * (an evaluation of a large set can outlast progressDeadlineSeconds; a hang in it still ends
 * in the workers' own collective timeout). */
void progress_clock_observe(struct progress_clock *c, const char *uid, int restart,
                            long long step, bool busy, time_t now);

/* Expands tmpl into out (n bytes); 0, or -1 when it does not fit or a {...} is unknown. */
int progress_url(const char *tmpl, const char *ns, const char *job, const char *pod,
                 const char *ip, int port, char *out, size_t n);

/* status.progress (new object) from a worker's /progress JSON (borrowed): step, totalSteps,
 * percent, epoch, loss, samplesPerSecond, etaSeconds, eta ("1h2m3s"), summary ("42/420 (10%)"),
 * lastCheckpointStep, state, lastProgressTime (since), and after an evaluation evalStep,
 * evalAccuracy, evalMacroF1 (from eval_step, eval.accuracy, eval.macro_f1), earlyStopped
 * (true when the worker says early_stopped). Fields the worker
 * reports as null or not
 * at all are left out. NULL when w has no integer "step". */
json_t *progress_status(const json_t *w, time_t since);

/* "3m9s", "1h2m", "2d3h"; "0s" for <= 0; out >= 16 bytes. */
void progress_fmt_eta(double seconds, char *out, size_t n);

/* ---- the poller */
struct progress_opts {
    long interval_ms;         /* 0: PROGRESS_DEFAULT_INTERVAL_MS */
    long timeout_ms;          /* per request; 0: min(interval, 5000) */
    const char *url_template; /* NULL: PROGRESS_DEFAULT_URL; copied */
    int port;                 /* {port}; 0: RENDER_METRICS_PORT */
};

struct progress_stats {
    atomic_long polls, reads, read_errors, status_changes;
};

struct progress;
/* sh (borrowed) must have jobs, pods and pod_index set, and outlive the poller. */
struct progress *progress_new(struct exec_shared *sh, const struct progress_opts *o);
int progress_start(struct progress *p) __attribute__((warn_unused_result));
void progress_stop(struct progress *p); /* joins the thread; safe when not started */
void progress_free(struct progress *p);
const struct progress_stats *progress_get_stats(const struct progress *p);

/* status.progress (new reference) from rank 0's final progress line: the termination message
 * (worker/obs.h) of the current gang's rank 0 (restart count rec_restarts(in), in->pods) when
 * it exited 0 and the message is a JSON object with an integer "step"; else NULL. */
json_t *progress_final(const struct rec_input *in);

/* What rec needs for job key: fills in->progress (a new reference in *hold, to json_decref()
 * after reconcile; NULL when none), progress_restart (-1 without a clock), progress_since and
 * progress_advanced; no clock until rank 0 of the gang has answered once. in->job and in->pods
 * must be set: when progress_final() has a reading, it is in->progress (a job can succeed
 * before the poller ever read it). p may be NULL (no poller): no clock. */
void progress_lookup(struct progress *p, const char *key, struct rec_input *in, json_t **hold);

#endif /* GANTRY_PROGRESS_H */
