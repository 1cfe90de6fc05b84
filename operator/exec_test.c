/* Expectations, the informer handlers' routing of children to their job's key, and the
 * executor against a loopback API server: status first (409 stops everything), slow-start
 * batches stop after a failed batch, 404 on delete counts as done, UID preconditions. */
#include "operator/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/log.h"
#include "operator/kube/testsrv.h"

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

/* Suspend on a lagging cache deletes a terminating pod twice: the second delete must not wait
 * for a second delete event that never comes (else nothing is created for EXEC_EXPECT_TTL_S). */
static void test_expect_delete_twice(void)
{
    struct exec_shared sh = {0};
    json_t *pod = json_loads("{\"metadata\":{\"name\":\"s-worker-1\",\"namespace\":\"ml\","
                             "\"uid\":\"uid-1\",\"labels\":{\"gantry.dev/job-name\":\"s\"}}}",
                             0, NULL);
    void *rec = exec_pod_make(NULL, pod);

    sh.queue = queue_new(0, 0);
    sh.expect = exec_expect_new();
    exec_expect_raise_del(sh.expect, "ml/s", "uid-1", 1000);
    exec_expect_raise_del(sh.expect, "ml/s", "uid-2", 1000);
    exec_expect_raise_del(sh.expect, "ml/s", "uid-1", 1001); /* the same pod again */
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/s", 1001));
    exec_on_pod_delete(&sh, "ml/s-worker-1", rec); /* uid-1 disappears: observed once */
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/s", 1001)); /* uid-2 still pending */
    exec_expect_observe_del(sh.expect, "ml/s", "uid-2"); /* a 404 on delete */
    TEST_CHECK(exec_expect_met(sh.expect, "ml/s", 1001));
    /* a pod deleted by someone else does not satisfy ours */
    exec_expect_raise_del(sh.expect, "ml/s", "uid-3", 1002);
    exec_on_pod_delete(&sh, "ml/s-worker-1", rec);
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/s", 1002));
    exec_expect_observe_del(sh.expect, "ml/s", "uid-3");
    TEST_CHECK(exec_expect_met(sh.expect, "ml/s", 1002));
    exec_pod_free(rec);
    json_decref(pod);
    exec_expect_free(sh.expect);
    queue_free(sh.queue);
}

static void test_handlers_route_to_job(void)
{
    struct exec_shared sh = {0};
    json_t *pod = json_loads("{\"metadata\":{\"name\":\"spam-worker-1\",\"namespace\":\"ml\","
                             "\"labels\":{\"gantry.dev/job-name\":\"spam\"}}}", 0, NULL);
    json_t *stray = json_loads("{\"metadata\":{\"name\":\"x\",\"namespace\":\"ml\"}}", 0, NULL);
    json_t *job = json_loads("{\"metadata\":{\"name\":\"other\",\"namespace\":\"ml\"}}", 0, NULL);
    char *key = NULL;
    void *rec = exec_pod_make(NULL, pod);

    sh.queue = queue_new(0, 0);
    sh.expect = exec_expect_new();
    sh.pod_index = exec_index_new();
    exec_expect_raise(sh.expect, "ml/spam", 1, 1, time(NULL));
    exec_on_pod_add(&sh, "ml/spam-worker-1", rec);
    exec_on_child(&sh, stray); /* no job label: ignored */
    TEST_EQ_INT(queue_len(sh.queue), 1);
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/spam", time(NULL)));
    size_t n;
    char **keys = exec_index_get(sh.pod_index, "ml/spam", &n);
    TEST_EQ_INT(n, 1);
    TEST_EQ_STR(keys[0], "ml/spam-worker-1");
    TEST_CHECK(keys[1] == NULL);
    free(keys[0]);
    free(keys);
    exec_on_pod_update(&sh, "ml/spam-worker-1", rec, rec); /* same job: stays indexed */
    keys = exec_index_get(sh.pod_index, "ml/spam", &n);
    TEST_EQ_INT(n, 1);
    free(keys[0]);
    free(keys);
    exec_on_pod_delete(&sh, "ml/spam-worker-1", rec);
    keys = exec_index_get(sh.pod_index, "ml/spam", &n);
    TEST_EQ_INT(n, 0);
    free(keys);
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
    exec_pod_free(rec);
    json_decref(pod);
    json_decref(stray);
    json_decref(job);
    queue_free(sh.queue);
    exec_expect_free(sh.expect);
    exec_index_free(sh.pod_index);
}

