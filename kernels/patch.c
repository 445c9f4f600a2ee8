// patch.c: images <-> patch tokens. Both directions are permutations, so each backward is the
// inverse permutation, accumulated.
#include "kernels.h"

// img (B,C,H,W) -> out (B, T, C*p*p), token (h,w) row-major, row laid out (c, i, j)
void patchify_forward(real *out, const real *img, int B, int C, int H, int W, int p) {
    int h = H / p, w = W / p, row = C * p * p;
    for (int b = 0; b < B; b++)
        for (int th = 0; th < h; th++)
            for (int tw = 0; tw < w; tw++) {
                real *o = out + ((size_t)(b * h + th) * w + tw) * row;
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < p; i++)
                        for (int j = 0; j < p; j++)
                            o[(c * p + i) * p + j] =
                                img[(((size_t)b * C + c) * H + th * p + i) * W + tw * p + j];
            }
}

void patchify_backward(real *dimg, const real *dout, int B, int C, int H, int W, int p) {
    int h = H / p, w = W / p, row = C * p * p;
    for (int b = 0; b < B; b++)
        for (int th = 0; th < h; th++)
            for (int tw = 0; tw < w; tw++) {
                const real *d = dout + ((size_t)(b * h + th) * w + tw) * row;
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < p; i++)
                        for (int j = 0; j < p; j++)
                            dimg[(((size_t)b * C + c) * H + th * p + i) * W + tw * p + j] +=
                                d[(c * p + i) * p + j];
            }
}

// tokens (B, T, p*p*C), row laid out (i, j, c) -> img (B,C,H,W)
void unpatchify_forward(real *img, const real *tokens, int B, int C, int H, int W, int p) {
    int h = H / p, w = W / p, row = C * p * p;
    for (int b = 0; b < B; b++)
        for (int th = 0; th < h; th++)
            for (int tw = 0; tw < w; tw++) {
                const real *x = tokens + ((size_t)(b * h + th) * w + tw) * row;
                for (int i = 0; i < p; i++)
                    for (int j = 0; j < p; j++)
                        for (int c = 0; c < C; c++)
                            img[(((size_t)b * C + c) * H + th * p + i) * W + tw * p + j] =
                                x[(i * p + j) * C + c];
            }
}

void unpatchify_backward(real *dtokens, const real *dimg, int B, int C, int H, int W, int p) {
    int h = H / p, w = W / p, row = C * p * p;
    for (int b = 0; b < B; b++)
        for (int th = 0; th < h; th++)
            for (int tw = 0; tw < w; tw++) {
                real *dx = dtokens + ((size_t)(b * h + th) * w + tw) * row;
                for (int i = 0; i < p; i++)
                    for (int j = 0; j < p; j++)
                        for (int c = 0; c < C; c++)
                            dx[(i * p + j) * C + c] +=
                                dimg[(((size_t)b * C + c) * H + th * p + i) * W + tw * p + j];
            }
}
