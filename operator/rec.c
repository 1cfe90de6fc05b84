#include "operator/rec.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/xalloc.h"
#include "operator/kube/kube_err.h"

/* ---------------------------------------------------------------------------------------------
 * Observed pods
 * ------------------------------------------------------------------------------------------- */

/* The string value of v, or "" (not NULL) when v is not a string. */
static const char *str_or(const json_t *v)
{
    const char *s = json_string_value(v);
    return s ? s : "";
}

static int label_int(const json_t *labels, const char *key)
{
    const char *s = json_string_value(json_object_get(labels, key));
    char *end;
    long v;

    if (!s || !*s)
        return -1;
    v = strtol(s, &end, 10);
    return (*end || v < 0 || v > 1000000) ? -1 : (int)v;
}

static enum rec_pod_phase pod_phase(const char *s)
{
    if (!s)
        return REC_POD_PENDING;
    if (strcmp(s, "Running") == 0)
        return REC_POD_RUNNING;
    if (strcmp(s, "Succeeded") == 0)
        return REC_POD_SUCCEEDED;
    if (strcmp(s, "Failed") == 0)
        return REC_POD_FAILED;
    if (strcmp(s, "Pending") == 0)
        return REC_POD_PENDING;
    return REC_POD_UNKNOWN;
}

/* The worker container's status: the one named "worker", else the first. Borrowed. */
static const json_t *worker_status(const json_t *st)
{
    const json_t *cs = json_object_get(st, "containerStatuses"), *c;
    size_t i;

    json_array_foreach(cs, i, c) {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && strcmp(n, RENDER_CONTAINER) == 0)
            return c;
    }
    return json_array_get(cs, 0);
}

/* A condition reason may hold only [A-Za-z0-9_,:] and starts with a letter. */
static void copy_reason(char *dst, size_t n, const char *src)
{
    size_t j = 0;

    for (; src && *src && j + 1 < n; src++) {
        char c = *src;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                  (j > 0 && ((c >= '0' && c <= '9') || c == '_' || c == ',' || c == ':'));
        if (ok)
            dst[j++] = c;
    }
    dst[j] = '\0';
}

/* The longest suffix of s of at most max bytes that starts on a UTF-8 character boundary. */
static const char *utf8_tail(const char *s, size_t max)
{
    size_t len = strlen(s);

    if (len <= max)
        return s;
    s += len - max;
    while (((unsigned char)*s & 0xC0) == 0x80)
        s++;
    return s;
}

static void find_problem(const json_t *st, struct rec_pod *out)
{
    static const char *const waiting_bad[] = {"ErrImagePull", "ImagePullBackOff",
                                              "InvalidImageName", "CreateContainerConfigError",
                                              "CreateContainerError", NULL};
    const json_t *cond, *waiting;
    size_t i;

    json_array_foreach(json_object_get(st, "conditions"), i, cond) {
        const char *t = json_string_value(json_object_get(cond, "type"));
        const char *s = json_string_value(json_object_get(cond, "status"));
        if (t && s && strcmp(t, "PodScheduled") == 0 && strcmp(s, "False") == 0) {
            copy_reason(out->problem, sizeof(out->problem),
                        json_string_value(json_object_get(cond, "reason")));
            if (!out->problem[0])
                snprintf(out->problem, sizeof(out->problem), "Unschedulable");
            snprintf(out->problem_msg, sizeof(out->problem_msg), "%s",
                     str_or(json_object_get(cond, "message")));
            return;
        }
    }
    waiting = json_object_get(json_object_get(worker_status(st), "state"), "waiting");
    for (int k = 0; waiting_bad[k]; k++) {
        if (strcmp(str_or(json_object_get(waiting, "reason")), waiting_bad[k]) == 0) {
            snprintf(out->problem, sizeof(out->problem), "%s", waiting_bad[k]);
            snprintf(out->problem_msg, sizeof(out->problem_msg), "%s",
                     str_or(json_object_get(waiting, "message")));
            return;
        }
    }
}

void rec_digest(const char *s, char out[REC_DIGEST_LEN])
{
    hash_text_digest(s, out);
}

int rec_pod_from_json(const json_t *pod, struct rec_pod *out)
{
    const json_t *meta = json_object_get(pod, "metadata"), *st = json_object_get(pod, "status");
    const json_t *labels = json_object_get(meta, "labels"), *cond, *term;
    const char *name = json_string_value(json_object_get(meta, "name"));
    size_t i;

    memset(out, 0, sizeof(*out));
    out->exit_code = -1;
    if (!name || !*name || strlen(name) >= sizeof(out->name))
        return OP_EPARSE;
    snprintf(out->name, sizeof(out->name), "%s", name);
    snprintf(out->uid, sizeof(out->uid), "%s",
             str_or(json_object_get(meta, "uid")));
    out->index = label_int(labels, RENDER_LABEL_INDEX);
    out->restart = label_int(labels, RENDER_LABEL_RESTART);
    out->replicas = label_int(labels, RENDER_LABEL_REPLICAS);
    out->standby = strcmp(str_or(json_object_get(labels, RENDER_LABEL_STANDBY)), "true") == 0;
    out->terminating = json_is_string(json_object_get(meta, "deletionTimestamp"));
    json_array_foreach(json_object_get(meta, "ownerReferences"), i, cond) {
        const char *u = str_or(json_object_get(cond, "uid"));
        if (json_is_true(json_object_get(cond, "controller")) && strlen(u) < sizeof(out->owner))
            snprintf(out->owner, sizeof(out->owner), "%s", u);
    }
    out->phase = pod_phase(json_string_value(json_object_get(st, "phase")));
    if (strlen(str_or(json_object_get(st, "podIP"))) < sizeof(out->ip))
        snprintf(out->ip, sizeof(out->ip), "%s", str_or(json_object_get(st, "podIP")));
    json_array_foreach(json_object_get(st, "conditions"), i, cond) {
        const char *t = json_string_value(json_object_get(cond, "type"));
        const char *s = json_string_value(json_object_get(cond, "status"));
        if (t && s && strcmp(t, "Ready") == 0)
            out->ready = strcmp(s, "True") == 0;
        if (t && s && strcmp(t, "DisruptionTarget") == 0 && strcmp(s, "True") == 0) {
            out->disrupted = true;
            copy_reason(out->disruption, sizeof(out->disruption),
                        json_string_value(json_object_get(cond, "reason")));
        }
    }
    snprintf(out->reason, sizeof(out->reason), "%s",
             str_or(json_object_get(st, "reason")));
    term = json_object_get(json_object_get(worker_status(st), "state"), "terminated");
    if (json_is_object(term)) {
        const char *m = str_or(json_object_get(term, "message"));
        size_t len = strlen(m);

        /* the end of a log says most about why it ended */
        snprintf(out->message, sizeof(out->message), "%s", utf8_tail(m, sizeof(out->message) - 1));
        out->message_truncated = len > sizeof(out->message) - 1;
        len = strlen(out->message);
        while (len > 0 && (out->message[len - 1] == '\n' || out->message[len - 1] == ' ' ||
                           out->message[len - 1] == '\r' || out->message[len - 1] == '\t'))
            out->message[--len] = '\0';
        out->exit_code = (int)json_integer_value(json_object_get(term, "exitCode"));
        if (!out->reason[0])
            snprintf(out->reason, sizeof(out->reason), "%s",
                     str_or(json_object_get(term, "reason")));
    }
    if (out->phase == REC_POD_PENDING)
        find_problem(st, out);
    return 0;
}

/* Failed, or about to be: with restartPolicy Never a non-zero exit ends the pod. */
static bool pod_failed(const struct rec_pod *p)
{
    return p->phase == REC_POD_FAILED || (p->phase != REC_POD_SUCCEEDED && p->exit_code > 0);
}

static bool exit_permanent(int code)
{
    return code >= REC_EXIT_PERMANENT_MIN && code <= REC_EXIT_PERMANENT_MAX;
}

/* ---------------------------------------------------------------------------------------------
 * The pass: working state and small helpers
 * ------------------------------------------------------------------------------------------- */

struct pass {
    const struct rec_input *in;
    const struct tj *tj; /* &eff */
    struct tj eff; /* the job, its replicas the size it runs at (elasticPolicy: maybe fewer) */
    struct rec_result *out;
    size_t cap;
    struct tj_status st; /* the new status, edited in place */
    int active, ready, succeeded, failed; /* pods of the current gang */
    size_t foreign; /* pods with the job's labels that another object controls (not in in) */
    const json_t *admitted; /* Kueue: the job's admitted Workload, or NULL */
};

