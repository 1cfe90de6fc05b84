/*
 * informer.h - a watch-fed cache of one collection, keyed "namespace/name".
 *
 * informer_start() runs a struct watch (list+watch, relist on 410) on its own thread and keeps
 * the objects in a map. Scope it with the collection path (one namespace or all), a label and a
 * field selector, and keep only the fields the caller reads (opts.fields, dotted paths such as
 * "status.phase" or "metadata.labels"): metadata.name/namespace/uid/resourceVersion are always
 * kept. The list is read page by page (watch_opts.page_limit), so a (re)list never holds more
 * than one page of whole objects.
 *
 * Memory per cached object, smallest last:
 *   - JSON (default): a jansson tree of the projected object;
 *   - compact (opts.compact): the projected object as compact JSON text, deflated (zlib) with
 *     the first cached object's text as preset dictionary: objects of one kind share most of
 *     their text, so a 1.2 KB TrainingJob takes ~100 bytes (against ~6 KB as a tree);
 *     informer_get()/informer_list()/informer_each() and the handlers get freshly parsed copies;
 *   - typed (opts.transform, like client-go's SetTransform): the caller's own record, made from
 *     the whole object; read it with informer_peek()/informer_each(); the handlers are
 *     opts.rec_handlers and receive records.
 *
 * Handlers run on the informer thread, without the cache lock held (they may call
 * informer_get()), and receive borrowed objects: on_update gets the cached old object; on_delete
 * gets the last cached object (also for deletes synthesised after a relist; for an object never
 * cached, the delete event's own object, transformed).
 * Cached objects are shared and must be treated as read-only; informer_get() returns a new
 * reference. Thread-safe.
 */
#ifndef GANTRY_INFORMER_H
#define GANTRY_INFORMER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "operator/kube/watch.h"

struct informer_handlers {
    void (*on_add)(void *ud, json_t *obj);
    void (*on_update)(void *ud, json_t *old_obj, json_t *new_obj);
    void (*on_delete)(void *ud, json_t *obj);
    void *ud;
};

/* Typed records: make() turns a whole object (borrowed) into a new record, or returns NULL to
 * leave the object out of the cache; free() releases one (records are immutable once made).
 * rv() (optional) gives a record's metadata.resourceVersion: with it the watch's relist diff
 * reads the cache instead of keeping its own copy of every key. */
struct informer_transform {
    void *(*make)(void *ud, const json_t *obj);
    void (*free)(void *rec);
    void *ud;
    const char *(*rv)(const void *rec);
};

/* Handlers of a typed informer: the object's key ("ns/name": a record need not repeat it) and
 * records, borrowed, valid only during the call. */
struct informer_rec_handlers {
    void (*on_add)(void *ud, const char *key, const void *rec);
    void (*on_update)(void *ud, const char *key, const void *old_rec, const void *new_rec);
    void (*on_delete)(void *ud, const char *key, const void *rec);
    void *ud;
};

struct informer_opts {
    struct watch_opts watch;   /* path, selectors, timeouts, page size */
    const char *const *fields; /* NULL-terminated dotted paths to keep; NULL: whole objects */
    bool compact;              /* keep the projected objects as compressed compact JSON text */
    /* Typed records instead of JSON (fields and compact are then ignored, informer_get() and
     * informer_list() return NULL and []). Both copied. */
    const struct informer_transform *transform;
    const struct informer_rec_handlers *rec_handlers;
};

struct informer;
/* Copies cfg, copts (may be NULL), opts and the field list. */
struct informer *informer_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                              const struct informer_opts *opts, const struct informer_handlers *h);
int informer_start(struct informer *inf) __attribute__((warn_unused_result));
/* True once the first list has been delivered into the cache. */
bool informer_synced(struct informer *inf);
/* Waits for informer_synced(); 0 or OP_ETIMEDOUT. */
int informer_wait_synced(struct informer *inf, long timeout_ms) __attribute__((warn_unused_result));
/* New reference to the cached object for "ns/name", or NULL. */
json_t *informer_get(struct informer *inf, const char *key);
/* New array (new references) of every cached object. */
json_t *informer_list(struct informer *inf);
size_t informer_len(struct informer *inf);
/* True when "ns/name" is cached (no copy is made). */
bool informer_has(struct informer *inf, const char *key);
/*
 * Calls fn with the cached object of key (typed: the record; JSON: the json_t; compact: a parsed
 * copy), the cache locked: fn must not call this informer. false (fn not called) when absent.
 */
typedef void (*informer_obj_fn)(void *ud, const char *key, const void *obj);
bool informer_peek(struct informer *inf, const char *key, informer_obj_fn fn, void *ud);
/* Calls fn for every cached object as informer_peek() does, the cache locked throughout. */
void informer_each(struct informer *inf, informer_obj_fn fn, void *ud);
void informer_get_stats(struct informer *inf, struct watch_stats *out);
/* Stops the watch and joins the thread; the cache stays readable until informer_free(). */
void informer_stop(struct informer *inf);
void informer_free(struct informer *inf);

/* A new object with only the given dotted paths of obj (plus the identity metadata). */
json_t *kube_project(const json_t *obj, const char *const *fields);

#endif /* GANTRY_INFORMER_H */
