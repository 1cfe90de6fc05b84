/*
 * coll_tcp.c - the tcp collectives backend: a ring of authenticated TCP connections.
 *
 * Each rank sends to rank+1 on one socket and receives from rank-1 on another, both at once
 * (non-blocking, poll), so both directions of every link are busy. All-reduce is the
 * bandwidth-optimal ring: W-1 reduce-scatter steps then W-1 all-gather steps, each moving
 * n/W elements; data is received in chunks (opts.chunk_bytes) and each chunk is added while the
 * kernel already receives the next one, and a step's send waits only for the receive it
 * forwards (ring_allreduce). Sizes need not divide by W: segment i is [i*n/W, (i+1)*n/W).
 *
 * When every rank maps one shared-memory object (decided once, in coll_tcp_new, by a probe every
 * rank takes part in: tcp_try_shm), the fp32 all-reduce goes through it instead (coll_shm.c):
 * one copy in and out per byte rather than two kernel copies per ring hop (4 ranks on 2 cores:
 * ~2x the ring's busbw). The ring stays connected: broadcast, all-gather and barrier use it, and
 * during a shared-memory all-reduce its idle sockets tell a waiting rank that a neighbour died.
 * Several ranks per node on several nodes (tcp_try_shm's second probe): shared memory within
 * each node, and a ring of its own per local rank across the nodes (tcp_cross_ring), called by
 * coll_shm between a node's reduce and its gather: the hierarchical all-reduce.
 */
#include "worker/coll.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "common/xalloc.h"
#include "worker/coll_impl.h"
#include "worker/coll_shm.h"
#include "worker/dist.h"
#include "worker/net.h"
#include "worker/store.h"

#define COLL_MAC_LABEL "gantry-coll-v1"
#define NONCE_LEN 16
#define MAX_IO (4u << 20) /* bytes per send/recv call */

struct tcp {
    int rank, world;          /* within this ring */
    int prev_rank, next_rank; /* the neighbours' global ranks, for messages */
    int blame;                /* the global rank the last failure was blamed on */
    int ring_id;              /* 0: the ring of all ranks; 1 + l: local rank l's across nodes */
    int next_fd, prev_fd;
    int timeout_ms;
    int hello_ms; /* coll_opts.hello_timeout_ms */
    size_t chunk;
    bool bf16;
    char next_addr[NET_MAX_ADDR + 16], prev_addr[NET_MAX_ADDR + 16];
    char *stage;      /* chunk-sized receive staging (reductions, bf16 decoding) */
    uint16_t *sstage; /* chunk-sized send staging: fp32 encoded to bf16 just before sending */
    int64_t inst;     /* this instance's number in the store's coll/ keys */
    struct coll_shm *shm; /* non-NULL: the all-reduce goes through shared memory */
    int shm_groups;       /* shm: how many groups (nodes) share the all-reduce */
    struct tcp *cross;    /* several groups: this local rank's ring across them */
};

enum rmode {
    R_COPY,      /* bytes land in rp */
    R_ADD_F32,   /* fp32 chunks staged, then acc += chunk */
    R_ADD_BF16,  /* bf16 chunks staged, then acc += decode(chunk) */
    R_ADD_ROUND_BF16, /* the same, then acc rounded to bf16 (the last reduce-scatter step) */
    R_COPY_BF16  /* bf16 chunks staged, then acc = decode(chunk) */
};

/* ---- the transfer engine ------------------------------------------------------------------- */

struct xfer {
    const char *sp;
    size_t slen, sdone;
    const float *senc; /* non-NULL: send bf16(senc[...]) instead of sp, encoded per chunk */
    size_t sst_base, sst_len; /* wire bytes [sst_base, sst_base + sst_len) are in t->sstage */
    char *rp; /* R_COPY: destination of the raw bytes */
    size_t rlen, rdone, folded;
    enum rmode mode;
    float *acc; /* staged modes: fp32 elements matching the received bytes */
    bool follow; /* never send bytes not yet received (broadcast forwarding, sp == rp) */
};

/* bf16 conversions inlined here: they run once per element on the hot path. */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    memcpy(&f, &u, 4);
    return f;
}

