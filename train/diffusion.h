// diffusion.h: the DDPM objective as DiT trains it: 1000 steps, linear betas from 1e-4 to 0.02,
// the model predicts the noise eps (MSE on eps). Sampling uses DDIM (eta = 0) on a subsequence
// of the timesteps, with classifier-free guidance on the noise prediction.
#pragma once
#include "../core/real.h"
#include <stddef.h>

#define DIFFUSION_T 1000

typedef struct Diffusion {
    double alpha_bar[DIFFUSION_T]; // cumulative product of (1 - beta_t)
} Diffusion;

void diffusion_init(Diffusion *d);
// xt = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, elementwise over n values
void diffusion_q_sample(const Diffusion *d, real *xt, const real *x0, const real *eps, int t,
                        size_t n);
// One deterministic DDIM step of x from t to t_prev (-1 for the last step) given predicted eps.
void diffusion_ddim_step(const Diffusion *d, real *x, const real *eps, int t, int t_prev, size_t n);
// The k-th of `steps` evenly spaced timesteps, from DIFFUSION_T-1 (k = 0) down to 0.
int diffusion_timestep(int k, int steps);
