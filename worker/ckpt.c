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
#include <sys/mman.h>
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
    s->keep_also = -1;
    return s;
}

void ckpt_snapshot_free(struct ckpt_snapshot *s)
{
    if (!s)
        return;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < s->n[p]; i++)
            if (!s->t[p][i].borrowed_)
                free(s->t[p][i].data);
        free(s->t[p]);
    }
    for (size_t i = 0; i < s->n_files; i++)
        free(s->files[i].data);
    free(s->files);
    json_decref(s->extra);
    free(s);
}

bool ckpt_side_name_ok_(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= CKPT_MAX_NAME || name[0] == '.' || !strcmp(name, CKPT_MANIFEST))
        return false;
    for (int i = 0; i < CKPT_NFILES; i++)
        if (!strcmp(name, ckpt_files_[i]))
            return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

int ckpt_snapshot_add_file(struct ckpt_snapshot *s, const char *name, const void *data, size_t len)
{
    if (!ckpt_side_name_ok_(name) || s->n_files >= CKPT_MAX_FILES || len > CKPT_MAX_FILE_BYTES) {
        dist_log("Checkpoint side file '%s' (%zu bytes) refused: a plain file name, at most %d "
                 "files of %u bytes each", name, len, CKPT_MAX_FILES, CKPT_MAX_FILE_BYTES);
        return DIST_EUSAGE;
    }
    for (size_t i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].name, name)) {
            dist_log("Checkpoint side file '%s' added twice", name);
            return DIST_EUSAGE;
        }
    s->files = xrealloc(s->files, (s->n_files + 1) * sizeof(*s->files));
    struct ckpt_file *f = &s->files[s->n_files++];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->data = xmalloc(len ? len : 1);
    if (len)
        memcpy(f->data, data, len);
    f->len = len;
    return 0;
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

/* Checks name and shape; *bytes gets the data size. 0 or DIST_EUSAGE. */
static int check_tensor(const struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                        enum ckpt_dtype dtype, int ndim, const int64_t *shape, size_t *bytes)
{
    size_t elems = 1;

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
    *bytes = elems * ckpt_dtype_size(dtype);
    return 0;
}

int ckpt_snapshot_add(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                      enum ckpt_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    size_t bytes;
    void *copy;

    if (check_tensor(s, part, name, dtype, ndim, shape, &bytes))
        return DIST_EUSAGE;
    copy = xmalloc(bytes ? bytes : 1);
    if (bytes)
        memcpy(copy, data, bytes);
    ckpt_snapshot_push_(s, part, name, dtype, ndim, shape, copy, bytes);
    return 0;
}

