/* vocab_test.c - vocab.txt loading/saving, WordPiece against a small fixture, built vocabs. */
#include "worker/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"

#ifndef GANTRY_TESTDATA
#error "GANTRY_TESTDATA must name worker/testdata"
#endif

static char tmpdir[64];

static const char *write_tmp(const char *name, const char *content, size_t n)
{
    return test_write_file(tmpdir, name, content, n);
}

/* WordPiece of word, joined as tokens with ' ' (static buffer). */
static const char *wp(const struct vocab *v, const char *word)
{
    static char out[1024];
    int32_t ids[64];
    size_t n = vocab_wordpiece(v, word, strlen(word), ids, 64), k = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n && i < 64; i++)
        k += (size_t)snprintf(out + k, sizeof(out) - k, "%s%s", i ? " " : "",
                              vocab_token(v, ids[i]));
    return out;
}

static void test_load_fixture(void)
{
    char err[256];
    struct vocab *v = vocab_load(GANTRY_TESTDATA "/vocab.txt", err, sizeof(err));

    TEST_CHECK(v != NULL);
    if (!v) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    TEST_EQ_INT(vocab_size(v), 27);
    TEST_EQ_INT(vocab_pad_id(v), 0);
    TEST_EQ_INT(vocab_unk_id(v), 2);
    TEST_EQ_INT(vocab_cls_id(v), 3);
    TEST_EQ_INT(vocab_sep_id(v), 4);
    TEST_EQ_INT(vocab_find(v, "un", 2), 6);
    TEST_EQ_INT(vocab_find(v, "##aff", 5), 7);
    TEST_EQ_INT(vocab_find(v, "nope", 4), -1);
    TEST_EQ_STR(vocab_token(v, 18), "\xe6\x88\x91");
    TEST_CHECK(vocab_token(v, 27) == NULL);
    TEST_CHECK(vocab_token(v, -1) == NULL);

    TEST_EQ_STR(wp(v, "unaffable"), "un ##aff ##able");
    TEST_EQ_STR(wp(v, "wanted"), "want ##ed");
    TEST_EQ_STR(wp(v, "running"), "runn ##ing"); /* longest first: runn, not run */
    TEST_EQ_STR(wp(v, "run"), "run");
    TEST_EQ_STR(wp(v, "players"), "play ##er ##s");
    TEST_EQ_STR(wp(v, "unx"), "un ##x");
    TEST_EQ_STR(wp(v, "unxy"), "[UNK]"); /* one unmatched piece makes the whole word [UNK] */
    TEST_EQ_STR(wp(v, "xyz"), "[UNK]");
    TEST_EQ_STR(wp(v, "\xe6\x88\x91"), "\xe6\x88\x91");
    TEST_EQ_STR(wp(v, "##ed"), "##ed"); /* as BERT: looked up verbatim (the tokenizer splits '#') */
    vocab_free(v);
}

static void test_wordpiece_limits(void)
{
    char err[256], word[512];
    struct vocab *v = vocab_load(GANTRY_TESTDATA "/vocab.txt", err, sizeof(err));
    int32_t ids[4] = {-7, -7, -7, -7};

    if (!TEST_CHECK(v != NULL))
        return;
    /* "un" + 99 x "x": 101 characters, over VOCAB_MAX_WORD_CHARS, so [UNK]. */
    strcpy(word, "un");
    memset(word + 2, 'x', 99);
    word[101] = '\0';
    TEST_EQ_STR(wp(v, word), "[UNK]");
    word[100] = '\0'; /* 100 characters: un + 98 ##x */
    TEST_EQ_INT(vocab_wordpiece(v, word, strlen(word), ids, 2), 99);
    TEST_EQ_INT(ids[0], 6);
    TEST_EQ_INT(ids[1], 26);
    TEST_EQ_INT(ids[2], -7); /* never writes past max */
    TEST_EQ_INT(vocab_wordpiece(v, "", 0, ids, 4), 0);
    TEST_EQ_INT(vocab_wordpiece(v, "xyz", 3, ids, 0), 1); /* counts even with no room */
    /* Bytes that are not UTF-8 are still handled. */
    TEST_EQ_STR(wp(v, "\xff\xfe"), "[UNK]");
    vocab_free(v);
}

