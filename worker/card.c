/*
 * card.c - the model card (config.json) of a checkpoint: writing and checked parsing.
 */
#include "worker/card.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "worker/vocab.h"

void card_init(struct model_card *c)
{
    memset(c, 0, sizeof(*c));
    text_opts_default(&c->text);
    snprintf(c->vocab_file, sizeof(c->vocab_file), "%s", CARD_VOCAB_FILE);
    snprintf(c->text_field, sizeof(c->text_field), "text");
    snprintf(c->label_field, sizeof(c->label_field), "label");
    c->label_sep = ',';
    label_map_init(&c->labels);
}

void card_cleanup(struct model_card *c)
{
    label_map_cleanup(&c->labels);
}

char *card_dump(const struct model_card *c)
{
    json_t *labels = json_array();
    for (int i = 0; i < c->labels.n; i++)
        json_array_append_new(labels, json_string(label_map_name(&c->labels, i)));
    json_t *j = json_pack(
        "{s:s, s:{s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:i}, s:o,"
        " s:{s:s, s:b, s:b, s:b, s:b, s:b, s:I}, s:{s:s, s:s, s:s, s:b}}",
        "format", CARD_FORMAT,
        "model", "type", c->type, "layers", c->layers, "hidden", c->hidden, "heads", c->heads,
        "ffn", c->ffn, "maxSeqLen", c->max_seq_len, "pooling", c->pooling, "buckets", c->buckets,
        "vocabSize", c->vocab_size,
        "labels", labels,
        "tokenizer", "vocab", c->vocab_file, "lowercase", c->text.lowercase, "stripAccents",
        c->text.strip_accents, "splitCjk", c->text.split_cjk, "splitPunct", c->text.split_punct,
        "clsSep", c->cls_sep, "maxTokens", (json_int_t)c->text.max_tokens,
        "input", "text", c->text_field, "textPair", c->text_pair_field, "label", c->label_field,
        "labelIndex", c->label_index);
    if (j && c->multi_label) { /* written only when not the default: older readers read it */
        char sep[2] = {c->label_sep, '\0'};
        json_object_set_new(j, "task", json_string("multi-label-classification"));
        json_object_set_new(json_object_get(j, "input"), "labelSeparator", json_string(sep));
    } else if (j && c->regression) {
        json_object_set_new(j, "task", json_string("regression"));
    }
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!s)
        abort(); /* only out of memory, or a caller's string that is not UTF-8 */
    size_t n = strlen(s);
    char *out = realloc(s, n + 2);
    if (!out)
        abort();
    out[n] = '\n', out[n + 1] = '\0';
    return out;
}

#define FAIL(...) ((void)snprintf(err, errlen, __VA_ARGS__), -1)

