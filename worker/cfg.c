#include "worker/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/gpu.h" /* ATTENTION_FUSED_MAX_HS */
#include "worker/dataset.h" /* DATASET_MAX_LABELS, DATASET_MAX_LABEL_BYTES */
#include "worker/train_plan.h"

/* F_WEIGHTS: a map label -> weight, stored as compact JSON text ("" = none); from JSON an
 * object, from env and flags the same JSON or "label=weight,label=weight". */
/* F_NAMES: a list of distinct names, stored as a compact JSON array ("" = none); from JSON an
 * array, from env and flags the same JSON or "a,b,c". */
enum ftype { F_STR, F_INT, F_I64, F_DBL, F_BOOL, F_ENUM, F_WEIGHTS, F_NAMES };

struct field {
    const char *path; /* JSON path inside the training object */
    enum ftype type;
    size_t off, size;
    double min, max;     /* numbers: the accepted range */
    const char *choices; /* F_ENUM: "a|b|c" */
    const char *help;
};

#define S(f) offsetof(struct cfg, f), sizeof(((struct cfg *)0)->f)
static const struct field fields[] = {
    {"task", F_ENUM, S(task), 0, 0,
     "text-classification|multi-label-classification|regression",
     "what to train: one class per text; any number of classes per text (multi-label: each "
     "example's label a list, maybe empty; a sigmoid per class and the binary cross-entropy, as "
     "Hugging Face's multi_label_classification); or a number per text (regression: the label "
     "a real number, one output, the squared error; STS-B's similarity scores)"},
    {"model.type", F_ENUM, S(model_type), 0, 0, "transformer|ngram",
     "Transformer encoder, or the fastText-like bag of n-grams"},
    {"model.layers", F_INT, S(layers), 1, 128, NULL, "Transformer layers"},
    {"model.hidden", F_INT, S(hidden), 1, 8192, NULL, "model width (n-gram: embedding size)"},
    {"model.heads", F_INT, S(heads), 1, 8192, NULL, "attention heads; must divide model.hidden"},
    {"model.maxSeqLen", F_INT, S(max_seq_len), 1, 8192, NULL,
     "tokens per example; longer texts are cut"},
    {"model.ffn", F_INT, S(ffn), 0, 65536, NULL, "MLP width; 0 = 4 * model.hidden"},
    {"model.pooling", F_ENUM, S(pooling), 0, 0, "mean|cls", "sequence pooling"},
    {"model.buckets", F_INT, S(buckets), 1, 1 << 26, NULL, "n-gram: hashed bigram buckets"},
    {"data.train", F_STR, S(train), 0, 0, NULL,
     "training data (.jsonl or .tsv: text, label), gzip-compressed or not (.jsonl.gz), or a "
     "pattern of shards read in name order (train-*.jsonl.gz)"},
    {"data.eval", F_STR, S(eval), 0, 0, NULL,
     "evaluation data, as data.train; empty = no evaluation"},
    {"data.evalFraction", F_DBL, S(eval_fraction), 0, 0.5, NULL,
     "without data.eval: hold out this share of data.train (stratified, seeded by seed) for "
     "evaluation; 0 = none"},
    {"data.vocab", F_STR, S(vocab), 0, 0, NULL,
     "WordPiece vocab.txt; empty = build one from the training data"},
    {"data.vocabSize", F_INT, S(vocab_size), 5, 1 << 22, NULL, "built vocab: maximum size"},
    {"data.minFreq", F_INT, S(min_freq), 1, 1 << 30, NULL, "built vocab: minimum word count"},
    {"data.format", F_ENUM, S(format), 0, 0, "auto|jsonl|tsv|csv",
     "file format (auto: by extension: .jsonl/.json, .tsv/.txt, .csv; a .gz after it left out)"},
    {"data.strict", F_BOOL, S(strict), 0, 0, NULL, "a malformed line is fatal (else skipped)"},
    {"data.clsSep", F_BOOL, S(cls_sep), 0, 0, NULL, "wrap each text in [CLS] ... [SEP]"},
    {"data.textField", F_STR, S(text_field), 0, 0, NULL, "JSONL: the field holding the text"},
    {"data.textPairField", F_STR, S(text_pair_field), 0, 0, NULL,
     "JSONL: the field holding the second text of a text pair (NLI, paraphrase, question and "
     "answer), encoded as [CLS] text [SEP] pair [SEP], both cut the way Hugging Face's "
     "longest_first cuts; TSV files are then text<TAB>pair<TAB>label; empty = single texts"},
    {"data.labelField", F_STR, S(label_field), 0, 0, NULL, "JSONL: the field holding the label"},
    {"data.labelSeparator", F_STR, S(label_sep), 0, 0, NULL,
     "multi-label: the character between the labels of a TSV or CSV label field, or of a JSONL "
     "string (a JSONL list needs none)"},
    {"data.labelNames", F_NAMES, S(label_names), 2, DATASET_MAX_LABELS, NULL,
     "the classes, in order (Hugging Face's id2label): the data's labels are these names or "
     "their indexes (0, 1, ...: a ClassLabel column exported as integers), and the model's "
     "class ids follow this order; empty = the labels the training data has, sorted"},
    {"initFrom", F_STR, S(init_from), 0, 0, NULL,
     "start from a trained model: a checkpoint's step directory, or a job's checkpoint.dir (its "
     "newest); its model settings, vocab and weights replace model.* and data.vocab, its "
     "classifier too when the labels are the same (else a new one); a job resuming its own "
     "checkpoint ignores it"},
    {"epochs", F_INT, S(epochs), 1, 1000000, NULL, "passes over the training data"},
    {"maxSteps", F_INT, S(max_steps), 0, 1 << 30, NULL, "stop after this many steps; 0 = none"},
    {"batchSize", F_INT, S(batch_size), 1, 65536, NULL, "examples per step, per process"},
    {"evalBatchSize", F_INT, S(eval_batch_size), 0, 65536, NULL, "0 = batchSize"},
    {"evalInterval", F_INT, S(eval_interval), 0, 1 << 30, NULL,
     "steps between evaluations on data.eval during training (every rank takes a share); "
     "0 = only after training"},
    {"bestMetric", F_ENUM, S(best_metric), 0, 0, "loss|accuracy|macro_f1|micro_f1|pearson",
     "the evaluation metric that decides the best evaluation and early stopping (loss: lower "
     "is better; multi-label: accuracy is the exact-match share; regression: loss (the mean "
     "squared error) or pearson)"},
    {"earlyStoppingPatience", F_INT, S(early_stopping_patience), 0, 1000000, NULL,
     "stop training after this many evaluations without improvement of bestMetric (needs "
     "evalInterval); 0 = never"},
    {"earlyStoppingThreshold", F_DBL, S(early_stopping_threshold), 0, 1e9, NULL,
     "the least change of bestMetric that counts as an improvement"},
    {"gradAccumSteps", F_INT, S(grad_accum_steps), 1, 65536, NULL,
     "micro-batches accumulated per optimizer step"},
    {"learningRate", F_DBL, S(learning_rate), 1e-9, 10, NULL, "peak learning rate (per process)"},
    {"scaleLearningRate", F_BOOL, S(scale_learning_rate), 0, 0, NULL,
     "multiply learningRate by the world size (linear scaling rule)"},
    {"warmupSteps", F_INT, S(warmup_steps), -1, 1 << 30, NULL, "-1 = warmupRatio of all steps"},
    {"warmupRatio", F_DBL, S(warmup_ratio), 0, 1, NULL, "warmup as a fraction of all steps"},
    {"lrDecay", F_ENUM, S(lr_decay), 0, 0, "cosine|linear|constant", "decay after warmup"},
    {"minLrRatio", F_DBL, S(min_lr_ratio), 0, 1, NULL, "final lr = learningRate * minLrRatio"},
    {"weightDecay", F_DBL, S(weight_decay), 0, 10, NULL, "AdamW decoupled weight decay"},
    {"gradClip", F_DBL, S(grad_clip), 0, 1e9, NULL, "max global gradient norm; 0 = off"},
    {"labelSmoothing", F_DBL, S(label_smoothing), 0, 0.99, NULL,
     "label smoothing of the training loss (PyTorch's label_smoothing); evaluation reports the "
     "plain cross-entropy; 0 = off"},
    {"classWeight", F_ENUM, S(class_weight), 0, 0, "none|balanced",
     "weigh the training loss by class: balanced = examples / (classes x the class's examples) "
     "in data.train, as scikit-learn's; evaluation reports the plain cross-entropy"},
    {"classWeights", F_WEIGHTS, S(class_weights), 0, CFG_MAX_CLASS_WEIGHT, NULL,
     "weigh the training loss by class with your own weights, label: weight (0..1e6); labels "
     "not named weigh 1; not with classWeight: balanced"},
    {"adamBeta1", F_DBL, S(beta1), 0, 0.999999, NULL, "AdamW beta1"},
    {"adamBeta2", F_DBL, S(beta2), 0, 0.999999999, NULL, "AdamW beta2"},
    {"adamEps", F_DBL, S(eps), 1e-30, 1, NULL, "AdamW epsilon"},
    {"seed", F_I64, S(seed), 0, 9007199254740992.0, NULL, "initialisation and shuffling seed"},
    {"logInterval", F_INT, S(log_interval), 1, 1 << 30, NULL, "steps between progress lines"},
    {"threads", F_INT, S(threads), 0, 4096, NULL,
     "CPU threads; 0 = the CPUs this process may use (CPU limit included) / NPROC_PER_NODE"},
    {"device", F_ENUM, S(device), 0, 0, "cpu|cuda",
     "train on the CPU, or on a GPU (cuda: one per process, chosen by LOCAL_RANK)"},
    {"precision", F_ENUM, S(precision), 0, 0, "fp32|bf16",
     "GPU arithmetic: fp32, or bf16 GEMMs/activations with fp32 master weights (device: cuda)"},
    {"attention", F_ENUM, S(attention), 0, 0, "auto|unfused|fused",
     "GPU attention: unfused (GEMMs + softmax, keeps the T x T probabilities), fused (one "
     "pass, memory O(T); device: cuda) or auto (fused in bf16 on the GPU, where it measured "
     "faster; else unfused)"},
    {"cudaGraphs", F_BOOL, S(cuda_graphs), 0, 0, NULL,
     "GPU: replay each batch shape's forward and backward as a CUDA graph (one launch instead of "
     "hundreds; the same results bit for bit; device: cuda)"},
    {"autotune", F_BOOL, S(autotune), 0, 0, NULL,
     "GPU, bf16: pick kernels when the worker starts by timing those whose results agree with "
     "the default kernels' on that GPU (the fused attention's variants, the GELU backward in "
     "the GEMM epilogue; those a GPU test run has verified), as cuDNN's benchmark mode does; "
     "false: the default kernels every run"},
    {"gradBucketMB", F_DBL, S(grad_bucket_mb), 0, 4096, NULL,
     "all-reduce bucket in MiB: with 2+ ranks, gradients are summed bucket by bucket while "
     "backward still runs; 0 = one all-reduce after backward"},
    {"report", F_STR, S(report), 0, 0, NULL, "write the final eval report (JSON) here"},
    {"metricsPort", F_INT, S(metrics_port), -1, 65535, NULL,
     "rank 0 serves /metrics and /progress on this port; -1 = off"},
    {"tensorboardDir", F_STR, S(tensorboard_dir), 0, 0, NULL,
     "write TensorBoard event files here; empty = none"},
    {"checkpoint.dir", F_STR, S(checkpoint_dir), 0, 0, NULL,
     "the job's checkpoint directory (step-<N>/ and report.json); empty = no checkpoints"},
    {"checkpoint.intervalSteps", F_INT, S(checkpoint_interval), 0, 1 << 30, NULL,
     "steps between checkpoints (and one at the end); 0 = only at the end"},
    {"checkpoint.keep", F_INT, S(checkpoint_keep), 1, 1000000, NULL,
     "checkpoints kept (the newest)"},
    {"checkpoint.saveOnStop", F_BOOL, S(checkpoint_save_on_stop), 0, 0, NULL,
     "on SIGTERM/SIGINT (a pod deleted: suspend, preemption, a resize) rank 0 saves the step "
     "the gang stopped at before it exits, so the next run loses nothing; false: the last "
     "interval checkpoint is where it resumes"},
    {"checkpoint.stopSaveSeconds", F_INT, S(checkpoint_stop_save_seconds), 1, 86400, NULL,
     "the longest that save may take before the worker exits anyway (the operator sets the "
     "pod's terminationGracePeriodSeconds minus 5)"},
};
#undef S
#define NFIELDS (int)(sizeof(fields) / sizeof(fields[0]))

