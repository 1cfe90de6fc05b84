/*
 * text.h - UTF-8 cleaning and basic tokenization (BERT's "BasicTokenizer", in C).
 *
 * text_tokenize() turns raw bytes into a list of word tokens:
 *   - invalid UTF-8 (bad lead/continuation bytes, overlongs, surrogates, > U+10FFFF) is dropped
 *     and counted, never a crash; NUL and control characters separate tokens; zero-width and
 *     format characters (U+200B..U+200F, U+FEFF, soft hyphen) are dropped;
 *   - whitespace of any kind (ASCII, NBSP, U+2000..U+200A, U+3000, ...) separates tokens;
 *   - letters are lowercased (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic) and, when
 *     strip_accents is on, reduced to their base letter (é -> e, ñ -> n; ß and æ stay);
 *   - every punctuation or symbol character (ASCII !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ and the
 *     Unicode General Punctuation, Latin-1 and CJK punctuation blocks) is a token of its own;
 *   - every CJK ideograph (and Hiragana/Katakana character) is a token of its own; Hangul is
 *     left in words (Korean separates words with spaces); emoji are tokens of their own;
 *   - tokens longer than TEXT_MAX_TOKEN_BYTES bytes are cut to that many bytes at a character
 *     boundary (WordPiece maps them to [UNK] anyway);
 *   - stop words (optional) are removed; max_tokens (optional) caps tokens per document, so a
 *     10 MB e-mail costs no more than its first max_tokens words.
 * It does not split into subwords: that is vocab_wordpiece() (vocab.h).
 * Thread safety: all functions are reentrant; a text_stopwords set may be shared read-only.
 */
#ifndef GANTRY_TEXT_H
#define GANTRY_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest token kept, in bytes (BERT's max_input_chars_per_word is 100 characters). */
#define TEXT_MAX_TOKEN_BYTES 200
/* Largest stop-word file text_stopwords_load() reads. */
#define TEXT_MAX_STOPWORDS_FILE (1 << 20)

/* A set of stop words (already lowercased); opaque, read-only once built. */
struct text_stopwords;

struct text_opts {
    bool lowercase;                    /* default true */
    bool strip_accents;                /* default true (BERT uncased); only when lowercase */
    bool split_cjk;                    /* default true: CJK characters one per token */
    bool split_punct;                  /* default true: punctuation one per token */
    size_t max_tokens;                 /* 0 = no cap; else stop after this many tokens */
    const struct text_stopwords *stop; /* borrowed, may be NULL (no stop words) */
};

/* The token list of one document: tokens are NUL-terminated strings packed in one buffer. */
struct text_tokens {
    char *data;       /* packed tokens, each followed by NUL */
    size_t *off;      /* off[i]: start of token i in data */
    size_t *len;      /* len[i]: bytes of token i, without the NUL */
    size_t n;         /* tokens */
    size_t cap;       /* slots in off/len */
    size_t dlen;      /* bytes used in data */
    size_t dcap;      /* bytes allocated in data */
    size_t n_invalid; /* invalid UTF-8 bytes dropped by the last text_tokenize() */
    bool truncated;   /* the last text_tokenize() stopped at max_tokens */
};

/* Fills o with the defaults listed in struct text_opts. */
void text_opts_default(struct text_opts *o);

/* Storage owned by the caller; reuse one across documents to avoid reallocating. */
void text_tokens_init(struct text_tokens *t);
void text_tokens_cleanup(struct text_tokens *t);

/* Borrowed pointer to token i (i < t->n), valid until the next text_tokenize() on t. */
static inline const char *text_token(const struct text_tokens *t, size_t i)
{
    return t->data + t->off[i];
}

/* Tokenizes s[0..n) (need not be NUL-terminated, may hold any bytes) into t, replacing its
 * previous contents. Returns the number of tokens. Never fails (out-of-memory aborts). */
size_t text_tokenize(const struct text_opts *o, const char *s, size_t n, struct text_tokens *t);

/* Decodes one UTF-8 character at s[0..n), n > 0. Returns its length in bytes (1..4) and sets
 * *cp; for an invalid sequence returns 1 and sets *cp to -1. Exposed for vocab.c and tests. */
size_t text_utf8_decode(const unsigned char *s, size_t n, int32_t *cp);

/* Stop words: one word per line (UTF-8; '#' starts a comment line; blank lines ignored), each
 * normalised with the same lowercasing/accent rules as o (NULL: defaults). Returns a new set, or
 * NULL with a message "path:line: why" in err. */
struct text_stopwords *text_stopwords_load(const char *path, const struct text_opts *o, char *err,
                                           size_t errlen);
/* A new set from a NULL-terminated array of words (taken as given: pass them lowercased). */
struct text_stopwords *text_stopwords_new(const char *const *words);
/* A new set of common English stop words (the, a, of, and, ...). */
struct text_stopwords *text_stopwords_english(void);
bool text_stopwords_has(const struct text_stopwords *s, const char *word, size_t len);
void text_stopwords_free(struct text_stopwords *s);

#endif /* GANTRY_TEXT_H */
