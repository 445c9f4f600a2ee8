// diffusion.c: see diffusion.h.
#include "diffusion.h"
#include <math.h>

void diffusion_init(Diffusion *d) {
    double ab = 1;
    for (int t = 0; t < DIFFUSION_T; t++) {
        double beta = 1e-4 + (0.02 - 1e-4) * t / (DIFFUSION_T - 1);
        ab *= 1 - beta;
        d->alpha_bar[t] = ab;
    }
}

void diffusion_q_sample(const Diffusion *d, real *xt, const real *x0, const real *eps, int t,
                        size_t n) {
    double a = sqrt(d->alpha_bar[t]), s = sqrt(1 - d->alpha_bar[t]);
    for (size_t i = 0; i < n; i++) xt[i] = (real)(a * x0[i] + s * eps[i]);
}

// x0 = (x - sqrt(1 - ab_t) eps) / sqrt(ab_t), clipped to [-1, 1] as the reference samplers do;
// x_prev = sqrt(ab_prev) x0 + sqrt(1 - ab_prev) eps
void diffusion_ddim_step(const Diffusion *d, real *x, const real *eps, int t, int t_prev, size_t n) {
    double ab = d->alpha_bar[t], ab_prev = t_prev >= 0 ? d->alpha_bar[t_prev] : 1;
    for (size_t i = 0; i < n; i++) {
        double x0 = (x[i] - sqrt(1 - ab) * eps[i]) / sqrt(ab);
        x0 = fmin(1, fmax(-1, x0));
        double e = (x[i] - sqrt(ab) * x0) / sqrt(1 - ab); // eps consistent with the clipped x0
        x[i] = (real)(sqrt(ab_prev) * x0 + sqrt(1 - ab_prev) * e);
    }
}

int diffusion_timestep(int k, int steps) {
    return (int)((long)(DIFFUSION_T - 1) * (steps - 1 - k) / (steps > 1 ? steps - 1 : 1));
}