void cfg_defaults(struct cfg *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->task, sizeof(c->task), "text-classification");
    snprintf(c->model_type, sizeof(c->model_type), "transformer");
    c->layers = 2, c->hidden = 128, c->heads = 4, c->max_seq_len = 256, c->ffn = 0;
    c->buckets = 131072;
    snprintf(c->pooling, sizeof(c->pooling), "mean");
    c->vocab_size = 30000, c->min_freq = 2;
    snprintf(c->format, sizeof(c->format), "auto");
    c->cls_sep = true;
    snprintf(c->text_field, sizeof(c->text_field), "text");
    snprintf(c->label_field, sizeof(c->label_field), "label");
    snprintf(c->label_sep, sizeof(c->label_sep), ",");
    c->epochs = 3, c->batch_size = 32, c->grad_accum_steps = 1;
    c->learning_rate = 3e-4;
    c->scale_learning_rate = true;
    c->warmup_steps = -1, c->warmup_ratio = 0.06;
    snprintf(c->lr_decay, sizeof(c->lr_decay), "cosine");
    snprintf(c->class_weight, sizeof(c->class_weight), "none");
    snprintf(c->best_metric, sizeof(c->best_metric), "loss");
    snprintf(c->device, sizeof(c->device), "cpu");
    snprintf(c->precision, sizeof(c->precision), "fp32");
    snprintf(c->attention, sizeof(c->attention), "auto");
    c->autotune = true;
    c->grad_bucket_mb = TRAIN_BUCKET_MB;
    c->min_lr_ratio = 0.0, c->weight_decay = 0.01, c->grad_clip = 1.0;
    c->beta1 = 0.9, c->beta2 = 0.999, c->eps = 1e-8;
    c->seed = 42, c->log_interval = 10, c->metrics_port = -1;
    c->checkpoint_interval = 200, c->checkpoint_keep = 3;
    c->checkpoint_save_on_stop = true, c->checkpoint_stop_save_seconds = 25;
}

