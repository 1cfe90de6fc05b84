/*
 * store.c - the rendezvous store: a poll() server thread on rank 0 and a blocking client.
 * See store.h for the protocol and the security model.
 */
#include "worker/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/buf.h"
#include "common/xalloc.h"
#include "worker/dist.h"
#include "worker/net.h"

/* Opcodes. Server to client: CHALLENGE, AUTH_OK, OK, VALUE, NUMBER, CANCELLED, ERROR. */
enum {
    OP_CHALLENGE = 'C',
    OP_AUTH = 'A',
    OP_AUTH_OK = 'K',
    OP_HELLO = 'H',
    OP_SET = 'S',
    OP_GET = 'G',
    OP_WAIT = 'W',
    OP_ADD = 'D',
    OP_CANCEL = 'X',
    OP_BYE = 'B', /* a joined client leaves on purpose (store_free); no reply */
    OP_OK = 'O',
    OP_VALUE = 'V',
    OP_NUMBER = 'N',
    OP_CANCELLED = 'Y',
    OP_ERROR = 'E'
};

#define NONCE_LEN 32
#define MAX_FRAME (STORE_MAX_VALUE + STORE_MAX_KEY + 64)
#define CONN_OUT_MAX (4 * (size_t)MAX_FRAME)
#define MAC_CLIENT "gantry-rdzv-v1/client"
#define MAC_SERVER "gantry-rdzv-v1/server"

static void hmac3(const char *token, const char *label, const unsigned char *a,
                  const unsigned char *b, unsigned char out[STORE_MAC_LEN])
{
    unsigned char msg[64 + 2 * NONCE_LEN];
    size_t ll = strlen(label);
    unsigned int olen = STORE_MAC_LEN;

    memcpy(msg, label, ll);
    memcpy(msg + ll, a, NONCE_LEN);
    memcpy(msg + ll + NONCE_LEN, b, NONCE_LEN);
    HMAC(EVP_sha256(), token, (int)strlen(token), msg, ll + 2 * NONCE_LEN, out, &olen);
}

/* ==== server ================================================================================ */

enum { ST_CHALLENGED, ST_AUTHED, ST_JOINED, ST_CLOSING };

struct conn {
    int fd;
    int state;
    int rank;
    unsigned char nonce[NONCE_LEN];
    struct buf in, out;
    char *wait_key; /* pending WAIT, or NULL */
    bool left;      /* said BYE: its hang-up is not a lost rank */
    int64_t auth_deadline; /* ST_CHALLENGED: hung up on at this dist_now_ms() */
    uint64_t seq;          /* accepted as the seq-th connection: age, unlike the slot */
};

struct kv {
    char *key;
    char *val;
    size_t len;
};

struct store_server {
    int lfd, port;
    int wake[2];
    pthread_t thread;
    bool running;
    char *token, *hash;
    int world, nproc; /* WORLD_SIZE and NPROC_PER_NODE every rank must say */
    int auth_ms; /* store_server_opts.auth_timeout_ms */
    uint64_t accepted; /* connections accepted so far */
    int64_t accept_after; /* out of file descriptors: not accepting until this dist_now_ms() */
    bool said_nofile;
    struct conn *conns;
    size_t nconns, capconns;
    struct kv *kvs;
    size_t nkv, capkv;
    int *rank_fd; /* world entries: fd of the connection holding that rank, or -1 */
    int lost_rank; /* the first joined rank that hung up without BYE (it died), or -1 */
    bool stopping; /* closing connections ourselves: hang-ups are not lost ranks */
};

static struct kv *kv_find(struct store_server *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (strcmp(s->kvs[i].key, key) == 0)
            return &s->kvs[i];
    return NULL;
}

static int kv_put(struct store_server *s, const char *key, const void *val, size_t len)
{
    struct kv *e = kv_find(s, key);

    if (!e) {
        if (s->nkv == STORE_MAX_KEYS)
            return -1;
        if (s->nkv == s->capkv) {
            s->capkv = s->capkv ? 2 * s->capkv : 64;
            s->kvs = xrealloc(s->kvs, s->capkv * sizeof(*s->kvs));
        }
        e = &s->kvs[s->nkv++];
        e->key = xstrdup(key);
    } else {
        free(e->val);
    }
    e->val = xmalloc(len + 1);
    memcpy(e->val, val, len);
    e->val[len] = 0;
    e->len = len;
    return 0;
}

/* Appends one frame (op + the given parts) to the connection's output. */
static void reply(struct conn *c, int op, const void *a, size_t alen, const void *b, size_t blen)
{
    unsigned char h[5];

    net_put_u32(h, (uint32_t)(1 + alen + blen));
    h[4] = (unsigned char)op;
    if (buf_append(&c->out, h, 5) || buf_append(&c->out, a, alen) ||
        buf_append(&c->out, b, blen))
        c->state = ST_CLOSING; /* a client that never reads its replies: drop it */
}

static void reply_value(struct conn *c, bool found, const void *val, size_t len)
{
    unsigned char h[5];

    h[0] = found;
    net_put_u32(h + 1, (uint32_t)len);
    reply(c, OP_VALUE, h, 5, val, len);
}

