/*
 * gantry-worker - trains a text classifier described by a TrainingJob's training: section.
 *
 *   gantry-worker --config cfg.json [--flag value ...]     (gantry-worker --help lists them)
 *
 * Reads the configuration (cfg.h), the launch environment (dist.h), the training and evaluation
 * data (dataset.h), builds or loads the vocab, trains (train.h) and writes the evaluation report.
 * Progress goes to stdout as JSON lines and to stderr for people; the final report is printed on
 * stdout as one JSON line and written to `report` when set.
 * Exit: 0 done; 64 bad usage; 65 bad data; 78 bad config; other non-zero is retryable.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "kernels/cpu.h"

#include "worker/cfg.h"
#include "worker/coll.h"
#include "worker/dataset.h"
#include "worker/dist.h"
#include "worker/eval.h"
#include "worker/model.h"
#include "worker/obs.h"
#include "worker/train.h"
#include "worker/vocab.h"

#define EXIT_DATAERR 65

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
    struct obs *obs;
    char err[2048];
};

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
    dopts.format = !strcmp(c->format, "jsonl") ? DATASET_JSONL
                   : !strcmp(c->format, "tsv") ? DATASET_TSV
                                               : DATASET_AUTO;
    text_opts_default(&w->topts);
    w->topts.max_tokens = (size_t)c->max_seq_len; /* words beyond what the model sees */
    if (dataset_load(&w->train, c->train, &dopts, &w->labels, w->err, sizeof(w->err))) {
        fprintf(stderr, "gantry-worker: training data: %s\n", w->err);
        return EXIT_DATAERR;
    }
    if (w->train.n == 0 || w->labels.n < 2) {
        fprintf(stderr, "gantry-worker: training data %s: %zu examples with %d distinct labels; "
                        "need at least one example of two classes (fields text and label)\n",
                c->train, w->train.n, w->labels.n);
        return EXIT_DATAERR;
    }
    label_map_sort(&w->labels, remap); /* label ids independent of file order */
    dataset_remap_labels(&w->train, remap);
    w->labels.frozen = true;
    if (c->eval[0] && dataset_load(&w->eval, c->eval, &dopts, &w->labels, w->err,
                                   sizeof(w->err))) {
        fprintf(stderr, "gantry-worker: evaluation data: %s\n", w->err);
        return EXIT_DATAERR;
    }
    if (c->vocab[0]) {
        if (!(w->vocab = vocab_load(c->vocab, w->err, sizeof(w->err)))) {
            fprintf(stderr, "gantry-worker: data.vocab: %s\n", w->err);
            return EXIT_DATAERR;
        }
    } else {
        struct vocab_builder *b = vocab_builder_new();
        dataset_count_words(&w->train, &w->topts, b);
        w->vocab = vocab_builder_build(b, (uint64_t)c->min_freq, (size_t)c->vocab_size);
        vocab_builder_free(b);
    }
    dataset_encode(&w->train, w->vocab, &w->topts, (size_t)c->max_seq_len, c->cls_sep,
                   &w->train_enc);
    if (c->eval[0])
        dataset_encode(&w->eval, w->vocab, &w->topts, (size_t)c->max_seq_len, c->cls_sep,
                       &w->eval_enc);
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
    return (struct train_data){e->ids, e->len, e->labels, e->n, (int)e->max_len};
}

/* The final report: the evaluation metrics plus how training went. */
static int write_report(struct worker *w, const struct train_result *r, double setup_s)
{
    struct eval_counts ec;
    const char *names[DATASET_MAX_LABELS];
    int K = w->labels.n, rc = 0;
    json_t *rep;

    if (w->env.rank != 0) /* rank 0 evaluates the whole eval set and reports */
        return 0;
    for (int i = 0; i < K; i++)
        names[i] = label_map_name(&w->labels, i);
    eval_init(&ec, K);
    if (w->eval_enc.n) {
        struct train_data ev = data_view(&w->eval_enc);
        int eb = w->cfg.eval_batch_size ? w->cfg.eval_batch_size : w->cfg.batch_size;
        train_evaluate(&w->model, &ev, eb, &ec);
        rep = eval_report_json(&ec, names);
        struct eval_metrics em;
        eval_compute(&ec, &em);
        obs_eval(w->obs, r->steps, "accuracy", em.accuracy);
        obs_eval(w->obs, r->steps, "macro_f1", em.macro_f1);
        obs_eval(w->obs, r->steps, "loss", em.loss);
        eval_metrics_cleanup(&em);
    } else {
        rep = json_object();
    }
    json_object_set_new(rep, "train", json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:i, s:i}",
        "steps", (json_int_t)r->steps, "seconds", r->seconds, "setup_seconds", setup_s,
        "final_loss", r->last_loss, "samples_per_s", r->samples_per_s,
        "tokens_per_s", r->tokens_per_s, "examples", (json_int_t)w->train_enc.n,
        "parameters", (json_int_t)w->model.n_params, "vocab", vocab_size(w->vocab),
        "world_size", w->env.world_size));
    json_object_set_new(rep, "config", cfg_to_json(&w->cfg));
    {
        char *line = json_dumps(rep, JSON_COMPACT);
        printf("%s\n", line);
        free(line);
        if (w->eval_enc.n)
            eval_print(&ec, names, stderr);
        if (w->cfg.report[0]) {
            char tmp[CFG_MAX_PATH + 16];
            snprintf(tmp, sizeof(tmp), "%s.tmp", w->cfg.report);
            if (json_dump_file(rep, tmp, JSON_INDENT(2)) || rename(tmp, w->cfg.report)) {
                fprintf(stderr, "gantry-worker: could not write the report to %s: %s; check that "
                                "the directory exists and is writable\n",
                        w->cfg.report, strerror(errno));
                rc = 1;
            }
        }
    }
    json_decref(rep);
    eval_cleanup(&ec);
    return rc;
}

