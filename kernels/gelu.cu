// GELU on the GPU: one thread per element, same math as gelu_cpu.c (the specification).
#include "kernels/gelu.h"
#include "kernels/bf16.h"
#include "kernels/colsum.cuh"
#include "kernels/gpu_internal.h"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

/* gelu_forward_kernel from a bf16 input, the output rounded to bf16 (kernels/bf16.h). */
static __global__ void gelu_forward_bf16_kernel(uint16_t *out, const uint16_t *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = bf16_to_f32(inp[i]);
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = bf16_from_f32(0.5f * x * (1.0f + tanhf(u)));
    }
}

/* d gelu(x) / dx of the tanh form */
static __device__ __forceinline__ float gelu_grad(float x)
{
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float t = tanhf(u);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dinp[i] += dout[i] * gelu_grad(inp[i]);
}

/* colsum.cuh's source for gelu_backward_bf16: element i of dout * gelu'(inp) in fp32 (0 + x, as
 * when accumulated into zeros: a -0 product becomes +0), its bf16 rounding stored on the side */
struct gelu_bwd_src {
    static constexpr int NRAW = 2; /* dout, inp */
    const uint16_t *dout;
    const uint16_t *inp;
    uint16_t *dinp16;
    template <int V> __device__ void fetch(size_t i, float *raw) const
    {
        ld_vec<V>(raw, dout + i);
        ld_vec<V>(raw + V, inp + i);
    }
    template <int V> __device__ void finish(size_t i, const float *raw, float *v) const
    {
#pragma unroll
        for (int k = 0; k < V; k++)
            v[k] = 0.0f + raw[k] * gelu_grad(raw[V + k]);
        st_vec<V>(dinp16 + i, v);
    }
};

extern "C" void gelu_forward(float *out, const float *inp, size_t n, struct CUstream_st *stream)
{
    const int block = 256;
    if (n == 0)
        return;
    gelu_forward_kernel<<<(unsigned)CEIL_DIV(n, block), block, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                              struct CUstream_st *stream)
{
    const int block = 256;
    if (n == 0)
        return;
    gelu_backward_kernel<<<(unsigned)CEIL_DIV(n, block), block, 0, stream>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n,
                                  struct CUstream_st *stream)
{
    const int block = 256;
    if (n == 0)
        return;
    gelu_forward_bf16_kernel<<<(unsigned)CEIL_DIV(n, block), block, 0, stream>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void gelu_backward_bf16(uint16_t *dinp16, float *dbias, const uint16_t *inp,
                                   const uint16_t *dout, int N, int OC, struct CUstream_st *stream)
{
    if (N <= 0 || OC <= 0)
        return;
    int nparts = CEIL_DIV(N, CS_ROWS);
    float *part = (float *)gpu_scratch((size_t)nparts * OC * sizeof(float), stream);
    const int V = OC % 4 == 0 && vec4_ok(dout, inp, dinp16) ? 4 : 1;
    typedef void kernel_t(float *, gelu_bwd_src, int, int);
    kernel_t *k =
        V == 4 ? colsum_part_kernel<gelu_bwd_src, 4> : colsum_part_kernel<gelu_bwd_src, 1>;
    k<<<dim3(CEIL_DIV(OC, 32 * V), nparts), dim3(32, 8), 0, stream>>>(
        part, gelu_bwd_src{dout, inp, dinp16}, N, OC);
    GPU_LAUNCH_CHECK();
    colsum_finish_kernel<<<CEIL_DIV(OC, 256), 256, 0, stream>>>(dbias, part, nparts, OC);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(part, stream);
}
