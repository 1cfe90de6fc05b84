/* The training loop on the GPU (train_gpu.h) against the CPU loop (train.h), label gpu; exits 77
 * (skipped) without a CUDA device:
 *   - same initial weights and data: every step's loss within 2e-3 relative, parameters close
 *     (variable lengths, gradient accumulation with a short last step, two epochs, clipping on);
 *   - checkpoints across devices: the state saved by the GPU loop at step 3 resumes on the CPU,
 *     and the CPU's on the GPU, and both end where an uninterrupted CPU run ends;
 *   - the GPU loop learns the toy task (loss falls).
 * Two ranks with NCCL are exercised by hack/gpu-check.sh (gantry-run --nproc 2) when the machine
 * has two GPUs. */
#include "worker/train_gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "common/xalloc.h"
#include "kernels/bf16.h"
#include "worker/model_gpu.h"
#include "worker/obs.h"
#include "worker/train_testdata.h"

enum { N = 90, L = 20, V = 64, MAXLOG = 64 };
static int32_t ids[N * L], lens[N], labels[N];

/* The shared toy task (train_testdata.h): label 1 iff token 3 appears; lengths 3..L. */
static struct train_data toy(void)
{
    static const struct train_testdata_spec spec = {.n = N, .max_len = L, .min_len = 3,
                                                    .vocab = V, .seed = 99};
    return train_testdata_toy(&spec, ids, lens, labels);
}

static const struct model_config mc = {.kind = MODEL_TRANSFORMER, .vocab = V, .classes = 2,
                                       .max_seq_len = L, .hidden = 32, .layers = 2, .heads = 4,
                                       .ffn = 128, .pool = MODEL_POOL_MEAN};

static struct train_opts opts(FILE *log)
{
    struct train_opts o;
    memset(&o, 0, sizeof(o));
    o.epochs = 2, o.batch = 8, o.accum = 2; /* 90 examples: 6 steps per epoch, the last of 10 */
    optim_config_default(&o.optim);
    o.optim.lr = 3e-3f;
    o.optim.grad_clip = 0.5f; /* clipping active on most steps */
    o.warmup_steps = 2;
    o.seed = 5, o.log_interval = 1;
    o.rank = 0, o.world_size = 1;
    o.json_out = log;
    return o;
}

/* Values of `key` ("\"loss\":") in the JSON progress lines in f (one per step with log_interval
 * 1). */
static int values(FILE *f, const char *key, double *out)
{
    char line[512];
    int n = 0;
    rewind(f);
    while (n < MAXLOG && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, key);
        if (p)
            out[n++] = strtod(p + strlen(key), NULL);
    }
    return n;
}

/* Root mean square of a - b: robust to the few parameters whose tiny gradient's sign differs
 * between the devices (AdamW turns those into a full +-lr step). */
