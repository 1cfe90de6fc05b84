#include "operator/tj.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "operator/kube/kube_err.h"
#include "operator/render.h"

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
        /* in long long's range first: casting 1e46 is undefined (found by fuzz_rec) */
        if (d >= -9.2e18 && d <= 9.2e18 && d == (double)(long long)d) {
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

/* A DNS-1123 subdomain: what Kubernetes allows as the name of most objects. */
static bool dns1123_subdomain(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool alnum = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9');
        bool edge = i == 0 || i == n - 1 || s[i - 1] == '.' || s[i + 1] == '.';
        if (!alnum && !(s[i] == '-' && !edge) && !(s[i] == '.' && !edge))
            return false;
    }
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
    return tj->nproc > 0 ? tj->nproc : tj->gpus > 0 ? tj->gpus : 1;
}

/* ---------------------------------------------------------------------------------------------
 * spec.training: gantry-worker's configuration (worker/cfg.c), rendered as config.json. The
 * names, kinds and bounds below are the worker's, so a value the worker would refuse (exit 78)
 * is refused here first, naming the field. Only the fields the CRD defaults get a default here;
 * the others, when absent, take the worker's own default.
 * ------------------------------------------------------------------------------------------- */

enum fkind {
    FK_INT, FK_NUM, FK_BOOL, FK_STR, FK_ENUM,
    FK_WEIGHTS, /* {label: number} */
    FK_NAMES    /* [distinct non-empty names], min..max of them */
};

struct train_field {
    const char *path; /* "epochs", "model.hidden", "data.train" */
    enum fkind kind;
    double min, max;     /* FK_INT, FK_NUM */
    const char *choices; /* FK_ENUM: "a|b" */
    const char *def;     /* default as text; NULL: none */
};

#define TJ_2_30 1073741824.0
static const struct train_field train_fields[] = {
    {"task", FK_ENUM, 0, 0, "text-classification|multi-label-classification|regression",
     "text-classification"},
    {"model.type", FK_ENUM, 0, 0, "transformer|ngram", "transformer"},
    {"model.layers", FK_INT, 1, 128, NULL, "2"},
    {"model.hidden", FK_INT, 1, 8192, NULL, "128"},
    {"model.heads", FK_INT, 1, 8192, NULL, "4"},
    {"model.maxSeqLen", FK_INT, 1, 8192, NULL, "256"},
    {"model.ffn", FK_INT, 0, 65536, NULL, NULL},
    {"model.pooling", FK_ENUM, 0, 0, "mean|cls", NULL},
    {"model.buckets", FK_INT, 1, 67108864, NULL, NULL},
    {"data.train", FK_STR, 0, 0, NULL, NULL},
    {"data.eval", FK_STR, 0, 0, NULL, NULL},
    {"data.evalFraction", FK_NUM, 0, 0.5, NULL, NULL},
    {"data.vocab", FK_STR, 0, 0, NULL, NULL},
    {"data.vocabSize", FK_INT, 5, 4194304, NULL, NULL},
    {"data.minFreq", FK_INT, 1, TJ_2_30, NULL, NULL},
    {"data.format", FK_ENUM, 0, 0, "auto|jsonl|tsv|csv", NULL},
    {"data.strict", FK_BOOL, 0, 0, NULL, NULL},
    {"data.clsSep", FK_BOOL, 0, 0, NULL, NULL},
    {"data.textField", FK_STR, 0, 0, NULL, NULL},
    {"data.textPairField", FK_STR, 0, 0, NULL, NULL},
    {"data.labelField", FK_STR, 0, 0, NULL, NULL},
    {"data.labelSeparator", FK_STR, 0, 0, NULL, NULL},
    {"data.labelNames", FK_NAMES, 2, 4096, NULL, NULL},
    {"initFrom", FK_STR, 0, 0, NULL, NULL},
    {"epochs", FK_INT, 1, 1000000, NULL, "3"},
    {"maxSteps", FK_INT, 0, TJ_2_30, NULL, NULL},
    {"batchSize", FK_INT, 1, 65536, NULL, "32"},
    {"evalBatchSize", FK_INT, 0, 65536, NULL, NULL},
    {"evalInterval", FK_INT, 0, TJ_2_30, NULL, NULL},
    {"bestMetric", FK_ENUM, 0, 0, "loss|accuracy|macro_f1|micro_f1|pearson", NULL},
    {"earlyStoppingPatience", FK_INT, 0, 1000000, NULL, NULL},
    {"earlyStoppingThreshold", FK_NUM, 0, 1e9, NULL, NULL},
    {"gradAccumSteps", FK_INT, 1, 65536, NULL, NULL},
    {"learningRate", FK_NUM, 1e-9, 10, NULL, "0.0003"},
    {"scaleLearningRate", FK_BOOL, 0, 0, NULL, "true"},
    {"warmupSteps", FK_INT, -1, TJ_2_30, NULL, NULL},
    {"warmupRatio", FK_NUM, 0, 1, NULL, NULL},
    {"lrDecay", FK_ENUM, 0, 0, "cosine|linear|constant", NULL},
    {"minLrRatio", FK_NUM, 0, 1, NULL, NULL},
    {"weightDecay", FK_NUM, 0, 10, NULL, NULL},
    {"gradClip", FK_NUM, 0, 1e9, NULL, NULL},
    {"labelSmoothing", FK_NUM, 0, 0.99, NULL, NULL},
    {"classWeight", FK_ENUM, 0, 0, "none|balanced", NULL},
    {"classWeights", FK_WEIGHTS, 0, 1e6, NULL, NULL},
    {"adamBeta1", FK_NUM, 0, 0.999999, NULL, NULL},
    {"adamBeta2", FK_NUM, 0, 0.999999999, NULL, NULL},
    {"adamEps", FK_NUM, 1e-30, 1, NULL, NULL},
    {"seed", FK_INT, 0, 9007199254740992.0, NULL, NULL},
    {"logInterval", FK_INT, 1, TJ_2_30, NULL, NULL},
    {"threads", FK_INT, 0, 4096, NULL, NULL},
    {"device", FK_ENUM, 0, 0, "cpu|cuda", NULL},
    {"precision", FK_ENUM, 0, 0, "fp32|bf16", NULL},
    {"attention", FK_ENUM, 0, 0, "auto|unfused|fused", NULL},
    {"cudaGraphs", FK_BOOL, 0, 0, NULL, NULL},
    {"autotune", FK_BOOL, 0, 0, NULL, NULL},
    {"gradBucketMB", FK_NUM, 0, 4096, NULL, NULL},
    {"report", FK_STR, 0, 0, NULL, NULL},
};
#define NTRAIN (sizeof(train_fields) / sizeof(train_fields[0]))
#define TJ_TRAIN_STR_MAX 1023 /* the worker's CFG_MAX_PATH - 1 */
#define TJ_FIELD_NAME_MAX 63   /* data.*Field: the worker's 64-byte names */
#define TJ_NAMES_MAX 16383     /* data.labelNames as JSON: the worker's CFG_MAX_LABEL_NAMES - 1 */
#define TJ_WEIGHTS_MAX 8191   /* the worker's CFG_MAX_CLASS_WEIGHTS - 1: bytes as compact JSON */

