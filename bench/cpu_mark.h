/*
 * cpu_mark.h - where a benchmark rank's time goes, for bench/allreduce.c and
 * bench/allreduce_gloo.cc alike (C and C++; header-only, static functions).
 *
 * BENCH_RUSAGE=1: each rank reports to stderr, per operation of its timed loop, the CPU time
 * (user, sys; all threads), the time its threads were runnable but waited for a CPU (runq, from
 * /proc/self/task/N/schedstat) and context switches: where the time goes on a shared machine.
 * take_mark() before and after the loop, then cpu_report().
 */
#ifndef GANTRY_BENCH_CPU_MARK_H
#define GANTRY_BENCH_CPU_MARK_H

#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/time.h>

struct cpu_mark {
    struct rusage ru;
    double run_ms, runq_ms;
};

static void take_mark(struct cpu_mark *m)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;

    getrusage(RUSAGE_SELF, &m->ru);
    m->run_ms = m->runq_ms = 0;
    while (d && (e = readdir(d))) {
        char path[300];
        unsigned long long run, wait;
        snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2) {
            m->run_ms += (double)run / 1e6;
            m->runq_ms += (double)wait / 1e6;
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

static double cpu_mark_tv_ms(struct timeval b, struct timeval a)
{
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_usec - a.tv_usec) / 1e3;
}

/* One line: "# cpu WHO rank R size BYTES: wall .. user .. sys .. runq .. ms/op, vcsw .. ivcsw .. /op" */
static void cpu_report(const char *who, int rank, size_t bytes, int iters, double wall,
                       const struct cpu_mark *a, const struct cpu_mark *b)
{
    fprintf(stderr, "# cpu %s rank %d size %zu: wall %.2f user %.2f sys %.2f runq %.2f ms/op, "
                    "vcsw %.0f ivcsw %.0f /op\n",
            who, rank, bytes, wall * 1e3 / iters,
            cpu_mark_tv_ms(b->ru.ru_utime, a->ru.ru_utime) / iters,
            cpu_mark_tv_ms(b->ru.ru_stime, a->ru.ru_stime) / iters,
            (b->runq_ms - a->runq_ms) / iters, (double)(b->ru.ru_nvcsw - a->ru.ru_nvcsw) / iters,
            (double)(b->ru.ru_nivcsw - a->ru.ru_nivcsw) / iters);
}

#endif /* GANTRY_BENCH_CPU_MARK_H */
