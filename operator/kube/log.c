#include "operator/kube/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"

volatile int log_min_level = LOG_LEVEL_INFO;
static int log_fd = 2;

/* Rate limiting for repeated warnings: a small table keyed by a hash of message + fields. */
#define SLOTS 128
struct slot {
    uint64_t key;
    time_t window_start;
    int count;      /* lines written in this window */
    int suppressed; /* lines dropped since the last one written */
};
static struct slot slots[SLOTS];
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
    log_min_level = (int)level;
}

int log_parse_level(const char *name, enum log_level *level)
{
    if (!name)
        return -1;
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (enum log_level)i;
            return 0;
        }
    }
    if (strcmp(name, "warning") == 0) {
        *level = LOG_LEVEL_WARN;
        return 0;
    }
    return -1;
}

void log_set_fd(int fd)
{
    log_fd = fd;
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* 1: write the line (and *suppressed gets the count dropped before it), 0: drop it. */
static int rate_allow(const char *msg, const char *fields_text, int *suppressed)
{
    uint64_t key = fnv1a(fnv1a(14695981039346656037ULL, msg), fields_text);
    struct slot *s = &slots[key % SLOTS];
    time_t now = time(NULL);
    int ok;

    pthread_mutex_lock(&slots_mu);
    if (s->key != key || now - s->window_start >= LOG_WINDOW_S) {
        /* A new key takes the slot over; a collision only makes limiting less strict. */
        if (s->key != key)
            s->suppressed = 0;
        s->key = key;
        s->window_start = now;
        s->count = 0;
    }
    ok = s->count < LOG_BURST;
    if (ok) {
        s->count++;
        *suppressed = s->suppressed;
        s->suppressed = 0;
    } else {
        s->suppressed++;
    }
    pthread_mutex_unlock(&slots_mu);
    return ok;
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(log_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere left to report a logging failure */
        p += w;
        n -= (size_t)w;
    }
}

void log_emit(enum log_level level, const char *msg, const char *fields, ...)
{
    json_t *line = json_object(), *extra = NULL;
    char ts[96], *text = NULL, *ftext = NULL;
    struct timespec now;
    struct tm tm;
    int suppressed = 0;
    va_list ap;

    if ((int)level < 0 || (int)level > LOG_LEVEL_ERROR)
        level = LOG_LEVEL_ERROR;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
    json_object_set_new(line, "ts", json_string(ts));
    json_object_set_new(line, "level", json_string(level_names[level]));
    json_object_set_new(line, "msg", json_string(msg ? msg : ""));
    if (fields && *fields) {
        json_error_t err;
        va_start(ap, fields);
        extra = json_vpack_ex(&err, 0, fields, ap);
        va_end(ap);
        if (!extra || !json_is_object(extra))
            json_object_set_new(line, "logFieldsError", json_string(err.text));
    }
    if (level >= LOG_LEVEL_WARN) {
        ftext = extra ? json_dumps(extra, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (!rate_allow(msg ? msg : "", ftext ? ftext : "", &suppressed))
            goto out;
    }
    if (extra && json_is_object(extra)) {
        const char *k;
        json_t *v;
        json_object_foreach(extra, k, v)
        {
            if (!json_object_get(line, k))
                json_object_set(line, k, v);
        }
    }
    if (suppressed)
        json_object_set_new(line, "suppressed", json_integer(suppressed));
    text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (text && strlen(text) > LOG_MAX_LINE - 1) {
        /* Too long: keep a valid line with the message cut short and the fields dropped. */
        char shortmsg[512];
        free(text);
        snprintf(shortmsg, sizeof(shortmsg), "%s", msg ? msg : "");
        json_object_clear(line);
        json_object_set_new(line, "ts", json_string(ts));
        json_object_set_new(line, "level", json_string(level_names[level]));
        json_object_set_new(line, "msg", json_string(shortmsg));
        json_object_set_new(line, "truncated", json_true());
        text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    }
    if (text) {
        size_t n = strlen(text);
        text = xrealloc(text, n + 2);
        text[n] = '\n';
        write_all(text, n + 1);
    }
out:
    free(text);
    free(ftext);
    json_decref(extra);
    json_decref(line);
}