static double rms_diff(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

static int close_rel(double gpu, double cpu, double tol)
{
    return fabs(gpu - cpu) <= tol * fmax(1.0, fabs(cpu));
}

/* Both loops on the same data and init (model cfg), with label smoothing e and class weights cw
 * (NULL: none); returns the first step's loss. */
static double follows(const struct train_data *data, const struct model_config *cfg, float e,
                      const float *cw)
{
    struct train_data d = *data;
    struct model mcpu, mgpu;
    struct train_result rc, rg;
    double lc[MAXLOG], lg[MAXLOG], nc_[MAXLOG], ng_[MAXLOG];
    char err[256];
    FILE *fc = tmpfile(), *fg = tmpfile();

    TEST_CHECK(fc && fg);
    TEST_EQ_INT(model_init(&mcpu, cfg, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&mgpu, cfg, 8, 11, err, sizeof(err)), 0);
    struct train_opts oc = opts(fc), og = opts(fg);
    oc.label_smoothing = og.label_smoothing = e;
    oc.class_weight = og.class_weight = cw;
    printf("%s, label smoothing %g, class weights %s\n",
           d.label_words > 0 ? "multi-label" : d.label_words ? "regression" : "single-label",
           (double)e, cw ? "on" : "off");
    TEST_EQ_INT(train_run(&mcpu, &d, &oc, &rc), 0);
    TEST_EQ_INT(train_gpu_run(&mgpu, &d, &og, &rg), 0);
    int nc = values(fc, "\"loss\":", lc), ng = values(fg, "\"loss\":", lg);
    TEST_EQ_INT(nc, 12);
    TEST_EQ_INT(ng, nc);
    TEST_EQ_INT((int)rg.steps, (int)rc.steps);
    /* the gradient norm before clipping: a wrong loss scale shows here (AdamW hides it) */
    TEST_EQ_INT(values(fc, "\"grad_norm\":", nc_), nc);
    TEST_EQ_INT(values(fg, "\"grad_norm\":", ng_), nc);
    int bad = 0;
    for (int i = 0; i < nc && i < ng; i++) {
        int ok = close_rel(lg[i], lc[i], 2e-3) && close_rel(ng_[i], nc_[i], 2e-3);
        if (!ok || i < 3)
            printf("step %2d  cpu loss %.6f norm %.4f  gpu loss %.6f norm %.4f  %s\n", i + 1,
                   lc[i], nc_[i], lg[i], ng_[i], ok ? "ok" : "MISMATCH");
        bad += !ok;
    }
    TEST_EQ_INT(bad, 0);
    double dp = rms_diff(mgpu.params, mcpu.params, mcpu.n_params);
    printf("rms(param gpu - cpu) after %ld steps: %.3g\n", rc.steps, dp);
    TEST_CHECK(dp < 5e-4);
    TEST_CHECK(lg[ng - 1] < lg[0]); /* it learns */
    model_cleanup(&mcpu), model_cleanup(&mgpu);
    fclose(fc), fclose(fg);
    return lg[0];
}

static double follows_cpu(float e, const float *cw)
{
    struct train_data d = toy();
    return follows(&d, &mc, e, cw);
}

static void test_gpu_follows_cpu(void)
{
    static const float cw[2] = {0.7f, 1.6f};
    double plain = follows_cpu(0.0f, NULL), smoothed = follows_cpu(0.2f, NULL);
    double weighted = follows_cpu(0.0f, cw);
    /* the same first batch and parameters: only the smoothing (the weights) change the loss */
    TEST_CHECK(fabs(smoothed - plain) > 1e-4);
    TEST_CHECK(fabs(weighted - plain) > 1e-4);
}

/* ---- checkpoints across devices ---- */

struct saved {
    long step, t;
    float *p, *m, *v;
};

static int keep(void *ctx, long step, int epoch, const struct model *m, const struct adamw *opt)
{
    struct saved *s = ctx;
    (void)epoch;
    if (step != 3)
        return 0;
    s->step = step, s->t = opt->t;
    memcpy(s->p, m->params, m->n_params * sizeof(float));
    memcpy(s->m, opt->m, m->n_params * sizeof(float));
    memcpy(s->v, opt->v, m->n_params * sizeof(float));
    return 0;
}

/* Runs 6 steps on `gpu` (or the CPU) from step 0, or from *from; saves step 3 into *to (may be
 * NULL); final parameters into params. */
static void run6(int gpu, const struct saved *from, struct saved *to, float *params)
{
    struct train_data d = toy();
    struct model m;
    struct adamw opt;
    struct train_result r;
    char err[256];
    struct train_opts o = opts(NULL);

    TEST_EQ_INT(model_init(&m, &mc, 8, 11, err, sizeof(err)), 0);
    adamw_init(&opt, m.n_params);
    o.max_steps = 6;
    o.opt = &opt;
    if (from) {
        memcpy(m.params, from->p, m.n_params * sizeof(float));
        memcpy(opt.m, from->m, m.n_params * sizeof(float));
        memcpy(opt.v, from->v, m.n_params * sizeof(float));
        opt.t = from->t;
        o.start_step = from->step;
    }
    if (to) {
        o.checkpoint = keep, o.checkpoint_ctx = to, o.checkpoint_interval = 3;
    }
    TEST_EQ_INT(gpu ? train_gpu_run(&m, &d, &o, &r) : train_run(&m, &d, &o, &r), 0);
    TEST_EQ_INT((int)r.steps, 6);
    TEST_EQ_INT((int)opt.t, 6);
    memcpy(params, m.params, m.n_params * sizeof(float));
    adamw_cleanup(&opt);
    model_cleanup(&m);
}

static void saved_init(struct saved *s, size_t n)
{
    s->step = -1;
    s->p = xcalloc(n, sizeof(float)), s->m = xcalloc(n, sizeof(float));
    s->v = xcalloc(n, sizeof(float));
}

static void test_checkpoint_across_devices(void)
{
    struct model probe;
    char err[256];
    TEST_EQ_INT(model_init(&probe, &mc, 1, 11, err, sizeof(err)), 0);
    size_t n = probe.n_params;
    model_cleanup(&probe);
    float *ref = xcalloc(n, sizeof(float)), *a = xcalloc(n, sizeof(float));
    float *b = xcalloc(n, sizeof(float));
    struct saved sg, sc;
    saved_init(&sg, n), saved_init(&sc, n);

    run6(0, NULL, &sc, ref);   /* CPU, uninterrupted; its step-3 state in sc */
    run6(1, NULL, &sg, b);     /* GPU; its step-3 state in sg */
    TEST_EQ_INT((int)sg.step, 3);
    TEST_EQ_INT((int)sg.t, 3);
    TEST_CHECK(rms_diff(sg.p, sc.p, n) < 5e-4); /* the GPU's checkpoint is the CPU's */
    TEST_CHECK(rms_diff(sg.m, sc.m, n) < 1e-4);
    TEST_CHECK(rms_diff(sg.v, sc.v, n) < 1e-5);
    run6(0, &sg, NULL, a); /* GPU checkpoint resumed on the CPU */
    double d1 = rms_diff(a, ref, n);
    run6(1, &sc, NULL, b);     /* CPU checkpoint resumed on the GPU */
    double d2 = rms_diff(b, ref, n);
    /* what ignoring the checkpoint would give: steps 3..6 from the initial weights */
    struct saved fresh;
    saved_init(&fresh, n);
    {
        struct model m0;
        TEST_EQ_INT(model_init(&m0, &mc, 1, 11, err, sizeof(err)), 0);
        memcpy(fresh.p, m0.params, n * sizeof(float));
        model_cleanup(&m0);
        fresh.step = 3, fresh.t = 3; /* moments zero, as if the checkpoint were lost */
    }
    run6(0, &fresh, NULL, a);
    double d0 = rms_diff(a, ref, n);
    printf("rms vs uninterrupted CPU: resumed GPU->CPU %.3g, CPU->GPU %.3g; checkpoint ignored "
           "%.3g\n", d1, d2, d0);
    TEST_CHECK(d1 < 5e-4);
    TEST_CHECK(d2 < 5e-4);
    TEST_CHECK(d0 > 4 * fmax(d1, d2)); /* a resumed run is told from one that lost its state */
    free(fresh.p), free(fresh.m), free(fresh.v);
    free(ref), free(a), free(b);
    free(sg.p), free(sg.m), free(sg.v), free(sc.p), free(sc.m), free(sc.v);
}

/* obs gets every step, batched: loss read every TRAIN_GPU_OBS_BATCH steps when the log interval
 * is longer; each step of a batch carries the batch's mean loss, counts are exact. */
static void test_obs(void)
{
    struct train_data d = toy();
    struct model mcpu, mgpu;
    struct train_result rc, rg;
    double lc[MAXLOG * 2];
    char err[256];
    FILE *fc = tmpfile();
    struct obs_config ocfg = {.rank = 0, .world_size = 1, .metrics_port = -1, .total_steps = 72,
                              .epochs = 12, .log_interval = 100};
    struct obs *obc = obs_open(&ocfg), *obg = obs_open(&ocfg);
    struct metrics_snapshot sc, sg;

    TEST_CHECK(fc && obc && obg);
    TEST_EQ_INT(model_init(&mcpu, &mc, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&mgpu, &mc, 8, 11, err, sizeof(err)), 0);
    struct train_opts oc = opts(fc), og = opts(NULL);
    oc.epochs = og.epochs = 12; /* 72 steps: one obs batch of 64, then 8 */
    og.log_interval = 100;
    /* What is checked is obs's batching, so the two runs must stay close for 72 steps: without
     * clipping and at a smaller rate; with opts()'s, rounding differences (GPU vs CPU sums, or
     * -O1 vs -O3) grow from 1e-5 at step 13 to a different last loss (0.011 vs 0.050). */
    oc.optim.grad_clip = og.optim.grad_clip = 0.0f;
    oc.optim.lr = og.optim.lr = 1e-3f;
    oc.obs = obc, og.obs = obg;
    TEST_EQ_INT(train_run(&mcpu, &d, &oc, &rc), 0);
    TEST_EQ_INT(train_gpu_run(&mgpu, &d, &og, &rg), 0);
    rewind(fc);
    char line[512];
    int n = 0;
    while (n < MAXLOG * 2 && fgets(line, sizeof(line), fc)) {
        const char *p = strstr(line, "\"loss\":");
        if (p)
            lc[n++] = strtod(p + 7, NULL);
    }
    TEST_EQ_INT(n, 72);
    double tail = 0.0;
    for (int i = 64; i < 72 && i < n; i++)
        tail += lc[i] / 8;
    metrics_get(obs_metrics(obc), &sc);
    metrics_get(obs_metrics(obg), &sg);
    TEST_EQ_INT((int)sg.step, 72);
    TEST_EQ_INT((int)sg.samples_total, (int)sc.samples_total);
    TEST_EQ_INT((int)sg.tokens_total, (int)sc.tokens_total);
    printf("obs: last loss %.6f (GPU: mean of steps 65..72; CPU run's %.6f)\n", sg.loss, tail);
    TEST_CHECK(close_rel(sg.loss, tail, 2e-3));
    /* the GPU loop counts model FLOPs (/metrics' model FLOP/s); the CPU loop does not */
    TEST_CHECK(isfinite(sg.flops_per_s) && sg.flops_per_s > 0 && isnan(sc.flops_per_s));
    obs_close(obc, true), obs_close(obg, true);
    model_cleanup(&mcpu), model_cleanup(&mgpu);
    fclose(fc);
}

/* ---- all-reduce overlapped with backward ---- */

enum { MAXCALLS = 4096 };
struct calls {
    int k;
    const float *ptr[MAXCALLS];
    size_t len[MAXCALLS];
    int twice; /* host memory (the mock): add the buffer to itself, as a second identical rank */
};

/* The reduce hook: records every call. On the mock it sums "two ranks" (x + x, exact), with
 * world_size 2 undoing it (x 0.5, exact); a bucket reduced before its gradients were final, or
 * twice, or not at all, then changes the result. On a GPU (device memory) it is the identity, a
 * 1-rank sum; train_gpu_nccl_test.sh checks real sums over 2 ranks. */
static int record(float *buf, size_t n, void *ctx)
{
    struct calls *c = ctx;
    if (c->k < MAXCALLS)
        c->ptr[c->k] = buf, c->len[c->k] = n;
    c->k++;
    if (c->twice)
        for (size_t i = 0; i < n; i++)
            buf[i] += buf[i];
    return 0;
}

/* Every float of the n + MODEL_GPU_STATS buffer is in exactly one range of the plan; buckets
 * follow the unit order (end increasing, the last ends at the last unit). */
static void check_plan(const struct train_plan *p, size_t n, int units)
{
    unsigned char *seen = xcalloc(n + MODEL_GPU_STATS, 1);
    int bad = 0;
    for (int b = 0; b < p->nb; b++) {
        TEST_CHECK(p->end[b] > (b ? p->end[b - 1] : 0));
        for (int i = p->first[b]; i < p->first[b + 1]; i++)
            for (size_t j = p->r[i].off; j < p->r[i].off + p->r[i].n; j++)
                bad += j >= n + MODEL_GPU_STATS || seen[j]++ != 0;
    }
    for (size_t j = 0; j < n + MODEL_GPU_STATS; j++)
        bad += seen[j] != 1;
    TEST_EQ_INT(bad, 0);
    TEST_EQ_INT(p->end[p->nb - 1], units);
    free(seen);
}

/* One run of the GPU loop (or train_run when go is NULL) with the recording reduce hook; final
 * parameters into params, progress lines into log. */
static void run_reduced(const struct train_gpu_opts *go, struct calls *c, float *params, FILE *log)
{
    struct train_data d = toy();
    struct model m;
    struct train_result r;
    char err[256];
    struct train_opts o = opts(log);

    TEST_EQ_INT(model_init(&m, &mc, 8, 11, err, sizeof(err)), 0);
    c->k = 0;
    c->twice = strcmp(model_gpu_backend(), "cpu-mock") == 0;
    o.world_size = c->twice ? 2 : 1; /* rank 0 of 2 on the mock: 45 examples, 3 steps an epoch */
    o.reduce = record, o.reduce_ctx = c;
    TEST_EQ_INT(go ? train_gpu_run_opts(&m, &d, &o, go, &r) : train_run(&m, &d, &o, &r), 0);
    memcpy(params, m.params, m.n_params * sizeof(float));
    model_cleanup(&m);
}

static void test_overlapped_allreduce(void)
{
    struct model probe;
    char err[256];
    TEST_EQ_INT(model_init(&probe, &mc, 1, 11, err, sizeof(err)), 0);
    const size_t n = probe.n_params;
    const int U = MODEL_GPU_UNITS(mc.layers);
    static struct calls cc, c0, c1, c2;
    float *pc = xcalloc(n, sizeof(float)), *p0 = xcalloc(n, sizeof(float));
    float *p1 = xcalloc(n, sizeof(float)), *p2 = xcalloc(n, sizeof(float));
    FILE *f0 = tmpfile(), *f1 = tmpfile();
    struct train_plan each, merged;
    /* 1 byte: every unit its own bucket (a layer: 12 slices of the stacked tensors); 64 KiB: the
     * head and both layers (~50 KB each) in one bucket, merged into contiguous ranges, the
     * embeddings in another */
    const struct train_gpu_opts none = {.bucket_bytes = 0}, small = {.bucket_bytes = 1},
                                mid = {.bucket_bytes = 64 << 10};

    train_plan_init_stats(&each, &probe, small.bucket_bytes, MODEL_GPU_STATS);
    train_plan_init_stats(&merged, &probe, mid.bucket_bytes, MODEL_GPU_STATS);
    TEST_EQ_INT(each.nb, U);
    TEST_EQ_INT(merged.nb, 2);
    TEST_EQ_INT(merged.end[0], 3);
    /* with every layer in it, bucket 0 is ln1w .. clsb + the statistics: one range; wte, wpe one */
    TEST_EQ_INT(merged.first[1], 1);
    TEST_EQ_INT(merged.first[2], 2);
    check_plan(&each, n, U);
    check_plan(&merged, n, U);

    run_reduced(NULL, &cc, pc, NULL);
    run_reduced(&none, &c0, p0, f0);
    run_reduced(&small, &c1, p1, f1);
    run_reduced(&mid, &c2, p2, NULL);
    const int steps = cc.k / 2; /* train_run: loss statistics, then the gradients */
    printf("overlap: %d steps; reduce calls: after backward %d, %d buckets %d, %d buckets %d\n",
           steps, c0.k, each.nb, c1.k, merged.nb, c2.k);
    TEST_EQ_INT(c0.k, steps); /* one call over n + MODEL_GPU_STATS floats a step */
    TEST_CHECK(c0.len[0] == n + MODEL_GPU_STATS);
    /* every bucket's ranges once a step, in the plan's order (= backward's), on the right floats */
    const struct train_plan *plans[2] = {&each, &merged};
    const struct calls *cs[2] = {&c1, &c2};
    for (int k = 0; k < 2; k++) {
        const struct train_plan *p = plans[k];
        const int per = p->first[p->nb];
        int bad = 0, at0 = -1;
        TEST_EQ_INT(cs[k]->k, steps * per);
        for (int i = 0; i < per; i++)
            if (p->r[i].off == 0)
                at0 = i;
        TEST_CHECK(at0 >= 0);
        for (int i = 0; i < cs[k]->k && i < MAXCALLS && at0 >= 0; i++) {
            const float *base = cs[k]->ptr[(i / per) * per + at0];
            bad += cs[k]->len[i] != p->r[i % per].n ||
                   cs[k]->ptr[i] != base + p->r[i % per].off;
        }
        TEST_EQ_INT(bad, 0);
    }
    /* bit-identical: overlapped = after backward (and = train_run on the mock) */
    TEST_CHECK(memcmp(p1, p0, n * sizeof(float)) == 0);
    TEST_CHECK(memcmp(p2, p0, n * sizeof(float)) == 0);
    double l0[MAXLOG], l1[MAXLOG];
    int k0 = values(f0, "\"loss\":", l0), k1 = values(f1, "\"loss\":", l1);
    TEST_EQ_INT(k1, k0);
    for (int i = 0; i < k0 && i < k1; i++)
        TEST_CHECK(l0[i] == l1[i]);
    if (!strcmp(model_gpu_backend(), "cpu-mock"))
        TEST_CHECK(memcmp(p0, pc, n * sizeof(float)) == 0);
    else
        TEST_CHECK(rms_diff(p0, pc, n) < 5e-4);
    train_plan_cleanup(&each), train_plan_cleanup(&merged);
    model_cleanup(&probe);
    free(pc), free(p0), free(p1), free(p2);
    fclose(f0), fclose(f1);
}

/* ---- bf16 mixed precision ---- */

/* The value of fp32 bit pattern u, exponent 255 read as an ordinary binade (2^128 for 0x7F800000),
 * in double: exact for every pattern. */
static double pattern_value(uint32_t u)
{
    int e = (int)((u >> 23) & 0xff);
    double m = (double)(u & 0x7fffff);
    double v = e ? ldexp(1.0 + m / 8388608.0, e - 127) : ldexp(m, -149);
    return u >> 31 ? -v : v;
}

/* Round to nearest even by definition: the nearer of the two bf16 neighbours, the even one on a
 * tie, in exact double arithmetic; past the largest finite bf16 that is the infinity pattern. */
static uint16_t ref_bf16(uint32_t u)
{
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* same sign, next magnitude */
    double f = fabs(pattern_value(u)), a = fabs(pattern_value(lo)), b = fabs(pattern_value(hi));
    uint32_t pick = f - a < b - f ? lo : f - a > b - f ? hi : ((lo >> 16) & 1u) ? hi : lo;
    return (uint16_t)(pick >> 16);
}

/* kernels/bf16.h's conversion (the same inline code the kernels run) against ref_bf16 over every
 * sign/exponent/upper mantissa pattern with low halves at and around the midpoint; NaN, inf,
 * overflow, subnormals; and the exact round trip of every non-NaN bf16. */
static void test_bf16_rounding(void)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4321};
    int bad = 0, shown = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7f80u) == 0x7f80u) /* inf and NaN: below */
            continue;
        for (size_t i = 0; i < sizeof(lows) / sizeof(lows[0]); i++) {
            uint32_t u = h << 16 | lows[i];
            uint16_t got = bf16_from_f32(bf16_asfloat(u)), want = ref_bf16(u);
            if (got != want && shown++ < 5)
                printf("bf16_from_f32(0x%08x) = 0x%04x, want 0x%04x\n", (unsigned)u, got, want);
            bad += got != want;
        }
        uint16_t b = (uint16_t)h; /* exact: bf16 -> fp32 -> bf16 */
        bad += bf16_from_f32(bf16_to_f32(b)) != b;
    }
    TEST_EQ_INT(bad, 0);
    /* ties: 1 + 2^-8 to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6; just past halfway goes up */
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x3f808000u)), 0x3f80);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x3f818000u)), 0x3f82);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x3f808001u)), 0x3f81);
    TEST_EQ_INT(bf16_from_f32(-1.0f), 0xbf80);
    /* infinities stay; the largest floats overflow to inf; subnormals are not flushed */
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x7f800000u)), 0x7f80);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0xff800000u)), 0xff80);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x7f7fffffu)), 0x7f80);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x7f7f7fffu)), 0x7f7f);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x00018000u)), 0x0002);
    TEST_EQ_INT(bf16_from_f32(bf16_asfloat(0x80008000u)), 0x8000); /* tie to even: -0 */
    /* NaN, quiet or signalling, either sign: the canonical NaN, which reads back as NaN */
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fffffffu,
                                    0xff800001u};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        TEST_EQ_INT(bf16_from_f32(bf16_asfloat(nans[i])), BF16_NAN);
        TEST_CHECK(isnan(bf16_to_f32(bf16_from_f32(bf16_asfloat(nans[i])))));
    }
    TEST_CHECK(bf16_round(3.14159265f) == 3.140625f);
}

