/*
 * gantry-worker - trains a text classifier described by a TrainingJob's training: section.
 *
 *   gantry-worker --config cfg.json [--flag value ...]     (gantry-worker --help lists them)
 *
 * Reads the configuration (cfg.h), the launch environment (dist.h), the training and evaluation
 * data (dataset.h), builds or loads the vocab, trains (train.h) and writes the evaluation report.
 * Progress goes to stdout as JSON lines and to stderr for people; the final report is printed on
 * stdout as one JSON line and written to `report` when set.
 * Checkpoints (checkpoint.dir, the job's directory on the shared volume): at start every rank
 * finds the newest valid step-<N> there, the ranks agree on the oldest of their choices
 * (dist_agree_resume), load parameters, AdamW state and the data position, and log
 * "resumed from step S (checkpoint DIR)". Every checkpoint.intervalSteps and at the end rank 0
 * snapshots and writes one on the background writer, keeping checkpoint.keep; the final report
 * also goes to <checkpoint.dir>/report.json. At a different world size the position in the
 * epoch (samples consumed by all ranks) carries over and the step number is recomputed.
 * At the end every rank logs "final parameters fnv1a64 <hex>" (the same on every rank).
 *
 * SIGTERM/SIGINT (we may be PID 1 in a pod, where the default action is ignored): stop at the
 * next step boundary and exit 128 + signal (143: retryable); with checkpoint.saveOnStop (the
 * default) rank 0 first saves that step when it is newer than the last checkpoint, within
 * checkpoint.stopSaveSeconds. If reaching the boundary takes over 2 s (a blocked all-reduce),
 * exit at once: an unfinished checkpoint is only a .tmp directory (the writer renames when
 * complete).
 * Exit: 0 done; 64 bad usage; 65 bad data; 78 bad config; other non-zero is retryable.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/hash.h"
#include "common/xalloc.h"
#include "kernels/cpu.h"

#include "worker/cfg.h"
#include "worker/card.h"
#include "worker/ckpt.h"
#include "worker/coll.h"
#include "worker/coll_nccl.h"
#include "worker/dataset.h"
#include "worker/dist.h"
#include "worker/eval.h"
#include "worker/launch.h"
#include "worker/model.h"
#include "worker/model_io.h"
#include "worker/obs.h"
#include "worker/train.h"
#include "worker/train_coll.h"
#include "worker/train_gpu.h"
#include "worker/vocab.h"

/* Everything the run owns, in one place (freed by worker_cleanup). */
struct worker {
    struct cfg cfg;
    struct dist_env env;
    struct text_opts topts;
    struct label_map labels;
    struct dataset train, eval;
    struct dataset_encoded train_enc, eval_enc;
    struct vocab *vocab;
    struct model model;
    struct dist_rdzv *rz; /* multi-process only */
    struct coll *coll;
    struct train_coll tc; /* train_opts' hooks on coll (the CPU loop's gradient bucketer) */
    int gpu; /* device: cuda: this rank's GPU (train_gpu.h); -1: the CPU */
    struct obs *obs;
    /* checkpoints */
    char ck_root[CFG_MAX_PATH], ck_job[CKPT_MAX_NAME];
    struct ckpt_writer *writer; /* rank 0 with checkpoint.dir */
    char *card;                 /* with the writer: config.json and vocab.txt for every checkpoint */
    char *vocab_txt;
    size_t vocab_len;
    char hash[17];
    long spe;       /* steps per epoch at this world size */
    int per_step;   /* examples per step per rank */
    int64_t pending_step; /* the write in flight, -1 none */
    int64_t stop_saved;   /* the step save_on_stop wrote, -1 none */
    bool retired_newer;   /* step dirs numbered above our first written one are gone */
    double pending_t0;
    float *class_weight; /* classWeight balanced or classWeights: one per label; NULL: none */
    json_t *evals; /* the evaluations during training, [{step, loss, accuracy, ...}] */
    bool stopped_early; /* on_eval ended training early: this run's last checkpoint says so */
    int64_t resumed_stopped; /* the checkpoint resumed from ended an early-stopped run; -1 not */
    bool resumed;            /* from this job's own checkpoint */
    bool have_init;          /* training.initFrom: init holds its model */
    struct model_dir init;
    bool init_head;          /* initFrom's classifier was loaded (the same labels) */
    char err[2048];
};

/* The encoded dataset's regression targets go to the model as they are */
_Static_assert(DATASET_TARGETS_REAL == MODEL_TARGETS_REAL, "one label_words for regression");

#define STOP_GRACE_S 2
static volatile sig_atomic_t g_stop; /* the signal that asked us to stop */
/* Seconds from the signal to the forced exit: STOP_GRACE_S, or for a GPU rank other than 0 with
 * peers, long enough for its stop vote to reach rank 0 and for rank 0's save (train_gpu.c). */
static volatile sig_atomic_t g_grace_s = STOP_GRACE_S;

