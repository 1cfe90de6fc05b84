/*
 * operator_rss - gantry-operator's resident memory with N tracked pods, on a real API server.
 *
 *   operator_rss --operator PATH [--pods N] [--threads T] [--kubeconfig PATH] [--keep]
 *
 * In a fresh namespace: starts the operator on the empty namespace and reads its RSS once its
 * caches synced and it idles (the baseline); stops it; creates N/4 TrainingJobs (4 replicas)
 * and their N pods exactly as the operator renders them (render_pod(), owner references), and
 * gives every pod the status a kubelet reports for a running container (conditions, IPs,
 * containerStatuses with image and container IDs), T clients in parallel; starts the operator
 * again and, once it has synced and written every job's status (work queue empty, reconciles >=
 * jobs, read from its /metrics), reads VmRSS and VmHWM from /proc. Prints the baseline, the RSS,
 * (RSS - baseline) / N per tracked pod and the targets (<= 2 KiB per pod, <= 20 MiB at
 * 10k pods). Needs the API tier (hack/cluster.sh up --tier api) with the CRD applied; uses
 * $KUBECONFIG. bench/operator_rss.sh wraps it (cluster, CRD, CSV).
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "operator/kube/kube.h"
#include "operator/kube/kube_config.h"
#include "operator/render.h"
#include "operator/tj.h"

static struct kube_config *cfg;
static char ns[64];
static int npods = 10000, nthreads = 8, njobs;
static atomic_int next_job, errors;

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* What a kubelet reports for a pod whose one container runs (sizes as on a real node). */
static json_t *kubelet_status(int i)
{
    char ip[32], cid[80], iid[128];
    const char *t = "2026-11-30T08:00:00Z";
    json_t *conds = json_array();
    static const char *const types[] = {"PodReadyToStartContainers", "Initialized", "Ready",
                                        "ContainersReady", "PodScheduled"};

    for (int k = 0; k < 5; k++)
        json_array_append_new(conds, json_pack("{s:s, s:s, s:n, s:s}", "type", types[k],
                                               "status", "True", "lastProbeTime",
                                               "lastTransitionTime", t));
    snprintf(ip, sizeof(ip), "10.244.%d.%d", (i / 250) % 250, i % 250 + 2);
    snprintf(cid, sizeof(cid), "containerd://%016x%016x%016x%016x", i * 7919u, i * 104729u,
             i * 15485863u, i * 2038074743u);
    snprintf(iid, sizeof(iid), "docker.io/library/gantry-worker@sha256:%016x%016x%016x%016x",
             11u, 22u, 33u, 44u);
    return json_pack(
        "{s:{s:s, s:o, s:s, s:[{s:s}], s:s, s:[{s:s}], s:s, s:[{s:s, s:{s:{s:s}}, s:{}, s:b, "
        "s:i, s:s, s:s, s:s, s:b}], s:s}}",
        "status", "phase", "Running", "conditions", conds, "hostIP", "10.0.0.5", "hostIPs", "ip",
        "10.0.0.5", "podIP", ip, "podIPs", "ip", ip, "startTime", t, "containerStatuses", "name",
        "worker", "state", "running", "startedAt", t, "lastState", "ready", 1, "restartCount", 0,
        "image", "docker.io/library/gantry-worker:0.1.0", "imageID", iid, "containerID", cid,
        "started", 1, "qosClass", "BestEffort");
}

static void *creator(void *arg)
{
    struct kube_client_opts co = {.qps = 1000, .burst = 1000};
    struct kube_client *kc = kube_client_new(cfg, &co);
    char jobs[256], pods[256], path[512], name[64];
    int j;

    if (kube_path(jobs, sizeof(jobs), TJ_API_VERSION, "trainingjobs", ns, NULL, NULL) ||
        kube_path(pods, sizeof(pods), "v1", "pods", ns, NULL, NULL))
        return NULL;
    while ((j = atomic_fetch_add(&next_job, 1)) < njobs) {
        json_t *job, *out = NULL;
        struct tj tj;
        char err[TJ_ERR_MAX];

        snprintf(name, sizeof(name), "rss-%05d", j);
        job = json_pack("{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}}}", "apiVersion",
                        TJ_API_VERSION, "kind", TJ_KIND, "metadata", "name", name, "spec",
                        "replicas", 4, "training", "data", "train", "/data/train.jsonl");
        if (kube_create(kc, jobs, job, &out) || tj_parse(out, &tj, err, sizeof(err))) {
            atomic_fetch_add(&errors, 1);
            json_decref(job);
            json_decref(out);
            continue;
        }
        for (int i = 0; i < 4; i++) {
            json_t *pod = render_pod(&tj, i, 0), *st = kubelet_status(j * 4 + i);
            char pname[RENDER_NAME_MAX];

            render_pod_name(&tj, i, pname, sizeof(pname));
            if (kube_create(kc, pods, pod, NULL) ||
                kube_path(path, sizeof(path), "v1", "pods", ns, pname, "status") ||
                kube_patch(kc, path, KUBE_PATCH_MERGE, st, NULL, NULL))
                atomic_fetch_add(&errors, 1);
            json_decref(pod);
            json_decref(st);
        }
        tj_cleanup(&tj);
        json_decref(job);
        json_decref(out);
    }
    kube_client_free(kc);
    return NULL;
}

