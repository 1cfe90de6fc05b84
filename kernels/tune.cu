// Picking kernels on the GPU at hand, the way cuDNN's benchmark mode picks convolution
// algorithms (training.autotune; kernels/gpu.h, "tune.cu"): the bf16 fused attention's variants
// and the GELU backward's two forms (its own pass, or cuBLASLt's DGELU epilogue) are each run on
// random inputs of the training shape, checked against the default kernels' results on the same
// inputs, and timed; the fastest one that agrees is kept.
//
// Why at run time: the variants trade differently on different GPUs and shapes (wgmma exists only
// on sm_90a; the stored dS^T costs memory traffic to save exponentials; cuBLASLt's epilogue
// choice is the library's), and the wgmma kernels' operand layouts are checked on hardware only
// where a test run has had a GPU (docs/gpu.md): a variant whose results differ from the
// default's by more than rounding is never taken, and the line the caller prints says so.
//
// Agreement: the same sums in another order and the same bf16 roundings of operands can differ
// by an ulp of bf16 (2^-8 relative) in a few elements, and by fp32 roundings everywhere; a wrong
// layout or mask is off by the size of the values. So a variant agrees when every element of
// every output is within 1/64 of the default's value plus 1/128 of the output's RMS.
#include "kernels/gpu_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fwd_names[ATTN_FWD_KINDS] = {"mma.sync", "mma.sync q-hoist", "wgmma",
                                                      "cuDNN"};
static const char *const bwd_names[ATTN_BWD_KINDS] = {"mma.sync", "mma.sync dS^T", "wgmma",
                                                      "wgmma dS^T", "cuDNN"};

extern "C" const char *attention_fwd_kind_name(int kind)
{
    return kind >= 0 && kind < ATTN_FWD_KINDS ? fwd_names[kind] : "?";
}

extern "C" const char *attention_bwd_kind_name(int kind)
{
    return kind >= 0 && kind < ATTN_BWD_KINDS ? bwd_names[kind] : "?";
}

/* A cuDNN call that could not run (the default kernel ran instead): said once per direction */
static bool cudnn_said[2];

extern "C" int attention_cudnn_fell_back(int bwd)
{
    return cudnn_said[bwd != 0];
}

static void cudnn_fell_back(int bwd, const char *why)
{
    bool *said = cudnn_said;
    if (!said[bwd])
        fprintf(stderr, "gantry: cuDNN's attention %s did not run, so ours did (said once): %s\n",
                bwd ? "backward" : "forward", why);
    said[bwd] = true;
}

/* cuDNN's attention with what ours writes in padding rows (attention_cudnn_fixup_*); 0 when it
 * ran, else 1 with why and nothing written. The kinds below fall back to ours on 1; the tune
 * instead leaves the variant out and says why. */
static int cudnn_forward(uint16_t *out, float *lse, const uint16_t *qkv, const int *len, int B,
                         int T, int C, int NH, cudaStream_t stream, char *why, size_t n)
{
    if (attention_forward_cudnn_bf16(out, lse, qkv, len, B, T, C, NH, stream, why, n))
        return 1;
    attention_cudnn_fixup_fwd(out, lse, len, B, T, C, NH, stream);
    return 0;
}

static int cudnn_backward(uint16_t *dqkv16, float *dbias, const uint16_t *dout,
                          const uint16_t *qkv, const uint16_t *out, const float *lse,
                          const int *len, int B, int T, int C, int NH, cudaStream_t stream,
                          char *why, size_t n)
{
    if (attention_backward_cudnn_bf16(dqkv16, dout, qkv, out, lse, len, B, T, C, NH, stream, why,
                                      n))
        return 1;
    attention_cudnn_fixup_bwd(dqkv16, dbias, len, B, T, C, stream);
    return 0;
}