static void on_stop(int sig)
{
    if (!g_stop) { /* a second signal does not postpone the deadline */
        g_stop = sig;
        alarm((unsigned)g_grace_s);
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    _exit(128 + (g_stop ? g_stop : SIGTERM)); /* async-signal-safe */
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Loads the data files and the vocab, and encodes both splits. 0 or an exit status. */
static int load_data(struct worker *w)
{
    struct dataset_opts dopts;
    const struct cfg *c = &w->cfg;
    int remap[DATASET_MAX_LABELS];

    dataset_opts_default(&dopts);
    dopts.strict = c->strict;
    dopts.text_field = c->text_field;
    dopts.label_field = c->label_field;
    dopts.pair_field = c->text_pair_field[0] ? c->text_pair_field : NULL;
    dopts.multi_label = CFG_MULTI_LABEL(c);
    dopts.regression = CFG_REGRESSION(c);
    dopts.label_sep = c->label_sep[0];
    dopts.format = !strcmp(c->format, "jsonl") ? DATASET_JSONL
                   : !strcmp(c->format, "tsv") ? DATASET_TSV
                   : !strcmp(c->format, "csv") ? DATASET_CSV
                                               : DATASET_AUTO;
    text_opts_default(&w->topts);
    if (w->have_init) /* tokens as the model learned them */
        w->topts = w->init.card.text;
    w->topts.max_tokens = (size_t)c->max_seq_len; /* words beyond what the model sees */
    if (c->label_names[0]) { /* the classes in the order given; integer labels index them */
        json_t *names = json_loads(c->label_names, 0, NULL);
        const json_t *n;
        size_t i;
        json_array_foreach(names, i, n)
            label_map_add(&w->labels, json_string_value(n), json_string_length(n));
        json_decref(names);
        w->labels.frozen = true;
        dopts.label_index = true;
    }
    if (dataset_load(&w->train, c->train, &dopts, &w->labels, w->err, sizeof(w->err))) {
        fprintf(stderr, "gantry-worker: training data: %s\n", w->err);
        return DIST_EXIT_DATAERR;
    }
    if (dopts.regression && w->train.n < 2) {
        fprintf(stderr, "gantry-worker: training data %s: %zu examples; a regression needs at "
                        "least two, with a number in field %s\n", c->train, w->train.n,
                c->label_field);
        return DIST_EXIT_DATAERR;
    }
    if (!dopts.regression && (w->train.n == 0 || w->labels.n < 2)) {
        fprintf(stderr, "gantry-worker: training data %s: %zu examples with %d distinct labels; "
                        "need at least one example of two classes (fields %s%s%s and %s)\n",
                c->train, w->train.n, w->labels.n, c->text_field,
                c->text_pair_field[0] ? ", " : "", c->text_pair_field, c->label_field);
        return DIST_EXIT_DATAERR;
    }
    if (!c->label_names[0] && !dopts.regression) {
        label_map_sort(&w->labels, remap); /* label ids independent of file order */
        dataset_remap_labels(&w->train, remap);
    }
    w->labels.frozen = true;
    if (c->eval[0] && dataset_load(&w->eval, c->eval, &dopts, &w->labels, w->err,
                                   sizeof(w->err))) {
        fprintf(stderr, "gantry-worker: evaluation data: %s\n", w->err);
        return DIST_EXIT_DATAERR;
    }
    if (c->eval_fraction > 0) { /* before the vocab: held-out texts do not shape it */
        size_t all = w->train.n, held = dataset_split(&w->train, c->eval_fraction,
                                                      (uint64_t)c->seed, &w->eval);
        if (w->env.rank == 0)
            fprintf(stderr, "gantry-worker: data.evalFraction %g: %zu of the %zu training "
                            "examples held out for evaluation (stratified, seed %lld)\n",
                    c->eval_fraction, held, all, (long long)c->seed);
    }
    if (w->have_init) {
        w->vocab = w->init.vocab; /* ours now */
        w->init.vocab = NULL;
    } else if (c->vocab[0]) {
        if (!(w->vocab = vocab_load(c->vocab, w->err, sizeof(w->err)))) {
            fprintf(stderr, "gantry-worker: data.vocab: %s\n", w->err);
            return DIST_EXIT_DATAERR;
        }
    } else {
        struct vocab_builder *b = vocab_builder_new();
        dataset_count_words(&w->train, &w->topts, b);
        w->vocab = vocab_builder_build(b, (uint64_t)c->min_freq, (size_t)c->vocab_size);
        vocab_builder_free(b);
    }
    dataset_encode(&w->train, w->vocab, &w->topts, (size_t)c->max_seq_len, c->cls_sep,
                   &w->train_enc);
    if (w->eval.n)
        dataset_encode(&w->eval, w->vocab, &w->topts, (size_t)c->max_seq_len, c->cls_sep,
                       &w->eval_enc);
    if (dopts.regression) { /* each example's number */
        dataset_encode_targets(&w->train, &w->train_enc);
        if (w->eval.n)
            dataset_encode_targets(&w->eval, &w->eval_enc);
    }
    if (dopts.multi_label) { /* each example's set of classes as bits */
        dataset_encode_label_sets(&w->train, w->labels.n, &w->train_enc);
        if (w->eval.n)
            dataset_encode_label_sets(&w->eval, w->labels.n, &w->eval_enc);
    }
    return 0;
}

static void model_config_from(const struct cfg *c, int vocab, int classes, struct model_config *mc)
{
    memset(mc, 0, sizeof(*mc));
    mc->kind = !strcmp(c->model_type, "ngram") ? MODEL_NGRAM : MODEL_TRANSFORMER;
    mc->vocab = vocab;
    mc->classes = classes;
    mc->max_seq_len = c->max_seq_len;
    mc->hidden = c->hidden;
    mc->layers = c->layers;
    mc->heads = c->heads;
    mc->ffn = c->ffn ? c->ffn : 4 * c->hidden;
    mc->pool = !strcmp(c->pooling, "cls") ? MODEL_POOL_CLS : MODEL_POOL_MEAN;
    mc->buckets = c->buckets;
}

/* training.classWeight balanced: n / (K x n_k) for the n training examples, n_k of label k
 * (scikit-learn's); a label without training examples gets 1 (never used in training). Every
 * rank loads the whole training set, so all compute the same weights; rank 0 logs them. */
static float *balanced_weights(const struct worker *w)
{
    int K = w->labels.n;
    size_t *count = xcalloc((size_t)K, sizeof(size_t));
    float *cw = xcalloc((size_t)K, sizeof(float));
    for (size_t i = 0; i < w->train_enc.n; i++)
        count[w->train_enc.labels[i]]++;
    for (int k = 0; k < K; k++)
        cw[k] = count[k] ? (float)((double)w->train_enc.n / ((double)K * (double)count[k])) : 1.0f;
    if (w->env.rank == 0) {
        fprintf(stderr, "gantry-worker: class weights (balanced):");
        for (int k = 0; k < K; k++)
            fprintf(stderr, " %s %.4g (%zu)", label_map_name(&w->labels, k), cw[k], count[k]);
        fprintf(stderr, "\n");
    }
    free(count);
    return cw;
}

/* training.classWeights: the user's weight per label (1 for labels not named). NULL with w->err
 * set when a name is not one of data.train's labels (a typo would otherwise weigh nothing). */
static float *given_weights(struct worker *w)
{
    int K = w->labels.n;
    json_t *obj = json_loads(w->cfg.class_weights, 0, NULL), *val;
    const char *key;
    float *cw = xcalloc((size_t)K, sizeof(float));
    double sum = 0;
    for (int k = 0; k < K; k++)
        cw[k] = 1.0f;
    json_object_foreach(obj, key, val)
    {
        int k = label_map_find(&w->labels, key, strlen(key));
        if (k < 0) {
            size_t n = (size_t)snprintf(w->err, sizeof(w->err), "training.classWeights: label "
                                        "\"%.64s\" is not in data.train; its labels:", key);
            for (int j = 0; j < K && n < sizeof(w->err); j++)
                n += (size_t)snprintf(w->err + n, sizeof(w->err) - n, "%s %s", j ? "," : "",
                                      label_map_name(&w->labels, j));
            free(cw), cw = NULL;
            break;
        }
        cw[k] = (float)json_number_value(val);
    }
    json_decref(obj);
    for (int k = 0; cw && k < K; k++)
        sum += cw[k];
    if (cw && !(sum > 0)) {
        snprintf(w->err, sizeof(w->err), "training.classWeights: every label of data.train "
                                         "weighs 0, so nothing would be learned; give some "
                                         "label a positive weight");
        free(cw), cw = NULL;
    }
    if (cw && w->env.rank == 0) {
        fprintf(stderr, "gantry-worker: class weights (classWeights):");
        for (int k = 0; k < K; k++)
            fprintf(stderr, " %s %.4g", label_map_name(&w->labels, k), cw[k]);
        fprintf(stderr, "\n");
    }
    return cw;
}

/* training.initFrom: opens the checkpoint, and its card's model settings replace the job's
 * (model.*, data.clsSep): its weights fit only that model. 0 or an exit status. */
static int open_init(struct worker *w)
{
    struct cfg *c = &w->cfg;
    int rc = model_dir_open(c->init_from, &w->init, w->err, sizeof(w->err));
    if (rc) {
        fprintf(stderr, "gantry-worker: training.initFrom: %s\n", w->err);
        model_dir_close(&w->init);
        return rc;
    }
    w->have_init = true;
    const struct model_card *k = &w->init.card;
    snprintf(c->model_type, sizeof(c->model_type), "%s", k->type);
    snprintf(c->pooling, sizeof(c->pooling), "%s", k->pooling);
    c->layers = k->layers, c->hidden = k->hidden, c->heads = k->heads, c->ffn = k->ffn;
    c->max_seq_len = k->max_seq_len, c->buckets = k->buckets ? k->buckets : c->buckets;
    c->cls_sep = k->cls_sep;
    if (w->env.rank == 0)
        fprintf(stderr, "gantry-worker: initFrom %s (step %ld): a %s model, %d layers, hidden %d, "
                        "%d heads, ffn %d, maxSeqLen %d, vocab %d; these replace the job's model "
                        "settings\n", w->init.dir, w->init.step, k->type, k->layers, k->hidden,
                k->heads, k->ffn, k->max_seq_len, k->vocab_size);
    return 0;
}

/* A job without a checkpoint of its own starts from initFrom's weights: all of them when its
 * labels are the data's (in the same order), else all but the classifier, which stays newly
 * initialised (fine-tuning for other labels). 0 or an exit status. */
static int apply_init(struct worker *w)
{
    /* initFrom naming a job's directory is resolved by every rank on its own, before they
     * meet: one may have found a newer step than another (the source job still writing). Rank
     * 0's step directory is the one for all, or the replicas would start apart. */
    char dir0[sizeof(w->init.dir)] = "";
    snprintf(dir0, sizeof(dir0), "%s", w->init.dir);
    int rc = w->rz ? dist_agree_blob(w->rz, "init/dir", 0, dir0, sizeof(dir0)) : 0;
    if (rc)
        return dist_exit_code(rc);
    if (strcmp(dir0, w->init.dir) != 0) {
        fprintf(stderr, "gantry-worker: rank %d: initFrom: rank 0 took %s, this rank had found "
                        "%s; taking rank 0's\n", w->env.rank, dir0, w->init.dir);
        int vs = w->init.card.vocab_size;
        model_dir_close(&w->init);
        if ((rc = model_dir_open(dir0, &w->init, w->err, sizeof(w->err)))) {
            fprintf(stderr, "gantry-worker: training.initFrom: %s\n", w->err);
            return rc;
        }
        if (w->init.card.vocab_size != vs) {
            fprintf(stderr, "gantry-worker: training.initFrom: %s has a vocab of %d, the step "
                            "this rank read first %d: the source changed under the job\n",
                    dir0, w->init.card.vocab_size, vs);
            return DIST_EXIT_DATAERR;
        }
    }
    const struct label_map *a = &w->init.card.labels, *b = &w->labels;
    bool same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++)
        same = !strcmp(label_map_name(a, i), label_map_name(b, i));
    /* the classifier carries over for the same classes of the same task (softmax vs sigmoids) */
    const bool other_task = same && (w->init.card.multi_label != CFG_MULTI_LABEL(&w->cfg) ||
                                     w->init.card.regression != CFG_REGRESSION(&w->cfg));
    same = same && !other_task;
    rc = same ? model_load_params(&w->model, w->init.weights, w->err, sizeof(w->err))
              : model_load_body(&w->model, w->init.weights, w->err, sizeof(w->err));
    if (rc) {
        fprintf(stderr, "gantry-worker: training.initFrom %s: %s\n", w->init.dir, w->err);
        return DIST_EXIT_DATAERR;
    }
    w->init_head = same;
    if (w->env.rank == 0) {
        fprintf(stderr, "gantry-worker: initialized from %s: %s", w->init.dir,
                same         ? "every tensor, the classifier too (the same labels)\n"
                : other_task ? "every tensor but the classifier, new for this task ("
                             : "every tensor but the classifier, new for this data's labels (");
        if (other_task)
            fprintf(stderr, "%s; the checkpoint's: %s)\n", w->cfg.task,
                    w->init.card.multi_label  ? "multi-label-classification"
                    : w->init.card.regression ? "regression"
                                              : "text-classification");
        for (int i = 0; !same && !other_task && i < b->n; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", label_map_name(b, i));
        for (int i = 0; !same && !other_task && i < a->n; i++)
            fprintf(stderr, "%s%s", i ? ", " : "; the checkpoint's: ", label_map_name(a, i));
        if (!same && !other_task)
            fprintf(stderr, ")\n");
        fprintf(stderr, "gantry-worker: initial parameters fnv1a64 %016llx\n",
                (unsigned long long)hash_fnv1a64(w->model.params,
                                                 w->model.n_params * sizeof(float)));
    }
    ckpt_snapshot_free(w->init.weights); /* not needed any more */
    w->init.weights = NULL;
    return 0;
}

static void train_opts_from(const struct worker *w, struct train_opts *o)
{
    const struct cfg *c = &w->cfg;
    memset(o, 0, sizeof(*o));
    o->epochs = c->epochs;
    o->max_steps = c->max_steps;
    o->batch = c->batch_size;
    o->accum = c->grad_accum_steps;
    optim_config_default(&o->optim);
    o->optim.lr = (float)(c->learning_rate * (c->scale_learning_rate ? w->env.world_size : 1));
    o->optim.beta1 = (float)c->beta1, o->optim.beta2 = (float)c->beta2;
    o->optim.eps = (float)c->eps;
    o->optim.weight_decay = (float)c->weight_decay;
    o->optim.grad_clip = (float)c->grad_clip;
    o->label_smoothing = (float)c->label_smoothing;
    o->optim.min_lr_ratio = (float)c->min_lr_ratio;
    o->optim.decay = !strcmp(c->lr_decay, "linear")     ? OPTIM_LINEAR
                     : !strcmp(c->lr_decay, "constant") ? OPTIM_CONSTANT
                                                        : OPTIM_COSINE;
    o->warmup_steps = c->warmup_steps;
    o->warmup_ratio = c->warmup_ratio;
    o->seed = (uint64_t)c->seed;
    o->log_interval = c->log_interval;
    o->rank = w->env.rank;
    o->world_size = w->env.world_size;
    o->json_out = w->env.rank == 0 ? stdout : NULL;
    o->human_out = w->env.rank == 0 ? stderr : NULL;
}

static struct train_data data_view(const struct dataset_encoded *e)
{
    return (struct train_data){e->ids, e->len, e->labels, e->n, (int)e->max_len, e->label_words};
}

/* Appends an evaluation to the history (every rank keeps it: early stopping decides from it on
 * every rank alike, and checkpoints carry it over restarts). */
static void eval_append(struct worker *w, long step, const struct eval_metrics *em)
{
    if (!w->evals)
        w->evals = json_array();
    json_t *e = json_pack("{s:I, s:f, s:f, s:f, s:f, s:I, s:i}", "step", (json_int_t)step,
                          "loss", isfinite(em->loss) ? em->loss : 0.0, "accuracy", em->accuracy,
                          "macro_f1", em->macro_f1, "micro_f1", em->micro_f1, "examples",
                          (json_int_t)em->total, "world_size", w->env.world_size);
    if (em->regression) {
        json_object_set_new(e, "pearson", json_real(em->pearson));
        json_object_set_new(e, "mae", json_real(em->mae));
    }
    json_array_append_new(w->evals, e);
}

/* The step-<N> directory an evaluation's checkpoint would have, or -1: none (its directory was
 * retired at a change of world size, and a later one of that number is another world's). */
static long long eval_ckpt_step(const json_t *e)
{
    if (!e || json_is_true(json_object_get(e, "checkpoint_retired")))
        return -1;
    return (long long)json_integer_value(json_object_get(e, "step"));
}

/* An evaluation's metrics to /metrics, /progress and TensorBoard. */
static void eval_obs(struct worker *w, long step, const struct eval_metrics *em)
{
    if (em->regression) {
        obs_eval(w->obs, step, "pearson", em->pearson);
        obs_eval(w->obs, step, "mae", em->mae);
        obs_eval(w->obs, step, "loss", em->loss);
        return;
    }
    obs_eval(w->obs, step, "accuracy", em->accuracy);
    obs_eval(w->obs, step, "macro_f1", em->macro_f1);
    if (em->multi_label)
        obs_eval(w->obs, step, "micro_f1", em->micro_f1);
    obs_eval(w->obs, step, "loss", em->loss);
}

/* One evaluation's line for people (stderr) and for programs (stdout, HF Trainer's eval_*
 * names), and its metrics to /metrics, /progress and TensorBoard. Rank 0 only. */
static void eval_log(struct worker *w, long step, int epoch, const struct eval_metrics *em,
                     double seconds, bool final)
{
    if (em->regression) {
        fprintf(stderr, "%s step %ld | loss (MSE) %.4f | MAE %.4f | Pearson %.4f | %llu examples "
                        "| %.2f s\n", final ? "final eval" : "eval", step, em->loss, em->mae,
                em->pearson, (unsigned long long)em->total, seconds);
        if (!final) {
            printf("{\"eval_step\":%ld,\"epoch\":%d,\"eval_loss\":%.6f,\"eval_mae\":%.6f,"
                   "\"eval_pearson\":%.6f,\"eval_examples\":%llu,\"eval_seconds\":%.3f}\n", step,
                   epoch, em->loss, em->mae, em->pearson, (unsigned long long)em->total, seconds);
            fflush(stdout);
        }
        eval_obs(w, step, em);
        return;
    }
    char micro[48] = "";
    if (em->multi_label)
        snprintf(micro, sizeof(micro), " | micro-F1 %.4f", em->micro_f1);
    fprintf(stderr, "%s step %ld | loss %.4f | %s %.2f%%%s | macro-F1 %.4f | %llu examples "
                    "| %.2f s\n",
            final ? "final eval" : "eval", step, em->loss,
            em->multi_label ? "exact match" : "accuracy", 100.0 * em->accuracy, micro,
            em->macro_f1, (unsigned long long)em->total, seconds);
    if (!final) {
        printf("{\"eval_step\":%ld,\"epoch\":%d,\"eval_loss\":%.6f,\"eval_accuracy\":%.6f,"
               "\"eval_macro_f1\":%.6f,\"eval_micro_f1\":%.6f,\"eval_examples\":%llu,"
               "\"eval_seconds\":%.3f}\n",
               step, epoch, em->loss, em->accuracy, em->macro_f1, em->micro_f1,
               (unsigned long long)em->total, seconds);
        fflush(stdout);
    }
    eval_obs(w, step, em);
}

/* The best evaluation of the history by training.bestMetric (the first of equals), and how many
 * evaluations came after it: the best improves on an earlier one only by more than
 * earlyStoppingThreshold. Returns its index, -1 for an empty history. */
static long eval_best(const struct worker *w, long *since)
{
    const bool lower = strcmp(w->cfg.best_metric, "loss") == 0;
    const double thr = w->cfg.early_stopping_threshold;
    size_t n = json_array_size(w->evals);
    long best = -1;
    double bv = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = json_number_value(json_object_get(json_array_get(w->evals, i),
                                                     w->cfg.best_metric));
        if (best < 0 || (lower ? v < bv - thr : v > bv + thr))
            best = (long)i, bv = v;
    }
    *since = best < 0 ? 0 : (long)n - 1 - best;
    return best;
}

/* train_opts.on_eval: every rank gets the job's counts (and decides early stopping alike);
 * rank 0 reports them. */
static int on_eval(void *ctx, long step, int epoch, const struct eval_counts *e, double seconds)
{
    struct worker *w = ctx;
    struct eval_metrics em;
    long since = 0, best;
    eval_compute(e, &em);
    eval_append(w, step, &em);
    if (w->env.rank == 0)
        eval_log(w, step, epoch, &em, seconds, false);
    eval_metrics_cleanup(&em);
    best = eval_best(w, &since);
    if (w->cfg.early_stopping_patience <= 0 || since < w->cfg.early_stopping_patience)
        return 0;
    if (w->env.rank == 0) {
        json_t *b = json_array_get(w->evals, (size_t)best);
        fprintf(stderr, "gantry-worker: early stopping at step %ld: %s has not improved by more "
                        "than %g in %ld evaluations since its best, %.6g at step %lld "
                        "(earlyStoppingPatience %d)\n",
                step, w->cfg.best_metric, w->cfg.early_stopping_threshold, since,
                json_number_value(json_object_get(b, w->cfg.best_metric)),
                (long long)json_integer_value(json_object_get(b, "step")),
                w->cfg.early_stopping_patience);
    }
    metrics_stop_early(obs_metrics(w->obs), step);
    w->stopped_early = true; /* the final checkpoint, next, records it */
    return TRAIN_EARLY_STOP;
}

/* The final evaluation (of the last step) in the history and on /metrics, and the history with
 * its best entry (and that step's checkpoint directory, when kept) into the report rep. */
static void report_evals(struct worker *w, long steps, const struct eval_counts *ec,
                         double seconds, json_t *rep)
{
    struct eval_metrics em;
    eval_compute(ec, &em);
    if (w->cfg.eval_interval > 0) { /* the history's last entry; its line closes the series */
        json_t *last = json_array_get(w->evals, json_array_size(w->evals) - 1);
        if (json_integer_value(json_object_get(last, "step")) != steps) /* early stop: the */
            eval_append(w, steps, &em); /* last step's evaluation is there already */
        eval_log(w, steps, -1, &em, seconds, true);
    } else {
        eval_obs(w, steps, &em);
    }
    eval_metrics_cleanup(&em);
    if (!w->evals)
        return;
    long since, best = eval_best(w, &since);
    json_t *b = json_deep_copy(json_array_get(w->evals, (size_t)best));
    char dir[CFG_MAX_PATH + 32];
    long long at = eval_ckpt_step(b);
    json_object_set_new(b, "metric", json_string(w->cfg.best_metric));
    snprintf(dir, sizeof(dir), "%s/step-%lld", w->cfg.checkpoint_dir, at);
    if (w->cfg.checkpoint_dir[0] && at >= 0 && access(dir, F_OK) == 0) /* checkpointed then */
        json_object_set_new(b, "checkpoint", json_string(dir));
    json_object_set(rep, "evals", w->evals);
    json_object_set_new(rep, "best_eval", b);
}

/* The final report: the evaluation metrics plus how training went. On a GPU (go) the evaluation
 * runs there too. */
static int write_report(struct worker *w, const struct train_result *r, double setup_s,
                        const struct train_gpu_opts *go)
{
    struct eval_counts ec;
    const char *names[DATASET_MAX_LABELS];
    int K = w->labels.n, rc = 0;
    json_t *rep;

    if (w->env.rank != 0) /* rank 0 evaluates the whole eval set and reports */
        return 0;
    for (int i = 0; i < K; i++)
        names[i] = label_map_name(&w->labels, i);
    eval_init_task(&ec, K, w->train_enc.label_words); /* (the eval set may be empty) */
    eval_keep_values(&ec); /* regression: all of the eval set is here, Spearman's rank
                            * correlation too */
    if (w->eval_enc.n) {
        struct train_data ev = data_view(&w->eval_enc);
        int eb = w->cfg.eval_batch_size ? w->cfg.eval_batch_size : w->cfg.batch_size;
        double t0 = now_s();
        if (w->gpu < 0)
            train_evaluate(&w->model, &ev, eb, &ec);
        else if (train_gpu_evaluate(&w->model, &ev, eb, go, &ec) < 0) {
            eval_cleanup(&ec); /* the device model for eval batches: message printed */
            return DIST_EXIT_CONFIG;
        }
        rep = eval_report_json(&ec, names);
        report_evals(w, r->steps, &ec, now_s() - t0, rep);
    } else {
        rep = json_object();
    }
    json_object_set_new(rep, "train", json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:i, s:i}",
        "steps", (json_int_t)r->steps, "seconds", r->seconds, "setup_seconds", setup_s,
        "final_loss", r->last_loss, "samples_per_s", r->samples_per_s,
        "tokens_per_s", r->tokens_per_s, "examples", (json_int_t)w->train_enc.n,
        "parameters", (json_int_t)w->model.n_params, "vocab", vocab_size(w->vocab),
        "world_size", w->env.world_size));
    json_object_set_new(json_object_get(rep, "train"), "allreduce",
                        json_string(w->coll ? coll_allreduce_path(w->coll) : "none"));
    json_object_set_new(json_object_get(rep, "train"), "early_stopped",
                        json_boolean(r->early_stopped));
    if (w->have_init)
        json_object_set_new(json_object_get(rep, "train"), "init_from",
                            json_pack("{s:s, s:I, s:s}", "dir", w->init.dir, "step",
                                      (json_int_t)w->init.step, "classifier",
                                      w->resumed ? "resumed" : w->init_head ? "loaded" : "new"));
    if (w->class_weight) {
        json_t *cw = json_object();
        for (int k = 0; k < K; k++)
            json_object_set_new(cw, names[k], json_real(w->class_weight[k]));
        json_object_set_new(json_object_get(rep, "train"), "class_weight", cw);
    }
    json_object_set_new(rep, "config", cfg_to_json(&w->cfg));
    {
        char *line = json_dumps(rep, JSON_COMPACT);
        printf("%s\n", line);
        free(line);
        if (w->eval_enc.n)
            eval_print(&ec, names, stderr);
        char vol[CFG_MAX_PATH + 16];
        snprintf(vol, sizeof(vol), "%s/report.json", w->cfg.checkpoint_dir);
        const char *dests[2] = {w->cfg.report, w->cfg.checkpoint_dir[0] ? vol : ""};
        for (int i = 0; i < 2; i++) {
            char tmp[CFG_MAX_PATH + 32];
            if (!dests[i][0])
                continue;
            snprintf(tmp, sizeof(tmp), "%s.tmp", dests[i]);
            if (json_dump_file(rep, tmp, JSON_INDENT(2)) || rename(tmp, dests[i])) {
                int e = errno;
                fprintf(stderr, "gantry-worker: could not write the report to %s: %s; check that "
                                "the directory exists and is writable\n",
                        dests[i], strerror(e));
                /* a path that cannot be created fails again after a restart: permanent */
                rc = e == ENOENT || e == ENOTDIR || e == EACCES || e == EROFS
                         ? DIST_EXIT_CANTCREAT
                         : 1;
            }
        }
    }
    json_decref(rep);
    eval_cleanup(&ec);
    return rc;
}

