/*
 * Leader election against an in-memory Lease server on testsrv that enforces what matters:
 * 404 before creation, 409 AlreadyExists on a second create, 409 Conflict on a PUT whose
 * resourceVersion is not the current one.
 */
#include "operator/kube/lease.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/testsrv.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *lease; /* the stored object, or NULL */
static long rv = 100;
static atomic_int conflicts;
static int get_delay_ms; /* answer GETs late, with what was read on arrival: forces races */

static void respond_json(struct testsrv_conn *c, int code, json_t *o)
{
    char *t = json_dumps(o, JSON_COMPACT);
    testsrv_respond(c, code, NULL, t);
    free(t);
}

static void status(struct testsrv_conn *c, int code, const char *reason)
{
    json_t *s = json_pack("{s:s, s:i, s:s, s:s}", "kind", "Status", "code", code, "reason", reason,
                          "message", reason);
    respond_json(c, code, s);
    json_decref(s);
}

static int handler(void *ud, struct testsrv_conn *c, const struct testsrv_req *r)
{
    char rvs[32];
    json_t *body = r->body_len ? json_loads(r->body, 0, NULL) : NULL;

    pthread_mutex_lock(&mu);
    if (strcmp(r->method, "GET") == 0) {
        json_t *snap = lease ? json_deep_copy(lease) : NULL;
        pthread_mutex_unlock(&mu);
        usleep((useconds_t)get_delay_ms * 1000);
        if (snap)
            respond_json(c, 200, snap);
        else
            status(c, 404, "NotFound");
        json_decref(snap);
        json_decref(body);
        return 0;
    } else if (strcmp(r->method, "POST") == 0) {
        if (lease) {
            status(c, 409, "AlreadyExists");
        } else {
            snprintf(rvs, sizeof(rvs), "%ld", ++rv);
            json_object_set_new(json_object_get(body, "metadata"), "resourceVersion",
                                json_string(rvs));
            lease = json_incref(body);
            respond_json(c, 201, lease);
        }
    } else if (strcmp(r->method, "PUT") == 0) {
        const char *want = kube_object_rv(body);
        snprintf(rvs, sizeof(rvs), "%ld", rv);
        if (!lease || !want || strcmp(want, rvs) != 0) {
            atomic_fetch_add(&conflicts, 1);
            status(c, 409, "Conflict");
        } else {
            snprintf(rvs, sizeof(rvs), "%ld", ++rv);
            json_object_set_new(json_object_get(body, "metadata"), "resourceVersion",
                                json_string(rvs));
            json_decref(lease);
            lease = json_incref(body);
            respond_json(c, 200, lease);
        }
    } else {
        status(c, 405, "MethodNotAllowed");
    }
    pthread_mutex_unlock(&mu);
    json_decref(body);
    return 0;
}

static const char *holder(void)
{
    static char h[64];
    pthread_mutex_lock(&mu);
    snprintf(
        h, sizeof(h), "%s",
        json_string_value(json_object_get(json_object_get(lease, "spec"), "holderIdentity"))
            ? json_string_value(json_object_get(json_object_get(lease, "spec"), "holderIdentity"))
            : "");
    pthread_mutex_unlock(&mu);
    return h;
}

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static atomic_int a_started, a_stopped;
static void a_on(void *ud)
{
    atomic_fetch_add(&a_started, 1);
}
static void a_off(void *ud)
{
    atomic_fetch_add(&a_stopped, 1);
}

