/*
 * train_run across real rank processes on one host (coll_tcp_new: shared memory at 2 ranks, the
 * tcp ring at 3; gantry-worker's own glue train_coll.h) with the gradient all-reduce bucketed during backward (train.h, train_plan.h):
 *   - 2 ranks: after every step the parameters are identical on every rank, and bit-identical to
 *     the same run reducing after backward (gradBucketMB 0): with 2 ranks every sum is a + b, so
 *     bucketing cannot change a bit. Buckets of 1 byte (every unit its own), 24 KiB (the head
 *     with the last layer), 80 KiB (head and layers: the backward stays depth first) and 4 MiB
 *     (one bucket), with gradient accumulation and a short last step whose last micro-batch is a
 *     single backward group (all of model.c's layer paths). A model within one bucket is reduced
 *     after backward (nothing to overlap): no pushes.
 *   - the buckets really overlap backward: the first push of a step happens before the embedding
 *     gradients of the step's last backward exist (they change between the first and the last
 *     push), and every push comes before the wait; reduce-after-backward fails this.
 *   - 3 ranks: identical on every rank after every step; against reducing after backward within
 *     a tolerance (the ring cuts a bucket differently, so sums run in another order).
 *   - evaluation during training (train_opts.eval_interval) in the runs reducing after backward:
 *     each rank evaluates its share of 37 examples (uneven at 2 and 3 ranks), the summed counts
 *     reach every rank and equal a full evaluation of the same parameters on one rank; the
 *     bucketed runs without evaluations end bit-identical to them.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/hash.h"
#include "common/test.h"
#include "kernels/cpu.h"
#include "worker/coll.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"
#include "worker/train.h"
#include "worker/train_coll.h"
#include "worker/train_plan.h"
#include "worker/train_testdata.h"

enum { N = 90, L = 20, V = 64, MAXR = 3, MAXSTEPS = 16, MAXP = 40000 };

static const struct model_config mc = {.kind = MODEL_TRANSFORMER, .vocab = V, .classes = 2,
                                       .max_seq_len = L, .hidden = 32, .layers = 2, .heads = 4,
                                       .ffn = 128, .pool = MODEL_POOL_MEAN};

/* What each rank reports, in memory shared with the parent (one slot per run and rank). */
struct report {
    uint64_t hash[MAXSTEPS]; /* FNV-1a of the parameters after each step */
    int steps;
    int pushes, waits;
    int early;       /* steps whose embedding gradients changed between first and last push */
    int empty_waits; /* waits with nothing pushed during the backward before them */
    int evals, eval_bad;  /* on_eval calls; calls whose counts differed from a full evaluation */
    long eval_steps;      /* the steps evaluated, as a decimal string of digits (3, 6: 36) */
    float params[MAXP];
};

struct run {
    int world, port;
    int shm; /* coll_opts.shm: 0 auto (shared memory on one host), -1 the tcp ring */
    size_t bucket_bytes;
    struct report *rep; /* [world] */
    int eval;           /* evaluate every EVAL_EVERY steps */
};

enum { EVAL_N = 37, EVAL_EVERY = 3 };

struct eval_spy {
    struct report *rep;
    struct model *m;
    const struct train_data *ev;
};

/* on_eval: the job's counts against this rank evaluating all EVAL_N examples itself. */
static int check_eval(void *ctx, long step, int epoch, const struct eval_counts *e, double s)
{
    struct eval_spy *sp = ctx;
    struct eval_counts all;
    (void)epoch, (void)s;
    eval_init(&all, 2);
    train_evaluate(sp->m, sp->ev, 4, &all);
    const double *a = eval_counts_flat(&all), *b = eval_counts_flat((struct eval_counts *)e);
    int bad = fabs(a[0] - b[0]) > 1e-3 * fabs(a[0]) || a[1] != b[1] || b[1] != EVAL_N;
    for (size_t i = 2; i < eval_counts_flat_len(&all); i++)
        bad |= a[i] != b[i];
    sp->rep->eval_bad += bad;
    sp->rep->evals++;
    sp->rep->eval_steps = sp->rep->eval_steps * 10 + step;
    eval_cleanup(&all);
    return 0;
}

/* The checkpoint hook, every step: the parameters' hash. */
static int record_step(void *ctx, long step, int epoch, const struct model *m,
                       const struct adamw *opt)
{
    struct report *r = ctx;
    (void)epoch, (void)opt;
    if (step >= 1 && step <= MAXSTEPS)
        r->hash[step - 1] = hash_fnv1a64(m->params, m->n_params * sizeof(float));
    r->steps = (int)step;
    return 0;
}

/* Wraps train_coll's bucket hooks: snapshots the embedding gradients (wte) at the first push of
 * a step and at the push that hands wte over, before passing the bucket on (the bucketer cannot
 * have touched wte before then). They differ when the first bucket left before the last
 * backward's embedding gradients were computed. */
