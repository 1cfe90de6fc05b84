/*
 * dist.h - the distributed runtime's shared pieces: error codes and their exit codes, per-rank
 * logging, the launch environment (DESIGN.md §3), and rendezvous agreement on top of the store.
 *
 * Error policy (DESIGN.md §4): library functions here, in store.h, coll.h and ckpt.h return 0 or a
 * negative DIST_E* code and print a message (rank, host, what failed, what to do) where the error
 * happens; the worker's main turns the code into an exit status with dist_exit_code(). Codes
 * 64-78 (sysexits) are permanent: the operator marks the job Failed instead of restarting it.
 * Everything else (a dead peer, a timeout, an I/O error) is retryable: the gang restarts from the
 * last checkpoint.
 *
 * Typical use in a worker (every rank runs the same code):
 *
 *     struct dist_env env;
 *     struct dist_rdzv *rz = NULL;
 *     if ((rc = dist_env_load(&env)) || (rc = dist_rendezvous(&env, cfg_hash, NULL, &rz)))
 *         exit(dist_exit_code(rc));
 *     dist_agree_resume(rz, newest_ckpt_step, DIST_RESUME_MIN, &step);
 *     coll_tcp_new(dist_rdzv_store(rz), NULL, &coll);   // or coll_nccl_new()
 *     ... train ...
 *     dist_rdzv_free(rz);   // a final barrier, then rank 0 stops the store
 */
#ifndef GANTRY_DIST_H
#define GANTRY_DIST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (negative). Keep dist_strerror() and dist_exit_code() in step. */
enum {
    DIST_OK = 0,
    DIST_EIO = -1,          /* socket or file error: retryable */
    DIST_ETIMEDOUT = -2,    /* a peer or the store did not answer in time: retryable */
    DIST_EPEER = -3,        /* a peer closed or reset its connection (it died): retryable */
    DIST_EPROTO = -4,       /* malformed message on the wire: retryable */
    DIST_EAUTH = -5,        /* rendezvous token mismatch: permanent (EX_NOPERM 77) */
    DIST_ECONFIG = -6,      /* world size, rank or config hash disagree: permanent (EX_CONFIG 78) */
    DIST_EUSAGE = -7,       /* bad argument or environment value: permanent (EX_USAGE 64) */
    DIST_ECORRUPT = -8,     /* a checkpoint failed its checks */
    DIST_ENOENT = -9,       /* nothing there (no checkpoint, no key) */
    DIST_EUNSUPPORTED = -10 /* feature not compiled in (e.g. NCCL without CUDA): permanent (69) */
};

/* Exit statuses the worker uses. 64-78 are permanent by the operator's contract. */
#define DIST_EXIT_RETRY 3   /* a retryable failure: the gang should restart */
#define DIST_EXIT_USAGE 64  /* EX_USAGE */
#define DIST_EXIT_DATAERR 65 /* EX_DATAERR: bad input data (or a checkpoint that is not a model) */
#define DIST_EXIT_NOINPUT 66 /* EX_NOINPUT: an input file or directory is missing */
#define DIST_EXIT_UNAVAIL 69 /* EX_UNAVAILABLE */
#define DIST_EXIT_CANTCREAT 73 /* EX_CANTCREAT: an output file cannot be created */
#define DIST_EXIT_IOERR 74  /* EX_IOERR */
#define DIST_EXIT_NOPERM 77 /* EX_NOPERM */
#define DIST_EXIT_CONFIG 78 /* EX_CONFIG */

const char *dist_strerror(int err);
/* Maps a DIST_E* code to an exit status: 0 for DIST_OK, 64-78 for permanent errors,
 * DIST_EXIT_RETRY for the rest. */
int dist_exit_code(int err);
/* True for errors that a restart cannot fix. */
bool dist_err_permanent(int err);

/* ---- logging ----------------------------------------------------------------------------- */

/* Sets the rank printed in every message (default -1: "rank ?"). Call once at startup. */
void dist_log_set_rank(int rank);
/* Prints "gantry[rank R@host] <msg>" to stderr as one write, so lines of ranks sharing a
 * terminal do not interleave. Thread-safe. */
