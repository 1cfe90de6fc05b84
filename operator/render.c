#include "operator/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_VOLUME "gantry-config"
#define CKPT_VOLUME "gantry-checkpoints"
#define SHM_VOLUME "gantry-shm"

void render_pod_name(const struct tj *tj, int index, char *out, size_t n)
{
    snprintf(out, n, "%s-worker-%d", tj->name, index);
}

bool render_is_pod_name(const struct tj *tj, int index, const char *name)
{
    size_t len = strlen(tj->name);
    char digits[16];
    int k = (int)sizeof(digits) - 1;

    if (index < 0 || strncmp(name, tj->name, len) != 0 || strncmp(name + len, "-worker-", 8) != 0)
        return false;
    digits[k] = '\0';
    do {
        digits[--k] = (char)('0' + index % 10);
        index /= 10;
    } while (index > 0);
    return strcmp(name + len + 8, digits + k) == 0;
}

void render_configmap_name(const struct tj *tj, char *out, size_t n)
{
    snprintf(out, n, "%s-config", tj->name);
}

void render_secret_name(const struct tj *tj, char *out, size_t n)
{
    snprintf(out, n, "%s-rdzv", tj->name);
}

/* [the controller ownerReference to the job]: a new array. */
static json_t *owner_refs(const struct tj *tj)
{
    return json_pack("[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", TJ_API_VERSION, "kind",
                     TJ_KIND, "name", tj->name, "uid", tj->uid, "controller", 1,
                     "blockOwnerDeletion", 1);
}

/* metadata shared by every child: name, namespace, the job label, the owner reference. */
static json_t *child_meta(const struct tj *tj, const char *name)
{
    return json_pack("{s:s, s:s, s:{s:s}, s:o}", "name", name, "namespace", tj->ns, "labels",
                     RENDER_LABEL_JOB, tj->name, "ownerReferences", owner_refs(tj));
}

/* The worker's checkpoint.stopSaveSeconds: what the pod's terminationGracePeriodSeconds (30
 * unless the template sets it) leaves after 5 s for the exit and the kubelet; half of a grace
 * of 10 s or less; at least 1. */
int render_stop_save_seconds(const struct tj *tj)
{
    const json_t *spec = tj->tmpl ? json_object_get(tj->tmpl, "spec") : NULL;
    const json_t *g = spec ? json_object_get(spec, "terminationGracePeriodSeconds") : NULL;
    long long grace = json_is_integer(g) ? json_integer_value(g) : 30;

    if (grace > 86400 + 5)
        grace = 86400 + 5;
    grace = grace > 10 ? grace - 5 : grace / 2;
    return grace < 1 ? 1 : (int)grace;
}

char *render_config_json(const struct tj *tj)
{
    char dir[TJ_PATH_MAX + TJ_NAME_MAX + 2];
    json_t *cfg;
    char *s;

    snprintf(dir, sizeof(dir), "%s/%s", strcmp(tj->ckpt_path, "/") ? tj->ckpt_path : "", tj->name);
    cfg = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:O, s:{s:s, s:s, s:i, s:i, s:b, s:i}}",
                    "job", tj->name, "namespace", tj->ns, "replicas", tj->replicas,
                    "gpusPerReplica", tj->gpus, "nprocPerNode", tj_nproc(tj), "worldSize",
                    tj->replicas * tj_nproc(tj), "training", tj->training, "checkpoint", "path",
                    tj->ckpt_path, "dir", dir, "intervalSteps", tj->ckpt_interval, "keep",
                    tj->ckpt_keep, "saveOnStop", tj->ckpt_save_on_stop, "stopSaveSeconds",
                    render_stop_save_seconds(tj));
    s = json_dumps(cfg, JSON_SORT_KEYS | JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(cfg);
    return s;
}

