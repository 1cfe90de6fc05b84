/*
 * kube_api_test.c - the client against a real kube-apiserver + etcd (CTest label "api").
 *
 * Reads the admin kubeconfig from $GANTRY_TEST_KUBECONFIG (exit 77 when unset) and etcd's client
 * URL from $GANTRY_TEST_ETCD or from cluster.env next to the kubeconfig (hack/cluster.sh writes
 * it). Everything happens in a fresh namespace that is deleted at the end.
 */
#include "operator/kube/kube.h"

#include <curl/curl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/test.h"
#include "operator/kube/event.h"
#include "operator/kube/informer.h"
#include "operator/kube/lease.h"
#include "operator/kube/log.h"
#include "operator/kube/watch.h"

static struct kube_config *cfg;
static struct kube_client *kc;
static char ns[64], etcd_url[128];

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void ms_sleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static json_t *configmap(const char *name, const char *value)
{
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s}}", "apiVersion", "v1", "kind",
                     "ConfigMap", "metadata", "name", name, "labels", "test", "kube-api", "data",
                     "k", value);
}

static void cm_path(char *p, size_t n, const char *name)
{
    if (kube_path(p, n, "v1", "configmaps", ns, name, NULL))
        p[0] = 0;
}

/* ---------------------------------------------------------------- verbs */

static void test_verbs_conflicts_and_ssa(void)
{
    char coll[256], p[256];
    json_t *cm = configmap("verbs", "1"), *out = NULL, *got = NULL;
    long before = kube_client_connects(kc);

    cm_path(coll, sizeof(coll), NULL);
    cm_path(p, sizeof(p), "verbs");
    TEST_EQ_INT(kube_create(kc, coll, cm, &out), 0);
    TEST_EQ_INT(kube_create(kc, coll, cm, NULL), OP_EEXIST);
    TEST_EQ_STR(kube_last_status(kc)->reason, "AlreadyExists");
    TEST_EQ_INT(kube_get(kc, p, &got), 0);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(got, "data"), "k")), "1");

    /* replace with the current resourceVersion works; with the old one it is a Conflict */
    char stale_rv[64];
    snprintf(stale_rv, sizeof(stale_rv), "%s", kube_object_rv(got));
    json_object_set_new(json_object_get(got, "data"), "k", json_string("2"));
    json_decref(out);
    TEST_EQ_INT(kube_replace(kc, p, got, &out), 0);
    TEST_CHECK(strcmp(kube_object_rv(out), stale_rv) != 0);
    json_object_set_new(json_object_get(got, "data"), "k", json_string("3"));
    TEST_EQ_INT(kube_replace(kc, p, got, NULL), OP_ECONFLICT); /* got still has the stale RV */
    TEST_EQ_INT(kube_last_status(kc)->code, 409);
    TEST_EQ_STR(kube_last_status(kc)->reason, "Conflict");
    TEST_CHECK(strstr(kube_last_status(kc)->message, "has been modified") != NULL);

    /* merge patch, JSON patch, strategic merge patch */
    json_t *mp = json_pack("{s:{s:s}}", "data", "m", "merge");
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_MERGE, mp, NULL, NULL), 0);
    json_t *jp = json_pack("[{s:s, s:s, s:s}]", "op", "add", "path", "/data/j", "value", "json");
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_JSON, jp, NULL, NULL), 0);
    json_t *bad = json_pack("[{s:s, s:s}]", "op", "remove", "path", "/data/nonexistent");
    TEST_CHECK(kube_patch(kc, p, KUBE_PATCH_JSON, bad, NULL, NULL) < 0);
    json_t *sp = json_pack("{s:{s:s}}", "data", "s", "strategic");
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_STRATEGIC, sp, NULL, NULL), 0);
    json_decref(got);
    TEST_EQ_INT(kube_get(kc, p, &got), 0);
    json_t *data = json_object_get(got, "data");
    TEST_EQ_STR(json_string_value(json_object_get(data, "m")), "merge");
    TEST_EQ_STR(json_string_value(json_object_get(data, "j")), "json");
    TEST_EQ_STR(json_string_value(json_object_get(data, "s")), "strategic");

    /* server-side apply: manager a owns data.owned; b may not take it without force */
    char ssa[256];
    cm_path(ssa, sizeof(ssa), "ssa");
    json_t *apply_a = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind",
                                "ConfigMap", "metadata", "name", "ssa", "data", "owned", "by-a");
    json_t *apply_b = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind",
                                "ConfigMap", "metadata", "name", "ssa", "data", "owned", "by-b");
    struct kube_patch_opts pa = {.field_manager = "manager-a"}, pb = {.field_manager = "manager-b"};
    TEST_EQ_INT(kube_patch(kc, ssa, KUBE_PATCH_APPLY, apply_a, &pa, NULL), 0); /* creates it */
    TEST_EQ_INT(kube_patch(kc, ssa, KUBE_PATCH_APPLY, apply_b, &pb, NULL), OP_ECONFLICT);
    TEST_CHECK(strstr(kube_last_status(kc)->message, "manager-a") != NULL);
    pb.force = true;
    json_decref(out);
    TEST_EQ_INT(kube_patch(kc, ssa, KUBE_PATCH_APPLY, apply_b, &pb, &out), 0);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(out, "data"), "owned")), "by-b");

    /* delete: a wrong UID precondition is a Conflict; then delete with a propagation policy */
    struct kube_delete_opts d = {.precondition_uid = "00000000-0000-0000-0000-000000000000",
                                 .grace_period_seconds = -1};
    TEST_EQ_INT(kube_delete(kc, p, &d, NULL), OP_ECONFLICT);
    TEST_CHECK(strstr(kube_last_status(kc)->message, "the UID in the precondition") != NULL);
    d.precondition_uid =
        json_string_value(json_object_get(json_object_get(got, "metadata"), "uid"));
    d.propagation_policy = "Background";
    TEST_EQ_INT(kube_delete(kc, p, &d, NULL), 0);
    json_decref(out);
    out = NULL;
    TEST_EQ_INT(kube_get(kc, p, &out), OP_ENOTFOUND);
    TEST_EQ_INT(kube_delete(kc, p, NULL, NULL), OP_ENOTFOUND);

    /* one persistent connection, HTTP/1.1 by default, HTTP/2 when asked for */
    TEST_EQ_INT(kube_client_connects(kc) - before, 0);
    TEST_EQ_INT(kube_client_http_version(kc), 1);
    {
        struct kube_client *h2 = kube_client_new(cfg, &(struct kube_client_opts){.http2 = true});
        json_t *got_ns = NULL;
        TEST_EQ_INT(kube_get(h2, "/api/v1/namespaces/default", &got_ns), 0);
        TEST_EQ_INT(kube_client_http_version(h2), 2);
        json_decref(got_ns);
        kube_client_free(h2);
    }
    json_decref(cm);
    json_decref(got);
    json_decref(mp);
    json_decref(jp);
    json_decref(bad);
    json_decref(sp);
    json_decref(apply_a);
    json_decref(apply_b);
}

