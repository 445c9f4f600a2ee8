// plot.c: line plots in a canvas panel. Layout, top to bottom: title, plot area (grid, curves,
// legend in its top-right corner, y tick labels to its left), x tick labels, x-axis label. Text is
// drawn at scale 2 in panels of at least 360x240 pixels, else at scale 1.
#include "plot.h"
#include "../core/check.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const uint8_t WHITE[3] = {255, 255, 255}, INK[3] = {30, 30, 30}, MUTED[3] = {90, 90, 90},
                     GRID[3] = {225, 225, 225}, GRID_MINOR[3] = {242, 242, 242},
                     FRAME[3] = {170, 170, 170};

typedef struct {
    double v[64]; // tick positions, in data units (log10 of the value on a log axis)
    char label[64][24];
    int n;
} Ticks;

static bool usable(const PlotSeries *s, int i, bool log_y) {
    return isfinite(s->x[i]) && isfinite(s->y[i]) && (!log_y || s->y[i] > 0);
}

// "nice" step (1, 2 or 5 times a power of ten) giving about `target` intervals over range
static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

static void format_number(char *out, size_t n, double v, double step) {
    if (fabs(v) < 1e-9 * step) v = 0;
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (decimals <= 4 && fabs(v) < 1e7) snprintf(out, n, "%.*f", decimals, v);
    else { // enough significant digits to tell neighbouring ticks apart
        int digits = v == 0 ? 1 : (int)ceil(log10(fabs(v) / step)) + 1;
        snprintf(out, n, "%.*g", digits < 2 ? 2 : digits > 12 ? 12 : digits, v);
    }
    // 1e+07 -> 1e7, 2.5e-05 -> 2.5e-5
    char *e = strchr(out, 'e');
    if (e) {
        char *src = e + 1, *dst = e + 1;
        if (*src == '+') src++;
        else if (*src == '-') *dst++ = *src++;
        while (*src == '0' && src[1]) src++;
        memmove(dst, src, strlen(src) + 1);
    }
}

static void linear_ticks(Ticks *t, double lo, double hi, int target) {
    double step = nice_step(hi - lo, target);
    t->n = 0;
    for (double k = ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step && t->n < 64; k++) {
        t->v[t->n] = k * step;
        format_number(t->label[t->n], sizeof t->label[0], k * step, step);
        t->n++;
    }
}

// axis [lo_e, hi_e] in decades; a label at every `every`-th power of ten
static void log_ticks(Ticks *t, int lo_e, int hi_e) {
    int every = (hi_e - lo_e + 5) / 6;
    if (every < 1) every = 1;
    t->n = 0;
    for (int e = lo_e; e <= hi_e && t->n < 64; e++) {
        if ((e - lo_e) % every) continue;
        t->v[t->n] = e;
        if (e >= -3 && e <= 4) format_number(t->label[t->n], sizeof t->label[0], pow(10, e), pow(10, e));
        else snprintf(t->label[t->n], sizeof t->label[0], "1e%d", e);
        t->n++;
    }
}

