/*
 * kube_err.h - the operator's result codes (STYLE.md section 3).
 *
 * Every action function in the operator and in its Kubernetes client returns 0 or a negative
 * OP_E* value. The API-facing codes mirror the reasons of a Kubernetes Status object (NotFound,
 * Conflict, AlreadyExists, Expired/Gone, Forbidden, ...) so callers can switch on them without
 * parsing text; the full Status (code, reason, message) stays available from the client
 * (kube_last_status() in kube.h). errno and CURLcode are turned into these where the call is made.
 */
#ifndef GANTRY_KUBE_ERR_H
#define GANTRY_KUBE_ERR_H

enum op_err {
    OP_OK = 0,
    OP_EINVAL = -1,    /* a bad argument from the caller (a programming error) */
    OP_ECONFIG = -2,   /* bad or missing configuration (kubeconfig, flags, env) */
    OP_EIO = -3,       /* reading a local file or running a process failed */
    OP_EHTTP = -4,     /* transport: DNS, connect, TLS, reset; retried for idempotent verbs */
    OP_ETIMEDOUT = -5, /* the call's deadline passed */
    OP_EPARSE = -6,    /* a response or file that is not the JSON/YAML we expect */
    OP_ETOOBIG = -7,   /* input over its named limit (KUBE_MAX_BODY, WATCH_MAX_LINE, ...) */
    OP_ENOTFOUND = -8, /* 404 NotFound */
    OP_ECONFLICT = -9, /* 409 Conflict: stale resourceVersion, failed precondition, SSA owner */
    OP_EEXIST = -10,   /* 409 AlreadyExists */
    OP_EGONE = -11,    /* 410 Gone / Expired: resourceVersion or continue token too old */
    OP_EUNAUTHORIZED = -12, /* 401: no or bad credentials */
    OP_EFORBIDDEN = -13,    /* 403: RBAC denies the verb */
    OP_EINVALID = -14,      /* 422 Invalid: the object failed validation */
    OP_EBADREQUEST = -15,   /* 400 BadRequest, 405, 406, 415 */
    OP_ETOOMANY = -16,      /* 429 still after the retries */
    OP_ESERVER = -17,       /* 5xx still after the retries */
    OP_EAPI = -18,          /* another non-2xx status */
    OP_ECANCELED = -19,     /* stopped on request (shutdown) */
    OP_EAUTH = -20,         /* getting credentials failed (exec plugin, token file) */
    OP_ENOTLEADER = -21,    /* leadership lost or never held */
};
#define OP_ERR_MIN (-21)

/* A static English description ("conflict (409): ..."); never NULL, also for unknown codes. */
const char *op_strerror(int rc);

/* Maps an HTTP status code (>= 300) and the Status reason (may be NULL) to an OP_E* value. */
int op_from_http(long code, const char *reason);

#endif /* GANTRY_KUBE_ERR_H */