json_t *render_service(const struct tj *tj)
{
    json_t *svc = json_pack("{s:s, s:s, s:o, s:{s:s, s:b, s:{s:s}, s:[{s:s, s:i, s:i}]}}",
                            "apiVersion", "v1", "kind", "Service", "metadata",
                            child_meta(tj, tj->name), "spec", "clusterIP", "None",
                            "publishNotReadyAddresses", 1, "selector", RENDER_LABEL_JOB, tj->name,
                            "ports", "name", "rdzv", "port", tj->port, "targetPort", tj->port);
    return svc;
}

json_t *render_configmap(const struct tj *tj)
{
    char name[RENDER_NAME_MAX];
    char *cfg = render_config_json(tj);
    json_t *cm;

    render_configmap_name(tj, name, sizeof(name));
    cm = json_pack("{s:s, s:s, s:o, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata",
                   child_meta(tj, name), "data", RENDER_CONFIG_FILE, cfg);
    free(cfg);
    return cm;
}

json_t *render_secret(const struct tj *tj, const char *token)
{
    char name[RENDER_NAME_MAX];

    render_secret_name(tj, name, sizeof(name));
    /* stringData: the API server base64-encodes it into data. */
    return json_pack("{s:s, s:s, s:o, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
                     "metadata", child_meta(tj, name), "type", "Opaque", "stringData",
                     RENDER_TOKEN_KEY, token ? token : "");
}

/* ---------------------------------------------------------------------------------------------
 * Pods
 * ------------------------------------------------------------------------------------------- */

/* obj[key] as an object, replaced by {} when absent or of another type. Borrowed. */
static json_t *want_object(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    if (!json_is_object(v)) {
        v = json_object();
        json_object_set_new(obj, key, v);
    }
    return v;
}

static json_t *want_array(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    if (!json_is_array(v)) {
        v = json_array();
        json_object_set_new(obj, key, v);
    }
    return v;
}

/* Removes the entries of arr whose "name" is name, then appends item (stolen). */
static void put_named(json_t *arr, const char *name, json_t *item)
{
    for (size_t i = json_array_size(arr); i-- > 0;) {
        const char *n = json_string_value(json_object_get(json_array_get(arr, i), "name"));
        if (n && strcmp(n, name) == 0)
            json_array_remove(arr, i);
    }
    json_array_append_new(arr, item);
}

static void put_env(json_t *env, const char *name, const char *value)
{
    put_named(env, name, json_pack("{s:s, s:s}", "name", name, "value", value));
}

static void put_env_int(json_t *env, const char *name, long long value)
{
    char s[32];

    snprintf(s, sizeof(s), "%lld", value);
    put_env(env, name, s);
}

/* The container named "worker" in spec.containers, inserted first when absent. Borrowed. */
static json_t *worker_container(json_t *spec)
{
    json_t *cs = want_array(spec, "containers");
    json_t *c;
    size_t i;

    json_array_foreach(cs, i, c) {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (json_is_object(c) && n && strcmp(n, RENDER_CONTAINER) == 0)
            return c;
    }
    c = json_pack("{s:s}", "name", RENDER_CONTAINER);
    json_array_insert_new(cs, 0, c);
    return c;
}

