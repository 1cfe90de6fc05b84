/*
 * ops.c - /healthz, /readyz, /metrics of gantry-operator (ops.h); libmicrohttpd, in the style of
 * worker/metrics.c.
 */
#include "operator/ops.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/xalloc.h"
#include "operator/kube/log.h"
#include "operator/progress.h"

#define OPS_MAX_BODY (1 << 20)

struct ops {
    pthread_mutex_t mu;
    struct MHD_Daemon *d[2]; /* health, metrics (metrics NULL when it shares health's) */
    int port[2];
    bool leader_elect;
    /* Guarded by mu. */
    bool leading, standby, stopping;
    struct exec_shared *sh;
};

struct ops *ops_new(bool leader_elect)
{
    struct ops *o = xcalloc(1, sizeof(*o));

    pthread_mutex_init(&o->mu, NULL);
    o->leader_elect = leader_elect;
    return o;
}

int ops_parse_addr(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(s, ':');
    const char *ps = colon ? colon + 1 : s;
    char *end;
    long p;
    size_t hl = colon ? (size_t)(colon - s) : 0;
    struct in_addr a;

    p = strtol(ps, &end, 10);
    if (!*ps || *end || p < 0 || p > 65535 || hl + 1 > hostlen)
        return -1;
    if (hl == 0)
        snprintf(host, hostlen, "0.0.0.0");
    else
        snprintf(host, hostlen, "%.*s", (int)hl, s);
    if (inet_pton(AF_INET, host, &a) != 1)
        return -1;
    *port = (int)p;
    return 0;
}

/* ---- rendering ---- */

