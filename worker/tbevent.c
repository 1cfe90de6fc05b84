/*
 * tbevent.c - TensorBoard event files: a tiny protobuf writer, TFRecord framing, the file.
 * Field numbers are those of tensorboard/compat/proto/event.proto and summary.proto.
 */
#include "worker/tbevent.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include <isa-l/crc.h>

#include "common/xalloc.h"

/* ---- CRC32C ---- */

uint32_t tbevent_crc32c(const void *data, size_t n)
{
    /* ISA-L's crc32_iscsi() does neither the initial nor the final inversion of CRC32C, and
     * takes an int length, so feed it in chunks. */
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;

    while (n > 0) {
        size_t k = n > (size_t)INT_MAX ? (size_t)INT_MAX : n;
        crc = crc32_iscsi((unsigned char *)p, (int)k, crc);
        p += k;
        n -= k;
    }
    return crc ^ 0xffffffffu;
}

uint32_t tbevent_mask_crc(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf wire format (just what Event needs) ---- */

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

/* Event, Summary, Summary.Value and SessionLog field numbers. */
enum {
    EVENT_WALL_TIME = 1,
    EVENT_STEP = 2,
    EVENT_FILE_VERSION = 3,
    EVENT_SUMMARY = 5,
    EVENT_SESSION_LOG = 7,
    SUMMARY_VALUE = 1,
    VALUE_TAG = 1,
    VALUE_SIMPLE_VALUE = 2,
    SESSION_LOG_STATUS = 1,
    SESSION_LOG_START = 1,
};

/* A bounded output cursor; once it overflows, every later write is dropped and ok stays false. */
struct pbw {
    uint8_t *p;
    size_t cap, len;
    bool ok;
};

static void pb_byte(struct pbw *w, uint8_t b)
{
    if (w->len >= w->cap) {
        w->ok = false;
        return;
    }
    w->p[w->len++] = b;
}

static void pb_bytes(struct pbw *w, const void *data, size_t n)
{
    if (n > w->cap - w->len) {
        w->ok = false;
        w->len = w->cap;
        return;
    }
    memcpy(w->p + w->len, data, n);
    w->len += n;
}

static void pb_varint(struct pbw *w, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(w, (uint8_t)v);
}

static size_t varint_size(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void pb_tag(struct pbw *w, unsigned field, unsigned wire)
{
    pb_varint(w, (uint64_t)field << 3 | wire);
}

static void pb_le(struct pbw *w, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        pb_byte(w, (uint8_t)(v >> (8 * i)));
}

static void pb_double(struct pbw *w, unsigned field, double d)
{
    uint64_t bits;

    memcpy(&bits, &d, sizeof(bits));
    pb_tag(w, field, WIRE_I64);
    pb_le(w, bits, 8);
}

static void pb_float(struct pbw *w, unsigned field, float f)
{
    uint32_t bits;

    memcpy(&bits, &f, sizeof(bits));
    pb_tag(w, field, WIRE_I32);
    pb_le(w, bits, 4);
}

/* int64 fields are plain varints of the two's complement value: negatives take 10 bytes. */
static void pb_int64(struct pbw *w, unsigned field, int64_t v)
{
    pb_tag(w, field, WIRE_VARINT);
    pb_varint(w, (uint64_t)v);
}

static void pb_string(struct pbw *w, unsigned field, const char *s, size_t n)
{
    pb_tag(w, field, WIRE_LEN);
    pb_varint(w, n);
    pb_bytes(w, s, n);
}

/* Size of a length-delimited field holding n bytes (field numbers here are < 16: 1-byte tag). */
static size_t len_field_size(size_t n)
{
    return 1 + varint_size(n) + n;
}

static size_t pb_done(const struct pbw *w)
{
    return w->ok ? w->len : 0;
}

size_t tbevent_encode_scalar(uint8_t *out, size_t cap, double wall_time, int64_t step,
                             const char *tag, float value)
{
    struct pbw w = {out, cap, 0, true};
    size_t tag_len = strlen(tag);
    size_t value_len, summary_len;

    if (tag_len > TBEVENT_MAX_TAG)
        return 0;
    value_len = len_field_size(tag_len) + 1 + 4; /* tag, then simple_value: 1-byte key + float */
    summary_len = len_field_size(value_len);

    pb_double(&w, EVENT_WALL_TIME, wall_time);
    pb_int64(&w, EVENT_STEP, step);
    pb_tag(&w, EVENT_SUMMARY, WIRE_LEN);
    pb_varint(&w, summary_len);
    pb_tag(&w, SUMMARY_VALUE, WIRE_LEN);
    pb_varint(&w, value_len);
    pb_string(&w, VALUE_TAG, tag, tag_len);
    pb_float(&w, VALUE_SIMPLE_VALUE, value);
    return pb_done(&w);
}

size_t tbevent_encode_version(uint8_t *out, size_t cap, double wall_time, const char *version)
{
    struct pbw w = {out, cap, 0, true};

    pb_double(&w, EVENT_WALL_TIME, wall_time);
    pb_string(&w, EVENT_FILE_VERSION, version, strlen(version));
    return pb_done(&w);
}

size_t tbevent_encode_session_start(uint8_t *out, size_t cap, double wall_time, int64_t step)
{
    struct pbw w = {out, cap, 0, true};

    pb_double(&w, EVENT_WALL_TIME, wall_time);
    pb_int64(&w, EVENT_STEP, step);
    pb_tag(&w, EVENT_SESSION_LOG, WIRE_LEN);
    pb_varint(&w, 2); /* SessionLog{status: START} is 2 bytes: key, value */
    pb_tag(&w, SESSION_LOG_STATUS, WIRE_VARINT);
    pb_varint(&w, SESSION_LOG_START);
    return pb_done(&w);
}

/* ---- TFRecord framing ---- */

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

size_t tbevent_frame(uint8_t *out, size_t cap, const uint8_t *data, size_t n)
{
    if (cap < 16 || n > cap - 16)
        return 0;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put_le32(out + 8, tbevent_mask_crc(tbevent_crc32c(out, 8)));
    memcpy(out + 12, data, n);
    put_le32(out + 12 + n, tbevent_mask_crc(tbevent_crc32c(data, n)));
    return n + 16;
}

/* ---- the file ---- */

struct tbevent_writer {
    FILE *f;
    char *path;
};

static double wall_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mkdir -p with mode 0755; 0 or -1 with errno. */
static int mkdir_p(const char *dir)
{
    char *tmp = xstrdup(dir);
    int rc = 0;

    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            rc = -1;
            goto out;
        }
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        rc = -1;
out:
    free(tmp);
    return rc;
}

/* Creates a file that did not exist before (O_EXCL), trying suffixes .0 .. .99. */
static FILE *create_unique(const char *dir, char **path_out)
{
    char host[256] = "localhost";
    long long secs = (long long)time(NULL);
    char path[4096];

    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "localhost");
    for (int n = 0; n < 100; n++) {
        int len = snprintf(path, sizeof(path), "%s/events.out.tfevents.%010lld.%s.%d.%d", dir, secs,
                           host, (int)getpid(), n);
        if (len < 0 || (size_t)len >= sizeof(path)) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0)
            return NULL;
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            close(fd);
            return NULL;
        }
        *path_out = xstrdup(path);
        return f;
    }
    errno = EEXIST;
    return NULL;
}

