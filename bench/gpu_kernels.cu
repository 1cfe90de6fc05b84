// gpu_kernels: the bf16 training step's kernels that are not cuBLAS GEMMs, timed one at a time at
// the GPT-2 shape (B=8, T=1024, C=768, 12 heads, 124M parameters), each beside the memory system's
// reference in the same run: a device-to-device copy (cudaMemcpyAsync) of 256 MiB, read + write.
// The memory-bound ops print the bytes they must move (reads + writes, counted from their
// arguments), their effective GB/s and that as a share of the copy's: how far each is from the
// bandwidth it could have. The attention kernels print TFLOP/s, FLOPs counted as FlashAttention's
// papers count them (forward 4 B T^2 C, backward 2.5 times that), and the share of the device's
// dense bf16 peak (gpu_peak_flops: 989.4 TFLOP/s on an H100 SXM or H200; n/a where unknown), fused (tensor-core kernels) beside unfused (cuBLAS batched GEMMs + softmax):
// the measurement docs/gpu.md asks for before either becomes the default. One GEMM pair is timed
// too, for the same reason: the MLP projection's backward with the GELU backward as its own pass
// (the default) and in the dinp GEMM's cuBLASLt DGELU epilogue, and their ratio.
//
// Every op runs --warmup times, then --iters times between two events; ms is the mean. Inputs are
// random (a hash of the index), lengths all T. On the CUDA emulator it runs too (tiny shapes, a
// smoke test: ctest gpu_kernels_emu); the numbers there mean nothing.
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h" /* the _bf16 launchers */
#include "kernels/cuda_common.h"
#include "kernels/gpu.h"

static double peak_bf16; /* FLOP/s, gpu_peak_flops(1); 0: not known */

struct opts {
    int B, T, C, NH, iters, warmup;
    size_t params;
};

static void usage(const char *argv0)
{
    printf("usage: %s [--batch B] [--seq T] [--hidden C] [--heads NH] [--params P]\n"
           "          [--iters K] [--warmup W]\n"
           "Times the bf16 step's non-GEMM kernels one at a time (default: GPT-2 shape B=8 "
           "T=1024\nC=768 NH=12, 124M parameters, K=20, W=3) beside a device-to-device copy: "
           "GB/s and\nshare of the copy's for the memory-bound ones, TFLOP/s and share of the "
           "bf16 peak\nfor the attention (fused and unfused). --iters 1 --warmup 0 runs each op once (for a\nprofiler such as ncu). Exit 77 without a CUDA device.\n",
           argv0);
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"batch", 1, 0, 'B'}, {"seq", 1, 0, 'T'},   {"hidden", 1, 0, 'C'}, {"heads", 1, 0, 'H'},
        {"params", 1, 0, 'P'}, {"iters", 1, 0, 'K'}, {"warmup", 1, 0, 'W'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (struct opts){8, 1024, 768, 12, 20, 3, 124439808};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end = NULL;
        long long v = c == 'h' || c == '?' ? 0 : strtoll(optarg, &end, 10);
        if (c == 'h') {
            usage(argv[0]);
            exit(0);
        }
        if (c == '?')
            return 64; /* getopt said which */
        if (!end || *end || v < (c == 'W' ? 0 : 1) || v > (1LL << 40)) {
            fprintf(stderr, "gpu_kernels: %s: every value is a positive integer, --warmup may "
                            "be 0 (--help)\n", optarg);
            return 64;
        }
        switch (c) {
        case 'B': o->B = (int)v; break;
        case 'T': o->T = (int)v; break;
        case 'C': o->C = (int)v; break;
        case 'H': o->NH = (int)v; break;
        case 'P': o->params = (size_t)v; break;
        case 'K': o->iters = (int)v; break;
        case 'W': o->warmup = (int)v; break;
        }
    }
    if (optind < argc || o->C % o->NH || o->C / o->NH > 128) {
        fprintf(stderr, "gpu_kernels: --hidden must be a multiple of --heads with a head size of "
                        "at most 128, and no other arguments (--help)\n");
        return 64;
    }
    return 0;
}

