// nccl_test: the emulated NCCL (kernels/emu/nccl.cc) with 1 to 4 rank processes: all-reduce
// sum/avg bit-identical to the rank-order reduction (uneven counts, zero, 4M floats in pieces,
// in and out of place, tiny slots so a collective takes a thousand pieces), integer and bf16
// reductions, broadcast from every root, all-gather, many collectives queued back to back on one
// stream; the stream busy while a slow peer is late; a peer killed with SIGKILL while every rank
// all-reduces (the others see an async error within a second, abort, exit cleanly); a hung
// (SIGSTOPped) peer (a timeout, then the abort reaches the peer once it runs again); ranks that
// call different collectives; init failures (two ranks on one device of one host refused, of
// two hosts accepted); non-blocking communicators (config.blocking = 0:
// ncclInProgress from init, collectives and finalize until ncclCommGetAsyncError says otherwise,
// a call before that refused, an init that waits for a missing rank aborted at once); and
// nothing left in /dev/shm.
#include <nccl.h>

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "common/test.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

struct job {
    ncclUniqueId id;
    int world;
    int pipe_w; // ranks write one byte here when they are ready to be hit
    int arg;
};

typedef int (*rank_fn)(int rank, const job *j);

static pid_t spawn(rank_fn fn, int rank, const job *j)
{
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p == 0) {
        test_failed_ = 0; // the child's own checks decide its exit status
        setenv("GANTRY_EMU_DEVICES", "4", 1);
        int rc = cudaSetDevice(rank % 4) == cudaSuccess ? fn(rank, j) : 99;
        exit(rc ? rc : test_failed_ ? 1 : 0); // exit: LeakSanitizer checks the child too
    }
    return p;
}

// Exit code, 128 + signal, or -1 after timeout_ms (the child is then killed).
static int wait_pid(pid_t pid, int timeout_ms)
{
    int64_t t0 = now_ms();
    int st;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (now_ms() - t0 > timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static job new_job(int world)
{
    job j;
    memset(&j, 0, sizeof(j));
    j.world = world;
    j.pipe_w = -1;
    TEST_EQ_INT(ncclGetUniqueId(&j.id), ncclSuccess);
    return j;
}

static void run_ranks(const job &j, rank_fn fn)
{
    std::vector<pid_t> p;
    for (int r = 0; r < j.world; r++)
        p.push_back(spawn(fn, r, &j));
    for (int r = 0; r < j.world; r++)
        TEST_EQ_INT(wait_pid(p[r], 120000), 0);
}

// Waits for the stream as worker/coll_nccl.cu does: ncclSuccess when done, the async error, or
// ncclInProgress after timeout_ms.
static ncclResult_t wait_stream(ncclComm_t c, cudaStream_t s, int timeout_ms)
{
    int64_t t0 = now_ms();
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return ncclSuccess;
        if (e != cudaErrorNotReady)
            return ncclUnhandledCudaError;
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(c, &a) != ncclSuccess)
            return ncclInternalError;
        if (a != ncclSuccess)
            return a;
        if (now_ms() - t0 > timeout_ms)
            return ncclInProgress;
        sleep_ms(1);
    }
}

static ncclComm_t join(int rank, const job *j)
{
    ncclComm_t c = NULL;
    TEST_EQ_INT(ncclCommInitRank(&c, j->world, j->id, rank), ncclSuccess);
    return c;
}

// ---- values ----------------------------------------------------------------------------------
static float inexact(int r, size_t i)
{
    return 1.0f / (float)(i + 1) * (float)(r + 1) + 0.1f * (float)r;
}

// The rank-order reduction: ((x0 + x1) + x2) + ...; avg as NCCL: each input times 1/W first.
static float want(int world, size_t i, bool avg)
{
    float s = (float)(1.0 / world), acc = avg ? inexact(0, i) * s : inexact(0, i);
    for (int r = 1; r < world; r++)
        acc += avg ? inexact(r, i) * s : inexact(r, i);
    return acc;
}

