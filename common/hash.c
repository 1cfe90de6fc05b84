#include "common/hash.h"

#include <stdio.h>

uint64_t hash_fnv1a64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

void hash_text_digest(const char *s, char out[HASH_DIGEST_HEX])
{
    uint64_t a = 0xcbf29ce484222325ULL, b = 0x9e3779b97f4a7c15ULL;

    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        a = (a ^ *c) * 0x100000001b3ULL;
        b = (b ^ *c) * 0x100000001b3ULL;
        b ^= b >> 29;
    }
    snprintf(out, HASH_DIGEST_HEX, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}
