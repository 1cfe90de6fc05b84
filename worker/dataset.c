/*
 * dataset.c - JSONL/TSV readers, label maps and fixed-length encoding (see dataset.h).
 *
 * Lines are read through a fixed 64 KiB window into a buffer bounded by max_line, so a file with
 * a 10 GB line costs max_line bytes of memory, not 10 GB: the rest of that line is skipped.
 */
#include "worker/dataset.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/xalloc.h"

/* Bytes read per fread(); the fuzz build makes it tiny so lines straddle reads. */
#ifndef DATASET_READ_CHUNK
#define DATASET_READ_CHUNK 65536
#endif

/* ---------------------------------------------------------------------------------------------
 * Label maps
 */

void label_map_init(struct label_map *m)
{
    memset(m, 0, sizeof(*m));
}

void label_map_cleanup(struct label_map *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->names[i]);
    free(m->names);
    label_map_init(m);
}

int label_map_find(const struct label_map *m, const char *name, size_t len)
{
    for (int i = 0; i < m->n; i++)
        if (strlen(m->names[i]) == len && memcmp(m->names[i], name, len) == 0)
            return i;
    return -1;
}

int label_map_find_or_index(const struct label_map *m, const char *name, size_t len)
{
    int i = label_map_find(m, name, len), k = 0;
    size_t d = 0;

    if (i >= 0 || len == 0 || len > 4 || (name[0] == '0' && len > 1))
        return i;
    for (; d < len && name[d] >= '0' && name[d] <= '9'; d++)
        k = 10 * k + (name[d] - '0');
    return d == len && k < m->n ? k : -1;
}

int label_map_add(struct label_map *m, const char *name, size_t len)
{
    int i = label_map_find(m, name, len);

    if (i >= 0)
        return i;
    if (m->frozen || m->n >= DATASET_MAX_LABELS || len == 0 || len > DATASET_MAX_LABEL_BYTES ||
        memchr(name, '\0', len))
        return -1;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 8;
        m->names = xrealloc(m->names, (size_t)m->cap * sizeof(*m->names));
    }
    m->names[m->n] = xstrndup(name, len);
    return m->n++;
}

