/*
 * kube.h - requests to the Kubernetes API over one persistent libcurl handle.
 *
 * A struct kube_client holds its own copy of a kube_config, one curl easy handle for requests
 * (keep-alive; HTTP/1.1, or HTTP/2 over TLS with opts.http2) and one for streams (watch), a token
 * bucket limiter, and the Status of the last failed call. It is NOT thread-safe: give each thread
 * its own client (kube_client_new() again from the same config); the only call allowed from
 * another thread is kube_client_cancel().
 *
 * Paths are API paths built with kube_path(): "/api/v1/namespaces/ml/pods/a",
 * "/apis/gantry.dev/v1alpha1/namespaces/ml/trainingjobs/spam/status". Objects are Jansson values:
 * arguments are borrowed, *out results are new references the caller json_decref()s.
 *
 * Every call returns 0 or a negative OP_E* (kube_err.h); on an API error the Status object is in
 * kube_last_status() (code, reason, message). Retries: 429 for every verb (the server did not
 * run the request); 5xx and transport errors only for GET, PUT and DELETE (idempotent);
 * Retry-After (delay-seconds or HTTP-date, capped at 30 s) is honoured, otherwise jittered
 * exponential backoff (200 ms doubling to 10 s); at most opts.max_retries.
 * A 401 with a token file or exec plugin refreshes the credential once and repeats the call.
 * Response bodies are bounded by KUBE_MAX_BODY (over it: OP_ETOOBIG).
 */
#ifndef GANTRY_KUBE_H
#define GANTRY_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/kube_err.h"

#define KUBE_MAX_BODY (64u << 20) /* one response (a list page of 500 large objects fits) */
#define KUBE_MAX_PATH 1024

struct kube_client;

struct kube_client_opts {
    double qps;             /* token bucket rate; 0: default 50 */
    int burst;              /* bucket size; 0: default 100 */
    long timeout_ms;        /* deadline of each attempt (connect + transfer); 0: 30000 */
    int max_retries;        /* 0: default 5; -1: none */
    const char *user_agent; /* NULL: "gantry/<version>" */
    /* HTTP/2 over TLS (where libcurl has nghttp2) instead of HTTP/1.1. A client runs one request
     * and one stream at a time, each on its own connection, so HTTP/2 multiplexes nothing here
     * and costs ~90 KiB per connection (nghttp2 session, libcurl's 32 KiB frame buffer). */
    bool http2;
};

/* The API's Status for the last failed call (code 0 when the failure was not an API status). */
struct kube_status {
    long code;       /* HTTP status: 404, 409, 410, ... */
    char reason[64]; /* NotFound, Conflict, AlreadyExists, Expired, Gone, Forbidden, ... */
    char message[1024];
};

/* New client from a config (copied). NULL opts: defaults. Never NULL (OOM aborts). */
struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_opts *opts);
void kube_client_free(struct kube_client *kc);
/* Closes the kept-alive connection of kc's requests (not its stream); the next request opens a
 * new one. For a client that goes idle for long, e.g. an informer between its list and the
 * next relist: an idle TLS connection holds 30-100 KiB. Not thread-safe with a
 * request running on kc. */
void kube_client_close_idle(struct kube_client *kc);
/* Makes a running request, stream or backoff sleep on kc return OP_ECANCELED within about a
 * second, and every later call too until kube_client_reset_cancel(); thread-safe. */
void kube_client_cancel(struct kube_client *kc);
/* Clears a cancel so the client can be used again. */
void kube_client_reset_cancel(struct kube_client *kc);
/* Borrowed; valid until the next call on kc. */
const struct kube_status *kube_last_status(const struct kube_client *kc);
/* The namespace from the config (context or in-cluster), "default" when none. Borrowed. */
const char *kube_client_namespace(const struct kube_client *kc);
/* Number of TCP/TLS connections opened so far (keep-alive check, benchmarks). */
long kube_client_connects(const struct kube_client *kc);
/* HTTP version of the last request: 2 (HTTP/2), 1 (HTTP/1.x) or 0 (none yet). */
int kube_client_http_version(const struct kube_client *kc);

/*
 * Builds "/api/v1/..." (api "v1") or "/apis/<group>/<version>/..." (api "apps/v1"); ns, name and
 * subresource may be NULL. Names are checked (no '/', '?', '#', '%', whitespace).
 */
int kube_path(char *out, size_t outlen, const char *api, const char *resource, const char *ns,
              const char *name, const char *subresource) __attribute__((warn_unused_result));

/* GET one object. */
int kube_get(struct kube_client *kc, const char *path, json_t **out)
    __attribute__((warn_unused_result));

struct kube_list_opts {
    const char *label_selector; /* NULL: everything */
    const char *field_selector;
    long limit;       /* page size; 0: 500 */
    int max_restarts; /* restarts after an expired continue token; 0: 3 */
};
/*
 * Lists a collection page by page (limit/continue) into *items (new array) and the list's
 * resourceVersion into *rv (new string, free()) for a following watch. An expired continue
 * token (410) restarts the list from the beginning.
 */
