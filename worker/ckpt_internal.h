/*
 * ckpt_internal.h - shared between ckpt.c (writing) and ckpt_read.c (reading); not for callers.
 */
#ifndef GANTRY_CKPT_INTERNAL_H
#define GANTRY_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/ckpt.h"

#define CKPT_MANIFEST "MANIFEST.sha256"
#define CKPT_NFILES 3
#define CKPT_MAX_MANIFEST 65536
#define CKPT_MAX_STATE (16u << 20)

/* state.json, model.safetensors, optimizer.safetensors: the files every checkpoint has. */
extern const char *const ckpt_files_[CKPT_NFILES];

const char *ckpt_dtype_name_(enum ckpt_dtype d);
/* Appends a tensor that takes ownership of data (`bytes` long). */
void ckpt_snapshot_push_(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                         enum ckpt_dtype dtype, int ndim, const int64_t *shape, void *data,
                         size_t bytes);
/* Step numbers of jobdir/step-<N>, newest first; *out is new (free()). */
size_t ckpt_list_steps_(const char *jobdir, int64_t **out);
int ckpt_rm_rf_(const char *path);
int ckpt_fsync_dir_(const char *dir);

#endif /* GANTRY_CKPT_INTERNAL_H */
