// Masked multi-head attention on the GPU against kernels/attention_cpu.c: the output, the saved
// probabilities (zero outside each sequence's L x L block) and the accumulated dqkv, for lengths
// 1, T and in between; fp32 and the bf16 tensor-core variant (*_mixed, bf16 tolerances); the
// fused kernels (*_fused, and *_fused_bf16 on bf16 tensor cores, bf16 in and out, with bf16
// tolerances): out, the row log-sum-exp and dqkv (in bf16, with the bias gradient summed in the
// kernels), every output written, padding rows of qkv and dout never read (NaN there changes
// nothing), bit-identical reruns.
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/gpu_testutil.h"

#include <string.h>


/* lse (B,NH,T) of the scaled scores over the keys j < len[b] (0 for padding rows), in double */
static float *lse_reference(const float *qkv, const int *len, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float *lse = (float *)calloc((size_t)B * NH * T + 1, sizeof(float));
    double *s = (double *)malloc(((size_t)T + 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < len[b]; i++) {
                const float *q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < len[b]; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    double d = 0.0;
                    for (int x = 0; x < hs; x++)
                        d += (double)q[x] * k[x];
                    s[j] = d / sqrt((double)hs);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < len[b]; j++)
                    sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + i] = (float)(mx + log(sum));
            }
    free(s);
    return lse;
}

/* NaN into every padding row (t >= len[b]) of x (B,T,width) */
static void poison_padding(float *x, const int *len, int B, int T, int width)
{
    for (int b = 0; b < B; b++)
        for (int t = len[b]; t < T; t++)
            for (int c = 0; c < width; c++)
                x[((size_t)b * T + t) * width + c] = NAN;
}

