#include "worker/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/xalloc.h"
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/crossentropy.h"
#include "kernels/embed.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"

/* ---------------------------------------------------------------------------------------------
 * Activations: one buffer, carved like the parameters. Per-layer tensors are stacked with a
 * stride of the maximum size, (max_batch * max_seq_len) rows; a batch uses the first B*T rows.
 * ------------------------------------------------------------------------------------------- */
struct model_acts {
    float *buf;
    size_t n;
    float *encoded;                               /* (N,C) */
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty; /* (L,N,C) (L,N) (L,N) (L,N,3C) (L,N,C) */
    float *att;                                   /* (L,B,NH,T,T) */
    float *res2, *ln2, *ln2_mean, *ln2_rstd; /* res2 = x + attention projection */
    float *fch, *fchg, *res3; /* (L,N,F) (L,N,F) (L,N,C) */
    float *lnf, *lnf_mean, *lnf_rstd, *pooled, *logits, *probs, *losses;
    /* Gradient scratch, reused by every layer in the backward. */
    float *dres, *dln, *dqkv, *datty, *dfch, *dpooled, *dlogits;
    float *gpart; /* per-group partial gradients of the layer tensors (transformer_backward) */
};

/* ---------------------------------------------------------------------------------------------
 * Deterministic initialisation: splitmix64 -> uniform in (0,1] -> Box-Muller (cos branch only).
 * hack/torch_ref.py has the same three functions, so both sides draw identical weights.
 * ------------------------------------------------------------------------------------------- */