extern "C" void attention_forward_fused_bf16_kind(int kind, uint16_t *out, float *lse,
                                                  const uint16_t *qkv, const int *len, int B,
                                                  int T, int C, int NH,
                                                  struct CUstream_st *stream)
{
    char why[256];
    switch (kind) {
    case ATTN_FWD_CUDNN:
        if (!cudnn_forward(out, lse, qkv, len, B, T, C, NH, stream, why, sizeof(why)))
            break;
        cudnn_fell_back(0, why);
        attention_forward_fused_bf16(out, lse, qkv, len, B, T, C, NH, stream);
        break;
    case ATTN_FWD_QHOIST:
        attention_forward_fused_bf16_qhoist(out, lse, qkv, len, B, T, C, NH, stream);
        break;
    case ATTN_FWD_WGMMA:
        attention_forward_fused_bf16_wgmma(out, lse, qkv, len, B, T, C, NH, stream);
        break;
    default:
        attention_forward_fused_bf16(out, lse, qkv, len, B, T, C, NH, stream);
    }
}

extern "C" void attention_backward_fused_bf16_kind(int kind, uint16_t *dqkv16, float *dbias,
                                                   const uint16_t *dout, const uint16_t *qkv,
                                                   const uint16_t *out, const float *lse,
                                                   const int *len, int B, int T, int C, int NH,
                                                   struct CUstream_st *stream)
{
    char why[256];
    switch (kind) {
    case ATTN_BWD_CUDNN:
        if (!cudnn_backward(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH, stream, why,
                            sizeof(why)))
            break;
        cudnn_fell_back(1, why);
        attention_backward_fused_bf16(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH,
                                      stream);
        break;
    case ATTN_BWD_DS:
        attention_backward_fused_bf16_ds(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH,
                                         stream);
        break;
    case ATTN_BWD_WGMMA:
    case ATTN_BWD_WGMMA_DS:
        attention_backward_fused_bf16_wgmma(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH,
                                            kind == ATTN_BWD_WGMMA_DS, stream);
        break;
    default:
        attention_backward_fused_bf16(dqkv16, dbias, dout, qkv, out, lse, len, B, T, C, NH,
                                      stream);
    }
}

/* ---- agreement ---- */

static __device__ __forceinline__ float tune_f32(float x)
{
    return x;
}
static __device__ __forceinline__ float tune_f32(uint16_t x)
{
    return bf16_bits_to_f32(x);
}

#define TUNE_RTOL (1.0f / 64)
#define TUNE_ATOL_RMS (1.0f / 128)
#define TUNE_THREADS 256
#define TUNE_BLOCKS_MAX 512

struct tune_part {
    float s, m;
};

/* part[block] = (sum of ref^2, max of |a - ref| - TUNE_RTOL |ref|) over the block's elements; a
 * NaN or infinity in either makes the max infinite. */
template <typename T>
static __global__ void tune_diff_kernel(struct tune_part *part, const T *a, const T *ref, size_t n)
{
    float s = 0.0f, m = -INFINITY;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = tune_f32(a[i]), r = tune_f32(ref[i]);
        const float d = fabsf(x - r) - TUNE_RTOL * fabsf(r);
        m = fmaxf(m, isfinite(x) && isfinite(r) ? d : INFINITY);
        s += r * r;
    }
    s = block_sum(s);
    m = block_max(m);
    if (threadIdx.x == 0)
        part[blockIdx.x].s = s, part[blockIdx.x].m = m;
}

template <typename T>
static float mismatch(const T *a, const T *ref, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return 0.0f;
    const int blocks = (int)(CEIL_DIV(n, TUNE_THREADS * 8) < TUNE_BLOCKS_MAX
                                 ? CEIL_DIV(n, TUNE_THREADS * 8)
                                 : TUNE_BLOCKS_MAX);
    struct tune_part *d = (struct tune_part *)gpu_scratch(blocks * sizeof(*d), stream),
                     h[TUNE_BLOCKS_MAX];
    tune_diff_kernel<T><<<blocks, TUNE_THREADS, 0, stream>>>(d, a, ref, n);
    GPU_LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(h, d, blocks * sizeof(*d), cudaMemcpyDeviceToHost, stream));
    gpu_scratch_free(d, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    double s = 0.0;
    float m = -INFINITY;
    for (int b = 0; b < blocks; b++)
        s += h[b].s, m = fmaxf(m, h[b].m);
    if (!isfinite(m) && m > 0)
        return INFINITY;
    const float atol = TUNE_ATOL_RMS * (float)sqrt(s / (double)n);
    if (m <= 0.0f)
        return 0.0f;
    return atol > 0.0f ? m / atol : INFINITY;
}

