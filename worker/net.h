/*
 * net.h - small TCP helpers shared by the store and the tcp collectives: listen, connect with a
 * timeout, and read/write exactly n bytes with a deadline on non-blocking sockets.
 *
 * All functions return 0 or a negative DIST_E* code (dist.h) and do not print: the caller knows
 * which peer it was talking to and says so. Sockets are created non-blocking and close-on-exec.
 */
#ifndef GANTRY_NET_H
#define GANTRY_NET_H

#include <stddef.h>
#include <stdint.h>

#define NET_MAX_ADDR 64 /* numeric address text, IPv6 included */

/* Listens on addr:port (addr NULL: dual-stack "::", falling back to 0.0.0.0; port 0: ephemeral).
 * *fd gets the socket, *bound_port the port. errno is kept for the caller's message. */
int net_listen(const char *addr, int port, int *fd, int *bound_port);

/* Resolves host and tries each address once, each connect bounded by timeout_ms.
 * DIST_ENOENT: name did not resolve (retryable by the caller); DIST_EIO: refused/unreachable.
 * why (may be NULL) gets a short reason text. */
int net_connect(const char *host, int port, int timeout_ms, int *fd, char *why, size_t why_len);

/* Accepts one connection within timeout_ms (< 0: forever). */
int net_accept(int lfd, int timeout_ms, int *fd);

/* Exactly len bytes, or DIST_ETIMEDOUT when timeout_ms pass with no progress at all (an idle
 * timeout, not a total deadline: slow but moving transfers are fine), DIST_EPEER on EOF/reset,
 * DIST_EIO otherwise. */
int net_write_all(int fd, const void *buf, size_t len, int timeout_ms);
int net_read_all(int fd, void *buf, size_t len, int timeout_ms);

/* Numeric local address of a connected socket (IPv4-mapped addresses shown as IPv4). */
int net_local_addr(int fd, char *out, size_t out_len);

void net_set_nodelay(int fd);
void net_set_bufsize(int fd, int bytes);

/* Big-endian helpers for the wire formats. */
void net_put_u16(unsigned char *p, uint16_t v);
void net_put_u32(unsigned char *p, uint32_t v);
void net_put_u64(unsigned char *p, uint64_t v);
uint16_t net_get_u16(const unsigned char *p);
uint32_t net_get_u32(const unsigned char *p);
uint64_t net_get_u64(const unsigned char *p);

#endif /* GANTRY_NET_H */
