/*
 * coll_test.c - the tcp collectives with 2, 3 and 4 real processes on loopback: exact sums on
 * integer-valued floats (sizes that do not divide by the world size, smaller than it, several
 * MiB, many small overlapping steps), average, bf16 wire compression, broadcast, all-gather,
 * barrier, the gradient bucketer; and failure detection: kill -9 of one rank, and a hung
 * (SIGSTOPped) rank. The all-reduce cases run twice: through shared memory (the default on one
 * host; the test fails if it silently fell back) and over the ring (coll_opts.shm = -1); plus
 * the shared-memory path's rank-order sum, its fallback when one rank switches it off, has another
 * /dev/shm or too small a one, and no object left in /dev/shm.
 */
#include "worker/coll.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "common/hash.h"
#include "common/test.h"
#include "worker/coll_shm.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"
#include "worker/net.h"
#include "worker/store.h"

struct job {
    int port, world;
    int timeout_ms; /* collective peer timeout */
    int ready_fd;   /* loop_main writes one byte here once it is all-reducing */
    int shm;        /* coll_opts.shm */
    int env_off;    /* rank that sets GANTRY_COLL_SHM=0 (-1: none, -2: all) */
    int private_kb; /* > 0: rank private_rank gets its own /dev/shm of this size, as a pod has */
    int private_rank;
    int go_fd;      /* > 0: rank 0 reads one byte from it before it starts its collectives */
    int hello_ms;   /* coll_opts.hello_timeout_ms */
    int local;      /* > 0: coll_opts.local_size (ranks per node), and groups is expected */
    int groups;     /* with local: coll_tcp_shm_groups() every rank must see */
    bool own_shm;   /* with local: every node's ranks have a /dev/shm of their own (node_main) */
};

/* Every rank process this test started, to look for their objects in /dev/shm at the end. */
static pid_t spawned[256];
static int nspawned;

static pid_t spawn(int (*fn)(int rank, void *arg), int rank, void *arg)
{
    pid_t p = tu_spawn(fn, rank, arg);
    if (nspawned < (int)(sizeof(spawned) / sizeof(spawned[0])))
        spawned[nspawned++] = p;
    return p;
}

/* Shared memory is expected when the world has several ranks, nobody switched it off, and the
 * probe can work here (a /dev/shm). */
static bool want_shm(const struct job *j)
{
    if (j->local > 0)
        return j->groups > 0;
    return j->world > 1 && j->shm >= 0 && j->env_off == -1 && j->private_kb == 0 &&
           access("/dev/shm", W_OK) == 0;
}

/* This process gets its own /dev/shm of kb KiB (a mount namespace: needs CAP_SYS_ADMIN). */
static int private_dev_shm(int kb)
{
    char opt[32];

    snprintf(opt, sizeof(opt), "size=%dk", kb);
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, opt) != 0)
        return -1;
    return 0;
}

/* The shared-memory setup a rank of job j must have ended up with. */
static int check_groups(const struct job *j, struct coll *c)
{
    int want = j->local > 0 ? j->groups : want_shm(j) ? 1 : 0;

    if (coll_tcp_shm_groups(c) == want && coll_tcp_uses_shm(c) == (want > 0))
        return 0;
    dist_log("shared memory: %d group(s), expected %d", coll_tcp_shm_groups(c), want);
    return 90;
}

static void apply_env(const struct job *j, int rank)
{
    if (j->env_off == -2 || j->env_off == rank)
        setenv("GANTRY_COLL_SHM", "0", 1);
    else
        unsetenv("GANTRY_COLL_SHM");
}

/* Element i of rank r's input: an integer small enough that sums are exact in fp32. */
static float val(int r, size_t i)
{
    return (float)((int)(i % 97) - 40) * (float)(r + 1);
}

static float want_sum(int world, size_t i)
{
    return (float)((int)(i % 97) - 40) * (float)(world * (world + 1) / 2);
}

static int check_sum(const float *b, size_t n, int world, float scale)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != want_sum(world, i) * scale) {
            dist_log("element %zu of %zu: got %g want %g", i, n, (double)b[i],
                     (double)(want_sum(world, i) * scale));
            return 1;
        }
    return 0;
}

