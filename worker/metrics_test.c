/*
 * metrics_test.c - the recorder and its renderings, without a network: rates and ETA over the
 * window (with injected times), the all-reduce histogram, eval values, the Prometheus text
 * (line shapes and exact lines), the /progress JSON (parsed with Jansson), concurrent updates.
 * metrics_http_test serves the same over real HTTP; obs_py_test parses it with prometheus_client.
 */
#include "worker/metrics.h"

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/test.h"

/* Renders /metrics into a new heap string. */
static char *prom(struct metrics *m)
{
    struct buf b;

    buf_init(&b, METRICS_MAX_BODY);
    TEST_EQ_INT(metrics_render_prometheus(m, &b), 0);
    return buf_take(&b, NULL);
}

static json_t *progress(struct metrics *m)
{
    struct buf b;
    json_error_t err;
    json_t *j;

    buf_init(&b, METRICS_MAX_BODY);
    TEST_EQ_INT(metrics_render_progress(m, &b), 0);
    j = json_loads(buf_ptr(&b), 0, &err);
    if (!TEST_CHECK(j != NULL))
        fprintf(stderr, "       %s: %s\n", err.text, buf_ptr(&b));
    buf_cleanup(&b);
    return j;
}

/* Whether `line` (a whole line, without "\n") occurs in text. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    fprintf(stderr, "       missing line: %s\n", line);
    return 0;
}

/* Every line is a HELP/TYPE comment or `name{labels} value`, and each sample's family was
 * announced by a TYPE line just before its samples. */
static void check_exposition_format(const char *text)
{
    regex_t sample, help, type;
    char family[128] = "";
    int lines = 0;

    regcomp(&sample,
            "^([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{[a-z_]+=\"[^\"]*\"\\})? "
            "(NaN|[+-]Inf|-?[0-9]+(\\.[0-9]+)?(e[+-][0-9]+)?)$",
            REG_EXTENDED);
    regcomp(&help, "^# HELP [a-z_]+ [A-Z].*\\.$", REG_EXTENDED);
    regcomp(&type, "^# TYPE [a-z_]+ (gauge|counter|histogram)$", REG_EXTENDED);
    for (const char *p = text; *p; lines++) {
        const char *nl = strchr(p, '\n');
        char line[512];
        regmatch_t mt[2];

        if (!TEST_CHECK(nl != NULL && (size_t)(nl - p) < sizeof(line)))
            break;
        memcpy(line, p, (size_t)(nl - p));
        line[nl - p] = '\0';
        if (strncmp(line, "# TYPE ", 7) == 0) {
            TEST_CHECK(regexec(&type, line, 0, NULL, 0) == 0);
            sscanf(line + 7, "%127s", family);
        } else if (line[0] == '#') {
            if (!TEST_CHECK(regexec(&help, line, 0, NULL, 0) == 0))
                fprintf(stderr, "       %s\n", line);
        } else if (TEST_CHECK(regexec(&sample, line, 2, mt, 0) == 0)) {
            TEST_CHECK(strncmp(line, family, strlen(family)) == 0);
        } else {
            fprintf(stderr, "       bad line: %s\n", line);
        }
        p = nl + 1;
    }
    TEST_CHECK(lines > 40);
    regfree(&sample);
    regfree(&help);
    regfree(&type);
}

static void test_starting(void)
{
    struct metrics *m = metrics_new();
    char *t = prom(m);
    json_t *j = progress(m);

    TEST_CHECK(has_line(t, "gantry_train_state{state=\"starting\"} 1"));
    TEST_CHECK(has_line(t, "gantry_train_state{state=\"running\"} 0"));
    TEST_CHECK(has_line(t, "gantry_train_loss NaN"));
    TEST_CHECK(has_line(t, "gantry_train_eta_seconds NaN"));
    TEST_CHECK(has_line(t, "gantry_train_last_checkpoint_step -1"));
    TEST_CHECK(has_line(t, "gantry_train_allreduce_duration_seconds_count 0"));
    TEST_CHECK(strstr(t, "gantry_train_eval") == NULL); /* no eval yet: no family */
    check_exposition_format(t);
    TEST_EQ_STR(json_string_value(json_object_get(j, "state")), "starting");
    TEST_CHECK(json_is_null(json_object_get(j, "loss")));
    TEST_CHECK(json_is_null(json_object_get(j, "last_checkpoint_step")));
    TEST_CHECK(json_is_null(json_object_get(j, "seconds_since_last_step")));
    json_decref(j);
    free(t);
    metrics_free(m);
}

