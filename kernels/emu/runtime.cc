// The gantry CUDA emulator's runtime: kernel launches as fibers on the CPU, block and warp
// barriers, device memory bookkeeping. Streams, events, copies and the deferred mode are in
// stream.cc. See kernels/emu/include/cuda_runtime.h for what it checks and what it cannot.
#include <cuda_runtime.h>

#include "kernels/emu/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

thread_local uint3 tid, bid;
thread_local dim3 bdim, gdim;

[[noreturn]] void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gantry CUDA emulator: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

// ---- context switching -------------------------------------------------------------------
// x86-64: a hand-written switch of the callee-saved registers (no signal-mask syscall, which
// ucontext's swapcontext makes on every switch); elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void emu_ctx_switch(void **save_sp, void *new_sp);
asm(".text\n"
    ".globl emu_ctx_switch\n"
    ".type emu_ctx_switch,@function\n"
    "emu_ctx_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch, .-emu_ctx_switch\n"
    ".section .note.GNU-stack,\"\",@progbits\n"
    ".text\n");
struct ctx {
    void *sp;
};
#else
struct ctx {
    ucontext_t uc;
};
#endif

enum fstate { F_READY, F_BAR, F_WARP, F_DONE };

/* One cp.async of the fiber: the source's bytes as they were at the call (global memory does
 * not change under a kernel that reads it this way). A GPU writes them to shared memory at any
 * time between the call and the cp.async.wait_group that retires their group; a block here takes
 * one of the two extremes, chosen at random (sched::cp_eager): at the call, so a copy issued
 * before the barrier that frees its destination overwrites what other threads still read; or
 * at the wait, so a read before the wait sees stale bytes. */
struct cp_copy {
    void *dst;
    unsigned n;
    unsigned char data[16];
};

/* A wgmma product's results, kept until its group is waited for (wgmma_defer). */
struct wg_acc {
    float *d;
    int n;
    float v[32];
};

struct fiber {
    ctx c;
    uint3 tid;
    int state;
    int warp, lane;
    char *stack; // lowest usable byte
    std::vector<cp_copy> cp_open;               // issued, not yet committed
    std::deque<std::vector<cp_copy>> cp_groups; // committed, oldest first
    std::vector<wg_acc> wg_open;                // wgmma products not yet committed
    std::deque<std::vector<wg_acc>> wg_groups;  // committed, oldest first
};

struct warp_state {
    int arrived, expected;
    unsigned gen;
    bool fast; /* this block's run: the warp's lanes go on within the round (see warp_meet) */
    uint64_t slot[2][32];
    unsigned char bulk[2][32][EMU_GATHER_MAX]; /* warp_gather's, as slot */
};

static const size_t STACK_BYTES =
#ifdef EMU_ASAN
    512 << 10;
#else
    128 << 10;
#endif
static const size_t GUARD = 4096;

// Per host thread: the block being run and its fibers.

/* Dynamic shared memory starts 128-byte aligned, as on a GPU when a kernel has no static shared
 * memory before it (wmma's loads and stores need 32 bytes, checked in include/mma.h). */
template <typename T> struct smem_allocator {
    typedef T value_type;
    smem_allocator() = default;
    template <typename U> smem_allocator(const smem_allocator<U> &) {}
    T *allocate(size_t n) { return (T *)::operator new(n * sizeof(T), std::align_val_t(128)); }
    void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(128)); }
    template <typename U> bool operator==(const smem_allocator<U> &) const { return true; }
    template <typename U> bool operator!=(const smem_allocator<U> &) const { return false; }
};