static void test_status_subresource(void)
{
    char coll[256], p[256], sa[256];
    json_t *pod = json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1", "kind",
                            "Pod", "metadata", "name", "st", "spec", "containers", "name", "w",
                            "image", "busybox:1.36");
    json_t *out = NULL, *got = NULL;
    int rc;

    /* Pods need the namespace's default ServiceAccount, made by kube-controller-manager. */
    TEST_EQ_INT(kube_path(sa, sizeof(sa), "v1", "serviceaccounts", ns, "default", NULL), 0);
    for (int i = 0; i < 100 && (rc = kube_get(kc, sa, &got)) == OP_ENOTFOUND; i++)
        ms_sleep(200);
    json_decref(got);
    got = NULL;
    TEST_EQ_INT(kube_path(coll, sizeof(coll), "v1", "pods", ns, NULL, NULL), 0);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "pods", ns, "st", "status"), 0);
    TEST_EQ_INT(kube_create(kc, coll, pod, &out), 0);
    json_object_set_new(out, "status", json_pack("{s:s}", "phase", "Running"));
    json_object_set_new(json_object_get(out, "spec"), "nodeName", json_string("ignored"));
    TEST_EQ_INT(kube_replace(kc, p, out, &got), 0);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(got, "status"), "phase")),
                "Running");
    /* the status endpoint ignores spec changes */
    TEST_CHECK(json_object_get(json_object_get(got, "spec"), "nodeName") == NULL);
    json_t *mp = json_pack("{s:{s:s}}", "status", "phase", "Succeeded");
    json_decref(got);
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_MERGE, mp, NULL, &got), 0);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(got, "status"), "phase")),
                "Succeeded");
    json_decref(mp);
    json_decref(got);
    json_decref(out);
    json_decref(pod);
}

/* ---------------------------------------------------------------- lists */

static long etcd_revision(void);

/* A core/v1 Event labelled label=yes: a kind kube-apiserver keeps out of its watch cache. */
static json_t *core_event(const char *name, const char *label)
{
    json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:s, s:s}, s:s, s:s, s:s}",
                           "apiVersion", "v1", "kind", "Event", "metadata", "name", name, "labels",
                           label, "yes", "involvedObject", "kind", "ConfigMap", "name", "x",
                           "namespace", ns, "reason", "Test", "message", "m", "type", "Normal");
    return ev;
}
static int etcd_compact(long rev);

static void *compact_later(void *arg)
{
    char coll[256];
    json_t *cm = configmap("bump2", "x");
    ms_sleep(600);
    cm_path(coll, sizeof(coll), NULL);
    (void)!kube_create(kc, coll, cm, NULL); /* runs while kc is otherwise idle */
    json_decref(cm);
    (void)etcd_compact(etcd_revision());
    return NULL;
}