static struct rec_action *add_action(struct pass *p, enum rec_verb verb, enum rec_kind kind,
                                     const char *name, json_t *obj)
{
    struct rec_action *a;

    if (p->out->nactions >= p->cap) { /* cannot happen: cap covers every pod and child */
        json_decref(obj);
        return NULL;
    }
    a = &p->out->actions[p->out->nactions++];
    memset(a, 0, sizeof(*a));
    a->verb = verb;
    a->kind = kind;
    snprintf(a->name, sizeof(a->name), "%s", name);
    a->obj = obj;
    return a;
}

__attribute__((format(printf, 4, 5))) static void event(struct pass *p, bool warning,
                                                        const char *reason, const char *fmt, ...)
{
    struct rec_event *e;
    va_list ap;

    if (p->out->nevents >= REC_EVENTS_MAX)
        return;
    e = &p->out->events[p->out->nevents++];
    e->warning = warning;
    snprintf(e->reason, sizeof(e->reason), "%s", reason);
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

static void set_cond(struct pass *p, const char *type, bool status, const char *reason,
                     const char *msg)
{
    cond_set(&p->st.conds, type, status, reason, msg, p->in->now, p->tj->generation);
}

static void clear_cond(struct pass *p, const char *type, const char *reason, const char *msg)
{
    cond_clear(&p->st.conds, type, reason, msg, p->in->now, p->tj->generation);
}

static void delete_pod(struct pass *p, const struct rec_pod *pod)
{
    struct rec_action *a;

    if (pod->terminating)
        return;
    a = add_action(p, REC_DELETE, REC_POD, pod->name, NULL);
    if (a)
        snprintf(a->uid, sizeof(a->uid), "%s", pod->uid);
}

int rec_restarts(const struct rec_input *in)
{
    int r = in->job->status.restarts;

    for (size_t i = 0; i < in->npods; i++)
        if (in->pods[i].restart > r)
            r = in->pods[i].restart;
    return r;
}

/* A pod of the current gang: restart label R, the gang size label (when there is one) the
 * job's replicas (an elastic job's pods of its old size are not), and an index label naming a
 * replica whose pod name is this pod's own. A pod whose labels were edited, or a copy of one
 * under another name, is not (it is retired like an old gang's pod): pod names are unique, so
 * then no index is counted twice and no missing replica is taken for running (found by
 * operator/fuzz/fuzz_rec). */
static bool current(const struct pass *p, const struct rec_pod *pod)
{
    return pod->restart == p->st.restarts && pod->index >= 0 && pod->index < p->tj->replicas &&
           (pod->replicas <= 0 || pod->replicas == p->tj->replicas) && !pod->standby &&
           render_is_pod_name(p->tj, pod->index, pod->name);
}

static void count_pods(struct pass *p)
{
    p->active = p->ready = p->succeeded = p->failed = 0;
    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];

        if (!current(p, pod))
            continue;
        if (pod->phase == REC_POD_SUCCEEDED)
            p->succeeded++;
        else if (pod_failed(pod))
            p->failed++;
        else if (!pod->terminating)
            p->active++;
        if (pod->phase == REC_POD_RUNNING && pod->ready && !pod->terminating)
            p->ready++;
    }
}

static void requeue(struct pass *p, long long after)
{
    if (after < 1)
        after = 1;
    if (p->out->requeue_after_s < 0 || after < p->out->requeue_after_s)
        p->out->requeue_after_s = after;
}

/* ---------------------------------------------------------------------------------------------
 * Terminal states
 * ------------------------------------------------------------------------------------------- */

/* Enters Failed or Succeeded: conditions, completionTime, one event. */
static void finish(struct pass *p, bool ok, const char *reason, const char *msg)
{
    p->st.phase = ok ? TJ_PHASE_SUCCEEDED : TJ_PHASE_FAILED;
    p->st.completion_time = p->in->now;
    set_cond(p, ok ? COND_SUCCEEDED : COND_FAILED, true, reason, msg);
    clear_cond(p, COND_RUNNING, reason, "The job finished");
    clear_cond(p, COND_RESTARTING, reason, "The job finished");
    event(p, !ok, reason, "%s", msg);
}

/* Sticky terminal phase: clean pods per policy, then TTL. Never creates anything. */
static void terminal(struct pass *p)
{
    const struct tj *tj = p->tj;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        /* its worker container's exit counts: the pod's phase may follow a moment later (or
         * never, with a sidecar), and worker 0 kept for its log must not go in between */
        bool finished = pod->phase == REC_POD_SUCCEEDED || pod_failed(pod) || pod->exit_code == 0;

        if (tj->clean == TJ_CLEAN_ALL || (tj->clean == TJ_CLEAN_RUNNING && !finished))
            delete_pod(p, pod);
    }
    if (!p->st.completion_time)
        p->st.completion_time = p->in->now; /* a terminal status from elsewhere: start now */
    if (tj->ttl_s >= 0) {
        long long due = (long long)p->st.completion_time + tj->ttl_s;
        if ((long long)p->in->now >= due) {
            /* with the job's uid: a job of the same name created since is not this one */
            struct rec_action *a = add_action(p, REC_DELETE, REC_JOB, tj->name, NULL);
            if (a)
                snprintf(a->uid, sizeof(a->uid), "%.63s", tj->uid); /* a UID has 36 */
        } else
            requeue(p, due - (long long)p->in->now);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Running states
 * ------------------------------------------------------------------------------------------- */

static void suspend(struct pass *p)
{
    for (size_t i = 0; i < p->in->npods; i++)
        delete_pod(p, &p->in->pods[i]);
    if (p->st.phase != TJ_PHASE_SUSPENDED)
        event(p, false, "Suspended", "TrainingJob suspended: deleted its pods, kept %d restarts",
              p->st.restarts);
    p->st.phase = TJ_PHASE_SUSPENDED;
    p->st.start_time = 0;
    p->st.elastic_workers = 0; /* resumed, it tries every replica again */
    p->st.unschedulable_since = 0;
    set_cond(p, COND_SUSPENDED, true, "Suspended", "spec.runPolicy.suspend is true");
    clear_cond(p, COND_RUNNING, "Suspended", "The job is suspended");
    clear_cond(p, COND_RESTARTING, "Suspended", "The job is suspended");
}

/* The failed pod of the current gang that explains the failure, or NULL: one that exited with
 * a permanent code (64-78) first, since the others often died of losing it (a rank with bad data
 * exits 65, its peers then fail on the broken all-reduce, sometimes seen in the same pass); among
 * those alike, the lowest index. */
static const struct rec_pod *first_failure(const struct pass *p)
{
    const struct rec_pod *f = NULL;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        /* a pod being deleted fails of the deletion (SIGTERM: 143): the operator deleted it
         * (suspend, then resumed before it was gone), or someone else did, which lost()
         * judges once the job was Running */
        if (!current(p, pod) || !pod_failed(pod) || pod->terminating)
            continue;
        bool perm = exit_permanent(pod->exit_code);
        if (!f || perm > exit_permanent(f->exit_code) ||
            (perm == exit_permanent(f->exit_code) && pod->index < f->index))
            f = pod;
    }
    return f;
}

/* Restarts counted against backoffLimit: those not caused by a disruption, nor excused by a
 * podFailurePolicy Ignore rule. */
static int counted(const struct pass *p)
{
    int c = p->st.restarts - p->st.disruptions - p->st.ignored;

    return c < 0 ? 0 : c;
}

/* Appends ". Its last output: <the tail of the pod's termination message that fits>" to msg. */
static void add_term_message(char *msg, size_t n, const struct rec_pod *f)
{
    static const char sep[] = ". Its last output: ";
    size_t len = strlen(msg);
    const char *tail;

    if (!f->message[0] || len + sizeof(sep) + 16 > n)
        return;
    tail = utf8_tail(f->message, n - len - sizeof(sep)); /* fits, with the NUL */
    memcpy(msg + len, sep, sizeof(sep) - 1);
    memcpy(msg + len + sizeof(sep) - 1, tail, strlen(tail) + 1);
}

/* What spec.runPolicy.podFailurePolicy says of a failed or disrupted pod of the gang (tj.h):
 * the first rule it matches (*rule its index), else the built-in action (*rule -1): FailJob for
 * a permanent exit code (64-78), Ignore for a disruption, else Count. */
static enum tj_fp_action pod_action(const struct tj *tj, const struct rec_pod *pod, int *rule)
{
    for (int i = 0; i < tj->fp_nrules; i++) {
        const struct tj_fp_rule *r = &tj->fp_rules[i];
        bool in = false;
        if (r->on_disruption) {
            if (!pod->disrupted)
                continue;
        } else {
            if (pod->exit_code < 0) /* not terminated: no exit code to match */
                continue;
            for (int k = 0; k < r->ncodes && !in; k++)
                in = r->codes[k] == pod->exit_code;
            if (in == r->not_in)
                continue;
        }
        *rule = i;
        return r->action;
    }
    *rule = -1;
    return pod_failed(pod) && exit_permanent(pod->exit_code) ? TJ_FP_FAIL_JOB
           : pod->disrupted                                 ? TJ_FP_IGNORE
                                                            : TJ_FP_COUNT;
}

