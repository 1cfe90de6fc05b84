/*
 * dataset.h - text classification data: JSONL/TSV readers, label maps, fixed-length encoding.
 *
 * Input formats (one example per line, UTF-8):
 *   JSONL: {"text": "...", "label": "spam"} - other fields are ignored; label may also be an
 *          integer (taken as its decimal string, so 0/1 labels work).
 *   TSV:   text<TAB>label - the label is the LAST tab-separated field, so the text may contain
 *          tabs; the escapes \t \n \r \\ in the text are decoded. A line "text<TAB>label"
 *          (normally the first) is taken as a header and skipped.
 *   CSV:   RFC 4180 records (.csv): fields separated by commas, a field in double quotes may hold
 *          commas, newlines and "" for a quote. The first record of each file is the header,
 *          naming the columns: the text, label (and pair) columns are found by the field names
 *          of the options ("text", "label" unless set); a header without them fails the load.
 *          A record with fewer fields than it needs is malformed.
 * A UTF-8 byte order mark at the start of a file is skipped (spreadsheets write one).
 * Text pairs (opts.pair_field set: NLI, paraphrase, question/answer tasks): JSONL lines carry a
 * second string field of that name; TSV lines are text<TAB>pair<TAB>label (the pair is the field
 * before the label, the text all before it), a first field "text" with the label "label" a
 * header. The encoding is BERT's [CLS] text [SEP] pair [SEP] (no token type ids: RoBERTa's way).
 * The format comes from the extension (.jsonl/.json/.ndjson vs .tsv/.txt, a .gz after it left
 * out) unless set explicitly. Files may be gzip-compressed (zlib reads either kind, whatever the
 * name), and a path with * ? or [ is a glob(3) pattern: every file it matches, in name order
 * (shards: train-*.jsonl.gz).
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

enum dataset_format { DATASET_AUTO = 0, DATASET_JSONL, DATASET_TSV, DATASET_CSV };

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
/* Index of name, or, when it is none of m's names but a decimal number below m->n ("0", "2"),
 * that number; else -1 (data.labelNames: integer class labels). */
int label_map_find_or_index(const struct label_map *m, const char *name, size_t len);
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
    const char *pair_field;     /* non-NULL: examples are text pairs, the second text in this
                                 * JSONL field (TSV: text<TAB>pair<TAB>label) */
    bool label_index;           /* a label the (frozen) map lacks that is a decimal index i of
                                 * it is its i-th label: data.labelNames with Hugging Face's
                                 * integer class labels */
    bool multi_label;           /* each example has a set of labels, maybe none: a JSON array
                                 * (of names or integers) or a string of names separated by
                                 * label_sep; TSV and CSV label fields likewise (empty: none) */
    char label_sep;             /* 0: ',' */
    bool regression;            /* the label is a real number (a JSON number, or text that
                                 * strtod reads whole and finite), not a class */
};

void dataset_opts_default(struct dataset_opts *o);

/* One example: text (and pair, for text pairs; else NULL) are NUL-terminated UTF-8 strings
 * owned by the dataset. */
struct dataset_example {
    char *text, *pair;
    size_t text_len, pair_len;
    int32_t label; /* index into the label_map used at load time; multi-label: the lowest of the
                    * set (the key dataset_split stratifies by), -1 when it is empty */
    int32_t *multi; /* multi-label: the set's indices, ascending and distinct (owned) */
    int32_t n_multi;
    float target;   /* regression: the example's value (label 0) */
};

struct dataset {
    struct dataset_example *ex;
    size_t n, cap;
    size_t n_lines;     /* lines read, blank ones included */
    size_t n_malformed; /* lines skipped as malformed */
};

void dataset_init(struct dataset *ds);
void dataset_cleanup(struct dataset *ds);

/* Reads path (a file, or a pattern's files) and appends its examples to ds, mapping labels
 * through labels (added unless frozen). 0 on success (malformed lines skipped and counted in
 * ds->n_malformed); -1 with
 * "path:line: why" (or "path: why" for I/O errors) in err when the file cannot be read or, in
 * strict mode, on the first malformed line. On failure ds keeps what was read before. */
int dataset_load(struct dataset *ds, const char *path, const struct dataset_opts *o,
                 struct label_map *labels, char *err, size_t errlen);

/* One parsed line: text and pair (NULL unless opts.pair_field) are new heap strings the caller
 * frees; label is NUL-terminated (empty: no label, when opts.label_optional). */
