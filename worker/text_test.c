/* text_test.c - tokenizer: known tokenizations (ASCII, Latin, Greek, Cyrillic, CJK, punctuation),
 * invalid UTF-8, caps, stop words. */
#include "worker/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/test.h"

/* Tokenizes s with o and returns the tokens joined by '|' (static buffer). */
static const char *tok_join(const struct text_opts *o, const char *s, size_t n,
                            struct text_tokens *t)
{
    static char out[4096];
    size_t k = 0;

    text_tokenize(o, s, n, t);
    out[0] = '\0';
    for (size_t i = 0; i < t->n; i++) {
        k += (size_t)snprintf(out + k, sizeof(out) - k, "%s%s", i ? "|" : "", text_token(t, i));
        if (k >= sizeof(out))
            break;
    }
    return out;
}

#define TOK(o, s, want) TEST_EQ_STR(tok_join((o), (s), strlen(s), &t), (want))

static void test_ascii_and_punct(void)
{
    struct text_tokens t;
    struct text_opts o;

    text_tokens_init(&t);
    text_opts_default(&o);
    TOK(&o, "Hello, World!", "hello|,|world|!");
    TOK(&o, "  multiple\t\n spaces\r\n", "multiple|spaces");
    TOK(&o, "don't e-mail me@x.com $100", "don|'|t|e|-|mail|me|@|x|.|com|$|100");
    TOK(&o, "\xe2\x80\x9cquoted\xe2\x80\x9d\xe2\x80\xa6",
        "\xe2\x80\x9c|quoted|\xe2\x80\x9d|\xe2\x80\xa6");
    TOK(&o,
        "a\xc2\xa0"
        "b\xe3\x80\x80"
        "c\xe2\x80\x89"
        "d",
        "a|b|c|d"); /* NBSP, ideographic, thin */
    TOK(&o, "", "");
    TOK(&o, " \t ", "");
    TEST_EQ_INT(t.n, 0);
    TOK(&o, "\xc2\xbfQu\xc3\xa9?", "\xc2\xbf|que|?"); /* ¿Qué? */
    TOK(&o, "100\xe2\x82\xac", "100|\xe2\x82\xac");   /* euro sign is a symbol token */
    TOK(&o, "hi\xf0\x9f\x98\x80there", "hi|\xf0\x9f\x98\x80|there"); /* emoji */
    o.split_punct = false;
    TOK(&o, "don't stop.", "don't|stop.");
    text_tokens_cleanup(&t);
}

static void test_case_and_accents(void)
{
    struct text_tokens t;
    struct text_opts o;

    text_tokens_init(&t);
    text_opts_default(&o);
    TOK(&o, "Caf\xc3\xa9 \xc3\x91\x61nd\xc3\xba \xc3\x80\xc3\x89\xc3\x8e\xc3\x95\xc3\x9c",
        "cafe|nandu|aeiou");
    TOK(&o,
        "Stra\xc3\x9f"
        "e \xc3\x86sir \xc3\x98re",
        "stra\xc3\x9f"
        "e|\xc3\xa6sir|\xc3\xb8re"); /* ß æ ø kept */
    TOK(&o, "\xc5\x81\xc3\xb3\x64\xc5\xba \xc4\x8c\x65\x73k\xc3\xbd \xc5\xa0ID", "lodz|cesky|sid");
    TOK(&o, "e\xcc\x81t\xc3\xa9", "ete"); /* NFD combining acute dropped */
    TOK(&o, "\xce\x9a\xce\x91\xce\x9b\xce\x97\xce\x9c\xce\x88\xce\xa1\xce\x91",
        "\xce\xba\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xb5\xcf\x81\xce\xb1"); /* ΚΑΛΗΜΈΡΑ -> καλημερα
                                                                              */
    TOK(&o, "\xd0\x9f\xd0\xa0\xd0\x98\xd0\x92\xd0\x95\xd0\xa2 \xd0\x81\xd0\xbb\xd0\xba\xd0\xb0",
        "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82|\xd1\x91\xd0\xbb\xd0\xba\xd0\xb0"); /* ПРИВЕТ
                                                                                                 Ёлка
                                                                                               */
    TOK(&o, "\xef\xbc\xa1\xef\xbc\xa2", "\xef\xbd\x81\xef\xbd\x82"); /* fullwidth AB -> ab */
    o.strip_accents = false;
    TOK(&o, "Caf\xc3\x89", "caf\xc3\xa9");
    o.lowercase = false;
    TOK(&o, "Caf\xc3\x89 ABC", "Caf\xc3\x89|ABC");
    text_tokens_cleanup(&t);
}

