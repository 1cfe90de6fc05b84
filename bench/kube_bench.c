/*
 * kube_bench - the Kubernetes client's throughput and memory against a real API server.
 *
 *   kube_bench [--pods N] [--threads T] [--kubeconfig PATH] [--keep]
 *
 * In a fresh namespace: creates N pods (T clients in parallel), lists them (limit 500 pages),
 * watches them from the resourceVersion before they were created (the API server replays N
 * ADDED events from its watch cache), and fills an informer twice, with whole objects and with
 * the fields a controller reads, measuring heap bytes per cached pod (mallinfo2). If a kubectl
 * is found (PATH or ~/.cache/gantry/k8s-*), the same list through kubectl is timed in the same
 * run as the peer. Needs the API tier (hack/cluster.sh up --tier api); uses $KUBECONFIG.
 */
#include <getopt.h>
#include <glob.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "operator/kube/informer.h"
#include "operator/kube/kube.h"
#include "operator/kube/log.h"
#include "operator/kube/watch.h"

static struct kube_config *cfg;
static char ns[64];
static int npods = 10000, nthreads = 8;
static atomic_int next_pod, create_errors;

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *creator(void *arg)
{
    struct kube_client *kc =
        kube_client_new(cfg, &(struct kube_client_opts){.qps = 5000, .burst = 5000});
    char coll[256], name[64], idx[16];
    int i;

    if (kube_path(coll, sizeof(coll), "v1", "pods", ns, NULL, NULL))
        return NULL;
    while ((i = atomic_fetch_add(&next_pod, 1)) < npods) {
        snprintf(name, sizeof(name), "bench-worker-%05d", i);
        snprintf(idx, sizeof(idx), "%d", i);
        json_t *pod = json_pack(
            "{s:s, s:s, s:{s:s, s:{s:s, s:s}}, s:{s:[{s:s, s:s, s:[s, s], s:[{s:s, s:s}]}]}}",
            "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "labels",
            "gantry.dev/job-name", "bench", "gantry.dev/replica-index", idx, "spec", "containers",
            "name", "worker", "image", "gantry-worker:0.1.0", "command", "gantry-worker",
            "--config", "env", "name", "RANK", "value", idx);
        if (kube_create(kc, coll, pod, NULL))
            atomic_fetch_add(&create_errors, 1);
        json_decref(pod);
    }
    kube_client_free(kc);
    return NULL;
}

static atomic_long watched;
static int count_event(void *ud, enum kube_event t, json_t *obj)
{
    if (t == KUBE_EVENT_ADDED && atomic_fetch_add(&watched, 1) + 1 >= npods)
        return 1;
    return 0;
}

static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Heap bytes per cached pod for an informer keeping `fields` (NULL: whole objects). */
static double informer_bytes_per_pod(const char *coll, const char *const *fields, double *secs)
{
    struct informer_opts io = {.watch = {.path = coll, .timeout_s = 300}, .fields = fields};
    size_t before, after;
    double t0;

    malloc_trim(0);
    before = heap_used();
    t0 = mono();
    struct informer *inf = informer_new(cfg, NULL, &io, NULL);
    if (informer_start(inf) || informer_wait_synced(inf, 300000)) {
        informer_free(inf);
        return -1;
    }
    *secs = mono() - t0;
    /* The list's transient buffers are gone by now; what is left is the cache. */
    malloc_trim(0);
    after = heap_used();
    size_t n = informer_len(inf);
    informer_free(inf);
    return n ? (double)(after - before) / (double)n : -1;
}

