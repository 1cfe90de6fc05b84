// The gantry CUDA emulator's streams, events, copies and memsets, in two modes.
//
// At the call (the default): kernels, copies and memsets run when they are called, on the calling
// host thread. Only work an emulated library runs on a thread of its own (the emulated NCCL's
// collectives: emu_stream_external_*) keeps a stream busy; cudaStreamQuery reports it, and
// synchronising, an event record and any later work on that stream wait for it.
//
// Deferred (GANTRY_EMU_DEFER=1): kernel launches, cudaMemcpyAsync/cudaMemsetAsync, cudaMemset,
// cudaEventRecord, cudaStreamWaitEvent, cudaFreeAsync, the emulated cuBLAS/CUB calls and NCCL's
// collectives are queued per stream. Nothing runs them until the host must observe them
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a synchronous cudaMemcpy,
// cudaFree, a copy to pageable memory) or a library thread needs them (NCCL's collective waits
// for its stream's earlier work): then the waiting thread runs queued operations one at a time,
// each time picking a random stream (GANTRY_EMU_SEED) among those whose next operation may run,
// mostly among the streams the awaited work depends on, sometimes any. An operation may run
// when it is the first of its stream and every event it waits for has been reached; work on the
// legacy default stream also waits for all earlier work on blocking streams, and work on a
// blocking stream for earlier legacy work (cudaStreamNonBlocking streams do not). So a missing
// cudaStreamWaitEvent lets the consumer run before its producer, a host read of pinned memory
// before the stream is synchronised sees the old bytes, and a pinned buffer reused while its
// upload is queued uploads the new bytes. cudaStreamQuery and cudaEventQuery run some of the
// pending work, or none, and report cudaErrorNotReady while any is left.
//
// Copies: one to or from pinned memory (cudaMallocHost, cudaHostAlloc) is queued like any
// operation. From pageable memory to the device, the source is copied at the call (as CUDA stages
// it) and the device side written later; from the device to pageable memory, the stream's work
// up to the copy runs at the call (CUDA returns once the copy is done). cudaMemcpy is an
// operation on the legacy stream that the call waits for; cudaMemset on device memory is queued
// on the legacy stream (asynchronous, as CUDA documents).
//
// Threads: one mutex guards every queue and is held while an operation runs, so operations run
// one at a time in a process; a kernel runs on the fibers of whichever host thread drives the
// queue. A library's external operation (an NCCL collective) runs on its own thread, outside the
// mutex, between its begin and end.
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/emu/internal.h"

namespace {

enum op_kind { OP_RUN, OP_RECORD, OP_WAIT, OP_EXTERNAL };

struct dep { // stream s has finished every operation numbered <= seq
    CUstream_st *s;
    uint64_t seq;
};

struct op {
    uint64_t seq; // global enqueue order: a dependency always names an earlier number
    op_kind kind;
    std::vector<dep> deps; // event waits, the legacy stream's implicit ones
    void (*run)(void *);
    void (*drop)(void *);
    void *arg;
    cudaEvent_t ev;  // OP_RECORD (NULL once the event is destroyed)
    bool started;    // OP_EXTERNAL: its library began it
};

// A graph's work, in capture order (a single stream's capture is a chain). Shared by the graph
// and its executables; the last of them frees the nodes' arguments and the graph's memory.
enum gnode_kind { G_RUN, G_RECORD, G_ALLOC, G_FREE };

struct gnode {
    gnode_kind kind;
    void (*run)(void *); // G_RUN: run(arg), any number of times
    void (*drop)(void *);
    void *arg;
    cudaEvent_t ev; // G_RECORD
    void *mem;      // G_ALLOC, G_FREE: the graph's memory
    size_t bytes;
};

struct gdata {
    std::vector<gnode> nodes;
    std::vector<void *> mem; // cudaMallocAsync'd during the capture: the graph's own
    ~gdata();
};

struct capture {
    std::shared_ptr<gdata> g;
    cudaStreamCaptureMode mode;
    std::thread::id thread;
    bool invalid;
};

} // namespace

struct CUstream_st {
    unsigned flags;
    int busy;          // at-call mode: external operations not ended
    uint64_t id;       // creation order (a deterministic order for the random picks)
    std::deque<op *> q; // deferred mode: queued, in stream order
    capture *cap = nullptr; // between cudaStreamBeginCapture and cudaStreamEndCapture
};