static void render_env(const struct tj *tj, json_t *c, int index, int restarts)
{
    json_t *env = want_array(c, "env");
    char buf[TJ_PATH_MAX + 2 * TJ_NAME_MAX + 32], secret[RENDER_NAME_MAX];
    int nproc = tj_nproc(tj);

    snprintf(buf, sizeof(buf), "%s-worker-0.%s.%s.svc", tj->name, tj->name, tj->ns);
    put_env(env, "MASTER_ADDR", buf);
    put_env_int(env, "MASTER_PORT", tj->port);
    put_env_int(env, "WORLD_SIZE", (long long)tj->replicas * nproc);
    put_env_int(env, "RANK", (long long)index * nproc);
    put_env_int(env, "NODE_RANK", index);
    put_env_int(env, "NNODES", tj->replicas);
    put_env_int(env, "NPROC_PER_NODE", nproc);
    put_env(env, "GANTRY_JOB", tj->name);
    put_env(env, "GANTRY_NAMESPACE", tj->ns);
    put_env_int(env, "GANTRY_RESTART_COUNT", restarts);
    snprintf(buf, sizeof(buf), "%s/%s", strcmp(tj->ckpt_path, "/") ? tj->ckpt_path : "", tj->name);
    put_env(env, "GANTRY_CHECKPOINT_DIR", buf);
    put_env(env, "GANTRY_CONFIG", RENDER_CONFIG_DIR "/" RENDER_CONFIG_FILE);
    put_env_int(env, "GANTRY_METRICS_PORT", RENDER_METRICS_PORT);
    render_secret_name(tj, secret, sizeof(secret));
    put_named(env, "GANTRY_RDZV_TOKEN",
              json_pack("{s:s, s:{s:{s:s, s:s}}}", "name", "GANTRY_RDZV_TOKEN", "valueFrom",
                        "secretKeyRef", "name", secret, "key", RENDER_TOKEN_KEY));
}

/* True when some volumeMount of the container already covers /dev/shm (the user's own wins). */
static bool mounts_dev_shm(json_t *mounts)
{
    size_t i;
    json_t *m;

    json_array_foreach(mounts, i, m) {
        const char *path = json_string_value(json_object_get(m, "mountPath"));
        if (path && (strcmp(path, "/dev/shm") == 0 || strcmp(path, "/dev/shm/") == 0))
            return true;
    }
    return false;
}

/* Returns true when it mounted SHM_VOLUME at /dev/shm, so the pod must declare the volume. */
static bool render_worker(const struct tj *tj, json_t *c, int index, int restarts)
{
    json_t *ports, *mounts, *p;
    bool have_port = false, have_metrics = false;
    size_t i;

    json_object_set_new(c, "image", json_string(tj->image));
    json_object_set_new(c, "imagePullPolicy", json_string(tj->pull_policy));
    /* A worker that dies without writing /dev/termination-log still explains itself: the kubelet
     * puts its log's tail in the terminated state's message, which rec copies into the Failed
     * condition and Event. A template's own choice is kept. */
    if (!json_is_string(json_object_get(c, "terminationMessagePolicy")))
        json_object_set_new(c, "terminationMessagePolicy",
                            json_string("FallbackToLogsOnError"));
    render_env(tj, c, index, restarts);
    /* Rank 0 writes its final progress line to the termination message file (the operator reads
     * it back when the job ends before a /progress poll); a template's own path is passed on. */
    if (json_is_string(json_object_get(c, "terminationMessagePath")))
        put_env(want_array(c, "env"), "GANTRY_TERMINATION_LOG",
                json_string_value(json_object_get(c, "terminationMessagePath")));
    ports = want_array(c, "ports");
    json_array_foreach(ports, i, p) {
        if (json_integer_value(json_object_get(p, "containerPort")) == tj->port)
            have_port = true;
        if (json_integer_value(json_object_get(p, "containerPort")) == RENDER_METRICS_PORT)
            have_metrics = true;
    }
    if (!have_port)
        json_array_append_new(ports, json_pack("{s:s, s:i, s:s}", "name", "rdzv",
                                               "containerPort", tj->port, "protocol", "TCP"));
    if (!have_metrics && tj->port != RENDER_METRICS_PORT)
        json_array_append_new(ports, json_pack("{s:s, s:i, s:s}", "name", RENDER_METRICS_PORT_NAME,
                                               "containerPort", RENDER_METRICS_PORT, "protocol",
                                               "TCP"));
    mounts = want_array(c, "volumeMounts");
    put_named(mounts, CONFIG_VOLUME,
              json_pack("{s:s, s:s, s:b}", "name", CONFIG_VOLUME, "mountPath", RENDER_CONFIG_DIR,
                        "readOnly", 1));
    put_named(mounts, CKPT_VOLUME,
              json_pack("{s:s, s:s}", "name", CKPT_VOLUME, "mountPath", tj->ckpt_path));
    if (tj->gpus > 0)
        json_object_set_new(want_object(want_object(c, "resources"), "limits"), "nvidia.com/gpu",
                            json_integer(tj->gpus));
    else if (tj_nproc(tj) <= 1)
        return false;
    /* NCCL's intra-node transport and the CPU ranks' shared-memory all-reduce live in /dev/shm;
     * a container gets 64 MB, too little for several GPUs (NCCL fails with "unhandled system
     * error" on a full shm) or a large model's gradients. */
    if (mounts_dev_shm(mounts))
        return false;
    put_named(mounts, SHM_VOLUME,
              json_pack("{s:s, s:s}", "name", SHM_VOLUME, "mountPath", "/dev/shm"));
    return true;
}

