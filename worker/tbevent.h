/*
 * tbevent.h - TensorBoard event files (scalars), written without TensorFlow.
 *
 * `tensorboard --logdir DIR` reads files named events.out.tfevents.<unix time>.<host>... in DIR.
 * Each file is a sequence of TFRecords:
 *
 *     uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
 *
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), and each record's data is a
 * serialized tensorflow.Event protobuf. The first event carries file_version "brain.Event:2"; the
 * rest carry a Summary with one Value{tag, simple_value}. We only ever write these few fields, so
 * they are encoded by hand (a varint and length-delimited writer, see tbevent.c); the encoding is
 * checked byte for byte against bytes produced by the protobuf library and, in obs_py_test, read
 * back by TensorBoard's own EventAccumulator. CRC32C comes from Intel ISA-L (libisal).
 *
 * Resuming: a job that restarts from a checkpoint at step S replays steps >= S. Call
 * tbevent_session_start(w, S) right after tbevent_open(): it writes a SessionLog START event,
 * which makes TensorBoard drop the earlier file's points at steps >= S, so curves do not zigzag.
 *
 * Not done here: images, histograms, text, hparams; file rotation (one file per process run).
 * Thread notes: a writer belongs to one thread (the training loop); use one writer per process.
 */
#ifndef GANTRY_TBEVENT_H
#define GANTRY_TBEVENT_H

#include <stddef.h>
#include <stdint.h>

/* Longest tag accepted (bytes); TensorBoard tags are short paths such as "train/loss". */
#define TBEVENT_MAX_TAG 256
/* Largest encoded Event we produce: a scalar with a TBEVENT_MAX_TAG tag fits with room to spare. */
#define TBEVENT_MAX_EVENT 512

struct tbevent_writer;

/*
 * Creates DIR (and missing parents, mode 0755) and a new event file in it, named
 * events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n> (n makes the name unique and
 * keeps files created in the same second in creation order), and writes the file_version event.
 * Returns a new writer (free with tbevent_close()), or NULL after printing why to stderr.
 */
struct tbevent_writer *tbevent_open(const char *dir);

/* The file's path; borrowed, valid until tbevent_close(). */
const char *tbevent_path(const struct tbevent_writer *w);

/*
 * Appends one scalar event {wall_time = now, step, tag, value}. Buffered: call tbevent_flush()
 * at log intervals so `tensorboard` sees fresh points. Returns 0, or -1 (errno set, message
 * printed) on an I/O error or a tag longer than TBEVENT_MAX_TAG.
 */
int tbevent_scalar(struct tbevent_writer *w, const char *tag, int64_t step, float value)
    __attribute__((warn_unused_result));

/* Appends a SessionLog START event at `step` (see "Resuming" above). Returns 0 or -1. */
int tbevent_session_start(struct tbevent_writer *w, int64_t step)
    __attribute__((warn_unused_result));

/* Writes buffered events to the file (fflush; no fsync). Returns 0 or -1. */
int tbevent_flush(struct tbevent_writer *w) __attribute__((warn_unused_result));

/* Flushes, closes and frees; returns 0, or -1 if the final write failed. NULL is a no-op. */
int tbevent_close(struct tbevent_writer *w);

/* ---- the encoding, exposed for tests ---- */

/* CRC32C (Castagnoli, as in iSCSI): tbevent_crc32c("123456789", 9) == 0xe3069283. */
uint32_t tbevent_crc32c(const void *data, size_t n);
/* The TFRecord mask applied to every CRC stored in the file. */
uint32_t tbevent_mask_crc(uint32_t crc);

/*
 * Serializes Event{wall_time, step, summary{value{tag, simple_value}}} into out[cap].
 * Returns the number of bytes, or 0 if the tag is too long or cap is too small.
 */
size_t tbevent_encode_scalar(uint8_t *out, size_t cap, double wall_time, int64_t step,
                             const char *tag, float value);
/* Serializes Event{wall_time, file_version}. Returns the size, or 0 if cap is too small. */
size_t tbevent_encode_version(uint8_t *out, size_t cap, double wall_time, const char *version);
/* Serializes Event{wall_time, step, session_log{status: START}}. Returns the size or 0. */
size_t tbevent_encode_session_start(uint8_t *out, size_t cap, double wall_time, int64_t step);

/*
 * Frames data[n] as one TFRecord into out[cap] (cap >= n + 16). Returns n + 16, or 0 if it
 * does not fit.
 */
size_t tbevent_frame(uint8_t *out, size_t cap, const uint8_t *data, size_t n);

#endif /* GANTRY_TBEVENT_H */
