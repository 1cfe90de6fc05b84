/* card_test.c - the model card (config.json): round trip, and refusals that name the field. */
#include "worker/card.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"

static void fill(struct model_card *c)
{
    card_init(c);
    snprintf(c->type, sizeof(c->type), "transformer");
    snprintf(c->pooling, sizeof(c->pooling), "cls");
    c->layers = 2, c->hidden = 64, c->heads = 4, c->ffn = 256, c->max_seq_len = 96;
    c->buckets = 0, c->vocab_size = 1234, c->cls_sep = true;
    c->text.max_tokens = 96, c->text.strip_accents = false;
    snprintf(c->text_field, sizeof(c->text_field), "premise");
    snprintf(c->text_pair_field, sizeof(c->text_pair_field), "hypothesis");
    c->label_index = true;
    label_map_add(&c->labels, "ham", 3);
    label_map_add(&c->labels, "spam", 4);
    label_map_add(&c->labels, "\xc3\xa9t\xc3\xa9", 5); /* UTF-8 label */
}

static void test_roundtrip(void)
{
    struct model_card a, b;
    char err[256] = "";

    fill(&a);
    char *js = card_dump(&a);
    TEST_CHECK(strstr(js, "\"format\": \"gantry-model-v1\"") != NULL);
    TEST_CHECK(js[strlen(js) - 1] == '\n');
    card_init(&b);
    TEST_EQ_INT(card_parse(js, strlen(js), &b, err, sizeof(err)), 0);
    TEST_EQ_STR(b.type, "transformer");
    TEST_EQ_STR(b.pooling, "cls");
    TEST_EQ_INT(b.layers, 2);
    TEST_EQ_INT(b.hidden, 64);
    TEST_EQ_INT(b.heads, 4);
    TEST_EQ_INT(b.ffn, 256);
    TEST_EQ_INT(b.max_seq_len, 96);
    TEST_EQ_INT(b.vocab_size, 1234);
    TEST_CHECK(b.cls_sep && b.text.lowercase && !b.text.strip_accents && b.text.split_cjk);
    TEST_EQ_INT((int)b.text.max_tokens, 96);
    TEST_EQ_STR(b.vocab_file, "vocab.txt");
    TEST_EQ_INT(b.labels.n, 3);
    TEST_EQ_STR(label_map_name(&b.labels, 1), "spam");
    TEST_EQ_STR(label_map_name(&b.labels, 2), "\xc3\xa9t\xc3\xa9");
    TEST_CHECK(b.labels.frozen);
    TEST_EQ_STR(b.text_field, "premise");
    TEST_EQ_STR(b.text_pair_field, "hypothesis");
    TEST_EQ_STR(b.label_field, "label");
    TEST_CHECK(b.label_index);
    free(js);
    card_cleanup(&a);
    card_cleanup(&b);
}

/* A card written before text pairs has no "input": single texts in fields text and label. */
static void test_no_input(void)
{
    struct model_card a, b;
    char err[256] = "";

    fill(&a);
    char *js = card_dump(&a);
    char *at = strstr(js, ",\n  \"input\"");
    TEST_CHECK(at != NULL);
    if (at)
        snprintf(at, 4, "\n}\n");
    card_init(&b);
    TEST_EQ_INT(card_parse(js, strlen(js), &b, err, sizeof(err)), 0);
    TEST_EQ_STR(b.text_field, "text");
    TEST_EQ_STR(b.text_pair_field, "");
    TEST_EQ_STR(b.label_field, "label");
    TEST_CHECK(!b.label_index);
    free(js);
    card_cleanup(&a);
    card_cleanup(&b);
}

