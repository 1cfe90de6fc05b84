/*
 * predict.c - gantry-predict: classifies text with a checkpoint that gantry-worker wrote.
 *
 * A step directory holds everything needed (ckpt.h, card.h): config.json (the model card: shape,
 * labels, tokenizer settings), vocab.txt and model.safetensors. Each is checked against the
 * manifest's SHA-256 before use. Documents are read one per line (JSONL, TSV, or plain text),
 * encoded exactly as the worker encodes training data, run through the CPU model in batches and
 * written as one JSON line each. When the input has labels, the same evaluation report as the
 * worker's (accuracy, macro-F1, per class, confusion) follows on stderr, or in --report.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "common/xalloc.h"
#include "kernels/cpu.h"
#include "worker/card.h"
#include "worker/ckpt.h"
#include "worker/dataset.h"
#include "worker/dist.h"
#include "worker/eval.h"
#include "worker/model.h"
#include "worker/model_io.h"
#include "worker/predict.h"
#include "worker/train_gpu.h"
#include "worker/vocab.h"

#define MAX_LINE DATASET_DEFAULT_MAX_LINE

double predict_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: gantry-predict --model DIR [options] [FILE...]\n"
        "\n"
        "Classifies documents with a checkpoint written by gantry-worker. DIR is a step\n"
        "directory (<checkpoint.dir>/step-300) or a job's checkpoint directory (its newest valid\n"
        "step is used; corrupt ones are skipped). Reads FILEs, or stdin when none or '-', one\n"
        "document per line; writes one JSON line per document:\n"
        "  {\"line\":12,\"label\":\"spam\",\"score\":0.9931}\n"
        "or, for a multi-label model (task: multi-label-classification), every label whose\n"
        "sigmoid is over 0.5, most likely first:\n"
        "  {\"line\":12,\"labels\":[\"toxic\",\"insult\"],\"scores\":[0.97,0.81]}\n"
        "or, for a regression model (task: regression), its output:\n"
        "  {\"line\":12,\"value\":3.85}\n"
        "With labelled input (JSONL \"label\" field, TSV's last field), the evaluation report\n"
        "(accuracy, macro-F1, per class, confusion) follows on stderr. A model trained on text\n"
        "pairs (data.textPairField) reads pairs: JSONL's two fields, CSV's two columns, TSV's\n"
        "text<TAB>pair<TAB>label, plain text's text<TAB>pair.\n"
        "\n"
        "Options:\n"
        "  -m, --model DIR          checkpoint step or job directory (required)\n"
        "  -f, --format FMT         auto|jsonl|tsv|csv|text (auto: .jsonl/.json/.ndjson are\n"
        "                           JSONL, .tsv is TSV, .csv is CSV with a header naming the\n"
        "                           columns, anything else and stdin one text per line;\n"
        "                           gzip-compressed input is read as such, FILE.jsonl.gz too)\n"
        "  -o, --output FILE        predictions here instead of stdout\n"
        "  -k, --top-k K            also list the K most likely labels (\"top\"); default 1\n"
        "      --threshold P        multi-label: a label is predicted when its sigmoid is over\n"
        "                           P (0 < P < 1; default 0.5), in the output and the report\n"
        "  -b, --batch N            documents per forward pass (default 32)\n"
        "  -t, --threads N          CPU threads (default: the CPUs this process may use)\n"
        "      --report FILE        with labelled input: the evaluation report as JSON\n"
        "      --text-field NAME    JSONL text field (default: the model's, \"text\" unless\n"
        "                           it was trained with data.textField)\n"
        "      --pair-field NAME    JSONL field of a text pair's second text (default: the\n"
        "                           model's data.textPairField; only for text pair models)\n"
        "      --label-field NAME   JSONL label field (default: the model's, \"label\")\n"
        "      --strict             a malformed line is fatal (exit 65) instead of skipped\n"
        "  -q, --quiet              no summary or progress on stderr\n"
        "      --serve PORT         serve predictions over HTTP instead of reading files:\n"
        "                           POST /v1/models/NAME:predict (KServe's V1 protocol) with\n"
        "                           {\"instances\": [\"text\", {\"text\": \"...\"}, ...], \"top_k\": K}\n"
        "                           (text pairs: [\"text\", \"pair\"], or an object with\n"
        "                           the model's two fields: GET /v1/models/NAME's \"inputs\")\n"
        "                           answers {\"predictions\": [{\"label\", \"score\"}, ...]};\n"
        "                           GET /v1/models/NAME (ready), /healthz, /metrics; stops on\n"
        "                           SIGTERM. Port 0: any free one (printed)\n"
        "      --bind ADDR          the server's IPv4 address (default 0.0.0.0)\n"
        "      --name NAME          the model's name in the URLs (default: the job directory's)\n"
        "      --device cpu|cuda    where the model runs (default cpu; cuda: the Transformer on\n"
        "                           the first visible GPU, in a build with CUDA)\n"
        "      --precision fp32|bf16  on the GPU: bf16 mixed precision (default fp32)\n"
        "  -h, --help               this text\n"
        "\n"
        "Exit codes: 0 done; 64 bad usage; 65 bad data or a checkpoint without a model card\n"
        "or that is corrupt; 66 model or input not found; 73/74 output not writable; 78\n"
        "--device cuda impossible here (no CUDA build, no GPU, or the n-gram model).\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},  {"format", required_argument, 0, 'f'},
        {"output", required_argument, 0, 'o'}, {"top-k", required_argument, 0, 'k'},
        {"batch", required_argument, 0, 'b'},  {"threads", required_argument, 0, 't'},
        {"report", required_argument, 0, 'r'}, {"text-field", required_argument, 0, 'T'},
        {"label-field", required_argument, 0, 'L'}, {"strict", no_argument, 0, 'S'},
        {"pair-field", required_argument, 0, 'W'},
        {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
        {"serve", required_argument, 0, 's'},  {"bind", required_argument, 0, 'B'},
        {"name", required_argument, 0, 'N'},   {"device", required_argument, 0, 'D'},
        {"precision", required_argument, 0, 'P'}, {"threshold", required_argument, 0, 'H'},
        {0, 0, 0, 0}};
    int c;

    memset(o, 0, sizeof(*o));
    o->top_k = 1, o->batch = 32, o->serve = -1, o->bind = "0.0.0.0", o->threshold = 0.5;
    while ((c = getopt_long(argc, argv, "m:f:o:k:b:t:qh", lo, NULL)) != -1) {
        char *end = NULL;
        long v = 0;
        if (strchr("kbts", c) && (!optarg[0] || (v = strtol(optarg, &end, 10), *end) || v < 0 ||
                                  v > 65536 || (v == 0 && c != 't' && c != 's') ||
                                  (c == 's' && v > 65535))) {
            fprintf(stderr, "gantry-predict: --%s %s: must be %s\n",
                    c == 'k' ? "top-k" : c == 'b' ? "batch" : c == 's' ? "serve" : "threads", optarg,
                    c == 't'   ? "0 (all CPUs) or more"
                    : c == 's' ? "a port in 0-65535 (0: any free one)"
                               : "a whole number from 1 to 65536");
            return DIST_EXIT_USAGE;
        }
        switch (c) {
        case 'H':
            o->threshold = strtod(optarg, &end);
            if (end == optarg || *end || !(o->threshold > 0.0 && o->threshold < 1.0)) {
                fprintf(stderr, "gantry-predict: --threshold %s: must be a number between 0 and 1 "
                                "(a sigmoid), e.g. 0.5\n", optarg);
                return DIST_EXIT_USAGE;
            }
            break;
        case 'm': o->model = optarg; break;
        case 'o': o->output = optarg; break;
        case 'k': o->top_k = (int)v; break;
        case 'b': o->batch = (int)v; break;
        case 't': o->threads = (int)v; break;
        case 'r': o->report = optarg; break;
        case 'T': o->text_field = optarg; break;
        case 'L': o->label_field = optarg; break;
        case 'W': o->pair_field = optarg; break;
        case 'S': o->strict = true; break;
        case 's': o->serve = (int)v; break;
        case 'B': o->bind = optarg; break;
        case 'N': o->name = optarg; break;
        case 'D':
        case 'P': {
            const char *yes = c == 'D' ? "cuda" : "bf16", *no = c == 'D' ? "cpu" : "fp32";
            if (strcmp(optarg, yes) != 0 && strcmp(optarg, no) != 0) {
                fprintf(stderr, "gantry-predict: --%s %s: use %s or %s\n",
                        c == 'D' ? "device" : "precision", optarg, no, yes);
                return DIST_EXIT_USAGE;
            }
            *(c == 'D' ? &o->cuda : &o->bf16) = !strcmp(optarg, yes);
            break;
        }
        case 'q': o->quiet = true; break;
        case 'h': usage(stdout); exit(0);
        case 'f':
            if (!strcmp(optarg, "auto")) o->format = FMT_AUTO;
            else if (!strcmp(optarg, "jsonl")) o->format = FMT_JSONL;
            else if (!strcmp(optarg, "tsv")) o->format = FMT_TSV;
            else if (!strcmp(optarg, "csv")) o->format = FMT_CSV;
            else if (!strcmp(optarg, "text")) o->format = FMT_TEXT;
            else {
                fprintf(stderr, "gantry-predict: --format %s: use auto, jsonl, tsv, csv or text\n",
                        optarg);
                return DIST_EXIT_USAGE;
            }
            break;
        default:
            fprintf(stderr, "gantry-predict: see --help for the options\n");
            return DIST_EXIT_USAGE;
        }
    }
    if (o->bf16 && !o->cuda) {
        fprintf(stderr, "gantry-predict: --precision bf16 needs --device cuda (the CPU model is "
                        "fp32)\n");
        return DIST_EXIT_USAGE;
    }
    if (!o->model) {
        fprintf(stderr, "gantry-predict: --model DIR is required: a checkpoint step directory "
                        "(…/step-300) or a job's checkpoint directory\n");
        return DIST_EXIT_USAGE;
    }
    return 0;
}

/* --model: the step directory (ckpt.h), its card, vocab and weights (model_io.h). 0 or an exit
 * status. */
