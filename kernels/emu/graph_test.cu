// graph_test: the CUDA emulator's stream capture and graphs (kernels/emu/stream.cc). A captured
// stream runs nothing; each launch of the executable replays the captured kernels, copies,
// memsets, event records and graph-owned allocations in order, with the pointers of the capture
// (so new inputs in the same buffers give new results); the graph's scratch memory holds NaN bits
// at its allocation in every launch; the calls CUDA refuses during a capture are refused and
// invalidate it. Every case runs at the call and deferred (emu_defer_set, several seeds), so it
// runs in every build.
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test.h"

#define N 300

static __global__ void affine_kernel(float *out, const float *in, float a, float b, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * in[i] + b;
}

static __global__ void add_kernel(float *out, const float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] += x[i];
}

static __global__ void copy_bits_kernel(unsigned *out, const unsigned *in, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i];
}

static cudaStream_t new_stream(void)
{
    cudaStream_t s;
    TEST_EQ_INT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    return s;
}

// The model's pattern: pinned input -> device, scratch from cudaMallocAsync, kernels, a memset,
// device -> pinned output. Nothing runs during the capture; each launch computes from the
// pinned input of its time: out = 2 * in + 1 + 3 (scratch holds 3s).
static void test_replay(void)
{
    cudaStream_t s = new_stream();
    float *in, *out, *d, *acc;
    cudaMallocHost(&in, N * sizeof(float));
    cudaMallocHost(&out, N * sizeof(float));
    cudaMalloc(&d, N * sizeof(float));
    cudaMalloc(&acc, N * sizeof(float));
    for (int i = 0; i < N; i++)
        in[i] = (float)i, out[i] = -7.0f;
    cudaDeviceSynchronize();

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaStreamCaptureStatus st;
    TEST_EQ_INT(cudaStreamIsCapturing(s, &st), cudaSuccess);
    TEST_EQ_INT(st, cudaStreamCaptureStatusActive);
    cudaMemcpyAsync(d, in, N * sizeof(float), cudaMemcpyHostToDevice, s);
    float *tmp;
    TEST_EQ_INT(cudaMallocAsync(&tmp, N * sizeof(float), s), cudaSuccess);
    affine_kernel<<<2, 64, 0, s>>>(tmp, d, 0.0f, 3.0f, N);
    cudaMemsetAsync(acc, 0, N * sizeof(float), s);
    affine_kernel<<<3, 32, 0, s>>>(acc, d, 2.0f, 1.0f, N);
    add_kernel<<<1, 128, 0, s>>>(acc, tmp, N);
    cudaFreeAsync(tmp, s);
    cudaMemcpyAsync(out, acc, N * sizeof(float), cudaMemcpyDeviceToHost, s);
    TEST_EQ_INT(cudaGetLastError(), cudaSuccess);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaSuccess);
    TEST_EQ_INT(cudaStreamIsCapturing(s, &st), cudaSuccess);
    TEST_EQ_INT(st, cudaStreamCaptureStatusNone);
    TEST_CHECK(graph != NULL);
    TEST_EQ_INT((int)emu_graph_nodes(graph), 8); /* copy, alloc, 3 kernels, memset, free, copy */
    cudaStreamSynchronize(s);
    TEST_CHECK(out[5] == -7.0f); /* captured, not run */

    TEST_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    TEST_EQ_INT(cudaGraphDestroy(graph), cudaSuccess); /* the executable keeps the work */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            in[i] = (float)(i * (round + 1));
        TEST_EQ_INT(cudaGraphLaunch(exec, s), cudaSuccess);
        TEST_EQ_INT(cudaStreamSynchronize(s), cudaSuccess);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += out[i] != 2.0f * (float)(i * (round + 1)) + 4.0f;
        TEST_EQ_INT(bad, 0);
    }
    TEST_EQ_INT(cudaGraphExecDestroy(exec), cudaSuccess);
    cudaFree(d);
    cudaFree(acc);
    cudaFreeHost(in);
    cudaFreeHost(out);
    cudaStreamDestroy(s);
}

// The graph's own memory is fresh (NaN bits) at its allocation in every launch, even where the
// previous launch wrote it, so a kernel that reads scratch before writing it shows.
static void test_graph_memory(void)
{
    cudaStream_t s = new_stream();
    unsigned *out;
    cudaMallocHost(&out, N * sizeof(unsigned));
    memset(out, 0, N * sizeof(unsigned));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    float *t;
    unsigned *dout;
    cudaMallocAsync(&t, N * sizeof(float), s);
    cudaMallocAsync(&dout, N * sizeof(unsigned), s);
    copy_bits_kernel<<<1, 64, 0, s>>>(dout, (const unsigned *)t, N); /* reads t unwritten */
    affine_kernel<<<1, 64, 0, s>>>(t, t, 0.0f, 7.0f, N);              /* then writes it */
    cudaMemcpyAsync(out, dout, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s);
    cudaFreeAsync(t, s);
    cudaFreeAsync(dout, s);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaSuccess);
    TEST_EQ_INT(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 0; round < 2; round++) {
        cudaGraphLaunch(exec, s);
        cudaStreamSynchronize(s);
        int nan = 0;
        for (int i = 0; i < N; i++)
            nan += out[i] == 0xffffffffu;
        TEST_EQ_INT(nan, N);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFreeHost(out);
    cudaStreamDestroy(s);
}

