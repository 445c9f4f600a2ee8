// test_data.c: the toy shapes dataset (determinism, label balance, each class recognised from its
// pixels by geometric properties alone), the canvas (PNG round trip, paste, text, atomic write
// errors), the image folder loader (classes, crop, formats, clear errors) and plots.
#include "../data/caption.h"
#include "../data/data.h"
#include "../draw/canvas.h"
#include "../data/imagefolder.h"
#include "../draw/plot.h"
#include "../data/shapes.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

// ---- helpers -----------------------------------------------------------------------------------

// For pixel loops: Check's ck_assert reports every passing check through a pipe, which costs
// seconds over millions of pixels; this only calls into Check on failure.
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                    \
    } while (0)

static char *path_in(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// ---- shapes --------------------------------------------------------------------------------

enum { CIRCLE, SQUARE, TRIANGLE, CROSS, RING, DIAMOND, HBAR, VBAR, XSHAPE, DOTS };

// Which pixels belong to the shape, judged from the image alone: the background colour is the
// corner pixel, and a pixel is lit when it is more than half as far from it as the farthest one.
typedef struct {
    int size, x0, y0, x1, y1; // bounding box of the lit pixels, inclusive
    bool *on;                 // [size * size]
    int n_on;
    double contrast; // largest distance from the background colour (RGB, in [-1, 1] units)
} Mask;

static Mask mask_of(const real *img, int size) {
    size_t plane = (size_t)size * size;
    Mask m = {size, size, size, -1, -1, xcalloc(plane, sizeof(bool)), 0, 0};
    double *dist = xmalloc(plane * sizeof(double));
    for (size_t p = 0; p < plane; p++) {
        double d2 = 0;
        for (int k = 0; k < 3; k++) d2 += pow(img[k * plane + p] - img[k * plane], 2);
        dist[p] = sqrt(d2);
        if (dist[p] > m.contrast) m.contrast = dist[p];
    }
    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++) {
            if (dist[(size_t)y * size + x] <= 0.5 * m.contrast) continue;
            m.on[(size_t)y * size + x] = true;
            m.n_on++;
            if (x < m.x0) m.x0 = x;
            if (x > m.x1) m.x1 = x;
            if (y < m.y0) m.y0 = y;
            if (y > m.y1) m.y1 = y;
        }
    free(dist);
    return m;
}

// lit at (fx, fy) in box units: -1 is the first lit row/column, +1 the last
static bool at(const Mask *m, double fx, double fy) {
    double cx = 0.5 * (m->x0 + m->x1), cy = 0.5 * (m->y0 + m->y1);
    int x = (int)lround(cx + fx * 0.5 * (m->x1 - m->x0));
    int y = (int)lround(cy + fy * 0.5 * (m->y1 - m->y0));
    return m->on[(size_t)y * m->size + x];
}

// any lit pixel in the 2x2 block at a corner of the box (sx, sy = -1 or +1)
static bool corner(const Mask *m, int sx, int sy) {
    int x = sx < 0 ? m->x0 : m->x1 - 1, y = sy < 0 ? m->y0 : m->y1 - 1;
    for (int j = y; j < y + 2; j++)
        for (int i = x; i < x + 2; i++)
            if (m->on[(size_t)j * m->size + i]) return true;
    return false;
}

// Names the shape from geometric properties only (aspect ratio, which of centre / corners /
// edge midpoints / diagonal points are lit, how much of its box it fills). Any two classes
// swapped would be caught. Reliable from about 30x30 up (asserted at 32, 33 and 64).
static int classify(const Mask *m) {
    double w = m->x1 - m->x0 + 1, h = m->y1 - m->y0 + 1;
    bool centre = at(m, 0, 0);
    if (w > 1.6 * h) return centre ? HBAR : DOTS; // dots: a gap in the middle
    if (h > 1.6 * w) return VBAR;
    bool tl = corner(m, -1, -1), tr = corner(m, 1, -1), bl = corner(m, -1, 1),
         br = corner(m, 1, 1);
    if (tl && tr && bl && br) return at(m, -1, 0) ? SQUARE : XSHAPE; // x: edge midpoints empty
    if (bl && br && !tl && !tr) return TRIANGLE;                     // apex up, flat base
    if (tl || tr || bl || br) return -1;
    if (!centre) return RING;
    if (!at(m, 0.4, 0.4) || !at(m, -0.4, -0.4)) return CROSS; // off the arms
    return m->n_on > 0.65 * w * h ? CIRCLE : DIAMOND; // fills pi/4 of its box, a diamond 1/2
}

START_TEST(shapes_are_deterministic_and_order_independent) {
    enum { S = 20, N = 12 };
    real a[N][3 * S * S], b[3 * S * S], other[3 * 31 * 31];
    int64_t la[N], lb, lo;
    for (int i = 0; i < N; i++) shapes_sample(a[i], &la[i], S, 42, (uint64_t)i);
    for (int i = N - 1; i >= 0; i--) {
        shapes_sample(other, &lo, 31, 7, (uint64_t)(1000 + i)); // unrelated calls in between
        shapes_sample(b, &lb, S, 42, (uint64_t)i);
        ck_assert_int_eq(lb, la[i]);
        ck_assert_int_eq(lb, shapes_label(42, (uint64_t)i));
        ck_assert_msg(!memcmp(a[i], b, sizeof b), "sample %d differs when drawn again", i);
    }
    int differ = 0;
    for (int i = 1; i < N; i++) differ += memcmp(a[0], a[i], sizeof b) != 0;
    ck_assert_int_eq(differ, N - 1);
    shapes_sample(b, &lb, S, 43, 0); // another seed, another image
    ck_assert(memcmp(a[0], b, sizeof b) != 0);
}
END_TEST

