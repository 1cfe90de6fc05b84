/* Fully connected layer on the CPU: against a naive triple loop, and backward against finite
 * differences (dinp, dweight, dbias, accumulation into non-zero buffers). */
#include "kernels/matmul.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/test.h"
#include "kernels/gelu.h"
#include "kernels/gradcheck.h"

enum { N = 5, C = 7, OC = 4 };

struct ctx {
    float x[N * C], w[OC * C], b[OC], out[N * OC], dout[N * OC];
};

static double loss(void *p)
{
    struct ctx *c = p;
    matmul_forward_cpu(c->out, c->x, c->w, c->b, N, C, OC);
    return gc_dot(c->out, c->dout, N * OC);
}

static void test_forward_matches_naive(void)
{
    static struct ctx c;
    uint64_t s = 11;
    gc_fill(c.x, N * C, &s, -1, 1);
    gc_fill(c.w, OC * C, &s, -1, 1);
    gc_fill(c.b, OC, &s, -1, 1);
    matmul_forward_cpu(c.out, c.x, c.w, c.b, N, C, OC);
    for (int i = 0; i < N; i++) {
        for (int o = 0; o < OC; o++) {
            double want = c.b[o];
            for (int k = 0; k < C; k++)
                want += (double)c.x[i * C + k] * c.w[o * C + k];
            TEST_NEAR(c.out[i * OC + o], want, 1e-5);
        }
    }
    matmul_forward_cpu(c.out, c.x, c.w, NULL, N, C, OC); /* no bias: overwrite, not add */
    double want = 0;
    for (int k = 0; k < C; k++)
        want += (double)c.x[k] * c.w[k];
    TEST_NEAR(c.out[0], want, 1e-5);
}

static void test_backward_matches_finite_differences(void)
{
    static struct ctx c;
    static float dx[N * C], dw[OC * C], db[OC];
    uint64_t s = 5;
    gc_fill(c.x, N * C, &s, -1, 1);
    gc_fill(c.w, OC * C, &s, -1, 1);
    gc_fill(c.b, OC, &s, -1, 1);
    gc_fill(c.dout, N * OC, &s, -1, 1);
    for (int i = 0; i < N * C; i++)
        dx[i] = 1.0f;
    for (int i = 0; i < OC * C; i++)
        dw[i] = -1.0f;
    for (int i = 0; i < OC; i++)
        db[i] = 0.5f;
    matmul_backward_cpu(dx, dw, db, c.dout, c.x, c.w, N, C, OC);
    for (int i = 0; i < N * C; i++)
        dx[i] -= 1.0f;
    for (int i = 0; i < OC * C; i++)
        dw[i] += 1.0f;
    for (int i = 0; i < OC; i++)
        db[i] -= 0.5f;
    gc_check("dinp", c.x, dx, N * C, 1, loss, &c, 1e-2f, 1e-3, 1e-2);
    gc_check("dweight", c.w, dw, OC * C, 1, loss, &c, 1e-2f, 1e-3, 1e-2);
    gc_check("dbias", c.b, db, OC, 1, loss, &c, 1e-2f, 1e-3, 1e-2);
}

/* The fused GELU forward equals the two calls bit for bit, across several row blocks and both
 * threads (N * C * OC above the split threshold). */
static void test_forward_gelu_fused(void)
{
    enum { FN = 1000, FC = 32, FO = 24 };
    static float x[FN * FC], w[FO * FC], b[FO], pre[FN * FO], out[FN * FO], ref[FN * FO],
        refg[FN * FO];
    uint64_t s = 3;
    gc_fill(x, FN * FC, &s, -1, 1);
    gc_fill(w, FO * FC, &s, -1, 1);
    gc_fill(b, FO, &s, -1, 1);
    matmul_forward_cpu(ref, x, w, b, FN, FC, FO);
    gelu_forward_cpu(refg, ref, FN * FO);
    matmul_forward_gelu_cpu(out, pre, x, w, b, FN, FC, FO);
    TEST_CHECK(memcmp(pre, ref, sizeof(ref)) == 0);
    TEST_CHECK(memcmp(out, refg, sizeof(refg)) == 0);
    double want = b[FO - 1];
    for (int k = 0; k < FC; k++)
        want += (double)x[(FN - 1) * FC + k] * w[(FO - 1) * FC + k];
    TEST_NEAR(pre[FN * FO - 1], want, 1e-5);
    TEST_CHECK(out[FN * FO - 1] != pre[FN * FO - 1]); /* the GELU was applied */
    matmul_forward_gelu_cpu(out, pre, x, w, NULL, FN, FC, FO); /* no bias */
    matmul_forward_cpu(ref, x, w, NULL, FN, FC, FO);
    TEST_CHECK(memcmp(pre, ref, sizeof(ref)) == 0);
}

static int count_ne(const float *a, const float *b, int n) /* by value: -0 == +0 */
{
    int d = 0;
    for (int i = 0; i < n; i++)
        d += !(a[i] == b[i]);
    return d;
}

/* The overwriting backward (through the GELU, and without) equals clearing + the accumulating
 * calls, with dinp full of garbage beforehand, across row blocks and both threads. */
