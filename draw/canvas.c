// canvas.c: see canvas.h. stb_image_write comes compiled in -lstb; stb_easy_font is header-only
// (all static), so it is included here and nowhere else.
#include "canvas.h"
#include "../core/safefile.h"
#include "../core/check.h"
#include <gif_lib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

Canvas canvas_create(int w, int h, const uint8_t rgb[3]) {
    CHECK(w > 0 && h > 0 && (size_t)w * (size_t)h <= ((size_t)1 << 28),
          "canvas_create: size %dx%d is not a positive size of at most 2^28 pixels", w, h);
    Canvas c = {w, h, xmalloc((size_t)w * (size_t)h * 3)};
    canvas_fill_rect(&c, 0, 0, w, h, rgb);
    return c;
}

void canvas_free(Canvas *c) {
    free(c->px);
    c->px = NULL;
    c->w = c->h = 0;
}

void canvas_fill_rect(Canvas *c, int x, int y, int w, int h, const uint8_t rgb[3]) {
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
    int x1 = x + w > c->w ? c->w : x + w, y1 = y + h > c->h ? c->h : y + h;
    for (int j = y0; j < y1; j++)
        for (int i = x0; i < x1; i++) memcpy(c->px + ((size_t)j * c->w + i) * 3, rgb, 3);
}

static void blend(Canvas *c, int i, int j, const uint8_t rgb[3], double a) {
    if (i < 0 || j < 0 || i >= c->w || j >= c->h || a <= 0) return;
    uint8_t *p = c->px + ((size_t)j * c->w + i) * 3;
    if (a >= 1) {
        memcpy(p, rgb, 3);
        return;
    }
    for (int k = 0; k < 3; k++) p[k] = (uint8_t)lround(p[k] + (rgb[k] - p[k]) * a);
}

// coverage of each pixel centre = clamp(width/2 + 0.5 - distance to the segment, 0, 1)
void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, double width,
                 const uint8_t rgb[3]) {
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1)) return;
    double half = 0.5 * width + 0.5;
    double lo_x = fmax(fmin(x0, x1) - half, -1), hi_x = fmin(fmax(x0, x1) + half, c->w);
    double lo_y = fmax(fmin(y0, y1) - half, -1), hi_y = fmin(fmax(y0, y1) + half, c->h);
    double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int j = (int)floor(lo_y); j <= (int)hi_y; j++)
        for (int i = (int)floor(lo_x); i <= (int)hi_x; i++) {
            double px = i + 0.5 - x0, py = j + 0.5 - y0;
            double t = len2 > 0 ? fmin(fmax((px * dx + py * dy) / len2, 0), 1) : 0;
            double dist = hypot(px - t * dx, py - t * dy);
            blend(c, i, j, rgb, fmin(half - dist, 1));
        }
}

// stb_easy_font indexes a table by (char - 32): keep text to printable ASCII
static char *printable(const char *text) {
    size_t n = strlen(text);
    char *s = xmalloc(n + 1);
    for (size_t i = 0; i <= n; i++) {
        unsigned char ch = (unsigned char)text[i];
        s[i] = (ch == 0 || ch == '\n' || (ch >= 32 && ch < 127)) ? (char)ch : '?';
    }
    return s;
}

void canvas_text(Canvas *c, int x, int y, const char *text, int scale, const uint8_t rgb[3]) {
    CHECK(scale >= 1, "canvas_text: scale %d must be at least 1", scale);
    char *s = printable(text);
    int cap = (int)(strlen(s) + 1) * 1024; // 16 bytes a vertex, 4 a quad, < 16 quads a glyph
    float *vb = xmalloc((size_t)cap);
    int quads = stb_easy_font_print(0, 0, s, NULL, vb, cap);
    for (int q = 0; q < quads; q++) {
        const float *v = vb + q * 16; // 4 vertices of (x, y, z, rgba)
        int qx0 = (int)lroundf(v[0]), qy0 = (int)lroundf(v[1]);
        int qx1 = (int)lroundf(v[8]), qy1 = (int)lroundf(v[9]); // opposite corner
        canvas_fill_rect(c, x + qx0 * scale, y + qy0 * scale, (qx1 - qx0) * scale,
                         (qy1 - qy0) * scale, rgb);
    }
    free(vb);
    free(s);
}

int canvas_text_width(const char *text, int scale) {
    char *s = printable(text);
    int w = stb_easy_font_width(s) * scale;
    free(s);
    return w;
}

// lines are 12 font pixels apart; capitals span rows 0..6, descenders reach row 8
int canvas_text_height(const char *text, int scale) {
    if (!*text) return 0;
    int lines = 1;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    return ((lines - 1) * 12 + 9) * scale;
}