static bool in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);

    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static json_t *default_value(const struct train_field *f)
{
    switch (f->kind) {
    case FK_INT: return json_integer(strtoll(f->def, NULL, 10));
    case FK_NUM: return json_real(strtod(f->def, NULL));
    case FK_BOOL: return json_boolean(strcmp(f->def, "true") == 0);
    default: return json_string(f->def);
    }
}

/* Checks one present value against its field; errors name spec.training.<path>. */
static void check_field(const struct train_field *f, const json_t *v, struct errs *e)
{
    long long i;
    double x;

    switch (f->kind) {
    case FK_INT:
        if (!as_int(v, &i))
            errf(e, "spec.training.%s: must be an integer", f->path);
        else if (i < (long long)f->min) /* integer compares: 2^53 + 1 is not 2^53 */
            errf(e, "spec.training.%s: must be >= %.0f (got %lld)", f->path, f->min, i);
        else if (i > (long long)f->max)
            errf(e, "spec.training.%s: must be <= %.0f (got %lld)", f->path, f->max, i);
        break;
    case FK_NUM:
        x = json_number_value(v);
        if (!json_is_number(v))
            errf(e, "spec.training.%s: must be a number", f->path);
        else if (!(x >= f->min))
            errf(e, "spec.training.%s: must be >= %g (got %g)", f->path, f->min, x);
        else if (x > f->max)
            errf(e, "spec.training.%s: must be <= %g (got %g)", f->path, f->max, x);
        break;
    case FK_BOOL:
        if (!json_is_boolean(v))
            errf(e, "spec.training.%s: must be true or false", f->path);
        break;
    case FK_NAMES: {
        const json_t *n;
        size_t k, j;
        char *text;

        if (!json_is_array(v) || json_array_size(v) < (size_t)f->min ||
            json_array_size(v) > (size_t)f->max) {
            errf(e, "spec.training.%s: must be a list of %g to %g class names", f->path, f->min,
                 f->max);
            break;
        }
        json_array_foreach(v, k, n) {
            bool dup = false;
            for (j = 0; j < k; j++)
                dup |= json_equal(n, json_array_get(v, j));
            if (!json_is_string(n) || json_string_length(n) == 0 ||
                json_string_length(n) > 256)
                errf(e, "spec.training.%s[%zu]: must be a non-empty string of at most 256 "
                        "characters", f->path, k);
            else if (dup)
                errf(e, "spec.training.%s[%zu]: \"%.64s\" is listed twice", f->path, k,
                     json_string_value(n));
        }
        text = json_dumps(v, JSON_COMPACT);
        if (text && strlen(text) > TJ_NAMES_MAX)
            errf(e, "spec.training.%s: at most %d bytes as JSON; fewer or shorter names", f->path,
                 TJ_NAMES_MAX);
        free(text);
        break;
    }
    case FK_WEIGHTS: {
        const char *label;
        json_t *w;
        char *text;

        if (!json_is_object(v)) {
            errf(e, "spec.training.%s: must be an object of label: weight, e.g. {spam: 3}",
                 f->path);
            break;
        }
        json_object_foreach((json_t *)v, label, w) {
            x = json_number_value(w);
            if (!*label)
                errf(e, "spec.training.%s: a label must not be empty", f->path);
            else if (!json_is_number(w))
                errf(e, "spec.training.%s.%s: must be a number", f->path, label);
            else if (!(x >= f->min))
                errf(e, "spec.training.%s.%s: must be >= %g (got %g)", f->path, label, f->min, x);
            else if (x > f->max)
                errf(e, "spec.training.%s.%s: must be <= %g (got %g)", f->path, label, f->max, x);
        }
        text = json_dumps(v, JSON_COMPACT);
        if (text && strlen(text) > TJ_WEIGHTS_MAX)
            errf(e, "spec.training.%s: at most %d bytes as JSON; fewer or shorter labels", f->path,
                 TJ_WEIGHTS_MAX);
        free(text);
        break;
    }
    case FK_STR:
    case FK_ENUM:
        if (!json_is_string(v))
            errf(e, "spec.training.%s: must be a string", f->path);
        else if (json_string_length(v) == 0)
            errf(e, "spec.training.%s: must not be empty", f->path);
        else if (f->kind == FK_STR && json_string_length(v) > TJ_TRAIN_STR_MAX)
            errf(e, "spec.training.%s: must be at most %d characters", f->path,
                 TJ_TRAIN_STR_MAX);
        else if (f->kind == FK_ENUM && !in_choices(f->choices, json_string_value(v)))
            errf(e, "spec.training.%s: unsupported value \"%s\"; use one of %s", f->path,
                 json_string_value(v), f->choices);
        break;
    }
}

