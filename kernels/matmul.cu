// Fully connected layers on the GPU through cuBLASLt (row-major PyTorch layout mapped onto
// column-major GEMMs), bias and GELU fused as epilogues in the forward; the bias gradient is a
// deterministic two-stage column sum (cuBLASLt's BGRAD epilogue overwrites instead of
// accumulating, and the CPU contract is +=).
//
// Row-major X (r, c) is column-major X^T (c, r). With weight W (OC, C):
//   out^T (OC, N)    = W (op T, ld C) x inp^T (ld C)                 m=OC n=N  k=C
//   dinp^T (C, N)   += W (op N, ld C) x dout^T (ld OC)               m=C  n=N  k=OC
//   dweight^T (C,OC) += inp^T (op N, ld C) x dout (op T, ld OC)      m=C  n=OC k=N
#include "kernels/gelu.h"
#include "kernels/bf16.h"
#include "kernels/colsum.cuh"
#include "kernels/gpu_internal.h"
#include "kernels/matmul.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

struct gemm {
    bool ta, tb;
    int m, n, k;
    const void *a, *b;
    int lda, ldb;
    void *d;
    int ldd;
    cudaDataType_t ab_type, d_type;
    float beta;
    cublasLtEpilogue_t epi;
    const void *bias; /* with a BIAS epilogue; of d_type */
    void *aux;        /* with GELU_AUX: the pre-activation, ld = ldd */
    const void *c;    /* C when beta != 0 and it is not d (same type and ld as d) */
};

/* Largest power of two (<= 256) dividing the address. cuBLASLt's heuristic otherwise assumes
 * 256-byte aligned operands and may pick a kernel that faults on a tensor carved from the middle of
 * a buffer (a layer's slice of a stacked weight). */
static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 1 && (uintptr_t)p % al)
        al >>= 1;
    return al;
}

/* Heuristic results by shape, type, epilogue and alignment: the query costs ~10 us of host time
 * and a training step repeats the same few GEMM shapes. Not thread-safe (gpu.h). */
struct algo_key {
    int ta, tb, m, n, k, lda, ldb, ldd, ab_type, d_type, epi, bias, aux;
    uint32_t align[4]; /* a, b, d, c */
};
#define ALGO_CACHE_MAX 128
static struct algo_entry {
    struct algo_key key;
    cublasLtMatmulAlgo_t algo;
    int found;
    /* timed (matmul_tune_arm): candidates run, the one taken (0: cuBLASLt's first), and one
     * call's time with the first and with the one taken */
    int tuned, candidates, pick;
    float first_ms, pick_ms;
} algo_cache[ALGO_CACHE_MAX];
static int algo_cache_n;

/* ---- timing cuBLASLt's candidates (matmul_tune_arm; training.autotune) ----
 * cuBLASLt's heuristic ranks its kernels by a model of the GPU, and its first pick is not always
 * the fastest on the device at hand at a given shape (why PyTorch has TunableOp and cuBLASLt's
 * samples time the top few). Armed, the first call of each GEMM (shape, types, epilogue and
 * alignment: the cache's key) of at least min_flop FLOPs asks for up to TUNE_ALGOS candidates
 * and times them on the call's own operands. Each writes to scratch instead of the call's output,
 * so an accumulating GEMM (beta = 1: the weight gradients) is not added into its output once per
 * run; a GELU_AUX epilogue rewrites its pre-activation, which the real call then writes again.
 * One untimed run each (which also leaves out a candidate that fails), then TUNE_ROUNDS timed
 * rounds, interleaved, keeping each one's fastest. Another than the first is taken only when
 * TUNE_MARGIN faster, so near-ties stay with cuBLASLt's pick. Never while the stream is being
 * captured into a CUDA graph (it synchronises): such a shape keeps the first pick.
 * Every candidate computes the same products; a split-K one sums them in another order, so a
 * tuned run can differ from an untuned one by rounding. The pick is cached for the process, so
 * every later call of the shape (eager or in a graph) runs the same kernel, the same bits. */
#define TUNE_ALGOS 8
#define TUNE_ROUNDS 3
static struct {
    bool armed;
    double min_flop;
} gemm_tune;

static size_t dtype_bytes(cudaDataType_t t)
{
    return t == CUDA_R_16BF ? 2 : 4;
}