struct CUevent_st {
    unsigned flags;
    int recorded; // a record was called
    double t;     // ms, when the last record ran
    // deferred: the last record's stream and number while it has not run (rseq 0: none pending)
    CUstream_st *rs;
    uint64_t rseq;
    const gdata *cap = nullptr; // last recorded inside the capture of this graph
};

struct CUgraph_st {
    std::shared_ptr<gdata> g;
};
struct CUgraphExec_st {
    std::shared_ptr<gdata> g;
};

static std::mutex mu;
static std::condition_variable cv; // an operation ran, or an external one began or ended
static CUstream_st legacy = {0, 0, 0, {}};
static std::set<CUstream_st *> streams = {&legacy};
static std::vector<CUstream_st *> stream_list = {&legacy}; // creation order
static uint64_t next_seq = 1, next_id = 1;
static uint64_t rng;
static thread_local bool in_op; // this thread runs a queued operation (holding mu)

static int env_defer()
{
    const char *e = getenv("GANTRY_EMU_DEFER");
    return e && *e && strcmp(e, "0") != 0;
}
static std::atomic<int> mode{-1}; // -1: not read yet

static bool deferred()
{
    int m = mode.load(std::memory_order_relaxed);
    if (m < 0) {
        int want = env_defer();
        mode.compare_exchange_strong(m, want);
        m = mode.load();
    }
    return m == 1;
}

static uint64_t next_rand()
{
    if (rng == 0)
        rng = emu::seed_base() ^ 0xd1b54a32d192ed03ULL;
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}

static double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static CUstream_st *stream_of(cudaStream_t s)
{
    return s == nullptr || s == cudaStreamLegacy ? &legacy : s;
}

static bool blocking(const CUstream_st *s)
{
    return !(s->flags & cudaStreamNonBlocking);
}

// ---- at-call mode ----------------------------------------------------------------------------

// Waits until no external operation holds stream s (every stream when all is set).
static void busy_drain(cudaStream_t s, bool all)
{
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] {
        if (!all)
            return stream_of(s)->busy == 0;
        for (CUstream_st *x : streams)
            if (x->busy)
                return false;
        return true;
    });
}

static void busy_add(cudaStream_t s, int delta)
{
    std::lock_guard<std::mutex> g(mu);
    stream_of(s)->busy += delta;
    if (stream_of(s)->busy == 0)
        cv.notify_all();
}

// ---- deferred mode: the queues (mu held) -----------------------------------------------------

static void enter()
{
    if (in_op)
        emu::die("a CUDA runtime call from inside queued stream work (a kernel or library "
                 "operation must not call the runtime)");
}

static bool dep_done(const dep &d)
{
    if (!streams.count(d.s))
        return true; // destroyed: its work ran first
    return d.s->q.empty() || d.s->q.front()->seq > d.seq;
}

static bool all_done(const std::vector<dep> &roots)
{
    for (const dep &d : roots)
        if (!dep_done(d))
            return false;
    return true;
}

static dep back_of(CUstream_st *s)
{
    return {s, s->q.empty() ? 0 : s->q.back()->seq};
}

// A new operation at the end of stream s, with the legacy stream's implicit dependencies.
static op *push(CUstream_st *s, op_kind k)
{
    op *o = new op{next_seq++, k, {}, nullptr, nullptr, nullptr, nullptr, false};
    if (s == &legacy) {
        for (CUstream_st *x : stream_list)
            if (x != s && blocking(x) && !x->q.empty())
                o->deps.push_back(back_of(x));
    } else if (blocking(s) && !legacy.q.empty()) {
        o->deps.push_back(back_of(&legacy));
    }
    s->q.push_back(o);
    return o;
}

static void finish(CUstream_st *s, op *o)
{
    auto it = std::find(s->q.begin(), s->q.end(), o);
    if (it != s->q.end())
        s->q.erase(it);
    if (o->drop)
        o->drop(o->arg);
    delete o;
    cv.notify_all();
}

