/*
 * dataset.h - text classification data: JSONL/TSV readers, label maps, fixed-length encoding.
 *
 * Input formats (one example per line, UTF-8):
 *   JSONL: {"text": "...", "label": "spam"} - other fields are ignored; label may also be an
 *          integer (taken as its decimal string, so 0/1 labels work).
 *   TSV:   text<TAB>label - the label is the LAST tab-separated field, so the text may contain
 *          tabs; the escapes \t \n \r \\ in the text are decoded. A line "text<TAB>label"
 *          (normally the first) is taken as a header and skipped.
 * The format comes from the extension (.jsonl/.json/.ndjson vs .tsv/.txt) unless set explicitly.
 * Blank lines are skipped silently. Lines longer than opts.max_line are malformed.
 *
 * A malformed line (bad JSON, missing or non-string field, unknown label when labels are fixed,
 * overlong line, invalid UTF-8, NUL byte) is reported on stderr as "path:line: why" and either
 * skipped and counted (default) or fatal (opts.strict): then dataset_load() fails and err holds
 * the same "path:line: why". Only the first DATASET_MAX_REPORTED bad lines are printed; the rest
 * are only counted. Nothing here calls exit(): the caller maps a failure to exit code 65.
 *
 * Labels: a label_map assigns indices in order of first appearance, unless it was pre-filled
 * (label_map_add) and frozen: then an unknown label is a malformed line. Load the training file
 * first with an open map, then freeze it for the eval file. Labels are sorted when you ask
 * (label_map_sort), so runs that see examples in different orders can agree on indices.
 */
#ifndef GANTRY_DATASET_H
#define GANTRY_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/text.h"
#include "worker/vocab.h"

#define DATASET_DEFAULT_MAX_LINE (8u << 20) /* bytes per line, newline excluded */
#define DATASET_MAX_LABELS       4096       /* distinct labels in one label_map */
#define DATASET_MAX_LABEL_BYTES  256        /* bytes in one label */
#define DATASET_MAX_REPORTED     20         /* malformed lines printed before going quiet */

enum dataset_format { DATASET_AUTO = 0, DATASET_JSONL, DATASET_TSV };

/* String <-> index map of class labels. Caller-owned storage. */
struct label_map {
    char **names; /* names[i], owned */
    int n;
    int cap;
    bool frozen; /* no new labels: unknown ones are errors */
};

void label_map_init(struct label_map *m);
void label_map_cleanup(struct label_map *m);
/* Index of name, adding it when absent and the map is not frozen. -1 when frozen and absent,
 * or when the map is full (DATASET_MAX_LABELS) or name is empty/too long. */
int label_map_add(struct label_map *m, const char *name, size_t len);
/* Index of name, or -1. */
int label_map_find(const struct label_map *m, const char *name, size_t len);
/* Borrowed name of index i, or NULL when out of range. */
const char *label_map_name(const struct label_map *m, int i);
/* Sorts the names bytewise and writes old->new index mapping to remap[old] (may be NULL). */
void label_map_sort(struct label_map *m, int *remap);

struct dataset_opts {
    enum dataset_format format; /* DATASET_AUTO: from the file name */
    size_t max_line;            /* 0: DATASET_DEFAULT_MAX_LINE */
    bool strict;                /* the first malformed line fails the load */
    bool quiet;                 /* do not print malformed lines to stderr (tests) */
    const char *text_field;     /* JSONL field names; NULL: "text" and "label" */
    const char *label_field;
    bool label_optional;        /* JSONL: a missing, null or empty label is no label (label[0]
                                 * == 0), for classifying unlabelled text (gantry-predict) */
};

void dataset_opts_default(struct dataset_opts *o);

/* One example: text is a NUL-terminated UTF-8 string owned by the dataset. */
struct dataset_example {
    char *text;
    size_t text_len;
    int32_t label; /* index into the label_map used at load time */
};

