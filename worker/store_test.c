/*
 * store_test.c - the rendezvous store and dist_rendezvous() with real processes on loopback:
 * key-value operations, a 4-rank rendezvous (blob and resume-step agreement), wrong token, world
 * size / config hash mismatch, duplicate rank, rank 0 starting late, a rank that never arrives.
 *
 * GANTRY_TEST_LATE_MS sets how late rank 0 starts in test_late_rank0 (default 3000 ms to keep CI
 * fast; the scenario is 30000).
 */
#include "worker/store.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/test.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"
#include "worker/net.h"

struct job {
    int port, world;
    const char *token, *hash;
    int join_ms, connect_ms;
    int claim_world; /* 0: world */
    int claim_nproc; /* 0: NPROC_PER_NODE = world, as tu_env sets it */
};

/* A rank that joins, agrees on a blob and a resume step, and leaves.
 * Exit: 0 ok, 10+ a wrong value, else dist_exit_code(). */
static int rank_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_env e;
    struct dist_rdzv *rz = NULL;
    struct dist_rdzv_opts o = {.connect_timeout_ms = j->connect_ms, .join_timeout_ms = j->join_ms,
                               .op_timeout_ms = 5000};
    unsigned char blob[128];
    int64_t step = 0;
    int rc, code = 0;

    tu_env(&e, j->port, rank, j->claim_world ? j->claim_world : j->world, j->token);
    if (j->claim_nproc)
        e.nproc_per_node = j->claim_nproc;
    if ((rc = dist_rendezvous(&e, j->hash, &o, &rz)))
        return dist_exit_code(rc);
    for (int i = 0; i < 128; i++)
        blob[i] = rank == 0 ? (unsigned char)(i * 7 + 1) : 0;
    if ((rc = dist_agree_blob(rz, "nccl-id", 0, blob, sizeof(blob))))
        goto out;
    for (int i = 0; i < 128; i++)
        if (blob[i] != (unsigned char)(i * 7 + 1))
            code = 10;
    /* Rank r's newest checkpoint is (world - r) * 100: the minimum is 100, rank 0's is world*100. */
    if ((rc = dist_agree_resume(rz, (j->world - rank) * 100, DIST_RESUME_MIN, &step)))
        goto out;
    if (step != 100)
        code = 11;
    if ((rc = dist_agree_resume(rz, (j->world - rank) * 100, DIST_RESUME_RANK0, &step)))
        goto out;
    if (step != j->world * 100)
        code = 12;
    /* a later call gets rank 0's new step, not what an earlier call left in the store */
    if ((rc = dist_agree_resume(rz, (j->world - rank) * 100 + 7, DIST_RESUME_RANK0, &step)))
        goto out;
    if (step != j->world * 100 + 7)
        code = 13;
out:
    dist_rdzv_free(rz);
    return rc ? dist_exit_code(rc) : code;
}

static struct job job_defaults(int world)
{
    struct job j = {.port = tu_free_port(), .world = world, .token = "s3cret-token",
                    .hash = "cfg-abc", .join_ms = 20000, .connect_ms = 20000};
    return j;
}

