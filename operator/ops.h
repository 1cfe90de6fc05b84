/*
 * ops.h - gantry-operator's own HTTP endpoints: /healthz, /readyz and /metrics (Prometheus text).
 *
 *   /healthz  200 "ok" while the process serves (the server thread answers).
 *   /readyz   200 when the informers have synced (the leader), or when the process is a
 *             healthy standby waiting for the Lease (leader election on: it is ready to take
 *             over; the Deployment's Service carries no traffic, so readiness only gates
 *             rollouts); 503 with the reason otherwise (starting, caches not synced, shutting
 *             down).
 *   /metrics  Prometheus text 0.0.4; counters count since the process (or, for the controller's,
 *             since it started leading) began:
 *     gantry_operator_reconcile_duration_seconds  histogram  one exec_sync() (read, decide,
 *                                                             write)
 *     gantry_operator_reconciles_total, gantry_operator_reconcile_errors_total  counters
 *     gantry_operator_workqueue_depth             gauge      keys waiting in the work queue
 *     gantry_operator_watch_restarts_total{resource}  counter  watch reconnects (timeouts,
 *                                                             dropped connections, 410s)
 *     gantry_operator_watch_relists_total{resource}   counter  full relists after a 410 Gone
 *     gantry_operator_watch_events_total{resource}    counter
 *     gantry_operator_cache_objects{resource}     gauge      objects in each informer cache
 *     gantry_operator_trainingjobs{phase}         gauge      cached TrainingJobs by status.phase
 *                                                             ("None" before the first status)
 *     gantry_operator_gang_restarts_total, gantry_operator_gang_disruptions_total,
 *     gantry_operator_gang_resizes_total, gantry_operator_pods_created_total,
 *     gantry_operator_pods_deleted_total, gantry_operator_status_writes_total,
 *     gantry_operator_status_conflicts_total, gantry_operator_events_total  counters
 *     gantry_operator_progress_reads_total, gantry_operator_progress_read_errors_total  counters
 *     gantry_operator_leader                      gauge      1 while this process leads
 *     gantry_operator_ready                       gauge      what /readyz answers (1 = 200)
 *     gantry_operator_heap_bytes                  gauge      malloc heap in use (mallinfo2)
 *     process_resident_memory_bytes               gauge      RSS (from /proc/self/statm)
 * Each address is "[HOST]:PORT" (HOST empty or 0.0.0.0: all IPv4 addresses; PORT 0: ephemeral,
 * see ops_port()). Health and metrics may share one fixed address (one server then answers all
 * paths; two "...:0" addresses get two ephemeral ports).
 *
 * Threads: libmicrohttpd's own thread answers; ops_set_*() may be called from any thread. The
 * controller given to ops_set_controller() must stay valid until ops_set_controller(NULL)
 * returns (which waits for a scrape in flight).
 */
#ifndef GANTRY_OPS_H
#define GANTRY_OPS_H

#include <stdbool.h>

#include "operator/exec.h"

struct ops;

struct ops *ops_new(bool leader_elect);
/* Serves health (if health_addr) and metrics (if metrics_addr) endpoints; "" or NULL: off.
 * 0, or OP_ECONFIG with a message logged (bad address, port in use). */
int ops_serve(struct ops *o, const char *health_addr, const char *metrics_addr)
    __attribute__((warn_unused_result));
/* Bound port of the health (which=0) or metrics (which=1) server; 0 when off. */
int ops_port(const struct ops *o, int which);
void ops_set_leading(struct ops *o, bool leading);
void ops_set_standby(struct ops *o, bool standby); /* elector running, waiting for the Lease */
void ops_set_stopping(struct ops *o);
/* The running controller (informers synced), or NULL before start / before it is freed. */
void ops_set_controller(struct ops *o, struct exec_shared *sh);
void ops_free(struct ops *o);

/* Parses "[HOST]:PORT" or "PORT"; 0, or -1. host gets "0.0.0.0" when empty. */
int ops_parse_addr(const char *s, char *host, size_t hostlen, int *port);

#endif /* GANTRY_OPS_H */