static double rng_uniform(uint64_t *s) /* (0, 1] */
{
    return ((double)(hash_splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

static double rng_normal(uint64_t *s)
{
    double u1 = rng_uniform(s), u2 = rng_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t model_bigram_hash(int a, int b)
{
    uint64_t s = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    return hash_splitmix64(&s);
}

/* ---------------------------------------------------------------------------------------------
 * Configuration and the tensor table
 * ------------------------------------------------------------------------------------------- */
double model_step_flops(const struct model_config *c, int B, int T)
{
    double N = (double)B * T, C = c->hidden, F = c->ffn;
    double layer = 2 * N * C * 3 * C /* qkv */ + 2 * N * C * C /* projection */ +
                   2 * 2 * N * C * F /* MLP up and down */ + 4.0 * B * (double)T * T * C;
    return 3 * (c->layers * layer + 2.0 * B * C * c->classes);
}

int model_config_check(const struct model_config *c, char *err, size_t errlen)
{
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
    if (c->vocab < 2 || c->vocab > (1 << 24))
        BAD("model.vocab: %d is out of range; it comes from the vocab file or vocabSize (2..16M)",
            c->vocab);
    if (c->classes < 1 || c->classes > 4096) /* 1: regression's one output */
        BAD("model.classes: %d classes; the data needs 2..4096 distinct labels", c->classes);
    if (c->max_seq_len < 1 || c->max_seq_len > 8192)
        BAD("model.maxSeqLen: %d is out of range; use 1..8192 (e.g. 256)", c->max_seq_len);
    if (c->hidden < 1 || c->hidden > 8192)
        BAD("model.hidden: %d is out of range; use 1..8192 (e.g. 128)", c->hidden);
    if (c->kind == MODEL_TRANSFORMER) {
        if (c->layers < 1 || c->layers > 128)
            BAD("model.layers: %d is out of range; use 1..128 (e.g. 2)", c->layers);
        if (c->heads < 1 || c->hidden % c->heads)
            BAD("model.heads: %d must be >= 1 and divide model.hidden (%d); e.g. heads: 4",
                c->heads, c->hidden);
        if (c->ffn < 1 || c->ffn > 65536)
            BAD("model.ffn: %d is out of range; use 1..65536 (usually 4 * hidden)", c->ffn);
    } else if (c->kind == MODEL_NGRAM) {
        if (c->buckets < 1 || c->buckets > (1 << 26))
            BAD("model.buckets: %d is out of range; use 1..67108864 (e.g. 131072)", c->buckets);
    } else {
        BAD("model.type: unknown model kind %d; use transformer or ngram", (int)c->kind);
    }
    return 0;
#undef BAD
}

static void add_tensor(struct model *m, size_t *off, const char *name, bool decay, int ndim,
                       int d0, int d1, int d2)
{
    struct model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    t->count = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1) * (ndim > 2 ? (size_t)d2 : 1);
    t->offset = *off;
    t->decay = decay;
    *off += t->count;
}

/* Builds the tensor table and returns the parameter count. Order = layout = init order. */
static size_t build_table(struct model *m)
{
    const struct model_config *c = &m->cfg;
    int V = c->vocab, C = c->hidden, L = c->layers, F = c->ffn, K = c->classes;
    size_t off = 0;

    m->n_tensors = 0;
    if (c->kind == MODEL_NGRAM) {
        add_tensor(m, &off, "emb", true, 2, V + c->buckets, C, 0);
    } else {
        add_tensor(m, &off, "wte", true, 2, V, C, 0);
        add_tensor(m, &off, "wpe", true, 2, c->max_seq_len, C, 0);
        add_tensor(m, &off, "ln1w", false, 2, L, C, 0);
        add_tensor(m, &off, "ln1b", false, 2, L, C, 0);
        add_tensor(m, &off, "qkvw", true, 3, L, 3 * C, C);
        add_tensor(m, &off, "qkvb", false, 2, L, 3 * C, 0);
        add_tensor(m, &off, "attprojw", true, 3, L, C, C);
        add_tensor(m, &off, "attprojb", false, 2, L, C, 0);
        add_tensor(m, &off, "ln2w", false, 2, L, C, 0);
        add_tensor(m, &off, "ln2b", false, 2, L, C, 0);
        add_tensor(m, &off, "fcw", true, 3, L, F, C);
        add_tensor(m, &off, "fcb", false, 2, L, F, 0);
        add_tensor(m, &off, "fcprojw", true, 3, L, C, F);
        add_tensor(m, &off, "fcprojb", false, 2, L, C, 0);
        add_tensor(m, &off, "lnfw", false, 1, C, 0, 0);
        add_tensor(m, &off, "lnfb", false, 1, C, 0, 0);
    }
    add_tensor(m, &off, "clsw", true, 2, K, C, 0);
    add_tensor(m, &off, "clsb", false, 1, K, 0, 0);
    return off;
}

const struct model_tensor *model_find_tensor(const struct model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return &m->tensors[i];
    return NULL;
}

static float *at(const struct model *m, float *base, const char *name)
{
    const struct model_tensor *t = model_find_tensor(m, name);
    return t ? base + t->offset : NULL;
}

/* Points every field of p at its tensor inside base (params or grads). */
static void carve(const struct model *m, struct model_params *p, float *base)
{
    p->wte = at(m, base, "wte"), p->wpe = at(m, base, "wpe");
    p->ln1w = at(m, base, "ln1w"), p->ln1b = at(m, base, "ln1b");
    p->qkvw = at(m, base, "qkvw"), p->qkvb = at(m, base, "qkvb");
    p->attprojw = at(m, base, "attprojw"), p->attprojb = at(m, base, "attprojb");
    p->ln2w = at(m, base, "ln2w"), p->ln2b = at(m, base, "ln2b");
    p->fcw = at(m, base, "fcw"), p->fcb = at(m, base, "fcb");
    p->fcprojw = at(m, base, "fcprojw"), p->fcprojb = at(m, base, "fcprojb");
    p->lnfw = at(m, base, "lnfw"), p->lnfb = at(m, base, "lnfb");
    p->clsw = at(m, base, "clsw"), p->clsb = at(m, base, "clsb");
    p->emb = at(m, base, "emb");
}

void model_init_params(struct model *m, uint64_t seed)
{
    uint64_t s = seed;
    double proj_std = 0.02 / sqrt(2.0 * (m->cfg.layers > 0 ? m->cfg.layers : 1));

    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        float *w = m->params + t->offset;
        bool ln = !strncmp(t->name, "ln", 2);
        bool proj = !strcmp(t->name, "attprojw") || !strcmp(t->name, "fcprojw");
        for (size_t j = 0; j < t->count; j++) {
            if (!t->decay) /* biases 0, LayerNorm weights 1 */
                w[j] = ln && t->name[strlen(t->name) - 1] == 'w' ? 1.0f : 0.0f;
            else
                w[j] = (float)(rng_normal(&s) * (proj ? proj_std : 0.02));
        }
    }
}

/* Carves the activation buffer; with base == NULL only counts. Returns the float count. */
/* Sequences per backward group (transformer_backward). */
#define BWD_GROUP 4
/* Sequences per backward_rows call inside a group: 2 measured a little faster than 1 or 4 (fewer
 * weight-gradient GEMM calls, still cache-sized). */
#define BWD_SEQS 2

static size_t carve_acts(struct model_acts *a, const struct model_config *c, int MB, float *base)
{
    size_t N = (size_t)MB * c->max_seq_len, C = c->hidden, L = c->layers, F = c->ffn;
    size_t K = c->classes, NH = c->heads, T = c->max_seq_len, off = 0;
#define TAKE(field, count) (a->field = base ? base + off : NULL, off += (count))
    if (c->kind == MODEL_TRANSFORMER) {
        TAKE(encoded, N * C);
        TAKE(ln1, L * N * C), TAKE(ln1_mean, L * N), TAKE(ln1_rstd, L * N);
        TAKE(qkv, L * N * 3 * C), TAKE(atty, L * N * C), TAKE(att, L * MB * NH * T * T);
        TAKE(res2, L * N * C);
        TAKE(ln2, L * N * C), TAKE(ln2_mean, L * N), TAKE(ln2_rstd, L * N);
        TAKE(fch, L * N * F), TAKE(fchg, L * N * F), TAKE(res3, L * N * C);
        TAKE(lnf, N * C), TAKE(lnf_mean, N), TAKE(lnf_rstd, N);
        TAKE(dres, N * C), TAKE(dln, N * C), TAKE(dqkv, N * 3 * C), TAKE(datty, N * C);
        TAKE(dfch, N * F);
        size_t groups = MB > BWD_GROUP ? ((size_t)MB + BWD_GROUP - 1) / BWD_GROUP : 0;
        TAKE(gpart, groups * L * (4 * C * C + 2 * F * C + 9 * C + F));
    }
    TAKE(pooled, MB * C), TAKE(logits, MB * K), TAKE(probs, MB * K), TAKE(losses, (size_t)MB);
    TAKE(dpooled, MB * C), TAKE(dlogits, MB * K);
#undef TAKE
    return off;
}

size_t model_param_count(const struct model_config *cfg)
{
    struct model *m = xcalloc(1, sizeof(*m)); /* the tensor table only: nothing allocated */
    m->cfg = *cfg;
    if (cfg->kind == MODEL_NGRAM)
        m->cfg.layers = m->cfg.heads = m->cfg.ffn = 0;
    size_t n = build_table(m);
    free(m);
    return n;
}

int model_init(struct model *m, const struct model_config *cfg, int max_batch, uint64_t seed,
               char *err, size_t errlen)
{
    if (model_alloc(m, cfg, max_batch, err, errlen))
        return -1;
    model_init_params(m, seed);
    return 0;
}

int model_alloc(struct model *m, const struct model_config *cfg, int max_batch, char *err,
                size_t errlen)
{
    memset(m, 0, sizeof(*m));
    if (model_config_check(cfg, err, errlen))
        return -1;
    if (max_batch < 1 || max_batch > (1 << 20)) {
        snprintf(err, errlen, "batchSize: %d is out of range; use 1..1048576", max_batch);
        return -1;
    }
    m->cfg = *cfg;
    if (cfg->kind == MODEL_NGRAM)
        m->cfg.layers = m->cfg.heads = m->cfg.ffn = 0;
    m->max_batch = max_batch;
    m->n_params = build_table(m);
    m->params = xcalloc(m->n_params, sizeof(float));
    m->grads = xcalloc(m->n_params, sizeof(float));
    carve(m, &m->p, m->params);
    carve(m, &m->g, m->grads);
    m->a = xcalloc(1, sizeof(*m->a));
    m->a->n = carve_acts(m->a, &m->cfg, max_batch, NULL);
    m->a->buf = xcalloc(m->a->n, sizeof(float));
    carve_acts(m->a, &m->cfg, max_batch, m->a->buf);
    if (cfg->kind == MODEL_NGRAM) {
        m->ngram_ids = xcalloc((size_t)max_batch * 2 * cfg->max_seq_len, sizeof(int));
        m->ngram_count = xcalloc((size_t)max_batch, sizeof(int));
    }
    cpu_blas_single(); /* before the forward calls kernels from inside its parallel loops */
    return 0;
}

void model_cleanup(struct model *m)
{
    if (m->a)
        free(m->a->buf);
    free(m->a);
    free(m->params);
    free(m->grads);
    free(m->ngram_ids);
    free(m->ngram_count);
    memset(m, 0, sizeof(*m));
}

/* memset to 0.0f over the kernels' threads: a single thread does not saturate memory bandwidth,
 * and the backward clears ~60 MB of gradient scratch per step at this model's size. */
static void zero_floats(float *p, size_t bytes)
{
    size_t n = bytes / sizeof(float), chunk = 16384;
#pragma omp parallel for schedule(dynamic, 1) if (n > 4 * chunk)
    for (size_t i = 0; i < n; i += chunk)
        memset(p + i, 0, sizeof(float) * (n - i < chunk ? n - i : chunk));
}

void model_zero_grad(struct model *m)
{
    zero_floats(m->grads, m->n_params * sizeof(float));
}

/* ---------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------- */
/*
 * The forward of rows [r0, r0 + B * T): B whole sequences starting at sequence b0 (r0 = b0 * T),
 * through every layer and the final LayerNorm.
 */
static void forward_rows(struct model *m, int b0, int B, int T)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    const struct model_params *p = &m->p;
    int C = c->hidden, NH = c->heads, F = c->ffn, N = B * T;
    size_t sN = (size_t)m->max_batch * c->max_seq_len; /* per-layer stride, in rows */
    size_t sAtt = (size_t)m->max_batch * NH * c->max_seq_len * c->max_seq_len;
    size_t r0 = (size_t)b0 * T, a0 = (size_t)b0 * NH * T * T;
    const int *len = m->len + b0;

    embed_forward_cpu(a->encoded + r0 * C, m->tokens + r0, p->wte, p->wpe, B, T, C);
    const float *x = a->encoded + r0 * C;
    for (int l = 0; l < c->layers; l++) {
        size_t o = l * sN + r0; /* this layer's first row of ours */
        float *ln1 = a->ln1 + o * C, *qkv = a->qkv + o * 3 * C, *atty = a->atty + o * C;
        float *res2 = a->res2 + o * C, *ln2 = a->ln2 + o * C;
        float *fch = a->fch + o * F, *fchg = a->fchg + o * F, *res3 = a->res3 + o * C;

        layernorm_forward_cpu(ln1, a->ln1_mean + o, a->ln1_rstd + o, x, p->ln1w + l * C,
                              p->ln1b + l * C, N, C);
        matmul_forward_cpu(qkv, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, N, C,
                           3 * C);
        attention_forward_cpu(atty, a->att + l * sAtt + a0, qkv, len, B, T, C, NH);
        matmul_forward_residual_cpu(res2, x, atty, p->attprojw + (size_t)l * C * C,
                                    p->attprojb + l * C, N, C, C);
        layernorm_forward_cpu(ln2, a->ln2_mean + o, a->ln2_rstd + o, res2, p->ln2w + l * C,
                              p->ln2b + l * C, N, C);
        matmul_forward_gelu_cpu(fchg, fch, ln2, p->fcw + (size_t)l * F * C, p->fcb + l * F, N, C,
                                F);
        matmul_forward_residual_cpu(res3, res2, fchg, p->fcprojw + (size_t)l * C * F,
                                    p->fcprojb + l * C, N, F, C);
        x = res3;
    }
    layernorm_forward_cpu(a->lnf + r0 * C, a->lnf_mean + r0, a->lnf_rstd + r0, x, p->lnfw,
                          p->lnfb, N, C);
}

/*
 * Sequences are independent until the pooling, so a batch runs one sequence per thread at a time
 * through every layer (depth first): a sequence's activations (T rows) and the layer weights stay
 * in the core's cache from one op to the next, instead of each op streaming the whole batch
 * through memory. The kernels, called inside this parallel region, run single-threaded (nested
 * OpenMP regions are inactive). A single sequence uses the kernels' own threads instead.
 */
static void transformer_forward(struct model *m, int B, int T)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    int C = c->hidden;

    if (B > 1) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            forward_rows(m, b, 1, T);
    } else {
        forward_rows(m, 0, B, T);
    }
    if (c->pool == MODEL_POOL_CLS)
        clspool_forward_cpu(a->pooled, a->lnf, B, T, C);
    else
        meanpool_forward_cpu(a->pooled, a->lnf, m->len, B, T, C);
}