static void test_kv_ops(void)
{
    struct store_server *srv = NULL;
    struct store *a = NULL, *b = NULL;
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 2,
                                   .config_hash = "h"};
    void *v = NULL;
    size_t vl = 0;
    int64_t n = 0;

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    if (!srv)
        return;
    struct store_opts co = {.host = "127.0.0.1", .port = store_server_port(srv), .token = "tok",
                            .rank = 0, .world_size = 2, .config_hash = "h",
                            .connect_timeout_ms = 5000, .op_timeout_ms = 5000};
    TEST_EQ_INT(store_connect(&co, &a), 0);
    co.rank = 1;
    TEST_EQ_INT(store_connect(&co, &b), 0);
    if (!a || !b)
        goto out;
    TEST_EQ_STR(store_local_addr(a), "127.0.0.1");
    TEST_EQ_INT(store_get(a, "missing", &v, &vl), DIST_ENOENT);
    TEST_EQ_INT(store_set(a, "k", "hello", 5), 0);
    TEST_EQ_INT(store_get(b, "k", &v, &vl), 0);
    TEST_EQ_INT(vl, 5);
    TEST_EQ_STR((char *)v, "hello");
    free(v);
    v = NULL;
    /* A wait that times out is cancelled cleanly: the next request gets its own reply. */
    int64_t t0 = dist_now_ms();
    TEST_EQ_INT(store_wait(b, "later", 200, &v, &vl), DIST_ETIMEDOUT);
    TEST_CHECK(dist_now_ms() - t0 >= 190);
    TEST_EQ_INT(store_add(a, "ctr", 5, &n), 0);
    TEST_EQ_INT(n, 5);
    TEST_EQ_INT(store_add(b, "ctr", -2, &n), 0);
    TEST_EQ_INT(n, 3);
    TEST_EQ_INT(store_get(b, "ctr", &v, &vl), 0);
    TEST_EQ_STR((char *)v, "3");
    free(v);
    v = NULL;
    TEST_EQ_INT(store_set(a, "later", "x", 1), 0);
    TEST_EQ_INT(store_wait(b, "later", 200, &v, &vl), 0);
    TEST_EQ_STR((char *)v, "x");
    free(v);
    v = NULL;
    /* A value that arrives as the wait runs out (here: a wait of 0 ms, answered a moment after
     * it gave up) is the answer, not a timeout; the next request still gets its own reply. */
    for (int i = 0; i < 20; i++) {
        TEST_EQ_INT(store_wait(b, "later", 0, &v, &vl), 0);
        TEST_CHECK(v && strcmp(v, "x") == 0);
        free(v);
        v = NULL;
    }
    TEST_EQ_INT(store_get(b, "k", &v, &vl), 0);
    TEST_CHECK(v && strcmp(v, "hello") == 0);
    free(v);
    v = NULL;
    /* A value with NULs and the maximum size round-trips. */
    char *big = calloc(1, STORE_MAX_VALUE);
    big[STORE_MAX_VALUE - 1] = 'z';
    TEST_EQ_INT(store_set(a, "big", big, STORE_MAX_VALUE), 0);
    TEST_EQ_INT(store_get(b, "big", &v, &vl), 0);
    TEST_EQ_INT(vl, STORE_MAX_VALUE);
    TEST_CHECK(v && memcmp(v, big, STORE_MAX_VALUE) == 0);
    TEST_EQ_INT(store_set(a, "big", big, STORE_MAX_VALUE + 1), DIST_EUSAGE);
    free(big);
    free(v);
    v = NULL;
    /* A counter that would overflow is refused (signed overflow was undefined), and the store
     * keeps serving the others. */
    TEST_EQ_INT(store_set(a, "full", "9223372036854775807", 19), 0);
    TEST_EQ_INT(store_add(b, "full", 1, &n), DIST_EPROTO);
    TEST_EQ_INT(store_get(a, "full", &v, &vl), 0);
    TEST_EQ_STR((char *)v, "9223372036854775807");
    free(v);
out:
    store_free(a);
    store_free(b);
    store_server_free(srv);
}

/* A stranger that skips authentication and announces a huge frame is dropped; the store keeps
 * serving real clients. */