static float *dev_floats(size_t n)
{
    float *d = NULL;
    TEST_EQ_INT(cudaMalloc(&d, (n ? n : 1) * sizeof(float)), cudaSuccess);
    return d;
}

// ---- the collectives -------------------------------------------------------------------------
static int allreduce_main(int rank, const job *j)
{
    static const size_t sizes[] = {0, 1, 3, 1000, 262145, 1000003, (4u << 20) + 7};
    size_t nsizes = j->arg ? 6 : 7; // arg: tiny slots, skip the 4M case
    ncclComm_t c = join(rank, j);
    cudaStream_t s;
    cudaStreamCreate(&s);
    int W = j->world, count = 0;
    TEST_CHECK(ncclCommCount(c, &count) == ncclSuccess && count == W);
    for (size_t k = 0; k < nsizes; k++) {
        size_t n = sizes[k];
        bool avg = k % 2, inplace = k % 3 == 0;
        std::vector<float> h(n + 1);
        for (size_t i = 0; i < n; i++)
            h[i] = inexact(rank, i);
        float *in = dev_floats(n), *out = inplace ? in : dev_floats(n);
        cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
        TEST_EQ_INT(ncclAllReduce(in, out, n, ncclFloat, avg ? ncclAvg : ncclSum, c, s),
                    ncclSuccess);
        TEST_EQ_INT(wait_stream(c, s, 60000), ncclSuccess);
        cudaMemcpy(h.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float w = want(W, i, avg);
            if (memcmp(&w, &h[i], sizeof(float)) != 0 && bad++ < 3)
                fprintf(stderr, "rank %d n %zu: [%zu] = %a, want %a\n", rank, n, i, (double)h[i],
                        (double)w);
        }
        TEST_EQ_INT(bad, 0);
        if (!inplace) { // the input is untouched
            cudaMemcpy(h.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < n; i++)
                bad += h[i] != inexact(rank, i);
            TEST_EQ_INT(bad, 0);
            cudaFree(out);
        }
        cudaFree(in);
    }
    // Integers (max, sum, avg) and bf16 (sum of small integers: exact).
    {
        int32_t hi[5], *di;
        uint16_t hb[5], *db;
        cudaMalloc(&di, sizeof(hi));
        cudaMalloc(&db, sizeof(hb));
        for (int i = 0; i < 5; i++) {
            hi[i] = (rank + 1) * (i - 2) * 1000;
            float f = (float)((rank + 1) * i);
            uint32_t u;
            memcpy(&u, &f, 4);
            hb[i] = (uint16_t)(u >> 16);
        }
        cudaMemcpy(di, hi, sizeof(hi), cudaMemcpyHostToDevice);
        cudaMemcpy(db, hb, sizeof(hb), cudaMemcpyHostToDevice);
        TEST_EQ_INT(ncclAllReduce(di, di, 5, ncclInt32, ncclMax, c, s), ncclSuccess);
        TEST_EQ_INT(ncclAllReduce(db, db, 5, ncclBfloat16, ncclSum, c, s), ncclSuccess);
        TEST_EQ_INT(wait_stream(c, s, 60000), ncclSuccess);
        cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, db, sizeof(hb), cudaMemcpyDeviceToHost);
        for (int i = 0; i < 5; i++) {
            TEST_EQ_INT(hi[i], (i - 2) * 1000 * (i >= 2 ? W : 1));
            uint32_t u = (uint32_t)hb[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            TEST_EQ_INT((int)f, i * W * (W + 1) / 2);
        }
        for (int i = 0; i < 5; i++)
            hi[i] = rank * 7 + i;
        cudaMemcpy(di, hi, sizeof(hi), cudaMemcpyHostToDevice);
        TEST_EQ_INT(ncclAllReduce(di, di, 5, ncclInt32, ncclAvg, c, s), ncclSuccess);
        TEST_EQ_INT(wait_stream(c, s, 60000), ncclSuccess);
        cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost);
        for (int i = 0; i < 5; i++)
            TEST_EQ_INT(hi[i], (7 * W * (W - 1) / 2 + i * W) / W);
        cudaFree(di);
        cudaFree(db);
    }
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaStreamDestroy(s);
    return 0;
}