/* Trains the toy model from the same weights twice, with the GPU options ref and alt: alt's 12
 * step losses within loss_tol (relative) of ref's, its parameters within param_tol RMS of ref's,
 * and it learns. */
static void check_variant(const char *what, const struct train_gpu_opts *ref,
                          const struct train_gpu_opts *alt, double loss_tol, double param_tol)
{
    struct train_data d = toy();
    struct model mr, ma;
    struct train_result rr, ra;
    double lr[MAXLOG], la[MAXLOG];
    char err[256];
    FILE *fr = tmpfile(), *fa = tmpfile();

    TEST_CHECK(fr && fa);
    TEST_EQ_INT(model_init(&mr, &mc, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&ma, &mc, 8, 11, err, sizeof(err)), 0);
    struct train_opts a = opts(fr), b = opts(fa);
    TEST_EQ_INT(train_gpu_run_opts(&mr, &d, &a, ref, &rr), 0);
    TEST_EQ_INT(train_gpu_run_opts(&ma, &d, &b, alt, &ra), 0);
    int nr = values(fr, "\"loss\":", lr), na = values(fa, "\"loss\":", la);
    TEST_EQ_INT(nr, 12);
    TEST_EQ_INT(na, nr);
    int bad = 0;
    double worst = 0.0;
    for (int i = 0; i < nr && i < na; i++) {
        double rel = fabs(la[i] - lr[i]) / fmax(1.0, fabs(lr[i]));
        worst = fmax(worst, rel);
        bad += !(rel <= loss_tol);
    }
    double dp = rms_diff(ma.params, mr.params, mr.n_params);
    printf("%s: worst step loss rel diff %.3g (tol %.0e), rms(param) %.3g (tol %.0e), loss %.4f "
           "-> %.4f\n", what, worst, loss_tol, dp, param_tol, la[0], la[na - 1]);
    TEST_EQ_INT(bad, 0);
    TEST_CHECK(dp < param_tol);
    TEST_CHECK(la[na - 1] < la[0]);
    model_cleanup(&mr), model_cleanup(&ma);
    fclose(fr), fclose(fa);
}