/* The hot loops. restrict: the staging buffer never overlaps the destination, so they
 * vectorise (dist.cmake builds this file with -O3); HOT adds an AVX2 clone picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

HOT static void add_f32(float *restrict d, const float *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

HOT static void add_bf16(float *restrict d, const uint16_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += from_bf16(s[i]);
}

HOT static void add_round_bf16(float *restrict d, const uint16_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = from_bf16(to_bf16(d[i] + from_bf16(s[i])));
}

HOT static void copy_bf16(float *restrict d, const uint16_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = from_bf16(s[i]);
}

HOT static void encode(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_bf16(src[i]);
}

/* Applies the received bytes [x->folded, upto) to acc. */
static void fold(struct tcp *t, struct xfer *x, size_t upto)
{
    size_t from = x->folded;

    if (x->mode == R_ADD_F32)
        add_f32(x->acc + from / 4, (const float *)t->stage, (upto - from) / 4);
    else if (x->mode == R_ADD_BF16)
        add_bf16(x->acc + from / 2, (const uint16_t *)t->stage, (upto - from) / 2);
    else if (x->mode == R_ADD_ROUND_BF16)
        add_round_bf16(x->acc + from / 2, (const uint16_t *)t->stage, (upto - from) / 2);
    else if (x->mode == R_COPY_BF16)
        copy_bf16(x->acc + from / 2, (const uint16_t *)t->stage, (upto - from) / 2);
    x->folded = upto;
}

static int peer_error(struct tcp *t, const char *what, bool prev, int rc)
{
    int peer = prev ? t->prev_rank : t->next_rank;
    const char *addr = prev ? t->prev_addr : t->next_addr;

    t->blame = peer;
    if (rc == DIST_ETIMEDOUT)
        dist_log("%s: rank %d (%s) made no progress for %.1f s: it is hung or dead. Exiting so "
                 "that the gang restarts from the last checkpoint",
                 what, peer, addr, t->timeout_ms / 1000.0);
    else if (rc == DIST_EPEER)
        dist_log("%s: rank %d (%s) closed the connection: it died. Exiting so that the gang "
                 "restarts from the last checkpoint",
                 what, peer, addr);
    else
        dist_log("%s: talking to rank %d (%s) failed: %s", what, peer, addr, strerror(errno));
    return rc;
}

static int do_recv(struct tcp *t, struct xfer *x, const char *what, bool *progress)
{
    bool staged = x->mode != R_COPY;
    size_t room = x->rlen - x->rdone;
    char *dst;

    if (x->mode != R_COPY) {
        size_t chunk_end = x->folded + t->chunk; /* do not cross the chunk being staged */
        if (chunk_end - x->rdone < room)
            room = chunk_end - x->rdone;
    }
    if (room > MAX_IO)
        room = MAX_IO;
    dst = staged ? t->stage + (x->rdone - x->folded) : x->rp + x->rdone;
    ssize_t n = recv(t->prev_fd, dst, room, 0);
    if (n == 0)
        return peer_error(t, what, true, DIST_EPEER);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        return peer_error(t, what, true, errno == ECONNRESET ? DIST_EPEER : DIST_EIO);
    }
    *progress = true;
    x->rdone += (size_t)n;
    if (x->mode != R_COPY && (x->rdone - x->folded == t->chunk || x->rdone == x->rlen))
        fold(t, x, x->rdone);
    return 0;
}

/* bf16 sends: encode the next chunk into the send staging buffer once the last one is out, so
 * the converted bytes go to the kernel from cache instead of through a segment-sized buffer. */
static const char *send_ptr(struct tcp *t, struct xfer *x, size_t *avail)
{
    if (!x->senc)
        return x->sp + x->sdone;
    if (x->sdone == x->sst_base + x->sst_len) {
        size_t elems = (x->slen - x->sdone) / 2;
        if (elems > t->chunk / 2)
            elems = t->chunk / 2;
        encode(t->sstage, x->senc + x->sdone / 2, elems);
        x->sst_base = x->sdone;
        x->sst_len = elems * 2;
    }
    if (*avail > x->sst_base + x->sst_len - x->sdone)
        *avail = x->sst_base + x->sst_len - x->sdone;
    return (const char *)t->sstage + (x->sdone - x->sst_base);
}

static int do_send(struct tcp *t, struct xfer *x, const char *what, bool *progress)
{
    size_t avail = (x->follow ? x->rdone : x->slen) - x->sdone;
    const char *p;

    if (avail == 0)
        return 0;
    if (avail > MAX_IO)
        avail = MAX_IO;
    p = send_ptr(t, x, &avail);
    ssize_t n = send(t->next_fd, p, avail, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        return peer_error(t, what, false,
                          (errno == EPIPE || errno == ECONNRESET) ? DIST_EPEER : DIST_EIO);
    }
    *progress = n > 0;
    x->sdone += (size_t)n;
    return 0;
}

/* Runs one ring step to completion: sends x->slen bytes to next while receiving x->rlen from
 * prev. Waits in poll() only when neither direction can move; a wait longer than the timeout is
 * a dead peer. */
