/*
 * store.h - the rendezvous key-value store (like torch.distributed's TCPStore).
 *
 * Rank 0 runs a store_server on MASTER_PORT (one background thread, poll() over every
 * connection); every rank, rank 0 included, talks to it through a struct store client. Operations:
 * set, get, wait (block until a key exists), add (atomic counter), barrier.
 *
 * Security: every connection is authenticated by the job's token with an HMAC-SHA256
 * challenge-response in both directions; the token never crosses the wire. After that the client
 * says hello (rank, world size, config hash); the server refuses a world size or config hash that
 * differs from rank 0's and a rank that is already connected. Traffic is not encrypted: values in
 * the store are not secrets.
 *
 * Wire format: frames of a 4-byte big-endian length, a 1-byte opcode, then the payload; strings
 * are 2-byte big-endian length + bytes; values are 4-byte length + bytes. Limits: STORE_MAX_KEY,
 * STORE_MAX_VALUE. Not done: persistence, reconnects (a lost connection is fatal, the gang
 * restarts), deletes.
 */
#ifndef GANTRY_STORE_H
#define GANTRY_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STORE_MAX_KEY 256
#define STORE_MAX_VALUE (1 << 20)
#define STORE_MAX_KEYS 65536
#define STORE_HASH_MAX 128
#define STORE_MAC_LEN 32

/* ---- server (rank 0) ------------------------------------------------------------------------ */

struct store_server;

struct store_server_opts {
    const char *bind_addr;   /* NULL: all interfaces ("::" then "0.0.0.0"); tests use 127.0.0.1 */
    int port;                /* 0: an ephemeral port, see store_server_port() */
    const char *token;       /* borrowed, copied; must be non-empty */
    int world_size;          /* every client must say the same */
    int nproc_per_node;      /* every client must say the same (NPROC_PER_NODE); 0 means 1 */
    const char *config_hash; /* every client must say the same; may be "" */
    int auth_timeout_ms;     /* a connection must answer the challenge within this (default
                              * 10000); when the connection table is full, the oldest one that
                              * has not yet makes room for a new one */
};

/* Binds, listens and starts the server thread. DIST_EIO (with a message: e.g. port in use) or
 * DIST_EUSAGE. *out is new: free with store_server_free(). */
int store_server_start(const struct store_server_opts *o, struct store_server **out)
    __attribute__((warn_unused_result));
/* The port actually bound (useful with port 0). */
int store_server_port(const struct store_server *s);
/* Stops the thread and closes every connection; clients see EOF. NULL is a no-op. */
void store_server_free(struct store_server *s);

/* ---- client (every rank) ------------------------------------------------------------------ */

struct store;

struct store_opts {
    const char *host;        /* MASTER_ADDR: a name or address; DNS failures are retried */
    int port;
    const char *token;       /* borrowed, copied */
    int rank, world_size;
    int nproc_per_node;      /* NPROC_PER_NODE: ranks per node; 0 means 1 */
    const char *config_hash; /* may be NULL ("") */
    int connect_timeout_ms;  /* keep retrying refused connections / DNS this long (default 600 s) */
    int op_timeout_ms;       /* one request's round trip (default 60 s) */
};

/* Connects with jittered exponential backoff (100 ms doubling to 5 s) until connect_timeout_ms,
 * then authenticates and says hello. Errors: DIST_ETIMEDOUT (nobody listened in time),
 * DIST_EAUTH (token mismatch, either side), DIST_ECONFIG (world size / ranks per node / config
 * hash / duplicate rank: the server's reason is printed here, and kept under the key
 * "rdzv/refused/<rank>" for the ranks that wait). *out is new: free with store_free(). */
int store_connect(const struct store_opts *o, struct store **out)
    __attribute__((warn_unused_result));
void store_free(struct store *st);

int store_rank(const struct store *st);
int store_world_size(const struct store *st);
/* The local address of the connection to the store (the interface that reaches rank 0), as a
 * numeric string: ranks advertise it to peers for collective connections. Borrowed. */
const char *store_local_addr(const struct store *st);
/* HMAC-SHA256 of data under the job token (for authenticating other connections, e.g. coll). */
void store_hmac(const struct store *st, const void *data, size_t len,
                unsigned char mac[STORE_MAC_LEN]);

int store_set(struct store *st, const char *key, const void *val, size_t len)
    __attribute__((warn_unused_result));
/* Value of key if it exists: *val is new (free()), NUL-terminated for convenience (not counted in
 * *len). DIST_ENOENT if it does not exist. */
int store_get(struct store *st, const char *key, void **val, size_t *len)
    __attribute__((warn_unused_result));
/* Like store_get, but waits up to timeout_ms (< 0: op_timeout_ms) for the key to be set.
 * DIST_ETIMEDOUT when it is not. */
int store_wait(struct store *st, const char *key, int timeout_ms, void **val, size_t *len)
    __attribute__((warn_unused_result));
/* store_wait for a text value, copied into out (cut to cap - 1 bytes). */
int store_wait_str(struct store *st, const char *key, int timeout_ms, char *out, size_t cap)
    __attribute__((warn_unused_result));
/* Atomically adds delta to the integer counter at key (missing: 0); *result gets the new value. */
int store_add(struct store *st, const char *key, int64_t delta, int64_t *result)
    __attribute__((warn_unused_result));
/* Blocks until all world_size ranks have called store_barrier the same number of times, or
 * timeout_ms (< 0: op_timeout_ms). Every rank must call barriers in the same order. */
int store_barrier(struct store *st, int timeout_ms) __attribute__((warn_unused_result));

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_STORE_H */