int ckpt_snapshot_borrow(struct ckpt_snapshot *s, enum ckpt_part part, const char *name,
                         enum ckpt_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    size_t bytes;

    if (check_tensor(s, part, name, dtype, ndim, shape, &bytes) || (bytes && !data))
        return DIST_EUSAGE;
    ckpt_snapshot_push_(s, part, name, dtype, ndim, shape, (void *)(uintptr_t)data, bytes);
    s->t[part][s->n[part] - 1].borrowed_ = 1;
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

static int write_manifest(const char *dir, char hex[][65], const struct ckpt_snapshot *s)
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
    for (size_t i = 0; !rc && i < s->n_files; i++) {
        char line[CKPT_MAX_NAME + 80];
        int n = snprintf(line, sizeof(line), "%s  %s\n", hex[CKPT_NFILES + i], s->files[i].name);
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

/* Keeps the newest `keep` step directories up to step-<step>, the one just written (and
 * step-<keep_also>), and drops stale temporary ones (a writer that died). Directories numbered
 * above the one just written are not this run's history (steps counted at another world size,
 * or newer than the step the ranks agreed on): they neither count nor go here (the worker
 * retires them once its first checkpoint is reported), or the one just written, numbered below
 * them, would be pruned at once. */
static void prune(const char *jobdir, int keep, int64_t step, int64_t keep_also,
                  const char *mine)
{
    char path[JOBDIR_MAX + 300];
    int64_t *steps;
    size_t n = ckpt_list_steps_(jobdir, &steps), kept = 0;
    DIR *d;
    struct dirent *e;

    for (size_t i = 0; i < n; i++) { /* newest first */
        if (steps[i] > step || keep <= 0 || ++kept <= (size_t)keep || steps[i] == keep_also)
            continue;
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
        path[JOBDIR_MAX + 100 + CKPT_MAX_NAME + 8], name[64];
    char hex[CKPT_NFILES + CKPT_MAX_FILES][65];
    int rc;

    if (s->n_files > CKPT_MAX_FILES)
        return DIST_EUSAGE;
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
    for (size_t i = 0; i < s->n_files; i++) {
        struct hfile h;
        snprintf(path, sizeof(path), "%s/%s", tmp, s->files[i].name);
        if ((rc = hf_open(&h, path)))
            goto out;
        rc = hf_write(&h, s->files[i].data, s->files[i].len);
        int crc = hf_close(&h, hex[CKPT_NFILES + i]);
        if ((rc = rc ? rc : crc))
            goto out;
    }
    if ((rc = write_manifest(tmp, hex, s)) || (rc = ckpt_fsync_dir_(tmp)))
        goto out;
    /* The same step written again (a resumed job reaching it again): the new one swapped in
     * for the old in one step where the filesystem can (RENAME_EXCHANGE), so a crash leaves
     * one of them whole; elsewhere (NFS) the old one goes first. */
    bool swapped = false;
    if (access(fin, F_OK) == 0) {
        swapped = renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) == 0;
        if (!swapped && ckpt_rm_rf_(fin) != 0) {
            dist_log("Could not replace %s: %s", fin, strerror(errno));
            rc = DIST_EIO;
            goto out;
        }
    }
    if (!swapped && rename(tmp, fin) != 0) {
        dist_log("Could not rename %s to %s: %s", tmp, fin, strerror(errno));
        rc = DIST_EIO;
        goto out;
    }
    if ((rc = ckpt_fsync_dir_(jobdir)))
        goto out;
    if (swapped)
        (void)ckpt_rm_rf_(tmp); /* the old one, now under the temporary name */
    prune(jobdir, keep, s->meta.step, s->keep_also, name);
out:
    if (rc)
        (void)ckpt_rm_rf_(tmp);
    return rc;
}


/* ---- the background writer -------------------------------------------------------------------- */

/* A snapshot buffer's life: FREE -> (save) STAGING -> (its borrowed tensors copied into it)
 * QUEUED -> (the writing thread) WRITING -> FREE. A snapshot without borrowed tensors goes
 * straight to QUEUED. Snapshots are written in save order (seq).
 *
 * Staging is planned as chunks (segments of at most CHUNK bytes) that anyone may claim: the
 * staging thread, and the caller waiting in ckpt_writer_fence, which copies what is left rather
 * than sleep (on a busy machine the staging thread may not get a core for a while). */
enum slot_state { SLOT_FREE, SLOT_STAGING, SLOT_QUEUED, SLOT_WRITING };

#define CKPT_SLOTS 2
#define CHUNK ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

struct seg {
    const void *src;
    void *dst;
    size_t n;
};

struct slot {
    enum slot_state st;
    struct ckpt_snapshot *snap; /* owned while not FREE */
    uint64_t seq;
    unsigned char *buf; /* reused from one checkpoint to the next; staged tensors point into it */
    size_t cap;
    struct seg *seg; /* the plan: reused too */
    size_t nseg, segcap;
    bool planned;      /* seg is built: chunks may be claimed */
    size_t next, done; /* chunks claimed, chunks copied */
};

/* One thread (the caller's) uses a writer. mu guards st, snap, seq, planned, next, done, result
 * and quit; buf, cap and seg belong to whoever plans: the caller while the slot is FREE (and in
 * save), the staging thread while it is STAGING and not planned. */
struct ckpt_writer {
    char *root, *job;
    int keep;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a slot changed state, was planned, or quit */
    pthread_t stager, writer;
    bool threads; /* both threads run; without them save works in the foreground */
    bool quit;
    uint64_t seq;
    int result; /* the first error not yet reported */
    struct slot slot[CKPT_SLOTS];
};

/* Bytes of s's tensors still borrowed from the caller (packed back to back in a buffer: exactly
 * what ckpt_writer_reserve was told). */
static size_t borrowed_bytes(const struct ckpt_snapshot *s)
{
    size_t n = 0;

    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < s->n[p]; i++)
            if (s->t[p][i].borrowed_ == 1)
                n += s->t[p][i].bytes;
    return n;
}

/* *n bytes (rounded up to a huge page; *n gets the size), every page faulted in now: a copy into
 * fresh memory runs at a quarter of the speed of one into faulted memory. Huge pages where the
 * kernel gives them (fewer faults and TLB misses). NULL when out of memory. */
static unsigned char *buf_new(size_t *n)
{
    volatile unsigned char *v;
    void *p = NULL;

    *n = (*n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (posix_memalign(&p, HUGE_PAGE, *n) != 0)
        return NULL;
    (void)madvise(p, *n, MADV_HUGEPAGE);
    v = p;
    for (size_t i = 0; i < *n; i += 4096)
        v[i] = 0;
    return p;
}

static void add_seg(struct slot *sl, const void *src, void *dst, size_t n)
{
    if (sl->nseg == sl->segcap) {
        sl->segcap = sl->segcap ? 2 * sl->segcap : 64;
        sl->seg = xrealloc(sl->seg, sl->segcap * sizeof(*sl->seg));
    }
    sl->seg[sl->nseg++] = (struct seg){src, dst, n};
}

/* Plans the copy of sl's borrowed tensors into sl->buf (grown when too small, if `grow`; false
 * when it would have to be) and points the tensors at their copies. Without a buffer to be had,
 * into memory of their own. */
static bool plan(struct slot *sl, bool grow)
{
    struct ckpt_snapshot *s = sl->snap;
    size_t need = borrowed_bytes(s), off = 0;

    if (need > sl->cap) {
        if (!grow)
            return false;
        free(sl->buf);
        sl->cap = need;
        if ((sl->buf = buf_new(&sl->cap)) == NULL) {
            sl->cap = 0;
            dist_log("No memory for a %zu-byte checkpoint buffer; copying tensor by tensor", need);
        }
    }
    sl->nseg = sl->next = sl->done = 0;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < s->n[p]; i++) {
            struct ckpt_tensor *t = &s->t[p][i];
            unsigned char *to;
            if (t->borrowed_ != 1)
                continue;
            if (sl->buf) {
                to = sl->buf + off;
                off += t->bytes;
                t->borrowed_ = 2;
            } else {
                to = xmalloc(t->bytes ? t->bytes : 1);
                t->borrowed_ = 0;
            }
            for (size_t o = 0; o < t->bytes; o += CHUNK)
                add_seg(sl, (const unsigned char *)t->data + o, to + o,
                        t->bytes - o < CHUNK ? t->bytes - o : CHUNK);
            t->data = to;
        }
    }
    return true;
}

