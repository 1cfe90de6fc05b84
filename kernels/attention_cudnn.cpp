// cuDNN's fused attention (its scaled-dot-product graph, a FlashAttention kernel of NVIDIA's) as
// one more variant of the bf16 fused attention (kernels/gpu.h, ATTN_FWD_CUDNN / ATTN_BWD_CUDNN),
// through the cuDNN frontend's graph API. Why: on Hopper it is written with the bulk tensor copy
// engine, wgmma and warp specialisation, which is where our hand-written kernels lag
// (docs/gpu.md); it is a library NVIDIA keeps, and PyTorch's scaled_dot_product_attention can
// take it too. Why not only it: it is an extra 1 GB dependency that many images lack, its
// backward's speed depends on the version, and our own kernels are the tested default.
//
// So cuDNN is loaded at run time (dlopen: $GANTRY_CUDNN_LIB, else libcudnn.so.9 on the library
// path; GANTRY_CUDNN=0 never opens it) and only ever used through the autotune (kernels/tune.cu), which checks its results
// against the default kernels' on this GPU before taking it. Nothing links against it: a build
// with the frontend's headers runs the same everywhere; where cuDNN is missing, the variant says
// why and is not timed.
//
// The same tensors as the default kernels: q, k and v read in place from qkv (B, T, 3C) through
// strides, out (B, T, C), lse (B, NH, T) as cuDNN's "stats" (the log-sum-exp of each row's
// scaled scores, natural log, as ours), dq, dk and dv written in place into dqkv16, and the
// padding mask from len (one length per sequence, the same for queries and keys). What cuDNN
// leaves in padding rows is not specified, so the callers (attention.cu,
// attention_cudnn_fixup_*) write the zeros ours write there and sum the qkv bias gradient.
#include "kernels/gpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifndef GANTRY_WITH_CUDNN

// Built without the cuDNN frontend's headers (or on the CPU emulator): never available.
extern "C" int attention_cudnn_load(char *why, size_t n)
{
    if (n)
        snprintf(why, n, "%s",
#ifdef GANTRY_EMU
                 "the CPU emulator has no cuDNN"
#else
                 "built without the cuDNN frontend's headers (hack/install-deps.sh --cuda fetches "
                 "them)"
#endif
        );
    return 0;
}

extern "C" int attention_forward_cudnn_bf16(uint16_t *, float *, const uint16_t *, const int *,
                                            int, int, int, int, struct CUstream_st *, char *why,
                                            size_t n)
{
    return !attention_cudnn_load(why, n);
}

extern "C" int attention_backward_cudnn_bf16(uint16_t *, const uint16_t *, const uint16_t *,
                                             const uint16_t *, const float *, const int *, int, int,
                                             int, int, struct CUstream_st *, char *why, size_t n)
{
    return !attention_cudnn_load(why, n);
}

#else

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <memory>
#include <mutex>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

// The frontend's dynamic loading reads its symbols from this handle.
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

std::mutex mu; // the handle, the plans and the load state (one process may train from threads)
int loaded = -1; // -1: not tried, 0: failed (load_why says why), 1: loaded
char load_why[256];
cudnnHandle_t handle;
int handle_device = -1;

