/*
 * The CRD and tj.c must agree: this walks the schema of manifests/crds/gantry.dev_trainingjobs.yaml
 * and checks tj_parse() against every rule it finds there, so a bound, an enum or a default
 * changed in one place and not the other fails here:
 *  - minimum/maximum (and exclusiveMinimum) of every number: the bound is accepted, one step
 *    past it is refused with a message naming the field;
 *  - every enum value is accepted, and a value outside the enum is refused;
 *  - every default under spec.training equals what tj_parse() renders into config.json, and the
 *    other defaults equal the struct's fields;
 *  - with the worker linked in (TJ_WORKER_CFG), every value tj_parse() accepts at a bound or from
 *    an enum renders a config.json that gantry-worker's own loader (worker/cfg.c) accepts: the
 *    operator never starts a gang that exits 78 on a config the API server let through.
 */
#include "operator/tj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"
#include "operator/kube/kube_config.h"
#include "operator/render.h"
#ifdef TJ_WORKER_CFG
#include "worker/cfg.h"
#endif

#ifndef TJ_CRD_PATH
#error "TJ_CRD_PATH must name manifests/crds/gantry.dev_trainingjobs.yaml"
#endif

static json_t *load_crd(void)
{
    FILE *f = fopen(TJ_CRD_PATH, "rb");
    char *text, err[256];
    json_t *doc = NULL;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    text = calloc(1, (size_t)n + 1);
    if (fread(text, 1, (size_t)n, f) != (size_t)n || kube_yaml_to_json(text, (size_t)n, &doc, err,
                                                                       sizeof(err)) != 0)
        fprintf(stderr, "cannot read %s: %s\n", TJ_CRD_PATH, err);
    fclose(f);
    free(text);
    return doc;
}

/* {"kind":"TrainingJob", metadata, "spec": <spec with value v at path>}; v is stolen. */
static json_t *job_with(const char *const *path, int depth, json_t *v)
{
    json_t *spec = json_object(), *o = spec;

    for (int i = 0; i < depth - 1; i++) {
        json_t *next = json_object();
        json_object_set_new(o, path[i], next);
        o = next;
    }
    json_object_set_new(o, path[depth - 1], v);
    return json_pack("{s:s, s:{s:s, s:s, s:s}, s:o}", "kind", "TrainingJob", "metadata", "name",
                     "spam", "namespace", "ml", "uid", "u", "spec", spec);
}

static void dotted(const char *const *path, int depth, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "spec");
    for (int i = 0; i < depth && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, ".%s", path[i]);
}

static int rules, checked_defaults, worker_checks;

/* The worker loads the config.json the operator renders for tj: 0, or its error in err. */
static int worker_accepts(const struct tj *tj, char *err, size_t n)
{
#ifdef TJ_WORKER_CFG
    char *text = render_config_json(tj);
    json_t *doc = json_loads(text, 0, NULL);
    struct cfg c;
    int rc;

    cfg_defaults(&c);
    rc = cfg_apply_json(&c, doc, "config.json", err, n);
    if (rc == 0)
        rc = cfg_validate(&c, err, n);
    json_decref(doc);
    free(text);
    worker_checks++;
    return rc;
#else
    (void)tj, (void)err, (void)n;
    return 0;
#endif
}

/* tj_parse() of spec-with-v: returns its rc; err gets the messages. When tj accepts and
 * `worker` is set, the rendered config must be accepted by the worker too. */
static int try_value(const char *const *path, int depth, json_t *v, char *err, size_t n,
                     bool worker)
{
    json_t *job = job_with(path, depth, v), *training, *data;
    char werr[1024], name[256];
    struct tj tj;
    int rc;

    /* the worker needs a training file; tj does not care */
    training = json_object_get(json_object_get(job, "spec"), "training");
    if (!training)
        json_object_set_new(json_object_get(job, "spec"), "training", training = json_object());
    if (json_is_object(training)) {
        data = json_object_get(training, "data");
        if (!data)
            json_object_set_new(training, "data", data = json_object());
        if (!json_object_get(data, "train"))
            json_object_set_new(data, "train", json_string("/data/train.jsonl"));
        /* device cuda needs GPUs (a cross-field rule, checked in tj_test) */
        if (json_is_string(json_object_get(training, "device")) &&
            strcmp(json_string_value(json_object_get(training, "device")), "cuda") == 0)
            json_object_set_new(json_object_get(job, "spec"), "gpusPerReplica", json_integer(1));
        /* so do precision bf16 and attention fused (device unset: cuda with GPUs) */
        if ((json_is_string(json_object_get(training, "precision")) &&
             strcmp(json_string_value(json_object_get(training, "precision")), "bf16") == 0) ||
            (json_is_string(json_object_get(training, "attention")) &&
             strcmp(json_string_value(json_object_get(training, "attention")), "fused") == 0) ||
            json_is_true(json_object_get(training, "cudaGraphs")))
            json_object_set_new(json_object_get(job, "spec"), "gpusPerReplica", json_integer(1));
        /* bestMetric pearson is regression's (a cross-field rule, checked in tj_test) */
        if (json_is_string(json_object_get(training, "bestMetric")) &&
            strcmp(json_string_value(json_object_get(training, "bestMetric")), "pearson") == 0)
            json_object_set_new(training, "task", json_string("regression"));
    }
    rc = tj_parse(job, &tj, err, n);
    if (rc == 0 && worker && !TEST_CHECK(worker_accepts(&tj, werr, sizeof(werr)) == 0)) {
        dotted(path, depth, name, sizeof(name));
        fprintf(stderr, "       %s: tj accepted, the worker refused: %s\n", name, werr);
    }
    tj_cleanup(&tj);
    json_decref(job);
    return rc;
}