static void test_junk_client(void)
{
    struct store_server *srv = NULL;
    struct store *a = NULL;
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 1};
    unsigned char junk[8] = {0x00, 0x10, 0x00, 0x00, 'S', 0, 0, 0}, b[64];
    int fd = -1;
    void *v = NULL;
    size_t vl;

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    TEST_EQ_INT(net_connect("127.0.0.1", store_server_port(srv), 2000, &fd, NULL, 0), 0);
    TEST_EQ_INT(net_write_all(fd, junk, sizeof(junk), 2000), 0);
    /* The server hangs up on us (perhaps after the challenge), rather than wait for 1 MiB. */
    int rc, got = 0;
    while ((rc = net_read_all(fd, b, 1, 2000)) == 0)
        got++;
    TEST_EQ_INT(rc, DIST_EPEER);
    TEST_CHECK(got <= 4 + 1 + 32);
    close(fd);
    struct store_opts co = {.host = "127.0.0.1", .port = store_server_port(srv), .token = "tok",
                            .world_size = 1, .connect_timeout_ms = 2000, .op_timeout_ms = 2000};
    TEST_EQ_INT(store_connect(&co, &a), 0);
    TEST_EQ_INT(store_set(a, "k", "v", 1), 0);
    TEST_EQ_INT(store_get(a, "k", &v, &vl), 0);
    free(v);
    store_free(a);
    store_server_free(srv);
}

/* Strangers that connect and say nothing (a port scan, a flood) neither keep the ranks out nor
 * stay: with the connection table full the oldest unauthenticated one makes room, and each is
 * hung up on once auth_timeout_ms is up. */
static void test_silent_strangers(void)
{
    struct store_server *srv = NULL;
    struct store *a = NULL, *b = NULL;
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 2,
                                   .auth_timeout_ms = 1000};
    enum { N = 2 * 2 + 64 + 8 }; /* more than the table holds for WORLD_SIZE=2 */
    int fds[N], port;
    unsigned char ch[4 + 1 + 32];
    void *v = NULL;
    size_t vl;

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    if (!srv)
        return;
    port = store_server_port(srv);
    for (int i = 0; i < N; i++)
        TEST_EQ_INT(net_connect("127.0.0.1", port, 2000, &fds[i], NULL, 0), 0);
    struct store_opts co = {.host = "127.0.0.1", .port = port, .token = "tok", .rank = 0,
                            .world_size = 2, .connect_timeout_ms = 2000, .op_timeout_ms = 2000};
    int64_t t0 = dist_now_ms();
    TEST_EQ_INT(store_connect(&co, &a), 0);
    co.rank = 1;
    TEST_EQ_INT(store_connect(&co, &b), 0);
    printf("     both ranks joined %lld ms after %d silent connections\n",
           (long long)(dist_now_ms() - t0), N);
    if (a && b) {
        TEST_EQ_INT(store_set(a, "k", "v", 1), 0);
        TEST_EQ_INT(store_get(b, "k", &v, &vl), 0);
        free(v);
    }
    /* the newest stranger was let in (challenged), then hung up on after 1 s */
    TEST_EQ_INT(net_read_all(fds[N - 1], ch, sizeof(ch), 3000), 0);
    TEST_EQ_INT(ch[4], 'C');
    TEST_EQ_INT(net_read_all(fds[N - 1], ch, 1, 5000), DIST_EPEER);
    int64_t took = dist_now_ms() - t0;
    printf("     the newest stranger was hung up on after %lld ms\n", (long long)took);
    TEST_CHECK(took >= 900 && took < 5000);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    store_free(a);
    store_free(b);
    store_server_free(srv);
}

/* A joined rank the store hangs up on (an error reply: here an add that would overflow) is as
 * gone as one that died: the others' waits fail at once, not after their timeout. */
static void test_dropped_rank_is_lost(void)
{
    struct store_server *srv = NULL;
    struct store *st[3] = {NULL, NULL, NULL};
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 3};
    void *v = NULL;
    size_t vl;
    int64_t n;

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    if (!srv)
        return;
    struct store_opts co = {.host = "127.0.0.1", .port = store_server_port(srv), .token = "tok",
                            .world_size = 3, .connect_timeout_ms = 2000, .op_timeout_ms = 2000};
    for (int r = 0; r < 3; r++) {
        co.rank = r;
        TEST_EQ_INT(store_connect(&co, &st[r]), 0);
    }
    if (st[0] && st[2]) {
        TEST_EQ_INT(store_set(st[0], "full", "9223372036854775807", 19), 0);
        TEST_EQ_INT(store_add(st[2], "full", 1, &n), DIST_EPROTO);
        int64_t t0 = dist_now_ms();
        TEST_EQ_INT(store_wait(st[0], "never", 8000, &v, &vl), DIST_EPEER);
        printf("     the wait failed after %lld ms\n", (long long)(dist_now_ms() - t0));
        TEST_CHECK(dist_now_ms() - t0 < 4000);
    }
    for (int r = 0; r < 3; r++)
        store_free(st[r]);
    store_server_free(srv);
}