// Runs the first operation of s (ready, not external).
static void execute(CUstream_st *s)
{
    op *o = s->q.front();
    if (o->kind == OP_RUN) {
        in_op = true;
        o->run(o->arg);
        in_op = false;
    } else if (o->kind == OP_RECORD && o->ev && o->ev->rseq == o->seq) {
        o->ev->t = now_ms();
        o->ev->rseq = 0, o->ev->rs = nullptr;
    }
    finish(s, o);
}

static bool head_runnable(CUstream_st *s)
{
    if (s->q.empty() || s->q.front()->kind == OP_EXTERNAL)
        return false;
    for (const dep &d : s->q.front()->deps)
        if (!dep_done(d))
            return false;
    return true;
}

// The streams (and how far along each) that the roots depend on, directly or through waits.
static void cone_of(const std::vector<dep> &roots, std::map<CUstream_st *, uint64_t> &cone)
{
    std::vector<dep> work;
    for (const dep &d : roots)
        if (!dep_done(d))
            work.push_back(d);
    while (!work.empty()) {
        dep d = work.back();
        work.pop_back();
        uint64_t from = 0;
        auto it = cone.find(d.s);
        if (it != cone.end()) {
            if (it->second >= d.seq)
                continue;
            from = it->second;
            it->second = d.seq;
        } else {
            cone[d.s] = d.seq;
        }
        for (op *o : d.s->q) {
            if (o->seq > d.seq)
                break;
            if (o->seq <= from)
                continue;
            for (const dep &x : o->deps)
                if (!dep_done(x))
                    work.push_back(x);
        }
    }
}

static bool by_id(const CUstream_st *a, const CUstream_st *b)
{
    return a->id < b->id;
}

// Runs queued operations until every root is done: true. False when `budget` operations ran
// first (budget < 0: no limit), or when what is left waits for external operations and `wait` is
// false, or when stopped(ctx) turned true while waiting for them.
static bool drive(std::unique_lock<std::mutex> &g, const std::vector<dep> &roots, long budget,
                  bool wait, int (*stopped)(void *) = nullptr, void *ctx = nullptr)
{
    std::map<CUstream_st *, uint64_t> cone;
    std::vector<CUstream_st *> in, out;
    bool fresh = false;
    for (;;) {
        if (all_done(roots))
            return true;
        if (budget == 0)
            return false;
        if (!fresh) {
            cone.clear();
            cone_of(roots, cone);
            fresh = true;
        }
        in.clear(), out.clear();
        for (auto &c : cone)
            if (!c.first->q.empty() && c.first->q.front()->seq <= c.second &&
                head_runnable(c.first))
                in.push_back(c.first);
        if (in.empty()) { // only external operations (another thread's) are in the way
            bool external = false;
            for (auto &c : cone)
                for (op *o : c.first->q)
                    external |= o->seq <= c.second && o->kind == OP_EXTERNAL;
            if (!external)
                emu::die("deferred stream work cannot make progress (an emulator bug)");
            if (!wait)
                return false;
            cv.wait_for(g, std::chrono::milliseconds(20));
            if (stopped && stopped(ctx))
                return false;
            fresh = false; // streams may have been destroyed meanwhile
            continue;
        }
        std::sort(in.begin(), in.end(), by_id);
        CUstream_st *pick = in[next_rand() % in.size()];
        if (next_rand() % 4 == 0) { // sometimes work nobody waits for yet runs first
            for (CUstream_st *x : stream_list)
                if (head_runnable(x))
                    out.push_back(x);
            if (!out.empty())
                pick = out[next_rand() % out.size()];
        }
        execute(pick);
        if (budget > 0)
            budget--;
    }
}

static std::vector<dep> roots_of_stream(CUstream_st *s)
{
    std::vector<dep> r = {back_of(s)};
    if (s == &legacy) // the legacy stream waits for every blocking stream
        for (CUstream_st *x : stream_list)
            if (x != s && blocking(x))
                r.push_back(back_of(x));
    return r;
}

static std::vector<dep> roots_all()
{
    std::vector<dep> r;
    for (CUstream_st *x : stream_list)
        r.push_back(back_of(x));
    return r;
}

static bool event_done(cudaEvent_t e)
{
    return e->rseq == 0 || dep_done({e->rs, e->rseq});
}

// Queues run(arg) on s; the caller holds no lock.
static op *enqueue_run(cudaStream_t s, void (*run)(void *), void (*drop)(void *), void *arg,
                       std::unique_lock<std::mutex> &g)
{
    op *o = push(stream_of(s), OP_RUN);
    o->run = run, o->drop = drop, o->arg = arg;
    (void)g;
    return o;
}

