/*
 * coll_shm.c - the tcp backend's all-reduce through shared memory, for ranks that map one POSIX
 * shared-memory object (coll_shm.h has the protocol). Layout of the mapping: a header page (the
 * token, sizes, the abort word), one 128-byte line per rank with its sequence counter and its
 * sleepers count (a line each: counters of different ranks never share a cache line, nor the
 * adjacent-line prefetch pair), then two piece-sized slots per rank.
 *
 * Rank r's counter after piece p (counted over the lifetime of the mapping) says: 2p+1, its slot
 * holds piece p's input (all but segment r); 2p+2, segment r of its slot holds the reduced
 * segment. A rank reads other slots only after seeing their counter (acquire), and writes its
 * slot b = p & 1 for piece p only after it has seen every counter at 2(p-1)+1, i.e. after every
 * rank has finished piece p-2, the last one that used that slot.
 */
#include "worker/coll_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "common/xalloc.h"
#include "worker/dist.h"
#include "worker/store.h"

#define SHM_MAGIC 0x67616e7472795368ull /* "gantrySh" */
#define SHM_TOKEN_LEN 16
#define SHM_LINE 128
#define SHM_HDR_BYTES 4096
#define SHM_MAX_BYTES (64u << 20) /* all slots together */
#define SHM_PIECE_DEFAULT (1u << 20)
#define SHM_SPIN_DEFAULT 2000
#define SHM_SLICE_MS 50 /* futex sleep between checks of the ring sockets */
#define SHM_BLOCK 2048  /* floats reduced at a time: 8 KiB */

struct shm_hdr {
    uint64_t magic;
    unsigned char token[SHM_TOKEN_LEN];
    uint32_t world;
    uint32_t piece; /* floats per piece (= per slot) */
    uint64_t size;
    /* First failure: (-code) << 48 | culprit << 24 | reporter (global ranks, < 2^24); 0 while
     * all is well. */
    _Alignas(SHM_LINE) _Atomic uint64_t abort_word;
};

struct shm_ctl {
    _Alignas(SHM_LINE) _Atomic uint32_t seq; /* also the futex word its readers sleep on */
    _Atomic int32_t sleepers;                /* readers in (or about to enter) futex_wait */
};

struct coll_shm {
    int rank, world, timeout_ms, spin; /* rank and world within the group */
    int first;                         /* the group's rank 0 as a global rank */
    int spin_now; /* adaptive: halves when a spin ends in a sleep, doubles when it succeeds */
    size_t piece;    /* floats */
    uint32_t pieces; /* pieces done over the lifetime of the mapping */
    unsigned char *base;
    size_t size;
    struct shm_hdr *hdr;
    struct shm_ctl *ctl;
    struct coll_shm_ring ring;
    const float **src; /* world entries: the sources of this rank's segment */
    coll_shm_cross_fn cross; /* non-NULL: each reduced segment is all-reduced across groups */
    void *cross_arg;
    int total; /* ranks in all groups: the average's divisor */
};

/* ---- waiting and failures ------------------------------------------------------------------ */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v, int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static bool reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0; /* wraps after 2^31 pieces */
}

/* Publishes this rank's counter; wakes its readers only when one may sleep. The store and the
 * load of sleepers are seq_cst, as are a sleeper's increment and its load of seq: one of the two
 * sides sees the other, so a wakeup cannot be lost. */
static void publish(struct coll_shm *s, uint32_t v)
{
    struct shm_ctl *c = &s->ctl[s->rank];

    atomic_store(&c->seq, v);
    if (atomic_load(&c->sleepers) > 0)
        futex_wake_all(&c->seq);
}

static int report(const struct coll_shm *s, uint64_t w)
{
    int rc = -(int)(w >> 48), culprit = (int)((w >> 24) & 0xffffff), by = (int)(w & 0xffffff);
    const char *what = "all-reduce (shared memory)";
    char seen[48] = "";

    if (by != s->first + s->rank)
        snprintf(seen, sizeof(seen), " (seen by rank %d)", by);
    if (rc == DIST_ETIMEDOUT)
        dist_log("%s: rank %d made no progress for %.1f s%s: it is hung or dead. Exiting so that "
                 "the gang restarts from the last checkpoint",
                 what, culprit, s->timeout_ms / 1000.0, seen);
    else if (by == s->first + s->rank)
        dist_log("%s: rank %d (%s) closed the connection: it died. Exiting so that the gang "
                 "restarts from the last checkpoint",
                 what, culprit,
                 culprit == s->ring.prev_rank ? s->ring.prev_addr : s->ring.next_addr);
    else
        dist_log("%s: rank %d closed its connections%s: it died. Exiting so that the gang "
                 "restarts from the last checkpoint",
                 what, culprit, seen);
    return rc;
}