/* data.textField, textPairField, labelField: JSONL field names the worker holds in 64 bytes,
 * each different; a text pair needs [CLS] and two [SEP] (worker/cfg.c checks the same). */
static void check_fields(const json_t *data, long long seq, struct errs *e)
{
    static const char *const keys[] = {"textField", "textPairField", "labelField"};
    static const char *const defaults[] = {"text", NULL, "label"};
    const char *name[3];

    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(data, keys[i]);
        name[i] = json_is_string(v) ? json_string_value(v) : defaults[i];
        if (json_is_string(v) && json_string_length(v) > TJ_FIELD_NAME_MAX)
            errf(e, "spec.training.data.%s: must be at most %d characters", keys[i],
                 TJ_FIELD_NAME_MAX);
    }
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (name[i] && name[j] && strcmp(name[i], name[j]) == 0)
                errf(e, "spec.training.data.%s: \"%s\" is data.%s's too; each must name its "
                        "own JSONL field", keys[j], name[j], keys[i]);
    if (!name[1])
        return;
    if (json_is_false(json_object_get(data, "clsSep")))
        errf(e, "spec.training.data.textPairField: text pairs are encoded as [CLS] text [SEP] "
                "pair [SEP], so they need data.clsSep: true (remove clsSep: false)");
    if (seq >= 1 && seq < 3)
        errf(e, "spec.training.model.maxSeqLen: %lld leaves no room for a text pair's [CLS] "
                "and two [SEP]; use at least 3", seq);
}

/* task: multi-label-classification and regression: the loss settings their losses lack (and
 * regression's: class names, class metrics); data.labelSeparator, one character that cannot end
 * a TSV field or open a CSV quote. */
