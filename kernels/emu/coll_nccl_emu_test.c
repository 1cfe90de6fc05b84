/*
 * coll_nccl_emu_test.c - the nccl collectives backend (worker/coll_nccl.cu, unchanged, through
 * cu2cc) on the emulated CUDA runtime and NCCL (kernels/emu/), with 2 and 3 real rank processes
 * that rendezvous through the store as the worker does, one emulated device each: exact sums,
 * averages bit-identical to the rank-order reduction, broadcast from every root, all-gather,
 * barrier, a stream passed in; a rank killed with SIGKILL (the others fail with DIST_EPEER well
 * before their timeout) and a hung (SIGSTOPped) rank (DIST_ETIMEDOUT after timeout_ms; once the
 * hung rank runs again it finds the communicator aborted: DIST_EPEER, not a hang); the
 * communicator's init (non-blocking) with a peer that never calls it (DIST_ETIMEDOUT after
 * timeout_ms) or is killed while in it (DIST_EPEER, well before the timeout); the enqueue-only
 * all-reduce (coll_nccl_allreduce_async + coll_nccl_wait: the same bits as coll_allreduce, and
 * the same failures: a killed peer DIST_EPEER, a hung one DIST_ETIMEDOUT); nothing left in
 * /dev/shm.
 */
#include <cuda_runtime.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "worker/coll.h"
#include "worker/coll_impl.h"
#include "worker/coll_nccl.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"

struct job {
    int port, world;
    int absent;      /* init_main: this rank rendezvouses but never calls coll_nccl_new */
    int timeout_ms;  /* coll_opts.timeout_ms of rank 0 (the others: 30 s) */
    int ready_fd;    /* loop_main writes one byte here once it is all-reducing */
    bool own_stream; /* pass a stream to coll_nccl_new */
    bool async;      /* loop_main: coll_nccl_allreduce_async + coll_nccl_wait */
};

static pid_t spawned[64];
static int nspawned;

static pid_t spawn(int (*fn)(int rank, void *arg), int rank, void *arg)
{
    pid_t p = tu_spawn(fn, rank, arg);
    if (nspawned < (int)(sizeof(spawned) / sizeof(spawned[0])))
        spawned[nspawned++] = p;
    return p;
}

/* The rendezvous every rank of these tests joins (GANTRY_EMU_DEVICES=4: one device per rank). */
static int join(const struct job *j, int rank, struct dist_rdzv **rz)
{
    struct dist_env e;
    struct dist_rdzv_opts o = {
        .connect_timeout_ms = 20000, .join_timeout_ms = 20000, .op_timeout_ms = 10000};

    setenv("GANTRY_EMU_DEVICES", "4", 1);
    tu_env(&e, j->port, rank, j->world, "coll-nccl-token");
    return dist_rendezvous(&e, "h", &o, rz);
}

/* The nccl backend's options: rank 0 has the case's timeout, the others 30 s. */
static struct coll_opts opts_for(const struct job *j, int rank)
{
    struct coll_opts co = {.timeout_ms = rank == 0 ? j->timeout_ms : 30000};
    return co;
}

/* Rendezvous, then the nccl backend on device `rank` (NCCL: one rank per device). */
static int setup(const struct job *j, int rank, struct dist_rdzv **rz, cudaStream_t *stream,
                 struct coll **c)
{
    struct coll_opts co = opts_for(j, rank);
    int rc;

    *stream = NULL;
    if ((rc = join(j, rank, rz)))
        return rc;
    if (j->own_stream && cudaStreamCreate(stream) != cudaSuccess)
        return DIST_EIO;
    return coll_nccl_new(dist_rdzv_store(*rz), rank, *stream, &co, c);
}

static float inexact(int r, size_t i)
{
    return 1.0f / (float)(i + 1) * (float)(r + 1) + 0.1f * (float)r;
}

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    return cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess ? d : NULL;
}