/* Times h[0..n) for g into e (pick, times); returns the index taken. */
static int tune_candidates(const struct gemm *g, cublasLtMatmulDesc_t op,
                           cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                           cublasLtMatrixLayout_t ld, const cublasLtMatmulHeuristicResult_t *h,
                           int n, struct algo_entry *e, cudaStream_t stream)
{
    struct gpu_rt *rt = gpu_rt();
    const float alpha = 1.0f;
    float best[TUNE_ALGOS];
    bool ok[TUNE_ALGOS];
    void *d = gpu_scratch((size_t)g->ldd * (size_t)g->n * dtype_bytes(g->d_type), stream);
    const void *c = g->c ? g->c : g->d; /* read only when beta != 0 */
    cudaEvent_t ev[2];
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));
    for (int i = 0; i < n; i++) {
        best[i] = INFINITY;
        ok[i] = cublasLtMatmul(rt->lt, op, &alpha, g->a, la, g->b, lb, &g->beta, c, ld, d, ld,
                               &h[i].algo, rt->workspace, GPU_WORKSPACE_BYTES,
                               stream) == CUBLAS_STATUS_SUCCESS;
    }
    for (int r = 0; r < TUNE_ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            if (!ok[i])
                continue;
            cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
            const float ms = gpu_time_ms(ev, stream, [&] {
                st = cublasLtMatmul(rt->lt, op, &alpha, g->a, la, g->b, lb, &g->beta, c, ld, d, ld,
                                    &h[i].algo, rt->workspace, GPU_WORKSPACE_BYTES, stream);
            });
            if (st != CUBLAS_STATUS_SUCCESS)
                ok[i] = false;
            else if (ms < best[i])
                best[i] = ms;
        }
    CUDA_CHECK(cudaEventDestroy(ev[0]));
    CUDA_CHECK(cudaEventDestroy(ev[1]));
    gpu_scratch_free(d, stream);
    int pick = 0;
    for (int i = 1; i < n; i++)
        if (ok[i] && best[i] < best[pick])
            pick = i;
    if (pick && ok[0] && best[pick] > TUNE_MARGIN * best[0])
        pick = 0;
    e->tuned = 1, e->candidates = n, e->pick = pick;
    e->first_ms = best[0], e->pick_ms = best[pick];
    return pick;
}

extern "C" void matmul_tune_arm(int on, double min_flop)
{
    gemm_tune.armed = on != 0;
    gemm_tune.min_flop = min_flop;
}

extern "C" void matmul_tune_reset(void)
{
    algo_cache_n = 0;
}

extern "C" void matmul_tune_stats(struct matmul_tune_stats *s)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < algo_cache_n; i++) {
        const struct algo_entry *e = &algo_cache[i];
        if (!e->tuned)
            continue;
        s->timed++;
        s->candidates += e->candidates;
        s->changed += e->pick != 0;
        s->first_ms += e->first_ms;
        s->pick_ms += e->pick_ms;
    }
}

extern "C" void matmul_tune_describe(char *buf, size_t n)
{
    struct matmul_tune_stats s;
    size_t at = 0;
    matmul_tune_stats(&s);
    if (n)
        buf[0] = '\0';
    buf_put(buf, n, &at, "%d shapes timed (%d candidates), %d faster than cuBLASLt's first",
            s.timed, s.candidates, s.changed);
    const char *sep = ": ";
    for (int i = 0; i < algo_cache_n; i++) {
        const struct algo_entry *e = &algo_cache[i];
        if (!e->tuned || !e->pick)
            continue;
        buf_put(buf, n, &at, "%s%dx%dx%d%s %.1f -> %.1f us (#%d of %d)", sep, e->key.m,
                e->key.n, e->key.k,
                e->key.aux ? (e->key.epi == CUBLASLT_EPILOGUE_DGELU ? " dgelu" : " gelu") : "",
                1e3 * e->first_ms, 1e3 * e->pick_ms, e->pick + 1, e->candidates);
        sep = ", ";
    }
    buf_put(buf, n, &at, "; one call of each: %.3f -> %.3f ms", s.first_ms, s.pick_ms);
}