/* "training." for training fields; the checkpoint section sits beside training (the operator's
 * config.json: {"training": {...}, "checkpoint": {"path", "dir", "intervalSteps", "keep"}}). */
static const char *section(const char *path)
{
    return strncmp(path, "checkpoint.", 11) ? "training." : "";
}

/* ---- names: model.maxSeqLen -> --model-max-seq-len, GANTRY_MODEL_MAX_SEQ_LEN ---------------- */
static void derive(const char *path, char *out, size_t n, int upper, char sep)
{
    size_t j = 0;
    for (const char *p = path; *p && j + 2 < n; p++) {
        /* a new word at each capital, an acronym one word: gradBucketMB -> --grad-bucket-mb */
        bool word = isupper((unsigned char)*p) && !(p > path && isupper((unsigned char)p[-1]));
        if (*p == '.' || word)
            out[j++] = sep;
        if (*p != '.')
            out[j++] = (char)(upper ? toupper((unsigned char)*p) : tolower((unsigned char)*p));
    }
    out[j] = '\0';
}

static void flag_name(const struct field *f, char *out, size_t n) { derive(f->path, out, n, 0, '-'); }

static void env_name(const struct field *f, char *out, size_t n)
{
    char tail[64];
    derive(f->path, tail, sizeof(tail), 1, '_');
    snprintf(out, n, "GANTRY_%.63s", tail);
}

static void forms(const struct field *f, char *out, size_t n)
{
    char fl[96], en[96];
    flag_name(f, fl, sizeof(fl));
    env_name(f, en, sizeof(en));
    snprintf(out, n, "JSON %s, env %s, flag --%s", f->path, en, fl);
}

/* ---- values ------------------------------------------------------------------------------- */
static void *slot(struct cfg *c, const struct field *f) { return (char *)c + f->off; }
static const void *cslot(const struct cfg *c, const struct field *f) { return (const char *)c + f->off; }

static bool in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

/* Checks a label -> weight object and stores it compact in f's slot. 0, or -1 with a message. */
static int set_weights(struct cfg *c, const struct field *f, const json_t *obj, const char *src,
                       char *err, size_t errlen)
{
    char hint[256];
    const char *key;
    json_t *val;
    forms(f, hint, sizeof(hint));
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "%s%s (from %s): expected an object of label: weight, e.g. {\"spam\": "
                              "3} (%s)", section(f->path), f->path, src, hint);
        return -1;
    }
    json_object_foreach((json_t *)obj, key, val)
    {
        double w = json_number_value(val);
        if (!*key) {
            snprintf(err, errlen, "%s%s (from %s): an empty label; name the label as it is in "
                                  "data.train", section(f->path), f->path, src);
            return -1;
        }
        if (!json_is_number(val) || !isfinite(w) || w < f->min || w > f->max) {
            snprintf(err, errlen, "%s%s.%.64s (from %s): the weight must be a number in %g..%g "
                                  "(%s)", section(f->path), f->path, key, src, f->min, f->max,
                     hint);
            return -1;
        }
    }
    char *text = json_object_size(obj) ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (text && strlen(text) >= f->size) {
        snprintf(err, errlen, "%s%s (from %s): longer than %zu bytes as JSON; fewer or shorter "
                              "labels (%s)", section(f->path), f->path, src, f->size - 1, hint);
        free(text);
        return -1;
    }
    snprintf(slot(c, f), f->size, "%s", text ? text : "");
    free(text);
    return 0;
}

