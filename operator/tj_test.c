/* TrainingJob parsing: defaults as in the CRD, validation messages that name the field. */
#include "operator/tj.h"

#include <string.h>

#include "common/test.h"
#include "operator/kube/kube_err.h"

#define META "\"apiVersion\":\"gantry.dev/v1alpha1\",\"kind\":\"TrainingJob\","                   \
             "\"metadata\":{\"name\":\"spam\",\"namespace\":\"ml\",\"uid\":\"u-1\",\"generation\":2}"

/* Parses a TrainingJob from JSON text; returns tj_parse()'s result, err filled. */
static int parse(const char *text, struct tj *tj, char *err, size_t n)
{
    json_error_t je;
    json_t *obj = json_loads(text, 0, &je);
    int rc;

    if (!obj) {
        fprintf(stderr, "bad test JSON: %s (line %d)\n", je.text, je.line);
        memset(tj, 0, sizeof(*tj));
        return 99;
    }
    rc = tj_parse(obj, tj, err, n);
    json_decref(obj);
    return rc;
}

static double training_num(const struct tj *tj, const char *sub, const char *key)
{
    const json_t *o = sub ? json_object_get(tj->training, sub) : tj->training;
    return json_number_value(json_object_get(o, key));
}

static void test_minimal_gets_defaults(void)
{
    struct tj tj;
    char err[TJ_ERR_MAX];

    TEST_EQ_INT(parse("{" META ",\"spec\":{}}", &tj, err, sizeof(err)), 0);
    TEST_EQ_STR(err, "");
    TEST_EQ_STR(tj.name, "spam");
    TEST_EQ_STR(tj.ns, "ml");
    TEST_EQ_STR(tj.uid, "u-1");
    TEST_EQ_INT(tj.generation, 2);
    TEST_EQ_INT(tj.replicas, 1);
    TEST_EQ_INT(tj.gpus, 0);
    TEST_EQ_INT(tj_nproc(&tj), 1);
    TEST_EQ_INT(tj.port, 29500);
    TEST_EQ_STR(tj.image, "gantry-worker:0.1.0");
    TEST_EQ_STR(tj.pull_policy, "IfNotPresent");
    TEST_EQ_STR(tj.ckpt_claim, "");
    TEST_EQ_STR(tj.ckpt_path, "/checkpoints");
    TEST_EQ_INT(tj.ckpt_interval, 200);
    TEST_EQ_INT(tj.ckpt_keep, 3);
    TEST_CHECK(tj.ckpt_save_on_stop);
    TEST_EQ_INT(tj.backoff_limit, 3);
    TEST_EQ_INT(tj.active_deadline_s, -1);
    TEST_EQ_INT(tj.ttl_s, -1);
    TEST_CHECK(!tj.suspend);
    TEST_EQ_INT(tj.clean, TJ_CLEAN_RUNNING);
    TEST_EQ_INT(tj.gang, TJ_GANG_NONE);
    TEST_CHECK(tj.tmpl == NULL);
    TEST_EQ_INT(tj.status.phase, TJ_PHASE_NONE);
    /* the rendered training config is complete even though the object had none of it */
    TEST_EQ_STR(json_string_value(json_object_get(tj.training, "task")), "text-classification");
    TEST_EQ_INT(training_num(&tj, "model", "hidden"), 128);
    TEST_EQ_INT(training_num(&tj, "model", "heads"), 4);
    TEST_EQ_INT(training_num(&tj, "model", "layers"), 2);
    TEST_EQ_INT(training_num(&tj, "model", "maxSeqLen"), 256);
    TEST_EQ_INT(training_num(&tj, NULL, "epochs"), 3);
    TEST_EQ_INT(training_num(&tj, NULL, "batchSize"), 32);
    TEST_NEAR(training_num(&tj, NULL, "learningRate"), 3e-4, 1e-12);
    TEST_CHECK(json_is_true(json_object_get(tj.training, "scaleLearningRate")));
    /* fields without a CRD default stay absent: the worker's own default applies */
    TEST_CHECK(json_object_get(tj.training, "data") == NULL);
    TEST_CHECK(json_object_get(tj.training, "warmupSteps") == NULL);
    tj_cleanup(&tj);
}

