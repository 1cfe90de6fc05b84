// The gantry CUDA emulator's NCCL (kernels/emu/include/nccl.h): collectives between rank
// processes on one host through one POSIX shared-memory object per communicator (processes in
// several pods of one node can share it through a common /dev/shm; a rank's device is then told
// apart by its hostname's hash, as NCCL tells GPUs apart by host hash and bus id).
//
// The object: a header page, one 128-byte line per rank (its piece counter, which is also the
// futex word its peers sleep on, its state, pid, device and host, and the descriptions of what
// its two slots hold), then two slots per rank. A collective goes in pieces of at most one slot. For
// piece p (counted over the communicator's lifetime) a rank writes its part into its slot p & 1,
// publishes p + 1 in its counter, waits until every rank's counter reaches p + 1, checks that
// every rank's slot describes the same collective and piece, and reads what it needs: the
// reduction over the slots of ranks 0..W-1 in that order, the root's slot, or every slot. Two
// slots are enough: a rank writes slot p & 1 again for piece p + 2 only after every rank has
// published p + 2, which each does after it has read piece p.
//
// Failures: each rank holds an OFD lock on byte `rank` of the object for as long as it is
// attached; the kernel drops it when the process dies (SIGKILL included), so a waiting rank
// that finds a peer's lock gone knows that peer is dead, even while it is still an unreaped
// zombie (kill(pid, 0) would say alive) and whatever its pid is reused for. A rank that aborts or
// fails marks its line, and peers waiting for it fail with ncclRemoteError.
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>

namespace
{

constexpr char ID_TAG[16] = "gantry-nccl-emu";
constexpr uint64_t SHM_MAGIC = 0x67616e7472794e43ull; // "gantryNC"
constexpr size_t LINE = 128, HDR = 4096;
constexpr int SLICE_MS = 20; // futex sleep between checks of a peer
constexpr size_t SLOT_DEFAULT = 1 << 20;
constexpr int INIT_TIMEOUT_DEFAULT_MS = 300000;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words must be plain words");

struct id_fmt {
    char tag[16];
    uint32_t slot_bytes;
    uint32_t pad;
    char name[96];
};
static_assert(sizeof(id_fmt) <= sizeof(ncclUniqueId), "the id must fit ncclUniqueId");

enum kind { K_ALLREDUCE = 1, K_BROADCAST, K_ALLGATHER };
static const char *kind_name(int k)
{
    return k == K_ALLREDUCE ? "all-reduce" : k == K_BROADCAST ? "broadcast" : "all-gather";
}

// What a rank's slot holds; every rank's must match for the same piece.
struct desc {
    uint64_t coll;   // collective number on this communicator
    uint64_t count;  // of the collective
    uint64_t offset; // of the piece, in elements
    int32_t kind, dtype, op, root;
    bool operator==(const desc &o) const
    {
        return coll == o.coll && count == o.count && offset == o.offset && kind == o.kind &&
               dtype == o.dtype && op == o.op && root == o.root;
    }
};

enum line_state : uint32_t { FREE = 0, JOINED, LEFT, ABORTED, FAILED };

struct alignas(LINE) line {
    std::atomic<uint32_t> seq;   // pieces this rank has published
    std::atomic<uint32_t> state; // line_state
    int32_t pid, device;
    uint64_t host; // hash of the hostname: device d of two pods (hosts) is two GPUs
    desc d[2];     // what slot 0 and 1 hold
};
static_assert(sizeof(line) == LINE, "one line per rank");

// FNV-1a of the hostname (GANTRY_EMU_HOST instead, when set: tests play several hosts), as
// NCCL tells GPUs apart by host hash and bus id.
static uint64_t host_hash()
{
    char name[256] = "";
    const char *e = getenv("GANTRY_EMU_HOST");
    uint64_t h = 0xcbf29ce484222325ull;
    if (e && *e)
        snprintf(name, sizeof(name), "%s", e);
    else
        gethostname(name, sizeof(name) - 1);
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

struct hdr {
    std::atomic<uint64_t> magic; // set last by the creator
    uint32_t nranks;
    uint32_t slot_bytes;
    std::atomic<uint32_t> joined; // ranks attached; futex word during init
    std::atomic<uint32_t> unlinked;
};
static_assert(sizeof(hdr) <= HDR, "header page");

struct op {
    int kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t red;
    int root;
    cudaStream_t stream;
    unsigned long long token; // its place in the stream (emu_stream_external_enqueue)
};

} // namespace

struct ncclComm {
    int rank, nranks, device;
    int fd = -1;
    unsigned char *base = nullptr;
    size_t size = 0;
    hdr *h = nullptr;
    line *lines = nullptr;
    unsigned char *slots = nullptr;
    size_t slot_bytes = 0;
    char name[96];
    bool attached = false; // holds a line (and its lock)
    bool created = false;  // made the object
    uint32_t pieces = 0;
    uint64_t colls = 0;

    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;      // work queued, or stop
    std::condition_variable done_cv; // a collective finished or failed
    std::deque<op> q;                // enqueued, not finished (each holds its stream busy)
    bool stop = false;               // under mu
    std::atomic<bool> stopping{false};
    std::atomic<int> async{ncclSuccess}; // ncclInProgress while a non-blocking init runs

