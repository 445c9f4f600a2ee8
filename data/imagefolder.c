// imagefolder.c: see imagefolder.h. JPEG files are decoded by libjpeg-turbo, PNG files by
// stb_image (-lstb), and the crop is resized by stb_image_resize. Debian 12's stb_image (v2.27)
// writes past its Huffman tables on a crafted JPEG (found by fuzzing; the file is kept in
// tests/fuzz/regressions/imagefolder/), so stb sees only files with the PNG signature.
#include "imagefolder.h"
#include "../core/check.h"
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h> // before jpeglib.h, which uses FILE
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_size, const char *fmt, ...) {
    if (!err || !err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

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

// 0 when path is a folder; else -1 with a message saying what to pass
static int check_folder(const char *path, char *err, size_t err_size) {
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
    return 0;
}

// Each subfolder of path (subs, sorted) that holds images becomes a class: its name goes to cls,
// its images to f. -1 with err set when a subfolder cannot be listed.
static int add_classes(ImageFolder *f, int *cap, const char *path, const Names *subs, Names *cls,
                       char *err, size_t err_size) {
    for (int s = 0; s < subs->n; s++) {
        char *dir = join(path, subs->items[s]);
        Names files = {0};
        int rc = list_dir(dir, &files, NULL, err, err_size);
        if (rc == 0 && files.n > 0) {
            names_push(cls, subs->items[s]);
            for (int i = 0; i < files.n; i++) add_image(f, cap, join(dir, files.items[i]), cls->n - 1);
        }
        names_free(&files);
        free(dir);
        if (rc) return -1;
    }
    return 0;
}

// Class mode: no image may sit next to the class subfolders, and every subfolder must hold
// images (labels are indices in sorted order); the names in cls move into f.
static int use_classes(ImageFolder *f, const char *path, const Names *top, const Names *subs,
                       Names *cls, char *err, size_t err_size) {
    if (top->n > 0) {
        set_err(err, err_size, "image folder '%s' has both class subfolders and %d image(s) "
                "directly in it (e.g. '%s'); move those images into a class subfolder",
                path, top->n, top->items[0]);
        return -1;
    }
    for (int s = 0, k = 0; s < subs->n; s++) { // cls is subs without the subfolders lacking images
        if (k < cls->n && !strcmp(subs->items[s], cls->items[k])) { k++; continue; }
        set_err(err, err_size, "class folder '%s/%s' has no .png/.jpg images; add some or "
                "remove it (labels are the subfolders' indices in sorted order)",
                path, subs->items[s]);
        return -1;
    }
    f->n_classes = cls->n;
    f->class_names = cls->items;
    *cls = (Names){0};
    return 0;
}

// Flat mode: the images directly in path (top) are one class named after the folder.
static int use_flat(ImageFolder *f, int *cap, const char *path, const Names *top, char *err,
                    size_t err_size) {
    if (top->n == 0) {
        set_err(err, err_size, "image folder '%s' has no .png/.jpg/.jpeg images, neither "
                "directly in it nor in class subfolders; add images, or one subfolder of "
                "images per class", path);
        return -1;
    }
    for (int i = 0; i < top->n; i++) add_image(f, cap, join(path, top->items[i]), 0);
    f->n_classes = 1;
    f->class_names = xmalloc(sizeof(char *));
    f->class_names[0] = base_name(path);
    return 0;
}

// ---- reading a PNG or JPEG file ---------------------------------------------------------------
#define MAX_SIDE 16384 // pixels per side a file may have

typedef struct JpegErr { // libjpeg reports through this: the message is kept, decoding jumps back
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    char msg[JMSG_LENGTH_MAX];
} JpegErr;

static void jpeg_fail(j_common_ptr c) {
    JpegErr *e = (JpegErr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->back, 1);
}

static void jpeg_quiet(j_common_ptr c) { (void)c; } // warnings count, and fail the file below

// A JPEG's size and, when pixels is not NULL, its RGB pixels (malloc'ed); a corrupt or truncated
// file (any warning) is an error. 0, or -1 with the reason in why.
static int read_jpeg(FILE *fp, int *w, int *h, uint8_t **pixels, char *why, size_t len) {
    struct jpeg_decompress_struct c;
    JpegErr e;
    uint8_t *volatile out = NULL;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail, e.mgr.output_message = jpeg_quiet;
    if (setjmp(e.back)) {
        jpeg_destroy_decompress(&c);
        free(out);
        snprintf(why, len, "%s", e.msg);
        return -1;
    }
    jpeg_create_decompress(&c);
    jpeg_stdio_src(&c, fp);
    jpeg_read_header(&c, TRUE);
    *w = (int)c.image_width, *h = (int)c.image_height;
    if (*w > MAX_SIDE || *h > MAX_SIDE) snprintf(e.msg, sizeof e.msg, "larger than %d pixels a side", MAX_SIDE), longjmp(e.back, 1);
    if (pixels) {
        c.out_color_space = JCS_RGB;
        jpeg_start_decompress(&c);
        out = xmalloc((size_t)*w * (size_t)*h * 3);
        while (c.output_scanline < c.output_height) {
            JSAMPROW row = out + (size_t)c.output_scanline * (size_t)*w * 3;
            jpeg_read_scanlines(&c, &row, 1);
        }
        jpeg_finish_decompress(&c);
        if (e.mgr.num_warnings) snprintf(e.msg, sizeof e.msg, "corrupt or truncated JPEG data"), longjmp(e.back, 1);
        *pixels = out;
    }
    jpeg_destroy_decompress(&c);
    return 0;
}

// Every chunk of a PNG fits in the file: stb_image (v2.27) grows its buffer to what a chunk
// claims, 2 GiB for a crafted length (found by fuzzing), before it reads the data. 0, or -1 with
// the reason in why; leaves fp at the start.
static int png_chunks_fit(FILE *fp, char *why, size_t len) {
    if (fseek(fp, 0, SEEK_END)) return snprintf(why, len, "it cannot be read to its end"), -1;
    long size = ftell(fp), pos = 8;
    uint8_t head[8];
    // stb reads a chunk's length and type (8 bytes) and reserves the length, CRC or not
    while (pos + 8 <= size && !fseek(fp, pos, SEEK_SET) && fread(head, 1, 8, fp) == 8) {
        long length = (long)head[0] << 24 | head[1] << 16 | head[2] << 8 | head[3];
        if (length > size - pos - 12) {
            snprintf(why, len, "its chunk %.4s claims %ld bytes, past the end of the file (cut short?)",
                     (const char *)head + 4, length);
            return -1;
        }
        pos += 12 + length;
        if (!memcmp(head + 4, "IEND", 4)) break;
    }
    rewind(fp);
    return 0;
}

// A PNG's or JPEG's size and, when pixels is not NULL, its RGB pixels (free them with free()).
// 0, or -1 with a sentence in err.
static int read_image(const char *path, int *w, int *h, uint8_t **pixels, char *err, size_t err_size) {
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, jpg[3] = {0xff, 0xd8, 0xff};
    char why[JMSG_LENGTH_MAX] = "";
    uint8_t sig[8] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) snprintf(why, sizeof why, "%s", strerror(errno));
    else if (fread(sig, 1, 8, fp) < 3 || (memcmp(sig, png, 8) && memcmp(sig, jpg, 3)))
        snprintf(why, sizeof why, "it is neither a PNG nor a JPEG file");
    else if (rewind(fp), !memcmp(sig, jpg, 3)) read_jpeg(fp, w, h, pixels, why, sizeof why);
    else if (png_chunks_fit(fp, why, sizeof why)) {
    } else { // stb_image frees nothing of ours, and reads only this PNG
        int comp; // the header's size first: stb reserves the whole image before decoding it
        uint8_t *data = NULL;
        bool ok = stbi_info_from_file(fp, w, h, &comp);
        if (ok && (*w > MAX_SIDE || *h > MAX_SIDE))
            snprintf(why, sizeof why, "larger than %d pixels a side", MAX_SIDE);
        else if (ok && pixels)
            rewind(fp), ok = (data = stbi_load_from_file(fp, w, h, &comp, 3)) != NULL;
        const char *r; // stb's reason is "" for a chunk of type 0 (a file cut short): why must not be
        if (!ok) r = stbi_failure_reason(), snprintf(why, sizeof why, "%s", r && r[0] ? r : "corrupt PNG");
        else if (data) {
            *pixels = xmalloc((size_t)*w * (size_t)*h * 3);
            memcpy(*pixels, data, (size_t)*w * (size_t)*h * 3);
            stbi_image_free(data);
        }
    }
    if (fp) fclose(fp);
    if (!why[0]) return 0;
    set_err(err, err_size, "cannot read image '%s': %s; fix or remove the file", path, why);
    return -1;
}

// every file must decode, so that a bad one (corrupt, truncated) is named before training starts;
// and its size is kept
static int check_files(ImageFolder *f, char *err, size_t err_size) {
    f->widths = xmalloc((size_t)f->n * sizeof(int)), f->heights = xmalloc((size_t)f->n * sizeof(int));
    for (int i = 0; i < f->n; i++) {
        uint8_t *pixels = NULL;
        if (read_image(f->paths[i], &f->widths[i], &f->heights[i], &pixels, err, err_size)) return -1;
        free(pixels);
    }
    return 0;
}

int image_folder_open(ImageFolder *f, const char *path, int size, char *err, size_t err_size) {
    *f = (ImageFolder){.size = size};
    CHECK(size >= 1 && size <= 4096, "image_folder_open: image size %d is not in [1, 4096]", size);
    if (check_folder(path, err, err_size)) return -1;
    Names top = {0}, subs = {0}, cls = {0};
    int cap = 0;
    int rc = list_dir(path, &top, &subs, err, err_size);
    if (!rc) rc = add_classes(f, &cap, path, &subs, &cls, err, err_size);
    if (!rc) // class mode when some subfolder holds images
        rc = cls.n > 0 ? use_classes(f, path, &top, &subs, &cls, err, err_size)
                       : use_flat(f, &cap, path, &top, err, err_size);
    if (!rc) rc = check_files(f, err, err_size);
    size_t bytes = (size_t)f->n * (size_t)size * (size_t)size * 3;
    if (!rc && bytes <= IMAGE_FOLDER_CACHE_BYTES) {
        f->cache = xmalloc(bytes);
        f->cached = xcalloc((size_t)f->n, sizeof(bool));
    }
    names_free(&top);
    names_free(&subs);
    names_free(&cls);
    if (rc) image_folder_close(f);
    return rc;
}

// dst is (size, size, 3): the centred square crop of the file, resized
static int decode(const char *path, int size, uint8_t *dst, char *err, size_t err_size) {
    int w, h;
    uint8_t *data;
    if (read_image(path, &w, &h, &data, err, err_size)) return -1;
    int s = w < h ? w : h;
    const uint8_t *src = data + ((size_t)((h - s) / 2) * w + (w - s) / 2) * 3;
    int ok = 1;
    if (s == size)
        for (int j = 0; j < s; j++) memcpy(dst + (size_t)j * size * 3, src + (size_t)j * w * 3, (size_t)s * 3);
    else
        ok = stbir_resize_uint8_srgb(src, s, s, w * 3, dst, size, size, size * 3, 3,
                                     STBIR_ALPHA_CHANNEL_NONE, 0);
    free(data);
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

int image_folder_load_size(ImageFolder *f, int i, int h, int w, real *img, char *err, size_t err_size) {
    CHECK(i >= 0 && i < f->n && h >= 1 && w >= 1, "image_folder_load_size: image %d at %dx%d", i, h, w);
    int fw, fh;
    uint8_t *data, *buf = xmalloc((size_t)h * w * 3);
    if (read_image(f->paths[i], &fw, &fh, &data, err, err_size)) return free(buf), -1;
    int ok = stbir_resize_uint8_srgb(data, fw, fh, fw * 3, buf, w, h, w * 3, 3, STBIR_ALPHA_CHANNEL_NONE, 0);
    free(data);
    if (!ok) set_err(err, err_size, "cannot resize image '%s' (%dx%d) to %dx%d", f->paths[i], fw, fh, w, h);
    size_t npix = (size_t)h * w;
    for (size_t p = 0; ok && p < npix; p++)
        for (int k = 0; k < 3; k++) img[k * npix + p] = (real)(buf[p * 3 + k] / 127.5 - 1.0);
    free(buf);
    return ok ? 0 : -1;
}

void image_folder_close(ImageFolder *f) {
    for (int i = 0; i < f->n; i++) free(f->paths[i]);
    for (int c = 0; c < f->n_classes; c++) free(f->class_names[c]);
    free(f->paths);
    free(f->labels);
    free(f->widths);
    free(f->heights);
    free(f->class_names);
    free(f->cache);
    free(f->cached);
    *f = (ImageFolder){0};
}

// ---- folders of clips -------------------------------------------------------------------------
// The clip at dir (its frames: image files, no subfolders) as clip n of f, label `label`
static int add_clip(ClipFolder *f, int *cap, const char *dir, int64_t label, char *err, size_t err_size) {
    Names frames = {0}, subs = {0};
    int rc = list_dir(dir, &frames, &subs, err, err_size);
    if (!rc && subs.n)
        rc = -1, set_err(err, err_size, "clip folder '%s' has a subfolder '%s'; a clip's folder holds "
                         "its frames only (.png/.jpg files, in name order)", dir, subs.items[0]);
    else if (!rc && frames.n < f->frames)
        rc = -1, set_err(err, err_size, "clip '%s' has %d frame%s; the model takes %d (--frames): add "
                         "frames to it, remove it, or lower --frames", dir, frames.n,
                         frames.n == 1 ? "" : "s", f->frames);
    names_free(&frames), names_free(&subs);
    if (rc) return -1;
    if (f->n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        f->clips = xrealloc(f->clips, (size_t)*cap, sizeof *f->clips);
        f->labels = xrealloc(f->labels, (size_t)*cap, sizeof *f->labels);
    }
    ImageFolder *c = &f->clips[f->n];
    if (image_folder_open(c, dir, f->size, err, err_size)) return -1;
    f->labels[f->n++] = label;
    for (int k = 1; k < f->frames; k++)
        if (c->widths[k] != c->widths[0] || c->heights[k] != c->heights[0]) {
            set_err(err, err_size, "clip '%s' mixes frame sizes: '%s' is %dx%d but '%s' is %dx%d; "
                    "make its frames one size", dir, c->paths[0], c->widths[0], c->heights[0],
                    c->paths[k], c->widths[k], c->heights[k]);
            return -1;
        }
    return 0;
}

int clip_folder_open(ClipFolder *f, const char *path, int size, int frames, char *err, size_t err_size) {
    *f = (ClipFolder){.size = size, .frames = frames};
    CHECK(frames >= 1, "clip_folder_open: %d frames", frames);
    if (check_folder(path, err, err_size)) return -1;
    Names top = {0}, classes = {0};
    int cap = 0, rc = list_dir(path, &top, &classes, err, err_size);
    if (!rc && (top.n || !classes.n))
        rc = -1, set_err(err, err_size, "clip folder '%s' must hold one subfolder per class, each "
                         "with one subfolder of frames per clip%s%s", path, top.n ? "; it has images "
                         "directly in it, e.g. " : "", top.n ? top.items[0] : "");
    for (int k = 0; !rc && k < classes.n; k++) {
        char *dir = join(path, classes.items[k]);
        Names files = {0}, clips = {0};
        rc = list_dir(dir, &files, &clips, err, err_size);
        if (!rc && (files.n || !clips.n))
            rc = -1, set_err(err, err_size, "class folder '%s' must hold one subfolder of frames per "
                             "clip%s%s", dir, files.n ? "; it has images directly in it, e.g. " : "",
                             files.n ? files.items[0] : "");
        for (int c = 0; !rc && c < clips.n; c++) {
            char *clip = join(dir, clips.items[c]);
            rc = add_clip(f, &cap, clip, k, err, err_size);
            free(clip);
        }
        names_free(&files), names_free(&clips);
        free(dir);
    }
    if (!rc) f->n_classes = classes.n, f->class_names = classes.items, classes = (Names){0};
    names_free(&top), names_free(&classes);
    if (rc) clip_folder_close(f);
    return rc;
}

int clip_folder_load(ClipFolder *f, int i, real *img, char *err, size_t err_size) {
    CHECK(i >= 0 && i < f->n, "clip_folder_load: clip %d is not in [0, %d)", i, f->n);
    size_t plane = (size_t)f->size * f->size;
    real *frame = xmalloc(3 * plane * sizeof(real));
    int rc = 0;
    for (int k = 0; !rc && k < f->frames; k++) {
        rc = image_folder_load(&f->clips[i], k, frame, err, err_size);
        for (int c = 0; !rc && c < 3; c++)
            memcpy(img + ((size_t)c * f->frames + k) * plane, frame + c * plane, plane * sizeof(real));
    }
    free(frame);
    return rc;
}

void clip_folder_close(ClipFolder *f) {
    for (int i = 0; i < f->n; i++) image_folder_close(&f->clips[i]);
    for (int c = 0; c < f->n_classes; c++) free(f->class_names[c]);
    free(f->clips), free(f->labels), free(f->class_names);
    *f = (ClipFolder){0};
}