static void check_task(const json_t *t, const json_t *data, struct errs *e)
{
    const char *task = json_string_value(json_object_get(t, "task"));
    const char *bm = json_string_value(json_object_get(t, "bestMetric"));
    const bool regression = task && !strcmp(task, "regression");
    const json_t *sep = json_object_get(data, "labelSeparator");
    double ls = json_number_value(json_object_get(t, "labelSmoothing"));
    const char *cw = json_string_value(json_object_get(t, "classWeight"));

    if (json_is_string(sep) && (json_string_length(sep) != 1 ||
                                strchr("\t\n\r\"", json_string_value(sep)[0])))
        errf(e, "spec.training.data.labelSeparator: \"%s\" must be one character, not a tab, "
                "newline or double quote (\",\", \"|\", \";\")", json_string_value(sep));
    if (bm && strcmp(bm, "loss") && regression != (strcmp(bm, "pearson") == 0))
        errf(e, "spec.training.bestMetric: %s is not a metric of task: %s; use loss or %s", bm,
             task ? task : "text-classification",
             regression ? "pearson" : "accuracy, macro_f1 or micro_f1");
    if (regression && json_array_size(json_object_get(data, "labelNames")) > 0)
        errf(e, "spec.training.data.labelNames: not with task: regression (its labels are "
                "numbers, not classes); remove it");
    if (!task || (strcmp(task, "multi-label-classification") && !regression))
        return;
    if (ls > 0)
        errf(e, "spec.training.labelSmoothing: not with task: %s (its loss has no label "
                "smoothing); remove it", task);
    if ((cw && strcmp(cw, "none")) || json_object_size(json_object_get(t, "classWeights")) > 0)
        errf(e, "spec.training.%s: not with task: %s (its loss has no class weights); remove it",
             cw && strcmp(cw, "none") ? "classWeight" : "classWeights", task);
}

/* Refuses keys of obj (at prefix "", "model." or "data.") that no field names: the worker
 * refuses them too, and a typo must not be silently ignored. */
static void check_known(const json_t *obj, const char *prefix, struct errs *e)
{
    const char *key;
    json_t *v;
    char path[96];

    json_object_foreach((json_t *)obj, key, v) {
        bool known = !*prefix && (strcmp(key, "model") == 0 || strcmp(key, "data") == 0);

        snprintf(path, sizeof(path), "%s%s", prefix, key);
        for (size_t i = 0; i < NTRAIN && !known; i++)
            known = strcmp(train_fields[i].path, path) == 0;
        if (!known)
            errf(e, "spec.training.%s: unknown field (gantry-worker would refuse it)", path);
    }
}

