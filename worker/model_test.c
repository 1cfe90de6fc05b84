/*
 * The model end to end: parameter layout and deterministic init, whole-model gradients against
 * finite differences (Transformer, both poolings, and the n-gram baseline), gradient
 * accumulation, and the golden test against PyTorch: logits, loss, every parameter gradient and
 * the losses of 10 AdamW steps from worker/testdata/model_ref.txt (written by hack/torch_ref.py).
 *
 * Tolerances (fp32 on both sides, different summation orders): logits and loss 2e-5 absolute;
 * gradients 1e-5 + 1e-3 * |ref|; the 10-step losses 1e-4 absolute.
 */
#include "worker/model.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/test.h"
#include "kernels/gradcheck.h"
#include "worker/optim.h"
#include "worker/train_plan.h"

static const struct model_config tiny = {
    .kind = MODEL_TRANSFORMER, .vocab = 20, .classes = 3, .max_seq_len = 6, .hidden = 8,
    .layers = 2, .heads = 2, .ffn = 32, .pool = MODEL_POOL_MEAN, .buckets = 0,
};
enum { B = 3, T = 6 };
static const int tokens[B * T] = {1, 5, 7, 2, 9, 3, 4, 4, 8, 0, 0, 0, 19, 0, 0, 0, 0, 0};
static const int lens[B] = {6, 3, 1};
static const int labels[B] = {2, 0, 1};

static void test_layout_and_init(void)
{
    struct model m;
    char err[256];
    TEST_EQ_INT(model_init(&m, &tiny, B, 42, err, sizeof(err)), 0);
    size_t total = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        TEST_EQ_INT(m.tensors[i].offset, total); /* contiguous, in table order */
        total += m.tensors[i].count;
    }
    TEST_EQ_INT(total, m.n_params);
    /* V*C + maxT*C + L*(2C + 3C*C + 3C + C*C + C + 2C + F*C + F + C*F + C) + 2C + K*C + K */
    TEST_EQ_INT(m.n_params, 160 + 48 + 2 * (16 + 192 + 24 + 64 + 8 + 16 + 256 + 32 + 256 + 8) +
                                16 + 24 + 3);
    TEST_CHECK(m.p.ln1w[0] == 1.0f && m.p.ln1b[0] == 0.0f && m.p.qkvb[5] == 0.0f);
    TEST_CHECK(m.p.wte[0] != 0.0f && m.g.wte == m.grads);
    float first = m.p.wte[0];
    struct model m2;
    TEST_EQ_INT(model_init(&m2, &tiny, B, 42, err, sizeof(err)), 0);
    TEST_CHECK(memcmp(m.params, m2.params, m.n_params * sizeof(float)) == 0);
    model_init_params(&m2, 43);
    TEST_CHECK(m2.p.wte[0] != first);
    model_cleanup(&m);
    model_cleanup(&m2);
}

/* model_step_flops against the model's own tensor table: 6 x (rows) x (weight matrix entries)
 * for every GEMM (the layers' 3-D weights on B*T rows, the classifier on B), plus attention's
 * 12 x L x B x T x T x C; a matrix added to the model and not to the count fails here. */
static void test_step_flops(void)
{
    struct model m;
    char err[256];
    const int bs[] = {1, 3, 8}, ts[] = {1, 6, 5};
    TEST_EQ_INT(model_init(&m, &tiny, 8, 42, err, sizeof(err)), 0);
    for (int k = 0; k < 3; k++) {
        double rows = (double)bs[k] * ts[k], want = 0.0;
        for (int i = 0; i < m.n_tensors; i++) {
            const struct model_tensor *t = &m.tensors[i];
            if (t->ndim == 3)
                want += 6.0 * rows * (double)t->count;
            else if (!strcmp(t->name, "clsw"))
                want += 6.0 * bs[k] * (double)t->count;
        }
        want += 12.0 * tiny.layers * bs[k] * (double)ts[k] * ts[k] * tiny.hidden;
        double got = model_step_flops(&tiny, bs[k], ts[k]);
        if (!TEST_CHECK(fabs(got - want) <= 1e-9 * want))
            fprintf(stderr, "       B=%d T=%d: %.0f FLOPs, the tensors say %.0f\n", bs[k], ts[k],
                    got, want);
    }
    /* GPT-2-124M-sized (12 x 768, 3072 MLP, 2 classes), B=8 T=1024: 5.10 TFLOP per step
     * (6 x 84.9M layer weights x 8192 tokens = 4.18, attention 0.93) */
    struct model_config g = {.kind = MODEL_TRANSFORMER, .vocab = 50257, .classes = 2,
                             .max_seq_len = 1024, .hidden = 768, .layers = 12, .heads = 12,
                             .ffn = 3072, .pool = MODEL_POOL_MEAN};
    TEST_CHECK(fabs(model_step_flops(&g, 8, 1024) / 1e12 - 5.1024) < 1e-3);
    model_cleanup(&m);
}

