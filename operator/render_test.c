/* Rendering of children: names, the env contract, DNS fields, owner refs, template merging. */
#include "operator/render.h"

#include <stdlib.h>
#include <string.h>

#include "common/test.h"

static int load_job(const char *spec, struct tj *tj)
{
    char text[2048];
    json_t *obj;
    int rc;

    snprintf(text, sizeof(text),
             "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"spam\",\"namespace\":\"ml\","
             "\"uid\":\"uid-7\"},\"spec\":%s}", spec);
    obj = json_loads(text, 0, NULL);
    rc = obj ? tj_parse(obj, tj, NULL, 0) : 99;
    json_decref(obj);
    return rc;
}

/* Borrowed: the container named name, or NULL. */
static json_t *container(json_t *pod, const char *name)
{
    json_t *c;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c) {
        if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
            return c;
    }
    return NULL;
}

static json_t *named(json_t *arr, const char *name)
{
    json_t *e;
    size_t i;
    json_t *found = NULL;
    int count = 0;

    json_array_foreach(arr, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0) {
            found = e;
            count++;
        }
    }
    return count == 1 ? found : NULL; /* duplicates are a bug too */
}

static const char *env(json_t *pod, const char *name)
{
    return json_string_value(
        json_object_get(named(json_object_get(container(pod, "worker"), "env"), name), "value"));
}

static const char *str_at(json_t *obj, const char *path)
{
    char buf[256], *save = NULL, *tok;

    snprintf(buf, sizeof(buf), "%s", path);
    for (tok = strtok_r(buf, ".", &save); tok && obj; tok = strtok_r(NULL, ".", &save))
        obj = json_object_get(obj, tok);
    return json_string_value(obj);
}

static void test_pod_contract(void)
{
    struct tj tj;
    json_t *pod, *or, *tok, *vols;

    TEST_EQ_INT(load_job("{\"replicas\":4,\"checkpoint\":{\"claimName\":\"ckpt\"}}", &tj), 0);
    pod = render_pod(&tj, 2, 1);
    TEST_EQ_STR(str_at(pod, "metadata.name"), "spam-worker-2");
    TEST_EQ_STR(str_at(pod, "metadata.namespace"), "ml");
    TEST_EQ_STR(str_at(pod, "spec.hostname"), "spam-worker-2");
    TEST_EQ_STR(str_at(pod, "spec.subdomain"), "spam");
    TEST_EQ_STR(str_at(pod, "spec.restartPolicy"), "Never");
    TEST_CHECK(json_is_false(json_object_get(json_object_get(pod, "spec"), "enableServiceLinks")));
    json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "gantry.dev/job-name")), "spam");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "gantry.dev/replica-index")), "2");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "gantry.dev/restart-count")), "1");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "gantry.dev/replicas")), "4");
    or = json_array_get(json_object_get(json_object_get(pod, "metadata"), "ownerReferences"), 0);
    TEST_EQ_STR(json_string_value(json_object_get(or, "uid")), "uid-7");
    TEST_EQ_STR(json_string_value(json_object_get(or, "kind")), "TrainingJob");
    TEST_EQ_STR(json_string_value(json_object_get(or, "apiVersion")), "gantry.dev/v1alpha1");
    TEST_CHECK(json_is_true(json_object_get(or, "controller")));

    TEST_EQ_STR(env(pod, "MASTER_ADDR"), "spam-worker-0.spam.ml.svc");
    TEST_EQ_STR(env(pod, "MASTER_PORT"), "29500");
    TEST_EQ_STR(env(pod, "WORLD_SIZE"), "4");
    TEST_EQ_STR(env(pod, "RANK"), "2");
    TEST_EQ_STR(env(pod, "NODE_RANK"), "2");
    TEST_EQ_STR(env(pod, "NPROC_PER_NODE"), "1");
    TEST_EQ_STR(env(pod, "GANTRY_JOB"), "spam");
    TEST_EQ_STR(env(pod, "GANTRY_RESTART_COUNT"), "1");
    TEST_EQ_STR(env(pod, "GANTRY_CHECKPOINT_DIR"), "/checkpoints/spam");
    TEST_EQ_STR(env(pod, "GANTRY_CONFIG"), "/etc/gantry/config.json");
    TEST_EQ_STR(env(pod, "GANTRY_METRICS_PORT"), "9090");
    TEST_CHECK(env(pod, "GANTRY_TERMINATION_LOG") == NULL); /* the worker's default path */
    {
        json_t *mp = named(json_object_get(container(pod, "worker"), "ports"), "metrics");
        TEST_CHECK(mp != NULL);
        TEST_EQ_INT(json_integer_value(json_object_get(mp, "containerPort")), 9090);
        TEST_EQ_INT(json_array_size(json_object_get(container(pod, "worker"), "ports")), 2);
    }
    tok = named(json_object_get(container(pod, "worker"), "env"), "GANTRY_RDZV_TOKEN");
    TEST_EQ_STR(str_at(tok, "valueFrom.secretKeyRef.name"), "spam-rdzv");
    TEST_EQ_STR(str_at(tok, "valueFrom.secretKeyRef.key"), "token");
    TEST_EQ_STR(str_at(container(pod, "worker"), "image"), "gantry-worker:0.1.0");
    /* a worker that dies without a termination message is explained by its log's tail */
    TEST_EQ_STR(str_at(container(pod, "worker"), "terminationMessagePolicy"),
                "FallbackToLogsOnError");

    vols = json_object_get(json_object_get(pod, "spec"), "volumes");
    TEST_EQ_STR(str_at(named(vols, "gantry-config"), "configMap.name"), "spam-config");
    TEST_EQ_STR(str_at(named(vols, "gantry-checkpoints"), "persistentVolumeClaim.claimName"),
                "ckpt");
    TEST_EQ_STR(str_at(named(json_object_get(container(pod, "worker"), "volumeMounts"),
                             "gantry-config"), "mountPath"), "/etc/gantry");
    TEST_CHECK(json_object_get(json_object_get(container(pod, "worker"), "resources"), "limits") ==
               NULL); /* CPU job: no GPU limit */
    json_decref(pod);
    tj_cleanup(&tj);
}

