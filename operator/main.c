/*
 * gantry-operator: runs TrainingJobs (DESIGN.md §3).
 *
 * Reads top to bottom: configuration (flags > env > defaults), the Kubernetes config (kubeconfig
 * or in-cluster), a check that the CRD is served, informers on TrainingJobs and on the pods,
 * services, configmaps and secrets labelled gantry.dev/job-name, the work queue and its workers
 * (exec.h: reconcile + executor), then waits for SIGTERM/SIGINT and shuts down in order: stop
 * taking work, let in-flight syncs finish, stop the watches.
 *
 * Not here yet (later issues): leader election (run one replica), /healthz /readyz /metrics.
 * Exits only at startup, on bad configuration (64 usage, 78 config, 69 API unavailable).
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "operator/exec.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/log.h"

#define VERSION "0.1.0"
#define CHILD_SELECTOR RENDER_LABEL_JOB /* label exists */

struct opts {
    const char *kubeconfig, *context, *ns, *log_level;
    int workers;
    double qps;
    int burst;
    long sync_timeout_s;
};

static void usage(FILE *f, const struct opts *d)
{
    fprintf(f,
            "Usage: gantry-operator [options]\n"
            "Runs TrainingJobs (gantry.dev/v1alpha1): watches them and their pods, services,\n"
            "configmaps and secrets, and reconciles each job (gang restarts, backoff, suspend,\n"
            "deadlines, TTL). Every option also reads an environment variable; flags win.\n\n"
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
            "  -h, --help            this text\n"
            "      --version         print the version\n",
            d->workers, d->qps, d->burst, d->sync_timeout_s, d->log_level);
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
        {"help", no_argument, 0, 'h'},             {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    const struct opts defaults = *o;
    const char *workers = getenv("GANTRY_WORKERS"), *qps = getenv("GANTRY_QPS");
    const char *burst = getenv("GANTRY_BURST"), *sync = getenv("GANTRY_SYNC_TIMEOUT");
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
    if (sync && parse_long("--sync-timeout", sync, 1, 3600, &o->sync_timeout_s))
        return 64;
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
    }
    return NULL;
}

static struct informer *start_informer(const struct kube_config *cfg,
                                       const struct kube_client_opts *copts, const char *api,
                                       const char *resource, const char *ns, const char *selector,
                                       const char *const *fields, const struct informer_handlers *h)
{
    struct informer_opts io = {0};
    static char paths[5][KUBE_MAX_PATH]; /* main thread only, at startup */
    static int np;
    struct informer *inf;

    if (kube_path(paths[np], sizeof(paths[np]), api, resource, ns && *ns ? ns : NULL, NULL,
                  NULL) != 0)
        return NULL;
    io.watch.path = paths[np++];
    io.watch.label_selector = selector;
    io.fields = fields;
    inf = informer_new(cfg, copts, &io, h);
    if (informer_start(inf) != 0) {
        informer_free(inf);
        return NULL;
    }
    return inf;
}