/* x[i] = a uniform value in [lo, hi) from a hash of (i, seed); bf16 rounded when out16 */
static __global__ void fill_kernel(float *x, uint16_t *x16, size_t n, uint32_t seed, float lo,
                                   float hi)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    float v = lo + (hi - lo) * (float)(h >> 8) / 16777216.0f;
    if (x)
        x[i] = v;
    if (x16)
        x16[i] = bf16_from_f32(v);
}

static void fill(float *x, uint16_t *x16, size_t n, uint32_t seed, float lo, float hi)
{
    fill_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x, x16, n, seed, lo, hi);
    CUDA_CHECK(cudaGetLastError());
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

struct timer {
    cudaEvent_t a, b;
    const struct opts *o;
    int ops;
};

/* ms per call of run(ctx), the mean over o->iters after o->warmup */
template <typename F> static double time_ms(struct timer *t, F run)
{
    for (int i = 0; i < t->o->warmup; i++)
        run();
    CUDA_CHECK(cudaEventRecord(t->a, 0));
    for (int i = 0; i < t->o->iters; i++)
        run();
    CUDA_CHECK(cudaEventRecord(t->b, 0));
    CUDA_CHECK(cudaEventSynchronize(t->b));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t->a, t->b));
    t->ops++;
    return ms / t->o->iters;
}