void say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void say(char *why, size_t n, const char *fmt, ...)
{
    if (!n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

// Loads libcudnn once; under mu.
int load_locked()
{
    if (loaded >= 0)
        return loaded;
    loaded = 0;
    const char *off = getenv("GANTRY_CUDNN");
    if (off && (!strcmp(off, "0") || !strcmp(off, "false") || !strcmp(off, "no"))) {
        snprintf(load_why, sizeof(load_why), "not opened (GANTRY_CUDNN=%s)", off);
        return 0;
    }
    const char *env = getenv("GANTRY_CUDNN_LIB");
    const char *lib = env && *env ? env : "libcudnn.so.9";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_why, sizeof(load_why),
                 "%s not loaded (%s); put cuDNN 9's lib folder on LD_LIBRARY_PATH or name the "
                 "library in GANTRY_CUDNN_LIB",
                 lib, e ? e : "not found");
        return 0;
    }
    fe::cudnn_dlhandle = h;
    size_t v = 0;
    try {
        v = fe::detail::get_backend_version();
    } catch (const std::exception &e) {
        snprintf(load_why, sizeof(load_why), "%s: %s", lib, e.what());
        return 0;
    }
    // padding masks in the fused graph and the deterministic backward: cuDNN 9.0 and later
    if (v < 90000) {
        snprintf(load_why, sizeof(load_why), "%s is cuDNN %zu, the fused attention needs 9.0 or "
                 "later", lib, v);
        return 0;
    }
    snprintf(load_why, sizeof(load_why), "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    loaded = 1;
    return 1;
}

// One built graph per direction and shape, or the reason cuDNN refused it (g NULL, kept so that
// a refused shape is not tried again every step).
struct plan {
    int bwd, B, T, NH, hs;
    char refused[256];
    std::shared_ptr<fe::graph::Graph> g;
    std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, o, stats, sq, skv, dout, dq, dk, dv;
    int64_t ws;
};
constexpr size_t kPlansMax = 16;
std::vector<std::shared_ptr<plan>> plans; // oldest first

using TA = fe::graph::Tensor_attributes;

std::shared_ptr<TA> tensor(fe::graph::Graph &g, const char *name, int B, int NH, int T, int hs,
                           int64_t ld)
{
    return g.tensor(TA().set_name(name).set_dim({B, NH, T, hs}).set_stride(
        {(int64_t)T * ld, hs, ld, 1}));
}

std::shared_ptr<TA> lengths(fe::graph::Graph &g, const char *name, int B)
{
    return g.tensor(TA().set_name(name).set_dim({B, 1, 1, 1}).set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

// The graph for (bwd, B, T, NH, hs), described (not yet built)
std::shared_ptr<plan> describe(int bwd, int B, int T, int NH, int hs)
{
    auto p = std::make_shared<plan>();
    p->bwd = bwd, p->B = B, p->T = T, p->NH = NH, p->hs = hs, p->refused[0] = '\0';
    p->g = std::make_shared<fe::graph::Graph>();
    fe::graph::Graph &g = *p->g;
    g.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t C = (int64_t)NH * hs;
    p->q = tensor(g, "q", B, NH, T, hs, 3 * C);
    p->k = tensor(g, "k", B, NH, T, hs, 3 * C);
    p->v = tensor(g, "v", B, NH, T, hs, 3 * C);
    p->sq = lengths(g, "seq_q", B);
    p->skv = lengths(g, "seq_kv", B);
    const float scale = 1.0f / sqrtf((float)hs);
    if (!bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_padding_mask(true)
                       .set_seq_len_q(p->sq)
                       .set_seq_len_kv(p->skv);
        auto [o, stats] = g.sdpa(p->q, p->k, p->v, opt);
        p->o = o, p->stats = stats;
        o->set_output(true).set_dim({B, NH, T, hs}).set_stride({(int64_t)T * C, hs, C, 1});
        stats->set_output(true)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, NH, T, 1})
            .set_stride({(int64_t)NH * T, T, 1, 1});
    } else {
        p->o = tensor(g, "o", B, NH, T, hs, C);
        p->dout = tensor(g, "dout", B, NH, T, hs, C);
        p->stats = g.tensor(TA().set_name("stats")
                                .set_dim({B, NH, T, 1})
                                .set_stride({(int64_t)NH * T, T, 1, 1})
                                .set_data_type(fe::DataType_t::FLOAT));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(scale)
                       .set_padding_mask(true)
                       .set_seq_len_q(p->sq)
                       .set_seq_len_kv(p->skv)
                       .set_deterministic_algorithm(true); // as ours: the same bits every step
        auto [dq, dk, dv] = g.sdpa_backward(p->q, p->k, p->v, p->o, p->dout, p->stats, opt);
        p->dq = dq, p->dk = dk, p->dv = dv;
        for (auto &t : {dq, dk, dv})
            t->set_output(true).set_dim({B, NH, T, hs}).set_stride(
                {(int64_t)T * 3 * C, hs, 3 * C, 1});
    }
    return p;
}

// The graph for (bwd, B, T, NH, hs), built, or refused (g NULL, p->refused says why). Under mu.
std::shared_ptr<plan> build(int bwd, int B, int T, int NH, int hs)
{
    auto p = describe(bwd, B, T, NH, hs);
    fe::error_t e = p->g->build(handle, {fe::HeurMode_t::A});
    if (e.is_good())
        e = p->g->get_workspace_size(p->ws);
    if (e.is_bad()) {
        snprintf(p->refused, sizeof(p->refused),
                 "cuDNN has no %s attention for batch %d x %d tokens, %d heads of %d: %s",
                 bwd ? "backward" : "forward", B, T, NH, hs, e.get_message().c_str());
        p->g.reset();
    }
    return p;
}

// The plan for the shape, built on first use (not while the stream is being captured into a CUDA
// graph: building may load modules, which a capture forbids); NULL with why. Under mu.
std::shared_ptr<plan> get(int bwd, int B, int T, int NH, int hs, cudaStream_t stream, char *why,
                          size_t n)
{
    if (!load_locked()) {
        say(why, n, "%s", load_why);
        return nullptr;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        say(why, n, "no CUDA device");
        return nullptr;
    }
    if (handle_device != dev) { // first use, or (a test's) other device: a handle of its own
        if (handle_device >= 0) {
            fe::detail::destroy_handle(handle);
            plans.clear();
        }
        handle_device = -1;
        if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
            say(why, n, "cudnnCreate failed on device %d", dev);
            return nullptr;
        }
        handle_device = dev;
    }
    for (auto &p : plans)
        if (p->bwd == bwd && p->B == B && p->T == T && p->NH == NH && p->hs == hs) {
            if (p->g)
                return p;
            say(why, n, "%s", p->refused);
            return nullptr;
        }
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        say(why, n, "no cuDNN plan for batch %d x %d tokens yet, and none is built while a CUDA "
            "graph is captured", B, T);
        return nullptr;
    }
    auto p = build(bwd, B, T, NH, hs);
    if (plans.size() >= kPlansMax)
        plans.erase(plans.begin());
    plans.push_back(p);
    if (p->g)
        return p;
    say(why, n, "%s", p->refused);
    return nullptr;
}