static int load_model(struct pred *p)
{
    struct model_dir md;
    char why[2048] = "";
    int rc = model_dir_open(p->o.model, &md, why, sizeof(why));

    if (rc) {
        fprintf(stderr, "gantry-predict: --model %s\n", why);
        model_dir_close(&md);
        return rc;
    }
    memcpy(p->dir, md.dir, sizeof(p->dir));
    p->step = md.step;
    p->card = md.card, p->vocab = md.vocab; /* theirs now */
    card_init(&md.card);
    md.vocab = NULL;
    /* (--device cuda: the host model only holds the parameters for the device model's upload;
     * the device model has the batch's buffers) */
    if (model_alloc(&p->model, &md.mc, p->o.cuda ? 1 : p->o.batch, why, sizeof(why)) != 0)
        fprintf(stderr, "gantry-predict: %s/%s: model: %s\n", p->dir, CARD_FILE, why), rc = 1;
    else if ((rc = model_load_params(&p->model, md.weights, why, sizeof(why))))
        fprintf(stderr, "gantry-predict: %s/model.safetensors: %s%s%s\n", p->dir, why,
                rc == -2 ? "" : " (the weights do not fit ", rc == -2 ? "" : CARD_FILE ")");
    model_dir_close(&md);
    return rc ? DIST_EXIT_DATAERR : 0;
}