/* Algorithm for op/layouts into *algo; returns 0 when cuBLASLt has none. For an `optional`
 * GEMM (a fused epilogue with a fallback) any refusal of the heuristic counts as "none": the
 * documented answer is NOT_SUPPORTED, but a library that said INVALID_VALUE must not end the
 * run. Armed (above), a new key's candidates are timed on g's operands on `stream`. */
static int gemm_algo(const struct gemm *g, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                     cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                     cublasLtMatmulAlgo_t *algo, bool optional, cudaStream_t stream)
{
    struct algo_key key;
    memset(&key, 0, sizeof(key)); /* padding too: keys are compared with memcmp */
    key = (struct algo_key){g->ta, g->tb, g->m, g->n, g->k, g->lda, g->ldb, g->ldd,
                            (int)g->ab_type, (int)g->d_type, (int)g->epi, g->bias != NULL,
                            g->aux != NULL, {align_of(g->a), align_of(g->b), align_of(g->d),
                             align_of(g->c ? g->c : g->d)}};
    for (int i = 0; i < algo_cache_n; i++) {
        if (memcmp(&algo_cache[i].key, &key, sizeof(key)) == 0) {
            *algo = algo_cache[i].algo;
            return algo_cache[i].found;
        }
    }
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const bool tune = gemm_tune.armed && algo_cache_n < ALGO_CACHE_MAX &&
                      2.0 * g->m * g->n * g->k >= gemm_tune.min_flop &&
                      cudaStreamIsCapturing(stream, &cs) == cudaSuccess &&
                      cs == cudaStreamCaptureStatusNone;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h[TUNE_ALGOS];
    memset(h, 0, sizeof(h));
    size_t ws = GPU_WORKSPACE_BYTES;
    int found = 0, pick = 0;
    struct algo_entry e;
    memset(&e, 0, sizeof(e));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t al[4] = {key.align[0], key.align[1], key.align[3], key.align[2]};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &al[i], sizeof(al[i])));
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(gpu_rt()->lt, op, la, lb, ld, ld, pref,
                                                       tune ? TUNE_ALGOS : 1, h, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (optional && st != CUBLAS_STATUS_SUCCESS))
        found = 0; /* "no algorithm", as found == 0 */
    else
        CUBLAS_CHECK(st);
    cublasLtMatmulPreferenceDestroy(pref);
    if (tune && found > 1)
        pick = tune_candidates(g, op, la, lb, ld, h, found, &e, stream);
    found = found > 0;
    if (found)
        *algo = h[pick].algo;
    if (algo_cache_n < ALGO_CACHE_MAX) {
        e.key = key;
        e.algo = h[pick].algo;
        e.found = found;
        algo_cache[algo_cache_n++] = e;
    }
    return found;
}

/* Runs the GEMM; returns 0, or -1 when cuBLASLt has no algorithm for it and `optional` is set
 * (otherwise that is fatal). */
static int gemm_run(const struct gemm *g, cudaStream_t stream, bool optional = false)
{
    struct gpu_rt *rt = gpu_rt();
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulAlgo_t algo;
    cublasOperation_t ta = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    float alpha = 1.0f;
    int rc = 0;

    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epi,
                                                sizeof(g->epi)));
    if (g->bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &g->bias, sizeof(g->bias)));
    if (g->aux) {
        int64_t ldaux = g->ldd;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &g->aux, sizeof(g->aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &ldaux, sizeof(ldaux)));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, g->ab_type, g->ta ? g->k : g->m,
                                            g->ta ? g->m : g->k, g->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, g->ab_type, g->tb ? g->n : g->k,
                                            g->tb ? g->k : g->n, g->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, g->d_type, g->m, g->n, g->ldd));
    if (gemm_algo(g, op, la, lb, ld, &algo, optional, stream)) {
        cublasStatus_t st = cublasLtMatmul(rt->lt, op, &alpha, g->a, la, g->b, lb, &g->beta,
                                           g->c ? g->c : g->d, ld, g->d, ld, &algo, rt->workspace,
                                           GPU_WORKSPACE_BYTES, stream);
        if (st != CUBLAS_STATUS_SUCCESS && optional)
            rc = -1; /* the caller's fallback computes the same thing */
        else
            CUBLAS_CHECK(st);
    } else if (optional) {
        rc = -1;
    } else {
        fprintf(stderr, "cuBLASLt has no algorithm for m=%d n=%d k=%d (lda %d ldb %d ldd %d, "
                        "epilogue %d)\nHINT: bf16 GEMMs need dimensions that are multiples of 8 and 16-byte "
                        "aligned operands\n",
                g->m, g->n, g->k, g->lda, g->ldb, g->ldd, (int)g->epi);
        exit(1);
    }
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return rc;
}

