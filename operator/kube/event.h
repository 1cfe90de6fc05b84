/*
 * event.h - an events.k8s.io/v1 Event recorder with de-duplication.
 *
 * event_record() posts an Event about an object ("regarding"). The same (object, type, reason,
 * action, note) seen again within EVENT_DEDUP_WINDOW_S does not create a new Event: the first
 * one gets a merge patch of series.count and series.lastObservedTime, as the kubelet and
 * client-go's new recorder do, so a hot loop cannot flood etcd. Notes are cut to the API's
 * 1 KiB. Synchronous, on the caller's thread, over the recorder's own client; thread-safe.
 * Recording is best-effort: callers log a failure and carry on.
 */
#ifndef GANTRY_EVENT_H
#define GANTRY_EVENT_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "operator/kube/kube.h"

#define EVENT_DEDUP_WINDOW_S 600
#define EVENT_CACHE_MAX      4096
#define EVENT_PRUNE_INTERVAL_S 60 /* expired records are dropped at most this often */
#define EVENT_NOTE_MAX       1024

struct event_recorder;
/* controller: reportingController ("gantry.dev/operator"); instance: reportingInstance (pod). */
struct event_recorder *event_recorder_new(const struct kube_config *cfg,
                                          const struct kube_client_opts *copts,
                                          const char *controller, const char *instance);
/* Tests: the recorder's clock (NULL = time()). */
void event_recorder_set_clock(struct event_recorder *r, time_t (*clock)(void));
/* De-duplication records held (records older than the window are dropped within
 * EVENT_PRUNE_INTERVAL_S, so about one window's distinct events). */
size_t event_recorder_cached(struct event_recorder *r);
/*
 * regarding: the object (borrowed; apiVersion, kind, metadata.name/namespace/uid are used).
 * type: "Normal" or "Warning"; reason: CamelCase ("Created"); action: what was done ("Create").
 * 0 or an OP_E*. *count_out (may be NULL) gets the occurrence count now recorded.
 */
int event_record(struct event_recorder *r, const json_t *regarding, const char *type,
                 const char *reason, const char *action, const char *note, int *count_out)
    __attribute__((warn_unused_result));
void event_recorder_free(struct event_recorder *r);

#endif /* GANTRY_EVENT_H */
