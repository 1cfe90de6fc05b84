// model_gpu.cu - worker/model.h's Transformer on one GPU: device state, forward, backward, step.
// See model_gpu.h. The call sequence mirrors worker/model.c (the specification); bench/gpu_bench
// and worker/train_gpu.c use it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cuda_common.h"
#include "kernels/gpu.h"
#include "worker/model_gpu.h"

#define STAGE_SLOTS 2 /* pinned upload slots: the host gathers batch i+1 while i uploads */
#define GRAPH_SLOTS 16 /* MODEL_GPU_GRAPHS: forward and backward graphs kept, by shape */
#define PROF_MARKS 4096 /* model_gpu_profile: events between collections */
#define PROF_OPS 32     /* distinct op names */
/* MODEL_GPU_TUNE: GEMMs of fewer FLOPs keep cuBLASLt's first pick untimed (a few microseconds
 * each: timing 8 candidates costs more than a run could win back) */
#define GEMM_TUNE_MIN_FLOP 1e9

struct prof_row {
    const char *op;
    double ms;
    long n;
};

/* One captured forward (bwd 0) or backward (bwd 1) for a batch shape (and the backward's loss
 * scale, a kernel argument); exec NULL until the shape comes a second time. */
struct graph_slot {
    int used, bwd, B, T, labels;
    uint32_t scale; /* the float's bits */
    cudaGraphExec_t exec;
    unsigned long long tick; /* last use, for eviction */
};

struct model_gpu {
    const struct model *m;
    size_t n; /* parameters */
    int max_batch, maxT, bf16, fused; /* fused: MODEL_GPU_FUSED_ATTENTION */
    int ngram;                        /* MODEL_NGRAM: bags of n-grams, no Transformer */
    int *bag_ids, *bag_count;         /* n-gram: (max_batch, 2 maxT) ids and their counts */
    cudaStream_t s;
    struct adamw_segment segs[ADAMW_GPU_MAX_SEGMENTS];
    int nseg;
    float *p, *g, *am, *av; /* g: n + MODEL_GPU_STATS floats (loss sum, examples, votes) */
    float *votes;           /* stop votes summed by end_step since the last read */
    uint16_t *p16;
    int *tokens, *len, *labels;
    int lw; /* label words per example: 1, or multi-label's bit-set words (model.label_words) */
    int B, T, have_labels;
    float smoothing;    /* label smoothing of the loss (model_gpu_loss) */
    float *cw, *cw_host; /* class weights (classes floats) on the device, and what they hold */
    int use_cw, cw_set;  /* the loss weighs by cw (model_gpu_loss); cw holds cw_host */
    float *lse; /* fused attention: (L, B, NH, T) row log-sum-exps in place of att */
    float *x0, *ln1, *ln1m, *ln1r, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2m, *ln2r, *fch,
        *fchg, *fcproj, *res3, *lnf, *lnfm, *lnfr, *pooled, *logits, *probs, *losses;
    float *dres, *dln, *dfchg, *dfch, *datty, *dqkv, *dpooled, *dlogits, *norm, *coef;
    double *loss_acc; /* sum of step mean losses since the last read */
    uint16_t *s16a;               /* bf16 scratch: a GEMM's output gradient as its operand */
    /* bf16 only: the saved GEMM inputs (L, N, C) or (L, N, F), in place of the fp32 ln1, ln2, fchg */
    uint16_t *ln1h, *attyh, *ln2h, *fchgh;
    uint16_t *fchh; /* bf16: the pre-GELU activation (L, N, F), in place of the fp32 fch */
    uint16_t *dfchg16; /* bf16: the GELU output's gradient (N, F), in place of the fp32 dfchg */
    uint16_t *datty16; /* bf16 with fused attention: the attention output's gradient (N, C) */
    uint16_t *dln16;   /* bf16: a LayerNorm output's gradient (N, C) as the GEMM backward writes
                        * it for the LayerNorm backward (autocast's precision; g->dln in fp32) */
    uint16_t *qkvh; /* bf16 with fused attention: (L, N, 3C) in place of qkv (and no fp32 atty) */
    int *stage[STAGE_SLOTS];      /* pinned: tokens, len, labels of one batch */
    cudaEvent_t staged[STAGE_SLOTS];
    int slot;
    int device;
    model_gpu_ready_fn ready; /* armed for the next backward */
    void *ready_ctx;
    cudaEvent_t *unit_done; /* MODEL_GPU_UNITS(L): recorded behind each unit's last kernel */
    int graphs;             /* MODEL_GPU_GRAPHS */
    int dgelu_epi;          /* MODEL_GPU_DGELU_EPILOGUE */
    int gemm_say;           /* MODEL_GPU_TUNE: say what the GEMMs' tune took after a backward */
    int attn_fwd, attn_bwd; /* the bf16 fused attention's kinds (ATTN_FWD_*, ATTN_BWD_*) */
    struct graph_slot gs[GRAPH_SLOTS];
    unsigned long long gtick;
    long graph_captures, graph_launches, graph_evictions;
    /* model_gpu_profile: an event behind each op of the eager forward and backward */
    int prof;
    int prof_n;              /* events recorded since the last collection */
    cudaEvent_t *prof_ev;    /* PROF_MARKS */
    const char **prof_op;    /* the op that ends at each event (NULL: a start) */
    struct prof_row prof_tab[PROF_OPS];
    int prof_nrows;
    /* the device buffers' bytes, counted by dev_alloc: all of them (dev_want), and the first
     * request the device refused (dev_short; 0: none). dev_dry: count only, allocate nothing
     * (model_gpu_new's check that they fit before anything is allocated) */
    size_t dev_want, dev_short, dev_held; /* dev_held: what this model holds */
    int dev_dry;
};

/* *p = a device buffer of `bytes`, counted in g->dev_want; NULL (and false) when counting only,
 * or when the device is out of memory (g->dev_short: the request; nothing more is allocated
 * after it, the rest only counted, so that the refusal can say what the whole model needs). */
static bool dev_alloc(struct model_gpu *g, void **p, size_t bytes)
{
    g->dev_want += bytes;
    *p = NULL;
    if (g->dev_dry || g->dev_short)
        return false;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* (not sticky: clears it) */
        *p = NULL;
        g->dev_short = bytes;
        return false;
    }
    CUDA_CHECK(e);
    g->dev_held += bytes;
    return true;
}

/* n floats, zeroed (+ 16 bytes: vector loads past a tensor's end stay inside) */
static float *dalloc(struct model_gpu *g, size_t n)
{
    float *p;
    if (dev_alloc(g, (void **)&p, n * sizeof(float) + 16))
        CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float) + 16));
    return p;
}
#define DEV_ALLOC(g, ptr, bytes) dev_alloc((g), (void **)&(ptr), (bytes))

static size_t off(const struct model_gpu *g, const char *name)
{
    const struct model_tensor *t = model_find_tensor(g->m, name);
    if (!t) { /* the tensor table is model.c's; a renamed tensor is a programming error */
        fprintf(stderr, "model_gpu: model has no tensor %s\n", name);
        abort();
    }
    return t->offset;
}
#define P(name) (g->p + off(g, name))
#define G(name) (g->g + off(g, name))
#define P16(name) (g->p16 + off(g, name))

/* ---- small kernels of the loop's own ---- */

/* stats[0] += sum of losses[0..B), stats[1] += B; one block, fixed order (deterministic). */
__global__ static void loss_stats_kernel(float *stats, const float *losses, int B)
{
    __shared__ float part[256];
    float s = 0.0f;
    for (int i = threadIdx.x; i < B; i += blockDim.x)
        s += losses[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        stats[0] += part[0];
        stats[1] += (float)B;
    }
}

__global__ static void vote_kernel(float *vote)
{
    *vote = 1.0f;
}

__global__ static void end_step_kernel(double *acc, float *votes, const float *stats)
{
    *votes += stats[2];
    if (stats[1] > 0.0f)
        *acc += (double)stats[0] / (double)stats[1];
}