static void test_full_spec(void)
{
    struct tj tj;
    char err[TJ_ERR_MAX];
    int rc = parse("{" META ",\"spec\":{\"replicas\":4,\"gpusPerReplica\":8,\"image\":\"w:1\","
                   "\"port\":23456,"
                   "\"training\":{\"model\":{\"type\":\"ngram\",\"hidden\":512,\"heads\":8},"
                   "\"data\":{\"train\":\"/d/t.jsonl\",\"vocabSize\":5000,"
                   "\"textField\":\"premise\",\"textPairField\":\"hypothesis\"},"
                   "\"learningRate\":1e-4,"
                   "\"scaleLearningRate\":false,\"lrDecay\":\"linear\",\"warmupSteps\":-1,"
                   "\"gradBucketMB\":25},"
                   "\"checkpoint\":{\"claimName\":\"ckpt\",\"path\":\"/ck\",\"keep\":5,"
                   "\"saveOnStop\":false},"
                   "\"runPolicy\":{\"backoffLimit\":0,\"activeDeadlineSeconds\":60,"
                   "\"podFailurePolicy\":{\"rules\":[{\"action\":\"FailJob\",\"onExitCodes\":"
                   "{\"operator\":\"NotIn\",\"values\":[0,1,137]}},{\"action\":\"Ignore\","
                   "\"onPodConditions\":[{\"type\":\"DisruptionTarget\",\"status\":\"True\"}]}]},"
                   "\"ttlSecondsAfterFinished\":0,\"suspend\":true,\"cleanPodPolicy\":\"All\","
                   "\"schedulingPolicy\":{\"gang\":\"Workload\"}},"
                   "\"template\":{\"spec\":{\"nodeSelector\":{\"a\":\"b\"}}}},"
                   "\"status\":{\"phase\":\"Restarting\",\"restarts\":2,\"observedGeneration\":1,"
                   "\"startTime\":\"2026-11-30T07:00:00Z\",\"conditions\":[{\"type\":\"Created\","
                   "\"status\":\"True\",\"reason\":\"R\",\"message\":\"\","
                   "\"lastTransitionTime\":\"2026-11-30T06:00:00Z\"}]}}",
                   &tj, err, sizeof(err));

    TEST_EQ_INT(rc, 0);
    TEST_EQ_STR(err, "");
    TEST_EQ_INT(tj.replicas, 4);
    TEST_EQ_INT(tj.gpus, 8);
    TEST_EQ_INT(tj_nproc(&tj), 8);
    TEST_EQ_INT(tj.port, 23456);
    TEST_EQ_STR(tj.image, "w:1");
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(tj.training, "model"), "type")),
                "ngram");
    TEST_EQ_STR(json_string_value(json_object_get(json_object_get(tj.training, "data"),
                                                  "textPairField")), "hypothesis");
    TEST_NEAR(training_num(&tj, NULL, "learningRate"), 1e-4, 1e-12);
    TEST_CHECK(json_is_false(json_object_get(tj.training, "scaleLearningRate")));
    TEST_EQ_STR(json_string_value(json_object_get(tj.training, "lrDecay")), "linear");
    TEST_EQ_INT(json_integer_value(json_object_get(tj.training, "warmupSteps")), -1);
    TEST_NEAR(training_num(&tj, NULL, "gradBucketMB"), 25.0, 0.0);
    TEST_EQ_STR(tj.ckpt_claim, "ckpt");
    TEST_EQ_STR(tj.ckpt_path, "/ck");
    TEST_EQ_INT(tj.ckpt_keep, 5);
    TEST_CHECK(!tj.ckpt_save_on_stop);
    TEST_EQ_INT(tj.backoff_limit, 0);
    TEST_EQ_INT(tj.fp_nrules, 2);
    TEST_EQ_INT(tj.fp_rules[0].action, TJ_FP_FAIL_JOB);
    TEST_CHECK(tj.fp_rules[0].not_in && !tj.fp_rules[0].on_disruption);
    TEST_EQ_INT(tj.fp_rules[0].ncodes, 3);
    TEST_EQ_INT(tj.fp_rules[0].codes[2], 137);
    TEST_EQ_INT(tj.fp_rules[1].action, TJ_FP_IGNORE);
    TEST_CHECK(tj.fp_rules[1].on_disruption);
    TEST_EQ_INT(tj.active_deadline_s, 60);
    TEST_EQ_INT(tj.ttl_s, 0);
    TEST_CHECK(tj.suspend);
    TEST_EQ_INT(tj.clean, TJ_CLEAN_ALL);
    TEST_EQ_INT(tj.gang, TJ_GANG_WORKLOAD);
    TEST_EQ_STR(tj_gang_str(tj.gang), "Workload");
    TEST_CHECK(json_is_object(json_object_get(json_object_get(tj.tmpl, "spec"), "nodeSelector")));
    TEST_EQ_INT(tj.status.phase, TJ_PHASE_RESTARTING);
    TEST_EQ_INT(tj.status.restarts, 2);
    TEST_EQ_INT(tj.status.observed_generation, 1);
    TEST_EQ_INT(tj.status.start_time, 1796022000LL);
    TEST_EQ_INT(tj.status.completion_time, 0);
    TEST_EQ_INT(tj.status.conds.n, 1);
    TEST_CHECK(cond_is_true(&tj.status.conds, COND_CREATED));
    TEST_CHECK(tj.status_raw != NULL);
    tj_cleanup(&tj);
}

