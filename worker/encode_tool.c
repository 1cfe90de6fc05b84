/*
 * encode_tool.c - prints the worker's encoding of texts and text pairs, for the check against
 * Hugging Face tokenizers (hack/hf_tokenizer_check.py) and for looking at an encoding by hand:
 *   encode_tool VOCAB MAX_LEN [nospecials] < in.jsonl
 * Each input line is {"text": "...", "text_pair": "..."} (text_pair optional: a single text);
 * each output line holds the ids the model sees (padding left out), separated by spaces, then a
 * tab and 1 when the encoding was cut, else 0. Exit 0, or 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/xalloc.h"
#include "worker/dataset.h"
#include "worker/text.h"
#include "worker/vocab.h"

int main(int argc, char **argv)
{
    char err[512], *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long max_len = argc >= 3 ? strtol(argv[2], NULL, 10) : 0;
    bool specials = argc < 4 || strcmp(argv[3], "nospecials") != 0;
    struct text_tokens tok;
    struct vocab *v;

    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: encode_tool VOCAB MAX_LEN [nospecials] < in.jsonl\n"
               "Prints the worker's encoding of each {\"text\": ..., \"text_pair\": ...} line\n"
               "(text_pair optional): the ids, padding left out, a tab, 1 when cut else 0.\n"
               "nospecials: without [CLS] and [SEP] (data.clsSep: false).\n");
        return 0;
    }
    if (argc < 3 || argc > 4 || max_len < 1 || max_len > 1 << 16) {
        fprintf(stderr, "usage: encode_tool VOCAB MAX_LEN [nospecials] < in.jsonl\n");
        return 1;
    }
    if (!(v = vocab_load(argv[1], err, sizeof(err)))) {
        fprintf(stderr, "encode_tool: %s\n", err);
        return 1;
    }
    int32_t *row = xmallocarray((size_t)max_len, sizeof(int32_t));
    text_tokens_init(&tok);
    while ((got = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)got, 0, &je);
        const json_t *t = json_object_get(j, "text"), *p = json_object_get(j, "text_pair");
        bool cut = false;
        if (!json_is_string(t) || (p && !json_is_string(p))) {
            fprintf(stderr, "encode_tool: want {\"text\": ..., \"text_pair\": ...}: %s", line);
            return 1;
        }
        size_t n = dataset_encode_text(v, NULL, json_string_value(t), json_string_length(t),
                                       json_string_value(p), json_string_length(p),
                                       (size_t)max_len, specials, &tok, row, &cut);
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", (int)row[i]);
        printf("\t%d\n", cut);
        json_decref(j);
    }
    text_tokens_cleanup(&tok);
    vocab_free(v);
    free(row);
    free(line);
    return 0;
}
