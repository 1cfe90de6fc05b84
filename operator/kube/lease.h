/*
 * lease.h - leader election on a coordination.k8s.io/v1 Lease, after client-go's leaderelection.
 *
 * One elector per process identity. lease_start() runs a thread that tries to acquire the Lease
 * every retry_period; a leader renews it every retry_period and gives up when it could not renew
 * for renew_deadline (then on_stopped runs and the caller must stop acting: leadership lost).
 * Another holder's Lease counts as expired when lease_duration has passed on OUR clock since we
 * last saw its record change (so clock skew between nodes does not matter). Every write is a PUT
 * carrying the resourceVersion we read, so two candidates can never both win. lease_stop()
 * releases a held Lease (holderIdentity cleared, leaseDurationSeconds 1) so a successor takes
 * over at once instead of after lease_duration.
 * Defaults: 15 s / 10 s / 2 s. Thread-safe.
 */
#ifndef GANTRY_LEASE_H
#define GANTRY_LEASE_H

#include <stdbool.h>

#include "operator/kube/kube.h"

struct lease_opts {
    const char *namespace;        /* where the Lease lives */
    const char *name;             /* e.g. "gantry-operator" */
    const char *identity;         /* unique per process, e.g. the pod name + a random suffix */
    long lease_duration_ms;       /* 0: 15000 */
    long renew_deadline_ms;       /* 0: 10000 */
    long retry_period_ms;         /* 0: 2000 */
    void (*on_started)(void *ud); /* became leader; runs on the elector thread */
    void (*on_stopped)(void *ud); /* lost or released leadership */
    void *ud;
};

struct lease_elector;
struct lease_elector *lease_new(const struct kube_config *cfg, const struct kube_client_opts *copts,
                                const struct lease_opts *opts);
int lease_start(struct lease_elector *e) __attribute__((warn_unused_result));
bool lease_is_leader(struct lease_elector *e);
/* One acquire-or-renew attempt (what the thread does each period): 0 leader, OP_ENOTLEADER
 * someone else holds it, another OP_E* on API errors. For tests and single-threaded callers. */
int lease_try(struct lease_elector *e) __attribute__((warn_unused_result));
/* Stops the thread; releases the Lease if held (release=true) and calls on_stopped. */
void lease_stop(struct lease_elector *e, bool release);
void lease_free(struct lease_elector *e);

/* Now as a metav1.MicroTime string ("2026-11-30T07:12:00.123456Z"). */
void kube_micro_time(char *out, size_t outlen);

#endif /* GANTRY_LEASE_H */