void plot_panel(Canvas *c, int x, int y, int w, int h, const char *title, const char *xlabel,
                const PlotSeries *s, int n_series, bool log_y) {
    CHECK(w >= 120 && h >= 80, "plot_panel: panel %dx%d is too small; give it at least 120x80 pixels",
          w, h);
    int ts = (w >= 360 && h >= 240) ? 2 : 1;
    int glyph = 7 * ts, pad = 6 * ts;
    double lw = ts == 2 ? 2.0 : 1.5;
    canvas_fill_rect(c, x, y, w, h, WHITE);

    // data range: x over every finite point, y over the points a log axis can show
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            x_lo = fmin(x_lo, s[k].x[i]), x_hi = fmax(x_hi, s[k].x[i]);
            if (!usable(&s[k], i, log_y)) continue;
            y_lo = fmin(y_lo, s[k].y[i]), y_hi = fmax(y_hi, s[k].y[i]);
        }
    bool any_finite = x_lo <= x_hi, empty = !(y_lo <= y_hi);
    if (!any_finite) x_lo = 0, x_hi = 1;
    if (empty) y_lo = log_y ? 1 : 0, y_hi = log_y ? 10 : 1;
    if (x_lo == x_hi) x_lo -= 1, x_hi += 1;

    Ticks xt, yt;
    double ya, yb; // y axis range in axis units (log10 on a log axis)
    if (log_y) {
        // whole decades strictly around the data, so a value at a power of ten (a tolerance
        // line, say) is drawn inside the panel rather than on its frame
        int lo_e = (int)ceil(log10(y_lo)) - 1, hi_e = (int)floor(log10(y_hi)) + 1;
        if (hi_e == lo_e) hi_e++;
        ya = lo_e, yb = hi_e;
        log_ticks(&yt, lo_e, hi_e);
    } else {
        if (y_lo == y_hi) {
            double d = y_lo == 0 ? 1 : 0.1 * fabs(y_lo);
            y_lo -= d, y_hi += d;
        }
        double m = 0.05 * (y_hi - y_lo);
        ya = y_lo - m, yb = y_hi + m;
        linear_ticks(&yt, ya, yb, 5);
    }
    linear_ticks(&xt, x_lo, x_hi, w >= 500 ? 6 : 4);

    // plot area
    int label_w = 0;
    for (int i = 0; i < yt.n; i++) {
        int tw = canvas_text_width(yt.label[i], ts);
        if (tw > label_w) label_w = tw;
    }
    int top = y + pad + (title && *title ? glyph + 2 * pad : 0);
    int left = x + pad + label_w + pad;
    int right = x + w - 3 * pad;
    int bottom = y + h - pad - (xlabel && *xlabel ? glyph + pad : 0) - glyph - pad;
    if (right - left < 20 || bottom - top < 20) { // too small for axes: title only
        if (title) canvas_text(c, x + pad, y + pad, title, ts, INK);
        return;
    }
    double sx = (right - left) / (x_hi - x_lo), sy = (bottom - top) / (yb - ya);
