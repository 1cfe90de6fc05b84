#include "operator/kube/queue.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/kube_err.h"

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void test_dedup_and_order(void)
{
    struct queue *q = queue_new(0, 0);
    char *k;

    queue_add(q, "ml/a");
    queue_add(q, "ml/b");
    queue_add(q, "ml/a");
    TEST_EQ_INT(queue_len(q), 2);
    TEST_EQ_INT(queue_get(q, &k, 0), 0);
    TEST_EQ_STR(k, "ml/a");
    /* Added again while a worker holds it: not handed out until done. */
    queue_add(q, "ml/a");
    TEST_EQ_INT(queue_len(q), 1);
    char *k2;
    TEST_EQ_INT(queue_get(q, &k2, 0), 0);
    TEST_EQ_STR(k2, "ml/b");
    char *k3 = NULL;
    TEST_EQ_INT(queue_get(q, &k3, 10), OP_ETIMEDOUT);
    queue_done(q, k);
    TEST_EQ_INT(queue_get(q, &k3, 0), 0);
    TEST_EQ_STR(k3, "ml/a");
    queue_done(q, k2);
    queue_done(q, k3);
    free(k);
    free(k2);
    free(k3);
    TEST_EQ_INT(queue_len(q), 0);
    queue_free(q);
}

/* Many workers, many adds: a key is never held by two workers at once. */
static struct queue *wq;
static atomic_int holders[8], violations, processed;

static void *worker(void *arg)
{
    char *k;
    while (queue_get(wq, &k, -1) == 0) {
        int i = k[0] - 'a';
        if (atomic_fetch_add(&holders[i], 1) != 0)
            atomic_fetch_add(&violations, 1);
        usleep(200);
        atomic_fetch_sub(&holders[i], 1);
        atomic_fetch_add(&processed, 1);
        queue_done(wq, k);
        free(k);
    }
    return NULL;
}

static void test_one_worker_per_key(void)
{
    pthread_t th[6];
    char key[2] = "a";

    wq = queue_new(0, 0);
    for (int i = 0; i < 6; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < 4000; i++) {
        key[0] = (char)('a' + i % 8);
        queue_add(wq, key);
        if (i % 64 == 0)
            usleep(100);
    }
    usleep(100000);
    queue_shutdown(wq);
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    TEST_EQ_INT(atomic_load(&violations), 0);
    TEST_CHECK(atomic_load(&processed) >= 8);   /* every key at least once */
    TEST_CHECK(atomic_load(&processed) < 4000); /* and de-duplicated */
    queue_free(wq);
}

static void test_backoff_and_forget(void)
{
    struct queue *q = queue_new(10, 100);
    char *k;
    double t0;

    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 10);
    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 20);
    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 40);
    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 80);
    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 100); /* capped */
    TEST_EQ_INT(queue_failures(q, "x"), 5);
    t0 = mono();
    TEST_EQ_INT(queue_get(q, &k, 1000), 0); /* the earliest delay (10 ms) wins */
    TEST_CHECK(mono() - t0 >= 0.009);
    queue_done(q, k);
    free(k);
    /* The five delays merged into one entry: nothing comes later. */
    TEST_EQ_INT(queue_get(q, &k, 200), OP_ETIMEDOUT);
    queue_forget(q, "x");
    TEST_EQ_INT(queue_failures(q, "x"), 0);
    TEST_EQ_INT(queue_add_rate_limited(q, "x"), 10); /* reset after success */
    queue_free(q);
}

static void test_add_after(void)
{
    struct queue *q = queue_new(0, 0);
    char *k;
    double t0 = mono();

    queue_add_after(q, "late", 150);
    queue_add_after(q, "early", 50);
    TEST_EQ_INT(queue_len(q), 0);
    TEST_EQ_INT(queue_get(q, &k, 1000), 0);
    TEST_EQ_STR(k, "early");
    TEST_CHECK(mono() - t0 >= 0.049);
    queue_done(q, k);
    free(k);
    TEST_EQ_INT(queue_get(q, &k, 1000), 0);
    TEST_EQ_STR(k, "late");
    TEST_CHECK(mono() - t0 >= 0.149);
    queue_done(q, k);
    free(k);
    queue_shutdown(q);
    TEST_EQ_INT(queue_get(q, &k, -1), OP_ECANCELED);
    queue_free(q);
}

int main(void)
{
    TEST_RUN(test_dedup_and_order);
    TEST_RUN(test_one_worker_per_key);
    TEST_RUN(test_backoff_and_forget);
    TEST_RUN(test_add_after);
    return test_summary();
}
