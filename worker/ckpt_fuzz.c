/*
 * ckpt_fuzz.c - libFuzzer target for reading checkpoints. A step directory is untrusted: the
 * shared volume's (resume), or one copied from elsewhere for gantry-predict and
 * training.initFrom (a hand-edited one, a foreign writer's, a half-synced copy).
 *
 * Input: the step directory's files separated by CKPT_FUZZ_SEP, in this order: state.json,
 * model.safetensors, optimizer.safetensors, config.json, vocab.txt, and optionally
 * MANIFEST.sha256. With fewer sections the rest are absent. Without the manifest section the
 * harness writes a correct one for the files present (what `sha256sum * > MANIFEST.sha256`
 * after an edit gives), so the fuzzer gets past the hashes to the parsers behind them. The
 * directory is <tmp>/job/step-<N>, N state.json's "step" when it is a usable number, else 7.
 * worker/testdata/fuzz/ckpt/ holds real checkpoints so packed (hack/ckpt_fuzz_seeds.py).
 * CKPT_FUZZ_VERBOSE=1 says how far each input got (for checking that seeds reach the end).
 *
 * Checks, beyond no crash, leak or undefined behaviour:
 *  - ckpt_find_latest returns the directory exactly when ckpt_verify accepts it, and then
 *    ckpt_load (the worker's resume: verify, then load) succeeds, with meta the worker can use
 *    (step the directory's, world size >= 1, counters within CKPT_MAX_COUNT);
 *  - what ckpt_load read survives ckpt_write -> ckpt_find_latest -> ckpt_load unchanged
 *    (every tensor byte for byte, the meta, state.json's extra);
 *  - when model_dir_open (gantry-predict, initFrom) accepts the directory, its model config
 *    allocates, its weights load into it or are refused with a reason (all of them, and all but
 *    the classifier as initFrom with other labels does), and once loaded a forward pass runs on a
 *    short document of the vocab's tokens.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "common/fuzz.h"
#include "worker/ckpt.h"
#include "worker/ckpt_internal.h"
#include "worker/dist.h"
#include "worker/model.h"
#include "worker/model_io.h"
#include "worker/vocab.h"

#define CKPT_FUZZ_SEP "\n--8<--\n"
#define N_SECTIONS 6

static const char *const names[N_SECTIONS] = {"state.json", "model.safetensors",
                                              "optimizer.safetensors", "config.json",
                                              "vocab.txt", CKPT_MANIFEST};
static char root[64];
static int verbose;

static void cleanup(void)
{
    (void)ckpt_rm_rf_(root);
}

static void init(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof(root), "%s/ckpt-fuzz-XXXXXX", base);
    FUZZ_CHECK(mkdtemp(root) != NULL);
    verbose = getenv("CKPT_FUZZ_VERBOSE") != NULL;
    atexit(cleanup);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
}

static void sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char d[32];
    unsigned int dl = 32;
    FUZZ_CHECK(EVP_Digest(data, len, d, &dl, EVP_sha256(), NULL) == 1);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* The step the directory is named after: state.json's when usable, else 7. */
static long long dir_step(const uint8_t *data, size_t len)
{
    json_t *j = json_loadb((const char *)data, len, 0, NULL);
    json_t *s = json_object_get(j, "step");
    long long step = json_is_integer(s) && json_integer_value(s) >= 0 &&
                             json_integer_value(s) < (json_int_t)1 << 62
                         ? (long long)json_integer_value(s)
                         : 7;
    json_decref(j);
    return step;
}

/* Writes the sections into dir (created), and the manifest unless the input has one. */
static void unpack(const uint8_t *data, size_t size, const char *dir)
{
    const uint8_t *at = data, *end = data + size;
    const size_t sl = strlen(CKPT_FUZZ_SEP);
    char path[512], hex[65];
    struct section { const uint8_t *p; size_t n; } sec[N_SECTIONS];
    int n = 0;

    while (n < N_SECTIONS) {
        const uint8_t *next = memmem(at, (size_t)(end - at), CKPT_FUZZ_SEP, sl);
        sec[n].p = at;
        sec[n++].n = (size_t)((next ? next : end) - at);
        if (!next)
            break;
        at = next + sl;
    }
    FUZZ_CHECK(mkdir(dir, 0755) == 0);
    FILE *mf = NULL;
    if (n < N_SECTIONS) {
        snprintf(path, sizeof(path), "%s/%s", dir, CKPT_MANIFEST);
        FUZZ_CHECK((mf = fopen(path, "w")) != NULL);
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        write_file(path, sec[i].p, sec[i].n);
        if (mf) {
            sha256_hex(sec[i].p, sec[i].n, hex);
            fprintf(mf, "%s  %s\n", hex, names[i]);
        }
    }
    if (mf)
        FUZZ_CHECK(fclose(mf) == 0);
}