static void check_bounds(const char *const *path, int depth, const json_t *node)
{
    const char *type = json_string_value(json_object_get(node, "type"));
    const char *min = json_string_value(json_object_get(node, "minimum"));
    const char *max = json_string_value(json_object_get(node, "maximum"));
    const char *exmin = json_string_value(json_object_get(node, "exclusiveMinimum"));
    bool integer = type && strcmp(type, "integer") == 0;
    char name[256], want[300], err[TJ_ERR_MAX];

    if (!type || (!integer && strcmp(type, "number") != 0))
        return;
    dotted(path, depth, name, sizeof(name));
    snprintf(want, sizeof(want), "%s: must be", name);
    if (min) {
        double m = strtod(min, NULL);
        bool ex = exmin && strcmp(exmin, "true") == 0;
        json_t *past = integer ? json_integer((json_int_t)m - 1) : json_real(ex ? m : m - 0.5);
        json_t *at = integer ? json_integer((json_int_t)m) : json_real(ex ? m + 1e-6 : m);

        try_value(path, depth, past, err, sizeof(err), false);
        if (!TEST_CHECK(strstr(err, want) != NULL))
            fprintf(stderr, "       below the CRD's minimum %s of %s: got \"%s\"\n", min, name, err);
        try_value(path, depth, at, err, sizeof(err), true);
        if (!TEST_CHECK(strstr(err, want) == NULL))
            fprintf(stderr, "       the CRD's minimum %s of %s refused: \"%s\"\n", min, name, err);
        rules++;
    }
    if (max) {
        double m = strtod(max, NULL);
        json_t *past = integer ? json_integer((json_int_t)m + 1) : json_real(m * 2 + 1);
        json_t *at = integer ? json_integer((json_int_t)m) : json_real(m);

        try_value(path, depth, past, err, sizeof(err), false);
        if (!TEST_CHECK(strstr(err, want) != NULL))
            fprintf(stderr, "       above the CRD's maximum %s of %s: got \"%s\"\n", max, name, err);
        try_value(path, depth, at, err, sizeof(err), true);
        if (!TEST_CHECK(strstr(err, want) == NULL))
            fprintf(stderr, "       the CRD's maximum %s of %s refused: \"%s\"\n", max, name, err);
        rules++;
    }
}

static void check_enum(const char *const *path, int depth, const json_t *node)
{
    const json_t *e = json_object_get(node, "enum"), *v;
    char name[256], err[TJ_ERR_MAX];
    size_t i;

    if (!json_is_array(e))
        return;
    dotted(path, depth, name, sizeof(name));
    json_array_foreach(e, i, v) {
        try_value(path, depth, json_deep_copy(v), err, sizeof(err), true);
        if (!TEST_CHECK(strstr(err, name) == NULL))
            fprintf(stderr, "       enum value %s of %s refused: \"%s\"\n", json_string_value(v),
                    name, err);
    }
    try_value(path, depth, json_string("NoSuchValue"), err, sizeof(err), false);
    if (!TEST_CHECK(strstr(err, name) != NULL))
        fprintf(stderr, "       %s accepted a value outside its enum\n", name);
    rules++;
}

