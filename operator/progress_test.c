/* progress_test.c - the pure parts of the progress poller: clock, URL template, status.progress,
 * rank 0's final progress from its termination message. */
#include <stdio.h>
#include <string.h>

#include "common/test.h"
#include "operator/progress.h"

static void test_clock(void)
{
    struct progress_clock c = {0};

    progress_clock_observe(&c, "u1", 0, -1, false, 100); /* rank 0 seen, read failed: clock starts */
    TEST_EQ_STR(c.uid, "u1");
    TEST_EQ_INT(c.since, 100);
    TEST_CHECK(!c.advanced);
    progress_clock_observe(&c, "u1", 0, 5, false, 110); /* first reading: baseline, not an advance */
    TEST_EQ_INT(c.since, 110);
    TEST_EQ_INT(c.step, 5);
    TEST_CHECK(!c.advanced);
    progress_clock_observe(&c, "u1", 0, 5, false, 120); /* same step: the clock stands */
    TEST_EQ_INT(c.since, 110);
    progress_clock_observe(&c, "u1", 0, -1, false, 130); /* timeout (SIGSTOP): the clock stands */
    TEST_EQ_INT(c.since, 110);
    TEST_EQ_INT(c.step, 5);
    progress_clock_observe(&c, "u1", 0, 4, false, 135); /* a lower step is no progress */
    TEST_EQ_INT(c.since, 110);
    progress_clock_observe(&c, "u1", 0, 6, false, 140);
    TEST_EQ_INT(c.since, 140);
    TEST_CHECK(c.advanced);
    progress_clock_observe(&c, "u2", 1, 6, false, 150); /* new gang: a new clock */
    TEST_EQ_STR(c.uid, "u2");
    TEST_EQ_INT(c.restart, 1);
    TEST_EQ_INT(c.since, 150);
    TEST_CHECK(!c.advanced);
    progress_clock_observe(&c, "u2", 2, 9, false, 160); /* same uid, other restart label: new clock */
    TEST_EQ_INT(c.restart, 2);
    TEST_EQ_INT(c.since, 160);
    progress_clock_observe(&c, "u2", 2, 9, true, 170); /* evaluating: alive, step stands */
    TEST_EQ_INT(c.since, 170);
    TEST_EQ_INT(c.step, 9);
    progress_clock_observe(&c, "u2", 2, 9, false, 180); /* back to training: the clock stands */
    TEST_EQ_INT(c.since, 170);
    progress_clock_observe(&c, "u2", 2, -1, true, 190); /* a failed read proves nothing */
    TEST_EQ_INT(c.since, 170);
}

static void test_url(void)
{
    char out[64];

    TEST_EQ_INT(progress_url(PROGRESS_DEFAULT_URL, "ml", "spam", "spam-worker-0", "10.1.2.3",
                             9090, out, sizeof(out)), 0);
    TEST_EQ_STR(out, "http://10.1.2.3:9090/progress");
    TEST_EQ_INT(progress_url("http://127.0.0.1:5/{ns}/{job}/{pod}", "ml", "spam", "p0", "ip", 1,
                             out, sizeof(out)), 0);
    TEST_EQ_STR(out, "http://127.0.0.1:5/ml/spam/p0");
    TEST_EQ_INT(progress_url("http://{host}/", "a", "b", "c", "d", 1, out, sizeof(out)), -1);
    TEST_EQ_INT(progress_url("http://{ip}/0123456789012345678901234567890123456789012345678901",
                             "a", "b", "c", "1.2.3.4", 1, out, sizeof(out)), -1);
    TEST_EQ_INT(progress_url("", "a", "b", "c", "d", 1, out, sizeof(out)), 0);
    TEST_EQ_STR(out, "");
}

static void test_eta(void)
{
    char b[16];

    progress_fmt_eta(189, b, sizeof(b));
    TEST_EQ_STR(b, "3m9s");
    progress_fmt_eta(42, b, sizeof(b));
    TEST_EQ_STR(b, "42s");
    progress_fmt_eta(3720, b, sizeof(b));
    TEST_EQ_STR(b, "1h2m");
    progress_fmt_eta(2 * 86400 + 3 * 3600 + 5, b, sizeof(b));
    TEST_EQ_STR(b, "2d3h");
    progress_fmt_eta(0, b, sizeof(b));
    TEST_EQ_STR(b, "0s");
    progress_fmt_eta(-1, b, sizeof(b));
    TEST_EQ_STR(b, "0s");
    /* a worker's estimate past long long's range (was undefined: a negative count of seconds) */
    progress_fmt_eta(1e300, b, sizeof(b));
    TEST_EQ_STR(b, "11574074d1h");
}