/* Each invalid spec is refused with a message that names the field. */
static void test_errors_name_the_field(void)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"{\"replicas\":0}", "spec.replicas: must be >= 1 (got 0)"},
        {"{\"replicas\":-3}", "spec.replicas: must be >= 1 (got -3)"},
        {"{\"replicas\":1001}", "spec.replicas: must be <= 1000 (got 1001)"},
        {"{\"replicas\":\"4\"}", "spec.replicas: must be an integer"},
        {"{\"replicas\":2.5}", "spec.replicas: must be an integer"},
        {"{\"replicas\":1e46}", "spec.replicas: must be an integer"}, /* was UB (fuzz_rec) */
        {"{\"gpusPerReplica\":-1}", "spec.gpusPerReplica: must be >= 0 (got -1)"},
        {"{\"nprocPerNode\":0}", "spec.nprocPerNode: must be >= 1 (got 0)"},
        {"{\"nprocPerNode\":65}", "spec.nprocPerNode: must be <= 64 (got 65)"},
        {"{\"gpusPerReplica\":2,\"nprocPerNode\":4}",
         "spec.nprocPerNode: must equal spec.gpusPerReplica when the pods have GPUs"},
        {"{\"image\":\"w:latest\"}", "spec.image: pin a version"},
        {"{\"image\":\"\"}", "spec.image: must not be empty"},
        {"{\"port\":80}", "spec.port: must be >= 1024 (got 80)"},
        {"{\"port\":9090}", "spec.port: 9090 is where rank 0 serves /metrics"},
        {"{\"training\":{\"model\":{\"hidden\":130,\"heads\":4}}}",
         "spec.training.model.hidden: 130 must be divisible by spec.training.model.heads (4)"},
        {"{\"training\":{\"model\":{\"heads\":0}}}",
         "spec.training.model.heads: must be >= 1 (got 0)"},
        {"{\"training\":{\"model\":{\"type\":\"rnn\"}}}",
         "spec.training.model.type: unsupported value \"rnn\""},
        {"{\"training\":{\"learningRate\":0}}",
         "spec.training.learningRate: must be >= 1e-09 (got 0)"},
        {"{\"training\":{\"learningRate\":\"fast\"}}", "spec.training.learningRate: must be a number"},
        {"{\"training\":{\"model\":{\"layers\":129}}}",
         "spec.training.model.layers: must be <= 128 (got 129)"},
        {"{\"training\":{\"lrDecay\":\"step\"}}",
         "spec.training.lrDecay: unsupported value \"step\"; use one of cosine|linear|constant"},
        {"{\"training\":{\"classWeight\":\"inverse\"}}",
         "spec.training.classWeight: unsupported value \"inverse\"; use one of none|balanced"},
        {"{\"training\":{\"initFrom\":\"/checkpoints/base\",\"data\":{\"vocab\":\"/v.txt\"}}}",
         "spec.training.data.vocab: set, and initFrom brings its model's own vocab"},
        {"{\"training\":{\"initFrom\":3}}", "spec.training.initFrom: must be a string"},
        {"{\"training\":{\"classWeights\":[3]}}",
         "spec.training.classWeights: must be an object of label: weight"},
        {"{\"training\":{\"classWeights\":{\"spam\":\"3\"}}}",
         "spec.training.classWeights.spam: must be a number"},
        {"{\"training\":{\"classWeights\":{\"spam\":-1}}}",
         "spec.training.classWeights.spam: must be >= 0 (got -1)"},
        {"{\"training\":{\"classWeights\":{\"\":1}}}",
         "spec.training.classWeights: a label must not be empty"},
        {"{\"training\":{\"classWeights\":{\"spam\":3},\"classWeight\":\"balanced\"}}",
         "spec.training.classWeights: set, and classWeight is balanced too"},
        {"{\"training\":{\"labelSmoothing\":1}}",
         "spec.training.labelSmoothing: must be <= 0.99 (got 1)"},
        {"{\"training\":{\"lossScale\":1024}}",
         "spec.training.lossScale: unknown field (gantry-worker would refuse it)"},
        {"{\"training\":{\"model\":{\"hiden\":64}}}", "spec.training.model.hiden: unknown field"},
        {"{\"training\":{\"data\":{\"strict\":1}}}", "spec.training.data.strict: must be true or false"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[]}}}",
         "spec.runPolicy.podFailurePolicy: must be {rules: [...]} with 1 to 20 rules"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Retry\","
         "\"onExitCodes\":{\"operator\":\"In\",\"values\":[1]}}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].action: must be FailJob, Ignore or Count"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Ignore\"}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0]: give exactly one of onExitCodes and "
         "onPodConditions"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Count\","
         "\"onExitCodes\":{\"operator\":\"In\",\"values\":[3,0]}}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].onExitCodes.values[1]: 0 cannot be In"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Count\","
         "\"onExitCodes\":{\"operator\":\"NotIn\",\"values\":[3,256]}}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].onExitCodes.values[1]: must be an exit code"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Count\","
         "\"onExitCodes\":{\"operator\":\"In\",\"values\":[3,3]}}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].onExitCodes.values[1]: 3 is listed twice"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Count\","
         "\"onExitCodes\":{\"operator\":\"Is\",\"values\":[3]}}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].onExitCodes.operator: must be In or NotIn"},
        {"{\"runPolicy\":{\"podFailurePolicy\":{\"rules\":[{\"action\":\"Count\","
         "\"onPodConditions\":[{\"type\":\"Ready\"}]}]}}}",
         "spec.runPolicy.podFailurePolicy.rules[0].onPodConditions[0].type: only DisruptionTarget"},
        {"{\"training\":{\"task\":\"multi-label-classification\",\"labelSmoothing\":0.1}}",
         "spec.training.labelSmoothing: not with task: multi-label-classification"},
        {"{\"training\":{\"task\":\"multi-label-classification\",\"classWeight\":\"balanced\"}}",
         "spec.training.classWeight: not with task: multi-label-classification"},
        {"{\"training\":{\"task\":\"multi-label-classification\",\"classWeights\":{\"a\":2}}}",
         "spec.training.classWeights: not with task: multi-label-classification"},
        {"{\"training\":{\"task\":\"ranking\"}}", "spec.training.task"},
        {"{\"training\":{\"task\":\"regression\",\"data\":{\"labelNames\":[\"a\",\"b\"]}}}",
         "spec.training.data.labelNames: not with task: regression"},
        {"{\"training\":{\"task\":\"regression\",\"bestMetric\":\"accuracy\"}}",
         "spec.training.bestMetric: accuracy is not a metric of task: regression"},
        {"{\"training\":{\"bestMetric\":\"pearson\"}}",
         "spec.training.bestMetric: pearson is not a metric of task: text-classification"},
        {"{\"training\":{\"task\":\"regression\",\"labelSmoothing\":0.2}}",
         "spec.training.labelSmoothing: not with task: regression"},
        {"{\"training\":{\"data\":{\"labelSeparator\":\";;\"}}}",
         "spec.training.data.labelSeparator: \";;\" must be one character"},
        {"{\"training\":{\"data\":{\"labelSeparator\":\"\\t\"}}}",
         "spec.training.data.labelSeparator: \"\t\" must be one character"},
        {"{\"training\":{\"data\":{\"textPairField\":\"text\"}}}",
         "spec.training.data.textPairField: \"text\" is data.textField's too"},
        {"{\"training\":{\"data\":{\"textField\":\"y\",\"labelField\":\"y\"}}}",
         "spec.training.data.labelField: \"y\" is data.textField's too"},
        {"{\"training\":{\"data\":{\"textPairField\":\"b\",\"clsSep\":false}}}",
         "spec.training.data.textPairField: text pairs are encoded as [CLS] text [SEP] pair [SEP]"},
        {"{\"training\":{\"model\":{\"maxSeqLen\":2},\"data\":{\"textPairField\":\"b\"}}}",
         "spec.training.model.maxSeqLen: 2 leaves no room for a text pair's [CLS] and two [SEP]"},
        {"{\"training\":{\"data\":{\"labelField\":\"0123456789012345678901234567890123456789"
         "012345678901234567890123\"}}}", "spec.training.data.labelField: must be at most 63"},
        {"{\"training\":{\"data\":{\"textField\":\"\"}}}",
         "spec.training.data.textField: must not be empty"},
        {"{\"training\":{\"data\":{\"labelNames\":[\"a\"]}}}",
         "spec.training.data.labelNames: must be a list of 2 to 4096 class names"},
        {"{\"training\":{\"data\":{\"labelNames\":[\"a\",\"b\",\"a\"]}}}",
         "spec.training.data.labelNames[2]: \"a\" is listed twice"},
        {"{\"training\":{\"data\":{\"labelNames\":[\"a\",\"\"]}}}",
         "spec.training.data.labelNames[1]: must be a non-empty string"},
        {"{\"training\":{\"data\":[]}}", "spec.training.data: must be an object"},
        {"{\"training\":{\"batchSize\":0}}", "spec.training.batchSize: must be >= 1 (got 0)"},
        {"{\"training\":{\"batchSize\":65536,\"gradAccumSteps\":65536}}",
         "spec.training.gradAccumSteps: batchSize x gradAccumSteps (4294967296)"},
        {"{\"training\":{\"epochs\":0}}", "spec.training.epochs: must be >= 1 (got 0)"},
        {"{\"training\":{\"data\":{\"train\":\"\"}}}", "spec.training.data.train: must not be empty"},
        {"{\"training\":[]}", "spec.training: must be an object"},
        {"{\"checkpoint\":{\"path\":\"ck\"}}", "spec.checkpoint.path: must be an absolute path"},
        {"{\"checkpoint\":{\"keep\":0}}", "spec.checkpoint.keep: must be >= 1 (got 0)"},
        {"{\"runPolicy\":{\"backoffLimit\":-1}}", "spec.runPolicy.backoffLimit: must be >= 0"},
        {"{\"runPolicy\":{\"activeDeadlineSeconds\":0}}",
         "spec.runPolicy.activeDeadlineSeconds: must be >= 1 (got 0)"},
        {"{\"runPolicy\":{\"cleanPodPolicy\":\"Some\"}}",
         "spec.runPolicy.cleanPodPolicy: must be Running, All or None (got \"Some\")"},
        {"{\"runPolicy\":{\"suspend\":\"yes\"}}", "spec.runPolicy.suspend: must be true or false"},
        {"{\"runPolicy\":{\"schedulingPolicy\":{\"gang\":\"Volcano\"}}}",
         "spec.runPolicy.schedulingPolicy.gang: must be None or Workload (got \"Volcano\")"},
        {"{\"runPolicy\":{\"schedulingPolicy\":true}}",
         "spec.runPolicy.schedulingPolicy: must be an object"},
        {"{\"template\":7}", "spec.template: must be an object"},
        {"{\"training\":{\"device\":\"cuda\"}}",
         "spec.training.device: cuda needs GPUs: set spec.gpusPerReplica > 0"},
        {"{\"gpusPerReplica\":1,\"training\":{\"precision\":\"bf16\",\"model\":{\"type\":"
         "\"ngram\"}}}",
         "spec.training.precision: bf16 is for model.type transformer"},
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"fused\",\"model\":{\"type\":"
         "\"ngram\"}}}",
         "spec.training.attention: fused is for model.type transformer"},
        {"{\"training\":{\"device\":\"tpu\"}}",
         "spec.training.device: unsupported value \"tpu\"; use one of cpu|cuda"},
        {"{\"training\":{\"precision\":\"bf16\"}}",
         "spec.training.precision: bf16 needs device: cuda"},
        {"{\"gpusPerReplica\":1,\"training\":{\"device\":\"cpu\",\"precision\":\"bf16\"}}",
         "spec.training.precision: bf16 needs device: cuda"},
        {"{\"training\":{\"earlyStoppingPatience\":3,\"data\":{\"eval\":\"e\"}}}",
         "spec.training.earlyStoppingPatience: 3, but evalInterval is 0"},
        {"{\"training\":{\"bestMetric\":\"f1\"}}",
         "spec.training.bestMetric: unsupported value \"f1\"; use one of loss|accuracy|macro_f1"},
        {"{\"training\":{\"data\":{\"eval\":\"e\",\"evalFraction\":0.1}}}",
         "spec.training.data.evalFraction: hold out part of data.train (evalFraction) or give an "
         "evaluation file (eval), not both"},
        {"{\"training\":{\"data\":{\"evalFraction\":0.6}}}",
         "spec.training.data.evalFraction"},
        {"{\"training\":{\"evalInterval\":100}}",
         "spec.training.evalInterval: 100, but spec.training.data.eval is not set"},
        {"{\"training\":{\"evalInterval\":100,\"data\":{\"eval\":\"\"}}}",
         "spec.training.evalInterval: 100, but spec.training.data.eval is not set"},
        {"{\"training\":{\"attention\":\"fused\"}}",
         "spec.training.attention: fused is a GPU kernel and needs device: cuda"},
        {"{\"training\":{\"cudaGraphs\":true}}",
         "spec.training.cudaGraphs: true needs device: cuda"},
        {"{\"gpusPerReplica\":1,\"training\":{\"device\":\"cpu\",\"cudaGraphs\":true}}",
         "spec.training.cudaGraphs: true needs device: cuda"},
        {"{\"gpusPerReplica\":1,\"training\":{\"cudaGraphs\":\"yes\"}}",
         "spec.training.cudaGraphs"},
        {"{\"gpusPerReplica\":1,\"training\":{\"autotune\":\"yes\"}}",
         "spec.training.autotune"},
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"fused\",\"model\":{\"hidden\":512,"
         "\"heads\":2}}}",
         "spec.training.attention: fused takes head sizes (model.hidden / model.heads) up to 128, "
         "got 256"},
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"flash\"}}",
         "spec.training.attention: unsupported value \"flash\"; use one of auto|unfused|fused"},
        {"{\"gpusPerReplica\":1,\"training\":{\"precision\":\"fp16\"}}",
         "spec.training.precision: unsupported value \"fp16\"; use one of fp32|bf16"},
        {"{\"training\":{\"gradBucketMB\":-1}}",
         "spec.training.gradBucketMB: must be >= 0 (got -1)"},
        {"{\"training\":{\"gradBucketMB\":4096.5}}",
         "spec.training.gradBucketMB: must be <= 4096 (got 4096.5)"},
        {"{\"training\":{\"gradBucketMB\":\"25\"}}",
         "spec.training.gradBucketMB: must be a number"},
    };
    char text[1024], err[TJ_ERR_MAX];
    struct tj tj;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "{" META ",\"spec\":%s}", cases[i].spec);
        TEST_EQ_INT(parse(text, &tj, err, sizeof(err)), OP_EINVALID);
        if (!TEST_CHECK(strstr(err, cases[i].want) != NULL))
            fprintf(stderr, "       spec %s\n       got  %s\n       want %s\n", cases[i].spec, err,
                    cases[i].want);
        tj_cleanup(&tj);
    }
    /* <checkpoint.path>/<name> is the worker's checkpoint.dir, at most 1023 bytes */
    static char big[1400];
    for (int len = 1015; len <= 1023; len += 8) {
        int n = snprintf(big, sizeof(big), "{" META ",\"spec\":{\"checkpoint\":{\"path\":\"/");
        memset(big + n, 'a', (size_t)len - 1);
        snprintf(big + n + len - 1, sizeof(big) - (size_t)(n + len - 1), "\"}}}");
        int rc = parse(big, &tj, err, sizeof(err));
        TEST_EQ_INT(rc, len == 1015 ? 0 : OP_EINVALID);
        TEST_CHECK(len == 1015 || strstr(err, "spec.checkpoint.path: 1023 bytes, and with"));
        tj_cleanup(&tj);
    }
}

