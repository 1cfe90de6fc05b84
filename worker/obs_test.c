/*
 * obs_test.c - the training-loop glue: TensorBoard scalars every log_interval steps (means over
 * the interval), eval tags, the resume marker, rank 0 only, and a port clash refused at open.
 * Event files are decoded here for the layout tbevent writes (its encoding is checked byte for
 * byte in tbevent_test and by TensorBoard itself in obs_py_test). Also the final progress line
 * rank 0 leaves in the termination message file on success (read by the operator).
 */
#include "worker/obs.h"

#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"

struct point {
    int64_t step;
    char tag[64];
    float value;
    int session_start;
};

static uint64_t varint(const uint8_t **p)
{
    uint64_t v = 0;

    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    return v;
}

/* Decodes one Event as tbevent lays it out: wall_time, step, then summary or session_log. */
static int decode(const uint8_t *ev, size_t n, struct point *pt)
{
    const uint8_t *p = ev + 9, *end = ev + n;

    memset(pt, 0, sizeof(*pt));
    if (n < 11 || ev[0] != 0x09 || p[0] != 0x10)
        return -1; /* the version record, or not ours */
    p++;
    pt->step = (int64_t)varint(&p);
    if (p < end && *p == 0x3a) { /* session_log */
        pt->session_start = p[2] == 0x08 && p[3] == 0x01;
        return 0;
    }
    if (end - p < 6 || p[0] != 0x2a)
        return -1;
    p += 1;
    varint(&p); /* summary length */
    p += 1;     /* 0x0a: value */
    varint(&p);
    p += 1; /* 0x0a: tag */
    size_t tl = (size_t)varint(&p);
    if (tl >= sizeof(pt->tag) || p + tl + 5 > end || p[tl] != 0x15)
        return -1;
    memcpy(pt->tag, p, tl);
    memcpy(&pt->value, p + tl + 1, 4);
    return 0;
}

/* Reads every event file in dir (sorted by name) into pts; returns the count of points. */
static int read_dir(const char *dir, struct point *pts, int max, int *files)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), count = 0;

    *files = 0;
    for (int i = 0; i < n; i++) {
        char path[512];
        uint8_t data[1 << 14];
        size_t len, off = 0;
        FILE *f;

        if (strncmp(names[i]->d_name, "events.out.tfevents.", 20) == 0) {
            (*files)++;
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
            f = fopen(path, "rb");
            len = f ? fread(data, 1, sizeof(data), f) : 0;
            if (f)
                fclose(f);
            while (off + 16 <= len) {
                uint64_t rl = 0;
                for (int b = 7; b >= 0; b--)
                    rl = rl << 8 | data[off + b];
                if (count < max && decode(data + off + 12, (size_t)rl, &pts[count]) == 0)
                    count++;
                off += 16 + rl;
            }
        }
        free(names[i]);
    }
    free(names);
    return count;
}

static const struct point *find(const struct point *pts, int n, const char *tag, int64_t step)
{
    for (int i = 0; i < n; i++)
        if (strcmp(pts[i].tag, tag) == 0 && pts[i].step == step)
            return &pts[i];
    return NULL;
}

static void run_steps(struct obs *o, int64_t from, int64_t to, int *logged)
{
    for (int64_t s = from; s <= to; s++) {
        struct metrics_step st = {
            .step = s, .loss = (double)s, .lr = 0.01, .samples = 8, .tokens = 80};
        if (obs_step(o, &st, 0.01))
            logged[(*logged)++ + 1] = (int)s; /* logged[0] counts, then the steps */
    }
}