/* The pod informer's typed record keeps everything rec reads, and the IP, job and identity. */
static void test_pod_record(void)
{
    char big[3000];
    json_t *pod;
    struct rec_pod want, got;
    void *rec;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    memcpy(big + sizeof(big) - 6, "tail\n", 5);
    pod = json_pack(
        "{s:{s:s, s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}}, s:{s:s, s:s, "
        "s:[{s:s, s:s}, {s:s, s:s, s:s}], s:[{s:s, s:{s:{s:i, s:s, s:s}}, s:i}]}}",
        "metadata", "name", "j-worker-1", "namespace", "ml", "uid", "u-1", "resourceVersion",
        "77", "deletionTimestamp", "2026-01-01T00:00:00Z", "labels", "gantry.dev/job-name", "j",
        "gantry.dev/replica-index", "1", "gantry.dev/restart-count", "2", "gantry.dev/replicas",
        "3", "gantry.dev/standby", "true", "status", "phase",
        "Failed", "podIP", "10.1.2.3", "conditions", "type", "Ready", "status", "True",
        "type", "DisruptionTarget", "status", "True", "reason", "EvictionByEvictionAPI",
        "containerStatuses", "name", "worker", "state", "terminated", "exitCode", 65, "reason",
        "Error", "message", big, "restartCount", 0);
    TEST_EQ_INT(rec_pod_from_json(pod, &want), 0);
    rec = exec_pod_make(NULL, pod);
    TEST_CHECK(rec != NULL);
    exec_pod_view("ml/j-worker-1", rec, &got);
    TEST_EQ_STR(got.name, "j-worker-1");
    TEST_EQ_STR(got.uid, "u-1");
    TEST_EQ_INT(got.index, 1);
    TEST_EQ_INT(got.restart, 2);
    TEST_EQ_INT(got.replicas, 3);
    TEST_CHECK(got.disrupted && want.disrupted);
    TEST_CHECK(got.standby && want.standby);
    TEST_EQ_STR(got.disruption, "EvictionByEvictionAPI");
    TEST_EQ_INT(got.phase, REC_POD_FAILED);
    TEST_CHECK(got.ready && got.terminating);
    TEST_EQ_INT(got.exit_code, 65);
    TEST_EQ_STR(got.reason, "Error");
    TEST_EQ_STR(got.ip, "10.1.2.3");
    TEST_EQ_INT(strlen(got.message), REC_TERM_MSG_MAX - 2); /* its tail, trailing newline cut */
    TEST_CHECK(strcmp(got.message + strlen(got.message) - 4, "tail") == 0);
    TEST_CHECK(got.message_truncated);
    TEST_CHECK(memcmp(&want, &got, sizeof(want)) == 0); /* exactly what rec reads from JSON */
    TEST_EQ_STR(exec_pod_str(rec, EXEC_POD_JOB), "j");
    TEST_EQ_STR(exec_pod_str(rec, EXEC_POD_RV), "77");
    exec_pod_free(rec);
    json_decref(pod);

    /* a tombstone (synthesised delete): identity only; no name: not cached */
    pod = json_loads("{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\"}}", 0, NULL);
    rec = exec_pod_make(NULL, pod);
    exec_pod_view("ml/p", rec, &got);
    TEST_EQ_STR(got.name, "p");
    TEST_EQ_STR(exec_pod_str(rec, EXEC_POD_JOB), "");
    TEST_EQ_INT(got.exit_code, -1);
    TEST_CHECK(!got.message_truncated && !got.message[0]);
    exec_pod_free(rec);
    json_decref(pod);
    pod = json_loads("{\"metadata\":{\"namespace\":\"ml\"}}", 0, NULL);
    TEST_CHECK(exec_pod_make(NULL, pod) == NULL);
    json_decref(pod);
}

/* Children keep identity, the job label and a digest of config.json, never the data. */
static void test_child_record(void)
{
    struct exec_shared sh = {0};
    json_t *cm = json_pack("{s:{s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", "j-config",
                           "namespace", "ml", "labels", "gantry.dev/job-name", "j", "data",
                           "config.json", "{\"a\":1}");
    json_t *svc = json_pack("{s:{s:s, s:s}}", "metadata", "name", "j", "namespace", "ml");
    char dg[REC_DIGEST_LEN], *key = NULL;
    void *c = exec_child_make(NULL, cm), *s = exec_child_make(NULL, svc);

    rec_digest("{\"a\":1}", dg);
    TEST_CHECK(c && s);
    TEST_EQ_STR(exec_child_str(c, EXEC_CHILD_JOB), "j");
    TEST_CHECK(exec_child_has_config(c));
    TEST_EQ_STR(exec_child_str(c, EXEC_CHILD_DIGEST), dg);
    TEST_CHECK(!exec_child_has_config(s));
    TEST_EQ_STR(exec_child_str(s, EXEC_CHILD_JOB), "");
    sh.queue = queue_new(0, 0);
    exec_on_child_rec(&sh, "ml/j", s); /* no job label: ignored */
    TEST_EQ_INT(queue_len(sh.queue), 0);
    exec_on_child_rec_update(&sh, "ml/j-config", c, c);
    TEST_EQ_INT(queue_get(sh.queue, &key, 1000), 0);
    TEST_EQ_STR(key, "ml/j");
    queue_done(sh.queue, key);
    free(key);
    queue_free(sh.queue);
    exec_child_free(c);
    exec_child_free(s);
    json_decref(cm);
    json_decref(svc);
}