/*
 * After this run's first checkpoint is on disk: step-<M> directories numbered above it are not
 * from this run's history (saved at another world size, where steps count differently, or newer
 * than the step the ranks agreed on), and left there they would win the next resume and be kept
 * over ours. Renamed to .tmp-step-M.retired (ignored by readers, removed by the next write).
 */
static void retire_newer(struct worker *w, int64_t step)
{
    char jobdir[CFG_MAX_PATH + CKPT_MAX_NAME + 2], from[sizeof(jobdir) + 258],
        to[sizeof(from) + 32];
    struct dirent *e;
    DIR *d;

    snprintf(jobdir, sizeof(jobdir), "%s/%s", w->ck_root, w->ck_job);
    if (!(d = opendir(jobdir)))
        return;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "step-", 5))
            continue;
        errno = 0;
        long long m = strtoll(e->d_name + 5, &end, 10);
        if (*end || errno || m <= step)
            continue;
        snprintf(from, sizeof(from), "%s/%s", jobdir, e->d_name);
        snprintf(to, sizeof(to), "%s/.tmp-%s.retired", jobdir, e->d_name);
        if (rename(from, to) == 0)
            fprintf(stderr, "gantry-worker: retired %s (numbered after this run's step-%" PRId64
                            ")\n", from, step);
    }
    closedir(d);
}

