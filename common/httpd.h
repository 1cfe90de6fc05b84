/*
 * httpd.h - one helper shared by the small libmicrohttpd servers (the worker's /metrics and
 * /progress, the operator's /healthz /readyz /metrics).
 *
 * httpd_reply() queues a response whose body is moved out of a struct buf (see buf_take), with
 * Content-Type and Cache-Control: no-store, plus "Allow: GET, HEAD" on a 405 (httpd_reply_allow:
 * the methods given). It does not parse requests or route paths: each server keeps its own
 * handler.
 */
#ifndef GANTRY_HTTPD_H
#define GANTRY_HTTPD_H

#include <microhttpd.h>

#include "common/buf.h"

/* Queues status + body (emptied: ownership of its bytes passes to libmicrohttpd). */
enum MHD_Result httpd_reply(struct MHD_Connection *conn, unsigned status, const char *type,
                            struct buf *body);
/* The same, with allow as the Allow header of a 405. */
enum MHD_Result httpd_reply_allow(struct MHD_Connection *conn, unsigned status, const char *type,
                                  struct buf *body, const char *allow);

#endif /* GANTRY_HTTPD_H */