int model_ngram_bag(const struct model_config *c, const int *tok, int len, int *ids)
{
    int n = 0;
    for (int t = 0; t < len; t++)
        ids[n++] = tok[t];
    for (int t = 0; t + 1 < len; t++)
        ids[n++] = c->vocab + (int)(model_bigram_hash(tok[t], tok[t + 1]) % (uint64_t)c->buckets);
    return n;
}

/* Fills the bags (model_ngram_bag), one row of 2 * max_seq_len ids per example. */
static void ngram_bags(struct model *m, int B, int T)
{
    int M = 2 * m->cfg.max_seq_len;
    for (int b = 0; b < B; b++)
        m->ngram_count[b] = model_ngram_bag(&m->cfg, m->tokens + (size_t)b * T, m->len[b],
                                            m->ngram_ids + (size_t)b * M);
}

float model_forward(struct model *m, const int *tokens, const int *len, const int *labels, int B,
                    int T)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    int C = c->hidden, K = c->classes;
    float loss = 0.0f;

    m->B = B, m->T = T, m->tokens = tokens, m->len = len, m->labels = labels;
    if (c->kind == MODEL_NGRAM) {
        ngram_bags(m, B, T);
        embbag_forward_cpu(a->pooled, m->ngram_ids, m->ngram_count, m->p.emb, B,
                           2 * c->max_seq_len, C);
    } else {
        transformer_forward(m, B, T);
    }
    matmul_forward_cpu(a->logits, a->pooled, m->p.clsw, m->p.clsb, B, C, K);
    m->logits = a->logits, m->probs = a->probs, m->losses = a->losses;
    if (labels) { /* the task's loss (and probs), then the batch mean */
        if (m->label_words == MODEL_TARGETS_REAL) /* regression: one output, squared error */
            mse_forward_cpu(a->losses, a->probs, a->logits, (const float *)labels, B);
        else if (m->label_words) /* multi-label: a sigmoid per class */
            bce_forward_cpu(a->losses, a->probs, a->logits, labels, m->label_words, B, K);
        else
            crossentropy_forward_cpu(a->losses, a->probs, a->logits, labels, m->label_smoothing,
                                     m->class_weight, B, K);
        double s = 0.0;
        for (int b = 0; b < B; b++)
            s += a->losses[b];
        loss = (float)(s / B);
    } else if (m->label_words == MODEL_TARGETS_REAL) { /* the outputs themselves */
        memcpy(a->probs, a->logits, (size_t)B * sizeof(float));
    } else if (m->label_words) { /* each class's probability: the sigmoid */
        for (size_t i = 0; i < (size_t)B * K; i++) {
            float e = expf(-fabsf(a->logits[i]));
            a->probs[i] = a->logits[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        }
    } else {
        /* probabilities for evaluation: cross-entropy against class 0, loss discarded */
        static const int zero[1] = {0};
        for (int b = 0; b < B; b++)
            crossentropy_forward_cpu(a->losses + b, a->probs + (size_t)b * K,
                                     a->logits + (size_t)b * K, zero, 0.0f, NULL, 1, K);
    }
    return loss;
}