/* Out of file descriptors (a low `ulimit -n`, many connections): the server must neither spin
 * on the readable listening socket nor stop serving; a rank that connects while it is out gets
 * in once strangers are hung up on (after 3 s). Child: the server under a limit of 16
 * descriptors for 5 s; exits with its CPU time over the first 2 s in 50 ms units. */
static int nofile_main(int rank, void *arg)
{
    int *pfd = arg;
    struct rlimit rl = {.rlim_cur = 16, .rlim_max = 16};
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 1,
                                   .auth_timeout_ms = 3000};
    struct store_server *srv = NULL;
    struct rusage ru;
    int port;

    (void)rank;
    close(pfd[0]);
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || store_server_start(&so, &srv) != 0)
        return 250;
    port = store_server_port(srv);
    if (write(pfd[1], &port, sizeof(port)) != (ssize_t)sizeof(port))
        return 251;
    tu_sleep_ms(2000);
    getrusage(RUSAGE_SELF, &ru);
    long ms = ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 + ru.ru_stime.tv_sec * 1000 +
              ru.ru_stime.tv_usec / 1000;
    tu_sleep_ms(3000);
    store_server_free(srv);
    return ms / 50 > 200 ? 200 : (int)(ms / 50);
}

static void test_out_of_fds(void)
{
    int pfd[2], port = 0, fds[12], code;
    struct store *st = NULL;

    if (!TEST_CHECK(pipe(pfd) == 0))
        return;
    pid_t p = tu_spawn(nofile_main, 0, pfd);
    close(pfd[1]);
    TEST_EQ_INT(read(pfd[0], &port, sizeof(port)), (int)sizeof(port));
    close(pfd[0]);
    for (int i = 0; i < 12; i++) /* more than the 16 descriptors leave room for */
        if (net_connect("127.0.0.1", port, 2000, &fds[i], NULL, 0) != 0)
            fds[i] = -1;
    struct store_opts co = {.host = "127.0.0.1", .port = port, .token = "tok", .rank = 0,
                            .world_size = 1, .connect_timeout_ms = 5000, .op_timeout_ms = 5000};
    TEST_EQ_INT(store_connect(&co, &st), 0); /* in the backlog until strangers are dropped */
    store_free(st);
    for (int i = 0; i < 12; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    code = tu_wait(p, 20000, NULL);
    printf("     the server used %d ms of CPU in 2 s while out of descriptors\n", code * 50);
    TEST_CHECK(code >= 0 && code < 10); /* spinning used ~2000 ms */
}

/* A store that hangs up during the handshake (its table full of strangers dropped this
 * connection, or rank 0 restarting) is tried again while the connect timeout lasts. */
static int connect_main(int rank, void *arg)
{
    struct store_opts co = *(const struct store_opts *)arg;
    struct store *st = NULL;
    int rc;

    co.rank = rank;
    rc = store_connect(&co, &st);
    store_free(st);
    return dist_exit_code(rc);
}

static void test_handshake_retried(void)
{
    int port = tu_free_port(), lfd = -1, fd = -1, bound;
    struct store_server *srv = NULL;
    struct store_opts co = {.host = "127.0.0.1", .port = port, .token = "tok", .world_size = 1,
                            .connect_timeout_ms = 10000, .op_timeout_ms = 3000};

    pid_t p = tu_spawn(connect_main, 0, &co); /* first, or it would hold our listener too */
    TEST_EQ_INT(net_listen("127.0.0.1", port, &lfd, &bound), 0);
    TEST_EQ_INT(net_accept(lfd, 5000, &fd), 0); /* the client's try: hung up on */
    close(fd);
    close(lfd);
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .port = port, .token = "tok",
                                   .world_size = 1};
    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    TEST_EQ_INT(tu_wait(p, 20000, NULL), 0);
    store_server_free(srv);
}