/* The gang's failure: the strongest action (FailJob, Ignore, Count) of its failed and disrupted
 * pods, the lowest index among equals; *pod and *rule say whose. Pods that fail of losing a rank
 * (their peers' exit codes) so never outweigh the cause. */
static enum tj_fp_action gang_action(const struct pass *p, const struct rec_pod **pod, int *rule)
{
    enum tj_fp_action best = TJ_FP_COUNT;

    *pod = NULL, *rule = -1;
    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *q = &p->in->pods[i];
        int r;
        if (!current(p, q) || !(q->disrupted || (pod_failed(q) && !q->terminating)))
            continue;
        enum tj_fp_action a = pod_action(p->tj, q, &r);
        if (!*pod || a > best || (a == best && q->index < (*pod)->index))
            *pod = q, *rule = r, best = a;
    }
    return best;
}

/* The text of rule i for messages: "rules[0] (FailJob on exit codes In [42])". */
static void rule_text(const struct tj *tj, int i, char *out, size_t n)
{
    static const char *const names[] = {"Count", "Ignore", "FailJob"};
    const struct tj_fp_rule *r = &tj->fp_rules[i];
    int k = snprintf(out, n, "spec.runPolicy.podFailurePolicy.rules[%d] (%s on ", i,
                     names[r->action]);
    if (r->on_disruption) {
        snprintf(out + k, n - (size_t)k, "DisruptionTarget)");
        return;
    }
    k += snprintf(out + k, n - (size_t)k, "exit codes %s [", r->not_in ? "NotIn" : "In");
    for (int c = 0; c < r->ncodes && k > 0 && (size_t)k + 8 < n; c++)
        k += snprintf(out + k, n - (size_t)k, "%s%d", c ? ", " : "", r->codes[c]);
    if (k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, "%s])", (size_t)k + 8 < n ? "" : "...");
}

/* Whole-gang restart: collectives cannot continue without a rank. */
static void restart_gang(struct pass *p, const char *reason, const char *msg)
{
    p->st.restarts += 1;
    p->st.phase = TJ_PHASE_RESTARTING;
    p->st.unschedulable_since = 0; /* the new gang's pods wait afresh (shrinkAfterSeconds) */
    set_cond(p, COND_RESTARTING, true, reason, msg);
    clear_cond(p, COND_RUNNING, reason, msg);
    event(p, true, "Restarting", "%s", msg);
    for (size_t i = 0; i < p->in->npods; i++)
        delete_pod(p, &p->in->pods[i]);
}

/* The gang lost a worker to a disruption (d: an eviction, a drain, a preemption; like a Job's
 * podFailurePolicy rule that ignores DisruptionTarget): restarted at once, not counted against
 * backoffLimit, however many counted restarts were used. */
static void restart_disrupted(struct pass *p, const struct rec_pod *d)
{
    char msg[COND_MESSAGE_MAX];

    snprintf(msg, sizeof(msg), "Pod %s was disrupted (DisruptionTarget: %s); restarting the whole "
             "gang, not counted against spec.runPolicy.backoffLimit (%d of %d used)", d->name,
             d->disruption[0] ? d->disruption : "no reason given", counted(p),
             p->tj->backoff_limit);
    p->st.disruptions += 1; /* with the restart below: the count of failures stays */
    restart_gang(p, "WorkerDisrupted", msg);
}

/* How pod failed, for messages: "exited with code 42", "was disrupted (DisruptionTarget: ...)". */
static void how_failed(const struct rec_pod *pod, char *out, size_t n)
{
    if (pod->exit_code >= 0)
        snprintf(out, n, "exited with code %d", pod->exit_code);
    else
        snprintf(out, n, "was disrupted (DisruptionTarget: %s)",
                 pod->disruption[0] ? pod->disruption : "no reason given");
}

/* A podFailurePolicy rule (index rule) with action Ignore matched pod: the gang restarts, not
 * counted against backoffLimit (status.ignoredRestarts), as a Job's Ignore leaves its count. */
static void restart_ignored(struct pass *p, const struct rec_pod *pod, int rule)
{
    char msg[COND_MESSAGE_MAX], how[REC_REASON_MAX + 48], rt[160];

    how_failed(pod, how, sizeof(how));
    rule_text(p->tj, rule, rt, sizeof(rt));
    snprintf(msg, sizeof(msg), "Pod %s %s, which %s ignores; restarting the whole gang, not "
             "counted against spec.runPolicy.backoffLimit (%d of %d used)", pod->name, how, rt,
             counted(p), p->tj->backoff_limit);
    p->st.ignored += 1;
    restart_gang(p, "WorkerFailureIgnored", msg);
}

/* A podFailurePolicy rule with action FailJob matched pod: the job fails at once. */
static void fail_by_rule(struct pass *p, const struct rec_pod *pod, int rule)
{
    char msg[COND_MESSAGE_MAX], how[REC_REASON_MAX + 48], rt[160];

    how_failed(pod, how, sizeof(how));
    rule_text(p->tj, rule, rt, sizeof(rt));
    snprintf(msg, sizeof(msg), "Pod %s %s, which %s fails the job", pod->name, how, rt);
    add_term_message(msg, sizeof(msg), pod);
    finish(p, false, "PodFailurePolicy", msg);
}

/* A pod of the current gang that went away, or is going (deletionTimestamp), while the job was
 * Running: deleted by someone else (kubectl delete pod, an eviction, a drain). The gang lost a
 * rank, so this is a gang failure: restart (against backoffLimit), never a lone replacement at
 * the same restart count. Only once the job was Running, i.e. every replica was observed, so pods
 * not yet created or not yet seen (slow start, a lagging cache) never count; and the operator
 * deletes pods of the current gang only when it leaves Running (restart, suspend, terminal) in the
 * same status write, which a stale read cannot repeat (the write needs the job's
 * resourceVersion). true when the job failed or the gang is being restarted. */
static bool lost(struct pass *p)
{
    const struct tj *tj = p->tj;
    const struct rec_pod *pod = NULL, **by_index;
    char name[RENDER_NAME_MAX + 320], msg[COND_MESSAGE_MAX];
    int r = p->st.restarts, i;

    if (tj->status.phase != TJ_PHASE_RUNNING || tj->status.restarts != r)
        return false;
    by_index = xcalloc((size_t)tj->replicas, sizeof(*by_index)); /* current(): one an index */
    for (size_t k = 0; k < p->in->npods; k++)
        if (current(p, &p->in->pods[k]))
            by_index[p->in->pods[k].index] = &p->in->pods[k];
    for (i = 0; i < tj->replicas; i++) {
        pod = by_index[i];
        if (!pod || (pod->terminating && pod->phase != REC_POD_SUCCEEDED))
            break;
    }
    free(by_index);
    if (i == tj->replicas)
        return false;
    if (pod && pod->disrupted) {
        char rt[160];
        int rule;
        switch (pod_action(tj, pod, &rule)) {
        case TJ_FP_FAIL_JOB:
            fail_by_rule(p, pod, rule); /* (built-in FailJob needs an exit code: not here) */
            return true;
        case TJ_FP_IGNORE:
            if (rule < 0)
                restart_disrupted(p, pod);
            else
                restart_ignored(p, pod, rule);
            return true;
        case TJ_FP_COUNT: /* a rule counts disruptions: as any deleted worker, named so */
            rule_text(tj, rule, rt, sizeof(rt));
            snprintf(name, sizeof(name), "%s (disrupted: %s; %s counts it)", pod->name,
                     pod->disruption[0] ? pod->disruption : "no reason given", rt);
            break;
        }
    } else if (pod)
        snprintf(name, sizeof(name), "%s", pod->name);
    else
        render_pod_name(tj, i, name, sizeof(name));
    if (counted(p) >= tj->backoff_limit) {
        snprintf(msg, sizeof(msg), "Pod %s was deleted while the job was running and all %d "
                 "restarts allowed by spec.runPolicy.backoffLimit are used", name,
                 tj->backoff_limit);
        finish(p, false, "BackoffLimitExceeded", msg);
        return true;
    }
    snprintf(msg, sizeof(msg), "Pod %s was deleted while the job was running; restarting the "
             "whole gang (restart %d of %d)", name, counted(p) + 1, tj->backoff_limit);
    restart_gang(p, "WorkerDeleted", msg);
    return true;
}


/* Decides success or failure of the current gang; true when the job became terminal or the gang
 * is being restarted (nothing more to do in this pass). */
