// gpu_bench: trains gantry's Transformer classifier (worker/model.h) on one GPU with the CUDA
// kernels (kernels/gpu.h) and prints tokens/s and MFU; --check-cpu also runs worker/model.c on the
// CPU from the same initial weights and batch and compares the first step's gradients tensor by
// tensor (relative L2: 1e-3 fp32, 5e-2 bf16) and the loss of every step.
//
// One optimizer step = zero grads, forward, cross-entropy, backward, global-norm clipping and AdamW,
// all on one stream with no host synchronisation (the loss is read once, after the timed steps).
// The device model is worker/model_gpu.h's (the one gantry-worker --device cuda trains):
// parameters, gradients and AdamW moments are single fp32 buffers laid out by model_init() (llm.c
// style). --bf16 is training.precision: bf16 (docs/gpu.md): every GEMM on bf16 operands with fp32
// accumulation and fp32 master weights (the parameters' bf16 copy is refreshed by the AdamW
// kernel), the GEMM inputs saved in bf16, the residual stream and gradients fp32. --attention
// fused uses the fused attention kernels (a log-sum-exp per row instead of the T x T
// probabilities; with --bf16 on tensor cores, bf16 in and out).
// --graphs replays the forward and the backward as CUDA graphs (training.cudaGraphs,
// worker/model_gpu.h: captured on the second step, one launch each after); zeroing, clipping and
// AdamW stay ordinary launches.
//
// MFU = model FLOPs per second / the device's dense bf16 peak (kernels/gpu.h gpu_peak_flops: the
// datasheet figure for the GPU's name, 989.4 TFLOP/s on an H100 SXM or H200, 756 on an H100 PCIe;
// GANTRY_PEAK_TFLOPS over it; "n/a" and null in the JSON for a GPU the table does not know),
// FLOPs counted by model_step_flops (worker/model.h): 3 x forward (GEMMs 2*N*C*OC each, attention
// 4*B*T*T*C per layer, the full T x T: that is what this implementation computes). --peak prints
// that peak and exits (hack/gpu-check.sh hands it to bench/gpu_torch.py, so that both divide by
// the same number).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/gpu.h"
extern "C" { /* C headers without C++ guards */
#include "kernels/cpu.h"
}
#include "worker/model_gpu.h" /* worker/model.h, worker/optim.h */

#include <math.h>

struct opts {
    int B, T, C, L, NH, V, K, steps, warmup, varlen, bf16, check_cpu, fused, graphs, profile;
    int dgelu;  /* --dgelu-epilogue */
    int attn_ds; /* --attention-ds */
    int attn_wg; /* --attention-wgmma */
    int attn_cudnn; /* --attention-cudnn */
    int tune;    /* --tune */
    int peak;    /* --peak */
    const char *name;
};

/* One optimizer step (zero grads, forward, loss, backward, clip, AdamW) on worker/model_gpu.h.
 * ev (optional, 4 events): recorded before the forward, the backward, the optimizer and at the
 * end, for the per-phase breakdown. */
static void step(struct model_gpu *g, const struct optim_config *oc, long t, int B,
                 cudaEvent_t *ev = NULL)
{
    cudaStream_t s = model_gpu_stream(g);
    model_gpu_zero_grad(g);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[0], s));
    model_gpu_forward(g);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[1], s));
    model_gpu_backward(g, 1.0f / B);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[2], s));
    model_gpu_step(g, oc, oc->lr, t);
    if (ev)
        CUDA_CHECK(cudaEventRecord(ev[3], s));
}

/* One more step, timed by phase. */
static void phases(struct model_gpu *g, const struct optim_config *oc, long t, int B)
{
    cudaEvent_t ev[4];
    float ms[3];
    for (int i = 0; i < 4; i++)
        CUDA_CHECK(cudaEventCreate(&ev[i]));
    step(g, oc, t, B, ev);
    CUDA_CHECK(cudaEventSynchronize(ev[3]));
    for (int i = 0; i < 3; i++)
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    printf("phases: forward %.2f ms | backward %.2f ms | clip + AdamW %.2f ms\n", (double)ms[0],
           (double)ms[1], (double)ms[2]);
    for (int i = 0; i < 4; i++)
        cudaEventDestroy(ev[i]);
}

