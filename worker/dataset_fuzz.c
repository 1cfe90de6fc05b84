/*
 * dataset_fuzz.c - libFuzzer target for the JSONL/TSV line parser and the label map.
 *
 * Input: byte 0 picks the format (even: JSONL, odd: TSV; bit 4: CSV, the line's first part up to
 * a newline its header), an alternate field name, an optional label (gantry-predict's reading),
 * text pairs, multi-label lists (bit 5; bit 6: separator '|') and regression's numbers (bit 7);
 * the rest is one line of any bytes.
 * Checks invariants the reader relies on: success means a NUL-terminated text (and, for pairs,
 * pair) of the stated length and a label within DATASET_MAX_LABEL_BYTES, non-empty unless
 * optional (multi-label: each listed name non-empty, within the limit, trimmed of spaces, and
 * all of them within the line's bytes); failure means a non-empty reason and nothing
 * allocated. Built with clang
 * -fsanitize=fuzzer,address,undefined (data.cmake) and as a plain replay executable (replay_fuzz.c) that ctest runs on the seeds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fuzz.h"
#include "worker/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    struct dataset_opts o;
    struct dataset_line dl = {.text = (char *)1, .pair = (char *)1, .text_len = 12345};
    struct label_map m;
    enum dataset_format fmt;
    int rc;

    if (size < 1)
        return 0;
    dataset_opts_default(&o);
    fmt = (data[0] & 1) ? DATASET_TSV : DATASET_JSONL;
    if (data[0] & 2) {
        o.text_field = "body";
        o.label_field = "y";
    }
    o.label_optional = (data[0] & 4) != 0;
    if (data[0] & 8)
        o.pair_field = "text_pair";
    o.multi_label = (data[0] & 32) != 0;
    o.label_sep = (data[0] & 64) ? '|' : ',';
    o.regression = (data[0] & 128) != 0 && !o.multi_label; /* JSON numbers as labels */
    why[0] = '\0';
    if (data[0] & 16) { /* CSV: a header, then one record */
        const char *h = (const char *)data + 1, *nl = memchr(h, '\n', size - 1);
        struct dataset_csv csv;
        struct dataset_csv_scan st = {.start = true};
        dataset_csv_scan(&st, h, size - 1); /* any bytes */
        (void)dataset_csv_open(&st);
        if (!nl)
            return 0;
        if (dataset_csv_header(&csv, &o, h, (size_t)(nl - h), why, sizeof(why))) {
            FUZZ_CHECK(why[0] != '\0');
            return 0;
        }
        FUZZ_CHECK(csv.text >= 0 && (csv.pair >= 0) == (o.pair_field != NULL));
        FUZZ_CHECK(csv.label >= 0 || o.label_optional);
        rc = dataset_csv_record(&csv, &o, nl + 1, size - 2 - (size_t)(nl - h), &dl, why,
                                sizeof(why));
    } else {
        rc = dataset_parse_line(fmt, &o, (const char *)data + 1, size - 1, &dl, why, sizeof(why));
    }
    if (rc == 0) {
        size_t llen = strlen(dl.label);
        FUZZ_CHECK(dl.text != NULL);
        FUZZ_CHECK(dl.text[dl.text_len] == '\0');
        FUZZ_CHECK((dl.pair != NULL) == (o.pair_field != NULL));
        FUZZ_CHECK(!dl.pair || dl.pair[dl.pair_len] == '\0');
        FUZZ_CHECK(dl.text_len + dl.pair_len <= size);
        FUZZ_CHECK(llen <= DATASET_MAX_LABEL_BYTES &&
                   (llen > 0 || o.label_optional || o.multi_label));
        FUZZ_CHECK(!o.multi_label || llen == 0);
        FUZZ_CHECK((dl.multi != NULL) == (dl.n_multi > 0));
        size_t names = 0;
        const char *name = dl.multi;
        for (int k = 0; k < dl.n_multi; k++, name += strlen(name) + 1) {
            size_t n = strlen(name);
            FUZZ_CHECK(n > 0 && n <= DATASET_MAX_LABEL_BYTES);
            FUZZ_CHECK(name[0] != ' ' && name[n - 1] != ' ');
            names += n;
        }
        FUZZ_CHECK(names <= size);
        free(dl.multi);
        if (llen > 0) {
            label_map_init(&m);
            FUZZ_CHECK(label_map_add(&m, dl.label, llen) == 0);
            FUZZ_CHECK(label_map_find(&m, dl.label, llen) == 0);
            label_map_cleanup(&m);
        }
        free(dl.text), free(dl.pair);
    } else {
        FUZZ_CHECK(dl.text == NULL && dl.pair == NULL && dl.text_len == 0 && dl.pair_len == 0);
        FUZZ_CHECK(dl.multi == NULL && dl.n_multi == 0);
        FUZZ_CHECK(rc == 1 || why[0] != '\0');
    }
    return 0;
}