static int run_xfer(struct tcp *t, struct xfer *x, const char *what)
{
    int rc;

    while (x->sdone < x->slen || x->rdone < x->rlen) {
        bool progress = false;
        if (x->rdone < x->rlen && (rc = do_recv(t, x, what, &progress)))
            return rc;
        if (x->sdone < x->slen && (rc = do_send(t, x, what, &progress)))
            return rc;
        if (progress)
            continue;
        struct pollfd p[2];
        int np = 0;
        bool want_send = x->sdone < x->slen && (!x->follow || x->sdone < x->rdone);
        if (x->rdone < x->rlen)
            p[np++] = (struct pollfd){.fd = t->prev_fd, .events = POLLIN};
        if (want_send)
            p[np++] = (struct pollfd){.fd = t->next_fd, .events = POLLOUT};
        int n = poll(p, (nfds_t)np, t->timeout_ms);
        if (n < 0 && errno != EINTR)
            return peer_error(t, what, true, DIST_EIO);
        if (n == 0) /* blame the side we were waiting on; receiving first */
            return peer_error(t, what, x->rdone < x->rlen, DIST_ETIMEDOUT);
        for (int i = 0; i < np; i++)
            if (p[i].revents & (POLLERR | POLLHUP) && !(p[i].revents & POLLIN)) {
                bool prev = p[i].fd == t->prev_fd;
                return peer_error(t, what, prev, DIST_EPEER);
            }
    }
    return 0;
}

static int step(struct tcp *t, const char *what, const void *sp, size_t slen, void *rp,
                size_t rlen, enum rmode mode, float *acc)
{
    struct xfer x = {.sp = sp, .slen = slen, .rp = rp, .rlen = rlen, .mode = mode, .acc = acc};
    return run_xfer(t, &x, what);
}

/* ---- all-reduce ------------------------------------------------------------------------------ */

static size_t seg_off(size_t n, int world, int i)
{
    return (size_t)((uint64_t)n * (uint64_t)i / (uint64_t)world); /* n < 2^40, world < 2^20 */
}

/* The all-reduce as two streams of ring steps, one sent to next and one received from prev.
 * Large buffers go round the ring in slices of world * chunk bytes, so that each slice is still
 * in cache when its reduced values come back in the all-gather: every element is read from and
 * written to memory once, instead of once per pass (which bounds a loopback all-reduce). Slice k
 * has J = 2(W-1) steps j: W-1 reduce-scatter steps, then W-1 all-gather steps. Every rank sends
 * (and so receives) the steps in the same order, (k, j) one after the other, and the send of a
 * step waits only for the receive it forwards (step j-1 of the same slice), not for the whole
 * previous step: the next slice's first step goes out while this slice's last one is still
 * arriving, so the links do not drain between steps (4 ranks on 2 cores: busbw +20-40 %; sending
 * several slices ahead cost +50 % sys time, measured in bench/allreduce). A send depends only on
 * an earlier receive, so the order cannot deadlock. */
struct sched {
    int W, r, J, nslices;
    bool bf16;
    float *buf;
    size_t n, slice; /* elements */
};

struct item {
    int k, j; /* slice, step */
};

/* Advances to the next item in wire order; false past the last. Start from {0, -1}. */
static bool item_next(const struct sched *s, struct item *it)
{
    if (++it->j == s->J) {
        it->j = 0;
        it->k++;
    }
    return it->k < s->nslices;
}

static int mod(int a, int w)
{
    return (a % w + w) % w;
}

/* Fills x with the send half (send) or the receive half of item it. */
static void item_xfer(const struct sched *s, const struct item *it, bool send, struct xfer *x)
{
    int W = s->W, r = s->r, j = it->j, seg;
    size_t base = (size_t)it->k * s->slice, len = s->n - base < s->slice ? s->n - base : s->slice;
    size_t esz = s->bf16 ? 2 : 4;
    bool rs = j < W - 1;

    if (rs)
        seg = send ? mod(r - j, W) : mod(r - j - 1, W);
    else
        seg = send ? mod(r + 1 - (j - (W - 1)), W) : mod(r - (j - (W - 1)), W);
    size_t off = seg_off(len, W, seg), cnt = seg_off(len, W, seg + 1) - off;
    float *p = s->buf + base + off;

    *x = (struct xfer){0};
    if (send) {
        x->slen = cnt * esz;
        if (s->bf16)
            x->senc = p;
        else
            x->sp = (const char *)p;
        return;
    }
    x->rlen = cnt * esz;
    x->acc = p;
    x->rp = (char *)p;
    if (!s->bf16)
        x->mode = rs ? R_ADD_F32 : R_COPY;
    else if (rs) /* the last step completes this rank's own segment: round it as it is summed */
        x->mode = j == W - 2 ? R_ADD_ROUND_BF16 : R_ADD_BF16;
    else
        x->mode = R_COPY_BF16;
}

/* Runs the two streams; waits in poll() only when neither can move, and a wait longer than the
 * timeout is a dead peer. bf16 on the wire: partial sums travel as bf16 (encoded chunk by chunk
 * as they are sent) and are accumulated in fp32; the owner of each reduced segment rounds it to
 * bf16 before the all-gather, so every rank ends bit-identical, and forwarding re-encodes
 * exactly. */
