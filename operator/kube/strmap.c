#include "operator/kube/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

static uint64_t hash(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Buckets are allocated on the first put (many maps stay small or empty: one per job). */
void strmap_init(struct strmap *m)
{
    m->nb = 0;
    m->n = 0;
    m->b = NULL;
}

void strmap_cleanup(struct strmap *m, void (*destroy)(void *))
{
    for (size_t i = 0; i < m->nb; i++) {
        struct strmap_entry *e = m->b[i], *n;
        for (; e; e = n) {
            n = e->next;
            if (destroy)
                destroy(e->val);
            free(e); /* the key lives in the entry's allocation */
        }
    }
    free(m->b);
    m->b = NULL;
    m->nb = m->n = 0;
}

/* The slot of key: m must have buckets. */
static struct strmap_entry **slot(const struct strmap *m, const char *key)
{
    struct strmap_entry **p = &m->b[hash(key) & (m->nb - 1)];

    while (*p && strcmp((*p)->key, key) != 0)
        p = &(*p)->next;
    return p;
}

void *strmap_get(const struct strmap *m, const char *key)
{
    struct strmap_entry *e = m->nb ? *slot(m, key) : NULL;
    return e ? e->val : NULL;
}

bool strmap_has(const struct strmap *m, const char *key)
{
    return m->nb && *slot(m, key) != NULL;
}

static void grow(struct strmap *m)
{
    size_t nb = m->nb ? m->nb * 2 : 4;
    struct strmap_entry **b = xcalloc(nb, sizeof(*b));

    for (size_t i = 0; i < m->nb; i++) {
        struct strmap_entry *e = m->b[i], *n;
        for (; e; e = n) {
            n = e->next;
            size_t j = hash(e->key) & (nb - 1);
            e->next = b[j];
            b[j] = e;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

void *strmap_put(struct strmap *m, const char *key, void *val)
{
    struct strmap_entry **p, *e;
    size_t klen = strlen(key);
    void *old;

    if (m->nb == 0)
        grow(m);
    p = slot(m, key);
    if (*p) {
        old = (*p)->val;
        (*p)->val = val;
        return old;
    }
    e = xmalloc(sizeof(*e) + klen + 1); /* one allocation: the entry, then its key */
    memcpy(e->key, key, klen + 1);
    e->val = val;
    e->next = NULL;
    *p = e;
    if (++m->n > m->nb)
        grow(m);
    return NULL;
}

void *strmap_del(struct strmap *m, const char *key)
{
    struct strmap_entry **p, *e;
    void *v;

    if (!m->nb)
        return NULL;
    p = slot(m, key);
    if (!(e = *p))
        return NULL;
    *p = e->next;
    v = e->val;
    free(e);
    m->n--;
    return v;
}

size_t strmap_len(const struct strmap *m)
{
    return m->n;
}

struct strmap_entry *strmap_first(const struct strmap *m, struct strmap_iter *it)
{
    it->bucket = 0;
    it->e = NULL;
    return strmap_next(m, it);
}

struct strmap_entry *strmap_next(const struct strmap *m, struct strmap_iter *it)
{
    if (it->e && it->e->next)
        return it->e = it->e->next;
    for (size_t i = it->e ? it->bucket + 1 : it->bucket; i < m->nb; i++) {
        if (m->b[i]) {
            it->bucket = i;
            return it->e = m->b[i];
        }
    }
    it->bucket = m->nb;
    return it->e = NULL;
}
