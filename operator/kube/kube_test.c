/* Unit tests of the request layer against testsrv (plain HTTP on loopback). */
#include "operator/kube/kube.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/testsrv.h"

/* The handler's script: what each test wants the server to do, and what it saw. */
struct script {
    atomic_int calls;
    int fail_first; /* answer this many calls with fail_code first */
    int fail_code;
    const char *fail_headers;
    int sleep_ms;
    int big;                 /* answer with this many bytes */
    struct testsrv_req last; /* copy of the last request (body cut) */
    char last_body[4096];
    int expire_continue_once;
    const char *list_body; /* answer GETs of /api/v1/namespaces/raw/pods with this */
};
static struct script S;

static const char *status_body(int code, const char *reason, const char *msg, char *buf, size_t n)
{
    snprintf(buf, n,
             "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
             "\"message\":\"%s\",\"reason\":\"%s\",\"code\":%d}",
             msg, reason, code);
    return buf;
}

static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *r)
{
    char body[8192], *q;
    int n = atomic_fetch_add(&S.calls, 1);

    S.last = *r;
    snprintf(S.last_body, sizeof(S.last_body), "%s", r->body);
    if (S.sleep_ms)
        usleep((useconds_t)S.sleep_ms * 1000);
    if (n < S.fail_first) {
        testsrv_respond(
            c, S.fail_code, S.fail_headers,
            status_body(S.fail_code, "TooManyRequests", "slow down", body, sizeof(body)));
        return 0;
    }
    if (S.list_body && strncmp(r->path, "/api/v1/namespaces/raw/pods?", 28) == 0) {
        testsrv_respond(c, 200, NULL, S.list_body);
        return 0;
    }
    if (strncmp(r->path, "/api/v1/namespaces/ml/pods?", 27) == 0) {
        /* Three pages of two pods; the continue token "p2" expires once when asked to. */
        const char *page = "1";
        if ((q = strstr(r->path, "continue=")))
            page = q + 9;
        if (*page == '2' && S.expire_continue_once) {
            S.expire_continue_once = 0;
            testsrv_respond(c, 410, NULL,
                            status_body(410, "Expired", "continue expired", body, sizeof(body)));
            return 0;
        }
        int p = atoi(page);
        snprintf(body, sizeof(body),
                 "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":"
                 "\"%d\",\"continue\":\"%s\"},\"items\":[{\"metadata\":{\"name\":\"p%d\"}},"
                 "{\"metadata\":{\"name\":\"p%d\"}}]}",
                 100 + p, p < 3 ? (p == 1 ? "2" : "3") : "", 2 * p - 1, 2 * p);
        testsrv_respond(c, 200, NULL, body);
        return 0;
    }
    if (strstr(r->path, "/missing")) {
        testsrv_respond(
            c, 404, NULL,
            status_body(404, "NotFound", "pods \\\"missing\\\" not found", body, sizeof(body)));
        return 0;
    }
    if (strstr(r->path, "/exists")) {
        testsrv_respond(c, 409, NULL,
                        status_body(409, "AlreadyExists", "already exists", body, sizeof(body)));
        return 0;
    }
    if (strstr(r->path, "/stale")) {
        testsrv_respond(
            c, 409, NULL,
            status_body(409, "Conflict", "the object has been modified", body, sizeof(body)));
        return 0;
    }
    if (strstr(r->path, "/secret")) {
        char auth[256] = "";
        testsrv_header(r, "Authorization", auth, sizeof(auth));
        if (strcmp(auth, "Bearer new-token") != 0) {
            testsrv_respond(c, 401, NULL,
                            status_body(401, "Unauthorized", "Unauthorized", body, sizeof(body)));
            return 0;
        }
    }
    if (S.big) {
        char *b = malloc((size_t)S.big + 1);
        memset(b, 'x', (size_t)S.big);
        b[S.big] = 0;
        testsrv_respond(c, 200, NULL, b);
        free(b);
        return 0;
    }
    testsrv_respond(c, 200, NULL,
                    "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\","
                    "\"namespace\":\"ml\",\"resourceVersion\":\"7\"}}");
    return 0;
}

static struct testsrv *srv;

static struct kube_client *client(const struct kube_client_opts *o, const char *token_file)
{
    struct kube_config cfg = {0};
    char server[64];
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server;
    cfg.namespace = "ml";
    cfg.token = token_file ? NULL : "tok-1";
    cfg.token_file = (char *)token_file;
    return kube_client_new(&cfg, o);
}