static void test_acquire_handover_release(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    struct kube_config cfg = {0};
    char server[64];
    struct lease_opts o = {.namespace = "ops",
                           .name = "gantry",
                           .identity = "a",
                           .lease_duration_ms = 1000,
                           .renew_deadline_ms = 700,
                           .retry_period_ms = 100,
                           .on_started = a_on,
                           .on_stopped = a_off};

    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server;
    struct lease_elector *a = lease_new(&cfg, NULL, &o);
    o.identity = "b";
    o.on_started = o.on_stopped = NULL;
    struct lease_elector *b = lease_new(&cfg, NULL, &o);
    o.identity = "c";
    struct lease_elector *c = lease_new(&cfg, NULL, &o);

    /* one-shot attempts: a creates the Lease, b is refused while a renews */
    TEST_EQ_INT(lease_try(a), 0);
    TEST_EQ_STR(holder(), "a");
    TEST_EQ_INT(lease_try(b), OP_ENOTLEADER);
    TEST_EQ_INT(lease_try(a), 0); /* renew */
    TEST_EQ_INT(lease_try(b), OP_ENOTLEADER);

    TEST_EQ_INT(lease_start(a), 0);
    TEST_EQ_INT(lease_start(b), 0);
    usleep(600 * 1000);
    TEST_CHECK(lease_is_leader(a));
    TEST_CHECK(!lease_is_leader(b));
    TEST_EQ_INT(atomic_load(&a_started), 1);

    /* a stops renewing without releasing: b waits out the lease duration on its own clock */
    lease_stop(a, false);
    TEST_EQ_INT(atomic_load(&a_stopped), 1);
    double t0 = mono();
    while (!lease_is_leader(b) && mono() - t0 < 5)
        usleep(10000);
    double took = mono() - t0;
    TEST_CHECK(lease_is_leader(b));
    TEST_CHECK(took >= 0.5 && took < 2.5);
    TEST_EQ_STR(holder(), "b");
    pthread_mutex_lock(&mu);
    TEST_EQ_INT(
        json_integer_value(json_object_get(json_object_get(lease, "spec"), "leaseTransitions")), 1);
    pthread_mutex_unlock(&mu);

    /* b releases: c acquires at its next attempt, without waiting for the duration */
    lease_stop(b, true);
    TEST_EQ_STR(holder(), "");
    t0 = mono();
    TEST_EQ_INT(lease_try(c), 0);
    TEST_CHECK(mono() - t0 < 0.5);
    TEST_EQ_STR(holder(), "c");
    lease_free(a);
    lease_free(b);
    lease_free(c);
    testsrv_stop(srv);
    json_decref(lease);
    lease = NULL;
}

/* Two candidates that read the same expired record race for it: exactly one wins. */
static void test_rv_guard(void)
{
    struct testsrv *srv = testsrv_start(handler, NULL);
    struct kube_config cfg = {0};
    char server[64];
    struct lease_opts o = {.namespace = "ops",
                           .name = "race",
                           .identity = "x",
                           .lease_duration_ms = 1000,
                           .renew_deadline_ms = 700,
                           .retry_period_ms = 100};

    snprintf(server, sizeof(server), "http://127.0.0.1:%d", testsrv_port(srv));
    cfg.server = server;
    /* A Lease released by a dead process, at resourceVersion 100. */
    rv = 100;
    get_delay_ms = 150;
    lease = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:s, s:i, s:i}}", "apiVersion",
                      "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", "race",
                      "namespace", "ops", "resourceVersion", "100", "spec", "holderIdentity", "",
                      "leaseDurationSeconds", 1, "leaseTransitions", 4);
    struct lease_elector *e[8];
    pthread_t th[8];
    atomic_int wins = 0;
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof(id), "p%d", i);
        o.identity = id;
        e[i] = lease_new(&cfg, NULL, &o);
    }
    atomic_store(&conflicts, 0);
    for (int i = 0; i < 8; i++)
        TEST_EQ_INT(lease_start(e[i]), 0);
    usleep(500 * 1000);
    for (int i = 0; i < 8; i++)
        wins += lease_is_leader(e[i]);
    TEST_EQ_INT(wins, 1);
    printf("  %d conflicting writes refused\n", atomic_load(&conflicts));
    TEST_CHECK(atomic_load(&conflicts) >= 1); /* they did race, and the RV guard decided */
    get_delay_ms = 0;
    for (int i = 0; i < 8; i++)
        lease_free(e[i]);
    (void)th;
    testsrv_stop(srv);
    json_decref(lease);
    lease = NULL;
}

int main(void)
{
    TEST_RUN(test_acquire_handover_release);
    TEST_RUN(test_rv_guard);
    return test_summary();
}
