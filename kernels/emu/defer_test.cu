// defer_test: the CUDA emulator's deferred mode (kernels/emu/stream.cc, GANTRY_EMU_DEFER). Each
// ordering mistake a program can make between streams, or between a stream and the host, must
// give a wrong result for at least one of SEEDS interleavings, and the same program with the
// ordering right must be right for every seed: a missing cudaStreamWaitEvent, a non-blocking
// stream read from the legacy stream, a host read of pinned memory before the stream is
// synchronised, a pinned staging buffer reused while its upload is queued, an NCCL collective
// that does not wait for its input's event. Also: pageable copies behave as CUDA's (staged or
// synchronous), launch arguments are taken at the call, cudaStreamQuery polls, cudaFreeAsync and
// the emulated cuBLAS and CUB calls are stream-ordered. The test turns deferral on itself
// (emu_defer_set), so it runs in every build.
#include <cub/device/device_radix_sort.cuh>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"

#define SEEDS 16
#define N 256

static __global__ void fill_kernel(int *buf, int v, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buf[i] = v;
}

static __global__ void copy_kernel(int *out, const int *in, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = in[i];
}

// 1 when every one of the n ints at host p is v.
static int all_eq(const int *p, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

// Device buffer of n ints, zeroed, with nothing pending.
static int *dzero(int n)
{
    int *d = NULL;
    cudaMalloc(&d, n * sizeof(int));
    cudaMemset(d, 0, n * sizeof(int));
    cudaDeviceSynchronize();
    return d;
}

// One round: producer on a, consumer on b, with or without the event between them; 1 when the
// consumer saw the producer's values.
static int producer_consumer(int seed, int with_wait)
{
    cudaStream_t a, b;
    cudaEvent_t ev;
    int h[N];
    emu_defer_set(1, seed);
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int *buf = dzero(N), *out = dzero(N);
    fill_kernel<<<1, 64, 0, a>>>(buf, seed + 1, N);
    if (with_wait) {
        cudaEventRecord(ev, a);
        cudaStreamWaitEvent(b, ev, 0);
    }
    copy_kernel<<<1, 64, 0, b>>>(out, buf, N);
    cudaStreamSynchronize(b);
    cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaEventDestroy(ev);
    cudaFree(buf);
    cudaFree(out);
    return all_eq(h, N, seed + 1);
}

static void test_missing_wait_exposed(void)
{
    int wrong = 0, right = 0;
    for (int s = 0; s < SEEDS; s++) {
        wrong += !producer_consumer(s, 0);
        right += producer_consumer(s, 1);
    }
    TEST_CHECK(wrong > 0); // the race shows for some interleaving
    TEST_EQ_INT(right, SEEDS);
}

// The legacy default stream waits for blocking streams, not for non-blocking ones.
static int legacy_round(int seed, unsigned flags)
{
    cudaStream_t a;
    int h[N];
    emu_defer_set(1, seed);
    cudaStreamCreateWithFlags(&a, flags);
    int *buf = dzero(N), *out = dzero(N);
    fill_kernel<<<1, 64, 0, a>>>(buf, seed + 7, N);
    copy_kernel<<<1, 64>>>(out, buf, N); // legacy stream
    cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
    cudaStreamDestroy(a);
    cudaFree(buf);
    cudaFree(out);
    return all_eq(h, N, seed + 7);
}

static void test_legacy_stream(void)
{
    int blocking_ok = 0, nonblocking_wrong = 0;
    for (int s = 0; s < SEEDS; s++) {
        blocking_ok += legacy_round(s, cudaStreamDefault);
        nonblocking_wrong += !legacy_round(s, cudaStreamNonBlocking);
    }
    TEST_EQ_INT(blocking_ok, SEEDS);
    TEST_CHECK(nonblocking_wrong > 0);
}

// A device-to-host copy into pinned memory lands when the stream is synchronised, not before;
// into pageable memory the call returns with the bytes there.
static void test_pinned_read_before_sync(void)
{
    int *pinned = NULL, pageable[N], stale = 0, ok = 0;
    cudaMallocHost(&pinned, N * sizeof(int));
    for (int s = 0; s < SEEDS; s++) {
        cudaStream_t st;
        emu_defer_set(1, s);
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        int *d = dzero(N);
        memset(pinned, 0, N * sizeof(int));
        fill_kernel<<<1, 64, 0, st>>>(d, 5, N);
        cudaMemcpyAsync(pinned, d, N * sizeof(int), cudaMemcpyDeviceToHost, st);
        stale += !all_eq(pinned, N, 5); // read before the sync: a bug
        cudaStreamSynchronize(st);
        ok += all_eq(pinned, N, 5);
        fill_kernel<<<1, 64, 0, st>>>(d, 6, N);
        cudaMemcpyAsync(pageable, d, sizeof(pageable), cudaMemcpyDeviceToHost, st);
        ok += all_eq(pageable, N, 6); // pageable: synchronous
        cudaStreamDestroy(st);
        cudaFree(d);
    }
    cudaFreeHost(pinned);
    TEST_CHECK(stale > 0);
    TEST_EQ_INT(ok, 2 * SEEDS);
}

// A pinned staging buffer rewritten while its upload is queued uploads the new bytes (unless the
// host waits for the upload's event first); a pageable source is staged at the call.
static int upload_round(int seed, int wait_first, int use_pinned)
{
    cudaStream_t st;
    cudaEvent_t ev;
    static int pageable[N];
    int *stage = pageable, h[N];
    emu_defer_set(1, seed);
    if (use_pinned)
        cudaMallocHost(&stage, N * sizeof(int));
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int *d = dzero(N);
    for (int i = 0; i < N; i++)
        stage[i] = 1;
    cudaMemcpyAsync(d, stage, N * sizeof(int), cudaMemcpyHostToDevice, st);
    cudaEventRecord(ev, st);
    if (wait_first)
        cudaEventSynchronize(ev);
    for (int i = 0; i < N; i++)
        stage[i] = 2; // the next batch
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost); // legacy: does not wait for st
    cudaStreamSynchronize(st);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    cudaStreamDestroy(st);
    cudaEventDestroy(ev);
    cudaFree(d);
    if (use_pinned)
        cudaFreeHost(stage);
    return all_eq(h, N, 1);
}