/* The training hook: sum the gradient buffer over ranks (train_run divides by the world). */
static int allreduce_grads(float *buf, size_t n, void *ctx)
{
    return coll_allreduce(ctx, buf, n, COLL_SUM);
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
    char hash[17];
    int rc;
    if (w->env.world_size <= 1)
        return 0;
    dist_log_set_rank(w->env.rank);
    config_hash(&w->cfg, hash);
    if ((rc = dist_rendezvous(&w->env, hash, NULL, &w->rz)) ||
        (rc = coll_tcp_new(dist_rdzv_store(w->rz), NULL, &w->coll)))
        return dist_exit_code(rc);
    return 0;
}

static void worker_cleanup(struct worker *w, bool ok)
{
    obs_close(w->obs, ok);
    coll_free(w->coll);
    dist_rdzv_free(w->rz);
    model_cleanup(&w->model);
    vocab_free(w->vocab);
    dataset_encoded_cleanup(&w->train_enc);
    dataset_encoded_cleanup(&w->eval_enc);
    dataset_cleanup(&w->train);
    dataset_cleanup(&w->eval);
    label_map_cleanup(&w->labels);
}

int main(int argc, char **argv)
{
    static struct worker w; /* large; zero-initialised */
    cpu_runtime_setup(argv); /* may re-execute once with OpenMP/OpenBLAS settings (cpu.h) */
    struct model_config mc;
    struct train_opts to;
    struct train_result tr;
    int rc;
    double t0 = now_s();

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
    cpu_set_threads(w.cfg.threads);
    if ((rc = load_data(&w)))
        goto out;
    model_config_from(&w.cfg, vocab_size(w.vocab), w.labels.n, &mc);
    int max_batch = w.cfg.eval_batch_size > w.cfg.batch_size ? w.cfg.eval_batch_size
                                                               : w.cfg.batch_size;
    if (model_init(&w.model, &mc, max_batch, (uint64_t)w.cfg.seed, w.err, sizeof(w.err))) {
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
    if ((rc = join(&w)))
        goto out;
    train_opts_from(&w, &to);
    if (w.coll) {
        to.reduce = allreduce_grads;
        to.reduce_ctx = w.coll;
    }
    struct train_data td = data_view(&w.train_enc);
    double setup = now_s() - t0;
    struct obs_config ocfg = {
        .rank = w.env.rank, .world_size = w.env.world_size, .metrics_port = w.cfg.metrics_port,
        .tb_dir = w.cfg.tensorboard_dir,
        .total_steps = train_steps_per_epoch(td.n, to.batch, to.accum, to.world_size) * to.epochs,
        .epochs = to.epochs, .log_interval = to.log_interval};
    if (to.max_steps > 0 && to.max_steps < ocfg.total_steps)
        ocfg.total_steps = to.max_steps;
    if (!(w.obs = obs_open(&ocfg))) {
        fprintf(stderr, "gantry-worker: training.metricsPort/tensorboardDir: could not start "
                        "them (see above); pick a free port or a writable directory\n");
        rc = DIST_EXIT_CONFIG;
        goto out;
    }
    to.obs = w.obs;
    if ((rc = train_run(&w.model, &td, &to, &tr))) {
        rc = dist_exit_code(rc);
        goto out;
    }
    rc = write_report(&w, &tr, setup);
out:
    worker_cleanup(&w, rc == 0);
    return rc;
}