    // Non-blocking (config.blocking = 0): the last call returned ncclInProgress and
    // ncclCommGetAsyncError has not said otherwise yet.
    bool nonblocking = false;
    std::atomic<bool> launching{false};
    std::atomic<bool> finalizing{false};
};

namespace
{

// ---- errors ----------------------------------------------------------------------------------
std::mutex err_mu;
char last_err[1024];

__attribute__((format(printf, 3, 4))) ncclResult_t fail(const ncclComm *c, ncclResult_t r,
                                                        const char *fmt, ...)
{
    char msg[sizeof(last_err)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> g(err_mu);
        memcpy(last_err, msg, sizeof(msg));
    }
    if (c)
        fprintf(stderr, "gantry NCCL emulator: rank %d of %d (pid %d): %s\n", c->rank, c->nranks,
                (int)getpid(), msg);
    else
        fprintf(stderr, "gantry NCCL emulator (pid %d): %s\n", (int)getpid(), msg);
    return r;
}

// ---- time, futexes, locks --------------------------------------------------------------------
int64_t now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
}

// Shared (not FUTEX_PRIVATE): the words live in a mapping of several processes.
void futex_wait(std::atomic<uint32_t> *w, uint32_t v, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t> *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

int lock_rank(int fd, int rank)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = rank;
    fl.l_len = 1;
    return fcntl(fd, F_OFD_SETLK, &fl);
}

// True while the process attached as `rank` lives (its lock is held by another open file).
bool rank_locked(const ncclComm *c, int rank)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = rank;
    fl.l_len = 1;
    if (fcntl(c->fd, F_OFD_GETLK, &fl) != 0)
        return true; // cannot tell: keep waiting, the caller's timeout decides
    return fl.l_type != F_UNLCK;
}

void wake_all(ncclComm *c)
{
    for (int r = 0; r < c->nranks; r++)
        futex_wake(&c->lines[r].seq);
    futex_wake(&c->h->joined);
}

// Why peer r will never get there, or ncclSuccess while it may.
ncclResult_t peer_gone(ncclComm *c, int r, const char *doing)
{
    uint32_t st = c->lines[r].state.load(std::memory_order_acquire);
    int pid = c->lines[r].pid;
    if (st == ABORTED || st == FAILED)
        return fail(c, ncclRemoteError,
                    "%s: rank %d (pid %d) %s its communicator: its collective failed or it "
                    "called ncclCommAbort",
                    doing, r, pid, st == ABORTED ? "aborted" : "failed");
    if (st == LEFT)
        return fail(c, ncclRemoteError,
                    "%s: rank %d (pid %d) destroyed its communicator while this rank waits for "
                    "it: the ranks did not call the same collectives",
                    doing, r, pid);
    if (st == JOINED && !rank_locked(c, r))
        return fail(c, ncclRemoteError,
                    "%s: rank %d (pid %d) died (its lock on the communicator's shared memory is "
                    "gone)",
                    doing, r, pid);
    return ncclSuccess;
}

