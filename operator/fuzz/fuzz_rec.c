/*
 * libFuzzer target: the operator's decisions on untrusted objects. The input is one JSON document
 * in the shape of a reconcile fixture (operator/testdata/rec/, with pods as full Pod objects, the
 * informer's form): a TrainingJob anyone with create rights wrote, pods whose status a kubelet
 * and a worker's termination message filled, and the /progress answer a worker served.
 *
 *   {"now": "2026-11-30T08:00:00Z", "job": {TrainingJob}, "pods": [{Pod}, ...],
 *    "service": bool, "secret": bool, "configmap": true | "config.json text",
 *    "expectationsMet": bool, "progress": {"status": {...}, "restart": R, "advanced": bool,
 *    "since": "..."}, "worker": {rank 0's /progress answer},
 *    "kueue": {"served": bool, "workloads": [the job's Kueue Workloads]}}
 *
 * status.progress comes as the operator makes it: "worker" through progress_status() (the
 * poller), else the fixture's "progress.status"; then a finished rank 0's termination message
 * through progress_final(), as progress_lookup() does.
 *
 * Beyond "no crash, no leak, no undefined behaviour", it checks what must hold for any input:
 *  - a job tj_parse() accepts renders children the API server takes by name: every pod and the
 *    Service named by a DNS label of at most 63 characters, each pod with a "worker" container;
 *  - with gantry-worker's config loader linked in (FUZZ_REC_WORKER_CFG: worker/cfg.c), the
 *    config.json rendered for such a job is one the worker accepts: the operator never starts a
 *    gang that exits 78 on a config it let through (tj_crd_test checks each bound alone; this,
 *    any combination). One exception, on purpose: a job may leave out data.train, which the
 *    worker then takes from GANTRY_DATA_TRAIN (an image or the template can set it), so the
 *    check gives the worker a training file as that variable would;
 *  - a job it refuses gets an InvalidSpec status (rec_invalid) and no action;
 *  - rec_reconcile() returns 0, every action names its object (creates and updates carry it,
 *    under the same name), no more pod creates than replicas, a status object;
 *  - reconciling the same world again with the status just written writes no new status: a
 *    status that changed on every pass would be a loop of writes to the API server.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fuzz.h"
#include "operator/kube/kube_err.h"
#include "operator/progress.h"
#include "operator/rec.h"
#ifdef FUZZ_REC_WORKER_CFG
#include "worker/cfg.h"
#endif

#define MAX_PODS 64

struct world {
    json_t *root;
    struct rec_pod pods[MAX_PODS];
    struct rec_input in;
    char *config;
    json_t *progress; /* status.progress made from "worker" or a termination message */
};

static void world_cleanup(struct world *w)
{
    free(w->config);
    json_decref(w->progress);
}

static bool dns_label(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return false;
    return true;
}

static const char *name_of(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
}

/* The world in root, as the informer and the poller would hand it over. -1: not a world. */
static int load(struct world *w, struct tj *tj, char *err, size_t errlen, int *parsed)
{
    const json_t *pods = json_object_get(w->root, "pods"), *pj, *cm, *pg;
    json_t *fin;
    const char *now = json_string_value(json_object_get(w->root, "now"));
    size_t i;

    memset(&w->in, 0, sizeof(w->in));
    w->config = NULL;
    w->progress = NULL;
    *parsed = tj_parse(json_object_get(w->root, "job"), tj, err, errlen);
    w->in.job = tj;
    w->in.pods = w->pods;
    json_array_foreach(pods, i, pj) { /* one pod a name, as in the informer's cache */
        struct rec_pod *rp = &w->pods[w->in.npods];
        bool dup = false;

        if (w->in.npods == MAX_PODS || rec_pod_from_json(pj, rp) != 0)
            continue;
        for (size_t k = 0; k < w->in.npods && !dup; k++)
            dup = strcmp(w->pods[k].name, rp->name) == 0;
        w->in.npods += !dup;
    }
    w->in.have_service = json_is_true(json_object_get(w->root, "service"));
    w->in.have_secret = json_is_true(json_object_get(w->root, "secret"));
    cm = json_object_get(w->root, "configmap");
    w->in.have_configmap = json_is_true(cm) || json_is_string(cm);
    if (json_is_true(cm) && *parsed == 0)
        w->in.configmap_data = w->config = render_config_json(tj);
    else if (json_is_string(cm))
        w->in.configmap_data = json_string_value(cm);
    w->in.expectations_met = !json_is_false(json_object_get(w->root, "expectationsMet"));
    w->in.token = "fuzz-token";
    w->in.kueue_served = json_is_true(json_object_get(json_object_get(w->root, "kueue"), "served"));
    w->in.workloads = json_object_get(json_object_get(w->root, "kueue"), "workloads");
    w->in.progress_restart = -1;
    if ((pg = json_object_get(w->root, "progress"))) {
        const char *since = json_string_value(json_object_get(pg, "since"));
        w->in.progress = json_object_get(pg, "status");
        w->in.progress_restart = (int)json_integer_value(json_object_get(pg, "restart"));
        w->in.progress_advanced = json_is_true(json_object_get(pg, "advanced"));
        if (since && cond_parse_time(since, &w->in.progress_since) != 0)
            w->in.progress_since = 0;
    }
    if ((pg = json_object_get(w->root, "worker")))
        w->in.progress = w->progress = progress_status(pg, w->in.progress_since);
    if ((fin = progress_final(&w->in))) {
        json_decref(w->progress);
        w->in.progress = w->progress = fin;
    }
    if (!now || cond_parse_time(now, &w->in.now) != 0)
        return -1;
    return 0;
}

