// qknorm.c: what video DiTs do to queries and keys before attention, as one op: RMSNorm with a
// learned scale over groups of G columns (a head's dimensions, or the full width), statistics in
// double as layernorm.c's; then rotary positions, each pair of a head's dimensions turned by the
// angle of its token. Either part may be absent. Rows (and for the scale's gradient, its
// elements) each run on one thread, so results do not depend on the thread count.
#include "kernels.h"
#include <math.h>

// Element c of a row turned: the pair (c & ~1, c | 1) of the values (self, partner) turned by the
// angle of pair c mod dh in the row's angles a ((cos, sin) at [2j, 2j + 1]), by its opposite when
// sign is -1 (the transpose of the turn: backward)
static inline real turn(real self, real partner, const real *a, int c, int dh, real sign) {
    int j = c % dh & ~1;
    real cs = a[j], sn = sign * a[j + 1];
    return c & 1 ? self * cs + partner * sn : self * cs - partner * sn;
}

// the norm's output before the turn: x r s (x without the norm)
static inline real normed(const real *x, const real *s, const real *r, int c, int G, int S) {
    return s ? x[c] * r[c / G] * s[c % S] : x[c];
}

void qk_norm_rope_forward(real *out, real *rstd, const real *inp, const real *scale,
                          const real *cs, int N, int C, int G, int S, int dh, int A, real eps) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C, *a = cs ? cs + (size_t)(n % A) * dh : NULL;
        real *y = out + (size_t)n * C, *r = scale ? rstd + (size_t)n * (C / G) : NULL;
        for (int g = 0; scale && g < C / G; g++) { // r = 1 / sqrt(mean(x^2) + eps) of each group
            double ss = 0;
            for (int c = g * G; c < (g + 1) * G; c++) ss += (double)x[c] * x[c];
            r[g] = (real)(1 / sqrt(ss / G + eps));
        }
        for (int c = 0; c < C; c++) {
            real z = normed(x, scale, r, c, G, S);
            y[c] = a ? turn(z, normed(x, scale, r, c ^ 1, G, S), a, c, dh, 1) : z;
        }
    }
}

// dz = the turn's transpose applied to dy; then through y = x r s with xhat = x r:
// dx = r (dz s - xhat mean(dz s xhat)) over the group; dscale[c mod S] += dz xhat, over the rows
// in order
void qk_norm_rope_backward(real *dinp, real *dscale, const real *dout, const real *inp,
                           const real *scale, const real *rstd, const real *cs, int N, int C,
                           int G, int S, int dh, int A) {
#define DZ(dy, a, c) ((a) ? turn((dy)[c], (dy)[(c) ^ 1], a, c, dh, -1) : (dy)[c])
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
        for (int n = 0; n < N; n++) {
            const real *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const real *a = cs ? cs + (size_t)(n % A) * dh : NULL;
            real *dx = dinp + (size_t)n * C;
            if (!scale) {
                for (int c = 0; c < C; c++) dx[c] += DZ(dy, a, c);
                continue;
            }
            for (int g = 0; g < C / G; g++) {
                real r = rstd[(size_t)n * (C / G) + g];
                double m = 0;
                for (int c = g * G; c < (g + 1) * G; c++) m += (double)DZ(dy, a, c) * scale[c % S] * x[c] * r;
                m /= G;
                for (int c = g * G; c < (g + 1) * G; c++)
                    dx[c] += r * (real)(DZ(dy, a, c) * scale[c % S] - x[c] * r * m);
            }
        }
    }
    if (!dscale) return;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int j = 0; j < S; j++) {
        double sum = 0;
        for (int n = 0; n < N; n++) {
            const real *dy = dout + (size_t)n * C, *a = cs ? cs + (size_t)(n % A) * dh : NULL;
            for (int c = j; c < C; c += S)
                sum += (double)DZ(dy, a, c) * inp[(size_t)n * C + c] * rstd[(size_t)n * (C / G) + c / G];
        }
        dscale[j] += (real)sum;
    }
#undef DZ
}