static void reply_error(struct conn *c, int code, const char *msg)
{
    unsigned char h[4];

    net_put_u32(h, (uint32_t)(int32_t)code);
    reply(c, OP_ERROR, h, 4, msg, strlen(msg));
    c->state = ST_CLOSING;
}

/* A rank died: what every WAIT that may depend on it gets, so no rank waits out its timeout. */
static void reply_lost(struct store_server *s, struct conn *c)
{
    char msg[200];

    snprintf(msg, sizeof(msg),
             "rank %d hung up without leaving (it probably died): waiting for other ranks is "
             "pointless",
             s->lost_rank);
    reply_error(c, DIST_EPEER, msg);
}

/* Parses a 2-byte-length string at *p into key (NUL-terminated). */
static bool take_str(const unsigned char **p, const unsigned char *end, char *key, size_t max)
{
    size_t n;

    if (end - *p < 2)
        return false;
    n = net_get_u16(*p);
    if (n >= max || (size_t)(end - *p - 2) < n)
        return false;
    memcpy(key, *p + 2, n);
    key[n] = 0;
    *p += 2 + n;
    return true;
}

static void wake_waiters(struct store_server *s, const char *key, const struct kv *e)
{
    for (size_t i = 0; i < s->nconns; i++) {
        struct conn *c = &s->conns[i];
        if (c->wait_key && strcmp(c->wait_key, key) == 0) {
            free(c->wait_key);
            c->wait_key = NULL;
            reply_value(c, true, e->val, e->len);
        }
    }
}

static void handle_hello(struct store_server *s, struct conn *c, const unsigned char *p,
                         const unsigned char *end)
{
    char hash[STORE_HASH_MAX + 1], msg[512];
    int rank, world, nproc;

    if (end - p < 12) {
        reply_error(c, DIST_EPROTO, "malformed hello");
        return;
    }
    rank = (int)(int32_t)net_get_u32(p);
    world = (int)(int32_t)net_get_u32(p + 4);
    nproc = (int)(int32_t)net_get_u32(p + 8);
    p += 12;
    if (!take_str(&p, end, hash, sizeof(hash))) {
        reply_error(c, DIST_EPROTO, "malformed hello");
        return;
    }
    if (world != s->world)
        snprintf(msg, sizeof(msg),
                 "rank %d says WORLD_SIZE=%d but rank 0 says %d: every rank of a job must be "
                 "started with the same WORLD_SIZE",
                 rank, world, s->world);
    else if (nproc != s->nproc)
        snprintf(msg, sizeof(msg),
                 "rank %d says NPROC_PER_NODE=%d but rank 0 says %d: every node of a job must "
                 "start the same number of ranks",
                 rank, nproc, s->nproc);
    else if (rank < 0 || rank >= s->world)
        snprintf(msg, sizeof(msg), "RANK=%d is outside 0..%d (WORLD_SIZE=%d)", rank,
                 s->world - 1, s->world);
    else if (strcmp(hash, s->hash) != 0)
        snprintf(msg, sizeof(msg),
                 "rank %d has config hash %.64s but rank 0 has %.64s: all ranks must read the "
                 "same training config",
                 rank, hash, s->hash);
    else if (s->rank_fd[rank] >= 0)
        snprintf(msg, sizeof(msg),
                 "RANK=%d is already taken by another connected process: two workers were given "
                 "the same RANK",
                 rank);
    else {
        s->rank_fd[rank] = c->fd;
        c->rank = rank;
        c->state = ST_JOINED;
        reply(c, OP_OK, NULL, 0, NULL, 0);
        return;
    }
    /* kept for the ranks that wait for this one: their timeout says why it never joined */
    if (rank >= 0 && rank < s->world && s->rank_fd[rank] < 0) {
        char key[32];
        snprintf(key, sizeof(key), "rdzv/refused/%d", rank);
        (void)kv_put(s, key, msg, strlen(msg));
    }
    reply_error(c, DIST_ECONFIG, msg);
}

static void handle_auth(struct store_server *s, struct conn *c, const unsigned char *p, size_t n)
{
    unsigned char want[STORE_MAC_LEN], mine[STORE_MAC_LEN];

    if (n != NONCE_LEN + STORE_MAC_LEN) {
        reply_error(c, DIST_EPROTO, "malformed auth");
        return;
    }
    hmac3(s->token, MAC_CLIENT, c->nonce, p, want);
    if (CRYPTO_memcmp(want, p + NONCE_LEN, STORE_MAC_LEN) != 0) {
        reply_error(c, DIST_EAUTH,
                    "rendezvous token mismatch: this process's GANTRY_RDZV_TOKEN differs from "
                    "rank 0's; all ranks of a job must use the job's token");
        return;
    }
    hmac3(s->token, MAC_SERVER, p, c->nonce, mine);
    reply(c, OP_AUTH_OK, mine, STORE_MAC_LEN, NULL, 0);
    c->state = ST_AUTHED;
}