extern "C" float tune_mismatch_bf16(const uint16_t *a, const uint16_t *ref, size_t n,
                                              struct CUstream_st *stream)
{
    return mismatch(a, ref, n, stream);
}

extern "C" float tune_mismatch_f32(const float *a, const float *ref, size_t n,
                                             struct CUstream_st *stream)
{
    return mismatch(a, ref, n, stream);
}

/* ---- the inputs: uniform in [-amp, amp), from a hash of the index (no host copy) ---- */

static __device__ __forceinline__ uint32_t tune_hash(uint32_t x)
{
    x ^= x >> 16, x *= 0x7feb352du;
    x ^= x >> 15, x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

static __global__ void tune_fill_kernel(uint16_t *p, size_t n, uint32_t seed, float amp)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t hi = tune_hash(seed + (uint32_t)(i >> 32));
        const uint32_t h = tune_hash((uint32_t)i * 2654435761u ^ hi);
        p[i] = f32_to_bf16_bits(amp * ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}

static void fill(uint16_t *p, size_t n, uint32_t seed, float amp, cudaStream_t stream)
{
    const size_t blocks = CEIL_DIV(n, 256) < 4096 ? CEIL_DIV(n, 256) : 4096;
    tune_fill_kernel<<<(unsigned)blocks, 256, 0, stream>>>(p, n, seed, amp);
    GPU_LAUNCH_CHECK();
}

/* ---- timing and picking ---- */

#define TUNE_REPS 5
#define TUNE_CACHE 4

/* A variant is timed by default only once hack/gpu-check.sh has run it on a GPU: its GPU tests, its
 * check-cpu line and compute-sanitizer clean (docs/gpu.md, "What has to be verified on a GPU").
 * A kernel that faults or hangs would otherwise take every bf16 training run down with it before
 * the check against the default could refuse it. GANTRY_AUTOTUNE_UNVERIFIED=1 times the others
 * too (gpu_bench --tune sets it, so hack/gpu-check.sh measures them; so do the emulator's tests).
 * Mark one here when a run has shown it (its "verify:" line in gpu-check's summary.txt). */
static const bool fwd_verified[ATTN_FWD_KINDS] = {true, false, false, false};
static const bool bwd_verified[ATTN_BWD_KINDS] = {true, false, false, false, false};
static const bool dgelu_verified[2] = {true, false};
/* matmul.cu's timing of cuBLASLt's candidate algorithms (matmul_tune_arm) */
static const bool gemm_verified = false;

static int unverified_ok(void)
{
    const char *v = getenv("GANTRY_AUTOTUNE_UNVERIFIED");
    return v && !strcmp(v, "1");
}

extern "C" int tune_gemm_admitted(void)
{
    return gemm_verified || unverified_ok();
}

/* e's state before anything runs: can_run (this device, this shape), verified (above) */
static int admit(struct tune_entry *e, bool can_run, bool verified, int unverified)
{
    e->unverified = can_run && !verified && !unverified;
    return can_run && (verified || unverified);
}

/* The last TUNE_CACHE results by key (plain ints: compared by memcmp), per process */
template <typename K, typename R> struct tune_memo {
    struct {
        K key;
        R r;
    } e[TUNE_CACHE];
    int n;
    bool find(const K &key, R *r) const
    {
        for (int i = 0; i < n && i < TUNE_CACHE; i++)
            if (!memcmp(&e[i].key, &key, sizeof(key))) {
                *r = e[i].r;
                r->cached = 1;
                return true;
            }
        return false;
    }
    void put(const K &key, const R &r)
    {
        e[n % TUNE_CACHE].key = key, e[n % TUNE_CACHE].r = r;
        n++;
    }
};

/* e->ms = the smaller of it and the time of run() (its work on the stream) */
template <typename F>
static void time_into(struct tune_entry *e, cudaEvent_t *ev, cudaStream_t stream, F run)
{
    e->ms = fminf(e->ms, gpu_time_ms(ev, stream, run));
}

struct tune_key {
    int B, T, C, NH, allow_ds, unverified;
};
static tune_memo<tune_key, tune_attention_result> attn_memo;

/* cudnn: cuDNN is loaded (whether it has a plan for the shape shows when it first runs) */
static bool eligible_fwd(int kind, int hs, bool cudnn)
{
    if (kind == ATTN_FWD_CUDNN)
        return cudnn;
    return kind != ATTN_FWD_WGMMA || (hs > 32 && hs <= 64 && attention_fused_wgmma_available());
}

static bool eligible_bwd(int kind, int hs, int allow_ds, bool cudnn)
{
    if (kind == ATTN_BWD_CUDNN)
        return cudnn;
    if ((kind == ATTN_BWD_DS || kind == ATTN_BWD_WGMMA_DS) && !allow_ds)
        return false;
    return (kind != ATTN_BWD_WGMMA && kind != ATTN_BWD_WGMMA_DS) ||
           (hs > 32 && hs <= 64 && attention_fused_wgmma_available());
}

/* The fastest agreeing entry of e[0..n), e[0] (the default) unless another is TUNE_MARGIN faster */
static int pick(const struct tune_entry *e, int n)
{
    int best = 0;
    for (int k = 1; k < n; k++)
        if (e[k].timed && e[k].agrees && e[k].ms < e[best].ms)
            best = k;
    return best != 0 && e[best].ms < TUNE_MARGIN * e[0].ms ? best : 0;
}

extern "C" void tune_attention(struct tune_attention_result *t, int B, int T, int C, int NH,
                                          int allow_ds, struct CUstream_st *stream)
{
    const int unv = unverified_ok();
    const struct tune_key key = {B, T, C, NH, allow_ds != 0, unv};
    if (attn_memo.find(key, t))
        return;
    memset(t, 0, sizeof(*t));
    const size_t NC = (size_t)B * T * C, rows = (size_t)B * NH * T;
    const int hs = C / NH;
    bool run_f[ATTN_FWD_KINDS], run_b[ATTN_BWD_KINDS];
    const bool cudnn = attention_cudnn_load(t->cudnn, sizeof(t->cudnn)) != 0;
    int nf = 0, nb = 0;
    for (int k = 0; k < ATTN_FWD_KINDS; k++)
        nf += run_f[k] = admit(&t->fwd[k], eligible_fwd(k, hs, cudnn), fwd_verified[k], unv);
    for (int k = 0; k < ATTN_BWD_KINDS; k++)
        nb += run_b[k] =
            admit(&t->bwd[k], eligible_bwd(k, hs, allow_ds, cudnn), bwd_verified[k], unv);
    if (NC == 0 || (nf <= 1 && nb <= 1)) { /* nothing to choose from: the defaults, none run */
        attn_memo.put(key, *t);
        return;
    }
    uint16_t *qkv, *dout, *out[2], *dqkv[2];
    float *lse[2], *dbias[2];
    int *len;
    CUDA_CHECK(cudaMalloc((void **)&qkv, 3 * NC * 2));
    CUDA_CHECK(cudaMalloc((void **)&dout, NC * 2));
    for (int i = 0; i < 2; i++) { /* [0]: the default's results, [1]: the variant's */
        CUDA_CHECK(cudaMalloc((void **)&out[i], NC * 2));
        CUDA_CHECK(cudaMalloc((void **)&dqkv[i], 3 * NC * 2));
        CUDA_CHECK(cudaMalloc((void **)&lse[i], rows * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&dbias[i], 3 * C * sizeof(float)));
    }
    CUDA_CHECK(cudaMalloc((void **)&len, B * sizeof(int)));
    /* Sequences padded as in training: the first full, the others T/2 to T tokens */
    int *hlen = (int *)malloc(B * sizeof(int));
    if (!hlen) {
        fprintf(stderr, "tune_attention: out of host memory\n");
        abort();
    }
    for (int b = 0; b < B; b++)
        hlen[b] = b == 0 ? T
                         : T - (int)((1103515245u * (unsigned)b + 12345u) % (unsigned)(T / 2 + 1));
    CUDA_CHECK(cudaMemcpyAsync(len, hlen, B * sizeof(int), cudaMemcpyHostToDevice, stream));
    /* scores of a few units' spread, as after a trained LayerNorm and qkv projection */
    fill(qkv, 3 * NC, 1, 2.0f, stream);
    fill(dout, NC, 2, 1.0f, stream);
    cudaEvent_t ev[2];
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));

    /* Each eligible variant once on the inputs, checked against the default's results; then
     * TUNE_REPS rounds over all of them (interleaved, so a slow spell of a shared GPU falls on
     * every variant), each keeping its fastest time. */
    for (int k = 0; k < ATTN_FWD_KINDS; k++) {
        struct tune_entry *e = &t->fwd[k];
        if (!run_f[k])
            continue;
        const int r = k != 0;
        /* cuDNN's first run here builds its plan for the shape, or says why it has none */
        if (k != ATTN_FWD_CUDNN)
            attention_forward_fused_bf16_kind(k, out[r], lse[r], qkv, len, B, T, C, NH, stream);
        else if (cudnn_forward(out[r], lse[r], qkv, len, B, T, C, NH, stream, t->cudnn,
                               sizeof(t->cudnn)))
            continue;
        e->err = k == 0 ? 0.0f
                        : fmaxf(mismatch(out[1], out[0], NC, stream),
                                mismatch(lse[1], lse[0], rows, stream));
        e->timed = 1, e->agrees = e->err <= 1.0f, e->ms = INFINITY;
    }
    for (int k = 0; k < ATTN_BWD_KINDS; k++) {
        struct tune_entry *e = &t->bwd[k];
        if (!run_b[k])
            continue;
        const int r = k != 0; /* every backward from the default forward's results */
        CUDA_CHECK(cudaMemsetAsync(dbias[r], 0, 3 * C * sizeof(float), stream));
        if (k != ATTN_BWD_CUDNN)
            attention_backward_fused_bf16_kind(k, dqkv[r], dbias[r], dout, qkv, out[0], lse[0],
                                               len, B, T, C, NH, stream);
        else if (cudnn_backward(dqkv[r], dbias[r], dout, qkv, out[0], lse[0], len, B, T, C, NH,
                                stream, t->cudnn, sizeof(t->cudnn)))
            continue;
        e->err = k == 0 ? 0.0f
                        : fmaxf(mismatch(dqkv[1], dqkv[0], 3 * NC, stream),
                                mismatch(dbias[1], dbias[0], 3 * C, stream));
        e->timed = 1, e->agrees = e->err <= 1.0f, e->ms = INFINITY;
    }
    for (int rep = 0; rep < TUNE_REPS; rep++) {
        for (int k = 0; k < ATTN_FWD_KINDS; k++)
            if (t->fwd[k].timed)
                time_into(&t->fwd[k], ev, stream, [&] {
                    attention_forward_fused_bf16_kind(k, out[1], lse[1], qkv, len, B, T, C, NH,
                                                      stream);
                });
        for (int k = 0; k < ATTN_BWD_KINDS; k++)
            if (t->bwd[k].timed)
                time_into(&t->bwd[k], ev, stream, [&] {
                    attention_backward_fused_bf16_kind(k, dqkv[1], dbias[1], dout, qkv, out[0],
                                                       lse[0], len, B, T, C, NH, stream);
                });
    }
    t->fwd_pick = pick(t->fwd, ATTN_FWD_KINDS);
    t->bwd_pick = pick(t->bwd, ATTN_BWD_KINDS);

    CUDA_CHECK(cudaEventDestroy(ev[0]));
    CUDA_CHECK(cudaEventDestroy(ev[1]));
    free(hlen);
    CUDA_CHECK(cudaFree(len));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaFree(out[i]));
        CUDA_CHECK(cudaFree(dqkv[i]));
        CUDA_CHECK(cudaFree(lse[i]));
        CUDA_CHECK(cudaFree(dbias[i]));
    }
    CUDA_CHECK(cudaFree(dout));
    CUDA_CHECK(cudaFree(qkv));
    attn_memo.put(key, *t);
}

