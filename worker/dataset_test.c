/* dataset_test.c - JSONL/TSV line parsing, malformed lines (skipped and counted, or fatal with
 * file:line), label maps, fixed-length encoding. */
#include "worker/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "common/test.h"

#ifndef GANTRY_TESTDATA
#error "GANTRY_TESTDATA must name worker/testdata"
#endif

static char tmpdir[64];

static const char *write_tmp(const char *name, const char *content, size_t n)
{
    return test_write_file(tmpdir, name, content, n);
}

/* Parses one line; returns the parser's status and leaves text/label/why in static storage. */
static struct dataset_line g;
static char g_why[256];
static int parse_with(enum dataset_format fmt, const struct dataset_opts *o, const char *line,
                      size_t len)
{
    free(g.text), free(g.pair), free(g.multi);
    g_why[0] = '\0';
    return dataset_parse_line(fmt, o, line, len, &g, g_why, sizeof(g_why));
}
static int parse(enum dataset_format fmt, const char *line, size_t len)
{
    return parse_with(fmt, NULL, line, len);
}
#define PARSE(fmt, s) parse((fmt), (s), strlen(s))
#define PARSE_O(fmt, o, s) parse_with((fmt), (o), (s), strlen(s))

static void test_parse_jsonl(void)
{
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"Hi\\nthere\", \"label\": \"spam\", \"x\": 1}"),
                0);
    TEST_EQ_STR(g.text, "Hi\nthere");
    TEST_EQ_INT(g.text_len, 8);
    TEST_EQ_STR(g.label, "spam");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"label\": 1, \"text\": \"\"}\r"), 0); /* int label, CRLF */
    TEST_EQ_STR(g.label, "1");
    TEST_EQ_STR(g.text, "");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "   "), 1);
    TEST_EQ_INT(PARSE(DATASET_JSONL, ""), 1);

    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\", \"label\": \"b\""), -1);
    TEST_CHECK(strstr(g_why, "bad JSON") != NULL);
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\", \"label\": \"b\"} trailing"), -1);
    TEST_EQ_INT(PARSE(DATASET_JSONL, "[1, 2]"), -1);
    TEST_CHECK(strstr(g_why, "not a JSON object") != NULL);
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"label\": \"spam\"}"), -1);
    TEST_EQ_STR(g_why, "missing field \"text\"");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": 5, \"label\": \"spam\"}"), -1);
    TEST_EQ_STR(g_why, "non-string field \"text\"");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\"}"), -1);
    TEST_EQ_STR(g_why, "missing field \"label\"");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\", \"label\": [1]}"), -1);
    TEST_EQ_STR(g_why, "non-string field \"label\"");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\", \"label\": \"\"}"), -1);
    TEST_EQ_STR(g_why, "empty label");
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"a\\u0000b\", \"label\": \"x\"}"), -1);
    TEST_EQ_INT(PARSE(DATASET_JSONL, "{\"text\": \"caf\xc3\xa9\xff\", \"label\": \"x\"}"), -1);
    TEST_EQ_STR(g_why, "invalid UTF-8 at byte 16");
    TEST_EQ_INT(parse(DATASET_JSONL, "{\"text\": \"a\0\", \"label\": \"x\"}", 27), -1);
    TEST_EQ_STR(g_why, "NUL byte at byte 12");
    TEST_EQ_INT(PARSE(DATASET_AUTO, "{}"), -1);
    free(g.text);
    g.text = NULL;
}

/* label_optional (gantry-predict): no label, null or "" is an unlabelled line; other labels and
 * the text are checked as in training; the field names come from the options. */
static void test_parse_label_optional(void)
{
    struct dataset_opts o;
    const char *lines[] = {"{\"body\": \"a\"}", "{\"body\": \"a\", \"y\": null}",
                           "{\"body\": \"a\", \"y\": \"\"}"};

    dataset_opts_default(&o);
    o.text_field = "body";
    o.label_field = "y";
    o.label_optional = true;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        g.label[0] = 'x';
        TEST_EQ_INT(parse_with(DATASET_JSONL, &o, lines[i], strlen(lines[i])), 0);
        TEST_EQ_STR(g.text, "a");
        TEST_EQ_STR(g.label, "");
    }
    const char *ok = "{\"body\": \"b\", \"y\": 7}";
    TEST_EQ_INT(parse_with(DATASET_JSONL, &o, ok, strlen(ok)), 0);
    TEST_EQ_STR(g.label, "7");
    const char *bad[] = {"{\"body\": \"a\", \"y\": [1]}", "{\"text\": \"a\"}"};
    const char *want[] = {"non-string field \"y\"", "missing field \"body\""};
    for (size_t i = 0; i < 2; i++) {
        TEST_EQ_INT(parse_with(DATASET_JSONL, &o, bad[i], strlen(bad[i])), -1);
        TEST_EQ_STR(g_why, want[i]);
    }
    o.label_optional = false;
    TEST_EQ_INT(parse_with(DATASET_JSONL, &o, lines[0], strlen(lines[0])), -1);
    TEST_EQ_STR(g_why, "missing field \"y\"");
}