#define PX(v) (left + ((v) - x_lo) * sx)
#define PY(v) (bottom - ((log_y ? log10(v) : (v)) - ya) * sy)
#define PYA(a) (bottom - ((a) - ya) * sy) // from axis units

    // grid and ticks
    if (log_y && yb - ya <= 4)
        for (int e = (int)ya; e < (int)yb; e++)
            for (int m = 2; m <= 9; m++) {
                double py = PYA(e + log10(m));
                canvas_fill_rect(c, left, (int)py, right - left, 1, GRID_MINOR);
            }
    for (int i = 0; i < yt.n; i++) {
        int py = (int)PYA(yt.v[i]);
        canvas_fill_rect(c, left, py, right - left, 1, GRID);
        canvas_fill_rect(c, left - 2 * ts, py, 2 * ts, ts, INK);
        canvas_text(c, left - pad - canvas_text_width(yt.label[i], ts), py - glyph / 2, yt.label[i],
                    ts, MUTED);
    }
    for (int i = 0; i < xt.n; i++) {
        int px = (int)PX(xt.v[i]);
        canvas_fill_rect(c, px, top, 1, bottom - top, GRID);
        canvas_fill_rect(c, px, bottom, ts, 2 * ts, INK);
        int tw = canvas_text_width(xt.label[i], ts), tx = px - tw / 2;
        if (tx + tw > x + w - 1) tx = x + w - 1 - tw; // keep wide labels inside the panel
        canvas_text(c, tx, bottom + pad, xt.label[i], ts, MUTED);
    }

    // curves: segments between consecutive usable points; a lone point is a dot
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!usable(&s[k], i, log_y)) continue;
            double px = PX(s[k].x[i]), py = PY(s[k].y[i]);
            bool prev = i > 0 && usable(&s[k], i - 1, log_y);
            bool next = i + 1 < s[k].n && usable(&s[k], i + 1, log_y);
            if (next) canvas_line(c, px, py, PX(s[k].x[i + 1]), PY(s[k].y[i + 1]), lw, s[k].rgb);
            else if (!prev) canvas_line(c, px, py, px, py, 2 * lw, s[k].rgb);
        }
    // frame of the plot area
    canvas_fill_rect(c, left, top, right - left, 1, FRAME);
    canvas_fill_rect(c, right, top, 1, bottom - top + 1, FRAME);
    canvas_fill_rect(c, left - 1, top, ts, bottom - top + 1, INK);
    canvas_fill_rect(c, left - 1, bottom, right - left + 2, ts, INK);
    if (empty) {
        const char *msg = any_finite ? "no positive values to show on a log scale" : "no data";
        canvas_text(c, (left + right - canvas_text_width(msg, ts)) / 2, (top + bottom - glyph) / 2,
                    msg, ts, MUTED);
    }

    // legend: in the corner of the plot area that hides the fewest curve pixels
    int n_lab = 0, lab_w = 0, swatch = 16 * ts, row = glyph + pad;
    for (int k = 0; k < n_series; k++)
        if (s[k].label && *s[k].label) {
            n_lab++;
            int tw = canvas_text_width(s[k].label, ts);
            if (tw > lab_w) lab_w = tw;
        }
    if (n_lab) {
        int bw = pad + swatch + pad + lab_w + pad, bh = pad + n_lab * row;
        int corner_x[4] = {right - pad - bw, left + pad + ts, right - pad - bw, left + pad + ts};
        int corner_y[4] = {top + pad, top + pad, bottom - pad - bh, bottom - pad - bh};
        long hidden[4] = {0};
        for (int k = 0; k < n_series; k++)
            for (int i = 0; i + 1 < s[k].n; i++) {
                if (!usable(&s[k], i, log_y) || !usable(&s[k], i + 1, log_y)) continue;
                double ax = PX(s[k].x[i]), ay = PY(s[k].y[i]);
                double bx = PX(s[k].x[i + 1]), by = PY(s[k].y[i + 1]);
                int steps = 1 + (int)(hypot(bx - ax, by - ay) / 2);
                for (int j = 0; j < steps; j++) {
                    double px = ax + (bx - ax) * j / steps, py = ay + (by - ay) * j / steps;
                    for (int q = 0; q < 4; q++)
                        hidden[q] += px >= corner_x[q] && px < corner_x[q] + bw &&
                                     py >= corner_y[q] && py < corner_y[q] + bh;
                }
            }
        int best = 0;
        for (int q = 1; q < 4; q++)
            if (hidden[q] < hidden[best]) best = q;
        int bx = corner_x[best], by = corner_y[best];
        canvas_fill_rect(c, bx - 1, by - 1, bw + 2, bh + 2, FRAME);
        canvas_fill_rect(c, bx, by, bw, bh, WHITE);
        int ry = by + pad;
        for (int k = 0; k < n_series; k++) {
            if (!s[k].label || !*s[k].label) continue;
            double cy = ry + glyph / 2.0;
            canvas_line(c, bx + pad, cy, bx + pad + swatch, cy, 1.5 * lw, s[k].rgb);
            canvas_text(c, bx + pad + swatch + pad, ry, s[k].label, ts, INK);
            ry += row;
        }
    }
#undef PX
#undef PY
#undef PYA

    // title and x label
    if (title && *title) { // drawn twice, one pixel apart: a bold face
        int tx = (left + right - canvas_text_width(title, ts)) / 2;
        canvas_text(c, tx, y + pad + pad / 2, title, ts, INK);
        canvas_text(c, tx + 1, y + pad + pad / 2, title, ts, INK);
    }
    if (xlabel && *xlabel)
        canvas_text(c, (left + right - canvas_text_width(xlabel, ts)) / 2,
                    bottom + pad + glyph + pad, xlabel, ts, INK);
}