// Waits (running work) until everything queued so far has run.
static void sync_all()
{
    enter();
    std::unique_lock<std::mutex> g(mu);
    drive(g, roots_all(), -1, true);
}

// ---- stream capture (mu held unless said) ----------------------------------------------------

static std::atomic<int> n_capturing{0}; // streams capturing now: the fast path skips the lock

// The active capture of s, or nullptr.
static capture *capturing(cudaStream_t st)
{
    CUstream_st *s = stream_of(st);
    return streams.count(s) ? s->cap : nullptr;
}

// The capture of event e's last record while that capture is active, or nullptr.
static capture *captured_event(cudaEvent_t e)
{
    if (!e->cap)
        return nullptr;
    for (CUstream_st *x : stream_list)
        if (x->cap && x->cap->g.get() == e->cap)
            return x->cap;
    return nullptr;
}

// Invalidates s's capture and returns err (as the last error), naming the call.
static cudaError_t capture_refuse(capture *c, cudaError_t err, const char *what)
{
    c->invalid = true;
    fprintf(stderr, "gantry CUDA emulator: %s during a stream capture: %s (the capture is "
                    "invalidated)\n", what, cudaGetErrorString(err));
    return emu::set_error(err);
}

// The caller holds no lock. True when s is capturing: the operation became a node of its graph.
static bool capture_take(cudaStream_t st, void (*run)(void *), void (*drop)(void *), void *arg)
{
    if (n_capturing.load() == 0)
        return false;
    std::lock_guard<std::mutex> g(mu);
    capture *c = capturing(st);
    if (!c)
        return false;
    c->g->nodes.push_back({G_RUN, run, drop, arg, nullptr, nullptr, 0});
    return true;
}

gdata::~gdata()
{
    for (gnode &n : nodes)
        if (n.kind == G_RUN && n.drop)
            n.drop(n.arg);
    for (void *p : mem)
        emu::free_now(p);
}

cudaError_t emu::capture_unsafe(const char *fn)
{
    if (n_capturing.load() == 0)
        return cudaSuccess;
    std::lock_guard<std::mutex> g(mu);
    capture *hit = nullptr;
    for (CUstream_st *x : stream_list) {
        capture *c = x->cap;
        if (c && c->mode != cudaStreamCaptureModeRelaxed &&
            (c->mode == cudaStreamCaptureModeGlobal || c->thread == std::this_thread::get_id())) {
            c->invalid = true;
            hit = c;
        }
    }
    if (!hit)
        return cudaSuccess;
    fprintf(stderr, "gantry CUDA emulator: %s while a stream capture is active (a call that may "
                    "synchronise the device; the capture is invalidated)\n", fn);
    return emu::set_error(cudaErrorStreamCaptureUnsupported);
}