int main(int argc, char **argv)
{
    struct opts o = {.ns = "", .log_level = "info", .workers = 4, .qps = 50, .burst = 100,
                     .sync_timeout_s = 60};
    struct kube_config *cfg = NULL;
    struct kube_client *kc = NULL;
    struct exec_shared sh = {0};
    struct worker *workers = NULL;
    struct informer **infs[5] = {&sh.jobs, &sh.pods, &sh.services, &sh.configmaps, &sh.secrets};
    char err[1024];
    enum log_level lvl;
    sigset_t sigs;
    json_t *probe = NULL;
    int rc, sig, exit_code = 0;

    rc = load_opts(argc, argv, &o);
    if (rc)
        return rc;
    if (log_parse_level(o.log_level, &lvl) != 0) {
        fprintf(stderr, "gantry-operator: --log-level: '%s' is not debug, info, warn or error\n",
                o.log_level);
        return 64;
    }
    log_set_level(lvl);
    if (kube_config_load(o.kubeconfig, o.context, &cfg, err, sizeof(err)) != 0) {
        log_error("Could not load Kubernetes config", "{s:s}", "error", err);
        return 78;
    }
    struct kube_client_opts copts = {.qps = o.qps, .burst = o.burst,
                                     .user_agent = "gantry-operator/" VERSION};
    log_info("Starting gantry-operator", "{s:s, s:s, s:s, s:s, s:i, s:f, s:i}", "version", VERSION,
             "server", cfg->server, "context", cfg->context ? cfg->context : "",
             "namespace", *o.ns ? o.ns : "(all)", "workers", o.workers, "qps", o.qps, "burst",
             o.burst);

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

    /* Block the signals in every thread; main waits for them with sigwait(). */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    sh.queue = queue_new(0, 0);
    sh.expect = exec_expect_new();
    struct informer_handlers hjob = {exec_on_job, exec_on_job_update, exec_on_job, &sh};
    struct informer_handlers hpod = {exec_on_pod_add, exec_on_child_update, exec_on_pod_delete,
                                     &sh};
    struct informer_handlers hchild = {exec_on_child, exec_on_child_update, exec_on_child, &sh};
    sh.jobs = start_informer(cfg, &copts, TJ_API_VERSION, "trainingjobs", o.ns, NULL, NULL, &hjob);
    sh.pods = start_informer(cfg, &copts, "v1", "pods", o.ns, CHILD_SELECTOR, exec_pod_fields,
                             &hpod);
    sh.services = start_informer(cfg, &copts, "v1", "services", o.ns, CHILD_SELECTOR,
                                 exec_child_fields, &hchild);
    sh.configmaps = start_informer(cfg, &copts, "v1", "configmaps", o.ns, CHILD_SELECTOR,
                                   exec_configmap_fields, &hchild);
    sh.secrets = start_informer(cfg, &copts, "v1", "secrets", o.ns, CHILD_SELECTOR,
                                exec_child_fields, &hchild);
    for (int i = 0; i < 5; i++) {
        if (!*infs[i] || informer_wait_synced(*infs[i], o.sync_timeout_s * 1000) != 0) {
            log_error("Informer did not sync", "{s:i, s:i, s:s}", "informer", i, "timeout_s",
                      (int)o.sync_timeout_s, "hint", "check RBAC (list/watch on trainingjobs, "
                      "pods, services, configmaps, secrets) and the API server");
            exit_code = 69;
            goto stop;
        }
    }
    log_info("Caches synced", "{s:i}", "trainingjobs", (int)informer_len(sh.jobs));

    workers = xcalloc((size_t)o.workers, sizeof(*workers));
    for (int i = 0; i < o.workers; i++) {
        workers[i].ew.sh = &sh;
        workers[i].ew.kc = kube_client_new(cfg, &copts);
        pthread_create(&workers[i].th, NULL, work, &workers[i]);
    }

    sigwait(&sigs, &sig);
    log_info("Shutting down", "{s:s}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");

    queue_shutdown(sh.queue); /* workers finish the key in hand, then return */
    for (int i = 0; i < o.workers; i++) {
        pthread_join(workers[i].th, NULL);
        kube_client_free(workers[i].ew.kc);
    }
    free(workers);
stop:
    queue_shutdown(sh.queue);
    for (int i = 0; i < 5; i++)
        if (*infs[i])
            informer_stop(*infs[i]);
    log_info("Stopped", "{s:i, s:i, s:i, s:i, s:i, s:i}", "syncs", (int)sh.stats.syncs,
             "sync_errors", (int)sh.stats.sync_errors, "status_writes",
             (int)sh.stats.status_writes, "pods_created", (int)sh.stats.pods_created,
             "pods_deleted", (int)sh.stats.pods_deleted, "gang_restarts",
             (int)sh.stats.gang_restarts);
    for (int i = 0; i < 5; i++)
        informer_free(*infs[i]);
    queue_free(sh.queue);
    exec_expect_free(sh.expect);
out:
    kube_client_free(kc);
    kube_config_free(cfg);
    return exit_code;
}
