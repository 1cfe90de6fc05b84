/*
 * ckpt_test.c - checkpoints: round trip (tensors, optimiser state, state.json), the on-disk
 * layout (no temp dirs left, `sha256sum -c` accepts the manifest), keep-last-K, the background
 * writer's snapshot semantics (copying and two-phase: borrow, save, fence; double buffering;
 * errors reported), and skipping truncated, bit-flipped and partial checkpoints.
 */
#include "worker/ckpt.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test.h"
#include "worker/dist.h"

static char root[256];

static void make_root(void)
{
    snprintf(root, sizeof(root), "/tmp/ckpt_test.XXXXXX");
    if (!mkdtemp(root))
        abort();
}

static void rm_root(void)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

/* A snapshot at `step` with a 3x5 fp32 weight, a bf16 bias, and AdamW-like m and v. */
static struct ckpt_snapshot *make_snap(int64_t step, float base)
{
    struct ckpt_meta m = {.step = step, .epoch = 2, .sampler = {2, 640}, .world_size = 4};
    struct ckpt_snapshot *s;
    float w[15], mv[15];
    uint16_t b[5];
    int64_t ws[2] = {3, 5}, bs[1] = {5};

    snprintf(m.config_hash, sizeof(m.config_hash), "cfg-%d", 7);
    s = ckpt_snapshot_new(&m);
    for (int i = 0; i < 15; i++) {
        w[i] = base + (float)i * 0.5f;
        mv[i] = (float)-i;
    }
    for (int i = 0; i < 5; i++)
        b[i] = (uint16_t)(0x3f80 + i);
    if (ckpt_snapshot_add(s, CKPT_WEIGHTS, "encoder.w", CKPT_F32, 2, ws, w) ||
        ckpt_snapshot_add(s, CKPT_WEIGHTS, "encoder.b", CKPT_BF16, 1, bs, b) ||
        ckpt_snapshot_add(s, CKPT_OPTIM, "encoder.w.m", CKPT_F32, 2, ws, mv) ||
        ckpt_snapshot_add(s, CKPT_OPTIM, "encoder.w.v", CKPT_F32, 2, ws, w))
        abort();
    json_object_set_new(s->extra, "rng", json_pack("[I,I]", (json_int_t)12345, (json_int_t)678));
    return s;
}

