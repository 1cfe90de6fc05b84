/*
 * Shared bits of the libFuzzer targets (the worker/ and operator/kube/fuzz/ targets). A target defines
 * LLVMFuzzerTestOneInput; the same file is linked either with -fsanitize=fuzzer or with a replay
 * main() that runs the seed corpus under the normal compiler.
 */
#ifndef GANTRY_FUZZ_H
#define GANTRY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Like assert(), but also in release builds (NDEBUG), where the replay tests run. */
#define FUZZ_CHECK(c)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
