// The GPU runtime: device selection by local rank (GANTRY_EMU_DEVICES=1 and 2 on the emulator), and the fp32<->bf16 casts against the host's
// round-to-nearest-even (bit-exact, NaN and infinities included).
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu_testutil.h"

static uint16_t host_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

int main(void)
{
    int n = 0, cur = -1;
    if (!cuda_have_device()) {
        printf("runtime_gpu_test: SKIP: no CUDA device\n");
        return 77;
    }
    CUDA_CHECK(cudaGetDeviceCount(&n));
    /* local rank r on device r; past the last device: -1 with several (two ranks would share
     * one), device 0 with one (a launcher isolating each rank with CUDA_VISIBLE_DEVICES) */
    for (int rank = 0; rank < 2 * n + 1; rank++) {
        int want = rank < n ? rank : n == 1 ? 0 : -1;
        int dev = gpu_select_device(rank);
        CUDA_CHECK(cudaGetDevice(&cur));
        if (dev != want || (dev >= 0 && cur != dev)) {
            printf("gpu_select_device(%d) = %d, current %d, want %d\n", rank, dev, cur, want);
            gt_failed++;
        }
    }
    printf("gpu_select_device over %d device(s): %s\n", n, gt_failed ? "FAILED" : "OK");
    gpu_select_device(0);

    /* the peak for MFU: the table's (0 for the emulator's name), GANTRY_PEAK_TFLOPS over it, a
     * value that is not a positive number ignored */
    unsetenv("GANTRY_PEAK_TFLOPS");
    double p16 = gpu_peak_flops(1), p32 = gpu_peak_flops(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (strstr(prop.name, "gantry CUDA emulator") && (p16 != 0.0 || p32 != 0.0))
        gt_failed++, printf("gpu_peak_flops on the emulator: %g %g, want 0\n", p16, p32);
    if (p16 < p32)
        gt_failed++, printf("gpu_peak_flops: bf16 %g below fp32 %g\n", p16, p32);
    setenv("GANTRY_PEAK_TFLOPS", "3.5", 1);
    if (gpu_peak_flops(1) != 3.5e12 || gpu_peak_flops(0) != 3.5e12)
        gt_failed++, printf("GANTRY_PEAK_TFLOPS=3.5: %g\n", gpu_peak_flops(1));
    setenv("GANTRY_PEAK_TFLOPS", "-2", 1);
    if (gpu_peak_flops(1) != p16)
        gt_failed++, printf("GANTRY_PEAK_TFLOPS=-2 not ignored: %g\n", gpu_peak_flops(1));
    unsetenv("GANTRY_PEAK_TFLOPS");
    printf("gpu_peak_flops on %s: bf16 %.1f, fp32 %.1f TFLOP/s\n", prop.name, p16 / 1e12,
           p32 / 1e12);
    /* the table by the names CUDA reports (the boards with a lower peak must not take the SXM
     * figure their name also contains) */
    static const struct {
        const char *name;
        double tflops;
    } named[] = {{"NVIDIA H100 80GB HBM3", 989.4}, {"NVIDIA H100 PCIe", 756.0},
                 {"NVIDIA H100 NVL", 835.5},       {"NVIDIA H200", 989.4},
                 {"NVIDIA H200 NVL", 835.5},       {"NVIDIA GH200 480GB", 989.4},
                 {"NVIDIA A100-SXM4-80GB", 312.0}, {"NVIDIA A100 80GB PCIe", 312.0},
                 {"NVIDIA L4", 0.0},               {"gantry CUDA emulator (CPU)", 0.0}};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        if (gpu_peak_flops_named(named[i].name, 1) != named[i].tflops * 1e12)
            gt_failed++, printf("gpu_peak_flops_named(\"%s\") = %.1f TFLOP/s, want %.1f\n",
                                named[i].name, gpu_peak_flops_named(named[i].name, 1) / 1e12,
                                named[i].tflops);
    if (gpu_peak_flops_named(NULL, 1) != 0.0)
        gt_failed++, printf("gpu_peak_flops_named(NULL) not 0\n");
    gpu_init();

    const size_t cnt = 1 << 16;
    uint64_t s = 9;
    float *x = gt_randv(cnt, &s, -3, 3), *back = (float *)malloc(cnt * sizeof(float));
    x[0] = 1.0f + 1.0f / 256; /* exactly halfway between two bf16 values: rounds to even */
    x[1] = 1.0f + 3.0f / 256;
    x[2] = INFINITY;
    x[3] = -INFINITY;
    x[4] = 3.4e38f; /* rounds up to infinity */
    x[5] = 1e-40f;  /* denormal */
    for (size_t i = 0; i < cnt; i++)
        back[i] = 0;
    float *d_x = GT_UPF(x, cnt), *d_back;
    uint16_t *d_h, *h = (uint16_t *)malloc(cnt * 2);
    CUDA_CHECK(cudaMalloc(&d_h, cnt * 2));
    CUDA_CHECK(cudaMalloc(&d_back, cnt * sizeof(float)));
    cast_f32_to_bf16(d_h, d_x, cnt, 0);
    cast_bf16_to_f32(d_back, d_h, cnt, 0);
    CUDA_CHECK(cudaMemcpy(h, d_h, cnt * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < cnt && bad < 10; i++) {
        uint16_t want = host_bf16(x[i]);
        if (i < 5 || h[i] != want)
            printf("  cast_f32_to_bf16 [%zu] %.9g -> 0x%04x, host 0x%04x %s\n", i, (double)x[i],
                   h[i], want, h[i] == want ? "ok" : "MISMATCH");
        bad += h[i] != want;
        uint32_t u = (uint32_t)want << 16;
        memcpy(&back[i], &u, 4);
    }
    printf("cast_f32_to_bf16: %s\n", bad ? "FAILED" : "OK");
    gt_failed += bad != 0;
    gt_compare("cast_bf16_to_f32", d_back, back, cnt, 0, 0);
    cudaFree(d_x), cudaFree(d_h), cudaFree(d_back);
    free(x), free(back), free(h);
    return gt_summary("runtime_gpu_test");
}