void dist_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Writes prefix + the formatted text + "\n" to stderr in one write(2) (cut at 2 KiB). */
void dist_vlog_line(const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Monotonic clock in milliseconds. */
int64_t dist_now_ms(void);

/* ---- environment (DESIGN.md §3) ---------------------------------------------------------- */

#define DIST_MAX_HOST 256
#define DIST_MAX_TOKEN 512

struct dist_env {
    char master_addr[DIST_MAX_HOST]; /* MASTER_ADDR (default 127.0.0.1) */
    int master_port;                 /* MASTER_PORT (default 29500) */
    int world_size;                  /* WORLD_SIZE (default 1) */
    int rank;                        /* RANK (default 0) */
    int local_rank;                  /* LOCAL_RANK (default RANK % NPROC_PER_NODE) */
    int node_rank;                   /* NODE_RANK (default 0) */
    int nproc_per_node;              /* NPROC_PER_NODE (default 1) */
    int restart_count;               /* GANTRY_RESTART_COUNT (default 0) */
    char token[DIST_MAX_TOKEN];      /* GANTRY_RDZV_TOKEN; required when WORLD_SIZE > 1 */
    int rdzv_timeout_s;              /* GANTRY_RDZV_TIMEOUT (seconds, default 600) */
    int peer_timeout_s;              /* GANTRY_PEER_TIMEOUT (seconds, default 60) */
};

/* Fills *e from the environment, validating every value (0 <= RANK < WORLD_SIZE, port range,
 * token present when WORLD_SIZE > 1). DIST_EUSAGE with a message naming the variable on error.
 * Flags parsed afterwards may overwrite the fields. */
int dist_env_load(struct dist_env *e) __attribute__((warn_unused_result));

/* ---- rendezvous ---------------------------------------------------------------------------- */

struct store;
struct dist_rdzv; /* opaque: the store server (rank 0) and this rank's client connection */

struct dist_rdzv_opts {
    int connect_timeout_ms; /* how long ranks keep trying to reach rank 0 (default rdzv_timeout_s) */
    int join_timeout_ms;    /* how long to wait for every rank to join (default rdzv_timeout_s) */
    int op_timeout_ms;      /* one store round trip (default peer_timeout_s) */
};

/* Joins the job: rank 0 serves the store on master_port and every rank (rank 0 too) connects,
 * authenticates with the token, checks world size and config_hash against rank 0's, then waits
 * until all world_size ranks have joined. opts may be NULL (defaults from env).
 * Errors: DIST_EAUTH (wrong token), DIST_ECONFIG (world, rank or hash mismatch, duplicate rank),
 * DIST_ETIMEDOUT (rank 0 unreachable, or some rank never arrived: the message lists them).
 * *out is new: free with dist_rdzv_free(). config_hash: any string up to 128 bytes, e.g. hex
 * SHA-256 of the training config. */
int dist_rendezvous(const struct dist_env *e, const char *config_hash,
                    const struct dist_rdzv_opts *opts, struct dist_rdzv **out)
    __attribute__((warn_unused_result));

/* Borrowed: this rank's connection to the store, valid until dist_rdzv_free(). */
struct store *dist_rdzv_store(struct dist_rdzv *rz);

/* Root publishes `len` bytes under `key`; the other ranks wait for them and copy them into blob
 * (their len must match: DIST_EPROTO otherwise). Use for the NCCL unique id. */
int dist_agree_blob(struct dist_rdzv *rz, const char *key, int root, void *blob, size_t len)
    __attribute__((warn_unused_result));

enum dist_resume_policy {
    DIST_RESUME_MIN,   /* the minimum over ranks (a rank that sees an older checkpoint wins) */
    DIST_RESUME_RANK0  /* rank 0's choice */
};
/* Agrees on the step to resume from. my_step: this rank's newest valid checkpoint step, or -1 for
 * none. *step gets the agreed step (-1: start from scratch); every rank gets the same value. */
int dist_agree_resume(struct dist_rdzv *rz, int64_t my_step, enum dist_resume_policy policy,
                      int64_t *step) __attribute__((warn_unused_result));

/* A final barrier (so rank 0's store outlives every client's last request), then closes the
 * connection and, on rank 0, stops the server. NULL is a no-op. */
void dist_rdzv_free(struct dist_rdzv *rz);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_DIST_H */
