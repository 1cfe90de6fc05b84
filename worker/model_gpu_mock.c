/*
 * model_gpu_mock.c - model_gpu.h on the CPU model (model.c, optim.c), for testing the GPU
 * training loop (train_gpu.c) where there is no GPU: train_gpu_loop_test links train_gpu.c and
 * train_gpu_test.c against this file instead of model_gpu.cu, so the loop's data order, gradient
 * accumulation, reduce buffer layout, loss statistics, checkpoint copies and resume are checked in
 * every CPU build. Not part of any binary. Follows model_gpu.h's contract: the "device" state is a
 * second host model, the gradient buffer has n_params + MODEL_GPU_STATS floats (sum of losses,
 * examples, stop votes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "kernels/gpu.h"
#include "worker/model_gpu.h"

struct model_gpu {
    struct model dm; /* the "device" model: its params and grads */
    size_t n;
    float *am, *av;  /* AdamW moments */
    float *gbuf;     /* n + MODEL_GPU_STATS: the gradients as handed out by model_gpu_grads, then
                      * the stats */
    int gbuf_live;   /* gbuf[0..n) holds the gradients (model_gpu_grads was called) */
    double loss_acc;
    float votes;
    float norm;
    const int *tokens, *len, *labels;
    int *tok_copy, *len_copy, *lab_copy;
    model_gpu_ready_fn ready; /* armed: the next backward fires it per unit */
    void *ready_ctx;
};

int gpu_select_device(int local_rank)
{
    (void)local_rank;
    return 0;
}

double gpu_peak_flops(int bf16)
{
    (void)bf16;
    return 0.0; /* unknown: the logs show TFLOP/s without MFU */
}

int model_gpu_device_count(void)
{
    return 1;
}

struct model_gpu *model_gpu_new(const struct model *m, int max_batch, unsigned flags, char *err,
                                size_t errlen)
{
    struct model_gpu *g = xcalloc(1, sizeof(*g));
    (void)flags; /* the CPU model: fp32, its one attention; either model type */
    if (model_init(&g->dm, &m->cfg, max_batch, 0, err, errlen)) {
        free(g);
        return NULL;
    }
    g->n = m->n_params;
    g->am = xcalloc(g->n, sizeof(float)), g->av = xcalloc(g->n, sizeof(float));
    g->gbuf = xcalloc(g->n + MODEL_GPU_STATS, sizeof(float));
    size_t N = (size_t)max_batch * m->cfg.max_seq_len;
    g->tok_copy = xcalloc(N, sizeof(int));
    g->len_copy = xcalloc((size_t)max_batch, sizeof(int));
    g->dm.label_words = m->label_words; /* the task, fixed for this device model */
    g->lab_copy = xcalloc((size_t)max_batch * (m->label_words > 0 ? (size_t)m->label_words : 1),
                          sizeof(int));
    model_gpu_upload(g, m->params, NULL, NULL);
    return g;
}

void model_gpu_free(struct model_gpu *g)
{
    if (!g)
        return;
    model_cleanup(&g->dm);
    free(g->am), free(g->av), free(g->gbuf);
    free(g->tok_copy), free(g->len_copy), free(g->lab_copy);
    free(g);
}

void model_gpu_upload(struct model_gpu *g, const float *params, const float *am, const float *av)
{
    memcpy(g->dm.params, params, g->n * sizeof(float));
    if (am)
        memcpy(g->am, am, g->n * sizeof(float));
    else
        memset(g->am, 0, g->n * sizeof(float));
    if (av)
        memcpy(g->av, av, g->n * sizeof(float));
    else
        memset(g->av, 0, g->n * sizeof(float));
}

void model_gpu_download(struct model_gpu *g, float *params, float *am, float *av)
{
    if (params)
        memcpy(params, g->dm.params, g->n * sizeof(float));
    if (am)
        memcpy(am, g->am, g->n * sizeof(float));
    if (av)
        memcpy(av, g->av, g->n * sizeof(float));
}

/* Copies like the real upload: the caller may reuse its arrays at return. */
void model_gpu_batch(struct model_gpu *g, const int *tokens, const int *len, const int *labels,
                     int B, int T)
{
    memcpy(g->tok_copy, tokens, (size_t)B * T * sizeof(int));
    memcpy(g->len_copy, len, (size_t)B * sizeof(int));
    if (labels)
        memcpy(g->lab_copy, labels,
               (size_t)B * (g->dm.label_words > 0 ? (size_t)g->dm.label_words : 1) * sizeof(int));
    g->tokens = g->tok_copy, g->len = g->len_copy, g->labels = labels ? g->lab_copy : NULL;
    g->dm.B = B, g->dm.T = T;
}

void model_gpu_loss(struct model_gpu *g, float smoothing, const float *class_weight)
{
    g->dm.label_smoothing = smoothing;
    g->dm.class_weight = class_weight; /* borrowed: the caller keeps them while it trains */
}

void model_gpu_zero_grad(struct model_gpu *g)
{
    model_zero_grad(&g->dm);
    memset(g->gbuf, 0, (g->n + MODEL_GPU_STATS) * sizeof(float));
    g->gbuf_live = 0;
}