/* Checks a list of names (2..f->max distinct, non-empty, at most DATASET_MAX_LABEL_BYTES) and
 * stores it compact in f's slot. 0, or -1 with a message. */
static int set_names(struct cfg *c, const struct field *f, const json_t *arr, const char *src,
                     char *err, size_t errlen)
{
    char hint[256];
    const json_t *v;
    size_t i, j;

    forms(f, hint, sizeof(hint));
    if (json_is_array(arr) && json_array_size(arr) == 0) { /* [] is none, as cfg_to_json writes */
        *(char *)slot(c, f) = '\0';
        return 0;
    }
    if (!json_is_array(arr) || json_array_size(arr) < (size_t)f->min ||
        json_array_size(arr) > (size_t)f->max) {
        snprintf(err, errlen, "%s%s (from %s): expected a list of %g to %g class names, e.g. "
                 "[\"entailment\", \"neutral\", \"contradiction\"] (%s)", section(f->path),
                 f->path, src, f->min, f->max, hint);
        return -1;
    }
    json_array_foreach(arr, i, v) {
        const char *s = json_string_value(v);
        bool dup = false;
        for (j = 0; j < i && s; j++)
            dup |= json_equal(v, json_array_get(arr, j));
        if (!s || !*s || json_string_length(v) > DATASET_MAX_LABEL_BYTES ||
            strlen(s) != json_string_length(v) || dup) {
            snprintf(err, errlen, "%s%s[%zu] (from %s): %s (%s)", section(f->path), f->path, i,
                     src, dup ? "a name listed twice" : "must be a non-empty string of at most "
                     "256 bytes", hint);
            return -1;
        }
    }
    char *text = json_dumps(arr, JSON_COMPACT);
    if (!text || strlen(text) >= f->size) {
        snprintf(err, errlen, "%s%s (from %s): longer than %zu bytes as JSON (%s)",
                 section(f->path), f->path, src, f->size - 1, hint);
        free(text);
        return -1;
    }
    snprintf(slot(c, f), f->size, "%s", text);
    free(text);
    return 0;
}

/* F_NAMES from text: the JSON array, or a,b,c. */
static int set_names_text(struct cfg *c, const struct field *f, const char *v, const char *src,
                          char *err, size_t errlen)
{
    json_t *arr;
    int rc;
    while (isspace((unsigned char)*v))
        v++;
    if (*v == '[') {
        json_error_t je;
        if (!(arr = json_loads(v, 0, &je))) {
            snprintf(err, errlen, "%s%s (from %s): bad JSON at column %d: %s", section(f->path),
                     f->path, src, je.column, je.text);
            return -1;
        }
    } else {
        arr = json_array();
        for (const char *p = v;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            json_t *s = json_stringn(p, len); /* NULL: not UTF-8 */
            json_array_append_new(arr, s ? s : json_null());
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    rc = set_names(c, f, arr, src, err, errlen);
    json_decref(arr);
    return rc;
}

/* F_WEIGHTS from text: the JSON object, or label=weight[,label=weight...] (the last '=' of an
 * item splits it, so labels may contain '='; a label with ',' needs the JSON form). */
static int set_weights_text(struct cfg *c, const struct field *f, const char *v, const char *src,
                            char *err, size_t errlen)
{
    json_t *obj;
    int rc;
    while (isspace((unsigned char)*v))
        v++;
    if (*v == '{') {
        json_error_t je;
        if (!(obj = json_loads(v, JSON_REJECT_DUPLICATES, &je))) {
            snprintf(err, errlen, "%s%s (from %s): bad JSON at column %d: %s", section(f->path),
                     f->path, src, je.column, je.text);
            return -1;
        }
    } else {
        obj = json_object();
        for (const char *p = v; *p;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            char item[512], *eq, *end;
            snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1),
                     p);
            eq = strrchr(item, '=');
            errno = 0;
            double w = eq ? strtod(eq + 1, &end) : 0;
            bool ok = len < sizeof(item) && eq && !errno && eq != item && end != eq + 1 && !*end;
            if (ok)
                *eq = '\0';
            if (!ok || json_object_get(obj, item)) {
                snprintf(err, errlen, "%s%s (from %s): \"%.64s%s\" is not label=weight (e.g. "
                                      "spam=3,ham=1; each label once)", section(f->path), f->path,
                         src, item, ok ? "=..." : "");
                json_decref(obj);
                return -1;
            }
            if (json_object_set_new(obj, item, json_real(w))) { /* a key must be UTF-8 */
                snprintf(err, errlen, "%s%s (from %s): a label is not valid UTF-8",
                         section(f->path), f->path, src);
                json_decref(obj);
                return -1;
            }
            p = comma ? comma + 1 : p + len;
        }
    }
    rc = set_weights(c, f, obj, src, err, errlen);
    json_decref(obj);
    return rc;
}

