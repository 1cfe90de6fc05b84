#include "operator/cond.h"

#include <stdio.h>
#include <string.h>

/* src into dst[n], cut where it must be on a UTF-8 character boundary: a character cut in two is
 * not UTF-8, and Jansson refuses such a string, which would drop the whole condition from the
 * status written back (the reconcile then no longer reaches a fixed point: fuzz_rec found it). */
static void copy_str(char *dst, size_t n, const char *src)
{
    size_t len = src ? strlen(src) : 0;
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)src[len] & 0xC0) == 0x80)
            len--; /* src[len] would start the cut character's tail: cut before its lead */
    }
    memcpy(dst, src ? src : "", len);
    dst[len] = '\0';
}

/* The API's pattern for a condition's reason: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (ASCII) */
static bool ascii_alpha(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}
static bool ascii_alnum_(char ch)
{
    return ascii_alpha(ch) || (ch >= '0' && ch <= '9') || ch == '_';
}
static bool reason_ok(const char *r)
{
    size_t n = r ? strlen(r) : 0;
    if (n == 0 || n >= COND_REASON_MAX || !ascii_alpha(r[0]) || !ascii_alnum_(r[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ascii_alnum_(r[i]) && r[i] != ',' && r[i] != ':')
            return false;
    return true;
}

void cond_list_from_json(struct cond_list *l, const json_t *arr)
{
    size_t i;
    json_t *it;

    memset(l, 0, sizeof(*l));
    if (!json_is_array(arr))
        return;
    json_array_foreach(arr, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *status = json_string_value(json_object_get(it, "status"));
        const char *ltt = json_string_value(json_object_get(it, "lastTransitionTime"));
        struct cond *c;

        if (!type || !*type || strlen(type) >= COND_TYPE_MAX || !status || l->n >= COND_MAX)
            continue;
        if (cond_find(l, type))
            continue; /* a list-map: the first entry of a type wins */
        c = &l->c[l->n++];
        copy_str(c->type, sizeof(c->type), type);
        c->status = strcmp(status, "True") == 0;
        /* (a reason the API would refuse, or longer than ours, reads as Unknown: written back
         * as it was, the status update would be refused) */
        const char *reason = json_string_value(json_object_get(it, "reason"));
        copy_str(c->reason, sizeof(c->reason), reason_ok(reason) ? reason : "Unknown");
        copy_str(c->message, sizeof(c->message),
                 json_string_value(json_object_get(it, "message")));
        if (!ltt || cond_parse_time(ltt, &c->last_transition) != 0)
            c->last_transition = 0;
        c->observed_generation = json_integer_value(json_object_get(it, "observedGeneration"));
    }
}

json_t *cond_list_to_json(const struct cond_list *l)
{
    json_t *arr = json_array();
    char ts[32];

    for (int i = 0; i < l->n; i++) {
        const struct cond *c = &l->c[i];

        cond_fmt_time(c->last_transition, ts, sizeof(ts));
        /* reason must match the API's pattern and be non-empty; the message may be empty. */
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "type", c->type,
                                             "status", c->status ? "True" : "False", "reason",
                                             c->reason[0] ? c->reason : "Unknown", "message",
                                             c->message, "lastTransitionTime", ts,
                                             "observedGeneration",
                                             (json_int_t)c->observed_generation));
    }
    return arr;
}

const struct cond *cond_find(const struct cond_list *l, const char *type)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->c[i].type, type) == 0)
            return &l->c[i];
    return NULL;
}

bool cond_is_true(const struct cond_list *l, const char *type)
{
    const struct cond *c = cond_find(l, type);
    return c && c->status;
}

bool cond_set(struct cond_list *l, const char *type, bool status, const char *reason,
              const char *message, time_t now, long long generation)
{
    struct cond *c = (struct cond *)cond_find(l, type);
    bool flipped;

    if (!c) {
        if (l->n >= COND_MAX)
            return false; /* cannot happen with the six types we use */
        c = &l->c[l->n++];
        memset(c, 0, sizeof(*c));
        copy_str(c->type, sizeof(c->type), type);
        flipped = true;
    } else {
        flipped = c->status != status;
    }
    c->status = status;
    if (flipped)
        c->last_transition = now;
    copy_str(c->reason, sizeof(c->reason), reason);
    copy_str(c->message, sizeof(c->message), message);
    c->observed_generation = generation;
    return flipped;
}

bool cond_clear(struct cond_list *l, const char *type, const char *reason, const char *message,
                time_t now, long long generation)
{
    if (!cond_is_true(l, type))
        return false;
    return cond_set(l, type, false, reason, message, now, generation);
}

void cond_fmt_time(time_t t, char *out, size_t n)
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cond_parse_time(const char *s, time_t *out)
{
    struct tm tm;
    const char *p;
    int off = 0;

    memset(&tm, 0, sizeof(tm));
    p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -1;
    if (*p == '.') { /* fractional seconds: dropped */
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
            return -1;
        off = (hh * 60 + mm) * 60 * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    *out = timegm(&tm) - off;
    return 0;
}