/* ---------------------------------------------------------------------------------------------
 * Backward (accumulates into m->grads)
 * ------------------------------------------------------------------------------------------- */
/*
 * The layers' backward for rows [r0, r0 + B * T) (B sequences from b0), layers l_hi down to l_lo:
 * dres holds d(layer l_hi's output) for those rows on entry and d(layer l_lo's input; the
 * embedding output when l_lo is 0) on return. Parameter gradients accumulate into g (the group
 * partial, see transformer_backward).
 */
static void backward_rows(struct model *m, int b0, int B, int T, const struct model_params *g,
                          int l_hi, int l_lo)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    const struct model_params *p = &m->p;
    int C = c->hidden, NH = c->heads, F = c->ffn, N = B * T;
    size_t sN = (size_t)m->max_batch * c->max_seq_len;
    size_t sAtt = (size_t)m->max_batch * NH * c->max_seq_len * c->max_seq_len;
    size_t r0 = (size_t)b0 * T, a0 = (size_t)b0 * NH * T * T;
    const int *len = m->len + b0;
    float *dres = a->dres + r0 * C, *dln = a->dln + r0 * C, *dfch = a->dfch + r0 * F;
    float *datty = a->datty + r0 * C, *dqkv = a->dqkv + r0 * 3 * C;

    for (int l = l_hi; l >= l_lo; l--) {
        size_t o = l * sN + r0;
        const float *x = l ? a->res3 + (o - sN) * C : a->encoded + r0 * C;
        const float *ln1 = a->ln1 + o * C, *qkv = a->qkv + o * 3 * C, *atty = a->atty + o * C;
        const float *res2 = a->res2 + o * C, *ln2 = a->ln2 + o * C, *fch = a->fch + o * F;
        const float *fchg = a->fchg + o * F;

        /* dres holds d(res3): it flows to res2 unchanged and into the MLP branch. The
         * *_gelu backwards OVERWRITE their dinp (kernels/matmul.h): no clearing passes. */
        matmul_backward_gelu_cpu(dfch, g->fcprojw + (size_t)l * C * F, g->fcprojb + l * C, dres,
                                 fchg, fch, p->fcprojw + (size_t)l * C * F, N, F, C);
        matmul_backward_gelu_cpu(dln, g->fcw + (size_t)l * F * C, g->fcb + l * F, dfch, ln2, NULL,
                                 p->fcw + (size_t)l * F * C, N, C, F);
        layernorm_backward_cpu(dres, g->ln2w + l * C, g->ln2b + l * C, dln, res2, p->ln2w + l * C,
                               a->ln2_mean + o, a->ln2_rstd + o, N, C);
        /* dres now holds d(res2): to x unchanged and into the attention branch. */
        matmul_backward_gelu_cpu(datty, g->attprojw + (size_t)l * C * C, g->attprojb + l * C, dres,
                                 atty, NULL, p->attprojw + (size_t)l * C * C, N, C, C);
        zero_floats(dqkv, (size_t)N * 3 * C * sizeof(float));
        attention_backward_cpu(dqkv, datty, qkv, a->att + l * sAtt + a0, len, B, T, C, NH);
        matmul_backward_gelu_cpu(dln, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C, dqkv,
                                 ln1, NULL, p->qkvw + (size_t)l * 3 * C * C, N, C, 3 * C);
        layernorm_backward_cpu(dres, g->ln1w + l * C, g->ln1b + l * C, dln, x, p->ln1w + l * C,
                               a->ln1_mean + o, a->ln1_rstd + o, N, C);
    }
}

