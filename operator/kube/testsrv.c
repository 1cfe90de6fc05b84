#include "operator/kube/testsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/xalloc.h"

#define MAX_CONNS 64

struct testsrv_conn {
    struct testsrv *s;
    int fd;
    pthread_t th;
};

struct testsrv {
    int lfd, port;
    testsrv_fn fn;
    void *ud;
    pthread_t th;
    atomic_long conns, reqs, open; /* open: connections whose client has not hung up */
    atomic_int stopping;
    pthread_mutex_t mu;
    struct testsrv_conn *c[MAX_CONNS];
    int nc;
};

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static const char *reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

void testsrv_respond(struct testsrv_conn *c, int code, const char *extra, const char *body)
{
    char head[1024];
    size_t n = body ? strlen(body) : 0;

    snprintf(head, sizeof(head),
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n%s\r\n",
             code, reason(code), n, extra ? extra : "");
    if (send_all(c->fd, head, strlen(head)) == 0 && n)
        send_all(c->fd, body, n);
}

void testsrv_chunked_start(struct testsrv_conn *c, int code)
{
    char head[256];
    snprintf(head, sizeof(head),
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
             "Transfer-Encoding: chunked\r\n\r\n",
             code, reason(code));
    send_all(c->fd, head, strlen(head));
}

int testsrv_chunk(struct testsrv_conn *c, const char *data)
{
    char head[32];
    size_t n = strlen(data);
    if (!n)
        return 0;
    snprintf(head, sizeof(head), "%zx\r\n", n);
    if (send_all(c->fd, head, strlen(head)) || send_all(c->fd, data, n) ||
        send_all(c->fd, "\r\n", 2))
        return -1;
    return 0;
}

void testsrv_chunked_end(struct testsrv_conn *c)
{
    send_all(c->fd, "0\r\n\r\n", 5);
}

int testsrv_header(const struct testsrv_req *r, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    const char *p = r->headers;

    while (p && *p) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1, *e;
            while (*v == ' ')
                v++;
            e = strstr(v, "\r\n");
            snprintf(out, outlen, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return 0;
        }
        p = strstr(p, "\r\n");
        if (p)
            p += 2;
    }
    return -1;
}

/* Reads one request; 0 ok, -1 closed. pending/plen carry bytes past the request. */
static int read_req(int fd, char *pending, size_t *plen, size_t cap, struct testsrv_req *r)
{
    char *end;
    size_t hlen, clen = 0;
    char v[64];

    for (;;) {
        pending[*plen] = 0;
        end = strstr(pending, "\r\n\r\n");
        if (end)
            break;
        if (*plen >= cap - 1)
            return -1;
        ssize_t n = recv(fd, pending + *plen, cap - 1 - *plen, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        *plen += (size_t)n;
    }
    hlen = (size_t)(end - pending) + 4;
    memset(r, 0, sizeof(*r));
    sscanf(pending, "%15s %4095s", r->method, r->path);
    {
        char *hs = strstr(pending, "\r\n") + 2;
        size_t hn = (size_t)(end + 2 - hs);
        if (hn >= sizeof(r->headers))
            hn = sizeof(r->headers) - 1;
        memcpy(r->headers, hs, hn);
    }
    if (testsrv_header(r, "Content-Length", v, sizeof(v)) == 0)
        clen = strtoul(v, NULL, 10);
    r->body = xmalloc(clen + 1);
    size_t take = *plen - hlen < clen ? *plen - hlen : clen, have = take, consumed = hlen + take;
    memcpy(r->body, pending + hlen, take);
    while (have < clen) {
        ssize_t n = recv(fd, r->body + have, clen - have, 0);
        if (n <= 0) {
            free(r->body);
            return -1;
        }
        have += (size_t)n;
    }
    r->body[clen] = 0;
    r->body_len = clen;
    memmove(pending, pending + consumed, *plen - consumed);
    *plen -= consumed;
    return 0;
}

static void *conn_main(void *arg)
{
    struct testsrv_conn *c = arg;
    size_t cap = 1 << 20, plen = 0;
    char *pending = xmalloc(cap);
    struct testsrv_req *r = xmalloc(sizeof(*r));

    while (!atomic_load(&c->s->stopping) && read_req(c->fd, pending, &plen, cap, r) == 0) {
        int keep;
        atomic_fetch_add(&c->s->reqs, 1);
        keep = c->s->fn(c->s->ud, c, r);
        free(r->body);
        if (keep < 0)
            break;
    }
    shutdown(c->fd, SHUT_RDWR);
    atomic_fetch_sub(&c->s->open, 1);
    free(r);
    free(pending);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct testsrv *s = arg;

    while (!atomic_load(&s->stopping)) {
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_mutex_lock(&s->mu);
        if (s->nc == MAX_CONNS) {
            pthread_mutex_unlock(&s->mu);
            close(fd);
            continue;
        }
        struct testsrv_conn *c = xcalloc(1, sizeof(*c));
        c->s = s;
        c->fd = fd;
        s->c[s->nc++] = c;
        atomic_fetch_add(&s->conns, 1);
        atomic_fetch_add(&s->open, 1);
        pthread_create(&c->th, NULL, conn_main, c);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

struct testsrv *testsrv_start(testsrv_fn fn, void *ud)
{
    struct testsrv *s = xcalloc(1, sizeof(*s));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);

    s->fn = fn;
    s->ud = ud;
    pthread_mutex_init(&s->mu, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(s->lfd, 64) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
        perror("testsrv");
        abort();
    }
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, accept_main, s);
    return s;
}

int testsrv_port(const struct testsrv *s)
{
    return s->port;
}

long testsrv_connections(const struct testsrv *s)
{
    return atomic_load(&((struct testsrv *)s)->conns);
}

long testsrv_open_connections(const struct testsrv *s)
{
    return atomic_load(&((struct testsrv *)s)->open);
}

long testsrv_requests(const struct testsrv *s)
{
    return atomic_load(&((struct testsrv *)s)->reqs);
}

void testsrv_stop(struct testsrv *s)
{
    atomic_store(&s->stopping, 1);
    pthread_join(s->th, NULL);
    close(s->lfd);
    for (int i = 0; i < s->nc; i++) {
        shutdown(s->c[i]->fd, SHUT_RDWR);
        pthread_join(s->c[i]->th, NULL);
        close(s->c[i]->fd);
        free(s->c[i]);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int testsrv_wait_closed(struct testsrv_conn *c, int ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    char b[256];

    while (poll(&p, 1, ms) > 0) {
        ssize_t n = recv(c->fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return 0;
    }
    return -1;
}