/* Marks the mapping aborted (the first failure wins) and wakes every sleeper, so that all ranks
 * fail now instead of one timeout after another. Returns the abort word that won. culprit: a
 * global rank. */
static uint64_t mark_failed(struct coll_shm *s, int rc, int culprit)
{
    uint64_t zero = 0, w = (uint64_t)(-rc & 0xffff) << 48 | (uint64_t)(culprit & 0xffffff) << 24 |
                           (uint64_t)((s->first + s->rank) & 0xffffff);

    if (!atomic_compare_exchange_strong(&s->hdr->abort_word, &zero, w))
        w = zero; /* someone was first: report theirs */
    for (int q = 0; q < s->world; q++)
        futex_wake_all(&s->ctl[q].seq);
    return w;
}

/* mark_failed, then says why. Returns the error to report. */
static int fail(struct coll_shm *s, int rc, int culprit)
{
    return report(s, mark_failed(s, rc, culprit));
}

/* A ring neighbour of this group that is gone. No data flows on the ring during shm operations,
 * except a neighbour that already finished this all-reduce may have sent the next TCP
 * collective's bytes: data is not a death, end of file or a hangup is. A neighbour in another
 * group (the next node's first rank) is not watched: its node may finish the last all-reduce and
 * hang up while this one still gathers (it needs only what this node sent), and a death there
 * reaches this node through the ring between the nodes. -1: both alive. */
static int dead_neighbour(const struct coll_shm *s)
{
    int fds[2] = {s->ring.prev_fd, s->ring.next_fd};
    int ranks[2] = {s->ring.prev_rank, s->ring.next_rank};

    for (int i = 0; i < 2; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN | POLLRDHUP};
        char c;
        if (fds[i] < 0 || ranks[i] < s->first || ranks[i] >= s->first + s->world ||
            poll(&p, 1, 0) <= 0)
            continue;
        if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
            return ranks[i];
        ssize_t n = recv(fds[i], &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return ranks[i];
    }
    return -1;
}

/* Waits until rank q's counter reaches target: spins a little (the other rank is usually a few
 * microseconds away), then sleeps on the counter in slices, checking between them for an abort,
 * a dead neighbour and the timeout. The spin adapts, as in adaptive mutexes: on a loaded machine
 * the rank waited for is often off its CPU and spinning only delays it (2 ranks, load ~4: busbw
 * 2.7 GB/s adaptive or not spinning, 2.2 spinning 2000 loops every time); it never goes under
 * 1/32 of the maximum, so that it can find out when spinning pays again. */
static int wait_rank(struct coll_shm *s, int q, uint32_t target)
{
    struct shm_ctl *c = &s->ctl[q];
    int64_t deadline = 0;
    uint64_t w;

    for (int i = 0; i < s->spin_now; i++) {
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target)) {
            s->spin_now = s->spin_now * 2 < s->spin ? s->spin_now * 2 : s->spin;
            return 0;
        }
        cpu_relax();
    }
    if (s->spin_now / 2 >= s->spin / 32) /* the rank is slow, or off its CPU: spin less */
        s->spin_now /= 2;
    for (;;) {
        atomic_fetch_add(&c->sleepers, 1);
        uint32_t v = atomic_load(&c->seq);
        if (!reached(v, target) && !atomic_load(&s->hdr->abort_word))
            futex_wait(&c->seq, v, SHM_SLICE_MS);
        atomic_fetch_sub(&c->sleepers, 1);
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
            return 0;
        if ((w = atomic_load(&s->hdr->abort_word)))
            return report(s, w);
        int dead = dead_neighbour(s);
        if (dead >= 0)
            return fail(s, DIST_EPEER, dead);
        int64_t now = dist_now_ms();
        if (!deadline)
            deadline = now + s->timeout_ms;
        else if (now >= deadline)
            return fail(s, DIST_ETIMEDOUT, s->first + q);
    }
}

