#include "operator/kube/log.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/test.h"

/* Runs fn with the logger pointed at a temp file, returns the lines as a JSON array. */
static json_t *capture(void (*fn)(void))
{
    char path[] = "/tmp/gantry-log-XXXXXX";
    int fd = mkstemp(path);
    json_t *lines = json_array();
    char line[LOG_MAX_LINE + 2];
    FILE *f;

    unlink(path);
    log_set_fd(fd);
    fn();
    log_set_fd(2);
    lseek(fd, 0, SEEK_SET);
    f = fdopen(fd, "r");
    while (fgets(line, sizeof(line), f)) {
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        TEST_CHECK(o != NULL); /* every line is one JSON object */
        if (o)
            json_array_append_new(lines, o);
    }
    fclose(f);
    return lines;
}

static void emit_basic(void)
{
    log_set_level(LOG_LEVEL_INFO);
    log_info("Created Pod", "{s:s, s:i}", "trainjob", "ml/spam", "replica", 3);
    log_debug("Not shown", "{s:s}", "x", "y");
    log_warn("Watch restarted");
    log_error("Quote \" and newline \n kept", "{s:b}", "ok", 1);
}

static void test_json_lines_and_levels(void)
{
    json_t *lines = capture(emit_basic);

    TEST_EQ_INT(json_array_size(lines), 3);
    json_t *l0 = json_array_get(lines, 0);
    TEST_EQ_STR(json_string_value(json_object_get(l0, "level")), "info");
    TEST_EQ_STR(json_string_value(json_object_get(l0, "msg")), "Created Pod");
    TEST_EQ_STR(json_string_value(json_object_get(l0, "trainjob")), "ml/spam");
    TEST_EQ_INT(json_integer_value(json_object_get(l0, "replica")), 3);
    TEST_CHECK(json_string_length(json_object_get(l0, "ts")) == 24);
    TEST_EQ_STR(json_string_value(json_object_get(json_array_get(lines, 1), "level")), "warn");
    TEST_EQ_STR(json_string_value(json_object_get(json_array_get(lines, 2), "msg")),
                "Quote \" and newline \n kept");
    json_decref(lines);
}

static int side_effects;
static const char *counted(void)
{
    side_effects++;
    return "v";
}

static void emit_disabled(void)
{
    log_set_level(LOG_LEVEL_WARN);
    for (int i = 0; i < 10; i++)
        log_info("Skipped", "{s:s}", "k", counted());
    log_set_level(LOG_LEVEL_INFO);
}

static void test_level_checked_before_formatting(void)
{
    json_t *lines = capture(emit_disabled);
    TEST_EQ_INT(json_array_size(lines), 0);
    TEST_EQ_INT(side_effects, 0); /* arguments were not even evaluated */
    json_decref(lines);
}

static void emit_repeats(void)
{
    for (int i = 0; i < 50; i++)
        log_warn("Watch failed", "{s:s}", "resource", "pods");
    log_warn("Watch failed", "{s:s}", "resource", "services"); /* different fields: own key */
}

static void test_repeated_warnings_rate_limited(void)
{
    json_t *lines = capture(emit_repeats);
    /* LOG_BURST of the 50 repeats, plus the one with other fields (unless the window turned). */
    TEST_CHECK(json_array_size(lines) >= LOG_BURST + 1);
    TEST_CHECK(json_array_size(lines) <= 2 * LOG_BURST + 1);
    json_decref(lines);
}

static void emit_long(void)
{
    static char big[LOG_MAX_LINE * 2];
    memset(big, 'a', sizeof(big) - 1);
    log_info("Long", "{s:s}", "body", big);
}

static void test_long_line_stays_valid(void)
{
    json_t *lines = capture(emit_long);
    TEST_EQ_INT(json_array_size(lines), 1);
    TEST_CHECK(json_is_true(json_object_get(json_array_get(lines, 0), "truncated")));
    json_decref(lines);
}

static void test_parse_level(void)
{
    enum log_level l;
    TEST_EQ_INT(log_parse_level("warning", &l), 0);
    TEST_EQ_INT(l, LOG_LEVEL_WARN);
    TEST_EQ_INT(log_parse_level("debug", &l), 0);
    TEST_EQ_INT(l, LOG_LEVEL_DEBUG);
    TEST_EQ_INT(log_parse_level("loud", &l), -1);
}

int main(void)
{
    TEST_RUN(test_json_lines_and_levels);
    TEST_RUN(test_level_checked_before_formatting);
    TEST_RUN(test_repeated_warnings_rate_limited);
    TEST_RUN(test_long_line_stays_valid);
    TEST_RUN(test_parse_level);
    return test_summary();
}