struct sched {
    ctx main;
    std::vector<fiber> f;
    std::vector<char *> stacks; // mmap'd, reused across launches
    std::vector<warp_state> warps;
    std::vector<int> ready;
    std::vector<int> batch; // the fibers to run before the scheduler runs again, in order
    size_t bpos;            // the next of them
    bool from_main;         // the switch in progress started on the scheduler's stack
    int n, done, bar_arrived, cur;
    unsigned bar_gen;
    void (*body)(void *);
    void *arg;
    std::vector<unsigned char, smem_allocator<unsigned char>> smem;
    bool cp_eager; /* this block's cp.async copies land at the call, not at the wait */
    uint64_t rng;
#ifdef EMU_ASAN
    void *fake_main;
    const void *main_bottom;
    size_t main_size;
#endif
    ~sched()
    {
        for (char *s : stacks) {
#ifdef EMU_ASAN
            /* The frames that never returned (fiber_main's, the switch's) left their redzones
             * poisoned, and unmapping does not clear shadow memory: the next mapping at these
             * addresses (LeakSanitizer's report at exit maps some) would report a
             * stack-buffer-underflow on its first write, from inside the report, and hang. */
            ASAN_UNPOISON_MEMORY_REGION(s, STACK_BYTES);
#endif
            munmap(s - GUARD, STACK_BYTES + GUARD);
        }
    }
};
static thread_local sched *S;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static void leave(fiber *f, bool dying);

static void ctx_swap(ctx *save, ctx *to)
{
#if defined(__x86_64__)
    emu_ctx_switch(&save->sp, to->sp);
#else
    swapcontext(&save->uc, &to->uc);
#endif
}

static void fiber_main()
{
    sched *s = S;
#ifdef EMU_ASAN
    const void *b;
    size_t sz;
    __sanitizer_finish_switch_fiber(nullptr, &b, &sz);
    if (s->from_main)
        s->main_bottom = b, s->main_size = sz;
#endif
    fiber *f = &s->f[s->cur];
    s->body(s->arg);
    f->state = F_DONE;
    s->done++;
    leave(f, true);
    die("a finished fiber was resumed");
}

// Leaves fiber f (waiting at a barrier, or done): straight into the batch's next fiber, so a
// thread costs one switch, not two; back to the scheduler once the batch is through.
static void leave(fiber *f, bool dying)
{
    sched *s = S;
    int i = s->bpos < s->batch.size() ? s->batch[s->bpos++] : -1;
    ctx *to = &s->main;
#ifdef EMU_ASAN
    const void *bottom = s->main_bottom;
    size_t size = s->main_size;
#endif
    if (i >= 0) {
        s->cur = i;
        tid = s->f[i].tid;
        to = &s->f[i].c;
#ifdef EMU_ASAN
        bottom = s->f[i].stack, size = STACK_BYTES;
#endif
    }
    s->from_main = false;
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(dying ? nullptr : &fake, bottom, size);
#endif
    ctx_swap(&f->c, to);
#ifdef EMU_ASAN
    const void *b;
    size_t sz;
    __sanitizer_finish_switch_fiber(fake, &b, &sz);
    if (s->from_main)
        s->main_bottom = b, s->main_size = sz;
#endif
    (void)dying;
}

static void fiber_init(sched *s, int i)
{
    fiber *f = &s->f[i];
#ifdef EMU_ASAN
    // The stack's last user left poisoned redzones only in the frames that never returned
    // (fiber_main's and the switch's, at the top); the kernel's own frames were unpoisoned as
    // they returned. Unpoisoning the whole stack cost 64 KiB of shadow writes per thread.
    ASAN_UNPOISON_MEMORY_REGION(f->stack + STACK_BYTES - 16384, 16384);
#endif
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                     // alignment slot: fiber_main starts as if called
    *--sp = (void *)(uintptr_t)fiber_main; // emu_ctx_switch's ret goes here
    for (int r = 0; r < 6; r++)
        *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    f->c.sp = sp;
#else
    getcontext(&f->c.uc);
    f->c.uc.uc_stack.ss_sp = f->stack;
    f->c.uc.uc_stack.ss_size = STACK_BYTES;
    f->c.uc.uc_link = nullptr;
    makecontext(&f->c.uc, fiber_main, 0);
#endif
}

// From the scheduler into fiber i; returns when a fiber leaves with nothing left in the batch.
static void to_fiber(sched *s, int i)
{
    fiber *f = &s->f[i];
    s->cur = i;
    tid = f->tid;
    s->from_main = true;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&s->fake_main, f->stack, STACK_BYTES);