static void test_encode_tokens(void)
{
    char err[256];
    struct vocab *v = vocab_load(GANTRY_TESTDATA "/vocab.txt", err, sizeof(err));
    struct text_tokens t;
    int32_t ids[16];
    size_t n;

    if (!TEST_CHECK(v != NULL))
        return;
    text_tokens_init(&t);
    text_tokenize(NULL, "Unaffable, the Caf\xc3\xa9 wanted!", 28, &t);
    n = vocab_encode_tokens(v, &t, ids, 16);
    TEST_EQ_INT(n, 9); /* un ##aff ##able , the cafe want ##ed [UNK] */
    TEST_EQ_INT(ids[0], 6);
    TEST_EQ_INT(ids[8], 2);
    TEST_EQ_INT(ids[3], 14);
    TEST_EQ_INT(ids[5], 23);
    n = vocab_encode_tokens(v, &t, ids, 2);
    TEST_EQ_INT(n, 2);
    text_tokens_cleanup(&t);
    vocab_free(v);
}

static void test_load_errors(void)
{
    char err[256];
    struct vocab *v;
    const char *p;

    p = write_tmp("dup.txt", "[PAD]\n[UNK]\nfoo\nfoo\n", 20);
    TEST_CHECK(vocab_load(p, err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "dup.txt:4: duplicate token \"foo\" (first at line 3)") != NULL);
    p = write_tmp("nounk.txt", "[PAD]\nfoo\n", 10);
    TEST_CHECK(vocab_load(p, err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "no [UNK] token") != NULL);
    p = write_tmp("empty.txt", "[PAD]\n\n[UNK]\n", 13);
    TEST_CHECK(vocab_load(p, err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "empty.txt:2: empty token") != NULL);
    p = write_tmp("bad.txt", "[PAD]\n[UNK]\nx\xff\n", 15);
    TEST_CHECK(vocab_load(p, err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "bad.txt:3: invalid UTF-8") != NULL);
    p = write_tmp("nul.txt", "[PAD]\n[UNK]\nx\0y\n", 16);
    TEST_CHECK(vocab_load(p, err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "nul.txt:3:") != NULL);
    TEST_CHECK(vocab_load("/nonexistent/vocab.txt", err, sizeof(err)) == NULL);
    TEST_CHECK(strstr(err, "/nonexistent/vocab.txt: No such file") != NULL);
    /* CRLF and no final newline are fine. */
    p = write_tmp("crlf.txt", "[PAD]\r\n[UNK]\r\nfoo", 17);
    v = vocab_load(p, err, sizeof(err));
    TEST_CHECK(v != NULL);
    if (v) {
        TEST_EQ_INT(vocab_size(v), 3);
        TEST_EQ_INT(vocab_find(v, "foo", 3), 2);
        TEST_EQ_INT(vocab_cls_id(v), -1);
        vocab_free(v);
    }
}