struct proc {
    pid_t pid;
    char log[256];
};

static int start_operator(const char *op, struct proc *p)
{
    snprintf(p->log, sizeof(p->log), "/tmp/operator_rss-%d-%s.log", (int)getpid(), ns);
    fflush(stdout);
    p->pid = fork();
    if (p->pid == 0) {
        FILE *f = freopen(p->log, "a", stdout);
        if (!f || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
            _exit(127);
        execl(op, op, "--namespace", ns, "--leader-elect", "false", "--metrics-addr",
              "127.0.0.1:0", "--workers", "4", (char *)NULL);
        _exit(127);
    }
    return p->pid > 0 ? 0 : -1;
}

static void stop_operator(struct proc *p)
{
    int st;

    kill(p->pid, SIGTERM);
    waitpid(p->pid, &st, 0);
}

/* The metrics port from the operator's log, 0 until it is there. */
static int metrics_port(const struct proc *p)
{
    char line[4096];
    int port = 0;
    FILE *f = fopen(p->log, "r");

    while (f && fgets(line, sizeof(line), f)) {
        const char *s = strstr(line, "\"server\":\"metrics\"");
        const char *q = s ? strstr(s, "\"port\":") : NULL;
        if (q)
            port = atoi(q + 7);
    }
    if (f)
        fclose(f);
    return port;
}

/* One gauge/counter value from /metrics, -1 when absent. */
static double metric(int port, const char *name)
{
    char cmd[256], line[512];
    double v = -1;
    size_t n = strlen(name);
    FILE *f;

    snprintf(cmd, sizeof(cmd), "curl -s -m 5 http://127.0.0.1:%d/metrics", port);
    f = popen(cmd, "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, name, n) == 0 && line[n] == ' ')
            v = atof(line + n + 1);
    if (f)
        pclose(f);
    return v;
}

static long status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    size_t n = strlen(field);
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0)
            v = atol(line + n + 1);
    if (f)
        fclose(f);
    return v;
}

