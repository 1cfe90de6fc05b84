/* eval_test.c - metrics on a hand-computed confusion matrix, merging, the JSON report. */
#include "worker/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/test.h"

/* Rows = true class, columns = predicted:
 *        A  B  C      support
 *   A [  5  1  0 ]    6
 *   B [  2  3  1 ]    6
 *   C [  0  0  4 ]    4         total 16, correct 12, accuracy 0.75
 * predicted: A 7, B 4, C 5
 * P = 5/7, 3/4, 4/5    R = 5/6, 1/2, 1    F1 = 10/13, 3/5, 8/9 */
static const int cm[3][3] = {{5, 1, 0}, {2, 3, 1}, {0, 0, 4}};
static const char *const names[] = {"A", "B", "C"};

/* Adds the matrix's examples, in a scattered order, for rows [from, to) of a 16-item list. */
static void fill(struct eval_counts *e, int from, int to)
{
    int32_t y[16], p[16], n = 0;
    for (int t = 0; t < 3; t++)
        for (int q = 0; q < 3; q++)
            for (int k = 0; k < cm[t][q]; k++) {
                y[n] = t;
                p[n] = q;
                n++;
            }
    TEST_EQ_INT(eval_add_batch(e, y + from, p + from, (size_t)(to - from)), 0);
}

static void check_metrics(const struct eval_metrics *m)
{
    TEST_EQ_INT(m->total, 16);
    TEST_NEAR(m->accuracy, 0.75, 1e-12);
    TEST_NEAR(m->cls[0].precision, 5.0 / 7, 1e-12);
    TEST_NEAR(m->cls[1].precision, 0.75, 1e-12);
    TEST_NEAR(m->cls[2].precision, 0.8, 1e-12);
    TEST_NEAR(m->cls[0].recall, 5.0 / 6, 1e-12);
    TEST_NEAR(m->cls[1].recall, 0.5, 1e-12);
    TEST_NEAR(m->cls[2].recall, 1.0, 1e-12);
    TEST_NEAR(m->cls[0].f1, 10.0 / 13, 1e-12);
    TEST_NEAR(m->cls[1].f1, 0.6, 1e-12);
    TEST_NEAR(m->cls[2].f1, 8.0 / 9, 1e-12);
    TEST_NEAR(m->macro_precision, (5.0 / 7 + 0.75 + 0.8) / 3, 1e-12);
    TEST_NEAR(m->macro_recall, (5.0 / 6 + 0.5 + 1.0) / 3, 1e-12);
    TEST_NEAR(m->macro_f1, (10.0 / 13 + 0.6 + 8.0 / 9) / 3, 1e-12);
    TEST_NEAR(m->macro_f1, 0.752706553, 1e-9);
    TEST_NEAR(m->weighted_f1, (6 * 10.0 / 13 + 6 * 0.6 + 4 * 8.0 / 9) / 16, 1e-12);
    TEST_EQ_INT(m->cls[0].support, 6);
    TEST_EQ_INT(m->cls[2].support, 4);
    TEST_EQ_INT(m->cls[0].predicted, 7);
}

static void test_hand_computed(void)
{
    struct eval_counts e;
    struct eval_metrics m;

    TEST_EQ_INT(eval_init(&e, 3), 0);
    fill(&e, 0, 16);
    TEST_EQ_INT(eval_cm(&e, 1, 0), 2);
    TEST_EQ_INT(eval_cm(&e, 2, 2), 4);
    TEST_EQ_INT(eval_add(&e, 3, 0), -1); /* out of range: ignored */
    TEST_EQ_INT(eval_add(&e, 0, -1), -1);
    eval_compute(&e, &m);
    check_metrics(&m);
    TEST_CHECK(isnan(m.loss));
    eval_metrics_cleanup(&m);
    eval_cleanup(&e);
    TEST_EQ_INT(eval_init(&e, 0), -1);
    TEST_EQ_INT(eval_init(&e, EVAL_MAX_CLASSES + 1), -1);
}