json_t *render_pod(const struct tj *tj, int index, int restarts)
{
    char name[RENDER_NAME_MAX], cm[RENDER_NAME_MAX], num[16];
    json_t *pod, *meta, *labels, *spec, *vols, *tspec;
    bool shm;

    pod = json_pack("{s:s, s:s}", "apiVersion", "v1", "kind", "Pod");
    meta = json_is_object(json_object_get(tj->tmpl, "metadata"))
               ? json_deep_copy(json_object_get(tj->tmpl, "metadata"))
               : json_object();
    json_object_set_new(pod, "metadata", meta);
    tspec = json_object_get(tj->tmpl, "spec");
    spec = json_is_object(tspec) ? json_deep_copy(tspec) : json_object();
    json_object_set_new(pod, "spec", spec);

    render_pod_name(tj, index, name, sizeof(name));
    json_object_set_new(meta, "name", json_string(name));
    json_object_set_new(meta, "namespace", json_string(tj->ns));
    json_object_del(meta, "generateName");
    labels = want_object(meta, "labels");
    json_object_set_new(labels, RENDER_LABEL_JOB, json_string(tj->name));
    snprintf(num, sizeof(num), "%d", index);
    json_object_set_new(labels, RENDER_LABEL_INDEX, json_string(num));
    snprintf(num, sizeof(num), "%d", restarts);
    json_object_set_new(labels, RENDER_LABEL_RESTART, json_string(num));
    snprintf(num, sizeof(num), "%d", tj->replicas);
    json_object_set_new(labels, RENDER_LABEL_REPLICAS, json_string(num));
    json_object_set_new(meta, "ownerReferences", owner_refs(tj));

    /* hostname.subdomain makes <job>-worker-<i>.<job>.<ns>.svc resolve through the Service. */
    json_object_set_new(spec, "hostname", json_string(name));
    json_object_set_new(spec, "subdomain", json_string(tj->name));
    json_object_set_new(spec, "restartPolicy", json_string("Never"));
    if (!json_object_get(spec, "enableServiceLinks"))
        json_object_set_new(spec, "enableServiceLinks", json_false());
    if (tj->gang == TJ_GANG_WORKLOAD)
        json_object_set_new(spec, "workloadRef",
                            json_pack("{s:s, s:s}", "name", tj->name, "podGroup",
                                      RENDER_WORKLOAD_GROUP));
    shm = render_worker(tj, worker_container(spec), index, restarts);

    render_configmap_name(tj, cm, sizeof(cm));
    vols = want_array(spec, "volumes");
    put_named(vols, CONFIG_VOLUME,
              json_pack("{s:s, s:{s:s}}", "name", CONFIG_VOLUME, "configMap", "name", cm));
    if (tj->ckpt_claim[0])
        put_named(vols, CKPT_VOLUME,
                  json_pack("{s:s, s:{s:s}}", "name", CKPT_VOLUME, "persistentVolumeClaim",
                            "claimName", tj->ckpt_claim));
    else
        put_named(vols, CKPT_VOLUME, json_pack("{s:s, s:{}}", "name", CKPT_VOLUME, "emptyDir"));
    if (shm) {
        char size[32];

        snprintf(size, sizeof(size), "%dGi", tj_nproc(tj) * RENDER_SHM_GIB_PER_GPU);
        put_named(vols, SHM_VOLUME,
                  json_pack("{s:s, s:{s:s, s:s}}", "name", SHM_VOLUME, "emptyDir", "medium",
                            "Memory", "sizeLimit", size));
    }
    return pod;
}

