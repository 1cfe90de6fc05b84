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

#endif /* GANTRY_HASH_H */