const char *label_map_name(const struct label_map *m, int i)
{
    return i >= 0 && i < m->n ? m->names[i] : NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void label_map_sort(struct label_map *m, int *remap)
{
    char **old = xcalloc(m->n ? (size_t)m->n : 1, sizeof(*old));

    memcpy(old, m->names, (size_t)m->n * sizeof(*old));
    qsort(m->names, (size_t)m->n, sizeof(*m->names), cmp_name);
    if (remap)
        for (int i = 0; i < m->n; i++)
            for (int j = 0; j < m->n; j++)
                if (old[i] == m->names[j])
                    remap[i] = j;
    free(old);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void dataset_remap_labels(struct dataset *ds, const int *remap)
{
    for (size_t i = 0; i < ds->n; i++) {
        struct dataset_example *e = &ds->ex[i];
        if (!e->multi) {
            e->label = e->label >= 0 ? remap[e->label] : e->label;
            continue;
        }
        for (int32_t k = 0; k < e->n_multi; k++)
            e->multi[k] = remap[e->multi[k]];
        qsort(e->multi, (size_t)e->n_multi, sizeof(*e->multi), cmp_i32);
        e->label = e->n_multi ? e->multi[0] : -1;
    }
}

static void push_example(struct dataset *ds, const struct dataset_example *ex);

size_t dataset_split(struct dataset *ds, double fraction, uint64_t seed, struct dataset *out)
{
    size_t n = ds->n, moved = 0, kept = 0;
    int32_t maxl = -1;
    if (n == 0 || !(fraction > 0.0) || fraction >= 1.0)
        return 0;
    for (size_t i = 0; i < n; i++)
        maxl = ds->ex[i].label > maxl ? ds->ex[i].label : maxl;
    bool *hold = xcalloc(n, sizeof(bool));
    size_t *of = xmallocarray(n, sizeof(size_t));
    for (int32_t l = -1; l <= maxl; l++) { /* per label: a seeded partial Fisher-Yates (-1:
                                            * multi-label examples without a label) */
        size_t k = 0;
        uint64_t st = seed ^ (0x5851F42D4C957F2DULL * (uint64_t)(l + 1));
        for (size_t i = 0; i < n; i++)
            if (ds->ex[i].label == l)
                of[k++] = i;
        size_t take = (size_t)((double)k * fraction + 0.5); /* rounded */
        for (size_t j = 0; j < take; j++) {
            size_t r = j + (size_t)(hash_splitmix64(&st) % (uint64_t)(k - j));
            size_t t = of[j];
            of[j] = of[r], of[r] = t;
            hold[of[j]] = true;
        }
    }
    for (size_t i = 0; i < n; i++) { /* both sides keep the file order */
        if (hold[i]) {
            push_example(out, &ds->ex[i]);
            moved++;
        } else {
            ds->ex[kept++] = ds->ex[i];
        }
    }
    ds->n = kept;
    free(hold), free(of);
    return moved;
}

/* ---------------------------------------------------------------------------------------------
 * Line parsing
 */

void dataset_opts_default(struct dataset_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->max_line = DATASET_DEFAULT_MAX_LINE;
}

/* Offset of the first invalid UTF-8 byte (or NUL) in s[0..n), or n when valid. */
static size_t utf8_check(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        size_t k = text_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp <= 0)
            return i;
        i += k;
    }
    return n;
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static int set_label(const char *s, size_t n, char label[DATASET_MAX_LABEL_BYTES + 1], char *why,
                     size_t whylen)
{
    if (n == 0) {
        snprintf(why, whylen, "empty label");
        return -1;
    }
    if (n > DATASET_MAX_LABEL_BYTES) {
        snprintf(why, whylen, "label longer than %d bytes", DATASET_MAX_LABEL_BYTES);
        return -1;
    }
    memcpy(label, s, n);
    label[n] = '\0';
    return 0;
}

/* Multi-label: appends one name (spaces around it trimmed; empty: nothing) to out->multi. */
static int add_name(struct dataset_line *out, const char *s, size_t n, char *why, size_t whylen,
                    size_t *used)
{
    while (n > 0 && (s[0] == ' ' || s[0] == '\t'))
        s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    if (n == 0)
        return 0;
    if (n > DATASET_MAX_LABEL_BYTES || memchr(s, '\0', n)) {
        snprintf(why, whylen, n > DATASET_MAX_LABEL_BYTES ? "label longer than %d bytes"
                                                          : "NUL byte in a label",
                 DATASET_MAX_LABEL_BYTES);
        return -1;
    }
    if (out->n_multi >= DATASET_MAX_LABELS) {
        snprintf(why, whylen, "more than %d labels", DATASET_MAX_LABELS);
        return -1;
    }
    out->multi = xrealloc(out->multi, *used + n + 1);
    memcpy(out->multi + *used, s, n);
    out->multi[*used + n] = '\0';
    *used += n + 1;
    out->n_multi++;
    return 0;
}

/* Multi-label: the names in s[0..n), separated by o->label_sep. */
static int split_names(const struct dataset_opts *o, struct dataset_line *out, const char *s,
                       size_t n, char *why, size_t whylen, size_t *used)
{
    char sep = o->label_sep ? o->label_sep : ',';
    while (1) {
        const char *e = memchr(s, sep, n);
        size_t k = e ? (size_t)(e - s) : n;
        if (add_name(out, s, k, why, whylen, used))
            return -1;
        if (!e)
            return 0;
        s += k + 1, n -= k + 1;
    }
}

static void line_free_multi(struct dataset_line *out)
{
    free(out->multi);
    out->multi = NULL, out->n_multi = 0;
}

/* Multi-label: a field of names s[0..n) (TSV, CSV, a JSONL string) as out's labels; on error
 * out holds none. */
static int set_names(const struct dataset_opts *o, struct dataset_line *out, const char *s,
                     size_t n, char *why, size_t whylen)
{
    size_t used = 0;
    if (split_names(o, out, s, n, why, whylen, &used)) {
        line_free_multi(out);
        return -1;
    }
    out->labelled = true;
    return 0;
}

/* Multi-label JSONL: an array of names or integers, or a string of names; on error out holds
 * none. */
static int json_names(const struct dataset_opts *o, json_t *jl, const char *lf,
                      struct dataset_line *out, char *why, size_t whylen)
{
    size_t used = 0, i;
    json_t *v;
    char num[32];

    if (json_is_string(jl))
        return set_names(o, out, json_string_value(jl), json_string_length(jl), why, whylen);
    if (!json_is_array(jl)) {
        snprintf(why, whylen, "%s field \"%s\"; want a list of labels ([\"a\", \"b\"] or "
                 "\"a,b\")", jl ? "non-list" : "missing", lf);
        return -1;
    }
    json_array_foreach(jl, i, v) {
        int rc;
        if (json_is_string(v)) {
            rc = add_name(out, json_string_value(v), json_string_length(v), why, whylen, &used);
        } else if (json_is_integer(v)) {
            snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            rc = add_name(out, num, strlen(num), why, whylen, &used);
        } else {
            snprintf(why, whylen, "field \"%s\": item %zu is not a string or an integer", lf, i);
            rc = -1;
        }
        if (rc) {
            line_free_multi(out);
            return -1;
        }
    }
    out->labelled = true;
    return 0;
}

static int parse_jsonl(const struct dataset_opts *o, const char *line, size_t len,
                       struct dataset_line *out, char *why, size_t whylen)
{
    const char *tf = o && o->text_field ? o->text_field : "text";
    const char *lf = o && o->label_field ? o->label_field : "label";
    const char *pf = o ? o->pair_field : NULL;
    char *label = out->label;
    json_error_t jerr;
    json_t *doc, *jt, *jl, *jp = NULL;
    char num[32];
    int rc = -1;

    doc = json_loadb(line, len, 0, &jerr);
    if (!doc) {
        snprintf(why, whylen, "bad JSON at column %d: %s", jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(doc)) {
        if (pf)
            snprintf(why, whylen, "not a JSON object; want {\"%s\": ..., \"%s\": ..., "
                     "\"%s\": ...}", tf, pf, lf);
        else
            snprintf(why, whylen, "not a JSON object; want {\"%s\": ..., \"%s\": ...}", tf, lf);
        goto out;
    }
    jt = json_object_get(doc, tf);
    jl = json_object_get(doc, lf);
    if (!jt || !json_is_string(jt)) {
        snprintf(why, whylen, "%s field \"%s\"", jt ? "non-string" : "missing", tf);
        goto out;
    }
    if (pf && !json_is_string(jp = json_object_get(doc, pf))) {
        snprintf(why, whylen, "%s field \"%s\" (the pair's second text)",
                 jp ? "non-string" : "missing", pf);
        goto out;
    }
    if (o && o->label_optional && (!jl || json_is_null(jl) ||
                                   (json_is_string(jl) && json_string_length(jl) == 0))) {
        label[0] = '\0';
    } else if (o && o->multi_label) {
        label[0] = '\0';
        if (json_names(o, jl, lf, out, why, whylen))
            goto out;
    } else if (json_is_string(jl)) {
        if (set_label(json_string_value(jl), json_string_length(jl), label, why, whylen))
            goto out;
    } else if (json_is_integer(jl)) {
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(jl));
        if (set_label(num, strlen(num), label, why, whylen))
            goto out;
    } else if (o && o->regression && json_is_real(jl)) {
        snprintf(num, sizeof(num), "%.17g", json_real_value(jl));
        if (set_label(num, strlen(num), label, why, whylen))
            goto out;
    } else {
        snprintf(why, whylen, "%s field \"%s\"", jl ? "non-string" : "missing", lf);
        goto out;
    }
    out->text_len = json_string_length(jt);
    out->text = xstrndup(json_string_value(jt), out->text_len);
    if (jp) {
        out->pair_len = json_string_length(jp);
        out->pair = xstrndup(json_string_value(jp), out->pair_len);
    }
    rc = 0;
out:
    json_decref(doc);
    return rc;
}

/* Decodes \t \n \r \\ in s[0..n) into a new string; other backslashes stay as they are. */
static char *tsv_unescape(const char *s, size_t n, size_t *out_len)
{
    char *out = xmalloc(n + 1);
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[i + 1];
            char d = c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == '\\' ? '\\' : 0;
            if (d) {
                out[k++] = d;
                i++;
                continue;
            }
        }
        out[k++] = s[i];
    }
    out[k] = '\0';
    *out_len = k;
    return out;
}

