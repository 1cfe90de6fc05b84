/*
 * vocab.c - vocab.txt load/save, WordPiece, and vocabs built from word counts (see vocab.h).
 *
 * Lookup is an open-addressing hash table (FNV-1a, linear probing, load <= 1/2) from token bytes
 * to id; the tokens themselves live in one array indexed by id.
 */
#include "worker/vocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/xalloc.h"

static const char *const specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
#define N_SPECIALS 5

/* ---------------------------------------------------------------------------------------------
 * A string -> value hash table shared by the vocab (value = id) and the builder (value = count).
 */

struct table {
    char **key; /* key[slot], NULL when empty; owned */
    size_t *keylen;
    uint64_t *val;
    size_t mask; /* slots - 1 (a power of two) */
    size_t n;
};

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void table_init(struct table *t, size_t want)
{
    size_t slots = 16;
    while (slots < want * 2)
        slots *= 2;
    t->key = xcalloc(slots, sizeof(*t->key));
    t->keylen = xcalloc(slots, sizeof(*t->keylen));
    t->val = xcalloc(slots, sizeof(*t->val));
    t->mask = slots - 1;
    t->n = 0;
}

static void table_cleanup(struct table *t)
{
    if (t->key)
        for (size_t i = 0; i <= t->mask; i++)
            free(t->key[i]);
    free(t->key);
    free(t->keylen);
    free(t->val);
    memset(t, 0, sizeof(*t));
}

/* Slot holding s, or the empty slot where it would go. */
static size_t table_slot(const struct table *t, const char *s, size_t n)
{
    size_t i = (size_t)hash(s, n) & t->mask;
    while (t->key[i] && !(t->keylen[i] == n && memcmp(t->key[i], s, n) == 0))
        i = (i + 1) & t->mask;
    return i;
}

static void table_grow(struct table *t)
{
    struct table bigger;
    table_init(&bigger, (t->mask + 1));
    for (size_t i = 0; i <= t->mask; i++) {
        if (!t->key[i])
            continue;
        size_t j = table_slot(&bigger, t->key[i], t->keylen[i]);
        bigger.key[j] = t->key[i];
        bigger.keylen[j] = t->keylen[i];
        bigger.val[j] = t->val[i];
        bigger.n++;
        t->key[i] = NULL;
    }
    table_cleanup(t);
    *t = bigger;
}

/* Returns the slot of s, inserting it with value 0 when absent (*added set). */
static size_t table_put(struct table *t, const char *s, size_t n, bool *added)
{
    size_t i;

    if ((t->n + 1) * 2 > t->mask + 1)
        table_grow(t);
    i = table_slot(t, s, n);
    *added = !t->key[i];
    if (*added) {
        t->key[i] = xstrndup(s, n);
        t->keylen[i] = n;
        t->val[i] = 0;
        t->n++;
    }
    return i;
}

/* ---------------------------------------------------------------------------------------------
 * The vocab
 */

struct vocab {
    char **tok; /* tok[id], borrowed from the table's keys */
    int32_t n;
    size_t cap;     /* slots in tok */
    size_t max_tok; /* longest token in bytes: WordPiece never tries a longer piece */
    struct table t;
    int32_t pad, unk, cls, sep, mask;
};

static struct vocab *vocab_alloc(size_t want)
{
    struct vocab *v = xcalloc(1, sizeof(*v));
    table_init(&v->t, want);
    v->cap = want ? want : 1;
    v->tok = xcalloc(v->cap, sizeof(*v->tok));
    v->pad = v->unk = v->cls = v->sep = v->mask = -1;
    return v;
}

/* Appends tok as the next id; false when it is already present. */
static bool vocab_push(struct vocab *v, const char *tok, size_t len)
{
    bool added;
    size_t slot = table_put(&v->t, tok, len, &added);
    if (!added)
        return false;
    if (len > v->max_tok)
        v->max_tok = len;
    if ((size_t)v->n == v->cap) {
        v->cap *= 2;
        v->tok = xrealloc(v->tok, v->cap * sizeof(*v->tok));
    }
    v->t.val[slot] = (uint64_t)v->n;
    /* The table may have grown (moved keys between slots, not reallocated the strings). */
    v->tok[v->n++] = v->t.key[slot];
    return true;
}

static void vocab_find_specials(struct vocab *v)
{
    v->pad = vocab_find(v, "[PAD]", 5);
    v->unk = vocab_find(v, "[UNK]", 5);
    v->cls = vocab_find(v, "[CLS]", 5);
    v->sep = vocab_find(v, "[SEP]", 5);
    v->mask = vocab_find(v, "[MASK]", 6);
}

void vocab_free(struct vocab *v)
{
    if (!v)
        return;
    table_cleanup(&v->t);
    free(v->tok);
    free(v);
}

int32_t vocab_size(const struct vocab *v)
{
    return v->n;
}