static void forward_gemm(void *out, const void *inp, const void *weight, const void *bias,
                         cudaDataType_t t, int N, int C, int OC, cudaStream_t stream)
{
    struct gemm g = {true, false, OC, N, C, weight, inp, C, C, out, OC, t, t, 0.0f,
                     bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, NULL};
    gemm_run(&g, stream);
}

/* ---- deterministic column sums: dbias (OC) += sum over N rows of dout (N, OC) ---- */

template <typename T>
static void colsum(float *dbias, const T *dout, int N, int OC, cudaStream_t stream)
{
    int nparts = CEIL_DIV(N, CS_ROWS);
    float *part = (float *)gpu_scratch((size_t)nparts * OC * sizeof(float), stream);
    typedef colsum_load<T> Src;
    typedef void kernel_t(float *, Src, int, int);
    const int V = OC % 4 == 0 && vec4_ok(dout) ? 4 : 1;
    kernel_t *k = V == 4 ? colsum_part_kernel<Src, 4> : colsum_part_kernel<Src, 1>;
    k<<<dim3(CEIL_DIV(OC, 32 * V), nparts), dim3(32, 8), 0, stream>>>(part, Src{dout}, N, OC);
    GPU_LAUNCH_CHECK();
    colsum_finish_kernel<<<CEIL_DIV(OC, 256), 256, 0, stream>>>(dbias, part, nparts, OC);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part, stream);
}

/* ---- fp32 ---- */

extern "C" void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                               int N, int C, int OC, struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    forward_gemm(out, inp, weight, bias, CUDA_R_32F, N, C, OC, stream);
}

extern "C" void matmul_forward_gelu(float *out, float *pre, const float *inp, const float *weight,
                                    const float *bias, int N, int C, int OC,
                                    struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    struct gemm g = {true, false, OC, N, C, weight, inp, C, C, out, OC, CUDA_R_32F, CUDA_R_32F,
                     0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre, NULL};
    /* cuBLASLt's GELU_AUX epilogue needs the aux (pre) leading dimension divisible by 8 and
     * the aux pointer 16-byte aligned (not part of the heuristic's inputs: checked here) */
    if (OC % 8 == 0 && (uintptr_t)pre % 16 == 0 && gemm_run(&g, stream, true) == 0)
        return;
    /* no fused algorithm for this shape/type on this GPU: the same result in two steps */
    forward_gemm(pre, inp, weight, bias, CUDA_R_32F, N, C, OC, stream);
    gelu_forward(out, pre, (size_t)N * OC, stream);
}

extern "C" void matmul_forward_residual(float *out, const float *res, const float *inp,
                                        const float *weight, const float *bias, int N, int C,
                                        int OC, struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    forward_gemm(out, inp, weight, bias, CUDA_R_32F, N, C, OC, stream);
    residual_forward(out, res, out, (long)N * OC, stream); /* elementwise: in place is fine */
}

static void backward_gemms(void *dinp, float *dweight, const void *dout, const void *inp,
                           const void *weight, cudaDataType_t t, int N, int C, int OC,
                           cudaStream_t stream)
{
    if (dinp) {
        struct gemm g = {false, false, C, N, OC, weight, dout, C, OC, dinp, C, t, t, 1.0f,
                         CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL};
        gemm_run(&g, stream);
    }
    struct gemm g = {false, true, C, OC, N, inp, dout, C, OC, dweight, C, t, CUDA_R_32F, 1.0f,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL};
    gemm_run(&g, stream);
}

extern "C" void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, int N, int C, int OC,
                                struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    backward_gemms(dinp, dweight, dout, inp, weight, CUDA_R_32F, N, C, OC, stream);
    if (dbias)
        colsum<float>(dbias, dout, N, OC, stream);
}