static void reset(void)
{
    memset(&S, 0, sizeof(S));
}

static void test_get_and_keepalive(void)
{
    struct kube_client *kc = client(NULL, NULL);
    json_t *o = NULL;
    char auth[128];
    long before = testsrv_connections(srv);

    reset();
    for (int i = 0; i < 5; i++) {
        TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &o), 0);
        TEST_EQ_STR(kube_object_rv(o), "7");
        json_decref(o);
    }
    TEST_EQ_INT(testsrv_connections(srv) - before, 1); /* one connection, kept alive */
    TEST_EQ_INT(kube_client_connects(kc), 1);
    TEST_EQ_INT(testsrv_header(&S.last, "Authorization", auth, sizeof(auth)), 0);
    TEST_EQ_STR(auth, "Bearer tok-1");
    kube_client_free(kc);
}

static void test_status_mapping(void)
{
    struct kube_client *kc = client(NULL, NULL);
    json_t *o = NULL, *obj = json_pack("{s:{s:s}}", "metadata", "name", "x");

    reset();
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/missing", &o), OP_ENOTFOUND);
    TEST_EQ_INT(kube_last_status(kc)->code, 404);
    TEST_EQ_STR(kube_last_status(kc)->reason, "NotFound");
    TEST_EQ_STR(kube_last_status(kc)->message, "pods \"missing\" not found");
    TEST_EQ_INT(kube_create(kc, "/api/v1/namespaces/ml/pods/exists", obj, NULL), OP_EEXIST);
    TEST_EQ_INT(kube_replace(kc, "/api/v1/namespaces/ml/pods/stale", obj, NULL), OP_ECONFLICT);
    TEST_EQ_STR(kube_last_status(kc)->reason, "Conflict");
    TEST_EQ_STR(S.last.method, "PUT");
    TEST_CHECK(strstr(S.last_body, "\"name\":\"x\"") != NULL);
    json_decref(obj);
    kube_client_free(kc);
}

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void test_retry_after_and_idempotency(void)
{
    struct kube_client_opts o = {.max_retries = 3};
    struct kube_client *kc = client(&o, NULL);
    json_t *out = NULL, *obj = json_pack("{s:{s:s}}", "metadata", "name", "x");
    double t0;

    reset();
    S.fail_first = 1;
    S.fail_code = 429;
    S.fail_headers = "Retry-After: 1\r\n";
    t0 = mono();
    TEST_EQ_INT(kube_create(kc, "/api/v1/namespaces/ml/pods", obj, &out), 0); /* 429: any verb */
    TEST_CHECK(mono() - t0 >= 0.95);                                          /* honoured */
    TEST_EQ_INT(atomic_load(&S.calls), 2);
    json_decref(out);

    reset();
    S.fail_first = 100;
    S.fail_code = 503;
    TEST_EQ_INT(kube_create(kc, "/api/v1/namespaces/ml/pods", obj, NULL), OP_ESERVER);
    TEST_EQ_INT(atomic_load(&S.calls), 1); /* POST is not idempotent: not repeated on 5xx */
    reset();
    S.fail_first = 2;
    S.fail_code = 500;
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), 0);
    TEST_EQ_INT(atomic_load(&S.calls), 3); /* GET is: two failures, then success */
    json_decref(out);
    reset();
    S.fail_first = 100;
    S.fail_code = 503;
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), OP_ESERVER);
    TEST_EQ_INT(atomic_load(&S.calls), 4); /* 1 + max_retries */
    json_decref(obj);
    kube_client_free(kc);
}

/* The HTTP-date form of Retry-After (what proxies and some gateways send): a date two seconds
 * ahead is waited for (ignored, the 100-200 ms backoff would run instead); a date in the past
 * means "now", not a huge or negative wait. */
static void test_retry_after_date(void)
{
    struct kube_client_opts o = {.max_retries = 3};
    struct kube_client *kc = client(&o, NULL);
    json_t *out = NULL;
    char hdr[96];
    struct tm tm;
    time_t at;
    double t0, dt;

    reset();
    S.fail_first = 1;
    S.fail_code = 429;
    t0 = mono();
    at = time(NULL) + 2;
    strftime(hdr, sizeof(hdr), "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", gmtime_r(&at, &tm));
    S.fail_headers = hdr;
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), 0);
    dt = mono() - t0;
    TEST_CHECK(dt >= 0.95); /* 1-2 s: the date is whole seconds */
    TEST_CHECK(dt < 5.0);
    TEST_EQ_INT(atomic_load(&S.calls), 2);
    json_decref(out);

    reset();
    S.fail_first = 1;
    S.fail_code = 429;
    S.fail_headers = "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n";
    t0 = mono();
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), 0);
    TEST_CHECK(mono() - t0 < 0.9);
    TEST_EQ_INT(atomic_load(&S.calls), 2);
    json_decref(out);
    kube_client_free(kc);
}