static int join(const struct job *j, int rank, struct dist_rdzv **rz)
{
    struct dist_env e;
    struct dist_rdzv_opts o = {.connect_timeout_ms = 20000, .join_timeout_ms = 20000,
                               .op_timeout_ms = 10000};

    tu_env(&e, j->port, rank, j->world, "coll-test-token");
    return dist_rendezvous(&e, "h", &o, rz);
}

static int run_allreduces(struct coll *c, int rank, int world)
{
    static const size_t sizes[] = {1, 3, 5, 1000, 1000003, (4u << 20) + 7};
    int rc;

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        float *b = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            b[i] = val(rank, i);
        rc = coll_allreduce(c, b, n, k % 2 ? COLL_AVG : COLL_SUM);
        if (!rc && check_sum(b, n, world, k % 2 ? 1.0f / (float)world : 1.0f))
            rc = 20 + (int)k;
        free(b);
        if (rc)
            return rc;
    }
    return 0;
}

/* Inexact inputs: every rank ends with the same bits; through shared memory they are the sum in
 * rank order ((x0 + x1) + x2) + ..., divided by the world size for the average. */
static float inexact(int r, size_t i)
{
    return 1.0f / (float)(i + 1) * (float)(r + 1) + 0.1f * (float)r;
}

static int run_order(struct coll *c, int rank, int world, bool shm)
{
    static const size_t sizes[] = {2, 300007};
    uint64_t *all = malloc((size_t)world * sizeof(uint64_t));
    int rc = 0;

    for (size_t k = 0; !rc && k < 2; k++) {
        size_t n = sizes[k];
        enum coll_red op = k ? COLL_AVG : COLL_SUM;
        float *b = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            b[i] = inexact(rank, i);
        rc = coll_allreduce(c, b, n, op);
        for (size_t i = 0; !rc && shm && i < n; i++) {
            float want = inexact(0, i);
            for (int r = 1; r < world; r++)
                want += inexact(r, i);
            if (op == COLL_AVG)
                want /= (float)world;
            if (memcmp(&want, &b[i], sizeof(float)) != 0) {
                dist_log("element %zu of %zu: got %a want %a (rank order)", i, n, (double)b[i],
                         (double)want);
                rc = 80;
            }
        }
        uint64_t h = hash_fnv1a64(b, n * sizeof(float));
        if (!rc)
            rc = coll_allgather(c, &h, all, sizeof(h));
        for (int r = 0; !rc && r < world; r++)
            if (all[r] != h)
                rc = 81;
        free(b);
    }
    free(all);
    return rc;
}

static int run_others(struct coll *c, int rank, int world)
{
    size_t bn = (3u << 20) + 11, gn = 1001;
    unsigned char *b = malloc(bn), *g = malloc(gn * (size_t)world), mine[1001];
    int rc, root = world - 1;

    for (size_t i = 0; i < bn; i++)
        b[i] = rank == root ? (unsigned char)(i * 31 + 7) : 0;
    if ((rc = coll_broadcast(c, b, bn, root)))
        goto out;
    for (size_t i = 0; i < bn; i++)
        if (b[i] != (unsigned char)(i * 31 + 7)) {
            rc = 30;
            goto out;
        }
    for (size_t i = 0; i < gn; i++)
        mine[i] = (unsigned char)(rank * 13 + i);
    if ((rc = coll_allgather(c, mine, g, gn)))
        goto out;
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < gn; i++)
            if (g[(size_t)r * gn + i] != (unsigned char)(r * 13 + i))
                rc = 31;
    if (!rc)
        rc = coll_barrier(c);
out:
    free(b);
    free(g);
    return rc;
}

