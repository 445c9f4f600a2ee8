// plot.c: line plots in a canvas panel. Layout, top to bottom: title, plot area (grid, curves,
// legend in the corner where it hides the least of them, y tick labels to its left), x tick
// labels, x-axis label. Text is drawn at scale 2 in panels of at least 360x240 pixels, else at
// scale 1.
#include "plot.h"
#include "../core/check.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const uint8_t WHITE[3] = {255, 255, 255}, INK[3] = {30, 30, 30}, MUTED[3] = {90, 90, 90},
                     GRID[3] = {225, 225, 225}, GRID_MINOR[3] = {242, 242, 242},
                     FRAME[3] = {170, 170, 170};

// ---- ticks -------------------------------------------------------------------------------------
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

// ---- the panel: its geometry and the map from data to pixels -----------------------------------
typedef struct {
    Canvas *c;
    int x, y, w, h;                // the whole panel
    int ts, glyph, pad;            // text scale, a capital's height and the spacing, in pixels
    double lw;                     // curve width in pixels
    bool log_y;
    bool any_finite, empty;        // some finite point; no point the y axis can show
    double x_lo, x_hi, ya, yb;     // axis ranges; ya, yb in axis units (log10 on a log axis)
    Ticks xt, yt;
    int left, right, top, bottom;  // the plot area
    double sx, sy;                 // pixels per axis unit
} Panel;

// pixel coordinates of x and y values; py_axis from y in axis units
static double px_of(const Panel *p, double v) { return p->left + (v - p->x_lo) * p->sx; }
static double py_axis(const Panel *p, double a) { return p->bottom - (a - p->ya) * p->sy; }
static double py_of(const Panel *p, double v) { return py_axis(p, p->log_y ? log10(v) : v); }

// data range: x over every finite point, y over the points a log axis can show
static void data_range(Panel *p, const PlotSeries *s, int n_series, double *y_lo, double *y_hi) {
    double x_lo = INFINITY, x_hi = -INFINITY;
    *y_lo = INFINITY, *y_hi = -INFINITY;
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            x_lo = fmin(x_lo, s[k].x[i]), x_hi = fmax(x_hi, s[k].x[i]);
            if (!usable(&s[k], i, p->log_y)) continue;
            *y_lo = fmin(*y_lo, s[k].y[i]), *y_hi = fmax(*y_hi, s[k].y[i]);
        }
    p->any_finite = x_lo <= x_hi, p->empty = !(*y_lo <= *y_hi);
    if (!p->any_finite) x_lo = 0, x_hi = 1;
    if (p->empty) *y_lo = p->log_y ? 1 : 0, *y_hi = p->log_y ? 10 : 1;
    if (x_lo == x_hi) x_lo -= 1, x_hi += 1;
    p->x_lo = x_lo, p->x_hi = x_hi;
}

// the axes' ranges and ticks
static void make_axes(Panel *p, double y_lo, double y_hi) {
    if (p->log_y) {
        // whole decades strictly around the data, so a value at a power of ten (a tolerance
        // line, say) is drawn inside the panel rather than on its frame
        int lo_e = (int)ceil(log10(y_lo)) - 1, hi_e = (int)floor(log10(y_hi)) + 1;
        if (hi_e == lo_e) hi_e++;
        p->ya = lo_e, p->yb = hi_e;
        log_ticks(&p->yt, lo_e, hi_e);
    } else {
        if (y_lo == y_hi) {
            double d = y_lo == 0 ? 1 : 0.1 * fabs(y_lo);
            y_lo -= d, y_hi += d;
        }
        double m = 0.05 * (y_hi - y_lo);
        p->ya = y_lo - m, p->yb = y_hi + m;
        linear_ticks(&p->yt, p->ya, p->yb, 5);
    }
    linear_ticks(&p->xt, p->x_lo, p->x_hi, p->w >= 500 ? 6 : 4);
}

// The plot area inside the panel, room left for the title, tick labels and x label; false when
// it is too small for axes.
static bool place_area(Panel *p, const char *title, const char *xlabel) {
    int label_w = 0;
    for (int i = 0; i < p->yt.n; i++) {
        int tw = canvas_text_width(p->yt.label[i], p->ts);
        if (tw > label_w) label_w = tw;
    }
    int pad = p->pad, glyph = p->glyph;
    p->top = p->y + pad + (title && *title ? glyph + 2 * pad : 0);
    p->left = p->x + pad + label_w + pad;
    p->right = p->x + p->w - 3 * pad;
    p->bottom = p->y + p->h - pad - (xlabel && *xlabel ? glyph + pad : 0) - glyph - pad;
    if (p->right - p->left < 20 || p->bottom - p->top < 20) return false;
    p->sx = (p->right - p->left) / (p->x_hi - p->x_lo);
    p->sy = (p->bottom - p->top) / (p->yb - p->ya);
    return true;
}

