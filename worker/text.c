/*
 * text.c - UTF-8 decoding, character classes, and the word tokenizer (see text.h).
 *
 * The character tables cover what real corpora (English e-mail, European languages, CJK) need
 * without pulling in ICU: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic, the punctuation and
 * symbol blocks, CJK ideographs, kana and emoji. Anything else is treated as a letter and kept
 * as is, which is what a subword vocab expects.
 */
#include "worker/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/xalloc.h"

/* ---------------------------------------------------------------------------------------------
 * UTF-8
 */

size_t text_utf8_decode(const unsigned char *s, size_t n, int32_t *cp)
{
    unsigned char c = s[0];
    size_t len, i;
    int32_t v, min;

    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = -1; /* continuation byte, overlong lead 0xC0/0xC1, or 0xF5.. */
        return 1;
    }
    if (len > n) {
        *cp = -1;
        return 1;
    }
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = -1;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = -1;
        return 1;
    }
    *cp = v;
    return len;
}

/* Encodes cp (a valid scalar value) into out[0..4); returns the byte count. */
static size_t utf8_encode(int32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---------------------------------------------------------------------------------------------
 * Character classes
 */

enum cls { C_LETTER, C_SPACE, C_DROP, C_PUNCT, C_CJK, C_MARK };

static bool is_space(int32_t c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_punct(int32_t c)
{
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126);
    if (c >= 0xA1 && c <= 0xBF) /* Latin-1 punctuation and symbols, not ª µ º ² ³ ¹ ¼ ½ ¾ */
        return c != 0xAA && c != 0xB5 && c != 0xBA && c != 0xB2 && c != 0xB3 && c != 0xB9 &&
               !(c >= 0xBC && c <= 0xBE) && c != 0xAD;
    if (c == 0xD7 || c == 0xF7)
        return true;
    return (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205E) ||
           (c >= 0x20A0 && c <= 0x20CF) || /* currency */
           (c >= 0x2100 && c <= 0x2BFF) || /* letterlike..misc symbols */
           (c >= 0x3001 && c <= 0x303F) || /* CJK punctuation */
           (c >= 0xFE30 && c <= 0xFE4F) || /* CJK compatibility forms */
           (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
           (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65) ||
           (c >= 0x1F000 && c <= 0x1FAFF); /* emoji and pictographs */
}

/* BERT's _is_chinese_char ranges, plus kana. */
static bool is_cjk(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F) ||
           (c >= 0x3040 && c <= 0x30FF);
}

static enum cls classify(int32_t c)
{
    if (is_space(c))
        return C_SPACE;
    if (c < 0x20 || (c >= 0x7F && c <= 0x9F))
        return C_SPACE; /* control characters, NUL included, separate words */
    if (c == 0xAD || (c >= 0x200B && c <= 0x200F) || (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF ||
        (c >= 0xFE00 && c <= 0xFE0F))
        return C_DROP; /* soft hyphen, zero-width, BOM, variation selectors */
    if (c >= 0x0300 && c <= 0x036F)
        return C_MARK;
    if (is_punct(c))
        return C_PUNCT;
    if (is_cjk(c))
        return C_CJK;
    return C_LETTER;
}

/* Base letters of U+00C0..U+00FF and U+0100..U+017F for accent stripping ('.' = keep). */
static const char latin1_base[64 + 1] =
    "aaaaaa.ceeeeiiii.nooooo..uuuuy..aaaaaa.ceeeeiiii.nooooo..uuuuy.y";
static const char latinA_base[128 + 1] =
    "aaaaaaccccccccddddeeeeeeeeeegggggggghhhhiiiiiiiiii..jjkk.lllllll"
    "lllnnnnnn...oooooo..rrrrrrssssssssttttttuuuuuuuuuuuuwwyyyzzzzzz.";

static int32_t to_lower(int32_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if (c < 0xC0)
        return c;
    if (c <= 0xDE)
        return c == 0xD7 ? c : c + 32;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x130)
            return 'i';
        if (c == 0x178)
            return 0xFF;
        if ((c <= 0x137 || (c >= 0x14A && c <= 0x177)) && c % 2 == 0)
            return c + 1;
        if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) && c % 2 == 1)
            return c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2)
        return c + 32;
    switch (c) { /* accented Greek capitals */
    case 0x386:
        return 0x3AC;
    case 0x388:
        return 0x3AD;
    case 0x389:
        return 0x3AE;
    case 0x38A:
        return 0x3AF;
    case 0x38C:
        return 0x3CC;
    case 0x38E:
        return 0x3CD;
    case 0x38F:
        return 0x3CE;
    default:
        break;
    }
    if (c >= 0x410 && c <= 0x42F)
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    if (c >= 0xFF21 && c <= 0xFF3A) /* fullwidth Latin */
        return c + 32;
    return c;
}