/* Buckets of uneven sizes pushed one after another, reduced on the background thread. */
static int run_buckets(struct coll *c, int rank, int world)
{
    static const size_t sizes[] = {7, 100000, 1, 65536, 300001, 2};
    float *b[6];
    struct coll_grads *g = coll_grads_new(c, COLL_SUM);
    int rc = 0;

    for (int k = 0; k < 6; k++) {
        b[k] = malloc(sizes[k] * sizeof(float));
        for (size_t i = 0; i < sizes[k]; i++)
            b[k][i] = val(rank, i);
        if (!rc)
            rc = coll_grads_push(g, b[k], sizes[k]);
    }
    int wrc = coll_grads_wait(g);
    rc = rc ? rc : wrc;
    for (int k = 0; k < 6; k++) {
        if (!rc && check_sum(b[k], sizes[k], world, 1.0f))
            rc = 40 + k;
        free(b[k]);
    }
    coll_grads_free(g);
    return rc;
}

/* push() hands the bucket over and returns at once, even while the peer is not there yet: the
 * reduction waits on the background thread, not in backward. Rank 1 pushes 500 ms late. */
static int grads_async_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_grads *g;
    float b[1000];
    int rc;

    if ((rc = join(j, rank, &rz)) || (rc = coll_tcp_new(dist_rdzv_store(rz), NULL, &c)))
        _exit(dist_exit_code(rc));
    for (int i = 0; i < 1000; i++)
        b[i] = (float)(rank + 1);
    g = coll_grads_new(c, COLL_SUM);
    if (rank == 1)
        tu_sleep_ms(500);
    int64_t t0 = dist_now_ms();
    rc = coll_grads_push(g, b, 1000);
    int64_t push_ms = dist_now_ms() - t0;
    int wrc = coll_grads_wait(g);
    int64_t wait_ms = dist_now_ms() - t0;
    coll_grads_free(g);
    rc = rc ? rc : wrc;
    if (!rc && b[999] != 3.0f)
        rc = 60;
    if (!rc && rank == 0 && (push_ms > 100 || wait_ms < 400)) {
        dist_log("push took %lld ms, wait %lld ms", (long long)push_ms, (long long)wait_ms);
        rc = 61;
    }
    coll_free(c);
    dist_rdzv_free(rz);
    return rc < 0 ? dist_exit_code(rc) : rc;
}

static void test_grads_async(void)
{
    struct job j = {.port = tu_free_port(), .world = 2, .timeout_ms = 20000};
    pid_t p0 = spawn(grads_async_main, 0, &j), p1 = spawn(grads_async_main, 1, &j);

    TEST_EQ_INT(tu_wait(p0, 60000, NULL), 0);
    TEST_EQ_INT(tu_wait(p1, 60000, NULL), 0);
}

/* bf16 on the wire: values exact in bf16 (small integers) stay exact; all ranks bit-equal. */
static int run_bf16(struct store *st, int rank, int world, const struct job *j)
{
    struct coll_opts o = {.bf16_wire = true, .chunk_bytes = 8192, .timeout_ms = 10000,
                          .shm = j->shm, .local_size = j->local};
    struct coll *c = NULL;
    size_t n = 100003;
    float *b = malloc(n * sizeof(float));
    int rc;

    if ((rc = coll_tcp_new(st, &o, &c)))
        goto out;
    /* bf16 is the ring's compression: the whole world's all-reduce stays there; with several
     * nodes that can each share memory, the rings between them carry it */
    if (coll_tcp_shm_groups(c) != (j->local > 0 && j->groups > 0 ? j->world / j->local : 0)) {
        rc = 53;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        b[i] = (float)((int)(i % 9) - 4) * (float)(rank + 1);
    if ((rc = coll_allreduce(c, b, n, COLL_SUM)))
        goto out;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (float)((int)(i % 9) - 4) * (float)(world * (world + 1) / 2)) {
            rc = 50;
            goto out;
        }
    /* Inexact values: every rank must still end with the same bits. */
    for (size_t i = 0; i < n; i++)
        b[i] = 1.0f / (float)(i + 1) + (float)rank * 0.001f;
    if ((rc = coll_allreduce(c, b, n, COLL_AVG)))
        goto out;
    float *all = malloc(2 * sizeof(float) * (size_t)world);
    float mine[2] = {b[12345], b[n - 1]};
    rc = coll_allgather(c, mine, all, sizeof(mine));
    for (int r = 0; !rc && r < world; r++)
        if (memcmp(all + 2 * r, mine, sizeof(mine)) != 0)
            rc = 51;
    if (!rc && (b[0] < 0.99f || b[0] > 1.01f))
        rc = 52;
    free(all);
out:
    coll_free(c);
    free(b);
    return rc;
}

