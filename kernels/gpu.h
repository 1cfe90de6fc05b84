/*
 * gpu.h - the CUDA twins of the CPU kernels (kernels/<op>.h), for C and CUDA callers.
 *
 * Every launcher has the CPU function's arguments and meaning (the *_cpu function in the op's
 * header is the specification), minus the _cpu suffix, plus a stream; all pointers are DEVICE
 * pointers, including the integer ones (tokens, len, labels). Launchers are asynchronous on the
 * stream, never synchronise the host, and check cudaGetLastError() (fatal, cuda_common.h).
 * Backward launchers accumulate (+=) exactly where the CPU ones do. gelu_forward/gelu_backward are
 * declared in gelu.h.
 *
 * Determinism: every reduction (embedding backward, LayerNorm dweight/dbias, bias backward, pooled
 * sums, the gradient norm) runs in a fixed order with no floating-point atomics, so a step gives
 * bit-identical results run to run on the same GPU and launch configuration.
 *
 * Scratch memory comes from the stream-ordered allocator (cudaMallocAsync on the caller's stream,
 * freed on the same stream; gpu_init() keeps freed memory in the pool so a steady-state step does
 * not call the driver). The cuBLAS(Lt) handles and the GEMM workspace are per process (device 0
 * of the process's CUDA_VISIBLE_DEVICES; one process per GPU) and not thread-safe: one thread
 * launches kernels. bf16 buffers are typed uint16_t here (the raw bits of __nv_bfloat16) so this
 * header needs no CUDA headers.
 */
#ifndef GANTRY_GPU_H
#define GANTRY_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/adamw.h"
#include "kernels/gelu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t */

/* Selects this process's GPU, before gpu_init() and any allocation. One process per GPU: with
 * several visible devices, device local_rank (all of a pod's GPUs stay visible to every rank, so
 * NCCL can use NVLink peer access between them; a local rank past the last one is an error);
 * with one visible device (a launcher that sets CUDA_VISIBLE_DEVICES per rank), device 0. Logs the device chosen (index, name,
 * memory) on stderr. Returns the device index, or -1 after printing why when no device is
 * usable. */
int gpu_select_device(int local_rank);

/* The current device's dense peak in FLOP/s for bf16 tensor-core work (bf16 = 1) or plain fp32
 * (bf16 = 0: no TF32, as the fp32 path runs), the denominator of MFU: GANTRY_PEAK_TFLOPS (a
 * number, for a device the table lacks) when set, else gpu_peak_flops_named(the device's name);
 * 0 when unknown (logs then show TFLOP/s without MFU). */
double gpu_peak_flops(int bf16);
/* The datasheet peak for a device name as CUDA reports it (H100 SXM/PCIe/NVL, H200 and its NVL,
 * GH200, H800, A100, A800); 0 for any other name. */
double gpu_peak_flops_named(const char *name, int bf16);

/* Creates the cuBLAS/cuBLASLt handles and the GEMM workspace on the current device, and makes the
 * default memory pool keep freed memory. Idempotent; launchers call it themselves when needed. */
void gpu_init(void);
/* Returns the memory the pool kept (freed scratch) to the device, after the device is idle: for a
 * cudaMalloc that needs it (model_gpu_new when its buffers do not fit what is free). */
void gpu_trim_pool(void);
/* Frees what gpu_init() made (tests and tools call it at exit so leak checkers stay quiet). */
void gpu_shutdown(void);

/* ---- conversions for bf16 mixed precision (round to nearest even) ---- */
void cast_f32_to_bf16(uint16_t *out, const float *inp, size_t n, struct CUstream_st *stream);
void cast_bf16_to_f32(float *out, const uint16_t *inp, size_t n, struct CUstream_st *stream);

/* ---- embed.h ---- */
void embed_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T,
                   int C, struct CUstream_st *stream);
/* Deterministic: (token, position) pairs are stably sorted by token (CUB radix sort), then each
 * token's rows are summed in position order, one writer per dwte row. V is the rows of dwte. */
void embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T,
                    int C, int V, struct CUstream_st *stream);
