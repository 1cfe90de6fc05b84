/*
 * kube_config.c - kubeconfig files, in-cluster config, and credentials (token file, exec plugin).
 *
 * See kube_config.h for what is supported. Every failure fills err with the file, the field and
 * a hint, since these messages are what a user sees when the operator refuses to start.
 */
#include "operator/kube/kube_config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/xalloc.h"
#include "operator/kube/kube_err.h"

extern char **environ;

/* ---------------------------------------------------------------- small helpers */

static char *xstrdup0(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static void blob_free(struct kube_blob *b)
{
    if (b->data)
        memset(b->data, 0, b->len); /* keys and tokens do not linger in freed memory */
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

static void blob_copy(struct kube_blob *dst, const struct kube_blob *src)
{
    dst->data = NULL;
    dst->len = src->len;
    if (src->data) {
        dst->data = xmalloc(src->len + 1);
        memcpy(dst->data, src->data, src->len);
        dst->data[src->len] = 0;
    }
}

static void str_free_secret(char **s)
{
    if (*s)
        memset(*s, 0, strlen(*s));
    free(*s);
    *s = NULL;
}

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Standard base64 (whitespace ignored, padding optional) into a NUL-terminated blob. */
static int b64_decode(const char *s, struct kube_blob *out)
{
    size_t n = strlen(s), o = 0;
    unsigned char *d = xmalloc(n / 4 * 3 + 4);
    unsigned acc = 0;
    int bits = 0, pad = 0;

    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i], v;
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        v = b64val(c);
        if (v < 0 || pad) {
            free(d);
            return -1;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (pad > 2 || bits >= 6) {
        free(d);
        return -1;
    }
    d[o] = 0;
    out->data = d;
    out->len = o;
    return 0;
}

/* Reads a whole file (at most max bytes) into b; errno-style message into err. */
static int read_file(const char *path, size_t max, struct buf *b, char *err, size_t errlen)
{
    char chunk[8192];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

    buf_init(b, max);
    if (fd < 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        return OP_EIO;
    }
    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "%s", strerror(errno));
            rc = OP_EIO;
            break;
        }
        if (buf_append(b, chunk, (size_t)n)) {
            snprintf(err, errlen, "larger than %zu bytes", max);
            rc = OP_ETOOBIG;
            break;
        }
    }
    close(fd);
    if (rc)
        buf_cleanup(b);
    return rc;
}

/* path relative to dir unless absolute; new string. */
static char *resolve(const char *dir, const char *path)
{
    char *r;
    size_t n;

    if (!path)
        return NULL;
    if (path[0] == '/' || !dir || !*dir)
        return xstrdup(path);
    n = strlen(dir) + strlen(path) + 2;
    r = xmalloc(n);
    snprintf(r, n, "%s/%s", dir, path);
    return r;
}

static char *trimmed_dup(const char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return xstrndup(s, n);
}

/* ---------------------------------------------------------------- kubeconfig parsing */

struct kfile {
    json_t *doc;
    char *name; /* path, for messages */
    char *dir;  /* for relative paths */
};

/* A string field: NULL when absent or null; -1 (err set) when present with another type. */
static int get_str(const json_t *o, const char *field, const char **out, const struct kfile *f,
                   const char *where, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, field);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "kubeconfig %s: %s.%s must be a string; fix the file", f->name, where,
                 field);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On", NULL};
    static const char *no[] = {"false", "False", "FALSE", "no", "No", "off", "Off", NULL};

    for (int i = 0; yes[i]; i++)
        if (strcmp(s, yes[i]) == 0)
            return *out = true, 0;
    for (int i = 0; no[i]; i++)
        if (strcmp(s, no[i]) == 0)
            return *out = false, 0;
    return -1;
}

/* The entry named name in the list field (clusters/contexts/users) of the first file having it. */
static json_t *find_named(struct kfile *files, int nfiles, const char *list, const char *inner,
                          const char *name, const struct kfile **from)
{
    for (int i = 0; i < nfiles; i++) {
        json_t *arr = json_object_get(files[i].doc, list), *e;
        size_t k;
        json_array_foreach(arr, k, e)
        {
            json_t *n = json_object_get(e, "name");
            if (json_is_string(n) && strcmp(json_string_value(n), name) == 0) {
                json_t *in = json_object_get(e, inner);
                *from = &files[i];
                return json_is_object(in) ? in : NULL;
            }
        }
    }
    return NULL;
}