static void test_list_pagination_and_restart(void)
{
    struct kube_client *kc = client(NULL, NULL);
    struct kube_list_opts lo = {.limit = 2, .label_selector = "app=x,tier in (a,b)"};
    json_t *items = NULL;
    char *rv = NULL;

    reset();
    TEST_EQ_INT(kube_list(kc, "/api/v1/namespaces/ml/pods", &lo, &items, &rv), 0);
    TEST_EQ_INT(json_array_size(items), 6);
    TEST_EQ_STR(json_string_value(
                    json_object_get(json_object_get(json_array_get(items, 5), "metadata"), "name")),
                "p6");
    TEST_EQ_STR(rv, "101"); /* the snapshot's version: from the first page */
    TEST_EQ_INT(atomic_load(&S.calls), 3);
    TEST_CHECK(strstr(S.last.path, "labelSelector=app%3Dx%2Ctier%20in%20%28a%2Cb%29") != NULL);
    TEST_CHECK(strstr(S.last.path, "limit=2") != NULL);
    json_decref(items);
    free(rv);

    reset();
    S.expire_continue_once = 1;
    TEST_EQ_INT(kube_list(kc, "/api/v1/namespaces/ml/pods", &lo, &items, &rv), 0);
    TEST_EQ_INT(json_array_size(items), 6); /* restarted, no duplicates */
    TEST_EQ_INT(atomic_load(&S.calls), 5);  /* p1, p2 (410), p1, p2, p3 */
    json_decref(items);
    free(rv);
    kube_client_free(kc);
}

static int count_items(void *ud, json_t *items, bool restarted)
{
    json_t *names = ud, *it;
    size_t i;

    json_array_foreach(items, i, it)
        json_array_append(names, json_object_get(json_object_get(it, "metadata"), "name"));
    return json_array_size(names) >= 100 ? 7 : 0; /* "stop" once 100 were seen */
}

/* The page walker parses items one by one: strings with brackets, quotes and escapes inside,
 * metadata after the items, null items, other keys; broken pages are refused. */
static void test_list_page_scan(void)
{
    struct kube_client *kc = client(NULL, NULL);
    json_t *names = json_array();
    char *rv = NULL, big[8000];
    size_t n = 0;

    reset();
    S.list_body = " { \"kind\" : \"PodList\", \"items\" : [ {\"metadata\":{\"name\":\"a]}\\\"[{\","
                  "\"x\":[1,{\"y\":\"}\"}]}} ,{\"metadata\":{\"name\":\"b\\\\\"}, \"n\": -1.5e3, "
                  "\"t\":true,\"z\":null} ], \"apiVersion\":\"v1\", \"metadata\":{\"resourceVersion\":"
                  "\"7\",\"continue\":\"\"} } ";
    TEST_EQ_INT(kube_list_pages(kc, "/api/v1/namespaces/raw/pods", NULL, count_items, names, &rv),
                0);
    TEST_EQ_INT(json_array_size(names), 2);
    TEST_EQ_STR(json_string_value(json_array_get(names, 0)), "a]}\"[{");
    TEST_EQ_STR(json_string_value(json_array_get(names, 1)), "b\\");
    TEST_EQ_STR(rv, "7"); /* metadata after the items */
    free(rv);
    rv = NULL;
    json_array_clear(names);

    S.list_body = "{\"metadata\":{\"resourceVersion\":\"8\"},\"items\":null}";
    TEST_EQ_INT(kube_list_pages(kc, "/api/v1/namespaces/raw/pods", NULL, count_items, names, &rv),
                0);
    TEST_EQ_INT(json_array_size(names), 0);
    TEST_EQ_STR(rv, "8");
    free(rv);
    rv = NULL;

    static const char *const bad[] = {
        "{\"items\":[{\"metadata\":{}}", /* cut short */
        "{\"items\":[{\"a\":1} {\"b\":2}]}", /* no comma */
        "{\"items\":[{\"a\":tru}]}",         /* an item that is not JSON */
        "[]", "", "{\"items\":[1,2]", "{\"metadata\":{\"resourceVersion\":\"1\"}", "{\"a\" 1}",
        "{\"items\":[\"unterminated]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        S.list_body = bad[i];
        TEST_EQ_INT(kube_list_pages(kc, "/api/v1/namespaces/raw/pods", NULL, count_items, names,
                                    NULL),
                    OP_EPARSE);
    }

    /* a nonzero return from the callback ends the list with it */
    n = (size_t)snprintf(big, sizeof(big), "{\"items\":[");
    for (int i = 0; i < 150; i++)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "%s{\"metadata\":{\"name\":\"q%d\"}}",
                              i ? "," : "", i);
    snprintf(big + n, sizeof(big) - n, "]}");
    S.list_body = big;
    json_array_clear(names);
    TEST_EQ_INT(kube_list_pages(kc, "/api/v1/namespaces/raw/pods", NULL, count_items, names, NULL),
                7);
    TEST_EQ_INT(json_array_size(names), 100);
    S.list_body = NULL;
    json_decref(names);
    kube_client_free(kc);
}

