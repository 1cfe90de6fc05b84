/* GELU on the CPU: known values, and backward against central finite differences. */
#include "kernels/gelu.h"

#include "common/test.h"

static void test_known_values(void)
{
    const float x[5] = {-3.0f, -1.0f, 0.0f, 1.0f, 3.0f};
    /* PyTorch: torch.nn.functional.gelu(x, approximate="tanh") */
    const float want[5] = {-0.00363739f, -0.15880801f, 0.0f, 0.84119199f, 2.99636261f};
    float y[5];

    gelu_forward_cpu(y, x, 5);
    for (int i = 0; i < 5; i++)
        TEST_NEAR(y[i], want[i], 1e-6);
}

static void test_backward_matches_finite_differences(void)
{
    enum { N = 64 };
    float x[N], dout[N], dx[N], yp, ym;
    const float h = 1e-3f;

    for (int i = 0; i < N; i++) {
        x[i] = -4.0f + 8.0f * (float)i / (N - 1);
        dout[i] = 0.5f + 0.01f * (float)i;
        dx[i] = 1.0f; /* backward accumulates: the 1.0 must survive */
    }
    gelu_backward_cpu(dx, x, dout, N);
    for (int i = 0; i < N; i++) {
        float xp = x[i] + h, xm = x[i] - h;
        gelu_forward_cpu(&yp, &xp, 1);
        gelu_forward_cpu(&ym, &xm, 1);
        float fd = dout[i] * (yp - ym) / (2 * h);
        TEST_NEAR(dx[i] - 1.0f, fd, 2e-3);
    }
}

int main(void)
{
    TEST_RUN(test_known_values);
    TEST_RUN(test_backward_matches_finite_differences);
    return test_summary();
}