/* A waiter in another process is woken by a set. */
static int late_setter(int rank, void *arg)
{
    struct store_opts *co = arg;
    struct store *st = NULL;
    int rc;

    co->rank = rank;
    if ((rc = store_connect(co, &st)))
        return dist_exit_code(rc);
    tu_sleep_ms(300);
    rc = store_set(st, "woken", "yes", 3);
    store_free(st);
    return dist_exit_code(rc);
}

static void test_wait_wakes(void)
{
    struct store_server *srv = NULL;
    struct store *a = NULL;
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .port = tu_free_port(),
                                   .token = "tok", .world_size = 2};
    void *v = NULL;
    size_t vl;
    struct store_opts co = {.host = "localhost", .port = so.port, .token = "tok", .rank = 0,
                            .world_size = 2, .connect_timeout_ms = 5000, .op_timeout_ms = 5000};
    /* Fork before this process has threads (the server's): the child retries until it is up. */
    pid_t p = tu_spawn(late_setter, 1, &co);

    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    TEST_EQ_INT(store_connect(&co, &a), 0);
    TEST_EQ_INT(store_wait(a, "woken", 10000, &v, &vl), 0);
    TEST_EQ_STR((char *)v, "yes");
    TEST_EQ_INT(tu_wait(p, 10000, NULL), 0);
    free(v);
    store_free(a);
    store_server_free(srv);
}

/* Runs ranks [0, world) of j (rank r started after delay_ms[r]), returns exit codes in codes[]. */
static void run_job(struct job *j, const int *delay_ms, int *codes, int64_t *elapsed)
{
    pid_t pids[16];

    for (int r = 0; r < j->world; r++) {
        if (delay_ms && delay_ms[r])
            tu_sleep_ms(delay_ms[r]);
        pids[r] = tu_spawn(rank_main, r, j);
    }
    for (int r = 0; r < j->world; r++)
        codes[r] = tu_wait(pids[r], 60000, elapsed ? &elapsed[r] : NULL);
}

static void test_rendezvous_4(void)
{
    struct job j = job_defaults(4);
    int codes[4];

    run_job(&j, NULL, codes, NULL);
    for (int r = 0; r < 4; r++)
        TEST_EQ_INT(codes[r], 0);
}

/* One rank has a different token: it is refused (77, permanent); rank 0 gives up on it. */
static void test_wrong_token(void)
{
    struct job good = job_defaults(2), bad;
    pid_t p0, p1;
    int64_t t1 = 0;

    good.join_ms = 3000;
    bad = good;
    bad.token = "not-the-token";
    p0 = tu_spawn(rank_main, 0, &good);
    p1 = tu_spawn(rank_main, 1, &bad);
    TEST_EQ_INT(tu_wait(p1, 20000, &t1), DIST_EXIT_NOPERM);
    TEST_CHECK(t1 < 2500); /* refused at once, not after a timeout */
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);
}

static void test_world_mismatch(void)
{
    struct job j = job_defaults(2), other;
    pid_t p0, p1;

    j.join_ms = 3000;
    other = j;
    other.claim_world = 3;
    p0 = tu_spawn(rank_main, 0, &j);
    p1 = tu_spawn(rank_main, 1, &other);
    TEST_EQ_INT(tu_wait(p1, 20000, NULL), DIST_EXIT_CONFIG);
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);
}