static void test_roundtrip(void)
{
    struct ckpt_snapshot *s = make_snap(100, 1.0f), *l = NULL;
    char dir[4096], cmd[4200];
    int64_t step = -1;

    make_root();
    TEST_EQ_INT(ckpt_write(root, "job", 3, s), 0);
    TEST_EQ_INT(ckpt_find_latest(root, "job", &step, dir, sizeof(dir)), 0);
    TEST_EQ_INT(step, 100);
    TEST_EQ_INT(ckpt_load(dir, &l), 0);
    if (l) {
        TEST_EQ_INT(l->meta.step, 100);
        TEST_EQ_INT(l->meta.epoch, 2);
        TEST_EQ_INT(l->meta.sampler.consumed, 640);
        TEST_EQ_INT(l->meta.world_size, 4);
        TEST_EQ_STR(l->meta.config_hash, "cfg-7");
        TEST_EQ_INT(json_integer_value(json_array_get(json_object_get(l->extra, "rng"), 0)),
                    12345);
        TEST_EQ_INT(l->n[CKPT_WEIGHTS], 2);
        TEST_EQ_INT(l->n[CKPT_OPTIM], 2);
        const struct ckpt_tensor *a = ckpt_snapshot_find(s, CKPT_WEIGHTS, "encoder.w"),
                                 *b = ckpt_snapshot_find(l, CKPT_WEIGHTS, "encoder.w");
        TEST_CHECK(a && b && b->ndim == 2 && b->shape[0] == 3 && b->shape[1] == 5 &&
                   b->dtype == CKPT_F32 && memcmp(a->data, b->data, 60) == 0);
        b = ckpt_snapshot_find(l, CKPT_WEIGHTS, "encoder.b");
        TEST_CHECK(b && b->dtype == CKPT_BF16 && b->bytes == 10);
        b = ckpt_snapshot_find(l, CKPT_OPTIM, "encoder.w.m");
        TEST_CHECK(b && ((float *)b->data)[14] == -14.0f);
    }
    /* Standard tools agree with our manifest, and nothing temporary is left behind. */
    snprintf(cmd, sizeof(cmd), "cd '%s' && sha256sum --quiet -c MANIFEST.sha256", dir);
    TEST_EQ_INT(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s/job' | grep -v '^step-100$')\"", root);
    TEST_EQ_INT(system(cmd), 0);
    /* The same step written again (a job resumed below it reaching it again) replaces it, and
     * the old one swapped out goes too. */
    ckpt_snapshot_free(s);
    ckpt_snapshot_free(l);
    l = NULL;
    s = make_snap(100, 7.0f);
    TEST_EQ_INT(ckpt_write(root, "job", 3, s), 0);
    TEST_EQ_INT(ckpt_load(dir, &l), 0);
    const struct ckpt_tensor *w2 = l ? ckpt_snapshot_find(l, CKPT_WEIGHTS, "encoder.w") : NULL;
    TEST_CHECK(w2 && ((const float *)w2->data)[0] == 7.0f);
    TEST_EQ_INT(system(cmd), 0);
    ckpt_snapshot_free(s);
    ckpt_snapshot_free(l);
    rm_root();
}

static void test_keep_last(void)
{
    char cmd[512];

    make_root();
    for (int64_t st = 1; st <= 5; st++) {
        struct ckpt_snapshot *s = make_snap(st * 10, (float)st);
        TEST_EQ_INT(ckpt_write(root, "job", 2, s), 0);
        ckpt_snapshot_free(s);
    }
    snprintf(cmd, sizeof(cmd), "test \"$(ls '%s/job' | tr '\\n' ' ')\" = 'step-40 step-50 '",
             root);
    TEST_EQ_INT(system(cmd), 0);
    /* keep_also (the best evaluation's step) survives beside the newest 2, while it is named */
    for (int64_t st = 6; st <= 8; st++) {
        struct ckpt_snapshot *s = make_snap(st * 10, (float)st);
        s->keep_also = st < 8 ? 50 : -1;
        TEST_EQ_INT(ckpt_write(root, "job", 2, s), 0);
        ckpt_snapshot_free(s);
        snprintf(cmd, sizeof(cmd), "test \"$(ls '%s/job' | tr '\\n' ' ')\" = '%s'", root,
                 st == 6 ? "step-50 step-60 " : st == 7 ? "step-50 step-60 step-70 "
                                                     : "step-70 step-80 ");
        TEST_EQ_INT(system(cmd), 0);
    }
    /* A run resumed at another world size counts steps anew, below an older run's: what it
     * writes is kept (it was pruned at once as the oldest), the higher ones are not its to drop */
    for (int64_t st = 3; st <= 5; st++) {
        struct ckpt_snapshot *s = make_snap(st * 10, (float)st);
        TEST_EQ_INT(ckpt_write(root, "job", 1, s), 0);
        ckpt_snapshot_free(s);
        snprintf(cmd, sizeof(cmd), "test \"$(ls '%s/job' | tr '\\n' ' ')\" = 'step-%d step-70 "
                 "step-80 '", root, (int)st * 10);
        TEST_EQ_INT(system(cmd), 0);
    }
    rm_root();
}

/* The writer copies at save time: changing the caller's arrays later changes nothing. */
static void test_background_writer(void)
{
    struct ckpt_writer *w;
    struct ckpt_snapshot *l = NULL;
    float big[1 << 16];
    int64_t shape[1] = {1 << 16}, step = 0;
    char dir[4096];

    make_root();
    w = ckpt_writer_new(root, "bg", 2);
    for (int k = 1; k <= 3; k++) {
        struct ckpt_meta m = {.step = k, .world_size = 1};
        struct ckpt_snapshot *s = ckpt_snapshot_new(&m);
        for (int i = 0; i < (1 << 16); i++)
            big[i] = (float)(k * 1000 + i % 100);
        TEST_EQ_INT(ckpt_snapshot_add(s, CKPT_WEIGHTS, "big", CKPT_F32, 1, shape, big), 0);
        TEST_EQ_INT(ckpt_writer_save(w, s), 0);
        for (int i = 0; i < (1 << 16); i++) /* training goes on and overwrites the weights */
            big[i] = -1.0f;
    }
    TEST_EQ_INT(ckpt_writer_wait(w), 0);
    ckpt_writer_free(w);
    TEST_EQ_INT(ckpt_find_latest(root, "bg", &step, dir, sizeof(dir)), 0);
    TEST_EQ_INT(step, 3);
    TEST_EQ_INT(ckpt_load(dir, &l), 0);
    if (l) {
        const float *d = l->t[CKPT_WEIGHTS][0].data;
        TEST_NEAR(d[0], 3000, 0);
        TEST_NEAR(d[(1 << 16) - 1], 3000 + ((1 << 16) - 1) % 100, 0);
    }
    ckpt_snapshot_free(l);
    rm_root();
}

/* Loads step `step` of root/job and checks tensor `name` (part p) is k * 1000 + i % 100. */
static void check_step(const char *job, int64_t step, enum ckpt_part p, const char *name, int k,
                       int n)
{
    char dir[4096];
    struct ckpt_snapshot *l = NULL;

    snprintf(dir, sizeof(dir), "%s/%s/step-%" PRId64, root, job, step);
    TEST_EQ_INT(ckpt_verify(dir, NULL, 0), 0);
    TEST_EQ_INT(ckpt_load(dir, &l), 0);
    const struct ckpt_tensor *t = l ? ckpt_snapshot_find(l, p, name) : NULL;
    TEST_CHECK(t && t->bytes == (size_t)n * 4);
    if (t && t->bytes == (size_t)n * 4) {
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += ((const float *)t->data)[i] != (float)(k * 1000 + i % 100);
        TEST_EQ_INT(bad, 0);
    }
    ckpt_snapshot_free(l);
}

/* Two-phase: the snapshot borrows the caller's arrays; after ckpt_writer_fence the caller
 * overwrites them and the checkpoints still hold the values at save time. Four saves through
 * two buffers: the first without a reserve (the staging thread grows the buffer), two saves
 * back to back (the second goes to the other buffer while the first is written), keep 2. */
static void test_staged_writer(void)
{
    enum { N = (1 << 20) + 3 }; /* two 4 MiB staging chunks per tensor */
    static float w1[N], m1[N], w2[N], m2[N];
    int64_t shape[1] = {N};
    struct ckpt_writer *w;

    make_root();
    w = ckpt_writer_new(root, "st", 2);
    for (int k = 1; k <= 4; k++) {
        struct ckpt_meta m = {.step = k, .world_size = 1};
        struct ckpt_snapshot *s = ckpt_snapshot_new(&m);
        float *sw = k == 3 ? w2 : w1, *sm = k == 3 ? m2 : m1;
        for (int i = 0; i < N; i++)
            sw[i] = sm[i] = (float)(k * 1000 + i % 100);
        TEST_EQ_INT(ckpt_snapshot_borrow(s, CKPT_WEIGHTS, "w", CKPT_F32, 1, shape, sw), 0);
        TEST_EQ_INT(ckpt_snapshot_borrow(s, CKPT_OPTIM, "m", CKPT_F32, 1, shape, sm), 0);
        TEST_EQ_INT(ckpt_snapshot_borrow(s, CKPT_OPTIM, "m", CKPT_F32, 1, shape, sm), DIST_EUSAGE);
        TEST_EQ_INT(ckpt_writer_save(w, s), 0);
        if (k == 1)
            TEST_EQ_INT(ckpt_writer_reserve(w, 2 * N * sizeof(float)), 0);
        if (k == 2) /* step 3 borrows other arrays: no fence before its save */
            continue;
        ckpt_writer_fence(w);
        for (int i = 0; i < N; i++) /* the optimizer step overwrites the state */
            w1[i] = w2[i] = m1[i] = m2[i] = -1.0f;
        if (k == 3) {
            TEST_EQ_INT(ckpt_writer_wait(w), 0);
            check_step("st", 2, CKPT_WEIGHTS, "w", 2, N);
            check_step("st", 3, CKPT_WEIGHTS, "w", 3, N);
            check_step("st", 3, CKPT_OPTIM, "m", 3, N);
        }
    }
    TEST_EQ_INT(ckpt_writer_wait(w), 0);
    check_step("st", 4, CKPT_WEIGHTS, "w", 4, N);
    check_step("st", 4, CKPT_OPTIM, "m", 4, N);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "test \"$(ls -A '%s/st' | tr '\\n' ' ')\" = 'step-3 step-4 '",
             root);
    TEST_EQ_INT(system(cmd), 0);
    ckpt_writer_free(w);
    rm_root();
}