void model_gpu_forward(struct model_gpu *g)
{
    int B = g->dm.B;
    model_forward(&g->dm, g->tokens, g->len, g->labels, B, g->dm.T);
    if (g->labels) {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += g->dm.losses[b];
        g->gbuf[g->n] += s;
        g->gbuf[g->n + 1] += (float)B;
    }
}

/* The CPU backward finishes every unit at once: the gradients go to the handed-out buffer (as
 * model_gpu_grads does; the statistics stay), then the hooks fire in the device's unit order. */
void model_gpu_backward(struct model_gpu *g, float loss_scale)
{
    model_backward(&g->dm, loss_scale);
    if (!g->ready)
        return;
    model_gpu_ready_fn fn = g->ready;
    g->ready = NULL;
    memcpy(g->gbuf, g->dm.grads, g->n * sizeof(float));
    g->gbuf_live = 1;
    for (int u = 0; u < MODEL_GPU_UNITS(g->dm.cfg.layers); u++)
        fn(g->ready_ctx, u);
}

void model_gpu_arm_ready(struct model_gpu *g, model_gpu_ready_fn fn, void *ctx)
{
    g->ready = fn, g->ready_ctx = ctx;
}

void model_gpu_wait_unit(struct model_gpu *g, int unit)
{
    (void)g, (void)unit; /* the CPU backward has returned before any hook fires */
}

void model_gpu_stream_wait_unit(struct model_gpu *g, int unit, struct CUstream_st *stream)
{
    (void)g, (void)unit, (void)stream;
}

void model_gpu_bind_thread(struct model_gpu *g)
{
    (void)g;
}

const char *model_gpu_backend(void)
{
    return "cpu-mock";
}

float *model_gpu_grads(struct model_gpu *g)
{
    memcpy(g->gbuf, g->dm.grads, g->n * sizeof(float));
    g->gbuf_live = 1;
    return g->gbuf;
}

void model_gpu_grads_put(struct model_gpu *g, const float *src, size_t n)
{
    memcpy(g->gbuf, src, n * sizeof(float));
    g->gbuf_live = 1;
}

void model_gpu_grads_get(struct model_gpu *g, float *dst, size_t n)
{
    memcpy(dst, g->gbuf, n * sizeof(float));
}

void model_gpu_scale_grads(struct model_gpu *g, float s)
{
    for (size_t i = 0; i < g->n; i++)
        g->gbuf[i] *= s;
}

void model_gpu_step(struct model_gpu *g, const struct optim_config *c, float lr, long t)
{
    struct adamw opt = {.m = g->am, .v = g->av, .n = g->n, .t = t - 1};
    if (g->gbuf_live)
        memcpy(g->dm.grads, g->gbuf, g->n * sizeof(float));
    g->norm = adamw_clip_step(&opt, &g->dm, c, lr);
}

void model_gpu_vote_stop(struct model_gpu *g)
{
    g->gbuf[g->n + 2] = 1.0f;
}

float model_gpu_read_votes(struct model_gpu *g)
{
    float v = g->votes;
    g->votes = 0.0f;
    return v;
}

void model_gpu_end_step(struct model_gpu *g)
{
    g->votes += g->gbuf[g->n + 2];
    if (g->gbuf[g->n + 1] > 0.0f)
        g->loss_acc += (double)g->gbuf[g->n] / (double)g->gbuf[g->n + 1];
}

void model_gpu_read_stats(struct model_gpu *g, double *loss_sum, float *grad_norm)
{
    if (loss_sum)
        *loss_sum = g->loss_acc;
    if (grad_norm)
        *grad_norm = g->norm;
    g->loss_acc = 0.0;
}

void model_gpu_read_logits(struct model_gpu *g, float *logits)
{
    memcpy(logits, g->dm.logits, (size_t)g->dm.B * g->dm.cfg.classes * sizeof(float));
}

float model_gpu_last_loss(struct model_gpu *g)
{
    double s = 0.0;
    for (int b = 0; b < g->dm.B; b++)
        s += g->dm.losses[b];
    return g->dm.B ? (float)(s / g->dm.B) : 0.0f;
}

void model_gpu_graph_stats(struct model_gpu *g, long *captures, long *launches, long *evictions)
{
    (void)g; /* the CPU model has no graphs: MODEL_GPU_GRAPHS changes nothing here */
    if (captures)
        *captures = 0;
    if (launches)
        *launches = 0;
    if (evictions)
        *evictions = 0;
}

int model_gpu_profile(struct model_gpu *g, int on)
{
    (void)g, (void)on; /* no device, nothing to time */
    return -1;
}

int model_gpu_profile_report(struct model_gpu *g, FILE *f, int steps)
{
    (void)g, (void)f, (void)steps;
    return -1;
}

void model_gpu_sync(struct model_gpu *g)
{
    (void)g;
}

struct CUstream_st *model_gpu_stream(struct model_gpu *g)
{
    (void)g;
    return NULL;
}
