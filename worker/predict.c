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
#include <pthread.h>
#include <unistd.h>

#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <microhttpd.h>

#include "common/buf.h"
#include "common/httpd.h"

#include "common/xalloc.h"
#include "kernels/cpu.h"
#include "worker/card.h"
#include "worker/ckpt.h"
#include "worker/dataset.h"
#include "worker/dist.h"
#include "worker/eval.h"
#include "worker/model.h"
#include "worker/model_io.h"
#include "worker/vocab.h"

#define EXIT_DATAERR 65
#define EXIT_NOINPUT 66
#define EXIT_CANTCREAT 73
#define EXIT_IOERR 74
#define MAX_LINE DATASET_DEFAULT_MAX_LINE

enum fmt { FMT_AUTO, FMT_JSONL, FMT_TSV, FMT_TEXT };

struct opts {
    const char *model, *output, *report, *text_field, *label_field, *bind, *name;
    int serve; /* --serve PORT: -1 = no server */
    enum fmt format;
    int top_k, batch, threads;
    bool strict, quiet;
};

/* The loaded model and the batch being filled. */
struct pred {
    struct opts o;
    char dir[4096];
    long step;
    struct model_card card;
    struct vocab *vocab;
    struct model model;
    char **quoted; /* each label as a JSON string literal */
    const char **names;
    int K, maxT;
    struct text_tokens tok;
    int32_t *rows; /* (batch, maxT) encoded documents */
    int *x, *len;  /* the batch gathered to (B, T) */
    long *line;
    int32_t *label; /* -1: none given, -2: not one of the model's labels */
    int *top;       /* (K) scratch for --top-k */
    const char *file;
    bool name_files;
    bool array;     /* predictions as JSON array elements (the server's responses) */
    size_t emitted; /* elements written to this array */
    int n;
    FILE *out;
    struct eval_counts ec;
    size_t docs, malformed, labelled, unknown_label, truncated;
    double t0, last_note;
};

static double now_s(void)
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
        "With labelled input (JSONL \"label\" field, TSV's last field), the evaluation report\n"
        "(accuracy, macro-F1, per class, confusion) follows on stderr.\n"
        "\n"
        "Options:\n"
        "  -m, --model DIR          checkpoint step or job directory (required)\n"
        "  -f, --format FMT         auto|jsonl|tsv|text (auto: .jsonl/.json/.ndjson are JSONL,\n"
        "                           .tsv is TSV, anything else and stdin one text per line)\n"
        "  -o, --output FILE        predictions here instead of stdout\n"
        "  -k, --top-k K            also list the K most likely labels (\"top\"); default 1\n"
        "  -b, --batch N            documents per forward pass (default 32)\n"
        "  -t, --threads N          CPU threads (default: the CPUs this process may use)\n"
        "      --report FILE        with labelled input: the evaluation report as JSON\n"
        "      --text-field NAME    JSONL text field (default \"text\")\n"
        "      --label-field NAME   JSONL label field (default \"label\")\n"
        "      --strict             a malformed line is fatal (exit 65) instead of skipped\n"
        "  -q, --quiet              no summary or progress on stderr\n"
        "      --serve PORT         serve predictions over HTTP instead of reading files:\n"
        "                           POST /v1/models/NAME:predict (KServe's V1 protocol) with\n"
        "                           {\"instances\": [\"text\", {\"text\": \"...\"}, ...], \"top_k\": K}\n"
        "                           answers {\"predictions\": [{\"label\", \"score\"}, ...]};\n"
        "                           GET /v1/models/NAME (ready), /healthz, /metrics; stops on\n"
        "                           SIGTERM. Port 0: any free one (printed)\n"
        "      --bind ADDR          the server's IPv4 address (default 0.0.0.0)\n"
        "      --name NAME          the model's name in the URLs (default: the job directory's)\n"
        "  -h, --help               this text\n"
        "\n"
        "Exit codes: 0 done; 64 bad usage; 65 bad data or a checkpoint without a model card\n"
        "or that is corrupt; 66 model or input not found; 73/74 output not writable.\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},  {"format", required_argument, 0, 'f'},
        {"output", required_argument, 0, 'o'}, {"top-k", required_argument, 0, 'k'},
        {"batch", required_argument, 0, 'b'},  {"threads", required_argument, 0, 't'},
        {"report", required_argument, 0, 'r'}, {"text-field", required_argument, 0, 'T'},
        {"label-field", required_argument, 0, 'L'}, {"strict", no_argument, 0, 'S'},
        {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
        {"serve", required_argument, 0, 's'},  {"bind", required_argument, 0, 'B'},
        {"name", required_argument, 0, 'N'},
        {0, 0, 0, 0}};
    int c;

    memset(o, 0, sizeof(*o));
    o->top_k = 1, o->batch = 32, o->serve = -1, o->bind = "0.0.0.0";
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
        case 'm': o->model = optarg; break;
        case 'o': o->output = optarg; break;
        case 'k': o->top_k = (int)v; break;
        case 'b': o->batch = (int)v; break;
        case 't': o->threads = (int)v; break;
        case 'r': o->report = optarg; break;
        case 'T': o->text_field = optarg; break;
        case 'L': o->label_field = optarg; break;
        case 'S': o->strict = true; break;
        case 's': o->serve = (int)v; break;
        case 'B': o->bind = optarg; break;
        case 'N': o->name = optarg; break;
        case 'q': o->quiet = true; break;
        case 'h': usage(stdout); exit(0);
        case 'f':
            if (!strcmp(optarg, "auto")) o->format = FMT_AUTO;
            else if (!strcmp(optarg, "jsonl")) o->format = FMT_JSONL;
            else if (!strcmp(optarg, "tsv")) o->format = FMT_TSV;
            else if (!strcmp(optarg, "text")) o->format = FMT_TEXT;
            else {
                fprintf(stderr, "gantry-predict: --format %s: use auto, jsonl, tsv or text\n",
                        optarg);
                return DIST_EXIT_USAGE;
            }
            break;
        default:
            fprintf(stderr, "gantry-predict: see --help for the options\n");
            return DIST_EXIT_USAGE;
        }
    }
    if (!o->model) {
        fprintf(stderr, "gantry-predict: --model DIR is required: a checkpoint step directory "
                        "(…/step-300) or a job's checkpoint directory\n");
        return DIST_EXIT_USAGE;
    }
    return 0;
}

