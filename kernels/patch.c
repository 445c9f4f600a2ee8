// patch.c: clips <-> patch tokens. A clip (C, F, H, W) is cut into pt x p x p patches, an
// (F/pt) x (H/p) x (W/p) grid whose tokens run frame-major (frame, row, column); an image is a
// clip of one frame (F = pt = 1). A token row holds one patch, laid out (c, a, i, j) like a conv
// weight (D, C, pt, p, p), or (a, i, j, c) when channels_last, as the DiT final layer produces
// it. A shard holds tokens [t0, t0 + n), and rows past the last patch (padding) are left alone.
// Both directions ADD into their output, so each is the other's backward.
#include "kernels.h"

// visit(token element, clip element) for every pixel of the shard's real tokens
#define FOR_PATCH_PIXELS(BODY)                                                                     \
    int B = s.B, C = s.C, F = s.F, H = s.H, W = s.W, pt = s.pt, p = s.p;                           \
    int gw = W / p, plane = (H / p) * gw, T = (F / pt) * plane, row = C * pt * p * p;              \
    for (int b = 0; b < B; b++)                                                                    \
        for (int r = 0; r < n && t0 + r < T; r++) {                                                \
            int t = t0 + r, tf = t / plane, th = t % plane / gw, tw = t % gw;                      \
            size_t tok = ((size_t)b * n + r) * row;                                                \
            for (int c = 0; c < C; c++)                                                            \
                for (int a = 0; a < pt; a++)                                                       \
                    for (int i = 0; i < p; i++)                                                    \
                        for (int j = 0; j < p; j++) {                                              \
                            size_t te = tok + (channels_last ? ((a * p + i) * p + j) * C + c       \
                                                             : ((c * pt + a) * p + i) * p + j);    \
                            size_t ie = ((((size_t)b * C + c) * F + tf * pt + a) * H + th * p + i) \
                                            * W + tw * p + j;                                      \
                            BODY;                                                                  \
                        }                                                                          \
        }

// tokens (B, n, C*pt*p*p) += patches of img (B, C, F, H, W)
void patch_gather(real *tokens, const real *img, ClipShape s, int t0, int n, bool channels_last) {
    FOR_PATCH_PIXELS(tokens[te] += img[ie])
}

// img (B, C, F, H, W) += tokens (B, n, C*pt*p*p) put back in place
void patch_scatter(real *img, const real *tokens, ClipShape s, int t0, int n, bool channels_last) {
    FOR_PATCH_PIXELS(img[ie] += tokens[te])
}
