/*
 * dist.c - error codes, per-rank logging, the launch environment and rendezvous agreement.
 */
#include "worker/dist.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "worker/store.h"

/* ---- errors ------------------------------------------------------------------------------ */

const char *dist_strerror(int err)
{
    switch (err) {
    case DIST_OK: return "ok";
    case DIST_EIO: return "I/O error";
    case DIST_ETIMEDOUT: return "timed out";
    case DIST_EPEER: return "peer closed the connection";
    case DIST_EPROTO: return "protocol error";
    case DIST_EAUTH: return "authentication failed (rendezvous token mismatch)";
    case DIST_ECONFIG: return "configuration mismatch between ranks";
    case DIST_EUSAGE: return "bad argument or environment";
    case DIST_ECORRUPT: return "corrupt checkpoint";
    case DIST_ENOENT: return "not found";
    case DIST_EUNSUPPORTED: return "not supported by this build";
    default: return "unknown error";
    }
}

bool dist_err_permanent(int err)
{
    return err == DIST_EAUTH || err == DIST_ECONFIG || err == DIST_EUSAGE ||
           err == DIST_EUNSUPPORTED;
}

int dist_exit_code(int err)
{
    switch (err) {
    case DIST_OK: return 0;
    case DIST_EAUTH: return DIST_EXIT_NOPERM;
    case DIST_ECONFIG: return DIST_EXIT_CONFIG;
    case DIST_EUSAGE: return DIST_EXIT_USAGE;
    case DIST_EUNSUPPORTED: return DIST_EXIT_UNAVAIL;
    default: return DIST_EXIT_RETRY;
    }
}

/* ---- logging ----------------------------------------------------------------------------- */

static int log_rank = -1; /* the logger is the only global (STYLE.md §4) */

void dist_log_set_rank(int rank)
{
    log_rank = rank;
}

void dist_vlog_line(const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    int n = snprintf(line, sizeof(line), "%s", prefix);

    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write(2) per line: concurrent ranks on one terminal do not interleave mid-line. */
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}

void dist_log(const char *fmt, ...)
{
    char prefix[128], host[64] = "?";
    va_list ap;

    (void)gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = 0;
    if (log_rank >= 0)
        snprintf(prefix, sizeof(prefix), "gantry[rank %d@%s] ", log_rank, host);
    else
        snprintf(prefix, sizeof(prefix), "gantry[rank ?@%s] ", host);
    va_start(ap, fmt);
    dist_vlog_line(prefix, fmt, ap);
    va_end(ap);
}

int64_t dist_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- environment ------------------------------------------------------------------------- */

/* Integer env var in [lo, hi]; def when unset. */
static int env_int(const char *name, int def, int lo, int hi, int *out)
{
    const char *v = getenv(name);
    char *end;
    long x;

    if (!v || !*v) {
        *out = def;
        return 0;
    }
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        dist_log("%s='%s' is not an integer in %d..%d; fix the pod's environment", name, v, lo,
                 hi);
        return DIST_EUSAGE;
    }
    *out = (int)x;
    return 0;
}

static int env_str(const char *name, const char *def, char *out, size_t cap)
{
    const char *v = getenv(name);

    if (!v || !*v)
        v = def;
    if (strlen(v) >= cap) {
        dist_log("%s is longer than %zu bytes", name, cap - 1);
        return DIST_EUSAGE;
    }
    snprintf(out, cap, "%s", v);
    return 0;
}