json_t *render_standby_pod(const struct tj *tj, int index, int restarts)
{
    json_t *pod = render_pod(tj, index, restarts);
    json_t *meta = json_object_get(pod, "metadata");

    json_object_set_new(want_object(meta, "labels"), RENDER_LABEL_STANDBY, json_string("true"));
    put_env(want_array(worker_container(json_object_get(pod, "spec")), "env"), "GANTRY_STANDBY",
            "1");
    return pod;
}

void render_pod_gang_key(json_t *pod, int restarts, long long start)
{
    json_t *ref = json_object_get(json_object_get(pod, "spec"), "workloadRef");
    char key[48];

    if (!json_is_object(ref))
        return;
    snprintf(key, sizeof(key), "g%d-%lld", restarts, start);
    json_object_set_new(ref, "podGroupReplicaKey", json_string(key));
}

json_t *render_workload(const struct tj *tj)
{
    return json_pack("{s:s, s:s, s:o, s:{s:{s:s, s:s, s:s}, s:[{s:s, s:{s:{s:i}}}]}}",
                     "apiVersion", RENDER_WORKLOAD_API, "kind", "Workload", "metadata",
                     child_meta(tj, tj->name), "spec", "controllerRef", "apiGroup", TJ_GROUP,
                     "kind", TJ_KIND, "name", tj->name, "podGroups", "name",
                     RENDER_WORKLOAD_GROUP, "policy", "gang", "minCount", tj->replicas);
}

