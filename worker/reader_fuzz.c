/*
 * reader_fuzz.c - libFuzzer target for dataset_load(): the file reader's line framing.
 *
 * Input: byte 0 picks the format (bit 0: TSV; bit 6: CSV), strict mode (bit 1), max_line
 * (bits 2..5: 4 to 64 bytes) and text pairs (bit 7); the rest is written to a temp file and
 * loaded. The oracle splits the same bytes on '\n' (joining the lines of a CSV record whose
 * quoted field holds a newline) and parses each line or record itself: the reader must agree on
 * the number of lines, examples, malformed lines and every example's text, pair and label, and
 * on a CSV header without the columns failing the load. Built with a tiny DATASET_READ_CHUNK
 * (data.cmake) so that lines straddle reads. Input that starts as gzip does is zlib's to
 * decompress: only loaded, without an oracle.
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

struct oracle {
    const struct dataset_opts *o;
    struct label_map *m;
    const struct dataset *ds;
    size_t n_ex, n_bad;
    struct dataset_csv csv;
    bool header;
};

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* The expected outcome of one line (a CSV record); returns false when the load stops here. */
static bool oracle_line(struct oracle *z, const char *line, size_t len)
{
    const struct dataset_opts *o = z->o;
    struct dataset_line dl;
    char why[512];
    bool csv = o->format == DATASET_CSV;
    int rc;

    if (csv && !z->header && len <= o->max_line && !blank(line, len)) {
        z->header = true;
        return dataset_csv_header(&z->csv, o, line, len, why, sizeof(why)) == 0;
    }
    rc = len > o->max_line ? -1
         : csv ? dataset_csv_record(&z->csv, o, line, len, &dl, why, sizeof(why))
               : dataset_parse_line(o->format, o, line, len, &dl, why, sizeof(why));
    if (rc == 0) {
        int li = label_map_add(z->m, dl.label, strlen(dl.label));
        FUZZ_CHECK(z->n_ex < z->ds->n);
        const struct dataset_example *ex = &z->ds->ex[z->n_ex];
        FUZZ_CHECK(ex->text_len == dl.text_len);
        FUZZ_CHECK(memcmp(ex->text, dl.text, dl.text_len) == 0);
        FUZZ_CHECK((ex->pair != NULL) == (dl.pair != NULL) && ex->pair_len == dl.pair_len);
        FUZZ_CHECK(!dl.pair || memcmp(ex->pair, dl.pair, dl.pair_len) == 0);
        FUZZ_CHECK(li >= 0 && ex->label == li);
        z->n_ex++;
        free(dl.text), free(dl.pair);
    } else if (rc < 0) {
        z->n_bad++;
        return !o->strict;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dataset_opts o;
    struct dataset ds;
    struct label_map m, want;
    struct oracle z;
    char err[512];
    size_t n_lines = 0, start = 0, blen;
    const char *body;
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
    o.format = (data[0] & 64) ? DATASET_CSV : (data[0] & 1) ? DATASET_TSV : DATASET_JSONL;
    o.strict = (data[0] & 2) != 0;
    o.max_line = 4 * (size_t)((data[0] >> 2) & 15) + 4;
    if (data[0] & 128)
        o.pair_field = "text_pair";
    o.quiet = true;
    label_map_init(&m);
    label_map_init(&want);
    dataset_init(&ds);
    rc = dataset_load(&ds, path, &o, &m, err, sizeof(err));
    body = (const char *)data + 1, blen = size - 1;
    if (blen >= 2 && (uint8_t)body[0] == 0x1f && (uint8_t)body[1] == 0x8b)
        goto done; /* gzip: zlib's */
    if (blen >= 3 && memcmp(body, "\xef\xbb\xbf", 3) == 0)
        body += 3, blen -= 3; /* a byte order mark is skipped */
    z = (struct oracle){.o = &o, .m = &want, .ds = &ds};
    while (start < blen) {
        const char *line = body + start;
        size_t len = 0, lines = 0;
        bool nl = false;
        struct dataset_csv_scan st = {.start = true};
        for (;;) { /* one line, or the lines of a CSV record */
            const char *p = line + len, *e = memchr(p, '\n', blen - start - len);
            size_t n = e ? (size_t)(e - p) : blen - start - len;
            lines++;
            len += n;
            nl = e != NULL;
            if (o.format != DATASET_CSV || !nl)
                break;
            dataset_csv_scan(&st, p, n);
            if (!dataset_csv_open(&st))
                break;
            dataset_csv_scan(&st, "\n", 1);
            len++; /* the newline belongs to the record */
            if (start + len == blen) { /* the file ends after it: an empty last line */
                lines++;
                break;
            }
        }
        n_lines += lines;
        if (!oracle_line(&z, line, len)) {
            FUZZ_CHECK(rc == -1 && strstr(err, path) == err);
            goto out;
        }
        start += len + (nl ? 1 : 0);
    }
    FUZZ_CHECK(rc == 0);
out:
    FUZZ_CHECK(ds.n == z.n_ex);
    FUZZ_CHECK(ds.n_lines == n_lines);
    FUZZ_CHECK(ds.n_malformed == z.n_bad);
    FUZZ_CHECK(m.n == want.n);
done:
    dataset_cleanup(&ds);
    label_map_cleanup(&m);
    label_map_cleanup(&want);
    return 0;
}