/* ---- the all-reduce ------------------------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

HOT static void add2(float *restrict d, const float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] + b[i];
}

HOT static void add_to(float *restrict d, const float *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

HOT static void div_by(float *restrict d, float w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] /= w; /* as the ring does it: a division, not a multiplication by 1/w */
}

static size_t seg_off(size_t n, int world, int i)
{
    return (size_t)((uint64_t)n * (uint64_t)i / (uint64_t)world);
}

static float *slot(const struct coll_shm *s, int q, int b)
{
    size_t ctl = ((size_t)s->world * SHM_LINE + 4095) / 4096 * 4096;
    return (float *)(s->base + SHM_HDR_BYTES + ctl +
                     ((size_t)q * 2 + (size_t)b) * s->piece * sizeof(float));
}

/* sum = src[0] + src[1] + ... in rank order (divided by W for the average), copied to out too:
 * block by block, so the running sum stays in L1 and each source and destination crosses the
 * memory bus once. src[r] may be out (this rank's own data): a block is read before written. */
static void reduce_seg(int W, float *sum, float *out, const float *const *src, size_t m, bool avg)
{
    for (size_t at = 0; at < m; at += SHM_BLOCK) {
        size_t k = m - at < SHM_BLOCK ? m - at : SHM_BLOCK;
        add2(sum + at, src[0] + at, src[1] + at, k);
        for (int q = 2; q < W; q++)
            add_to(sum + at, src[q] + at, k);
        if (avg)
            div_by(sum + at, (float)W, k);
        memcpy(out + at, sum + at, k * sizeof(float));
    }
}

/* One piece of len floats (coll_shm.h: copy in, reduce segment r in rank order, copy out). */
static int do_piece(struct coll_shm *s, float *buf, size_t len, bool avg)
{
    int W = s->world, r = s->rank, b = (int)(s->pieces & 1), rc;
    uint32_t in = 2 * s->pieces + 1, out = in + 1;
    size_t lo = seg_off(len, W, r), hi = seg_off(len, W, r + 1);
    float *mine = slot(s, r, b);

    s->pieces++;
    memcpy(mine, buf, lo * sizeof(float)); /* segment r stays in buf: only this rank reads it */
    memcpy(mine + hi, buf + hi, (len - hi) * sizeof(float));
    publish(s, in);
    for (int q = 0; q < W; q++) { /* every rank's counter, even when hi == lo (slot reuse rule) */
        s->src[q] = q == r ? buf + lo : slot(s, q, b) + lo;
        if (q != r && (rc = wait_rank(s, q, in)))
            return rc;
    }
    if (!s->cross) {
        reduce_seg(W, mine + lo, buf + lo, s->src, hi - lo, avg);
    } else { /* the group's sum, then the other groups' added in the slot itself */
        reduce_seg(W, mine + lo, buf + lo, s->src, hi - lo, false);
        int culprit = -1;
        if ((rc = s->cross(s->cross_arg, mine + lo, hi - lo, &culprit))) {
            /* the cross-group ring has said what happened; the group's other ranks, waiting
             * for this segment, fail now with the same error */
            mark_failed(s, rc, culprit >= 0 ? culprit : s->first + r);
            return rc;
        }
        if (avg)
            div_by(mine + lo, (float)s->total, hi - lo);
        memcpy(buf + lo, mine + lo, (hi - lo) * sizeof(float));
    }
    publish(s, out);
    for (int k = 1; k < W; k++) { /* start past this rank: ranks do not all read one slot */
        int q = (r + k) % W;
        size_t qlo = seg_off(len, W, q), qhi = seg_off(len, W, q + 1);
        if ((rc = wait_rank(s, q, out)))
            return rc;
        memcpy(buf + qlo, slot(s, q, b) + qlo, (qhi - qlo) * sizeof(float));
    }
    return 0;
}

int coll_shm_allreduce(struct coll_shm *s, float *buf, size_t n, bool avg)
{
    int rc;

    for (size_t at = 0; at < n; at += s->piece) {
        size_t len = n - at < s->piece ? n - at : s->piece;
        if ((rc = do_piece(s, buf + at, len, avg)))
            return rc;
    }
    return 0;
}

/* ---- setup --------------------------------------------------------------------------------- */

