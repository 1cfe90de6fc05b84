// AdamW and gradient clipping on the GPU, with no host synchronisation: the global norm and the
// clip coefficient stay on the device and the update reads the coefficient from there. The update
// is ONE launch over the whole parameter buffer (grid.y = tensor, grid.x = elements), with
// worker/optim.c's formula in the same float order.
#include "kernels/gpu_internal.h"

#include <string.h>

#define NORM_THREADS 256
#define NORM_BLOCKS_MAX 2048 /* partials; 8+ blocks an SM's worth of loads in flight */
#define NORM_PER_THREAD 64   /* elements a thread at least: small buffers take fewer blocks */

/* The block's sum of every thread's s (NORM_THREADS threads, all calling), in a fixed order: each
 * warp's by shuffles, then the warps in order. The result is thread 0's. */
static __device__ double norm_block_sum(double s)
{
    __shared__ double sh[NORM_THREADS / 32];
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0)
        sh[threadIdx.x / 32] = s;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < NORM_THREADS / 32; w++)
            t += sh[w];
    return t;
}

/* part[blockIdx] = sum of squares of this block's grid-stride elements, in double. V = 4: the
 * elements four at a time by 16-byte loads (grads 16-byte aligned), the last n % 4 one each by
 * the first threads. Many blocks and wide loads keep enough bytes in flight for the memory
 * system: the buffer is every gradient, read once, and its speed is the loads'. */
template <int V>
static __global__ void sumsq_part_kernel(double *part, const float *g, size_t n)
{
    const size_t nv = n / V, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double s = 0.0;
    for (size_t i = first; i < nv; i += (size_t)gridDim.x * blockDim.x) {
        float v[V];
        ld_vec<V>(v, g + i * V);
#pragma unroll
        for (int k = 0; k < V; k++)
            s += (double)v[k] * v[k];
    }
    if (first < n - nv * V)
        s += (double)g[nv * V + first] * g[nv * V + first];
    s = norm_block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* One block: thread i adds partials i, i + NORM_THREADS, ... in order, then the warps' sums and
 * the warps in order (a fixed order: the same bits every run). */
static __global__ void sumsq_finish_kernel(float *norm, const double *part, int nparts)
{
    double t = 0.0;
    for (int p = threadIdx.x; p < nparts; p += blockDim.x)
        t += part[p];
    t = norm_block_sum(t);
    if (threadIdx.x == 0)
        *norm = (float)sqrt(t);
}

extern "C" void grad_norm(float *norm, const float *grads, size_t n, struct CUstream_st *stream)
{
    size_t want = CEIL_DIV(n, (size_t)NORM_THREADS * NORM_PER_THREAD); /* 2048 from 33.5M */
    int blocks = (int)(want < 1 ? 1 : want > NORM_BLOCKS_MAX ? NORM_BLOCKS_MAX : want);
    double *part = (double *)gpu_scratch((size_t)blocks * sizeof(double), stream);
    if (vec4_ok(grads))
        sumsq_part_kernel<4><<<blocks, NORM_THREADS, 0, stream>>>(part, grads, n);
    else
        sumsq_part_kernel<1><<<blocks, NORM_THREADS, 0, stream>>>(part, grads, n);
    GPU_LAUNCH_CHECK();
    sumsq_finish_kernel<<<1, NORM_THREADS, 0, stream>>>(norm, part, blocks);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part, stream);
}

static __global__ void clip_coef_kernel(float *coef, const float *norm, float max_norm, float extra)
{
    float c = 1.0f;
    if (max_norm > 0.0f) {
        float k = max_norm / (*norm + 1e-6f);
        c = k < 1.0f ? k : 1.0f;
    }
    *coef = c * extra;
}

extern "C" void grad_clip_coef(float *coef, const float *norm, float max_norm, float extra,
                               struct CUstream_st *stream)
{
    clip_coef_kernel<<<1, 1, 0, stream>>>(coef, norm, max_norm, extra);
    GPU_LAUNCH_CHECK();
}

struct adamw_table {
    struct adamw_segment seg[ADAMW_GPU_MAX_SEGMENTS];
};