static void test_gpu_ranks_and_limit(void)
{
    struct tj tj;
    json_t *pod;

    TEST_EQ_INT(load_job("{\"replicas\":2,\"gpusPerReplica\":8,\"port\":23456}", &tj), 0);
    pod = render_pod(&tj, 1, 0);
    TEST_EQ_STR(env(pod, "WORLD_SIZE"), "16");
    TEST_EQ_STR(env(pod, "RANK"), "8");
    TEST_EQ_STR(env(pod, "NODE_RANK"), "1");
    TEST_EQ_STR(env(pod, "NPROC_PER_NODE"), "8");
    TEST_EQ_STR(env(pod, "MASTER_PORT"), "23456");
    TEST_EQ_INT(json_integer_value(json_object_get(
                    json_object_get(json_object_get(container(pod, "worker"), "resources"),
                                    "limits"), "nvidia.com/gpu")), 8);
    /* no claim: an emptyDir */
    TEST_CHECK(json_is_object(json_object_get(
        named(json_object_get(json_object_get(pod, "spec"), "volumes"), "gantry-checkpoints"),
        "emptyDir")));
    /* NCCL's shared memory: a Memory emptyDir of 1 GiB per GPU at /dev/shm */
    TEST_EQ_STR(str_at(named(json_object_get(json_object_get(pod, "spec"), "volumes"),
                             "gantry-shm"),
                       "emptyDir.medium"),
                "Memory");
    TEST_EQ_STR(str_at(named(json_object_get(json_object_get(pod, "spec"), "volumes"),
                             "gantry-shm"),
                       "emptyDir.sizeLimit"),
                "8Gi");
    TEST_EQ_STR(str_at(named(json_object_get(container(pod, "worker"), "volumeMounts"),
                             "gantry-shm"),
                       "mountPath"),
                "/dev/shm");
    json_decref(pod);
    tj_cleanup(&tj);

    /* CPU jobs get none; a template that mounts its own /dev/shm keeps it and gets no second one */
    TEST_EQ_INT(load_job("{\"replicas\":2}", &tj), 0);
    pod = render_pod(&tj, 0, 0);
    TEST_CHECK(named(json_object_get(json_object_get(pod, "spec"), "volumes"), "gantry-shm") ==
               NULL);
    TEST_CHECK(named(json_object_get(container(pod, "worker"), "volumeMounts"), "gantry-shm") ==
               NULL);
    json_decref(pod);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"gpusPerReplica\":2,\"template\":{\"spec\":{\"containers\":[{"
                         "\"name\":\"worker\",\"volumeMounts\":[{\"name\":\"shm\","
                         "\"mountPath\":\"/dev/shm\"}]}],\"volumes\":[{\"name\":\"shm\","
                         "\"emptyDir\":{\"medium\":\"Memory\",\"sizeLimit\":\"64Gi\"}}]}}}",
                         &tj),
                0);
    pod = render_pod(&tj, 0, 0);
    TEST_CHECK(named(json_object_get(json_object_get(pod, "spec"), "volumes"), "gantry-shm") ==
               NULL);
    TEST_EQ_STR(str_at(named(json_object_get(json_object_get(pod, "spec"), "volumes"), "shm"),
                       "emptyDir.sizeLimit"),
                "64Gi");
    json_decref(pod);
    tj_cleanup(&tj);
}

