/*
 * kube_yaml.c - YAML text to a Jansson value, for kubeconfigs.
 *
 * Walks libyaml's event stream with an explicit stack (no recursion, depth bounded by
 * YAML_MAX_DEPTH). Only the first document is read. Aliases are refused: a kubeconfig never
 * needs them and they are the classic way to make a small file expand into a huge tree.
 */
#include "operator/kube/kube_config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "common/xalloc.h"
#include "operator/kube/kube_err.h"

#define YAML_MAX_DEPTH 64

struct frame {
    json_t *node; /* borrowed: owned by its parent (or by root) */
    char *key;    /* pending mapping key, or NULL */
};

static json_t *scalar_value(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;

    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (n == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
         strcmp(v, "NULL") == 0))
        return json_null();
    return json_stringn(v, n); /* NULL when not UTF-8 or holding NUL: handled by the caller */
}

/* Puts v (stolen) under the top frame; 0 or -1. */
static int attach(struct frame *st, int depth, json_t **root, json_t *v)
{
    struct frame *top;

    if (depth == 0) {
        if (*root) {
            json_decref(v);
            return -1;
        }
        *root = v;
        return 0;
    }
    top = &st[depth - 1];
    if (json_is_array(top->node))
        return json_array_append_new(top->node, v);
    if (!top->key) {
        json_decref(v);
        return -1;
    }
    json_object_set_new(top->node, top->key, v);
    free(top->key);
    top->key = NULL;
    return 0;
}

int kube_yaml_to_json(const char *yaml, size_t len, json_t **out, char *err, size_t errlen)
{
    struct frame st[YAML_MAX_DEPTH];
    yaml_parser_t p;
    yaml_event_t ev;
    json_t *root = NULL;
    int depth = 0, done = 0, rc = OP_EPARSE;
    const char *problem = NULL;
    size_t line = 0, col = 0;

    memset(st, 0, sizeof(st));
    if (!yaml_parser_initialize(&p)) {
        snprintf(err, errlen, "cannot initialise the YAML parser");
        return OP_EPARSE;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    while (!done) {
        if (!yaml_parser_parse(&p, &ev)) {
            problem = p.problem ? p.problem : "malformed YAML";
            line = p.problem_mark.line + 1;
            col = p.problem_mark.column + 1;
            goto out;
        }
        line = ev.start_mark.line + 1;
        col = ev.start_mark.column + 1;
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT: {
            json_t *node = ev.type == YAML_MAPPING_START_EVENT ? json_object() : json_array();
            if (depth >= YAML_MAX_DEPTH) {
                json_decref(node);
                problem = "nested deeper than 64 levels";
                break;
            }
            if (depth > 0 && json_is_object(st[depth - 1].node) && !st[depth - 1].key) {
                json_decref(node);
                problem = "a mapping key must be a plain value, not a mapping or sequence";
                break;
            }
            if (attach(st, depth, &root, node)) {
                problem = "unexpected node";
                break;
            }
            st[depth].node = node;
            st[depth].key = NULL;
            depth++;
            break;
        }
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT:
            if (depth > 0) {
                depth--;
                free(st[depth].key);
                st[depth].key = NULL;
            }
            break;
        case YAML_SCALAR_EVENT:
            if (depth > 0 && json_is_object(st[depth - 1].node) && !st[depth - 1].key) {
                st[depth - 1].key =
                    xstrndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
            } else {
                json_t *v = scalar_value(&ev);
                if (!v)
                    problem = "a value is not valid UTF-8 or holds a NUL byte";
                else if (attach(st, depth, &root, v))
                    problem = "unexpected value";
            }
            break;
        case YAML_ALIAS_EVENT:
            problem = "aliases (*name) are not supported in a kubeconfig";
            break;
        case YAML_DOCUMENT_END_EVENT:
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (problem)
            goto out;
    }
    if (!root)
        root = json_null(); /* an empty file */
    *out = root;
    root = NULL;
    rc = 0;
out:
    if (rc)
        snprintf(err, errlen, "line %zu column %zu: %s", line, col, problem ? problem : "invalid");
    for (int i = 0; i < YAML_MAX_DEPTH; i++)
        free(st[i].key);
    json_decref(root);
    yaml_parser_delete(&p);
    return rc;
}