/* "forward mma.sync 0.144 ms, ... wgmma 0.101 ms (differs: 35x tolerance); backward ...: taking
 * ..." */
static void describe(char *buf, size_t n, size_t *at, const char *dir,
                     const struct tune_entry *e, int kinds, const char *(*name)(int))
{
    buf_put(buf, n, at, "%s", dir);
    const char *sep = *dir ? " " : "";
    for (int k = 0; k < kinds; k++) {
        if (!e[k].timed && k != 0)
            continue;
        buf_put(buf, n, at, "%s%s", sep, name(k));
        if (e[k].timed)
            buf_put(buf, n, at, " %.3f ms", e[k].ms);
        if (e[k].timed && !e[k].agrees)
            buf_put(buf, n, at, " (REFUSED: differs from %s's results, %.3g x tolerance)", name(0),
                e[k].err);
        sep = ", ";
    }
    sep = " (not yet run on a GPU, so not timed: ";
    for (int k = 0; k < kinds; k++)
        if (e[k].unverified) {
            buf_put(buf, n, at, "%s%s", sep, name(k));
            sep = ", ";
        }
    if (sep[0] == ',')
        buf_put(buf, n, at, "; GANTRY_AUTOTUNE_UNVERIFIED=1 times them)");
}

extern "C" void tune_attention_describe(const struct tune_attention_result *t, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    describe(buf, n, &at, "forward", t->fwd, ATTN_FWD_KINDS, attention_fwd_kind_name);
    describe(buf, n, &at, "; backward", t->bwd, ATTN_BWD_KINDS, attention_bwd_kind_name);
    const struct tune_entry *cf = &t->fwd[ATTN_FWD_CUDNN], *cb = &t->bwd[ATTN_BWD_CUDNN];
    if (t->cudnn[0] && !cf->timed && !cf->unverified && !cb->timed && !cb->unverified)
        buf_put(buf, n, &at, "; cuDNN not timed: %s", t->cudnn);
    buf_put(buf, n, &at, ": taking %s / %s%s", attention_fwd_kind_name(t->fwd_pick),
        attention_bwd_kind_name(t->bwd_pick), t->cached ? " (timed before in this process)" : "");
}

