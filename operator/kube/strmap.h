/*
 * strmap.h - a string-keyed hash map (chained, doubling), for the watch's known set, the
 * informer cache, the work queue and the event recorder.
 *
 * Keys are copied; values are opaque pointers the caller owns (strmap_free() takes a destructor).
 * Not thread-safe: callers hold their own lock.
 */
#ifndef GANTRY_STRMAP_H
#define GANTRY_STRMAP_H

#include <stdbool.h>
#include <stddef.h>

struct strmap_entry {
    void *val;
    struct strmap_entry *next;
    char key[]; /* stored with the entry: one allocation */
};

struct strmap {
    struct strmap_entry **b;
    size_t nb, n;
};

void strmap_init(struct strmap *m);
/* Calls destroy(val) for each entry when destroy is not NULL. */
void strmap_cleanup(struct strmap *m, void (*destroy)(void *));
/* Borrowed value, or NULL. */
void *strmap_get(const struct strmap *m, const char *key);
bool strmap_has(const struct strmap *m, const char *key);
/* Sets key to val; returns the previous value (the caller disposes of it) or NULL. */
void *strmap_put(struct strmap *m, const char *key, void *val);
/* Removes key; returns its value or NULL. */
void *strmap_del(struct strmap *m, const char *key);
size_t strmap_len(const struct strmap *m);

/* Iteration: for (e = strmap_first(m, &it); e; e = strmap_next(m, &it)) - no changes meanwhile. */
struct strmap_iter {
    size_t bucket;
    struct strmap_entry *e;
};
struct strmap_entry *strmap_first(const struct strmap *m, struct strmap_iter *it);
struct strmap_entry *strmap_next(const struct strmap *m, struct strmap_iter *it);

#endif /* GANTRY_STRMAP_H */