/* A write that fails is reported by the next save or wait, once; the writer keeps working. */
static void test_writer_error(void)
{
    char bad[300], cmd[600];
    int64_t shape[1] = {4};
    float d[4] = {1, 2, 3, 4};
    struct ckpt_writer *w;

    make_root();
    snprintf(bad, sizeof(bad), "%s/file", root);
    snprintf(cmd, sizeof(cmd), "touch '%s'", bad);
    TEST_EQ_INT(system(cmd), 0);
    w = ckpt_writer_new(bad, "job", 1); /* <root>/job under a regular file: mkdir fails */
    for (int k = 0; k < 2; k++) {
        struct ckpt_meta m = {.step = k};
        struct ckpt_snapshot *s = ckpt_snapshot_new(&m);
        TEST_EQ_INT(ckpt_snapshot_borrow(s, CKPT_WEIGHTS, "d", CKPT_F32, 1, shape, d), 0);
        int rc = ckpt_writer_save(w, s);
        if (k == 1) /* the first write's failure, or none yet */
            TEST_CHECK(rc == 0 || rc == DIST_EIO);
        ckpt_writer_fence(w);
    }
    TEST_EQ_INT(ckpt_writer_wait(w), DIST_EIO); /* the second write fails too */
    TEST_EQ_INT(ckpt_writer_wait(w), 0);        /* reported once */
    ckpt_writer_free(w);
    rm_root();
}