#endif
    ctx_swap(&s->main, &f->c);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(s->fake_main, nullptr, nullptr);
#endif
}

static void run_block(sched *s)
{
    for (int i = 0; i < s->n; i++) {
        s->f[i].state = F_READY;
        s->f[i].cp_open.clear(); // the last block's copies still in flight went with it
        s->f[i].cp_groups.clear();
        s->f[i].wg_open.clear(); // and its wgmma products (their accumulators are gone)
        s->f[i].wg_groups.clear();
        fiber_init(s, i);
    }
    s->done = 0, s->bar_arrived = 0, s->bar_gen = 0;
    for (auto &w : s->warps)
        w.arrived = 0, w.gen = 0, w.fast = rng_next(&s->rng) & 1;
    s->cp_eager = rng_next(&s->rng) & 1;
    // Poison dynamic shared memory: a read before any write sees NaN bit patterns.
    if (!s->smem.empty())
        memset(s->smem.data(), 0xff, s->smem.size());
    s->ready.resize(s->n);
    for (int i = 0; i < s->n; i++)
        s->ready[i] = i;
    while (!s->ready.empty()) {
        s->batch.swap(s->ready);
        s->ready.clear();
        // Shuffle who runs first between barriers (Fisher-Yates, seeded per launch).
        for (size_t i = s->batch.size(); i > 1; i--) {
            size_t j = rng_next(&s->rng) % i;
            std::swap(s->batch[i - 1], s->batch[j]);
        }
        s->bpos = 1;
        to_fiber(s, s->batch[0]); // the fibers chain through the batch (leave)
    }
    if (s->done != s->n) {
        int nbar = 0, nwarp = 0;
        for (auto &f : s->f)
            nbar += f.state == F_BAR, nwarp += f.state == F_WARP;
        die("block (%u,%u,%u) of a %u-thread block launch cannot finish: %d thread(s) wait at "
            "__syncthreads, %d at a warp shuffle, %d exited. A barrier inside divergent code, or "
            "after an early return of some threads, hangs or misbehaves on a GPU too.",
            bid.x, bid.y, bid.z, (unsigned)s->n, nbar, nwarp, s->done);
    }
}

void sync_threads()
{
    sched *s = S;
    if (!s)
        die("__syncthreads outside a kernel");
    fiber *f = &s->f[s->cur];
    if (s->done > 0)
        die("__syncthreads in block (%u,%u,%u) reached after %d thread(s) of the block exited "
            "(thread (%u,%u,%u) arrived): a barrier after an early return is undefined in CUDA",
            bid.x, bid.y, bid.z, s->done, f->tid.x, f->tid.y, f->tid.z);
    if (++s->bar_arrived == s->n) {
        s->bar_arrived = 0;
        s->bar_gen++;
        for (int i = 0; i < s->n; i++)
            if (s->f[i].state == F_BAR) {
                s->f[i].state = F_READY;
                s->ready.push_back(i);
            }
        return; // the last to arrive goes on
    }
    f->state = F_BAR;
    leave(f, false);
    tid = f->tid;
}

void cp_async(void *dst, const void *src, unsigned bytes, unsigned src_bytes)
{
    sched *s = S;
    if (!s || !s->body)
        die("cp.async outside a kernel");
    if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes > bytes)
        die("cp.async of %u bytes (%u from the source): the sizes are 4, 8 or 16, the source's "
            "at most that", bytes, src_bytes);
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes)
        die("cp.async of %u bytes: %p <- %p not %u-byte aligned (a GPU faults)", bytes, dst, src,
            bytes);
    const unsigned char *lo = s->smem.data(), *hi = lo + s->smem.size(), *d;
    d = (const unsigned char *)dst;
    if (s->smem.empty() || d < lo || d + bytes > hi)
        die("cp.async to %p: not in the block's dynamic shared memory (%zu bytes)", dst,
            s->smem.size());
    if (src_bytes && !emu_is_device_range(src, src_bytes))
        die("cp.async from %p (%u bytes): not device memory", src, src_bytes);
    cp_copy c;
    c.dst = dst, c.n = bytes;
    memset(c.data, 0, sizeof c.data); // the bytes past src_bytes are zeros, as on a GPU
    memcpy(c.data, src, src_bytes);
    if (s->cp_eager)
        memcpy(dst, c.data, bytes);
    else
        s->f[s->cur].cp_open.push_back(c);
}