static const char *find_kubectl(void)
{
    static char path[1024];
    glob_t g;
    const char *home = getenv("HOME");

    if (system("command -v kubectl >/dev/null 2>&1") == 0)
        return "kubectl";
    snprintf(path, sizeof(path), "%s/.cache/gantry/k8s-*/bin/kubectl", home ? home : "");
    if (glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
        snprintf(path, sizeof(path), "%s", g.gl_pathv[g.gl_pathc - 1]);
        globfree(&g);
        return path;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"pods", 1, 0, 'n'},       {"threads", 1, 0, 't'},
                                       {"kubeconfig", 1, 0, 'k'}, {"keep", 0, 0, 'K'},
                                       {"help", 0, 0, 'h'},       {0, 0, 0, 0}};
    static const char *const fields[] = {"metadata.labels",
                                         "metadata.ownerReferences",
                                         "metadata.deletionTimestamp",
                                         "spec.nodeName",
                                         "status.phase",
                                         "status.conditions",
                                         "status.containerStatuses",
                                         NULL};
    const char *kubeconfig = NULL, *kubectl;
    char err[1024], p[256], coll[256], *rv0 = NULL, *rv = NULL;
    bool keep = false;
    int c, rc;
    json_t *items = NULL, *o = NULL;

    while ((c = getopt_long(argc, argv, "n:t:k:Kh", lo, NULL)) != -1) {
        switch (c) {
        case 'n':
            npods = atoi(optarg);
            break;
        case 't':
            nthreads = atoi(optarg);
            break;
        case 'k':
            kubeconfig = optarg;
            break;
        case 'K':
            keep = true;
            break;
        default:
            printf("usage: kube_bench [--pods N (10000)] [--threads T (8)] [--kubeconfig PATH] "
                   "[--keep]\n");
            return c == 'h' ? 0 : 64;
        }
    }
    if (npods <= 0 || nthreads <= 0 || nthreads > 64) {
        fprintf(stderr, "kube_bench: --pods must be > 0 and --threads 1..64\n");
        return 64;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they are measured */
    log_set_level(LOG_LEVEL_WARN);
    if (kube_config_load(kubeconfig, NULL, &cfg, err, sizeof(err))) {
        fprintf(stderr, "kube_bench: %s\n", err);
        return 78;
    }
    struct kube_client *kc = kube_client_new(cfg, NULL);
    snprintf(ns, sizeof(ns), "kube-bench-%d", (int)getpid());
    json_t *nsobj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace",
                              "metadata", "name", ns);
    if ((rc = kube_path(p, sizeof(p), "v1", "namespaces", NULL, NULL, NULL)) ||
        (rc = kube_create(kc, p, nsobj, NULL))) {
        fprintf(stderr, "kube_bench: cannot create namespace %s: %s: %s\n", ns, op_strerror(rc),
                kube_last_status(kc)->message);
        return 1;
    }
    if (kube_path(p, sizeof(p), "v1", "serviceaccounts", ns, "default", NULL) ||
        kube_path(coll, sizeof(coll), "v1", "pods", ns, NULL, NULL))
        return 1;
    for (int i = 0; i < 300 && kube_get(kc, p, &o) == OP_ENOTFOUND; i++)
        usleep(100000); /* pods need the default ServiceAccount */
    json_decref(o);
    if (kube_list(kc, coll, NULL, &items, &rv0)) {
        fprintf(stderr, "kube_bench: list failed: %s\n", kube_last_status(kc)->message);
        return 1;
    }
    json_decref(items);

    printf("# kube_bench: %d pods in namespace %s, %d creating clients\n", npods, ns, nthreads);
    printf("%-34s %12s %12s %10s\n", "operation", "objects", "seconds", "objects/s");
    double t0 = mono();
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, creator, NULL);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    double tc = mono() - t0;
    printf("%-34s %12d %12.2f %10.0f\n", "create (POST, parallel)", npods, tc, npods / tc);
    if (atomic_load(&create_errors))
        printf("# %d creates failed\n", atomic_load(&create_errors));

    double best = 1e9;
    size_t nlisted = 0;
    for (int r = 0; r < 3; r++) {
        struct kube_list_opts lopt = {.limit = 500};
        t0 = mono();
        if (kube_list(kc, coll, &lopt, &items, &rv))
            break;
        double t = mono() - t0;
        nlisted = json_array_size(items);
        if (t < best)
            best = t;
        json_decref(items);
        free(rv);
    }
    printf("%-34s %12zu %12.3f %10.0f\n", "list (limit 500, best of 3)", nlisted, best,
           nlisted / best);

    kubectl = find_kubectl();
    if (kubectl) {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "%s --kubeconfig %s -n %s get pods -o json --chunk-size=500 "
                 ">/dev/null",
                 kubectl, cfg->source, ns);
        double kbest = 1e9;
        for (int r = 0; r < 3; r++) {
            t0 = mono();
            if (system(cmd) != 0)
                break;
            double t = mono() - t0;
            if (t < kbest)
                kbest = t;
        }
        if (kbest < 1e9)
            printf("%-34s %12zu %12.3f %10.0f   (gantry/kubectl: %.2fx)\n",
                   "peer: kubectl get -o json", nlisted, kbest, nlisted / kbest, kbest / best);
    }

    struct watch_opts wo = {.path = coll, .timeout_s = 300, .dead_after_s = 60};
    struct watch *w = watch_new(cfg, NULL, &wo, count_event, NULL);
    struct watch_stats st;
    watch_resume(w, rv0); /* replay every ADDED since before the creates */
    t0 = mono();
    (void)watch_run(w);
    double tw = mono() - t0;
    watch_get_stats(w, &st);
    printf("%-34s %12ld %12.3f %10.0f%s\n", "watch (replay of ADDED events)", atomic_load(&watched),
           tw, atomic_load(&watched) / tw, st.relists ? "   (410: served by a relist)" : "");
    watch_free(w);

    double ts_full = 0, ts_proj = 0;
    double full = informer_bytes_per_pod(coll, NULL, &ts_full);
    double proj = informer_bytes_per_pod(coll, fields, &ts_proj);
    printf("%-34s %12d %12.3f %10.0f\n", "informer sync (whole objects)", npods, ts_full,
           npods / ts_full);
    printf("%-34s %12d %12.3f %10.0f\n", "informer sync (projected)", npods, ts_proj,
           npods / ts_proj);
    printf("\n%-34s %12s\n", "memory per cached pod", "bytes");
    printf("%-34s %12.0f\n", "whole objects", full);
    printf("%-34s %12.0f   (%.1fx smaller)\n", "projected fields", proj, full / proj);

    if (!keep) {
        if (kube_path(p, sizeof(p), "v1", "namespaces", NULL, ns, NULL) == 0)
            (void)!kube_delete(kc, p, NULL, NULL);
    }
    json_decref(nsobj);
    free(rv0);
    kube_client_free(kc);
    kube_config_free(cfg);
    return 0;
}