START_TEST(shapes_labels_are_uniform) {
    for (uint64_t seed = 1; seed <= 2; seed++) {
        int count[SHAPES_CLASSES] = {0};
        for (uint64_t i = 0; i < 1000; i++) {
            int64_t l = shapes_label(seed, i);
            ck_assert(l >= 0 && l < SHAPES_CLASSES);
            count[l]++;
        }
        double chi2 = 0;
        for (int c = 0; c < SHAPES_CLASSES; c++) chi2 += pow(count[c] - 100.0, 2) / 100.0;
        // 9 degrees of freedom: P(chi2 > 27.9) = 0.001
        ck_assert_msg(chi2 < 27.9, "seed %d: labels far from uniform, chi2 = %.1f", (int)seed, chi2);
    }
}
END_TEST

START_TEST(shapes_fit_and_stay_in_range) {
    const int sizes[] = {8, 9, 16, 30, 31, 32, 64, 100, 255, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s];
        size_t plane = (size_t)n * n;
        real *img = xmalloc(3 * plane * sizeof(real));
        for (uint64_t i = 0; i < 20; i++) {
            int64_t l;
            shapes_sample(img, &l, n, 5, i);
            for (size_t p = 0; p < 3 * plane; p++)
                REQUIRE(img[p] >= -1 && img[p] <= 1, "size %d sample %d: value %g", n, (int)i,
                        (double)img[p]);
            // fully visible: the 1-pixel frame is pure background
            for (int k = 0; k < 3; k++)
                for (int t = 0; t < n; t++) {
                    real bg = img[k * plane];
                    REQUIRE(img[k * plane + t] == bg && img[k * plane + (size_t)(n - 1) * n + t] == bg &&
                                img[k * plane + (size_t)t * n] == bg &&
                                img[k * plane + (size_t)t * n + n - 1] == bg,
                            "size %d sample %d: the shape touches the image border", n, (int)i);
                }
            // big enough and clearly visible
            Mask m = mask_of(img, n);
            int extent = fmax(m.x1 - m.x0 + 1, m.y1 - m.y0 + 1);
            ck_assert_msg(m.contrast > 1.0, "size %d sample %d: contrast %.2f", n, (int)i, m.contrast);
            ck_assert_msg(extent >= 0.4 * n, "size %d sample %d (%s): %d pixels across", n, (int)i,
                          shapes_class_name((int)l), extent);
            ck_assert_msg(m.n_on >= 0.03 * plane, "size %d sample %d (%s): %d lit pixels", n,
                          (int)i, shapes_class_name((int)l), m.n_on);
            free(m.on);
        }
        free(img);
    }
}
END_TEST

START_TEST(shapes_match_their_class_geometrically) {
    const int sizes[] = {32, 33, 64};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s];
        real *img = xmalloc(3 * (size_t)n * n * sizeof(real));
        int seen[SHAPES_CLASSES] = {0};
        for (uint64_t i = 0; i < 300; i++) {
            int64_t l;
            shapes_sample(img, &l, n, 11, i);
            Mask m = mask_of(img, n);
            int got = classify(&m);
            free(m.on);
            ck_assert_msg(got == l, "size %d sample %d: labelled %s but looks like %s", n, (int)i,
                          shapes_class_name((int)l), got < 0 ? "nothing" : shapes_class_name(got));
            seen[l]++;
        }
        for (int c = 0; c < SHAPES_CLASSES; c++) ck_assert_int_gt(seen[c], 0);
        free(img);
    }
}
END_TEST

START_TEST(shapes_reject_bad_arguments) {
    real img[3 * 8 * 8];
    int64_t l;
    for (int c = 0; c < SHAPES_CLASSES; c++)
        for (int d = 0; d < c; d++) ck_assert_str_ne(shapes_class_name(c), shapes_class_name(d));
    EXPECT_FATAL(shapes_sample(img, &l, 7, 0, 0), "size 7 is not in [8");
    EXPECT_FATAL(shapes_class_name(SHAPES_CLASSES), "class 10 is not in [0, 10)");
}
END_TEST

// Moving shapes: every frame keeps the shape inside its 1-pixel background frame and clearly
// visible; the clip moves (its first and last frames differ); any split of its rows (what a
// rank builds) gives the same values; the class is the still image's
START_TEST(moving_shapes_stay_inside_and_move) {
    const int sizes[] = {12, 13, 32}, F = 5;
    int moved = 0, clips = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s];
        size_t plane = (size_t)n * n, all = 3 * F * plane;
        real *clip = xmalloc(all * sizeof(real)), *parts = xmalloc(all * sizeof(real));
        real *frame = xmalloc(3 * plane * sizeof(real)), still[3 * 8 * 8];
        for (uint64_t i = 0; i < 30; i++, clips++) {
            int64_t l, l2, l3;
            shapes_clip_rows(clip, &l, n, F, 5, i, 0, F * n);
            for (int y0 = 0, y1; y0 < F * n; y0 = y1) { // rows in uneven pieces
                y1 = y0 + 1 + (int)(rng_u32(9, 0, i * 1000 + (uint64_t)y0) % (uint32_t)(2 * n));
                y1 = y1 > F * n ? F * n : y1;
                shapes_clip_rows(parts, &l2, n, F, 5, i, y0, y1);
            }
            ck_assert(!memcmp(parts, clip, all * sizeof(real)));
            shapes_sample(still, &l3, 8, 5, i);
            ck_assert_int_eq(l, l2);
            ck_assert_int_eq(l, l3);
            for (int f = 0; f < F; f++) {
                for (int k = 0; k < 3; k++) memcpy(frame + k * plane, clip + (k * F + f) * plane, plane * sizeof(real));
                for (int k = 0; k < 3; k++)
                    for (int t = 0; t < n; t++) {
                        real bg = frame[k * plane];
                        REQUIRE(frame[k * plane + t] == bg && frame[k * plane + (size_t)(n - 1) * n + t] == bg &&
                                    frame[k * plane + (size_t)t * n] == bg && frame[k * plane + (size_t)t * n + n - 1] == bg,
                                "size %d clip %d frame %d: the shape touches the border", n, (int)i, f);
                    }
                Mask m = mask_of(frame, n);
                ck_assert_msg(m.contrast > 1.0 && m.n_on >= 0.015 * plane, "size %d clip %d frame %d: %d lit pixels",
                              n, (int)i, f, m.n_on);
                free(m.on);
            }
            moved += memcmp(clip, clip + (F - 1) * plane, plane * sizeof(real)) != 0;
        }
        free(clip), free(parts), free(frame);
    }
    // only a circle or a ring that turns stays still
    ck_assert_msg(moved >= clips * 3 / 4, "%d of %d clips move", moved, clips);
}
END_TEST

