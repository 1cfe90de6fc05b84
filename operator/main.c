/*
 * gantry-operator: runs TrainingJobs (DESIGN.md §3).
 *
 * Reads top to bottom: configuration (flags > env > defaults), the Kubernetes config (kubeconfig
 * or in-cluster), a check that the CRD is served, leader election on a Lease (only the leader
 * acts; standbys wait), then the controller: informers on TrainingJobs and on the pods,
 * services, configmaps and secrets labelled gantry.dev/job-name, the work queue and its workers
 * (exec.h: reconcile + executor). SIGTERM/SIGINT shut down in order: stop taking work, let
 * in-flight syncs finish, stop the watches, release the Lease so a standby takes over at once.
 * Losing the Lease stops the controller and exits 1, so the restarted process comes back as a
 * standby and two leaders never act together.
 *
 * Also: /healthz /readyz /metrics (ops.h) on --health-addr / --metrics-addr, and the progress
 * poller (progress.h) that reads rank 0's /progress for status.progress and hang detection.
 * Exits otherwise only at startup, on bad configuration (64 usage, 78 config, 69 API unavailable).
 */
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "operator/exec.h"
#include "operator/ops.h"
#include "operator/progress.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/lease.h"
#include "operator/kube/log.h"

#define VERSION "0.1.0"
#define CHILD_SELECTOR RENDER_LABEL_JOB /* label exists */

struct opts {
    const char *kubeconfig, *context, *ns, *log_level;
    const char *leader_elect, *lease_ns, *lease_name, *http2;
    long lease_duration_s, renew_deadline_s, retry_period_s;
    int workers;
    double qps;
    int burst;
    long sync_timeout_s;
    const char *health_addr, *metrics_addr, *progress_url;
    long progress_interval_s;
};

static void usage(FILE *f, const struct opts *d)
{
    fprintf(f,
            "Usage: gantry-operator [options]\n"
            "Runs TrainingJobs (gantry.dev/v1alpha1): watches them and their pods, services,\n"
            "configmaps and secrets, and reconciles each job (gang restarts, backoff, suspend,\n"
            "deadlines, TTL). A job labelled kueue.x-k8s.io/queue-name waits for Kueue to admit\n"
            "it (its Workloads are watched where Kueue runs). A job with spec.elasticPolicy is\n"
            "resized (gang stopped, resumed at the new size) when its replicas change.\n"
            "Every option also reads an environment variable; flags win.\n\n"
            "  --kubeconfig PATH     GANTRY_KUBECONFIG  kubeconfig (else $KUBECONFIG, in-cluster,\n"
            "                                           ~/.kube/config)\n"
            "  --context NAME        GANTRY_CONTEXT     kubeconfig context (default: current)\n"
            "  --namespace NS        GANTRY_NAMESPACE   watch one namespace (default: all)\n"
            "  --workers N           GANTRY_WORKERS     concurrent reconciles (default %d)\n"
            "  --qps X               GANTRY_QPS         API requests/s per worker (default %g)\n"
            "  --burst N             GANTRY_BURST       request burst per worker (default %d)\n"
            "  --sync-timeout S      GANTRY_SYNC_TIMEOUT  seconds to wait for the first lists\n"
            "                                           (default %ld)\n"
            "  --log-level L         GANTRY_LOG_LEVEL   debug|info|warn|error (default %s)\n"
            "  --leader-elect B      GANTRY_LEADER_ELECT  true|false: act only while holding the\n"
            "                                           Lease (default %s)\n"
            "  --lease-namespace NS  GANTRY_LEASE_NAMESPACE  (default: --namespace, else the\n"
            "                                           kubeconfig's namespace)\n"
            "  --lease-name NAME     GANTRY_LEASE_NAME  (default %s)\n"
            "  --lease-duration S    GANTRY_LEASE_DURATION  a dead leader's Lease expires after\n"
            "                                           S seconds (default %ld)\n"
            "  --renew-deadline S    GANTRY_RENEW_DEADLINE  the leader gives up after S seconds\n"
            "                                           without a renewal (default %ld)\n"
            "  --retry-period S      GANTRY_RETRY_PERIOD  seconds between attempts (default %ld)\n"
            "  --health-addr A       GANTRY_HEALTH_ADDR  serve /healthz and /readyz on [IPv4]:PORT,\n"
            "                                           e.g. :8081 (default: off)\n"
            "  --metrics-addr A      GANTRY_METRICS_ADDR  serve /metrics (Prometheus) on\n"
            "                                           [IPv4]:PORT, e.g. :8080 (default: off; may\n"
            "                                           equal --health-addr)\n"
            "  --progress-interval S GANTRY_PROGRESS_INTERVAL  seconds between reads of rank 0's\n"
            "                                           /progress (default %ld)\n"
            "  --http2 B             GANTRY_HTTP2       true|false: HTTP/2 to the API server\n"
            "                                           instead of HTTP/1.1 (default %s; each\n"
            "                                           connection carries one request or watch,\n"
            "                                           so HTTP/2 only adds ~90 KiB per connection)\n"
            "  --progress-url-template T  GANTRY_PROGRESS_URL_TEMPLATE  where rank 0's progress\n"
            "                                           is read; {ip} {port} {ns} {job} {pod} are\n"
            "                                           replaced (default %s; tests\n"
            "                                           point it at a fake server)\n"
            "  -h, --help            this text\n"
            "      --version         print the version\n",
            d->workers, d->qps, d->burst, d->sync_timeout_s, d->log_level, d->leader_elect,
            d->lease_name, d->lease_duration_s, d->renew_deadline_s, d->retry_period_s,
            d->progress_interval_s, d->http2, PROGRESS_DEFAULT_URL);
}