static void test_parse_tsv(void)
{
    TEST_EQ_INT(PARSE(DATASET_TSV, "hello\tworld\tham"), 0); /* last field is the label */
    TEST_EQ_STR(g.text, "hello\tworld");
    TEST_EQ_STR(g.label, "ham");
    TEST_EQ_INT(PARSE(DATASET_TSV, "a\\tb\\nc\\\\d\\x\tspam \r"), 0);
    TEST_EQ_STR(g.text, "a\tb\nc\\d\\x");
    TEST_EQ_STR(g.label, "spam");
    TEST_EQ_INT(PARSE(DATASET_TSV, "text\tlabel"), 1);
    TEST_EQ_INT(PARSE(DATASET_TSV, "no tab here"), -1);
    TEST_EQ_STR(g_why, "no tab; want text<TAB>label");
    TEST_EQ_INT(PARSE(DATASET_TSV, "text only\t"), -1);
    TEST_EQ_STR(g_why, "empty label");
    TEST_EQ_INT(PARSE(DATASET_TSV, "\xc3\x28\tham"), -1);
    TEST_EQ_STR(g_why, "invalid UTF-8 at byte 1");
    free(g.text);
    g.text = NULL;
}

/* Text pairs: JSONL's second field named by the options, TSV's field before the label. */
static void test_parse_pairs(void)
{
    struct dataset_opts o;

    dataset_opts_default(&o);
    o.text_field = "premise";
    o.pair_field = "hypothesis";
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"premise\": \"A man\", \"hypothesis\": \"Someone\", "
                                         "\"label\": \"entailment\"}"), 0);
    TEST_EQ_STR(g.text, "A man");
    TEST_EQ_STR(g.pair, "Someone");
    TEST_EQ_INT(g.pair_len, 7);
    TEST_EQ_STR(g.label, "entailment");
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o,
                        "{\"premise\": \"a\", \"hypothesis\": \"\", \"label\": 0}"), 0);
    TEST_EQ_STR(g.pair, "");
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"premise\": \"a\", \"label\": 0}"), -1);
    TEST_EQ_STR(g_why, "missing field \"hypothesis\" (the pair's second text)");
    TEST_CHECK(g.text == NULL && g.pair == NULL);
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"premise\": \"a\", \"hypothesis\": 3, \"label\": 0}"),
                -1);
    TEST_EQ_STR(g_why, "non-string field \"hypothesis\" (the pair's second text)");
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "[7]"), -1);
    TEST_EQ_STR(g_why, "not a JSON object; want {\"premise\": ..., \"hypothesis\": ..., "
                       "\"label\": ...}");

    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "a\tb\\tc\td e\tyes"), 0);
    TEST_EQ_STR(g.text, "a\tb\tc"); /* the text is all before the pair's field */
    TEST_EQ_STR(g.pair, "d e");
    TEST_EQ_STR(g.label, "yes");
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "text\ttext_pair\tlabel"), 1);
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "\t\tno"), 0); /* two empty texts */
    TEST_EQ_INT(g.text_len + g.pair_len, 0);
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "only one\tyes"), -1);
    TEST_EQ_STR(g_why, "one tab; want text<TAB>pair<TAB>label");
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "none"), -1);
    TEST_EQ_STR(g_why, "no tab; want text<TAB>pair<TAB>label");
    TEST_EQ_INT(PARSE(DATASET_TSV, "a\tb\tyes"), 0); /* without pairs: one text */
    TEST_CHECK(g.pair == NULL);
    TEST_EQ_STR(g.text, "a\tb");
    free(g.text);
    g.text = NULL;
}

static void test_label_map(void)
{
    struct label_map m;
    int remap[3];

    label_map_init(&m);
    TEST_EQ_INT(label_map_add(&m, "spam", 4), 0);
    TEST_EQ_INT(label_map_add(&m, "ham", 3), 1);
    TEST_EQ_INT(label_map_add(&m, "spam", 4), 0);
    TEST_EQ_INT(label_map_add(&m, "eggs", 4), 2);
    TEST_EQ_INT(label_map_add(&m, "", 0), -1);
    TEST_EQ_INT(label_map_find(&m, "ham", 3), 1);
    TEST_EQ_INT(label_map_find(&m, "ha", 2), -1);
    label_map_sort(&m, remap);
    TEST_EQ_STR(label_map_name(&m, 0), "eggs");
    TEST_EQ_STR(label_map_name(&m, 1), "ham");
    TEST_EQ_STR(label_map_name(&m, 2), "spam");
    TEST_CHECK(label_map_name(&m, 3) == NULL);
    TEST_EQ_INT(remap[0], 2); /* spam: 0 -> 2 */
    TEST_EQ_INT(remap[1], 1);
    TEST_EQ_INT(remap[2], 0);
    m.frozen = true;
    TEST_EQ_INT(label_map_add(&m, "new", 3), -1);
    TEST_EQ_INT(label_map_add(&m, "ham", 3), 1);
    label_map_cleanup(&m);
}