static void test_pod_index(void)
{
    struct exec_index *x = exec_index_new();
    size_t n;
    char **k;

    exec_index_put(x, "ml/a", "ml/a-worker-0");
    exec_index_put(x, "ml/a", "ml/a-worker-1");
    exec_index_put(x, "ml/a", "ml/a-worker-1"); /* a set */
    exec_index_put(x, "ml/b", "ml/b-worker-0");
    k = exec_index_get(x, "ml/a", &n);
    TEST_EQ_INT(n, 2);
    for (size_t i = 0; i < n; i++)
        free(k[i]);
    free(k);
    exec_index_del(x, "ml/a", "ml/a-worker-0");
    exec_index_del(x, "ml/a", "ml/a-worker-0"); /* twice: harmless */
    exec_index_del(x, "ml/zz", "ml/zz-worker-0");
    k = exec_index_get(x, "ml/a", &n);
    TEST_EQ_INT(n, 1);
    TEST_EQ_STR(k[0], "ml/a-worker-1");
    free(k[0]);
    free(k);
    /* the middle of three goes; order kept; another namespace's pod is not the job's */
    exec_index_put(x, "ml/b", "ml/b-worker-1");
    exec_index_put(x, "ml/b", "ml/b-worker-22");
    exec_index_put(x, "ml/b", "other/b-worker-9");
    exec_index_del(x, "ml/b", "ml/b-worker-1");
    k = exec_index_get(x, "ml/b", &n);
    TEST_EQ_INT(n, 2);
    TEST_EQ_STR(k[0], "ml/b-worker-0");
    TEST_EQ_STR(k[1], "ml/b-worker-22");
    TEST_CHECK(k[2] == NULL);
    for (size_t i = 0; i < n; i++)
        free(k[i]);
    free(k);
    exec_index_del(x, "ml/b", "ml/b-worker-0");
    exec_index_del(x, "ml/b", "ml/b-worker-22");
    k = exec_index_get(x, "ml/b", &n); /* emptied: gone */
    TEST_EQ_INT(n, 0);
    free(k);
    exec_index_free(x); /* frees the remaining sets */
}

/* ---- the executor against testsrv */