/* bf16 (GEMM operands and saved GEMM inputs in bf16; fp32 master weights, gradients, LayerNorm,
 * softmax, loss and AdamW) follows the fp32 GPU run: each of the 12 steps' loss within 3e-2
 * relative (bf16 keeps 8 bits: ~4e-3 per rounding, a few of them compound over 12 steps), the
 * parameters within 5e-3 RMS (lr 3e-3: 12 steps move them by up to ~4e-2), and it learns. */
static void test_bf16_follows_fp32(void)
{
    const struct train_gpu_opts o32 = {.bucket_bytes = TRAIN_BUCKET_MB << 20},
                                o16 = {.bf16 = 1, .bucket_bytes = TRAIN_BUCKET_MB << 20};
    check_variant("bf16 vs fp32", &o32, &o16, 3e-2, 5e-3);
}

/* training.attention: fused trains like the unfused attention from the same weights: in fp32
 * (only the summation order differs) every step's loss within 1e-3 relative and the parameters
 * within 5e-4 RMS; with bf16 (tensor cores, bf16 operands rounded at other points than the
 * unfused path's) within bf16's 3e-2 and 5e-3. The mock backend ignores the flag. */
static void test_fused_attention(void)
{
    const size_t bb = (size_t)TRAIN_BUCKET_MB << 20;
    const struct train_gpu_opts u32 = {.bucket_bytes = bb},
                                f32 = {.fused_attention = 1, .bucket_bytes = bb},
                                u16 = {.bf16 = 1, .bucket_bytes = bb},
                                f16 = {.bf16 = 1, .fused_attention = 1, .bucket_bytes = bb};
    check_variant("fused vs unfused attention, fp32", &u32, &f32, 1e-3, 5e-4);
    check_variant("fused vs unfused attention, bf16", &u16, &f16, 3e-2, 5e-3);
}

