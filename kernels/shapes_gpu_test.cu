// Randomised shape sweep: every launcher of kernels/gpu.h and kernels/bf16.h against its CPU
// specification on many small random shapes (the per-op tests use 2-4 fixed ones), drawn from a
// seeded PRNG with emphasis on edge sizes: 1, 7, 31, 32, 33, 63, 64, 65 (a warp, one past it) and,
// now and then, sizes around the launchers' own constants (256-thread blocks, 256-row column-sum
// partials, 512 LayerNorm backward blocks, AdamW's 1024 x 256 grid). Shapes stay inside each op's
// documented contract: bf16 GEMM dimensions C, OC multiples of 8 (N any), heads dividing C,
// 1 <= len[b] <= T, ids in range. Inputs the CPU specification never reads hold junk in some
// cases: NaN/inf in attention's and meanpool's padding rows, out-of-range ids past an embedding
// bag's count.
//
// Besides the values (kernels/gpu_testutil.h's rule and the tolerances the per-op tests chose):
//   - every output buffer has a 256-byte guard on both sides filled with a sentinel, checked after
//     each launch (a real GPU does not fault on a small overrun; the emulator's ASan build reports
//     overruns of the inputs, which end exactly where their data ends);
//   - outputs that the op overwrites start as NaN, so an element left unwritten fails;
//   - half the cases put every buffer 4-12 bytes past the allocation's alignment (a tensor sliced
//     from a bigger buffer), and each GEMM shape runs aligned and then sliced (bf16 operands 16
//     bytes off: they need 16-byte alignment), as matmul.cu caches cuBLASLt algorithms by
//     alignment;
//   - the reductions gpu.h calls deterministic give the same bits on a second run: embed_backward,
//     embbag_backward, layernorm_backward, bias_backward's column sums, grad_norm (the emulator
//     runs a block's threads in a different order each launch).
// One line per launcher: launches, worst max|diff|/tol. GANTRY_SHAPES_SEED (default 1) and
// GANTRY_SHAPES_ITERS (cases per op, default 32) change the sweep, GANTRY_SHAPES_VERBOSE=1 lists
// the checks past half their tolerance; a failure prints its case, offset and seed. Exits 77
// without a device.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/crossentropy.h"
#include "kernels/embed.h"
#include "kernels/gelu.h"
#include "kernels/gpu_testutil.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"

/* ---- random shapes ---- */

static uint64_t rnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int rnd_int(uint64_t *s, int lo, int hi) /* uniform in [lo, hi] */
{
    return lo + (int)(rnd(s) % (uint64_t)(hi - lo + 1));
}

static const int k_edges[] = {1, 7, 31, 32, 33, 63, 64, 65};

/* 1..max, half the time one of the edge values (those <= max). */
static int dim(uint64_t *s, int max)
{
    if (rnd(s) % 2 == 0) {
        int e;
        do
            e = k_edges[rnd(s) % (sizeof(k_edges) / sizeof(k_edges[0]))];
        while (e > max);
        return e;
    }
    return rnd_int(s, 1, max);
}

/* A multiple of 8 in 8..max (bf16 GEMM dimensions), half the time 8, 32 or 64. */
static int dim8(uint64_t *s, int max)
{
    static const int e8[] = {8, 32, 64};
    if (rnd(s) % 2 == 0) {
        int e;
        do
            e = e8[rnd(s) % 3];
        while (e > max);
        return e;
    }
    return 8 * rnd_int(s, 1, max / 8);
}

/* dim(), or once in 10 one of 255, 256, 257 (the launchers' 256-thread blocks and 256-row
 * partials; for widths whose cost is linear). */
static int dimx(uint64_t *s, int max)
{
    if (rnd(s) % 10 == 0)
        return 255 + (int)(rnd(s) % 3);
    return dim(s, max);
}

/* GEMM rows: dim(), or once in 8 around matmul.cu's 256-row column-sum partials. */
static int rows(uint64_t *s, int max)
{
    static const int e[] = {255, 256, 257, 513};
    if (rnd(s) % 8 == 0)
        return e[rnd(s) % 4];
    return dim(s, max);
}

/* sum[c] += the column sums of the (N, C) row-major m, in double; returns the largest column
 * sum of |m| (what roundings of m's elements can add up to). */
static double col_sums(float *sum, const float *m, int N, int C)
{
    double most = 0.0;
    for (int c = 0; c < C; c++) {
        double acc = 0.0, mag = 0.0;
        for (int i = 0; i < N; i++)
            acc += m[(size_t)i * C + c], mag += fabs(m[(size_t)i * C + c]);
        sum[c] = (float)(sum[c] + acc);
        most = mag > most ? mag : most;
    }
    return most;
}

/* Seed for gt_rand's xorshift (never 0). */
static uint64_t vseed(uint64_t *s)
{
    return rnd(s) | 1;
}

/* ---- per-op statistics ---- */

struct opstat {
    const char *name;
    int cases;
    double worst; /* max over checks of max |diff| / tol (0 when every check was exact) */
};
static struct opstat g_stats[64];
static int g_nstats;
static char g_case[192]; /* the current case, for messages */
static unsigned long long g_seed;
static int g_verbose; /* GANTRY_SHAPES_VERBOSE=1: checks past half their tolerance */

static struct opstat *stat_of(const char *op)
{
    for (int i = 0; i < g_nstats; i++)
        if (strcmp(g_stats[i].name, op) == 0)
            return &g_stats[i];
    if (g_nstats == (int)(sizeof(g_stats) / sizeof(g_stats[0]))) {
        fprintf(stderr, "shapes_gpu_test: too many ops\n");
        exit(1);
    }
    g_stats[g_nstats].name = op;
    return &g_stats[g_nstats++];
}

/* ---- device buffers: exact-size inputs, guarded outputs ---- */

#define GUARD 256 /* bytes each side (more before the data when g_off > 0) */
#define SENTINEL 0xA5

/* Bytes every buffer of the case starts past cudaMalloc's 256-byte alignment: 0, or a slice's
 * offset (a layer's tensor inside a stacked buffer): 4-byte aligned for fp32, 16 for bf16 GEMM
 * operands (see case_matmul_bf16). */
static size_t g_off;

struct dbuf {
    unsigned char *base;
    size_t bytes, front; /* data at base + front; guarded: front guard, then GUARD after */
    int guarded;
};
static struct dbuf g_bufs[32];
static int g_nbufs;

static void *track(unsigned char *base, size_t bytes, size_t front, int guarded)
{
    if (g_nbufs == (int)(sizeof(g_bufs) / sizeof(g_bufs[0]))) {
        fprintf(stderr, "shapes_gpu_test: too many buffers\n");
        exit(1);
    }
    g_bufs[g_nbufs].base = base;
    g_bufs[g_nbufs].bytes = bytes;
    g_bufs[g_nbufs].front = front;
    g_bufs[g_nbufs++].guarded = guarded;
    return base + front;
}

/* An input: ends exactly after `bytes` (an overrun is the emulator's ASan report), a copy of h. */
static void *in_up(const void *h, size_t bytes)
{
    unsigned char *d = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d, g_off + bytes));
    CUDA_CHECK(cudaMemcpy(d + g_off, h, bytes, cudaMemcpyHostToDevice));
    return track(d, bytes, g_off, 0);
}
#define IN_F(h, n) ((float *)in_up((h), (n) * sizeof(float)))
#define IN_I(h, n) ((int *)in_up((h), (n) * sizeof(int)))

/* An output between two sentinel guards; starts as a copy of init, or as NaN (all bits set,
 * fp32 and bf16 alike) when init is NULL, so an element the op should write and does not fails. */
static void *out_alloc(const void *init, size_t bytes)
{
    unsigned char *d = NULL;
    size_t front = GUARD + g_off;
    CUDA_CHECK(cudaMalloc((void **)&d, front + bytes + GUARD));
    CUDA_CHECK(cudaMemset(d, SENTINEL, front));
    CUDA_CHECK(cudaMemset(d + front + bytes, SENTINEL, GUARD));
    if (init)
        CUDA_CHECK(cudaMemcpy(d + front, init, bytes, cudaMemcpyHostToDevice));
    else
        CUDA_CHECK(cudaMemset(d + front, 0xFF, bytes));
    return track(d, bytes, front, 1);
}
#define OUT_F(h, n) ((float *)out_alloc((h), (n) * sizeof(float)))

/* Resets an output's data (not its guards) to h. */
static void reset(void *d, const void *h, size_t bytes)
{
    CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
}

static void free_all(void)
{
    for (int i = 0; i < g_nbufs; i++)
        CUDA_CHECK(cudaFree(g_bufs[i].base));
    g_nbufs = 0;
}

/* After each launch: the guards of every output are intact; counts a case of op. */
static void launched(const char *op)
{
    unsigned char h[2 * GUARD];
    CUDA_CHECK(cudaDeviceSynchronize());
    stat_of(op)->cases++;
    for (int i = 0; i < g_nbufs; i++) {
        const struct dbuf *b = &g_bufs[i];
        if (!b->guarded)
            continue;
        for (int side = 0; side < 2; side++) {
            unsigned char *g = b->base + (side ? b->front + b->bytes : 0);
            size_t len = side ? GUARD : b->front;
            CUDA_CHECK(cudaMemcpy(h, g, len, cudaMemcpyDeviceToHost));
            for (size_t k = 0; k < len; k++) {
                if (h[k] != SENTINEL) {
                    printf("%s: WROTE OUTSIDE ITS OUTPUT: byte %ld from the %s of a %zu-byte "
                           "buffer; case %s, buffers at +%zu bytes (GANTRY_SHAPES_SEED=%llu)\n",
                           op, side ? (long)k : (long)k - (long)len, side ? "end" : "start",
                           b->bytes, g_case, g_off, g_seed);
                    gt_failed++;
                    stat_of(op)->worst = INFINITY;
                    /* restored, so the next launch is judged on its own */
                    CUDA_CHECK(cudaMemset(g, SENTINEL, len));
                    break;
                }
            }
        }
    }
}

