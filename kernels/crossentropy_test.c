/* Softmax cross-entropy on the CPU: known values (PyTorch's, with and without label smoothing),
 * huge logits stay finite, backward against finite differences of the mean loss. */
#include "kernels/crossentropy.h"

#include <math.h>

#include "common/test.h"
#include "kernels/gradcheck.h"

enum { B = 4, K = 3 };

struct ctx {
    float z[B * K], probs[B * K], losses[B];
    int labels[B];
    float smoothing;
    const float *weights;
};

static double loss(void *p)
{
    struct ctx *c = p;
    double s = 0;
    crossentropy_forward_cpu(c->losses, c->probs, c->z, c->labels, c->smoothing, c->weights, B,
                             K);
    for (int b = 0; b < B; b++)
        s += c->losses[b];
    return s / B;
}

static void test_known_values(void)
{
    /* PyTorch: F.cross_entropy(torch.tensor([[1., 2., 3.]]), torch.tensor([0])) = 2.40760596 */
    float z[3] = {1, 2, 3}, p[3], l;
    int y = 0;
    crossentropy_forward_cpu(&l, p, z, &y, 0.0f, NULL, 1, 3);
    TEST_NEAR(l, 2.40760596, 1e-6);
    TEST_NEAR(p[2], 0.66524096, 1e-6);
    /* F.cross_entropy(..., label_smoothing=0.1) = 2.30760598: 0.9 x 2.4076 + 0.1 x (lse - 2) */
    crossentropy_forward_cpu(&l, p, z, &y, 0.1f, NULL, 1, 3);
    TEST_NEAR(l, 2.30760598, 1e-6);
    TEST_NEAR(p[2], 0.66524096, 1e-6); /* the probabilities do not change */
    float big[2] = {1000.0f, -1000.0f};
    y = 1;
    crossentropy_forward_cpu(&l, p, big, &y, 0.0f, NULL, 1, 2);
    TEST_NEAR(l, 2000.0, 1e-3);
    crossentropy_forward_cpu(&l, p, big, &y, 0.2f, NULL, 1, 2); /* 0.8 x 2000 + 0.2 x 1000 */
    TEST_NEAR(l, 1800.0, 1e-3);
    /* class weights scale each example's loss by its label's weight */
    const float w[3] = {2.5f, 1.0f, 0.5f};
    y = 0;
    crossentropy_forward_cpu(&l, p, z, &y, 0.1f, w, 1, 3);
    TEST_NEAR(l, 2.5 * 2.30760598, 1e-5);
}

static void backward_check(float smoothing, const float *weights)
{
    static struct ctx c;
    float dz[B * K];
    uint64_t s = 17;
    gc_fill(c.z, B * K, &s, -3, 3);
    for (int b = 0; b < B; b++)
        c.labels[b] = b % K;
    c.smoothing = smoothing;
    c.weights = weights;
    for (int i = 0; i < B * K; i++)
        dz[i] = 0.0f;
    loss(&c);
    crossentropy_backward_cpu(dz, c.probs, c.labels, smoothing, weights, 1.0f / B, B, K);
    gc_check("dlogits", c.z, dz, B * K, 1, loss, &c, 1e-2f, 1e-4, 1e-3);
}

static void test_backward_matches_finite_differences(void)
{
    static const float w[K] = {0.4f, 1.7f, 1.0f};
    backward_check(0.0f, NULL);
    backward_check(0.1f, NULL);
    backward_check(0.6f, NULL);
    backward_check(0.0f, w);
    backward_check(0.2f, w);
}

/* Multi-label BCE. PyTorch: F.binary_cross_entropy_with_logits(torch.tensor([[1., -2., 3.]]),
 * torch.tensor([[1., 0., 0.]])) = 1.16292568 (mean of 0.31326169, 0.12692801, 3.04858735). */
static void test_bce_known_values(void)
{
    float z[3] = {1, -2, 3}, p[3], l;
    int y = 1; /* class 0 */
    bce_forward_cpu(&l, p, z, &y, 1, 1, 3);
    TEST_NEAR(l, 1.16292568, 1e-6);
    TEST_NEAR(p[0], 0.73105858, 1e-6);
    TEST_NEAR(p[1], 0.11920292, 1e-6);
    float big[2] = {1000.0f, -1000.0f};
    y = 2; /* class 1 only: both wrong by 1000 */
    bce_forward_cpu(&l, p, big, &y, 1, 1, 2);
    TEST_NEAR(l, 1000.0, 1e-3);
    TEST_CHECK(p[0] == 1.0f && p[1] == 0.0f);
    /* a class past the first word: K = 40, class 35 set, logits 0: loss log 2 */
    float zero[40] = {0}, p40[40];
    int two[2] = {0, 1 << 3};
    bce_forward_cpu(&l, p40, zero, two, 2, 1, 40);
    TEST_NEAR(l, 0.69314718, 1e-6);
    float dz[40] = {0};
    bce_backward_cpu(dz, p40, two, 2, 1.0f, 1, 40);
    TEST_NEAR(dz[35], -0.5 / 40, 1e-7);
    TEST_NEAR(dz[34], 0.5 / 40, 1e-7);
}

enum { BK = 37 }; /* classes: two words of bits */
struct bctx {
    float z[B * BK], probs[B * BK], losses[B];
    int y[B * 2];
};

static double bce_loss(void *p)
{
    struct bctx *c = p;
    double s = 0;
    bce_forward_cpu(c->losses, c->probs, c->z, c->y, 2, B, BK);
    for (int b = 0; b < B; b++)
        s += c->losses[b];
    return s / B;
}

static void test_bce_backward_matches_finite_differences(void)
{
    static struct bctx c;
    float dz[B * BK] = {0};
    uint64_t s = 23;
    gc_fill(c.z, B * BK, &s, -4, 4);
    for (int i = 0; i < B * 2; i++)
        c.y[i] = (int)(0x9E3779B9u * (unsigned)(i + 1));
    bce_loss(&c);
    bce_backward_cpu(dz, c.probs, c.y, 2, 1.0f / B, B, BK);
    gc_check("bce dlogits", c.z, dz, B * BK, 1, bce_loss, &c, 1e-2f, 1e-4, 1e-3);
}

/* Regression: PyTorch's F.mse_loss(torch.tensor([1.5, -2.]), torch.tensor([1., 1.])) = 4.625
 * (0.25 and 9, averaged); the gradient of the mean is 2 (z - y) / B. */
static void test_mse(void)
{
    const float z[2] = {1.5f, -2.0f}, y[2] = {1.0f, 1.0f};
    float l[2], p[2], dz[2] = {0.0f, 0.0f};
    mse_forward_cpu(l, p, z, y, 2);
    TEST_NEAR((l[0] + l[1]) / 2, 4.625, 1e-7);
    TEST_NEAR(p[1], -2.0, 0);
    mse_backward_cpu(dz, z, y, 0.5f, 2);
    TEST_NEAR(dz[0], 0.5, 1e-7);
    TEST_NEAR(dz[1], -3.0, 1e-7);
}

int main(void)
{
    TEST_RUN(test_mse);
    TEST_RUN(test_bce_known_values);
    TEST_RUN(test_bce_backward_matches_finite_differences);
    TEST_RUN(test_known_values);
    TEST_RUN(test_backward_matches_finite_differences);
    return test_summary();
}
