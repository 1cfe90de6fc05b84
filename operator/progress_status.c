/*
 * progress_status.c - the pure parts of progress.h: the hang-detection clock, the /progress URL,
 * and rank 0's /progress answer (or its final termination message) -> status.progress. Apart
 * from the poller (progress.c) so the operator's fuzz target (operator/fuzz/fuzz_rec.c) takes
 * them without libcurl and the executor: what a worker serves is untrusted input.
 */
#include "operator/progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void progress_clock_observe(struct progress_clock *c, const char *uid, int restart,
                            long long step, bool busy, time_t now)
{
    if (!c->uid[0] || strcmp(c->uid, uid) != 0 || c->restart != restart) {
        memset(c, 0, sizeof(*c));
        snprintf(c->uid, sizeof(c->uid), "%s", uid);
        c->restart = restart;
        c->step = step;
        c->since = now;
        return;
    }
    if (step >= 0 && step > c->step) {
        if (c->step >= 0)
            c->advanced = true; /* the first reading only sets the baseline */
        c->step = step;
        c->since = now;
    } else if (busy && step >= 0) {
        c->since = now; /* evaluating: alive, though the step stands */
    }
}

int progress_url(const char *tmpl, const char *ns, const char *job, const char *pod,
                 const char *ip, int port, char *out, size_t n)
{
    size_t o = 0;
    char portbuf[16];

    snprintf(portbuf, sizeof(portbuf), "%d", port);
    for (const char *s = tmpl; *s;) {
        const char *val = NULL;
        size_t skip = 0;
        if (*s == '{') {
            static const char *const names[] = {"{ip}", "{port}", "{ns}", "{job}", "{pod}"};
            const char *vals[] = {ip, portbuf, ns, job, pod};
            for (int i = 0; i < 5 && !val; i++)
                if (strncmp(s, names[i], strlen(names[i])) == 0) {
                    val = vals[i];
                    skip = strlen(names[i]);
                }
            if (!val)
                return -1;
        }
        if (val) {
            size_t l = strlen(val);
            if (o + l >= n)
                return -1;
            memcpy(out + o, val, l);
            o += l;
            s += skip;
        } else {
            if (o + 1 >= n)
                return -1;
            out[o++] = *s++;
        }
    }
    if (o >= n)
        return -1;
    out[o] = '\0';
    return 0;
}

void progress_fmt_eta(double s, char *out, size_t n)
{
    long long t;

    if (!(s > 0) || !isfinite(s)) {
        snprintf(out, n, "0s");
        return;
    }
    t = (long long)(fmin(s, 1e12) + 0.5); /* a worker's guess beyond 30,000 years: still a time */
    if (t < 3600)
        snprintf(out, n, t >= 60 ? "%lldm%llds" : "%llds", t >= 60 ? t / 60 : t, t % 60);
    else if (t < 86400)
        snprintf(out, n, "%lldh%lldm", t / 3600, t % 3600 / 60);
    else
        snprintf(out, n, "%lldd%lldh", t / 86400, t % 86400 / 3600);
}

static void copy_num(json_t *dst, const char *dk, const json_t *w, const char *wk)
{
    const json_t *v = json_object_get(w, wk);

    if (json_is_integer(v))
        json_object_set_new(dst, dk, json_integer(json_integer_value(v)));
    else if (json_is_real(v) && isfinite(json_real_value(v)))
        json_object_set_new(dst, dk, json_real(json_real_value(v)));
}

json_t *progress_status(const json_t *w, time_t since)
{
    const json_t *step = json_object_get(w, "step");
    const json_t *total = json_object_get(w, "total_steps");
    const json_t *eta = json_object_get(w, "eta_seconds");
    const char *state = json_string_value(json_object_get(w, "state"));
    char buf[64], ts[32];
    json_t *st;

    if (!json_is_integer(step))
        return NULL;
    st = json_object();
    copy_num(st, "step", w, "step");
    copy_num(st, "totalSteps", w, "total_steps");
    copy_num(st, "percent", w, "percent");
    copy_num(st, "epoch", w, "epoch");
    copy_num(st, "loss", w, "loss");
    copy_num(st, "samplesPerSecond", w, "samples_per_second");
    copy_num(st, "etaSeconds", w, "eta_seconds");
    copy_num(st, "lastCheckpointStep", w, "last_checkpoint_step");
    if (json_is_true(json_object_get(w, "early_stopped")))
        json_object_set_new(st, "earlyStopped", json_true());
    if (json_is_integer(json_object_get(w, "eval_step"))) { /* the last evaluation's results */
        const json_t *ev = json_object_get(w, "eval");
        copy_num(st, "evalStep", w, "eval_step");
        copy_num(st, "evalAccuracy", ev, "accuracy");
        copy_num(st, "evalMacroF1", ev, "macro_f1");
        copy_num(st, "evalMicroF1", ev, "micro_f1");  /* multi-label */
        copy_num(st, "evalPearson", ev, "pearson");   /* regression */
    }
    if (json_is_number(eta)) {
        progress_fmt_eta(json_number_value(eta), buf, sizeof(buf));
        json_object_set_new(st, "eta", json_string(buf));
    }
    if (json_is_integer(total) && json_integer_value(total) > 0)
        snprintf(buf, sizeof(buf), "%lld/%lld (%.0f%%)", (long long)json_integer_value(step),
                 (long long)json_integer_value(total),
                 trunc(100.0 * (double)json_integer_value(step) /
                       (double)json_integer_value(total))); /* no int: any step prints */
    else
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(step));
    json_object_set_new(st, "summary", json_string(buf));
    if (state && strlen(state) < 32)
        json_object_set_new(st, "state", json_string(state));
    if (since) {
        cond_fmt_time(since, ts, sizeof(ts));
        json_object_set_new(st, "lastProgressTime", json_string(ts));
    }
    return st;
}

json_t *progress_final(const struct rec_input *in)
{
    int restarts = in->job ? rec_restarts(in) : 0;

    for (size_t i = 0; i < in->npods; i++) {
        const struct rec_pod *pod = &in->pods[i];
        json_t *w, *st;

        /* Only exit 0: with FallbackToLogsOnError a failed worker's message is its log's tail,
         * whose last line may well be a JSON progress line of some earlier step. The worker
         * container's exit, not the pod's phase: a sidecar may keep the pod Running, and
         * reconcile declares success on that exit (rec.h), so its message has this progress. */
        if (pod->index != 0 || !in->job || pod->restart != restarts || pod->exit_code != 0 ||
            pod->message_truncated || pod->message[0] != '{')
            continue;
        w = json_loads(pod->message, JSON_REJECT_DUPLICATES, NULL);
        st = json_is_object(w) ? progress_status(w, 0) : NULL;
        json_decref(w);
        return st;
    }
    return NULL;
}
