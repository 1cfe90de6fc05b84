/*
 * reader_fuzz.c - libFuzzer target for dataset_load(): the file reader's line framing.
 *
 * Input: byte 0 picks the format (bit 0: TSV), strict mode (bit 1), max_line (bits 2..6:
 * 1..32 bytes) and text pairs (bit 7); the rest is written to a temp file and loaded. The oracle splits the same bytes
 * on '\n' and runs dataset_parse_line() on each line itself: the reader must agree on the number
 * of lines, examples, malformed lines and every example's text, pair and label. Built with a tiny
 * DATASET_READ_CHUNK (data.cmake) so that lines straddle fread() calls.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fuzz.h"
#include "worker/dataset.h"

static char path[64];

static void remove_tmp(void)
{
    unlink(path);
}

/* The expected outcome of one line; returns false when a strict load stops here. */
static bool oracle_line(const struct dataset_opts *o, const char *line, size_t len,
                        struct label_map *m, const struct dataset *ds, size_t *n_ex, size_t *n_bad)
{
    struct dataset_line dl;
    char why[256];
    int rc = len > o->max_line ? -1
                               : dataset_parse_line(o->format, o, line, len, &dl, why, sizeof(why));
    if (rc == 0) {
        int li = label_map_add(m, dl.label, strlen(dl.label));
        FUZZ_CHECK(*n_ex < ds->n);
        const struct dataset_example *ex = &ds->ex[*n_ex];
        FUZZ_CHECK(ex->text_len == dl.text_len);
        FUZZ_CHECK(memcmp(ex->text, dl.text, dl.text_len) == 0);
        FUZZ_CHECK((ex->pair != NULL) == (dl.pair != NULL) && ex->pair_len == dl.pair_len);
        FUZZ_CHECK(!dl.pair || memcmp(ex->pair, dl.pair, dl.pair_len) == 0);
        FUZZ_CHECK(li >= 0 && ex->label == li);
        (*n_ex)++;
        free(dl.text), free(dl.pair);
    } else if (rc < 0) {
        (*n_bad)++;
        return !o->strict;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dataset_opts o;
    struct dataset ds;
    struct label_map m, want;
    char err[512];
    size_t n_lines = 0, n_ex = 0, n_bad = 0, start = 0;
    int rc;
    FILE *f;

    if (size < 1)
        return 0;
    if (!path[0]) {
        int fd;
        snprintf(path, sizeof(path), "/tmp/gantry-reader-fuzz-XXXXXX");
        fd = mkstemp(path);
        FUZZ_CHECK(fd >= 0);
        close(fd);
        atexit(remove_tmp);
    }
    f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(data + 1, 1, size - 1, f) == size - 1);
    fclose(f);
    dataset_opts_default(&o);
    o.format = (data[0] & 1) ? DATASET_TSV : DATASET_JSONL;
    o.strict = (data[0] & 2) != 0;
    o.max_line = (size_t)((data[0] >> 2) & 31) + 1;
    if (data[0] & 128)
        o.pair_field = "text_pair";
    o.quiet = true;
    label_map_init(&m);
    label_map_init(&want);
    dataset_init(&ds);
    rc = dataset_load(&ds, path, &o, &m, err, sizeof(err));

    while (start < size - 1) {
        const char *line = (const char *)data + 1 + start;
        const char *nl = memchr(line, '\n', size - 1 - start);
        size_t len = nl ? (size_t)(nl - line) : size - 1 - start;
        n_lines++;
        if (!oracle_line(&o, line, len, &want, &ds, &n_ex, &n_bad)) {
            FUZZ_CHECK(rc == -1 && strstr(err, path) == err);
            goto out;
        }
        start += len + (nl ? 1 : 0);
    }
    FUZZ_CHECK(rc == 0);
out:
    FUZZ_CHECK(ds.n == n_ex);
    FUZZ_CHECK(ds.n_lines == n_lines);
    FUZZ_CHECK(ds.n_malformed == n_bad);
    FUZZ_CHECK(m.n == want.n);
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
    label_map_cleanup(&want);
    return 0;
}