static int parse_long(const char *name, const char *s, long min, long max, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (!*s || *end || v < min || v > max) {
        fprintf(stderr, "gantry-operator: %s: '%s' is not a number in [%ld, %ld]\n", name, s, min,
                max);
        return -1;
    }
    *out = v;
    return 0;
}

/* Env first, then flags over it: flags > env > defaults. Returns 0, or an exit code. */
static int load_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"kubeconfig", required_argument, 0, 'k'}, {"context", required_argument, 0, 'c'},
        {"namespace", required_argument, 0, 'n'},  {"workers", required_argument, 0, 'w'},
        {"qps", required_argument, 0, 'q'},        {"burst", required_argument, 0, 'b'},
        {"sync-timeout", required_argument, 0, 's'}, {"log-level", required_argument, 0, 'l'},
        {"leader-elect", required_argument, 0, 'L'}, {"lease-namespace", required_argument, 0, 'N'},
        {"lease-name", required_argument, 0, 'M'}, {"lease-duration", required_argument, 0, 'D'},
        {"renew-deadline", required_argument, 0, 'R'}, {"retry-period", required_argument, 0, 'P'},
        {"health-addr", required_argument, 0, 'H'}, {"metrics-addr", required_argument, 0, 'm'},
        {"progress-interval", required_argument, 0, 'I'},
        {"progress-url-template", required_argument, 0, 'U'},
        {"http2", required_argument, 0, '2'},
        {"help", no_argument, 0, 'h'},             {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    const struct opts defaults = *o;
    const char *workers = getenv("GANTRY_WORKERS"), *qps = getenv("GANTRY_QPS");
    const char *burst = getenv("GANTRY_BURST"), *sync = getenv("GANTRY_SYNC_TIMEOUT");
    const char *ldur = getenv("GANTRY_LEASE_DURATION"), *lren = getenv("GANTRY_RENEW_DEADLINE");
    const char *lret = getenv("GANTRY_RETRY_PERIOD");
    const char *pint = getenv("GANTRY_PROGRESS_INTERVAL");
    long v;
    int c;

    if (getenv("GANTRY_KUBECONFIG"))
        o->kubeconfig = getenv("GANTRY_KUBECONFIG");
    if (getenv("GANTRY_CONTEXT"))
        o->context = getenv("GANTRY_CONTEXT");
    if (getenv("GANTRY_NAMESPACE"))
        o->ns = getenv("GANTRY_NAMESPACE");
    if (getenv("GANTRY_LOG_LEVEL"))
        o->log_level = getenv("GANTRY_LOG_LEVEL");
    if (getenv("GANTRY_LEADER_ELECT"))
        o->leader_elect = getenv("GANTRY_LEADER_ELECT");
    if (getenv("GANTRY_LEASE_NAMESPACE"))
        o->lease_ns = getenv("GANTRY_LEASE_NAMESPACE");
    if (getenv("GANTRY_LEASE_NAME"))
        o->lease_name = getenv("GANTRY_LEASE_NAME");
    if (getenv("GANTRY_HEALTH_ADDR"))
        o->health_addr = getenv("GANTRY_HEALTH_ADDR");
    if (getenv("GANTRY_METRICS_ADDR"))
        o->metrics_addr = getenv("GANTRY_METRICS_ADDR");
    if (getenv("GANTRY_HTTP2"))
        o->http2 = getenv("GANTRY_HTTP2");
    if (getenv("GANTRY_PROGRESS_URL_TEMPLATE"))
        o->progress_url = getenv("GANTRY_PROGRESS_URL_TEMPLATE");
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'k': o->kubeconfig = optarg; break;
        case 'c': o->context = optarg; break;
        case 'n': o->ns = optarg; break;
        case 'w': workers = optarg; break;
        case 'q': qps = optarg; break;
        case 'b': burst = optarg; break;
        case 's': sync = optarg; break;
        case 'l': o->log_level = optarg; break;
        case 'L': o->leader_elect = optarg; break;
        case 'N': o->lease_ns = optarg; break;
        case 'M': o->lease_name = optarg; break;
        case 'D': ldur = optarg; break;
        case 'R': lren = optarg; break;
        case 'P': lret = optarg; break;
        case 'H': o->health_addr = optarg; break;
        case 'm': o->metrics_addr = optarg; break;
        case 'I': pint = optarg; break;
        case 'U': o->progress_url = optarg; break;
        case '2': o->http2 = optarg; break;
        case 'h': usage(stdout, &defaults); exit(0);
        case 'V': printf("gantry-operator %s\n", VERSION); exit(0);
        default: usage(stderr, &defaults); return 64;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gantry-operator: unexpected argument '%s' (try --help)\n", argv[optind]);
        return 64;
    }
    if (workers) {
        if (parse_long("--workers", workers, 1, 256, &v))
            return 64;
        o->workers = (int)v;
    }
    if (burst) {
        if (parse_long("--burst", burst, 1, 100000, &v))
            return 64;
        o->burst = (int)v;
    }
    if (strcmp(o->leader_elect, "true") != 0 && strcmp(o->leader_elect, "false") != 0) {
        fprintf(stderr, "gantry-operator: --leader-elect: '%s' must be true or false\n",
                o->leader_elect);
        return 64;
    }
    if (strcmp(o->http2, "true") != 0 && strcmp(o->http2, "false") != 0) {
        fprintf(stderr, "gantry-operator: --http2: '%s' must be true or false\n", o->http2);
        return 64;
    }
    if ((ldur && parse_long("--lease-duration", ldur, 1, 3600, &o->lease_duration_s)) ||
        (lren && parse_long("--renew-deadline", lren, 1, 3600, &o->renew_deadline_s)) ||
        (lret && parse_long("--retry-period", lret, 1, 3600, &o->retry_period_s)))
        return 64;
    if (!(o->retry_period_s < o->renew_deadline_s && o->renew_deadline_s < o->lease_duration_s)) {
        fprintf(stderr, "gantry-operator: need --retry-period (%ld) < --renew-deadline (%ld) < "
                        "--lease-duration (%ld)\n", o->retry_period_s, o->renew_deadline_s,
                o->lease_duration_s);
        return 64;
    }
    if (sync && parse_long("--sync-timeout", sync, 1, 3600, &o->sync_timeout_s))
        return 64;
    if (pint && parse_long("--progress-interval", pint, 1, 3600, &o->progress_interval_s))
        return 64;
    if (o->progress_url) {
        char probe[PROGRESS_URL_MAX];
        if (progress_url(o->progress_url, "ns", "job", "pod", "10.0.0.1", 9090, probe,
                         sizeof(probe)) != 0) {
            fprintf(stderr, "gantry-operator: --progress-url-template: '%s' has an unknown {...} "
                            "or is too long\n", o->progress_url);
            return 64;
        }
    }
    if (qps) {
        char *end;
        o->qps = strtod(qps, &end);
        if (!*qps || *end || !(o->qps > 0)) {
            fprintf(stderr, "gantry-operator: --qps: '%s' must be a number > 0\n", qps);
            return 64;
        }
    }
    return 0;
}