/* Unset, the device follows the GPUs the pods get; set, it is kept. */
static void test_device_default(void)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"{}", "cpu"},
        {"{\"gpusPerReplica\":2}", "cuda"},
        {"{\"gpusPerReplica\":2,\"training\":{\"device\":\"cpu\"}}", "cpu"},
        {"{\"gpusPerReplica\":1,\"training\":{\"device\":\"cuda\"}}", "cuda"},
        /* bf16 is accepted where the device is (or defaults to) cuda */
        {"{\"gpusPerReplica\":1,\"training\":{\"precision\":\"bf16\"}}", "cuda"},
        {"{\"gpusPerReplica\":1,\"training\":{\"device\":\"cuda\",\"precision\":\"bf16\"}}",
         "cuda"},
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"fused\"}}", "cuda"},
        /* auto (the worker's default) on either device: fused where it runs */
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"auto\"}}", "cuda"},
        {"{\"training\":{\"attention\":\"auto\"}}", "cpu"},
        {"{\"gpusPerReplica\":1,\"training\":{\"attention\":\"auto\",\"model\":{\"hidden\":512,"
         "\"heads\":2}}}", "cuda"},
    };
    char text[1024], err[TJ_ERR_MAX];
    struct tj tj;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "{" META ",\"spec\":%s}", cases[i].spec);
        TEST_EQ_INT(parse(text, &tj, err, sizeof(err)), 0);
        TEST_EQ_STR(json_string_value(json_object_get(tj.training, "device")), cases[i].want);
        tj_cleanup(&tj);
    }
}

