/*
 * kube.c - requests to the Kubernetes API (see kube.h for the contract).
 *
 * One curl easy handle per client for requests: curl_easy_reset() between calls clears the
 * options but keeps the connection cache, so the TLS connection (HTTP/1.1; HTTP/2 with opts.http2)
 * is reused. A second handle carries long-lived streams so a watch does not block requests.
 */
#include "operator/kube/kube.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "operator/kube/log.h"

#define KUBE_CONNECT_TIMEOUT_MS 10000
#define KUBE_BACKOFF_BASE_MS    200
#define KUBE_BACKOFF_MAX_MS     10000
#define KUBE_RETRY_AFTER_MAX_S  30

struct kube_client {
    struct kube_config *cfg;
    CURL *h;        /* requests */
    CURL *sh;       /* streams */
    char *base_url; /* scheme://host:port[/prefix], host replaced by tls-server-name */
    struct curl_slist *connect_to; /* "sni:port:host:port" when tls-server-name is set */
    double qps, tokens;
    int burst;
    struct timespec refilled;
    long timeout_ms;
    int max_retries;
    char *user_agent;
    struct kube_status last;
    atomic_int canceled;
    long connects;
    bool http2;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
}

/* Sleeps ms in slices so a cancel ends it quickly; OP_ECANCELED when canceled. */
static int sleep_ms(struct kube_client *kc, long ms)
{
    while (ms > 0) {
        long step = ms < 50 ? ms : 50;
        struct timespec ts = {step / 1000, (step % 1000) * 1000000L};
        if (atomic_load(&kc->canceled))
            return OP_ECANCELED;
        nanosleep(&ts, NULL);
        ms -= step;
    }
    return atomic_load(&kc->canceled) ? OP_ECANCELED : 0;
}

/* ---------------------------------------------------------------- client */

/* Splits cfg->server into the URL we request and, for tls-server-name, a CONNECT_TO entry. */
static void build_base(struct kube_client *kc)
{
    const char *s = kc->cfg->server, *hs = strstr(s, "://") + 3, *he, *pe, *port;
    char host[512], portbuf[16], *url;
    size_t n;
    bool https = strncmp(s, "https", 5) == 0;

    if (*hs == '[') {
        he = strchr(hs, ']');
        he = he ? he + 1 : hs + strlen(hs);
    } else {
        he = hs + strcspn(hs, ":/");
    }
    snprintf(host, sizeof(host), "%.*s", (int)(he - hs), hs);
    pe = he;
    if (*he == ':') {
        pe = he + 1 + strcspn(he + 1, "/");
        snprintf(portbuf, sizeof(portbuf), "%.*s", (int)(pe - he - 1), he + 1);
    } else {
        snprintf(portbuf, sizeof(portbuf), "%s", https ? "443" : "80");
    }
    port = portbuf;
    n = strlen(s) + strlen(host) + 64 +
        (kc->cfg->tls_server_name ? strlen(kc->cfg->tls_server_name) : 0);
    url = xmalloc(n);
    if (kc->cfg->tls_server_name && https) {
        /* Verify and send SNI for tls-server-name, but connect to the real host. */
        snprintf(url, n, "https://%s:%s%s", kc->cfg->tls_server_name, port, pe);
        char ct[1024];
        snprintf(ct, sizeof(ct), "%s:%s:%s:%s", kc->cfg->tls_server_name, port, host, port);
        kc->connect_to = curl_slist_append(NULL, ct);
    } else {
        snprintf(url, n, "%s://%s:%s%s", https ? "https" : "http", host, port, pe);
    }
    kc->base_url = url;
}

struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_opts *opts)
{
    struct kube_client *kc = xcalloc(1, sizeof(*kc));
    struct kube_client_opts o = {0};

    pthread_once(&curl_once, curl_init_once);
    if (opts)
        o = *opts;
    kc->cfg = kube_config_dup(cfg);
    kc->h = curl_easy_init();
    kc->sh = curl_easy_init();
    if (!kc->h || !kc->sh) {
        fprintf(stderr, "fatal: curl_easy_init failed (out of memory)\n");
        abort();
    }
    kc->qps = o.qps > 0 ? o.qps : 50;
    kc->burst = o.burst > 0 ? o.burst : 100;
    kc->tokens = kc->burst;
    clock_gettime(CLOCK_MONOTONIC, &kc->refilled);
    kc->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 30000;
    kc->max_retries = o.max_retries < 0 ? 0 : o.max_retries > 0 ? o.max_retries : 5;
    kc->user_agent = xstrdup(o.user_agent ? o.user_agent : "gantry/0.1.0");
    kc->http2 = o.http2;
    atomic_init(&kc->canceled, 0);
    build_base(kc);
    return kc;
}

void kube_client_close_idle(struct kube_client *kc)
{
    curl_easy_cleanup(kc->h); /* closes its connection cache: the handle owns it */
    if (!(kc->h = curl_easy_init())) {
        fprintf(stderr, "fatal: curl_easy_init failed (out of memory)\n");
        abort();
    }
}

void kube_client_free(struct kube_client *kc)
{
    if (!kc)
        return;
    curl_easy_cleanup(kc->h);
    curl_easy_cleanup(kc->sh);
    kube_config_free(kc->cfg);
    free(kc->base_url);
    curl_slist_free_all(kc->connect_to);
    free(kc->user_agent);
    free(kc);
}

void kube_client_cancel(struct kube_client *kc)
{
    atomic_store(&kc->canceled, 1);
}

void kube_client_reset_cancel(struct kube_client *kc)
{
    atomic_store(&kc->canceled, 0);
}

const struct kube_status *kube_last_status(const struct kube_client *kc)
{
    return &kc->last;
}

const char *kube_client_namespace(const struct kube_client *kc)
{
    return kc->cfg->namespace ? kc->cfg->namespace : "default";
}

long kube_client_connects(const struct kube_client *kc)
{
    return kc->connects;
}

int kube_client_http_version(const struct kube_client *kc)
{
    long v = 0;
    curl_easy_getinfo(kc->h, CURLINFO_HTTP_VERSION, &v);
    return v == CURL_HTTP_VERSION_2_0 ? 2 : v ? 1 : 0;
}

/* Token bucket: waits until one token is there, then takes it. */
static int rate_wait(struct kube_client *kc)
{
    for (;;) {
        struct timespec ts;
        double dt, wait;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        dt = (double)(ts.tv_sec - kc->refilled.tv_sec) +
             (double)(ts.tv_nsec - kc->refilled.tv_nsec) / 1e9;
        kc->refilled = ts;
        kc->tokens += dt * kc->qps;
        if (kc->tokens > kc->burst)
            kc->tokens = kc->burst;
        if (kc->tokens >= 1) {
            kc->tokens -= 1;
            return 0;
        }
        wait = (1 - kc->tokens) / kc->qps;
        if (sleep_ms(kc, (long)(wait * 1000) + 1))
            return OP_ECANCELED;
    }
}

/* ---------------------------------------------------------------- one transfer */

struct xfer {
    struct kube_client *kc;
    struct buf *body;
    bool toobig;
    long retry_after_s; /* -1: none */
    /* streams */
    kube_data_fn on_data;
    void *ud;
    struct buf errbody;
    bool stopped;
    bool dead; /* no byte for dead_after_s */
    long dead_after_s;
    struct timespec last_data;
    CURL *h;
};

static size_t write_cb(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;

    if (x->on_data) {
        long code = 0;
        clock_gettime(CLOCK_MONOTONIC, &x->last_data);
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 300) /* an error body: keep it for the Status */
            return buf_append(&x->errbody, p, len) ? 0 : len;
        if (x->on_data(x->ud, p, len)) {
            x->stopped = true;
            return 0;
        }
        return len;
    }
    if (buf_append(x->body, p, len)) {
        x->toobig = true;
        return 0;
    }
    return len;
}

/* A Retry-After value (RFC 9110 10.2.3; v is not NUL-terminated): delay-seconds, or an HTTP-date
 * ("Wed, 21 Oct 2015 07:28:00 GMT", parsed by curl_getdate()) turned into the seconds from now,
 * 0 when it has passed. -1 when neither. The caller caps both forms at KUBE_RETRY_AFTER_MAX_S
 * (a date is capped here already, so a far one cannot overflow). */
