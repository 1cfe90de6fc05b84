/* Expectations and the informer handlers' routing of children to their job's key. */
#include "operator/exec.h"

#include <stdlib.h>

#include "common/test.h"

static void test_expectations(void)
{
    struct exec_expect *e = exec_expect_new();

    TEST_CHECK(exec_expect_met(e, "ml/a", 1000)); /* nothing recorded */
    exec_expect_raise(e, "ml/a", 3, 1, 1000);
    TEST_CHECK(!exec_expect_met(e, "ml/a", 1000));
    TEST_CHECK(exec_expect_met(e, "ml/b", 1000)); /* per key */
    exec_expect_lower(e, "ml/a", 2, 0);
    TEST_CHECK(!exec_expect_met(e, "ml/a", 1001));
    exec_expect_lower(e, "ml/a", 1, 0);
    TEST_CHECK(!exec_expect_met(e, "ml/a", 1001)); /* the delete is still pending */
    exec_expect_lower(e, "ml/a", 5, 5);            /* never below zero */
    TEST_CHECK(exec_expect_met(e, "ml/a", 1001));
    exec_expect_raise(e, "ml/a", 1, 0, 1002);
    TEST_CHECK(!exec_expect_met(e, "ml/a", 1002));
    /* a lost watch event cannot wedge the job: expectations expire */
    TEST_CHECK(exec_expect_met(e, "ml/a", 1002 + EXEC_EXPECT_TTL_S));
    exec_expect_raise(e, "ml/a", 0, 0, 2000); /* nothing to expect: no change */
    TEST_CHECK(exec_expect_met(e, "ml/a", 1002 + EXEC_EXPECT_TTL_S));
    exec_expect_forget(e, "ml/a");
    TEST_CHECK(exec_expect_met(e, "ml/a", 1002));
    exec_expect_free(e);
}

static void test_handlers_route_to_job(void)
{
    struct exec_shared sh = {0};
    json_t *pod = json_loads("{\"metadata\":{\"name\":\"spam-worker-1\",\"namespace\":\"ml\","
                             "\"labels\":{\"gantry.dev/job-name\":\"spam\"}}}", 0, NULL);
    json_t *stray = json_loads("{\"metadata\":{\"name\":\"x\",\"namespace\":\"ml\"}}", 0, NULL);
    json_t *job = json_loads("{\"metadata\":{\"name\":\"other\",\"namespace\":\"ml\"}}", 0, NULL);
    char *key = NULL;

    sh.queue = queue_new(0, 0);
    sh.expect = exec_expect_new();
    exec_expect_raise(sh.expect, "ml/spam", 1, 1, time(NULL));
    exec_on_pod_add(&sh, pod);
    exec_on_child(&sh, stray); /* no job label: ignored */
    TEST_EQ_INT(queue_len(sh.queue), 1);
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/spam", time(NULL)));
    exec_on_pod_delete(&sh, pod);
    TEST_CHECK(exec_expect_met(sh.expect, "ml/spam", time(NULL)));
    TEST_EQ_INT(queue_len(sh.queue), 1); /* de-duplicated */
    TEST_EQ_INT(queue_get(sh.queue, &key, 1000), 0);
    TEST_EQ_STR(key, "ml/spam");
    queue_done(sh.queue, key);
    free(key);
    exec_on_job(&sh, job);
    TEST_EQ_INT(queue_get(sh.queue, &key, 1000), 0);
    TEST_EQ_STR(key, "ml/other");
    queue_done(sh.queue, key);
    free(key);
    json_decref(pod);
    json_decref(stray);
    json_decref(job);
    queue_free(sh.queue);
    exec_expect_free(sh.expect);
}

int main(void)
{
    TEST_RUN(test_expectations);
    TEST_RUN(test_handlers_route_to_job);
    return test_summary();
}