void embbag_forward(float *out, const int *ids, const int *count, const float *table, int B, int M,
                    int D, struct CUstream_st *stream);
/* Deterministic as embed_backward; R is the rows of dtable. */
void embbag_backward(float *dtable, const float *dout, const int *ids, const int *count, int B,
                     int M, int D, int R, struct CUstream_st *stream);

/* ---- layernorm.h: one warp per row; dweight/dbias by per-block partials summed in order ---- */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C, struct CUstream_st *stream);
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C, struct CUstream_st *stream);

/* ---- matmul.h: cuBLASLt, fp32 in/out, TF32 off (the CPU reference's precision) ---- */
void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int C, int OC, struct CUstream_st *stream);
/* out = gelu(inp @ weight^T + bias) and pre = inp @ weight^T + bias (kept for the backward), in
 * one GEMM with cuBLASLt's GELU_AUX_BIAS epilogue (tanh GELU) where it can (OC a multiple of 8,
 * cuBLASLt's aux alignment, and an algorithm for the pointers' alignment), else the GEMM and
 * gelu_forward: the same result for any OC. bias is required. */
void matmul_forward_gelu(float *out, float *pre, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC, struct CUstream_st *stream);
/* matmul_forward_residual_cpu's twin: out = res + inp @ weight^T + bias; res, out disjoint. */
void matmul_forward_residual(float *out, const float *res, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC, struct CUstream_st *stream);
void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int C, int OC,
                     struct CUstream_st *stream);
/* matmul_backward_gelu_cpu's twin: dinp OVERWRITTEN with (dout @ weight) * gelu'(pre), or with
 * dout @ weight when pre is NULL; dweight, dbias accumulate. */
void matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *pre, const float *weight, int N, int C,
                          int OC, struct CUstream_st *stream);
/* bf16 operands, fp32 accumulation. Forward: out (bf16) = inp @ weight^T + bias (bf16 bias, may be
 * NULL). Backward: dinp (bf16, may be NULL) += dout @ weight; dweight (FP32, the master gradient)
 * += dout^T @ inp; dbias (fp32, may be NULL) += column sums of dout. */
void matmul_forward_bf16(uint16_t *out, const uint16_t *inp, const uint16_t *weight,
                         const uint16_t *bias, int N, int C, int OC, struct CUstream_st *stream);
void matmul_backward_bf16(uint16_t *dinp, float *dweight, float *dbias, const uint16_t *dout,
                          const uint16_t *inp, const uint16_t *weight, int N, int C, int OC,
                          struct CUstream_st *stream);
void bias_forward(float *out, const float *bias, int N, int OC, struct CUstream_st *stream);
void bias_backward(float *dbias, const float *dout, int N, int OC, struct CUstream_st *stream);
void residual_forward(float *out, const float *a, const float *b, long n,
                      struct CUstream_st *stream);

/* ---- attention.h: unfused, see attention.cu for why. att (B,NH,T,T) as on the CPU ---- */
void attention_forward(float *out, float *att, const float *qkv, const int *len, int B, int T,
                       int C, int NH, struct CUstream_st *stream);
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                        const int *len, int B, int T, int C, int NH, struct CUstream_st *stream);
/* The same with the four batched GEMMs of each direction on bf16 tensor cores (q, k, v, dout and
 * the probabilities rounded to bf16 as operands; fp32 accumulation, softmax and outputs). */
void attention_forward_mixed(float *out, float *att, const float *qkv, const int *len, int B,
                             int T, int C, int NH, struct CUstream_st *stream);
void attention_backward_mixed(float *dqkv, const float *dout, const float *qkv, const float *att,
                              const int *len, int B, int T, int C, int NH,
                              struct CUstream_st *stream);
/* Fused (attention.cu, "fused attention"): the same attention without the (B,NH,T,T)
 * probabilities. The forward writes out (B,T,C) and lse (B,NH,T), each query row's log-sum-exp
 * of its scaled scores (0 for padding rows); the backward recomputes the probabilities from qkv
 * and lse and accumulates into dqkv, given the forward's out. fp32 throughout, deterministic.
 * Head sizes C / NH up to ATTENTION_FUSED_MAX_HS (larger ones abort: check before calling). */