/* The last tab in line[0..len), or NULL. */
static const char *last_tab(const char *line, size_t len)
{
    for (size_t i = len; i > 0; i--)
        if (line[i - 1] == '\t')
            return line + i - 1;
    return NULL;
}

static int parse_tsv(const struct dataset_opts *o, const char *line, size_t len, bool pairs,
                     struct dataset_line *out, char *why, size_t whylen)
{
    const char *tab = last_tab(line, len), *ptab = NULL;
    size_t tlen, llen;

    if (tab && pairs)
        ptab = last_tab(line, (size_t)(tab - line));
    if (!tab || (pairs && !ptab)) {
        snprintf(why, whylen, "%s; want %s", tab ? "one tab" : "no tab",
                 pairs ? "text<TAB>pair<TAB>label" : "text<TAB>label");
        return -1;
    }
    tlen = (size_t)((pairs ? ptab : tab) - line);
    llen = len - (size_t)(tab - line) - 1;
    while (llen > 0 && tab[llen] == ' ')
        llen--; /* trailing spaces after the label */
    if (tlen == 4 && memcmp(line, "text", 4) == 0 && llen == 5 && memcmp(tab + 1, "label", 5) == 0)
        return 1; /* header */
    if (o && o->multi_label) {
        if (set_names(o, out, tab + 1, llen, why, whylen))
            return -1;
    } else if (set_label(tab + 1, llen, out->label, why, whylen)) {
        return -1;
    }
    out->text = tsv_unescape(line, tlen, &out->text_len);
    if (pairs)
        out->pair = tsv_unescape(ptab + 1, (size_t)(tab - ptab - 1), &out->pair_len);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * CSV (RFC 4180)
 */

/* One record's fields, decoded (quotes gone, "" made "): field i is buf + off[i], len[i] bytes,
 * NUL-terminated. */
struct csv_fields {
    char *buf;
    size_t *off, *len;
    size_t n, cap;
};

static void csv_fields_free(struct csv_fields *f)
{
    free(f->buf), free(f->off), free(f->len);
    memset(f, 0, sizeof(*f));
}

/* Splits rec[0..len) into f (freed by the caller whatever the result). 0, or -1 with why. */
static int csv_split(const char *rec, size_t len, struct csv_fields *f, char *why, size_t whylen)
{
    size_t i = 0, k = 0;

    memset(f, 0, sizeof(*f));
    f->buf = xmalloc(2 * len + 2); /* every byte, and a NUL per field (at most len + 1) */
    for (;;) {
        if (f->n == f->cap) {
            f->cap = f->cap ? 2 * f->cap : 8;
            f->off = xrealloc(f->off, f->cap * sizeof(*f->off));
            f->len = xrealloc(f->len, f->cap * sizeof(*f->len));
        }
        f->off[f->n] = k;
        if (i < len && rec[i] == '"') {
            for (i++;; i++) {
                if (i >= len) {
                    snprintf(why, whylen, "field %zu: its opening quote is never closed",
                             f->n + 1);
                    return -1;
                }
                if (rec[i] == '"' && i + 1 < len && rec[i + 1] == '"')
                    f->buf[k++] = rec[i++]; /* "" is one quote */
                else if (rec[i] == '"')
                    break;
                else
                    f->buf[k++] = rec[i];
            }
            if (++i < len && rec[i] != ',') {
                snprintf(why, whylen, "field %zu: text after its closing quote (a quote inside a "
                         "quoted field is written \"\")", f->n + 1);
                return -1;
            }
        } else {
            while (i < len && rec[i] != ',')
                f->buf[k++] = rec[i++];
        }
        f->len[f->n] = k - f->off[f->n];
        f->n++;
        f->buf[k++] = '\0';
        if (i >= len)
            return 0;
        i++; /* the comma */
    }
}

void dataset_csv_scan(struct dataset_csv_scan *st, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (st->pending) { /* a quote inside a quoted field: "" or the field's end */
            st->pending = false;
            if (c == '"')
                continue;
            st->quoted = false;
        }
        if (st->quoted) {
            st->pending = c == '"';
            continue;
        }
        st->quoted = c == '"' && st->start;
        st->start = c == ',';
    }
}

