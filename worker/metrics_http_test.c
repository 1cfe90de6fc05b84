/*
 * metrics_http_test.c - the metrics server over real HTTP on loopback (an ephemeral port),
 * fetched with libcurl: /metrics and /progress reflect updates made while serving, content
 * types, 404 and 405, HEAD, and a clear failure for a port in use or a bad address.
 */
#include "worker/metrics.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/test.h"

struct reply {
    long status;
    char type[128];
    struct buf body;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;

    return buf_append(&r->body, p, size * n) == 0 ? size * n : 0;
}

/* Fetches http://127.0.0.1:port/path with `method`; 0 on a completed exchange. */
static int fetch(int port, const char *path, const char *method, struct reply *r)
{
    CURL *c = curl_easy_init();
    char url[256];
    char *type = NULL;
    CURLcode rc;

    memset(r, 0, sizeof(*r));
    buf_init(&r->body, 1 << 20);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "POST") == 0)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "x=1");
    rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fprintf(stderr, "       %s %s: %s\n", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type)
        snprintf(r->type, sizeof(r->type), "%s", type);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

static void step(struct metrics *m, int64_t n, double now)
{
    struct metrics_step s = {
        .step = n, .epoch = 1, .loss = 0.5, .lr = 1e-3, .samples = 64, .tokens = 4096, .now = now};
    metrics_step(m, &s);
}

static void test_serve(void)
{
    struct metrics *m = metrics_new();
    struct reply r;

    TEST_EQ_INT(metrics_port(m), 0);
    if (!TEST_CHECK(metrics_serve(m, "127.0.0.1", 0) == 0))
        goto out;
    int port = metrics_port(m);
    TEST_CHECK(port > 0 && port < 65536);

    /* Before training: state starting, no steps. */
    TEST_EQ_INT(fetch(port, "/progress", "GET", &r), 0);
    TEST_EQ_INT(r.status, 200);
    TEST_EQ_STR(r.type, "application/json");
    TEST_CHECK(strstr(buf_ptr(&r.body), "\"state\":\"starting\"") != NULL);
    buf_cleanup(&r.body);

    metrics_begin(m, 0, 1000, 2, 8, 50.0);
    for (int i = 1; i <= 40; i++)
        step(m, i, 50.0 + 0.25 * i); /* 4 steps/s, 256 samples/s */
    metrics_checkpoint(m, 40, 0.5);
    metrics_allreduce(m, 0.004);
    metrics_eval(m, "accuracy", 0.875);

    TEST_EQ_INT(fetch(port, "/metrics", "GET", &r), 0);
    TEST_EQ_INT(r.status, 200);
    TEST_EQ_STR(r.type, "text/plain; version=0.0.4; charset=utf-8");
    const char *t = buf_ptr(&r.body);
    TEST_CHECK(strstr(t, "\ngantry_train_step 40\n") != NULL);
    TEST_CHECK(strstr(t, "\ngantry_train_samples_per_second 256\n") != NULL);
    TEST_CHECK(strstr(t, "\ngantry_train_eta_seconds 240\n") != NULL);
    TEST_CHECK(strstr(t, "\ngantry_train_last_checkpoint_step 40\n") != NULL);
    TEST_CHECK(strstr(t, "\ngantry_train_allreduce_duration_seconds_bucket{le=\"0.005\"} 1\n"));
    TEST_CHECK(strstr(t, "\ngantry_train_eval{metric=\"accuracy\"} 0.875\n") != NULL);
    buf_cleanup(&r.body);

    TEST_EQ_INT(fetch(port, "/progress", "GET", &r), 0);
    json_t *j = json_loads(buf_ptr(&r.body), 0, NULL);
    TEST_CHECK(j != NULL);
    TEST_EQ_STR(json_string_value(json_object_get(j, "state")), "running");
    TEST_EQ_INT(json_integer_value(json_object_get(j, "step")), 40);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "world_size")), 8);
    TEST_NEAR(json_number_value(json_object_get(j, "percent")), 4.0, 1e-9);
    TEST_NEAR(json_number_value(json_object_get(j, "eta_seconds")), 240.0, 1e-9);
    TEST_NEAR(json_number_value(json_object_get(j, "samples_per_second")), 256.0, 1e-9);
    json_decref(j);
    buf_cleanup(&r.body);

    /* Updates made while serving show in the next scrape. */
    step(m, 41, 60.5);
    TEST_EQ_INT(fetch(port, "/metrics", "GET", &r), 0);
    TEST_CHECK(strstr(buf_ptr(&r.body), "\ngantry_train_step 41\n") != NULL);
    buf_cleanup(&r.body);

    TEST_EQ_INT(fetch(port, "/healthz", "GET", &r), 0);
    TEST_EQ_INT(r.status, 200);
    TEST_EQ_STR(buf_ptr(&r.body), "ok\n");
    buf_cleanup(&r.body);

    TEST_EQ_INT(fetch(port, "/nope", "GET", &r), 0);
    TEST_EQ_INT(r.status, 404);
    buf_cleanup(&r.body);

    TEST_EQ_INT(fetch(port, "/metrics", "POST", &r), 0);
    TEST_EQ_INT(r.status, 405);
    buf_cleanup(&r.body);

    TEST_EQ_INT(fetch(port, "/metrics", "HEAD", &r), 0);
    TEST_EQ_INT(r.status, 200);
    TEST_EQ_INT(buf_len(&r.body), 0);
    buf_cleanup(&r.body);

    /* The same port again fails with a message instead of silently serving nothing. */
    struct metrics *m2 = metrics_new();
    TEST_EQ_INT(metrics_serve(m2, "127.0.0.1", port), -1);
    TEST_EQ_INT(metrics_port(m2), 0);
    TEST_EQ_INT(metrics_serve(m2, "not-an-ip", 0), -1);
    TEST_EQ_INT(metrics_serve(m2, "127.0.0.1", 70000), -1);
    metrics_free(m2);
out:
    metrics_free(m);
}

/*
 * A hang as the operator sees it: the training thread is stuck (say in a collective whose peer
 * died) but the server thread still answers, with the same step and a growing
 * seconds_since_last_step.
 */
static void test_stalled_step_visible(void)
{
    struct metrics *m = metrics_new();
    struct reply r;
    json_t *j;

    if (!TEST_CHECK(metrics_serve(m, "127.0.0.1", 0) == 0)) {
        metrics_free(m);
        return;
    }
    metrics_begin(m, 0, 100, 1, 2, 0);
    step(m, 7, 0);
    struct timespec pause = {1, 200000000};
    nanosleep(&pause, NULL);
    TEST_EQ_INT(fetch(metrics_port(m), "/progress", "GET", &r), 0);
    j = json_loads(buf_ptr(&r.body), 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "step")), 7);
    double since = json_number_value(json_object_get(j, "seconds_since_last_step"));
    TEST_CHECK(since >= 1.1 && since < 60);
    json_decref(j);
    buf_cleanup(&r.body);
    metrics_free(m);
}

/* After metrics_free() the port is closed. */
static void test_stop(void)
{
    struct metrics *m = metrics_new();
    struct reply r;
    int port;

    if (!TEST_CHECK(metrics_serve(m, "127.0.0.1", 0) == 0)) {
        metrics_free(m);
        return;
    }
    port = metrics_port(m);
    metrics_free(m);
    TEST_EQ_INT(fetch(port, "/healthz", "GET", &r), -1);
    buf_cleanup(&r.body);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    TEST_RUN(test_serve);
    TEST_RUN(test_stalled_step_visible);
    TEST_RUN(test_stop);
    curl_global_cleanup();
    return test_summary();
}