static void test_config_errors(void)
{
    struct model m;
    char err[256] = "";
    struct model_config c = tiny;
    c.heads = 3;
    TEST_EQ_INT(model_init(&m, &c, B, 1, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "model.heads") != NULL);
    model_cleanup(&m);
    c = tiny;
    c.classes = 1; /* regression's one output */
    TEST_EQ_INT(model_config_check(&c, err, sizeof(err)), 0);
    c.classes = 0;
    TEST_EQ_INT(model_config_check(&c, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "model.classes") != NULL);
}

static double fd_loss(void *p)
{
    return model_forward(p, tokens, lens, labels, B, T);
}

static void gradcheck_model(const struct model_config *cfg, const char *what, float smoothing,
                            const float *class_weight)
{
    struct model m;
    char err[256];
    uint64_t s = 99;
    TEST_EQ_INT(model_init(&m, cfg, B, 7, err, sizeof(err)), 0);
    m.label_smoothing = smoothing, m.class_weight = class_weight;
    /* Larger weights than the init's 0.02, so every path carries a measurable gradient. */
    gc_fill(m.params, m.n_params, &s, -0.5f, 0.5f);
    model_zero_grad(&m);
    model_forward(&m, tokens, lens, labels, B, T);
    model_backward(&m, 1.0f / B);
    for (int i = 0; i < m.n_tensors; i++) {
        const struct model_tensor *t = &m.tensors[i];
        char name[64];
        snprintf(name, sizeof(name), "%s %s", what, t->name);
        gc_check(name, m.params + t->offset, m.grads + t->offset, t->count,
                 t->count > 400 ? 7 : 1, fd_loss, &m, 1e-2f, 5e-4, 2e-2);
    }
    model_cleanup(&m);
}

static void test_transformer_gradcheck(void) { gradcheck_model(&tiny, "mean", 0.0f, NULL); }

static void test_transformer_cls_gradcheck(void)
{
    struct model_config c = tiny;
    c.pool = MODEL_POOL_CLS;
    c.layers = 1;
    gradcheck_model(&c, "cls", 0.0f, NULL);
}

static void test_ngram_gradcheck(void)
{
    struct model_config c = {.kind = MODEL_NGRAM, .vocab = 20, .classes = 3, .max_seq_len = 6,
                             .hidden = 5, .buckets = 11};
    static const float cw[3] = {0.6f, 1.9f, 1.1f};
    gradcheck_model(&c, "ngram", 0.0f, NULL);
    gradcheck_model(&c, "ngram smoothed", 0.3f, NULL);
    gradcheck_model(&c, "ngram class-weighted", 0.0f, cw);
}

/* Label smoothing (training.labelSmoothing) and class weights (training.classWeight): the
 * loss's gradient through the whole model. */
static void test_smoothed_gradcheck(void)
{
    static const float cw[3] = {1.5f, 0.5f, 0.8f};
    struct model_config c = tiny;
    c.layers = 1;
    gradcheck_model(&c, "smoothed", 0.2f, NULL);
    gradcheck_model(&c, "smoothed class-weighted", 0.2f, cw);
}

