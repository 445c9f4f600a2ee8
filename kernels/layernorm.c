// layernorm.c: LayerNorm over the last dim without affine parameters (DiT uses eps 1e-6).
// Statistics are accumulated in double so the float32 build stays close to the float64 one.
#include "kernels.h"
#include <math.h>

// out, inp are (N,C); mean, rstd are (N)
void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, int N, int C, real eps) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C;
        double m = 0, var = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        real r = (real)(1 / sqrt(var + eps));
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (real)((x[c] - m) * r);
        mean[n] = (real)m;
        rstd[n] = r;
    }
}

// dinp += rstd * (dout - mean(dout) - xhat * mean(dout * xhat))
void layernorm_backward(real *dinp, const real *dout, const real *inp, const real *mean,
                        const real *rstd, int N, int C) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        double gm = 0, gxm = 0;
        for (int c = 0; c < C; c++) {
            gm += g[c];
            gxm += g[c] * (x[c] - mean[n]) * rstd[n];
        }
        gm /= C;
        gxm /= C;
        for (int c = 0; c < C; c++) {
            real xhat = (x[c] - mean[n]) * rstd[n];
            dinp[(size_t)n * C + c] += rstd[n] * (real)(g[c] - gm - xhat * gxm);
        }
    }
}
