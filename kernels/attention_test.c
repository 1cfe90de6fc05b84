/* Self-attention on the CPU: against a naive double-precision reference with an explicit key
 * mask, padding keys have no influence, and backward against finite differences. */
#include "kernels/attention.h"

#include <math.h>

#include "common/test.h"
#include "kernels/gradcheck.h"

enum { B = 2, T = 5, C = 8, NH = 2, HS = C / NH };
static const int len[B] = {5, 3};

struct ctx {
    float qkv[B * T * 3 * C], out[B * T * C], att[B * NH * T * T], dout[B * T * C];
};

static double loss(void *p)
{
    struct ctx *c = p;
    attention_forward_cpu(c->out, c->att, c->qkv, len, B, T, C, NH);
    return gc_dot(c->out, c->dout, B * T * C);
}

static void test_forward_matches_naive(void)
{
    static struct ctx c;
    uint64_t s = 21;
    gc_fill(c.qkv, B * T * 3 * C, &s, -2, 2);
    attention_forward_cpu(c.out, c.att, c.qkv, len, B, T, C, NH);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < len[b]; i++) {
                double sc[T], mx = -INFINITY, sum = 0;
                const float *q = c.qkv + (b * T + i) * 3 * C + h * HS;
                for (int j = 0; j < T; j++) {
                    const float *k = c.qkv + (b * T + j) * 3 * C + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)q[e] * k[e];
                    sc[j] = j < len[b] ? d / sqrt(HS) : -INFINITY; /* the padding mask */
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < T; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        o += sc[j] / sum * c.qkv[(b * T + j) * 3 * C + 2 * C + h * HS + e];
                    TEST_NEAR(c.out[(b * T + i) * C + h * HS + e], o, 1e-5);
                }
                TEST_NEAR(c.att[((b * NH + h) * T + i) * T + 1], sc[1] / sum, 1e-6);
            }
        }
    }
    /* Padding query rows come out as zeros. */
    TEST_NEAR(c.out[(1 * T + 4) * C + 3], 0.0, 0.0);
}

static void test_padding_keys_have_no_influence(void)
{
    static struct ctx c;
    static float before[B * T * C];
    uint64_t s = 4;
    gc_fill(c.qkv, B * T * 3 * C, &s, -1, 1);
    attention_forward_cpu(before, c.att, c.qkv, len, B, T, C, NH);
    for (int t = len[1]; t < T; t++) /* scribble over sequence 1's padding */
        for (int e = 0; e < 3 * C; e++)
            c.qkv[(1 * T + t) * 3 * C + e] = 1e3f;
    attention_forward_cpu(c.out, c.att, c.qkv, len, B, T, C, NH);
    int same = 1;
    for (int i = 0; i < B * T * C; i++)
        same &= c.out[i] == before[i];
    TEST_CHECK(same);
}

static void test_backward_matches_finite_differences(void)
{
    static struct ctx c;
    static float dqkv[B * T * 3 * C];
    uint64_t s = 9;
    gc_fill(c.qkv, B * T * 3 * C, &s, -1, 1);
    gc_fill(c.dout, B * T * C, &s, -1, 1);
    for (int i = 0; i < B * T * 3 * C; i++)
        dqkv[i] = 2.0f;
    loss(&c);
    attention_backward_cpu(dqkv, c.dout, c.qkv, c.att, len, B, T, C, NH);
    for (int i = 0; i < B * T * 3 * C; i++)
        dqkv[i] -= 2.0f;
    gc_check("dqkv", c.qkv, dqkv, B * T * 3 * C, 1, loss, &c, 1e-2f, 1e-3, 1e-2);
}

int main(void)
{
    TEST_RUN(test_forward_matches_naive);
    TEST_RUN(test_padding_keys_have_no_influence);
    TEST_RUN(test_backward_matches_finite_differences);
    return test_summary();
}