static bool judge(struct pass *p)
{
    const struct tj *tj = p->tj;
    const struct rec_pod *f, *v;
    char msg[COND_MESSAGE_MAX];
    int r = p->st.restarts, rule;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        /* its worker container's 0 is enough: a sidecar may keep the pod Running */
        if (current(p, pod) && pod->index == 0 &&
            (pod->phase == REC_POD_SUCCEEDED || pod->exit_code == 0)) {
            const json_t *pr = p->in->progress ? p->in->progress
                                               : json_object_get(p->tj->status_raw, "progress");
            int n = snprintf(msg, sizeof(msg), "Worker 0 (%s) completed successfully after %d "
                                               "restarts", pod->name, r);
            if (json_is_true(json_object_get(pr, "earlyStopped")) && n > 0 &&
                (size_t)n < sizeof(msg))
                snprintf(msg + n, sizeof(msg) - (size_t)n, " (early stopping at step %lld)",
                         (long long)json_integer_value(json_object_get(pr, "step")));
            finish(p, true, "Succeeded", msg);
            return true;
        }
    }
    f = first_failure(p);
    if (!f)
        return lost(p);
    switch (gang_action(p, &v, &rule)) {
    case TJ_FP_FAIL_JOB:
        if (rule >= 0) {
            fail_by_rule(p, v, rule);
            return true;
        }
        snprintf(msg, sizeof(msg), "Pod %s exited with code %d, an error a restart cannot fix "
                 "(64-78: bad usage, data or configuration); fix the spec and recreate the "
                 "job%s", v->name, v->exit_code, v->message[0] ? "" : " (see its log)");
        add_term_message(msg, sizeof(msg), v);
        finish(p, false, "PermanentError", msg);
        return true;
    case TJ_FP_IGNORE: /* the others failed of losing it */
        if (rule >= 0)
            restart_ignored(p, v, rule);
        else
            restart_disrupted(p, v);
        return true;
    case TJ_FP_COUNT:
        break;
    }
    if (counted(p) >= tj->backoff_limit) {
        snprintf(msg, sizeof(msg), "Pod %s failed (exit code %d%s%s) and all %d restarts allowed "
                 "by spec.runPolicy.backoffLimit are used", f->name, f->exit_code,
                 f->reason[0] ? ", " : "", f->reason, tj->backoff_limit);
        add_term_message(msg, sizeof(msg), f);
        finish(p, false, "BackoffLimitExceeded", msg);
        return true;
    }
    snprintf(msg, sizeof(msg), "Pod %s failed (exit code %d%s%s); restarting the whole gang "
             "(restart %d of %d)", f->name, f->exit_code, f->reason[0] ? ", " : "", f->reason,
             counted(p) + 1, tj->backoff_limit);
    restart_gang(p, "WorkerFailed", msg);
    return true;
}

static void children(struct pass *p)
{
    const struct tj *tj = p->tj;
    char name[RENDER_NAME_MAX];

    if (!p->in->have_service)
        add_action(p, REC_CREATE, REC_SERVICE, tj->name, render_service(tj));
    render_configmap_name(tj, name, sizeof(name));
    if (!p->in->have_configmap) {
        add_action(p, REC_CREATE, REC_CONFIGMAP, name, render_configmap(tj));
    } else {
        char *want = render_config_json(tj);
        char dg[REC_DIGEST_LEN];
        bool same = false;

        if (p->in->configmap_data) {
            same = strcmp(want, p->in->configmap_data) == 0;
        } else if (p->in->configmap_digest) {
            rec_digest(want, dg);
            same = strcmp(dg, p->in->configmap_digest) == 0;
        }
        if (!same)
            add_action(p, REC_UPDATE, REC_CONFIGMAP, name, render_configmap(tj));
        free(want);
    }
    render_secret_name(tj, name, sizeof(name));
    if (!p->in->have_secret)
        add_action(p, REC_CREATE, REC_SECRET, name, render_secret(tj, p->in->token));
}

/* elasticPolicy.shrinkAfterSeconds is in force: the operator may run the job with fewer workers
 * than replicas while the others cannot be scheduled. Not with Kueue (whose quota decides) nor a
 * gang Workload (all bound or none). */
static bool auto_elastic(const struct tj *job)
{
    return job->elastic_shrink_s > 0 && job->elastic_min > 0 && !job->queue[0] &&
           job->gang != TJ_GANG_WORKLOAD;
}

/* A standby pod of the current restart holding the place of a worker the job was shrunk
 * without (index from its size up to replicas), made for the job's full size. */
static bool standby_place(const struct pass *p, const struct rec_pod *pod)
{
    return pod->standby && pod->restart == p->st.restarts && pod->index >= p->tj->replicas &&
           pod->index < p->in->job->replicas && pod->replicas == p->in->job->replicas &&
           auto_elastic(p->in->job) && render_is_pod_name(p->tj, pod->index, pod->name);
}

/* Deletes pods that do not belong to the current gang (nor hold a place for it); true while any
 * of them still exists. */
static bool retire_stale(struct pass *p)
{
    bool stale = false;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (current(p, pod) || standby_place(p, pod))
            continue;
        stale = true;
        delete_pod(p, pod);
    }
    return stale;
}

static int batch_of(int k)
{
    int b = 0;

    for (k += 1; k > 1; k >>= 1)
        b++;
    return b;
}

static void create_pods(struct pass *p)
{
    const struct tj *tj = p->tj;
    bool *seen = xcalloc((size_t)tj->replicas, sizeof(*seen));
    int k = 0;

    for (size_t i = 0; i < p->in->npods; i++)
        if (current(p, &p->in->pods[i]))
            seen[p->in->pods[i].index] = true;
    for (int i = 0; i < tj->replicas; i++) {
        char name[RENDER_NAME_MAX];
        struct rec_action *a;
        json_t *pod;

        if (seen[i])
            continue;
        if (k == 0 && tj->gang == TJ_GANG_WORKLOAD) /* the gang's Workload, before its pods */
            add_action(p, REC_CREATE, REC_WORKLOAD, tj->name, render_workload(tj));
        render_pod_name(tj, i, name, sizeof(name));
        pod = render_pod(tj, i, p->st.restarts);
        if (tj->gang == TJ_GANG_WORKLOAD)
            render_pod_gang_key(pod, p->st.restarts, (long long)p->st.start_time);
        a = add_action(p, REC_CREATE, REC_POD, name, pod);
        if (a)
            a->batch = batch_of(k++);
    }
    free(seen);
}

static bool all_running(const struct pass *p)
{
    int n = 0;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (current(p, pod) && !pod->terminating && pod->phase == REC_POD_RUNNING)
            n++;
    }
    return n == p->tj->replicas; /* current(): one pod an index at most */
}

/* Hang detection (spec.runPolicy.progressDeadlineSeconds): rank 0 of the current gang, Running,
 * whose step has not advanced for the deadline. Restarts the gang like a failure, counting
 * against backoffLimit; true when it did (or the job failed). Otherwise asks for a timer at the
 * deadline and clears Stalled once the current gang advances. */
static bool stall(struct pass *p)
{
    const struct tj *tj = p->tj;
    const struct rec_input *in = p->in;
    char msg[COND_MESSAGE_MAX];
    long long due;
    int r = p->st.restarts;

    if (tj->progress_deadline_s <= 0 || in->progress_restart < 0 || in->progress_restart != r ||
        !in->progress_since || !all_running(p))
        return false;
    if (in->progress_advanced)
        clear_cond(p, COND_STALLED, "Progressing", "Rank 0 reports new training steps");
    due = (long long)in->progress_since + tj->progress_deadline_s;
    if ((long long)in->now < due) {
        requeue(p, due - (long long)in->now);
        return false;
    }
    snprintf(msg, sizeof(msg), "No training progress from rank 0 for %llds "
             "(spec.runPolicy.progressDeadlineSeconds %lld)",
             (long long)in->now - (long long)in->progress_since, tj->progress_deadline_s);
    set_cond(p, COND_STALLED, true, "ProgressDeadlineExceeded", msg);
    event(p, true, "Stalled", "%s", msg);
    if (counted(p) >= tj->backoff_limit) {
        char fmsg[COND_MESSAGE_MAX];
        snprintf(fmsg, sizeof(fmsg), "%.300s; all %d restarts allowed by "
                 "spec.runPolicy.backoffLimit are used", msg, tj->backoff_limit);
        finish(p, false, "BackoffLimitExceeded", fmsg);
        return true;
    }
    snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; restarting the whole gang "
             "(restart %d of %d)", counted(p) + 1, tj->backoff_limit);
    restart_gang(p, "Stalled", msg);
    return true;
}