static void test_backward_gelu_fused(void)
{
    enum { FN = 1000, FC = 32, FO = 24 };
    static float x[FN * FC], pre[FN * FC], w[FO * FC], dout[FN * FO], dx[FN * FC], ref[FN * FC],
        tmp[FN * FC], dw[FO * FC], dwr[FO * FC], db[FO], dbr[FO];
    uint64_t s = 8;
    gc_fill(pre, FN * FC, &s, -3, 3);
    gelu_forward_cpu(x, pre, FN * FC);
    gc_fill(w, FO * FC, &s, -1, 1);
    gc_fill(dout, FN * FO, &s, -1, 1);
    for (int pass = 0; pass < 2; pass++) {
        const float *p = pass ? NULL : pre;
        for (int i = 0; i < FN * FC; i++)
            dx[i] = 1e30f, tmp[i] = 0.0f, ref[i] = 0.0f;
        for (int i = 0; i < FO * FC; i++)
            dw[i] = dwr[i] = 0.25f;
        for (int i = 0; i < FO; i++)
            db[i] = dbr[i] = -1.0f;
        matmul_backward_gelu_cpu(dx, dw, db, dout, x, p, w, FN, FC, FO);
        matmul_backward_cpu(p ? tmp : ref, dwr, dbr, dout, x, w, FN, FC, FO);
        if (p)
            gelu_backward_cpu(ref, pre, tmp, FN * FC);
        TEST_EQ_INT(count_ne(dx, ref, FN * FC), 0);
        TEST_EQ_INT(count_ne(dw, dwr, FO * FC), 0);
        TEST_EQ_INT(count_ne(db, dbr, FO), 0);
    }
    TEST_CHECK(dx[0] != 1e30f);
}

/* Projection + residual in one call: the naive sum, and the two-call path within rounding. */
static void test_forward_residual(void)
{
    enum { FN = 1000, FC = 32, FO = 24 };
    static float x[FN * FC], w[FO * FC], b[FO], res[FN * FO], out[FN * FO], ref[FN * FO];
    uint64_t s = 17;
    gc_fill(x, FN * FC, &s, -1, 1);
    gc_fill(w, FO * FC, &s, -1, 1);
    gc_fill(b, FO, &s, -1, 1);
    gc_fill(res, FN * FO, &s, -4, 4);
    for (int withb = 0; withb < 2; withb++) {
        const float *bb = withb ? b : NULL;
        matmul_forward_residual_cpu(out, res, x, w, bb, FN, FC, FO);
        matmul_forward_cpu(ref, x, w, bb, FN, FC, FO);
        residual_forward_cpu(ref, res, ref, FN * FO);
        int bad = 0;
        for (int i = 0; i < FN * FO; i++)
            bad += !(fabsf(out[i] - ref[i]) <= 1e-5f);
        TEST_EQ_INT(bad, 0);
        double want = res[FN * FO - 1] + (bb ? bb[FO - 1] : 0.0);
        for (int k = 0; k < FC; k++)
            want += (double)x[(FN - 1) * FC + k] * w[(FO - 1) * FC + k];
        TEST_NEAR(out[FN * FO - 1], want, 1e-5);
    }
}

/* Long N (several weight-gradient blocks): dweight against a double-precision sum, and the same
 * bits on 1 and 2 threads. */
static void test_backward_long_n(void)
{
    enum { LN = 5000, LC = 16, LO = 24 };
    static float x[LN * LC], w[LO * LC], dout[LN * LO], dx[LN * LC], dw[2][LO * LC], db[2][LO];
    uint64_t s = 29;
    gc_fill(x, LN * LC, &s, -1, 1);
    gc_fill(w, LO * LC, &s, -1, 1);
    gc_fill(dout, LN * LO, &s, -1, 1);
    for (int t = 0; t < 2; t++) {
#ifdef _OPENMP
        omp_set_num_threads(t + 1);
#endif
        for (int i = 0; i < LO * LC; i++)
            dw[t][i] = 0.5f;
        for (int i = 0; i < LO; i++)
            db[t][i] = 0.0f;
        matmul_backward_cpu(dx, dw[t], db[t], dout, x, w, LN, LC, LO);
    }
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    TEST_CHECK(memcmp(dw[0], dw[1], sizeof(dw[0])) == 0);
    TEST_CHECK(memcmp(db[0], db[1], sizeof(db[0])) == 0);
    int bad = 0;
    for (int o = 0; o < LO; o++) {
        for (int k = 0; k < LC; k++) {
            double want = 0.5;
            for (int i = 0; i < LN; i++)
                want += (double)dout[i * LO + o] * x[i * LC + k];
            bad += !(fabs(dw[1][o * LC + k] - want) <= 1e-3);
        }
    }
    TEST_EQ_INT(bad, 0);
}

static void test_bias_and_residual(void)
{
    float out[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30}, db[3] = {1, 1, 1};
    bias_forward_cpu(out, bias, 2, 3);
    TEST_NEAR(out[0], 11, 0);
    TEST_NEAR(out[5], 36, 0);
    bias_backward_cpu(db, out, 2, 3);
    TEST_NEAR(db[0], 1 + 11 + 14, 0);
    float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, r[3];
    residual_forward_cpu(r, a, b, 3);
    TEST_NEAR(r[2], 9, 0);
}

int main(void)
{
    TEST_RUN(test_forward_matches_naive);
    TEST_RUN(test_backward_matches_finite_differences);
    TEST_RUN(test_forward_gelu_fused);
    TEST_RUN(test_backward_gelu_fused);
    TEST_RUN(test_forward_residual);
    TEST_RUN(test_backward_long_n);
    TEST_RUN(test_bias_and_residual);
    return test_summary();
}
