// The GPU kernels' runtime: cuBLAS(Lt) handles, GEMM workspace, memory pool policy, casts.
#include "kernels/gpu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gpu_rt gpu_rt_;

void cublas_check_(int status, const char *call, const char *file, int line)
{
    if (status != 0) {
        char host[256] = "?";
        gethostname(host, sizeof(host) - 1);
        fprintf(stderr,
                "[%s] cuBLAS error at %s:%d: %s: status %d\n"
                "HINT: 7 (INVALID_VALUE) or 15 (NOT_SUPPORTED) is a shape or alignment the "
                "GEMM cannot take; 3 (ALLOC_FAILED) is out of memory\n",
                host, file, line, call, status);
        exit(1);
    }
}

extern "C" int gpu_select_device(int local_rank)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n < 1) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        fprintf(stderr,
                "No usable CUDA device for local rank %d: %s (CUDA_VISIBLE_DEVICES=%s)\n"
                "HINT: check `nvidia-smi`, the pod's nvidia.com/gpu limit and the NVIDIA device "
                "plugin; gpusPerReplica: 0 trains on the CPU\n",
                local_rank, err != cudaSuccess ? cudaGetErrorString(err) : "no devices",
                vis ? vis : "(unset)");
        return -1;
    }
    /* Several ranks on one GPU would fail later inside NCCL ("duplicate GPU"); say it now. */
    if (n > 1 && local_rank >= n) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        fprintf(stderr,
                "Local rank %d has no GPU of its own: this process sees %d (CUDA_VISIBLE_DEVICES=%s)\n"
                "HINT: one rank per GPU: NPROC_PER_NODE (gpusPerReplica) must not exceed the GPUs "
                "the container gets (its nvidia.com/gpu limit)\n",
                local_rank, n, vis ? vis : "(unset)");
        return -1;
    }
    int dev = local_rank < 0 ? 0 : local_rank % n;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    /* One line per rank, so a log shows which GPU each rank trained on. */
    fprintf(stderr, "gpu: local rank %d on GPU %d of %d: %s, %.0f GiB, sm_%d%d\n", local_rank,
            dev, n, prop.name, (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor);
    return dev;
}

extern "C" double gpu_peak_flops_named(const char *name, int bf16)
{
    /* dense (no sparsity) TFLOP/s from NVIDIA's datasheets: bf16 tensor cores, fp32 CUDA cores;
     * the first entry the name contains wins, so the PCIe and NVL boards come before the SXM
     * ones ("NVIDIA H100 80GB HBM3" is the SXM H100, "NVIDIA GH200 480GB" matches "H200") */
    static const struct {
        const char *name;
        double bf16, fp32;
    } table[] = {{"H100 PCIe", 756.0, 51.2}, {"H100 NVL", 835.5, 60.0}, {"H200 NVL", 835.5, 60.0},
                 {"H100", 989.4, 66.9},      {"H200", 989.4, 66.9},     {"H800", 989.4, 66.9},
                 {"A100", 312.0, 19.5},      {"A800", 312.0, 19.5}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (name && strstr(name, table[i].name))
            return (bf16 ? table[i].bf16 : table[i].fp32) * 1e12;
    return 0.0;
}

extern "C" double gpu_peak_flops(int bf16)
{
    const char *e = getenv("GANTRY_PEAK_TFLOPS");
    cudaDeviceProp prop;
    int dev = 0;

    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end == '\0' && v > 0)
            return v * 1e12;
        fprintf(stderr, "gpu: GANTRY_PEAK_TFLOPS='%s' is not a positive number; ignored\n", e);
    }
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return 0.0;
    return gpu_peak_flops_named(prop.name, bf16);
}

extern "C" void gpu_init(void)
{
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;

    if (gpu_rt_.ready)
        return;
    CUDA_CHECK(cudaGetDevice(&dev));
    /* Keep freed scratch in the pool: a steady-state step then never returns to the driver. */
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    CUBLAS_CHECK(cublasCreate(&gpu_rt_.blas));
    /* fp32 GEMMs stay fp32 (no TF32): the CPU reference is the specification. */
    CUBLAS_CHECK(cublasSetMathMode(gpu_rt_.blas, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasLtCreate(&gpu_rt_.lt));
    CUDA_CHECK(cudaMalloc(&gpu_rt_.workspace, GPU_WORKSPACE_BYTES));
    gpu_rt_.ready = 1;
}

extern "C" void gpu_trim_pool(void)
{
    int dev = 0;
    cudaMemPool_t pool;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceSynchronize()); /* (frees still queued on streams land first) */
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

extern "C" void gpu_shutdown(void)
{
    if (!gpu_rt_.ready)
        return;
    CUDA_CHECK(cudaDeviceSynchronize());
    cublasDestroy(gpu_rt_.blas);
    cublasLtDestroy(gpu_rt_.lt);
    cudaFree(gpu_rt_.workspace);
    gpu_rt_.ready = 0;
}

static __global__ void cast_f32_to_bf16_kernel(uint16_t *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = f32_to_bf16_bits(inp[i]);
}

static __global__ void cast_bf16_to_f32_kernel(float *out, const uint16_t *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = bf16_bits_to_f32(inp[i]);
}

extern "C" void cast_f32_to_bf16(uint16_t *out, const float *inp, size_t n,
                                 struct CUstream_st *stream)
{
    if (n == 0)
        return;
    cast_f32_to_bf16_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(out, inp, n);
    GPU_LAUNCH_CHECK();
}

extern "C" void cast_bf16_to_f32(float *out, const uint16_t *inp, size_t n,
                                 struct CUstream_st *stream)
{
    if (n == 0)
        return;
    cast_bf16_to_f32_kernel<<<(unsigned)CEIL_DIV(n, 256), 256, 0, stream>>>(out, inp, n);
    GPU_LAUNCH_CHECK();
}