static void parse_training(struct tj *tj, const json_t *spec, struct errs *e)
{
    const json_t *in = json_object_get(spec, "training");
    json_t *t, *model, *data;
    long long hidden = 0, heads = 0, seq = 0, eval_every = 0, patience = 0, batch = 0, accum = 0;
    const char *type, *device, *precision, *attention;

    if (in && !json_is_null(in) && !json_is_object(in)) {
        errf(e, "spec.training: must be an object");
        in = NULL;
    }
    t = json_is_object(in) ? json_deep_copy(in) : json_object();
    tj->training = t;
    model = sub_object(t, "spec.training", "model", e);
    data = json_object_get(t, "data");
    if (data && !json_is_object(data)) {
        errf(e, "spec.training.data: must be an object");
        data = NULL;
    }
    check_known(t, "", e);
    if (model)
        check_known(model, "model.", e);
    if (data)
        check_known(data, "data.", e);
    for (size_t i = 0; i < NTRAIN; i++) {
        const struct train_field *f = &train_fields[i];
        const char *dot = strchr(f->path, '.');
        json_t *o = !dot ? t : strncmp(f->path, "model.", 6) == 0 ? model : data;
        const char *key = dot ? dot + 1 : f->path;
        json_t *v = o ? json_object_get(o, key) : NULL;

        if (!v || json_is_null(v)) {
            if (f->def && o)
                json_object_set_new(o, key, default_value(f));
            continue;
        }
        check_field(f, v, e);
    }
    /* The worker's cross-field rules (cfg_validate), as in the CRD's CEL rules. */
    as_int(json_object_get(model, "hidden"), &hidden);
    as_int(json_object_get(model, "heads"), &heads);
    as_int(json_object_get(model, "maxSeqLen"), &seq);
    type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "transformer") == 0 && heads > 0 && hidden > 0 && hidden % heads)
        errf(e, "spec.training.model.hidden: %lld must be divisible by spec.training.model.heads "
                "(%lld)", hidden, heads);
    as_int(json_object_get(t, "batchSize"), &batch);
    as_int(json_object_get(t, "gradAccumSteps"), &accum);
    if (batch > 0 && accum > 0 && batch * accum > 2147483647LL) /* each <= 65536: no overflow */
        errf(e, "spec.training.gradAccumSteps: batchSize x gradAccumSteps (%lld) must be at most "
                "2^31 - 1 examples a step", batch * accum);
    /* Unset: the GPUs the pods get decide (the rendered config always names the device). */
    device = json_string_value(json_object_get(t, "device"));
    if (!json_object_get(t, "device"))
        json_object_set_new(t, "device", json_string(tj->gpus > 0 ? "cuda" : "cpu"));
    else if (device && strcmp(device, "cuda") == 0 && tj->gpus == 0)
        errf(e, "spec.training.device: cuda needs GPUs: set spec.gpusPerReplica > 0, or device: "
                "cpu");
    /* bf16 runs on the GPU only: the device as resolved above (set, or from the GPUs). */
    device = json_string_value(json_object_get(t, "device"));
    precision = json_string_value(json_object_get(t, "precision"));
    if (precision && strcmp(precision, "bf16") == 0 && device && strcmp(device, "cuda"))
        errf(e, "spec.training.precision: bf16 needs device: cuda (GPUs: spec.gpusPerReplica > "
                "0); use precision: fp32 on the CPU");
    attention = json_string_value(json_object_get(t, "attention"));
    if (attention && strcmp(attention, "fused") == 0 && device && strcmp(device, "cuda"))
        errf(e, "spec.training.attention: fused is a GPU kernel and needs device: cuda (GPUs: "
                "spec.gpusPerReplica > 0); remove attention on the CPU");
    if (json_is_true(json_object_get(t, "cudaGraphs")) && device && strcmp(device, "cuda"))
        errf(e, "spec.training.cudaGraphs: true needs device: cuda (GPUs: spec.gpusPerReplica > "
                "0); remove cudaGraphs on the CPU");
    /* the n-gram model on the GPU: fp32, no attention (worker/model_gpu.cu) */
    if (type && strcmp(type, "ngram") == 0 && precision && strcmp(precision, "bf16") == 0)
        errf(e, "spec.training.precision: bf16 is for model.type transformer; the n-gram model "
                "trains in fp32: remove precision");
    if (type && strcmp(type, "ngram") == 0 && attention && strcmp(attention, "fused") == 0)
        errf(e, "spec.training.attention: fused is for model.type transformer (the n-gram model "
                "has no attention): remove attention");
    /* the fused kernels' largest head (kernels/gpu.h ATTENTION_FUSED_MAX_HS) */
    if (attention && strcmp(attention, "fused") == 0 && heads > 0 && hidden / heads > 128)
        errf(e, "spec.training.attention: fused takes head sizes (model.hidden / model.heads) up "
                "to 128, got %lld; use more heads or attention: unfused", hidden / heads);
    const char *eval_file = json_string_value(json_object_get(data, "eval"));
    const json_t *frac = json_object_get(data, "evalFraction");
    bool held_out = json_is_number(frac) && json_number_value(frac) > 0;
    as_int(json_object_get(t, "evalInterval"), &eval_every);
    if (held_out && eval_file)
        errf(e, "spec.training.data.evalFraction: hold out part of data.train (evalFraction) or "
                "give an evaluation file (eval), not both");
    if (eval_every > 0 && (!eval_file || !eval_file[0]) && !held_out)
        errf(e, "spec.training.evalInterval: %lld, but spec.training.data.eval is not set; give "
                "the evaluation file as data.eval (or hold out data.evalFraction of data.train), "
                "or set evalInterval: 0", eval_every);
    if (json_object_get(t, "initFrom") && json_object_get(data, "vocab"))
        errf(e, "spec.training.data.vocab: set, and initFrom brings its model's own vocab; remove "
                "data.vocab");
    const char *cw = json_string_value(json_object_get(t, "classWeight"));
    if (json_object_size(json_object_get(t, "classWeights")) > 0 && cw && strcmp(cw, "none"))
        errf(e, "spec.training.classWeights: set, and classWeight is %s too; give your own "
                "weights (classWeights) or computed ones (classWeight), not both", cw);
    as_int(json_object_get(t, "earlyStoppingPatience"), &patience);
    if (patience > 0 && eval_every == 0)
        errf(e, "spec.training.earlyStoppingPatience: %lld, but evalInterval is 0 (no evaluations "
                "during training); set evalInterval, e.g. 100, or earlyStoppingPatience: 0",
             patience);
    if (seq == 1 && !json_is_false(json_object_get(data, "clsSep")))
        errf(e, "spec.training.model.maxSeqLen: 1 leaves no room for [CLS] and [SEP]; use at "
                "least 2, or set spec.training.data.clsSep: false");
    check_fields(data, seq, e);
    check_task(t, data, e);
}

