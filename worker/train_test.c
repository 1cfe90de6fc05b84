/* The training loop: learns a separable toy task, is deterministic for a seed, gradient
 * accumulation matches a big batch, the schedule's shape, clipping, and evaluation. */
#include "worker/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/test.h"
#include "worker/train_testdata.h"

enum { N = 64, L = 8, V = 16 };
static int32_t ids[N * L], lens[N], labels[N];

/* The shared toy task (train_testdata.h): label 1 iff token 3 appears; lengths 2..L. */
static struct train_data toy(void)
{
    static const struct train_testdata_spec spec = {.n = N, .max_len = L, .min_len = 2,
                                                    .vocab = V, .seed = 77};
    return train_testdata_toy(&spec, ids, lens, labels);
}

static const struct model_config mc = {.kind = MODEL_TRANSFORMER, .vocab = V, .classes = 2,
                                       .max_seq_len = L, .hidden = 16, .layers = 1, .heads = 2,
                                       .ffn = 32, .pool = MODEL_POOL_MEAN};

static struct train_opts opts(int batch, int accum, int epochs)
{
    struct train_opts o;
    memset(&o, 0, sizeof(o));
    o.epochs = epochs, o.batch = batch, o.accum = accum;
    optim_config_default(&o.optim);
    o.optim.lr = 3e-3f;
    o.warmup_steps = 2;
    o.seed = 5, o.log_interval = 1000, o.world_size = 1;
    return o;
}

static void test_learns_toy_task(void)
{
    struct model m;
    struct train_result r;
    struct eval_counts e;
    struct eval_metrics em;
    char err[256];
    struct train_data d = toy();
    struct train_opts o = opts(8, 1, 30);
    TEST_EQ_INT(model_init(&m, &mc, 8, 1, err, sizeof(err)), 0);
    eval_init(&e, 2);
    train_evaluate(&m, &d, 8, &e);
    eval_compute(&e, &em);
    double before = em.loss;
    eval_metrics_cleanup(&em);
    TEST_EQ_INT(train_run(&m, &d, &o, &r), 0);
    TEST_EQ_INT(r.steps, 30 * 8);
    eval_reset(&e);
    train_evaluate(&m, &d, 8, &e);
    eval_compute(&e, &em);
    TEST_CHECK(em.accuracy >= 0.95);
    TEST_CHECK(em.loss < before / 3);
    eval_metrics_cleanup(&em);
    eval_cleanup(&e);
    model_cleanup(&m);
}

static void run(struct model *m, int batch, int accum, int epochs, uint64_t seed)
{
    struct train_result r;
    char err[256];
    struct train_data d = toy();
    struct train_opts o = opts(batch, accum, epochs);
    o.seed = seed;
    model_init(m, &mc, 8, 1, err, sizeof(err));
    train_run(m, &d, &o, &r);
}

static void test_deterministic_and_seeded(void)
{
    struct model a, b, c;
    run(&a, 8, 1, 2, 5);
    run(&b, 8, 1, 2, 5);
    run(&c, 8, 1, 2, 6);
    TEST_CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0);
    TEST_CHECK(memcmp(a.params, c.params, a.n_params * sizeof(float)) != 0); /* order differs */
    model_cleanup(&a), model_cleanup(&b), model_cleanup(&c);
}

static void test_accumulation_matches_big_batch(void)
{
    struct model a, b;
    run(&a, 8, 1, 1, 5);
    run(&b, 2, 4, 1, 5); /* same 8 examples per step, in 4 micro-batches */
    double worst = 0;
    for (size_t i = 0; i < a.n_params; i++)
        worst = fmax(worst, fabs(a.params[i] - b.params[i]));
    TEST_CHECK(worst < 1e-4);
    model_cleanup(&a), model_cleanup(&b);
}

/* A checkpoint taken mid-epoch by the hook, restored into a fresh model and optimizer, resumes
 * to exactly the parameters of the uninterrupted run. */
struct snap {
    long at, step;
    float *params, *m, *v;
    long t;
};

