#include "operator/tj.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "operator/kube/kube_err.h"

/* Validation errors accumulate here, "; "-separated, truncated to the caller's buffer. */
struct errs {
    char *buf;
    size_t cap, len;
    int count;
};

__attribute__((format(printf, 2, 3))) static void errf(struct errs *e, const char *fmt, ...)
{
    va_list ap;
    int n;

    e->count++;
    if (!e->buf || e->cap == 0 || e->len + 1 >= e->cap)
        return;
    if (e->len > 0) {
        n = snprintf(e->buf + e->len, e->cap - e->len, "; ");
        e->len += (size_t)n < e->cap - e->len ? (size_t)n : e->cap - e->len - 1;
    }
    va_start(ap, fmt);
    n = vsnprintf(e->buf + e->len, e->cap - e->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        e->len += (size_t)n < e->cap - e->len ? (size_t)n : e->cap - e->len - 1;
}

/* ---------------------------------------------------------------------------------------------
 * Typed field readers: absent takes the default; present with the wrong type or out of range is
 * an error naming the field. `path` is the JSON path of the parent object ("spec").
 * ------------------------------------------------------------------------------------------- */

static bool as_int(const json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) { /* 4.0 from a YAML tool is still 4 */
        double d = json_real_value(v);
        if (d == (double)(long long)d) {
            *out = (long long)d;
            return true;
        }
    }
    return false;
}

static long long get_int(const json_t *obj, const char *path, const char *key, long long def,
                         long long min, long long max, struct errs *e)
{
    const json_t *v = json_object_get(obj, key);
    long long x;

    if (!v || json_is_null(v))
        return def;
    if (!as_int(v, &x)) {
        errf(e, "%s.%s: must be an integer", path, key);
        return def;
    }
    if (x < min)
        errf(e, "%s.%s: must be >= %lld (got %lld)", path, key, min, x);
    else if (x > max)
        errf(e, "%s.%s: must be <= %lld (got %lld)", path, key, max, x);
    return x;
}

static bool get_bool(const json_t *obj, const char *path, const char *key, bool def,
                     struct errs *e)
{
    const json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        errf(e, "%s.%s: must be true or false", path, key);
        return def;
    }
    return json_is_true(v);
}

/* Copies a string field into dst (size n); "" stays "" when absent and def is NULL. */
static void get_str(const json_t *obj, const char *path, const char *key, const char *def,
                    char *dst, size_t n, struct errs *e)
{
    const json_t *v = json_object_get(obj, key);
    const char *s;

    snprintf(dst, n, "%s", def ? def : "");
    if (!v || json_is_null(v))
        return;
    s = json_string_value(v);
    if (!s) {
        errf(e, "%s.%s: must be a string", path, key);
        return;
    }
    if (strlen(s) >= n) {
        errf(e, "%s.%s: must be at most %zu characters (got %zu)", path, key, n - 1, strlen(s));
        return;
    }
    snprintf(dst, n, "%s", s);
}

/* The object at obj[key], created empty when absent; NULL (with an error) when not an object. */
static json_t *sub_object(json_t *obj, const char *path, const char *key, struct errs *e)
{
    json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v)) {
        v = json_object();
        json_object_set_new(obj, key, v);
    } else if (!json_is_object(v)) {
        errf(e, "%s.%s: must be an object", path, key);
        return NULL;
    }
    return v;
}

static bool one_of(const char *s, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(s, *allowed) == 0)
            return true;
    return false;
}