static void step_at(struct metrics *m, int64_t step, double now, double loss)
{
    struct metrics_step s = {.step = step,
                             .epoch = (int)(step / 500),
                             .loss = loss,
                             .lr = 3e-4,
                             .samples = 32,
                             .tokens = 3200,
                             .now = now};
    metrics_step(m, &s);
}

/* Resumed at step 100 of 1100; a step every 0.5 s, 32 examples and 3200 tokens each. */
static void test_rates_and_eta(void)
{
    struct metrics *m = metrics_new();
    struct metrics_snapshot s;

    metrics_evaluating(m, true); /* not training yet: stays "starting" */
    metrics_get(m, &s);
    TEST_EQ_STR(s.state, "starting");
    metrics_begin(m, 100, 1100, 3, 4, 1000.0);
    metrics_get(m, &s);
    TEST_EQ_STR(s.state, "running");
    metrics_evaluating(m, true);
    metrics_get(m, &s);
    TEST_EQ_STR(s.state, "evaluating");
    {
        json_t *j = progress(m);
        TEST_EQ_STR(json_string_value(json_object_get(j, "state")), "evaluating");
        json_decref(j);
    }
    metrics_evaluating(m, false);
    metrics_get(m, &s);
    TEST_EQ_STR(s.state, "running");
    TEST_CHECK(isnan(s.samples_per_s) && isnan(s.eta_s)); /* no step yet */
    TEST_NEAR(s.percent, 100.0 * 100 / 1100, 1e-9);
    for (int i = 1; i <= 10; i++)
        step_at(m, 100 + i, 1000.0 + 0.5 * i, 2.0 - 0.1 * i);
    metrics_get(m, &s);
    TEST_EQ_INT(s.step, 110);
    TEST_EQ_INT(s.start_step, 100);
    TEST_NEAR(s.loss, 1.0, 1e-12);
    TEST_NEAR(s.samples_per_s, 64.0, 1e-9);
    TEST_NEAR(s.tokens_per_s, 6400.0, 1e-9);
    TEST_NEAR(s.steps_per_s, 2.0, 1e-9);
    TEST_NEAR(s.eta_s, (1100 - 110) / 2.0, 1e-6);
    TEST_NEAR(s.percent, 10.0, 1e-9);
    TEST_NEAR(s.elapsed_s, 5.0, 1e-9);
    TEST_EQ_INT(s.samples_total, 320);
    TEST_EQ_INT(s.tokens_total, 32000);

    /* Then 4x faster: once the window (20 points 0.5 s apart) is past, the old pace is gone. */
    for (int i = 1; i <= 100; i++)
        step_at(m, 110 + i, 1005.0 + 0.125 * i, 0.5);
    metrics_get(m, &s);
    TEST_NEAR(s.steps_per_s, 8.0, 1e-9);
    TEST_NEAR(s.samples_per_s, 256.0, 1e-9);
    TEST_NEAR(s.eta_s, (1100.0 - 210) / 8.0, 1e-6);

    char *t = prom(m);
    TEST_CHECK(has_line(t, "gantry_train_step 210"));
    TEST_CHECK(has_line(t, "gantry_train_total_steps 1100"));
    TEST_CHECK(has_line(t, "gantry_train_steps_per_second 8"));
    TEST_CHECK(has_line(t, "gantry_train_samples_per_second 256"));
    TEST_CHECK(has_line(t, "gantry_train_eta_seconds 111.25"));
    TEST_CHECK(has_line(t, "gantry_train_learning_rate 0.0003"));
    TEST_CHECK(has_line(t, "gantry_train_steps_total 110"));
    TEST_CHECK(has_line(t, "gantry_train_world_size 4"));
    TEST_CHECK(has_line(t, "gantry_train_epochs 3"));
    check_exposition_format(t);
    free(t);

    json_t *j = progress(m);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "step")), 210);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "total_steps")), 1100);
    TEST_NEAR(json_number_value(json_object_get(j, "eta_seconds")), 111.25, 1e-9);
    TEST_NEAR(json_number_value(json_object_get(j, "tokens_per_second")), 25600, 1e-9);
    TEST_NEAR(json_number_value(json_object_get(j, "lr")), 3e-4, 1e-15);
    /* The step was recorded just now (wall clock), so it is fresh. */
    double since = json_number_value(json_object_get(j, "seconds_since_last_step"));
    TEST_CHECK(since >= 0 && since < 30);
    json_decref(j);

    /* At the last step the ETA is 0 whatever the rate. */
    step_at(m, 1100, 1200.0, 0.1);
    metrics_finish(m, true);
    metrics_get(m, &s);
    TEST_NEAR(s.eta_s, 0, 0);
    TEST_NEAR(s.percent, 100, 1e-12);
    TEST_EQ_STR(s.state, "succeeded");
    metrics_free(m);
}

