// Fused softmax cross-entropy on the GPU against kernels/crossentropy_cpu.c: 2 classes (the
// classifier), a vocabulary-sized row (several warps, block reductions), and large logits;
// without and with label smoothing.
#include "kernels/crossentropy.h"
#include "kernels/gpu_testutil.h"

static void check(int B, int K, float scale_logits, uint64_t seed, float smoothing, int weighted)
{
    uint64_t s = seed;
    size_t n = (size_t)B * K;
    int *labels = (int *)malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++)
        labels[b] = (int)gt_rand(&s, 0, (float)K);
    float *logits = gt_randv(n, &s, -scale_logits, scale_logits), *probs = gt_randv(n, &s, 0, 1);
    float *losses = gt_randv(B, &s, 0, 1), *dlogits = gt_randv(n, &s, -1, 1);
    int *d_labels = GT_UPI(labels, B);
    float *d_logits = GT_UPF(logits, n), *d_probs = GT_UPF(probs, n), *d_losses = GT_UPF(losses, B);
    float *d_dlogits = GT_UPF(dlogits, n);
    float *w = weighted ? gt_randv((size_t)K, &s, 0.2f, 3.0f) : NULL;
    float *d_w = weighted ? GT_UPF(w, (size_t)K) : NULL;

    printf("crossentropy B=%d K=%d logits in +-%g smoothing %g%s\n", B, K, (double)scale_logits,
           (double)smoothing, weighted ? " class weights" : "");
    crossentropy_forward_cpu(losses, probs, logits, labels, smoothing, w, B, K);
    crossentropy_forward(d_losses, d_probs, d_logits, d_labels, smoothing, d_w, B, K, 0);
    gt_compare("crossentropy losses", d_losses, losses, B, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("crossentropy probs", d_probs, probs, n, 1e-7, GT_F32_RTOL);
    crossentropy_backward_cpu(dlogits, probs, labels, smoothing, w, 1.0f / B, B, K);
    crossentropy_backward(d_dlogits, d_probs, d_labels, smoothing, d_w, 1.0f / B, B, K, 0);
    gt_compare("crossentropy dlogits", d_dlogits, dlogits, n, GT_F32_ATOL, GT_F32_RTOL);
    cudaFree(d_labels), cudaFree(d_logits), cudaFree(d_probs), cudaFree(d_losses);
    cudaFree(d_dlogits), cudaFree(d_w);
    free(w);
    free(labels), free(logits), free(probs), free(losses), free(dlogits);
}

// Multi-label BCE against the CPU: bit-set targets of ceil(K / 32) words, K of 1 to 2000.
static void check_bce(int B, int K, float scale_logits, uint64_t seed)
{
    uint64_t s = seed;
    int words = (K + 31) / 32;
    size_t n = (size_t)B * K;
    int *y = (int *)malloc(sizeof(int) * (size_t)B * words);
    for (int i = 0; i < B * words; i++)
        y[i] = (int)((unsigned)gt_rand(&s, 0, 65536.0f) * 65537u);
    float *logits = gt_randv(n, &s, -scale_logits, scale_logits), *probs = gt_randv(n, &s, 0, 1);
    float *losses = gt_randv(B, &s, 0, 1), *dlogits = gt_randv(n, &s, -1, 1);
    int *d_y = GT_UPI(y, (size_t)B * words);
    float *d_logits = GT_UPF(logits, n), *d_probs = GT_UPF(probs, n), *d_losses = GT_UPF(losses, B);
    float *d_dlogits = GT_UPF(dlogits, n);

    printf("bce B=%d K=%d logits in +-%g\n", B, K, (double)scale_logits);
    bce_forward_cpu(losses, probs, logits, y, words, B, K);
    bce_forward(d_losses, d_probs, d_logits, d_y, words, B, K, 0);
    gt_compare("bce losses", d_losses, losses, B, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("bce probs", d_probs, probs, n, 1e-7, GT_F32_RTOL);
    bce_backward_cpu(dlogits, probs, y, words, 1.0f / B, B, K);
    bce_backward(d_dlogits, d_probs, d_y, words, 1.0f / B, B, K, 0);
    gt_compare("bce dlogits", d_dlogits, dlogits, n, GT_F32_ATOL, GT_F32_RTOL);
    cudaFree(d_y), cudaFree(d_logits), cudaFree(d_probs), cudaFree(d_losses), cudaFree(d_dlogits);
    free(y), free(logits), free(probs), free(losses), free(dlogits);
}

// Regression's squared error against the CPU.
static void check_mse(int B, uint64_t seed)
{
    uint64_t s = seed;
    float *z = gt_randv((size_t)B, &s, -5, 5), *y = gt_randv((size_t)B, &s, -5, 5);
    float *l = gt_randv((size_t)B, &s, 0, 1), *p = gt_randv((size_t)B, &s, 0, 1);
    float *dz = gt_randv((size_t)B, &s, -1, 1);
    float *d_z = GT_UPF(z, B), *d_y = GT_UPF(y, B), *d_l = GT_UPF(l, B), *d_p = GT_UPF(p, B);
    float *d_dz = GT_UPF(dz, B);
    printf("mse B=%d\n", B);
    mse_forward_cpu(l, p, z, y, B);
    mse_forward(d_l, d_p, d_z, d_y, B, 0);
    gt_compare("mse losses", d_l, l, B, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("mse preds", d_p, p, B, 0, 0);
    mse_backward_cpu(dz, z, y, 1.0f / B, B);
    mse_backward(d_dz, d_z, d_y, 1.0f / B, B, 0);
    gt_compare("mse dlogits", d_dz, dz, B, GT_F32_ATOL, GT_F32_RTOL);
    cudaFree(d_z), cudaFree(d_y), cudaFree(d_l), cudaFree(d_p), cudaFree(d_dz);
    free(z), free(y), free(l), free(p), free(dz);
}

int main(void)
{
    gt_require_device("crossentropy_gpu_test");
    check_mse(1, 21);
    check_mse(1000, 22);
    check_bce(64, 1, 4, 11);
    check_bce(32, 6, 4, 12);
    check_bce(16, 37, 8, 13);
    check_bce(8, 2000, 80, 14);
    check(64, 2, 4, 1, 0.0f, 0);
    check(8, 50257, 8, 2, 0.0f, 0);
    check(16, 1000, 80, 3, 0.0f, 0); /* exp would overflow without the max shift */
    check(64, 2, 4, 4, 0.1f, 0);
    check(8, 50257, 8, 5, 0.1f, 0);
    check(16, 1000, 80, 6, 0.2f, 0);
    check(64, 2, 4, 7, 0.0f, 1);
    check(16, 1000, 8, 8, 0.1f, 1);
    return gt_summary("crossentropy_gpu_test");
}
