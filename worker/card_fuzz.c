/*
 * card_fuzz.c - libFuzzer target for card_parse() (a checkpoint's config.json is untrusted).
 *
 * Input: any bytes, parsed as a card. Checks: no crash or leak; an accepted card has values in
 * the documented ranges and distinct labels (none for a regression), and survives card_dump ->
 * card_parse unchanged (its task and label separator too).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fuzz.h"
#include "worker/card.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct model_card c, d;
    char err[256];

    card_init(&c);
    if (card_parse((const char *)data, size, &c, err, sizeof(err)) == 0) {
        /* a regression has no labels; a classifier two or more; not both tasks at once */
        FUZZ_CHECK(c.regression ? c.labels.n == 0 : c.labels.n >= 2);
        FUZZ_CHECK(!(c.regression && c.multi_label));
        FUZZ_CHECK(c.hidden >= 1 && c.vocab_size >= 5 && c.max_seq_len >= 1);
        FUZZ_CHECK(!strcmp(c.type, "transformer") || !strcmp(c.type, "ngram"));
        FUZZ_CHECK(c.vocab_file[0] && !strchr(c.vocab_file, '/'));
        for (int i = 0; i < c.labels.n; i++)
            for (int j = i + 1; j < c.labels.n; j++)
                FUZZ_CHECK(strcmp(label_map_name(&c.labels, i), label_map_name(&c.labels, j)));
        char *js = card_dump(&c);
        card_init(&d);
        FUZZ_CHECK(card_parse(js, strlen(js), &d, err, sizeof(err)) == 0);
        char *js2 = card_dump(&d);
        FUZZ_CHECK(!strcmp(js, js2));
        free(js), free(js2);
        card_cleanup(&d);
    } else {
        FUZZ_CHECK(err[0] != '\0');
    }
    card_cleanup(&c);
    return 0;
}