static void test_pagination_and_expired_continue(void)
{
    char coll[256], q[512];
    json_t *items = NULL;
    char *rv = NULL;
    struct kube_list_opts lo = {.limit = 10, .label_selector = "page=yes"};

    cm_path(coll, sizeof(coll), NULL);
    for (int i = 0; i < 25; i++) {
        char name[32];
        snprintf(name, sizeof(name), "page-%02d", i);
        json_t *cm = configmap(name, "x");
        json_object_set_new(json_object_get(json_object_get(cm, "metadata"), "labels"), "page",
                            json_string("yes"));
        TEST_EQ_INT(kube_create(kc, coll, cm, NULL), 0);
        json_decref(cm);
    }
    TEST_EQ_INT(kube_list(kc, coll, &lo, &items, &rv), 0);
    TEST_EQ_INT(json_array_size(items), 25); /* 3 pages of at most 10 */
    TEST_CHECK(rv && atol(rv) > 0);
    json_decref(items);
    free(rv);

    /* A continue token whose snapshot was compacted away: 410 Expired from the real server.
     * ConfigMap lists are served from the watch cache's snapshots, which compaction does not
     * touch; core Events are not in the watch cache (kube-apiserver's default), so their
     * lists and watches go to etcd, where compaction bites. */
    struct buf b;
    json_t *page = NULL;
    char ecoll[256];
    buf_init(&b, KUBE_MAX_BODY);
    TEST_EQ_INT(kube_path(ecoll, sizeof(ecoll), "v1", "events", ns, NULL, NULL), 0);
    for (int i = 0; i < 25; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ev-%02d", i);
        json_t *ev = core_event(name, "page");
        TEST_EQ_INT(kube_create(kc, ecoll, ev, NULL), 0);
        json_decref(ev);
    }
    snprintf(q, sizeof(q), "%s?limit=10&labelSelector=page%%3Dyes", ecoll);
    TEST_EQ_INT(kube_request(kc, "GET", q, NULL, NULL, 0, &b), 0);
    page = json_loads(buf_ptr(&b), 0, NULL);
    const char *cont =
        json_string_value(json_object_get(json_object_get(page, "metadata"), "continue"));
    TEST_CHECK(cont != NULL);
    if (!etcd_url[0]) {
        printf("  (no etcd URL: skipping the compaction part)\n");
    } else if (cont) {
        json_t *cm = configmap("bump", "x");
        TEST_EQ_INT(kube_create(kc, coll, cm, NULL), 0); /* move the revision on */
        json_decref(cm);
        TEST_EQ_INT(etcd_compact(etcd_revision()), 0);
        char *esc = curl_easy_escape(NULL, cont, 0);
        snprintf(q, sizeof(q), "%s?limit=10&labelSelector=page%%3Dyes&continue=%s", ecoll, esc);
        curl_free(esc);
        int rc = kube_request(kc, "GET", q, NULL, NULL, 0, &b);
        printf("  continue after compaction: %s (%ld %s)\n", op_strerror(rc),
               kube_last_status(kc)->code, kube_last_status(kc)->reason);
        TEST_EQ_INT(rc, OP_EGONE);
        TEST_EQ_STR(kube_last_status(kc)->reason, "Expired");
        /* kube_list, paced to 4 pages/s, with etcd compacted under it after its second page:
         * it must restart and still return each object exactly once. */
        struct kube_client *slow =
            kube_client_new(cfg, &(struct kube_client_opts){.qps = 4, .burst = 1});
        struct kube_list_opts lo2 = {.limit = 2, .label_selector = "page=yes"};
        char logpath[] = "/tmp/kube-api-log-XXXXXX";
        int logfd = mkstemp(logpath);
        pthread_t th;
        log_set_fd(logfd);
        pthread_create(&th, NULL, compact_later, NULL);
        TEST_EQ_INT(kube_list(slow, ecoll, &lo2, &items, &rv), 0);
        pthread_join(th, NULL);
        log_set_fd(2);
        TEST_EQ_INT(json_array_size(items), 25);
        size_t i;
        json_t *it;
        int dup = 0;
        json_array_foreach(items, i, it)
        {
            for (size_t j = 0; j < i; j++)
                dup +=
                    strcmp(
                        json_string_value(json_object_get(json_object_get(it, "metadata"), "name")),
                        json_string_value(json_object_get(
                            json_object_get(json_array_get(items, j), "metadata"), "name"))) == 0;
        }
        TEST_EQ_INT(dup, 0);
        char logtext[4096] = "";
        ssize_t ln = pread(logfd, logtext, sizeof(logtext) - 1, 0);
        logtext[ln > 0 ? ln : 0] = 0;
        TEST_CHECK(strstr(logtext, "Restarted list after an expired continue token") != NULL);
        printf("  list restarted after compaction: %s\n",
               strstr(logtext, "Restarted list") ? "yes" : "no");
        close(logfd);
        unlink(logpath);
        json_decref(items);
        free(rv);
        kube_client_free(slow);
    }
    json_decref(page);
    buf_cleanup(&b);
}

/* ---------------------------------------------------------------- watch */

struct seen {
    pthread_mutex_t mu;
    char ev[64][96];
    int n;
    char bookmark_rv[32];
    char last_obj_rv[32];
};
static struct seen S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int on_event(void *ud, enum kube_event t, json_t *obj)
{
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
    pthread_mutex_lock(&S.mu);
    if (t == KUBE_EVENT_BOOKMARK) {
        snprintf(S.bookmark_rv, sizeof(S.bookmark_rv), "%s", kube_object_rv(obj));
    } else {
        snprintf(S.last_obj_rv, sizeof(S.last_obj_rv), "%s", kube_object_rv(obj));
        if (S.n < 64)
            snprintf(S.ev[S.n++], sizeof(S.ev[0]), "%s %s%s", kube_event_name(t), name ? name : "-",
                     json_object_get(ann, "gantry.dev/synthesized-delete") ? " synth" : "");
    }
    pthread_mutex_unlock(&S.mu);
    return 0;
}

