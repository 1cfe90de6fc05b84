// gpu_bench: trains gantry's Transformer classifier (worker/model.h) on one GPU with the CUDA
// kernels (kernels/gpu.h) and prints tokens/s and MFU; --check-cpu also runs worker/model.c on the
// CPU from the same initial weights and batch and compares the loss of every step.
//
// One optimizer step = zero grads, forward, cross-entropy, backward, global-norm clipping and AdamW,
// all on one stream with no host synchronisation (the loss is read once, after the timed steps).
// Parameters, gradients and AdamW moments are single fp32 buffers laid out by model_init() (llm.c
// style). --bf16 runs every GEMM (the attention's batched ones too) on bf16 operands with fp32
// accumulation and fp32 master weights (the parameters' bf16 copy is refreshed by the AdamW
// kernel); activations stay fp32 and are cast around each GEMM, which costs bandwidth a fully bf16
// activation path would not (docs/gpu.md).
//
// MFU = model FLOPs per second / 989.4e12 (H100/H200 dense bf16, no sparsity), FLOPs counted as
// 3 x forward (GEMMs 2*N*C*OC each, attention 4*B*T*T*C per layer, the full T x T: that is what
// this implementation computes).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/gpu.h"
extern "C" { /* C headers without C++ guards */
#include "kernels/cpu.h"
#include "worker/model.h"
#include "worker/optim.h"
}

#include <math.h>

#define PEAK_BF16 989.4e12

struct opts {
    int B, T, C, L, NH, V, K, steps, warmup, varlen, bf16, check_cpu;
    const char *name;
};

struct gm { /* device state */
    const struct model *m;
    float *p, *g, *am, *av;
    uint16_t *p16;
    int *tokens, *len, *labels;
    float *x0, *ln1, *ln1m, *ln1r, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2m, *ln2r, *fch,
        *fchg, *fcproj, *res3, *lnf, *lnfm, *lnfr, *pooled, *logits, *probs, *losses;
    float *dres, *dln, *dfchg, *dfch, *datty, *dqkv, *dpooled, *dlogits, *norm, *coef;
    uint16_t *s16a, *s16b, *s16c; /* bf16 scratch for GEMM operands */
    int bf16;
};

static float *dalloc(size_t n)
{
    float *p;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(float) + 16));
    CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
    return p;
}

static size_t off(const struct gm *g, const char *name)
{
    const struct model_tensor *t = model_find_tensor(g->m, name);
    if (!t) {
        fprintf(stderr, "gpu_bench: model has no tensor %s\n", name);
        exit(1);
    }
    return t->offset;
}
#define P(name) (g->p + off(g, name))
#define G(name) (g->g + off(g, name))
#define P16(name) (g->p16 + off(g, name))

/* out (N,OC) = inp @ w^T + b, fp32 or through bf16 operands */
static void fc_forward(struct gm *g, float *out, const float *inp, const char *w, const char *b,
                       size_t lw, size_t lb, int N, int C, int OC, cudaStream_t s)
{
    if (!g->bf16) {
        matmul_forward(out, inp, P(w) + lw, P(b) + lb, N, C, OC, s);
        return;
    }
    cast_f32_to_bf16(g->s16a, inp, (size_t)N * C, s);
    matmul_forward_bf16(g->s16b, g->s16a, P16(w) + lw, P16(b) + lb, N, C, OC, s);
    cast_bf16_to_f32(out, g->s16b, (size_t)N * OC, s);
}

/* dinp (zeroed here) = dout @ w; dw += dout^T @ inp; db += colsum(dout) */
static void fc_backward(struct gm *g, float *dinp, const float *dout, const float *inp,
                        const char *w, const char *b, size_t lw, size_t lb, int N, int C, int OC,
                        cudaStream_t s)
{
    if (!g->bf16) {
        CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * C * sizeof(float), s));
        matmul_backward(dinp, G(w) + lw, G(b) + lb, dout, inp, P(w) + lw, N, C, OC, s);
        return;
    }
    cast_f32_to_bf16(g->s16a, dout, (size_t)N * OC, s);
    cast_f32_to_bf16(g->s16b, inp, (size_t)N * C, s);
    CUDA_CHECK(cudaMemsetAsync(g->s16c, 0, (size_t)N * C * 2, s));
    matmul_backward_bf16(g->s16c, G(w) + lw, G(b) + lb, g->s16a, g->s16b, P16(w) + lw, N, C, OC,
                         s);
    cast_bf16_to_f32(dinp, g->s16c, (size_t)N * C, s);
}