static void test_build_and_roundtrip(void)
{
    struct vocab_builder *b = vocab_builder_new();
    struct vocab *v, *w;
    struct text_tokens t;
    char err[256], path[256];
    const char *doc1 = "the cat sat on the mat", *doc2 = "The dog sat; the END";

    text_tokens_init(&t);
    text_tokenize(NULL, doc1, strlen(doc1), &t);
    vocab_builder_add(b, &t);
    text_tokenize(NULL, doc2, strlen(doc2), &t);
    vocab_builder_add(b, &t);
    vocab_builder_add_word(b, "[UNK]", 5, 100); /* a special spelled in data is not duplicated */
    /* counts: the 4, sat 2, cat on mat dog ; end 1 */
    TEST_EQ_INT(vocab_builder_distinct(b), 9);

    v = vocab_builder_build(b, 1, 0);
    TEST_EQ_INT(vocab_size(v), 5 + 8);
    TEST_EQ_STR(vocab_token(v, 0), "[PAD]");
    TEST_EQ_STR(vocab_token(v, 1), "[UNK]");
    TEST_EQ_STR(vocab_token(v, 2), "[CLS]");
    TEST_EQ_STR(vocab_token(v, 3), "[SEP]");
    TEST_EQ_STR(vocab_token(v, 4), "[MASK]");
    TEST_EQ_STR(vocab_token(v, 5), "the");
    TEST_EQ_STR(vocab_token(v, 6), "sat");
    TEST_EQ_STR(vocab_token(v, 7), ";"); /* ties in byte order: ; < cat < dog < end < mat < on */
    TEST_EQ_STR(vocab_token(v, 8), "cat");
    TEST_EQ_STR(vocab_token(v, 12), "on");
    TEST_EQ_INT(vocab_unk_id(v), 1);
    TEST_EQ_STR(wp(v, "cats"), "[UNK]"); /* whole words only */

    vocab_free(v);
    v = vocab_builder_build(b, 2, 0); /* min frequency */
    TEST_EQ_INT(vocab_size(v), 7);
    TEST_EQ_INT(vocab_find(v, "cat", 3), -1);
    vocab_free(v);
    v = vocab_builder_build(b, 1, 6); /* max size, specials included */
    TEST_EQ_INT(vocab_size(v), 6);
    TEST_EQ_STR(vocab_token(v, 5), "the");
    vocab_free(v);
    v = vocab_builder_build(b, 1, 2); /* raised to the specials */
    TEST_EQ_INT(vocab_size(v), 5);
    vocab_free(v);

    v = vocab_builder_build(b, 1, 0);
    snprintf(path, sizeof(path), "%s/built.txt", tmpdir);
    TEST_EQ_INT(vocab_save(v, path, err, sizeof(err)), 0);
    w = vocab_load(path, err, sizeof(err));
    TEST_CHECK(w != NULL);
    if (w) {
        TEST_EQ_INT(vocab_size(w), vocab_size(v));
        for (int32_t i = 0; i < vocab_size(v); i++)
            TEST_EQ_STR(vocab_token(w, i), vocab_token(v, i));
        vocab_free(w);
    }
    { /* vocab_dump is the file's bytes: the checkpoint's vocab.txt */
        size_t n;
        char *txt = vocab_dump(v, &n), file[512] = "";
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(file, 1, sizeof(file) - 1, f) : 0;
        if (f)
            fclose(f);
        TEST_EQ_INT((long)n, (long)got);
        TEST_CHECK(n > 0 && memcmp(txt, file, n) == 0 && txt[n] == '\0');
        TEST_CHECK(strncmp(txt, "[PAD]\n[UNK]\n[CLS]\n", 18) == 0);
        free(txt);
    }
    TEST_CHECK(vocab_save(v, "/nonexistent/dir/v.txt", err, sizeof(err)) != 0);
    TEST_CHECK(strstr(err, "/nonexistent/dir/v.txt") != NULL);
    unlink(path);
    vocab_free(v);
    vocab_free(NULL);
    vocab_builder_free(b);
    text_tokens_cleanup(&t);
}

static void test_builder_large(void)
{
    struct vocab_builder *b = vocab_builder_new();
    struct vocab *v;
    char w[32];

    /* Enough words to grow the table several times; count of word i is i % 7 + 1. */
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(w, sizeof(w), "w%d", i);
        vocab_builder_add_word(b, w, (size_t)n, (uint64_t)(i % 7 + 1));
    }
    TEST_EQ_INT(vocab_builder_distinct(b), 20000);
    v = vocab_builder_build(b, 7, 0);
    TEST_EQ_INT(vocab_size(v), 5 + 20000 / 7 + (20000 % 7 > 6));
    TEST_EQ_STR(vocab_token(v, 5), "w1000"); /* the smallest in byte order of those with count 7 */
    TEST_EQ_STR(vocab_token(v, 6), "w10002");
    TEST_EQ_INT(vocab_find(v, "w5", 2), -1); /* count 6 */
    vocab_free(v);
    vocab_builder_free(b);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gantry-vocab-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_load_fixture);
    TEST_RUN(test_wordpiece_limits);
    TEST_RUN(test_encode_tokens);
    TEST_RUN(test_load_errors);
    TEST_RUN(test_build_and_roundtrip);
    TEST_RUN(test_builder_large);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return test_summary();
}