static bool dns1035_label(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63 || !(s[0] >= 'a' && s[0] <= 'z') || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

int tj_name_max(int replicas)
{
    char digits[16];

    snprintf(digits, sizeof(digits), "%d", replicas > 1 ? replicas - 1 : 0);
    return 63 - (int)strlen("-worker-") - (int)strlen(digits);
}

int tj_nproc(const struct tj *tj)
{
    return tj->gpus > 0 ? tj->gpus : 1;
}

/* ---------------------------------------------------------------------------------------------
 * spec.training: defaults filled into a private copy (it becomes config.json), then validated.
 * ------------------------------------------------------------------------------------------- */

struct int_rule {
    const char *obj; /* NULL: training itself; else a sub-object of training */
    const char *key;
    long long def, min, max;
};

static const struct int_rule training_ints[] = {
    {"model", "layers", 2, 1, 256},
    {"model", "hidden", 128, 1, 65536},
    {"model", "heads", 4, 1, 1024},
    {"model", "maxSeqLen", 256, 1, 1048576},
    {"model", "vocabSize", 0, 0, 10000000},
    {"model", "numClasses", 0, 0, 100000},
    {NULL, "epochs", 3, 1, 100000},
    {NULL, "maxSteps", 0, 0, (long long)1 << 53},
    {NULL, "batchSize", 32, 1, 1048576},
    {NULL, "warmupSteps", 100, 0, (long long)1 << 53},
    {NULL, "seed", 42, 0, (long long)1 << 53},
    {NULL, "logIntervalSteps", 10, 1, 1 << 30},
};

struct num_rule {
    const char *key;
    double def, min, max;
    bool exclusive_min;
};

static const struct num_rule training_nums[] = {
    {"learningRate", 3e-4, 0, 10, true},
    {"weightDecay", 0.01, 0, 1e9, false},
    {"gradClip", 1.0, 0, 1e9, false},
};

static void default_str(json_t *obj, const char *path, const char *key, const char *def,
                        const char *const *allowed, struct errs *e)
{
    json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v)) {
        if (def)
            json_object_set_new(obj, key, json_string(def));
        return;
    }
    if (!json_is_string(v)) {
        errf(e, "%s.%s: must be a string", path, key);
        return;
    }
    if (json_string_length(v) == 0)
        errf(e, "%s.%s: must not be empty", path, key);
    else if (allowed && !one_of(json_string_value(v), allowed))
        errf(e, "%s.%s: unsupported value \"%s\"", path, key, json_string_value(v));
}

static void parse_training(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const tasks[] = {"text-classification", NULL};
    static const char *const types[] = {"transformer", "bow", NULL};
    static const char *const formats[] = {"jsonl", "tsv", NULL};
    static const char *const precisions[] = {"fp32", "bf16", NULL};
    const json_t *in = json_object_get(spec, "training");
    json_t *t, *model, *data;
    long long hidden = 0, heads = 0;

    if (in && !json_is_null(in) && !json_is_object(in)) {
        errf(e, "spec.training: must be an object");
        in = NULL;
    }
    t = json_is_object(in) ? json_deep_copy(in) : json_object();
    tj->training = t;
    default_str(t, "spec.training", "task", "text-classification", tasks, e);
    model = sub_object(t, "spec.training", "model", e);
    data = sub_object(t, "spec.training", "data", e);
    if (model)
        default_str(model, "spec.training.model", "type", "transformer", types, e);
    if (data) {
        default_str(data, "spec.training.data", "train", NULL, NULL, e);
        default_str(data, "spec.training.data", "eval", NULL, NULL, e);
        default_str(data, "spec.training.data", "vocab", NULL, NULL, e);
        default_str(data, "spec.training.data", "format", "jsonl", formats, e);
    }
    default_str(t, "spec.training", "precision", "fp32", precisions, e);
    json_object_set_new(t, "scaleLearningRate",
                        json_boolean(get_bool(t, "spec.training", "scaleLearningRate", true, e)));

    for (size_t i = 0; i < sizeof(training_ints) / sizeof(training_ints[0]); i++) {
        const struct int_rule *r = &training_ints[i];
        json_t *o = r->obj ? (strcmp(r->obj, "model") == 0 ? model : data) : t;
        char path[64];
        long long v;

        if (!o)
            continue;
        snprintf(path, sizeof(path), "spec.training%s%s", r->obj ? "." : "", r->obj ? r->obj : "");
        v = get_int(o, path, r->key, r->def, r->min, r->max, e);
        json_object_set_new(o, r->key, json_integer(v));
        if (o == model && strcmp(r->key, "hidden") == 0)
            hidden = v;
        if (o == model && strcmp(r->key, "heads") == 0)
            heads = v;
    }
    if (heads > 0 && hidden > 0 && hidden % heads != 0)
        errf(e, "spec.training.model.hidden: %lld must be divisible by spec.training.model.heads "
                "(%lld)", hidden, heads);

    for (size_t i = 0; i < sizeof(training_nums) / sizeof(training_nums[0]); i++) {
        const struct num_rule *r = &training_nums[i];
        json_t *v = json_object_get(t, r->key);
        double x = r->def;

        if (v && !json_is_null(v)) {
            if (!json_is_number(v)) {
                errf(e, "spec.training.%s: must be a number", r->key);
            } else {
                x = json_number_value(v);
                if (r->exclusive_min ? !(x > r->min) : !(x >= r->min))
                    errf(e, "spec.training.%s: must be %s %g (got %g)", r->key,
                         r->exclusive_min ? ">" : ">=", r->min, x);
                else if (x > r->max)
                    errf(e, "spec.training.%s: must be <= %g (got %g)", r->key, r->max, x);
            }
        }
        json_object_set_new(t, r->key, json_real(x));
    }
}

