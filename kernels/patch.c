// patch.c: images <-> patch tokens. A token row holds one p x p patch, laid out (c, i, j) like a
// conv weight (D, C, p, p), or (i, j, c) when channels_last, as the DiT final layer produces it.
// Tokens are the (H/p)*(W/p) patches in row-major order; a shard holds tokens [t0, t0 + n), and
// rows past the last patch (padding) are left alone. Both directions ADD into their output, so
// each is the other's backward.
#include "kernels.h"

// visit(token element, image element) for every pixel of the shard's real tokens
#define FOR_PATCH_PIXELS(BODY)                                                                     \
    int gw = W / p, T = (H / p) * gw, row = C * p * p;                                             \
    for (int b = 0; b < B; b++)                                                                    \
        for (int r = 0; r < n && t0 + r < T; r++) {                                                \
            int th = (t0 + r) / gw, tw = (t0 + r) % gw;                                            \
            size_t tok = ((size_t)b * n + r) * row;                                                \
            for (int c = 0; c < C; c++)                                                            \
                for (int i = 0; i < p; i++)                                                        \
                    for (int j = 0; j < p; j++) {                                                  \
                        size_t te = tok + (channels_last ? (i * p + j) * C + c : (c * p + i) * p + j); \
                        size_t ie = (((size_t)b * C + c) * H + th * p + i) * W + tw * p + j;       \
                        BODY;                                                                      \
                    }                                                                              \
        }

// tokens (B, n, C*p*p) += patches of img (B, C, H, W)
void patch_gather(real *tokens, const real *img, int B, int C, int H, int W, int p, int t0, int n,
                  bool channels_last) {
    FOR_PATCH_PIXELS(tokens[te] += img[ie])
}

// img (B, C, H, W) += tokens (B, n, C*p*p) put back in place
void patch_scatter(real *img, const real *tokens, int B, int C, int H, int W, int p, int t0, int n,
                   bool channels_last) {
    FOR_PATCH_PIXELS(img[ie] += tokens[te])
}