/* A JSONL file with one of each kind of bad line, between good ones. */
static const char mixed[] =
    "{\"text\": \"Buy now!!!\", \"label\": \"spam\"}\n"   /* 1 ok */
    "{\"text\": \"Lunch?\", \"label\": \"ham\"}\n"        /* 2 ok */
    "{\"text\": \"broken\", \n"                           /* 3 bad JSON */
    "{\"label\": \"ham\"}\n"                              /* 4 missing text */
    "\n"                                                  /* 5 blank: ignored */
    "{\"text\": \"x\", \"label\": \"eggs\"}\n"            /* 6 unknown label when frozen */
    "{\"text\": \"bad \xff byte\", \"label\": \"ham\"}\n" /* 7 invalid UTF-8 */
    "{\"text\": \"last\", \"label\": \"ham\"}";           /* 8 ok, no final newline */

/* Integer labels index a frozen map (data.labelNames): "0".."n-1" only; names still win. */
static void test_label_index(void)
{
    struct label_map m;

    label_map_init(&m);
    label_map_add(&m, "entailment", 10);
    label_map_add(&m, "neutral", 7);
    label_map_add(&m, "1", 1); /* a name that looks like an index is the name */
    m.frozen = true;
    TEST_EQ_INT(label_map_find_or_index(&m, "0", 1), 0);
    TEST_EQ_INT(label_map_find_or_index(&m, "neutral", 7), 1);
    TEST_EQ_INT(label_map_find_or_index(&m, "1", 1), 2);
    TEST_EQ_INT(label_map_find_or_index(&m, "2", 1), 2);
    TEST_EQ_INT(label_map_find_or_index(&m, "3", 1), -1);
    TEST_EQ_INT(label_map_find_or_index(&m, "01", 2), -1);
    TEST_EQ_INT(label_map_find_or_index(&m, "-1", 2), -1);
    TEST_EQ_INT(label_map_find_or_index(&m, "1x", 2), -1);
    TEST_EQ_INT(label_map_find_or_index(&m, "", 0), -1);
    label_map_cleanup(&m);
}

static void test_load_malformed(void)
{
    struct dataset ds;
    struct label_map m;
    struct dataset_opts o;
    char err[512];
    const char *p = write_tmp("mixed.jsonl", mixed, sizeof(mixed) - 1);

    dataset_opts_default(&o);
    o.quiet = true;
    label_map_init(&m);
    label_map_add(&m, "spam", 4);
    label_map_add(&m, "ham", 3);
    m.frozen = true;

    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 3);
    TEST_EQ_INT(ds.n_lines, 8);
    TEST_EQ_INT(ds.n_malformed, 4);
    TEST_EQ_STR(ds.ex[0].text, "Buy now!!!");
    TEST_EQ_INT(ds.ex[0].label, 0);
    TEST_EQ_INT(ds.ex[1].label, 1);
    TEST_EQ_STR(ds.ex[2].text, "last");
    dataset_cleanup(&ds);

    /* Strict: the first bad line fails the load with file:line. */
    o.strict = true;
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "mixed.jsonl:3: bad JSON") != NULL);
    TEST_EQ_INT(ds.n, 2); /* what came before is kept */
    dataset_cleanup(&ds);

    /* The unknown label, strict, after removing the lines before it. */
    p = write_tmp("unk.jsonl",
                  "{\"text\": \"a\", \"label\": \"ham\"}\n{\"text\": \"x\", \"label\": \"eggs\"}\n",
                  62);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "unk.jsonl:2: unknown label \"eggs\"") != NULL);
    dataset_cleanup(&ds);

    /* An open map learns labels in order of appearance. */
    label_map_cleanup(&m);
    label_map_init(&m);
    o.strict = false;
    dataset_init(&ds);
    p = write_tmp("mixed.jsonl", mixed, sizeof(mixed) - 1);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 4);
    TEST_EQ_INT(m.n, 3);
    TEST_EQ_STR(label_map_name(&m, 2), "eggs");
    dataset_cleanup(&ds);

    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, "/nonexistent/x.jsonl", &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "/nonexistent/x.jsonl: No such file") != NULL);
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
}