/* One complete frame from a client: body = opcode + payload. */
static void handle_frame(struct store_server *s, struct conn *c, const unsigned char *body,
                         size_t n)
{
    const unsigned char *p = body + 1, *end = body + n;
    char key[STORE_MAX_KEY + 1], num[32];
    int op = body[0];
    struct kv *e;

    if (c->state == ST_CHALLENGED) {
        if (op == OP_AUTH)
            handle_auth(s, c, p, n - 1);
        else
            reply_error(c, DIST_EAUTH, "authentication required");
        return;
    }
    if (c->state == ST_AUTHED) {
        if (op == OP_HELLO)
            handle_hello(s, c, p, end);
        else
            reply_error(c, DIST_EPROTO, "hello required");
        return;
    }
    if (op == OP_BYE) {
        c->left = true;
        return;
    }
    if (op == OP_CANCEL) {
        free(c->wait_key);
        c->wait_key = NULL;
        reply(c, OP_CANCELLED, NULL, 0, NULL, 0);
        return;
    }
    if (!take_str(&p, end, key, sizeof(key))) {
        reply_error(c, DIST_EPROTO, "malformed key");
        return;
    }
    switch (op) {
    case OP_SET:
        if (end - p < 4 || net_get_u32(p) != (size_t)(end - p - 4) ||
            kv_put(s, key, p + 4, (size_t)(end - p - 4)) != 0) {
            reply_error(c, DIST_EPROTO, "malformed set or too many keys");
            return;
        }
        reply(c, OP_OK, NULL, 0, NULL, 0);
        wake_waiters(s, key, kv_find(s, key));
        break;
    case OP_GET:
        e = kv_find(s, key);
        reply_value(c, e != NULL, e ? e->val : NULL, e ? e->len : 0);
        break;
    case OP_WAIT:
        if ((e = kv_find(s, key)) != NULL) {
            reply_value(c, true, e->val, e->len);
        } else if (s->lost_rank >= 0) {
            reply_lost(s, c);
        } else {
            free(c->wait_key);
            c->wait_key = xstrdup(key);
        }
        break;
    case OP_ADD: {
        int64_t v = 0;
        if (end - p != 8) {
            reply_error(c, DIST_EPROTO, "malformed add");
            return;
        }
        if ((e = kv_find(s, key)) != NULL)
            v = strtoll(e->val, NULL, 10);
        if (__builtin_add_overflow(v, (int64_t)net_get_u64(p), &v)) {
            reply_error(c, DIST_EPROTO, "add: the counter would overflow a signed 64-bit integer");
            return;
        }
        snprintf(num, sizeof(num), "%" PRId64, v);
        if (kv_put(s, key, num, strlen(num)) != 0) {
            reply_error(c, DIST_EPROTO, "too many keys");
            return;
        }
        unsigned char b[8];
        net_put_u64(b, (uint64_t)v);
        reply(c, OP_NUMBER, b, 8, NULL, 0);
        wake_waiters(s, key, kv_find(s, key));
        break;
    }
    default:
        reply_error(c, DIST_EPROTO, "unknown opcode");
    }
}

static void conn_close(struct store_server *s, size_t i)
{
    struct conn *c = &s->conns[i];
    /* joined (rank set), even if the server itself hangs up on it (an error reply) */
    int lost = c->rank >= 0 && !c->left && !s->stopping ? c->rank : -1;

    if (c->rank >= 0 && s->rank_fd[c->rank] == c->fd)
        s->rank_fd[c->rank] = -1;
    close(c->fd);
    buf_cleanup(&c->in);
    buf_cleanup(&c->out);
    free(c->wait_key);
    s->conns[i] = s->conns[--s->nconns];
    if (lost < 0 || s->lost_rank >= 0)
        return;
    /* A joined rank hung up without BYE: it died. Fail every pending WAIT now (and later ones
     * for keys not set yet) rather than let the others wait for it until they time out. */
    s->lost_rank = lost;
    dist_log("Store server: rank %d hung up without leaving (it probably died)", lost);
    for (size_t k = 0; k < s->nconns; k++) {
        if (s->conns[k].wait_key) {
            free(s->conns[k].wait_key);
            s->conns[k].wait_key = NULL;
            reply_lost(s, &s->conns[k]);
        }
    }
}