static void *watch_thread(void *arg)
{
    (void)watch_run(arg);
    return NULL;
}

static int wait_events(int n, double timeout_s)
{
    double t0 = mono();
    for (;;) {
        pthread_mutex_lock(&S.mu);
        int have = S.n;
        pthread_mutex_unlock(&S.mu);
        if (have >= n)
            return have;
        if (mono() - t0 > timeout_s)
            return have;
        ms_sleep(50);
    }
}

static void test_watch_order_bookmark_and_410(void)
{
    char coll[256], p[256];
    struct watch_opts wo = {
        .label_selector = "w=yes", .timeout_s = 6, .dead_after_s = 30, .backoff_max_ms = 500};
    struct watch_stats st;
    pthread_t th;
    json_t *cm;

    cm_path(coll, sizeof(coll), NULL);
    wo.path = coll;
    struct watch *w = watch_new(cfg, NULL, &wo, on_event, NULL);
    pthread_create(&th, NULL, watch_thread, w);
    ms_sleep(500);
    const char *names[] = {"wa", "wb", "wc"};
    for (int i = 0; i < 3; i++) {
        cm = configmap(names[i], "1");
        json_object_set_new(json_object_get(json_object_get(cm, "metadata"), "labels"), "w",
                            json_string("yes"));
        TEST_EQ_INT(kube_create(kc, coll, cm, NULL), 0);
        json_decref(cm);
    }
    cm_path(p, sizeof(p), "wa");
    json_t *mp = json_pack("{s:{s:s}}", "data", "k", "2");
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_MERGE, mp, NULL, NULL), 0);
    TEST_EQ_INT(kube_delete(kc, p, NULL, NULL), 0);
    json_decref(mp);
    TEST_EQ_INT(wait_events(5, 10), 5);
    const char *want[] = {"ADDED wa", "ADDED wb", "ADDED wc", "MODIFIED wa", "DELETED wa"};
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < 5; i++)
        TEST_EQ_STR(S.ev[i], want[i]);
    char last_rv[32];
    snprintf(last_rv, sizeof(last_rv), "%s", S.last_obj_rv);
    pthread_mutex_unlock(&S.mu);

    /* Writes elsewhere move the global revision on; a bookmark carries it to us (the server
     * sends one shortly before timeoutSeconds). */
    cm = configmap("not-watched", "1");
    TEST_EQ_INT(kube_create(kc, coll, cm, NULL), 0); /* no w=yes label: outside the selector */
    json_decref(cm);
    double t0 = mono();
    for (;;) {
        pthread_mutex_lock(&S.mu);
        long b = atol(S.bookmark_rv);
        pthread_mutex_unlock(&S.mu);
        if (b > atol(last_rv) || mono() - t0 > 15)
            break;
        ms_sleep(100);
    }
    watch_get_stats(w, &st);
    printf("  bookmark rv %s > last event rv %s after %.1f s; stats rv %s\n", S.bookmark_rv,
           last_rv, mono() - t0, st.rv);
    TEST_CHECK(atol(S.bookmark_rv) > atol(last_rv));
    TEST_CHECK(st.bookmarks >= 1);

    watch_stop(w);
    pthread_join(th, NULL);
    watch_free(w);
}

/* Forced 410 via etcd compaction: a watch on core Events (served by etcd, not the watch cache)
 * sees ea, eb, ec; it is stopped; meanwhile eb is deleted, ec changed, ed created, and etcd
 * compacted past the watch's resourceVersion. Resumed from that version, the watch must get
 * 410, relist, and deliver exactly DELETED eb (synthesised), MODIFIED ec, ADDED ed. */