static size_t map_size(int world, size_t piece)
{
    size_t ctl = ((size_t)world * SHM_LINE + 4095) / 4096 * 4096;
    return SHM_HDR_BYTES + ctl + 2 * (size_t)world * piece * sizeof(float);
}

static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    char *end;
    unsigned long long x;

    if (!v || !*v)
        return dflt;
    errno = 0;
    x = strtoull(v, &end, 0);
    return (errno || *end) ? dflt : (size_t)x;
}

/* Spinning pays when every rank has a CPU of its own: the rank it waits for is running. With
 * more ranks than CPUs it takes the CPU that rank needs (4 ranks on 2 cores, 64 MiB: busbw ~3.0
 * GB/s without spinning, ~2.6 with 2000 pause loops, ~1.0 with 20000), so sleep at once there. */
static size_t default_spin(int world)
{
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

    return world <= cpus ? SHM_SPIN_DEFAULT : 0;
}

/* Bytes per piece: GANTRY_COLL_SHM_PIECE or 1 MiB, whole cache lines, all slots <= 64 MiB. */
static size_t piece_floats(int world)
{
    size_t bytes = env_size("GANTRY_COLL_SHM_PIECE", SHM_PIECE_DEFAULT);
    size_t most = SHM_MAX_BYTES / (2 * (size_t)world);

    if (bytes > most)
        bytes = most;
    bytes = bytes / 64 * 64;
    if (bytes < 4096)
        bytes = 4096;
    return bytes / sizeof(float);
}

static void tohex(const unsigned char *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static int map_fd(struct coll_shm *s, int fd, char *why, size_t cap)
{
    void *p = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);

    if (p == MAP_FAILED) {
        snprintf(why, cap, "mmap of %zu bytes: %s", s->size, strerror(errno));
        return -1;
    }
    s->base = p;
    s->hdr = p;
    s->ctl = (struct shm_ctl *)(s->base + SHM_HDR_BYTES);
    return 0;
}

/* Rank 0: creates, sizes, reserves and maps the object and fills in the header. The memory is
 * reserved up front (posix_fallocate) because a tmpfs that fills up later would kill us with
 * SIGBUS on first touch instead of failing here. */
static int create_obj(struct coll_shm *s, char *name, size_t name_cap,
                      unsigned char token[SHM_TOKEN_LEN], char *why, size_t cap)
{
    unsigned char rnd[8];
    char hex[2 * sizeof(rnd) + 1];
    int fd = -1, rc = -1, e;

    if (RAND_bytes(rnd, sizeof(rnd)) != 1 || RAND_bytes(token, SHM_TOKEN_LEN) != 1) {
        snprintf(why, cap, "no random bytes for the object's name");
        return -1;
    }
    tohex(rnd, sizeof(rnd), hex);
    snprintf(name, name_cap, "/%s%ld-%s", COLL_SHM_PREFIX, (long)getpid(), hex);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(why, cap, "shm_open %s: %s", name, strerror(errno));
        name[0] = 0;
        return -1;
    }
    if (ftruncate(fd, (off_t)s->size) != 0) {
        snprintf(why, cap, "ftruncate %s to %zu bytes: %s", name, s->size, strerror(errno));
        goto out;
    }
    if ((e = posix_fallocate(fd, 0, (off_t)s->size)) != 0) {
        snprintf(why, cap, "reserving %zu bytes in /dev/shm: %s (a container's /dev/shm is "
                 "often 64 MiB: raise it, e.g. an emptyDir with medium Memory)",
                 s->size, strerror(e));
        goto out;
    }
    if (map_fd(s, fd, why, cap))
        goto out;
    s->hdr->magic = SHM_MAGIC;
    memcpy(s->hdr->token, token, SHM_TOKEN_LEN);
    s->hdr->world = (uint32_t)s->world;
    s->hdr->piece = (uint32_t)s->piece;
    s->hdr->size = s->size;
    rc = 0;
out:
    close(fd);
    return rc;
}

