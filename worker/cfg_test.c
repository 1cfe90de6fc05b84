/* Configuration: precedence (defaults < file < env < flags), the three name forms, string
 * numbers, the "training" wrapper, and bad configs naming the field. */
#include "worker/cfg.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"

static char dir[64], path[128];

static void write_config(const char *json)
{
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
}

static int load(struct cfg *c, char *err, size_t n, int argc, const char **argv)
{
    FILE *devnull = fopen("/dev/null", "w");
    int rc = cfg_load(c, argc, (char **)argv, devnull, err, n);
    fclose(devnull);
    return rc;
}

static void test_file_env_flags_precedence(void)
{
    struct cfg c;
    char err[512] = "";
    write_config("{\"training\": {\"task\": \"text-classification\", \"model\": {\"type\": "
                 "\"transformer\", \"layers\": 3, \"hidden\": 64, \"heads\": 4, \"maxSeqLen\": "
                 "128}, \"data\": {\"train\": \"/d/train.jsonl\", \"eval\": \"/d/eval.jsonl\"}, "
                 "\"epochs\": 5, \"batchSize\": 16, \"learningRate\": \"3e-4\", "
                 "\"scaleLearningRate\": false}, \"checkpoint\": {\"path\": \"/ckpt\"}}");
    setenv("GANTRY_BATCH_SIZE", "24", 1);
    setenv("GANTRY_MODEL_LAYERS", "4", 1);
    const char *argv[] = {"gantry-worker", "--config", path, "--model-layers", "6",
                          "--scale-learning-rate", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 6, argv), CFG_OK);
    TEST_EQ_STR(err, "");
    TEST_EQ_INT(c.hidden, 64);                /* file over default */
    TEST_EQ_INT(c.max_seq_len, 128);
    TEST_EQ_INT(c.epochs, 5);
    TEST_EQ_INT(c.batch_size, 24);            /* env over file */
    TEST_EQ_INT(c.layers, 6);                 /* flag over env */
    TEST_NEAR(c.learning_rate, 3e-4, 1e-12);  /* a number given as a string */
    TEST_CHECK(c.scale_learning_rate);        /* bare boolean flag = true, over the file's false */
    TEST_EQ_STR(c.train, "/d/train.jsonl");
    TEST_EQ_INT(c.grad_accum_steps, 1);       /* untouched default */
    unsetenv("GANTRY_BATCH_SIZE");
    unsetenv("GANTRY_MODEL_LAYERS");
}

static void expect_bad(const char *json, const char *want_in_err)
{
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    write_config(json);
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_EBAD);
    if (!TEST_CHECK(strstr(err, want_in_err) != NULL))
        fprintf(stderr, "       message: %s\n       wanted: %s\n", err, want_in_err);
}

static void test_bad_configs_name_the_field(void)
{
    expect_bad("{\"data\": {\"train\": \"t\"}, \"batchSize\": -3}", "training.batchSize: -3 is out of range");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"batchSize\": -3}", "--batch-size");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"learningrate\": 0.1}",
               "training.learningrate (from");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"model\": {\"hidden\": 100, \"heads\": 3}}",
               "training.model.heads: 3 does not divide");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"model\": {\"type\": \"lstm\"}}",
               "training.model.type: \"lstm\"");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"epochs\": \"three\"}", "training.epochs: \"three\"");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"epochs\": 2.5}", "training.epochs");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"data\": {\"train\": \"u\"}}", "duplicate");
    expect_bad("{\"epochs\": 1}", "training.data.train: not set");
    expect_bad("{\"data\": [1]}", "training.data (from");
    expect_bad("[1, 2]", "must be a JSON object");
    expect_bad("{\"epochs\": ", "invalid JSON");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"scaleLearningRate\": 1.5}", "scaleLearningRate");
    /* each within its range, the product an int no more (it was 0 examples a step) */
    expect_bad("{\"data\": {\"train\": \"t\"}, \"batchSize\": 65536, \"gradAccumSteps\": 65536}",
               "training.gradAccumSteps: batchSize 65536 x gradAccumSteps 65536");
}