/* Reports the write in flight as done (waiting for it). 0 or its error. */
static int ckpt_settle(struct worker *w)
{
    int rc;
    if (!w->writer || w->pending_step < 0)
        return 0;
    rc = ckpt_writer_wait(w->writer);
    if (rc == 0) {
        double secs = now_s() - w->pending_t0;
        obs_checkpoint(w->obs, w->pending_step, secs);
        fprintf(stderr, "gantry-worker: checkpoint step-%lld written to %s/%s (%.2f s)\n",
                (long long)w->pending_step, w->ck_root, w->ck_job, secs);
        if (!w->retired_newer)
            retire_newer(w, w->pending_step);
        w->retired_newer = true;
    }
    w->pending_step = -1;
    return rc;
}

/* train_opts.before_update: the parameters and moments a checkpoint borrowed are copied out
 * before the loop overwrites them (the CPU's optimizer step, the GPU's next download), so the
 * copy overlaps training. */
static void fence_checkpoint(void *ctx)
{
    struct worker *w = ctx;
    if (w->writer)
        ckpt_writer_fence(w->writer);
}

/* The training hook (rank 0): borrow the tensors and hand them to the background writer, which
 * copies them into its reused buffers while training goes on (fence_checkpoint). */
static int save_checkpoint(void *ctx, long step, int epoch, const struct model *m,
                           const struct adamw *opt)
{
    struct worker *w = ctx;
    struct ckpt_snapshot *snap;
    int64_t n = (int64_t)m->n_params;
    int rc;

    if (!w->writer)
        return 0;
    if ((rc = ckpt_settle(w)))
        return rc;
    long in_epoch = step - (long)epoch * w->spe;
    if (in_epoch >= w->spe) /* the epoch is done: the next one starts at 0 */
        epoch++, in_epoch = 0;
    struct ckpt_meta meta = {.step = step, .epoch = (uint64_t)epoch,
                             .world_size = w->env.world_size};
    meta.sampler.epoch = (uint64_t)epoch;
    meta.sampler.consumed = (uint64_t)in_epoch * (uint64_t)w->per_step *
                            (uint64_t)w->env.world_size;
    snprintf(meta.config_hash, sizeof(meta.config_hash), "%s", w->hash);
    snap = ckpt_snapshot_new(&meta);
    if (model_snapshot_params(m, snap) ||
        ckpt_snapshot_borrow(snap, CKPT_OPTIM, "adamw.m", CKPT_F32, 1, &n, opt->m) ||
        ckpt_snapshot_borrow(snap, CKPT_OPTIM, "adamw.v", CKPT_F32, 1, &n, opt->v) ||
        ckpt_snapshot_add_file(snap, CARD_FILE, w->card, strlen(w->card)) ||
        ckpt_snapshot_add_file(snap, CARD_VOCAB_FILE, w->vocab_txt, w->vocab_len)) {
        ckpt_snapshot_free(snap);
        return DIST_EUSAGE;
    }
    /* The data order is derived from (seed, epoch): no other RNG state to keep. */
    json_object_set_new(snap->extra, "adamw_t", json_integer((json_int_t)opt->t));
    json_object_set_new(snap->extra, "seed", json_integer((json_int_t)w->cfg.seed));
    long since, best = eval_best(w, &since);
    if (best >= 0) /* the best evaluation's checkpoint, if one was written, is kept too */
        snap->keep_also = eval_ckpt_step(json_array_get(w->evals, (size_t)best));
    if (w->stopped_early) /* a gang restarted before it exits ends here too, not later */
        json_object_set_new(snap->extra, "early_stopped", json_true());
    if (w->evals) /* the evaluations so far: a resumed run keeps them (a copy: the writer
                   * serialises it in the background while the list grows) */
        json_object_set_new(snap->extra, "evals", json_deep_copy(w->evals));
    w->pending_step = step;
    w->pending_t0 = now_s();
    return ckpt_writer_save(w->writer, snap);
}