static int bcast_gather_main(int rank, const job *j)
{
    ncclComm_t c = join(rank, j);
    cudaStream_t s;
    cudaStreamCreate(&s);
    int W = j->world;
    size_t bn = (3u << 20) + 11, gn = 1001;
    std::vector<unsigned char> h(bn), g(gn * (size_t)W);
    unsigned char *b1 = NULL, *b2 = NULL, *dg = NULL;
    cudaMalloc(&b1, bn);
    cudaMalloc(&b2, bn);
    cudaMalloc(&dg, gn * (size_t)W);
    for (int root = 0; root < W; root++) {
        for (size_t i = 0; i < bn; i++)
            h[i] = rank == root ? (unsigned char)(i * 31 + 7 + root) : 0;
        cudaMemcpy(b1, h.data(), bn, cudaMemcpyHostToDevice);
        cudaMemset(b2, 0, bn);
        // Out of place, then in place (ncclBcast): only the root's sendbuff is read.
        TEST_EQ_INT(ncclBroadcast(rank == root ? b1 : NULL, b2, bn, ncclChar, root, c, s),
                    ncclSuccess);
        TEST_EQ_INT(ncclBcast(b1, bn, ncclUint8, root, c, s), ncclSuccess);
        TEST_EQ_INT(wait_stream(c, s, 60000), ncclSuccess);
        size_t bad = 0;
        for (unsigned char *d : {b1, b2}) {
            cudaMemcpy(h.data(), d, bn, cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < bn; i++)
                bad += h[i] != (unsigned char)(i * 31 + 7 + root);
        }
        TEST_EQ_INT(bad, 0);
    }
    // All-gather, out of place then in place (sendbuff = recvbuff + rank * count).
    for (int inplace = 0; inplace < 2; inplace++) {
        unsigned char mine[1001];
        for (size_t i = 0; i < gn; i++)
            mine[i] = (unsigned char)(rank * 13 + i + inplace);
        cudaMemset(dg, 0, gn * (size_t)W);
        unsigned char *send = inplace ? dg + (size_t)rank * gn : b1;
        cudaMemcpy(send, mine, gn, cudaMemcpyHostToDevice);
        TEST_EQ_INT(ncclAllGather(send, dg, gn, ncclInt8, c, s), ncclSuccess);
        TEST_EQ_INT(wait_stream(c, s, 60000), ncclSuccess);
        cudaMemcpy(g.data(), dg, gn * (size_t)W, cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (int r = 0; r < W; r++)
            for (size_t i = 0; i < gn; i++)
                bad += g[(size_t)r * gn + i] != (unsigned char)(r * 13 + i + inplace);
        TEST_EQ_INT(bad, 0);
    }
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaFree(b1);
    cudaFree(b2);
    cudaFree(dg);
    cudaStreamDestroy(s);
    return 0;
}

// 64 all-reduces and broadcasts queued on one stream before a single synchronize; a kernel-free
// cudaMemcpyAsync on the stream waits for them too.
static int queued_main(int rank, const job *j)
{
    const int K = 64, n = 1000;
    ncclComm_t c = join(rank, j);
    cudaStream_t s;
    cudaStreamCreate(&s);
    int W = j->world;
    float *d = dev_floats((size_t)K * n);
    std::vector<float> h((size_t)K * n);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < n; i++)
            h[(size_t)k * n + i] = (float)((rank + 1) * (k + i % 7));
    cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
    for (int k = 0; k < K; k++) {
        float *p = d + (size_t)k * n;
        ncclResult_t r = k % 4 == 3 ? ncclBroadcast(p, p, n, ncclFloat, k % W, c, s)
                                    : ncclAllReduce(p, p, n, ncclFloat, ncclSum, c, s);
        TEST_EQ_INT(r, ncclSuccess);
    }
    std::fill(h.begin(), h.end(), -1.0f);
    cudaMemcpyAsync(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost, s);
    TEST_EQ_INT(cudaStreamQuery(s), cudaSuccess);
    size_t bad = 0;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < n; i++) {
            int m = k % 4 == 3 ? k % W + 1 : W * (W + 1) / 2;
            bad += h[(size_t)k * n + i] != (float)(m * (k + i % 7));
        }
    TEST_EQ_INT(bad, 0);
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaFree(d);
    cudaStreamDestroy(s);
    return 0;
}

