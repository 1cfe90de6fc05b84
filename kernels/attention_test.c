/* Self-attention on the CPU: against a naive double-precision reference with an explicit key
 * mask, padding keys have no influence, backward against finite differences, and the same bits
 * on 1 and 2 threads. Two shapes: a tiny one (head size 4), and head size 32 with lengths that
 * are not multiples of the kernel's row blocks and vector tiles. */
#include "kernels/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/test.h"
#include "kernels/gradcheck.h"

struct ctx {
    int B, T, C, NH, len[2];
    float *qkv, *out, *att, *dout;
};

static const struct ctx shapes[2] = {{.B = 2, .T = 5, .C = 8, .NH = 2, .len = {5, 3}},
                                     {.B = 2, .T = 37, .C = 64, .NH = 2, .len = {37, 19}}};

static size_t n_qkv(const struct ctx *c) { return (size_t)c->B * c->T * 3 * c->C; }
static size_t n_out(const struct ctx *c) { return (size_t)c->B * c->T * c->C; }

static struct ctx make(int which, uint64_t seed)
{
    struct ctx c = shapes[which];
    c.qkv = malloc(sizeof(float) * n_qkv(&c));
    c.out = malloc(sizeof(float) * n_out(&c));
    c.dout = malloc(sizeof(float) * n_out(&c));
    c.att = malloc(sizeof(float) * (size_t)c.B * c.NH * c.T * c.T);
    gc_fill(c.qkv, n_qkv(&c), &seed, -2, 2);
    gc_fill(c.dout, n_out(&c), &seed, -1, 1);
    return c;
}

static void drop(struct ctx *c)
{
    free(c->qkv), free(c->out), free(c->dout), free(c->att);
}

static double loss(void *p)
{
    struct ctx *c = p;
    attention_forward_cpu(c->out, c->att, c->qkv, c->len, c->B, c->T, c->C, c->NH);
    return gc_dot(c->out, c->dout, n_out(c));
}

static void check_forward(int which)
{
    struct ctx c = make(which, 21);
    const int T = c.T, C = c.C, NH = c.NH, HS = C / NH;
    double *sc = malloc(sizeof(double) * T);
    attention_forward_cpu(c.out, c.att, c.qkv, c.len, c.B, T, C, NH);
    int bad = 0;
    for (int b = 0; b < c.B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < c.len[b]; i++) {
                double mx = -INFINITY, sum = 0;
                const float *q = c.qkv + (size_t)(b * T + i) * 3 * C + h * HS;
                for (int j = 0; j < T; j++) {
                    const float *k = c.qkv + (size_t)(b * T + j) * 3 * C + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)q[e] * k[e];
                    sc[j] = j < c.len[b] ? d / sqrt(HS) : -INFINITY; /* the padding mask */
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < T; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        o += sc[j] / sum * c.qkv[(size_t)(b * T + j) * 3 * C + 2 * C + h * HS + e];
                    bad += !(fabs(c.out[(size_t)(b * T + i) * C + h * HS + e] - o) <= 1e-5);
                }
                for (int j = 0; j < T; j++)
                    bad += !(fabs(c.att[((size_t)(b * NH + h) * T + i) * T + j] - sc[j] / sum) <=
                             1e-6);
            }
            /* Padding query rows come out as zeros, in att and out. */
            for (int i = c.len[b]; i < T; i++)
                for (int j = 0; j < T; j++)
                    bad += c.att[((size_t)(b * NH + h) * T + i) * T + j] != 0.0f ||
                           (j < HS && c.out[(size_t)(b * T + i) * C + h * HS + j] != 0.0f);
        }
    }
    TEST_EQ_INT(bad, 0);
    free(sc);
    drop(&c);
}

static void test_forward_matches_naive(void)
{
    check_forward(0);
    check_forward(1);
}

static void check_padding(int which)
{
    struct ctx c = make(which, 4);
    float *before = malloc(sizeof(float) * n_out(&c));
    attention_forward_cpu(before, c.att, c.qkv, c.len, c.B, c.T, c.C, c.NH);
    for (int t = c.len[1]; t < c.T; t++) /* scribble over sequence 1's padding */
        for (int e = 0; e < 3 * c.C; e++)
            c.qkv[(size_t)(1 * c.T + t) * 3 * c.C + e] = 1e3f;
    attention_forward_cpu(c.out, c.att, c.qkv, c.len, c.B, c.T, c.C, c.NH);
    TEST_CHECK(memcmp(c.out, before, sizeof(float) * n_out(&c)) == 0);
    free(before);
    drop(&c);
}

static void test_padding_keys_have_no_influence(void)
{
    check_padding(0);
    check_padding(1);
}

static void check_backward(int which, size_t stride)
{
    struct ctx c = make(which, 9);
    size_t n = n_qkv(&c);
    float *dqkv = malloc(sizeof(float) * n);
    gc_fill(c.qkv, n, &(uint64_t){9}, -1, 1);
    for (size_t i = 0; i < n; i++)
        dqkv[i] = 2.0f; /* backward accumulates: the 2.0 must survive */
    loss(&c);
    attention_backward_cpu(dqkv, c.dout, c.qkv, c.att, c.len, c.B, c.T, c.C, c.NH);
    for (size_t i = 0; i < n; i++)
        dqkv[i] -= 2.0f;
    gc_check("dqkv", c.qkv, dqkv, n, stride, loss, &c, 1e-2f, 1e-3, 1e-2);
    free(dqkv);
    drop(&c);
}

static void test_backward_matches_finite_differences(void)
{
    check_backward(0, 1);
    check_backward(1, 7);
}

/* Each (b, h) pair is computed by one thread in a fixed order: the thread count changes nothing. */
static void test_thread_count_independent(void)
{
#ifdef _OPENMP
    struct ctx c = make(1, 33);
    size_t n = n_qkv(&c), no = n_out(&c), na = (size_t)c.B * c.NH * c.T * c.T;
    float *d[2], *o[2], *a[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        d[t] = calloc(n, sizeof(float)), o[t] = malloc(sizeof(float) * no);
        a[t] = malloc(sizeof(float) * na);
        attention_forward_cpu(o[t], a[t], c.qkv, c.len, c.B, c.T, c.C, c.NH);
        attention_backward_cpu(d[t], c.dout, c.qkv, a[t], c.len, c.B, c.T, c.C, c.NH);
    }
    TEST_CHECK(memcmp(o[0], o[1], sizeof(float) * no) == 0);
    TEST_CHECK(memcmp(a[0], a[1], sizeof(float) * na) == 0);
    TEST_CHECK(memcmp(d[0], d[1], sizeof(float) * n) == 0);
    for (int t = 0; t < 2; t++)
        free(d[t]), free(o[t]), free(a[t]);
    drop(&c);
#endif
}

int main(void)
{
    TEST_RUN(test_forward_matches_naive);
    TEST_RUN(test_padding_keys_have_no_influence);
    TEST_RUN(test_backward_matches_finite_differences);
    TEST_RUN(test_thread_count_independent);
    return test_summary();
}