struct dataset {
    struct dataset_example *ex;
    size_t n, cap;
    size_t n_lines;     /* lines read, blank ones included */
    size_t n_malformed; /* lines skipped as malformed */
};

void dataset_init(struct dataset *ds);
void dataset_cleanup(struct dataset *ds);

/* Reads path and appends its examples to ds, mapping labels through labels (added unless
 * frozen). 0 on success (malformed lines skipped and counted in ds->n_malformed); -1 with
 * "path:line: why" (or "path: why" for I/O errors) in err when the file cannot be read or, in
 * strict mode, on the first malformed line. On failure ds keeps what was read before. */
int dataset_load(struct dataset *ds, const char *path, const struct dataset_opts *o,
                 struct label_map *labels, char *err, size_t errlen);

/* The line parser the reader uses, exposed for tests and fuzzing. Parses line[0..len) (no
 * newline; any bytes) in format fmt (JSONL or TSV, not AUTO). On success returns 0 and sets
 * *text (new heap string, caller frees) and *text_len and copies the label into label (NUL-
 * terminated, at most DATASET_MAX_LABEL_BYTES). Returns 1 for a line to skip silently (blank or
 * TSV header), -1 with a reason in why for a malformed line. */
int dataset_parse_line(enum dataset_format fmt, const struct dataset_opts *o, const char *line,
                       size_t len, char **text, size_t *text_len,
                       char label[DATASET_MAX_LABEL_BYTES + 1], char *why, size_t whylen);

/* Rewrites every example's label through remap[old] (as filled by label_map_sort). */
void dataset_remap_labels(struct dataset *ds, const int *remap);

/* Holds out a stratified, seeded share of ds (data.evalFraction): of each label's examples,
 * round(count * fraction) chosen by a generator seeded from seed move to out (appended, in
 * their file order), the rest stay in ds in their order. The same (ds, fraction, seed) gives the
 * same split on every rank and every run. fraction in [0, 1); out must be initialised. Returns
 * the examples moved. */
size_t dataset_split(struct dataset *ds, double fraction, uint64_t seed, struct dataset *out);

/* Fixed-length encoding of a dataset for the model: row i of ids holds
 * [CLS] piece... [SEP] [PAD]... (CLS/SEP only when add_cls_sep and the vocab has them), cut to
 * max_len; len[i] counts the non-pad ids (>= 1: an empty text is [CLS][SEP], or one [UNK]
 * without specials); mask[i*max_len + t] is 1 for t < len[i], else 0. */
struct dataset_encoded {
    int32_t *ids;    /* (n, max_len), row-major */
    uint8_t *mask;   /* (n, max_len) */
    int32_t *len;    /* (n) */
    int32_t *labels; /* (n) */
    size_t n;
    size_t max_len;
    size_t n_truncated; /* examples that had more than max_len ids */
    uint64_t n_tokens;  /* sum of len[] */
    uint64_t n_unk;     /* [UNK] ids written */
};

/* Encodes every example of ds. max_len >= 2 when add_cls_sep, >= 1 otherwise. Out-of-memory
 * aborts; returns -1 only for a bad max_len. out is caller-owned; free with
 * dataset_encoded_cleanup(). */
int dataset_encode(const struct dataset *ds, const struct vocab *v, const struct text_opts *to,
                   size_t max_len, bool add_cls_sep, struct dataset_encoded *out);
void dataset_encoded_cleanup(struct dataset_encoded *e);

/* Encodes one text into row[0..max_len) (padded) and returns its length (as len[] above).
 * tok is scratch space reused across calls. *truncated (may be NULL) is set when cut. */
size_t dataset_encode_text(const struct vocab *v, const struct text_opts *to, const char *text,
                           size_t text_len, size_t max_len, bool add_cls_sep,
                           struct text_tokens *tok, int32_t *row, bool *truncated);

/* Feeds every example's tokens to a vocab builder (for a vocab built from training data). */
void dataset_count_words(const struct dataset *ds, const struct text_opts *to,
                         struct vocab_builder *b);

#endif /* GANTRY_DATASET_H */