/* ---------------------------------------------------------------------------------------------
 * metadata, spec, status
 * ------------------------------------------------------------------------------------------- */

/* The Kueue labels: which LocalQueue the job waits in, at which WorkloadPriorityClass. */
static void parse_kueue_labels(struct tj *tj, const json_t *labels, struct errs *e)
{
    static const struct {
        const char *key, *what;
        size_t off;
    } ls[] = {{TJ_LABEL_QUEUE, "a LocalQueue", offsetof(struct tj, queue)},
              {TJ_LABEL_PRIORITY, "a WorkloadPriorityClass", offsetof(struct tj, priority)}};

    for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++) {
        char *dst = (char *)tj + ls[i].off;
        const char *v = json_string_value(json_object_get(labels, ls[i].key));
        dst[0] = '\0';
        if (!v)
            continue;
        if (!dns1123_subdomain(v))
            errf(e, "metadata.labels[\"%s\"]: \"%s\" must name %s (lower-case letters, digits, "
                    "'-' and '.')", ls[i].key, v, ls[i].what);
        else
            snprintf(dst, TJ_QUEUE_MAX + 1, "%s", v);
    }
}

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
    parse_kueue_labels(tj, json_object_get(meta, "labels"), e);
}

/* One rule's onExitCodes: {operator: In|NotIn, values: [0-255, unique; no 0 with In]}. */
static void parse_exit_codes(struct tj_fp_rule *r, const json_t *oc, const char *at,
                             struct errs *e)
{
    const char *op = json_string_value(json_object_get(oc, "operator"));
    const json_t *vals = json_object_get(oc, "values"), *v;
    bool seen[256] = {false};
    size_t i;

    if (!json_is_object(oc)) {
        errf(e, "%s.onExitCodes: must be an object {operator, values}", at);
        return;
    }
    if (!op || (strcmp(op, "In") != 0 && strcmp(op, "NotIn") != 0))
        errf(e, "%s.onExitCodes.operator: must be In or NotIn", at);
    r->not_in = op && strcmp(op, "NotIn") == 0;
    if (!json_is_array(vals) || json_array_size(vals) == 0 ||
        json_array_size(vals) > TJ_FP_CODES_MAX) {
        errf(e, "%s.onExitCodes.values: must be a list of 1 to %d exit codes", at,
             TJ_FP_CODES_MAX);
        return;
    }
    json_array_foreach(vals, i, v) {
        long long c = json_is_integer(v) ? json_integer_value(v) : -1;
        if (c < 0 || c > 255) {
            errf(e, "%s.onExitCodes.values[%zu]: must be an exit code, 0-255", at, i);
        } else if (seen[c]) {
            errf(e, "%s.onExitCodes.values[%zu]: %lld is listed twice", at, i, c);
        } else if (c == 0 && !r->not_in) {
            errf(e, "%s.onExitCodes.values[%zu]: 0 cannot be In: a worker that exits 0 did not "
                    "fail", at, i);
        } else {
            seen[c] = true;
            r->codes[r->ncodes++] = (unsigned char)c;
        }
    }
}