/* The layer tensors ln1w .. fcprojb are one contiguous range of the parameter buffer. */
static void layer_range(const struct model *m, size_t *off, size_t *n)
{
    *off = (size_t)(m->g.ln1w - m->grads);
    *n = (size_t)(m->g.fcprojb - m->grads) + (size_t)m->cfg.layers * m->cfg.hidden - *off;
}

/* Group k's partial of the layer gradients, carved like m->g over the layer range [off, off+n). */
static void group_partial(const struct model *m, int k, size_t off, size_t n,
                          struct model_params *gp)
{
    const struct model_params *g = &m->g;
    float *base = m->a->gpart + (size_t)k * n - off;

    *gp = *g;
    gp->ln1w = base + (g->ln1w - m->grads), gp->ln1b = base + (g->ln1b - m->grads);
    gp->qkvw = base + (g->qkvw - m->grads), gp->qkvb = base + (g->qkvb - m->grads);
    gp->attprojw = base + (g->attprojw - m->grads);
    gp->attprojb = base + (g->attprojb - m->grads);
    gp->ln2w = base + (g->ln2w - m->grads), gp->ln2b = base + (g->ln2b - m->grads);
    gp->fcw = base + (g->fcw - m->grads), gp->fcb = base + (g->fcb - m->grads);
    gp->fcprojw = base + (g->fcprojw - m->grads);
    gp->fcprojb = base + (g->fcprojb - m->grads);
}