/* Copies unclaimed chunks of sl until none is left; whoever copies the last one queues the
 * snapshot for writing. Called and returns with w->mu held. */
static void copy_chunks(struct ckpt_writer *w, struct slot *sl)
{
    while (sl->planned && sl->next < sl->nseg) {
        const struct seg *g = &sl->seg[sl->next++];
        pthread_mutex_unlock(&w->mu);
        memcpy(g->dst, g->src, g->n);
        pthread_mutex_lock(&w->mu);
        if (++sl->done == sl->nseg) {
            sl->st = SLOT_QUEUED;
            pthread_cond_broadcast(&w->cv);
        }
    }
}

/* A STAGING slot with work for the staging thread (planning or chunks), else NULL. */
static struct slot *stage_work(struct ckpt_writer *w)
{
    for (int i = 0; i < CKPT_SLOTS; i++) {
        struct slot *sl = &w->slot[i];
        if (sl->st == SLOT_STAGING && (!sl->planned || sl->next < sl->nseg))
            return sl;
    }
    return NULL;
}

static struct slot *find_slot(struct ckpt_writer *w, enum slot_state st)
{
    for (int i = 0; i < CKPT_SLOTS; i++)
        if (w->slot[i].st == st)
            return &w->slot[i];
    return NULL;
}

/* The oldest saved snapshot if it is ready to write, else NULL. */
static struct slot *next_write(struct ckpt_writer *w)
{
    struct slot *first = NULL;

    for (int i = 0; i < CKPT_SLOTS; i++)
        if (w->slot[i].st != SLOT_FREE && (!first || w->slot[i].seq < first->seq))
            first = &w->slot[i];
    return first && first->st == SLOT_QUEUED ? first : NULL;
}

static int write_one(const struct ckpt_writer *w, const struct ckpt_snapshot *s)
{
    int64_t t0 = dist_now_ms();
    int rc = ckpt_write(w->root, w->job, w->keep, s);

    if (!rc)
        dist_log("Saved checkpoint %s/%s/step-%" PRId64 " in %" PRId64 " ms", w->root, w->job,
                 s->meta.step, dist_now_ms() - t0);
    return rc;
}