/* Waits until the operator synced and idles with >= jobs reconciles; 0 or -1 (timeout). */
static int wait_settled(const struct proc *p, int jobs, double timeout_s)
{
    double t0 = mono(), ready = -1, depth = -1, recs = -1;
    int port = 0, quiet = 0;

    while (mono() - t0 < timeout_s) {
        usleep(500000);
        if (!port)
            port = metrics_port(p);
        if (!port || (ready = metric(port, "gantry_operator_ready")) != 1)
            continue;
        depth = metric(port, "gantry_operator_workqueue_depth");
        recs = metric(port, "gantry_operator_reconciles_total");
        if (depth == 0 && recs >= jobs)
            quiet++;
        else
            quiet = 0;
        if (quiet >= 4)
            return 0;
    }
    fprintf(stderr, "operator_rss: not settled after %.0f s: metrics port %d, ready %.0f, queue depth %.0f, "
            "reconciles %.0f (want >= %d)\n", timeout_s, port, ready, depth, recs, jobs);
    return -1;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"pods", 1, 0, 'n'}, {"threads", 1, 0, 't'},
                                       {"kubeconfig", 1, 0, 'k'}, {"operator", 1, 0, 'o'},
                                       {"keep", 0, 0, 'K'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *kubeconfig = NULL, *op = NULL;
    char err[512], p[256];
    bool keep = false;
    struct proc proc;
    struct kube_client *kc;
    pthread_t *th;
    long base_rss, rss, hwm;
    double base_heap = 0, heap = 0;
    double t0, per_pod;
    int c, rc = 0;

    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'n': npods = atoi(optarg); break;
        case 't': nthreads = atoi(optarg); break;
        case 'k': kubeconfig = optarg; break;
        case 'o': op = optarg; break;
        case 'K': keep = true; break;
        default:
            printf("usage: operator_rss --operator PATH [--pods N] [--threads T] "
                   "[--kubeconfig PATH] [--keep]\n");
            return c == 'h' ? 0 : 64;
        }
    }
    if (!op || npods < 4 || nthreads < 1) {
        fprintf(stderr, "operator_rss: need --operator PATH, --pods >= 4 (try --help)\n");
        return 64;
    }
    njobs = npods / 4;
    npods = njobs * 4;
    if (kube_config_load(kubeconfig, NULL, &cfg, err, sizeof(err))) {
        fprintf(stderr, "operator_rss: %s\n", err);
        return 78;
    }
    kc = kube_client_new(cfg, NULL);
    snprintf(ns, sizeof(ns), "rss-%d-%ld", (int)getpid(), (long)time(NULL) % 100000);
    json_t *nsobj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace",
                              "metadata", "name", ns);
    if ((rc = kube_path(p, sizeof(p), "v1", "namespaces", NULL, NULL, NULL)) ||
        (rc = kube_create(kc, p, nsobj, NULL))) {
        fprintf(stderr, "operator_rss: cannot create namespace %s: %s\n", ns, op_strerror(rc));
        return 69;
    }
    json_decref(nsobj);

    /* 1. baseline: the operator on an empty namespace */
    if (start_operator(op, &proc) || wait_settled(&proc, 0, 120)) {
        fprintf(stderr, "operator_rss: the operator did not start (log %s)\n", proc.log);
        rc = 1;
        goto out;
    }
    sleep(2);
    base_rss = status_kib(proc.pid, "VmRSS:");
    base_heap = metric(metrics_port(&proc), "gantry_operator_heap_bytes");
    stop_operator(&proc);

    /* 2. N/4 jobs and N running pods */
    printf("# operator_rss: %d pods (%d TrainingJobs x 4) in namespace %s, %d clients\n", npods,
           njobs, ns, nthreads);
    t0 = mono();
    th = calloc((size_t)nthreads, sizeof(*th));
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, creator, NULL);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    free(th);
    printf("setup: %.1f s, %d errors\n", mono() - t0, atomic_load(&errors));

    /* 3. the operator tracking them */
    t0 = mono();
    if (start_operator(op, &proc) || wait_settled(&proc, njobs, 600)) {
        fprintf(stderr, "operator_rss: the operator did not settle (log %s)\n", proc.log);
        stop_operator(&proc);
        rc = 1;
        goto out;
    }
    sleep(2);
    rss = status_kib(proc.pid, "VmRSS:");
    hwm = status_kib(proc.pid, "VmHWM:");
    {
        int port = metrics_port(&proc);
        heap = metric(port, "gantry_operator_heap_bytes");
        printf("settled: %.1f s after start; cached pods %.0f, jobs Running %.0f, reconciles "
               "%.0f, status writes %.0f\n",
               mono() - t0, metric(port, "gantry_operator_cache_objects{resource=\"pods\"}"),
               metric(port, "gantry_operator_trainingjobs{phase=\"Running\"}"),
               metric(port, "gantry_operator_reconciles_total"),
               metric(port, "gantry_operator_status_writes_total"));
    }
    stop_operator(&proc);
    per_pod = (double)(rss - base_rss) * 1024.0 / npods;
    printf("baseline_rss_kib %ld\nrss_kib %ld\npeak_rss_kib %ld\nbytes_per_pod %.0f\n", base_rss,
           rss, hwm, per_pod);
    printf("baseline_heap_kib %.0f\nheap_kib %.0f\nheap_bytes_per_pod %.0f\n", base_heap / 1024,
           heap / 1024, (heap - base_heap) / npods);
    printf("target per pod <= 2048 B: %s; target <= 20 MiB at 10k pods: %s (RSS %.1f MiB at "
           "%d pods)\n",
           per_pod <= 2048 ? "met" : "MISSED", npods < 10000 ? "n/a (fewer pods)"
                                               : rss <= 20 * 1024 ? "met" : "MISSED",
           rss / 1024.0, npods);
out:
    if (!keep) {
        char path[512];
        if (kube_path(path, sizeof(path), "v1", "namespaces", NULL, ns, NULL) == 0 &&
            kube_delete(kc, path, NULL, NULL) != 0)
            fprintf(stderr, "operator_rss: could not delete namespace %s\n", ns);
    }
    kube_client_free(kc);
    kube_config_free(cfg);
    return rc;
}