/* Group k's sequences through layers l_hi .. l_lo, BWD_SEQS at a time. */
static void group_backward(struct model *m, int k, int B, int T, size_t off, size_t n, int l_hi,
                           int l_lo)
{
    struct model_params gp;
    int b0 = k * BWD_GROUP, nb = B - b0 < BWD_GROUP ? B - b0 : BWD_GROUP;

    group_partial(m, k, off, n, &gp);
    for (int b = b0; b < b0 + nb; b += BWD_SEQS)
        backward_rows(m, b, b0 + nb - b < BWD_SEQS ? b0 + nb - b : BWD_SEQS, T, &gp, l_hi, l_lo);
}

/* grads[i] += the groups' partials, in group order, for i in [i0, i0 + cnt) (buffer offsets
 * inside the layer range [off, off + n)). */
static void add_partials(struct model *m, int groups, size_t off, size_t n, size_t i0, size_t cnt)
{
    float *dst = m->grads + i0;
    const float *src = m->a->gpart + (i0 - off);
#pragma omp parallel for schedule(dynamic, 8192) if (cnt > 16384)
    for (size_t i = 0; i < cnt; i++) {
        float sum = dst[i];
        for (int k = 0; k < groups; k++)
            sum += src[(size_t)k * n + i];
        dst[i] = sum;
    }
}