int dist_env_load(struct dist_env *e)
{
    int rc;

    memset(e, 0, sizeof(*e));
    if ((rc = env_str("MASTER_ADDR", "127.0.0.1", e->master_addr, sizeof(e->master_addr))) ||
        (rc = env_int("MASTER_PORT", 29500, 1, 65535, &e->master_port)) ||
        (rc = env_int("WORLD_SIZE", 1, 1, 1 << 20, &e->world_size)) ||
        (rc = env_int("RANK", 0, 0, INT_MAX, &e->rank)) ||
        (rc = env_int("NODE_RANK", 0, 0, INT_MAX, &e->node_rank)) ||
        (rc = env_int("NPROC_PER_NODE", 1, 1, 1 << 16, &e->nproc_per_node)) ||
        (rc = env_int("LOCAL_RANK", e->rank % e->nproc_per_node, 0, 1 << 16, &e->local_rank)) ||
        (rc = env_int("GANTRY_RESTART_COUNT", 0, 0, INT_MAX, &e->restart_count)) ||
        (rc = env_int("GANTRY_RDZV_TIMEOUT", 600, 1, 86400, &e->rdzv_timeout_s)) ||
        (rc = env_int("GANTRY_PEER_TIMEOUT", 60, 1, 86400, &e->peer_timeout_s)) ||
        (rc = env_str("GANTRY_RDZV_TOKEN", "", e->token, sizeof(e->token))))
        return rc;
    if (e->rank >= e->world_size) {
        dist_log("RANK=%d must be below WORLD_SIZE=%d", e->rank, e->world_size);
        return DIST_EUSAGE;
    }
    if (e->world_size > 1 && !e->token[0]) {
        dist_log("GANTRY_RDZV_TOKEN is not set: a job with WORLD_SIZE=%d needs the job's shared "
                 "token (the operator injects it from a Secret; gantry-run generates one)",
                 e->world_size);
        return DIST_EUSAGE;
    }
    return 0;
}

/* ---- rendezvous ---------------------------------------------------------------------------- */

struct dist_rdzv {
    struct store_server *server; /* rank 0 only */
    struct store *store;
    int rank, world;
    int join_timeout_ms;
    uint64_t resume_calls; /* dist_agree_resume calls so far: every rank makes the same ones */
};

struct store *dist_rdzv_store(struct dist_rdzv *rz)
{
    return rz->store;
}

/* After the join timed out: name the ranks that never said they were here, and why the store
 * refused any of them (a WORLD_SIZE, NPROC_PER_NODE or config that differs from rank 0's). */
static void report_missing(struct dist_rdzv *rz, int timeout_ms)
{
    char list[512] = "", key[64];
    size_t used = 0;
    int missing = 0, refused = 0;

    for (int r = 0; r < rz->world; r++) {
        void *v = NULL;
        size_t vl;
        snprintf(key, sizeof(key), "rdzv/joined/%d", r);
        int rc = store_get(rz->store, key, &v, &vl);
        free(v);
        if (rc == DIST_ENOENT) {
            missing++;
            if (used + 16 < sizeof(list))
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d",
                                         missing > 1 ? ", " : "", r);
            snprintf(key, sizeof(key), "rdzv/refused/%d", r);
            if (refused < 3 && store_get(rz->store, key, &v, &vl) == 0) {
                dist_log("Rank %d came and was refused: %s", r, (char *)v);
                refused++;
            }
            free(v);
        } else if (rc) {
            return;
        }
    }
    dist_log("Rendezvous timed out after %.1f s: %d of %d ranks never arrived (ranks %s%s). %s",
             timeout_ms / 1000.0, missing, rz->world, list,
             used + 16 >= sizeof(list) ? ", ..." : "",
             refused ? "Start every rank with the same settings"
                     : "Check that those workers started and can reach MASTER_ADDR, or raise "
                       "GANTRY_RDZV_TIMEOUT");
}

static int join(struct dist_rdzv *rz)
{
    char key[64];
    int64_t n;
    void *v = NULL;
    size_t vl;
    int rc;

    snprintf(key, sizeof(key), "rdzv/joined/%d", rz->rank);
    if ((rc = store_set(rz->store, key, "1", 1)) || (rc = store_add(rz->store, "rdzv/count", 1, &n)))
        return rc;
    if (n == rz->world && (rc = store_set(rz->store, "rdzv/all", "1", 1)))
        return rc;
    rc = store_wait(rz->store, "rdzv/all", rz->join_timeout_ms, &v, &vl);
    free(v);
    if (rc == DIST_ETIMEDOUT)
        report_missing(rz, rz->join_timeout_ms);
    return rc;
}