static void truncate_file(const char *path, off_t by)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || truncate(path, sb.st_size - by) != 0)
        abort();
}

static void flip_bit(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    unsigned char c;
    if (fd < 0 || pread(fd, &c, 1, at) != 1)
        abort();
    c ^= 0x10;
    if (pwrite(fd, &c, 1, at) != 1)
        abort();
    close(fd);
}

/* Newest first: truncated (50), bit-flipped (40), no manifest (30), wrong step in state (25);
 * 20 is good. A temp dir from a dead writer is not a checkpoint at all. */
static void test_skip_corrupt(void)
{
    char path[4096], dir[4096];
    int64_t steps[] = {10, 20, 25, 30, 40, 50}, step = -1;

    make_root();
    for (int i = 0; i < 6; i++) {
        struct ckpt_snapshot *s = make_snap(steps[i], (float)i);
        TEST_EQ_INT(ckpt_write(root, "job", 0, s), 0);
        ckpt_snapshot_free(s);
    }
    snprintf(path, sizeof(path), "%s/job/step-50/model.safetensors", root);
    truncate_file(path, 7);
    snprintf(path, sizeof(path), "%s/job/step-40/optimizer.safetensors", root);
    flip_bit(path, 100);
    snprintf(path, sizeof(path), "%s/job/step-30/MANIFEST.sha256", root);
    TEST_EQ_INT(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/job/step-25", root);
    snprintf(dir, sizeof(dir), "%s/job/step-26", root);
    TEST_EQ_INT(rename(path, dir), 0); /* state.json says 25 */
    snprintf(path, sizeof(path), "%s/job/.tmp-step-60.999", root);
    TEST_EQ_INT(mkdir(path, 0755), 0);

    char why[512] = "";
    snprintf(path, sizeof(path), "%s/job/step-50", root);
    TEST_EQ_INT(ckpt_verify(path, why, sizeof(why)), DIST_ECORRUPT);
    TEST_CHECK(strstr(why, "model.safetensors") != NULL);
    TEST_EQ_INT(ckpt_find_latest(root, "job", &step, dir, sizeof(dir)), 0);
    TEST_EQ_INT(step, 20);
    rm_root();
}

/* A state.json whose counters no run writes (edited by hand, its manifest regenerated with
 * sha256sum): the checkpoint is corrupt, named so, and skipped for the one before. */
static void test_bad_state(void)
{
    static const char *edits[][2] = {
        {"world_size", "0"}, {"step", "-20"}, {"epoch", "-1"}, {"epoch", "1152921504606846976"},
        {"sampler", "{\"epoch\": 2, \"consumed\": -640}"},
        {"sampler", "{\"epoch\": 9007199254740993, \"consumed\": 640}"},
    };
    char dir[4096], path[4200], cmd[4500], why[512];
    int64_t step = -1;

    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        make_root();
        for (int64_t k = 10; k <= 20; k += 10) {
            struct ckpt_snapshot *s = make_snap(k, 0.0f);
            TEST_EQ_INT(ckpt_write(root, "job", 0, s), 0);
            ckpt_snapshot_free(s);
        }
        snprintf(dir, sizeof(dir), "%s/job/step-20", root);
        snprintf(path, sizeof(path), "%s/state.json", dir);
        json_t *st = json_load_file(path, 0, NULL);
        TEST_CHECK(st != NULL);
        if (!st)
            continue;
        json_object_set_new(st, edits[i][0], json_loads(edits[i][1], JSON_DECODE_ANY, NULL));
        TEST_EQ_INT(json_dump_file(st, path, 0), 0);
        json_decref(st);
        snprintf(cmd, sizeof(cmd), "cd '%s' && sha256sum state.json model.safetensors "
                                   "optimizer.safetensors >MANIFEST.sha256", dir);
        TEST_EQ_INT(system(cmd), 0);
        why[0] = '\0';
        TEST_EQ_INT(ckpt_verify(dir, why, sizeof(why)), DIST_ECORRUPT);
        TEST_CHECK(strstr(why, "must be 0..2^53 and world_size >= 1") != NULL);
        TEST_EQ_INT(ckpt_find_latest(root, "job", &step, path, sizeof(path)), 0);
        TEST_EQ_INT(step, 10);
        rm_root();
    }
}