static void test_load_overlong(void)
{
    struct dataset ds;
    struct label_map m;
    struct dataset_opts o;
    char err[512];
    size_t big = 300000, n = 0; /* longer than the reader's 64 KiB window */
    char *content = malloc(big + 200);
    const char *p;

    n += (size_t)sprintf(content + n, "short\tham\n");
    for (size_t i = 0; i < big; i++)
        content[n++] = 'x';
    n += (size_t)sprintf(content + n, "\tspam\nafter\tham\n");
    p = write_tmp("long.tsv", content, n);

    dataset_opts_default(&o);
    o.quiet = true;
    o.max_line = 1000;
    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 2);
    TEST_EQ_INT(ds.n_malformed, 1);
    TEST_EQ_INT(ds.n_lines, 3);
    TEST_EQ_STR(ds.ex[1].text, "after"); /* the reader resynchronised on the next line */
    dataset_cleanup(&ds);
    o.strict = true;
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "long.tsv:2: line longer than 1000 bytes") != NULL);
    dataset_cleanup(&ds);
    /* With the default limit the same line is fine. */
    o.max_line = 0;
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 3);
    TEST_EQ_INT(ds.ex[1].text_len, big);
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
    free(content);
}

static void test_fixtures(void)
{
    struct dataset ds;
    struct label_map m;
    char err[512];

    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, GANTRY_TESTDATA "/tiny.jsonl", NULL, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(dataset_load(&ds, GANTRY_TESTDATA "/tiny.tsv", NULL, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n_malformed, 0);
    TEST_EQ_INT(ds.n, 12);
    TEST_EQ_INT(m.n, 2);
    /* Both files hold the same six examples. */
    for (size_t i = 0; i < 6 && ds.n == 12; i++) {
        TEST_EQ_STR(ds.ex[i].text, ds.ex[i + 6].text);
        TEST_EQ_INT(ds.ex[i].label, ds.ex[i + 6].label);
    }
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
}

static void test_encode(void)
{
    struct dataset ds;
    struct label_map m;
    struct dataset_encoded e;
    struct vocab *v;
    struct text_opts to;
    char err[512];
    const char *p;
    static const char data[] = "Unaffable running!\tham\n"
                               "\tspam\n"
                               "the the the the the the the the\tham\n";

    v = vocab_load(GANTRY_TESTDATA "/vocab.txt", err, sizeof(err));
    if (!TEST_CHECK(v != NULL))
        return;
    p = write_tmp("enc.tsv", data, sizeof(data) - 1);
    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, NULL, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 3);
    text_opts_default(&to);
    TEST_EQ_INT(dataset_encode(&ds, v, &to, 8, true, &e), 0);
    {
        /* [CLS] un ##aff ##able runn ##ing [UNK](!) [SEP] */
        const int32_t want0[8] = {3, 6, 7, 8, 11, 12, 2, 4};
        const int32_t want1[8] = {3, 4, 0, 0, 0, 0, 0, 0};
        const int32_t want2[8] = {3, 16, 16, 16, 16, 16, 16, 4};
        for (int t = 0; t < 8; t++) {
            TEST_EQ_INT(e.ids[t], want0[t]);
            TEST_EQ_INT(e.ids[8 + t], want1[t]);
            TEST_EQ_INT(e.ids[16 + t], want2[t]);
            TEST_EQ_INT(e.mask[8 + t], t < 2);
        }
    }
    TEST_EQ_INT(e.len[0], 8);
    TEST_EQ_INT(e.len[1], 2);
    TEST_EQ_INT(e.len[2], 8);
    TEST_EQ_INT(e.labels[1], 1);
    TEST_EQ_INT(e.n_truncated, 1); /* 8 x "the" does not fit in 6 */
    TEST_EQ_INT(e.n_tokens, 18);
    TEST_EQ_INT(e.n_unk, 1);
    dataset_encoded_cleanup(&e);

    /* Truncation inside a word's pieces, and no specials. */
    TEST_EQ_INT(dataset_encode(&ds, v, &to, 2, false, &e), 0);
    TEST_EQ_INT(e.ids[0], 6);
    TEST_EQ_INT(e.ids[1], 7);
    TEST_EQ_INT(e.len[1], 1);
    TEST_EQ_INT(e.ids[2], 2); /* empty text without specials: one [UNK] */
    TEST_EQ_INT(e.ids[3], 0);
    TEST_EQ_INT(e.n_truncated, 2);
    dataset_encoded_cleanup(&e);
    TEST_EQ_INT(dataset_encode(&ds, v, &to, 1, true, &e), -1);

    /* The user's token cap is applied before the length. */
    to.max_tokens = 1;
    TEST_EQ_INT(dataset_encode(&ds, v, &to, 8, true, &e), 0);
    TEST_EQ_INT(e.len[0], 5); /* [CLS] un ##aff ##able [SEP] */
    TEST_EQ_INT(e.len[2], 3);
    dataset_encoded_cleanup(&e);

    /* A vocab built from the data. */
    {
        struct vocab_builder *b = vocab_builder_new();
        struct vocab *bv;
        text_opts_default(&to);
        dataset_count_words(&ds, &to, b);
        bv = vocab_builder_build(b, 1, 0);
        TEST_EQ_INT(vocab_size(bv), 5 + 4); /* the unaffable running ! */
        TEST_EQ_STR(vocab_token(bv, 5), "the");
        TEST_EQ_INT(dataset_encode(&ds, bv, &to, 6, true, &e), 0);
        TEST_EQ_INT(e.ids[1], vocab_find(bv, "unaffable", 9));
        TEST_EQ_INT(e.n_unk, 0);
        dataset_encoded_cleanup(&e);
        vocab_free(bv);
        vocab_builder_free(b);
    }
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
    vocab_free(v);
}

