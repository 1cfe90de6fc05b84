/*
 * bench/fasttext_data.c - writes a JSONL/TSV text-classification file in fastText's format,
 * tokenized exactly as gantry-worker tokenizes it, so both sides of bench/fasttext.sh learn
 * from the same words.
 *
 *   fasttext_data [--max-tokens N] IN OUT
 *
 * IN is read with gantry-worker's reader (dataset_load: same malformed-line rules); every example
 * becomes one line "__label__<label> tok tok ...", the tokens from text_tokenize() with
 * gantry-worker's defaults (lowercase, accents stripped, punctuation and CJK characters one per
 * token) and, like gantry-worker with model.maxSeqLen = N, only the first N words of each text
 * (default 256; 0 = all). WordPiece is not applied: fastText learns whole words (and, with
 * -wordNgrams, their n-grams), which is its own practice. Prints "examples tokens malformed" to
 * stdout. Exit 0, 64 on usage, 65 when IN cannot be read, 74 when OUT cannot be written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/dataset.h"
#include "worker/text.h"

#define FASTTEXT_DATA_USAGE "usage: fasttext_data [--max-tokens N] IN OUT\n"

static int usage(void)
{
    fprintf(stderr, FASTTEXT_DATA_USAGE);
    return 64;
}

/* Writes ds to f in fastText's format; returns the tokens written, or -1 on a write error. */
static long long write_fasttext(FILE *f, const struct dataset *ds, const struct label_map *labels,
                                const struct text_opts *to)
{
    struct text_tokens tok;
    long long total = 0;

    text_tokens_init(&tok);
    for (size_t i = 0; i < ds->n; i++) {
        const struct dataset_example *e = &ds->ex[i];
        size_t n = text_tokenize(to, e->text, e->text_len, &tok);

        fprintf(f, "__label__%s", label_map_name(labels, e->label));
        for (size_t t = 0; t < n; t++) {
            fputc(' ', f);
            fwrite(text_token(&tok, t), 1, tok.len[t], f);
        }
        fputc('\n', f);
        total += (long long)n;
    }
    text_tokens_cleanup(&tok);
    return ferror(f) ? -1 : total;
}

int main(int argc, char **argv)
{
    struct dataset_opts dopts;
    struct text_opts to;
    struct label_map labels;
    struct dataset ds;
    char err[512];
    const char *in, *outp;
    FILE *f = NULL;
    long long ntok;
    long max_tokens = 256;
    int rc = 0, a = 1;

    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf(FASTTEXT_DATA_USAGE
               "Writes the JSONL/TSV file IN as fastText's training format to OUT, tokenized as\n"
               "gantry-worker tokenizes (the first N words of each text, default 256, 0 = all).\n"
               "Prints \"examples tokens malformed\". Exit 64 on usage, 65 when IN cannot be\n"
               "read, 74 when OUT cannot be written.\n");
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "--max-tokens")) {
        char *end;
        errno = 0;
        max_tokens = strtol(argv[2], &end, 10);
        if (errno || *end || max_tokens < 0)
            return usage();
        a = 3;
    } else if (argc != 3) {
        return usage();
    }
    in = argv[a];
    outp = argv[a + 1];

    dataset_opts_default(&dopts);
    text_opts_default(&to);
    to.max_tokens = (size_t)max_tokens;
    label_map_init(&labels);
    dataset_init(&ds);
    if (dataset_load(&ds, in, &dopts, &labels, err, sizeof(err))) {
        fprintf(stderr, "fasttext_data: %s\n", err);
        rc = 65;
        goto out;
    }
    f = fopen(outp, "w");
    if (!f) {
        fprintf(stderr, "fasttext_data: %s: %s\n", outp, strerror(errno));
        rc = 74;
        goto out;
    }
    ntok = write_fasttext(f, &ds, &labels, &to);
    if (fclose(f) != 0 || ntok < 0) {
        fprintf(stderr, "fasttext_data: %s: write failed\n", outp);
        rc = 74;
    }
    f = NULL;
    if (!rc)
        printf("%zu %lld %zu\n", ds.n, ntok, ds.n_malformed);
out:
    dataset_cleanup(&ds);
    label_map_cleanup(&labels);
    return rc;
}
