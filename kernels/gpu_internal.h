/*
 * gpu_internal.h - helpers shared by the .cu files in kernels/ (CUDA C++ only, not a public API).
 *
 * The process-wide cuBLAS/cuBLASLt handles and GEMM workspace (gpu_runtime.cu), warp reductions,
 * bf16 conversion, and scratch allocation on the caller's stream.
 */
#ifndef GANTRY_GPU_INTERNAL_H
#define GANTRY_GPU_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cuda_common.h"
#include "kernels/gpu.h"

#define GPU_WORKSPACE_BYTES (32u << 20) /* cuBLASLt: 32 MiB is what Hopper's kernels ask for */

struct gpu_rt {
    int ready;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *workspace; /* GPU_WORKSPACE_BYTES, for cuBLASLt and cuBLAS (one stream at a time) */
};
extern struct gpu_rt gpu_rt_;

/* Initialised runtime (gpu_init on first use). */
static inline struct gpu_rt *gpu_rt(void)
{
    if (!gpu_rt_.ready)
        gpu_init();
    return &gpu_rt_;
}

void cublas_check_(int status, const char *call, const char *file, int line);
#define CUBLAS_CHECK(call) cublas_check_((int)(call), #call, __FILE__, __LINE__)

/* Launch check: the launch's own error, now (asynchronous faults show at the next sync). */
#define GPU_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* V consecutive elements at p <-> v[0..V) in fp32: V = 1, or V = 4 as one access (16 bytes of
 * fp32, 8 of bf16), p aligned to its size (a misaligned vector access faults on a GPU, and
 * aborts on the emulator). fp32 elements as they are; bf16 ones (uint16_t bits) widened on load and rounded to
 * nearest even on store (kernels/bf16.h). */
template <int N> static __device__ __forceinline__ void vec_check(const void *p, const char *op)
{
#if !defined(__CUDACC__)
    if ((uintptr_t)p % N) {
        fprintf(stderr, "%s: %p not %d-byte aligned\n", op, p, N);
        abort();
    }
#else
    (void)p, (void)op;
#endif
}
template <int V> static __device__ __forceinline__ void ld_vec(float *v, const float *p)
{
    static_assert(V == 1 || V == 4, "1 or 4 floats");
    if constexpr (V == 1) {
        v[0] = *p;
    } else {
        vec_check<16>(p, "ld_vec");
#if defined(__CUDACC__)
        const float4 f = *(const float4 *)p;
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
#else
        memcpy(v, p, 16);
#endif
    }
}
template <int V> static __device__ __forceinline__ void st_vec(float *p, const float *v)
{
    static_assert(V == 1 || V == 4, "1 or 4 floats");
    if constexpr (V == 1) {
        *p = v[0];
    } else {
        vec_check<16>(p, "st_vec");
#if defined(__CUDACC__)
        *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
#else
        memcpy(p, v, 16);
#endif
    }
}
template <int V> static __device__ __forceinline__ void ld_vec(float *v, const uint16_t *p)
{
    static_assert(V == 1 || V == 4, "1 or 4 bf16");
    if constexpr (V == 1) {
        v[0] = bf16_to_f32(*p);
    } else {
        vec_check<8>(p, "ld_vec");
        uint32_t w[2];
#if defined(__CUDACC__)
        const uint2 u = *(const uint2 *)p;
        w[0] = u.x, w[1] = u.y;
#else
        memcpy(w, p, 8);
#endif
        v[0] = bf16_to_f32((uint16_t)w[0]), v[1] = bf16_to_f32((uint16_t)(w[0] >> 16));
        v[2] = bf16_to_f32((uint16_t)w[1]), v[3] = bf16_to_f32((uint16_t)(w[1] >> 16));
    }
}
template <int V> static __device__ __forceinline__ void st_vec(uint16_t *p, const float *v)
{
    static_assert(V == 1 || V == 4, "1 or 4 bf16");
    if constexpr (V == 1) {
        *p = bf16_from_f32(v[0]);
    } else {
        vec_check<8>(p, "st_vec");
        uint32_t w[2] = {(uint32_t)bf16_from_f32(v[0]) | (uint32_t)bf16_from_f32(v[1]) << 16,
                         (uint32_t)bf16_from_f32(v[2]) | (uint32_t)bf16_from_f32(v[3]) << 16};
#if defined(__CUDACC__)
        *(uint2 *)p = make_uint2(w[0], w[1]);
#else
        memcpy(p, w, 8);
#endif
    }
}

/* 1 when every tensor given (NULL: none) can take ld_vec / st_vec's 4-wide accesses: aligned to 4
 * of its elements. With a row length that is a multiple of 4, every row is too. */
template <typename... P> static inline bool vec4_ok(const P *...p)
{
    return ((((uintptr_t)p % (4 * sizeof(P))) == 0) && ...);
}

/* Timing what run() queues on `stream` between the events ev[0] and ev[1], in ms (synchronises:
 * not inside a graph capture). The autotunes' clock (tune.cu, matmul.cu). */
template <typename F> static inline float gpu_time_ms(cudaEvent_t *ev, cudaStream_t stream, F run)
{
    CUDA_CHECK(cudaEventRecord(ev[0], stream));
    run();
    CUDA_CHECK(cudaEventRecord(ev[1], stream));
    CUDA_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    return ms;
}

/* The autotunes' rule: another form replaces the default only when at least 3 % faster, so that
 * near-ties do not flip between runs. */
#define TUNE_MARGIN 0.97f

/* Appends printf output to buf (n bytes) at *at, truncating at the end (the tune lines). */
static inline void buf_put(char *buf, size_t n, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void buf_put(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = *at < n ? vsnprintf(buf + *at, n - *at, fmt, ap) : 0;
    va_end(ap);
    if (w > 0)
        *at += (size_t)w;
}

/* Scratch on the stream-ordered pool: valid for work queued on `stream` until gpu_scratch_free. */
static inline void *gpu_scratch(size_t bytes, cudaStream_t stream)
{
    void *p = NULL;
    CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, stream));
    return p;
}
static inline void gpu_scratch_free(void *p, cudaStream_t stream)
{
    if (p)
        CUDA_CHECK(cudaFreeAsync(p, stream));
}

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
 * Fixed order (warp tree, then warp 0 over the warps' sums): deterministic. */
static __device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0f;
    return warp_sum(v);
}

static __device__ __forceinline__ float block_max(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : -INFINITY;
    return warp_max(v);
}

static __device__ __forceinline__ uint16_t f32_to_bf16_bits(float x)
{
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    return *reinterpret_cast<uint16_t *>(&h);
}

static __device__ __forceinline__ float bf16_bits_to_f32(uint16_t b)
{
    return __uint_as_float((unsigned)b << 16);
}

#endif /* GANTRY_GPU_INTERNAL_H */