/* train_opts.on_stop (rank 0 with checkpoint.saveOnStop): a signal asked the gang to stop
 * (its pods deleted: suspend, preemption, a resize) after a step this run trained and did not
 * checkpoint. Saves it and waits until it is on disk, under checkpoint.stopSaveSeconds instead
 * of the 2 s a stop otherwise gets, so the next run resumes where this one stopped. */
static int save_on_stop(void *ctx, long step, int epoch, const struct model *m,
                        const struct adamw *opt)
{
    struct worker *w = ctx;
    int rc;

    alarm((unsigned)w->cfg.checkpoint_stop_save_seconds);
    fprintf(stderr, "gantry-worker: rank 0: stopping after step %ld: saving it first (at most "
                    "%d s, checkpoint.stopSaveSeconds)\n",
            step, w->cfg.checkpoint_stop_save_seconds);
    if ((rc = save_checkpoint(ctx, step, epoch, m, opt)) || (rc = ckpt_settle(w)))
        return rc;
    w->stop_saved = step;
    return 0;
}

/* The model card (card.h) and vocab.txt that every checkpoint carries, so that a step directory
 * is a model gantry-predict can load by itself. */
static void make_card(struct worker *w)
{
    struct model_card c;
    const struct model_config *mc = &w->model.cfg;

    card_init(&c);
    snprintf(c.type, sizeof(c.type), "%s", mc->kind == MODEL_NGRAM ? "ngram" : "transformer");
    snprintf(c.pooling, sizeof(c.pooling), "%s", mc->pool == MODEL_POOL_CLS ? "cls" : "mean");
    c.layers = mc->layers, c.hidden = mc->hidden, c.heads = mc->heads, c.ffn = mc->ffn;
    c.max_seq_len = mc->max_seq_len, c.buckets = mc->buckets, c.vocab_size = mc->vocab;
    c.text = w->topts;
    c.text.stop = NULL;
    c.cls_sep = w->cfg.cls_sep;
    snprintf(c.text_field, sizeof(c.text_field), "%s", w->cfg.text_field);
    snprintf(c.text_pair_field, sizeof(c.text_pair_field), "%s", w->cfg.text_pair_field);
    snprintf(c.label_field, sizeof(c.label_field), "%s", w->cfg.label_field);
    c.label_index = w->cfg.label_names[0] != '\0';
    c.multi_label = CFG_MULTI_LABEL(&w->cfg), c.label_sep = w->cfg.label_sep[0];
    c.regression = CFG_REGRESSION(&w->cfg);
    for (int i = 0; i < w->labels.n; i++) {
        const char *name = label_map_name(&w->labels, i);
        label_map_add(&c.labels, name, strlen(name));
    }
    w->card = card_dump(&c);
    card_cleanup(&c);
    w->vocab_txt = vocab_dump(w->vocab, &w->vocab_len);
}

/* Splits checkpoint.dir into the library's (root, job). 0 or an exit status. */
static int ckpt_paths(struct worker *w)
{
    char d[CFG_MAX_PATH];
    snprintf(d, sizeof(d), "%s", w->cfg.checkpoint_dir);
    size_t len = strlen(d);
    while (len > 1 && d[len - 1] == '/')
        d[--len] = '\0';
    char *slash = strrchr(d, '/');
    const char *job = slash ? slash + 1 : d;
    if (!*job || strlen(job) >= sizeof(w->ck_job) || !strcmp(job, ".") || !strcmp(job, "..")) {
        fprintf(stderr, "gantry-worker: checkpoint.dir \"%s\": must name the job's directory, "
                        "e.g. /checkpoints/my-job\n", w->cfg.checkpoint_dir);
        return DIST_EXIT_CONFIG;
    }
    memcpy(w->ck_job, job, strlen(job) + 1); /* length checked above */
    if (!slash)
        snprintf(w->ck_root, sizeof(w->ck_root), ".");
    else if (slash == d)
        snprintf(w->ck_root, sizeof(w->ck_root), "/");
    else
        *slash = '\0', snprintf(w->ck_root, sizeof(w->ck_root), "%s", d);
    return 0;
}