/* --device cuda: the device model (train_gpu.h), and host buffers for its logits and
 * probabilities. 0 or 78 with the reason. */
static int setup_gpu(struct pred *p)
{
    struct train_gpu_opts go;
    char err[512];
    if (!train_gpu_built()) {
        fprintf(stderr, "gantry-predict: --device cuda: this gantry-predict was built without "
                        "CUDA; use --device cpu, or a build with GANTRY_CUDA=ON (the "
                        "gantry-worker-cuda image)\n");
        return DIST_EXIT_CONFIG;
    }
    train_gpu_opts_default(&go);
    go.bf16 = p->o.bf16;
    if (train_gpu_check(p->card.type, err, sizeof(err)) ||
        train_gpu_select(0, err, sizeof(err)) < 0 ||
        !(p->gpu = train_gpu_infer_new(&p->model, p->o.batch, &go, err, sizeof(err)))) {
        fprintf(stderr, "gantry-predict: --device cuda: %s\n", err);
        return DIST_EXIT_CONFIG;
    }
    p->logits = xmallocarray((size_t)p->o.batch * p->K, sizeof(float));
    p->probs = xmallocarray((size_t)p->o.batch * p->K, sizeof(float));
    return 0;
}

static int setup(struct pred *p)
{
    if (p->o.pair_field && !p->card.text_pair_field[0]) {
        fprintf(stderr, "gantry-predict: --pair-field %s: the model in %s classifies single "
                        "texts, not text pairs; leave --pair-field out\n", p->o.pair_field,
                p->dir);
        return DIST_EXIT_USAGE;
    }
    if (!p->o.text_field)
        p->o.text_field = p->card.text_field;
    if (!p->o.label_field)
        p->o.label_field = p->card.label_field;
    if (!p->o.pair_field && p->card.text_pair_field[0])
        p->o.pair_field = p->card.text_pair_field;
    p->K = p->card.regression ? 1 : p->card.labels.n; /* regression: one output, no names */
    p->maxT = p->card.max_seq_len;
    p->lw = p->card.multi_label ? (p->K + 31) / 32 : 0;
    /* the CPU model's probs: sigmoids (multi-label), or the outputs themselves (regression) */
    p->model.label_words = p->card.regression ? MODEL_TARGETS_REAL : p->lw;
    p->quoted = xcalloc((size_t)p->K, sizeof(char *));
    p->names = xcalloc((size_t)p->K, sizeof(char *));
    for (int i = 0; i < p->card.labels.n; i++) {
        json_t *s = json_string(label_map_name(&p->card.labels, i));
        p->quoted[i] = json_dumps(s, JSON_ENCODE_ANY);
        p->names[i] = label_map_name(&p->card.labels, i);
        json_decref(s);
    }
    text_tokens_init(&p->tok);
    size_t B = (size_t)p->o.batch, T = (size_t)p->maxT;
    p->rows = xmallocarray(B * T, sizeof(int32_t));
    p->x = xmallocarray(B * T, sizeof(int));
    p->len = xmallocarray(B, sizeof(int));
    p->line = xmallocarray(B, sizeof(long));
    p->label = xmallocarray(B * (size_t)(p->lw ? p->lw : 1), sizeof(int32_t));
    p->has_label = xcalloc(B, sizeof(bool));
    p->top = xmallocarray((size_t)p->K, sizeof(int));
    if (p->o.threshold != 0.5 && !p->lw) {
        fprintf(stderr, "gantry-predict: --threshold: the model in %s is not multi-label (its "
                        "task: %s); leave --threshold out\n", p->dir,
                p->card.regression ? "regression" : "text-classification");
        return DIST_EXIT_USAGE;
    }
    if (eval_init_task(&p->ec, p->K, p->card.regression ? MODEL_TARGETS_REAL : p->lw))
        return DIST_EXIT_USAGE;
    eval_keep_values(&p->ec); /* regression: Spearman's rank correlation too */
    eval_set_threshold(&p->ec, p->o.threshold); /* multi-label: the output's and the report's */
    return p->o.cuda ? setup_gpu(p) : 0;
}

