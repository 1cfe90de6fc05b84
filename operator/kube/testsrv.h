/*
 * testsrv.h - a tiny HTTP/1.1 server on 127.0.0.1 for the client's unit tests (test-only).
 *
 * Binds an ephemeral port, serves each connection on its own thread with keep-alive, parses the
 * request line, headers and a Content-Length body, and calls the handler, which answers with
 * testsrv_respond() or streams with testsrv_chunk*(). Enough HTTP for curl, nothing more.
 */
#ifndef GANTRY_TESTSRV_H
#define GANTRY_TESTSRV_H

#include <stddef.h>

struct testsrv;
struct testsrv_conn;

struct testsrv_req {
    char method[16];
    char path[4096];     /* path and query as sent */
    char headers[16384]; /* raw header lines */
    char *body;          /* NUL-terminated */
    size_t body_len;
};

/* Return 0 to keep the connection, -1 to close it after the handler. */
typedef int (*testsrv_fn)(void *ud, struct testsrv_conn *c, const struct testsrv_req *req);

struct testsrv *testsrv_start(testsrv_fn fn, void *ud);
int testsrv_port(const struct testsrv *s);
long testsrv_connections(const struct testsrv *s);
/* Connections accepted and not yet ended (the client hung up or the handler closed it). */
long testsrv_open_connections(const struct testsrv *s);
long testsrv_requests(const struct testsrv *s);
void testsrv_stop(struct testsrv *s);

/* extra_headers: "Name: v\r\n..." or NULL. */
void testsrv_respond(struct testsrv_conn *c, int code, const char *extra_headers, const char *body);
void testsrv_chunked_start(struct testsrv_conn *c, int code);
/* 0, or -1 when the client went away. */
int testsrv_chunk(struct testsrv_conn *c, const char *data);
void testsrv_chunked_end(struct testsrv_conn *c);
/* Waits up to ms for the client to close the connection: 0 closed, -1 still open. */
int testsrv_wait_closed(struct testsrv_conn *c, int ms);
/* Value of a request header (case-insensitive name) into out; 0 found, -1 not. */
int testsrv_header(const struct testsrv_req *r, const char *name, char *out, size_t outlen);

#endif /* GANTRY_TESTSRV_H */