__global__ static void scale_kernel(float *x, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* ---- forward and backward (worker/model.c's sequence) ---- */

/* ---- per-op timing (model_gpu_profile) ---- */

/* Adds the time between consecutive events to their ops' rows; syncs on the last event. */
static void prof_collect(struct model_gpu *g)
{
    if (g->prof_n == 0)
        return;
    CUDA_CHECK(cudaEventSynchronize(g->prof_ev[g->prof_n - 1]));
    for (int i = 1; i < g->prof_n; i++) {
        const char *op = g->prof_op[i];
        if (!op)
            continue;
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g->prof_ev[i - 1], g->prof_ev[i]));
        int r = 0;
        while (r < g->prof_nrows && strcmp(g->prof_tab[r].op, op) != 0)
            r++;
        if (r == g->prof_nrows) {
            if (r == PROF_OPS)
                continue; /* more op names than rows: a bug here, not worth an abort */
            g->prof_tab[g->prof_nrows++] = (struct prof_row){op, 0.0, 0};
        }
        g->prof_tab[r].ms += ms;
        g->prof_tab[r].n++;
    }
    g->prof_n = 0;
}

/* With profiling on: an event on the stream behind the op just enqueued (op NULL: a start,
 * after work that is not attributed). */
static void mark(struct model_gpu *g, const char *op)
{
    if (!g->prof)
        return;
    if (g->prof_n == PROF_MARKS) { /* full: collect, and restart from a fresh start event */
        prof_collect(g);
        op = NULL;
    }
    CUDA_CHECK(cudaEventRecord(g->prof_ev[g->prof_n], g->s));
    g->prof_op[g->prof_n++] = op;
}

/* out (N,OC) = inp @ w^T + b in fp32 (the fp32 path: inp32), or from a bf16 input (inp16) and
 * the weights' bf16 copy, accumulated and written in fp32 with the fp32 bias (bf16 path) */
static void fc_forward(struct model_gpu *g, float *out, const float *inp32, const uint16_t *inp16,
                       const char *w, const char *b, size_t lw, size_t lb, int N, int C, int OC)
{
    if (!g->bf16)
        matmul_forward(out, inp32, P(w) + lw, P(b) + lb, N, C, OC, g->s);
    else
        matmul_forward_mixed(out, inp16, P16(w) + lw, P(b) + lb, N, C, OC, g->s);
}

/* dinp = dout @ w (overwritten); dw += dout^T @ inp; db += colsum(dout). bf16 path: dout is
 * rounded to bf16 once (the GEMMs' operand; dout16 when the caller has it already, as
 * the LayerNorm backward gives it), inp is the saved bf16 input; dinp, dw and db stay fp32 (db from
 * the fp32 dout), and the GEMM writes dinp without reading it (no clearing pass). */
static void fc_backward(struct model_gpu *g, float *dinp, const float *dout,
                        const uint16_t *dout16, const float *inp32, const uint16_t *inp16,
                        const char *w, const char *b, size_t lw, size_t lb, int N, int C, int OC)
{
    cudaStream_t s = g->s;
    if (!g->bf16) {
        CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * C * sizeof(float), s));
        matmul_backward(dinp, G(w) + lw, G(b) + lb, dout, inp32, P(w) + lw, N, C, OC, s);
        return;
    }
    if (!dout16) {
        cast_f32_to_bf16(g->s16a, dout, (size_t)N * OC, s);
        dout16 = g->s16a;
    }
    matmul_backward_mixed_set(dinp, G(w) + lw, b ? G(b) + lb : NULL, dout, dout16, inp16,
                              P16(w) + lw, N, C, OC, s);
}

/* dres += the LayerNorm backward of dln (weights w + lc, statistics mean, rstd), or of dln16
 * when given (the bf16 gradient the GEMM backward wrote: half the bytes written and read); bf16
 * path: also dres rounded to bf16 in the same pass, into s16a, where the GEMM backward that reads
 * dres next takes its operand (returned; NULL in fp32, where that GEMM reads the fp32 dres), and
 * dsum (may be NULL) += dres's column sums: the bias gradient of that GEMM (a projection into the
 * residual stream), from the LayerNorm's own partials instead of a column-sum pass over dres */
static const uint16_t *ln_backward(struct model_gpu *g, const uint16_t *dln16, const float *inp,
                                   const char *w, const char *b, size_t lc, const float *mean,
                                   const float *rstd, int N, int C, float *dsum)
{
    if (!g->bf16) {
        layernorm_backward(g->dres, G(w) + lc, G(b) + lc, g->dln, inp, P(w) + lc, mean, rstd, N,
                           C, g->s);
        return NULL;
    }
    if (dln16)
        layernorm_backward_bf16_d16(g->dres, g->s16a, G(w) + lc, G(b) + lc, dsum, dln16, inp,
                                    P(w) + lc, mean, rstd, N, C, g->s);
    else
        layernorm_backward_bf16_sum(g->dres, g->s16a, G(w) + lc, G(b) + lc, dsum, g->dln, inp,
                                    P(w) + lc, mean, rstd, N, C, g->s);
    return g->s16a;
}

/* The Transformer's forward up to the pooled (B, C) features. */
static void transformer_forward(struct model_gpu *g)
{
    const struct model_config *c = &g->m->cfg;
    int B = g->B, T = g->T, C = c->hidden, NH = c->heads, F = c->ffn, N = B * T;
    size_t NC = (size_t)N * C, NF = (size_t)N * F, natt = (size_t)B * NH * T * T;
    size_t nlse = (size_t)B * NH * T;
    cudaStream_t s = g->s;

    mark(g, NULL);
    embed_forward(g->x0, g->tokens, P("wte"), P("wpe"), B, T, C, s);
    mark(g, "embedding");
    const float *x = g->x0;
    for (int l = 0; l < c->layers; l++) {
        float *qkv = g->qkv ? g->qkv + 3 * l * NC : NULL;
        float *atty = g->atty ? g->atty + l * NC : NULL;
        float *res2 = g->res2 + l * NC, *res3 = g->res3 + l * NC;
        float *fch = g->fch ? g->fch + l * NF : NULL;
        if (g->bf16) { /* bf16 GEMM inputs, saved for the backward; fp32 everything else */
            uint16_t *ln1h = g->ln1h + l * NC, *attyh = g->attyh + l * NC;
            uint16_t *ln2h = g->ln2h + l * NC, *fchgh = g->fchgh + l * NF;
            layernorm_forward_bf16(ln1h, g->ln1m + l * N, g->ln1r + l * N, x, P("ln1w") + l * C,
                                   P("ln1b") + l * C, N, C, s);
            mark(g, "layernorm");
            if (g->fused) { /* qkv in bf16 from its GEMM (bf16 bias), the output in bf16 */
                uint16_t *qkvh = g->qkvh + 3 * l * NC;
                matmul_forward_bf16(qkvh, ln1h, P16("qkvw") + (size_t)l * 3 * C * C,
                                    P16("qkvb") + (size_t)l * 3 * C, N, C, 3 * C, s);
                mark(g, "qkv GEMM");
                attention_forward_fused_bf16_kind(g->attn_fwd, attyh, g->lse + l * nlse, qkvh,
                                                  g->len, B, T, C, NH, s);
            } else {
                fc_forward(g, qkv, NULL, ln1h, "qkvw", "qkvb", (size_t)l * 3 * C * C,
                           (size_t)l * 3 * C, N, C, 3 * C);
                mark(g, "qkv GEMM");
                attention_forward_mixed(atty, g->att + l * natt, qkv, g->len, B, T, C, NH, s);
                cast_f32_to_bf16(attyh, atty, NC, s);
            }
            mark(g, "attention");
            /* res2 = x + attyh @ attprojw^T + b: the residual add in the GEMM's epilogue */
            matmul_forward_mixed_residual(res2, x, attyh, P16("attprojw") + (size_t)l * C * C,
                                          P("attprojb") + (size_t)l * C, N, C, C, s);
            mark(g, "attention proj GEMM");
            layernorm_forward_bf16(ln2h, g->ln2m + l * N, g->ln2r + l * N, res2,
                                   P("ln2w") + l * C, P("ln2b") + l * C, N, C, s);
            mark(g, "layernorm");
            /* pre-activation and GELU output in bf16, the GELU in the GEMM's epilogue */
            matmul_forward_bf16_gelu(fchgh, g->fchh + l * NF, ln2h, P16("fcw") + (size_t)l * F * C,
                                     P16("fcb") + (size_t)l * F, N, C, F, s);
            mark(g, "MLP GEMM + GELU");
            matmul_forward_mixed_residual(res3, res2, fchgh, P16("fcprojw") + (size_t)l * C * F,
                                          P("fcprojb") + (size_t)l * C, N, F, C, s);
            mark(g, "MLP proj GEMM");
            x = res3;
            continue;
        }
        float *ln1 = g->ln1 + l * NC, *ln2 = g->ln2 + l * NC, *fchg = g->fchg + l * NF;
        layernorm_forward(ln1, g->ln1m + l * N, g->ln1r + l * N, x, P("ln1w") + l * C,
                          P("ln1b") + l * C, N, C, s);
        mark(g, "layernorm");
        fc_forward(g, qkv, ln1, NULL, "qkvw", "qkvb", (size_t)l * 3 * C * C, (size_t)l * 3 * C,
                   N, C, 3 * C);
        mark(g, "qkv GEMM");
        if (g->fused)
            attention_forward_fused(atty, g->lse + l * nlse, qkv, g->len, B, T, C, NH, s);
        else
            attention_forward(atty, g->att + l * natt, qkv, g->len, B, T, C, NH, s);
        mark(g, "attention");
        fc_forward(g, g->attproj, atty, NULL, "attprojw", "attprojb", (size_t)l * C * C,
                   (size_t)l * C, N, C, C);
        residual_forward(res2, x, g->attproj, (long)NC, s);
        mark(g, "attention proj GEMM");
        layernorm_forward(ln2, g->ln2m + l * N, g->ln2r + l * N, res2, P("ln2w") + l * C,
                          P("ln2b") + l * C, N, C, s);
        mark(g, "layernorm");
        if (F % 8) { /* cuBLASLt's GELU epilogue needs OC % 8 == 0 */
            fc_forward(g, fch, ln2, NULL, "fcw", "fcb", (size_t)l * F * C, (size_t)l * F, N, C,
                       F);
            gelu_forward(fchg, fch, NF, s);
        } else { /* bias + GELU in the GEMM's epilogue */
            matmul_forward_gelu(fchg, fch, ln2, P("fcw") + (size_t)l * F * C, P("fcb") + l * F, N,
                                C, F, s);
        }
        mark(g, "MLP GEMM + GELU");
        fc_forward(g, g->fcproj, fchg, NULL, "fcprojw", "fcprojb", (size_t)l * C * F,
                   (size_t)l * C, N, F, C);
        residual_forward(res3, res2, g->fcproj, (long)NC, s);
        mark(g, "MLP proj GEMM");
        x = res3;
    }
    layernorm_forward(g->lnf, g->lnfm, g->lnfr, x, P("lnfw"), P("lnfb"), N, C, s);
    mark(g, "layernorm");
    if (c->pool == MODEL_POOL_CLS)
        clspool_forward(g->pooled, g->lnf, B, T, C, s);
    else
        meanpool_forward(g->pooled, g->lnf, g->len, B, T, C, s);
}