static int take_snapshot(void *ctx, long step, int epoch, const struct model *m,
                         const struct adamw *opt)
{
    struct snap *s = ctx;
    if (step != s->at)
        return 0;
    s->step = step;
    s->params = malloc(m->n_params * sizeof(float));
    s->m = malloc(m->n_params * sizeof(float));
    s->v = malloc(m->n_params * sizeof(float));
    memcpy(s->params, m->params, m->n_params * sizeof(float));
    memcpy(s->m, opt->m, m->n_params * sizeof(float));
    memcpy(s->v, opt->v, m->n_params * sizeof(float));
    s->t = opt->t;
    return 0;
}

static void test_resume_is_bit_identical(void)
{
    struct model a, b;
    struct train_result r;
    struct adamw oa, ob;
    char err[256];
    struct train_data d = toy();
    struct train_opts o = opts(8, 1, 3); /* 8 steps per epoch, 24 in all */
    struct snap sn = {.at = 11};
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    adamw_init(&oa, a.n_params);
    o.opt = &oa, o.checkpoint = take_snapshot, o.checkpoint_ctx = &sn, o.checkpoint_interval = 1;
    TEST_EQ_INT(train_run(&a, &d, &o, &r), 0);
    TEST_EQ_INT(sn.step, 11);
    TEST_EQ_INT(r.steps, 24);

    model_init(&b, &mc, 8, 99, err, sizeof(err)); /* other weights: all must come from the snapshot */
    adamw_init(&ob, b.n_params);
    memcpy(b.params, sn.params, b.n_params * sizeof(float));
    memcpy(ob.m, sn.m, b.n_params * sizeof(float));
    memcpy(ob.v, sn.v, b.n_params * sizeof(float));
    ob.t = sn.t;
    o = opts(8, 1, 3);
    o.opt = &ob, o.start_step = 11;
    TEST_EQ_INT(train_run(&b, &d, &o, &r), 0);
    TEST_EQ_INT(r.steps, 24);
    TEST_CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0);
    TEST_CHECK(memcmp(oa.v, ob.v, a.n_params * sizeof(float)) == 0);
    adamw_cleanup(&oa), adamw_cleanup(&ob);
    free(sn.params), free(sn.m), free(sn.v);
    model_cleanup(&a), model_cleanup(&b);
}

/* A raised stop flag (the SIGTERM handler's) ends the loop at the next step boundary, with no
 * checkpoint after it. */
static volatile sig_atomic_t stop_flag;
static int stop_at_5(void *ctx, long step, int epoch, const struct model *m,
                     const struct adamw *opt)
{
    int *calls = ctx;
    (*calls)++;
    if (step == 5)
        stop_flag = 1;
    return 0;
}

/* on_stop: records the step it was given and the parameters' hash then */
static long stop_saved_step;
static uint64_t stop_saved_hash;
static int record_stop(void *ctx, long step, int epoch, const struct model *m,
                       const struct adamw *opt)
{
    (void)ctx, (void)epoch, (void)opt;
    stop_saved_step = step;
    stop_saved_hash = hash_fnv1a64(m->params, m->n_params * sizeof(float));
    return 0;
}

/* before_update: raises the stop flag before the 7th optimizer update, i.e. during step 7 */
static int updates;
static void stop_in_step_7(void *ctx)
{
    (void)ctx;
    if (++updates == 7)
        stop_flag = 1;
}

static void test_stop_flag(void)
{
    struct model a;
    struct train_result r;
    char err[256];
    int calls = 0;
    struct train_data d = toy();
    struct train_opts o = opts(8, 1, 3);
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    o.checkpoint = stop_at_5, o.checkpoint_ctx = &calls, o.checkpoint_interval = 1;
    o.stop = &stop_flag;
    o.on_stop = record_stop;
    stop_saved_step = -1;
    TEST_EQ_INT(train_run(&a, &d, &o, &r), TRAIN_STOPPED);
    TEST_EQ_INT(r.steps, 5);
    TEST_EQ_INT(calls, 5);
    TEST_EQ_INT(stop_saved_step, -1); /* step 5 was just checkpointed: nothing more to save */
    stop_flag = 0;
    model_cleanup(&a);

    /* Raised in the middle of step 7, checkpoints every 3: step 7 finishes (its all-reduce
     * needs every rank), and its state, newer than step 6's checkpoint, goes to on_stop. */
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    calls = 0, updates = 0;
    o.checkpoint_interval = 3, o.before_update = stop_in_step_7;
    TEST_EQ_INT(train_run(&a, &d, &o, &r), TRAIN_STOPPED);
    TEST_EQ_INT(r.steps, 7);
    TEST_EQ_INT(calls, 2); /* steps 3 and 6 */
    TEST_EQ_INT(stop_saved_step, 7);
    TEST_CHECK(stop_saved_hash == hash_fnv1a64(a.params, a.n_params * sizeof(float)));
    stop_flag = 0;
    model_cleanup(&a);
}