/*
 * Depth first like the forward: each group of BWD_GROUP sequences goes through every layer on one
 * thread (BWD_SEQS sequences at a time), its parameter gradients into the group's own partial
 * (the layer tensors only), and the partials are added to the gradients in group order at the
 * end. Groups depend on the batch size alone, so the sums (and the bits) do not depend on the
 * thread count. The final LayerNorm, the pooling and the embedding run over the whole batch with
 * the kernels' own threads.
 * With a ready hook armed each_layer (model_arm_ready), the groups go through one layer at a time
 * instead, and that layer's partials are added (its slice of each stacked tensor) before the hook
 * hands it over: the same additions in the same order per float, so the same bits, with each
 * layer's gradients final while the layers below still run.
 */
static void transformer_backward(struct model *m, int B, int T, model_ready_fn ready)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    const struct model_params *p = &m->p, *g = &m->g;
    int C = c->hidden, N = B * T, L = c->layers;
    size_t sN = (size_t)m->max_batch * c->max_seq_len;
    size_t NC = (size_t)N * C * sizeof(float);
    const float *xL = L ? a->res3 + (L - 1) * sN * C : a->encoded;

    zero_floats(a->dln, NC);
    if (c->pool == MODEL_POOL_CLS)
        clspool_backward_cpu(a->dln, a->dpooled, B, T, C);
    else
        meanpool_backward_cpu(a->dln, a->dpooled, m->len, B, T, C);
    zero_floats(a->dres, NC);
    layernorm_backward_cpu(a->dres, g->lnfw, g->lnfb, a->dln, xL, p->lnfw, a->lnf_mean,
                           a->lnf_rstd, N, C);
    if (ready)
        ready(m->ready_ctx, 0); /* the head: clsw, clsb (model_backward), lnfw, lnfb */
    if (B <= BWD_GROUP && !ready) {
        backward_rows(m, 0, B, T, g, L - 1, 0);
    } else if (B <= BWD_GROUP) {
        for (int l = L - 1; l >= 0; l--) {
            backward_rows(m, 0, B, T, g, l, l);
            ready(m->ready_ctx, L - l);
        }
    } else {
        size_t off, n;
        int groups = (B + BWD_GROUP - 1) / BWD_GROUP;
        layer_range(m, &off, &n);
        zero_floats(a->gpart, (size_t)groups * n * sizeof(float));
        if (!ready || !m->ready_each_layer) {
#pragma omp parallel for schedule(dynamic, 1)
            for (int k = 0; k < groups; k++)
                group_backward(m, k, B, T, off, n, L - 1, 0);
            add_partials(m, groups, off, n, off, n);
            for (int u = 1; ready && u <= L; u++)
                ready(m->ready_ctx, u);
        }
        for (int l = L - 1; ready && m->ready_each_layer && l >= 0; l--) {
#pragma omp parallel for schedule(dynamic, 1)
            for (int k = 0; k < groups; k++)
                group_backward(m, k, B, T, off, n, l, l);
            for (int i = 0; i < m->n_tensors; i++) { /* layer l's slice of each layer tensor */
                const struct model_tensor *t = &m->tensors[i];
                size_t per = t->count / (size_t)L;
                if (t->offset >= off && t->offset < off + n)
                    add_partials(m, groups, off, n, t->offset + (size_t)l * per, per);
            }
            ready(m->ready_ctx, L - l);
        }
    }
    embed_backward_cpu(g->wte, g->wpe, a->dres, m->tokens, B, T, C);
    if (ready)
        ready(m->ready_ctx, L + 1);
}

