// data.c: see data.h.
#include "data.h"
#include "../core/check.h"
#include "../core/rng.h"
#include "caption.h"
#include "shapes.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool data_procedural(const char *source) {
    return !strcmp(source, "shapes") || !strcmp(source, "moving-shapes");
}

int data_open(Data *d, const char *source, int size, int frames, int channels, int num_classes,
              char *err, size_t len) {
    *d = (Data){.size = size, .frames = frames};
    bool still = !strcmp(source, "shapes"), moving = !strcmp(source, "moving-shapes");
    if (still && frames > 1)
        return snprintf(err, len, "the shapes data are images, and the model takes clips of %d "
                        "frames; use --data moving-shapes", frames), -1;
    if (moving && frames < 2)
        return snprintf(err, len, "the moving-shapes data are clips; pass --frames 2 or more "
                        "(or --data shapes for images)"), -1;
    if (still || moving) {
        d->shapes = true;
        d->classes = SHAPES_CLASSES;
        if (channels != 3 || size < SHAPES_MIN_SIZE)
            return snprintf(err, len, "the shapes data are RGB images of at least %dx%d; use "
                            "--input-size >= %d", SHAPES_MIN_SIZE, SHAPES_MIN_SIZE,
                            SHAPES_MIN_SIZE), -1;
    } else {
        if (channels != 3)
            return snprintf(err, len, "image folders are read as RGB; the model needs in_channels 3"), -1;
        if (frames > 1) {
            if (clip_folder_open(&d->clips, source, d->size, frames, err, len)) return -1;
            d->classes = d->clips.n_classes;
        } else {
            if (image_folder_open(&d->folder, source, d->size, err, len)) return -1;
            d->classes = d->folder.n_classes;
        }
    }
    if (d->classes > num_classes) {
        snprintf(err, len, "the data have %d classes but the model has %d; pass --num-classes %d",
                 d->classes, num_classes, d->classes);
        data_close(d);
        return -1;
    }
    return 0;
}

int data_pack_images(const Data *d) {
    if (!d->folder.n) return 0; // no folder opened: unknown
    long least = d->max_tokens;
    for (int i = 0; i < d->folder.n; i++) {
        int gh, gw;
        data_image_grid(d, i, &gh, &gw);
        least = (long)gh * gw < least ? (long)gh * gw : least;
    }
    long most = d->max_tokens / (least > 0 ? least : 1);
    return most < DIT_PACK_MAX ? (int)most : DIT_PACK_MAX;
}

void data_image_grid(const Data *d, int item, int *gh, int *gw) {
    int p = d->patch, N = d->max_tokens;
    int h = (d->folder.heights[item] + p / 2) / p, w = (d->folder.widths[item] + p / 2) / p;
    h = h < 1 ? 1 : h, w = w < 1 ? 1 : w;
    if ((long)h * w > N) {
        double s = sqrt((double)N / ((double)h * w));
        h = (int)(h * s) < 1 ? 1 : (int)(h * s), w = (int)(w * s) < 1 ? 1 : (int)(w * s);
        while ((long)h * w > N) *(h > w ? &h : &w) -= 1;
    }
    *gh = h, *gw = w;
}

int data_captions(Data *d, int L, char *err, size_t len) {
    d->text_len = L;
    if (d->shapes && L < SHAPES_CAPTION_WORDS)
        return snprintf(err, len, "the shapes' captions have up to %d words; pass --text-len %d or more",
                        SHAPES_CAPTION_WORDS, SHAPES_CAPTION_WORDS), -1;
    if (d->shapes) return 0;
    d->captions = xmalloc((size_t)d->folder.n * L * sizeof(int64_t));
    for (int i = 0; i < d->folder.n; i++) {
        const char *img = d->folder.paths[i], *dot = strrchr(img, '.');
        char path[4096], text[4096];
        snprintf(path, sizeof path, "%.*s.txt", (int)(dot ? dot - img : (long)strlen(img)), img);
        FILE *f = fopen(path, "rb");
        if (!f)
            return snprintf(err, len, "%s has no caption: --cond text reads each image's caption from "
                            "the .txt file beside it (%s); write one", img, path), -1;
        size_t n = fread(text, 1, sizeof text - 1, f);
        bool more = fgetc(f) != EOF;
        fclose(f);
        text[n] = 0;
        if (more || strlen(text) != n)
            return snprintf(err, len, "%s: a caption is one line of words, not %s", path,
                            more ? "over 4 KiB" : "binary data"), -1;
        if (caption_tokenize(text, d->captions + (size_t)i * L, L, path, err, len)) return -1;
    }
    return 0;
}