/* Rank 1 thinks its node starts 1 rank, rank 0 that each starts 2: refused at the door with both
 * numbers named, not left to time out in the all-reduce's shared-memory probe; the reason is
 * kept where rank 0's timeout finds it. */
static void test_nproc_mismatch(void)
{
    struct job j = job_defaults(2), other;
    pid_t p0, p1;
    int64_t t1;

    j.join_ms = 3000;
    other = j;
    other.claim_nproc = 1;
    p0 = tu_spawn(rank_main, 0, &j);
    p1 = tu_spawn(rank_main, 1, &other);
    TEST_EQ_INT(tu_wait(p1, 20000, &t1), DIST_EXIT_CONFIG);
    TEST_CHECK(t1 < 2500);
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);

    struct store_server *srv = NULL;
    struct store *a = NULL, *b = NULL;
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = "tok", .world_size = 4,
                                   .nproc_per_node = 2};
    void *v = NULL;
    size_t vl;
    TEST_EQ_INT(store_server_start(&so, &srv), 0);
    if (!srv)
        return;
    struct store_opts co = {.host = "127.0.0.1", .port = store_server_port(srv), .token = "tok",
                            .rank = 0, .world_size = 4, .nproc_per_node = 2,
                            .connect_timeout_ms = 2000, .op_timeout_ms = 2000};
    TEST_EQ_INT(store_connect(&co, &a), 0);
    co.rank = 3;
    co.nproc_per_node = 0; /* NPROC_PER_NODE unset: 1 */
    TEST_EQ_INT(store_connect(&co, &b), DIST_ECONFIG);
    if (a) {
        TEST_EQ_INT(store_get(a, "rdzv/refused/3", &v, &vl), 0);
        TEST_CHECK(v && strstr(v, "rank 3 says NPROC_PER_NODE=1 but rank 0 says 2"));
        free(v);
        TEST_EQ_INT(store_get(a, "rdzv/refused/0", &v, &vl), DIST_ENOENT);
    }
    store_free(b);
    store_free(a);
    store_server_free(srv);
}

static void test_hash_mismatch(void)
{
    struct job j = job_defaults(2), other;
    pid_t p0, p1;

    j.join_ms = 3000;
    other = j;
    other.hash = "cfg-different";
    p0 = tu_spawn(rank_main, 0, &j);
    p1 = tu_spawn(rank_main, 1, &other);
    TEST_EQ_INT(tu_wait(p1, 20000, NULL), DIST_EXIT_CONFIG);
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);
}

/* Two processes claim rank 1: the second is refused with a config error. */
static void test_duplicate_rank(void)
{
    struct job j = job_defaults(3);
    pid_t p0, p1, p1b;

    j.join_ms = 3000;
    p0 = tu_spawn(rank_main, 0, &j);
    p1 = tu_spawn(rank_main, 1, &j);
    tu_sleep_ms(500);
    p1b = tu_spawn(rank_main, 1, &j);
    TEST_EQ_INT(tu_wait(p1b, 20000, NULL), DIST_EXIT_CONFIG);
    /* Rank 2 never came: the first two time out (retryable). */
    TEST_EQ_INT(tu_wait(p1, 20000, NULL), DIST_EXIT_RETRY);
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);
}

/* Rank 0 (the store) comes up seconds after the others: they retry and then all succeed. */
static void test_late_rank0(void)
{
    const char *env = getenv("GANTRY_TEST_LATE_MS");
    int late = env ? atoi(env) : 3000;
    struct job j = job_defaults(4);
    pid_t pids[4];
    int64_t t = dist_now_ms();

    j.connect_ms = late + 30000;
    for (int r = 3; r >= 1; r--)
        pids[r] = tu_spawn(rank_main, r, &j);
    tu_sleep_ms(late);
    pids[0] = tu_spawn(rank_main, 0, &j);
    for (int r = 0; r < 4; r++)
        TEST_EQ_INT(tu_wait(pids[r], late + 60000, NULL), 0);
    TEST_CHECK(dist_now_ms() - t >= late);
    printf("     late rank 0 by %d ms: all 4 ranks joined\n", late);
}