/* Model FLOP/s and MFU: absent on the CPU (no flops counted); with 2e12 FLOPs a step every
 * 0.5 s, 4 TFLOP/s; MFU NaN until a peak is known, then 4e12 / 8e12 = 0.5. */
static void test_flops_and_mfu(void)
{
    struct metrics *m = metrics_new();
    struct metrics_snapshot s;
    char *t;
    json_t *j;

    metrics_begin(m, 0, 100, 1, 1, 1000.0);
    for (int i = 1; i <= 4; i++)
        step_at(m, i, 1000.0 + 0.5 * i, 1.0);
    metrics_get(m, &s);
    TEST_CHECK(isnan(s.flops_per_s) && isnan(s.mfu));
    t = prom(m);
    TEST_CHECK(strstr(t, "gantry_train_model_flops_per_second") == NULL); /* the CPU: no family */
    TEST_CHECK(strstr(t, "gantry_train_mfu_ratio") == NULL);
    free(t);
    j = progress(m);
    TEST_CHECK(json_is_null(json_object_get(j, "model_flops_per_second")));
    TEST_CHECK(json_is_null(json_object_get(j, "mfu")));
    json_decref(j);
    metrics_free(m);

    m = metrics_new();
    metrics_begin(m, 0, 100, 1, 1, 1000.0);
    for (int i = 1; i <= 4; i++) {
        struct metrics_step st = {.step = i, .loss = 1.0, .samples = 8, .tokens = 800,
                                  .now = 1000.0 + 0.5 * i, .flops = 2e12};
        metrics_step(m, &st);
    }
    metrics_get(m, &s);
    TEST_NEAR(s.flops_per_s, 4e12, 1e-3);
    TEST_CHECK(isnan(s.mfu));
    t = prom(m);
    TEST_CHECK(has_line(t, "gantry_train_model_flops_per_second 4000000000000"));
    TEST_CHECK(has_line(t, "gantry_train_mfu_ratio NaN"));
    check_exposition_format(t);
    free(t);
    metrics_set_peak_flops(m, 8e12);
    metrics_get(m, &s);
    TEST_NEAR(s.mfu, 0.5, 1e-12);
    t = prom(m);
    TEST_CHECK(has_line(t, "gantry_train_mfu_ratio 0.5"));
    free(t);
    j = progress(m);
    TEST_NEAR(json_number_value(json_object_get(j, "model_flops_per_second")), 4e12, 1e-3);
    TEST_NEAR(json_number_value(json_object_get(j, "mfu")), 0.5, 1e-12);
    json_decref(j);
    metrics_free(m);
}