void cp_async_commit()
{
    fiber *f = &S->f[S->cur];
    f->cp_groups.push_back(std::move(f->cp_open)); // an empty group is allowed, as in PTX
    f->cp_open.clear();
}

void cp_async_wait(int pending)
{
    fiber *f = &S->f[S->cur];
    while ((int)f->cp_groups.size() > pending) {
        for (const cp_copy &c : f->cp_groups.front())
            memcpy(c.dst, c.data, c.n);
        f->cp_groups.pop_front();
    }
}

void wgmma_defer(float *d, const float *v, int n)
{
    if (!S || !S->body)
        die("wgmma outside a kernel");
    if (n < 1 || n > 32)
        die("wgmma_defer of %d accumulators (1 to 32)", n);
    wg_acc a;
    a.d = d, a.n = n;
    memcpy(a.v, v, n * sizeof(float));
    S->f[S->cur].wg_open.push_back(a);
}

const float *wgmma_pending(const float *d)
{
    fiber *f = &S->f[S->cur];
    for (size_t i = f->wg_open.size(); i-- > 0;)
        if (f->wg_open[i].d == d)
            return f->wg_open[i].v;
    for (size_t gi = f->wg_groups.size(); gi-- > 0;)
        for (size_t i = f->wg_groups[gi].size(); i-- > 0;)
            if (f->wg_groups[gi][i].d == d)
                return f->wg_groups[gi][i].v;
    return nullptr;
}

void wgmma_commit()
{
    fiber *f = &S->f[S->cur];
    f->wg_groups.push_back(std::move(f->wg_open));
    f->wg_open.clear();
}

void wgmma_wait(int pending)
{
    fiber *f = &S->f[S->cur];
    while ((int)f->wg_groups.size() > pending) {
        for (const wg_acc &a : f->wg_groups.front())
            memcpy(a.d, a.v, a.n * sizeof(float));
        f->wg_groups.pop_front();
    }
}

int lane_id()
{
    return S->f[S->cur].lane;
}

/* The warp's next meeting of the lanes in mask: this lane publishes 8 bytes (v) in the slots and
 * n bytes (bytes) in the bulk buffers, waits for the other lanes of mask (those present in the
 * block), and gets the meeting's buffer index (the buffers alternate, so a lane that goes on to
 * the next meeting cannot overwrite what a slower one still reads). */
static unsigned warp_meet(unsigned mask, uint64_t v, const void *bytes, size_t n, int src)
{
    sched *s = S;
    if (!s)
        die("warp shuffle outside a kernel");
    fiber *f = &s->f[s->cur];
    warp_state *w = &s->warps[f->warp];
    int lanes = s->n - f->warp * 32 < 32 ? s->n - f->warp * 32 : 32;
    unsigned present = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
    if (!(mask >> f->lane & 1))
        die("a lane called a shuffle with a mask (0x%08x) that excludes it", mask);
    if (src < 0 || src >= 32 || !((mask & present) >> src & 1))
        die("warp shuffle reads lane %d, not in the mask 0x%08x or past the block's last thread",
            src, mask);
    unsigned slot = w->gen & 1;
    w->slot[slot][f->lane] = v;
    if (n)
        memcpy(w->bulk[slot][f->lane], bytes, n);
    int expected = __builtin_popcount(mask & present);
    if (++w->arrived == expected) {
        w->arrived = 0;
        w->gen++;
        /* A slow warp's lanes wait for the next round (every warp moves one meeting a round);
         * a fast warp's run on in this one, so it races ahead of the slow ones up to its next
         * __syncthreads, as warps may on a GPU: shared memory that one warp overwrites while
         * another still reads it (a missing __syncthreads) then gives wrong results. */
        std::vector<int> &q = w->fast ? s->batch : s->ready;
        for (int i = f->warp * 32; i < f->warp * 32 + lanes; i++)
            if (s->f[i].state == F_WARP) {
                s->f[i].state = F_READY;
                q.push_back(i);
            }
    } else {
        f->state = F_WARP;
        leave(f, false);
        tid = f->tid;
    }
    return slot;
}