/* ---------------------------------------------------------------------------------------------
 * metadata, spec, status
 * ------------------------------------------------------------------------------------------- */

static void parse_metadata(struct tj *tj, const json_t *meta, struct errs *e)
{
    get_str(meta, "metadata", "name", NULL, tj->name, sizeof(tj->name), e);
    get_str(meta, "metadata", "namespace", NULL, tj->ns, sizeof(tj->ns), e);
    get_str(meta, "metadata", "uid", NULL, tj->uid, sizeof(tj->uid), e);
    tj->generation = get_int(meta, "metadata", "generation", 0, 0, (long long)1 << 62, e);
    tj->deleting = json_is_string(json_object_get(meta, "deletionTimestamp"));
    if (!tj->name[0])
        errf(e, "metadata.name: must be set");
    else if (!dns1035_label(tj->name))
        errf(e, "metadata.name: \"%s\" must be a DNS-1035 label (lower-case letters, digits and "
                "'-', starting with a letter), because it names the headless Service",
             tj->name);
    if (!tj->ns[0])
        errf(e, "metadata.namespace: must be set");
    if (!tj->uid[0])
        errf(e, "metadata.uid: must be set (it is the owner of every child object)");
}

static void parse_run_policy(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const cleans[] = {"Running", "All", "None", NULL};
    const json_t *rp = json_object_get(spec, "runPolicy");
    char clean[16];

    if (rp && !json_is_null(rp) && !json_is_object(rp)) {
        errf(e, "spec.runPolicy: must be an object");
        rp = NULL;
    }
    tj->backoff_limit = (int)get_int(rp, "spec.runPolicy", "backoffLimit",
                                     TJ_DEFAULT_BACKOFF_LIMIT, 0, 1000, e);
    tj->active_deadline_s = get_int(rp, "spec.runPolicy", "activeDeadlineSeconds", -1, 1,
                                    (long long)1 << 40, e);
    tj->ttl_s = get_int(rp, "spec.runPolicy", "ttlSecondsAfterFinished", -1, 0,
                        (long long)1 << 40, e);
    tj->suspend = get_bool(rp, "spec.runPolicy", "suspend", false, e);
    get_str(rp, "spec.runPolicy", "cleanPodPolicy", "Running", clean, sizeof(clean), e);
    if (!one_of(clean, cleans))
        errf(e, "spec.runPolicy.cleanPodPolicy: must be Running, All or None (got \"%s\")", clean);
    tj->clean = strcmp(clean, "All") == 0    ? TJ_CLEAN_ALL
                : strcmp(clean, "None") == 0 ? TJ_CLEAN_NONE
                                             : TJ_CLEAN_RUNNING;
}

static void parse_checkpoint(struct tj *tj, const json_t *spec, struct errs *e)
{
    const json_t *ck = json_object_get(spec, "checkpoint");

    if (ck && !json_is_null(ck) && !json_is_object(ck)) {
        errf(e, "spec.checkpoint: must be an object");
        ck = NULL;
    }
    get_str(ck, "spec.checkpoint", "claimName", NULL, tj->ckpt_claim, sizeof(tj->ckpt_claim), e);
    get_str(ck, "spec.checkpoint", "path", TJ_DEFAULT_CKPT_PATH, tj->ckpt_path,
            sizeof(tj->ckpt_path), e);
    if (tj->ckpt_path[0] != '/')
        errf(e, "spec.checkpoint.path: must be an absolute path (got \"%s\")", tj->ckpt_path);
    tj->ckpt_interval = (int)get_int(ck, "spec.checkpoint", "intervalSteps", 200, 1, 1 << 30, e);
    tj->ckpt_keep = (int)get_int(ck, "spec.checkpoint", "keep", 3, 1, 1000, e);
}

static void parse_spec(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const pulls[] = {"IfNotPresent", "Never", NULL};
    const json_t *tmpl = json_object_get(spec, "template");
    size_t n;

    tj->replicas = (int)get_int(spec, "spec", "replicas", 1, 1, TJ_REPLICAS_MAX, e);
    tj->gpus = (int)get_int(spec, "spec", "gpusPerReplica", 0, 0, TJ_GPUS_MAX, e);
    tj->port = (int)get_int(spec, "spec", "port", TJ_DEFAULT_PORT, 1024, 65535, e);
    get_str(spec, "spec", "image", TJ_DEFAULT_IMAGE, tj->image, sizeof(tj->image), e);
    n = strlen(tj->image);
    if (n == 0)
        errf(e, "spec.image: must not be empty");
    else if (n >= 7 && strcmp(tj->image + n - 7, ":latest") == 0)
        errf(e, "spec.image: pin a version instead of ':latest', so every worker of the gang "
                "runs the same code");
    get_str(spec, "spec", "imagePullPolicy", "IfNotPresent", tj->pull_policy,
            sizeof(tj->pull_policy), e);
    if (!one_of(tj->pull_policy, pulls))
        errf(e, "spec.imagePullPolicy: must be IfNotPresent or Never (got \"%s\")",
             tj->pull_policy);
    if (tmpl && !json_is_null(tmpl)) {
        if (!json_is_object(tmpl))
            errf(e, "spec.template: must be an object (a PodTemplateSpec)");
        else
            tj->tmpl = json_deep_copy(tmpl);
    }
    parse_training(tj, spec, e);
    parse_checkpoint(tj, spec, e);
    parse_run_policy(tj, spec, e);
}