/* Pair encoding: [CLS] a [SEP] b [SEP], cut the way Hugging Face's "longest_first" cuts
 * (hack/hf_tokenizer_check.py compares with the library itself). */
static void test_encode_pairs(void)
{
    struct text_tokens tok;
    struct vocab *v;
    char err[256];
    int32_t row[8];
    bool cut;
    struct {
        const char *a, *b;
        size_t max_len;
        bool specials, cut;
        size_t len;
        int32_t want[8];
    } cases[] = {
        /* all fits: 3 + 2 pieces in 8 - 3 */
        {"unaffable", "the run", 8, true, false, 8, {3, 6, 7, 8, 4, 16, 13, 4}},
        /* room 4: the shorter (2) takes at most half, so it stays whole */
        {"unaffable", "the run", 7, true, true, 7, {3, 6, 7, 4, 16, 13, 4, 0}},
        {"the run", "unaffable", 7, true, true, 7, {3, 16, 13, 4, 6, 7, 4, 0}},
        /* room 5, 5 and 3 pieces: halves, the longer gets the odd one */
        {"the the the the the", "run run run", 8, true, true, 8, {3, 16, 16, 16, 4, 13, 13, 4}},
        {"run run run", "the the the the the", 8, true, true, 8, {3, 13, 13, 4, 16, 16, 16, 4}},
        /* a tie: the pair gets the odd one */
        {"the the the", "run run run", 8, true, true, 8, {3, 16, 16, 4, 13, 13, 13, 4}},
        /* an empty pair, and no specials */
        {"unaffable", "", 8, true, false, 6, {3, 6, 7, 8, 4, 4, 0, 0}},
        {"unaffable", "run run", 4, false, true, 4, {6, 7, 13, 13, 0, 0, 0, 0}},
        {"", "", 3, false, false, 1, {2, 0, 0, 0, 0, 0, 0, 0}},
    };

    v = vocab_load(GANTRY_TESTDATA "/vocab.txt", err, sizeof(err));
    if (!TEST_CHECK(v != NULL))
        return;
    text_tokens_init(&tok);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(row, 0x7f, sizeof(row));
        size_t n = dataset_encode_text(v, NULL, cases[i].a, strlen(cases[i].a), cases[i].b,
                                       strlen(cases[i].b), cases[i].max_len, cases[i].specials,
                                       &tok, row, &cut);
        TEST_EQ_INT(n, cases[i].len);
        TEST_EQ_INT(cut, cases[i].cut);
        for (size_t t = 0; t < cases[i].max_len; t++)
            if (row[t] != cases[i].want[t]) {
                TEST_EQ_INT(row[t], cases[i].want[t]);
                fprintf(stderr, "       case %zu, position %zu\n", i, t);
            }
    }
    text_tokens_cleanup(&tok);
    vocab_free(v);
}

/* A vocab built from text pairs counts the words of both texts. */
static void test_count_pair_words(void)
{
    struct dataset_opts o;
    struct dataset ds;
    struct label_map m;
    struct vocab_builder *b = vocab_builder_new();
    struct vocab *v;
    char err[256];
    static const char data[] =
        "{\"text\": \"alpha\", \"text_pair\": \"omega\", \"label\": \"x\"}\n";
    const char *p = write_tmp("pw.jsonl", data, sizeof(data) - 1);

    dataset_opts_default(&o);
    o.pair_field = "text_pair";
    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    dataset_count_words(&ds, NULL, b);
    v = vocab_builder_build(b, 1, 0);
    TEST_CHECK(vocab_find(v, "alpha", 5) >= 0);
    TEST_CHECK(vocab_find(v, "omega", 5) >= 0); /* the pair's word */
    vocab_free(v);
    vocab_builder_free(b);
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
}

/* Writes content gzip-compressed to tmpdir/name (whole, or its first keep bytes when keep > 0:
 * a truncated file). Returns the path. */