/* ---- comparisons ---- */

/* gt_compare's rule (|gpu - cpu| <= atol + rtol |cpu|, equal values pass, NaN never), quietly:
 * records max |diff| / tol for op; on a mismatch prints the case and runs gt_compare itself for
 * the details (which counts the failure). */
static void check(const char *op, const char *what, const float *dev, const float *ref, size_t n,
                  double atol, double rtol)
{
    float *got = gt_down(dev, n);
    double worst = 0.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]), tol = atol + rtol * fabs((double)ref[i]);
        if (got[i] == ref[i])
            continue;
        if (!(d <= tol)) {
            bad++;
            worst = INFINITY;
        } else if (tol > 0 && d / tol > worst) {
            worst = d / tol;
        }
    }
    free(got);
    if (g_verbose && worst > 0.5)
        printf("  near the tolerance: %s %s max|diff|/tol %.3g; case %s\n", op, what, worst,
               g_case);
    struct opstat *st = stat_of(op);
    if (!(worst <= st->worst))
        st->worst = worst;
    if (bad) {
        printf("%s %s: %d mismatches; case %s, buffers at +%zu bytes (GANTRY_SHAPES_SEED=%llu)\n",
               op, what, bad, g_case, g_off, g_seed);
        gt_compare(what, dev, ref, n, atol, rtol);
    }
}

/* Bit-identical (determinism): dev against a host copy of an earlier result. */
static void check_bits(const char *op, const char *what, const float *dev, const float *ref,
                       size_t n)
{
    float *got = gt_down(dev, n);
    if (memcmp(got, ref, n * sizeof(float)) != 0) {
        size_t i = 0;
        while (memcmp(&got[i], &ref[i], sizeof(float)) == 0)
            i++;
        printf("%s %s: NOT BIT-IDENTICAL at [%zu]: %.9g vs %.9g; case %s, buffers at +%zu bytes "
               "(GANTRY_SHAPES_SEED=%llu)\n",
               op, what, i, (double)got[i], (double)ref[i], g_case, g_off, g_seed);
        gt_failed++;
        stat_of(op)->worst = INFINITY;
    }
    free(got);
}

/* check() for a bf16 output: widened on the host (exact), compared as fp32. */
static void check_bf16(const char *op, const char *what, const uint16_t *dev, const float *ref,
                       size_t n, double atol, double rtol)
{
    float *h = gt_down_bf16(dev, n);
    float *tmp = (float *)in_up(h, n * sizeof(float)); /* gt_compare reads a device buffer */
    check(op, what, tmp, ref, n, atol, rtol);
    free(h);
}

/* x rounded to bf16 in place; returns a device (input) copy of the bits. */
static uint16_t *bf16_in(float *x, size_t n)
{
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_from_f32(x[i]);
        x[i] = bf16_to_f32(h[i]);
    }
    uint16_t *d = (uint16_t *)in_up(h, n * 2);
    free(h);
    return d;
}

/* Guarded bf16 output starting as the bits of x (rounded in place), or NaN when x is NULL. */
static uint16_t *bf16_out(float *x, size_t n)
{
    if (!x)
        return (uint16_t *)out_alloc(NULL, n * 2);
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_from_f32(x[i]);
        x[i] = bf16_to_f32(h[i]);
    }
    uint16_t *d = (uint16_t *)out_alloc(h, n * 2);
    free(h);
    return d;
}

/* ---- embeddings ---- */

static void case_embed(uint64_t *r)
{
    int B = rnd_int(r, 1, 4), T = dim(r, 70), C = dimx(r, 70), V = dim(r, 70);
    int maxT = T + rnd_int(r, 0, 3);
    uint64_t s = vseed(r);
    size_t n = (size_t)B * T, no = n * C, nte = (size_t)V * C, npe = (size_t)maxT * C;
    snprintf(g_case, sizeof(g_case), "embed B=%d T=%d C=%d V=%d maxT=%d", B, T, C, V, maxT);
    int *tok = (int *)malloc(n * sizeof(int));
    int hot = V < 4 ? V : 4;
    for (size_t i = 0; i < n; i++) /* half of them in 0..3: long runs in the sorted scatter */
        tok[i] = rnd(r) % 2 ? (int)(rnd(r) % (uint64_t)hot) : (int)(rnd(r) % (uint64_t)V);
    tok[n - 1] = V - 1; /* the last row of dwte */
    float *wte = gt_randv(nte, &s, -1, 1), *wpe = gt_randv(npe, &s, -1, 1);
    float *out = (float *)malloc(no * sizeof(float)), *dout = gt_randv(no, &s, -1, 1);
    float *dwte = gt_randv(nte, &s, -1, 1), *dwpe = gt_randv(npe, &s, -1, 1);
    int *d_tok = IN_I(tok, n);
    float *d_wte = IN_F(wte, nte), *d_wpe = IN_F(wpe, npe), *d_dout = IN_F(dout, no);
    float *d_out = OUT_F(NULL, no), *d_dwte = OUT_F(dwte, nte), *d_dwpe = OUT_F(dwpe, npe);
    float *dwte0 = gt_copyv(dwte, nte), *dwpe0 = gt_copyv(dwpe, npe);

    embed_forward_cpu(out, tok, wte, wpe, B, T, C);
    embed_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    launched("embed_forward");
    check("embed_forward", "out", d_out, out, no, 0, 0); /* one add: exact */
    embed_backward_cpu(dwte, dwpe, dout, tok, B, T, C);
    embed_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, 0);
    launched("embed_backward");
    check("embed_backward", "dwte", d_dwte, dwte, nte, GT_F32_ATOL, GT_F32_RTOL);
    check("embed_backward", "dwpe", d_dwpe, dwpe, npe, GT_F32_ATOL, GT_F32_RTOL);
    float *first_te = gt_down(d_dwte, nte), *first_pe = gt_down(d_dwpe, npe);
    reset(d_dwte, dwte0, nte * sizeof(float));
    reset(d_dwpe, dwpe0, npe * sizeof(float));
    embed_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, 0);
    launched("embed_backward");
    check_bits("embed_backward", "repeat dwte", d_dwte, first_te, nte);
    check_bits("embed_backward", "repeat dwpe", d_dwpe, first_pe, npe);
    free_all();
    free(tok), free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
    free(dwte0), free(dwpe0), free(first_te), free(first_pe);
}

