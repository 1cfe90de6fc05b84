// Embeddings on the GPU: token + position lookup and the mean of a bag of rows, with backward
// passes that are deterministic (no float atomics): entries are stably sorted by destination row
// with CUB's radix sort, and each destination row is summed by one thread per column, in the
// original entry order. Same results as kernels/embed_cpu.c up to float rounding.
#include "kernels/embed.h"
#include "kernels/gpu_internal.h"

#include <cub/device/device_radix_sort.cuh>

static __global__ void embed_forward_kernel(float *out, const int *tokens, const float *wte,
                                            const float *wpe, int T, int C, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)t * C + c];
}

extern "C" void embed_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                              int B, int T, int C, struct CUstream_st *stream)
{
    size_t total = (size_t)B * T * C;
    if (total == 0)
        return;
    embed_forward_kernel<<<(unsigned)CEIL_DIV(total, 256), 256, 0, stream>>>(out, tokens, wte,
                                                                             wpe, T, C, total);
    GPU_LAUNCH_CHECK();
}

/* dwpe[t,c] += sum over b (in order) of dout[b,t,c] */
static __global__ void dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C)
        return;
    float s = 0.0f;
    for (int b = 0; b < B; b++)
        s += dout[(size_t)b * T * C + i];
    dwpe[i] += s;
}

/* Sort keys for a bag: the id where i < count[b], else the sentinel R (sorted last, skipped). */
static __global__ void bag_keys_kernel(int *keys, int *vals, const int *ids, const int *count,
                                       int M, int R, int n)
{
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n)
        return;
    int b = e / M, i = e % M;
    keys[e] = count && i >= count[b] ? R : ids[e];
    vals[e] = e;
}

/*
 * grid (entries, ceil(D / 256)). The first entry of each run of equal keys sums the run's source
 * rows (row vals[j] / div of src, times 1 / count[row] when count is given) for its columns and
 * adds the sum to dst[key]. Runs are in original entry order (stable sort): deterministic.
 */
static __global__ void scatter_runs_kernel(float *dst, const float *src, const int *keys,
                                           const int *vals, const int *count, int div, int R,
                                           int n, int D)
{
    int e = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    int key = keys[e];
    if (c >= D || key >= R || (e > 0 && keys[e - 1] == key))
        return;
    float acc = 0.0f;
    for (int j = e; j < n && keys[j] == key; j++) {
        int row = vals[j] / div;
        float x = src[(size_t)row * D + c];
        acc += count ? x * (1.0f / (float)count[row]) : x;
    }
    dst[(size_t)key * D + c] += acc;
}

static int key_bits(int max_key)
{
    int bits = 0;
    while (bits < 31 && (1 << bits) <= max_key)
        bits++;
    return bits > 0 ? bits : 1;
}

/* dst[key rows] += rows of src, for n entries whose keys/vals are in keys_in/vals_in (scratch). */
static void sorted_scatter(float *dst, const float *src, int *keys_in, int *vals_in,
                           const int *count, int div, int R, int n, int D, cudaStream_t stream)
{
    int *keys = (int *)gpu_scratch(2 * (size_t)n * sizeof(int), stream), *vals = keys + n;
    size_t tmp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, keys_in, keys, vals_in, vals, n, 0,
                                               key_bits(R), stream));
    void *tmp = gpu_scratch(tmp_bytes, stream);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys_in, keys, vals_in, vals, n, 0,
                                               key_bits(R), stream));
    dim3 grid((unsigned)n, (unsigned)CEIL_DIV(D, 256));
    scatter_runs_kernel<<<grid, 256, 0, stream>>>(dst, src, keys, vals, count, div, R, n, D);
    GPU_LAUNCH_CHECK();
    gpu_scratch_free(tmp, stream);
    gpu_scratch_free(keys, stream);
}

extern "C" void embed_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                               int B, int T, int C, int V, struct CUstream_st *stream)
{
    int n = B * T;
    if (n == 0)
        return;
    dwpe_kernel<<<(unsigned)CEIL_DIV((size_t)T * C, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    GPU_LAUNCH_CHECK();
    int *kv = (int *)gpu_scratch(2 * (size_t)n * sizeof(int), stream);
    /* keys = the tokens themselves (M = T, no counts: every entry is live) */
    bag_keys_kernel<<<CEIL_DIV(n, 256), 256, 0, stream>>>(kv, kv + n, tokens, NULL, T, V, n);
    GPU_LAUNCH_CHECK();
    sorted_scatter(dwte, dout, kv, kv + n, NULL, 1, V, n, C, stream);
    gpu_scratch_free(kv, stream);
}

static __global__ void embbag_forward_kernel(float *out, const int *ids, const int *count,
                                             const float *table, int M, int D)
{
    int b = blockIdx.x, d = blockIdx.y * blockDim.x + threadIdx.x;
    if (d >= D)
        return;
    int n = count[b];
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += table[(size_t)ids[(size_t)b * M + i] * D + d];
    out[(size_t)b * D + d] = n > 0 ? s * (1.0f / (float)n) : 0.0f;
}

extern "C" void embbag_forward(float *out, const int *ids, const int *count, const float *table,
                               int B, int M, int D, struct CUstream_st *stream)
{
    if (B == 0 || D == 0)
        return;
    dim3 grid((unsigned)B, (unsigned)CEIL_DIV(D, 256));
    embbag_forward_kernel<<<grid, 256, 0, stream>>>(out, ids, count, table, M, D);
    GPU_LAUNCH_CHECK();
}

extern "C" void embbag_backward(float *dtable, const float *dout, const int *ids, const int *count,
                                int B, int M, int D, int R, struct CUstream_st *stream)
{
    int n = B * M;
    if (n == 0)
        return;
    int *kv = (int *)gpu_scratch(2 * (size_t)n * sizeof(int), stream);
    bag_keys_kernel<<<CEIL_DIV(n, 256), 256, 0, stream>>>(kv, kv + n, ids, count, M, R, n);
    GPU_LAUNCH_CHECK();
    /* entry e = b * M + i reads dout row b = e / M, scaled by 1 / count[b] */
    sorted_scatter(dtable, dout, kv, kv + n, count, M, R, n, D, stream);
    gpu_scratch_free(kv, stream);
}
