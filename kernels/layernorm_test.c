/* Layer norm on the CPU: normalised rows, and backward against finite differences. */
#include "kernels/layernorm.h"

#include <stdlib.h>

#include "common/test.h"
#include "kernels/gradcheck.h"

enum { N = 6, C = 10 };

struct ctx {
    float x[N * C], w[C], b[C], out[N * C], mean[N], rstd[N], dout[N * C];
};

static double loss(void *p)
{
    struct ctx *c = p;
    layernorm_forward_cpu(c->out, c->mean, c->rstd, c->x, c->w, c->b, N, C);
    return gc_dot(c->out, c->dout, N * C);
}

static void test_rows_are_normalised(void)
{
    static struct ctx c;
    uint64_t s = 1;
    gc_fill(c.x, N * C, &s, -3, 5);
    for (int i = 0; i < C; i++) {
        c.w[i] = 1.0f;
        c.b[i] = 0.0f;
    }
    layernorm_forward_cpu(c.out, c.mean, c.rstd, c.x, c.w, c.b, N, C);
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++)
            m += c.out[r * C + i];
        m /= C;
        for (int i = 0; i < C; i++)
            v += (c.out[r * C + i] - m) * (c.out[r * C + i] - m);
        TEST_NEAR(m, 0.0, 1e-6);
        TEST_NEAR(v / C, 1.0, 1e-3); /* eps = 1e-5 shifts it a little */
    }
}

static void test_backward_matches_finite_differences(void)
{
    static struct ctx c;
    static float dx[N * C], dw[C], db[C];
    uint64_t s = 7;
    gc_fill(c.x, N * C, &s, -2, 2);
    gc_fill(c.w, C, &s, 0.5f, 1.5f);
    gc_fill(c.b, C, &s, -0.5f, 0.5f);
    gc_fill(c.dout, N * C, &s, -1, 1);
    for (int i = 0; i < N * C; i++)
        dx[i] = 0.25f; /* accumulation: must be added to */
    loss(&c);
    layernorm_backward_cpu(dx, dw, db, c.dout, c.x, c.w, c.mean, c.rstd, N, C);
    for (int i = 0; i < N * C; i++)
        dx[i] -= 0.25f;
    gc_check("dinp", c.x, dx, N * C, 1, loss, &c, 1e-2f, 2e-3, 2e-2);
    gc_check("dweight", c.w, dw, C, 1, loss, &c, 1e-2f, 2e-3, 2e-2);
    gc_check("dbias", c.b, db, C, 1, loss, &c, 1e-2f, 2e-3, 2e-2);
}

/* Large N takes the OpenMP path with per-thread partial sums; it must agree with the serial one. */
static void test_parallel_matches_serial(void)
{
    enum { BN = 4096, BC = 16 };
    float *x = malloc(sizeof(float) * BN * BC), *o = malloc(sizeof(float) * BN * BC);
    float *dy = malloc(sizeof(float) * BN * BC), *dx = calloc(BN * BC, sizeof(float));
    float w[BC], b[BC], dw[BC] = {0}, db[BC] = {0}, dw1[BC] = {0}, db1[BC] = {0};
    float *m = malloc(sizeof(float) * BN), *r = malloc(sizeof(float) * BN);
    uint64_t s = 3;
    gc_fill(x, BN * BC, &s, -1, 1);
    gc_fill(dy, BN * BC, &s, -1, 1);
    gc_fill(w, BC, &s, 0.5f, 1.5f);
    gc_fill(b, BC, &s, -1, 1);
    layernorm_forward_cpu(o, m, r, x, w, b, BN, BC);
    layernorm_backward_cpu(dx, dw, db, dy, x, w, m, r, BN, BC);
    for (int i = 0; i < BN; i++) /* row by row: the serial path */
        layernorm_backward_cpu(dx, dw1, db1, dy + i * BC, x + i * BC, w, m + i, r + i, 1, BC);
    for (int c = 0; c < BC; c++) {
        TEST_NEAR(dw[c], dw1[c], 1e-3);
        TEST_NEAR(db[c], db1[c], 1e-3);
    }
    free(x), free(o), free(dy), free(dx), free(m), free(r);
}

int main(void)
{
    TEST_RUN(test_rows_are_normalised);
    TEST_RUN(test_backward_matches_finite_differences);
    TEST_RUN(test_parallel_matches_serial);
    return test_summary();
}
