// qknorm.c: the two ops video DiTs put on queries and keys before attention. RMSNorm with a
// learned scale over groups of G columns (a head's dimensions, or the full width), statistics in
// double as layernorm.c's; and rotary positions, each pair of a head's dimensions turned by the
// angle of its token. Rows (and for the scale's gradient, its elements) each run on one thread,
// so results do not depend on the thread count.
#include "kernels.h"
#include <math.h>

// one group of G values: out = x r s, r = 1 / sqrt(mean(x^2) + eps)
static real rms_group(real *out, const real *x, const real *s, int G, real eps) {
    double ss = 0;
    for (int c = 0; c < G; c++) ss += (double)x[c] * x[c];
    real r = (real)(1 / sqrt(ss / G + eps));
    for (int c = 0; c < G; c++) out[c] = x[c] * r * s[c];
    return r;
}

void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *scale, int N, int C,
                     int G, int S, real eps) {
    int groups = C / G;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int g = 0; g < groups; g++) {
            size_t o = (size_t)n * C + (size_t)g * G;
            rstd[(size_t)n * groups + g] = rms_group(out + o, inp + o, scale + (size_t)g * G % S, G, eps);
        }
}

// y = x r s with xhat = x r: dx = r (dy s - xhat mean(dy s xhat)) over the group;
// dscale[c mod S] += dy xhat, over the rows in order
void rmsnorm_backward(real *dinp, real *dscale, const real *dout, const real *inp,
                      const real *scale, const real *rstd, int N, int C, int G, int S) {
    int groups = C / G;
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
        for (int n = 0; n < N; n++)
            for (int g = 0; g < groups; g++) {
                size_t o = (size_t)n * C + (size_t)g * G;
                const real *x = inp + o, *dy = dout + o, *s = scale + (size_t)g * G % S;
                real r = rstd[(size_t)n * groups + g];
                double m = 0;
                for (int c = 0; c < G; c++) m += (double)dy[c] * s[c] * x[c] * r;
                m /= G;
                for (int c = 0; c < G; c++) dinp[o + c] += r * (real)(dy[c] * s[c] - x[c] * r * m);
            }
    }
    if (!dscale) return;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int j = 0; j < S; j++) {
        double sum = 0;
        for (int n = 0; n < N; n++)
            for (int c = j; c < C; c += S) {
                size_t i = (size_t)n * C + c;
                sum += (double)dout[i] * inp[i] * rstd[(size_t)n * groups + c / G];
            }
        dscale[j] += (real)sum;
    }
}

// x (B,T,H,dh): the pair (x[2j], x[2j+1]) of every head of token t of image b turned by the angle
// whose (cos, sin) is cs[((b or 0) T + t) dh + 2j, + 1], or backward by its opposite (adding)
static void rope_turn(real *out, const real *inp, const real *cs, int B, int T, int H, int dh,
                      bool per_image, bool backward) {
    real sign = backward ? -1 : 1;
#pragma omp parallel for collapse(2) if ((size_t)B * T * H * dh > PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const real *a = cs + ((size_t)(per_image ? b : 0) * T + t) * dh;
            for (int h = 0; h < H; h++) {
                size_t o = (((size_t)b * T + t) * H + h) * dh;
                for (int j = 0; j < dh; j += 2) {
                    real c = a[j], s = sign * a[j + 1], x0 = inp[o + j], x1 = inp[o + j + 1];
                    real y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
                    if (backward) out[o + j] += y0, out[o + j + 1] += y1;
                    else out[o + j] = y0, out[o + j + 1] = y1;
                }
            }
        }
}

void rope_forward(real *out, const real *inp, const real *cs, int B, int T, int H, int dh,
                  bool per_image) {
    rope_turn(out, inp, cs, B, T, H, dh, per_image, false);
}

void rope_backward(real *dinp, const real *dout, const real *cs, int B, int T, int H, int dh,
                   bool per_image) {
    rope_turn(dinp, dout, cs, B, T, H, dh, per_image, true);
}