static void test_name_length_bound(void)
{
    /* <name>-worker-<replicas-1> must fit 63 characters */
    TEST_EQ_INT(tj_name_max(1), 54);
    TEST_EQ_INT(tj_name_max(10), 54);
    TEST_EQ_INT(tj_name_max(11), 53);
    TEST_EQ_INT(tj_name_max(100), 53);
    TEST_EQ_INT(tj_name_max(101), 52);
    TEST_EQ_INT(tj_name_max(1000), 52);

    char name[64], text[512], err[TJ_ERR_MAX];
    struct tj tj;

    memset(name, 'a', 53);
    name[53] = '\0'; /* 53 characters: fine for 100 replicas, too long for 101 */
    snprintf(text, sizeof(text),
             "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"n\","
             "\"uid\":\"u\"},\"spec\":{\"replicas\":100}}", name);
    TEST_EQ_INT(parse(text, &tj, err, sizeof(err)), 0);
    tj_cleanup(&tj);
    snprintf(text, sizeof(text),
             "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"n\","
             "\"uid\":\"u\"},\"spec\":{\"replicas\":101}}", name);
    TEST_EQ_INT(parse(text, &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "metadata.name: must be at most 52 characters with replicas 101 (it "
                           "has 53)") != NULL);
    tj_cleanup(&tj);

    TEST_EQ_INT(parse("{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"9lives\",\"namespace\":"
                      "\"n\",\"uid\":\"u\"},\"spec\":{}}", &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "metadata.name: \"9lives\" must be a DNS-1035 label") != NULL);
    tj_cleanup(&tj);
}

