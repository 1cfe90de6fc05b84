/*
 * ckpt.c - checkpoint snapshots and crash-safe writing (see ckpt.h); reading is in ckpt_read.c.
 */
#include "worker/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/xalloc.h"
#include "worker/ckpt_internal.h"
#include "worker/dist.h"

const char *const ckpt_files_[CKPT_NFILES] = {"state.json", "model.safetensors",
                                              "optimizer.safetensors"};

/* ---- snapshots ------------------------------------------------------------------------------ */

size_t ckpt_dtype_size(enum ckpt_dtype d)
{
    switch (d) {
    case CKPT_F32: case CKPT_I32: return 4;
    case CKPT_F16: case CKPT_BF16: return 2;
    case CKPT_I64: return 8;
    case CKPT_U8: return 1;
    }
    return 0;
}

struct ckpt_snapshot *ckpt_snapshot_new(const struct ckpt_meta *meta)
{
    struct ckpt_snapshot *s = xcalloc(1, sizeof(*s));

    if (meta)
        s->meta = *meta;
    s->extra = json_object();
    return s;
}

void ckpt_snapshot_free(struct ckpt_snapshot *s)
{
    if (!s)
        return;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < s->n[p]; i++)
            free(s->t[p][i].data);
        free(s->t[p]);
    }
    json_decref(s->extra);
    free(s);
}

const struct ckpt_tensor *ckpt_snapshot_find(const struct ckpt_snapshot *s, enum ckpt_part part,
                                             const char *name)
{
    for (size_t i = 0; i < s->n[part]; i++)
        if (strcmp(s->t[part][i].name, name) == 0)
            return &s->t[part][i];
    return NULL;
}

/* Appends a tensor that takes ownership of data (already allocated, `bytes` long). */
void ckpt_snapshot_push_(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                         enum ckpt_dtype dtype, int ndim, const int64_t *shape, void *data,
                         size_t bytes)
{
    struct ckpt_tensor *t;

    s->t[part] = xrealloc(s->t[part], (s->n[part] + 1) * sizeof(*t));
    t = &s->t[part][s->n[part]++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(*shape));
    t->bytes = bytes;
    t->data = data;
}

int ckpt_snapshot_add(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                      enum ckpt_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    size_t elems = 1, bytes;
    void *copy;

    if (!name || !*name || strlen(name) >= CKPT_MAX_NAME || strcmp(name, "__metadata__") == 0 ||
        ndim < 0 || ndim > CKPT_MAX_DIMS || ckpt_snapshot_find(s, part, name)) {
        dist_log("Checkpoint tensor '%s': empty, too long, reserved or duplicate name, or more "
                 "than %d dimensions",
                 name ? name : "(null)", CKPT_MAX_DIMS);
        return DIST_EUSAGE;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return DIST_EUSAGE;
        elems *= (size_t)shape[i];
    }
    bytes = elems * ckpt_dtype_size(dtype);
    copy = xmalloc(bytes ? bytes : 1);
    if (bytes)
        memcpy(copy, data, bytes);
    ckpt_snapshot_push_(s, part, name, dtype, ndim, shape, copy, bytes);
    return 0;
}

const char *ckpt_dtype_name_(enum ckpt_dtype d)
{
    static const char *names[] = {"F32", "F16", "BF16", "I32", "I64", "U8"};
    return names[d];
}

/* ---- hashed, fsynced files ------------------------------------------------------------------ */

struct hfile {
    int fd;
    EVP_MD_CTX *md;
    const char *path;
};

static int hf_open(struct hfile *h, const char *path)
{
    h->path = path;
    h->md = NULL;
    h->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (h->fd < 0) {
        dist_log("Could not create %s: %s", path, strerror(errno));
        return DIST_EIO;
    }
    h->md = EVP_MD_CTX_new();
    if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1)
        abort();
    return 0;
}

