/*
 * net.c - TCP helpers for the store and the tcp collectives (see net.h).
 */
#include "worker/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "worker/dist.h"

void net_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void net_set_bufsize(int fd, int bytes)
{
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

static int listen_on(int family, const char *addr, int port, int *fd)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int s, one = 1, zero = 0;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, addr, &a->sin6_addr) != 1)
            return DIST_EUSAGE;
        sl = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, addr, &a->sin_addr) != 1)
            return DIST_EUSAGE;
        sl = sizeof(*a);
    }
    s = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return DIST_EIO;
    (void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6)
        (void)setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(s, (struct sockaddr *)&ss, sl) != 0 || listen(s, SOMAXCONN) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return DIST_EIO;
    }
    *fd = s;
    return 0;
}

int net_listen(const char *addr, int port, int *fd, int *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int rc;

    if (addr)
        rc = listen_on(strchr(addr, ':') ? AF_INET6 : AF_INET, addr, port, fd);
    else if ((rc = listen_on(AF_INET6, "::", port, fd)) != 0 && errno != EADDRINUSE)
        rc = listen_on(AF_INET, "0.0.0.0", port, fd);
    if (rc)
        return rc;
    if (getsockname(*fd, (struct sockaddr *)&ss, &sl) != 0) {
        close(*fd);
        return DIST_EIO;
    }
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static int connect_one(const struct addrinfo *ai, int timeout_ms, int *fd)
{
    int s, err = 0;
    socklen_t el = sizeof(err);
    struct pollfd p;

    s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -errno;
    if (connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            err = errno;
            goto fail;
        }
        p.fd = s;
        p.events = POLLOUT;
        int n = poll(&p, 1, timeout_ms);
        if (n == 0) {
            err = ETIMEDOUT;
            goto fail;
        }
        if (n < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0) {
            err = errno;
            goto fail;
        }
        if (err)
            goto fail;
    }
    net_set_nodelay(s);
    *fd = s;
    return 0;
fail:
    close(s);
    return -err;
}

int net_connect(const char *host, int port, int timeout_ms, int *fd, char *why, size_t why_len)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int g, e = ECONNREFUSED;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%d", port);
    g = getaddrinfo(host, portstr, &hints, &res);
    if (g != 0) {
        if (why)
            snprintf(why, why_len, "cannot resolve %s: %s", host, gai_strerror(g));
        return DIST_ENOENT;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int r = connect_one(ai, timeout_ms, fd);
        if (r == 0) {
            freeaddrinfo(res);
            return 0;
        }
        e = -r;
    }
    freeaddrinfo(res);
    if (why)
        snprintf(why, why_len, "connect to %s:%d: %s", host, port, strerror(e));
    return DIST_EIO;
}

int net_accept(int lfd, int timeout_ms, int *fd)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int n, s;

    for (;;) {
        n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return DIST_EIO;
        if (n == 0)
            return DIST_ETIMEDOUT;
        s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s >= 0)
            break;
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
            return DIST_EIO;
    }
    net_set_nodelay(s);
    *fd = s;
    return 0;
}

static int wait_fd(int fd, short ev, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = ev};
    int n;

    do
        n = poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return DIST_EIO;
    return n == 0 ? DIST_ETIMEDOUT : 0;
}

int net_write_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    int rc;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if ((rc = wait_fd(fd, POLLOUT, timeout_ms)) != 0)
                return rc;
            continue;
        }
        return (errno == EPIPE || errno == ECONNRESET) ? DIST_EPEER : DIST_EIO;
    }
    return 0;
}

int net_read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    int rc;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return DIST_EPEER;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((rc = wait_fd(fd, POLLIN, timeout_ms)) != 0)
                return rc;
            continue;
        }
        return errno == ECONNRESET ? DIST_EPEER : DIST_EIO;
    }
    return 0;
}

int net_local_addr(int fd, char *out, size_t out_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return DIST_EIO;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        return inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)out_len) ? 0 : DIST_EIO;
    }
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
        return inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], out, (socklen_t)out_len) ? 0
                                                                                       : DIST_EIO;
    return inet_ntop(AF_INET6, &a6->sin6_addr, out, (socklen_t)out_len) ? 0 : DIST_EIO;
}

void net_put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

void net_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

void net_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (56 - 8 * i));
}

uint16_t net_get_u16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

uint32_t net_get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

uint64_t net_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}
