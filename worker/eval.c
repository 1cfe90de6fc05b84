/*
 * eval.c - confusion-matrix counts, metrics and the JSON report (see eval.h).
 */
#include "worker/eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"

#define CM(e, t, p) ((e)->v[2 + (size_t)(t) * (size_t)(e)->n_classes + (size_t)(p)])
static uint64_t count(double c);

#define ML(e, c, i) ((e)->v[4 + 3 * (size_t)(c) + (i)]) /* i: 0 tp, 1 fp, 2 fn */

static int init(struct eval_counts *e, int n_classes, int multi)
{
    e->n_classes = 0;
    e->multi_label = e->regression = 0;
    e->v = NULL;
    e->kept = NULL, e->n_kept = e->cap_kept = 0, e->keep = 0;
    e->threshold = 0.5;
    if (n_classes < 1 || n_classes > EVAL_MAX_CLASSES)
        return -1;
    e->n_classes = n_classes;
    e->multi_label = multi == 1;
    e->regression = multi == 2;
    e->v = xcalloc(eval_counts_flat_len(e), sizeof(*e->v));
    return 0;
}

int eval_init(struct eval_counts *e, int n_classes)
{
    return init(e, n_classes, 0);
}

int eval_init_multi(struct eval_counts *e, int n_classes)
{
    return init(e, n_classes, 1);
}

int eval_init_regression(struct eval_counts *e)
{
    return init(e, 1, 2);
}

int eval_init_task(struct eval_counts *e, int n_classes, int label_words)
{
    return label_words < 0 ? eval_init_regression(e) : init(e, n_classes, label_words > 0);
}

void eval_keep_values(struct eval_counts *e)
{
    e->keep = e->regression;
}

static void keep_pair(struct eval_counts *e, float y, float z)
{
    if (e->n_kept == e->cap_kept) {
        e->cap_kept = e->cap_kept ? 2 * e->cap_kept : 1024;
        e->kept = xrealloc(e->kept, e->cap_kept * 2 * sizeof(float));
    }
    e->kept[2 * e->n_kept] = y, e->kept[2 * e->n_kept + 1] = z;
    e->n_kept++;
}

void eval_cleanup(struct eval_counts *e)
{
    free(e->kept);
    e->kept = NULL, e->n_kept = e->cap_kept = 0, e->keep = 0;
    free(e->v);
    e->v = NULL;
    e->n_classes = 0;
}

void eval_reset(struct eval_counts *e)
{
    memset(e->v, 0, eval_counts_flat_len(e) * sizeof(*e->v));
}

int eval_add(struct eval_counts *e, int true_label, int pred_label)
{
    if (e->multi_label || e->regression || true_label < 0 || true_label >= e->n_classes ||
        pred_label < 0 || pred_label >= e->n_classes)
        return -1;
    CM(e, true_label, pred_label) += 1.0;
    return 0;
}

size_t eval_add_batch(struct eval_counts *e, const int32_t *true_labels, const int32_t *pred_labels,
                      size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += eval_add(e, true_labels[i], pred_labels[i]) != 0;
    return bad;
}

size_t eval_add_logits(struct eval_counts *e, const int32_t *true_labels, const float *logits,
                       size_t n)
{
    size_t bad = 0;
    int c = e->n_classes;

    for (size_t i = 0; i < n; i++) {
        const float *row = logits + i * (size_t)c;
        int best = 0;
        for (int k = 1; k < c; k++)
            if (row[k] > row[best] || (isnan(row[best]) && !isnan(row[k])))
                best = k;
        bad += eval_add(e, true_labels[i], best) != 0;
    }
    return bad;
}

void eval_set_threshold(struct eval_counts *e, double p)
{
    if (p > 0.0 && p < 1.0)
        e->threshold = p;
}

float eval_threshold_logit(const struct eval_counts *e)
{
    /* sigmoid(z) > p where z > log(p / (1 - p)); 0 at 0.5, exactly */
    return e->threshold == 0.5 ? 0.0f : (float)log(e->threshold / (1.0 - e->threshold));
}

void eval_add_logits_multi(struct eval_counts *e, const int32_t *true_bits, int words,
                           const float *logits, size_t n)
{
    int K = e->n_classes;
    const float cut = eval_threshold_logit(e);
    if (!e->multi_label)
        return;
    for (size_t i = 0; i < n; i++) {
        const int32_t *y = true_bits + i * (size_t)words;
        const float *z = logits + i * (size_t)K;
        int wrong = 0;
        for (int c = 0; c < K && c < 32 * words; c++) {
            int t = (int)(((uint32_t)y[c >> 5] >> (c & 31)) & 1u), p = z[c] > cut;
            if (t && p)
                ML(e, c, 0) += 1.0;
            else if (p)
                ML(e, c, 1) += 1.0;
            else if (t)
                ML(e, c, 2) += 1.0;
            wrong |= t != p;
        }
        e->v[2] += 1.0;
        e->v[3] += !wrong;
    }
}