static void test_merge_and_allreduce(void)
{
    struct eval_counts a, b, r[3], other;
    struct eval_metrics m;

    eval_init(&a, 3);
    eval_init(&b, 3);
    fill(&a, 0, 7);
    fill(&b, 7, 16);
    eval_add_loss(&a, 3.0, 7);
    eval_add_loss(&b, 5.0, 9);
    TEST_EQ_INT(eval_merge(&a, &b), 0);
    eval_compute(&a, &m);
    check_metrics(&m);
    TEST_NEAR(m.loss, 0.5, 1e-12);
    eval_metrics_cleanup(&m);

    /* Three "ranks", each with part of the data, summed element-wise over the flat arrays as an
     * all-reduce would: the same metrics. */
    for (int k = 0; k < 3; k++)
        eval_init(&r[k], 3);
    fill(&r[0], 0, 5);
    fill(&r[1], 5, 11);
    fill(&r[2], 11, 16);
    TEST_EQ_INT(eval_counts_flat_len(&r[0]), 2 + 9);
    for (size_t i = 0; i < eval_counts_flat_len(&r[0]); i++) {
        double s =
            eval_counts_flat(&r[0])[i] + eval_counts_flat(&r[1])[i] + eval_counts_flat(&r[2])[i];
        for (int k = 0; k < 3; k++)
            eval_counts_flat(&r[k])[i] = s;
    }
    for (int k = 0; k < 3; k++) {
        eval_compute(&r[k], &m);
        check_metrics(&m);
        eval_metrics_cleanup(&m);
        eval_cleanup(&r[k]);
    }
    eval_init(&other, 2);
    TEST_EQ_INT(eval_merge(&a, &other), -1);
    eval_reset(&a);
    TEST_EQ_INT(eval_cm(&a, 0, 0), 0);
    eval_cleanup(&other);
    eval_cleanup(&a);
    eval_cleanup(&b);
}

static void test_edge_cases(void)
{
    struct eval_counts e;
    struct eval_metrics m;
    const int32_t y[4] = {0, 0, 1, 1};
    const float logits[4 * 3] = {2,   1, 0, /* -> 0 */ 1, 1, 0, /* tie -> 0 */ 0, 5, 9, /* -> 2 */
                                 NAN, 1, 0 /* NaN is never the max -> 1 */};

    /* Empty: all zeros, no NaN. */
    eval_init(&e, 3);
    eval_compute(&e, &m);
    TEST_EQ_INT(m.total, 0);
    TEST_NEAR(m.accuracy, 0, 0);
    TEST_NEAR(m.macro_f1, 0, 0);
    eval_metrics_cleanup(&m);

    /* Class 2 never true; predicted once. Class 1: P = 1/1 (pred once), R = 1/2. */
    TEST_EQ_INT(eval_add_logits(&e, y, logits, 4), 0);
    TEST_EQ_INT(eval_cm(&e, 0, 0), 2);
    TEST_EQ_INT(eval_cm(&e, 1, 2), 1);
    TEST_EQ_INT(eval_cm(&e, 1, 1), 1);
    eval_compute(&e, &m);
    TEST_NEAR(m.accuracy, 0.75, 1e-12);
    TEST_NEAR(m.cls[2].precision, 0, 0); /* zero_division = 0 */
    TEST_NEAR(m.cls[2].recall, 0, 0);
    TEST_NEAR(m.cls[2].f1, 0, 0);
    TEST_NEAR(m.cls[1].f1, 2 * 1 * 0.5 / 1.5, 1e-12);
    TEST_NEAR(m.macro_f1, (1.0 + 2.0 / 3 + 0) / 3, 1e-12);
    eval_metrics_cleanup(&m);
    eval_cleanup(&e);
}