void emu::capture_alloc(cudaStream_t st, void *p, size_t bytes)
{
    if (n_capturing.load() == 0)
        return;
    std::lock_guard<std::mutex> g(mu);
    if (capture *c = capturing(st)) {
        c->g->mem.push_back(p);
        c->g->nodes.push_back({G_ALLOC, nullptr, nullptr, nullptr, nullptr, p, bytes});
    }
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode)
{
    enter();
    if (st == nullptr || st == cudaStreamLegacy) // CUDA cannot capture the legacy stream
        return emu::set_error(cudaErrorStreamCaptureUnsupported);
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *s = stream_of(st);
    if (!streams.count(s) || s->cap || mode < cudaStreamCaptureModeGlobal ||
        mode > cudaStreamCaptureModeRelaxed)
        return emu::set_error(cudaErrorInvalidValue);
    s->cap = new capture{std::make_shared<gdata>(), mode, std::this_thread::get_id(), false};
    n_capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    if (!graph)
        return emu::set_error(cudaErrorInvalidValue);
    *graph = nullptr;
    std::lock_guard<std::mutex> g(mu);
    capture *c = capturing(st);
    if (!c)
        return emu::set_error(cudaErrorStreamCaptureUnmatched);
    if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
        return emu::set_error(cudaErrorStreamCaptureWrongThread);
    stream_of(st)->cap = nullptr;
    n_capturing--;
    bool invalid = c->invalid;
    if (!invalid)
        *graph = new CUgraph_st{c->g};
    delete c; // an invalid capture's nodes and memory go with it
    return invalid ? emu::set_error(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status)
{
    if (!status)
        return emu::set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    capture *c = capturing(st);
    *status = !c ? cudaStreamCaptureStatusNone
                 : c->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long)
{
    if (!exec || !graph)
        return emu::set_error(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->g};
    return cudaSuccess;
}

static void poison_run(void *a)
{
    const gnode *n = (const gnode *)a;
    memset(n->mem, 0xff, n->bytes); // as fresh cudaMalloc memory: NaN bits
}

// Replays the graph's work on s, in capture order, as if it were called again now.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    if (!exec)
        return emu::set_error(cudaErrorInvalidValue);
    enter();
    {
        std::lock_guard<std::mutex> g(mu);
        if (capturing(st))
            emu::die("cudaGraphLaunch into a capturing stream (graphs inside graphs are not "
                     "emulated)");
    }
    for (gnode &n : exec->g->nodes) {
        if (n.kind == G_RUN)
            emu_stream_submit(st, n.run, nullptr, n.arg); // the graph keeps the argument
        else if (n.kind == G_RECORD)
            cudaEventRecord(n.ev, st);
        else
            emu_stream_submit(st, poison_run, nullptr, &n);
    }
    return cudaSuccess;
}

// Launched work may still be queued (deferred mode) and uses the graph's arguments and memory.
static void graph_release(std::shared_ptr<gdata> &g)
{
    if (g.use_count() == 1 && deferred())
        sync_all();
    g.reset();
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (!exec)
        return emu::set_error(cudaErrorInvalidValue);
    graph_release(exec->g);
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (!graph)
        return emu::set_error(cudaErrorInvalidValue);
    graph_release(graph->g);
    delete graph;
    return cudaSuccess;
}

size_t emu_graph_nodes(cudaGraph_t graph)
{
    return graph ? graph->g->nodes.size() : 0;
}

// ---- the emulator's own entry points ---------------------------------------------------------

void emu_stream_submit(cudaStream_t s, void (*run)(void *), void (*drop)(void *), void *arg)
{
    enter();
    if (capture_take(s, run, drop, arg))
        return;
    if (!deferred()) {
        busy_drain(s, false);
        run(arg);
        if (drop)
            drop(arg);
        return;
    }
    std::unique_lock<std::mutex> g(mu);
    enqueue_run(s, run, drop, arg, g);
}

unsigned long long emu_stream_external_enqueue(cudaStream_t s)
{
    if (n_capturing.load()) {
        std::lock_guard<std::mutex> g(mu);
        if (capturing(s))
            emu::die("an NCCL collective inside a stream capture (not emulated)");
    }
    if (!deferred()) {
        busy_add(s, +1);
        return 1;
    }
    std::lock_guard<std::mutex> g(mu);
    return push(stream_of(s), OP_EXTERNAL)->seq;
}

static op *find_op(CUstream_st *s, uint64_t seq)
{
    if (!streams.count(s))
        return nullptr;
    for (op *o : s->q)
        if (o->seq == seq)
            return o;
    return nullptr;
}

int emu_stream_external_begin(cudaStream_t st, unsigned long long token, int (*stopped)(void *),
                              void *ctx)
{
    if (!deferred())
        return 1;
    enter();
    std::unique_lock<std::mutex> g(mu);
    CUstream_st *s = stream_of(st);
    op *o = find_op(s, token);
    if (!o)
        return 0;
    std::vector<dep> roots = o->deps;
    roots.push_back({s, token - 1}); // the stream's earlier work
    if (!drive(g, roots, -1, true, stopped, ctx) || !(o = find_op(s, token)))
        return 0;
    o->started = true;
    cv.notify_all();
    return 1;
}

void emu_stream_external_end(cudaStream_t st, unsigned long long token)
{
    if (!deferred()) {
        busy_add(st, -1);
        return;
    }
    std::lock_guard<std::mutex> g(mu);
    CUstream_st *s = stream_of(st);
    if (op *o = find_op(s, token))
        finish(s, o);
}

int emu_deferred(void)
{
    return deferred();
}