static void check_children(const struct tj *tj)
{
    char name[RENDER_NAME_MAX];
    int idx[2] = {0, tj->replicas - 1};
    json_t *o;
    char *cfg;

    o = render_service(tj);
    FUZZ_CHECK(o && name_of(o) && dns_label(name_of(o)));
    json_decref(o);
    for (int k = 0; k < 2; k++) {
        const json_t *c, *containers;
        bool worker = false;
        size_t i;

        o = render_pod(tj, idx[k], tj->status.restarts);
        render_pod_name(tj, idx[k], name, sizeof(name));
        FUZZ_CHECK(o && name_of(o) && strcmp(name_of(o), name) == 0 && dns_label(name));
        containers = json_object_get(json_object_get(o, "spec"), "containers");
        json_array_foreach(containers, i, c) {
            const char *cn = json_string_value(json_object_get(c, "name"));
            worker |= cn && strcmp(cn, RENDER_CONTAINER) == 0;
        }
        FUZZ_CHECK(worker);
        json_decref(o);
    }
    cfg = render_config_json(tj);
    FUZZ_CHECK(cfg != NULL);
    o = json_loads(cfg, 0, NULL);
    FUZZ_CHECK(json_is_object(o));
#ifdef FUZZ_REC_WORKER_CFG
    {
        struct cfg c;
        char werr[512];
        int rc;

        cfg_defaults(&c);
        snprintf(c.train, sizeof(c.train), "/env/GANTRY_DATA_TRAIN.jsonl");
        rc = cfg_apply_json(&c, o, "config.json", werr, sizeof(werr));
        if (rc == 0)
            rc = cfg_validate(&c, werr, sizeof(werr));
        if (rc != 0)
            fprintf(stderr, "gantry-worker refuses the config of a job tj_parse() accepted: %s\n"
                    "%s\n", werr, cfg);
        FUZZ_CHECK(rc == 0);
    }
#endif
    json_decref(o);
    free(cfg);
}

static void check_result(const struct tj *tj, const struct rec_result *r, bool valid)
{
    int creates = 0;
    char *s;

    FUZZ_CHECK(json_is_object(r->status));
    s = json_dumps(r->status, JSON_COMPACT);
    FUZZ_CHECK(s != NULL);
    free(s);
    FUZZ_CHECK(valid || r->nactions == 0);
    for (size_t i = 0; i < r->nactions; i++) {
        const struct rec_action *a = &r->actions[i];
        FUZZ_CHECK(a->name[0] != '\0');
        if (a->verb == REC_DELETE)
            continue;
        FUZZ_CHECK(a->obj && name_of(a->obj) && strcmp(name_of(a->obj), a->name) == 0);
        creates += a->verb == REC_CREATE && a->kind == REC_POD;
    }
    FUZZ_CHECK(!valid || creates <= tj->replicas);
    FUZZ_CHECK(r->nevents >= 0 && r->nevents <= REC_EVENTS_MAX);
}

/* The same world, with the job's status replaced by what the first pass wrote. */
static void second_pass(struct world *w, const json_t *status)
{
    json_t *job = json_deep_copy(json_object_get(w->root, "job"));
    struct world w2;
    struct rec_result r2;
    struct tj tj2;
    char err[TJ_ERR_MAX];
    int parsed;

    json_object_set(job, "status", (json_t *)status);
    w2.root = json_deep_copy(w->root);
    json_object_set_new(w2.root, "job", job);
    if (load(&w2, &tj2, err, sizeof(err), &parsed) == 0 && parsed == 0) {
        FUZZ_CHECK(rec_reconcile(&w2.in, &r2) == 0);
        if (r2.status_changed) {
            char *a = json_dumps(status, JSON_COMPACT), *b = json_dumps(r2.status, JSON_COMPACT);
            fprintf(stderr, "status written on every pass:\n  first:  %s\n  second: %s\n", a, b);
            free(a);
            free(b);
        }
        FUZZ_CHECK(!r2.status_changed);
        rec_result_cleanup(&r2);
    }
    tj_cleanup(&tj2);
    world_cleanup(&w2);
    json_decref(w2.root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct world w;
    struct rec_result r;
    struct tj tj;
    char err[TJ_ERR_MAX];
    int parsed;

    w.root = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(w.root)) {
        json_decref(w.root);
        return 0;
    }
    if (load(&w, &tj, err, sizeof(err), &parsed) != 0 || parsed == OP_EPARSE)
        goto out;
    if (parsed != 0) {
        FUZZ_CHECK(err[0] != '\0');
        rec_invalid(&tj, err, w.in.now, &r);
        check_result(&tj, &r, false);
        rec_result_cleanup(&r);
        goto out;
    }
    check_children(&tj);
    FUZZ_CHECK(rec_reconcile(&w.in, &r) == 0);
    check_result(&tj, &r, true);
    second_pass(&w, r.status);
    rec_result_cleanup(&r);
out:
    tj_cleanup(&tj);
    world_cleanup(&w);
    json_decref(w.root);
    return 0;
}