static void conn_accept(struct store_server *s)
{
    unsigned char h[5 + NONCE_LEN];
    struct conn *c;
    int fd;

    if (net_accept(s->lfd, 0, &fd) != 0) {
        /* The connection stays in the backlog, so the socket stays readable: stop polling it
         * for a while, or the thread spins. The backlog is served as connections close. */
        if (errno == EMFILE || errno == ENFILE) {
            s->accept_after = dist_now_ms() + 100;
            if (!s->said_nofile)
                dist_log("Store server: out of file descriptors with %zu connections open "
                         "(WORLD_SIZE=%d): new ones wait until some close. Raise the open-files "
                         "limit (ulimit -n) of rank 0", s->nconns, s->world);
            s->said_nofile = true;
        }
        return;
    }
    if (s->nconns >= (size_t)s->world * 2 + 64) { /* every rank once, plus slack for retries */
        /* A stranger cannot keep the ranks out by filling the table: the oldest connection that
         * has not answered its challenge makes room. Oldest by accept order: many are accepted
         * in one millisecond, and conn_close() moves the newest into a freed slot. */
        size_t old = s->nconns;
        for (size_t i = 0; i < s->nconns; i++)
            if (s->conns[i].state == ST_CHALLENGED &&
                (old == s->nconns || s->conns[i].seq < s->conns[old].seq))
                old = i;
        if (old == s->nconns) {
            dist_log("Store server: refusing a connection: %zu are open for WORLD_SIZE=%d",
                     s->nconns, s->world);
            close(fd);
            return;
        }
        dist_log("Store server: %zu connections are open for WORLD_SIZE=%d: dropping the oldest "
                 "that has not authenticated", s->nconns, s->world);
        conn_close(s, old);
    }
    if (s->nconns == s->capconns) {
        s->capconns = s->capconns ? 2 * s->capconns : 16;
        s->conns = xrealloc(s->conns, s->capconns * sizeof(*s->conns));
    }
    c = &s->conns[s->nconns++];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->rank = -1;
    c->state = ST_CHALLENGED;
    c->auth_deadline = dist_now_ms() + s->auth_ms;
    c->seq = s->accepted++;
    buf_init(&c->in, MAX_FRAME + 4);
    buf_init(&c->out, CONN_OUT_MAX);
    if (RAND_bytes(c->nonce, NONCE_LEN) != 1) {
        conn_close(s, s->nconns - 1);
        return;
    }
    net_put_u32(h, 1 + NONCE_LEN);
    h[4] = OP_CHALLENGE;
    memcpy(h + 5, c->nonce, NONCE_LEN);
    if (buf_append(&c->out, h, sizeof(h)))
        c->state = ST_CLOSING;
}

/* Reads what is there and handles every complete frame. false: drop the connection. */
static bool conn_read(struct store_server *s, struct conn *c)
{
    char tmp[65536];
    ssize_t n = recv(c->fd, tmp, sizeof(tmp), 0);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return false;
    if (n < 0)
        return true;
    if (buf_append(&c->in, tmp, (size_t)n))
        return false;
    while (c->state != ST_CLOSING && buf_len(&c->in) >= 4) {
        const unsigned char *p = (const unsigned char *)buf_ptr(&c->in);
        size_t len = net_get_u32(p);
        /* Before authentication only the small AUTH frame is allowed: a stranger cannot make
         * us buffer a megabyte. */
        if (len == 0 || len > MAX_FRAME || (c->state == ST_CHALLENGED && len > 128))
            return false;
        if (buf_len(&c->in) < 4 + len)
            break;
        handle_frame(s, c, p + 4, len);
        buf_consume(&c->in, 4 + len);
    }
    return true;
}

/* Writes what it can. false: drop the connection. */
static bool conn_write(struct conn *c)
{
    while (buf_len(&c->out) > 0) {
        ssize_t n = send(c->fd, buf_ptr(&c->out), buf_len(&c->out), MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n <= 0)
            return false;
        buf_consume(&c->out, (size_t)n);
    }
    return c->state != ST_CLOSING;
}

/* Stopping: rank 0's own client has already closed, so wait (bounded) for the other ranks to
 * read their last replies and hang up before closing their connections. */
#define DRAIN_MS 5000

static void *server_main(void *arg)
{
    struct store_server *s = arg;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    int64_t drain_until = -1;

    for (;;) {
        size_t n = s->nconns + 2;
        int64_t now = dist_now_ms(), until = drain_until;
        if (drain_until >= 0 && (s->nconns == 0 || drain_until <= now))
            break;
        if (n > cap) {
            cap = 2 * n;
            pf = xrealloc(pf, cap * sizeof(*pf));
        }
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        if (drain_until >= 0)
            pf[0].fd = pf[1].fd = -1; /* poll ignores negative fds */
        else if (s->accept_after > now) {
            pf[1].fd = -1;
            until = s->accept_after;
        }
        for (size_t i = 0; i < s->nconns; i++) {
            const struct conn *c = &s->conns[i];
            pf[i + 2] = (struct pollfd){
                .fd = c->fd, .events = (short)(POLLIN | (buf_len(&c->out) ? POLLOUT : 0))};
            if (c->state == ST_CHALLENGED && (until < 0 || c->auth_deadline < until))
                until = c->auth_deadline; /* the next challenge to run out */
        }
        if (poll(pf, n, until < 0 ? -1 : until <= now ? 0 : (int)(until - now)) < 0) {
            if (errno == EINTR)
                continue;
            dist_log("Store server poll failed: %s", strerror(errno));
            break;
        }
        if (pf[0].revents) {
            drain_until = dist_now_ms() + DRAIN_MS;
            s->stopping = true;
            continue;
        }
        /* Walk backwards: conn_close() moves the last connection into the freed slot. */
        now = dist_now_ms();
        for (size_t i = n - 2; i-- > 0;) {
            struct conn *c = &s->conns[i];
            bool ok = true;
            if (pf[i + 2].revents & (POLLIN | POLLHUP | POLLERR))
                ok = conn_read(s, c);
            if (ok && (buf_len(&c->out) || c->state == ST_CLOSING))
                ok = conn_write(c);
            if (ok && c->state == ST_CHALLENGED && now >= c->auth_deadline) {
                dist_log("Store server: dropping a connection that did not authenticate within "
                         "%.1f s", s->auth_ms / 1000.0);
                ok = false;
            }
            if (!ok)
                conn_close(s, i);
        }
        if (pf[1].revents & POLLIN)
            conn_accept(s);
    }
    free(pf);
    return NULL;
}

