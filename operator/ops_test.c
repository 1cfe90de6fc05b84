/* ops_test.c - /healthz, /readyz and /metrics of gantry-operator over real HTTP on loopback. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/test.h"
#include "operator/ops.h"

static size_t on_body(char *d, size_t size, size_t n, void *ud)
{
    return buf_append(ud, d, size * n) == 0 ? size * n : 0;
}

/* GETs path from 127.0.0.1:port; returns the status (0 on transport error), body in b. */
static long get(int port, const char *path, struct buf *b)
{
    CURL *c = curl_easy_init();
    char url[128];
    long code = 0;

    buf_reset(b);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    if (buf_append(b, "", 1) != 0) /* NUL-terminate for strstr */
        return 0;
    return code;
}

static void test_parse_addr(void)
{
    char host[64];
    int port = -1;

    TEST_EQ_INT(ops_parse_addr(":8081", host, sizeof(host), &port), 0);
    TEST_EQ_STR(host, "0.0.0.0");
    TEST_EQ_INT(port, 8081);
    TEST_EQ_INT(ops_parse_addr("127.0.0.1:0", host, sizeof(host), &port), 0);
    TEST_EQ_STR(host, "127.0.0.1");
    TEST_EQ_INT(port, 0);
    TEST_EQ_INT(ops_parse_addr("9090", host, sizeof(host), &port), 0);
    TEST_EQ_INT(port, 9090);
    TEST_EQ_INT(ops_parse_addr(":70000", host, sizeof(host), &port), -1);
    TEST_EQ_INT(ops_parse_addr("localhost:80", host, sizeof(host), &port), -1);
    TEST_EQ_INT(ops_parse_addr(":", host, sizeof(host), &port), -1);
    TEST_EQ_INT(ops_parse_addr(":8x", host, sizeof(host), &port), -1);
}

static void test_health_ready(void)
{
    struct ops *o = ops_new(true);
    struct exec_shared sh = {0};
    struct buf b;
    int hp;

    buf_init(&b, 1 << 20);
    TEST_EQ_INT(ops_serve(o, "127.0.0.1:0", "127.0.0.1:0"), 0);
    hp = ops_port(o, 0);
    TEST_CHECK(hp > 0 && ops_port(o, 1) > 0 && hp != ops_port(o, 1));
    TEST_EQ_INT(get(hp, "/healthz", &b), 200);
    TEST_EQ_INT(get(hp, "/readyz", &b), 503); /* starting */
    TEST_CHECK(strstr(buf_ptr(&b), "starting") != NULL);
    ops_set_standby(o, true);
    TEST_EQ_INT(get(hp, "/readyz", &b), 200); /* a healthy standby is ready to take over */
    TEST_CHECK(strstr(buf_ptr(&b), "standby") != NULL);
    ops_set_standby(o, false);
    ops_set_leading(o, true);
    TEST_EQ_INT(get(hp, "/readyz", &b), 503); /* leading, caches not synced */
    sh.queue = queue_new(0, 0);
    queue_add(sh.queue, "ml/a");
    queue_add(sh.queue, "ml/b");
    exec_stats_observe(&sh.stats, 0.003);
    exec_stats_observe(&sh.stats, 0.2);
    exec_stats_observe(&sh.stats, 99);
    atomic_store(&sh.stats.gang_restarts, 3);
    atomic_store(&sh.stats.gang_disruptions, 2);
    atomic_store(&sh.stats.gang_resizes, 4);
    ops_set_controller(o, &sh);
    TEST_EQ_INT(get(hp, "/readyz", &b), 200);
    TEST_EQ_INT(get(ops_port(o, 1), "/metrics", &b), 200);
    const char *m = buf_ptr(&b);
    TEST_CHECK(strstr(m, "# TYPE gantry_operator_reconcile_duration_seconds histogram\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_bucket{le=\"0.001\"} 0\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_bucket{le=\"0.25\"} 2\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_bucket{le=\"10\"} 2\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_count 3\n"));
    TEST_CHECK(strstr(m, "gantry_operator_reconcile_duration_seconds_sum 99.203"));
    TEST_CHECK(strstr(m, "gantry_operator_workqueue_depth 2\n"));
    TEST_CHECK(strstr(m, "gantry_operator_gang_restarts_total 3\n"));
    TEST_CHECK(strstr(m, "gantry_operator_gang_disruptions_total 2\n"));
    TEST_CHECK(strstr(m, "gantry_operator_gang_resizes_total 4\n"));
    TEST_CHECK(strstr(m, "gantry_operator_leader 1\n"));
    TEST_CHECK(strstr(m, "gantry_operator_ready 1\n"));
    TEST_CHECK(strstr(m, "gantry_operator_watch_relists_total{resource=\"pods\"} 0\n"));
    TEST_CHECK(strstr(m, "gantry_operator_trainingjobs{phase=\"Running\"} 0\n"));
    TEST_CHECK(strstr(m, "process_resident_memory_bytes ") &&
               !strstr(m, "process_resident_memory_bytes 0\n"));
    TEST_EQ_INT(get(hp, "/nope", &b), 404);
    ops_set_stopping(o);
    TEST_EQ_INT(get(hp, "/readyz", &b), 503);
    ops_set_controller(o, NULL);
    TEST_EQ_INT(get(ops_port(o, 1), "/metrics", &b), 200);
    TEST_CHECK(strstr(buf_ptr(&b), "gantry_operator_workqueue_depth") == NULL);
    ops_free(o);
    queue_free(sh.queue);
    buf_cleanup(&b);
}

static void test_shared_and_off(void)
{
    struct ops *o = ops_new(false);
    struct buf b;

    buf_init(&b, 1 << 20);
    TEST_EQ_INT(ops_serve(o, NULL, ""), 0); /* both off */
    TEST_EQ_INT(ops_port(o, 0), 0);
    TEST_EQ_INT(ops_port(o, 1), 0);
    ops_free(o);
    o = ops_new(false);
    TEST_EQ_INT(ops_serve(o, "bad", NULL), OP_ECONFIG);
    ops_free(o);
    o = ops_new(false); /* no election: "starting" until it leads, never a standby */
    TEST_EQ_INT(ops_serve(o, "127.0.0.1:0", NULL), 0);
    ops_set_standby(o, true);
    TEST_EQ_INT(get(ops_port(o, 0), "/readyz", &b), 503);
    ops_free(o);
    buf_cleanup(&b);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    TEST_RUN(test_parse_addr);
    TEST_RUN(test_health_ready);
    TEST_RUN(test_shared_and_off);
    curl_global_cleanup();
    return test_summary();
}