uint64_t warp_exchange(unsigned mask, uint64_t v, int src)
{
    unsigned slot = warp_meet(mask, v, nullptr, 0, src);
    return S->warps[S->f[S->cur].warp].slot[slot][src];
}

const unsigned char *warp_gather(const void *v, size_t n)
{
    if (n > EMU_GATHER_MAX)
        die("warp_gather of %zu bytes a lane (at most %d)", n, EMU_GATHER_MAX);
    if (S && S->n - S->f[S->cur].warp * 32 < 32)
        die("a warp-wide matrix instruction (mma.sync, ldmatrix) in a warp of fewer than 32 "
            "threads: it needs all 32 lanes");
    unsigned slot = warp_meet(0xffffffffu, 0, v, n, 0);
    return S->warps[S->f[S->cur].warp].bulk[slot][0];
}

size_t dyn_smem_bytes()
{
    return S ? S->smem.size() : 0;
}

void *dyn_smem()
{
    sched *s = S;
    return s && !s->smem.empty() ? s->smem.data() : nullptr;
}

static thread_local cudaError_t last_error = cudaSuccess;

static std::mutex attr_mu;
static std::map<const void *, int> max_dyn_smem;

static char *new_stack()
{
    void *m = mmap(nullptr, STACK_BYTES + GUARD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        die("cannot map a fiber stack: %s", strerror(errno));
    mprotect(m, GUARD, PROT_NONE); // an overflow faults instead of corrupting the next stack
    return (char *)m + GUARD;
}

uint64_t seed_base()
{
    const char *e = getenv("GANTRY_EMU_SEED");
    return e && *e ? strtoull(e, nullptr, 0) : 0x9e3779b97f4a7c15ULL;
}

// A launch: checked at the call (errors go to cudaGetLastError, as on a GPU), then run on the
// stream (stream.cc: at once, or queued in the deferred mode). The launch owns arg; drop frees it.
int submit_grid(const launch_cfg &cfg, const void *kernel, void (*body)(void *), void *arg,
                void (*drop)(void *))
{
    unsigned long long nthreads = (unsigned long long)cfg.block.x * cfg.block.y * cfg.block.z;
    if (cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || nthreads == 0 ||
        nthreads > 1024 || cfg.block.z > 64 || cfg.grid.y > 65535 || cfg.grid.z > 65535) {
        fprintf(stderr,
                "gantry CUDA emulator: invalid launch configuration: grid (%u,%u,%u) block "
                "(%u,%u,%u)\n",
                cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z);
        drop(arg);
        return last_error = cudaErrorInvalidConfiguration;
    }
    if (cfg.smem > 48 * 1024) {
        int allowed = 0;
        {
            std::lock_guard<std::mutex> g(attr_mu);
            auto it = max_dyn_smem.find(kernel);
            allowed = it == max_dyn_smem.end() ? 0 : it->second;
        }
        if ((size_t)allowed < cfg.smem) {
            fprintf(stderr,
                    "gantry CUDA emulator: launch asks for %zu bytes of dynamic shared memory; "
                    "over 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first "
                    "(set: %d)\n",
                    cfg.smem, allowed);
            drop(arg);
            return last_error = cudaErrorInvalidValue;
        }
    }
    if (S && S->body)
        die("a kernel launched from inside a kernel (dynamic parallelism is not emulated)");
    struct job {
        launch_cfg cfg;
        void (*body)(void *);
        void *arg;
        void (*drop)(void *);
    };
    job *j = new job{cfg, body, arg, drop};
    emu_stream_submit(
        cfg.stream,
        [](void *p) {
            job *k = (job *)p;
            run_grid_now(k->cfg, k->body, k->arg);
        },
        [](void *p) {
            job *k = (job *)p;
            k->drop(k->arg);
            delete k;
        },
        j);
    return 0;
}

void run_grid_now(const launch_cfg &cfg, void (*body)(void *), void *arg)
{
    static std::atomic<uint64_t> launches{0};
    unsigned long long nthreads = (unsigned long long)cfg.block.x * cfg.block.y * cfg.block.z;
    if (!S) {
        static thread_local sched inst; // one per launching host thread, freed at its exit
        S = &inst;
    }
    sched *s = S;
    s->n = (int)nthreads;
    while (s->stacks.size() < nthreads)
        s->stacks.push_back(new_stack());
    s->f.resize(nthreads);
    s->warps.resize((nthreads + 31) / 32);
    for (unsigned z = 0, i = 0; z < cfg.block.z; z++)
        for (unsigned y = 0; y < cfg.block.y; y++)
            for (unsigned x = 0; x < cfg.block.x; x++, i++) {
                s->f[i].tid = uint3{x, y, z};
                s->f[i].warp = (int)(i / 32);
                s->f[i].lane = (int)(i % 32);
                s->f[i].stack = s->stacks[i];
            }
    s->smem.assign(cfg.smem, 0);
    s->body = body, s->arg = arg;
    s->rng = seed_base() ^ (0x100000001b3ULL * ++launches);
    bdim = cfg.block, gdim = cfg.grid;
    for (unsigned z = 0; z < cfg.grid.z; z++)
        for (unsigned y = 0; y < cfg.grid.y; y++)
            for (unsigned x = 0; x < cfg.grid.x; x++) {
                bid = uint3{x, y, z};
                run_block(s);
            }
    s->body = nullptr;
}

} // namespace emu