/* nprocPerNode on CPUs: N ranks per pod, no GPU limit, a Memory /dev/shm of N GiB for their
 * shared-memory all-reduce; in the config too. */
static void test_cpu_nproc(void)
{
    struct tj tj;
    json_t *pod, *vols;
    char *cfg;

    TEST_EQ_INT(load_job("{\"replicas\":3,\"nprocPerNode\":4}", &tj), 0);
    TEST_EQ_INT(tj_nproc(&tj), 4);
    pod = render_pod(&tj, 2, 0);
    TEST_EQ_STR(env(pod, "WORLD_SIZE"), "12");
    TEST_EQ_STR(env(pod, "RANK"), "8");
    TEST_EQ_STR(env(pod, "NODE_RANK"), "2");
    TEST_EQ_STR(env(pod, "NPROC_PER_NODE"), "4");
    TEST_CHECK(json_object_get(json_object_get(container(pod, "worker"), "resources"), "limits") ==
               NULL);
    vols = json_object_get(json_object_get(pod, "spec"), "volumes");
    TEST_EQ_STR(str_at(named(vols, "gantry-shm"), "emptyDir.medium"), "Memory");
    TEST_EQ_STR(str_at(named(vols, "gantry-shm"), "emptyDir.sizeLimit"), "4Gi");
    TEST_EQ_STR(str_at(named(json_object_get(container(pod, "worker"), "volumeMounts"),
                             "gantry-shm"),
                       "mountPath"),
                "/dev/shm");
    cfg = render_config_json(&tj);
    TEST_CHECK(strstr(cfg, "\"nprocPerNode\": 4") && strstr(cfg, "\"worldSize\": 12"));
    free(cfg);
    json_decref(pod);
    tj_cleanup(&tj);
    /* equal to the GPUs: as without it */
    TEST_EQ_INT(load_job("{\"gpusPerReplica\":2,\"nprocPerNode\":2}", &tj), 0);
    TEST_EQ_INT(tj_nproc(&tj), 2);
    tj_cleanup(&tj);
}