static void test_cjk(void)
{
    struct text_tokens t;
    struct text_opts o;

    text_tokens_init(&t);
    text_opts_default(&o);
    /* 我爱北京abc天安门。 */
    TOK(&o,
        "\xe6\x88\x91\xe7\x88\xb1\xe5\x8c\x97\xe4\xba\xac"
        "abc"
        "\xe5\xa4\xa9\xe5\xae\x89\xe9\x97\xa8\xe3\x80\x82",
        "\xe6\x88\x91|\xe7\x88\xb1|\xe5\x8c\x97|\xe4\xba\xac|abc|\xe5\xa4\xa9|\xe5\xae\x89|"
        "\xe9\x97\xa8|\xe3\x80\x82");
    /* カタカナ: kana one per token */
    TOK(&o, "\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
        "\xe3\x82\xab|\xe3\x82\xbf|\xe3\x82\xab|\xe3\x83\x8a");
    /* 안녕 하세요: Hangul stays in words */
    TOK(&o, "\xec\x95\x88\xeb\x85\x95 \xed\x95\x98\xec\x84\xb8\xec\x9a\x94",
        "\xec\x95\x88\xeb\x85\x95|\xed\x95\x98\xec\x84\xb8\xec\x9a\x94");
    /* U+20000 (4-byte ideograph) */
    TOK(&o,
        "a\xf0\xa0\x80\x80"
        "b",
        "a|\xf0\xa0\x80\x80|b");
    o.split_cjk = false;
    TOK(&o, "\xe6\x88\x91\xe7\x88\xb1", "\xe6\x88\x91\xe7\x88\xb1");
    text_tokens_cleanup(&t);
}