static void usage(const char *argv0)
{
    printf("usage: %s [--preset gpt2|example] [--batch B] [--seq T] [--hidden C] [--layers L]\n"
           "          [--heads NH] [--vocab V] [--classes K] [--steps S] [--warmup W] [--varlen]\n"
           "          [--bf16] [--attention unfused|fused] [--graphs] [--dgelu-epilogue]\n"
           "          [--attention-ds] [--attention-wgmma] [--attention-cudnn] [--tune]\n"
           "          [--check-cpu] [--profile] [--peak]\n"
           "  gpt2:    B=8 T=1024 C=768 L=12 NH=12 V=50257 K=2 (GPT-2 124M-sized encoder)\n"
           "  example: B=32 T=256 C=128 L=2 NH=4 V=20000 K=2 (bench/cpu_train's default model;\n"
           "           the default preset)\n"
           "  --check-cpu: also train worker/model.c on the CPU from the same weights and batch:\n"
           "           compare the first step's gradients tensor by tensor, then every step's\n"
           "           loss (exit 1 when they differ beyond tolerance)\n"
           "  --attention: unfused (default: cuBLAS GEMMs + softmax) or fused\n"
           "           (kernels/attention.cu; on tensor cores with --bf16)\n"
           "  --graphs: forward and backward replayed as CUDA graphs (training.cudaGraphs)\n"
           "  --dgelu-epilogue: with --bf16, the GELU backward in the MLP projection's input-\n"
           "           gradient GEMM (cuBLASLt DGELU) instead of its own pass\n"
           "  --attention-ds: with --bf16 --attention fused, the attention backward stores dS^T\n"
           "           and takes dQ from it (one product a tile) instead of recomputing it\n"
           "  --attention-wgmma: with --bf16 --attention fused, the attention forward on Hopper's\n"
           "           wgmma (head size 64, the sm_90a build on an H100/H200; else mma.sync)\n"
           "  --attention-cudnn: with --bf16 --attention fused, cuDNN's fused attention\n"
           "           (libcudnn.so.9 or $GANTRY_CUDNN_LIB opened at run time; else ours)\n"
           "  --tune: with --bf16, kernels picked by timing every form whose results agree\n"
           "           with the default kernels' here: the fused attention's variants, the GELU\n"
           "           backward's pass or epilogue, and each GEMM's cuBLASLt candidates at its\n"
           "           first call (of 1 GFLOP or more; GANTRY_AUTOTUNE_GEMM_MIN_FLOP sets it)\n"
           "           (MODEL_GPU_TUNE, training.autotune; the four flags above are then\n"
           "           ignored), including those not yet run on a GPU, which training leaves out\n"
           "           (GANTRY_AUTOTUNE_UNVERIFIED=0: left out here too)\n"
           "  --profile: after the timed steps, 3 more eager steps with an event behind every op,\n"
           "           and a table of the ops' device time per step (lines \"profile: ...\")\n"
           "  --peak:  print the device's dense bf16 peak in TFLOP/s, the MFU denominator (the\n"
           "           datasheet figure for its name, or GANTRY_PEAK_TFLOPS; \"unknown\"), and exit\n",
           argv0);
}