static int ring_allreduce(struct tcp *t, float *buf, size_t n)
{
    struct sched s = {.W = t->world, .r = t->rank, .J = 2 * (t->world - 1), .bf16 = t->bf16,
                      .buf = buf, .n = n};
    struct item si = {0, -1}, ri = {0, -1};
    struct xfer xs, xr;
    const char *what = "all-reduce";
    int rc = 0;

    s.slice = t->chunk / (t->bf16 ? 2 : 4) * (size_t)t->world; /* a chunk per step */
    s.nslices = (int)((n + s.slice - 1) / s.slice);
    bool sv = item_next(&s, &si), rv = item_next(&s, &ri);
    if (sv)
        item_xfer(&s, &si, true, &xs);
    if (rv)
        item_xfer(&s, &ri, false, &xr);
    while (sv || rv) {
        bool progress = false;
        if (rv && xr.rdone < xr.rlen && (rc = do_recv(t, &xr, what, &progress)))
            return rc;
        if (rv && xr.rdone == xr.rlen) {
            if ((rv = item_next(&s, &ri)))
                item_xfer(&s, &ri, false, &xr);
            progress = true;
        }
        /* Received so far: the items before ri. Step j forwards what step j - 1 received. */
        bool ready = sv && (si.j == 0 || !rv || ri.k > si.k || (ri.k == si.k && ri.j >= si.j));
        if (ready && xs.sdone < xs.slen && (rc = do_send(t, &xs, what, &progress)))
            return rc;
        if (ready && xs.sdone == xs.slen) {
            if ((sv = item_next(&s, &si)))
                item_xfer(&s, &si, true, &xs);
            progress = true;
        }
        if (progress)
            continue;
        struct pollfd p[2];
        int np = 0;
        if (rv)
            p[np++] = (struct pollfd){.fd = t->prev_fd, .events = POLLIN};
        if (ready)
            p[np++] = (struct pollfd){.fd = t->next_fd, .events = POLLOUT};
        int pn = poll(p, (nfds_t)np, t->timeout_ms);
        if (pn < 0 && errno != EINTR)
            return peer_error(t, what, true, DIST_EIO);
        if (pn == 0) /* blame the side we were waiting on; receiving first */
            return peer_error(t, what, rv, DIST_ETIMEDOUT);
        for (int i = 0; i < np; i++)
            if (p[i].revents & (POLLERR | POLLHUP) && !(p[i].revents & POLLIN))
                return peer_error(t, what, p[i].fd == t->prev_fd, DIST_EPEER);
    }
    return 0;
}

static int tcp_allreduce(struct coll *c, float *buf, size_t n, enum coll_red op)
{
    struct tcp *t = c->impl;
    int rc;

    if (t->shm)
        return coll_shm_allreduce(t->shm, buf, n, op == COLL_AVG);
    rc = t->world > 1 ? ring_allreduce(t, buf, n) : 0;
    if (!rc && op == COLL_AVG && t->world > 1) {
        float w = (float)t->world;
        for (size_t i = 0; i < n; i++)
            buf[i] /= w;
    }
    return rc;
}

/* ---- broadcast, all-gather, barrier --------------------------------------------------------- */

/* A pipelined chain root -> root+1 -> ... -> root-1: each rank forwards every chunk as soon as
 * it has arrived. */
static int tcp_broadcast(struct coll *c, void *buf, size_t bytes, int root)
{
    struct tcp *t = c->impl;
    int pos = (t->rank - root + t->world) % t->world; /* place in the chain */
    struct xfer x = {.sp = buf, .rp = buf, .mode = R_COPY};

    if (pos == 0) {
        x.slen = bytes;
    } else {
        x.rlen = bytes;
        x.slen = pos == t->world - 1 ? 0 : bytes;
        x.follow = true;
    }
    return run_xfer(t, &x, "broadcast");
}

static int tcp_allgather(struct coll *c, const void *send, void *recv, size_t bytes)
{
    struct tcp *t = c->impl;
    int W = t->world, r = t->rank, rc;
    char *out = recv;

    if (send != out + (size_t)r * bytes)
        memmove(out + (size_t)r * bytes, send, bytes);
    for (int s = 0; s < W - 1; s++) {
        int si = ((r - s) % W + W) % W, ri = ((r - s - 1) % W + W) % W;
        if ((rc = step(t, "all-gather", out + (size_t)si * bytes, bytes,
                       out + (size_t)ri * bytes, bytes, R_COPY, NULL)))
            return rc;
    }
    return 0;
}

/* An all-gather of one byte per rank: nobody leaves before everyone has sent. */
static int tcp_barrier(struct coll *c)
{
    char *b = xcalloc((size_t)c->world, 1);
    int rc = c->world > 1 ? tcp_allgather(c, b + c->rank, b, 1) : 0;
    free(b);
    return rc;
}