static struct {
    pthread_mutex_t mu;
    char log[32][160]; /* "METHOD path" of each request, in order */
    char delete_body[1024];
    int n;
    bool status_conflict;
    bool slow_creates; /* each POST takes 20 ms, so a parallel batch surely spreads out */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char conflict_body[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
    "\"Conflict\",\"code\":409,\"message\":\"the object has been modified\"}";
static const char quota_body[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
    "\"Forbidden\",\"code\":403,\"message\":\"exceeded quota: pods\"}";
static const char notfound_body[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
    "\"NotFound\",\"code\":404,\"message\":\"not found\"}";

static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *req)
{
    bool status, conflict, slow;

    pthread_mutex_lock(&S.mu);
    if (S.n < 32)
        snprintf(S.log[S.n++], sizeof(S.log[0]), "%s %.140s", req->method, req->path);
    if (strcmp(req->method, "DELETE") == 0)
        snprintf(S.delete_body, sizeof(S.delete_body), "%.1000s", req->body ? req->body : "");
    conflict = S.status_conflict;
    slow = S.slow_creates && strcmp(req->method, "POST") == 0;
    pthread_mutex_unlock(&S.mu);
    if (slow)
        usleep(20000);
    status = strstr(req->path, "/status") != NULL;
    if (status && conflict)
        testsrv_respond(c, 409, NULL, conflict_body);
    else if (strcmp(req->method, "DELETE") == 0)
        testsrv_respond(c, 404, NULL, notfound_body);
    else if (strcmp(req->method, "POST") == 0 && strstr(req->body, "\"j-worker-1\""))
        testsrv_respond(c, 403, NULL, quota_body); /* batch 1 fails */
    else
        testsrv_respond(c, strcmp(req->method, "POST") == 0 ? 201 : 200, NULL, "{}");
    return 0;
}

static void add(struct rec_result *r, enum rec_verb v, const char *name, int batch,
                const char *uid)
{
    struct rec_action *a = &r->actions[r->nactions++];

    memset(a, 0, sizeof(*a));
    a->verb = v;
    a->kind = REC_POD;
    a->batch = batch;
    snprintf(a->name, sizeof(a->name), "%s", name);
    snprintf(a->uid, sizeof(a->uid), "%s", uid ? uid : "");
    if (v == REC_CREATE)
        a->obj = json_pack("{s:s, s:{s:s}}", "kind", "Pod", "metadata", "name", name);
}

/* The executor's client, pointed at srv: a token, namespace ml; server holds the URL. */
static void rig_client(struct testsrv *srv, struct kube_config *cfg, char *server, size_t n,
                       struct exec_worker *w)
{
    snprintf(server, n, "http://127.0.0.1:%d", testsrv_port(srv));
    cfg->server = server;
    cfg->namespace = "ml";
    cfg->token = "t";
    w->kc = kube_client_new(cfg, NULL);
}

static void test_apply_against_server(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    struct kube_config cfg = {0};
    struct exec_shared sh = {0};
    struct exec_worker w = {.sh = &sh};
    struct rec_result r = {0};
    struct tj tj;
    char server[64];
    json_t *obj = json_loads("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j\","
                             "\"namespace\":\"ml\",\"uid\":\"u\",\"resourceVersion\":\"5\"},"
                             "\"spec\":{\"replicas\":4}}", 0, NULL);

    rig_client(srv, &cfg, server, sizeof(server), &w);
    w.cfg = &cfg; /* batches run in parallel on pool connections */
    sh.expect = exec_expect_new();
    TEST_EQ_INT(tj_parse(obj, &tj, NULL, 0), 0);
    r.actions = calloc(8, sizeof(*r.actions));
    r.status = json_pack("{s:s}", "phase", "Pending");
    r.status_changed = true;
    add(&r, REC_DELETE, "j-worker-9", 0, "uid-9");
    add(&r, REC_CREATE, "j-worker-0", 0, NULL);
    add(&r, REC_CREATE, "j-worker-1", 1, NULL);
    add(&r, REC_CREATE, "j-worker-2", 1, NULL);
    add(&r, REC_CREATE, "j-worker-3", 2, NULL);

    /* 1. a stale read: the status write is refused and nothing else happens */
    S.status_conflict = true;
    TEST_EQ_INT(exec_apply(&w, obj, &tj, &r), OP_ECONFLICT);
    TEST_EQ_INT(S.n, 1);
    TEST_EQ_STR(S.log[0], "PUT /apis/gantry.dev/v1alpha1/namespaces/ml/trainingjobs/j/status");
    TEST_CHECK(exec_expect_met(sh.expect, "ml/j", time(NULL)));

    /* 2. status written first; delete 404 is done; batch 1 fails: worker-2 (same batch) is still
     *    tried, worker-3 (batch 2) is not; the first error comes back */
    S.status_conflict = false;
    S.n = 0;
    TEST_EQ_INT(exec_apply(&w, obj, &tj, &r), OP_EFORBIDDEN);
    TEST_EQ_INT(S.n, 5);
    TEST_EQ_STR(S.log[0], "PUT /apis/gantry.dev/v1alpha1/namespaces/ml/trainingjobs/j/status");
    TEST_EQ_STR(S.log[1], "DELETE /api/v1/namespaces/ml/pods/j-worker-9");
    TEST_EQ_STR(S.log[2], "POST /api/v1/namespaces/ml/pods");
    TEST_EQ_STR(S.log[3], "POST /api/v1/namespaces/ml/pods"); /* batch 1, in parallel */
    TEST_EQ_STR(S.log[4], "POST /api/v1/namespaces/ml/pods");
    TEST_CHECK(strstr(S.delete_body, "uid-9") != NULL); /* precondition */
    TEST_EQ_INT(sh.stats.pods_created, 2);
    TEST_EQ_INT(sh.stats.pods_deleted, 0); /* it was gone already */
    /* worker-0 and worker-2 are awaited; the failed, skipped and 404'd ones are not */
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/j", time(NULL)));
    exec_expect_lower(sh.expect, "ml/j", 1, 0);
    TEST_CHECK(!exec_expect_met(sh.expect, "ml/j", time(NULL)));
    exec_expect_lower(sh.expect, "ml/j", 1, 0);
    TEST_CHECK(exec_expect_met(sh.expect, "ml/j", time(NULL)));

    /* 3. a batch of 8 (batch 3 of a big job) goes out on parallel connections, all created */
    rec_result_cleanup(&r);
    memset(&r, 0, sizeof(r));
    r.actions = calloc(8, sizeof(*r.actions));
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "j-worker-%d", 7 + i);
        add(&r, REC_CREATE, name, 3, NULL);
    }
    S.n = 0;
    S.slow_creates = true; /* else one connection may take all 8 before the pool's first call */
    long conns = testsrv_connections(srv);
    TEST_EQ_INT(exec_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(S.n, 8);
    TEST_EQ_INT(sh.stats.pods_created, 2 + 8);
    TEST_CHECK(testsrv_connections(srv) - conns >= 1); /* pool connections opened */
    TEST_CHECK(w.pool[0] != NULL);

    /* 4. idle: the extra connections close (only kc's stays), and the next batch reopens them */
    exec_worker_cleanup(&w);
    TEST_CHECK(w.pool[0] == NULL);
    for (int ms = 0; testsrv_open_connections(srv) > 1 && ms < 3000; ms += 10)
        usleep(10000);
    TEST_EQ_INT(testsrv_open_connections(srv), 1);
    S.n = 0;
    TEST_EQ_INT(exec_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(S.n, 8);
    TEST_CHECK(w.pool[0] != NULL);

    rec_result_cleanup(&r);
    tj_cleanup(&tj);
    json_decref(obj);
    exec_expect_free(sh.expect);
    exec_worker_cleanup(&w);
    kube_client_free(w.kc);
    testsrv_stop(srv);
}

/* ---- the gang's Workload (spec.runPolicy.schedulingPolicy.gang: Workload) */

enum wl_mode { WL_CREATED, WL_UNSERVED, WL_UNSERVED_V1ALPHA2, WL_OURS, WL_OURS_OTHER_MIN,
               WL_FOREIGN };

static struct {
    pthread_mutex_t mu;
    enum wl_mode mode;
    bool gone; /* the existing Workload was deleted: the next POST makes one */
    char log[16][160];
    char delete_body[1024];
    int n;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int wl_handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *req)
{
    static const char exists[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
        "\"AlreadyExists\",\"code\":409,\"message\":\"workloads \\\"j\\\" already exists\"}";
    /* what kube-apiserver answers for a group/version it does not serve */
    static const char unserved[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"the server could not find the requested resource\",\"reason\":"
        "\"NotFound\",\"details\":{},\"code\":404}";
    bool workload = strstr(req->path, "/workloads") != NULL;
    bool post = strcmp(req->method, "POST") == 0;
    char body[512];

    (void)ud;
    pthread_mutex_lock(&W.mu);
    if (W.n < 16)
        snprintf(W.log[W.n++], sizeof(W.log[0]), "%s %.140s", req->method, req->path);
    if (strcmp(req->method, "DELETE") == 0)
        snprintf(W.delete_body, sizeof(W.delete_body), "%.1000s", req->body ? req->body : "");
    pthread_mutex_unlock(&W.mu);
    if (strcmp(req->path, "/apis/scheduling.k8s.io") == 0) { /* discovery of the group */
        snprintf(body, sizeof(body), "{\"kind\":\"APIGroup\",\"name\":\"scheduling.k8s.io\","
                 "\"versions\":[{\"groupVersion\":\"scheduling.k8s.io/v1\",\"version\":\"v1\"}%s]}",
                 W.mode == WL_UNSERVED_V1ALPHA2 ? ",{\"groupVersion\":\"scheduling.k8s.io/v1alpha2\","
                                                  "\"version\":\"v1alpha2\"}" : "");
        testsrv_respond(c, 200, NULL, body);
    } else if (!workload) {
        testsrv_respond(c, post ? 201 : 200, NULL, "{}");
    } else if (W.mode == WL_UNSERVED || W.mode == WL_UNSERVED_V1ALPHA2) {
        testsrv_respond(c, 404, NULL, unserved);
    } else if (post && (W.mode == WL_CREATED || W.gone)) {
        testsrv_respond(c, 201, NULL, "{}");
    } else if (post) {
        testsrv_respond(c, 409, NULL, exists);
    } else if (strcmp(req->method, "GET") == 0) {
        snprintf(body, sizeof(body),
                 "{\"kind\":\"Workload\",\"metadata\":{\"name\":\"j\",\"uid\":\"wl-1\","
                 "\"ownerReferences\":[{\"kind\":\"TrainingJob\",\"name\":\"j\",\"uid\":\"%s\","
                 "\"controller\":true}]},\"spec\":{\"podGroups\":[{\"name\":\"workers\","
                 "\"policy\":{\"gang\":{\"minCount\":%d}}}]}}",
                 W.mode == WL_FOREIGN ? "someone-else" : "u", W.mode == WL_OURS ? 4 : 3);
        testsrv_respond(c, 200, NULL, body);
    } else { /* DELETE */
        W.gone = true;
        testsrv_respond(c, 200, NULL, "{}");
    }
    return 0;
}

static int wl_apply(struct exec_worker *w, const json_t *obj, const struct tj *tj,
                    enum wl_mode mode)
{
    struct rec_result r = {0};
    int rc;

    W.mode = mode;
    W.gone = false;
    W.n = 0;
    W.delete_body[0] = '\0';
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[0] = (struct rec_action){.verb = REC_CREATE, .kind = REC_WORKLOAD, .name = "j",
                                       .obj = render_workload(tj)};
    r.nactions = 1;
    add(&r, REC_CREATE, "j-worker-0", 0, NULL);
    add(&r, REC_CREATE, "j-worker-1", 1, NULL);
    rc = exec_apply(w, obj, tj, &r);
    rec_result_cleanup(&r);
    return rc;
}

static int wl_pod_posts(void)
{
    int n = 0;

    for (int i = 0; i < W.n; i++)
        n += strcmp(W.log[i], "POST /api/v1/namespaces/ml/pods") == 0;
    return n;
}

/* Whether what was written to f since the last call holds s (then f is emptied). */
static bool log_has(FILE *f, const char *s)
{
    char buf[8192];
    size_t n;

    fflush(f);
    rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    if (ftruncate(fileno(f), 0) != 0)
        return false;
    rewind(f);
    return strstr(buf, s) != NULL;
}

static void test_apply_workload(void)
{
    FILE *logs = tmpfile();
    struct testsrv *srv = testsrv_start(wl_handler, NULL);
    struct kube_config cfg = {0};
    struct exec_shared sh = {0};
    struct exec_worker w = {.sh = &sh};
    struct tj tj;
    char server[64];
    const char *wl = "/apis/scheduling.k8s.io/v1alpha1/namespaces/ml/workloads";
    char line[160];
    json_t *obj = json_loads("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j\","
                             "\"namespace\":\"ml\",\"uid\":\"u\",\"resourceVersion\":\"5\"},"
                             "\"spec\":{\"replicas\":4,\"runPolicy\":{\"schedulingPolicy\":"
                             "{\"gang\":\"Workload\"}}}}", 0, NULL);

    rig_client(srv, &cfg, server, sizeof(server), &w);
    sh.expect = exec_expect_new();
    TEST_EQ_INT(tj_parse(obj, &tj, NULL, 0), 0);
    TEST_EQ_INT(tj.gang, TJ_GANG_WORKLOAD);

    /* 1. created: the Workload first, then the pods */
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_CREATED), 0);
    snprintf(line, sizeof(line), "POST %s", wl);
    TEST_EQ_INT(W.n, 3);
    TEST_EQ_STR(W.log[0], line);
    TEST_EQ_INT(wl_pod_posts(), 2);
    exec_expect_forget(sh.expect, "ml/j"); /* no informer here to observe them */

    /* 2. the API server does not serve Workloads: no pod is created (it would run outside a
     *    gang: the server drops the unknown spec.workloadRef); the error comes back, and the
     *    warning (the Event's text) says what to enable; on Kubernetes 1.36+, whose discovery
     *    lists scheduling.k8s.io/v1alpha2, that this operator does not speak it */
    log_set_level(LOG_LEVEL_WARN);
    log_set_fd(fileno(logs));
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_UNSERVED), OP_ENOTFOUND);
    TEST_EQ_INT(W.n, 2);
    snprintf(line, sizeof(line), "GET /apis/scheduling.k8s.io");
    TEST_EQ_STR(W.log[1], line);
    TEST_EQ_INT(wl_pod_posts(), 0);
    TEST_CHECK(exec_expect_met(sh.expect, "ml/j", time(NULL))); /* the held pods are not awaited */
    TEST_CHECK(log_has(logs, "feature gates GenericWorkload and GangScheduling"));
    TEST_CHECK(!log_has(logs, "v1alpha2"));
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_UNSERVED_V1ALPHA2), OP_ENOTFOUND);
    TEST_EQ_INT(wl_pod_posts(), 0);
    TEST_CHECK(log_has(logs, "serves scheduling.k8s.io/v1alpha2 (Kubernetes 1.36 and later"));
    log_set_fd(2);
    log_set_level(LOG_LEVEL_ERROR);

    /* 3. ours, minCount = replicas: adopted, pods created */
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_OURS), 0);
    TEST_EQ_INT(W.n, 4);
    snprintf(line, sizeof(line), "GET %s/j", wl);
    TEST_EQ_STR(W.log[1], line);
    TEST_EQ_INT(wl_pod_posts(), 2);

    /* 4. ours with another minCount (replicas changed while suspended; its spec is immutable):
     *    deleted with a UID precondition and made again, then the pods */
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_OURS_OTHER_MIN), 0);
    TEST_EQ_INT(W.n, 6);
    snprintf(line, sizeof(line), "DELETE %s/j", wl);
    TEST_EQ_STR(W.log[2], line);
    TEST_CHECK(strstr(W.delete_body, "wl-1") != NULL);
    snprintf(line, sizeof(line), "POST %s", wl);
    TEST_EQ_STR(W.log[3], line);
    TEST_EQ_INT(wl_pod_posts(), 2);

    /* 5. someone else's Workload of that name: not used, not deleted, no pod */
    TEST_EQ_INT(wl_apply(&w, obj, &tj, WL_FOREIGN), OP_EEXIST);
    TEST_EQ_INT(W.n, 2);
    TEST_EQ_INT(wl_pod_posts(), 0);
    TEST_EQ_STR(W.delete_body, "");

    tj_cleanup(&tj);
    json_decref(obj);
    exec_expect_free(sh.expect);
    kube_client_free(w.kc);
    testsrv_stop(srv);
    fclose(logs);
}

