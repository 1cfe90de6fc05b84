/* Mean (masked) and CLS pooling on the CPU: values, and backward against finite differences. */
#include "kernels/pool.h"

#include "common/test.h"
#include "kernels/gradcheck.h"

enum { B = 3, T = 4, C = 5 };
static const int len[B] = {4, 1, 2};

struct ctx {
    float x[B * T * C], out[B * C], dout[B * C];
    int cls;
};

static double loss(void *p)
{
    struct ctx *c = p;
    if (c->cls)
        clspool_forward_cpu(c->out, c->x, B, T, C);
    else
        meanpool_forward_cpu(c->out, c->x, len, B, T, C);
    return gc_dot(c->out, c->dout, B * C);
}

static void test_values(void)
{
    static struct ctx c;
    for (int i = 0; i < B * T * C; i++)
        c.x[i] = (float)i;
    meanpool_forward_cpu(c.out, c.x, len, B, T, C);
    TEST_NEAR(c.out[0], (0 + 5 + 10 + 15) / 4.0, 1e-6);
    TEST_NEAR(c.out[1 * C + 2], 22, 1e-6);            /* one token: row 0 of sequence 1 */
    TEST_NEAR(c.out[2 * C + 0], (40 + 45) / 2.0, 1e-6); /* padding rows 2, 3 ignored */
    clspool_forward_cpu(c.out, c.x, B, T, C);
    TEST_NEAR(c.out[2 * C + 1], 41, 0);
}

static void check_backward(int cls)
{
    static struct ctx c;
    static float dx[B * T * C];
    uint64_t s = 13;
    c.cls = cls;
    gc_fill(c.x, B * T * C, &s, -1, 1);
    gc_fill(c.dout, B * C, &s, -1, 1);
    for (int i = 0; i < B * T * C; i++)
        dx[i] = 0.0f;
    if (cls)
        clspool_backward_cpu(dx, c.dout, B, T, C);
    else
        meanpool_backward_cpu(dx, c.dout, len, B, T, C);
    gc_check(cls ? "dinp (cls)" : "dinp (mean)", c.x, dx, B * T * C, 1, loss, &c, 1e-2f, 1e-4,
             1e-3);
}

static void test_mean_backward(void) { check_backward(0); }
static void test_cls_backward(void) { check_backward(1); }

int main(void)
{
    TEST_RUN(test_values);
    TEST_RUN(test_mean_backward);
    TEST_RUN(test_cls_backward);
    return test_summary();
}