static void tcp_free(struct tcp *t)
{
    if (!t)
        return;
    coll_shm_free(t->shm);
    tcp_free(t->cross);
    if (t->next_fd >= 0)
        close(t->next_fd);
    if (t->prev_fd >= 0)
        close(t->prev_fd);
    free(t->stage);
    free(t->sstage);
    free(t);
}

static void tcp_destroy(struct coll *c)
{
    tcp_free(c->impl);
}

static const struct coll_ops tcp_ops = {.name = "tcp",
                                        .allreduce = tcp_allreduce,
                                        .broadcast = tcp_broadcast,
                                        .allgather = tcp_allgather,
                                        .barrier = tcp_barrier,
                                        .destroy = tcp_destroy};

/* ---- setup ---------------------------------------------------------------------------------- */

/* The hello a connecting rank sends: its place in the ring, then HMAC(token, label | nonce |
 * instance | ring | place), so that a hello is good for one link of one ring only. */
static void hello_mac(struct store *st, const unsigned char *nonce, const struct tcp *t, int rank,
                      unsigned char mac[STORE_MAC_LEN])
{
    unsigned char m[sizeof(COLL_MAC_LABEL) + NONCE_LEN + 16];
    size_t l = sizeof(COLL_MAC_LABEL) - 1;

    memcpy(m, COLL_MAC_LABEL, l);
    memcpy(m + l, nonce, NONCE_LEN);
    net_put_u64(m + l + NONCE_LEN, (uint64_t)t->inst);
    net_put_u32(m + l + NONCE_LEN + 8, (uint32_t)t->ring_id);
    net_put_u32(m + l + NONCE_LEN + 12, (uint32_t)rank);
    store_hmac(st, m, l + NONCE_LEN + 16, mac);
}

/* Connections accepted and not yet authenticated, read side by side (COLL_PENDING at most: a
 * new one then replaces the oldest). */
#define COLL_PENDING 16
#define HELLO_LEN (4 + STORE_MAC_LEN)

struct pending {
    int fd;
    size_t got;
    unsigned char h[HELLO_LEN];
    int64_t until; /* dropped at this dist_now_ms() */
};

static void drop_pending(struct pending *p, int *np, int i, int prev, const char *why)
{
    dist_log("tcp collectives: waiting for rank %d, dropped a connection: %s", prev, why);
    close(p[i].fd);
    p[i] = p[--*np];
}

/* Accepts until the expected previous rank shows up with a valid hello. Strays are read side by
 * side with it and dropped: a wrong hello at once, a silent one after hello_ms, so none holds
 * up the ring. */
static int accept_prev(struct tcp *t, struct store *st, int lfd, const unsigned char *nonce)
{
    int64_t deadline = dist_now_ms() + t->timeout_ms;
    int place = (t->rank - 1 + t->world) % t->world, prev = t->prev_rank, np = 0;
    int rc = DIST_ETIMEDOUT;
    unsigned char want[STORE_MAC_LEN];
    struct pending p[COLL_PENDING];
    struct pollfd pf[COLL_PENDING + 1];

    hello_mac(st, nonce, t, place, want);
    for (;;) {
        int64_t now = dist_now_ms(), until = deadline;
        if (now >= deadline) {
            dist_log("tcp collectives: rank %d (%s) did not connect within %.1f s", prev,
                     t->prev_addr, t->timeout_ms / 1000.0);
            break;
        }
        pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < np; i++) {
            pf[i + 1] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
            until = p[i].until < until ? p[i].until : until;
        }
        int n = poll(pf, (nfds_t)np + 1, until > now ? (int)(until - now) : 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = DIST_EIO;
            break;
        }
        now = dist_now_ms();
        for (int i = np; i-- > 0;) { /* backwards: a drop moves the last one here */
            if (pf[i + 1].revents) {
                ssize_t r = recv(p[i].fd, p[i].h + p[i].got, HELLO_LEN - p[i].got, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    drop_pending(p, &np, i, prev, "it hung up before its hello");
                    continue;
                }
                p[i].got += r > 0 ? (size_t)r : 0;
                if (p[i].got == HELLO_LEN) {
                    if ((int)net_get_u32(p[i].h) == place && /* constant time, as store.c: */
                        CRYPTO_memcmp(p[i].h + 4, want, STORE_MAC_LEN) == 0) {
                        t->prev_fd = p[i].fd;
                        p[i] = p[--np];
                        rc = 0;
                        goto out;
                    }
                    drop_pending(p, &np, i, prev, "its hello did not authenticate");
                    continue;
                }
            }
            if (now >= p[i].until) /* a prefix of a hello, or nothing, for hello_ms */
                drop_pending(p, &np, i, prev, "no complete hello within hello_timeout_ms");
        }
        if (pf[0].revents) {
            int fd;
            if (net_accept(lfd, 0, &fd) == 0) {
                if (np == COLL_PENDING) { /* the oldest makes room */
                    int old = 0;
                    for (int i = 1; i < np; i++)
                        old = p[i].until < p[old].until ? i : old;
                    drop_pending(p, &np, old, prev, "the oldest without a hello, to make room");
                }
                p[np++] = (struct pending){.fd = fd, .until = now + t->hello_ms};
            }
        }
    }
