/*
 * Reconcile, driven by fixtures: each operator/testdata/rec/<case>.json holds
 *   "job"      a TrainingJob object (status included),
 *   "pods"     observed pods: full Pod objects (with "metadata") or the compact form
 *              {"name","uid","owner","index","restart","replicas","phase","ready","exitCode",
 *               "terminating","reason","problem","problemMsg","disruption","standby"},
 *   "service", "secret": true when observed; "configmap": true (observed with the rendered data,
 *              for the size status.elasticWorkers says) or a string (observed with that data),
 *   "now", "expectationsMet" (default true), "invalid" (run rec_invalid with tj_parse's error),
 *   "kueue"    {"served": bool, "workloads": [the job's Kueue Workloads, as the informer keeps]},
 * and "expect":
 *   "actions"        exactly these, in order: "create Pod x-worker-0 batch=0", "delete Pod x", ...
 *   "status"         a subset of the new status: objects match key by key, arrays by containment,
 *                    the string "$absent" means the key must not be there,
 *   "statusChanged", "requeueAfter" (-1: none), "events" (["Warning Restarting", ...]),
 *   "objects"        {name or Kind/name: subset of the created/updated object},
 *   "kueueFlavors"   the admitted flavors handed to the executor (null: none),
 *   "secondPassUnchanged"  feeding the new status back in gives no actions and no status write.
 * Plus unit tests of what the fixtures do not reach (pod parsing, batches, uid preconditions).
 */
#include "operator/rec.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "operator/kube/kube_err.h"

#ifndef REC_TESTDATA
#error "REC_TESTDATA must name operator/testdata/rec"
#endif

/* ---------------------------------------------------------------------------------------------
 * Subset matching
 * ------------------------------------------------------------------------------------------- */

static bool match(const json_t *want, const json_t *got, const char *path);

static bool match_quiet(const json_t *want, const json_t *got)
{
    size_t i;
    const char *k;
    json_t *v;

    if (json_is_object(want)) {
        if (!json_is_object(got))
            return false;
        json_object_foreach((json_t *)want, k, v) {
            if (json_is_string(v) && strcmp(json_string_value(v), "$absent") == 0) {
                if (json_object_get(got, k))
                    return false;
            } else if (!match_quiet(v, json_object_get(got, k))) {
                return false;
            }
        }
        return true;
    }
    if (json_is_array(want)) {
        if (!json_is_array(got))
            return false;
        if (json_array_size(want) == 0)
            return json_array_size(got) == 0;
        json_array_foreach(want, i, v) {
            bool found = false;
            for (size_t j = 0; j < json_array_size(got) && !found; j++)
                found = match_quiet(v, json_array_get(got, j));
            if (!found)
                return false;
        }
        return true;
    }
    if (json_is_number(want) && json_is_number(got))
        return json_number_value(want) == json_number_value(got);
    return got && json_equal(want, got);
}

static bool match(const json_t *want, const json_t *got, const char *path)
{
    if (match_quiet(want, got))
        return true;
    char *w = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY);
    char *g = got ? json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;
    fprintf(stderr, "       %s\n       want %s\n       got  %s\n", path, w, g ? g : "(absent)");
    free(w);
    free(g);
    return false;
}

/* ---------------------------------------------------------------------------------------------
 * Running one fixture
 * ------------------------------------------------------------------------------------------- */

/* The compact form's phase through the operator's own parser (rec_pod_from_json(), which the
 * informer's pod records come from), so a phase string means the same in a fixture as on a real
 * pod. A missing phase is absent there too. */
static enum rec_pod_phase phase_of(const json_t *phase)
{
    json_t *pod = json_pack("{s:{s:s}, s:{s:O*}}", "metadata", "name", "p", "status", "phase",
                            phase);
    struct rec_pod rp;

    memset(&rp, 0, sizeof(rp));
    TEST_CHECK(pod && rec_pod_from_json(pod, &rp) == 0);
    json_decref(pod);
    return rp.phase;
}

