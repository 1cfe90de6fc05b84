/*
 * eval.h - classification metrics from a confusion matrix, mergeable across ranks.
 *
 * struct eval_counts holds only sums (a confusion matrix of int64 counts, a loss sum and count),
 * so counts from different ranks or batches combine by element-wise addition: eval_merge() on
 * one machine, or an all-reduce (sum) over eval_counts_flat() across ranks. Metrics are derived
 * from the merged counts only (eval_compute), so every rank computes the same report.
 *
 * Definitions (scikit-learn's, with zero_division=0):
 *   cm[t][p]      examples with true class t predicted as p
 *   precision[c]  = cm[c][c] / sum_t cm[t][c]   (0 when the class was never predicted)
 *   recall[c]     = cm[c][c] / sum_p cm[c][p]   (0 when the class has no examples)
 *   f1[c]         = 2 P R / (P + R)              (0 when P + R = 0)
 *   macro_*       = unweighted mean over all n_classes classes of the label map
 *   accuracy      = trace / total                (0 when total = 0)
 * Multi-label classification (eval_init_multi): each of the n_classes classes is a yes/no
 * decision of its own (predicted yes when its logit > 0, a sigmoid probability > 0.5), counted
 * as true/false positives and false negatives per class, as scikit-learn counts a label
 * indicator matrix:
 *   precision[c], recall[c], f1[c]   as above from the class's tp, fp, fn
 *   micro_*      from the tp, fp, fn summed over classes
 *   accuracy     subset accuracy: examples whose whole predicted set is right / total
 *   hamming_loss wrong decisions / (total * n_classes)
 *   support[c]   examples that have class c; predicted[c] examples predicted to
 * Regression (eval_init_regression): one real output per example against a real target, kept
 * as sums (n, sum y, sum z, sum y^2, sum z^2, sum yz, sum |z - y|) so they merge like counts:
 *   mse = the mean squared error (the loss), mae = the mean absolute error,
 *   pearson = the correlation of outputs and targets (0 when either is constant)
 * (summed across ranks as floats, these lose digits past 2^24 examples). Spearman's rank
 * correlation needs every pair, not sums: eval_keep_values() keeps them (the final evaluation
 * and gantry-predict, which see the whole evaluation set; merging appends them), and only then
 * is it reported.
 * Thread safety: none; one eval_counts per thread, then merge.
 */
#ifndef GANTRY_EVAL_H
#define GANTRY_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define EVAL_MAX_CLASSES 4096

struct eval_counts {
    int n_classes;
    int multi_label; /* eval_init_multi */
    int regression;  /* eval_init_regression: n_classes 1 */
    double threshold; /* multi-label: a class is predicted when its sigmoid is over this (0.5) */
    float *kept;     /* eval_keep_values: (target, output) pairs, n_kept of them; not in v */
    size_t n_kept, cap_kept;
    int keep;
    /* Flat, all-reducible (sum) storage of (2 + n*n) doubles:
     *   v[0] loss sum, v[1] loss count (examples), v[2 + t*n + p] confusion counts;
     * multi-label: (4 + 3n): v[0], v[1] as above, v[2] examples, v[3] exactly right ones,
     *   then tp, fp, fn of class c at v[4 + 3c], v[5 + 3c], v[6 + 3c];
     * regression: 9: v[0], v[1] as above, then n, sum y, sum z, sum y^2, sum z^2, sum yz,
     *   sum |z - y|.
     * Doubles hold integer counts exactly up to 2^53, and a double all-reduce is what every
     * collective backend offers. */
    double *v;
};

/* 0, or -1 when n_classes is not in 1..EVAL_MAX_CLASSES. Caller-owned storage. */
int eval_init(struct eval_counts *e, int n_classes);
/* Multi-label counts (see above); 0 or -1 as eval_init. */
int eval_init_multi(struct eval_counts *e, int n_classes);
/* Regression sums (see above); 0. */
int eval_init_regression(struct eval_counts *e);
/* The counts for a task as train_data.label_words names it: 0 single-label (eval_init), > 0
 * multi-label (eval_init_multi), < 0 regression (eval_init_regression). 0 or -1 as those. */
int eval_init_task(struct eval_counts *e, int n_classes, int label_words);
/* Regression: also keep every (target, output) pair added from now on, for Spearman's rank
 * correlation. */
void eval_keep_values(struct eval_counts *e);
void eval_cleanup(struct eval_counts *e);
void eval_reset(struct eval_counts *e);