/*
 * Finds, agrees on and loads the checkpoint to resume from: *start_step (0 when none) and the
 * optimizer state in *opt. 0 or an exit status.
 */
static int resume(struct worker *w, struct adamw *opt, long *start_step)
{
    int64_t mine = -1, agreed = -1;
    char dir[CFG_MAX_PATH + CKPT_MAX_NAME + 64], why[512];
    struct ckpt_snapshot *s = NULL;
    int rc;

    *start_step = 0;
    if (!w->cfg.checkpoint_dir[0])
        return 0;
    rc = ckpt_find_latest(w->ck_root, w->ck_job, &mine, dir, sizeof(dir));
    if (rc && rc != DIST_ENOENT)
        return dist_exit_code(rc);
    if (rc)
        mine = -1;
    agreed = mine;
    if (w->rz && (rc = dist_agree_resume(w->rz, mine, DIST_RESUME_MIN, &agreed)))
        return dist_exit_code(rc);
    if (agreed < 0) {
        if (w->env.rank == 0)
            fprintf(stderr, "gantry-worker: no checkpoint in %s; starting from step 0\n",
                    w->cfg.checkpoint_dir);
        return 0;
    }
    snprintf(dir, sizeof(dir), "%s/%s/step-%lld", w->ck_root, w->ck_job, (long long)agreed);
    if ((rc = ckpt_verify(dir, why, sizeof(why))) || (rc = ckpt_load(dir, &s))) {
        fprintf(stderr, "gantry-worker: checkpoint %s: %s\n", dir, rc ? why : "");
        return DIST_EXIT_RETRY;
    }
    const struct ckpt_tensor *m = ckpt_snapshot_find(s, CKPT_OPTIM, "adamw.m");
    const struct ckpt_tensor *v = ckpt_snapshot_find(s, CKPT_OPTIM, "adamw.v");
    size_t bytes = w->model.n_params * sizeof(float);
    json_t *t = json_object_get(s->extra, "adamw_t");
    char bad[512] = "";
    if (!m || !v || m->dtype != CKPT_F32 || v->dtype != CKPT_F32 || m->bytes != bytes ||
        v->bytes != bytes)
        snprintf(bad, sizeof(bad), "its optimizer state is not for %zu parameters",
                 w->model.n_params);
    else if (!json_is_integer(t) || json_integer_value(t) < 0 ||
             json_integer_value(t) > CKPT_MAX_COUNT)
        snprintf(bad, sizeof(bad), "its state.json extra.adamw_t (AdamW's step count) is "
                                   "missing or not a count from 0");
    int lrc = bad[0] ? -1 : model_load_params(&w->model, s, bad, sizeof(bad));
    if (lrc == -2) {
        fprintf(stderr, "gantry-worker: checkpoint %s: %s. Training from it goes nowhere: move it "
                        "away (and the newer ones) to resume from an older one, and lower "
                        "training.learningRate or set gradClip\n", dir, bad);
        ckpt_snapshot_free(s);
        return DIST_EXIT_DATAERR;
    }
    if (lrc) {
        fprintf(stderr, "gantry-worker: checkpoint %s does not match this model (%zu parameters): "
                        "%s. Was the model or data changed? Move the old checkpoints away to "
                        "start afresh\n", dir, w->model.n_params, bad);
        ckpt_snapshot_free(s);
        return DIST_EXIT_CONFIG;
    }
    memcpy(opt->m, m->data, bytes);
    memcpy(opt->v, v->data, bytes);
    opt->t = (long)json_integer_value(t);
    /* Where the sampler stood (the epoch's consumed samples), cut into this run's steps: its
     * step number unless the samples per step changed (the world size, batchSize or
     * gradAccumSteps) or the epoch's length did (the data): then steps count anew. */
    uint64_t per = (uint64_t)w->per_step * (uint64_t)w->env.world_size;
    uint64_t in_epoch = s->meta.sampler.consumed / per, spe = (uint64_t)w->spe;
    if (in_epoch > spe)
        in_epoch = spe;
    /* read_state bounds the counters by 2^53, not their product: a position past any step a
     * run reaches ends this one at once rather than overflowing */
    *start_step = s->meta.sampler.epoch >= (uint64_t)CKPT_MAX_COUNT / (spe + 1)
                      ? CKPT_MAX_COUNT
                      : (long)(s->meta.sampler.epoch * spe + in_epoch);
    bool renumbered = *start_step != (long)s->meta.step;
    if (json_is_true(json_object_get(s->extra, "early_stopped")) && !renumbered)
        w->resumed_stopped = (int64_t)s->meta.step;
    json_t *ev = json_object_get(s->extra, "evals"), *e;
    if (json_is_array(ev)) { /* the history goes on, at any world size */
        size_t i, retired = 0;
        json_decref(w->evals);
        w->evals = json_deep_copy(ev);
        json_array_foreach(w->evals, i, e)
        {
            if (!json_object_get(e, "world_size")) /* from before entries named it */
                json_object_set_new(e, "world_size", json_integer(s->meta.world_size));
            /* Steps count differently at another world size: this run numbers its steps from
             * *start_step on, and once its first checkpoint is written the directories numbered
             * above that are retired (retire_newer), so those evaluations lose theirs. */
            if (renumbered && json_integer_value(json_object_get(e, "step")) > *start_step &&
                !json_is_true(json_object_get(e, "checkpoint_retired"))) {
                json_object_set_new(e, "checkpoint_retired", json_true());
                retired++;
            }
        }
        if (renumbered && w->env.rank == 0)
            fprintf(stderr, "gantry-worker: the %zu evaluations before (their steps counted "
                            "otherwise) stay in the history; %zu of their checkpoints are "
                            "numbered after step %ld and will be retired\n",
                    json_array_size(w->evals), retired, *start_step);
    }
    w->resumed = true;
    fprintf(stderr, "gantry-worker: rank %d resumed from step %lld (checkpoint %s)\n",
            w->env.rank, (long long)s->meta.step, dir);
    if (s->meta.world_size != w->env.world_size)
        fprintf(stderr, "gantry-worker: rank %d: saved at world size %d, now %d: continuing at "
                        "this world's step %ld\n",
                w->env.rank, s->meta.world_size, w->env.world_size, *start_step);
    else if (renumbered)
        fprintf(stderr, "gantry-worker: rank %d: saved at epoch %llu with %llu of its samples "
                        "consumed, which with this run's samples per step (batchSize x "
                        "gradAccumSteps x world size = %llu) and %ld steps per epoch is step %ld: "
                        "continuing there\n",
                w->env.rank, (unsigned long long)s->meta.sampler.epoch,
                (unsigned long long)s->meta.sampler.consumed, (unsigned long long)per, w->spe,
                *start_step);
    ckpt_snapshot_free(s);
    return 0;
}

/* FNV-1a of the effective config: ranks must agree on it at rendezvous. */
static void config_hash(const struct cfg *c, char out[17])
{
    json_t *j = cfg_to_json(c);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = s; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    free(s);
    json_decref(j);
}

/* Joins the job and connects the gradient ring when WORLD_SIZE > 1. 0 or an exit status. */
static int join(struct worker *w)
{
    int rc;
    config_hash(&w->cfg, w->hash);
    if (w->env.world_size <= 1)
        return 0;
    dist_log_set_rank(w->env.rank);
    if ((rc = dist_rendezvous(&w->env, w->hash, NULL, &w->rz)) ||
        (rc = w->gpu >= 0 ? coll_nccl_new(dist_rdzv_store(w->rz), w->gpu, NULL, NULL, &w->coll)
                          : coll_tcp_new(dist_rdzv_store(w->rz), NULL, &w->coll)))
        return dist_exit_code(rc);
    if (w->env.rank == 0) {
        const char *path = coll_allreduce_path(w->coll);
        int g = coll_tcp_shm_groups(w->coll), W = w->env.world_size;
        if (strcmp(path, "nodes") == 0)
            fprintf(stderr, "gantry-worker: all-reduce of %d ranks: shared memory within each of "
                    "%d nodes of %d, %d rings between the nodes\n", W, g, W / g, W / g);
        else
            fprintf(stderr, "gantry-worker: all-reduce of %d ranks: %s\n", W,
                    strcmp(path, "shm") == 0 ? "shared memory"
                    : strcmp(path, "ring") == 0 ? "TCP ring" : path);
    }
    return 0;
}