// ---- canvas --------------------------------------------------------------------------------

START_TEST(canvas_png_round_trip) {
    char dir[64], path[128], tmp[160], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t grey[3] = {50, 60, 70};
    Canvas c = canvas_create(37, 23, grey);
    for (int j = 0; j < c.h; j++)
        for (int i = 0; i < c.w; i++) {
            uint32_t r = rng_u32(3, 0, (uint64_t)(j * c.w + i));
            uint8_t rgb[3] = {(uint8_t)r, (uint8_t)(r >> 8), (uint8_t)(r >> 16)};
            canvas_fill_rect(&c, i, j, 1, 1, rgb);
        }
    path_in(path, sizeof path, dir, "round.png");
    ck_assert_int_eq(canvas_write_png(&c, path, err, sizeof err), 0);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert(!exists(tmp));
    int w, h, comp;
    uint8_t *back = stbi_load(path, &w, &h, &comp, 3);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(w, 37);
    ck_assert_int_eq(h, 23);
    ck_assert(!memcmp(back, c.px, (size_t)w * h * 3));
    stbi_image_free(back);

    // a folder that does not exist: -1, the path in the message, nothing left behind
    path_in(path, sizeof path, dir, "missing/x.png");
    err[0] = 0;
    ck_assert_int_eq(canvas_write_png(&c, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing/x.png"), "error \"%s\" does not name the file", err);
    ck_assert(!exists(path));
    canvas_free(&c);
    test_rm_rf(dir);
}
END_TEST

// an animated GIF of 3 frames of a few colours, read back by stb_image's own GIF decoder: every
// frame's every pixel within giflib's 5-bit colour reduction
START_TEST(canvas_gif_round_trip) {
    char dir[64], path[128], tmp[160], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t grey[3] = {50, 60, 70};
    Canvas c[3];
    for (int f = 0; f < 3; f++) {
        c[f] = canvas_create(29, 17, grey);
        for (int j = 0; j < 17; j++)
            for (int i = 0; i < 29; i++) {
                uint32_t r = rng_u32(4, 0, (uint64_t)((f * 17 + j) * 29 + i)) % 12;
                uint8_t rgb[3] = {(uint8_t)(r * 20), (uint8_t)(255 - r * 16), (uint8_t)(f * 100)};
                canvas_fill_rect(&c[f], i, j, 1, 1, rgb);
            }
    }
    path_in(path, sizeof path, dir, "anim.gif");
    ck_assert_msg(canvas_write_gif(c, 3, 20, path, err, sizeof err) == 0, "%s", err);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert(!exists(tmp));
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    static uint8_t bytes[1 << 16];
    int n = (int)fread(bytes, 1, sizeof bytes, fp), w, h, frames, comp, *delays = NULL;
    fclose(fp);
    uint8_t *back = stbi_load_gif_from_memory(bytes, n, &delays, &w, &h, &frames, &comp, 3);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(w, 29);
    ck_assert_int_eq(h, 17);
    ck_assert_int_eq(frames, 3);
    ck_assert_int_eq(delays[1], 200); // milliseconds
    int worst = 0;
    for (int f = 0; f < 3; f++)
        for (size_t p = 0; p < (size_t)w * h * 3; p++)
            worst = fmax(worst, abs((int)back[(size_t)f * w * h * 3 + p] - c[f].px[p]));
    ck_assert_int_le(worst, 8);
    stbi_image_free(back), stbi_image_free(delays);
    for (int f = 0; f < 3; f++) canvas_free(&c[f]);
    test_rm_rf(dir);
}
END_TEST

START_TEST(canvas_paste_clamps_upscales_and_refuses_nan) {
    const uint8_t bg[3] = {9, 9, 9};
    Canvas c = canvas_create(10, 10, bg);
    // (3, 2, 2): pixel (0,0) = (-1, 1, 0); (0,1) = (5, -5, 0.5); (1,0) = 0; (1,1) = 1
    real img[12] = {-1, 5, 0, 1, 1, -5, 0, 1, 0, 0.5, 0, 1};
    canvas_paste(&c, 1, 2, img, 2, 2, 3);
    const uint8_t want[4][3] = {{0, 255, 128}, {255, 0, 191}, {128, 128, 128}, {255, 255, 255}};
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++) {
            const uint8_t *p = c.px + (y * 10 + x) * 3, *q = bg;
            if (x >= 1 && x < 7 && y >= 2 && y < 8) q = want[((y - 2) / 3) * 2 + (x - 1) / 3];
            REQUIRE(!memcmp(p, q, 3), "pixel (%d, %d) = (%d, %d, %d), want (%d, %d, %d)", x,
                          y, p[0], p[1], p[2], q[0], q[1], q[2]);
        }
    img[6] = NAN; // no colour stands for a value that is not a number
    EXPECT_FATAL(canvas_paste(&c, 1, 2, img, 2, 2, 3), "canvas_paste: pixel (0, 1) is nan");
    img[6] = -INFINITY;
    EXPECT_FATAL(canvas_paste(&c, 1, 2, img, 2, 2, 3), "pixel (0, 1) is -inf");
    canvas_free(&c);
}
END_TEST

