/*
 * buf.h - a growable byte buffer with a hard size limit.
 *
 * Everything Gantry reads from the outside (HTTP bodies, watch lines, data files) accumulates in
 * a struct buf whose limit is fixed at buf_init(). Going over the limit is an error (BUF_ETOOBIG)
 * and leaves the buffer as it was, so a bad server or file cannot exhaust memory. The contents are
 * always NUL-terminated (the terminator is not counted in the length) so they can be handed to
 * string functions and to Jansson's json_loadb without a copy.
 */
#ifndef GANTRY_BUF_H
#define GANTRY_BUF_H

#include <stdarg.h>
#include <stddef.h>

#define BUF_ETOOBIG (-1)

struct buf {
    char *p;    /* NULL until the first append */
    size_t len; /* bytes used, not counting the terminating NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* limit on len */
};

/* Storage owned by the caller; no allocation happens until the first append. */
void buf_init(struct buf *b, size_t max);
void buf_cleanup(struct buf *b);

/* Appends n bytes; 0, or BUF_ETOOBIG (buffer unchanged) when len + n would exceed max. */
int buf_append(struct buf *b, const void *data, size_t n) __attribute__((warn_unused_result));
int buf_puts(struct buf *b, const char *s) __attribute__((warn_unused_result));
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), warn_unused_result));

/* Drops the first n bytes (n <= len), keeping the rest; used to consume framed input. */
void buf_consume(struct buf *b, size_t n);
void buf_reset(struct buf *b);

/* Borrowed pointer to the NUL-terminated contents ("" when empty); valid until the next append. */
const char *buf_ptr(const struct buf *b);
size_t buf_len(const struct buf *b);

/* Moves the contents out: a new heap string the caller frees; the buffer is left empty. */
char *buf_take(struct buf *b, size_t *len);

#endif /* GANTRY_BUF_H */