// ---- drawing -----------------------------------------------------------------------------------
// grid lines (minor ones at 2..9 on a log axis of at most 4 decades), tick marks and labels
static void draw_grid(const Panel *p) {
    Canvas *c = p->c;
    int ts = p->ts, left = p->left, right = p->right, top = p->top, bottom = p->bottom;
    if (p->log_y && p->yb - p->ya <= 4)
        for (int e = (int)p->ya; e < (int)p->yb; e++)
            for (int m = 2; m <= 9; m++) {
                double py = py_axis(p, e + log10(m));
                canvas_fill_rect(c, left, (int)py, right - left, 1, GRID_MINOR);
            }
    for (int i = 0; i < p->yt.n; i++) {
        int py = (int)py_axis(p, p->yt.v[i]);
        canvas_fill_rect(c, left, py, right - left, 1, GRID);
        canvas_fill_rect(c, left - 2 * ts, py, 2 * ts, ts, INK);
        canvas_text(c, left - p->pad - canvas_text_width(p->yt.label[i], ts), py - p->glyph / 2,
                    p->yt.label[i], ts, MUTED);
    }
    for (int i = 0; i < p->xt.n; i++) {
        int px = (int)px_of(p, p->xt.v[i]);
        canvas_fill_rect(c, px, top, 1, bottom - top, GRID);
        canvas_fill_rect(c, px, bottom, ts, 2 * ts, INK);
        int tw = canvas_text_width(p->xt.label[i], ts), tx = px - tw / 2;
        int panel_right = p->x + p->w - 1;
        if (tx + tw > panel_right) tx = panel_right - tw; // keep wide labels inside the panel
        canvas_text(c, tx, bottom + p->pad, p->xt.label[i], ts, MUTED);
    }
}

// curves: segments between consecutive usable points; a lone point is a dot
static void draw_curves(const Panel *p, const PlotSeries *s, int n_series) {
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!usable(&s[k], i, p->log_y)) continue;
            double px = px_of(p, s[k].x[i]), py = py_of(p, s[k].y[i]);
            bool prev = i > 0 && usable(&s[k], i - 1, p->log_y);
            bool next = i + 1 < s[k].n && usable(&s[k], i + 1, p->log_y);
            if (next)
                canvas_line(p->c, px, py, px_of(p, s[k].x[i + 1]), py_of(p, s[k].y[i + 1]), p->lw,
                            s[k].rgb);
            else if (!prev) canvas_line(p->c, px, py, px, py, 2 * p->lw, s[k].rgb);
        }
}

// the frame of the plot area, and a note in it when there is nothing to show
static void draw_frame(const Panel *p) {
    Canvas *c = p->c;
    int ts = p->ts, left = p->left, right = p->right, top = p->top, bottom = p->bottom;
    canvas_fill_rect(c, left, top, right - left, 1, FRAME);
    canvas_fill_rect(c, right, top, 1, bottom - top + 1, FRAME);
    canvas_fill_rect(c, left - 1, top, ts, bottom - top + 1, INK);
    canvas_fill_rect(c, left - 1, bottom, right - left + 2, ts, INK);
    if (p->empty) {
        const char *msg = p->any_finite ? "no positive values to show on a log scale" : "no data";
        canvas_text(c, (left + right - canvas_text_width(msg, ts)) / 2,
                    (top + bottom - p->glyph) / 2, msg, ts, MUTED);
    }
}