static int parse_exec(json_t *ex, const struct kfile *f, struct kube_config *c, char *err,
                      size_t errlen)
{
    const char *cmd = NULL, *apiv = NULL;
    json_t *args = json_object_get(ex, "args"), *env = json_object_get(ex, "env"), *e;
    size_t i, n;
    struct kube_exec *x;

    if (get_str(ex, "command", &cmd, f, "users[].user.exec", err, errlen) ||
        get_str(ex, "apiVersion", &apiv, f, "users[].user.exec", err, errlen))
        return OP_ECONFIG;
    if (!cmd || !*cmd) {
        snprintf(err, errlen,
                 "kubeconfig %s: user.exec.command is empty; set the credential "
                 "plugin to run (e.g. aws, gke-gcloud-auth-plugin)",
                 f->name);
        return OP_ECONFIG;
    }
    if (!apiv)
        apiv = "client.authentication.k8s.io/v1";
    if (strcmp(apiv, "client.authentication.k8s.io/v1") != 0 &&
        strcmp(apiv, "client.authentication.k8s.io/v1beta1") != 0) {
        snprintf(err, errlen,
                 "kubeconfig %s: user.exec.apiVersion \"%s\" is not supported; use "
                 "client.authentication.k8s.io/v1 or v1beta1",
                 f->name, apiv);
        return OP_ECONFIG;
    }
    x = xcalloc(1, sizeof(*x));
    c->exec = x;
    x->command = xstrdup(cmd);
    x->api_version = xstrdup(apiv);
    x->dir = xstrdup0(f->dir);
    n = json_is_array(args) ? json_array_size(args) : 0;
    x->args = xcalloc(n + 1, sizeof(char *));
    for (i = 0; i < n; i++) {
        const char *a = json_string_value(json_array_get(args, i));
        if (!a) {
            snprintf(err, errlen, "kubeconfig %s: user.exec.args[%zu] must be a string", f->name,
                     i);
            return OP_ECONFIG;
        }
        x->args[i] = xstrdup(a);
    }
    n = json_is_array(env) ? json_array_size(env) : 0;
    x->env = xcalloc(n + 1, sizeof(char *));
    json_array_foreach(env, i, e)
    {
        const char *k = json_string_value(json_object_get(e, "name"));
        const char *v = json_string_value(json_object_get(e, "value"));
        size_t len;
        if (!k || !v) {
            snprintf(err, errlen, "kubeconfig %s: user.exec.env[%zu] needs string name and value",
                     f->name, i);
            return OP_ECONFIG;
        }
        len = strlen(k) + strlen(v) + 2;
        x->env[i] = xmalloc(len);
        snprintf(x->env[i], len, "%s=%s", k, v);
    }
    return 0;
}

static int parse_cluster(json_t *cl, const struct kfile *f, struct kube_config *c, char *err,
                         size_t errlen)
{
    const char *server, *ca, *cad, *insecure, *sni;
    const char *w = "clusters[].cluster";
    size_t n;

    if (get_str(cl, "server", &server, f, w, err, errlen) ||
        get_str(cl, "certificate-authority", &ca, f, w, err, errlen) ||
        get_str(cl, "certificate-authority-data", &cad, f, w, err, errlen) ||
        get_str(cl, "tls-server-name", &sni, f, w, err, errlen))
        return OP_ECONFIG;
    if (!server || !*server) {
        snprintf(err, errlen,
                 "kubeconfig %s: cluster \"%s\" has no server; set clusters[].cluster"
                 ".server to the API server URL (https://host:port)",
                 f->name, c->context);
        return OP_ECONFIG;
    }
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0) {
        snprintf(err, errlen,
                 "kubeconfig %s: server \"%s\" is not an http(s) URL; write it as "
                 "https://host:port",
                 f->name, server);
        return OP_ECONFIG;
    }
    c->server = xstrdup(server);
    n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/')
        c->server[--n] = 0;
    c->tls_server_name = xstrdup0(sni);
    c->ca_file = resolve(f->dir, ca);
    if (cad && b64_decode(cad, &c->ca_data)) {
        snprintf(err, errlen,
                 "kubeconfig %s: certificate-authority-data is not valid base64; "
                 "re-encode the CA PEM with base64 -w0",
                 f->name);
        return OP_ECONFIG;
    }
    /* Booleans arrive as strings from the YAML converter; "insecure" only when explicitly true. */
    json_t *iv = json_object_get(cl, "insecure-skip-tls-verify");
    insecure = json_string_value(iv);
    if (iv && !json_is_null(iv) && (!insecure || parse_bool(insecure, &c->insecure))) {
        snprintf(err, errlen, "kubeconfig %s: insecure-skip-tls-verify must be true or false",
                 f->name);
        return OP_ECONFIG;
    }
    return 0;
}