static void test_all_errors_reported_and_bounded(void)
{
    struct tj tj;
    char err[TJ_ERR_MAX], tiny[24];

    TEST_EQ_INT(parse("{" META ",\"spec\":{\"replicas\":0,\"port\":1,\"training\":{\"epochs\":0}}}",
                      &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.replicas") && strstr(err, "spec.port") &&
               strstr(err, "spec.training.epochs"));
    tj_cleanup(&tj);
    /* a small buffer truncates, never overflows */
    TEST_EQ_INT(parse("{" META ",\"spec\":{\"replicas\":0,\"port\":1}}", &tj, tiny, sizeof(tiny)),
                OP_EINVALID);
    TEST_EQ_INT(strlen(tiny), sizeof(tiny) - 1);
    tj_cleanup(&tj);
    /* and no buffer at all is fine */
    TEST_EQ_INT(parse("{" META ",\"spec\":{\"replicas\":0}}", &tj, NULL, 0), OP_EINVALID);
    tj_cleanup(&tj);
}

static void test_not_a_trainingjob(void)
{
    struct tj tj;
    char err[TJ_ERR_MAX];

    TEST_EQ_INT(parse("{\"kind\":\"Pod\",\"metadata\":{}}", &tj, err, sizeof(err)), OP_EPARSE);
    TEST_CHECK(strstr(err, "kind Pod") != NULL);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse("[1]", &tj, err, sizeof(err)), OP_EPARSE);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse("{\"kind\":\"TrainingJob\",\"metadata\":{\"namespace\":\"n\",\"uid\":\"u\"},"
                      "\"spec\":{}}", &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "metadata.name: must be set") != NULL);
    tj_cleanup(&tj);
}

