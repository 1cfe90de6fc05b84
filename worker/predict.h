/*
 * predict.h - gantry-predict's parts (not a library API): the loaded model and the batch being
 * classified, shared by the file mode (predict.c) and the HTTP server (predict_serve.c).
 */
#ifndef GANTRY_PREDICT_H
#define GANTRY_PREDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "worker/card.h"
#include "worker/eval.h"
#include "worker/model.h"
#include "worker/text.h"
#include "worker/vocab.h"

struct train_gpu_infer;


enum fmt { FMT_AUTO, FMT_JSONL, FMT_TSV, FMT_CSV, FMT_TEXT };

struct opts {
    const char *model, *output, *report, *bind, *name;
    const char *text_field, *pair_field, *label_field; /* NULL: the card's (a text pair model
                                                        * has a pair_field after setup) */
    int serve; /* --serve PORT: -1 = no server */
    enum fmt format;
    int top_k, batch, threads;
    double threshold; /* multi-label: a class is predicted when its sigmoid is over this */
    bool strict, quiet;
    bool cuda, bf16; /* --device cuda, --precision bf16 */
};

/* The loaded model and the batch being filled. */
struct pred {
    struct opts o;
    char dir[4096];
    long step;
    struct model_card card;
    struct vocab *vocab;
    struct model model;
    char **quoted; /* each label as a JSON string literal */
    const char **names;
    int K, maxT;
    struct text_tokens tok;
    int32_t *rows; /* (batch, maxT) encoded documents */
    int *x, *len;  /* the batch gathered to (B, T) */
    long *line;
    int lw;         /* multi-label (card.multi_label): label bit-set words per document; else 0 */
    int32_t *label; /* (batch, max(lw, 1)): the class, or multi-label's bit set */
    bool *has_label; /* (batch): label holds the document's true labels */
    int *top;       /* (K) scratch for --top-k */
    struct train_gpu_infer *gpu; /* --device cuda: the device model; NULL on the CPU */
    float *logits, *probs;       /* (batch, K) its outputs on the host */
    const char *file;
    bool name_files;
    bool array;     /* predictions as JSON array elements (the server's responses) */
    size_t emitted; /* elements written to this array */
    int n;
    FILE *out;
    struct eval_counts ec;
    size_t docs, malformed, labelled, unknown_label, truncated;
    double t0, last_note;
};

/* Monotonic seconds. */
double predict_now(void);

/* Encodes one document (a text, or a text pair when pair is not NULL) into the batch (label: its
 * class, or for a multi-label model p->lw words of bits; NULL: none known) and runs the batch
 * when it is full. 0 or an exit status. */
int predict_add(struct pred *p, const char *text, size_t len, const char *pair, size_t pair_len,
                long line, const int32_t *label);

/* Runs the documents in the batch and writes their predictions to p->out (JSON lines, or array
 * elements with p->array); labelled ones are counted in p->ec. 0 or an exit status. */
int predict_flush(struct pred *p);

/* Serves p over HTTP until SIGTERM or SIGINT (predict_serve.c). 0 or an exit status. */
int predict_serve(struct pred *p);

#endif /* GANTRY_PREDICT_H */
