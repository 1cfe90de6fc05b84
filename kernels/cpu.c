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

static int quota_cpus(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

int cpu_quota_v2(const char *cpu_max)
{
    long long quota, period;
    char word[16];

    if (!cpu_max || sscanf(cpu_max, "%15s %lld", word, &period) != 2 || !strcmp(word, "max"))
        return 0;
    if (sscanf(word, "%lld", &quota) != 1)
        return 0;
    return quota_cpus(quota, period);
}

int cpu_quota_v1(const char *quota_us, const char *period_us)
{
    long long quota, period;

    if (!quota_us || !period_us || sscanf(quota_us, "%lld", &quota) != 1 ||
        sscanf(period_us, "%lld", &period) != 1)
        return 0;
    return quota_cpus(quota, period);
}

/* The first line of a small file, or "" (no file: no such cgroup controller). */
static void read_small(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    if (f) {
        if (!fgets(out, (int)n, f))
            out[0] = '\0';
        fclose(f);
    }
}

/* The CPU quota of this process's cgroup: its path from /proc/self/cgroup under the mount
 * (a host, or a container with a cgroup namespace), else the mount's root (a v1 container, where
 * runc mounts the container's own cgroup there but /proc shows the host's path). v2 first. */
static int cgroup_quota(void)
{
    char line[512], path[700], v2[256] = "", v1[256] = "", a[64], b[64];
    const size_t n = sizeof(a);
    FILE *f = fopen("/proc/self/cgroup", "r");

    while (f && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        c2[strcspn(c2, "\n")] = '\0';
        if (c1[1] == ':') /* "0::/path": the unified (v2) hierarchy */
            snprintf(v2, sizeof(v2), "%s", c2 + 1);
        else if (strstr(c1, ":cpu,") || strstr(c1, ",cpu:") || strstr(c1, ":cpu:"))
            snprintf(v1, sizeof(v1), "%s", c2 + 1);
    }
    if (f)
        fclose(f);
    for (int root = 0; root < 2; root++) {
        snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max", root ? "" : v2);
        read_small(path, a, n);
        if (a[0])
            return cpu_quota_v2(a);
        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", root ? "" : v1);
        read_small(path, a, n);
        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", root ? "" : v1);
        read_small(path, b, n);
        if (a[0])
            return cpu_quota_v1(a, b);
    }
    return 0;
}

int cpu_available(void)
{
    cpu_set_t set;
    long n;
    int quota;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    else
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    quota = cgroup_quota();
    return quota > 0 && quota < n ? quota : (int)n;
}

int cpu_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