int predict_add(struct pred *p, const char *text, size_t len, const char *pair, size_t pair_len,
                long line, const int32_t *label)
{
    size_t lw = p->lw ? (size_t)p->lw : 1;
    bool cut = false;
    int32_t *row = p->rows + (size_t)p->n * p->maxT;
    p->len[p->n] = (int)dataset_encode_text(p->vocab, &p->card.text, text, len, pair, pair_len,
                                            (size_t)p->maxT, p->card.cls_sep, &p->tok, row, &cut);
    p->truncated += cut;
    p->line[p->n] = line;
    p->has_label[p->n] = label != NULL;
    if (label)
        memcpy(p->label + (size_t)p->n * lw, label, lw * sizeof(int32_t));
    return ++p->n == p->o.batch ? predict_flush(p) : 0;
}

/* Descending probability, the lower class first among equals (as the selection picks). */
static int by_prob(const void *a, const void *b, void *pr_)
{
    const float *pr = pr_;
    int x = *(const int *)a, y = *(const int *)b;
    return pr[x] > pr[y] ? -1 : pr[x] < pr[y] ? 1 : (x > y) - (x < y);
}

/* p->top[0..k): the k most likely classes of probabilities pr: by selection for a few, by
 * sorting the classes for more (k x K would be an hour for 10000 documents of 1000 labels). */
static void select_top(struct pred *p, const float *pr, int k)
{
    if (k > 8) {
        for (int c = 0; c < p->K; c++)
            p->top[c] = c;
        qsort_r(p->top, (size_t)p->K, sizeof(*p->top), by_prob, (void *)pr);
        return;
    }
    for (int i = 0; i < k; i++) {
        int pick = -1;
        for (int c = 0; c < p->K; c++) {
            bool used = false;
            for (int j = 0; j < i; j++)
                used |= p->top[j] == c;
            if (!used && (pick < 0 || pr[c] > pr[pick]))
                pick = c;
        }
        p->top[i] = pick;
    }
}

/* Writes document b's prediction: a JSON line ({"file"?, "line", "label", "score", "top"?}), or
 * an array element without the line for the server. */
static void emit(struct pred *p, int b, const float *pr, const float *lg, int k)
{
    int best = 0;
    for (int c = 1; c < p->K; c++) /* the first of equals, as the evaluation counts it */
        best = pr[c] > pr[best] ? c : best;
    if (p->lw && !p->card.regression) /* multi-label: every class over the threshold, most */
        select_top(p, pr, p->K);       /* likely first */
    fprintf(p->out, "%s{", p->array && p->emitted++ ? "," : "");
    if (p->name_files) {
        json_t *f = json_string(p->file);
        char *q = json_dumps(f, JSON_ENCODE_ANY);
        fprintf(p->out, "\"file\":%s,", q ? q : "null");
        free(q);
        json_decref(f);
    }
    if (!p->array)
        fprintf(p->out, "\"line\":%ld,", p->line[b]);
    if (p->card.regression) {
        fprintf(p->out, "\"value\":%.7g%s", (double)pr[0], p->array ? "}" : "}\n");
        return;
    }
    if (p->lw) { /* decided on the logits, as the report counts them */
        const float cut = eval_threshold_logit(&p->ec);
        int n = 0;
        fprintf(p->out, "\"labels\":[");
        for (int i = 0; i < p->K; i++)
            if (lg[p->top[i]] > cut)
                fprintf(p->out, "%s%s", n++ ? "," : "", p->quoted[p->top[i]]);
        fprintf(p->out, "],\"scores\":[");
        for (int i = 0, m = 0; i < p->K; i++)
            if (lg[p->top[i]] > cut)
                fprintf(p->out, "%s%.6g", m++ ? "," : "", (double)pr[p->top[i]]);
        fprintf(p->out, "]");
    } else {
        fprintf(p->out, "\"label\":%s,\"score\":%.6g", p->quoted[best], (double)pr[best]);
    }
    if (k > 1) {
        if (!p->lw)
            select_top(p, pr, k);
        fprintf(p->out, ",\"top\":[");
        for (int i = 0; i < k; i++)
            fprintf(p->out, "%s{\"label\":%s,\"score\":%.6g}", i ? "," : "",
                    p->quoted[p->top[i]], (double)pr[p->top[i]]);
        fprintf(p->out, "]");
    }
    fprintf(p->out, p->array ? "}" : "}\n");
}