static float cpu_forward(void *ctx, const int *tok, const int *len, const int *lab, int B, int T,
                         const float **logits)
{
    struct model *m = ctx;
    float l = model_forward(m, tok, len, lab, B, T);
    *logits = m->logits;
    return l;
}

/* Evaluation during training: on_eval after every eval_interval-th step but the last, with the
 * counts of the whole eval set on the parameters of that moment (the same as evaluating the
 * live model there); the run's parameters are those of a run without it; a non-zero on_eval
 * result stops training with it. */
struct evals {
    struct model *m;          /* the model being trained */
    const struct train_data *d;
    long steps[8];
    int n, mismatches, fail_at, fail_rc; /* on_eval answers fail_rc (else -7) at step fail_at */
    double seconds;
};

static int on_eval(void *ctx, long step, int epoch, const struct eval_counts *e, double seconds)
{
    struct evals *ev = ctx;
    struct eval_counts ref;
    (void)epoch;
    if (ev->n < 8)
        ev->steps[ev->n] = step;
    ev->n++;
    ev->seconds += seconds;
    eval_init(&ref, 2);
    train_evaluate(ev->m, ev->d, 5, &ref); /* another batch size: the same predictions */
    for (int t = 0; t < 2; t++)
        for (int p = 0; p < 2; p++)
            ev->mismatches += eval_cm(e, t, p) != eval_cm(&ref, t, p);
    ev->mismatches += eval_counts_flat((struct eval_counts *)e)[1] != (double)ev->d->n;
    ev->mismatches += fabs(eval_counts_flat((struct eval_counts *)e)[0] -
                           eval_counts_flat(&ref)[0]) > 1e-4;
    eval_cleanup(&ref);
    return step == ev->fail_at ? (ev->fail_rc ? ev->fail_rc : -7) : 0;
}

static int count_ckpt(void *ctx, long step, int epoch, const struct model *m,
                      const struct adamw *opt)
{
    int *at = ctx;
    (void)epoch, (void)m, (void)opt;
    *at = *at ? -1 : (int)step; /* -1: called twice */
    return 0;
}

static void test_eval_during_training(void)
{
    struct model a, b;
    struct train_result r;
    char err[256];
    struct train_data d = toy();
    struct evals ev = {.m = &a, .d = &d};
    struct train_opts o = opts(8, 1, 2); /* 16 steps */
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    o.eval = &d, o.eval_batch = 3, o.eval_interval = 4, o.on_eval = on_eval, o.eval_ctx = &ev;
    TEST_EQ_INT(train_run(&a, &d, &o, &r), 0);
    TEST_EQ_INT(r.steps, 16);
    TEST_EQ_INT(ev.n, 3); /* 4, 8, 12; not 16: the caller's final evaluation */
    TEST_EQ_INT(ev.steps[0], 4);
    TEST_EQ_INT(ev.steps[1], 8);
    TEST_EQ_INT(ev.steps[2], 12);
    TEST_EQ_INT(ev.mismatches, 0);
    TEST_CHECK(ev.seconds > 0);
    run(&b, 8, 1, 2, 5); /* the same run without evaluations */
    TEST_CHECK(memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0);
    model_cleanup(&a);

    /* TRAIN_EARLY_STOP after step 8: step 8 is the last, its checkpoint the final one */
    int ck = 0;
    ev = (struct evals){.m = &a, .d = &d, .fail_at = 8, .fail_rc = TRAIN_EARLY_STOP};
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    o.checkpoint = count_ckpt, o.checkpoint_ctx = &ck, o.checkpoint_interval = 100;
    TEST_EQ_INT(train_run(&a, &d, &o, &r), 0);
    TEST_EQ_INT(r.steps, 8);
    TEST_EQ_INT(r.early_stopped, 1);
    TEST_EQ_INT(ck, 8); /* called once, at step 8 (step == the new total) */
    model_cleanup(&a);
    o.checkpoint = NULL;

    ev = (struct evals){.m = &a, .d = &d, .fail_at = 8};
    model_init(&a, &mc, 8, 1, err, sizeof(err));
    TEST_EQ_INT(train_run(&a, &d, &o, &r), -7);
    TEST_EQ_INT(r.steps, 8);
    TEST_EQ_INT(ev.n, 2);
    TEST_EQ_INT(r.early_stopped, 0);
    model_cleanup(&a), model_cleanup(&b);
}