static void test_allreduce(void)
{
    for (int w = 1; w <= 4; w++) {
        job j = new_job(w);
        run_ranks(j, allreduce_main);
    }
}

// 4 KiB slots: 1000003 floats take ~1000 pieces, each slot reused ~500 times.
static void test_allreduce_small_slots(void)
{
    setenv("GANTRY_EMU_NCCL_SLOT", "4096", 1);
    job j = new_job(3);
    unsetenv("GANTRY_EMU_NCCL_SLOT");
    j.arg = 1;
    run_ranks(j, allreduce_main);
}

static void test_broadcast_allgather(void)
{
    for (int w = 1; w <= 4; w++) {
        job j = new_job(w);
        run_ranks(j, bcast_gather_main);
    }
}

static void test_queued(void)
{
    for (int w = 2; w <= 3; w++) {
        job j = new_job(w);
        run_ranks(j, queued_main);
    }
}

// ---- one process -----------------------------------------------------------------------------
static void test_single_process(void)
{
    int v = 0;
    TEST_EQ_INT(ncclGetVersion(&v), ncclSuccess);
    TEST_EQ_INT(v, NCCL_VERSION_CODE);
    TEST_EQ_STR(ncclGetErrorString(ncclRemoteError),
                "remote process exited or there was a network error");

    // A zeroed id is refused; nranks 1 needs no peer.
    ncclUniqueId zero;
    memset(&zero, 0, sizeof(zero));
    ncclComm_t c = NULL;
    TEST_EQ_INT(ncclCommInitRank(&c, 1, zero, 0), ncclInvalidArgument);
    TEST_CHECK(strstr(ncclGetLastError(NULL), "ncclGetUniqueId") != NULL);
    ncclUniqueId id;
    TEST_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
    TEST_EQ_INT(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
    float h[4] = {1, 2, 3, 4}, *d = dev_floats(8);
    cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    TEST_EQ_INT(ncclAllReduce(d, d + 4, 4, ncclFloat, ncclAvg, c, NULL), ncclSuccess);
    cudaStreamSynchronize(NULL);
    cudaMemcpy(h, d + 4, sizeof(h), cudaMemcpyDeviceToHost);
    TEST_CHECK(h[0] == 1 && h[1] == 2 && h[2] == 3 && h[3] == 4);
    // Host memory, a bad root or type: refused at the call, nothing queued.
    TEST_EQ_INT(ncclAllReduce(d, d, 5, ncclFloat, ncclSum, c, NULL), ncclSuccess);
    TEST_EQ_INT(cudaStreamSynchronize(NULL), cudaSuccess);
    TEST_EQ_INT(ncclAllReduce(h, h, 4, ncclFloat, ncclSum, c, NULL), ncclInvalidArgument);
    TEST_CHECK(strstr(ncclGetLastError(c), "device allocation") != NULL);
    TEST_EQ_INT(ncclAllReduce(d, d, 9, ncclFloat, ncclSum, c, NULL), ncclInvalidArgument);
    TEST_EQ_INT(ncclBroadcast(d, d, 4, ncclFloat, 1, c, NULL), ncclInvalidArgument);
    TEST_EQ_INT(ncclAllReduce(d, d, 4, ncclFloat16, ncclSum, c, NULL), ncclInvalidArgument);
    TEST_EQ_INT(cudaStreamQuery(NULL), cudaSuccess);
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);

    // ncclCommInitAll: one device by default, two when the emulator has two.
    ncclComm_t cs[2] = {NULL, NULL};
    int dev0 = 0;
    TEST_EQ_INT(ncclCommInitAll(cs, 1, &dev0), ncclSuccess);
    TEST_EQ_INT(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, cs[0], NULL), ncclSuccess);
    TEST_EQ_INT(ncclCommDestroy(cs[0]), ncclSuccess);
    TEST_EQ_INT(ncclCommInitAll(cs, 2, NULL), ncclInvalidArgument);
    setenv("GANTRY_EMU_DEVICES", "2", 1);
    int dup[2] = {1, 1};
    TEST_EQ_INT(ncclCommInitAll(cs, 2, dup), ncclInvalidUsage); // as NCCL: one rank per device
    TEST_CHECK(cs[0] == NULL && cs[1] == NULL);
    TEST_EQ_INT(ncclCommInitAll(cs, 2, NULL), ncclSuccess);
    float *e = dev_floats(4);
    float h2[4] = {10, 20, 30, 40};
    cudaMemcpy(d, h2, sizeof(h2), cudaMemcpyHostToDevice);
    cudaMemcpy(e, h2, sizeof(h2), cudaMemcpyHostToDevice);
    cudaStream_t s0, s1;
    cudaStreamCreate(&s0);
    cudaStreamCreate(&s1);
    TEST_EQ_INT(ncclAllReduce(d, d, 4, ncclFloat, ncclSum, cs[0], s0), ncclSuccess);
    TEST_EQ_INT(ncclAllReduce(e, e, 4, ncclFloat, ncclSum, cs[1], s1), ncclSuccess);
    cudaStreamSynchronize(s0);
    cudaStreamSynchronize(s1);
    cudaMemcpy(h, e, sizeof(h), cudaMemcpyDeviceToHost);
    TEST_CHECK(h[0] == 20 && h[3] == 80);
    int dev = -1, rank = -1;
    TEST_CHECK(ncclCommCuDevice(cs[1], &dev) == ncclSuccess && dev == 1);
    TEST_CHECK(ncclCommUserRank(cs[1], &rank) == ncclSuccess && rank == 1);
    TEST_EQ_INT(ncclCommDestroy(cs[0]), ncclSuccess);
    TEST_EQ_INT(ncclCommDestroy(cs[1]), ncclSuccess);
    unsetenv("GANTRY_EMU_DEVICES");
    cudaStreamDestroy(s0);
    cudaStreamDestroy(s1);
    cudaFree(d);
    cudaFree(e);
}