static void test_template_merge(void)
{
    struct tj tj;
    json_t *pod, *w, *labels;

    TEST_EQ_INT(load_job("{\"template\":{\"metadata\":{\"name\":\"ignored\",\"labels\":{\"team\":"
                         "\"nlp\",\"gantry.dev/job-name\":\"evil\"}},\"spec\":{\"nodeSelector\":{"
                         "\"pool\":\"gpu\"},\"restartPolicy\":\"Always\",\"containers\":[{\"name\":"
                         "\"sidecar\",\"image\":\"s:1\"},{\"name\":\"worker\",\"command\":[\"w\"],"
                         "\"terminationMessagePath\":\"/tmp/term\","
                         "\"env\":[{\"name\":\"RANK\",\"value\":\"99\"},{\"name\":\"MINE\","
                         "\"value\":\"x\"}],\"volumeMounts\":[{\"name\":\"data\",\"mountPath\":"
                         "\"/data\"}]}],\"volumes\":[{\"name\":\"data\",\"emptyDir\":{}}]}}}",
                         &tj), 0);
    pod = render_pod(&tj, 0, 0);
    labels = json_object_get(json_object_get(pod, "metadata"), "labels");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "team")), "nlp");
    TEST_EQ_STR(json_string_value(json_object_get(labels, "gantry.dev/job-name")), "spam");
    TEST_EQ_STR(str_at(pod, "metadata.name"), "spam-worker-0");
    TEST_EQ_STR(str_at(pod, "spec.nodeSelector.pool"), "gpu");
    TEST_EQ_STR(str_at(pod, "spec.restartPolicy"), "Never");
    TEST_EQ_INT(json_array_size(json_object_get(json_object_get(pod, "spec"), "containers")), 2);
    TEST_EQ_STR(str_at(container(pod, "sidecar"), "image"), "s:1");
    w = container(pod, "worker");
    TEST_EQ_STR(json_string_value(json_array_get(json_object_get(w, "command"), 0)), "w");
    TEST_EQ_STR(env(pod, "GANTRY_TERMINATION_LOG"), "/tmp/term");
    TEST_EQ_STR(env(pod, "RANK"), "0"); /* ours wins, and only once */
    TEST_EQ_STR(env(pod, "MINE"), "x");
    TEST_CHECK(named(json_object_get(w, "volumeMounts"), "data") != NULL);
    TEST_CHECK(named(json_object_get(json_object_get(pod, "spec"), "volumes"), "data") != NULL);
    TEST_CHECK(named(json_object_get(json_object_get(pod, "spec"), "volumes"), "gantry-config"));
    json_decref(pod);
    /* the job's template is not modified by rendering */
    TEST_CHECK(json_object_get(json_object_get(tj.tmpl, "spec"), "hostname") == NULL);
    tj_cleanup(&tj);
}

static void test_service_configmap_secret(void)
{
    struct tj tj;
    json_t *svc, *cm, *sec, *cfg;
    char *text;

    TEST_EQ_INT(load_job("{\"replicas\":3,\"training\":{\"epochs\":7}}", &tj), 0);
    svc = render_service(&tj);
    TEST_EQ_STR(str_at(svc, "metadata.name"), "spam");
    TEST_EQ_STR(str_at(svc, "spec.clusterIP"), "None");
    TEST_CHECK(json_is_true(json_object_get(json_object_get(svc, "spec"),
                                            "publishNotReadyAddresses")));
    TEST_EQ_STR(json_string_value(json_object_get(
                    json_object_get(json_object_get(svc, "spec"), "selector"),
                    "gantry.dev/job-name")), "spam");
    TEST_EQ_STR(str_at(json_array_get(json_object_get(json_object_get(svc, "metadata"),
                                                      "ownerReferences"), 0), "uid"), "uid-7");

    cm = render_configmap(&tj);
    TEST_EQ_STR(str_at(cm, "metadata.name"), "spam-config");
    text = render_config_json(&tj);
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(cm, "data"), "config.json")),
                text);
    cfg = json_loads(text, 0, NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(cfg, "training"), "epochs")),
                7);
    TEST_EQ_INT(json_integer_value(json_object_get(cfg, "worldSize")), 3);
    TEST_EQ_STR(str_at(cfg, "checkpoint.dir"), "/checkpoints/spam");
    /* saving on stop: on by default, within the pod's default grace of 30 s minus 5 */
    TEST_CHECK(json_is_true(json_object_get(json_object_get(cfg, "checkpoint"), "saveOnStop")));
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(cfg, "checkpoint"),
                                                   "stopSaveSeconds")), 25);
    json_decref(cfg);
    free(text);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"checkpoint\":{\"saveOnStop\":false},\"template\":{\"spec\":"
                         "{\"terminationGracePeriodSeconds\":120}}}", &tj), 0);
    cfg = json_loads((text = render_config_json(&tj)), 0, NULL);
    TEST_CHECK(json_is_false(json_object_get(json_object_get(cfg, "checkpoint"), "saveOnStop")));
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(cfg, "checkpoint"),
                                                   "stopSaveSeconds")), 115);
    json_decref(cfg);
    free(text);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"template\":{\"spec\":{\"terminationGracePeriodSeconds\":6}}}",
                         &tj), 0);
    TEST_EQ_INT(render_stop_save_seconds(&tj), 3);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"template\":{\"spec\":{\"terminationGracePeriodSeconds\":0}}}",
                         &tj), 0);
    TEST_EQ_INT(render_stop_save_seconds(&tj), 1);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"replicas\":3,\"training\":{\"epochs\":7}}", &tj), 0);

    sec = render_secret(&tj, "s3cr3t");
    TEST_EQ_STR(str_at(sec, "metadata.name"), "spam-rdzv");
    TEST_EQ_STR(str_at(sec, "stringData.token"), "s3cr3t");
    json_decref(svc);
    json_decref(cm);
    json_decref(sec);
    tj_cleanup(&tj);
}