struct spy {
    int (*push)(float *, size_t, void *);
    int (*wait)(void *);
    void *ctx;
    const struct model *m;
    struct report *rep;
    const float *wte;
    size_t nwte;
    float *first, *last;
    int in_step; /* pushes since the last wait */
};

static int spy_push(float *buf, size_t n, void *ctx)
{
    struct spy *s = ctx;
    if (!s->in_step)
        memcpy(s->first, s->wte, s->nwte * sizeof(float));
    if (buf <= s->wte && s->wte < buf + n) /* the push that hands wte over */
        memcpy(s->last, s->wte, s->nwte * sizeof(float));
    s->in_step++;
    s->rep->pushes++;
    return s->push(buf, n, s->ctx);
}

static int spy_wait(void *ctx)
{
    struct spy *s = ctx;
    s->rep->waits++;
    if (s->in_step == 0)
        s->rep->empty_waits++; /* a wait with nothing pushed during the backward */
    s->rep->early += memcmp(s->first, s->last, s->nwte * sizeof(float)) != 0;
    s->in_step = 0;
    return s->wait(s->ctx);
}

static int rank_main(int rank, void *arg)
{
    const struct run *run = arg;
    struct report *rep = &run->rep[rank];
    static int32_t ids[N * L], lens[N], labels[N];
    static const struct train_testdata_spec spec = {.n = N, .max_len = L, .min_len = 3,
                                                    .vocab = V, .seed = 99};
    struct train_data d = train_testdata_toy(&spec, ids, lens, labels);
    struct dist_env e;
    struct dist_rdzv_opts ro = {.connect_timeout_ms = 20000, .join_timeout_ms = 20000,
                                .op_timeout_ms = 10000};
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct train_coll tc = {0};
    struct model m;
    struct train_opts o;
    struct train_result res;
    struct spy spy = {0};
    struct train_data ev = d;
    struct eval_spy esp = {rep, &m, &ev};
    char err[256];
    int rc;

    cpu_set_threads(1); /* ranks share the machine's cores */
    tu_env(&e, run->port, rank, run->world, "train-dist-token");
    if ((rc = dist_rendezvous(&e, "h", &ro, &rz)) ||
        (rc = coll_tcp_new(dist_rdzv_store(rz), &(struct coll_opts){.shm = run->shm}, &c)))
        goto out;
    if ((rc = model_init(&m, &mc, 6, 11, err, sizeof(err)))) {
        fprintf(stderr, "model_init: %s\n", err);
        goto out;
    }
    memset(&o, 0, sizeof(o));
    /* 45 examples a rank: steps of 6 + 6, the last of 6 + 3 (a single backward group) */
    o.epochs = 2, o.batch = 6, o.accum = 2;
    optim_config_default(&o.optim);
    o.optim.lr = 3e-3f, o.optim.grad_clip = 0.5f;
    o.warmup_steps = 2, o.seed = 5, o.log_interval = 1000;
    o.rank = rank, o.world_size = run->world;
    o.checkpoint = record_step, o.checkpoint_ctx = rep, o.checkpoint_interval = 1;
    ev.n = EVAL_N;
    if (run->eval) {
        o.eval = &ev, o.eval_batch = 5, o.eval_interval = EVAL_EVERY;
        o.on_eval = check_eval, o.eval_ctx = &esp;
    }
    train_coll_init(&tc, c, run->bucket_bytes, &o);
    if (o.reduce_push) {
        const struct model_tensor *t = model_find_tensor(&m, "wte");
        spy = (struct spy){o.reduce_push, o.reduce_wait, o.bucket_ctx, &m, rep,
                           m.grads + t->offset, t->count, malloc(t->count * sizeof(float)),
                           malloc(t->count * sizeof(float)), 0};
        o.reduce_push = spy_push, o.reduce_wait = spy_wait, o.bucket_ctx = &spy;
    }
    rc = train_run(&m, &d, &o, &res);
    if (!rc && m.n_params <= MAXP)
        memcpy(rep->params, m.params, m.n_params * sizeof(float));
    free(spy.first), free(spy.last);
    train_coll_cleanup(&tc);
    model_cleanup(&m);
out:
    if (rc)
        fprintf(stderr, "rank %d: error %d\n", rank, rc);
    coll_free(c);
    dist_rdzv_free(rz);
    return rc ? 1 : 0;
}

/* Runs world ranks with the bucket size; the reports land in rep[0..world). */
static void run_ranks(int world, int shm, size_t bucket_bytes, struct report *rep)
{
    struct run run = {world, tu_free_port(), shm, bucket_bytes, rep, bucket_bytes == 0};
    pid_t pids[MAXR];

    memset(rep, 0, (size_t)world * sizeof(*rep));
    for (int r = 0; r < world; r++)
        pids[r] = tu_spawn(rank_main, r, &run);
    for (int r = 0; r < world; r++)
        TEST_EQ_INT(tu_wait(pids[r], 60000, NULL), 0);
}