static void test_report(void)
{
    struct eval_counts e;
    char dir[] = "/tmp/gantry-eval-XXXXXX", path[256], err[256];
    json_t *r, *f;
    json_error_t jerr;
    FILE *out;

    eval_init(&e, 3);
    fill(&e, 0, 16);
    r = eval_report_json(&e, names);
    TEST_EQ_INT(json_integer_value(json_object_get(r, "examples")), 16);
    TEST_NEAR(json_real_value(json_object_get(r, "accuracy")), 0.75, 1e-12);
    TEST_CHECK(json_object_get(r, "loss") == NULL);
    TEST_EQ_STR(json_string_value(json_array_get(json_object_get(r, "labels"), 2)), "C");
    TEST_EQ_INT(json_integer_value(
                    json_array_get(json_array_get(json_object_get(r, "confusion_matrix"), 1), 0)),
                2);
    TEST_EQ_INT(json_integer_value(json_object_get(
                    json_object_get(json_object_get(r, "per_class"), "B"), "support")),
                6);
    json_decref(r);
    r = eval_report_json(&e, NULL);
    TEST_CHECK(json_object_get(json_object_get(r, "per_class"), "1") != NULL);
    json_decref(r);

    TEST_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/report.json", dir);
    eval_add_loss(&e, 8.0, 16);
    TEST_EQ_INT(eval_write_report(&e, names, path, err, sizeof(err)), 0);
    f = json_load_file(path, 0, &jerr);
    TEST_CHECK(f != NULL);
    TEST_NEAR(json_real_value(json_object_get(f, "macro_f1")), 0.752706553, 1e-9);
    TEST_NEAR(json_real_value(json_object_get(f, "loss")), 0.5, 1e-12);
    json_decref(f);
    unlink(path);
    TEST_CHECK(eval_write_report(&e, names, "/nonexistent/r.json", err, sizeof(err)) != 0);
    TEST_CHECK(strstr(err, "/nonexistent/r.json") != NULL);

    snprintf(path, sizeof(path), "%s/print.txt", dir);
    out = fopen(path, "w+");
    eval_print(&e, names, out);
    rewind(out);
    {
        char line[256];
        TEST_CHECK(fgets(line, sizeof(line), out) != NULL);
        TEST_CHECK(strstr(line, "accuracy 0.7500 | macro-F1 0.7527 | loss 0.5000") != NULL);
    }
    fclose(out);
    unlink(path);
    rmdir(dir);
    eval_cleanup(&e);
}

/* Multi-label, 3 classes, 4 examples (true sets / logits > 0):
 *   ex0 {0, 2} / {0}      ex1 {1} / {1, 2}      ex2 {0, 1} / {0, 1}      ex3 {} / {}
 * class 0: tp 2 fp 0 fn 0; class 1: tp 2; class 2: tp 0 fp 1 fn 1. micro P = R = F1 = 4/5,
 * macro F1 2/3, weighted F1 (supports 2, 2, 1) 4/5, exact match 2/4, hamming loss 2/12:
 * scikit-learn's values for this label indicator matrix. */
static void test_multi_label(void)
{
    const int32_t y[4] = {0x5, 0x2, 0x3, 0x0};
    const float z[4 * 3] = {2, -1, -3, -2, 1, 0.5f, 3, 4, -1, -1, -2, -0.1f};
    struct eval_counts a, b;
    struct eval_metrics m;

    TEST_EQ_INT(eval_init_multi(&a, 3), 0);
    TEST_EQ_INT(eval_init_multi(&b, 3), 0);
    eval_add_logits_multi(&a, y, 1, z, 1);
    eval_add_logits_multi(&b, y + 1, 1, z + 3, 3); /* a share each, then merged */
    eval_add_loss(&a, 0.5, 1);
    eval_add_loss(&b, 1.5, 3);
    TEST_EQ_INT(eval_counts_flat_len(&a), 4 + 9);
    TEST_EQ_INT(eval_merge(&a, &b), 0);
    TEST_EQ_INT(eval_add(&a, 0, 0), -1); /* single-label counts do not apply */
    eval_compute(&a, &m);
    TEST_CHECK(m.multi_label);
    TEST_EQ_INT(m.total, 4);
    TEST_NEAR(m.accuracy, 0.5, 1e-12);
    TEST_NEAR(m.micro_precision, 0.8, 1e-12);
    TEST_NEAR(m.micro_recall, 0.8, 1e-12);
    TEST_NEAR(m.micro_f1, 0.8, 1e-12);
    TEST_NEAR(m.macro_f1, 2.0 / 3, 1e-12);
    TEST_NEAR(m.weighted_f1, 0.8, 1e-12);
    TEST_NEAR(m.hamming_loss, 2.0 / 12, 1e-12);
    TEST_NEAR(m.loss, 0.5, 1e-12);
    TEST_EQ_INT(m.cls[2].support, 1);
    TEST_EQ_INT(m.cls[2].predicted, 1);
    TEST_NEAR(m.cls[2].f1, 0.0, 1e-12);
    TEST_NEAR(m.cls[0].precision, 1.0, 1e-12);
    eval_metrics_cleanup(&m);

    json_t *r = eval_report_json(&a, names);
    TEST_CHECK(json_is_true(json_object_get(r, "multi_label")));
    TEST_NEAR(json_real_value(json_object_get(r, "micro_f1")), 0.8, 1e-12);
    TEST_CHECK(json_object_get(r, "confusion_matrix") == NULL);
    TEST_EQ_INT(json_integer_value(json_object_get(json_object_get(json_object_get(r,
                "per_class"), "C"), "predicted")), 1);
    json_decref(r);

    struct eval_counts s;
    TEST_EQ_INT(eval_init(&s, 3), 0);
    TEST_EQ_INT(eval_merge(&s, &a), -1); /* kinds differ */
    eval_cleanup(&s), eval_cleanup(&a), eval_cleanup(&b);
}

