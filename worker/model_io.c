/*
 * model_io.c - model parameters <-> named checkpoint tensors (model_io.h).
 */
#include "worker/model_io.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "worker/dist.h"

int model_snapshot_params(const struct model *m, struct ckpt_snapshot *s)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        int64_t shape[3];
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
        int rc = ckpt_snapshot_borrow(s, CKPT_WEIGHTS, t->name, CKPT_F32, t->ndim, shape,
                                      m->params + t->offset);
        if (rc)
            return rc;
    }
    return 0;
}

static void shape_str(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t at = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? "," : "", (long long)shape[d]);
}

static int load_tensors(struct model *m, const struct ckpt_snapshot *s, bool head, char *err,
                        size_t errlen);

int model_load_params(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen)
{
    return load_tensors(m, s, true, err, errlen);
}

int model_load_body(struct model *m, const struct ckpt_snapshot *s, char *err, size_t errlen)
{
    return load_tensors(m, s, false, err, errlen);
}

/* The index of the first NaN or infinity in v[0..n), or n. */
static size_t first_nonfinite(const float *v, size_t n)
{
    size_t i = 0;
    while (i < n && isfinite(v[i]))
        i++;
    return i;
}

/* head false: all but the classifier (clsw, clsb), which depends on the labels. -1: does not fit
 * the model; -2: a weight is NaN or infinite (the run that wrote it diverged). */
static int load_tensors(struct model *m, const struct ckpt_snapshot *s, bool head, char *err,
                        size_t errlen)
{
    const struct ckpt_tensor *flat = ckpt_snapshot_find(s, CKPT_WEIGHTS, "params");
    size_t bytes = m->n_params * sizeof(float);

    if (flat) { /* written before the tensors had names */
        if (!head) {
            snprintf(err, errlen, "its weights are one flat \"params\" tensor (a checkpoint from "
                                  "before 2026-12), which cannot be split from the classifier; "
                                  "resume that job with this version for one more checkpoint");
            return -1;
        }
        if (flat->dtype != CKPT_F32 || flat->bytes != bytes) {
            snprintf(err, errlen, "its \"params\" tensor holds %zu bytes, this model has %zu "
                                  "parameters (%zu bytes of F32): another model or data?",
                     flat->bytes, m->n_params, bytes);
            return -1;
        }
        memcpy(m->params, flat->data, bytes);
        size_t at = first_nonfinite(m->params, m->n_params);
        if (at < m->n_params) {
            snprintf(err, errlen, "its \"params\" tensor holds %g at element %zu",
                     (double)m->params[at], at);
            return -2;
        }
        return 0;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        if (!head && (!strcmp(t->name, "clsw") || !strcmp(t->name, "clsb")))
            continue;
        const struct ckpt_tensor *c = ckpt_snapshot_find(s, CKPT_WEIGHTS, t->name);
        int64_t want[3];
        char ws[64], gs[128];
        bool same = c && c->dtype == CKPT_F32 && c->ndim == t->ndim &&
                    c->bytes == t->count * sizeof(float);
        for (int d = 0; d < t->ndim; d++) {
            want[d] = t->shape[d];
            same = same && c->shape[d] == want[d];
        }
        if (!same) {
            shape_str(ws, sizeof(ws), t->ndim, want);
            if (c)
                shape_str(gs, sizeof(gs), c->ndim, c->shape);
            snprintf(err, errlen, "tensor \"%s\" %s%s%s, this model needs F32 [%s]: another "
                                  "model or data?", t->name, c ? "is [" : "is missing",
                     c ? gs : "", c ? "]" : "", ws);
            return -1;
        }
        memcpy(m->params + t->offset, c->data, c->bytes);
        size_t at = first_nonfinite(m->params + t->offset, t->count);
        if (at < t->count) {
            snprintf(err, errlen, "tensor \"%s\" holds %g at element %zu: the run that wrote it "
                                  "diverged", t->name, (double)m->params[t->offset + at], at);
            return -2;
        }
    }
    return 0;
}