// ---- the runtime API -------------------------------------------------------------------------
using emu::last_error;

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

cudaError_t emu::set_error(cudaError_t e)
{
    return ret(e);
}

cudaError_t emu_func_set_attribute(const void *func, int attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return cudaSuccess;
    if (value < 0 || value > 232448) // Hopper: 227 KiB per block with the opt-in
        return ret(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(emu::attr_mu);
    emu::max_dyn_smem[func] = value;
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureIsolation:
        return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
        return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    }
    return "unknown error";
}

const char *cudaGetErrorName(cudaError_t err)
{
    return cudaGetErrorString(err);
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

// The device memory: 8 GiB, or GANTRY_EMU_MEM_MB; GANTRY_EMU_MEM_OTHERS_MB of it held by "other
// processes". Device allocations past what is left fail with cudaErrorMemoryAllocation, and
// cudaMemGetInfo reports it, as on a GPU (the process's own context takes nothing here).
static size_t env_mib(const char *name, size_t dflt)
{
    const char *e = getenv(name);
    return (e && *e ? (size_t)strtoull(e, NULL, 10) : dflt) << 20;
}
static size_t emu_mem_total()
{
    return env_mib("GANTRY_EMU_MEM_MB", 8192);
}
static size_t emu_mem_others()
{
    return env_mib("GANTRY_EMU_MEM_OTHERS_MB", 0);
}

// One emulated device, unless GANTRY_EMU_DEVICES says otherwise (0: as if none were present).
static int device_count()
{
    const char *e = getenv("GANTRY_EMU_DEVICES");
    return e && *e ? atoi(e) : 1;
}
static thread_local int cur_device;

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return *n > 0 ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= device_count())
        return ret(cudaErrorInvalidDevice);
    cur_device = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = cur_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= device_count())
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "gantry CUDA emulator (CPU)");
    p->totalGlobalMem = emu_mem_total();
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = 1;
    p->major = 9, p->minor = 0;
    p->clockRate = 1000000;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev)
{
    static int the_pool;
    *pool = (cudaMemPool_t)&the_pool;
    return dev >= 0 && dev < device_count() ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    return pool && value ? cudaSuccess : ret(cudaErrorInvalidValue);
}

