/*
 * kube_config.h - where the Kubernetes API is and how to authenticate to it.
 *
 * Sources, in the order kube_config_load() tries them: an explicit kubeconfig path (a flag),
 * $KUBECONFIG (':'-separated files merged as kubectl does: for clusters/contexts/users the first
 * file that defines a name wins, current-context comes from the first file that sets it), the
 * in-cluster service account (when $KUBERNETES_SERVICE_HOST is set), then ~/.kube/config.
 *
 * Supported: server, certificate-authority(-data), insecure-skip-tls-verify (only when set true),
 * tls-server-name, token, tokenFile, client-certificate(-data), client-key(-data), exec credential
 * plugins (client.authentication.k8s.io/v1 and v1beta1) with expirationTimestamp, context
 * namespace. Relative file paths are relative to the kubeconfig that names them. Inline
 * certificate data stays in memory (it is handed to libcurl as blobs), never written to disk.
 * Not supported: auth-provider (gcp/oidc legacy plugins), username/password, proxy-url.
 *
 * Errors come back as OP_ECONFIG with one message in err that names the file, the field and
 * what to do, e.g. "kubeconfig /x/config: context "dev": user "bob" not found in users; check
 * the context's user field or run kubectl config get-users".
 * Not thread-safe: each struct kube_client holds its own copy (kube_config_dup()).
 */
#ifndef GANTRY_KUBE_CONFIG_H
#define GANTRY_KUBE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define KUBE_CONFIG_MAX_FILE (4u << 20) /* a kubeconfig larger than this is refused */
#define KUBE_TOKEN_REREAD_S  60 /* token files (projected SA tokens) are re-read this often */
#define KUBE_EXEC_TIMEOUT_S  30 /* an exec plugin that takes longer is killed */
#define KUBE_EXEC_MAX_OUTPUT (1u << 20) /* ... or prints more than this */
#define KUBE_SA_DIR          "/var/run/secrets/kubernetes.io/serviceaccount"

/* Bytes in memory (PEM). Owned by the struct that holds it. */
struct kube_blob {
    unsigned char *data;
    size_t len;
};

struct kube_exec {
    char *command;
    char **args; /* NULL-terminated */
    char **env;  /* "NAME=value", NULL-terminated; added to the plugin's environment */
    char *api_version;
    char *dir; /* directory of the kubeconfig, for a relative command */
};

struct kube_config {
    char *server;          /* "https://host:port" without a trailing '/'; IPv6 hosts bracketed */
    char *tls_server_name; /* NULL: verify against the server's host */
    bool insecure;         /* insecure-skip-tls-verify: true; only when the kubeconfig says so */
    char *ca_file;
    struct kube_blob ca_data;
    char *cert_file, *key_file;
    struct kube_blob cert_data, key_data;
    char *token; /* current bearer token (static, read from token_file or from exec) */
    char *token_file;
    time_t token_read_at;
    struct kube_exec *exec;
    time_t exec_expiry; /* 0: the plugin's credential does not expire; refreshed on 401 */
    bool exec_have;     /* the plugin has run and its credential is loaded */
    char *namespace;    /* the context's namespace, the in-cluster one, or "default" */
    char *context;      /* context name, or "in-cluster" */
    char *source;       /* where it came from, for messages */
};

/*
 * Loads a config into *out (new; kube_config_free()). explicit_path: a kubeconfig path or list
 * (e.g. from --kubeconfig) or NULL; context: overrides current-context, or NULL.
 */
int kube_config_load(const char *explicit_path, const char *context, struct kube_config **out,
                     char *err, size_t errlen) __attribute__((warn_unused_result));
/* Only the kubeconfig file(s) in paths (':'-separated). */
int kube_config_from_kubeconfig(const char *paths, const char *context, struct kube_config **out,
                                char *err, size_t errlen) __attribute__((warn_unused_result));
/* Only YAML text (tests, fuzzing); name is used in messages and dir for relative paths. */
int kube_config_from_yaml(const char *yaml, size_t len, const char *name, const char *dir,
                          const char *context, struct kube_config **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* In-cluster: $KUBERNETES_SERVICE_HOST/_PORT and sa_dir (NULL: KUBE_SA_DIR). */
int kube_config_in_cluster(const char *sa_dir, struct kube_config **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Brings the credential up to date: re-reads token_file every KUBE_TOKEN_REREAD_S, runs the exec
 * plugin when it has not run or its credential expires within 10 s. force: do it now (after a
 * 401). 0 or OP_EAUTH with err filled.
 */
int kube_config_refresh(struct kube_config *c, bool force, char *err, size_t errlen)
    __attribute__((warn_unused_result));

struct kube_config *kube_config_dup(const struct kube_config *c);
void kube_config_free(struct kube_config *c);

/* YAML (one document) to JSON: mappings to objects, sequences to arrays, scalars to strings
 * (plain null/~ and empty to null). Aliases are refused (no billion laughs); depth <= 64.
 * New reference in *out; OP_EPARSE with err "line L column C: problem". */
struct json_t;
int kube_yaml_to_json(const char *yaml, size_t len, struct json_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif /* GANTRY_KUBE_CONFIG_H */