static void test_invalid_utf8(void)
{
    struct text_tokens t;
    struct text_opts o;
    int32_t cp;

    text_tokens_init(&t);
    text_opts_default(&o);
    TOK(&o,
        "ab\xff"
        "cd\xc3",
        "abcd");
    TEST_EQ_INT(t.n_invalid, 2);
    TOK(&o, "x\xc0\xafy", "xy"); /* overlong '/' */
    TEST_EQ_INT(t.n_invalid, 2);
    TOK(&o, "x\xed\xa0\x80y", "xy"); /* surrogate U+D800 */
    TEST_EQ_INT(t.n_invalid, 3);
    TOK(&o, "x\xf4\x90\x80\x80y", "xy"); /* > U+10FFFF */
    TEST_EQ_INT(t.n_invalid, 4);
    TOK(&o, "\xe6\x88", ""); /* truncated sequence at the end */
    TEST_EQ_INT(t.n_invalid, 2);
    TEST_EQ_STR(tok_join(&o, "a\0b", 3, &t), "a|b"); /* NUL separates */
    TOK(&o,
        "ab\xe2\x80\x8b"
        "cd\xc2\xad"
        "ef\xef\xbb\xbf",
        "abcdef"); /* ZWSP, soft hyphen, BOM */
    TOK(&o,
        "a\x01\x7f"
        "b",
        "a|b"); /* control characters separate */
    TEST_EQ_INT(text_utf8_decode((const unsigned char *)"\xe2\x82\xac", 3, &cp), 3);
    TEST_EQ_INT(cp, 0x20AC);
    TEST_EQ_INT(text_utf8_decode((const unsigned char *)"\xe2\x82\xac", 2, &cp), 1);
    TEST_EQ_INT(cp, -1);
    TEST_EQ_INT(text_utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
    TEST_EQ_INT(cp, 0x1F600);
    text_tokens_cleanup(&t);
}

static void test_caps(void)
{
    struct text_tokens t;
    struct text_opts o;
    char big[1000];

    text_tokens_init(&t);
    text_opts_default(&o);
    memset(big, 'a', sizeof(big));
    text_tokenize(&o, big, sizeof(big), &t);
    TEST_EQ_INT(t.n, 1);
    TEST_EQ_INT(t.len[0], TEXT_MAX_TOKEN_BYTES);
    TEST_EQ_INT(strlen(text_token(&t, 0)), TEXT_MAX_TOKEN_BYTES);
    for (size_t i = 0; i + 1 < sizeof(big); i += 2) { /* "é" x 500, no accent stripping */
        big[i] = (char)0xc3;
        big[i + 1] = (char)0xa9;
    }
    o.strip_accents = false;
    text_tokenize(&o, big, sizeof(big), &t);
    TEST_EQ_INT(t.n, 1);
    TEST_EQ_INT(t.len[0], TEXT_MAX_TOKEN_BYTES); /* cut at a character boundary */
    TEST_CHECK(((unsigned char)text_token(&t, 0)[t.len[0] - 1]) == 0xa9);

    text_opts_default(&o);
    o.max_tokens = 3;
    TOK(&o, "one two three four five", "one|two|three");
    TEST_CHECK(t.truncated);
    TOK(&o, "one, two", "one|,|two");
    TEST_CHECK(!t.truncated);
    TOK(&o, "one two three", "one|two|three");
    TEST_CHECK(!t.truncated);
    text_tokens_cleanup(&t);
}

static void test_stopwords(void)
{
    struct text_tokens t;
    struct text_opts o;
    struct text_stopwords *sw;
    char dir[] = "/tmp/gantry-text-XXXXXX", path[256], err[256];
    FILE *f;

    text_tokens_init(&t);
    text_opts_default(&o);
    sw = text_stopwords_english();
    o.stop = sw;
    TOK(&o, "The cat is on THE mat.", "cat|mat|.");
    TEST_CHECK(text_stopwords_has(sw, "the", 3));
    TEST_CHECK(!text_stopwords_has(sw, "cat", 3));
    TEST_CHECK(!text_stopwords_has(sw, "th", 2));
    text_stopwords_free(sw);

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/stop.txt", dir);
    f = fopen(path, "w");
    fputs("# a comment\n\n\xc3\x9c"
          "BER\nTHE\r\nthe\n",
          f);
    fclose(f);
    sw = text_stopwords_load(path, NULL, err, sizeof(err));
    TEST_CHECK(sw != NULL);
    if (sw) {
        o.stop = sw;
        TOK(&o,
            "\xc3\xbc"
            "ber the Alles",
            "alles");
        text_stopwords_free(sw);
    }
    f = fopen(path, "w");
    fputs("ok\nbad\xff\n", f);
    fclose(f);
    sw = text_stopwords_load(path, NULL, err, sizeof(err));
    TEST_CHECK(sw == NULL);
    TEST_CHECK(strstr(err, "stop.txt:2: invalid UTF-8") != NULL);
    unlink(path);
    sw = text_stopwords_load(path, NULL, err, sizeof(err));
    TEST_CHECK(sw == NULL);
    TEST_CHECK(strstr(err, "No such file") != NULL);
    rmdir(dir);
    text_stopwords_free(NULL);
    text_tokens_cleanup(&t);
}

static void test_reuse(void)
{
    struct text_tokens t;
    struct buf b;

    /* Many tokens force growth of both arrays; reusing t must reset it. */
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 5000; i++)
        TEST_CHECK(buf_printf(&b, "w%d ", i) == 0);
    text_tokens_init(&t);
    text_tokenize(NULL, buf_ptr(&b), buf_len(&b), &t);
    TEST_EQ_INT(t.n, 5000);
    TEST_EQ_STR(text_token(&t, 4999), "w4999");
    text_tokenize(NULL, "x", 1, &t);
    TEST_EQ_INT(t.n, 1);
    TEST_EQ_STR(text_token(&t, 0), "x");
    text_tokens_cleanup(&t);
    buf_cleanup(&b);
}

int main(void)
{
    TEST_RUN(test_ascii_and_punct);
    TEST_RUN(test_case_and_accents);
    TEST_RUN(test_cjk);
    TEST_RUN(test_invalid_utf8);
    TEST_RUN(test_caps);
    TEST_RUN(test_stopwords);
    TEST_RUN(test_reuse);
    return test_summary();
}