static void compact_pod(const json_t *j, struct rec_pod *p)
{
    const json_t *ec = json_object_get(j, "exitCode");

    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", json_string_value(json_object_get(j, "name")));
    snprintf(p->uid, sizeof(p->uid), "%s",
             json_is_string(json_object_get(j, "uid"))
                 ? json_string_value(json_object_get(j, "uid")) : "");
    snprintf(p->owner, sizeof(p->owner), "%s",
             json_is_string(json_object_get(j, "owner"))
                 ? json_string_value(json_object_get(j, "owner")) : "");
    p->index = (int)json_integer_value(json_object_get(j, "index"));
    p->restart = (int)json_integer_value(json_object_get(j, "restart"));
    p->replicas = json_object_get(j, "replicas") /* the gang size it was made for */
                      ? (int)json_integer_value(json_object_get(j, "replicas")) : -1;
    p->phase = phase_of(json_object_get(j, "phase"));
    p->ready = json_is_true(json_object_get(j, "ready"));
    p->terminating = json_is_true(json_object_get(j, "terminating"));
    p->exit_code = ec ? (int)json_integer_value(ec) : -1;
    snprintf(p->reason, sizeof(p->reason), "%s",
             json_is_string(json_object_get(j, "reason"))
                 ? json_string_value(json_object_get(j, "reason")) : "");
    snprintf(p->problem, sizeof(p->problem), "%s",
             json_is_string(json_object_get(j, "problem"))
                 ? json_string_value(json_object_get(j, "problem")) : "");
    snprintf(p->problem_msg, sizeof(p->problem_msg), "%s",
             json_is_string(json_object_get(j, "problemMsg"))
                 ? json_string_value(json_object_get(j, "problemMsg")) : "");
    /* "disruption": the DisruptionTarget reason; the pod is then disrupted */
    p->standby = json_is_true(json_object_get(j, "standby"));
    p->disrupted = json_is_string(json_object_get(j, "disruption"));
    snprintf(p->disruption, sizeof(p->disruption), "%s",
             p->disrupted ? json_string_value(json_object_get(j, "disruption")) : "");
}

static void action_str(const struct rec_action *a, char *out, size_t n)
{
    if (a->verb == REC_CREATE && a->kind == REC_POD)
        snprintf(out, n, "create Pod %s batch=%d", a->name, a->batch);
    else
        snprintf(out, n, "%s %s %s", rec_verb_str(a->verb), rec_kind_str(a->kind), a->name);
}

static void check_actions(const char *file, const struct rec_result *r, const json_t *want)
{
    char got[REC_OBJ_NAME_MAX + 64];
    bool ok = json_array_size(want) == r->nactions;

    for (size_t i = 0; ok && i < r->nactions; i++) {
        action_str(&r->actions[i], got, sizeof(got));
        ok = strcmp(got, json_string_value(json_array_get(want, i))) == 0;
    }
    if (!TEST_CHECK(ok)) {
        fprintf(stderr, "       %s: actions differ\n       want:", file);
        for (size_t i = 0; i < json_array_size(want); i++)
            fprintf(stderr, " [%s]", json_string_value(json_array_get(want, i)));
        fprintf(stderr, "\n       got: ");
        for (size_t i = 0; i < r->nactions; i++) {
            action_str(&r->actions[i], got, sizeof(got));
            fprintf(stderr, " [%s]", got);
        }
        fprintf(stderr, "\n");
    }
}

static void check_events(const char *file, const struct rec_result *r, const json_t *want)
{
    char got[128];
    bool ok = json_array_size(want) == (size_t)r->nevents;

    for (int i = 0; ok && i < r->nevents; i++) {
        snprintf(got, sizeof(got), "%s %s", r->events[i].warning ? "Warning" : "Normal",
                 r->events[i].reason);
        ok = strcmp(got, json_string_value(json_array_get(want, (size_t)i))) == 0;
    }
    if (!TEST_CHECK(ok)) {
        fprintf(stderr, "       %s: events differ; got:", file);
        for (int i = 0; i < r->nevents; i++)
            fprintf(stderr, " [%s %s: %s]", r->events[i].warning ? "Warning" : "Normal",
                    r->events[i].reason, r->events[i].message);
        fprintf(stderr, "\n");
    }
}

