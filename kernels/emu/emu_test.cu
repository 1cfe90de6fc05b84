// emu_test: the CUDA emulator's own semantics (kernels/emu/): indices, block and warp barriers,
// shared memory, launch checks, memory-range checks, races made visible (within a warp's
// threads and across warps), divergent barriers
// reported, launches from two host threads at once, cp.async's groups (a read before the wait
// or a copy into a buffer still read shows). Written in CUDA syntax and compiled through
// cu2cc like the kernels; emulator-only (some cases check the emulator's diagnostics).
#include <cuda_runtime.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test.h"
#include "kernels/tensorcore.h"

static __global__ void ids_kernel(unsigned *out)
{
    unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[bx * nt + tx] += bx * nt + tx + 1;
}

static void test_indices(void)
{
    dim3 grid(3, 2, 2), block(8, 4, 2);
    unsigned n = 3 * 2 * 2 * 8 * 4 * 2, *d = NULL, *h = (unsigned *)calloc(n, sizeof(unsigned));
    TEST_CHECK(cudaMalloc(&d, n * sizeof(unsigned)) == cudaSuccess);
    cudaMemset(d, 0, n * sizeof(unsigned));
    ids_kernel<<<grid, block>>>(d);
    TEST_CHECK(cudaGetLastError() == cudaSuccess);
    cudaMemcpy(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        bad += h[i] != i + 1; // every (block, thread) ran exactly once
    TEST_EQ_INT(bad, 0);
    cudaFree(d);
    free(h);
}

static __device__ float wsum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// out[block] = sum of in[block * blockDim .. +blockDim), every thread checks it got the same
static __global__ void block_sum_kernel(float *out, int *agree, const float *in)
{
    __shared__ float part[32];
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = wsum(v);
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0f;
    v = wsum(v);
    __syncthreads();
    if (threadIdx.x == 0)
        part[0] = v;
    __syncthreads();
    if (part[0] != v)
        agree[blockIdx.x] = 0;
    if (threadIdx.x == 0)
        out[blockIdx.x] = v;
}

static void test_block_sum(void)
{
    for (int threads = 32; threads <= 1024; threads *= 2) {
        int blocks = 5, n = blocks * threads;
        float *h = (float *)malloc(n * sizeof(float)), *din, *dout, got[5];
        int *dag, ag[5];
        for (int i = 0; i < n; i++)
            h[i] = (float)(i % 7) - 3.0f; // small integers: exact in any order
        cudaMalloc(&din, n * sizeof(float));
        cudaMalloc(&dout, blocks * sizeof(float));
        cudaMalloc(&dag, blocks * sizeof(int));
        cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice);
        for (int b = 0; b < blocks; b++)
            ag[b] = 1;
        cudaMemcpy(dag, ag, sizeof(ag), cudaMemcpyHostToDevice);
        block_sum_kernel<<<blocks, threads>>>(dout, dag, din);
        TEST_CHECK(cudaGetLastError() == cudaSuccess);
        cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost);
        cudaMemcpy(ag, dag, sizeof(ag), cudaMemcpyDeviceToHost);
        for (int b = 0; b < blocks; b++) {
            float want = 0.0f;
            for (int i = 0; i < threads; i++)
                want += h[b * threads + i];
            TEST_NEAR(got[b], want, 0.0);
            TEST_EQ_INT(ag[b], 1);
        }
        cudaFree(din), cudaFree(dout), cudaFree(dag);
        free(h);
    }
}

// Thread 0 fills dynamic shared memory; the others read it without a barrier between.
static __global__ void racy_kernel(float *out)
{
    extern __shared__ float sh[];
    if (threadIdx.x == 0)
        sh[0] = 1.0f;
    out[threadIdx.x] = sh[0]; // missing __syncthreads() above
}

static __global__ void fixed_kernel(float *out)
{
    extern __shared__ float sh[];
    if (threadIdx.x == 0)
        sh[0] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = sh[0];
}

static int count_ones(void (*k)(float *))
{
    float *d, h[256];
    cudaMalloc(&d, sizeof(h));
    k<<<1, 256, sizeof(float)>>>(d);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    cudaFree(d);
    int ones = 0;
    for (int i = 0; i < 256; i++)
        ones += h[i] == 1.0f;
    return ones;
}

// A missing barrier gives a wrong answer (threads run in shuffled order, shared memory starts
// as NaN), not a lucky right one.
static void test_race_visible(void)
{
    TEST_EQ_INT(count_ones(fixed_kernel), 256);
    TEST_CHECK(count_ones(racy_kernel) < 256);
}