/* Each edit of a good card must be refused with the field in the message. */
static void test_refused(void)
{
    static const struct {
        const char *from, *to, *field;
    } cases[] = {
        {"\"gantry-model-v1\"", "\"gantry-model-v9\"", "format"},
        {"\"transformer\"", "\"rnn\"", "model.type"},
        {"\"cls\"", "\"max\"", "model.pooling"},
        {"\"hidden\": 64", "\"hidden\": 0", "model.hidden"},
        {"\"hidden\": 64", "\"hidden\": \"64\"", "model.hidden"},
        {"\"layers\": 2", "\"layers\": 2.5", "model.layers"},
        {"\"vocabSize\": 1234", "\"vocabSize\": 99999999999", "model.vocabSize"},
        {"\"maxSeqLen\": 96", "\"maxSeqLen\": -1", "model.maxSeqLen"},
        {"\"spam\"", "\"ham\"", "labels[1]"},
        {"\"spam\"", "\"\"", "labels[1]"},
        {"\"spam\"", "7", "labels[1]"},
        {"\"vocab.txt\"", "\"../vocab.txt\"", "tokenizer.vocab"},
        {"\"lowercase\": true", "\"lowercase\": 1", "tokenizer.lowercase"},
        {"\"maxTokens\": 96", "\"maxTokens\": null", "tokenizer.maxTokens"},
        {"\"premise\"", "\"\"", "input.text"},
        {"\"hypothesis\"", "[]", "input.textPair"},
        {"\"label\": \"label\"", "\"label\": 3", "input.label"},
        {"\"input\": {", "\"input\": 1, \"x\": {", "input"},
        {"\"labelIndex\": true", "\"labelIndex\": 1", "input.labelIndex"},
        {"\"format\"", "\"format\": 1, \"format\"", "JSON"}, /* duplicate key */
        {"{", "[", "JSON"},
    };
    struct model_card a;
    char err[256];

    fill(&a);
    char *js = card_dump(&a);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *at = strstr(js, cases[i].from);
        TEST_CHECK(at != NULL);
        if (!at)
            continue;
        char bad[4096];
        snprintf(bad, sizeof(bad), "%.*s%s%s", (int)(at - js), js, cases[i].to,
                 at + strlen(cases[i].from));
        struct model_card b;
        card_init(&b);
        err[0] = '\0';
        TEST_EQ_INT(card_parse(bad, strlen(bad), &b, err, sizeof(err)), -1);
        if (!strstr(err, cases[i].field))
            fprintf(stderr, "case %zu: \"%s\" does not name %s\n", i, err, cases[i].field);
        TEST_CHECK(strstr(err, cases[i].field) != NULL);
        card_cleanup(&b);
    }
    /* One label only, and not an object at all. */
    struct model_card b;
    card_init(&b);
    const char *one = "{\"format\":\"gantry-model-v1\",\"model\":{\"type\":\"ngram\",\"layers\":0,"
                      "\"hidden\":8,\"heads\":0,\"ffn\":0,\"maxSeqLen\":8,\"pooling\":\"mean\","
                      "\"buckets\":16,\"vocabSize\":9},\"labels\":[\"x\"],\"tokenizer\":{}}";
    TEST_EQ_INT(card_parse(one, strlen(one), &b, err, sizeof(err)), -1);
    TEST_CHECK(strstr(err, "labels") != NULL);
    card_cleanup(&b);
    card_init(&b);
    TEST_EQ_INT(card_parse("[1]", 3, &b, err, sizeof(err)), -1); /* not an object */
    TEST_CHECK(strstr(err, "format") != NULL);
    card_cleanup(&b);
    free(js);
    card_cleanup(&a);
}

/* Multi-label: the task and the separator round-trip; a single-label card says no task (older
 * readers read it); a bad task or separator is refused naming the field. */
static void test_multi_label(void)
{
    struct model_card a, b;
    char err[256] = "";

    fill(&a);
    char *js = card_dump(&a);
    TEST_CHECK(strstr(js, "\"task\"") == NULL);
    free(js);
    a.multi_label = true, a.label_sep = '|';
    js = card_dump(&a);
    TEST_CHECK(strstr(js, "\"task\": \"multi-label-classification\"") != NULL);
    card_init(&b);
    TEST_EQ_INT(card_parse(js, strlen(js), &b, err, sizeof(err)), 0);
    TEST_CHECK(b.multi_label);
    TEST_EQ_INT(b.label_sep, '|');
    card_cleanup(&b);
    static const struct {
        const char *from, *to, *field;
    } cases[] = {
        {"\"multi-label-classification\"", "\"sentiment\"", "task"},
        {"\"multi-label-classification\"", "\"regression\"", "labels"}, /* it has labels */
        {"\"multi-label-classification\"", "1", "task"},
        {"\"labelSeparator\": \"|\"", "\"labelSeparator\": \"||\"", "input.labelSeparator"},
        {"\"labelSeparator\": \"|\"", "\"labelSeparator\": \"\\t\"", "input.labelSeparator"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[4096], *at = strstr(js, cases[i].from);
        TEST_CHECK(at != NULL);
        if (!at)
            continue;
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - js), js, cases[i].to,
                 at + strlen(cases[i].from));
        card_init(&b);
        err[0] = '\0';
        TEST_EQ_INT(card_parse(buf, strlen(buf), &b, err, sizeof(err)), -1);
        TEST_CHECK(strncmp(err, cases[i].field, strlen(cases[i].field)) == 0);
        card_cleanup(&b);
    }
    free(js);
    card_cleanup(&a);
}

/* Regression: no labels, the task says so, and the model has one output. */
static void test_regression(void)
{
    struct model_card a, b;
    char err[256] = "";
    fill(&a);
    label_map_cleanup(&a.labels);
    label_map_init(&a.labels);
    a.regression = true;
    char *js = card_dump(&a);
    TEST_CHECK(strstr(js, "\"task\": \"regression\"") != NULL);
    card_init(&b);
    TEST_EQ_INT(card_parse(js, strlen(js), &b, err, sizeof(err)), 0);
    TEST_CHECK(b.regression && !b.multi_label && b.labels.n == 0);
    card_cleanup(&b);
    free(js);
    card_cleanup(&a);
}

int main(void)
{
    TEST_RUN(test_multi_label);
    TEST_RUN(test_regression);
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_no_input);
    TEST_RUN(test_refused);
    return test_summary();
}
