/*
 * text_fuzz.c - libFuzzer target for the tokenizer and WordPiece.
 *
 * Input: byte 0 sets the tokenizer options (lowercase, accents, CJK, punctuation, stop words,
 * a token cap); the rest is a document of any bytes. Checks: tokens are non-empty, NUL-terminated,
 * valid UTF-8, at most TEXT_MAX_TOKEN_BYTES long, at most max_tokens of them; WordPiece ids are
 * in range, and a fixed-length encoding, of one text or of a pair, is padded correctly. The
 * vocab is built in memory with whole words and "##" continuations so both WordPiece paths are
 * exercised.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fuzz.h"
#include "worker/dataset.h"
#include "worker/text.h"
#include "worker/vocab.h"

static struct vocab *fuzz_vocab(void)
{
    static const char *const words[] = {"un",    "##aff", "##able", "run",          "##n",
                                        "##ing", "a",     "##a",    "\xe6\x88\x91", "##\xc3\xa9",
                                        "caf",   "the",   NULL};
    struct vocab_builder *b = vocab_builder_new();
    struct vocab *v;

    for (int i = 0; words[i]; i++)
        vocab_builder_add_word(b, words[i], strlen(words[i]), 1);
    v = vocab_builder_build(b, 1, 0);
    vocab_builder_free(b);
    return v;
}

static void check_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        i += text_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        FUZZ_CHECK(cp > 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct vocab *v;
    static struct text_stopwords *stop;
    struct text_tokens t;
    struct text_opts o;
    int32_t ids[64], row[16];
    size_t n, len;

    if (size < 1)
        return 0;
    if (!v) {
        v = fuzz_vocab();
        stop = text_stopwords_english();
    }
    text_opts_default(&o);
    o.lowercase = !(data[0] & 1);
    o.strip_accents = !(data[0] & 2);
    o.split_cjk = !(data[0] & 4);
    o.split_punct = !(data[0] & 8);
    o.stop = (data[0] & 16) ? stop : NULL;
    o.max_tokens = (data[0] >> 5) * 3; /* 0 (no cap) .. 21 */
    text_tokens_init(&t);
    n = text_tokenize(&o, (const char *)data + 1, size - 1, &t);
    FUZZ_CHECK(n == t.n);
    FUZZ_CHECK(o.max_tokens == 0 || n <= o.max_tokens);
    for (size_t i = 0; i < n; i++) {
        const char *tok = text_token(&t, i);
        FUZZ_CHECK(t.len[i] > 0 && t.len[i] <= TEXT_MAX_TOKEN_BYTES);
        FUZZ_CHECK(strlen(tok) == t.len[i]);
        check_utf8(tok, t.len[i]);
        size_t np = vocab_wordpiece(v, tok, t.len[i], ids, 64);
        FUZZ_CHECK(np >= 1);
        for (size_t k = 0; k < np && k < 64; k++)
            FUZZ_CHECK(ids[k] >= 0 && ids[k] < vocab_size(v));
    }
    n = vocab_encode_tokens(v, &t, ids, 64);
    FUZZ_CHECK(n <= 64);
    len = dataset_encode_text(v, &o, (const char *)data + 1, size - 1, NULL, 0, 16, true, &t, row,
                              NULL);
    FUZZ_CHECK(len >= 2 && len <= 16);
    FUZZ_CHECK(row[0] == vocab_cls_id(v) && row[len - 1] == vocab_sep_id(v));
    for (size_t i = len; i < 16; i++)
        FUZZ_CHECK(row[i] == vocab_pad_id(v));
    {
        /* the document's two halves as a text pair: [CLS] a [SEP] b [SEP]; uncut, as long as
         * the two encoded alone less the one [CLS] */
        const char *a = (const char *)data + 1, *b = a + (size - 1) / 2;
        size_t la, lb;
        bool cut, cut_a, cut_b;
        len = dataset_encode_text(v, &o, a, (size_t)(b - a), b, size - 1 - (size_t)(b - a), 16,
                                  true, &t, row, &cut);
        FUZZ_CHECK(len >= 3 && len <= 16);
        FUZZ_CHECK(row[0] == vocab_cls_id(v) && row[len - 1] == vocab_sep_id(v));
        for (size_t i = len; i < 16; i++)
            FUZZ_CHECK(row[i] == vocab_pad_id(v));
        la = dataset_encode_text(v, &o, a, (size_t)(b - a), NULL, 0, 16, true, &t, row, &cut_a);
        lb = dataset_encode_text(v, &o, b, size - 1 - (size_t)(b - a), NULL, 0, 16, true, &t, row,
                                 &cut_b);
        /* (a token cap shortens single texts only: a pair's are counted whole) */
        FUZZ_CHECK(cut || o.max_tokens || (!cut_a && !cut_b && len == la + lb - 1));
        FUZZ_CHECK(!cut || len == 16);
    }
    text_tokens_cleanup(&t);
    return 0;
}