int kube_list(struct kube_client *kc, const char *path, const struct kube_list_opts *opts,
              json_t **items, char **rv) __attribute__((warn_unused_result));
/*
 * The same list delivered as it is read, so memory is bounded by one page's text: each page is
 * walked and its items parsed one at a time (never the whole page as one tree) and handed to fn
 * in order, in batches (borrowed; released when fn returns). After an expired continue token
 * (410) the list starts over from the beginning: fn first gets an empty batch with restarted
 * true, as what earlier pages delivered may since have changed or gone. A nonzero return from
 * fn ends the list with that value. *rv (may be NULL) as for kube_list(), set only on success.
 */
typedef int (*kube_page_fn)(void *ud, json_t *items, bool restarted);
int kube_list_pages(struct kube_client *kc, const char *path, const struct kube_list_opts *opts,
                    kube_page_fn fn, void *ud, char **rv) __attribute__((warn_unused_result));

/* POST obj to a collection path. out may be NULL. OP_EEXIST when the name is taken. */
int kube_create(struct kube_client *kc, const char *path, json_t *obj, json_t **out)
    __attribute__((warn_unused_result));
/*
 * PUT obj (with metadata.resourceVersion) to an object path; a stale resourceVersion gives
 * OP_ECONFLICT: read again and retry. For the status subresource pass a ".../status" path.
 */
int kube_replace(struct kube_client *kc, const char *path, json_t *obj, json_t **out)
    __attribute__((warn_unused_result));

enum kube_patch_type {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902), patch is an array */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
    KUBE_PATCH_APPLY,     /* application/apply-patch+yaml: server-side apply (JSON is YAML) */
};
struct kube_patch_opts {
    const char *field_manager; /* required for KUBE_PATCH_APPLY */
    bool force;                /* apply: take fields owned by other managers */
};
/* PATCH an object path. A server-side apply conflict with another manager gives OP_ECONFLICT. */
int kube_patch(struct kube_client *kc, const char *path, enum kube_patch_type type, json_t *patch,
               const struct kube_patch_opts *opts, json_t **out)
    __attribute__((warn_unused_result));

struct kube_delete_opts {
    const char *propagation_policy; /* "Foreground", "Background", "Orphan" or NULL */
    const char *precondition_uid;   /* delete only this incarnation; else OP_ECONFLICT */
    const char *precondition_rv;    /* delete only at this resourceVersion; else OP_ECONFLICT */
    long grace_period_seconds;      /* > 0: seconds; 0 or -1: the server's default */
    bool grace_now;                 /* send gracePeriodSeconds: 0 (immediate; force for pods) */
};
/* DELETE an object path. NULL opts: defaults. out (may be NULL) gets the object or Status. */
int kube_delete(struct kube_client *kc, const char *path, const struct kube_delete_opts *opts,
                json_t **out) __attribute__((warn_unused_result));

/*
 * One request, no JSON handling: method, path with query, optional body. 2xx: 0 and the body in
 * resp (a buf the caller initialised; its limit still applies, at most KUBE_MAX_BODY). Non-2xx:
 * the mapped OP_E* and kube_last_status() filled from the Status body.
 */
int kube_request(struct kube_client *kc, const char *method, const char *path,
                 const char *content_type, const char *body, size_t body_len, struct buf *resp)
    __attribute__((warn_unused_result));

/*
 * A long-lived streaming GET (watch) on the client's second handle: data goes to on_data as it
 * arrives (return nonzero to stop: OP_ECANCELED). dead_after_s: the stream counts as dead when
 * fewer than 1 byte/s arrives for that long (a silent half-open connection). max_s: hard limit.
 * Returns 0 on a normal end of stream, else an OP_E*; *http_code gets the HTTP status, and a
 * non-2xx body is parsed into kube_last_status().
 */
typedef int (*kube_data_fn)(void *ud, const char *data, size_t len);
int kube_stream(struct kube_client *kc, const char *path, kube_data_fn on_data, void *ud,
                long dead_after_s, long max_s, long *http_code) __attribute__((warn_unused_result));

/*
 * Parses a Status object (or any error body) into st; code is the HTTP code seen. Returns
 * op_from_http(code, reason). Tolerates bodies that are not JSON (message gets a prefix).
 */
int kube_status_parse(const char *body, size_t len, long code, struct kube_status *st);

/* "ns/name" (or "name" for cluster-scoped) of an object into out; OP_EINVAL when no name. */
int kube_object_key(const json_t *obj, char *out, size_t outlen)
    __attribute__((warn_unused_result));
/* metadata.resourceVersion, or NULL. Borrowed from obj. */
const char *kube_object_rv(const json_t *obj);

#endif /* GANTRY_KUBE_H */
