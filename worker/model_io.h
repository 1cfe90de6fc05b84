/*
 * model_io.h - the model's parameters in a checkpoint's model.safetensors, one named tensor per
 * parameter tensor (model.c's table: wte, wpe, ln1w, ..., clsw, clsb; emb for the n-gram model),
 * in the shapes hack/torch_ref.py uses, so `safetensors.torch.load_file` gives PyTorch the same
 * state dict (worker/predict_torch_test.sh runs it). Checkpoints from before 2026-12 hold one
 * flat tensor "params"; model_load_params still reads them.
 */
#ifndef GANTRY_MODEL_IO_H
#define GANTRY_MODEL_IO_H

#include <stddef.h>

#include "worker/ckpt.h"
#include "worker/model.h"

/* Borrows every parameter tensor of m into s (part CKPT_WEIGHTS; see ckpt_snapshot_borrow: the
 * memory must stay unmodified until staged). 0 or DIST_EUSAGE. */
int model_snapshot_params(const struct model *m, struct ckpt_snapshot *s)
    __attribute__((warn_unused_result));

/* Copies the parameters in s (named tensors, or the old flat "params") into m. 0, or -1 with
 * "why, what to do" in err naming the tensor that is missing or has another shape. */
int model_load_params(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen);

#endif /* GANTRY_MODEL_IO_H */