/* Adds one prediction. Labels outside 0..n_classes-1 are ignored and return -1, else 0. */
int eval_add(struct eval_counts *e, int true_label, int pred_label);
/* Adds n predictions; returns how many were out of range (and ignored). */
size_t eval_add_batch(struct eval_counts *e, const int32_t *true_labels, const int32_t *pred_labels,
                      size_t n);
/* Adds argmax over each row of logits (n, n_classes) as the predictions (ties: lowest index). */
size_t eval_add_logits(struct eval_counts *e, const int32_t *true_labels, const float *logits,
                       size_t n);
/* Multi-label: adds n examples, true classes as bit sets of `words` int32 words each (bit c % 32
 * of word c / 32: class c; kernels/crossentropy.h's layout), predicted where logits > 0. */
void eval_add_logits_multi(struct eval_counts *e, const int32_t *true_bits, int words,
                           const float *logits, size_t n);
/* Multi-label: predict a class when its sigmoid is over p (0 < p < 1; 0.5 from eval_init_multi)
 * instead: its logit over log(p / (1 - p)). */
void eval_set_threshold(struct eval_counts *e, double p);
/* The logit a multi-label class must exceed to be predicted (0 for a threshold of 0.5). */
float eval_threshold_logit(const struct eval_counts *e);
/* Regression: adds n outputs z against targets y. */
void eval_add_regression(struct eval_counts *e, const float *y, const float *z, size_t n);
/* Adds a loss summed over count examples (the report shows loss_sum / count). */
void eval_add_loss(struct eval_counts *e, double loss_sum, uint64_t count);

/* Element-wise sum: dst += src. -1 (and dst unchanged) when n_classes or kinds differ. */
int eval_merge(struct eval_counts *dst, const struct eval_counts *src);
/* Borrowed flat array for an in-place all-reduce(sum) across ranks, and its length. */
double *eval_counts_flat(struct eval_counts *e);
size_t eval_counts_flat_len(const struct eval_counts *e);
/* Confusion count cm[t][p] (0 for multi-label counts). */
uint64_t eval_cm(const struct eval_counts *e, int true_label, int pred_label);

struct eval_class {
    double precision, recall, f1;
    uint64_t support; /* true examples of this class */
    uint64_t predicted;
};

struct eval_metrics {
    int n_classes;
    uint64_t total;
    double accuracy;
    double macro_precision, macro_recall, macro_f1;
    double weighted_f1;     /* mean of f1 weighted by support */
    double micro_precision, micro_recall, micro_f1; /* single-label: all equal accuracy */
    int multi_label;
    double hamming_loss;    /* multi-label only */
    int regression;         /* then only total, loss and these: */
    double mse, mae, pearson;
    double spearman;        /* NaN unless every example's pair was kept (eval_keep_values) */
    double loss;            /* NaN when no loss was added */
    struct eval_class *cls; /* n_classes entries, owned */
};

/* Computes metrics from e into m (caller-owned; release with eval_metrics_cleanup()). */
void eval_compute(const struct eval_counts *e, struct eval_metrics *m);
void eval_metrics_cleanup(struct eval_metrics *m);

/* The final report as a new JSON object (caller json_decref()s):
 *   {"examples": N, "accuracy": a, "macro_precision": .., "macro_recall": .., "macro_f1": ..,
 *    "weighted_f1": .., "loss": l (only when added),
 *    "labels": ["ham", "spam"],
 *    "per_class": {"ham": {"precision":..,"recall":..,"f1":..,"support":..}, ...},
 *    "confusion_matrix": [[...], ...]}   rows = true label, columns = predicted label
 * Multi-label: "multi_label": true, "threshold", "micro_precision", "micro_recall", "micro_f1",
 * "hamming_loss", accuracy the subset accuracy, per_class with "predicted", no confusion matrix.
 * Regression: {"examples", "regression": true, "mse", "mae", "pearson", "spearman" (when
 * kept), "loss"}.
 * names[i] is the name of class i (NULL: "0", "1", ...). */
json_t *eval_report_json(const struct eval_counts *e, const char *const *names);
/* Writes the report to path (atomically, pretty-printed, trailing newline). 0 or -1 with err. */
int eval_write_report(const struct eval_counts *e, const char *const *names, const char *path,
                      char *err, size_t errlen);
/* A human-readable summary: accuracy, macro-F1 (micro-F1 too for multi-label), per class, and
 * the confusion matrix (single-label, up to 16 classes), into f. */
void eval_print(const struct eval_counts *e, const char *const *names, FILE *f);

#endif /* GANTRY_EVAL_H */