/* Rank 2 of 3 never starts: ranks 0 and 1 fail with a timeout (retryable) after join_ms. */
static void test_never_arrives(void)
{
    struct job j = job_defaults(3);
    pid_t p0, p1;
    int64_t start = dist_now_ms(), t0, t1;

    j.join_ms = 1500;
    p0 = tu_spawn(rank_main, 0, &j);
    p1 = tu_spawn(rank_main, 1, &j);
    TEST_EQ_INT(tu_wait(p0, 20000, NULL), DIST_EXIT_RETRY);
    t0 = dist_now_ms() - start;
    TEST_EQ_INT(tu_wait(p1, 20000, NULL), DIST_EXIT_RETRY);
    t1 = dist_now_ms() - start;
    TEST_CHECK(t0 >= 1400 && t0 < 10000);
    TEST_CHECK(t1 >= 1400 && t1 < 10000);
}

/* Nobody listens: the client gives up after connect_timeout_ms with a timeout. */
static void test_unreachable(void)
{
    struct job j = job_defaults(2);
    int64_t t = 0;

    j.connect_ms = 1200;
    pid_t p = tu_spawn(rank_main, 1, &j);
    TEST_EQ_INT(tu_wait(p, 20000, &t), DIST_EXIT_RETRY);
    TEST_CHECK(t >= 1100 && t < 8000);
}

static void test_env_load(void)
{
    struct dist_env e;

    setenv("MASTER_ADDR", "job-worker-0.job.ns.svc", 1);
    setenv("MASTER_PORT", "29400", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("RANK", "5", 1);
    setenv("NPROC_PER_NODE", "4", 1);
    unsetenv("LOCAL_RANK");
    setenv("GANTRY_RDZV_TOKEN", "t", 1);
    TEST_EQ_INT(dist_env_load(&e), 0);
    TEST_EQ_STR(e.master_addr, "job-worker-0.job.ns.svc");
    TEST_EQ_INT(e.master_port, 29400);
    TEST_EQ_INT(e.world_size, 8);
    TEST_EQ_INT(e.rank, 5);
    TEST_EQ_INT(e.local_rank, 1);
    TEST_EQ_INT(e.peer_timeout_s, 60);
    setenv("RANK", "8", 1);
    TEST_EQ_INT(dist_env_load(&e), DIST_EUSAGE);
    setenv("RANK", "x1", 1);
    TEST_EQ_INT(dist_env_load(&e), DIST_EUSAGE);
    setenv("RANK", "1", 1);
    unsetenv("GANTRY_RDZV_TOKEN");
    TEST_EQ_INT(dist_env_load(&e), DIST_EUSAGE);
    TEST_EQ_INT(dist_exit_code(DIST_EUSAGE), 64);
    TEST_EQ_INT(dist_exit_code(DIST_EPEER), DIST_EXIT_RETRY);
    TEST_CHECK(!dist_err_permanent(DIST_ETIMEDOUT));
}

int main(void)
{
    TEST_RUN(test_env_load);
    TEST_RUN(test_kv_ops);
    TEST_RUN(test_junk_client);
    TEST_RUN(test_silent_strangers);
    TEST_RUN(test_wait_wakes);
    TEST_RUN(test_dropped_rank_is_lost);
    TEST_RUN(test_out_of_fds);
    TEST_RUN(test_handshake_retried);
    TEST_RUN(test_rendezvous_4);
    TEST_RUN(test_wrong_token);
    TEST_RUN(test_world_mismatch);
    TEST_RUN(test_hash_mismatch);
    TEST_RUN(test_nproc_mismatch);
    TEST_RUN(test_duplicate_rank);
    TEST_RUN(test_never_arrives);
    TEST_RUN(test_unreachable);
    TEST_RUN(test_late_rank0);
    return test_summary();
}