/* gang: Workload: the Workload <job> holds one gang of minCount = replicas, controlled by the
 * job; every pod points at it, replacing a template's own workloadRef. gang: None leaves a
 * template's workloadRef alone (a user may manage a Workload of their own). */
static void test_gang_workload(void)
{
    struct tj tj;
    json_t *wl, *pod, *ref;

    TEST_EQ_INT(load_job("{\"replicas\":3,\"runPolicy\":{\"schedulingPolicy\":"
                         "{\"gang\":\"Workload\"}},\"template\":{\"spec\":{\"workloadRef\":"
                         "{\"name\":\"mine\",\"podGroup\":\"g\"}}}}", &tj), 0);
    wl = render_workload(&tj);
    TEST_EQ_STR(str_at(wl, "apiVersion"), "scheduling.k8s.io/v1alpha1");
    TEST_EQ_STR(str_at(wl, "kind"), "Workload");
    TEST_EQ_STR(str_at(wl, "metadata.name"), "spam");
    TEST_EQ_STR(str_at(wl, "metadata.namespace"), tj.ns);
    TEST_EQ_STR(str_at(json_array_get(json_object_get(json_object_get(wl, "metadata"),
                                                      "ownerReferences"), 0), "uid"), "uid-7");
    TEST_EQ_STR(str_at(wl, "spec.controllerRef.kind"), "TrainingJob");
    TEST_EQ_STR(str_at(wl, "spec.controllerRef.apiGroup"), "gantry.dev");
    TEST_EQ_STR(str_at(wl, "spec.controllerRef.name"), "spam");
    TEST_EQ_INT(json_array_size(json_object_get(json_object_get(wl, "spec"), "podGroups")), 1);
    TEST_EQ_INT(render_workload_min(wl), 3);
    pod = render_pod(&tj, 2, 0);
    ref = json_object_get(json_object_get(pod, "spec"), "workloadRef");
    TEST_EQ_STR(str_at(ref, "name"), "spam");
    TEST_EQ_STR(str_at(ref, "podGroup"), "workers");
    TEST_CHECK(json_object_get(ref, "podGroupReplicaKey") == NULL);
    render_pod_gang_key(pod, 2, 1796025600);
    TEST_EQ_STR(str_at(ref, "podGroupReplicaKey"), "g2-1796025600");
    json_decref(pod);
    json_decref(wl);
    tj_cleanup(&tj);

    TEST_EQ_INT(load_job("{\"replicas\":3,\"template\":{\"spec\":{\"workloadRef\":"
                         "{\"name\":\"mine\",\"podGroup\":\"g\"}}}}", &tj), 0);
    pod = render_pod(&tj, 0, 0);
    TEST_EQ_STR(str_at(json_object_get(json_object_get(pod, "spec"), "workloadRef"), "name"),
                "mine");
    json_decref(pod);
    tj_cleanup(&tj);
    TEST_EQ_INT(load_job("{\"replicas\":2}", &tj), 0);
    pod = render_pod(&tj, 0, 0);
    render_pod_gang_key(pod, 0, 1); /* no workloadRef: nothing to key */
    TEST_CHECK(json_object_get(json_object_get(pod, "spec"), "workloadRef") == NULL);
    json_decref(pod);
    /* minCount read back: none when the group or the gang policy is missing */
    wl = json_loads("{\"spec\":{\"podGroups\":[{\"name\":\"other\",\"policy\":{\"gang\":"
                    "{\"minCount\":9}}},{\"name\":\"workers\",\"policy\":{\"basic\":{}}}]}}",
                    0, NULL);
    TEST_EQ_INT(render_workload_min(wl), -1);
    TEST_EQ_INT(render_workload_min(NULL), -1);
    json_decref(wl);
    tj_cleanup(&tj);
}