// Across warps: each warp reads the next warp's shared-memory slot after 8 shuffles and then,
// after 8 more, overwrites its own; without a __syncthreads between the read and the write a
// warp that runs ahead overwrites a slot that a slower warp has not read yet. Warps that moved in
// lock step (one shuffle each per round) would never show it; the emulator lets some warps of
// each block run ahead to their next barrier, as a GPU may.
template <bool FIXED> static __global__ void warps_kernel(float *out)
{
    extern __shared__ float sh[];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    if (lane == 0)
        sh[w] = (float)(w + 1);
    __syncthreads();
    float v = 0.0f;
    for (int i = 0; i < 8; i++)
        v += __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    const float seen = sh[(w + 1) % nw];
    for (int i = 0; i < 8; i++)
        v += __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    if (FIXED)
        __syncthreads();
    if (lane == 0)
        sh[w] = -v;
    out[threadIdx.x] = seen;
}

// Launches (of 8) in which some thread read an overwritten slot.
static int warp_races(void (*k)(float *))
{
    float *d, h[128];
    int seen = 0;
    cudaMalloc(&d, sizeof(h));
    for (int run = 0; run < 8; run++) {
        k<<<1, 128, 4 * sizeof(float)>>>(d);
        cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < 128; i++)
            bad |= h[i] != (float)((i / 32 + 1) % 4 + 1);
        seen += bad;
    }
    cudaFree(d);
    return seen;
}

static void test_warp_race_visible(void)
{
    TEST_EQ_INT(warp_races(warps_kernel<true>), 0);
    TEST_CHECK(warp_races(warps_kernel<false>) > 0);
}

static __global__ void big_smem_kernel(float *out)
{
    extern __shared__ float sh[];
    sh[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x] + sh[16383];
}

/* cp.async: 64 threads, each copies its 16 bytes of src (4 floats) into shared memory in group
 * 1, and 16 bytes into a second buffer in group 2 (zero fill for odd threads); then WAIT
 * (-1: none, else tc_cp_wait<WAIT>), a barrier, and out gets the neighbour's chunk of both
 * buffers (8 floats a thread). */
template <int WAIT> static __global__ void cp_kernel(float *out, const float *src)
{
    extern __shared__ float sh[];
    const int i = threadIdx.x, n = blockDim.x;
    tc_cp_async16(sh + 4 * i, src + 4 * i, true);
    tc_cp_commit();
    tc_cp_async16(sh + 4 * (n + i), src + 4 * i, i % 2 == 0);
    tc_cp_commit();
    if constexpr (WAIT == 0)
        tc_cp_wait<0>();
    else if constexpr (WAIT == 1)
        tc_cp_wait<1>();
    __syncthreads();
    const int j = (i + 1) % n;
    for (int k = 0; k < 4; k++) {
        out[8 * i + k] = sh[4 * j + k];
        out[8 * i + 4 + k] = sh[4 * (n + j) + k];
    }
}

/* Launches (of 16) in which some thread saw a wrong value in the first buffer (bad1) or the
 * second (bad2). */
template <int WAIT> static void cp_runs(int *bad1, int *bad2)
{
    float hs[256], h[512], *src, *out;
    for (int i = 0; i < 256; i++)
        hs[i] = (float)(i + 1);
    cudaMalloc(&src, sizeof(hs));
    cudaMalloc(&out, sizeof(h));
    cudaMemcpy(src, hs, sizeof(hs), cudaMemcpyHostToDevice);
    *bad1 = *bad2 = 0;
    for (int run = 0; run < 16; run++) {
        cp_kernel<WAIT><<<1, 64, 2 * 64 * 16>>>(out, src);
        cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
        int b1 = 0, b2 = 0;
        for (int i = 0; i < 64; i++)
            for (int k = 0; k < 4; k++) {
                const int j = (i + 1) % 64;
                b1 |= h[8 * i + k] != hs[4 * j + k];
                b2 |= h[8 * i + 4 + k] != (j % 2 == 0 ? hs[4 * j + k] : 0.0f);
            }
        *bad1 += b1, *bad2 += b2;
    }
    cudaFree(src);
    cudaFree(out);
}

static void test_cp_async(void)
{
    int b1, b2;
    cp_runs<0>(&b1, &b2); /* everything waited for: right, zero fill included */
    TEST_EQ_INT(b1, 0);
    TEST_EQ_INT(b2, 0);
    cp_runs<1>(&b1, &b2); /* the newest group may still be in flight: the older one is there */
    TEST_EQ_INT(b1, 0);
    TEST_CHECK(b2 > 0);
    cp_runs<-1>(&b1, &b2); /* no wait: stale reads show (in the blocks whose copies land late) */
    TEST_CHECK(b1 > 0 && b2 > 0);
    TEST_CHECK(b1 < 16); /* and some blocks took the other extreme, landing at the call */
}