static void test_rank0_and_resume(void)
{
    char dir[] = "/tmp/obs_test.XXXXXX";
    char tb[300];
    struct point pts[256];
    int logged[16] = {0}, files;

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(tb, sizeof(tb), "%s/job/tensorboard", dir);
    struct obs_config c = {.rank = 0,
                           .world_size = 2,
                           .metrics_addr = "127.0.0.1",
                           .metrics_port = 0,
                           .tb_dir = tb,
                           .total_steps = 20,
                           .epochs = 1,
                           .log_interval = 5};
    struct obs *o = obs_open(&c);
    if (!TEST_CHECK(o != NULL))
        return;
    TEST_CHECK(metrics_port(obs_metrics(o)) > 0);
    run_steps(o, 1, 12, logged);
    TEST_EQ_INT(logged[0], 2);
    TEST_EQ_INT(logged[1], 5);
    TEST_EQ_INT(logged[2], 10);
    obs_eval(o, 10, "accuracy", 0.8);
    obs_checkpoint(o, 10, 0.5);
    struct metrics_snapshot s;
    metrics_get(obs_metrics(o), &s);
    TEST_EQ_INT(s.step, 12);
    TEST_EQ_INT(s.last_checkpoint_step, 10);
    TEST_EQ_INT(s.samples_total, 96);
    obs_close(o, false); /* "crashed" after step 12; the checkpoint is at 10 */

    int n = read_dir(tb, pts, 256, &files);
    TEST_EQ_INT(files, 1);
    TEST_EQ_INT(n, 11); /* 5 tags at steps 5 and 10, eval/accuracy */
    const struct point *p = find(pts, n, "train/loss", 5);
    TEST_CHECK(p && p->value == 3.0f); /* mean of 1..5 */
    p = find(pts, n, "train/loss", 10);
    TEST_CHECK(p && p->value == 8.0f); /* mean of 6..10 */
    p = find(pts, n, "train/allreduce_seconds", 10);
    TEST_CHECK(p && p->value == 0.01f);
    p = find(pts, n, "train/lr", 5);
    TEST_CHECK(p && p->value == 0.01f);
    TEST_CHECK(find(pts, n, "train/samples_per_second", 10) != NULL);
    TEST_CHECK(find(pts, n, "train/tokens_per_second", 10) != NULL);
    p = find(pts, n, "eval/accuracy", 10);
    TEST_CHECK(p && p->value == 0.8f);

    /* Resume from the checkpoint at step 10: a second file opening with START at step 11. */
    c.start_step = 10;
    o = obs_open(&c);
    if (!TEST_CHECK(o != NULL))
        return;
    memset(logged, 0, sizeof(logged));
    run_steps(o, 11, 15, logged);
    TEST_EQ_INT(logged[0], 1);
    TEST_EQ_INT(logged[1], 15);
    obs_close(o, true);
    n = read_dir(tb, pts, 256, &files);
    TEST_EQ_INT(files, 2);
    TEST_EQ_INT(n, 11 + 1 + 5);
    TEST_CHECK(pts[11].session_start && pts[11].step == 11);
    p = find(pts, n, "train/loss", 15);
    TEST_CHECK(p && p->value == 13.0f); /* mean of 11..15 */

    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TEST_EQ_INT(system(cmd), 0);
}

static void test_other_ranks_and_errors(void)
{
    char dir[] = "/tmp/obs_test.XXXXXX";
    int logged[16] = {0}, files;
    struct point pts[8];

    TEST_CHECK(mkdtemp(dir) != NULL);
    struct obs_config c = {.rank = 1,
                           .world_size = 2,
                           .metrics_port = 0,
                           .tb_dir = dir,
                           .total_steps = 10,
                           .epochs = 1,
                           .log_interval = 1};
    struct obs *o = obs_open(&c);
    TEST_CHECK(o != NULL);
    TEST_EQ_INT(metrics_port(obs_metrics(o)), 0); /* rank 1 does not serve */
    run_steps(o, 1, 3, logged);
    TEST_EQ_INT(logged[0], 3); /* log steps are still reported, for the caller's own logging */
    TEST_EQ_INT(read_dir(dir, pts, 8, &files), 0);
    TEST_EQ_INT(files, 0); /* and writes no files */

    /* Rank 0 on a port that is taken: refused at open, with a message. */
    c.rank = 0;
    c.metrics_addr = "127.0.0.1";
    c.tb_dir = NULL;
    struct obs *a = obs_open(&c);
    TEST_CHECK(a != NULL);
    if (a) {
        c.metrics_port = metrics_port(obs_metrics(a));
        TEST_CHECK(obs_open(&c) == NULL);
    }
    obs_close(a, true);
    obs_close(o, true);
    obs_close(NULL, true);
    rmdir(dir);
}