/* Lowercase c (already lowered) without its accent, when it has a plain base letter. */
static int32_t strip_accent(int32_t c)
{
    if (c >= 0xC0 && c <= 0xFF && latin1_base[c - 0xC0] != '.')
        return latin1_base[c - 0xC0];
    if (c >= 0x100 && c <= 0x17F && latinA_base[c - 0x100] != '.')
        return latinA_base[c - 0x100];
    switch (c) { /* Greek tonos/dialytika */
    case 0x3AC:
        return 0x3B1;
    case 0x3AD:
        return 0x3B5;
    case 0x3AE:
        return 0x3B7;
    case 0x3AF:
    case 0x390:
    case 0x3CA:
        return 0x3B9;
    case 0x3CC:
        return 0x3BF;
    case 0x3CD:
    case 0x3B0:
    case 0x3CB:
        return 0x3C5;
    case 0x3CE:
        return 0x3C9;
    default:
        return c;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Token list
 */

void text_opts_default(struct text_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->lowercase = true;
    o->strip_accents = true;
    o->split_cjk = true;
    o->split_punct = true;
}

void text_tokens_init(struct text_tokens *t)
{
    memset(t, 0, sizeof(*t));
}

void text_tokens_cleanup(struct text_tokens *t)
{
    free(t->data);
    free(t->off);
    free(t->len);
    text_tokens_init(t);
}

static void data_reserve(struct text_tokens *t, size_t n)
{
    if (t->dlen + n <= t->dcap)
        return;
    size_t cap = t->dcap ? t->dcap : 256;
    while (cap < t->dlen + n)
        cap *= 2;
    t->data = xrealloc(t->data, cap);
    t->dcap = cap;
}

/* State of the token being built: it starts at t->dlen - cur bytes. */
struct tok_state {
    const struct text_opts *o;
    struct text_tokens *t;
    size_t start; /* offset of the current token in t->data */
    bool done;    /* max_tokens reached */
};

/* Ends the current token (if any): NUL-terminates it, or drops it when it is a stop word. */
static void finish(struct tok_state *st)
{
    struct text_tokens *t = st->t;
    size_t len = t->dlen - st->start;

    if (len == 0)
        return;
    if (st->o->stop && text_stopwords_has(st->o->stop, t->data + st->start, len)) {
        t->dlen = st->start;
        return;
    }
    data_reserve(t, 1);
    t->data[t->dlen++] = '\0';
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->off = xrealloc(t->off, t->cap * sizeof(*t->off));
        t->len = xrealloc(t->len, t->cap * sizeof(*t->len));
    }
    t->off[t->n] = st->start;
    t->len[t->n] = len;
    t->n++;
    st->start = t->dlen;
    if (st->o->max_tokens && t->n >= st->o->max_tokens)
        st->done = true;
}

static void append_cp(struct tok_state *st, int32_t cp)
{
    struct text_tokens *t = st->t;
    char enc[4];
    size_t n = utf8_encode(cp, enc);

    if (t->dlen - st->start + n > TEXT_MAX_TOKEN_BYTES)
        return; /* cut overlong tokens at a character boundary */
    data_reserve(t, n);
    memcpy(t->data + t->dlen, enc, n);
    t->dlen += n;
}

size_t text_tokenize(const struct text_opts *o, const char *s, size_t n, struct text_tokens *t)
{
    const unsigned char *p = (const unsigned char *)s;
    struct text_opts defaults;
    struct tok_state st;
    size_t i = 0;

    if (!o) {
        text_opts_default(&defaults);
        o = &defaults;
    }
    t->n = 0;
    t->dlen = 0;
    t->n_invalid = 0;
    t->truncated = false;
    st.o = o;
    st.t = t;
    st.start = 0;
    st.done = false;
    while (i < n && !st.done) {
        int32_t cp;
        i += text_utf8_decode(p + i, n - i, &cp);
        if (cp < 0) {
            t->n_invalid++;
            continue;
        }
        switch (classify(cp)) {
        case C_SPACE:
            finish(&st);
            break;
        case C_DROP:
            break;
        case C_MARK:
            if (!(o->lowercase && o->strip_accents))
                append_cp(&st, cp);
            break;
        case C_PUNCT:
        case C_CJK:
            if ((classify(cp) == C_PUNCT && !o->split_punct) ||
                (classify(cp) == C_CJK && !o->split_cjk)) {
                append_cp(&st, cp);
                break;
            }
            finish(&st);
            if (st.done)
                break;
            append_cp(&st, cp);
            finish(&st);
            break;
        case C_LETTER:
            if (o->lowercase) {
                cp = to_lower(cp);
                if (o->strip_accents)
                    cp = strip_accent(cp);
            }
            append_cp(&st, cp);
            break;
        }
    }
    if (!st.done)
        finish(&st);
    while (st.done && i < n) { /* truncated only if something that makes a token follows */
        int32_t cp;
        i += text_utf8_decode(p + i, n - i, &cp);
        if (cp >= 0 && classify(cp) != C_SPACE && classify(cp) != C_DROP) {
            t->truncated = true;
            break;
        }
    }
    return t->n;
}

/* ---------------------------------------------------------------------------------------------
 * Stop words: a sorted array of strings, looked up by binary search.
 */

struct text_stopwords {
    char **w;
    size_t n;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct text_stopwords *stopwords_from(char **w, size_t n)
{
    struct text_stopwords *s = xmalloc(sizeof(*s));
    size_t i, k = 0;

    qsort(w, n, sizeof(*w), cmp_str);
    for (i = 0; i < n; i++) { /* drop duplicates */
        if (k > 0 && strcmp(w[k - 1], w[i]) == 0) {
            free(w[i]);
            continue;
        }
        w[k++] = w[i];
    }
    s->w = w;
    s->n = k;
    return s;
}

struct text_stopwords *text_stopwords_new(const char *const *words)
{
    size_t n = 0, i;
    char **w;

    while (words[n])
        n++;
    w = xcalloc(n ? n : 1, sizeof(*w));
    for (i = 0; i < n; i++)
        w[i] = xstrdup(words[i]);
    return stopwords_from(w, n);
}

struct text_stopwords *text_stopwords_english(void)
{
    static const char *const words[] = {
        "a",      "about",  "above",    "after",      "again",      "against", "all",     "am",
        "an",     "and",    "any",      "are",        "as",         "at",      "be",      "because",
        "been",   "before", "being",    "below",      "between",    "both",    "but",     "by",
        "can",    "did",    "do",       "does",       "doing",      "down",    "during",  "each",
        "few",    "for",    "from",     "further",    "had",        "has",     "have",    "having",
        "he",     "her",    "here",     "hers",       "herself",    "him",     "himself", "his",
        "how",    "i",      "if",       "in",         "into",       "is",      "it",      "its",
        "itself", "just",   "me",       "more",       "most",       "my",      "myself",  "no",
        "nor",    "not",    "now",      "of",         "off",        "on",      "once",    "only",
        "or",     "other",  "our",      "ours",       "ourselves",  "out",     "over",    "own",
        "same",   "she",    "should",   "so",         "some",       "such",    "than",    "that",
        "the",    "their",  "theirs",   "them",       "themselves", "then",    "there",   "these",
        "they",   "this",   "those",    "through",    "to",         "too",     "under",   "until",
        "up",     "very",   "was",      "we",         "were",       "what",    "when",    "where",
        "which",  "while",  "who",      "whom",       "why",        "will",    "with",    "you",
        "your",   "yours",  "yourself", "yourselves", NULL};
    return text_stopwords_new(words);
}

struct text_stopwords *text_stopwords_load(const char *path, const struct text_opts *o, char *err,
                                           size_t errlen)
{
    struct text_opts norm;
    struct text_tokens tok;
    struct buf b;
    char **w = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char chunk[4096];
    FILE *f;
    size_t got;
    const char *p, *end;

    buf_init(&b, TEXT_MAX_STOPWORDS_FILE);
    f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (buf_append(&b, chunk, got)) {
            snprintf(err, errlen, "%s: larger than %d bytes; is this a stop-word list?", path,
                     TEXT_MAX_STOPWORDS_FILE);
            fclose(f);
            buf_cleanup(&b);
            return NULL;
        }
    }
    fclose(f);
    if (o)
        norm = *o;
    else
        text_opts_default(&norm);
    norm.stop = NULL;
    norm.max_tokens = 0;
    norm.split_punct = false; /* keep "don't" one word */
    text_tokens_init(&tok);
    p = buf_ptr(&b);
    end = p + buf_len(&b);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        if (len > 0 && p[0] != '#') {
            text_tokenize(&norm, p, len, &tok);
            if (tok.n_invalid) {
                snprintf(err, errlen, "%s:%zu: invalid UTF-8", path, lineno);
                goto fail;
            }
            for (size_t i = 0; i < tok.n; i++) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    w = xrealloc(w, cap * sizeof(*w));
                }
                w[n++] = xstrdup(text_token(&tok, i));
            }
        }
        p += len + (nl ? 1 : 0);
    }
    text_tokens_cleanup(&tok);
    buf_cleanup(&b);
    if (!w)
        w = xcalloc(1, sizeof(*w));
    return stopwords_from(w, n);
fail:
    for (size_t i = 0; i < n; i++)
        free(w[i]);
    free(w);
    text_tokens_cleanup(&tok);
    buf_cleanup(&b);
    return NULL;
}

bool text_stopwords_has(const struct text_stopwords *s, const char *word, size_t len)
{
    size_t lo = 0, hi = s->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *m = s->w[mid];
        size_t mlen = strlen(m);
        int c = memcmp(m, word, mlen < len ? mlen : len);
        if (c == 0)
            c = mlen < len ? -1 : mlen > len ? 1 : 0;
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

void text_stopwords_free(struct text_stopwords *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->w[i]);
    free(s->w);
    free(s);
}