// Waits until rank r has published `target` pieces. ncclInternalError: this communicator is
// being aborted (nothing is reported).
ncclResult_t wait_seq(ncclComm *c, int r, uint32_t target, const char *doing)
{
    std::atomic<uint32_t> *w = &c->lines[r].seq;
    for (int i = 0; i < 100; i++) {
        if (reached(w->load(std::memory_order_acquire), target))
            return ncclSuccess;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    for (;;) {
        uint32_t v = w->load(std::memory_order_acquire);
        if (reached(v, target))
            return ncclSuccess;
        if (c->stopping.load())
            return ncclInternalError;
        futex_wait(w, v, SLICE_MS);
        if (reached(w->load(std::memory_order_acquire), target))
            return ncclSuccess;
        if (c->stopping.load())
            return ncclInternalError;
        ncclResult_t g = peer_gone(c, r, doing);
        if (g != ncclSuccess)
            return g;
    }
}

// ---- element types ---------------------------------------------------------------------------
size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

struct bf16 {
    uint16_t bits;
};
float to_float(bf16 v)
{
    uint32_t u = (uint32_t)v.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
bf16 to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return bf16{(uint16_t)((u >> 16) | 0x40)}; // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1);                // round to nearest even
    return bf16{(uint16_t)(u >> 16)};
}

// Integers wrap as on a GPU (unsigned arithmetic: no undefined overflow).
template <typename T> struct arith {
    typedef typename std::make_unsigned<T>::type U;
    static T add(T a, T b)
    {
        return (T)(U)((U)a + (U)b);
    }
    static T mul(T a, T b)
    {
        return (T)(U)((U)a * (U)b);
    }
};
template <> struct arith<float> {
    static float add(float a, float b)
    {
        return a + b;
    }
    static float mul(float a, float b)
    {
        return a * b;
    }
};
template <> struct arith<double> {
    static double add(double a, double b)
    {
        return a + b;
    }
    static double mul(double a, double b)
    {
        return a * b;
    }
};

template <typename T> T combine(ncclRedOp_t op, T a, T b)
{
    switch (op) {
    case ncclProd:
        return arith<T>::mul(a, b);
    case ncclMax:
        return a < b ? b : a;
    case ncclMin:
        return b < a ? b : a;
    default:
        return arith<T>::add(a, b); // sum, avg
    }
}

// out[i] = src[0][i] op src[1][i] op ... in rank order. ncclAvg as NCCL does it: floating
// point types multiply every input by 1/W before summing (PreMulSum), integers divide the sum.
template <typename T>
void reduce(T *out, const unsigned char *const *src, int W, size_t n, ncclRedOp_t op)
{
    const T *s0 = (const T *)src[0];
    bool premul = op == ncclAvg && std::is_floating_point<T>::value;
    T scale = (T)(1.0 / W);
    for (size_t i = 0; i < n; i++)
        out[i] = premul ? (T)(s0[i] * scale) : s0[i];
    for (int r = 1; r < W; r++) {
        const T *s = (const T *)src[r];
        for (size_t i = 0; i < n; i++)
            out[i] = combine<T>(op, out[i], premul ? (T)(s[i] * scale) : s[i]);
    }
    if (op == ncclAvg && !std::is_floating_point<T>::value) {
        typedef typename std::conditional<std::is_signed<T>::value, int64_t, uint64_t>::type W64;
        for (size_t i = 0; i < n; i++)
            out[i] = (T)((W64)out[i] / (W64)W);
    }
}

// bf16: each step in float, rounded back to bf16 (the scale is a bf16 too, as in NCCL).
void reduce_bf16(bf16 *out, const unsigned char *const *src, int W, size_t n, ncclRedOp_t op)
{
    float scale = to_float(to_bf16((float)(1.0 / W)));
    auto in = [&](int r, size_t i) {
        float v = to_float(((const bf16 *)src[r])[i]);
        return op == ncclAvg ? to_float(to_bf16(v * scale)) : v;
    };
    for (size_t i = 0; i < n; i++)
        out[i] = to_bf16(in(0, i));
    for (int r = 1; r < W; r++)
        for (size_t i = 0; i < n; i++)
            out[i] = to_bf16(combine<float>(op, to_float(out[i]), in(r, i)));
}

bool reducible(ncclDataType_t t)
{
    return t != ncclFloat16 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2 && type_size(t) != 0;
}

void reduce_any(void *out, const unsigned char *const *src, int W, size_t n, ncclDataType_t t,
                ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8:
        reduce((int8_t *)out, src, W, n, op);
        break;
    case ncclUint8:
        reduce((uint8_t *)out, src, W, n, op);
        break;
    case ncclInt32:
        reduce((int32_t *)out, src, W, n, op);
        break;
    case ncclUint32:
        reduce((uint32_t *)out, src, W, n, op);
        break;
    case ncclInt64:
        reduce((int64_t *)out, src, W, n, op);
        break;
    case ncclUint64:
        reduce((uint64_t *)out, src, W, n, op);
        break;
    case ncclFloat32:
        reduce((float *)out, src, W, n, op);
        break;
    case ncclFloat64:
        reduce((double *)out, src, W, n, op);
        break;
    case ncclBfloat16:
        reduce_bf16((bf16 *)out, src, W, n, op);
        break;
    default:
        break; // refused at enqueue
    }
}

// ---- the progress thread ---------------------------------------------------------------------
unsigned char *slot(ncclComm *c, int r, uint32_t piece)
{
    return c->slots + ((size_t)r * 2 + (piece & 1)) * c->slot_bytes;
}

