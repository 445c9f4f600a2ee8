// loss.c: masked mean squared error, summed in double. denom is the number of real elements
// over which the mean is taken (globally, across ranks, in sequence-parallel runs).
#include "kernels.h"

double mse_forward(const real *pred, const real *target, const uint8_t *mask, size_t n,
                   double denom) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        if (!mask || mask[i]) s += ((double)pred[i] - target[i]) * ((double)pred[i] - target[i]);
    return s / denom;
}

void mse_backward(real *dpred, real *dtarget, real dloss, const real *pred, const real *target,
                  const uint8_t *mask, size_t n, double denom) {
    for (size_t i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        real g = (real)(2 * dloss * (pred[i] - target[i]) / denom);
        if (dpred) dpred[i] += g;
        if (dtarget) dtarget[i] -= g;
    }
}
