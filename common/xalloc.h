/*
 * xalloc.h - allocation that aborts on out-of-memory.
 *
 * Gantry's binaries are programs, not libraries: running out of memory is not recoverable, so
 * these print what failed and abort instead of making every caller check for NULL. xcalloc() and
 * xmallocarray() check n * size for overflow. Size limits on untrusted input belong to the caller
 * (see buf.h); these functions only guard the arithmetic.
 */
#ifndef GANTRY_XALLOC_H
#define GANTRY_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xmallocarray(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif /* GANTRY_XALLOC_H */