// ---- peers that are late, dead, hung or wrong ------------------------------------------------
// Rank 1 joins the all-reduce 400 ms late: rank 0's stream is busy until then.
static int slow_main(int rank, const job *j)
{
    ncclComm_t c = join(rank, j);
    cudaStream_t s;
    cudaStreamCreate(&s);
    float *d = dev_floats(1000);
    std::vector<float> h(1000, (float)(rank + 1));
    cudaMemcpy(d, h.data(), 4000, cudaMemcpyHostToDevice);
    if (rank == 1)
        sleep_ms(400);
    int64_t t0 = now_ms();
    TEST_EQ_INT(ncclAllReduce(d, d, 1000, ncclFloat, ncclSum, c, s), ncclSuccess);
    if (rank == 0) {
        TEST_EQ_INT(cudaStreamQuery(s), cudaErrorNotReady);
        sleep_ms(100);
        TEST_EQ_INT(cudaStreamQuery(s), cudaErrorNotReady);
        ncclResult_t a = ncclInternalError;
        TEST_CHECK(ncclCommGetAsyncError(c, &a) == ncclSuccess && a == ncclSuccess);
    }
    TEST_EQ_INT(cudaStreamSynchronize(s), cudaSuccess);
    if (rank == 0)
        TEST_CHECK(now_ms() - t0 >= 250);
    TEST_EQ_INT(cudaStreamQuery(s), cudaSuccess);
    cudaMemcpy(h.data(), d, 4000, cudaMemcpyDeviceToHost);
    TEST_CHECK(h[0] == 3.0f && h[999] == 3.0f);
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaFree(d);
    cudaStreamDestroy(s);
    return 0;
}

