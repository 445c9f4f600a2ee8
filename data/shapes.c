// shapes.c: the toy shapes dataset. Each shape is a signed distance d(p) in pixels from the
// shape's edge (negative inside); a pixel's coverage is clamp(0.5 - d, 0, 1) at its centre,
// which anti-aliases edges to about one pixel at any image size. All geometry is in units of
// the shape's radius r: every shape lies inside the square [cx - r, cx + r] x [cy - r, cy + r].
#include "shapes.h"
#include "../core/check.h"
#include "../core/rng.h"
#include <math.h>
#include <stdio.h>

static const char *const NAMES[SHAPES_CLASSES] = {
    "circle", "square", "triangle", "cross", "ring", "diamond", "hbar", "vbar", "x", "two dots",
};

const char *shapes_class_name(int c) {
    CHECK(c >= 0 && c < SHAPES_CLASSES, "shapes_class_name: class %d is not in [0, %d)", c,
          SHAPES_CLASSES);
    return NAMES[c];
}

int64_t shapes_label(uint64_t seed, uint64_t index) {
    int64_t c = (int64_t)(SHAPES_CLASSES * rng_uniform(seed, STREAM_SHAPE_LABEL, index));
    return c < SHAPES_CLASSES ? c : SHAPES_CLASSES - 1;
}

// ---- signed distances (pixels; dx, dy from the centre, y pointing down) ----------------------

static double sd_box(double dx, double dy, double ax, double ay) {
    double qx = fabs(dx) - ax, qy = fabs(dy) - ay;
    double outside = hypot(fmax(qx, 0), fmax(qy, 0));
    return outside + fmin(fmax(qx, qy), 0);
}

static double sd_shape(int c, double dx, double dy, double r) {
    const double s5 = sqrt(5.0), s2 = sqrt(2.0);
    switch (c) {
    case 0: return hypot(dx, dy) - r;                                      // circle
    case 1: return sd_box(dx, dy, 0.85 * r, 0.85 * r);                     // square
    case 2:                                                                // triangle, apex up
        return fmax(fmax((-2 * dx - (dy + r)) / s5, (2 * dx - (dy + r)) / s5), dy - r);
    case 3: return fmin(sd_box(dx, dy, r, 0.25 * r), sd_box(dx, dy, 0.25 * r, r)); // cross
    case 4: return fabs(hypot(dx, dy) - 0.75 * r) - 0.25 * r;              // ring, hole 0.5 r
    case 5: return (fabs(dx) + fabs(dy) - r) / s2;                         // diamond
    case 6: return sd_box(dx, dy, r, 0.32 * r);                            // horizontal bar
    case 7: return sd_box(dx, dy, 0.32 * r, r);                            // vertical bar
    case 8: {                                                              // x: diagonals, clipped
        double band = fmin(fabs(dx - dy), fabs(dx + dy)) / s2 - 0.2 * r;
        return fmax(band, sd_box(dx, dy, 0.85 * r, 0.85 * r));
    }
    default: // two dots side by side
        return fmin(hypot(dx - 0.6 * r, dy), hypot(dx + 0.6 * r, dy)) - 0.38 * r;
    }
}

void shapes_caption(char *buf, size_t len, uint64_t seed, uint64_t index) {
    static const char *const colour[8] = {"red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink"};
    static const double upto[8] = {1 / 24.0, 1 / 8.0, 5 / 24.0, 5 / 12.0, 7 / 12.0, 3 / 4.0, 5 / 6.0, 11 / 12.0};
    static const char *const words[SHAPES_CLASSES] = {"circle", "square", "triangle", "cross", "ring",
        "diamond", "horizontal bar", "vertical bar", "x", "two dots"};
    static const char *const across[3] = {"left", "", "right"}, *const down[3] = {"top", "", "bottom"};
    double u[4];
    for (int k = 0; k < 4; k++) u[k] = rng_uniform(seed, STREAM_SHAPE_GEOM, 8 * index + (uint64_t)k);
    int hue = 0; // 11/12 and on is red again
    while (hue < 8 && u[3] >= upto[hue]) hue++;
    int n = snprintf(buf, len, "a %s %s %s", u[0] < 0.5 ? "small" : "large", colour[hue % 8],
                     words[shapes_label(seed, index)]);
    if (u[0] >= 0.5 || n < 0 || (size_t)n >= len) return;
    int x = u[1] < 1 / 3.0 ? 0 : u[1] < 2 / 3.0 ? 1 : 2, y = u[2] < 1 / 3.0 ? 0 : u[2] < 2 / 3.0 ? 1 : 2;
    if (x == 1 && y == 1) snprintf(buf + n, len - (size_t)n, " in the centre");
    else snprintf(buf + n, len - (size_t)n, " at the %s%s%s", down[y], *down[y] && *across[x] ? " " : "", across[x]);
}

// h, s, v in [0, 1] -> rgb in [0, 1]
static void hsv_to_rgb(double h, double s, double v, double rgb[3]) {
    double h6 = 6 * (h - floor(h));
    int i = (int)h6 % 6;
    double f = h6 - floor(h6), p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    for (int k = 0; k < 3; k++) rgb[k] = table[i][k];
}

void shapes_sample(real *img, int64_t *label, int size, uint64_t seed, uint64_t index) {
    shapes_sample_rows(img, label, size, seed, index, 0, size);
}

// img is (3, size, size)
void shapes_sample_rows(real *img, int64_t *label, int size, uint64_t seed, uint64_t index, int y0,
                        int y1) {
    CHECK(size >= SHAPES_MIN_SIZE && size <= SHAPES_MAX_SIZE,
          "shapes: image size %d is not in [%d, %d]; pick an image size in that range", size,
          SHAPES_MIN_SIZE, SHAPES_MAX_SIZE);
    int c = (int)shapes_label(seed, index);
    double u[8];
    for (int k = 0; k < 8; k++) u[k] = rng_uniform(seed, STREAM_SHAPE_GEOM, 8 * index + (uint64_t)k);

    // radius in [0.55, 0.95] of the largest that fits inside a 1-pixel frame, but at least 3
    // pixels (or the largest) so small images still show the shape; the centre then ranges over
    // every position that keeps the whole shape, anti-aliased rim included, inside the frame
    const double margin = 1.0;
    double rmax = 0.5 * size - margin;
    double rmin = fmax(0.55 * rmax, fmin(rmax, 3.0));
    double r = rmin + (fmax(0.95 * rmax, rmin) - rmin) * u[0];
    double span = size - 2 * margin - 2 * r; // >= 0
    double cx = margin + r + span * u[1], cy = margin + r + span * u[2];

    double fg[3], bg[3];
    hsv_to_rgb(u[3], 0.55 + 0.45 * u[4], 0.8 + 0.2 * u[5], fg);
    hsv_to_rgb(u[7], 0.5, 0.03 + 0.12 * u[6], bg);

    size_t plane = (size_t)size * (size_t)size;
    for (int y = y0; y < y1; y++)
        for (int x = 0; x < size; x++) {
            // clipped to the shape's box: the distances to polygon edges (triangle, diamond)
            // run on past the corners and would let the anti-aliased rim leak out of it
            double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
            double d = fmax(sd_shape(c, dx, dy, r), sd_box(dx, dy, r, r));
            double a = fmin(fmax(0.5 - d, 0), 1);
            for (int k = 0; k < 3; k++) {
                double v = 2 * (bg[k] + (fg[k] - bg[k]) * a) - 1;
                img[k * plane + (size_t)y * size + x] = (real)fmin(fmax(v, -1), 1);
            }
        }
    *label = c;
}
