#include "operator/kube/kube_err.h"

#include "common/test.h"

static void test_strerror_covers_every_code(void)
{
    for (int rc = 0; rc >= OP_ERR_MIN; rc--)
        TEST_CHECK(strcmp(op_strerror(rc), "unknown error") != 0);
    TEST_EQ_STR(op_strerror(-999), "unknown error");
}

static void test_http_mapping(void)
{
    TEST_EQ_INT(op_from_http(200, NULL), OP_OK);
    TEST_EQ_INT(op_from_http(404, "NotFound"), OP_ENOTFOUND);
    TEST_EQ_INT(op_from_http(409, "Conflict"), OP_ECONFLICT);
    TEST_EQ_INT(op_from_http(409, "AlreadyExists"), OP_EEXIST);
    TEST_EQ_INT(op_from_http(410, "Expired"), OP_EGONE);
    TEST_EQ_INT(op_from_http(403, "Forbidden"), OP_EFORBIDDEN);
    TEST_EQ_INT(op_from_http(422, "Invalid"), OP_EINVALID);
    TEST_EQ_INT(op_from_http(429, NULL), OP_ETOOMANY);
    TEST_EQ_INT(op_from_http(503, NULL), OP_ESERVER);
    TEST_EQ_INT(op_from_http(418, NULL), OP_EAPI);
}

int main(void)
{
    TEST_RUN(test_strerror_covers_every_code);
    TEST_RUN(test_http_mapping);
    return test_summary();
}