void model_arm_ready(struct model *m, model_ready_fn fn, void *ctx, bool each_layer)
{
    m->ready = fn, m->ready_ctx = ctx, m->ready_each_layer = each_layer;
}

void model_backward(struct model *m, float loss_scale)
{
    const struct model_config *c = &m->cfg;
    struct model_acts *a = m->a;
    int B = m->B, C = c->hidden, K = c->classes;
    model_ready_fn ready = m->ready; /* armed for this backward only */

    m->ready = NULL;
    memset(a->dlogits, 0, (size_t)B * K * sizeof(float));
    if (m->label_words == MODEL_TARGETS_REAL)
        mse_backward_cpu(a->dlogits, a->logits, (const float *)m->labels, loss_scale, B);
    else if (m->label_words)
        bce_backward_cpu(a->dlogits, a->probs, m->labels, m->label_words, loss_scale, B, K);
    else
        crossentropy_backward_cpu(a->dlogits, a->probs, m->labels, m->label_smoothing,
                                  m->class_weight, loss_scale, B, K);
    memset(a->dpooled, 0, (size_t)B * C * sizeof(float));
    matmul_backward_cpu(a->dpooled, m->g.clsw, m->g.clsb, a->dlogits, a->pooled, m->p.clsw, B, C,
                        K);
    if (c->kind == MODEL_NGRAM) {
        if (ready)
            ready(m->ready_ctx, 0); /* the head: clsw, clsb */
        embbag_backward_cpu(m->g.emb, a->dpooled, m->ngram_ids, m->ngram_count, B,
                            2 * c->max_seq_len, C);
        if (ready)
            ready(m->ready_ctx, 1); /* the embeddings */
    } else {
        transformer_backward(m, B, m->T, ready);
    }
}
