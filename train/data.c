// data.c: see data.h.
#include "data.h"
#include "../core/check.h"
#include "../core/rng.h"
#include "shapes.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int data_open(Data *d, const char *source, int size, int channels, int num_classes, char *err,
              size_t len) {
    *d = (Data){.size = size};
    if (!strcmp(source, "shapes")) {
        d->shapes = true;
        d->classes = SHAPES_CLASSES;
        if (channels != 3 || size < SHAPES_MIN_SIZE)
            return snprintf(err, len, "the shapes data are RGB images of at least %dx%d; use "
                            "--input-size >= %d", SHAPES_MIN_SIZE, SHAPES_MIN_SIZE,
                            SHAPES_MIN_SIZE), -1;
    } else {
        if (channels != 3)
            return snprintf(err, len, "image folders are read as RGB; the model needs in_channels 3"), -1;
        if (image_folder_open(&d->folder, source, d->size, err, len)) return -1;
        d->classes = d->folder.n_classes;
    }
    if (d->classes > num_classes) {
        snprintf(err, len, "the data have %d classes but the model has %d; pass --num-classes %d",
                 d->classes, num_classes, d->classes);
        data_close(d);
        return -1;
    }
    return 0;
}

void data_close(Data *d) {
    if (!d->shapes) image_folder_close(&d->folder);
    *d = (Data){0};
}

const char *data_class_name(const Data *d, int c) {
    return d->shapes ? shapes_class_name(c) : d->folder.class_names[c];
}

Batch batch_alloc(int first, int B, int total, int C, int S) {
    size_t n = (size_t)B * C * S * S;
    Batch b = {.B = B, .first = first, .total = total, .row0 = 0, .row1 = S, .arena = arena_create(3 * (n * sizeof(real) + 2 * ARENA_ALIGN) + 4096 +
                                             (size_t)B * (sizeof(real) + sizeof(int64_t)))};
    b.x0 = tensor_new(&b.arena, 4, B, C, S, S);
    b.xt = tensor_new(&b.arena, 4, B, C, S, S);
    b.v = tensor_new(&b.arena, 4, B, C, S, S);
    b.t = tensor_new(&b.arena, 1, B);
    b.y = arena_alloc(&b.arena, (size_t)B * sizeof(int64_t));
    return b;
}

void batch_rows_of_tokens(Batch *b, int t0, int n, int T, int p) {
    int grid = b->x0->shape[3] / p, last = (t0 + n < T ? t0 + n : T) - 1; // the last real token
    b->row0 = last < t0 ? 0 : t0 / grid * p;
    b->row1 = last < t0 ? 0 : (last / grid + 1) * p;
}

void batch_free(Batch *b) {
    arena_destroy(&b->arena);
    *b = (Batch){0};
}

void batch_make(Batch *b, Data *d, uint64_t seed, double label_dropout, int null_class, int step) {
    size_t plane = (size_t)d->size * d->size, chw = (size_t)b->x0->shape[1] * plane;
    size_t row = (size_t)b->row0 * d->size, rows = (size_t)(b->row1 - b->row0) * d->size;
    char err[512];
    for (int i = 0; i < b->B; i++) {
        uint64_t k = (uint64_t)step * b->total + b->first + i;
        real *x0 = b->x0->data + i * chw;
        if (d->shapes) shapes_sample_rows(x0, &b->y[i], d->size, seed, k, b->row0, b->row1);
        else {
            int item = (int)(rng_u32(seed, STREAM_PICK, k) % (uint32_t)d->folder.n);
            CHECK(!image_folder_load(&d->folder, item, x0, err, sizeof err), "%s", err);
            b->y[i] = d->folder.labels[item];
        }
        double t = flow_sample_t(seed, STREAM_T, k);
        b->t->data[i] = (real)(FLOW_T_SCALE * t);
        for (size_t c = 0; c < chw; c += plane) { // the rows built, in each channel
            size_t at = i * chw + c + row;
            real *v = b->v->data + at; // the noise first, then the velocity in its place
            rng_fill_normal(v, rows, seed, STREAM_NOISE, k * chw + c + row, 1.0);
            flow_interpolate(b->xt->data + at, v, b->x0->data + at, v, t, rows);
        }
        if (label_dropout > 0 && rng_uniform(seed, STREAM_DROP, k) < label_dropout) b->y[i] = null_class;
    }
}