/* Parses text for field f into c. 0, or -1 with a message naming the field and the source. */
static int set_from_string(struct cfg *c, const struct field *f, const char *v, const char *src,
                           char *err, size_t errlen)
{
    char *end = NULL, hint[256];
    forms(f, hint, sizeof(hint));
    errno = 0;
    switch (f->type) {
    case F_INT:
    case F_I64: {
        double d = strtod(v, &end); /* accepts "1e3"; integrality checked below */
        if (end == v || *end || errno || d != floor(d) || fabs(d) > 9.3e18)
            goto bad;
        if (f->type == F_INT) {
            if (d < -2147483648.0 || d > 2147483647.0)
                goto bad;
            *(int *)slot(c, f) = (int)d;
        } else {
            *(int64_t *)slot(c, f) = (int64_t)d;
        }
        return 0;
    }
    case F_DBL: {
        double d = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(d))
            goto bad;
        *(double *)slot(c, f) = d;
        return 0;
    }
    case F_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
            *(bool *)slot(c, f) = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
            *(bool *)slot(c, f) = false;
        else
            goto bad;
        return 0;
    case F_ENUM:
        if (!in_choices(f->choices, v)) {
            snprintf(err, errlen, "%s%s: \"%.64s\" (from %s) is not one of %s (%s)",
                     section(f->path), f->path, v, src, f->choices, hint);
            return -1;
        }
        __attribute__((fallthrough)); /* stored like a string */
    case F_STR: {
        json_t *utf8 = json_string(v); /* NULL: not UTF-8, which the report's JSON could not hold */
        json_decref(utf8);
        if (!utf8) {
            snprintf(err, errlen, "%s%s: the value (from %s) is not valid UTF-8 (%s)",
                     section(f->path), f->path, src, hint);
            return -1;
        }
        if (strlen(v) >= f->size) {
            snprintf(err, errlen, "%s%s: value (from %s) is longer than %zu bytes (%s)",
                     section(f->path), f->path, src, f->size - 1, hint);
            return -1;
        }
        memcpy(slot(c, f), v, strlen(v) + 1);
        return 0;
    }
    case F_WEIGHTS:
        return set_weights_text(c, f, v, src, err, errlen);
    case F_NAMES:
        return set_names_text(c, f, v, src, err, errlen);
    }
bad:
    snprintf(err, errlen, "%s%s: \"%.64s\" (from %s) is not a valid %s (%s)",
             section(f->path), f->path, v,
             src,
             f->type == F_BOOL  ? "boolean (true or false)"
             : f->type == F_DBL ? "number"
                                : "integer",
             hint);
    return -1;
}

static int set_from_json(struct cfg *c, const struct field *f, const json_t *v, const char *src,
                         char *err, size_t errlen)
{
    char buf[64];
    if (f->type == F_WEIGHTS && !json_is_string(v))
        return set_weights(c, f, v, src, err, errlen);
    if (f->type == F_NAMES && !json_is_string(v))
        return set_names(c, f, v, src, err, errlen);
    if (json_is_string(v))
        return set_from_string(c, f, json_string_value(v), src, err, errlen);
    if (json_is_boolean(v) && f->type == F_BOOL)
        return set_from_string(c, f, json_is_true(v) ? "true" : "false", src, err, errlen);
    if (json_is_integer(v) && f->type != F_STR && f->type != F_ENUM) {
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        return set_from_string(c, f, buf, src, err, errlen);
    }
    if (json_is_real(v) && f->type != F_STR && f->type != F_ENUM && f->type != F_BOOL) {
        snprintf(buf, sizeof(buf), "%.17g", json_real_value(v));
        return set_from_string(c, f, buf, src, err, errlen);
    }
    char hint[256];
    forms(f, hint, sizeof(hint));
    snprintf(err, errlen, "%s%s (from %s): wrong JSON type; expected %s (%s)",
             section(f->path), f->path, src,
             f->type == F_STR || f->type == F_ENUM ? "a string"
             : f->type == F_BOOL                   ? "true or false"
                                                   : "a number",
             hint);
    return -1;
}

/* Applies the members of obj whose paths start with prefix ("" or "model."). */
static int apply_object(struct cfg *c, const json_t *obj, const char *prefix, const char *src,
                        char *err, size_t errlen)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val)
    {
        char path[128];
        snprintf(path, sizeof(path), "%s%s", prefix, key);
        if (!*prefix &&
            (!strcmp(key, "model") || !strcmp(key, "data") || !strcmp(key, "checkpoint"))) {
            if (!json_is_object(val)) {
                snprintf(err, errlen, "training.%s (from %s): must be an object, e.g. %s", key, src,
                         !strcmp(key, "model") ? "{type: transformer, layers: 2}"
                                 : !strcmp(key, "data") ? "{train: /data/train.jsonl}"
                                                        : "{dir: /ckpt/job, intervalSteps: 200}");
                return CFG_EBAD;
            }
            char sub[16];
            snprintf(sub, sizeof(sub), "%s.", key);
            if (apply_object(c, val, sub, src, err, errlen))
                return CFG_EBAD;
            continue;
        }
        const struct field *f = NULL;
        for (int i = 0; i < NFIELDS && !f; i++)
            if (!strcmp(fields[i].path, path))
                f = &fields[i];
        if (!f) {
            snprintf(err, errlen,
                     "%s%s (from %s): unknown field; see `gantry-worker --help` for the "
                     "accepted names (they are case-sensitive, e.g. learningRate)",
                     section(path), path, src);
            return CFG_EBAD;
        }
        if (set_from_json(c, f, val, src, err, errlen))
            return CFG_EBAD;
    }
    return CFG_OK;
}

int cfg_apply_json(struct cfg *c, const json_t *doc, const char *source, char *err, size_t errlen)
{
    if (!json_is_object(doc)) {
        snprintf(err, errlen, "%s: the config must be a JSON object (the TrainingJob's training: "
                              "section)", source);
        return CFG_EBAD;
    }
    const json_t *tr = json_object_get(doc, "training");
    if (tr && !json_is_object(tr)) {
        snprintf(err, errlen, "%s: \"training\" must be an object", source);
        return CFG_EBAD;
    }
    if (apply_object(c, tr ? tr : doc, "", source, err, errlen))
        return CFG_EBAD;
    /* The operator renders the checkpoint settings beside training; "path" is the volume's
     * mount (dir = path/job is what the worker uses). */
    const json_t *ck = tr ? json_object_get(doc, "checkpoint") : NULL;
    if (ck && !json_is_object(ck)) {
        snprintf(err, errlen, "%s: checkpoint must be an object, e.g. {\"dir\": \"/ckpt/job\", "
                              "\"intervalSteps\": 200, \"keep\": 3}", source);
        return CFG_EBAD;
    }
    if (ck) {
        json_t *copy = json_deep_copy(ck);
        json_object_del(copy, "path");
        int rc = apply_object(c, copy, "checkpoint.", source, err, errlen);
        json_decref(copy);
        return rc;
    }
    return CFG_OK;
}