void data_close(Data *d) {
    free(d->captions);
    if (!d->shapes && d->frames > 1) clip_folder_close(&d->clips);
    else if (!d->shapes) image_folder_close(&d->folder);
    *d = (Data){0};
}

const char *data_class_name(const Data *d, int c) {
    return d->shapes ? shapes_class_name(c) : d->frames > 1 ? d->clips.class_names[c] : d->folder.class_names[c];
}

Batch batch_alloc(int first, int B, int total, int C, int F, int S, int per) {
    size_t n = (size_t)B * C * F * S * S;
    Batch b = {.B = B, .first = first, .total = total, .row0 = 0, .row1 = F * S, .arena = arena_create(3 * (n * sizeof(real) + 2 * ARENA_ALIGN) + 4096 +
                                             (size_t)B * (sizeof(real) + per * sizeof(int64_t)))};
    b.x0 = tensor_new(&b.arena, 4, B, C, F * S, S);
    b.xt = tensor_new(&b.arena, 4, B, C, F * S, S);
    b.v = tensor_new(&b.arena, 4, B, C, F * S, S);
    b.t = tensor_new(&b.arena, 1, B);
    b.y = arena_alloc(&b.arena, (size_t)B * per * sizeof(int64_t));
    return b;
}

Batch batch_alloc_packs(int first, int B, int total, int C, int pt, int p, int T, int per) {
    size_t n = (size_t)B * C * pt * p * T * p;
    Batch b = {.B = B, .first = first, .total = total, .row0 = 0, .row1 = pt * p,
               .arena = arena_create(3 * (n * sizeof(real) + 2 * ARENA_ALIGN) + 4096 +
                                     DIT_PACK_MAX * (sizeof(real) + per * sizeof(int64_t)) + sizeof(DiTPack))};
    b.x0 = tensor_new(&b.arena, 4, B, C, pt * p, T * p);
    b.xt = tensor_new(&b.arena, 4, B, C, pt * p, T * p);
    b.v = tensor_new(&b.arena, 4, B, C, pt * p, T * p);
    b.t = tensor_new(&b.arena, 1, DIT_PACK_MAX); // per image: the first pack->n
    b.y = arena_alloc(&b.arena, DIT_PACK_MAX * per * sizeof(int64_t));
    b.pack = arena_alloc(&b.arena, sizeof(DiTPack));
    return b;
}

void batch_rows_of_tokens(Batch *b, int t0, int n, int T, int pt, int p) {
    // a token of grid row g (frame by frame: g = frame' * rows + row) covers pixel rows
    // [row p, (row + 1) p) of frames [frame' pt, (frame' + 1) pt), between the first's and the last's
    int S = b->x0->shape[3], grid = S / p, last = (t0 + n < T ? t0 + n : T) - 1; // the last real token
    int g0 = t0 / grid, g1 = last / grid;
    b->row0 = last < t0 ? 0 : (g0 / grid * pt) * S + g0 % grid * p;
    b->row1 = last < t0 ? 0 : ((g1 / grid + 1) * pt - 1) * S + (g1 % grid + 1) * p;
}

void batch_free(Batch *b) {
    arena_destroy(&b->arena);
    *b = (Batch){0};
}

// The label or the caption (d->text_len ids) of sample or image i of b, folder item `item`, its
// draws at k: the empty caption or the null class where dropped (with probability label_dropout)
static void put_label(Batch *b, Data *d, int i, int item, int64_t label, uint64_t seed, uint64_t k,
                      double label_dropout, int null_class) {
    bool drop = label_dropout > 0 && rng_uniform(seed, STREAM_DROP, k) < label_dropout;
    int L = d->text_len;
    if (!L) {
        b->y[i] = drop ? null_class : label;
        return;
    }
    int64_t *ids = b->y + (size_t)i * L;
    char err[512];
    if (d->shapes) {
        char text[128];
        shapes_caption(text, sizeof text, seed, k);
        CHECK(!caption_tokenize(text, ids, L, "the shapes' caption", err, sizeof err), "%s", err);
    } else memcpy(ids, d->captions + (size_t)item * L, (size_t)L * sizeof(int64_t));
    if (drop) memset(ids, 0, (size_t)L * sizeof(int64_t));
}