static int count_rgb(const uint8_t *px, int w, int h, const uint8_t rgb[3], int *bbox) {
    int n = 0;
    bbox[0] = w, bbox[1] = h, bbox[2] = -1, bbox[3] = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (!memcmp(px + ((size_t)y * w + x) * 3, rgb, 3)) {
                n++;
                if (x < bbox[0]) bbox[0] = x;
                if (y < bbox[1]) bbox[1] = y;
                if (x > bbox[2]) bbox[2] = x;
                if (y > bbox[3]) bbox[3] = y;
            }
    return n;
}

START_TEST(canvas_text_scales_and_stays_in_its_box) {
    const uint8_t bg[3] = {0, 0, 0}, ink[3] = {250, 200, 10};
    const char *text = "Loss 0.25\nstep";
    int counts[2];
    for (int s = 2; s <= 3; s++) {
        Canvas c = canvas_create(200, 100, bg);
        canvas_text(&c, 5, 7, text, s, ink);
        int bb[4];
        counts[s - 2] = count_rgb(c.px, c.w, c.h, ink, bb);
        ck_assert_int_gt(counts[s - 2], 40);
        ck_assert_int_ge(bb[0], 5);
        ck_assert_int_ge(bb[1], 7);
        ck_assert_int_lt(bb[2], 5 + canvas_text_width(text, s));
        ck_assert_int_lt(bb[3], 7 + canvas_text_height(text, s));
        canvas_free(&c);
    }
    ck_assert_int_eq(counts[0] * 9, counts[1] * 4); // each font pixel becomes s x s pixels
}
END_TEST

START_TEST(canvas_line_covers_its_path) {
    const uint8_t bg[3] = {255, 255, 255}, ink[3] = {0, 0, 200};
    Canvas c = canvas_create(30, 12, bg);
    canvas_line(&c, 2, 5, 25, 5, 2, ink);
    for (int x = 3; x < 25; x++) {
        REQUIRE(!memcmp(c.px + (4 * 30 + x) * 3, ink, 3) && !memcmp(c.px + (5 * 30 + x) * 3, ink, 3),
                "column %d: the line's two rows are not fully covered", x);
        REQUIRE(!memcmp(c.px + (2 * 30 + x) * 3, bg, 3) && !memcmp(c.px + (7 * 30 + x) * 3, bg, 3),
                "column %d: the line bleeds two rows away", x);
    }
    canvas_free(&c);
}
END_TEST

// ---- captions --------------------------------------------------------------------------------