int32_t vocab_find(const struct vocab *v, const char *tok, size_t len)
{
    size_t i = table_slot(&v->t, tok, len);
    return v->t.key[i] ? (int32_t)v->t.val[i] : -1;
}

const char *vocab_token(const struct vocab *v, int32_t id)
{
    return id >= 0 && id < v->n ? v->tok[id] : NULL;
}

int32_t vocab_pad_id(const struct vocab *v)
{
    return v->pad;
}
int32_t vocab_unk_id(const struct vocab *v)
{
    return v->unk;
}
int32_t vocab_cls_id(const struct vocab *v)
{
    return v->cls;
}
int32_t vocab_sep_id(const struct vocab *v)
{
    return v->sep;
}

/* Reads a whole file, at most max bytes, into b. 0, or -1 with err. */
static int slurp(const char *path, size_t max, struct buf *b, char *err, size_t errlen)
{
    char chunk[65536];
    size_t got;
    FILE *f = fopen(path, "rb");

    buf_init(b, max);
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (buf_append(b, chunk, got)) {
            snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
            fclose(f);
            return -1;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        i += text_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp <= 0)
            return false;
    }
    return true;
}

struct vocab *vocab_load(const char *path, char *err, size_t errlen)
{
    struct buf b;
    struct vocab *v = NULL;

    if (slurp(path, VOCAB_MAX_FILE, &b, err, errlen) == 0)
        v = vocab_parse(buf_ptr(&b), buf_len(&b), path, err, errlen);
    buf_cleanup(&b);
    return v;
}

struct vocab *vocab_parse(const char *text, size_t n, const char *path, char *err, size_t errlen)
{
    struct vocab *v = NULL;
    const char *p = text, *end = text + n;
    size_t lineno = 0, lines = 0;

    if (n > VOCAB_MAX_FILE) {
        snprintf(err, errlen, "%s: larger than %d bytes", path, VOCAB_MAX_FILE);
        return NULL;
    }
    for (const char *q = p; q < end; q++)
        lines += *q == '\n';
    v = vocab_alloc(lines + 1);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t raw = nl ? (size_t)(nl - p) : (size_t)(end - p), len = raw;
        lineno++;
        if (len > 0 && p[len - 1] == '\r')
            len--;
        if (len == 0) {
            snprintf(err, errlen, "%s:%zu: empty token; vocab.txt has one token per line", path,
                     lineno);
            goto fail;
        }
        if (len > VOCAB_MAX_TOKEN_BYTES || !valid_utf8(p, len)) {
            snprintf(err, errlen, "%s:%zu: %s", path, lineno,
                     len > VOCAB_MAX_TOKEN_BYTES ? "token longer than 1024 bytes"
                                                 : "invalid UTF-8 or NUL byte");
            goto fail;
        }
        if (v->n >= VOCAB_MAX_SIZE) {
            snprintf(err, errlen, "%s:%zu: more than %d tokens", path, lineno, VOCAB_MAX_SIZE);
            goto fail;
        }
        if (!vocab_push(v, p, len)) {
            snprintf(err, errlen, "%s:%zu: duplicate token \"%.*s\" (first at line %d)", path,
                     lineno, (int)len, p, vocab_find(v, p, len) + 1);
            goto fail;
        }
        p += raw + (nl ? 1 : 0);
    }
    vocab_find_specials(v);
    if (v->unk < 0 || v->pad < 0) {
        snprintf(err, errlen, "%s: no %s token; add a line \"%s\" (encoding needs it)", path,
                 v->unk < 0 ? "[UNK]" : "[PAD]", v->unk < 0 ? "[UNK]" : "[PAD]");
        goto fail;
    }
    return v;
fail:
    vocab_free(v);
    return NULL;
}

char *vocab_dump(const struct vocab *v, size_t *len)
{
    size_t n = 0, at = 0;
    for (int32_t i = 0; i < v->n; i++)
        n += strlen(v->tok[i]) + 1;
    char *out = xmalloc(n + 1);
    for (int32_t i = 0; i < v->n; i++) {
        size_t l = strlen(v->tok[i]);
        memcpy(out + at, v->tok[i], l);
        out[at + l] = '\n';
        at += l + 1;
    }
    out[at] = '\0';
    *len = at;
    return out;
}