static void test_config_is_stable(void)
{
    struct tj a, b;
    char *ta, *tb;

    /* the same job written with keys in another order renders the same bytes */
    TEST_EQ_INT(load_job("{\"training\":{\"epochs\":2,\"batchSize\":8}}", &a), 0);
    TEST_EQ_INT(load_job("{\"training\":{\"batchSize\":8,\"epochs\":2}}", &b), 0);
    ta = render_config_json(&a);
    tb = render_config_json(&b);
    TEST_EQ_STR(ta, tb);
    free(ta);
    free(tb);
    tj_cleanup(&a);
    tj_cleanup(&b);
}

/* render_is_pod_name() agrees with render_pod_name() and refuses near misses. */
static void test_is_pod_name(void)
{
    static const int idx[] = {0, 7, 10, 99, 999};
    char name[RENDER_NAME_MAX];
    struct tj tj;

    TEST_EQ_INT(load_job("{\"replicas\":1000}", &tj), 0);
    for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
        render_pod_name(&tj, idx[i], name, sizeof(name));
        TEST_CHECK(render_is_pod_name(&tj, idx[i], name));
        TEST_CHECK(!render_is_pod_name(&tj, idx[i] + 1, name));
    }
    render_pod_name(&tj, 1, name, sizeof(name));
    TEST_CHECK(!render_is_pod_name(&tj, 10, name));
    render_pod_name(&tj, 10, name, sizeof(name));
    TEST_CHECK(!render_is_pod_name(&tj, 1, name));
    TEST_CHECK(!render_is_pod_name(&tj, 0, ""));
    TEST_CHECK(!render_is_pod_name(&tj, 0, tj.name));
    snprintf(name, sizeof(name), "%s-worker-01", tj.name);
    TEST_CHECK(!render_is_pod_name(&tj, 1, name));
    snprintf(name, sizeof(name), "%sx-worker-1", tj.name);
    TEST_CHECK(!render_is_pod_name(&tj, 1, name));
    TEST_CHECK(!render_is_pod_name(&tj, -1, "x"));
    tj_cleanup(&tj);
}

/* Kueue's Workload: queue, one pod set of count = replicas with the worker's resources (requests
 * filled in from limits, the GPU limit included), the priority class, the name's digest. */