static void test_patch_and_delete_requests(void)
{
    struct kube_client *kc = client(NULL, NULL);
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", "a", "b");
    struct kube_patch_opts po = {.field_manager = "gantry", .force = true};
    struct kube_delete_opts dopt = {.propagation_policy = "Foreground",
                                    .precondition_uid = "u-1",
                                    .precondition_rv = "42",
                                    .grace_period_seconds = -1};
    char ct[128];

    reset();
    TEST_EQ_INT(kube_patch(kc, "/api/v1/namespaces/ml/pods/a", KUBE_PATCH_MERGE, patch, NULL, NULL),
                0);
    testsrv_header(&S.last, "Content-Type", ct, sizeof(ct));
    TEST_EQ_STR(ct, "application/merge-patch+json");
    TEST_EQ_STR(S.last.method, "PATCH");
    TEST_EQ_INT(kube_patch(kc, "/api/v1/namespaces/ml/pods/a", KUBE_PATCH_APPLY, patch, &po, NULL),
                0);
    testsrv_header(&S.last, "Content-Type", ct, sizeof(ct));
    TEST_EQ_STR(ct, "application/apply-patch+yaml");
    TEST_EQ_STR(S.last.path, "/api/v1/namespaces/ml/pods/a?fieldManager=gantry&force=true");
    TEST_EQ_INT(kube_patch(kc, "/x", KUBE_PATCH_APPLY, patch, NULL, NULL), OP_EINVAL);
    json_t *jp =
        json_pack("[{s:s, s:s, s:s}]", "op", "add", "path", "/metadata/labels/c", "value", "d");
    TEST_EQ_INT(kube_patch(kc, "/api/v1/namespaces/ml/pods/a", KUBE_PATCH_JSON, jp, NULL, NULL), 0);
    testsrv_header(&S.last, "Content-Type", ct, sizeof(ct));
    TEST_EQ_STR(ct, "application/json-patch+json");
    json_decref(jp);

    TEST_EQ_INT(kube_delete(kc, "/api/v1/namespaces/ml/pods/a", &dopt, NULL), 0);
    TEST_EQ_STR(S.last.method, "DELETE");
    json_t *b = json_loads(S.last_body, 0, NULL);
    TEST_EQ_STR(json_string_value(json_object_get(b, "propagationPolicy")), "Foreground");
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(b, "preconditions"), "uid")),
                "u-1");
    TEST_EQ_STR(
        json_string_value(json_object_get(json_object_get(b, "preconditions"), "resourceVersion")),
        "42");
    TEST_CHECK(json_object_get(b, "gracePeriodSeconds") == NULL);
    json_decref(b);
    /* a zeroed struct keeps the server's grace period; only grace_now sends 0 */
    struct kube_delete_opts zero = {0}, now = {.grace_now = true},
                            thirty = {.grace_period_seconds = 30};
    TEST_EQ_INT(kube_delete(kc, "/api/v1/namespaces/ml/pods/a", &zero, NULL), 0);
    TEST_CHECK(strstr(S.last_body, "gracePeriodSeconds") == NULL);
    TEST_EQ_INT(kube_delete(kc, "/api/v1/namespaces/ml/pods/a", &now, NULL), 0);
    TEST_CHECK(strstr(S.last_body, "\"gracePeriodSeconds\":0") != NULL);
    TEST_EQ_INT(kube_delete(kc, "/api/v1/namespaces/ml/pods/a", &thirty, NULL), 0);
    TEST_CHECK(strstr(S.last_body, "\"gracePeriodSeconds\":30") != NULL);
    json_decref(patch);
    kube_client_free(kc);
}

