// dit_packs.c: packs of images in rows of tokens (see dit.h): their checks, ids, rows and the
// placing of an image into its strip.
#include "dit.h"
#include <stdint.h>
#include <stdio.h>

// ---- packs ------------------------------------------------------------------------------------
const char *dit_pack_error(const DiTPack *p, char *buf, size_t len) {
    if (p->n < 1 || p->n > DIT_PACK_MAX || p->B < 1 || p->T < 1) {
        snprintf(buf, len, "a pack needs 1 to %d images in 1 or more rows of 1 or more tokens, "
                 "not %d images in %d rows of %d", DIT_PACK_MAX, p->n, p->B, p->T);
        return buf;
    }
    for (int i = 0; i < p->n; i++) {
        const DiTImage *a = &p->img[i];
        if (a->row < 0 || a->row >= p->B || a->gh < 1 || a->gw < 1 || a->start < 0 ||
            a->gf < 0 || dit_grid_tokens(dit_image_grid(a)) > p->T - a->start) {
            char frames[16] = ""; // clips: "F x " in front
            if (a->gf > 1 || a->gf < 0) snprintf(frames, sizeof frames, "%dx", a->gf);
            snprintf(buf, len, "pack image %d (%s%dx%d patches at token %d of row %d) does not fit "
                     "%d rows of %d tokens", i, frames, a->gh, a->gw, a->start, a->row, p->B, p->T);
            return buf;
        }
        if (i && a->row < p->img[i - 1].row) {
            snprintf(buf, len, "pack image %d (row %d) follows an image of row %d; list the images "
                     "in row order", i, a->row, p->img[i - 1].row);
            return buf;
        }
        for (int k = 0; k < i; k++) {
            const DiTImage *o = &p->img[k];
            if (o->row == a->row && o->start < a->start + dit_grid_tokens(dit_image_grid(a)) &&
                a->start < o->start + dit_grid_tokens(dit_image_grid(o))) {
                snprintf(buf, len, "pack images %d and %d overlap in row %d", k, i, a->row);
                return buf;
            }
        }
    }
    return NULL;
}

void dit_pack_ids(const DiTPack *p, int32_t *id, int T_pad) {
    for (size_t x = 0; x < (size_t)p->B * T_pad; x++) id[x] = -1;
    for (int i = 0; i < p->n; i++) {
        const DiTImage *a = &p->img[i];
        for (int t = 0; t < dit_grid_tokens(dit_image_grid(a)); t++) id[(size_t)a->row * T_pad + a->start + t] = i;
    }
}

int dit_pack_rows(const DiTPack *p, int first, int n, DiTPack *sub) {
    *sub = (DiTPack){.B = n, .T = p->T};
    int i0 = 0;
    while (i0 < p->n && p->img[i0].row < first) i0++;
    for (int i = i0; i < p->n && p->img[i].row < first + n; i++) {
        sub->img[sub->n] = p->img[i];
        sub->img[sub->n++].row -= first;
    }
    return i0;
}

long dit_pack_tokens(const DiTPack *p) {
    long n = 0;
    for (int i = 0; i < p->n; i++) n += dit_grid_tokens(dit_image_grid(&p->img[i]));
    return n;
}

void dit_pack_image(const DiTPack *p, int i, real *strip, real *img, int C, int pt, int patch, bool pack) {
    const DiTImage *a = &p->img[i];
    DiTGrid g = dit_image_grid(a);
    size_t W = (size_t)p->T * patch, w = (size_t)a->gw * patch, h = (size_t)a->gh * patch;
    for (int c = 0; c < C; c++)
        for (int F = 0; F < g.frames * pt; F++)
            for (int Y = 0; Y < (int)h; Y++)
                for (int X = 0; X < (int)w; X++) {
                    int t = a->start + ((F / pt) * a->gh + Y / patch) * a->gw + X / patch;
                    real *s = strip + ((((size_t)a->row * C + c) * pt + F % pt) * patch + Y % patch) * W +
                              (size_t)t * patch + X % patch;
                    real *v = img + (((size_t)c * g.frames * pt + F) * h + Y) * w + X;
                    if (pack) *s = *v;
                    else *v = *s;
                }
}
