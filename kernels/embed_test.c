/* Token + position embedding and the embedding bag on the CPU: values, repeated ids accumulate,
 * backward against finite differences. */
#include "kernels/embed.h"

#include "common/test.h"
#include "kernels/gradcheck.h"

enum { B = 2, T = 3, C = 4, V = 5, MAXT = 4, M = 4, D = 3 };
static const int tokens[B * T] = {1, 4, 1, 0, 2, 2}; /* repeats: gradients must add up */
static const int count[B] = {4, 0};

struct ctx {
    float wte[V * C], wpe[MAXT * C], out[B * T * C], dout[B * T * C];
    float table[V * D], bag[B * D], dbag[B * D];
};

static double loss(void *p)
{
    struct ctx *c = p;
    embed_forward_cpu(c->out, tokens, c->wte, c->wpe, B, T, C);
    return gc_dot(c->out, c->dout, B * T * C);
}

static double bag_loss(void *p)
{
    struct ctx *c = p;
    static const int ids[B * M] = {1, 3, 1, 4, 0, 0, 0, 0};
    embbag_forward_cpu(c->bag, ids, count, c->table, B, M, D);
    return gc_dot(c->bag, c->dbag, B * D);
}

static void test_values(void)
{
    static struct ctx c;
    for (int i = 0; i < V * C; i++)
        c.wte[i] = (float)i;
    for (int i = 0; i < MAXT * C; i++)
        c.wpe[i] = 100.0f * (float)i;
    embed_forward_cpu(c.out, tokens, c.wte, c.wpe, B, T, C);
    TEST_NEAR(c.out[(1 * T + 2) * C + 3], 2 * C + 3 + 100.0 * (2 * C + 3), 0);
    for (int i = 0; i < V * D; i++)
        c.table[i] = (float)i;
    bag_loss(&c);
    TEST_NEAR(c.bag[0], (3 + 9 + 3 + 12) / 4.0, 1e-6);
    TEST_NEAR(c.bag[D + 1], 0.0, 0); /* empty bag: zeros */
}

static void test_backward_matches_finite_differences(void)
{
    static struct ctx c;
    static float dwte[V * C], dwpe[MAXT * C], dtable[V * D];
    static const int ids[B * M] = {1, 3, 1, 4, 0, 0, 0, 0};
    uint64_t s = 23;
    gc_fill(c.wte, V * C, &s, -1, 1);
    gc_fill(c.wpe, MAXT * C, &s, -1, 1);
    gc_fill(c.dout, B * T * C, &s, -1, 1);
    gc_fill(c.table, V * D, &s, -1, 1);
    gc_fill(c.dbag, B * D, &s, -1, 1);
    embed_backward_cpu(dwte, dwpe, c.dout, tokens, B, T, C);
    gc_check("dwte", c.wte, dwte, V * C, 1, loss, &c, 1e-2f, 1e-4, 1e-3);
    gc_check("dwpe", c.wpe, dwpe, MAXT * C, 1, loss, &c, 1e-2f, 1e-4, 1e-3);
    embbag_backward_cpu(dtable, c.dbag, ids, count, B, M, D);
    gc_check("dtable", c.table, dtable, V * D, 1, bag_loss, &c, 1e-2f, 1e-4, 1e-3);
}

/* Above the parallel threshold, with repeated ids: the same bits as the serial loop. */
static void test_backward_parallel_matches_serial(void)
{
    enum { PB = 4, PT = 128, PC = 160, PV = 37 };
    static int tok[PB * PT];
    static float dout[PB * PT * PC], dwte[PV * PC], dwpe[PT * PC], rte[PV * PC], rpe[PT * PC];
    uint64_t s = 77;
    gc_fill(dout, PB * PT * PC, &s, -1, 1);
    gc_fill(dwte, PV * PC, &s, -1, 1);
    gc_fill(dwpe, PT * PC, &s, -1, 1);
    for (int i = 0; i < PV * PC; i++)
        rte[i] = dwte[i];
    for (int i = 0; i < PT * PC; i++)
        rpe[i] = dwpe[i];
    for (int i = 0; i < PB * PT; i++)
        tok[i] = (i * 7) % PV;
    embed_backward_cpu(dwte, dwpe, dout, tok, PB, PT, PC);
    for (int i = 0; i < PB * PT; i++) {
        for (int c = 0; c < PC; c++) {
            rte[tok[i] * PC + c] += dout[i * PC + c];
            rpe[(i % PT) * PC + c] += dout[i * PC + c];
        }
    }
    int bad = 0;
    for (int i = 0; i < PV * PC; i++)
        bad += dwte[i] != rte[i];
    for (int i = 0; i < PT * PC; i++)
        bad += dwpe[i] != rpe[i];
    TEST_EQ_INT(bad, 0);
}

int main(void)
{
    TEST_RUN(test_values);
    TEST_RUN(test_backward_matches_finite_differences);
    TEST_RUN(test_backward_parallel_matches_serial);
    return test_summary();
}