static void forward_body(struct model_gpu *g)
{
    const struct model_config *c = &g->m->cfg;
    int B = g->B, C = c->hidden, K = c->classes;
    cudaStream_t s = g->s;

    if (g->ngram) /* the mean of each example's n-gram rows (worker/model.c's ngram_bags) */
        embbag_forward(g->pooled, g->bag_ids, g->bag_count, P("emb"), B, 2 * g->maxT, C, s);
    else
        transformer_forward(g);
    matmul_forward(g->logits, g->pooled, P("clsw"), P("clsb"), B, C, K, s); /* tiny: fp32 */
    if (g->have_labels) { /* the task's loss, then its statistics */
        if (g->m->label_words == MODEL_TARGETS_REAL)
            mse_forward(g->losses, g->probs, g->logits, (const float *)g->labels, B, s);
        else if (g->m->label_words)
            bce_forward(g->losses, g->probs, g->logits, g->labels, g->lw, B, K, s);
        else
            crossentropy_forward(g->losses, g->probs, g->logits, g->labels, g->smoothing,
                                 g->use_cw ? g->cw : NULL, B, K, s);
        loss_stats_kernel<<<1, 256, 0, s>>>(g->g + g->n, g->losses, B);
        CUDA_CHECK(cudaGetLastError());
    }
    mark(g, "pool + head + loss");
}

/* Unit u's gradients are enqueued: record its event, tell the armed hook. */
static void unit_ready(struct model_gpu *g, model_gpu_ready_fn fn, int u)
{
    if (!fn)
        return;
    CUDA_CHECK(cudaEventRecord(g->unit_done[u], g->s));
    fn(g->ready_ctx, u);
}