/* Frames and appends one encoded event; n == 0 means the encoder refused (bad tag). */
static int write_event(struct tbevent_writer *w, const uint8_t *ev, size_t n)
{
    uint8_t rec[TBEVENT_MAX_EVENT + 16];
    size_t len;

    if (n == 0) {
        errno = EINVAL;
        return -1;
    }
    len = tbevent_frame(rec, sizeof(rec), ev, n);
    if (len == 0 || fwrite(rec, 1, len, w->f) != len) {
        if (len == 0)
            errno = EINVAL;
        fprintf(stderr,
                "tbevent: could not write an event to %s: %s. TensorBoard curves will "
                "miss points; check the volume has space\n",
                w->path, strerror(errno));
        return -1;
    }
    return 0;
}

struct tbevent_writer *tbevent_open(const char *dir)
{
    struct tbevent_writer *w = NULL;
    uint8_t ev[TBEVENT_MAX_EVENT];
    char *path = NULL;
    FILE *f = NULL;

    if (mkdir_p(dir) != 0 || !(f = create_unique(dir, &path))) {
        fprintf(stderr,
                "tbevent: could not create an event file in %s: %s. Check that the "
                "checkpoint volume is mounted and writable\n",
                dir, strerror(errno));
        goto out;
    }
    w = xcalloc(1, sizeof(*w));
    w->f = f;
    w->path = path;
    f = NULL;
    path = NULL;
    if (write_event(w, ev, tbevent_encode_version(ev, sizeof(ev), wall_now(), "brain.Event:2")) ||
        tbevent_flush(w)) {
        tbevent_close(w);
        w = NULL;
    }
out:
    if (f)
        fclose(f);
    free(path);
    return w;
}

const char *tbevent_path(const struct tbevent_writer *w)
{
    return w->path;
}

int tbevent_scalar(struct tbevent_writer *w, const char *tag, int64_t step, float value)
{
    uint8_t ev[TBEVENT_MAX_EVENT];
    size_t n = tbevent_encode_scalar(ev, sizeof(ev), wall_now(), step, tag, value);

    if (n == 0) {
        fprintf(stderr, "tbevent: tag \"%.40s...\" is longer than %d bytes; use a shorter tag\n",
                tag, TBEVENT_MAX_TAG);
        errno = EINVAL;
        return -1;
    }
    return write_event(w, ev, n);
}

int tbevent_session_start(struct tbevent_writer *w, int64_t step)
{
    uint8_t ev[TBEVENT_MAX_EVENT];

    return write_event(w, ev, tbevent_encode_session_start(ev, sizeof(ev), wall_now(), step));
}

int tbevent_flush(struct tbevent_writer *w)
{
    if (fflush(w->f) != 0) {
        fprintf(stderr, "tbevent: could not write %s: %s\n", w->path, strerror(errno));
        return -1;
    }
    return 0;
}

int tbevent_close(struct tbevent_writer *w)
{
    int rc = 0;

    if (!w)
        return 0;
    if (fclose(w->f) != 0) {
        fprintf(stderr, "tbevent: could not close %s: %s\n", w->path, strerror(errno));
        rc = -1;
    }
    free(w->path);
    free(w);
    return rc;
}