/* Evaluation on the device (train_gpu_evaluate) of a model trained on the CPU gives the host
 * model's confusion matrix exactly and its mean loss within 1e-5 relative, in batches of 7 (the
 * last one partial), with either attention. */
static void test_evaluate(void)
{
    struct train_data d = toy();
    struct model m;
    struct train_result r;
    struct eval_counts cpu, gpu;
    char err[256];
    FILE *f = tmpfile();
    TEST_CHECK(f != NULL);
    TEST_EQ_INT(model_init(&m, &mc, 8, 11, err, sizeof(err)), 0);
    struct train_opts o = opts(f);
    TEST_EQ_INT(train_run(&m, &d, &o, &r), 0); /* a model with real predictions */
    TEST_EQ_INT(eval_init(&cpu, 2), 0);
    train_evaluate(&m, &d, 7, &cpu);
    for (int fused = 0; fused <= 1; fused++) {
        const struct train_gpu_opts go = {.fused_attention = fused};
        TEST_EQ_INT(eval_init(&gpu, 2), 0);
        TEST_EQ_INT(train_gpu_evaluate(&m, &d, 7, &go, &gpu), 0);
        int same = 1;
        for (int t = 0; t < 2; t++)
            for (int pr = 0; pr < 2; pr++)
                same &= eval_cm(&gpu, t, pr) == eval_cm(&cpu, t, pr);
        double lc = eval_counts_flat(&cpu)[0], lg = eval_counts_flat(&gpu)[0];
        printf("evaluate (%s attention): confusion %llu %llu / %llu %llu (cpu: %s), loss sum "
               "gpu %.6f cpu %.6f\n", fused ? "fused" : "unfused",
               (unsigned long long)eval_cm(&gpu, 0, 0), (unsigned long long)eval_cm(&gpu, 0, 1),
               (unsigned long long)eval_cm(&gpu, 1, 0), (unsigned long long)eval_cm(&gpu, 1, 1),
               same ? "same" : "DIFFERENT", lg, lc);
        TEST_CHECK(same);
        TEST_CHECK(close_rel(lg, lc, 1e-5));
        TEST_EQ_INT((int)eval_counts_flat(&gpu)[1], N);
        eval_cleanup(&gpu);
    }
    eval_cleanup(&cpu);
    model_cleanup(&m);
    fclose(f);
}

/* Evaluation during training on the GPU loop's own device model: after steps 4 and 8 of 12,
 * the counts equal train_gpu_evaluate's on the parameters of that step (the checkpoint hook,
 * which comes after the evaluation, keeps them); the run ends bit-identical to one without
 * evaluations. With world_size 2 the counts go through the device gradient buffer to the reduce
 * hook and back (the mock's hook sums "two ranks": twice rank 0's 45 examples). */
struct gev {
    int n;
    long steps[2];
    double v[2][6];     /* the counts of each evaluation (loss sum, examples, confusion) */
    float *params[2];   /* the parameters at each evaluated step */
};

static int gpu_keep(void *ctx, long step, int epoch, const struct model *m,
                    const struct adamw *opt)
{
    struct gev *g = ctx;
    (void)epoch, (void)opt;
    for (int i = 0; i < g->n && i < 2; i++)
        if (g->steps[i] == step && !g->params[i]) {
            g->params[i] = xmallocarray(m->n_params, sizeof(float));
            memcpy(g->params[i], m->params, m->n_params * sizeof(float));
        }
    return 0;
}

static int gpu_on_eval(void *ctx, long step, int epoch, const struct eval_counts *e, double s)
{
    struct gev *g = ctx;
    (void)epoch, (void)s;
    if (g->n < 2) {
        g->steps[g->n] = step;
        memcpy(g->v[g->n], eval_counts_flat((struct eval_counts *)e), sizeof(g->v[0]));
    }
    g->n++;
    return 0;
}