/* Two half batches, each scaled 1/(2*half), give the gradient of one full batch. */
static void test_gradient_accumulation(void)
{
    struct model m;
    char err[256];
    TEST_EQ_INT(model_init(&m, &tiny, 4, 5, err, sizeof(err)), 0);
    static const int tok4[4 * 4] = {1, 2, 3, 4, 5, 6, 0, 0, 7, 0, 0, 0, 8, 9, 10, 11};
    static const int len4[4] = {4, 2, 1, 4}, lab4[4] = {0, 1, 2, 1};
    float *full = malloc(m.n_params * sizeof(float));
    model_zero_grad(&m);
    model_forward(&m, tok4, len4, lab4, 4, 4);
    model_backward(&m, 1.0f / 4);
    memcpy(full, m.grads, m.n_params * sizeof(float));
    model_zero_grad(&m);
    for (int h = 0; h < 2; h++) {
        model_forward(&m, tok4 + h * 8, len4 + h * 2, lab4 + h * 2, 2, 4);
        model_backward(&m, 1.0f / 4);
    }
    int bad = 0;
    for (size_t i = 0; i < m.n_params; i++)
        bad += fabsf(full[i] - m.grads[i]) > 1e-6f + 1e-4f * fabsf(full[i]);
    TEST_EQ_INT(bad, 0);
    free(full);
    model_cleanup(&m);
}

/* ---- golden test against PyTorch ---------------------------------------------------------- */

/* Reads "key n v1 .. vn" (or "key v1 .. vn" when want > 0 is given) from the fixture. */
static int read_floats(FILE *f, const char *key, float *out, int want)
{
    char word[64];
    int n = want;
    rewind(f);
    while (fscanf(f, "%63s", word) == 1) {
        if (strcmp(word, key)) {
            int ch;
            while ((ch = fgetc(f)) != '\n' && ch != EOF)
                ;
            continue;
        }
        if (want <= 0 && fscanf(f, "%d", &n) != 1)
            return -1;
        for (int i = 0; i < n; i++)
            if (fscanf(f, "%f", &out[i]) != 1)
                return -1;
        return n;
    }
    return -1;
}

/* A deterministic batch of gb examples of varied lengths (padding after len[b]). */
static void fill_batch(int gb, int *tok, int *len, int *lab)
{
    for (int b = 0; b < gb; b++) {
        len[b] = 1 + (b * 5) % T;
        lab[b] = b % tiny.classes;
        for (int t = 0; t < T; t++)
            tok[b * T + t] = t < len[b] ? 1 + (b * 7 + t * 3) % (tiny.vocab - 1) : 0;
    }
}

/* A batch above the backward's group size (3 groups, the last one short) runs depth first in
 * groups with partial gradients: it must equal the sum of one-sequence batches, and give the same
 * bits on 1 and 2 threads. */
static void test_grouped_backward(void)
{
    enum { GB = 9 };
    struct model m;
    char err[256];
    TEST_EQ_INT(model_init(&m, &tiny, GB, 7, err, sizeof(err)), 0);
    int tok[GB * T], len[GB], lab[GB];
    fill_batch(GB, tok, len, lab);
    size_t n = m.n_params;
    float *full = malloc(n * sizeof(float)), *one = malloc(n * sizeof(float));
    model_zero_grad(&m);
    model_forward(&m, tok, len, lab, GB, T);
    model_backward(&m, 1.0f / GB);
    memcpy(full, m.grads, n * sizeof(float));
    model_zero_grad(&m);
    for (int b = 0; b < GB; b++) {
        model_forward(&m, tok + b * T, len + b, lab + b, 1, T);
        model_backward(&m, 1.0f / GB);
    }
    int bad = 0, nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        bad += fabsf(full[i] - m.grads[i]) > 1e-6f + 1e-4f * fabsf(full[i]);
        nonzero += full[i] != 0.0f;
    }
    TEST_EQ_INT(bad, 0);
    TEST_CHECK(nonzero > (int)(n / 2));
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads > 1 ? 1 : 2);
    model_zero_grad(&m);
    model_forward(&m, tok, len, lab, GB, T);
    model_backward(&m, 1.0f / GB);
    omp_set_num_threads(threads);
    memcpy(one, m.grads, n * sizeof(float));
    TEST_CHECK(memcmp(one, full, n * sizeof(float)) == 0);
