/*
 * card.h - the model card: what a checkpoint needs besides its tensors to classify new text.
 *
 * Every checkpoint the worker writes carries config.json (this card) and vocab.txt beside
 * model.safetensors, as a Hugging Face model directory carries config.json and its tokenizer
 * files: gantry-predict loads a step directory on its own, with no training config or data.
 *
 *   {"format": "gantry-model-v1", "task": "text-classification",
 *    "model": {"type": "transformer", "layers": 2, "hidden": 128, "heads": 4, "ffn": 512,
 *              "maxSeqLen": 256, "pooling": "mean", "buckets": 0, "vocabSize": 12000},
 *    "labels": ["ham", "spam"],                      (class ids in order)
 *    "tokenizer": {"vocab": "vocab.txt", "lowercase": true, "stripAccents": true,
 *                  "splitCjk": true, "splitPunct": true, "clsSep": true, "maxTokens": 256},
 *    "input": {"text": "text", "textPair": "", "label": "label", "labelIndex": false,
 *              "labelSeparator": ","}}
 *                                    (the JSONL fields it was trained on; textPair "" = single
 *                                     texts, else text pairs: dataset.h; labelIndex: integer
 *                                     labels index "labels", data.labelNames)
 * task is "multi-label-classification" for a model whose classes are independent yes/no
 * decisions (sigmoid outputs; its data's labels are lists, separated by labelSeparator in TSV and
 * CSV); "regression" for a model with one real output and no classes ("labels": []); cards
 * without it are text-classification.
 *
 * Field names follow the TrainingJob's (training.model). card_parse() treats the file as
 * untrusted: wrong types, out-of-range numbers, duplicate or empty labels are errors naming the
 * field; unknown fields are ignored (a newer writer may add some).
 */
#ifndef GANTRY_CARD_H
#define GANTRY_CARD_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/dataset.h"
#include "worker/text.h"

#define CARD_FORMAT "gantry-model-v1"
#define CARD_FILE "config.json"
#define CARD_VOCAB_FILE "vocab.txt"
#define CARD_MAX_BYTES (4u << 20)

struct model_card {
    char type[16];    /* "transformer" or "ngram" */
    char pooling[8];  /* "mean" or "cls" */
    int layers, hidden, heads, ffn, max_seq_len, buckets, vocab_size;
    struct text_opts text; /* text.stop is always NULL: stop words are not supported here */
    bool cls_sep;
    char vocab_file[128];  /* the side file holding the vocab */
    char text_field[64], text_pair_field[64], label_field[64]; /* "input"; pair "" = single */
    bool label_index; /* "input.labelIndex": an integer label i in the data is labels[i] */
    bool multi_label; /* "task": "multi-label-classification" */
    bool regression;  /* "task": "regression": one real output, "labels": [] */
    char label_sep;   /* "input.labelSeparator" (multi-label) */
    struct label_map labels;
};

/* Zeroes c and sets the tokenizer defaults; card_cleanup() frees the labels. */
void card_init(struct model_card *c);
void card_cleanup(struct model_card *c);

/* The card as JSON text (indented, newline-terminated): a new string; free(). */
char *card_dump(const struct model_card *c);

/* Parses js[0..n) (any bytes) into c (card_init'ed by the caller; its labels must be empty).
 * 0, or -1 with "field: why" in err. */
int card_parse(const char *js, size_t n, struct model_card *c, char *err, size_t errlen);

#endif /* GANTRY_CARD_H */