/* Elements i .. i + V - 1 (V = 1, or 4 by 16-byte loads and stores: i % 4 == 0 and the buffers
 * aligned), with worker/optim.c's formula in the same float order. */
template <int V>
static __device__ __forceinline__ void adamw_elems(size_t i, float *params, uint16_t *params_bf16,
                                                   const float *grads, float *m, float *v,
                                                   float shrink, float gs, bool scaled, float b1,
                                                   float b2, float eps, float step, float sbc2)
{
    float p[V], g[V], mm[V], vv[V];
    ld_vec<V>(p, params + i);
    ld_vec<V>(g, grads + i);
    ld_vec<V>(mm, m + i);
    ld_vec<V>(vv, v + i);
#pragma unroll
    for (int k = 0; k < V; k++) {
        const float gk = scaled ? g[k] * gs : g[k];
        mm[k] = b1 * mm[k] + (1.0f - b1) * gk;
        vv[k] = b2 * vv[k] + (1.0f - b2) * gk * gk;
        p[k] = p[k] * shrink - step * mm[k] / (sqrtf(vv[k]) / sbc2 + eps);
    }
    st_vec<V>(m + i, mm);
    st_vec<V>(v + i, vv);
    st_vec<V>(params + i, p);
    if (params_bf16)
        st_vec<V>(params_bf16 + i, p);
}

/* Passed by value: the segment table lives in the kernel's parameter space (constant bank).
 * wide: the buffers allow 16-byte accesses (host-checked); a segment whose offset is a multiple
 * of 4 then goes 4 elements a thread, its last count % 4 one each. */
static __global__ void adamw_kernel(float *params, uint16_t *params_bf16, const float *grads,
                                    float *m, float *v, const struct adamw_table tab, float lr,
                                    float b1, float b2, float eps, float wd, float step, float sbc2,
                                    const float *gscale, int wide)
{
    const struct adamw_segment s = tab.seg[blockIdx.y];
    const float shrink = s.decay ? 1.0f - lr * wd : 1.0f, gs = gscale ? *gscale : 1.0f;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0; /* elements of the segment the 4-wide loop covers */
    if (wide && s.offset % 4 == 0) {
        done = s.count / 4 * 4;
        for (size_t j = first * 4; j < done; j += stride * 4)
            adamw_elems<4>(s.offset + j, params, params_bf16, grads, m, v, shrink, gs,
                           gscale != NULL, b1, b2, eps, step, sbc2);
    }
    for (size_t j = done + first; j < s.count; j += stride)
        adamw_elems<1>(s.offset + j, params, params_bf16, grads, m, v, shrink, gs,
                       gscale != NULL, b1, b2, eps, step, sbc2);
}

extern "C" void adamw_update(float *params, uint16_t *params_bf16, const float *grads, float *m,
                             float *v, const struct adamw_segment *segs, int nseg, float lr,
                             float beta1, float beta2, float eps, float weight_decay, long t,
                             const float *gscale, struct CUstream_st *stream)
{
    struct adamw_table tab;
    size_t most = 0;
    if (nseg <= 0)
        return;
    if (nseg > ADAMW_GPU_MAX_SEGMENTS) {
        fprintf(stderr, "adamw_update: %d tensors, at most %d\nHINT: raise ADAMW_GPU_MAX_SEGMENTS "
                        "(kernels/gpu.h)\n", nseg, ADAMW_GPU_MAX_SEGMENTS);
        exit(1);
    }
    memset(&tab, 0, sizeof(tab));
    for (int i = 0; i < nseg; i++) {
        tab.seg[i] = segs[i];
        most = segs[i].count > most ? segs[i].count : most;
    }
    /* the same bias corrections as worker/optim.c, computed once on the host */
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    unsigned gx = (unsigned)CEIL_DIV(most, 256);
    gx = gx < 1024 ? (gx > 0 ? gx : 1) : 1024;
    const int wide = vec4_ok(params, grads, m, v, params_bf16);
    adamw_kernel<<<dim3(gx, nseg), 256, 0, stream>>>(params, params_bf16, grads, m, v, tab, lr,
                                                     beta1, beta2, eps, weight_decay, lr / bc1,
                                                     sqrtf(bc2), gscale, wide);
    GPU_LAUNCH_CHECK();
}