/* ---- validation ---------------------------------------------------------------------------- */
static double num(const struct cfg *c, const struct field *f)
{
    switch (f->type) {
    case F_INT:
        return *(const int *)cslot(c, f);
    case F_I64:
        return (double)*(const int64_t *)cslot(c, f);
    case F_DBL:
        return *(const double *)cslot(c, f);
    default:
        return 0;
    }
}

bool cfg_fused_attention(const struct cfg *c)
{
    if (!strcmp(c->attention, "auto"))
        return !strcmp(c->device, "cuda") && !strcmp(c->precision, "bf16") &&
               strcmp(c->model_type, "ngram") && c->heads > 0 &&
               c->hidden / c->heads <= ATTENTION_FUSED_MAX_HS;
    return !strcmp(c->attention, "fused");
}

bool cfg_autotune(const struct cfg *c)
{
    return c->autotune && !strcmp(c->device, "cuda") && !strcmp(c->precision, "bf16");
}

int cfg_validate(const struct cfg *c, char *err, size_t errlen)
{
    char hint[256];
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        if (f->type != F_INT && f->type != F_I64 && f->type != F_DBL)
            continue;
        double v = num(c, f);
        if (v < f->min || v > f->max) {
            forms(f, hint, sizeof(hint));
            snprintf(err, errlen, "%s%s: %g is out of range; use %g..%g (%s: %s)",
                     section(f->path), f->path, v, f->min, f->max, hint, f->help);
            return CFG_EBAD;
        }
    }
    if ((long long)c->batch_size * c->grad_accum_steps > INT_MAX) {
        snprintf(err, errlen, "training.gradAccumSteps: batchSize %d x gradAccumSteps %d is more "
                              "than 2^31 - 1 examples a step; use fewer", c->batch_size,
                 c->grad_accum_steps);
        return CFG_EBAD;
    }
    if (!c->train[0]) {
        snprintf(err, errlen, "training.data.train: not set; give the training file (JSONL with "
                              "text and label) as data.train, GANTRY_DATA_TRAIN or --data-train");
        return CFG_EBAD;
    }
    if (!strcmp(c->model_type, "transformer") && c->hidden % c->heads) {
        snprintf(err, errlen, "training.model.heads: %d does not divide model.hidden (%d); choose "
                              "heads so that hidden / heads is whole, e.g. hidden 128, heads 4",
                 c->heads, c->hidden);
        return CFG_EBAD;
    }
    if (c->init_from[0] && c->vocab[0]) {
        snprintf(err, errlen, "training.data.vocab: set, and initFrom brings its model's own vocab "
                              "(the embeddings are its tokens'); remove data.vocab");
        return CFG_EBAD;
    }
    if (c->class_weights[0] && strcmp(c->class_weight, "none")) {
        snprintf(err, errlen, "training.classWeights: set, and classWeight is %s too; give your "
                              "own weights (classWeights) or computed ones (classWeight), not both",
                 c->class_weight);
        return CFG_EBAD;
    }
    if (!strcmp(c->precision, "bf16") && strcmp(c->device, "cuda")) {
        snprintf(err, errlen, "training.precision: bf16 needs device: cuda (the CPU trains in fp32 "
                              "only); set device: cuda, or precision: fp32");
        return CFG_EBAD;
    }
    if (!strcmp(c->precision, "bf16") && !strcmp(c->model_type, "transformer")) {
        /* cuBLASLt's bf16 operands need 16-byte rows (model_gpu_new checks the same) */
        const int ffn = c->ffn ? c->ffn : 4 * c->hidden;
        if (c->hidden % 8 || ffn % 8) {
            snprintf(err, errlen, "training.precision: bf16 needs model.hidden and model.ffn "
                                  "divisible by 8 (got %d and %d); round them up, or use "
                                  "precision: fp32", c->hidden, ffn);
            return CFG_EBAD;
        }
    }
    if (!strcmp(c->attention, "fused") && strcmp(c->device, "cuda")) {
        snprintf(err, errlen, "training.attention: fused is a GPU kernel and needs device: cuda; "
                              "set device: cuda, or remove attention (the CPU has one attention)");
        return CFG_EBAD;
    }
    if (!strcmp(c->model_type, "ngram") && !strcmp(c->precision, "bf16")) {
        snprintf(err, errlen, "training.precision: bf16 is for model.type transformer; the n-gram "
                              "model trains in fp32: remove precision");
        return CFG_EBAD;
    }
    if (!strcmp(c->model_type, "ngram") && !strcmp(c->attention, "fused")) {
        snprintf(err, errlen, "training.attention: fused is for model.type transformer (the "
                              "n-gram model has no attention): remove attention");
        return CFG_EBAD;
    }
    if (c->cuda_graphs && strcmp(c->device, "cuda")) {
        snprintf(err, errlen, "training.cudaGraphs: true needs device: cuda (CUDA graphs replay "
                              "GPU work); set device: cuda, or remove cudaGraphs");
        return CFG_EBAD;
    }
    if (!strcmp(c->attention, "fused") && c->hidden / c->heads > ATTENTION_FUSED_MAX_HS) {
        snprintf(err, errlen, "training.attention: fused takes head sizes (model.hidden / "
                              "model.heads) up to %d, got %d; use more heads or attention: unfused",
                 ATTENTION_FUSED_MAX_HS, c->hidden / c->heads);
        return CFG_EBAD;
    }
    if (c->early_stopping_patience > 0 && c->eval_interval == 0) {
        snprintf(err, errlen, "training.earlyStoppingPatience: %d, but evalInterval is 0 (no "
                              "evaluations during training); set evalInterval, e.g. 100, or "
                              "earlyStoppingPatience: 0", c->early_stopping_patience);
        return CFG_EBAD;
    }
    if (c->eval_fraction > 0 && c->eval[0]) {
        snprintf(err, errlen, "training.data.evalFraction: %g, but data.eval is set too; hold "
                              "out part of data.train (evalFraction) or give an evaluation file "
                              "(eval), not both", c->eval_fraction);
        return CFG_EBAD;
    }
    if (c->eval_interval > 0 && !c->eval[0] && !(c->eval_fraction > 0)) {
        snprintf(err, errlen, "training.evalInterval: %d, but data.eval is not set; give the "
                              "evaluation file as data.eval (or hold out data.evalFraction of "
                              "data.train), or set evalInterval: 0",
                 c->eval_interval);
        return CFG_EBAD;
    }
    if (!c->text_field[0] || !c->label_field[0] || !strcmp(c->text_field, c->label_field) ||
        !strcmp(c->text_pair_field, c->text_field) || !strcmp(c->text_pair_field, c->label_field)) {
        snprintf(err, errlen, "training.data: textField \"%s\", textPairField \"%s\" and "
                 "labelField \"%s\" must name different JSONL fields (textField and labelField "
                 "not empty)", c->text_field, c->text_pair_field, c->label_field);
        return CFG_EBAD;
    }
    if (strlen(c->label_sep) != 1 || strchr("\t\n\r\"", c->label_sep[0])) {
        snprintf(err, errlen, "training.data.labelSeparator: \"%s\" must be one character, not a "
                 "tab, newline or double quote (\",\", \"|\", \";\", \" \")", c->label_sep);
        return CFG_EBAD;
    }
    if ((CFG_MULTI_LABEL(c) || CFG_REGRESSION(c)) &&
        (c->label_smoothing > 0 || strcmp(c->class_weight, "none") || c->class_weights[0])) {
        snprintf(err, errlen, "training.%s: not with task: %s (its loss has neither label "
                 "smoothing nor class weights); remove it",
                 c->label_smoothing > 0 ? "labelSmoothing"
                 : c->class_weights[0]  ? "classWeights"
                                        : "classWeight", c->task);
        return CFG_EBAD;
    }
    if (CFG_REGRESSION(c) && c->label_names[0] && strcmp(c->label_names, "[]")) {
        snprintf(err, errlen, "training.data.labelNames: not with task: regression (its labels "
                 "are numbers, not classes); remove it");
        return CFG_EBAD;
    }
    if (CFG_REGRESSION(c) != (strcmp(c->best_metric, "pearson") == 0) &&
        strcmp(c->best_metric, "loss")) {
        snprintf(err, errlen, "training.bestMetric: %s is not a metric of task: %s; use loss or "
                 "%s", c->best_metric, c->task, CFG_REGRESSION(c) ? "pearson" : "accuracy, "
                 "macro_f1 or micro_f1");
        return CFG_EBAD;
    }
    if (c->text_pair_field[0] && !c->cls_sep) {
        snprintf(err, errlen, "training.data.textPairField: text pairs are encoded as [CLS] text "
                 "[SEP] pair [SEP], so they need data.clsSep: true");
        return CFG_EBAD;
    }
    if (c->text_pair_field[0] && c->max_seq_len < 3) {
        snprintf(err, errlen, "training.model.maxSeqLen: %d leaves no room for a text pair's "
                 "[CLS] and two [SEP]; use at least 3", c->max_seq_len);
        return CFG_EBAD;
    }
    if (c->cls_sep && c->max_seq_len < 2) {
        snprintf(err, errlen, "training.model.maxSeqLen: %d leaves no room for [CLS] and [SEP]; "
                              "use at least 2 or set data.clsSep: false", c->max_seq_len);
        return CFG_EBAD;
    }
    return CFG_OK;
}

