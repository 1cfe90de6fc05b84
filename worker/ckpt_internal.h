/*
 * ckpt_internal.h - shared between ckpt.c (writing) and ckpt_read.c (reading); not for callers.
 */
#ifndef GANTRY_CKPT_INTERNAL_H
#define GANTRY_CKPT_INTERNAL_H

#include <stdbool.h>
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
/* A side file's name is a plain file name: 1..CKPT_MAX_NAME-1 bytes of [A-Za-z0-9._-], not
 * starting with '.', and none of the checkpoint's own files (nor the manifest). */
bool ckpt_side_name_ok_(const char *name);
/* Appends a tensor that takes ownership of data (`bytes` long). */
void ckpt_snapshot_push_(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                         enum ckpt_dtype dtype, int ndim, const int64_t *shape, void *data,
                         size_t bytes);
/* Step numbers of jobdir/step-<N>, newest first; *out is new (free()). */
size_t ckpt_list_steps_(const char *jobdir, int64_t **out);
int ckpt_rm_rf_(const char *path);
int ckpt_fsync_dir_(const char *dir);

#endif /* GANTRY_CKPT_INTERNAL_H */