extern "C" void matmul_backward_gelu(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *pre,
                                     const float *weight, int N, int C, int OC,
                                     struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    size_t n = (size_t)N * C;
    /* dout @ weight into a cleared buffer (a scratch one when the GELU derivative follows), then
     * gelu_backward accumulates into the cleared dinp: the CPU's result, in two steps. */
    float *g = pre ? (float *)gpu_scratch(n * sizeof(float), stream) : dinp;
    CUDA_CHECK(cudaMemsetAsync(g, 0, n * sizeof(float), stream));
    matmul_backward(g, dweight, dbias, dout, inp, weight, N, C, OC, stream);
    if (pre) {
        CUDA_CHECK(cudaMemsetAsync(dinp, 0, n * sizeof(float), stream));
        gelu_backward(dinp, pre, g, n, stream);
        gpu_scratch_free(g, stream);
    }
}

/* ---- bf16 operands ---- */

extern "C" void matmul_forward_bf16(uint16_t *out, const uint16_t *inp, const uint16_t *weight,
                                    const uint16_t *bias, int N, int C, int OC,
                                    struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    forward_gemm(out, inp, weight, bias, CUDA_R_16BF, N, C, OC, stream);
}

extern "C" void matmul_backward_bf16(uint16_t *dinp, float *dweight, float *dbias,
                                     const uint16_t *dout, const uint16_t *inp,
                                     const uint16_t *weight, int N, int C, int OC,
                                     struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    backward_gemms(dinp, dweight, dout, inp, weight, CUDA_R_16BF, N, C, OC, stream);
    if (dbias)
        colsum<uint16_t>(dbias, dout, N, OC, stream);
}

extern "C" void matmul_forward_bf16_gelu(uint16_t *out, uint16_t *pre, const uint16_t *inp,
                                         const uint16_t *weight, const uint16_t *bias, int N,
                                         int C, int OC, struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    struct gemm g = {true, false, OC, N, C, weight, inp, C, C, out, OC, CUDA_R_16BF, CUDA_R_16BF,
                     0.0f, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                     bias, pre, NULL};
    /* the aux (pre) conditions of matmul_forward_gelu */
    if (OC % 8 == 0 && (uintptr_t)pre % 16 == 0 && gemm_run(&g, stream, true) == 0)
        return;
    forward_gemm(pre, inp, weight, bias, CUDA_R_16BF, N, C, OC, stream);
    gelu_forward_bf16(out, pre, (size_t)N * OC, stream);
}

/* ---- bias and residual ---- */

static __global__ void bias_forward_kernel(float *out, const float *bias, int OC, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        out[i] += bias[i % OC];
}

static __global__ void residual_kernel(float *out, const float *a, const float *b, long n)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a[i] + b[i];
}

extern "C" void bias_forward(float *out, const float *bias, int N, int OC,
                             struct CUstream_st *stream)
{
    size_t total = (size_t)N * OC;
    if (total == 0)
        return;
    bias_forward_kernel<<<(unsigned)CEIL_DIV(total, 256), 256, 0, stream>>>(out, bias, OC, total);
    GPU_LAUNCH_CHECK();
}

extern "C" void bias_backward(float *dbias, const float *dout, int N, int OC,
                              struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return;
    colsum<float>(dbias, dout, N, OC, stream);
}

extern "C" void residual_forward(float *out, const float *a, const float *b, long n,
                                 struct CUstream_st *stream)
{
    if (n <= 0)
        return;
    residual_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(out, a, b, n);
    GPU_LAUNCH_CHECK();
}

/* ---- mixed precision (kernels/bf16.h): bf16 operands, fp32 outputs, bias and gradients ---- */

/* out = inp @ weight^T + bias, plus res when it is given (beta 1 with C = res) */
static void forward_mixed(float *out, const float *res, const uint16_t *inp,
                          const uint16_t *weight, const float *bias, int N, int C, int OC,
                          cudaStream_t stream)
{
    if (N == 0 || OC == 0)
        return;
    struct gemm g = {true, false, OC, N, C, weight, inp, C, C, out, OC, CUDA_R_16BF, CUDA_R_32F,
                     res ? 1.0f : 0.0f, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                     bias, NULL, res};
    gemm_run(&g, stream);
}

extern "C" void matmul_forward_mixed(float *out, const uint16_t *inp, const uint16_t *weight,
                                     const float *bias, int N, int C, int OC,
                                     struct CUstream_st *stream)
{
    forward_mixed(out, NULL, inp, weight, bias, N, C, OC, stream);
}