/* dir (in p->dir) and p->step from --model: a step directory, or a job's newest valid one. */
static int find_model(struct pred *p)
{
    const char *arg = p->o.model;
    char path[4200], why[512] = "", root[4096], *slash;
    struct stat st;
    int64_t step = -1;

    int e = stat(arg, &st) != 0 ? errno : 0;
    if (e || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "gantry-predict: --model %s: %s\n", arg,
                e == ENOENT ? "no such directory" : e ? strerror(e) : "not a directory");
        return EXIT_NOINPUT;
    }
    snprintf(path, sizeof(path), "%s/state.json", arg);
    if (access(path, F_OK) == 0) { /* a step directory */
        if (strlen(arg) >= sizeof(p->dir))
            return DIST_EXIT_USAGE;
        snprintf(p->dir, sizeof(p->dir), "%s", arg);
        /* only what prediction reads is checked (not the optimizer state): the weights here,
         * config.json and vocab.txt as they are read */
        int rc = ckpt_verify_file(p->dir, "model.safetensors", why, sizeof(why));
        if (rc) {
            fprintf(stderr, "gantry-predict: checkpoint %s is not usable: %s\n", p->dir, why);
            return EXIT_DATAERR;
        }
        /* the step from state.json (the directory may have been copied under another name) */
        json_t *sj = json_load_file(path, 0, NULL);
        json_t *sv = json_object_get(sj, "step");
        p->step = json_is_integer(sv) ? (long)json_integer_value(sv) : -1;
        json_decref(sj);
        return 0;
    }
    snprintf(root, sizeof(root), "%s", arg); /* a job directory: <root>/<job> */
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        root[--n] = '\0';
    slash = strrchr(root, '/');
    const char *job = slash ? slash + 1 : root;
    char jobname[CKPT_MAX_NAME];
    if (strlen(job) >= sizeof(jobname)) {
        fprintf(stderr, "gantry-predict: --model %s: the job directory's name is too long\n", arg);
        return DIST_EXIT_USAGE;
    }
    memcpy(jobname, job, strlen(job) + 1);
    if (!slash)
        snprintf(root, sizeof(root), ".");
    else if (slash == root)
        root[1] = '\0';
    else
        *slash = '\0';
    if (ckpt_find_latest(root, jobname, &step, p->dir, sizeof(p->dir)) != 0) {
        fprintf(stderr, "gantry-predict: --model %s: no valid checkpoint (step-<N> directory) "
                        "in it; pass a step directory or the job's checkpoint.dir\n", arg);
        return EXIT_NOINPUT;
    }
    p->step = (long)step;
    return 0;
}