static void test_phase_names(void)
{
    TEST_EQ_INT(tj_phase_parse("Running"), TJ_PHASE_RUNNING);
    TEST_EQ_INT(tj_phase_parse("Suspended"), TJ_PHASE_SUSPENDED);
    TEST_EQ_INT(tj_phase_parse("running"), TJ_PHASE_NONE);
    TEST_EQ_INT(tj_phase_parse(NULL), TJ_PHASE_NONE);
    TEST_EQ_STR(tj_phase_str(TJ_PHASE_FAILED), "Failed");
    TEST_CHECK(tj_phase_terminal(TJ_PHASE_SUCCEEDED) && tj_phase_terminal(TJ_PHASE_FAILED));
    TEST_CHECK(!tj_phase_terminal(TJ_PHASE_SUSPENDED));
}

/* The Kueue labels: the LocalQueue and the WorkloadPriorityClass, each a DNS subdomain. */
static void test_kueue_labels(void)
{
    char err[TJ_ERR_MAX];
    struct tj tj;

#define KMETA(labels)                                                                         \
    "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"spam\",\"namespace\":\"ml\","          \
    "\"uid\":\"u-1\",\"labels\":" labels "},\"spec\":{}}"
    TEST_EQ_INT(parse(KMETA("{\"kueue.x-k8s.io/queue-name\":\"team-a\","
                            "\"kueue.x-k8s.io/priority-class\":\"high.v1\",\"app\":\"x\"}"),
                      &tj, err, sizeof(err)), 0);
    TEST_EQ_STR(tj.queue, "team-a");
    TEST_EQ_STR(tj.priority, "high.v1");
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(KMETA("{\"app\":\"x\"}"), &tj, err, sizeof(err)), 0);
    TEST_EQ_STR(tj.queue, "");
    TEST_EQ_STR(tj.priority, "");
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(KMETA("{\"kueue.x-k8s.io/queue-name\":\"Team_A\"}"), &tj, err,
                      sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "metadata.labels[\"kueue.x-k8s.io/queue-name\"]: \"Team_A\" must "
                           "name a LocalQueue") != NULL);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(KMETA("{\"kueue.x-k8s.io/queue-name\":\"q\","
                            "\"kueue.x-k8s.io/priority-class\":\"-x\"}"), &tj, err,
                      sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "kueue.x-k8s.io/priority-class") != NULL);
    tj_cleanup(&tj);