static void test_bounded_body_and_timeout(void)
{
    struct kube_client_opts o = {.timeout_ms = 300, .max_retries = -1};
    struct kube_client *kc = client(&o, NULL);
    struct buf small;
    json_t *out = NULL;

    reset();
    S.big = 5000;
    buf_init(&small, 1000);
    TEST_EQ_INT(kube_request(kc, "GET", "/big", NULL, NULL, 0, &small), OP_ETOOBIG);
    TEST_CHECK(strstr(kube_last_status(kc)->message, "KUBE_MAX_BODY") != NULL);
    buf_cleanup(&small);
    reset();
    S.sleep_ms = 1000;
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), OP_ETIMEDOUT);
    kube_client_free(kc);
    usleep(800 * 1000); /* let the sleeping handler finish before the next test */
}

static void test_rate_limiter(void)
{
    struct kube_client_opts o = {.qps = 20, .burst = 1};
    struct kube_client *kc = client(&o, NULL);
    json_t *out;
    double t0 = mono();

    reset();
    for (int i = 0; i < 11; i++) {
        TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/pods/a", &out), 0);
        json_decref(out);
    }
    TEST_CHECK(mono() - t0 >= 0.45); /* 10 waits of 50 ms after the first token */
    kube_client_free(kc);
}

static void test_token_refresh_on_401(void)
{
    char dir[] = "/tmp/kube-test-XXXXXX", path[128];
    struct kube_client *kc;
    json_t *out = NULL;
    FILE *f;

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/token", dir);
    f = fopen(path, "w");
    fputs("old-token\n", f);
    fclose(f);
    kc = client(NULL, path);
    reset();
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/secret", &out), OP_EUNAUTHORIZED);
    f = fopen(path, "w"); /* the kubelet rotates the projected token */
    fputs("new-token\n", f);
    fclose(f);
    TEST_EQ_INT(kube_get(kc, "/api/v1/namespaces/ml/secret", &out), 0);
    json_decref(out);
    kube_client_free(kc);
    unlink(path);
    rmdir(dir);
}

static void test_paths(void)
{
    char p[256];
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "pods", "ml", "a", NULL), 0);
    TEST_EQ_STR(p, "/api/v1/namespaces/ml/pods/a");
    TEST_EQ_INT(kube_path(p, sizeof(p), "gantry.dev/v1alpha1", "trainingjobs", "ml", "s", "status"),
                0);
    TEST_EQ_STR(p, "/apis/gantry.dev/v1alpha1/namespaces/ml/trainingjobs/s/status");
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "namespaces", NULL, NULL, NULL), 0);
    TEST_EQ_STR(p, "/api/v1/namespaces");
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "pods", "ml", "../x", NULL), OP_EINVAL);
    TEST_EQ_INT(kube_path(p, 10, "v1", "pods", "ml", "a", NULL), OP_EINVAL);
    json_t *o = json_pack("{s:{s:s, s:s}}", "metadata", "name", "a", "namespace", "ml");
    TEST_EQ_INT(kube_object_key(o, p, sizeof(p)), 0);
    TEST_EQ_STR(p, "ml/a");
    json_decref(o);
}

static void test_status_parse_robust(void)
{
    struct kube_status st;
    TEST_EQ_INT(kube_status_parse("<html>bad gateway</html>", 24, 502, &st), OP_ESERVER);
    TEST_CHECK(strstr(st.message, "HTTP 502: <html>") != NULL);
    TEST_EQ_INT(kube_status_parse("{\"code\":410,\"reason\":\"Expired\"}", 31, 0, &st), OP_EGONE);
    TEST_EQ_INT(st.code, 410);
}

int main(void)
{
    srv = testsrv_start(handler, NULL);
    TEST_RUN(test_get_and_keepalive);
    TEST_RUN(test_status_mapping);
    TEST_RUN(test_retry_after_and_idempotency);
    TEST_RUN(test_retry_after_date);
    TEST_RUN(test_list_pagination_and_restart);
    TEST_RUN(test_list_page_scan);
    TEST_RUN(test_patch_and_delete_requests);
    TEST_RUN(test_bounded_body_and_timeout);
    TEST_RUN(test_rate_limiter);
    TEST_RUN(test_token_refresh_on_401);
    TEST_RUN(test_paths);
    TEST_RUN(test_status_parse_robust);
    testsrv_stop(srv);
    return test_summary();
}