/* The default tj_parse() applies at path, as a string like the YAML scalar ("" if unknown). */
static void tj_default(const struct tj *tj, const char *const *path, int depth, char *out,
                       size_t n)
{
    char name[256];

    out[0] = '\0';
    dotted(path, depth, name, sizeof(name));
    if (depth >= 2 && strcmp(path[0], "training") == 0) {
        const json_t *v = tj->training;
        for (int i = 1; i < depth && v; i++)
            v = json_object_get(v, path[i]);
        if (json_is_string(v))
            snprintf(out, n, "%s", json_string_value(v));
        else if (json_is_integer(v))
            snprintf(out, n, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
            snprintf(out, n, "%g", json_real_value(v));
        else if (json_is_boolean(v))
            snprintf(out, n, "%s", json_is_true(v) ? "true" : "false");
        return;
    }
    struct { const char *name; const char *s; long long i; } f[] = {
        {"spec.replicas", NULL, tj->replicas},
        {"spec.gpusPerReplica", NULL, tj->gpus},
        {"spec.image", tj->image, 0},
        {"spec.imagePullPolicy", tj->pull_policy, 0},
        {"spec.port", NULL, tj->port},
        {"spec.checkpoint.path", tj->ckpt_path, 0},
        {"spec.checkpoint.intervalSteps", NULL, tj->ckpt_interval},
        {"spec.checkpoint.keep", NULL, tj->ckpt_keep},
        {"spec.checkpoint.saveOnStop", tj->ckpt_save_on_stop ? "true" : "false", 0},
        {"spec.runPolicy.backoffLimit", NULL, tj->backoff_limit},
        {"spec.runPolicy.suspend", tj->suspend ? "true" : "false", 0},
        {"spec.runPolicy.cleanPodPolicy", tj_clean_str(tj->clean), 0},
        {"spec.runPolicy.schedulingPolicy.gang", tj_gang_str(tj->gang), 0},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (strcmp(f[i].name, name) == 0) {
            if (f[i].s)
                snprintf(out, n, "%s", f[i].s);
            else
                snprintf(out, n, "%lld", f[i].i);
        }
}

static void check_default(const struct tj *tj, const char *const *path, int depth,
                          const json_t *node)
{
    const char *def = json_string_value(json_object_get(node, "default"));
    char got[256], name[256];

    if (!def) /* absent, or {} for an object */
        return;
    dotted(path, depth, name, sizeof(name));
    tj_default(tj, path, depth, got, sizeof(got));
    /* numbers compare by value: "0.0003" vs "0.0003", "1.0" vs "1" */
    bool same = strcmp(got, def) == 0 ||
                (got[0] && strtod(got, NULL) == strtod(def, NULL) && strspn(def, "0123456789.e-+") ==
                                                                          strlen(def));
    if (!TEST_CHECK(same))
        fprintf(stderr, "       default of %s: CRD \"%s\", tj.c \"%s\"\n", name, def, got);
    checked_defaults++;
}

static void walk(const struct tj *defaults, const json_t *props, const char **path, int depth)
{
    const char *key;
    json_t *node;

    json_object_foreach((json_t *)props, key, node) {
        if (depth >= 8)
            return;
        path[depth] = key;
        if (strcmp(key, "template") == 0)
            continue; /* a PodTemplateSpec: not ours to validate */
        check_bounds(path, depth + 1, node);
        check_enum(path, depth + 1, node);
        check_default(defaults, path, depth + 1, node);
        /* a map's values (classWeights): the bounds of one entry, under a label */
        const json_t *each = json_object_get(node, "additionalProperties");
        if (json_is_object(each) && depth + 1 < 8) {
            path[depth + 1] = "spam";
            check_bounds(path, depth + 2, each);
        }
        if (json_object_get(node, "properties"))
            walk(defaults, json_object_get(node, "properties"), path, depth + 1);
    }
}

static void test_tj_agrees_with_crd(void)
{
    json_t *crd = load_crd(), *spec;
    const char *path[8];
    struct tj defaults;
    json_t *empty = json_pack("{s:s, s:{s:s, s:s, s:s}, s:{}}", "kind", "TrainingJob", "metadata",
                              "name", "spam", "namespace", "ml", "uid", "u", "spec");

    if (!TEST_CHECK(crd != NULL))
        return;
    spec = json_object_get(json_object_get(json_object_get(json_object_get(json_array_get(
        json_object_get(json_object_get(crd, "spec"), "versions"), 0), "schema"),
        "openAPIV3Schema"), "properties"), "spec");
    TEST_CHECK(json_is_object(json_object_get(spec, "properties")));
    TEST_EQ_INT(tj_parse(empty, &defaults, NULL, 0), 0);
    walk(&defaults, json_object_get(spec, "properties"), path, 0);
    printf("  %d bound/enum rules and %d defaults compared; %d configs loaded by the worker\n",
           rules, checked_defaults, worker_checks);
    TEST_CHECK(rules >= 60);
    TEST_CHECK(checked_defaults >= 20);
    tj_cleanup(&defaults);
    json_decref(empty);
    json_decref(crd);
}

int main(void)
{
    TEST_RUN(test_tj_agrees_with_crd);
    return test_summary();
}