static void test_status(void)
{
    /* docs/metrics.md's example answer */
    json_t *w = json_loads(
        "{\"state\":\"running\",\"step\":42,\"total_steps\":420,\"percent\":10,\"epoch\":1,"
        "\"epochs\":2,\"world_size\":2,\"loss\":0.25,\"lr\":0.001,\"samples_per_second\":128,"
        "\"tokens_per_second\":12800,\"steps_per_second\":2,\"eta_seconds\":189,"
        "\"last_checkpoint_step\":40,\"start_step\":0,\"samples_total\":2688,"
        "\"tokens_total\":268800,\"elapsed_seconds\":21,\"last_step_unix\":1796022612.07,"
        "\"seconds_since_last_step\":0.68,\"eval_step\":40,\"eval\":{\"accuracy\":0.5,"
        "\"macro_f1\":0.25,\"micro_f1\":0.625,\"pearson\":null}}",
        0, NULL);
    json_t *st = progress_status(w, 1796022612);
    json_t *early, *none;

    TEST_CHECK(st != NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(st, "step")), 42);
    TEST_EQ_INT(json_integer_value(json_object_get(st, "totalSteps")), 420);
    TEST_NEAR(json_number_value(json_object_get(st, "loss")), 0.25, 1e-12);
    TEST_NEAR(json_number_value(json_object_get(st, "samplesPerSecond")), 128, 1e-12);
    TEST_EQ_INT(json_integer_value(json_object_get(st, "lastCheckpointStep")), 40);
    TEST_EQ_STR(json_string_value(json_object_get(st, "summary")), "42/420 (10%)");
    TEST_EQ_STR(json_string_value(json_object_get(st, "eta")), "3m9s");
    TEST_EQ_STR(json_string_value(json_object_get(st, "state")), "running");
    TEST_EQ_STR(json_string_value(json_object_get(st, "lastProgressTime")),
                "2026-11-30T07:10:12Z");
    TEST_CHECK(json_object_get(st, "seconds_since_last_step") == NULL); /* changes every read */
    TEST_EQ_INT(json_integer_value(json_object_get(st, "evalStep")), 40);
    TEST_NEAR(json_number_value(json_object_get(st, "evalAccuracy")), 0.5, 1e-12);
    TEST_NEAR(json_number_value(json_object_get(st, "evalMacroF1")), 0.25, 1e-12);
    TEST_NEAR(json_number_value(json_object_get(st, "evalMicroF1")), 0.625, 1e-12);
    TEST_CHECK(json_object_get(st, "evalPearson") == NULL); /* null: left out */
    json_decref(st);

    /* before the first step: nulls are left out, no percent */
    early = json_loads("{\"state\":\"starting\",\"step\":0,\"total_steps\":0,\"percent\":null,"
                       "\"loss\":null,\"eta_seconds\":null,\"last_checkpoint_step\":null}",
                       0, NULL);
    st = progress_status(early, 0);
    TEST_EQ_STR(json_string_value(json_object_get(st, "summary")), "0");
    TEST_CHECK(json_object_get(st, "loss") == NULL);
    TEST_CHECK(json_object_get(st, "eta") == NULL);
    TEST_CHECK(json_object_get(st, "percent") == NULL);
    TEST_CHECK(json_object_get(st, "lastProgressTime") == NULL);
    TEST_CHECK(json_object_get(st, "evalAccuracy") == NULL); /* not evaluated yet */
    TEST_CHECK(json_object_get(st, "earlyStopped") == NULL);
    json_decref(st);

    json_t *es = json_loads("{\"state\":\"succeeded\",\"step\":250,\"total_steps\":250,"
                            "\"early_stopped\":true}", 0, NULL);
    st = progress_status(es, 0);
    TEST_CHECK(json_is_true(json_object_get(st, "earlyStopped")));
    TEST_EQ_STR(json_string_value(json_object_get(st, "summary")), "250/250 (100%)");
    json_decref(st);
    json_decref(es);

    /* a step far past total_steps (a garbled answer): the percent is printed, not cast to an
     * int (was undefined: "-2147483648%") */
    es = json_loads("{\"step\":1000000000000000000,\"total_steps\":1}", 0, NULL);
    st = progress_status(es, 0);
    TEST_EQ_STR(json_string_value(json_object_get(st, "summary")),
                "1000000000000000000/1 (100000000000000000000%)");
    json_decref(st);
    json_decref(es);

    none = json_loads("{\"state\":\"running\"}", 0, NULL);
    TEST_CHECK(progress_status(none, 5) == NULL);
    json_decref(none);
    json_decref(early);
    json_decref(w);
}