/* The card, the vocab and the weights of p->dir. 0 or an exit status. */
static int load_model(struct pred *p)
{
    char why[1024] = "", path[4400];
    size_t n = 0;
    int rc = 0;
    char *txt = ckpt_read_file(p->dir, CARD_FILE, &n, &rc, why, sizeof(why));

    if (!txt) {
        if (rc == DIST_ENOENT)
            fprintf(stderr, "gantry-predict: checkpoint %s has no %s (the model card): it was "
                            "written by a gantry-worker from before checkpoints carried it. "
                            "Resume the job with this version for one more checkpoint, or "
                            "retrain\n", p->dir, CARD_FILE);
        else
            fprintf(stderr, "gantry-predict: %s\n", why);
        return EXIT_DATAERR;
    }
    if (card_parse(txt, n, &p->card, why, sizeof(why))) {
        fprintf(stderr, "gantry-predict: %s/%s: %s\n", p->dir, CARD_FILE, why);
        free(txt);
        return EXIT_DATAERR;
    }
    free(txt);
    if (!(txt = ckpt_read_file(p->dir, p->card.vocab_file, &n, &rc, why, sizeof(why)))) {
        fprintf(stderr, "gantry-predict: %s\n", why);
        return EXIT_DATAERR;
    }
    snprintf(path, sizeof(path), "%s/%s", p->dir, p->card.vocab_file);
    p->vocab = vocab_parse(txt, n, path, why, sizeof(why));
    free(txt);
    if (!p->vocab) {
        fprintf(stderr, "gantry-predict: %s\n", why);
        return EXIT_DATAERR;
    }
    if (vocab_size(p->vocab) != p->card.vocab_size) {
        fprintf(stderr, "gantry-predict: %s: %d tokens, but %s says model.vocabSize %d\n", path,
                vocab_size(p->vocab), CARD_FILE, p->card.vocab_size);
        return EXIT_DATAERR;
    }
    struct model_config mc = {
        .kind = !strcmp(p->card.type, "ngram") ? MODEL_NGRAM : MODEL_TRANSFORMER,
        .vocab = p->card.vocab_size, .classes = p->card.labels.n,
        .max_seq_len = p->card.max_seq_len, .hidden = p->card.hidden, .layers = p->card.layers,
        .heads = p->card.heads, .ffn = p->card.ffn,
        .pool = !strcmp(p->card.pooling, "cls") ? MODEL_POOL_CLS : MODEL_POOL_MEAN,
        .buckets = p->card.buckets};
    if (model_alloc(&p->model, &mc, p->o.batch, why, sizeof(why))) {
        fprintf(stderr, "gantry-predict: %s/%s: model.%s\n", p->dir, CARD_FILE, why);
        return EXIT_DATAERR;
    }
    struct ckpt_snapshot *s = NULL;
    snprintf(path, sizeof(path), "%s/model.safetensors", p->dir);
    if (ckpt_read_safetensors(path, &s) != 0) {
        fprintf(stderr, "gantry-predict: %s: cannot be read (see above)\n", path);
        return EXIT_DATAERR;
    }
    if (model_load_params(&p->model, s, why, sizeof(why))) {
        fprintf(stderr, "gantry-predict: %s: %s (the weights do not fit %s)\n", path, why,
                CARD_FILE);
        ckpt_snapshot_free(s);
        return EXIT_DATAERR;
    }
    ckpt_snapshot_free(s);
    return 0;
}