void emu_defer_set(int on, unsigned long long seed)
{
    sync_all();
    std::lock_guard<std::mutex> g(mu);
    for (CUstream_st *x : stream_list)
        if (x->busy)
            emu::die("emu_defer_set while an external operation is pending");
    mode.store(on ? 1 : 0);
    rng = seed ^ 0xd1b54a32d192ed03ULL;
    if (rng == 0)
        rng = 1;
}

// ---- copies and memsets ----------------------------------------------------------------------

namespace {
struct copy_job {
    void *dst;
    const void *src;
    size_t bytes;
    void *owned; // the staged pageable source
};
struct set_job {
    void *p;
    int value;
    size_t bytes;
};
} // namespace

static void copy_run(void *a)
{
    copy_job *j = (copy_job *)a;
    if (j->bytes)
        memmove(j->dst, j->src, j->bytes);
}

static void copy_drop(void *a)
{
    copy_job *j = (copy_job *)a;
    free(j->owned);
    delete j;
}

static void set_run(void *a)
{
    set_job *j = (set_job *)a;
    memset(j->p, j->value, j->bytes);
}

static void set_drop(void *a)
{
    delete (set_job *)a;
}

// The kind's two sides, checked against the allocations; cudaMemcpyDefault infers them.
static cudaError_t copy_sides(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                              bool *sd, bool *dd, const char *fn)
{
    char what[64];
    cudaError_t e;
    if (kind == cudaMemcpyDefault) {
        *sd = emu_is_device_range(src, bytes ? bytes : 1);
        *dd = emu_is_device_range(dst, bytes ? bytes : 1);
        return cudaSuccess;
    }
    *sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    *dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    snprintf(what, sizeof(what), "%s source", fn);
    if ((e = emu::check_range(src, bytes, *sd, what)) != cudaSuccess)
        return e;
    snprintf(what, sizeof(what), "%s destination", fn);
    return emu::check_range(dst, bytes, *dd, what);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    bool sd, dd;
    cudaError_t e = copy_sides(dst, src, bytes, kind, &sd, &dd, "cudaMemcpy");
    if (e != cudaSuccess || (e = emu::capture_unsafe("cudaMemcpy")) != cudaSuccess)
        return e;
    enter();
    if (!deferred()) {
        /* On the legacy stream: after its external work (a collective on stream 0) and that of
         * every blocking stream, not of cudaStreamNonBlocking ones. */
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [] {
            for (CUstream_st *x : streams)
                if (x->busy && (x == &legacy || blocking(x)))
                    return false;
            return true;
        });
        g.unlock();
        if (bytes)
            memmove(dst, src, bytes);
        return cudaSuccess;
    }
    // An operation on the legacy stream (after every blocking stream's earlier work) that the
    // call waits for.
    std::unique_lock<std::mutex> g(mu);
    op *o = enqueue_run(nullptr, copy_run, copy_drop, new copy_job{dst, src, bytes, nullptr}, g);
    drive(g, {{&legacy, o->seq}}, -1, true);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    bool sd, dd;
    cudaError_t e = copy_sides(dst, src, bytes, kind, &sd, &dd, "cudaMemcpyAsync");
    if (e != cudaSuccess)
        return e;
    enter();
    if (n_capturing.load()) { // a copy node: device or pinned memory on both sides
        std::unique_lock<std::mutex> g(mu);
        if (capture *c = capturing(s)) {
            if ((!sd && !emu::is_pinned(src, bytes)) || (!dd && !emu::is_pinned(dst, bytes)))
                return capture_refuse(c, cudaErrorStreamCaptureUnsupported,
                                      "cudaMemcpyAsync with pageable host memory");
            c->g->nodes.push_back({G_RUN, copy_run, copy_drop,
                                   new copy_job{dst, src, bytes, nullptr}, nullptr, nullptr, 0});
            return cudaSuccess;
        }
    }
    if (!deferred()) {
        busy_drain(s, false);
        if (bytes)
            memmove(dst, src, bytes);
        return cudaSuccess;
    }
    copy_job *j = new copy_job{dst, src, bytes, nullptr};
    bool wait = false;
    if (!sd && !dd) {
        wait = true; // host to host: synchronous
    } else if (!sd && !emu::is_pinned(src, bytes)) { // pageable source: staged at the call
        j->owned = malloc(bytes ? bytes : 1);
        if (!j->owned)
            emu::die("out of host memory staging a %zu-byte copy", bytes);
        memcpy(j->owned, src, bytes);
        j->src = j->owned;
    } else if (!dd && !emu::is_pinned(dst, bytes)) {
        wait = true; // to pageable memory: returns once copied
    }
    std::unique_lock<std::mutex> g(mu);
    op *o = enqueue_run(s, copy_run, copy_drop, j, g);
    if (wait)
        drive(g, {{stream_of(s), o->seq}}, -1, true);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    return cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    cudaError_t e = emu::check_range(p, bytes, true, "cudaMemset");
    if (e != cudaSuccess)
        return e;
    emu_stream_submit(s, set_run, set_drop, new set_job{p, value, bytes});
    return cudaSuccess;
}