// Which of the four corners (x[q], y[q]) of a bw x bh box hides the fewest curve pixels: each
// segment is sampled every 2 pixels.
static int quietest_corner(const Panel *p, const PlotSeries *s, int n_series, const int x[4],
                           const int y[4], int bw, int bh) {
    long hidden[4] = {0};
    for (int k = 0; k < n_series; k++)
        for (int i = 0; i + 1 < s[k].n; i++) {
            if (!usable(&s[k], i, p->log_y) || !usable(&s[k], i + 1, p->log_y)) continue;
            double ax = px_of(p, s[k].x[i]), ay = py_of(p, s[k].y[i]);
            double bx = px_of(p, s[k].x[i + 1]), by = py_of(p, s[k].y[i + 1]);
            int steps = 1 + (int)(hypot(bx - ax, by - ay) / 2);
            for (int j = 0; j < steps; j++) {
                double px = ax + (bx - ax) * j / steps, py = ay + (by - ay) * j / steps;
                for (int q = 0; q < 4; q++)
                    hidden[q] += px >= x[q] && px < x[q] + bw && py >= y[q] && py < y[q] + bh;
            }
        }
    int best = 0;
    for (int q = 1; q < 4; q++)
        if (hidden[q] < hidden[best]) best = q;
    return best;
}

// legend: in the corner of the plot area that hides the fewest curve pixels
static void draw_legend(const Panel *p, const PlotSeries *s, int n_series) {
    int ts = p->ts, pad = p->pad, n_lab = 0, lab_w = 0, swatch = 16 * ts, row = p->glyph + pad;
    for (int k = 0; k < n_series; k++)
        if (s[k].label && *s[k].label) {
            n_lab++;
            int tw = canvas_text_width(s[k].label, ts);
            if (tw > lab_w) lab_w = tw;
        }
    if (!n_lab) return;
    int bw = pad + swatch + pad + lab_w + pad, bh = pad + n_lab * row;
    int x_right = p->right - pad - bw, x_left = p->left + pad + ts;
    int y_top = p->top + pad, y_bottom = p->bottom - pad - bh;
    int corner_x[4] = {x_right, x_left, x_right, x_left};
    int corner_y[4] = {y_top, y_top, y_bottom, y_bottom};
    int best = quietest_corner(p, s, n_series, corner_x, corner_y, bw, bh);
    int bx = corner_x[best], by = corner_y[best];
    canvas_fill_rect(p->c, bx - 1, by - 1, bw + 2, bh + 2, FRAME);
    canvas_fill_rect(p->c, bx, by, bw, bh, WHITE);
    int ry = by + pad;
    for (int k = 0; k < n_series; k++) {
        if (!s[k].label || !*s[k].label) continue;
        double cy = ry + p->glyph / 2.0;
        canvas_line(p->c, bx + pad, cy, bx + pad + swatch, cy, 1.5 * p->lw, s[k].rgb);
        canvas_text(p->c, bx + pad + swatch + pad, ry, s[k].label, ts, INK);
        ry += row;
    }
}

// title and x label
static void draw_titles(const Panel *p, const char *title, const char *xlabel) {
    int ts = p->ts, pad = p->pad;
    if (title && *title) { // drawn twice, one pixel apart: a bold face
        int tx = (p->left + p->right - canvas_text_width(title, ts)) / 2;
        canvas_text(p->c, tx, p->y + pad + pad / 2, title, ts, INK);
        canvas_text(p->c, tx + 1, p->y + pad + pad / 2, title, ts, INK);
    }
    if (xlabel && *xlabel)
        canvas_text(p->c, (p->left + p->right - canvas_text_width(xlabel, ts)) / 2,
                    p->bottom + pad + p->glyph + pad, xlabel, ts, INK);
}

void plot_panel(Canvas *c, int x, int y, int w, int h, const char *title, const char *xlabel,
                const PlotSeries *s, int n_series, bool log_y) {
    CHECK(w >= 120 && h >= 80, "plot_panel: panel %dx%d is too small; give it at least 120x80 pixels",
          w, h);
    int ts = (w >= 360 && h >= 240) ? 2 : 1;
    Panel p = {.c = c, .x = x, .y = y, .w = w, .h = h, .ts = ts, .glyph = 7 * ts, .pad = 6 * ts,
               .lw = ts == 2 ? 2.0 : 1.5, .log_y = log_y};
    canvas_fill_rect(c, x, y, w, h, WHITE);
    double y_lo, y_hi;
    data_range(&p, s, n_series, &y_lo, &y_hi);
    make_axes(&p, y_lo, y_hi);
    if (!place_area(&p, title, xlabel)) { // too small for axes: title only
        if (title) canvas_text(c, x + p.pad, y + p.pad, title, ts, INK);
        return;
    }
    draw_grid(&p);
    draw_curves(&p, s, n_series);
    draw_frame(&p);
    draw_legend(&p, s, n_series);
    draw_titles(&p, title, xlabel);
}