/* ---- usage and JSON ------------------------------------------------------------------------ */
static void value_text(const struct cfg *c, const struct field *f, char *out, size_t n)
{
    switch (f->type) {
    case F_STR:
    case F_ENUM:
        snprintf(out, n, "%s", *(const char *)cslot(c, f) ? (const char *)cslot(c, f) : "\"\"");
        break;
    case F_BOOL:
        snprintf(out, n, "%s", *(const bool *)cslot(c, f) ? "true" : "false");
        break;
    case F_WEIGHTS:
    case F_NAMES:
        snprintf(out, n, "%s", *(const char *)cslot(c, f) ? (const char *)cslot(c, f) : "none");
        break;
    default:
        snprintf(out, n, "%g", num(c, f));
    }
}

void cfg_usage(FILE *f, const char *prog)
{
    struct cfg d;
    cfg_defaults(&d);
    fprintf(f,
            "usage: %s [--config FILE] [--FLAG VALUE ...]\n\n"
            "Trains a text classifier (the TrainingJob's training: section) and writes an eval\n"
            "report. Settings come from defaults < FILE (default %s, if present) <\n"
            "GANTRY_* environment < flags. Rank, world size and rendezvous come from RANK,\n"
            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT (set by the operator).\n\n"
            "  --config FILE                     JSON: the training object, or {\"training\": {...}}\n"
            "  --help                            this text\n\n",
            prog, CFG_DEFAULT_FILE);
    for (int i = 0; i < NFIELDS; i++) {
        char fl[96], en[96], def[64], left[200];
        flag_name(&fields[i], fl, sizeof(fl));
        env_name(&fields[i], en, sizeof(en));
        value_text(&d, &fields[i], def, sizeof(def));
        snprintf(left, sizeof(left), "--%s %s", fl,
                 fields[i].type == F_ENUM ? fields[i].choices
                 : fields[i].type == F_BOOL ? "true|false"
                 : fields[i].type == F_STR  ? (strstr(fields[i].path, "Field") ? "NAME" : "PATH")
                 : fields[i].type == F_WEIGHTS ? "LABEL=W,..."
                 : fields[i].type == F_NAMES   ? "NAME,NAME,..."
                                            : "N");
        fprintf(f, "  %-33s %s (default %s)\n  %-33s   %s, JSON %s\n", left, fields[i].help, def,
                "", en, fields[i].path);
    }
    fprintf(f,
            "\nRanks (set by the operator, gantry-run or a pod's gantry-worker): RANK,\n"
            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GANTRY_RDZV_TOKEN (the job's shared secret),\n"
            "NODE_RANK, NPROC_PER_NODE (ranks per node: > 1 in a pod starts them; the\n"
            "all-reduce is hierarchical across nodes), LOCAL_RANK; GANTRY_RDZV_TIMEOUT (s,\n"
            "default 600), GANTRY_PEER_TIMEOUT (s without progress from a peer, default 60),\n"
            "GANTRY_COLL_SHM (0: no shared-memory all-reduce; node: only within nodes).\n"
            "GANTRY_STANDBY=1: train nothing, wait for SIGTERM and exit 0 (the operator's\n"
            "standby pod, holding a place for a worker an elastic job was shrunk without).\n");
    fprintf(f, "\nExit status: 0 done; 64 bad usage; 65 bad data; 78 bad config (the message names "
               "the field);\nother non-zero: retryable failure.\n");
}

json_t *cfg_to_json(const struct cfg *c)
{
    json_t *root = json_object();
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        json_t *v;
        switch (f->type) {
        case F_STR:
        case F_ENUM:
            v = json_string((const char *)cslot(c, f));
            break;
        case F_BOOL:
            v = json_boolean(*(const bool *)cslot(c, f));
            break;
        case F_WEIGHTS:
            v = *(const char *)cslot(c, f) ? json_loads(cslot(c, f), 0, NULL) : NULL;
            v = v ? v : json_object();
            break;
        case F_NAMES:
            v = *(const char *)cslot(c, f) ? json_loads(cslot(c, f), 0, NULL) : NULL;
            v = v ? v : json_array();
            break;
        case F_DBL:
            v = json_real(num(c, f));
            break;
        default:
            v = json_integer((json_int_t)num(c, f));
        }
        const char *dot = strchr(f->path, '.');
        if (dot) {
            char obj[16];
            snprintf(obj, sizeof(obj), "%.*s", (int)(dot - f->path), f->path);
            json_t *sub = json_object_get(root, obj);
            if (!sub)
                json_object_set_new(root, obj, sub = json_object());
            json_object_set_new(sub, dot + 1, v);
        } else {
            json_object_set_new(root, f->path, v);
        }
    }
    return root;
}

