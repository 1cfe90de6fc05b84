/*
 * queue.h - the controller's work queue of object keys ("ns/name"), after client-go's.
 *
 * - De-duplicated: a key queued twice is processed once.
 * - One worker per key: a key being processed (between queue_get() and queue_done()) is not
 *   handed to another worker; if it is added meanwhile it is queued again at queue_done().
 * - Per-key exponential backoff: queue_add_rate_limited() waits base_ms * 2^failures (capped at
 *   max_ms); queue_forget() resets the count after a success.
 * - queue_add_after() for timers (activeDeadlineSeconds, TTL after finished): the earliest of
 *   several pending delays wins.
 * Thread-safe; any number of workers may block in queue_get().
 */
#ifndef GANTRY_QUEUE_H
#define GANTRY_QUEUE_H

#include <stddef.h>

#define QUEUE_BASE_MS 5
#define QUEUE_MAX_MS  (1000L * 1000)

struct queue;

/* base_ms/max_ms 0: QUEUE_BASE_MS / QUEUE_MAX_MS. */
struct queue *queue_new(long base_ms, long max_ms);
void queue_free(struct queue *q);

void queue_add(struct queue *q, const char *key);
void queue_add_after(struct queue *q, const char *key, long delay_ms);
/* Adds after the key's backoff and counts a failure; returns the delay used (ms). */
long queue_add_rate_limited(struct queue *q, const char *key);
void queue_forget(struct queue *q, const char *key);
int queue_failures(struct queue *q, const char *key);

/*
 * Blocks until a key is ready (0, *key a new string the caller frees after queue_done()),
 * timeout_ms passes (OP_ETIMEDOUT; -1 waits forever) or the queue shuts down (OP_ECANCELED).
 */
int queue_get(struct queue *q, char **key, long timeout_ms) __attribute__((warn_unused_result));
void queue_done(struct queue *q, const char *key);
/* Keys ready now (not counting delayed or in-flight ones). */
size_t queue_len(struct queue *q);
/* Wakes every queue_get() with OP_ECANCELED; later adds are ignored. */
void queue_shutdown(struct queue *q);

#endif /* GANTRY_QUEUE_H */
