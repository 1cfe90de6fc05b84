#include "operator/kube/kube_err.h"

#include <string.h>

const char *op_strerror(int rc)
{
    switch (rc) {
    case OP_OK:
        return "success";
    case OP_EINVAL:
        return "invalid argument";
    case OP_ECONFIG:
        return "bad or missing configuration";
    case OP_EIO:
        return "local I/O error";
    case OP_EHTTP:
        return "transport error (connect, TLS or connection reset)";
    case OP_ETIMEDOUT:
        return "timed out";
    case OP_EPARSE:
        return "unparseable response or file";
    case OP_ETOOBIG:
        return "input over its size limit";
    case OP_ENOTFOUND:
        return "not found (404)";
    case OP_ECONFLICT:
        return "conflict (409): stale resourceVersion, failed precondition or field owner";
    case OP_EEXIST:
        return "already exists (409)";
    case OP_EGONE:
        return "gone (410): resourceVersion or continue token expired";
    case OP_EUNAUTHORIZED:
        return "unauthorized (401): missing or rejected credentials";
    case OP_EFORBIDDEN:
        return "forbidden (403): RBAC does not allow this verb";
    case OP_EINVALID:
        return "invalid object (422)";
    case OP_EBADREQUEST:
        return "bad request (400)";
    case OP_ETOOMANY:
        return "too many requests (429) after retries";
    case OP_ESERVER:
        return "server error (5xx) after retries";
    case OP_EAPI:
        return "unexpected API status";
    case OP_ECANCELED:
        return "canceled";
    case OP_EAUTH:
        return "getting credentials failed";
    case OP_ENOTLEADER:
        return "not the leader";
    default:
        return "unknown error";
    }
}

int op_from_http(long code, const char *reason)
{
    if (code < 300)
        return OP_OK;
    switch (code) {
    case 400:
    case 405:
    case 406:
    case 415:
        return OP_EBADREQUEST;
    case 401:
        return OP_EUNAUTHORIZED;
    case 403:
        return OP_EFORBIDDEN;
    case 404:
        return OP_ENOTFOUND;
    case 409:
        /* The same code means two things; only the reason tells them apart. */
        return reason && strcmp(reason, "AlreadyExists") == 0 ? OP_EEXIST : OP_ECONFLICT;
    case 410:
        return OP_EGONE;
    case 422:
        return OP_EINVALID;
    case 429:
        return OP_ETOOMANY;
    case 504:
        return OP_ETIMEDOUT;
    default:
        return code >= 500 ? OP_ESERVER : OP_EAPI;
    }
}
