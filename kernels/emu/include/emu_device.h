/*
 * emu_device.h (gantry CUDA emulator) - device-side CUDA C++ on the CPU: qualifiers, built-in
 * index variables, kernel launches, __syncthreads, warp shuffles and the intrinsics Gantry's
 * kernels use. Included by cuda_runtime.h in C++ translation units; see that header for what the
 * emulator checks and what it cannot.
 *
 * A launch runs on one host thread (the caller's, or in the deferred mode whichever thread runs
 * the queue): blocks one after another, the threads of a block as fibers (one stack each)
 * switched only at barriers. Block-level state lives in thread_local storage of that host
 * thread, so several host threads may run launches at once.
 */
#ifndef GANTRY_EMU_DEVICE_H
#define GANTRY_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
/* Static shared memory: one copy per host thread, which runs one block at a time. */
#define __shared__ static thread_local
#define __constant__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace emu {

/* The built-in variables of the thread (fiber) now running on this host thread; the scheduler
 * sets them at every switch. */
extern thread_local uint3 tid, bid;
extern thread_local dim3 bdim, gdim;

void sync_threads();
/* A warp-wide exchange: every lane of the caller's warp in `mask` publishes `v` (8 bytes) and
 * gets back the value lane `src` published. */
uint64_t warp_exchange(unsigned mask, uint64_t v, int src_lane);
/* A warp-wide gather (all 32 lanes must call it, as mma.sync and ldmatrix need them): every lane
 * publishes n <= EMU_GATHER_MAX bytes at v and gets the warp's buffer, where lane l's bytes
 * start at l * EMU_GATHER_MAX. Valid until the lane's next warp operation (the buffers
 * alternate, so no lane can overwrite it sooner). */
#define EMU_GATHER_MAX 32
const unsigned char *warp_gather(const void *v, size_t n);
int lane_id();
/* cp.async (kernels/tensorcore.h's tc_cp_async16 and its group functions): the calling thread's
 * copy of `bytes` (4, 8 or 16; aligned to that) into the launch's dynamic shared memory, of which
 * the first src_bytes come from src (device memory) and the rest are zeros. The source is read
 * at the call; shared memory is written, per block at random, either at the call or only when
 * cp_async_wait retires the copy's group (the earliest and the latest a GPU may do it), so both
 * a read before the wait (stale bytes) and a copy issued before the barrier that frees its
 * destination (overwritten data) show. cp_async_commit closes the thread's open copies into a
 * group; cp_async_wait(n) retires all but the n newest groups. Copies still in flight when a
 * thread exits are dropped. */
void cp_async(void *dst, const void *src, unsigned bytes, unsigned src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);
/* wgmma's asynchrony (include/mma.h's wgmma_m64n64k16_bf16, kernels/tensorcore.h's tc_wg_*):
 * wgmma_defer keeps a product's n <= 32 results for the thread's accumulators at d, open until
 * wgmma_commit closes them into a group; wgmma_wait(n) writes all but the n newest groups to
 * their accumulators, in order. wgmma_pending(d): the newest kept results for d (a product on
 * d in flight, which the next one on d accumulates onto), or NULL. */
void wgmma_defer(float *d, const float *v, int n);
const float *wgmma_pending(const float *d);
void wgmma_commit();
void wgmma_wait(int pending);
void *dyn_smem();
size_t dyn_smem_bytes(); /* the running launch's dynamic shared memory */

struct launch_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    launch_cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), smem(s), stream(st) {}
};

/* Checks a launch of `kernel` (for cudaFuncSetAttribute) and runs body(arg) once per thread of
 * every block of cfg on cfg.stream: at the call, or later in the deferred mode; then drop(arg).
 * 0, or a cudaError_t (also for cudaGetLastError). The entry point (kernels/emu/runtime.cc). */
int submit_grid(const launch_cfg &cfg, const void *kernel, void (*body)(void *), void *arg,
                void (*drop)(void *));

template <typename... P> struct bound {
    launch_cfg cfg;
    void (*fn)(P...);
    /* Arguments convert to the kernel's parameter types as in a call, and are copied at the
     * call (a launch takes its arguments by value even when it runs later). */
    void operator()(P... a)
    {
        struct call {
            void (*fn)(P...);
            std::tuple<P...> args;
        };
        call *c = new call{fn, std::tuple<P...>(a...)};
        submit_grid(
            cfg, (const void *)fn,
            [](void *p) {
                call *k = (call *)p;
                std::apply(k->fn, k->args);
            },
            c, [](void *p) { delete (call *)p; });
    }
};

template <typename... P> bound<P...> launch(const launch_cfg &cfg, void (*fn)(P...))
{
    return bound<P...>{cfg, fn};
}

/* A value's bytes in the low bytes of a 64-bit exchange slot, and back. */
template <typename T> static inline uint64_t to_slot(T v)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T> static inline T from_slot(uint64_t u)
{
    T r;
    memcpy(&r, &u, sizeof(T));
    return r;
}
template <typename To, typename From> static inline To bit_cast(From v)
{
    static_assert(sizeof(To) == sizeof(From), "bit_cast between sizes");
    To r;
    memcpy(&r, &v, sizeof(r));
    return r;
}

template <typename T> static inline T shfl_xor(unsigned mask, T v, int lane_mask)
{
    return from_slot<T>(warp_exchange(mask, to_slot(v), lane_id() ^ lane_mask));
}
template <typename T> static inline T shfl(unsigned mask, T v, int src)
{
    return from_slot<T>(warp_exchange(mask, to_slot(v), src & 31));
}
template <typename T> static inline T shfl_down(unsigned mask, T v, unsigned d)
{
    int l = lane_id();
    return from_slot<T>(warp_exchange(mask, to_slot(v), l + (int)d < 32 ? l + (int)d : l));
}

} // namespace emu

#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
static constexpr int warpSize = 32;

#define __syncthreads() emu::sync_threads()
/* A warp barrier (the lanes in mask wait for each other), so that shared memory one lane wrote
 * before it and another reads after it is exchanged as on a GPU, and a missing one shows. */
namespace emu {
static inline void sync_warp(unsigned mask = 0xffffffffu)
{
    (void)warp_exchange(mask, 0, lane_id());
}
} // namespace emu
#define __syncwarp(...) emu::sync_warp(__VA_ARGS__)
#define __shfl_xor_sync(mask, v, lm) emu::shfl_xor((mask), (v), (lm))
#define __shfl_sync(mask, v, src) emu::shfl((mask), (v), (src))
#define __shfl_down_sync(mask, v, d) emu::shfl_down((mask), (v), (d))

/* cu2cc.cmake rewrites `kernel<<<cfg>>>(args)` to
 * `emu::launch(emu::launch_cfg(cfg), kernel)(args)` and `extern __shared__ T name[];` to
 * `T *name = (T *)emu::dyn_smem();`. */

static inline float __uint_as_float(unsigned u) { return emu::bit_cast<float>(u); }
static inline unsigned __float_as_uint(float f) { return emu::bit_cast<unsigned>(f); }
static inline float __int_as_float(int u) { return emu::bit_cast<float>(u); }
static inline int __float_as_int(float f) { return emu::bit_cast<int>(f); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
template <typename T> static inline T __ldg(const T *p) { return *p; }

#endif /* GANTRY_EMU_DEVICE_H */