#endif
    free(full);
    free(one);
    model_cleanup(&m);
}

/* The ready hook (model_arm_ready): what each call saw. */
struct ready_log {
    const struct model *m;
    const float *ref; /* the gradients the whole backward ends with */
    int order[16], n;
    int early;    /* units not yet fired whose gradients were still short of ref (not final) */
    int late;     /* floats of fired units that still differed from ref (fired too early) */
};

static int unit_differs(const struct model *m, int u, const float *ref, int *floats)
{
    struct train_range r[TRAIN_PLAN_UNIT_RANGES];
    int k = train_plan_unit_ranges(m, u, r), diff = 0;
    for (int i = 0; i < k; i++)
        for (size_t j = r[i].off; j < r[i].off + r[i].n && j < m->n_params; j++)
            diff += m->grads[j] != ref[j];
    if (floats)
        *floats += diff;
    return diff > 0;
}

static void on_ready(void *ctx, int unit)
{
    struct ready_log *lg = ctx;
    if (lg->n < 16)
        lg->order[lg->n] = unit;
    lg->n++;
    unit_differs(lg->m, unit, lg->ref, &lg->late);
    for (int u = unit + 1; u < MODEL_UNITS(lg->m->cfg.layers); u++)
        lg->early += unit_differs(lg->m, u, lg->ref, NULL);
}

/* Two accumulated micro-batches, the second armed: the hook fires once per unit in order, each
 * unit final when it fires and (each_layer, or a single backward group) every later one not yet,
 * and the gradients are bit-identical to the unarmed backward (grouped batch of 9 and a single
 * group of 3; transformer and n-gram; armed depth first and each_layer). */
static void test_ready_hook(void)
{
    struct model_config ng = tiny;
    ng.kind = MODEL_NGRAM, ng.buckets = 16;
    const struct model_config *cfgs[2] = {&tiny, &ng};
    enum { GB = 9 };
    int tok[GB * T], len[GB], lab[GB];
    fill_batch(GB, tok, len, lab);
    for (int c = 0; c < 2; c++) {
        for (int mb = 3; mb <= GB; mb += GB - 3) {
            struct model m;
            char err[256];
            TEST_EQ_INT(model_init(&m, cfgs[c], GB, 7, err, sizeof(err)), 0);
            size_t n = m.n_params;
            int U = MODEL_UNITS(m.cfg.layers);
            float *ref = malloc(n * sizeof(float));
            for (int armed = 0; armed < 3; armed++) { /* no, depth first, each_layer */
                struct ready_log lg = {.m = &m, .ref = ref};
                model_zero_grad(&m);
                model_forward(&m, tok + (GB - mb) * T, len + GB - mb, lab + GB - mb, mb, T);
                model_backward(&m, 0.5f / mb);
                model_forward(&m, tok, len, lab, mb, T);
                if (armed)
                    model_arm_ready(&m, on_ready, &lg, armed == 2);
                model_backward(&m, 0.5f / mb);
                if (!armed) {
                    memcpy(ref, m.grads, n * sizeof(float));
                    TEST_EQ_INT(lg.n, 0);
                    continue;
                }
                TEST_EQ_INT(lg.n, U);
                for (int u = 0; u < U && u < lg.n; u++)
                    TEST_EQ_INT(lg.order[u], u);
                TEST_EQ_INT(lg.late, 0);
                /* each_layer, or a single backward group: every later unit still pending at each
                 * call; depth first over groups: the layers fire together, after all of them */
                int L = m.cfg.layers;
                TEST_EQ_INT(lg.early, armed == 2 || mb <= 4 ? U * (U - 1) / 2 : (U - 1) + L);
                TEST_CHECK(memcmp(m.grads, ref, n * sizeof(float)) == 0);
                model_forward(&m, tok, len, lab, mb, T); /* disarmed after one backward */
                model_backward(&m, 0.5f / mb);
                TEST_EQ_INT(lg.n, U);
            }
            free(ref);
            model_cleanup(&m);
        }
    }
}

