#include "worker/optim.h"

#include <math.h>
#include <stdlib.h>

#include "common/xalloc.h"

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
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        s += (double)grads[i] * grads[i];
    return (float)sqrt(s);
}

float optim_clip_grad_norm(float *grads, size_t n, float max_norm)
{
    float norm = optim_grad_norm(grads, n);
    if (max_norm > 0.0f) {
        float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f) {
#pragma omp parallel for if (n > 65536)
            for (size_t i = 0; i < n; i++)
                grads[i] *= coef;
        }
    }
    return norm;
}

void adamw_step(struct adamw *o, struct model *m, const struct optim_config *c, float lr)
{
    o->t++;
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    float bc1 = 1.0f - powf(b1, (float)o->t), bc2 = 1.0f - powf(b2, (float)o->t);
    float step = lr / bc1, sbc2 = sqrtf(bc2);

    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset, *g = m->grads + t->offset;
        float *mm = o->m + t->offset, *vv = o->v + t->offset;
        float shrink = t->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        long n = (long)t->count;
#pragma omp parallel for if (n > 65536)
        for (long j = 0; j < n; j++) {
            float gj = g[j];
            mm[j] = b1 * mm[j] + (1.0f - b1) * gj;
            vv[j] = b2 * vv[j] + (1.0f - b2) * gj * gj;
            p[j] = p[j] * shrink - step * mm[j] / (sqrtf(vv[j]) / sbc2 + eps);
        }
    }
}
