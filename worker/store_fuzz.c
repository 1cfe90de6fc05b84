/*
 * store_fuzz.c - libFuzzer target for the rendezvous store server (worker/store.c), over a real
 * loopback socket. The store listens on MASTER_PORT of rank 0's pod: anything that reaches the
 * port may send it bytes, and every rank that knows the token may send it any frame.
 *
 * Input: byte 0 chooses how far the harness gets the fuzz connection first (bit 0: answer the
 * challenge with the right token; bit 1: then say hello as rank 1 of 2 with the right config
 * hash), the rest is sent as is (frames: 4-byte big-endian length, opcode, payload; store.h).
 * Then the connection is half-closed and everything the server answers is read until it hangs up.
 *
 * Checks, beyond no crash, leak or undefined behaviour in the server thread:
 *  - the server hangs up on a half-closed connection (no hang), and what it sent is well-framed:
 *    the challenge first, then only reply opcodes, an ERROR naming a DIST_E* code, a VALUE whose
 *    length is its own;
 *  - afterwards the server still serves: rank 0 connects with the token, sets, gets back what it
 *    set, and adds; and the server stops.
 * Seeds: worker/testdata/fuzz/store/ (hack/store_fuzz_seeds.py: each operation, good and bad).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/hmac.h>

#include "common/fuzz.h"
#include "worker/dist.h"
#include "worker/net.h"
#include "worker/store.h"

#define TOKEN "fuzz-token"
#define HASH "fuzz-config"
#define NONCE 32

static void send_frame(int fd, int op, const void *p, size_t n)
{
    unsigned char h[5];
    net_put_u32(h, (uint32_t)(1 + n));
    h[4] = (unsigned char)op;
    FUZZ_CHECK(net_write_all(fd, h, 5, 2000) == 0 && (!n || net_write_all(fd, p, n, 2000) == 0));
}

/* Reads one frame into b (room for cap); its length, or 0 at EOF. */
static size_t recv_frame(int fd, unsigned char *b, size_t cap)
{
    unsigned char h[4];
    int rc = net_read_all(fd, h, 1, 5000);
    /* a hang-up: EOF, or a reset when it dropped the connection with our bytes unread (else
     * the server neither answered nor hung up in 5 s) */
    FUZZ_CHECK(rc == 0 || rc == DIST_EPEER);
    if (rc)
        return 0;
    FUZZ_CHECK(net_read_all(fd, h + 1, 3, 2000) == 0);
    size_t len = net_get_u32(h);
    FUZZ_CHECK(len >= 1 && len <= cap);
    FUZZ_CHECK(net_read_all(fd, b, len, 2000) == 0);
    return len;
}

/* The client's half of the handshake, as store.h describes it. */
static void authenticate(int fd, const unsigned char *challenge)
{
    static const char label[] = "gantry-rdzv-v1/client";
    unsigned char msg[sizeof(label) - 1 + 2 * NONCE], body[NONCE + 32];
    unsigned int ml = 32;

    for (int i = 0; i < NONCE; i++)
        body[i] = (unsigned char)(i * 37 + 11); /* the client's nonce: any bytes will do */
    memcpy(msg, label, sizeof(label) - 1);
    memcpy(msg + sizeof(label) - 1, challenge, NONCE);
    memcpy(msg + sizeof(label) - 1 + NONCE, body, NONCE);
    FUZZ_CHECK(HMAC(EVP_sha256(), TOKEN, (int)strlen(TOKEN), msg, sizeof(msg), body + NONCE,
                    &ml) != NULL);
    send_frame(fd, 'A', body, sizeof(body));
}

static void hello(int fd)
{
    unsigned char h[14 + sizeof(HASH) - 1];
    net_put_u32(h, 1);
    net_put_u32(h + 4, 2);
    net_put_u32(h + 8, 1);
    net_put_u16(h + 12, (uint16_t)(sizeof(HASH) - 1));
    memcpy(h + 14, HASH, sizeof(HASH) - 1);
    send_frame(fd, 'H', h, sizeof(h));
}

/* Checks one frame the server sent after the challenge. */
static void check_reply(const unsigned char *b, size_t n)
{
    switch (b[0]) {
    case 'K': /* AUTH_OK: the server's proof */
        FUZZ_CHECK(n == 1 + 32);
        break;
    case 'O': case 'Y': /* OK, CANCELLED */
        FUZZ_CHECK(n == 1);
        break;
    case 'N': /* NUMBER */
        FUZZ_CHECK(n == 9);
        break;
    case 'V': /* VALUE: found, 4-byte length, the value */
        FUZZ_CHECK(n >= 6 && b[1] <= 1 && net_get_u32(b + 2) == n - 6);
        break;
    case 'E': { /* ERROR: code, message */
        int code = (int)(int32_t)net_get_u32(b + 1);
        FUZZ_CHECK(n > 5 && code <= DIST_EIO && code >= DIST_EUNSUPPORTED);
        break;
    }
    default:
        FUZZ_CHECK(!"the server sent an opcode that is not a reply");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char b[STORE_MAX_VALUE + STORE_MAX_KEY + 64];
    struct store_server_opts so = {.bind_addr = "127.0.0.1", .token = TOKEN, .world_size = 2,
                                   .config_hash = HASH};
    struct store_server *srv;
    struct store *st;
    char why[256];
    int fd;
    size_t n;

    if (size < 1)
        return 0;
    FUZZ_CHECK(store_server_start(&so, &srv) == 0);
    int port = store_server_port(srv);
    FUZZ_CHECK(net_connect("127.0.0.1", port, 2000, &fd, why, sizeof(why)) == 0);
    n = recv_frame(fd, b, sizeof(b));
    FUZZ_CHECK(n == 1 + NONCE && b[0] == 'C');
    if (data[0] & 1) {
        authenticate(fd, b + 1);
        FUZZ_CHECK(recv_frame(fd, b, sizeof(b)) == 1 + 32 && b[0] == 'K');
        if (data[0] & 2) {
            hello(fd);
            FUZZ_CHECK(recv_frame(fd, b, sizeof(b)) == 1 && b[0] == 'O');
        }
    }
    /* the server may hang up before reading it all: a short write is not a failure */
    if (size > 1)
        (void)net_write_all(fd, data + 1, size - 1, 2000);
    shutdown(fd, SHUT_WR);
    while ((n = recv_frame(fd, b, sizeof(b))) > 0)
        check_reply(b, n);
    close(fd);

    /* still serving */
    struct store_opts co = {.host = "127.0.0.1", .port = port, .token = TOKEN, .rank = 0,
                            .world_size = 2, .config_hash = HASH, .connect_timeout_ms = 2000,
                            .op_timeout_ms = 2000};
    void *val = NULL;
    size_t len = 0;
    int64_t r0 = 0, r1 = 0;
    FUZZ_CHECK(store_connect(&co, &st) == 0);
    FUZZ_CHECK(store_set(st, "fuzz/check", "after", 5) == 0);
    FUZZ_CHECK(store_get(st, "fuzz/check", &val, &len) == 0 && len == 5);
    FUZZ_CHECK(!memcmp(val, "after", 5));
    free(val);
    FUZZ_CHECK(store_add(st, "fuzz/count", 0, &r0) == 0);
    if (r0 <= INT64_MAX - 5) /* the fuzz connection may have left it anywhere */
        FUZZ_CHECK(store_add(st, "fuzz/count", 5, &r1) == 0 && r1 == r0 + 5);
    store_free(st);
    store_server_free(srv);
    return 0;
}
