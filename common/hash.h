/*
 * hash.h - non-cryptographic hashes for identities that only need to be stable and well spread:
 * parameter fingerprints in logs and tests, cache keys. Not for anything an attacker chooses
 * to collide (use OpenSSL's SHA-256 there, as the checkpoint manifests do).
 */
#ifndef GANTRY_HASH_H
#define GANTRY_HASH_H

#include <stddef.h>
#include <stdint.h>

/* 64-bit FNV-1a of n bytes. */
uint64_t hash_fnv1a64(const void *p, size_t n);

#define HASH_DIGEST_HEX 33 /* 32 hex digits + NUL */
/* A 128-bit digest of a NUL-terminated string (FNV-1a and a second, differently mixed FNV pass),
 * as 32 hex digits: short fixed-size keys for long texts. */
void hash_text_digest(const char *s, char out[HASH_DIGEST_HEX]);

/* splitmix64 (Steele, Lea, Flood): advances *state and returns its next well-mixed 64 bits.
 * The one generator behind every seeded choice (weight init, shuffles, the held-out split,
 * n-gram buckets), so all draw the same numbers on every platform; hack/torch_ref.py has it too. */
static inline uint64_t hash_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#endif /* GANTRY_HASH_H */