static void preset(struct opts *o, const char *name)
{
    if (strcmp(name, "gpt2") == 0)
        *o = (struct opts){8, 1024, 768, 12, 12, 50257, 2, 20, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                           0, "gpt2"};
    else if (strcmp(name, "example") == 0)
        *o = (struct opts){32, 256, 128, 2, 4, 20000, 2, 50, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                           0, "example"};
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
        {"attention", 1, 0, 'a'}, {"check-cpu", 0, 0, 'c'}, {"graphs", 0, 0, 'g'},
        {"profile", 0, 0, 'P'},   {"dgelu-epilogue", 0, 0, 'd'}, {"help", 0, 0, 'h'},
        {"attention-ds", 0, 0, 'S'}, {"attention-wgmma", 0, 0, 'G'}, {"tune", 0, 0, 'u'},
        {"attention-cudnn", 0, 0, 'N'}, {"peak", 0, 0, 'k'},
        {0, 0, 0, 0}};
    int ch;
    preset(o, "example");
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': {
            int bf16 = o->bf16, check = o->check_cpu, varlen = o->varlen, fused = o->fused;
            int graphs = o->graphs, profile = o->profile, dgelu = o->dgelu, ds = o->attn_ds;
            int wg = o->attn_wg, tune = o->tune, cudnn = o->attn_cudnn, peak = o->peak;
            preset(o, optarg);
            o->bf16 = bf16, o->check_cpu = check, o->varlen = varlen, o->fused = fused;
            o->graphs = graphs, o->profile = profile, o->dgelu = dgelu, o->attn_ds = ds;
            o->attn_wg = wg, o->tune = tune, o->attn_cudnn = cudnn, o->peak = peak;
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
        case 'a':
            if (strcmp(optarg, "fused") && strcmp(optarg, "unfused")) {
                fprintf(stderr, "gpu_bench: --attention %s: use fused or unfused\n", optarg);
                exit(2);
            }
            o->fused = strcmp(optarg, "fused") == 0;
            break;
        case 'c': o->check_cpu = 1; break;
        case 'g': o->graphs = 1; break;
        case 'P': o->profile = 1; break;
        case 'd': o->dgelu = 1; break;
        case 'S': o->attn_ds = 1; break;
        case 'G': o->attn_wg = 1; break;
        case 'N': o->attn_cudnn = 1; break;
        case 'k': o->peak = 1; break;
        case 'u':
            o->tune = 1;
            setenv("GANTRY_AUTOTUNE_UNVERIFIED", "1", 0); /* (unless set: =0 as in training) */
            break;
        case 'h': usage(argv[0]); exit(0);
        default: usage(argv[0]); exit(2);
        }
    }
}

/* The first step's gradients, tensor by tensor: |g_gpu - g_cpu| / |g_cpu| (L2 norms) within
 * gtol, so a gradient summed into the wrong tensor or layer fails here even where the losses,
 * with bf16's tolerance, would not tell. The denominator is at least 1 % of the tensor's share
 * of the whole gradient's norm (|g| sqrt(count / n)): a tensor whose sum cancels to almost
 * nothing (the classifier bias of a balanced batch) is not judged by its rounding alone. Leaves
 * both gradient buffers dirty (the steps zero them). Returns the tensors past gtol. */
static int check_grads(struct model *m, struct model_gpu *g, const struct opts *o,
                       const int *tokens, const int *len, const int *labels)
{
    const double gtol = o->bf16 ? 5e-2 : 1e-3;
    float *gg = (float *)malloc(m->n_params * sizeof(float));
    model_zero_grad(m);
    model_forward(m, tokens, len, labels, o->B, o->T);
    model_backward(m, 1.0f / o->B);
    model_gpu_zero_grad(g);
    model_gpu_forward(g);
    model_gpu_backward(g, 1.0f / o->B);
    model_gpu_grads_get(g, gg, m->n_params);
    int bad = 0;
    double worst = 0.0, all2 = 0.0;
    for (size_t i = 0; i < m->n_params; i++)
        all2 += (double)m->grads[i] * m->grads[i];
    /* qkvw and qkvb are judged as their q, k and v rows apart: at initialisation the softmax is
     * near uniform, so dS (hence dQ and dK) is small beside dV, and a wrong dQ would hide in the
     * whole tensor's norm (a dQ 1.5x too large passed that way) */
    static const char *const part_name[3] = {"q", "k", "v"};
    const size_t C = (size_t)m->cfg.hidden, L = (size_t)m->cfg.layers;
    char name[64], worst_name[64] = "";
    int nchecks = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const struct model_tensor *mt = &m->tensors[t];
        const int qkv = strncmp(mt->name, "qkv", 3) == 0 && L * C > 0 &&
                        mt->count % (L * 3 * C) == 0;
        const size_t rowlen = qkv ? mt->count / (L * 3 * C) : mt->count;
        for (int p = 0; p < (qkv ? 3 : 1); p++) {
            double d2 = 0.0, c2 = 0.0;
            size_t n = 0;
            for (size_t i = 0; i < mt->count; i++) {
                if (qkv && (int)(i / rowlen % (3 * C) / C) != p)
                    continue;
                double c = m->grads[mt->offset + i], d = gg[mt->offset + i] - c;
                d2 += d * d, c2 += c * c, n++;
            }
            snprintf(name, sizeof(name), "%s%s%s", mt->name, qkv ? "." : "",
                     qkv ? part_name[p] : "");
            double floor = 1e-2 * sqrt(all2 * (double)n / (double)m->n_params);
            double den = sqrt(c2) > floor ? sqrt(c2) : floor;
            double rel = den > 0.0 ? sqrt(d2) / den : (d2 > 0.0 ? INFINITY : 0.0);
            nchecks++;
            if (rel > worst)
                worst = rel, snprintf(worst_name, sizeof(worst_name), "%s", name);
            if (!(rel <= gtol)) {
                printf("check grads: %-10s |gpu - cpu| / |cpu| = %.3g > %.0e  MISMATCH\n", name,
                       rel, gtol);
                bad++;
            }
        }
    }
    printf("check grads: %d tensors (qkv's q, k, v apart), worst %s %.3g (tol %.0e): %s\n",
           nchecks, worst_name, worst, gtol, bad ? "FAILED" : "OK");
    free(gg);
    return bad;
}