bool dataset_csv_open(const struct dataset_csv_scan *st)
{
    return st->quoted && !st->pending;
}

/* Column name -> index in the header's fields, or -1. */
static int csv_column(const struct csv_fields *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->buf + f->off[i], name) == 0)
            return (int)i;
    return -1;
}

int dataset_csv_header(struct dataset_csv *c, const struct dataset_opts *o, const char *rec,
                       size_t len, char *why, size_t whylen)
{
    const char *tf = o && o->text_field ? o->text_field : "text";
    const char *lf = o && o->label_field ? o->label_field : "label";
    const char *pf = o ? o->pair_field : NULL, *missing = NULL;
    struct csv_fields f;
    int rc = -1;

    if (len > 0 && rec[len - 1] == '\r')
        len--;
    if (csv_split(rec, len, &f, why, whylen) == 0) {
        c->text = csv_column(&f, tf);
        c->pair = pf ? csv_column(&f, pf) : -1;
        c->label = csv_column(&f, lf);
        missing = c->text < 0 ? tf : pf && c->pair < 0 ? pf
                  : c->label < 0 && !(o && o->label_optional) ? lf : NULL;
        if (missing) {
            int n = snprintf(why, whylen, "the header has no column \"%s\" (set data.textField, "
                             "textPairField or labelField to its columns:", missing);
            for (size_t i = 0; i < f.n && n > 0 && (size_t)n < whylen; i++)
                n += snprintf(why + n, whylen - (size_t)n, "%s \"%.40s\"", i ? "," : "",
                              f.buf + f.off[i]);
            if (n > 0 && (size_t)n < whylen)
                snprintf(why + n, whylen - (size_t)n, ")");
        } else {
            rc = 0;
        }
    }
    csv_fields_free(&f);
    return rc;
}

