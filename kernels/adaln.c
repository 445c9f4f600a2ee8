// adaln.c: adaptive LayerNorm pieces of a DiT block; per-sample vectors broadcast over tokens.
// Forward runs rows on the threads; backward runs blocks of 16 columns, each thread summing its
// columns' shift, scale or gate gradients over the rows in order (in registers). A thread's span of
// rows, or its block of columns, runs at the CPU's vector width (SIMD_CLONES).
#include "../core/cpu.h"
#include "kernels.h"

#define COLS 16

// rows [r0, r1) of the (B*T, D) tensors
SIMD_BODY void modulate_rows(real *out, const real *x, const real *shift, const real *scale, int T,
                             int D, long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        const real *sh = shift + r / T * D, *sc = scale + r / T * D;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] * (1 + sc[d]) + sh[d];
    }
}
SIMD_CLONES(modulate_rows, (real *out, const real *x, const real *shift, const real *scale, int T,
                            int D, long r0, long r1), (out, x, shift, scale, T, D, r0, r1))

// out, x are (B,T,D); shift, scale are (B,D): out = x * (1 + scale) + shift
void modulate_forward(real *out, const real *x, const real *shift, const real *scale, int B, int T,
                      int D) {
    long rows = (long)B * T, per = D < SPAN ? SPAN / D : 1;
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (long r = 0; r < rows; r += per)
        modulate_rows_simd(out, x, shift, scale, T, D, r, r + (long)span_len(r, rows, per));
}

// columns [d0, d0 + w) of every row, w <= COLS
SIMD_BODY void modulate_columns(real *dx, real *dshift, real *dscale, const real *dout,
                                const real *x, const real *scale, int B, int T, int D, int d0, int w) {
    for (int b = 0; b < B; b++) { // the sums of shift and scale stay in registers over tokens
        real sh[COLS], sc[COLS];
        const real *scl = scale + (size_t)b * D + d0;
        for (int j = 0; j < w; j++)
            sh[j] = dshift ? dshift[b * D + d0 + j] : 0, sc[j] = dscale ? dscale[b * D + d0 + j] : 0;
        for (int t = 0; t < T; t++) {
            size_t o = ((size_t)b * T + t) * D + d0;
            if (dx)
                for (int j = 0; j < w; j++) dx[o + j] += dout[o + j] * (1 + scl[j]);
            for (int j = 0; j < w; j++) sh[j] += dout[o + j], sc[j] += dout[o + j] * x[o + j];
        }
        for (int j = 0; j < w; j++) {
            if (dshift) dshift[b * D + d0 + j] = sh[j];
            if (dscale) dscale[b * D + d0 + j] = sc[j];
        }
    }
}
SIMD_CLONES(modulate_columns, (real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                               const real *scale, int B, int T, int D, int d0, int w),
            (dx, dshift, dscale, dout, x, scale, B, T, D, d0, w))

void modulate_backward(real *dx, real *dshift, real *dscale, const real *dout, const real *x,
                       const real *scale, int B, int T, int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (int d0 = 0; d0 < D; d0 += COLS)
        modulate_columns_simd(dx, dshift, dscale, dout, x, scale, B, T, D, d0,
                              D - d0 < COLS ? D - d0 : COLS);
}

SIMD_BODY void gated_add_rows(real *out, const real *x, const real *gate, const real *y, int T, int D,
                              long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        const real *g = gate + r / T * D;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] + g[d] * y[r * D + d];
    }
}
SIMD_CLONES(gated_add_rows, (real *out, const real *x, const real *gate, const real *y, int T, int D,
                             long r0, long r1), (out, x, gate, y, T, D, r0, r1))

// out, x, y are (B,T,D); gate is (B,D): out = x + gate * y
void gated_add_forward(real *out, const real *x, const real *gate, const real *y, int B, int T,
                       int D) {
    long rows = (long)B * T, per = D < SPAN ? SPAN / D : 1;
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (long r = 0; r < rows; r += per)
        gated_add_rows_simd(out, x, gate, y, T, D, r, r + (long)span_len(r, rows, per));
}

SIMD_BODY void gated_add_columns(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                                 const real *y, int B, int T, int D, int d0, int w) {
    for (int b = 0; b < B; b++) { // the gate's sums stay in registers over the tokens
        real dg[COLS];
        const real *g = gate + (size_t)b * D + d0;
        for (int j = 0; j < w; j++) dg[j] = dgate ? dgate[b * D + d0 + j] : 0;
        for (int t = 0; t < T; t++) {
            size_t o = ((size_t)b * T + t) * D + d0;
            if (dx)
                for (int j = 0; j < w; j++) dx[o + j] += dout[o + j];
            if (dy)
                for (int j = 0; j < w; j++) dy[o + j] += dout[o + j] * g[j];
            for (int j = 0; j < w; j++) dg[j] += dout[o + j] * y[o + j];
        }
        if (dgate)
            for (int j = 0; j < w; j++) dgate[b * D + d0 + j] = dg[j];
    }
}
SIMD_CLONES(gated_add_columns, (real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                                const real *y, int B, int T, int D, int d0, int w),
            (dx, dgate, dy, dout, gate, y, B, T, D, d0, w))

void gated_add_backward(real *dx, real *dgate, real *dy, const real *dout, const real *gate,
                        const real *y, int B, int T, int D) {
#pragma omp parallel for if ((size_t)B * T * D > PAR_MIN)
    for (int d0 = 0; d0 < D; d0 += COLS)
        gated_add_columns_simd(dx, dgate, dy, dout, gate, y, B, T, D, d0,
                               D - d0 < COLS ? D - d0 : COLS);
}