/* Regression: y = 1 2 3 4, z = 1.5 2 2.5 5 (two shares, merged): MSE (0.25+0+0.25+1)/4 =
 * 0.375, MAE (0.5+0+0.5+1)/4 = 0.5, Pearson 0.91350028 (statistics.correlation's). */
static void test_regression(void)
{
    const float y[4] = {1, 2, 3, 4}, z[4] = {1.5f, 2, 2.5f, 5};
    struct eval_counts a, b;
    struct eval_metrics m;
    TEST_EQ_INT(eval_init_regression(&a), 0);
    TEST_EQ_INT(eval_init_regression(&b), 0);
    eval_add_regression(&a, y, z, 1);
    eval_add_regression(&b, y + 1, z + 1, 3);
    eval_add_loss(&a, 0.25, 1);
    eval_add_loss(&b, 1.25, 3);
    TEST_EQ_INT(eval_merge(&a, &b), 0);
    TEST_EQ_INT(eval_counts_flat_len(&a), 9);
    eval_compute(&a, &m);
    TEST_CHECK(m.regression);
    TEST_EQ_INT(m.total, 4);
    TEST_NEAR(m.mse, 0.375, 1e-12);
    TEST_NEAR(m.loss, 0.375, 1e-12);
    TEST_NEAR(m.mae, 0.5, 1e-12);
    TEST_NEAR(m.pearson, 0.91350028, 1e-8);
    eval_metrics_cleanup(&m);
    json_t *r = eval_report_json(&a, NULL);
    TEST_CHECK(json_is_true(json_object_get(r, "regression")));
    TEST_NEAR(json_real_value(json_object_get(r, "pearson")), 0.91350028, 1e-8);
    TEST_CHECK(json_object_get(r, "accuracy") == NULL);
    TEST_CHECK(json_object_get(r, "spearman") == NULL); /* the pairs were not kept */
    /* Spearman: the Pearson correlation of ranks, ties averaged: z = 1 1 3 2 ranks 1.5 1.5 4 3
     * against 1 2 3 4: 0.73786479 (statistics.correlation of the ranks); kept pairs merge. */
    struct eval_counts s1, s2;
    const float t[4] = {1, 1, 3, 2};
    TEST_EQ_INT(eval_init_regression(&s1), 0);
    TEST_EQ_INT(eval_init_regression(&s2), 0);
    eval_keep_values(&s1), eval_keep_values(&s2);
    eval_add_regression(&s1, y, t, 3);
    eval_add_regression(&s2, y + 3, t + 3, 1);
    TEST_EQ_INT(eval_merge(&s1, &s2), 0);
    eval_compute(&s1, &m);
    TEST_NEAR(m.spearman, 0.73786479, 1e-8);
    eval_metrics_cleanup(&m);
    json_decref(r);
    r = eval_report_json(&s1, NULL);
    TEST_NEAR(json_real_value(json_object_get(r, "spearman")), 0.73786479, 1e-8);
    json_decref(r);
    eval_cleanup(&s1), eval_cleanup(&s2);
    struct eval_counts c;
    TEST_EQ_INT(eval_init_regression(&c), 0);
    const float k[2] = {2, 2};
    eval_add_regression(&c, y, k, 2); /* constant outputs: no correlation, not a NaN */
    eval_compute(&c, &m);
    TEST_NEAR(m.pearson, 0.0, 0);
    eval_metrics_cleanup(&m);
    eval_cleanup(&a), eval_cleanup(&b), eval_cleanup(&c);
}

int main(void)
{
    TEST_RUN(test_regression);
    TEST_RUN(test_multi_label);
    TEST_RUN(test_hand_computed);
    TEST_RUN(test_merge_and_allreduce);
    TEST_RUN(test_edge_cases);
    TEST_RUN(test_report);
    return test_summary();
}