static long rss_bytes(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

/* Ready, with the reason when not; call with mu held. */
static bool ready_locked(const struct ops *o, const char **why)
{
    if (o->stopping) {
        *why = "shutting down";
        return false;
    }
    if (o->leading) {
        if (o->sh) {
            *why = "leading; caches synced";
            return true;
        }
        *why = "leading; caches not synced yet";
        return false;
    }
    if (o->leader_elect && o->standby) {
        *why = "standby: waiting for the Lease";
        return true;
    }
    *why = "starting";
    return false;
}

#define P(...)                                                                                     \
    do {                                                                                           \
        if (rc == 0)                                                                               \
            rc = buf_printf(b, __VA_ARGS__);                                                       \
    } while (0)

static int counter(struct buf *b, const char *name, const char *help, long v)
{
    return buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %ld\n", name, help, name, name, v);
}

static void count_phase(void *ud, const char *key, const void *job)
{
    long *phases = ud;
    const json_t *st = json_object_get(job, "status");

    phases[tj_phase_parse(json_string_value(json_object_get(st, "phase")))]++;
}

static int render_controller(struct buf *b, struct exec_shared *sh)
{
    static const char *const rnames[5] = {"trainingjobs", "pods", "services", "configmaps",
                                          "secrets"};
    struct informer *infs[5] = {sh->jobs, sh->pods, sh->services, sh->configmaps, sh->secrets};
    struct watch_stats ws[5];
    const struct exec_stats *s = &sh->stats;
    long cum = 0, phases[TJ_PHASE_SUSPENDED + 1] = {0};
    int rc = 0;

    P("# HELP gantry_operator_reconcile_duration_seconds Time of one reconcile of a TrainingJob "
      "(read caches, decide, write).\n# TYPE gantry_operator_reconcile_duration_seconds "
      "histogram\n");
    for (int k = 0; k < EXEC_SYNC_BUCKETS; k++) {
        cum += atomic_load(&s->sync_bucket[k]);
        P("gantry_operator_reconcile_duration_seconds_bucket{le=\"%g\"} %ld\n",
          exec_sync_bounds[k], cum);
    }
    cum += atomic_load(&s->sync_bucket[EXEC_SYNC_BUCKETS]);
    P("gantry_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} %ld\n", cum);
    P("gantry_operator_reconcile_duration_seconds_sum %.6f\n",
      (double)atomic_load(&s->sync_usec_sum) * 1e-6);
    P("gantry_operator_reconcile_duration_seconds_count %ld\n", cum);
    if (rc == 0)
        rc = counter(b, "gantry_operator_reconciles_total", "Reconciles run.", s->syncs);
    if (rc == 0)
        rc = counter(b, "gantry_operator_reconcile_errors_total",
                     "Reconciles that ended in an error (requeued with backoff).",
                     s->sync_errors);
    if (rc == 0)
        rc = counter(b, "gantry_operator_gang_restarts_total",
                     "Whole-gang restarts (worker failures, disruptions and stalls).",
                     s->gang_restarts);
    if (rc == 0)
        rc = counter(b, "gantry_operator_gang_disruptions_total",
                     "Of the gang restarts, those after a worker was disrupted (DisruptionTarget: "
                     "an eviction, a preemption), not counted against backoffLimit.",
                     s->gang_disruptions);
    if (rc == 0)
        rc = counter(b, "gantry_operator_gang_resizes_total",
                     "Elastic jobs' gangs stopped to start again at another size.",
                     s->gang_resizes);
    if (rc == 0)
        rc = counter(b, "gantry_operator_pods_created_total", "Pods created.", s->pods_created);
    if (rc == 0)
        rc = counter(b, "gantry_operator_pods_deleted_total", "Pods deleted.", s->pods_deleted);
    if (rc == 0)
        rc = counter(b, "gantry_operator_status_writes_total", "TrainingJob status writes.",
                     s->status_writes);
    if (rc == 0)
        rc = counter(b, "gantry_operator_status_conflicts_total",
                     "Status writes refused with 409 (stale read; retried).", s->conflicts);
    if (rc == 0)
        rc = counter(b, "gantry_operator_events_total", "Events recorded.", s->events);
    P("# HELP gantry_operator_workqueue_depth Keys waiting in the work queue.\n"
      "# TYPE gantry_operator_workqueue_depth gauge\ngantry_operator_workqueue_depth %zu\n",
      sh->queue ? queue_len(sh->queue) : (size_t)0);

    for (int k = 0; k < 5; k++) {
        memset(&ws[k], 0, sizeof(ws[k]));
        if (infs[k])
            informer_get_stats(infs[k], &ws[k]);
    }
    P("# HELP gantry_operator_watch_restarts_total Watches restarted (timeout, dropped "
      "connection, 410 Gone).\n# TYPE gantry_operator_watch_restarts_total counter\n");
    for (int k = 0; k < 5; k++)
        P("gantry_operator_watch_restarts_total{resource=\"%s\"} %ld\n", rnames[k],
          ws[k].reconnects);
    P("# HELP gantry_operator_watch_relists_total Full relists after the watch's "
      "resourceVersion expired (410 Gone).\n# TYPE gantry_operator_watch_relists_total "
      "counter\n");
    for (int k = 0; k < 5; k++)
        P("gantry_operator_watch_relists_total{resource=\"%s\"} %ld\n", rnames[k],
          ws[k].relists);
    P("# HELP gantry_operator_watch_events_total Watch events received.\n"
      "# TYPE gantry_operator_watch_events_total counter\n");
    for (int k = 0; k < 5; k++)
        P("gantry_operator_watch_events_total{resource=\"%s\"} %ld\n", rnames[k], ws[k].events);
    P("# HELP gantry_operator_cache_objects Objects in each informer cache.\n"
      "# TYPE gantry_operator_cache_objects gauge\n");
    for (int k = 0; k < 5; k++)
        P("gantry_operator_cache_objects{resource=\"%s\"} %zu\n", rnames[k],
          infs[k] ? informer_len(infs[k]) : (size_t)0);

    if (sh->jobs) /* one job at a time: the cache keeps jobs as compact text */
        informer_each(sh->jobs, count_phase, phases);
    P("# HELP gantry_operator_trainingjobs TrainingJobs in the cache by status.phase.\n"
      "# TYPE gantry_operator_trainingjobs gauge\n");
    for (int k = 0; k <= TJ_PHASE_SUSPENDED; k++)
        P("gantry_operator_trainingjobs{phase=\"%s\"} %ld\n",
          k == TJ_PHASE_NONE ? "None" : tj_phase_str((enum tj_phase)k), phases[k]);
    if (sh->progress) {
        const struct progress_stats *ps = progress_get_stats(sh->progress);
        if (rc == 0)
            rc = counter(b, "gantry_operator_progress_reads_total",
                         "Reads of rank 0's /progress.", ps->reads);
        if (rc == 0)
            rc = counter(b, "gantry_operator_progress_read_errors_total",
                         "Reads of rank 0's /progress that failed or timed out.",
                         ps->read_errors);
    }
    return rc;
}

static int render_metrics(struct ops *o, struct buf *b)
{
    const char *why;
    int rc = 0;

    pthread_mutex_lock(&o->mu); /* held while reading the controller: it is not freed under us */
    P("# HELP gantry_operator_leader 1 while this process holds the Lease (or runs without "
      "leader election).\n# TYPE gantry_operator_leader gauge\ngantry_operator_leader %d\n",
      o->leading ? 1 : 0);
    P("# HELP gantry_operator_ready 1 when /readyz answers 200.\n"
      "# TYPE gantry_operator_ready gauge\ngantry_operator_ready %d\n",
      ready_locked(o, &why) ? 1 : 0);
    if (rc == 0 && o->sh)
        rc = render_controller(b, o->sh);
    pthread_mutex_unlock(&o->mu);
    {
        struct mallinfo2 mi = mallinfo2(); /* all arenas */
        P("# HELP gantry_operator_heap_bytes Bytes of the malloc heap in use (RSS minus this is "
          "code, stacks and free heap not yet returned).\n# TYPE gantry_operator_heap_bytes "
          "gauge\ngantry_operator_heap_bytes %zu\n", mi.uordblks + mi.hblkhd);
    }
    P("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
      "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %ld\n",
      rss_bytes());
    return rc;
}
#undef P

/* ---- HTTP ---- */

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    struct ops *o = cls;
    const char *text = "text/plain; charset=utf-8", *type = text, *why = "";
    unsigned status = MHD_HTTP_OK;
    struct buf body;
    int rc = 0;
    enum MHD_Result r;

    buf_init(&body, OPS_MAX_BODY);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        rc = buf_puts(&body, "only GET and HEAD\n");
    } else if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0) {
        rc = buf_puts(&body, "ok\n");
    } else if (strcmp(url, "/readyz") == 0) {
        bool ok;
        pthread_mutex_lock(&o->mu);
        ok = ready_locked(o, &why);
        pthread_mutex_unlock(&o->mu);
        status = ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        rc = buf_printf(&body, "%s: %s\n", ok ? "ok" : "not ready", why);
    } else if (strcmp(url, "/metrics") == 0) {
        type = "text/plain; version=0.0.4; charset=utf-8";
        rc = render_metrics(o, &body);
    } else {
        status = MHD_HTTP_NOT_FOUND;
        rc = buf_puts(&body, "not found; try /healthz, /readyz or /metrics\n");
    }
    if (rc) {
        buf_reset(&body);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = text;
        rc = buf_puts(&body, "response too large\n");
    }
    r = httpd_reply(conn, status, type, &body);
    buf_cleanup(&body);
    return r;
}