// An event recorded inside the capture is recorded by each launch; waiting for it later in the
// same capture is in order.
static void test_event(void)
{
    cudaStream_t s = new_stream(), t = new_stream();
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    float *d, *h;
    cudaMalloc(&d, N * sizeof(float));
    cudaMemset(d, 0, N * sizeof(float)); /* 0 * NaN bits would stay NaN */
    cudaMallocHost(&h, N * sizeof(float));
    cudaDeviceSynchronize();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    affine_kernel<<<1, 32, 0, s>>>(d, d, 0.0f, 5.0f, N);
    TEST_EQ_INT(cudaEventRecord(e, s), cudaSuccess);
    TEST_EQ_INT(cudaStreamWaitEvent(s, e, 0), cudaSuccess);
    TEST_EQ_INT(cudaEventQuery(e), cudaErrorCapturedEvent);
    cudaGetLastError();
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    TEST_CHECK(graph == NULL);
    cudaGetLastError();
    cudaGraphDestroy(graph);

    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    affine_kernel<<<1, 32, 0, s>>>(d, d, 0.0f, 5.0f, N);
    cudaEventRecord(e, s);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaSuccess);
    TEST_EQ_INT((int)emu_graph_nodes(graph), 2);
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, s);
    cudaStreamWaitEvent(t, e, 0); /* another stream waits for the launch's record */
    cudaMemcpyAsync(h, d, N * sizeof(float), cudaMemcpyDeviceToHost, t);
    cudaStreamSynchronize(t);
    TEST_CHECK(h[0] == 5.0f && h[N - 1] == 5.0f);
    TEST_EQ_INT(cudaEventQuery(e), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(e);
    cudaFree(d);
    cudaFreeHost(h);
    cudaStreamDestroy(s);
    cudaStreamDestroy(t);
}

static void *malloc_on_thread(void *arg)
{
    void *p = NULL;
    *(cudaError_t *)arg = cudaMalloc(&p, 64);
    cudaFree(p);
    return NULL;
}

// Begins a capture on s (mode), runs what(s), and checks that what's call returned want and that
// the capture is then invalidated (EndCapture: cudaErrorStreamCaptureInvalidated, no graph).
#define REFUSED(mode, want, call)                                                                  \
    do {                                                                                           \
        TEST_EQ_INT(cudaStreamBeginCapture(s, mode), cudaSuccess);                                 \
        affine_kernel<<<1, 32, 0, s>>>(d, d, 1.0f, 1.0f, N);                                       \
        TEST_EQ_INT((call), (want));                                                               \
        cudaGraph_t g_ = (cudaGraph_t)1;                                                           \
        TEST_EQ_INT(cudaStreamEndCapture(s, &g_), cudaErrorStreamCaptureInvalidated);              \
        TEST_CHECK(g_ == NULL);                                                                    \
        cudaGetLastError();                                                                        \
    } while (0)

// What CUDA refuses during a capture (each invalidates it), and what it allows.
static void test_refused(void)
{
    cudaStream_t s = new_stream();
    float *d, *pinned, pageable[N];
    void *p = NULL;
    cudaEvent_t e;
    cudaEventCreate(&e);
    cudaMalloc(&d, N * sizeof(float));
    cudaMallocHost(&pinned, N * sizeof(float));
    cudaMemset(d, 0, N * sizeof(float));
    cudaDeviceSynchronize();
    memset(pageable, 0, sizeof(pageable));

    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
            cudaStreamSynchronize(s));
    REFUSED(cudaStreamCaptureModeRelaxed, cudaErrorStreamCaptureUnsupported, cudaStreamQuery(s));
    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
            cudaMalloc(&p, 64));
    REFUSED(cudaStreamCaptureModeGlobal, cudaErrorStreamCaptureUnsupported,
            cudaDeviceSynchronize());
    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
            cudaMemcpy(pinned, d, N * sizeof(float), cudaMemcpyDeviceToHost));
    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
            cudaMemcpyAsync(d, pageable, N * sizeof(float), cudaMemcpyHostToDevice, s));
    cudaEventRecord(e, 0); /* recorded outside the capture */
    cudaDeviceSynchronize();
    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureIsolation,
            cudaStreamWaitEvent(s, e, 0));
    REFUSED(cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
            cudaEventSynchronize(e));

    /* Relaxed allows the calls that may synchronise; ThreadLocal allows them to other threads. */
    cudaGraph_t graph;
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    TEST_EQ_INT(cudaMalloc(&p, 64), cudaSuccess);
    TEST_EQ_INT(cudaFree(p), cudaSuccess);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphDestroy(graph);
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaError_t other = cudaErrorInvalidValue;
    pthread_t th;
    pthread_create(&th, NULL, malloc_on_thread, &other);
    pthread_join(th, NULL);
    TEST_EQ_INT(other, cudaSuccess);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphDestroy(graph);
    /* Global: the other thread's call is refused and invalidates this capture. */
    TEST_EQ_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    pthread_create(&th, NULL, malloc_on_thread, &other);
    pthread_join(th, NULL);
    TEST_EQ_INT(other, cudaErrorStreamCaptureUnsupported);
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    /* No capture to end; the legacy stream cannot be captured. */
    TEST_EQ_INT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureUnmatched);
    TEST_EQ_INT(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    /* After all that, the stream works as before. */
    affine_kernel<<<1, 32, 0, s>>>(d, d, 0.0f, 9.0f, N);
    cudaMemcpyAsync(pinned, d, N * sizeof(float), cudaMemcpyDeviceToHost, s);
    TEST_EQ_INT(cudaStreamSynchronize(s), cudaSuccess);
    TEST_CHECK(pinned[0] == 9.0f);
    cudaEventDestroy(e);
    cudaFree(d);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
}

int main(void)
{
    for (int mode = 0; mode < 2; mode++) {
        for (int seed = 1; seed <= (mode ? 6 : 1); seed++) {
            emu_defer_set(mode, (unsigned long long)seed);
            TEST_RUN(test_replay);
            TEST_RUN(test_graph_memory);
            TEST_RUN(test_event);
            TEST_RUN(test_refused);
        }
    }
    return test_summary();
}