struct worker {
    pthread_t th;
    struct exec_worker ew;
};

/* The running controller: informers, queue, workers. */
struct controller {
    struct exec_shared sh;
    struct ops *ops;
    struct worker *workers;
    int nworkers;
};

/* When a burst of work (creates, status writes, Events) has drained the queue, hand the heap it
 * churned through back to the system at once (at most every 2 s), not at the next 30 s trim. */
static void trim_when_idle(struct queue *q)
{
    static atomic_long last; /* CLOCK_MONOTONIC seconds of the last trim */
    struct timespec now;
    long prev;

    if (queue_len(q) != 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    prev = atomic_load(&last);
    if (now.tv_sec - prev >= 2 && atomic_compare_exchange_strong(&last, &prev, (long)now.tv_sec))
        malloc_trim(0);
}

static void *work(void *arg)
{
    struct worker *wk = arg;
    struct queue *q = wk->ew.sh->queue;
    char *key;

    while (queue_get(q, &key, -1) == 0) {
        int rc = exec_sync(&wk->ew, key);
        if (rc) {
            long ms = queue_add_rate_limited(q, key);
            log_warn("Requeued TrainingJob", "{s:s, s:s, s:i}", "trainjob", key, "error",
                     op_strerror(rc), "after_ms", (int)ms);
        } else {
            queue_forget(q, key);
        }
        queue_done(q, key);
        free(key);
        if (queue_len(q) == 0) /* a burst is over: its parallel-create connections would idle */
            exec_worker_cleanup(&wk->ew);
        trim_when_idle(q);
    }
    return NULL;
}

static struct informer *start_informer(const struct kube_config *cfg,
                                       const struct kube_client_opts *copts, const char *api,
                                       const char *resource, const char *ns, const char *selector,
                                       const char *const *fields, const struct informer_handlers *h,
                                       const struct informer_transform *tr,
                                       const struct informer_rec_handlers *rh)
{
    /* Typed records for pods and children (~100-200 B each); TrainingJobs as compact text. */
    struct informer_opts io = {.compact = true};
    char path[KUBE_MAX_PATH];
    struct informer *inf;

    if (kube_path(path, sizeof(path), api, resource, ns && *ns ? ns : NULL, NULL, NULL) != 0)
        return NULL;
    io.watch.path = path; /* informer_new() copies the options */
    io.watch.label_selector = selector;
    io.fields = fields;
    io.transform = tr;
    io.rec_handlers = rh;
    inf = informer_new(cfg, copts, &io, h);
    if (informer_start(inf) != 0) {
        informer_free(inf);
        return NULL;
    }
    return inf;
}

static struct informer **informer_slot(struct controller *c, int i)
{
    struct informer **slots[6] = {&c->sh.jobs,       &c->sh.pods,    &c->sh.services,
                                  &c->sh.configmaps, &c->sh.secrets, &c->sh.workloads};
    return slots[i];
}

/* Starts informers, waits for their first lists, starts the workers. 0, or an exit code. */
static int controller_start(struct controller *c, const struct opts *o,
                            const struct kube_config *cfg, const struct kube_client_opts *copts)
{
    static const char *const names[5] = {"trainingjobs", "pods", "services", "configmaps",
                                          "secrets"};
    struct exec_shared *sh = &c->sh;
    struct informer_handlers hjob = {exec_on_job, exec_on_job_update, exec_on_job, sh};
    struct informer_rec_handlers hpod = {exec_on_pod_add, exec_on_pod_update, exec_on_pod_delete,
                                         sh};
    struct informer_rec_handlers hchild = {exec_on_child_rec, exec_on_child_rec_update,
                                           exec_on_child_rec, sh};
    const struct informer_transform *ctr = &exec_child_transform;

    sh->queue = queue_new(0, 0);
    sh->expect = exec_expect_new();
    sh->pod_index = exec_index_new();
    sh->jobs = start_informer(cfg, copts, TJ_API_VERSION, "trainingjobs", o->ns, NULL,
                              exec_job_fields, &hjob, NULL, NULL);
    sh->pods = start_informer(cfg, copts, "v1", "pods", o->ns, CHILD_SELECTOR, NULL, NULL,
                              &exec_pod_transform, &hpod);
    sh->services = start_informer(cfg, copts, "v1", "services", o->ns, CHILD_SELECTOR, NULL, NULL,
                                  ctr, &hchild);
    sh->configmaps = start_informer(cfg, copts, "v1", "configmaps", o->ns, CHILD_SELECTOR, NULL,
                                    NULL, ctr, &hchild);
    sh->secrets = start_informer(cfg, copts, "v1", "secrets", o->ns, CHILD_SELECTOR, NULL, NULL,
                                 ctr, &hchild);
    for (int i = 0; i < 5; i++) {
        struct informer *inf = *informer_slot(c, i);
        if (!inf || informer_wait_synced(inf, o->sync_timeout_s * 1000) != 0) {
            log_error("Informer did not sync", "{s:s, s:i, s:s}", "resource", names[i],
                      "timeout_s", (int)o->sync_timeout_s, "hint",
                      "check RBAC (list/watch on trainingjobs, pods, services, configmaps, "
                      "secrets) and the API server");
            return 69;
        }
    }
    log_info("Caches synced", "{s:i, s:i}", "trainingjobs", (int)informer_len(sh->jobs), "pods",
             (int)informer_len(sh->pods));
    sh->watch_ns = o->ns;
    sh->sync_timeout_s = o->sync_timeout_s;
    exec_kueue_start(sh, cfg, copts);
    struct progress_opts po = {.interval_ms = o->progress_interval_s * 1000,
                               .url_template = o->progress_url};
    sh->progress = progress_new(sh, &po);
    if (progress_start(sh->progress) != 0) {
        log_error("Could not start the progress poller", "{s:s}", "error", "pthread_create");
        return 70;
    }
    c->workers = xcalloc((size_t)o->workers, sizeof(*c->workers));
    for (int i = 0; i < o->workers; i++) {
        c->workers[i].ew.sh = sh;
        c->workers[i].ew.kc = kube_client_new(cfg, copts);
        c->workers[i].ew.cfg = cfg;
        c->workers[i].ew.copts = copts;
        pthread_create(&c->workers[i].th, NULL, work, &c->workers[i]);
        c->nworkers++;
    }
    ops_set_controller(c->ops, sh);
    return 0;
}

/* Stops taking work, lets in-flight syncs finish, stops the watches; safe on a partial start. */
static void controller_stop(struct controller *c)
{
    struct exec_shared *sh = &c->sh;

    ops_set_controller(c->ops, NULL); /* waits for a scrape in flight */
    if (sh->queue)
        queue_shutdown(sh->queue); /* workers finish the key in hand, then return */
    progress_stop(sh->progress);
    for (int i = 0; i < c->nworkers; i++) {
        pthread_join(c->workers[i].th, NULL);
        exec_worker_cleanup(&c->workers[i].ew);
        kube_client_free(c->workers[i].ew.kc);
    }
    free(c->workers);
    for (int i = 0; i < 6; i++) /* slot 5, Kueue's Workloads, may be NULL */
        if (*informer_slot(c, i))
            informer_stop(*informer_slot(c, i));
    log_info("Stopped", "{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "syncs", (int)sh->stats.syncs,
             "sync_errors", (int)sh->stats.sync_errors, "status_writes",
             (int)sh->stats.status_writes, "conflicts", (int)sh->stats.conflicts, "pods_created",
             (int)sh->stats.pods_created, "pods_deleted", (int)sh->stats.pods_deleted,
             "gang_restarts", (int)sh->stats.gang_restarts);
    for (int i = 0; i < 6; i++)
        if (*informer_slot(c, i))
            informer_free(*informer_slot(c, i));
    progress_free(sh->progress);
    queue_free(sh->queue);
    exec_expect_free(sh->expect);
    exec_index_free(sh->pod_index);
}

/* Lease callbacks run on the elector thread: they only signal the main thread. */
static pthread_t main_thread;
static void on_started_leading(void *ud)
{
    pthread_kill(main_thread, SIGUSR2);
}
static void on_stopped_leading(void *ud)
{
    pthread_kill(main_thread, SIGUSR1);
}

static void make_identity(char *out, size_t n)
{
    char host[64] = "gantry-operator";
    unsigned char r[4] = {0};

    gethostname(host, sizeof(host) - 1);
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r[0] = (unsigned char)getpid();
    snprintf(out, n, "%s_%02x%02x%02x%02x", host, r[0], r[1], r[2], r[3]);
}

int main(int argc, char **argv)
{
    struct opts o = {.ns = "", .log_level = "info", .leader_elect = "true",
                     .lease_name = "gantry-operator", .lease_duration_s = 15,
                     .renew_deadline_s = 10, .retry_period_s = 2, .workers = 4, .qps = 50, .burst = 100,
                     .sync_timeout_s = 60, .progress_interval_s = 15, .http2 = "false"};
    struct kube_config *cfg = NULL;
    struct kube_client *kc = NULL;
    struct lease_elector *elector = NULL;
    struct controller ctl = {0};
    char err[1024], identity[128];
    bool leading = false;
    enum log_level lvl;
    sigset_t sigs;
    json_t *probe = NULL;
    int rc, sig, exit_code = 0;

    /* A peer that closes a TLS connection must be an error code, not a dead process: libcurl
     * with CURLOPT_NOSIGNAL does not ignore SIGPIPE for us, and OpenSSL writes with write(2). */
    signal(SIGPIPE, SIG_IGN);
    /* A dozen threads would each get a glibc arena whose freed pages stay resident between
     * long-lived cache records; one arena keeps that slack small (10k pods: -0.7 MiB against
     * two), and the operator allocates little per request (tcache serves the hot paths). */
    if (!getenv("MALLOC_ARENA_MAX")) /* glibc's own tunable wins when set */
        mallopt(M_ARENA_MAX, 1);
    /* Fixed thresholds (glibc raises dynamic ones after the first large free): list pages and
     * other big transient buffers are always mmap()ed and given back on free(). */
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
    rc = load_opts(argc, argv, &o);
    if (rc)
        return rc;
    if (log_parse_level(o.log_level, &lvl) != 0) {
        fprintf(stderr, "gantry-operator: --log-level: '%s' is not debug, info, warn or error\n",
                o.log_level);
        return 64;
    }
    log_set_level(lvl);
    ctl.ops = ops_new(strcmp(o.leader_elect, "true") == 0);
    if (ops_serve(ctl.ops, o.health_addr, o.metrics_addr) != 0) {
        ops_free(ctl.ops);
        return 78;
    }
    if (kube_config_load(o.kubeconfig, o.context, &cfg, err, sizeof(err)) != 0) {
        log_error("Could not load Kubernetes config", "{s:s}", "error", err);
        return 78;
    }
    struct kube_client_opts copts = {.qps = o.qps, .burst = o.burst,
                                     .user_agent = "gantry-operator/" VERSION,
                                     .http2 = strcmp(o.http2, "true") == 0};
    make_identity(identity, sizeof(identity));
    if (!o.lease_ns)
        o.lease_ns = *o.ns ? o.ns : cfg->namespace;
    log_info("Starting gantry-operator", "{s:s, s:s, s:s, s:s, s:i, s:f, s:i, s:s, s:s}",
             "version", VERSION, "server", cfg->server, "context",
             cfg->context ? cfg->context : "", "namespace", *o.ns ? o.ns : "(all)", "workers",
             o.workers, "qps", o.qps, "burst", o.burst, "identity", identity, "leaderElect",
             o.leader_elect);

    /* The CRD must be served, or every list below would fail forever. */
    kc = kube_client_new(cfg, &copts);
    rc = kube_get(kc, "/apis/" TJ_API_VERSION, &probe);
    json_decref(probe);
    if (rc) {
        log_error("TrainingJob API is not served", "{s:s, s:s, s:s}", "error", op_strerror(rc),
                  "message", kube_last_status(kc)->message, "hint",
                  "install the CRD: kubectl apply -f manifests/crds/ (and check the server and "
                  "credentials)");
        exit_code = 69;
        goto out;
    }

    /* Block the signals in every thread (all are created below); main waits with sigwait(). */
    main_thread = pthread_self();
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1); /* leadership lost */
    sigaddset(&sigs, SIGUSR2); /* leadership acquired */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    ctl.sh.events = event_recorder_new(cfg, &copts, "gantry.dev/operator", identity);

    if (strcmp(o.leader_elect, "true") == 0) {
        struct lease_opts lo = {.namespace = o.lease_ns, .name = o.lease_name,
                                .identity = identity,
                                .lease_duration_ms = o.lease_duration_s * 1000,
                                .renew_deadline_ms = o.renew_deadline_s * 1000,
                                .retry_period_ms = o.retry_period_s * 1000,
                                .on_started = on_started_leading,
                                .on_stopped = on_stopped_leading};
        elector = lease_new(cfg, &copts, &lo);
        if (lease_start(elector) != 0) {
            log_error("Could not start leader election", "{s:s, s:s}", "lease", o.lease_name,
                      "namespace", o.lease_ns);
            exit_code = 69;
            goto out;
        }
        log_info("Waiting for leadership", "{s:s, s:s}", "lease", o.lease_name, "namespace",
                 o.lease_ns);
        ops_set_standby(ctl.ops, true);
    } else {
        pthread_kill(main_thread, SIGUSR2); /* no election: lead at once */
    }

    for (;;) {
        struct timespec trim_every = {.tv_sec = 30};
        sig = sigtimedwait(&sigs, NULL, &trim_every);
        if (sig < 0) { /* EAGAIN (timeout) or EINTR */
            if (leading)
                malloc_trim(0); /* churn (lists, relists, status writes) leaves free heap */
            continue;
        }
        if (sig == SIGUSR2 && !leading) {
            leading = true;
            ops_set_standby(ctl.ops, false);
            ops_set_leading(ctl.ops, true);
            log_info("Started leading", "{s:s}", "identity", identity);
            exit_code = controller_start(&ctl, &o, cfg, &copts);
            if (exit_code)
                break;
            /* The first lists parsed every object whole (pages of 500) before projecting them;
             * hand that transient heap back to the system: RSS is then the caches' size. */
            malloc_trim(0);
        } else if (sig == SIGUSR1 && leading) {
            log_error("Lost leadership; exiting so that the new leader acts alone", "{s:s}",
                      "identity", identity);
            /* at once, as controller-runtime does: a graceful stop would let the syncs in
             * flight (their creates, deletes and status writes, minutes with retries) go on
             * beside the new leader's */
            fflush(NULL);
            _exit(1);
        } else if (sig == SIGTERM || sig == SIGINT) {
            log_info("Shutting down", "{s:s}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            break;
        }
    }
    ops_set_stopping(ctl.ops);
    if (leading)
        controller_stop(&ctl);
    if (elector)
        lease_stop(elector, true); /* a standby takes over at once */
out:
    lease_free(elector);
    event_recorder_free(ctl.sh.events);
    kube_client_free(kc);
    kube_config_free(cfg);
    ops_free(ctl.ops);
    return exit_code;
}