static void test_slow_peer(void)
{
    job j = new_job(2);
    run_ranks(j, slow_main);
}

// All-reduces until one fails (or rank 0 times out after j->arg ms, the others after 30 s). Exit
// codes: 10 the async error was a peer's (remote or system error) and the stream stayed busy until
// ncclCommAbort released it; 11 a timeout with the same; 12 anything else.
static int loop_main(int rank, const job *j)
{
    ncclComm_t c = join(rank, j);
    cudaStream_t s;
    cudaStreamCreate(&s);
    size_t n = 1 << 18;
    float *d = dev_floats(n);
    cudaMemset(d, 0, n * sizeof(float));
    ncclResult_t r = ncclSuccess;
    for (int it = 0; r == ncclSuccess; it++) {
        if (ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, s) != ncclSuccess)
            break;
        r = wait_stream(c, s, rank == 0 ? j->arg : 30000);
        if (it == 10 && r == ncclSuccess && write(j->pipe_w, "r", 1) != 1)
            break;
    }
    int64_t found = now_ms();
    int code = r == ncclRemoteError || r == ncclSystemError ? 10 : r == ncclInProgress ? 11 : 12;
    if (r != ncclInProgress)
        fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(c));
    if (cudaStreamQuery(s) != cudaErrorNotReady) // a GPU's stream stays busy too
        code = 13;
    TEST_EQ_INT(ncclCommAbort(c), ncclSuccess);
    if (cudaStreamQuery(s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        code = 14;
    if (now_ms() - found > 10000) // the abort waited for something (a peer's 30 s); slack for load
        code = 15;
    cudaFree(d);
    cudaStreamDestroy(s);
    return code;
}

// Starts `world` looping ranks, waits until all are past their 10th all-reduce, hits `victim`
// with sig; returns the pids (victim not reaped).
static std::vector<pid_t> start_loop(job *j, int victim, int sig)
{
    int pfd[2];
    std::vector<pid_t> p;
    if (!TEST_CHECK(pipe(pfd) == 0))
        return p;
    j->pipe_w = pfd[1];
    for (int r = 0; r < j->world; r++)
        p.push_back(spawn(loop_main, r, j));
    close(pfd[1]);
    char buf[8];
    int got = 0;
    ssize_t k;
    while (got < j->world && (k = read(pfd[0], buf, sizeof(buf))) > 0)
        got += (int)k;
    close(pfd[0]);
    TEST_EQ_INT(got, j->world);
    kill(p[victim], sig);
    return p;
}

static void test_kill9(void)
{
    job j = new_job(4);
    j.arg = 30000; // the death must be noticed, not the silence
    std::vector<pid_t> p = start_loop(&j, 2, SIGKILL);
    int64_t t0 = now_ms();
    for (int r = 0; r < (int)p.size(); r++) {
        if (r == 2)
            continue;
        TEST_EQ_INT(wait_pid(p[r], 20000), 10);
        int64_t took = now_ms() - t0;
        printf("     rank %d saw the death and exited after %lld ms\n", r, (long long)took);
        TEST_CHECK(took < 5000);
    }
    if (!p.empty())
        TEST_EQ_INT(wait_pid(p[2], 5000), 128 + SIGKILL);
}

// Rank 1 stops: rank 0 times out (no async error: a hung peer is silent), aborts and exits. Once
// rank 1 runs again it finds rank 0 aborted: a remote error, not a hang.
static void test_hung_peer(void)
{
    job j = new_job(2);
    j.arg = 1000;
    std::vector<pid_t> p = start_loop(&j, 1, SIGSTOP);
    if (p.empty())
        return;
    int64_t t0 = now_ms();
    TEST_EQ_INT(wait_pid(p[0], 20000), 11);
    TEST_CHECK(now_ms() - t0 >= 900);
    kill(p[1], SIGCONT);
    TEST_EQ_INT(wait_pid(p[1], 20000), 10);
}

// Rank 1 all-reduces 200 floats where rank 0 all-reduces 100: both fail instead of hanging.
static int mismatch_main(int rank, const job *j)
{
    ncclComm_t c = join(rank, j);
    float *d = dev_floats(200);
    cudaMemset(d, 0, 800);
    TEST_EQ_INT(ncclAllReduce(d, d, rank ? 200 : 100, ncclFloat, ncclSum, c, NULL), ncclSuccess);
    ncclResult_t r = wait_stream(c, NULL, 10000);
    TEST_CHECK(r == ncclInvalidUsage || r == ncclRemoteError);
    ncclCommAbort(c);
    cudaFree(d);
    return 0;
}

static void test_mismatch(void)
{
    job j = new_job(2);
    run_ranks(j, mismatch_main);
}

static int lonely_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    setenv("GANTRY_EMU_NCCL_INIT_TIMEOUT_MS", "300", 1);
    int64_t t0 = now_ms();
    TEST_EQ_INT(ncclCommInitRank(&c, j->world, j->id, rank), ncclSystemError);
    TEST_CHECK(now_ms() - t0 >= 250);
    TEST_CHECK(c == NULL);
    return 0;
}