static void test_env_and_flag_errors(void)
{
    struct cfg c;
    char err[512] = "";
    write_config("{\"data\": {\"train\": \"t\"}}");
    setenv("GANTRY_ADAM_BETA2", "abc", 1);
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_EBAD);
    TEST_CHECK(strstr(err, "training.adamBeta2: \"abc\" (from GANTRY_ADAM_BETA2)") != NULL);
    unsetenv("GANTRY_ADAM_BETA2");
    const char *argv2[] = {"gantry-worker", "--config", path, "--no-such-flag", "1", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, argv2), CFG_EUSAGE);
    TEST_CHECK(strstr(err, "--no-such-flag") != NULL);
    const char *argv3[] = {"gantry-worker", "--help", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 2, argv3), CFG_HELP);
    const char *argv4[] = {"gantry-worker", "--config", "/nonexistent/x.json", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv4), CFG_EBAD);
    TEST_CHECK(strstr(err, "/nonexistent/x.json") != NULL);
}

/* A GPU-only choice (training.<key>: dflt | gpu): dflt by default; gpu from the file, env <env>
 * or --<key> with device cuda, in that precedence; gpu on the CPU refused with cpu_error, an
 * unknown value refused naming the field. field: the cfg member it lands in. */
static void check_gpu_choice(const char *key, const char *env, const char *dflt, const char *gpu,
                             size_t field, const char *cpu_error)
{
    struct cfg c;
    char err[512] = "", text[256], flag[64], want[128];
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    const char *got = (const char *)&c + field;
    snprintf(flag, sizeof(flag), "--%s", key);
    write_config("{\"data\": {\"train\": \"t\"}}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_EQ_STR(got, dflt);
    snprintf(text, sizeof(text), "{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", "
             "\"%s\": \"%s\"}", key, gpu);
    write_config(text);
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_EQ_STR(got, gpu);
    setenv(env, dflt, 1); /* env over file */
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_EQ_STR(got, dflt);
    const char *argv2[] = {"gantry-worker", "--config", path, flag, gpu, NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, argv2), CFG_OK); /* flag over env */
    TEST_EQ_STR(got, gpu);
    unsetenv(env);
    snprintf(text, sizeof(text), "{\"data\": {\"train\": \"t\"}, \"%s\": \"%s\"}", key, gpu);
    expect_bad(text, cpu_error);
    snprintf(text, sizeof(text), "{\"data\": {\"train\": \"t\"}, \"device\": \"cpu\", "
             "\"%s\": \"%s\"}", key, gpu);
    expect_bad(text, cpu_error);
    snprintf(text, sizeof(text), "{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", "
             "\"%s\": \"x16\"}", key);
    snprintf(want, sizeof(want), "training.%s: \"x16\"", key);
    expect_bad(text, want);
}

/* training.precision: fp32 | bf16 (bf16 on the GPU only) */
static void test_precision(void)
{
    check_gpu_choice("precision", "GANTRY_PRECISION", "fp32", "bf16",
                     offsetof(struct cfg, precision),
                     "training.precision: bf16 needs device: cuda");
    /* the n-gram model trains on the GPU in fp32, without attention */
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"precision\": \"bf16\", "
               "\"model\": {\"type\": \"ngram\"}}",
               "training.precision: bf16 is for model.type transformer");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"attention\": \"fused\", "
               "\"model\": {\"type\": \"ngram\"}}",
               "training.attention: fused is for model.type transformer");
    /* bf16 GEMM operands: 16-byte rows, refused here (permanent, 78) rather than by the device
     * model after the data is loaded */
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"precision\": \"bf16\", "
               "\"model\": {\"hidden\": 36, \"heads\": 4}}",
               "training.precision: bf16 needs model.hidden and model.ffn divisible by 8 (got 36 "
               "and 144)");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"precision\": \"bf16\", "
               "\"model\": {\"hidden\": 32, \"heads\": 4, \"ffn\": 100}}",
               "(got 32 and 100)");
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", "
                 "\"model\": {\"hidden\": 36, \"heads\": 4}}");
    if (!TEST_CHECK(load(&c, err, sizeof(err), 3, argv) == 0)) /* fp32 takes any width */
        fprintf(stderr, "       message: %s\n", err);
}

/* training.attention: auto | unfused | fused (fused on the GPU only); auto, the default, runs
 * fused in bf16 where the kernel runs (device cuda, a transformer, head size <= 128), else
 * unfused */
