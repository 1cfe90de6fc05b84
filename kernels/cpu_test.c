/* The CPU runtime's fast math against libm: cpu_expf relative error, cpu_tanhf absolute error
 * and limits; and the OpenBLAS set-up helpers. */
#include "kernels/cpu.h"

#include <math.h>

#include "common/test.h"

static void test_expf_matches_libm(void)
{
    double worst = 0;
    for (float x = -80.0f; x <= 80.0f; x += 0.001953125f) {
        double want = exp((double)x), got = cpu_expf(x);
        double rel = fabs(got - want) / want;
        worst = rel > worst ? rel : worst;
    }
    printf("  cpu_expf: max relative error %.3g over [-80, 80]\n", worst);
    TEST_CHECK(worst < 3e-7);
    TEST_CHECK(cpu_expf(0.0f) == 1.0f);
    TEST_CHECK(cpu_expf(-1000.0f) > 0.0f && cpu_expf(-1000.0f) < 1e-37f); /* clamped, not 0/NaN */
    TEST_CHECK(isfinite(cpu_expf(1000.0f)));
    /* a diverged model's NaN goes through as NaN (converting it to int was undefined: the
     * Asan build's float-cast-overflow check fails here on the old code) */
    volatile float nan = NAN;
    TEST_CHECK(isnan(cpu_expf(nan)) && isnan(cpu_tanhf(nan)));
}

static void test_tanhf_matches_libm(void)
{
    double worst = 0;
    for (float x = -20.0f; x <= 20.0f; x += 0.0009765625f) {
        double err = fabs(cpu_tanhf(x) - tanh((double)x));
        worst = err > worst ? err : worst;
    }
    printf("  cpu_tanhf: max absolute error %.3g over [-20, 20]\n", worst);
    TEST_CHECK(worst < 3e-7);
    TEST_CHECK(cpu_tanhf(100.0f) == 1.0f && cpu_tanhf(-100.0f) == -1.0f);
}

/* A pod's CPU limit, as its cgroup shows it: CPUs rounded up; no limit or bad text: 0. */
static void test_cpu_quota(void)
{
    TEST_EQ_INT(cpu_quota_v2("max 100000\n"), 0);
    TEST_EQ_INT(cpu_quota_v2("100000 100000\n"), 1);
    TEST_EQ_INT(cpu_quota_v2("150000 100000\n"), 2); /* 1.5 CPUs: 2 threads */
    TEST_EQ_INT(cpu_quota_v2("800000 100000"), 8);
    TEST_EQ_INT(cpu_quota_v2(""), 0);
    TEST_EQ_INT(cpu_quota_v2("garbage"), 0);
    TEST_EQ_INT(cpu_quota_v2("100000 0"), 0);
    TEST_EQ_INT(cpu_quota_v1("-1\n", "100000\n"), 0);
    TEST_EQ_INT(cpu_quota_v1("50000\n", "100000\n"), 1); /* 500m */
    TEST_EQ_INT(cpu_quota_v1("400000", "100000"), 4);
    TEST_EQ_INT(cpu_quota_v1("", "100000"), 0);
    TEST_CHECK(cpu_available() >= 1);
}

static void test_blas_setup(void)
{
    cpu_blas_single();
    TEST_CHECK(cpu_blas_core() != NULL && cpu_blas_core()[0] != '\0');
    TEST_CHECK(cpu_threads() >= 1);
}

int main(void)
{
    TEST_RUN(test_expf_matches_libm);
    TEST_RUN(test_tanhf_matches_libm);
    TEST_RUN(test_cpu_quota);
    TEST_RUN(test_blas_setup);
    return test_summary();
}