static int start(struct ops *o, int which, const char *addr, const char *what)
{
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;
    char host[64];
    int port;

    if (ops_parse_addr(addr, host, sizeof(host), &port) != 0) {
        log_error("Bad listen address", "{s:s, s:s, s:s}", "server", what, "address", addr,
                  "hint", "give [IPv4]:PORT, e.g. :8081 or 127.0.0.1:0");
        return OP_ECONFIG;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &sa.sin_addr);
    o->d[which] = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL, NULL, handle, o,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!o->d[which]) {
        log_error("Could not listen", "{s:s, s:s, s:s}", "server", what, "address", addr, "hint",
                  "is the port in use?");
        return OP_ECONFIG;
    }
    info = MHD_get_daemon_info(o->d[which], MHD_DAEMON_INFO_BIND_PORT);
    o->port[which] = info ? info->port : port;
    log_info("Serving", "{s:s, s:s, s:i}", "server", what, "address", addr, "port",
             o->port[which]);
    return 0;
}

int ops_serve(struct ops *o, const char *health_addr, const char *metrics_addr)
{
    bool h = health_addr && *health_addr, m = metrics_addr && *metrics_addr;
    int rc = 0;

    char host[64];
    int port = 0;

    /* The same fixed address: one server answers all paths ("...:0" means two ephemeral ones). */
    if (h && m && strcmp(health_addr, metrics_addr) == 0 &&
        ops_parse_addr(health_addr, host, sizeof(host), &port) == 0 && port != 0) {
        rc = start(o, 0, health_addr, "health+metrics");
        o->port[1] = o->port[0];
        return rc;
    }
    if (h)
        rc = start(o, 0, health_addr, "health");
    if (rc == 0 && m)
        rc = start(o, 1, metrics_addr, "metrics");
    return rc;
}

int ops_port(const struct ops *o, int which)
{
    return which == 0 || which == 1 ? o->port[which] : 0;
}

void ops_set_leading(struct ops *o, bool leading)
{
    pthread_mutex_lock(&o->mu);
    o->leading = leading;
    pthread_mutex_unlock(&o->mu);
}

void ops_set_standby(struct ops *o, bool standby)
{
    pthread_mutex_lock(&o->mu);
    o->standby = standby;
    pthread_mutex_unlock(&o->mu);
}

void ops_set_stopping(struct ops *o)
{
    pthread_mutex_lock(&o->mu);
    o->stopping = true;
    pthread_mutex_unlock(&o->mu);
}

void ops_set_controller(struct ops *o, struct exec_shared *sh)
{
    pthread_mutex_lock(&o->mu);
    o->sh = sh;
    pthread_mutex_unlock(&o->mu);
}

void ops_free(struct ops *o)
{
    if (!o)
        return;
    for (int k = 0; k < 2; k++)
        if (o->d[k])
            MHD_stop_daemon(o->d[k]);
    pthread_mutex_destroy(&o->mu);
    free(o);
}
