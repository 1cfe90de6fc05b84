/*
 * dist_test.c - dist_rdzv_free's final barrier with real processes on loopback: it waits for a
 * live rank that is slow to get there, and it returns at once (not after the rendezvous timeout)
 * when a rank died, whether it died before the others reached the barrier or while they waited.
 */
#include "worker/dist.h"

#include <stdlib.h>

#include "common/test.h"
#include "worker/dist_testutil.h"

#define JOIN_MS 30000 /* the rendezvous timeout the barrier would wait out */

struct job {
    int port, world;
    int die_rank;     /* this rank _exits after the rendezvous (no goodbye), or -1 */
    int die_after_ms; /* ... this long after it */
    int slow_rank;    /* this rank reaches the final barrier late, or -1 */
    int enter_ms;     /* the others enter the final barrier this long after the rendezvous */
};

/* Joins, waits, leaves. Exit: 0; 20 + the seconds dist_rdzv_free took (at most 50) when that was
 * 4 s or more; 5 when it did not wait for the slow rank; else dist_exit_code(). */
static int rank_main(int rank, void *arg)
{
    const struct job *j = arg;
    struct dist_env e;
    struct dist_rdzv *rz = NULL;
    struct dist_rdzv_opts o = {.connect_timeout_ms = JOIN_MS, .join_timeout_ms = JOIN_MS,
                               .op_timeout_ms = JOIN_MS};
    int rc;

    tu_env(&e, j->port, rank, j->world, "tok");
    if ((rc = dist_rendezvous(&e, "cfg", &o, &rz)))
        return dist_exit_code(rc);
    if (rank == j->die_rank) {
        tu_sleep_ms(j->die_after_ms);
        _exit(9); /* dies: no dist_rdzv_free, the kernel closes its connection */
    }
    tu_sleep_ms(rank == j->slow_rank ? 1500 : j->enter_ms);
    int64_t t0 = dist_now_ms();
    dist_rdzv_free(rz);
    int64_t took = dist_now_ms() - t0;
    if (took >= 4000)
        return 20 + (int)(took / 1000 > 30 ? 30 : took / 1000);
    if (j->slow_rank >= 0 && rank != j->slow_rank && took < 1000)
        return 5;
    return 0;
}

static void run(struct job *j, const int *want, int64_t *max_ms)
{
    pid_t pids[4];

    *max_ms = 0;
    j->port = tu_free_port();
    for (int r = 0; r < j->world; r++)
        pids[r] = tu_spawn(rank_main, r, j);
    for (int r = 0; r < j->world; r++) {
        int64_t ms = 0;
        TEST_EQ_INT(tu_wait(pids[r], 60000, &ms), want[r]);
        if (r != j->die_rank && ms > *max_ms)
            *max_ms = ms;
    }
}

/* Everyone alive, rank 2 late by 1.5 s: the others wait for it and all leave cleanly. */
static void test_waits_for_slow(void)
{
    struct job j = {.world = 3, .die_rank = -1, .slow_rank = 2, .enter_ms = 0};
    int want[3] = {0, 0, 0};
    int64_t ms;

    run(&j, want, &ms);
    printf("     slow rank: all done in %lld ms\n", (long long)ms);
}

/* Rank 2 dies before the others reach the barrier: they leave at once. */
static void test_dead_before(void)
{
    struct job j = {.world = 3, .die_rank = 2, .die_after_ms = 0, .slow_rank = -1,
                    .enter_ms = 500};
    int want[3] = {0, 0, 9};
    int64_t ms;

    run(&j, want, &ms);
    TEST_CHECK(ms < 10000);
    printf("     rank 2 dead before the barrier: others done in %lld ms\n", (long long)ms);
}

/* Rank 3 of 4 dies while the others wait in the barrier: they are released at once. */
static void test_dead_while_waiting(void)
{
    struct job j = {.world = 4, .die_rank = 3, .die_after_ms = 1000, .slow_rank = -1,
                    .enter_ms = 0};
    int want[4] = {0, 0, 0, 9};
    int64_t ms;

    run(&j, want, &ms);
    TEST_CHECK(ms < 10000);
    printf("     rank 3 dead during the barrier: others done in %lld ms\n", (long long)ms);
}

int main(void)
{
    TEST_RUN(test_waits_for_slow);
    TEST_RUN(test_dead_before);
    TEST_RUN(test_dead_while_waiting);
    return test_summary();
}