static void forward(struct gm *g, int B, int T, cudaStream_t s)
{
    const struct model_config *c = &g->m->cfg;
    int C = c->hidden, NH = c->heads, F = c->ffn, N = B * T, K = c->classes;
    size_t NC = (size_t)N * C, NF = (size_t)N * F, natt = (size_t)B * NH * T * T;

    embed_forward(g->x0, g->tokens, P("wte"), P("wpe"), B, T, C, s);
    const float *x = g->x0;
    for (int l = 0; l < c->layers; l++) {
        float *ln1 = g->ln1 + l * NC, *qkv = g->qkv + 3 * l * NC, *atty = g->atty + l * NC;
        float *res2 = g->res2 + l * NC, *ln2 = g->ln2 + l * NC, *res3 = g->res3 + l * NC;
        float *fch = g->fch + l * NF, *fchg = g->fchg + l * NF;
        layernorm_forward(ln1, g->ln1m + l * N, g->ln1r + l * N, x, P("ln1w") + l * C,
                          P("ln1b") + l * C, N, C, s);
        fc_forward(g, qkv, ln1, "qkvw", "qkvb", (size_t)l * 3 * C * C, (size_t)l * 3 * C, N, C,
                   3 * C, s);
        if (g->bf16)
            attention_forward_mixed(atty, g->att + l * natt, qkv, g->len, B, T, C, NH, s);
        else
            attention_forward(atty, g->att + l * natt, qkv, g->len, B, T, C, NH, s);
        fc_forward(g, g->attproj, atty, "attprojw", "attprojb", (size_t)l * C * C, (size_t)l * C,
                   N, C, C, s);
        residual_forward(res2, x, g->attproj, (long)NC, s);
        layernorm_forward(ln2, g->ln2m + l * N, g->ln2r + l * N, res2, P("ln2w") + l * C,
                          P("ln2b") + l * C, N, C, s);
        if (g->bf16) {
            fc_forward(g, fch, ln2, "fcw", "fcb", (size_t)l * F * C, (size_t)l * F, N, C, F, s);
            gelu_forward(fchg, fch, NF, s);
        } else { /* bias + GELU in the GEMM's epilogue */
            matmul_forward_gelu(fchg, fch, ln2, P("fcw") + (size_t)l * F * C, P("fcb") + l * F, N,
                                C, F, s);
        }
        fc_forward(g, g->fcproj, fchg, "fcprojw", "fcprojb", (size_t)l * C * F, (size_t)l * C, N,
                   F, C, s);
        residual_forward(res3, res2, g->fcproj, (long)NC, s);
        x = res3;
    }
    layernorm_forward(g->lnf, g->lnfm, g->lnfr, x, P("lnfw"), P("lnfb"), N, C, s);
    if (c->pool == MODEL_POOL_CLS)
        clspool_forward(g->pooled, g->lnf, B, T, C, s);
    else
        meanpool_forward(g->pooled, g->lnf, g->len, B, T, C, s);
    matmul_forward(g->logits, g->pooled, P("clsw"), P("clsb"), B, C, K, s); /* tiny: fp32 */
    crossentropy_forward(g->losses, g->probs, g->logits, g->labels, B, K, s);
}