static void test_eval_during(void)
{
    struct train_data d = toy();
    struct model a, b;
    struct train_result r;
    struct calls c = {0};
    char err[256];
    FILE *f = tmpfile();
    TEST_CHECK(f != NULL);
    struct gev g = {0};
    struct train_opts o = opts(f);
    TEST_EQ_INT(model_init(&a, &mc, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&b, &mc, 8, 11, err, sizeof(err)), 0);
    o.checkpoint = gpu_keep, o.checkpoint_ctx = &g, o.checkpoint_interval = 4;
    o.eval = &d, o.eval_batch = 64, o.eval_interval = 4, o.on_eval = gpu_on_eval;
    o.eval_ctx = &g;
    TEST_EQ_INT(train_gpu_run(&a, &d, &o, &r), 0);
    TEST_EQ_INT(r.steps, 12);
    TEST_EQ_INT(g.n, 2);
    TEST_EQ_INT(g.steps[0], 4);
    TEST_EQ_INT(g.steps[1], 8);
    for (int i = 0; i < 2; i++) { /* against a fresh device model on that step's parameters */
        struct eval_counts ref;
        TEST_CHECK(g.params[i] != NULL);
        if (!g.params[i])
            continue;
        memcpy(b.params, g.params[i], b.n_params * sizeof(float));
        TEST_EQ_INT(eval_init(&ref, 2), 0);
        TEST_EQ_INT(train_gpu_evaluate(&b, &d, 8, NULL, &ref), 0);
        const double *w = eval_counts_flat(&ref);
        TEST_EQ_INT((int)g.v[i][1], N);
        for (int k = 1; k < 6; k++)
            TEST_CHECK(g.v[i][k] == w[k]);
        TEST_CHECK(close_rel(g.v[i][0], w[0], 1e-5));
        eval_cleanup(&ref);
        free(g.params[i]);
    }
    model_cleanup(&b);
    TEST_EQ_INT(model_init(&b, &mc, 8, 11, err, sizeof(err)), 0);
    o = opts(f);
    TEST_EQ_INT(train_gpu_run(&b, &d, &o, &r), 0);
    TEST_CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0);

    /* "rank 0 of 2": its 45 examples, summed by the reduce hook through device memory */
    model_cleanup(&a);
    TEST_EQ_INT(model_init(&a, &mc, 8, 11, err, sizeof(err)), 0);
    g = (struct gev){0};
    o = opts(f);
    c.twice = strcmp(model_gpu_backend(), "cpu-mock") == 0;
    o.world_size = 2, o.reduce = record, o.reduce_ctx = &c;
    o.eval = &d, o.eval_batch = 5, o.eval_interval = 2, o.on_eval = gpu_on_eval;
    o.eval_ctx = &g;
    TEST_EQ_INT(train_gpu_run(&a, &d, &o, &r), 0);
    TEST_EQ_INT(g.n, 2); /* 6 steps: after 2 and 4 */
    TEST_EQ_INT((int)g.v[1][1], c.twice ? 2 * (N / 2) : N / 2);
    model_cleanup(&a), model_cleanup(&b);
    fclose(f);
}

/* The 12 logged steps' loss and grad norm of two runs' JSON logs a and b (checked: 12 each). */
static int two_logs(FILE *a, FILE *b, double *la, double *lb, double *na, double *nb)
{
    int n = values(a, "\"loss\":", la);
    TEST_EQ_INT(n, 12);
    TEST_EQ_INT(values(b, "\"loss\":", lb), n);
    TEST_EQ_INT(values(a, "\"grad_norm\":", na), n);
    TEST_EQ_INT(values(b, "\"grad_norm\":", nb), n);
    return n;
}

/* training.cudaGraphs: the loop with forward and backward replayed as CUDA graphs ends
 * bit-identical to the eager loop from the same weights (every step's logged loss and grad norm
 * equal, the parameters memcmp-equal), with label smoothing on (a kernel argument the graphs
 * capture); on the device model it captured and launched graphs (its closing "cuda graphs:"
 * line). The mock backend has no graphs (0 captured). v 0: fp32; 1: bf16, fused attention. */
static void graphs_loop(int v)
{
    const size_t bb = (size_t)TRAIN_BUCKET_MB << 20;
    const int real = strcmp(model_gpu_backend(), "cuda") == 0;
    {
        const struct train_gpu_opts eager = {.bf16 = v, .fused_attention = v, .bucket_bytes = bb},
                                    graph = {.bf16 = v, .fused_attention = v, .cuda_graphs = 1,
                                             .bucket_bytes = bb};
        struct train_data d = toy();
        struct model me, mg;
        struct train_result re, rg;
        double le[MAXLOG], lg[MAXLOG], ne[MAXLOG], ng[MAXLOG];
        char err[256], line[256];
        FILE *fe = tmpfile(), *fg = tmpfile(), *hg = tmpfile();
        TEST_CHECK(fe && fg && hg);
        TEST_EQ_INT(model_init(&me, &mc, 8, 11, err, sizeof(err)), 0);
        TEST_EQ_INT(model_init(&mg, &mc, 8, 11, err, sizeof(err)), 0);
        struct train_opts a = opts(fe), b = opts(fg);
        a.label_smoothing = b.label_smoothing = 0.1f;
        b.human_out = hg;
        TEST_EQ_INT(train_gpu_run_opts(&me, &d, &a, &eager, &re), 0);
        TEST_EQ_INT(train_gpu_run_opts(&mg, &d, &b, &graph, &rg), 0);
        int n = two_logs(fe, fg, le, lg, ne, ng);
        int differ = 0;
        for (int i = 0; i < n; i++)
            differ += le[i] != lg[i] || ne[i] != ng[i];
        TEST_EQ_INT(differ, 0);
        int same = memcmp(me.params, mg.params, me.n_params * sizeof(float)) == 0;
        TEST_CHECK(same);
        long cap = -1, launches = -1, ev = -1;
        rewind(hg);
        while (fgets(line, sizeof(line), hg))
            sscanf(line, "cuda graphs: %ld captured, %ld launches, %ld shapes evicted", &cap,
                   &launches, &ev);
        printf("cuda graphs (%s): %ld captured, %ld launches, %ld evicted; %d steps identical to "
               "eager, parameters %s\n", v ? "bf16, fused attention" : "fp32", cap, launches, ev,
               n - differ, same ? "identical" : "DIFFER");
        if (real) {
            TEST_CHECK(cap > 0);
            TEST_CHECK(launches > cap); /* shapes come back: replays, not only captures */
        } else {
            TEST_EQ_INT((int)cap, 0);
        }
        model_cleanup(&me), model_cleanup(&mg);
        fclose(fe), fclose(fg), fclose(hg);
    }
}

static void test_cuda_graphs_loop(void)
{
    graphs_loop(0);
}

static void test_cuda_graphs_loop_bf16(void)
{
    graphs_loop(1);
}

/* The graph cache itself (model_gpu, device backend only): 20 batch lengths, each 3 times in a
 * row, then the first again. A shape runs eagerly the first time, is captured and launched the
 * second, launched the third; 40 shapes (forward and backward of each) pass through 16 slots,
 * the least recently used evicted, so the first length comes back uncaptured. Each micro-step's
 * gradients, logits and loss equal an eager model's bit for bit; changing the label smoothing
 * drops the graphs (a cached length runs eagerly again, with the new smoothing). */
