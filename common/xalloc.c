#include "common/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t size)
{
    fprintf(stderr, "fatal: out of memory allocating %zu bytes; give the process more memory "
                    "(a pod's resources.limits.memory) or use a smaller batch or model\n",
            size);
    abort();
}

void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        oom(size);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xmallocarray(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        fprintf(stderr, "fatal: allocation of %zu x %zu bytes overflows size_t\n", n, size);
        abort();
    }
    return xmalloc(n * size);
}

void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        oom(size);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