/* The fp32 fused kernels against the same CPU results (out: forward, dqkv: dqkv0 + backward). */
static void check_fused(const float *qkv, const float *dout, const float *dqkv0, const float *out,
                        const float *dqkv, const int *len, int B, int T, int C, int NH)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *lse = lse_reference(qkv, len, B, T, C, NH);
    int *d_len = GT_UPI(len, B);
    float *d_qkv = GT_UPF(qkv, nq), *d_dout = GT_UPF(dout, no), *d_dqkv = GT_UPF(dqkv0, nq);
    float *d_out, *d_lse;
    CUDA_CHECK(cudaMalloc(&d_out, no * sizeof(float) + 1));
    CUDA_CHECK(cudaMalloc(&d_lse, nl * sizeof(float) + 1));
    CUDA_CHECK(cudaMemset(d_out, 0xff, no * sizeof(float))); /* NaN: every entry must be written */
    CUDA_CHECK(cudaMemset(d_lse, 0xff, nl * sizeof(float)));

    attention_forward_fused(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
    gt_compare("attention_fwd_fused out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("attention_fwd_fused lse", d_lse, lse, nl, 1e-5, 1e-5);
    attention_backward_fused(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH, 0);
    gt_compare("attention_bwd_fused dqkv", d_dqkv, dqkv, nq, 1e-4, GT_F32_RTOL);

    /* padding rows of qkv and dout are never read; the same inputs give the same bits */
    float *got_out = gt_down(d_out, no), *got_dqkv = gt_down(d_dqkv, nq);
    float *pq = gt_copyv(qkv, nq), *pd = gt_copyv(dout, no);
    poison_padding(pq, len, B, T, 3 * C);
    poison_padding(pd, len, B, T, C);
    CUDA_CHECK(cudaMemcpy(d_qkv, pq, nq * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, pd, no * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dqkv, dqkv0, nq * sizeof(float), cudaMemcpyHostToDevice));
    attention_forward_fused(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
    attention_backward_fused(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH, 0);
    gt_compare("fused rerun, NaN pad out", d_out, got_out, no, 0, 0);
    gt_compare("fused rerun, NaN pad dqkv", d_dqkv, got_dqkv, nq, 0, 0);

    free(got_out), free(got_dqkv), free(pq), free(pd), free(lse);
    cudaFree(d_len), cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_dqkv), cudaFree(d_out);
    cudaFree(d_lse);
}

/* n device bf16 values widened into a new device fp32 buffer (for gt_compare) */
static float *widen(const uint16_t *d16, size_t n)
{
    float *f = gt_down_bf16(d16, n), *d = GT_UPF(f, n);
    free(f);
    return d;
}

/* Host bf16 bits of x (rounded to nearest even). */
static uint16_t *to_bf16(const float *x, size_t n)
{
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_from_f32(x[i]);
    return h;
}

/* n device bf16 values as host bits */
static uint16_t *down16(const uint16_t *d, size_t n)
{
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    return h;
}

/* The tensor-core kernels (bf16 in and out: qkv, dout rounded) against the CPU's out and the
 * backward alone (grad: attention_backward_cpu into zeros, from the fp32 inputs), with attention_*_mixed's bf16 tolerances: out (bf16), lse,
 * dqkv16 (overwritten: it starts as NaN) and the bias gradient it sums into dbias (dbias0 plus
 * grad's column sums); without dbias the same dqkv16 bits; padding rows of qkv and dout never
 * read; bit-identical reruns. */
static void check_fused_bf16(const float *qkv, const float *dout, const float *out,
                             const float *grad, const int *len, int B, int T, int C, int NH,
                             uint64_t seed)
{
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    uint64_t s = seed;
    float *lse = lse_reference(qkv, len, B, T, C, NH);
    float *db0 = gt_randv((size_t)3 * C, &s, -1, 1), *db = gt_copyv(db0, (size_t)3 * C);
    for (int c = 0; c < 3 * C; c++) {
        double sum = 0.0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            sum += grad[r * 3 * C + c];
        db[c] += (float)sum;
    }
    uint16_t *q16 = to_bf16(qkv, nq), *o16 = to_bf16(dout, no);
    int *d_len = GT_UPI(len, B);
    uint16_t *d_qkv = (uint16_t *)gt_up(q16, nq, 2), *d_dout = (uint16_t *)gt_up(o16, no, 2);
    uint16_t *d_out, *d_dqkv16;
    float *d_db = GT_UPF(db0, 3 * C), *d_lse;
    CUDA_CHECK(cudaMalloc(&d_out, no * 2 + 2));
    CUDA_CHECK(cudaMalloc(&d_dqkv16, nq * 2 + 2));
    CUDA_CHECK(cudaMalloc(&d_lse, nl * sizeof(float) + 1));
    CUDA_CHECK(cudaMemset(d_out, 0xff, no * 2)); /* NaN: every entry must be written */
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    CUDA_CHECK(cudaMemset(d_lse, 0xff, nl * sizeof(float)));

    attention_forward_fused_bf16(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
    float *w = widen(d_out, no);
    gt_compare("attention_fwd_fbf16 out", w, out, no, 2e-2, 5e-2);
    cudaFree(w);
    gt_compare("attention_fwd_fbf16 lse", d_lse, lse, nl, 2e-2, 2e-2);
    {   /* the forward with the queries' operands kept in registers: the same bits */
        uint16_t *o_def = down16(d_out, no);
        float *l_def = gt_down(d_lse, nl);
        CUDA_CHECK(cudaMemset(d_out, 0xff, no * 2));
        CUDA_CHECK(cudaMemset(d_lse, 0xff, nl * sizeof(float)));
        attention_forward_fused_bf16_qhoist(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
        uint16_t *o_h = down16(d_out, no);
        float *l_h = gt_down(d_lse, nl);
        int same_h = memcmp(o_h, o_def, no * 2) == 0 && memcmp(l_h, l_def, nl * 4) == 0;
        printf("%-24s %s\n", "fbf16 qhoist out, lse", same_h ? "OK" : "FAILED (bits differ)");
        gt_failed += !same_h;
        /* the wgmma forward (head size 64 where the device code has wgmma; else the one above):
         * the CPU's values within the same tolerances, the default's within an fp32 rounding
         * before the bf16 one (its products sum in the hardware's order) */
        const bool wg = C / NH > 32 && C / NH <= 64 && attention_fused_wgmma_available();
        CUDA_CHECK(cudaMemset(d_out, 0xff, no * 2));
        CUDA_CHECK(cudaMemset(d_lse, 0xff, nl * sizeof(float)));
        attention_forward_fused_bf16_wgmma(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
        printf("fbf16 wgmma: %s\n", wg ? "on tensor cores by wgmma" : "not here (qhoist's)");
        float *wg_out = widen(d_out, no), *def_out = (float *)malloc(no * sizeof(float));
        for (size_t i = 0; i < no; i++)
            def_out[i] = bf16_to_f32(o_def[i]);
        gt_compare("attention_fwd_wgmma out", wg_out, out, no, 2e-2, 5e-2);
        gt_compare("attention_fwd_wgmma lse", d_lse, lse, nl, 2e-2, 2e-2);
        gt_compare("wgmma out vs default", wg_out, def_out, no, 1e-6, 1.0 / 128);
        gt_compare("wgmma lse vs default", d_lse, l_def, nl, 1e-5, 1e-5);
        cudaFree(wg_out);
        free(def_out);
        CUDA_CHECK(cudaMemcpy(d_out, o_def, no * 2, cudaMemcpyHostToDevice)); /* the default's */
        CUDA_CHECK(cudaMemcpy(d_lse, l_def, nl * 4, cudaMemcpyHostToDevice));
        free(o_def), free(l_def), free(o_h), free(l_h);
    }
    attention_backward_fused_bf16(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH,
                                  0);
    w = widen(d_dqkv16, nq);
    gt_compare("attention_bwd_fbf16 dqkv16", w, grad, nq, 2e-2, 5e-2);
    cudaFree(w);
    gt_compare("attention_bwd_fbf16 dbias", d_db, db, (size_t)3 * C, 1e-2 * sqrt((double)B * T),
               2e-2);
    uint16_t *got_out = down16(d_out, no), *got16 = down16(d_dqkv16, nq);
    float *got_db = gt_down(d_db, (size_t)3 * C);

    /* no dbias: the same gradient */
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    attention_backward_fused_bf16(d_dqkv16, NULL, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH,
                                  0);
    uint16_t *again = down16(d_dqkv16, nq);
    int same = memcmp(again, got16, nq * 2) == 0;
    printf("%-24s %s\n", "fbf16 no dbias, dqkv16", same ? "OK" : "FAILED (bits differ)");
    gt_failed += !same;
    free(again);

    /* dQ from the stored dS^T (attention_backward_fused_bf16_ds): the CPU's gradient within the
     * same tolerances; dK and dV (the same kernel, which also stores dS^T) the default's bits;
     * dQ within a bf16 rounding or two of the default's (dS's fp32 sums run in another order) */
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    CUDA_CHECK(cudaMemcpy(d_db, db0, 3 * C * sizeof(float), cudaMemcpyHostToDevice));
    attention_backward_fused_bf16_ds(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C,
                                     NH, 0);
    w = widen(d_dqkv16, nq);
    gt_compare("attention_bwd_fbf16_ds dqkv16", w, grad, nq, 2e-2, 5e-2);
    gt_compare("attention_bwd_fbf16_ds dbias", d_db, db, (size_t)3 * C,
               1e-2 * sqrt((double)B * T), 2e-2);
    uint16_t *ds16 = down16(d_dqkv16, nq);
    float *ds_db = gt_down(d_db, (size_t)3 * C);
    float *def = (float *)malloc(nq * sizeof(float));
    int kv_same = 1;
    for (size_t i = 0; i < nq; i++) {
        def[i] = bf16_to_f32(got16[i]);
        if (i % (3 * (size_t)C) >= (size_t)C && ds16[i] != got16[i])
            kv_same = 0;
    }
    printf("%-24s %s\n", "fbf16_ds dK, dV bits", kv_same ? "OK" : "FAILED (bits differ)");
    gt_failed += !kv_same;
    gt_compare("fbf16_ds dqkv16 vs default", w, def, nq, 2e-3, 1e-2);
    gt_compare("fbf16_ds dbias vs default", d_db, got_db, (size_t)3 * C,
               1e-3 * sqrt((double)B * T), 1e-2);
    cudaFree(w);

    /* the wgmma backward (head size 33 to 64 where the device code has wgmma; else the kernels
     * above), recomputing dQ and from the stored dS^T: the CPU's gradient within the same
     * tolerances, the default's within a bf16 rounding or two (the hardware's order of sums) */
    uint16_t *wg16 = NULL;
    for (int sds = 0; sds < 2; sds++) {
        CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
        CUDA_CHECK(cudaMemcpy(d_db, db0, 3 * C * sizeof(float), cudaMemcpyHostToDevice));
        attention_backward_fused_bf16_wgmma(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B,
                                            T, C, NH, sds, 0);
        float *wq = widen(d_dqkv16, nq);
        gt_compare(sds ? "bwd_wgmma_ds dqkv16" : "bwd_wgmma dqkv16", wq, grad, nq, 2e-2, 5e-2);
        gt_compare(sds ? "bwd_wgmma_ds dbias" : "bwd_wgmma dbias", d_db, db, (size_t)3 * C,
                   1e-2 * sqrt((double)B * T), 2e-2);
        gt_compare(sds ? "bwd_wgmma_ds vs default" : "bwd_wgmma vs default", wq, def, nq, 2e-3,
                   1e-2);
        gt_compare(sds ? "bwd_wgmma_ds dbias vs def" : "bwd_wgmma dbias vs def", d_db, got_db,
                   (size_t)3 * C, 1e-3 * sqrt((double)B * T), 1e-2);
        if (!sds)
            wg16 = down16(d_dqkv16, nq);
        cudaFree(wq);
    }
    free(def);

    /* NaN in qkv's and dout's padding rows changes no bit of any output */
    for (int b = 0; b < B; b++)
        for (int t = len[b]; t < T; t++) {
            for (int c = 0; c < 3 * C; c++)
                q16[((size_t)b * T + t) * 3 * C + c] = BF16_NAN;
            for (int c = 0; c < C; c++)
                o16[((size_t)b * T + t) * C + c] = BF16_NAN;
        }
    CUDA_CHECK(cudaMemcpy(d_qkv, q16, nq * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, o16, no * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_db, db0, 3 * C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_out, 0xff, no * 2));
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    attention_forward_fused_bf16(d_out, d_lse, d_qkv, d_len, B, T, C, NH, 0);
    attention_backward_fused_bf16(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C, NH,
                                  0);
    uint16_t *o2 = down16(d_out, no), *d2 = down16(d_dqkv16, nq);
    int same_out = memcmp(o2, got_out, no * 2) == 0, same16 = memcmp(d2, got16, nq * 2) == 0;
    printf("%-24s %s\n", "fbf16 rerun, NaN pad out", same_out ? "OK" : "FAILED (bits differ)");
    printf("%-24s %s\n", "fbf16 rerun, NaN pad d16", same16 ? "OK" : "FAILED (bits differ)");
    gt_failed += !same_out + !same16;
    gt_compare("fbf16 rerun, NaN pad dbias", d_db, got_db, (size_t)3 * C, 0, 0);
    /* and the stored-dS^T backward: its own bits again */
    CUDA_CHECK(cudaMemcpy(d_db, db0, 3 * C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    attention_backward_fused_bf16_ds(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B, T, C,
                                     NH, 0);
    uint16_t *d3 = down16(d_dqkv16, nq);
    int same_ds = memcmp(d3, ds16, nq * 2) == 0;
    printf("%-24s %s\n", "fbf16_ds rerun, NaN pad", same_ds ? "OK" : "FAILED (bits differ)");
    gt_failed += !same_ds;
    /* and the wgmma backward: its own bits again */
    CUDA_CHECK(cudaMemcpy(d_db, db0, 3 * C * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_dqkv16, 0xff, nq * 2));
    attention_backward_fused_bf16_wgmma(d_dqkv16, d_db, d_dout, d_qkv, d_out, d_lse, d_len, B, T,
                                        C, NH, 0, 0);
    uint16_t *d4 = down16(d_dqkv16, nq);
    int same_wg = memcmp(d4, wg16, nq * 2) == 0;
    printf("%-24s %s\n", "bwd_wgmma rerun, NaN pad", same_wg ? "OK" : "FAILED (bits differ)");
    gt_failed += !same_wg;
    free(d4), free(wg16);
    gt_compare("fbf16_ds rerun, NaN pad dbias", d_db, ds_db, (size_t)3 * C, 0, 0);
    free(d3), free(ds16), free(ds_db);

    free(got_out), free(got16), free(o2), free(d2), free(o16), free(got_db), free(q16), free(lse);
    free(db0), free(db);
    cudaFree(d_len), cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_db), cudaFree(d_dqkv16);
    cudaFree(d_out), cudaFree(d_lse);
}

/* q and k uniform in [-amp, amp], v in [-1, 1]: amp 3 gives scores of standard deviation ~3,
 * peaked rows whose running max moves between key tiles (the fused kernels' rescaling must be
 * right); q shifted by -shift and k by +shift put every score near -shift^2 sqrt(hs) */
static void check(int B, int T, int C, int NH, const int *len, uint64_t seed, float amp,
                  float shift)
{
    uint64_t s = seed;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = gt_randv(nq, &s, -1, 1), *out = gt_randv(no, &s, 0, 1);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int c = 0; c < 2 * C; c++) { /* q - shift, k + shift: every score far below 0 */
            float *x = &qkv[r * 3 * C + c];
            *x = *x * amp + (c < C ? -shift : shift);
            if (shift != 0.0f) /* multiples of 1/32 below 8: exact in bf16, so the bf16 kernels
                                * see the CPU's scores, whose size would otherwise turn q and
                                * k's rounding into errors of several percent in P */
                *x = roundf(*x * 32.0f) / 32.0f;
        }
    float *att = gt_randv(na, &s, 0, 1), *dout = gt_randv(no, &s, -1, 1);
    float *dqkv = gt_randv(nq, &s, -1, 1);
    int *d_len = GT_UPI(len, B);
    float *d_qkv = GT_UPF(qkv, nq), *d_out = GT_UPF(out, no), *d_att = GT_UPF(att, na);
    float *d_dout = GT_UPF(dout, no), *d_dqkv = GT_UPF(dqkv, nq);

    printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    attention_forward_cpu(out, att, qkv, len, B, T, C, NH);
    attention_forward(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    gt_compare("attention_forward out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("attention_forward att", d_att, att, na, 1e-6, GT_F32_RTOL);
    float *dqkv0 = gt_copyv(dqkv, nq);
    attention_backward_cpu(dqkv, dout, qkv, att, len, B, T, C, NH);
    attention_backward(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    gt_compare("attention_backward dqkv", d_dqkv, dqkv, nq, 1e-4, GT_F32_RTOL);
    /* the fused kernels on the smaller cases (head size 64 and several tiles: the last case);
     * the largest one would take the emulator a minute */
    if (na <= (1u << 20)) {
        check_fused(qkv, dout, dqkv0, out, dqkv, len, B, T, C, NH);
        float *grad = (float *)calloc(nq + 1, sizeof(float));
        attention_backward_cpu(grad, dout, qkv, att, len, B, T, C, NH);
        check_fused_bf16(qkv, dout, out, grad, len, B, T, C, NH, seed);
        free(grad);
    }

    /* bf16 tensor-core GEMMs inside: q, k, v, dout and P rounded to bf16 (2^-9 relative each) */
    attention_forward_mixed(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    gt_compare("attention_fwd_mixed out", d_out, out, no, 2e-2, 5e-2);
    gt_compare("attention_fwd_mixed att", d_att, att, na, 1e-2, 5e-2);
    CUDA_CHECK(cudaMemcpy(d_dqkv, dqkv0, nq * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_att, att, na * sizeof(float), cudaMemcpyHostToDevice));
    attention_backward_mixed(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    gt_compare("attention_bwd_mixed dqkv", d_dqkv, dqkv, nq, 2e-2, 5e-2);
    free(dqkv0);
    cudaFree(d_len), cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_att), cudaFree(d_dout);
    cudaFree(d_dqkv);
    free(qkv), free(out), free(att), free(dout), free(dqkv);
}

/* One line "name: OK|FAILED (why)" and a failure counted when !ok */
static void tune_expect(const char *name, bool ok, const char *why)
{
    printf("%-24s %s%s%s\n", name, ok ? "OK" : "FAILED (", ok ? "" : why, ok ? "" : ")");
    if (!ok)
        gt_failed++;
}

/* tune_mismatch_bf16: 0 for the same bits, <= 1 with every element an ulp of bf16 away,
 * > 1 with one element off by 4 tolerances, infinite with a NaN */
static void check_mismatch(void)
{
    const size_t n = 5000;
    uint64_t s = 11;
    float *x = gt_randv(n, &s, -2, 2);
    uint16_t *h = to_bf16(x, n), *h2 = (uint16_t *)malloc(n * 2);
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)bf16_to_f32(h[i]) * bf16_to_f32(h[i]);
    const float rms = (float)sqrt(ss / n);
    uint16_t *d = (uint16_t *)gt_up(h, n, 2), *d2;
    CUDA_CHECK(cudaMalloc((void **)&d2, n * 2));
    float m = tune_mismatch_bf16(d, d, n, 0);
    printf("tune mismatch, same bits: %g\n", m);
    tune_expect("tune mismatch same", m == 0.0f, "not 0");
    for (size_t i = 0; i < n; i++) /* the next bf16 away from zero: one ulp */
        h2[i] = (uint16_t)(h[i] + 1);
    CUDA_CHECK(cudaMemcpy(d2, h2, n * 2, cudaMemcpyHostToDevice));
    m = tune_mismatch_bf16(d2, d, n, 0);
    printf("tune mismatch, every element an ulp off: %g\n", m);
    tune_expect("tune mismatch ulp", m <= 1.0f, "a rounding difference refused");
    memcpy(h2, h, n * 2);
    const size_t k = 1234;
    const float v = bf16_to_f32(h[k]);
    h2[k] = bf16_from_f32(v + (v < 0 ? -1 : 1) * (4.0f * rms / 128 + fabsf(v) / 64));
    CUDA_CHECK(cudaMemcpy(d2, h2, n * 2, cudaMemcpyHostToDevice));
    m = tune_mismatch_bf16(d2, d, n, 0);
    printf("tune mismatch, one element 4 tolerances off: %g\n", m);
    tune_expect("tune mismatch one", m > 2.5f && m < 5.5f, "not about 4");
    h2[k] = 0x7fc0; /* NaN */
    CUDA_CHECK(cudaMemcpy(d2, h2, n * 2, cudaMemcpyHostToDevice));
    m = tune_mismatch_bf16(d2, d, n, 0);
    tune_expect("tune mismatch NaN", isinf(m), "a NaN not caught");
    float *df = GT_UPF(x, n), *df2;
    CUDA_CHECK(cudaMalloc((void **)&df2, n * sizeof(float)));
    x[k] += 1.0f;
    CUDA_CHECK(cudaMemcpy(df2, x, n * sizeof(float), cudaMemcpyHostToDevice));
    m = tune_mismatch_f32(df2, df, n, 0);
    printf("tune mismatch f32, one element 1 off: %g\n", m);
    tune_expect("tune mismatch f32", m > 1.0f, "a wrong element passed");
    cudaFree(d), cudaFree(d2), cudaFree(df), cudaFree(df2);
    free(x), free(h), free(h2);
}

/* tune_attention without GANTRY_AUTOTUNE_UNVERIFIED: none of the variants has run on a GPU yet,
 * so nothing runs, the defaults are taken, and the ones that could have run are named */
static void check_tune_verified_only(int B, int T, int C, int NH)
{
    struct tune_attention_result t;
    char line[1024];
    unsetenv("GANTRY_AUTOTUNE_UNVERIFIED");
    tune_attention(&t, B, T, C, NH, 1, 0);
    tune_attention_describe(&t, line, sizeof(line));
    printf("tune, verified only: %s\n", line);
    const int hs = C / NH, wg = hs > 32 && hs <= 64 && attention_fused_wgmma_available();
    bool ok = t.fwd_pick == 0 && t.bwd_pick == 0 && !t.fwd[0].timed && !t.bwd[0].timed &&
              t.fwd[ATTN_FWD_QHOIST].unverified && t.fwd[ATTN_FWD_WGMMA].unverified == wg &&
              t.bwd[ATTN_BWD_DS].unverified && t.bwd[ATTN_BWD_WGMMA_DS].unverified == wg &&
              strstr(line, "not yet run on a GPU, so not timed: mma.sync q-hoist") != NULL;
    tune_expect("tune verified only", ok, "an unverified variant ran, or was not named");
}

/* tune_attention with GANTRY_AUTOTUNE_UNVERIFIED=1: every variant that can run here timed,
 * each agreeing with the default (the q-hoist forward exactly: the same bits), picks among those;
 * the stored dS^T only when allowed, wgmma only at head sizes 33 to 64 on wgmma device code; a
 * second call cached. */
static void check_tune(int B, int T, int C, int NH, int allow_ds)
{
    struct tune_attention_result t, t2;
    char line[1024];
    setenv("GANTRY_AUTOTUNE_UNVERIFIED", "1", 1);
    tune_attention(&t, B, T, C, NH, allow_ds, 0);
    tune_attention_describe(&t, line, sizeof(line));
    printf("tune B=%d T=%d C=%d NH=%d ds %d: %s\n", B, T, C, NH, allow_ds, line);
    const int hs = C / NH, wg = hs > 32 && hs <= 64 && attention_fused_wgmma_available();
    bool ok = !t.cached && t.fwd[ATTN_FWD_DEFAULT].timed && t.fwd[ATTN_FWD_QHOIST].timed &&
              t.fwd[ATTN_FWD_WGMMA].timed == wg && t.bwd[ATTN_BWD_DEFAULT].timed &&
              t.bwd[ATTN_BWD_DS].timed == allow_ds && t.bwd[ATTN_BWD_WGMMA].timed == wg &&
              t.bwd[ATTN_BWD_WGMMA_DS].timed == (wg && allow_ds);
    tune_expect("tune eligible", ok, "the wrong variants ran");
    ok = t.fwd[ATTN_FWD_QHOIST].err == 0.0f;
    for (int k = 0; k < ATTN_FWD_KINDS; k++)
        ok = ok && (!t.fwd[k].timed || (t.fwd[k].agrees && t.fwd[k].ms > 0 && t.fwd[k].ms < 1e9f));
    for (int k = 0; k < ATTN_BWD_KINDS; k++)
        ok = ok && (!t.bwd[k].timed || (t.bwd[k].agrees && t.bwd[k].ms > 0 && t.bwd[k].ms < 1e9f));
    tune_expect("tune agree", ok, "a variant differs from the default, or has no time");
    ok = t.fwd[t.fwd_pick].timed && t.fwd[t.fwd_pick].agrees && t.bwd[t.bwd_pick].timed &&
         t.bwd[t.bwd_pick].agrees && t.fwd[t.fwd_pick].ms <= t.fwd[0].ms &&
         t.bwd[t.bwd_pick].ms <= t.bwd[0].ms;
    tune_expect("tune pick", ok, "picked a variant that did not run, agree or win");
    tune_attention(&t2, B, T, C, NH, allow_ds, 0);
    tune_expect("tune cached", t2.cached && t2.fwd_pick == t.fwd_pick &&
                                   t2.bwd_pick == t.bwd_pick && t2.bwd[0].ms == t.bwd[0].ms,
                "not the first call's results");
}

/* attention_cudnn_fixup_*: padding rows (t >= len[b]) of out and entries of lse zeroed, the rest
 * untouched; padding rows of dqkv16 zeroed and, with dbias, its column sums over the other rows
 * added to dbias (checked against double sums of the host copy); without dbias the same rows. */
static void check_cudnn_fixups(void)
{
    const int B = 3, T = 40, C = 48, NH = 2, hlen[3] = {40, 17, 1};
    const size_t NC = (size_t)B * T * C, rows = (size_t)B * NH * T;
    uint64_t seed = 11;
    float *x = gt_randv(3 * NC, &seed, -2.0f, 2.0f), *l = gt_randv(rows, &seed, 1.0f, 5.0f);
    float *b0 = gt_randv(3 * C, &seed, -1.0f, 1.0f);
    uint16_t *h = to_bf16(x, 3 * NC);
    uint16_t *d_out = (uint16_t *)gt_up(h, NC, 2), *d_dq = (uint16_t *)gt_up(h, 3 * NC, 2);
    uint16_t *d_dq2 = (uint16_t *)gt_up(h, 3 * NC, 2);
    float *d_lse = GT_UPF(l, rows), *d_db = GT_UPF(b0, 3 * C);
    int *d_len = GT_UPI(hlen, B);
    attention_cudnn_fixup_fwd(d_out, d_lse, d_len, B, T, C, NH, 0);
    attention_cudnn_fixup_bwd(d_dq, d_db, d_len, B, T, C, 0);
    attention_cudnn_fixup_bwd(d_dq2, NULL, d_len, B, T, C, 0);
    uint16_t *out = down16(d_out, NC), *dq = down16(d_dq, 3 * NC), *dq2 = down16(d_dq2, 3 * NC);
    float *lse = gt_down(d_lse, rows), *db = gt_down(d_db, 3 * C);
    bool rows_ok = true, lse_ok = true, db_ok = true;
    double *sum = (double *)calloc(3 * C, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const bool pad = t >= hlen[b];
            const size_t r = (size_t)b * T + t;
            for (int c = 0; c < C; c++)
                rows_ok &= out[r * C + c] == (pad ? 0 : h[r * C + c]);
            for (int c = 0; c < 3 * C; c++) {
                const uint16_t want = pad ? 0 : h[r * 3 * C + c];
                rows_ok &= dq[r * 3 * C + c] == want && dq2[r * 3 * C + c] == want;
                if (!pad)
                    sum[c] += bf16_to_f32(h[r * 3 * C + c]);
            }
            for (int hh = 0; hh < NH; hh++) {
                const size_t i = ((size_t)b * NH + hh) * T + t;
                lse_ok &= lse[i] == (pad ? 0.0f : l[i]);
            }
        }
    for (int c = 0; c < 3 * C; c++)
        db_ok &= fabs(db[c] - (b0[c] + sum[c])) <= 1e-4 * (1.0 + fabs(sum[c]));
    tune_expect("cudnn fixup rows", rows_ok, "padding rows not zero, or other rows changed");
    tune_expect("cudnn fixup lse", lse_ok, "padding entries not zero, or others changed");
    tune_expect("cudnn fixup dbias", db_ok, "not dbias + the column sums of the valid rows");
    cudaFree(d_out), cudaFree(d_dq), cudaFree(d_dq2), cudaFree(d_lse), cudaFree(d_db);
    cudaFree(d_len);
    free(x), free(l), free(b0), free(h), free(out), free(dq), free(dq2), free(lse), free(db);
    free(sum);
}

/* cuDNN's attention (ATTN_FWD_CUDNN, ATTN_BWD_CUDNN) against ours on random inputs. Where cuDNN
 * is loaded, it must run at this shape (a graph cuDNN refuses is this code's fault) and agree
 * with ours within the autotune's tolerance (tune_mismatch_*); where it is not (the emulator, a
 * machine without cuDNN), the kinds must run ours: the same bits. */
static void check_cudnn(int B, int T, int C, int NH, const int *hlen)
{
    char why[256];
    const int have = attention_cudnn_load(why, sizeof(why));
    printf("cudnn B=%d T=%d C=%d NH=%d: %s%s\n", B, T, C, NH, have ? "loaded, " : "", why);
    const size_t NC = (size_t)B * T * C, rows = (size_t)B * NH * T;
    uint64_t seed = 12;
    float *x = gt_randv(3 * NC, &seed, -2.0f, 2.0f), *g = gt_randv(NC, &seed, -1.0f, 1.0f);
    uint16_t *hq = to_bf16(x, 3 * NC), *hg = to_bf16(g, NC);
    uint16_t *qkv = (uint16_t *)gt_up(hq, 3 * NC, 2), *dout = (uint16_t *)gt_up(hg, NC, 2);
    int *len = GT_UPI(hlen, B);
    uint16_t *out[2], *dq[2];
    float *lse[2], *db[2];
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc((void **)&out[i], NC * 2));
        CUDA_CHECK(cudaMalloc((void **)&dq[i], 3 * NC * 2));
        CUDA_CHECK(cudaMalloc((void **)&lse[i], rows * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&db[i], 3 * C * sizeof(float)));
        CUDA_CHECK(cudaMemset(out[i], 0xff, NC * 2)); /* NaN: what nobody writes shows */
        CUDA_CHECK(cudaMemset(dq[i], 0xff, 3 * NC * 2));
        CUDA_CHECK(cudaMemset(lse[i], 0xff, rows * sizeof(float)));
        CUDA_CHECK(cudaMemset(db[i], 0, 3 * C * sizeof(float)));
    }
    attention_forward_fused_bf16(out[0], lse[0], qkv, len, B, T, C, NH, 0);
    attention_backward_fused_bf16(dq[0], db[0], dout, qkv, out[0], lse[0], len, B, T, C, NH, 0);
    int ran = 1;
    if (have) { /* directly first: a refusal must not hide behind the kinds' fallback */
        char w[256];
        ran = !attention_forward_cudnn_bf16(out[1], lse[1], qkv, len, B, T, C, NH, 0, w,
                                            sizeof(w));
        if (ran)
            ran = !attention_backward_cudnn_bf16(dq[1], dout, qkv, out[0], lse[0], len, B, T, C,
                                                 NH, 0, w, sizeof(w));
        if (!ran)
            printf("cudnn: %s\n", w);
    }
    tune_expect("cudnn runs", ran, "cuDNN is loaded but refused the attention");
    attention_forward_fused_bf16_kind(ATTN_FWD_CUDNN, out[1], lse[1], qkv, len, B, T, C, NH, 0);
    attention_backward_fused_bf16_kind(ATTN_BWD_CUDNN, dq[1], db[1], dout, qkv, out[0], lse[0],
                                       len, B, T, C, NH, 0);
    const float e_out = tune_mismatch_bf16(out[1], out[0], NC, 0),
                e_lse = tune_mismatch_f32(lse[1], lse[0], rows, 0),
                e_dq = tune_mismatch_bf16(dq[1], dq[0], 3 * NC, 0),
                e_db = tune_mismatch_f32(db[1], db[0], 3 * C, 0);
    printf("cudnn vs ours, in tolerances: out %g, lse %g, dqkv %g, dbias %g\n", e_out, e_lse,
           e_dq, e_db);
    if (have)
        tune_expect("cudnn agrees", e_out <= 1 && e_lse <= 1 && e_dq <= 1 && e_db <= 1,
                    "cuDNN's results differ from ours");
    else
        tune_expect("cudnn kinds run ours", e_out == 0 && e_lse == 0 && e_dq == 0 && e_db == 0,
                    "without cuDNN the kinds did not run our kernels");
    for (int i = 0; i < 2; i++)
        cudaFree(out[i]), cudaFree(dq[i]), cudaFree(lse[i]), cudaFree(db[i]);
    cudaFree(qkv), cudaFree(dout), cudaFree(len);
    free(x), free(g), free(hq), free(hg);
}

/* `attention_gpu_test cudnn`: only cuDNN's (hack/gpu-check.sh runs that under compute-sanitizer
 * apart from the rest) */
static void check_cudnn_all(void)
{
    check_cudnn_fixups();
    const int len8[3] = {130, 64, 1};
    check_cudnn(3, 130, 128, 2, len8); /* head size 64 */
    const int len9[2] = {40, 23};
    check_cudnn(2, 40, 96, 3, len9); /* head size 32 */
}

int main(int argc, char **argv)
{
    gt_require_device("attention_gpu_test");
    if (argc > 1 && !strcmp(argv[1], "cudnn")) {
        check_cudnn_all();
        return gt_summary("attention_gpu_test");
    }
    const int len1[3] = {1, 64, 29};
    check(3, 64, 96, 4, len1, 1, 1.0f, 0.0f);
    const int len2[2] = {256, 100}; /* GPT-2 head size 64 */
    check(2, 256, 768, 12, len2, 2, 1.0f, 0.0f);
    const int len3[2] = {5, 7}; /* T not a multiple of 32 */
    check(2, 7, 24, 3, len3, 3, 1.0f, 0.0f);
    const int len4[2] = {70, 33}; /* fused: head size 128 (the largest), several key tiles */
    check(2, 70, 256, 2, len4, 4, 1.0f, 0.0f);
    const int len5[3] = {1, 40, 37}; /* fused: head size 40, padded to 64 */
    check(3, 40, 120, 3, len5, 5, 1.0f, 0.0f);
    const int len6[2] = {200, 130}; /* peaked softmax, 4 key tiles of 64 */
    check(2, 200, 128, 2, len6, 6, 3.0f, 0.0f);
    const int len7[2] = {40, 70}; /* scores near -100: exp(0 - lse) overflows; masks needed */
    check(2, 70, 64, 2, len7, 7, 1.0f, 4.0f);
    check_mismatch();
    check_tune_verified_only(2, 130, 128, 2);
    check_tune(2, 130, 128, 2, 1); /* head size 64: wgmma where it can run */
    check_tune(2, 130, 128, 2, 0); /* without the stored dS^T */
    check_tune(3, 40, 96, 3, 1);   /* head size 32: mma.sync only */
    check_cudnn_all();
    return gt_summary("attention_gpu_test");
}
