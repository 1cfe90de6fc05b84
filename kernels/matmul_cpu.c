#include "kernels/matmul.h"

#include <cblas.h>
#include <stddef.h>

void bias_forward_cpu(float *out, const float *bias, int N, int OC)
{
#pragma omp parallel for if ((size_t)N * OC > 65536)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            o[j] += bias[j];
    }
}

void bias_backward_cpu(float *dbias, const float *dout, int N, int OC)
{
    /* Serial over rows, vectorised over columns: a fixed summation order, and cheap. */
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            dbias[j] += d[j];
    }
}

void residual_forward_cpu(float *out, const float *a, const float *b, long n)
{
#pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC)
{
    float beta = 0.0f;

    if (bias) {
#pragma omp parallel for if ((size_t)N * OC > 65536)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < OC; j++)
                out[(size_t)i * OC + j] = bias[j];
        beta = 1.0f;
    }
    /* (N,C) x (OC,C)^T -> (N,OC) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
}

void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC)
{
    /* dinp (N,C) += dout (N,OC) x weight (OC,C) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    1.0f, dinp, C);
    /* dweight (OC,C) += dout^T (OC,N) x inp (N,C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
    if (dbias)
        bias_backward_cpu(dbias, dout, N, OC);
}