/* Many small slices (4 KiB steps): each step's send waits only for the receive it forwards, so
 * steps of consecutive slices overlap on the wire; sums stay exact, back to back, with a ragged
 * last slice and sizes that do not divide by the world size. Through shared memory: 4 KiB
 * pieces (rank 0's choice counts), so each all-reduce reuses both slots of every rank many
 * times. */
static int run_small_steps(struct store *st, int rank, int world, const struct job *j)
{
    struct coll_opts o = {.chunk_bytes = 4096, .timeout_ms = 10000, .shm = j->shm,
                          .local_size = j->local};
    static const size_t sizes[] = {100003, 7, 65536};
    struct coll *c = NULL;
    int rc;

    if (rank == 0)
        setenv("GANTRY_COLL_SHM_PIECE", "4096", 1);
    rc = coll_tcp_new(st, &o, &c);
    unsetenv("GANTRY_COLL_SHM_PIECE");
    if (rc)
        return rc;
    for (size_t k = 0; !rc && k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        float *b = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            b[i] = val(rank, i);
        rc = coll_allreduce(c, b, n, COLL_SUM);
        if (!rc && check_sum(b, n, world, 1.0f))
            rc = 70 + (int)k;
        free(b);
    }
    coll_free(c);
    return rc;
}

static int rank_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_opts o = {.timeout_ms = j->timeout_ms, .chunk_bytes = 64 * 1024, .shm = j->shm,
                          .local_size = j->local};
    bool in_order = want_shm(j) && j->local == 0; /* one group: the sum in rank order */
    int rc;

    apply_env(j, rank);
    if (!j->own_shm && j->private_kb > 0 && rank == j->private_rank &&
        private_dev_shm(j->private_kb) != 0) {
        rc = 91;
        goto out;
    }
    if ((rc = join(j, rank, &rz)) || (rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)))
        goto out;
    if ((rc = check_groups(j, c)))
        goto out;
    if ((rc = run_allreduces(c, rank, j->world)) ||
        (rc = run_order(c, rank, j->world, in_order)) || (rc = run_others(c, rank, j->world)) ||
        (rc = run_buckets(c, rank, j->world)) ||
        (rc = run_bf16(dist_rdzv_store(rz), rank, j->world, j)) ||
        (rc = run_small_steps(dist_rdzv_store(rz), rank, j->world, j)))
        goto out;
out:
    coll_free(c);
    if (!rc)
        dist_rdzv_free(rz);
    return rc < 0 ? dist_exit_code(rc) : rc;
}

/* A node of job j: a /dev/shm of its own (a mount namespace, as a pod has), shared by its
 * local ranks node * local .. node * local + local - 1. Exits with the first rank's failure. */
static int node_main(int node, void *arg)
{
    const struct job *j = arg;
    pid_t pids[8];
    int rc = 0;

    if (private_dev_shm(j->private_kb > 0 && node == j->private_rank ? j->private_kb : 65536))
        return 92;
    for (int l = 0; l < j->local; l++)
        pids[l] = tu_spawn(rank_main, node * j->local + l, arg);
    for (int l = 0; l < j->local; l++) {
        int code = tu_wait(pids[l], 120000, NULL);
        if (code && !rc)
            rc = code;
    }
    return rc;
}

static void run_job(const struct job *j)
{
    pid_t pids[8];
    int n = j->own_shm ? j->world / j->local : j->world;

    for (int r = 0; r < n; r++)
        pids[r] = spawn(j->own_shm ? node_main : rank_main, r, (void *)j);
    for (int r = 0; r < n; r++)
        TEST_EQ_INT(tu_wait(pids[r], 120000, NULL), 0);
}

/* shm: coll_opts.shm; env_off: the rank that sets GANTRY_COLL_SHM=0 (-1 none, -2 all). */
static void run_world(int world, int shm, int env_off)
{
    struct job j = {.port = tu_free_port(), .world = world, .timeout_ms = 20000, .shm = shm,
                    .env_off = env_off};

    run_job(&j);
}

