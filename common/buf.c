#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

void buf_init(struct buf *b, size_t max)
{
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void buf_cleanup(struct buf *b)
{
    free(b->p);
    buf_init(b, b->max);
}

/* Makes room for n more bytes plus the terminator, doubling so appends are amortised O(1). */
static int reserve(struct buf *b, size_t n)
{
    size_t need, cap;

    if (n > b->max - b->len)
        return BUF_ETOOBIG;
    need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
    if (reserve(b, n))
        return BUF_ETOOBIG;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n))
        return BUF_ETOOBIG;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = '\0';
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

const char *buf_ptr(const struct buf *b)
{
    return b->p ? b->p : "";
}

size_t buf_len(const struct buf *b)
{
    return b->len;
}

char *buf_take(struct buf *b, size_t *len)
{
    char *p = b->p ? b->p : xstrdup("");

    if (len)
        *len = b->len;
    buf_init(b, b->max);
    return p;
}
