/*
 * cpu.h - the CPU kernels' runtime: threads and BLAS set-up, and fast vectorisable math.
 *
 * Threading model: ONE pool of threads, OpenMP's. OpenBLAS is kept single-threaded and our
 * kernels split every GEMM over OpenMP threads themselves (rows of the output, or rows of the
 * weight gradient), and call small GEMMs from inside parallel regions (attention). Two pools
 * (OpenMP + OpenBLAS pthreads) fight over the cores on a 2-core machine.
 *
 * cpu_runtime_setup() must run first in main(): both libgomp and OpenBLAS read their environment
 * when they load, before main, so it re-executes the program once (execv /proc/self/exe) when
 *   - OMP_WAIT_POLICY is unset: it sets "passive" (spinning idle threads starve busy ones; on a
 *     shared 2-core host a step took 60 ms instead of 3 ms), and
 *   - OpenBLAS did not recognise this CPU and fell back to its SSE3 "Prescott" kernels (OpenBLAS
 *     0.3.21 does not know Sapphire/Emerald Rapids): it sets OPENBLAS_CORETYPE to SkylakeX or
 *     Haswell after checking the CPU's AVX-512/AVX2 flags. A user's own setting always wins.
 */
#ifndef GANTRY_CPU_H
#define GANTRY_CPU_H

#include <stdint.h>

/*
 * CPU_CLONES on a hot loop function compiles it for AVX-512, AVX2+FMA and the baseline, and
 * picks one at load time by CPU features (GCC target_clones, an ifunc; "arch=skylake-avx512"
 * would match CPU models, and unknown new ones would get the baseline). Runs on any x86-64.
 * Off under the sanitizers and on other compilers/architectures.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/*
 * exp(x), vectorisable (no libm call, no branch): Cody-Waite reduction x = n ln2 + r with
 * |r| <= ln2/2, a degree-6 Taylor polynomial for e^r (relative error < 2e-7), and 2^n built in
 * the exponent bits. x is clamped to [-87, 88], so the result is finite and never denormal
 * (exp(-87) ~ 1.6e-38 stands in for 0 where softmax needs it); NaN stays NaN.
 */
static inline float cpu_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* n = round(x / ln2) by the 1.5 * 2^23 trick (exact for |x / ln2| < 2^22): t's low
     * mantissa bits then hold n itself */
    union { float f; uint32_t u; } t = {.f = x * 1.44269504088896341f + 12582912.0f};
    float n = t.f - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.6666667e-1f + r * (4.1666668e-2f +
              r * (8.3333338e-3f + r * 1.3888889e-3f)))));
    /* 2^n from those bits, in unsigned arithmetic: no float-to-int conversion, which a NaN x
     * (a diverged model) made undefined; NaN then gives a NaN p and defined bits here */
    union { float f; uint32_t u; } e = {.u = (t.u - 0x4B400000u + 127u) << 23};
    return p * e.f;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1): absolute error < 3e-7, exact limits +-1. */
static inline float cpu_tanhf(float x)
{
    return 1.0f - 2.0f / (cpu_expf(2.0f * x) + 1.0f);
}

#ifdef __cplusplus
extern "C" {
#endif

/* See above. Returns normally when no re-exec is needed (or exec failed: a warning is printed). */
void cpu_runtime_setup(char **argv);

/* Makes OpenBLAS single-threaded once (kernels call it on entry; cheap after the first call).
 * Does nothing inside a parallel region (worker/model.c calls the kernels from its own parallel
 * loops; model_init calls this first, from the main thread). */
void cpu_blas_single(void);

/* Threads for the CPU kernels (0: OpenMP's default, all cores). Keeps OpenBLAS at one thread. */
void cpu_set_threads(int n);
/* The CPUs this process may use, >= 1: its affinity mask (the container's cpuset), capped by its
 * cgroup's CPU quota (a pod's CPU limit: cgroup v2 cpu.max, v1 cpu.cfs_quota_us / period,
 * rounded up), which the affinity mask does not show. */
int cpu_available(void);
/* The quota parts, for tests: CPUs allowed by a cgroup v2 cpu.max text ("max 100000": 0, no
 * limit; "150000 100000": 2), or by v1's quota and period texts ("-1": 0); 0 for unreadable. */
int cpu_quota_v2(const char *cpu_max);
int cpu_quota_v1(const char *quota_us, const char *period_us);
int cpu_threads(void);

/* The OpenBLAS kernel family in use ("SkylakeX", "Haswell", ...), for logs and benchmarks. */
const char *cpu_blas_core(void);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_CPU_H */