out:
    while (np > 0)
        close(p[--np].fd);
    return rc;
}

/* This instance's number (every rank creates its collectives in the same order, so its own
 * count names the instance) and its nonce, drawn by rank 0. */
static int tcp_instance(struct tcp *t, struct store *st, unsigned char nonce[NONCE_LEN])
{
    char key[96];
    void *v = NULL;
    size_t vl;
    int rc;

    snprintf(key, sizeof(key), "coll/instances/%d", t->rank);
    if ((rc = store_add(st, key, 1, &t->inst)))
        return rc;
    snprintf(key, sizeof(key), "coll/%" PRId64 "/nonce", t->inst);
    if (t->rank == 0) {
        if (RAND_bytes(nonce, NONCE_LEN) != 1 || (rc = store_set(st, key, nonce, NONCE_LEN)))
            return rc ? rc : DIST_EIO;
        return 0;
    }
    if ((rc = store_wait(st, key, t->timeout_ms, &v, &vl)))
        return rc;
    if (vl != NONCE_LEN) {
        free(v);
        return DIST_EPROTO;
    }
    memcpy(nonce, v, NONCE_LEN);
    free(v);
    return 0;
}

static int ring_listen(struct store *st, int *lfd, int *lport)
{
    int rc = net_listen(store_local_addr(st), 0, lfd, lport);

    if (rc)
        dist_log("tcp collectives: could not listen on %s: %s", store_local_addr(st),
                 strerror(errno));
    return rc;
}

/* Connects ring t (t->rank, t->world, t->ring_id, t->inst and the neighbours' global ranks set)
 * with lfd listening on lport (closed here): publishes its address under kpfx/addr/<place>,
 * connects to the next place and accepts the previous one. */
static int tcp_ring_connect(struct tcp *t, struct store *st, const unsigned char *nonce,
                            const char *kpfx, int lfd, int lport)
{
    unsigned char h[4 + STORE_MAC_LEN];
    char key[128], val[NET_MAX_ADDR + 16], host[NET_MAX_ADDR], why[256];
    int next = (t->rank + 1) % t->world, prev = (t->rank - 1 + t->world) % t->world;
    int port, rc;

    snprintf(key, sizeof(key), "%s/addr/%d", kpfx, t->rank);
    snprintf(val, sizeof(val), "%s %d", store_local_addr(st), lport);
    if ((rc = store_set(st, key, val, strlen(val))))
        goto out;
    snprintf(key, sizeof(key), "%s/addr/%d", kpfx, next);
    if ((rc = store_wait_str(st, key, t->timeout_ms, val, sizeof(val))))
        goto out;
    if (sscanf(val, "%63s %d", host, &port) != 2) {
        rc = DIST_EPROTO;
        goto out;
    }
    snprintf(t->next_addr, sizeof(t->next_addr), "%s:%d", host, port);
    snprintf(key, sizeof(key), "%s/addr/%d", kpfx, prev);
    if ((rc = store_wait_str(st, key, t->timeout_ms, val, sizeof(val))))
        goto out;
    snprintf(t->prev_addr, sizeof(t->prev_addr), "%s", val);
    char *sp = strchr(t->prev_addr, ' ');
    if (sp)
        *sp = ':';
    if ((rc = net_connect(host, port, t->timeout_ms, &t->next_fd, why, sizeof(why)))) {
        dist_log("tcp collectives: could not connect to rank %d: %s", t->next_rank, why);
        goto out;
    }
    net_put_u32(h, (uint32_t)t->rank);
    hello_mac(st, nonce, t, t->rank, h + 4);
    if ((rc = net_write_all(t->next_fd, h, sizeof(h), t->timeout_ms)))
        goto out;
    rc = accept_prev(t, st, lfd, nonce);
out:
    close(lfd);
    return rc;
}

static bool host_is(const char *addr_port, const char *host)
{
    const char *colon = strrchr(addr_port, ':');
    size_t n = colon ? (size_t)(colon - addr_port) : strlen(addr_port);
    return strlen(host) == n && strncmp(addr_port, host, n) == 0;
}