#undef KMETA
}

static void test_elastic_policy(void)
{
    char err[TJ_ERR_MAX], text[512], name[64];
    struct tj tj;

#define ESPEC(spec) "{" META ",\"spec\":" spec "}"
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":3,\"elasticPolicy\":{\"minReplicas\":2,"
                            "\"maxReplicas\":6}}"), &tj, err, sizeof(err)), 0);
    TEST_EQ_INT(tj.elastic_min, 2);
    TEST_EQ_INT(tj.elastic_max, 6);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":3}"), &tj, err, sizeof(err)), 0);
    TEST_EQ_INT(tj.elastic_min, 0); /* not elastic */
    TEST_EQ_INT(tj.elastic_max, 0);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":7,\"elasticPolicy\":{\"minReplicas\":2,"
                            "\"maxReplicas\":6}}"), &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.replicas: must be within spec.elasticPolicy's 2..6 (got 7)"));
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":3,\"elasticPolicy\":{\"minReplicas\":4,"
                            "\"maxReplicas\":2}}"), &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.elasticPolicy.minReplicas: must be <= maxReplicas (got 4 > 2)"));
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"elasticPolicy\":{\"maxReplicas\":2}}"), &tj, err,
                      sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.elasticPolicy.minReplicas: required"));
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"elasticPolicy\":{\"minReplicas\":1,\"maxReplicas\":1001}}"),
                      &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.elasticPolicy.maxReplicas: must be <= 1000 (got 1001)"));
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"elasticPolicy\":[1,2]}"), &tj, err, sizeof(err)),
                OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.elasticPolicy: must be an object"));
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":3,\"elasticPolicy\":{\"minReplicas\":2,"
                            "\"maxReplicas\":6,\"shrinkAfterSeconds\":90}}"), &tj, err,
                      sizeof(err)), 0);
    TEST_EQ_INT(tj.elastic_shrink_s, 90);
    tj_cleanup(&tj);
    TEST_EQ_INT(parse(ESPEC("{\"replicas\":3,\"elasticPolicy\":{\"minReplicas\":2,"
                            "\"maxReplicas\":6,\"shrinkAfterSeconds\":90},\"runPolicy\":"
                            "{\"schedulingPolicy\":{\"gang\":\"Workload\"}}}"), &tj, err,
                      sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "spec.elasticPolicy.shrinkAfterSeconds: not with spec.runPolicy."
                           "schedulingPolicy.gang Workload"));
    tj_cleanup(&tj);
#undef ESPEC
    /* the name must fit maxReplicas' pod names already: 53 characters fit 100, not 101 */
    memset(name, 'a', 53);
    name[53] = '\0';
    snprintf(text, sizeof(text),
             "{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"%s\",\"namespace\":\"n\","
             "\"uid\":\"u\"},\"spec\":{\"replicas\":2,\"elasticPolicy\":{\"minReplicas\":1,"
             "\"maxReplicas\":101}}}", name);
    TEST_EQ_INT(parse(text, &tj, err, sizeof(err)), OP_EINVALID);
    TEST_CHECK(strstr(err, "metadata.name: must be at most 52 characters with "
                           "elasticPolicy.maxReplicas 101 (it has 53)") != NULL);
    tj_cleanup(&tj);
}

int main(void)
{
    TEST_RUN(test_kueue_labels);
    TEST_RUN(test_elastic_policy);
    TEST_RUN(test_minimal_gets_defaults);
    TEST_RUN(test_full_spec);
    TEST_RUN(test_errors_name_the_field);
    TEST_RUN(test_device_default);
    TEST_RUN(test_name_length_bound);
    TEST_RUN(test_all_errors_reported_and_bounded);
    TEST_RUN(test_not_a_trainingjob);
    TEST_RUN(test_phase_names);
    return test_summary();
}