#define ATTENTION_FUSED_MAX_HS 128
void attention_forward_fused(float *out, float *lse, const float *qkv, const int *len, int B,
                             int T, int C, int NH, struct CUstream_st *stream);
void attention_backward_fused(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, const int *len, int B, int T, int C, int NH,
                              struct CUstream_st *stream);
/* The same on bf16 tensor cores (mma.sync with register-resident scores, kernels/tensorcore.h),
 * for the bf16 training step: qkv (bf16, as its GEMM writes it; 16-byte aligned for the fast
 * staging path) in, out (bf16, the projection GEMM's operand) and lse (fp32) out; the backward
 * takes dout in bf16 (as matmul_backward_mixed_set_bf16 writes it), OVERWRITES dqkv16 with the
 * gradient rounded to bf16 (zeros in padding rows) instead of accumulating, and, when dbias (3C)
 * is given, adds the fp32 gradient's column sums to it: the qkv GEMM's bias gradient, summed in
 * the kernels (deterministic), so no fp32 dqkv is stored. Probabilities and dS are rounded to
 * bf16 as operands; softmax, sums and the scaling are fp32. */
void attention_forward_fused_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int *len,
                                  int B, int T, int C, int NH, struct CUstream_st *stream);
/* The same forward, the same bits, with each warp's query operands kept in registers across the
 * key tiles (fewer shared-memory reads, more registers): timed beside the default by
 * bench/gpu_kernels until a GPU run says which is faster. */
void attention_forward_fused_bf16_qhoist(uint16_t *out, float *lse, const uint16_t *qkv,
                                         const int *len, int B, int T, int C, int NH,
                                         struct CUstream_st *stream);
/* The same forward on Hopper's wgmma (kernels/tensorcore.h) where it can run: head size 64 (41
 * to 64, padded) and device code with wgmma (attention_fused_wgmma_available: the sm_90a build
 * on an H100/H200, or the emulator); otherwise exactly attention_forward_fused_bf16_qhoist.
 * Within fp32 roundings of the others (the hardware's order of summation). Timed beside them by
 * bench/gpu_kernels until a GPU run says which is faster. */
void attention_forward_fused_bf16_wgmma(uint16_t *out, float *lse, const uint16_t *qkv,
                                        const int *len, int B, int T, int C, int NH,
                                        struct CUstream_st *stream);
int attention_fused_wgmma_available(void);
/* attention_backward_fused_bf16 (stored_ds 0) or its _ds form (1) with the dK/dV and dQ
 * kernels' products on wgmma (tc_dq_ds_kernel's stays mma.sync), where the forward's wgmma can
 * run; elsewhere exactly those. Within fp32 roundings of them. Timed beside them by
 * bench/gpu_kernels and in gpu_bench --attention-wgmma until a GPU run says which is faster. */
void attention_backward_fused_bf16_wgmma(uint16_t *dqkv16, float *dbias, const uint16_t *dout,
                                         const uint16_t *qkv, const uint16_t *out,
                                         const float *lse, const int *len, int B, int T, int C,
                                         int NH, int stored_ds, struct CUstream_st *stream);
void attention_backward_fused_bf16(uint16_t *dqkv16, float *dbias, const uint16_t *dout,
                                   const uint16_t *qkv, const uint16_t *out, const float *lse,
                                   const int *len, int B, int T, int C, int NH,
                                   struct CUstream_st *stream);
/* The same gradients with the dQ half done differently: the dK/dV kernel also stores dS^T (bf16,
 * attention_backward_ds_bytes(B, T, NH) of stream-ordered scratch, T rounded up to 64 both ways:
 * 201 MB at B 8, T 1024, NH 12), and dQ = dS K is one tensor-core product a tile instead of the
 * recomputing kernel's three and its exponentials: fewer FLOPs for that much more memory
 * traffic. Deterministic; dS is rounded to bf16 as in the default. */