/* The current-gang pod with the lowest index that cannot start, or NULL. */
static const struct rec_pod *first_problem(const struct pass *p)
{
    const struct rec_pod *f = NULL;

    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (current(p, pod) && !pod->terminating && pod->problem[0] &&
            (!f || pod->index < f->index))
            f = pod;
    }
    return f;
}

static void set_phase(struct pass *p)
{
    const struct rec_pod *stuck;
    char msg[COND_MESSAGE_MAX];

    count_pods(p);

    if (all_running(p)) {
        if (p->st.phase != TJ_PHASE_RUNNING)
            event(p, false, "Running", "All %d workers are running", p->tj->replicas);
        p->st.phase = TJ_PHASE_RUNNING;
        snprintf(msg, sizeof(msg), "All %d workers are running (restart %d)", p->tj->replicas,
                 p->st.restarts);
        set_cond(p, COND_RUNNING, true, "AllWorkersRunning", msg);
        clear_cond(p, COND_RESTARTING, "GangRunning", msg);
        return;
    }
    stuck = first_problem(p);
    if (stuck) {
        const struct cond *c = cond_find(&p->st.conds, COND_RUNNING);
        bool news = !c || strcmp(c->reason, stuck->problem) != 0;

        snprintf(msg, sizeof(msg), "Pod %s cannot start: %s: %s", stuck->name, stuck->problem,
                 stuck->problem_msg[0] ? stuck->problem_msg : "(no message)");
        set_cond(p, COND_RUNNING, false, stuck->problem, msg);
        if (news)
            event(p, true, stuck->problem, "%s", msg);
    } else {
        snprintf(msg, sizeof(msg), "%d of %d workers are running", p->active, p->tj->replicas);
        clear_cond(p, COND_RUNNING, "WorkersNotRunning", msg);
    }
    p->st.phase = cond_is_true(&p->st.conds, COND_RESTARTING) ? TJ_PHASE_RESTARTING
                                                               : TJ_PHASE_PENDING;
}

/* The size of this restart's gang when its pods still running or starting were made for
 * another than the job's replicas, else -1. */
static int old_size(const struct pass *p)
{
    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (pod->restart == p->st.restarts && pod->replicas > 0 && !pod->standby &&
            pod->replicas != p->tj->replicas && !pod->terminating &&
            pod->phase != REC_POD_SUCCEEDED && !pod_failed(pod))
            return pod->replicas;
    }
    return -1;
}

/* An elastic job whose size changed while its gang runs (kubectl scale, an autoscaler through
 * the scale subresource, elastic(); any job whose replicas changed without a suspend, which the
 * CRD refuses for the others): the old gang stops and a new one starts at the new size, at the
 * same restart count, since a resize is no failure. Rank 0 saves the step it stopped at on the
 * way out (checkpoint.saveOnStop) and the new gang resumes there at its world size. true while
 * the old gang's pods are being deleted. */
static bool resize(struct pass *p)
{
    const struct tj *tj = p->tj;
    const struct cond *c = cond_find(&p->st.conds, COND_RESTARTING);
    char msg[COND_MESSAGE_MAX];
    int from = old_size(p);

    if (from < 0)
        return false;
    snprintf(msg, sizeof(msg), "Resizing from %d to %d workers: the gang stops, and starts "
             "again at the new size from the step rank 0 saves", from, tj->replicas);
    if (!c || !c->status || strcmp(c->reason, "Resized") != 0 || strcmp(c->message, msg) != 0)
        event(p, false, "Resizing", "%s", msg);
    p->st.phase = TJ_PHASE_RESTARTING;
    set_cond(p, COND_RESTARTING, true, "Resized", msg);
    clear_cond(p, COND_RUNNING, "Resized", msg);
    for (size_t i = 0; i < p->in->npods; i++)
        delete_pod(p, &p->in->pods[i]);
    children(p); /* config.json says the new world size */
    return true;
}

/* Shrunk (elasticPolicy.shrinkAfterSeconds) and its gang Running: a standby pod for each
 * missing worker, the worker's pod that only waits, so that the scheduler binds it where a
 * worker would fit; elastic() grows the job once all of them run. Made only while the gang runs,
 * so that they never take a place the gang's own pods need. */
static void create_standby(struct pass *p)
{
    int full = p->in->job->replicas, k = 0;
    bool *seen = xcalloc((size_t)full, sizeof(*seen));

    for (size_t i = 0; i < p->in->npods; i++)
        if (standby_place(p, &p->in->pods[i]))
            seen[p->in->pods[i].index] = true;
    for (int i = p->tj->replicas; i < full; i++) {
        char name[RENDER_NAME_MAX];
        struct rec_action *a;

        if (seen[i])
            continue;
        render_pod_name(p->in->job, i, name, sizeof(name));
        a = add_action(p, REC_CREATE, REC_POD, name,
                       render_standby_pod(p->in->job, i, p->st.restarts));
        if (a)
            a->batch = batch_of(k++);
    }
    free(seen);
}

/* elasticPolicy.shrinkAfterSeconds, before resize(), which carries out a change of p->eff:
 *   - workers of the gang unschedulable (PodScheduled=False) for that long, and those that were
 *     scheduled at least minReplicas: the job shrinks to them (a Normal ScaledDown event), as
 *     torchrun goes on with the nodes that joined;
 *   - shrunk, and a standby pod runs for every missing worker: it grows back to replicas (a
 *     Normal ScaledUp event), as torchrun restarts when a node joins.
 * The size is kept in status.elasticWorkers, the wait in status.unschedulableSince. */
static void elastic(struct pass *p)
{
    const struct tj *job = p->in->job;
    const struct rec_pod *stuck = NULL;
    int eff = p->eff.replicas, k = 0, placed = 0;
    char msg[COND_MESSAGE_MAX];
    long long due;

    if (!auto_elastic(job)) {
        p->st.unschedulable_since = 0;
        return;
    }
    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (standby_place(p, pod) && pod->phase == REC_POD_RUNNING && !pod->terminating)
            placed++;
        if (current(p, pod) && !pod->terminating && strcmp(pod->problem, "Unschedulable") == 0) {
            k++;
            if (!stuck || pod->index < stuck->index)
                stuck = pod;
        }
    }
    if (eff < job->replicas && placed == job->replicas - eff) {
        snprintf(msg, sizeof(msg), "Room for all %d workers again (the standby pods of workers "
                 "%d..%d run): resizing from %d", job->replicas, eff, job->replicas - 1, eff);
        event(p, false, "ScaledUp", "%s", msg);
        p->eff.replicas = job->replicas;
        p->st.elastic_workers = 0;
        p->st.unschedulable_since = 0;
        return;
    }
    if (k == 0) {
        p->st.unschedulable_since = 0;
        return;
    }
    if (!p->st.unschedulable_since)
        p->st.unschedulable_since = p->in->now;
    due = (long long)p->st.unschedulable_since + job->elastic_shrink_s;
    if ((long long)p->in->now < due) {
        requeue(p, due - (long long)p->in->now);
        return;
    }
    if (eff - k < job->elastic_min)
        return; /* fewer than minReplicas fit: wait, as without elasticPolicy */
    snprintf(msg, sizeof(msg), "%d of %d workers could not be scheduled for %llds (pod %s: %.200s); "
             "running with %d until room appears (elasticPolicy.minReplicas %d)", k, eff,
             (long long)p->in->now - (long long)p->st.unschedulable_since, stuck->name,
             stuck->problem_msg[0] ? stuck->problem_msg : stuck->problem, eff - k,
             job->elastic_min);
    event(p, false, "ScaledDown", "%s", msg);
    p->eff.replicas = eff - k;
    p->st.elastic_workers = eff - k;
    p->st.unschedulable_since = 0;
    /* a stuck pod the smaller gang keeps (one without the gantry.dev/replicas label, which the
     * resize leaves alone) goes on waiting from now, as the next pass would see it */
    for (size_t i = 0; i < p->in->npods; i++) {
        const struct rec_pod *pod = &p->in->pods[i];
        if (current(p, pod) && !pod->terminating && strcmp(pod->problem, "Unschedulable") == 0)
            p->st.unschedulable_since = p->in->now;
    }
}

