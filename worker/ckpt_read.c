/*
 * ckpt_read.c - verifying, finding and loading checkpoints (see ckpt.h).
 * Everything read from the volume is untrusted: sizes are checked before allocating, the JSON
 * header and manifest have limits, and offsets must tile the data exactly.
 */
#include "worker/ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "common/xalloc.h"
#include "worker/ckpt_internal.h"
#include "worker/dist.h"

#define WHY(...) (why ? (void)snprintf(why, why_len, __VA_ARGS__) : (void)0)

static void digest_hex(const unsigned char d[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static int sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    EVP_MD_CTX *md;
    unsigned char buf[1 << 16], d[32];
    unsigned int dl = 32;
    size_t n;

    if (!f)
        return DIST_ENOENT;
    md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
        abort();
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        EVP_DigestUpdate(md, buf, n);
    int err = ferror(f);
    fclose(f);
    EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    digest_hex(d, hex);
    return err ? DIST_EIO : 0;
}

/* Reads a whole small file (at most max bytes) into a new NUL-terminated buffer. */
static char *slurp(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b;
    size_t n;

    if (!f)
        return NULL;
    b = xmalloc(max + 1);
    n = fread(b, 1, max + 1, f);
    fclose(f);
    if (n > max) {
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* ---- safetensors ------------------------------------------------------------------------------ */

static int dtype_from(const char *s, enum ckpt_dtype *d)
{
    static const char *names[] = {"F32", "F16", "BF16", "I32", "I64", "U8"};
    for (int i = 0; i < 6; i++)
        if (strcmp(s, names[i]) == 0) {
            *d = (enum ckpt_dtype)i;
            return 0;
        }
    return -1;
}

struct entry {
    const char *name;
    enum ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t begin, end;
};

static int cmp_begin(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Parses one header entry; false if anything is off. */
static bool parse_entry(const char *name, json_t *v, struct entry *e)
{
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    uint64_t elems = 1;

    e->name = name;
    if (!json_is_string(dt) || dtype_from(json_string_value(dt), &e->dtype) != 0 ||
        !json_is_array(sh) || json_array_size(sh) > CKPT_MAX_DIMS || !json_is_array(off) ||
        json_array_size(off) != 2 || strlen(name) >= CKPT_MAX_NAME)
        return false;
    e->ndim = (int)json_array_size(sh);
    for (int d = 0; d < e->ndim; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > (json_int_t)1 << 40)
            return false;
        e->shape[d] = json_integer_value(x);
        if (e->shape[d] && elems > ((uint64_t)1 << 48) / (uint64_t)e->shape[d])
            return false; /* checked before multiplying: 2^48 x 2^40 would wrap */
        elems *= (uint64_t)e->shape[d];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return false;
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    return e->end - e->begin == elems * ckpt_dtype_size(e->dtype);
}

/* Reads and checks a safetensors file; with `into`, also loads the tensors into part. */
static int read_safetensors(const char *path, struct ckpt_snapshot *into, enum ckpt_part part,
                            char *why, size_t why_len)
{
    FILE *f = fopen(path, "rb");
    unsigned char l8[8];
    uint64_t hl = 0, size, datalen, pos = 0;
    char *hdr = NULL;
    json_t *h = NULL, *v;
    struct entry *es = NULL;
    size_t n = 0;
    const char *k;
    struct stat sb;
    int rc = DIST_ECORRUPT;

    if (!f || fstat(fileno(f), &sb) != 0) {
        WHY("cannot open %s: %s", path, strerror(errno));
        rc = DIST_ENOENT;
        goto out;
    }
    size = (uint64_t)sb.st_size;
    if (size < 8 || fread(l8, 1, 8, f) != 8) {
        WHY("%s: shorter than its 8-byte header length", path);
        goto out;
    }
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)l8[i] << (8 * i);
    if (hl > CKPT_MAX_HEADER || hl > size - 8) {
        WHY("%s: header length %" PRIu64 " is beyond the file (%" PRIu64 " bytes)", path, hl,
            size);
        goto out;
    }
    hdr = xmalloc(hl + 1);
    if (fread(hdr, 1, hl, f) != hl || !(h = json_loadb(hdr, hl, JSON_REJECT_DUPLICATES, NULL)) ||
        !json_is_object(h)) {
        WHY("%s: the JSON header does not parse", path);
        goto out;
    }
    datalen = size - 8 - hl;
    es = xmallocarray(json_object_size(h) + 1, sizeof(*es));
    json_object_foreach(h, k, v) {
        if (strcmp(k, "__metadata__") == 0)
            continue;
        if (!parse_entry(k, v, &es[n])) {
            WHY("%s: bad header entry for tensor '%s'", path, k);
            goto out;
        }
        n++;
    }
    qsort(es, n, sizeof(*es), cmp_begin);
    for (size_t i = 0; i < n; i++) { /* the tensors must tile the data exactly */
        if (es[i].begin != pos) {
            WHY("%s: tensor '%s' does not start where the previous one ended", path, es[i].name);
            goto out;
        }
        pos = es[i].end;
    }
    if (pos != datalen) {
        WHY("%s: data is %" PRIu64 " bytes but the header describes %" PRIu64 " (truncated?)",
            path, datalen, pos);
        goto out;
    }
    for (size_t i = 0; into && i < n; i++) {
        size_t bytes = (size_t)(es[i].end - es[i].begin);
        void *data = xmalloc(bytes ? bytes : 1);
        if (fread(data, 1, bytes, f) != bytes) {
            free(data);
            WHY("%s: short read", path);
            rc = DIST_EIO;
            goto out;
        }
        ckpt_snapshot_push_(into, part, es[i].name, es[i].dtype, es[i].ndim, es[i].shape, data,
                            bytes);
    }
    rc = 0;
out:
    free(es);
    json_decref(h);
    free(hdr);
    if (f)
        fclose(f);
    return rc;
}

int ckpt_read_safetensors(const char *path, struct ckpt_snapshot **out)
{
    struct ckpt_snapshot *s = ckpt_snapshot_new(NULL);
    char why[512];
    int rc = read_safetensors(path, s, CKPT_WEIGHTS, why, sizeof(why));

    if (rc) {
        dist_log("%s", why);
        ckpt_snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- state.json ---------------------------------------------------------------------------- */

static int read_state(const char *dir, struct ckpt_meta *m, json_t **extra, char *why,
                      size_t why_len)
{
    char path[4096 + 32];
    size_t len;
    char *txt;
    json_t *st = NULL, *ex = NULL;
    json_int_t step, epoch, se, sc;
    int world;
    const char *hash;
    int rc = DIST_ECORRUPT;

    snprintf(path, sizeof(path), "%s/state.json", dir);
    if (!(txt = slurp(path, CKPT_MAX_STATE, &len))) {
        WHY("%s is missing or too large", path);
        return DIST_ECORRUPT;
    }
    st = json_loadb(txt, len, 0, NULL);
    if (!st || json_unpack(st, "{s:I,s:I,s:{s:I,s:I},s:i,s:s,s?o}", "step", &step, "epoch",
                           &epoch, "sampler", "epoch", &se, "consumed", &sc, "world_size",
                           &world, "config_hash", &hash, "extra", &ex) != 0 ||
        strlen(hash) > CKPT_MAX_HASH) {
        WHY("%s does not parse or lacks step/epoch/sampler/world_size/config_hash", path);
        goto out;
    }
    if (step < 0 || step > CKPT_MAX_COUNT || epoch < 0 || epoch > CKPT_MAX_COUNT || se < 0 ||
        se > CKPT_MAX_COUNT || sc < 0 || sc > CKPT_MAX_COUNT || world < 1) {
        WHY("%s: step, epoch, sampler.epoch and sampler.consumed must be 0..2^53 and world_size "
            ">= 1", path);
        goto out;
    }
    memset(m, 0, sizeof(*m));
    m->step = step;
    m->epoch = (uint64_t)epoch;
    m->sampler.epoch = (uint64_t)se;
    m->sampler.consumed = (uint64_t)sc;
    m->world_size = world;
    snprintf(m->config_hash, sizeof(m->config_hash), "%s", hash);
    if (extra)
        *extra = ex ? json_incref(ex) : json_object();
    rc = 0;
out:
    json_decref(st);
    free(txt);
    return rc;
}

/* ---- verify, find, load ------------------------------------------------------------------- */

/* MANIFEST.sha256's lines: the three files every checkpoint has (each once) and side files
 * (plain names, each once). */
struct manifest {
    size_t n;
    char name[CKPT_NFILES + CKPT_MAX_FILES][CKPT_MAX_NAME];
    char hex[CKPT_NFILES + CKPT_MAX_FILES][65];
};

/* Reads and checks the manifest's shape (not the hashes). 0 or DIST_ECORRUPT with *why. */
static int read_manifest(const char *dir, struct manifest *mf, char *why, size_t why_len)
{
    char path[4096 + 64], *txt, *line, *save = NULL;
    bool seen[CKPT_NFILES] = {false};
    size_t len;
    int rc = 0;

    mf->n = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_MANIFEST);
    if (!(txt = slurp(path, CKPT_MAX_MANIFEST, &len))) {
        WHY("no %s (an interrupted write?)", CKPT_MANIFEST);
        return DIST_ECORRUPT;
    }
    for (line = strtok_r(txt, "\n", &save); line && !rc; line = strtok_r(NULL, "\n", &save)) {
        char want[65], name[256];
        int i;
        if (sscanf(line, "%64s %255s", want, name) != 2 || strlen(want) != 64 ||
            strspn(want, "0123456789abcdef") != 64) {
            WHY("malformed manifest line");
            rc = DIST_ECORRUPT;
            break;
        }
        for (i = 0; i < CKPT_NFILES && strcmp(name, ckpt_files_[i]) != 0; i++)
            ;
        bool dup = i < CKPT_NFILES && seen[i];
        for (size_t k = 0; i == CKPT_NFILES && k < mf->n; k++)
            dup |= !strcmp(mf->name[k], name);
        if (dup || (i == CKPT_NFILES && !ckpt_side_name_ok_(name)) ||
            mf->n == CKPT_NFILES + CKPT_MAX_FILES) {
            WHY(dup ? "manifest names '%s' twice" : "manifest names an unexpected file '%s'", name);
            rc = DIST_ECORRUPT;
            break;
        }
        if (i < CKPT_NFILES)
            seen[i] = true;
        memcpy(mf->name[mf->n], name, strlen(name) + 1); /* checked: < CKPT_MAX_NAME */
        memcpy(mf->hex[mf->n++], want, 65);
    }
    for (int i = 0; !rc && i < CKPT_NFILES; i++)
        if (!seen[i]) {
            WHY("manifest does not list %s", ckpt_files_[i]);
            rc = DIST_ECORRUPT;
        }
    free(txt);
    return rc;
}

/* Checks that MANIFEST.sha256 lists the checkpoint files (and side files), with matching
 * hashes. */
static int check_manifest(const char *dir, char *why, size_t why_len)
{
    struct manifest *mf = xmalloc(sizeof(*mf));
    char path[4096 + 64], got[65];
    int rc = read_manifest(dir, mf, why, why_len);

    for (size_t k = 0; !rc && k < mf->n; k++) {
        snprintf(path, sizeof(path), "%s/%s", dir, mf->name[k]);
        if (sha256_file(path, got) != 0 || strcmp(got, mf->hex[k]) != 0) {
            WHY("%s is missing or its SHA-256 does not match the manifest", mf->name[k]);
            rc = DIST_ECORRUPT;
        }
    }
    free(mf);
    return rc;
}

int ckpt_verify_file(const char *dir, const char *name, char *why, size_t why_len)
{
    struct manifest *mf = xmalloc(sizeof(*mf));
    char path[4096 + 64], got[65];
    size_t k;
    int rc = read_manifest(dir, mf, why, why_len);

    for (k = 0; !rc && k < mf->n && strcmp(mf->name[k], name) != 0; k++)
        ;
    if (!rc && k == mf->n) {
        WHY("%s/%s: not in the checkpoint's manifest", dir, name);
        rc = DIST_ENOENT;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (!rc && (sha256_file(path, got) != 0 || strcmp(got, mf->hex[k]) != 0)) {
        WHY("%s is missing or its SHA-256 does not match the manifest", path);
        rc = DIST_ECORRUPT;
    }
    free(mf);
    return rc;
}

char *ckpt_read_file(const char *dir, const char *name, size_t *len, int *rc, char *why,
                     size_t why_len)
{
    struct manifest *mf = xmalloc(sizeof(*mf));
    char path[4096 + 64], hex[65];
    unsigned char d[32];
    unsigned int dl = 32;
    char *buf = NULL;
    size_t k;

    if ((*rc = read_manifest(dir, mf, why, why_len)))
        goto out;
    for (k = 0; k < mf->n && strcmp(mf->name[k], name) != 0; k++)
        ;
    if (k == mf->n) {
        WHY("%s/%s: not in the checkpoint's manifest", dir, name);
        *rc = DIST_ENOENT;
        goto out;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size > (off_t)CKPT_MAX_FILE_BYTES ||
        !(buf = slurp(path, (size_t)st.st_size, len))) {
        WHY("%s: missing, unreadable or over %u bytes", path, CKPT_MAX_FILE_BYTES);
        *rc = DIST_ECORRUPT;
        goto out;
    }
    if (EVP_Digest(buf, *len, d, &dl, EVP_sha256(), NULL) != 1) /* one-shot: the bytes read */
        abort();
    digest_hex(d, hex);
    if (strcmp(hex, mf->hex[k]) != 0) {
        WHY("%s: its SHA-256 does not match the manifest (corrupted)", path);
        *rc = DIST_ECORRUPT;
        free(buf);
        buf = NULL;
    }
out:
    free(mf);
    return buf;
}

int ckpt_verify(const char *dir, char *why, size_t why_len)
{
    char path[4096 + 64];
    struct ckpt_meta m;
    const char *base = strrchr(dir, '/');
    int64_t step;
    int used = 0, rc;

    base = base ? base + 1 : dir;
    if (sscanf(base, "step-%" SCNd64 "%n", &step, &used) != 1 || base[used]) {
        WHY("%s is not named step-<N>", dir);
        return DIST_ENOENT;
    }
    if ((rc = check_manifest(dir, why, why_len)) || (rc = read_state(dir, &m, NULL, why, why_len)))
        return rc;
    if (m.step != step) {
        WHY("state.json says step %" PRId64 " but the directory is step-%" PRId64, m.step, step);
        return DIST_ECORRUPT;
    }
    for (int i = 1; i < CKPT_NFILES; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, ckpt_files_[i]);
        if ((rc = read_safetensors(path, NULL, CKPT_WEIGHTS, why, why_len)))
            return rc == DIST_ENOENT ? DIST_ECORRUPT : rc;
    }
    return 0;
}

int ckpt_find_latest(const char *root, const char *job, int64_t *step, char *dir, size_t dir_len)
{
    char jobdir[4096], path[4096 + 64], why[512];
    int64_t *steps;
    size_t n;
    int rc = DIST_ENOENT;

    snprintf(jobdir, sizeof(jobdir), "%s/%s", root, job);
    n = ckpt_list_steps_(jobdir, &steps);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/step-%" PRId64, jobdir, steps[i]);
        if (ckpt_verify(path, why, sizeof(why)) != 0) {
            dist_log("Skipping checkpoint %s: %s", path, why);
            continue;
        }
        *step = steps[i];
        snprintf(dir, dir_len, "%s", path);
        rc = 0;
        break;
    }
    free(steps);
    return rc;
}

int ckpt_load(const char *dir, struct ckpt_snapshot **out)
{
    struct ckpt_snapshot *s = ckpt_snapshot_new(NULL);
    char path[4096 + 64], why[512] = "";
    int rc;

    json_decref(s->extra);
    s->extra = NULL;
    if ((rc = read_state(dir, &s->meta, &s->extra, why, sizeof(why))))
        goto out;
    snprintf(path, sizeof(path), "%s/%s", dir, ckpt_files_[1]);
    if ((rc = read_safetensors(path, s, CKPT_WEIGHTS, why, sizeof(why))))
        goto out;
    snprintf(path, sizeof(path), "%s/%s", dir, ckpt_files_[2]);
    if ((rc = read_safetensors(path, s, CKPT_OPTIM, why, sizeof(why))))
        goto out;
    *out = s;
    s = NULL;
out:
    if (rc)
        dist_log("Could not load checkpoint %s: %s", dir, why);
    ckpt_snapshot_free(s);
    return rc;
}