static void test_lookup_without_poller(void)
{
    struct rec_input in = {.progress_restart = 7};
    json_t *hold = (json_t *)1;

    progress_lookup(NULL, "ml/spam", &in, &hold);
    TEST_CHECK(hold == NULL);
    TEST_CHECK(in.progress == NULL);
    TEST_EQ_INT(in.progress_restart, -1);
}

/* A job that ends between two reads: rank 0's termination message (worker/obs.h) stands in. */
static void test_final(void)
{
    static struct tj job; /* large; only status.restarts is read */
    static struct rec_pod pods[3];
    const char *line = "{\"state\":\"succeeded\",\"step\":40,\"total_steps\":40,"
                       "\"percent\":100,\"epoch\":3,\"epochs\":4,\"world_size\":2,"
                       "\"loss\":0.125,\"samples_per_second\":96.5,\"eta_seconds\":0,"
                       "\"last_checkpoint_step\":40}";
    struct rec_input in = {.job = &job, .pods = pods, .npods = 3};
    json_t *st, *hold = NULL;

    job.status.restarts = 1;
    for (int i = 0; i < 3; i++) {
        pods[i] = (struct rec_pod){.index = 0, .restart = 1, .phase = REC_POD_SUCCEEDED};
        snprintf(pods[i].message, sizeof(pods[i].message), "%s", line);
    }
    pods[0].restart = 0;                   /* an earlier gang's rank 0 */
    pods[1].index = 1;                     /* rank 1 */
    pods[2].phase = REC_POD_FAILED;        /* failed: its message is a log tail */
    pods[2].exit_code = 1;
    TEST_CHECK(progress_final(&in) == NULL);
    pods[2].phase = REC_POD_SUCCEEDED;
    pods[2].exit_code = 0;
    st = progress_final(&in);
    if (!TEST_CHECK(st != NULL))
        return;
    TEST_EQ_INT(json_integer_value(json_object_get(st, "step")), 40);
    TEST_EQ_INT(json_integer_value(json_object_get(st, "lastCheckpointStep")), 40);
    TEST_NEAR(json_number_value(json_object_get(st, "loss")), 0.125, 1e-12);
    TEST_NEAR(json_number_value(json_object_get(st, "samplesPerSecond")), 96.5, 1e-12);
    TEST_EQ_STR(json_string_value(json_object_get(st, "summary")), "40/40 (100%)");
    TEST_EQ_STR(json_string_value(json_object_get(st, "state")), "succeeded");
    json_decref(st);
    /* the worker container exited 0 while a sidecar keeps the pod Running: reconcile calls
     * that success (rec.h), so its last word is read the same */
    pods[2].phase = REC_POD_RUNNING;
    st = progress_final(&in);
    TEST_CHECK(st != NULL);
    json_decref(st);
    pods[2].phase = REC_POD_SUCCEEDED;

    progress_lookup(NULL, "ml/spam", &in, &hold); /* no poller reading: the message fills in */
    TEST_CHECK(hold != NULL && in.progress == hold);
    TEST_EQ_INT(json_integer_value(json_object_get(in.progress, "step")), 40);
    TEST_EQ_INT(in.progress_restart, -1); /* no clock: hang detection is not fed by it */
    json_decref(hold);

    /* A message kept only in part, a cut (tail of a longer) line or plain text: nothing. */
    pods[2].message_truncated = true;
    TEST_CHECK(progress_final(&in) == NULL);
    pods[2].message_truncated = false;
    snprintf(pods[2].message, sizeof(pods[2].message), "%s", line + 20);
    TEST_CHECK(progress_final(&in) == NULL);
    snprintf(pods[2].message, sizeof(pods[2].message), "{\"state\":\"succeeded\"}");
    TEST_CHECK(progress_final(&in) == NULL);
    snprintf(pods[2].message, sizeof(pods[2].message), "done");
    TEST_CHECK(progress_final(&in) == NULL);

    /* A lost status (restarts 0) with the gang at restart 1 by its labels: the gang's rank 0 is
     * found by the same count reconcile uses (before, only the next pass found it: two status
     * writes; found by operator/fuzz/fuzz_rec). */
    snprintf(pods[2].message, sizeof(pods[2].message), "%s", line);
    snprintf(pods[0].message, sizeof(pods[0].message), "done"); /* restart 0's rank 0: no line */
    job.status.restarts = 0;
    st = progress_final(&in);
    TEST_CHECK(st != NULL);
    json_decref(st);
}

int main(void)
{
    TEST_RUN(test_clock);
    TEST_RUN(test_url);
    TEST_RUN(test_eta);
    TEST_RUN(test_status);
    TEST_RUN(test_lookup_without_poller);
    TEST_RUN(test_final);
    return test_summary();
}