static int parse_user(json_t *u, const struct kfile *f, struct kube_config *c, char *err,
                      size_t errlen)
{
    const char *tok, *tokf, *cert, *key, *certd, *keyd;
    const char *w = "users[].user";
    json_t *ex = json_object_get(u, "exec");

    if (get_str(u, "token", &tok, f, w, err, errlen) ||
        get_str(u, "tokenFile", &tokf, f, w, err, errlen) ||
        get_str(u, "client-certificate", &cert, f, w, err, errlen) ||
        get_str(u, "client-key", &key, f, w, err, errlen) ||
        get_str(u, "client-certificate-data", &certd, f, w, err, errlen) ||
        get_str(u, "client-key-data", &keyd, f, w, err, errlen))
        return OP_ECONFIG;
    if (json_object_get(u, "auth-provider")) {
        snprintf(err, errlen,
                 "kubeconfig %s: user uses auth-provider, which is not supported; "
                 "switch to an exec credential plugin (e.g. gke-gcloud-auth-plugin, kubelogin)",
                 f->name);
        return OP_ECONFIG;
    }
    c->token = xstrdup0(tok);
    c->token_file = tok ? NULL : resolve(f->dir, tokf);
    c->cert_file = resolve(f->dir, cert);
    c->key_file = resolve(f->dir, key);
    if ((certd && b64_decode(certd, &c->cert_data)) || (keyd && b64_decode(keyd, &c->key_data))) {
        snprintf(err, errlen,
                 "kubeconfig %s: client-certificate-data or client-key-data is not "
                 "valid base64; re-encode the PEM with base64 -w0",
                 f->name);
        return OP_ECONFIG;
    }
    if ((c->cert_data.data || c->cert_file) != (c->key_data.data || c->key_file)) {
        snprintf(err, errlen,
                 "kubeconfig %s: a client certificate needs its key and the other way "
                 "round; set both client-certificate(-data) and client-key(-data)",
                 f->name);
        return OP_ECONFIG;
    }
    if (ex && !json_is_null(ex) && !c->token && !c->token_file)
        return parse_exec(ex, f, c, err, errlen);
    return 0;
}

/* Resolves context -> cluster + user across the merged files. */
static int build_config(struct kfile *files, int nfiles, const char *context,
                        struct kube_config **out, char *err, size_t errlen)
{
    struct kube_config *c = xcalloc(1, sizeof(*c));
    const struct kfile *cf = NULL, *clf = NULL, *uf = NULL;
    const char *cluster, *user, *ns;
    json_t *ctx, *cl, *u;
    const char *names = files[0].name;
    int rc = OP_ECONFIG;