static int same_device_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    cudaSetDevice(0);
    TEST_EQ_INT(ncclCommInitRank(&c, j->world, j->id, rank), ncclInvalidUsage);
    return 0;
}

// Device 0 of two hosts (pods sharing /dev/shm) is two GPUs: the communicator works.
static int two_hosts_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    size_t n = 1000;
    std::vector<float> h(n);
    char host[32];

    snprintf(host, sizeof(host), "host-%d", rank);
    setenv("GANTRY_EMU_HOST", host, 1);
    cudaSetDevice(0);
    float *d = dev_floats(n);
    if (!TEST_CHECK(ncclCommInitRank(&c, j->world, j->id, rank) == ncclSuccess))
        return 1;
    for (size_t i = 0; i < n; i++)
        h[i] = inexact(rank, i);
    cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    TEST_EQ_INT(ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, NULL), ncclSuccess);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
        if (h[i] != want(j->world, i, false)) {
            TEST_CHECK(!"all-reduce result across hosts");
            break;
        }
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaFree(d);
    return 0;
}

static int bad_world_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    setenv("GANTRY_EMU_NCCL_INIT_TIMEOUT_MS", "2000", 1);
    if (rank == 1) { // joins second, with another world size: refused
        sleep_ms(500);
        TEST_EQ_INT(ncclCommInitRank(&c, 3, j->id, rank), ncclInvalidUsage);
    } else { // the others see the world short of a rank
        TEST_EQ_INT(ncclCommInitRank(&c, 2, j->id, rank), ncclSystemError);
    }
    return 0;
}

static void test_init_failures(void)
{
    job j = new_job(2); // rank 1 never comes
    TEST_EQ_INT(wait_pid(spawn(lonely_main, 0, &j), 20000), 0);
    j = new_job(2);
    run_ranks(j, same_device_main);
    j = new_job(2);
    run_ranks(j, two_hosts_main);
    j = new_job(2);
    pid_t p0 = spawn(bad_world_main, 0, &j), p1 = spawn(bad_world_main, 1, &j);
    TEST_EQ_INT(wait_pid(p0, 20000), 0);
    TEST_EQ_INT(wait_pid(p1, 20000), 0);
}

// Polls the async state as worker/coll_nccl.cu does after ncclInProgress; counts the polls that
// still said ncclInProgress.
static ncclResult_t poll_ready(ncclComm_t c, int timeout_ms, int *in_progress)
{
    int64_t t0 = now_ms();
    ncclResult_t a = ncclInProgress;
    *in_progress = 0;
    while (now_ms() - t0 <= timeout_ms) {
        if (ncclCommGetAsyncError(c, &a) != ncclSuccess)
            return ncclInternalError;
        if (a != ncclInProgress)
            return a;
        (*in_progress)++;
        sleep_ms(1);
    }
    return ncclInProgress;
}

