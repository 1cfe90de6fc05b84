/*
 * watch.h - list+watch of one collection, kept consistent across reconnects and 410 Gone.
 *
 * watch_run() lists the collection (paginated), delivers ADDED for what it finds, then watches
 * from the list's resourceVersion with allowWatchBookmarks. The last resourceVersion is taken
 * from every event, bookmarks included, so a reconnect (normal close at timeoutSeconds, network
 * error, dead connection) resumes exactly there and misses nothing. On 410 Gone (HTTP status or
 * an ERROR event) it relists and diffs against the set of objects it has delivered: new objects
 * come as ADDED, changed ones (other resourceVersion) as MODIFIED, and vanished ones as
 * synthesised DELETED events carrying only metadata.name/namespace/resourceVersion plus the
 * annotation "gantry.dev/synthesized-delete": "true" (the informer supplies its cached object).
 * A connection that delivers less than 1 byte/s for dead_after_s is dropped and restarted
 * (silent half-open TCP); errors back off exponentially with jitter up to backoff_max_ms.
 *
 * The framing layer (watch_framer) is separate so it can be unit-tested and fuzzed: it splits a
 * chunked byte stream into newline-delimited JSON lines in a buffer bounded by WATCH_MAX_LINE.
 * Threads: watch_run() blocks its caller; watch_stop() may be called from any thread.
 */
#ifndef GANTRY_WATCH_H
#define GANTRY_WATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "operator/kube/kube.h"

#define WATCH_MAX_LINE (16u << 20) /* one event: a large object plus its JSON overhead */

enum kube_event {
    KUBE_EVENT_ADDED,
    KUBE_EVENT_MODIFIED,
    KUBE_EVENT_DELETED,
    KUBE_EVENT_BOOKMARK,
    KUBE_EVENT_ERROR,
};
const char *kube_event_name(enum kube_event t);

/* ---- framing */
struct watch_framer {
    struct buf line;
};
typedef int (*watch_line_fn)(void *ud, const char *line, size_t len);
void watch_framer_init(struct watch_framer *f, size_t max_line);
void watch_framer_cleanup(struct watch_framer *f);
void watch_framer_reset(struct watch_framer *f);
/*
 * Feeds bytes; calls fn for each complete non-empty line (without the '\n', NUL-terminated).
 * Returns 0, OP_ETOOBIG when a line exceeds the limit, or fn's nonzero return.
 */
int watch_framer_feed(struct watch_framer *f, const char *data, size_t len, watch_line_fn fn,
                      void *ud) __attribute__((warn_unused_result));

/* Parses {"type":..., "object":{...}}; *obj is a new reference. OP_EPARSE on anything else. */
int watch_parse_event(const char *line, size_t len, enum kube_event *type, json_t **obj)
    __attribute__((warn_unused_result));

/* ---- list + watch */

/*
 * Optional: the caller's own record of what it was delivered (an informer's cache), used for the
 * relist diff instead of the watch's set, so every key is not kept twice. rv copies the
 * resourceVersion last delivered for key into out (false: unknown); each calls fn for every key
 * known (fn must not call back into the caller). Called on the watch thread. An object the
 * caller does not keep comes again as ADDED on a relist.
 */
struct watch_known {
    bool (*rv)(void *ud, const char *key, char *out, size_t n);
    void (*each)(void *ud, void (*fn)(void *fud, const char *key), void *fud);
    void *ud;
};

struct watch_opts {
    const char *path;           /* collection path, e.g. /api/v1/namespaces/ml/pods */
    const char *label_selector; /* NULL: all */
    const char *field_selector;
    long timeout_s;              /* server timeoutSeconds per watch; 0: 300..600 s, jittered */
    long dead_after_s;           /* 0: 120 (kube-apiserver bookmarks at least every minute) */
    long page_limit;             /* list page size; 0: 500 */
    long backoff_max_ms;         /* 0: 30000 */
    void (*on_listed)(void *ud); /* optional: after each complete (re)list has been delivered */
    const struct watch_known *known; /* optional (copied): see struct watch_known */
};

/* obj is borrowed. Return nonzero to end watch_run() with that value. Called on the watch thread.
 */
typedef int (*watch_event_fn)(void *ud, enum kube_event type, json_t *obj);

struct watch_stats {
    long lists, relists, reconnects, events, bookmarks, synthesized_deletes, errors;
    char rv[64]; /* last resourceVersion seen */
};

struct watch;
/* cfg and opts are copied. */
struct watch *watch_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                        const struct watch_opts *opts, watch_event_fn fn, void *ud);
/* Runs until watch_stop() (returns OP_ECANCELED) or fn returns nonzero (returns that). */
int watch_run(struct watch *w);
void watch_stop(struct watch *w);
/*
 * Makes a stopped watch runnable again (keeping what it has delivered), resuming from rv when
 * not NULL (e.g. a saved resourceVersion) instead of its last one. A watch with a
 * resourceVersion starts watching without a list; if that version is too old the server answers
 * 410 and the watch relists, synthesising DELETED for what vanished meanwhile.
 */
void watch_resume(struct watch *w, const char *rv);
void watch_get_stats(struct watch *w, struct watch_stats *out);
void watch_free(struct watch *w);

#endif /* GANTRY_WATCH_H */
