// image.c: the RGB canvas (drawing, text, pasting, atomic PNG) and the image folder loader.
// stb_image, stb_image_write and stb_image_resize come compiled in -lstb; stb_easy_font is
// header-only (all static), so it is included here and nowhere else.
#include "image.h"
#include "../core/atomic.h"
#include "../core/check.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>
#include <stb/stb_image_write.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_size, const char *fmt, ...) {
    if (!err || !err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

// ---- canvas ------------------------------------------------------------------------------------

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
                v = isnan(v) ? 0 : fmin(fmax(v, -1), 1);
                rgb[k] = (uint8_t)lround((v + 1) * 127.5);
            }
            canvas_fill_rect(c, x + i * upscale, y + j * upscale, upscale, upscale, rgb);
        }
}

// stb's writer callback: a short write sets the stream's error flag, checked before the commit
static void write_to_file(void *context, void *data, int size) {
    fwrite(data, 1, (size_t)size, ((AtomicFile *)context)->f);
}

int canvas_write_png(const Canvas *c, const char *path, char *err, size_t err_size) {
    AtomicFile a;
    if (atomic_open(&a, path, err, err_size)) return -1;
    int ok = stbi_write_png_to_func(write_to_file, &a, c->w, c->h, 3, c->px, c->w * 3);
    return atomic_commit(&a, ok && !ferror(a.f), err, err_size);
}

// ---- image folder ------------------------------------------------------------------------------

typedef struct {
    char **items;
    int n, cap;
} Names;

static void names_push(Names *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = xrealloc(l->items, (size_t)l->cap, sizeof *l->items);
    }
    l->items[l->n++] = strdup(s);
    ALLOC_CHECK(l->items[l->n - 1]);
}

static void names_free(Names *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    *l = (Names){0};
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = xmalloc(a + b + 2);
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

// Sorted, non-hidden entries of dir: image files into files, subfolders into dirs (either may be
// NULL). Returns -1 with err set when dir cannot be listed.
static int list_dir(const char *dir, Names *files, Names *dirs, char *err, size_t err_size) {
    DIR *d = opendir(dir);
    if (!d) {
        set_err(err, err_size, "cannot list folder '%s': %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *full = join(dir, e->d_name);
        struct stat st;
        if (stat(full, &st) == 0) {
            if (S_ISDIR(st.st_mode) && dirs) names_push(dirs, e->d_name);
            else if (S_ISREG(st.st_mode) && files && is_image_name(e->d_name))
                names_push(files, e->d_name);
        }
        free(full);
    }
    closedir(d);
    if (files && files->n) qsort(files->items, (size_t)files->n, sizeof(char *), cmp_str);
    if (dirs && dirs->n) qsort(dirs->items, (size_t)dirs->n, sizeof(char *), cmp_str);
    return 0;
}

static void add_image(ImageFolder *f, int *cap, char *path, int64_t label) {
    if (f->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        f->paths = xrealloc(f->paths, (size_t)*cap, sizeof *f->paths);
        f->labels = xrealloc(f->labels, (size_t)*cap, sizeof *f->labels);
    }
    f->paths[f->n] = path;
    f->labels[f->n++] = label;
}

static char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/') s--;
    char *b = strndup(path + s, n - s);
    ALLOC_CHECK(b);
    return b;
}

int image_folder_open(ImageFolder *f, const char *path, int size, char *err, size_t err_size) {
    *f = (ImageFolder){.size = size};
    CHECK(size >= 1 && size <= 4096, "image_folder_open: image size %d is not in [1, 4096]", size);
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, err_size, "image folder '%s' %s; pass the path of a folder of .png/.jpg images",
                path, errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, err_size, "'%s' is not a folder; pass a folder of .png/.jpg images (or one "
                "subfolder of them per class)", path);
        return -1;
    }
    Names top = {0}, subs = {0}, cls = {0};
    int cap = 0, rc = -1;
    if (list_dir(path, &top, &subs, err, err_size)) goto done;

    // class mode when some subfolder holds images
    for (int s = 0; s < subs.n; s++) {
        char *dir = join(path, subs.items[s]);
        Names files = {0};
        int lrc = list_dir(dir, &files, NULL, err, err_size);
        if (lrc == 0 && files.n > 0) {
            names_push(&cls, subs.items[s]);
            for (int i = 0; i < files.n; i++) add_image(f, &cap, join(dir, files.items[i]), cls.n - 1);
        }
        names_free(&files);
        free(dir);
        if (lrc) goto done;
    }
    if (cls.n > 0) {
        if (top.n > 0) {
            set_err(err, err_size, "image folder '%s' has both class subfolders and %d image(s) "
                    "directly in it (e.g. '%s'); move those images into a class subfolder",
                    path, top.n, top.items[0]);
            goto done;
        }
        if (cls.n < subs.n) {
            for (int s = 0, k = 0; s < subs.n; s++) {
                if (k < cls.n && !strcmp(subs.items[s], cls.items[k])) { k++; continue; }
                set_err(err, err_size, "class folder '%s/%s' has no .png/.jpg images; add some or "
                        "remove it (labels are the subfolders' indices in sorted order)",
                        path, subs.items[s]);
                goto done;
            }
        }
        f->n_classes = cls.n;
        f->class_names = cls.items;
        cls = (Names){0};
    } else {
        if (top.n == 0) {
            set_err(err, err_size, "image folder '%s' has no .png/.jpg/.jpeg images, neither "
                    "directly in it nor in class subfolders; add images, or one subfolder of "
                    "images per class", path);
            goto done;
        }
        for (int i = 0; i < top.n; i++) add_image(f, &cap, join(path, top.items[i]), 0);
        f->n_classes = 1;
        f->class_names = xmalloc(sizeof(char *));
        f->class_names[0] = base_name(path);
    }

    for (int i = 0; i < f->n; i++) {
        int w, h, comp;
        if (!stbi_info(f->paths[i], &w, &h, &comp)) {
            set_err(err, err_size, "cannot read image '%s': %s; fix or remove the file",
                    f->paths[i], stbi_failure_reason() ? stbi_failure_reason() : "unknown reason");
            goto done;
        }
    }
    size_t bytes = (size_t)f->n * (size_t)size * (size_t)size * 3;
    if (bytes <= IMAGE_FOLDER_CACHE_BYTES) {
        f->cache = xmalloc(bytes);
        f->cached = xcalloc((size_t)f->n, sizeof(bool));
    }
    rc = 0;