static int run_allreduces(struct coll *c, int rank, int world)
{
    static const size_t sizes[] = {1, 3, 1000, 1000003, (2u << 20) + 5};
    int rc = 0;

    for (size_t k = 0; !rc && k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        enum coll_red op = k % 2 ? COLL_AVG : COLL_SUM;
        float *h = malloc(n * sizeof(float)), *d = dev_alloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            h[i] = inexact(rank, i);
        cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
        rc = coll_allreduce(c, d, n, op);
        cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
        /* Rank order; NCCL's average multiplies each input by 1/W before the sum. */
        float s = (float)(1.0 / world);
        for (size_t i = 0; !rc && i < n; i++) {
            float want = op == COLL_AVG ? inexact(0, i) * s : inexact(0, i);
            for (int r = 1; r < world; r++)
                want += op == COLL_AVG ? inexact(r, i) * s : inexact(r, i);
            if (memcmp(&want, &h[i], sizeof(float)) != 0) {
                dist_log("n %zu: element %zu = %a, want %a", n, i, (double)h[i], (double)want);
                rc = 20 + (int)k;
            }
        }
        cudaFree(d);
        free(h);
    }
    return rc;
}

/* The enqueue-only all-reduce: two halves enqueued, one wait that orders another stream behind
 * them; the same bits as coll_allreduce's sum. */
static int run_async(struct coll *c, int rank, int world)
{
    static const size_t sizes[] = {2, 1001, 1000003};
    cudaStream_t other = NULL;
    int rc = 0;

    /* only an nccl collective takes the enqueue-only calls */
    struct coll fake = {0};
    if (coll_nccl_allreduce_async(&fake, NULL, 1) != DIST_EUSAGE ||
        coll_nccl_wait(&fake, NULL) != DIST_EUSAGE || coll_nccl_stream(&fake) != NULL)
        return 40;
    if (cudaStreamCreate(&other) != cudaSuccess)
        return DIST_EIO;
    for (size_t k = 0; !rc && k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k], h1 = n / 2;
        float *h = malloc(n * sizeof(float)), *d = dev_alloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            h[i] = inexact(rank, i);
        cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
        if (!(rc = coll_nccl_allreduce_async(c, d, h1)) &&
            !(rc = coll_nccl_allreduce_async(c, d + h1, n - h1)) &&
            !(rc = coll_nccl_allreduce_async(c, d, 0)))
            rc = coll_nccl_wait(c, other);
        cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, other);
        cudaStreamSynchronize(other);
        for (size_t i = 0; !rc && i < n; i++) {
            float want = inexact(0, i);
            for (int r = 1; r < world; r++)
                want += inexact(r, i);
            if (memcmp(&want, &h[i], sizeof(float)) != 0) {
                dist_log("async n %zu: element %zu = %a, want %a", n, i, (double)h[i],
                         (double)want);
                rc = 41 + (int)k;
            }
        }
        cudaFree(d);
        free(h);
    }
    cudaStreamDestroy(other);
    return rc;
}

static int run_others(struct coll *c, int rank, int world)
{
    size_t bn = (3u << 20) + 11, gn = 1001;
    unsigned char *h = malloc(bn), *b = dev_alloc(bn), *g = dev_alloc(gn * (size_t)world);
    unsigned char *mine = dev_alloc(gn);
    int rc = 0;

    for (int root = 0; !rc && root < world; root++) {
        for (size_t i = 0; i < bn; i++)
            h[i] = rank == root ? (unsigned char)(i * 31 + 7 + root) : 0;
        cudaMemcpy(b, h, bn, cudaMemcpyHostToDevice);
        rc = coll_broadcast(c, b, bn, root);
        cudaMemcpy(h, b, bn, cudaMemcpyDeviceToHost);
        for (size_t i = 0; !rc && i < bn; i++)
            if (h[i] != (unsigned char)(i * 31 + 7 + root))
                rc = 30;
    }
    for (size_t i = 0; i < gn; i++)
        h[i] = (unsigned char)(rank * 13 + i);
    cudaMemcpy(mine, h, gn, cudaMemcpyHostToDevice);
    if (!rc)
        rc = coll_allgather(c, mine, g, gn);
    cudaMemcpy(h, g, gn * (size_t)world, cudaMemcpyDeviceToHost);
    for (int r = 0; !rc && r < world; r++)
        for (size_t i = 0; i < gn; i++)
            if (h[(size_t)r * gn + i] != (unsigned char)(r * 13 + i))
                rc = 31;
    if (!rc)
        rc = coll_barrier(c);
    cudaFree(b);
    cudaFree(g);
    cudaFree(mine);
    free(h);
    return rc;
}

static int rank_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    cudaStream_t s = NULL;
    int rc;

    if ((rc = setup(j, rank, &rz, &s, &c)))
        goto out;
    if (strcmp(coll_backend(c), "nccl") != 0 || coll_rank(c) != rank ||
        coll_world_size(c) != j->world) {
        rc = 90;
        goto out;
    }
    if ((rc = run_allreduces(c, rank, j->world)) || (rc = run_async(c, rank, j->world)) ||
        (rc = run_others(c, rank, j->world)))
        goto out;
