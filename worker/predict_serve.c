/*
 * predict_serve.c - gantry-predict --serve: the model over HTTP with KServe's V1 protocol
 * (libmicrohttpd, a thread per connection). Requests are classified one at a time (the model's
 * buffers are shared; --threads parallelises within a batch); the rest are answered while one
 * is classified, so a long request does not fail the liveness probe on /healthz. SIGTERM or
 * SIGINT: stop listening, answer the requests already received (drain), exit 0.
 *
 *   POST /v1/models/NAME:predict (or /predict)  {"instances": ["text", {"text": "..."}, ...],
 *                                                "top_k": K}
 *        -> 200 {"model": NAME, "predictions": [{"label", "score", "top"?}, ...]}
 *   GET  /v1/models/NAME  -> {"name", "ready": true, "step", "labels", "inputs", "task"}
 *        ("inputs": the instance fields, {"text": ...} or {"text": ..., "textPair": ...})
 *   GET /healthz, /metrics
 * Refusals are {"error": why}: 400 (malformed, naming the field), 404, 405, 413 (over
 * SERVE_MAX_BODY bytes, SERVE_MAX_INSTANCES documents, 16 JSON values a document, or a reply
 * that would pass SERVE_MAX_REPLY bytes: judged before the model runs), 503 (SERVE_MAX_WAITING
 * predictions already wait for the model: retry).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/xalloc.h"
#include "worker/dist.h"
#include "worker/predict.h"

#define SERVE_MAX_BODY (16u << 20)  /* request bytes */
#define HTTP_TOO_LARGE 413
#define SERVE_MAX_INSTANCES 10000   /* documents per request */
#define SERVE_MAX_REPLY (64u << 20) /* response bytes */
#define SERVE_DRAIN_S 25            /* after SIGTERM, seconds to finish requests */
#define SERVE_MAX_WAITING 8 /* predictions waiting for the model; more get 503 at once, so the
                             * 32 connections never all wait and /healthz stays answered */
#define HTTP_BUSY 503

struct server {
    struct pred *p;
    char name[256];
    char path_model[300], path_predict[320];
    char *quoted_name; /* name as a JSON string literal */
    pthread_mutex_t model_mu; /* one classification at a time: p's batch and output */
    pthread_mutex_t stats_mu; /* the counters for /metrics, below */
    unsigned long long req_ok, req_bad, docs;
    unsigned in_flight; /* POST requests from their headers until their answer is sent */
    unsigned waiting;   /* predictions waiting for the model or holding it */
    size_t max_quoted;  /* the longest label as a JSON string literal */
    double seconds;
    const char *hold; /* tests: GANTRY_PREDICT_TEST_HOLD, a file; while it exists, a
                       * classification waits (holding the model) */
};

/* One request's body as it arrives. */
struct upload {
    struct buf body;
    bool too_big;
};

/* {"error": why} with status (and allow, the methods the path takes, on a 405). */
static enum MHD_Result reply_error(struct MHD_Connection *conn, struct server *sv, unsigned status,
                                   const char *why, const char *allow)
{
    struct buf b;
    json_t *j = json_pack("{s:s}", "error", why);
    char *t = json_dumps(j, JSON_COMPACT);
    buf_init(&b, SERVE_MAX_REPLY);
    if (!t || buf_puts(&b, t) || buf_puts(&b, "\n"))
        buf_reset(&b);
    free(t);
    json_decref(j);
    pthread_mutex_lock(&sv->stats_mu);
    sv->req_bad++;
    pthread_mutex_unlock(&sv->stats_mu);
    enum MHD_Result r = httpd_reply_allow(conn, status, "application/json", &b, allow);
    buf_cleanup(&b);
    return r;
}

/* Instance v's text and, for a text pair model (pf), its pair: a string, or {tf: ...}; a pair
 * ["text", "pair"], or {tf: ..., pf: ...}. false when v is none of those. */
static bool instance(const json_t *v, const char *tf, const char *pf, const json_t **text,
                     const json_t **pair)
{
    if (pf && json_is_array(v) && json_array_size(v) == 2)
        *text = json_array_get(v, 0), *pair = json_array_get(v, 1);
    else if (json_is_object(v))
        *text = json_object_get(v, tf), *pair = pf ? json_object_get(v, pf) : NULL;
    else
        *text = pf ? NULL : v, *pair = NULL;
    return json_is_string(*text) && (!pf || json_is_string(*pair));
}

/* The request's instances (an array of strings or {"text": ...}; of text pairs for a pair
 * model) and top_k, checked: 0, or an HTTP status with why naming the field. */