/* The connection table holds 2 x WORLD_SIZE + 64: raises the soft open-files limit (1024 in
 * many containers) towards that, as far as the hard limit allows. */
static void raise_nofile(rlim_t want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

int store_server_start(const struct store_server_opts *o, struct store_server **out)
{
    struct store_server *s;
    int rc;

    if (!o->token || !*o->token || o->world_size < 1 || o->nproc_per_node < 0 ||
        (o->config_hash && strlen(o->config_hash) > STORE_HASH_MAX)) {
        dist_log("Store server: a non-empty token, WORLD_SIZE >= 1 and a config hash of at most "
                 "%d bytes are required",
                 STORE_HASH_MAX);
        return DIST_EUSAGE;
    }
    s = xcalloc(1, sizeof(*s));
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->token = xstrdup(o->token);
    s->hash = xstrdup(o->config_hash ? o->config_hash : "");
    s->world = o->world_size;
    s->nproc = o->nproc_per_node > 0 ? o->nproc_per_node : 1;
    s->auth_ms = o->auth_timeout_ms > 0 ? o->auth_timeout_ms : 10000;
    s->lost_rank = -1;
    s->rank_fd = xmallocarray((size_t)s->world, sizeof(int));
    for (int i = 0; i < s->world; i++)
        s->rank_fd[i] = -1;
    raise_nofile((rlim_t)s->world * 2 + 64 + 64);
    rc = net_listen(o->bind_addr, o->port, &s->lfd, &s->port);
    if (rc) {
        dist_log("Could not listen on %s:%d for the rendezvous store: %s. Is MASTER_PORT free on "
                 "rank 0's host?",
                 o->bind_addr ? o->bind_addr : "*", o->port, strerror(errno));
        goto out;
    }
    if (pipe2(s->wake, O_CLOEXEC) != 0 || pthread_create(&s->thread, NULL, server_main, s) != 0) {
        dist_log("Could not start the store server thread: %s", strerror(errno));
        rc = DIST_EIO;
        goto out;
    }
    s->running = true;
    *out = s;
    s = NULL;
out:
    store_server_free(s);
    return rc;
}

int store_server_port(const struct store_server *s)
{
    return s->port;
}

void store_server_free(struct store_server *s)
{
    if (!s)
        return;
    if (s->running) {
        char b = 1;
        if (write(s->wake[1], &b, 1) != 1)
            dist_log("Store server: wake-up write failed: %s", strerror(errno));
        pthread_join(s->thread, NULL);
    }
    s->stopping = true;
    while (s->nconns)
        conn_close(s, s->nconns - 1);
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kvs[i].key);
        free(s->kvs[i].val);
    }
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->wake[0] >= 0) {
        close(s->wake[0]);
        close(s->wake[1]);
    }
    free(s->kvs);
    free(s->conns);
    free(s->rank_fd);
    free(s->token);
    free(s->hash);
    free(s);
}

/* ==== client ================================================================================ */

struct store {
    int fd;
    int rank, world, nproc;
    int op_timeout_ms;
    uint64_t barriers;
    char *token;
    char host[DIST_MAX_HOST];
    int port;
    char local_addr[NET_MAX_ADDR];
    bool joined;  /* hello accepted: store_free says BYE */
    bool refused; /* the last reply was an ERROR frame (already printed) */
};

static int send_frame(struct store *st, int op, const void *a, size_t alen, const void *b,
                      size_t blen)
{
    unsigned char h[5];
    int rc;

    net_put_u32(h, (uint32_t)(1 + alen + blen));
    h[4] = (unsigned char)op;
    if ((rc = net_write_all(st->fd, h, 5, st->op_timeout_ms)) ||
        (alen && (rc = net_write_all(st->fd, a, alen, st->op_timeout_ms))) ||
        (blen && (rc = net_write_all(st->fd, b, blen, st->op_timeout_ms))))
        return rc;
    return 0;
}

/* Reads one frame; *body is new (free()), *op its opcode. An ERROR frame is printed and turned
 * into its code. */
