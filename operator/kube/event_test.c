/* The event recorder against testsrv: create, then series patches for duplicates. */
#include "operator/kube/event.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "common/test.h"
#include "operator/kube/testsrv.h"

static char methods[16][16], paths[16][256], bodies[16][2048];
static atomic_int n;

static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *r)
{
    int i = atomic_fetch_add(&n, 1);
    if (i < 16) {
        snprintf(methods[i], sizeof(methods[i]), "%.15s", r->method);
        snprintf(paths[i], sizeof(paths[i]), "%.255s", r->path);
        snprintf(bodies[i], sizeof(bodies[i]), "%.2047s", r->body);
    }
    testsrv_respond(c, strcmp(r->method, "POST") == 0 ? 201 : 200, NULL, "{}");
    return 0;
}

static json_t *training_job(const char *uid)
{
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "apiVersion", "gantry.dev/v1alpha1", "kind",
                     "TrainingJob", "metadata", "name", "spam", "namespace", "ml", "uid", uid);
}

static struct event_recorder *recorder(struct testsrv *srv)
{
    struct kube_config cfg = {0};
    char server[64];

    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server; /* copied by the client */
    return event_recorder_new(&cfg, NULL, "gantry.dev/operator", "op-0");
}

static void test_dedup_series(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    int count = 0;
    json_t *tj = training_job("u-1");
    struct event_recorder *r = recorder(srv);
    TEST_EQ_INT(
        event_record(r, tj, "Normal", "Created", "Create", "Created pod spam-worker-0", &count), 0);
    TEST_EQ_INT(count, 1);
    TEST_EQ_INT(
        event_record(r, tj, "Normal", "Created", "Create", "Created pod spam-worker-0", &count), 0);
    TEST_EQ_INT(count, 2);
    TEST_EQ_INT(
        event_record(r, tj, "Normal", "Created", "Create", "Created pod spam-worker-0", &count), 0);
    TEST_EQ_INT(count, 3);
    TEST_EQ_INT(event_record(r, tj, "Warning", "Restarting", "Restart", "Gang restart 1", &count),
                0);
    TEST_EQ_INT(count, 1);
    TEST_EQ_INT(atomic_load(&n), 4);
    TEST_EQ_STR(methods[0], "POST");
    TEST_EQ_STR(paths[0], "/apis/events.k8s.io/v1/namespaces/ml/events");
    json_t *ev = json_loads(bodies[0], 0, NULL);
    TEST_EQ_STR(json_string_value(json_object_get(ev, "reason")), "Created");
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(ev, "regarding"), "uid")), "u-1");
    TEST_EQ_STR(json_string_value(json_object_get(ev, "reportingController")),
                "gantry.dev/operator");
    const char *name = json_string_value(json_object_get(json_object_get(ev, "metadata"), "name"));
    TEST_CHECK(name && strncmp(name, "spam.", 5) == 0);
    TEST_EQ_STR(methods[1], "PATCH");
    TEST_CHECK(name && strstr(paths[1], name) != NULL); /* the same Event */
    json_t *p = json_loads(bodies[2], 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(p, "series"), "count")), 3);
    TEST_EQ_STR(methods[3], "POST");
    json_decref(p);
    json_decref(ev);
    json_decref(tj);
    event_recorder_free(r);
    testsrv_stop(srv);
}

static time_t fake_now;
static time_t fake_clock(void)
{
    return fake_now;
}

/* Records past the window are dropped (within EVENT_PRUNE_INTERVAL_S), not kept until the cache
 * is full; a duplicate after the window makes a new Event. */
static void test_prune_expired(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    char note[64];
    int count = 0;
    json_t *tj = training_job("u-2");
    struct event_recorder *r = recorder(srv);
    fake_now = 1000000;
    event_recorder_set_clock(r, fake_clock);
    for (int i = 0; i < 5; i++) {
        snprintf(note, sizeof(note), "Created pod spam-worker-%d", i);
        TEST_EQ_INT(event_record(r, tj, "Normal", "Created", "Create", note, &count), 0);
    }
    TEST_EQ_INT((int)event_recorder_cached(r), 5);
    fake_now += EVENT_DEDUP_WINDOW_S - 1; /* still inside the window: a duplicate is a series */
    TEST_EQ_INT(event_record(r, tj, "Normal", "Created", "Create", "Created pod spam-worker-0",
                             &count), 0);
    TEST_EQ_INT(count, 2);
    TEST_EQ_INT((int)event_recorder_cached(r), 5);
    fake_now += EVENT_PRUNE_INTERVAL_S; /* the window has passed for all five, and a prune is due */
    TEST_EQ_INT(event_record(r, tj, "Warning", "Restarting", "Restart", "Gang restart 1", &count),
                0);
    TEST_EQ_INT(count, 1);
    TEST_EQ_INT((int)event_recorder_cached(r), 1); /* only the new one */
    TEST_EQ_INT(event_record(r, tj, "Normal", "Created", "Create", "Created pod spam-worker-0",
                             &count), 0);
    TEST_EQ_INT(count, 1); /* a new Event, not a patch of the expired one */
    TEST_EQ_INT((int)event_recorder_cached(r), 2);
    json_decref(tj);
    event_recorder_free(r);
    testsrv_stop(srv);
}

int main(void)
{
    TEST_RUN(test_dedup_series);
    TEST_RUN(test_prune_expired);
    return test_summary();
}