static void backward(struct gm *g, int B, int T, cudaStream_t s)
{
    const struct model_config *c = &g->m->cfg;
    int C = c->hidden, NH = c->heads, F = c->ffn, N = B * T, K = c->classes;
    size_t NC = (size_t)N * C, NF = (size_t)N * F, natt = (size_t)B * NH * T * T;

    CUDA_CHECK(cudaMemsetAsync(g->dlogits, 0, (size_t)B * K * sizeof(float), s));
    crossentropy_backward(g->dlogits, g->probs, g->labels, 1.0f / B, B, K, s);
    CUDA_CHECK(cudaMemsetAsync(g->dpooled, 0, (size_t)B * C * sizeof(float), s));
    matmul_backward(g->dpooled, G("clsw"), G("clsb"), g->dlogits, g->pooled, P("clsw"), B, C, K,
                    s);
    CUDA_CHECK(cudaMemsetAsync(g->dln, 0, NC * sizeof(float), s));
    if (c->pool == MODEL_POOL_CLS)
        clspool_backward(g->dln, g->dpooled, B, T, C, s);
    else
        meanpool_backward(g->dln, g->dpooled, g->len, B, T, C, s);
    CUDA_CHECK(cudaMemsetAsync(g->dres, 0, NC * sizeof(float), s));
    const float *xL = c->layers ? g->res3 + (c->layers - 1) * NC : g->x0;
    layernorm_backward(g->dres, G("lnfw"), G("lnfb"), g->dln, xL, P("lnfw"), g->lnfm, g->lnfr, N,
                       C, s);
    for (int l = c->layers - 1; l >= 0; l--) {
        const float *x = l ? g->res3 + (l - 1) * NC : g->x0;
        const float *ln1 = g->ln1 + l * NC, *qkv = g->qkv + 3 * l * NC, *atty = g->atty + l * NC;
        const float *res2 = g->res2 + l * NC, *ln2 = g->ln2 + l * NC;
        const float *fch = g->fch + l * NF, *fchg = g->fchg + l * NF;
        fc_backward(g, g->dfchg, g->dres, fchg, "fcprojw", "fcprojb", (size_t)l * C * F,
                    (size_t)l * C, N, F, C, s);
        CUDA_CHECK(cudaMemsetAsync(g->dfch, 0, NF * sizeof(float), s));
        gelu_backward(g->dfch, fch, g->dfchg, NF, s);
        fc_backward(g, g->dln, g->dfch, ln2, "fcw", "fcb", (size_t)l * F * C, (size_t)l * F, N, C,
                    F, s);
        layernorm_backward(g->dres, G("ln2w") + l * C, G("ln2b") + l * C, g->dln, res2,
                           P("ln2w") + l * C, g->ln2m + l * N, g->ln2r + l * N, N, C, s);
        fc_backward(g, g->datty, g->dres, atty, "attprojw", "attprojb", (size_t)l * C * C,
                    (size_t)l * C, N, C, C, s);
        CUDA_CHECK(cudaMemsetAsync(g->dqkv, 0, 3 * NC * sizeof(float), s));
        if (g->bf16)
            attention_backward_mixed(g->dqkv, g->datty, qkv, g->att + l * natt, g->len, B, T, C,
                                     NH, s);
        else
            attention_backward(g->dqkv, g->datty, qkv, g->att + l * natt, g->len, B, T, C, NH, s);
        fc_backward(g, g->dln, g->dqkv, ln1, "qkvw", "qkvb", (size_t)l * 3 * C * C,
                    (size_t)l * 3 * C, N, C, 3 * C, s);
        layernorm_backward(g->dres, G("ln1w") + l * C, G("ln1b") + l * C, g->dln, x,
                           P("ln1w") + l * C, g->ln1m + l * N, g->ln1r + l * N, N, C, s);
    }
    embed_backward(G("wte"), G("wpe"), g->dres, g->tokens, B, T, C, c->vocab, s);
}