int vocab_save(const struct vocab *v, const char *path, char *err, size_t errlen)
{
    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 16);
    FILE *f = NULL;
    int fd;

    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "wb"))) {
        snprintf(err, errlen, "%s: cannot create temp file: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto fail;
    }
    size_t n;
    char *txt = vocab_dump(v, &n);
    size_t wrote = fwrite(txt, 1, n, f);
    free(txt);
    if (wrote != n || fflush(f) || fsync(fileno(f)) || ferror(f)) {
        snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        fclose(f);
        goto fail_unlink;
    }
    if (fclose(f) || rename(tmp, path)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail_unlink;
    }
    free(tmp);
    return 0;
fail_unlink:
    unlink(tmp);
fail:
    free(tmp);
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * WordPiece
 */

static bool is_boundary(const char *w, size_t len, size_t i)
{
    return i == 0 || i >= len || ((unsigned char)w[i] & 0xC0) != 0x80;
}

size_t vocab_wordpiece(const struct vocab *v, const char *word, size_t len, int32_t *ids,
                       size_t max)
{
    int32_t pieces[VOCAB_MAX_WORD_CHARS];
    char key[2 + 4 * VOCAB_MAX_WORD_CHARS];
    size_t chars = 0, np = 0, start = 0;

    for (size_t i = 0; i < len; i++)
        chars += is_boundary(word, len, i);
    if (len == 0)
        return 0;
    if (chars > VOCAB_MAX_WORD_CHARS || len > 4 * VOCAB_MAX_WORD_CHARS)
        goto unk;
    key[0] = key[1] = '#';
    while (start < len) {
        size_t room = start == 0 ? v->max_tok : (v->max_tok > 2 ? v->max_tok - 2 : 0);
        size_t end = len - start > room ? start + room : len;
        int32_t id = -1;
        while (end > start) {
            if (is_boundary(word, len, end)) {
                if (start == 0) {
                    id = vocab_find(v, word, end);
                } else {
                    memcpy(key + 2, word + start, end - start);
                    id = vocab_find(v, key, 2 + end - start);
                }
                if (id >= 0)
                    break;
            }
            end--;
        }
        if (id < 0)
            goto unk;
        pieces[np++] = id; /* np <= chars <= VOCAB_MAX_WORD_CHARS: each piece eats >= 1 char */
        start = end;
    }
    for (size_t i = 0; i < np && i < max; i++)
        ids[i] = pieces[i];
    return np;
unk:
    if (max > 0)
        ids[0] = v->unk;
    return 1;
}

size_t vocab_encode_tokens(const struct vocab *v, const struct text_tokens *t, int32_t *ids,
                           size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < t->n && n < max; i++) {
        size_t k = vocab_wordpiece(v, text_token(t, i), t->len[i], ids + n, max - n);
        n += k < max - n ? k : max - n;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * Building a vocab from counts
 */

struct vocab_builder {
    struct table t;
};

struct vocab_builder *vocab_builder_new(void)
{
    struct vocab_builder *b = xmalloc(sizeof(*b));
    table_init(&b->t, 1024);
    return b;
}

void vocab_builder_free(struct vocab_builder *b)
{
    if (!b)
        return;
    table_cleanup(&b->t);
    free(b);
}

void vocab_builder_add_word(struct vocab_builder *b, const char *word, size_t len, uint64_t count)
{
    bool added;
    size_t slot;

    if (len == 0 || len > VOCAB_MAX_TOKEN_BYTES)
        return;
    slot = table_put(&b->t, word, len, &added);
    b->t.val[slot] += count;
}

void vocab_builder_add(struct vocab_builder *b, const struct text_tokens *t)
{
    for (size_t i = 0; i < t->n; i++)
        vocab_builder_add_word(b, text_token(t, i), t->len[i], 1);
}

size_t vocab_builder_distinct(const struct vocab_builder *b)
{
    return b->t.n;
}

struct entry {
    const char *w;
    size_t len;
    uint64_t count;
};

/* Most frequent first; ties in byte order, so the result does not depend on insertion order. */
static int cmp_entry(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    size_t n = a->len < b->len ? a->len : b->len;
    int c;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    c = memcmp(a->w, b->w, n);
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static bool is_special(const char *w, size_t len)
{
    for (int i = 0; i < N_SPECIALS; i++)
        if (strlen(specials[i]) == len && memcmp(specials[i], w, len) == 0)
            return true;
    return false;
}

struct vocab *vocab_builder_build(const struct vocab_builder *b, uint64_t min_freq, size_t max_size)
{
    struct entry *e = xcalloc(b->t.n ? b->t.n : 1, sizeof(*e));
    size_t n = 0, keep;
    struct vocab *v;

    if (max_size && max_size < N_SPECIALS)
        max_size = N_SPECIALS;
    if (max_size > VOCAB_MAX_SIZE || max_size == 0)
        max_size = VOCAB_MAX_SIZE;
    for (size_t i = 0; i <= b->t.mask; i++) {
        if (!b->t.key[i] || b->t.val[i] < min_freq || is_special(b->t.key[i], b->t.keylen[i]))
            continue;
        e[n].w = b->t.key[i];
        e[n].len = b->t.keylen[i];
        e[n].count = b->t.val[i];
        n++;
    }
    qsort(e, n, sizeof(*e), cmp_entry);
    keep = n < max_size - N_SPECIALS ? n : max_size - N_SPECIALS;
    v = vocab_alloc(keep + N_SPECIALS);
    for (int i = 0; i < N_SPECIALS; i++)
        vocab_push(v, specials[i], strlen(specials[i]));
    for (size_t i = 0; i < keep; i++)
        vocab_push(v, e[i].w, e[i].len);
    vocab_find_specials(v);
    free(e);
    return v;
}
