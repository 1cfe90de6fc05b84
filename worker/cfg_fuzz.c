/*
 * cfg_fuzz.c - libFuzzer target for the worker's configuration parser (worker/cfg.c): the
 * TrainingJob's training object arrives as config.json, and every value may also come as text
 * (environment, flags, YAML-rendered strings), which takes the same text parsers.
 *
 * Input: the first byte chooses the form. 0x00-0x7f: the bytes are a JSON document, applied with
 * cfg_apply_json(). 0x80-0xff: byte 0 picks one setting (by its JSON path) and the rest is its
 * value as text, applied as {"<path>": "<text>"}. Checks: no crash or leak; a refusal has a
 * message; an accepted configuration that validates survives cfg_to_json -> cfg_apply_json
 * unchanged (so the report's `config` and the checkpoint's config hash describe what ran).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fuzz.h"
#include "worker/cfg.h"

/* The JSON paths of every setting, from the defaults' JSON: "epochs", "model.hidden", ... */
static int paths(char out[][64], int max)
{
    struct cfg d;
    const char *k, *k2;
    json_t *v, *v2;
    int n = 0;
    cfg_defaults(&d);
    json_t *j = cfg_to_json(&d);
    json_object_foreach(j, k, v)
    {
        if (json_is_object(v) && strcmp(k, "classWeights")) {
            json_object_foreach(v, k2, v2)
            {
                if (n < max)
                    snprintf(out[n++], 64, "%s.%s", k, k2);
            }
        } else if (n < max) {
            snprintf(out[n++], 64, "%s", k);
        }
    }
    json_decref(j);
    return n;
}

/* {"a": {"b": text}} for path "a.b" */
static json_t *doc_for(const char *path, const char *text, size_t len)
{
    json_t *val = json_stringn_nocheck(text, len), *doc = json_object();
    const char *dot = strchr(path, '.');
    if (!dot) {
        json_object_set_new(doc, path, val);
    } else {
        char top[64];
        snprintf(top, sizeof(top), "%.*s", (int)(dot - path), path);
        json_t *sub = json_object();
        json_object_set_new(sub, dot + 1, val);
        json_object_set_new(doc, top, sub);
    }
    return doc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char names[128][64];
    static int n_names;
    struct cfg c, d;
    char err[2048] = "";
    json_t *doc;

    if (!n_names)
        n_names = paths(names, 128);
    if (size < 1)
        return 0;
    if (data[0] < 0x80) {
        json_error_t je;
        doc = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
        if (!doc)
            return 0;
    } else {
        doc = doc_for(names[data[0] % n_names], (const char *)data + 1, size - 1);
    }
    cfg_defaults(&c);
    int rc = cfg_apply_json(&c, doc, "fuzz.json", err, sizeof(err));
    json_decref(doc);
    if (rc != CFG_OK) {
        FUZZ_CHECK(rc == CFG_EBAD && err[0] != '\0');
        return 0;
    }
    if (!c.train[0])
        snprintf(c.train, sizeof(c.train), "t.jsonl");
    if (cfg_validate(&c, err, sizeof(err)) != CFG_OK) {
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    json_t *a = cfg_to_json(&c);
    cfg_defaults(&d);
    rc = cfg_apply_json(&d, a, "round trip", err, sizeof(err));
    if (rc != CFG_OK)
        fprintf(stderr, "round trip refused: %s\n", err);
    FUZZ_CHECK(rc == CFG_OK);
    FUZZ_CHECK(cfg_validate(&d, err, sizeof(err)) == CFG_OK);
    json_t *b = cfg_to_json(&d);
    FUZZ_CHECK(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    return 0;
}