/* Counts a labelled document in the evaluation: its prediction and cross-entropy (from logits,
 * in double, as the worker's loss). */
/* The largest of K logits in *mx, and the sum of exp(logit - *mx): softmax's parts, in double. */
static double sum_exp(const float *lg, int K, double *mx)
{
    double se = 0.0;
    *mx = lg[0];
    for (int c = 1; c < K; c++)
        *mx = lg[c] > *mx ? lg[c] : *mx;
    for (int c = 0; c < K; c++)
        se += exp((double)lg[c] - *mx);
    return se;
}

static void count_eval(struct pred *p, int b, const float *lg)
{
    if (p->card.regression) { /* label: the target's bits */
        float y;
        memcpy(&y, &p->label[b], sizeof(y));
        eval_add_regression(&p->ec, &y, lg, 1);
        eval_add_loss(&p->ec, ((double)lg[0] - y) * ((double)lg[0] - y), 1);
        p->labelled++;
        return;
    }
    if (p->lw) { /* the sigmoid binary cross-entropy, mean over the classes, in double */
        const int32_t *y = p->label + (size_t)b * p->lw;
        double l = 0.0;
        for (int c = 0; c < p->K; c++) {
            double z = lg[c];
            l += fmax(z, 0.0) - (((uint32_t)y[c >> 5] >> (c & 31)) & 1u ? z : 0.0) +
                 log1p(exp(-fabs(z)));
        }
        eval_add_logits_multi(&p->ec, y, p->lw, lg, 1);
        eval_add_loss(&p->ec, l / p->K, 1);
        p->labelled++;
        return;
    }
    double mx, se = sum_exp(lg, p->K, &mx);
    eval_add_logits(&p->ec, &p->label[b], lg, 1);
    eval_add_loss(&p->ec, mx + log(se) - (double)lg[p->label[b]], 1);
    p->labelled++;
}

static void softmax_row(const float *lg, float *pr, int K)
{
    double mx, se = sum_exp(lg, K, &mx);
    for (int c = 0; c < K; c++)
        pr[c] = (float)(exp((double)lg[c] - mx) / se);
}

int predict_flush(struct pred *p)
{
    int B = p->n, T = 1, K = p->K, k = p->o.top_k < K ? p->o.top_k : K;
    if (B == 0)
        return 0;
    for (int b = 0; b < B; b++)
        T = p->len[b] > T ? p->len[b] : T;
    for (int b = 0; b < B; b++) /* (B, maxT) rows to (B, T): no work on padding beyond T */
        for (int t = 0; t < T; t++)
            p->x[(size_t)b * T + t] = p->rows[(size_t)b * p->maxT + t];
    const float *probs = p->probs, *logits = p->logits;
    if (p->gpu) {
        train_gpu_infer_logits(p->gpu, p->x, p->len, B, T, p->logits);
        if (p->card.regression) /* the outputs themselves */
            memcpy(p->probs, p->logits, (size_t)B * sizeof(float));
        for (int b = 0; b < B && !p->lw && !p->card.regression; b++) /* softmax, in double */
            softmax_row(p->logits + (size_t)b * K, p->probs + (size_t)b * K, K);
        for (size_t i = 0; p->lw && i < (size_t)B * K; i++) /* multi-label: sigmoids */
            p->probs[i] = (float)(1.0 / (1.0 + exp(-(double)p->logits[i])));
    } else {
        model_forward(&p->model, p->x, p->len, NULL, B, T); /* sets model.probs and .logits */
        probs = p->model.probs, logits = p->model.logits;
    }
    for (int b = 0; b < B; b++) {
        emit(p, b, probs + (size_t)b * K, logits + (size_t)b * K, k);
        if (p->has_label[b])
            count_eval(p, b, logits + (size_t)b * K);
    }
    p->docs += (size_t)B;
    p->n = 0;
    if (fflush(p->out) != 0 || ferror(p->out)) {
        fprintf(stderr, "gantry-predict: writing the predictions: %s\n", strerror(errno));
        return DIST_EXIT_IOERR;
    }
    double now = predict_now();
    if (!p->o.quiet && !p->array && now - p->last_note >= 10.0) {
        fprintf(stderr, "gantry-predict: %zu documents, %.0f/s\n", p->docs,
                (double)p->docs / (now - p->t0));
        p->last_note = now;
    }
    return 0;
}