static long file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The kubelet creates the termination message file; rank 0 fills it on success only. */
static void test_termination_message(void)
{
    char dir[] = "/tmp/obs_test.XXXXXX", term[300], none[300], text[OBS_TERMINATION_MAX + 64];
    int logged[16] = {0};
    json_error_t jerr;
    json_t *j;
    FILE *f;
    size_t n;

    TEST_CHECK(mkdtemp(dir) != NULL);
    test_write_file(dir, "termination-log", "", 0);
    snprintf(term, sizeof(term), "%s/termination-log", dir);
    snprintf(none, sizeof(none), "%s/absent", dir);
    struct obs_config c = {.rank = 1, .world_size = 2, .metrics_port = -1, .total_steps = 20,
                           .epochs = 2, .log_interval = 5, .termination_log = term};

    struct obs *o = obs_open(&c); /* rank 1 succeeds: nothing */
    run_steps(o, 1, 3, logged);
    obs_close(o, true);
    TEST_EQ_INT(file_size(term), 0);
    c.rank = 0; /* rank 0 fails: nothing (the kubelet falls back to the log's tail) */
    o = obs_open(&c);
    run_steps(o, 1, 3, logged);
    obs_close(o, false);
    TEST_EQ_INT(file_size(term), 0);
    c.termination_log = none; /* no file (not in a container): none created */
    o = obs_open(&c);
    obs_close(o, true);
    TEST_EQ_INT(file_size(none), -1);

    c.termination_log = term; /* rank 0 succeeds: one JSON line */
    c.start_step = 4;
    o = obs_open(&c);
    memset(logged, 0, sizeof(logged));
    run_steps(o, 5, 20, logged);
    obs_checkpoint(o, 20, 0.1);
    obs_eval(o, 20, "accuracy", 0.875); /* the final evaluation */
    obs_eval(o, 20, "macro_f1", 0.5);
    obs_eval(o, 20, "pearson", 0.75); /* a task's own metric: in the line too */
    obs_close(o, true);
    f = fopen(term, "r");
    if (!TEST_CHECK(f != NULL))
        return;
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    TEST_CHECK(n > 0 && n < OBS_TERMINATION_MAX && text[n - 1] == '\n' &&
               strchr(text, '\n') == text + n - 1);
    j = json_loads(text, 0, &jerr);
    if (!TEST_CHECK(json_is_object(j))) {
        fprintf(stderr, "  not JSON: %s (%s)\n", text, jerr.text);
        return;
    }
    TEST_EQ_STR(json_string_value(json_object_get(j, "state")), "succeeded");
    TEST_EQ_INT(json_integer_value(json_object_get(j, "step")), 20);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "total_steps")), 20);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "last_checkpoint_step")), 20);
    TEST_EQ_INT(json_integer_value(json_object_get(j, "world_size")), 2);
    TEST_NEAR(json_number_value(json_object_get(j, "loss")), 20.0, 1e-9); /* the last step's */
    TEST_NEAR(json_number_value(json_object_get(j, "percent")), 100.0, 1e-9);
    TEST_CHECK(json_is_number(json_object_get(j, "samples_per_second")));
    TEST_EQ_INT(json_integer_value(json_object_get(j, "eval_step")), 20);
    TEST_NEAR(json_number_value(json_object_get(json_object_get(j, "eval"), "accuracy")), 0.875,
              1e-9);
    TEST_NEAR(json_number_value(json_object_get(json_object_get(j, "eval"), "macro_f1")), 0.5,
              1e-9);
    TEST_NEAR(json_number_value(json_object_get(json_object_get(j, "eval"), "pearson")), 0.75,
              1e-9);
    TEST_CHECK(json_object_get(json_object_get(j, "eval"), "micro_f1") == NULL); /* not given */
    json_decref(j);

    remove(term);
    rmdir(dir);
}

int main(void)
{
    TEST_RUN(test_rank0_and_resume);
    TEST_RUN(test_other_ranks_and_errors);
    TEST_RUN(test_termination_message);
    return test_summary();
}