static long retry_after_parse(const char *v, size_t n)
{
    char text[64], *end;
    long secs;
    time_t at;

    while (n > 0 && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof(text))
        return -1;
    memcpy(text, v, n);
    text[n] = '\0';
    secs = strtol(text, &end, 10);
    if (end != text)
        return secs >= 0 ? secs : -1;
    at = curl_getdate(text, NULL);
    if (at == -1)
        return -1;
    at -= time(NULL);
    if (at <= 0)
        return 0;
    return at > KUBE_RETRY_AFTER_MAX_S ? KUBE_RETRY_AFTER_MAX_S : (long)at;
}

static size_t header_cb(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;

    if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
        long v = retry_after_parse(p + 12, len - 12);
        if (v >= 0)
            x->retry_after_s = v;
    }
    return len;
}

static int progress_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct xfer *x = ud;

    if (atomic_load(&x->kc->canceled))
        return 1;
    if (x->dead_after_s > 0) {
        /* curl's LOW_SPEED check averages over a window of seconds; a silent half-open
         * connection is caught sooner and exactly by timing the last byte ourselves. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* in milliseconds: whole seconds alone called a byte 1 ms old dead when the second
         * ticked over in between (kube_watch_test failed so with dead_after_s 1) */
        long long ms = (long long)(now.tv_sec - x->last_data.tv_sec) * 1000 +
                       (now.tv_nsec - x->last_data.tv_nsec) / 1000000;
        if (ms >= (long long)x->dead_after_s * 1000) {
            x->dead = true;
            return 1;
        }
    }
    return 0;
}

/* Options shared by requests and streams: URL, TLS, auth, HTTP version, callbacks. */
static struct curl_slist *setup(struct kube_client *kc, CURL *h, const char *path,
                                const char *content_type, struct xfer *x)
{
    struct kube_config *c = kc->cfg;
    struct curl_slist *hdr = NULL;
    char url[KUBE_MAX_PATH * 2 + 512], line[8192];

    curl_easy_reset(h);
    snprintf(url, sizeof(url), "%s%s", kc->base_url, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 4096L); /* per handle, a dozen of them: not 16 KiB */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
                     kc->http2 ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)KUBE_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_USERAGENT, kc->user_agent);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""); /* gzip for large lists */
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, kc->errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (kc->connect_to)
        curl_easy_setopt(h, CURLOPT_CONNECT_TO, kc->connect_to);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (c->ca_data.data) {
        /* Blobs are copied into the handle, in memory: an exec plugin's refresh may free ours. */
        struct curl_blob b = {c->ca_data.data, c->ca_data.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    } else if (c->ca_file) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    }
    if (c->cert_data.data && c->key_data.data) {
        struct curl_blob cb = {c->cert_data.data, c->cert_data.len, CURL_BLOB_COPY};
        struct curl_blob kb = {c->key_data.data, c->key_data.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cb);
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (c->cert_file && c->key_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    }
    if (c->token && *c->token) {
        snprintf(line, sizeof(line), "Authorization: Bearer %s", c->token);
        hdr = curl_slist_append(hdr, line);
    }
    hdr = curl_slist_append(hdr, "Accept: application/json");
    if (content_type) {
        snprintf(line, sizeof(line), "Content-Type: %s", content_type);
        hdr = curl_slist_append(hdr, line);
    }
    hdr = curl_slist_append(hdr, "Expect:"); /* no 100-continue round trip for bodies */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    return hdr;
}

/* What to do about a transport failure, for the message. */
static const char *transport_hint(CURLcode cc)
{
    switch (cc) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
        return "; check certificate-authority(-data) and tls-server-name in the kubeconfig";
    case CURLE_SSL_CERTPROBLEM:
        return "; check client-certificate(-data) and client-key(-data) in the kubeconfig";
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
        return "; is the API server in the kubeconfig's server field running and reachable?";
    default:
        return "";
    }
}