static enum fmt format_of(const char *path, enum fmt want)
{
    char name[4096];
    size_t n = strlen(path);
    if (want != FMT_AUTO)
        return want;
    if (n > 3 && !strcmp(path + n - 3, ".gz")) /* by the name under the compression */
        n -= 3;
    snprintf(name, sizeof(name), "%.*s", (int)n, path);
    const char *dot = strrchr(name, '.');
    if (dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".json") || !strcmp(dot, ".ndjson")))
        return FMT_JSONL;
    if (dot && !strcmp(dot, ".tsv"))
        return FMT_TSV;
    if (dot && !strcmp(dot, ".csv"))
        return FMT_CSV;
    return FMT_TEXT;
}

/* One line to a document: the worker's parser for JSONL and TSV, with the label optional in
 * JSONL; plain text is the text, or for a text pair model text<TAB>pair. 0 ok (out's strings
 * new), 1 skip silently, -1 malformed (why). */
static int parse(struct pred *p, enum fmt f, char *s, size_t n, struct dataset_line *out,
                 char *why, size_t whylen)
{
    struct dataset_opts o;

    memset(out, 0, sizeof(*out));
    if (f == FMT_TEXT) {
        const char *tab = p->o.pair_field ? memchr(s, '\t', n) : NULL;
        if (memchr(s, '\0', n)) {
            snprintf(why, whylen, "NUL byte in the text");
            return -1;
        }
        if (p->o.pair_field && !tab) {
            snprintf(why, whylen, "no tab; the model classifies text pairs: want text<TAB>pair");
            return -1;
        }
        out->text_len = tab ? (size_t)(tab - s) : n;
        out->text = xstrndup(s, out->text_len);
        if (tab) {
            out->pair_len = n - out->text_len - 1;
            out->pair = xstrndup(tab + 1, out->pair_len);
        }
        return 0;
    }
    dataset_opts_default(&o);
    o.text_field = p->o.text_field;
    o.label_field = p->o.label_field;
    o.pair_field = p->o.pair_field;
    o.label_optional = true;
    o.multi_label = p->lw > 0, o.label_sep = p->card.label_sep;
    o.regression = p->card.regression;
    return dataset_parse_line(f == FMT_TSV ? DATASET_TSV : DATASET_JSONL, &o, s, n, out, why,
                              whylen);
}

/* The next line of in into *buf (without its newline; NUL-terminated; NUL bytes inside are
 * kept and counted), holding at most max bytes: the rest of a longer line is read and dropped,
 * and max + 1 returned. The length, or -1 at the end of the input. Memory stays bounded. */
static ssize_t read_line(gzFile in, char **buf, size_t *cap, size_t max)
{
    size_t n = 0;
    bool any = false, over = false;
    int c;

    if (!*buf)
        *buf = xmalloc(*cap = 4096);
    while ((c = gzgetc(in)) != -1) {
        any = true;
        if (c == '\n')
            break;
        if (n == max) {
            over = true;
            continue;
        }
        if (n + 1 >= *cap)
            *buf = xrealloc(*buf, *cap *= 2);
        (*buf)[n++] = (char)c;
    }
    if (!any)
        return -1;
    (*buf)[n] = '\0';
    return (ssize_t)(over ? max + 1 : n);
}

/* The next record into *buf, as read_line(): a line, or in CSV the lines up to the end of the
 * quoted fields that hold newlines (*lines: how many lines it took). A line too long to scan
 * ends its record. */
static ssize_t read_record(gzFile in, bool csv, char **buf, size_t *cap, size_t max,
                           long *lines)
{
    struct dataset_csv_scan st = {.start = true};
    ssize_t got = read_line(in, buf, cap, max);
    bool over = got > (ssize_t)max;
    size_t n = over ? max : (size_t)(got > 0 ? got : 0);
    char *more = NULL;
    size_t mcap = 0;

    *lines = 1;
    if (got < 0 || !csv || over)
        return got;
    dataset_csv_scan(&st, *buf, n);
    while (dataset_csv_open(&st)) {
        ssize_t g = read_line(in, &more, &mcap, max);
        if (g < 0)
            break; /* the unclosed quote is the record's error */
        (*lines)++;
        dataset_csv_scan(&st, "\n", 1);
        if (g > (ssize_t)max)
            break; /* cannot be scanned: the record ends here, too long */
        dataset_csv_scan(&st, more, (size_t)g);
        if (over || n + 1 + (size_t)g > max) {
            over = true;
            continue;
        }
        if (n + 2 + (size_t)g > *cap)
            *buf = xrealloc(*buf, *cap = n + 2 + (size_t)g);
        (*buf)[n++] = '\n';
        memcpy(*buf + n, more, (size_t)g);
        n += (size_t)g;
        (*buf)[n] = '\0';
    }
    free(more);
    return over ? (ssize_t)max + 1 : (ssize_t)n;
}