static void running(struct pass *p)
{
    const struct tj *tj = p->tj;
    bool stale;

    if (cond_is_true(&p->st.conds, COND_SUSPENDED)) {
        set_cond(p, COND_SUSPENDED, false, "Resumed", "spec.runPolicy.suspend is false");
        event(p, false, "Resumed", "TrainingJob resumed with %d restarts", p->st.restarts);
    }
    if (!p->st.start_time)
        p->st.start_time = p->in->now;
    if (tj->active_deadline_s > 0) {
        long long end = (long long)p->st.start_time + tj->active_deadline_s;
        if ((long long)p->in->now >= end) {
            char msg[COND_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "The job ran longer than spec.runPolicy."
                     "activeDeadlineSeconds (%llds)", tj->active_deadline_s);
            finish(p, false, "DeadlineExceeded", msg);
            terminal(p);
            return;
        }
        requeue(p, end - (long long)p->in->now);
    }
    elastic(p);
    if (resize(p))
        return;
    if (judge(p) || stall(p)) {
        if (tj_phase_terminal(p->st.phase))
            terminal(p);
        return;
    }
    stale = retire_stale(p);
    children(p);
    if (p->foreign) /* their names are ours: wait for the garbage collector to remove them */
        requeue(p, 2);
    else if (!stale && p->in->expectations_met)
        create_pods(p);
    set_phase(p);
    if (p->st.phase == TJ_PHASE_RUNNING && p->tj->replicas < p->in->job->replicas &&
        auto_elastic(p->in->job) && p->in->expectations_met) /* not Kueue's partial admission */
        create_standby(p);
}

/* ---------------------------------------------------------------------------------------------
 * Kueue (rec.h): the job runs only while Kueue admits its Workload
 * ------------------------------------------------------------------------------------------- */

/* obj[key] as a string, "" when absent or not a string. */
static const char *cond_str(const json_t *obj, const char *key)
{
    return str_or(json_object_get(obj, key));
}

static const char *wl_str(const json_t *wl, const char *obj, const char *key)
{
    return cond_str(json_object_get(wl, obj), key);
}

/* The Workload's condition of that type (borrowed), or NULL. */
static const json_t *wl_cond(const json_t *wl, const char *type)
{
    const json_t *conds = json_object_get(json_object_get(wl, "status"), "conditions"), *c;
    size_t i;

    json_array_foreach(conds, i, c)
        if (strcmp(cond_str(c, "type"), type) == 0)
            return c;
    return NULL;
}

static bool wl_true(const json_t *wl, const char *type)
{
    return strcmp(cond_str(wl_cond(wl, type), "status"), "True") == 0;
}

/* Ours: the job controls it (a Workload with the job's label that another object controls, a
 * deleted job's of the same name, is not ours to touch); one without a name is nobody's. */
static bool wl_ours(const struct pass *p, const json_t *wl)
{
    const json_t *refs = json_object_get(json_object_get(wl, "metadata"), "ownerReferences"), *r;
    size_t i;

    if (!wl_str(wl, "metadata", "name")[0])
        return false;
    json_array_foreach(refs, i, r)
        if (json_is_true(json_object_get(r, "controller")))
            return !p->tj->uid[0] || strcmp(cond_str(r, "uid"), p->tj->uid) == 0;
    return false;
}

static bool wl_deleting(const json_t *wl)
{
    return json_is_string(json_object_get(json_object_get(wl, "metadata"), "deletionTimestamp"));
}

static void kueue_delete(struct pass *p, const json_t *wl)
{
    struct rec_action *a;

    if (wl_deleting(wl))
        return;
    a = add_action(p, REC_DELETE, REC_KUEUE, wl_str(wl, "metadata", "name"), NULL);
    if (a)
        snprintf(a->uid, sizeof(a->uid), "%s", wl_str(wl, "metadata", "uid"));
}

/* Sets a condition in conds (a JSON array, edited), metav1.Condition style: lastTransitionTime
 * moves only when the status changes. */
static void wl_cond_set(const struct pass *p, const json_t *wl, json_t *conds, const char *type,
                        bool status, const char *reason, const char *msg)
{
    json_t *c = NULL, *e;
    const char *st = status ? "True" : "False";
    char ts[32];
    size_t i;

    json_array_foreach(conds, i, e)
        if (strcmp(cond_str(e, "type"), type) == 0)
            c = e;
    if (!c) {
        c = json_object();
        json_array_append_new(conds, c);
    }
    if (strcmp(cond_str(c, "status"), st) != 0 || !json_object_get(c, "lastTransitionTime")) {
        cond_fmt_time(p->in->now, ts, sizeof(ts));
        json_object_set_new(c, "lastTransitionTime", json_string(ts));
    }
    json_object_set_new(c, "type", json_string(type));
    json_object_set_new(c, "status", json_string(st));
    json_object_set_new(c, "reason", json_string(reason));
    json_object_set_new(c, "message", json_string(msg));
    json_object_set(c, "observedGeneration",
                    json_object_get(json_object_get(wl, "metadata"), "generation"));
    if (!json_is_integer(json_object_get(c, "observedGeneration")))
        json_object_del(c, "observedGeneration");
}

/* A merge patch of the Workload's status: conditions (all of them: a merge patch replaces a
 * list) and, when clear_admission, admission: null. The resourceVersion makes it a patch of
 * what was read, or a 409; the name (unchanged) says which. */
static void kueue_patch(struct pass *p, const json_t *wl, json_t *conds, bool clear_admission)
{
    json_t *patch = json_pack("{s:{s:s, s:s}, s:{s:o}}", "metadata", "name",
                              wl_str(wl, "metadata", "name"), "resourceVersion",
                              wl_str(wl, "metadata", "resourceVersion"), "status", "conditions",
                              conds);

    if (clear_admission)
        json_object_set_new(json_object_get(patch, "status"), "admission", json_null());
    add_action(p, REC_UPDATE, REC_KUEUE, wl_str(wl, "metadata", "name"), patch);
}

static json_t *wl_conds_copy(const json_t *wl)
{
    const json_t *c = json_object_get(json_object_get(wl, "status"), "conditions");
    return json_is_array(c) ? json_deep_copy(c) : json_array();
}

/* A terminal job marks its Workloads Finished: Kueue releases their quota. */
static void kueue_finish(struct pass *p)
{
    bool ok = p->st.phase == TJ_PHASE_SUCCEEDED;
    const struct cond *c = cond_find(&p->st.conds, ok ? COND_SUCCEEDED : COND_FAILED);
    const json_t *wl;
    size_t i;

    json_array_foreach(p->in->workloads, i, wl) {
        if (!wl_ours(p, wl) || wl_deleting(wl) || wl_true(wl, "Finished"))
            continue;
        json_t *conds = wl_conds_copy(wl);
        wl_cond_set(p, wl, conds, "Finished", true, ok ? "Succeeded" : "Failed",
                    c && c->message[0] ? c->message : ok ? "The job succeeded" : "The job failed");
        kueue_patch(p, wl, conds, false);
    }
}

/* Suspended, or no longer queued (the label went): its Workloads go, and their quota. */
static void kueue_release(struct pass *p)
{
    const json_t *wl;
    size_t i;

    json_array_foreach(p->in->workloads, i, wl)
        if (wl_ours(p, wl))
            kueue_delete(p, wl);
}

/* Not admitted: no pod runs (any left are deleted, restarts kept), phase Pending, Queued=True.
 * An Event when the job starts waiting, or waits for another reason. */
static void queued(struct pass *p, bool warning, const char *reason, const char *msg)
{
    const struct cond *q = cond_find(&p->st.conds, COND_QUEUED);

    for (size_t i = 0; i < p->in->npods; i++)
        delete_pod(p, &p->in->pods[i]);
    if (!q || !q->status || strcmp(q->reason, reason) != 0)
        event(p, warning, reason, "%s", msg);
    set_cond(p, COND_QUEUED, true, reason, msg);
    if (cond_is_true(&p->st.conds, COND_SUSPENDED))
        set_cond(p, COND_SUSPENDED, false, "Resumed", "spec.runPolicy.suspend is false");
    clear_cond(p, COND_RUNNING, "Queued", "The job waits for Kueue to admit it");
    clear_cond(p, COND_RESTARTING, "Queued", "The job waits for Kueue to admit it");
    p->st.phase = TJ_PHASE_PENDING;
    p->st.start_time = 0; /* activeDeadlineSeconds counts from admission */
    children(p);
}

/* Evicted (preempted, deactivated, its queue stopped, ...): the pods go; once the last is gone,
 * the admission is cleared so that Kueue can hand the quota on and requeue this Workload. */
