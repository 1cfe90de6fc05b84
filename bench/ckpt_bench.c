/*
 * ckpt_bench.c - how long training is blocked per checkpoint (worker/ckpt.h) against the time the
 * whole write takes, on the disk under --dir.
 *
 *   ckpt_bench [--dir DIR] [--params N] [--tensors T] [--rounds R] [--keep K]
 *
 * The state is a model of N fp32 parameters in T tensors plus AdamW's m and v (12 N bytes, the
 * size of a real checkpoint of that model). The training thread checkpoints the way the worker
 * does (two-phase, ckpt.h): at the end of a step it hands the state to the background writer
 * (borrowed, no copy), runs the next step's forward and backward (which only read the state)
 * while the writer's staging thread copies it into its pre-faulted buffers, and waits at
 * ckpt_writer_fence before the optimizer step changes the state. The step simulated is the
 * smallest there is (batch 1: forward reads the weights, backward reads them and writes the
 * gradients, all memory-bound); a real step is longer, which leaves less of the copy for the
 * fence. Each round, on a fresh job directory:
 *   prefault     ckpt_writer_new + ckpt_writer_reserve: the one-time cost at job start;
 *   fwd_bwd_base the simulated forward and backward, without a checkpoint;
 *   fwd_bwd      the same while the writer copies and writes (what competing for memory and
 *                cores costs training: not a pause, but reported);
 *   blocked      the training thread's pauses: ckpt_snapshot_new + ckpt_snapshot_borrow of every
 *                tensor + ckpt_writer_save (the hand-off), plus the wait in ckpt_writer_fence;
 *   blocked_cpu  the CPU time the training thread used in those pauses;
 *   async_write  from the start of the pause to ckpt_writer_wait returning: staging, the write,
 *                fsyncs, rename and keep-K pruning;
 *   copy_fresh   the one-phase alternative's pause: ckpt_snapshot_add of every tensor (a copy
 *                into fresh memory on the training thread);
 *   sync_write   ckpt_write of the same state on the calling thread (what a writer without a
 *                background thread blocks training for): the "write time" of the verdict.
 * Each path keeps its own job directory, so a round also prunes the previous round's step.
 * One CSV row per round and measurement on stdout:
 *   round,metric,seconds,bytes
 * bench/ckpt_bench.sh runs it next to dd on the same disk and prints the verdict
 * (blocked <= 10 % of the write). Exit 0, or 1 when a write fails.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
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

/* The snapshot of step `step`: borrowing the state (two-phase) or copying it (one-phase). */
static struct ckpt_snapshot *snapshot_of(const struct bench_cfg *c, const float *state,
                                         int64_t step, int borrow)
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
            const float *src = state + (size_t)k * (size_t)c->params + (size_t)off;
            enum ckpt_part part = k ? CKPT_OPTIM : CKPT_WEIGHTS;
            if ((borrow ? ckpt_snapshot_borrow(s, part, name, CKPT_F32, 1, &n, src)
                        : ckpt_snapshot_add(s, part, name, CKPT_F32, 1, &n, src)) != 0) {
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

/* Batch-1 forward and backward of a linear model: reads w twice, writes the gradient g. */
static float fwd_bwd(const struct bench_cfg *c, const float *w, float *g, float x)
{
    float y0 = 0, y1 = 0, y2 = 0, y3 = 0;
    size_t n = (size_t)c->params & ~(size_t)3;

    for (size_t i = 0; i < n; i += 4) {
        y0 += w[i] * x;
        y1 += w[i + 1] * x;
        y2 += w[i + 2] * x;
        y3 += w[i + 3] * x;
    }
    float dy = (y0 + y1 + y2 + y3) * 1e-9f;
    for (size_t i = 0; i < n; i++)
        g[i] = dy * w[i] * x;
    return dy;
}

/* AdamW's update of w, m, v from g: the step that must wait for the fence. */
static void optimizer_step(const struct bench_cfg *c, float *state, const float *g)
{
    float *w = state, *m = state + c->params, *v = state + 2 * c->params;

    for (int64_t i = 0; i < c->params; i++) {
        m[i] = 0.9f * m[i] + 0.1f * g[i];
        v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
        w[i] -= 1e-3f * (m[i] / (sqrtf(v[i]) + 1e-8f) + 0.01f * w[i]);
    }
}

static int one_round(const struct bench_cfg *c, float *state, float *g, int round)
{
    int64_t bytes = c->params * 12;
    struct ckpt_snapshot *s = NULL;
    struct ckpt_writer *w = NULL;
    volatile float sink = 0;
    int rc = 1;

    /* job start: the writer and its pre-faulted buffers */
    double t0 = now_s();
    w = ckpt_writer_new(c->dir, "bench-async", c->keep);
    if (ckpt_writer_reserve(w, (size_t)bytes) != 0)
        goto out;
    row(round, "prefault", now_s() - t0, bytes);

    sink += fwd_bwd(c, state, g, 1.0f); /* warm-up: the gradient's pages faulted in */
    t0 = now_s();
    sink += fwd_bwd(c, state, g, 1.0f);
    row(round, "fwd_bwd_base", now_s() - t0, bytes);
    optimizer_step(c, state, g);

    /* the checkpoint at the end of a step: hand-off, next forward/backward, fence */
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    t0 = now_s();
    s = snapshot_of(c, state, 100 + round, 1);
    if (!s || ckpt_writer_save(w, s) != 0)
        goto out;
    s = NULL; /* stolen */
    double t1 = now_s(), c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    sink += fwd_bwd(c, state, g, 1.0f);
    double t2 = now_s(), c2 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    ckpt_writer_fence(w);
    double t3 = now_s(), c3 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    optimizer_step(c, state, g);
    if (ckpt_writer_wait(w) != 0)
        goto out;
    double t4 = now_s();
    row(round, "fwd_bwd", t2 - t1, bytes);
    row(round, "blocked", (t1 - t0) + (t3 - t2), bytes);
    row(round, "blocked_cpu", (c1 - c0) + (c3 - c2), bytes);
    row(round, "async_write", t4 - t0, bytes);
    ckpt_writer_free(w);
    w = NULL;

    /* one-phase and sync: the state copied on this thread, then written on this thread */
    t0 = now_s();
    s = snapshot_of(c, state, 100 + round, 0);
    if (!s)
        goto out;
    row(round, "copy_fresh", now_s() - t0, bytes);
    t0 = now_s();
    if (ckpt_write(c->dir, "bench-sync", c->keep, s) != 0)
        goto out;
    row(round, "sync_write", now_s() - t0, bytes);
    rc = sink == 12345.0f; /* keeps the simulated steps; never true */
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
        {"keep", required_argument, NULL, 'k'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
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
        case 'h':
            return 1;
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
    int rc = 0, pa = parse_args(argc, argv, &c);

    if (pa != 0) {
        fprintf(pa > 0 ? stdout : stderr, "usage: ckpt_bench [--dir DIR] [--params N>=1024] "
                "[--tensors T] [--rounds R] [--keep K]\n");
        if (pa > 0)
            printf("How long training is blocked per checkpoint against the time the whole "
                   "write takes, on\nthe disk under --dir (default .): N fp32 parameters "
                   "(default 16M) in T tensors (24)\nplus AdamW's m and v, R rounds (3), "
                   "keeping K checkpoints (1). One CSV row per round\nand measurement: "
                   "round,metric,seconds,bytes. bench/ckpt_bench.sh runs it beside dd.\n");
        return pa > 0 ? 0 : 64;
    }
    float *state = state_new(c.params), *g = xcalloc((size_t)c.params, sizeof(float));
    printf("# ckpt_bench: %" PRId64 " params x (w, m, v) fp32 = %.1f MiB per checkpoint, "
           "%d tensors per part, dir %s\n",
           c.params, (double)c.params * 12 / (1 << 20), c.tensors, c.dir);
    printf("round,metric,seconds,bytes\n");
    for (int r = 0; r < c.rounds && rc == 0; r++)
        if (one_round(&c, state, g, r) != 0) {
            fprintf(stderr,
                    "ckpt_bench: round %d failed (see the message above); is %s "
                    "writable with %.1f MiB free?\n",
                    r, c.dir, (double)c.params * 24 / (1 << 20));
            rc = 1;
        }
    free(state);
    free(g);
    return rc;
}