// One piece: this rank's part is already in its slot, described by d. Publishes it, waits for
// every rank's, checks they describe the same piece.
ncclResult_t exchange(ncclComm *c, const desc &d)
{
    uint32_t p = c->pieces;
    line *me = &c->lines[c->rank];
    me->d[p & 1] = d;
    me->seq.store(p + 1, std::memory_order_release);
    futex_wake(&me->seq);
    char doing[96];
    snprintf(doing, sizeof(doing), "%s #%llu", kind_name(d.kind), (unsigned long long)d.coll);
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->rank)
            continue;
        ncclResult_t e = wait_seq(c, r, p + 1, doing);
        if (e != ncclSuccess)
            return e;
        const desc &o = c->lines[r].d[p & 1];
        if (!(o == d))
            return fail(c, ncclInvalidUsage,
                        "%s: rank %d is in %s #%llu (count %llu, type %d, op %d, root %d, piece at "
                        "%llu) while this rank is in %s #%llu (count %llu, type %d, op %d, root "
                        "%d, piece at %llu): every rank must call the same collectives with the "
                        "same arguments, in the same order",
                        doing, r, kind_name(o.kind), (unsigned long long)o.coll,
                        (unsigned long long)o.count, o.dtype, o.op, o.root,
                        (unsigned long long)o.offset, kind_name(d.kind), (unsigned long long)d.coll,
                        (unsigned long long)d.count, d.dtype, d.op, d.root,
                        (unsigned long long)d.offset);
    }
    return ncclSuccess;
}

ncclResult_t run(ncclComm *c, const op &o)
{
    size_t es = type_size(o.dt), W = (size_t)c->nranks;
    desc d = {c->colls++, o.count, 0, o.kind, (int32_t)o.dt, (int32_t)o.red, o.root};
    size_t per = c->slot_bytes / es; // elements per piece
    const unsigned char *src[256];
    ncclResult_t e;

    for (size_t off = 0; off < o.count; off += per) {
        size_t n = o.count - off < per ? o.count - off : per, bytes = n * es;
        d.offset = off;
        unsigned char *mine = slot(c, c->rank, c->pieces);
        if (o.kind != K_BROADCAST || c->rank == o.root)
            memcpy(mine, (const unsigned char *)o.send + off * es, bytes);
        if ((e = exchange(c, d)) != ncclSuccess)
            return e;
        if (o.kind == K_ALLREDUCE) {
            for (size_t r = 0; r < W; r++)
                src[r] = slot(c, (int)r, c->pieces);
            reduce_any((unsigned char *)o.recv + off * es, src, (int)W, n, o.dt, o.red);
        } else if (o.kind == K_BROADCAST) {
            unsigned char *dst = (unsigned char *)o.recv + off * es;
            if (c->rank != o.root || dst != (const unsigned char *)o.send + off * es)
                memcpy(dst, slot(c, o.root, c->pieces), bytes);
        } else {
            for (size_t r = 0; r < W; r++)
                memcpy((unsigned char *)o.recv + (r * o.count + off) * es,
                       slot(c, (int)r, c->pieces), bytes);
        }
        c->pieces++;
    }
    return ncclSuccess;
}

int stopping(void *c)
{
    return ((ncclComm *)c)->stopping.load();
}

void progress(ncclComm *c)
{
    std::unique_lock<std::mutex> g(c->mu);
    for (;;) {
        c->cv.wait(g, [&] { return c->stop || (!c->q.empty() && c->async.load() == ncclSuccess); });
        if (c->stop)
            break;
        op o = c->q.front();
        g.unlock();
        // Not before the stream's earlier work (and the events it waits for) has run.
        if (!emu_stream_external_begin(o.stream, o.token, stopping, c)) {
            g.lock();
            break; // stopping
        }
        ncclResult_t r = run(c, o);
        g.lock();
        if (c->stop)
            break;
        if (r != ncclSuccess) {
            // As on a GPU: the collective never completes, its stream stays busy until
            // ncclCommAbort. The peers learn it from this rank's line.
            c->async.store(r);
            c->lines[c->rank].state.store(FAILED, std::memory_order_release);
            wake_all(c);
            c->done_cv.notify_all();
            continue;
        }
        c->q.pop_front();
        emu_stream_external_end(o.stream, o.token);
        c->done_cv.notify_all();
    }
}

// ---- setup and teardown ----------------------------------------------------------------------
size_t layout(int nranks, size_t slot_bytes, size_t *slots_off)
{
    size_t off = HDR + (size_t)nranks * LINE;
    off = (off + 4095) & ~(size_t)4095;
    *slots_off = off;
    return off + (size_t)nranks * 2 * slot_bytes;
}

int init_timeout_ms()
{
    const char *e = getenv("GANTRY_EMU_NCCL_INIT_TIMEOUT_MS");
    return e && *e && atoi(e) > 0 ? atoi(e) : INIT_TIMEOUT_DEFAULT_MS;
}