/* Side files (config.json, vocab.txt): written, in the manifest (sha256sum agrees), read back
 * only when their bytes match it; bad names refused; a manifest naming a path refused. */
static void test_side_files(void)
{
    struct ckpt_snapshot *s = make_snap(70, 0.0f);
    char dir[4096], path[4200], cmd[4400], why[512] = "", *got;
    size_t len = 0;
    int rc = 0;

    make_root();
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "config.json", "{\"a\":1}\n", 8), 0);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "vocab.txt", "[PAD]\n[UNK]\n", 12), 0);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "empty", "", 0), 0);
    /* refused: a path, a hidden name, the checkpoint's own files, a duplicate */
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "../x", "y", 1), DIST_EUSAGE);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, ".hidden", "y", 1), DIST_EUSAGE);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "state.json", "y", 1), DIST_EUSAGE);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "MANIFEST.sha256", "y", 1), DIST_EUSAGE);
    TEST_EQ_INT(ckpt_snapshot_add_file(s, "vocab.txt", "y", 1), DIST_EUSAGE);
    TEST_EQ_INT(ckpt_write(root, "job", 0, s), 0);
    snprintf(dir, sizeof(dir), "%s/job/step-70", root);
    TEST_EQ_INT(ckpt_verify(dir, why, sizeof(why)), 0);
    snprintf(cmd, sizeof(cmd), "cd '%s' && sha256sum --quiet -c MANIFEST.sha256 && "
                               "test $(wc -l < MANIFEST.sha256) = 6", dir);
    TEST_EQ_INT(system(cmd), 0);
    got = ckpt_read_file(dir, "vocab.txt", &len, &rc, why, sizeof(why));
    TEST_CHECK(got && len == 12 && !strcmp(got, "[PAD]\n[UNK]\n") && rc == 0);
    free(got);
    got = ckpt_read_file(dir, "empty", &len, &rc, why, sizeof(why));
    TEST_CHECK(got && len == 0 && rc == 0);
    free(got);
    got = ckpt_read_file(dir, "tokenizer.json", &len, &rc, why, sizeof(why));
    TEST_CHECK(!got && rc == DIST_ENOENT && strstr(why, "tokenizer.json"));
    /* A changed byte: reading it fails, and the checkpoint no longer verifies. */
    snprintf(path, sizeof(path), "%s/config.json", dir);
    flip_bit(path, 3);
    got = ckpt_read_file(dir, "config.json", &len, &rc, why, sizeof(why));
    TEST_CHECK(!got && rc == DIST_ECORRUPT && strstr(why, "config.json"));
    TEST_EQ_INT(ckpt_verify(dir, why, sizeof(why)), DIST_ECORRUPT);
    TEST_CHECK(strstr(why, "config.json") != NULL);
    /* One file at a time (gantry-predict checks only what it reads). */
    TEST_EQ_INT(ckpt_verify_file(dir, "config.json", why, sizeof(why)), DIST_ECORRUPT);
    TEST_EQ_INT(ckpt_verify_file(dir, "vocab.txt", why, sizeof(why)), 0);
    TEST_EQ_INT(ckpt_verify_file(dir, "model.safetensors", why, sizeof(why)), 0);
    TEST_EQ_INT(ckpt_verify_file(dir, "tokenizer.json", why, sizeof(why)), DIST_ENOENT);
    /* A manifest naming something outside the directory is refused, whatever its hash. */
    snprintf(cmd, sizeof(cmd), "cd '%s' && sed -i 's#  empty$#  ../empty#' MANIFEST.sha256", dir);
    TEST_EQ_INT(system(cmd), 0);
    TEST_EQ_INT(ckpt_verify(dir, why, sizeof(why)), DIST_ECORRUPT);
    TEST_CHECK(strstr(why, "../empty") != NULL);
    ckpt_snapshot_free(s);
    rm_root();
}