static void evicted(struct pass *p, const json_t *wl, const json_t *ev, const char *name)
{
    const char *why = cond_str(ev, "reason"), *what = cond_str(ev, "message");
    const json_t *qr = wl_cond(wl, "QuotaReserved");
    const char *wait = cond_str(qr, "message");
    char msg[COND_MESSAGE_MAX];

    snprintf(msg, sizeof(msg), "Kueue evicted Workload %s (%s: %s); the pods are deleted and "
             "the job resumes from its last checkpoint once admitted again", name, why, what);
    /* handed back and requeued: what Kueue says about admitting it again (the quota it lacks) */
    if (p->in->npods == 0 && qr && strcmp(cond_str(qr, "status"), "False") == 0 &&
        !json_object_get(json_object_get(wl, "status"), "admission") && wait[0] &&
        strcmp(wait, what) != 0)
        snprintf(msg, sizeof(msg), "Kueue evicted Workload %s (%s); it waits to be admitted "
                 "again: %s", name, why, wait);
    queued(p, true, "Evicted", msg);
    if (p->in->npods == 0 && (wl_true(wl, "QuotaReserved") ||
                              json_object_get(json_object_get(wl, "status"), "admission"))) {
        json_t *conds = wl_conds_copy(wl);
        bool requeue = strcmp(why, "Preempted") == 0 || strcmp(why, "NodeFailures") == 0;
        wl_cond_set(p, wl, conds, "QuotaReserved", false, "Pending", what);
        if (wl_true(wl, "Admitted"))
            wl_cond_set(p, wl, conds, "Admitted", false, "NoReservation",
                        "The workload has no reservation");
        wl_cond_set(p, wl, conds, "Requeued", requeue, why, what);
        kueue_patch(p, wl, conds, true);
    }
}

/* The admitted pod set's count (Kueue's partial admission may give fewer pods than asked), or
 * -1 when the admission does not say. */
static int admitted_count(const json_t *wl)
{
    const json_t *psa = json_object_get(json_object_get(json_object_get(wl, "status"),
                                                        "admission"), "podSetAssignments"), *a;
    size_t i;

    json_array_foreach(psa, i, a)
        if (strcmp(cond_str(a, "name"), RENDER_KUEUE_PODSET) == 0 &&
            json_is_integer(json_object_get(a, "count")) &&
            json_integer_value(json_object_get(a, "count")) <= TJ_REPLICAS_MAX)
            return (int)json_integer_value(json_object_get(a, "count"));
    return -1;
}

/* The admitted pod set's flavors ({resource: flavor}), or NULL. */
static const json_t *admitted_flavors(const json_t *wl)
{
    const json_t *psa = json_object_get(json_object_get(json_object_get(wl, "status"),
                                                        "admission"), "podSetAssignments"), *a;
    size_t i;

    json_array_foreach(psa, i, a)
        if (strcmp(cond_str(a, "name"), RENDER_KUEUE_PODSET) == 0)
            return json_object_get(a, "flavors");
    return NULL;
}

/* The admission gate of a queued job: true when its pods may run. */
static bool kueue_gate(struct pass *p)
{
    const struct tj *tj = p->in->job; /* the Workload is the spec's, at its full size */
    char want[RENDER_NAME_MAX], msg[COND_MESSAGE_MAX];
    const json_t *wl = NULL, *w, *ev, *qr;
    size_t i;

    render_kueue_name(tj, want, sizeof(want));
    json_array_foreach(p->in->workloads, i, w) {
        if (!wl_ours(p, w))
            continue;
        if (strcmp(wl_str(w, "metadata", "name"), want) == 0)
            wl = w;
        else /* made for another spec, queue or priority */
            kueue_delete(p, w);
    }
    if (!p->in->kueue_served) {
        snprintf(msg, sizeof(msg), "The job is labelled %s=%s, but the cluster serves no %s "
                 "Workloads (is Kueue installed? the operator looks again every minute), or "
                 "the operator may not list them; no pod runs until it can, or remove the label",
                 TJ_LABEL_QUEUE, tj->queue, RENDER_KUEUE_API);
        queued(p, true, "KueueNotServed", msg);
        requeue(p, REC_KUEUE_PROBE_S);
        return false;
    }
    if (!wl) {
        add_action(p, REC_CREATE, REC_KUEUE, want, render_kueue_workload(tj));
        snprintf(msg, sizeof(msg), "Workload %s waits in LocalQueue %s for Kueue to admit it",
                 want, tj->queue);
        queued(p, false, "WaitingForAdmission", msg);
        return false;
    }
    if (wl_deleting(wl)) {
        snprintf(msg, sizeof(msg), "Workload %s is being deleted; the job waits for it to go "
                 "and is then queued again", want);
        queued(p, true, "WorkloadDeleted", msg);
        return false;
    }
    if (wl_true(wl, "Finished")) { /* finished by someone else: a new one queues the job again */
        kueue_delete(p, wl);
        snprintf(msg, sizeof(msg), "Workload %s was marked Finished (%s) while the job ran; the "
                 "job is queued again", want, cond_str(wl_cond(wl, "Finished"), "reason"));
        queued(p, true, "WorkloadFinished", msg);
        return false;
    }
    if ((ev = wl_cond(wl, "Evicted")) && strcmp(cond_str(ev, "status"), "True") == 0) {
        evicted(p, wl, ev, want);
        return false;
    }
    if (!wl_true(wl, "Admitted")) {
        qr = wl_cond(wl, "QuotaReserved");
        snprintf(msg, sizeof(msg), "Workload %s waits in LocalQueue %s for Kueue to admit it%s%s",
                 want, tj->queue, qr ? ": " : "", qr ? cond_str(qr, "message") : "");
        queued(p, false, "WaitingForAdmission", msg);
        return false;
    }
    int n = admitted_count(wl);
    if (n > 0 && n < tj->replicas && tj->elastic_min > 0 && n >= tj->elastic_min)
        p->eff.replicas = n; /* partial admission: the elastic job runs with n workers */
    snprintf(msg, sizeof(msg), "Kueue admitted Workload %s in ClusterQueue %s", want,
             wl_str(json_object_get(wl, "status"), "admission", "clusterQueue"));
    if (p->eff.replicas < tj->replicas)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " with %d of %d workers (partial "
                 "admission, elasticPolicy.minReplicas %d)", p->eff.replicas, tj->replicas,
                 tj->elastic_min);
    if (cond_is_true(&p->st.conds, COND_QUEUED))
        event(p, false, "Admitted", "%s", msg);
    set_cond(p, COND_QUEUED, false, "Admitted", msg);
    if (admitted_flavors(wl))
        p->out->kueue_flavors = json_deep_copy(admitted_flavors(wl));
    p->admitted = wl;
    return true;
}

/* The admitted Workload's PodsReady condition, as Kueue's job controllers keep it (Kueue's
 * waitForPodsReady evicts a Workload whose pods are not ready in time, and requeues one that
 * does not recover): True (Started; Recovered after a failure) once every worker of the current
 * gang is ready or done, else False (WaitForStart; WaitForRecovery after it was True). After
 * count_pods(). Written only when it changes. */
static void kueue_pods_ready(struct pass *p)
{
    const json_t *wl = p->admitted, *c = wl_cond(wl, "PodsReady");
    const char *was = cond_str(c, "reason");
    bool ready = p->ready + p->succeeded >= p->tj->replicas, wasready;
    const char *reason, *msg;
    json_t *conds;

    wasready = strcmp(cond_str(c, "status"), "True") == 0;
    if (ready) {
        bool rec = strcmp(was, "WaitForRecovery") == 0 || strcmp(was, "Recovered") == 0;
        reason = rec ? "Recovered" : "Started";
        msg = "All pods reached readiness and the workload is running";
    } else if (wasready || strcmp(was, "WaitForRecovery") == 0) {
        reason = "WaitForRecovery";
        msg = "At least one pod has failed, waiting for recovery";
    } else {
        reason = "WaitForStart";
        msg = "Not all pods are ready or succeeded";
    }
    if (c && wasready == ready && strcmp(was, reason) == 0)
        return;
    conds = wl_conds_copy(wl);
    wl_cond_set(p, wl, conds, "PodsReady", ready, reason, msg);
    kueue_patch(p, wl, conds, false);
}

/* ---------------------------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------------------------- */

/* A Succeeded job's progress reads complete, not the poller's last reading before rank 0
 * exited (which can be long before the end: the poll interval, a slow last checkpoint). */
static void progress_complete(json_t *prog)
{
    json_int_t total = json_integer_value(json_object_get(prog, "totalSteps"));
    json_t *step = json_object_get(prog, "step");
    char buf[64];

    if (total > 0) {
        json_object_set_new(prog, "step", json_integer(total));
        json_object_set_new(prog, "percent", json_integer(100));
        snprintf(buf, sizeof(buf), "%lld/%lld (100%%)", (long long)total, (long long)total);
    } else {
        snprintf(buf, sizeof(buf), "%lld (done)", (long long)json_integer_value(step));
    }
    json_object_set_new(prog, "summary", json_string(buf));
    json_object_set_new(prog, "etaSeconds", json_integer(0));
    json_object_set_new(prog, "eta", json_string("0s"));
    json_object_set_new(prog, "state", json_string("succeeded"));
}

/* status.lastCheckpoint {step, path} from rank 0's lastCheckpointStep (the operator cannot read
 * the volume; the worker writes <checkpoint.path>/<job>/step-<N>, worker/ckpt.h), or NULL when
 * progress reports none. */
