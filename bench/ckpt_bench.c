/*
 * ckpt_bench.c - how long training is blocked per checkpoint (worker/ckpt.h) against the time the
 * whole write takes, on the disk under --dir.
 *
 *   ckpt_bench [--dir DIR] [--params N] [--tensors T] [--rounds R] [--keep K]
 *
 * The state is a model of N fp32 parameters in T tensors plus AdamW's m and v (12 N bytes, the
 * size of a real checkpoint of that model). Each round, on a fresh job directory:
 *   blocked  the training thread's pause: ckpt_snapshot_new + ckpt_snapshot_add of every tensor
 *            (the copy) + ckpt_writer_save (hand-off to the background writer);
 *   blocked_cpu  the CPU time the training thread used in that pause (on a busy machine the
 *            pause is longer than its CPU time: the copy waited for a core);
 *   async    from the start of the pause to ckpt_writer_wait returning: the background write,
 *            fsyncs, rename and keep-K pruning included;
 *   sync     ckpt_write of the same state on the calling thread (what a writer without a
 *            background thread blocks training for): the "write time" of the verdict.
 * Each path keeps its own job directory, so a round also prunes the previous round's step.
 * One CSV row per round and measurement on stdout:
 *   round,metric,seconds,bytes
 * bench/ckpt_bench.sh runs it next to dd on the same disk and prints the verdict
 * (blocked <= 10 % of the write). Exit 0, or 1 when a write fails.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "worker/ckpt.h"

struct bench_cfg {
    const char *dir;
    int64_t params;
    int tensors;
    int rounds;
    int keep;
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* The training state: weights, m, v (3 x params floats), filled with something non-zero so the
 * pages exist before the first checkpoint, as they would after a training step. */
static float *state_new(int64_t params)
{
    float *p = xcalloc((size_t)params * 3, sizeof(float));
    for (int64_t i = 0; i < params * 3; i++)
        p[i] = (float)(i % 1000) * 1e-3f;
    return p;
}

/* Builds the snapshot of step `step` from the state (the copy that training waits for). */
static struct ckpt_snapshot *snapshot_of(const struct bench_cfg *c, const float *state,
                                         int64_t step)
{
    static const char *const part_name[3] = {"w", "adam_m", "adam_v"};
    struct ckpt_meta meta = {.step = step, .world_size = 1};
    struct ckpt_snapshot *s = ckpt_snapshot_new(&meta);
    int64_t per = c->params / c->tensors;

    snprintf(meta.config_hash, sizeof(meta.config_hash), "bench");
    for (int k = 0; k < 3; k++) {
        for (int t = 0; t < c->tensors; t++) {
            char name[64];
            int64_t off = (int64_t)t * per;
            int64_t n = t == c->tensors - 1 ? c->params - off : per;
            snprintf(name, sizeof(name), "layer%d.%s", t, part_name[k]);
            if (ckpt_snapshot_add(s, k ? CKPT_OPTIM : CKPT_WEIGHTS, name, CKPT_F32, 1, &n,
                                  state + (size_t)k * (size_t)c->params + (size_t)off) != 0) {
                ckpt_snapshot_free(s);
                return NULL;
            }
        }
    }
    return s;
}

static void row(int round, const char *metric, double secs, int64_t bytes)
{
    printf("%d,%s,%.6f,%" PRId64 "\n", round, metric, secs, bytes);
    fflush(stdout);
}

static int one_round(const struct bench_cfg *c, const float *state, int round)
{
    char job[64];
    int64_t bytes = c->params * 12;
    struct ckpt_snapshot *s = NULL;
    struct ckpt_writer *w = NULL;
    int rc = 1;

    /* async: the writer's path, timed from the training thread's side */
    /* one job per path, so each round also prunes the previous round's step (keep-K) */
    snprintf(job, sizeof(job), "bench-async");
    w = ckpt_writer_new(c->dir, job, c->keep);
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = now_s();
    s = snapshot_of(c, state, 100 + round);
    if (!s || ckpt_writer_save(w, s) != 0)
        goto out;
    s = NULL; /* stolen */
    double t1 = now_s(), c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    if (ckpt_writer_wait(w) != 0)
        goto out;
    double t2 = now_s();
    row(round, "blocked", t1 - t0, bytes);
    row(round, "blocked_cpu", c1 - c0, bytes);
    row(round, "async_write", t2 - t0, bytes);

    /* sync: the same state written on this thread */
    snprintf(job, sizeof(job), "bench-sync");
    s = snapshot_of(c, state, 100 + round);
    if (!s)
        goto out;
    t0 = now_s();
    if (ckpt_write(c->dir, job, c->keep, s) != 0)
        goto out;
    row(round, "sync_write", now_s() - t0, bytes);
    rc = 0;
out:
    ckpt_snapshot_free(s);
    ckpt_writer_free(w);
    return rc;
}

static int parse_args(int argc, char **argv, struct bench_cfg *c)
{
    static const struct option opts[] = {
        {"dir", required_argument, NULL, 'd'},     {"params", required_argument, NULL, 'p'},
        {"tensors", required_argument, NULL, 't'}, {"rounds", required_argument, NULL, 'r'},
        {"keep", required_argument, NULL, 'k'},    {NULL, 0, NULL, 0},
    };
    int o;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'd':
            c->dir = optarg;
            break;
        case 'p':
            c->params = strtoll(optarg, NULL, 10);
            break;
        case 't':
            c->tensors = atoi(optarg);
            break;
        case 'r':
            c->rounds = atoi(optarg);
            break;
        case 'k':
            c->keep = atoi(optarg);
            break;
        default:
            return -1;
        }
    }
    if (c->params < 1024 || c->tensors < 1 || c->tensors > 4096 || c->rounds < 1 ||
        c->params / c->tensors < 1)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_cfg c = {.dir = ".", .params = 16 << 20, .tensors = 24, .rounds = 3, .keep = 1};
    int rc = 0;

    if (parse_args(argc, argv, &c) != 0) {
        fprintf(stderr, "usage: ckpt_bench [--dir DIR] [--params N>=1024] [--tensors T] "
                        "[--rounds R] [--keep K]\n");
        return 64;
    }
    float *state = state_new(c.params);
    printf("# ckpt_bench: %" PRId64 " params x (w, m, v) fp32 = %.1f MiB per checkpoint, "
           "%d tensors per part, dir %s\n",
           c.params, (double)c.params * 12 / (1 << 20), c.tensors, c.dir);
    printf("round,metric,seconds,bytes\n");
    for (int r = 0; r < c.rounds && rc == 0; r++)
        if (one_round(&c, state, r) != 0) {
            fprintf(stderr,
                    "ckpt_bench: round %d failed (see the message above); is %s "
                    "writable with %.1f MiB free?\n",
                    r, c.dir, (double)c.params * 24 / (1 << 20));
            rc = 1;
        }
    free(state);
    return rc;
}