void eval_add_regression(struct eval_counts *e, const float *y, const float *z, size_t n)
{
    if (!e->regression)
        return;
    for (size_t i = 0; i < n; i++) {
        double a = y[i], b = z[i];
        e->v[2] += 1.0, e->v[3] += a, e->v[4] += b, e->v[5] += a * a, e->v[6] += b * b;
        e->v[7] += a * b, e->v[8] += fabs(b - a);
        if (e->keep)
            keep_pair(e, y[i], z[i]);
    }
}

void eval_add_loss(struct eval_counts *e, double loss_sum, uint64_t count)
{
    e->v[0] += loss_sum;
    e->v[1] += (double)count;
}

int eval_merge(struct eval_counts *dst, const struct eval_counts *src)
{
    if (dst->n_classes != src->n_classes || dst->multi_label != src->multi_label ||
        dst->regression != src->regression)
        return -1;
    for (size_t i = 0; i < eval_counts_flat_len(dst); i++)
        dst->v[i] += src->v[i];
    for (size_t i = 0; dst->keep && i < src->n_kept; i++)
        keep_pair(dst, src->kept[2 * i], src->kept[2 * i + 1]);
    if (src->n_kept < (size_t)count(src->v[2]))
        dst->keep = 0; /* src's pairs are not all there: no rank correlation */
    return 0;
}

double *eval_counts_flat(struct eval_counts *e)
{
    return e->v;
}

size_t eval_counts_flat_len(const struct eval_counts *e)
{
    return e->regression    ? 9
           : e->multi_label ? 4 + 3 * (size_t)e->n_classes
                            : 2 + (size_t)e->n_classes * (size_t)e->n_classes;
}

uint64_t eval_cm(const struct eval_counts *e, int true_label, int pred_label)
{
    if (e->multi_label || e->regression || true_label < 0 || true_label >= e->n_classes ||
        pred_label < 0 || pred_label >= e->n_classes)
        return 0;
    return count(CM(e, true_label, pred_label));
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static uint64_t count(double c)
{
    return c > 0 ? (uint64_t)llround(c) : 0; /* sums of 1s: exact below 2^53 */
}

/* Ranks (1-based; ties get their average rank) of x[stride * i], i < n, into r. */
struct ranked {
    float v;
    size_t i;
};

static int by_value(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

static void ranks(const float *x, size_t stride, size_t n, double *r)
{
    struct ranked *s = xmallocarray(n ? n : 1, sizeof(*s));
    for (size_t i = 0; i < n; i++)
        s[i] = (struct ranked){x[stride * i], i};
    qsort(s, n, sizeof(*s), by_value);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && s[j + 1].v == s[i].v)
            j++;
        for (size_t k = i; k <= j; k++)
            r[s[k].i] = (double)(i + j) / 2.0 + 1.0;
        i = j + 1;
    }
    free(s);
}

/* Spearman's rho: Pearson's correlation of the ranks of the kept pairs (0 when either side is
 * constant). */
static double spearman(const struct eval_counts *e)
{
    size_t n = e->n_kept;
    double *ry = xmallocarray(n ? n : 1, sizeof(double)), *rz = xmallocarray(n ? n : 1,
                                                                              sizeof(double));
    double sy = 0, sz = 0, syy = 0, szz = 0, syz = 0;
    ranks(e->kept, 2, n, ry);
    ranks(e->kept + 1, 2, n, rz);
    for (size_t i = 0; i < n; i++)
        sy += ry[i], sz += rz[i], syy += ry[i] * ry[i], szz += rz[i] * rz[i],
            syz += ry[i] * rz[i];
    free(ry), free(rz);
    double vy = n * syy - sy * sy, vz = n * szz - sz * sz;
    return vy > 0 && vz > 0 ? fmax(-1.0, fmin(1.0, (n * syz - sy * sz) / sqrt(vy * vz))) : 0.0;
}

