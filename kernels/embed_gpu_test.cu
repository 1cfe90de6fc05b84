// Embedding lookup and bag mean on the GPU against kernels/embed_cpu.c; the backward's token ids
// repeat on purpose (a skewed distribution) so the deterministic scatter has long runs.
#include "kernels/embed.h"
#include "kernels/gpu_testutil.h"

static void test_embed(void)
{
    const int B = 4, T = 64, C = 96, V = 50, maxT = 80;
    uint64_t s = 7;
    int tokens[B * T];
    for (int i = 0; i < B * T; i++) /* half the ids are 0..3: long runs in the sorted scatter */
        tokens[i] = i % 2 ? (int)(gt_rand(&s, 0, 4)) : (int)gt_rand(&s, 0, (float)V);
    float *wte = gt_randv((size_t)V * C, &s, -1, 1), *wpe = gt_randv((size_t)maxT * C, &s, -1, 1);
    float *out = (float *)malloc(sizeof(float) * B * T * C);
    float *dout = gt_randv((size_t)B * T * C, &s, -1, 1);
    float *dwte = gt_randv((size_t)V * C, &s, -1, 1), *dwpe = gt_randv((size_t)maxT * C, &s, -1, 1);
    int *d_tok = GT_UPI(tokens, B * T);
    float *d_wte = GT_UPF(wte, (size_t)V * C), *d_wpe = GT_UPF(wpe, (size_t)maxT * C);
    float *d_out = GT_UPF(out, (size_t)B * T * C), *d_dout = GT_UPF(dout, (size_t)B * T * C);
    float *d_dwte = GT_UPF(dwte, (size_t)V * C), *d_dwpe = GT_UPF(dwpe, (size_t)maxT * C);

    embed_forward_cpu(out, tokens, wte, wpe, B, T, C);
    embed_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    gt_compare("embed_forward", d_out, out, (size_t)B * T * C, 0, 0); /* one add: exact */
    embed_backward_cpu(dwte, dwpe, dout, tokens, B, T, C);
    embed_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, 0);
    gt_compare("embed_backward dwte", d_dwte, dwte, (size_t)V * C, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("embed_backward dwpe", d_dwpe, dwpe, (size_t)maxT * C, GT_F32_ATOL, GT_F32_RTOL);

    /* determinism: a second backward from the same start gives the same bits */
    float *first = gt_down(d_dwte, (size_t)V * C);
    CUDA_CHECK(cudaMemcpy(d_dwte, first, sizeof(float) * V * C, cudaMemcpyHostToDevice));
    embed_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, 0);
    float *second = gt_down(d_dwte, (size_t)V * C);
    CUDA_CHECK(cudaMemcpy(d_dwte, first, sizeof(float) * V * C, cudaMemcpyHostToDevice));
    embed_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, 0);
    gt_compare("embed_backward repeat", d_dwte, second, (size_t)V * C, 0, 0);
    free(first);
    free(second);
    cudaFree(d_tok), cudaFree(d_wte), cudaFree(d_wpe), cudaFree(d_out), cudaFree(d_dout);
    cudaFree(d_dwte), cudaFree(d_dwpe);
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
}

static void test_embbag(void)
{
    const int B = 6, M = 20, D = 40, R = 30;
    uint64_t s = 11;
    int ids[B * M], count[B] = {0, 1, 20, 7, 13, 2}; /* an empty bag, a full one */
    for (int i = 0; i < B * M; i++)
        ids[i] = (int)gt_rand(&s, 0, (float)R);
    float *table = gt_randv((size_t)R * D, &s, -1, 1), *out = gt_randv((size_t)B * D, &s, -1, 1);
    float *dout = gt_randv((size_t)B * D, &s, -1, 1), *dtable = gt_randv((size_t)R * D, &s, -1, 1);
    int *d_ids = GT_UPI(ids, B * M), *d_count = GT_UPI(count, B);
    float *d_table = GT_UPF(table, (size_t)R * D), *d_out = GT_UPF(out, (size_t)B * D);
    float *d_dout = GT_UPF(dout, (size_t)B * D), *d_dtable = GT_UPF(dtable, (size_t)R * D);

    embbag_forward_cpu(out, ids, count, table, B, M, D);
    embbag_forward(d_out, d_ids, d_count, d_table, B, M, D, 0);
    gt_compare("embbag_forward", d_out, out, (size_t)B * D, GT_F32_ATOL, GT_F32_RTOL);
    embbag_backward_cpu(dtable, dout, ids, count, B, M, D);
    embbag_backward(d_dtable, d_dout, d_ids, d_count, B, M, D, R, 0);
    gt_compare("embbag_backward", d_dtable, dtable, (size_t)R * D, GT_F32_ATOL, GT_F32_RTOL);
    cudaFree(d_ids), cudaFree(d_count), cudaFree(d_table), cudaFree(d_out), cudaFree(d_dout);
    cudaFree(d_dtable);
    free(table), free(out), free(dout), free(dtable);
}

int main(void)
{
    gt_require_device("embed_gpu_test");
    test_embed();
    test_embbag();
    return gt_summary("embed_gpu_test");
}
