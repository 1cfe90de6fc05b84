// GELU on the GPU: one thread per element, same math as gelu_cpu.c (the specification).
#include "kernels/gelu.h"
#include "kernels/bf16.h"
#include "kernels/cuda_common.h"

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

/* dinp = dout * gelu'(inp) (inp bf16), overwritten, and its bf16 rounding: gelu_backward into
 * zeros, then a cast */
static __global__ void gelu_backward_bf16_kernel(float *dinp, uint16_t *dinp16,
                                                 const uint16_t *inp, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        /* 0 + x, as when accumulated into zeros (a -0 product becomes +0) */
        float d = 0.0f + dout[i] * gelu_grad(bf16_to_f32(inp[i]));
        dinp[i] = d;
        dinp16[i] = bf16_from_f32(d);
    }
}

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

extern "C" void gelu_backward_bf16(float *dinp, uint16_t *dinp16, const uint16_t *inp,
                                   const float *dout, size_t n, struct CUstream_st *stream)
{
    const int block = 256;
    if (n == 0)
        return;
    gelu_backward_bf16_kernel<<<(unsigned)CEIL_DIV(n, block), block, 0, stream>>>(dinp, dinp16,
                                                                                 inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}
