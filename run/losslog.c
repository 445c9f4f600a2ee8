// losslog.c: see losslog.h.
#include "losslog.h"
#include "../core/check.h"
#include "../draw/canvas.h"
#include "../draw/plot.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void losslog_add(LossLog *l, double step, double loss) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->step = xrealloc(l->step, (size_t)l->cap, sizeof(double));
        l->loss = xrealloc(l->loss, (size_t)l->cap, sizeof(double));
    }
    l->step[l->n] = step;
    l->loss[l->n++] = loss;
}

void losslog_free(LossLog *l) {
    free(l->step);
    free(l->loss);
    *l = (LossLog){0};
}

int losslog_read(LossLog *l, const char *path, char *err, size_t len) {
    *l = (LossLog){0};
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(err, len, "cannot open %s: is this a run folder written by train?", path), -1;
    char line[1024];
    int lineno = 1, rc = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, "step,loss", 9)) {
        snprintf(err, len, "%s does not start with the header 'step,loss'", path);
        rc = -1;
    }
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0; // quoted without its line ending
        double s, v;
        if (!line[0]) continue;
        if (sscanf(line, "%lf,%lf", &s, &v) != 2) {
            snprintf(err, len, "%s: line %d is not 'step,loss,...': %.60s", path, lineno, line);
            rc = -1;
        } else if (!(isfinite(s) && s >= 0 && s == floor(s))) {
            snprintf(err, len, "%s: line %d has step %g, but a step is a whole number >= 0 (the "
                     "training step of the row); correct or remove the row", path, lineno, s);
            rc = -1;
        } else if (l->n && !(s > l->step[l->n - 1])) { // comparisons merge runs by step
            snprintf(err, len, "%s: line %d has step %.0f after step %.0f, but steps must increase "
                     "strictly from row to row; remove the repeated or out-of-order rows",
                     path, lineno, s, l->step[l->n - 1]);
            rc = -1;
        } else losslog_add(l, s, v);
    }
    fclose(f);
    if (!rc && l->n == 0) snprintf(err, len, "%s has no rows", path), rc = -1;
    if (rc) losslog_free(l);
    return rc;
}

int losslog_rel_diff(const LossLog *a, const LossLog *b, double *steps, double *rel) {
    int m = 0;
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        if (a->step[i] < b->step[j]) i++;
        else if (a->step[i] > b->step[j]) j++;
        else {
            steps[m] = a->step[i];
            rel[m++] = fabs(a->loss[i] - b->loss[j]) / fmax(fabs(b->loss[j]), 1e-300);
            i++, j++;
        }
    }
    return m;
}

LossDiff losslog_diff(const LossLog *a, const LossLog *b, double tol) {
    LossDiff d = {.first_over = -1, .step = xcalloc((size_t)a->n, sizeof(double)),
                  .rel = xcalloc((size_t)a->n, sizeof(double))};
    d.n = losslog_rel_diff(a, b, d.step, d.rel);
    for (int k = 0; k < d.n; k++) {
        if (!isnan(d.rel[d.worst]) && !(d.rel[k] <= d.rel[d.worst])) d.worst = k;
        if (d.first_over < 0 && !(d.rel[k] <= tol)) d.first_over = k;
    }
    return d;
}

void losslog_diff_free(LossDiff *d) {
    free(d->step);
    free(d->rel);
    *d = (LossDiff){0};
}

static const uint8_t palette[][3] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {148, 103, 189}};

int losslog_plot(const char *path, const char *title, const LossLog *runs, const char *const *names,
                 int n_runs, bool diff, double tol, char *err, size_t len) {
    const uint8_t white[3] = {255, 255, 255}, grey[3] = {120, 120, 120};
    bool two = diff && n_runs == 2;
    int W = 900, H = two ? 760 : 420;
    Canvas cv = canvas_create(W, H, white);
    PlotSeries s[4];
    for (int i = 0; i < n_runs && i < 4; i++)
        s[i] = (PlotSeries){names[i], runs[i].step, runs[i].loss, runs[i].n,
                            {palette[i][0], palette[i][1], palette[i][2]}};
    plot_panel(&cv, 0, 0, W, 420, title, "step", s, n_runs < 4 ? n_runs : 4, true);
    double *rel = NULL, *xs = NULL, tol_x[2], tol_y[2];
    if (two) { // relative difference at the steps both runs logged
        rel = xcalloc((size_t)runs[0].n, sizeof(double));
        xs = xcalloc((size_t)runs[0].n, sizeof(double));
        int m = losslog_rel_diff(&runs[0], &runs[1], xs, rel);
        PlotSeries d[2] = {{"|A - B| / |B|", xs, rel, m, {214, 39, 40}}};
        int nd = 1;
        if (tol > 0 && m > 0) {
            tol_x[0] = xs[0], tol_x[1] = xs[m - 1], tol_y[0] = tol_y[1] = tol;
            d[nd++] = (PlotSeries){"tolerance", tol_x, tol_y, 2, {grey[0], grey[1], grey[2]}};
        }
        plot_panel(&cv, 0, 420, W, 340, "relative loss difference per step", "step", d, nd, true);
    }
    int rc = canvas_write_png(&cv, path, err, len);
    canvas_free(&cv);
    free(rel);
    free(xs);
    return rc;
}