/* Status is written by the operator, but read tolerantly: a bad field is dropped, not fatal. */
static void parse_status(struct tj *tj, const json_t *st)
{
    const char *s;
    long long x;

    if (!json_is_object(st))
        return;
    tj->status_raw = json_deep_copy(st);
    tj->status.phase = tj_phase_parse(json_string_value(json_object_get(st, "phase")));
    if (as_int(json_object_get(st, "restarts"), &x) && x >= 0 && x < (1 << 30))
        tj->status.restarts = (int)x;
    if (as_int(json_object_get(st, "observedGeneration"), &x))
        tj->status.observed_generation = x;
    s = json_string_value(json_object_get(st, "startTime"));
    if (!s || cond_parse_time(s, &tj->status.start_time) != 0)
        tj->status.start_time = 0;
    s = json_string_value(json_object_get(st, "completionTime"));
    if (!s || cond_parse_time(s, &tj->status.completion_time) != 0)
        tj->status.completion_time = 0;
    cond_list_from_json(&tj->status.conds, json_object_get(st, "conditions"));
}

int tj_parse(const json_t *obj, struct tj *tj, char *err, size_t errlen)
{
    struct errs e = {err, errlen, 0, 0};
    const json_t *meta, *spec;
    const char *kind;

    memset(tj, 0, sizeof(*tj));
    tj->active_deadline_s = tj->ttl_s = -1;
    if (err && errlen)
        err[0] = '\0';
    kind = json_string_value(json_object_get(obj, "kind"));
    meta = json_object_get(obj, "metadata");
    if (!json_is_object(obj) || !json_is_object(meta) || (kind && strcmp(kind, TJ_KIND) != 0)) {
        errf(&e, "not a TrainingJob object (kind %s)", kind ? kind : "missing");
        return OP_EPARSE;
    }
    parse_metadata(tj, meta, &e);
    parse_status(tj, json_object_get(obj, "status"));
    spec = json_object_get(obj, "spec");
    if (!json_is_object(spec)) {
        errf(&e, "spec: must be an object");
        spec = NULL;
    }
    parse_spec(tj, spec, &e);
    if (tj->name[0] && tj->replicas >= 1 && (int)strlen(tj->name) > tj_name_max(tj->replicas))
        errf(&e, "metadata.name: must be at most %d characters with replicas %d (it has %zu), so "
                 "that pod hostnames %s-worker-<i> stay valid 63-character DNS labels",
             tj_name_max(tj->replicas), tj->replicas, strlen(tj->name), tj->name);
    return e.count ? OP_EINVALID : 0;
}

void tj_cleanup(struct tj *tj)
{
    if (!tj)
        return;
    json_decref(tj->training);
    json_decref(tj->tmpl);
    json_decref(tj->status_raw);
    tj->training = tj->tmpl = tj->status_raw = NULL;
}

static const char *const phase_names[] = {"",          "Pending", "Running",  "Restarting",
                                          "Succeeded", "Failed",  "Suspended"};

const char *tj_phase_str(enum tj_phase p)
{
    return (unsigned)p < sizeof(phase_names) / sizeof(phase_names[0]) ? phase_names[p] : "";
}

enum tj_phase tj_phase_parse(const char *s)
{
    if (!s || !*s)
        return TJ_PHASE_NONE;
    for (size_t i = 1; i < sizeof(phase_names) / sizeof(phase_names[0]); i++)
        if (strcmp(s, phase_names[i]) == 0)
            return (enum tj_phase)i;
    return TJ_PHASE_NONE;
}

bool tj_phase_terminal(enum tj_phase p)
{
    return p == TJ_PHASE_SUCCEEDED || p == TJ_PHASE_FAILED;
}

const char *tj_clean_str(enum tj_clean c)
{
    return c == TJ_CLEAN_ALL ? "All" : c == TJ_CLEAN_NONE ? "None" : "Running";
}