/* The attention kernel that ran for kind (bwd: 0 forward, 1 backward): its name, or, for a cuDNN
 * kind that ran ours in cuDNN's place, "cuDNN (fell back to mma.sync)": a row or check that
 * names cuDNN then did not time or check it. */
static const char *kind_ran(int bwd, int kind)
{
    if (bwd ? kind == ATTN_BWD_CUDNN : kind == ATTN_FWD_CUDNN)
        if (attention_cudnn_fell_back(bwd))
            return "cuDNN (fell back to mma.sync)";
    return bwd ? attention_bwd_kind_name(kind) : attention_fwd_kind_name(kind);
}

/* In bf16, the kernels in use (they may differ from the flags with --tune): " (attention forward
 * / backward, GELU pass or DGELU epilogue[, tuned])"; in fp32 "". */
static const char *kinds_label(struct model_gpu *g, const struct opts *o, char *buf, size_t n)
{
    int f, b, dgelu;
    buf[0] = '\0';
    model_gpu_kernels(g, &f, &b, &dgelu);
    if (o->bf16)
        snprintf(buf, n, " (%s%s%s%s%s%s)", o->fused ? kind_ran(0, f) : "",
                 o->fused ? " / " : "", o->fused ? kind_ran(1, b) : "",
                 o->fused ? ", " : "", dgelu ? "DGELU epilogue" : "GELU pass",
                 o->tune ? ", tuned" : "");
    return buf;
}

