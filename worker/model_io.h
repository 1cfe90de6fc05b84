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

#include "worker/card.h"
#include "worker/ckpt.h"
#include "worker/model.h"
#include "worker/vocab.h"

/* Borrows every parameter tensor of m into s (part CKPT_WEIGHTS; see ckpt_snapshot_borrow: the
 * memory must stay unmodified until staged). 0 or DIST_EUSAGE. */
int model_snapshot_params(const struct model *m, struct ckpt_snapshot *s)
    __attribute__((warn_unused_result));

/* Copies the parameters in s (named tensors, or the old flat "params") into m. 0, or -1 with
 * "why, what to do" in err naming the tensor that is missing or has another shape, or -2 naming
 * one that holds a NaN or an infinity (a diverged run's: nothing it predicts means anything). */
int model_load_params(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen);

/* The same without the classifier (clsw, clsb): m keeps its own, for other labels. */
int model_load_body(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen);

/*
 * A trained model on disk: a checkpoint's step directory with its card (config.json), vocab
 * (vocab.txt) and weights (model.safetensors), each checked against the manifest as it is read.
 * gantry-predict classifies with one; gantry-worker starts training from one (training.initFrom).
 */
struct model_dir {
    char dir[4096];  /* the step directory */
    long step;       /* its step (state.json), -1 unknown */
    struct model_card card;
    struct vocab *vocab;
    struct model_config mc;        /* the model the card describes */
    struct ckpt_snapshot *weights; /* model.safetensors: as many parameters as mc has */
};

/* Opens arg: a step directory, or a job's checkpoint directory (its newest valid step). 0, or an
 * exit status (64 usage, 65 unusable, 66 missing) with what is wrong and what to do in why (the
 * caller names the flag or field). model_dir_close() frees what was read, also after an error. */
int model_dir_open(const char *arg, struct model_dir *md, char *why, size_t n);
void model_dir_close(struct model_dir *md);

#endif /* GANTRY_MODEL_IO_H */