static void test_watch_410_after_compaction(void)
{
    char coll[256], p[256];
    struct watch_opts wo = {
        .label_selector = "w=yes", .timeout_s = 60, .dead_after_s = 30, .backoff_max_ms = 500};
    struct watch_stats st;
    pthread_t th;
    json_t *ev;

    if (!etcd_url[0])
        test_skip("no etcd URL (GANTRY_TEST_ETCD or cluster.env next to the kubeconfig)");
    TEST_EQ_INT(kube_path(coll, sizeof(coll), "v1", "events", ns, NULL, NULL), 0);
    wo.path = coll;
    pthread_mutex_lock(&S.mu);
    int base0 = S.n;
    pthread_mutex_unlock(&S.mu);
    struct watch *w = watch_new(cfg, NULL, &wo, on_event, NULL);
    pthread_create(&th, NULL, watch_thread, w);
    const char *names[] = {"ea", "eb", "ec"};
    for (int i = 0; i < 3; i++) {
        ev = core_event(names[i], "w");
        TEST_EQ_INT(kube_create(kc, coll, ev, NULL), 0);
        json_decref(ev);
    }
    TEST_EQ_INT(wait_events(base0 + 3, 10), base0 + 3);
    watch_stop(w);
    pthread_join(th, NULL);
    watch_get_stats(w, &st);
    printf("  stopped at rv %s\n", st.rv);

    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "events", ns, "eb", NULL), 0);
    TEST_EQ_INT(kube_delete(kc, p, NULL, NULL), 0);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "events", ns, "ec", NULL), 0);
    json_t *mp = json_pack("{s:s}", "message", "changed");
    TEST_EQ_INT(kube_patch(kc, p, KUBE_PATCH_MERGE, mp, NULL, NULL), 0);
    json_decref(mp);
    ev = core_event("ed", "w");
    TEST_EQ_INT(kube_create(kc, coll, ev, NULL), 0);
    json_decref(ev);
    TEST_EQ_INT(etcd_compact(etcd_revision()), 0);

    pthread_mutex_lock(&S.mu);
    int base = S.n;
    pthread_mutex_unlock(&S.mu);
    watch_resume(w, NULL); /* from its own, now compacted, resourceVersion */
    pthread_create(&th, NULL, watch_thread, w);
    wait_events(base + 3, 15);
    ms_sleep(500); /* nothing more may come */
    watch_stop(w);
    pthread_join(th, NULL);
    watch_get_stats(w, &st);
    pthread_mutex_lock(&S.mu);
    int got_eb = 0, got_ec = 0, got_ed = 0;
    for (int i = base; i < S.n; i++) {
        printf("  after 410: %s\n", S.ev[i]);
        got_eb += strcmp(S.ev[i], "DELETED eb synth") == 0;
        got_ec += strcmp(S.ev[i], "MODIFIED ec") == 0;
        got_ed += strcmp(S.ev[i], "ADDED ed") == 0;
    }
    TEST_EQ_INT(S.n - base, 3);
    pthread_mutex_unlock(&S.mu);
    TEST_EQ_INT(got_eb, 1);
    TEST_EQ_INT(got_ec, 1);
    TEST_EQ_INT(got_ed, 1);
    printf("  relists %ld, synthesised deletes %ld\n", st.relists, st.synthesized_deletes);
    TEST_EQ_INT(st.relists, 1);
    TEST_EQ_INT(st.synthesized_deletes, 1);
    watch_free(w);
}

/* ---------------------------------------------------------------- informer */

static void test_informer_real(void)
{
    char coll[256];
    static const char *const fields[] = {"data", NULL};
    struct informer_opts io = {.watch = {.label_selector = "page=yes", .timeout_s = 60},
                               .fields = fields};

    cm_path(coll, sizeof(coll), NULL);
    io.watch.path = coll;
    struct informer *inf = informer_new(cfg, NULL, &io, NULL);
    TEST_EQ_INT(informer_start(inf), 0);
    TEST_EQ_INT(informer_wait_synced(inf, 10000), 0);
    TEST_EQ_INT(informer_len(inf), 25);
    char key[128];
    snprintf(key, sizeof(key), "%s/page-07", ns);
    json_t *o = informer_get(inf, key);
    TEST_CHECK(o && json_object_get(o, "data") && !json_object_get(o, "apiVersion"));
    TEST_CHECK(o && !json_object_get(json_object_get(o, "metadata"), "managedFields"));
    json_decref(o);
    informer_free(inf);
}

/* ---------------------------------------------------------------- lease */

static atomic_int started_a, stopped_a, started_b;
static void a_on(void *ud)
{
    atomic_fetch_add(&started_a, 1);
}
static void a_off(void *ud)
{
    atomic_fetch_add(&stopped_a, 1);
}
static void b_on(void *ud)
{
    atomic_fetch_add(&started_b, 1);
}

static void test_lease_handover(void)
{
    struct lease_opts la = {.namespace = ns,
                            .name = "gantry-test",
                            .identity = "a",
                            .lease_duration_ms = 3000,
                            .renew_deadline_ms = 2000,
                            .retry_period_ms = 300,
                            .on_started = a_on,
                            .on_stopped = a_off};
    struct lease_opts lb = la;
    lb.identity = "b";
    lb.on_started = b_on;
    lb.on_stopped = NULL;
    struct lease_elector *a = lease_new(cfg, NULL, &la), *b = lease_new(cfg, NULL, &lb);
    double t0;

    TEST_EQ_INT(lease_start(a), 0);
    for (int i = 0; i < 50 && !lease_is_leader(a); i++)
        ms_sleep(100);
    TEST_CHECK(lease_is_leader(a));
    TEST_EQ_INT(lease_start(b), 0);
    ms_sleep(1500);
    TEST_CHECK(!lease_is_leader(b)); /* a keeps renewing */
    TEST_EQ_INT(lease_try(b), OP_ENOTLEADER);

    /* a stops renewing without releasing (a crash): b takes over after the lease duration */
    lease_stop(a, false);
    t0 = mono();
    while (!lease_is_leader(b) && mono() - t0 < 10)
        ms_sleep(50);
    double took = mono() - t0;
    printf("  lease handover after a stopped renewing: %.2f s (lease duration 3 s)\n", took);
    TEST_CHECK(lease_is_leader(b));
    TEST_CHECK(took >= 2.0 && took < 6.0);
    TEST_EQ_INT(atomic_load(&started_b), 1);

    /* b releases on shutdown: a new candidate gets it within about one retry period */
    struct lease_opts lc = la;
    lc.identity = "c";
    lc.on_started = lc.on_stopped = NULL;
    struct lease_elector *c = lease_new(cfg, NULL, &lc);
    lease_stop(b, true);
    t0 = mono();
    TEST_EQ_INT(lease_start(c), 0);
    while (!lease_is_leader(c) && mono() - t0 < 10)
        ms_sleep(50);
    printf("  lease acquired after a release: %.2f s\n", mono() - t0);
    TEST_CHECK(lease_is_leader(c) && mono() - t0 < 1.5);
    lease_free(c);
    lease_free(a);
    lease_free(b);
    TEST_EQ_INT(atomic_load(&started_a), 1);
    TEST_EQ_INT(atomic_load(&stopped_a), 1);
}