static void test_pinned_reuse(void)
{
    int reused_wrong = 0, waited_ok = 0, pageable_ok = 0;
    for (int s = 0; s < SEEDS; s++) {
        reused_wrong += !upload_round(s, 0, 1);
        waited_ok += upload_round(s, 1, 1);
        pageable_ok += upload_round(s, 0, 0);
    }
    TEST_CHECK(reused_wrong > 0);
    TEST_EQ_INT(waited_ok, SEEDS);
    TEST_EQ_INT(pageable_ok, SEEDS);
}

// Launch arguments are copied at the call, not read when the kernel runs.
static void test_args_by_value(void)
{
    int h[N];
    emu_defer_set(1, 3);
    int *d = dzero(N), v = 11;
    fill_kernel<<<1, 64>>>(d, v, N);
    v = 12;
    (void)v;
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    TEST_CHECK(all_eq(h, N, 11));
    cudaFree(d);
}

// cudaStreamQuery reports pending work (polling code runs) and completes it eventually; a
// cudaFreeAsync runs after the stream's earlier work.
static void test_query_and_free_async(void)
{
    int not_ready = 0, ok = 0, h[N];
    for (int s = 0; s < SEEDS; s++) {
        cudaStream_t st;
        emu_defer_set(1, s);
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        int *d = dzero(N), *tmp = NULL;
        cudaMallocAsync(&tmp, N * sizeof(int), st);
        fill_kernel<<<1, 64, 0, st>>>(tmp, 9, N);
        copy_kernel<<<1, 64, 0, st>>>(d, tmp, N);
        cudaFreeAsync(tmp, st); // after the copy, in stream order
        fill_kernel<<<1, 64, 0, st>>>(d + N / 2, 9, N / 2);
        int polls = 0;
        while (cudaStreamQuery(st) == cudaErrorNotReady && polls < 1000)
            polls++;
        not_ready += polls > 0;
        cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
        ok += polls < 1000 && all_eq(h, N, 9);
        cudaStreamDestroy(st);
        cudaFree(d);
    }
    TEST_CHECK(not_ready > 0);
    TEST_EQ_INT(ok, SEEDS);
    TEST_EQ_INT(cudaGetLastError(), cudaSuccess);
}

static __global__ void fill_f32_kernel(float *buf, float v, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buf[i] = v;
}

