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

// One sample's look: class, colours, and the radius and centre of an image (u as in shapes.h)
typedef struct Look {
    int c;
    double fg[3], bg[3];
    double rmin, rmax, r, cx, cy;
} Look;

static const double MARGIN = 1.0; // background pixels around the shape

static Look look_of(int size, uint64_t seed, uint64_t index) {
    CHECK(size >= SHAPES_MIN_SIZE && size <= SHAPES_MAX_SIZE,
          "shapes: image size %d is not in [%d, %d]; pick an image size in that range", size,
          SHAPES_MIN_SIZE, SHAPES_MAX_SIZE);
    Look k = {.c = (int)shapes_label(seed, index)};
    double u[8];
    for (int j = 0; j < 8; j++) u[j] = rng_uniform(seed, STREAM_SHAPE_GEOM, 8 * index + (uint64_t)j);
    // radius in [0.55, 0.95] of the largest that fits inside a 1-pixel frame, but at least 3
    // pixels (or the largest) so small images still show the shape; the centre then ranges over
    // every position that keeps the whole shape, anti-aliased rim included, inside the frame
    k.rmax = 0.5 * size - MARGIN;
    k.rmin = fmax(0.55 * k.rmax, fmin(k.rmax, 3.0));
    k.r = k.rmin + (fmax(0.95 * k.rmax, k.rmin) - k.rmin) * u[0];
    double span = size - 2 * MARGIN - 2 * k.r; // >= 0
    k.cx = MARGIN + k.r + span * u[1], k.cy = MARGIN + k.r + span * u[2];
    hsv_to_rgb(u[3], 0.55 + 0.45 * u[4], 0.8 + 0.2 * u[5], k.fg);
    hsv_to_rgb(u[7], 0.5, 0.03 + 0.12 * u[6], k.bg);
    return k;
}

// rows [y0, y1) of the image img (3 channels `plane` values apart, size x size) of shape k at
// centre (cx, cy), radius r, turned by angle (radians, clockwise on screen)
static void draw_rows(real *img, size_t plane, int size, const Look *k, double cx, double cy,
                      double r, double angle, int y0, int y1) {
    double co = cos(angle), si = sin(angle);
    for (int y = y0; y < y1; y++)
        for (int x = 0; x < size; x++) {
            // clipped to the shape's box: the distances to polygon edges (triangle, diamond)
            // run on past the corners and would let the anti-aliased rim leak out of it
            double ex = x + 0.5 - cx, ey = y + 0.5 - cy;
            double dx = co * ex + si * ey, dy = co * ey - si * ex; // in the shape's frame
            double d = fmax(sd_shape(k->c, dx, dy, r), sd_box(dx, dy, r, r));
            double a = fmin(fmax(0.5 - d, 0), 1);
            for (int j = 0; j < 3; j++) {
                double v = 2 * (k->bg[j] + (k->fg[j] - k->bg[j]) * a) - 1;
                img[j * plane + (size_t)y * size + x] = (real)fmin(fmax(v, -1), 1);
            }
        }
}

// img is (3, size, size)
void shapes_sample_rows(real *img, int64_t *label, int size, uint64_t seed, uint64_t index, int y0,
                        int y1) {
    Look k = look_of(size, seed, index);
    draw_rows(img, (size_t)size * size, size, &k, k.cx, k.cy, k.r, 0, y0, y1);
    *label = k.c;
}

// img is (3, frames * size, size); see shapes.h for the motions
void shapes_clip_rows(real *img, int64_t *label, int size, int frames, uint64_t seed,
                      uint64_t index, int y0, int y1) {
    CHECK(frames >= 1, "shapes: a clip needs 1 or more frames, not %d", frames);
    Look k = look_of(size, seed, index);
    double v[4];
    for (int j = 0; j < 4; j++) v[j] = rng_uniform(seed, STREAM_SHAPE_MOTION, 4 * index + (uint64_t)j);
    int kind = v[0] < 1.0 / 3 ? 0 : v[0] < 2.0 / 3 ? 1 : 2;
    double lo = MARGIN, hi = size - MARGIN; // the shape's box stays in [lo, hi]^2
    double r, ax, ay, bx, by, r0, r1, turn = 0;
    if (kind == 0) { // move: the smallest radius, 0.9 of the room along the direction
        r = r0 = r1 = k.rmin;
        double th = 2 * M_PI * v[1], ux = cos(th), uy = sin(th), room = hi - lo - 2 * r;
        double len = 0.9 * room / fmax(fabs(ux), fabs(uy));
        double dx = len * ux, dy = len * uy; // the path; its start ranges over what keeps it inside
        ax = lo + r + fmax(0, -dx) + (room - fabs(dx)) * v[2];
        ay = lo + r + fmax(0, -dy) + (room - fabs(dy)) * v[3];
        bx = ax + dx, by = ay + dy;
    } else if (kind == 1) { // turn a quarter, either way: its box's corners reach r sqrt 2 out
        r = r0 = r1 = fmax(k.rmin / M_SQRT2, fmin(k.r, k.rmax / M_SQRT2));
        turn = (v[1] < 0.5 ? -1 : 1) * M_PI / 2;
        double room = fmax(hi - lo - 2 * M_SQRT2 * r, 0);
        ax = bx = lo + M_SQRT2 * r + room * v[2], ay = by = lo + M_SQRT2 * r + room * v[3];
    } else { // grow from 0.55 of the largest radius to it, or shrink back
        double big = fmax(0.95 * k.rmax, k.rmin), small = 0.55 * big;
        r0 = v[1] < 0.5 ? small : big, r1 = v[1] < 0.5 ? big : small;
        double room = hi - lo - 2 * big;
        ax = bx = lo + big + room * v[2], ay = by = lo + big + room * v[3];
    }
    for (int f = 0; f < frames; f++) {
        int a = y0 > f * size ? y0 - f * size : 0, b = y1 < (f + 1) * size ? y1 - f * size : size;
        if (a >= b) continue;
        double s = frames > 1 ? (double)f / (frames - 1) : 0;
        draw_rows(img + (size_t)f * size * size, (size_t)frames * size * size, size, &k,
                  ax + (bx - ax) * s, ay + (by - ay) * s, r0 + (r1 - r0) * s, turn * s, a, b);
    }
    *label = k.c;
}
