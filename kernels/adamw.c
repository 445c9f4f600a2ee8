// adamw.c: AdamW (Loshchilov & Hutter) with bias correction, over one flat buffer.
#include "kernels.h"
#include <math.h>

// step counts from 1; weight decay is decoupled (applied to the parameter, not the gradient)
void adamw_update(real *params, const real *grads, real *m, real *v, size_t n, real lr, real beta1,
                  real beta2, real eps, real weight_decay, real grad_scale, int step) {
    real c1 = 1 - pow(beta1, step), c2 = 1 - pow(beta2, step);
    for (size_t i = 0; i < n; i++) {
        real g = grads[i] * grad_scale;
        m[i] = beta1 * m[i] + (1 - beta1) * g;
        v[i] = beta2 * v[i] + (1 - beta2) * g * g;
        real mhat = m[i] / c1, vhat = v[i] / c2;
        params[i] -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params[i]);
    }
}

double sum_squares(const real *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}
