/*
 * sampler_test.c - disjoint shards, padding and drop-last, per-epoch reshuffles, determinism,
 * position save/restore, and restoring at a different world size.
 */
#include "worker/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "common/test.h"

/* Counts how often each index is drawn by ranks 0..world-1 over one epoch. */
static uint64_t draw_all(uint64_t n, int world, bool drop_last, uint64_t epoch, int *count)
{
    uint64_t total = 0, idx;

    memset(count, 0, n * sizeof(int));
    for (int r = 0; r < world; r++) {
        struct sampler s;
        sampler_init(&s, n, r, world, 42, true, drop_last);
        sampler_set_epoch(&s, epoch);
        while (sampler_next(&s, &idx)) {
            count[idx]++;
            total++;
        }
        sampler_cleanup(&s);
    }
    return total;
}

static void test_disjoint_padded(void)
{
    int count[103], dup = 0, missing = 0;

    TEST_EQ_INT(draw_all(103, 4, false, 0, count), 104); /* 26 per rank */
    for (int i = 0; i < 103; i++) {
        missing += count[i] == 0;
        dup += count[i] > 1 ? count[i] - 1 : 0;
    }
    TEST_EQ_INT(missing, 0);
    TEST_EQ_INT(dup, 1); /* exactly the padding */
}

static void test_drop_last(void)
{
    int count[103], seen = 0;

    TEST_EQ_INT(draw_all(103, 4, true, 0, count), 100);
    for (int i = 0; i < 103; i++) {
        TEST_CHECK(count[i] <= 1);
        seen += count[i];
    }
    TEST_EQ_INT(seen, 100);
}

static void test_epochs_reshuffle(void)
{
    struct sampler a, b, c;
    uint64_t x, y, z;
    int same_epoch = 0, diff_epoch = 0, diff_seed = 0;

    sampler_init(&a, 1000, 1, 2, 7, true, false);
    sampler_init(&b, 1000, 1, 2, 7, true, false);
    sampler_init(&c, 1000, 1, 2, 8, true, false);
    sampler_set_epoch(&b, 1);
    for (int k = 0; k < 500; k++) {
        TEST_CHECK(sampler_next(&a, &x) && sampler_next(&b, &y) && sampler_next(&c, &z));
        diff_epoch += x != y;
        diff_seed += x != z;
    }
    TEST_CHECK(!sampler_next(&a, &x));
    /* Same seed and epoch: the same sequence (determinism across processes and restarts). */
    sampler_set_epoch(&a, 1);
    sampler_set_epoch(&b, 1);
    for (int k = 0; k < 500; k++) {
        TEST_CHECK(sampler_next(&a, &x) && sampler_next(&b, &y));
        same_epoch += x == y;
    }
    TEST_EQ_INT(same_epoch, 500);
    TEST_CHECK(diff_epoch > 400);
    TEST_CHECK(diff_seed > 400);
    sampler_cleanup(&a);
    sampler_cleanup(&b);
    sampler_cleanup(&c);
}

static void test_no_shuffle(void)
{
    struct sampler s;
    uint64_t idx;

    sampler_init(&s, 10, 1, 3, 1, false, false);
    TEST_EQ_INT(sampler_remaining(&s), 4);
    TEST_CHECK(sampler_next(&s, &idx) && idx == 1);
    TEST_CHECK(sampler_next(&s, &idx) && idx == 4);
    TEST_CHECK(sampler_next(&s, &idx) && idx == 7);
    TEST_CHECK(sampler_next(&s, &idx) && idx == 0); /* padding wraps */
    TEST_CHECK(!sampler_next(&s, &idx));
    sampler_cleanup(&s);
}

static void test_save_restore(void)
{
    struct sampler a, b;
    uint64_t x, y;
    struct sampler_pos p;

    sampler_init(&a, 777, 2, 4, 99, true, false);
    sampler_set_epoch(&a, 3);
    for (int k = 0; k < 50; k++)
        TEST_CHECK(sampler_next(&a, &x));
    p = sampler_position(&a);
    TEST_EQ_INT(p.epoch, 3);
    TEST_EQ_INT(p.consumed, 200);
    sampler_init(&b, 777, 2, 4, 99, true, false);
    sampler_restore(&b, p);
    TEST_EQ_INT(sampler_remaining(&b), sampler_remaining(&a));
    int same = 0, n = 0;
    while (sampler_next(&a, &x)) {
        TEST_CHECK(sampler_next(&b, &y));
        same += x == y;
        n++;
    }
    TEST_EQ_INT(same, n);
    TEST_CHECK(!sampler_next(&b, &y));
    TEST_EQ_INT(sampler_position(&a).consumed, 777);
    sampler_cleanup(&a);
    sampler_cleanup(&b);
}

/* 4 ranks take 5 samples each, the job restarts with 3 ranks: every sample of the epoch is seen
 * exactly once overall (plus the new padding), none twice. */
static void test_restore_other_world(void)
{
    enum { N = 101 };
    int count[N] = {0};
    uint64_t idx, extra = 0;
    struct sampler_pos p = {0};

    for (int r = 0; r < 4; r++) {
        struct sampler s;
        sampler_init(&s, N, r, 4, 5, true, false);
        sampler_set_epoch(&s, 2);
        for (int k = 0; k < 5; k++) {
            TEST_CHECK(sampler_next(&s, &idx));
            count[idx]++;
        }
        p = sampler_position(&s);
        sampler_cleanup(&s);
    }
    TEST_EQ_INT(p.consumed, 20);
    for (int r = 0; r < 3; r++) {
        struct sampler s;
        sampler_init(&s, N, r, 3, 5, true, false);
        sampler_restore(&s, p);
        TEST_EQ_INT(sampler_remaining(&s), 27); /* ceil(81 / 3) */
        while (sampler_next(&s, &idx)) {
            count[idx]++;
            extra++;
        }
        sampler_cleanup(&s);
    }
    TEST_EQ_INT(extra, 81);
    for (int i = 0; i < N; i++)
        TEST_EQ_INT(count[i], 1);
}

static void test_tiny(void)
{
    struct sampler s;
    uint64_t idx;

    sampler_init(&s, 2, 3, 4, 1, true, false); /* fewer samples than ranks: padded */
    TEST_EQ_INT(sampler_remaining(&s), 1);
    TEST_CHECK(sampler_next(&s, &idx) && idx < 2);
    sampler_cleanup(&s);
    sampler_init(&s, 2, 3, 4, 1, true, true); /* drop_last: nothing */
    TEST_CHECK(!sampler_next(&s, &idx));
    sampler_cleanup(&s);
    sampler_init(&s, 0, 0, 1, 1, true, false);
    TEST_CHECK(!sampler_next(&s, &idx));
    sampler_cleanup(&s);
}

int main(void)
{
    TEST_RUN(test_disjoint_padded);
    TEST_RUN(test_drop_last);
    TEST_RUN(test_epochs_reshuffle);
    TEST_RUN(test_no_shuffle);
    TEST_RUN(test_save_restore);
    TEST_RUN(test_restore_other_world);
    TEST_RUN(test_tiny);
    return test_summary();
}
