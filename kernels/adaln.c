// adaln.c: adaptive LayerNorm pieces of a DiT block; per-sample vectors broadcast over tokens.
// Forward runs rows on the threads; backward runs blocks of 16 columns, each thread summing its
// columns' shift, scale or gate gradients over the rows in order.
#include "kernels.h"

#define COLS 16

// out, x are (B,T,D); shift, scale are (B,D): out = x * (1 + scale) + shift
void modulate_forward(real *out, const real *x, const real *shift, const real *scale, int B, int T,
                      int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (long r = 0; r < (long)B * T; r++) {
        const real *sh = shift + r / T * D, *sc = scale + r / T * D;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] * (1 + sc[d]) + sh[d];
    }
}

void modulate_backward(real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                       const real *scale, int B, int T, int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (int d0 = 0; d0 < D; d0 += COLS) {
        int d1 = d0 + COLS < D ? d0 + COLS : D; // one loop per gradient, so that each vectorizes
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)b * T + t) * D;
                if (dx)
                    for (int d = d0; d < d1; d++) dx[o + d] += dout[o + d] * (1 + scale[b * D + d]);
                if (dshift)
                    for (int d = d0; d < d1; d++) dshift[b * D + d] += dout[o + d];
                if (dscale)
                    for (int d = d0; d < d1; d++) dscale[b * D + d] += dout[o + d] * x[o + d];
            }
    }
}

// out, x, y are (B,T,D); gate is (B,D): out = x + gate * y
void gated_add_forward(real *out, const real *x, const real *gate, const real *y, int B, int T,
                       int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (long r = 0; r < (long)B * T; r++) {
        const real *g = gate + r / T * D;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] + g[d] * y[r * D + d];
    }
}

void gated_add_backward(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                        const real *y, int B, int T, int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (int d0 = 0; d0 < D; d0 += COLS) {
        int d1 = d0 + COLS < D ? d0 + COLS : D;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)b * T + t) * D;
                if (dx)
                    for (int d = d0; d < d1; d++) dx[o + d] += dout[o + d];
                if (dgate)
                    for (int d = d0; d < d1; d++) dgate[b * D + d] += dout[o + d] * y[o + d];
                if (dy)
                    for (int d = d0; d < d1; d++) dy[o + d] += dout[o + d] * gate[b * D + d];
            }
    }
}