static void test_kueue_workload(void)
{
    struct tj tj;
    json_t *wl, *ps, *c;
    char name[RENDER_NAME_MAX], name2[RENDER_NAME_MAX];

    TEST_EQ_INT(load_job("{\"replicas\":3,\"gpusPerReplica\":2,\"template\":{\"spec\":{"
                         "\"nodeSelector\":{\"pool\":\"a\"},\"containers\":[{\"name\":"
                         "\"worker\",\"resources\":{\"requests\":{\"cpu\":\"4\"},\"limits\":{"
                         "\"memory\":\"8Gi\"}}},{\"name\":\"side\",\"image\":\"s:1\"}]}}}", &tj),
                0);
    snprintf(tj.queue, sizeof(tj.queue), "team-a");
    wl = render_kueue_workload(&tj);
    render_kueue_name(&tj, name, sizeof(name));
    TEST_EQ_STR(str_at(wl, "apiVersion"), "kueue.x-k8s.io/v1beta2");
    TEST_EQ_STR(str_at(wl, "kind"), "Workload");
    TEST_EQ_STR(str_at(wl, "metadata.name"), name);
    TEST_CHECK(strncmp(name, "trainingjob-spam-", 17) == 0 && strlen(name) == 17 + 8);
    c = json_object_get(json_object_get(wl, "metadata"), "labels"); /* keys with dots */
    TEST_EQ_STR(json_string_value(json_object_get(c, "gantry.dev/job-name")), "spam");
    TEST_EQ_STR(json_string_value(json_object_get(c, "kueue.x-k8s.io/job-uid")), "uid-7");
    TEST_EQ_STR(str_at(json_array_get(json_object_get(json_object_get(wl, "metadata"),
                                                      "ownerReferences"), 0), "uid"), "uid-7");
    TEST_EQ_STR(str_at(wl, "spec.queueName"), "team-a");
    TEST_CHECK(json_object_get(json_object_get(wl, "spec"), "priorityClassRef") == NULL);
    ps = json_array_get(json_object_get(json_object_get(wl, "spec"), "podSets"), 0);
    TEST_EQ_STR(str_at(ps, "name"), "workers");
    TEST_EQ_INT(json_integer_value(json_object_get(ps, "count")), 3);
    TEST_CHECK(json_object_get(ps, "minCount") == NULL); /* not elastic: all or nothing */
    TEST_EQ_STR(str_at(ps, "template.spec.nodeSelector.pool"), "a");
    TEST_CHECK(json_object_get(json_object_get(json_object_get(ps, "template"), "spec"),
                               "volumes") == NULL);
    c = container(json_object_get(ps, "template"), "worker");
    TEST_EQ_STR(str_at(c, "resources.requests.cpu"), "4");
    TEST_EQ_STR(str_at(c, "resources.requests.memory"), "8Gi");
    TEST_EQ_STR(str_at(c, "resources.limits.memory"), "8Gi");
    TEST_EQ_INT(json_integer_value(json_object_get(
                    json_object_get(json_object_get(c, "resources"), "requests"),
                    "nvidia.com/gpu")), 2);
    TEST_CHECK(json_object_get(c, "env") == NULL && json_object_get(c, "volumeMounts") == NULL);
    TEST_EQ_STR(str_at(container(json_object_get(ps, "template"), "side"), "image"), "s:1");
    json_decref(wl);

    /* elastic: Kueue may admit as few as minReplicas (partial admission) */
    tj.elastic_min = 2, tj.elastic_max = 4;
    wl = render_kueue_workload(&tj);
    ps = json_array_get(json_object_get(json_object_get(wl, "spec"), "podSets"), 0);
    TEST_EQ_INT(json_integer_value(json_object_get(ps, "minCount")), 2);
    TEST_EQ_INT(json_integer_value(json_object_get(ps, "count")), 3);
    json_decref(wl);
    tj.elastic_min = tj.elastic_max = 0;

    /* the same job, the same name; another queue, priority or replicas, another name */
    render_kueue_name(&tj, name2, sizeof(name2));
    TEST_EQ_STR(name2, name);
    snprintf(tj.priority, sizeof(tj.priority), "high");
    render_kueue_name(&tj, name2, sizeof(name2));
    TEST_CHECK(strcmp(name2, name) != 0);
    wl = render_kueue_workload(&tj);
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.kind"), "WorkloadPriorityClass");
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.group"), "kueue.x-k8s.io");
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.name"), "high");
    json_decref(wl);
    tj.priority[0] = '\0';
    tj.replicas = 4;
    render_kueue_name(&tj, name2, sizeof(name2));
    TEST_CHECK(strcmp(name2, name) != 0);
    tj_cleanup(&tj);

    /* no priority label: the PriorityClass the pods name, as Kueue's integrations take it */
    TEST_EQ_INT(load_job("{\"template\":{\"spec\":{\"priorityClassName\":\"batch-low\"}}}",
                         &tj), 0);
    snprintf(tj.queue, sizeof(tj.queue), "team-a");
    wl = render_kueue_workload(&tj);
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.group"), "scheduling.k8s.io");
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.kind"), "PriorityClass");
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.name"), "batch-low");
    json_decref(wl);
    snprintf(tj.priority, sizeof(tj.priority), "high"); /* the label wins */
    wl = render_kueue_workload(&tj);
    TEST_EQ_STR(str_at(wl, "spec.priorityClassRef.kind"), "WorkloadPriorityClass");
    json_decref(wl);
    tj_cleanup(&tj);
}

int main(void)
{
    TEST_RUN(test_pod_contract);
    TEST_RUN(test_gpu_ranks_and_limit);
    TEST_RUN(test_cpu_nproc);
    TEST_RUN(test_template_merge);
    TEST_RUN(test_service_configmap_secret);
    TEST_RUN(test_gang_workload);
    TEST_RUN(test_kueue_workload);
    TEST_RUN(test_config_is_stable);
    TEST_RUN(test_is_pod_name);
    return test_summary();
}
