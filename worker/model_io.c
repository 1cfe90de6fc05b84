/*
 * model_io.c - model parameters <-> named checkpoint tensors (model_io.h).
 */
#include "worker/model_io.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "worker/dist.h"

int model_snapshot_params(const struct model *m, struct ckpt_snapshot *s)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        int64_t shape[3];
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
        int rc = ckpt_snapshot_borrow(s, CKPT_WEIGHTS, t->name, CKPT_F32, t->ndim, shape,
                                      m->params + t->offset);
        if (rc)
            return rc;
    }
    return 0;
}

static void shape_str(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t at = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? "," : "", (long long)shape[d]);
}

int model_load_params(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen)
{
    const struct ckpt_tensor *flat = ckpt_snapshot_find(s, CKPT_WEIGHTS, "params");
    size_t bytes = m->n_params * sizeof(float);

    if (flat) { /* written before the tensors had names */
        if (flat->dtype != CKPT_F32 || flat->bytes != bytes) {
            snprintf(err, errlen, "its \"params\" tensor holds %zu bytes, this model has %zu "
                                  "parameters (%zu bytes of F32): another model or data?",
                     flat->bytes, m->n_params, bytes);
            return -1;
        }
        memcpy(m->params, flat->data, bytes);
        return 0;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        const struct ckpt_tensor *c = ckpt_snapshot_find(s, CKPT_WEIGHTS, t->name);
        int64_t want[3];
        char ws[64], gs[128];
        bool same = c && c->dtype == CKPT_F32 && c->ndim == t->ndim &&
                    c->bytes == t->count * sizeof(float);
        for (int d = 0; d < t->ndim; d++) {
            want[d] = t->shape[d];
            same = same && c->shape[d] == want[d];
        }
        if (!same) {
            shape_str(ws, sizeof(ws), t->ndim, want);
            if (c)
                shape_str(gs, sizeof(gs), c->ndim, c->shape);
            snprintf(err, errlen, "tensor \"%s\" %s%s%s, this model needs F32 [%s]: another "
                                  "model or data?", t->name, c ? "is [" : "is missing",
                     c ? gs : "", c ? "]" : "", ws);
            return -1;
        }
        memcpy(m->params + t->offset, c->data, c->bytes);
    }
    return 0;
}