// Frees everything; state: what peers see in this rank's line (when it holds one).
void teardown(ncclComm *c, line_state state)
{
    {
        std::lock_guard<std::mutex> g(c->mu);
        c->stop = true;
        c->stopping.store(true);
    }
    c->cv.notify_all();
    // Joined first: a non-blocking init may still be attaching on it (it sees `stopping` within
    // SLICE_MS, as does a collective waiting for a peer).
    if (c->thread.joinable())
        c->thread.join();
    if (c->attached) {
        c->lines[c->rank].state.store(state, std::memory_order_release);
        wake_all(c);
    }
    for (const op &o : c->q) // never to complete: their streams are free again
        emu_stream_external_end(o.stream, o.token);
    c->q.clear();
    // An init that did not complete: the last rank to attach never came, nobody else unlinks.
    // (A rank that was refused before it attached leaves the object to the others.)
    if (c->h && (c->attached || c->created) && !c->h->unlinked.exchange(1))
        shm_unlink(c->name);
    if (c->base)
        munmap(c->base, c->size);
    if (c->fd >= 0)
        close(c->fd); // drops the lock: peers see this rank gone
    delete c;
}

// A communicator not attached yet, or ncclInvalidArgument for an id not from ncclGetUniqueId.
ncclResult_t new_comm(const ncclUniqueId &uid, int nranks, int rank, int device, ncclComm **out)
{
    id_fmt id;
    memcpy(&id, &uid, sizeof(id));
    if (memcmp(id.tag, ID_TAG, sizeof(ID_TAG)) != 0 || id.slot_bytes == 0 || id.slot_bytes % 64 ||
        !memchr(id.name, 0, sizeof(id.name)))
        return fail(nullptr, ncclInvalidArgument,
                    "ncclCommInitRank: the unique id was not made by ncclGetUniqueId (all ranks "
                    "must get rank 0's id)");
    ncclComm *c = new ncclComm;
    c->rank = rank, c->nranks = nranks, c->device = device;
    c->slot_bytes = id.slot_bytes;
    snprintf(c->name, sizeof(c->name), "%s", id.name);
    *out = c;
    return ncclSuccess;
}

// Opens (creating when first) the object, claims line `rank`. Does not wait for the others.
// On failure the caller tears c down. ncclInternalError: stopped by ncclCommAbort (no report).
ncclResult_t attach(ncclComm *c, int64_t deadline)
{
    int nranks = c->nranks, rank = c->rank, device = c->device;
    size_t slots_off, size = layout(nranks, c->slot_bytes, &slots_off);
    ncclResult_t r = ncclSuccess;

    for (;;) {
        int fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0) { // the first rank here: size it, then publish the header
            c->fd = fd;
            c->created = true;
            int e = posix_fallocate(fd, 0, (off_t)size);
            if (e != 0) {
                r = fail(c, ncclSystemError,
                         "cannot reserve %zu bytes in /dev/shm for %d ranks: %s. HINT: a bigger "
                         "/dev/shm, or a smaller GANTRY_EMU_NCCL_SLOT",
                         size, nranks, strerror(e));
                goto out;
            }
            void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                r = fail(c, ncclSystemError, "mmap of %zu bytes: %s", size, strerror(errno));
                goto out;
            }
            c->base = (unsigned char *)m, c->size = size;
            c->h = (hdr *)m;
            c->h->nranks = (uint32_t)nranks;
            c->h->slot_bytes = (uint32_t)c->slot_bytes;
            c->h->magic.store(SHM_MAGIC, std::memory_order_release);
            break;
        }
        if (errno != EEXIST) {
            r = fail(c, ncclSystemError, "shm_open %s: %s", c->name, strerror(errno));
            goto out;
        }
        fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno != ENOENT) {
                r = fail(c, ncclSystemError, "shm_open %s: %s", c->name, strerror(errno));
                goto out;
            }
            if (c->stopping.load()) {
                r = ncclInternalError;
                goto out;
            }
            if (now_ms() >= deadline) {
                r = fail(c, ncclSystemError, "shm_open %s: it keeps vanishing", c->name);
                goto out;
            }
            continue; // unlinked in between (an init that gave up): start afresh
        }
        c->fd = fd;
        // Wait for the creator's header.
        struct stat st;
        memset(&st, 0, sizeof(st));
        while ((fstat(fd, &st) != 0 || (size_t)st.st_size < HDR) && now_ms() < deadline &&
               !c->stopping.load())
            sleep_ms(1);
        if (c->stopping.load()) {
            r = ncclInternalError;
            goto out;
        }
        if ((size_t)st.st_size < HDR) {
            r = fail(c, ncclSystemError,
                     "the rank that created %s never sized it: it died during ncclCommInitRank",
                     c->name);
            goto out;
        }
        void *m = mmap(nullptr, HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            r = fail(c, ncclSystemError, "mmap: %s", strerror(errno));
            goto out;
        }
        c->base = (unsigned char *)m, c->size = HDR;
        c->h = (hdr *)m;
        while (c->h->magic.load(std::memory_order_acquire) != SHM_MAGIC && now_ms() < deadline &&
               !c->stopping.load())
            sleep_ms(1);
        if (c->stopping.load()) {
            r = ncclInternalError;
            goto out;
        }
        if (c->h->magic.load(std::memory_order_acquire) != SHM_MAGIC) {
            r = fail(c, ncclSystemError, "the rank that created %s died during ncclCommInitRank",
                     c->name);
            goto out;
        }
        if (c->h->nranks != (uint32_t)nranks) {
            r = fail(c, ncclInvalidUsage,
                     "ncclCommInitRank: this rank says nranks = %d, the first rank said %u", nranks,
                     c->h->nranks);
            goto out;
        }
        munmap(m, HDR);
        c->base = nullptr, c->h = nullptr;
        m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            r = fail(c, ncclSystemError, "mmap of %zu bytes: %s", size, strerror(errno));
            goto out;
        }
        c->base = (unsigned char *)m, c->size = size;
        c->h = (hdr *)m;
        break;
    }
    c->lines = (line *)(c->base + HDR);
    c->slots = c->base + slots_off;
    {
        line *me = &c->lines[rank];
        if (lock_rank(c->fd, rank) != 0) {
            r = fail(c, ncclInvalidUsage,
                     "ncclCommInitRank: rank %d joined twice (lock: %s): every rank must pass its "
                     "own rank",
                     rank, strerror(errno));
            goto out;
        }
        me->pid = (int32_t)getpid();
        me->device = device;
        me->host = host_hash();
        uint32_t expect = FREE;
        if (!me->state.compare_exchange_strong(expect, JOINED)) {
            r = fail(c, ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
            goto out;
        }
        c->attached = true;
        if (c->h->joined.fetch_add(1) + 1 == (uint32_t)nranks && !c->h->unlinked.exchange(1))
            shm_unlink(c->name); // every rank has it mapped: nothing stays in /dev/shm
        futex_wake(&c->h->joined);
    }
out:
    return r;
}