int dataset_csv_record(const struct dataset_csv *c, const struct dataset_opts *o, const char *rec,
                       size_t len, struct dataset_line *out, char *why, size_t whylen)
{
    struct csv_fields f;
    int need = c->text, rc = -1;
    size_t bad;

    memset(out, 0, sizeof(*out));
    if (len > 0 && rec[len - 1] == '\r')
        len--;
    if (is_blank(rec, len))
        return 1;
    if ((bad = utf8_check(rec, len)) < len) {
        snprintf(why, whylen, "%s at byte %zu", rec[bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
        return -1;
    }
    need = c->pair > need ? c->pair : need;
    need = c->label > need ? c->label : need;
    if (csv_split(rec, len, &f, why, whylen))
        goto out;
    if (f.n <= (size_t)need) {
        snprintf(why, whylen, "%zu fields; the header's columns need %d", f.n, need + 1);
        goto out;
    }
    if (c->label >= 0 && o && o->multi_label) {
        if (set_names(o, out, f.buf + f.off[c->label], f.len[c->label], why, whylen))
            goto out;
    } else if (c->label >= 0 && (f.len[c->label] > 0 || !(o && o->label_optional)) &&
               set_label(f.buf + f.off[c->label], f.len[c->label], out->label, why, whylen)) {
        goto out;
    }
    out->text_len = f.len[c->text];
    out->text = xstrndup(f.buf + f.off[c->text], out->text_len);
    if (c->pair >= 0) {
        out->pair_len = f.len[c->pair];
        out->pair = xstrndup(f.buf + f.off[c->pair], out->pair_len);
    }
    rc = 0;
out:
    csv_fields_free(&f);
    return rc;
}

int dataset_parse_line(enum dataset_format fmt, const struct dataset_opts *o, const char *line,
                       size_t len, struct dataset_line *out, char *why, size_t whylen)
{
    size_t bad;

    memset(out, 0, sizeof(*out));
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (is_blank(line, len))
        return 1;
    bad = utf8_check(line, len);
    if (bad < len) {
        snprintf(why, whylen, "%s at byte %zu", line[bad] ? "invalid UTF-8" : "NUL byte", bad + 1);
        return -1;
    }
    switch (fmt) {
    case DATASET_JSONL:
        return parse_jsonl(o, line, len, out, why, whylen);
    case DATASET_TSV:
        return parse_tsv(o, line, len, o && o->pair_field, out, why, whylen);
    case DATASET_CSV:
        snprintf(why, whylen, "CSV records are read with their file's header "
                              "(dataset_csv_header, dataset_csv_record)");
        return -1;
    default:
        snprintf(why, whylen, "unknown format %d", (int)fmt);
        return -1;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Reading files
 */

void dataset_init(struct dataset *ds)
{
    memset(ds, 0, sizeof(*ds));
}

void dataset_cleanup(struct dataset *ds)
{
    for (size_t i = 0; i < ds->n; i++)
        free(ds->ex[i].text), free(ds->ex[i].pair), free(ds->ex[i].multi);
    free(ds->ex);
    dataset_init(ds);
}

static enum dataset_format format_of(const char *path)
{
    size_t n = strlen(path);
    if (n > 3 && strcmp(path + n - 3, ".gz") == 0)
        n -= 3; /* train.tsv.gz is TSV */
    if ((n >= 4 && strncmp(path + n - 4, ".tsv", 4) == 0) ||
        (n >= 4 && strncmp(path + n - 4, ".txt", 4) == 0))
        return DATASET_TSV;
    if (n >= 4 && strncmp(path + n - 4, ".csv", 4) == 0)
        return DATASET_CSV;
    return DATASET_JSONL;
}

/* Appends ex (its strings now owned by ds). */
static void push_example(struct dataset *ds, const struct dataset_example *ex)
{
    if (ds->n == ds->cap) {
        ds->cap = ds->cap ? ds->cap * 2 : 256;
        ds->ex = xrealloc(ds->ex, ds->cap * sizeof(*ds->ex));
    }
    ds->ex[ds->n++] = *ex;
}

struct reader {
    const char *path;
    const struct dataset_opts *o;
    enum dataset_format fmt;
    struct dataset *ds;
    struct label_map *labels;
    size_t lineno;   /* physical lines handled */
    size_t reported;
    char *err;
    size_t errlen;
    struct dataset_csv csv; /* CSV: the columns, once the header was read */
    bool have_header;
};

static int report_bad(struct reader *r, size_t at, const char *why);

/* The label index of name, added when the map is open; -1 with why set. */
static int label_index(struct reader *r, const char *name, char *why, size_t whylen)
{
    int li = label_map_add(r->labels, name, strlen(name));
    if (li < 0 && r->o->label_index)
        li = label_map_find_or_index(r->labels, name, strlen(name));
    if (li < 0)
        snprintf(why, whylen, "%s label \"%.64s\"%s",
                 r->labels->frozen ? "unknown" : "too many labels, at", name,
                 !r->labels->frozen ? ""
                 : r->o->label_index ? " (not in data.labelNames, nor the index of one)"
                                     : " (not in the training data's label set)");
    return li;
}

/* A multi-label example: its names mapped to a sorted set without repeats. */
static int handle_multi(struct reader *r, struct dataset_line *dl, size_t at)
{
    int32_t *set = xmallocarray(dl->n_multi ? (size_t)dl->n_multi : 1, sizeof(int32_t));
    const char *name = dl->multi;
    int32_t n = 0;
    char why[512];

    for (int k = 0; k < dl->n_multi; k++, name += strlen(name) + 1) {
        int li = label_index(r, name, why, sizeof(why));
        if (li < 0) {
            free(set), free(dl->text), free(dl->pair), free(dl->multi);
            return report_bad(r, at, why);
        }
        set[n++] = li;
    }
    free(dl->multi);
    qsort(set, (size_t)n, sizeof(*set), cmp_i32);
    int32_t m = 0;
    for (int32_t k = 0; k < n; k++) /* a label named twice counts once */
        if (m == 0 || set[k] != set[m - 1])
            set[m++] = set[k];
    push_example(r->ds, &(struct dataset_example){.text = dl->text, .text_len = dl->text_len,
                                                  .pair = dl->pair, .pair_len = dl->pair_len,
                                                  .label = m ? set[0] : -1, .multi = set,
                                                  .n_multi = m});
    return 0;
}

/* Handles one complete line, or a CSV record of 1 + extra lines (overlong: the line was longer
 * than max_line and cut). Returns 0 to go on, -1 to stop (strict mode, or a CSV header without
 * the columns needed). */
static int handle_line(struct reader *r, const char *line, size_t len, bool overlong,
                       size_t extra)
{
    struct dataset_line dl;
    char why[512];
    size_t at = r->lineno + 1; /* the record's first line */
    int rc, li;

    r->lineno += 1 + extra;
    r->ds->n_lines += 1 + extra;
    if (r->fmt == DATASET_CSV && !r->have_header && !overlong && !is_blank(line, len)) {
        if (dataset_csv_header(&r->csv, r->o, line, len, why, sizeof(why))) {
            snprintf(r->err, r->errlen, "%s:%zu: %s", r->path, at, why);
            return -1;
        }
        r->have_header = true;
        return 0;
    }
    if (overlong) {
        snprintf(why, sizeof(why),
                 "line longer than %zu bytes (max_line); split the record or "
                 "raise the limit",
                 r->o->max_line);
        goto bad;
    }
    rc = r->fmt == DATASET_CSV ? dataset_csv_record(&r->csv, r->o, line, len, &dl, why, sizeof(why))
                               : dataset_parse_line(r->fmt, r->o, line, len, &dl, why, sizeof(why));
    if (rc == 1)
        return 0;
    if (rc < 0)
        goto bad;
    if (r->o->multi_label)
        return handle_multi(r, &dl, at);
    if (r->o->regression) {
        float t;
        if (dataset_label_number(dl.label, &t)) {
            snprintf(why, sizeof(why), "label \"%.64s\" is not a finite number (regression)",
                     dl.label);
            free(dl.text), free(dl.pair);
            goto bad;
        }
        push_example(r->ds, &(struct dataset_example){.text = dl.text, .text_len = dl.text_len,
                                                      .pair = dl.pair, .pair_len = dl.pair_len,
                                                      .target = t});
        return 0;
    }
    if ((li = label_index(r, dl.label, why, sizeof(why))) < 0) {
        free(dl.text), free(dl.pair);
        goto bad;
    }
    push_example(r->ds, &(struct dataset_example){.text = dl.text, .text_len = dl.text_len,
                                                  .pair = dl.pair, .pair_len = dl.pair_len,
                                                  .label = li});
    return 0;
bad:
    return report_bad(r, at, why);
}

/* A malformed record at line `at`: fatal in strict mode (-1), else counted and reported. */
static int report_bad(struct reader *r, size_t at, const char *why)
{
    r->ds->n_malformed++;
    if (r->o->strict) {
        snprintf(r->err, r->errlen, "%s:%zu: %s", r->path, at, why);
        return -1;
    }
    if (!r->o->quiet && r->reported < DATASET_MAX_REPORTED)
        fprintf(stderr, "%s:%zu: %s; skipped\n", r->path, at, why);
    r->reported++;
    return 0;
}

/* One file, plain or gzip-compressed (zlib reads either). */
static int load_file(struct dataset *ds, const char *path, const struct dataset_opts *o,
                     struct label_map *labels, char *err, size_t errlen)
{
    struct dataset_opts defaults;
    struct reader r;
    struct buf line;
    struct dataset_csv_scan cs = {.start = true};
    char *chunk = NULL;
    bool overlong = false, first = true;
    size_t before, extra = 0;
    int got, zerr;
    gzFile f;
    int rc = -1;

    if (!o) {
        dataset_opts_default(&defaults);
        o = &defaults;
    } else if (o->max_line == 0) {
        defaults = *o;
        defaults.max_line = DATASET_DEFAULT_MAX_LINE;
        o = &defaults;
    }
    memset(&r, 0, sizeof(r));
    r.path = path;
    r.o = o;
    r.fmt = o->format != DATASET_AUTO ? o->format : format_of(path);
    r.ds = ds;
    r.labels = labels;
    r.err = err;
    r.errlen = errlen;
    before = ds->n_malformed;
    buf_init(&line, o->max_line);
    errno = 0;
    f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, errno ? strerror(errno) : "out of memory");
        buf_cleanup(&line);
        return -1;
    }
    chunk = xmalloc(DATASET_READ_CHUNK);
    while ((got = gzread(f, chunk, DATASET_READ_CHUNK)) > 0) {
        const char *p = chunk, *end = chunk + got;
        if (first && got >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
            p += 3; /* a UTF-8 byte order mark (spreadsheets write one) */
        first = false;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (!overlong && buf_append(&line, p, n))
                overlong = true;
            if (r.fmt == DATASET_CSV)
                dataset_csv_scan(&cs, p, n);
            p += n;
            if (!nl)
                break;
            p++;
            if (r.fmt == DATASET_CSV && dataset_csv_open(&cs)) { /* a quoted newline */
                if (!overlong && buf_append(&line, "\n", 1))
                    overlong = true;
                dataset_csv_scan(&cs, "\n", 1);
                extra++;
                continue;
            }
            if (handle_line(&r, buf_ptr(&line), buf_len(&line), overlong, extra))
                goto out;
            buf_reset(&line);
            overlong = false, extra = 0, cs = (struct dataset_csv_scan){.start = true};
        }
    }
    const char *zmsg = gzerror(f, &zerr);
    if (got < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
        snprintf(err, errlen, "%s: read error: %s%s", path,
                 zerr == Z_ERRNO ? strerror(errno) : zmsg,
                 zerr == Z_DATA_ERROR || zerr == Z_BUF_ERROR ? " (a damaged or truncated gzip "
                                                               "file?)" : "");
        goto out;
    }
    if ((buf_len(&line) > 0 || overlong || extra) &&
        handle_line(&r, buf_ptr(&line), buf_len(&line), overlong, extra))
        goto out; /* last line without a newline */
    if (!o->quiet && ds->n_malformed > before)
        fprintf(stderr, "%s: skipped %zu malformed of %zu lines\n", path, ds->n_malformed - before,
                r.lineno);
    rc = 0;
out:
    free(chunk);
    gzclose(f);
    buf_cleanup(&line);
    return rc;
}

int dataset_load(struct dataset *ds, const char *path, const struct dataset_opts *o,
                 struct label_map *labels, char *err, size_t errlen)
{
    glob_t g;
    int rc;

    if (!strpbrk(path, "*?["))
        return load_file(ds, path, o, labels, err, errlen);
    rc = glob(path, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        snprintf(err, errlen, "%s: no file matches the pattern", path);
        rc = -1;
    } else if (rc) {
        snprintf(err, errlen, "%s: %s", path,
                 rc == GLOB_ABORTED ? "a directory of the pattern cannot be read"
                                    : "out of memory");
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) /* glob sorts the names */
        rc = load_file(ds, g.gl_pathv[i], o, labels, err, errlen);
    globfree(&g);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding
 */

/* The WordPiece ids of the tokens in tok into ids[0..cap) (ids may be NULL: none written);
 * the number of ids the tokens have, all of them (more than cap means cut). */
static size_t pieces(const struct vocab *v, const struct text_tokens *tok, int32_t *ids,
                     size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < tok->n; i++) {
        size_t left = ids && n < cap ? cap - n : 0;
        n += vocab_wordpiece(v, text_token(tok, i), tok->len[i], left ? ids + n : NULL, left);
    }
    return n;
}

/* Hugging Face tokenizers' "longest_first" for a pair of na and nb ids in room ids (see
 * dataset.h): how many of each are kept. */
static void longest_first(size_t na, size_t nb, size_t room, size_t *ka, size_t *kb)
{
    size_t s = na < nb ? na : nb, half = room / 2;

    *ka = na, *kb = nb;
    if (na + nb <= room)
        return;
    if (s <= half) { /* the shorter fits in half the room: it stays whole */
        if (na <= nb)
            *kb = room - na;
        else
            *ka = room - nb;
        return;
    }
    *ka = na > nb ? room - half : half; /* the longer one gets the odd id */
    *kb = room - *ka;
}

size_t dataset_encode_text(const struct vocab *v, const struct text_opts *to, const char *text,
                           size_t text_len, const char *pair, size_t pair_len, size_t max_len,
                           bool add_cls_sep, struct text_tokens *tok, int32_t *row,
                           bool *truncated)
{
    struct text_opts o;
    int32_t cls = vocab_cls_id(v), sep = vocab_sep_id(v), pad = vocab_pad_id(v);
    size_t nspec = pair ? 3 : 2;
    bool specials = add_cls_sep && cls >= 0 && sep >= 0 && max_len >= nspec;
    size_t room = specials ? max_len - nspec : max_len, n = 0, na, nb = 0, ka, kb = 0;

    if (to)
        o = *to;
    else
        text_opts_default(&o);
    /* Every token yields at least one id, so tokens past the row's room are never needed for a
     * single text. A pair's texts are counted whole: which of them is longer decides the cut. */
    if (pair)
        o.max_tokens = 0;
    else if (o.max_tokens == 0 || o.max_tokens > room + 1)
        o.max_tokens = room + 1;
    if (specials)
        row[n++] = cls;
    text_tokenize(&o, text, text_len, tok);
    na = pieces(v, tok, row + n, room);
    ka = na > room ? room : na;
    if (pair) {
        text_tokenize(&o, pair, pair_len, tok);
        nb = pieces(v, tok, NULL, room);
        longest_first(na, nb, room, &ka, &kb);
    }
    n += ka;
    if (pair && specials)
        row[n++] = sep;
    if (pair) {
        size_t got = pieces(v, tok, row + n, kb);
        n += got > kb ? kb : got;
    }
    if (specials)
        row[n++] = sep;
    if (n == 0 && max_len > 0)
        row[n++] = vocab_unk_id(v);
    for (size_t i = n; i < max_len; i++)
        row[i] = pad;
    if (truncated)
        *truncated = ka < na || kb < nb;
    return n;
}

int dataset_encode(const struct dataset *ds, const struct vocab *v, const struct text_opts *to,
                   size_t max_len, bool add_cls_sep, struct dataset_encoded *out)
{
    struct text_tokens tok;
    int32_t unk = vocab_unk_id(v);

    memset(out, 0, sizeof(*out));
    if (max_len < (add_cls_sep ? 2u : 1u) || max_len > (1u << 20))
        return -1;
    out->n = ds->n;
    out->max_len = max_len;
    out->ids = xmallocarray(ds->n ? ds->n * max_len : 1, sizeof(*out->ids));
    out->mask = xcalloc(ds->n ? ds->n * max_len : 1, sizeof(*out->mask));
    out->len = xcalloc(ds->n ? ds->n : 1, sizeof(*out->len));
    out->labels = xcalloc(ds->n ? ds->n : 1, sizeof(*out->labels));
    text_tokens_init(&tok);
    for (size_t i = 0; i < ds->n; i++) {
        int32_t *row = out->ids + i * max_len;
        bool cut;
        size_t n = dataset_encode_text(v, to, ds->ex[i].text, ds->ex[i].text_len, ds->ex[i].pair,
                                       ds->ex[i].pair_len, max_len, add_cls_sep, &tok, row, &cut);
        out->len[i] = (int32_t)n;
        out->labels[i] = ds->ex[i].label;
        memset(out->mask + i * max_len, 1, n);
        out->n_truncated += cut;
        out->n_tokens += n;
        for (size_t t = 0; t < n; t++)
            out->n_unk += row[t] == unk;
    }
    text_tokens_cleanup(&tok);
    return 0;
}

void dataset_encode_label_sets(const struct dataset *ds, int classes,
                               struct dataset_encoded *out)
{
    int w = (classes + 31) / 32;
    free(out->labels);
    out->label_words = w;
    out->labels = xcalloc(ds->n ? ds->n * (size_t)w : 1, sizeof(*out->labels));
    for (size_t i = 0; i < ds->n; i++)
        for (int32_t k = 0; k < ds->ex[i].n_multi; k++) {
            int32_t c = ds->ex[i].multi[k];
            if (c >= 0 && c < classes)
                out->labels[i * (size_t)w + (size_t)(c >> 5)] |= (int32_t)(1u << (c & 31));
        }
}

int dataset_label_number(const char *label, float *out)
{
    char *end;
    errno = 0;
    double t = strtod(label, &end);
    if (end == label || *end || errno == ERANGE || !isfinite(t) || fabs(t) > 3e38)
        return -1;
    *out = (float)t;
    return 0;
}

void dataset_encode_targets(const struct dataset *ds, struct dataset_encoded *out)
{
    out->label_words = DATASET_TARGETS_REAL;
    for (size_t i = 0; i < ds->n; i++)
        memcpy(&out->labels[i], &ds->ex[i].target, sizeof(float));
}

void dataset_encoded_cleanup(struct dataset_encoded *e)
{
    free(e->ids);
    free(e->mask);
    free(e->len);
    free(e->labels);
    memset(e, 0, sizeof(*e));
}

void dataset_count_words(const struct dataset *ds, const struct text_opts *to,
                         struct vocab_builder *b)
{
    struct text_tokens tok;

    text_tokens_init(&tok);
    for (size_t i = 0; i < ds->n; i++) {
        text_tokenize(to, ds->ex[i].text, ds->ex[i].text_len, &tok);
        vocab_builder_add(b, &tok);
        if (ds->ex[i].pair) {
            text_tokenize(to, ds->ex[i].pair, ds->ex[i].pair_len, &tok);
            vocab_builder_add(b, &tok);
        }
    }
    text_tokens_cleanup(&tok);
}