static const char *write_gz(const char *name, const char *content, size_t keep)
{
    static char path[256];
    char raw[256];
    snprintf(raw, sizeof(raw), "%s.raw", name);
    const char *rp = write_tmp(raw, "", 0);
    gzFile gz = gzopen(rp, "wb");
    gzwrite(gz, content, (unsigned)strlen(content));
    gzclose(gz);
    FILE *f = fopen(rp, "rb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    unlink(rp);
    snprintf(path, sizeof(path), "%s", write_tmp(name, buf, keep ? keep : n));
    return path;
}

/* gzip-compressed files, the format from the name before .gz, and glob patterns of shards. */
static void test_load_gz_and_patterns(void)
{
    struct dataset ds;
    struct label_map m;
    char err[512], pat[256];

    label_map_init(&m);
    dataset_init(&ds);
    write_gz("shard-1.jsonl.gz", "{\"text\": \"one\", \"label\": \"a\"}\n"
                                 "{\"text\": \"two\", \"label\": \"b\"}\n", 0);
    write_gz("shard-2.tsv.gz", "text\tlabel\nthree\ta\n", 0);
    write_tmp("shard-3.jsonl", "{\"text\": \"four\", \"label\": \"b\"}", 30);
    snprintf(pat, sizeof(pat), "%s/shard-*", tmpdir);
    TEST_EQ_INT(dataset_load(&ds, pat, NULL, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 4); /* in name order: 1, 2 (TSV after its .gz), 3 (plain) */
    if (ds.n == 4) {
        TEST_EQ_STR(ds.ex[0].text, "one");
        TEST_EQ_STR(ds.ex[2].text, "three");
        TEST_EQ_STR(ds.ex[3].text, "four");
    }
    TEST_EQ_INT(ds.n_malformed, 0);

    snprintf(pat, sizeof(pat), "%s/none-*.jsonl", tmpdir);
    TEST_EQ_INT(dataset_load(&ds, pat, NULL, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "none-*.jsonl: no file matches the pattern") != NULL);

    /* A gzip file cut short is an error naming the file, not a quiet half dataset. */
    {
        static char big[4096];
        for (int i = 0; i < 100; i++)
            snprintf(big + strlen(big), sizeof(big) - strlen(big),
                     "{\"text\": \"row %d\", \"label\": \"a\"}\n", i);
        const char *cut = write_gz("cut.jsonl.gz", big, 40);
        TEST_EQ_INT(dataset_load(&ds, cut, NULL, &m, err, sizeof(err)), -1);
        TEST_CHECK(strstr(err, "cut.jsonl.gz: read error") != NULL);
        TEST_CHECK(strstr(err, "truncated gzip") != NULL);
    }
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
}

/* CSV: the header names the columns (any order, more of them), quoted fields hold commas,
 * newlines and "", a byte order mark and CRLF are handled, a missing column fails the load and
 * a short or badly quoted record is malformed, reported at its first line. */
static void test_load_csv(void)
{
    static const char data[] = "\xef\xbb\xbfid,label,text,note\r\n"
                               "1,spam,\"Buy now, \"\"cheap\"\"\",x\r\n"
                               "2,ham,\"line one\nline two\",\r\n"
                               "\r\n"
                               "3,ham\n"
                               "4,spam,\"bad\"quote,y\n"
                               "5,ham,plain text\n";
    struct dataset_opts o;
    struct dataset ds;
    struct label_map m;
    char err[512];
    const char *p = write_tmp("d.csv", data, sizeof(data) - 1);

    dataset_opts_default(&o);
    o.quiet = true;
    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 3);
    TEST_EQ_INT(ds.n_malformed, 2);
    TEST_EQ_INT(ds.n_lines, 8); /* the quoted newline's record takes two */
    if (ds.n == 3) {
        TEST_EQ_STR(ds.ex[0].text, "Buy now, \"cheap\"");
        TEST_EQ_STR(label_map_name(&m, ds.ex[0].label), "spam");
        TEST_EQ_STR(ds.ex[1].text, "line one\nline two");
        TEST_EQ_STR(ds.ex[2].text, "plain text");
    }
    o.strict = true; /* the first bad record, at its line */
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "d.csv:6: 2 fields; the header's columns need 3") != NULL);
    dataset_cleanup(&ds);

    /* Pairs and other names; a header without them fails the load, listing its columns. */
    static const char pairs[] = "premise,hypothesis,gold\na,\"b\nc\",yes\n";
    p = write_tmp("p.csv", pairs, sizeof(pairs) - 1);
    o.strict = false;
    o.text_field = "premise", o.pair_field = "hypothesis", o.label_field = "gold";
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 1);
    if (ds.n == 1)
        TEST_EQ_STR(ds.ex[0].pair, "b\nc");
    o.pair_field = "hyp";
    TEST_EQ_INT(dataset_load(&ds, p, &o, &m, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "p.csv:1: the header has no column \"hyp\"") != NULL);
    TEST_CHECK(strstr(err, "\"premise\", \"hypothesis\", \"gold\"") != NULL);

    /* The record parser by itself: quoting errors name the field. */
    struct dataset_csv c = {.text = 0, .pair = -1, .label = 1};
    struct dataset_line dl;
    char why[256];
    const char *bad[] = {"\"open,x", "\"a\"b,x", "a"};
    const char *want[] = {"field 1: its opening quote is never closed",
                          "field 1: text after its closing quote",
                          "1 fields; the header's columns need 2"};
    for (int i = 0; i < 3; i++) {
        TEST_EQ_INT(dataset_csv_record(&c, NULL, bad[i], strlen(bad[i]), &dl, why, sizeof(why)),
                    -1);
        TEST_CHECK(strncmp(why, want[i], strlen(want[i])) == 0);
    }
    TEST_EQ_INT(dataset_csv_record(&c, NULL, ",x", 2, &dl, why, sizeof(why)), 0); /* empty text */
    TEST_EQ_STR(dl.text, "");
    free(dl.text);
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
}