out:
    coll_free(c);
    if (s)
        cudaStreamDestroy(s);
    if (!rc)
        dist_rdzv_free(rz);
    return rc < 0 ? dist_exit_code(rc) : rc;
}

static void run_world(int world, bool own_stream)
{
    struct job j = {
        .port = tu_free_port(), .world = world, .timeout_ms = 20000, .own_stream = own_stream};
    pid_t pids[4];

    for (int r = 0; r < world; r++)
        pids[r] = spawn(rank_main, r, &j);
    for (int r = 0; r < world; r++)
        TEST_EQ_INT(tu_wait(pids[r], 120000, NULL), 0);
}

static void test_world1(void)
{
    run_world(1, false);
}

static void test_world2(void)
{
    run_world(2, true);
}

static void test_world3(void)
{
    run_world(3, false);
}

/* All-reduces until the collective fails; exits 10 - rc (DIST_EPEER 13, DIST_ETIMEDOUT 12). */
static int loop_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    cudaStream_t s = NULL;
    size_t n = 1 << 16;
    float *d = dev_alloc(n * sizeof(float));
    int rc;

    cudaMemset(d, 0, n * sizeof(float));
    if ((rc = setup(j, rank, &rz, &s, &c)))
        goto out;
    for (int it = 0; !rc; it++) {
        if (!j->async)
            rc = coll_allreduce(c, d, n, COLL_SUM);
        else if (!(rc = coll_nccl_allreduce_async(c, d, n / 2)) &&
                 !(rc = coll_nccl_allreduce_async(c, d + n / 2, n / 2)))
            rc = coll_nccl_wait(c, NULL);
        if (it == 10 && !rc && write(j->ready_fd, "r", 1) != 1)
            rc = DIST_EIO;
    }
out:
    coll_free(c); /* after an abort: frees what is left, waits for nothing */
    cudaFree(d);
    /* As the worker does on a fatal error: exit at once, leaving the rendezvous as it is. */
    _exit(rc < 0 && rc > -20 ? 10 - rc : 1);
}

static void failure_case(int world, int sig, int timeout_ms, int within, int want, bool async)
{
    struct job j = {
        .port = tu_free_port(), .world = world, .timeout_ms = timeout_ms, .async = async};
    pid_t pids[4];
    int victim = world - 1, pfd[2];
    char ready[4];

    if (!TEST_CHECK(pipe(pfd) == 0))
        return;
    j.ready_fd = pfd[1];
    for (int r = 0; r < world; r++)
        pids[r] = spawn(loop_main, r, &j);
    close(pfd[1]);
    size_t got = 0;
    ssize_t n;
    while (got < (size_t)world && (n = read(pfd[0], ready + got, (size_t)world - got)) > 0)
        got += (size_t)n;
    TEST_EQ_INT(got, world);
    close(pfd[0]);
    int64_t t0 = dist_now_ms();
    kill(pids[victim], sig);
    for (int r = 0; r < world; r++) {
        if (r == victim)
            continue;
        int code = tu_wait(pids[r], within + 20000, NULL);
        int64_t took = dist_now_ms() - t0;
        TEST_EQ_INT(code, want);
        TEST_CHECK(took < within);
        printf("     rank %d exited %d after %lld ms\n", r, code, (long long)took);
    }
    if (sig == SIGSTOP) { /* it finds rank 0's abort once it runs again */
        kill(pids[victim], SIGCONT);
        TEST_EQ_INT(tu_wait(pids[victim], 20000, NULL), 10 - DIST_EPEER);
    } else {
        TEST_EQ_INT(tu_wait(pids[victim], 10000, NULL), 128 + SIGKILL);
    }
}

/* A 30 s timeout: the others must notice the death itself, not the silence. */
static void test_kill9(void)
{
    failure_case(3, SIGKILL, 30000, 5000, 10 - DIST_EPEER, false);
}

static void test_kill9_async(void)
{
    failure_case(3, SIGKILL, 30000, 5000, 10 - DIST_EPEER, true);
}

static void test_hung_peer(void)
{
    failure_case(2, SIGSTOP, 1000, 7000, 10 - DIST_ETIMEDOUT, false);
}

static void test_hung_peer_async(void)
{
    failure_case(2, SIGSTOP, 1000, 7000, 10 - DIST_ETIMEDOUT, true);
}

