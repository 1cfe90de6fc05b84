/*
 * cfg.h - gantry-worker's training configuration: the `training:` object of a TrainingJob
 * (DESIGN.md §2), from defaults < config file < environment < flags (viper's order).
 *
 * Every setting has one name in three forms, derived mechanically from its JSON path:
 *   JSON  model.maxSeqLen   (inside the training object of /etc/gantry/config.json or --config)
 *   env   GANTRY_MODEL_MAX_SEQ_LEN
 *   flag  --model-max-seq-len
 * The file may be the training object itself or an object with a "training" member (other
 * members are ignored). Numbers may also be given as strings ("3e-4"), as YAML renders them.
 * Unknown fields in the training object are errors (a typo must not be silently ignored).
 *
 * cfg_load() validates once; on a bad value it writes to err the field, the value, where it came
 * from and what to change, and returns CFG_EBAD: gantry-worker exits 78 (EX_CONFIG) with it, which
 * the operator treats as permanent. cfg_usage() prints every setting with its default.
 * Rank, world size and rendezvous come from dist_env (worker/dist.h), not from here.
 */
#ifndef GANTRY_CFG_H
#define GANTRY_CFG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#define CFG_MAX_PATH 1024
#define CFG_DEFAULT_FILE "/etc/gantry/config.json"
#define CFG_MAX_FILE (1 << 20) /* bytes of config JSON accepted */
#define CFG_MAX_CLASS_WEIGHTS 8192 /* bytes of classWeights as compact JSON */
#define CFG_MAX_LABEL_NAMES 16384  /* bytes of data.labelNames as compact JSON */
#define CFG_MAX_CLASS_WEIGHT 1e6   /* the largest weight accepted */

#define CFG_OK 0
#define CFG_EBAD (-1)  /* bad configuration: exit 78 */
#define CFG_EUSAGE (-2) /* bad command line: exit 64 */
#define CFG_HELP 1      /* --help was given and printed */

/* Whether the task is multi-label classification (task: multi-label-classification). */
#define CFG_MULTI_LABEL(c) (strcmp((c)->task, "multi-label-classification") == 0)
/* Whether the task is regression (task: regression: one real output per text). */
#define CFG_REGRESSION(c) (strcmp((c)->task, "regression") == 0)