/* Each ring step waits for the previous one, so a step costs about one network latency on top of
 * its bytes. Between hosts, 1 MiB steps keep that small; when both neighbours are on this host
 * (loopback: memory-bound, no wire latency) about 128 KiB steps keep each slice in cache, which
 * measured fastest (bench/allreduce). There a step is a whole number of segments (the MSS this
 * host advertises, 65483 bytes on loopback, is the peer's too): a 128 KiB step went out as two
 * full segments and a 106-byte one, a third of all data packets, each paying the stack's whole
 * per-packet cost (4 ranks: sys time -15 %, busbw +1-41 %, bench/allreduce A/B). */
static size_t default_chunk(const struct tcp *t, struct store *st)
{
    const char *me = store_local_addr(st);
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    if (t->world < 2 || !host_is(t->next_addr, me) || !host_is(t->prev_addr, me))
        return 1024 * 1024;
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(t->next_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_advmss < 4096)
        return 128 * 1024;
    size_t mss = ti.tcpi_advmss, segs = (128 * 1024 + mss / 2) / mss;
    return (segs ? segs : 1) * mss / 4 * 4; /* whole elements: up to 3 bytes under */
}

bool coll_tcp_uses_shm(const struct coll *c)
{
    return c->ops == &tcp_ops && ((const struct tcp *)c->impl)->shm;
}

int coll_tcp_shm_groups(const struct coll *c)
{
    const struct tcp *t = c->ops == &tcp_ops ? c->impl : NULL;
    return t && t->shm ? t->shm_groups : 0;
}

const char *coll_allreduce_path(const struct coll *c)
{
    if (c->ops != &tcp_ops)
        return c->ops->name;
    if (c->world == 1)
        return "none";
    int g = coll_tcp_shm_groups(c);
    return g == 1 ? "shm" : g > 1 ? "nodes" : "ring";
}

/* A connected ring's socket buffers (opts.sock_buf_bytes), step size and staging buffers. */
static void ring_buffers(struct tcp *t, struct store *st, const struct coll_opts *o)
{
    if (o->sock_buf_bytes > 0 && t->next_fd >= 0) {
        net_set_bufsize(t->next_fd, o->sock_buf_bytes);
        net_set_bufsize(t->prev_fd, o->sock_buf_bytes);
    }
    t->chunk = o->chunk_bytes >= 4096 ? o->chunk_bytes & ~(size_t)3 : default_chunk(t, st);
    t->stage = xmalloc(t->chunk);
    t->sstage = xmalloc(t->chunk);
}

/* Between a node's reduce and its gather: this local rank's segment across the nodes. */
static int cross_allreduce(void *arg, float *seg, size_t n, int *culprit)
{
    struct tcp *x = arg;
    int rc = ring_allreduce(x, seg, n);

    if (rc)
        *culprit = x->blame;
    return rc;
}

/* The ring of local rank l across the nodes (node g's rank is g * L + l), for the all-reduce of
 * the segments that local rank l reduces in its node. */
static int tcp_cross_ring(struct tcp *t, struct store *st, const unsigned char *nonce, int L,
                          const struct coll_opts *o)
{
    struct tcp *x = xcalloc(1, sizeof(*x));
    int N = t->world / L, g = t->rank / L, l = t->rank % L, lfd, lport, rc;
    char kpfx[64];

    t->cross = x;
    x->rank = g;
    x->world = N;
    x->prev_rank = (g - 1 + N) % N * L + l;
    x->next_rank = (g + 1) % N * L + l;
    x->ring_id = 1 + l;
    x->inst = t->inst;
    x->next_fd = x->prev_fd = -1;
    x->timeout_ms = t->timeout_ms;
    x->hello_ms = t->hello_ms;
    x->bf16 = o->bf16_wire;
    snprintf(kpfx, sizeof(kpfx), "coll/%" PRId64 "/x%d", t->inst, l);
    if ((rc = ring_listen(st, &lfd, &lport)) ||
        (rc = tcp_ring_connect(x, st, nonce, kpfx, lfd, lport)))
        return rc;
    ring_buffers(x, st, o);
    return 0;
}

/* Ranks per node: coll_opts.local_size, else NPROC_PER_NODE (what gantry-run and a pod's
 * launcher set), else 1. */
static int local_size(const struct coll_opts *o)
{
    const char *v = getenv("NPROC_PER_NODE");
    char *end;
    long x;

    if (o->local_size > 0)
        return o->local_size;
    if (!v || !*v)
        return 1;
    x = strtol(v, &end, 10);
    return *end || x < 1 || x > 1 << 16 ? 1 : (int)x;
}

