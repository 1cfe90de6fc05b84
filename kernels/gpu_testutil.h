/*
 * gpu_testutil.h - helpers for the *_gpu_test.cu files: skip without a device, random inputs,
 * host<->device copies, and the comparison every GPU test makes against the CPU specification.
 *
 * gt_compare() checks |gpu - cpu| <= atol + rtol * |cpu| entry by entry, prints the first 5 pairs
 * and every mismatch up to 10, then stops (nccl-tests / STYLE.md §9). Tolerances are dtype-aware:
 * GT_F32 for fp32 kernels whose summation order differs from the CPU's, GT_BF16 for bf16 operands
 * (8 mantissa bits: 2^-8 relative per rounding). Test-only: static functions.
 */
#ifndef GANTRY_GPU_TESTUTIL_H
#define GANTRY_GPU_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/cuda_common.h"
#include "kernels/gpu.h"

#define GT_F32_ATOL 1e-5
#define GT_F32_RTOL 1e-4
#define GT_BF16_ATOL 1e-2
#define GT_BF16_RTOL 2e-2

static int gt_failed;

static inline void gt_require_device(const char *name)
{
    if (!cuda_have_device()) {
        printf("%s: SKIP: no CUDA device\n", name);
        exit(77);
    }
    gpu_init();
}

static inline float gt_rand(uint64_t *s, float lo, float hi)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 0x2545F4914F6CDD1DULL;
    return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

static inline float *gt_randv(size_t n, uint64_t *s, float lo, float hi)
{
    float *x = (float *)malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = gt_rand(s, lo, hi);
    return x;
}

static inline float *gt_copyv(const float *x, size_t n)
{
    float *y = (float *)malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

/* Device copy of n elements of `bytes_each` bytes (floats, ints). */
static inline void *gt_up(const void *h, size_t n, size_t bytes_each)
{
    void *d = NULL;
    CUDA_CHECK(cudaMalloc(&d, n * bytes_each + 1));
    CUDA_CHECK(cudaMemcpy(d, h, n * bytes_each, cudaMemcpyHostToDevice));
    return d;
}
#define GT_UPF(h, n) ((float *)gt_up((h), (n), sizeof(float)))
#define GT_UPI(h, n) ((int *)gt_up((h), (n), sizeof(int)))

/* Host copy of a device buffer (synchronises: the kernels before it must finish). */
static inline float *gt_down(const float *d, size_t n)
{
    float *h = (float *)malloc(n * sizeof(float) + 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Host fp32 copy of n device bf16 values, widened on the host (exact; synchronises). */
static inline float *gt_down_bf16(const uint16_t *d, size_t n)
{
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    float *f = (float *)malloc(n * sizeof(float) + 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(h[i]);
    free(h);
    return f;
}

/* Compares gpu (device) with ref (host); returns mismatches (0 = OK) and records a failure. */
static inline int gt_compare(const char *name, const float *gpu_dev, const float *ref, size_t n,
                             double atol, double rtol)
{
    float *got = gt_down(gpu_dev, n);
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]), tol = atol + rtol * fabs((double)ref[i]);
        int ok = got[i] == ref[i] || d <= tol; /* equal infinities pass; NaN never does */
        worst = d > worst ? d : worst;
        if (i < 5 || (!ok && bad < 10))
            printf("  %-22s [%7zu] cpu %14.7g  gpu %14.7g  %s\n", name, i, (double)ref[i],
                   (double)got[i], ok ? "ok" : "MISMATCH");
        if (!ok && ++bad >= 10) {
            printf("  %-22s stopped after 10 mismatches\n", name);
            break;
        }
    }
    printf("%-24s n=%-9zu max|diff| %.3g  tol %.1g+%.1g|ref|  %s\n", name, n, worst, atol, rtol,
           bad ? "FAILED" : "OK");
    free(got);
    if (bad)
        gt_failed++;
    return bad;
}

static inline int gt_summary(const char *name)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    gpu_shutdown();
    printf("%s: %s\n", name, gt_failed ? "FAILED" : "OK");
    return gt_failed ? 1 : 0;
}

#endif /* GANTRY_GPU_TESTUTIL_H */