/* spec.runPolicy.podFailurePolicy: {rules: [{action, onExitCodes | onPodConditions}]}. */
static void parse_failure_policy(struct tj *tj, const json_t *fp, struct errs *e)
{
    static const char *const actions[] = {"Count", "Ignore", "FailJob", NULL};
    const json_t *rules = json_object_get(fp, "rules"), *rule;
    char at[64];
    size_t i;

    tj->fp_nrules = 0;
    if (!fp || json_is_null(fp))
        return;
    if (!json_is_object(fp) || !json_is_array(rules) || json_array_size(rules) == 0 ||
        json_array_size(rules) > TJ_FP_RULES_MAX) {
        errf(e, "spec.runPolicy.podFailurePolicy: must be {rules: [...]} with 1 to %d rules",
             TJ_FP_RULES_MAX);
        return;
    }
    json_array_foreach(rules, i, rule) {
        struct tj_fp_rule *r = &tj->fp_rules[tj->fp_nrules++];
        const char *action = json_string_value(json_object_get(rule, "action"));
        const json_t *oc = json_object_get(rule, "onExitCodes");
        const json_t *pc = json_object_get(rule, "onPodConditions"), *c;
        size_t k;

        memset(r, 0, sizeof(*r));
        snprintf(at, sizeof(at), "spec.runPolicy.podFailurePolicy.rules[%zu]", i);
        if (!json_is_object(rule)) {
            errf(e, "%s: must be an object", at);
            continue;
        }
        for (k = 0; actions[k] && !(action && strcmp(action, actions[k]) == 0); k++)
            ;
        if (!actions[k])
            errf(e, "%s.action: must be FailJob, Ignore or Count", at);
        r->action = actions[k] ? (enum tj_fp_action)k : TJ_FP_COUNT;
        if (!oc == !pc) {
            errf(e, "%s: give exactly one of onExitCodes and onPodConditions", at);
            continue;
        }
        if (oc) {
            parse_exit_codes(r, oc, at, e);
            continue;
        }
        r->on_disruption = true;
        if (!json_is_array(pc) || json_array_size(pc) == 0)
            errf(e, "%s.onPodConditions: must be a list of conditions, "
                    "[{type: DisruptionTarget}]", at);
        json_array_foreach(pc, k, c) {
            const char *type = json_string_value(json_object_get(c, "type"));
            const char *status = json_string_value(json_object_get(c, "status"));
            if (!type || strcmp(type, "DisruptionTarget") != 0)
                errf(e, "%s.onPodConditions[%zu].type: only DisruptionTarget is supported (an "
                        "eviction, a drain, a preemption)", at, k);
            if (status && strcmp(status, "True") != 0)
                errf(e, "%s.onPodConditions[%zu].status: only \"True\" is supported", at, k);
        }
    }
}

static void parse_run_policy(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const cleans[] = {"Running", "All", "None", NULL};
    static const char *const gangs[] = {"None", "Workload", NULL};
    const json_t *rp = json_object_get(spec, "runPolicy");
    const json_t *sp;
    char clean[16], gang[16];

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
    tj->progress_deadline_s = get_int(rp, "spec.runPolicy", "progressDeadlineSeconds", 0, 1,
                                      (long long)1 << 40, e);
    tj->suspend = get_bool(rp, "spec.runPolicy", "suspend", false, e);
    get_str(rp, "spec.runPolicy", "cleanPodPolicy", "Running", clean, sizeof(clean), e);
    if (!one_of(clean, cleans))
        errf(e, "spec.runPolicy.cleanPodPolicy: must be Running, All or None (got \"%s\")", clean);
    tj->clean = strcmp(clean, "All") == 0    ? TJ_CLEAN_ALL
                : strcmp(clean, "None") == 0 ? TJ_CLEAN_NONE
                                             : TJ_CLEAN_RUNNING;
    sp = json_object_get(rp, "schedulingPolicy");
    if (sp && !json_is_null(sp) && !json_is_object(sp)) {
        errf(e, "spec.runPolicy.schedulingPolicy: must be an object");
        sp = NULL;
    }
    get_str(sp, "spec.runPolicy.schedulingPolicy", "gang", "None", gang, sizeof(gang), e);
    if (!one_of(gang, gangs))
        errf(e, "spec.runPolicy.schedulingPolicy.gang: must be None or Workload (got \"%s\")",
             gang);
    tj->gang = strcmp(gang, "Workload") == 0 ? TJ_GANG_WORKLOAD : TJ_GANG_NONE;
    parse_failure_policy(tj, json_object_get(rp, "podFailurePolicy"), e);
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
    /* the job's directory <path>/<name> is the worker's checkpoint.dir: at most 1023 bytes */
    else if (strlen(tj->ckpt_path) + 1 + strlen(tj->name) > 1023)
        errf(e, "spec.checkpoint.path: %zu bytes, and with \"/<metadata.name>\" the job's "
                "directory would pass the worker's 1023; use a shorter path",
             strlen(tj->ckpt_path));
    tj->ckpt_interval = (int)get_int(ck, "spec.checkpoint", "intervalSteps", 200, 1, 1 << 30, e);
    tj->ckpt_keep = (int)get_int(ck, "spec.checkpoint", "keep", 3, 1, 1000, e);
    tj->ckpt_save_on_stop = get_bool(ck, "spec.checkpoint", "saveOnStop", true, e);
}