void attention_backward_fused_bf16_ds(uint16_t *dqkv16, float *dbias, const uint16_t *dout,
                                      const uint16_t *qkv, const uint16_t *out, const float *lse,
                                      const int *len, int B, int T, int C, int NH,
                                      struct CUstream_st *stream);
size_t attention_backward_ds_bytes(int B, int T, int NH);

/* cuDNN's fused attention (attention_cudnn.cpp: its SDPA graph through the cuDNN frontend, cuDNN
 * loaded at run time from $GANTRY_CUDNN_LIB or libcudnn.so.9, never with GANTRY_CUDNN=0;
 * deterministic backward). The same
 * tensors as the bf16 fused kernels above, except that what lands in padding rows is cuDNN's:
 * the _kind dispatch below follows each call with attention_cudnn_fixup_*. Each returns 0 when
 * it ran, else 1 with why (n bytes) saying what is missing (no cuDNN, no plan for the shape,
 * a shape first seen during CUDA graph capture) and nothing written. attention_cudnn_load: 1
 * when cuDNN is loaded (why: its version), else 0 (why: what to do). */
int attention_cudnn_load(char *why, size_t n);
int attention_forward_cudnn_bf16(uint16_t *out, float *lse, const uint16_t *qkv, const int *len,
                                 int B, int T, int C, int NH, struct CUstream_st *stream,
                                 char *why, size_t n);
int attention_backward_cudnn_bf16(uint16_t *dqkv16, const uint16_t *dout, const uint16_t *qkv,
                                  const uint16_t *out, const float *lse, const int *len, int B,
                                  int T, int C, int NH, struct CUstream_st *stream, char *why,
                                  size_t n);
/* What the default kernels write where t >= len[b]: zeros in out's rows and lse's entries; zeros
 * in dqkv16's rows, and, with dbias (3C), dqkv16's column sums added to it (the qkv bias
 * gradient, deterministic; of the bf16 values, where ours sums the fp32 ones). */
void attention_cudnn_fixup_fwd(uint16_t *out, float *lse, const int *len, int B, int T, int C,
                               int NH, struct CUstream_st *stream);
void attention_cudnn_fixup_bwd(uint16_t *dqkv16, float *dbias, const int *len, int B, int T,
                               int C, struct CUstream_st *stream);

/* The bf16 fused attention's variants above, by kind: the forward's (attention_forward_fused_bf16,
 * _qhoist, _wgmma, cuDNN's) and the backward's (attention_backward_fused_bf16, _ds, _wgmma without
 * and with the stored dS^T, cuDNN's). Kind 0 is the default each time. A cuDNN kind that cannot
 * run a call (see above) runs the default kernel for it instead and says so on stderr, once. */
enum { ATTN_FWD_DEFAULT, ATTN_FWD_QHOIST, ATTN_FWD_WGMMA, ATTN_FWD_CUDNN, ATTN_FWD_KINDS };
enum {
    ATTN_BWD_DEFAULT,
    ATTN_BWD_DS,
    ATTN_BWD_WGMMA,
    ATTN_BWD_WGMMA_DS,
    ATTN_BWD_CUDNN,
    ATTN_BWD_KINDS
};
const char *attention_fwd_kind_name(int kind);
const char *attention_bwd_kind_name(int kind);
/* 1 once a cuDNN kind has run the default kernel in cuDNN's place in this process (bwd: 0 the
 * forward, 1 the backward): a benchmark of the cuDNN kinds then timed ours. */
int attention_cudnn_fell_back(int bwd);
void attention_forward_fused_bf16_kind(int kind, uint16_t *out, float *lse, const uint16_t *qkv,
                                       const int *len, int B, int T, int C, int NH,
                                       struct CUstream_st *stream);
void attention_backward_fused_bf16_kind(int kind, uint16_t *dqkv16, float *dbias,
                                        const uint16_t *dout, const uint16_t *qkv,
                                        const uint16_t *out, const float *lse, const int *len,
                                        int B, int T, int C, int NH, struct CUstream_st *stream);
