// AdamW and gradient clipping on the GPU, with no host synchronisation: the global norm and the
// clip coefficient stay on the device and the update reads the coefficient from there. The update
// is ONE launch over the whole parameter buffer (grid.y = tensor, grid.x = elements), with
// worker/optim.c's formula in the same float order.
#include "kernels/gpu_internal.h"

#include <string.h>

#define NORM_BLOCKS 256
#define NORM_THREADS 256

/* part[blockIdx] = sum of squares of this block's grid-stride elements, in double */
static __global__ void sumsq_part_kernel(double *part, const float *g, size_t n)
{
    __shared__ double sh[NORM_THREADS / 32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0)
        sh[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < NORM_THREADS / 32; w++)
            t += sh[w];
        part[blockIdx.x] = t;
    }
}

static __global__ void sumsq_finish_kernel(float *norm, const double *part, int nparts)
{
    double t = 0.0;
    for (int p = 0; p < nparts; p++)
        t += part[p];
    *norm = (float)sqrt(t);
}

extern "C" void grad_norm(float *norm, const float *grads, size_t n, struct CUstream_st *stream)
{
    double *part = (double *)gpu_scratch(NORM_BLOCKS * sizeof(double), stream);
    sumsq_part_kernel<<<NORM_BLOCKS, NORM_THREADS, 0, stream>>>(part, grads, n);
    GPU_LAUNCH_CHECK();
    sumsq_finish_kernel<<<1, 1, 0, stream>>>(norm, part, NORM_BLOCKS);
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

/* Passed by value: the segment table lives in the kernel's parameter space (constant bank). */
static __global__ void adamw_kernel(float *params, uint16_t *params_bf16, const float *grads,
                                    float *m, float *v, const struct adamw_table tab, float lr,
                                    float b1, float b2, float eps, float wd, float step, float sbc2,
                                    const float *gscale)
{
    const struct adamw_segment s = tab.seg[blockIdx.y];
    float shrink = s.decay ? 1.0f - lr * wd : 1.0f, gs = gscale ? *gscale : 1.0f;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < s.count;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t i = s.offset + j;
        float g = gscale ? grads[i] * gs : grads[i];
        float mm = b1 * m[i] + (1.0f - b1) * g;
        float vv = b2 * v[i] + (1.0f - b2) * g * g;
        float p = params[i] * shrink - step * mm / (sqrtf(vv) / sbc2 + eps);
        m[i] = mm;
        v[i] = vv;
        params[i] = p;
        if (params_bf16)
            params_bf16[i] = f32_to_bf16_bits(p);
    }
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
    adamw_kernel<<<dim3(gx, nseg), 256, 0, stream>>>(params, params_bf16, grads, m, v, tab, lr,
                                                     beta1, beta2, eps, weight_decay, lr / bc1,
                                                     sqrtf(bc2), gscale);
    GPU_LAUNCH_CHECK();
}