static int hf_write(struct hfile *h, const void *p, size_t n)
{
    const char *c = p;

    EVP_DigestUpdate(h->md, p, n);
    while (n > 0) {
        ssize_t w = write(h->fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            dist_log("Could not write %s: %s. Is the checkpoint volume full?", h->path,
                     strerror(errno));
            return DIST_EIO;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsyncs and closes; hex gets the SHA-256 (65 bytes). Always closes. */
static int hf_close(struct hfile *h, char hex[65])
{
    unsigned char d[32];
    unsigned int dl = 32;
    int rc = 0;

    if (h->fd >= 0 && fsync(h->fd) != 0) {
        dist_log("Could not fsync %s: %s", h->path, strerror(errno));
        rc = DIST_EIO;
    }
    if (h->fd >= 0 && close(h->fd) != 0 && !rc) {
        dist_log("Could not close %s: %s", h->path, strerror(errno));
        rc = DIST_EIO;
    }
    h->fd = -1;
    if (h->md) {
        EVP_DigestFinal_ex(h->md, d, &dl);
        EVP_MD_CTX_free(h->md);
        h->md = NULL;
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
    }
    return rc;
}

int ckpt_fsync_dir_(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

    if (fd < 0 || fsync(fd) != 0) {
        dist_log("Could not fsync directory %s: %s", dir, strerror(errno));
        rc = DIST_EIO;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- the three files ------------------------------------------------------------------------- */

static json_t *safetensors_header(const struct ckpt_tensor *t, size_t n)
{
    json_t *h = json_object();
    size_t off = 0;

    json_object_set_new(h, "__metadata__", json_pack("{s:s,s:s}", "format", "pt", "producer",
                                                     "gantry"));
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(h, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", ckpt_dtype_name_(t[i].dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t[i].bytes)));
        off += t[i].bytes;
    }
    return h;
}

/* safetensors: u64 LE header length, the JSON header padded with spaces to 8 bytes, the data
 * (little-endian; this code runs on little-endian hosts only). */
static int write_safetensors(const char *path, const struct ckpt_tensor *t, size_t n,
                             char hex[65])
{
    struct hfile h;
    json_t *hdr = safetensors_header(t, n);
    char *js = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
    unsigned char len[8];
    int rc;

    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if ((rc = hf_open(&h, path)))
        goto out;
    rc = hf_write(&h, len, 8);
    if (!rc)
        rc = hf_write(&h, js, jl);
    if (!rc && padded > jl)
        rc = hf_write(&h, "        ", padded - jl);
    for (size_t i = 0; !rc && i < n; i++)
        rc = hf_write(&h, t[i].data, t[i].bytes);
    int crc = hf_close(&h, hex);
    rc = rc ? rc : crc;
out:
    free(js);
    json_decref(hdr);
    return rc;
}

static int write_state(const char *path, const struct ckpt_snapshot *s, char hex[65])
{
    const struct ckpt_meta *m = &s->meta;
    json_t *st = json_pack("{s:s,s:I,s:I,s:{s:I,s:I},s:i,s:s,s:O}", "format", "gantry-ckpt-v1",
                           "step", (json_int_t)m->step, "epoch", (json_int_t)m->epoch, "sampler",
                           "epoch", (json_int_t)m->sampler.epoch, "consumed",
                           (json_int_t)m->sampler.consumed, "world_size", m->world_size,
                           "config_hash", m->config_hash, "extra", s->extra);
    char *js = st ? json_dumps(st, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    struct hfile h;
    int rc;

    if (!js) {
        rc = DIST_EUSAGE;
        goto out;
    }
    if ((rc = hf_open(&h, path)))
        goto out;
    rc = hf_write(&h, js, strlen(js));
    if (!rc)
        rc = hf_write(&h, "\n", 1);
    int crc = hf_close(&h, hex);
    rc = rc ? rc : crc;
out:
    free(js);
    json_decref(st);
    return rc;
}

#define JOBDIR_MAX 2048 /* <root>/<job>; everything else fits around it */

static int write_manifest(const char *dir, char hex[][65])
{
    char path[JOBDIR_MAX + 400];
    struct hfile h;
    char unused[65];
    int rc;

    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_MANIFEST);
    if ((rc = hf_open(&h, path)))
        return rc;
    for (int i = 0; !rc && i < CKPT_NFILES; i++) {
        char line[128];
        int n = snprintf(line, sizeof(line), "%s  %s\n", hex[i], ckpt_files_[i]);
        rc = hf_write(&h, line, (size_t)n);
    }
    int crc = hf_close(&h, unused);
    return rc ? rc : crc;
}

/* ---- directories ------------------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int ckpt_rm_rf_(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdir_p(const char *path)
{
    char tmp[4096];

    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps present under jobdir, newest first; *out is new (free()). */
size_t ckpt_list_steps_(const char *jobdir, int64_t **out)
{
    DIR *d = opendir(jobdir);
    struct dirent *e;
    int64_t *v = NULL;
    size_t n = 0, cap = 0;

    *out = NULL;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        int used = 0;
        if (sscanf(e->d_name, "step-%" SCNd64 "%n", &step, &used) != 1 ||
            e->d_name[used] != 0 || step < 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            v = xrealloc(v, cap * sizeof(*v));
        }
        v[n++] = step;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof(*v), cmp_desc);
    *out = v;
    return n;
}

/* Keeps the newest `keep` step directories and drops stale temporary ones (a writer that died). */
static void prune(const char *jobdir, int keep, const char *mine)
{
    char path[JOBDIR_MAX + 300];
    int64_t *steps;
    size_t n = ckpt_list_steps_(jobdir, &steps);
    DIR *d;
    struct dirent *e;

    for (size_t i = keep > 0 ? (size_t)keep : n; i < n; i++) {
        snprintf(path, sizeof(path), "%s/step-%" PRId64, jobdir, steps[i]);
        if (ckpt_rm_rf_(path) != 0)
            dist_log("Could not remove old checkpoint %s: %s", path, strerror(errno));
    }
    free(steps);
    if ((d = opendir(jobdir)) == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp-step-", 10) != 0 || strcmp(e->d_name, mine) == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name);
        (void)ckpt_rm_rf_(path);
    }
    closedir(d);
}

int ckpt_write(const char *root, const char *job, int keep, const struct ckpt_snapshot *s)
{
    char jobdir[JOBDIR_MAX], tmp[JOBDIR_MAX + 100], fin[JOBDIR_MAX + 100],
        path[JOBDIR_MAX + 200], name[64];
    char hex[CKPT_NFILES][65];
    int rc;

    int jl = snprintf(jobdir, sizeof(jobdir), "%s/%s", root, job);
    if (jl < 0 || (size_t)jl >= sizeof(jobdir)) {
        dist_log("Checkpoint path %s/%s is too long", root, job);
        return DIST_EUSAGE;
    }
    snprintf(name, sizeof(name), ".tmp-step-%" PRId64 ".%d", s->meta.step, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s/%s", jobdir, name);
    snprintf(fin, sizeof(fin), "%s/step-%" PRId64, jobdir, s->meta.step);
    if (access(jobdir, F_OK) != 0) {
        if (mkdir_p(jobdir) != 0) {
            dist_log("Could not create checkpoint directory %s: %s. Check the volume mount and "
                     "its permissions",
                     jobdir, strerror(errno));
            return DIST_EIO;
        }
        (void)ckpt_fsync_dir_(root); /* the new job directory's entry survives a crash too */
    }
    (void)ckpt_rm_rf_(tmp);
    if (mkdir(tmp, 0755) != 0) {
        dist_log("Could not create %s: %s", tmp, strerror(errno));
        return DIST_EIO;
    }
    /* ckpt_files_ order: state.json, model.safetensors, optimizer.safetensors */
    snprintf(path, sizeof(path), "%s/%s", tmp, ckpt_files_[0]);
    if ((rc = write_state(path, s, hex[0])))
        goto out;
    snprintf(path, sizeof(path), "%s/%s", tmp, ckpt_files_[1]);
    if ((rc = write_safetensors(path, s->t[CKPT_WEIGHTS], s->n[CKPT_WEIGHTS], hex[1])))
        goto out;
    snprintf(path, sizeof(path), "%s/%s", tmp, ckpt_files_[2]);
    if ((rc = write_safetensors(path, s->t[CKPT_OPTIM], s->n[CKPT_OPTIM], hex[2])))
        goto out;
    if ((rc = write_manifest(tmp, hex)) || (rc = ckpt_fsync_dir_(tmp)))
        goto out;
    /* The same step written again (a resumed job reaching it again): replace it. */
    if (access(fin, F_OK) == 0 && ckpt_rm_rf_(fin) != 0) {
        dist_log("Could not replace %s: %s", fin, strerror(errno));
        rc = DIST_EIO;
        goto out;
    }
    if (rename(tmp, fin) != 0) {
        dist_log("Could not rename %s to %s: %s", tmp, fin, strerror(errno));
        rc = DIST_EIO;
        goto out;
    }
    if ((rc = ckpt_fsync_dir_(jobdir)))
        goto out;
    prune(jobdir, keep, name);
out:
    if (rc)
        (void)ckpt_rm_rf_(tmp);
    return rc;
}

/* ---- the background writer -------------------------------------------------------------------- */

struct ckpt_writer {
    char *root, *job;
    int keep;
    pthread_t thread;
    bool running;
    struct ckpt_snapshot *snap;
    int result;
};

static void *writer_main(void *arg)
{
    struct ckpt_writer *w = arg;
    int64_t t0 = dist_now_ms();

    w->result = ckpt_write(w->root, w->job, w->keep, w->snap);
    if (!w->result)
        dist_log("Saved checkpoint %s/%s/step-%" PRId64 " in %" PRId64 " ms", w->root, w->job,
                 w->snap->meta.step, dist_now_ms() - t0);
    ckpt_snapshot_free(w->snap);
    w->snap = NULL;
    return NULL;
}

struct ckpt_writer *ckpt_writer_new(const char *root, const char *job, int keep)
{
    struct ckpt_writer *w = xcalloc(1, sizeof(*w));

    w->root = xstrdup(root);
    w->job = xstrdup(job);
    w->keep = keep;
    return w;
}

int ckpt_writer_wait(struct ckpt_writer *w)
{
    if (!w->running)
        return 0;
    pthread_join(w->thread, NULL);
    w->running = false;
    return w->result;
}

int ckpt_writer_save(struct ckpt_writer *w, struct ckpt_snapshot *s)
{
    int prev = ckpt_writer_wait(w);

    w->snap = s;
    w->result = 0;
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        dist_log("Could not start the checkpoint writer thread; writing in the foreground");
        writer_main(w);
        return prev ? prev : w->result;
    }
    w->running = true;
    return prev;
}

void ckpt_writer_free(struct ckpt_writer *w)
{
    if (!w)
        return;
    if (ckpt_writer_wait(w) != 0)
        dist_log("The last checkpoint write failed (see above)");
    free(w->root);
    free(w->job);
    free(w);
}