/* ---- the GELU backward: its own pass, or in the GEMM's epilogue ---- */

static const char *dgelu_name(int kind)
{
    return kind == 0 ? "GEMM + GELU pass" : kind == 1 ? "GEMM with DGELU epilogue" : "?";
}

struct dgelu_key {
    int N, F, C, unverified;
};
static tune_memo<dgelu_key, tune_dgelu_result> dgelu_memo;

/* kind 0: matmul_backward_mixed_set_bf16 then gelu_backward_bf16; 1: the epilogue (-1: none) */
static int dgelu_run(int kind, uint16_t *dpre16, float *dpre_bias, float *dweight,
                     const float *dout, const uint16_t *dout16, const uint16_t *inp,
                     const uint16_t *pre, const uint16_t *weight, uint16_t *tmp16, int N, int F,
                     int C, cudaStream_t stream)
{
    if (kind == 1)
        return matmul_backward_mixed_dgelu_bf16(dpre16, dpre_bias, dweight, NULL, dout, dout16,
                                                inp, pre, weight, N, F, C, stream);
    matmul_backward_mixed_set_bf16(tmp16, dweight, NULL, dout, dout16, inp, weight, N, F, C,
                                   stream);
    gelu_backward_bf16(dpre16, dpre_bias, pre, tmp16, N, F, stream);
    return 0;
}

