/*
 * coll_test.c - the tcp collectives with 2, 3 and 4 real processes on loopback: exact sums on
 * integer-valued floats (sizes that do not divide by the world size, smaller than it, several
 * MiB, many small overlapping steps), average, bf16 wire compression, broadcast, all-gather,
 * barrier, the gradient bucketer; and failure detection: kill -9 of one rank, and a hung
 * (SIGSTOPped) rank.
 */
#include "worker/coll.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"
#include "worker/store.h"

struct job {
    int port, world;
    int timeout_ms; /* collective peer timeout */
    int ready_fd;   /* loop_main writes one byte here once it is all-reducing */
};

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
    pid_t p0 = tu_spawn(grads_async_main, 0, &j), p1 = tu_spawn(grads_async_main, 1, &j);

    TEST_EQ_INT(tu_wait(p0, 60000, NULL), 0);
    TEST_EQ_INT(tu_wait(p1, 60000, NULL), 0);
}

/* bf16 on the wire: values exact in bf16 (small integers) stay exact; all ranks bit-equal. */
static int run_bf16(struct store *st, int rank, int world)
{
    struct coll_opts o = {.bf16_wire = true, .chunk_bytes = 8192, .timeout_ms = 10000};
    struct coll *c = NULL;
    size_t n = 100003;
    float *b = malloc(n * sizeof(float));
    int rc;

    if ((rc = coll_tcp_new(st, &o, &c)))
        goto out;
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
 * last slice and sizes that do not divide by the world size. */
static int run_small_steps(struct store *st, int rank, int world)
{
    struct coll_opts o = {.chunk_bytes = 4096, .timeout_ms = 10000};
    static const size_t sizes[] = {100003, 7, 65536};
    struct coll *c = NULL;
    int rc;

    if ((rc = coll_tcp_new(st, &o, &c)))
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
    struct coll_opts o = {.timeout_ms = j->timeout_ms, .chunk_bytes = 64 * 1024};
    int rc;

    if ((rc = join(j, rank, &rz)) || (rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)))
        goto out;
    if ((rc = run_allreduces(c, rank, j->world)) || (rc = run_others(c, rank, j->world)) ||
        (rc = run_buckets(c, rank, j->world)) ||
        (rc = run_bf16(dist_rdzv_store(rz), rank, j->world)) ||
        (rc = run_small_steps(dist_rdzv_store(rz), rank, j->world)))
        goto out;
out:
    coll_free(c);
    if (!rc)
        dist_rdzv_free(rz);
    return rc < 0 ? dist_exit_code(rc) : rc;
}

static void run_world(int world)
{
    struct job j = {.port = tu_free_port(), .world = world, .timeout_ms = 20000};
    pid_t pids[8];

    for (int r = 0; r < world; r++)
        pids[r] = tu_spawn(rank_main, r, &j);
    for (int r = 0; r < world; r++)
        TEST_EQ_INT(tu_wait(pids[r], 120000, NULL), 0);
}

static void test_world2(void)
{
    run_world(2);
}

/* An odd world: segments of unequal sizes. */
static void test_world3(void)
{
    run_world(3);
}

static void test_world4(void)
{
    run_world(4);
}

static void test_world1(void)
{
    struct job j = {.port = tu_free_port(), .world = 1, .timeout_ms = 5000};
    pid_t p = tu_spawn(rank_main, 0, &j);
    TEST_EQ_INT(tu_wait(p, 60000, NULL), 0);
}

/* A rank that all-reduces until the collective fails; exits with dist_exit_code(). */
static int loop_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_opts o = {.timeout_ms = j->timeout_ms};
    size_t n = 1 << 16;
    float *b = calloc(n, sizeof(float));
    int rc;

    if ((rc = join(j, rank, &rz)) || (rc = coll_tcp_new(dist_rdzv_store(rz), &o, &c)))
        goto out;
    for (int it = 0; !rc; it++) {
        rc = coll_allreduce(c, b, n, COLL_SUM);
        if (it == 10 && !rc && write(j->ready_fd, "r", 1) != 1)
            rc = DIST_EIO;
    }
out:
    free(b);
    coll_free(c);
    /* As the worker does on a fatal error: exit at once, leaving the rendezvous as it is. */
    _exit(dist_exit_code(rc));
}

/* Starts 4 looping ranks, waits until they are all-reducing, hits rank `victim` with sig and
 * checks that the others exit with the retryable code within the timeout. */
static void failure_case(int sig, int timeout_ms)
{
    struct job j = {.port = tu_free_port(), .world = 4, .timeout_ms = timeout_ms};
    pid_t pids[4];
    int victim = 2, pfd[2];
    char ready[4];

    if (!TEST_CHECK(pipe(pfd) == 0))
        return;
    j.ready_fd = pfd[1];
    for (int r = 0; r < 4; r++)
        pids[r] = tu_spawn(loop_main, r, &j);
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
        TEST_EQ_INT(code, DIST_EXIT_RETRY);
        TEST_CHECK(took < timeout_ms + 5000);
        printf("     rank %d exited %d after %lld ms\n", r, code, (long long)took);
    }
    kill(pids[victim], SIGKILL);
    tu_wait(pids[victim], 10000, NULL);
}

static void test_kill9(void)
{
    failure_case(SIGKILL, 5000);
}

static void test_hung_peer(void)
{
    failure_case(SIGSTOP, 2000);
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
    TEST_RUN(test_world2);
    TEST_RUN(test_world3);
    TEST_RUN(test_world4);
    TEST_RUN(test_grads_async);
    TEST_RUN(test_kill9);
    TEST_RUN(test_hung_peer);
    return test_summary();
}
