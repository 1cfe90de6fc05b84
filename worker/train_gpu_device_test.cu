/*
 * train_gpu_device_test.cu - the GPU loop's device pieces that the CPU stand-in cannot check
 * (label gpu; exits 77 without a device):
 *   - kernels/bf16.h's conversion on the device gives the same bits as on the host and as the
 *     hardware's cvt.rn.bf16.f32 (cast_f32_to_bf16), NaN as NaN;
 *   - the mixed-precision kernels against the CPU specification: layernorm_forward_bf16 and
 *     gelu_forward_bf16 (one bf16 rounding of the fp32 result), matmul_forward_mixed and
 *     matmul_backward_mixed (on bf16-rounded operands the products are exact, so only the fp32
 *     summation order differs; the bias gradient from the fp32 dout);
 *   - the all-reduce overlapped with backward through a real NCCL communicator (world size 1,
 *     the only one a single GPU allows): train_gpu_run_opts with buckets ends bit-identical to
 *     the run that reduces after backward, fp32 and bf16. Two ranks: train_gpu_nccl_test.sh.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "kernels/bf16.h"
#include "kernels/gpu_testutil.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "worker/coll_nccl.h"
#include "worker/store.h"
extern "C" { /* the worker's headers have no C++ guards of their own */
#include "worker/model_gpu.h"
#include "worker/train_gpu.h"
}

/* ---- conversion ---- */

static __global__ void helper_kernel(uint16_t *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = bf16_from_f32(inp[i]);
}

static void test_conversion(void)
{
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                                       0x3f808001u, 0x7f7fffffu, 0x7f7f7fffu, 0x7f800000u,
                                       0xff800000u, 0x00018000u, 0x80008000u, 0x00000001u,
                                       0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fffffffu};
    const size_t ns = sizeof(special) / sizeof(special[0]), n = ns + (1u << 20);
    uint32_t *bits = (uint32_t *)malloc(n * sizeof(uint32_t));
    uint16_t *dev = (uint16_t *)malloc(n * 2), *hw = (uint16_t *)malloc(n * 2);
    uint64_t s = 7;
    memcpy(bits, special, sizeof(special));
    for (size_t i = ns; i < n; i++) { /* random patterns: every exponent, ties included */
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        bits[i] = (uint32_t)(s >> 32);
        if (i % 4 == 0)
            bits[i] = (bits[i] & 0xffff0000u) | 0x8000u;
    }
    float *d_in = (float *)gt_up(bits, n, 4);
    uint16_t *d_a, *d_b;
    CUDA_CHECK(cudaMalloc(&d_a, n * 2));
    CUDA_CHECK(cudaMalloc(&d_b, n * 2));
    helper_kernel<<<(unsigned)((n + 255) / 256), 256>>>(d_a, d_in, n);
    CUDA_CHECK(cudaGetLastError());
    cast_f32_to_bf16(d_b, d_in, n, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(dev, d_a, n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hw, d_b, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float f = bf16_asfloat(bits[i]);
        uint16_t host = bf16_from_f32(f);
        int ok = isnan(f) ? isnan(bf16_to_f32(dev[i])) && isnan(bf16_to_f32(hw[i])) &&
                                dev[i] == host
                          : dev[i] == host && hw[i] == host;
        if (!ok && bad++ < 10)
            printf("  bf16 of 0x%08x: host 0x%04x device helper 0x%04x cvt.rn 0x%04x  MISMATCH\n",
                   (unsigned)bits[i], host, dev[i], hw[i]);
    }
    printf("%-24s n=%-9zu %s\n", "bf16 host = device = hw", n, bad ? "FAILED" : "OK");
    gt_failed += bad != 0;
    cudaFree(d_in), cudaFree(d_a), cudaFree(d_b);
    free(bits), free(dev), free(hw);
}

/* ---- kernels ---- */

/* bf16 device buffer -> fp32 device buffer (for gt_compare). */
static float *widen(const uint16_t *d16, size_t n)
{
    float *d;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float) + 1));
    cast_bf16_to_f32(d, d16, n, 0);
    return d;
}

static uint16_t *narrow_up(const float *h, size_t n) /* host fp32 -> device bf16 (host rounding) */
{
    uint16_t *t = (uint16_t *)malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        t[i] = bf16_from_f32(h[i]);
    uint16_t *d = (uint16_t *)gt_up(t, n, 2);
    free(t);
    return d;
}

static void round_host(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
}