    for (int i = 0; i < nfiles && !context; i++) {
        const char *cc = json_string_value(json_object_get(files[i].doc, "current-context"));
        if (cc && *cc)
            context = cc;
    }
    if (!context) {
        snprintf(err, errlen,
                 "kubeconfig %s: current-context is not set; run kubectl config "
                 "use-context NAME or pass --context",
                 names);
        goto out;
    }
    c->context = xstrdup(context);
    ctx = find_named(files, nfiles, "contexts", "context", context, &cf);
    if (!ctx) {
        snprintf(err, errlen,
                 "kubeconfig %s: context \"%s\" not found in contexts; run kubectl "
                 "config get-contexts to see the names",
                 names, context);
        goto out;
    }
    if (get_str(ctx, "cluster", &cluster, cf, "contexts[].context", err, errlen) ||
        get_str(ctx, "user", &user, cf, "contexts[].context", err, errlen) ||
        get_str(ctx, "namespace", &ns, cf, "contexts[].context", err, errlen))
        goto out;
    c->namespace = xstrdup(ns && *ns ? ns : "default");
    cl = cluster ? find_named(files, nfiles, "clusters", "cluster", cluster, &clf) : NULL;
    if (!cl) {
        snprintf(err, errlen,
                 "kubeconfig %s: context \"%s\": cluster \"%s\" not found in "
                 "clusters; check the context's cluster field",
                 cf->name, context, cluster ? cluster : "");
        goto out;
    }
    if ((rc = parse_cluster(cl, clf, c, err, errlen)))
        goto out;
    rc = OP_ECONFIG;
    if (user && *user) {
        u = find_named(files, nfiles, "users", "user", user, &uf);
        if (!u) {
            snprintf(err, errlen,
                     "kubeconfig %s: context \"%s\": user \"%s\" not found in users; "
                     "check the context's user field or run kubectl config get-users",
                     cf->name, context, user);
            goto out;
        }
        if ((rc = parse_user(u, uf, c, err, errlen)))
            goto out;
    }
    c->source = xstrdup(names);
    *out = c;
    c = NULL;
    rc = 0;
out:
    kube_config_free(c);
    return rc;
}

static int load_doc(const char *text, size_t len, struct kfile *f, char *err, size_t errlen)
{
    char perr[256];

    if (kube_yaml_to_json(text, len, &f->doc, perr, sizeof(perr))) {
        snprintf(err, errlen,
                 "kubeconfig %s: not valid YAML: %s; fix the file or point "
                 "KUBECONFIG elsewhere",
                 f->name, perr);
        return OP_ECONFIG;
    }
    if (json_is_null(f->doc)) {
        json_decref(f->doc);
        f->doc = json_object(); /* an empty file is an empty config */
    }
    if (!json_is_object(f->doc)) {
        snprintf(err, errlen,
                 "kubeconfig %s: the top level must be a mapping (apiVersion, "
                 "clusters, contexts, users)",
                 f->name);
        return OP_ECONFIG;
    }
    return 0;
}

static void kfiles_free(struct kfile *fs, int n)
{
    for (int i = 0; i < n; i++) {
        json_decref(fs[i].doc);
        free(fs[i].name);
        free(fs[i].dir);
    }
    free(fs);
}

int kube_config_from_yaml(const char *yaml, size_t len, const char *name, const char *dir,
                          const char *context, struct kube_config **out, char *err, size_t errlen)
{
    struct kfile *f = xcalloc(1, sizeof(*f));
    int rc;

    f->name = xstrdup(name ? name : "(inline)");
    f->dir = xstrdup0(dir);
    rc = load_doc(yaml, len, f, err, errlen);
    if (!rc)
        rc = build_config(f, 1, context, out, err, errlen);
    kfiles_free(f, 1);
    return rc;
}

int kube_config_from_kubeconfig(const char *paths, const char *context, struct kube_config **out,
                                char *err, size_t errlen)
{
    char *list = xstrdup(paths), *save = NULL, *p;
    struct kfile *fs = NULL;
    int n = 0, rc = OP_ECONFIG, parts = 0;
    char firsterr[512] = "";

    for (p = list; *p; p++)
        parts += *p == ':';
    fs = xcalloc((size_t)parts + 1, sizeof(*fs));
    for (p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        struct buf b;
        char ferr[256], *tmp;
        if (read_file(p, KUBE_CONFIG_MAX_FILE, &b, ferr, sizeof(ferr))) {
            /* kubectl skips missing files in a list; remember why for the all-missing case. */
            if (!firsterr[0])
                snprintf(firsterr, sizeof(firsterr),
                         "kubeconfig %s: cannot read: %s; set "
                         "KUBECONFIG or --kubeconfig to a readable file",
                         p, ferr);
            if (parts == 0 || errno != ENOENT) {
                snprintf(err, errlen, "%s", firsterr);
                goto out;
            }
            continue;
        }
        fs[n].name = xstrdup(p);
        tmp = xstrdup(p);
        fs[n].dir = xstrdup(dirname(tmp));
        free(tmp);
        rc = load_doc(buf_ptr(&b), buf_len(&b), &fs[n], err, errlen);
        n++;
        buf_cleanup(&b);
        if (rc)
            goto out;
        rc = OP_ECONFIG;
    }
    if (n == 0) {
        snprintf(err, errlen, "%s",
                 firsterr[0] ? firsterr
                             : "kubeconfig: empty path list; set "
                               "KUBECONFIG or --kubeconfig");
        goto out;
    }
    rc = build_config(fs, n, context, out, err, errlen);
out:
    kfiles_free(fs, n);
    free(list);
    return rc;
}