static void *stager_main(void *arg)
{
    struct ckpt_writer *w = arg;
    struct slot *sl;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && (sl = stage_work(w)) == NULL)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit)
            break;
        if (!sl->planned) {
            pthread_mutex_unlock(&w->mu);
            (void)plan(sl, true);
            pthread_mutex_lock(&w->mu);
            sl->planned = true;
            if (sl->nseg == 0)
                sl->st = SLOT_QUEUED;
            pthread_cond_broadcast(&w->cv);
        }
        copy_chunks(w, sl);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void *writer_main(void *arg)
{
    struct ckpt_writer *w = arg;
    struct slot *sl;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && (sl = next_write(w)) == NULL)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit)
            break;
        sl->st = SLOT_WRITING;
        pthread_mutex_unlock(&w->mu);
        int rc = write_one(w, sl->snap);
        ckpt_snapshot_free(sl->snap);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->result)
            w->result = rc;
        sl->snap = NULL;
        sl->planned = false;
        sl->st = SLOT_FREE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void stop_threads(struct ckpt_writer *w, bool writer_too)
{
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->stager, NULL);
    if (writer_too)
        pthread_join(w->writer, NULL);
}

struct ckpt_writer *ckpt_writer_new(const char *root, const char *job, int keep)
{
    struct ckpt_writer *w = xcalloc(1, sizeof(*w));

    w->root = xstrdup(root);
    w->job = xstrdup(job);
    w->keep = keep;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->stager, NULL, stager_main, w) != 0) {
        dist_log("Could not start the checkpoint threads; checkpoints are written in the "
                 "foreground");
        return w;
    }
    if (pthread_create(&w->writer, NULL, writer_main, w) != 0) {
        dist_log("Could not start the checkpoint threads; checkpoints are written in the "
                 "foreground");
        stop_threads(w, false);
        return w;
    }
    w->threads = true;
    return w;
}

int ckpt_writer_reserve(struct ckpt_writer *w, size_t bytes)
{
    for (int i = 0; i < CKPT_SLOTS; i++) {
        struct slot *sl = &w->slot[i];
        pthread_mutex_lock(&w->mu);
        bool mine = sl->st == SLOT_FREE; /* a busy one is grown by the staging thread */
        pthread_mutex_unlock(&w->mu);
        if (!mine || sl->cap >= bytes)
            continue;
        free(sl->buf);
        sl->cap = bytes;
        if ((sl->buf = buf_new(&sl->cap)) == NULL) {
            sl->cap = 0;
            dist_log("No memory for two %zu-byte checkpoint buffers", bytes);
            return DIST_EUSAGE;
        }
    }
    return 0;
}

int ckpt_writer_save(struct ckpt_writer *w, struct ckpt_snapshot *s)
{
    struct slot *sl;
    int rc;

    if (!w->threads) {
        rc = write_one(w, s);
        ckpt_snapshot_free(s);
        return rc;
    }
    pthread_mutex_lock(&w->mu);
    while ((sl = find_slot(w, SLOT_FREE)) == NULL)
        pthread_cond_wait(&w->cv, &w->mu);
    sl->snap = s;
    sl->seq = ++w->seq;
    if (borrowed_bytes(s) == 0) {
        sl->st = SLOT_QUEUED;
    } else {
        /* planned here when the buffer is big enough (a few pointers per 4 MiB), so that the
         * fence can copy even before the staging thread first runs */
        sl->planned = plan(sl, false);
        sl->st = SLOT_STAGING;
    }
    rc = w->result;
    w->result = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void ckpt_writer_fence(struct ckpt_writer *w)
{
    struct slot *sl;

    pthread_mutex_lock(&w->mu);
    while ((sl = find_slot(w, SLOT_STAGING)) != NULL) {
        if (sl->planned && sl->next < sl->nseg)
            copy_chunks(w, sl);
        else
            pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

int ckpt_writer_wait(struct ckpt_writer *w)
{
    int rc;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        bool busy = false;
        for (int i = 0; i < CKPT_SLOTS; i++)
            busy = busy || w->slot[i].st != SLOT_FREE;
        if (!busy)
            break;
        pthread_cond_wait(&w->cv, &w->mu);
    }
    rc = w->result;
    w->result = 0;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void ckpt_writer_free(struct ckpt_writer *w)
{
    if (!w)
        return;
    if (ckpt_writer_wait(w) != 0)
        dist_log("The last checkpoint write failed (see above)");
    if (w->threads)
        stop_threads(w, true);
    for (int i = 0; i < CKPT_SLOTS; i++) {
        free(w->slot[i].buf);
        free(w->slot[i].seg);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->root);
    free(w->job);
    free(w);
}
