/*
 * ckpt.h - checkpoints on the shared volume (DESIGN.md §4).
 *
 * Layout: <root>/<job>/step-<N>/ holding
 *   model.safetensors      weights, one tensor per model tensor (model_io.h) (safetensors:
 *                          8-byte LE header length, JSON header with
 *                          dtype/shape/data_offsets, raw little-endian data; loads with the
 *                          Python `safetensors` package)
 *   optimizer.safetensors  optimiser state (e.g. AdamW m and v), same format
 *   state.json             {"format":"gantry-ckpt-v1","step","epoch","sampler":{"epoch",
 *                          "consumed"},"world_size","config_hash","extra":{...caller's: RNG...}}
 *   <side files>           the caller's small files (ckpt_snapshot_add_file): the worker's
 *                          config.json and vocab.txt, which make a step directory a model that
 *                          gantry-predict can load on its own
 *   MANIFEST.sha256        "<sha256>  <file>" per file (`sha256sum -c MANIFEST.sha256` works)
 *
 * Writing is crash-safe: files go to <root>/<job>/.tmp-step-<N>.<pid>/, each is fsynced, the
 * manifest is written last, the directory is fsynced, renamed to step-<N>, and the parent is
 * fsynced. Then only the newest `keep` step directories up to the one written stay, and the
 * snapshot's keep_also (the best evaluation's step, which Hugging Face's save_total_limit keeps
 * too); ones numbered above the one written are left alone (not this run's history: the worker
 * retires them); stale .tmp-* are removed.
 * The writer copies everything into a snapshot first (fast, memcpy) and writes it on a
 * background thread, so training continues while the disk works.
 *
 * Two-phase checkpoints (as in CheckFreq, FAST '21): a snapshot may instead *borrow* the
 * caller's tensors (ckpt_snapshot_borrow). ckpt_writer_save then only hands them over; the
 * writer's staging thread copies them into one of two buffers the writer keeps and reuses
 * (pre-faulted by ckpt_writer_reserve, so the copy runs at memory speed), and the writing thread
 * writes from that copy. The caller keeps reading the borrowed memory (the next forward and
 * backward) and calls ckpt_writer_fence before it modifies it (the optimizer step). Training is
 * blocked only for the hand-off and for whatever of the copy is left at the fence; a save waits
 * only when both buffers are busy (one being written, the other queued or staging).
 *
 * Reading: ckpt_find_latest() walks step directories from the newest and returns the first one
 * whose manifest checks out (every file present with the right SHA-256, state.json's step
 * matching the name); truncated, bit-flipped or partial ones are skipped with a warning.
 *
 * Only one process (rank 0) writes; every rank may read.
 */
#ifndef GANTRY_CKPT_H
#define GANTRY_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "worker/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_MAX_NAME 128
#define CKPT_MAX_DIMS 8
#define CKPT_MAX_HASH 128
#define CKPT_MAX_HEADER (64u << 20) /* safetensors JSON header limit */
/* state.json's counters (step, epochs, samples consumed) are integers in 0..2^53 (exact in
 * JSON's doubles); a checkpoint that says otherwise is corrupt */
#define CKPT_MAX_COUNT ((int64_t)1 << 53)

enum ckpt_dtype { CKPT_F32, CKPT_F16, CKPT_BF16, CKPT_I32, CKPT_I64, CKPT_U8 };

#define CKPT_MAX_FILES 8            /* side files per checkpoint */
#define CKPT_MAX_FILE_BYTES (64u << 20) /* one side file */

/* Which file a tensor belongs to. */
enum ckpt_part { CKPT_WEIGHTS, CKPT_OPTIM };

struct ckpt_tensor {
    char name[CKPT_MAX_NAME];
    enum ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    size_t bytes;
    void *data;    /* owned by the snapshot; borrowed (the caller's) until the writer stages it */
    int borrowed_; /* internal: 1 while data is the caller's, 2 once it is in a writer buffer */
};

struct ckpt_meta {
    int64_t step;
    uint64_t epoch;
    struct sampler_pos sampler;
    int world_size;
    char config_hash[CKPT_MAX_HASH + 1];
};

/* A side file: written beside the tensors and listed in the manifest. */
struct ckpt_file {
    char name[CKPT_MAX_NAME]; /* a plain file name: [A-Za-z0-9._-], not starting with '.' */
    void *data;               /* owned */
    size_t len;
};

/* Everything one checkpoint holds, in memory. */
struct ckpt_snapshot {
    struct ckpt_meta meta;
    struct ckpt_tensor *t[2]; /* [CKPT_WEIGHTS], [CKPT_OPTIM] */
    size_t n[2];
    json_t *extra; /* object for the caller's state (RNG, LR scheduler, ...); owned */
    struct ckpt_file *files; /* side files, n_files of them (at most CKPT_MAX_FILES) */
    size_t n_files;
    int64_t keep_also; /* writing it, a step directory kept beside the newest `keep` (the best
                        * evaluation's); -1 (ckpt_snapshot_new's) none */
};

/* A new, empty snapshot (extra = {}); free with ckpt_snapshot_free(). */
struct ckpt_snapshot *ckpt_snapshot_new(const struct ckpt_meta *meta);
void ckpt_snapshot_free(struct ckpt_snapshot *s);

