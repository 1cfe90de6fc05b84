/* The informer against a scripted testsrv: projection, handlers, cache contents. */
#include "operator/kube/informer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/testsrv.h"

static atomic_int nwatch;

static const char *pod(char *b, size_t n, const char *name, const char *rv, const char *phase)
{
    snprintf(
        b, n,
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\","
        "\"uid\":\"u-%s\",\"resourceVersion\":\"%s\",\"labels\":{\"gantry.dev/job-name\":\"j\"},"
        "\"managedFields\":[{\"manager\":\"x\",\"big\":\"yyyyyyyyyyyyyyyyyyyy\"}]},"
        "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"w\"}]},"
        "\"status\":{\"phase\":\"%s\",\"podIP\":\"10.0.0.1\"}}",
        name, name, rv, phase);
    return b;
}

static atomic_int nlist;

/*
 * list 1: p0, p1, p2 at rv 10. watch 1: p0 Running, p1 deleted, normal end. watch 2: ERROR 410.
 * list 2 (the relist): only p0 at rv 20, so p2 vanished while we were away. watch 3: silent.
 */
static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *r)
{
    char a[1024], b[1024], d[1024], body[4096];

    if (!strstr(r->path, "watch=1")) {
        if (!strstr(r->path, "labelSelector=gantry.dev%2Fjob-name%3Dj")) {
            testsrv_respond(c, 400, NULL, "{\"kind\":\"Status\",\"code\":400}");
            return 0;
        }
        if (atomic_fetch_add(&nlist, 1) == 0)
            snprintf(body, sizeof(body),
                     "{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[%s,%s,%s]}",
                     pod(a, sizeof(a), "p0", "3", "Pending"),
                     pod(b, sizeof(b), "p1", "4", "Pending"),
                     pod(d, sizeof(d), "p2", "5", "Pending"));
        else
            snprintf(body, sizeof(body),
                     "{\"metadata\":{\"resourceVersion\":\"20\"},\"items\":[%s]}",
                     pod(a, sizeof(a), "p0", "11", "Running"));
        testsrv_respond(c, 200, NULL, body);
        return 0;
    }
    int n = atomic_fetch_add(&nwatch, 1);
    if (n == 0) {
        testsrv_chunked_start(c, 200);
        snprintf(body, sizeof(body),
                 "{\"type\":\"MODIFIED\",\"object\":%s}\n"
                 "{\"type\":\"DELETED\",\"object\":%s}\n",
                 pod(a, sizeof(a), "p0", "11", "Running"),
                 pod(b, sizeof(b), "p1", "12", "Pending"));
        testsrv_chunk(c, body);
        testsrv_chunked_end(c);
        return 0;
    }
    if (n == 1) {
        testsrv_chunked_start(c, 200);
        testsrv_chunk(c, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                         "\"reason\":\"Expired\"}}\n");
        testsrv_chunked_end(c);
        return 0;
    }
    testsrv_wait_closed(c, 5000); /* stays open and silent until the informer stops */
    return -1;
}

static atomic_int adds, updates, deletes;
static char last_update_old_phase[32], last_deleted[32], last_deleted_phase[32];

static void on_add(void *ud, json_t *o)
{
    atomic_fetch_add(&adds, 1);
}
static void on_update(void *ud, json_t *old, json_t *nw)
{
    snprintf(last_update_old_phase, sizeof(last_update_old_phase), "%s",
             json_string_value(json_object_get(json_object_get(old, "status"), "phase")));
    atomic_fetch_add(&updates, 1);
}
static void on_delete(void *ud, json_t *o)
{
    /* For a delete synthesised after a relist, this is the cached object, not a tombstone. */
    const char *ph = json_string_value(json_object_get(json_object_get(o, "status"), "phase"));
    snprintf(last_deleted_phase, sizeof(last_deleted_phase), "%s", ph ? ph : "(none)");
    snprintf(last_deleted, sizeof(last_deleted), "%s",
             json_string_value(json_object_get(json_object_get(o, "metadata"), "name")));
    atomic_fetch_add(&deletes, 1);
}

static void test_informer_projection_and_handlers(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    struct kube_config cfg = {0};
    static const char *const fields[] = {"status.phase", "metadata.labels", NULL};
    struct informer_opts io = {.watch = {.path = "/api/v1/namespaces/ml/pods",
                                         .label_selector = "gantry.dev/job-name=j",
                                         .timeout_s = 30,
                                         .dead_after_s = 30},
                               .fields = fields};
    struct informer_handlers h = {on_add, on_update, on_delete, NULL};
    char server[64];

    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server;
    struct informer *inf = informer_new(&cfg, NULL, &io, &h);
    TEST_EQ_INT(informer_start(inf), 0);
    TEST_EQ_INT(informer_wait_synced(inf, 5000), 0);
    for (int i = 0; i < 300 && atomic_load(&deletes) < 2; i++)
        usleep(10000);
    TEST_EQ_INT(atomic_load(&adds), 3);
    TEST_EQ_INT(atomic_load(&updates), 1); /* the relist's p0 is unchanged: no second update */
    TEST_EQ_INT(atomic_load(&deletes), 2);
    TEST_EQ_STR(last_update_old_phase, "Pending");
    TEST_EQ_STR(last_deleted, "p2"); /* vanished during the 410: synthesised */
    TEST_EQ_STR(last_deleted_phase, "Pending");
    TEST_EQ_INT(informer_len(inf), 1);
    json_t *p0 = informer_get(inf, "ml/p0");
    TEST_CHECK(p0 != NULL);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(p0, "status"), "phase")),
                "Running");
    TEST_EQ_STR(kube_object_rv(p0), "11");
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(p0, "metadata"), "uid")), "u-p0");
    /* Only what was asked for: no spec, no managedFields, no podIP. */
    TEST_CHECK(json_object_get(p0, "spec") == NULL);
    TEST_CHECK(json_object_get(json_object_get(p0, "metadata"), "managedFields") == NULL);
    TEST_CHECK(json_object_get(json_object_get(p0, "status"), "podIP") == NULL);
    TEST_CHECK(json_object_get(json_object_get(json_object_get(p0, "metadata"), "labels"),
                               "gantry.dev/job-name") != NULL);
    json_decref(p0);
    TEST_CHECK(informer_get(inf, "ml/p1") == NULL);
    json_t *all = informer_list(inf);
    TEST_EQ_INT(json_array_size(all), 1);
    json_decref(all);
    informer_stop(inf);
    informer_free(inf);
    testsrv_stop(srv);
}

int main(void)
{
    TEST_RUN(test_informer_projection_and_handlers);
    return test_summary();
}