/* dataset_split: stratified counts, disjoint and complete, file order on both sides, the same
 * split for the same seed and another for another seed. */
static void split_fill(struct dataset *ds, int n)
{
    char path[] = "/tmp/dataset_split_XXXXXX.jsonl", err[256];
    struct dataset_opts o;
    struct label_map lm;
    int fd = mkstemps(path, 6);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < n; i++) /* labels a (3 in 4) and b (1 in 4) */
        fprintf(f, "{\"text\": \"text %d\", \"label\": \"%s\"}\n", i, i % 4 == 3 ? "b" : "a");
    fclose(f);
    dataset_init(ds);
    dataset_opts_default(&o);
    label_map_init(&lm);
    TEST_EQ_INT(dataset_load(ds, path, &o, &lm, err, sizeof(err)), 0);
    label_map_cleanup(&lm);
    unlink(path);
}

static void test_split(void)
{
    struct dataset a, ev, b, evb, c, evc;
    int order_ok = 1, seen[400] = {0};
    split_fill(&a, 400), dataset_init(&ev);
    TEST_EQ_INT((int)dataset_split(&a, 0.1, 42, &ev), 40);
    TEST_EQ_INT((int)a.n, 360);
    int l1 = 0;
    for (size_t i = 0; i < ev.n; i++)
        l1 += ev.ex[i].label == 1;
    TEST_EQ_INT(l1, 10); /* 10 % of the 100 of label 1; 30 of label 0's 300 */
    for (struct dataset *d = &a; d; d = d == &a ? &ev : NULL) {
        int prev = -1;
        for (size_t i = 0; i < d->n; i++) {
            int k = atoi(d->ex[i].text + 5);
            order_ok &= k > prev;
            prev = k;
            seen[k]++;
        }
    }
    TEST_CHECK(order_ok);
    int once = 1;
    for (int k = 0; k < 400; k++)
        once &= seen[k] == 1;
    TEST_CHECK(once);
    split_fill(&b, 400), dataset_init(&evb);
    split_fill(&c, 400), dataset_init(&evc);
    dataset_split(&b, 0.1, 42, &evb);
    dataset_split(&c, 0.1, 43, &evc);
    int same = 1, differ = 0;
    for (size_t i = 0; i < ev.n; i++) {
        same &= strcmp(ev.ex[i].text, evb.ex[i].text) == 0;
        differ += strcmp(ev.ex[i].text, evc.ex[i].text) != 0;
    }
    TEST_CHECK(same);
    TEST_CHECK(differ > 0);
    TEST_EQ_INT((int)dataset_split(&b, 0.0, 42, &evb), 0); /* nothing held out */
    dataset_cleanup(&a), dataset_cleanup(&ev), dataset_cleanup(&b), dataset_cleanup(&evb);
    dataset_cleanup(&c), dataset_cleanup(&evc);
}

/* The names of the last multi-label parse, joined by '|'. */
static const char *names_of(void)
{
    static char buf[256];
    size_t n = 0;
    const char *p = g.multi;
    buf[0] = '\0';
    for (int k = 0; k < g.n_multi; k++, p += strlen(p) + 1)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", k ? "|" : "", p);
    return buf;
}

static void test_parse_multi_label(void)
{
    struct dataset_opts o;
    dataset_opts_default(&o);
    o.multi_label = true;
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": [\"a\", \"b c\", 3]}"), 0);
    TEST_EQ_STR(names_of(), "a|b c|3");
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": []}"), 0);
    TEST_EQ_INT(g.n_multi, 0); /* no label at all is an example too */
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": \"x, y,,z \"}"), 0);
    TEST_EQ_STR(names_of(), "x|y|z");
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": [\"a\", 1.5]}"), -1);
    TEST_CHECK(strstr(g_why, "item 1 is not a string or an integer") != NULL);
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": {}}"), -1);
    TEST_CHECK(strstr(g_why, "want a list of labels") != NULL);
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\"}"), -1);
    TEST_CHECK(strstr(g_why, "missing field \"label\"") != NULL);
    TEST_EQ_INT(PARSE_O(DATASET_JSONL, &o, "{\"text\": \"t\", \"label\": [\"a\\u0000b\"]}"),
                -1);
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "some text\ta,b"), 0);
    TEST_EQ_STR(g.text, "some text");
    TEST_EQ_STR(names_of(), "a|b");
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "no labels\t"), 0);
    TEST_EQ_INT(g.n_multi, 0);
    o.label_sep = '|';
    TEST_EQ_INT(PARSE_O(DATASET_TSV, &o, "t\ta,b|c"), 0);
    TEST_EQ_STR(names_of(), "a,b|c");
    free(g.text), free(g.pair), free(g.multi);
    memset(&g, 0, sizeof(g));
}