static int setup(struct pred *p)
{
    p->K = p->card.labels.n;
    p->maxT = p->card.max_seq_len;
    p->quoted = xcalloc((size_t)p->K, sizeof(char *));
    p->names = xcalloc((size_t)p->K, sizeof(char *));
    for (int i = 0; i < p->K; i++) {
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
    p->label = xmallocarray(B, sizeof(int32_t));
    p->top = xmallocarray((size_t)p->K, sizeof(int));
    return eval_init(&p->ec, p->K) ? DIST_EXIT_USAGE : 0;
}

/* Runs the batch and writes its predictions. 0 or an exit status. */
static int flush_batch(struct pred *p)
{
    int B = p->n, T = 1, K = p->K, k = p->o.top_k < K ? p->o.top_k : K;
    if (B == 0)
        return 0;
    for (int b = 0; b < B; b++)
        T = p->len[b] > T ? p->len[b] : T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            p->x[(size_t)b * T + t] = p->rows[(size_t)b * p->maxT + t];
    model_forward(&p->model, p->x, p->len, NULL, B, T);
    for (int b = 0; b < B; b++) {
        const float *pr = p->model.probs + (size_t)b * K, *lg = p->model.logits + (size_t)b * K;
        int *top = p->top, best = 0;
        for (int c = 1; c < K; c++) /* the first of equals, as the evaluation counts it */
            best = pr[c] > pr[best] ? c : best;
        if (p->array) /* the server: elements of a JSON array, no line numbers */
            fprintf(p->out, "%s{", p->emitted++ ? "," : "");
        else
            fprintf(p->out, "{");
        if (p->name_files) {
            json_t *f = json_string(p->file);
            char *q = json_dumps(f, JSON_ENCODE_ANY);
            fprintf(p->out, "\"file\":%s,", q ? q : "null");
            free(q);
            json_decref(f);
        }
        if (!p->array)
            fprintf(p->out, "\"line\":%ld,", p->line[b]);
        fprintf(p->out, "\"label\":%s,\"score\":%.6g", p->quoted[best], (double)pr[best]);
        if (k > 1) { /* the k most likely, by selection (k is small) */
            int m = k;
            for (int i = 0; i < m; i++) {
                int pick = -1;
                for (int c = 0; c < K; c++) {
                    bool used = false;
                    for (int j = 0; j < i; j++)
                        used |= top[j] == c;
                    if (!used && (pick < 0 || pr[c] > pr[pick]))
                        pick = c;
                }
                top[i] = pick;
            }
            fprintf(p->out, ",\"top\":[");
            for (int i = 0; i < m; i++)
                fprintf(p->out, "%s{\"label\":%s,\"score\":%.6g}", i ? "," : "",
                        p->quoted[top[i]], (double)pr[top[i]]);
            fprintf(p->out, "]");
        }
        fprintf(p->out, p->array ? "}" : "}\n");
        if (p->label[b] >= 0) { /* the evaluation: counts, and the cross-entropy from logits */
            double mx = lg[0], se = 0.0;
            for (int c = 1; c < K; c++)
                mx = lg[c] > mx ? lg[c] : mx;
            for (int c = 0; c < K; c++)
                se += exp((double)lg[c] - mx);
            eval_add_logits(&p->ec, &p->label[b], lg, 1);
            eval_add_loss(&p->ec, mx + log(se) - (double)lg[p->label[b]], 1);
            p->labelled++;
        }
    }
    p->docs += (size_t)B;
    p->n = 0;
    if (fflush(p->out) != 0 || ferror(p->out)) {
        fprintf(stderr, "gantry-predict: writing the predictions: %s\n", strerror(errno));
        return EXIT_IOERR;
    }
    double now = now_s();
    if (!p->o.quiet && !p->array && now - p->last_note >= 10.0) {
        fprintf(stderr, "gantry-predict: %zu documents, %.0f/s\n", p->docs,
                (double)p->docs / (now - p->t0));
        p->last_note = now;
    }
    return 0;
}

static enum fmt format_of(const char *path, enum fmt want)
{
    if (want != FMT_AUTO)
        return want;
    const char *dot = strrchr(path, '.');
    if (dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".json") || !strcmp(dot, ".ndjson")))
        return FMT_JSONL;
    if (dot && !strcmp(dot, ".tsv"))
        return FMT_TSV;
    return FMT_TEXT;
}

