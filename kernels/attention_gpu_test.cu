// Masked multi-head attention on the GPU against kernels/attention_cpu.c: the output, the saved
// probabilities (zero outside each sequence's L x L block) and the accumulated dqkv, for lengths
// 1, T and in between; fp32 and the bf16 tensor-core variant (*_mixed, bf16 tolerances).
#include "kernels/attention.h"
#include "kernels/gpu_testutil.h"

static void check(int B, int T, int C, int NH, const int *len, uint64_t seed)
{
    uint64_t s = seed;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = gt_randv(nq, &s, -1, 1), *out = gt_randv(no, &s, 0, 1);
    float *att = gt_randv(na, &s, 0, 1), *dout = gt_randv(no, &s, -1, 1);
    float *dqkv = gt_randv(nq, &s, -1, 1);
    int *d_len = GT_UPI(len, B);
    float *d_qkv = GT_UPF(qkv, nq), *d_out = GT_UPF(out, no), *d_att = GT_UPF(att, na);
    float *d_dout = GT_UPF(dout, no), *d_dqkv = GT_UPF(dqkv, nq);

    printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
    attention_forward_cpu(out, att, qkv, len, B, T, C, NH);
    attention_forward(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    gt_compare("attention_forward out", d_out, out, no, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("attention_forward att", d_att, att, na, 1e-6, GT_F32_RTOL);
    float *dqkv0 = gt_copyv(dqkv, nq);
    attention_backward_cpu(dqkv, dout, qkv, att, len, B, T, C, NH);
    attention_backward(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    gt_compare("attention_backward dqkv", d_dqkv, dqkv, nq, 1e-4, GT_F32_RTOL);

    /* bf16 tensor-core GEMMs inside: q, k, v, dout and P rounded to bf16 (2^-9 relative each) */
    attention_forward_mixed(d_out, d_att, d_qkv, d_len, B, T, C, NH, 0);
    gt_compare("attention_fwd_mixed out", d_out, out, no, 2e-2, 5e-2);
    gt_compare("attention_fwd_mixed att", d_att, att, na, 1e-2, 5e-2);
    CUDA_CHECK(cudaMemcpy(d_dqkv, dqkv0, nq * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_att, att, na * sizeof(float), cudaMemcpyHostToDevice));
    attention_backward_mixed(d_dqkv, d_dout, d_qkv, d_att, d_len, B, T, C, NH, 0);
    gt_compare("attention_bwd_mixed dqkv", d_dqkv, dqkv, nq, 2e-2, 5e-2);
    free(dqkv0);
    cudaFree(d_len), cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_att), cudaFree(d_dout);
    cudaFree(d_dqkv);
    free(qkv), free(out), free(att), free(dout), free(dqkv);
}

int main(void)
{
    gt_require_device("attention_gpu_test");
    const int len1[3] = {1, 64, 29};
    check(3, 64, 96, 4, len1, 1);
    const int len2[2] = {256, 100}; /* GPT-2 head size 64 */
    check(2, 256, 768, 12, len2, 2);
    const int len3[2] = {5, 7}; /* T not a multiple of 32 */
    check(2, 7, 24, 3, len3, 3);
    return gt_summary("attention_gpu_test");
}