static void test_world2(void)
{
    run_world(2, 0, -1);
}

/* An odd world: segments of unequal sizes. */
static void test_world3(void)
{
    run_world(3, 0, -1);
}

static void test_world4(void)
{
    run_world(4, 0, -1);
}

static void test_world2_ring(void)
{
    run_world(2, -1, -1);
}

static void test_world3_ring(void)
{
    run_world(3, -1, -1);
}

static void test_world4_ring(void)
{
    run_world(4, -1, -1);
}

/* GANTRY_COLL_SHM=0 on every rank, and on rank 2 alone: its no is everyone's no. */
static void test_shm_env_off(void)
{
    run_world(3, 0, -2);
    run_world(3, 0, 2);
}

static int can_private_shm(int rank, void *arg)
{
    (void)rank;
    (void)arg;
    return private_dev_shm(1024) ? 1 : 0;
}

/* Whether a process can have a /dev/shm of its own here; says so when not. */
static bool private_shm_works(void)
{
    if (tu_wait(tu_spawn(can_private_shm, 0, NULL), 10000, NULL) == 0)
        return true;
    printf("     skipped: no private /dev/shm here (needs CAP_SYS_ADMIN)\n");
    return false;
}

/* The probe's real failures: a rank with another /dev/shm (pods on one node: shm_open finds
 * nothing), and a /dev/shm too small for the slots (1 MiB: posix_fallocate says ENOSPC, rather
 * than SIGBUS at first touch). Every rank falls back to the ring, and agrees. */
static void test_shm_probe_fails(void)
{
    struct job j = {.world = 2, .timeout_ms = 20000, .env_off = -1, .private_kb = 65536,
                    .private_rank = 1};

    if (!private_shm_works())
        return;
    j.port = tu_free_port();
    run_job(&j);
    j.port = tu_free_port();
    j.private_kb = 1024;
    j.private_rank = 0;
    run_job(&j);
}

/* Several ranks per node on several nodes, each node with a /dev/shm of its own (pods): the
 * whole world cannot map one object, each node can map its own, so the all-reduce is
 * hierarchical (every case of rank_main: exact sums, the same bits everywhere, bf16 on the rings
 * between nodes, rank 0's 4 KiB pieces in every node). When one node's /dev/shm is too small,
 * everyone agrees on the ring. */
static void test_nodes(void)
{
    struct job j = {.world = 4, .timeout_ms = 20000, .env_off = -1, .local = 2, .groups = 2,
                    .own_shm = true};

    if (!private_shm_works())
        return;
    j.port = tu_free_port();
    run_job(&j);
    j.port = tu_free_port();
    j.private_kb = 1024;
    j.private_rank = 1;
    j.groups = 0;
    run_job(&j);
}

/* Nodes on one host (GANTRY_COLL_SHM=node's coll_opts): 3 nodes of 2, 2 nodes of 3 (three
 * segments per piece, three rings side by side). Without it, ranks that can all map one object
 * use one (a single group), nodes or not. */
static void test_nodes_one_host(void)
{
    struct job j = {.world = 6, .timeout_ms = 20000, .env_off = -1, .shm = 2, .local = 2,
                    .groups = 3};

    j.port = tu_free_port();
    run_job(&j);
    j.port = tu_free_port();
    j.local = 3;
    j.groups = 2;
    run_job(&j);
    j.port = tu_free_port();
    j.world = 4;
    j.local = 2;
    j.shm = 0;
    j.groups = 1;
    run_job(&j);
}

/* Rounds of: set up the all-reduce, run one, free it (closing the sockets), as a job's last
 * step does before it exits. */
static int rounds_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll_opts o = {.timeout_ms = j->timeout_ms, .shm = j->shm, .local_size = j->local};
    size_t n = 1 << 16;
    float *b = malloc(n * sizeof(float));
    int rc = join(j, rank, &rz);

    for (int round = 0; !rc && round < 40; round++) {
        struct coll *c = NULL;
        for (size_t i = 0; i < n; i++)
            b[i] = val(rank, i);
        if (!(rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)) &&
            !(rc = check_groups(j, c)) && !(rc = coll_allreduce(c, b, n, COLL_SUM)) &&
            check_sum(b, n, j->world, 1.0f))
            rc = 70;
        coll_free(c);
    }
    free(b);
    if (!rc)
        dist_rdzv_free(rz);
    return rc < 0 ? dist_exit_code(rc) : rc;
}

