/*
 * vocab.h - token vocabularies: BERT vocab.txt files with WordPiece, and vocabs built from data.
 *
 * A vocab maps token strings to dense ids 0..size-1. Two ways to get one:
 *   - vocab_load(): BERT's vocab.txt format, one token per line, id = line number - 1, subword
 *     continuations spelled "##piece". Lines are taken verbatim (a trailing "\r" is dropped).
 *   - a vocab_builder fed with tokenized training documents, then vocab_builder_build() with a
 *     minimum frequency and a maximum size. Its ids: the special tokens first ([PAD]=0, [UNK]=1,
 *     [CLS]=2, [SEP]=3, [MASK]=4), then words by descending count, ties by byte order, so the
 *     result is deterministic whatever order the documents came in.
 * vocab_save() writes vocab.txt, so either kind round-trips through a file (and a checkpoint).
 *
 * WordPiece (vocab_wordpiece) is BERT's greedy longest-match-first: the longest prefix of the
 * word in the vocab, then the longest "##"-prefixed continuation, and so on; if some position
 * has no match, or the word is longer than VOCAB_MAX_WORD_CHARS characters, the whole word is
 * one [UNK]. A built vocab holds whole words only, so there a word is itself or [UNK].
 *
 * Special tokens are found by name ([PAD], [UNK], [CLS], [SEP], [MASK]); a file that lacks
 * [UNK] or [PAD] is refused by vocab_load() because encoding needs both.
 * Thread safety: a vocab is read-only after load/build and may be shared between threads.
 */
#ifndef GANTRY_VOCAB_H
#define GANTRY_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "worker/text.h"

/* Limits on what vocab_load() accepts. */
#define VOCAB_MAX_FILE        (64 << 20) /* bytes */
#define VOCAB_MAX_SIZE        (1 << 22)  /* tokens */
#define VOCAB_MAX_TOKEN_BYTES 1024       /* one line */
/* Words longer than this many characters are one [UNK] (BERT's max_input_chars_per_word). */
#define VOCAB_MAX_WORD_CHARS 100

struct vocab;
struct vocab_builder;

/* Loads a vocab.txt. Returns a new vocab, or NULL with "path:line: why" in err. Duplicate
 * tokens, empty lines, NUL bytes and invalid UTF-8 are errors (they would make ids ambiguous). */
struct vocab *vocab_load(const char *path, char *err, size_t errlen);
/* Like vocab_load, on text[0..n) already in memory (path names it in messages). */
struct vocab *vocab_parse(const char *text, size_t n, const char *path, char *err, size_t errlen);
/* v as vocab.txt text, one token per line (what vocab_save writes): a new NUL-terminated
 * buffer of *len bytes (the NUL not counted); free(). */
char *vocab_dump(const struct vocab *v, size_t *len);
/* Writes v as vocab.txt (atomically: temp file + rename). 0, or -1 with errno-based err. */
int vocab_save(const struct vocab *v, const char *path, char *err, size_t errlen);
void vocab_free(struct vocab *v);

int32_t vocab_size(const struct vocab *v);
/* Id of tok[0..len), or -1 when absent. */
int32_t vocab_find(const struct vocab *v, const char *tok, size_t len);
/* Borrowed NUL-terminated token string of id (0 <= id < size), or NULL when out of range. */
const char *vocab_token(const struct vocab *v, int32_t id);

/* Ids of the special tokens; -1 for [CLS]/[SEP]/[MASK] when the file has none. */
int32_t vocab_pad_id(const struct vocab *v);
int32_t vocab_unk_id(const struct vocab *v);
int32_t vocab_cls_id(const struct vocab *v);
int32_t vocab_sep_id(const struct vocab *v);

/* Splits one word (a token from text_tokenize) into WordPiece ids. Writes at most max ids to
 * ids and returns the number of pieces the word has (which may exceed max: the caller decides
 * whether to truncate). Never fails: unknown words give [UNK]. */
size_t vocab_wordpiece(const struct vocab *v, const char *word, size_t len, int32_t *ids,
                       size_t max);

/* Converts a tokenized document to ids: the WordPiece pieces of every token, in order, at most
 * max of them. Returns how many ids were written. */
size_t vocab_encode_tokens(const struct vocab *v, const struct text_tokens *t, int32_t *ids,
                           size_t max);

/* Counting words for a vocab built from training data. */
struct vocab_builder *vocab_builder_new(void);
void vocab_builder_free(struct vocab_builder *b);
/* Counts every token of t once per occurrence. */
void vocab_builder_add(struct vocab_builder *b, const struct text_tokens *t);
/* Counts one word count times (used by tests and by merging builders). */
void vocab_builder_add_word(struct vocab_builder *b, const char *word, size_t len, uint64_t count);
/* Distinct words counted so far. */
size_t vocab_builder_distinct(const struct vocab_builder *b);
/* A new vocab: the 5 special tokens, then words with count >= min_freq, most frequent first,
 * cut so that the total size (specials included) is at most max_size (0 = no cap; values below 5
 * are raised to 5). The builder is unchanged and can be reused. */
struct vocab *vocab_builder_build(const struct vocab_builder *b, uint64_t min_freq,
                                  size_t max_size);

#endif /* GANTRY_VOCAB_H */