/* spec.elasticPolicy: both bounds, min <= replicas <= max. */
static void parse_elastic(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const path = "spec.elasticPolicy";
    const json_t *ep = json_object_get(spec, "elasticPolicy");

    if (!ep || json_is_null(ep))
        return;
    if (!json_is_object(ep)) {
        errf(e, "%s: must be an object {minReplicas, maxReplicas}", path);
        return;
    }
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "maxReplicas" : "minReplicas";
        int *dst = k ? &tj->elastic_max : &tj->elastic_min;
        if (!json_object_get(ep, key))
            errf(e, "%s.%s: required (the %s number of workers the job may run with)", path,
                 key, k ? "largest" : "smallest");
        else
            *dst = (int)get_int(ep, path, key, 0, 1, TJ_REPLICAS_MAX, e);
    }
    tj->elastic_shrink_s = get_int(ep, path, "shrinkAfterSeconds", 0, 1, 86400 * 365, e);
    if (tj->elastic_shrink_s > 0 && tj->gang == TJ_GANG_WORKLOAD)
        errf(e, "%s.shrinkAfterSeconds: not with spec.runPolicy.schedulingPolicy.gang Workload, "
                "whose pods are all bound or none; remove one of them", path);
    if (tj->elastic_min < 1 || tj->elastic_max < 1 || tj->elastic_min > TJ_REPLICAS_MAX ||
        tj->elastic_max > TJ_REPLICAS_MAX) {
        tj->elastic_min = tj->elastic_max = 0;
        return;
    }
    if (tj->elastic_min > tj->elastic_max)
        errf(e, "%s.minReplicas: must be <= maxReplicas (got %d > %d)", path, tj->elastic_min,
             tj->elastic_max);
    else if (tj->replicas < tj->elastic_min || tj->replicas > tj->elastic_max)
        errf(e, "spec.replicas: must be within spec.elasticPolicy's %d..%d (got %d)",
             tj->elastic_min, tj->elastic_max, tj->replicas);
}

static void parse_spec(struct tj *tj, const json_t *spec, struct errs *e)
{
    static const char *const pulls[] = {"IfNotPresent", "Never", NULL};
    const json_t *tmpl = json_object_get(spec, "template");
    size_t n;

    tj->replicas = (int)get_int(spec, "spec", "replicas", 1, 1, TJ_REPLICAS_MAX, e);
    tj->gpus = (int)get_int(spec, "spec", "gpusPerReplica", 0, 0, TJ_GPUS_MAX, e);
    tj->nproc = (int)get_int(spec, "spec", "nprocPerNode", 0, 1, TJ_NPROC_MAX, e);
    if (tj->nproc > 0 && tj->gpus > 0 && tj->nproc != tj->gpus)
        errf(e, "spec.nprocPerNode: must equal spec.gpusPerReplica when the pods have GPUs (one "
                "process per GPU; got %d for %d GPUs); leave it unset", tj->nproc, tj->gpus);
    tj->port = (int)get_int(spec, "spec", "port", TJ_DEFAULT_PORT, 1024, 65535, e);
    if (tj->port == RENDER_METRICS_PORT)
        errf(e, "spec.port: %d is where rank 0 serves /metrics and /progress "
                "(GANTRY_METRICS_PORT); pick another port", RENDER_METRICS_PORT);
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
    parse_elastic(tj, spec, e);
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
    if (as_int(json_object_get(st, "disruptions"), &x) && x >= 0 && x <= tj->status.restarts)
        tj->status.disruptions = (int)x;
    if (as_int(json_object_get(st, "ignoredRestarts"), &x) && x >= 0 &&
        x <= tj->status.restarts - tj->status.disruptions)
        tj->status.ignored = (int)x;
    if (as_int(json_object_get(st, "elasticWorkers"), &x) && x >= 1 && x <= TJ_REPLICAS_MAX)
        tj->status.elastic_workers = (int)x;
    s = json_string_value(json_object_get(st, "unschedulableSince"));
    if (!s || cond_parse_time(s, &tj->status.unschedulable_since) != 0)
        tj->status.unschedulable_since = 0;
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
    /* an elastic job may grow to maxReplicas: its name must already fit that */
    int most = tj->elastic_max > tj->replicas ? tj->elastic_max : tj->replicas;
    if (tj->name[0] && most >= 1 && (int)strlen(tj->name) > tj_name_max(most))
        errf(&e, "metadata.name: must be at most %d characters with %s %d (it has %zu), so "
                 "that pod hostnames %s-worker-<i> stay valid 63-character DNS labels",
             tj_name_max(most), most == tj->replicas ? "replicas" : "elasticPolicy.maxReplicas",
             most, strlen(tj->name), tj->name);
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

const char *tj_gang_str(enum tj_gang g)
{
    return g == TJ_GANG_WORKLOAD ? "Workload" : "None";
}
