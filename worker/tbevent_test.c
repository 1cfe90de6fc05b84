/*
 * tbevent_test.c - CRC32C test vectors, the Event encoding against bytes from the protobuf
 * library (tensorboard.compat.proto.event_pb2 2.21, SerializeToString), the TFRecord framing
 * against tensorboard's RecordWriter, and a written file read back record by record.
 * The same files are read by TensorBoard itself in obs_py_test.
 */
#include "worker/tbevent.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"

static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = strlen(hex) / 2;

    if (n > cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static int same_bytes(const uint8_t *got, size_t n, const char *want_hex)
{
    uint8_t want[1024];
    size_t m = unhex(want_hex, want, sizeof(want));

    if (n != m || memcmp(got, want, n) != 0) {
        fprintf(stderr, "       got  ");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%02x", got[i]);
        fprintf(stderr, "\n       want %s\n", want_hex);
        return 0;
    }
    return 1;
}

/* RFC 3720 B.4 and the usual check value. */
static void test_crc32c_vectors(void)
{
    uint8_t buf[48];

    TEST_EQ_INT(tbevent_crc32c("123456789", 9), 0xe3069283u);
    TEST_EQ_INT(tbevent_crc32c("", 0), 0);
    memset(buf, 0, 32);
    TEST_EQ_INT(tbevent_crc32c(buf, 32), 0x8a9136aau);
    memset(buf, 0xff, 32);
    TEST_EQ_INT(tbevent_crc32c(buf, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    TEST_EQ_INT(tbevent_crc32c(buf, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    TEST_EQ_INT(tbevent_crc32c(buf, 32), 0x113fdb5cu);
    /* An iSCSI read command PDU. */
    const char *pdu = "01c000000000000000000000000000001400000000000400000000140000001828000000"
                      "000000000200000000000000";
    unhex(pdu, buf, sizeof(buf));
    TEST_EQ_INT(tbevent_crc32c(buf, 48), 0xd9963a56u);
    /* tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c(b"123456789") */
    TEST_EQ_INT(tbevent_mask_crc(tbevent_crc32c("123456789", 9)), 0xc78ab0e5u);
}

static void test_encode_scalar(void)
{
    uint8_t out[TBEVENT_MAX_EVENT];
    size_t n;

    /* Event{wall_time: 1.5, step: 7, summary{value{tag: "loss", simple_value: 0.25}}}:
     * 09 <double 1.5> | 10 07 | 2a 0d { 0a 0b { 0a 04 "loss" | 15 <float 0.25> } } */
    n = tbevent_encode_scalar(out, sizeof(out), 1.5, 7, "loss", 0.25f);
    TEST_CHECK(same_bytes(out, n,
                          "09000000000000f83f"
                          "1007"
                          "2a0d"
                          "0a0b"
                          "0a046c6f7373"
                          "150000803e"));

    /* A negative step is a 10-byte varint; a 200-byte tag makes 2-byte lengths (0xd3 0x01). */
    char tag[201];
    memset(tag, 'a', 200);
    tag[200] = '\0';
    n = tbevent_encode_scalar(out, sizeof(out), 2.0, -3, tag, -1.0f);
    TEST_EQ_INT(n, 234);
    TEST_CHECK(same_bytes(out, 24, "09000000000000004010fdffffffffffffffff012ad3010a"));
    TEST_CHECK(same_bytes(out + n - 5, 5, "15000080bf"));
}

static void test_encode_limits(void)
{
    uint8_t out[TBEVENT_MAX_EVENT];
    char tag[TBEVENT_MAX_TAG + 2];

    memset(tag, 'x', sizeof(tag) - 1);
    tag[sizeof(tag) - 1] = '\0';
    TEST_EQ_INT(tbevent_encode_scalar(out, sizeof(out), 0, 1, tag, 1), 0);
    tag[TBEVENT_MAX_TAG] = '\0'; /* exactly the limit: accepted, and fits the event buffer */
    TEST_CHECK(tbevent_encode_scalar(out, sizeof(out), 0, 1, tag, 1) > TBEVENT_MAX_TAG);
    TEST_EQ_INT(tbevent_encode_scalar(out, 20, 1.5, 7, "loss", 0.25f), 0); /* needs 26 */
    TEST_EQ_INT(tbevent_encode_scalar(out, 26, 1.5, 7, "loss", 0.25f), 26);
    TEST_EQ_INT(tbevent_frame(out, 20, out, 5), 0);
}

static void test_encode_other_events(void)
{
    uint8_t out[64];
    size_t n;

    n = tbevent_encode_version(out, sizeof(out), 2.0, "brain.Event:2");
    TEST_CHECK(same_bytes(out, n, "0900000000000000401a0d627261696e2e4576656e743a32"));
    n = tbevent_encode_session_start(out, sizeof(out), 2.0, 5);
    TEST_CHECK(same_bytes(out, n,
                          "0900000000000000401005"
                          "3a020801"));
}

/* tensorboard.summary.writer.record_writer.RecordWriter output for the scalar event above. */
static void test_frame(void)
{
    uint8_t ev[64], rec[80];
    size_t n = tbevent_encode_scalar(ev, sizeof(ev), 1.5, 7, "loss", 0.25f);
    size_t m = tbevent_frame(rec, sizeof(rec), ev, n);

    TEST_EQ_INT(m, n + 16);
    TEST_CHECK(same_bytes(rec, m,
                          "1a00000000000000"
                          "129bd82d"
                          "09000000000000f83f10072a0d0a0b0a046c6f7373150000803e"
                          "c9d07b8d"));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Writes a file under a nested, not yet existing directory and walks its records. */
static void test_file_roundtrip(void)
{
    char dir[] = "/tmp/tbevent_test.XXXXXX";
    char sub[256], path[512];
    uint8_t data[4096];
    size_t len;
    FILE *f;

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(sub, sizeof(sub), "%s/job/tb", dir);
    struct tbevent_writer *w = tbevent_open(sub);
    TEST_CHECK(w != NULL);
    if (!w)
        return;
    TEST_CHECK(strstr(tbevent_path(w), "/events.out.tfevents.") != NULL);
    snprintf(path, sizeof(path), "%s", tbevent_path(w));
    for (int s = 1; s <= 3; s++)
        TEST_EQ_INT(tbevent_scalar(w, "train/loss", s, 1.0f / (float)s), 0);
    TEST_EQ_INT(tbevent_session_start(w, 2), 0);
    char longtag[TBEVENT_MAX_TAG + 2];
    memset(longtag, 'y', sizeof(longtag) - 1);
    longtag[sizeof(longtag) - 1] = '\0';
    TEST_EQ_INT(tbevent_scalar(w, longtag, 4, 0), -1); /* refused, nothing written */
    TEST_EQ_INT(tbevent_close(w), 0);

    /* A second writer in the same directory and second gets a distinct name. */
    struct tbevent_writer *w2 = tbevent_open(sub);
    TEST_CHECK(w2 && strcmp(tbevent_path(w2), path) != 0);
    tbevent_close(w2);

    f = fopen(path, "rb");
    TEST_CHECK(f != NULL);
    if (!f)
        return;
    len = fread(data, 1, sizeof(data), f);
    fclose(f);

    int records = 0;
    size_t off = 0;
    while (off + 12 <= len) {
        uint64_t n = get_le(data + off, 8);
        TEST_EQ_INT(get_le(data + off + 8, 4), tbevent_mask_crc(tbevent_crc32c(data + off, 8)));
        TEST_CHECK(off + 16 + n <= len);
        if (off + 16 + n > len)
            break;
        TEST_EQ_INT(get_le(data + off + 12 + n, 4),
                    tbevent_mask_crc(tbevent_crc32c(data + off + 12, n)));
        if (records ==
            0) /* file_version first: after the 9-byte wall_time, 1a 0d "brain.Event:2" */
            TEST_CHECK(n == 24 && memcmp(data + off + 12 + 11, "brain.Event:2", 13) == 0);
        if (records == 1) /* step 1, tag train/loss, value 1.0 */
            TEST_CHECK(data[off + 12 + 9] == 0x10 && data[off + 12 + 10] == 1 &&
                       memmem(data + off + 12, n, "train/loss", 10) != NULL);
        off += 16 + n;
        records++;
    }
    TEST_EQ_INT(off, len);
    TEST_EQ_INT(records, 5); /* version, 3 scalars, session start */

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TEST_EQ_INT(system(cmd), 0);
}

static void test_open_fails_cleanly(void)
{
    /* A regular file where the directory should be: open fails with a message, no crash. */
    char dir[] = "/tmp/tbevent_test.XXXXXX";
    char file[300];

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(file, sizeof(file), "%s/plainfile", dir);
    FILE *f = fopen(file, "w");
    TEST_CHECK(f != NULL);
    if (f)
        fclose(f);
    TEST_CHECK(tbevent_open(file) == NULL);
    unlink(file);
    rmdir(dir);
}

int main(void)
{
    TEST_RUN(test_crc32c_vectors);
    TEST_RUN(test_encode_scalar);
    TEST_RUN(test_encode_limits);
    TEST_RUN(test_encode_other_events);
    TEST_RUN(test_frame);
    TEST_RUN(test_file_roundtrip);
    TEST_RUN(test_open_fails_cleanly);
    return test_summary();
}
