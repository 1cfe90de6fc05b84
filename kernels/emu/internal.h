// internal.h (gantry CUDA emulator) - what runtime.cc (fibers, launches, the allocation registry)
// and stream.cc (streams, events, the deferred queue, copies) share. Not for emulated programs.
#ifndef GANTRY_EMU_INTERNAL_H
#define GANTRY_EMU_INTERNAL_H

#include <cuda_runtime.h>

namespace emu {

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// GANTRY_EMU_SEED, or the default seed.
uint64_t seed_base();
// Runs a launch that was validated at the call (runtime.cc), on the calling host thread.
void run_grid_now(const launch_cfg &cfg, void (*body)(void *), void *arg);
// Sets the calling thread's cudaGetLastError when e is an error; returns e.
cudaError_t set_error(cudaError_t e);

// The allocation registry (runtime.cc).
// cudaSuccess when p..p+bytes lies inside one device allocation (device) or outside every one
// (host); otherwise prints why and returns cudaErrorInvalidValue (also set as the last error).
cudaError_t check_range(const void *p, size_t bytes, bool device, const char *what);
// True when p is the start of a live device allocation.
bool is_device_alloc(const void *p);
// Frees device allocation p now (cudaFree without its synchronisation).
cudaError_t free_now(void *p);
// True when p..p+bytes lies inside one live pinned host allocation (cudaMallocHost).
bool is_pinned(const void *p, size_t bytes);
// Frees pinned allocation p now.
void free_host_now(void *p);

// Stream capture (stream.cc).
// cudaSuccess, or cudaErrorStreamCaptureUnsupported (also the last error) when an active capture
// forbids the calling thread fn, a call that may synchronise the device: Global and ThreadLocal
// captures of this thread, Global captures of any thread. Those captures are invalidated, as on
// CUDA, and the message says which call it was.
cudaError_t capture_unsafe(const char *fn);
// cudaMallocAsync's allocation p on s: when s is capturing, p becomes the graph's own memory
// (freed with the graph; filled with NaN bits when each launch reaches the allocation).
void capture_alloc(cudaStream_t s, void *p, size_t bytes);

} // namespace emu

#endif
