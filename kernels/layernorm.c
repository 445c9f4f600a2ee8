// layernorm.c: LayerNorm over the last dim without affine parameters (DiT uses eps 1e-6).
// Statistics are accumulated in double so the float32 build stays close to the float64 one. Each
// row's sums run over its columns in order, ROWS rows side by side: their additions are then
// independent chains, not one chain that waits on each add (a 64-wide row is that short). A block of
// ROWS rows runs at the CPU's vector width (SIMD_CLONES).
#include "../core/cpu.h"
#include "kernels.h"
#include <math.h>

#define ROWS 8

// k <= ROWS rows of inp (k, C) into out; a constant k (the full blocks) keeps the sums in registers
static inline void forward_rows(real *out, real *mean, real *rstd, const real *x, int k, int C,
                                real eps) {
    double m[ROWS] = {0}, var[ROWS] = {0};
    for (int c = 0; c < C; c++)
        for (int r = 0; r < k; r++) m[r] += x[(size_t)r * C + c];
    for (int r = 0; r < k; r++) m[r] /= C;
    for (int c = 0; c < C; c++)
        for (int r = 0; r < k; r++) {
            double d = x[(size_t)r * C + c] - m[r];
            var[r] += d * d;
        }
    for (int r = 0; r < k; r++) {
        real rs = (real)(1 / sqrt(var[r] / C + eps));
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = (real)((x[(size_t)r * C + c] - m[r]) * rs);
        mean[r] = (real)m[r];
        rstd[r] = rs;
    }
}

SIMD_BODY void forward_block(real *out, real *mean, real *rstd, const real *x, int k, int C,
                             real eps) {
    if (k == ROWS) forward_rows(out, mean, rstd, x, ROWS, C, eps);
    else forward_rows(out, mean, rstd, x, k, C, eps);
}
SIMD_CLONES(forward_block, (real *out, real *mean, real *rstd, const real *x, int k, int C, real eps),
            (out, mean, rstd, x, k, C, eps))

// out, inp are (N,C); mean, rstd are (N)
void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, int N, int C, real eps) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n += ROWS) {
        size_t o = (size_t)n * C;
        forward_block_simd(out + o, mean + n, rstd + n, inp + o, N - n < ROWS ? N - n : ROWS, C, eps);
    }
}

// k <= ROWS rows: dinp += rstd * (dout - mean(dout) - xhat * mean(dout * xhat))
static inline void backward_rows(real *dinp, const real *g, const real *x, const real *mean,
                                 const real *rstd, int k, int C) {
    double gm[ROWS] = {0}, gxm[ROWS] = {0};
    real mu[ROWS], rs[ROWS];
    for (int r = 0; r < k; r++) mu[r] = mean[r], rs[r] = rstd[r];
    for (int c = 0; c < C; c++)
        for (int r = 0; r < k; r++) {
            real gi = g[(size_t)r * C + c];
            gm[r] += gi;
            gxm[r] += gi * (x[(size_t)r * C + c] - mu[r]) * rs[r];
        }
    for (int r = 0; r < k; r++) {
        double gmr = gm[r] / C, gxmr = gxm[r] / C;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)r * C + c;
            real xhat = (x[i] - mean[r]) * rstd[r];
            dinp[i] += rstd[r] * (real)(g[i] - gmr - xhat * gxmr);
        }
    }
}

SIMD_BODY void backward_block(real *dinp, const real *g, const real *x, const real *mean,
                              const real *rstd, int k, int C) {
    if (k == ROWS) backward_rows(dinp, g, x, mean, rstd, ROWS, C);
    else backward_rows(dinp, g, x, mean, rstd, k, C);
}
SIMD_CLONES(backward_block, (real *dinp, const real *g, const real *x, const real *mean,
                             const real *rstd, int k, int C), (dinp, g, x, mean, rstd, k, C))

void layernorm_backward(real *dinp, const real *dout, const real *inp, const real *mean,
                        const real *rstd, int N, int C) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n += ROWS) {
        size_t o = (size_t)n * C;
        backward_block_simd(dinp + o, dout + o, inp + o, mean + n, rstd + n,
                            N - n < ROWS ? N - n : ROWS, C);
    }
}
