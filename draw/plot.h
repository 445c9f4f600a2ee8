// plot.h: line plots drawn into a panel of a Canvas (loss curves, run comparisons): white
// background, axes with a few "nice" numeric ticks and grid lines, a title, an x-axis label and a
// legend. On a log y axis, ticks sit at powers of ten and non-positive values are skipped.
#pragma once
#include "canvas.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *label; // legend text; NULL or "" for none
    const double *x;   // [n]
    const double *y;   // [n]; non-finite values (and non-positive ones on a log axis) break the line
    int n;
    uint8_t rgb[3];
} PlotSeries;

// Draws into the rectangle (x, y, w, h) of c; w >= 120 and h >= 80 pixels.
void plot_panel(Canvas *c, int x, int y, int w, int h, const char *title, const char *xlabel,
                const PlotSeries *s, int n_series, bool log_y);