static void test_graph_cache(void)
{
    if (strcmp(model_gpu_backend(), "cuda")) {
        printf("(mock backend: no graphs to check)\n");
        return;
    }
    struct train_data d = toy();
    struct model m;
    char err[256];
    const int B = 5;
    TEST_EQ_INT(model_init(&m, &mc, 8, 11, err, sizeof(err)), 0);
    struct model_gpu *ge = model_gpu_new(&m, B, 0, err, sizeof(err));
    struct model_gpu *gg = model_gpu_new(&m, B, MODEL_GPU_GRAPHS, err, sizeof(err));
    TEST_CHECK(ge && gg);
    size_t n = m.n_params + MODEL_GPU_STATS;
    float *a = xmallocarray(n, sizeof(float)), *b = xmallocarray(n, sizeof(float));
    float la[B * 2], lb[B * 2];
    int tok[B * L], len[B], differ = 0, steps = 0;
    long cap, launches, ev;
    for (int round = 0; round < 62; round++) {
        /* 1,1,1,2,2,2,...,20,20,20, then 1 (evicted) and 20 (cached, but new smoothing) */
        int T = round < 60 ? 1 + round / 3 : round == 60 ? 1 : 20;
        float smoothing = round == 61 ? 0.2f : 0.0f;
        for (int i = 0; i < B; i++) {
            len[i] = 1 + (i * 7 + round) % T;
            for (int t = 0; t < T; t++)
                tok[i * T + t] = t < len[i] ? ids[((i + round) % N) * L + t] : 0;
        }
        if (round == 60) { /* T = 1 again: evicted long ago, eager */
            model_gpu_graph_stats(gg, &cap, &launches, &ev);
            TEST_EQ_INT((int)cap, 40);
            TEST_EQ_INT((int)launches, 80);
            TEST_EQ_INT((int)ev, 24);
        }
        struct model_gpu *both[2] = {ge, gg};
        for (int k = 0; k < 2; k++) {
            model_gpu_batch(both[k], tok, len, labels + round % (N - B), B, T);
            model_gpu_loss(both[k], smoothing, NULL);
            model_gpu_zero_grad(both[k]);
            model_gpu_forward(both[k]);
            model_gpu_backward(both[k], 1.0f / (float)B);
        }
        model_gpu_grads_get(ge, a, n);
        model_gpu_grads_get(gg, b, n);
        model_gpu_read_logits(ge, la);
        model_gpu_read_logits(gg, lb);
        differ += memcmp(a, b, n * sizeof(float)) != 0 || memcmp(la, lb, sizeof(float) * B * 2);
        differ += model_gpu_last_loss(ge) != model_gpu_last_loss(gg);
        steps++;
    }
    model_gpu_graph_stats(gg, &cap, &launches, &ev);
    printf("graph cache: %d micro-steps, %d differ from eager; %ld captured, %ld launches, %ld "
           "evicted\n", steps, differ, cap, launches, ev);
    TEST_EQ_INT(differ, 0);
    /* round 60 (T=1, evicted: eager) and 61 (T=20, captured, but the new smoothing dropped the
     * graphs: eager; a replay would use the old smoothing and differ) */
    TEST_EQ_INT((int)cap, 40);
    TEST_EQ_INT((int)launches, 80);
    TEST_EQ_INT((int)ev, 26);
    (void)d;
    free(a), free(b);
    model_gpu_free(ge), model_gpu_free(gg);
    model_cleanup(&m);
}

/* The n-gram model on the GPU (model.type ngram: bags built on the host, their mean, the head and
 * the loss on the device) follows train_run from the same weights: every step's loss and grad
 * norm within 2e-3 relative, the parameters within 5e-4 RMS, it learns; train_gpu_evaluate gives
 * the CPU's confusion matrix; with CUDA graphs the run is bit-identical to the eager one. */