static void backward_body(struct model_gpu *g, float loss_scale)
{
    const struct model_config *c = &g->m->cfg;
    int B = g->B, T = g->T, C = c->hidden, NH = c->heads, F = c->ffn, N = B * T, K = c->classes;
    size_t NC = (size_t)N * C, NF = (size_t)N * F, natt = (size_t)B * NH * T * T;
    size_t nlse = (size_t)B * NH * T;
    cudaStream_t s = g->s;
    model_gpu_ready_fn ready = g->ready; /* one backward per arming */
    g->ready = NULL;

    mark(g, NULL);
    CUDA_CHECK(cudaMemsetAsync(g->dlogits, 0, (size_t)B * K * sizeof(float), s));
    if (g->m->label_words == MODEL_TARGETS_REAL)
        mse_backward(g->dlogits, g->logits, (const float *)g->labels, loss_scale, B, s);
    else if (g->m->label_words)
        bce_backward(g->dlogits, g->probs, g->labels, g->lw, loss_scale, B, K, s);
    else
        crossentropy_backward(g->dlogits, g->probs, g->labels, g->smoothing,
                              g->use_cw ? g->cw : NULL, loss_scale, B, K, s);
    CUDA_CHECK(cudaMemsetAsync(g->dpooled, 0, (size_t)B * C * sizeof(float), s));
    matmul_backward(g->dpooled, G("clsw"), G("clsb"), g->dlogits, g->pooled, P("clsw"), B, C, K,
                    s);
    if (g->ngram) { /* units: the head (clsw, clsb), then the n-gram table */
        unit_ready(g, ready, 0);
        embbag_backward(G("emb"), g->dpooled, g->bag_ids, g->bag_count, B, 2 * g->maxT, C,
                        c->vocab + c->buckets, s);
        unit_ready(g, ready, 1);
        return;
    }
    CUDA_CHECK(cudaMemsetAsync(g->dln, 0, NC * sizeof(float), s));
    if (c->pool == MODEL_POOL_CLS)
        clspool_backward(g->dln, g->dpooled, B, T, C, s);
    else
        meanpool_backward(g->dln, g->dpooled, g->len, B, T, C, s);
    CUDA_CHECK(cudaMemsetAsync(g->dres, 0, NC * sizeof(float), s));
    const float *xL = c->layers ? g->res3 + (c->layers - 1) * NC : g->x0;
    mark(g, "head + pool bwd");
    /* bf16: the projections' bias gradients (fcprojb, attprojb) come from the LayerNorm backward
     * that makes their output gradient dres (ln_backward's dsum), their GEMMs get none */
    const bool lnsum = g->bf16;
    const uint16_t *dres16 =
        ln_backward(g, NULL, xL, "lnfw", "lnfb", 0, g->lnfm, g->lnfr, N, C,
                    lnsum && c->layers ? G("fcprojb") + (size_t)(c->layers - 1) * C : NULL);
    mark(g, "layernorm bwd");
    unit_ready(g, ready, 0); /* head: clsw, clsb, lnfw, lnfb (+ the loss statistics) */
    for (int l = c->layers - 1; l >= 0; l--) {
        const float *x = l ? g->res3 + (l - 1) * NC : g->x0;
        const float *qkv = g->qkv ? g->qkv + 3 * l * NC : NULL;
        const float *atty = g->atty ? g->atty + l * NC : NULL;
        const float *res2 = g->res2 + l * NC, *fch = g->fch ? g->fch + l * NF : NULL;
        /* the saved GEMM inputs: fp32, or bf16 (the other pointer of each pair unused) */
        const float *ln1 = g->bf16 ? NULL : g->ln1 + l * NC;
        const float *ln2 = g->bf16 ? NULL : g->ln2 + l * NC;
        const float *fchg = g->bf16 ? NULL : g->fchg + l * NF;
        const uint16_t *ln1h = g->bf16 ? g->ln1h + l * NC : NULL;
        const uint16_t *attyh = g->bf16 ? g->attyh + l * NC : NULL;
        const uint16_t *ln2h = g->bf16 ? g->ln2h + l * NC : NULL;
        const uint16_t *fchgh = g->bf16 ? g->fchgh + l * NF : NULL;
        /* bf16: dfch, the GEMMs' operand, in bf16 only; dres16 is s16a, which the epilogue's
         * GEMM reads while it writes dfch (and then the weight gradient's reads it), so there
         * dfch goes to dfchg16; with the GELU pass, dfchg16 holds the GEMM's output and the pass
         * writes dfch to s16a */
        const uint16_t *dfch16 = g->dfchg16;
        if (g->bf16 && g->dgelu_epi &&
            matmul_backward_mixed_dgelu_bf16(g->dfchg16, G("fcb") + (size_t)l * F,
                                             G("fcprojw") + (size_t)l * C * F, NULL, g->dres,
                                             dres16, fchgh,
                                             g->fchh + l * NF, P16("fcprojw") + (size_t)l * C * F,
                                             N, F, C, s) == 0) {
            /* fcb's gradient from the epilogue's output */
            mark(g, "MLP proj GEMM bwd + dGELU");
        } else if (g->bf16) { /* its only reader, the GELU backward, takes bf16 */
            matmul_backward_mixed_set_bf16(g->dfchg16, G("fcprojw") + (size_t)l * C * F, NULL,
                                           g->dres, dres16, fchgh,
                                           P16("fcprojw") + (size_t)l * C * F, N, F, C, s);
            mark(g, "MLP proj GEMM bwd");
            /* fcb's gradient in that pass */
            gelu_backward_bf16(g->s16a, G("fcb") + (size_t)l * F, g->fchh + l * NF, g->dfchg16,
                               N, F, s);
            dfch16 = g->s16a;
            mark(g, "GELU bwd");
        } else {
            fc_backward(g, g->dfchg, g->dres, dres16, fchg, NULL, "fcprojw", "fcprojb",
                        (size_t)l * C * F, (size_t)l * C, N, F, C);
            mark(g, "MLP proj GEMM bwd");
        }
        if (g->bf16) { /* dln in bf16 only: the LayerNorm backward below is its one reader */
            matmul_backward_mixed_set_bf16(g->dln16, G("fcw") + (size_t)l * F * C, NULL, NULL,
                                           dfch16, ln2h, P16("fcw") + (size_t)l * F * C, N, C, F,
                                           s);
        } else {
            CUDA_CHECK(cudaMemsetAsync(g->dfch, 0, NF * sizeof(float), s));
            gelu_backward(g->dfch, fch, g->dfchg, NF, s);
            mark(g, "GELU bwd");
            fc_backward(g, g->dln, g->dfch, NULL, ln2, NULL, "fcw", "fcb", (size_t)l * F * C,
                        (size_t)l * F, N, C, F);
        }
        mark(g, "MLP GEMM bwd");
        dres16 = ln_backward(g, g->bf16 ? g->dln16 : NULL, res2, "ln2w", "ln2b", (size_t)l * C,
                             g->ln2m + l * N, g->ln2r + l * N, N, C,
                             lnsum ? G("attprojb") + (size_t)l * C : NULL);
        mark(g, "layernorm bwd");
        if (g->fused && g->bf16) /* dO in bf16: the fused attention's only use of it */
            matmul_backward_mixed_set_bf16(g->datty16, G("attprojw") + (size_t)l * C * C, NULL,
                                           g->dres, dres16, attyh,
                                           P16("attprojw") + (size_t)l * C * C, N, C, C, s);
        else
            fc_backward(g, g->datty, g->dres, dres16, g->bf16 ? NULL : atty, attyh, "attprojw",
                        lnsum ? NULL : "attprojb", (size_t)l * C * C, (size_t)l * C, N, C, C);
        mark(g, "attention proj GEMM bwd");
        if (g->fused && g->bf16) { /* dqkv in bf16 only, qkvb's gradient summed in the kernels */
            float *dqkvb = G("qkvb") + (size_t)l * 3 * C;
            const uint16_t *qkvh = g->qkvh + 3 * l * NC;
            attention_backward_fused_bf16_kind(g->attn_bwd, g->s16a, dqkvb, g->datty16, qkvh,
                                               attyh, g->lse + l * nlse, g->len, B, T, C, NH, s);
            mark(g, "attention bwd");
            matmul_backward_mixed_set_bf16(g->dln16, G("qkvw") + (size_t)l * 3 * C * C, NULL,
                                           NULL, g->s16a, ln1h,
                                           P16("qkvw") + (size_t)l * 3 * C * C, N, C, 3 * C, s);
        } else {
            CUDA_CHECK(cudaMemsetAsync(g->dqkv, 0, 3 * NC * sizeof(float), s));
            if (g->fused)
                attention_backward_fused(g->dqkv, g->datty, qkv, atty, g->lse + l * nlse, g->len,
                                         B, T, C, NH, s);
            else if (g->bf16)
                attention_backward_mixed(g->dqkv, g->datty, qkv, g->att + l * natt, g->len, B, T,
                                         C, NH, s);
            else
                attention_backward(g->dqkv, g->datty, qkv, g->att + l * natt, g->len, B, T, C,
                                   NH, s);
            mark(g, "attention bwd");
            fc_backward(g, g->dln, g->dqkv, NULL, ln1, ln1h, "qkvw", "qkvb",
                        (size_t)l * 3 * C * C, (size_t)l * 3 * C, N, C, 3 * C);
        }
        mark(g, "qkv GEMM bwd");
        dres16 = ln_backward(g, g->fused && g->bf16 ? g->dln16 : NULL, x, "ln1w", "ln1b",
                             (size_t)l * C, g->ln1m + l * N, g->ln1r + l * N, N, C,
                             lnsum && l ? G("fcprojb") + (size_t)(l - 1) * C : NULL);
        mark(g, "layernorm bwd");
        unit_ready(g, ready, c->layers - l); /* layer l's twelve slices */
    }
    embed_backward(G("wte"), G("wpe"), g->dres, g->tokens, B, T, C, c->vocab, s);
    mark(g, "embedding bwd");
    unit_ready(g, ready, c->layers + 1);
}

/* ---- CUDA graphs (MODEL_GPU_GRAPHS) ----
 * A forward or backward is a fixed sequence of launches for a given shape: the same kernels,
 * grids, buffers and scalar arguments (B, T, the loss scale, smoothing), reading the batch from
 * the same device buffers that model_gpu_batch fills. So it is captured once per shape and then
 * replayed with one cudaGraphLaunch instead of ~10 launches per layer. The first time a shape
 * comes it runs eagerly (which also warms what a capture must not do: cuBLASLt's first calls,
 * the pool's growth, kernel attributes); the second time it is captured and launched; after that
 * only launched. Scratch from gpu_scratch (cudaMallocAsync) becomes the graph's own memory.
 * The results are the eager ones bit for bit (the same kernels on the same data). An armed
 * backward (the overlapped all-reduce's hooks, which record events and enqueue NCCL behind each
 * unit) runs eagerly. */

static void graph_drop(struct graph_slot *sl)
{
    if (sl->exec)
        CUDA_CHECK(cudaGraphExecDestroy(sl->exec)); /* in flight: freed once it is done */
    memset(sl, 0, sizeof(*sl));
}

static void graph_drop_all(struct model_gpu *g)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        graph_drop(&g->gs[i]);
}