// Waits until every rank attached; checks their devices.
ncclResult_t wait_joined(ncclComm *c, int64_t deadline, int timeout_ms)
{
    for (;;) {
        uint32_t j = c->h->joined.load(std::memory_order_acquire);
        if (j == (uint32_t)c->nranks)
            break;
        for (int r = 0; r < c->nranks; r++) {
            if (r == c->rank || c->lines[r].state.load(std::memory_order_acquire) == FREE)
                continue;
            ncclResult_t g = peer_gone(c, r, "ncclCommInitRank");
            if (g != ncclSuccess)
                return g == ncclRemoteError ? ncclSystemError : g;
        }
        if (c->stopping.load())
            return ncclInternalError;
        if (now_ms() >= deadline)
            return fail(c, ncclSystemError,
                        "ncclCommInitRank: only %u of %d ranks joined within %d ms "
                        "(GANTRY_EMU_NCCL_INIT_TIMEOUT_MS): did every rank get the same id?",
                        j, c->nranks, timeout_ms);
        futex_wait(&c->h->joined, j, SLICE_MS);
    }
    for (int r = 0; r < c->nranks; r++)
        if (r != c->rank && c->lines[r].device == c->device &&
            c->lines[r].host == c->lines[c->rank].host)
            return fail(c, ncclInvalidUsage,
                        "Duplicate GPU detected: rank %d and rank %d both on CUDA device %d of one "
                        "host (NCCL refuses this on GPUs too). HINT: GANTRY_EMU_DEVICES=<ranks "
                        "per host> and cudaSetDevice(local rank)",
                        c->rank, r, c->device);
    return ncclSuccess;
}

void start(ncclComm *c)
{
    c->thread = std::thread(progress, c);
}

// A non-blocking init, on the thread that then runs the collectives. A failure stays in
// c->async for ncclCommGetAsyncError; the caller frees c with ncclCommAbort or ncclCommDestroy.
void init_then_progress(ncclComm *c, int64_t deadline, int timeout_ms)
{
    ncclResult_t r = attach(c, deadline);
    if (r == ncclSuccess)
        r = wait_joined(c, deadline, timeout_ms);
    if (r != ncclSuccess) {
        if (c->attached) { // peers waiting in their init learn it now
            c->lines[c->rank].state.store(FAILED, std::memory_order_release);
            wake_all(c);
        }
        c->async.store(r);
        return;
    }
    c->async.store(ncclSuccess);
    progress(c);
}