struct dataset_line {
    char *text, *pair;
    size_t text_len, pair_len;
    char label[DATASET_MAX_LABEL_BYTES + 1];
    char *multi;  /* opts.multi_label: n_multi NUL-terminated names back to back (heap; the caller
                   * frees it, may be NULL when there are none) */
    int n_multi;
    bool labelled; /* opts.multi_label: the label field was there (an empty list included) */
};

/* CSV: the columns of the text, its pair and the label (-1: none), from a file's header. */
struct dataset_csv {
    int text, pair, label;
};

/* Reads the header record rec[0..len): the columns named by o's fields (text, label; pair with
 * o->pair_field; the label may be missing with o->label_optional, then label is -1). 0, or -1
 * with why naming the missing column and the header's columns. */
int dataset_csv_header(struct dataset_csv *c, const struct dataset_opts *o, const char *rec,
                       size_t len, char *why, size_t whylen);
/* Parses one CSV record (header read) as dataset_parse_line() parses a line: 0, 1 (blank), -1. */
int dataset_csv_record(const struct dataset_csv *c, const struct dataset_opts *o, const char *rec,
                       size_t len, struct dataset_line *out, char *why, size_t whylen);
/* Where a CSV record's bytes, fed piece by piece (newlines included), have got to: scan from
 * {.start = true}; while dataset_csv_open() says so, the record goes on after the newline (a
 * quoted field holds it). */
struct dataset_csv_scan {
    bool quoted, start, pending;
};
void dataset_csv_scan(struct dataset_csv_scan *st, const char *p, size_t n);
bool dataset_csv_open(const struct dataset_csv_scan *st);

/* The line parser the reader uses, exposed for tests and fuzzing. Parses line[0..len) (no
 * newline; any bytes) in format fmt (JSONL or TSV, not AUTO) into out. Returns 0 when out holds
 * an example, 1 for a line to skip silently (blank or TSV header), -1 with a reason in why for a
 * malformed line (out then holds nothing to free). */
int dataset_parse_line(enum dataset_format fmt, const struct dataset_opts *o, const char *line,
                       size_t len, struct dataset_line *out, char *why, size_t whylen);

/* Rewrites every example's label (and multi-label set) through remap[old] (as filled by
 * label_map_sort). */
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
 * without specials); mask[i*max_len + t] is 1 for t < len[i], else 0. A text pair is
 * [CLS] text... [SEP] pair... [SEP] (without specials: the two back to back), cut the way
 * Hugging Face tokenizers' "longest_first" cuts: when both do not fit in the room R left by the
 * specials, the shorter keeps all its pieces if it takes at most half of R and the longer gets
 * the rest; otherwise each gets half (the longer the odd one; the pair, when they tie). A pair's
 * texts are tokenized whole (text_opts.max_tokens does not apply), so that which one is longer is
 * decided as there. */
struct dataset_encoded {
    int32_t *ids;    /* (n, max_len), row-major */
    uint8_t *mask;   /* (n, max_len) */
    int32_t *len;    /* (n) */
    int32_t *labels; /* (n), or multi-label: (n, label_words) bit sets (kernels/crossentropy.h) */
    int label_words; /* 0: one class index per example; > 0: the bit-set words per example;
                      * DATASET_TARGETS_REAL: one float per example (regression) */
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
/* Multi-label: replaces out->labels by bit sets of ds's label sets over `classes` classes
 * (label_words = ceil(classes / 32)). */
void dataset_encode_label_sets(const struct dataset *ds, int classes,
                               struct dataset_encoded *out);
/* Regression: out->labels holds each example's target, a float's bits in the int32
 * (label_words DATASET_TARGETS_REAL). */
#define DATASET_TARGETS_REAL (-1)
/* Regression: a label's number (strtod's whole string, finite and within a float's range) in
 * *out; 0, or -1 when it is not one. The reader and gantry-predict read targets alike. */
int dataset_label_number(const char *label, float *out);
void dataset_encode_targets(const struct dataset *ds, struct dataset_encoded *out);

/* Encodes one text, or a text pair when pair is not NULL, into row[0..max_len) (padded) and
 * returns its length (as len[] above). tok is scratch space reused across calls. *truncated
 * (may be NULL) is set when cut. */
size_t dataset_encode_text(const struct vocab *v, const struct text_opts *to, const char *text,
                           size_t text_len, const char *pair, size_t pair_len, size_t max_len,
                           bool add_cls_sep, struct text_tokens *tok, int32_t *row,
                           bool *truncated);

/* Feeds every example's tokens (its pair's too) to a vocab builder (for a vocab built from
 * training data). */
void dataset_count_words(const struct dataset *ds, const struct text_opts *to,
                         struct vocab_builder *b);

#endif /* GANTRY_DATASET_H */