static void case_embbag(uint64_t *r)
{
    int B = rnd_int(r, 1, 8), M = dim(r, 70), D = dimx(r, 70), R = dim(r, 70);
    uint64_t s = vseed(r);
    size_t n = (size_t)B * M, nt = (size_t)R * D, no = (size_t)B * D;
    int *ids = (int *)malloc(n * sizeof(int)), *count = (int *)malloc(B * sizeof(int));
    int hot = R < 3 ? R : 3;
    for (size_t i = 0; i < n; i++)
        ids[i] = rnd(r) % 2 ? (int)(rnd(r) % (uint64_t)hot) : (int)(rnd(r) % (uint64_t)R);
    for (int b = 0; b < B; b++) { /* empty and full bags, and in between */
        int k = (int)(rnd(r) % 4);
        count[b] = k == 0 ? 0 : (k == 1 ? M : rnd_int(r, 0, M));
    }
    int junk = (int)(rnd(r) % 2); /* ids past count[b] are never read (the CPU does not) */
    for (int b = 0; junk && b < B; b++)
        for (int i = count[b]; i < M; i++)
            ids[(size_t)b * M + i] = i % 2 ? -1 : R + 1000;
    snprintf(g_case, sizeof(g_case), "embbag B=%d M=%d D=%d R=%d%s", B, M, D, R,
             junk ? " junk ids past count" : "");
    float *table = gt_randv(nt, &s, -1, 1), *out = (float *)malloc(no * sizeof(float));
    float *dout = gt_randv(no, &s, -1, 1), *dtable = gt_randv(nt, &s, -1, 1);
    float *dtable0 = gt_copyv(dtable, nt);
    int *d_ids = IN_I(ids, n), *d_count = IN_I(count, B);
    float *d_table = IN_F(table, nt), *d_dout = IN_F(dout, no);
    float *d_out = OUT_F(NULL, no), *d_dtable = OUT_F(dtable, nt);

    embbag_forward_cpu(out, ids, count, table, B, M, D);
    embbag_forward(d_out, d_ids, d_count, d_table, B, M, D, 0);
    launched("embbag_forward");
    check("embbag_forward", "out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    embbag_backward_cpu(dtable, dout, ids, count, B, M, D);
    embbag_backward(d_dtable, d_dout, d_ids, d_count, B, M, D, R, 0);
    launched("embbag_backward");
    check("embbag_backward", "dtable", d_dtable, dtable, nt, GT_F32_ATOL, GT_F32_RTOL);
    float *first = gt_down(d_dtable, nt);
    reset(d_dtable, dtable0, nt * sizeof(float));
    embbag_backward(d_dtable, d_dout, d_ids, d_count, B, M, D, R, 0);
    launched("embbag_backward");
    check_bits("embbag_backward", "repeat dtable", d_dtable, first, nt);
    free_all();
    free(ids), free(count), free(table), free(out), free(dout), free(dtable), free(dtable0);
    free(first);
}

/* ---- LayerNorm ---- */

static void case_layernorm(uint64_t *r)
{
    int N = dim(r, 70) * (rnd(r) % 4 == 0 ? 3 : 1), C = dimx(r, 70);
    if (rnd(r) % 12 == 0) { /* past layernorm.cu's 512 backward blocks (16 rows each) */
        N = 8192 + rnd_int(r, -1, 200);
        C = rnd_int(r, 1, 8);
    }
    uint64_t s = vseed(r);
    size_t nc = (size_t)N * C;
    snprintf(g_case, sizeof(g_case), "layernorm N=%d C=%d", N, C);
    float *inp = gt_randv(nc, &s, -2, 3), *w = gt_randv(C, &s, 0.5f, 1.5f);
    float *b = gt_randv(C, &s, -0.5f, 0.5f), *out = (float *)malloc(nc * sizeof(float));
    float *mean = (float *)malloc(N * sizeof(float)), *rstd = (float *)malloc(N * sizeof(float));
    float *dout = gt_randv(nc, &s, -1, 1), *dinp = gt_randv(nc, &s, -1, 1);
    float *dw = gt_randv(C, &s, -1, 1), *db = gt_randv(C, &s, -1, 1);
    float *dinp0 = gt_copyv(dinp, nc), *dw0 = gt_copyv(dw, C), *db0 = gt_copyv(db, C);
    float *d_inp = IN_F(inp, nc), *d_w = IN_F(w, C), *d_b = IN_F(b, C), *d_dout = IN_F(dout, nc);
    float *d_out = OUT_F(NULL, nc), *d_mean = OUT_F(NULL, N), *d_rstd = OUT_F(NULL, N);
    float *d_dinp = OUT_F(dinp, nc), *d_dw = OUT_F(dw, C), *d_db = OUT_F(db, C);
    uint16_t *d_o16 = bf16_out(NULL, nc);

    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, 0);
    launched("layernorm_forward");
    check("layernorm_forward", "out", d_out, out, nc, GT_F32_ATOL, GT_F32_RTOL);
    check("layernorm_forward", "mean", d_mean, mean, N, GT_F32_ATOL, GT_F32_RTOL);
    check("layernorm_forward", "rstd", d_rstd, rstd, N, GT_F32_ATOL, GT_F32_RTOL);
    /* the backward from the CPU's statistics, so it is checked on its own */
    reset(d_mean, mean, N * sizeof(float));
    reset(d_rstd, rstd, N * sizeof(float));
    layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 0);
    launched("layernorm_backward");
    check("layernorm_backward", "dinp", d_dinp, dinp, nc, GT_F32_ATOL, GT_F32_RTOL);
    check("layernorm_backward", "dweight", d_dw, dw, C, 1e-3, GT_F32_RTOL); /* sums over N */
    check("layernorm_backward", "dbias", d_db, db, C, 1e-3, GT_F32_RTOL);
    /* gpu.h: dweight/dbias by per-block partials summed in order, bit-identical run to run */
    float *first_w = gt_down(d_dw, C), *first_b = gt_down(d_db, C), *first_x = gt_down(d_dinp, nc);
    reset(d_dinp, dinp0, nc * sizeof(float));
    reset(d_dw, dw0, C * sizeof(float));
    reset(d_db, db0, C * sizeof(float));
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 0);
    launched("layernorm_backward");
    check_bits("layernorm_backward", "repeat dinp", d_dinp, first_x, nc);
    check_bits("layernorm_backward", "repeat dweight", d_dw, first_w, C);
    check_bits("layernorm_backward", "repeat dbias", d_db, first_b, C);
    /* with the bf16 copy of dinp: the same bits, and dinp16 = dinp rounded, bit for bit */
    reset(d_dinp, dinp0, nc * sizeof(float));
    reset(d_dw, dw0, C * sizeof(float));
    reset(d_db, db0, C * sizeof(float));
    uint16_t *d_dx16 = bf16_out(NULL, nc);
    layernorm_backward_bf16(d_dinp, d_dx16, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C,
                            0);
    launched("layernorm_backward_bf16");
    check_bits("layernorm_backward_bf16", "dinp", d_dinp, first_x, nc);
    check_bits("layernorm_backward_bf16", "dweight", d_dw, first_w, C);
    check_bits("layernorm_backward_bf16", "dbias", d_db, first_b, C);
    { /* and dsum += the column sums of the accumulated dinp (a projection's bias gradient, from
       * the same partials): dinp, dweight, dbias keep their bits */
        float *ds0 = gt_randv(C, &s, -1, 1), *ds = gt_copyv(ds0, C), *d_ds = OUT_F(ds0, C);
        double bound = col_sums(ds, first_x, N, C);
        reset(d_dinp, dinp0, nc * sizeof(float));
        reset(d_dw, dw0, C * sizeof(float));
        reset(d_db, db0, C * sizeof(float));
        layernorm_backward_bf16_sum(d_dinp, d_dx16, d_dw, d_db, d_ds, d_dout, d_inp, d_w, d_mean,
                                    d_rstd, N, C, 0);
        launched("layernorm_backward_bf16_sum");
        check_bits("layernorm_backward_bf16_sum", "dinp", d_dinp, first_x, nc);
        check_bits("layernorm_backward_bf16_sum", "dweight", d_dw, first_w, C);
        check_bits("layernorm_backward_bf16_sum", "dbias", d_db, first_b, C);
        /* fp32 sums of N terms in another order: a few ulps of the sum of magnitudes */
        check("layernorm_backward_bf16_sum", "dsum", d_ds, ds, C, 1e-5 + 1e-6 * bound,
              GT_F32_RTOL);
        float *again = gt_down(d_ds, C);
        reset(d_dinp, dinp0, nc * sizeof(float));
        reset(d_ds, ds0, C * sizeof(float));
        layernorm_backward_bf16_sum(d_dinp, d_dx16, d_dw, d_db, d_ds, d_dout, d_inp, d_w, d_mean,
                                    d_rstd, N, C, 0);
        check_bits("layernorm_backward_bf16_sum", "repeat dsum", d_ds, again, C);
        for (size_t i = 0; i < nc; i++)
            first_x[i] = bf16_round(first_x[i]);
        check_bf16("layernorm_backward_bf16", "dinp16", d_dx16, first_x, nc, 0, 0);
        /* dout in bf16: the bits of the fp32-dout launcher given the same rounded values, every
         * output (dout is only ever read into fp32) */
        float *dr = gt_copyv(dout, nc);
        uint16_t *d_dout16 = bf16_in(dr, nc); /* dr now holds the rounded values */
        float *d_dr = IN_F(dr, nc);
        reset(d_dinp, dinp0, nc * sizeof(float)), reset(d_ds, ds0, C * sizeof(float));
        reset(d_dw, dw0, C * sizeof(float)), reset(d_db, db0, C * sizeof(float));
        layernorm_backward_bf16_sum(d_dinp, d_dx16, d_dw, d_db, d_ds, d_dr, d_inp, d_w, d_mean,
                                    d_rstd, N, C, 0);
        float *rx = gt_down(d_dinp, nc), *rw = gt_down(d_dw, C), *rb = gt_down(d_db, C);
        float *rs = gt_down(d_ds, C);
        reset(d_dinp, dinp0, nc * sizeof(float)), reset(d_ds, ds0, C * sizeof(float));
        reset(d_dw, dw0, C * sizeof(float)), reset(d_db, db0, C * sizeof(float));
        CUDA_CHECK(cudaMemset(d_dx16, 0xFF, nc * 2));
        layernorm_backward_bf16_d16(d_dinp, d_dx16, d_dw, d_db, d_ds, d_dout16, d_inp, d_w,
                                    d_mean, d_rstd, N, C, 0);
        launched("layernorm_backward_bf16_d16");
        check_bits("layernorm_backward_bf16_d16", "dinp", d_dinp, rx, nc);
        check_bits("layernorm_backward_bf16_d16", "dweight", d_dw, rw, C);
        check_bits("layernorm_backward_bf16_d16", "dbias", d_db, rb, C);
        check_bits("layernorm_backward_bf16_d16", "dsum", d_ds, rs, C);
        for (size_t i = 0; i < nc; i++)
            rx[i] = bf16_round(rx[i]);
        check_bf16("layernorm_backward_bf16_d16", "dinp16", d_dx16, rx, nc, 0, 0);
        free(dr), free(rx), free(rw), free(rb), free(rs);
        free(ds0), free(ds), free(again);
    }
    free(first_w), free(first_b), free(first_x), free(dinp0), free(dw0), free(db0);
    CUDA_CHECK(cudaMemset(d_mean, 0xFF, N * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_rstd, 0xFF, N * sizeof(float)));
    layernorm_forward_bf16(d_o16, d_mean, d_rstd, d_inp, d_w, d_b, N, C, 0);
    launched("layernorm_forward_bf16");
    /* one rounding to bf16 (2^-9 relative) on top of the fp32 result */
    check_bf16("layernorm_forward_bf16", "out", d_o16, out, nc, 1e-5, 2.0 / 512);
    check("layernorm_forward_bf16", "mean", d_mean, mean, N, GT_F32_ATOL, GT_F32_RTOL);
    check("layernorm_forward_bf16", "rstd", d_rstd, rstd, N, GT_F32_ATOL, GT_F32_RTOL);
    free_all();
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp);
    free(dw), free(db);
}

/* ---- fully connected layers, fp32 ---- */

