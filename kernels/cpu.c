#include "kernels/cpu.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

char *openblas_get_corename(void);

const char *cpu_blas_core(void) { return openblas_get_corename(); }

void cpu_runtime_setup(char **argv)
{
    int again = 0;
    const char *core = openblas_get_corename();

    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = 1;
    }
    if (!getenv("OPENBLAS_CORETYPE") && core && !strcmp(core, "Prescott")) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
            again = 1;
        } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            setenv("OPENBLAS_CORETYPE", "Haswell", 1);
            again = 1;
        }
    }
    if (again) {
        execv("/proc/self/exe", argv);
        fprintf(stderr, "warning: could not re-execute %s with OMP_WAIT_POLICY/OPENBLAS_CORETYPE "
                        "set; set them in the environment for full speed\n", argv[0]);
    }
    /* After the re-exec the kernel names the process "exe"; give it its own name back. */
    const char *base = strrchr(argv[0], '/');
    prctl(PR_SET_NAME, base ? base + 1 : argv[0], 0, 0, 0);
    openblas_set_num_threads(1);
}

void cpu_blas_single(void)
{
    static int done;
#ifdef _OPENMP
    if (omp_in_parallel()) /* kernels called per sequence inside the model's parallel loops */
        return;
#endif
    if (!done) {
        openblas_set_num_threads(1);
        done = 1;
    }
}

void cpu_set_threads(int n)
{
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#endif
    openblas_set_num_threads(1);
}

int cpu_available(void)
{
    cpu_set_t set;
    long n;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int cpu_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