/* ---------------------------------------------------------------- events */

static void test_events(void)
{
    struct event_recorder *r = event_recorder_new(cfg, NULL, "gantry.dev/operator", "test-0");
    json_t *reg =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                  "metadata", "name", "page-01", "namespace", ns, "uid", "1234");
    int count = 0;
    for (int i = 0; i < 3; i++)
        TEST_EQ_INT(event_record(r, reg, "Normal", "Tested", "Test", "Tested the recorder", &count),
                    0);
    TEST_EQ_INT(count, 3);
    char p[256];
    json_t *items = NULL;
    TEST_EQ_INT(kube_path(p, sizeof(p), "events.k8s.io/v1", "events", ns, NULL, NULL), 0);
    TEST_EQ_INT(kube_list(kc, p, NULL, &items, NULL), 0);
    /* Other tests' core Events show up here too: look at ours only. */
    size_t i, mine = 0;
    json_t *it, *found = NULL;
    json_array_foreach(items, i, it)
    {
        const char *reason = json_string_value(json_object_get(it, "reason"));
        if (reason && strcmp(reason, "Tested") == 0) {
            mine++;
            found = it;
        }
    }
    TEST_EQ_INT(mine, 1); /* three records, one Event */
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(found, "series"), "count")), 3);
    TEST_EQ_STR(json_string_value(json_object_get(found, "reportingController")),
                "gantry.dev/operator");
    json_decref(items);
    json_decref(reg);
    event_recorder_free(r);
}

/* ---------------------------------------------------------------- TLS options */

static int try_get(struct kube_config *c, char *msg, size_t n)
{
    struct kube_client *k = kube_client_new(c, &(struct kube_client_opts){.max_retries = -1});
    json_t *o = NULL;
    int rc = kube_get(k, "/api/v1/namespaces/default", &o);
    snprintf(msg, n, "%s", kube_last_status(k)->message);
    json_decref(o);
    kube_client_free(k);
    return rc;
}

static char *write_temp(const char *dir, const char *name, const struct kube_blob *b)
{
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fwrite(b->data, 1, b->len, f);
    fclose(f);
    return path;
}

static void test_tls_options(void)
{
    struct kube_config *c = kube_config_dup(cfg);
    char msg[1024], dir[] = "/tmp/kube-api-tls-XXXXXX";

    if (!c->ca_data.data || !c->cert_data.data) {
        kube_config_free(c);
        test_skip("the admin kubeconfig has no inline CA and client certificate");
    }
    TEST_CHECK(mkdtemp(dir) != NULL);
    /* tls-server-name: verified against that name (a SAN of the server certificate) */
    c->tls_server_name = strdup("kubernetes.default.svc");
    TEST_EQ_INT(try_get(c, msg, sizeof(msg)), 0);
    free(c->tls_server_name);
    c->tls_server_name = strdup("wrong.example.com");
    TEST_EQ_INT(try_get(c, msg, sizeof(msg)), OP_EHTTP);
    printf("  wrong tls-server-name: %s\n", msg);
    free(c->tls_server_name);
    c->tls_server_name = NULL;

    /* CA and client certificate from files instead of memory */
    char *ca = write_temp(dir, "ca.crt", &c->ca_data);
    char *crt = write_temp(dir, "client.crt", &c->cert_data);
    char *key = write_temp(dir, "client.key", &c->key_data);
    struct kube_config *f = kube_config_dup(c);
    free(f->ca_data.data);
    free(f->cert_data.data);
    free(f->key_data.data);
    memset(&f->ca_data, 0, sizeof(f->ca_data));
    memset(&f->cert_data, 0, sizeof(f->cert_data));
    memset(&f->key_data, 0, sizeof(f->key_data));
    f->ca_file = strdup(ca);
    f->cert_file = strdup(crt);
    f->key_file = strdup(key);
    TEST_EQ_INT(try_get(f, msg, sizeof(msg)), 0);

    /* no CA: the system roots do not know this cluster, so verification fails ... */
    free(f->ca_file);
    f->ca_file = NULL;
    TEST_EQ_INT(try_get(f, msg, sizeof(msg)), OP_EHTTP);
    printf("  no CA: %s\n", msg);
    /* ... unless insecure-skip-tls-verify was asked for */
    f->insecure = true;
    TEST_EQ_INT(try_get(f, msg, sizeof(msg)), 0);
    /* no client certificate: anonymous, and RBAC says no */
    free(f->cert_file);
    free(f->key_file);
    f->cert_file = f->key_file = NULL;
    TEST_CHECK(try_get(f, msg, sizeof(msg)) == OP_EFORBIDDEN ||
               try_get(f, msg, sizeof(msg)) == OP_EUNAUTHORIZED);
    unlink(ca);
    unlink(crt);
    unlink(key);
    rmdir(dir);
    free(ca);
    free(crt);
    free(key);
    kube_config_free(f);
    kube_config_free(c);
}