static unsigned parse_request(const json_t *j, const char *tf, const char *pf,
                              const json_t **inst, int *top_k, char *why, size_t whylen)
{
    const json_t *tk, *text, *pair;
    if (!json_is_array(*inst = json_object_get(j, "instances")) || json_array_size(*inst) == 0) {
        if (pf)
            snprintf(why, whylen, "instances: must be a non-empty array of text pairs, "
                     "[\"text\", \"pair\"] or {\"%s\": ..., \"%s\": ...}", tf, pf);
        else
            snprintf(why, whylen, "instances: must be a non-empty array of texts or "
                     "{\"%s\": ...} objects", tf);
        return MHD_HTTP_BAD_REQUEST;
    }
    if (json_array_size(*inst) > SERVE_MAX_INSTANCES) {
        snprintf(why, whylen, "instances: %zu of them; at most %d per request",
                 json_array_size(*inst), SERVE_MAX_INSTANCES);
        return HTTP_TOO_LARGE;
    }
    if ((tk = json_object_get(j, "top_k")) &&
        (!json_is_integer(tk) || json_integer_value(tk) < 1 || json_integer_value(tk) > 65536)) {
        snprintf(why, whylen, "top_k: must be a whole number from 1");
        return MHD_HTTP_BAD_REQUEST;
    }
    *top_k = tk ? (int)json_integer_value(tk) : 0;
    for (size_t i = 0; i < json_array_size(*inst); i++) { /* all checked before any is run */
        if (instance(json_array_get(*inst, i), tf, pf, &text, &pair))
            continue;
        if (pf)
            snprintf(why, whylen, "instances[%zu]: the model classifies text pairs: must be "
                     "[\"text\", \"pair\"] or an object with string fields \"%s\" and \"%s\"", i,
                     tf, pf);
        else
            snprintf(why, whylen, "instances[%zu]: must be a string or an object with a string "
                                  "field \"%s\"", i, tf);
        return MHD_HTTP_BAD_REQUEST;
    }
    return 0;
}

/* The JSON values in req[0..n), counted without parsing (commas, colons and openings outside
 * strings): json_loadb would build every one first, ~200 bytes each (16 MiB of "{}," is 5.6
 * million objects, over a gigabyte). */
static size_t count_values(const char *req, size_t n)
{
    size_t v = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = req[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == ',' || c == ':' || c == '{' || c == '[') {
            v++;
        }
    }
    return v;
}

/* Classifies the request body's instances into body ({"model", "predictions": [...]}). 0, or
 * an HTTP status with why. */
static unsigned serve_predict(struct server *sv, const char *req, size_t n, struct buf *body,
                              size_t *docs, char *why, size_t whylen)
{
    struct pred *p = sv->p;
    const char *tf = p->o.text_field, *pf = p->o.pair_field;
    const json_t *text, *pair;
    json_error_t je;
    size_t values = count_values(req, n);
    if (values > 16 * (size_t)SERVE_MAX_INSTANCES) {
        snprintf(why, whylen, "the body holds %zu JSON values; at most %d documents of a few "
                              "fields each per request", values, SERVE_MAX_INSTANCES);
        return HTTP_TOO_LARGE;
    }
    json_t *j = json_loadb(req, n, 0, &je);
    const json_t *inst = NULL;
    int top_k = 0, saved_k = p->o.top_k, rc = 0;
    unsigned status;
    char *out = NULL;
    size_t outlen = 0;

    if (!json_is_object(j)) {
        snprintf(why, whylen, "the body must be a JSON object {\"instances\": [...]}%s%s",
                 j ? "" : ": ", j ? "" : je.text);
        json_decref(j);
        return MHD_HTTP_BAD_REQUEST;
    }
    if ((status = parse_request(j, tf, pf, &inst, &top_k, why, whylen))) {
        json_decref(j);
        return status;
    }
    p->o.top_k = top_k ? top_k : saved_k;
    int k = p->o.top_k < p->K ? p->o.top_k : p->K;
    /* each top entry is {"label":...,"score":-1.23457e-05}; a multi-label model's labels may
     * be all K */
    if ((double)json_array_size(inst) * ((k > 1 ? k + 1 : 1) + (p->lw ? p->K : 0)) *
            (double)(sv->max_quoted + 32) > SERVE_MAX_REPLY) {
        snprintf(why, whylen, "the response would exceed %u bytes (%zu documents, top_k %d); "
                 "send fewer instances or a smaller top_k", SERVE_MAX_REPLY,
                 json_array_size(inst), k);
        p->o.top_k = saved_k;
        json_decref(j);
        return HTTP_TOO_LARGE;
    }
    if (!(p->out = open_memstream(&out, &outlen)))
        abort();
    p->array = true, p->emitted = 0, p->name_files = false;
    fprintf(p->out, "{\"model\":%s,\"predictions\":[", sv->quoted_name);
    for (size_t i = 0; i < json_array_size(inst) && !rc; i++) {
        instance(json_array_get(inst, i), tf, pf, &text, &pair);
        rc = predict_add(p, json_string_value(text), json_string_length(text),
                         json_string_value(pair), json_string_length(pair), (long)i + 1, NULL);
    }
    if (!rc)
        rc = predict_flush(p);
    p->n = 0;
    fprintf(p->out, "]}\n");
    fclose(p->out);
    p->out = NULL, p->array = false, p->o.top_k = saved_k;
    if (rc) {
        snprintf(why, whylen, "could not write the predictions");
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    } else if (buf_append(body, out, outlen)) {
        snprintf(why, whylen, "the response would exceed %u bytes; send fewer instances",
                 SERVE_MAX_REPLY);
        status = HTTP_TOO_LARGE;
    } else {
        *docs = json_array_size(inst);
    }
    free(out);
    json_decref(j);
    return status;
}

