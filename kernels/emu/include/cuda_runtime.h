/*
 * cuda_runtime.h (gantry CUDA emulator) - the part of the CUDA runtime API that Gantry's .cu files
 * use, executed on the CPU so the kernels' logic can be tested where no GPU is (CI).
 *
 * NOT a GPU and not a simulator of one: memory is host memory and floating point is the host's
 * (no FMA contraction differences, no TF32). What it does check: kernel indexing against the CPU
 * specification, block and warp barriers (__syncthreads, __shfl_xor_sync) reached by every thread
 * that must reach them (a divergent barrier is reported and aborts), launch configurations
 * (block <= 1024 threads, grid dims, dynamic shared memory over 48 KiB without
 * cudaFuncSetAttribute), cudaMemcpy/cudaMemset ranges against the allocation they touch, and, in
 * the ASan build, out-of-bounds accesses inside kernels. Threads of a block are fibers; the order
 * they run in between barriers is shuffled (GANTRY_EMU_SEED), so a missing __syncthreads shows
 * up as a wrong result instead of passing by luck.
 *
 * Streams: by default kernels, copies and memsets run at the call (streams and events order
 * nothing, so a missing event wait between streams is not caught). With GANTRY_EMU_DEFER=1
 * (kernels/emu/stream.cc) they are queued per stream and run later, when the host must observe
 * them, in a random interleaving (GANTRY_EMU_SEED) that keeps stream order, event waits and the
 * legacy default stream's implicit synchronisation: ordering bugs between streams, and host reads
 * or reuse of pinned memory before its stream is synchronised, give wrong results.
 *
 * The .cu sources are compiled as C++ after kernels/emu/cu2cc.cmake rewrites the two pieces of
 * CUDA syntax C++ cannot parse: kernel<<<grid, block, smem, stream>>>(args) and
 * `extern __shared__ T name[];`. See kernels/emu/emu.cmake.
 */
#ifndef GANTRY_EMU_CUDA_RUNTIME_H
#define GANTRY_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#define GANTRY_CUDA_EMU 1

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef struct CUstream_st *cudaStream_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

/* Stream capture (CUDA graphs): what a capture forbids to the threads while it runs. */
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;
typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventBlockingSync 0x1
#define cudaEventDisableTiming 0x2

enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int warpSize;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major, minor;
    int clockRate;
};

const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
#define cudaHostAllocDefault 0x0
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* CUDA graphs by stream capture (kernels/emu/stream.cc): one stream's work between Begin and
 * EndCapture becomes a graph instead of running; a launch of its executable replays that work on
 * any stream, with the arguments, pointers and shapes of the capture. Emulated: a single
 * stream's capture (kernels, emulated library calls, copies to or from device or pinned memory,
 * memsets, event records, cudaMallocAsync/cudaFreeAsync as the graph's own memory, filled with
 * NaN bits at its allocation and its free in every launch). Refused as CUDA refuses them, and the
 * capture invalidated: synchronising or querying the capturing stream, a copy with pageable host
 * memory, an event wait from outside the capture, and, unless the mode is Relaxed, calls that
 * may synchronise the device (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost, cudaMemcpy,
 * cudaDeviceSynchronize, cudaEventSynchronize) on the capturing thread (Global: any thread). Not
 * emulated (the emulator exits saying so): captures that fork into other streams, NCCL inside a
 * capture, graph launches inside a capture. */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
/* Emulator only, for tests: the number of nodes of a graph (kernels, copies, ...). */
size_t emu_graph_nodes(cudaGraph_t graph);

/* Emulator only: 1 when p..p+bytes lies inside one live device allocation (cudaMalloc*). */
int emu_is_device_range(const void *p, size_t bytes);
/* Emulator only: runs run(arg) on stream s in stream order (at the call, or queued in the deferred
 * mode), then drop(arg) (may be NULL) once it ran or can no longer run. For the emulated
 * libraries (cuBLAS, CUB) and kernel launches. run must not call the CUDA API. */
void emu_stream_submit(cudaStream_t s, void (*run)(void *arg), void (*drop)(void *arg), void *arg)
    __attribute__((weak));
/* Emulator only, for emulated libraries that run work on a thread of their own (the emulated
 * NCCL). At the call (the host's, so stream order is the caller's): enqueue an external
 * operation on s; returns its token. On the library's thread: begin waits until the stream's
 * earlier work and the event waits before it have run (the deferred mode runs that work on the
 * calling thread if nobody else does); 1 then, 0 when stopped(ctx) became true first. end says
 * the operation finished (or never will: an abort); only then does later work on s run. While
 * such an operation is pending cudaStreamQuery returns cudaErrorNotReady, and synchronising
 * waits for it. */
unsigned long long emu_stream_external_enqueue(cudaStream_t s);
int emu_stream_external_begin(cudaStream_t s, unsigned long long token, int (*stopped)(void *ctx),
                              void *ctx);
void emu_stream_external_end(cudaStream_t s, unsigned long long token);
/* Emulator only: 1 when stream work is deferred (GANTRY_EMU_DEFER=1 or emu_defer_set). */
int emu_deferred(void);
/* Emulator only, for tests: finishes all queued work, then turns deferral on or off and reseeds
 * the interleaving (the kernels' thread order keeps GANTRY_EMU_SEED). */
void emu_defer_set(int on, unsigned long long seed);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
cudaError_t emu_func_set_attribute(const void *func, int attr, int value);
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr,
                                                                    int value)
{
    return emu_func_set_attribute((const void *)func, (int)attr, value);
}
/* The C++ overloads the real header has: any T** for the allocation functions. */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaHostAlloc(T **p, size_t bytes, unsigned flags)
{
    return cudaHostAlloc((void **)p, bytes, flags);
}
/* Emulator only: f() on stream s in stream order (emu_stream_submit); f is copied. Without the
 * runtime linked in (the BLAS library's own test), f runs at once. */
#include <utility>
template <typename F> static inline void emu_on_stream(cudaStream_t s, F f)
{
    if (!emu_stream_submit) {
        f();
        return;
    }
    F *p = new F(std::move(f));
    emu_stream_submit(s, [](void *a) { (*(F *)a)(); }, [](void *a) { delete (F *)a; }, p);
}
template <typename T>
static inline cudaError_t cudaMallocAsync(T **p, size_t bytes, cudaStream_t s)
{
    return cudaMallocAsync((void **)p, bytes, s);
}
#include "emu_device.h"
#endif

#endif /* GANTRY_EMU_CUDA_RUNTIME_H */
