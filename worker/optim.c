#include "worker/optim.h"

#include <math.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "kernels/adamw.h"

void optim_config_default(struct optim_config *c)
{
    c->lr = 3e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
    c->grad_clip = 1.0f;
    c->warmup_steps = 0;
    c->total_steps = 0;
    c->min_lr_ratio = 0.0f;
    c->decay = OPTIM_COSINE;
}

void adamw_init(struct adamw *o, size_t n)
{
    o->m = xcalloc(n, sizeof(float));
    o->v = xcalloc(n, sizeof(float));
    o->n = n;
    o->t = 0;
}

void adamw_cleanup(struct adamw *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

float optim_lr(const struct optim_config *c, long step)
{
    double base = c->lr, lo = c->lr * (double)c->min_lr_ratio;
    if (step < c->warmup_steps)
        return (float)(base * (double)(step + 1) / c->warmup_steps);
    if (c->decay == OPTIM_CONSTANT)
        return (float)base;
    long span = c->total_steps - c->warmup_steps;
    double prog = (double)(step - c->warmup_steps) / (double)(span > 1 ? span : 1);
    if (prog > 1.0)
        prog = 1.0;
    if (c->decay == OPTIM_LINEAR)
        return (float)(base + (lo - base) * prog);
    return (float)(lo + (base - lo) * 0.5 * (1.0 + cos(M_PI * prog)));
}

float optim_grad_norm(const float *grads, size_t n)
{
    return (float)sqrt(sumsq_cpu(grads, n));
}

static float clip_coef(float norm, float max_norm)
{
    float coef = max_norm > 0.0f ? max_norm / (norm + 1e-6f) : 1.0f;
    return coef < 1.0f ? coef : 1.0f;
}

float optim_clip_grad_norm(float *grads, size_t n, float max_norm)
{
    float norm = optim_grad_norm(grads, n);
    float coef = clip_coef(norm, max_norm);
    if (coef < 1.0f) {
#pragma omp parallel for if (n > 65536)
        for (size_t i = 0; i < n; i++)
            grads[i] *= coef;
    }
    return norm;
}

static void update(struct adamw *o, struct model *m, const struct optim_config *c, float lr,
                   const float *gscale)
{
    struct adamw_segment segs[MODEL_MAX_TENSORS];
    for (int i = 0; i < m->n_tensors; i++)
        segs[i] = (struct adamw_segment){m->tensors[i].offset, m->tensors[i].count,
                                         m->tensors[i].decay};
    o->t++;
    adamw_update_cpu(m->params, m->grads, o->m, o->v, segs, m->n_tensors, lr, c->beta1, c->beta2,
                     c->eps, c->weight_decay, o->t, gscale);
}

void adamw_step(struct adamw *o, struct model *m, const struct optim_config *c, float lr)
{
    update(o, m, c, lr, NULL);
}

float adamw_clip_step(struct adamw *o, struct model *m, const struct optim_config *c, float lr)
{
    float norm = optim_grad_norm(m->grads, m->n_params);
    float coef = clip_coef(norm, c->grad_clip);
    update(o, m, c, lr, coef < 1.0f ? &coef : NULL);
    return norm;
}