/* Loading: names mapped to sorted sets without repeats (JSONL, TSV, CSV), sets remapped with
 * the map, unknown names refused once the map is frozen, bit sets past 32 classes. */
static void test_load_multi_label(void)
{
    static const char jl[] = "{\"text\": \"one\", \"label\": [\"b\", \"a\", \"b\"]}\n"
                             "{\"text\": \"two\", \"label\": []}\n"
                             "{\"text\": \"three\", \"label\": \"c\"}\n";
    static const char csv[] = "text,label\n\"one, really\",\"a,c\"\nnone,\n";
    struct dataset ds, ev;
    struct label_map m;
    struct dataset_opts o;
    struct dataset_encoded enc;
    int remap[3];
    char err[512];

    dataset_opts_default(&o);
    o.multi_label = true;
    o.quiet = true;
    label_map_init(&m);
    dataset_init(&ds);
    TEST_EQ_INT(dataset_load(&ds, write_tmp("ml.jsonl", jl, sizeof(jl) - 1), &o, &m, err,
                             sizeof(err)), 0);
    TEST_EQ_INT(ds.n, 3);
    TEST_EQ_INT(m.n, 3); /* b a c, in order of appearance */
    TEST_EQ_INT(ds.ex[0].n_multi, 2);
    TEST_EQ_INT(ds.ex[0].multi[0], 0); /* b */
    TEST_EQ_INT(ds.ex[0].multi[1], 1); /* a */
    TEST_EQ_INT(ds.ex[1].n_multi, 0);
    TEST_EQ_INT(ds.ex[1].label, -1);
    label_map_sort(&m, remap); /* a b c */
    dataset_remap_labels(&ds, remap);
    TEST_EQ_INT(ds.ex[0].multi[0], 0);
    TEST_EQ_INT(ds.ex[0].multi[1], 1);
    TEST_EQ_INT(ds.ex[0].label, 0);
    TEST_EQ_INT(ds.ex[2].multi[0], 2);
    m.frozen = true;
    dataset_init(&ev);
    TEST_EQ_INT(dataset_load(&ev, write_tmp("ml.csv", csv, sizeof(csv) - 1), &o, &m, err,
                             sizeof(err)), 0);
    TEST_EQ_INT(ev.n, 2);
    TEST_EQ_STR(ev.ex[0].text, "one, really");
    TEST_EQ_INT(ev.ex[0].n_multi, 2);
    TEST_EQ_INT(ev.ex[0].multi[1], 2);
    TEST_EQ_INT(ev.ex[1].n_multi, 0);
    static const char tsv[] = "x\ta,zz\n";
    o.strict = true;
    TEST_EQ_INT(dataset_load(&ev, write_tmp("ml.tsv", tsv, sizeof(tsv) - 1), &o, &m, err,
                             sizeof(err)), -1);
    TEST_CHECK(strstr(err, "ml.tsv:1: unknown label \"zz\"") != NULL);

    memset(&enc, 0, sizeof(enc));
    enc.labels = malloc(4);
    dataset_encode_label_sets(&ds, 40, &enc); /* two words */
    TEST_EQ_INT(enc.label_words, 2);
    TEST_EQ_INT(enc.labels[0], 0x3);
    TEST_EQ_INT(enc.labels[1], 0);
    TEST_EQ_INT(enc.labels[2], 0);
    TEST_EQ_INT(enc.labels[4], 0x4);
    free(enc.labels);
    dataset_cleanup(&ds), dataset_cleanup(&ev);
    label_map_cleanup(&m);
}

int main(void)
{
    TEST_RUN(test_parse_multi_label);
    TEST_RUN(test_load_multi_label);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gantry-dataset-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_parse_jsonl);
    TEST_RUN(test_parse_label_optional);
    TEST_RUN(test_parse_tsv);
    TEST_RUN(test_parse_pairs);
    TEST_RUN(test_label_map);
    TEST_RUN(test_label_index);
    TEST_RUN(test_load_malformed);
    TEST_RUN(test_load_overlong);
    TEST_RUN(test_fixtures);
    TEST_RUN(test_encode);
    TEST_RUN(test_encode_pairs);
    TEST_RUN(test_count_pair_words);
    TEST_RUN(test_load_gz_and_patterns);
    TEST_RUN(test_load_csv);
    TEST_RUN(test_split);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    return test_summary();
}