static int from_curl(struct kube_client *kc, CURLcode cc, const struct xfer *x, const char *method,
                     const char *path)
{
    snprintf(kc->last.message, sizeof(kc->last.message), "%s %s%s: %s%s", method, kc->base_url,
             path, kc->errbuf[0] ? kc->errbuf : curl_easy_strerror(cc), transport_hint(cc));
    kc->last.code = 0;
    snprintf(kc->last.reason, sizeof(kc->last.reason), "%s", "Transport");
    if (x->toobig) {
        snprintf(kc->last.message, sizeof(kc->last.message),
                 "%s %s: response over %u bytes "
                 "(KUBE_MAX_BODY); use a smaller list limit",
                 method, path, KUBE_MAX_BODY);
        return OP_ETOOBIG;
    }
    if (x->dead) {
        snprintf(kc->last.message, sizeof(kc->last.message),
                 "%s %s: no data for %ld s; the "
                 "connection is presumed dead",
                 method, path, x->dead_after_s);
        return OP_ETIMEDOUT;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK || x->stopped || atomic_load(&kc->canceled))
        return OP_ECANCELED;
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return OP_ETIMEDOUT;
    return OP_EHTTP;
}

static bool idempotent(const char *method)
{
    return strcmp(method, "GET") == 0 || strcmp(method, "PUT") == 0 ||
           strcmp(method, "DELETE") == 0 || strcmp(method, "HEAD") == 0;
}

/* Full-jitter exponential backoff, in ms, for attempt 0, 1, ... */
static long backoff_ms(int attempt)
{
    long cap = KUBE_BACKOFF_BASE_MS << (attempt < 16 ? attempt : 16);
    if (cap > KUBE_BACKOFF_MAX_MS || cap <= 0)
        cap = KUBE_BACKOFF_MAX_MS;
    return cap / 2 + (long)(random() % (cap / 2 + 1));
}

/* ---------------------------------------------------------------- requests */

