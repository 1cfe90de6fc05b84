/*
 * allreduce.c - nccl-tests-style benchmark of Gantry's tcp all-reduce (worker/coll.h): through
 * shared memory when the ranks can map one object (gantry-run's ranks can; GANTRY_COLL_SHM=0 keeps
 * it on the ring), over the ring of loopback TCP connections otherwise or with --bf16.
 *
 *   gantry-run --nproc 4 -- bench_allreduce [--min BYTES] [--max BYTES] [--bf16] [--chunk BYTES]
 *   bench_allreduce --raw       raw TCP throughput of one loopback connection (the link peak)
 *
 * For each size (doubling from --min to --max, fp32 sum) rank 0 prints one row: time per
 * all-reduce (the slowest rank's average), algbw = bytes / time, busbw = algbw * 2(n-1)/n (what
 * each link carries in a ring, comparable across world sizes and with the link peak), and #wrong:
 * elements that differ from the exact sum of integer-valued inputs after a separate checked
 * all-reduce. The verdict is OK when every size has #wrong == 0.
 * bench/allreduce.sh runs this at 2 and 4 ranks next to Gloo and the raw TCP peak.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/cpu_mark.h"
#include "common/xalloc.h"
#include "worker/coll.h"
#include "worker/dist.h"
#include "worker/net.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bytes per second through one loopback TCP connection, 4 MiB writes, 2 GiB total. */
static int raw_tcp(void)
{
    size_t total = (size_t)2 << 30, blk = 4u << 20;
    int lfd, port, cfd, sfd, rc;
    char *buf = xcalloc(1, blk);

    if (net_listen("127.0.0.1", 0, &lfd, &port) != 0)
        return 1;
    pid_t p = fork();
    if (p == 0) {
        if (net_connect("127.0.0.1", port, 10000, &cfd, NULL, 0) != 0)
            _exit(1);
        for (size_t sent = 0; sent < total; sent += blk)
            if (net_write_all(cfd, buf, blk, 60000) != 0)
                _exit(1);
        _exit(0);
    }
    if ((rc = net_accept(lfd, 10000, &sfd)) != 0)
        return 1;
    double t0 = now_s();
    rc = net_read_all(sfd, buf, blk, 60000); /* the first block starts the clock fairly */
    for (size_t got = blk; !rc && got < total; got += blk)
        rc = net_read_all(sfd, buf, blk, 60000);
    double t = now_s() - t0;
    waitpid(p, NULL, 0);
    printf("# raw TCP, one loopback connection, %zu MiB in %zu KiB writes: %.2f GB/s\n",
           total >> 20, blk >> 10, (double)total / t / 1e9);
    free(buf);
    close(sfd);
    close(lfd);
    return rc ? 1 : 0;
}

/* The slowest rank's value (all ranks get it). */
static int max_over_ranks(struct coll *c, double *v)
{
    int w = coll_world_size(c), rc;
    double *all = xcalloc((size_t)w, sizeof(double));

    rc = coll_allgather(c, v, all, sizeof(double));
    for (int i = 0; !rc && i < w; i++)
        if (all[i] > *v)
            *v = all[i];
    free(all);
    return rc;
}