/* GET /v1/models/NAME: the model's name, readiness, step, labels and the fields an instance
 * object takes (a text pair model's two). */
static unsigned model_info(const struct server *sv, struct buf *body)
{
    json_t *labels = json_array(), *inputs = json_pack("{s:s}", "text", sv->p->o.text_field);
    for (int i = 0; i < sv->p->card.labels.n; i++) /* none for a regression model */
        json_array_append_new(labels, json_string(sv->p->names[i]));
    if (sv->p->o.pair_field)
        json_object_set_new(inputs, "textPair", json_string(sv->p->o.pair_field));
    json_t *j = json_pack("{s:s, s:b, s:I, s:o, s:o, s:s}", "name", sv->name, "ready", 1, "step",
                          (json_int_t)sv->p->step, "labels", labels, "inputs", inputs, "task",
                          sv->p->lw                ? "multi-label-classification"
                          : sv->p->card.regression ? "regression"
                                                   : "text-classification");
    char *t = json_dumps(j, JSON_COMPACT);
    int e = !t || buf_puts(body, t) || buf_puts(body, "\n");
    free(t);
    json_decref(j);
    return e ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK;
}

/* GET /metrics: Prometheus text. */
static unsigned render_metrics(struct server *sv, struct buf *body)
{
    pthread_mutex_lock(&sv->stats_mu);
    int e = buf_printf(body,
                      "# HELP gantry_predict_requests_total Prediction requests, by outcome.\n"
                      "# TYPE gantry_predict_requests_total counter\n"
                      "gantry_predict_requests_total{outcome=\"ok\"} %llu\n"
                      "gantry_predict_requests_total{outcome=\"error\"} %llu\n"
                      "# HELP gantry_predict_documents_total Documents classified.\n"
                      "# TYPE gantry_predict_documents_total counter\n"
                      "gantry_predict_documents_total %llu\n"
                      "# HELP gantry_predict_seconds_total Time spent classifying.\n"
                      "# TYPE gantry_predict_seconds_total counter\n"
                      "gantry_predict_seconds_total %.6f\n"
                      "# HELP gantry_predict_requests_in_flight Prediction requests being "
                      "received, waiting for the model, classified or answered.\n"
                      "# TYPE gantry_predict_requests_in_flight gauge\n"
                      "gantry_predict_requests_in_flight %u\n",
                      sv->req_ok, sv->req_bad, sv->docs, sv->seconds, sv->in_flight);
    pthread_mutex_unlock(&sv->stats_mu);
    return e ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK;
}

/* Tests only: waits while the file sv->hold exists. */
static void hold_for_test(const struct server *sv)
{
    struct stat st;
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (sv->hold && stat(sv->hold, &st) == 0)
        nanosleep(&tick, NULL);
}