/* Two nodes of two; rank 0 is stopped for 50-150 ms again and again (a busy or throttled CPU),
 * far below the timeout. Node 1 can finish an all-reduce and hang up while node 0 still gathers
 * (it needs only what node 0 sent): that is not a death. Every rank must finish every round. */
static void test_nodes_stopped_rank(void)
{
    struct job j = {.port = tu_free_port(), .world = 4, .timeout_ms = 10000, .shm = 2,
                    .env_off = -1, .local = 2, .groups = 2};
    pid_t pids[4];
    int stops = 0, st;

    for (int r = 0; r < 4; r++)
        pids[r] = spawn(rounds_main, r, &j);
    srand(7);
    while (waitpid(pids[0], &st, WNOHANG) == 0 && stops < 2000) {
        kill(pids[0], SIGSTOP);
        tu_sleep_ms(50 + rand() % 100);
        kill(pids[0], SIGCONT);
        tu_sleep_ms(5 + rand() % 20);
        stops++;
    }
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int r = 1; r < 4; r++)
        TEST_EQ_INT(tu_wait(pids[r], 60000, NULL), 0);
    printf("     40 rounds with rank 0 stopped %d times\n", stops);
}

static void test_world1(void)
{
    struct job j = {.port = tu_free_port(), .world = 1, .timeout_ms = 5000, .env_off = -1};
    pid_t p = spawn(rank_main, 0, &j);
    TEST_EQ_INT(tu_wait(p, 60000, NULL), 0);
}

/* Rank 1's listening TCP port, from the socket inodes of its open files and /proc/net/tcp
 * (the collectives listen on an ephemeral port they publish only in the store); -1 if none. */
static int listening_port(pid_t pid)
{
    char path[64], link[64], line[512];
    unsigned long inodes[64];
    int n = 0, port = -1;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && n < 64) {
        char fd[340];
        ssize_t l;
        snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
        if ((l = readlink(fd, link, sizeof(link) - 1)) > 0) {
            link[l] = 0;
            if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1)
                n++;
        }
    }
    if (d)
        closedir(d);
    FILE *f = fopen("/proc/net/tcp", "r");
    while (f && port < 0 && fgets(line, sizeof(line), f)) {
        unsigned lp, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*d %lu", &lp, &st,
                   &ino) != 3 || st != 0x0A) /* TCP_LISTEN */
            continue;
        for (int i = 0; i < n; i++)
            if (inodes[i] == ino)
                port = (int)lp;
    }
    if (f)
        fclose(f);
    return port;
}

static int stray_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_opts o = {.timeout_ms = j->timeout_ms, .shm = -1, .hello_timeout_ms = j->hello_ms};
    float b[5];
    char go;
    int rc;

    for (int i = 0; i < 5; i++)
        b[i] = val(rank, (size_t)i);
    if ((rc = join(j, rank, &rz)))
        return dist_exit_code(rc);
    if (rank == 0 && read(j->go_fd, &go, 1) != 1)
        return 91;
    if ((rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)) ||
        (rc = coll_allreduce(c, b, 5, COLL_SUM)))
        return dist_exit_code(rc);
    rc = check_sum(b, 5, j->world, 1.0f);
    coll_free(c);
    dist_rdzv_free(rz);
    return rc;
}

/* Strays connect to rank 1's collective port before rank 0 does: five say nothing, one sends a
 * hello with a wrong MAC. Rank 1 reads them side by side with rank 0's connection: the ring
 * forms as rank 0 arrives, not once the strays time out (hello_timeout_ms each, one after the
 * other: 5 s; or the ring's 20 s timeout, as before either). */