static void check_objects(const char *file, const struct rec_result *r, const json_t *want)
{
    const char *name;
    json_t *sub;
    char path[256];

    json_object_foreach((json_t *)want, name, sub) {
        const json_t *obj = NULL;
        const char *slash = strchr(name, '/'); /* "Kind/name": the Service and Workload <job> */
        for (size_t i = 0; i < r->nactions; i++) {
            const struct rec_action *a = &r->actions[i];
            const char *kind = rec_kind_str(a->kind);
            bool same = slash ? strlen(kind) == (size_t)(slash - name) &&
                                    strncmp(kind, name, strlen(kind)) == 0 &&
                                    strcmp(a->name, slash + 1) == 0
                              : strcmp(a->name, name) == 0;
            if (same && a->obj)
                obj = a->obj;
        }
        snprintf(path, sizeof(path), "%s: object %s", file, name);
        TEST_CHECK(match(sub, obj, path));
    }
}

struct fixture {
    json_t *root;
    struct rec_pod *pods;
    size_t npods;
    struct rec_input in;
    char *config; /* the rendered config, when "configmap": true */
};

static int load_input(struct fixture *fx, struct tj *tj, char *err, size_t errlen)
{
    const json_t *pods = json_object_get(fx->root, "pods"), *cm, *pj;
    const char *now = json_string_value(json_object_get(fx->root, "now"));
    size_t i;
    int rc = tj_parse(json_object_get(fx->root, "job"), tj, err, errlen);

    fx->npods = json_array_size(pods);
    fx->pods = calloc(fx->npods + 1, sizeof(*fx->pods));
    json_array_foreach(pods, i, pj) {
        if (json_object_get(pj, "metadata"))
            TEST_EQ_INT(rec_pod_from_json(pj, &fx->pods[i]), 0);
        else
            compact_pod(pj, &fx->pods[i]);
    }
    memset(&fx->in, 0, sizeof(fx->in));
    fx->in.job = tj;
    fx->in.pods = fx->pods;
    fx->in.npods = fx->npods;
    fx->in.have_service = json_is_true(json_object_get(fx->root, "service"));
    fx->in.have_secret = json_is_true(json_object_get(fx->root, "secret"));
    cm = json_object_get(fx->root, "configmap");
    fx->in.have_configmap = json_is_true(cm) || json_is_string(cm);
    if (json_is_true(cm) && rc == 0) {
        /* as rendered for the size the job runs at: status.elasticWorkers, else replicas */
        struct tj at = *tj;
        if (tj->status.elastic_workers > 0 && tj->status.elastic_workers < tj->replicas)
            at.replicas = tj->status.elastic_workers;
        fx->in.configmap_data = fx->config = render_config_json(&at);
    }
    else if (json_is_string(cm))
        fx->in.configmap_data = json_string_value(cm);
    fx->in.expectations_met = !json_is_false(json_object_get(fx->root, "expectationsMet"));
    fx->in.kueue_served = json_is_true(json_object_get(json_object_get(fx->root, "kueue"),
                                                       "served"));
    fx->in.workloads = json_object_get(json_object_get(fx->root, "kueue"), "workloads");
    fx->in.token = "tok";
    fx->in.progress_restart = -1;
    if ((pj = json_object_get(fx->root, "progress"))) { /* what the poller would pass */
        const char *since = json_string_value(json_object_get(pj, "since"));
        fx->in.progress = json_object_get(pj, "status");
        fx->in.progress_restart = (int)json_integer_value(json_object_get(pj, "restart"));
        fx->in.progress_advanced = json_is_true(json_object_get(pj, "advanced"));
        if (since && cond_parse_time(since, &fx->in.progress_since) != 0)
            return -1;
    }
    if (!now || cond_parse_time(now, &fx->in.now) != 0)
        return -1;
    return rc;
}

static void fixture_cleanup(struct fixture *fx)
{
    free(fx->pods);
    free(fx->config);
    fx->pods = NULL;
    fx->config = NULL;
}

/* Feeds the new status back into the job and reconciles the same world again: a steady state
 * must produce no actions and no status write (level-based and idempotent). */