static double f1_of(double p, double r)
{
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

static void compute_multi(const struct eval_counts *e, struct eval_metrics *m)
{
    int n = e->n_classes;
    uint64_t TP = 0, FP = 0, FN = 0, support = 0;

    m->multi_label = 1;
    m->total = count(e->v[2]);
    m->accuracy = ratio(count(e->v[3]), m->total);
    for (int c = 0; c < n; c++) {
        struct eval_class *k = &m->cls[c];
        uint64_t tp = count(ML(e, c, 0)), fp = count(ML(e, c, 1)), fn = count(ML(e, c, 2));
        k->support = tp + fn, k->predicted = tp + fp;
        k->precision = ratio(tp, tp + fp);
        k->recall = ratio(tp, tp + fn);
        k->f1 = f1_of(k->precision, k->recall);
        m->macro_precision += k->precision / n;
        m->macro_recall += k->recall / n;
        m->macro_f1 += k->f1 / n;
        TP += tp, FP += fp, FN += fn, support += k->support;
    }
    for (int c = 0; c < n; c++) /* weighted by support (scikit-learn's "weighted") */
        m->weighted_f1 += support ? m->cls[c].f1 * (double)m->cls[c].support / (double)support
                                  : 0.0;
    m->micro_precision = ratio(TP, TP + FP);
    m->micro_recall = ratio(TP, TP + FN);
    m->micro_f1 = f1_of(m->micro_precision, m->micro_recall);
    m->hamming_loss = ratio(FP + FN, m->total * (uint64_t)n);
    m->loss = e->v[1] > 0 ? e->v[0] / e->v[1] : NAN;
}

void eval_compute(const struct eval_counts *e, struct eval_metrics *m)
{
    int n = e->n_classes;
    uint64_t correct = 0;

    memset(m, 0, sizeof(*m));
    m->n_classes = n;
    m->cls = xcalloc(n ? (size_t)n : 1, sizeof(*m->cls));
    if (e->multi_label) {
        compute_multi(e, m);
        return;
    }
    if (e->regression) {
        const double *v = e->v, k = v[2];
        double vy = k * v[5] - v[3] * v[3], vz = k * v[6] - v[4] * v[4];
        m->regression = 1;
        m->total = count(k);
        m->loss = v[1] > 0 ? v[0] / v[1] : NAN;
        m->mse = k > 0 ? (v[5] - 2 * v[7] + v[6]) / k : 0.0;
        m->mse = m->mse > 0 ? m->mse : 0.0; /* rounding of the sums */
        m->mae = k > 0 ? v[8] / k : 0.0;
        m->pearson = vy > 0 && vz > 0 ? (k * v[7] - v[3] * v[4]) / sqrt(vy * vz) : 0.0;
        m->pearson = fmax(-1.0, fmin(1.0, m->pearson));
        m->spearman = e->keep && e->n_kept == m->total ? spearman(e) : NAN;
        return;
    }
    for (int t = 0; t < n; t++)
        for (int p = 0; p < n; p++) {
            uint64_t c = eval_cm(e, t, p);
            m->cls[t].support += c;
            m->cls[p].predicted += c;
            m->total += c;
            if (t == p)
                correct += c;
        }
    m->accuracy = ratio(correct, m->total);
    for (int c = 0; c < n; c++) {
        struct eval_class *k = &m->cls[c];
        uint64_t tp = eval_cm(e, c, c);
        k->precision = ratio(tp, k->predicted);
        k->recall = ratio(tp, k->support);
        k->f1 = f1_of(k->precision, k->recall);
        m->macro_precision += k->precision / n;
        m->macro_recall += k->recall / n;
        m->macro_f1 += k->f1 / n;
        m->weighted_f1 += m->total ? k->f1 * (double)k->support / (double)m->total : 0.0;
    }
    m->micro_precision = m->micro_recall = m->micro_f1 = m->accuracy;
    m->loss = e->v[1] > 0 ? e->v[0] / e->v[1] : NAN;
}

void eval_metrics_cleanup(struct eval_metrics *m)
{
    free(m->cls);
    memset(m, 0, sizeof(*m));
}

static const char *class_name(const char *const *names, int i, char tmp[16])
{
    if (names && names[i])
        return names[i];
    snprintf(tmp, 16, "%d", i);
    return tmp;
}

json_t *eval_report_json(const struct eval_counts *e, const char *const *names)
{
    struct eval_metrics m;
    json_t *r = json_object(), *labels = json_array(), *per = json_object(), *cm = json_array();
    char tmp[16];

    eval_compute(e, &m);
    json_object_set_new(r, "examples", json_integer((json_int_t)m.total));
    if (m.regression) {
        json_object_set_new(r, "regression", json_true());
        json_object_set_new(r, "mse", json_real(m.mse));
        json_object_set_new(r, "mae", json_real(m.mae));
        json_object_set_new(r, "pearson", json_real(m.pearson));
        if (!isnan(m.spearman))
            json_object_set_new(r, "spearman", json_real(m.spearman));
        if (!isnan(m.loss))
            json_object_set_new(r, "loss", json_real(m.loss));
        json_decref(labels), json_decref(per), json_decref(cm);
        eval_metrics_cleanup(&m);
        return r;
    }
    json_object_set_new(r, "accuracy", json_real(m.accuracy));
    json_object_set_new(r, "macro_precision", json_real(m.macro_precision));
    json_object_set_new(r, "macro_recall", json_real(m.macro_recall));
    json_object_set_new(r, "macro_f1", json_real(m.macro_f1));
    json_object_set_new(r, "weighted_f1", json_real(m.weighted_f1));
    if (m.multi_label) {
        json_object_set_new(r, "multi_label", json_true());
        json_object_set_new(r, "threshold", json_real(e->threshold));
        json_object_set_new(r, "micro_precision", json_real(m.micro_precision));
        json_object_set_new(r, "micro_recall", json_real(m.micro_recall));
        json_object_set_new(r, "micro_f1", json_real(m.micro_f1));
        json_object_set_new(r, "hamming_loss", json_real(m.hamming_loss));
    }
    if (!isnan(m.loss))
        json_object_set_new(r, "loss", json_real(m.loss));
    for (int c = 0; c < m.n_classes; c++) {
        const char *name = class_name(names, c, tmp);
        json_t *row = json_array();
        json_array_append_new(labels, json_string(name));
        json_object_set_new(per, name,
                            json_pack("{s:f, s:f, s:f, s:I}", "precision", m.cls[c].precision,
                                      "recall", m.cls[c].recall, "f1", m.cls[c].f1, "support",
                                      (json_int_t)m.cls[c].support));
        if (m.multi_label) {
            json_object_set_new(json_object_get(per, name), "predicted",
                                json_integer((json_int_t)m.cls[c].predicted));
            json_decref(row);
            continue;
        }
        for (int p = 0; p < m.n_classes; p++)
            json_array_append_new(row, json_integer((json_int_t)eval_cm(e, c, p)));
        json_array_append_new(cm, row);
    }
    json_object_set_new(r, "labels", labels);
    json_object_set_new(r, "per_class", per);
    if (m.multi_label)
        json_decref(cm);
    else
        json_object_set_new(r, "confusion_matrix", cm);
    eval_metrics_cleanup(&m);
    return r;
}

int eval_write_report(const struct eval_counts *e, const char *const *names, const char *path,
                      char *err, size_t errlen)
{
    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 16);
    json_t *r = eval_report_json(e, names);
    FILE *f = NULL;
    int fd, rc = -1;

    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        snprintf(err, errlen, "%s: cannot create temp file: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        goto out;
    }
    if (json_dumpf(r, f, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) || fputc('\n', f) == EOF ||
        fflush(f) || fsync(fileno(f))) {
        snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        goto out;
    }
    if (fclose(f) || rename(tmp, path)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    json_decref(r);
    free(tmp);
    return rc;
}

void eval_print(const struct eval_counts *e, const char *const *names, FILE *f)
{
    struct eval_metrics m;
    char tmp[16];

    eval_compute(e, &m);
    if (m.regression) {
        fprintf(f, "eval | %llu examples | MSE %.4f | MAE %.4f | Pearson %.4f",
                (unsigned long long)m.total, m.mse, m.mae, m.pearson);
        if (!isnan(m.spearman))
            fprintf(f, " | Spearman %.4f", m.spearman);
        fputc('\n', f);
        eval_metrics_cleanup(&m);
        return;
    }
    if (m.multi_label)
        fprintf(f, "eval | %llu examples | exact match %.4f | micro-F1 %.4f | macro-F1 %.4f | "
                "hamming loss %.4f", (unsigned long long)m.total, m.accuracy, m.micro_f1,
                m.macro_f1, m.hamming_loss);
    else
        fprintf(f, "eval | %llu examples | accuracy %.4f | macro-F1 %.4f",
                (unsigned long long)m.total, m.accuracy, m.macro_f1);
    if (!isnan(m.loss))
        fprintf(f, " | loss %.4f", m.loss);
    fprintf(f, "\n%-16s %9s %9s %9s %9s\n", "class", "precision", "recall", "f1", "support");
    for (int c = 0; c < m.n_classes; c++)
        fprintf(f, "%-16.16s %9.4f %9.4f %9.4f %9llu\n", class_name(names, c, tmp),
                m.cls[c].precision, m.cls[c].recall, m.cls[c].f1,
                (unsigned long long)m.cls[c].support);
    if (m.n_classes <= 16 && !m.multi_label) {
        fprintf(f, "confusion (rows true, columns predicted):\n");
        for (int t = 0; t < m.n_classes; t++) {
            fprintf(f, "%-16.16s", class_name(names, t, tmp));
            for (int p = 0; p < m.n_classes; p++)
                fprintf(f, " %9llu", (unsigned long long)eval_cm(e, t, p));
            fputc('\n', f);
        }
    }
    eval_metrics_cleanup(&m);
}