static FILE *open_fixture(void)
{
    const char *dir = getenv("GANTRY_TESTDATA");
    char path[1024];
    snprintf(path, sizeof(path), "%s/model_ref.txt", dir ? dir : "worker/testdata");
    FILE *f = fopen(path, "r");
    if (!f)
        fprintf(stderr, "  cannot open %s: regenerate with hack/torch_ref.py\n", path);
    return f;
}

/* Gradients off PyTorch's ref by more than 1e-5 + 1e-3 |ref| (the first few printed); the
 * largest difference in *worst. */
static int grads_off(const float *got, const float *ref, size_t n, double *worst)
{
    int bad = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        *worst = fmax(*worst, fabs(got[i] - ref[i]));
        if (!(fabsf(got[i] - ref[i]) <= 1e-5f + 1e-3f * fabsf(ref[i])) && bad++ < 5)
            fprintf(stderr, "  grad[%zu]: got %.7g, PyTorch %.7g\n", i, got[i], ref[i]);
    }
    return bad;
}

/* The fixture batch's mean loss, with its gradients in m->grads (zeroed first). */
static float fwd_bwd(struct model *m)
{
    model_zero_grad(m);
    float l = model_forward(m, tokens, lens, labels, B, T);
    model_backward(m, 1.0f / B);
    return l;
}