static int recv_frame(struct store *st, int timeout_ms, int *op, unsigned char **body, size_t *n)
{
    unsigned char h[4];
    unsigned char *b = NULL;
    uint32_t len;
    int rc;

    st->refused = false;
    if ((rc = net_read_all(st->fd, h, 4, timeout_ms)))
        return rc;
    len = net_get_u32(h);
    if (len == 0 || len > MAX_FRAME)
        return DIST_EPROTO;
    b = xmalloc(len + 1);
    if ((rc = net_read_all(st->fd, b, len, st->op_timeout_ms))) {
        free(b);
        return rc;
    }
    b[len] = 0;
    if (b[0] == OP_ERROR && len >= 5) {
        st->refused = true;
        rc = (int)(int32_t)net_get_u32(b + 1);
        dist_log("Rendezvous store at %s:%d refused: %s", st->host, st->port, (char *)b + 5);
        free(b);
        return rc < 0 ? rc : DIST_EPROTO;
    }
    *op = b[0];
    *body = b;
    *n = len;
    return 0;
}

static const char *peer_hint(int rc)
{
    return rc == DIST_EPEER ? " (rank 0 closed the connection: it probably exited)" : "";
}

static int handshake(struct store *st, const char *hash)
{
    unsigned char nonce_c[NONCE_LEN], msg[NONCE_LEN + STORE_MAC_LEN], mac[STORE_MAC_LEN],
        hh[12 + 2 + STORE_HASH_MAX];
    unsigned char *b = NULL;
    size_t n, hl = strlen(hash);
    int op, rc;

    if ((rc = recv_frame(st, st->op_timeout_ms, &op, &b, &n)))
        goto out;
    if (op != OP_CHALLENGE || n != 1 + NONCE_LEN || RAND_bytes(nonce_c, NONCE_LEN) != 1) {
        rc = DIST_EPROTO;
        goto out;
    }
    memcpy(msg, nonce_c, NONCE_LEN);
    hmac3(st->token, MAC_CLIENT, b + 1, nonce_c, msg + NONCE_LEN);
    hmac3(st->token, MAC_SERVER, nonce_c, b + 1, mac);
    free(b);
    b = NULL;
    if ((rc = send_frame(st, OP_AUTH, msg, sizeof(msg), NULL, 0)) ||
        (rc = recv_frame(st, st->op_timeout_ms, &op, &b, &n)))
        goto out;
    if (op != OP_AUTH_OK || n != 1 + STORE_MAC_LEN ||
        CRYPTO_memcmp(b + 1, mac, STORE_MAC_LEN) != 0) {
        dist_log("Rendezvous store at %s:%d failed to prove it knows the job token: it belongs "
                 "to another job, or GANTRY_RDZV_TOKEN differs between ranks",
                 st->host, st->port);
        rc = DIST_EAUTH;
        goto out;
    }
    free(b);
    b = NULL;
    net_put_u32(hh, (uint32_t)st->rank);
    net_put_u32(hh + 4, (uint32_t)st->world);
    net_put_u32(hh + 8, (uint32_t)st->nproc);
    net_put_u16(hh + 12, (uint16_t)hl);
    memcpy(hh + 14, hash, hl);
    if ((rc = send_frame(st, OP_HELLO, hh, 14 + hl, NULL, 0)) ||
        (rc = recv_frame(st, st->op_timeout_ms, &op, &b, &n)))
        goto out;
    rc = op == OP_OK ? 0 : DIST_EPROTO;
    st->joined = rc == 0;
out:
    free(b);
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Retries DNS and refused connections with jittered exponential backoff until the deadline. */
static int connect_retry(struct store *st, int timeout_ms)
{
    int64_t start = dist_now_ms(), last_log = start;
    int backoff = 100, rc;
    char why[256] = "";
    unsigned int seed = (unsigned int)(getpid() ^ start);

    for (;;) {
        int64_t left = start + timeout_ms - dist_now_ms();
        rc = net_connect(st->host, st->port, (int)(left < 10000 ? (left > 0 ? left : 1) : 10000),
                         &st->fd, why, sizeof(why));
        if (rc == 0)
            return 0;
        left = start + timeout_ms - dist_now_ms();
        if (left <= 0) {
            dist_log("Could not reach the rendezvous store (rank 0) at %s:%d within %.1f s: %s. "
                     "Check that rank 0 is running and that MASTER_ADDR/MASTER_PORT point to it, "
                     "or raise GANTRY_RDZV_TIMEOUT",
                     st->host, st->port, timeout_ms / 1000.0, why);
            return DIST_ETIMEDOUT;
        }
        if (dist_now_ms() - last_log >= 30000) {
            dist_log("Still waiting for rank 0 at %s:%d (%s)", st->host, st->port, why);
            last_log = dist_now_ms();
        }
        /* Full jitter in [backoff/2, backoff): ranks restarted together do not knock in step. */
        int d = backoff / 2 + (int)(rand_r(&seed) % (unsigned)(backoff / 2 + 1));
        sleep_ms((int)(d < left ? d : left));
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
}

int store_connect(const struct store_opts *o, struct store **out)
{
    struct store *st;
    const char *hash = o->config_hash ? o->config_hash : "";
    int rc;

    if (!o->host || strlen(o->host) >= DIST_MAX_HOST || !o->token || !*o->token ||
        strlen(hash) > STORE_HASH_MAX || o->port <= 0 || o->port > 65535) {
        dist_log("Store: bad options (host, port 1..65535, non-empty token, hash <= %d bytes)",
                 STORE_HASH_MAX);
        return DIST_EUSAGE;
    }
    st = xcalloc(1, sizeof(*st));
    st->fd = -1;
    st->rank = o->rank;
    st->world = o->world_size;
    st->nproc = o->nproc_per_node > 0 ? o->nproc_per_node : 1;
    st->op_timeout_ms = o->op_timeout_ms > 0 ? o->op_timeout_ms : 60000;
    st->token = xstrdup(o->token);
    snprintf(st->host, sizeof(st->host), "%s", o->host);
    st->port = o->port;
    int timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 600000;
    int64_t deadline = dist_now_ms() + timeout_ms;
    for (int tries = 1;; tries++) {
        int64_t left = deadline - dist_now_ms();
        if ((rc = connect_retry(st, (int)(left > 1 ? left : 1))))
            goto out;
        /* A hang-up or silence during the handshake is retried while the connect timeout
         * lasts: a store whose table is full drops the oldest unauthenticated connection, and
         * one that is restarting hangs up; a refusal (token, world, config) is final. */
        rc = handshake(st, hash);
        if (rc == 0 || rc == DIST_EAUTH || rc == DIST_ECONFIG || st->refused)
            break;
        if (dist_now_ms() + 200 >= deadline || (rc != DIST_EPEER && rc != DIST_ETIMEDOUT)) {
            dist_log("Rendezvous handshake with %s:%d failed: %s%s", st->host, st->port,
                     dist_strerror(rc), peer_hint(rc));
            goto out;
        }
        if (tries == 1)
            dist_log("Rendezvous handshake with %s:%d failed: %s; trying again (a busy or "
                     "restarting store) until the connect timeout", st->host, st->port,
                     dist_strerror(rc));
        close(st->fd);
        st->fd = -1;
        sleep_ms(200);
    }
    if (rc)
        goto out;
    if (net_local_addr(st->fd, st->local_addr, sizeof(st->local_addr)) != 0)
        snprintf(st->local_addr, sizeof(st->local_addr), "127.0.0.1");
    *out = st;
    st = NULL;
out:
    store_free(st);
    return rc;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    if (st->fd >= 0 && st->joined) /* best effort: without it the server thinks we died */
        (void)send_frame(st, OP_BYE, NULL, 0, NULL, 0);
    if (st->fd >= 0)
        close(st->fd);
    if (st->token) {
        OPENSSL_cleanse(st->token, strlen(st->token));
        free(st->token);
    }
    free(st);
}

int store_rank(const struct store *st)
{
    return st->rank;
}

int store_world_size(const struct store *st)
{
    return st->world;
}

const char *store_local_addr(const struct store *st)
{
    return st->local_addr;
}

void store_hmac(const struct store *st, const void *data, size_t len,
                unsigned char mac[STORE_MAC_LEN])
{
    unsigned int olen = STORE_MAC_LEN;
    HMAC(EVP_sha256(), st->token, (int)strlen(st->token), data, len, mac, &olen);
}

static int put_key(unsigned char *h, const char *key, size_t *n)
{
    size_t kl = strlen(key);

    if (kl == 0 || kl > STORE_MAX_KEY) {
        dist_log("Store key '%.40s...' is empty or longer than %d bytes", key, STORE_MAX_KEY);
        return DIST_EUSAGE;
    }
    net_put_u16(h, (uint16_t)kl);
    memcpy(h + 2, key, kl);
    *n = 2 + kl;
    return 0;
}

static int op_failed(struct store *st, const char *what, const char *key, int rc)
{
    if (rc != DIST_ECONFIG && rc != DIST_EAUTH)
        dist_log("Store %s '%s' at %s:%d failed: %s%s", what, key, st->host, st->port,
                 dist_strerror(rc), st->refused ? "" : peer_hint(rc));
    return rc;
}

int store_set(struct store *st, const char *key, const void *val, size_t len)
{
    unsigned char h[2 + STORE_MAX_KEY + 4], *b = NULL;
    size_t n, bn;
    int rc, op;

    if (len > STORE_MAX_VALUE)
        return DIST_EUSAGE;
    if ((rc = put_key(h, key, &n)))
        return rc;
    net_put_u32(h + n, (uint32_t)len);
    if ((rc = send_frame(st, OP_SET, h, n + 4, val, len)) ||
        (rc = recv_frame(st, st->op_timeout_ms, &op, &b, &bn)))
        return op_failed(st, "set", key, rc);
    free(b);
    return op == OP_OK ? 0 : op_failed(st, "set", key, DIST_EPROTO);
}

/* Parses a VALUE frame into a new NUL-terminated copy. */
static int take_value(unsigned char *b, size_t bn, void **val, size_t *len)
{
    size_t vl;

    if (bn < 6 || (vl = net_get_u32(b + 2)) != bn - 6)
        return DIST_EPROTO;
    if (!b[1])
        return DIST_ENOENT;
    memmove(b, b + 6, vl);
    b[vl] = 0;
    *val = b;
    *len = vl;
    return 0;
}

int store_get(struct store *st, const char *key, void **val, size_t *len)
{
    unsigned char h[2 + STORE_MAX_KEY], *b = NULL;
    size_t n, bn;
    int rc, op;

    if ((rc = put_key(h, key, &n)))
        return rc;
    if ((rc = send_frame(st, OP_GET, h, n, NULL, 0)) ||
        (rc = recv_frame(st, st->op_timeout_ms, &op, &b, &bn)))
        return op_failed(st, "get", key, rc);
    rc = op == OP_VALUE ? take_value(b, bn, val, len) : DIST_EPROTO;
    if (rc)
        free(b);
    return rc;
}

/* After a wait timed out: cancel it on the server, reading up to its CANCELLED. A value or an
 * error (a lost rank) sent before the CANCEL arrived is the wait's answer after all: *got gets
 * the first one's frame (or NULL), *got_rc its error. 0, or the error that broke the stream. */
static int cancel_wait(struct store *st, unsigned char **got, size_t *got_n, int *got_rc)
{
    unsigned char *b = NULL;
    size_t bn;
    int rc, op;

    *got = NULL;
    *got_rc = 0;
    if ((rc = send_frame(st, OP_CANCEL, NULL, 0, NULL, 0)))
        return rc;
    for (;;) {
        rc = recv_frame(st, st->op_timeout_ms, &op, &b, &bn);
        if (rc && st->refused) { /* an ERROR frame: the stream goes on */
            if (!*got && !*got_rc)
                *got_rc = rc;
            continue;
        }
        if (rc)
            break;
        if (op == OP_VALUE && !*got && !*got_rc) {
            *got = b;
            *got_n = bn;
            continue;
        }
        free(b);
        if (op != OP_VALUE) {
            rc = op == OP_CANCELLED ? 0 : DIST_EPROTO;
            break;
        }
    }
    if (rc) {
        free(*got);
        *got = NULL;
    }
    return rc;
}

int store_wait(struct store *st, const char *key, int timeout_ms, void **val, size_t *len)
{
    unsigned char h[2 + STORE_MAX_KEY], *b = NULL;
    size_t n, bn;
    int rc, op;

    if ((rc = put_key(h, key, &n)))
        return rc;
    if ((rc = send_frame(st, OP_WAIT, h, n, NULL, 0)))
        return op_failed(st, "wait", key, rc);
    rc = recv_frame(st, timeout_ms < 0 ? st->op_timeout_ms : timeout_ms, &op, &b, &bn);
    if (rc == DIST_ETIMEDOUT) {
        int got_rc, crc = cancel_wait(st, &b, &bn, &got_rc);
        if (crc)
            return op_failed(st, "wait", key, crc);
        if (got_rc)
            return op_failed(st, "wait", key, got_rc);
        if (!b)
            return DIST_ETIMEDOUT;
        op = OP_VALUE; /* it came as the wait ran out */
        rc = 0;
    }
    if (rc)
        return op_failed(st, "wait", key, rc);
    rc = op == OP_VALUE ? take_value(b, bn, val, len) : DIST_EPROTO;
    if (rc)
        free(b);
    return rc;
}

int store_wait_str(struct store *st, const char *key, int timeout_ms, char *out, size_t cap)
{
    void *v = NULL;
    size_t vl;
    int rc = store_wait(st, key, timeout_ms, &v, &vl);

    if (!rc)
        snprintf(out, cap, "%s", (char *)v);
    free(v);
    return rc;
}

int store_add(struct store *st, const char *key, int64_t delta, int64_t *result)
{
    unsigned char h[2 + STORE_MAX_KEY + 8], *b = NULL;
    size_t n, bn;
    int rc, op;

    if ((rc = put_key(h, key, &n)))
        return rc;
    net_put_u64(h + n, (uint64_t)delta);
    if ((rc = send_frame(st, OP_ADD, h, n + 8, NULL, 0)) ||
        (rc = recv_frame(st, st->op_timeout_ms, &op, &b, &bn)))
        return op_failed(st, "add", key, rc);
    if (op != OP_NUMBER || bn != 9)
        rc = op_failed(st, "add", key, DIST_EPROTO);
    else
        *result = (int64_t)net_get_u64(b + 1);
    free(b);
    return rc;
}

int store_barrier(struct store *st, int timeout_ms)
{
    char key[64], done[72];
    int64_t n;
    void *v = NULL;
    size_t vl;
    int rc;

    snprintf(key, sizeof(key), "__barrier/%" PRIu64, st->barriers++);
    snprintf(done, sizeof(done), "%s/done", key);
    if ((rc = store_add(st, key, 1, &n)))
        return rc;
    if (n == st->world) /* the last to arrive releases the others and need not wait */
        return store_set(st, done, "1", 1);
    rc = store_wait(st, done, timeout_ms, &v, &vl);
    free(v);
    return rc;
}