/* Reads one input; documents go into batches. 0 or an exit status. */
static int run_file(struct pred *p, const char *path)
{
    /* zlib reads gzip-compressed input and plain input alike */
    gzFile in = strcmp(path, "-") ? gzopen(path, "rb") : gzdopen(dup(STDIN_FILENO), "rb");
    int zerr = Z_OK;
    enum fmt f = format_of(strcmp(path, "-") ? path : "", p->o.format);
    char *buf = NULL, why[256];
    struct dataset_line dl;
    struct dataset_csv csv;
    struct dataset_opts co;
    bool header = false;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0, lines = 1;
    int rc = 0;

    if (!in) {
        fprintf(stderr, "gantry-predict: %s: %s\n", path, strerror(errno));
        return DIST_EXIT_NOINPUT;
    }
    p->file = path;
    dataset_opts_default(&co);
    co.text_field = p->o.text_field, co.label_field = p->o.label_field;
    co.pair_field = p->o.pair_field, co.label_optional = true;
    co.multi_label = p->lw > 0, co.label_sep = p->card.label_sep;
    co.regression = p->card.regression;
    int32_t *known = xcalloc(p->lw ? (size_t)p->lw : 1, sizeof(int32_t));
    while (!rc && (got = read_record(in, f == FMT_CSV, &buf, &cap, MAX_LINE, &lines)) >= 0) {
        size_t n = (size_t)got;
        long at = lineno + 1; /* the record's first line */
        lineno += lines;
        if (n && n <= MAX_LINE && buf[n - 1] == '\r')
            n--;
        if (f == FMT_CSV && !header && n > 0 && n <= MAX_LINE) { /* the header names the columns */
            if (dataset_csv_header(&csv, &co, buf, n, why, sizeof(why))) {
                fprintf(stderr, "gantry-predict: %s:%ld: %s\n", path, at, why);
                rc = DIST_EXIT_DATAERR;
            }
            header = true;
            continue;
        }
        int pr = n > MAX_LINE ? (snprintf(why, sizeof(why), "line longer than %u bytes",
                                          MAX_LINE), -1)
                 : n == 0     ? 1
                 : f == FMT_CSV ? dataset_csv_record(&csv, &co, buf, n, &dl, why, sizeof(why))
                              : parse(p, f, buf, n, &dl, why, sizeof(why));
        if (pr == 1)
            continue;
        if (pr < 0) {
            if (++p->malformed <= DATASET_MAX_REPORTED)
                fprintf(stderr, "%s:%ld: %s; skipped\n", path, at, why);
            if (p->o.strict)
                rc = DIST_EXIT_DATAERR;
            continue;
        }
        bool has = p->lw ? dl.labelled : dl.label[0] != '\0';
        const char *name = p->lw ? dl.multi : dl.label;
        memset(known, 0, (p->lw ? (size_t)p->lw : 1) * sizeof(int32_t));
        if (has && p->card.regression) { /* a number: its bits */
            float y = 0.0f;
            if (dataset_label_number(dl.label, &y)) {
                has = false;
                if (++p->unknown_label <= DATASET_MAX_REPORTED)
                    fprintf(stderr, "%s:%ld: label \"%.64s\" is not a number; predicted, not "
                                    "counted in the evaluation\n", path, at, dl.label);
            }
            memcpy(known, &y, sizeof(y));
        }
        for (int i = 0; has && !p->card.regression && i < (p->lw ? dl.n_multi : 1);
             i++, name += strlen(name) + 1) {
            int li = p->card.label_index
                         ? label_map_find_or_index(&p->card.labels, name, strlen(name))
                         : label_map_find(&p->card.labels, name, strlen(name));
            if (li < 0) {
                has = false;
                if (++p->unknown_label <= DATASET_MAX_REPORTED)
                    fprintf(stderr, "%s:%ld: label \"%.64s\" is not one of the model's; "
                                    "predicted, not counted in the evaluation\n", path, at, name);
            } else if (p->lw) {
                known[li >> 5] |= (int32_t)(1u << (li & 31));
            } else {
                known[0] = li;
            }
        }
        rc = predict_add(p, dl.text, dl.text_len, dl.pair, dl.pair_len, at,
                         has ? known : NULL);
        free(dl.text), free(dl.pair), free(dl.multi);
    }
    const char *zmsg = gzerror(in, &zerr);
    if (!rc && zerr != Z_OK && zerr != Z_STREAM_END) {
        fprintf(stderr, "gantry-predict: %s: read error: %s%s\n", path,
                zerr == Z_ERRNO ? strerror(errno) : zmsg,
                zerr == Z_DATA_ERROR || zerr == Z_BUF_ERROR ? " (a damaged or truncated gzip "
                                                              "file?)" : "");
        rc = DIST_EXIT_IOERR;
    }
    if (!rc)
        rc = predict_flush(p);
    free(buf), free(known);
    gzclose(in);
    return rc;
}