static void second_pass(const char *file, struct fixture *fx, const json_t *status)
{
    json_t *job = json_deep_copy(json_object_get(fx->root, "job"));
    struct rec_result r2;
    struct tj tj2;
    struct fixture fx2 = {0};

    json_object_set(job, "status", (json_t *)status);
    json_object_set_new(fx->root, "job", job);
    fx2.root = fx->root;
    TEST_EQ_INT(load_input(&fx2, &tj2, NULL, 0), 0);
    TEST_EQ_INT(rec_reconcile(&fx2.in, &r2), 0);
    if (!TEST_CHECK(r2.nactions == 0 && !r2.status_changed)) {
        char *s = json_dumps(r2.status, JSON_COMPACT);
        fprintf(stderr, "       %s: second pass: %zu actions, status changed=%d: %s\n", file,
                r2.nactions, r2.status_changed, s);
        free(s);
    }
    rec_result_cleanup(&r2);
    tj_cleanup(&tj2);
    fixture_cleanup(&fx2);
}

static void run_fixture(const char *dir, const char *file)
{
    char path[1024], err[TJ_ERR_MAX], label[300];
    struct fixture fx = {0};
    struct rec_result r;
    struct tj tj;
    const json_t *exp, *v;
    json_error_t je;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fx.root = json_load_file(path, 0, &je);
    if (!TEST_CHECK(fx.root != NULL)) {
        fprintf(stderr, "       %s: %s (line %d)\n", path, je.text, je.line);
        return;
    }
    exp = json_object_get(fx.root, "expect");
    rc = load_input(&fx, &tj, err, sizeof(err));
    if (json_is_true(json_object_get(fx.root, "invalid"))) {
        TEST_EQ_INT(rc, OP_EINVALID);
        rec_invalid(&tj, err, fx.in.now, &r);
    } else {
        TEST_EQ_INT(rc, 0);
        if (rc != 0)
            fprintf(stderr, "       %s: %s\n", file, err);
        TEST_EQ_INT(rec_reconcile(&fx.in, &r), 0);
    }
    check_actions(file, &r, json_object_get(exp, "actions"));
    snprintf(label, sizeof(label), "%s: status", file);
    if ((v = json_object_get(exp, "status")))
        TEST_CHECK(match(v, r.status, label));
    if ((v = json_object_get(exp, "statusChanged")))
        TEST_EQ_INT(r.status_changed, json_is_true(v));
    if ((v = json_object_get(exp, "requeueAfter")))
        TEST_EQ_INT(r.requeue_after_s, json_integer_value(v));
    if ((v = json_object_get(exp, "events")))
        check_events(file, &r, v);
    if ((v = json_object_get(exp, "objects")))
        check_objects(file, &r, v);
    snprintf(label, sizeof(label), "%s: kueueFlavors", file);
    if ((v = json_object_get(exp, "kueueFlavors")))
        TEST_CHECK(json_is_null(v) ? r.kueue_flavors == NULL : match(v, r.kueue_flavors, label));
    if (json_is_true(json_object_get(exp, "secondPassUnchanged")))
        second_pass(file, &fx, r.status);
    rec_result_cleanup(&r);
    tj_cleanup(&tj);
    fixture_cleanup(&fx);
    json_decref(fx.root);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_fixtures(void)
{
    DIR *d = opendir(REC_TESTDATA);
    struct dirent *de;
    char *names[256];
    int n = 0;

    if (!TEST_CHECK(d != NULL))
        return;
    while ((de = readdir(d)) && n < 256) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".json") == 0)
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
    TEST_CHECK(n >= 20);
    for (int i = 0; i < n; i++) {
        int before = test_failed_;
        run_fixture(REC_TESTDATA, names[i]);
        printf("  %s %s\n", test_failed_ == before ? "ok  " : "FAIL", names[i]);
        free(names[i]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Unit tests
 * ------------------------------------------------------------------------------------------- */

static void test_pod_from_json(void)
{
    struct rec_pod p;
    json_t *pod = json_loads(
        "{\"metadata\":{\"name\":\"spam-worker-3\",\"uid\":\"u3\",\"labels\":{"
        "\"gantry.dev/replica-index\":\"3\",\"gantry.dev/restart-count\":\"2\"},"
        "\"deletionTimestamp\":\"2026-11-30T07:00:00Z\",\"ownerReferences\":[{\"uid\":\"rs\"},"
        "{\"uid\":\"job-uid-7\",\"controller\":true}]},\"status\":{\"phase\":\"Failed\","
        "\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}],\"containerStatuses\":["
        "{\"name\":\"sidecar\",\"state\":{\"terminated\":{\"exitCode\":0}}},"
        "{\"name\":\"worker\",\"state\":{\"terminated\":{\"exitCode\":137,\"reason\":"
        "\"OOMKilled\"}}}]}}", 0, NULL);

    TEST_EQ_INT(rec_pod_from_json(pod, &p), 0);
    TEST_EQ_STR(p.name, "spam-worker-3");
    TEST_EQ_STR(p.uid, "u3");
    TEST_EQ_STR(p.owner, "job-uid-7"); /* the controller's, not any owner's */
    TEST_EQ_INT(p.index, 3);
    TEST_EQ_INT(p.restart, 2);
    TEST_EQ_INT(p.phase, REC_POD_FAILED);
    TEST_CHECK(!p.ready);
    TEST_CHECK(p.terminating);
    TEST_EQ_INT(p.exit_code, 137);
    TEST_EQ_STR(p.reason, "OOMKilled");
    json_decref(pod);

    pod = json_loads("{\"metadata\":{\"name\":\"x\",\"labels\":{\"gantry.dev/replica-index\":"
                     "\"1a\"}},\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":"
                     "\"Ready\",\"status\":\"True\"}]}}", 0, NULL);
    TEST_EQ_INT(rec_pod_from_json(pod, &p), 0);
    TEST_EQ_INT(p.index, -1);
    TEST_EQ_INT(p.restart, -1);
    TEST_CHECK(p.ready);
    TEST_EQ_INT(p.exit_code, -1);
    TEST_EQ_STR(p.owner, "");
    json_decref(pod);

    pod = json_loads("{\"metadata\":{}}", 0, NULL);
    TEST_EQ_INT(rec_pod_from_json(pod, &p), OP_EPARSE);
    json_decref(pod);
    /* an empty name would make the pod's delete a DELETE of the collection's path */
    pod = json_loads("{\"metadata\":{\"name\":\"\"}}", 0, NULL);
    TEST_EQ_INT(rec_pod_from_json(pod, &p), OP_EPARSE);
    json_decref(pod);
}

static int parse_job(const char *text, struct tj *tj)
{
    json_t *o = json_loads(text, 0, NULL);
    int rc = tj_parse(o, tj, NULL, 0);
    json_decref(o);
    return rc;
}

/* 1000 pods: batches 1, 2, 4, ... 256, 489 (the last one partial), in index order. */
static void test_slow_start_batches(void)
{
    struct tj tj;
    struct rec_input in = {0};
    struct rec_result r;
    int per_batch[16] = {0};

    TEST_EQ_INT(parse_job("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"big\",\"namespace\""
                          ":\"n\",\"uid\":\"u\",\"generation\":1},\"spec\":{\"replicas\":1000}}",
                          &tj), 0);
    in.job = &tj;
    in.have_service = in.have_secret = true;
    in.expectations_met = true;
    in.now = 1000;
    TEST_EQ_INT(rec_reconcile(&in, &r), 0);
    TEST_EQ_INT(r.nactions, 1001); /* 1000 pods + the ConfigMap */
    for (size_t i = 0; i < r.nactions; i++)
        if (r.actions[i].kind == REC_POD)
            per_batch[r.actions[i].batch]++;
    for (int b = 0; b < 9; b++)
        TEST_EQ_INT(per_batch[b], 1 << b);
    TEST_EQ_INT(per_batch[9], 1000 - 511);
    TEST_EQ_STR(r.actions[1].name, "big-worker-0");
    rec_result_cleanup(&r);
    tj_cleanup(&tj);
}

static size_t configmap_updates(struct rec_input *in)
{
    struct rec_result r;
    size_t n = 0;

    TEST_EQ_INT(rec_reconcile(in, &r), 0);
    for (size_t i = 0; i < r.nactions; i++)
        n += r.actions[i].kind == REC_CONFIGMAP && r.actions[i].verb == REC_UPDATE;
    rec_result_cleanup(&r);
    return n;
}

/* The operator's cache keeps only a digest of the ConfigMap's config.json. */
static void test_configmap_digest(void)
{
    struct tj tj;
    struct rec_input in = {0};
    char dg[REC_DIGEST_LEN], other[REC_DIGEST_LEN], *want;

    TEST_EQ_INT(parse_job("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"d\",\"namespace\""
                          ":\"n\",\"uid\":\"u\",\"generation\":1},\"spec\":{\"replicas\":2}}",
                          &tj), 0);
    in.job = &tj;
    in.have_service = in.have_secret = in.have_configmap = true;
    in.expectations_met = true;
    in.now = 1000;
    want = render_config_json(&tj);
    rec_digest(want, dg);
    TEST_EQ_INT(strlen(dg), 32);
    want[strlen(want) / 2] ^= 1; /* one bit elsewhere: another digest */
    rec_digest(want, other);
    TEST_CHECK(strcmp(dg, other) != 0);
    in.configmap_digest = dg;
    TEST_EQ_INT(configmap_updates(&in), 0);
    in.configmap_digest = other;
    TEST_EQ_INT(configmap_updates(&in), 1);
    in.configmap_digest = NULL; /* no config.json at all */
    TEST_EQ_INT(configmap_updates(&in), 1);
    free(want);
    tj_cleanup(&tj);
}

static void test_delete_carries_uid(void)
{
    struct tj tj;
    struct rec_pod pods[2] = {
        {.name = "j-worker-0", .uid = "A", .index = 0, .restart = 0, .phase = REC_POD_FAILED,
         .exit_code = 1},
        {.name = "j-worker-1", .uid = "B", .index = 1, .restart = 0, .phase = REC_POD_RUNNING,
         .exit_code = -1},
    };
    struct rec_input in = {0};
    struct rec_result r;

    TEST_EQ_INT(parse_job("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j\",\"namespace\":"
                          "\"n\",\"uid\":\"u\"},\"spec\":{\"replicas\":2}}", &tj), 0);
    in.job = &tj;
    in.pods = pods;
    in.npods = 2;
    in.expectations_met = true;
    TEST_EQ_INT(rec_reconcile(&in, &r), 0);
    TEST_EQ_INT(r.nactions, 2);
    TEST_EQ_STR(r.actions[0].uid, "A");
    TEST_EQ_STR(r.actions[1].uid, "B");
    TEST_EQ_INT(json_integer_value(json_object_get(r.status, "restarts")), 1);
    rec_result_cleanup(&r);
    tj_cleanup(&tj);
    /* the TTL's delete of the job itself names its uid too */
    TEST_EQ_INT(parse_job("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"j\",\"namespace\":"
                          "\"n\",\"uid\":\"u\"},\"spec\":{\"replicas\":1,\"runPolicy\":{"
                          "\"ttlSecondsAfterFinished\":0}},\"status\":{\"phase\":\"Succeeded\","
                          "\"completionTime\":\"2026-11-30T07:00:00Z\"}}", &tj), 0);
    in.job = &tj;
    in.npods = 0;
    in.now = 1796040000; /* 2026-12-01 */
    TEST_EQ_INT(rec_reconcile(&in, &r), 0);
    TEST_EQ_INT(r.nactions, 1);
    if (r.nactions == 1) {
        TEST_EQ_INT(r.actions[0].kind, REC_JOB);
        TEST_EQ_STR(r.actions[0].uid, "u");
    }
    rec_result_cleanup(&r);
    tj_cleanup(&tj);
}

int main(void)
{
    TEST_RUN(test_fixtures);
    TEST_RUN(test_pod_from_json);
    TEST_RUN(test_slow_start_batches);
    TEST_RUN(test_delete_carries_uid);
    TEST_RUN(test_configmap_digest);
    return test_summary();
}