static void test_stray_connections(void)
{
    struct job j = {.port = tu_free_port(), .world = 2, .timeout_ms = 20000, .shm = -1,
                    .env_off = -1, .hello_ms = 1000};
    int go[2], port = -1, silent[5], wrong = -1;
    char why[256];
    unsigned char junk[36] = {0, 0, 0, 0};

    if (!TEST_CHECK(pipe(go) == 0))
        return;
    j.go_fd = go[0];
    pid_t p0 = spawn(stray_main, 0, &j), p1 = spawn(stray_main, 1, &j);
    close(go[0]);
    for (int64_t until = dist_now_ms() + 20000; port < 0 && dist_now_ms() < until;)
        if ((port = listening_port(p1)) < 0)
            usleep(10000);
    TEST_CHECK(port > 0);
    int64_t t0 = dist_now_ms();
    if (port > 0) {
        for (int i = 0; i < 5; i++)
            TEST_EQ_INT(net_connect("127.0.0.1", port, 5000, &silent[i], why, sizeof(why)), 0);
        TEST_EQ_INT(net_connect("127.0.0.1", port, 5000, &wrong, why, sizeof(why)), 0);
        TEST_EQ_INT(net_write_all(wrong, junk, sizeof(junk), 5000), 0);
    }
    TEST_EQ_INT(write(go[1], "g", 1), 1);
    TEST_EQ_INT(tu_wait(p0, 60000, NULL), 0);
    TEST_EQ_INT(tu_wait(p1, 60000, NULL), 0);
    int64_t took = dist_now_ms() - t0;
    printf("     the ring formed %lld ms after the strays connected\n", (long long)took);
    TEST_CHECK(took < 3000); /* not held up by the strays */
    close(go[1]);
    for (int i = 0; port > 0 && i < 5; i++)
        close(silent[i]);
    if (wrong >= 0)
        close(wrong);
}

/* A rank that all-reduces until the collective fails; exits with dist_exit_code(). */
static int loop_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_opts o = {.timeout_ms = j->timeout_ms, .shm = j->shm, .local_size = j->local};
    size_t n = 1 << 16;
    float *b = calloc(n, sizeof(float));
    int rc;

    if ((rc = join(j, rank, &rz)) || (rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)))
        goto out;
    if (check_groups(j, c)) {
        free(b);
        _exit(9);
    }
    for (int it = 0; !rc; it++) {
        rc = coll_allreduce(c, b, n, COLL_SUM);
        if (it == 10 && !rc && write(j->ready_fd, "r", 1) != 1)
            rc = DIST_EIO;
    }
out:
    free(b);
    coll_free(c);
    /* As the worker does on a fatal error: exit at once, leaving the rendezvous as it is. The
     * status says which error: 10 + -rc (DIST_EPEER 13, DIST_ETIMEDOUT 12). */
    _exit(rc < 0 && rc > -20 ? 10 - rc : 1);
}

/* Starts 4 looping ranks, waits until they are all-reducing, hits rank `victim` with sig and
 * checks that the others fail with a retryable error within `within` ms: a kill is DIST_EPEER
 * on every rank, long before the timeout; a hang is DIST_ETIMEDOUT (on the ring, a neighbour's
 * exit may reach a rank first: DIST_EPEER). */
static void failure_case(int sig, int timeout_ms, int within, int shm, int local)
{
    struct job j = {.port = tu_free_port(), .world = 4, .timeout_ms = timeout_ms, .shm = shm,
                    .env_off = -1, .local = local, .groups = local ? 4 / local : 0};
    pid_t pids[4];
    int victim = 2, pfd[2];
    char ready[4];

    if (!TEST_CHECK(pipe(pfd) == 0))
        return;
    j.ready_fd = pfd[1];
    for (int r = 0; r < 4; r++)
        pids[r] = spawn(loop_main, r, &j);
    close(pfd[1]);
    /* Every rank is past its 10th all-reduce: the ring is up and busy. */
    size_t got = 0;
    ssize_t n;
    while (got < 4 && (n = read(pfd[0], ready + got, 4 - got)) > 0)
        got += (size_t)n;
    TEST_EQ_INT(got, 4);
    close(pfd[0]);
    int64_t t0 = dist_now_ms();
    kill(pids[victim], sig);
    for (int r = 0; r < 4; r++) {
        if (r == victim)
            continue;
        int code = tu_wait(pids[r], timeout_ms + 20000, NULL);
        int64_t took = dist_now_ms() - t0;
        if (sig == SIGKILL || (want_shm(&j) && !local))
            TEST_EQ_INT(code, sig == SIGKILL ? 10 - DIST_EPEER : 10 - DIST_ETIMEDOUT);
        else
            TEST_CHECK(code == 10 - DIST_EPEER || code == 10 - DIST_ETIMEDOUT);
        TEST_CHECK(took < within);
        printf("     rank %d exited %d after %lld ms\n", r, code, (long long)took);
    }
    kill(pids[victim], SIGKILL);
    tu_wait(pids[victim], 10000, NULL);
}