struct cfg {
    char task[32]; /* text-classification | multi-label-classification | regression */
    /* model */
    char model_type[16]; /* transformer | ngram */
    int layers, hidden, heads, max_seq_len, ffn, buckets;
    char pooling[8]; /* mean | cls */
    /* data */
    char train[CFG_MAX_PATH], eval[CFG_MAX_PATH], vocab[CFG_MAX_PATH];
    double eval_fraction; /* without eval: the share of train held out for evaluation */
    int vocab_size, min_freq;
    char format[8]; /* auto | jsonl | tsv */
    bool strict, cls_sep;
    char text_field[64], label_field[64]; /* JSONL field names */
    char text_pair_field[64];             /* "" = single texts; else text pairs (dataset.h) */
    char label_sep[4]; /* multi-label: the one character between labels in a field */
    /* data.labelNames: the classes in order, compact JSON ["a","b"] ("" = from the data, sorted);
     * an integer label i in the data is the i-th (Hugging Face's ClassLabel ids) */
    char label_names[CFG_MAX_LABEL_NAMES];
    char init_from[CFG_MAX_PATH]; /* a checkpoint (step or job dir) to start from; "" = none */
    /* optimisation */
    int epochs, max_steps, batch_size, eval_batch_size, grad_accum_steps;
    int eval_interval; /* steps between evaluations during training; 0 = only at the end */
    char best_metric[12];        /* loss | accuracy | macro_f1 | micro_f1 | pearson */
    int early_stopping_patience; /* evaluations without improvement before stopping; 0 = off */
    double early_stopping_threshold;
    double learning_rate;
    bool scale_learning_rate;
    int warmup_steps;    /* -1: warmup_ratio of the total steps */
    double warmup_ratio;
    char lr_decay[12];   /* cosine | linear | constant */
    double min_lr_ratio, weight_decay, grad_clip, beta1, beta2, eps;
    double label_smoothing; /* the training loss's target: (1 - e) one-hot + e / classes */
    char class_weight[12];  /* none | balanced: the training loss weighs each class */
    char class_weights[CFG_MAX_CLASS_WEIGHTS]; /* your own: {"label": weight} compact; "" = none */
    int64_t seed;
    /* run */
    int log_interval, threads;
    char device[8]; /* cpu | cuda (worker/train_gpu.h) */
    char precision[8]; /* fp32 | bf16 (bf16: device cuda only; worker/model_gpu.h) */
    char attention[8]; /* auto | unfused | fused (fused: device cuda only; kernels/attention.cu);
                        * cfg_fused_attention() says which one auto runs */
    bool cuda_graphs;  /* replay forward/backward as CUDA graphs (device cuda only; model_gpu.h) */
    bool autotune;     /* pick kernels by timing them at start (cfg_autotune; kernels/tune.cu) */
    double grad_bucket_mb; /* all-reduce bucket size in MiB (worker/train_plan.h); 0: after backward */
    char report[CFG_MAX_PATH];
    int metrics_port;                   /* rank 0 serves /metrics and /progress; -1 = off */
    char tensorboard_dir[CFG_MAX_PATH]; /* TensorBoard event files; "" = none */
    /* checkpoints: JSON checkpoint.dir etc. (beside training in the operator's config.json, or
     * inside the training object), env GANTRY_CHECKPOINT_DIR (the operator sets it to
     * <checkpoint.path>/<job>), GANTRY_CHECKPOINT_INTERVAL_STEPS, GANTRY_CHECKPOINT_KEEP */
    char checkpoint_dir[CFG_MAX_PATH]; /* step-<N>/ and report.json go here; "" = none */
    int checkpoint_interval;           /* steps between checkpoints (default 200); 0 = end only */
    int checkpoint_keep;               /* newest kept (default 3) */
    bool checkpoint_save_on_stop;      /* SIGTERM/SIGINT: save the step stopped at (default on) */
    int checkpoint_stop_save_seconds;  /* ... within this long (default 25) */
    char config_path[CFG_MAX_PATH]; /* the file read, "" when none */
};

/* Fills c with the defaults. */
void cfg_defaults(struct cfg *c);

/*
 * Loads the configuration for `gantry-worker [flags]`: defaults, then the file named by --config
 * (else CFG_DEFAULT_FILE when it exists), then GANTRY_* environment variables, then flags.
 * Returns CFG_OK, CFG_HELP (usage printed to out), CFG_EUSAGE (unknown flag; message in err) or
 * CFG_EBAD (message in err). argv is not modified; getopt state is reset before and after.
 */
int cfg_load(struct cfg *c, int argc, char **argv, FILE *out, char *err, size_t errlen);

/* Applies one JSON document (the training object or a wrapper) on top of c; `source` names it
 * in messages. CFG_OK or CFG_EBAD. Exposed for tests. */
int cfg_apply_json(struct cfg *c, const json_t *doc, const char *source, char *err, size_t errlen);

/* Checks ranges and cross-field rules. CFG_OK or CFG_EBAD. */
int cfg_validate(const struct cfg *c, char *err, size_t errlen);

/* Whether c trains with the fused attention: attention fused, or auto (the default) in bf16 where
 * the fused kernel runs (device cuda, precision bf16, model.type transformer, head size <=
 * ATTENTION_FUSED_MAX_HS). On an H200 (docs/gpu.md) the bf16 fused attention took the GPT-2 step
 * from 44.5 to 19.0 ms and the example model's from 1.35 to 0.81 ms; in fp32 (CUDA cores against
 * cuBLAS) it trained the SpamAssassin job at 2.01M tokens/s against unfused's 2.34M. */
bool cfg_fused_attention(const struct cfg *c);
/* Whether kernels are picked by timing them on the GPU when training starts (MODEL_GPU_TUNE,
 * kernels/tune.cu): training.autotune (true by default) with device cuda and precision bf16, the
 * only configuration with more than one set of kernels. */
bool cfg_autotune(const struct cfg *c);

/* The usage text: every flag, its env variable and default. */
void cfg_usage(FILE *f, const char *prog);

/* The effective configuration as a new JSON object (training-object field names). */
json_t *cfg_to_json(const struct cfg *c);

#endif /* GANTRY_CFG_H */