/* 1 when this forward (bwd 0) or backward ran as a graph, 0 when the caller runs it eagerly. */
static int graph_run(struct model_gpu *g, int bwd, float scale)
{
    uint32_t sb = 0;
    struct graph_slot *hit = NULL, *victim = NULL;
    if (bwd)
        memcpy(&sb, &scale, sizeof(sb));
    for (int i = 0; i < GRAPH_SLOTS && !hit; i++) {
        struct graph_slot *sl = &g->gs[i];
        if (sl->used && sl->bwd == bwd && sl->B == g->B && sl->T == g->T &&
            sl->labels == g->have_labels && sl->scale == sb)
            hit = sl;
        else if (!victim || (victim->used && (!sl->used || sl->tick < victim->tick)))
            victim = sl;
    }
    if (!hit) { /* a new shape: eager this time */
        if (victim->used)
            g->graph_evictions++;
        graph_drop(victim);
        *victim = (struct graph_slot){1, bwd, g->B, g->T, g->have_labels, sb, NULL, ++g->gtick};
        return 0;
    }
    hit->tick = ++g->gtick;
    if (!hit->exec) {
        cudaGraph_t graph;
        CUDA_CHECK(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
        if (bwd)
            backward_body(g, scale);
        else
            forward_body(g);
        CUDA_CHECK(cudaStreamEndCapture(g->s, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&hit->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
        g->graph_captures++;
    }
    CUDA_CHECK(cudaGraphLaunch(hit->exec, g->s));
    g->graph_launches++;
    return 1;
}

extern "C" void model_gpu_forward(struct model_gpu *g)
{
    if (g->prof || !g->graphs || !graph_run(g, 0, 0.0f))
        forward_body(g);
}

extern "C" void model_gpu_backward(struct model_gpu *g, float loss_scale)
{
    if (g->ready || g->prof || !g->graphs || !graph_run(g, 1, loss_scale))
        backward_body(g, loss_scale);
    if (g->gemm_say) { /* the first forward and backward timed their GEMMs' candidates */
        static int said; /* shapes said so far, in this process */
        struct matmul_tune_stats st;
        char line[1024];
        matmul_tune_stats(&st);
        if (st.timed > said) {
            matmul_tune_describe(line, sizeof(line));
            fprintf(stderr, "model_gpu: autotune, GEMM algorithms: %s\n", line);
            said = st.timed;
        }
        g->gemm_say = 0;
    }
}

extern "C" int model_gpu_profile(struct model_gpu *g, int on)
{
    if (on && !g->prof_ev) {
        g->prof_ev = (cudaEvent_t *)calloc(PROF_MARKS, sizeof(cudaEvent_t));
        g->prof_op = (const char **)calloc(PROF_MARKS, sizeof(char *));
        if (!g->prof_ev || !g->prof_op) {
            fprintf(stderr, "model_gpu_profile: out of host memory\n");
            exit(1);
        }
        for (int i = 0; i < PROF_MARKS; i++)
            CUDA_CHECK(cudaEventCreate(&g->prof_ev[i]));
    }
    if (!on)
        prof_collect(g);
    g->prof = on;
    return 0;
}

/* rows by time, the largest first */
static int prof_cmp(const void *a, const void *b)
{
    double x = ((const struct prof_row *)a)->ms, y = ((const struct prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

extern "C" int model_gpu_profile_report(struct model_gpu *g, FILE *f, int steps)
{
    prof_collect(g);
    if (g->prof_nrows == 0 || steps <= 0)
        return -1;
    double total = 0.0;
    for (int r = 0; r < g->prof_nrows; r++)
        total += g->prof_tab[r].ms;
    qsort(g->prof_tab, (size_t)g->prof_nrows, sizeof(g->prof_tab[0]), prof_cmp);
    fprintf(f, "profile: %-26s %10s %7s %10s\n", "op", "ms/step", "share", "calls/step");
    for (int r = 0; r < g->prof_nrows; r++) {
        const struct prof_row *w = &g->prof_tab[r];
        fprintf(f, "profile: %-26s %10.3f %6.1f%% %10.1f\n", w->op, w->ms / steps,
                total > 0 ? 100.0 * w->ms / total : 0.0, (double)w->n / steps);
    }
    fprintf(f, "profile: %-26s %10.3f %6.1f%%\n", "total (forward + backward)", total / steps,
            100.0);
    g->prof_nrows = 0;
    return 0;
}

extern "C" void model_gpu_graph_stats(struct model_gpu *g, long *captures, long *launches,
                                      long *evictions)
{
    if (captures)
        *captures = g->graph_captures;
    if (launches)
        *launches = g->graph_launches;
    if (evictions)
        *evictions = g->graph_evictions;
}

/* ---- state ---- */

extern "C" int model_gpu_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/* model_gpu_new's device buffers for g's shape (g->dev_dry: only counted); returns the ints a
 * batch stages through pinned memory */
static size_t alloc_buffers(struct model_gpu *g, const struct model_config *c)
{
    const int bf16 = g->bf16, fused = g->fused, ngram = g->ngram;
    const size_t n = g->n, B = (size_t)g->max_batch, N = B * c->max_seq_len, C = c->hidden;
    const size_t F = c->ffn, L = c->layers;
    const size_t natt = B * c->heads * c->max_seq_len * c->max_seq_len;
    g->p = dalloc(g, n), g->g = dalloc(g, n + MODEL_GPU_STATS), g->am = dalloc(g, n);
    g->av = dalloc(g, n), g->votes = dalloc(g, 1);
    DEV_ALLOC(g, g->p16, n * 2 + 16);
    g->loss_acc = (double *)dalloc(g, sizeof(double) / sizeof(float));
    const size_t LW = (size_t)g->lw * B; /* label words of a batch */
    g->len = (int *)dalloc(g, B), g->labels = (int *)dalloc(g, LW);
    g->pooled = dalloc(g, B * C), g->logits = dalloc(g, B * c->classes);
    g->probs = dalloc(g, B * c->classes), g->losses = dalloc(g, B);
    g->cw = dalloc(g, c->classes);
    if (!g->dev_dry && !(g->cw_host = (float *)calloc((size_t)c->classes, sizeof(float)))) {
        fprintf(stderr, "model_gpu: out of host memory\n");
        exit(1);
    }
    g->dpooled = dalloc(g, B * C), g->dlogits = dalloc(g, B * c->classes);
    g->norm = dalloc(g, 1), g->coef = dalloc(g, 1);
    size_t stage = N + B + LW; /* ints: tokens, len, labels; or the n-gram bags, counts, labels */
    if (ngram) {
        g->bag_ids = (int *)dalloc(g, 2 * N), g->bag_count = (int *)dalloc(g, B);
        stage = 2 * N + B + LW;
    } else { /* the Transformer's activations and their gradients */
        g->tokens = (int *)dalloc(g, N);
        g->x0 = dalloc(g, N * C);
        if (bf16 && fused) /* both in bf16 only (qkvh, attyh) */
            DEV_ALLOC(g, g->qkvh, 3 * L * N * C * 2);
        else
            g->qkv = dalloc(g, 3 * L * N * C), g->atty = dalloc(g, L * N * C);
        g->ln1m = dalloc(g, L * N), g->ln1r = dalloc(g, L * N), g->ln2m = dalloc(g, L * N);
        g->ln2r = dalloc(g, L * N);
        if (fused) /* O(T) per row instead of O(T^2) */
            g->lse = dalloc(g, L * B * c->heads * c->max_seq_len);
        else
            g->att = dalloc(g, L * natt);
        g->res2 = dalloc(g, L * N * C);
        if (bf16)
            DEV_ALLOC(g, g->fchh, L * N * F * 2);
        else
            g->fch = dalloc(g, L * N * F);
        if (!bf16) /* bf16: the residual add is in the projections' GEMM epilogue */
            g->attproj = dalloc(g, N * C), g->fcproj = dalloc(g, N * C);
        g->res3 = dalloc(g, L * N * C), g->lnf = dalloc(g, N * C);
        g->lnfm = dalloc(g, N), g->lnfr = dalloc(g, N);
        g->dres = dalloc(g, N * C), g->dln = dalloc(g, N * C);
        if (bf16)
            DEV_ALLOC(g, g->dfchg16, N * F * 2);
        else
            g->dfchg = dalloc(g, N * F);
        if (bf16 && fused) /* dO and dqkv in bf16 only (datty16, s16a) */
            DEV_ALLOC(g, g->datty16, N * C * 2);
        else
            g->datty = dalloc(g, N * C), g->dqkv = dalloc(g, 3 * N * C);
        if (!bf16) /* bf16: the GELU's input gradient is only ever bf16 (s16a) */
            g->dfch = dalloc(g, N * F);
        if (bf16) { /* the saved GEMM inputs in bf16 only */
            size_t big = N * (F > 3 * C ? F : 3 * C);
            DEV_ALLOC(g, g->s16a, big * 2);
            DEV_ALLOC(g, g->dln16, N * C * 2);
            DEV_ALLOC(g, g->ln1h, L * N * C * 2);
            DEV_ALLOC(g, g->attyh, L * N * C * 2);
            DEV_ALLOC(g, g->ln2h, L * N * C * 2);
            DEV_ALLOC(g, g->fchgh, L * N * F * 2);
        } else {
            g->ln1 = dalloc(g, L * N * C), g->ln2 = dalloc(g, L * N * C);
            g->fchg = dalloc(g, L * N * F);
        }
    }
    return stage;
}

/* err: the batch does not fit in `avail` bytes of the device's `total`: what the model needs, a
 * batch that fits (with a tenth left for the step's scratch), what to change. The buffers are
 * linear in the batch: two dry counts give the constant part and the part per sequence. */
static void fit_error(const struct model_gpu *g, const struct model_config *c, size_t avail,
                      size_t total, char *err, size_t errlen)
{
    struct model_gpu d = *g; /* (a copy that only counts) */
    const int b = g->max_batch > 1 ? g->max_batch : 2;
    size_t want[2];
    for (int i = 0; i < 2; i++) {
        d.dev_dry = 1, d.dev_want = 0, d.dev_short = 0, d.max_batch = i ? b : 1;
        alloc_buffers(&d, c);
        want[i] = d.dev_want;
    }
    const double per = (double)(want[1] - want[0]) / (b - 1), fixed = want[0] - per;
    const double GiB = 1073741824.0, need = fixed + per * g->max_batch;
    const double fit = (0.9 * avail - fixed) / per;
    char what[160];
    if (fit >= 1)
        snprintf(what, sizeof(what), "use a batch of %ld or fewer (training.batchSize, with "
                                     "gradAccumSteps to keep the examples a step; "
                                     "gantry-predict --batch)",
                 (long)(fit < 1e9 ? fit : 1e9));
    else
        snprintf(what, sizeof(what), "not one sequence fits: use a smaller model (model.layers, "
                                     "model.hidden) or model.maxSeqLen");
    snprintf(err, errlen, "out of GPU memory: a batch of %d x %d tokens needs %.2f GiB (%.2f GiB "
                          "parameters and optimizer state, %.2f MiB a sequence); the GPU has "
                          "%.2f of %.2f GiB free (nvidia-smi shows who holds the rest): %s",
             g->max_batch, c->max_seq_len, need / GiB, fixed / GiB, per / 1048576.0, avail / GiB,
             total / GiB, what);
}

extern "C" struct model_gpu *model_gpu_new(const struct model *m, int max_batch, unsigned flags,
                                           char *err, size_t errlen)
{
    const struct model_config *c = &m->cfg;
    const int bf16 = (flags & MODEL_GPU_BF16) != 0;
    const int fused = (flags & MODEL_GPU_FUSED_ATTENTION) != 0;
    const int ngram = c->kind == MODEL_NGRAM;
    if (c->kind != MODEL_TRANSFORMER && !ngram) {
        snprintf(err, errlen, "model.type: unknown model kind %d; use transformer or ngram",
                 (int)c->kind);
        return NULL;
    }
    if (ngram && (bf16 || fused)) { /* no GEMM big enough for bf16 to matter, no attention */
        snprintf(err, errlen, "%s is for model.type transformer; the n-gram model trains in fp32 "
                              "on the GPU: remove it", bf16 ? "training.precision: bf16"
                                                            : "training.attention: fused");
        return NULL;
    }
    if (m->n_tensors > ADAMW_GPU_MAX_SEGMENTS) {
        snprintf(err, errlen, "model has %d tensors, the GPU optimizer takes %d", m->n_tensors,
                 ADAMW_GPU_MAX_SEGMENTS);
        return NULL;
    }
    if (bf16 && (c->hidden % 8 || c->ffn % 8)) { /* cuBLASLt's bf16 operands: 16-byte rows */
        snprintf(err, errlen, "training.precision: bf16 needs model.hidden and model.ffn "
                              "divisible by 8 (got %d and %d); use precision: fp32 or round "
                              "them up", c->hidden, c->ffn);
        return NULL;
    }
    if (fused && c->hidden / c->heads > ATTENTION_FUSED_MAX_HS) {
        snprintf(err, errlen, "training.attention: fused takes head sizes up to %d (model.hidden "
                              "/ model.heads = %d); use more heads or attention: unfused",
                 ATTENTION_FUSED_MAX_HS, c->hidden / c->heads);
        return NULL;
    }
    struct model_gpu *g = (struct model_gpu *)calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    const size_t N = (size_t)max_batch * c->max_seq_len, C = c->hidden, F = c->ffn, L = c->layers;
    const size_t n = m->n_params;

    g->m = m, g->n = n, g->max_batch = max_batch, g->maxT = c->max_seq_len, g->bf16 = bf16;
    g->fused = fused, g->ngram = ngram;
    g->lw = m->label_words > 0 ? m->label_words : 1;
    g->graphs = (flags & MODEL_GPU_GRAPHS) != 0;
    g->dgelu_epi = bf16 && (flags & MODEL_GPU_DGELU_EPILOGUE) != 0;
    int attn_ds = bf16 && fused && (flags & MODEL_GPU_ATTENTION_DS) != 0;
    const size_t ds_bytes = attention_backward_ds_bytes(max_batch, c->max_seq_len, c->heads);
    const bool ds_fits = ds_bytes <= ((size_t)4 << 30);
    if (attn_ds && !ds_fits) {
        fprintf(stderr, "model_gpu: the attention backward's stored dS^T would take %.1f GiB "
                        "(batch %d, %d tokens, %d heads; past 4 GiB): dQ is recomputed instead\n",
                ds_bytes / 1073741824.0, max_batch, c->max_seq_len, c->heads);
        attn_ds = 0;
    }
    gpu_init();
    { /* do the buffers fit? counted by the code that allocates them, before anything is (the
       * autotune below allocates at this shape too) */
        size_t free_b = 0, total_b = 0;
        g->dev_dry = 1;
        alloc_buffers(g, c);
        g->dev_dry = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        if (g->dev_want > free_b) { /* the pool's kept scratch (an earlier model's) counts too */
            gpu_trim_pool();
            CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        }
        if (g->dev_want > free_b) {
            fit_error(g, c, free_b, total_b, err, errlen);
            free(g);
            return NULL;
        }
        g->dev_want = 0;
    }
    const int attn_wg = bf16 && fused && (flags & MODEL_GPU_ATTENTION_WGMMA) != 0;
    if (attn_wg && (c->hidden / c->heads <= 32 || c->hidden / c->heads > 64 ||
                    !attention_fused_wgmma_available())) /* (asked here: not in a capture) */
        fprintf(stderr, "model_gpu: the wgmma attention needs head size 33 to 64 and "
                        "the sm_90a build on an H100/H200 (head size %d here%s): the mma.sync "
                        "forward instead\n", c->hidden / c->heads,
                attention_fused_wgmma_available() ? "" : ", no wgmma in this device code");
    g->attn_fwd = attn_wg ? ATTN_FWD_WGMMA : ATTN_FWD_DEFAULT;
    g->attn_bwd = attn_wg ? (attn_ds ? ATTN_BWD_WGMMA_DS : ATTN_BWD_WGMMA)
                          : (attn_ds ? ATTN_BWD_DS : ATTN_BWD_DEFAULT);
    if (bf16 && fused && (flags & MODEL_GPU_ATTENTION_CUDNN)) {
        char why[256];
        if (!attention_cudnn_load(why, sizeof(why)))
            fprintf(stderr, "model_gpu: cuDNN's attention asked for, but %s: ours instead\n",
                    why);
        g->attn_fwd = ATTN_FWD_CUDNN, g->attn_bwd = ATTN_BWD_CUDNN; /* (they fall back) */
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    if (bf16 && fused && (flags & MODEL_GPU_TUNE)) { /* before this model's own buffers */
        struct tune_attention_result t;
        char line[1024];
        tune_attention(&t, max_batch, c->max_seq_len, c->hidden, c->heads, ds_fits, g->s);
        g->attn_fwd = t.fwd_pick, g->attn_bwd = t.bwd_pick;
        tune_attention_describe(&t, line, sizeof(line));
        if (!t.cached)
            fprintf(stderr, "model_gpu: autotune, attention at batch %d x %d tokens, %d heads "
                            "of %d: %s\n", max_batch, c->max_seq_len, c->heads,
                    c->hidden / c->heads, line);
    }
    if (bf16 && (flags & MODEL_GPU_TUNE)) { /* the MLP projection's backward: N x F -> C */
        struct tune_dgelu_result t;
        char line[512];
        tune_dgelu(&t, (int)N, (int)F, (int)C, g->s);
        g->dgelu_epi = t.pick == 1;
        tune_dgelu_describe(&t, line, sizeof(line));
        if (!t.cached)
            fprintf(stderr, "model_gpu: autotune, GELU backward at %zu x %zu -> %zu: %s\n", N, F,
                    C, line);
    }
    { /* cuBLASLt's candidates timed at each GEMM's first call: armed (or not) by the newest
       * model, for the process; shapes already timed keep their pick */
        static int said;
        const char *v = getenv("GANTRY_AUTOTUNE_GEMM_MIN_FLOP"); /* (tests: 0) */
        const int tune = bf16 && (flags & MODEL_GPU_TUNE), on = tune && tune_gemm_admitted();
        matmul_tune_arm(on, v && *v ? atof(v) : GEMM_TUNE_MIN_FLOP);
        g->gemm_say = on;
        if (tune && !on && !said++)
            fprintf(stderr, "model_gpu: autotune, GEMM algorithms: cuBLASLt's first (not yet "
                            "run on a GPU, so not timed: its other candidates; "
                            "GANTRY_AUTOTUNE_UNVERIFIED=1 times them)\n");
    }
    g->nseg = m->n_tensors;
    for (int i = 0; i < m->n_tensors; i++)
        g->segs[i] = (struct adamw_segment){m->tensors[i].offset, m->tensors[i].count,
                                            m->tensors[i].decay};
    size_t stage = alloc_buffers(g, c);
    if (g->dev_short) { /* (the check above passed: another process took memory since) */
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        fit_error(g, c, free_b + g->dev_held, total_b, err, errlen);
        model_gpu_free(g);
        return NULL;
    }
    for (int i = 0; i < STAGE_SLOTS; i++) {
        CUDA_CHECK(cudaMallocHost(&g->stage[i], stage * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->staged[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaGetDevice(&g->device));
    g->unit_done = (cudaEvent_t *)calloc(MODEL_GPU_UNITS(L), sizeof(cudaEvent_t));
    if (!g->unit_done) {
        fprintf(stderr, "model_gpu: out of host memory\n");
        exit(1);
    }
    for (size_t u = 0; u < MODEL_GPU_UNITS(L); u++) /* blocking sync: the comm thread sleeps */
        CUDA_CHECK(cudaEventCreateWithFlags(&g->unit_done[u],
                                            cudaEventDisableTiming | cudaEventBlockingSync));
    /* dalloc's cudaMemset runs on the legacy default stream, which g->s (non-blocking) does not
     * wait for: finish them before the upload writes the same buffers on g->s. */
    CUDA_CHECK(cudaDeviceSynchronize());
    model_gpu_upload(g, m->params, NULL, NULL);
    return g;
}

extern "C" void model_gpu_kernels(const struct model_gpu *g, int *attn_fwd, int *attn_bwd,
                                  int *dgelu)
{
    *attn_fwd = g->attn_fwd, *attn_bwd = g->attn_bwd, *dgelu = g->dgelu_epi;
}

extern "C" void model_gpu_free(struct model_gpu *g)
{
    if (!g)
        return;
    cudaStreamSynchronize(g->s);
    graph_drop_all(g);
    float *bufs[] = {g->p, g->g, g->am, g->av, (float *)g->p16, (float *)g->loss_acc, g->votes,
                     (float *)g->tokens, (float *)g->len, (float *)g->labels, g->x0, g->ln1,
                     g->ln1m, g->ln1r, g->qkv, g->atty, g->att, g->lse,
                     g->attproj, g->res2, g->ln2,
                     g->ln2m, g->ln2r, g->fch, g->fchg, g->fcproj, g->res3, g->lnf, g->lnfm,
                     g->lnfr, g->pooled, g->logits, g->probs, g->losses, g->dres, g->dln,
                     g->dfchg, g->dfch, g->datty, g->dqkv, g->dpooled, g->dlogits, g->norm,
                     g->coef, (float *)g->s16a, (float *)g->ln1h, (float *)g->attyh,
                     (float *)g->ln2h, (float *)g->fchgh, (float *)g->qkvh, (float *)g->fchh,
                     (float *)g->datty16, (float *)g->dfchg16, (float *)g->dln16, g->cw,
                     (float *)g->bag_ids, (float *)g->bag_count};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        cudaFree(bufs[i]); /* NULL is a no-op */
    for (int i = 0; i < STAGE_SLOTS; i++) { /* (NULL: model_gpu_new refused the shape) */
        if (g->stage[i])
            cudaFreeHost(g->stage[i]);
        if (g->staged[i])
            cudaEventDestroy(g->staged[i]);
    }
    for (int u = 0; g->unit_done && u < MODEL_GPU_UNITS(g->m->cfg.layers); u++)
        cudaEventDestroy(g->unit_done[u]);
    free(g->unit_done);
    for (int i = 0; g->prof_ev && i < PROF_MARKS; i++)
        cudaEventDestroy(g->prof_ev[i]);
    free(g->prof_ev);
    free(g->prof_op);
    free(g->cw_host);
    cudaStreamDestroy(g->s);
    free(g);
}

extern "C" void model_gpu_upload(struct model_gpu *g, const float *params, const float *am,
                                 const float *av)
{
    size_t bytes = g->n * sizeof(float);
    CUDA_CHECK(cudaMemcpyAsync(g->p, params, bytes, cudaMemcpyHostToDevice, g->s));
    if (am)
        CUDA_CHECK(cudaMemcpyAsync(g->am, am, bytes, cudaMemcpyHostToDevice, g->s));
    else
        CUDA_CHECK(cudaMemsetAsync(g->am, 0, bytes, g->s));
    if (av)
        CUDA_CHECK(cudaMemcpyAsync(g->av, av, bytes, cudaMemcpyHostToDevice, g->s));
    else
        CUDA_CHECK(cudaMemsetAsync(g->av, 0, bytes, g->s));
    cast_f32_to_bf16(g->p16, g->p, g->n, g->s);
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

extern "C" void model_gpu_download(struct model_gpu *g, float *params, float *am, float *av)
{
    size_t bytes = g->n * sizeof(float);
    if (params)
        CUDA_CHECK(cudaMemcpyAsync(params, g->p, bytes, cudaMemcpyDeviceToHost, g->s));
    if (am)
        CUDA_CHECK(cudaMemcpyAsync(am, g->am, bytes, cudaMemcpyDeviceToHost, g->s));
    if (av)
        CUDA_CHECK(cudaMemcpyAsync(av, g->av, bytes, cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

/* model_gpu_batch for the n-gram model: the bags (worker/model.c's model_ngram_bag, as the CPU
 * model builds them), staged in st and uploaded with their counts and the labels; the ids past
 * each count are never read (the kernels stop at it). */
static void stage_bags(struct model_gpu *g, int *st, const int *tokens, const int *len,
                       const int *labels, int B, int T)
{
    size_t M = 2 * (size_t)g->maxT;
    int *count = st + (size_t)B * M;
    for (int b = 0; b < B; b++)
        count[b] = model_ngram_bag(&g->m->cfg, tokens + (size_t)b * T, len[b], st + (size_t)b * M);
    if (labels)
        memcpy(count + B, labels, (size_t)B * g->lw * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(g->bag_ids, st, (size_t)B * M * sizeof(int),
                               cudaMemcpyHostToDevice, g->s));
    CUDA_CHECK(cudaMemcpyAsync(g->bag_count, count, (size_t)B * sizeof(int),
                               cudaMemcpyHostToDevice, g->s));
    if (labels)
        CUDA_CHECK(cudaMemcpyAsync(g->labels, count + B, (size_t)B * g->lw * sizeof(int),
                                   cudaMemcpyHostToDevice, g->s));
}

extern "C" void model_gpu_batch(struct model_gpu *g, const int *tokens, const int *len,
                                const int *labels, int B, int T)
{
    if (B < 1 || B > g->max_batch || T < 1 || T > g->maxT) {
        fprintf(stderr, "model_gpu_batch: B=%d T=%d outside 1..%d, 1..%d\n", B, T, g->max_batch,
                g->maxT);
        abort();
    }
    size_t N = (size_t)B * T;
    int *st = g->stage[g->slot];
    CUDA_CHECK(cudaEventSynchronize(g->staged[g->slot])); /* this slot's last upload left */
    if (g->ngram) {
        stage_bags(g, st, tokens, len, labels, B, T);
    } else {
        memcpy(st, tokens, N * sizeof(int));
        memcpy(st + N, len, (size_t)B * sizeof(int));
        if (labels)
            memcpy(st + N + B, labels, (size_t)B * g->lw * sizeof(int));
        CUDA_CHECK(cudaMemcpyAsync(g->tokens, st, N * sizeof(int), cudaMemcpyHostToDevice, g->s));
        CUDA_CHECK(cudaMemcpyAsync(g->len, st + N, (size_t)B * sizeof(int), cudaMemcpyHostToDevice,
                                   g->s));
        if (labels)
            CUDA_CHECK(cudaMemcpyAsync(g->labels, st + N + B, (size_t)B * g->lw * sizeof(int),
                                       cudaMemcpyHostToDevice, g->s));
    }
    CUDA_CHECK(cudaEventRecord(g->staged[g->slot], g->s));
    g->slot = (g->slot + 1) % STAGE_SLOTS;
    g->B = B, g->T = T, g->have_labels = labels != NULL;
}

extern "C" void model_gpu_loss(struct model_gpu *g, float smoothing, const float *class_weight)
{
    size_t K = (size_t)g->m->cfg.classes;
    if (smoothing != g->smoothing || (class_weight != NULL) != g->use_cw)
        graph_drop_all(g); /* the graphs' cross-entropy kernels took the old settings */
    g->smoothing = smoothing;
    g->use_cw = class_weight != NULL;
    /* uploaded when they change: the loop passes the same weights every micro-batch */
    if (class_weight && (!g->cw_set || memcmp(class_weight, g->cw_host, K * sizeof(float)))) {
        memcpy(g->cw_host, class_weight, K * sizeof(float));
        g->cw_set = 1;
        CUDA_CHECK(cudaMemcpyAsync(g->cw, g->cw_host, K * sizeof(float), cudaMemcpyHostToDevice,
                                   g->s));
        CUDA_CHECK(cudaStreamSynchronize(g->s)); /* cw_host is pageable: once per change */
    }
}

extern "C" void model_gpu_zero_grad(struct model_gpu *g)
{
    CUDA_CHECK(cudaMemsetAsync(g->g, 0, (g->n + MODEL_GPU_STATS) * sizeof(float), g->s));
}

extern "C" float *model_gpu_grads(struct model_gpu *g)
{
    return g->g;
}

extern "C" void model_gpu_grads_put(struct model_gpu *g, const float *src, size_t n)
{
    if (n > g->n + MODEL_GPU_STATS) {
        fprintf(stderr, "model_gpu_grads_put: %zu floats, the buffer holds %zu\n", n,
                g->n + MODEL_GPU_STATS);
        abort();
    }
    CUDA_CHECK(cudaMemcpyAsync(g->g, src, n * sizeof(float), cudaMemcpyHostToDevice, g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

extern "C" void model_gpu_grads_get(struct model_gpu *g, float *dst, size_t n)
{
    if (n > g->n + MODEL_GPU_STATS) {
        fprintf(stderr, "model_gpu_grads_get: %zu floats, the buffer holds %zu\n", n,
                g->n + MODEL_GPU_STATS);
        abort();
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, g->g, n * sizeof(float), cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

extern "C" void model_gpu_scale_grads(struct model_gpu *g, float s)
{
    int blocks = (int)CEIL_DIV(g->n, (size_t)256);
    scale_kernel<<<blocks < 4096 ? blocks : 4096, 256, 0, g->s>>>(g->g, g->n, s);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void model_gpu_step(struct model_gpu *g, const struct optim_config *c, float lr, long t)
{
    grad_norm(g->norm, g->g, g->n, g->s);
    grad_clip_coef(g->coef, g->norm, c->grad_clip, 1.0f, g->s);
    adamw_update(g->p, g->bf16 ? g->p16 : NULL, g->g, g->am, g->av, g->segs, g->nseg, lr,
                 c->beta1, c->beta2, c->eps, c->weight_decay, t, g->coef, g->s);
}

extern "C" void model_gpu_end_step(struct model_gpu *g)
{
    end_step_kernel<<<1, 1, 0, g->s>>>(g->loss_acc, g->votes, g->g + g->n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void model_gpu_vote_stop(struct model_gpu *g)
{
    vote_kernel<<<1, 1, 0, g->s>>>(g->g + g->n + 2);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" float model_gpu_read_votes(struct model_gpu *g)
{
    float v = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&v, g->votes, sizeof(v), cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaMemsetAsync(g->votes, 0, sizeof(float), g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
    return v;
}

extern "C" void model_gpu_read_stats(struct model_gpu *g, double *loss_sum, float *grad_norm_out)
{
    double acc = 0.0;
    float nrm = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&acc, g->loss_acc, sizeof(acc), cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaMemcpyAsync(&nrm, g->norm, sizeof(nrm), cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaMemsetAsync(g->loss_acc, 0, sizeof(double), g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
    if (loss_sum)
        *loss_sum = acc;
    if (grad_norm_out)
        *grad_norm_out = nrm;
}

extern "C" void model_gpu_read_logits(struct model_gpu *g, float *logits)
{
    size_t n = (size_t)g->B * g->m->cfg.classes;
    CUDA_CHECK(cudaMemcpyAsync(logits, g->logits, n * sizeof(float), cudaMemcpyDeviceToHost, g->s));
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

extern "C" float model_gpu_last_loss(struct model_gpu *g)
{
    float l[1024];
    double sum = 0.0;
    int B = g->B;
    for (int b0 = 0; b0 < B; b0 += 1024) {
        int nb = B - b0 < 1024 ? B - b0 : 1024;
        CUDA_CHECK(cudaMemcpyAsync(l, g->losses + b0, sizeof(float) * nb, cudaMemcpyDeviceToHost,
                                   g->s));
        CUDA_CHECK(cudaStreamSynchronize(g->s));
        for (int b = 0; b < nb; b++)
            sum += l[b];
    }
    return B ? (float)(sum / B) : 0.0f;
}

extern "C" void model_gpu_sync(struct model_gpu *g)
{
    CUDA_CHECK(cudaStreamSynchronize(g->s));
}

extern "C" struct CUstream_st *model_gpu_stream(struct model_gpu *g)
{
    return g->s;
}

extern "C" const char *model_gpu_backend(void)
{
    return "cuda";
}

/* ---- gradients ready during backward (model_gpu.h) ---- */

extern "C" void model_gpu_arm_ready(struct model_gpu *g, model_gpu_ready_fn fn, void *ctx)
{
    g->ready = fn, g->ready_ctx = ctx;
}

extern "C" void model_gpu_wait_unit(struct model_gpu *g, int unit)
{
    CUDA_CHECK(cudaEventSynchronize(g->unit_done[unit]));
}

extern "C" void model_gpu_stream_wait_unit(struct model_gpu *g, int unit,
                                           struct CUstream_st *stream)
{
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, g->unit_done[unit], 0));
}

extern "C" void model_gpu_bind_thread(struct model_gpu *g)
{
    CUDA_CHECK(cudaSetDevice(g->device));
}