/* ---- matmul.cu: cuBLASLt's candidate algorithms timed (training.autotune) ----
 * Armed, the first call of each GEMM shape of at least min_flop FLOPs (2mnk) times up to 8 of
 * cuBLASLt's candidates on its own operands (into scratch: the call's output is written once)
 * and keeps the fastest for the process, cuBLASLt's first unless another is 3 % faster; not
 * while the stream is being captured. Results may differ from an untuned run by rounding (a
 * split-K candidate sums in another order); every later call of a shape runs the same kernel.
 * matmul_tune_reset forgets every shape's algorithm (tests). */
struct matmul_tune_stats {
    int timed;                  /* GEMM shapes whose candidates were timed */
    int candidates;             /* candidates run, over those shapes */
    int changed;                /* shapes that took another than cuBLASLt's first */
    double first_ms, pick_ms;   /* one call of each timed shape: with the first, with the pick */
};
void matmul_tune_arm(int on, double min_flop);
void matmul_tune_reset(void);
void matmul_tune_stats(struct matmul_tune_stats *s);
/* "N shapes timed (M candidates), K faster than cuBLASLt's first: mxnxk a -> b us (#i of c), ...;
 * one call of each: x -> y ms" */
void matmul_tune_describe(char *buf, size_t n);
/* Whether training's autotune may arm it: once a GPU run has shown it clean (tune.cu), or with
 * GANTRY_AUTOTUNE_UNVERIFIED=1. */
int tune_gemm_admitted(void);

/* ---- tune.cu: kernels picked on the GPU at hand (training.autotune), as cuDNN benchmarks ----
 * tune_attention runs every variant that can run here (wgmma: head size 33 to 64 and
 * attention_fused_wgmma_available; the stored dS^T: allow_ds) on random inputs of the shape
 * (B sequences of T tokens, the first full and the others padded), checks each one's outputs
 * against the default's (tune_mismatch_*), times each (the fastest of 5, interleaved)
 * and picks the fastest that agrees; another variant replaces the default only when at least 3 %
 * faster. Only variants that hack/gpu-check.sh has run on a GPU are run unless
 * GANTRY_AUTOTUNE_UNVERIFIED=1 (tune.cu says which); with nothing besides the default left,
 * nothing runs (the defaults, timed 0). Results are kept per process by shape: a second call with the same arguments returns
 * them (cached = 1) without running anything. Synchronises the stream; allocates and frees its
 * own buffers (about 2.5 x the layer's qkv, plus the stored dS^T's scratch). */
struct tune_entry {
    float ms;   /* fastest time */
    float err;  /* tune_mismatch_* of its outputs against the default's (0 for it) */
    int timed;  /* 1: it can run here and ran */
    int agrees; /* err <= 1 */
    /* 1: it could run here but has not yet been run on a GPU by hack/gpu-check.sh, so it was
     * not (GANTRY_AUTOTUNE_UNVERIFIED=1 runs it too) */
    int unverified;
};
struct tune_attention_result {
    struct tune_entry fwd[ATTN_FWD_KINDS], bwd[ATTN_BWD_KINDS];
    int fwd_pick, bwd_pick; /* the kinds picked */
    int cached;
    char cudnn[160]; /* why cuDNN's kinds were not timed, when they were not; else its version */
};
void tune_attention(struct tune_attention_result *t, int B, int T, int C, int NH, int allow_ds,
                    struct CUstream_st *stream);
/* One line: every variant's time, those refused and why, and the picks. */
void tune_attention_describe(const struct tune_attention_result *t, char *buf, size_t n);
/* tune_dgelu: the same for the bf16 MLP projection's backward through the GELU (N rows, its
 * input F wide, its output C wide: the model's fcproj), two ways: matmul_backward_mixed_set_bf16
 * and gelu_backward_bf16 (kind 0, the default), or matmul_backward_mixed_dgelu_bf16, cuBLASLt's
 * DGELU epilogue (kind 1; not timed where cuBLASLt has none); the epilogue's dpre16 and bias
 * gradient checked against the pass's. pick: the kind taken. */