// Packs (see batch_make): the images of row i, item k, into the strip and b->pack, each with its
// time, label or caption (put_label) and the strip's values on the flow path
static void make_pack_row(Batch *b, Data *d, uint64_t seed, double label_dropout, int null_class,
                          int i, uint64_t k) {
    ImageFolder *f = &d->folder;
    DiTPack *pk = b->pack;
    int p = d->patch, C = b->x0->shape[1];
    size_t W = (size_t)pk->T * p, row = (size_t)C * p * W;
    real *x0 = b->x0->data + i * row, *xt = b->xt->data + i * row, *v = b->v->data + i * row;
    rng_fill_normal(v, row, seed, STREAM_NOISE, k * row, 1.0); // the noise; velocities below
    char err[512];
    for (int j = 0, start = 0; pk->n < DIT_PACK_MAX; j++) {
        uint64_t at = k * DIT_PACK_MAX + j; // this image's draws
        int item = (int)((j ? rng_u32(seed, STREAM_PACK, at) : rng_u32(seed, STREAM_PICK, k)) % (uint32_t)f->n);
        int gh, gw, n = pk->n;
        data_image_grid(d, item, &gh, &gw);
        if (gh * gw > pk->T - start) break;
        real *img = xmalloc((size_t)C * gh * p * gw * p * sizeof(real));
        CHECK(!image_folder_load_size(f, item, gh * p, gw * p, img, err, sizeof err), "%s", err);
        pk->img[pk->n++] = (DiTImage){i, start, gh, gw, 1};
        dit_pack_image(pk, n, b->x0->data, img, C, 1, p, true);
        free(img);
        double t = flow_sample_t(seed, STREAM_T, at);
        b->t->data[n] = (real)(FLOW_T_SCALE * t);
        put_label(b, d, n, item, f->labels[item], seed, at, label_dropout, null_class);
        for (size_t r = 0; r < (size_t)C * p; r++) { // its columns of each strip row
            size_t o = r * W + (size_t)start * p, len = (size_t)gh * gw * p;
            flow_interpolate(xt + o, v + o, x0 + o, v + o, t, len);
        }
        start += gh * gw;
    }
}

void batch_make(Batch *b, Data *d, uint64_t seed, double label_dropout, int null_class, int step) {
    if (b->pack) { // rows of packs: every row's whole strip
        *b->pack = (DiTPack){.B = b->B, .T = b->x0->shape[3] / d->patch};
        memset(b->x0->data, 0, b->x0->size * sizeof(real));
        memset(b->xt->data, 0, b->xt->size * sizeof(real));
        for (int i = 0; i < b->B; i++)
            make_pack_row(b, d, seed, label_dropout, null_class, i, (uint64_t)step * b->total + b->first + i);
        return;
    }
    size_t plane = (size_t)d->frames * d->size * d->size, chw = (size_t)b->x0->shape[1] * plane;
    size_t row = (size_t)b->row0 * d->size, rows = (size_t)(b->row1 - b->row0) * d->size;
    char err[512];
    for (int i = 0; i < b->B; i++) {
        uint64_t k = (uint64_t)step * b->total + b->first + i;
        real *x0 = b->x0->data + i * chw;
        int64_t label;
        int item = 0;
        if (d->shapes && d->frames > 1)
            shapes_clip_rows(x0, &label, d->size, d->frames, seed, k, b->row0, b->row1);
        else if (d->shapes) shapes_sample_rows(x0, &label, d->size, seed, k, b->row0, b->row1);
        else if (d->frames > 1) { // a clip of the folder
            item = (int)(rng_u32(seed, STREAM_PICK, k) % (uint32_t)d->clips.n);
            CHECK(!clip_folder_load(&d->clips, item, x0, err, sizeof err), "%s", err);
            label = d->clips.labels[item];
        } else {
            item = (int)(rng_u32(seed, STREAM_PICK, k) % (uint32_t)d->folder.n);
            CHECK(!image_folder_load(&d->folder, item, x0, err, sizeof err), "%s", err);
            label = d->folder.labels[item];
        }
        double t = flow_sample_t(seed, STREAM_T, k);
        b->t->data[i] = (real)(FLOW_T_SCALE * t);
        for (size_t c = 0; c < chw; c += plane) { // the rows built, in each channel
            size_t at = i * chw + c + row;
            real *v = b->v->data + at; // the noise first, then the velocity in its place
            rng_fill_normal(v, rows, seed, STREAM_NOISE, k * chw + c + row, 1.0);
            flow_interpolate(b->xt->data + at, v, b->x0->data + at, v, t, rows);
        }
        put_label(b, d, i, item, label, seed, k, label_dropout, null_class);
    }
}