static void test_ngram(void)
{
    static const struct model_config nc = {.kind = MODEL_NGRAM, .vocab = V, .classes = 2,
                                           .max_seq_len = L, .hidden = 16, .buckets = 97,
                                           .pool = MODEL_POOL_MEAN};
    struct train_data d = toy();
    struct model mc_, mg, mh;
    struct train_result rc, rg, rh;
    double lc[MAXLOG], lg[MAXLOG], ncn[MAXLOG], ngn[MAXLOG];
    char err[256];
    FILE *fc = tmpfile(), *fg = tmpfile(), *fh = tmpfile();
    TEST_CHECK(fc && fg && fh);
    TEST_EQ_INT(model_init(&mc_, &nc, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&mg, &nc, 8, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(model_init(&mh, &nc, 8, 11, err, sizeof(err)), 0);
    struct train_opts oc = opts(fc), og = opts(fg), oh = opts(fh);
    oc.optim.lr = og.optim.lr = oh.optim.lr = 3e-2f; /* the bag model learns slowly at 3e-3 */
    const struct train_gpu_opts graphs = {.cuda_graphs = 1,
                                          .bucket_bytes = (size_t)TRAIN_BUCKET_MB << 20};
    TEST_EQ_INT(train_run(&mc_, &d, &oc, &rc), 0);
    TEST_EQ_INT(train_gpu_run(&mg, &d, &og, &rg), 0);
    TEST_EQ_INT(train_gpu_run_opts(&mh, &d, &oh, &graphs, &rh), 0);
    int n = two_logs(fc, fg, lc, lg, ncn, ngn);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int ok = close_rel(lg[i], lc[i], 2e-3) && close_rel(ngn[i], ncn[i], 2e-3);
        if (!ok || i < 2 || i == n - 1)
            printf("ngram step %2d  cpu loss %.6f norm %.4f  gpu loss %.6f norm %.4f  %s\n", i + 1,
                   lc[i], ncn[i], lg[i], ngn[i], ok ? "ok" : "MISMATCH");
        bad += !ok;
    }
    TEST_EQ_INT(bad, 0);
    double dp = rms_diff(mg.params, mc_.params, mc_.n_params);
    printf("ngram: rms(param gpu - cpu) %.3g over %zu parameters; CUDA graphs run %s\n", dp,
           mc_.n_params,
           memcmp(mh.params, mg.params, mg.n_params * sizeof(float)) ? "DIFFERS" : "identical");
    TEST_CHECK(dp < 5e-4);
    TEST_CHECK(lg[n - 1] < lg[0]);
    TEST_CHECK(memcmp(mh.params, mg.params, mg.n_params * sizeof(float)) == 0);
    struct eval_counts ec, eg;
    TEST_EQ_INT(eval_init(&ec, 2), 0);
    TEST_EQ_INT(eval_init(&eg, 2), 0);
    train_evaluate(&mc_, &d, 7, &ec);
    TEST_EQ_INT(train_gpu_evaluate(&mc_, &d, 7, NULL, &eg), 0);
    int same = 1;
    for (int t = 0; t < 2; t++)
        for (int p = 0; p < 2; p++)
            same &= eval_cm(&eg, t, p) == eval_cm(&ec, t, p);
    TEST_CHECK(same);
    TEST_CHECK(close_rel(eval_counts_flat(&eg)[0], eval_counts_flat(&ec)[0], 1e-5));
    eval_cleanup(&ec), eval_cleanup(&eg);
    model_cleanup(&mc_), model_cleanup(&mg), model_cleanup(&mh);
    fclose(fc), fclose(fg), fclose(fh);
}

/* Another task's data d for model cfg: the GPU loop follows the CPU's step by step, and the
 * device evaluation's counts (e, initialised for the task; counts are integers, so "close" is
 * equal for them) match the CPU's, the loss sum within 1e-5. */
static void task_follows_cpu(const char *what, const struct train_data *d,
                             const struct model_config *cfg, struct eval_counts *cpu,
                             struct eval_counts *gpu)
{
    struct model m;
    struct train_result r;
    char err[256];
    follows(d, cfg, 0.0f, NULL);
    TEST_EQ_INT(model_init(&m, cfg, 8, 11, err, sizeof(err)), 0);
    FILE *f = tmpfile();
    struct train_opts o = opts(f);
    TEST_EQ_INT(train_run(&m, d, &o, &r), 0);
    train_evaluate(&m, d, 7, cpu);
    TEST_EQ_INT(train_gpu_evaluate(&m, d, 7, NULL, gpu), 0);
    const double *vc = eval_counts_flat(cpu), *vg = eval_counts_flat(gpu);
    int close = 1;
    for (size_t i = 0; i < eval_counts_flat_len(cpu); i++)
        close &= close_rel(vg[i], vc[i], 1e-5);
    printf("%s evaluate: counts %s, loss sum gpu %.6f cpu %.6f\n", what,
           close ? "the same" : "DIFFERENT", vg[0], vc[0]);
    TEST_CHECK(close);
    TEST_EQ_INT((int)vg[1], N);
    eval_cleanup(cpu), eval_cleanup(gpu);
    model_cleanup(&m);
    fclose(f);
}

/* Multi-label (label_words): three yes/no classes per example of the toy data (token 3 appears,
 * token 5 appears, longer than 10 tokens) as bit sets, the sigmoid binary cross-entropy. */
static void test_multi_label(void)
{
    static int32_t bits[N];
    struct train_data d = toy();
    struct model_config c3 = mc;
    struct eval_counts cpu, gpu;
    c3.classes = 3;
    for (int i = 0; i < N; i++) {
        int has3 = 0, has5 = 0;
        for (int t = 0; t < d.len[i]; t++)
            has3 |= d.ids[(size_t)i * L + t] == 3, has5 |= d.ids[(size_t)i * L + t] == 5;
        bits[i] = has3 | has5 << 1 | (d.len[i] > 10) << 2;
    }
    d.labels = bits, d.label_words = 1;
    TEST_EQ_INT(eval_init_multi(&cpu, 3), 0);
    TEST_EQ_INT(eval_init_multi(&gpu, 3), 0);
    task_follows_cpu("multi-label", &d, &c3, &cpu, &gpu);
}

/* Regression (MODEL_TARGETS_REAL): one output per example of the toy data, the target the count
 * of token 3 over 4 (floats' bits in the labels), the squared error. */
static void test_regression(void)
{
    static int32_t bits[N];
    struct train_data d = toy();
    struct model_config c1 = mc;
    struct eval_counts cpu, gpu;
    c1.classes = 1;
    for (int i = 0; i < N; i++) {
        float y = 0.0f;
        for (int t = 0; t < d.len[i]; t++)
            y += d.ids[(size_t)i * L + t] == 3 ? 0.25f : 0.0f;
        memcpy(&bits[i], &y, sizeof(y));
    }
    d.labels = bits, d.label_words = MODEL_TARGETS_REAL;
    TEST_EQ_INT(eval_init_regression(&cpu), 0);
    TEST_EQ_INT(eval_init_regression(&gpu), 0);
    task_follows_cpu("regression", &d, &c1, &cpu, &gpu);
}

/* Arguments: the names of the test cases to run (none: all). kernels/emu/model.cmake runs the
 * emulated build in parts this way, each within CTest's timeout under ASan; a new case must be
 * added to one of its lists. An unknown name is an error (exit 2), so a renamed case is noticed. */
static const char *const cases[] = {"test_gpu_follows_cpu", "test_checkpoint_across_devices",
                                    "test_obs", "test_overlapped_allreduce",
                                    "test_bf16_follows_fp32", "test_fused_attention",
                                    "test_evaluate", "test_eval_during", "test_cuda_graphs_loop",
                                    "test_graph_cache", "test_ngram",
                                    "test_cuda_graphs_loop_bf16", "test_multi_label",
                                    "test_regression"};
static int n_sel;
static char *const *sel;

static int selected(const char *name)
{
    for (int i = 0; i < n_sel; i++)
        if (!strcmp(sel[i], name))
            return 1;
    return n_sel == 0;
}
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        if (selected(#fn))                                                                         \
            TEST_RUN(fn);                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    char err[256];
    n_sel = argc - 1, sel = argv + 1;
    for (int i = 0; i < n_sel; i++) {
        int known = 0;
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
            known |= !strcmp(sel[i], cases[k]);
        if (!known) {
            fprintf(stderr, "train_gpu_test: no test case %s\n", sel[i]);
            return 2;
        }
    }
    TEST_RUN(test_bf16_rounding); /* host code: runs with or without a device */
    if (model_gpu_device_count() < 1) {
        test_skip("no CUDA device");
        return test_summary();
    }
    if (train_gpu_select(0, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    RUN(test_gpu_follows_cpu);
    RUN(test_checkpoint_across_devices);
    RUN(test_obs);
    RUN(test_overlapped_allreduce);
    RUN(test_bf16_follows_fp32);
    RUN(test_fused_attention);
    RUN(test_evaluate);
    RUN(test_eval_during);
    RUN(test_cuda_graphs_loop);
    RUN(test_cuda_graphs_loop_bf16);
    RUN(test_graph_cache);
    RUN(test_ngram);
    RUN(test_multi_label);
    RUN(test_regression);
    return test_summary();
}
