/*
 * launch_test.c - the local launcher with real processes: the environment each rank gets, the
 * first failure's status (exit code or 128+signal) with the other ranks stopped quickly, signal
 * forwarding, a missing command, and a real 4-rank rendezvous + all-reduce (dist_smoke).
 * DIST_SMOKE is the path of the dist_smoke binary (set by CMake).
 */
#include "worker/launch.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"
#include "worker/dist.h"
#include "worker/dist_testutil.h"

static int run(int nproc, const char *script)
{
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    struct launch_opts o = {.nproc = nproc, .grace_ms = 2000, .argv = argv};
    return launch_run(&o);
}

/* The line a rank wrote to DIR/<i>, into line; removes the file. False (a failed check) when
 * there is none. */
static bool take_line(const char *dir, int i, char *line, size_t n)
{
    char path[256];
    bool ok;

    snprintf(path, sizeof(path), "%s/%d", dir, i);
    FILE *f = fopen(path, "r");
    if (!TEST_CHECK(f != NULL))
        return false;
    ok = TEST_CHECK(fgets(line, (int)n, f) != NULL);
    fclose(f);
    unlink(path);
    return ok;
}

static void test_env(void)
{
    char dir[] = "/tmp/launch_test.XXXXXX", line[512];

    TEST_CHECK(mkdtemp(dir) != NULL);
    setenv("LT_DIR", dir, 1);
    unsetenv("GANTRY_RDZV_TOKEN");
    TEST_EQ_INT(run(3, "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $NODE_RANK $NPROC_PER_NODE "
                       "$MASTER_ADDR $MASTER_PORT ${#GANTRY_RDZV_TOKEN} $GANTRY_RDZV_TOKEN\" "
                       "> $LT_DIR/$RANK"),
                0);
    char tok0[128] = "";
    for (int r = 0; r < 3; r++) {
        int rank, lrank, world, node, nproc, port, toklen;
        char addr[64], tok[128];
        if (!take_line(dir, r, line, sizeof(line)))
            continue;
        TEST_EQ_INT(sscanf(line, "%d %d %d %d %d %63s %d %d %127s", &rank, &lrank, &world, &node,
                           &nproc, addr, &port, &toklen, tok),
                    9);
        TEST_EQ_INT(rank, r);
        TEST_EQ_INT(lrank, r);
        TEST_EQ_INT(world, 3);
        TEST_EQ_INT(node, 0);
        TEST_EQ_INT(nproc, 3);
        TEST_EQ_STR(addr, "127.0.0.1");
        TEST_CHECK(port > 0 && port < 65536);
        TEST_EQ_INT(toklen, 64); /* 32 random bytes, hex */
        if (r == 0)
            snprintf(tok0, sizeof(tok0), "%s", tok);
        TEST_EQ_STR(tok, tok0); /* one token per launch */
    }
    rmdir(dir);
}

/* Node mode: node 1 of a 5-rank job runs ranks 3 and 4 with the job's store and token. */
static void test_node_env(void)
{
    char dir[] = "/tmp/launch_test.XXXXXX", line[512];
    char *argv[] = {"sh", "-c",
                    "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $NODE_RANK $NPROC_PER_NODE "
                    "$LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $GANTRY_RDZV_TOKEN\" > "
                    "$LT_DIR/$LOCAL_RANK",
                    NULL};
    struct launch_opts o = {.nproc = 2,
                            .master_addr = "10.0.0.7",
                            .master_port = 29400,
                            .argv = argv,
                            .name = "node-test",
                            .world_size = 5,
                            .rank_base = 3,
                            .node_rank = 1};

    TEST_CHECK(mkdtemp(dir) != NULL);
    setenv("LT_DIR", dir, 1);
    setenv("GANTRY_RDZV_TOKEN", "the-jobs-token", 1);
    TEST_EQ_INT(launch_run(&o), 0);
    for (int l = 0; l < 2; l++) {
        int rank, lrank, world, node, nproc, lworld, port;
        char addr[64], tok[128];
        if (!take_line(dir, l, line, sizeof(line)))
            continue;
        TEST_EQ_INT(sscanf(line, "%d %d %d %d %d %d %63s %d %127s", &rank, &lrank, &world, &node,
                           &nproc, &lworld, addr, &port, tok),
                    9);
        TEST_EQ_INT(rank, 3 + l);
        TEST_EQ_INT(lrank, l);
        TEST_EQ_INT(world, 5);
        TEST_EQ_INT(node, 1);
        TEST_EQ_INT(nproc, 2);
        TEST_EQ_INT(lworld, 2);
        TEST_EQ_STR(addr, "10.0.0.7"); /* never connected to: the script only prints it */
        TEST_EQ_INT(port, 29400);
        TEST_EQ_STR(tok, "the-jobs-token"); /* the job's, not a new one */
    }
    rmdir(dir);
    unsetenv("GANTRY_RDZV_TOKEN");
    /* ranks past the world, and a node without the job's store, are refused before any start */
    o.rank_base = 4;
    TEST_EQ_INT(launch_run(&o), 64);
    o.rank_base = 3;
    o.master_port = 0;
    TEST_EQ_INT(launch_run(&o), 64);
}