static void test_none(void)
{
    char dir[256];
    int64_t step = 5;

    make_root();
    TEST_EQ_INT(ckpt_find_latest(root, "nojob", &step, dir, sizeof(dir)), DIST_ENOENT);
    TEST_EQ_INT(step, 5);
    rm_root();
}

/* safetensors readers must refuse headers that lie about the data. */
static void test_bad_safetensors(void)
{
    static const char *headers[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", /* overlap */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",  /* shape vs size */
        "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",   /* dtype */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", /* past the end */
        /* 2^24 x 2^40 elements: the product wraps to 0 in 64 bits, as 0 bytes would */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[16777216,1099511627776],\"data_offsets\":[0,0]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    char path[300];
    struct ckpt_snapshot *s = NULL;

    make_root();
    snprintf(path, sizeof(path), "%s/x.safetensors", root);
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        FILE *f = fopen(path, "wb");
        uint64_t hl = strlen(headers[i]);
        unsigned char l8[8], data[12] = {0};
        for (int k = 0; k < 8; k++)
            l8[k] = (unsigned char)(hl >> (8 * k));
        fwrite(l8, 1, 8, f);
        fwrite(headers[i], 1, hl, f);
        fwrite(data, 1, i == 0 ? 12 : 8, f);
        fclose(f);
        TEST_EQ_INT(ckpt_read_safetensors(path, &s), DIST_ECORRUPT);
    }
    rm_root();
}

int main(void)
{
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_keep_last);
    TEST_RUN(test_background_writer);
    TEST_RUN(test_staged_writer);
    TEST_RUN(test_writer_error);
    TEST_RUN(test_skip_corrupt);
    TEST_RUN(test_bad_state);
    TEST_RUN(test_side_files);
    TEST_RUN(test_none);
    TEST_RUN(test_bad_safetensors);
    return test_summary();
}