static __global__ void cp_misaligned_kernel(float *out)
{
    extern __shared__ float sh[];
    tc_cp_async16(sh + 2, out, true); /* 8 bytes into shared memory: not 16-byte aligned */
}

static __global__ void cp_global_dst_kernel(float *out)
{
    extern __shared__ float sh[];
    tc_cp_async16(out + 4, sh, true); /* the destination must be shared memory */
}

static void test_launch_checks(void)
{
    float *d;
    cudaMalloc(&d, 64 * sizeof(float));
    ids_kernel<<<1, 2048>>>((unsigned *)d); // over 1024 threads
    TEST_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    TEST_CHECK(cudaGetLastError() == cudaSuccess); // reading clears it
    ids_kernel<<<0, 32>>>((unsigned *)d);
    TEST_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    big_smem_kernel<<<1, 64, 65536>>>(d); // 64 KiB without the opt-in
    TEST_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    TEST_CHECK(cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    65536) == cudaSuccess);
    big_smem_kernel<<<1, 64, 65536>>>(d);
    TEST_CHECK(cudaGetLastError() == cudaSuccess);
    float h[64];
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    TEST_CHECK(h[0] != h[0]); // sh[16383] was never written: the NaN poison shows
    cudaFree(d);
}

static void test_memory_checks(void)
{
    float *d, h[16] = {0};
    TEST_CHECK(cudaMalloc(&d, 8 * sizeof(float)) == cudaSuccess);
    TEST_CHECK(cudaMemcpy(d, h, 8 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    TEST_CHECK(cudaMemcpy(d, h, 9 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    TEST_CHECK(cudaMemcpy(d + 4, h, 4 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    TEST_CHECK(cudaMemcpy(h, d + 1, 8 * sizeof(float), cudaMemcpyDeviceToHost) ==
               cudaErrorInvalidValue);
    TEST_CHECK(cudaMemcpy(h, h + 8, 8 * sizeof(float), cudaMemcpyDeviceToHost) ==
               cudaErrorInvalidValue); // a host pointer named as the device source
    TEST_CHECK(cudaMemset(d, 0, 32) == cudaSuccess);
    TEST_CHECK(cudaMemset(d, 0, 33) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    TEST_CHECK(cudaFree(d) == cudaSuccess);
    TEST_CHECK(cudaFree(d) == cudaErrorInvalidValue); // double free
    (void)cudaGetLastError();
}

// The device's memory (GANTRY_EMU_MEM_MB, less GANTRY_EMU_MEM_OTHERS_MB): cudaMemGetInfo follows
// the live allocations, and an allocation past it fails as on a GPU, until memory is freed.
static void test_memory_limit(void)
{
    setenv("GANTRY_EMU_MEM_MB", "64", 1);
    setenv("GANTRY_EMU_MEM_OTHERS_MB", "16", 1);
    size_t free0 = 0, total = 0, free1 = 0;
    TEST_CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    TEST_CHECK(total == (size_t)64 << 20);
    TEST_CHECK(free0 <= (size_t)48 << 20 && free0 > (size_t)40 << 20); // (others: 16, this: < 8)
    void *a = NULL, *b = NULL, *c = NULL;
    TEST_CHECK(cudaMalloc(&a, (size_t)20 << 20) == cudaSuccess);
    TEST_CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    TEST_CHECK(free1 == free0 - ((size_t)20 << 20));
    TEST_CHECK(cudaMalloc(&b, free1 + 1) == cudaErrorMemoryAllocation);
    TEST_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
    TEST_CHECK(cudaGetLastError() == cudaSuccess); // not sticky
    TEST_CHECK(cudaMalloc(&b, free1) == cudaSuccess);
    TEST_CHECK(cudaMallocAsync(&c, 256, 0) == cudaErrorMemoryAllocation);
    (void)cudaGetLastError();
    TEST_CHECK(cudaFree(a) == cudaSuccess);
    TEST_CHECK(cudaMallocAsync(&c, 256, 0) == cudaSuccess);
    TEST_CHECK(cudaFreeAsync(c, 0) == cudaSuccess);
    TEST_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    TEST_CHECK(cudaFree(b) == cudaSuccess);
    TEST_CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    TEST_CHECK(free1 == free0);
    unsetenv("GANTRY_EMU_MEM_MB");
    unsetenv("GANTRY_EMU_MEM_OTHERS_MB");
}

static __global__ void divergent_kernel(float *out)
{
    if (threadIdx.x >= 16)
        return;
    __syncthreads(); // the other 16 threads exited: undefined on a GPU
    out[threadIdx.x] = 1.0f;
}

static __global__ void partial_warp_shuffle_kernel(float *out)
{
    if (threadIdx.x % 2)
        return;
    out[threadIdx.x] = wsum(1.0f); // full mask, half the lanes gone
}

// How a child process that launches k<<<1, threads, 256>>> on 32 floats ended (waitpid status).
static int child_status(void (*k)(float *), unsigned threads)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        float *d;
        cudaMalloc(&d, 32 * sizeof(float));
        k<<<1, threads, 256>>>(d); // 256 bytes of dynamic shared memory for those that use it
        cudaDeviceSynchronize(); // deferred mode (GANTRY_EMU_DEFER): the launch runs here
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static int dies(void (*k)(float *))
{
    int st = child_status(k, 32);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void test_divergence_reported(void)
{
    TEST_CHECK(dies(divergent_kernel));
    TEST_CHECK(dies(partial_warp_shuffle_kernel));
    TEST_CHECK(dies(cp_misaligned_kernel));
    TEST_CHECK(dies(cp_global_dst_kernel));
}

#if defined(__SANITIZE_ADDRESS__)
static __global__ void oob_kernel(float *out)
{
    out[threadIdx.x] = 1.0f; // 33 threads, 32 floats
}

// In the ASan build a kernel's out-of-bounds write is caught like any heap overflow.
static void test_oob_caught(void)
{
    int st = child_status(oob_kernel, 33);
    /* an ASan report exits 1, or aborts with ASAN_OPTIONS=abort_on_error=1 (make unit-asan) */
    TEST_CHECK((WIFEXITED(st) && WEXITSTATUS(st) != 0) || WIFSIGNALED(st));
}

static __global__ void deep_kernel(float *out)
{
    volatile char buf[256]; /* a frame with redzones on every fiber stack */
    buf[threadIdx.x % 256] = 1;
    __syncthreads(); /* every fiber switches at least once */
    out[threadIdx.x % 32] = buf[threadIdx.x % 256];
}

static void *deep_launcher(void *arg)
{
    deep_kernel<<<1, 256>>>((float *)arg);
    cudaDeviceSynchronize();
    return NULL; /* the thread's fiber stacks are unmapped as it exits */
}

/* Memory mapped where a finished host thread's fiber stacks were is clean: their poisoned
 * frames (fiber_main's never returns) must not outlive the unmapping, or the next user of the
 * addresses gets a false stack-buffer-underflow (at exit, from inside LeakSanitizer's report,
 * which then hung until ctest's timeout). */
static void test_stacks_unpoisoned(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        float *d;
        pthread_t t;
        cudaMalloc(&d, 32 * sizeof(float));
        pthread_create(&t, NULL, deep_launcher, d);
        pthread_join(t, NULL);
        for (int i = 0; i < 8; i++) { /* the freed stacks' addresses, most likely */
            size_t n = (size_t)64 << 20;
            void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m != MAP_FAILED)
                memset(m, 1, n); /* checked against the shadow */
        }
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
#endif

static void *launcher(void *arg)
{
    int *ok = (int *)arg;
    for (int r = 0; r < 20; r++) {
        int blocks = 3, threads = 256, n = blocks * threads;
        float *din, *dout, got[3];
        int *dag, ag[3] = {1, 1, 1};
        float *h = (float *)malloc(n * sizeof(float));
        for (int i = 0; i < n; i++)
            h[i] = 1.0f;
        cudaMalloc(&din, n * sizeof(float));
        cudaMalloc(&dout, sizeof(got));
        cudaMalloc(&dag, sizeof(ag));
        cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemcpy(dag, ag, sizeof(ag), cudaMemcpyHostToDevice);
        block_sum_kernel<<<blocks, threads>>>(dout, dag, din);
        cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost);
        for (int b = 0; b < blocks; b++)
            if (got[b] != 256.0f)
                *ok = 0;
        cudaFree(din), cudaFree(dout), cudaFree(dag);
        free(h);
    }
    return NULL;
}

static void test_two_host_threads(void)
{
    pthread_t t[2];
    int ok[2] = {1, 1};
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, launcher, &ok[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    TEST_EQ_INT(ok[0], 1);
    TEST_EQ_INT(ok[1], 1);
}

int main(void)
{
    TEST_RUN(test_indices);
    TEST_RUN(test_block_sum);
    TEST_RUN(test_race_visible);
    TEST_RUN(test_warp_race_visible);
    TEST_RUN(test_launch_checks);
    TEST_RUN(test_cp_async);
    TEST_RUN(test_memory_checks);
    TEST_RUN(test_memory_limit);
    TEST_RUN(test_divergence_reported);
    TEST_RUN(test_two_host_threads);
#if defined(__SANITIZE_ADDRESS__)
    TEST_RUN(test_oob_caught);
    TEST_RUN(test_stacks_unpoisoned);
#endif
    return test_summary();
}