static void test_layernorm_gelu(int N, int C, uint64_t seed)
{
    uint64_t s = seed;
    size_t nc = (size_t)N * C;
    float *inp = gt_randv(nc, &s, -2, 3), *w = gt_randv(C, &s, 0.5f, 1.5f);
    float *b = gt_randv(C, &s, -0.5f, 0.5f), *out = gt_randv(nc, &s, 0, 1);
    float *mean = gt_randv(N, &s, 0, 1), *rstd = gt_randv(N, &s, 0, 1);
    float *d_inp = GT_UPF(inp, nc), *d_w = GT_UPF(w, C), *d_b = GT_UPF(b, C);
    float *d_mean = GT_UPF(mean, N), *d_rstd = GT_UPF(rstd, N);
    uint16_t *d_o16;
    CUDA_CHECK(cudaMalloc(&d_o16, nc * 2));

    printf("layernorm_forward_bf16, gelu_forward_bf16 N=%d C=%d\n", N, C);
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
    layernorm_forward_bf16(d_o16, d_mean, d_rstd, d_inp, d_w, d_b, N, C, 0);
    float *d_o = widen(d_o16, nc);
    /* one rounding to bf16: half an ulp, 2^-9 relative, on top of the fp32 result */
    gt_compare("layernorm_bf16 out", d_o, out, nc, 1e-5, 2.0 / 512);
    gt_compare("layernorm_bf16 mean", d_mean, mean, N, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("layernorm_bf16 rstd", d_rstd, rstd, N, GT_F32_ATOL, GT_F32_RTOL);
    /* GELU of a bf16 input (the bf16 model's pre-activation): the CPU on the rounded values */
    uint16_t *h16 = (uint16_t *)malloc(nc * 2 + 2), *d_in16;
    for (size_t i = 0; i < nc; i++) {
        h16[i] = bf16_from_f32(inp[i]);
        inp[i] = bf16_to_f32(h16[i]);
    }
    CUDA_CHECK(cudaMalloc(&d_in16, nc * 2));
    CUDA_CHECK(cudaMemcpy(d_in16, h16, nc * 2, cudaMemcpyHostToDevice));
    gelu_forward_cpu(out, inp, nc);
    gelu_forward_bf16(d_o16, d_in16, nc, 0);
    cudaFree(d_o);
    d_o = widen(d_o16, nc);
    gt_compare("gelu_bf16", d_o, out, nc, 1e-6, 2.0 / 512);
    cudaFree(d_in16);
    free(h16);
    float *bufs[] = {d_inp, d_w, d_b, d_mean, d_rstd, d_o, (float *)d_o16};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        cudaFree(bufs[i]);
    free(inp), free(w), free(b), free(out), free(mean), free(rstd);
}

static void test_matmul_mixed(int N, int C, int OC, uint64_t seed)
{
    uint64_t s = seed;
    size_t nc = (size_t)N * C, no = (size_t)N * OC, wc = (size_t)OC * C;
    float *inp = gt_randv(nc, &s, -1, 1), *w = gt_randv(wc, &s, -0.5f, 0.5f);
    float *b = gt_randv(OC, &s, -0.5f, 0.5f), *out = gt_randv(no, &s, 0, 1);
    float *dout = gt_randv(no, &s, -1, 1), *dinp = gt_randv(nc, &s, -1, 1);
    float *dw = gt_randv(wc, &s, -1, 1), *db = gt_randv(OC, &s, -1, 1);
    float *dout_r = gt_copyv(dout, no);
    round_host(inp, nc), round_host(w, wc), round_host(dout_r, no); /* the operands' values */
    uint16_t *d_inp = narrow_up(inp, nc), *d_w = narrow_up(w, wc), *d_dout16 = narrow_up(dout, no);
    float *d_b = GT_UPF(b, OC), *d_out = GT_UPF(out, no), *d_dout = GT_UPF(dout, no);
    float *d_dinp = GT_UPF(dinp, nc), *d_dw = GT_UPF(dw, wc), *d_db = GT_UPF(db, OC);
    /* sums of C (or N) exact products in fp32, in another order (tensor cores) */
    const double atol = 1e-3, rtol = 2e-3;

    printf("matmul_mixed N=%d C=%d OC=%d\n", N, C, OC);
    matmul_forward_cpu(out, inp, w, b, N, C, OC);
    matmul_forward_mixed(d_out, d_inp, d_w, d_b, N, C, OC, 0);
    gt_compare("matmul_forward_mixed", d_out, out, no, atol, rtol);
    for (int o = 0; o < OC; o++) { /* dbias: column sums of the fp32 dout, in double */
        double acc = 0.0;
        for (int r = 0; r < N; r++)
            acc += dout[(size_t)r * OC + o];
        db[o] = (float)(db[o] + acc);
    }
    float *db_ref = gt_copyv(db, OC);
    matmul_backward_cpu(dinp, dw, NULL, dout_r, inp, w, N, C, OC);
    matmul_backward_mixed(d_dinp, d_dw, d_db, d_dout, d_dout16, d_inp, d_w, N, C, OC, 0);
    gt_compare("matmul_backward_mixed dinp", d_dinp, dinp, nc, atol, rtol);
    gt_compare("matmul_backward_mixed dw", d_dw, dw, wc, atol * 10, rtol); /* sums over N */
    gt_compare("matmul_backward_mixed db", d_db, db_ref, OC, 1e-3, GT_F32_RTOL);
    void *bufs[] = {d_inp, d_w, d_dout16, d_b, d_out, d_dout, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        cudaFree(bufs[i]);
    free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(dw), free(db);
    free(dout_r), free(db_ref);
}

/* ---- overlapped all-reduce through NCCL, one rank ---- */

enum { NEX = 64, LEN = 24, VOC = 64 };
static int32_t ids[NEX * LEN], lens[NEX], labels[NEX];

static struct train_data toy(void)
{
    uint64_t s = 99;
    for (int i = 0; i < NEX; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        lens[i] = 3 + (int)((s >> 33) % (LEN - 2));
        labels[i] = i % 2;
        for (int t = 0; t < LEN; t++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[i * LEN + t] = t < lens[i] ? 4 + (int)((s >> 33) % (VOC - 4)) : 0;
        }
        if (labels[i])
            ids[i * LEN + (int)((s >> 60) % (uint64_t)lens[i])] = 3;
    }
    struct train_data d = {ids, lens, labels, NEX, LEN};
    return d;
}

struct nccl_hook {
    struct coll *c;
    int calls;
};

static int nccl_reduce(float *buf, size_t n, void *ctx)
{
    struct nccl_hook *h = (struct nccl_hook *)ctx;
    h->calls++;
    return coll_allreduce(h->c, buf, n, COLL_SUM);
}

/* 8 steps (batch 4, 2 micro-batches) with NCCL sums; final parameters into params. */
static void run_nccl(struct coll *c, const struct train_gpu_opts *go, float *params, int *calls)
{
    static const struct model_config mc = {MODEL_TRANSFORMER, VOC, 2, LEN, 32, 2, 4, 128,
                                           MODEL_POOL_MEAN, 0};
    struct train_data d = toy();
    struct model m;
    struct train_result r;
    struct train_opts o;
    struct nccl_hook h = {c, 0};
    char err[256];

    memset(&o, 0, sizeof(o));
    o.epochs = 1, o.batch = 4, o.accum = 2;
    optim_config_default(&o.optim);
    o.optim.lr = 3e-3f;
    o.optim.grad_clip = 0.5f;
    o.warmup_steps = 1, o.seed = 5, o.log_interval = 4, o.rank = 0, o.world_size = 1;
    o.reduce = nccl_reduce, o.reduce_ctx = &h;
    TEST_EQ_INT(model_init(&m, &mc, 4, 11, err, sizeof(err)), 0);
    TEST_EQ_INT(train_gpu_run_opts(&m, &d, &o, go, &r), 0);
    TEST_EQ_INT((int)r.steps, 8);
    memcpy(params, m.params, m.n_params * sizeof(float));
    *calls = h.calls;
    model_cleanup(&m);
}

static void test_overlap_nccl(void)
{
    struct store_server *srv = NULL;
    struct store *st = NULL;
    struct coll *c = NULL;
    struct store_server_opts so = {};
    struct store_opts co = {};
    so.bind_addr = "127.0.0.1", so.token = "t", so.world_size = 1;
    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    co.host = "127.0.0.1", co.port = store_server_port(srv), co.token = "t", co.world_size = 1;
    co.connect_timeout_ms = co.op_timeout_ms = 10000;
    TEST_EQ_INT(store_connect(&co, &st), 0);
    TEST_EQ_INT(coll_nccl_new(st, 0, NULL, NULL, &c), 0);
    if (!c)
        goto out;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        const size_t n = 1u << 20; /* more than the model's parameters */
        float *a = (float *)calloc(n, sizeof(float)), *b = (float *)calloc(n, sizeof(float));
        struct train_gpu_opts after, each;
        train_gpu_opts_default(&after);
        after.bf16 = bf16, after.bucket_bytes = 0;
        each = after, each.bucket_bytes = 1;
        int ka = 0, kb = 0;
        run_nccl(c, &after, a, &ka);
        run_nccl(c, &each, b, &kb);
        int same = memcmp(a, b, n * sizeof(float)) == 0;
        printf("%-24s %s: reduce calls after backward %d, per bucket %d; params %s\n",
               "overlap (NCCL, 1 rank)", bf16 ? "bf16" : "fp32", ka, kb,
               same ? "bit-identical OK" : "DIFFER FAILED");
        TEST_EQ_INT(ka, 8);
        TEST_CHECK(kb > 8 * MODEL_GPU_UNITS(2));
        TEST_CHECK(same);
        gt_failed += !same;
        free(a), free(b);
    }
out:
    coll_free(c);
    store_free(st);
    store_server_free(srv);
}

int main(void)
{
    gt_require_device("train_gpu_device_test");
    test_conversion();
    test_layernorm_gelu(4096, 768, 1);
    test_layernorm_gelu(37, 96, 2);
    test_matmul_mixed(512, 768, 3072, 3);  /* GPT-2's MLP */
    test_matmul_mixed(40, 32, 96, 4);      /* the test model's qkv */
    TEST_RUN(test_overlap_nccl);
    int rc = gt_summary("train_gpu_device_test");
    return rc ? rc : test_summary();
}