/* ---------------------------------------------------------------- RBAC */

static void test_limited_rbac_403(void)
{
    char p[256];
    json_t *sa = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "ServiceAccount",
                           "metadata", "name", "limited");
    json_t *role =
        json_pack("{s:s, s:s, s:{s:s}, s:[{s:[s], s:[s], s:[s]}]}", "apiVersion",
                  "rbac.authorization.k8s.io/v1", "kind", "Role", "metadata", "name", "read-cm",
                  "rules", "apiGroups", "", "resources", "configmaps", "verbs", "get");
    json_t *rb = json_pack(
        "{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:s}]}", "apiVersion",
        "rbac.authorization.k8s.io/v1", "kind", "RoleBinding", "metadata", "name", "read-cm",
        "roleRef", "apiGroup", "rbac.authorization.k8s.io", "kind", "Role", "name", "read-cm",
        "subjects", "kind", "ServiceAccount", "name", "limited", "namespace", ns);
    json_t *tr = json_pack("{s:s, s:s, s:{s:i}}", "apiVersion", "authentication.k8s.io/v1", "kind",
                           "TokenRequest", "spec", "expirationSeconds", 600);
    json_t *tok = NULL, *o = NULL;

    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "serviceaccounts", ns, NULL, NULL), 0);
    TEST_EQ_INT(kube_create(kc, p, sa, NULL), 0);
    TEST_EQ_INT(kube_path(p, sizeof(p), "rbac.authorization.k8s.io/v1", "roles", ns, NULL, NULL),
                0);
    TEST_EQ_INT(kube_create(kc, p, role, NULL), 0);
    TEST_EQ_INT(
        kube_path(p, sizeof(p), "rbac.authorization.k8s.io/v1", "rolebindings", ns, NULL, NULL), 0);
    TEST_EQ_INT(kube_create(kc, p, rb, NULL), 0);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "serviceaccounts", ns, "limited", "token"), 0);
    TEST_EQ_INT(kube_create(kc, p, tr, &tok), 0);
    const char *token = json_string_value(json_object_get(json_object_get(tok, "status"), "token"));
    TEST_CHECK(token != NULL);

    /* Same server and CA, the service account's token instead of the admin certificate. */
    struct kube_config *lim = kube_config_dup(cfg);
    free(lim->token);
    lim->token = strdup(token ? token : "");
    free(lim->cert_data.data);
    free(lim->key_data.data);
    lim->cert_data.data = lim->key_data.data = NULL;
    lim->cert_data.len = lim->key_data.len = 0;
    struct kube_client *lc = kube_client_new(lim, NULL);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "pods", ns, NULL, NULL), 0);
    json_t *items = NULL;
    int rc = kube_list(lc, p, NULL, &items, NULL);
    TEST_EQ_INT(rc, OP_EFORBIDDEN);
    printf("  403 message: %s\n", kube_last_status(lc)->message);
    TEST_EQ_STR(kube_last_status(lc)->reason, "Forbidden");
    TEST_CHECK(strstr(kube_last_status(lc)->message, "cannot list resource \"pods\"") != NULL);
    TEST_CHECK(strstr(kube_last_status(lc)->message, "system:serviceaccount:") != NULL);
    cm_path(p, sizeof(p), "page-03");
    TEST_EQ_INT(kube_get(lc, p, &o), 0); /* what the Role grants still works */
    json_decref(o);
    o = NULL;

    /* The same token through a tokenFile and through an exec credential plugin. */
    char dir[] = "/tmp/kube-api-cred-XXXXXX", tpath[128], ppath[128];
    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(tpath, sizeof(tpath), "%s/token", dir);
    snprintf(ppath, sizeof(ppath), "%s/plugin.sh", dir);
    FILE *f = fopen(tpath, "w");
    fprintf(f, "%s\n", token ? token : "");
    fclose(f);
    f = fopen(ppath, "w");
    fprintf(f,
            "#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
            "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%%s\"}}' \"$(cat %s)\"\n",
            tpath);
    fclose(f);
    chmod(ppath, 0700);
    struct kube_config *tf = kube_config_dup(lim);
    free(tf->token);
    tf->token = NULL;
    tf->token_file = strdup(tpath);
    struct kube_client *tc = kube_client_new(tf, NULL);
    TEST_EQ_INT(kube_get(tc, p, &o), 0);
    json_decref(o);
    o = NULL;
    kube_client_free(tc);
    struct kube_config *ex = kube_config_dup(tf);
    free(ex->token_file);
    ex->token_file = NULL;
    ex->exec = calloc(1, sizeof(*ex->exec));
    ex->exec->command = strdup(ppath);
    ex->exec->api_version = strdup("client.authentication.k8s.io/v1");
    ex->exec->args = calloc(1, sizeof(char *));
    ex->exec->env = calloc(1, sizeof(char *));
    tc = kube_client_new(ex, NULL);
    TEST_EQ_INT(kube_get(tc, p, &o), 0);
    json_decref(o);
    kube_client_free(tc);
    kube_config_free(ex);
    kube_config_free(tf);
    unlink(tpath);
    unlink(ppath);
    rmdir(dir);
    kube_client_free(lc);
    kube_config_free(lim);
    json_decref(sa);
    json_decref(role);
    json_decref(rb);
    json_decref(tr);
    json_decref(tok);
}