using pack_t = std::unordered_map<std::shared_ptr<TA>, void *>;

int run(const plan &p, pack_t &pack, cudaStream_t stream, char *why, size_t n)
{
    if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS) {
        say(why, n, "cudnnSetStream failed");
        return 1;
    }
    void *ws = nullptr;
    if (p.ws > 0 && cudaMallocAsync(&ws, (size_t)p.ws, stream) != cudaSuccess) {
        say(why, n, "no %lld bytes of GPU memory for cuDNN's workspace", (long long)p.ws);
        return 1;
    }
    fe::error_t e = p.g->execute(handle, pack, ws);
    if (ws)
        cudaFreeAsync(ws, stream);
    if (e.is_bad()) {
        say(why, n, "cuDNN's attention %s failed: %s", p.bwd ? "backward" : "forward",
            e.get_message().c_str());
        return 1;
    }
    return 0;
}

// One call of direction bwd: the plan, the tensors both directions read (q, k and v in qkv, the
// lengths), those bind() adds, and cuDNN's errors and exceptions turned into 1 and why.
template <typename F>
int call(int bwd, const uint16_t *qkv, const int *len, int B, int T, int C, int NH,
         cudaStream_t stream, char *why, size_t n, F bind)
{
    std::lock_guard<std::mutex> lock(mu);
    try {
        auto p = get(bwd, B, T, NH, C / NH, stream, why, n);
        if (!p)
            return 1;
        pack_t pack = {{p->q, (void *)qkv},
                       {p->k, (void *)(qkv + C)},
                       {p->v, (void *)(qkv + 2 * C)},
                       {p->sq, (void *)len},
                       {p->skv, (void *)len}};
        bind(*p, pack);
        return run(*p, pack, stream, why, n);
    } catch (const std::exception &e) {
        say(why, n, "cuDNN's attention %s: %s", bwd ? "backward" : "forward", e.what());
        return 1;
    }
}

} // namespace

extern "C" int attention_cudnn_load(char *why, size_t n)
{
    std::lock_guard<std::mutex> lock(mu);
    const int ok = load_locked();
    say(why, n, "%s", load_why);
    return ok;
}

extern "C" int attention_forward_cudnn_bf16(uint16_t *out, float *lse, const uint16_t *qkv,
                                            const int *len, int B, int T, int C, int NH,
                                            struct CUstream_st *stream, char *why, size_t n)
{
    return call(0, qkv, len, B, T, C, NH, stream, why, n, [&](const plan &p, pack_t &pack) {
        pack[p.o] = out;
        pack[p.stats] = lse;
    });
}

extern "C" int attention_backward_cudnn_bf16(uint16_t *dqkv16, const uint16_t *dout,
                                             const uint16_t *qkv, const uint16_t *out,
                                             const float *lse, const int *len, int B, int T,
                                             int C, int NH, struct CUstream_st *stream, char *why,
                                             size_t n)
{
    return call(1, qkv, len, B, T, C, NH, stream, why, n, [&](const plan &p, pack_t &pack) {
        pack[p.o] = (void *)out;
        pack[p.dout] = (void *)dout;
        pack[p.stats] = (void *)lse;
        pack[p.dq] = dqkv16;
        pack[p.dk] = dqkv16 + C;
        pack[p.dv] = dqkv16 + 2 * C;
    });
}

#endif
