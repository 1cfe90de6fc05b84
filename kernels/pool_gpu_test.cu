// Mean and CLS pooling on the GPU against kernels/pool_cpu.c, with padded sequences.
#include "kernels/gpu_testutil.h"
#include "kernels/pool.h"

int main(void)
{
    const int B = 5, T = 33, C = 300;
    int len[B] = {1, 33, 17, 2, 30};
    uint64_t s = 5;
    size_t n = (size_t)B * T * C;

    gt_require_device("pool_gpu_test");
    float *inp = gt_randv(n, &s, -1, 1), *out = gt_randv((size_t)B * C, &s, -1, 1);
    float *dout = gt_randv((size_t)B * C, &s, -1, 1), *dinp = gt_randv(n, &s, -1, 1);
    int *d_len = GT_UPI(len, B);
    float *d_inp = GT_UPF(inp, n), *d_out = GT_UPF(out, (size_t)B * C);
    float *d_dout = GT_UPF(dout, (size_t)B * C), *d_dinp = GT_UPF(dinp, n);

    meanpool_forward_cpu(out, inp, len, B, T, C);
    meanpool_forward(d_out, d_inp, d_len, B, T, C, 0);
    gt_compare("meanpool_forward", d_out, out, (size_t)B * C, GT_F32_ATOL, GT_F32_RTOL);
    meanpool_backward_cpu(dinp, dout, len, B, T, C);
    meanpool_backward(d_dinp, d_dout, d_len, B, T, C, 0);
    gt_compare("meanpool_backward", d_dinp, dinp, n, GT_F32_ATOL, GT_F32_RTOL);
    clspool_forward_cpu(out, inp, B, T, C);
    clspool_forward(d_out, d_inp, B, T, C, 0);
    gt_compare("clspool_forward", d_out, out, (size_t)B * C, 0, 0);
    clspool_backward_cpu(dinp, dout, B, T, C);
    clspool_backward(d_dinp, d_dout, B, T, C, 0);
    gt_compare("clspool_backward", d_dinp, dinp, n, GT_F32_ATOL, GT_F32_RTOL);
    cudaFree(d_len), cudaFree(d_inp), cudaFree(d_out), cudaFree(d_dout), cudaFree(d_dinp);
    free(inp), free(out), free(dout), free(dinp);
    return gt_summary("pool_gpu_test");
}