static void test_attention(void)
{
    static const struct {
        const char *json;
        bool fused;
    } cases[] = {
#define BF16 "\"device\": \"cuda\", \"precision\": \"bf16\""
        {"\"device\": \"cpu\"", false},
        {"\"device\": \"cuda\"", false}, /* fp32 */
        {BF16, true},
        {BF16 ", \"attention\": \"auto\"", true},
        {"\"device\": \"cuda\", \"attention\": \"auto\"", false},
        {"\"device\": \"cuda\", \"attention\": \"fused\"", true},
        {BF16 ", \"attention\": \"unfused\"", false},
        {"\"device\": \"cpu\", \"attention\": \"unfused\"", false},
        {BF16 ", \"model\": {\"hidden\": 512, \"heads\": 4}", true},
        {BF16 ", \"model\": {\"hidden\": 512, \"heads\": 2}", false},
        {"\"device\": \"cuda\", \"model\": {\"type\": \"ngram\"}", false},
#undef BF16
    };
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    char err[512], text[256];
    struct cfg c;

    check_gpu_choice("attention", "GANTRY_ATTENTION", "auto", "fused",
                     offsetof(struct cfg, attention),
                     "training.attention: fused is a GPU kernel and needs device: cuda");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "{\"data\": {\"train\": \"t\"}, %s}", cases[i].json);
        write_config(text);
        err[0] = '\0';
        TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
        if (!TEST_CHECK(cfg_fused_attention(&c) == cases[i].fused))
            fprintf(stderr, "       %s: want fused = %d\n", text, cases[i].fused);
    }
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"attention\": \"fused\", "
               "\"model\": {\"hidden\": 512, \"heads\": 2}}",
               "training.attention: fused takes head sizes (model.hidden / model.heads) up to 128, "
               "got 256");
}

/* training.cudaGraphs: false by default; true from the file, GANTRY_CUDA_GRAPHS or a bare
 * --cuda-graphs with device cuda (env over file, flag over env); true on the CPU refused naming
 * the field, a non-boolean refused. */
static void test_cuda_graphs(void)
{
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    const char *argv2[] = {"gantry-worker", "--config", path, "--cuda-graphs", NULL};
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\"}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(!c.cuda_graphs);
    TEST_EQ_INT(load(&c, err, sizeof(err), 4, argv2), CFG_OK);
    TEST_CHECK(c.cuda_graphs);
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"cudaGraphs\": true}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(c.cuda_graphs);
    setenv("GANTRY_CUDA_GRAPHS", "false", 1);
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(!c.cuda_graphs);
    TEST_EQ_INT(load(&c, err, sizeof(err), 4, argv2), CFG_OK);
    TEST_CHECK(c.cuda_graphs);
    unsetenv("GANTRY_CUDA_GRAPHS");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"cudaGraphs\": true}",
               "training.cudaGraphs: true needs device: cuda");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"cudaGraphs\": \"often\"}",
               "training.cudaGraphs");
}

/* training.autotune: true by default, in effect (cfg_autotune) only with device cuda and precision
 * bf16; false from the file, GANTRY_AUTOTUNE or --autotune=false (flag over env over file); a
 * non-boolean refused naming the field. */
static void test_autotune(void)
{
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    const char *off[] = {"gantry-worker", "--config", path, "--autotune=false", NULL};
    const char *on[] = {"gantry-worker", "--config", path, "--autotune", NULL};
    const char *off2[] = {"gantry-worker", "--config", path, "--autotune", "false", "--threads",
                          "2", NULL};
    const char *on2[] = {"gantry-worker", "--autotune", "yes", "--config", path, NULL};
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"precision\": \"bf16\"}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(c.autotune && cfg_autotune(&c));
    TEST_EQ_INT(load(&c, err, sizeof(err), 4, off), CFG_OK);
    TEST_CHECK(!c.autotune && !cfg_autotune(&c));
    /* the value as the next word, as --help writes it; the flags after it still read */
    TEST_EQ_INT(load(&c, err, sizeof(err), 7, off2), CFG_OK);
    TEST_CHECK(!c.autotune && c.threads == 2);
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, on2), CFG_OK);
    TEST_CHECK(c.autotune);
    setenv("GANTRY_AUTOTUNE", "false", 1);
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(!cfg_autotune(&c));
    TEST_EQ_INT(load(&c, err, sizeof(err), 4, on), CFG_OK);
    TEST_CHECK(cfg_autotune(&c));
    unsetenv("GANTRY_AUTOTUNE");
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\", \"precision\": \"bf16\", "
                 "\"autotune\": false}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(!cfg_autotune(&c));
    write_config("{\"data\": {\"train\": \"t\"}, \"device\": \"cuda\"}"); /* fp32: one set */
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(c.autotune && !cfg_autotune(&c));
    write_config("{\"data\": {\"train\": \"t\"}}"); /* the CPU */
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_CHECK(!cfg_autotune(&c));
    expect_bad("{\"data\": {\"train\": \"t\"}, \"autotune\": \"sometimes\"}",
               "training.autotune");
}