/* One line to (text, label). 0 ok (*text new), 1 skip silently, -1 malformed (why). */
static int parse(struct pred *p, enum fmt f, char *s, size_t n, char **text, size_t *tlen,
                 char label[DATASET_MAX_LABEL_BYTES + 1], char *why, size_t whylen)
{
    label[0] = '\0';
    if (f == FMT_TEXT) {
        if (memchr(s, '\0', n)) {
            snprintf(why, whylen, "NUL byte in the text");
            return -1;
        }
        *text = xstrndup(s, n), *tlen = n;
        return 0;
    }
    if (f == FMT_TSV) {
        struct dataset_opts o;
        dataset_opts_default(&o);
        return dataset_parse_line(DATASET_TSV, &o, s, n, text, tlen, label, why, whylen);
    }
    json_error_t je;
    json_t *j = json_loadb(s, n, 0, &je), *t, *l;
    const char *tf = p->o.text_field ? p->o.text_field : "text";
    const char *lf = p->o.label_field ? p->o.label_field : "label";
    int rc = -1;
    if (!json_is_object(j)) {
        snprintf(why, whylen, "not a JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
    } else if (!json_is_string(t = json_object_get(j, tf))) {
        snprintf(why, whylen, "no string field \"%s\"", tf);
    } else if ((l = json_object_get(j, lf)) && !json_is_string(l) && !json_is_integer(l) &&
               !json_is_null(l)) {
        snprintf(why, whylen, "field \"%s\" must be a string or an integer", lf);
    } else if (json_is_string(l) && json_string_length(l) > DATASET_MAX_LABEL_BYTES) {
        snprintf(why, whylen, "label longer than %d bytes", DATASET_MAX_LABEL_BYTES);
    } else {
        if (json_is_string(l))
            snprintf(label, DATASET_MAX_LABEL_BYTES + 1, "%s", json_string_value(l));
        else if (json_is_integer(l))
            snprintf(label, DATASET_MAX_LABEL_BYTES + 1, "%lld",
                     (long long)json_integer_value(l));
        *tlen = json_string_length(t);
        *text = xmalloc(*tlen + 1);
        memcpy(*text, json_string_value(t), *tlen + 1);
        rc = 0;
    }
    json_decref(j);
    return rc;
}

/* The next line of in into *buf (without its newline; NUL-terminated; NUL bytes inside are
 * kept and counted), holding at most max bytes: the rest of a longer line is read and dropped,
 * and max + 1 returned. The length, or -1 at the end of the input. Memory stays bounded. */
static ssize_t read_line(FILE *in, char **buf, size_t *cap, size_t max)
{
    size_t n = 0;
    bool any = false, over = false;
    int c;

    if (!*buf)
        *buf = xmalloc(*cap = 4096);
    while ((c = getc_unlocked(in)) != EOF) {
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

/* Reads one input; documents go into batches. 0 or an exit status. */
static int run_file(struct pred *p, const char *path)
{
    FILE *in = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    enum fmt f = format_of(strcmp(path, "-") ? path : "", p->o.format);
    char *buf = NULL, why[256], label[DATASET_MAX_LABEL_BYTES + 1];
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    int rc = 0;

    if (!in) {
        fprintf(stderr, "gantry-predict: %s: %s\n", path, strerror(errno));
        return EXIT_NOINPUT;
    }
    p->file = path;
    while (!rc && (got = read_line(in, &buf, &cap, MAX_LINE)) >= 0) {
        size_t n = (size_t)got;
        char *text = NULL;
        size_t tlen = 0;
        lineno++;
        if (n && n <= MAX_LINE && buf[n - 1] == '\r')
            n--;
        int pr = n > MAX_LINE ? (snprintf(why, sizeof(why), "line longer than %u bytes",
                                          MAX_LINE), -1)
                 : n == 0     ? 1
                              : parse(p, f, buf, n, &text, &tlen, label, why, sizeof(why));
        if (pr == 1)
            continue;
        if (pr < 0) {
            if (++p->malformed <= DATASET_MAX_REPORTED)
                fprintf(stderr, "%s:%ld: %s; skipped\n", path, lineno, why);
            if (p->o.strict)
                rc = EXIT_DATAERR;
            continue;
        }
        bool cut = false;
        int32_t *row = p->rows + (size_t)p->n * p->maxT;
        p->len[p->n] = (int)dataset_encode_text(p->vocab, &p->card.text, text, tlen,
                                                (size_t)p->maxT, p->card.cls_sep, &p->tok, row,
                                                &cut);
        free(text);
        p->truncated += cut;
        p->line[p->n] = lineno;
        p->label[p->n] = -1;
        if (label[0] && (p->label[p->n] = label_map_find(&p->card.labels, label,
                                                         strlen(label))) < 0) {
            p->label[p->n] = -2;
            if (++p->unknown_label <= DATASET_MAX_REPORTED)
                fprintf(stderr, "%s:%ld: label \"%.64s\" is not one of the model's; predicted, "
                                "not counted in the evaluation\n", path, lineno, label);
        }
        if (++p->n == p->o.batch)
            rc = flush_batch(p);
    }
    if (!rc && ferror(in)) {
        fprintf(stderr, "gantry-predict: %s: read error: %s\n", path, strerror(errno));
        rc = EXIT_IOERR;
    }
    if (!rc)
        rc = flush_batch(p);
    free(buf);
    if (in != stdin)
        fclose(in);
    return rc;
}

static int finish(struct pred *p)
{
    double dt = now_s() - p->t0;
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
            rc = EXIT_CANTCREAT;
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
    text_tokens_cleanup(&p->tok);
    eval_cleanup(&p->ec);
    model_cleanup(&p->model);
    vocab_free(p->vocab);
    card_cleanup(&p->card);
    if (p->out && p->out != stdout)
        fclose(p->out);
}

/* ---- the HTTP server (--serve) ---------------------------------------------------------------- */

#define SERVE_MAX_BODY (16u << 20)  /* request bytes */
#define HTTP_TOO_LARGE 413
#define SERVE_MAX_INSTANCES 10000   /* documents per request */
#define SERVE_MAX_REPLY (64u << 20) /* response bytes */

struct server {
    struct pred *p;
    char name[256];
    char path_model[300], path_predict[320];
    /* counters for /metrics (the daemon's one thread updates and reads them) */
    unsigned long long req_ok, req_bad, docs;
    double seconds;
};

/* One request's body as it arrives. */
struct upload {
    struct buf body;
    bool too_big;
};

/* {"error": why} with status. */
static enum MHD_Result reply_error(struct MHD_Connection *conn, struct server *sv, unsigned status,
                                   const char *why)
{
    struct buf b;
    json_t *j = json_pack("{s:s}", "error", why);
    char *t = json_dumps(j, JSON_COMPACT);
    buf_init(&b, SERVE_MAX_REPLY);
    if (!t || buf_puts(&b, t) || buf_puts(&b, "\n"))
        buf_reset(&b);
    free(t);
    json_decref(j);
    sv->req_bad++;
    enum MHD_Result r = httpd_reply(conn, status, "application/json", &b);
    buf_cleanup(&b);
    return r;
}

/* Classifies the request's instances into body ({"model", "predictions": [...]}). 0, or an HTTP
 * status with why. */
static unsigned serve_predict(struct server *sv, const char *req, size_t n, struct buf *body,
                              char *why, size_t whylen)
{
    struct pred *p = sv->p;
    json_error_t je;
    json_t *j = json_loadb(req, n, 0, &je), *inst, *tk;
    unsigned status = 0;
    int saved_k = p->o.top_k;
    char *out = NULL;
    size_t outlen = 0;

    if (!json_is_object(j)) {
        snprintf(why, whylen, "the body must be a JSON object {\"instances\": [...]}%s%s",
                 j ? "" : ": ", j ? "" : je.text);
        status = MHD_HTTP_BAD_REQUEST;
        goto out;
    }
    if (!json_is_array(inst = json_object_get(j, "instances")) || json_array_size(inst) == 0) {
        snprintf(why, whylen, "instances: must be a non-empty array of texts or {\"text\": ...} "
                              "objects");
        status = MHD_HTTP_BAD_REQUEST;
        goto out;
    }
    if (json_array_size(inst) > SERVE_MAX_INSTANCES) {
        snprintf(why, whylen, "instances: %zu of them; at most %d per request",
                 json_array_size(inst), SERVE_MAX_INSTANCES);
        status = HTTP_TOO_LARGE;
        goto out;
    }
    if ((tk = json_object_get(j, "top_k"))) {
        if (!json_is_integer(tk) || json_integer_value(tk) < 1 ||
            json_integer_value(tk) > 65536) {
            snprintf(why, whylen, "top_k: must be a whole number from 1");
            status = MHD_HTTP_BAD_REQUEST;
            goto out;
        }
        p->o.top_k = (int)json_integer_value(tk);
    }
    const char *tf = p->o.text_field ? p->o.text_field : "text";
    for (size_t i = 0; i < json_array_size(inst); i++) { /* all checked before any is run */
        json_t *v = json_array_get(inst, i);
        if (json_is_object(v))
            v = json_object_get(v, tf);
        if (!json_is_string(v)) {
            snprintf(why, whylen, "instances[%zu]: must be a string or an object with a string "
                                  "field \"%s\"", i, tf);
            status = MHD_HTTP_BAD_REQUEST;
            goto out;
        }
    }
    FILE *f = open_memstream(&out, &outlen);
    if (!f)
        abort();
    p->out = f, p->array = true, p->emitted = 0, p->name_files = false;
    fprintf(f, "{\"model\":");
    json_t *nm = json_string(sv->name);
    char *q = json_dumps(nm, JSON_ENCODE_ANY);
    fprintf(f, "%s,\"predictions\":[", q ? q : "\"\"");
    free(q);
    json_decref(nm);
    for (size_t i = 0; i < json_array_size(inst) && !status; i++) {
        json_t *v = json_array_get(inst, i);
        if (json_is_object(v))
            v = json_object_get(v, tf);
        int32_t *row = p->rows + (size_t)p->n * p->maxT;
        bool cut = false;
        p->len[p->n] = (int)dataset_encode_text(p->vocab, &p->card.text, json_string_value(v),
                                                json_string_length(v), (size_t)p->maxT,
                                                p->card.cls_sep, &p->tok, row, &cut);
        p->line[p->n] = (long)i + 1, p->label[p->n] = -1;
        if (++p->n == p->o.batch && flush_batch(p))
            status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (!status && flush_batch(p))
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    p->n = 0;
    fprintf(f, "]}\n");
    fclose(f);
    p->out = NULL, p->array = false;
    if (status)
        snprintf(why, whylen, "could not write the predictions");
    else if (buf_append(body, out, outlen)) {
        snprintf(why, whylen, "the response would exceed %u bytes; send fewer instances",
                 SERVE_MAX_REPLY);
        status = HTTP_TOO_LARGE;
    } else
        sv->docs += json_array_size(inst);
out:
    free(out);
    p->o.top_k = saved_k;
    json_decref(j);
    return status;
}

static enum MHD_Result serve_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    struct server *sv = cls;
    struct upload *up = *req_cls;
    struct buf body;
    char why[1024];
    enum MHD_Result r;
    bool post = !strcmp(method, "POST");

    (void)version;
    if (post && !up) { /* the first call: only the headers */
        up = xcalloc(1, sizeof(*up));
        buf_init(&up->body, SERVE_MAX_BODY);
        *req_cls = up;
        return MHD_YES;
    }
    if (post && *upload_data_size) { /* a piece of the body */
        if (!up->too_big && buf_append(&up->body, upload_data, *upload_data_size))
            up->too_big = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    buf_init(&body, SERVE_MAX_REPLY);
    if (!strcmp(url, sv->path_predict) || !strcmp(url, "/predict")) {
        if (!post) {
            buf_cleanup(&body);
            return reply_error(conn, sv, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
        }
        if (up->too_big) {
            buf_cleanup(&body);
            snprintf(why, sizeof(why), "the body is over %u bytes; send fewer instances",
                     SERVE_MAX_BODY);
            return reply_error(conn, sv, HTTP_TOO_LARGE, why);
        }
        double t0 = now_s();
        unsigned st = serve_predict(sv, buf_ptr(&up->body), buf_len(&up->body), &body, why,
                                    sizeof(why));
        if (st) {
            buf_cleanup(&body);
            return reply_error(conn, sv, st, why);
        }
        sv->seconds += now_s() - t0;
        sv->req_ok++;
        r = httpd_reply(conn, MHD_HTTP_OK, "application/json", &body);
    } else if (post) {
        buf_cleanup(&body);
        snprintf(why, sizeof(why), "no such endpoint; POST to %s", sv->path_predict);
        return reply_error(conn, sv, MHD_HTTP_NOT_FOUND, why);
    } else if (!strcmp(url, "/healthz")) {
        r = buf_puts(&body, "ok\n") ? MHD_NO : httpd_reply(conn, MHD_HTTP_OK, "text/plain", &body);
    } else if (!strcmp(url, sv->path_model)) {
        json_t *j = json_pack("{s:s, s:b, s:I, s:o}", "name", sv->name, "ready", 1, "step",
                              (json_int_t)sv->p->step, "labels", json_array());
        for (int i = 0; i < sv->p->K; i++)
            json_array_append_new(json_object_get(j, "labels"), json_string(sv->p->names[i]));
        char *t = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        r = (!t || buf_puts(&body, t) || buf_puts(&body, "\n"))
                ? MHD_NO
                : httpd_reply(conn, MHD_HTTP_OK, "application/json", &body);
        free(t);
    } else if (!strcmp(url, "/metrics")) {
        int e = buf_printf(&body,
                           "# HELP gantry_predict_requests_total Prediction requests, by outcome.\n"
                           "# TYPE gantry_predict_requests_total counter\n"
                           "gantry_predict_requests_total{outcome=\"ok\"} %llu\n"
                           "gantry_predict_requests_total{outcome=\"error\"} %llu\n"
                           "# HELP gantry_predict_documents_total Documents classified.\n"
                           "# TYPE gantry_predict_documents_total counter\n"
                           "gantry_predict_documents_total %llu\n"
                           "# HELP gantry_predict_seconds_total Time spent classifying.\n"
                           "# TYPE gantry_predict_seconds_total counter\n"
                           "gantry_predict_seconds_total %.6f\n",
                           sv->req_ok, sv->req_bad, sv->docs, sv->seconds);
        r = e ? MHD_NO
              : httpd_reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &body);
    } else {
        buf_cleanup(&body);
        snprintf(why, sizeof(why), "not found; try POST %s, GET %s, /healthz or /metrics",
                 sv->path_predict, sv->path_model);
        return reply_error(conn, sv, MHD_HTTP_NOT_FOUND, why);
    }
    buf_cleanup(&body);
    return r;
}

static void serve_done(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode code)
{
    struct upload *up = *req_cls;
    (void)cls, (void)conn, (void)code;
    if (up) {
        buf_cleanup(&up->body);
        free(up);
        *req_cls = NULL;
    }
}

/* Serves until SIGTERM or SIGINT. 0 or an exit status. */
static int serve(struct pred *p)
{
    struct server sv = {.p = p};
    struct sockaddr_in sa;
    sigset_t stop;
    int sig = 0;

    if (p->o.name) {
        snprintf(sv.name, sizeof(sv.name), "%s", p->o.name);
    } else { /* the job directory's name: <job>/step-N, or the directory itself */
        char d[4096];
        snprintf(d, sizeof(d), "%s", p->dir);
        char *b = strrchr(d, '/');
        if (b && !strncmp(b + 1, "step-", 5) && b != d) {
            *b = '\0';
            b = strrchr(d, '/');
        }
        const char *nm = b ? b + 1 : d;
        if (strlen(nm) >= sizeof(sv.name)) {
            fprintf(stderr, "gantry-predict: the model's name is too long; give --name\n");
            return DIST_EXIT_USAGE;
        }
        memcpy(sv.name, nm, strlen(nm) + 1);
    }
    if (!sv.name[0] || strpbrk(sv.name, "/?#: ")) {
        fprintf(stderr, "gantry-predict: --name \"%s\": give a name without '/', '?', '#', ':' or "
                        "spaces\n", sv.name);
        return DIST_EXIT_USAGE;
    }
    snprintf(sv.path_model, sizeof(sv.path_model), "/v1/models/%s", sv.name);
    snprintf(sv.path_predict, sizeof(sv.path_predict), "/v1/models/%s:predict", sv.name);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->o.serve);
    if (inet_pton(AF_INET, p->o.bind, &sa.sin_addr) != 1) {
        fprintf(stderr, "gantry-predict: --bind %s: give a numeric IPv4 address such as 0.0.0.0\n",
                p->o.bind);
        return DIST_EXIT_USAGE;
    }
    /* SIGTERM/SIGINT are waited for here: blocked before the daemon's thread starts */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)p->o.serve, NULL, NULL,
        serve_handle, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, serve_done, &sv, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "gantry-predict: could not listen on %s:%d (is the port in use?); pick "
                        "another with --serve\n", p->o.bind, p->o.serve);
        return DIST_EXIT_UNAVAIL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "gantry-predict: serving %s on %s:%u: POST %s, GET %s, /healthz, /metrics\n",
            sv.name, p->o.bind, info ? info->port : (unsigned)p->o.serve, sv.path_predict,
            sv.path_model);
    sigwait(&stop, &sig);
    MHD_stop_daemon(d);
    fprintf(stderr, "gantry-predict: %s: stopped after %llu requests (%llu refused), %llu "
                    "documents\n", strsignal(sig), sv.req_ok, sv.req_bad, sv.docs);
    return 0;
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
    if ((rc = find_model(&p)) || (rc = load_model(&p)) || (rc = setup(&p)))
        goto out;
    if (!p.o.quiet)
        fprintf(stderr, "gantry-predict: model %s (step %ld): %s, %d labels, vocab %d, %zu "
                        "parameters, %d threads\n",
                p.dir, p.step, p.card.type, p.K, p.card.vocab_size, p.model.n_params,
                cpu_threads());
    if (p.o.serve >= 0) {
        if (optind < argc || p.o.output || p.o.report) {
            fprintf(stderr, "gantry-predict: --serve reads no files and writes no --output or "
                            "--report; drop %s\n", optind < argc ? argv[optind]
                                                   : p.o.output ? "--output" : "--report");
            rc = DIST_EXIT_USAGE;
        } else {
            rc = serve(&p);
        }
        goto out;
    }
    p.out = stdout;
    if (p.o.output && !(p.out = fopen(p.o.output, "w"))) {
        fprintf(stderr, "gantry-predict: --output %s: %s\n", p.o.output, strerror(errno));
        rc = EXIT_CANTCREAT;
        goto out;
    }
    p.t0 = p.last_note = now_s();
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