static void worker_cleanup(struct worker *w, bool ok)
{
    if (w->have_init)
        model_dir_close(&w->init);
    ckpt_writer_free(w->writer);
    free(w->card);
    free(w->vocab_txt);
    free(w->class_weight);
    obs_close(w->obs, ok);
    train_coll_cleanup(&w->tc);
    coll_free(w->coll);
    if (ok) /* its final barrier waits up to the rendezvous timeout for peers that may be dead */
        dist_rdzv_free(w->rz);
    model_cleanup(&w->model);
    vocab_free(w->vocab);
    dataset_encoded_cleanup(&w->train_enc);
    dataset_encoded_cleanup(&w->eval_enc);
    dataset_cleanup(&w->train);
    dataset_cleanup(&w->eval);
    label_map_cleanup(&w->labels);
    json_decref(w->evals);
}

/* A pod of a job with NPROC_PER_NODE = G > 1 (gpusPerReplica: G, one process per GPU, or
 * nprocPerNode: G on CPUs) starts one gantry-worker: it becomes the node's agent, like torchrun's, and runs this same program as
 * the node's G ranks (RANK = the node's first rank + LOCAL_RANK), forwards signals to them, stops
 * them all when one fails and exits with the failure that caused it (a permanent 64-78 before a
 * retryable one). The ranks find it set LOCAL_RANK and train. */
static int launch_node(const struct dist_env *e, const struct cfg *c, char **argv)
{
    struct launch_opts lo = {.nproc = e->nproc_per_node,
                             .master_addr = e->master_addr,
                             .master_port = e->master_port,
                             .argv = argv,
                             .file = "/proc/self/exe",
                             .name = "gantry-worker",
                             .world_size = e->world_size,
                             .rank_base = e->rank,
                             .node_rank = e->node_rank};

    /* rank 0 saving the step it stopped at gets its checkpoint.stopSaveSeconds, and 2 more
     * before the agent's SIGKILL (else the agent's default 5 s) */
    if (c->checkpoint_save_on_stop && c->checkpoint_dir[0])
        lo.grace_ms = (c->checkpoint_stop_save_seconds + 2) * 1000;

    /* The agent forwards signals to its ranks (launch_run); a stop that came before must not
     * leave it to on_alarm's _exit with the ranks started and orphaned. From here a stop ends
     * the agent at once until launch_run takes the signals over (no rank exists yet). */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    alarm(0);
    if (g_stop)
        return 128 + g_stop;
    fprintf(stderr, "gantry-worker: node %d: starting ranks %d..%d of %d (NPROC_PER_NODE=%d)\n",
            e->node_rank, e->rank, e->rank + e->nproc_per_node - 1, e->world_size,
            e->nproc_per_node);
    return launch_run(&lo);
}

/* GANTRY_STANDBY=1: the operator's standby pod, which holds the place of a worker an elastic
 * job runs without (elasticPolicy.shrinkAfterSeconds) until the scheduler finds room for it:
 * trains nothing, waits for SIGTERM or SIGINT (the pod deleted when the job grows), exits 0. */