static json_t *last_checkpoint(const struct tj *tj, const json_t *prog)
{
    const json_t *v = json_object_get(prog, "lastCheckpointStep");
    char path[TJ_PATH_MAX + RENDER_NAME_MAX + 32];

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return NULL;
    snprintf(path, sizeof(path), "%s/%s/step-%lld", strcmp(tj->ckpt_path, "/") ? tj->ckpt_path : "",
             tj->name, (long long)json_integer_value(v));
    return json_pack("{s:I, s:s}", "step", json_integer_value(v), "path", path);
}

/* The size of the gang whose pods are running or starting: the old size while a resize has
 * not yet stopped it, else the job's replicas while any current pod is active, else 0
 * (suspended, queued, finished). After count_pods(). */
static int current_replicas(const struct pass *p)
{
    int old = old_size(p);

    return old > 0 ? old : p->active > 0 ? p->tj->replicas : 0;
}

static json_t *status_json(const struct pass *p)
{
    json_t *st = json_object(), *lc;
    const json_t *pr;
    char ts[32], ready[32];

    json_object_set_new(st, "phase", json_string(tj_phase_str(p->st.phase)));
    snprintf(ready, sizeof(ready), "%d/%d", p->ready, p->tj->replicas);
    json_object_set_new(st, "ready", json_string(ready));
    json_object_set_new(st, "restarts", json_integer(p->st.restarts));
    json_object_set_new(st, "disruptions", json_integer(p->st.disruptions));
    if (p->st.ignored > 0)
        json_object_set_new(st, "ignoredRestarts", json_integer(p->st.ignored));
    if (p->st.elastic_workers > 0)
        json_object_set_new(st, "elasticWorkers", json_integer(p->st.elastic_workers));
    if (p->st.unschedulable_since) {
        cond_fmt_time(p->st.unschedulable_since, ts, sizeof(ts));
        json_object_set_new(st, "unschedulableSince", json_string(ts));
    }
    json_object_set_new(st, "replicas",
                        json_pack("{s:i, s:i, s:i, s:i}", "active", p->active, "ready", p->ready,
                                  "succeeded", p->succeeded, "failed", p->failed));
    /* the scale subresource's (kubectl scale, an autoscaler): the gang's size now, and its
     * pods */
    json_object_set_new(st, "currentReplicas", json_integer(current_replicas(p)));
    snprintf(ts, sizeof(ts), "%s=", RENDER_LABEL_JOB);
    json_object_set_new(st, "selector", json_pack("s++", ts, p->tj->name, ""));
    if (p->st.start_time) {
        cond_fmt_time(p->st.start_time, ts, sizeof(ts));
        json_object_set_new(st, "startTime", json_string(ts));
    }
    if (p->st.completion_time) {
        cond_fmt_time(p->st.completion_time, ts, sizeof(ts));
        json_object_set_new(st, "completionTime", json_string(ts));
    }
    json_object_set_new(st, "observedGeneration", json_integer(p->tj->generation));
    json_object_set_new(st, "conditions", cond_list_to_json(&p->st.conds));
    pr = p->in->progress ? p->in->progress : json_object_get(p->tj->status_raw, "progress");
    if (json_is_object(pr)) {
        json_t *prog = json_deep_copy(pr);
        if (p->st.phase == TJ_PHASE_SUCCEEDED)
            progress_complete(prog);
        json_object_set_new(st, "progress", prog);
    }
    lc = last_checkpoint(p->tj, json_object_get(st, "progress"));
    if (lc)
        json_object_set_new(st, "lastCheckpoint", lc);
    else if ((lc = json_object_get(p->tj->status_raw, "lastCheckpoint"))) /* kept */
        json_object_set(st, "lastCheckpoint", lc);
    return st;
}

static void result_init(struct rec_result *out, size_t cap)
{
    memset(out, 0, sizeof(*out));
    out->actions = xcalloc(cap ? cap : 1, sizeof(*out->actions));
    out->requeue_after_s = -1;
}

static void result_status(struct pass *p)
{
    p->out->status = status_json(p);
    p->out->status_changed = !p->tj->status_raw || !json_equal(p->out->status, p->tj->status_raw);
}

bool rec_pod_owned(const struct rec_pod *pod, const char *job_uid)
{
    return !pod->owner[0] || !job_uid[0] || strcmp(pod->owner, job_uid) == 0;
}

static int reconcile(const struct rec_input *in, size_t foreign, struct rec_result *out);

int rec_reconcile(const struct rec_input *in, struct rec_result *out)
{
    size_t k = 0;
    int rc;

    for (size_t i = 0; i < in->npods; i++)
        k += rec_pod_owned(&in->pods[i], in->job->uid);
    if (k == in->npods)
        return reconcile(in, 0, out);
    struct rec_input mine = *in;
    struct rec_pod *pods = xmallocarray(k + 1, sizeof(*pods));
    mine.pods = pods;
    mine.npods = 0;
    for (size_t i = 0; i < in->npods; i++)
        if (rec_pod_owned(&in->pods[i], in->job->uid))
            pods[mine.npods++] = in->pods[i];
    rc = reconcile(&mine, in->npods - k, out);
    free(pods);
    return rc;
}

static int reconcile(const struct rec_input *in, size_t foreign, struct rec_result *out)
{
    const struct tj *tj = in->job;
    struct pass p = {.in = in, .out = out, .st = tj->status, .foreign = foreign, .eff = *tj};

    p.tj = &p.eff; /* a shallow copy: only its replicas may differ */
    if (!auto_elastic(tj) || p.st.elastic_workers >= tj->replicas)
        p.st.elastic_workers = 0; /* replicas decides (again) */
    if (p.st.elastic_workers > 0)
        p.eff.replicas = p.st.elastic_workers;
    p.cap = in->npods + (size_t)tj->replicas + json_array_size(in->workloads) + 8;
    result_init(out, p.cap);
    if (tj->deleting) { /* the garbage collector takes the children */
        out->status = tj->status_raw ? json_deep_copy(tj->status_raw) : json_object();
        return 0;
    }
    p.st.restarts = rec_restarts(in); /* never lose the restart budget */
    if (!cond_find(&p.st.conds, COND_CREATED) || !cond_is_true(&p.st.conds, COND_CREATED)) {
        bool was = cond_find(&p.st.conds, COND_CREATED) != NULL;
        set_cond(&p, COND_CREATED, true, "TrainingJobCreated",
                 "The TrainingJob is accepted and its children are managed");
        if (!was)
            event(&p, false, "Created", "TrainingJob %s/%s accepted: %d replicas", tj->ns,
                  tj->name, tj->replicas);
    }
    if (tj_phase_terminal(p.st.phase)) {
        terminal(&p);
        kueue_finish(&p);
    } else if (tj->suspend) {
        suspend(&p);
        kueue_release(&p);
    } else if (!tj->queue[0]) {
        kueue_release(&p); /* the label went: the job runs outside Kueue */
        running(&p);
    } else if (kueue_gate(&p)) {
        running(&p);
    }
    count_pods(&p);
    if (p.admitted && !tj_phase_terminal(p.st.phase))
        kueue_pods_ready(&p);
    result_status(&p);
    return 0;
}

void rec_invalid(const struct tj *job, const char *why, time_t now, struct rec_result *out)
{
    struct pass p = {.tj = job, .out = out, .st = job->status};
    struct rec_input in = {.job = job, .now = now};
    json_t *st;

    p.in = &in;
    result_init(out, 1);
    set_cond(&p, COND_CREATED, false, "InvalidSpec", why ? why : "invalid spec");
    if (p.st.phase == TJ_PHASE_NONE)
        p.st.phase = TJ_PHASE_PENDING;
    st = job->status_raw ? json_deep_copy(job->status_raw) : json_object();
    json_object_set_new(st, "phase", json_string(tj_phase_str(p.st.phase)));
    json_object_set_new(st, "observedGeneration", json_integer(job->generation));
    json_object_set_new(st, "conditions", cond_list_to_json(&p.st.conds));
    out->status = st;
    out->status_changed = !job->status_raw || !json_equal(st, job->status_raw);
}

void rec_result_cleanup(struct rec_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nactions; i++)
        json_decref(r->actions[i].obj);
    free(r->actions);
    json_decref(r->status);
    json_decref(r->kueue_flavors);
    memset(r, 0, sizeof(*r));
}

const char *rec_verb_str(enum rec_verb v)
{
    return v == REC_CREATE ? "create" : v == REC_UPDATE ? "update" : "delete";
}

const char *rec_kind_str(enum rec_kind k)
{
    static const char *const names[] = {"Pod",         "Service",  "ConfigMap",    "Secret",
                                        "TrainingJob", "Workload", "KueueWorkload"};
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}