done:
    names_free(&top);
    names_free(&subs);
    names_free(&cls);
    if (rc) image_folder_close(f);
    return rc;
}

// dst is (size, size, 3): the centred square crop of the file, resized
static int decode(const char *path, int size, uint8_t *dst, char *err, size_t err_size) {
    int w, h, comp;
    uint8_t *data = stbi_load(path, &w, &h, &comp, 3);
    if (!data) {
        set_err(err, err_size, "cannot read image '%s': %s; fix or remove the file", path,
                stbi_failure_reason() ? stbi_failure_reason() : "unknown reason");
        return -1;
    }
    int s = w < h ? w : h;
    const uint8_t *src = data + ((size_t)((h - s) / 2) * w + (w - s) / 2) * 3;
    int ok = 1;
    if (s == size)
        for (int j = 0; j < s; j++) memcpy(dst + (size_t)j * size * 3, src + (size_t)j * w * 3, (size_t)s * 3);
    else
        ok = stbir_resize_uint8_srgb(src, s, s, w * 3, dst, size, size, size * 3, 3,
                                     STBIR_ALPHA_CHANNEL_NONE, 0);
    stbi_image_free(data);
    if (!ok) set_err(err, err_size, "cannot resize image '%s' (%dx%d) to %dx%d", path, w, h, size, size);
    return ok ? 0 : -1;
}

// img is (3, size, size)
int image_folder_load(ImageFolder *f, int i, real *img, char *err, size_t err_size) {
    CHECK(i >= 0 && i < f->n, "image_folder_load: index %d is not in [0, %d)", i, f->n);
    size_t npix = (size_t)f->size * (size_t)f->size;
    uint8_t *buf = f->cache ? f->cache + (size_t)i * npix * 3 : xmalloc(npix * 3);
    int rc = 0;
    if (!f->cache || !f->cached[i]) {
        rc = decode(f->paths[i], f->size, buf, err, err_size);
        if (f->cache && rc == 0) f->cached[i] = true;
    }
    if (rc == 0)
        for (size_t p = 0; p < npix; p++)
            for (int k = 0; k < 3; k++) img[k * npix + p] = (real)(buf[p * 3 + k] / 127.5 - 1.0);
    if (!f->cache) free(buf);
    return rc;
}

void image_folder_close(ImageFolder *f) {
    for (int i = 0; i < f->n; i++) free(f->paths[i]);
    for (int c = 0; c < f->n_classes; c++) free(f->class_names[c]);
    free(f->paths);
    free(f->labels);
    free(f->class_names);
    free(f->cache);
    free(f->cached);
    *f = (ImageFolder){0};
}