static int standby(void)
{
    sigset_t set;
    int sig = 0;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    fprintf(stderr, "gantry-worker: standby (GANTRY_STANDBY=1): holding this pod's place for "
                    "worker %s until the job grows to it; waiting for SIGTERM\n",
            getenv("RANK") ? getenv("RANK") : "?");
    if (sigwait(&set, &sig) != 0)
        return DIST_EXIT_RETRY;
    fprintf(stderr, "gantry-worker: standby ends (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return 0;
}

int main(int argc, char **argv)
{
    static struct worker w; /* large; zero-initialised */
    const char *sb = getenv("GANTRY_STANDBY");
    if (sb && strcmp(sb, "1") == 0)
        return standby();
    cpu_runtime_setup(argv); /* may re-execute once with OpenMP/OpenBLAS settings (cpu.h) */
    struct model_config mc;
    struct train_opts to;
    struct train_result tr;
    struct train_gpu_opts go;
    struct adamw opt = {0};
    int rc;
    double t0 = now_s();

    install_signals();
    w.pending_step = -1, w.stop_saved = -1;
    w.resumed_stopped = -1;
    label_map_init(&w.labels);
    dataset_init(&w.train);
    dataset_init(&w.eval);
    rc = cfg_load(&w.cfg, argc, argv, stdout, w.err, sizeof(w.err));
    if (rc == CFG_HELP)
        return 0;
    if (rc) {
        fprintf(stderr, "gantry-worker: %s\n", w.err);
        return rc == CFG_EUSAGE ? DIST_EXIT_USAGE : DIST_EXIT_CONFIG;
    }
    if ((rc = dist_env_load(&w.env)))
        return dist_exit_code(rc);
    if (w.env.nproc_per_node > 1 && !getenv("LOCAL_RANK"))
        return launch_node(&w.env, &w.cfg, argv);
    if (w.cfg.init_from[0] && (rc = open_init(&w)))
        return rc;
    if (w.env.rank == 0 && getenv("GANTRY_GPU_BUCKET_MB")) /* read until 2026-11 */
        fprintf(stderr, "gantry-worker: GANTRY_GPU_BUCKET_MB is no longer read; the all-reduce "
                        "bucket size is training.gradBucketMB (GANTRY_GRAD_BUCKET_MB, "
                        "--grad-bucket-mb), %g MiB now\n", w.cfg.grad_bucket_mb);
    w.gpu = -1;
    if (!strcmp(w.cfg.device, "cuda") &&
        (train_gpu_check(w.cfg.model_type, w.err, sizeof(w.err)) ||
         (w.gpu = train_gpu_select(w.env.local_rank, w.err, sizeof(w.err))) < 0)) {
        fprintf(stderr, "gantry-worker: training.%s\n", w.err);
        return DIST_EXIT_CONFIG;
    }
    /* threads 0: the CPUs this process may use (a pod's CPU limit included, which OpenMP does
     * not see), shared by the ranks of one pod or host (torchrun would give each 1);
     * OMP_NUM_THREADS, when set, still decides. */
    if (w.cfg.threads == 0 && !getenv("OMP_NUM_THREADS")) {
        int share = cpu_available() / w.env.nproc_per_node;
        cpu_set_threads(share > 1 ? share : 1);
    } else {
        cpu_set_threads(w.cfg.threads);
    }
    if ((rc = load_data(&w)))
        goto out;
    model_config_from(&w.cfg, vocab_size(w.vocab), CFG_REGRESSION(&w.cfg) ? 1 : w.labels.n, &mc);
    int max_batch = w.cfg.eval_batch_size > w.cfg.batch_size ? w.cfg.eval_batch_size
                                                               : w.cfg.batch_size;
    /* On the GPU the host model keeps the parameters (the upload, checkpoints, the report) and
     * no batch's activations: the device model has its own, and a batch's host activations
     * (the unfused attention's B x heads x T x T among them: 19 GB at GPT-2's shape and batch
     * 32) would only take the pod's memory. */
    if (model_init(&w.model, &mc, w.gpu >= 0 ? 1 : max_batch, (uint64_t)w.cfg.seed, w.err,
                   sizeof(w.err))) {
        fprintf(stderr, "gantry-worker: training.%s\n", w.err);
        rc = DIST_EXIT_CONFIG;
        goto out;
    }
    if (w.env.rank == 0) {
        json_t *eff = cfg_to_json(&w.cfg);
        char *line = json_dumps(eff, JSON_COMPACT);
        fprintf(stderr, "gantry-worker: config %s\n", line);
        fprintf(stderr, "gantry-worker: %d threads, OpenBLAS %s kernels\n", cpu_threads(),
                cpu_blas_core());
        fprintf(stderr, "gantry-worker: %zu training examples (%zu malformed lines skipped, %zu "
                        "truncated to %d tokens), %zu eval, %d labels, vocab %d, %zu parameters\n",
                w.train_enc.n, w.train.n_malformed, w.train_enc.n_truncated, w.cfg.max_seq_len,
                w.eval_enc.n, w.labels.n, vocab_size(w.vocab), w.model.n_params);
        free(line);
        json_decref(eff);
    }
    if (!strcmp(w.cfg.class_weight, "balanced")) {
        w.class_weight = balanced_weights(&w);
    } else if (w.cfg.class_weights[0] && !(w.class_weight = given_weights(&w))) {
        fprintf(stderr, "gantry-worker: %s\n", w.err);
        rc = DIST_EXIT_CONFIG;
        goto out;
    }
    if (w.cfg.checkpoint_dir[0] && (rc = ckpt_paths(&w)))
        goto out;
    if ((rc = join(&w)))
        goto out;
    train_opts_from(&w, &to);
    to.class_weight = w.class_weight;
    /* Gradient buckets: the CPU loop pushes them to the bucketer (train_coll.h); the GPU loop
     * reduces device memory from its own comm thread (go.bucket_bytes below). */
    size_t bucket_bytes = (size_t)(w.cfg.grad_bucket_mb * 1048576.0);
    if (w.coll)
        train_coll_init(&w.tc, w.coll, w.gpu >= 0 ? 0 : bucket_bytes, &to);
    struct train_data td = data_view(&w.train_enc);
    w.per_step = to.batch * to.accum;
    w.spe = train_steps_per_epoch(td.n, to.batch, to.accum, w.env.world_size);
    adamw_init(&opt, w.model.n_params);
    to.opt = &opt;
    to.stop = &g_stop;
    if (w.gpu >= 0 && w.env.world_size > 1 && w.env.rank != 0 && w.cfg.checkpoint_save_on_stop &&
        w.cfg.checkpoint_dir[0]) /* its vote, then rank 0's save: within the pod's grace */
        g_grace_s = w.cfg.checkpoint_stop_save_seconds + STOP_GRACE_S;
    if ((rc = resume(&w, &opt, &to.start_step)))
        goto out;
    if (w.have_init && !w.resumed && (rc = apply_init(&w)))
        goto out;
    else if (w.have_init && w.resumed && w.env.rank == 0)
        fprintf(stderr, "gantry-worker: training.initFrom ignored: the job resumed from its own "
                        "checkpoint\n");
    if (w.resumed_stopped >= 0) { /* training had stopped early there: nothing left to train */
        to.max_steps = to.start_step;
        if (w.env.rank == 0)
            fprintf(stderr, "gantry-worker: the checkpoint of step %lld ended an early-stopped "
                            "run: no more training, the final evaluation only\n",
                    (long long)w.resumed_stopped);
    }
    struct train_data ed = data_view(&w.eval_enc);
    if (w.cfg.eval_interval > 0 && ed.n) {
        to.eval = &ed;
        to.eval_batch = w.cfg.eval_batch_size ? w.cfg.eval_batch_size : w.cfg.batch_size;
        to.eval_interval = w.cfg.eval_interval;
        to.on_eval = on_eval;
        to.eval_ctx = &w;
    }
    if (w.cfg.checkpoint_dir[0]) {
        to.checkpoint = save_checkpoint;
        to.checkpoint_ctx = &w;
        to.checkpoint_interval = w.cfg.checkpoint_interval ? w.cfg.checkpoint_interval : INT_MAX;
        if (w.env.rank == 0 &&
            !(w.writer = ckpt_writer_new(w.ck_root, w.ck_job, w.cfg.checkpoint_keep))) {
            rc = DIST_EXIT_RETRY;
            goto out;
        }
        to.before_update = fence_checkpoint;
        if (w.writer && w.cfg.checkpoint_save_on_stop)
            to.on_stop = save_on_stop;
        if (w.writer)
            make_card(&w);
        /* params + two moments; pre-faulted now, so a checkpoint's copy runs at memory speed */
        if (w.writer && ckpt_writer_reserve(w.writer, 3 * w.model.n_params * sizeof(float))) {
            fprintf(stderr, "gantry-worker: out of memory for the checkpoint buffers (%zu MiB); "
                            "give the pod more memory\n",
                    (size_t)(6 * w.model.n_params * sizeof(float)) >> 20);
            rc = DIST_EXIT_RETRY;
            goto out;
        }
    }
    double setup = now_s() - t0;
    struct obs_config ocfg = {
        .rank = w.env.rank, .world_size = w.env.world_size, .metrics_port = w.cfg.metrics_port,
        .tb_dir = w.cfg.tensorboard_dir,
        .total_steps = train_steps_per_epoch(td.n, to.batch, to.accum, to.world_size) * to.epochs,
        .epochs = to.epochs, .log_interval = to.log_interval, .start_step = to.start_step};
    if (to.max_steps > 0 && to.max_steps < ocfg.total_steps)
        ocfg.total_steps = to.max_steps;
    if (!(w.obs = obs_open(&ocfg))) {
        fprintf(stderr, "gantry-worker: training.metricsPort/tensorboardDir: could not start "
                        "them (see above); pick a free port or a writable directory\n");
        rc = DIST_EXIT_CONFIG;
        goto out;
    }
    to.obs = w.obs;
    if (w.resumed_stopped >= 0)
        metrics_stop_early(obs_metrics(w.obs), w.resumed_stopped);
    train_gpu_opts_default(&go);
    go.bf16 = strcmp(w.cfg.precision, "bf16") == 0;
    go.fused_attention = cfg_fused_attention(&w.cfg);
    go.autotune = cfg_autotune(&w.cfg);
    go.cuda_graphs = w.cfg.cuda_graphs;
    if (w.gpu >= 0 && w.env.rank == 0)
        fprintf(stderr, "gantry-worker: training on the GPU: precision %s, attention %s%s, CUDA "
                        "graphs %s, autotune %s\n", w.cfg.precision,
                go.fused_attention ? "fused" : "unfused",
                strcmp(w.cfg.attention, "auto") ? "" : " (auto)", go.cuda_graphs ? "on" : "off",
                go.autotune ? "on (kernels timed here first)" : "off");
    go.bucket_bytes = bucket_bytes;
    go.nccl = w.gpu >= 0 ? w.coll : NULL; /* NULL with one rank: nothing to reduce */
    rc = w.gpu >= 0 ? train_gpu_run_opts(&w.model, &td, &to, &go, &tr)
                    : train_run(&w.model, &td, &to, &tr);
    if (g_stop) { /* asked to stop: whatever failed on the way, say so (retryable) */
        const char *sig = g_stop == SIGINT ? "SIGINT" : "SIGTERM";
        if (w.stop_saved >= 0)
            fprintf(stderr, "gantry-worker: rank %d: %s at step %ld; its checkpoint is saved: "
                            "the next run resumes there\n", w.env.rank, sig, tr.steps);
        else
            fprintf(stderr, "gantry-worker: rank %d: %s at step %ld; exiting without a new "
                            "checkpoint\n", w.env.rank, sig, tr.steps);
        rc = 128 + g_stop;
        goto out;
    }
    if (rc == TRAIN_STOPPED) { /* a peer was asked to stop: all ranks stopped after one step */
        fprintf(stderr, "gantry-worker: rank %d: a peer was asked to stop (its pod is going) at "
                        "step %ld; %s\n", w.env.rank, tr.steps,
                w.stop_saved >= 0 ? "its checkpoint is saved: the next run resumes there"
                                  : "exiting without a new checkpoint");
        rc = DIST_EXIT_RETRY;
        goto out;
    }
    if (rc) {
        rc = dist_exit_code(rc);
        goto out;
    }
    tr.early_stopped |= w.resumed_stopped >= 0;
    if ((rc = ckpt_settle(&w))) {
        rc = dist_exit_code(rc);
        goto out;
    }
    fprintf(stderr, "gantry-worker: rank %d final parameters fnv1a64 %016llx (step %ld)\n",
            w.env.rank,
            (unsigned long long)hash_fnv1a64(w.model.params, w.model.n_params * sizeof(float)),
            tr.steps);
    rc = write_report(&w, &tr, setup, &go);
out:
    if (w.writer) /* a checkpoint may still be copying the moments freed next */
        ckpt_writer_fence(w.writer);
    adamw_cleanup(&opt);
    worker_cleanup(&w, rc == 0);
    if (rc && w.rz) { /* failed with peers: no final barrier, leave the connection to exit */
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}