static void test_histogram_checkpoint_eval(void)
{
    struct metrics *m = metrics_new();
    const double ar[] = {0.0004, 0.003, 0.003, 0.2, 20};

    for (size_t i = 0; i < sizeof(ar) / sizeof(ar[0]); i++)
        metrics_allreduce(m, ar[i]);
    metrics_checkpoint(m, 200, 1.5);
    metrics_checkpoint(m, 400, 2.25);
    metrics_eval(m, "accuracy", 0.5);
    metrics_eval(m, "macro_f1", 0.25);
    metrics_eval(m, "accuracy", 0.75);
    metrics_eval(m, "Bad-Name", 1); /* dropped with a warning */
    {
        struct metrics_snapshot sn;
        metrics_get(m, &sn);
        TEST_EQ_INT(sn.eval_step, -1); /* no step given yet */
        metrics_eval_step(m, 380);
        metrics_get(m, &sn);
        TEST_EQ_INT(sn.eval_step, 380);
        TEST_NEAR(sn.eval_accuracy, 0.75, 0);
        TEST_NEAR(sn.eval_macro_f1, 0.25, 0);
        TEST_CHECK(isnan(sn.eval_pearson) && isnan(sn.eval_micro_f1)); /* not given */
        metrics_eval(m, "pearson", 0.5);
        metrics_get(m, &sn);
        TEST_NEAR(sn.eval_pearson, 0.5, 0);
        TEST_CHECK(!sn.early_stopped);
        metrics_stop_early(m, 380);
        metrics_get(m, &sn);
        TEST_CHECK(sn.early_stopped);
        TEST_EQ_INT(sn.total_steps, 380);
    }
    metrics_finish(m, false);

    char *t = prom(m);
    const char *h = "gantry_train_allreduce_duration_seconds";
    char line[128];
    struct {
        const char *le;
        int n;
    } want[] = {
        {"0.0005", 1}, {"0.001", 1}, {"0.0025", 1}, {"0.005", 3}, {"0.1", 3},
        {"0.25", 4},   {"1", 4},     {"10", 4},     {"+Inf", 5},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        snprintf(line, sizeof(line), "%s_bucket{le=\"%s\"} %d", h, want[i].le, want[i].n);
        TEST_CHECK(has_line(t, line));
    }
    TEST_CHECK(has_line(t, "gantry_train_allreduce_duration_seconds_count 5"));
    TEST_CHECK(has_line(t, "gantry_train_allreduce_duration_seconds_sum 20.2064"));
    TEST_CHECK(has_line(t, "# TYPE gantry_train_allreduce_duration_seconds histogram"));
    TEST_CHECK(has_line(t, "gantry_train_last_checkpoint_step 400"));
    TEST_CHECK(has_line(t, "gantry_train_checkpoints_total 2"));
    TEST_CHECK(has_line(t, "gantry_train_checkpoint_duration_seconds 2.25"));
    TEST_CHECK(has_line(t, "gantry_train_eval{metric=\"accuracy\"} 0.75"));
    TEST_CHECK(has_line(t, "gantry_train_eval{metric=\"macro_f1\"} 0.25"));
    TEST_CHECK(has_line(t, "gantry_train_eval_step 380"));
    TEST_CHECK(strstr(t, "Bad-Name") == NULL);
    TEST_CHECK(has_line(t, "gantry_train_state{state=\"failed\"} 1"));
    check_exposition_format(t);
    free(t);

    json_t *j = progress(m);
    json_t *ev = json_object_get(j, "eval");
    TEST_EQ_INT(json_object_size(ev), 3); /* accuracy, macro_f1, pearson */
    TEST_NEAR(json_number_value(json_object_get(ev, "accuracy")), 0.75, 0);
    TEST_NEAR(json_number_value(json_object_get(ev, "pearson")), 0.5, 0);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "eval_step")), 380);
    TEST_CHECK(json_is_true(json_object_get(j, "early_stopped")));
    TEST_EQ_INT(json_integer_value(json_object_get(j, "total_steps")), 380);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "last_checkpoint_step")), 400);
    TEST_EQ_STR(json_string_value(json_object_get(j, "state")), "failed");
    json_decref(j);
    metrics_free(m);
}

/*
 * Many tiny steps with a periodic pause (a data-loader stall, a log flush): one 0.4 s step, then
 * 99 steps of 1 ms. A window of the last 20 steps would swing between ~47 and 1000 steps/s with
 * the phase; the time-sampled window stays within a few percent of the true 100 / 0.499 s.
 */