static void gm_init(struct gm *g, const struct model *m, int B, int T, int bf16)
{
    const struct model_config *c = &m->cfg;
    size_t N = (size_t)B * T, C = c->hidden, F = c->ffn, L = c->layers, n = m->n_params;
    size_t natt = (size_t)B * c->heads * T * T;

    memset(g, 0, sizeof(*g));
    g->m = m;
    g->bf16 = bf16;
    g->p = dalloc(n), g->g = dalloc(n), g->am = dalloc(n), g->av = dalloc(n);
    CUDA_CHECK(cudaMemcpy(g->p, m->params, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&g->p16, n * 2));
    cast_f32_to_bf16(g->p16, g->p, n, 0);
    g->x0 = dalloc(N * C), g->ln1 = dalloc(L * N * C), g->qkv = dalloc(3 * L * N * C);
    g->ln1m = dalloc(L * N), g->ln1r = dalloc(L * N), g->ln2m = dalloc(L * N);
    g->ln2r = dalloc(L * N), g->atty = dalloc(L * N * C), g->att = dalloc(L * natt);
    g->attproj = dalloc(N * C), g->res2 = dalloc(L * N * C), g->ln2 = dalloc(L * N * C);
    g->fch = dalloc(L * N * F), g->fchg = dalloc(L * N * F), g->fcproj = dalloc(N * C);
    g->res3 = dalloc(L * N * C), g->lnf = dalloc(N * C), g->lnfm = dalloc(N), g->lnfr = dalloc(N);
    g->pooled = dalloc((size_t)B * C), g->logits = dalloc((size_t)B * c->classes);
    g->probs = dalloc((size_t)B * c->classes), g->losses = dalloc(B);
    g->dres = dalloc(N * C), g->dln = dalloc(N * C), g->dfchg = dalloc(N * F);
    g->dfch = dalloc(N * F), g->datty = dalloc(N * C), g->dqkv = dalloc(3 * N * C);
    g->dpooled = dalloc((size_t)B * C), g->dlogits = dalloc((size_t)B * c->classes);
    g->norm = dalloc(1), g->coef = dalloc(1);
    size_t big = N * (F > 3 * C ? F : 3 * C);
    CUDA_CHECK(cudaMalloc(&g->s16a, big * 2));
    CUDA_CHECK(cudaMalloc(&g->s16b, big * 2));
    CUDA_CHECK(cudaMalloc(&g->s16c, big * 2));
}

/* ev (optional, 4 events): recorded before the forward, the backward, the optimizer and at the
 * end, for the per-phase breakdown. */
static void step(struct gm *g, struct adamw_segment *segs, int nseg, long t, int B, int T,
                 cudaStream_t s, cudaEvent_t *ev = NULL)
{
    CUDA_CHECK(cudaMemsetAsync(g->g, 0, g->m->n_params * sizeof(float), s));
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[0], s));
    forward(g, B, T, s);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[1], s));
    backward(g, B, T, s);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[2], s));
    grad_norm(g->norm, g->g, g->m->n_params, s);
    grad_clip_coef(g->coef, g->norm, 1.0f, 1.0f, s);
    adamw_update(g->p, g->p16, g->g, g->am, g->av, segs, nseg, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f,
                 t, g->coef, s);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[3], s));
}

/* One more step, timed by phase. */
static void phases(struct gm *g, struct adamw_segment *segs, int nseg, long t, int B, int T)
{
    cudaEvent_t ev[4];
    float ms[3];
    for (int i = 0; i < 4; i++)
        CUDA_CHECK(cudaEventCreate(&ev[i]));
    step(g, segs, nseg, t, B, T, 0, ev);
    CUDA_CHECK(cudaEventSynchronize(ev[3]));
    for (int i = 0; i < 3; i++)
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    printf("phases: forward %.2f ms | backward %.2f ms | clip + AdamW %.2f ms\n", (double)ms[0],
           (double)ms[1], (double)ms[2]);
    for (int i = 0; i < 4; i++)
        cudaEventDestroy(ev[i]);
}

static float mean_loss(const struct gm *g, int B)
{
    float *l = (float *)malloc(sizeof(float) * B);
    double sum = 0.0;
    CUDA_CHECK(cudaMemcpy(l, g->losses, sizeof(float) * B, cudaMemcpyDeviceToHost));
    for (int b = 0; b < B; b++)
        sum += l[b];
    free(l);
    return (float)(sum / B);
}

static void usage(const char *argv0)
{
    printf("usage: %s [--preset gpt2|example] [--batch B] [--seq T] [--hidden C] [--layers L]\n"
           "          [--heads NH] [--vocab V] [--classes K] [--steps S] [--warmup W] [--varlen]\n"
           "          [--bf16] [--check-cpu]\n"
           "  gpt2:    B=8 T=1024 C=768 L=12 NH=12 V=50257 K=2 (GPT-2 124M-sized encoder)\n"
           "  example: B=32 T=256 C=128 L=2 NH=4 V=20000 K=2 (bench/cpu_train's default model;\n"
           "           the default preset)\n"
           "  --check-cpu: also train worker/model.c on the CPU from the same weights and batch and\n"
           "           compare every step's loss (exit 1 when they differ beyond tolerance)\n",
           argv0);
}

