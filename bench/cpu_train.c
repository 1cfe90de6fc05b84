/*
 * cpu_train - training throughput of gantry's CPU path on one fixed batch (random tokens).
 *
 *   cpu_train [--batch 32] [--seq 256] [--hidden 128] [--layers 2] [--heads 4] [--vocab 20000]
 *             [--classes 2] [--steps 20] [--warmup 3] [--threads 0] [--full]
 *
 * Each step is what gantry-worker does per optimizer step: forward, backward, clip, AdamW.
 * Sequence lengths: every sequence full (T tokens) with --full (the default, the pure compute
 * comparison), else uniform in [T/4, T]. Prints one JSON line:
 *   {"impl":"gantry","samples_per_s":..,"ms_per_step":..,...}
 * bench/cpu_train.sh runs it against PyTorch (bench/cpu_train_torch.py) on the same model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "worker/model.h"
#include "worker/optim.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int B = 32, T = 256, C = 128, L = 2, NH = 4, V = 20000, K = 2, steps = 20, warm = 3;
    int threads = 0, full = 1;
    char err[256];

    cpu_runtime_setup(argv); /* as gantry-worker does (kernels/cpu.h) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--batch")     ? &B
                   : !strcmp(a, "--seq")     ? &T
                   : !strcmp(a, "--hidden")  ? &C
                   : !strcmp(a, "--layers")  ? &L
                   : !strcmp(a, "--heads")   ? &NH
                   : !strcmp(a, "--vocab")   ? &V
                   : !strcmp(a, "--classes") ? &K
                   : !strcmp(a, "--steps")   ? &steps
                   : !strcmp(a, "--warmup")  ? &warm
                   : !strcmp(a, "--threads") ? &threads
                                             : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s [--batch N] [--seq N] [--hidden N] [--layers N] [--heads N] "
                   "[--vocab N] [--classes N] [--steps N] [--warmup N] [--threads N] "
                   "[--full|--varlen]\n"
                   "Times gantry-worker's CPU training step (forward, backward, clip, AdamW) on "
                   "one batch of\nrandom tokens and prints one JSON line (samples_per_s, "
                   "ms_per_step). Defaults: batch 32,\nseq 256, hidden 128, 2 layers, 4 heads, "
                   "vocab 20000, 2 classes, 20 steps after 3 warmup,\nevery sequence full "
                   "(--varlen: lengths uniform in [seq/4, seq]); threads 0 = all cores.\n"
                   "bench/cpu_train.sh runs it beside PyTorch on the same model.\n", argv[0]);
            return 0;
        }
        if (!strcmp(a, "--full") || !strcmp(a, "--varlen")) {
            full = !strcmp(a, "--full");
        } else if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--batch N] [--seq N] [--hidden N] [--layers N] "
                            "[--heads N] [--vocab N] [--classes N] [--steps N] [--warmup N] "
                            "[--threads N] [--full|--varlen]\n", argv[0]);
            return 64;
        }
    }
    cpu_set_threads(threads);
    struct model_config mc = {.kind = MODEL_TRANSFORMER, .vocab = V, .classes = K,
                              .max_seq_len = T, .hidden = C, .layers = L, .heads = NH,
                              .ffn = 4 * C, .pool = MODEL_POOL_MEAN};
    struct model m;
    if (model_init(&m, &mc, B, 42, err, sizeof(err))) {
        fprintf(stderr, "cpu_train: %s\n", err);
        return 78;
    }
    int *tok = malloc(sizeof(int) * (size_t)B * T), *len = malloc(sizeof(int) * B);
    int *lab = malloc(sizeof(int) * B);
    uint64_t s = 1;
    long ntok = 0;
    for (int b = 0; b < B; b++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        len[b] = full ? T : T / 4 + (int)((s >> 33) % (uint64_t)(T - T / 4 + 1));
        lab[b] = b % K;
        ntok += len[b];
        for (int t = 0; t < T; t++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            tok[b * T + t] = t < len[b] ? 5 + (int)((s >> 33) % (uint64_t)(V - 5)) : 0;
        }
    }
    struct optim_config oc;
    optim_config_default(&oc);
    oc.total_steps = steps + warm;
    struct adamw opt;
    adamw_init(&opt, m.n_params);
    double t0 = 0, loss = 0;
    for (int i = 0; i < warm + steps; i++) {
        if (i == warm)
            t0 = now_s();
        model_zero_grad(&m);
        loss = model_forward(&m, tok, len, lab, B, T);
        model_backward(&m, 1.0f / B);
        adamw_clip_step(&opt, &m, &oc, optim_lr(&oc, i));
    }
    double dt = now_s() - t0;
    printf("{\"impl\":\"gantry\",\"batch\":%d,\"seq\":%d,\"hidden\":%d,\"layers\":%d,\"heads\":%d,"
           "\"params\":%zu,\"threads\":%d,\"blas\":\"%s\",\"steps\":%d,\"samples_per_s\":%.2f,"
           "\"tokens_per_s\":%.0f,\"ms_per_step\":%.2f,\"final_loss\":%.4f}\n",
           B, T, C, L, NH, m.n_params, cpu_threads(), cpu_blas_core(), steps, B * steps / dt, ntok * steps / dt,
           1e3 * dt / steps, loss);
    adamw_cleanup(&opt);
    model_cleanup(&m);
    free(tok), free(len), free(lab);
    return 0;
}