/* A 30 s timeout: the others must notice the death itself (socket EOF), not the silence. */
static void test_kill9(void)
{
    failure_case(SIGKILL, 30000, 5000, 0, 0);
}

static void test_kill9_ring(void)
{
    failure_case(SIGKILL, 30000, 5000, -1, 0);
}

/* Two nodes of two (rank 2 is node 1's first): its node's other rank, waiting for it in shared
 * memory, and node 0's rank 0, in the ring across the nodes with it, see it die; they abort
 * their nodes' all-reduces, so rank 1 fails at once too. */
static void test_kill9_nodes(void)
{
    failure_case(SIGKILL, 30000, 5000, 2, 2);
}

static void test_hung_peer(void)
{
    failure_case(SIGSTOP, 2000, 7000, 0, 0);
}

static void test_hung_peer_ring(void)
{
    failure_case(SIGSTOP, 2000, 7000, -1, 0);
}

static void test_hung_peer_nodes(void)
{
    failure_case(SIGSTOP, 2000, 7000, 2, 2);
}

/* Rank 0 unlinks its object once every rank has mapped it (or given up): none of this test's
 * ranks, killed ones included, left one in /dev/shm. */
static void test_no_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char pfx[64];
    int left = 0;

    if (!d) {
        test_skip("no /dev/shm");
        return;
    }
    TEST_CHECK(nspawned > 10);
    while ((e = readdir(d)))
        for (int i = 0; i < nspawned; i++) {
            snprintf(pfx, sizeof(pfx), "%s%ld-", COLL_SHM_PREFIX, (long)spawned[i]);
            if (strncmp(e->d_name, pfx, strlen(pfx)) == 0) {
                printf("     left over: /dev/shm/%s\n", e->d_name);
                left++;
            }
        }
    closedir(d);
    TEST_EQ_INT(left, 0);
}

static void test_bf16_convert(void)
{
    TEST_EQ_INT(coll_f32_to_bf16(1.0f), 0x3f80);
    TEST_EQ_INT(coll_f32_to_bf16(-2.0f), 0xc000);
    TEST_NEAR(coll_bf16_to_f32(coll_f32_to_bf16(3.14159f)), 3.140625, 0);
    /* Ties round to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7. */
    TEST_EQ_INT(coll_f32_to_bf16(1.00390625f), 0x3f80);
    TEST_CHECK(coll_bf16_to_f32(coll_f32_to_bf16(NAN)) != coll_bf16_to_f32(coll_f32_to_bf16(NAN)));
}

int main(void)
{
    TEST_RUN(test_bf16_convert);
    TEST_RUN(test_world1);
    TEST_RUN(test_stray_connections);
    TEST_RUN(test_world2);
    TEST_RUN(test_world3);
    TEST_RUN(test_world4);
    TEST_RUN(test_world2_ring);
    TEST_RUN(test_world3_ring);
    TEST_RUN(test_world4_ring);
    TEST_RUN(test_shm_env_off);
    TEST_RUN(test_shm_probe_fails);
    TEST_RUN(test_nodes);
    TEST_RUN(test_nodes_one_host);
    TEST_RUN(test_nodes_stopped_rank);
    TEST_RUN(test_grads_async);
    TEST_RUN(test_kill9);
    TEST_RUN(test_kill9_ring);
    TEST_RUN(test_kill9_nodes);
    TEST_RUN(test_hung_peer);
    TEST_RUN(test_hung_peer_ring);
    TEST_RUN(test_hung_peer_nodes);
    TEST_RUN(test_no_leftovers);
    return test_summary();
}
