/*
 * cuda_common.h - error checking and helpers shared by the .cu files.
 *
 * CUDA_CHECK and NCCL_CHECK are fatal (the worker's policy, STYLE.md §3): they print the host,
 * file:line, the call and the error with a hint, then exit with a retryable code (1), so the
 * operator restarts the gang from the last checkpoint. They never return from the caller.
 */
#ifndef GANTRY_CUDA_COMMON_H
#define GANTRY_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CEIL_DIV(a, b) (((a) + (b)-1) / (b))

static inline void cuda_check_(cudaError_t err, const char *call, const char *file, int line)
{
    if (err != cudaSuccess) {
        char host[256] = "?";
        gethostname(host, sizeof(host) - 1);
        fprintf(stderr,
                "[%s] CUDA error at %s:%d: %s: %s\n"
                "HINT: check `nvidia-smi`, the pod's nvidia.com/gpu limit and CUDA_VISIBLE_DEVICES; "
                "an out-of-memory error means a smaller batchSize or maxSeqLen\n",
                host, file, line, call, cudaGetErrorString(err));
        exit(1);
    }
}
#define CUDA_CHECK(call) cuda_check_((call), #call, __FILE__, __LINE__)

/* True when a usable device is present; tests use it to exit 77 (skipped) elsewhere. */
static inline int cuda_have_device(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#endif /* GANTRY_CUDA_COMMON_H */