static void test_all_ok(void)
{
    TEST_EQ_INT(run(4, "exit 0"), 0);
}

/* Rank 1 fails at once; the others would sleep for 60 s but are stopped. */
static void test_first_failure(void)
{
    int64_t t = dist_now_ms();
    TEST_EQ_INT(run(3, "if [ $RANK = 1 ]; then exit 7; fi; exec sleep 60"), 7);
    TEST_CHECK(dist_now_ms() - t < 10000);
}

static void test_killed_by_signal(void)
{
    int64_t t = dist_now_ms();
    TEST_EQ_INT(run(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60"), 128 + 9);
    TEST_CHECK(dist_now_ms() - t < 10000);
}

/* A rank that ignores SIGTERM is SIGKILLed after the grace period. */
static void test_grace_then_kill(void)
{
    int64_t t = dist_now_ms();
    TEST_EQ_INT(run(2, "if [ $RANK = 0 ]; then sleep 1; exit 3; fi; trap '' TERM; sleep 60"), 3);
    int64_t took = dist_now_ms() - t;
    TEST_CHECK(took >= 2900 && took < 15000);
}

static int launcher_main(int unused, void *arg)
{
    (void)unused;
    (void)arg;
    return run(2, "exec sleep 60");
}

/* SIGTERM to the launcher reaches the ranks; the launcher returns 128 + SIGTERM. */
static void test_forward_signal(void)
{
    pid_t p = tu_spawn(launcher_main, 0, NULL);
    int64_t t;

    tu_sleep_ms(500);
    t = dist_now_ms();
    kill(p, SIGTERM);
    TEST_EQ_INT(tu_wait(p, 20000, NULL), 128 + SIGTERM);
    TEST_CHECK(dist_now_ms() - t < 5000);
}

static void test_missing_command(void)
{
    char *argv[] = {"/nonexistent/gantry-nope", NULL};
    struct launch_opts o = {.nproc = 2, .argv = argv};
    TEST_EQ_INT(launch_run(&o), 127);
    struct launch_opts bad = {.nproc = 0, .argv = argv};
    TEST_EQ_INT(launch_run(&bad), 64);
}

/* The real thing: 4 ranks rendezvous and all-reduce; then a rank that fails stops the rest. */
static void test_dist_smoke(void)
{
    char *ok[] = {DIST_SMOKE, NULL}, *fail[] = {DIST_SMOKE, "--fail-rank", "2", NULL};
    struct launch_opts o = {.nproc = 4, .argv = ok};
    int64_t t;

    unsetenv("GANTRY_RDZV_TOKEN");
    TEST_EQ_INT(launch_run(&o), 0);
    o.argv = fail;
    o.nproc = 3;
    t = dist_now_ms();
    TEST_EQ_INT(launch_run(&o), 5);
    TEST_CHECK(dist_now_ms() - t < 20000);
}

int main(void)
{
    TEST_RUN(test_env);
    TEST_RUN(test_node_env);
    TEST_RUN(test_all_ok);
    TEST_RUN(test_first_failure);
    TEST_RUN(test_killed_by_signal);
    TEST_RUN(test_grace_then_kill);
    TEST_RUN(test_forward_signal);
    TEST_RUN(test_missing_command);
    TEST_RUN(test_dist_smoke);
    return test_summary();
}