/* Compares CPU and GPU losses step by step from the same weights; returns mismatches. */
static int check_cpu(struct model *m, struct model_gpu *g, const struct opts *o, const int *tokens,
                     const int *len, const int *labels)
{
    struct adamw opt;
    struct optim_config oc;
    int bad = check_grads(m, g, o, tokens, len, labels);
    double tol = o->bf16 ? 3e-2 : 2e-3;

    optim_config_default(&oc);
    adamw_init(&opt, m->n_params);
    for (int i = 0; i < o->steps; i++) {
        model_zero_grad(m);
        float lc = model_forward(m, tokens, len, labels, o->B, o->T);
        model_backward(m, 1.0f / o->B);
        optim_clip_grad_norm(m->grads, m->n_params, oc.grad_clip);
        adamw_step(&opt, m, &oc, oc.lr);
        step(g, &oc, i + 1, o->B);
        float lg = model_gpu_last_loss(g);
        int ok = fabs((double)lg - lc) <= tol * (fabs((double)lc) > 1 ? fabs((double)lc) : 1);
        printf("check step %3d  cpu loss %.6f  gpu loss %.6f  %s\n", i + 1, (double)lc,
               (double)lg, ok ? "ok" : "MISMATCH");
        bad += !ok;
    }
    adamw_cleanup(&opt);
    char kl[128];
    printf("check-cpu (%s, %s attention%s%s, tol %.0e relative): %s\n",
           o->bf16 ? "bf16 GEMMs" : "fp32", o->fused ? "fused" : "unfused",
           kinds_label(g, o, kl, sizeof(kl)), o->graphs ? ", CUDA graphs" : "", tol,
           bad ? "FAILED" : "OK");
    return bad;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct model m;
    struct model_config cfg;
    struct model_gpu *g;
    struct optim_config oc;
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
    const double peak = gpu_peak_flops(1); /* 0: not known */
    if (o.peak) {
        if (peak > 0)
            printf("%g %s\n", peak / 1e12, prop.name);
        else
            printf("unknown %s\n", prop.name);
        return 0;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.kind = MODEL_TRANSFORMER, cfg.vocab = o.V, cfg.classes = o.K, cfg.max_seq_len = o.T;
    cfg.hidden = o.C, cfg.layers = o.L, cfg.heads = o.NH, cfg.ffn = 4 * o.C;
    cfg.pool = MODEL_POOL_MEAN;
    if (model_init(&m, &cfg, o.check_cpu ? o.B : 1, 1234, err, sizeof(err)) != 0) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return 2;
    }
    optim_config_default(&oc); /* lr 3e-4, wd 0.01, clip 1.0 */

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
    if (!(g = model_gpu_new(&m, o.B, (o.bf16 ? MODEL_GPU_BF16 : 0) |
                                         (o.fused ? MODEL_GPU_FUSED_ATTENTION : 0) |
                                         (o.graphs ? MODEL_GPU_GRAPHS : 0) |
                                         (o.dgelu ? MODEL_GPU_DGELU_EPILOGUE : 0) |
                                         (o.attn_ds ? MODEL_GPU_ATTENTION_DS : 0) |
                                         (o.attn_wg ? MODEL_GPU_ATTENTION_WGMMA : 0) |
                                         (o.attn_cudnn ? MODEL_GPU_ATTENTION_CUDNN : 0) |
                                         (o.tune ? MODEL_GPU_TUNE : 0),
                            err, sizeof(err)))) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return 2;
    }
    model_gpu_batch(g, tokens, len, labels, o.B, o.T);

    int rc = 0;
    if (o.check_cpu) {
        rc = check_cpu(&m, g, &o, tokens, len, labels) ? 1 : 0;
        goto out;
    }
    for (int i = 0; i < o.warmup; i++)
        step(g, &oc, i + 1, o.B);
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, model_gpu_stream(g)));
    for (int i = 0; i < o.steps; i++)
        step(g, &oc, o.warmup + i + 1, o.B);
    CUDA_CHECK(cudaEventRecord(e1, model_gpu_stream(g)));
    CUDA_CHECK(cudaEventSynchronize(e1));
    {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        double sec = ms / 1e3 / o.steps, flops = model_step_flops(&cfg, o.B, o.T);
        char kl[128], mfu[96], mfu_json[64];
        if (peak > 0) {
            snprintf(mfu, sizeof(mfu), "MFU %.1f%% (peak %g)", 100 * flops / sec / peak,
                     peak / 1e12);
            snprintf(mfu_json, sizeof(mfu_json), "\"peak_tflops\":%g,\"mfu\":%.4g",
                     peak / 1e12, flops / sec / peak);
        } else {
            snprintf(mfu, sizeof(mfu), "MFU n/a (peak unknown: set GANTRY_PEAK_TFLOPS)");
            snprintf(mfu_json, sizeof(mfu_json), "\"peak_tflops\":null,\"mfu\":null");
        }
        int kf = 0, kb = 0, kd = 0;
        model_gpu_kernels(g, &kf, &kb, &kd);
        /* the GEMMs' cuBLASLt candidates timed (--tune): shapes, candidates, how many took
         * another than the first, and one call of each with the first and with the pick */
        char gemm_json[160] = "null";
        struct matmul_tune_stats ts;
        matmul_tune_stats(&ts);
        if (ts.timed)
            snprintf(gemm_json, sizeof(gemm_json),
                     "{\"shapes\":%d,\"candidates\":%d,\"changed\":%d,\"first_ms\":%.4f,"
                     "\"pick_ms\":%.4f}", ts.timed, ts.candidates, ts.changed, ts.first_ms,
                     ts.pick_ms);
        printf("gpu_bench %s on %s: %s, %s attention%s%s, B=%d T=%d C=%d L=%d NH=%d | %.2f "
               "ms/step | %.0f tok/s (%.0f real) | %.1f TFLOP/s | %s | loss %.4f\n",
               o.name, prop.name, o.bf16 ? "bf16 GEMMs" : "fp32", o.fused ? "fused" : "unfused",
               kinds_label(g, &o, kl, sizeof(kl)), o.graphs ? ", CUDA graphs" : "", o.B, o.T,
               o.C, o.L, o.NH, sec * 1e3, N / sec, real / sec, flops / sec / 1e12, mfu,
               (double)model_gpu_last_loss(g));
        printf("{\"impl\":\"gantry\",\"preset\":\"%s\",\"gpu\":\"%s\",\"precision\":\"%s\","
               "\"attention\":\"%s\",\"graphs\":%s,\"dgelu_epilogue\":%s,\"attention_ds\":%s,"
               "\"attention_wgmma\":%s,\"attention_cudnn\":%s,\"cudnn_fell_back\":%s,"
               "\"tune\":%s,\"gemm_tune\":%s,"
               "\"attention_kernels\":\"%s / %s\","
               "\"batch\":%d,\"seq\":%d,\"hidden\":%d,\"layers\":%d,\"heads\":%d,\"steps\":%d,"
               "\"ms_per_step\":%.3f,\"tokens_per_s\":%.0f,\"real_tokens_per_s\":%.0f,"
               "\"tflops\":%.2f,%s}\n",
               o.name, prop.name, o.bf16 ? "bf16" : "fp32", o.fused ? "fused" : "unfused",
               o.graphs ? "true" : "false", kd ? "true" : "false",
               kb == ATTN_BWD_DS || kb == ATTN_BWD_WGMMA_DS ? "true" : "false",
               kf == ATTN_FWD_WGMMA || kb == ATTN_BWD_WGMMA || kb == ATTN_BWD_WGMMA_DS ? "true"
                                                                                  : "false",
               kf == ATTN_FWD_CUDNN || kb == ATTN_BWD_CUDNN ? "true" : "false",
               (kf == ATTN_FWD_CUDNN && attention_cudnn_fell_back(0)) ||
                       (kb == ATTN_BWD_CUDNN && attention_cudnn_fell_back(1))
                   ? "true"
                   : "false",
               o.tune ? "true" : "false", gemm_json,
               o.bf16 && o.fused ? kind_ran(0, kf) : "-", o.bf16 && o.fused ? kind_ran(1, kb) : "-", o.B, o.T, o.C, o.L,
               o.NH, o.steps,
               sec * 1e3, N / sec, real / sec, flops / sec / 1e12, mfu_json);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    phases(g, &oc, o.warmup + o.steps + 1, o.B);
    if (o.profile) { /* eager, an event per op: where a step's time goes */
        const int ps = 3;
        model_gpu_profile(g, 1);
        for (int i = 0; i < ps; i++)
            step(g, &oc, o.warmup + o.steps + 2 + i, o.B);
        model_gpu_profile(g, 0);
        char kl[128];
        printf("profile: %s, %s attention%s, B=%d T=%d C=%d L=%d NH=%d, %d eager steps\n",
               o.bf16 ? "bf16" : "fp32", o.fused ? "fused" : "unfused",
               kinds_label(g, &o, kl, sizeof(kl)), o.B, o.T, o.C, o.L, o.NH, ps);
        if (model_gpu_profile_report(g, stdout, ps) != 0) {
            fprintf(stderr, "gpu_bench: --profile: nothing was timed\n");
            rc = 1;
        }
    }
out:
    model_gpu_free(g);
    gpu_shutdown();
    model_cleanup(&m);
    free(tokens), free(len), free(labels);
    return rc;
}