extern "C" void tune_dgelu(struct tune_dgelu_result *t, int N, int F, int C,
                           struct CUstream_st *stream)
{
    const int unv = unverified_ok();
    const struct dgelu_key key = {N, F, C, unv};
    if (dgelu_memo.find(key, t))
        return;
    memset(t, 0, sizeof(*t));
    const size_t NF = (size_t)N * F, NC = (size_t)N * C;
    admit(&t->k[0], true, dgelu_verified[0], unv);
    /* (whether cuBLASLt has the epilogue shows only by running it) */
    if (!admit(&t->k[1], true, dgelu_verified[1], unv) || NF == 0 || NC == 0) {
        dgelu_memo.put(key, *t);
        return;
    }
    uint16_t *dout16, *inp, *pre, *w, *tmp16, *dpre[2];
    float *dout, *dweight, *dbias[2];
    CUDA_CHECK(cudaMalloc((void **)&dout16, NC * 2));
    CUDA_CHECK(cudaMalloc((void **)&dout, NC * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&inp, NF * 2));
    CUDA_CHECK(cudaMalloc((void **)&pre, NF * 2));
    CUDA_CHECK(cudaMalloc((void **)&tmp16, NF * 2));
    CUDA_CHECK(cudaMalloc((void **)&w, (size_t)C * F * 2));
    CUDA_CHECK(cudaMalloc((void **)&dweight, (size_t)C * F * sizeof(float)));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc((void **)&dpre[i], NF * 2));
        CUDA_CHECK(cudaMalloc((void **)&dbias[i], F * sizeof(float)));
    }
    fill(dout16, NC, 3, 1.0f, stream);
    fill(pre, NF, 4, 3.0f, stream); /* pre-activations across GELU's bend */
    fill(inp, NF, 5, 1.0f, stream);
    fill(w, (size_t)C * F, 6, 0.05f, stream);
    CUDA_CHECK(cudaMemsetAsync(dout, 0, NC * sizeof(float), stream)); /* (read for dbias only) */
    CUDA_CHECK(cudaMemsetAsync(dweight, 0, (size_t)C * F * sizeof(float), stream));
    cudaEvent_t ev[2];
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));
    for (int k = 0; k < 2; k++) {
        CUDA_CHECK(cudaMemsetAsync(dbias[k], 0, F * sizeof(float), stream));
        if (dgelu_run(k, dpre[k], dbias[k], dweight, dout, dout16, inp, pre, w, tmp16, N, F, C,
                      stream))
            continue; /* no epilogue algorithm here */
        struct tune_entry *e = &t->k[k];
        e->err = k == 0 ? 0.0f
                        : fmaxf(mismatch(dpre[1], dpre[0], NF, stream),
                                mismatch(dbias[1], dbias[0], (size_t)F, stream));
        e->timed = 1, e->agrees = e->err <= 1.0f, e->ms = INFINITY;
    }
    for (int rep = 0; rep < TUNE_REPS; rep++)
        for (int k = 0; k < 2; k++)
            if (t->k[k].timed)
                time_into(&t->k[k], ev, stream, [&] {
                    dgelu_run(k, dpre[1], dbias[1], dweight, dout, dout16, inp, pre, w, tmp16, N,
                              F, C, stream);
                });
    t->pick = pick(t->k, 2);
    CUDA_CHECK(cudaEventDestroy(ev[0]));
    CUDA_CHECK(cudaEventDestroy(ev[1]));
    uint16_t *b16[] = {dout16, inp, pre, tmp16, w, dpre[0], dpre[1]};
    for (size_t i = 0; i < sizeof(b16) / sizeof(b16[0]); i++)
        CUDA_CHECK(cudaFree(b16[i]));
    float *b32[] = {dout, dweight, dbias[0], dbias[1]};
    for (size_t i = 0; i < sizeof(b32) / sizeof(b32[0]); i++)
        CUDA_CHECK(cudaFree(b32[i]));
    dgelu_memo.put(key, *t);
}

extern "C" void tune_dgelu_describe(const struct tune_dgelu_result *t, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    describe(buf, n, &at, "", t->k, 2, dgelu_name);
    if (!t->k[1].timed && !t->k[1].unverified && t->k[0].timed)
        buf_put(buf, n, &at, " (no DGELU epilogue in cuBLASLt here)");
    buf_put(buf, n, &at, ": taking %s%s", dgelu_name(t->pick),
        t->cached ? " (timed before in this process)" : "");
}