/* Pushes a step takes: the plan's ranges, one more for a range across n_params (gradients and
 * the loop's own loss statistics go separately); 0 for a plan of one bucket (train_run reduces
 * after backward then, with the reduce hook). */
static int pushes_per_step(size_t bucket_bytes)
{
    struct model m;
    struct train_plan p;
    char err[256];
    int n = 0;

    if (model_init(&m, &mc, 1, 11, err, sizeof(err)))
        return -1;
    train_plan_init(&p, &m, bucket_bytes);
    for (int i = 0; i < p.first[p.nb] && p.nb > 1; i++)
        n += 1 + (p.r[i].off < m.n_params && p.r[i].off + p.r[i].n > m.n_params);
    train_plan_cleanup(&p);
    model_cleanup(&m);
    return n;
}

static struct report *shared;
enum { STEPS = 8 }; /* 2 epochs of 4 steps (45 examples a rank, 12 a step) at 2 ranks */

static void same_on_every_rank(const struct report *rep, int world, int steps)
{
    int bad = 0;
    for (int r = 0; r < world; r++) {
        TEST_EQ_INT(rep[r].steps, steps);
        TEST_EQ_INT(rep[r].eval_bad, 0);
        TEST_EQ_INT(rep[r].evals, rep[0].evals);
        for (int s = 0; s < steps && s < MAXSTEPS; s++)
            bad += rep[r].hash[s] != rep[0].hash[s];
    }
    TEST_EQ_INT(bad, 0);
}

static void test_two_ranks_bit_identical(void)
{
    struct report *base = shared, *b = shared + MAXR;
    /* every unit its own bucket; the head with the last layer; the head and both layers (the
     * backward then stays depth first, model_arm_ready), the embeddings alone; all in one */
    static const size_t sizes[] = {1, 24 << 10, 80 << 10, (size_t)TRAIN_BUCKET_MB << 20};

    run_ranks(2, 0, 0, base);
    same_on_every_rank(base, 2, STEPS);
    TEST_EQ_INT(base[0].pushes, 0);
    TEST_EQ_INT(base[0].evals, 2); /* after steps 3 and 6 of 8 */
    TEST_EQ_INT(base[0].eval_steps, 36);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int per = pushes_per_step(sizes[k]);
        run_ranks(2, 0, sizes[k], b);
        same_on_every_rank(b, 2, STEPS);
        int bad = 0;
        for (int s = 0; s < STEPS; s++)
            bad += b[0].hash[s] != base[0].hash[s];
        printf("bucket %zu B: %d pushes a step, %d of %d steps differ from after-backward\n",
               sizes[k], per, bad, STEPS);
        TEST_EQ_INT(bad, 0);
        for (int r = 0; r < 2; r++) {
            TEST_EQ_INT(b[r].waits, per ? STEPS : 0);
            TEST_EQ_INT(b[r].pushes, STEPS * per);
            TEST_EQ_INT(b[r].empty_waits, 0);
            TEST_EQ_INT(b[r].early, per ? STEPS : 0); /* the first bucket left early */
        }
    }
}

static void test_three_ranks(void)
{
    struct report *base = shared, *b = shared + MAXR;
    struct model m;
    char err[256];

    TEST_EQ_INT(model_init(&m, &mc, 1, 11, err, sizeof(err)), 0);
    run_ranks(3, -1, 0, base); /* over the tcp ring */
    run_ranks(3, -1, 1, b);
    int steps = base[0].steps;
    TEST_CHECK(steps > 0);
    same_on_every_rank(base, 3, steps);
    same_on_every_rank(b, 3, steps);
    TEST_EQ_INT(base[0].evals, (steps - 1) / EVAL_EVERY);
    TEST_EQ_INT(b[0].evals, 0);
    for (int r = 0; r < 3; r++)
        TEST_EQ_INT(b[r].early, steps);
    double s2 = 0.0, mx = 0.0;
    for (size_t i = 0; i < m.n_params; i++) {
        double dd = (double)b[0].params[i] - base[0].params[i];
        s2 += dd * dd;
        mx = fmax(mx, fabs(dd));
    }
    double rms = sqrt(s2 / (double)m.n_params);
    printf("3 ranks, %d steps: bucketed vs after backward: rms %.3g, max %.3g\n", steps, rms, mx);
    TEST_CHECK(rms < 1e-5);
    model_cleanup(&m);
}

int main(void)
{
    shared = mmap(NULL, 2 * MAXR * sizeof(struct report), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    TEST_RUN(test_two_ranks_bit_identical);
    TEST_RUN(test_three_ranks);
    munmap(shared, 2 * MAXR * sizeof(struct report));
    return test_summary();
}