static int nonblocking_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, bad = NCCL_CONFIG_INITIALIZER;
    int busy = 0;
    size_t n = 1000;
    float *d = dev_floats(n);
    std::vector<float> h(n);

    bad.magic = 0;
    TEST_EQ_INT(ncclCommInitRankConfig(&c, j->world, j->id, rank, &bad), ncclInvalidArgument);
    bad = cfg;
    bad.blocking = 5;
    TEST_EQ_INT(ncclCommInitRankConfig(&c, j->world, j->id, rank, &bad), ncclInvalidArgument);
    cfg.blocking = 0;
    if (rank == 1)
        sleep_ms(300); // rank 0's init stays in progress meanwhile
    TEST_EQ_INT(ncclCommInitRankConfig(&c, j->world, j->id, rank, &cfg), ncclInProgress);
    if (!TEST_CHECK(c != NULL))
        return 1;
    TEST_EQ_INT(poll_ready(c, 20000, &busy), ncclSuccess);
    if (rank == 0)
        TEST_CHECK(busy > 0);
    for (size_t i = 0; i < n; i++)
        h[i] = inexact(rank, i);
    cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    TEST_EQ_INT(ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, NULL), ncclInProgress);
    // Before ncclCommGetAsyncError left ncclInProgress: refused (and not enqueued).
    TEST_EQ_INT(ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, NULL), ncclInvalidUsage);
    TEST_EQ_INT(poll_ready(c, 20000, &busy), ncclSuccess);
    TEST_CHECK(busy >= 1);
    TEST_EQ_INT(wait_stream(c, NULL, 20000), ncclSuccess);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
        if (h[i] != want(j->world, i, false)) {
            TEST_CHECK(!"all-reduce result");
            break;
        }
    TEST_EQ_INT(ncclCommFinalize(c), ncclInProgress);
    TEST_EQ_INT(poll_ready(c, 20000, &busy), ncclSuccess);
    TEST_EQ_INT(ncclCommDestroy(c), ncclSuccess);
    cudaFree(d);
    return 0;
}

// Rank 1 never comes: the init stays in progress until ncclCommAbort, which returns at once.
static int nonblocking_lonely_main(int rank, const job *j)
{
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    int busy = 0;

    cfg.blocking = 0;
    TEST_EQ_INT(ncclCommInitRankConfig(&c, j->world, j->id, rank, &cfg), ncclInProgress);
    TEST_EQ_INT(poll_ready(c, 300, &busy), ncclInProgress);
    TEST_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, c, NULL), ncclInvalidUsage);
    int64_t t0 = now_ms();
    TEST_EQ_INT(ncclCommAbort(c), ncclSuccess);
    // "at once" against the init's 300 s: 10 s of slack for a loaded 2-core CI box
    TEST_CHECK(now_ms() - t0 < 10000);
    return 0;
}

static void test_nonblocking(void)
{
    job j = new_job(2);
    run_ranks(j, nonblocking_main);
    j = new_job(2);
    TEST_EQ_INT(wait_pid(spawn(nonblocking_lonely_main, 0, &j), 20000), 0);
}

// Every id of this test was made here: no object named after this process is left.
static void test_no_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char pfx[64];
    snprintf(pfx, sizeof(pfx), "gantry-nccl-%d-", (int)getpid());
    int left = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, pfx, strlen(pfx)) == 0) {
            printf("     left over: /dev/shm/%s\n", e->d_name);
            left++;
        }
    closedir(d);
    TEST_EQ_INT(left, 0);
}

int main(void)
{
    unsetenv("GANTRY_EMU_DEVICES");
    TEST_RUN(test_single_process);
    TEST_RUN(test_allreduce);
    TEST_RUN(test_allreduce_small_slots);
    TEST_RUN(test_broadcast_allgather);
    TEST_RUN(test_queued);
    TEST_RUN(test_slow_peer);
    TEST_RUN(test_kill9);
    TEST_RUN(test_hung_peer);
    TEST_RUN(test_mismatch);
    TEST_RUN(test_init_failures);
    TEST_RUN(test_nonblocking);
    TEST_RUN(test_no_leftovers);
    return test_summary();
}