// The emulated libraries' calls are queued in stream order too: a GEMM and a sort after the
// kernel that writes their inputs, their outputs in pinned memory only after the sync.
static void test_library_calls_ordered(void)
{
    cudaStream_t st;
    cublasHandle_t h;
    float *a, *b, *c, *pin = NULL, one = 1.0f, zero = 0.0f;
    int *keys, *vals, *kout, *vout, *ipin = NULL;
    void *tmp = NULL;
    size_t tmp_bytes = 0;
    emu_defer_set(1, 5);
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cublasCreate(&h);
    cublasSetStream(h, st);
    cudaMalloc(&a, N * sizeof(float)), cudaMalloc(&b, N * sizeof(float));
    cudaMalloc(&c, sizeof(float));
    cudaMallocHost(&pin, sizeof(float));
    *pin = -1.0f;
    fill_f32_kernel<<<1, 64, 0, st>>>(a, 2.0f, N);
    fill_f32_kernel<<<1, 64, 0, st>>>(b, 0.5f, N);
    /* c (1x1) = a^T (1xN) b (Nx1) = N * 2 * 0.5 */
    TEST_EQ_INT(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, N, &one, a,
                                           CUDA_R_32F, N, 0, b, CUDA_R_32F, N, 0, &zero, c,
                                           CUDA_R_32F, 1, 0, 1, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
    cudaMemcpyAsync(pin, c, sizeof(float), cudaMemcpyDeviceToHost, st);
    TEST_CHECK(*pin == -1.0f); // queued, not run
    cudaStreamSynchronize(st);
    TEST_CHECK(*pin == (float)N);

    keys = dzero(N), vals = dzero(N), kout = dzero(N), vout = dzero(N);
    cudaMallocHost(&ipin, N * sizeof(int));
    fill_kernel<<<1, 64, 0, st>>>(keys, 3, N / 2); // keys: N/2 threes, then N/2 zeros
    cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, keys, kout, vals, vout, N, 0, 2, st);
    cudaMallocAsync(&tmp, tmp_bytes, st);
    cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys, kout, vals, vout, N, 0, 2, st);
    cudaFreeAsync(tmp, st);
    cudaMemcpyAsync(ipin, kout, N * sizeof(int), cudaMemcpyDeviceToHost, st);
    cudaStreamSynchronize(st);
    TEST_CHECK(all_eq(ipin, N / 2, 0) && all_eq(ipin + N / 2, N / 2, 3));

    cublasDestroy(h);
    cudaFreeHost(pin), cudaFreeHost(ipin);
    cudaFree(a), cudaFree(b), cudaFree(c);
    cudaFree(keys), cudaFree(vals), cudaFree(kout), cudaFree(vout);
    cudaStreamDestroy(st);
}

// An NCCL collective starts after its stream's earlier work, including an event wait: without the
// wait it reads the input before the producer on another stream wrote it.
static int nccl_round(ncclComm_t comm, int seed, int with_wait)
{
    cudaStream_t a, c;
    cudaEvent_t ev;
    int h[N];
    emu_defer_set(1, seed);
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int *send = dzero(N), *recv = dzero(N), *out = dzero(N);
    fill_kernel<<<1, 64, 0, a>>>(send, seed + 3, N);
    if (with_wait) {
        cudaEventRecord(ev, a);
        cudaStreamWaitEvent(c, ev, 0);
    }
    ncclAllReduce(send, recv, N, ncclInt32, ncclSum, comm, c);
    copy_kernel<<<1, 64, 0, c>>>(out, recv, N); // after the collective, in stream order
    cudaStreamSynchronize(c);
    cudaDeviceSynchronize();
    cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
    cudaStreamDestroy(a);
    cudaStreamDestroy(c);
    cudaEventDestroy(ev);
    cudaFree(send), cudaFree(recv), cudaFree(out);
    return all_eq(h, N, seed + 3);
}

static void test_nccl_waits_for_event(void)
{
    ncclComm_t comm;
    int dev = 0, wrong = 0, right = 0;
    TEST_EQ_INT(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
    for (int s = 0; s < SEEDS / 2; s++) {
        wrong += !nccl_round(comm, s, 0);
        right += nccl_round(comm, s, 1);
    }
    TEST_CHECK(wrong > 0);
    TEST_EQ_INT(right, SEEDS / 2);
    ncclCommDestroy(comm);
}

int main(void)
{
    TEST_RUN(test_missing_wait_exposed);
    TEST_RUN(test_legacy_stream);
    TEST_RUN(test_pinned_read_before_sync);
    TEST_RUN(test_pinned_reuse);
    TEST_RUN(test_args_by_value);
    TEST_RUN(test_query_and_free_async);
    TEST_RUN(test_library_calls_ordered);
    TEST_RUN(test_nccl_waits_for_event);
    emu_defer_set(0, 0);
    return test_summary();
}