/* training.evalInterval: 0 (only after training) by default; needs data.eval */
static void test_eval_interval(void)
{
    struct cfg c;
    char err[512];
    const char *argv[] = {"w", "--data-train", "t", "--data-eval", "e", "--eval-interval", "50"};
    unsetenv("GANTRY_EVAL_INTERVAL");
    cfg_defaults(&c);
    TEST_EQ_INT(c.eval_interval, 0);
    TEST_EQ_INT(cfg_load(&c, 7, (char **)argv, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_INT(c.eval_interval, 50);
    /* labelSmoothing: JSON or flag, [0, 0.99] */
    const char *ls[] = {"w", "--data-train", "t", "--label-smoothing", "0.1"};
    TEST_EQ_INT(cfg_load(&c, 5, (char **)ls, NULL, err, sizeof(err)), CFG_OK);
    TEST_CHECK(c.label_smoothing == 0.1);
    expect_bad("{\"data\": {\"train\": \"t\"}, \"labelSmoothing\": 1}",
               "training.labelSmoothing: 1 is out of range; use 0..0.99");
    /* classWeight: none (default) or balanced */
    TEST_EQ_STR(c.class_weight, "none");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"classWeight\": \"inverse\"}",
               "training.classWeight");
    /* classWeights: an object in JSON; JSON or label=weight,... from env and flags */
    TEST_EQ_STR(c.class_weights, "");
    write_config("{\"training\": {\"data\": {\"train\": \"t\"}, \"classWeights\": {\"spam\": 3, "
                 "\"a=b\": 0.5}}}");
    const char *cwf[] = {"w", "--config", path};
    TEST_EQ_INT(cfg_load(&c, 3, (char **)cwf, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_STR(c.class_weights, "{\"spam\":3,\"a=b\":0.5}");
    json_t *back = cfg_to_json(&c);
    TEST_CHECK(json_number_value(json_object_get(json_object_get(back, "classWeights"), "a=b")) == 0.5);
    json_decref(back);
    const char *cwl[] = {"w", "--data-train", "t", "--class-weights", " ham=1, a=b=2.5"};
    TEST_EQ_INT(cfg_load(&c, 5, (char **)cwl, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_STR(c.class_weights, "{\"ham\":1.0,\" a=b\":2.5}");
    const char *cwe[] = {"w", "--data-train", "t", "--class-weights", ""};
    TEST_EQ_INT(cfg_load(&c, 5, (char **)cwe, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_STR(c.class_weights, "");
    const char *bad_cw[][2] = {
        {"spam", "\"spam\" is not label=weight"},
        {"spam=", "\"spam=\" is not label=weight"},
        {"=3", "\"=3\" is not label=weight"},
        {"spam=1,spam=2", "\"spam=...\" is not label=weight"},
        {"spam=1e400", "is not label=weight"},
        {"spam=-1", "training.classWeights.spam (from --class-weights): the weight must be a "
                    "number in 0..1e+06"},
        {"{\"spam\": \"3\"}", "training.classWeights.spam (from --class-weights): the weight"},
        {"{\"spam\": 3", "training.classWeights (from --class-weights): bad JSON at column"},
        {"{\"\": 3}", "training.classWeights (from --class-weights): an empty label"},
    };
    for (size_t i = 0; i < sizeof(bad_cw) / sizeof(bad_cw[0]); i++) {
        const char *a[] = {"w", "--data-train", "t", "--class-weights", bad_cw[i][0]};
        TEST_EQ_INT(cfg_load(&c, 5, (char **)a, NULL, err, sizeof(err)), CFG_EBAD);
        TEST_CHECK(strstr(err, bad_cw[i][1]) != NULL);
        if (!strstr(err, bad_cw[i][1]))
            fprintf(stderr, "  %s -> %s\n", bad_cw[i][0], err);
    }
    /* data.labelNames: a list in JSON; JSON or a,b,c from env and flags; 2+ distinct names */
    TEST_EQ_STR(c.label_names, "");
    write_config("{\"training\": {\"data\": {\"train\": \"t\", \"labelNames\": [\"entailment\", "
                 "\"neutral\", \"contradiction\"]}}}");
    TEST_EQ_INT(cfg_load(&c, 3, (char **)cwf, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_STR(c.label_names, "[\"entailment\",\"neutral\",\"contradiction\"]");
    back = cfg_to_json(&c);
    TEST_EQ_INT(json_array_size(json_object_get(json_object_get(back, "data"), "labelNames")), 3);
    json_decref(back);
    write_config("{\"training\": {\"data\": {\"train\": \"t\", \"labelNames\": []}}}");
    TEST_EQ_INT(cfg_load(&c, 3, (char **)cwf, NULL, err, sizeof(err)), CFG_OK); /* [] is none */
    TEST_EQ_STR(c.label_names, "");
    const char *lnf[] = {"w", "--data-train", "t", "--data-label-names", "neg,pos"};
    TEST_EQ_INT(cfg_load(&c, 5, (char **)lnf, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_STR(c.label_names, "[\"neg\",\"pos\"]");
    const char *bad_ln[][2] = {
        {"neg", "training.data.labelNames (from --data-label-names): expected a list of 2 to"},
        {"neg,,pos", "training.data.labelNames[1] (from --data-label-names): must be a non-empty"},
        {"a,b,a", "training.data.labelNames[2] (from --data-label-names): a name listed twice"},
        {"[\"a\", 1]", "training.data.labelNames[1] (from --data-label-names): must be a"},
        {"[\"a\"", "training.data.labelNames (from --data-label-names): bad JSON"},
    };
    for (size_t i = 0; i < sizeof(bad_ln) / sizeof(bad_ln[0]); i++) {
        const char *a[] = {"w", "--data-train", "t", "--data-label-names", bad_ln[i][0]};
        TEST_EQ_INT(cfg_load(&c, 5, (char **)a, NULL, err, sizeof(err)), CFG_EBAD);
        TEST_CHECK(strstr(err, bad_ln[i][1]) != NULL);
        if (!strstr(err, bad_ln[i][1]))
            fprintf(stderr, "  %s -> %s\n", bad_ln[i][0], err);
    }
    expect_bad("{\"data\": {\"train\": \"t\", \"labelNames\": {\"a\": 0}}}",
               "training.data.labelNames (from ");
    /* text from env and flags must be UTF-8: the report and the config hash are JSON */
    const char *latin1[] = {"w", "--data-train", "t\xe9.jsonl"};
    TEST_EQ_INT(cfg_load(&c, 3, (char **)latin1, NULL, err, sizeof(err)), CFG_EBAD);
    TEST_CHECK(strstr(err, "training.data.train: the value (from --data-train) is not valid UTF-8") != NULL);
    const char *latin1_cw[] = {"w", "--data-train", "t", "--class-weights", "caf\xe9=2"};
    TEST_EQ_INT(cfg_load(&c, 5, (char **)latin1_cw, NULL, err, sizeof(err)), CFG_EBAD);
    TEST_CHECK(strstr(err, "training.classWeights (from --class-weights): a label is not valid UTF-8") != NULL);
    expect_bad("{\"data\": {\"train\": \"t\"}, \"classWeights\": [3]}",
               "training.classWeights (from ");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"classWeights\": {\"spam\": 2e6}}",
               "training.classWeights.spam (from ");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"classWeights\": {\"spam\": 2}, "
               "\"classWeight\": \"balanced\"}",
               "training.classWeights: set, and classWeight is balanced too");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"evalInterval\": 100}",
               "training.evalInterval: 100, but data.eval is not set");
    expect_bad("{\"data\": {\"train\": \"t\", \"eval\": \"e\"}, \"evalInterval\": -1}",
               "training.evalInterval: -1 is out of range");
    /* data.evalFraction: instead of data.eval, not with it; enough for evalInterval */
    expect_bad("{\"data\": {\"train\": \"t\", \"eval\": \"e\", \"evalFraction\": 0.1}}",
               "training.data.evalFraction: 0.1, but data.eval is set too");
    expect_bad("{\"data\": {\"train\": \"t\", \"evalFraction\": 0.7}}",
               "training.data.evalFraction: 0.7 is out of range");
    const char *held[] = {"w", "--data-train", "t", "--data-eval-fraction", "0.1",
                          "--eval-interval", "5"};
    TEST_EQ_INT(cfg_load(&c, 7, (char **)held, NULL, err, sizeof(err)), CFG_OK);
    TEST_CHECK(c.eval_fraction == 0.1);
    /* early stopping: needs evaluations; bestMetric one of the report's metrics */
    TEST_EQ_STR(c.best_metric, "loss");
    expect_bad("{\"data\": {\"train\": \"t\", \"eval\": \"e\"}, \"earlyStoppingPatience\": 3}",
               "training.earlyStoppingPatience: 3, but evalInterval is 0");
    expect_bad("{\"data\": {\"train\": \"t\", \"eval\": \"e\"}, \"bestMetric\": \"f1\"}",
               "training.bestMetric: \"f1\"");
    const char *ok[] = {"w", "--data-train", "t", "--data-eval", "e", "--eval-interval", "5",
                        "--early-stopping-patience", "3", "--best-metric", "macro_f1",
                        "--early-stopping-threshold", "0.001"};
    TEST_EQ_INT(cfg_load(&c, 13, (char **)ok, NULL, err, sizeof(err)), CFG_OK);
    TEST_EQ_INT(c.early_stopping_patience, 3);
    TEST_EQ_STR(c.best_metric, "macro_f1");
    TEST_CHECK(c.early_stopping_threshold == 0.001);
}

/* training.gradBucketMB: default TRAIN_BUCKET_MB (4); file, env GANTRY_GRAD_BUCKET_MB (the
 * acronym one word) and --grad-bucket-mb in precedence; 0 allowed; out of range refused naming
 * the field and its range. */
static void test_grad_bucket_mb(void)
{
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, NULL};
    write_config("{\"data\": {\"train\": \"t\"}}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_NEAR(c.grad_bucket_mb, 4.0, 0.0);
    write_config("{\"data\": {\"train\": \"t\"}, \"gradBucketMB\": 0.5}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_NEAR(c.grad_bucket_mb, 0.5, 0.0);
    setenv("GANTRY_GRAD_BUCKET_MB", "0", 1); /* env over file: 0 = after backward */
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_NEAR(c.grad_bucket_mb, 0.0, 0.0);
    const char *argv2[] = {"gantry-worker", "--config", path, "--grad-bucket-mb", "25", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, argv2), CFG_OK); /* flag over env */
    TEST_NEAR(c.grad_bucket_mb, 25.0, 0.0);
    setenv("GANTRY_GRAD_BUCKET_MB", "-1", 1);
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_EBAD);
    if (!TEST_CHECK(strstr(err, "training.gradBucketMB: -1 is out of range; use 0..4096") != NULL))
        fprintf(stderr, "       message: %s\n", err);
    TEST_CHECK(strstr(err, "GANTRY_GRAD_BUCKET_MB") && strstr(err, "--grad-bucket-mb"));
    unsetenv("GANTRY_GRAD_BUCKET_MB");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"gradBucketMB\": 5000}",
               "training.gradBucketMB: 5000 is out of range; use 0..4096");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"gradBucketMB\": \"big\"}",
               "training.gradBucketMB: \"big\"");
    const char *argv3[] = {"gantry-worker", "--config", path, "--grad-bucket-m-b", "1", NULL};
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, argv3), CFG_EUSAGE);
}

/* The operator's config.json: checkpoint beside training (path ignored, dir used), then env
 * GANTRY_CHECKPOINT_DIR / flags over it; bad values name the field and exit 78. */
static void test_checkpoint_section(void)
{
    struct cfg c;
    char err[512] = "";
    const char *argv[] = {"gantry-worker", "--config", path, "--checkpoint-keep", "5", NULL};
    write_config("{\"job\": \"j\", \"training\": {\"data\": {\"train\": \"t\"}}, \"checkpoint\": "
                 "{\"path\": \"/ckpt\", \"dir\": \"/ckpt/j\", \"intervalSteps\": 20, \"keep\": 2, "
                 "\"saveOnStop\": false, \"stopSaveSeconds\": 115}}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_EQ_STR(c.checkpoint_dir, "/ckpt/j");
    TEST_EQ_INT(c.checkpoint_interval, 20);
    TEST_EQ_INT(c.checkpoint_keep, 2);
    TEST_CHECK(!c.checkpoint_save_on_stop);
    TEST_EQ_INT(c.checkpoint_stop_save_seconds, 115);
    setenv("GANTRY_CHECKPOINT_DIR", "/vol/j2", 1);
    TEST_EQ_INT(load(&c, err, sizeof(err), 5, argv), CFG_OK);
    TEST_EQ_STR(c.checkpoint_dir, "/vol/j2"); /* env over file */
    TEST_EQ_INT(c.checkpoint_keep, 5);        /* flag over file */
    unsetenv("GANTRY_CHECKPOINT_DIR");
    write_config("{\"training\": {\"data\": {\"train\": \"t\"}}}");
    TEST_EQ_INT(load(&c, err, sizeof(err), 3, argv), CFG_OK);
    TEST_EQ_STR(c.checkpoint_dir, ""); /* no section: no checkpoints, defaults */
    TEST_EQ_INT(c.checkpoint_interval, 200);
    TEST_EQ_INT(c.checkpoint_keep, 3);
    TEST_CHECK(c.checkpoint_save_on_stop);
    TEST_EQ_INT(c.checkpoint_stop_save_seconds, 25);
    expect_bad("{\"training\": {\"data\": {\"train\": \"t\"}}, \"checkpoint\": "
               "{\"stopSaveSeconds\": 0}}", "checkpoint.stopSaveSeconds: 0 is out of range");
    expect_bad("{\"training\": {\"data\": {\"train\": \"t\"}}, \"checkpoint\": {\"keep\": 0}}",
               "checkpoint.keep: 0 is out of range");
    expect_bad("{\"training\": {\"data\": {\"train\": \"t\"}}, \"checkpoint\": "
               "{\"intervalSteps\": \"often\"}}", "checkpoint.intervalSteps: \"often\"");
    expect_bad("{\"training\": {\"data\": {\"train\": \"t\"}}, \"checkpoint\": {\"every\": 3}}",
               "checkpoint.every (from");
    expect_bad("{\"data\": {\"train\": \"t\"}, \"checkpoint\": {\"intervalSteps\": -1}}",
               "checkpoint.intervalSteps: -1 is out of range");
}

static void test_usage_lists_every_form(void)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    cfg_usage(f, "gantry-worker");
    fclose(f);
    TEST_CHECK(strstr(text, "--model-max-seq-len") != NULL);
    TEST_CHECK(strstr(text, "GANTRY_MODEL_MAX_SEQ_LEN") != NULL);
    TEST_CHECK(strstr(text, "JSON model.maxSeqLen") != NULL);
    TEST_CHECK(strstr(text, "(default 256)") != NULL);
    free(text);
    struct cfg c;
    cfg_defaults(&c);
    json_t *j = cfg_to_json(&c);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "model"), "hidden")), 128);
    json_decref(j);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/cfg_test.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    TEST_RUN(test_file_env_flags_precedence);
    TEST_RUN(test_bad_configs_name_the_field);
    TEST_RUN(test_env_and_flag_errors);
    TEST_RUN(test_usage_lists_every_form);
    TEST_RUN(test_checkpoint_section);
    TEST_RUN(test_precision);
    TEST_RUN(test_autotune);
    TEST_RUN(test_attention);
    TEST_RUN(test_cuda_graphs);
    TEST_RUN(test_eval_interval);
    TEST_RUN(test_grad_bucket_mb);
    unlink(path);
    rmdir(dir);
    return test_summary();
}
