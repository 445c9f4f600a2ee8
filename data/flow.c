// flow.c: see flow.h.
#include "flow.h"
#include "../core/rng.h"
#include <math.h>

double flow_sample_t(uint64_t seed, uint64_t stream, uint64_t index) {
    return 1 / (1 + exp(-rng_normal(seed, stream, index)));
}

void flow_interpolate(real *xt, real *v, const real *x0, const real *eps, double t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        xt[i] = (real)((1 - t) * x0[i] + t * eps[i]);
        v[i] = eps[i] - x0[i];
    }
}

double flow_time(int k, int steps) { return 1.0 - (double)k / steps; }
