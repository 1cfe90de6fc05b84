/*
 * test.h - a tiny unit-test helper (in the spirit of Redis' testhelp.h).
 *
 * One test executable per module (x_test.c), registered with CTest by gantry_test() in CMake.
 * A test file defines static test functions, runs them with TEST_RUN() from main() and ends with
 * `return test_summary();`. Checks that fail print file:line and the expression; the process exits
 * 1 if any check failed, 77 (CTest "skipped") when a test calls test_skip().
 * Not thread-safe: checks run on the main thread.
 */
#ifndef GANTRY_TEST_H
#define GANTRY_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_checks_, test_failed_, test_cases_, test_case_failed_;

static inline int test_check_(int ok, const char *expr, const char *file, int line)
{
    test_checks_++;
    if (!ok) {
        test_failed_++;
        test_case_failed_ = 1;
        fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, expr);
    }
    return ok;
}

#define TEST_CHECK(cond) test_check_(!!(cond), #cond, __FILE__, __LINE__)

#define TEST_EQ_INT(a, b)                                                                          \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (!test_check_(a_ == b_, #a " == " #b, __FILE__, __LINE__))                              \
            fprintf(stderr, "       got %lld, want %lld\n", a_, b_);                               \
    } while (0)

#define TEST_EQ_STR(a, b)                                                                          \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        int ok_ = a_ && b_ && strcmp(a_, b_) == 0;                                                 \
        if (!test_check_(ok_, #a " == " #b, __FILE__, __LINE__))                                   \
            fprintf(stderr, "       got \"%s\", want \"%s\"\n", a_ ? a_ : "(null)",               \
                    b_ ? b_ : "(null)");                                                           \
    } while (0)

/* |a - b| <= tol, and neither is NaN. */
#define TEST_NEAR(a, b, tol)                                                                       \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!test_check_(fabs(a_ - b_) <= (tol), #a " ~= " #b, __FILE__, __LINE__))                \
            fprintf(stderr, "       got %.9g, want %.9g (tol %g)\n", a_, b_, (double)(tol));      \
    } while (0)

#define TEST_RUN(fn)                                                                               \
    do {                                                                                           \
        test_cases_++;                                                                             \
        test_case_failed_ = 0;                                                                     \
        fn();                                                                                      \
        printf("%s %s\n", test_case_failed_ ? "FAIL" : "ok  ", #fn);                               \
    } while (0)

/* Writes n bytes to dir/name and returns the path (static storage: valid until the next call).
 * A file that cannot be written fails the running test case. */
static inline const char *test_write_file(const char *dir, const char *name, const void *content,
                                          size_t n)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!test_check_(f != NULL, "fopen(path) for writing", __FILE__, __LINE__))
        return path;
    test_check_(fwrite(content, 1, n, f) == n, "fwrite(content)", __FILE__, __LINE__);
    fclose(f);
    return path;
}

/* Ends the process with CTest's skip code; use when a prerequisite (a GPU, a tool) is absent. */
static inline void test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    exit(77);
}

static inline int test_summary(void)
{
    printf("%d test cases, %d checks, %d failed\n", test_cases_, test_checks_, test_failed_);
    return test_failed_ ? 1 : 0;
}

#endif /* GANTRY_TEST_H */