int dist_rendezvous(const struct dist_env *e, const char *config_hash,
                    const struct dist_rdzv_opts *opts, struct dist_rdzv **out)
{
    struct dist_rdzv *rz = xcalloc(1, sizeof(*rz));
    struct dist_rdzv_opts d = {0};
    int rc;

    if (opts)
        d = *opts;
    if (d.connect_timeout_ms <= 0)
        d.connect_timeout_ms = e->rdzv_timeout_s * 1000;
    if (d.join_timeout_ms <= 0)
        d.join_timeout_ms = e->rdzv_timeout_s * 1000;
    if (d.op_timeout_ms <= 0)
        d.op_timeout_ms = e->peer_timeout_s * 1000;
    rz->rank = e->rank;
    rz->world = e->world_size;
    rz->join_timeout_ms = d.join_timeout_ms;
    dist_log_set_rank(e->rank);
    if (e->rank == 0) {
        struct store_server_opts so = {.bind_addr = NULL, .port = e->master_port,
                                       .token = e->token, .world_size = e->world_size,
                                       .nproc_per_node = e->nproc_per_node,
                                       .config_hash = config_hash};
        /* Loopback-only jobs (gantry-run, tests) bind loopback, so nothing else can reach it. */
        if (strcmp(e->master_addr, "127.0.0.1") == 0 || strcmp(e->master_addr, "localhost") == 0)
            so.bind_addr = "127.0.0.1";
        if ((rc = store_server_start(&so, &rz->server)))
            goto out;
    }
    struct store_opts co = {.host = e->master_addr, .port = e->master_port, .token = e->token,
                            .rank = e->rank, .world_size = e->world_size,
                            .nproc_per_node = e->nproc_per_node, .config_hash = config_hash,
                            .connect_timeout_ms = d.connect_timeout_ms,
                            .op_timeout_ms = d.op_timeout_ms};
    if ((rc = store_connect(&co, &rz->store)) || (rc = join(rz)))
        goto out;
    *out = rz;
    rz = NULL;
out:
    if (rz) {
        store_free(rz->store);
        store_server_free(rz->server);
        free(rz);
    }
    return rc;
}

int dist_agree_blob(struct dist_rdzv *rz, const char *key, int root, void *blob, size_t len)
{
    void *v = NULL;
    size_t vl;
    int rc;

    if (rz->rank == root)
        return store_set(rz->store, key, blob, len);
    if ((rc = store_wait(rz->store, key, rz->join_timeout_ms, &v, &vl)))
        return rc;
    if (vl != len) {
        dist_log("Blob '%s' from rank %d has %zu bytes, expected %zu", key, root, vl, len);
        rc = DIST_EPROTO;
    } else {
        memcpy(blob, v, len);
    }
    free(v);
    return rc;
}

int dist_agree_resume(struct dist_rdzv *rz, int64_t my_step, enum dist_resume_policy policy,
                      int64_t *step)
{
    char key[64], val[32];
    void *v = NULL;
    size_t vl;
    int rc;

    /* keys of this call's own: the store never forgets one, and a second call must not read
     * the first's */
    uint64_t call = rz->resume_calls++;
    if (policy == DIST_RESUME_RANK0) {
        snprintf(key, sizeof(key), "rdzv/resume/%" PRIu64 "/rank0", call);
        snprintf(val, sizeof(val), "%" PRId64, my_step);
        if (rz->rank == 0)
            rc = store_set(rz->store, key, val, strlen(val));
        else
            rc = store_wait(rz->store, key, rz->join_timeout_ms, &v, &vl);
        if (!rc)
            *step = v ? strtoll(v, NULL, 10) : my_step;
        free(v);
        return rc;
    }
    snprintf(key, sizeof(key), "rdzv/resume/%" PRIu64 "/%d", call, rz->rank);
    snprintf(val, sizeof(val), "%" PRId64, my_step);
    if ((rc = store_set(rz->store, key, val, strlen(val))) ||
        (rc = store_barrier(rz->store, rz->join_timeout_ms)))
        return rc;
    int64_t best = INT64_MAX;
    for (int r = 0; r < rz->world; r++) {
        snprintf(key, sizeof(key), "rdzv/resume/%" PRIu64 "/%d", call, r);
        if ((rc = store_get(rz->store, key, &v, &vl)))
            return rc;
        int64_t s = strtoll(v, NULL, 10);
        free(v);
        v = NULL;
        if (s < best)
            best = s;
    }
    *step = best;
    return 0;
}

void dist_rdzv_free(struct dist_rdzv *rz)
{
    if (!rz)
        return;
    /* Rank 0 must not stop the store while another rank still has a request in flight. */
    if (rz->store && store_barrier(rz->store, rz->join_timeout_ms) != 0)
        dist_log("Final rendezvous barrier failed; shutting down anyway");
    store_free(rz->store);
    store_server_free(rz->server);
    free(rz);
}