/* dinp of type dinp_t (fp32, or bf16 with beta 0) */
static void backward_mixed(void *dinp, cudaDataType_t dinp_t, float dinp_beta, float *dweight,
                           float *dbias, const float *dout, const uint16_t *dout16,
                           const uint16_t *inp, const uint16_t *weight, int N, int C, int OC,
                           cudaStream_t stream)
{
    if (N == 0 || OC == 0)
        return;
    if (dinp) { /* (N, C) (+)= (N, OC) @ (OC, C), accumulated in fp32 */
        struct gemm g = {false, false, C, N, OC, weight, dout16, C, OC, dinp, C, CUDA_R_16BF,
                         dinp_t, dinp_beta, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL};
        gemm_run(&g, stream);
    }
    struct gemm g = {false, true, C, OC, N, inp, dout16, C, OC, dweight, C, CUDA_R_16BF,
                     CUDA_R_32F, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL};
    gemm_run(&g, stream);
    if (dbias) /* from the fp32 gradient: the bias sees no bf16 rounding */
        colsum<float>(dbias, dout, N, OC, stream);
}

extern "C" void matmul_backward_mixed(float *dinp, float *dweight, float *dbias, const float *dout,
                                      const uint16_t *dout16, const uint16_t *inp,
                                      const uint16_t *weight, int N, int C, int OC,
                                      struct CUstream_st *stream)
{
    backward_mixed(dinp, CUDA_R_32F, 1.0f, dweight, dbias, dout, dout16, inp, weight, N, C, OC,
                   stream);
}

extern "C" void matmul_backward_mixed_set(float *dinp, float *dweight, float *dbias,
                                          const float *dout, const uint16_t *dout16,
                                          const uint16_t *inp, const uint16_t *weight, int N,
                                          int C, int OC, struct CUstream_st *stream)
{
    backward_mixed(dinp, CUDA_R_32F, 0.0f, dweight, dbias, dout, dout16, inp, weight, N, C, OC,
                   stream);
}

extern "C" void matmul_backward_mixed_set_bf16(uint16_t *dinp16, float *dweight, float *dbias,
                                               const float *dout, const uint16_t *dout16,
                                               const uint16_t *inp, const uint16_t *weight, int N,
                                               int C, int OC, struct CUstream_st *stream)
{
    backward_mixed(dinp16, CUDA_R_16BF, 0.0f, dweight, dbias, dout, dout16, inp, weight, N, C, OC,
                   stream);
}

extern "C" int matmul_backward_mixed_dgelu_bf16(uint16_t *dpre16, float *dpre_bias,
                                                float *dweight, float *dbias, const float *dout,
                                                const uint16_t *dout16, const uint16_t *inp,
                                                const uint16_t *pre, const uint16_t *weight,
                                                int N, int C, int OC, struct CUstream_st *stream)
{
    if (N == 0 || OC == 0)
        return 0;
    /* dpre = (dout16 @ weight) * gelu'(pre) in the GEMM's epilogue, rounded once to bf16; the
     * aux (pre) conditions of matmul_forward_gelu */
    struct gemm g = {false, false, C, N, OC, weight, dout16, C, OC, dpre16, C, CUDA_R_16BF,
                     CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, (void *)pre, NULL};
    if (C % 8 || (uintptr_t)pre % 16 || gemm_run(&g, stream, true)) {
        static int said; /* once a process */
        if (!said++)
            fprintf(stderr, "gantry: cuBLASLt has no DGELU epilogue for the %dx%d GEMM (or the "
                            "pre-activation is not 16-byte aligned): the GELU backward runs as "
                            "its own pass\n", N, C);
        return -1;
    }
    backward_mixed(NULL, CUDA_R_16BF, 0.0f, dweight, dbias, dout, dout16, inp, weight, N, C, OC,
                   stream);
    colsum<uint16_t>(dpre_bias, dpre16, N, C, stream); /* the fp32 products are gone */
    return 0;
}

extern "C" void matmul_forward_mixed_residual(float *out, const float *res, const uint16_t *inp,
                                              const uint16_t *weight, const float *bias, int N,
                                              int C, int OC, struct CUstream_st *stream)
{
    forward_mixed(out, res, inp, weight, bias, N, C, OC, stream);
}