static void same_snapshot(const struct ckpt_snapshot *a, const struct ckpt_snapshot *b)
{
    FUZZ_CHECK(a->meta.step == b->meta.step && a->meta.epoch == b->meta.epoch);
    FUZZ_CHECK(a->meta.sampler.epoch == b->meta.sampler.epoch);
    FUZZ_CHECK(a->meta.sampler.consumed == b->meta.sampler.consumed);
    FUZZ_CHECK(a->meta.world_size == b->meta.world_size);
    FUZZ_CHECK(!strcmp(a->meta.config_hash, b->meta.config_hash));
    FUZZ_CHECK(json_equal(a->extra, b->extra));
    for (int p = 0; p < 2; p++) {
        FUZZ_CHECK(a->n[p] == b->n[p]);
        for (size_t i = 0; i < a->n[p]; i++) {
            const struct ckpt_tensor *x = &a->t[p][i];
            const struct ckpt_tensor *y = ckpt_snapshot_find(b, (enum ckpt_part)p, x->name);
            FUZZ_CHECK(y && x->dtype == y->dtype && x->ndim == y->ndim && x->bytes == y->bytes);
            FUZZ_CHECK(!memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof(x->shape[0])));
            FUZZ_CHECK(!x->bytes || !memcmp(x->data, y->data, x->bytes));
        }
    }
}

/* The worker's resume: find, verify, load; then the writer round trip. */
static void check_resume(const char *dir, long long step)
{
    char found[512], path[128], why[512] = "";
    int64_t got = -1;
    struct ckpt_snapshot *s = NULL, *r = NULL;
    int verified = ckpt_verify(dir, why, sizeof(why)) == 0;

    int rc = ckpt_find_latest(root, "job", &got, found, sizeof(found));
    FUZZ_CHECK(rc == (verified ? 0 : DIST_ENOENT));
    if (verbose)
        fprintf(stderr, "ckpt_fuzz: resume: %s\n", verified ? "verified" : why);
    if (!verified)
        return;
    FUZZ_CHECK(got == step && !strcmp(found, dir));
    FUZZ_CHECK(ckpt_load(dir, &s) == 0);
    FUZZ_CHECK(s->meta.step == step && s->meta.world_size >= 1);
    FUZZ_CHECK(s->meta.epoch <= CKPT_MAX_COUNT && s->meta.sampler.epoch <= CKPT_MAX_COUNT);
    FUZZ_CHECK(s->meta.sampler.consumed <= CKPT_MAX_COUNT);
    FUZZ_CHECK(json_is_object(s->extra));

    snprintf(path, sizeof(path), "%s/rt", root);
    FUZZ_CHECK(ckpt_write(path, "job", 1, s) == 0);
    FUZZ_CHECK(ckpt_find_latest(path, "job", &got, found, sizeof(found)) == 0 && got == step);
    FUZZ_CHECK(ckpt_load(found, &r) == 0);
    same_snapshot(s, r);
    ckpt_snapshot_free(r);
    ckpt_snapshot_free(s);
}

/* gantry-predict and initFrom: open the model directory, build its model, run it. */
static void check_model_dir(const char *dir)
{
    struct model_dir md;
    struct model m;
    char why[2048], err[512];

    if (model_dir_open(dir, &md, why, sizeof(why)) == 0) {
        FUZZ_CHECK(md.weights && md.vocab && vocab_size(md.vocab) == md.mc.vocab);
        memset(&m, 0, sizeof(m));
        FUZZ_CHECK(model_alloc(&m, &md.mc, 1, err, sizeof(err)) == 0);
        /* initFrom with other labels: all but the classifier; then everything, as predict */
        if (model_load_body(&m, md.weights, err, sizeof(err)) != 0)
            FUZZ_CHECK(err[0] != '\0');
        err[0] = '\0';
        if (model_load_params(&m, md.weights, err, sizeof(err)) == 0) {
            int T = md.mc.max_seq_len < 5 ? md.mc.max_seq_len : 5, tok[5], len = T, label = 0;
            for (int t = 0; t < T; t++)
                tok[t] = (t * 7 + 1) % md.mc.vocab;
            float loss = model_forward(&m, tok, &len, &label, 1, T);
            if (verbose)
                fprintf(stderr, "ckpt_fuzz: model: forward ran, loss %g\n", loss);
        } else {
            FUZZ_CHECK(err[0] != '\0');
            if (verbose)
                fprintf(stderr, "ckpt_fuzz: model: %s\n", err);
        }
        model_cleanup(&m);
    } else {
        FUZZ_CHECK(why[0] != '\0');
        if (verbose)
            fprintf(stderr, "ckpt_fuzz: model: %s\n", why);
    }
    model_dir_close(&md);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[256], job[128];
    const uint8_t *sep = memmem(data, size, CKPT_FUZZ_SEP, strlen(CKPT_FUZZ_SEP));
    long long step = dir_step(data, sep ? (size_t)(sep - data) : size);

    if (!root[0])
        init();
    snprintf(job, sizeof(job), "%s/job", root);
    FUZZ_CHECK(mkdir(job, 0755) == 0);
    snprintf(dir, sizeof(dir), "%s/step-%lld", job, step);
    unpack(data, size, dir);
    check_resume(dir, step);
    check_model_dir(dir);
    FUZZ_CHECK(ckpt_rm_rf_(job) == 0);
    snprintf(dir, sizeof(dir), "%s/rt", root);
    (void)ckpt_rm_rf_(dir);
    return 0;
}
