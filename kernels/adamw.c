// adamw.c: AdamW (Loshchilov & Hutter) with bias correction, over one flat buffer. The loops run at
// the CPU's vector width (SIMD_CLONES), a span of the buffer or 8 chunks of the norm at a time.
#include "../core/cpu.h"
#include "kernels.h"
#include <math.h>

SIMD_BODY void adamw_span(real *params, const real *grads, real *m, real *v, size_t n, real lr,
                          real beta1, real beta2, real eps, real weight_decay, real grad_scale,
                          real c1, real c2) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        real g = grads[i] * grad_scale;
        m[i] = beta1 * m[i] + (1 - beta1) * g;
        v[i] = beta2 * v[i] + (1 - beta2) * g * g;
        real mhat = m[i] / c1, vhat = v[i] / c2;
        params[i] -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params[i]);
    }
}
SIMD_CLONES(adamw_span, (real *params, const real *grads, real *m, real *v, size_t n, real lr,
                         real beta1, real beta2, real eps, real weight_decay, real grad_scale,
                         real c1, real c2),
            (params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2))

// step counts from 1; weight decay is decoupled (applied to the parameter, not the gradient)
void adamw_update(real *params, const real *grads, real *m, real *v, size_t n, real lr, real beta1,
                  real beta2, real eps, real weight_decay, real grad_scale, int step) {
    real c1 = 1 - pow(beta1, step), c2 = 1 - pow(beta2, step);
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN)
        adamw_span_simd(params + i, grads + i, m + i, v + i, span_len(i, n, SPAN), lr, beta1, beta2,
                        eps, weight_decay, grad_scale, c1, c2);
}

SIMD_BODY void ema_span(real *ema, const real *params, size_t n, double decay) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) ema[i] = (real)(decay * ema[i] + (1 - decay) * params[i]);
}
SIMD_CLONES(ema_span, (real *ema, const real *params, size_t n, double decay), (ema, params, n, decay))

// ema = decay ema + (1 - decay) params, the decay in double
void ema_update(real *ema, const real *params, size_t n, double decay) {
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i += SPAN)
        ema_span_simd(ema + i, params + i, span_len(i, n, SPAN), decay);
}

enum { CHUNKS = 64, SIDE = 8 };

// the sums of squares of chunks c0 .. c0 + SIDE - 1 of x (n), into part
SIMD_BODY void sum_squares_side(double *part, const real *x, size_t n, int c0) {
    size_t lo[SIDE], hi[SIDE], common = n;
    for (int j = 0; j < SIDE; j++) {
        lo[j] = n * (c0 + j) / CHUNKS, hi[j] = n * (c0 + j + 1) / CHUNKS;
        common = hi[j] - lo[j] < common ? hi[j] - lo[j] : common;
    }
    double acc[SIDE] = {0};
    for (size_t i = 0; i < common; i++)
        for (int j = 0; j < SIDE; j++) acc[j] += (double)x[lo[j] + i] * x[lo[j] + i];
    for (int j = 0; j < SIDE; j++) { // a chunk may be one longer than the shortest
        for (size_t i = lo[j] + common; i < hi[j]; i++) acc[j] += (double)x[i] * x[i];
        part[c0 + j] = acc[j];
    }
}
SIMD_CLONES(sum_squares_side, (double *part, const real *x, size_t n, int c0), (part, x, n, c0))

// in 64 fixed chunks summed in order, so the result does not depend on the thread count; a
// thread sums 8 chunks side by side, so their additions are independent chains
double sum_squares(const real *x, size_t n) {
    double part[CHUNKS] = {0}, s = 0;
#pragma omp parallel for if (n > PAR_MIN)
    for (int c0 = 0; c0 < CHUNKS; c0 += SIDE) sum_squares_side_simd(part, x, n, c0);
    for (int c = 0; c < CHUNKS; c++) s += part[c];
    return s;
}