// ---- memory that queued work may use ---------------------------------------------------------

// Frees synchronise with the whole device on CUDA, so no queued work uses the memory after.
cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    if (emu::capture_unsafe("cudaFree") != cudaSuccess)
        return cudaErrorStreamCaptureUnsupported;
    if (deferred())
        sync_all();
    return emu::free_now(p);
}

static void free_run(void *p)
{
    if (emu::free_now(p) != cudaSuccess)
        emu::die("cudaFreeAsync(%p): not a live device allocation when the free ran (freed twice?)",
                 p);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    if (!p)
        return cudaSuccess;
    if (!emu::is_device_alloc(p))
        return emu::set_error(cudaErrorInvalidValue);
    if (n_capturing.load()) { // a free node: the memory stays the graph's
        std::lock_guard<std::mutex> g(mu);
        if (capture *c = capturing(s)) {
            auto &mem = c->g->mem;
            size_t bytes = 0;
            if (std::find(mem.begin(), mem.end(), p) == mem.end())
                emu::die("cudaFreeAsync(%p) inside a stream capture of memory allocated outside "
                         "it (not emulated)", p);
            for (const gnode &n : c->g->nodes)
                if (n.kind == G_ALLOC && n.mem == p)
                    bytes = n.bytes;
            c->g->nodes.push_back({G_FREE, nullptr, nullptr, nullptr, nullptr, p, bytes});
            return cudaSuccess;
        }
    }
    emu_stream_submit(s, free_run, nullptr, p);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    if (emu::capture_unsafe("cudaFreeHost") != cudaSuccess)
        return cudaErrorStreamCaptureUnsupported;
    if (deferred())
        sync_all();
    emu::free_host_now(p);
    return cudaSuccess;
}

// ---- streams and events ----------------------------------------------------------------------

cudaError_t cudaDeviceSynchronize(void)
{
    if (emu::capture_unsafe("cudaDeviceSynchronize") != cudaSuccess)
        return cudaErrorStreamCaptureUnsupported;
    if (!deferred()) {
        busy_drain(nullptr, true);
        return cudaSuccess;
    }
    sync_all();
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    if (!s)
        return emu::set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(mu);
    *s = new CUstream_st{flags, 0, next_id++, {}};
    streams.insert(*s);
    stream_list.push_back(*s);
    return cudaSuccess;
}

// As CUDA: destroying a stream with work pending lets the work finish.
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s == cudaStreamLegacy)
        return emu::set_error(cudaErrorInvalidValue);
    enter();
    if (!deferred())
        busy_drain(s, false);
    std::unique_lock<std::mutex> g(mu);
    if (deferred())
        drive(g, {back_of(s)}, -1, true);
    streams.erase(s);
    stream_list.erase(std::find(stream_list.begin(), stream_list.end(), s));
    delete s;
    return cudaSuccess;
}

// Refuses s's work while s is capturing (synchronising or querying it), as CUDA does.
static cudaError_t refuse_capturing(cudaStream_t s, const char *what)
{
    if (n_capturing.load() == 0)
        return cudaSuccess;
    std::lock_guard<std::mutex> g(mu);
    capture *c = capturing(s);
    return c ? capture_refuse(c, cudaErrorStreamCaptureUnsupported, what) : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    enter();
    if (cudaError_t e = refuse_capturing(s, "cudaStreamSynchronize of the capturing stream"))
        return e;
    if (!deferred()) {
        busy_drain(s, false);
        return cudaSuccess;
    }
    std::unique_lock<std::mutex> g(mu);
    drive(g, roots_of_stream(stream_of(s)), -1, true);
    return cudaSuccess;
}