/* The rank `absent` joins the rendezvous (and so the id exchange) but never the communicator;
 * the rank that owns ready_fd writes a byte just before coll_nccl_new. Exits 10 - rc. */
static int init_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_rdzv *rz = NULL;
    struct coll *c = NULL;
    struct coll_opts co = opts_for(j, rank);
    int rc;

    if (join(j, rank, &rz))
        _exit(1);
    if (rank == j->absent) {
        tu_sleep_ms(60000); /* the test kills it */
        _exit(2);
    }
    if (j->ready_fd >= 0 && rank == j->world - 2 && write(j->ready_fd, "r", 1) != 1)
        _exit(1);
    rc = coll_nccl_new(dist_rdzv_store(rz), rank, NULL, &co, &c);
    coll_free(c);
    /* As the worker does on a fatal error: exit at once, leaving the rendezvous as it is. */
    _exit(rc < 0 && rc > -20 ? 10 - rc : rc ? 1 : 0);
}

/* World 2, rank 1 never calls init: rank 0 gives up after its 1 s timeout, not never. */
static void test_init_peer_absent(void)
{
    struct job j = {.port = tu_free_port(), .world = 2, .timeout_ms = 1000, .absent = 1,
                    .ready_fd = -1};
    pid_t p0 = spawn(init_main, 0, &j), p1 = spawn(init_main, 1, &j);
    int64_t took = 0;
    int code = tu_wait(p0, 30000, &took);

    TEST_EQ_INT(code, 10 - DIST_ETIMEDOUT);
    TEST_CHECK(took >= 1000 && took < 8000);
    printf("     rank 0 exited %d after %lld ms\n", code, (long long)took);
    kill(p1, SIGKILL);
    TEST_EQ_INT(tu_wait(p1, 10000, NULL), 128 + SIGKILL);
}

/* World 3: rank 2 never calls init, rank 1 is killed while in it; rank 0 (30 s timeout) sees the
 * death, not the silence. */
static void test_init_peer_killed(void)
{
    struct job j = {.port = tu_free_port(), .world = 3, .timeout_ms = 30000, .absent = 2};
    int pfd[2];
    char b;

    if (!TEST_CHECK(pipe(pfd) == 0))
        return;
    j.ready_fd = pfd[1];
    pid_t p0 = spawn(init_main, 0, &j), p1 = spawn(init_main, 1, &j), p2 = spawn(init_main, 2, &j);
    close(pfd[1]);
    TEST_EQ_INT(read(pfd[0], &b, 1), 1);
    close(pfd[0]);
    tu_sleep_ms(1500); /* rank 1 is attached and waits for rank 2 */
    int64_t t0 = dist_now_ms();
    kill(p1, SIGKILL);
    int code = tu_wait(p0, 40000, NULL);
    int64_t took = dist_now_ms() - t0;
    TEST_EQ_INT(code, 10 - DIST_EPEER);
    TEST_CHECK(took < 10000);
    printf("     rank 0 exited %d %lld ms after the kill\n", code, (long long)took);
    TEST_EQ_INT(tu_wait(p1, 10000, NULL), 128 + SIGKILL);
    kill(p2, SIGKILL);
    TEST_EQ_INT(tu_wait(p2, 10000, NULL), 128 + SIGKILL);
}

/* The unique ids were made by this test's rank 0 processes: none of their objects is left. */
static void test_no_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char pfx[64];
    int left = 0;

    if (!d)
        return;
    TEST_CHECK(nspawned >= 8);
    while ((e = readdir(d)))
        for (int i = 0; i < nspawned; i++) {
            snprintf(pfx, sizeof(pfx), "gantry-nccl-%ld-", (long)spawned[i]);
            if (strncmp(e->d_name, pfx, strlen(pfx)) == 0) {
                printf("     left over: /dev/shm/%s\n", e->d_name);
                left++;
            }
        }
    closedir(d);
    TEST_EQ_INT(left, 0);
}

int main(void)
{
    TEST_RUN(test_world1);
    TEST_RUN(test_world2);
    TEST_RUN(test_world3);
    TEST_RUN(test_kill9);
    TEST_RUN(test_hung_peer);
    TEST_RUN(test_kill9_async);
    TEST_RUN(test_hung_peer_async);
    TEST_RUN(test_init_peer_absent);
    TEST_RUN(test_init_peer_killed);
    TEST_RUN(test_no_leftovers);
    return test_summary();
}