struct tune_dgelu_result {
    struct tune_entry k[2];
    int pick;
    int cached;
};
void tune_dgelu(struct tune_dgelu_result *t, int N, int F, int C, struct CUstream_st *stream);
void tune_dgelu_describe(const struct tune_dgelu_result *t, char *buf, size_t n);
/* How far device arrays a and ref (n elements) are apart, in units of the tune's tolerance:
 * max over elements of (|a - ref| - |ref| / 64) / (RMS(ref) / 128), 0 when within it everywhere;
 * <= 1 agrees; infinite with a NaN or infinity in either. Synchronises the stream. */
float tune_mismatch_bf16(const uint16_t *a, const uint16_t *ref, size_t n,
                         struct CUstream_st *stream);
float tune_mismatch_f32(const float *a, const float *ref, size_t n, struct CUstream_st *stream);

/* ---- pool.h ---- */
void meanpool_forward(float *out, const float *inp, const int *len, int B, int T, int C,
                      struct CUstream_st *stream);
void meanpool_backward(float *dinp, const float *dout, const int *len, int B, int T, int C,
                       struct CUstream_st *stream);
void clspool_forward(float *out, const float *inp, int B, int T, int C, struct CUstream_st *stream);
void clspool_backward(float *dinp, const float *dout, int B, int T, int C,
                      struct CUstream_st *stream);

/* ---- crossentropy.h: one block per row, fused max / sum-exp / normalise / loss ---- */
void crossentropy_forward(float *losses, float *probs, const float *logits, const int *labels,
                          float smoothing, const float *weights, int B, int K,
                          struct CUstream_st *stream);
void crossentropy_backward(float *dlogits, const float *probs, const int *labels, float smoothing,
                           const float *weights, float scale, int B, int K,
                           struct CUstream_st *stream);
/* Multi-label: sigmoid binary cross-entropy against bit-set targets (one block per row). */
void bce_forward(float *losses, float *probs, const float *logits, const int *targets, int words,
                 int B, int K, struct CUstream_st *stream);
void bce_backward(float *dlogits, const float *probs, const int *targets, int words, float scale,
                  int B, int K, struct CUstream_st *stream);
/* Regression: the squared error of one output per example against float targets. */
void mse_forward(float *losses, float *preds, const float *logits, const float *targets, int B,
                 struct CUstream_st *stream);
void mse_backward(float *dlogits, const float *logits, const float *targets, float scale, int B,
                  struct CUstream_st *stream);

/* ---- worker/optim.h's AdamW and clipping, on the device, with no host synchronisation ---- */

/* ADAMW_GPU_MAX_SEGMENTS and struct adamw_segment: kernels/adamw.h (the CPU twin). */

/* *norm (one device float) = L2 norm of grads (n floats), summed in double in a fixed order. */
void grad_norm(float *norm, const float *grads, size_t n, struct CUstream_st *stream);
/* *coef = clip coefficient for max_norm from *norm (PyTorch: min(1, max / (norm + 1e-6)); 1 when
 * max_norm <= 0), times extra (e.g. 1 / loss scale). Device scalars both. */
void grad_clip_coef(float *coef, const float *norm, float max_norm, float extra,
                    struct CUstream_st *stream);
/*
 * One AdamW step (worker/optim.c's adamw_step, same formula and float order) over the whole
 * parameter buffer in ONE launch: grid.y walks the nseg (<= ADAMW_GPU_MAX_SEGMENTS) tensors, grid.x
 * their elements. The gradient used is grads[i] * *gscale when gscale (a device float, e.g. from
 * grad_clip_coef) is not NULL. t is the step number after increment (1 for the first step).
 * params_bf16 (may be NULL) receives the updated parameters rounded to bf16, for the next
 * mixed-precision forward.
 */
void adamw_update(float *params, uint16_t *params_bf16, const float *grads, float *m, float *v,
                  const struct adamw_segment *segs, int nseg, float lr, float beta1, float beta2,
                  float eps, float weight_decay, long t, const float *gscale,
                  struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_GPU_H */
