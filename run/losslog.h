// losslog.h: loss curves: loss.csv (header first, columns start with step,loss) and their plots
// (loss.png for a run; for a comparison, both curves and their relative difference).
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef struct LossLog {
    int n, cap;
    double *step, *loss;
} LossLog;

void losslog_add(LossLog *l, double step, double loss);
void losslog_free(LossLog *l);
// Reads the step and loss columns of a loss.csv, whose steps are whole numbers >= 0 that increase
// strictly from row to row (a loss may be NaN or infinite); -1 with a message naming the file and
// line on failure.
int losslog_read(LossLog *l, const char *path, char *err, size_t len);
// |a - b| / |b| at every step both logged (each sorted by step, as losslog_read guarantees), into steps and rel (room for min(a->n, b->n) each);
// returns how many.
int losslog_rel_diff(const LossLog *a, const LossLog *b, double *steps, double *rel);
// The same with its verdict, what compare, verify and the bug catalogue report: step[i] and
// rel[i] for i < n; worst, the index of the largest difference, and first_over, of the first
// above tol, or -1 (a NaN counts as the largest, and as above tol). Freed by losslog_diff_free.
typedef struct LossDiff {
    int n, worst, first_over;
    double *step, *rel;
} LossDiff;
LossDiff losslog_diff(const LossLog *a, const LossLog *b, double tol);
void losslog_diff_free(LossDiff *d);
// One panel with each run's curve (log scale); with two runs and `diff`, a second panel with
// |a - b| / |b| per common step (log scale) and the tolerance as a line (tol > 0).
int losslog_plot(const char *path, const char *title, const LossLog *runs, const char *const *names,
                 int n_runs, bool diff, double tol, char *err, size_t len);