static void matmul_run(int N, int C, int OC, uint64_t s)
{
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    snprintf(g_case, sizeof(g_case), "matmul N=%d C=%d OC=%d offset=%zu", N, C, OC, g_off);
    float *inp = gt_randv(ni, &s, -1, 1), *w = gt_randv(nw, &s, -0.5f, 0.5f);
    float *bias = gt_randv(OC, &s, -1, 1), *res = gt_randv(no, &s, -1, 1);
    float *out = (float *)malloc(no * sizeof(float)), *pre = (float *)malloc(no * sizeof(float));
    float *dout = gt_randv(no, &s, -1, 1), *dinp = gt_randv(ni, &s, -1, 1);
    float *dw = gt_randv(nw, &s, -1, 1), *db = gt_randv(OC, &s, -1, 1);
    float *pre_in = gt_randv(ni, &s, -3, 3); /* matmul_backward_gelu's pre (N, C) */
    float *dinp0 = gt_copyv(dinp, ni), *dw0 = gt_copyv(dw, nw), *db0 = gt_copyv(db, OC);
    float *d_inp = IN_F(inp, ni), *d_w = IN_F(w, nw), *d_bias = IN_F(bias, OC);
    float *d_res = IN_F(res, no), *d_dout = IN_F(dout, no), *d_pre_in = IN_F(pre_in, ni);
    float *d_out = OUT_F(NULL, no), *d_pre = OUT_F(NULL, no);
    float *d_dinp = OUT_F(dinp, ni), *d_dw = OUT_F(dw, nw), *d_db = OUT_F(db, OC);
    const double atol = 1e-4 * sqrt((double)C); /* fp32 sums of C products of size ~1 */

    matmul_forward_cpu(out, inp, w, NULL, N, C, OC);
    matmul_forward(d_out, d_inp, d_w, NULL, N, C, OC, 0);
    launched("matmul_forward");
    check("matmul_forward", "out", d_out, out, no, atol, GT_F32_RTOL);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    matmul_forward_cpu(pre, inp, w, bias, N, C, OC);
    matmul_forward(d_out, d_inp, d_w, d_bias, N, C, OC, 0);
    launched("matmul_forward +bias");
    check("matmul_forward +bias", "out", d_out, pre, no, atol, GT_F32_RTOL);
    { /* fused (OC % 8 == 0, aligned pre) or GEMM + GELU: the same result (7d6794b) */
        CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
        gelu_forward_cpu(out, pre, no);
        matmul_forward_gelu(d_out, d_pre, d_inp, d_w, d_bias, N, C, OC, 0);
        launched("matmul_forward_gelu");
        check("matmul_forward_gelu", "pre", d_pre, pre, no, atol, GT_F32_RTOL);
        check("matmul_forward_gelu", "out", d_out, out, no, atol, 1e-3);
        float *pre_gpu = gt_down(d_pre, no), *out2 = (float *)malloc(no * sizeof(float));
        gelu_forward_cpu(out2, pre_gpu, no); /* the epilogue's GELU on its own pre: tanh form */
        check("matmul_forward_gelu", "gelu(pre)", d_out, out2, no, 2e-5, 1e-4);
        free(pre_gpu), free(out2);
        if (g_off == 0) { /* the same GEMM again with only pre 4 bytes off: matmul.cu's algorithm
                           * cache keys A, B, D's alignment, not the epilogue's aux (pre) */
            g_off = 4;
            float *d_pre4 = OUT_F(NULL, no);
            g_off = 0;
            CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
            matmul_forward_gelu(d_out, d_pre4, d_inp, d_w, d_bias, N, C, OC, 0);
            launched("matmul_forward_gelu");
            check("matmul_forward_gelu", "pre (+4 bytes)", d_pre4, pre, no, atol, GT_F32_RTOL);
            check("matmul_forward_gelu", "out (pre +4 bytes)", d_out, out, no, atol, 1e-3);
        }
    }
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
        matmul_forward_residual_cpu(out, res, inp, w, with_bias ? bias : NULL, N, C, OC);
        matmul_forward_residual(d_out, d_res, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC, 0);
        launched("matmul_forward_residual");
        check("matmul_forward_residual", with_bias ? "out +bias" : "out", d_out, out, no, atol,
              GT_F32_RTOL);
    }

    matmul_backward_cpu(dinp, dw, db, dout, inp, w, N, C, OC);
    matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward");
    check("matmul_backward", "dinp", d_dinp, dinp, ni, 1e-4 * sqrt((double)OC), GT_F32_RTOL);
    check("matmul_backward", "dweight", d_dw, dw, nw, 1e-4 * sqrt((double)N), GT_F32_RTOL);
    check("matmul_backward", "dbias", d_db, db, OC, 1e-4 * sqrt((double)N), GT_F32_RTOL);
    /* NULL dinp and dbias: those buffers stay as they are */
    float *dinp_now = gt_down(d_dinp, ni), *db_now = gt_down(d_db, OC);
    matmul_backward_cpu(NULL, dw, NULL, dout, inp, w, N, C, OC);
    matmul_backward(NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward NULLs");
    check("matmul_backward NULLs", "dweight", d_dw, dw, nw, 2e-4 * sqrt((double)N), GT_F32_RTOL);
    check("matmul_backward NULLs", "dinp untouched", d_dinp, dinp_now, ni, 0, 0);
    check("matmul_backward NULLs", "dbias untouched", d_db, db_now, OC, 0, 0);
    free(dinp_now), free(db_now);

    /* dinp OVERWRITTEN (it starts as NaN: reading it would show), with and without pre; dbias
     * NULL once. gelu' <= 1.13 scales dinp's error: 1.2x matmul_backward's atol. */
    for (int k = 0; k < 3; k++) {
        const float *p = k == 1 ? NULL : pre_in;
        float *bias_g = k == 2 ? NULL : db;
        memcpy(dw, dw0, nw * sizeof(float)), memcpy(db, db0, OC * sizeof(float));
        reset(d_dw, dw0, nw * sizeof(float)), reset(d_db, db0, OC * sizeof(float));
        CUDA_CHECK(cudaMemset(d_dinp, 0xFF, ni * sizeof(float)));
        matmul_backward_gelu_cpu(dinp, dw, bias_g, dout, inp, p, w, N, C, OC);
        matmul_backward_gelu(d_dinp, d_dw, k == 2 ? NULL : d_db, d_dout, d_inp,
                             p ? d_pre_in : NULL, d_w, N, C, OC, 0);
        launched("matmul_backward_gelu");
        check("matmul_backward_gelu", p ? "dinp" : "dinp (pre NULL)", d_dinp, dinp, ni,
              1.2e-4 * sqrt((double)OC), GT_F32_RTOL);
        check("matmul_backward_gelu", "dweight", d_dw, dw, nw, 1e-4 * sqrt((double)N),
              GT_F32_RTOL);
        check("matmul_backward_gelu", "dbias", d_db, db, OC, 1e-4 * sqrt((double)N), GT_F32_RTOL);
    }

    memcpy(out, pre, no * sizeof(float));
    reset(d_out, pre, no * sizeof(float));
    bias_forward_cpu(out, bias, N, OC);
    bias_forward(d_out, d_bias, N, OC, 0);
    launched("bias_forward");
    check("bias_forward", "out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    bias_backward_cpu(db, dout, N, OC);
    bias_backward(d_db, d_dout, N, OC, 0);
    launched("bias_backward");
    check("bias_backward", "dbias", d_db, db, OC, 2e-4 * sqrt((double)N), GT_F32_RTOL);
    { /* deterministic column sums: the same bits again from the same start */
        float *first = gt_down(d_db, OC), *start = (float *)malloc(OC * sizeof(float) + 1);
        for (int o = 0; o < OC; o++)
            start[o] = (float)o;
        reset(d_db, start, OC * sizeof(float));
        bias_backward(d_db, d_dout, N, OC, 0);
        float *again = gt_down(d_db, OC);
        reset(d_db, start, OC * sizeof(float));
        bias_backward(d_db, d_dout, N, OC, 0);
        launched("bias_backward");
        check_bits("bias_backward", "repeat dbias", d_db, again, OC);
        free(first), free(start), free(again);
    }
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    residual_forward_cpu(out, res, pre, (long)no);
    float *d_pre_copy = IN_F(pre, no);
    residual_forward(d_out, d_res, d_pre_copy, (long)no, 0);
    launched("residual_forward");
    check("residual_forward", "out", d_out, out, no, 0, 0);
    free_all();
    free(inp), free(w), free(bias), free(res), free(out), free(pre), free(dout), free(dinp);
    free(dw), free(db), free(pre_in), free(dinp0), free(dw0), free(db0);
}

/* Each shape twice: 256-byte aligned operands, then slices 4-12 bytes past that (matmul.cu keys
 * its cached cuBLASLt algorithms by operand alignment: an algorithm picked for aligned operands
 * must not be reused on a slice). */
static void case_matmul(uint64_t *r)
{
    int N = rows(r, 70), C = dim(r, 70), OC = rnd(r) % 2 ? dim8(r, 72) : dim(r, 70);
    uint64_t s = vseed(r);
    size_t off = 4 * (size_t)rnd_int(r, 1, 3);
    g_off = 0;
    matmul_run(N, C, OC, s);
    g_off = off;
    matmul_run(N, C, OC, s);
    g_off = 0;
}

/* ---- bf16 operands (bf16.h: C and OC multiples of 8; N any) ---- */

static void matmul_bf16_run(int N, int C, int OC, uint64_t s)
{
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    snprintf(g_case, sizeof(g_case), "matmul_bf16 N=%d C=%d OC=%d offset=%zu", N, C, OC, g_off);
    float *inp = gt_randv(ni, &s, -1, 1), *w = gt_randv(nw, &s, -0.5f, 0.5f);
    float *bias = gt_randv(OC, &s, -1, 1), *out = (float *)malloc(no * sizeof(float));
    float *dout = gt_randv(no, &s, -1, 1), *dinp = gt_randv(ni, &s, -1, 1);
    float *dw = gt_randv(nw, &s, -1, 1), *db = gt_randv(OC, &s, -1, 1);
    uint16_t *d_inp = bf16_in(inp, ni), *d_w = bf16_in(w, nw), *d_bias = bf16_in(bias, OC);
    uint16_t *d_dout = bf16_in(dout, no), *d_out = bf16_out(NULL, no);
    uint16_t *d_dinp = bf16_out(dinp, ni); /* rounded in place: the CPU starts from the same */
    float *d_dw = OUT_F(dw, nw), *d_db = OUT_F(db, OC);

    uint16_t *d_pre = bf16_out(NULL, no);
    float *act = (float *)malloc(no * sizeof(float) + 1);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CUDA_CHECK(cudaMemset(d_out, 0xFF, no * 2));
        matmul_forward_cpu(out, inp, w, with_bias ? bias : NULL, N, C, OC);
        matmul_forward_bf16(d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC, 0);
        launched("matmul_forward_bf16");
        check_bf16("matmul_forward_bf16", with_bias ? "out +bias" : "out", d_out, out, no,
                   GT_BF16_ATOL, GT_BF16_RTOL);
        /* the GELU epilogue: pre as above, out = gelu(pre), both bf16 (from NaN) */
        CUDA_CHECK(cudaMemset(d_out, 0xFF, no * 2));
        CUDA_CHECK(cudaMemset(d_pre, 0xFF, no * 2));
        gelu_forward_cpu(act, out, no);
        matmul_forward_bf16_gelu(d_out, d_pre, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC,
                                 0);
        launched("matmul_forward_bf16_gelu");
        check_bf16("matmul_forward_bf16_gelu", with_bias ? "pre +bias" : "pre", d_pre, out, no,
                   GT_BF16_ATOL, GT_BF16_RTOL);
        check_bf16("matmul_forward_bf16_gelu", with_bias ? "out +bias" : "out", d_out, act, no,
                   GT_BF16_ATOL, GT_BF16_RTOL);
    }
    free(act);
    matmul_backward_cpu(dinp, dw, db, dout, inp, w, N, C, OC);
    matmul_backward_bf16(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward_bf16");
    check_bf16("matmul_backward_bf16", "dinp", d_dinp, dinp, ni, GT_BF16_ATOL, GT_BF16_RTOL);
    /* fp32 outputs from bf16 operands: only the accumulation order differs */
    check("matmul_backward_bf16", "dweight", d_dw, dw, nw, 1e-4 * sqrt((double)N), GT_F32_RTOL);
    check("matmul_backward_bf16", "dbias", d_db, db, OC, 1e-4 * sqrt((double)N), GT_F32_RTOL);
    float *dinp_now = gt_down_bf16(d_dinp, ni), *db_now = gt_down(d_db, OC);
    matmul_backward_cpu(NULL, dw, NULL, dout, inp, w, N, C, OC);
    matmul_backward_bf16(NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward_bf16 NULLs");
    check("matmul_backward_bf16 NULLs", "dweight", d_dw, dw, nw, 2e-4 * sqrt((double)N),
          GT_F32_RTOL);
    check_bf16("matmul_backward_bf16 NULLs", "dinp untouched", d_dinp, dinp_now, ni, 0, 0);
    check("matmul_backward_bf16 NULLs", "dbias untouched", d_db, db_now, OC, 0, 0);
    free_all();
    free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(db);
    free(dinp_now), free(db_now);
}

/* Aligned, then 16 bytes past that: bf16 GEMM operands need 16-byte aligned pointers (cuBLASLt;
 * the emulator refuses less, and matmul.cu then exits), which bf16.h does not say. */
static void case_matmul_bf16(uint64_t *r)
{
    int N = rows(r, 70), C = dim8(r, 72), OC = dim8(r, 72);
    uint64_t s = vseed(r);
    g_off = 0;
    matmul_bf16_run(N, C, OC, s);
    g_off = 16;
    matmul_bf16_run(N, C, OC, s);
    g_off = 0;
}

/* Mixed precision (bf16.h): bf16 operands, fp32 outputs; the CPU runs on the rounded operands,
 * so the products are exact and only the fp32 summation order differs. */
static void matmul_mixed_run(int N, int C, int OC, uint64_t s)
{
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    snprintf(g_case, sizeof(g_case), "matmul_mixed N=%d C=%d OC=%d offset=%zu", N, C, OC, g_off);
    float *inp = gt_randv(ni, &s, -1, 1), *w = gt_randv(nw, &s, -0.5f, 0.5f);
    float *b = gt_randv(OC, &s, -0.5f, 0.5f), *out = (float *)malloc(no * sizeof(float));
    float *dout = gt_randv(no, &s, -1, 1), *dinp = gt_randv(ni, &s, -1, 1);
    float *dw = gt_randv(nw, &s, -1, 1), *db = gt_randv(OC, &s, -1, 1);
    float *dout_r = gt_copyv(dout, no);
    uint16_t *d_inp = bf16_in(inp, ni), *d_w = bf16_in(w, nw), *d_dout16 = bf16_in(dout_r, no);
    float *d_b = IN_F(b, OC), *d_dout = IN_F(dout, no), *d_out = OUT_F(NULL, no);
    float *d_dinp = OUT_F(dinp, ni), *d_dw = OUT_F(dw, nw), *d_db = OUT_F(db, OC);
    const double atol = 1e-3, rtol = 2e-3; /* as worker/train_gpu_device_test.cu */

    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
        matmul_forward_cpu(out, inp, w, with_bias ? b : NULL, N, C, OC);
        matmul_forward_mixed(d_out, d_inp, d_w, with_bias ? d_b : NULL, N, C, OC, 0);
        launched("matmul_forward_mixed");
        check("matmul_forward_mixed", with_bias ? "out +bias" : "out", d_out, out, no, atol, rtol);
    }
    col_sums(db, dout, N, OC); /* dbias: column sums of the fp32 dout, in double */
    /* the residual add in the epilogue: out = res + (inp @ w^T + b); out starts as NaN */
    float *res = gt_randv(no, &s, -2, 2), *d_res = IN_F(res, no);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    matmul_forward_cpu(out, inp, w, b, N, C, OC);
    for (size_t i = 0; i < no; i++)
        out[i] += res[i];
    matmul_forward_mixed_residual(d_out, d_res, d_inp, d_w, d_b, N, C, OC, 0);
    launched("matmul_forward_mixed_residual");
    check("matmul_forward_mixed_residual", "out", d_out, out, no, atol, rtol);
    free(res);
    /* dinp overwritten: from NaN (a GEMM that read it would give NaN), as the CPU into zeros */
    float *d_dinp_set = OUT_F(NULL, ni), *dinp_set = (float *)calloc(ni + 1, sizeof(float));
    float *dw_set = gt_copyv(dw, nw), *d_dw_set = OUT_F(dw, nw);
    matmul_backward_cpu(dinp_set, dw_set, NULL, dout_r, inp, w, N, C, OC);
    matmul_backward_mixed_set(d_dinp_set, d_dw_set, NULL, d_dout, d_dout16, d_inp, d_w, N, C, OC,
                              0);
    launched("matmul_backward_mixed_set");
    check("matmul_backward_mixed_set", "dinp", d_dinp_set, dinp_set, ni, atol, rtol);
    check("matmul_backward_mixed_set", "dweight", d_dw_set, dw_set, nw, atol * 10, rtol);
    { /* dinp in bf16 (from NaN): the same sums rounded once; dweight and dbias as above */
        uint16_t *d_dinp16 = bf16_out(NULL, ni);
        float *dw2 = gt_copyv(dw_set, nw), *d_dw2 = OUT_F(dw_set, nw), *d_db2 = OUT_F(NULL, OC);
        float *db2 = (float *)calloc((size_t)OC + 1, sizeof(float));
        CUDA_CHECK(cudaMemset(d_db2, 0, OC * sizeof(float)));
        col_sums(db2, dout, N, OC);
        matmul_backward_cpu(NULL, dw2, NULL, dout_r, inp, w, N, C, OC);
        matmul_backward_mixed_set_bf16(d_dinp16, d_dw2, d_db2, d_dout, d_dout16, d_inp, d_w, N, C,
                                       OC, 0);
        launched("matmul_backward_mixed_set_bf16");
        check_bf16("matmul_backward_mixed_set_bf16", "dinp16", d_dinp16, dinp_set, ni,
                   GT_BF16_ATOL, GT_BF16_RTOL);
        check("matmul_backward_mixed_set_bf16", "dweight", d_dw2, dw2, nw, atol * 10, rtol);
        check("matmul_backward_mixed_set_bf16", "dbias", d_db2, db2, OC, 1e-3, GT_F32_RTOL);
        free(dw2), free(db2);
    }
    { /* through a GELU in the GEMM's epilogue (matmul_backward_mixed_dgelu_bf16): dpre16 (from
       * NaN) = dinp * gelu'(pre) rounded to bf16, dpre_bias += its column sums, dweight and dbias
       * as above; the emulator's cuBLASLt has the epilogue (any GEMM here meets its alignment),
       * a GPU's may not (-1: nothing written, the model runs the pass) */
        float *pre = gt_randv(ni, &s, -4, 4);
        uint16_t *d_pre = bf16_in(pre, ni); /* pre now holds the rounded values */
        float *ref = (float *)calloc(ni + 1, sizeof(float)), *dw3 = gt_copyv(dw_set, nw);
        float *pb0 = gt_randv(C, &s, -1, 1), *pb = gt_copyv(pb0, C);
        float *db3 = (float *)calloc((size_t)OC + 1, sizeof(float));
        gelu_backward_cpu(ref, pre, dinp_set, ni); /* into zeros: ref = dinp * gelu'(pre) */
        /* a column's sum of |ref| bounds the bf16 roundings (2^-9 each) */
        double bound = col_sums(pb, ref, N, C);
        col_sums(db3, dout, N, OC);
        matmul_backward_cpu(NULL, dw3, NULL, dout_r, inp, w, N, C, OC);
        const char *op = "matmul_backward_mixed_dgelu_bf16";
        uint16_t *d_dpre = bf16_out(NULL, ni);
        float *d_pb = OUT_F(pb0, C), *d_dw3 = OUT_F(dw_set, nw), *d_db3 = OUT_F(NULL, OC);
        CUDA_CHECK(cudaMemset(d_db3, 0, OC * sizeof(float)));
        int rc = matmul_backward_mixed_dgelu_bf16(d_dpre, d_pb, d_dw3, d_db3, d_dout, d_dout16,
                                                  d_inp, d_pre, d_w, N, C, OC, 0);
        launched(op);
#ifdef GANTRY_EMU_CUDA_RUNTIME_H
        if (rc != 0) {
            fprintf(stderr, "FAIL %s: returned %d on the emulator, which has the epilogue (%s, "
                            "seed %llu)\n", op, rc, g_case, g_seed);
            gt_failed++;
        }
#endif
        if (rc == 0) {
            check_bf16(op, "dpre16", d_dpre, ref, ni, GT_BF16_ATOL, GT_BF16_RTOL);
            check(op, "dpre_bias", d_pb, pb, C, 1e-3 + bound / 256, GT_F32_RTOL);
            check(op, "dweight", d_dw3, dw3, nw, atol * 10, rtol);
            check(op, "dbias", d_db3, db3, OC, 1e-3, GT_F32_RTOL);
        } else { /* nothing written */
            check(op, "dpre_bias untouched", d_pb, pb0, C, 0, 0);
        }
        free(pre), free(ref), free(dw3), free(pb0), free(pb), free(db3);
    }
    free(dinp_set), free(dw_set);
    matmul_backward_cpu(dinp, dw, NULL, dout_r, inp, w, N, C, OC);
    matmul_backward_mixed(d_dinp, d_dw, d_db, d_dout, d_dout16, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward_mixed");
    check("matmul_backward_mixed", "dinp", d_dinp, dinp, ni, atol, rtol);
    check("matmul_backward_mixed", "dweight", d_dw, dw, nw, atol * 10, rtol); /* sums over N */
    check("matmul_backward_mixed", "dbias", d_db, db, OC, 1e-3, GT_F32_RTOL);
    float *dinp_now = gt_down(d_dinp, ni), *db_now = gt_down(d_db, OC);
    matmul_backward_cpu(NULL, dw, NULL, dout_r, inp, w, N, C, OC);
    matmul_backward_mixed(NULL, d_dw, NULL, d_dout, d_dout16, d_inp, d_w, N, C, OC, 0);
    launched("matmul_backward_mixed NULLs");
    check("matmul_backward_mixed NULLs", "dweight", d_dw, dw, nw, atol * 10, rtol);
    check("matmul_backward_mixed NULLs", "dinp untouched", d_dinp, dinp_now, ni, 0, 0);
    check("matmul_backward_mixed NULLs", "dbias untouched", d_db, db_now, OC, 0, 0);
    free_all();
    free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(dw), free(db);
    free(dout_r), free(dinp_now), free(db_now);
}

static void case_matmul_mixed(uint64_t *r)
{
    int N = rows(r, 70), C = dim8(r, 72), OC = dim8(r, 72);
    uint64_t s = vseed(r);
    g_off = 0;
    matmul_mixed_run(N, C, OC, s);
    g_off = 16;
    matmul_mixed_run(N, C, OC, s);
    g_off = 0;
}

/* ---- attention ---- */

static void case_attention(uint64_t *r)
{
    int B = rnd_int(r, 1, 3), NH = rnd_int(r, 1, 4), T = dim(r, 70);
    int hs = dim(r, 70 / NH), C = NH * hs;
    uint64_t s = vseed(r);
    int len[3];
    for (int b = 0; b < B; b++) { /* 1, full, and in between */
        int k = (int)(rnd(r) % 3);
        len[b] = k == 0 ? 1 : (k == 1 ? T : rnd_int(r, 1, T));
    }
    /* attention.h: positions >= len[b] are padding, which the CPU never reads: half the cases
     * fill them with NaN or inf in qkv and dout, which must not reach any real output */
    int junk = (int)(rnd(r) % 4);
    snprintf(g_case, sizeof(g_case), "attention B=%d T=%d C=%d NH=%d len={%d,%d,%d} padding %s", B,
             T, C, NH, len[0], B > 1 ? len[1] : 0, B > 2 ? len[2] : 0,
             junk == 0 ? "NaN" : (junk == 1 ? "inf" : "finite"));
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = gt_randv(nq, &s, -1, 1), *out = (float *)malloc(no * sizeof(float));
    float *att = (float *)malloc(na * sizeof(float)), *dout = gt_randv(no, &s, -1, 1);
    for (int b = 0; junk < 2 && b < B; b++) {
        for (int t = len[b]; t < T; t++) {
            size_t row = (size_t)b * T + t;
            for (int c = 0; c < 3 * C; c++)
                qkv[row * 3 * C + c] = junk == 0 ? NAN : (c % 2 ? INFINITY : -INFINITY);
            for (int c = 0; c < C; c++)
                dout[row * C + c] = junk == 0 ? NAN : INFINITY;
        }
    }
    float *dqkv = gt_randv(nq, &s, -1, 1), *dqkv0 = gt_copyv(dqkv, nq);
    int *d_len = IN_I(len, B);
    float *d_qkv = IN_F(qkv, nq), *d_dout = IN_F(dout, no);
    float *d_out = OUT_F(NULL, no), *d_att = OUT_F(NULL, na), *d_dqkv = OUT_F(dqkv, nq);

    attention_forward_cpu(out, att, qkv, len, B, T, C, NH);
    attention_forward(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    launched("attention_forward");
    check("attention_forward", "out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    check("attention_forward", "att", d_att, att, na, 1e-6, GT_F32_RTOL);
    attention_backward_cpu(dqkv, dout, qkv, att, len, B, T, C, NH);
    reset(d_att, att, na * sizeof(float)); /* the backward on the CPU's probabilities */
    attention_backward(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    launched("attention_backward");
    check("attention_backward", "dqkv", d_dqkv, dqkv, nq, 1e-4, GT_F32_RTOL);

    /* fused: the same out and dqkv; its backward takes its own forward's out and lse */
    float *d_lse = OUT_F(NULL, (size_t)B * NH * T);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    attention_forward_fused(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
    launched("attention_forward_fused");
    check("attention_forward_fused", "out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    reset(d_dqkv, dqkv0, nq * sizeof(float));
    attention_backward_fused(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH, 0);
    launched("attention_backward_fused");
    check("attention_backward_fused", "dqkv", d_dqkv, dqkv, nq, 1e-4, GT_F32_RTOL);
    /* bf16 in and out: qkv rounded (a copy: the CPU reference reads the fp32 one), out bf16,
     * dqkv16 overwritten (starts as NaN) with the backward alone, rounded, and its column sums
     * added to the bias gradient */
    float *q16f = gt_copyv(qkv, nq), *grad = (float *)calloc(nq + 1, sizeof(float));
    float *o16f = gt_copyv(dout, no);
    float *db = gt_randv((size_t)3 * C, &s, -1, 1), *d_db = OUT_F(db, (size_t)3 * C);
    float *db0 = gt_copyv(db, (size_t)3 * C);
    uint16_t *d_q16 = bf16_in(q16f, nq), *d_out16 = bf16_out(NULL, no);
    uint16_t *d_dout16 = bf16_in(o16f, no);
    uint16_t *d_dqkv16 = bf16_out(NULL, nq);
    attention_backward_cpu(grad, dout, qkv, att, len, B, T, C, NH);
    for (int c = 0; c < 3 * C; c++) {
        double sum = 0.0;
        for (size_t row = 0; row < (size_t)B * T; row++)
            sum += grad[row * 3 * C + c];
        db[c] += (float)sum;
    }
    CUDA_CHECK(cudaMemset(d_out16, 0xFF, no * 2));
    attention_forward_fused_bf16_qhoist(d_out16, d_lse, d_q16, d_len, B, T, C, NH, 0);
    launched("attention_forward_fused_bf16_qhoist");
    check_bf16("attention_forward_fused_bf16_qhoist", "out", d_out16, out, no, 2e-2, 5e-2);
    CUDA_CHECK(cudaMemset(d_out16, 0xFF, no * 2));
    attention_forward_fused_bf16_wgmma(d_out16, d_lse, d_q16, d_len, B, T, C, NH, 0);
    launched("attention_forward_fused_bf16_wgmma");
    check_bf16("attention_forward_fused_bf16_wgmma", "out", d_out16, out, no, 2e-2, 5e-2);
    CUDA_CHECK(cudaMemset(d_out16, 0xFF, no * 2));
    attention_forward_fused_bf16(d_out16, d_lse, d_q16, d_len, B, T, C, NH, 0);
    launched("attention_forward_fused_bf16");
    check_bf16("attention_forward_fused_bf16", "out", d_out16, out, no, 2e-2, 5e-2);
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xFF, nq * 2));
    attention_backward_fused_bf16_wgmma(d_dqkv16, NULL, d_dout16, d_q16, d_out16, d_lse, d_len, B,
                                        T, C, NH, 0, 0);
    launched("attention_backward_fused_bf16_wgmma");
    check_bf16("attention_backward_fused_bf16_wgmma", "dqkv16", d_dqkv16, grad, nq, 2e-2, 5e-2);
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xFF, nq * 2));
    attention_backward_fused_bf16(d_dqkv16, d_db, d_dout16, d_q16, d_out16, d_lse, d_len, B, T,
                                  C, NH, 0);
    launched("attention_backward_fused_bf16");
    check_bf16("attention_backward_fused_bf16", "dqkv16", d_dqkv16, grad, nq, 2e-2, 5e-2);
    check("attention_backward_fused_bf16", "dbias", d_db, db, (size_t)3 * C,
          1e-2 * sqrt((double)B * T), 2e-2);
    /* dQ from the stored dS^T: the same outputs */
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xFF, nq * 2));
    reset(d_db, db0, (size_t)3 * C * sizeof(float));
    attention_backward_fused_bf16_ds(d_dqkv16, d_db, d_dout16, d_q16, d_out16, d_lse, d_len, B,
                                     T, C, NH, 0);
    launched("attention_backward_fused_bf16_ds");
    check_bf16("attention_backward_fused_bf16_ds", "dqkv16", d_dqkv16, grad, nq, 2e-2, 5e-2);
    check("attention_backward_fused_bf16_ds", "dbias", d_db, db, (size_t)3 * C,
          1e-2 * sqrt((double)B * T), 2e-2);
    free(q16f), free(o16f), free(grad), free(db), free(db0);

    /* bf16 tensor-core GEMMs inside (attention_gpu_test's tolerances) */
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_att, 0xFF, na * sizeof(float)));
    attention_forward_mixed(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    launched("attention_forward_mixed");
    check("attention_forward_mixed", "out", d_out, out, no, 2e-2, 5e-2);
    check("attention_forward_mixed", "att", d_att, att, na, 1e-2, 5e-2);
    reset(d_dqkv, dqkv0, nq * sizeof(float));
    reset(d_att, att, na * sizeof(float));
    attention_backward_mixed(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    launched("attention_backward_mixed");
    check("attention_backward_mixed", "dqkv", d_dqkv, dqkv, nq, 2e-2, 5e-2);
    free_all();
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(dqkv0);
}

/* ---- pooling ---- */

static void case_pool(uint64_t *r)
{
    int B = rnd_int(r, 1, 6), T = dim(r, 70), C = dimx(r, 70);
    uint64_t s = vseed(r);
    int len[6];
    for (int b = 0; b < B; b++) {
        int k = (int)(rnd(r) % 3);
        len[b] = k == 0 ? 1 : (k == 1 ? T : rnd_int(r, 1, T));
    }
    int junk = (int)(rnd(r) % 2); /* NaN in the padding rows, which the CPU never reads */
    snprintf(g_case, sizeof(g_case), "pool B=%d T=%d C=%d len[0]=%d%s", B, T, C, len[0],
             junk ? " NaN padding" : "");
    size_t n = (size_t)B * T * C, no = (size_t)B * C;
    float *inp = gt_randv(n, &s, -1, 1), *out = (float *)malloc(no * sizeof(float));
    for (int b = 0; junk && b < B; b++)
        for (size_t i = ((size_t)b * T + len[b]) * C; i < (size_t)(b + 1) * T * C; i++)
            inp[i] = NAN;
    float *dout = gt_randv(no, &s, -1, 1), *dinp = gt_randv(n, &s, -1, 1);
    int *d_len = IN_I(len, B);
    float *d_inp = IN_F(inp, n), *d_dout = IN_F(dout, no);
    float *d_out = OUT_F(NULL, no), *d_dinp = OUT_F(dinp, n);

    meanpool_forward_cpu(out, inp, len, B, T, C);
    meanpool_forward(d_out, d_inp, d_len, B, T, C, 0);
    launched("meanpool_forward");
    check("meanpool_forward", "out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    meanpool_backward_cpu(dinp, dout, len, B, T, C);
    meanpool_backward(d_dinp, d_dout, d_len, B, T, C, 0);
    launched("meanpool_backward");
    check("meanpool_backward", "dinp", d_dinp, dinp, n, GT_F32_ATOL, GT_F32_RTOL);
    CUDA_CHECK(cudaMemset(d_out, 0xFF, no * sizeof(float)));
    clspool_forward_cpu(out, inp, B, T, C);
    clspool_forward(d_out, d_inp, B, T, C, 0);
    launched("clspool_forward");
    check("clspool_forward", "out", d_out, out, no, 0, 0);
    clspool_backward_cpu(dinp, dout, B, T, C);
    clspool_backward(d_dinp, d_dout, B, T, C, 0);
    launched("clspool_backward");
    check("clspool_backward", "dinp", d_dinp, dinp, n, GT_F32_ATOL, GT_F32_RTOL);
    free_all();
    free(inp), free(out), free(dout), free(dinp);
}

/* ---- cross-entropy ---- */

static void case_crossentropy(uint64_t *r)
{
    static const int big[] = {1023, 1024, 1025, 2049};
    int B = dim(r, 70), K = rnd(r) % 6 == 0 ? big[rnd(r) % 4] : dim(r, 70);
    if (K > 70 && B > 8)
        B = rnd_int(r, 1, 8);
    float span = rnd(r) % 3 == 0 ? 80.0f : 4.0f; /* 80: exp overflows without the max shift */
    uint64_t s = vseed(r);
    size_t n = (size_t)B * K;
    snprintf(g_case, sizeof(g_case), "crossentropy B=%d K=%d logits +-%g", B, K, (double)span);
    int *labels = (int *)malloc(B * sizeof(int));
    for (int b = 0; b < B; b++)
        labels[b] = (int)(rnd(r) % (uint64_t)K);
    labels[B - 1] = K - 1;
    float *logits = gt_randv(n, &s, -span, span), *probs = (float *)malloc(n * sizeof(float));
    float *losses = (float *)malloc(B * sizeof(float)), *dlogits = gt_randv(n, &s, -1, 1);
    int *d_labels = IN_I(labels, B);
    float *d_logits = IN_F(logits, n), *d_probs = OUT_F(NULL, n), *d_losses = OUT_F(NULL, B);
    float *d_dlogits = OUT_F(dlogits, n);

    crossentropy_forward_cpu(losses, probs, logits, labels, 0.1f, NULL, B, K);
    crossentropy_forward(d_losses, d_probs, d_logits, d_labels, 0.1f, NULL, B, K, 0);
    launched("crossentropy_forward");
    check("crossentropy_forward", "losses", d_losses, losses, B, GT_F32_ATOL, GT_F32_RTOL);
    check("crossentropy_forward", "probs", d_probs, probs, n, 1e-7, GT_F32_RTOL);
    reset(d_probs, probs, n * sizeof(float));
    crossentropy_backward_cpu(dlogits, probs, labels, 0.1f, NULL, 1.0f / B, B, K);
    crossentropy_backward(d_dlogits, d_probs, d_labels, 0.1f, NULL, 1.0f / B, B, K, 0);
    launched("crossentropy_backward");
    check("crossentropy_backward", "dlogits", d_dlogits, dlogits, n, GT_F32_ATOL, GT_F32_RTOL);
    free_all();
    free(labels), free(logits), free(probs), free(losses), free(dlogits);
}

/* ---- GELU and the casts ---- */

static size_t draw_n(uint64_t *r) /* flat sizes: edges around a block of 256, and products */
{
    static const size_t e[] = {1, 31, 32, 33, 255, 256, 257, 511, 513};
    if (rnd(r) % 3 == 0)
        return e[rnd(r) % (sizeof(e) / sizeof(e[0]))];
    return (size_t)dim(r, 70) * (size_t)dim(r, 70);
}

static void case_gelu(uint64_t *r)
{
    size_t n = draw_n(r);
    uint64_t s = vseed(r);
    snprintf(g_case, sizeof(g_case), "gelu n=%zu", n);
    float *x = gt_randv(n, &s, -6, 6), *out = (float *)malloc(n * sizeof(float));
    float *dout = gt_randv(n, &s, -1, 1), *dinp = gt_randv(n, &s, -1, 1);
    float *d_x = IN_F(x, n), *d_dout = IN_F(dout, n), *d_out = OUT_F(NULL, n);
    float *d_dinp = OUT_F(dinp, n);
    uint16_t *d_o16 = bf16_out(NULL, n);

    gelu_forward_cpu(out, x, n);
    gelu_forward(d_out, d_x, n, 0);
    launched("gelu_forward");
    check("gelu_forward", "out", d_out, out, n, 1e-5, 1e-5); /* as gelu_gpu_test */
    /* bf16 input (the pre-activation the bf16 model keeps): the CPU on the rounded values */
    float *xh = gt_copyv(x, n), *outh = (float *)malloc(n * sizeof(float) + 1);
    uint16_t *d_xh = bf16_in(xh, n);
    gelu_forward_cpu(outh, xh, n);
    gelu_forward_bf16(d_o16, d_xh, n, 0);
    launched("gelu_forward_bf16");
    check_bf16("gelu_forward_bf16", "out", d_o16, outh, n, 1e-6, 2.0 / 512);
    free(xh), free(outh);
    { /* the bf16 backward of a (N, OC) GELU'd GEMM output: dinp16 (from NaN) is one bf16
       * rounding of the CPU's backward on the rounded input and gradient, and dbias gains its
       * column sums */
        int N = rows(r, 600), OC = dim(r, 70);
        size_t m = (size_t)N * OC;
        snprintf(g_case, sizeof(g_case), "gelu_backward_bf16 N=%d OC=%d", N, OC);
        float *px = gt_randv(m, &s, -6, 6), *pd = gt_randv(m, &s, -1, 1);
        float *db = gt_randv(OC, &s, -1, 1), *ref = (float *)calloc(m + 1, sizeof(float));
        uint16_t *d_px = bf16_in(px, m), *d_pd = bf16_in(pd, m), *d_16 = bf16_out(NULL, m);
        float *d_db = OUT_F(db, OC);
        gelu_backward_cpu(ref, px, pd, m);
        for (int c = 0; c < OC; c++) {
            double sum = 0.0;
            for (int i = 0; i < N; i++)
                sum += ref[(size_t)i * OC + c];
            db[c] += (float)sum;
        }
        gelu_backward_bf16(d_16, d_db, d_px, d_pd, N, OC, 0);
        launched("gelu_backward_bf16");
        check_bf16("gelu_backward_bf16", "dinp16", d_16, ref, m, GT_F32_ATOL,
                   2.0 / 512 + GT_F32_RTOL);
        check("gelu_backward_bf16", "dbias", d_db, db, OC, 1e-4 * sqrt((double)N), GT_F32_RTOL);
        free(px), free(pd), free(db), free(ref);
    }
    gelu_backward_cpu(dinp, x, dout, n);
    gelu_backward(d_dinp, d_x, d_dout, n, 0);
    launched("gelu_backward");
    check("gelu_backward", "dinp", d_dinp, dinp, n, GT_F32_ATOL, GT_F32_RTOL);
    free_all();
    free(x), free(out), free(dout), free(dinp);
}

static void case_cast(uint64_t *r)
{
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u,
                                       0x3f808001u, 0x7f7fffffu, 0x7f7f7fffu, 0x7f800000u,
                                       0xff800000u, 0x00018000u, 0x80008000u, 0x00000001u,
                                       0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fffffffu};
    size_t n = draw_n(r);
    snprintf(g_case, sizeof(g_case), "cast n=%zu", n);
    uint32_t *bits = (uint32_t *)malloc(n * 4);
    uint16_t *h16 = (uint16_t *)malloc(n * 2), *got16 = (uint16_t *)malloc(n * 2);
    uint32_t *got32 = (uint32_t *)malloc(n * 4);
    for (size_t i = 0; i < n; i++) { /* random patterns, ties, and the special values */
        uint64_t x = rnd(r);
        bits[i] = (uint32_t)x;
        if (x >> 62 == 0)
            bits[i] = (bits[i] & 0xffff0000u) | 0x8000u;
        else if (x >> 60 == 4)
            bits[i] = special[(x >> 32) % (sizeof(special) / sizeof(special[0]))];
    }
    float *d_in = (float *)in_up(bits, n * 4);
    uint16_t *d_16 = bf16_out(NULL, n);
    cast_f32_to_bf16(d_16, d_in, n, 0);
    launched("cast_f32_to_bf16");
    CUDA_CHECK(cudaMemcpy(got16, d_16, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float f = bf16_asfloat(bits[i]);
        h16[i] = bf16_from_f32(f);
        /* bf16.h: NaN -> canonical NaN; cvt.rn on a GPU gives a NaN too */
        int ok = isnan(f) ? isnan(bf16_to_f32(got16[i])) : got16[i] == h16[i];
        if (!ok && bad++ < 5)
            printf("cast_f32_to_bf16: 0x%08x -> device 0x%04x host 0x%04x; case %s\n",
                   (unsigned)bits[i], got16[i], h16[i], g_case);
    }
    uint16_t *d_h16 = (uint16_t *)in_up(h16, n * 2);
    float *d_32 = OUT_F(NULL, n);
    cast_bf16_to_f32(d_32, d_h16, n, 0);
    launched("cast_bf16_to_f32");
    CUDA_CHECK(cudaMemcpy(got32, d_32, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (got32[i] != (uint32_t)h16[i] << 16 && bad++ < 10)
            printf("cast_bf16_to_f32: 0x%04x -> 0x%08x; case %s\n", h16[i], (unsigned)got32[i],
                   g_case);
    }
    if (bad) {
        printf("casts: %d mismatches (GANTRY_SHAPES_SEED=%llu)\n", bad, g_seed);
        gt_failed++;
        stat_of("cast_f32_to_bf16")->worst = INFINITY;
    }
    free_all();
    free(bits), free(h16), free(got16), free(got32);
}

/* ---- AdamW over a segment table, the gradient norm and clipping ---- */

static void case_adamw(uint64_t *r)
{
    struct adamw_segment segs[ADAMW_GPU_MAX_SEGMENTS];
    int k = (int)(rnd(r) % 4);
    int nseg = k == 0 ? 1 : (k == 1 ? ADAMW_GPU_MAX_SEGMENTS : rnd_int(r, 1, 12));
    size_t n = 0;
    for (int i = 0; i < nseg; i++) { /* gaps between tensors must stay untouched */
        n += (size_t)(rnd(r) % 3 == 0 ? rnd_int(r, 1, 5) : 0);
        segs[i].offset = n;
        segs[i].count = rnd(r) % 8 == 0 ? 0 : (size_t)(rnd(r) % 2 ? dim(r, 70) : dim(r, 600));
        if (i == 0 && nseg < 4 && rnd(r) % 6 == 0) /* past adamw.cu's grid cap (1024 x 256) */
            segs[i].count = (size_t)(262144 + rnd_int(r, -1, 3000));
        segs[i].decay = (int)(rnd(r) % 2);
        n += segs[i].count;
    }
    n += (size_t)rnd_int(r, 1, 5); /* and after the last one */
    /* clipping: 0 off (no gscale), 1 max_norm <= 0 (coef = extra), 2 active, 3 inactive */
    int clip = (int)(rnd(r) % 4), with16 = (int)(rnd(r) % 2), steps = rnd_int(r, 1, 3);
    float extra = rnd(r) % 2 ? 1.0f : 0.5f;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    uint64_t s = vseed(r);
    snprintf(g_case, sizeof(g_case), "adamw nseg=%d n=%zu clip=%d extra=%g bf16=%d steps=%d", nseg,
             n, clip, (double)extra, with16, steps);
    float *p = gt_randv(n, &s, -1, 1), *m = gt_randv(n, &s, -0.01f, 0.01f);
    float *v = gt_randv(n, &s, 0, 1e-4f), *g = NULL;
    float *d_p = OUT_F(p, n), *d_m = OUT_F(m, n), *d_v = OUT_F(v, n);
    float *d_norm = OUT_F(NULL, 1), *d_coef = OUT_F(NULL, 1);
    float *p16_init = gt_copyv(p, n);
    uint16_t *d_p16 = with16 ? bf16_out(p16_init, n) : NULL; /* gaps keep these bits */
    for (int t = 1; t <= steps; t++) {
        float span = rnd(r) % 2 ? 0.1f : 0.001f;
        free(g);
        g = gt_randv(n, &s, -span, span);
        float *d_g = IN_F(g, n);
        float lr = 1e-2f / (float)t, norm = (float)sqrt(sumsq_cpu(g, n));
        float max_norm = clip == 1 ? 0.0f : (clip == 2 ? norm * 0.5f : norm * 2.0f + 1.0f);
        float coef = 1.0f;
        if (max_norm > 0.0f) {
            float q = max_norm / (norm + 1e-6f);
            coef = q < 1.0f ? q : 1.0f;
        }
        coef *= extra;
        grad_norm(d_norm, d_g, n, 0);
        launched("grad_norm");
        check("grad_norm", "norm", d_norm, &norm, 1, 0, 1e-6);
        float *first = gt_down(d_norm, 1);
        grad_norm(d_norm, d_g, n, 0);
        launched("grad_norm");
        check_bits("grad_norm", "repeat", d_norm, first, 1);
        free(first);
        grad_clip_coef(d_coef, d_norm, max_norm, extra, 0);
        launched("grad_clip_coef");
        check("grad_clip_coef", "coef", d_coef, &coef, 1, 0, 1e-6);
        adamw_update_cpu(p, g, m, v, segs, nseg, lr, b1, b2, eps, wd, t, clip ? &coef : NULL);
        adamw_update(d_p, d_p16, d_g, d_m, d_v, segs, nseg, lr, b1, b2, eps, wd, t,
                     clip ? d_coef : NULL, 0);
        launched("adamw_update");
        check("adamw_update", "params", d_p, p, n, 1e-6, 1e-5);
        check("adamw_update", "m", d_m, m, n, 1e-9, 1e-5);
        check("adamw_update", "v", d_v, v, n, 1e-12, 1e-5);
    }
    if (with16)
        check_bf16("adamw_update", "params_bf16", d_p16, p, n, 1e-6, 1.0 / 256);
    free_all();
    free(p), free(m), free(v), free(g), free(p16_init);
}

/* ---- driver ---- */

struct opcase {
    const char *name;
    void (*run)(uint64_t *r);
};

static unsigned long long env_ull(const char *name, unsigned long long dflt)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end;
    unsigned long long x = strtoull(e, &end, 10);
    if (*end) {
        fprintf(stderr, "%s=%s: not a number\n", name, e);
        exit(2);
    }
    return x;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    static const struct opcase ops[] = {
        {"embed", case_embed},         {"embbag", case_embbag},
        {"layernorm", case_layernorm}, {"matmul", case_matmul},
        {"matmul_bf16", case_matmul_bf16}, {"matmul_mixed", case_matmul_mixed},
        {"attention", case_attention}, {"pool", case_pool},
        {"crossentropy", case_crossentropy}, {"gelu", case_gelu},
        {"cast", case_cast},           {"adamw", case_adamw},
    };
    gt_require_device("shapes_gpu_test");
    g_seed = env_ull("GANTRY_SHAPES_SEED", 1);
    unsigned long long iters = env_ull("GANTRY_SHAPES_ITERS", 32);
    g_verbose = env_ull("GANTRY_SHAPES_VERBOSE", 0) != 0;
    printf("shapes_gpu_test: GANTRY_SHAPES_SEED=%llu GANTRY_SHAPES_ITERS=%llu\n", g_seed, iters);
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        uint64_t r = g_seed * 0x100000001B3ULL + o; /* each op its own stream of shapes */
        unsigned long long n = iters;
        double t0 = now_s();
        int first = g_nstats;
        uint64_t ro = r ^ 0x5DEECE66DULL; /* offsets: their own stream, the shapes stay */
        for (unsigned long long i = 0; i < n; i++) {
            /* half the cases on slices 4-12 bytes past the allocation's alignment (the matmul
             * cases choose their own) */
            g_off = rnd(&ro) % 2 ? 4 * (size_t)rnd_int(&ro, 1, 3) : 0;
            ops[o].run(&r);
        }
        g_off = 0;
        printf("[%s: %llu cases, %.2f s]\n", ops[o].name, n, now_s() - t0);
        for (int k = first; k < g_nstats; k++)
            printf("  %-28s %4d launches  worst max|diff|/tol %.3g\n", g_stats[k].name,
                   g_stats[k].cases, g_stats[k].worst);
    }
    return gt_summary("shapes_gpu_test");
}