ncclResult_t init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId &id, int rank,
                       bool blocking, const char *fn)
{
    if (!comm)
        return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
    *comm = nullptr;
    if (nranks < 1 || nranks > 256 || rank < 0 || rank >= nranks)
        return fail(nullptr, ncclInvalidArgument,
                    "%s: rank %d of nranks %d (the emulator takes 1..256 ranks)", fn, rank,
                    nranks);
    int dev = 0;
    cudaGetDevice(&dev);
    int timeout = init_timeout_ms();
    int64_t deadline = now_ms() + timeout;
    ncclComm *c = nullptr;
    ncclResult_t r = new_comm(id, nranks, rank, dev, &c);
    if (r != ncclSuccess)
        return r;
    if (!blocking) {
        c->nonblocking = true;
        c->async.store(ncclInProgress);
        c->thread = std::thread(init_then_progress, c, deadline, timeout);
        *comm = c;
        return ncclInProgress;
    }
    if ((r = attach(c, deadline)) != ncclSuccess ||
        (r = wait_joined(c, deadline, timeout)) != ncclSuccess) {
        teardown(c, ABORTED);
        return r;
    }
    start(c);
    *comm = c;
    return ncclSuccess;
}

// The next call on a non-blocking communicator: refused while the last one is in progress.
ncclResult_t check_ready(ncclComm *c, const char *fn)
{
    if (c->launching.load() || c->async.load() == ncclInProgress)
        return fail(c, ncclInvalidUsage,
                    "%s on a non-blocking communicator whose %s is still in progress: poll "
                    "ncclCommGetAsyncError until it is not ncclInProgress first (NCCL's rule)",
                    fn, c->launching.load() ? "last call" : "init");
    return ncclSuccess;
}