static int get_int(json_t *obj, const char *sect, const char *key, long lo, long hi, int *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return FAIL("%s.%s: must be an integer in [%ld, %ld]", sect, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_bool(json_t *obj, const char *key, bool *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v) /* tokenizer switches may be left out: the defaults */
        return 0;
    if (!json_is_boolean(v))
        return FAIL("tokenizer.%s: must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* input.KEY: an optional field name (absent: keeps the default); empty only when may_be_empty. */
static int get_field(json_t *obj, const char *key, bool may_be_empty, char *out, size_t outlen,
                     char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_string(v) || json_string_length(v) >= outlen ||
        strlen(json_string_value(v)) != json_string_length(v) ||
        (!may_be_empty && json_string_length(v) == 0))
        return FAIL("input.%s: must be a %sstring of at most %zu bytes", key,
                    may_be_empty ? "" : "non-empty ", outlen - 1);
    snprintf(out, outlen, "%s", json_string_value(v));
    return 0;
}

static int get_enum(json_t *obj, const char *sect, const char *key, const char *a, const char *b,
                    char *out, size_t outlen, char *err, size_t errlen)
{
    const char *s = json_string_value(json_object_get(obj, key));
    if (!s || (strcmp(s, a) != 0 && strcmp(s, b) != 0))
        return FAIL("%s.%s: must be \"%s\" or \"%s\"", sect, key, a, b);
    snprintf(out, outlen, "%s", s);
    return 0;
}

int card_parse(const char *js, size_t n, struct model_card *c, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(js, n, JSON_REJECT_DUPLICATES, &je), *m, *t, *l;
    int rc = -1, mt = 0;

    if (!root) {
        (void)FAIL("not valid JSON (line %d: %s)", je.line, je.text);
        goto out;
    }
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!json_is_object(root) || !fmt || strcmp(fmt, CARD_FORMAT) != 0) {
        (void)FAIL("format: must be \"%s\" (a card from another program or a newer Gantry?)",
             CARD_FORMAT);
        goto out;
    }
    if (!json_is_object(m = json_object_get(root, "model"))) {
        (void)FAIL("model: must be an object");
        goto out;
    }
    if (get_enum(m, "model", "type", "transformer", "ngram", c->type, sizeof(c->type), err,
                 errlen) ||
        get_enum(m, "model", "pooling", "mean", "cls", c->pooling, sizeof(c->pooling), err,
                 errlen) ||
        get_int(m, "model", "layers", 0, 1024, &c->layers, err, errlen) ||
        get_int(m, "model", "hidden", 1, 1 << 16, &c->hidden, err, errlen) ||
        get_int(m, "model", "heads", 0, 1024, &c->heads, err, errlen) ||
        get_int(m, "model", "ffn", 0, 1 << 20, &c->ffn, err, errlen) ||
        get_int(m, "model", "maxSeqLen", 1, 1 << 20, &c->max_seq_len, err, errlen) ||
        get_int(m, "model", "buckets", 0, 1 << 26, &c->buckets, err, errlen) ||
        get_int(m, "model", "vocabSize", 5, VOCAB_MAX_SIZE, &c->vocab_size, err, errlen))
        goto out;
    const json_t *task = json_object_get(root, "task");
    const char *tv = json_string_value(task);
    if (task && !(tv && (!strcmp(tv, "text-classification") ||
                         !strcmp(tv, "multi-label-classification") || !strcmp(tv, "regression")))) {
        (void)FAIL("task: must be \"text-classification\", \"multi-label-classification\" or "
                   "\"regression\"");
        goto out;
    }
    c->multi_label = tv && !strcmp(tv, "multi-label-classification");
    c->regression = tv && !strcmp(tv, "regression");
    l = json_object_get(root, "labels");
    if (c->regression && !(json_is_array(l) && json_array_size(l) == 0)) {
        (void)FAIL("labels: must be [] for a regression model (it has one output, no classes)");
        goto out;
    }
    if (!c->regression && (!json_is_array(l) || json_array_size(l) < 2 ||
                           json_array_size(l) > DATASET_MAX_LABELS)) {
        (void)FAIL("labels: must be an array of 2 to %d class names", DATASET_MAX_LABELS);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(l); i++) {
        json_t *v = json_array_get(l, i);
        const char *name = json_string_value(v);
        if (!name || label_map_add(&c->labels, name, json_string_length(v)) != (int)i ||
            strlen(name) != json_string_length(v)) {
            (void)FAIL("labels[%zu]: must be a distinct, non-empty string of at most %d bytes", i,
                 DATASET_MAX_LABEL_BYTES);
            goto out;
        }
    }
    c->labels.frozen = true;
    if (!json_is_object(t = json_object_get(root, "tokenizer"))) {
        (void)FAIL("tokenizer: must be an object");
        goto out;
    }
    const char *vf = json_string_value(json_object_get(t, "vocab"));
    if (!vf || !*vf || strlen(vf) >= sizeof(c->vocab_file) || strchr(vf, '/')) {
        (void)FAIL("tokenizer.vocab: must name the checkpoint's vocab file, e.g. \"%s\"",
             CARD_VOCAB_FILE);
        goto out;
    }
    snprintf(c->vocab_file, sizeof(c->vocab_file), "%s", vf);
    if (get_bool(t, "lowercase", &c->text.lowercase, err, errlen) ||
        get_bool(t, "stripAccents", &c->text.strip_accents, err, errlen) ||
        get_bool(t, "splitCjk", &c->text.split_cjk, err, errlen) ||
        get_bool(t, "splitPunct", &c->text.split_punct, err, errlen) ||
        get_bool(t, "clsSep", &c->cls_sep, err, errlen) ||
        get_int(t, "tokenizer", "maxTokens", 0, 1 << 24, &mt, err, errlen))
        goto out;
    c->text.max_tokens = (size_t)mt;
    c->text.stop = NULL;
    /* "input" is absent from cards written before text pairs: the defaults */
    if ((t = json_object_get(root, "input")) && !json_is_object(t)) {
        (void)FAIL("input: must be an object");
        goto out;
    }
    if (t && (get_field(t, "text", false, c->text_field, sizeof(c->text_field), err, errlen) ||
              get_field(t, "textPair", true, c->text_pair_field, sizeof(c->text_pair_field), err,
                        errlen) ||
              get_field(t, "label", false, c->label_field, sizeof(c->label_field), err, errlen)))
        goto out;
    const json_t *li = json_object_get(t, "labelIndex");
    if (li && !json_is_boolean(li)) {
        (void)FAIL("input.labelIndex: must be true or false");
        goto out;
    }
    c->label_index = json_is_true(li);
    const json_t *sep = json_object_get(t, "labelSeparator");
    if (sep && (!json_is_string(sep) || json_string_length(sep) != 1 ||
                strchr("\t\n\r\"", json_string_value(sep)[0]))) {
        (void)FAIL("input.labelSeparator: must be one character (not a tab, newline or quote)");
        goto out;
    }
    if (sep)
        c->label_sep = json_string_value(sep)[0];
    rc = 0;
out:
    json_decref(root);
    return rc;
}
