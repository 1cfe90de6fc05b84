#include "common/httpd.h"

#include <stdlib.h>

#include "common/xalloc.h"

enum MHD_Result httpd_reply(struct MHD_Connection *conn, unsigned status, const char *type,
                            struct buf *body)
{
    return httpd_reply_allow(conn, status, type, body, "GET, HEAD");
}

enum MHD_Result httpd_reply_allow(struct MHD_Connection *conn, unsigned status, const char *type,
                                  struct buf *body, const char *allow)
{
    size_t len = 0;
    char *p = buf_take(body, &len);
    struct MHD_Response *resp;
    enum MHD_Result r;

    if (!p)
        p = xstrdup("");
    resp = MHD_create_response_from_buffer(len, p, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(p);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}