/* A prediction request: waits for the model, classifies; the counters. 0 or a status. */
static unsigned predict_request(struct server *sv, const struct upload *up, struct buf *body,
                                char *why, size_t whylen)
{
    pthread_mutex_lock(&sv->stats_mu);
    unsigned waiting = sv->waiting;
    if (waiting < SERVE_MAX_WAITING)
        sv->waiting++;
    pthread_mutex_unlock(&sv->stats_mu);
    if (waiting >= SERVE_MAX_WAITING) {
        snprintf(why, whylen, "busy: %u predictions are waiting for the model; retry shortly",
                 waiting);
        return HTTP_BUSY;
    }
    pthread_mutex_lock(&sv->model_mu);
    hold_for_test(sv);
    double t0 = predict_now();
    size_t docs = 0;
    unsigned st = serve_predict(sv, buf_ptr(&up->body), buf_len(&up->body), body, &docs, why,
                                whylen);
    double dt = predict_now() - t0;
    pthread_mutex_unlock(&sv->model_mu);
    pthread_mutex_lock(&sv->stats_mu);
    sv->waiting--;
    if (!st) {
        sv->req_ok++;
        sv->docs += docs;
        sv->seconds += dt;
    }
    pthread_mutex_unlock(&sv->stats_mu);
    return st;
}

/* One request's answer: the status and, for 200, *type and body; for an error, why (and, for
 * a 405, *allow: the methods the path takes). */
static unsigned route(struct server *sv, const char *url, bool post, const struct upload *up,
                      struct buf *body, const char **type, const char **allow, char *why,
                      size_t whylen)
{
    *type = "application/json";
    *allow = "GET, HEAD";
    if (!strcmp(url, sv->path_predict) || !strcmp(url, "/predict")) {
        *allow = "POST";
        if (!post) {
            snprintf(why, whylen, "use POST");
            return MHD_HTTP_METHOD_NOT_ALLOWED;
        }
        if (up->too_big) {
            snprintf(why, whylen, "the body is over %u bytes; send fewer instances",
                     SERVE_MAX_BODY);
            return HTTP_TOO_LARGE;
        }
        unsigned st = predict_request(sv, up, body, why, whylen);
        return st ? st : MHD_HTTP_OK;
    }
    bool get_path = !strcmp(url, "/healthz") || !strcmp(url, sv->path_model) ||
                    !strcmp(url, "/metrics");
    if (post && get_path) {
        snprintf(why, whylen, "use GET");
        return MHD_HTTP_METHOD_NOT_ALLOWED;
    }
    if (!strcmp(url, "/healthz")) {
        *type = "text/plain";
        return buf_puts(body, "ok\n") ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK;
    }
    if (!strcmp(url, sv->path_model))
        return model_info(sv, body);
    if (!strcmp(url, "/metrics")) {
        *type = "text/plain; version=0.0.4; charset=utf-8";
        return render_metrics(sv, body);
    }
    snprintf(why, whylen, "not found; try POST %s, GET %s, /healthz or /metrics",
             sv->path_predict, sv->path_model);
    return MHD_HTTP_NOT_FOUND;
}

static enum MHD_Result serve_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    struct server *sv = cls;
    struct upload *up = *req_cls;
    struct buf body;
    const char *type, *allow;
    char why[1024] = "";
    bool post = !strcmp(method, "POST");

    (void)version;
    if (post && !up) { /* the first call: only the headers */
        up = xcalloc(1, sizeof(*up));
        buf_init(&up->body, SERVE_MAX_BODY);
        *req_cls = up;
        pthread_mutex_lock(&sv->stats_mu);
        sv->in_flight++; /* until serve_done */
        pthread_mutex_unlock(&sv->stats_mu);
        return MHD_YES;
    }
    if (post && *upload_data_size) { /* a piece of the body: kept up to the limit */
        if (!up->too_big && buf_append(&up->body, upload_data, *upload_data_size))
            up->too_big = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    buf_init(&body, SERVE_MAX_REPLY);
    unsigned st = route(sv, url, post, up, &body, &type, &allow, why, sizeof(why));
    enum MHD_Result r = st == MHD_HTTP_OK ? httpd_reply(conn, st, type, &body)
                                          : reply_error(conn, sv, st, why, allow);
    buf_cleanup(&body);
    return r;
}

static void serve_done(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode code)
{
    struct server *sv = cls;
    struct upload *up = *req_cls;
    (void)conn, (void)code;
    if (up) {
        buf_cleanup(&up->body);
        free(up);
        *req_cls = NULL;
        pthread_mutex_lock(&sv->stats_mu);
        sv->in_flight--;
        pthread_mutex_unlock(&sv->stats_mu);
    }
}

/* After SIGTERM: no new connections (the listening socket is closed: a Service sends new
 * requests to other replicas), the requests already received are answered; up to
 * SERVE_DRAIN_S, within Kubernetes' default 30 s grace period. */