long long render_workload_min(const json_t *workload)
{
    const json_t *groups = json_object_get(json_object_get(workload, "spec"), "podGroups");
    size_t i;
    const json_t *g;

    json_array_foreach(groups, i, g) {
        const char *name = json_string_value(json_object_get(g, "name"));
        const json_t *min = json_object_get(
            json_object_get(json_object_get(g, "policy"), "gang"), "minCount");
        if (name && strcmp(name, RENDER_WORKLOAD_GROUP) == 0 && json_is_integer(min))
            return json_integer_value(min);
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Kueue
 * ------------------------------------------------------------------------------------------- */

/* A container as Kueue counts it: name, image and resources, the requests filled in from the
 * limits where missing (Kubernetes defaults a request to its limit; Kueue's quota reads the
 * requests, and the Workload is not defaulted by the API server). A new object. */
static json_t *kueue_container(const json_t *c)
{
    json_t *out = json_object(), *res = json_object(), *req;
    const json_t *r = json_object_get(c, "resources"), *lim = json_object_get(r, "limits"), *v;
    const char *k;

    /* restartPolicy: a sidecar's requests add up with the containers', an init's do not */
    static const char *const keys[] = {"name", "image", "restartPolicy", NULL};

    for (const char *const *kk = keys; *kk; kk++)
        if (json_object_get(c, *kk))
            json_object_set_new(out, *kk, json_deep_copy(json_object_get(c, *kk)));
    req = json_is_object(json_object_get(r, "requests"))
              ? json_deep_copy(json_object_get(r, "requests")) : json_object();
    json_object_foreach((json_t *)lim, k, v)
        if (!json_object_get(req, k))
            json_object_set_new(req, k, json_deep_copy(v));
    if (json_is_object(lim))
        json_object_set_new(res, "limits", json_deep_copy(lim));
    if (json_object_size(req))
        json_object_set(res, "requests", req);
    json_decref(req);
    json_object_set_new(out, "resources", res);
    return out;
}

/* The job's one pod set as Kueue reads it: {name workers, count replicas, template}, the
 * template holding what admission looks at (resources, node selection, priority, overhead), not
 * the rendered env or volumes, so the Workload stays the same across operator versions. */
static json_t *kueue_podset(const struct tj *tj)
{
    static const char *const keep[] = {"nodeSelector", "tolerations", "affinity",
                                       "priorityClassName", "runtimeClassName", "overhead",
                                       "topologySpreadConstraints", NULL};
    json_t *pod = render_pod(tj, 0, 0);
    const json_t *spec = json_object_get(pod, "spec"), *c;
    json_t *out = json_object(), *cs;
    static const char *const lists[] = {"containers", "initContainers", NULL};
    size_t i;

    for (const char *const *l = lists; *l; l++) {
        if (!json_array_size(json_object_get(spec, *l)))
            continue;
        cs = json_array();
        json_array_foreach(json_object_get(spec, *l), i, c)
            json_array_append_new(cs, kueue_container(c));
        json_object_set_new(out, *l, cs);
    }
    for (const char *const *k = keep; *k; k++)
        if (json_object_get(spec, *k))
            json_object_set_new(out, *k, json_deep_copy(json_object_get(spec, *k)));
    json_decref(pod);
    json_t *ps = json_pack("{s:s, s:i, s:{s:{s:{s:s}}, s:o}}", "name", RENDER_KUEUE_PODSET,
                           "count", tj->replicas, "template", "metadata", "labels",
                           RENDER_LABEL_JOB, tj->name, "spec", out);
    /* an elastic job may run with fewer: Kueue's partial admission admits down to minCount */
    if (tj->elastic_min > 0 && tj->elastic_min < tj->replicas)
        json_object_set_new(ps, "minCount", json_integer(tj->elastic_min));
    return ps;
}

/* 64-bit FNV-1a of s. */
static unsigned long long fnv1a64(const char *s)
{
    unsigned long long h = 0xcbf29ce484222325ULL;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* The Workload's spec, and its name: trainingjob-<job>-<8 hex digits of the spec's digest>.
 * Its priority, as Kueue's own integrations take it: the WorkloadPriorityClass of the label,
 * else the PriorityClass the pods name (spec.priorityClassName of the template). */
static json_t *kueue_spec(const struct tj *tj, char *name, size_t n)
{
    json_t *ps = kueue_podset(tj);
    const char *pc = json_string_value(json_object_get(
        json_object_get(json_object_get(ps, "template"), "spec"), "priorityClassName"));
    json_t *spec = json_pack("{s:s, s:[o]}", "queueName", tj->queue, "podSets", ps);
    char *text;

    if (tj->priority[0])
        json_object_set_new(spec, "priorityClassRef",
                            json_pack("{s:s, s:s, s:s}", "group", RENDER_KUEUE_GROUP, "kind",
                                      "WorkloadPriorityClass", "name", tj->priority));
    else if (pc && *pc)
        json_object_set_new(spec, "priorityClassRef",
                            json_pack("{s:s, s:s, s:s}", "group", "scheduling.k8s.io", "kind",
                                      "PriorityClass", "name", pc));
    text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(name, n, "trainingjob-%s-%08llx", tj->name,
             text ? fnv1a64(text) & 0xffffffffULL : 0ULL);
    free(text);
    return spec;
}

void render_kueue_name(const struct tj *tj, char *out, size_t n)
{
    json_decref(kueue_spec(tj, out, n));
}

json_t *render_kueue_workload(const struct tj *tj)
{
    char name[RENDER_NAME_MAX];
    json_t *spec = kueue_spec(tj, name, sizeof(name));
    json_t *meta = child_meta(tj, name);

    json_object_set_new(json_object_get(meta, "labels"), RENDER_LABEL_KUEUE_JOB_UID,
                        json_string(tj->uid));
    return json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", RENDER_KUEUE_API, "kind", "Workload",
                     "metadata", meta, "spec", spec);
}