// img is (3, ih, iw)
void canvas_paste(Canvas *c, int x, int y, const real *img, int ih, int iw, int upscale) {
    CHECK(upscale >= 1, "canvas_paste: upscale %d must be at least 1", upscale);
    size_t plane = (size_t)ih * (size_t)iw;
    for (int j = 0; j < ih; j++)
        for (int i = 0; i < iw; i++) {
            uint8_t rgb[3];
            for (int k = 0; k < 3; k++) {
                double v = img[k * plane + (size_t)j * iw + i];
                CHECK(isfinite(v), "canvas_paste: pixel (%d, %d) is %g; check images before drawing them", i, j, v);
                v = fmin(fmax(v, -1), 1);
                rgb[k] = (uint8_t)lround((v + 1) * 127.5);
            }
            canvas_fill_rect(c, x + i * upscale, y + j * upscale, upscale, upscale, rgb);
        }
}

// stb's writer callback: a short write sets the stream's error flag, checked before the commit
static void write_to_file(void *context, void *data, int size) {
    fwrite(data, 1, (size_t)size, ((SafeFile *)context)->f);
}

int canvas_write_png(const Canvas *c, const char *path, char *err, size_t err_size) {
    SafeFile a;
    if (safefile_open(&a, path, err, err_size)) return -1;
    int ok = stbi_write_png_to_func(write_to_file, &a, c->w, c->h, 3, c->px, c->w * 3);
    return safefile_commit(&a, ok && !ferror(a.f), err, err_size);
}

static int gif_write(GifFileType *g, const GifByteType *bytes, int n) {
    return (int)fwrite(bytes, 1, (size_t)n, g->UserData);
}

// frames' pixels as palette indices into idx (n h w) and the palette: giflib's median cut over
// the frames stacked as one picture; NULL (err set) on failure
static ColorMapObject *gif_palette(const Canvas *frames, int n, GifByteType *idx, char *err,
                                   size_t err_size) {
    size_t hw = (size_t)frames[0].w * frames[0].h, all = hw * n;
    GifByteType *rgb = xmalloc(3 * all);
    for (int f = 0; f < n; f++)
        for (size_t p = 0; p < hw; p++)
            for (int k = 0; k < 3; k++) rgb[k * all + f * hw + p] = frames[f].px[p * 3 + k];
    int colours = 256;
    ColorMapObject *map = GifMakeMapObject(colours, NULL);
    ALLOC_CHECK(map);
    if (GifQuantizeBuffer((unsigned)frames[0].w, (unsigned)(frames[0].h * n), &colours, rgb, rgb + all,
                          rgb + 2 * all, idx, map->Colors) == GIF_ERROR) {
        snprintf(err, err_size, "giflib could not quantize the frames' colours");
        GifFreeMapObject(map), map = NULL;
    }
    free(rgb);
    return map;
}

int canvas_write_gif(const Canvas *frames, int n, int delay_cs, const char *path, char *err,
                     size_t err_size) {
    CHECK(n >= 1, "canvas_write_gif: %d frames", n);
    int w = frames[0].w, h = frames[0].h, code = 0;
    for (int f = 1; f < n; f++)
        CHECK(frames[f].w == w && frames[f].h == h, "canvas_write_gif: frame %d is %dx%d, not %dx%d",
              f, frames[f].w, frames[f].h, w, h);
    GifByteType *idx = xmalloc((size_t)w * h * n);
    ColorMapObject *map = gif_palette(frames, n, idx, err, err_size);
    if (!map) return free(idx), -1;
    SafeFile a;
    if (safefile_open(&a, path, err, err_size)) return GifFreeMapObject(map), free(idx), -1;
    GifFileType *g = EGifOpen(a.f, gif_write, &code);
    bool ok = g != NULL;
    if (ok) {
        EGifSetGifVersion(g, true); // GIF89a: animation
        static const GifByteType loop[3] = {1, 0, 0}; // NETSCAPE2.0: loop for ever
        GraphicsControlBlock gcb = {.DisposalMode = DISPOSE_DO_NOT, .DelayTime = delay_cs,
                                    .TransparentColor = NO_TRANSPARENT_COLOR};
        GifByteType ext[4];
        EGifGCBToExtension(&gcb, ext);
        ok = EGifPutScreenDesc(g, w, h, 8, 0, map) != GIF_ERROR &&
             EGifPutExtensionLeader(g, APPLICATION_EXT_FUNC_CODE) != GIF_ERROR &&
             EGifPutExtensionBlock(g, 11, "NETSCAPE2.0") != GIF_ERROR &&
             EGifPutExtensionBlock(g, 3, loop) != GIF_ERROR && EGifPutExtensionTrailer(g) != GIF_ERROR;
        for (int f = 0; ok && f < n; f++) {
            ok = EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, ext) != GIF_ERROR &&
                 EGifPutImageDesc(g, 0, 0, w, h, false, NULL) != GIF_ERROR;
            for (int y = 0; ok && y < h; y++) ok = EGifPutLine(g, idx + ((size_t)f * h + y) * w, w) != GIF_ERROR;
        }
        if (!ok) code = g->Error;
        if (EGifCloseFile(g, ok ? &code : NULL) == GIF_ERROR) ok = false;
    }
    GifFreeMapObject(map);
    free(idx);
    if (!ok) {
        safefile_commit(&a, false, err, err_size);
        snprintf(err, err_size, "writing the GIF %s failed: %s", path, GifErrorString(code));
        return -1;
    }
    return safefile_commit(&a, !ferror(a.f), err, err_size);
}
