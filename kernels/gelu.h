/*
 * gelu.h - GELU activation, forward and backward (tanh approximation, as GPT-2/BERT kernels and
 * PyTorch's nn.GELU(approximate="tanh") compute it).
 *
 * Shapes are flat: n elements. The CPU functions are the specification (fp32, obvious loops,
 * OpenMP where it pays); the CUDA launchers have the same arguments plus a stream and operate on
 * device pointers. gelu_backward_* accumulates: dinp += dout * gelu'(inp), as backward passes add
 * into gradient buffers.
 */
#ifndef GANTRY_GELU_H
#define GANTRY_GELU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t without pulling CUDA headers into C code */

void gelu_forward_cpu(float *out, const float *inp, size_t n);
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n);

void gelu_forward(float *out, const float *inp, size_t n, struct CUstream_st *stream);
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                   struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_GELU_H */
