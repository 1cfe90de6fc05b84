/*
 * gradcheck.h - test helper: checks a kernel's backward against central finite differences.
 *
 * The scalar checked is L = sum(out * w) for a fixed random w, so the backward is run with
 * dout = w and the analytic gradient of any input x must match (L(x + h) - L(x - h)) / 2h,
 * entry by entry, within atol + rtol * |fd|. L is summed in double so the only fp32 error is the
 * kernel's own. Test-only: static functions, included by *_test.c files.
 */
#ifndef GANTRY_GRADCHECK_H
#define GANTRY_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/test.h"

/* Deterministic uniform floats in [lo, hi) (xorshift64*), so failures reproduce. */
static inline float gc_rand(uint64_t *s, float lo, float hi)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 0x2545F4914F6CDD1DULL;
    return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

static inline void gc_fill(float *x, size_t n, uint64_t *s, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = gc_rand(s, lo, hi);
}

static inline double gc_dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* Runs the forward for the current inputs and returns L. */
typedef double (*gc_loss_fn)(void *ctx);

/*
 * Perturbs x[i] (n entries, every `stride`-th checked) in place, restoring it after, and compares
 * grad[i] with the central difference of f. Prints up to 5 mismatches; returns their count and
 * records one failed check per mismatching tensor.
 */
static inline int gc_check(const char *name, float *x, const float *grad, size_t n, size_t stride,
                           gc_loss_fn f, void *ctx, float h, double atol, double rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * h);
        if (!(fabs(grad[i] - fd) <= atol + rtol * fabs(fd))) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: backward %.7g, finite difference %.7g\n", name, i,
                        (double)grad[i], fd);
            bad++;
        }
    }
    TEST_CHECK(bad == 0);
    return bad;
}

#endif /* GANTRY_GRADCHECK_H */