/* Other ranks: maps rank 0's object and checks that it is the one rank 0 announced. */
static int open_obj(struct coll_shm *s, const char *name, const char *token_hex, char *why,
                    size_t cap)
{
    struct stat sb;
    char hex[2 * SHM_TOKEN_LEN + 1];
    int fd = shm_open(name, O_RDWR, 0);

    if (fd < 0) {
        snprintf(why, cap, "rank %d: shm_open %s: %s (not the same host or /dev/shm as rank 0)",
                 s->rank, name, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != s->size) {
        snprintf(why, cap, "rank %d: %s has the wrong size", s->rank, name);
        close(fd);
        return -1;
    }
    int rc = map_fd(s, fd, why, cap);
    close(fd);
    if (rc)
        return rc;
    tohex(s->hdr->token, SHM_TOKEN_LEN, hex);
    if (s->hdr->magic != SHM_MAGIC || strcmp(hex, token_hex) != 0 ||
        s->hdr->world != (uint32_t)s->world || s->hdr->piece != (uint32_t)s->piece) {
        snprintf(why, cap, "rank %d: %s is not the object rank 0 created (another /dev/shm?)",
                 s->rank, name);
        return -1;
    }
    return 0;
}

/* The group's first rank: create, announce, collect the group's verdicts, unlink. *ok: the
 * group's verdict; why: the first reason against it. Every group takes global rank 0's piece
 * size: the groups' segments must line up for the all-reduce across them. */
static int setup_leader(struct coll_shm *s, struct store *st, const char *pfx, int id,
                        const char *gpfx, const char *off, bool *ok, char *why, size_t cap)
{
    char name[96] = "", key[128], val[256];
    unsigned char token[SHM_TOKEN_LEN];
    size_t piece;
    int rc;

    snprintf(key, sizeof(key), "%s/piece", pfx);
    if (id == 0) {
        snprintf(val, sizeof(val), "%zu", s->piece);
        if ((rc = store_set(st, key, val, strlen(val))))
            return rc;
    } else {
        if ((rc = store_wait_str(st, key, s->timeout_ms, val, sizeof(val))))
            return rc;
        if (sscanf(val, "%zu", &piece) != 1 || piece < 1024 ||
            piece > SHM_MAX_BYTES / (2 * (size_t)s->world * sizeof(float)))
            off = "rank 0's piece size does not fit this group's slots";
        else
            s->piece = piece;
        s->size = map_size(s->world, s->piece);
    }
    char err[200] = "";
    *ok = !off && create_obj(s, name, sizeof(name), token, err, sizeof(err)) == 0;
    if (off || !*ok)
        snprintf(why, cap, "rank %d: %s", s->first, off ? off : err);
    if (*ok) {
        char hex[2 * SHM_TOKEN_LEN + 1];
        tohex(token, SHM_TOKEN_LEN, hex);
        snprintf(val, sizeof(val), "%s %s %zu", name, hex, s->piece);
    } else {
        snprintf(val, sizeof(val), "off");
    }
    snprintf(key, sizeof(key), "%s/name", gpfx);
    if ((rc = store_set(st, key, val, strlen(val))))
        goto out;
    for (int q = 1; q < s->world; q++) {
        snprintf(key, sizeof(key), "%s/ok/%d", gpfx, q);
        if ((rc = store_wait_str(st, key, s->timeout_ms, val, sizeof(val))))
            goto out;
        if (*ok && val[0] != '1') {
            *ok = false;
            snprintf(why, cap, "%s", val[0] && val[1] ? val + 2 : "?");
        }
    }
out: /* every rank of the group has mapped it or given up: nothing needs the name any more */
    if (name[0])
        shm_unlink(name);
    return rc;
}

/* The group's other ranks: map the leader's object, say whether that worked. */
static int setup_member(struct coll_shm *s, struct store *st, const char *gpfx, const char *off)
{
    char key[128], val[256], name[96], tok[2 * SHM_TOKEN_LEN + 9], why[200] = "";
    int me = s->first + s->rank;
    size_t piece;
    int rc;

    snprintf(key, sizeof(key), "%s/name", gpfx);
    if ((rc = store_wait_str(st, key, s->timeout_ms, val, sizeof(val))))
        return rc;
    bool ok = false;
    if (off)
        snprintf(why, sizeof(why), "rank %d: %s", me, off);
    else if (strcmp(val, "off") == 0)
        snprintf(why, sizeof(why), "rank %d is not using it", s->first);
    else if (sscanf(val, "%95s %40s %zu", name, tok, &piece) != 3 || piece < 1024 ||
             piece > SHM_MAX_BYTES / sizeof(float))
        snprintf(why, sizeof(why), "rank %d: bad announcement from rank %d", me, s->first);
    else {
        s->piece = piece;
        s->size = map_size(s->world, piece);
        ok = open_obj(s, name, tok, why, sizeof(why)) == 0;
    }
    snprintf(val, sizeof(val), "%s %s", ok ? "1" : "0", why);
    snprintf(key, sizeof(key), "%s/ok/%d", gpfx, s->rank);
    return store_set(st, key, val, strlen(val));
}

/* Every group's leader hands in its group's verdict; global rank 0 collects them and publishes
 * the decision (all groups use shared memory, or none), which every rank waits for. */
static int decide(struct coll_shm *s, struct store *st, const char *pfx,
                  const struct coll_shm_group *g, bool ok, const char *why, bool want,
                  const char *fallback, bool *go)
{
    char key[128], val[320]; /* "1 " or "0 " and a why of up to 255 */
    int rc;

    if (s->rank == 0 && g->id > 0) {
        snprintf(val, sizeof(val), "%s %s", ok ? "1" : "0", why);
        snprintf(key, sizeof(key), "%s/verdict/%d", pfx, g->id);
        if ((rc = store_set(st, key, val, strlen(val))))
            return rc;
    }
    if (s->rank == 0 && g->id == 0) {
        char first_no[sizeof(val)] = "";
        if (!ok)
            snprintf(first_no, sizeof(first_no), "%s", why);
        for (int k = 1; k < g->count; k++) {
            snprintf(key, sizeof(key), "%s/verdict/%d", pfx, k);
            if ((rc = store_wait_str(st, key, s->timeout_ms, val, sizeof(val))))
                return rc;
            if (val[0] != '1' && !first_no[0])
                snprintf(first_no, sizeof(first_no), "%s", val[0] && val[1] ? val + 2 : "?");
        }
        ok = !first_no[0];
        snprintf(key, sizeof(key), "%s/go", pfx);
        if ((rc = store_set(st, key, ok ? "1" : "0", 1)))
            return rc;
        if (!ok && want && fallback)
            dist_log("tcp collectives: not using shared memory for the all-reduce (%s); %s",
                     first_no, fallback);
        *go = ok;
        return 0;
    }
    snprintf(key, sizeof(key), "%s/go", pfx);
    if ((rc = store_wait_str(st, key, s->timeout_ms, val, sizeof(val))))
        return rc;
    *go = val[0] == '1';
    return 0;
}

int coll_shm_open(struct store *st, const char *pfx, const struct coll_shm_group *g,
                  const char *off, const char *fallback, int timeout_ms,
                  const struct coll_shm_ring *ring, struct coll_shm **out)
{
    struct coll_shm *s = xcalloc(1, sizeof(*s));
    char gpfx[96], why[256] = "";
    bool go = false, ok = false;
    int rc;

    *out = NULL;
    s->rank = g->rank;
    s->world = g->size;
    s->first = g->first;
    s->total = g->size * g->count;
    s->timeout_ms = timeout_ms;
    s->spin = (int)env_size("GANTRY_COLL_SHM_SPIN", default_spin(s->world));
    s->spin_now = s->spin;
    s->ring = *ring;
    s->src = xcalloc((size_t)s->world, sizeof(*s->src));
    s->piece = piece_floats(s->world);
    s->size = map_size(s->world, s->piece);
    snprintf(gpfx, sizeof(gpfx), "%s/g%d", pfx, g->id);
    if (s->rank == 0)
        rc = setup_leader(s, st, pfx, g->id, gpfx, off, &ok, why, sizeof(why));
    else
        rc = setup_member(s, st, gpfx, off);
    if (!rc)
        rc = decide(s, st, pfx, g, ok, why, !off, fallback, &go);
    if (!rc && go && s->base) {
        *out = s;
        s = NULL;
    }
    coll_shm_free(s);
    return rc;
}

void coll_shm_set_cross(struct coll_shm *s, coll_shm_cross_fn fn, void *arg)
{
    s->cross = fn;
    s->cross_arg = arg;
    /* a rank waits for a group peer that is itself waiting on the other groups: let the ring
     * between groups, with its own timeout, be the one that names a dead peer */
    s->timeout_ms += s->timeout_ms / 4;
}

void coll_shm_free(struct coll_shm *s)
{
    if (!s)
        return;
    if (s->base)
        munmap(s->base, s->size);
    free(s->src);
    free(s);
}