/* ---------------------------------------------------------------- etcd (compaction) */

static struct kube_client *etcd_client(void)
{
    struct kube_config c = {0};
    c.server = etcd_url;
    return kube_client_new(&c, NULL);
}

static long etcd_revision(void)
{
    struct kube_client *ec = etcd_client();
    struct buf b;
    long rev = -1;
    buf_init(&b, 1 << 20);
    if (kube_request(ec, "POST", "/v3/kv/range", "application/json", "{\"key\":\"AA==\"}", 14,
                     &b) == 0) {
        json_t *d = json_loads(buf_ptr(&b), 0, NULL);
        const char *r =
            json_string_value(json_object_get(json_object_get(d, "header"), "revision"));
        rev = r ? atol(r) : -1;
        json_decref(d);
    }
    buf_cleanup(&b);
    kube_client_free(ec);
    return rev;
}

static int etcd_compact(long rev)
{
    struct kube_client *ec = etcd_client();
    struct buf b;
    char body[128];
    int rc;
    snprintf(body, sizeof(body), "{\"revision\":\"%ld\",\"physical\":true}", rev);
    buf_init(&b, 1 << 20);
    rc = kube_request(ec, "POST", "/v3/kv/compaction", "application/json", body, strlen(body), &b);
    if (rc)
        printf("  etcd compaction at %ld failed: %s %s\n", rev, op_strerror(rc),
               kube_last_status(ec)->message);
    buf_cleanup(&b);
    kube_client_free(ec);
    return rc;
}

static void find_etcd(const char *kubeconfig)
{
    const char *env = getenv("GANTRY_TEST_ETCD");
    char path[1024], line[256], *dir = strdup(kubeconfig);
    FILE *f;

    if (env && *env) {
        snprintf(etcd_url, sizeof(etcd_url), "%s", env);
        free(dir);
        return;
    }
    snprintf(path, sizeof(path), "%s/cluster.env", dirname(dir));
    free(dir);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "ETCD_PORT=", 10) == 0)
            snprintf(etcd_url, sizeof(etcd_url), "http://127.0.0.1:%d", atoi(line + 10));
    if (f)
        fclose(f);
}

int main(void)
{
    const char *kubeconfig = getenv("GANTRY_TEST_KUBECONFIG");
    char err[1024], p[256];
    json_t *nsobj;
    int rc;

    if (!kubeconfig || !*kubeconfig)
        test_skip("GANTRY_TEST_KUBECONFIG is not set (needs the API tier: hack/cluster.sh up "
                  "--tier api)");
    if (kube_config_from_kubeconfig(kubeconfig, NULL, &cfg, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    find_etcd(kubeconfig);
    kc = kube_client_new(cfg, NULL);
    srandom((unsigned)time(NULL) ^ (unsigned)getpid());
    snprintf(ns, sizeof(ns), "kube-api-%d-%04lx", (int)getpid(), random() % 0xffff);
    nsobj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata",
                      "name", ns);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "namespaces", NULL, NULL, NULL), 0);
    rc = kube_create(kc, p, nsobj, NULL);
    if (rc) {
        fprintf(stderr, "cannot create namespace %s: %s: %s\n", ns, op_strerror(rc),
                kube_last_status(kc)->message);
        return 1;
    }
    printf("namespace %s, etcd %s\n", ns, etcd_url[0] ? etcd_url : "(unknown)");
    TEST_RUN(test_verbs_conflicts_and_ssa);
    TEST_RUN(test_status_subresource);
    TEST_RUN(test_pagination_and_expired_continue);
    TEST_RUN(test_watch_order_bookmark_and_410);
    TEST_RUN(test_watch_410_after_compaction);
    TEST_RUN(test_informer_real);
    TEST_RUN(test_lease_handover);
    TEST_RUN(test_events);
    TEST_RUN(test_limited_rbac_403);
    TEST_RUN(test_tls_options);
    TEST_EQ_INT(kube_path(p, sizeof(p), "v1", "namespaces", NULL, ns, NULL), 0);
    TEST_EQ_INT(kube_delete(kc, p, NULL, NULL), 0);
    json_decref(nsobj);
    kube_client_free(kc);
    kube_config_free(cfg);
    return test_summary();
}