/* ---- loading ------------------------------------------------------------------------------- */
static int load_file(struct cfg *c, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: %s; pass an existing file with --config (the TrainingJob "
                              "mounts it at %s)", path, strerror(errno), CFG_DEFAULT_FILE);
        return CFG_EBAD;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    rewind(fp);
    if (size > CFG_MAX_FILE) {
        fclose(fp);
        snprintf(err, errlen, "%s: %ld bytes, over the %d-byte limit for a config file", path,
                 size, CFG_MAX_FILE);
        return CFG_EBAD;
    }
    json_t *doc = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!doc) {
        snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
        return CFG_EBAD;
    }
    int rc = cfg_apply_json(c, doc, path, err, errlen);
    json_decref(doc);
    snprintf(c->config_path, sizeof(c->config_path), "%s", path);
    return rc;
}

static int load_env(struct cfg *c, char *err, size_t errlen)
{
    for (int i = 0; i < NFIELDS; i++) {
        char en[96];
        env_name(&fields[i], en, sizeof(en));
        const char *v = getenv(en);
        if (v && set_from_string(c, &fields[i], v, en, err, errlen))
            return CFG_EBAD;
    }
    return CFG_OK;
}

static bool is_bool_word(const char *v)
{
    static const char *const words[] = {"true", "false", "1", "0", "yes", "no"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (!strcmp(v, words[i]))
            return true;
    return false;
}

int cfg_load(struct cfg *c, int argc, char **argv, FILE *out, char *err, size_t errlen)
{
    static char names[NFIELDS][96];
    struct option opts[NFIELDS + 3];
    const char *config = NULL, *vals[NFIELDS];
    int rc = CFG_OK, o;

    cfg_defaults(c);
    for (int i = 0; i < NFIELDS; i++) {
        flag_name(&fields[i], names[i], sizeof(names[i]));
        opts[i] = (struct option){names[i],
                                  fields[i].type == F_BOOL ? optional_argument : required_argument,
                                  NULL, 1000 + i};
        vals[i] = NULL;
    }
    opts[NFIELDS] = (struct option){"config", required_argument, NULL, 'c'};
    opts[NFIELDS + 1] = (struct option){"help", no_argument, NULL, 'h'};
    opts[NFIELDS + 2] = (struct option){NULL, 0, NULL, 0};

    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
        if (o == 'h') {
            cfg_usage(out, argv[0]);
            rc = CFG_HELP;
            goto out;
        } else if (o == 'c') {
            config = optarg;
        } else if (o >= 1000 && o < 1000 + NFIELDS) {
            vals[o - 1000] = optarg ? optarg : "true";
            /* a boolean's value as the next word too (--autotune false), as the usage shows it */
            if (!optarg && fields[o - 1000].type == F_BOOL && optind < argc &&
                is_bool_word(argv[optind]))
                vals[o - 1000] = argv[optind++];
        } else {
            snprintf(err, errlen, "%s: %s %s; run %s --help for the flags", argv[0],
                     o == ':' ? "missing value for" : "unknown flag", argv[optind - 1], argv[0]);
            rc = CFG_EUSAGE;
            goto out;
        }
    }
    if (optind < argc) {
        snprintf(err, errlen, "%s: unexpected argument \"%s\"; settings are given as --flag value",
                 argv[0], argv[optind]);
        rc = CFG_EUSAGE;
        goto out;
    }
    if (config || access(CFG_DEFAULT_FILE, R_OK) == 0)
        if ((rc = load_file(c, config ? config : CFG_DEFAULT_FILE, err, errlen)))
            goto out;
    if ((rc = load_env(c, err, errlen)))
        goto out;
    for (int i = 0; i < NFIELDS; i++) {
        char src[128];
        snprintf(src, sizeof(src), "--%.100s", names[i]);
        if (vals[i] && (rc = set_from_string(c, &fields[i], vals[i], src, err, errlen)))
            goto out;
    }
    rc = cfg_validate(c, err, errlen);
out:
    optind = 1;
    return rc;
}
