/* A toy classification set for the training-loop tests (train_test.c, train_gpu_test.c), so both
 * learn the same task from one generator: label i % 2; an example of label 1 holds token 3 at a
 * random position, every other token is drawn from 4..vocab-1 (0 is padding, 3 never appears in
 * label 0). Lengths are min_len..max_len. A 64-bit LCG (Knuth's MMIX constants) seeded with
 * spec->seed makes it the same on every machine. Test code only; not part of gantry_core. */
#ifndef GANTRY_TRAIN_TESTDATA_H
#define GANTRY_TRAIN_TESTDATA_H

#include <stdint.h>

#include "worker/train.h"

struct train_testdata_spec {
    int n;         /* examples */
    int max_len;   /* row length T of ids; 2 <= min_len <= max_len */
    int min_len;
    int vocab;     /* > 4 */
    uint64_t seed;
};

/* Fills the caller's buffers ids (n * max_len), len (n) and labels (n) and returns a train_data
 * that borrows them (they must outlive it). */
struct train_data train_testdata_toy(const struct train_testdata_spec *spec, int32_t *ids,
                                     int32_t *len, int32_t *labels);

#endif
