#include "kernels/matmul.h"

#include <cblas.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "kernels/cpu.h"
#include "kernels/gelu.h"

#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

/* Work below this many multiply-adds runs on one thread: splitting costs more than it saves. */
#define SPLIT_MIN_MACS (1 << 18)

/* This thread's share [*lo, *hi) of n items, in blocks of `align`. */
static void share(int n, int align, int *lo, int *hi)
{
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int blocks = (n + align - 1) / align, per = (blocks + nt - 1) / nt;
    *lo = t * per * align < n ? t * per * align : n;
    *hi = (t + 1) * per * align < n ? (t + 1) * per * align : n;
}

void bias_forward_cpu(float *out, const float *bias, int N, int OC)
{
#pragma omp parallel for if ((size_t)N * OC > 65536)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            o[j] += bias[j];
    }
}

/* Column sums of dout over rows, for columns [j0, j1): rows in a fixed order. */
static void colsum(float *dbias, const float *dout, int N, int OC, int j0, int j1)
{
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC;
        for (int j = j0; j < j1; j++)
            dbias[j] += d[j];
    }
}

void bias_backward_cpu(float *dbias, const float *dout, int N, int OC)
{
    colsum(dbias, dout, N, OC, 0, OC);
}

void residual_forward_cpu(float *out, const float *a, const float *b, long n)
{
#pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* Rows per GEMM call in the forward: the bias fill, the GEMM's output and the GELU that follows
 * all touch the same rows while they are in this core's L2 (256 x 512 floats = 512 KiB), instead
 * of three passes over the whole (N, OC) output in memory. */
#define FWD_ROWS 256

static void forward(float *out, float *pre, const float *res, const float *inp,
                    const float *weight, const float *bias, int N, int C, int OC)
{
    cpu_blas_single(); /* we split GEMMs over our own threads (cpu.h) */
    /* Rows of out are independent: each thread runs GEMMs on its block of rows. */
#pragma omp parallel if ((size_t)N * C * OC > SPLIT_MIN_MACS)
    {
        int lo, hi;
        share(N, 8, &lo, &hi);
        for (int r0 = lo; r0 < hi; r0 += FWD_ROWS) {
            int rows = hi - r0 < FWD_ROWS ? hi - r0 : FWD_ROWS;
            float *o = (pre ? pre : out) + (size_t)r0 * OC, beta = 0.0f;
            if (res && bias) {
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < OC; j++)
                        o[(size_t)i * OC + j] = res[(size_t)(r0 + i) * OC + j] + bias[j];
                beta = 1.0f;
            } else if (res) {
                memcpy(o, res + (size_t)r0 * OC, sizeof(float) * (size_t)rows * OC);
                beta = 1.0f;
            } else if (bias) {
                for (int i = 0; i < rows; i++)
                    memcpy(o + (size_t)i * OC, bias, sizeof(float) * (size_t)OC);
                beta = 1.0f;
            }
            /* (rows,C) x (OC,C)^T -> (rows,OC) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f,
                        inp + (size_t)r0 * C, C, weight, C, beta, o, OC);
            if (pre)
                gelu_forward_cpu(out + (size_t)r0 * OC, o, (size_t)rows * OC);
        }
    }
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC)
{
    forward(out, NULL, NULL, inp, weight, bias, N, C, OC);
}

void matmul_forward_gelu_cpu(float *out, float *pre, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC)
{
    forward(out, pre, NULL, inp, weight, bias, N, C, OC);
}

void matmul_forward_residual_cpu(float *out, const float *res, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC)
{
    forward(out, NULL, res, inp, weight, bias, N, C, OC);
}

/* d *= gelu'(x), in place: gelu_cpu.c's backward with dinp = 0, the same expression, so
 * 0 + d * gelu'(x) there equals d * gelu'(x) here bit for bit. */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f
CPU_CLONES static void times_gelu_grad(float *d, const float *x, long n)
{
    for (long i = 0; i < n; i++) {
        float xi = x[i];
        float u = GELU_SCALE * (xi + GELU_CUBE * xi * xi * xi);
        float t = cpu_tanhf(u);
        float sech2 = 1.0f - t * t;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * xi * xi);
        d[i] = d[i] * (0.5f * (1.0f + t) + 0.5f * xi * sech2 * du);
    }
}

/* Rows of N per weight-gradient partial (see backward). */
#define DW_ROWS 2048

static void backward(float *dinp, int set, const float *pre, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *weight, int N, int C, int OC)
{
    const int nblk = (N + DW_ROWS - 1) / DW_ROWS;
    float *part = nblk > 1 ? xmallocarray((size_t)nblk * OC * C, sizeof(float)) : NULL;

    cpu_blas_single(); /* we split GEMMs over our own threads (cpu.h) */
#pragma omp parallel if ((size_t)N * C * OC > SPLIT_MIN_MACS)
    {
        int lo, hi;
        /* dinp (N,C) (+)= dout (N,OC) x weight (OC,C): split rows of dinp, in row blocks so the
         * GELU derivative is applied while the block is in cache. */
        share(N, 8, &lo, &hi);
        for (int r0 = lo; dinp && r0 < hi; r0 += FWD_ROWS) {
            int rows = hi - r0 < FWD_ROWS ? hi - r0 : FWD_ROWS;
            float *d = dinp + (size_t)r0 * C;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f,
                        dout + (size_t)r0 * OC, OC, weight, C, set ? 0.0f : 1.0f, d, C);
            if (pre)
                times_gelu_grad(d, pre + (size_t)r0 * C, (long)rows * C);
        }
        /* dweight (OC,C) += dout^T (OC,N) x inp (N,C). Long N: one GEMM per block of DW_ROWS
         * rows of N into its own partial (any thread), then dweight += the partials in block
         * order; short N: split rows of dweight. Either way no two threads share an output and
         * the sums keep an order fixed by N alone: deterministic, and independent of the
         * thread count. */
        if (part) {
#pragma omp for schedule(static)
            for (int b = 0; b < nblk; b++) {
                int k0 = b * DW_ROWS, kn = N - k0 < DW_ROWS ? N - k0 : DW_ROWS;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, kn, 1.0f,
                            dout + (size_t)k0 * OC, OC, inp + (size_t)k0 * C, C, 0.0f,
                            part + (size_t)b * OC * C, C);
            }
            const long n = (long)OC * C;
#pragma omp for schedule(static)
            for (long i = 0; i < n; i++) {
                float sum = dweight[i];
                for (int b = 0; b < nblk; b++)
                    sum += part[(size_t)b * n + i];
                dweight[i] = sum;
            }
        }
        share(OC, 8, &lo, &hi);
        if (hi > lo) {
            if (!part)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, C, N, 1.0f,
                            dout + lo, OC, inp, C, 1.0f, dweight + (size_t)lo * C, C);
            if (dbias)
                colsum(dbias, dout, N, OC, lo, hi);
        }
    }
    free(part);
}

void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC)
{
    backward(dinp, 0, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}

void matmul_backward_gelu_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *pre, const float *weight, int N,
                              int C, int OC)
{
    backward(dinp, 1, pre, dweight, dbias, dout, inp, weight, N, C, OC);
}
