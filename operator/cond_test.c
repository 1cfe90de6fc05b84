/* Conditions: lastTransitionTime moves only on a status flip; JSON round trip; RFC 3339 times. */
#include "operator/cond.h"

#include "common/test.h"

#include <string.h>

static void test_time_round_trip(void)
{
    char buf[32];
    time_t t = 0;

    TEST_EQ_INT(cond_parse_time("2026-11-30T07:03:47Z", &t), 0);
    TEST_EQ_INT(t, 1796022227LL);
    cond_fmt_time(t, buf, sizeof(buf));
    TEST_EQ_STR(buf, "2026-11-30T07:03:47Z");
    TEST_EQ_INT(cond_parse_time("2026-11-30T08:03:47.123456+01:00", &t), 0);
    TEST_EQ_INT(t, 1796022227LL);
    TEST_EQ_INT(cond_parse_time("2026-11-30T07:03:47", &t), -1);
    TEST_EQ_INT(cond_parse_time("yesterday", &t), -1);
    TEST_EQ_INT(cond_parse_time("2026-11-30T07:03:47Zjunk", &t), -1);
}

static void test_transition_time_only_on_flip(void)
{
    struct cond_list l = {0};

    TEST_CHECK(cond_set(&l, COND_RUNNING, true, "AllWorkersRunning", "4/4", 100, 1));
    TEST_CHECK(!cond_set(&l, COND_RUNNING, true, "AllWorkersRunning", "4/4 again", 200, 2));
    TEST_EQ_INT(cond_find(&l, COND_RUNNING)->last_transition, 100);
    TEST_EQ_STR(cond_find(&l, COND_RUNNING)->message, "4/4 again");
    TEST_EQ_INT(cond_find(&l, COND_RUNNING)->observed_generation, 2);
    TEST_CHECK(cond_set(&l, COND_RUNNING, false, "GangRestarting", "x", 300, 2));
    TEST_EQ_INT(cond_find(&l, COND_RUNNING)->last_transition, 300);
    TEST_CHECK(!cond_is_true(&l, COND_RUNNING));
    /* clear: only an existing True condition flips */
    TEST_CHECK(!cond_clear(&l, COND_RESTARTING, "R", "m", 400, 2));
    TEST_CHECK(cond_find(&l, COND_RESTARTING) == NULL);
    TEST_CHECK(!cond_clear(&l, COND_RUNNING, "R", "m", 400, 2));
    TEST_EQ_INT(cond_find(&l, COND_RUNNING)->last_transition, 300);
}

/* Input that our own output must survive (fuzz_rec found the first): a message cut at the
 * limit inside a two-byte character, and a reason the API would refuse. */
static void test_cut_on_characters_and_bad_reasons(void)
{
    char msg[2 * COND_MESSAGE_MAX + 1], reason[200];
    size_t i;
    for (i = 0; i + 2 < sizeof(msg); i += 2)
        msg[i] = (char)0xC3, msg[i + 1] = (char)0xA9; /* e acute, UTF-8 */
    msg[i] = '\0';
    memset(reason, 'A', sizeof(reason) - 1), reason[sizeof(reason) - 1] = '\0';
    json_t *in = json_pack("[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]",
                           "type", "Created", "status", "True", "reason", "Tr\xc3\xa9s", "message", msg,
                           "type", "Running", "status", "True", "reason", reason, "message", "m",
                           "type", "Failed", "status", "False", "reason", "Pod:Lost,Again_2",
                           "message", "");
    struct cond_list l;
    TEST_CHECK(in != NULL);
    cond_list_from_json(&l, in);
    TEST_EQ_INT(l.n, 3);
    TEST_EQ_STR(l.c[0].reason, "Unknown");  /* not ASCII */
    TEST_EQ_STR(l.c[1].reason, "Unknown");  /* longer than ours */
    TEST_EQ_STR(l.c[2].reason, "Pod:Lost,Again_2");
    TEST_EQ_INT(strlen(l.c[0].message), COND_MESSAGE_MAX - 2); /* 510: whole characters */
    json_t *out = cond_list_to_json(&l);
    TEST_EQ_INT(json_array_size(out), 3); /* none dropped */
    struct cond_list back;
    cond_list_from_json(&back, out);
    json_t *again = cond_list_to_json(&back);
    TEST_CHECK(json_equal(out, again)); /* a fixed point */
    json_decref(in), json_decref(out), json_decref(again);
}

static void test_json_round_trip_keeps_order(void)
{
    struct cond_list l = {0}, back;
    json_t *j;

    cond_set(&l, COND_CREATED, true, "TrainingJobCreated", "made", 1796022227, 3);
    cond_set(&l, COND_FAILED, true, "BackoffLimitExceeded", "gave up", 1796022230, 3);
    j = cond_list_to_json(&l);
    TEST_EQ_INT(json_array_size(j), 2);
    TEST_EQ_STR(json_string_value(json_object_get(json_array_get(j, 0), "type")), "Created");
    TEST_EQ_STR(json_string_value(json_object_get(json_array_get(j, 1), "lastTransitionTime")),
                "2026-11-30T07:03:50Z");
    TEST_EQ_STR(json_string_value(json_object_get(json_array_get(j, 1), "status")), "True");
    cond_list_from_json(&back, j);
    TEST_EQ_INT(back.n, 2);
    TEST_EQ_STR(back.c[1].reason, "BackoffLimitExceeded");
    TEST_EQ_INT(back.c[1].last_transition, 1796022230);
    TEST_EQ_INT(back.c[1].observed_generation, 3);
    json_decref(j);
}

static void test_from_json_is_tolerant(void)
{
    struct cond_list l;
    json_t *j = json_loads("[{\"type\":\"Running\",\"status\":\"True\"}, 7, {\"status\":\"True\"},"
                           "{\"type\":\"Running\",\"status\":\"False\"},"
                           "{\"type\":\"Failed\",\"status\":\"Unknown\",\"lastTransitionTime\":5}]",
                           0, NULL);
    cond_list_from_json(&l, j);
    TEST_EQ_INT(l.n, 2);
    TEST_CHECK(cond_is_true(&l, "Running")); /* the first entry of a type wins */
    TEST_CHECK(!cond_is_true(&l, "Failed"));
    TEST_EQ_INT(cond_find(&l, "Failed")->last_transition, 0);
    cond_list_from_json(&l, NULL);
    TEST_EQ_INT(l.n, 0);
    json_decref(j);
}

int main(void)
{
    TEST_RUN(test_time_round_trip);
    TEST_RUN(test_transition_time_only_on_flip);
    TEST_RUN(test_json_round_trip_keeps_order);
    TEST_RUN(test_cut_on_characters_and_bad_reasons);
    TEST_RUN(test_from_json_is_tolerant);
    return test_summary();
}