// (the emulated pool keeps nothing: cudaFreeAsync frees when its stream reaches it)
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep)
{
    (void)min_bytes_to_keep;
    return pool ? cudaSuccess : ret(cudaErrorInvalidValue);
}

// Device allocations and pinned host allocations: address -> size, so copies and memsets can be
// checked against them and copies can tell pinned from pageable host memory.
static std::mutex mem_mu;
static std::map<uintptr_t, size_t> allocs, pinned;
static size_t alloc_bytes; // the live device allocations' sizes (under mem_mu)

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    const size_t t = emu_mem_total(), o = emu_mem_others();
    std::lock_guard<std::mutex> g(mem_mu);
    *total = t;
    *free_bytes = t > o + alloc_bytes ? t - o - alloc_bytes : 0;
    return cudaSuccess;
}

static cudaError_t malloc_now(void **p, size_t bytes)
{
    if (!p)
        return ret(cudaErrorInvalidValue);
    const size_t limit = emu_mem_total() - std::min(emu_mem_others(), emu_mem_total());
    {
        std::lock_guard<std::mutex> g(mem_mu);
        if (bytes > limit || alloc_bytes > limit - bytes)
            return ret(cudaErrorMemoryAllocation);
    }
    // 256-byte alignment like cudaMalloc, and the exact size, so that AddressSanitizer sees a
    // kernel's access one past the end.
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0)
        return ret(cudaErrorMemoryAllocation);
    // Fresh device memory is not zero on a GPU either: fill it with a NaN pattern.
    memset(m, 0xff, bytes);
    std::lock_guard<std::mutex> g(mem_mu);
    allocs[(uintptr_t)m] = bytes;
    alloc_bytes += bytes;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    cudaError_t e = emu::capture_unsafe("cudaMalloc");
    return e != cudaSuccess ? e : malloc_now(p, bytes);
}

cudaError_t emu::free_now(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end())
            return ret(cudaErrorInvalidValue);
        alloc_bytes -= it->second;
        allocs.erase(it);
    }
    free(p);
    return cudaSuccess;
}

bool emu::is_device_alloc(const void *p)
{
    std::lock_guard<std::mutex> g(mem_mu);
    return allocs.count((uintptr_t)p) != 0;
}

// Allocation is immediate: the memory is not in use by any queued work yet. Inside a stream
// capture the memory becomes the graph's (an allocation node), as CUDA's graph memory nodes.
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
    cudaError_t e = malloc_now(p, bytes);
    if (e == cudaSuccess)
        emu::capture_alloc(s, *p, bytes);
    return e;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    if (emu::capture_unsafe("cudaMallocHost") != cudaSuccess)
        return cudaErrorStreamCaptureUnsupported;
    if (!p)
        return ret(cudaErrorInvalidValue);
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(mem_mu);
    pinned[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    return cudaMallocHost(p, bytes);
}

void emu::free_host_now(void *p)
{
    {
        std::lock_guard<std::mutex> g(mem_mu);
        pinned.erase((uintptr_t)p);
    }
    free(p);
}

static bool in_map(const std::map<uintptr_t, size_t> &m, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin())
        return false;
    --it;
    return a >= it->first && a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

int emu_is_device_range(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    return in_map(allocs, p, bytes);
}

bool emu::is_pinned(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(mem_mu);
    return in_map(pinned, p, bytes);
}

cudaError_t emu::check_range(const void *p, size_t bytes, bool device, const char *what)
{
    if (bytes == 0)
        return cudaSuccess;
    bool dev = emu_is_device_range(p, bytes);
    if (device && !dev) {
        fprintf(stderr,
                "gantry CUDA emulator: %s: %zu bytes at %p are not inside one device allocation "
                "(out of bounds, freed, or a host pointer)\n",
                what, bytes, p);
        return ret(cudaErrorInvalidValue);
    }
    if (!device && dev) {
        fprintf(stderr, "gantry CUDA emulator: %s: %p is device memory where host memory was "
                        "named\n", what, p);
        return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