static void test_fast_steps_window(void)
{
    struct metrics *m = metrics_new();
    struct metrics_snapshot s;
    double t = 0, want = 100 / 0.499;
    int64_t step = 0;

    metrics_begin(m, 0, 1000000, 1, 1, 1.0);
    for (int period = 0; period < 40; period++) {
        t += 0.4;
        step_at(m, ++step, 1.0 + t, 1.0);
        metrics_get(m, &s);
        if (period >= 25 && !TEST_CHECK(fabs(s.steps_per_s - want) < 0.06 * want))
            fprintf(stderr, "       after the pause: %.1f steps/s, want %.1f\n", s.steps_per_s,
                    want);
        for (int i = 0; i < 99; i++) {
            t += 0.001;
            step_at(m, ++step, 1.0 + t, 1.0);
        }
        metrics_get(m, &s);
        if (period >= 25 && !TEST_CHECK(fabs(s.steps_per_s - want) < 0.06 * want))
            fprintf(stderr, "       after the burst: %.1f steps/s, want %.1f\n", s.steps_per_s,
                    want);
    }
    metrics_free(m);
}

/* Without metrics_begin(), the first step starts the clock and the rates need a second one. */
static void test_without_begin(void)
{
    struct metrics *m = metrics_new();
    struct metrics_snapshot s;

    step_at(m, 1, 500.0, 1.0);
    metrics_get(m, &s);
    TEST_EQ_STR(s.state, "running");
    TEST_NEAR(s.elapsed_s, 0, 0);
    TEST_CHECK(isnan(s.samples_per_s));
    step_at(m, 2, 501.0, 1.0);
    metrics_get(m, &s);
    TEST_NEAR(s.elapsed_s, 1.0, 1e-12);
    TEST_NEAR(s.samples_per_s, 32.0, 1e-9);
    metrics_free(m);
}

static void test_eval_limit(void)
{
    struct metrics *m = metrics_new();
    char name[32];

    for (int i = 0; i < METRICS_MAX_EVAL + 3; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        metrics_eval(m, name, i);
    }
    json_t *j = progress(m);
    TEST_EQ_INT(json_object_size(json_object_get(j, "eval")), METRICS_MAX_EVAL);
    json_decref(j);
    metrics_free(m);
}

/* Writers on several threads while the main thread renders: no torn counts, no sanitizer reports.
 */
enum { THREADS = 4, STEPS = 2000 };

static void *writer(void *arg)
{
    struct metrics *m = arg;

    for (int i = 0; i < STEPS; i++) {
        struct metrics_step s = {.step = i, .loss = 1, .lr = 1, .samples = 2, .tokens = 10};
        metrics_step(m, &s);
        metrics_allreduce(m, 0.001);
    }
    return NULL;
}

static void test_concurrent(void)
{
    struct metrics *m = metrics_new();
    pthread_t th[THREADS];
    struct metrics_snapshot s;

    metrics_begin(m, 0, 0, 1, THREADS, 0);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, writer, m);
    for (int i = 0; i < 50; i++) {
        char *t = prom(m);
        TEST_CHECK(strstr(t, "gantry_train_samples_total") != NULL);
        free(t);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    metrics_get(m, &s);
    TEST_EQ_INT(s.samples_total, 2LL * THREADS * STEPS);
    TEST_EQ_INT(s.tokens_total, 10LL * THREADS * STEPS);
    TEST_CHECK(isnan(s.percent) && isnan(s.eta_s)); /* total unknown */
    char *t = prom(m);
    TEST_CHECK(has_line(t, "gantry_train_allreduce_duration_seconds_count 8000"));
    TEST_CHECK(has_line(t, "gantry_train_progress_ratio NaN"));
    free(t);
    metrics_free(m);
}

int main(void)
{
    TEST_RUN(test_starting);
    TEST_RUN(test_rates_and_eta);
    TEST_RUN(test_flops_and_mfu);
    TEST_RUN(test_histogram_checkpoint_eval);
    TEST_RUN(test_fast_steps_window);
    TEST_RUN(test_without_begin);
    TEST_RUN(test_eval_limit);
    TEST_RUN(test_concurrent);
    return test_summary();
}