// ---- enqueue ---------------------------------------------------------------------------------
ncclResult_t enqueue(ncclComm *c, const op &o, const char *fn)
{
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "%s: comm is NULL", fn);
    size_t es = type_size(o.dt);
    if (es == 0)
        return fail(c, ncclInvalidArgument, "%s: unknown datatype %d", fn, (int)o.dt);
    if (o.kind == K_ALLREDUCE && ((unsigned)o.red >= ncclNumOps || !reducible(o.dt)))
        return fail(c, ncclInvalidArgument,
                    "%s: op %d on datatype %d is not emulated (sum, prod, max, min, avg on "
                    "integers, float, double, bf16)",
                    fn, (int)o.red, (int)o.dt);
    if (o.kind == K_BROADCAST && (o.root < 0 || o.root >= c->nranks))
        return fail(c, ncclInvalidArgument, "%s: root %d is outside 0..%d", fn, o.root,
                    c->nranks - 1);
    if (o.count > SIZE_MAX / es / (size_t)c->nranks)
        return fail(c, ncclInvalidArgument, "%s: count %zu overflows", fn, o.count);
    if (o.count) {
        size_t bytes = o.count * es;
        size_t rbytes = o.kind == K_ALLGATHER ? bytes * (size_t)c->nranks : bytes;
        bool needs_send = o.kind != K_BROADCAST || c->rank == o.root;
        if ((needs_send && !emu_is_device_range(o.send, bytes)) ||
            !emu_is_device_range(o.recv, rbytes))
            return fail(c, ncclInvalidArgument,
                        "%s: %s (%p, %zu bytes) is not inside one device allocation: NCCL "
                        "takes cudaMalloc'd buffers",
                        fn,
                        needs_send && !emu_is_device_range(o.send, bytes) ? "sendbuff" : "recvbuff",
                        needs_send && !emu_is_device_range(o.send, bytes) ? o.send : o.recv,
                        needs_send && !emu_is_device_range(o.send, bytes) ? bytes : rbytes);
    }
    if (c->nonblocking && check_ready(c, fn) != ncclSuccess)
        return ncclInvalidUsage;
    int a = c->async.load();
    if (a != ncclSuccess)
        return fail(c, (ncclResult_t)a, "%s: the communicator failed before: %s", fn,
                    ncclGetErrorString((ncclResult_t)a));
    {
        std::lock_guard<std::mutex> g(c->mu);
        c->q.push_back(o);
        c->q.back().token = emu_stream_external_enqueue(o.stream);
    }
    c->cv.notify_one();
    if (c->nonblocking) { // enqueued, but the caller must ask ncclCommGetAsyncError
        c->launching.store(true);
        return ncclInProgress;
    }
    return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid)
{
    if (!uid)
        return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    id_fmt id;
    memset(&id, 0, sizeof(id));
    memcpy(id.tag, ID_TAG, sizeof(ID_TAG));
    size_t slot = SLOT_DEFAULT;
    const char *e = getenv("GANTRY_EMU_NCCL_SLOT");
    if (e && *e && strtoull(e, nullptr, 0) >= 64 && strtoull(e, nullptr, 0) <= (1u << 30))
        slot = (size_t)strtoull(e, nullptr, 0) & ~(size_t)63;
    id.slot_bytes = (uint32_t)slot;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return fail(nullptr, ncclSystemError, "getrandom: %s", strerror(errno));
    snprintf(id.name, sizeof(id.name), "/gantry-nccl-%d-%016llx", (int)getpid(),
             (unsigned long long)rnd);
    memset(uid, 0, sizeof(*uid));
    memcpy(uid, &id, sizeof(id));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return init_rank(comm, nranks, commId, rank, true, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    bool blocking = true;
    if (config) {
        if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + 4)
            return fail(nullptr, ncclInvalidArgument,
                        "ncclCommInitRankConfig: config was not set from NCCL_CONFIG_INITIALIZER");
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 &&
            config->blocking != 1)
            return fail(nullptr, ncclInvalidArgument,
                        "ncclCommInitRankConfig: config.blocking is %d (0 or 1)", config->blocking);
        blocking = config->blocking != 0;
    }
    return init_rank(comm, nranks, commId, rank, blocking, "ncclCommInitRankConfig");
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    if (!comm || ndev < 1 || ndev > 256)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comm NULL or ndev %d", ndev);
    int count = 0;
    cudaGetDeviceCount(&count);
    for (int i = 0; i < ndev; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= count)
            return fail(nullptr, ncclInvalidArgument,
                        "ncclCommInitAll: device %d of %d (GANTRY_EMU_DEVICES emulates more)", d,
                        count);
    }
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return r;
    int timeout = init_timeout_ms();
    int64_t deadline = now_ms() + timeout;
    int i;
    for (i = 0; i < ndev; i++)
        comm[i] = nullptr;
    for (i = 0; i < ndev && r == ncclSuccess; i++) {
        if ((r = new_comm(id, ndev, i, devlist ? devlist[i] : i, &comm[i])) != ncclSuccess)
            break;
        if ((r = attach(comm[i], deadline)) != ncclSuccess) {
            teardown(comm[i], ABORTED);
            comm[i] = nullptr;
        }
    }
    for (i = 0; i < ndev && r == ncclSuccess; i++)
        r = wait_joined(comm[i], deadline, timeout);
    for (i = 0; i < ndev; i++) {
        if (r != ncclSuccess && comm[i]) {
            teardown(comm[i], ABORTED);
            comm[i] = nullptr;
        } else if (comm[i]) {
            start(comm[i]);
        }
    }
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    {
        std::unique_lock<std::mutex> g(c->mu);
        c->done_cv.wait(g, [&] { return c->q.empty() || c->async.load() != ncclSuccess; });
    }
    teardown(c, c->async.load() == ncclSuccess ? LEFT : ABORTED);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    if (!c)
        return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    if (c->nonblocking) {
        if (check_ready(c, "ncclCommFinalize") != ncclSuccess)
            return ncclInvalidUsage;
        c->finalizing.store(true);
        return ncclInProgress;
    }
    std::unique_lock<std::mutex> g(c->mu);
    c->done_cv.wait(g, [&] { return c->q.empty() || c->async.load() != ncclSuccess; });
    return (ncclResult_t)c->async.load();
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (c)
        teardown(c, ABORTED);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    static thread_local char copy[sizeof(last_err)];
    std::lock_guard<std::mutex> g(err_mu);
    memcpy(copy, last_err, sizeof(copy));
    return copy;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *asyncError)
{
    if (!c || !asyncError)
        return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    int a = c->async.load();
    if (a == ncclSuccess && c->finalizing.load()) {
        std::lock_guard<std::mutex> g(c->mu);
        if (!c->q.empty())
            a = ncclInProgress;
        else
            c->finalizing.store(false);
    }
    // The last call's enqueue: done now, after one ncclInProgress (so a caller must poll).
    if (a == ncclSuccess && c->launching.exchange(false))
        a = ncclInProgress;
    *asyncError = (ncclResult_t)a;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
    if (!c || !count)
        return fail(nullptr, ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device)
{
    if (!c || !device)
        return fail(nullptr, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
    *device = c->device;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
    if (!c || !rank)
        return fail(nullptr, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    return enqueue(comm, {K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, stream, 0},
                   "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return enqueue(comm,
                   {K_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, stream, 0},
                   "ncclBroadcast");
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return enqueue(comm,
                   {K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream, 0},
                   "ncclAllGather");
}

} // extern "C"