int kube_request(struct kube_client *kc, const char *method, const char *path,
                 const char *content_type, const char *body, size_t body_len, struct buf *resp)
{
    bool refreshed = false;
    char err[512];
    int rc = OP_EHTTP;

    memset(&kc->last, 0, sizeof(kc->last));
    for (int attempt = 0;; attempt++) {
        struct xfer x = {.kc = kc, .body = resp, .retry_after_s = -1, .h = kc->h};
        struct curl_slist *hdr;
        long code = 0, nconn = 0, wait;
        CURLcode cc;
        bool retry;

        if ((rc = rate_wait(kc)))
            return rc;
        if ((rc = kube_config_refresh(kc->cfg, false, err, sizeof(err)))) {
            snprintf(kc->last.message, sizeof(kc->last.message), "%s", err);
            return rc;
        }
        buf_reset(resp);
        kc->errbuf[0] = 0;
        hdr = setup(kc, kc->h, path, content_type, &x);
        curl_easy_setopt(kc->h, CURLOPT_TIMEOUT_MS, kc->timeout_ms);
        if (body) {
            curl_easy_setopt(kc->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
            curl_easy_setopt(kc->h, CURLOPT_POSTFIELDS, body);
        }
        if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
            curl_easy_setopt(kc->h, CURLOPT_CUSTOMREQUEST, method);
        cc = curl_easy_perform(kc->h);
        curl_slist_free_all(hdr);
        curl_easy_getinfo(kc->h, CURLINFO_NUM_CONNECTS, &nconn);
        kc->connects += nconn;
        if (cc != CURLE_OK) {
            rc = from_curl(kc, cc, &x, method, path);
            retry = idempotent(method) && (rc == OP_EHTTP || rc == OP_ETIMEDOUT);
        } else {
            curl_easy_getinfo(kc->h, CURLINFO_RESPONSE_CODE, &code);
            if (code >= 200 && code < 300)
                return 0;
            rc = kube_status_parse(buf_ptr(resp), buf_len(resp), code, &kc->last);
            buf_reset(resp);
            if (code == 401 && !refreshed && (kc->cfg->token_file || kc->cfg->exec)) {
                /* A rotated token or an expired plugin credential: fetch it again, once. */
                refreshed = true;
                if (kube_config_refresh(kc->cfg, true, err, sizeof(err)) == 0) {
                    attempt--;
                    continue;
                }
            }
            /* 429: the server did not run the request, so any verb may repeat it. */
            retry = code == 429 || (code >= 500 && idempotent(method));
        }
        if (!retry || attempt >= kc->max_retries)
            return rc;
        wait = x.retry_after_s >= 0
                   ? (x.retry_after_s > KUBE_RETRY_AFTER_MAX_S ? KUBE_RETRY_AFTER_MAX_S
                                                               : x.retry_after_s) *
                             1000L +
                         (long)(random() % 100)
                   : backoff_ms(attempt);
        log_debug("Retrying request", "{s:s, s:s, s:i, s:s, s:i}", "method", method, "path", path,
                  "code", (int)code, "error", op_strerror(rc), "waitMs", (int)wait);
        if (sleep_ms(kc, wait))
            return OP_ECANCELED;
    }
}

/* Sends obj as JSON and parses the response into *out (when out is not NULL). */
static int json_call(struct kube_client *kc, const char *method, const char *path,
                     const char *content_type, json_t *obj, json_t **out)
{
    struct buf resp;
    char *text = NULL;
    json_t *doc = NULL;
    int rc;

    buf_init(&resp, KUBE_MAX_BODY);
    if (obj)
        text = json_dumps(obj, JSON_COMPACT);
    if (obj && !text) {
        rc = OP_EINVAL;
        goto out;
    }
    rc = kube_request(kc, method, path, content_type, text, text ? strlen(text) : 0, &resp);
    if (rc || !out)
        goto out;
    doc = json_loadb(buf_ptr(&resp), buf_len(&resp), 0, NULL);
    if (!doc) {
        snprintf(kc->last.message, sizeof(kc->last.message), "%s %s: response is not JSON", method,
                 path);
        rc = OP_EPARSE;
        goto out;
    }
    *out = doc; /* new reference */
    doc = NULL;
out:
    free(text);
    json_decref(doc);
    buf_cleanup(&resp);
    return rc;
}

int kube_get(struct kube_client *kc, const char *path, json_t **out)
{
    return json_call(kc, "GET", path, NULL, NULL, out);
}

int kube_create(struct kube_client *kc, const char *path, json_t *obj, json_t **out)
{
    return json_call(kc, "POST", path, "application/json", obj, out);
}

int kube_replace(struct kube_client *kc, const char *path, json_t *obj, json_t **out)
{
    return json_call(kc, "PUT", path, "application/json", obj, out);
}

static void append_param(char *q, size_t n, const char *name, const char *value)
{
    char *esc;
    size_t len = strlen(q);

    if (!value || !*value)
        return;
    esc = curl_easy_escape(NULL, value, 0);
    snprintf(q + len, n - len, "%s%s=%s", strchr(q, '?') ? "&" : "?", name, esc ? esc : "");
    curl_free(esc);
}

int kube_patch(struct kube_client *kc, const char *path, enum kube_patch_type type, json_t *patch,
               const struct kube_patch_opts *opts, json_t **out)
{
    static const char *ctypes[] = {"application/merge-patch+json", "application/json-patch+json",
                                   "application/strategic-merge-patch+json",
                                   "application/apply-patch+yaml"};
    char p[KUBE_MAX_PATH + 512];

    if ((unsigned)type > KUBE_PATCH_APPLY || strlen(path) >= KUBE_MAX_PATH)
        return OP_EINVAL;
    snprintf(p, sizeof(p), "%s", path);
    if (opts)
        append_param(p, sizeof(p), "fieldManager", opts->field_manager);
    if (type == KUBE_PATCH_APPLY) {
        if (!opts || !opts->field_manager)
            return OP_EINVAL; /* the API requires a field manager for apply */
        if (opts->force)
            append_param(p, sizeof(p), "force", "true");
    }
    return json_call(kc, "PATCH", p, ctypes[type], patch, out);
}

int kube_delete(struct kube_client *kc, const char *path, const struct kube_delete_opts *opts,
                json_t **out)
{
    json_t *body = NULL;
    int rc;

    if (opts) {
        body = json_pack("{s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions");
        if (opts->propagation_policy)
            json_object_set_new(body, "propagationPolicy", json_string(opts->propagation_policy));
        /* A zeroed struct must not mean "delete at once": only grace_now sends 0. */
        if (opts->grace_now)
            json_object_set_new(body, "gracePeriodSeconds", json_integer(0));
        else if (opts->grace_period_seconds > 0)
            json_object_set_new(body, "gracePeriodSeconds",
                                json_integer(opts->grace_period_seconds));
        if (opts->precondition_uid || opts->precondition_rv) {
            json_t *pre = json_object();
            if (opts->precondition_uid)
                json_object_set_new(pre, "uid", json_string(opts->precondition_uid));
            if (opts->precondition_rv)
                json_object_set_new(pre, "resourceVersion", json_string(opts->precondition_rv));
            json_object_set_new(body, "preconditions", pre);
        }
    }
    rc = json_call(kc, "DELETE", path, body ? "application/json" : NULL, body, out);
    json_decref(body);
    return rc;
}

/* ---- a list page, item by item: the page's text is walked and each item parsed on its own,
 * so a page never exists as one jansson tree (a tree is several times its text). */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* p at '"': just past the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e)
{
    for (p++; p < e; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* Just past the JSON value at p, or NULL when it is cut short. Structure only: the parser that
 * reads the value later checks the rest. */
static const char *skip_value(const char *p, const char *e)
{
    size_t depth = 0;

    p = skip_ws(p, e);
    do {
        if (p >= e)
            return NULL;
        if (*p == '"') {
            if (!(p = skip_string(p, e)))
                return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            if (depth == 0)
                return NULL;
            depth--;
            p++;
        } else if (depth > 0) {
            p++;
        } else { /* a scalar at the top */
            while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
                   *p != '\r' && *p != '\n')
                p++;
            return p;
        }
    } while (depth > 0);
    return p;
}

static bool key_is(const char *k, const char *kend, const char *want)
{
    size_t n = strlen(want);
    return (size_t)(kend - k) == n + 2 && memcmp(k + 1, want, n) == 0;
}

/* Delivers the items of one list page (text) to fn one at a time; *meta gets its metadata. */
static int scan_page(const char *text, size_t len, kube_page_fn fn, void *ud, json_t **meta)
{
    const char *p = text, *e = text + len, *k, *kend, *v;
    int rc;

    p = skip_ws(p, e);
    if (p >= e || *p != '{')
        return OP_EPARSE;
    p++;
    for (;;) {
        p = skip_ws(p, e);
        if (p < e && *p == '}')
            return 0;
        if (p >= e || *p != '"' || !(kend = skip_string(p, e)))
            return OP_EPARSE;
        k = p;
        p = skip_ws(kend, e);
        if (p >= e || *p != ':')
            return OP_EPARSE;
        v = skip_ws(p + 1, e);
        if (key_is(k, kend, "items") && v < e && *v == '[') {
            for (p = v + 1;;) {
                json_t *item, *one;
                const char *ve;

                p = skip_ws(p, e);
                if (p < e && *p == ']') {
                    p++;
                    break;
                }
                if (!(ve = skip_value(p, e)) || !(item = json_loadb(p, (size_t)(ve - p), 0, NULL)))
                    return OP_EPARSE;
                one = json_array();
                json_array_append_new(one, item);
                rc = fn(ud, one, false);
                json_decref(one);
                if (rc)
                    return rc;
                p = skip_ws(ve, e);
                if (p < e && *p == ',')
                    p++;
                else if (p >= e || *p != ']')
                    return OP_EPARSE;
            }
        } else {
            if (!(p = skip_value(v, e)))
                return OP_EPARSE;
            if (key_is(k, kend, "metadata")) {
                json_decref(*meta);
                if (!(*meta = json_loadb(v, (size_t)(p - v), 0, NULL)))
                    return OP_EPARSE;
            }
        }
        p = skip_ws(p, e);
        if (p < e && *p == ',')
            p++;
        else if (p >= e || *p != '}')
            return OP_EPARSE;
    }
}

int kube_list_pages(struct kube_client *kc, const char *path, const struct kube_list_opts *opts,
                    kube_page_fn fn, void *ud, char **rv)
{
    struct kube_list_opts o = {0};
    struct buf body;
    json_t *meta = NULL;
    char *cont = NULL, *listrv = NULL, q[KUBE_MAX_PATH * 2 + 4096], num[32];
    int restarts = 0, rc;

    buf_init(&body, KUBE_MAX_BODY);
    if (opts)
        o = *opts;
    if (o.limit <= 0)
        o.limit = 500;
    if (o.max_restarts <= 0)
        o.max_restarts = 3;
    if (strlen(path) >= KUBE_MAX_PATH) {
        rc = OP_EINVAL;
        goto out;
    }
    for (;;) {
        const char *c, *r;
        snprintf(q, sizeof(q), "%s", path);
        snprintf(num, sizeof(num), "%ld", o.limit);
        append_param(q, sizeof(q), "limit", num);
        append_param(q, sizeof(q), "labelSelector", o.label_selector);
        append_param(q, sizeof(q), "fieldSelector", o.field_selector);
        append_param(q, sizeof(q), "continue", cont);
        buf_reset(&body);
        rc = kube_request(kc, "GET", q, NULL, NULL, 0, &body);
        if (rc == OP_EGONE && cont && restarts < o.max_restarts) {
            /* The continue token expired (compaction): the snapshot is gone, start over. */
            json_t *none = json_array();

            restarts++;
            log_info("Restarted list after an expired continue token", "{s:s, s:i}", "path", path,
                     "restart", restarts);
            free(cont);
            cont = NULL;
            rc = fn(ud, none, true);
            json_decref(none);
            if (rc)
                goto out;
            continue;
        }
        if (rc)
            goto out;
        json_decref(meta);
        meta = NULL;
        rc = scan_page(buf_ptr(&body), buf_len(&body), fn, ud, &meta);
        if (rc == OP_EPARSE)
            snprintf(kc->last.message, sizeof(kc->last.message),
                     "GET %s: the list response is not JSON", path);
        if (rc)
            goto out;
        r = json_string_value(json_object_get(meta, "resourceVersion"));
        if (!cont) {
            free(listrv);
            listrv = xstrdup(r ? r : "");
        }
        c = json_string_value(json_object_get(meta, "continue"));
        free(cont);
        cont = c && *c ? xstrdup(c) : NULL;
        if (!cont)
            break;
    }
    if (rv) {
        *rv = listrv;
        listrv = NULL;
    }
out:
    buf_cleanup(&body);
    json_decref(meta);
    free(cont);
    free(listrv);
    return rc;
}

static int collect_page(void *ud, json_t *items, bool restarted)
{
    json_t *all = ud;

    if (restarted)
        json_array_clear(all);
    json_array_extend(all, items);
    return 0;
}

int kube_list(struct kube_client *kc, const char *path, const struct kube_list_opts *opts,
              json_t **items, char **rv)
{
    json_t *all = json_array();
    int rc = kube_list_pages(kc, path, opts, collect_page, all, rv);

    if (rc) {
        json_decref(all);
        return rc;
    }
    *items = all;
    return 0;
}

/* ---------------------------------------------------------------- streams */

int kube_stream(struct kube_client *kc, const char *path, kube_data_fn on_data, void *ud,
                long dead_after_s, long max_s, long *http_code)
{
    struct xfer x = {.kc = kc, .retry_after_s = -1, .on_data = on_data, .ud = ud, .h = kc->sh};
    struct curl_slist *hdr;
    char err[512];
    long code = 0, nconn = 0;
    CURLcode cc;
    int rc;

    *http_code = 0;
    memset(&kc->last, 0, sizeof(kc->last));
    if ((rc = rate_wait(kc)))
        return rc;
    if ((rc = kube_config_refresh(kc->cfg, false, err, sizeof(err)))) {
        snprintf(kc->last.message, sizeof(kc->last.message), "%s", err);
        return rc;
    }
    buf_init(&x.errbody, 1u << 20);
    kc->errbuf[0] = 0;
    hdr = setup(kc, kc->sh, path, NULL, &x);
    curl_easy_setopt(kc->sh, CURLOPT_ACCEPT_ENCODING, NULL); /* events must arrive unbuffered */
    x.dead_after_s = dead_after_s;
    clock_gettime(CLOCK_MONOTONIC, &x.last_data);
    if (max_s > 0)
        curl_easy_setopt(kc->sh, CURLOPT_TIMEOUT_MS, max_s * 1000L);
    cc = curl_easy_perform(kc->sh);
    curl_slist_free_all(hdr);
    curl_easy_getinfo(kc->sh, CURLINFO_NUM_CONNECTS, &nconn);
    kc->connects += nconn;
    curl_easy_getinfo(kc->sh, CURLINFO_RESPONSE_CODE, &code);
    *http_code = code;
    if (code >= 300) {
        rc = kube_status_parse(buf_ptr(&x.errbody), buf_len(&x.errbody), code, &kc->last);
        if (code == 401 && (kc->cfg->token_file || kc->cfg->exec))
            (void)!kube_config_refresh(kc->cfg, true, err, sizeof(err)); /* for the next try */
    } else if (cc != CURLE_OK) {
        rc = from_curl(kc, cc, &x, "GET", path);
    } else {
        rc = 0;
    }
    buf_cleanup(&x.errbody);
    return rc;
}

/* ---------------------------------------------------------------- parsing helpers */

int kube_status_parse(const char *body, size_t len, long code, struct kube_status *st)
{
    json_t *doc = len ? json_loadb(body, len, 0, NULL) : NULL;
    const char *reason = NULL, *msg = NULL;
    json_t *c;

    memset(st, 0, sizeof(*st));
    if (json_is_object(doc)) {
        reason = json_string_value(json_object_get(doc, "reason"));
        msg = json_string_value(json_object_get(doc, "message"));
        c = json_object_get(doc, "code");
        if (code <= 0 && json_is_integer(c))
            code = (long)json_integer_value(c);
    }
    st->code = code;
    snprintf(st->reason, sizeof(st->reason), "%s", reason ? reason : "");
    if (msg)
        snprintf(st->message, sizeof(st->message), "%s", msg);
    else
        snprintf(st->message, sizeof(st->message), "HTTP %ld: %.*s", code,
                 (int)(len > 200 ? 200 : len), len ? body : "");
    json_decref(doc);
    return code >= 300 ? op_from_http(code, st->reason) : OP_EAPI;
}

static bool name_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 253)
        return false;
    for (; *s; s++)
        if (*s == '/' || *s == '?' || *s == '#' || *s == '%' || (unsigned char)*s <= ' ')
            return false;
    return true;
}

int kube_path(char *out, size_t outlen, const char *api, const char *resource, const char *ns,
              const char *name, const char *subresource)
{
    int n;

    if (!api || !resource || !name_ok(resource) || (ns && !name_ok(ns)) ||
        (name && !name_ok(name)) || (subresource && !name_ok(subresource)))
        return OP_EINVAL;
    n = snprintf(out, outlen, "/%s/%s%s%s%s/%s%s%s%s%s", strchr(api, '/') ? "apis" : "api", api,
                 ns ? "/namespaces/" : "", ns ? ns : "", "", resource, name ? "/" : "",
                 name ? name : "", subresource ? "/" : "", subresource ? subresource : "");
    return n < 0 || (size_t)n >= outlen ? OP_EINVAL : 0;
}

int kube_object_key(const json_t *obj, char *out, size_t outlen)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    int n;

    if (!name || !*name)
        return OP_EINVAL;
    n = ns && *ns ? snprintf(out, outlen, "%s/%s", ns, name) : snprintf(out, outlen, "%s", name);
    return n < 0 || (size_t)n >= outlen ? OP_EINVAL : 0;
}

const char *kube_object_rv(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}