static void test_matches_pytorch(void)
{
    struct model m;
    char err[256];
    FILE *f = open_fixture();
    TEST_CHECK(f != NULL);
    if (!f)
        return;
    TEST_EQ_INT(model_init(&m, &tiny, B, 1234, err, sizeof(err)), 0);
    float *ref = malloc(m.n_params * sizeof(float)), logits[B * 3], loss;
    TEST_EQ_INT(read_floats(f, "logits", logits, 0), B * 3);
    TEST_EQ_INT(read_floats(f, "loss", &loss, 1), 1);
    TEST_EQ_INT(read_floats(f, "grads", ref, 0), (int)m.n_params);

    float got = fwd_bwd(&m);
    TEST_NEAR(got, loss, 2e-5);
    for (int i = 0; i < B * 3; i++)
        TEST_NEAR(m.logits[i], logits[i], 2e-5);
    double worst = 0, worst_logit = 0;
    for (int i = 0; i < B * 3; i++)
        worst_logit = fmax(worst_logit, fabs(m.logits[i] - logits[i]));
    TEST_EQ_INT(grads_off(m.grads, ref, m.n_params, &worst), 0);
    printf("  vs PyTorch: loss diff %.2g, max logit diff %.2g, max grad diff %.2g\n",
           fabs(got - loss), worst_logit, worst);

    /* With label smoothing: PyTorch's cross_entropy(label_smoothing=0.1) on the same batch. */
    float eps, sloss;
    TEST_EQ_INT(read_floats(f, "smoothing", &eps, 1), 1);
    TEST_EQ_INT(read_floats(f, "smoothed_loss", &sloss, 1), 1);
    TEST_EQ_INT(read_floats(f, "smoothed_grads", ref, 0), (int)m.n_params);
    m.label_smoothing = eps;
    got = fwd_bwd(&m);
    TEST_NEAR(got, sloss, 2e-5);
    TEST_CHECK(fabsf(sloss - loss) > 1e-5f); /* the fixture's smoothing changes the loss */
    TEST_EQ_INT(grads_off(m.grads, ref, m.n_params, &worst), 0);
    printf("  vs PyTorch, label smoothing %g: loss %.7f (PyTorch %.7f), max grad diff %.2g\n",
           (double)eps, (double)got, (double)sloss, worst);

    /* And class weights: each example's smoothed loss times its label's weight, the mean. */
    float cw[3], wloss;
    TEST_EQ_INT(read_floats(f, "class_weight", cw, 3), 3);
    TEST_EQ_INT(read_floats(f, "weighted_loss", &wloss, 1), 1);
    TEST_EQ_INT(read_floats(f, "weighted_grads", ref, 0), (int)m.n_params);
    m.class_weight = cw;
    got = fwd_bwd(&m);
    TEST_NEAR(got, wloss, 2e-5);
    TEST_EQ_INT(grads_off(m.grads, ref, m.n_params, &worst), 0);
    printf("  vs PyTorch, class weights %g %g %g too: loss %.7f (PyTorch %.7f), max grad diff "
           "%.2g\n", (double)cw[0], (double)cw[1], (double)cw[2], (double)got, (double)wloss,
           worst);
    m.label_smoothing = 0.0f, m.class_weight = NULL;

    /* 10 AdamW steps: lr wd beta1 beta2 eps clip warmup steps min_ratio */
    float h[9], want[10];
    TEST_EQ_INT(read_floats(f, "adamw", h, 9), 9);
    TEST_EQ_INT(read_floats(f, "losses", want, 0), 10);
    struct optim_config oc;
    optim_config_default(&oc);
    oc.lr = h[0], oc.weight_decay = h[1], oc.beta1 = h[2], oc.beta2 = h[3], oc.eps = h[4];
    oc.grad_clip = h[5], oc.warmup_steps = (int)h[6], oc.total_steps = (long)h[7];
    oc.min_lr_ratio = h[8];
    /* Twice: clip + adamw_step (PyTorch's two calls), and the fused adamw_clip_step, which must
     * give the same parameters bit for bit. */
    struct adamw opt, opt2;
    struct model m2;
    TEST_CHECK(model_init(&m2, &m.cfg, B, 1, err, sizeof(err)) == 0);
    model_init_params(&m, 1234);
    model_init_params(&m2, 1234);
    adamw_init(&opt, m.n_params);
    adamw_init(&opt2, m2.n_params);
    int clipped = 0;
    for (int s = 0; s < 10; s++) {
        model_zero_grad(&m);
        float l = model_forward(&m, tokens, lens, labels, B, T);
        model_backward(&m, 1.0f / B);
        float n1 = optim_clip_grad_norm(m.grads, m.n_params, oc.grad_clip);
        adamw_step(&opt, &m, &oc, optim_lr(&oc, s));
        TEST_NEAR(l, want[s], 1e-4);
        worst = s ? fmax(worst, fabs(l - want[s])) : fabs(l - want[s]);

        model_zero_grad(&m2);
        float l2 = model_forward(&m2, tokens, lens, labels, B, T);
        model_backward(&m2, 1.0f / B);
        float n2 = adamw_clip_step(&opt2, &m2, &oc, optim_lr(&oc, s));
        TEST_CHECK(l2 == l && n2 == n1);
        clipped += oc.grad_clip > 0.0f && n1 > oc.grad_clip;
    }
    TEST_CHECK(memcmp(m.params, m2.params, m.n_params * sizeof(float)) == 0);
    TEST_CHECK(memcmp(opt.v, opt2.v, m.n_params * sizeof(float)) == 0);
    printf("  10 AdamW steps: max loss diff %.2g (loss %.5f -> %.5f), %d clipped; fused "
           "adamw_clip_step identical\n", worst, want[0], want[9], clipped);
    TEST_CHECK(want[9] < want[0] - 0.05f); /* the fixture itself shows learning */
    adamw_cleanup(&opt);
    adamw_cleanup(&opt2);
    model_cleanup(&m2);
    free(ref);
    fclose(f);
    model_cleanup(&m);
}

int main(void)
{
    TEST_RUN(test_layout_and_init);
    TEST_RUN(test_step_flops);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_transformer_gradcheck);
    TEST_RUN(test_transformer_cls_gradcheck);
    TEST_RUN(test_ngram_gradcheck);
    TEST_RUN(test_smoothed_gradcheck);
    TEST_RUN(test_gradient_accumulation);
    TEST_RUN(test_grouped_backward);
    TEST_RUN(test_ready_hook);
    TEST_RUN(test_matches_pytorch);
    return test_summary();
}