static void mem_line(const char *op, const char *shape, double bytes, double ms, double copy_gbs)
{
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("kernel: %-28s %-22s %9.4f ms %8.1f MB %8.1f GB/s %6.1f%% of copy\n", op, shape, ms,
           bytes / 1e6, gbs, copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
}

static void flop_line(const char *op, const char *shape, double flops, double ms)
{
    double tf = flops / (ms * 1e-3) / 1e12;
    if (peak_bf16 > 0)
        printf("kernel: %-28s %-22s %9.4f ms %8.1f TFLOP/s %6.1f%% of bf16 peak\n", op, shape,
               ms, tf, 100.0 * tf * 1e12 / peak_bf16);
    else
        printf("kernel: %-28s %-22s %9.4f ms %8.1f TFLOP/s (bf16 peak unknown)\n", op, shape, ms,
               tf);
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "gpu_kernels: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    peak_bf16 = gpu_peak_flops(1);
    const int B = o.B, T = o.T, C = o.C, NH = o.NH, N = B * T;
    const size_t nc = (size_t)N * C, P = o.params;
    struct timer tm = {NULL, NULL, &o, 0};
    CUDA_CHECK(cudaEventCreate(&tm.a));
    CUDA_CHECK(cudaEventCreate(&tm.b));
    printf("gpu_kernels on %s (bf16 peak %.1f TFLOP/s%s): B=%d T=%d C=%d NH=%d params=%zu, %d "
           "iterations after %d\n",
           prop.name, peak_bf16 / 1e12, peak_bf16 > 0 ? "" : ": unknown", B, T, C, NH, P,
           o.iters, o.warmup);
    char shape[64];

    /* the reference: a device-to-device copy, 256 MiB (or the largest tensor here, if smaller) */
    size_t cbytes = (size_t)256 << 20;
    if (cbytes > 4 * P)
        cbytes = 4 * P;
    void *c0 = dev(cbytes), *c1 = dev(cbytes);
    double ms = time_ms(&tm, [&] {
        CUDA_CHECK(cudaMemcpyAsync(c1, c0, cbytes, cudaMemcpyDeviceToDevice, 0));
    });
    const double copy_gbs = 2.0 * cbytes / (ms * 1e-3) / 1e9;
    snprintf(shape, sizeof(shape), "%zu MiB", cbytes >> 20);
    mem_line("copy (device to device)", shape, 2.0 * cbytes, ms, copy_gbs);
    CUDA_CHECK(cudaFree(c0));
    CUDA_CHECK(cudaFree(c1));

    /* LayerNorm (N, C): fp32 residual in; bf16 out (the bf16 step) and fp32 out */
    float *x = (float *)dev(nc * 4), *w = (float *)dev(C * 4), *bb = (float *)dev(C * 4);
    float *mean = (float *)dev(N * 4), *rstd = (float *)dev(N * 4), *y = (float *)dev(nc * 4);
    float *dy = (float *)dev(nc * 4), *dx = (float *)dev(nc * 4);
    float *dw = (float *)dev(C * 4), *db = (float *)dev(C * 4);
    uint16_t *y16 = (uint16_t *)dev(nc * 2), *dx16 = (uint16_t *)dev(nc * 2);
    fill(x, NULL, nc, 1, -2.0f, 2.0f);
    fill(w, NULL, C, 2, 0.5f, 1.5f);
    fill(bb, NULL, C, 3, -0.5f, 0.5f);
    fill(dy, NULL, nc, 4, -1.0f, 1.0f);
    fill(dx, NULL, nc, 5, -1.0f, 1.0f);
    snprintf(shape, sizeof(shape), "N=%d C=%d", N, C);
    ms = time_ms(&tm, [&] { layernorm_forward_bf16(y16, mean, rstd, x, w, bb, N, C, 0); });
    mem_line("layernorm_forward_bf16", shape, nc * 4.0 + nc * 2.0 + N * 8.0 + C * 8.0, ms,
             copy_gbs);
    ms = time_ms(&tm, [&] { layernorm_forward(y, mean, rstd, x, w, bb, N, C, 0); });
    mem_line("layernorm_forward", shape, nc * 8.0 + N * 8.0 + C * 8.0, ms, copy_gbs);
    /* reads dout, inp, dinp; writes dinp and its bf16 copy (the partials are C-sized) */
    ms = time_ms(&tm, [&] {
        layernorm_backward_bf16(dx, dx16, dw, db, dy, x, w, mean, rstd, N, C, 0);
    });
    mem_line("layernorm_backward_bf16", shape, nc * 18.0 + N * 8.0, ms, copy_gbs);
    /* what the bf16 step runs since 2026-12-05: dout in bf16 (as the GEMM backward writes it) */
    uint16_t *dy16 = (uint16_t *)dev(nc * 2);
    cast_f32_to_bf16(dy16, dy, nc, 0);
    ms = time_ms(&tm, [&] {
        layernorm_backward_bf16_d16(dx, dx16, dw, db, NULL, dy16, x, w, mean, rstd, N, C, 0);
    });
    mem_line("layernorm_backward_bf16_d16", shape, nc * 16.0 + N * 8.0, ms, copy_gbs);
    /* the bias gradient of a GEMM with an fp32 dout: its column sums */
    ms = time_ms(&tm, [&] { bias_backward(db, dy, N, C, 0); });
    mem_line("bias_backward (column sums)", shape, nc * 4.0, ms, copy_gbs);

    /* GELU backward (N, 4C), bf16 in and out, the MLP bias gradient summed in the same pass */
    const size_t n4 = nc * 4;
    uint16_t *pre16 = (uint16_t *)dev(n4 * 2), *dh16 = (uint16_t *)dev(n4 * 2);
    uint16_t *dpre16 = (uint16_t *)dev(n4 * 2);
    float *db4 = (float *)dev(4 * C * 4);
    fill(NULL, pre16, n4, 6, -3.0f, 3.0f);
    fill(NULL, dh16, n4, 7, -1.0f, 1.0f);
    snprintf(shape, sizeof(shape), "N=%d OC=%d", N, 4 * C);
    ms = time_ms(&tm, [&] { gelu_backward_bf16(dpre16, db4, pre16, dh16, N, 4 * C, 0); });
    mem_line("gelu_backward_bf16 (+bias)", shape, n4 * 6.0, ms, copy_gbs);
    /* the MLP projection's backward with the GELU's, (N, 4C) -> (N, C): its two GEMMs (dinp,
     * dweight) and the bias gradients, the GELU as the pass above or in the dinp GEMM's cuBLASLt
     * DGELU epilogue (MODEL_GPU_DGELU_EPILOGUE, off by default until this line says it pays) */
    {
        uint16_t *w16 = (uint16_t *)dev(4 * (size_t)C * C * 2), *dout16 = (uint16_t *)dev(nc * 2);
        uint16_t *dh = (uint16_t *)dev(n4 * 2);
        float *dw4 = (float *)dev(4 * (size_t)C * C * 4), *dbc = (float *)dev(C * 4);
        fill(NULL, w16, 4 * (size_t)C * C, 12, -0.05f, 0.05f);
        fill(NULL, dout16, nc, 13, -1.0f, 1.0f);
        const double gemm_flops = 2.0 * 2.0 * N * (double)C * 4 * C;
        snprintf(shape, sizeof(shape), "N=%d F=%d C=%d", N, 4 * C, C);
        ms = time_ms(&tm, [&] {
            matmul_backward_mixed_set_bf16(dh, dw4, dbc, dy, dout16, dh16, w16, N, 4 * C, C, 0);
            gelu_backward_bf16(dpre16, db4, pre16, dh, N, 4 * C, 0);
        });
        flop_line("mlp proj bwd + GELU pass", shape, gemm_flops, ms);
        const double pass_ms = ms;
        if (matmul_backward_mixed_dgelu_bf16(dpre16, db4, dw4, dbc, dy, dout16, dh16, pre16, w16,
                                             N, 4 * C, C, 0) == 0) {
            ms = time_ms(&tm, [&] {
                matmul_backward_mixed_dgelu_bf16(dpre16, db4, dw4, dbc, dy, dout16, dh16, pre16,
                                                 w16, N, 4 * C, C, 0);
            });
            flop_line("mlp proj bwd + GELU epilogue", shape, gemm_flops, ms);
            printf("kernel: GELU epilogue / pass: %.3f (below 1: the epilogue pays)\n",
                   ms / pass_ms);
        } else {
            printf("kernel: mlp proj bwd + GELU epilogue: cuBLASLt has no DGELU algorithm\n");
        }
        void *bufs[] = {w16, dout16, dh, dw4, dbc};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            CUDA_CHECK(cudaFree(bufs[i]));
    }
    CUDA_CHECK(cudaFree(pre16));
    CUDA_CHECK(cudaFree(dh16));
    CUDA_CHECK(cudaFree(dpre16));
    CUDA_CHECK(cudaFree(db4));

    /* the optimizer over P parameters: norm (reads g), AdamW (reads p g m v, writes p m v p16) */
    float *p = (float *)dev(P * 4), *g = (float *)dev(P * 4), *am = (float *)dev(P * 4);
    float *av = (float *)dev(P * 4), *norm = (float *)dev(4), *coef = (float *)dev(4);
    uint16_t *p16 = (uint16_t *)dev(P * 2);
    fill(p, NULL, P, 8, -0.1f, 0.1f);
    fill(g, NULL, P, 9, -0.01f, 0.01f);
    CUDA_CHECK(cudaMemset(am, 0, P * 4));
    CUDA_CHECK(cudaMemset(av, 0, P * 4));
    snprintf(shape, sizeof(shape), "P=%zu", P);
    ms = time_ms(&tm, [&] { grad_norm(norm, g, P, 0); });
    mem_line("grad_norm", shape, P * 4.0, ms, copy_gbs);
    grad_clip_coef(coef, norm, 1.0f, 1.0f, 0);
    struct adamw_segment seg[2] = {{0, P / 2, 1}, {P / 2, P - P / 2, 0}};
    long step = 0;
    ms = time_ms(&tm, [&] {
        adamw_update(p, p16, g, am, av, seg, 2, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step, coef,
                     0);
    });
    mem_line("adamw_update (+bf16 copy)", shape, P * 30.0, ms, copy_gbs);
    CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(g));
    CUDA_CHECK(cudaFree(am));
    CUDA_CHECK(cudaFree(av));
    CUDA_CHECK(cudaFree(p16));

    /* attention (B, T, C, NH), all lengths T: fused on tensor cores (bf16 qkv, O, dO, dqkv) and
     * unfused (fp32 qkv through bf16 cuBLAS GEMMs, the T x T probabilities kept) */
    const size_t n3 = nc * 3;
    int *len = (int *)dev(B * sizeof(int));
    int *hlen = (int *)malloc(B * sizeof(int));
    for (int i = 0; i < B; i++)
        hlen[i] = T;
    CUDA_CHECK(cudaMemcpy(len, hlen, B * sizeof(int), cudaMemcpyHostToDevice));
    free(hlen);
    float *qkv = (float *)dev(n3 * 4), *dqkv = (float *)dev(n3 * 4), *lse = (float *)dev(
        (size_t)B * NH * T * 4);
    float *dbq = (float *)dev(3 * C * 4);
    uint16_t *qkv16 = (uint16_t *)dev(n3 * 2), *dqkv16 = (uint16_t *)dev(n3 * 2);
    uint16_t *o16 = (uint16_t *)dev(nc * 2), *do16 = (uint16_t *)dev(nc * 2);
    fill(qkv, qkv16, n3, 10, -1.0f, 1.0f);
    fill(NULL, do16, nc, 11, -1.0f, 1.0f);
    const double fwd = 4.0 * B * (double)T * T * C;
    snprintf(shape, sizeof(shape), "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    ms = time_ms(&tm, [&] {
        attention_forward_fused_bf16(o16, lse, qkv16, len, B, T, C, NH, 0);
    });
    flop_line("attention fused fwd", shape, fwd, ms);
    const double fwd_ms = ms;
    ms = time_ms(&tm, [&] {
        attention_forward_fused_bf16_qhoist(o16, lse, qkv16, len, B, T, C, NH, 0);
    });
    flop_line("attn fused fwd, Q in regs", shape, fwd, ms);
    printf("kernel: attention fwd Q in registers / default: %.3f (below 1: hoisting Q pays)\n",
           ms / fwd_ms);
    if (C / NH > 32 && C / NH <= 64 && attention_fused_wgmma_available()) {
        ms = time_ms(&tm, [&] {
            attention_forward_fused_bf16_wgmma(o16, lse, qkv16, len, B, T, C, NH, 0);
        });
        flop_line("attn fused fwd, wgmma", shape, fwd, ms);
        printf("kernel: attention fwd wgmma / default: %.3f (below 1: wgmma pays)\n",
               ms / fwd_ms);
    } else {
        printf("kernel: attn fused fwd, wgmma: not here (head size %d; wgmma in this device "
               "code: %s)\n", C / NH, attention_fused_wgmma_available() ? "yes" : "no");
    }
    /* cuDNN's (attention_cudnn.cpp, where cuDNN can be opened), with the padding fix-ups the
     * training step runs after it; its backward below */
    char why[256];
    const int cudnn = attention_cudnn_load(why, sizeof(why)) &&
                      !attention_forward_cudnn_bf16(o16, lse, qkv16, len, B, T, C, NH, 0, why,
                                                    sizeof(why));
    if (cudnn) {
        ms = time_ms(&tm, [&] {
            attention_forward_fused_bf16_kind(ATTN_FWD_CUDNN, o16, lse, qkv16, len, B, T, C, NH,
                                              0);
        });
        flop_line("attn fused fwd, cuDNN", shape, fwd, ms);
        printf("kernel: attention fwd cuDNN / default: %.3f (below 1: cuDNN pays)\n",
               ms / fwd_ms);
    } else {
        printf("kernel: attn fused fwd, cuDNN: not here (%s)\n", why);
    }
    ms = time_ms(&tm, [&] {
        attention_backward_fused_bf16(dqkv16, dbq, do16, qkv16, o16, lse, len, B, T, C, NH, 0);
    });
    flop_line("attention fused bwd", shape, 2.5 * fwd, ms);
    const double recompute_ms = ms;
    if (cudnn && !attention_backward_cudnn_bf16(dqkv16, do16, qkv16, o16, lse, len, B, T, C, NH,
                                                0, why, sizeof(why))) {
        ms = time_ms(&tm, [&] {
            attention_backward_fused_bf16_kind(ATTN_BWD_CUDNN, dqkv16, dbq, do16, qkv16, o16, lse,
                                               len, B, T, C, NH, 0);
        });
        flop_line("attn fused bwd, cuDNN", shape, 2.5 * fwd, ms);
        printf("kernel: attention bwd cuDNN / default: %.3f (below 1: cuDNN pays)\n",
               ms / recompute_ms);
    } else if (cudnn) {
        printf("kernel: attn fused bwd, cuDNN: not here (%s)\n", why);
    }
    ms = time_ms(&tm, [&] {
        attention_backward_fused_bf16_ds(dqkv16, dbq, do16, qkv16, o16, lse, len, B, T, C, NH, 0);
    });
    flop_line("attn fused bwd, stored dS", shape, 2.5 * fwd, ms);
    printf("kernel: attention bwd stored dS / recompute: %.3f (below 1: storing dS^T pays; "
           "%.0f MB of it)\n",
           ms / recompute_ms, attention_backward_ds_bytes(B, T, NH) / 1e6);
    if (C / NH > 32 && C / NH <= 64 && attention_fused_wgmma_available()) {
        /* both backward modes on wgmma, each against its mma.sync form above */
        const double base_ms[2] = {recompute_ms, ms};
        for (int sds = 0; sds < 2; sds++) {
            ms = time_ms(&tm, [&] {
                attention_backward_fused_bf16_wgmma(dqkv16, dbq, do16, qkv16, o16, lse, len, B, T,
                                                    C, NH, sds, 0);
            });
            flop_line(sds ? "attn fused bwd, wgmma, dS" : "attn fused bwd, wgmma", shape,
                      2.5 * fwd, ms);
            printf("kernel: attention bwd wgmma%s / %s: %.3f (below 1: wgmma pays)\n",
                   sds ? " stored dS" : "", sds ? "stored dS" : "default", ms / base_ms[sds]);
        }
    }
    float *att = (float *)dev((size_t)B * NH * T * T * 4);
    ms = time_ms(&tm, [&] { attention_forward_mixed(y, att, qkv, len, B, T, C, NH, 0); });
    flop_line("attention unfused fwd", shape, fwd, ms);
    CUDA_CHECK(cudaMemset(dqkv, 0, n3 * 4));
    ms = time_ms(&tm, [&] {
        attention_backward_mixed(dqkv, dy, qkv, att, len, B, T, C, NH, 0);
    });
    flop_line("attention unfused bwd", shape, 2.5 * fwd, ms);

    void *all[] = {x, w, bb, mean, rstd, y, dy, dx, dw, db, y16, dx16, dy16, norm, coef, len,
                   qkv, dqkv, lse, dbq, qkv16, dqkv16, o16, do16, att};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        CUDA_CHECK(cudaFree(all[i]));
    CUDA_CHECK(cudaEventDestroy(tm.a));
    CUDA_CHECK(cudaEventDestroy(tm.b));
    printf("gpu_kernels: %d ops timed\n", tm.ops);
    return 0;
}