/* One row: timed all-reduces of `bytes`, then a checked one. */
static int run_size(struct coll *c, float *buf, size_t bytes, const char *label,
                    int *wrong_total)
{
    size_t n = bytes / 4;
    int rank = coll_rank(c), w = coll_world_size(c), rc;
    int iters = (int)((1u << 30) / bytes), warm = 2;
    float wrong = 0;

    if (iters > 200)
        iters = 200;
    if (iters < 5)
        iters = 5;
    for (int i = 0; i < warm; i++)
        if ((rc = coll_allreduce(c, buf, n, COLL_SUM)))
            return rc;
    if ((rc = coll_barrier(c)))
        return rc;
    struct cpu_mark m0, m1;
    take_mark(&m0);
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        if ((rc = coll_allreduce(c, buf, n, COLL_SUM)))
            return rc;
    double t = (now_s() - t0) / iters;
    take_mark(&m1);
    if (getenv("BENCH_RUSAGE"))
        cpu_report(label, rank, bytes, iters, t * iters, &m0, &m1);
    if ((rc = max_over_ranks(c, &t)))
        return rc;
    /* Integer inputs small enough to be exact in bf16 too. */
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)((int)(i % 13) - 6) * (float)(rank + 1);
    if ((rc = coll_allreduce(c, buf, n, COLL_SUM)))
        return rc;
    for (size_t i = 0; i < n; i++)
        wrong += buf[i] != (float)((int)(i % 13) - 6) * (float)(w * (w + 1) / 2);
    if ((rc = coll_allreduce(c, &wrong, 1, COLL_SUM)))
        return rc;
    *wrong_total += (int)wrong;
    double algbw = (double)bytes / t / 1e9, busbw = algbw * 2.0 * (w - 1) / w;
    if (rank == 0)
        printf("%12zu %12zu %6s %6s %10.1f %7.3f %7.3f %7d\n", bytes, n,
               strstr(label, "bf16") ? "f32>bf" : "float",
               "sum", t * 1e6, algbw, busbw, (int)wrong);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"min", required_argument, NULL, 'a'},
                                         {"max", required_argument, NULL, 'b'},
                                         {"bf16", no_argument, NULL, 'f'},
                                         {"chunk", required_argument, NULL, 'c'},
                                         {"sockbuf", required_argument, NULL, 's'},
                                         {"raw", no_argument, NULL, 'r'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    size_t lo = 4096, hi = 256u << 20;
    struct coll_opts co = {.timeout_ms = 120000};
    struct dist_env e;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    int ch, rc, wrong = 0;

    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'a': lo = strtoull(optarg, NULL, 0); break;
        case 'b': hi = strtoull(optarg, NULL, 0); break;
        case 'f': co.bf16_wire = true; break;
        case 'c': co.chunk_bytes = strtoull(optarg, NULL, 0); break;
        case 's': co.sock_buf_bytes = atoi(optarg); break;
        case 'r': return raw_tcp();
        case 'h':
            printf("usage: gantry-run --nproc N -- bench_allreduce [--min B] [--max B] [--bf16] "
                   "[--chunk B] [--sockbuf B]\n       bench_allreduce --raw\n"
                   "nccl-tests-style sweep of Gantry's tcp all-reduce, sizes doubling from --min "
                   "to --max\nbytes (default 4096 to 256 MiB): time, algbw, busbw and #wrong "
                   "(elements off the exact\nsum) per size on rank 0. --bf16: bf16 on the wire; "
                   "--raw: one loopback connection's\nTCP throughput. bench/allreduce.sh runs it "
                   "beside Gloo.\n");
            return 0;
        default:
            fprintf(stderr, "usage: gantry-run --nproc N -- bench_allreduce [--min B] [--max B] "
                            "[--bf16] [--chunk B] [--sockbuf B] | bench_allreduce --raw\n");
            return 64;
        }
    }
    if ((rc = dist_env_load(&e)) || (rc = dist_rendezvous(&e, "bench", NULL, &rz)) ||
        (rc = coll_tcp_new(dist_rdzv_store(rz), &co, &c)))
        return dist_exit_code(rc);
    int groups = coll_tcp_shm_groups(c);
    const char *label = groups == 1  ? "gantry"
                        : groups > 1 ? (co.bf16_wire ? "gantry-nodes-bf16" : "gantry-nodes")
                        : co.bf16_wire ? "gantry-bf16"
                                       : "gantry-tcp";
    if (e.rank == 0) {
        if (groups == 1)
            printf("# gantry all-reduce: %d ranks on one host (shared memory)\n", e.world_size);
        else if (groups > 1)
            printf("# gantry hierarchical all-reduce: %d nodes of %d ranks (shared memory in "
                   "each, rings between them%s)\n",
                   groups, e.world_size / groups, co.bf16_wire ? ", bf16 on the wire" : "");
        else
            printf("# gantry tcp ring all-reduce: %d ranks%s\n", e.world_size,
                   co.bf16_wire ? ", bf16 on the wire" : "");
        printf("# %10s %12s %6s %6s %10s %7s %7s %7s\n", "size", "count", "type", "redop",
               "time", "algbw", "busbw", "#wrong");
        printf("# %10s %12s %6s %6s %10s %7s %7s %7s\n", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
    }
    float *buf = xcalloc(hi / 4 + 1, sizeof(float));
    for (size_t b = lo; b <= hi; b *= 2)
        if ((rc = run_size(c, buf, b, label, &wrong)))
            return dist_exit_code(rc);
    if (e.rank == 0)
        printf("# Out of bounds values : %d %s\n", wrong, wrong ? "FAILED" : "OK");
    free(buf);
    coll_free(c);
    dist_rdzv_free(rz);
    return wrong ? 1 : 0;
}
