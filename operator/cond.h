/*
 * cond.h - TrainingJob status conditions in the metav1.Condition shape, and RFC 3339 times.
 *
 * A condition list is a small fixed array (COND_MAX) owned by the caller; no allocation. The rule
 * that makes conditions useful to humans and to `kubectl wait`: lastTransitionTime changes only
 * when status flips (True <-> False), never when only the reason or message changes. The list
 * keeps the order in which types were first added, so the status JSON is stable and a status
 * that did not change compares equal and is not written again.
 * Not thread-safe; pure functions of their arguments (time comes in as `now`).
 */
#ifndef GANTRY_COND_H
#define GANTRY_COND_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

#define COND_MAX 10
#define COND_TYPE_MAX 32
#define COND_REASON_MAX 64
#define COND_MESSAGE_MAX 512

/* The types a TrainingJob uses (DESIGN.md §2). */
#define COND_CREATED "Created"
#define COND_RUNNING "Running"
#define COND_RESTARTING "Restarting"
#define COND_SUCCEEDED "Succeeded"
#define COND_FAILED "Failed"
#define COND_SUSPENDED "Suspended"
#define COND_STALLED "Stalled" /* hang detection: no training progress (rec.h) */
#define COND_QUEUED "Queued"   /* Kueue: waiting for admission (rec.h) */

struct cond {
    char type[COND_TYPE_MAX];
    bool status; /* "True" / "False"; "Unknown" is read as false */
    char reason[COND_REASON_MAX];
    char message[COND_MESSAGE_MAX];
    time_t last_transition; /* seconds since the epoch, UTC */
    long long observed_generation;
};

struct cond_list {
    int n;
    struct cond c[COND_MAX];
};

/* Reads status.conditions (an array; NULL or not an array gives an empty list). Entries that are
 * malformed or over COND_MAX are skipped: status is ours, but it is still input. */
void cond_list_from_json(struct cond_list *l, const json_t *arr);

/* A new array in metav1.Condition shape (new reference). */
json_t *cond_list_to_json(const struct cond_list *l);

/* Borrowed pointer to the condition of that type, or NULL. */
const struct cond *cond_find(const struct cond_list *l, const char *type);
bool cond_is_true(const struct cond_list *l, const char *type);

/* Sets a condition, adding it when absent. lastTransitionTime becomes `now` only when the
 * condition is new or its status flips. Returns true when the status flipped or it was added. */
bool cond_set(struct cond_list *l, const char *type, bool status, const char *reason,
              const char *message, time_t now, long long generation);

/* Sets an existing True condition to False (reason, message); absent or already False: nothing.
 * Returns true when it flipped. Used so that e.g. Restarting=False appears only after a restart. */
bool cond_clear(struct cond_list *l, const char *type, const char *reason, const char *message,
                time_t now, long long generation);

/* RFC 3339 in UTC with second precision ("2026-11-30T07:03:47Z"); out needs >= 21 bytes. */
void cond_fmt_time(time_t t, char *out, size_t n);
/* Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)"; 0, or -1 when s is not such a time. */
int cond_parse_time(const char *s, time_t *out);

#endif /* GANTRY_COND_H */