static void preset(struct opts *o, const char *name)
{
    if (strcmp(name, "gpt2") == 0)
        *o = (struct opts){8, 1024, 768, 12, 12, 50257, 2, 20, 3, 0, 0, 0, "gpt2"};
    else if (strcmp(name, "example") == 0)
        *o = (struct opts){32, 256, 128, 2, 4, 20000, 2, 50, 5, 0, 0, 0, "example"};
    else {
        fprintf(stderr, "gpu_bench: unknown preset '%s' (gpt2 or example)\n", name);
        exit(2);
    }
}

static void parse(struct opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"preset", 1, 0, 'p'}, {"batch", 1, 0, 'B'}, {"seq", 1, 0, 'T'}, {"hidden", 1, 0, 'C'},
        {"layers", 1, 0, 'L'}, {"heads", 1, 0, 'H'}, {"vocab", 1, 0, 'V'}, {"classes", 1, 0, 'K'},
        {"steps", 1, 0, 's'}, {"warmup", 1, 0, 'w'}, {"varlen", 0, 0, 'v'}, {"bf16", 0, 0, 'b'},
        {"check-cpu", 0, 0, 'c'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int ch;
    preset(o, "example");
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': {
            int bf16 = o->bf16, check = o->check_cpu, varlen = o->varlen;
            preset(o, optarg);
            o->bf16 = bf16, o->check_cpu = check, o->varlen = varlen;
            break;
        }
        case 'B': o->B = atoi(optarg); break;
        case 'T': o->T = atoi(optarg); break;
        case 'C': o->C = atoi(optarg); break;
        case 'L': o->L = atoi(optarg); break;
        case 'H': o->NH = atoi(optarg); break;
        case 'V': o->V = atoi(optarg); break;
        case 'K': o->K = atoi(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'v': o->varlen = 1; break;
        case 'b': o->bf16 = 1; break;
        case 'c': o->check_cpu = 1; break;
        case 'h': usage(argv[0]); exit(0);
        default: usage(argv[0]); exit(2);
        }
    }
}