/* train_evaluate_shard: the shards of W ranks cover every example once. */
static void test_eval_shards(void)
{
    struct model m;
    struct eval_counts all, part;
    char err[256];
    struct train_data d = toy();
    model_init(&m, &mc, 8, 1, err, sizeof(err));
    eval_init(&all, 2), eval_init(&part, 2);
    train_evaluate(&m, &d, 8, &all);
    for (int W = 1; W <= 5; W++) {
        struct eval_counts one;
        eval_reset(&part);
        for (int r = 0; r < W; r++) {
            eval_init(&one, 2);
            train_evaluate_shard(&d, 8, r, W, cpu_forward, &m, &one);
            TEST_EQ_INT((int)eval_counts_flat(&one)[1], (N - r + W - 1) / W);
            eval_merge(&part, &one);
            eval_cleanup(&one);
        }
        int bad = 0;
        for (int t = 0; t < 2; t++)
            for (int p = 0; p < 2; p++)
                bad += eval_cm(&part, t, p) != eval_cm(&all, t, p);
        TEST_EQ_INT(bad, 0);
        TEST_CHECK(fabs(eval_counts_flat(&part)[0] - eval_counts_flat(&all)[0]) < 1e-4);
    }
    eval_cleanup(&all), eval_cleanup(&part);
    model_cleanup(&m);
}

static void test_schedule_and_clip(void)
{
    struct optim_config c;
    optim_config_default(&c);
    c.lr = 1.0f, c.warmup_steps = 4, c.total_steps = 14, c.min_lr_ratio = 0.1f;
    TEST_NEAR(optim_lr(&c, 0), 0.25, 1e-6);
    TEST_NEAR(optim_lr(&c, 3), 1.0, 1e-6);
    TEST_NEAR(optim_lr(&c, 4), 1.0, 1e-6);   /* decay starts at the peak */
    TEST_NEAR(optim_lr(&c, 9), 0.55, 1e-6);  /* cosine midpoint */
    TEST_NEAR(optim_lr(&c, 14), 0.1, 1e-6);
    TEST_NEAR(optim_lr(&c, 99), 0.1, 1e-6);
    c.decay = OPTIM_LINEAR;
    TEST_NEAR(optim_lr(&c, 9), 0.55, 1e-6);
    TEST_NEAR(optim_lr(&c, 6), 1.0 - 0.9 * 0.2, 1e-6);
    float g[2] = {3, 4};
    TEST_NEAR(optim_clip_grad_norm(g, 2, 1.0f), 5.0, 1e-6);
    TEST_NEAR(g[0], 0.6, 1e-5);
    TEST_NEAR(optim_clip_grad_norm(g, 2, 10.0f), 1.0, 1e-5);
    TEST_NEAR(g[0], 0.6, 1e-5); /* under the limit: untouched */
}

static void test_steps_per_epoch(void)
{
    TEST_EQ_INT(train_steps_per_epoch(64, 8, 1, 1), 8);
    TEST_EQ_INT(train_steps_per_epoch(65, 8, 1, 1), 9);
    TEST_EQ_INT(train_steps_per_epoch(65, 4, 2, 1), 9);
    TEST_EQ_INT(train_steps_per_epoch(65, 8, 1, 2), 5); /* 33 examples per rank */
}

int main(void)
{
    TEST_RUN(test_learns_toy_task);
    TEST_RUN(test_deterministic_and_seeded);
    TEST_RUN(test_accumulation_matches_big_batch);
    TEST_RUN(test_resume_is_bit_identical);
    TEST_RUN(test_stop_flag);
    TEST_RUN(test_eval_during_training);
    TEST_RUN(test_eval_shards);
    TEST_RUN(test_schedule_and_clip);
    TEST_RUN(test_steps_per_epoch);
    return test_summary();
}