/* Copies `data` (prod(shape) elements of dtype) into the snapshot. Names must be unique per part
 * and shorter than CKPT_MAX_NAME; 0 or DIST_EUSAGE. */
int ckpt_snapshot_add(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                      enum ckpt_dtype dtype, int ndim, const int64_t *shape, const void *data)
    __attribute__((warn_unused_result));

/* Like ckpt_snapshot_add but without the copy: the tensor points at `data`, which must stay
 * valid and unmodified until the snapshot is staged (ckpt_writer_fence after ckpt_writer_save;
 * ckpt_write and ckpt_snapshot_free do not need it staged). 0 or DIST_EUSAGE. */
int ckpt_snapshot_borrow(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                         enum ckpt_dtype dtype, int ndim, const int64_t *shape, const void *data)
    __attribute__((warn_unused_result));

/* Copies len bytes as side file `name` (a plain file name other than the checkpoint's own
 * files, unique, at most CKPT_MAX_FILE_BYTES; at most CKPT_MAX_FILES per snapshot). 0 or
 * DIST_EUSAGE. */
int ckpt_snapshot_add_file(struct ckpt_snapshot *s, const char *name, const void *data, size_t len)
    __attribute__((warn_unused_result));

/* Borrowed tensor by name, or NULL. */
const struct ckpt_tensor *ckpt_snapshot_find(const struct ckpt_snapshot *s, enum ckpt_part part,
                                             const char *name);

size_t ckpt_dtype_size(enum ckpt_dtype d);

/* ---- writing --------------------------------------------------------------------------------- */

/* Writes s synchronously as <root>/<job>/step-<s->meta.step>, then keeps the newest `keep`
 * (keep <= 0: all). 0 or DIST_EIO with a message naming the path and the errno. */
int ckpt_write(const char *root, const char *job, int keep, const struct ckpt_snapshot *s)
    __attribute__((warn_unused_result));

struct ckpt_writer;

/* A background writer for <root>/<job> (two threads: staging and writing; it keeps two snapshot
 * buffers, so up to twice the checkpoint size of memory). Free with ckpt_writer_free(). */
struct ckpt_writer *ckpt_writer_new(const char *root, const char *job, int keep);
/* Allocates and pre-faults both snapshot buffers for checkpoints of up to `bytes` of tensor data
 * (call once at start: faulting fresh memory in is 4x slower than copying into it). Buffers
 * that turn out too small are grown by the staging thread. 0 or DIST_EUSAGE (out of memory). */
int ckpt_writer_reserve(struct ckpt_writer *w, size_t bytes) __attribute__((warn_unused_result));
/* Steals s and writes it in the background, after any earlier save. Borrowed tensors are staged
 * first (see ckpt_writer_fence). Waits only when both buffers are busy. Returns the first error
 * of a write that finished since the last report (s is still taken), else 0. */
int ckpt_writer_save(struct ckpt_writer *w, struct ckpt_snapshot *s)
    __attribute__((warn_unused_result));
/* Waits until every saved snapshot's borrowed tensors are copied: after it the caller may modify
 * them. Cheap when the copy is done. */
void ckpt_writer_fence(struct ckpt_writer *w);
/* Waits for every write in flight; the first error since the last report, else 0. */
int ckpt_writer_wait(struct ckpt_writer *w) __attribute__((warn_unused_result));
/* Waits, then frees. NULL is a no-op. */
void ckpt_writer_free(struct ckpt_writer *w);

/* ---- reading ----------------------------------------------------------------------------------- */

/* Checks one step directory: manifest, hashes, state.json, safetensors headers. 0, or
 * DIST_ECORRUPT / DIST_ENOENT with *why (may be NULL) saying what is wrong. */
int ckpt_verify(const char *dir, char *why, size_t why_len);

/* Newest valid checkpoint under <root>/<job>: *step and dir (e.g. ".../step-1200"). Invalid ones
 * are skipped with a warning. DIST_ENOENT when there is none (start from scratch). */
int ckpt_find_latest(const char *root, const char *job, int64_t *step, char *dir, size_t dir_len)
    __attribute__((warn_unused_result));

/* Loads a verified step directory. *out is new: ckpt_snapshot_free(). */
int ckpt_load(const char *dir, struct ckpt_snapshot **out) __attribute__((warn_unused_result));

/* Checks one file of step directory dir against the manifest (listed, SHA-256 matching): for
 * readers that need only some of the files (gantry-predict: the weights, not the optimizer
 * state). 0, DIST_ENOENT (not listed) or DIST_ECORRUPT, with *why. */
int ckpt_verify_file(const char *dir, const char *name, char *why, size_t why_len);

/* Reads side file `name` of step directory dir into a new NUL-terminated buffer (*len bytes, the
 * NUL not counted; free()) and checks its bytes against the manifest's SHA-256, so what it
 * returns is what was written. NULL with *why saying what is wrong: DIST_ENOENT in *rc when the
 * manifest does not list it (a checkpoint written without it), DIST_ECORRUPT when it is
 * missing, too large or does not match. */
char *ckpt_read_file(const char *dir, const char *name, size_t *len, int *rc, char *why,
                     size_t why_len);

/* Reads one safetensors file into part CKPT_WEIGHTS of a new snapshot (meta zeroed); for tools
 * and tests. */
int ckpt_read_safetensors(const char *path, struct ckpt_snapshot **out)
    __attribute__((warn_unused_result));

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_CKPT_H */