/* md->dir and md->step from arg: a step directory, or a job's newest valid one. */
static int find_dir(const char *arg, struct model_dir *md, char *why, size_t n)
{
    char path[4200], root[4096], jobname[CKPT_MAX_NAME], *slash;
    struct stat st;
    int64_t step = -1;

    int e = stat(arg, &st) != 0 ? errno : 0;
    if (e || !S_ISDIR(st.st_mode)) {
        snprintf(why, n, "%s: %s", arg,
                 e == ENOENT ? "no such directory" : e ? strerror(e) : "not a directory");
        return DIST_EXIT_NOINPUT;
    }
    if (strlen(arg) >= sizeof(md->dir) || strlen(arg) >= sizeof(root)) {
        snprintf(why, n, "%.200s...: the path is too long", arg);
        return DIST_EXIT_USAGE;
    }
    snprintf(path, sizeof(path), "%s/state.json", arg);
    if (access(path, F_OK) == 0) { /* a step directory */
        snprintf(md->dir, sizeof(md->dir), "%s", arg);
        /* only what a model needs is checked (not the optimizer state): the weights here,
         * config.json and vocab.txt as they are read */
        char bad[512] = "";
        if (ckpt_verify_file(md->dir, "model.safetensors", bad, sizeof(bad))) {
            snprintf(why, n, "checkpoint %s is not usable: %s", md->dir, bad);
            return DIST_EXIT_DATAERR;
        }
        /* the step from state.json (the directory may have been copied under another name) */
        json_t *sj = json_load_file(path, 0, NULL);
        json_t *sv = json_object_get(sj, "step");
        md->step = json_is_integer(sv) ? (long)json_integer_value(sv) : -1;
        json_decref(sj);
        return 0;
    }
    snprintf(root, sizeof(root), "%s", arg); /* a job directory: <root>/<job> */
    size_t len = strlen(root);
    while (len > 1 && root[len - 1] == '/')
        root[--len] = '\0';
    slash = strrchr(root, '/');
    const char *job = slash ? slash + 1 : root;
    if (strlen(job) >= sizeof(jobname)) {
        snprintf(why, n, "%s: the job directory's name is too long", arg);
        return DIST_EXIT_USAGE;
    }
    memcpy(jobname, job, strlen(job) + 1);
    if (!slash)
        snprintf(root, sizeof(root), ".");
    else if (slash == root)
        root[1] = '\0';
    else
        *slash = '\0';
    if (ckpt_find_latest(root, jobname, &step, md->dir, sizeof(md->dir)) != 0) {
        snprintf(why, n, "%s: no valid checkpoint (step-<N> directory) in it; give a step "
                         "directory or the job's checkpoint.dir", arg);
        return DIST_EXIT_NOINPUT;
    }
    md->step = (long)step;
    return 0;
}

int model_dir_open(const char *arg, struct model_dir *md, char *why, size_t n)
{
    char bad[1024] = "", path[4400];
    size_t len = 0;
    int rc = 0;

    memset(md, 0, sizeof(*md));
    card_init(&md->card);
    md->step = -1;
    if ((rc = find_dir(arg, md, why, n)))
        return rc;
    char *txt = ckpt_read_file(md->dir, CARD_FILE, &len, &rc, bad, sizeof(bad));
    if (!txt) {
        if (rc == DIST_ENOENT)
            snprintf(why, n, "checkpoint %s has no %s (the model card): it was written by a "
                             "gantry-worker from before checkpoints carried it. Resume the job "
                             "with this version for one more checkpoint, or retrain", md->dir,
                     CARD_FILE);
        else
            snprintf(why, n, "%s", bad);
        return DIST_EXIT_DATAERR;
    }
    if (card_parse(txt, len, &md->card, bad, sizeof(bad))) {
        snprintf(why, n, "%s/%s: %s", md->dir, CARD_FILE, bad);
        free(txt);
        return DIST_EXIT_DATAERR;
    }
    free(txt);
    if (!(txt = ckpt_read_file(md->dir, md->card.vocab_file, &len, &rc, bad, sizeof(bad)))) {
        snprintf(why, n, "%s", bad);
        return DIST_EXIT_DATAERR;
    }
    snprintf(path, sizeof(path), "%s/%s", md->dir, md->card.vocab_file);
    md->vocab = vocab_parse(txt, len, path, bad, sizeof(bad));
    free(txt);
    if (!md->vocab) {
        snprintf(why, n, "%s", bad);
        return DIST_EXIT_DATAERR;
    }
    if (vocab_size(md->vocab) != md->card.vocab_size) {
        snprintf(why, n, "%s: %d tokens, but %s says model.vocabSize %d", path,
                 vocab_size(md->vocab), CARD_FILE, md->card.vocab_size);
        return DIST_EXIT_DATAERR;
    }
    md->mc = (struct model_config){
        .kind = !strcmp(md->card.type, "ngram") ? MODEL_NGRAM : MODEL_TRANSFORMER,
        .vocab = md->card.vocab_size, .classes = md->card.regression ? 1 : md->card.labels.n,
        .max_seq_len = md->card.max_seq_len, .hidden = md->card.hidden,
        .layers = md->card.layers, .heads = md->card.heads, .ffn = md->card.ffn,
        .pool = !strcmp(md->card.pooling, "cls") ? MODEL_POOL_CLS : MODEL_POOL_MEAN,
        .buckets = md->card.buckets};
    snprintf(path, sizeof(path), "%s/model.safetensors", md->dir);
    if (ckpt_read_safetensors(path, &md->weights) != 0) {
        snprintf(why, n, "%s: cannot be read (see above)", path);
        return DIST_EXIT_DATAERR;
    }
    size_t have = 0; /* the card must describe the weights before anything is sized by it */
    for (size_t i = 0; i < md->weights->n[CKPT_WEIGHTS]; i++)
        have += md->weights->t[CKPT_WEIGHTS][i].bytes / sizeof(float);
    if (model_config_check(&md->mc, bad, sizeof(bad)) == 0 &&
        model_param_count(&md->mc) != have)
        snprintf(bad, sizeof(bad), "describes %zu parameters, model.safetensors holds %zu",
                 model_param_count(&md->mc), have);
    if (bad[0]) {
        snprintf(why, n, "%s/%s: model: %s", md->dir, CARD_FILE, bad);
        return DIST_EXIT_DATAERR;
    }
    return 0;
}

void model_dir_close(struct model_dir *md)
{
    ckpt_snapshot_free(md->weights);
    vocab_free(md->vocab);
    card_cleanup(&md->card);
    md->weights = NULL, md->vocab = NULL;
}
