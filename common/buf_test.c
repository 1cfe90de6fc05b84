#include "common/buf.h"

#include <stdlib.h>

#include "common/test.h"

static void test_append_and_terminate(void)
{
    struct buf b;

    buf_init(&b, 1024);
    TEST_EQ_STR(buf_ptr(&b), "");
    TEST_EQ_INT(buf_append(&b, "abc", 3), 0);
    TEST_EQ_INT(buf_puts(&b, "def"), 0);
    TEST_EQ_INT(buf_printf(&b, "-%d-%s", 42, "x"), 0);
    TEST_EQ_STR(buf_ptr(&b), "abcdef-42-x");
    TEST_EQ_INT(buf_len(&b), 11);
    buf_cleanup(&b);
}

static void test_limit_is_an_error_and_keeps_contents(void)
{
    struct buf b;
    char big[100];

    memset(big, 'x', sizeof(big));
    buf_init(&b, 10);
    TEST_EQ_INT(buf_append(&b, "0123456789", 10), 0);
    TEST_EQ_INT(buf_append(&b, "z", 1), BUF_ETOOBIG);
    TEST_EQ_INT(buf_printf(&b, "%d", 7), BUF_ETOOBIG);
    TEST_EQ_STR(buf_ptr(&b), "0123456789");
    buf_reset(&b);
    TEST_EQ_INT(buf_append(&b, big, sizeof(big)), BUF_ETOOBIG);
    TEST_EQ_INT(buf_len(&b), 0);
    /* Exactly at the limit is allowed; the terminator does not count. */
    TEST_EQ_INT(buf_append(&b, big, 10), 0);
    TEST_EQ_INT(buf_len(&b), 10);
    buf_cleanup(&b);
}

static void test_growth_across_many_appends(void)
{
    struct buf b;
    int i;

    buf_init(&b, 1 << 20);
    for (i = 0; i < 10000; i++)
        TEST_CHECK(buf_append(&b, "0123456789", 10) == 0);
    TEST_EQ_INT(buf_len(&b), 100000);
    TEST_CHECK(buf_ptr(&b)[99999] == '9' && buf_ptr(&b)[100000] == '\0');
    buf_cleanup(&b);
}

static void test_consume_and_take(void)
{
    struct buf b;
    size_t len;
    char *s;

    buf_init(&b, 64);
    TEST_EQ_INT(buf_puts(&b, "line1\nline2\n"), 0);
    buf_consume(&b, 6);
    TEST_EQ_STR(buf_ptr(&b), "line2\n");
    s = buf_take(&b, &len);
    TEST_EQ_STR(s, "line2\n");
    TEST_EQ_INT(len, 6);
    TEST_EQ_INT(buf_len(&b), 0);
    TEST_EQ_STR(buf_ptr(&b), "");
    free(s);
    buf_consume(&b, 100); /* consuming more than there is empties the buffer */
    TEST_EQ_INT(buf_len(&b), 0);
    buf_cleanup(&b);
}

int main(void)
{
    TEST_RUN(test_append_and_terminate);
    TEST_RUN(test_limit_is_an_error_and_keeps_contents);
    TEST_RUN(test_growth_across_many_appends);
    TEST_RUN(test_consume_and_take);
    return test_summary();
}