/* Kueue: what the executor adds around rec's actions (exec.c kueue_priority, kueue_place) and
 * how it writes a Workload's status, against a server that plays the API server with Kueue. */
static struct {
    pthread_mutex_t mu;
    char log[16][200];
    char bodies[16][1024];
    int n;
    bool forbid_list; /* answer the PriorityClass list with 403 */
} K = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int kq_handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *req)
{
    static const char missing[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
        "\"NotFound\",\"code\":404,\"message\":\"not found\"}";
    char ctype[128] = "";

    (void)ud;
    testsrv_header(req, "Content-Type", ctype, sizeof(ctype));
    pthread_mutex_lock(&K.mu);
    if (K.n < 16) {
        snprintf(K.log[K.n], sizeof(K.log[0]), "%s %.140s %.40s", req->method, req->path,
                 strcmp(req->method, "PATCH") == 0 ? ctype : "");
        snprintf(K.bodies[K.n++], sizeof(K.bodies[0]), "%.1000s", req->body ? req->body : "");
    }
    pthread_mutex_unlock(&K.mu);
    if (strstr(req->path, "/resourceflavors/f1"))
        testsrv_respond(c, 200, NULL, "{\"kind\":\"ResourceFlavor\",\"metadata\":{\"name\":"
                        "\"f1\"},\"spec\":{\"nodeLabels\":{\"pool\":\"a\"},\"tolerations\":[{"
                        "\"key\":\"dedicated\",\"operator\":\"Exists\"}]}}");
    else if (strstr(req->path, "/workloadpriorityclasses/high"))
        testsrv_respond(c, 200, NULL, "{\"kind\":\"WorkloadPriorityClass\",\"value\":1000}");
    else if (strcmp(req->path, "/apis/scheduling.k8s.io/v1/priorityclasses/batch") == 0)
        testsrv_respond(c, 200, NULL, "{\"kind\":\"PriorityClass\",\"value\":-5}");
    else if (strncmp(req->path, "/apis/scheduling.k8s.io/v1/priorityclasses?", 43) == 0 &&
             K.forbid_list)
        testsrv_respond(c, 403, NULL, "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":"
                        "\"Forbidden\",\"code\":403,\"message\":\"forbidden\"}");
    else if (strncmp(req->path, "/apis/scheduling.k8s.io/v1/priorityclasses?", 43) == 0)
        /* two global defaults (a race can make them): the lower value wins, as in Kueue */
        testsrv_respond(c, 200, NULL, "{\"kind\":\"PriorityClassList\",\"metadata\":{},"
                        "\"items\":[{\"metadata\":{\"name\":\"big\"},\"value\":900},"
                        "{\"metadata\":{\"name\":\"dflt\"},\"value\":30,\"globalDefault\":true},"
                        "{\"metadata\":{\"name\":\"dflt2\"},\"value\":60,\"globalDefault\":true}]}");
    else if (strstr(req->path, "/resourceflavors/") || strstr(req->path, "/workloadpriority"))
        testsrv_respond(c, 404, NULL, missing);
    else
        testsrv_respond(c, strcmp(req->method, "POST") == 0 ? 201 : 200, NULL, "{}");
    return 0;
}

/* Applies r (taken) and returns exec_apply's result; K holds what the server saw. */
static int kq_apply(struct exec_worker *w, const json_t *obj, const struct tj *tj,
                    struct rec_result *r)
{
    int rc;

    K.n = 0;
    rc = exec_apply(w, obj, tj, r);
    rec_result_cleanup(r);
    exec_expect_forget(w->sh->expect, "ml/j");
    return rc;
}

static int kq_count(const char *prefix)
{
    int n = 0;

    for (int i = 0; i < K.n; i++)
        n += strncmp(K.log[i], prefix, strlen(prefix)) == 0;
    return n;
}

static void test_apply_kueue(void)
{
    struct testsrv *srv = testsrv_start(kq_handler, NULL);
    struct kube_config cfg = {0};
    struct exec_shared sh = {0};
    struct exec_worker w = {.sh = &sh};
    struct rec_result r;
    struct tj tj;
    char server[64];
    json_t *body, *obj = json_loads(
        "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j\",\"namespace\":\"ml\",\"uid\":\"u\","
        "\"resourceVersion\":\"5\",\"labels\":{\"kueue.x-k8s.io/queue-name\":\"team\","
        "\"kueue.x-k8s.io/priority-class\":\"high\"}},\"spec\":{\"replicas\":2}}", 0, NULL);

    rig_client(srv, &cfg, server, sizeof(server), &w);
    sh.expect = exec_expect_new();
    TEST_EQ_INT(tj_parse(obj, &tj, NULL, 0), 0);

    /* 1. the Workload gets its WorkloadPriorityClass's value as spec.priority */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){.verb = REC_CREATE, .kind = REC_KUEUE,
                                                  .obj = render_kueue_workload(&tj)};
    render_kueue_name(&tj, r.actions[0].name, sizeof(r.actions[0].name));
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(K.n, 2);
    TEST_CHECK(strstr(K.log[0], "GET /apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/high"));
    TEST_CHECK(strstr(K.log[1], "POST /apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads"));
    body = json_loads(K.bodies[1], 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(body, "spec"), "priority")),
                1000);
    json_decref(body);

    /* 1b. no label, pods that name a PriorityClass: that one's value */
    tj.priority[0] = '\0';
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){.verb = REC_CREATE, .kind = REC_KUEUE,
                                                  .name = "y", .obj = render_kueue_workload(&tj)};
    json_object_set_new(json_object_get(r.actions[0].obj, "spec"), "priorityClassRef",
                        json_pack("{s:s, s:s, s:s}", "group", "scheduling.k8s.io", "kind",
                                  "PriorityClass", "name", "batch"));
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(K.n, 2);
    TEST_EQ_STR(K.log[0], "GET /apis/scheduling.k8s.io/v1/priorityclasses/batch ");
    body = json_loads(K.bodies[1], 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(body, "spec"), "priority")),
                -5);
    json_decref(body);

    /* 1c. neither: the cluster's default PriorityClass (globalDefault; of two, the lower) */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){.verb = REC_CREATE, .kind = REC_KUEUE,
                                                  .name = "z", .obj = render_kueue_workload(&tj)};
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(K.n, 2);
    TEST_CHECK(strncmp(K.log[0], "GET /apis/scheduling.k8s.io/v1/priorityclasses?", 47) == 0);
    body = json_loads(K.bodies[1], 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(body, "spec"), "priority")),
                30);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(json_object_get(
                    body, "spec"), "priorityClassRef"), "name")), "dflt");
    json_decref(body);
    /* ... and when listing them is forbidden, none: the Workload is still made */
    K.forbid_list = true;
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){.verb = REC_CREATE, .kind = REC_KUEUE,
                                                  .name = "z", .obj = render_kueue_workload(&tj)};
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(kq_count("POST"), 1);
    body = json_loads(K.bodies[K.n - 1], 0, NULL);
    TEST_CHECK(json_object_get(json_object_get(body, "spec"), "priority") == NULL);
    json_decref(body);
    K.forbid_list = false;

    /* 2. a priority class that does not exist: no Workload, an error naming the label */
    snprintf(tj.priority, sizeof(tj.priority), "nope");
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){.verb = REC_CREATE, .kind = REC_KUEUE,
                                                  .name = "x", .obj = render_kueue_workload(&tj)};
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), OP_ENOTFOUND);
    TEST_EQ_INT(kq_count("POST"), 0);
    snprintf(tj.priority, sizeof(tj.priority), "high");

    /* 3. admitted on flavor f1 (for cpu and memory: read once): its node label and toleration
     *    go on every pod */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    add(&r, REC_CREATE, "j-worker-0", 0, NULL);
    add(&r, REC_CREATE, "j-worker-1", 1, NULL);
    json_object_set_new(r.actions[1].obj, "spec", json_pack("{s:{s:s}}", "nodeSelector", "zone",
                                                            "z1"));
    r.kueue_flavors = json_pack("{s:s, s:s}", "cpu", "f1", "memory", "f1");
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(kq_count("GET /apis/kueue.x-k8s.io/v1beta2/resourceflavors/f1"), 1);
    TEST_EQ_INT(kq_count("POST /api/v1/namespaces/ml/pods"), 2);
    for (int i = 0; i < K.n; i++) {
        json_t *spec;
        if (strncmp(K.log[i], "POST", 4) != 0)
            continue;
        body = json_loads(K.bodies[i], 0, NULL);
        spec = json_object_get(body, "spec");
        TEST_EQ_STR(json_string_value(json_object_get(json_object_get(spec, "nodeSelector"),
                                                      "pool")), "a");
        TEST_EQ_INT(json_array_size(json_object_get(spec, "tolerations")), 1);
        json_decref(body);
    }
    TEST_CHECK(strstr(K.bodies[2], "\"zone\":\"z1\"") || strstr(K.bodies[1], "\"zone\":\"z1\""));

    /* 4. a template nodeSelector that contradicts the flavor, or a flavor that cannot be read:
     *    no pod at all (it could never be placed where Kueue reserved its quota) */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    add(&r, REC_CREATE, "j-worker-0", 0, NULL);
    json_object_set_new(r.actions[0].obj, "spec", json_pack("{s:{s:s}}", "nodeSelector", "pool",
                                                            "b"));
    r.kueue_flavors = json_pack("{s:s}", "cpu", "f1");
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), OP_EINVALID);
    TEST_EQ_INT(kq_count("POST /api/v1/namespaces/ml/pods"), 0);
    TEST_CHECK(exec_expect_met(sh.expect, "ml/j", time(NULL))); /* the held pod is not awaited */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    add(&r, REC_CREATE, "j-worker-0", 0, NULL);
    r.kueue_flavors = json_pack("{s:s}", "cpu", "gone");
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), OP_ENOTFOUND);
    TEST_EQ_INT(kq_count("POST /api/v1/namespaces/ml/pods"), 0);

    /* 5. a Workload's status: a merge patch of its status subresource, as rec made it */
    memset(&r, 0, sizeof(r));
    r.actions = calloc(4, sizeof(*r.actions));
    r.actions[r.nactions++] = (struct rec_action){
        .verb = REC_UPDATE, .kind = REC_KUEUE, .name = "wl",
        .obj = json_pack("{s:{s:s, s:s}, s:{s:n, s:[]}}", "metadata", "name", "wl",
                         "resourceVersion", "41", "status", "admission", "conditions")};
    TEST_EQ_INT(kq_apply(&w, obj, &tj, &r), 0);
    TEST_EQ_INT(K.n, 1);
    TEST_EQ_STR(K.log[0], "PATCH /apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/wl/status "
                          "application/merge-patch+json");
    TEST_CHECK(strstr(K.bodies[0], "\"admission\":null") && strstr(K.bodies[0], "\"41\""));

    tj_cleanup(&tj);
    json_decref(obj);
    exec_expect_free(sh.expect);
    kube_client_free(w.kc);
    testsrv_stop(srv);
}

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR); /* the executor's info/warn lines are expected here */
    TEST_RUN(test_expectations);
    TEST_RUN(test_expect_delete_twice);
    TEST_RUN(test_handlers_route_to_job);
    TEST_RUN(test_pod_record);
    TEST_RUN(test_child_record);
    TEST_RUN(test_pod_index);
    TEST_RUN(test_apply_against_server);
    TEST_RUN(test_apply_workload);
    TEST_RUN(test_apply_kueue);
    return test_summary();
}