/* Shared memory for the all-reduce (coll_shm.h), decided by probes every rank takes part in, so
 * all decide alike:
 *  1. every rank maps one object (ranks in one container): the whole all-reduce goes through
 *     it; not with bf16 on the wire (the ring's compression: shared memory has no wire to save);
 *  2. else, with several ranks per node (L = local_size, node = rank / L) on several nodes,
 *     when each node's ranks map one object of the node's: each node reduces in shared memory,
 *     local rank l all-reduces its segment of every piece with local rank l of the other nodes
 *     over a ring of its own (the L rings run side by side, fp32 or bf16 on the wire), and the
 *     node gathers the result. A node sends (2(N-1)/N) x the buffer to the others, where the
 *     ring of all ranks sends (2(W-1)/W) x the buffer out of each node on one connection and
 *     takes 2(W-1) steps instead of 2(N-1).
 * Switched off by opts.shm < 0 or GANTRY_COLL_SHM=0; opts.shm = 2 or GANTRY_COLL_SHM=node votes
 * no in the first probe (tests and benchmarks: nodes on one host). The ranks per node must be
 * the same number on every rank, as the world size is. */
static int tcp_try_shm(struct tcp *t, struct store *st, const struct coll_opts *o,
                       const unsigned char *nonce)
{
    const char *env = getenv("GANTRY_COLL_SHM"), *off = NULL;
    struct coll_shm_ring ring = {.prev_fd = t->prev_fd, .next_fd = t->next_fd,
                                 .prev_rank = t->prev_rank, .next_rank = t->next_rank,
                                 .prev_addr = t->prev_addr, .next_addr = t->next_addr};
    bool node_only = o->shm == 2 || (env && strcmp(env, "node") == 0);
    int W = t->world, L = local_size(o), rc;
    bool nodes = L > 1 && L < W && W % L == 0;
    char pfx[64];

    if (o->shm < 0)
        off = "switched off in coll_opts";
    else if (env && strcmp(env, "0") == 0)
        off = "GANTRY_COLL_SHM=0";
    struct coll_shm_group all = {.rank = t->rank, .size = W, .first = 0, .id = 0, .count = 1};
    const char *all_off = off                ? off
                          : o->bf16_wire     ? "bf16 on the wire"
                          : node_only        ? "within nodes only (GANTRY_COLL_SHM=node)"
                                             : NULL;
    snprintf(pfx, sizeof(pfx), "coll/%" PRId64 "/shm", t->inst);
    /* with several nodes, the whole world not sharing memory is the usual case: not worth a
     * line (the next probe's outcome is) */
    if ((rc = coll_shm_open(st, pfx, &all, all_off, nodes ? NULL : "it runs over the TCP ring",
                            t->timeout_ms, &ring, &t->shm)) ||
        t->shm || !nodes) {
        t->shm_groups = t->shm ? 1 : 0;
        return rc;
    }
    struct coll_shm_group g = {.rank = t->rank % L, .size = L, .first = t->rank / L * L,
                               .id = t->rank / L, .count = W / L};
    snprintf(pfx, sizeof(pfx), "coll/%" PRId64 "/shmnode", t->inst);
    if ((rc = coll_shm_open(st, pfx, &g, off, "it runs over the TCP ring", t->timeout_ms, &ring,
                            &t->shm)) ||
        !t->shm)
        return rc;
    t->shm_groups = g.count; /* 2 or more: nodes */
    if ((rc = tcp_cross_ring(t, st, nonce, L, o)))
        return rc;
    coll_shm_set_cross(t->shm, cross_allreduce, t->cross);
    return 0;
}

int coll_tcp_new(struct store *st, const struct coll_opts *opts, struct coll **out)
{
    struct coll_opts o = {0};
    struct tcp *t = xcalloc(1, sizeof(*t));
    unsigned char nonce[NONCE_LEN];
    int rc = 0;

    if (opts)
        o = *opts;
    t->rank = store_rank(st);
    t->world = store_world_size(st);
    t->prev_rank = (t->rank - 1 + t->world) % t->world;
    t->next_rank = (t->rank + 1) % t->world;
    t->next_fd = t->prev_fd = -1;
    t->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 60000;
    t->hello_ms = o.hello_timeout_ms > 0 ? o.hello_timeout_ms : 10000;
    t->bf16 = o.bf16_wire;
    if (t->world > 1) {
        char kpfx[64];
        int lfd, lport;
        /* listening first: tests find the port while this rank waits for the nonce */
        if ((rc = ring_listen(st, &lfd, &lport)))
            goto out;
        if ((rc = tcp_instance(t, st, nonce))) {
            close(lfd);
            goto out;
        }
        snprintf(kpfx, sizeof(kpfx), "coll/%" PRId64, t->inst);
        if ((rc = tcp_ring_connect(t, st, nonce, kpfx, lfd, lport)) ||
            (rc = tcp_try_shm(t, st, &o, nonce)))
            goto out;
    }
    ring_buffers(t, st, &o);
    *out = coll_wrap(&tcp_ops, t->rank, t->world, t);
    t = NULL;
out:
    tcp_free(t);
    return rc;
}