// Deferred: runs none, some or all of what the stream waits for (at random), so that polling
// code sees cudaErrorNotReady.
static long poll_budget()
{
    uint64_t r = next_rand();
    return r % 2 ? -1 : (long)(r / 2 % 3);
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    enter();
    if (cudaError_t e = refuse_capturing(s, "cudaStreamQuery of the capturing stream"))
        return e;
    std::unique_lock<std::mutex> g(mu);
    if (!deferred())
        return stream_of(s)->busy ? cudaErrorNotReady : cudaSuccess;
    return drive(g, roots_of_stream(stream_of(s)), poll_budget(), false) ? cudaSuccess
                                                                         : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    if (n_capturing.load()) {
        std::lock_guard<std::mutex> g(mu);
        capture *c = capturing(s);
        if (c && e->cap == c->g.get())
            return cudaSuccess; // recorded earlier in the same single-stream capture: in order
        if (c)
            return capture_refuse(c, cudaErrorStreamCaptureIsolation,
                                  "cudaStreamWaitEvent on an event recorded outside the capture");
        if (captured_event(e))
            emu::die("cudaStreamWaitEvent of another stream on an event recorded in a capture "
                     "(captures that fork into other streams are not emulated)");
    }
    if (!deferred())
        return cudaSuccess;
    std::lock_guard<std::mutex> g(mu);
    if (!event_done(e)) // the wait captures the event's last record, as CUDA's does
        push(stream_of(s), OP_WAIT)->deps.push_back({e->rs, e->rseq});
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    *e = new CUevent_st{flags, 0, 0.0, nullptr, 0};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> g(mu);
        for (CUstream_st *x : stream_list) // a pending record may still run: it forgets e
            for (op *o : x->q)
                if (o->ev == e)
                    o->ev = nullptr;
    }
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    enter();
    if (n_capturing.load()) {
        std::lock_guard<std::mutex> g(mu);
        if (capture *c = capturing(s)) { // a record node; the event itself is not recorded now
            c->g->nodes.push_back({G_RECORD, nullptr, nullptr, nullptr, e, nullptr, 0});
            e->cap = c->g.get();
            return cudaSuccess;
        }
    }
    e->cap = nullptr;
    if (!deferred()) {
        busy_drain(s, false);
        e->t = now_ms();
        e->recorded = 1;
        return cudaSuccess;
    }
    std::lock_guard<std::mutex> g(mu);
    op *o = push(stream_of(s), OP_RECORD);
    o->ev = e;
    e->rs = stream_of(s), e->rseq = o->seq;
    e->recorded = 1;
    return cudaSuccess;
}

// An event last recorded inside an active capture cannot be waited for or queried.
static cudaError_t refuse_captured(cudaEvent_t e)
{
    if (n_capturing.load() == 0)
        return cudaSuccess;
    std::lock_guard<std::mutex> g(mu);
    capture *c = captured_event(e);
    return c ? capture_refuse(c, cudaErrorCapturedEvent, "waiting for a captured event")
             : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    if (cudaError_t err = refuse_captured(e))
        return err;
    if (emu::capture_unsafe("cudaEventSynchronize") != cudaSuccess)
        return cudaErrorStreamCaptureUnsupported;
    if (!deferred())
        return cudaSuccess;
    enter();
    std::unique_lock<std::mutex> g(mu);
    if (!event_done(e))
        drive(g, {{e->rs, e->rseq}}, -1, true);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e)
        return emu::set_error(cudaErrorInvalidValue);
    if (cudaError_t err = refuse_captured(e))
        return err;
    if (!deferred())
        return cudaSuccess;
    enter();
    std::unique_lock<std::mutex> g(mu);
    if (event_done(e))
        return cudaSuccess;
    return drive(g, {{e->rs, e->rseq}}, poll_budget(), false) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!ms || !a || !b || !a->recorded || !b->recorded || (a->flags & cudaEventDisableTiming) ||
        (b->flags & cudaEventDisableTiming))
        return emu::set_error(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> g(mu);
        if (!event_done(a) || !event_done(b))
            return emu::set_error(cudaErrorNotReady);
    }
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