/* ---------------------------------------------------------------- in-cluster */

int kube_config_in_cluster(const char *sa_dir, struct kube_config **out, char *err, size_t errlen)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    struct kube_config *c;
    char path[4096], ferr[256];
    struct buf b;
    size_t n;
    int rc = OP_ECONFIG;

    if (!sa_dir)
        sa_dir = KUBE_SA_DIR;
    if (!host || !*host || !port || !*port) {
        snprintf(err, errlen,
                 "in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set, so "
                 "this is not a pod; pass --kubeconfig or set KUBECONFIG");
        return OP_ECONFIG;
    }
    c = xcalloc(1, sizeof(*c));
    c->context = xstrdup("in-cluster");
    c->source = xstrdup(sa_dir);
    n = strlen(host) + strlen(port) + 16;
    c->server = xmalloc(n);
    /* An IPv6 address needs brackets in a URL (https://[fd00::1]:443). */
    snprintf(c->server, n,
             strchr(host, ':') && host[0] != '[' ? "https://[%s]:%s" : "https://%s:%s", host, port);
    snprintf(path, sizeof(path), "%s/token", sa_dir);
    c->token_file = xstrdup(path);
    snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
    if (access(path, R_OK) != 0) {
        snprintf(err, errlen,
                 "in-cluster config: cannot read %s: %s; mount the service account "
                 "(automountServiceAccountToken: true) or pass --kubeconfig",
                 path, strerror(errno));
        goto out;
    }
    c->ca_file = xstrdup(path);
    snprintf(path, sizeof(path), "%s/namespace", sa_dir);
    if (read_file(path, 4096, &b, ferr, sizeof(ferr)) == 0) {
        c->namespace = trimmed_dup(buf_ptr(&b), buf_len(&b));
        buf_cleanup(&b);
    }
    if (!c->namespace || !*c->namespace) {
        free(c->namespace);
        c->namespace = xstrdup("default");
    }
    if ((rc = kube_config_refresh(c, true, err, errlen)))
        goto out;
    *out = c;
    c = NULL;
out:
    kube_config_free(c);
    return rc;
}

int kube_config_load(const char *explicit_path, const char *context, struct kube_config **out,
                     char *err, size_t errlen)
{
    const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
    char path[4096];

    if (explicit_path && *explicit_path)
        return kube_config_from_kubeconfig(explicit_path, context, out, err, errlen);
    if (env && *env)
        return kube_config_from_kubeconfig(env, context, out, err, errlen);
    if (getenv("KUBERNETES_SERVICE_HOST"))
        return kube_config_in_cluster(NULL, out, err, errlen);
    snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
    if (access(path, F_OK) != 0) {
        snprintf(err, errlen,
                 "no Kubernetes config: no --kubeconfig, KUBECONFIG unset, not in a "
                 "pod, and %s does not exist; pass --kubeconfig PATH",
                 path);
        return OP_ECONFIG;
    }
    return kube_config_from_kubeconfig(path, context, out, err, errlen);
}

/* ---------------------------------------------------------------- credentials */

static int read_token_file(struct kube_config *c, char *err, size_t errlen)
{
    struct buf b;
    char ferr[256];

    if (read_file(c->token_file, 1u << 20, &b, ferr, sizeof(ferr))) {
        snprintf(err, errlen,
                 "could not read token %s: %s; check the tokenFile in %s or mount "
                 "the service account token",
                 c->token_file, ferr, c->source ? c->source : "");
        return OP_EAUTH;
    }
    str_free_secret(&c->token);
    c->token = trimmed_dup(buf_ptr(&b), buf_len(&b));
    memset(b.p ? b.p : (char[1]){0}, 0, buf_len(&b));
    buf_cleanup(&b);
    c->token_read_at = time(NULL);
    return 0;
}