static void drain(struct MHD_Daemon *d, struct server *sv)
{
    const struct timespec tick = {0, 10 * 1000 * 1000};
    MHD_socket ls = MHD_quiesce_daemon(d);
    unsigned left = 0;
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    for (int i = 0; i < SERVE_DRAIN_S * 100; i++, nanosleep(&tick, NULL)) {
        pthread_mutex_lock(&sv->stats_mu);
        left = sv->in_flight;
        pthread_mutex_unlock(&sv->stats_mu);
        if (!left)
            return;
    }
    fprintf(stderr, "gantry-predict: %u requests still unanswered after %d s; stopping\n", left,
            SERVE_DRAIN_S);
}

/* sv's name (--name, else the job directory's: <job>/step-N, or the directory itself), its JSON
 * literal and the two paths. 0 or an exit status. */
static int name_model(struct server *sv, const struct pred *p)
{
    char d[4096];
    const char *nm = p->o.name;
    if (!nm) {
        snprintf(d, sizeof(d), "%s", p->dir);
        char *b = strrchr(d, '/');
        if (b && !strncmp(b + 1, "step-", 5) && b != d) {
            *b = '\0';
            b = strrchr(d, '/');
        }
        nm = b ? b + 1 : d;
    }
    for (int i = 0; i < p->card.labels.n; i++) /* none for a regression model */
        if (strlen(p->quoted[i]) > sv->max_quoted)
            sv->max_quoted = strlen(p->quoted[i]);
    json_t *qn = json_string(nm);
    sv->quoted_name = qn ? json_dumps(qn, JSON_ENCODE_ANY) : NULL;
    json_decref(qn);
    if (!*nm || strlen(nm) >= sizeof(sv->name) || strpbrk(nm, "/?#: ") || !sv->quoted_name) {
        fprintf(stderr, "gantry-predict: the model's name \"%.64s\": give --name, UTF-8 without "
                        "'/', '?', '#', ':' or spaces, at most %zu bytes\n", nm,
                sizeof(sv->name) - 1);
        return DIST_EXIT_USAGE;
    }
    memcpy(sv->name, nm, strlen(nm) + 1);
    snprintf(sv->path_model, sizeof(sv->path_model), "/v1/models/%s", sv->name);
    snprintf(sv->path_predict, sizeof(sv->path_predict), "/v1/models/%s:predict", sv->name);
    return 0;
}

/* Starts the daemon on --bind:--serve. NULL after saying why (*rc the exit status). */
static struct MHD_Daemon *start(struct server *sv, const struct pred *p, int *rc)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->o.serve);
    if (inet_pton(AF_INET, p->o.bind, &sa.sin_addr) != 1) {
        fprintf(stderr, "gantry-predict: --bind %s: give a numeric IPv4 address such as 0.0.0.0\n",
                p->o.bind);
        *rc = DIST_EXIT_USAGE;
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
            MHD_USE_ITC | MHD_USE_ERROR_LOG, (uint16_t)p->o.serve, NULL, NULL,
        serve_handle, sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, serve_done, sv, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "gantry-predict: could not listen on %s:%d (is the port in use?); pick "
                        "another with --serve\n", p->o.bind, p->o.serve);
        *rc = DIST_EXIT_UNAVAIL;
    }
    return d;
}

int predict_serve(struct pred *p)
{
    struct server sv = {.p = p, .hold = getenv("GANTRY_PREDICT_TEST_HOLD")};
    struct MHD_Daemon *d = NULL;
    sigset_t stop;
    int sig = 0, rc;

    /* SIGTERM/SIGINT are waited for here: blocked before the daemon's thread starts */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    pthread_mutex_init(&sv.model_mu, NULL);
    pthread_mutex_init(&sv.stats_mu, NULL);
    if (!(rc = name_model(&sv, p)) && (d = start(&sv, p, &rc))) {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "gantry-predict: serving %s on %s:%u: POST %s, GET %s, /healthz, "
                        "/metrics\n", sv.name, p->o.bind,
                info ? info->port : (unsigned)p->o.serve, sv.path_predict, sv.path_model);
        sigwait(&stop, &sig);
        drain(d, &sv);
        MHD_stop_daemon(d);
        fprintf(stderr, "gantry-predict: %s: stopped after %llu requests (%llu refused), %llu "
                        "documents\n", strsignal(sig), sv.req_ok, sv.req_bad, sv.docs);
    }
    free(sv.quoted_name);
    pthread_mutex_destroy(&sv.model_mu);
    pthread_mutex_destroy(&sv.stats_mu);
    return rc;
}

