// GELU on the GPU against the CPU specification; exits 77 (skipped) without a device.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_common.h"
#include "kernels/gelu.h"

int main(void)
{
    const size_t n = 1 << 20;
    float *x = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float));
    float *got = (float *)malloc(n * sizeof(float));
    float *dx, *dy;
    int bad = 0;

    if (!cuda_have_device()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    srand(1234);
    for (size_t i = 0; i < n; i++)
        x[i] = 8.0f * ((float)rand() / RAND_MAX) - 4.0f;
    gelu_forward_cpu(ref, x, n);
    CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice));
    gelu_forward(dy, dx, n, 0);
    CUDA_CHECK(cudaMemcpy(got, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n && bad < 10; i++) {
        float tol = 1e-5f + fabsf(ref[i]) * 1e-5f;
        if (i < 5 || fabsf(got[i] - ref[i]) > tol)
            printf("%s x=%g ref=%g gpu=%g\n", fabsf(got[i] - ref[i]) > tol ? "MISMATCH" : "ok",
                   x[i], ref[i], got[i]);
        if (fabsf(got[i] - ref[i]) > tol)
            bad++;
    }
    printf("gelu_forward: %s\n", bad ? "FAILED" : "OK");
    cudaFree(dx);
    cudaFree(dy);
    free(x);
    free(ref);
    free(got);
    return bad ? 1 : 0;
}