/* RFC 3339 ("2026-11-30T08:00:00Z", fractions and +hh:mm offsets allowed) to time_t; -1 bad. */
static time_t parse_rfc3339(const char *s)
{
    struct tm tm;
    const char *p;
    time_t t;

    memset(&tm, 0, sizeof(tm));
    p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -1;
    t = timegm(&tm);
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (*p == 'Z' || *p == 'z')
        return p[1] ? -1 : t;
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int h = atoi(p + 1), m = atoi(p + 4), off = (h * 60 + m) * 60;
        return *p == '+' ? t - off : t + off;
    }
    return -1;
}

/* Runs the plugin with a deadline; stdout (bounded) into out. */
static int run_plugin(const struct kube_exec *x, struct buf *out, char *err, size_t errlen)
{
    char info[256], *cmd = NULL, **argv = NULL, **envp = NULL;
    size_t na = 0, ne = 0, nenv = 0;
    int pipefd[2] = {-1, -1}, rc = OP_EAUTH, status;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    time_t deadline = time(NULL) + KUBE_EXEC_TIMEOUT_S;

    while (x->args[na])
        na++;
    while (x->env[ne])
        ne++;
    while (environ[nenv])
        nenv++;
    cmd = strchr(x->command, '/') ? resolve(x->dir, x->command) : xstrdup(x->command);
    argv = xcalloc(na + 2, sizeof(char *));
    argv[0] = cmd;
    memcpy(argv + 1, x->args, na * sizeof(char *));
    envp = xcalloc(nenv + ne + 2, sizeof(char *));
    memcpy(envp, environ, nenv * sizeof(char *));
    memcpy(envp + nenv, x->env, ne * sizeof(char *));
    snprintf(info, sizeof(info),
             "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":"
             "\"ExecCredential\",\"spec\":{\"interactive\":false}}",
             x->api_version);
    envp[nenv + ne] = info;
    if (pipe2(pipefd, O_CLOEXEC)) {
        snprintf(err, errlen, "exec plugin %s: pipe: %s", cmd, strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    status = posix_spawnp(&pid, cmd, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    pipefd[1] = -1;
    if (status) {
        snprintf(err, errlen, "exec plugin %s: cannot run: %s; install it or fix user.exec.command",
                 cmd, strerror(status));
        pid = -1;
        goto out;
    }
    for (;;) {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        char chunk[4096];
        ssize_t n;
        long left = (long)(deadline - time(NULL));
        if (left <= 0) {
            snprintf(err, errlen, "exec plugin %s: no credential after %d s; killed it", cmd,
                     KUBE_EXEC_TIMEOUT_S);
            kill(pid, SIGKILL);
            goto out;
        }
        int pr = poll(&pfd, 1, (int)(left * 1000));
        if (pr < 0 && errno != EINTR)
            goto out;
        if (pr <= 0) /* the deadline (checked above: the plugin is killed) or a signal */
            continue;
        n = read(pipefd[0], chunk, sizeof(chunk));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        if (buf_append(out, chunk, (size_t)n)) {
            snprintf(err, errlen, "exec plugin %s: printed more than %u bytes", cmd,
                     KUBE_EXEC_MAX_OUTPUT);
            kill(pid, SIGKILL);
            goto out;
        }
    }
    rc = 0;
out:
    if (pid > 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            snprintf(err, errlen,
                     "exec plugin %s: exited with status %d; run it by hand to see "
                     "why",
                     cmd, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            rc = OP_EAUTH;
        }
    }
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    free(cmd);
    free(argv);
    free(envp);
    return rc;
}

static int run_exec(struct kube_config *c, char *err, size_t errlen)
{
    struct buf out;
    json_t *doc = NULL, *st;
    const char *apiv, *tok, *cert, *key, *exp;
    int rc;

    buf_init(&out, KUBE_EXEC_MAX_OUTPUT);
    if ((rc = run_plugin(c->exec, &out, err, errlen)))
        goto out;
    rc = OP_EAUTH;
    doc = json_loadb(buf_ptr(&out), buf_len(&out), 0, NULL);
    st = json_object_get(doc, "status");
    apiv = json_string_value(json_object_get(doc, "apiVersion"));
    if (!json_is_object(st) || !apiv || strcmp(apiv, c->exec->api_version) != 0) {
        snprintf(err, errlen,
                 "exec plugin %s: output is not an ExecCredential of %s with a "
                 "status; check the plugin's version",
                 c->exec->command, c->exec->api_version);
        goto out;
    }
    tok = json_string_value(json_object_get(st, "token"));
    cert = json_string_value(json_object_get(st, "clientCertificateData"));
    key = json_string_value(json_object_get(st, "clientKeyData"));
    exp = json_string_value(json_object_get(st, "expirationTimestamp"));
    if (!tok && !(cert && key)) {
        snprintf(err, errlen,
                 "exec plugin %s: ExecCredential has neither status.token nor "
                 "clientCertificateData+clientKeyData",
                 c->exec->command);
        goto out;
    }
    if (exp && parse_rfc3339(exp) < 0) {
        snprintf(err, errlen, "exec plugin %s: expirationTimestamp \"%s\" is not RFC 3339",
                 c->exec->command, exp);
        goto out;
    }
    str_free_secret(&c->token);
    c->token = xstrdup0(tok);
    if (cert && key) {
        /* PEM text, not base64, in an ExecCredential: keep it in memory as is. */
        blob_free(&c->cert_data);
        blob_free(&c->key_data);
        c->cert_data.data = (unsigned char *)xstrdup(cert);
        c->cert_data.len = strlen(cert);
        c->key_data.data = (unsigned char *)xstrdup(key);
        c->key_data.len = strlen(key);
    }
    c->exec_expiry = exp ? parse_rfc3339(exp) : 0;
    c->exec_have = true;
    rc = 0;
out:
    json_decref(doc);
    if (out.p)
        memset(out.p, 0, buf_len(&out));
    buf_cleanup(&out);
    return rc;
}

int kube_config_refresh(struct kube_config *c, bool force, char *err, size_t errlen)
{
    time_t now = time(NULL);

    if (c->token_file && (force || !c->token || now - c->token_read_at >= KUBE_TOKEN_REREAD_S))
        return read_token_file(c, err, errlen);
    if (c->exec && (force || !c->exec_have || (c->exec_expiry && c->exec_expiry - now < 10)))
        return run_exec(c, err, errlen);
    return 0;
}

/* ---------------------------------------------------------------- copy and free */

static char **strv_dup(char **v)
{
    size_t n = 0;
    char **r;

    while (v && v[n])
        n++;
    r = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        r[i] = xstrdup(v[i]);
    return r;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

struct kube_config *kube_config_dup(const struct kube_config *c)
{
    struct kube_config *d = xcalloc(1, sizeof(*d));

    *d = *c;
    d->server = xstrdup0(c->server);
    d->tls_server_name = xstrdup0(c->tls_server_name);
    d->ca_file = xstrdup0(c->ca_file);
    d->cert_file = xstrdup0(c->cert_file);
    d->key_file = xstrdup0(c->key_file);
    d->token = xstrdup0(c->token);
    d->token_file = xstrdup0(c->token_file);
    d->namespace = xstrdup0(c->namespace);
    d->context = xstrdup0(c->context);
    d->source = xstrdup0(c->source);
    blob_copy(&d->ca_data, &c->ca_data);
    blob_copy(&d->cert_data, &c->cert_data);
    blob_copy(&d->key_data, &c->key_data);
    if (c->exec) {
        d->exec = xcalloc(1, sizeof(*d->exec));
        d->exec->command = xstrdup0(c->exec->command);
        d->exec->api_version = xstrdup0(c->exec->api_version);
        d->exec->dir = xstrdup0(c->exec->dir);
        d->exec->args = strv_dup(c->exec->args);
        d->exec->env = strv_dup(c->exec->env);
    }
    return d;
}

void kube_config_free(struct kube_config *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->tls_server_name);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    str_free_secret(&c->token);
    free(c->token_file);
    free(c->namespace);
    free(c->context);
    free(c->source);
    blob_free(&c->ca_data);
    blob_free(&c->cert_data);
    blob_free(&c->key_data);
    if (c->exec) {
        free(c->exec->command);
        free(c->exec->api_version);
        free(c->exec->dir);
        strv_free(c->exec->args);
        strv_free(c->exec->env);
        free(c->exec);
    }
    free(c);
}