/* Compares CPU and GPU losses step by step from the same weights; returns mismatches. */
static int check_cpu(struct model *m, struct gm *g, struct adamw_segment *segs, int nseg,
                     const struct opts *o, const int *tokens, const int *len, const int *labels)
{
    struct adamw opt;
    struct optim_config oc;
    int bad = 0;
    double tol = o->bf16 ? 3e-2 : 2e-3;

    optim_config_default(&oc);
    adamw_init(&opt, m->n_params);
    for (int i = 0; i < o->steps; i++) {
        model_zero_grad(m);
        float lc = model_forward(m, tokens, len, labels, o->B, o->T);
        model_backward(m, 1.0f / o->B);
        optim_clip_grad_norm(m->grads, m->n_params, oc.grad_clip);
        adamw_step(&opt, m, &oc, oc.lr);
        step(g, segs, nseg, i + 1, o->B, o->T, 0);
        float lg = mean_loss(g, o->B);
        int ok = fabs((double)lg - lc) <= tol * (fabs((double)lc) > 1 ? fabs((double)lc) : 1);
        printf("check step %3d  cpu loss %.6f  gpu loss %.6f  %s\n", i + 1, (double)lc,
               (double)lg, ok ? "ok" : "MISMATCH");
        bad += !ok;
    }
    adamw_cleanup(&opt);
    printf("check-cpu (%s, tol %.0e relative): %s\n", o->bf16 ? "bf16 GEMMs" : "fp32", tol,
           bad ? "FAILED" : "OK");
    return bad;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct model m;
    struct model_config cfg;
    struct gm g;
    struct adamw_segment segs[ADAMW_GPU_MAX_SEGMENTS];
    char err[256];
    cudaEvent_t e0, e1;
    cudaDeviceProp prop;

    cpu_runtime_setup(argv);
    parse(&o, argc, argv);
    if (!cuda_have_device()) {
        printf("gpu_bench: SKIP: no CUDA device\n");
        return 77;
    }
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    memset(&cfg, 0, sizeof(cfg));
    cfg.kind = MODEL_TRANSFORMER, cfg.vocab = o.V, cfg.classes = o.K, cfg.max_seq_len = o.T;
    cfg.hidden = o.C, cfg.layers = o.L, cfg.heads = o.NH, cfg.ffn = 4 * o.C;
    cfg.pool = MODEL_POOL_MEAN;
    if (model_init(&m, &cfg, o.check_cpu ? o.B : 1, 1234, err, sizeof(err)) != 0) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return 2;
    }
    for (int i = 0; i < m.n_tensors; i++)
        segs[i] = (struct adamw_segment){m.tensors[i].offset, m.tensors[i].count,
                                         m.tensors[i].decay};

    /* one batch, reused every step (the data pipeline is not what is measured) */
    int N = o.B * o.T, *tokens = (int *)calloc(N, sizeof(int)), *len = (int *)calloc(o.B, 4);
    int *labels = (int *)calloc(o.B, sizeof(int));
    uint64_t r = 42;
    long real = 0;
    for (int b = 0; b < o.B; b++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        len[b] = o.varlen ? o.T / 4 + (int)((r >> 33) % (uint64_t)(o.T - o.T / 4 + 1)) : o.T;
        labels[b] = b % o.K;
        real += len[b];
        for (int t = 0; t < len[b]; t++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            tokens[b * o.T + t] = 5 + (int)((r >> 33) % (uint64_t)(o.V - 5));
        }
    }
    gpu_init();
    gm_init(&g, &m, o.B, o.T, o.bf16);
    CUDA_CHECK(cudaMemcpy(g.tokens = (int *)dalloc(N), tokens, N * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g.len = (int *)dalloc(o.B), len, o.B * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g.labels = (int *)dalloc(o.B), labels, o.B * 4, cudaMemcpyHostToDevice));

    int rc = 0;
    if (o.check_cpu) {
        rc = check_cpu(&m, &g, segs, m.n_tensors, &o, tokens, len, labels) ? 1 : 0;
        goto out;
    }
    for (int i = 0; i < o.warmup; i++)
        step(&g, segs, m.n_tensors, i + 1, o.B, o.T, 0);
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, 0));
    for (int i = 0; i < o.steps; i++)
        step(&g, segs, m.n_tensors, o.warmup + i + 1, o.B, o.T, 0);
    CUDA_CHECK(cudaEventRecord(e1, 0));
    CUDA_CHECK(cudaEventSynchronize(e1));
    {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        double sec = ms / 1e3 / o.steps, C = o.C, F = 4.0 * o.C, Nf = (double)N;
        double fwd = o.L * (2 * Nf * C * 3 * C + 2 * Nf * C * C + 4 * Nf * C * F +
                            4.0 * o.B * o.T * (double)o.T * C) + 2.0 * o.B * C * o.K;
        double mfu = 3 * fwd / sec / PEAK_BF16;
        printf("gpu_bench %s on %s: %s, B=%d T=%d C=%d L=%d NH=%d | %.2f ms/step | %.0f tok/s "
               "(%.0f real) | %.1f TFLOP/s | MFU %.1f%% | loss %.4f\n",
               o.name, prop.name, o.bf16 ? "bf16 GEMMs" : "fp32", o.B, o.T, o.C, o.L, o.NH,
               sec * 1e3, N / sec, real / sec, 3 * fwd / sec / 1e12, 100 * mfu,
               (double)mean_loss(&g, o.B));
        printf("{\"impl\":\"gantry\",\"preset\":\"%s\",\"gpu\":\"%s\",\"precision\":\"%s\","
               "\"batch\":%d,\"seq\":%d,\"hidden\":%d,\"layers\":%d,\"heads\":%d,\"steps\":%d,"
               "\"ms_per_step\":%.3f,\"tokens_per_s\":%.0f,\"real_tokens_per_s\":%.0f,"
               "\"tflops\":%.2f,\"mfu\":%.4f}\n",
               o.name, prop.name, o.bf16 ? "bf16" : "fp32", o.B, o.T, o.C, o.L, o.NH, o.steps,
               sec * 1e3, N / sec, real / sec, 3 * fwd / sec / 1e12, mfu);
    }
    phases(&g, segs, m.n_tensors, o.warmup + o.steps + 1, o.B, o.T);
out:
    gpu_shutdown();
    model_cleanup(&m);
    free(tokens), free(len), free(labels);
    return rc;
}