START_TEST(captions_tokenize_pad_and_name_what_is_wrong) {
    int64_t ids[6];
    char err[512], text[256];
    ck_assert_int_le(caption_vocab_size(), CAPTION_MAX_WORDS);
    ck_assert_int_eq(caption_tokenize("A small, RED triangle!", ids, 6, "x", err, sizeof err), 0);
    const char *want[4] = {"a", "small", "red", "triangle"};
    for (int i = 0; i < 4; i++) ck_assert_str_eq(caption_word((int)ids[i]), want[i]);
    ck_assert(ids[4] == 0 && ids[5] == 0); // padding
    caption_text(ids, 6, text, sizeof text);
    ck_assert_str_eq(text, "a small red triangle");
    ck_assert_int_eq(caption_tokenize(" ", ids, 6, "x", err, sizeof err), 0); // the empty caption
    for (int i = 0; i < 6; i++) ck_assert(ids[i] == 0);
    ck_assert_int_eq(caption_tokenize("a purple giraffe", ids, 6, "cats/1.txt", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cats/1.txt") && strstr(err, "'giraffe'"), "%s", err);
    ck_assert_int_eq(caption_tokenize("a a a a a a a", ids, 6, "--prompt", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "7 words") && strstr(err, "--text-len 6"), "%s", err);
    char vocab[1024]; // every word once, and ids in order
    caption_vocabulary(vocab, sizeof vocab);
    int64_t all[CAPTION_MAX_WORDS];
    ck_assert_int_eq(caption_tokenize(vocab, all, CAPTION_MAX_WORDS, "x", err, sizeof err), 0);
    for (int i = 0; i < caption_vocab_size(); i++) ck_assert_int_eq(all[i], i + 1);
    ck_assert_ptr_null(caption_word(0));
    ck_assert_ptr_null(caption_word(caption_vocab_size() + 1));
}
END_TEST

// Each caption says what its image shows, judged from the pixels (mask_of): the class as
// shapes_label has it, the colour from the lit pixels' hue, the size from the lit box (a small
// shape's radius is below 0.75 of the largest, a large one's above), the place from the box's
// centre against the image's
START_TEST(shapes_captions_describe_their_images) {
    enum { S = 32, N = 300 };
    static const char *const hues[8] = {"red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink"};
    real *img = xmalloc(3 * S * S * sizeof(real));
    int checked_place = 0;
    for (int i = 0; i < N; i++) {
        int64_t label, ids[SHAPES_CAPTION_WORDS];
        char text[128], err[256], words[9][16] = {{0}};
        shapes_caption(text, sizeof text, 7, (uint64_t)i);
        ck_assert_msg(!caption_tokenize(text, ids, SHAPES_CAPTION_WORDS, "shapes", err, sizeof err), "%s", err);
        shapes_sample(img, &label, S, 7, (uint64_t)i);
        int n = sscanf(text, "%15s %15s %15s %15s %15s %15s %15s %15s %15s", words[0], words[1], words[2],
                       words[3], words[4], words[5], words[6], words[7], words[8]);
        ck_assert_str_eq(words[0], "a");
        char name[32];
        snprintf(name, sizeof name, "%s", words[3]);
        if (!strcmp(words[3], "horizontal") || !strcmp(words[3], "vertical") || !strcmp(words[3], "two"))
            snprintf(name, sizeof name, "%s %s", words[3], words[4]);
        const char *cls = label == HBAR ? "horizontal bar" : label == VBAR ? "vertical bar" : shapes_class_name((int)label);
        ck_assert_msg(!strcmp(name, cls), "sample %d: '%s' for a %s", i, text, cls);
        Mask m = mask_of(img, S);
        // hue of the lit pixels' mean colour (the usual RGB -> HSV formula), into eight bins
        double rgb[3] = {0};
        for (size_t p = 0; p < (size_t)S * S; p++)
            for (int k = 0; k < 3 && m.on[p]; k++) rgb[k] += img[k * S * S + p] / m.n_on;
        double mx = fmax(rgb[0], fmax(rgb[1], rgb[2])), mn = fmin(rgb[0], fmin(rgb[1], rgb[2]));
        double h = mx == rgb[0] ? fmod((rgb[1] - rgb[2]) / (mx - mn) + 6, 6)
                 : mx == rgb[1] ? (rgb[2] - rgb[0]) / (mx - mn) + 2 : (rgb[0] - rgb[1]) / (mx - mn) + 4;
        // the eight bins in 15-degree steps; the caption's within 5 degrees of the pixels' hue
        static const int of_step[24] = {0, 1, 1, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 7, 7, 0, 0};
        bool near = false;
        for (int d = -1; d <= 1; d++)
            near |= !strcmp(words[2], hues[of_step[(int)floor(fmod(h * 60 + 5 * d + 360, 360) / 15)]]);
        ck_assert_msg(near, "sample %d: '%s' but the hue is %.0f degrees", i, text, h * 60);
        // the radius from the lit box's longer side: the square and the x reach 0.85 of it, the
        // dots 0.98, the others all of it
        int w = m.x1 - m.x0 + 1, hh = m.y1 - m.y0 + 1, big = w > hh ? w : hh;
        double reach = label == SQUARE || label == XSHAPE ? 0.85 : label == DOTS ? 0.98 : 1;
        double r = big / (2 * reach), split = 0.75 * (0.5 * S - 1);
        if (!strcmp(words[1], "small")) ck_assert_msg(r <= split + 1, "sample %d: '%s', radius %.1f", i, text, r);
        else ck_assert_msg(r >= split - 1, "sample %d: '%s', radius %.1f", i, text, r);
        if (!strcmp(words[1], "small")) { // left/right and top/bottom from the box's centre
            double cx = 0.5 * (m.x0 + m.x1 + 1) / S - 0.5, cy = 0.5 * (m.y0 + m.y1 + 1) / S - 0.5;
            ck_assert(n >= 6);
            bool left = strstr(text, "left"), right = strstr(text, "right");
            bool top = strstr(text, " top"), bottom = strstr(text, "bottom");
            if (left) ck_assert_msg(cx < 0, "sample %d: '%s' at x %+.2f", i, text, cx);
            if (right) ck_assert_msg(cx > 0, "sample %d: '%s' at x %+.2f", i, text, cx);
            if (top) ck_assert_msg(cy < 0, "sample %d: '%s' at y %+.2f", i, text, cy);
            if (bottom) ck_assert_msg(cy > 0, "sample %d: '%s' at y %+.2f", i, text, cy);
            checked_place += left || right || top || bottom;
        } else ck_assert_int_le(n, 5);
        free(m.on);
    }
    ck_assert_int_gt(checked_place, N / 4);
    free(img);
}
END_TEST

static void write_png_solid_bands(const char *path, int w, int h, bool vertical_bands,
                                  const uint8_t outer[3], const uint8_t inner[3], int band);

START_TEST(image_folder_captions_from_txt_files) {
    char dir[64], p[256], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t a[3] = {10, 20, 30};
    write_png_solid_bands(path_in(p, sizeof p, dir, "one.png"), 4, 4, true, a, a, 0);
    write_png_solid_bands(path_in(p, sizeof p, dir, "two.png"), 4, 4, true, a, a, 0);
    write_file(path_in(p, sizeof p, dir, "one.txt"), "a dark square\n", 14);
    Data d;
    ck_assert_int_eq(data_open(&d, dir, 4, 1, 3, 1, err, sizeof err), 0);
    ck_assert_int_eq(data_captions(&d, 4, err, sizeof err), -1); // two.png has none
    ck_assert_msg(strstr(err, "two.png has no caption") && strstr(err, "two.txt"), "%s", err);
    data_close(&d);
    write_file(path_in(p, sizeof p, dir, "two.txt"), "a blue zebra", 12);
    ck_assert_int_eq(data_open(&d, dir, 4, 1, 3, 1, err, sizeof err), 0);
    ck_assert_int_eq(data_captions(&d, 4, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "two.txt") && strstr(err, "'zebra'"), "%s", err);
    data_close(&d);
    write_file(path_in(p, sizeof p, dir, "two.txt"), "two blue dots", 13);
    ck_assert_int_eq(data_open(&d, dir, 4, 1, 3, 1, err, sizeof err), 0);
    ck_assert_msg(!data_captions(&d, 4, err, sizeof err), "%s", err);
    char text[64];
    caption_text(d.captions, 4, text, sizeof text);
    ck_assert_str_eq(text, "a dark square");
    caption_text(d.captions + 4, 4, text, sizeof text);
    ck_assert_str_eq(text, "two blue dots");
    Batch b = batch_alloc(0, 3, 3, 3, 1, 4, 4); // each image's caption, and dropped ones empty
    batch_make(&b, &d, 5, 0, 0, 0);
    for (int i = 0; i < 3; i++) {
        int item = (int)(rng_u32(5, STREAM_PICK, (uint64_t)i) % 2);
        ck_assert(!memcmp(b.y + 4 * i, d.captions + 4 * item, 4 * sizeof(int64_t)));
    }
    batch_make(&b, &d, 5, 0.99, 0, 0);
    for (int i = 0; i < 12; i++) ck_assert(b.y[i] == 0 || rng_uniform(5, STREAM_DROP, (uint64_t)i / 4) >= 0.99);
    batch_free(&b);
    data_close(&d);
    ck_assert_int_eq(data_open(&d, "shapes", 20, 1, 3, 10, err, sizeof err), 0);
    ck_assert_int_eq(data_captions(&d, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--text-len 9"), "%s", err);
    data_close(&d);
    test_rm_rf(dir);
}
END_TEST

// ---- image folder --------------------------------------------------------------------------

static void write_png_solid_bands(const char *path, int w, int h, bool vertical_bands,
                                  const uint8_t outer[3], const uint8_t inner[3], int band) {
    uint8_t *px = xmalloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int t = vertical_bands ? x : y, n = vertical_bands ? w : h;
            memcpy(px + ((size_t)y * w + x) * 3, (t < band || t >= n - band) ? outer : inner, 3);
        }
    ck_assert(stbi_write_png(path, w, h, 3, px, w * 3));
    free(px);
}

static void assert_solid(const real *img, int size, const uint8_t rgb[3], double tol, const char *what) {
    size_t plane = (size_t)size * size;
    for (int k = 0; k < 3; k++)
        for (size_t p = 0; p < plane; p++) {
            double want = rgb[k] / 127.5 - 1;
            REQUIRE(fabs(img[k * plane + p] - want) <= tol, "%s: channel %d pixel %d is %g, want %g",
                          what, k, (int)p, (double)img[k * plane + p], want);
        }
}

// A folder of clips: two classes, their clips' frames in name order and stacked along the height
// (each frame solid in its own colour); then a clip with too few frames, and one whose frames
// differ in size, each refused with its name
START_TEST(clip_folder_reads_clips) {
    char dir[64], p[256], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t col[3][3] = {{10, 20, 30}, {200, 100, 50}, {0, 255, 128}};
    const char *clips[3] = {"cats/c1", "cats/c2", "dogs/d1"};
    ck_assert(!mkdir(path_in(p, sizeof p, dir, "cats"), 0700));
    ck_assert(!mkdir(path_in(p, sizeof p, dir, "dogs"), 0700));
    for (int c = 0; c < 3; c++) {
        char clip[160], frame[200];
        ck_assert(!mkdir(path_in(clip, sizeof clip, dir, clips[c]), 0700));
        for (int f = 0; f < 3; f++) { // frames named out of order: f2, f0, f1 read as f0, f1, f2
            snprintf(frame, sizeof frame, "%s/f%d.png", clip, (f + 2) % 3);
            write_png_solid_bands(frame, 6, 6, true, col[(f + 2 + c) % 3], col[(f + 2 + c) % 3], 0);
        }
    }
    ClipFolder f;
    ck_assert_msg(!clip_folder_open(&f, dir, 4, 3, err, sizeof err), "%s", err);
    ck_assert_int_eq(f.n, 3);
    ck_assert_int_eq(f.n_classes, 2);
    ck_assert_str_eq(f.class_names[1], "dogs");
    ck_assert_int_eq(f.labels[1], 0);
    ck_assert_int_eq(f.labels[2], 1);
    real img[3 * 3 * 16], frame[3 * 16];
    ck_assert_msg(!clip_folder_load(&f, 2, img, err, sizeof err), "%s", err);
    for (int k = 0; k < 3; k++) {
        for (int c = 0; c < 3; c++) memcpy(frame + c * 16, img + (c * 3 + k) * 16, 16 * sizeof(real));
        assert_solid(frame, 4, col[(k + 2) % 3], 1e-6, "a clip's frame");
    }
    clip_folder_close(&f);
    ck_assert_int_eq(clip_folder_open(&f, dir, 4, 4, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cats/c1' has 3 frames; the model takes 4 (--frames)"), "%s", err);
    write_png_solid_bands(path_in(p, sizeof p, dir, "dogs/d1/f1.png"), 8, 6, true, col[0], col[0], 0);
    ck_assert_int_eq(clip_folder_open(&f, dir, 4, 3, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dogs/d1' mixes frame sizes") && strstr(err, "8x6"), "%s", err);
    test_rm_rf(dir);
}
END_TEST

START_TEST(image_folder_reads_classes) {
    char dir[64], p[256], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t red[3] = {255, 0, 0}, green[3] = {0, 255, 0}, white[3] = {255, 255, 255},
                  grey[3] = {100, 100, 100}, rose[3] = {200, 50, 50};
    mkdir(path_in(p, sizeof p, dir, "b_dogs"), 0700); // created first, sorted second
    mkdir(path_in(p, sizeof p, dir, "a_cats"), 0700);
    mkdir(path_in(p, sizeof p, dir, ".hidden"), 0700);
    // landscape: red side bands around a green centre square; portrait: white top/bottom bands
    write_png_solid_bands(path_in(p, sizeof p, dir, "a_cats/1.png"), 12, 6, true, red, green, 3);
    write_png_solid_bands(path_in(p, sizeof p, dir, "a_cats/2.PNG"), 5, 9, false, white, grey, 2);
    write_file(path_in(p, sizeof p, dir, "a_cats/notes.txt"), "not an image", 12);
    write_file(path_in(p, sizeof p, dir, ".hidden/z.png"), "ignored", 7);
    uint8_t solid[8 * 8 * 3], checker[3 * 3 * 3];
    for (int i = 0; i < 64; i++) memcpy(solid + i * 3, rose, 3);
    for (int i = 0; i < 9; i++) memcpy(checker + i * 3, (i % 2) ? white : red, 3);
    ck_assert(stbi_write_jpg(path_in(p, sizeof p, dir, "b_dogs/x.JPEG"), 8, 8, 3, solid, 100));
    ck_assert(stbi_write_png(path_in(p, sizeof p, dir, "b_dogs/y.png"), 3, 3, 3, checker, 9));

    ImageFolder f;
    int rc = image_folder_open(&f, dir, 3, err, sizeof err);
    ck_assert_msg(rc == 0, "open failed: %s", err);
    ck_assert_int_eq(f.n, 4);
    ck_assert_int_eq(f.n_classes, 2);
    ck_assert_str_eq(f.class_names[0], "a_cats");
    ck_assert_str_eq(f.class_names[1], "b_dogs");
    const char *names[4] = {"a_cats/1.png", "a_cats/2.PNG", "b_dogs/x.JPEG", "b_dogs/y.png"};
    const int64_t labels[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(strstr(f.paths[i], names[i]), "image %d is %s, want %s", i, f.paths[i], names[i]);
        ck_assert_int_eq(f.labels[i], labels[i]);
    }
    real img[27], again[27];
    for (int pass = 0; pass < 2; pass++) { // the second pass reads the cache
        ck_assert_int_eq(image_folder_load(&f, 0, img, err, sizeof err), 0);
        assert_solid(img, 3, green, 1.01 / 127.5, "centre crop of 1.png");
        ck_assert_int_eq(image_folder_load(&f, 1, img, err, sizeof err), 0);
        assert_solid(img, 3, grey, 1.01 / 127.5, "centre crop of 2.PNG");
        ck_assert_int_eq(image_folder_load(&f, 2, img, err, sizeof err), 0);
        assert_solid(img, 3, rose, 6 / 127.5, "x.JPEG");
        ck_assert_int_eq(image_folder_load(&f, 3, img, err, sizeof err), 0);
        for (int i = 0; i < 9; i++) // already 3x3: exact, CHW
            for (int k = 0; k < 3; k++)
                REQUIRE(img[k * 9 + i] == (real)(((i % 2) ? white : red)[k] / 127.5 - 1),
                        "y.png: channel %d pixel %d is %g", k, i, (double)img[k * 9 + i]);
        if (pass == 0) memcpy(again, img, sizeof img);
    }
    ck_assert(!memcmp(again, img, sizeof img));
    image_folder_close(&f);
    test_rm_rf(dir);
}
END_TEST

START_TEST(image_folder_reads_flat_folder) {
    char dir[64], p[256], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t a[3] = {10, 20, 30}, b[3] = {40, 50, 60};
    write_png_solid_bands(path_in(p, sizeof p, dir, "b.png"), 4, 4, true, a, a, 0);
    write_png_solid_bands(path_in(p, sizeof p, dir, "a.png"), 4, 4, true, b, b, 0);
    uint8_t solid[16 * 3];
    for (int i = 0; i < 16; i++) memcpy(solid + 3 * i, a, 3);
    ck_assert(stbi_write_jpg(path_in(p, sizeof p, dir, "c.jpg"), 4, 4, 3, solid, 100));
    ImageFolder f;
    int rc = image_folder_open(&f, dir, 4, err, sizeof err);
    ck_assert_msg(rc == 0, "open failed: %s", err);
    ck_assert_int_eq(f.n, 3);
    ck_assert_int_eq(f.n_classes, 1);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(f.labels[i], 0);
    ck_assert(strstr(f.paths[2], "c.jpg"));
    real img[48];
    ck_assert_int_eq(image_folder_load(&f, 0, img, err, sizeof err), 0);
    assert_solid(img, 4, b, 1e-6, "a.png");
    image_folder_close(&f);
    test_rm_rf(dir);
}
END_TEST

START_TEST(image_folder_errors_say_what_to_do) {
    char dir[64], p[256], err[512];
    test_tmpdir(dir, sizeof dir);
    ImageFolder f;

    ck_assert_int_eq(image_folder_open(&f, path_in(p, sizeof p, dir, "nope"), 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "nope") && strstr(err, "does not exist"), "got \"%s\"", err);

    ck_assert_int_eq(image_folder_open(&f, dir, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, dir) && strstr(err, "no .png"), "got \"%s\"", err);

    const uint8_t c[3] = {1, 2, 3};
    write_png_solid_bands(path_in(p, sizeof p, dir, "good.png"), 4, 4, true, c, c, 0);
    write_file(path_in(p, sizeof p, dir, "bad.png"), "this is not a png", 17);
    ck_assert_int_eq(image_folder_open(&f, dir, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bad.png") && strstr(err, "cannot read image"), "got \"%s\"", err);
    remove(p);

    // a PNG cut short: its header reads, its pixels do not; the error names the file either way
    write_png_solid_bands(path_in(p, sizeof p, dir, "short.png"), 64, 64, true, c, c, 0);
    FILE *fp = fopen(p, "rb");
    uint8_t head[60];
    ck_assert_uint_eq(fread(head, 1, sizeof head, fp), sizeof head);
    fclose(fp);
    write_file(p, head, sizeof head);
    err[0] = 0;
    if (image_folder_open(&f, dir, 8, err, sizeof err) == 0) {
        real img[3 * 8 * 8];
        int bad = -1;
        for (int i = 0; i < f.n; i++)
            if (strstr(f.paths[i], "short.png")) bad = i;
        ck_assert_int_ge(bad, 0);
        ck_assert_int_eq(image_folder_load(&f, bad, img, err, sizeof err), -1);
        image_folder_close(&f);
    }
    ck_assert_msg(strstr(err, "short.png"), "got \"%s\"", err);
    remove(p);

    // images both at the top and in a class folder
    mkdir(path_in(p, sizeof p, dir, "cls"), 0700);
    write_png_solid_bands(path_in(p, sizeof p, dir, "cls/a.png"), 4, 4, true, c, c, 0);
    ck_assert_int_eq(image_folder_open(&f, dir, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "good.png") && strstr(err, "move"), "got \"%s\"", err);
    test_rm_rf(dir);
}
END_TEST

// ---- plots ---------------------------------------------------------------------------------

START_TEST(plot_draws_curves_inside_its_panel) {
    char dir[64], path[128], err[512];
    test_tmpdir(dir, sizeof dir);
    const uint8_t fill[3] = {1, 2, 3}, ca[3] = {200, 30, 150}, cb[3] = {20, 160, 60};
    enum { N = 200 };
    double x[N], ya[N], yb[N];
    for (int i = 0; i < N; i++) {
        x[i] = 10 * i;
        ya[i] = 2 * exp(-i / 40.0) + 0.05;
        yb[i] = (i % 17 == 0) ? 0 : (i == 50 ? NAN : 1e-3 * (1 + i)); // gaps on a log axis
    }
    PlotSeries s[2] = {{"run A", x, ya, N, {200, 30, 150}}, {"rel diff", x, yb, N, {20, 160, 60}}};
    for (int log_y = 0; log_y <= 1; log_y++) {
        Canvas c = canvas_create(900, 500, fill);
        plot_panel(&c, 100, 50, 640, 400, "loss", "step", s, 2, log_y);
        path_in(path, sizeof path, dir, "plot.png");
        ck_assert_int_eq(canvas_write_png(&c, path, err, sizeof err), 0);
        canvas_free(&c);
        int w, h, comp, bb[4];
        uint8_t *px = stbi_load(path, &w, &h, &comp, 3);
        ck_assert_ptr_nonnull(px);
        ck_assert_int_gt(count_rgb(px, w, h, ca, bb), 300);
        ck_assert_int_gt(count_rgb(px, w, h, cb, bb), 300);
        // nothing drawn outside the panel
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < w; xx++) {
                bool inside = xx >= 100 && xx < 740 && y >= 50 && y < 450;
                REQUIRE(inside || !memcmp(px + ((size_t)y * w + xx) * 3, fill, 3),
                        "log_y %d: pixel (%d, %d) outside the panel was drawn on", log_y, xx, y);
            }
        stbi_image_free(px);
    }
    test_rm_rf(dir);
}
END_TEST

// A crafted JPEG whose Huffman table overflows Debian 12's stb_image (found by fuzzing,
// tests/fuzz/regressions/imagefolder/) is refused with a sentence by libjpeg-turbo; a file that is
// neither PNG nor JPEG is named as such
START_TEST(image_folder_refuses_crafted_files) {
    static const uint8_t dht[] = {0xff, 0xd8, 0xff, 0xc4, 0x01, 0xd9, 0x00, 0xff, 0xd9};
    static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
    const struct { const uint8_t *bytes; size_t n; const char *want; } cases[] = {
        {dht, sizeof dht, "cannot read image"}, {gif, sizeof gif, "neither a PNG nor a JPEG"}};
    for (int i = 0; i < 2; i++) {
        char dir[256], p[512], err[1024] = "";
        test_tmpdir(dir, sizeof dir);
        snprintf(p, sizeof p, "%s/x.jpg", dir);
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(cases[i].bytes, 1, cases[i].n, f);
        fclose(f);
        ImageFolder imf;
        ck_assert_int_eq(image_folder_open(&imf, dir, 8, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].want) && strstr(err, "fix or remove the file"), "%s", err);
        test_rm_rf(dir);
    }
    // a PNG cut short passes a header check but not the decode that opening the folder runs
    char dir[256], p[512], err[1024] = "";
    uint8_t px[16 * 16 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37);
    test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/cut.png", dir);
    ck_assert(stbi_write_png(p, 16, 16, 3, px, 16 * 3));
    struct stat st;
    ck_assert(!stat(p, &st) && !truncate(p, st.st_size / 2));
    ImageFolder imf;
    ck_assert_int_eq(image_folder_open(&imf, dir, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cut.png") && strstr(err, "fix or remove the file"), "%s", err);
    test_rm_rf(dir);
    // a PNG whose header claims 16385 x 16385 pixels (stb_image would reserve 805 MB for them,
    // then find the one pixel there is) is refused for its size before any decoding
    test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/huge.png", dir);
    ck_assert(stbi_write_png(p, 1, 1, 3, px, 3));
    FILE *f = fopen(p, "r+b");
    static const uint8_t side[8] = {0, 0, 0x40, 0x01, 0, 0, 0x40, 0x01}; // IHDR width, height
    ck_assert(f && !fseek(f, 16, SEEK_SET) && fwrite(side, 1, 8, f) == 8 && !fclose(f));
    err[0] = 0;
    ck_assert_int_eq(image_folder_open(&imf, dir, 8, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "huge.png") && strstr(err, "larger than 16384 pixels a side"), "%s", err);
    test_rm_rf(dir);
}
END_TEST

Suite *data_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, shapes_are_deterministic_and_order_independent);
    tcase_add_test(tc, shapes_labels_are_uniform);
    tcase_add_test(tc, shapes_fit_and_stay_in_range);
    tcase_add_test(tc, shapes_match_their_class_geometrically);
    tcase_add_test(tc, shapes_reject_bad_arguments);
    tcase_add_test(tc, captions_tokenize_pad_and_name_what_is_wrong);
    tcase_add_test(tc, shapes_captions_describe_their_images);
    tcase_add_test(tc, image_folder_captions_from_txt_files);
    tcase_add_test(tc, canvas_png_round_trip);
    tcase_add_test(tc, canvas_gif_round_trip);
    tcase_add_test(tc, moving_shapes_stay_inside_and_move);
    tcase_add_test(tc, canvas_paste_clamps_upscales_and_refuses_nan);
    tcase_add_test(tc, canvas_text_scales_and_stays_in_its_box);
    tcase_add_test(tc, canvas_line_covers_its_path);
    tcase_add_test(tc, image_folder_reads_classes);
    tcase_add_test(tc, image_folder_reads_flat_folder);
    tcase_add_test(tc, clip_folder_reads_clips);
    tcase_add_test(tc, image_folder_errors_say_what_to_do);
    tcase_add_test(tc, image_folder_refuses_crafted_files);
    tcase_add_test(tc, plot_draws_curves_inside_its_panel);
    suite_add_tcase(s, tc);
    return s;
}