static int finish(struct pred *p)
{
    double dt = predict_now() - p->t0;
    int rc = 0;

    if (!p->o.quiet)
        fprintf(stderr, "gantry-predict: %zu documents in %.2f s (%.0f/s), %zu malformed lines "
                        "skipped, %zu truncated to %d tokens; model %s\n",
                p->docs, dt, dt > 0 ? (double)p->docs / dt : 0.0, p->malformed, p->truncated,
                p->maxT, p->dir);
    if (p->labelled == 0) {
        if (p->o.report)
            fprintf(stderr, "gantry-predict: --report %s: the input had no labels to evaluate "
                            "against; not written\n", p->o.report);
        return 0;
    }
    if (!p->o.quiet)
        eval_print(&p->ec, p->names, stderr);
    if (p->o.report) {
        json_t *rep = eval_report_json(&p->ec, p->names);
        json_object_set_new(rep, "model", json_string(p->dir));
        json_object_set_new(rep, "step", json_integer(p->step));
        json_object_set_new(rep, "documents", json_integer((json_int_t)p->docs));
        json_object_set_new(rep, "unknown_labels", json_integer((json_int_t)p->unknown_label));
        json_object_set_new(rep, "malformed_lines", json_integer((json_int_t)p->malformed));
        if (json_dump_file(rep, p->o.report, JSON_INDENT(2))) {
            fprintf(stderr, "gantry-predict: --report %s: cannot write it: %s\n", p->o.report,
                    strerror(errno));
            rc = DIST_EXIT_CANTCREAT;
        }
        json_decref(rep);
    }
    return rc;
}

static void cleanup(struct pred *p)
{
    for (int i = 0; p->quoted && i < p->K; i++)
        free(p->quoted[i]);
    free(p->quoted);
    free(p->names);
    free(p->rows), free(p->x), free(p->len), free(p->line), free(p->label), free(p->top);
    free(p->has_label);
    text_tokens_cleanup(&p->tok);
    eval_cleanup(&p->ec);
    train_gpu_infer_free(p->gpu);
    free(p->logits), free(p->probs);
    model_cleanup(&p->model);
    vocab_free(p->vocab);
    card_cleanup(&p->card);
    if (p->out && p->out != stdout)
        fclose(p->out);
}

int main(int argc, char **argv)
{
    struct pred p;
    int rc;

    memset(&p, 0, sizeof(p));
    card_init(&p.card);
    if ((rc = parse_args(argc, argv, &p.o)))
        return rc;
    cpu_set_threads(p.o.threads > 0 ? p.o.threads : cpu_available());
    if ((rc = load_model(&p)) || (rc = setup(&p)))
        goto out;
    if (!p.o.quiet)
        fprintf(stderr, "gantry-predict: model %s (step %ld): %s, %d %slabels, vocab %d, %zu "
                        "parameters, %d threads\n",
                p.dir, p.step, p.card.type, p.card.labels.n,
                p.card.regression ? "(regression) " : p.lw ? "multi-" : "", p.card.vocab_size,
                p.model.n_params, cpu_threads());
    if (p.o.serve >= 0) {
        if (optind < argc || p.o.output || p.o.report) {
            fprintf(stderr, "gantry-predict: --serve reads no files and writes no --output or "
                            "--report; drop %s\n", optind < argc ? argv[optind]
                                                   : p.o.output ? "--output" : "--report");
            rc = DIST_EXIT_USAGE;
        } else {
            rc = predict_serve(&p);
        }
        goto out;
    }
    p.out = stdout;
    if (p.o.output && !(p.out = fopen(p.o.output, "w"))) {
        fprintf(stderr, "gantry-predict: --output %s: %s\n", p.o.output, strerror(errno));
        rc = DIST_EXIT_CANTCREAT;
        goto out;
    }
    p.t0 = p.last_note = predict_now();
    p.name_files = argc - optind > 1;
    if (optind == argc)
        rc = run_file(&p, "-");
    for (int i = optind; !rc && i < argc; i++)
        rc = run_file(&p, argv[i]);
    if (!rc)
        rc = finish(&p);
out:
    cleanup(&p);
    return rc;
}
