// LayerNorm on the GPU against kernels/layernorm_cpu.c: forward (out, mean, rstd) and the
// accumulating backward, on rows with a non-zero mean, at GPT-2's width and an odd one.
#include "kernels/bf16.h"
#include "kernels/gpu.h"
#include "kernels/gpu_testutil.h"
#include "kernels/layernorm.h"

static void check(int N, int C, uint64_t seed)
{
    uint64_t s = seed;
    size_t nc = (size_t)N * C;
    float *inp = gt_randv(nc, &s, -2, 3), *w = gt_randv(C, &s, 0.5f, 1.5f);
    float *b = gt_randv(C, &s, -0.5f, 0.5f), *out = gt_randv(nc, &s, 0, 1);
    float *mean = gt_randv(N, &s, 0, 1), *rstd = gt_randv(N, &s, 0, 1);
    float *dout = gt_randv(nc, &s, -1, 1), *dinp = gt_randv(nc, &s, -1, 1);
    float *dw = gt_randv(C, &s, -1, 1), *db = gt_randv(C, &s, -1, 1);
    float *d_inp = GT_UPF(inp, nc), *d_w = GT_UPF(w, C), *d_b = GT_UPF(b, C), *d_out = GT_UPF(out, nc);
    float *d_mean = GT_UPF(mean, N), *d_rstd = GT_UPF(rstd, N), *d_dout = GT_UPF(dout, nc);
    float *d_dinp = GT_UPF(dinp, nc), *d_dw = GT_UPF(dw, C), *d_db = GT_UPF(db, C);

    printf("layernorm N=%d C=%d\n", N, C);
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, 0);
    gt_compare("layernorm_forward out", d_out, out, nc, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("layernorm_forward mean", d_mean, mean, N, GT_F32_ATOL, GT_F32_RTOL);
    gt_compare("layernorm_forward rstd", d_rstd, rstd, N, GT_F32_ATOL, GT_F32_RTOL);
    layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 0);
    gt_compare("layernorm_backward dinp", d_dinp, dinp, nc, GT_F32_ATOL, GT_F32_RTOL);
    /* sums over N rows: the error grows with sqrt(N) */
    gt_compare("layernorm_backward dw", d_dw, dw, C, 1e-3, GT_F32_RTOL);
    gt_compare("layernorm_backward db", d_db, db, C, 1e-3, GT_F32_RTOL);
    { /* layernorm_backward_bf16_sum: dsum += the column sums of the accumulated dinp (the
       * projection bias gradient the bf16 model takes from here), dinp16 its bf16 copy */
        float *dinp2 = gt_randv(nc, &s, -1, 1), *ds = gt_randv(C, &s, -1, 1);
        float *d_dinp2 = GT_UPF(dinp2, nc), *d_ds = GT_UPF(ds, C), *d_x32;
        uint16_t *d_x16;
        CUDA_CHECK(cudaMalloc(&d_x16, nc * 2));
        CUDA_CHECK(cudaMalloc(&d_x32, nc * 4));
        layernorm_backward_cpu(dinp2, dw, db, dout, inp, w, mean, rstd, N, C);
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int i = 0; i < N; i++)
                acc += dinp2[(size_t)i * C + c];
            ds[c] = (float)(ds[c] + acc);
        }
        layernorm_backward_bf16_sum(d_dinp2, d_x16, d_dw, d_db, d_ds, d_dout, d_inp, d_w, d_mean,
                                    d_rstd, N, C, 0);
        gt_compare("layernorm_backward_sum dinp", d_dinp2, dinp2, nc, GT_F32_ATOL, GT_F32_RTOL);
        gt_compare("layernorm_backward_sum dw", d_dw, dw, C, 2e-3, GT_F32_RTOL);
        gt_compare("layernorm_backward_sum db", d_db, db, C, 2e-3, GT_F32_RTOL);
        gt_compare("layernorm_backward_sum dsum", d_ds, ds, C, 1e-3, GT_F32_RTOL);
        cast_bf16_to_f32(d_x32, d_x16, nc, 0);
        gt_compare("layernorm_backward_sum dinp16", d_x32, dinp2, nc, GT_F32_ATOL, 1.0 / 256);
        cudaFree(d_dinp2), cudaFree(d_ds), cudaFree(d_x16), cudaFree(d_x32);
        free(dinp2), free(ds);
    }
    { /* layernorm_backward_bf16_d16: the incoming gradient in bf16 (the bf16 step's), against
       * the CPU given the same rounded values */
        float *dr = (float *)malloc(nc * sizeof(float)), *dinp3 = gt_randv(nc, &s, -1, 1);
        float *d_dinp3 = GT_UPF(dinp3, nc), *d_dr = GT_UPF(dout, nc), *d_x32;
        uint16_t *d_x16, *d_d16;
        CUDA_CHECK(cudaMalloc(&d_x16, nc * 2));
        CUDA_CHECK(cudaMalloc(&d_d16, nc * 2));
        CUDA_CHECK(cudaMalloc(&d_x32, nc * 4));
        cast_f32_to_bf16(d_d16, d_dr, nc, 0);
        cast_bf16_to_f32(d_dr, d_d16, nc, 0);
        CUDA_CHECK(cudaMemcpy(dr, d_dr, nc * sizeof(float), cudaMemcpyDeviceToHost));
        layernorm_backward_cpu(dinp3, dw, db, dr, inp, w, mean, rstd, N, C);
        layernorm_backward_bf16_d16(d_dinp3, d_x16, d_dw, d_db, NULL, d_d16, d_inp, d_w, d_mean,
                                    d_rstd, N, C, 0);
        gt_compare("layernorm_backward_d16 dinp", d_dinp3, dinp3, nc, GT_F32_ATOL, GT_F32_RTOL);
        gt_compare("layernorm_backward_d16 dw", d_dw, dw, C, 3e-3, GT_F32_RTOL);
        gt_compare("layernorm_backward_d16 db", d_db, db, C, 3e-3, GT_F32_RTOL);
        cast_bf16_to_f32(d_x32, d_x16, nc, 0);
        gt_compare("layernorm_backward_d16 dinp16", d_x32, dinp3, nc, GT_F32_ATOL, 1.0 / 256);
        cudaFree(d_dinp3), cudaFree(d_dr), cudaFree(d_x16), cudaFree(d_d16), cudaFree(d_x32);
        free(dr), free(dinp3);
    }
    float *bufs[] = {d_inp, d_w, d_b, d_out, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        cudaFree(bufs[i]);
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp);
    free(dw), free(db);
}

int main(void)
{
    gt_require_device("layernorm_gpu_test");
    /* the backward's kernel: a lane's columns in registers while they fit in 8 chunks (C <= 1024
     * with 16-byte chunks, 256 with single elements), the looping kernel past that */
    check(4096, 768, 1); /* C % 4 == 0: the 16-byte kernels (registers: 6 chunks) */
    check(37, 100, 2);   /* one partial chunk of a lane's 4 columns */
    check(3, 3000, 3);   /* shared-memory partials over 48 KiB (looping) */
    check(37, 102, 4);   /* C % 4 != 0: one element at a time (registers) */
    check(9, 301, 6);    /* one element at a time, looping */
    /* 313 blocks of backward partials: two CS_ROWS chunks, the second partial, summed by
     * colsum_part_kernel (dweight and dbias in one (blocks, 2C) matrix) */
    check(5000, 36, 5);
    return gt_summary("layernorm_gpu_test");
}
